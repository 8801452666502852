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

import collections
import contextlib
import fcntl
import functools
import importlib
import json
import math
import os
import re
import resource
import select
import selectors
import shutil
import signal
import stat
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import attrs

from hiera_core import protocols
from hiera_core.records import Crashed, Evaluation, Task, TimedOut
from hiera_core.serialization import from_dict, to_dict
from hiera_judge import sandbox
from hiera_judge.messages import (
    BatchOrder,
    CallDone,
    CallFailed,
    JudgeAnswer,
    Judged,
    JudgeRequest,
    JudgeSettings,
    Loaded,
    LoadOrder,
    Order,
    Prepared,
    Ready,
    Reply,
    StartBatch,
)

READY = "hiera-judge-ready"
"""The line a judge prints once it has prepared everything that needs no device; it then waits for `go`."""
ANSWERED = "hiera-judge-answered"
"""The line a judge prints after its answer (its runner already ended): hiera ends the sandbox at once rather than
hold the device through the judge's own exit (the interpreter's and the GPU context's teardown)."""
STDERR_TAIL_LINES = 20
STDERR_TAIL_CHARS = 2000
"""How much of a crashed candidate's stderr its `Crashed` record keeps: lines, and characters in all."""
STDERR_LINE_CHARS = 240
REPLY_CHARS = 1 << 24
"""The longest line a runner's reply may be (a batch's reply names every call's figure and output)."""
_ESCAPES = re.compile(r"\x1b(\[[0-9;?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|[@-_])")

# --- hiera's side --------------------------------------------------------------------------------


JUDGE_LOG = "judge.log"
"""The judge's stderr, in the candidate's folder beside (not in) the scratch folder: hiera opens it, the sandbox cannot write it."""
ANSWER_LINE_BYTES = 4 << 20
"""The longest line hiera reads from a judge (an answer takes a few KiB): a longer one ends the judge as crashed."""
ENDING_S = 5.0
"""How long a judge that closed its output (it is ending) has to end before it is killed; its exit status is the
record's reason when it gave no answer, and an answer stands either way."""

_holds = threading.local()


_waiting = threading.Condition()
_foreground: collections.Counter[str] = collections.Counter()
"""Per lock name, this process's threads waiting for the device for the search (not `background`): while any does,
background holders wait."""


BACKGROUND_POLL_S = 0.05
LOCK_POLL_S = 0.01
"""How often a thread waiting for the device tries its lock again (and sees whether the run is stopping)."""


class Interrupted(KeyboardInterrupt):
    """The run is stopping (Ctrl-C, `interrupt_waits`) while this thread waited for the device or for a judge's place:
    its candidate is not judged and no verdict is recorded for it, so a resumed run judges it. A KeyboardInterrupt,
    so every layer ends the run as it does on Ctrl-C."""


_stopping = threading.Event()


def interrupt_waits() -> None:
    """From now on, every wait of this process for a device (`device_lock`), a judge's place (`judge_slot`) or a
    judge's start-up (`StartedJudge`), and every build or profile that asks `stopping` (`sandbox.run_sandboxed`),
    ends in `Interrupted`: a stopping run ends once the judges already judging have answered, not after every
    candidate under way has been built and had its turn on the device (a suite of four runs took minutes)."""
    _stopping.set()


def stopping() -> bool:
    """Whether the run is stopping (`interrupt_waits`): a build or a profile under way is killed and not recorded."""
    return _stopping.is_set()


def allow_waits() -> None:
    """Waits go on as usual again (a new run starts)."""
    _stopping.clear()


def _take(handle: Any, *, behind: str | None = None) -> None:
    """The lock of `handle`, or `Interrupted` once the run is stopping; `behind` a device's name: only while no
    thread of this process waits for that device otherwise (a background holder)."""
    while True:
        if behind is not None:
            with _waiting:
                _waiting.wait_for(lambda: _foreground[behind] == 0 or _stopping.is_set())
        if _stopping.is_set():
            raise Interrupted()
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            time.sleep(BACKGROUND_POLL_S if behind is not None else LOCK_POLL_S)


@contextlib.contextmanager
def device_lock(name: str, *, background: bool = False):
    """One process at a time on a device (`gpu-0`, ...), across threads and hiera processes: what holds it times
    or profiles undisturbed. Each hold's interval goes to the thread's `recording_holds` list, if one is open.
    A `background` holder (a baseline judged beside the search) takes the device only while no thread of this process
    waits for it otherwise, so the search's candidates and profiles go first. A wait ends in `Interrupted` once the
    run is stopping (`interrupt_waits`)."""
    path = Path(tempfile.gettempdir()) / f"hiera-{name}.lock"  # a link there is refused, never followed
    with open(os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)) as handle:
        if background:
            _take(handle, behind=name)
        else:
            with _waiting:
                _foreground[name] += 1
            try:
                _take(handle)
            finally:
                with _waiting:
                    _foreground[name] -= 1
                    _waiting.notify_all()
        start = time.time()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
            held = getattr(_holds, "intervals", None)
            if held is not None:
                held.append((round(start, 4), round(time.time(), 4)))


_alive: dict[str, threading.BoundedSemaphore] = {}
_alive_guard = threading.Lock()


def judge_slot(name: str, limit: int, *, wait: bool) -> Callable[[], None] | None:
    """A place for one more judge of device `name` (`gpu-0`, ...) alive in this process: started, waiting READY for
    the device, or judging. At most `limit` at once (the first limit asked for a device holds for the process): a
    READY cuda judge holds two CUDA contexts (its own and its runner's), and a round's judges all starting beside
    their builds took GPU memory that a judge's memory plan had left to the one timing. Returns the call that gives
    the place back (`StartedJudge` calls it when its judge ends), or None where `wait` is False and all are taken
    (the judge then starts when its stage runs). A wait ends in `Interrupted` once the run is stopping."""
    with _alive_guard:
        places = _alive.setdefault(name, threading.BoundedSemaphore(limit))
    if not places.acquire(blocking=False):
        if not wait:
            return None
        while not places.acquire(timeout=10 * LOCK_POLL_S):
            if _stopping.is_set():
                raise Interrupted()
    return functools.partial(_give_back, places, threading.Lock())


def _give_back(places: threading.BoundedSemaphore, once: threading.Lock) -> None:
    if once.acquire(blocking=False):
        places.release()


TIMING_CORES_FROM = 8
"""On a machine with at least this many cores, the last two are kept for the judge that holds a device and its
runner (`timing_cores`): the builds and judge start-ups beside them run on the others (`leave_timing_cores`), so
a batch's wake-ups never wait for a core. With fewer, every process shares every core."""


@functools.cache
def _machine_cores() -> tuple[int, ...]:
    """The cores this process may use, as it started (read once: `leave_timing_cores` narrows threads later)."""
    return tuple(sorted(os.sched_getaffinity(0)))


def timing_cores(cores: Sequence[int] | None = None) -> tuple[int, int] | None:
    """(the judge's core, the runner's core) of `cores` (this process's, by default), or None below
    `TIMING_CORES_FROM` cores."""
    cores = sorted(_machine_cores() if cores is None else cores)
    return (cores[-2], cores[-1]) if len(cores) >= TIMING_CORES_FROM else None


def cores_beside_timing() -> int:
    """How many of this process's cores are left to builds and start-ups (all but `timing_cores`)."""
    return len(_machine_cores()) - (2 if timing_cores() else 0)


def leave_timing_cores() -> None:
    """Keep the calling thread, and every process it starts from now on (builds, judges before `go`), off the
    timing cores (`timing_cores`)."""
    kept = timing_cores()
    if kept is not None:
        os.sched_setaffinity(0, set(_machine_cores()) - set(kept))  # 0: the calling thread (Linux)


def pin(pid: int | str, core: int) -> list[str]:
    """Every thread of process `pid` ("self": this one) onto `core` (threads it starts later inherit it); why a thread could not be
    moved, for the judge's log (a thread that ended meanwhile is not one)."""
    failed = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(task), {core})
        except ProcessLookupError:
            continue
        except OSError as exc:
            failed.append(f"thread {task} of {pid}: {exc.strerror}")
    return failed


def take_timing_cores(cores: Sequence[int] | None, runner: Runner) -> None:
    """Judge, on `go` (it holds the device): itself onto the first of `cores` (`timing_cores` of hiera's machine)
    and its runner's group onto the second (its cpuset: whatever threads the candidate starts; where the group has
    none, the runner's threads); nothing where `cores` is None. Said on stderr (the judge's log)."""
    if not cores:
        return
    judge_core, runner_core = cores
    held = runner.group is not None and runner.group.hold_to_core(runner_core)
    failed = pin("self", judge_core) + ([] if held else pin(runner.process.pid, runner_core))
    print(
        f"timing cores: judge {judge_core}, runner {runner_core} ({'its cgroup' if held else 'its threads'})"
        + (f"; not moved: {failed}" if failed else ""),
        file=sys.stderr,
        flush=True,
    )


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

    `evaluate(job)` copies the built library (`job.library`) into the judge's scratch folder, waits
    for `READY`, takes `device_lock`, and sends `go` with the library's path; so neither the start-up nor the build
    holds the device. Each phase has `timeout_s`; at the end of it the whole sandbox is killed. `measured(job,
    judged)` turns the judge's `Judged` into the stage's result; any other answer ends the pipeline. The judge's log
    goes to `workdir/judge.log`. `cancel()` kills a judge whose candidate never got built. `slot` (`judge_slot`) is
    given back when the judge has ended.

    Nothing the sandbox can write (its scratch folder) is opened here. The verdict is the judge's last line on its
    stdout, read `ANSWER_LINE_BYTES` at most; a judge that ends without one, however it ends (any signal, its output
    closed, a line too long or not a `JudgeAnswer`), is `Crashed` with its exit status and the end of its own log."""

    def __init__(
        self,
        module: str,
        request: JudgeRequest,
        *,
        workdir: Path,
        timeout_s: float,
        measured: Callable[[Any, Judged], Any],
        memory_bytes: int | None = None,
        device_lock: AbstractContextManager | None = None,
        env_extra: dict[str, str] | None = None,
        candidate: sandbox.CandidateLimits | None = None,
        slot: Callable[[], None] | None = None,
    ) -> None:
        self.scratch, self.workdir, self.timeout_s = workdir / "scratch", workdir, timeout_s
        self.measured, self.device_lock = measured, device_lock
        self.slot = slot or (lambda: None)
        self.unread = bytearray()  # what the judge printed after the last line read
        shutil.rmtree(self.scratch, ignore_errors=True)  # what a judge left there (hiera killed beside it) is not followed
        try:
            self.log = open(workdir / JUDGE_LOG, "w")
        except BaseException:
            self.slot()
            raise
        try:
            self.box = sandbox.start(
                [sys.executable, "-m", module],
                scratch=self.scratch,
                memory_bytes=memory_bytes,
                env_extra=env_extra,
                candidate=candidate or sandbox.CandidateLimits(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.log,
                text=True,
            )
        except BaseException:
            self.log.close()
            self.slot()
            raise
        try:
            sandbox.piped(self.box.process.stdin).write(json.dumps(to_dict(request)) + "\n")
            sandbox.piped(self.box.process.stdin).flush()
        except BrokenPipeError:
            pass  # it ended at once: `evaluate` reports how
        except BaseException:  # Ctrl-C while the request went out: the judge and its place go with it
            self._stop()
            raise

    def evaluate(self, job: Any) -> Any:
        """The stage's result for `job`, whose library is built: the judge's verdict."""
        answer = self._answer(job.library)
        return self.measured(job, answer) if isinstance(answer, Judged) else answer

    def cancel(self) -> None:
        """End a judge that will not be asked: its candidate did not build. Its folders go with it."""
        self._stop()
        (self.workdir / JUDGE_LOG).unlink(missing_ok=True)
        shutil.rmtree(self.scratch, ignore_errors=True)

    def _stop(self) -> None:
        self.box.kill()
        self.box.process.wait()
        for stream in (self.box.process.stdin, self.box.process.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()
        self.log.close()
        self.slot()

    def _answer(self, library: Path) -> Judged | Evaluation:
        copy = self.scratch / library.name  # in the sandbox's own folder, which it sees whatever becomes of /tmp there
        try:
            shutil.copyfile(library, copy)
            said = self._exchange(copy)
        finally:
            self._stop()
            copy.unlink(missing_ok=True)
        if not isinstance(said, tuple):
            return said
        last, code = said
        ended = sandbox.describe_exit(code) if code is not None else f"its output closed, it had not ended after {ENDING_S:.0f} s"
        if not last:
            tail = stderr_tail(self.workdir / JUDGE_LOG).splitlines()[-2:]
            return Crashed(reason=f"the judge gave no answer ({ended}){': ' + ' | '.join(tail) if tail else ''}")
        try:
            return from_dict(json.loads(last), JudgeAnswer)
        except Exception:  # noqa: BLE001 -- whatever the judge printed last, it is not a verdict
            return Crashed(reason=f"the judge's answer did not decode ({ended}): {last[:120]!r}")

    def _exchange(self, copy: Path) -> tuple[str, int | None] | TimedOut | Crashed:
        """Wait for READY, send `go` under the device lock, and read until the judge says `ANSWERED` (then end it) or
        closes its output: its last line ("" if none) and its exit status (None if it had not ended `ENDING_S`
        later); or why it gave none."""
        box = self.box
        said = _read_until(box, READY, self.timeout_s, self.unread, stop=stopping)
        if isinstance(said, tuple) and said[1]:
            with self.device_lock or contextlib.nullcontext():
                with contextlib.suppress(BrokenPipeError):  # it died waiting: what it printed and how it ended say why
                    sandbox.piped(box.process.stdin).write(f"go {json.dumps(str(copy))}\n")
                    sandbox.piped(box.process.stdin).flush()
                said = _read_until(box, ANSWERED, self.timeout_s, self.unread)
                if isinstance(said, tuple) and said[1]:  # the verdict is in: the sandbox ends now, the device is
                    box.kill()  # given back once its output closes (the judge is gone)
                    _read_until(box, None, ENDING_S, bytearray())
        if not isinstance(said, tuple):
            return said
        with contextlib.suppress(subprocess.TimeoutExpired):
            box.process.wait(timeout=ENDING_S)
        return said[0], box.process.returncode


def _read_until(
    box: sandbox.Sandboxed,
    marker: str | None,
    timeout_s: float,
    unread: bytearray,
    *,
    stop: Callable[[], bool] | None = None,
) -> tuple[str, bool] | TimedOut | Crashed:
    """The last non-blank line the judge prints before `marker` (or before it closes its output; "" if none), and
    whether the marker came; what came after the marker stays in `unread`. TimedOut at `timeout_s`, Crashed at a line
    longer than `ANSWER_LINE_BYTES`: everything killed, however much more it would print. A judge that answers before
    READY (its runner never started) ends without it. `Interrupted` (the judge killed) once `stop` says so."""
    deadline = time.monotonic() + timeout_s
    fd = sandbox.piped(box.process.stdout).fileno()
    last = b""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            while (end := unread.find(b"\n")) >= 0:
                line = bytes(unread[:end]).strip()
                del unread[: end + 1]
                if marker is not None and line == marker.encode():
                    return last.decode(errors="replace"), True
                if line == ANSWERED.encode():  # it answered before `marker` (its runner never started): nothing follows
                    return last.decode(errors="replace"), False
                last = line or last
            if len(unread) > ANSWER_LINE_BYTES:
                box.kill()
                return Crashed(reason=f"the judge printed a line longer than {ANSWER_LINE_BYTES} bytes instead of an answer")
            if stop is not None and stop():
                box.kill()
                raise Interrupted()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                box.kill()
                return TimedOut(limit_s=timeout_s)
            if selector.select(min(remaining, sandbox.STOP_POLL_S) if stop is not None else remaining):
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    last = bytes(unread).strip() or last
                    unread.clear()
                    return last.decode(errors="replace"), False
                unread += chunk


def untrusted_tail(path: Path, limit_bytes: int) -> bytes:
    """At most the last `limit_bytes` of the file at `path`, which a sandboxed process may have written or replaced.
    Read only if it is a regular file and `path` is not a symbolic link (O_NOFOLLOW), opened without blocking (a FIFO
    holds nothing up, a device is never read); b"" for anything else, or no file: never an exception."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError):
        return b""
    try:
        size = os.fstat(fd)
        return os.pread(fd, limit_bytes, max(0, size.st_size - limit_bytes)) if stat.S_ISREG(size.st_mode) else b""
    except OSError:
        return b""
    finally:
        os.close(fd)


# --- the judge's side ----------------------------------------------------------------------------


def harness_of(workload_factory: str, workload_config: dict[str, Any], task: Task, arch: str) -> Any:
    """The workload's harness for `task` on `arch`, rebuilt in a judge or a runner process from its factory
    (`module:Class@DIR`, see `engine.workload_factory`)."""
    module, _, rest = workload_factory.partition(":")
    qualname, _, root = rest.partition("@")
    if root and root not in sys.path:
        sys.path.append(root)
    workload_cls = getattr(importlib.import_module(module), qualname)
    return workload_cls(protocols.plugin_config(workload_cls, workload_config, where="judge")).harness(task, arch)


def stderr_tail(path: Path) -> str:
    """`tail_text` of the end of the file at `path` (read as `untrusted_tail` reads it)."""
    return tail_text(untrusted_tail(path, 8 * STDERR_TAIL_CHARS))


def tail_text(data: bytes) -> str:
    """The last lines of what a candidate's process wrote (its stderr), as a `Crashed` record keeps them: at most
    `STDERR_TAIL_LINES` non-blank lines of `STDERR_LINE_CHARS` characters each and `STDERR_TAIL_CHARS` in all,
    terminal escape sequences and other control characters dropped, undecodable bytes replaced; "" when there is
    none."""
    text = _ESCAPES.sub("", data[-8 * STDERR_TAIL_CHARS :].decode(errors="replace")).replace("\r", "\n").replace("\t", "    ")
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
    sizes = [
        f"{k}={v}"
        for k, v in case.items()
        if k not in ("label", "first_seed_only") and isinstance(v, (int, float, str)) and f"{k}={v}" not in label
    ]
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


def read_request(settings: type[JudgeSettings]) -> JudgeRequest[JudgeSettings]:
    """Judge: the request on stdin, its settings as the architecture's record `settings`; from here on nothing
    without CAP_SYS_PTRACE can read this process, and (as PID 1 of its namespace, with no handler of its own) no signal
    from the candidate's processes reaches it."""
    sandbox.make_undumpable()
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Python's handler would let a candidate's SIGINT end the judge
    return from_dict(json.loads(sys.stdin.readline()), JudgeRequest[settings])  # type: ignore[valid-type]


def raise_priority(niceness: int = -10) -> None:
    """Judge: run this process, and the runner it starts, ahead of the builds beside them (nice -10, where the
    machine allows it): the judge's clock includes every wake-up of the two, and a loaded machine delays each."""
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, niceness)


def wait_for_go() -> str:
    """Judge: say READY, then block until hiera holds the device and sends `go` with the built library's path;
    that path."""
    print(READY, flush=True)
    word, _, library = sys.stdin.readline().partition(" ")
    if word != "go":
        sys.exit(3)
    return json.loads(library)


def answer(result: JudgeAnswer) -> None:
    """Judge: the verdict, as the last line on stdout before `ANSWERED` (its runner must have ended: hiera ends the
    judge at that line)."""
    print(json.dumps(to_dict(result, JudgeAnswer)), flush=True)
    print(ANSWERED, flush=True)


class StderrTail:
    """The runner's stderr: a pipe the judge opened before the runner started, drained by a thread into a buffer
    that keeps the last `limit` bytes, however much the candidate writes. Nothing the candidate names or links is
    ever opened: its text reaches a record only through `tail_text`."""

    def __init__(self, fd: int, limit: int = 64 * 1024) -> None:
        self.fd, self.limit, self.data = fd, limit, bytearray()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        while chunk := os.read(self.fd, 65536):
            with self.lock:
                self.data += chunk
                del self.data[: max(0, len(self.data) - self.limit)]
        os.close(self.fd)

    def text(self, wait_s: float = 0.5) -> str:
        self.thread.join(wait_s)  # what the runner wrote just before it died
        with self.lock:
            return tail_text(bytes(self.data))


class Runner:
    """The judge's handle on the runner process: orders out, replies in, each with the judge's wall time.

    The candidate's processes run only from an order to its reply. Where the sandbox gave the judge the candidate's
    own cgroup (`sandbox.CandidateGroup`), the whole group is frozen at the reply and thawed at the next order, by the
    kernel, whatever the candidate forked or cloned; the runner is started in that group, in a mount namespace where
    the group's files are read-only. Elsewhere each process is stopped by SIGSTOP, one by one.

    The clock's two wake-ups are kept short and the same in every batch: an order is in the pipe before the candidate
    is thawed (it reads it at once instead of waking for it), and with `spin_s` the judge polls for the reply for up
    to that long before it blocks (a judge asleep through a long batch wakes ~0.1 ms late: the H200 measure in
    docs/measurement.md). Spinning takes a core: for judges that have one of their own (the cuda judge's machine),
    not for the host judge, whose candidate's cores it would take."""

    def __init__(
        self,
        module: str,
        *,
        scratch: Path,
        args: Sequence[str] = (),
        pass_fds: Sequence[int] = (),
        rlimit_data_bytes: int | None = None,
        spin_s: float = 0.0,
    ) -> None:
        self.group = sandbox.CandidateGroup.from_environment()
        group = self.group

        def limits() -> None:
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            if rlimit_data_bytes:
                resource.setrlimit(resource.RLIMIT_DATA, (rlimit_data_bytes, rlimit_data_bytes))
            if group is not None:
                group.enter()

        folder = sandbox.runner_folder(scratch)  # a quota'd tmpfs; the scratch folder around it read-only for the runner
        sealed = [*(group.paths() if group else []), *([str(scratch)] if folder else [])]
        environment = {**os.environ, **({"HOME": str(folder), "TMPDIR": str(folder)} if folder else {})}
        read_end, write_end = os.pipe()
        try:
            self.process = subprocess.Popen(
                sandbox.runner_command([sys.executable, "-m", module, *args], sealed=sealed if group else ()),
                cwd=folder or scratch,
                env=environment,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=write_end,
                pass_fds=tuple(pass_fds),
                preexec_fn=limits,
                start_new_session=True,
            )
        finally:
            os.close(write_end)
        self.stderr = StderrTail(read_end)
        self.selector = selectors.DefaultSelector()
        self.selector.register(sandbox.piped(self.process.stdout), selectors.EVENT_READ)
        self.orders = sandbox.piped(self.process.stdin).fileno()
        os.set_blocking(self.orders, False)  # an order goes into the pipe while the candidate is still stopped
        self.spin_s = spin_s
        self.last_ms: tuple[float, ...] = ()
        """Where the judge's clock went in the last order: thawing the candidate, its reply, freezing it (ms)."""
        self.last_replied = 0.0
        """`time.perf_counter()` when the last reply was read (CLOCK_MONOTONIC: comparable with the runner's own)."""

    def ask(self, order: Order, *, timeout_s: float) -> tuple[Reply, float]:
        """Send `order`; return the runner's reply and the judge's milliseconds from before the candidate was let
        run to the moment it is stopped again (so anything it computes after its reply is inside the interval)."""
        line = (json.dumps(to_dict(order, Order)) + "\n").encode()
        started = time.perf_counter()
        rest = self._send(line)
        self._resume()
        resumed = time.perf_counter()
        deadline = time.monotonic() + timeout_s
        while rest:  # an order larger than the pipe holds: the rest as the runner reads
            if not select.select([], [self.orders], [], max(0.0, deadline - time.monotonic()))[1]:
                raise RunnerGone(f"the runner did not read its order within {timeout_s:.0f} s", timed_out=True)
            rest = self._send(rest)
        text = self._line(timeout_s)
        replied = time.perf_counter()
        self._pause()
        stopped = time.perf_counter()
        self.last_ms = tuple(round((b - a) * 1e3, 4) for a, b in ((started, resumed), (resumed, replied), (replied, stopped)))
        self.last_replied = replied
        return self._parsed(text), (stopped - started) * 1e3  # the judge's own parsing is not the candidate's time

    def cpu_ms(self) -> float:
        """The CPU time the candidate's processes have used so far (ms), by the kernel, never by the runner's word:
        its cgroup's count (every process it started) where it has one, else the runner's process with the children
        it waited for (`/proc/<pid>/stat`)."""
        counted = self.group.cpu_ms() if self.group is not None else None
        if counted is not None:
            return counted
        try:
            with open(f"/proc/{self.process.pid}/stat") as handle:
                fields = handle.read().rpartition(")")[2].split()
        except OSError:
            return 0.0
        return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK") * 1e3  # utime, stime, cutime, cstime

    def batch(self, order: BatchOrder, write: Callable[[], None], *, timeout_s: float) -> tuple[Reply, float]:
        """One batch: `order` prepared by the runner outside the clock, then `write` (the judge writes the batch's
        inputs while the candidate is stopped, so none of them exists before its clock starts), then `StartBatch`
        timed. The reply to `StartBatch`, and the judge's milliseconds around it."""
        prepared, _ = self.ask(order, timeout_s=timeout_s)
        if not isinstance(prepared, Prepared):
            raise RunnerGone(f"the runner answered {type(prepared).__name__} to a batch of {len(order.calls)} calls")
        write()
        return self.ask(StartBatch(), timeout_s=timeout_s)

    def started(self, *, timeout_s: float) -> None:
        """Wait for the runner's `Ready`, so that its start-up (imports, device context) is over before the
        judge says READY and is given the device."""
        reply = self._parsed(self._line(timeout_s))
        if not isinstance(reply, Ready):
            raise RunnerGone(f"the runner began with {type(reply).__name__}, not Ready")
        self._pause()

    def _send(self, data: bytes) -> bytes:
        """Write what the pipe takes of `data` without waiting; what is left."""
        try:
            return data[os.write(self.orders, data) :]
        except BlockingIOError:
            return data
        except BrokenPipeError:
            raise self._gone("before the order") from None

    def _line(self, timeout_s: float) -> bytes:
        spin_s = min(self.spin_s, timeout_s)
        until = time.perf_counter() + spin_s
        while time.perf_counter() < until and not self.selector.select(0):
            pass
        if not self.selector.select(timeout_s - spin_s):
            raise RunnerGone(f"no reply within {timeout_s:.0f} s", timed_out=True)
        text = sandbox.piped(self.process.stdout).readline(REPLY_CHARS)
        if not text:
            raise self._gone("without a reply")
        return text

    @staticmethod
    def _parsed(text: bytes) -> Reply:
        try:
            return from_dict(json.loads(text), Reply)
        except Exception:  # noqa: BLE001 -- whatever the candidate wrote, it is not a reply
            raise RunnerGone(f"the candidate's process broke the protocol: {text[:120]!r}") from None

    def _gone(self, when: str) -> RunnerGone:
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return RunnerGone(f"the runner closed its channel {when}")
        return RunnerGone(f"{sandbox.describe_exit(code)} {when}", signal=sandbox.signal_name(-code) if code < 0 else "")

    def crashed(self, reason: str, *, case: str = "", signal: str = "") -> Crashed:
        """The record of the candidate's crash in `case` (a `describe_call`), with the tail of its stderr."""
        return Crashed(reason=reason, case=case, signal=signal, stderr_tail=self.stderr.text())

    def _pause(self) -> None:
        if self.group is not None:
            try:
                self.group.freeze()
            except OSError as exc:
                raise RunnerGone(f"the candidate's processes could not be stopped: {exc}") from None
        else:
            self._signal(signal.SIGSTOP)

    def _resume(self) -> None:
        if self.group is not None:
            self.group.thaw()
        else:
            self._signal(signal.SIGCONT)

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
        if self.group is not None:
            self.group.thaw()  # a frozen v1 process dies only once thawed
        self.process.wait()


def clock_part(runner: Runner, calls: int, null: bool, stamps: Sequence[float], probe_ms: float | None = None) -> list[float]:
    """Where the judge's clock went in the batch `runner` just answered, for the judge's log (`clock_parts`): [calls,
    null, thawing the candidate, to its reply, freezing it (the judge's ms); then, from the runner's `BatchDone.stamps`
    (its claims), its calls, its time before them, after them to its reply, and its reply to the judge's read; then
    the idle probe, where there is one]."""
    part = [calls, int(null), *runner.last_ms]
    if len(stamps) == 4:
        began, calling, called, replied = stamps
        part += [
            round((b - a) * 1e3, 4)
            for a, b in ((calling, called), (began, calling), (called, replied), (replied, runner.last_replied))
        ]
    return part + ([round(probe_ms, 4)] if probe_ms is not None else [])


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
    reply, _ = runner.ask(
        LoadOrder(
            workload_factory=request.workload_factory, workload_config=request.workload_config, task=request.task, library=library
        ),
        timeout_s=timeout_s,
    )
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
class NullBatches:
    """The protocol's own cost, calibrated before the candidate is loaded (so the candidate cannot slow it): the
    judge's milliseconds for null batches (`BatchOrder(null=True)`: the same orders, loop, replies and stops, no
    call) of one call and of `calls` calls."""

    one_ms: list[float]
    full_ms: list[float]
    calls: int

    def per_call_ms(self) -> float:
        if self.calls <= 1:
            return 0.0
        return max(0.0, (statistics.median(self.full_ms) - statistics.median(self.one_ms)) / (self.calls - 1))

    def noise_ms(self) -> float:
        """How much a null batch's time wanders (p90 − p10), per call of a full batch: the judge's own noise a call."""
        return (quantile(self.full_ms, 0.9) - quantile(self.full_ms, 0.1)) / max(1, self.calls)

    def cost_ms(self, calls: int, paired_ms: float | None = None) -> float:
        """What a null batch of `calls` calls costs: the fixed part and the part per call; with `paired_ms` (a null
        batch of as many calls just before a timed one, run by a runner that holds the candidate), the smaller of the
        two: a load that eased since the calibration shows there, and a candidate that slows its null batches gains
        nothing (a smaller cost only makes its own figure larger)."""
        calibrated = statistics.median(self.one_ms) + self.per_call_ms() * (calls - 1)
        return calibrated if paired_ms is None else min(calibrated, paired_ms)


def batch_length(null: NullBatches, estimate_ms: float, *, places: int, protocol_fraction: float = 0.01) -> int:
    """Calls per timed batch: enough that the protocol's own cost is at most `protocol_fraction` of the calls' time
    (for a call of `estimate_ms`), at most `places` (one place per call: the memory the task's buffers allow)."""
    fixed, per_call = null.cost_ms(1) - null.per_call_ms(), null.per_call_ms()
    room = protocol_fraction * max(estimate_ms, 1e-6) - per_call
    wanted = places if room <= 0 else math.ceil(fixed / room)
    return max(1, min(places, wanted))


def resized(null: NullBatches, batches: Sequence[TimedBatch], estimate_ms: float, *, places: int) -> int:
    """Calls for the next timed batch (`batch_length`), sized from the median figure of the `batches` timed so far, or
    from `estimate_ms` (a warm-up batch's) before any: a warm-up that paid a one-time cost (cuDNN's algorithm search,
    a lazy initialisation: 380 ms for four 4 ms calls on the H100, 2026-12-06) no longer makes every batch one call
    long, each with its own null batch and checks. The sizes only spend the protocol's cost; the figure is the
    same rule whatever they are."""
    if batches:
        estimate_ms = statistics.median((b.wall_ms - null.cost_ms(b.calls, b.null_ms)) / b.calls for b in batches)
    return batch_length(null, max(estimate_ms, 1e-4), places=places)


@attrs.frozen(kw_only=True)
class TimedBatch:
    """One timed batch: its calls, the judge's milliseconds around it, and what the runner's timer said of each call."""

    calls: int
    wall_ms: float
    in_process_ms: list[float]
    null_ms: float | None = None
    """A null batch of as many calls, just before this one (`NullBatches.cost_ms`)."""


@attrs.frozen(kw_only=True)
class TimingVerdict:
    """The figure of a series of timed batches, from the judge's clock, and whether the runner's timer agrees."""

    latency_ms: float
    latency_p10_ms: float
    latency_p90_ms: float
    consistent: bool
    reason: str


def timing_verdict(
    batches: Sequence[TimedBatch], null: NullBatches, *, tolerance_fraction: float, tolerance_ms: float
) -> TimingVerdict:
    """A call's latency: per batch, the judge's milliseconds less a null batch's of as many calls, divided by the
    calls; the median over batches. The runner's own timer is a diagnostic: its median per call must lie within
    `tolerance_fraction` of the figure plus `tolerance_ms` (or the judge's own noise a call, `NullBatches.noise_ms`,
    where that is larger: agreement is never asked to be tighter than the clock), or the series contradicts it."""
    if not batches:
        return TimingVerdict(
            latency_ms=math.nan, latency_p10_ms=math.nan, latency_p90_ms=math.nan, consistent=False, reason="no timed batch"
        )
    figures = [(b.wall_ms - null.cost_ms(b.calls, b.null_ms)) / b.calls for b in batches]
    claims = [statistics.fmean(b.in_process_ms) if b.in_process_ms else math.nan for b in batches]
    figure, claim = statistics.median(figures), statistics.median(claims)
    calls = sorted({b.calls for b in batches})
    shape = f"{len(batches)} batches of {'/'.join(map(str, calls))} calls"
    cost = statistics.median(null.cost_ms(b.calls, b.null_ms) for b in batches)
    description = (
        f"{figure:.4f} ms a call by the judge's clock ({shape}, each less a null batch's"
        f" {cost:.4f} ms); the runner's own timer said {claim:.4f} ms"
    )
    verdict = dict(latency_ms=figure, latency_p10_ms=quantile(figures, 0.1), latency_p90_ms=quantile(figures, 0.9))
    if not figure > 0:
        return TimingVerdict(
            **verdict,
            consistent=False,
            reason=f"the judge's clock saw no time in the calls beyond the protocol's own: {description}",
        )
    allowed = tolerance_fraction * figure + max(tolerance_ms, null.noise_ms())
    if not abs(claim - figure) <= allowed:
        return TimingVerdict(
            **verdict,
            consistent=False,
            reason=f"the in-process timer contradicts the judge's clock: {description}"
            f" ({(claim - figure) / figure:+.1%}; at most ±{allowed:.4f} ms allowed)",
        )
    return TimingVerdict(**verdict, consistent=True, reason=f"{description} ({(claim - figure) / figure:+.1%})")


def timed_series(
    series: Callable[[], list[TimedBatch]], null: NullBatches, *, attempts: int, tolerance_fraction: float, tolerance_ms: float
) -> tuple[list[TimedBatch], TimingVerdict]:
    """Time a series of batches (`series()`) until the runner's timer agrees with the judge's clock, at most `attempts`
    series; the last series and its verdict. A load that begins beside an honest runner can make one series disagree;
    a runner whose timer lies disagrees in every series (its figure is the judge's anyway)."""
    contradicted: list[str] = []
    while True:
        batches = series()
        verdict = timing_verdict(batches, null, tolerance_fraction=tolerance_fraction, tolerance_ms=tolerance_ms)
        if verdict.consistent:
            if contradicted:
                verdict = attrs.evolve(
                    verdict,
                    reason=f"{verdict.reason}; series {len(contradicted) + 1}: the runner's"
                    f" timer disagreed in {len(contradicted)} before it ({contradicted[-1]})",
                )
            return batches, verdict
        contradicted.append(verdict.reason)
        if len(contradicted) >= attempts:
            return batches, attrs.evolve(verdict, reason=f"{verdict.reason}, in each of {attempts} series")


class OtherLoad:
    """How much of the machine's CPU time other processes took over an interval: the machine's busy time
    (`/proc/stat`) less this process's (the judge's) and the candidate's (`Runner.cpu_ms`: every process it started,
    where it has a cgroup), in cores. A candidate timed while that is high measured slow: the judge says so
    (`Measured.disturbed`)."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.start = self._read()

    def _read(self) -> tuple[float, float, float, float] | None:
        try:
            with open("/proc/stat") as handle:
                ticks = [int(v) for v in handle.readline().split()[1:9]]
        except (OSError, ValueError):
            return None
        busy = (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait
        return busy, time.process_time(), self.runner.cpu_ms() / 1e3, time.perf_counter()

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
            traceback.print_exc()  # into the log whose end the Crashed record carries (`stderr_tail`): where it raised
            reply = CallFailed(reason=f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:400]}", raised=True)
        channel.write(json.dumps(to_dict(reply, Reply)) + "\n")
        channel.flush()


def timed_ms(call: Callable[[], Any]) -> float:
    """The wall milliseconds of `call()`, by this process's clock."""
    wall = time.perf_counter()
    call()
    return (time.perf_counter() - wall) * 1e3
