"""Compile check of KernelBench contracts and candidates, no GPU needed: for each selected task, build its seed
(the ATen translation) and, where the forward has a pointwise chain, the expert's fused candidate (and the
pure-CUDA candidate where the chain is the whole forward); a task
without a seed gets a trivial candidate (the declared function, raising), so every contract is checked.
Builds go exactly as the cuda evaluator's (isolated process, content-addressed cache). Prints one line per
build and a summary; exit code 1 if any build failed. With --write DIR, each source also goes to
DIR/<level>--<task>--<kind>.cu, to be timed on a GPU with `hiera eval` (docs/kernelbench.md).

    python scripts/build_kernelbench.py --root ~/KernelBench --level 2 --tasks 1-20 --workers 2 [--write DIR]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hiera_core import EvalJob
from hiera_core.records import Candidate
from hiera_plugins.cuda.architecture import CudaArchitecture, CudaConfig
from hiera_plugins.cuda.build import build_candidate, compiler_errors
from hiera_workloads.kernelbench.contract import declaration
from hiera_workloads.kernelbench.workload import KernelBench, KernelBenchConfig


def trivial_candidate(analysis) -> str:
    """The contract's function with a body that only raises: what the binding must link against."""
    return (
        "#include <torch/extension.h>\n\n"
        f"{declaration(analysis)[:-1]} {{\n"
        '    TORCH_CHECK(false, "the trivial candidate of the compile check");\n'
        "    return {};\n}\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--level", type=int, default=1)
    parser.add_argument("--tasks", default="")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "hiera" / "cuda-builds"))
    parser.add_argument("--write", default="", help="also write each source to DIR/<level>--<task>--<kind>.cu")
    args = parser.parse_args()

    workload = KernelBench(KernelBenchConfig(root=args.root, level=args.level, tasks=args.tasks))
    arch = CudaArchitecture(CudaConfig(cache_dir=args.cache_dir))
    toolchain = arch.toolchain()
    scratch = Path(tempfile.mkdtemp(prefix="hiera-kb-build-"))
    jobs = []
    for label, reason in workload.failures().items():
        print(f"{label}: no contract: {reason}", flush=True)
    for task in workload.tasks():
        templates = workload.templates(task, "cuda")
        if templates:
            sources = {"seed": templates[0].render({"fuse_pointwise": False})}
            fused = templates[0].render({"fuse_pointwise": True})
            if fused != sources["seed"]:
                sources["fused"] = fused
            kernel = templates[0].render({"pointwise_kernel": True})
            if kernel != sources["seed"]:
                sources["pure CUDA"] = kernel
        else:
            sources = {"trivial": trivial_candidate(workload.analysis(task))}
        contract = workload.contract(task, "cuda")
        for kind, source in sources.items():
            if args.write:
                Path(args.write).mkdir(parents=True, exist_ok=True)
                (Path(args.write) / f"{args.level}--{task.name}--{kind.replace(' ', '-')}.cu").write_text(source)
            candidate = Candidate(id=f"{task.name}-{kind}", source=source, space="libraries_pytorch", round=0)
            jobs.append(
                (
                    task.name,
                    kind,
                    len(re.findall(r"__global__ void pointwise_kernel_", source)),
                    EvalJob(
                        candidate=candidate,
                        task=task,
                        contract=contract,
                        arch="cuda",
                        space_rank=2,
                        workdir=scratch / candidate.id,
                        workload_factory="",
                        workload_config={},
                        toolchain=toolchain,
                    ),
                )
            )

    def build(item):
        name, kind, chains, job = item
        started = time.perf_counter()
        result = build_candidate(job, timeout_s=900)
        return name, kind, chains, result, time.perf_counter() - started

    failures = 0
    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        for name, kind, chains, result, seconds in pool.map(build, jobs):
            what = f"{kind}" + (f" ({chains} fused chain{'s' if chains != 1 else ''})" if kind == "fused" else "")
            if result.library is None:
                failures += 1
                error = compiler_errors(result.log, limit=300).replace("\n", " | ")
                print(f"{name}: {what}: FAILED after {seconds:.0f} s: {error}", flush=True)
            else:
                print(f"{name}: {what}: built in {seconds:.0f} s{' (cache)' if result.cache_hit else ''}", flush=True)
    print(f"{len(jobs)} builds, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
