"""Where does a candidate's build time go? (a benchmark, not a test; needs nvcc, not a GPU)

    python3 research/bench_build.py [--times 3] [--out bench-build] [--json OUT.json]

The question behind it (issue 18): a stencil2d candidate's build takes ~20 s of a ~45 s round on the H200, and the
binding is already compiled once per task. This renders the stencil2d template's ring kernel (the H200 runs'
winner), builds it once with hiera's own build (a fresh build cache under --out) to learn the exact nvcc command,
then times that command, one build at a time, `--times` times each, on:

- the candidate as written: its kernel, and the host function the binding calls, with the ATen and c10 headers
  that function needs (at::Tensor, at::empty_like, the CUDA guard and stream);
- the same command with the host side compiled at -O1 instead of -O3;
- the kernel and its launcher alone (raw pointers and a stream: the ATen headers, the argument checks and the
  at::Tensor entry point taken out; the CUDA runtime's header only).

The difference between the first and the last is what the ATen headers cost every candidate's build (nvcc parses
them twice: cudafe++ for the host side and cicc for the device side); a contract whose at::Tensor entry point were
frozen and compiled once per task, as the binding is, would leave the candidate the last build's time.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_placement import built_library  # this folder is on the path of a script run from it

from hiera_core import api


def kernel_only(source: str) -> str:
    """The ring kernel's source without ATen: its includes, the argument checks and the at::Tensor entry point
    removed, the launcher's TORCH_CHECK and C10 checks dropped."""
    source = re.sub(r"#include <(ATen|c10)/[^>]+>\n", "", source)
    source = re.sub(r"void check_arguments\(.*?\n}\n", "", source, flags=re.S)
    source = re.sub(r"at::Tensor \w+\(at::Tensor.*", "", source, flags=re.S)
    source = re.sub(r"\s*TORCH_CHECK\(.*?\);", "", source, flags=re.S)
    source = re.sub(r"C10_CUDA_CHECK\((.*)\);", r"\1;", source)
    source = source.replace("    C10_CUDA_KERNEL_LAUNCH_CHECK();\n", "")
    if re.search(r"\b(at|c10|torch)::|TORCH_|C10_", source):
        raise SystemExit("bench_build: the template's source changed; kernel_only() no longer strips all of ATen")
    return "#include <cuda_runtime.h>\n#include <cstdint>\n" + source


def nvcc_command(build_log: str) -> list[str]:
    """The nvcc command of a build log's first step, without its dependency file, input and output."""
    line = next(line for line in build_log.splitlines() if "nvcc" in line and " -c " in line)
    words = shlex.split(line.split("] ", 1)[1])
    kept, skip = [], 0
    for i, word in enumerate(words):
        if skip:
            skip -= 1
        elif word in ("-MF", "-c", "-o"):
            skip = 1
        elif word != "-MD":
            kept.append(word)
    return kept


def seconds(command: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench_build: {' '.join(command[-4:])} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--times", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench-build"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    out = args.out.resolve()
    config = api.settings(workload="stencil2d", arch="cuda", sets=[f'arch.cuda.cache_dir="{out / "cache"}"'])
    session = api.session(config, device=False)
    library = built_library(None, config, session, out / "built", "bench_build")
    if library is None:
        return 1
    build_dir = Path(library).parent
    [log] = (out / "built").glob("*/build.log")
    command = nvcc_command(log.read_text())
    full = out / "candidate.cu"
    full.write_text((build_dir / "cuda_source.cu").read_text())
    bare = out / "kernel_only.cu"
    bare.write_text(kernel_only(full.read_text()))
    variants = {
        "the candidate as written": [*command, "-c", str(full), "-o", str(out / "full.o")],
        "the same, host side at -O1": [*command, "-Xcompiler", "-O1", "-c", str(full), "-o", str(out / "o1.o")],
        "the kernel and its launcher alone": [*command, "-c", str(bare), "-o", str(out / "bare.o")],
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.times):
        for name, cmd in variants.items():
            times[name].append(seconds(cmd))
    print(f"nvcc {' '.join(w for w in command if w.startswith('-gencode') or w.startswith('-O'))}, {args.times} builds each, one at a time:")
    for name, series in times.items():
        print(f"  {name:36} median {statistics.median(series):6.2f} s  ({', '.join(f'{t:.2f}' for t in series)})")
    if args.json:
        args.json.write_text(json.dumps({"command": command, "seconds": times}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
