"""The judge's harness for stencil2d candidates on a GPU: cases, inputs, the CuPy FP64 reference and the
PyTorch conv2d baseline.

The harness checks candidates against an FP64 reference computed by one CuPy kernel a step that adds each point's
taps in the order of the shifted adds that define it (`reference.reference`), rounding every product and sum on its
own: numpy's bits, independently of PyTorch. CuPy is a dependency of hiera, and a harness without it refuses to
start. The timed baseline is PyTorch's `conv2d` (cuDNN) in FP64.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from hiera_core.records import Task
from hiera_workloads.stencil2d.cuda._contract import ENTRY, TOLERANCE, check_sizes, grid
from hiera_workloads.stencil2d.reference import CHECK_SEEDS, REMEASURE_SEEDS, describe_inputs, draw_weights

DIRECT = r"""
extern "C" __global__ void stencil_direct(const double* __restrict__ x, const double* __restrict__ w,
                                          double* __restrict__ y, long long n, int r) {
    long long at = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (at >= n * n) return;
    long long i = at / n, j = at % n;
    int k = 2 * r + 1;
    double sum = 0.0;
    for (int a = 0; a < k; ++a) {
        long long row = i + a - r;
        for (int b = 0; b < k; ++b) {
            long long col = j + b - r;
            double v = (row >= 0 && row < n && col >= 0 && col < n) ? x[row * n + col] : 0.0;
            sum = __dadd_rn(sum, __dmul_rn(w[a * k + b], v));
        }
    }
    y[at] = sum;
}
"""
"""One step of the reference: each output point sums its taps row by row, as the shifted adds do, with `__dmul_rn`
and `__dadd_rn` so that no FMA contraction changes a bit. On an H100 (2026-12-06,
`research/probe_stencil_reference.py`) it gave the shifted adds' bits in every case (n 5 to 10240, radius 1 to 4, 1
to 3 steps) in 4.45 ms against their 69.9 ms at 10240²: the checks are most of a judge's timing phase."""


def harness(task: Task) -> CudaStencilHarness:
    p = task.params
    return CudaStencilHarness(n=grid(task), radius=p["radius"], steps=p["steps"])


def cases(n: int, remeasure: bool) -> list[dict[str, Any]]:
    """The correctness cases of a task of grid side `n`: the task's size, then the check sizes."""
    task = {"label": f"task n={n}", "n": n, "first_seed_only": True}
    return [task] + [{"label": f"n={s}", "n": s, "first_seed_only": False} for s in check_sizes(n, remeasure)]


def inputs(task: Task) -> str:
    """What the judge feeds a candidate (no GPU needed to say it)."""
    n, p = grid(task), task.params
    return describe_inputs(
        field="field",
        radius=p["radius"],
        steps=p["steps"],
        cases=cases(n, False),
        remeasure_cases=cases(n, True),
        timed=n,
        once="the first seed and distribution only",
    )


class CudaStencilHarness:
    """What the cuda judge and runner need to check and time `stencil2d` candidates of one task (see
    `hiera_plugins.cuda.harness.CudaHarness` for the interface).

    A case is a JSON-able dict: `label`, `n` (the grid side) and `first_seed_only`: the task-size case
    asks for the first seed and the first distribution only, to keep the check fast (the timed calls
    check that size again on fresh inputs); the others use every seed and distribution. The inputs are
    `[field, weights]` on the GPU; `steps` is the task's, the binding's default.
    """

    entry = ENTRY
    dtype = "float64"
    distributions = ("uniform", "spiky")
    tolerance = TOLERANCE

    def __init__(self, *, n: int, radius: int, steps: int) -> None:
        self.n = n
        self.radius = radius
        self.steps = steps
        self.reference_engine = _reference_engine()
        """What computes the FP64 reference: `CuPy <version>`."""

    def correctness_cases(self, remeasure: bool) -> list[dict[str, Any]]:
        return cases(self.n, remeasure)

    def seeds(self, remeasure: bool) -> tuple[int, ...]:
        return REMEASURE_SEEDS if remeasure else CHECK_SEEDS

    def timing_case(self) -> dict[str, Any]:
        return {"label": f"task n={self.n}", "n": self.n, "first_seed_only": True}

    def make_inputs(self, case: Mapping[str, Any], seed: int, distribution: str) -> list[Any]:
        """`field`: uniform in [-1, 1], or spiky: 1% of the points (at least one) at +-[1, 100], the rest 0;
        `weights`: any positive values summing to 1, drawn afresh (the contract's range). Generated on the GPU,
        the same for the same (case, seed, distribution)."""
        import torch

        if distribution not in self.distributions:
            raise ValueError(f"unknown distribution {distribution!r}; known: {', '.join(self.distributions)}")
        n = case["n"]
        state = np.random.SeedSequence([seed, n, self.distributions.index(distribution)]).generate_state(1)[0]
        generator = torch.Generator(device="cuda").manual_seed(int(state))
        options: dict[str, Any] = {"dtype": torch.float64, "device": "cuda"}
        if distribution == "uniform":
            field = torch.rand(n, n, generator=generator, **options) * 2 - 1
        else:
            spikes = max(n * n // 100, 1)
            where = torch.randperm(n * n, generator=generator, device="cuda")[:spikes]
            sign = torch.randint(0, 2, (spikes,), generator=generator, device="cuda").to(torch.float64) * 2 - 1
            field = torch.zeros(n * n, **options)
            field[where] = (torch.rand(spikes, generator=generator, **options) * 99 + 1) * sign
            field = field.view(n, n)
        weights = draw_weights(self.radius, np.random.default_rng(int(state)))
        return [field.contiguous(), torch.from_numpy(weights).to("cuda")]

    def reference(self, case: Mapping[str, Any], inputs: list[Any]) -> Any:
        """The FP64 result of `steps` applications of the stencil, one `DIRECT` kernel (CuPy) a step. Its outputs
        come from PyTorch's allocator, so the judge's memory statistics count them and its cache hands them back
        (`judge.memory_plan`)."""
        import cupy
        import torch

        field, weights = inputs
        n, radius = field.shape[0], weights.shape[0] // 2
        kernel = _direct_kernel()
        with cupy.cuda.Device(field.device.index):
            w = cupy.from_dlpack(weights.detach().contiguous())
            current = field.detach().contiguous()
            for _ in range(self.steps):
                out = torch.empty_like(current)
                kernel(
                    ((n * n + 255) // 256,),
                    (256,),
                    (cupy.from_dlpack(current), w, cupy.from_dlpack(out), cupy.int64(n), cupy.int32(radius)),
                )
                current = out
        return current

    def baseline(self, inputs: list[Any]) -> Any:
        """What users compare against: PyTorch's conv2d (cuDNN) in FP64, applied `steps` times."""
        import torch.nn.functional as F

        field, weights = inputs
        n, k = field.shape[0], weights.shape[0]
        x = field.view(1, 1, n, n)
        for _ in range(self.steps):
            x = F.conv2d(x, weights.view(1, 1, k, k), padding=k // 2)
        return x.view(n, n)


def _reference_engine() -> str:
    try:
        import cupy
    except ImportError as exc:
        raise RuntimeError(f"the stencil2d reference needs CuPy (a dependency of hiera: pip install -e .): {exc}") from None
    return f"CuPy {cupy.__version__} (FP64, one kernel in the shifted adds' order)"


@functools.cache
def _direct_kernel() -> Any:
    import cupy

    return cupy.RawKernel(DIRECT, "stencil_direct")
