"""The `expert` backend: plays the three agents with rules instead of a model, with zero LLM calls.

SSDA: each direction's own scoring rule reads the best candidate's profile; a direction with no
untried move left, or with no strategy known on the run's kind of architecture, scores 0, one that has a
move at least 0.01, and one whose last round found nothing faster than the best beyond the noise of their figures
(`records.beats`) is halved; the space
is the most controlled allowed space that still admits what the best candidate uses and offers a move
and a strategy in the top direction.
SPA: the first (most promising) strategy of that direction's catalogue on this kind of architecture
(`RunContext.knowledge`) for the space its template knobs belong to. OA: the workload's templates,
moving the knobs that belong to the direction from the best parents' parameters, one knob at a time,
then in pairs (a pair whose direction's knob does not shape the kernel is the other knob's move, not
the direction's); parents far slower than the best come last.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import attrs

from hiera_core import AgentAnswer, AgentRequest, Template, hookimpl
from hiera_core.context import RunContext
from hiera_core.protocols import moved_knobs
from hiera_core.records import Candidate, Measured, SourceLabel, beats


@attrs.frozen(kw_only=True)
class ExpertConfig:
    parent_window: float = 1.5
    """A parent slower than this multiple of the best gets its moves only after the better parents' single
    and paired moves: its one-knob neighbours rarely win, and a round has only K candidates."""


MOVABLE_FLOOR = 0.01
"""The least score of a direction that still has an untried move."""


class ExpertBackend:
    name: ClassVar[str] = "expert"
    config_class: ClassVar[type] = ExpertConfig
    searches: ClassVar[tuple[str, ...]] = ("hiera",)
    """It answers HIERA's own roles only: the baselines need a model."""
    repairs: ClassVar[bool] = False
    """Its rules move template knobs; they cannot fix a failed source, so none is asked for."""

    def __init__(self, config: ExpertConfig, context: RunContext) -> None:
        self.config = config
        self.context = context

    def answer(self, request: AgentRequest) -> AgentAnswer:
        if request.role == "oa":
            written = self.generate_candidates(request.context)
            return AgentAnswer(
                text=json.dumps({"candidates": [{"source": template.render(params)} for template, params, _ in written]}),
                labels=[
                    SourceLabel(origin=template.describe(params), params=params, parent_id=parent)
                    for template, params, parent in written
                ],
            )
        handler = {"ssda": self.select_space, "spa": self.plan_strategy}[request.role]
        return AgentAnswer(text=json.dumps(handler(request.context)))

    # --- the three roles ---------------------------------------------------------------------

    def select_space(self, ctx: Mapping[str, Any]) -> dict[str, Any]:
        profile = ctx["parent_evaluation"].profile if isinstance(ctx["parent_evaluation"], Measured) else None
        widest = ctx["allowed_spaces"][-1]
        stalled = self._stalled_direction(ctx)
        scores, reasons = {}, []
        for name, direction in self.context.directions.items():
            try:
                score, reason = direction.score(profile)
            except Exception as exc:
                exc.add_note(f"in direction '{name}' ({type(direction).__module__}.{type(direction).__qualname__}).score")
                raise
            if next(self._moves(ctx, name, widest, pairs=False), None) is None:
                score, reason = 0.0, f"{name}: no untried move left in {widest}"
            elif not self.context.knowledge[name].strategies_for(self.context.space(widest).rank):
                score, reason = 0.0, f"{name}: no strategy known on '{self.context.kind}' architectures in {widest}"
            elif score < MOVABLE_FLOOR:  # e.g. no profile: a direction that can move beats one that cannot
                score, reason = MOVABLE_FLOOR, f"{reason}; {MOVABLE_FLOOR}: it still has an untried move"
            if name == stalled and score > 0:
                score, reason = score / 2, f"{reason}; halved: last round's {name} did not improve the best"
            scores[name] = round(score, 3)
            reasons.append(reason)
        top = max(scores, key=lambda d: (scores[d], -list(scores).index(d)))
        rank = {s.name: s.rank for s in self.context.spaces}
        keeps_parent = [s for s in ctx["allowed_spaces"] if rank[s] >= self._parent_rank(ctx, rank)] or ctx["allowed_spaces"]
        known = self.context.knowledge[top]
        space = next(
            (
                s
                for s in keeps_parent
                if known.strategies_for(rank[s]) and next(self._moves(ctx, top, s, pairs=False), None) is not None
            ),
            widest,
        )
        rationale = "; ".join(reasons) + (
            f". Space {space}: the most controlled allowed space that keeps what the best candidate uses and offers a {top} move."
        )
        return {"space": space, "scores": scores, "rationale": rationale}

    def _parent_rank(self, ctx: Mapping[str, Any], rank: dict[str, int]) -> int:
        """The rank of the smallest space that admits everything the best candidate's parameters use:
        a new direction should not begin by giving up the parent's library features."""
        parent = ctx["parent"]
        if parent is None:
            return 0
        needed = [
            rank[knob.space]
            for template in self.context.workload.templates(ctx["task"], ctx["kind"])
            if parent.origin.split()[:1] == [template.name]
            for name, knob in template.knobs.items()
            if parent.params.get(name, knob.values[0]) != knob.values[0]
        ]
        return max(needed, default=0)

    def plan_strategy(self, ctx: Mapping[str, Any]) -> dict[str, Any]:
        decision = ctx["decision"]
        # The catalogue entry of the space the direction's knobs live in: that is what the moves change.
        rank = {s.name: s.rank for s in self.context.spaces}
        knob_ranks = [
            rank[knob.space]
            for template in self.context.workload.templates(ctx["task"], ctx["kind"])
            for knob in template.knobs.values()
            if knob.direction in self._knob_directions(decision.direction) and rank[knob.space] <= rank[decision.space]
        ]
        home = (
            next((s.name for s in self.context.spaces if s.rank == min(knob_ranks)), decision.space)
            if knob_ranks
            else decision.space
        )
        known = self.context.knowledge[decision.direction]
        strategy = (
            known.strategies_for(self.context.space(home).rank) or known.strategies_for(self.context.space(decision.space).rank)
        )[0]
        return {"name": strategy.name, "steps": list(strategy.steps), "constraints": list(strategy.constraints)}

    def generate_candidates(self, ctx: Mapping[str, Any]) -> list[tuple[Template, dict[str, Any], str | None]]:
        """Up to K moves: (template, its parameters, the parent's id), each rendered as one candidate. The
        answer's text holds only the sources; what hiera records of them travels as the answer's labels."""
        strategy = ctx["strategy"]
        if strategy is None:  # --no-planning: every direction, round robin, in the widest space
            space = ctx["allowed_spaces"][-1]
            streams = [self._moves(ctx, d, space) for d in self.context.directions]
            moves = _round_robin(streams)
        else:
            moves = self._moves(ctx, strategy.direction, strategy.space)
        return list(itertools.islice(moves, ctx["k"]))

    # --- moves -------------------------------------------------------------------------------

    def _moves(
        self, ctx: Mapping[str, Any], direction: str, space: str, pairs: bool = True
    ) -> Iterator[tuple[Template, dict, str | None]]:
        """Untried parameter moves of `direction` admissible in `space`: its own knobs one at a time,
        then (with `pairs`) one of its knobs together with any other admissible knob."""
        templates = self.context.workload.templates(ctx["task"], ctx["kind"])
        rank = {s.name: s.rank for s in self.context.spaces}
        tried = {c.source for c, _ in ctx["history"]}
        seen: set[str] = set()
        for group in self._parent_groups(ctx):
            for paired in (False, True) if pairs else (False,):
                for parent in group:
                    for template in templates:
                        base = _base_params(template, parent, rank, space)
                        for params, own in _neighbours(template, base, self._knob_directions(direction), rank, space, paired):
                            source = template.render(params)
                            if source == template.render({**params, own: base[own]}):
                                continue  # the direction's own knob does not shape this kernel: not its move
                            if source not in tried and source not in seen:
                                seen.add(source)
                                yield template, params, parent.id if parent else None

    def _knob_directions(self, direction: str) -> frozenset[str]:
        return moved_knobs(self.context.directions[direction])

    def _parent_groups(self, ctx: Mapping[str, Any]) -> list[list[Candidate | None]]:
        """The parents within `parent_window` of the best, then the slower ones (best first in each)."""
        parents: list[Candidate | None] = list(ctx["parents"]) or [None]
        latency = {c.id: e.latency_ms for c, e in ctx["history"] if isinstance(e, Measured)}
        best = min((latency[p.id] for p in parents if p is not None and p.id in latency), default=None)
        if best is None:
            return [parents]
        near = [p for p in parents if p is None or latency.get(p.id, best) <= best * self.config.parent_window]
        return [near, [p for p in parents if p not in near]]

    def _stalled_direction(self, ctx: Mapping[str, Any]) -> str | None:
        """The direction of the last round, if that round found nothing faster than the best before it."""
        history = ctx["history"]
        last_round = max((c.round for c, _ in history), default=0)
        if last_round == 0:
            return None
        before = [e for c, e in history if c.round < last_round and isinstance(e, Measured)]
        last = [(c, e) for c, e in history if c.round == last_round]
        best = min(before, key=lambda e: e.latency_ms) if before else None
        improved = any(isinstance(e, Measured) and (best is None or beats(e, best)) for _, e in last)
        return None if improved else last[0][0].direction


def _base_params(template: Template, parent: Candidate | None, rank: dict[str, int], space: str) -> dict[str, Any]:
    """The parent's parameters if it came from this template, defaults otherwise; knobs the space
    does not admit go back to their default."""
    params = dict(parent.params) if parent is not None and parent.origin.split()[0] == template.name else {}
    return {
        name: params[name] if name in params and rank[knob.space] <= rank[space] else knob.values[0]
        for name, knob in template.knobs.items()
    }


def _neighbours(template, base, knob_directions, rank, space, pairs) -> Iterator[tuple[dict[str, Any], str]]:
    """(params, the direction's knob they change): each own knob (of `knob_directions`) moved alone, or with one
    other knob."""
    admissible = [n for n, k in template.knobs.items() if rank[k.space] <= rank[space]]
    own = [n for n in admissible if template.knobs[n].direction in knob_directions]
    for name in own:
        for value in template.knobs[name].values:
            if value == base[name]:
                continue
            if not pairs:
                yield {**base, name: value}, name
                continue
            for other in admissible:
                if other == name:
                    continue
                for other_value in template.knobs[other].values:
                    if other_value != base[other]:
                        yield {**base, name: value, other: other_value}, name


def _round_robin(streams: list[Iterator]) -> Iterator:
    while streams:
        for stream in list(streams):
            item = next(stream, None)
            if item is None:
                streams.remove(stream)
            else:
                yield item


@hookimpl
def hiera_register_backends():
    return [ExpertBackend]


@hookimpl
def hiera_run_defaults() -> dict[str, str]:
    return {"backend": ExpertBackend.name}  # no model, no network
