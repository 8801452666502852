"""The `exchange` backend: a person or an external coding agent plays the model, through files.

Each request is written to `<dir>/requests/<id>.prompt.md` (the prompt) and `<id>.json` (its place in
the run); the backend waits for `<dir>/answers/<id>.txt`, then moves all three to `<dir>/done/`.
`hiera exchange pending` lists the waiting requests and `hiera exchange answer ID FILE` answers one;
anything else may write the answer file itself, as long as it appears whole (write, then rename).

With `when_waiting = "pause"` the backend does not wait: it posts every request it has no answer for and
raises AnswerPending, so the run stops (exit code 75) and `hiera resume RUN` later takes the answers that
arrived meanwhile. A request's id depends only on the request, so the folder can be carried to another
machine, answered there and carried back.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import attrs

from hiera_core import AgentAnswer, AgentRequest, hookimpl
from hiera_core.agents import request_key
from hiera_core.cli import UsageError, common_options
from hiera_core.config import load_config, structure
from hiera_core.protocols import AnswerPending, BackendError


@attrs.frozen(kw_only=True)
class ExchangeConfig:
    """`[backend.exchange]`: the folder where requests wait for answers, and how long to wait."""

    dir: str = "hiera-exchange"
    """The exchange folder, relative to the working directory."""
    poll_s: float = 0.2
    """How often the answer folder is looked at."""
    timeout_s: float = 0.0
    """Give up on a request after this long (recorded as a failed call); 0 waits as long as it takes."""
    when_waiting: str = "wait"
    """`wait`: the run waits for each answer; `pause`: it posts what it needs and stops (exit code 75), to be
    resumed once the answers are there."""
    concurrency: int = 8
    """Requests waiting at once: a round's OA requests are all posted together."""
    candidates_per_request: int = 1

    def __attrs_post_init__(self) -> None:
        if self.when_waiting not in ("wait", "pause"):
            raise ValueError(f"when_waiting is 'wait' or 'pause', not {self.when_waiting!r}")


@attrs.frozen(kw_only=True)
class PendingRequest:
    """A request waiting for its answer."""

    id: str
    role: str
    round: int
    sample: int
    attempt: int
    asked_at: str
    prompt_path: Path


class ExchangeFolder:
    """The files of one exchange folder; `hiera exchange` uses it as well as the backend."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.requests, self.answers, self.done = path / "requests", path / "answers", path / "done"

    @staticmethod
    def request_id(request: AgentRequest) -> str:
        """The id a request is posted under: its place in the run and a hash of it, the same every time it is asked."""
        sample = f"-{request.sample + 1}" if request.role == "oa" else ""
        return f"r{request.round}-{request.role}{sample}-a{request.attempt}-{request_key(request)[:8]}"

    def posted(self, request_id: str) -> bool:
        return (self.requests / f"{request_id}.json").is_file()

    def post(self, request: AgentRequest) -> str:
        """Write a request (prompt first, then its description, which makes it pending); return its id."""
        request_id = self.request_id(request)
        _write_whole(self.requests / f"{request_id}.prompt.md", request.prompt)
        meta = {
            "id": request_id,
            "role": request.role,
            "round": request.round,
            "sample": request.sample,
            "attempt": request.attempt,
            "asked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        _write_whole(self.requests / f"{request_id}.json", json.dumps(meta, indent=1))
        return request_id

    def take_answer(self, request_id: str) -> str | None:
        """The answer to `request_id` if it is there, its files then moved to `done/`; else None."""
        answer = self.answers / f"{request_id}.txt"
        if not answer.is_file():
            return None
        text = answer.read_text()
        self.done.mkdir(parents=True, exist_ok=True)
        for path in (answer, self.requests / f"{request_id}.prompt.md", self.requests / f"{request_id}.json"):
            if path.exists():
                os.replace(path, self.done / path.name)
        return text

    def withdraw(self, request_id: str) -> None:
        """Remove a request nobody answered in time; asking again posts a new one."""
        for path in (self.requests / f"{request_id}.json", self.requests / f"{request_id}.prompt.md"):
            path.unlink(missing_ok=True)

    def pending(self) -> list[PendingRequest]:
        """Requests without an answer yet, oldest first."""
        waiting = []
        for meta_path in self.requests.glob("*.json") if self.requests.is_dir() else ():
            meta = json.loads(meta_path.read_text())
            if not (self.answers / f"{meta['id']}.txt").exists():
                waiting.append(PendingRequest(**meta, prompt_path=self.requests / f"{meta['id']}.prompt.md"))
        return sorted(waiting, key=lambda p: (p.asked_at, p.id))

    def answer(self, request_id: str, text: str) -> Path:
        """Answer a pending request; raise LookupError when no request has that id."""
        if not (self.requests / f"{request_id}.json").is_file():
            known = ", ".join(p.id for p in self.pending()) or "none"
            raise LookupError(f"no request '{request_id}' is waiting in {self.path} (waiting: {known})")
        path = self.answers / f"{request_id}.txt"
        _write_whole(path, text)
        return path


def _write_whole(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class ExchangeBackend:
    name: ClassVar[str] = "exchange"
    config_class: ClassVar[type] = ExchangeConfig

    def __init__(self, config: ExchangeConfig, context: Any) -> None:
        self.config = config
        self.folder = ExchangeFolder(Path(config.dir))
        self.parallel_requests = config.concurrency
        self.candidates_per_request = config.candidates_per_request

    def answer(self, request: AgentRequest) -> AgentAnswer:
        if self.config.when_waiting == "pause":
            return self._answer_or_pause(request)
        request_id = self.folder.post(request)
        deadline = time.monotonic() + self.config.timeout_s if self.config.timeout_s else None
        while (text := self.folder.take_answer(request_id)) is None:
            if deadline is not None and time.monotonic() > deadline:
                self.folder.withdraw(request_id)
                raise BackendError(f"no answer to {request_id} in {self.folder.answers} within {self.config.timeout_s:g} s")
            time.sleep(self.config.poll_s)
        return AgentAnswer(text=text)

    def _answer_or_pause(self, request: AgentRequest) -> AgentAnswer:
        """The answer if it has arrived; else the request posted (once) and AnswerPending."""
        request_id = self.folder.request_id(request)
        text = self.folder.take_answer(request_id)
        if text is not None:
            return AgentAnswer(text=text)
        if not self.folder.posted(request_id):
            self.folder.post(request)
        where = self.folder.path
        raise AnswerPending(
            f"in {where / 'requests'}: `hiera exchange pending --dir {where}` lists them; `hiera exchange answer ID FILE"
            f" --dir {where}` (or {where / 'answers'}/ID.txt, written whole) answers one"
        )


@hookimpl
def hiera_register_backends():
    return [ExchangeBackend]


@hookimpl
def hiera_register_commands(commands) -> None:
    exchange = commands.add_parser("exchange", help="requests of the exchange backend, for a person or an external agent")
    actions = exchange.add_subparsers(dest="action", metavar="ACTION", required=True)
    pending = actions.add_parser("pending", help="list the requests waiting for an answer")
    answer = actions.add_parser("answer", help="answer a waiting request with the text of FILE ('-': standard input)")
    answer.add_argument("request_id", metavar="ID")
    answer.add_argument("file", metavar="FILE")
    for action in (pending, answer):
        action.add_argument("--dir", type=Path, help="the exchange folder (default: [backend.exchange] dir)")
        common_options(action)
        action.set_defaults(handler=_exchange)


def _exchange(args: argparse.Namespace, console: Any) -> int:
    """`hiera exchange pending|answer`: this backend's folder."""
    config = load_config(Path.cwd(), overrides=args.overrides, config_file=args.config)
    backend_config = structure(config.plugin_tables["backend"].get("exchange", {}), ExchangeConfig, where="[backend.exchange]")
    if args.dir is not None:
        backend_config = attrs.evolve(backend_config, dir=str(args.dir))
    folder = ExchangeFolder(Path(backend_config.dir))
    if args.action == "pending":
        waiting = folder.pending()
        for request in waiting:
            which = f" request {request.sample + 1}" if request.role == "oa" else ""
            console.print(
                f"{request.id}  {request.role}{which} round {request.round} attempt {request.attempt}  {request.prompt_path}",
                markup=False,
            )
        if not waiting:
            console.print(f"no request is waiting in {folder.path}", markup=False)
        return 0
    if args.file == "-":
        text = sys.stdin.read()
    elif Path(args.file).is_file():
        text = Path(args.file).read_text()
    else:
        raise UsageError(f"no such file: {args.file}")
    try:
        path = folder.answer(args.request_id, text)
    except LookupError as exc:
        raise UsageError(str(exc)) from None
    console.print(f"answered {args.request_id}: {path}", markup=False)
    return 0
