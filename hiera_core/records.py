"""The records that cross process and plugin boundaries.

Every record is frozen and keyword-only; units are in field names; outcomes are tagged unions,
never sentinels. `hiera_core.serialization` is the one place that turns them into JSON.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

import attrs

SCHEMA_VERSION = 2
"""Bumped whenever a record on disk changes shape; every file hiera writes carries it."""


def content_id(*parts: str) -> str:
    """A short, stable hash of text parts; used for candidate and contract ids."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


@attrs.frozen(kw_only=True)
class Task:
    """One optimization problem of a workload (a stencil size, a KernelBench model, ...)."""

    workload: str
    """Name of the workload that owns the task."""
    name: str
    """Task name, unique within its workload."""
    params: dict[str, Any] = attrs.field(factory=dict)
    """The task's parameters (JSON values): sizes, radius, dtype, steps, ..."""
    description: str = ""
    """One paragraph for humans and prompts: what the kernel computes."""


@attrs.frozen(kw_only=True)
class Contract:
    """The frozen part of a task for one architecture: everything but the candidate's source."""

    source_filename: str
    """The only file a candidate writes, e.g. `cuda_source.cu` or `host_source.c`."""
    interface: str
    """What the candidate source must define (signature and semantics), quoted in prompts."""
    files: dict[str, str] = attrs.field(factory=dict)
    """The frozen files by name (wrapper, binding, groundtruth, ...), written next to the source."""
    binding: str | None = None
    """Which of `files` binds the candidate's functions to the caller (cuda: `cpp_source.cpp`); None where
    the candidate is called directly (host: a C function)."""

    def without_binding(self) -> Contract:
        """The paper's `--no-contract` ablation: the candidate writes the binding too."""
        if self.binding is None:
            return self
        return Contract(
            source_filename=self.source_filename,
            interface=(
                f"{self.interface}\n\nThere is no frozen binding: `{self.source_filename}` must also bind these"
                f" functions itself, exactly as this `{self.binding}` would:\n{self.files[self.binding]}"
            ),
            files={name: text for name, text in self.files.items() if name != self.binding},
        )

    @property
    def id(self) -> str:
        return content_id(self.source_filename, self.interface, *(f"{k}\n{v}" for k, v in sorted(self.files.items())))


@attrs.frozen(kw_only=True)
class Candidate:
    """One implementation of a task: a source file plus where it came from."""

    id: str
    """`content_id(source, contract id, toolchain)`: an identical candidate is never evaluated twice."""
    source: str
    """The text of the contract's `source_filename`."""
    space: str
    """The implementation space the candidate was generated in (and is checked against)."""
    round: int
    """0 for the initial candidate, then 1..rounds."""
    direction: str | None = None
    """The optimization direction (C/P/M/R/T) of the strategy that produced it; None for the seed."""
    strategy: str | None = None
    """Name of the strategy that produced it."""
    parent_id: str | None = None
    """The parent candidate it was derived from."""
    origin: str = ""
    """Who wrote it: a template name with its parameters, or the backend and model."""
    params: dict[str, Any] = attrs.field(factory=dict)
    """Template parameters, when the candidate was rendered from a workload template."""


@attrs.frozen(kw_only=True)
class Profile:
    """What the profiler learnt about one call of a candidate."""

    source: str
    """Which profiler produced it (`host-timer`, `ncu`, ...)."""
    metrics: dict[str, float] = attrs.field(factory=dict)
    """Raw metrics, unit in the name (`achieved_gbps`, `cpu_utilization_fraction`)."""
    signals: dict[str, float] = attrs.field(factory=dict)
    """Normalised signals in [0, 1] that direction rules read (`memory_floor_fraction`, ...)."""
    findings: list[str] = attrs.field(factory=list)
    """Short human-readable findings, most important first; prompts quote them."""
    unavailable: str | None = None
    """Why counters could not be read, when they could not; planning falls back to latency."""


@attrs.frozen(kw_only=True)
class StaticRejected:
    """The source broke its implementation space's rules or a known evaluation hack; never compiled."""

    reason: str


@attrs.frozen(kw_only=True)
class CompileFailed:
    """The compiler rejected the source; `log` is what the next round's prompt needs."""

    log: str
    compile_s: float


@attrs.frozen(kw_only=True)
class Incorrect:
    """The candidate ran but its output differs from the reference (or it broke a check)."""

    reason: str
    max_abs_error: float | None = None


@attrs.frozen(kw_only=True)
class Crashed:
    """The candidate's process died (signal, abort, uncaught error)."""

    reason: str
    case: str = ""
    """The call it died in, as the judge describes it: the case with its sizes, the seed and the input
    distribution (`odd (n=37), seed 2, spiky inputs`); empty when it died outside a call."""
    signal: str = ""
    """The signal that ended the candidate's process (`SIGSEGV`); empty when it ended otherwise."""
    stderr_tail: str = ""
    """The last lines the candidate's process wrote to stderr, bounded and reduced to printable text
    (`hiera_judge.judging.stderr_tail`); what it wrote is the candidate's, untrusted."""
    task_too_large: bool = False
    """The judge stopped before loading the candidate: the task's buffers and checks need more memory than the device
    has even with nothing else on it. No candidate of the task can be judged there, and the run ends after its
    initial candidate (a task that only lacked room beside other processes is not that)."""


@attrs.frozen(kw_only=True)
class TimedOut:
    """The candidate's process exceeded its time limit and was killed."""

    limit_s: float
    case: str = ""
    """The call it was in when one call's time limit ran out, as the judge describes it (see `Crashed.case`);
    empty when the evaluation as a whole ran out of time."""


@attrs.frozen(kw_only=True)
class Measured:
    """The candidate is correct; its latency and profile were measured."""

    latency_ms: float
    """Median over `repeats` timed calls."""
    latency_p10_ms: float
    latency_p90_ms: float
    repeats: int
    reference_latency_ms: float
    """The task's reference timed the same way, by the judge; in the search after the run's first measurement, that
    measurement's figure (`EvalJob.reference_ms`); timed again by every judge of the final re-measurement."""
    max_abs_error: float
    """Largest absolute difference from the FP64 reference over all checked inputs."""
    checks: list[str] = attrs.field(factory=list)
    """Which correctness checks passed (seeds, shapes, distributions)."""
    compile_s: float = 0.0
    profile: Profile | None = None
    timing_bound: str = ""
    """How the judge's own clock bounded the in-process timing (calls, overhead, slack), in words."""
    reference_engine: str = ""
    """What computed the reference outputs the candidate was checked against (`CuPy 14.2.0`, ...)."""
    resources: dict[str, dict[str, int]] = attrs.field(factory=dict)
    """Per kernel, as the compiler reported it (`ptxas -v`): registers, shared_bytes, stack_bytes,
    spill_store_bytes, spill_load_bytes."""
    compiled_reference_latency_ms: float | None = None
    """The reference under `torch.compile`, timed the same way by the judge: measured on the final
    re-measurement where the workload offers it (None otherwise)."""
    compiled_reference_note: str = ""
    """Why there is no `torch.compile` figure where one was asked for (its compilation failed, ...)."""
    disturbed: str = ""
    """What disturbed the timing, in the judge's words (other processes keeping the machine's cores busy, ...): the
    figure may read slow. Empty when nothing the judge watches did."""
    conditions: dict[str, float] = attrs.field(factory=dict)
    """The machine's state around the timed calls, as the judge read it: on cuda the GPU's SM and memory clocks,
    power and temperature at their start and end (NVML), the calls a timed batch had (`batch_calls`), the null batch
    subtracted from each (`protocol_ms_per_batch`) and the runner's CUDA events a call (`in_process_ms`); on the host
    the cores other processes kept busy."""

    @property
    def speedup_vs_reference(self) -> float:
        return self.reference_latency_ms / self.latency_ms


@attrs.frozen(kw_only=True)
class Rejected:
    """The candidate was measured, but the measurement cannot be true (faster than the roofline floor, a
    speedup beyond the plausibility bound, an in-process timer the judge's clock contradicts): it never
    competes, whatever its latency."""

    reason: str
    latency_ms: float | None = None
    """The latency it claimed or was measured at, for the record."""


Evaluation = StaticRejected | CompileFailed | Incorrect | Crashed | TimedOut | Rejected | Measured
"""The outcome of evaluating one candidate; only `Measured` is valid."""


@attrs.frozen(kw_only=True)
class SpaceDecision:
    """The Search-Space Decision Agent's answer (paper Eq. 3-4)."""

    space: str
    scores: dict[str, float]
    """A score per direction (C/P/M/R/T), in [0, 1]."""
    rationale: str = ""

    @property
    def direction(self) -> str:
        """The argmax direction; ties go to the first in the session's order (the built-ins: C, P, M, R, T)."""
        return max(self.scores, key=lambda d: self.scores[d])  # among equal scores, the first (the session's order)

    @property
    def exhausted(self) -> bool:
        """Every direction scored 0: the planner sees nothing left to try (the expert, when no direction has an
        untried move), and the search stops."""
        return not any(self.scores.values())


@attrs.frozen(kw_only=True)
class Strategy:
    """The Strategy Planning Agent's answer (paper Eq. 5): a plan typed by space and direction."""

    space: str
    direction: str
    name: str
    steps: list[str] = attrs.field(factory=list)
    constraints: list[str] = attrs.field(factory=list)


@attrs.frozen(kw_only=True)
class Plan:
    """One round's planning: the space, the direction scores and the strategy taken."""

    round: int
    decision: SpaceDecision
    strategy: Strategy
    parent_id: str | None


def beats(challenger: Measured, incumbent: Measured) -> bool:
    """Whether `challenger` is faster than `incumbent` beyond the noise of the two medians: by more than twice the
    standard error of their difference, each median's error estimated from its own timed calls (σ ≈ (p90 - p10) / 2.56,
    as for a normal spread; the error of a median ≈ 1.25 σ / √repeats)."""

    def error(m: Measured) -> float:
        return 1.2533 * (m.latency_p90_ms - m.latency_p10_ms) / 2.5631 / math.sqrt(max(1, m.repeats))

    return incumbent.latency_ms - challenger.latency_ms > 2 * math.hypot(error(challenger), error(incumbent))


@attrs.frozen(kw_only=True)
class Roofline:
    """Floors for one task on one machine: no correct candidate can beat them."""

    bytes_moved: float
    """Minimum bytes one call must read and write."""
    flops: float
    peak_gbps: float
    """Measured memory bandwidth of the machine, GB/s: its remembered peak (`hiera_core.peaks`)."""
    peak_gflops: float
    """Measured arithmetic rate of the machine, GFLOP/s: its remembered peak."""
    measured_gbps: float | None = None
    measured_gflops: float | None = None
    """This run's own measurement of the two (None: the run's record predates remembered peaks)."""
    measurements: int = 1
    """How many of the machine's measurements the peaks come from."""
    reference_flops: float = 0.0
    """The reference's own arithmetic in one call (`Workload.reference_flops`), where the workload sets no FLOP floor:
    what a candidate doing the same arithmetic needs at least, not what every correct one must do."""

    @property
    def memory_floor_ms(self) -> float:
        return self.bytes_moved / (self.peak_gbps * 1e9) * 1e3

    @property
    def compute_floor_ms(self) -> float:
        return self.flops / (self.peak_gflops * 1e9) * 1e3

    @property
    def floor_ms(self) -> float:
        """The physical floor: a time below it (less a margin) is rejected as impossible."""
        return max(self.memory_floor_ms, self.compute_floor_ms)

    @property
    def compute_headroom_ms(self) -> float:
        """The arithmetic floor of a candidate that does the reference's arithmetic: the larger of `compute_floor_ms`
        and the reference's FLOPs at the peak rate. Planning signals and prompts measure compute headroom against it."""
        return max(self.compute_floor_ms, self.reference_flops / (self.peak_gflops * 1e9) * 1e3)

    @property
    def headroom_floor_ms(self) -> float:
        """What the report and the prompts measure a candidate's headroom against (`floor_ms` stays the one a figure
        is rejected below)."""
        return max(self.memory_floor_ms, self.compute_headroom_ms)


@attrs.frozen(kw_only=True)
class Protection:
    """What the sandbox around candidate processes holds on this machine (`hiera_judge.sandbox`)."""

    pid_namespace: bool
    """Candidates see no process outside their sandbox (hiera's environment among them)."""
    network_namespace: bool
    read_only_root: bool
    """Only the job's own directories can be written."""
    dropped_capabilities: bool
    """The process that loads a candidate has no capabilities and no_new_privs."""
    cgroup: str | None
    """`v1`, `v2` or None: the cgroup that limits memory (each run stage's `memory_gib`) and processes, and
    is killed as a whole; without one, memory is limited per process (RLIMIT_DATA)."""
    pids_limit: int | None = None
    group_freezer: bool = False
    """The candidate's processes are stopped between calls as one group (the cgroup freezer), so no process flood
    or clone can slip a computation past the judge; without it they are stopped one by one (SIGSTOP)."""
    cores_limit: bool = False
    """The cores a space admits are enforced by the kernel (cpuset), whatever threads the candidate starts."""
    missing: list[str] = attrs.field(factory=list)
    """One line per protection this machine does not allow."""


@attrs.frozen(kw_only=True)
class RunManifest:
    """`manifest.json` of a run directory: enough to resume it and to say what was measured where."""

    schema_version: int = SCHEMA_VERSION
    run_id: str
    created_at: str
    config: dict[str, Any]
    """The resolved configuration in force (no secrets)."""
    versions: dict[str, str]
    """hiera, Python, and each plugin distribution with its version."""
    hardware: dict[str, Any]
    task: Task
    protection: Protection | None = None
    """The sandbox's protections in force for this run's candidates."""


# --- trajectory events: one JSON line each, append-only -------------------------------------


@attrs.frozen(kw_only=True)
class RunStarted:
    run_id: str
    roofline: Roofline | None = None
    device_stages: list[str] = attrs.field(factory=list)
    """The evaluation stages that hold the device (`holds_device`): their wall time is device-seconds."""
    toolchain: dict[str, Any] | None = None
    """The architecture's `toolchain()` where the run started: a run resumed on a machine without its device plans
    with it (candidate ids, the prompts' build line), so that they are those the device's machine would make."""


@attrs.frozen(kw_only=True)
class PlanMade:
    plan: Plan


@attrs.frozen(kw_only=True)
class CandidatesGenerated:
    """The candidates of a round, recorded before any is evaluated, so a resumed run reuses them."""

    round: int
    candidates: list[Candidate]
    notes: list[str] = attrs.field(factory=list)
    """What went wrong while generating (an answer without code, a duplicate, ...)."""
    wall_s: float = 0.0
    """Seconds the generation took (OA's requests, in parallel where the backend allows it)."""


@attrs.frozen(kw_only=True)
class Timeline:
    """When one evaluation's stages ran, for the report's timeline: Unix seconds, on the clock of the machine that
    evaluated it."""

    stage_at: dict[str, float] = attrs.field(factory=dict)
    """When each stage started, by name (its length is in `stage_s`)."""
    device_held: list[tuple[float, float]] = attrs.field(factory=list)
    """(start, end) of every hold of the device lock (`judging.device_lock`): the time the job had the device."""


@attrs.frozen(kw_only=True)
class CandidateEvaluated:
    candidate: Candidate
    evaluation: Evaluation
    wall_s: float
    stage_s: dict[str, float] = attrs.field(factory=dict)
    timeline: Timeline = attrs.field(factory=Timeline)
    """Wall seconds per pipeline stage, by name: `space-check`, then each evaluator that ran."""


@attrs.frozen(kw_only=True)
class Baseline:
    """An implementation users compare against (cuDNN called directly, ...), which a workload offers to be
    measured in every run beside the search, outside its candidate budget."""

    name: str
    space: str
    """The implementation space its source belongs to (its static check is that space's)."""
    source: str
    origin: str = ""


@attrs.frozen(kw_only=True)
class BaselineEvaluated:
    """A workload baseline, evaluated by the same pipeline as candidates, beside the initial candidate."""

    name: str
    candidate: Candidate
    evaluation: Evaluation
    wall_s: float
    stage_s: dict[str, float] = attrs.field(factory=dict)
    timeline: Timeline = attrs.field(factory=Timeline)
    reused_from: str = ""
    """Where this run took the measurement from instead of measuring it ("run R, DATE": `[run] baseline_cache`);
    empty when this run measured it."""


@attrs.frozen(kw_only=True)
class RoundFinished:
    round: int
    best_candidate_id: str | None
    best_latency_ms: float | None


@attrs.frozen(kw_only=True)
class CandidateProfiled:
    """A parent's measurement refined by the on-demand stages (a profiler) before a round was planned from it: the
    evaluation planning reads from then on (its `CandidateEvaluated` keeps the first one)."""

    candidate_id: str
    evaluation: Evaluation
    wall_s: float = 0.0
    stage_s: dict[str, float] = attrs.field(factory=dict)
    timeline: Timeline = attrs.field(factory=Timeline)


@attrs.frozen(kw_only=True)
class Remeasured:
    """One finalist measured again at the end of the run (pass `pass_index` of `[run] remeasure_passes`), built
    and judged in a fresh process on fresh inputs; the finalists' passes are interleaved."""

    candidate_id: str
    pass_index: int
    evaluation: Evaluation
    wall_s: float = 0.0
    stage_s: dict[str, float] = attrs.field(factory=dict)
    timeline: Timeline = attrs.field(factory=Timeline)


@attrs.frozen(kw_only=True)
class Finalist:
    """A finalist's standing after the final re-measurement."""

    candidate_id: str
    in_search_ms: float
    """Its median in the search, the figure it was chosen by."""
    latency_ms: float | None = None
    """The median of its re-measurements' medians; None when one of them was not `Measured` (`reason` says why)."""
    low_ms: float | None = None
    high_ms: float | None = None
    """The fastest and the slowest of its re-measurements (their medians): the spread between fresh processes."""
    reason: str = ""


@attrs.frozen(kw_only=True)
class RunFinished:
    best_candidate_id: str | None
    """The winner: with a final re-measurement, the finalist with the lowest re-measured median; without, the best
    of the search. None when no candidate (or no finalist) held up."""
    remeasured: Evaluation | None = None
    """The winner's re-measurement nearest its median (the slower one of two)."""
    remeasure_stage_s: dict[str, float] = attrs.field(factory=dict)
    """Runs recorded before `Remeasured` events: wall seconds per stage of their one re-measurement."""
    finalists: list[Finalist] = attrs.field(factory=list)
    """Every finalist, the winner first, then by re-measured median; those that failed a re-measurement last."""


@attrs.frozen(kw_only=True)
class AgentCalled:
    """One request to the LLM backend: its place in the run, what it cost, and whether its answer was used."""

    round: int
    role: str
    """`ssda`, `spa` or `oa`."""
    sample: int = 0
    """Which of the round's OA requests it was."""
    attempt: int = 1
    backend: str
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    """From the backend's price table; None when it has no price for the model."""
    wall_s: float
    cached: bool = False
    """Answered from the run's answer cache: nothing was called and nothing spent."""
    error: str | None = None
    """Why the call failed or its answer was unusable (it was then asked again); None when it was used."""


@attrs.frozen(kw_only=True)
class SourceLabel:
    """What a backend's own code (never a model's text) says of one candidate source it wrote: a rule-based
    backend that renders workload templates knows the template, its parameters and the parent it moved from.
    Each field left empty is hiera's own: the backend and model, no parameters, the source the request showed."""

    origin: str = ""
    params: dict[str, Any] = attrs.field(factory=dict)
    parent_id: str | None = None


@attrs.frozen(kw_only=True)
class RecordedAnswer:
    """One file of a run's answer cache, `cache/llm/<key>.json`: a request and the answer it got."""

    schema_version: int = SCHEMA_VERSION
    backend: str
    role: str
    round: int
    sample: int
    attempt: int
    candidates: int
    prompt: str
    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    model: str = ""
    cost_usd: float | None = None
    truncated: bool = False
    labels: list[SourceLabel] = attrs.field(factory=list)


@attrs.frozen(kw_only=True)
class RunPaused:
    """The run stopped to wait for answers its backend will have later (`AnswerPending`), or, resumed where its
    device is missing, at a step that needs it (`waiting` 0); `hiera resume` continues it from here."""

    round: int
    """The round whose requests wait (0: before the first)."""
    waiting: int
    """How many requests were left waiting."""
    reason: str
    """The backend's word on where they wait and how to answer them."""


Event = (
    RunStarted
    | BaselineEvaluated
    | PlanMade
    | CandidatesGenerated
    | CandidateEvaluated
    | CandidateProfiled
    | RoundFinished
    | Remeasured
    | RunFinished
    | AgentCalled
    | RunPaused
)
"""One line of `trajectory.jsonl`."""


def ranked(measured: Sequence[tuple[Candidate, Measured]], n: int) -> list[Candidate]:
    """The `n` best of `measured` (valid candidates in the order they were evaluated). The first is the incumbent: a
    candidate replaces it only when it is faster beyond the noise of the two medians (`beats`); the others follow by
    median."""
    if not measured or n < 1:
        return []
    incumbent, figure = measured[0]
    for candidate, evaluation in measured[1:]:
        if beats(evaluation, figure):
            incumbent, figure = candidate, evaluation
    others = sorted((e.latency_ms, i, c) for i, (c, e) in enumerate(measured) if c.id != incumbent.id)
    return [incumbent, *(c for _, _, c in others[: n - 1])]


@attrs.frozen(kw_only=True)
class Best:
    """A run's best candidate, with its figure in the search and, where the run re-measured it, that figure."""

    candidate: Candidate
    search: Measured
    remeasured: Measured | None = None

    @property
    def headline(self) -> Measured:
        """The figure to report: the final re-measurement's where there is one, else the search's."""
        return self.remeasured or self.search


def best_of(events: Sequence[Event]) -> Best | None:
    """The run's best candidate, decided here for the engine, the report, the CLI and suites alike: the winner its
    `RunFinished` names, or None where it names none (no valid candidate, or no finalist held up in the final
    re-measurement); before the run has finished, the search's incumbent so far (`ranked`)."""
    measured = [
        (e.candidate, e.evaluation) for e in events if isinstance(e, CandidateEvaluated) and isinstance(e.evaluation, Measured)
    ]
    finished = next((e for e in events if isinstance(e, RunFinished)), None)
    if finished is None:
        leader = ranked(measured, 1)
        winner_id = leader[0].id if leader else None
    else:
        winner_id = finished.best_candidate_id
    found = next(((c, e) for c, e in measured if c.id == winner_id), None)
    if found is None:
        return None
    remeasured = finished.remeasured if finished is not None and isinstance(finished.remeasured, Measured) else None
    return Best(candidate=found[0], search=found[1], remeasured=remeasured)
