"""The shapes of plugin objects. Plugins implement them; none subclasses a core class.

Every registered class has a `name: ClassVar[str]` (unique per kind; a duplicate is an error naming
both modules) and a `config_class: ClassVar[type | None]`: an attrs class that the plugin's TOML table
(`[workload.<name>]`, `[arch.<name>]`, `[backend.<name>]`, ...) is structured into, unknown keys
rejected. The framework constructs it as `cls(config)`, passing that instance (or None without a
config class); LLM backends get the session as a second argument.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

import attrs

from hiera_core.config import ConfigError, structure
from hiera_core.errors import HieraError
from hiera_core.records import Candidate, Contract, Evaluation, Measured, Profile, Roofline, SourceLabel, Task


class UnsupportedArchitecture(HieraError, LookupError):
    """A workload has no contract or harness for the requested architecture (or the task); a run asks before its
    folder exists, so the user gets this one line and nothing is written."""


class NoSeed(LookupError):
    """A workload has no initial candidate for a task; the message says why. The run starts without one."""


@attrs.frozen(kw_only=True)
class Knob:
    """One parameter of a template: its values, best guess first, and who may move it."""

    values: tuple[Any, ...]
    """Admissible values; `values[0]` is the default (what the seed uses)."""
    direction: str
    """The direction (C/P/M/R/T) whose strategies move this knob."""
    space: str
    """The smallest implementation space in which a value other than the default is admissible."""


@runtime_checkable
class Template(Protocol):
    """A family of expert-written candidate sources, rendered from parameters."""

    name: str
    knobs: Mapping[str, Knob]

    def render(self, params: Mapping[str, Any]) -> str:
        """Return the candidate source for `params` (every knob present). Called by the expert backend."""
        ...

    def describe(self, params: Mapping[str, Any]) -> str:
        """Return a candidate's one-line origin: the template's name, a space, then `knob=value` pairs
        that shape the source. Reports print it; the expert reads the first word back."""
        ...


@runtime_checkable
class Workload(Protocol):
    """A family of tasks: reference, inputs, tolerance, contracts, floors and expert templates.

    Every method taking `arch` receives the architecture's kind (`Architecture.kind`, its name unless it
    says otherwise): a workload offers one side per kind of candidate, and any architecture of that kind
    is served by it."""

    name: ClassVar[str]
    config_class: ClassVar[type | None]

    def tasks(self) -> list[Task]:
        """Return the tasks this configured workload offers. Called once per run; the first is the default."""
        ...

    def contract(self, task: Task, arch: str) -> Contract:
        """Return the frozen contract of `task` on `arch`; raise UnsupportedArchitecture if there is none."""
        ...

    def seed(self, task: Task, arch: str) -> tuple[str, Mapping[str, Any], str]:
        """Return the initial candidate as (source, template params, origin). Evaluated before round 1;
        raise NoSeed(reason) when there is none (round 1 then starts from nothing)."""
        ...

    def templates(self, task: Task, arch: str) -> list[Template]:
        """Return the expert templates for `arch` (may be empty). Read by the offline expert backend."""
        ...

    def work(self, task: Task, arch: str) -> tuple[float, float]:
        """Return (minimum bytes moved, flops) of one timed call on `arch`, for the roofline floors."""
        ...

    def harness(self, task: Task, arch: str) -> Any:
        """Return the object the architecture's judge and runner processes use to make inputs, run the
        reference and compare (the judge) and call a candidate (the runner). Called inside those processes,
        never in the planning process. Its interface is the architecture kind's to define, as a Protocol
        (`hiera_plugins.host.harness.HostHarness`, `hiera_plugins.cuda.harness.CudaHarness`)."""
        ...

    # Optional: `baselines(task, arch) -> list[records.Baseline]`, implementations users compare against;
    # each run evaluates them once, before its initial candidate, and the report sets the best against each.
    # Optional: `inputs(task, arch) -> str`, the task's inputs as a prompt states them: value ranges and
    # distributions, what each argument really holds (random weights, not a uniform average), the sizes and seeds
    # a candidate is checked and timed on; quoted under the task in every prompt (`PlanningContext.inputs`).
    # Optional: `reference_flops(task, arch) -> float`, the reference's own arithmetic in one call (where `work`
    # gives no FLOPs because a correct candidate may do less): not a floor, the headroom the prompts and the report
    # quote beside the floors (`Roofline.reference_flops`).
    # Optional: `failures() -> dict[str, str]`, the tasks of the selection that could not be loaded, each with
    # a one-line reason; `hiera contracts` and `hiera run --all-tasks` print them and go on with the rest.


@runtime_checkable
class ImplementationSpace(Protocol):
    """What a candidate may call. Spaces are nested: a space admits everything of a lower rank."""

    name: ClassVar[str]
    rank: ClassVar[int]
    """0 for the most controlled space (pure_cuda), increasing as the space widens."""
    description: ClassVar[str]
    """What the space admits, in general words. Each architecture enforces it by `rank` (`Architecture.check_source`,
    and in its own evaluators), and the prompts quote the architecture's own account of it where it gives one
    (`Architecture.describe_space`)."""


@attrs.frozen(kw_only=True)
class StrategyTemplate:
    """One entry of a direction's strategy catalogue."""

    name: str
    steps: tuple[str, ...]
    constraints: tuple[str, ...] = ()


def _ranked(catalogue: Iterable[Iterable[StrategyTemplate]]) -> tuple[tuple[StrategyTemplate, ...], ...]:
    return tuple(tuple(own) for own in catalogue)


@attrs.frozen(kw_only=True)
class DirectionKnowledge:
    """What one kind of architecture knows of one direction: the texts the prompts quote and the strategy
    catalogue. An architecture's plugin gives it (`hiera_direction_knowledge(direction, kind)`), so that a
    run on a CPU reads CPU facts and a run on a GPU reads GPU facts; the direction itself only scores."""

    knowledge: str
    """Expert knowledge, quoted in the strategy prompt (SPA)."""
    rubric: str
    """How to score the direction from this kind's profile signals, quoted in the space-decision prompt (SSDA)."""
    strategies: tuple[tuple[StrategyTemplate, ...], ...] = attrs.field(default=(), converter=_ranked)
    """The catalogue, one tuple per space rank, narrowest (rank 0) first, each most promising first; a rank
    with nothing of its own is an empty tuple."""
    title: str = ""
    """The direction's title on this kind, where the paper's (`Direction.title`) names hardware it lacks ("Thread
    and core parallelism" for "Thread, warp and core parallelism" on a CPU); empty: the direction's own."""

    def strategies_for(self, rank: int) -> tuple[StrategyTemplate, ...]:
        """The strategies admissible in a space of `rank`: those of its own rank, then those of every narrower
        rank (it admits them), widest first. A rank beyond the catalogue's last gets all of it (a third
        party's wider space); any rank is valid."""
        return tuple(strategy for own in reversed(self.strategies[: max(0, rank) + 1]) for strategy in own)


@runtime_checkable
class Direction(Protocol):
    """One optimization direction (C, P, M, R, T or a third party's): what it is and how to score it.

    What the prompts quote about it (knowledge, rubric, strategy catalogue) depends on the hardware and comes
    from the architecture plugins (`DirectionKnowledge`, through `hiera_direction_knowledge`).

    Optional: `order: int` (default 100): where the direction stands in prompts and among equal scores
    (lower first; then by letter); `signals: tuple[str, ...]`: the profile signals its score reads (names of
    `Profile.signals`, each normalised to [0, 1] with 1 healthy); prompts group the signals by reader;
    `moves: tuple[str, ...]` (default: its own name): the directions whose template knobs (`Knob.direction`) its
    strategies move, so that a new direction can steer the knobs workloads already have (see `moved_knobs`)."""

    name: ClassVar[str]
    """The direction's letter, as the paper writes it."""
    title: ClassVar[str]
    description: ClassVar[str]
    """What the direction changes, in words that hold on every architecture; quoted in every planning prompt."""

    def score(self, profile: Profile | None) -> tuple[float, str]:
        """Return (score in [0, 1], reason) from the best candidate's profile: how much time this
        direction could still win. Called by the expert backend every round; 0 when no signal applies."""
        ...


def moved_knobs(direction: Direction) -> frozenset[str]:
    """The `Knob.direction` values whose knobs `direction`'s strategies move: its own name and those it names in
    its optional `moves`. The offline expert moves only these; a direction that moves none scores 0 there."""
    return frozenset((direction.name, *optional(direction, "moves")))


@attrs.frozen(kw_only=True)
class AgentRequest:
    """One call to an agent: the prompt for a model, and the same context as data for offline rules."""

    role: str
    """`ssda` (space + direction scores), `spa` (strategy; also the judge of the `cudaforge` baseline)
    or `oa` (candidate sources)."""
    prompt: str
    """The full text a language model receives (system and user parts joined)."""
    context: Mapping[str, Any]
    """Structured context for rule-based backends (task, space options, parent, profile, history; for an OA
    request that asks to fix a failed candidate, `repair`: that candidate, else None)."""
    round: int = 0
    """The round the request belongs to."""
    sample: int = 0
    """Which of a round's OA requests this is (0 for the other roles): requests of one round differ by it."""
    attempt: int = 1
    """1 for the first ask; higher when the request is asked again after an unusable answer or a failure."""
    candidates: int = 0
    """How many candidate sources an OA request asks for; 0 for the other roles."""


@attrs.frozen(kw_only=True)
class AgentAnswer:
    text: str
    """The raw answer; the agent layer parses the JSON object in it."""
    input_tokens: int = 0
    output_tokens: int = 0
    model: str = ""
    """The model that answered, as its service names it; empty for rule-based backends."""
    cost_usd: float | None = None
    """What the call cost, from the backend's price table; None when no price is known."""
    truncated: bool = False
    """The model stopped at its output-token limit, so the answer is probably cut off."""
    labels: list[SourceLabel] = attrs.field(factory=list)
    """For a backend whose own code wrote the sources (rules, a script), never a model: per OA candidate
    of `text`, in order, the origin, parameters and parent hiera records. Nothing of these is ever read
    from `text`: the schema of an OA answer owns only each candidate's `source`."""


class BackendError(HieraError):
    """A backend could not answer one request (the service failed after the backend's own retries, no
    recorded answer, no answer file in time). The agent layer records the reason and asks again within
    its attempts; the message must never contain a secret."""


class BackendUnusable(BackendError):
    """A backend can answer no request of this run, so asking again cannot help (the service rejects the key,
    does not know the model, or has no such endpoint: an HTTP 401, 403 or 404). The agent layer records the call
    with this reason and the run stops at once with it, in one line; what the run recorded so far stays. The
    message must never contain a secret."""


class AnswerPending(BackendError):
    """A backend has posted a request whose answer will come later (from a person, or an agent on another
    machine) and the run should not wait for it. The agent layer lets the requests that could go out at the same
    time be posted too, then the run stops, its records kept, and the caller learns that it waits
    (`hiera_core.api.AwaitingAnswers`); resuming the run asks the same requests again, which the backend then
    answers from what arrived meanwhile. The message says where the requests wait and how to answer them, in words
    that hold for all of them (it is shown once, after "N request(s) wait for an answer"); `waiting` is how many."""

    def __init__(self, message: str, *, waiting: int = 1) -> None:
        super().__init__(message)
        self.waiting = waiting


@runtime_checkable
class LLMBackend(Protocol):
    """Answers agent requests: a remote model, a cache, a person, or rules.

    Two optional attributes tell the agent layer how to send OA requests; without them a round's K
    sources are asked for in one request and requests go one at a time:

    - `parallel_requests: int`: how many requests may be in flight at once (`answer` is then called
      from that many threads and must be thread-safe);
    - `candidates_per_request: int | None`: how many sources one OA request asks for (a model: 1, so
      the K requests go in parallel); None asks for all K in one request;
    - `repairs: bool` (default True): whether an OA request may ask it to fix a failed candidate (a search
      makes one of a round's K requests a repair when the strategy whose candidate failed still stands); a
      rule-based backend that cannot read a source sets False.

    A rule-based backend sets `searches: tuple[str, ...]`, the search strategies whose requests it can
    answer; without it, any (a model answers whatever it is asked). A backend that answers from a recorded
    run's answer cache sets `replays = True` and has a config field `source` (the recorded run directory):
    `hiera run --replay` and `hiera_core.replay` select it. It is constructed as `cls(config, context)`, with
    the run's read-only `hiera_core.context.RunContext`.
    """

    name: ClassVar[str]
    config_class: ClassVar[type | None]

    def answer(self, request: AgentRequest) -> AgentAnswer:
        """Return the answer to one request, or raise BackendError saying why there is none (the request is
        asked again); BackendUnusable when no request can be answered (the run stops), AnswerPending when the
        answer will come later (the run pauses). Any other exception is a bug and stops the run. Called by the
        agent layer for every request its run's answer cache does not already hold."""
        ...


@runtime_checkable
class Architecture(Protocol):
    """A hardware target: toolchain, timer, profiler and the machine's peak numbers.

    Optional: `preference: int` (default 0): `--arch auto` takes, of the architectures that can run here, the
    one with the highest preference; `kind: str` (default: its name): the kind of candidate it runs, which
    names the workload side (`Workload.contract(task, kind)`, ...) and the evaluators (`Evaluator.arch`) that
    serve it, so a new architecture of an existing kind (another CPU, another compiler) needs neither;
    `accelerator: str | None` (default None): the device its `holds_device` stages occupy, one per candidate
    (`"GPU"` for cuda), so that an executor spreading work over machines sends those stages to a worker holding
    one; None: they need only the machine's CPUs.

    Optional, for the prompts (`RunContext.hardware`, `RunContext.space_rules`), each called once per session:
    `describe_hardware(hardware: dict | None = None) -> str`: the hardware in words a model writes code for (model;
    cores and vector extensions, or SMs and compute capability; caches; memory): of `hardware` when given (what a
    `hardware()` recorded: a run resumed on a machine without its device plans from it), else from what the planning
    process can know (a device it cannot see is described by what the configuration says); without it the prompts
    list `hardware()`.
    `describe_space(rank) -> str`: what a space of `rank` admits on this architecture, in the terms its checks
    enforce (`check_source` and its evaluators); without it the prompts quote the space's own description."""

    name: ClassVar[str]
    config_class: ClassVar[type | None]

    def unavailable_reason(self) -> str | None:
        """Return why this machine cannot run candidates for this architecture, or None."""
        ...

    def check_source(self, source: str, rank: int) -> str | None:
        """Return why `source` breaks the rules of a space of `rank` on this architecture (what a space of that
        rank does not admit here: `hiera_judge.source_rules`), or None. Called before compiling."""
        ...

    def hardware(self) -> dict[str, Any]:
        """Describe the device (model, cores, memory, driver) for the run manifest."""
        ...

    def toolchain(self) -> dict[str, Any]:
        """The compiler, its version and flags (JSON values): whatever changes compiled output. Part of
        every candidate's id, and handed to the compile stage in `EvalJob.toolchain`."""
        ...

    def peaks(self, dtype: str) -> tuple[float, float]:
        """Return measured (memory GB/s, GFLOP/s for `dtype`, e.g. "float64") of this machine, for the
        roofline floors. Called once per run."""
        ...


@attrs.frozen(kw_only=True)
class Built:
    """What a build stage made of a candidate, for the stages after it."""

    library: Path
    """The built shared object."""
    compile_s: float
    """The build's wall seconds (a cache hit's own, when found in the build cache)."""
    cache_hit: bool = False
    """Found in the build cache, not compiled again."""
    resources: dict[str, dict[str, int]] = attrs.field(factory=dict)
    """Per kernel, what the compiler reported it uses (registers, shared memory, stack, spills), where it says."""


@attrs.frozen(kw_only=True)
class EvalJob:
    """Everything an evaluator stage needs about one candidate; passed from stage to stage."""

    candidate: Candidate
    task: Task
    contract: Contract
    arch: str
    space_rank: int
    """The rank of the candidate's implementation space (0 = most controlled), for binary and runtime checks."""
    workdir: Path
    """The candidate's scratch directory: its source, build log and artefacts live here."""
    workload_factory: str
    """`module:Class@DIR` of the workload, so a judge or runner process can rebuild it (`engine.workload_factory`)."""
    workload_config: dict[str, Any]
    toolchain: dict[str, Any]
    """The architecture's `toolchain()`."""
    roofline: Roofline | None = None
    built: Built | None = None
    """What the build stage made, once it has run."""
    measured: Measured | None = None
    """Set once a stage has measured the candidate; later stages (a profiler) refine it."""
    remeasure: bool = False
    """True when a finalist is measured again at the end of a run (fresh process, fresh seeds)."""
    reference_ms: float | None = None
    """The task's reference latency as this run's first judge measured it: the judge reports it instead of timing the
    reference again (None: the judge times it; the final re-measurement always does)."""
    refine: bool = False
    """True: `measured` holds the candidate's recorded measurement, which the on-demand stages refine; of the other
    stages only those that hold no device run (the checks and the build, a cache hit), the measuring ones not."""
    compiled_reference: bool = False
    """Also time the task's reference under `torch.compile` where the workload offers it: set on one job of the final
    re-measurement (a property of the task, measured once a run)."""
    background: bool = False
    """Evaluated beside the search (a baseline, on an architecture with an accelerator): its device stages take the
    device only while the search's own jobs do not want it (`judging.device_lock`)."""

    @property
    def library(self) -> Path:
        """The built shared object (an error before the build stage has run)."""
        if self.built is None:
            raise RuntimeError(f"candidate {self.candidate.id} has not been built")
        return self.built.library

    @property
    def compile_s(self) -> float:
        """The build's wall seconds (0 before the build stage has run)."""
        return self.built.compile_s if self.built else 0.0

    def worker_request(self) -> dict[str, Any]:
        """What a process outside the judge (a profiler's target) needs to rebuild the task's harness and load
        the built candidate."""
        from hiera_core.serialization import to_dict

        return {
            "workload_factory": self.workload_factory,
            "workload_config": self.workload_config,
            "task": to_dict(self.task),
            "library": str(self.library),
        }


@attrs.frozen(kw_only=True)
class StagePassed:
    """A stage that succeeded: the job, with its artefacts, goes on to the next stage."""

    job: EvalJob


@runtime_checkable
class Evaluator(Protocol):
    """One stage of evaluation for one architecture (compile, run and check, profile, ...).

    An optional `holds_device: ClassVar[bool]` (False without it) marks a stage that occupies the
    device while it runs (timing, profiling): the report counts its wall time as device-seconds. An optional
    `on_demand` (attribute or property; False without it) marks a stage that refines a measurement (a profiler)
    and runs only on the candidates planning reads: the parents, before a round is planned from them
    (`EvalJob.refine`), not on every candidate.

    An optional `start(job)` starts the stage's slow preparation (a judge's interpreter, imports, its runner) at
    once, before the stages ahead of it run, and returns an object whose `evaluate(job)` then finishes the stage as
    `evaluate` would and whose `cancel()` ends it when an earlier stage ends the pipeline. The pipeline calls it,
    for the stages that will run, as a job's evaluation begins (`hiera_judge.judging.StartedJudge`: a judge starts
    while its candidate builds). It may return None (not now: too many are started): the stage then starts in its
    `evaluate`.
    """

    name: ClassVar[str]
    config_class: ClassVar[type | None]
    arch: ClassVar[str]
    """The architecture this stage serves."""
    order: ClassVar[int]
    """Stages run in increasing order. `StagePassed` goes on to the next stage; `Measured` too (as
    `job.measured`, which a later stage may refine and return); any other Evaluation ends the pipeline."""

    def evaluate(self, job: EvalJob) -> StagePassed | Evaluation:
        """Run this stage on one candidate. Called by the executor, possibly in a thread."""
        ...


class ExecutorError(HieraError):
    """An executor cannot evaluate at all (its cluster cannot be reached, ...): the run stops with this one line."""


@runtime_checkable
class Executor(Protocol):
    """Where and how concurrently evaluation runs.

    Optional: `open(pipeline)`, called before a run starts (or resumes) with its pipeline: get ready (reach a
    cluster), raise ExecutorError (or the pipeline's CannotTravel) when evaluation cannot happen, before the run
    writes anything; `close()`, called once the run has ended, however it ended: release what `open` took (both may
    be called more than once); `concurrent_runs(pipeline) -> int`: how many runs of a suite (`--all-tasks`) it can
    keep busy at once (1 without it: one after another); `cancel()`: Ctrl-C during a suite whose runs go on in
    threads: stop the work of every run of this process soon (their `run` raises ExecutorError)."""

    name: ClassVar[str]
    config_class: ClassVar[type | None]

    def run(self, jobs: Iterable[EvalJob], pipeline: Any) -> Iterator[tuple[EvalJob, Any]]:
        """Evaluate every job through `pipeline` (`hiera_core.pipeline.Pipeline`), yielding each job with its
        `Evaluated` as it finishes, in any order, each job exactly once. In this process: `pipeline.evaluate(job)`.
        In another process or machine: `pipeline.request(job)` (data; CannotTravel when the pipeline cannot be
        rebuilt elsewhere) goes there and `hiera_core.pipeline.evaluate_elsewhere` evaluates it; only the run's
        process writes the run directory. A job that cannot be evaluated for the executor's own reasons (its worker
        died) is yielded as `Crashed` with the reason, never dropped."""
        ...


@runtime_checkable
class Search(Protocol):
    """How a round's candidates are written (`--strategy NAME`): HIERA's planned loop, or a baseline. A
    rule-based backend says which searches it can answer (`LLMBackend.searches`)."""

    name: ClassVar[str]
    plans: ClassVar[bool]
    """Whether rounds are planned (SSDA and SPA, recorded as `PlanMade`) before generation; `--no-planning`
    is an ablation of a search that plans."""

    def generate(self, agents: Any, ctx: Any, plan: Any, k: int) -> Any:
        """The round's K sources (`agents.Generation`), asked of `agents` (`agents.Agents`) for the round
        `ctx` (`agents.PlanningContext`) under `plan` (None when the search does not plan)."""
        ...


@attrs.frozen
class Member:
    """An optional member of a plugin kind: what the core takes where a plugin has none (`optional`)."""

    default: Any = None
    method: bool = False
    """Whether it is a method (None by default: the core then does without it)."""


METHOD = Member(method=True)


@attrs.frozen(kw_only=True)
class PluginKind:
    """One kind of plugin: what a plugin registers (`hiera_register_<name>`) and what the core asks of it."""

    name: str
    """The registry's name and its hook's suffix: `workloads` for `hiera_register_workloads`."""
    protocol: type
    """The protocol its classes implement (`hiera_contracts.check_plugins` checks them against it)."""
    table: str | None = None
    """Its configuration table: `[workload.<name>]` for `workload`; None: it takes none."""
    run_key: str | None = None
    """The `[run]` key that chooses one of them (`--workload`), where a plugin's `hiera_run_defaults` may fill it."""
    configured: bool = True
    """Whether its classes must declare `config_class` (None when they take no configuration)."""
    optional: Mapping[str, Member] = attrs.field(factory=dict)
    """The members its protocol documents as optional, with their defaults (`optional`); where a class has an optional
    method, it must be a method."""


UNCONFIGURED = {"config_class": Member(None)}

PLUGIN_KINDS: tuple[PluginKind, ...] = (
    PluginKind(
        name="workloads",
        protocol=Workload,
        table="workload",
        run_key="workload",
        optional={"inputs": METHOD, "baselines": METHOD, "failures": METHOD, "reference_flops": METHOD},
    ),
    PluginKind(name="spaces", protocol=ImplementationSpace, table="space", configured=False, optional=UNCONFIGURED),
    PluginKind(
        name="directions",
        protocol=Direction,
        table="direction",
        configured=False,
        optional={**UNCONFIGURED, "order": Member(100), "signals": Member(()), "moves": Member(())},
    ),
    PluginKind(
        name="backends",
        protocol=LLMBackend,
        table="backend",
        run_key="backend",
        optional={
            "parallel_requests": Member(1),
            "candidates_per_request": Member(None),
            "repairs": Member(True),
            "searches": Member(None),
            "replays": Member(False),
        },
    ),
    PluginKind(
        name="architectures",
        protocol=Architecture,
        table="arch",
        optional={
            "preference": Member(0),
            "kind": Member(None),
            "accelerator": Member(None),
            "describe_hardware": METHOD,
            "describe_space": METHOD,
        },
    ),
    PluginKind(
        name="evaluators",
        protocol=Evaluator,
        table="evaluator",
        optional={"holds_device": Member(False), "on_demand": Member(False), "start": METHOD},
    ),
    PluginKind(
        name="executors",
        protocol=Executor,
        table="executor",
        run_key="executor",
        optional={"open": METHOD, "close": METHOD, "concurrent_runs": METHOD, "cancel": METHOD},
    ),
    PluginKind(name="searches", protocol=Search, run_key="strategy", configured=False, optional=UNCONFIGURED),
)
"""Every kind of plugin, the one table the registries, the configuration's tables, the `[run]` defaults, the
optional members' defaults and the conformance check read."""

_DEFAULTS = {name: member.default for kind in PLUGIN_KINDS for name, member in kind.optional.items()}
assert all(  # one default a name, whatever the kind
    member.default == _DEFAULTS[name] for kind in PLUGIN_KINDS for name, member in kind.optional.items()
)


def optional(plugin: Any, member: str) -> Any:
    """`plugin`'s optional `member` (a class or an instance of a kind whose `PluginKind.optional` names it), or its
    default where the plugin has none (None for a method): the one place the core asks a plugin for a member its
    protocol does not require."""
    return getattr(plugin, member, _DEFAULTS[member])


def plugin_config(cls: type, table: Mapping[str, Any] | None, *, where: str) -> Any:
    """What the plugin class `cls` is made with: its TOML `table` structured into its `config_class` (one
    `ConfigError` naming `where` for an unknown key or a wrong value), or None for a plugin that declares none, which
    takes no table. Every place that makes a plugin from configuration goes through here."""
    config_class = optional(cls, "config_class")
    if config_class is None:
        if table:
            raise ConfigError(f"{where}: this plugin takes no configuration")
        return None
    return structure(table or {}, config_class, where=where)
