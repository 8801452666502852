"""The `replay` backend: answers every request from a recorded run's answer cache, offline.

`hiera run --replay RUN_DIR` (and `hiera_core.replay`) selects it, as the backend that `replays`. A request is answered by the recorded request with the same
place in the run (round, role, OA request, attempt) and the same prompt; when the prompt differs (it
quotes measured latencies, which differ from run to run), by the one at the same place. It never
calls a model, so it spends nothing: its answers carry no tokens and cost 0. It lets a search ask for
repairs of failed candidates only if the recorded run asked for any (an `expert` run never does).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import attrs
import structlog

from hiera_core import AgentAnswer, AgentRequest, hookimpl
from hiera_core.agents import ANSWER_CACHE, AnswerCache
from hiera_core.agents.prompts import REPAIR_HEADING
from hiera_core.protocols import BackendError
from hiera_core.records import RecordedAnswer

log = structlog.get_logger(__name__)


@attrs.frozen(kw_only=True)
class ReplayConfig:
    """`[backend.replay]`: the recorded run (`hiera run --replay RUN_DIR` sets it)."""

    source: str = ""
    """The run directory whose `cache/llm/` answers the requests."""


def _place(role: str, round_: int, sample: int, attempt: int, candidates: int) -> tuple[str, int, int, int, int]:
    return role, round_, sample, attempt, candidates


class ReplayBackend:
    name: ClassVar[str] = "replay"
    config_class: ClassVar[type] = ReplayConfig
    replays: ClassVar[bool] = True

    def __init__(self, config: ReplayConfig, context: Any) -> None:
        if not config.source:
            raise BackendError("the replay backend needs a recorded run: hiera run --replay RUN_DIR")
        folder = Path(config.source) / ANSWER_CACHE
        entries = AnswerCache(folder).entries()
        if not entries:
            raise BackendError(f"{folder} holds no recorded answer to replay")
        self.source = config.source
        self._by_prompt: dict[tuple, RecordedAnswer] = {}
        self._by_place: dict[tuple, RecordedAnswer] = {}
        for entry in entries:  # oldest first: a place asked again (a resumed run) keeps its latest answer
            place = _place(entry.role, entry.round, entry.sample, entry.attempt, entry.candidates)
            self._by_prompt[(place, entry.prompt)] = entry
            self._by_place[place] = entry
        oa = [entry for entry in entries if entry.role == "oa"]
        self.candidates_per_request = max(entry.candidates for entry in oa) if oa else None
        # A run whose backend could not repair (the expert's) asked for none: neither does its replay.
        self.repairs = any(f"# {REPAIR_HEADING}: " in entry.prompt for entry in oa)

    def answer(self, request: AgentRequest) -> AgentAnswer:
        place = _place(request.role, request.round, request.sample, request.attempt, request.candidates)
        recorded = self._by_prompt.get((place, request.prompt)) or self._by_place.get(place)
        if recorded is None:
            raise BackendError(
                f"{self.source} recorded no answer for round {request.round} {request.role}"
                f" request {request.sample + 1} attempt {request.attempt}"
            )
        if recorded.prompt != request.prompt:
            log.info("replay_prompt_differs", role=request.role, round=request.round, sample=request.sample)
        return AgentAnswer(
            text=recorded.text, model=recorded.model, cost_usd=0.0, truncated=recorded.truncated, labels=recorded.labels
        )


@hookimpl
def hiera_register_backends():
    return [ReplayBackend]
