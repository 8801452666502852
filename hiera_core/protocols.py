"""The shapes of plugin objects. Plugins implement them; none subclasses a core class.

Every registered class has a `name: ClassVar[str]` (unique per kind; a duplicate is an error naming
both modules) and a `config_class: ClassVar[type | None]`: an attrs class that the plugin's TOML table
(`[workload.<name>]`, `[arch.<name>]`, `[backend.<name>]`, ...) is structured into, unknown keys
rejected. The framework constructs it as `cls(config)`, passing that instance (or None without a
config class); LLM backends get the session as a second argument.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

import attrs

from hiera_core.records import Candidate, Contract, Evaluation, Profile, Roofline, Task


class UnsupportedArchitecture(LookupError):
    """A workload has no contract or harness for the requested architecture."""


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
    """A family of tasks: reference, inputs, tolerance, contracts, floors and expert templates."""

    name: ClassVar[str]
    config_class: ClassVar[type | None]

    def tasks(self) -> list[Task]:
        """Return the tasks this configured workload offers. Called once per run; the first is the default."""
        ...

    def contract(self, task: Task, arch: str) -> Contract:
        """Return the frozen contract of `task` on `arch`; raise UnsupportedArchitecture if there is none."""
        ...

    def seed(self, task: Task, arch: str) -> tuple[str, Mapping[str, Any], str]:
        """Return the initial candidate as (source, template params, origin). Evaluated before round 1."""
        ...

    def templates(self, task: Task, arch: str) -> list[Template]:
        """Return the expert templates for `arch` (may be empty). Read by the offline expert backend."""
        ...

    def work(self, task: Task, arch: str) -> tuple[float, float]:
        """Return (minimum bytes moved, flops) of one timed call on `arch`, for the roofline floors."""
        ...

    def harness(self, task: Task, arch: str) -> Any:
        """Return the object the architecture's worker process uses to make inputs, run the reference,
        call a candidate and compare. Called inside the worker, never in the planning process. Its
        interface is the architecture's to define (the `host` one is documented in `hiera_plugins.host.worker`)."""
        ...


@runtime_checkable
class ImplementationSpace(Protocol):
    """What a candidate may call. Spaces are nested: a space admits everything of a lower rank."""

    name: ClassVar[str]
    rank: ClassVar[int]
    """0 for the most controlled space (pure_cuda), increasing as the space widens."""
    description: ClassVar[str]
    """What the space admits, in words a prompt can quote."""

    def check_source(self, source: str, arch: str) -> str | None:
        """Return why `source` breaks this space's rules on `arch`, or None. Called before compiling."""
        ...


@attrs.frozen(kw_only=True)
class StrategyTemplate:
    """One entry of a direction's strategy catalogue."""

    name: str
    steps: tuple[str, ...]
    constraints: tuple[str, ...] = ()


@runtime_checkable
class Direction(Protocol):
    """One optimization direction (C, P, M, R, T or a third party's): knowledge and a scoring rule."""

    name: ClassVar[str]
    """The direction's letter, as the paper writes it."""
    title: ClassVar[str]
    description: ClassVar[str]
    knowledge: ClassVar[str]
    """Expert knowledge quoted in the strategy prompt."""
    rubric: ClassVar[str]
    """How to score this direction from a profile, quoted in the space-decision prompt."""

    def strategies(self, space: str) -> list[StrategyTemplate]:
        """Return the catalogue of strategies admissible in `space`, most promising first."""
        ...

    def score(self, profile: Profile | None) -> tuple[float, str]:
        """Return (score in [0, 1], reason) from the best candidate's profile: how much time this
        direction could still win. Called by the expert backend every round; 0 when no signal applies."""
        ...


@attrs.frozen(kw_only=True)
class AgentRequest:
    """One call to an agent: the prompt for a model, and the same context as data for offline rules."""

    role: str
    """`ssda` (space + direction scores), `spa` (strategy) or `oa` (candidate sources)."""
    prompt: str
    """The full text a language model receives (system and user parts joined)."""
    context: Mapping[str, Any]
    """Structured context for rule-based backends (task, space options, parent, profile, history)."""


@attrs.frozen(kw_only=True)
class AgentAnswer:
    text: str
    """The raw answer; the agent layer parses the JSON object in it."""
    input_tokens: int = 0
    output_tokens: int = 0


@runtime_checkable
class LLMBackend(Protocol):
    """Answers agent requests: a remote model, a cache, a person, or rules."""

    name: ClassVar[str]
    config_class: ClassVar[type | None]

    def answer(self, request: AgentRequest) -> AgentAnswer:
        """Return the answer to one request. Called by the engine, from one thread at a time per role."""
        ...


@runtime_checkable
class Architecture(Protocol):
    """A hardware target: toolchain, timer, profiler and the machine's peak numbers."""

    name: ClassVar[str]
    config_class: ClassVar[type | None]

    def unavailable_reason(self) -> str | None:
        """Return why this machine cannot run candidates for this architecture, or None."""
        ...

    def hardware(self) -> dict[str, Any]:
        """Describe the device (model, cores, memory, driver) for the run manifest."""
        ...

    def toolchain(self) -> dict[str, Any]:
        """The compiler, its version and flags (JSON values): whatever changes compiled output. Part of
        every candidate's id, and handed to the compile stage in `EvalJob.toolchain`."""
        ...

    def peaks(self) -> tuple[float, float]:
        """Return measured (memory GB/s, GFLOP/s) of this machine, for the roofline floors."""
        ...


@attrs.frozen(kw_only=True)
class EvalJob:
    """Everything an evaluator stage needs about one candidate; passed from stage to stage."""

    candidate: Candidate
    task: Task
    contract: Contract
    arch: str
    workdir: Path
    """The candidate's scratch directory: its source, build log and artefacts live here."""
    workload_factory: str
    """`module:Class` of the workload, so a worker process can rebuild it."""
    workload_config: dict[str, Any]
    toolchain: dict[str, Any]
    """The architecture's `toolchain()`."""
    roofline: Roofline | None = None
    artifacts: dict[str, str] = attrs.field(factory=dict)
    """What earlier stages produced (e.g. `library`: path of the built shared object)."""
    compile_s: float = 0.0
    remeasure: bool = False
    """True when the winner is measured again at the end of a run (fresh process, fresh seeds)."""


@attrs.frozen(kw_only=True)
class StagePassed:
    """A stage that succeeded: the job, with its artefacts, goes on to the next stage."""

    job: EvalJob


@runtime_checkable
class Evaluator(Protocol):
    """One stage of evaluation for one architecture (compile, run and check, profile, ...)."""

    name: ClassVar[str]
    config_class: ClassVar[type | None]
    arch: ClassVar[str]
    """The architecture this stage serves."""
    order: ClassVar[int]
    """Stages run in increasing order; the first non-`StagePassed` result ends the pipeline."""

    def evaluate(self, job: EvalJob) -> StagePassed | Evaluation:
        """Run this stage on one candidate. Called by the executor, possibly in a thread; the last
        stage returns the final Evaluation (`Measured` when every check passed)."""
        ...


@runtime_checkable
class Executor(Protocol):
    """Where and how concurrently evaluation runs."""

    name: ClassVar[str]
    config_class: ClassVar[type | None]

    def run(
        self, jobs: Iterable[EvalJob], evaluate: Callable[[EvalJob], Evaluation]
    ) -> Iterator[tuple[EvalJob, Evaluation]]:
        """Evaluate every job with `evaluate`, yielding each (job, evaluation) as it finishes."""
        ...

