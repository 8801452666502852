"""The cuda evaluation stages, in order: `cuda-static` (hack patterns), `cuda-compile` (extension build,
binary space check) and `cuda-run` (the judge: correctness, latency, runtime space check, in a sandbox).
Profiling is the `ncu` plugin's (`cuda-profile`). Each stage can be replaced."""

from __future__ import annotations

import json
from typing import ClassVar, cast

import attrs
import structlog

from hiera_core import Built, EvalJob, StagePassed
from hiera_core.records import CompileFailed, Crashed, Evaluation, Profile, StaticRejected
from hiera_judge.judging import JUDGE_LOG, StartedJudge, device_lock, judge_slot, timing_cores
from hiera_judge.messages import Judged, JudgeRequest
from hiera_plugins.cuda import checks
from hiera_plugins.cuda.architecture import gpu_lock_name
from hiera_plugins.cuda.build import build_candidate, compiler_errors

log = structlog.get_logger(__name__)


def _dtype(job: EvalJob) -> str:
    return str(job.task.params.get("dtype", "float32"))


class CudaStatic:
    name: ClassVar[str] = "cuda-static"
    config_class: ClassVar[type | None] = None
    arch: ClassVar[str] = "cuda"
    order: ClassVar[int] = 5

    def __init__(self, config: None) -> None:
        pass

    def evaluate(self, job: EvalJob) -> StagePassed | Evaluation:
        reason = checks.hack_in_source(job.candidate.source, _dtype(job))
        return StaticRejected(reason=reason) if reason else StagePassed(job=job)


@attrs.frozen(kw_only=True)
class CudaCompileConfig:
    timeout_s: float = 600.0


class CudaCompile:
    name: ClassVar[str] = "cuda-compile"
    config_class: ClassVar[type] = CudaCompileConfig
    arch: ClassVar[str] = "cuda"
    order: ClassVar[int] = 10

    def __init__(self, config: CudaCompileConfig) -> None:
        self.config = config

    def evaluate(self, job: EvalJob) -> StagePassed | Evaluation:
        build = build_candidate(job, timeout_s=self.config.timeout_s)
        (job.workdir / "build.log").write_text(build.log)
        (job.workdir / "resources.json").write_text(json.dumps(build.resources, indent=1))
        if build.rejected:
            return StaticRejected(reason=build.rejected)
        if build.library is None:
            return CompileFailed(log=compiler_errors(build.log), compile_s=build.seconds)
        symbols = checks.imported_symbols(build.library)
        violation = checks.binary_space_violation(symbols, job.space_rank)
        if violation:
            return StaticRejected(reason=f"{job.candidate.space}: {violation}")
        if hack := checks.binary_hack(symbols):
            return StaticRejected(reason=hack)
        return StagePassed(
            job=attrs.evolve(
                job,
                built=Built(library=build.library, compile_s=build.seconds, cache_hit=build.cache_hit, resources=build.resources),
            )
        )


@attrs.frozen(kw_only=True)
class CudaRunConfig:
    device: int = 0
    timeout_s: float = 300.0
    """The judge (all checks and timing) is killed after this long and the candidate recorded as timed out."""
    call_timeout_s: float = 60.0
    """One call of the candidate longer than this: timed out."""
    check_fraction: float = 0.1
    """The share of timed calls (each on fresh inputs) whose output the judge checks, chosen in secret; at least
    two, and the last."""
    memory_gib: float = 64.0
    """Host memory the candidate's sandbox may use (judge included); GPU memory is the device's."""
    repeats: int = 100
    """Timed calls of the candidate (at least this many when `adaptive`), unless the calls take `timing_budget_s`
    of the judge's clock first."""
    timing_budget_s: float = 2.0
    """Timing stops once the timed calls have taken this long by the judge's clock and `min_repeats` are in: a
    120 ms kernel (stencil2d's conv2d baseline on the H200) is timed in 17 calls rather than 100 (12 s)."""
    min_repeats: int = 10
    placements: int = 1024
    """Places in GPU memory for a call's inputs and output (fewer where the buffers of a large task would take more
    than 64 GiB with the outputs a batch holds, or more than the GPU's free memory holds beside what a check needs:
    `judge.memory_plan`), each with pages of its own and at another offset: a timed batch has one place per call (so its
    inputs are all written, and never seen, before it starts), and the calls rotate over them, so a cache keyed by
    addresses has nothing stable to key on."""
    timing_attempts: int = 3
    """Series of timed batches before the candidate is rejected because its own timer contradicts the judge's clock
    (`judging.timed_series`)."""
    timer_tolerance: float = 0.05
    timer_tolerance_ms: float = 0.005
    """How far the runner's CUDA events may be from the judge's figure (a share of it, plus milliseconds): the figure
    is the judge's; events further off say the candidate's process is not what it claims."""
    adaptive: bool = False
    """Keep timing until the median's relative standard error is below `target_rse`, or `max_repeats`."""
    target_rse: float = 0.005
    max_repeats: int = 1000
    min_reference_repeats: int = 5
    reference_budget_s: float = 3.0
    """The reference is timed interleaved with the candidate until it has this much GPU time (and at least
    `min_reference_repeats` calls): a slow reference should not dominate evaluation."""
    compile_baseline: bool = True
    """On one job of the final re-measurement, also time the reference under `torch.compile` where the workload's
    harness offers it (KernelBench's second baseline); its compilation runs once per run, in that judge."""
    compile_baseline_timeout_s: float = 600.0
    """Added to that judge's `timeout_s` for the compilation (minutes for a level 3 model)."""
    judges_per_gpu: int = attrs.field(default=6, validator=attrs.validators.ge(1))
    """Judges alive at once on the GPU, across the runs of this process (`judging.judge_slot`): one timing, the
    others started ahead of their turn (each READY judge holds two CUDA contexts, 1.47 GiB of an H100). A candidate
    whose judge finds no place when its build starts has it started once a judge ends."""


@attrs.frozen(kw_only=True)
class CudaJudgeSettings:
    """What a cuda judge is told (`JudgeRequest.settings`): its run stage's config and what the job adds."""

    run: CudaRunConfig
    compile_baseline: bool
    """Time the reference under `torch.compile` too: the config's `compile_baseline`, on the job that asks for it."""
    memory_bytes: int
    reference_ms: float | None
    """The reference's time measured earlier in the run (None: this judge times it)."""
    timing_cores: tuple[int, int] | None
    """(the judge's core, the runner's core) on hiera's machine (`judging.timing_cores`)."""


class CudaRun:
    name: ClassVar[str] = "cuda-run"
    config_class: ClassVar[type] = CudaRunConfig
    arch: ClassVar[str] = "cuda"
    order: ClassVar[int] = 20
    holds_device: ClassVar[bool] = True

    def __init__(self, config: CudaRunConfig) -> None:
        self.config = config

    def start(self, job: EvalJob, *, wait: bool = False) -> _Judge | None:
        """Its judge, started while the candidate builds (`protocols.Evaluator.start`), with a second in reserve for
        a judge's own lack of GPU memory (`_Judge`); None where `judges_per_gpu` are alive and `wait` is False."""
        compile_baseline = self.config.compile_baseline and job.compiled_reference
        memory = int(self.config.memory_gib * 2**30)
        request = JudgeRequest(
            workload_factory=job.workload_factory,
            workload_config=job.workload_config,
            task=job.task,
            remeasure=job.remeasure,
            settings=CudaJudgeSettings(
                run=self.config,
                compile_baseline=compile_baseline,
                memory_bytes=memory,
                reference_ms=job.reference_ms,
                timing_cores=timing_cores(),
            ),
        )
        timeout_s = self.config.timeout_s + (self.config.compile_baseline_timeout_s if compile_baseline else 0.0)
        lock = gpu_lock_name(self.config.device)
        slot = judge_slot(lock, self.config.judges_per_gpu, wait=wait)
        if slot is None:
            return None
        started = StartedJudge(  # which gives the place back when its judge ends, or fails to start
            "hiera_plugins.cuda.judge",
            request,
            workdir=job.workdir,
            timeout_s=timeout_s,
            measured=self._measured,
            memory_bytes=memory,
            device_lock=device_lock(lock, background=job.background),
            slot=slot,
        )
        return _Judge(self, started)

    def evaluate(self, job: EvalJob) -> StagePassed | Evaluation:
        return cast(_Judge, self.start(job, wait=True)).evaluate(job)

    @staticmethod
    def _measured(job: EvalJob, answer: Judged) -> StagePassed | Evaluation:
        own = checks.defined_functions(job.built.library) if job.built else frozenset()
        violation = checks.runtime_space_violation(answer.kernels, answer.aten_ops, job.space_rank, own)
        if violation:
            return StaticRejected(reason=f"{job.candidate.space}: {violation}")
        return answer.record(
            compile_s=job.compile_s,
            profile=fallback_profile("not profiled yet", job, answer.measurement.latency_ms),
            resources=job.built.resources if job.built else {},
        )


JUDGE_OUT_OF_MEMORY = "the judge ran out of GPU memory for its own work"
"""How a judge's answer starts when its own allocation failed (its inputs, a reference, a comparison): hiera's fault,
never the candidate's."""


@attrs.define
class _Judge:
    """A started judge for one candidate, and a second one if the first ran out of GPU memory itself (KernelBench level
    1 task 4 on an H100, 2026-12-07: 4 of 12 judges, beside the others' start-ups, with their 16 GiB FP64 references);
    the second's answer is the candidate's, whatever it is. A candidate that fills the GPU to make its judge fail
    gains one more judge at most, and then the crash."""

    stage: CudaRun
    started: StartedJudge

    def evaluate(self, job: EvalJob) -> StagePassed | Evaluation:
        answer = self.started.evaluate(job)
        if isinstance(answer, Crashed) and answer.reason.startswith(JUDGE_OUT_OF_MEMORY):
            log.warning("judge_out_of_memory", candidate=job.candidate.id, reason=answer.reason)
            first_log = job.workdir / JUDGE_LOG
            if first_log.is_file():  # the second judge writes its own; the first's stays beside it
                first_log.replace(job.workdir / f"out-of-memory-{JUDGE_LOG}")
            return cast(_Judge, self.stage.start(job, wait=True)).started.evaluate(job)
        return answer

    def cancel(self) -> None:
        self.started.cancel()


def fallback_profile(why: str, job: EvalJob, latency_ms: float) -> Profile:
    """Without counters, planning still gets the floor fractions from the measured latency."""
    signals = {}
    if job.roofline is not None:
        signals = {
            "memory_floor_fraction": min(1.0, job.roofline.memory_floor_ms / latency_ms),
            "compute_floor_fraction": min(1.0, job.roofline.compute_headroom_ms / latency_ms),
        }
    return Profile(source="cuda-events", signals=signals, unavailable=why)
