"""The paper's three agent roles: prompts in, validated structured answers out.

SSDA (`select_space`) chooses the implementation space and scores the five directions (Eq. 3-4);
SPA (`plan_strategy`) turns space and direction into a strategy (Eq. 5); OA (`generate_candidates`)
writes K candidate sources (Eq. 6). Every request carries both the prompt a model reads and the same
context as data, so a rule-based backend (`expert`) answers through the same path as a model.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import attrs
import structlog

from hiera_core.protocols import AgentRequest
from hiera_core.records import Candidate, Evaluation, Measured, SpaceDecision, Strategy, Task

if TYPE_CHECKING:
    from hiera_core.session import Session

log = structlog.get_logger(__name__)

MAX_ATTEMPTS = 3
"""An answer that cannot be parsed is asked again, with the error, up to this many times in all."""


class AgentError(Exception):
    """An agent gave no usable answer within its attempts."""


@attrs.frozen(kw_only=True)
class PlanningContext:
    """What the agents know at the start of a round."""

    round: int
    task: Task
    arch: str
    interface: str
    """The contract's interface text: what the candidate must define."""
    source_filename: str
    parent: Candidate | None
    parent_evaluation: Evaluation | None
    parents: list[Candidate]
    history: list[tuple[Candidate, Evaluation]]
    allowed_spaces: list[str]
    planning: bool


@attrs.frozen(kw_only=True)
class GeneratedSource:
    source: str
    params: dict[str, Any] = attrs.field(factory=dict)
    origin: str = ""
    parent_id: str | None = None


def _context(ctx: PlanningContext, **extra: Any) -> dict[str, Any]:
    return {**attrs.asdict(ctx, recurse=False), **extra}


def _profile_summary(evaluation: Evaluation | None) -> str:
    if not isinstance(evaluation, Measured):
        return "no measurement yet"
    lines = [
        f"latency {evaluation.latency_ms:.3f} ms (p10 {evaluation.latency_p10_ms:.3f}, p90 {evaluation.latency_p90_ms:.3f}),"
        f" reference {evaluation.reference_latency_ms:.3f} ms"
    ]
    profile = evaluation.profile
    if profile is not None:
        if profile.unavailable:
            lines.append(f"profiler unavailable: {profile.unavailable}")
        lines += [f"- {name} = {value:.3f}" for name, value in sorted(profile.signals.items())]
        lines += [f"* {finding}" for finding in profile.findings[:5]]
    return "\n".join(lines)


def _history_summary(history: list[tuple[Candidate, Evaluation]], limit: int = 12) -> str:
    rows = []
    for candidate, evaluation in history[-limit:]:
        outcome = (
            f"{evaluation.latency_ms:.3f} ms"
            if isinstance(evaluation, Measured)
            else f"{type(evaluation).__name__}: {_first_line(evaluation)}"
        )
        rows.append(f"- round {candidate.round} {candidate.space} {candidate.direction or '-'} {candidate.strategy or 'seed'}: {outcome}")
    return "\n".join(rows) or "- none"


def _first_line(evaluation: Evaluation) -> str:
    text = getattr(evaluation, "reason", None) or getattr(evaluation, "log", None) or ""
    return text.strip().splitlines()[0][:200] if text.strip() else ""


def _common(ctx: PlanningContext) -> str:
    parent = ctx.parent.source if ctx.parent else "(none yet)"
    return (
        f"# Task: {ctx.task.name} ({ctx.task.workload}) on {ctx.arch}\n{ctx.task.description}\n\n"
        f"# Contract: you write only `{ctx.source_filename}`; it must define\n{ctx.interface}\n\n"
        f"# Current best candidate\n```\n{parent}\n```\n\n# Its measurement and profile\n"
        f"{_profile_summary(ctx.parent_evaluation)}\n\n# History\n{_history_summary(ctx.history)}\n"
    )


def _ask(session: Session, role: str, prompt: str, context: dict[str, Any], parse) -> Any:
    error = None
    for attempt in range(1, MAX_ATTEMPTS + 1):
        text = prompt if error is None else f"{prompt}\n\nYour previous answer was unusable: {error}\nAnswer again."
        answer = session.backend.answer(AgentRequest(role=role, prompt=text, context=context))
        try:
            return parse(answer.text)
        except (ValueError, KeyError, TypeError) as exc:
            error = str(exc)
            log.warning("agent_answer_rejected", role=role, attempt=attempt, error=error)
    raise AgentError(f"{role}: no usable answer after {MAX_ATTEMPTS} attempts (last error: {error})")


def extract_json(text: str) -> dict[str, Any]:
    """The JSON object in a model's answer: fenced or bare, tolerating text around it."""
    fenced = re.findall(r"```(?:json)?\s*(\{.*?\})\s*```", text, flags=re.S)
    for candidate in [*fenced, text[text.find("{") : text.rfind("}") + 1]]:
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    raise ValueError("no JSON object found in the answer")


def select_space(session: Session, ctx: PlanningContext) -> SpaceDecision:
    """SSDA: choose the space among `ctx.allowed_spaces` and score the five directions."""
    spaces = "\n".join(f"- {s.name}: {s.description}" for s in session.spaces if s.name in ctx.allowed_spaces)
    rubric = "\n".join(f"- {d.name} ({d.title}): {d.rubric}" for d in session.directions.values())
    prompt = (
        "You are the Search-Space Decision Agent of a GPU kernel optimizer.\n"
        f"{_common(ctx)}\n# Implementation spaces you may choose\n{spaces}\n\n# Directions and rubric\n{rubric}\n\n"
        'Answer with JSON: {"space": "<name>", "scores": {"C": 0..1, "P": .., "M": .., "R": .., "T": ..}, "rationale": "..."}'
    )

    def parse(text: str) -> SpaceDecision:
        data = extract_json(text)
        space = data["space"]
        if space not in ctx.allowed_spaces:
            raise ValueError(f"space {space!r} is not one of {ctx.allowed_spaces}")
        scores = {str(k): float(v) for k, v in data["scores"].items()}
        unknown = set(scores) - set(session.directions)
        if unknown or not scores:
            raise ValueError(f"scores must be for directions {sorted(session.directions)}, got {sorted(scores)}")
        return SpaceDecision(space=space, scores=scores, rationale=str(data.get("rationale", "")))

    return _ask(session, "ssda", prompt, _context(ctx), parse)


def plan_strategy(session: Session, ctx: PlanningContext, decision: SpaceDecision) -> Strategy:
    """SPA: a concrete strategy for the decided space and top direction."""
    direction = session.directions[decision.direction]
    catalogue = "\n".join(f"- {s.name}: {' '.join(s.steps)}" for s in direction.strategies(decision.space))
    prompt = (
        "You are the Strategy Planning Agent of a GPU kernel optimizer.\n"
        f"{_common(ctx)}\n# Space: {decision.space}\n{session.space(decision.space).description}\n\n"
        f"# Direction {direction.name}: {direction.title}\n{direction.knowledge}\n\n# Known strategies\n{catalogue}\n\n"
        'Answer with JSON: {"name": "<kebab-case>", "steps": ["..."], "constraints": ["..."]}'
    )

    def parse(text: str) -> Strategy:
        data = extract_json(text)
        steps = [str(s) for s in data["steps"]]
        if not data["name"] or not steps:
            raise ValueError("a strategy needs a name and at least one step")
        return Strategy(
            space=decision.space,
            direction=decision.direction,
            name=str(data["name"]),
            steps=steps,
            constraints=[str(c) for c in data.get("constraints", [])],
        )

    return _ask(session, "spa", prompt, _context(ctx, decision=decision), parse)


def generate_candidates(session: Session, ctx: PlanningContext, strategy: Strategy | None, k: int) -> list[GeneratedSource]:
    """OA: K candidate sources implementing `strategy` (or, without planning, any improvement)."""
    if strategy is None:
        instruction = "Make the current best candidate faster, any way you see fit within the contract."
    else:
        instruction = (
            f"Apply strategy `{strategy.name}` (direction {strategy.direction}, space {strategy.space}):\n"
            + "\n".join(f"{i}. {step}" for i, step in enumerate(strategy.steps, 1))
            + "\nConstraints:\n"
            + "\n".join(f"- {c}" for c in [*strategy.constraints, session.space(strategy.space).description])
        )
    prompt = (
        "You are the Optimization Agent of a GPU kernel optimizer.\n"
        f"{_common(ctx)}\n# What to do\n{instruction}\n\n"
        f"Write {k} different complete versions of `{ctx.source_filename}`. "
        'Answer with JSON: {"candidates": [{"source": "<the whole file>"}, ...]}'
    )

    def parse(text: str) -> list[GeneratedSource]:
        try:
            items = extract_json(text)["candidates"]
        except ValueError:
            blocks = re.findall(r"```[a-zA-Z+]*\n(.*?)```", text, flags=re.S)
            items = [{"source": b} for b in blocks]
        sources = [
            GeneratedSource(
                source=str(item["source"]),
                params=dict(item.get("params", {})),
                origin=str(item.get("origin", "")),
                parent_id=item.get("parent_id") or (ctx.parent.id if ctx.parent else None),
            )
            for item in items
            if str(item.get("source", "")).strip()
        ]
        if not sources:
            raise ValueError("the answer holds no candidate source")
        return sources[:k]

    return _ask(session, "oa", prompt, _context(ctx, strategy=strategy, k=k), parse)

