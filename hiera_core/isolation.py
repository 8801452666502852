"""Running untrusted candidate code: its own process group, a scratch directory, a time limit, and an
environment without secrets."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import attrs

from hiera_core.records import Crashed, Evaluation, Incorrect, TimedOut

PASSED_VARIABLES = frozenset(
    {
        "PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH",
        "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "TORCH_CUDA_ARCH_LIST", "OMP_NUM_THREADS",
        "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
    }
)
"""The only variables a candidate's process inherits; API keys and every other secret stay behind."""


@attrs.frozen(kw_only=True)
class IsolatedResult:
    returncode: int | None
    """The exit status; negative for a signal (as subprocess reports it); None when killed on time-out."""
    stdout: str
    stderr: str
    timed_out: bool


def candidate_environment(scratch: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in PASSED_VARIABLES}
    env["HOME"] = str(scratch)
    env.update(extra or {})
    return env


def run_isolated(
    command: Sequence[str], *, cwd: Path, timeout_s: float, stdin: str = "", env_extra: dict[str, str] | None = None
) -> IsolatedResult:
    """Run `command` in `cwd` with a scrubbed environment; kill its whole process group on time-out."""
    cwd.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        list(command),
        cwd=cwd,
        env=candidate_environment(cwd, env_extra),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(stdin, timeout=timeout_s)
        return IsolatedResult(returncode=process.returncode, stdout=stdout, stderr=stderr, timed_out=False)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        return IsolatedResult(returncode=None, stdout=stdout, stderr=stderr, timed_out=True)


def describe_exit(returncode: int) -> str:
    """`killed by SIGSEGV (segmentation fault)` or `exit status 3`."""
    if returncode < 0:
        sig = signal.Signals(-returncode)
        return f"killed by {sig.name} ({signal.strsignal(sig)})"
    return f"exit status {returncode}"


READY = "hiera-worker-ready"
"""The line a worker prints once it has prepared everything that needs no device; it then waits for `go`."""


def run_worker(module: str, request: dict[str, Any], *, workdir: Path, timeout_s: float,
               device_lock: AbstractContextManager | None = None, command: Sequence[str] | None = None,
               ) -> dict[str, Any] | Evaluation:
    """Run an architecture's worker (`python -m module`, or `command` wrapped around it) on one candidate,
    isolated, with `request` as a JSON line on stdin.

    The worker starts at once and prepares (interpreter, imports, harness); only after it prints `READY`
    is `device_lock` taken and `go` sent, so start-up overlaps other candidates' device time. Each phase
    has `timeout_s`. Returns the answer of a candidate that passed (a dict), or the Evaluation that ends
    its pipeline: TimedOut, Crashed (a signal, an exit without an answer, or an answer of kind `crashed`)
    or Incorrect (an answer of kind `incorrect`). The worker's stderr goes to `workdir/worker.log`.
    """
    scratch = workdir / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    with open(workdir / "worker.log", "w") as log:
        process = subprocess.Popen(
            list(command or [sys.executable, "-m", module]), cwd=scratch, env=candidate_environment(scratch),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True,
        )
        try:
            process.stdin.write(json.dumps(request) + "\n")
            process.stdin.flush()
            before = _read_until_ready(process, timeout_s)
            if before is None:
                return TimedOut(limit_s=timeout_s)
            with device_lock or contextlib.nullcontext():
                stdout, _ = process.communicate("go\n" if process.poll() is None else None, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            return TimedOut(limit_s=timeout_s)
        except BrokenPipeError:
            stdout, before = "", ""
            process.wait()
    lines = (before + stdout).strip().splitlines()
    if process.returncode != 0 or not lines or not lines[-1].startswith("{"):
        tail = [line for line in (workdir / "worker.log").read_text().splitlines() if line.strip()][-2:]
        return Crashed(reason=f"{describe_exit(process.returncode)}{': ' + ' | '.join(tail) if tail else ''}")
    answer = json.loads(lines[-1])
    if answer["kind"] == "incorrect":
        return Incorrect(reason=answer["reason"], max_abs_error=answer.get("max_abs_error"))
    if answer["kind"] == "crashed":
        return Crashed(reason=answer["reason"])
    return answer


def _read_until_ready(process: subprocess.Popen, timeout_s: float) -> str | None:
    """Everything the worker printed before READY ("" if it exited first); None on time-out."""
    deadline = time.monotonic() + timeout_s
    seen = []
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
                return None
            if not selector.select(remaining):
                continue
            line = process.stdout.readline()
            if not line:  # exited before it was ready
                process.wait()
                return "".join(seen)
            if line.strip() == READY:
                return "".join(seen)
            seen.append(line)


def wait_for_go() -> None:
    """Worker side: say READY, then block until the parent holds the device and sends `go`."""
    print(READY, flush=True)
    if sys.stdin.readline().strip() != "go":
        sys.exit(3)
