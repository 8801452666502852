"""The three roles over the run's backend: each request cached, recorded and asked again with the error
when its answer is unusable; OA requests in flight at once when the backend allows it."""

from __future__ import annotations

import contextvars
import functools
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import structlog

import hiera_core.agents.prompts as prompts
from hiera_core import protocols, records
from hiera_core.agents.answers import (
    JUDGE_SCHEMA,
    OA_SCHEMA,
    SPA_SCHEMA,
    _fenced_sources,
    _unfence,
    cut_off,
    extract_json,
    ssda_schema,
    validate,
)
from hiera_core.agents.cache import ANSWER_CACHE, AnswerCache, _recorded_answer
from hiera_core.agents.context import Brief, GeneratedSource, Generation, PlanningContext
from hiera_core.plugins import PluginError, one_line
from hiera_core.protocols import AgentAnswer, AgentRequest, AnswerPending, BackendError, BackendUnusable
from hiera_core.records import Plan, SourceLabel, SpaceDecision, Strategy

if TYPE_CHECKING:
    from hiera_core.session import Session

log = structlog.get_logger(__name__)

MAX_ATTEMPTS = 3
"""A request whose answer is unusable (or that the backend could not answer) is asked again, with the
error, up to this many times in all."""


class AgentError(Exception):
    """An agent gave no usable answer within its attempts."""


class Agents:
    """The three roles over the session's backend, for one run: cached, recorded, retried."""

    def __init__(
        self,
        session: Session,
        *,
        run_dir: Path,
        record: Callable[[records.AgentCalled], None],
        recorded: Iterable[records.Event] = (),
    ) -> None:
        """`recorded`: the run's trajectory so far; a call it already holds, answered from the cache again when
        the run is resumed, is not recorded twice."""
        self.session = session
        self.backend = session.backend
        self.cache = AnswerCache(run_dir / ANSWER_CACHE)
        self.search = session.registries["searches"].get(session.config.run.strategy)()
        self._record = record
        self._recorded = {(e.round, e.role, e.sample, e.attempt) for e in recorded if isinstance(e, records.AgentCalled)}
        self._record_lock = threading.Lock()
        self.parallel_requests = max(1, int(protocols.optional(self.backend, "parallel_requests")))
        self.candidates_per_request: int | None = protocols.optional(self.backend, "candidates_per_request")
        self.repairs = bool(protocols.optional(self.backend, "repairs"))
        """Whether the backend may be asked to fix a failed candidate (a `Brief` with `repair`)."""

    @property
    def plans(self) -> bool:
        """Whether rounds are planned by SSDA and SPA (recorded as `PlanMade`) before generation."""
        return self.search.plans and self.session.config.run.planning

    def generate(self, ctx: PlanningContext, plan: Plan | None, k: int) -> Generation:
        """The round's K sources, written the way the run's strategy writes them."""
        return self.search.generate(self, ctx, plan, k)

    # --- SSDA and SPA ----------------------------------------------------------------------

    def select_space(self, ctx: PlanningContext) -> SpaceDecision:
        """SSDA: choose the space among `ctx.allowed_spaces` and score every direction."""
        directions = self.session.directions
        schema = ssda_schema(ctx.allowed_spaces, list(directions))
        prompt = prompts.ssda(self.session, ctx, schema)

        def parse(answer: AgentAnswer) -> SpaceDecision:
            data = extract_json(answer.text, complete=not answer.truncated)
            validate(data, schema)
            scores = {d: float(data["scores"][d]) for d in directions}
            return SpaceDecision(space=data["space"], scores=scores, rationale=data["rationale"])

        return self._ask(ctx, "ssda", prompt, parse)

    def plan_strategy(self, ctx: PlanningContext, decision: SpaceDecision) -> Strategy:
        """SPA: a concrete strategy for the decided space and its top direction; none is asked for when every
        direction scored 0 (the search stops there)."""
        if decision.exhausted:
            return Strategy(space=decision.space, direction=decision.direction, name="none: every direction scored 0")
        prompt = prompts.spa(self.session, ctx, decision)

        def parse(answer: AgentAnswer) -> Strategy:
            data = extract_json(answer.text, complete=not answer.truncated)
            validate(data, SPA_SCHEMA)
            return Strategy(
                space=decision.space,
                direction=decision.direction,
                name=data["name"].strip(),
                steps=list(data["steps"]),
                constraints=list(data["constraints"]),
            )

        return self._ask(ctx, "spa", prompt, parse, decision=decision)

    def judge(self, ctx: PlanningContext, space: str) -> dict[str, Any]:
        """The CudaForge-like judge (asked in the `spa` role): one bottleneck of the best candidate, read
        from its whole profile, and the one method and steps that remove it."""
        prompt = prompts.judge(self.session, ctx, space)

        def parse(answer: AgentAnswer) -> dict[str, Any]:
            data = extract_json(answer.text, complete=not answer.truncated)
            validate(data, JUDGE_SCHEMA)
            return {key: data[key] for key in JUDGE_SCHEMA["properties"] if key in data}

        return self._ask(ctx, "spa", prompt, parse)

    # --- OA ----------------------------------------------------------------------------------

    def split(self, k: int) -> list[int]:
        """How many sources each OA request of a round asks for: the backend's `candidates_per_request`
        each (the last one the rest), or all K in one request."""
        per = self.candidates_per_request or k
        return [min(per, k - start) for start in range(0, k, per)]

    def generate_candidates(
        self, ctx: PlanningContext, briefs: list[Brief], *, space: str, strategy: Strategy | None = None
    ) -> tuple[list[GeneratedSource], list[str]]:
        """OA: one request per brief, up to the backend's `parallel_requests` in flight; the sources in
        brief order, and a note for every brief that produced none."""
        k = sum(b.count for b in briefs)

        def write(sample: int, brief: Brief) -> list[GeneratedSource]:
            prompt = prompts.oa(self.session, ctx, brief, space=space, sample=sample, requests=len(briefs), k=k)
            parent_id = brief.subject.id if brief.subject else None

            def parse(answer: AgentAnswer) -> list[GeneratedSource]:
                try:
                    data = extract_json(answer.text, complete=not answer.truncated)
                    validate(data, OA_SCHEMA)
                    items = data["candidates"]
                except ValueError as exc:
                    items = [{"source": block} for block in _fenced_sources(answer.text)]
                    if not items:
                        raise ValueError(
                            f"no candidate source in the answer ({exc}); expected the JSON object asked for"
                        ) from None
                # Only `source` is read from the answer: who wrote it, from which parent, with which
                # parameters is hiera's to say (or the backend's own code's, through `labels`).
                origin = " ".join(filter(None, (self.backend.name, answer.model)))
                labels = [*answer.labels, *[SourceLabel()] * len(items)]
                sources = [
                    GeneratedSource(
                        source=_unfence(item["source"]),
                        params=dict(label.params),
                        origin=label.origin or origin,
                        parent_id=label.parent_id or parent_id,
                    )
                    for item, label in zip(items[: brief.count], labels)
                ]
                if brief.repair:  # hiera's record of what it asked for, whatever the answer says
                    sources = [attrs.evolve(s, origin=f"{s.origin} (repair)", parent_id=parent_id) for s in sources]
                return sources

            return self._ask(
                ctx,
                "oa",
                prompt,
                parse,
                sample=sample,
                candidates=brief.count,
                strategy=strategy,
                k=brief.count,
                repair=brief.subject if brief.repair else None,
            )

        outcomes = self._in_parallel([functools.partial(write, i, b) for i, b in enumerate(briefs)])
        sources, notes = [], []
        for outcome in outcomes:
            if isinstance(outcome, AgentError):
                notes.append(str(outcome))
            else:
                sources += outcome
        return sources, notes

    # --- asking ------------------------------------------------------------------------------

    def _ask(
        self,
        ctx: PlanningContext,
        role: str,
        prompt: str,
        parse: Callable[[AgentAnswer], Any],
        *,
        sample: int = 0,
        candidates: int = 0,
        **context: Any,
    ) -> Any:
        base = AgentRequest(
            role=role,
            prompt=prompt,
            context={**attrs.asdict(ctx, recurse=False), **context},
            round=ctx.round,
            sample=sample,
            candidates=candidates,
        )
        reask, error = "", None
        for attempt in range(1, MAX_ATTEMPTS + 1):
            request = attrs.evolve(base, prompt=prompt + reask, attempt=attempt)
            started = time.perf_counter()
            try:
                answer, cached, error = self._answer(request)
            except BackendUnusable as exc:  # no request can be answered: the run stops, this call recorded
                reason = f"backend {self.backend.name}: {exc}"
                self._note(request, None, cached=False, error=reason, wall_s=time.perf_counter() - started)
                raise BackendUnusable(f"{reason} (round {request.round}'s {role} request)") from exc
            value = None
            if answer is not None:
                try:
                    value = parse(answer)
                except (ValueError, KeyError, TypeError) as exc:
                    error, reask = _unusable(answer, exc, attempt)
            self._note(request, answer, cached=cached, error=error, wall_s=time.perf_counter() - started)
            if error is None:
                return value
            log.warning("agent_answer_rejected", role=role, sample=sample, attempt=attempt, error=error)
        where = f"{role} request {sample + 1}" if role == "oa" else role
        raise AgentError(f"{where}: no usable answer after {MAX_ATTEMPTS} attempts (last: {error})")

    def _answer(self, request: AgentRequest) -> tuple[AgentAnswer | None, bool, str | None]:
        """(answer, served from the cache, why there is none)."""
        recorded = self.cache.get(request)
        if recorded is not None:
            return _recorded_answer(recorded), True, None
        try:
            answer = self.backend.answer(request)
        except (BackendUnusable, AnswerPending):
            raise
        except BackendError as exc:
            return None, False, f"backend {self.backend.name}: {exc}"
        except Exception as exc:  # a bug, not an answer that could not be had: asking again cannot help
            log.exception("backend_failed", backend=self.backend.name, role=request.role)
            raise PluginError(
                f"backend '{self.backend.name}' failed on round {request.round}'s {request.role} request: {one_line(exc)}"
            ) from exc
        self.cache.put(request, answer, self.backend.name)
        return answer, False, None

    def _note(self, request: AgentRequest, answer: AgentAnswer | None, *, cached: bool, error: str | None, wall_s: float) -> None:
        if cached and (request.round, request.role, request.sample, request.attempt) in self._recorded:
            return
        event = records.AgentCalled(
            round=request.round,
            role=request.role,
            sample=request.sample,
            attempt=request.attempt,
            backend=self.backend.name,
            model=answer.model if answer else "",
            input_tokens=answer.input_tokens if answer else 0,
            output_tokens=answer.output_tokens if answer else 0,
            cost_usd=answer.cost_usd if answer else None,
            wall_s=round(wall_s, 4),
            cached=cached,
            error=error,
        )
        with self._record_lock:
            self._record(event)

    def _in_parallel(self, calls: list[Callable[[], Any]]) -> list[Any]:
        """Run `calls` with up to `parallel_requests` in flight; each result, or its AgentError, in order.
        Every call runs even when another raised, so that all requests that can go out together are posted
        before a pause (AnswerPending, raised once for all of them). Daemon threads, so that Ctrl-C ends a run
        even while a backend waits (a person, a slow service)."""
        results: list[Any] = [None] * len(calls)
        slots = threading.Semaphore(self.parallel_requests)

        def run(i: int, context: contextvars.Context) -> None:
            with slots:
                try:
                    results[i] = context.run(calls[i])
                except Exception as exc:  # noqa: BLE001 -- AgentError is a result; anything else is re-raised below
                    results[i] = exc

        threads = [threading.Thread(target=run, args=(i, contextvars.copy_context()), daemon=True) for i in range(len(calls))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for result in results:
            if isinstance(result, Exception) and not isinstance(result, (AgentError, AnswerPending)):
                raise result
        pending = [result for result in results if isinstance(result, AnswerPending)]
        if pending:
            raise AnswerPending(str(pending[0]), waiting=sum(p.waiting for p in pending)) from pending[0]
        return results


def _unusable(answer: AgentAnswer, exc: Exception, attempt: int) -> tuple[str, str]:
    """(the error recorded, the text added to the prompt when it is asked again) for an answer `parse`
    refused. An answer cut off, by the output-token limit or as its text shows, is named as such, shown
    where it ended and asked for again shorter."""
    cut = "at the output-token limit" if answer.truncated else cut_off(answer.text)
    if cut is None:
        error = f"unusable answer: {exc}"
        return error, (
            f"\n\n# Your previous answer (attempt {attempt}) was unusable\n{exc}\nIt began:\n{answer.text[:400]}"
            "\n\nAnswer again, exactly in the format asked for."
        )
    error = f"unusable answer: the answer was cut off {cut}; {exc}"
    return error, (
        f"\n\n# Your previous answer (attempt {attempt}) was cut off\nIt was cut off {cut}, so it could not be used"
        f" ({exc}). It ended:\n{answer.text[-300:]}\n\nAnswer again, exactly in the format asked for and shorter:"
        " the JSON object alone, with no text around it."
    )
