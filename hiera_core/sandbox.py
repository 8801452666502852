"""The sandbox around every process that reads or runs candidate code, and the protections in force.

hiera starts `unshare` (new PID, mount, network and IPC namespaces; the whole namespace is killed when
`unshare` dies, and `unshare` dies with hiera) inside a cgroup (memory and process limits), with an
environment that holds no secret. Inside, `python -m hiera_core.sandbox` makes every mount read-only
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
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import attrs

from hiera_core.records import Protection

PASSED_VARIABLES = frozenset(
    {
        "PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "PYTHONPATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH",
        "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "TORCH_CUDA_ARCH_LIST", "OMP_NUM_THREADS",
        "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
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
    missing = []
    namespaces = shutil.which("unshare") is not None and _try_namespaces(missing)
    setpriv = shutil.which("setpriv") is not None
    if not setpriv:
        missing.append("setpriv not found: the runner keeps the judge's capabilities")
    cgroup, why = _cgroup_kind()
    if cgroup is None:
        missing.append(f"no cgroup ({why}): memory limited per process (RLIMIT_DATA), process count not limited")
    return Protection(
        pid_namespace=namespaces, network_namespace=namespaces, read_only_root=namespaces,
        dropped_capabilities=setpriv, cgroup=cgroup, pids_limit=PIDS_MAX if cgroup else None, missing=missing,
    )


def _try_namespaces(missing: list[str]) -> bool:
    probe = Path(f"/tmp/hiera-probe-{secrets.token_hex(4)}")
    probe.mkdir()
    try:
        done = subprocess.run(
            [*_unshare_prefix(), sys.executable, "-m", "hiera_core.sandbox", str(probe), "--", sys.executable, "-c",
             "import json, os; r = {}\n"
             "for p in ('/etc/hiera-probe', os.path.join(os.environ['HOME'], 'ok')):\n"
             "    try: open(p, 'w').close(); r[p] = True\n"
             "    except OSError: r[p] = False\n"
             "print(json.dumps({'pid': os.getpid(), 'writes': r}))"],
            capture_output=True, text=True, timeout=60, env=candidate_environment(probe),
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


# --- hiera's side: starting and killing a sandbox -------------------------------------------------


class Cgroup:
    """One sandbox's cgroup (v1: a memory and a pids group; v2: one group): limits, then kill and remove."""

    def __init__(self, kind: str, memory_bytes: int | None) -> None:
        name = f"hiera-{os.getpid()}-{secrets.token_hex(4)}"
        if kind == "v2":
            self.dirs = [CGROUP_ROOT / name]
        else:
            self.dirs = [CGROUP_ROOT / "memory" / name, CGROUP_ROOT / "pids" / name]
        for d in self.dirs:
            d.mkdir()
        limits = {"pids.max": str(PIDS_MAX)}
        if memory_bytes:
            limits["memory.max" if kind == "v2" else "memory.limit_in_bytes"] = str(memory_bytes)
        for d in self.dirs:
            for key, value in limits.items():
                if (d / key).exists():
                    (d / key).write_text(value)

    def enter(self) -> None:
        """In the forked child, before exec: move this process into the group."""
        for d in self.dirs:
            with open(d / "cgroup.procs", "w") as procs:
                procs.write(str(os.getpid()))

    def destroy(self) -> None:
        for d in self.dirs:
            for _ in range(50):
                pids = [int(p) for p in (d / "cgroup.procs").read_text().split()] if d.exists() else []
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                try:
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.02)


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
    command: Sequence[str], *, scratch: Path, writable: Sequence[Path] = (), readable: Sequence[Path] = (),
    memory_bytes: int | None = None, env_extra: dict[str, str] | None = None, **popen,
) -> Sandboxed:
    """Start `command` in a new sandbox where only `scratch` and `writable` can be written; `readable` names what
    else it must see (the candidate's library). /tmp becomes a private tmpfs, unless one of these, the command,
    the interpreter or its import path lies under it. `popen` goes to subprocess.Popen (stdin, stdout, stderr, text). The caller must
    `kill()` it."""
    scratch.mkdir(parents=True, exist_ok=True)
    guard = protection()
    prefix = []
    if guard.pid_namespace:
        python = [sys.executable, sys.prefix, *sys.path, *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
        needed = [Path(os.path.realpath(p)) for p in (scratch, *writable, *readable, command[0], *python) if p]
        under_tmp = any(p == Path("/tmp") or Path("/tmp") in p.parents for p in needed)
        prefix = [*_unshare_prefix(), sys.executable, "-m", "hiera_core.sandbox",
                  *([] if under_tmp else ["--private-tmp"]), *[str(p) for p in (scratch, *writable)], "--"]
    cgroup = Cgroup(guard.cgroup, memory_bytes) if guard.cgroup else None
    limit = memory_bytes if cgroup is None else None

    def in_child() -> None:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with hiera
        if cgroup is not None:
            cgroup.enter()
        if limit:
            resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))

    try:
        process = subprocess.Popen(
            [*prefix, *command], cwd=scratch, env=candidate_environment(scratch, env_extra),
            start_new_session=True, preexec_fn=in_child, **popen,
        )
    except BaseException:
        if cgroup is not None:
            cgroup.destroy()
        raise
    return Sandboxed(process=process, cgroup=cgroup)


@attrs.frozen(kw_only=True)
class IsolatedResult:
    returncode: int | None
    """The exit status; negative for a signal (as subprocess reports it); None when killed on time-out."""
    stdout: str
    stderr: str
    timed_out: bool


def run_sandboxed(
    command: Sequence[str], *, cwd: Path, timeout_s: float, stdin: str = "", writable: Sequence[Path] = (),
    readable: Sequence[Path] = (), env_extra: dict[str, str] | None = None,
) -> IsolatedResult:
    """Run `command` (a compiler, a profiler) in a sandbox where `cwd` and `writable` can be written (and
    `readable` must be seen); kill everything in it on time-out."""
    box = start(command, scratch=cwd, writable=writable, readable=readable, env_extra=env_extra, stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = box.process.communicate(stdin, timeout=timeout_s)
        return IsolatedResult(returncode=box.process.returncode, stdout=stdout, stderr=stderr, timed_out=False)
    except subprocess.TimeoutExpired:
        box.kill()
        stdout, stderr = box.process.communicate()
        return IsolatedResult(returncode=None, stdout=stdout, stderr=stderr, timed_out=True)
    finally:
        box.kill()


# --- the judge's side: starting the runner -------------------------------------------------------


def runner_command(command: Sequence[str]) -> list[str]:
    """`command` without capabilities and with no_new_privs (where setpriv exists)."""
    return [*SETPRIV, *command] if shutil.which("setpriv") else list(command)


def make_undumpable() -> None:
    """The judge: no process without CAP_SYS_PTRACE may read its memory, environment or descriptors."""
    ctypes.CDLL(None, use_errno=True).prctl(4, 0)  # PR_SET_DUMPABLE 0


# --- inside the new namespaces, before the command: the mounts -----------------------------------

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME = 1024, 2048, 4096, 16384, 1 << 18, 1 << 21
_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
          "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME}


def _mount(libc, source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> int:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
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
    inside = lambda point: any(point == k or point.startswith(k.rstrip("/") + "/") for k in keep)  # noqa: E731
    for point, flags in _mounts():
        if inside(point) or point == "/proc":  # the namespace's own /proc; the CUDA driver fails where it is read-only
            continue
        err = _mount(libc, None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
        if err and point == "/":
            raise OSError(err, f"making / read-only: {os.strerror(err)}")


def main(argv: list[str]) -> None:
    split = argv.index("--")
    paths = [a for a in argv[:split] if a != "--private-tmp"]
    try:
        enter(paths, private_tmp="--private-tmp" in argv[:split])
    except OSError as exc:
        print(f"hiera sandbox: {exc.strerror}", file=sys.stderr, flush=True)
        sys.exit(SANDBOX_FAILED)
    os.chdir(os.getcwd())  # the working directory, looked up again: on the writable bind mount, not the old one
    try:
        os.execvp(argv[split + 1], argv[split + 1:])
    except OSError as exc:
        print(f"hiera sandbox: cannot run {argv[split + 1]}: {exc.strerror}", file=sys.stderr, flush=True)
        sys.exit(SANDBOX_FAILED)


if __name__ == "__main__":
    main(sys.argv[1:])
