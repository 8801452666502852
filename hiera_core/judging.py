"""The judge and the runner: who decides a candidate's verdict, and how they talk.

Three processes take part in evaluating a candidate on a device:

    hiera ──JudgeRequest──► judge (sandboxed, trusted: never loads candidate code)
                              │  makes every input, owns the buffers, computes the references,
                              │  compares, and times each call with its own clock
                              ├──Order──► runner (same sandbox, no capabilities: loads the candidate,
                              ◄──Reply──   calls it on the judge's buffers; what it says is a claim)
    hiera ◄──JudgeAnswer── judge

Everything that crosses a boundary is a record of `hiera_core.records`, encoded by the one converter; a
runner's reply that does not decode, or comes out of turn, ends the evaluation as a crash. This module
holds the three sides' plumbing; an architecture's judge and runner (`hiera_plugins.host.judge`, ...)
hold the semantics.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import json
import os
import re
import resource
import selectors
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import attrs

from hiera_core import sandbox
from hiera_core.config import structure
from hiera_core.records import (
    CallDone,
    CallFailed,
    Crashed,
    Evaluation,
    JudgeAnswer,
    JudgeRequest,
    Judged,
    Loaded,
    Ready,
    LoadOrder,
    Order,
    Reply,
    Task,
    TimedOut,
)
from hiera_core.serialization import from_dict, to_dict

READY = "hiera-judge-ready"
"""The line a judge prints once it has prepared everything that needs no device; it then waits for `go`."""
RUNNER_LOG = "runner.log"
"""The runner's stderr (the candidate's prints among it), in the judge's scratch directory."""
STDERR_TAIL_LINES = 20
STDERR_TAIL_CHARS = 2000
"""How much of a crashed candidate's stderr its `Crashed` record keeps: lines, and characters in all."""
STDERR_LINE_CHARS = 240
_ESCAPES = re.compile(r"\x1b(\[[0-9;?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|[@-_])")


# --- hiera's side --------------------------------------------------------------------------------


_holds = threading.local()


@contextlib.contextmanager
def device_lock(name: str):
    """One process at a time on a device (`gpu-0`, ...), across threads and hiera processes: what holds it times
    or profiles undisturbed. Each hold's interval goes to the thread's `recording_holds` list, if one is open."""
    with open(Path(tempfile.gettempdir()) / f"hiera-{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        start = time.time()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
            held = getattr(_holds, "intervals", None)
            if held is not None:
                held.append((round(start, 4), round(time.time(), 4)))


@contextlib.contextmanager
def recording_holds():
    """The (start, end) Unix seconds of every device hold this thread takes inside the block (one job's stages)."""
    previous = getattr(_holds, "intervals", None)
    _holds.intervals = []
    try:
        yield _holds.intervals
    finally:
        _holds.intervals = previous


class StartedJudge:
    """An architecture's judge (`python -m module`) for one candidate, in a new sandbox, started before the
    candidate is built: it prepares (interpreter, imports, harness, its runner up to `Ready`) while the build runs,
    and only then does anything wait for it.

    `evaluate(job)` copies the built library (`job.artifacts["library"]`) into the judge's scratch folder, waits
    for `READY`, takes `device_lock`, and sends `go` with the library's path; so neither the start-up nor the build
    holds the device. Each phase has `timeout_s`; at the end of it the whole sandbox is killed. `measured(job,
    judged)` turns the judge's `Judged` into the stage's result; any other answer ends the pipeline. The judge's log
    goes to `workdir/judge.log`. `cancel()` kills a judge whose candidate never got built."""

    def __init__(self, module: str, request: JudgeRequest, *, workdir: Path, timeout_s: float,
                 measured: Callable[[Any, Judged], Any], memory_bytes: int | None = None,
                 device_lock: AbstractContextManager | None = None, env_extra: dict[str, str] | None = None) -> None:
        self.scratch, self.workdir, self.timeout_s = workdir / "scratch", workdir, timeout_s
        self.measured, self.device_lock = measured, device_lock
        self.log = open(workdir / "judge.log", "w")
        try:
            self.box = sandbox.start(
                [sys.executable, "-m", module], scratch=self.scratch, memory_bytes=memory_bytes, env_extra=env_extra,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
            )
        except BaseException:
            self.log.close()
            raise
        try:
            self.box.process.stdin.write(json.dumps(to_dict(request)) + "\n")
            self.box.process.stdin.flush()
        except BrokenPipeError:
            pass  # it ended at once: `evaluate` reports how

    def evaluate(self, job: Any) -> Any:
        """The stage's result for `job`, whose library is built: the judge's verdict."""
        answer = self._answer(Path(job.artifacts["library"]))
        return self.measured(job, answer) if isinstance(answer, Judged) else answer

    def cancel(self) -> None:
        """End a judge that will not be asked: its candidate did not build. Its folders go with it."""
        self._stop()
        (self.workdir / "judge.log").unlink(missing_ok=True)
        shutil.rmtree(self.scratch, ignore_errors=True)

    def _stop(self) -> None:
        self.box.kill()
        self.box.process.wait()
        self.log.close()

    def _answer(self, library: Path) -> Judged | Evaluation:
        copy = self.scratch / library.name  # in the sandbox's own folder, which it sees whatever becomes of /tmp there
        shutil.copyfile(library, copy)
        box = self.box
        try:
            before = _read_until(box, READY, self.timeout_s)
            if before is None:
                return TimedOut(limit_s=self.timeout_s)
            stdout, ready = before
            if ready:
                with self.device_lock or contextlib.nullcontext():
                    box.process.stdin.write(f"go {json.dumps(str(copy))}\n")
                    box.process.stdin.flush()
                    after = _read_until(box, None, self.timeout_s)
                if after is None:
                    return TimedOut(limit_s=self.timeout_s)
                stdout = after[0]
            box.process.wait(timeout=60)  # its output closed: it is ending
        except (BrokenPipeError, subprocess.TimeoutExpired):
            stdout = ""
        finally:
            self._stop()
            copy.unlink(missing_ok=True)
        lines = stdout.strip().splitlines()
        if not lines:
            tail = [line for line in (self.workdir / "judge.log").read_text().splitlines() if line.strip()][-2:]
            return Crashed(reason=f"the judge gave no answer ({sandbox.describe_exit(box.process.returncode or 0)})"
                                  f"{': ' + ' | '.join(tail) if tail else ''}", stderr_tail=stderr_tail(self.scratch / RUNNER_LOG))
        return from_dict(json.loads(lines[-1]), JudgeAnswer)


def _read_until(box: sandbox.Sandboxed, marker: str | None, timeout_s: float) -> tuple[str, bool] | None:
    """Everything the judge prints up to `marker` (or to its end), and whether the marker came; None, everything
    killed, on time-out. A judge that answers before READY (its runner never started) ends without it."""
    deadline = time.monotonic() + timeout_s
    seen = []
    stream = box.process.stdout
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                box.kill()
                return None
            if not selector.select(remaining):
                continue
            line = stream.readline()
            if not line or (marker is not None and line.strip() == marker):
                return "".join(seen), bool(line)
            seen.append(line)


# --- the judge's side ----------------------------------------------------------------------------


def harness_of(workload_factory: str, workload_config: dict[str, Any], task: Task, arch: str) -> Any:
    """The workload's harness for `task` on `arch`, rebuilt in a judge or a runner process from its factory
    (`module:Class@DIR`, see `engine.workload_factory`)."""
    module, _, rest = workload_factory.partition(":")
    qualname, _, root = rest.partition("@")
    if root and root not in sys.path:
        sys.path.append(root)
    workload_cls = getattr(importlib.import_module(module), qualname)
    config = structure(workload_config, workload_cls.config_class, where="judge") if workload_cls.config_class else None
    return workload_cls(config).harness(task, arch)


def stderr_tail(path: Path) -> str:
    """The last lines a candidate's process wrote to `path` (its stderr), as a `Crashed` record keeps them: at
    most `STDERR_TAIL_LINES` non-blank lines of `STDERR_LINE_CHARS` characters each and `STDERR_TAIL_CHARS` in
    all, terminal escape sequences and other control characters dropped, undecodable bytes replaced; "" when
    there is none. Only the end of the file is read, however much the candidate wrote."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 8 * STDERR_TAIL_CHARS))
            data = handle.read()
    except OSError:
        return ""
    text = _ESCAPES.sub("", data.decode(errors="replace")).replace("\r", "\n").replace("\t", "    ")
    lines = ["".join(ch for ch in line if ch.isprintable()).rstrip() for line in text.split("\n")]
    lines = [line if len(line) <= STDERR_LINE_CHARS else line[: STDERR_LINE_CHARS - 1] + "…" for line in lines if line.strip()]
    kept: list[str] = []
    for line in reversed(lines[-STDERR_TAIL_LINES:]):
        if sum(len(k) + 1 for k in kept) + len(line) > STDERR_TAIL_CHARS:
            break
        kept.insert(0, line)
    return "\n".join(kept)


def describe_call(case: dict[str, Any], seed: int, distribution: str) -> str:
    """One call of a check as a `Crashed` record names it: `odd (n=37), seed 2, spiky inputs` (the case's label,
    its scalar fields the label does not already say, the seed, the distribution)."""
    label = str(case.get("label", "case"))
    sizes = [f"{k}={v}" for k, v in case.items()
             if k not in ("label", "first_seed_only") and isinstance(v, (int, float, str)) and f"{k}={v}" not in label]
    shown = f"{label} ({', '.join(sizes)})" if sizes else label
    return f"{shown}, seed {seed}, {distribution} inputs"


STARTUP = "the runner's start-up, before the candidate was loaded"
"""The case of a runner that died or ran out of time before it said Ready: its start-up (the interpreter, the
device's context) runs beside other candidates' builds and has the judge's time limit, not one call's."""


class RunnerGone(Exception):
    """The runner died, hung, or broke the protocol: the candidate crashed (or timed out). `signal` names the
    signal that killed it, when one did."""

    def __init__(self, reason: str, *, timed_out: bool = False, signal: str = "") -> None:
        super().__init__(reason)
        self.timed_out = timed_out
        self.signal = signal


def read_request() -> JudgeRequest:
    """Judge: the request on stdin; from here on nothing without CAP_SYS_PTRACE can read this process."""
    sandbox.make_undumpable()
    return from_dict(json.loads(sys.stdin.readline()), JudgeRequest)


def wait_for_go() -> str:
    """Judge: say READY, then block until hiera holds the device and sends `go` with the built library's path;
    that path."""
    print(READY, flush=True)
    word, _, library = sys.stdin.readline().partition(" ")
    if word != "go":
        sys.exit(3)
    return json.loads(library)


def answer(result: JudgeAnswer) -> None:
    """Judge: the verdict, as the last line on stdout."""
    print(json.dumps(to_dict(result, JudgeAnswer)), flush=True)


class Runner:
    """The judge's handle on the runner process: orders out, replies in, each with the judge's wall time."""

    def __init__(self, module: str, *, scratch: Path, args: Sequence[str] = (), pass_fds: Sequence[int] = (),
                 rlimit_data_bytes: int | None = None) -> None:
        def limits() -> None:
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            if rlimit_data_bytes:
                resource.setrlimit(resource.RLIMIT_DATA, (rlimit_data_bytes, rlimit_data_bytes))

        self.log = open(scratch / RUNNER_LOG, "w")
        self.process = subprocess.Popen(
            sandbox.runner_command([sys.executable, "-m", module, *args]), cwd=scratch, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self.log, pass_fds=tuple(pass_fds), preexec_fn=limits,
            start_new_session=True,
        )
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.process.stdout, selectors.EVENT_READ)

    def ask(self, order: Order, *, timeout_s: float) -> tuple[Reply, float]:
        """Send `order`; return the runner's reply and the wall milliseconds from sending to reading it. The
        candidate's processes run only from an order to its reply: stopped (SIGSTOP) in between, they cannot
        watch the judge place the next inputs or read an output."""
        line = (json.dumps(to_dict(order, Order)) + "\n").encode()
        self._signal(signal.SIGCONT)
        started = time.perf_counter()
        try:
            self.process.stdin.write(line)
            self.process.stdin.flush()
        except BrokenPipeError:
            raise self._gone("before the order") from None
        reply = self._reply(timeout_s)
        wall_ms = (time.perf_counter() - started) * 1e3
        self._signal(signal.SIGSTOP)
        return reply, wall_ms

    def started(self, *, timeout_s: float) -> None:
        """Wait for the runner's `Ready`, so that its start-up (imports, device context) is over before the
        judge says READY and is given the device."""
        reply = self._reply(timeout_s)
        if not isinstance(reply, Ready):
            raise RunnerGone(f"the runner began with {type(reply).__name__}, not Ready")
        self._signal(signal.SIGSTOP)

    def _reply(self, timeout_s: float) -> Reply:
        if not self.selector.select(timeout_s):
            raise RunnerGone(f"no reply within {timeout_s:.0f} s", timed_out=True)
        text = self.process.stdout.readline()
        if not text:
            raise self._gone("without a reply")
        try:
            return from_dict(json.loads(text), Reply)
        except Exception:  # noqa: BLE001 -- whatever the candidate wrote, it is not a reply
            raise RunnerGone(f"the candidate's process broke the protocol: {text[:120]!r}") from None

    def _gone(self, when: str) -> RunnerGone:
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return RunnerGone(f"the runner closed its channel {when}")
        return RunnerGone(f"{sandbox.describe_exit(code)} {when}", signal=signal.Signals(-code).name if code < 0 else "")

    def crashed(self, reason: str, *, case: str = "", signal: str = "") -> Crashed:
        """The record of the candidate's crash in `case` (a `describe_call`), with the tail of its stderr."""
        return Crashed(reason=reason, case=case, signal=signal, stderr_tail=stderr_tail(Path(self.log.name)))

    def _signal(self, signum: int) -> None:
        """Signal every process of the candidate's (all but the judge, in a sandbox of their own)."""
        for pid in self._others():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)

    def _others(self) -> list[int]:
        if os.getpid() != 1:  # no PID namespace: the runner's process group is all we know of
            return [self.process.pid]
        return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != 1]

    def close(self) -> None:
        self._signal(signal.SIGKILL)
        self.process.wait()
        self.log.close()


def call(runner: Runner, order: Order, *, timeout_s: float) -> tuple[CallDone, float]:
    """One call the runner must answer with `CallDone`."""
    reply, wall_ms = runner.ask(order, timeout_s=timeout_s)
    if isinstance(reply, CallFailed):
        raise CandidateFailed(reply.reason, raised=reply.raised)
    if not isinstance(reply, CallDone):
        raise RunnerGone(f"the runner answered {type(reply).__name__} to a call")
    return reply, wall_ms


def load(runner: Runner, request: JudgeRequest, library: str, *, timeout_s: float) -> Crashed | None:
    """Have the runner load the candidate's `library` (it is untrusted from here on); the Crashed record if it could not."""
    reply, _ = runner.ask(LoadOrder(workload_factory=request.workload_factory, workload_config=request.workload_config,
                                    task=request.task, library=library), timeout_s=timeout_s)
    if isinstance(reply, Loaded):
        return None
    return runner.crashed(f"loading the candidate failed: {getattr(reply, 'reason', reply)}")


class Wrong(Exception):
    """A check failed: the candidate is incorrect (its output, or an input it wrote)."""

    def __init__(self, reason: str, error: float | None = None) -> None:
        super().__init__(reason)
        self.reason, self.error = reason, error


class CandidateFailed(Exception):
    """The runner reports that the candidate's call raised or returned something unusable."""

    def __init__(self, reason: str, *, raised: bool = False) -> None:
        super().__init__(reason)
        self.raised = raised


@attrs.frozen(kw_only=True)
class TimingBound:
    """The judge's verdict on a series of timed calls: the in-process figures, checked against its clock."""

    consistent: bool
    reason: str


def bound_timing(in_process_ms: Sequence[float], wall_ms: Sequence[float], overhead_ms: Sequence[float], *,
                 slack_fraction: float = 0.1, slack_ms: float = 0.05) -> TimingBound:
    """Check what the runner says each call took against the judge's wall time around it.

    The judge's clock gives, per call, an upper bound (the wall time: a call cannot take longer than the
    interval that holds it) and, with the runner's own overhead calibrated before the candidate was loaded
    (the same protocol around a null call), a lower bound: wall time minus that overhead. The in-process
    figures are accepted only if none exceeds its wall time and the median time outside them (wall less
    in-process, per call) is no more than the protocol's overhead plus a slack: the overhead's own spread
    (p90 - median), `slack_fraction` of the median wall time and `slack_ms`. A candidate can under-report by
    that slack at most; the roofline floor bounds the rest."""
    if not in_process_ms:
        return TimingBound(consistent=False, reason="no timed call")
    for claimed, wall in zip(in_process_ms, wall_ms):
        if claimed > wall + slack_ms:
            return TimingBound(consistent=False, reason=f"a call claimed {claimed:.4f} ms inside a {wall:.4f} ms interval of the judge's clock")
    overhead = statistics.median(overhead_ms)
    spread = quantile(overhead_ms, 0.9) - overhead
    wall_median = statistics.median(wall_ms)
    claimed = statistics.median(in_process_ms)
    outside = statistics.median(w - c for w, c in zip(wall_ms, in_process_ms))
    allowed = overhead + spread + slack_fraction * wall_median + slack_ms
    description = (f"median {claimed:.4f} ms in-process in {wall_median:.4f} ms of the judge's clock; outside the"
                   f" in-process interval {outside:.4f} ms a call, against {overhead:.4f} ms (p90 {overhead + spread:.4f})"
                   f" for the protocol alone; {len(wall_ms)} calls")
    if outside > allowed:
        return TimingBound(consistent=False, reason=f"the in-process timer contradicts the judge's clock: {description}"
                                                    f" (at most {allowed:.4f} ms allowed)")
    return TimingBound(consistent=True, reason=description)


def bounded_series(series: Callable[[], tuple[list[float], list[float]]], overhead_ms: Sequence[float], *,
                   attempts: int) -> tuple[list[float], list[float], TimingBound]:
    """Time a series of calls (`series()` -> in-process and wall milliseconds) until the judge's clock agrees with the
    runner's figures, at most `attempts` series; the last series' figures and bound.

    The protocol's overhead is calibrated before the candidate is loaded, so a load that comes later (a build
    starting beside the judge, a worker process waking) can make an honest series look as if it hid work outside
    its timer: on this project's 2-core machine an honest 0.66 ms host kernel spent 0.42 ms a call outside against a
    calibrated 0.18 ms. Such a series is timed again. A runner that under-reports does so in every series (or, in the
    one that passes, reported honestly): it is rejected all the same, after `attempts` series."""
    contradicted: list[str] = []
    while True:
        times, walls = series()
        bound = bound_timing(times, walls, overhead_ms)
        if bound.consistent:
            if contradicted:
                bound = attrs.evolve(bound, reason=f"{bound.reason}; series {len(contradicted) + 1}: the judge's clock"
                                                   f" contradicted {len(contradicted)} before it ({contradicted[-1]})")
            return times, walls, bound
        contradicted.append(bound.reason.removeprefix("the in-process timer contradicts the judge's clock: "))
        if len(contradicted) >= attempts:
            return times, walls, attrs.evolve(bound, reason=f"{bound.reason}, in each of {attempts} series")


class OtherLoad:
    """How much of the machine's CPU time other processes took over an interval: the machine's busy time
    (`/proc/stat`) less this process's (the judge's) and the runner's own (`/proc/<pid>/stat`), in cores. A
    candidate timed while that is high measured slow: the judge says so (`Measured.disturbed`)."""

    def __init__(self, runner_pid: int) -> None:
        self.pid = runner_pid
        self.start = self._read()

    def _read(self) -> tuple[float, float, float, float] | None:
        try:
            with open("/proc/stat") as handle:
                ticks = [int(v) for v in handle.readline().split()[1:9]]
            with open(f"/proc/{self.pid}/stat") as handle:
                fields = handle.read().rpartition(")")[2].split()
        except (OSError, ValueError):
            return None
        tick = os.sysconf("SC_CLK_TCK")
        busy = (sum(ticks) - ticks[3] - ticks[4]) / tick  # all but idle and iowait
        runner = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        return busy, time.process_time(), runner, time.perf_counter()

    def cores(self) -> float | None:
        """Other processes' cores, on average, since this was made; None where /proc cannot tell."""
        end = self._read()
        if self.start is None or end is None or end[3] - self.start[3] <= 0:
            return None
        busy, judge, runner, wall = (b - a for a, b in zip(self.start, end))
        return max(0.0, (busy - judge - runner) / wall)


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# --- the runner's side ---------------------------------------------------------------------------


def serve(handle: Callable[[Order], Reply]) -> None:
    """Runner: answer orders from the judge until it closes the channel. The protocol gets its own copy of
    stdout; the candidate's prints go to the log."""
    channel = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    channel.write(json.dumps(to_dict(Ready(), Reply)) + "\n")
    channel.flush()
    for line in sys.stdin:
        order = from_dict(json.loads(line), Order)
        try:
            reply = handle(order)
        except Exception as exc:  # noqa: BLE001 -- the candidate's failure is the judge's to record
            reply = CallFailed(reason=f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:400]}", raised=True)
        channel.write(json.dumps(to_dict(reply, Reply)) + "\n")
        channel.flush()


def timed_ms(call: Callable[[], Any]) -> tuple[float, float]:
    """(wall ms, CPU ms of this process) of `call()`, by this process's clocks."""
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return (time.perf_counter() - wall) * 1e3, (time.process_time() - cpu) * 1e3
