"""Why does a KernelBench reference read slower than its own ATen translation on a task of gigabytes?

The gigabytes GPU test (an RMSNorm over a 3.9 GiB input, shaped as level 1's task 36) read the reference at 8.680 ms
and its seed, which makes the very same ATen calls, at 8.083 ms (1.074×) on an H100, 2026-12-07, where the test allows
1.05. The cuda judge times the reference in its own process (`judge_batch`: one untimed call, an L2 flush, the calls
back to back by `perf_counter`, less the same loop with no call) always right after the batch's FP64 check, and the
seed in the runner. This probe times, in one process, the reference's forward and the seed's form of it (every
intermediate alive until the end, as the C++ `auto` locals are) by `judge_batch`'s rule, each after nothing and after
an FP64 computation of the task's size like the check's, in alternation, so that the orders that differ show.

H100, 2026-12-07 (docs/results/kernelbench-model-2026-12-05/README.md): the two forms read the same in every state, and
the same calls read 7.94 ms after an FP64 check and 8.91 ms after nothing or `empty_cache` (the allocator's state).
So each variant now runs twice, in a process of its own: with PyTorch's default allocator (the runner's) and with the
cuda judge's (`plugins.cuda.judge.JUDGE_ALLOCATOR`, no split of a cached block over 1 GiB), which is how the judge
times a large task's reference, after an `empty_cache`.

Run on a GPU: python3 research/probe_reference_gap.py [BATCH]   (BATCH: the input's first dimension, 63 on an H100)
Prints, for each allocator, one row per variant: median ms of 9 and the spread, with the variant's name."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

import torch


def reference(x: torch.Tensor) -> torch.Tensor:  # the test's forward, as the judge calls it
    return x / torch.sqrt(torch.mean(x**2, dim=1, keepdim=True) + 1e-5)


def seed_form(x: torch.Tensor) -> torch.Tensor:  # the seed's calls, every intermediate alive until the return
    v1 = torch.pow(x, 2)
    v2 = torch.mean(v1, [1], True)
    v3 = v2 + 1e-05
    v4 = torch.sqrt(v3)
    v5 = x / v4
    return v5.contiguous()


def timed(function, x: torch.Tensor, flush: torch.Tensor) -> float:
    """`judge_batch`'s rule for one place: an untimed call, an L2 flush, the call, less the empty loop."""
    function(x)

    def run(call) -> float:
        flush.zero_()
        torch.cuda.synchronize()
        started = time.perf_counter()
        call(x)
        torch.cuda.synchronize()
        return (time.perf_counter() - started) * 1e3

    return max(0.0, run(function) - run(lambda a: None))


def fp64_check(x: torch.Tensor) -> None:
    """What a check computes before the judge times the reference: the forward in FP64 on the same input."""
    reference(x.double())
    torch.cuda.synchronize()


def main() -> None:
    if os.environ.get("HIERA_PROBE_ALLOCATOR") is None:  # this process: one child per allocator, one after the other
        from plugins.cuda.judge import JUDGE_ALLOCATOR

        for conf in ("", JUDGE_ALLOCATOR):
            print(f"== allocator: {conf or 'default (the runner)'}", flush=True)
            env = {k: v for k, v in os.environ.items() if k != "PYTORCH_CUDA_ALLOC_CONF"} | {"HIERA_PROBE_ALLOCATOR": conf}
            env |= {"PYTORCH_CUDA_ALLOC_CONF": conf} if conf else {}
            subprocess.run([sys.executable, __file__, *sys.argv[1:]], env=env, check=False)
        return
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 63
    torch.manual_seed(0)
    with torch.no_grad():
        x = torch.rand(batch, 64, 512, 512, device="cuda")
        flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
        print(f"{torch.cuda.get_device_name()}: input {x.numel() * 4 / 2**30:.2f} GiB")
        figures: dict[str, list[float]] = {}
        for _ in range(9):
            for name, function in (("reference", reference), ("seed form", seed_form)):
                figures.setdefault(f"{name}, after nothing", []).append(timed(function, x, flush))
                fp64_check(x)
                figures.setdefault(f"{name}, after an FP64 check", []).append(timed(function, x, flush))
                torch.cuda.empty_cache()
                figures.setdefault(f"{name}, after empty_cache", []).append(timed(function, x, flush))
        for name, values in figures.items():
            print(f"{statistics.median(values):9.3f} ms  ({min(values):.3f}-{max(values):.3f})  {name}")


if __name__ == "__main__":
    main()
