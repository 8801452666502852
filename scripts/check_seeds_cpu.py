"""Numerical check of KernelBench seeds without a GPU: each selected task's seed (the ATen translation) is built
for the CPU with its frozen binding (g++, torch's cpp_extension) and called as the harness calls it, on the
task's own inputs, against the reference `Model` in FP64 on the CPU, by the cuda harness's rule (the
workload's tolerance, or within twice eager PyTorch FP32's own error); a forward that draws random numbers
against the FP32 `Model`, both calls from one RNG seed, as the harness checks it. Prints one line per task and
a summary; exit code 1 if any seed is wrong or fails to build.

    python scripts/check_seeds_cpu.py --root ~/KernelBench --level 3 --tasks 4,6,7
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.cpp_extension import load_inline

from hiera_plugins.cuda.judge import max_error
from hiera_workloads.kernelbench.analysis import build_model, load_task_module, state_of
from hiera_workloads.kernelbench.harness import CALL_SEED, PYTORCH_ERROR_FACTOR
from hiera_workloads.kernelbench.workload import KernelBench, KernelBenchConfig

CPU_LIMIT = 1 << 27
"""Elements (the largest input or the output) above which a task is skipped: its FP64 reference would not fit a
small machine's memory (level 3 task 17's output is 1 G elements; the check was killed for memory)."""
INTERMEDIATE_LIMIT = 1 << 28
"""The same for the largest tensor the forward makes on the way (level 3 task 31's attention matrix, 2.1 G
elements, was killed for memory; task 43's, 268 M, fits a 24 GiB machine)."""


def check(w: KernelBench, task, build_dir: Path) -> str:
    source, reason = w.translated_seed(task)
    if source is None:
        return f"no seed ({reason})"
    module = load_task_module(Path(task.params["path"]))
    analysis = w.analysis(task)
    largest = max([math.prod(analysis.output_shape)] + [math.prod(a.shape) for a in analysis.tensor_arguments])
    if largest > CPU_LIMIT or analysis.largest_numel > INTERMEDIATE_LIMIT:
        return f"skipped: too large for a CPU check ({max(largest, analysis.largest_numel)} elements in one tensor)"
    binding = w.contract(task, "cuda").files["cpp_source.cpp"]
    started = time.perf_counter()
    extension = load_inline(
        f"seed_{task.params['level']}_{task.params['id']}",
        cpp_sources=[source + binding],
        build_directory=str(build_dir),
        extra_cflags=["-O1"],
    )
    built = time.perf_counter() - started
    model = build_model(module, "cpu")
    torch.manual_seed(1)
    values = list(module.get_inputs())
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    state = [t.detach() for _, _, t in state_of(model)]
    with torch.no_grad():
        if analysis.random:  # as the harness checks it: against the FP32 model, both calls from one RNG seed
            torch.manual_seed(CALL_SEED)
            got = extension.forward(*tensors, *state)
            torch.manual_seed(CALL_SEED)
            reference = eager = model(*values)
        else:
            got = extension.forward(*tensors, *state)
            reference = model.double()(
                *[v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in values]
            ).double()
            eager = model.float()(*values)
    if tuple(got.shape) != tuple(reference.shape):
        return f"WRONG: output shape {tuple(got.shape)}, expected {tuple(reference.shape)}"
    rtol, atol = task.params["rtol"], task.params["atol"]
    error, first_bad = max_error(got, reference, rtol, atol)
    allowed = PYTORCH_ERROR_FACTOR * max_error(eager, reference, rtol, atol)[0]  # the harness's rule, as on the GPU
    if first_bad == "non-finite" or (first_bad is not None and error > allowed):
        return f"WRONG: max abs error {error:.3g} (eager PyTorch FP32's allows {allowed:.3g}), built in {built:.0f} s"
    within = (
        f" (beyond the tolerance, within {PYTORCH_ERROR_FACTOR:g}x eager PyTorch FP32's own)" if first_bad is not None else ""
    )
    return f"correct{within}: max abs error {error:.3g}, built in {built:.0f} s"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--level", type=int, required=True)
    parser.add_argument("--tasks", default="")
    args = parser.parse_args()
    torch.set_num_threads(2)
    w = KernelBench(KernelBenchConfig(root=args.root, level=args.level, tasks=args.tasks))
    failed = 0
    with tempfile.TemporaryDirectory() as scratch:
        for task in w.tasks():
            build_dir = Path(scratch) / task.name
            build_dir.mkdir()
            try:
                line = check(w, task, build_dir)
            except Exception as exc:  # noqa: BLE001 -- one line per task, the batch goes on
                line = f"FAILED: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"
            failed += line.startswith(("WRONG", "FAILED"))
            print(f"{task.name}: {line}", flush=True)
    print(f"{len(w.tasks())} tasks, {failed} wrong or failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
