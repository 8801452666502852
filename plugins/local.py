"""The `local` executor: evaluates candidates on this machine, a few at a time.

By default (`workers = 0`) how many at a time follows the architecture: where its device stages occupy an
accelerator (`Architecture.accelerator`, "GPU" for cuda) and serialise on its lock, a round's candidates are
evaluated at once, one per CPU core at most, so that their builds overlap each other and the device time of
those built before; where the timing runs on the CPU itself (the host), one at a time, since a build beside a
timing would slow the timing down."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import ClassVar

import attrs

from hiera_core import EvalJob, ExecutorError, hookimpl
from hiera_core.pipeline import Evaluated, Pipeline
from hiera_judge import judging


@attrs.frozen(kw_only=True)
class LocalConfig:
    workers: int = 0
    """Candidates evaluated concurrently; 0: by the architecture (see the module). Stages that time or use a
    device serialise on their own lock."""
    runs: int = 1
    """Runs of a suite (`hiera run --all-tasks`) at once, each in a thread of this process: on a GPU, the builds and
    judge start-ups of some overlap the device time of the others (the device stages still take its lock one at a
    time)."""

    def __attrs_post_init__(self) -> None:
        if self.workers < 0:
            raise ValueError("workers must be >= 0 (0: as the architecture allows)")
        if self.runs < 1:
            raise ValueError("runs must be >= 1")


class _Stop:
    """Ctrl-C during a suite whose runs go on in threads (`runs` > 1). Each run makes its own session, so its own
    executor: the stop is the process's, set by any of them and cleared when the last one closes."""

    lock = threading.Lock()
    users = 0
    asked = threading.Event()


class LocalExecutor:
    name: ClassVar[str] = "local"
    config_class: ClassVar[type] = LocalConfig

    def __init__(self, config: LocalConfig) -> None:
        self.config = config

    def workers(self, pipeline: Pipeline, jobs: int) -> int:
        """How many of `jobs` candidates are evaluated at once under `pipeline`."""
        if self.config.workers:
            return self.config.workers
        if pipeline.accelerator is None:
            return 1
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        return max(1, min(jobs, cores))

    def concurrent_runs(self, pipeline: Pipeline) -> int:
        return self.config.runs

    def open(self, pipeline: Pipeline) -> None:
        with _Stop.lock:
            _Stop.users += 1

    def close(self) -> None:
        with _Stop.lock:
            _Stop.users -= 1
            if _Stop.users == 0:  # the suite's last run has ended: nothing is left to stop
                _Stop.asked.clear()
                judging.allow_waits()

    def cancel(self) -> None:
        """Every run of the suite stops at its next candidate; of those under way, the ones judging end as they are
        and the ones waiting for the device stop waiting (`judging.interrupt_waits`), to be judged when the run
        resumes."""
        _Stop.asked.set()
        judging.interrupt_waits()

    def run(self, jobs: Iterable[EvalJob], pipeline: Pipeline) -> Iterator[tuple[EvalJob, Evaluated]]:
        jobs = list(jobs)
        workers = self.workers(pipeline, len(jobs))
        if workers == 1:
            for job in jobs:
                self._go_on()
                yield job, pipeline.evaluate(job)
            return
        pool = ThreadPoolExecutor(max_workers=workers)
        try:
            futures = [(job, pool.submit(self._evaluate, pipeline, job)) for job in jobs]
            stopped: BaseException | None = None
            for job, future in futures:  # after a candidate's failure or interrupt, every result that came in is given
                try:
                    evaluated = future.result()
                except (Exception, judging.Interrupted) as exc:  # noqa: BLE001 -- raised once the others are given
                    stopped = stopped or exc
                    continue
                yield job, evaluated
            if stopped is not None:
                raise stopped
        except KeyboardInterrupt:  # Ctrl-C where the results are read: the waits of those under way end too
            self.cancel()
            raise
        finally:  # interrupted: the candidates not started are dropped, those under way end as they are
            pool.shutdown(wait=True, cancel_futures=True)

    def _evaluate(self, pipeline: Pipeline, job: EvalJob) -> Evaluated:
        self._go_on()
        return pipeline.evaluate(job)

    def _go_on(self) -> None:
        if _Stop.asked.is_set():
            raise ExecutorError("cancelled: the suite was interrupted")


@hookimpl
def hiera_register_executors():
    return [LocalExecutor]


@hookimpl
def hiera_run_defaults() -> dict[str, str]:
    return {"executor": LocalExecutor.name}
