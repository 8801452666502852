"""The sandbox around every process that reads or runs candidate code, and the protections in force.

hiera starts `unshare` (new PID, mount, network and IPC namespaces; the whole namespace is killed when
`unshare` dies, and `unshare` dies with hiera) inside a cgroup (memory and process limits), with an
environment that holds no secret. Inside, `python -m hiera_judge.sandbox` makes every mount read-only
except the directories the job may write, gives /dev/shm a private tmpfs, and execs the command: a
compiler, or a judge. A judge keeps its capabilities and never loads candidate code; it starts the
process that does (the runner) through `runner_command`: no capabilities, no_new_privs, a memory rlimit,
so the runner can neither read the judge's memory, nor remount, nor reach hiera (outside its PID
namespace). docs/security.md says what this guarantees and what it does not.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import re
import resource
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from hiera_core.records import Protection

PASSED_VARIABLES = frozenset(
    {
        "PATH",
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
        "TZ",
        "PYTHONPATH",
        "VIRTUAL_ENV",
        "LD_LIBRARY_PATH",
        "CUDA_VISIBLE_DEVICES",
        "CUDA_HOME",
        "TORCH_CUDA_ARCH_LIST",
        "OMP_NUM_THREADS",
        "OPENBLAS_CORETYPE",
        "OPENBLAS_L2_SIZE",
    }
)
"""The only variables a sandboxed process inherits; API keys and every other secret stay behind."""

UNSHARE = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--mount", "--net", "--ipc"]
SETPRIV = ["setpriv", "--no-new-privs", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--"]
SANDBOX_FAILED = 126
"""The exit status of a sandbox that could not start its command (a machine problem, never the candidate's)."""
PIDS_MAX = 1024
"""Processes and threads in one sandbox (a fork bomb stops here; CUDA and OpenMP need a few dozen)."""
TMPFS = "size=256m"
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_REMOVAL_S = 15.0
"""How long a sandbox's cgroup is waited for as its killed processes end (a process that held a GPU may take seconds
to release it; a group is removed only once the last has ended)."""
STALE_GROUP_S = 60.0
"""A group of a hiera that is gone, empty this long, is removed by the next hiera (`remove_stale_groups`)."""


def candidate_environment(scratch: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in PASSED_VARIABLES}
    env["HOME"] = env["TMPDIR"] = str(scratch)
    env.update(extra or {})
    return env


def signal_name(signum: int) -> str:
    """`SIGSEGV`, or `SIGRTMIN+6` / `signal 77` for numbers `signal.Signals` cannot name: any number a process
    can die by has a name here, none raises."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        rtmin, rtmax = getattr(signal, "SIGRTMIN", 0), getattr(signal, "SIGRTMAX", -1)
        return f"SIGRTMIN+{signum - rtmin}" if rtmin <= signum <= rtmax else f"signal {signum}"


def describe_exit(returncode: int) -> str:
    """`killed by SIGSEGV (segmentation fault)`, `killed by SIGRTMIN+6` or `exit status 3`."""
    if returncode < 0:
        name = signal_name(-returncode)
        try:
            meaning = signal.strsignal(-returncode)
        except ValueError:
            meaning = None
        return f"killed by {name} ({meaning})" if meaning and not meaning.startswith("Unknown") else f"killed by {name}"
    return f"exit status {returncode}"


# --- what this machine allows --------------------------------------------------------------------


@functools.cache
def protection() -> Protection:
    """Which protections hold on this machine (probed once per process, by starting a real sandbox)."""
    from hiera_core.records import Protection  # not at the top: `confine` runs where only this package is visible

    missing: list[str] = []
    namespaces = shutil.which("unshare") is not None and _try_namespaces(missing)
    setpriv = shutil.which("setpriv") is not None
    if not setpriv:
        missing.append("setpriv not found: the runner keeps the judge's capabilities")
    cgroup, why = _cgroup_kind()
    if cgroup is None:
        missing.append(f"no cgroup ({why}): memory limited per process (RLIMIT_DATA), process count not limited")
    freezer = cgroup == "v2" or (cgroup == "v1" and _writable_cgroup(CGROUP_ROOT / "freezer"))
    cpuset = cgroup is not None and _cpuset_available(cgroup)
    if cgroup and not freezer:
        missing.append("no cgroup freezer: the candidate's processes are stopped one by one (SIGSTOP) between calls")
    if cgroup and not cpuset:
        missing.append("no cpuset controller: a one-core space is enforced by its source rules only")
    return Protection(
        pid_namespace=namespaces,
        network_namespace=namespaces,
        read_only_root=namespaces,
        dropped_capabilities=setpriv,
        cgroup=cgroup,
        pids_limit=PIDS_MAX if cgroup else None,
        group_freezer=freezer,
        cores_limit=cpuset,
        missing=missing,
    )


def _cpuset_available(kind: str) -> bool:
    if kind == "v1":
        return _writable_cgroup(CGROUP_ROOT / "cpuset") and (CGROUP_ROOT / "cpuset" / "cpuset.cpus").is_file()
    with contextlib.suppress(OSError):
        (CGROUP_ROOT / "cgroup.subtree_control").write_text("+cpuset")
    return "cpuset" in (CGROUP_ROOT / "cgroup.subtree_control").read_text().split()


def _try_namespaces(missing: list[str]) -> bool:
    probe = Path(f"/tmp/hiera-probe-{secrets.token_hex(4)}")
    probe.mkdir()
    try:
        done = subprocess.run(
            [
                *_unshare_prefix(),
                sys.executable,
                "-m",
                "hiera_judge.sandbox",
                str(probe),
                "--",
                sys.executable,
                "-c",
                "import json, os; r = {}\n"
                "for p in ('/etc/hiera-probe', os.path.join(os.environ['HOME'], 'ok')):\n"
                "    try: open(p, 'w').close(); r[p] = True\n"
                "    except OSError: r[p] = False\n"
                "print(json.dumps({'pid': os.getpid(), 'writes': r}))",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=candidate_environment(probe),
        )
        answer = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        answer, done = None, None
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    if answer is None or answer["writes"].get("/etc/hiera-probe") or not answer["writes"].get(str(probe / "ok")):
        detail = (done.stderr.strip().splitlines() or ["?"])[-1] if done is not None else "did not start"
        missing.append(f"no namespaces ({detail}): candidates see other processes, the network and the whole disk")
        return False
    return True


def _unshare_prefix() -> list[str]:
    return UNSHARE if os.geteuid() == 0 else [*UNSHARE, "--user", "--map-root-user"]


def _cgroup_kind() -> tuple[str | None, str]:
    if os.geteuid() != 0:
        return None, "not root"
    if (CGROUP_ROOT / "cgroup.controllers").is_file():
        controllers = set((CGROUP_ROOT / "cgroup.controllers").read_text().split())
        if not {"memory", "pids"} <= controllers:
            return None, "cgroup v2 without the memory and pids controllers"
        with contextlib.suppress(OSError):  # a child group gets the limits only where its parent hands them down
            (CGROUP_ROOT / "cgroup.subtree_control").write_text("+memory +pids")
        if not {"memory", "pids"} <= set((CGROUP_ROOT / "cgroup.subtree_control").read_text().split()):
            return None, f"{CGROUP_ROOT} does not hand the memory and pids controllers down"
        return ("v2", "") if _writable_cgroup(CGROUP_ROOT) else (None, f"{CGROUP_ROOT} is not writable")
    if all((CGROUP_ROOT / c).is_dir() for c in ("memory", "pids")):
        writable = all(_writable_cgroup(CGROUP_ROOT / c) for c in ("memory", "pids"))
        return ("v1", "") if writable else (None, "cgroup v1 is not writable")
    return None, "no memory and pids cgroup controllers"


def _writable_cgroup(parent: Path) -> bool:
    probe = parent / f"hiera-probe-{secrets.token_hex(4)}"
    try:
        probe.mkdir()
        probe.rmdir()
        return True
    except OSError:
        return False


def remove_stale_groups() -> list[str]:
    """Remove what hieras killed before they could remove their groups (`kill -9`, a machine's time limit) left in
    the cgroup tree: groups named for a process that is gone (`hiera-<pid>-*`), empty for `STALE_GROUP_S`, with their
    children. A group with a process in it is never touched (the kernel refuses to remove it). Returns the removed."""
    removed: list[str] = []
    for group in CGROUP_ROOT.glob("*/hiera-*-*") if _cgroup_kind()[0] == "v1" else CGROUP_ROOT.glob("hiera-*-*"):
        pid = group.name.split("-")[1]
        try:
            if not pid.isdigit() or _alive(int(pid)) or time.time() - group.stat().st_mtime < STALE_GROUP_S:
                continue
            children = [c for c in group.iterdir() if c.is_dir()]
            if any((d / "cgroup.procs").read_text().strip() for d in [group, *children]):
                continue  # a process in any part of it: not stale (a hiera of another PID namespace, say)
            for child in children:
                child.rmdir()
            group.rmdir()
            removed.append(str(group))
        except OSError:
            continue
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


@functools.cache
def _stale_groups_removed() -> None:
    """Once per process, before its first group."""
    remove_stale_groups()


@functools.cache
def _cpu_accounting_v1() -> bool:
    """Whether a v1 group can be made in the cpuacct hierarchy (the candidate's CPU time, counted by the kernel)."""
    return _writable_cgroup(CGROUP_ROOT / "cpuacct")


# --- hiera's side: starting and killing a sandbox -------------------------------------------------


@attrs.frozen(kw_only=True)
class CandidateLimits:
    """What the candidate's own processes (the runner and all it starts) may use, in a cgroup of their own below the
    sandbox's, which the judge freezes and thaws as one (`CandidateGroup`): the space decides (`Architecture`)."""

    cores: int | None = None
    """Cores (cpuset: the first this many of those hiera may use); None: all of them."""
    pids: int = 256
    """Processes and threads, all of the candidate's together."""


CANDIDATE_GROUP_VARIABLE = "HIERA_CANDIDATE_CGROUP"
"""How a judge learns its candidate's cgroup: `{"kind": "v2", "dirs": [...]}` (JSON) in its environment."""


class Cgroup:
    """One sandbox's cgroup (v1: one group per controller; v2: one group): limits, then kill and remove. With
    `candidate` limits it has two children: `judge` (v2; on v1 the judge stays in the group itself) and `candidate`,
    whose directories `candidate_dirs` the judge gets writable (`start`) to move its runner in and to freeze it."""

    def __init__(self, kind: str, memory_bytes: int | None, candidate: CandidateLimits | None = None) -> None:
        _stale_groups_removed()
        name = f"hiera-{os.getpid()}-{secrets.token_hex(4)}"
        self.kind = kind
        self.candidate_dirs: list[Path] = []
        if kind == "v2":
            self.dirs = [CGROUP_ROOT / name]
        else:  # the controllers `protection()` found (a group that cannot be made now fails, never goes without one)
            guard = protection()
            wanted = {
                "freezer": guard.group_freezer,
                "cpuset": guard.cores_limit,
                "cpuacct": bool(candidate) and _cpu_accounting_v1(),
            }
            self.dirs = [CGROUP_ROOT / c / name for c in ["memory", "pids"] + [c for c, ok in wanted.items() if candidate and ok]]
        self.created: list[Path] = []
        try:
            self._make(kind, memory_bytes, candidate)
        except BaseException:
            self.destroy()
            raise

    def _make(self, kind: str, memory_bytes: int | None, candidate: CandidateLimits | None) -> None:
        for d in self.dirs:
            d.mkdir()
            self.created.append(d)
            if d.parent.name == "cpuset":
                for key in ("cpuset.cpus", "cpuset.mems"):
                    (d / key).write_text((d.parent / key).read_text())
        limits = {"pids.max": str(PIDS_MAX)}
        if memory_bytes:
            limits["memory.max" if kind == "v2" else "memory.limit_in_bytes"] = str(memory_bytes)
        self._limit(self.dirs, limits)
        self.entry = list(self.dirs)
        if candidate is None:
            return
        cores = sorted(os.sched_getaffinity(0))[: candidate.cores] if candidate.cores else None
        own = {"pids.max": str(candidate.pids)}
        if memory_bytes:
            own["memory.max" if kind == "v2" else "memory.limit_in_bytes"] = str(memory_bytes)
        if kind == "v2":
            base = self.dirs[0]
            offered = set((base / "cgroup.controllers").read_text().split())
            (base / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in ("memory", "pids", "cpuset") if c in offered))
            judge, mine = base / "judge", base / "candidate"
            for d in (judge, mine):
                d.mkdir()
                self.created.append(d)
            if cores and protection().cores_limit:
                if not (mine / "cpuset.cpus").exists():
                    raise OSError(f"{mine}: no cpuset.cpus, though the cpuset controller was found")
                own["cpuset.cpus"] = ",".join(map(str, cores))
            self._limit([mine], own)
            self.entry, self.candidate_dirs = [judge], [mine]
        else:
            for d in self.dirs:
                child = d / "candidate"
                child.mkdir()
                self.created.append(child)
                if d.parent.name == "cpuset":
                    (child / "cpuset.mems").write_text((d / "cpuset.mems").read_text())
                    (child / "cpuset.cpus").write_text(",".join(map(str, cores)) if cores else (d / "cpuset.cpus").read_text())
                self.candidate_dirs.append(child)
            self._limit(self.candidate_dirs, own)

    @staticmethod
    def _limit(dirs: Sequence[Path], limits: dict[str, str]) -> None:
        for d in dirs:
            for key, value in limits.items():
                if (d / key).exists():
                    (d / key).write_text(value)

    def enter(self) -> None:
        """In the forked child, before exec: move this process into the group (the judge's part of it)."""
        for d in self.entry:
            with open(d / "cgroup.procs", "w") as procs:
                procs.write(str(os.getpid()))

    def candidate_variable(self) -> dict[str, str]:
        """The judge's environment entry naming the candidate's group (none without one)."""
        if not self.candidate_dirs:
            return {}
        return {CANDIDATE_GROUP_VARIABLE: json.dumps({"kind": self.kind, "dirs": [str(d) for d in self.candidate_dirs]})}

    def destroy(self) -> None:
        for d in self.candidate_dirs:  # a frozen v1 process cannot die before it is thawed
            with contextlib.suppress(OSError):
                (d / "freezer.state").write_text("THAWED") if (d / "freezer.state").exists() else None
            with contextlib.suppress(OSError):
                (d / "cgroup.freeze").write_text("0") if (d / "cgroup.freeze").exists() else None
        deadline = time.monotonic() + CGROUP_REMOVAL_S
        for d in reversed(self.created):
            while True:
                pids = [int(p) for p in (d / "cgroup.procs").read_text().split()] if d.exists() else []
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                try:
                    if d.exists():
                        d.rmdir()
                    break
                except OSError as error:
                    if time.monotonic() > deadline:
                        print(f"hiera: cgroup {d} left behind ({error}; processes {pids})", file=sys.stderr)
                        break
                    time.sleep(0.02)
        self.created = []


class CandidateGroup:
    """The judge's handle on its candidate's cgroup (named by `CANDIDATE_GROUP_VARIABLE`): move the runner in,
    freeze the whole group (every process and thread, whatever it forks or clones) and thaw it."""

    def __init__(self, kind: str, dirs: Sequence[str]) -> None:
        self.kind, self.dirs = kind, [Path(d) for d in dirs]
        self.files: tuple[int, int] | None = None
        self.state: Path | None
        if kind == "v2":
            self.state, self.frozen_on, self.thawed_on = self.dirs[0] / "cgroup.freeze", "1", "0"
        else:
            freezers = [d for d in self.dirs if d.parent.parent.name == "freezer"]
            self.state = freezers[0] / "freezer.state" if freezers else None
            self.frozen_on, self.thawed_on = "FROZEN", "THAWED"

    @classmethod
    def from_environment(cls) -> CandidateGroup | None:
        spec = os.environ.get(CANDIDATE_GROUP_VARIABLE)
        if not spec:
            return None
        value = json.loads(spec)
        group = cls(value["kind"], value["dirs"])
        return group if group.state is not None else None

    def enter(self) -> None:
        """In the runner's forked child, before exec."""
        for d in self.dirs:
            with open(d / "cgroup.procs", "w") as procs:
                procs.write(str(os.getpid()))

    def freeze(self, timeout_s: float = 10.0) -> None:
        """Stop every process of the group; return once the kernel says all are stopped."""
        os.pwrite(self._files()[0], self.frozen_on.encode(), 0)
        deadline = time.monotonic() + timeout_s
        while not self._frozen():
            if time.monotonic() > deadline:
                raise OSError(f"the candidate's cgroup did not freeze within {timeout_s:.0f} s")
            time.sleep(0)

    def thaw(self) -> None:
        os.pwrite(self._files()[0], self.thawed_on.encode(), 0)

    def _frozen(self) -> bool:
        text = os.pread(self._files()[1], 4096, 0).decode()
        return "frozen 1" in text if self.kind == "v2" else text.strip() == "FROZEN"

    def _files(self) -> tuple[int, int]:
        """The state file to write and the one that says whether the group is frozen, opened once: both are inside
        the judge's clock at every order, which an open() each time would lengthen."""
        if self.files is None:
            if self.state is None:
                raise OSError(f"cgroup {self.dirs[0]}: no freezer to hold the candidate with")
            shown = self.dirs[0] / "cgroup.events" if self.kind == "v2" else self.state
            self.files = os.open(self.state, os.O_WRONLY | os.O_CLOEXEC), os.open(shown, os.O_RDONLY | os.O_CLOEXEC)
        return self.files

    def cpu_ms(self) -> float | None:
        """The CPU time every process of the group has used (ms), dead ones included, as the kernel counts it (v2
        `cpu.stat`, v1 `cpuacct.usage`); None where the group has no such count."""
        for d in self.dirs:
            with contextlib.suppress(OSError, ValueError):
                if self.kind == "v2":
                    line = next(x for x in (d / "cpu.stat").read_text().splitlines() if x.startswith("usage_usec "))
                    return int(line.split()[1]) / 1e3
                if d.parent.parent.name == "cpuacct":
                    return int((d / "cpuacct.usage").read_text()) / 1e6
        return None

    def hold_to_core(self, core: int) -> bool:
        """Every process and thread of the group, and any it starts, on `core` alone, by the kernel (its cpuset);
        False where the group has no cpuset or the kernel refused it."""
        files = [d / "cpuset.cpus" for d in self.dirs if (d / "cpuset.cpus").exists()]
        try:
            for file in files:
                file.write_text(str(core))
        except OSError:
            return False
        return bool(files)

    def paths(self) -> list[str]:
        return [str(d) for d in self.dirs]


def piped(stream: IO[Any] | None) -> IO[Any]:
    """A child's pipe that was asked for (`stdin=PIPE` / `stdout=PIPE`): never None."""
    if stream is None:
        raise ValueError("the process was started without this pipe")
    return stream


@attrs.define
class Sandboxed:
    """A running sandbox: `process` is `unshare`; `kill()` ends everything in it, whoever holds its pipes, and
    removes its cgroup (call it when the process has ended too: it leaves nothing behind)."""

    process: subprocess.Popen
    cgroup: Cgroup | None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        if self.cgroup is not None:
            self.cgroup.destroy()
            self.cgroup = None


def start(
    command: Sequence[str],
    *,
    scratch: Path,
    writable: Sequence[Path] = (),
    readable: Sequence[Path] = (),
    memory_bytes: int | None = None,
    env_extra: dict[str, str] | None = None,
    candidate: CandidateLimits | None = None,
    **popen,
) -> Sandboxed:
    """Start `command` in a new sandbox where only `scratch` and `writable` can be written; `readable` names what
    else it must see (the candidate's library). /tmp becomes a private tmpfs, unless one of these, the command,
    the interpreter or its import path lies under it. With `candidate` (a judge's sandbox) the cgroup gets a child
    group for the candidate's processes, which the command may write (`CandidateGroup`). `popen` goes to
    subprocess.Popen (stdin, stdout, stderr, text). The caller must `kill()` it."""
    scratch.mkdir(parents=True, exist_ok=True)
    guard = protection()
    cgroup = Cgroup(guard.cgroup, memory_bytes, candidate if guard.group_freezer else None) if guard.cgroup else None
    try:
        return _start(
            command,
            scratch=scratch,
            writable=[*writable, *(cgroup.candidate_dirs if cgroup else [])],
            readable=readable,
            memory_bytes=memory_bytes,
            cgroup=cgroup,
            env_extra={**(env_extra or {}), **(cgroup.candidate_variable() if cgroup else {})},
            **popen,
        )
    except BaseException:
        if cgroup is not None:
            cgroup.destroy()
        raise


def _start(
    command: Sequence[str],
    *,
    scratch: Path,
    writable: Sequence[Path],
    readable: Sequence[Path],
    memory_bytes: int | None,
    cgroup: Cgroup | None,
    env_extra: dict[str, str],
    **popen,
) -> Sandboxed:
    guard = protection()
    prefix = []
    if guard.pid_namespace:
        python = [sys.executable, sys.prefix, *sys.path, *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
        needed = [Path(os.path.realpath(str(p))) for p in (scratch, *writable, *readable, command[0], *python) if p]
        under_tmp = any(p == Path("/tmp") or Path("/tmp") in p.parents for p in needed)
        prefix = [
            *_unshare_prefix(),
            sys.executable,
            "-m",
            "hiera_judge.sandbox",
            *([] if under_tmp else ["--private-tmp"]),
            *[str(p) for p in (scratch, *writable)],
            "--",
        ]
    limit = memory_bytes if cgroup is None else None

    def in_child() -> None:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with hiera
        if cgroup is not None:
            cgroup.enter()
        if limit:
            resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))

    process = subprocess.Popen(
        [*prefix, *command],
        cwd=scratch,
        env=candidate_environment(scratch, env_extra),
        start_new_session=True,
        preexec_fn=in_child,
        **popen,
    )
    return Sandboxed(process=process, cgroup=cgroup)


@attrs.frozen(kw_only=True)
class IsolatedResult:
    returncode: int | None
    """The exit status; negative for a signal (as subprocess reports it); None when killed on time-out or stopped."""
    stdout: str
    stderr: str
    timed_out: bool
    stopped: bool = False
    """Killed because the run is stopping (`stop`): what it made is not a result."""


STOP_POLL_S = 0.1
"""How often `run_sandboxed` asks its `stop` whether to end the command early."""


@attrs.frozen
class Handshake:
    """For a program that prepares before it needs what `lock` guards (a profiler's and its Python's start-up, ~8 s
    of every parent's profile on an H100, before any work on the GPU): `run_sandboxed` enters `lock` when the program
    prints `ready` on a line of its own on stdout, then writes `go` and a newline on its stdin, and holds the lock
    until the program has ended. The program's `timeout_s` counts again from `go`, so the wait for the lock is not
    its time. Only a line that comes before `go` is read as `ready`: what the program runs after it cannot take the
    lock back."""

    ready: str
    go: str
    lock: contextlib.AbstractContextManager


def run_sandboxed(
    command: Sequence[str],
    *,
    cwd: Path,
    timeout_s: float,
    stdin: str = "",
    writable: Sequence[Path] = (),
    readable: Sequence[Path] = (),
    env_extra: dict[str, str] | None = None,
    memory_bytes: int | None = None,
    file_bytes: int | None = None,
    log_bytes: int = 16 << 20,
    hide_outside: bool = False,
    stop: Callable[[], bool] | None = None,
    handshake: Handshake | None = None,
) -> IsolatedResult:
    """Run `command` (a compiler, a profiler) in a sandbox where `cwd` and `writable` can be written (and
    `readable` must be seen); kill everything in it on time-out, or as soon as `stop` says so (checked every
    `STOP_POLL_S`; the result is then `stopped`). With a `handshake`, `stdin` stays open for its `go`.

    `memory_bytes` limits the sandbox's cgroup and every process in it (RLIMIT_DATA, so it holds without a
    cgroup too); `file_bytes` every file it writes (RLIMIT_FSIZE). Of stdout and stderr each, at most
    `log_bytes` are kept (the head and the tail, with a line saying how much was dropped), as printable text:
    terminal escapes and other control characters dropped. `hide_outside` puts an empty folder over every
    folder outside the system's own (`hidden_folders`), but for `cwd`, `writable`, `readable` and Python's."""
    seen = [*readable]
    if memory_bytes or file_bytes or hide_outside:
        program = shutil.which(command[0])
        seen += [Path(program)] if program else []
        keep = [cwd, *writable, *seen] if hide_outside else []
        command = confined(command, memory_bytes=memory_bytes, file_bytes=file_bytes, keep=keep)
    box = start(
        command,
        scratch=cwd,
        writable=writable,
        readable=seen,
        memory_bytes=memory_bytes,
        env_extra=env_extra,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    ready = handshake.ready.encode() if handshake is not None else None
    pipes = [BoundedPipe(box.process.stdout, log_bytes, marker=ready), BoundedPipe(box.process.stderr, log_bytes)]
    feeding = threading.Thread(target=_feed, args=(box.process.stdin, stdin.encode(), ready is None), daemon=True)
    feeding.start()
    poll_s = STOP_POLL_S if stop is not None or handshake is not None else None
    deadline = time.monotonic() + timeout_s
    timed_out = stopped = went = False
    with contextlib.ExitStack() as held:  # left when the program has ended: what it holds is held to its end
        try:
            while box.process.poll() is None:
                if stop is not None and stop():
                    stopped = True
                    break
                if handshake is not None and not went and pipes[0].seen.is_set():
                    held.enter_context(handshake.lock)
                    went = True
                    feeding.join()
                    _feed(box.process.stdin, f"{handshake.go}\n".encode(), True)
                    deadline = time.monotonic() + timeout_s
                if (remaining := deadline - time.monotonic()) <= 0:
                    timed_out = True
                    break
                with contextlib.suppress(subprocess.TimeoutExpired):
                    box.process.wait(timeout=min(remaining, poll_s) if poll_s is not None else remaining)
        finally:
            box.kill()
        box.process.wait()
    with contextlib.suppress(OSError, ValueError):  # left open for a `go` that was never sent
        piped(box.process.stdin).close()
    for pipe in pipes:
        pipe.join(timeout=10)
    return IsolatedResult(
        returncode=None if timed_out or stopped else box.process.returncode,
        stdout=pipes[0].text(),
        stderr=pipes[1].text(),
        timed_out=timed_out,
        stopped=stopped,
    )


# --- the judge's side: starting the runner -------------------------------------------------------


SCRATCH_QUOTA = "size=256m"
"""The runner's own folder (its working directory, HOME and TMPDIR): a tmpfs of this size, inside the judge's mount
namespace; the judge's scratch folder around it is read-only for the runner."""


def runner_folder(scratch: Path) -> Path | None:
    """Judge, in its sandbox: `scratch/run`, a tmpfs of `SCRATCH_QUOTA` (charged to the memory of the cgroup of whoever
    writes it), for the runner; None where the judge has no mount namespace of its own (then the runner works in
    `scratch`, without a quota)."""
    if os.getpid() != 1:  # no sandbox: a mount here would be the host's
        return None
    folder = scratch / "run"
    folder.mkdir(exist_ok=True)
    libc = ctypes.CDLL(None, use_errno=True)
    if _mount(libc, "tmpfs", str(folder), "tmpfs", MS_NOSUID | MS_NODEV, f"{SCRATCH_QUOTA},mode=0700"):
        return None
    return folder


def runner_command(command: Sequence[str], *, sealed: Sequence[str] = ()) -> list[str]:
    """`command` without capabilities and with no_new_privs (where setpriv exists); with `sealed` paths (the
    candidate's cgroup, writable for the judge), in a mount namespace of its own where they are read-only: a process
    without capabilities cannot make them writable again, so it can neither thaw itself nor leave its group."""
    command = [*SETPRIV, *command] if shutil.which("setpriv") else list(command)
    if sealed:
        command = [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            sys.executable,
            "-m",
            "hiera_judge.sandbox",
            "--read-only",
            *sealed,
            "--",
            *command,
        ]
    return command


def make_undumpable() -> None:
    """The judge: no process without CAP_SYS_PTRACE may read its memory, environment or descriptors."""
    ctypes.CDLL(None, use_errno=True).prctl(4, 0)  # PR_SET_DUMPABLE 0


# --- inside the new namespaces, before the command: the mounts -----------------------------------

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME = 1024, 2048, 4096, 16384, 1 << 18, 1 << 21
_FLAGS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
}


def _mount(libc, source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> int:
    enc = lambda s: s.encode() if s is not None else None
    if libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        return ctypes.get_errno()
    return 0


def _mounts() -> list[tuple[str, int]]:
    """(mount point, flags of that mount) for every mount, from /proc/self/mountinfo."""
    result = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        point = fields[4].encode().decode("unicode_escape")
        flags = sum(_FLAGS.get(option, 0) for option in fields[5].split(","))
        result.append((point, flags))
    return result


def enter(writable: Sequence[str], *, private_tmp: bool = False) -> None:
    """Make everything read-only but `writable`, /dev/shm and, with `private_tmp`, /tmp (private tmpfs: Nsight
    Compute writes its lock there) and /proc (the new PID namespace's, which shows only the sandbox's processes); raise
    OSError where it fails."""
    libc = ctypes.CDLL(None, use_errno=True)
    if err := _mount(libc, None, "/", None, MS_REC | MS_PRIVATE):
        raise OSError(err, f"making / private: {os.strerror(err)}")
    keep = [os.path.realpath(p) for p in writable]
    for path in keep:
        if err := _mount(libc, path, path, None, MS_BIND | MS_REC):
            raise OSError(err, f"binding {path}: {os.strerror(err)}")
    for point in ["/dev/shm", *(["/tmp"] if private_tmp else [])]:  # fresh and empty for this sandbox
        if os.path.isdir(point):
            _mount(libc, "tmpfs", point, "tmpfs", MS_NOSUID | MS_NODEV, TMPFS)
            keep.append(point)
    inside = lambda point: any(point == k or point.startswith(k.rstrip("/") + "/") for k in keep)
    for point, flags in _mounts():
        if inside(point) or point == "/proc":  # the namespace's own /proc; the CUDA driver fails where it is read-only
            continue
        err = _mount(libc, None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
        if err and point == "/":
            raise OSError(err, f"making / read-only: {os.strerror(err)}")


def seal(paths: Sequence[str]) -> None:
    """Make `paths` (mount points in this mount namespace) read-only; what is mounted below them stays as it is."""
    libc = ctypes.CDLL(None, use_errno=True)
    for path in paths:
        if err := _mount(libc, path, path, None, MS_BIND | MS_REC):
            raise OSError(err, f"binding {path}: {os.strerror(err)}")
        if err := _mount(libc, None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY):
            raise OSError(err, f"making {path} read-only: {os.strerror(err)}")


def main(argv: list[str]) -> None:
    split = argv.index("--")
    if argv[:1] == ["--read-only"]:
        try:
            seal(argv[1:split])
        except OSError as exc:
            print(f"hiera sandbox: {exc.strerror}", file=sys.stderr, flush=True)
            sys.exit(SANDBOX_FAILED)
        os.execvp(argv[split + 1], argv[split + 1 :])
    paths = [a for a in argv[:split] if a != "--private-tmp"]
    try:
        enter(paths, private_tmp="--private-tmp" in argv[:split])
    except OSError as exc:
        print(f"hiera sandbox: {exc.strerror}", file=sys.stderr, flush=True)
        sys.exit(SANDBOX_FAILED)
    os.chdir(os.getcwd())  # the working directory, looked up again: on the writable bind mount, not the old one
    try:
        os.execvp(argv[split + 1], argv[split + 1 :])
    except OSError as exc:
        print(f"hiera sandbox: cannot run {argv[split + 1]}: {exc.strerror}", file=sys.stderr, flush=True)
        sys.exit(SANDBOX_FAILED)


# --- the compiler's side: its limits, its log, what it sees and what it may include ---------------

COMPILER_LOG_BYTES = 64 << 10
"""What a compiler's log keeps of its stdout and of its stderr (the head and the tail): the next prompt quotes it."""
COMPILER_FILE_BYTES = 512 << 20
"""The largest file a compiler may write (RLIMIT_FSIZE): an object file or a library is far smaller."""
LISTING_MEMORY_BYTES = 2 << 30
"""The preprocessor's dependency listing may use this much: an include of an endless file fails here, in seconds."""
SYSTEM_FOLDERS = frozenset({"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "sys", "usr"})
"""The top-level folders a compiler sees whole; every other one (home folders, /work, /tmp, /run, /opt, ...) is
hidden but for what the job names (`hidden_folders`). /dev is replaced by the few devices a compiler opens."""
DEVICES = ("null", "random", "urandom", "shm")
DEVICE_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"}
SPECIAL_ROOTS = ("/dev", "/proc", "/sys")
_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
_LOCATED = re.compile(r"^(?:In file included from |\s+from )?([^\s:(][^:(\n]*?)(?:\(\d+\))?:(?:\d|\s)")
"""A diagnostic's location: `path:line:`, `path: ` (the assembler), `path(line): ` (nvcc's front end), an include chain."""
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*(?:include|include_next|import|embed)[ \t]*(?:"([^"\n]+)"|<([^>\n]+)>)', re.M)


class BoundedPipe(threading.Thread):
    """Reads a pipe to its end, keeping its first and last `limit // 2` bytes and counting the rest; `seen` is set
    once a line that is `marker` has come."""

    def __init__(self, pipe, limit: int, *, marker: bytes | None = None) -> None:
        super().__init__(daemon=True)
        self.pipe, self.half = pipe, max(1, limit // 2)
        self.head, self.tail, self.dropped = b"", b"", 0
        self.marker, self.line, self.seen = marker, b"", threading.Event()
        self.start()

    def run(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            while chunk := self.pipe.read1(1 << 16):
                if self.marker is not None and not self.seen.is_set():
                    *lines, self.line = (self.line + chunk).split(b"\n")
                    self.line = self.line[-len(self.marker) - 1 :]  # a longer line is not the marker anyway
                    if any(line.strip() == self.marker for line in lines):
                        self.seen.set()
                room = max(0, self.half - len(self.head))
                self.head, chunk = self.head + chunk[:room], chunk[room:]
                self.tail += chunk
                if len(self.tail) > 2 * self.half:
                    self.dropped += len(self.tail) - self.half
                    self.tail = self.tail[-self.half :]
        if len(self.tail) > self.half:
            self.dropped += len(self.tail) - self.half
            self.tail = self.tail[-self.half :]

    def text(self) -> str:
        if not self.dropped:
            return printable(self.head + self.tail)
        return f"{printable(self.head)}\n[... {self.dropped} bytes of output dropped ...]\n{printable(self.tail)}"


def printable(data: bytes) -> str:
    """`data` as text a log can hold: undecodable bytes replaced, terminal escapes and control characters but
    newline and tab dropped, carriage returns made newlines."""
    text = _ESCAPES.sub("", data.decode(errors="replace")).replace("\r\n", "\n").replace("\r", "\n")
    return "".join(ch for ch in text if ch.isprintable() or ch in "\n\t")


def _feed(pipe, data: bytes, close: bool) -> None:
    with contextlib.suppress(OSError, ValueError):
        pipe.write(data)
        pipe.flush()
    if close:
        with contextlib.suppress(OSError, ValueError):
            pipe.close()


def run_limited(
    command: Sequence[str],
    *,
    cwd: Path,
    timeout_s: float,
    memory_bytes: int | None = None,
    file_bytes: int | None = None,
    log_bytes: int = COMPILER_LOG_BYTES,
) -> IsolatedResult:
    """Run `command` from a process already in a sandbox (the cuda build's dependency listing), with the same
    limits as `run_sandboxed` gives its command, and its process group killed on time-out."""

    def limits() -> None:
        _set_limits(memory_bytes, file_bytes)

    process = subprocess.Popen(
        list(command),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=limits,
    )
    pipes = [BoundedPipe(process.stdout, log_bytes), BoundedPipe(process.stderr, log_bytes)]
    try:
        process.wait(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    for pipe in pipes:
        pipe.join(timeout=10)
    return IsolatedResult(
        returncode=None if timed_out else process.returncode, stdout=pipes[0].text(), stderr=pipes[1].text(), timed_out=timed_out
    )


def _set_limits(memory_bytes: int | None, file_bytes: int | None) -> None:
    if memory_bytes:
        resource.setrlimit(resource.RLIMIT_DATA, (memory_bytes, memory_bytes))
    if file_bytes:
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))


def confined(command: Sequence[str], *, memory_bytes: int | None, file_bytes: int | None, keep: Sequence[Path]) -> list[str]:
    """`command` started through `confine`: with these rlimits and, where `keep` names folders (and the sandbox
    has a mount namespace), everything outside the system's folders hidden but for those and Python's own."""
    hide = hidden_folders() if keep and protection().read_only_root else []
    if hide:
        keep = [*keep, *python_folders(), Path(__file__).parent]
    spec = {
        "memory_bytes": memory_bytes,
        "file_bytes": file_bytes,
        "hide": hide,
        "keep": sorted({os.path.realpath(p) for p in keep}),
    }
    return [
        sys.executable,
        "-c",
        "import sys; from hiera_judge.sandbox import confine; confine(sys.argv[1:])",
        json.dumps(spec),
        "--",
        *command,
    ]


def hidden_folders() -> list[str]:
    """What a compiler must not see: every top-level folder but the system's (`SYSTEM_FOLDERS`), and /dev."""
    return [
        "/dev",
        *sorted(str(p) for p in Path("/").iterdir() if p.is_dir() and not p.is_symlink() and p.name not in SYSTEM_FOLDERS),
    ]


def python_folders() -> list[Path]:
    """The interpreter's prefixes and site folders: a compiler started from Python (cpp_extension) needs them."""
    import site
    import sysconfig

    folders = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        *site.getsitepackages(),
        site.getusersitepackages(),
        *sysconfig.get_paths().values(),
    }
    return [Path(f) for f in folders if f and os.path.exists(f)]


def confine(argv: list[str]) -> None:
    """In the sandbox, before the compiler: hide what it must not read, set its limits, exec it."""
    spec, command = json.loads(argv[0]), argv[2:]
    if spec["hide"]:
        try:
            _hide(spec["hide"], spec["keep"])
        except OSError as exc:
            print(f"hiera sandbox: hiding the folders outside the build: {exc}", file=sys.stderr, flush=True)
            sys.exit(SANDBOX_FAILED)
        os.chdir(os.getcwd())  # the working directory again: on its bind mount, not under the hiding tmpfs
    _set_limits(spec["memory_bytes"], spec["file_bytes"])
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"hiera sandbox: cannot run {command[0]}: {exc.strerror}", file=sys.stderr, flush=True)
        sys.exit(SANDBOX_FAILED)


def _hide(hide: Sequence[str], keep: Sequence[str]) -> None:
    """An empty read-only tmpfs over each of `hide`, with each of `keep` inside it bound back at its own path."""
    libc = ctypes.CDLL(None, use_errno=True)
    within = lambda path, root: path == root or path.startswith(root.rstrip("/") + "/")
    keep = [k for k in sorted(keep, key=len) if os.path.exists(k)]
    keep = [k for i, k in enumerate(keep) if not any(within(k, other) for other in keep[:i])]
    for root in hide:
        root = os.path.realpath(root)
        if not os.path.isdir(root) or any(within(root, k) for k in keep):
            continue
        inner = [k for k in keep if within(k, root)]
        if root == "/dev":
            inner += [f"/dev/{d}" for d in DEVICES if os.path.exists(f"/dev/{d}")]
        handles = [(k, os.open(k, os.O_PATH)) for k in inner]  # reachable still once the tmpfs covers them
        options = f"{TMPFS},mode=1777" if root == "/tmp" else "size=1m,mode=755"  # /tmp: private and writable
        try:
            if err := _mount(libc, "tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, options):
                raise OSError(err, f"a tmpfs over {root}: {os.strerror(err)}")
            for path, handle in handles:
                if os.path.isdir(f"/proc/self/fd/{handle}"):
                    os.makedirs(path, exist_ok=True)
                else:
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    open(path, "a").close()
                if err := _mount(libc, f"/proc/self/fd/{handle}", path, None, MS_BIND | MS_REC):
                    raise OSError(err, f"binding {path} back: {os.strerror(err)}")
        finally:
            for _, handle in handles:
                os.close(handle)
        if root == "/dev":
            for name, target in DEVICE_LINKS.items():
                os.symlink(target, f"/dev/{name}")
        if root != "/tmp" and (err := _mount(libc, None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, options)):
            raise OSError(err, f"making the tmpfs over {root} read-only: {os.strerror(err)}")


@functools.cache
def search_folders(compiler_and_flags: tuple[str, ...], language: str) -> list[str]:
    """The folders `compiler_and_flags` searches for includes (its own and the flags' -I/-isystem), as the compiler
    lists them with -v; a trusted command on no candidate input, so not sandboxed."""
    try:
        done = subprocess.run(
            [*compiler_and_flags, "-E", "-v", "-x", language, "/dev/null", "-o", "/dev/null"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    lines = done.stderr.splitlines()
    starts = [i for i, line in enumerate(lines) if "search starts here" in line]
    listed = [line.strip() for line in lines[starts[0] + 1 :] if line.startswith(" ")] if starts else []
    return [os.path.realpath(p.removesuffix(" (framework directory)")) for p in listed if os.path.isdir(p.split(" ")[0])]


def include_flag_folders(flags: Sequence[str]) -> list[str]:
    """The folders named by -I, -isystem, -iquote and -idirafter in `flags`."""
    folders, after = [], None
    for flag in flags:
        if after:
            folders.append(flag)
            after = None
        elif flag in ("-I", "-isystem", "-iquote", "-idirafter"):
            after = flag
        elif flag.startswith("-I") or flag.startswith("-isystem"):
            folders.append(flag.removeprefix("-isystem").removeprefix("-I"))
    return [os.path.realpath(f) for f in folders if f]


def makefile_dependencies(listing: str) -> list[str]:
    """The prerequisites of a Makefile rule as `cc -M` / `nvcc -M` write it (continuations, escaped spaces)."""
    joined = listing.replace("\\\n", " ")
    paths = []
    for rule in joined.splitlines():
        _, colon, prerequisites = rule.partition(": ") if ": " in rule else rule.partition(":")
        if colon:
            paths += [p.replace("\\ ", " ").replace("$$", "$") for p in re.split(r"(?<!\\)\s+", prerequisites.strip()) if p]
    return paths


def _within_any(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def include_problem(include: str, *, base: Path, allowed: Sequence[str]) -> str | None:
    """Why the compiler must not read `include` (relative to `base`): a device, a FIFO, a socket, a folder, a file
    under /dev, /proc or /sys, or one outside `allowed`; None when it may. Never the file's content."""
    path = os.path.realpath(os.path.join(base, include))
    if _within_any(path, SPECIAL_ROOTS):
        return f"`{include}` is under {next(r for r in SPECIAL_ROOTS if _within_any(path, [r]))}, not a source file"
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = stat.S_IFREG  # missing (`-MG` lists it): where it would be decides; the compiler says it is missing
    kind = (
        "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "a folder"
        if stat.S_ISDIR(mode)
        else None
    )
    if kind:
        return f"`{include}` is {kind}, not a source file"
    if not _within_any(path, allowed):
        return (
            f"`{include}` is outside what a candidate may include (its own folder, the contract's files and the"
            f" toolchain's include folders)"
        )
    return None


def literal_include_problem(source: str, *, base: Path, allowed: Sequence[str]) -> str | None:
    """`include_problem` for the includes written out in `source` that name a file by path (absolute, or relative
    to the candidate's folder where it exists there): found before any preprocessor reads them."""
    for quoted, angled in _INCLUDE.findall(source):
        name = quoted or angled
        if name.startswith("/") or (quoted and os.path.lexists(os.path.join(base, name))):
            if problem := include_problem(name, base=base, allowed=allowed):
                return problem
    return None


def dependency_problem(listing: str, *, base: Path, allowed: Sequence[str]) -> str | None:
    """`include_problem` for every file of a dependency listing (`makefile_dependencies`); the first problem."""
    for include in makefile_dependencies(listing):
        if problem := include_problem(include, base=base, allowed=allowed):
            return problem
    return None


def located_outside(log: str, *, base: Path, allowed: Sequence[str]) -> str:
    """`log` without the diagnostics located in a file outside `allowed` (a line `path:line: ...` and the lines that
    follow it up to the next located one: its quoted source, its caret): what a compiler read there stays there."""
    kept, dropped, keeping = [], 0, True
    for line in log.splitlines():
        match = _LOCATED.match(line)
        if match and os.path.isfile(os.path.join(base, match.group(1))):
            path = os.path.realpath(os.path.join(base, match.group(1)))
            keeping = _within_any(path, allowed) and not _within_any(path, SPECIAL_ROOTS)
        if keeping:
            kept.append(line)
        else:
            dropped += 1
    if dropped:
        kept.append(f"[{dropped} lines of diagnostics located in files outside the candidate's reach not shown]")
    return "\n".join(kept)


def library_problem(path: Path, *, max_bytes: int) -> str | None:
    """Why `path` is not a library the judge may load: missing, a link, a folder, another special file, or larger
    than `max_bytes`; None when it is a regular file of a bounded size (lstat: a link is never followed)."""
    try:
        info = os.lstat(path)
    except OSError:
        return f"the build left no library at {path.name}"
    if stat.S_ISLNK(info.st_mode):
        return f"the build left a symbolic link where the library should be ({path.name})"
    if stat.S_ISDIR(info.st_mode):
        return f"the build left a directory where the library should be ({path.name})"
    if not stat.S_ISREG(info.st_mode):
        return f"the build left a special file where the library should be ({path.name})"
    if info.st_size > max_bytes:
        return f"the library is {info.st_size / 2**20:.0f} MiB, over the limit of {max_bytes / 2**20:.0f} MiB"
    return None


def folder_bytes(folder: Path) -> int:
    """What the files under `folder` take (links not followed)."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


if __name__ == "__main__":
    main(sys.argv[1:])
