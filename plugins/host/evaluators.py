"""The host evaluation stages: `host-compile` (C to a shared library) and `host-run` (check, time,
profile: a judge process and the candidate's runner, in a sandbox)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import ClassVar, cast

import attrs

from hiera_core import Built, EvalJob, StagePassed
from hiera_core.records import CompileFailed, Evaluation, Measured, Profile, StaticRejected
from hiera_judge.judging import Interrupted, StartedJudge, device_lock, stopping
from hiera_judge.messages import Judged, JudgeRequest
from hiera_judge.sandbox import (
    COMPILER_LOG_BYTES,
    LISTING_MEMORY_BYTES,
    SANDBOX_FAILED,
    CandidateLimits,
    IsolatedResult,
    dependency_problem,
    describe_exit,
    folder_bytes,
    library_problem,
    literal_include_problem,
    located_outside,
    run_sandboxed,
    search_folders,
)
from hiera_plugins.host.architecture import TIMING_LOCK, candidate_cores, cpu_cores


@attrs.frozen(kw_only=True)
class HostCompileConfig:
    timeout_s: float = 60.0
    memory_gib: float = 4.0
    """The compiler's sandbox may use this much memory (cgroup, and RLIMIT_DATA on each of its processes)."""
    library_mib: float = 256.0
    """The largest library (and, four times this, the largest build folder) a candidate's build may leave."""


class HostCompile:
    name: ClassVar[str] = "host-compile"
    config_class: ClassVar[type] = HostCompileConfig
    arch: ClassVar[str] = "host"
    order: ClassVar[int] = 10

    def __init__(self, config: HostCompileConfig) -> None:
        self.config = config

    def evaluate(self, job: EvalJob) -> StagePassed | Evaluation:
        source = job.workdir / job.contract.source_filename
        for name, text in job.contract.files.items():
            (job.workdir / name).write_text(text)
        compiler = [job.toolchain["cc"], *job.toolchain["cflags"]]
        allowed = [os.path.realpath(job.workdir), *search_folders(tuple(compiler), "c")]
        started = time.perf_counter()
        if rejected := self._includes(job, compiler, source, allowed):
            return rejected
        library = job.workdir / "candidate.so"
        command = [*compiler, "-shared", "-fPIC", str(source), "-o", str(library)]
        limit = int(self.config.library_mib * 2**20)
        done = run_sandboxed(
            command,
            cwd=job.workdir,
            timeout_s=self.config.timeout_s,
            log_bytes=COMPILER_LOG_BYTES,
            memory_bytes=int(self.config.memory_gib * 2**30),
            file_bytes=limit,
            hide_outside=True,
            stop=stopping,
        )
        _not_the_candidates(done)
        if done.timed_out:
            return CompileFailed(log=f"compiler timed out after {self.config.timeout_s:.0f} s", compile_s=self.config.timeout_s)
        elapsed = time.perf_counter() - started
        log = located_outside(done.stdout + done.stderr, base=job.workdir, allowed=allowed)
        (job.workdir / "build.log").write_text(" ".join(command) + "\n" + log)
        if done.returncode != 0:
            code = cast(int, done.returncode)  # None only when timed out
            ended = "" if code > 0 else f"\nthe compiler ended with {describe_exit(code)}"
            return CompileFailed(log=(log.strip() + ended)[-4000:], compile_s=elapsed)
        problem = library_problem(library, max_bytes=limit)
        if problem is None and folder_bytes(job.workdir) > 4 * limit:
            problem = f"the build left more than {4 * self.config.library_mib:.0f} MiB in its folder"
        if problem:
            return CompileFailed(log=problem, compile_s=elapsed)
        return StagePassed(job=attrs.evolve(job, built=Built(library=library, compile_s=elapsed)))

    def _includes(self, job: EvalJob, compiler: list[str], source: Path, allowed: list[str]) -> Evaluation | None:
        """The include graph, checked before the compile: a verdict when the source reaches a file it must not read."""
        never = "; the source was not compiled"
        if problem := literal_include_problem(job.candidate.source, base=job.workdir, allowed=allowed):
            return StaticRejected(reason=problem + never)
        listing = job.workdir / "includes.d"
        listing.unlink(missing_ok=True)
        timeout_s = min(30.0, self.config.timeout_s)
        done = run_sandboxed(
            [*compiler, "-M", "-MG", "-MF", str(listing), str(source)],
            cwd=job.workdir,
            timeout_s=timeout_s,
            memory_bytes=LISTING_MEMORY_BYTES,
            file_bytes=COMPILER_LOG_BYTES * 16,
            log_bytes=COMPILER_LOG_BYTES,
            hide_outside=True,
            stop=stopping,
        )
        _not_the_candidates(done)
        if done.timed_out or (done.returncode or 0) < 0 or "out of memory" in done.stderr:
            why = f"did not end within {timeout_s:.0f} s" if done.timed_out else "ran out of its memory or was killed"
            return StaticRejected(
                reason=f"the preprocessor's listing of its includes {why}: an include of an endless"
                f" file (a device, a FIFO, /proc){never}"
            )
        if done.returncode != 0:
            log = located_outside(done.stdout + done.stderr, base=job.workdir, allowed=allowed)
            return CompileFailed(log=log.strip()[-4000:], compile_s=0.0)
        if problem := dependency_problem(listing.read_text(errors="replace"), base=job.workdir, allowed=allowed):
            return StaticRejected(reason=problem + never)
        return None


def _not_the_candidates(done: IsolatedResult) -> None:
    """Raised where the result says nothing of the candidate: the run is stopping (`Interrupted`: the candidate is
    built again when it resumes), or the sandbox could not start its command (the machine's fault, never the
    candidate's)."""
    if done.stopped:
        raise Interrupted()
    if done.returncode == SANDBOX_FAILED and "hiera sandbox:" in done.stderr:
        raise RuntimeError(done.stderr.strip().splitlines()[-1])


RUNNER_ENVIRONMENT = {"OMP_WAIT_POLICY": "passive", "OMP_PROC_BIND": "close", "OMP_PLACES": "cores"}
"""OpenMP threads that spin after a parallel region hold the cores the judge needs to see the call end (on 2
cores they added ~0.5 ms to its clock); passive threads sleep at once. Unbound, a woken team was often stacked
on one core: one threaded kernel measured 5 or 10 ms call by call (p10-p90 5.1-10.8 ms; six fresh processes
5.9-8.9 ms); bound one thread per core, 4.7-5.0 ms (docs/measurement.md)."""


@attrs.frozen(kw_only=True)
class HostRunConfig:
    timeout_s: float = 60.0
    """A candidate's judge (all checks and timing) is killed after this long: recorded as timed out."""
    call_timeout_s: float = 20.0
    """One call of the candidate longer than this: timed out."""
    min_repeats: int = 5
    max_repeats: int = 400
    """Timed calls in all; a batch has at most a quarter of them (and as many as keep the protocol's cost to 1%)."""
    min_time_s: float = 0.3
    """Timed batches (four at least) continue until both `min_repeats` calls and this much time in the batches (the
    judge's clock around each) are reached, or `max_repeats`; the judge's own work between them (fresh inputs, checks)
    does not count."""
    reference_repeats: int = 3
    check_fraction: float = 0.1
    """The share of timed calls (each on fresh inputs) whose output the judge checks, chosen in secret; at least two."""
    memory_gib: float = 8.0
    """The candidate's sandbox may use this much memory (judge included)."""
    timing_attempts: int = 3
    """Series of timed batches before the candidate is rejected because its own timer contradicts the judge's clock:
    a load that began beside an honest runner can make one series disagree (`judging.timed_series`)."""
    timer_tolerance: float = 0.05
    timer_tolerance_ms: float = 0.05
    """How far the runner's own timer may be from the judge's figure (a share of it, plus milliseconds): the figure
    is the judge's; a timer further off says the candidate's process is not what it claims."""
    candidate_pids: int = 64
    """Processes and threads the candidate's processes may have, all together (the runner's interpreter included)."""
    busy_cores: float = 0.25
    """Other processes using this many of the machine's cores on average while a candidate is timed: its figure is
    marked as disturbed (`Measured.disturbed`), in the report and in the prompts."""


@attrs.frozen(kw_only=True)
class HostJudgeSettings:
    """What a host judge is told (`JudgeRequest.settings`): its run stage's config and what the job adds."""

    run: HostRunConfig
    memory_bytes: int
    reference_ms: float | None
    """The reference's time measured earlier in the run (None: this judge times it)."""
    candidate_cores: int
    """The cores the candidate's space gives it (`architecture.candidate_cores`)."""


class HostRun:
    name: ClassVar[str] = "host-run"
    config_class: ClassVar[type] = HostRunConfig
    arch: ClassVar[str] = "host"
    order: ClassVar[int] = 20
    holds_device: ClassVar[bool] = True

    def __init__(self, config: HostRunConfig) -> None:
        self.config = config

    def start(self, job: EvalJob) -> StartedJudge:
        """Its judge, started while the candidate compiles (`protocols.Evaluator.start`)."""
        memory = int(self.config.memory_gib * 2**30)
        request = JudgeRequest(
            workload_factory=job.workload_factory,
            workload_config=job.workload_config,
            task=job.task,
            remeasure=job.remeasure,
            settings=HostJudgeSettings(
                run=self.config,
                memory_bytes=memory,
                reference_ms=job.reference_ms,
                candidate_cores=candidate_cores(job.space_rank),
            ),
        )
        limits = CandidateLimits(cores=candidate_cores(job.space_rank), pids=self.config.candidate_pids)
        return StartedJudge(
            "hiera_plugins.host.judge",
            request,
            workdir=job.workdir,
            timeout_s=self.config.timeout_s,
            measured=self._measured,
            memory_bytes=memory,
            device_lock=device_lock(TIMING_LOCK),
            env_extra={**RUNNER_ENVIRONMENT, "OMP_NUM_THREADS": str(candidate_cores(job.space_rank))},
            candidate=limits,
        )

    def evaluate(self, job: EvalJob) -> StagePassed | Evaluation:
        return self.start(job).evaluate(job)

    def _measured(self, job: EvalJob, answer: Judged) -> Measured:
        latency = answer.measurement.latency_ms
        metrics = dict(answer.metrics)
        signals = {
            "parallel_utilization": min(1.0, metrics["cpu_utilization_fraction"]),
            "cache_resilience": min(1.0, metrics["cache_ns_per_point"] / metrics["task_ns_per_point"]),
            "branch_free_fraction": branch_free_fraction(job.candidate.source),
        }
        roofline = job.roofline
        if roofline is not None:
            signals["memory_floor_fraction"] = min(1.0, roofline.memory_floor_ms / latency)
            signals["compute_floor_fraction"] = min(1.0, roofline.compute_headroom_ms / latency)
            flops_per_point = roofline.flops / metrics["task_points"]
            cache_gflops = flops_per_point / metrics["cache_ns_per_point"]
            cores_in_use = max(metrics["cache_cpu_utilization_fraction"], 1.0 / cpu_cores())
            signals["in_cache_compute_fraction"] = min(1.0, cache_gflops / (roofline.peak_gflops * cores_in_use))
            metrics["achieved_gbps"] = roofline.bytes_moved / (latency * 1e6)
            metrics["achieved_gflops"] = roofline.flops / (latency * 1e6)
        findings = _findings(signals, metrics)
        profile = Profile(
            source="host-timer", metrics=metrics, signals={k: round(v, 4) for k, v in signals.items()}, findings=findings
        )
        return answer.record(compile_s=job.compile_s, profile=profile)


def _findings(signals: dict[str, float], metrics: dict[str, float]) -> list[str]:
    findings = []
    if signals["parallel_utilization"] < 0.75:
        findings.append(f"uses {signals['parallel_utilization']:.0%} of the machine's cores")
    if signals["branch_free_fraction"] < 1.0:
        findings.append("conditionals inside the innermost hot loops (static scan)")
    if signals["cache_resilience"] < 0.7:
        findings.append(
            f"per-point time grows {1 / signals['cache_resilience']:.1f}x from a cache-resident grid to the task grid"
        )
    if "in_cache_compute_fraction" in signals:
        findings.append(f"in cache, reaches {signals['in_cache_compute_fraction']:.0%} of the FMA peak of the cores in use")
    if "achieved_gbps" in metrics:
        findings.append(
            f"achieves {metrics['achieved_gbps']:.1f} GB/s and {metrics['achieved_gflops']:.1f} GFLOP/s at the task size"
        )
    return findings


def branch_free_fraction(source: str) -> float:
    """Share of the innermost loops of the deepest loop nest that hold no conditional (static scan)."""
    code = re.sub(r"//[^\n]*|/\*.*?\*/", "", source, flags=re.S)
    loops = []  # (start, end) of each for-loop statement, body included
    for match in re.finditer(r"\bfor\s*\(", code):
        header_end = _balanced_end(code, match.end() - 1, "(", ")")
        loops.append((match.start(), header_end, _statement_end(code, header_end)))
    if not loops:
        return 1.0
    depth = {loop: sum(1 for other in loops if other[0] < loop[0] < other[2]) for loop in loops}
    innermost = [loop for loop in loops if not any(loop[0] < other[0] < loop[2] for other in loops)]
    deepest = max(depth[loop] for loop in innermost)
    hot = [loop for loop in innermost if depth[loop] == deepest]
    branchy = sum(1 for start, header_end, end in hot if re.search(r"\bif\s*\(|\?", code[header_end:end]))
    return 1.0 - branchy / len(hot)


def _balanced_end(code: str, start: int, open_: str, close: str) -> int:
    depth = 0
    for i in range(start, len(code)):
        depth += (code[i] == open_) - (code[i] == close)
        if depth == 0:
            return i + 1
    return len(code)


def _statement_end(code: str, start: int) -> int:
    parens = 0
    for i in range(start, len(code)):
        ch = code[i]
        if ch == "(":
            parens += 1
        elif ch == ")":
            parens -= 1
        elif parens == 0 and ch == "{":
            return _balanced_end(code, i, "{", "}")
        elif parens == 0 and ch == ";":
            return i + 1
    return len(code)
