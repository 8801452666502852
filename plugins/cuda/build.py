"""Building a cuda candidate as a PyTorch extension, in its own process, into a content-addressed cache.

The parent side (`build_candidate`) decides the cache key and runs `python -m hiera_plugins.cuda.build`
in an isolated process; that side calls `torch.utils.cpp_extension.load` with `-Xptxas -v`, so the
record gets each kernel's registers, shared memory and spills. An identical candidate (same source,
contract and toolchain) is a cache hit and never recompiles.

The contract's binding (`torch/extension.h` and pybind11: the slowest file to compile) is the same for every
candidate of a task: every candidate's extension has one module name per binding and toolchain
(`module_name`), the first build compiles the binding beside the candidate's source and leaves its object in the
cache (`binding-<key>/`), and every later build compiles only the candidate's source and links that object.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import attrs

from hiera_core import EvalJob
from hiera_core.sandbox import SANDBOX_FAILED, describe_exit, run_sandboxed
from hiera_core.records import content_id

@attrs.frozen(kw_only=True)
class BuildResult:
    library: Path | None
    """The built extension module, or None when the build failed."""
    log: str
    seconds: float
    cache_hit: bool
    resources: dict[str, dict[str, int]] = attrs.field(factory=dict)
    """Per kernel: registers, shared_bytes, stack_bytes, spill_store_bytes, spill_load_bytes."""


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
            if record["library"] is None or Path(record["library"]).is_file():
                return BuildResult(
                    library=Path(record["library"]) if record["library"] else None,
                    log=record["log"],
                    seconds=time.perf_counter() - started,
                    cache_hit=True,
                    resources=record["resources"],
                )
        (build_dir / job.contract.source_filename).write_text(job.candidate.source)
        for name, text in job.contract.files.items():
            (build_dir / name).write_text(text)
        shared = binding_object(job)
        linked = shared is not None and shared.is_file()
        compiled = [job.contract.binding] if job.contract.binding and not linked else []
        request = {
            "name": module_name(job),
            "build_dir": str(build_dir),
            "sources": [str(build_dir / name) for name in compiled] + [str(build_dir / job.contract.source_filename)],
            "cuda_cflags": [*job.toolchain["cuda_cflags"], "-Xptxas", "-v"],
            "include_paths": job.toolchain.get("include_paths", []),
            "ldflags": [str(shared)] if linked else [],
        }
        env = {"CUDA_HOME": job.toolchain["cuda_home"], "TORCH_CUDA_ARCH_LIST": job.toolchain["arch_list"], "MAX_JOBS": "2"}
        result = run_sandboxed(
            [sys.executable, "-m", "hiera_plugins.cuda.build"], cwd=build_dir, timeout_s=timeout_s,
            stdin=json.dumps(request), env_extra=env,
        )
        log = result.stdout + result.stderr
        if result.timed_out:
            log += f"\nthe build was killed after {timeout_s:.0f} s"
        elif result.returncode != 0 and "error" not in log.lower():
            log += f"\nthe build process ended with {describe_exit(result.returncode)}"
        library = None
        if result.returncode == 0:
            library = next(build_dir.glob(f"{module_name(job)}*.so"), None)
        if library is not None and compiled:
            _keep(build_dir / shared.name, shared)
        record = {"library": str(library) if library else None, "log": log, "resources": parse_ptxas(log)}
        if not result.timed_out and result.returncode != SANDBOX_FAILED:  # the machine's fault: try again next time
            done.write_text(json.dumps(record))
        return BuildResult(
            library=library, log=log, seconds=time.perf_counter() - started, cache_hit=False, resources=record["resources"]
        )


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


def main() -> None:
    """The isolated build process: read the request on stdin, build, exit non-zero on failure."""
    request: dict[str, Any] = json.loads(sys.stdin.read())
    from torch.utils.cpp_extension import load

    try:
        load(
            name=request["name"],
            sources=request["sources"],
            extra_cflags=["-O3"],
            extra_cuda_cflags=request["cuda_cflags"],
            extra_include_paths=request["include_paths"],
            extra_ldflags=request["ldflags"],
            build_directory=request["build_dir"],
            verbose=True,
        )
    except Exception as exc:  # the compiler's diagnostics are in the message
        print(str(exc), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
