"""What the agents are given and what they give back: a round's planning context, the OA's briefs, the
sources it writes and how a round labels them."""

from __future__ import annotations

from typing import Any

import attrs

from hiera_core.records import Candidate, Contract, Evaluation, Plan, Roofline, Task


@attrs.frozen(kw_only=True)
class PlanningContext:
    """What the agents know at the start of a round."""

    round: int
    task: Task
    arch: str
    kind: str
    """The architecture's kind (`Architecture.kind`): what the workload's side and templates are written for."""
    contract: Contract
    """The frozen contract: the file a candidate writes, its interface, the frozen files."""
    toolchain: dict[str, Any]
    """The architecture's toolchain (compiler, version, flags), quoted so the model writes for it."""
    parent: Candidate | None
    parent_evaluation: Evaluation | None
    parents: list[Candidate]
    history: list[tuple[Candidate, Evaluation]]
    plans: list[Plan]
    """The plans of earlier rounds, oldest first."""
    allowed_spaces: list[str]
    planning: bool
    inputs: str = ""
    """The workload's account of the task's inputs (`Workload.inputs`): ranges, distributions, checked sizes."""
    roofline: Roofline | None = None
    """The run's floors: this machine's measured peaks and the task's work, quoted in the Target section."""


@attrs.frozen(kw_only=True)
class GeneratedSource:
    source: str
    params: dict[str, Any] = attrs.field(factory=dict)
    origin: str = ""
    parent_id: str | None = None


@attrs.frozen(kw_only=True)
class Generation:
    """What a round's generation produced: the sources, how to label their candidates, what went wrong."""

    sources: list[GeneratedSource]
    space: str
    """The space every source was written for (and is checked against)."""
    direction: str | None
    strategy: str
    notes: list[str] = attrs.field(factory=list)


@attrs.frozen(kw_only=True)
class Brief:
    """One OA request: the candidate it shows, what running that gave, what to do, how many sources."""

    subject: Candidate | None
    feedback: str
    instruction: str
    count: int
    show_failures: bool = True
    """Also show the last round's failures (a generate-and-fix lineage sees only its own)."""
    show_history: bool = True
    """Also list what was tried in the space so far, with results (HIERA's search; a generate-and-fix lineage sees
    only its own feedback)."""
    repair: bool = False
    """The subject failed and is to be fixed: the prompt shows it as the candidate to repair, and each source
    written is recorded with the subject as its parent and `(repair)` after its origin."""
