"""The `ray` executor: evaluates candidates on a Ray cluster (an existing one, or one it starts on this machine).

Each job travels as data (the run's recipe and the job, `hiera_core.pipeline`); a worker rebuilds the pipeline from
the plugins installed there and evaluates in a folder of its own machine. Builds go to CPU workers; on an
architecture with an accelerator (cuda: a GPU) the stages that hold it go on to a worker holding one, which runs the
pipeline from the start (a build cached on its node is not rebuilt). While the accelerators have a free share
(`device_jobs` each), a job goes there at once, its judge starting beside its build as with `local`. Answers come
back to the run's process, which alone writes the run directory. docs/distributed.md says what runs where.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import attrs
import structlog

from hiera_core import EvalJob, ExecutorError, hookimpl
from hiera_core.pipeline import CannotTravel, DevicePending, Evaluated, Pipeline, decode_answer, evaluate_elsewhere
from hiera_core.plugins import one_line
from hiera_core.records import Crashed

log = structlog.get_logger(__name__)


@attrs.frozen(kw_only=True)
class RayConfig:
    """`[executor.ray]`."""

    address: str = ""
    """The cluster: `auto` (the one `ray start` runs on this machine), `HOST:PORT` (its GCS), `ray://HOST:PORT` (Ray
    Client); empty: a cluster of this machine that hiera starts for the run and stops after it."""
    cpus: int = 0
    """A cluster hiera starts: its CPU workers (0: this machine's cores)."""
    gpus: int = -1
    """A cluster hiera starts: its GPUs (-1: those Ray finds)."""
    build_cpus: float = 1.0
    """CPUs a job's stages before the device hold (all of them, on an architecture without an accelerator)."""
    device_cpus: float = 1.0
    """CPUs a job's device stages hold beside their accelerator."""
    device_jobs: int = 6
    """Jobs whose device stages one accelerator takes at once (each asks for 1/`device_jobs` of it): their judges
    start together, and the device lock lets one at a time time or profile, as with `local`, where a round's
    candidates are all under way at once. With 1, each judge's start-up (~12 s on the H200) waits for the one before
    to end: the README's run took ~690 s through Ray, against ~300 s through `local` (2026-12-03). A job that finds a
    share free goes to it whole, build included, so that its judge starts beside its build (`Evaluator.start`); the
    others build on CPU workers first: with every build first, each round's first judge started ~20 s later than
    through `local` (on an H100, 2026-12-06: 373 s against 270 s)."""
    retries: int = 1
    """How many times a job whose worker or node died is started again before it is recorded as crashed."""
    runs: int = 0
    """Runs of a suite (`--all-tasks`) at once; 0: one per accelerator of the cluster, or one per 2 CPUs without."""
    connect_timeout_s: float = 10.0

    def __attrs_post_init__(self) -> None:
        if self.retries < 0 or self.runs < 0 or self.build_cpus < 0 or self.device_cpus < 0:
            raise ValueError("retries, runs, build_cpus and device_cpus must be >= 0")
        if self.device_jobs < 1:
            raise ValueError("device_jobs must be >= 1")


class _Cluster:
    """The process's one connection to Ray (Ray itself keeps one per process), shared by every executor of the
    process (the runs of a suite) and dropped when the last lets go; a cluster hiera started stops then."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0
        self.temp_dir: str | None = None
        self.cancelled = threading.Event()
        """Set by Ctrl-C during a suite: every run of the process stops its work."""
        self.device_phases = 0
        """Jobs of this process (every run of a suite) on an accelerator's share now, or waiting for one."""

    def acquire(self, config: RayConfig) -> None:
        import ray

        with self.lock:
            if self.users == 0 and not ray.is_initialized():
                self._connect(ray, config)
                self.cancelled.clear()
            self.users += 1

    def device_phase(self, change: int, *, below: int | None = None) -> bool:
        """Count a device phase in (+1) or out (-1); with `below`, only while fewer than that many are counted."""
        with self.lock:
            if below is not None and self.device_phases >= below:
                return False
            self.device_phases += change
            return True

    def release(self) -> None:
        import ray

        with self.lock:
            self.users -= 1
            if self.users == 0 and ray.is_initialized():
                ray.shutdown()
                if self.temp_dir:
                    shutil.rmtree(self.temp_dir, ignore_errors=True)
                    self.temp_dir = None

    def _connect(self, ray: Any, config: RayConfig) -> None:
        quiet = {"log_to_driver": False, "logging_level": "ERROR", "configure_logging": True}
        if config.address:
            _reachable(config.address, config.connect_timeout_s)
            try:
                ray.init(address=config.address, **quiet)
            except Exception as exc:
                hint = (
                    (
                        " (a cluster with token authentication, Ray's default, also needs RAY_AUTH_MODE=token and its"
                        " token where hiera runs: docs/distributed.md)"
                    )
                    if isinstance(exc, ConnectionError)
                    else ""
                )
                raise ExecutorError(f"the Ray cluster at '{config.address}' cannot be used: {one_line(exc)}{hint}") from exc
            return
        self.temp_dir = tempfile.mkdtemp(prefix="hiera-ray-")  # its own folder: never taken for another cluster's
        resources = {"num_cpus": config.cpus or os.cpu_count() or 1}
        if config.gpus >= 0:
            resources["num_gpus"] = config.gpus
        try:
            ray.init(include_dashboard=False, _temp_dir=self.temp_dir, _node_ip_address="127.0.0.1", **resources, **quiet)
        except Exception as exc:
            raise ExecutorError(f"a Ray cluster could not be started on this machine: {one_line(exc)}") from exc


_CLUSTER = _Cluster()


def _reachable(address: str, timeout_s: float) -> None:
    """One line and ExecutorError when nothing answers at a `HOST:PORT` address (Ray itself would retry for minutes)."""
    if address == "auto":
        return  # Ray finds the cluster on this machine, or says at once that there is none
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except ValueError:
        raise ExecutorError(f"[executor.ray] address '{address}' is not auto, HOST:PORT or ray://HOST:PORT") from None
    except OSError as exc:
        raise ExecutorError(f"the Ray cluster at '{address}' cannot be reached: {exc.strerror or exc}") from None


def _evaluate(request: dict[str, Any]) -> dict[str, Any]:
    """On a worker: one job, in a folder of the worker's machine, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="hiera-job-") as scratch:
        return evaluate_elsewhere(request, Path(scratch) / "job")


@attrs.define
class _Attempt:
    job: EvalJob
    device: bool
    """False: the stages before the device; True: the whole pipeline (on a worker holding the accelerator, if any)."""
    started: int = 1
    pending: DevicePending | None = None
    """What the build phase measured, once it passed."""


class RayExecutor:
    name: ClassVar[str] = "ray"
    config_class: ClassVar[type] = RayConfig

    def __init__(self, config: RayConfig) -> None:
        self.config = config
        self.opened = False

    def open(self, pipeline: Pipeline) -> None:
        if pipeline.recipe is None:
            raise CannotTravel(f"the ray executor evaluates in other processes: {pipeline.cannot_travel}")
        if not self.opened:
            _CLUSTER.acquire(self.config)
            self.opened = True

    def close(self) -> None:
        if self.opened:
            self.opened = False
            _CLUSTER.release()

    def cancel(self) -> None:
        _CLUSTER.cancelled.set()

    def concurrent_runs(self, pipeline: Pipeline) -> int:
        if self.config.runs:
            return self.config.runs
        import ray

        self.open(pipeline)
        resources = ray.cluster_resources()
        accelerator = pipeline.accelerator
        return max(1, int(resources.get(accelerator, 0) if accelerator else resources.get("CPU", 1) // 2))

    def run(self, jobs: Iterable[EvalJob], pipeline: Pipeline) -> Iterator[tuple[EvalJob, Evaluated]]:
        jobs = list(jobs)
        if not jobs:
            return
        import ray

        self.open(pipeline)
        remote = ray.remote(max_retries=0)(_evaluate)  # a dead worker is retried here, once, and said so
        accelerator = pipeline.accelerator
        device_options: dict[str, Any] = {"num_cpus": self.config.device_cpus}
        share = 1 / self.config.device_jobs  # of one accelerator: the device lock, not Ray, serialises the timing
        if accelerator == "GPU":
            device_options["num_gpus"] = share
        elif accelerator:
            device_options["resources"] = {accelerator: share}
        shares = round(ray.cluster_resources().get(accelerator, 0) * self.config.device_jobs) if accelerator else 0
        in_flight: dict[Any, _Attempt] = {}

        def submit(attempt: _Attempt) -> None:
            if accelerator and not attempt.device and _CLUSTER.device_phase(+1, below=shares):
                attempt.device = True  # a share is free: the build beside the judge's start
                log.info("ray_whole_job", candidate=attempt.job.candidate.id, accelerator=accelerator)
            elif accelerator and attempt.device:
                _CLUSTER.device_phase(+1)
            whole = attempt.device or not accelerator
            options = device_options if whole and accelerator else {"num_cpus": self.config.build_cpus}
            in_flight[remote.options(**options).remote(pipeline.request(attempt.job, device=whole))] = attempt

        for job in jobs:
            submit(_Attempt(job=job, device=False))
        try:
            while in_flight:
                ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=0.5)
                if _CLUSTER.cancelled.is_set():
                    raise ExecutorError("cancelled: the suite was interrupted")
                if not ready:
                    continue
                ref = ready[0]
                attempt = in_flight.pop(ref)
                if accelerator and attempt.device:
                    _CLUSTER.device_phase(-1)
                try:
                    answer = decode_answer(ray.get(ref))
                except ray.exceptions.RayTaskError as exc:
                    # hiera's code on the worker raised (an evaluator's failure is already a Crashed record): the worker
                    # cannot rebuild the run's pipeline (a plugin or module missing there), which no candidate fixes
                    raise ExecutorError(f"a Ray worker cannot evaluate this run: {_cause(exc)}") from None
                except ray.exceptions.RayError as exc:  # the worker or its node died under it
                    reason = one_line(exc).splitlines()[0][:300]
                    if attempt.started <= self.config.retries:
                        log.warning("ray_worker_lost", candidate=attempt.job.candidate.id, reason=reason)
                        attempt.started += 1
                        submit(attempt)
                        continue
                    yield (
                        attempt.job,
                        Evaluated(
                            evaluation=Crashed(reason=f"its Ray worker died {attempt.started} time(s): {reason}"),
                            attempts=attempt.started,
                        ),
                    )
                    continue
                if isinstance(answer, DevicePending):
                    log.info("ray_device_stages", candidate=attempt.job.candidate.id, accelerator=accelerator)
                    submit(_Attempt(job=attempt.job, device=True, started=attempt.started, pending=answer))
                    continue
                yield attempt.job, _merged(answer, attempt)
        finally:
            for ref, attempt in in_flight.items():  # Ctrl-C, or the run stopped: the cluster's work for it stops too
                if accelerator and attempt.device:
                    _CLUSTER.device_phase(-1)
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 -- a cluster already gone has nothing left to cancel
                    pass


def _merged(answer: Evaluated, attempt: _Attempt) -> Evaluated:
    """The device phase's answer with the build phase's own stage times (the device phase found its build cached)."""
    if attempt.pending is None:
        return attrs.evolve(answer, attempts=attempt.started)
    return attrs.evolve(
        answer,
        stage_s={**answer.stage_s, **attempt.pending.stage_s},
        wall_s=answer.wall_s + attempt.pending.wall_s,
        attempts=attempt.started,
    )


def _cause(exc: Exception) -> str:
    cause = getattr(exc, "cause", None)
    return one_line(cause) if isinstance(cause, BaseException) else one_line(exc).splitlines()[0]


@hookimpl
def hiera_register_executors():
    return [RayExecutor]
