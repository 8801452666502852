"""The evaluation pipeline: what turns one candidate's `EvalJob` into its evaluation, in the run's process or in
another one (an executor's worker, on this machine or another).

A run's session builds its `Pipeline`. An executor evaluating in this process calls `pipeline.evaluate(job)`; one
evaluating elsewhere sends `pipeline.recipe` (data: the run's resolved configuration and the plugin modules it
registered) with the job, encoded by the one converter (`encode_request`), and calls `evaluate_elsewhere` there:
the pipeline is rebuilt from the plugins installed there, the job evaluated in a folder of that machine, and the
answer (`Evaluated`, with the text files the stages wrote) comes back the same way. Only the run's process writes
the run directory.
"""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path
from typing import Any, cast

import attrs
import pluggy
import structlog

from hiera_core import protocols, records
from hiera_core.config import ResolvedConfig, RunConfig, config_from_table
from hiera_core.errors import HieraError
from hiera_core.plugins import collect, make_plugin_manager
from hiera_core.protocols import Architecture, EvalJob, Evaluator, StagePassed
from hiera_core.records import Evaluation, Measured
from hiera_core.serialization import from_dict, to_dict
from hiera_core.store import write_text_atomic
from hiera_judge import sandbox
from hiera_judge.judging import leave_timing_cores, recording_holds

log = structlog.get_logger(__name__)

SPACE_CHECK = "space-check"
"""The name under which a candidate's space check is timed, beside its evaluator stages (`stage_s`)."""

PIPELINE_HOOKS = ("hiera_addhooks", "hiera_register_architectures", "hiera_register_evaluators")
"""The hooks whose plugins a rebuilt pipeline needs; an object plugin implementing one cannot be rebuilt elsewhere."""

FILE_LIMIT_BYTES = 1 << 20
"""A text file a stage wrote elsewhere larger than this does not come back (its first part does)."""


class CannotTravel(HieraError):
    """The run's pipeline cannot be rebuilt in another process: a plugin it needs was registered as an object."""


@attrs.frozen(kw_only=True)
class Recipe:
    """What another process needs to rebuild a run's pipeline: data only, for any machine where the same hiera and
    plugins are installed."""

    config: dict[str, Any]
    """The run's resolved configuration table (`ResolvedConfig.table()`, the manifest's `config`)."""
    plugins: tuple[str, ...] = ()
    """Modules registered besides the `hiera` entry points (`--plugin`, `plugins=[...]`), by import name."""
    entry_points: bool = True
    """Whether the `hiera` entry points are loaded (False: only `plugins`)."""
    blocked: tuple[str, ...] = ()
    """Plugins left out where the run started (`HIERA_DISABLE_PLUGINS`)."""
    protection: records.Protection | None = None
    """What the sandbox holds on the run's machine (the manifest's): a process whose sandbox holds less evaluates
    nothing (`evaluate_elsewhere`), so the manifest stays true of every candidate."""


@attrs.frozen(kw_only=True)
class Evaluated:
    """One job's outcome, as an executor hands it to the engine."""

    evaluation: Evaluation
    stage_s: dict[str, float] = attrs.field(factory=dict)
    """Wall seconds of each stage that ran, by name (`space-check`, then the evaluators')."""
    wall_s: float = 0.0
    """Wall seconds of the whole evaluation."""
    timeline: records.Timeline = attrs.field(factory=records.Timeline)
    """When each stage started and when the job held the device (Unix seconds)."""
    files: dict[str, str] = attrs.field(factory=dict)
    """Text files the stages wrote when the job ran elsewhere (build and judge logs), by path relative to the job's
    workdir; the engine writes them into the run's candidate folder. Empty when the job ran in the run's process."""
    attempts: int = 1
    """How many times the job was started: 2 when an executor retried it after its worker died."""


@attrs.frozen(kw_only=True)
class DevicePending:
    """`evaluate_elsewhere(..., device=False)`: every stage before the first that holds the device passed; the job
    goes on to a worker holding one (which runs the pipeline from the start: the builds are cached)."""

    stage_s: dict[str, float] = attrs.field(factory=dict)
    wall_s: float = 0.0


@attrs.frozen(kw_only=True)
class Request:
    """What crosses to a process that evaluates a job elsewhere."""

    recipe: Recipe
    job: EvalJob
    device: bool = True
    """False: stop before the first stage that holds the device (`DevicePending` when every earlier one passed)."""


@attrs.define
class Pipeline:
    """A run's evaluation pipeline: its space check, then the architecture's evaluator stages in order."""

    arch: Architecture
    evaluators: list[Evaluator]
    run: RunConfig
    recipe: Recipe | None = None
    """How to rebuild it elsewhere; None when it cannot be (`cannot_travel` says why)."""
    cannot_travel: str = ""

    @property
    def accelerator(self) -> str | None:
        """What its device stages occupy, one per job (`Architecture.accelerator`: "GPU" for cuda), or None."""
        return protocols.optional(self.arch, "accelerator")

    def evaluate(self, job: EvalJob) -> Evaluated:
        """Evaluate one job in this process (from an executor's thread). Where a device stage times the candidate,
        the thread and what it starts (builds, judges until they hold the device) leave the timing cores free."""
        if self.accelerator:
            leave_timing_cores()
        started = time.perf_counter()
        stage_s: dict[str, float] = {}
        stage_at: dict[str, float] = {}
        with recording_holds() as held:
            evaluation = cast(Evaluation, self.stages(job, stage_s, stage_at=stage_at))  # with the device: a verdict
        return Evaluated(
            evaluation=evaluation,
            stage_s=stage_s,
            wall_s=time.perf_counter() - started,
            timeline=records.Timeline(stage_at=stage_at, device_held=list(held)),
        )

    def stages(
        self,
        job: EvalJob,
        stage_s: dict[str, float] | None = None,
        *,
        device: bool = True,
        stage_at: dict[str, float] | None = None,
    ) -> Evaluation | StagePassed:
        """The pipeline for one candidate: its space's static check, then the architecture's stages in order (see
        `protocols.Evaluator.order`). `stage_s`, when given, receives the wall seconds of each stage that ran, by
        name, and `stage_at` when each started (Unix seconds). `device=False` stops before the first stage that holds
        the device and returns that stage's input (`StagePassed`)."""
        stage_s = {} if stage_s is None else stage_s
        stage_at = {} if stage_at is None else stage_at
        stage_at[SPACE_CHECK] = round(time.time(), 4)
        started = time.perf_counter()
        reason = self.arch.check_source(job.candidate.source, job.space_rank)
        stage_s[SPACE_CHECK] = round(time.perf_counter() - started, 4)
        if reason:
            return records.StaticRejected(reason=f"{job.candidate.space}: {reason}")
        running = [e for e in self.evaluators if self._runs(e, job) and (device or not protocols.optional(e, "holds_device"))]
        early: dict[str, Any] = {}
        try:
            for evaluator in running[1:]:  # what takes long to start starts now, while the stages ahead run
                if start := protocols.optional(evaluator, "start"):
                    try:
                        if (started := start(job)) is not None:
                            early[evaluator.name] = started
                    except Exception:
                        log.exception("evaluator_start_failed", evaluator=evaluator.name, candidate=job.candidate.id)
            for evaluator in self.evaluators:
                if not self._runs(evaluator, job):
                    continue
                if not device and protocols.optional(evaluator, "holds_device"):
                    return StagePassed(job=job)
                stage_at[evaluator.name] = round(time.time(), 4)
                started = time.perf_counter()
                try:
                    result = (early.pop(evaluator.name, None) or evaluator).evaluate(job)
                except Exception as exc:  # an evaluator bug costs this candidate, not the run
                    log.exception("evaluator_failed", evaluator=evaluator.name, candidate=job.candidate.id)
                    return records.Crashed(reason=f"evaluator {evaluator.name} failed: {exc!r}")
                finally:
                    stage_s[evaluator.name] = round(time.perf_counter() - started, 4)
                if isinstance(result, StagePassed):
                    job = result.job
                elif isinstance(result, Measured):
                    job = attrs.evolve(job, measured=result)
                else:
                    return result
        finally:
            for unused in early.values():  # an earlier stage ended the pipeline
                unused.cancel()
        if job.measured is None:
            raise RuntimeError(f"no evaluator of '{job.arch}' measured the candidate")
        return implausible(job.measured, job.roofline, self.run) or job.measured

    @staticmethod
    def _runs(evaluator: Evaluator, job: EvalJob) -> bool:
        """Whether the stage runs on `job`: not an on-demand stage on a new candidate, nor a measuring one on a
        measured candidate (`EvalJob.refine`)."""
        holds, on_demand = protocols.optional(evaluator, "holds_device"), protocols.optional(evaluator, "on_demand")
        return not (on_demand != job.refine and (on_demand or holds))

    def request(self, job: EvalJob, *, device: bool = True) -> dict[str, Any]:
        """`job` encoded for `evaluate_elsewhere`; CannotTravel when the pipeline cannot be rebuilt elsewhere."""
        if self.recipe is None:
            raise CannotTravel(self.cannot_travel)
        return to_dict(Request(recipe=self.recipe, job=job, device=device))


def implausible(measured: Measured, roofline: records.Roofline | None, run: RunConfig) -> records.Rejected | None:
    """The plausibility rules every architecture shares: a latency below `floor_margin` of the roofline floor,
    or a speedup over the reference beyond `max_speedup`, cannot be true and is rejected, never ranked."""
    latency = measured.latency_ms
    if roofline is not None and latency < run.floor_margin * roofline.floor_ms:
        return records.Rejected(
            reason=f"{latency:.4f} ms is below {run.floor_margin:.0%} of the roofline floor {roofline.floor_ms:.4f} ms"
            f" ({roofline.bytes_moved / 1e6:.1f} MB at {roofline.peak_gbps:.0f} GB/s, {roofline.flops / 1e9:.2f}"
            f" GFLOP at {roofline.peak_gflops:.0f} GFLOP/s): physically impossible",
            latency_ms=latency,
        )
    if measured.reference_latency_ms / latency > run.max_speedup:
        return records.Rejected(
            reason=f"speedup {measured.reference_latency_ms / latency:.0f}x over the reference exceeds the"
            f" plausibility bound {run.max_speedup:.0f}x",
            latency_ms=latency,
        )
    return None


def pipeline_for(config: ResolvedConfig, pm: pluggy.PluginManager, arch: Architecture, evaluators: list[Evaluator]) -> Pipeline:
    """The pipeline of a session (its resolved `config`, plugin manager `pm`, architecture and evaluators), with the
    recipe that rebuilds it elsewhere from the configuration's table when every plugin it may need can be found there
    by name."""
    plugins: list[str] = []
    objects: list[str] = []
    distributed = {id(plugin) for plugin, _ in pm.list_plugin_distinfo()}
    for _name, plugin in pm.list_name_plugin():
        if plugin is None or id(plugin) in distributed:
            continue
        if isinstance(plugin, type(sys)) and plugin.__name__ != "__main__" and getattr(plugin, "__file__", None):
            plugins.append(plugin.__name__)
        elif any(hasattr(plugin, hook) for hook in PIPELINE_HOOKS):
            objects.append(str(getattr(plugin, "__name__", None) or type(plugin).__name__))
    blocked = tuple(sorted(name for name, plugin in pm.list_name_plugin() if plugin is None))
    if objects:
        return Pipeline(
            arch=arch,
            evaluators=evaluators,
            run=config.run,
            cannot_travel=(
                f"plugin {objects[0]} was registered as an object, which cannot be sent to another process: register its"
                " module instead (plugins=['module'] or --plugin module), or an entry point"
            ),
        )
    recipe = Recipe(
        config=config.table(),
        plugins=tuple(plugins),
        entry_points=bool(distributed),
        blocked=blocked,
        protection=sandbox.protection(),
    )
    return Pipeline(arch=arch, evaluators=evaluators, run=config.run, recipe=recipe)


def rebuild(recipe: Recipe) -> Pipeline:
    """The pipeline a recipe describes, from the plugins installed in this process (an executor's worker)."""
    pm = make_plugin_manager(autoload=recipe.entry_points, blocked=recipe.blocked, extra_plugins=recipe.plugins)
    config = config_from_table(recipe.config, source="the run's recipe")
    table = recipe.config
    architectures, evaluators = collect(pm, "architectures"), collect(pm, "evaluators")

    def build(registry, kind: str, name: str) -> Any:
        cls = registry.get(name)
        return cls(protocols.plugin_config(cls, table.get(kind, {}).get(name), where=f"[{kind}.{name}]"))

    arch = build(architectures, "arch", config.run.arch)
    kind = protocols.optional(arch, "kind") or arch.name
    stages = sorted(
        (build(evaluators, "evaluator", name) for name, cls in evaluators.classes.items() if cls.arch == kind),
        key=lambda e: e.order,
    )
    return Pipeline(arch=arch, evaluators=stages, run=config.run, recipe=recipe)


def evaluate_elsewhere(request: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """Evaluate an encoded `Request` (`Pipeline.request`) in this process, in `workdir` (an empty folder of this
    machine) instead of the run's candidate folder. Returns the encoded `Evaluated` (or `DevicePending`: decode
    with `decode_answer`)."""
    started = time.perf_counter()
    decoded = from_dict(request, Request)
    weaker = weaker_sandbox(decoded.recipe.protection, sandbox.protection())
    if weaker:
        reason = f"not evaluated: the sandbox of {socket.gethostname()} holds less than the run's machine's ({weaker})"
        return {"evaluated": to_dict(Evaluated(evaluation=records.Crashed(reason=reason)))}
    job = attrs.evolve(decoded.job, workdir=workdir)
    write_text_atomic(workdir / job.contract.source_filename, job.candidate.source)
    stage_s: dict[str, float] = {}
    stage_at: dict[str, float] = {}
    with recording_holds() as held:
        result = rebuild(decoded.recipe).stages(job, stage_s, device=decoded.device, stage_at=stage_at)
    wall_s = time.perf_counter() - started
    if isinstance(result, StagePassed):
        return {"pending": to_dict(DevicePending(stage_s=stage_s, wall_s=wall_s))}
    files = written_files(workdir, skip={job.contract.source_filename})
    timeline = records.Timeline(stage_at=stage_at, device_held=list(held))
    return {"evaluated": to_dict(Evaluated(evaluation=result, stage_s=stage_s, wall_s=wall_s, files=files, timeline=timeline))}


def weaker_sandbox(run: records.Protection | None, here: records.Protection) -> str:
    """What the sandbox `here` lacks that the run's machine's (`run`) holds, in words; empty when nothing."""
    if run is None:
        return ""
    lacking = [
        name.replace("_", " ")
        for name in ("pid_namespace", "network_namespace", "read_only_root", "dropped_capabilities")
        if getattr(run, name) and not getattr(here, name)
    ]
    if run.cgroup and not here.cgroup:
        lacking.append("a cgroup")
    return ", ".join(lacking)


def decode_answer(answer: dict[str, Any]) -> Evaluated | DevicePending:
    """What `evaluate_elsewhere` returned, as its record."""
    if "pending" in answer:
        return from_dict(answer["pending"], DevicePending)
    return from_dict(answer["evaluated"], Evaluated)


def written_files(workdir: Path, *, skip: set[str]) -> dict[str, str]:
    """The text files the stages wrote in `workdir` (its `scratch` folder, the candidate's own, left out), each cut
    to `FILE_LIMIT_BYTES`."""
    files = {}
    for path in sorted(workdir.rglob("*")):
        relative = path.relative_to(workdir)
        if not path.is_file() or path.is_symlink() or relative.parts[0] == "scratch" or str(relative) in skip:
            continue
        with open(path, "rb") as handle:
            data = handle.read(FILE_LIMIT_BYTES)
        try:
            files[str(relative)] = data.decode()
        except UnicodeDecodeError:
            continue  # a built library, an object file: of no use to the run directory
    return files
