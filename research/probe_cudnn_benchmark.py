"""Does cuDNN's algorithm search pay on a task? Times the task's FP32 `Model`, eager, with
`torch.backends.cudnn.benchmark` off (PyTorch's default, the baseline's setting) and on, TF32 off (median of
20 calls, each after a 256 MiB L2 flush, as the cuda judge times them), and each setting's largest error
against the FP64 `Model` (relative to max(1, max |reference|)). One JSON line per task. Measured before making cuDNN's search an
expert move; docs/kernelbench.md has the H200 figures.

    python3 research/probe_cudnn_benchmark.py --root ~/KernelBench --level 2 --tasks 1,3,7
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

import torch

from hiera_plugins.cuda.judge import timed
from hiera_plugins.cuda.runner import ColdStart
from hiera_workloads.kernelbench.analysis import build_model, load_task_module
from hiera_workloads.kernelbench.workload import KernelBench, KernelBenchConfig


def median_ms(fn, cold_start: ColdStart, calls: int = 20) -> float:
    for _ in range(3):
        fn()
    return sorted(timed(cold_start, fn)[0] for _ in range(calls))[calls // 2]


def probe(path: Path, cold_start: ColdStart) -> dict:
    """Both settings' median time and error for the task at `path`."""
    module = load_task_module(path)
    model = build_model(module, "cpu").cuda()
    reference = copy.deepcopy(model).double()
    torch.manual_seed(1)
    inputs = [x.cuda() if torch.is_tensor(x) else x for x in module.get_inputs()]
    row = {}
    with torch.no_grad():
        want = reference(*[x.double() if torch.is_tensor(x) and x.is_floating_point() else x for x in inputs])
        for benchmark in (False, True):
            torch.backends.cudnn.benchmark = benchmark
            error = (model(*inputs).double() - want).abs().max() / want.abs().max().clamp_min(1)
            row[f"benchmark_{benchmark}"] = {"ms": median_ms(lambda: model(*inputs), cold_start), "error": error.item()}
    torch.backends.cudnn.benchmark = False
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", required=True)
    parser.add_argument("--level", type=int, required=True)
    parser.add_argument("--tasks", required=True, help="ids, names or ranges, as the workload takes them")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    cold_start = ColdStart()
    workload = KernelBench(KernelBenchConfig(root=args.root, level=args.level, tasks=args.tasks))
    for task in workload.tasks():
        row = probe(Path(task.params["path"]), cold_start)
        print(json.dumps({"level": args.level, "task": task.name, **row}), flush=True)
        torch.cuda.empty_cache()  # the task's tensors went with `probe`


if __name__ == "__main__":
    main()
