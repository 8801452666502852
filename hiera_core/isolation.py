"""Running untrusted candidate code: its own process group, a scratch directory, a time limit, and an
environment without secrets."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

import attrs

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
