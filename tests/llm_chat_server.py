"""A real OpenAI-compatible chat-completions server on 127.0.0.1, for the LLM tests.

It speaks `POST /v1/chat/completions` over HTTP, checks the bearer key, and answers with whatever the
test's `respond(call)` returns: content, an HTTP error status, a cut-off answer, or a slow one.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass(frozen=True)
class Call:
    """One request as the server saw it."""

    prompt: str
    model: str
    temperature: float | None
    max_tokens: int | None
    seen: int
    """How many times this exact prompt had arrived before this call."""

    @property
    def role(self) -> str:
        first = self.prompt.splitlines()[0]
        for marker, role in (
            ("Search-Space Decision", "ssda"),
            ("Strategy Planning", "spa"),
            ("Optimization Agent", "oa"),
            ("judge", "judge"),
        ):
            if marker in first:
                return role
        raise AssertionError(f"unknown role: {first}")

    @property
    def round(self) -> int:
        return int(re.search(r"^# Task: .*, round (\d+)$", self.prompt, flags=re.M).group(1))

    @property
    def request(self) -> int:
        """Which OA request of the round (1-based); 1 when the round has one."""
        found = re.search(r"This is request (\d+) of \d+", self.prompt)
        return int(found.group(1)) if found else 1

    @property
    def attempt(self) -> int:
        found = re.search(r"Your previous answer \(attempt (\d+)\)", self.prompt)
        return int(found.group(1)) + 1 if found else 1


@dataclass(frozen=True)
class Reply:
    content: str = ""
    status: int = 200
    finish_reason: str = "stop"
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


class ChatServer:
    """Serves `respond(call)` on a free port until `stop()`; `calls` lists every request received."""

    def __init__(self, respond: Callable[[Call], Reply], *, key: str, model: str = "fake-model") -> None:
        self.respond, self.key, self.model = respond, key, model
        self.calls: list[Call] = []
        self.unauthorized = 0
        """Requests refused for a wrong key (not in `calls`)."""
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                if self.headers.get("Authorization") != f"Bearer {server.key}":
                    with server._lock:
                        server.unauthorized += 1
                    return self._send(401, {"error": {"message": "invalid api key", "type": "invalid_request_error"}})
                prompt = body["messages"][-1]["content"]
                with server._lock:
                    seen = sum(1 for c in server.calls if c.prompt == prompt)
                    call = Call(
                        prompt=prompt,
                        model=body["model"],
                        temperature=body.get("temperature"),
                        max_tokens=body.get("max_tokens"),
                        seen=seen,
                    )
                    server.calls.append(call)
                reply = server.respond(call)
                time.sleep(reply.delay_s)
                if reply.status != 200:
                    return self._send(
                        reply.status, {"error": {"message": reply.content or "error", "type": "server_error"}}, reply.headers
                    )
                self._send(
                    200,
                    {
                        "id": f"chatcmpl-{len(server.calls)}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": server.model,
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": reply.content},
                                "finish_reason": reply.finish_reason,
                            }
                        ],
                        "usage": {
                            "prompt_tokens": len(prompt) // 4,
                            "completion_tokens": len(reply.content) // 4,
                            "total_tokens": len(prompt) // 4 + len(reply.content) // 4,
                        },
                    },
                )

            def _send(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in (headers or {}).items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> ChatServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> ChatServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


def answered_run(hiera, folder: Path, respond: Callable[[Call], Reply], config: str, *, key: str, key_var: str):
    """(the server, the finished `hiera --run-dir run`) of a run in `folder` configured by `config` (its
    `{url}` the server's), every request answered by `respond` through a server that accepts `key`,
    which the run reads from `key_var`."""
    server = ChatServer(respond, key=key).start()
    try:
        (folder / "hiera.toml").write_text(config.replace("{url}", server.url))
        return server, hiera("--run-dir", "run", env={key_var: key})
    finally:
        server.stop()
