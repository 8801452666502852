"""Building a cuda candidate as a PyTorch extension, in its own process, into a content-addressed cache.

The parent side (`build_candidate`) decides the cache key and runs `python -m hiera_plugins.cuda.build`
in an isolated process; that side calls `torch.utils.cpp_extension.load` with `-Xptxas -v`, so the
record gets each kernel's registers, shared memory and spills. An identical candidate (same source,
contract and toolchain) is a cache hit and never recompiles.

The contract's binding (`torch/extension.h` and pybind11: the slowest file to compile) is the same for every
candidate of a task: every candidate's extension has one module name per binding and toolchain
(`module_name`), the first build compiles the binding beside the candidate's source and leaves its object in the
cache (`binding-<key>/`), and every later build compiles only the candidate's source and links that object.

Before anything compiles, the build process lists the candidate's includes with the compile's own nvcc command
(`check_includes`) and stops where one reaches a file the candidate must not read; the build runs with every folder
outside the system's, Python's, the toolchain's and its own hidden, within memory, file-size and log limits
(docs/security.md, "The compiler's sandbox").
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, cast

import attrs

import hiera_core
from hiera_core import EvalJob
from hiera_core.records import content_id
from hiera_judge import judging
from hiera_judge.sandbox import (
    COMPILER_FILE_BYTES,
    COMPILER_LOG_BYTES,
    LISTING_MEMORY_BYTES,
    SANDBOX_FAILED,
    STOP_POLL_S,
    dependency_problem,
    describe_exit,
    folder_bytes,
    include_flag_folders,
    library_problem,
    literal_include_problem,
    located_outside,
    run_limited,
    run_sandboxed,
    search_folders,
)

BUILD_MEMORY_BYTES = 16 << 30
"""The build's sandbox (cgroup) and each of its processes (RLIMIT_DATA): nvcc's cicc peaks at ~3 GB on torch's headers."""
LIBRARY_BYTES = 256 << 20
"""The largest extension a build may leave (a single-architecture one is tens of MiB); four times this, the folder."""
INCLUDES = "includes.json"
"""What the build process leaves in the build folder about the include check: the allowed folders, the verdict."""
LISTING_TIMEOUT_S = 120.0
"""nvcc's listing of the includes (every pass preprocesses torch's headers: ~5 s each on 2 cores)."""
BUILD_JOBS = 2
"""Compilers of one build at once (ninja's MAX_JOBS: the binding's source and the candidate's)."""


@functools.cache
def build_places(cores: int) -> threading.BoundedSemaphore:
    """Builds at once in this process, across its runs: one per `BUILD_JOBS` of its `cores`. A round of a KernelBench
    suite of 4 runs on an H100 machine (16 cores, 2026-12-07) started its 24 builds at once; sharing the cores, they
    all ended ~145 s later, and the GPU waited that long for its first candidate. A few at a time, the first ones end
    in about one build's time and the GPU starts then; the round's builds take as long as before. Two at least: a
    build's serial steps (the include listing, the link) leave cores to another."""
    return threading.BoundedSemaphore(max(2, cores // BUILD_JOBS))


@contextlib.contextmanager
def build_place():
    """A place among `build_places` (the cores left beside the timing ones); `Interrupted` once the run is stopping."""
    places = build_places(judging.cores_beside_timing())
    while not places.acquire(timeout=STOP_POLL_S):
        if judging.stopping():
            raise judging.Interrupted()
    try:
        yield
    finally:
        places.release()


@attrs.frozen(kw_only=True)
class BuildResult:
    library: Path | None
    """The built extension module, or None when the build failed."""
    log: str
    seconds: float
    cache_hit: bool
    resources: dict[str, dict[str, int]] = attrs.field(factory=dict)
    """Per kernel: registers, shared_bytes, stack_bytes, spill_store_bytes, spill_load_bytes."""
    rejected: str | None = None
    """Why the source was never compiled: an include reaching a file it must not read (`check_includes`)."""


def cache_key(job: EvalJob) -> str:
    files = [f"{name}\n{text}" for name, text in sorted(job.contract.files.items())]
    return content_id(job.candidate.source, *files, json.dumps(job.toolchain, sort_keys=True))


def binding_key(job: EvalJob) -> str:
    """What the compiled binding depends on: its text and the toolchain."""
    binding = job.contract.files.get(job.contract.binding or "", "")
    return content_id(binding, json.dumps(job.toolchain, sort_keys=True))


def module_name(job: EvalJob) -> str:
    """The extension's module name, the same for every candidate sharing a binding (its object defines
    `PyInit_<name>`); each candidate is loaded in a process of its own, from its own folder."""
    return f"hiera_{binding_key(job)}"


def binding_object(job: EvalJob) -> Path | None:
    """Where the compiled binding of `job`'s contract is kept once built (None without a binding)."""
    if not job.contract.binding:
        return None
    return Path(job.toolchain["cache_dir"]) / f"binding-{binding_key(job)}" / (Path(job.contract.binding).stem + ".o")


def build_candidate(job: EvalJob, *, timeout_s: float) -> BuildResult:
    key = cache_key(job)
    build_dir = Path(job.toolchain["cache_dir"]) / key
    build_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with open(build_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two workers building the same candidate build it once
        done = build_dir / "build.json"
        if done.is_file():
            record = json.loads(done.read_text())
            cached = Path(record["library"]) if record["library"] else None
            if cached is None or library_problem(cached, max_bytes=LIBRARY_BYTES) is None:
                return BuildResult(
                    library=cached,
                    log=record["log"],
                    seconds=time.perf_counter() - started,
                    cache_hit=True,
                    resources=record["resources"],
                    rejected=record.get("rejected"),
                )
            _remove(cached)  # no longer the library it built (a link, a folder, gone): built again
        (build_dir / job.contract.source_filename).write_text(job.candidate.source)
        for name, text in job.contract.files.items():
            (build_dir / name).write_text(text)
        (build_dir / INCLUDES).unlink(missing_ok=True)
        shared = binding_object(job)
        linked = shared is not None and shared.is_file()
        compiled = [job.contract.binding] if job.contract.binding and not linked else []
        request = {
            "name": module_name(job),
            "build_dir": str(build_dir),
            "sources": [str(build_dir / name) for name in compiled] + [str(build_dir / job.contract.source_filename)],
            "candidate": str(build_dir / job.contract.source_filename),
            "cuda_cflags": [*job.toolchain["cuda_cflags"], "-Xptxas", "-v"],
            "include_paths": job.toolchain.get("include_paths", []),
            "ldflags": [str(shared)] if linked else [],
        }
        env = {
            "CUDA_HOME": job.toolchain["cuda_home"],
            "TORCH_CUDA_ARCH_LIST": job.toolchain["arch_list"],
            "MAX_JOBS": str(BUILD_JOBS),
        }
        seen = [
            Path(__file__).parents[1],  # this module's packages, which it imports in the sandbox
            Path(hiera_core.__file__).parent,
            Path(job.toolchain["cuda_home"]),
            *map(Path, request["include_paths"]),
            *([cast(Path, shared).parent] if linked else []),  # linked: shared is a file
        ]
        waiting = time.perf_counter()
        with build_place():
            waited = time.perf_counter() - waiting
            result = run_sandboxed(
                [sys.executable, "-m", "hiera_plugins.cuda.build"],
                cwd=build_dir,
                timeout_s=timeout_s,
                stdin=json.dumps(request),
                env_extra=env,
                readable=seen,
                memory_bytes=BUILD_MEMORY_BYTES,
                file_bytes=COMPILER_FILE_BYTES,
                log_bytes=COMPILER_LOG_BYTES,
                hide_outside=True,
                stop=judging.stopping,
            )
        if result.stopped:  # the run is stopping: nothing is kept, a resumed run builds it again
            raise judging.Interrupted()
        includes = json.loads((build_dir / INCLUDES).read_text()) if (build_dir / INCLUDES).is_file() else {}
        if includes.get("error") or (result.returncode == SANDBOX_FAILED and "hiera sandbox:" in result.stderr):
            raise RuntimeError(includes.get("error") or result.stderr.strip().splitlines()[-1])  # hiera's, not the candidate's
        log = result.stdout + result.stderr
        if includes.get("allowed"):  # the compiler ran: what it quoted from outside its reach stays out of the log
            log = located_outside(log, base=build_dir, allowed=includes["allowed"])
        if result.timed_out:
            log += f"\nthe build was killed after {timeout_s:.0f} s"
        elif result.returncode != 0 and "error" not in log.lower():
            log += f"\nthe build process ended with {describe_exit(cast(int, result.returncode))}"  # None only when timed out
        library = None
        if result.returncode == 0 and not includes.get("rejected"):
            library = next(build_dir.glob(f"{module_name(job)}*.so"), build_dir / f"{module_name(job)}.so")
            problem = library_problem(library, max_bytes=LIBRARY_BYTES)
            if problem is None and folder_bytes(build_dir) > 4 * LIBRARY_BYTES:
                problem = f"the build left more than {4 * LIBRARY_BYTES >> 20} MiB in its folder"
            if problem:
                log += f"\nerror: {problem}"
                library = None
        if library is not None and compiled:
            _keep(build_dir / cast(Path, shared).name, cast(Path, shared))  # compiled: there is a binding, and its object
        record = {
            "library": str(library) if library else None,
            "log": log,
            "resources": parse_ptxas(log),
            "rejected": includes.get("rejected"),
        }
        if not result.timed_out and result.returncode != SANDBOX_FAILED:  # the machine's fault: try again next time
            done.write_text(json.dumps(record))
        return BuildResult(
            library=library,
            log=log,
            seconds=time.perf_counter() - started - waited,
            cache_hit=False,
            resources=record["resources"],
            rejected=record["rejected"],
        )


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _keep(built: Path, shared: Path) -> None:
    """The binding's object from a build, into the cache for the builds after it (whole or not at all)."""
    if shared.is_file() or not built.is_file():
        return
    shared.parent.mkdir(parents=True, exist_ok=True)
    partial = shared.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    shutil.copyfile(built, partial)
    os.replace(partial, shared)


def compiler_errors(log: str, limit: int = 4000) -> str:
    """The lines of a build log a person (or the next prompt) needs: errors with a little context."""
    lines = log.splitlines()
    keep = [i for i, line in enumerate(lines) if re.search(r"\berror\b|undefined reference|fatal", line, re.I)]
    if not keep:
        return log[-limit:]
    picked = sorted({j for i in keep for j in range(i, min(i + 3, len(lines)))})
    return "\n".join(lines[j] for j in picked)[:limit]


def parse_ptxas(log: str) -> dict[str, dict[str, int]]:
    """Per-kernel resources from `ptxas info` lines (registers, shared memory, stack, spills)."""
    kernels: dict[str, dict[str, int]] = {}
    current = None
    for line in log.splitlines():
        if m := re.search(r"(?:Compiling entry function|Function properties for) '?([\w$]+)'?", line):
            current = _demangle(m.group(1))
            kernels.setdefault(current, {})
        elif current and (m := re.search(r"Used (\d+) registers", line)):
            kernels[current]["registers"] = int(m.group(1))
            if s := re.search(r"(\d+) bytes smem", line):
                kernels[current]["shared_bytes"] = int(s.group(1))
        elif current and (m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)):
            kernels[current].update(
                stack_bytes=int(m.group(1)), spill_store_bytes=int(m.group(2)), spill_load_bytes=int(m.group(3))
            )
    return {name: values for name, values in kernels.items() if values}


def _demangle(symbol: str) -> str:
    try:
        out = subprocess.run(["c++filt", symbol], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return symbol
    return out.split("(")[0] or symbol


def check_includes(build_dir: Path, request: dict[str, Any]) -> dict[str, Any]:
    """Inside the build's sandbox, once cpp_extension has written build.ninja and before it compiles: list the
    candidate's includes with the very nvcc command that will compile it (`ninja -t commands`), `-M` in place of
    `-c`. nvcc -M preprocesses every pass the compile runs (each `-gencode` device pass with its __CUDA_ARCH__, and
    the host pass) and merges their dependencies, so an include behind `#ifdef __CUDA_ARCH__` is listed too; the host
    compiler alone on the .cu would miss it, and would lack nvcc's own defines and include folders. The allowed
    folders: the build's own, the command's -I/-isystem folders (torch's, Python's, the toolchain's extra ones),
    CUDA_HOME and the host compiler's own. What it finds, with those folders, goes to `INCLUDES` for hiera."""
    source = request["candidate"]
    commands = subprocess.run(
        ["ninja", "-t", "commands"], cwd=build_dir, capture_output=True, text=True, timeout=60, check=True
    ).stdout.splitlines()
    command = next(
        words
        for words in map(shlex.split, commands)
        if "-c" in words and any(os.path.realpath(w) == os.path.realpath(source) for w in words)
    )
    argv, listing = [], build_dir / "includes.d"
    words = iter(command)
    for word in words:
        if word in ("-o", "--dependency-output", "-MF"):
            next(words, None)
        elif word not in ("-c", "--generate-dependencies-with-compile", "-MD", "-MMD"):  # -MMD would leave system headers out
            argv.append(word)
    host = [os.environ.get("CXX", "c++")]
    allowed = sorted(
        {
            os.path.realpath(build_dir),
            os.path.realpath(os.environ.get("CUDA_HOME", "/nonexistent")),
            *include_flag_folders(argv),
            *search_folders(tuple(host), "c++"),
        }
    )
    never = "; the source was not compiled"
    found: dict[str, Any] = {"allowed": allowed, "rejected": None}
    if problem := literal_include_problem(Path(source).read_text(), base=build_dir, allowed=allowed):
        return {**found, "rejected": problem + never}
    listing.unlink(missing_ok=True)
    done = run_limited(
        [*argv, "-M", "-MF", str(listing)],
        cwd=build_dir,
        timeout_s=LISTING_TIMEOUT_S,
        memory_bytes=LISTING_MEMORY_BYTES,
        file_bytes=COMPILER_FILE_BYTES,
    )
    if done.timed_out or (done.returncode or 0) < 0 or "out of memory" in done.stderr:
        why = f"did not end within {LISTING_TIMEOUT_S:.0f} s" if done.timed_out else "ran out of its memory or was killed"
        return {
            **found,
            "rejected": f"nvcc's listing of its includes {why}: an include of an endless file (a device, a FIFO, /proc){never}",
        }
    if done.returncode != 0:
        return {**found, "failed": located_outside(done.stdout + done.stderr, base=build_dir, allowed=allowed)}
    if problem := dependency_problem(listing.read_text(errors="replace"), base=build_dir, allowed=allowed):
        return {**found, "rejected": problem + never}
    return found


def main() -> None:
    """The isolated build process: read the request on stdin, check the includes, build; exit non-zero on failure."""
    request: dict[str, Any] = json.loads(sys.stdin.read())
    from torch.utils import cpp_extension

    build_dir = Path(request["build_dir"])
    compile_objects = getattr(cpp_extension, "_run_ninja_build", None)  # between writing build.ninja and compiling
    if compile_objects is None:
        (build_dir / INCLUDES).write_text(
            json.dumps({"error": "this torch's cpp_extension has no _run_ninja_build: the include check cannot run"})
        )
        sys.exit(SANDBOX_FAILED)

    def checked(build_directory, verbose, error_prefix):
        try:
            found = check_includes(build_dir, request)
        except Exception as exc:  # noqa: BLE001 -- hiera's own fault, never the candidate's
            found = {"error": f"the include check failed: {type(exc).__name__}: {exc}"}
        (build_dir / INCLUDES).write_text(json.dumps(found))
        if found.get("error"):
            sys.exit(SANDBOX_FAILED)
        if found.get("failed") is not None:
            print(found["failed"], file=sys.stderr)
        if found.get("rejected") or found.get("failed") is not None:
            sys.exit(1)
        return compile_objects(build_directory, verbose, error_prefix)

    cpp_extension._run_ninja_build = checked
    try:
        cpp_extension.load(
            name=request["name"],
            sources=request["sources"],
            extra_cflags=["-O3"],
            extra_cuda_cflags=request["cuda_cflags"],
            extra_include_paths=request["include_paths"],
            extra_ldflags=request["ldflags"],
            build_directory=request["build_dir"],
            verbose=True,
        )
    except Exception as exc:  # noqa: BLE001 -- the compiler's diagnostics are in the message
        print(str(exc), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
