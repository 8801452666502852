"""The run's answer cache: one recorded answer per request, addressed by a hash of the request, so that a
resumed run pays nothing twice and `hiera run --replay` answers a whole run from another run's cache."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import attrs

from hiera_core import records
from hiera_core.protocols import AgentAnswer, AgentRequest
from hiera_core.serialization import from_dict, to_dict
from hiera_core.store import write_text_atomic

ANSWER_CACHE = Path("cache") / "llm"
"""Where a run directory keeps its recorded answers."""


def request_key(request: AgentRequest) -> str:
    """The content address of a request: a hash of its prompt and its place in the run."""
    fields = {
        "role": request.role,
        "round": request.round,
        "sample": request.sample,
        "attempt": request.attempt,
        "candidates": request.candidates,
        "prompt": request.prompt,
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:32]


class AnswerCache:
    """A run's recorded answers: one `RecordedAnswer` JSON file per request, named by `request_key`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def get(self, request: AgentRequest) -> records.RecordedAnswer | None:
        file = self.path / f"{request_key(request)}.json"
        return from_dict(json.loads(file.read_text()), records.RecordedAnswer) if file.is_file() else None

    def put(self, request: AgentRequest, answer: AgentAnswer, backend: str) -> None:
        recorded = records.RecordedAnswer(
            backend=backend, **_fields_of(request, records.RecordedAnswer), **_fields_of(answer, records.RecordedAnswer)
        )
        write_text_atomic(self.path / f"{request_key(request)}.json", json.dumps(to_dict(recorded), indent=1, sort_keys=True))

    def entries(self) -> list[records.RecordedAnswer]:
        """Every recorded answer, oldest file first."""
        files = sorted(self.path.glob("*.json"), key=lambda f: f.stat().st_mtime_ns) if self.path.is_dir() else []
        return [from_dict(json.loads(f.read_text()), records.RecordedAnswer) for f in files]


def _recorded_answer(recorded: records.RecordedAnswer) -> AgentAnswer:
    return AgentAnswer(**_fields_of(recorded, AgentAnswer))


def _fields_of(source: Any, target: type) -> dict[str, Any]:
    """The attributes of `source` that are fields of the attrs class `target`."""
    return {f.name: getattr(source, f.name) for f in attrs.fields(target) if hasattr(source, f.name)}
