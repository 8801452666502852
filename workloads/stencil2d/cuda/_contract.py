"""The frozen cuda contract of a stencil2d task: the function a candidate defines, its binding, and the
files a reader gets beside it (a PyTorch demo and the ground truth)."""

from __future__ import annotations

from hiera_core.records import Contract, Task

SOURCE_FILENAME = "cuda_source.cu"
BINDING_FILENAME = "cpp_source.cpp"
ENTRY = "forward"
DECLARATION = "torch::Tensor stencil2d(torch::Tensor field, torch::Tensor weights, int64_t steps);"
TOLERANCE = (1e-10, 1e-12)
"""(rtol, atol) of the check; the judge scales atol by max(1, rms(reference)). Fields are at most 100 in
magnitude and the weights are positive and sum to 1, so FP64 summation-order differences stay near 1e-15
of the output's scale; an indexing, boundary or precision error moves outputs by far more."""
CHECK_SIZES = (1000, 333, 256, 37, 5)
"""Grid sides checked besides the task's: no multiple of any tile (1000 is even, so vector loads run;
333, 37 and 5 are odd, so they do not), an exact multiple of every tile (256), and a grid smaller than a
7x7 stencil (5)."""
REMEASURE_SIZES = (1001, 517, 128, 53, 1)
"""Fresh sizes for the winner's final measurement."""


def grid(task: Task) -> int:
    """The side of the grid a GPU runs: the task's `n`."""
    return task.params["n"]


def check_sizes(n: int, remeasure: bool) -> list[int]:
    """The grid sides checked besides the task's `n`: CHECK_SIZES, or REMEASURE_SIZES for the winner."""
    return [s for s in (REMEASURE_SIZES if remeasure else CHECK_SIZES) if s != n]


def contract(task: Task) -> Contract:
    """The frozen cuda contract of `task`: `stencil2d` in `cuda_source.cu`, bound as `forward`."""
    p = task.params
    r, steps, n = p["radius"], p["steps"], grid(task)
    k = 2 * r + 1
    sizes = ", ".join(str(s) for s in check_sizes(n, remeasure=False))
    interface = f"""\
{DECLARATION}

`cuda_source.cu` defines this function (include <torch/extension.h>, or ATen's and c10's own headers,
which build faster); the frozen `{BINDING_FILENAME}`
binds it as `{ENTRY}(field, weights, steps={steps})`, and the harness calls `{ENTRY}(field, weights)`.

Apply the {k}x{k} box stencil (radius {r}) `steps` times to the n x n grid `field`:
    next[i][j] = sum over a, b in [-{r}, {r}] of weights[a + {r}][b + {r}] * cur[i + a][j + b]
where cur[y][x] is 0 outside 0 <= y, x < n (zero padding), cur is `field` for the first application
and each application's result for the next.{_temporal(steps)} `field` is a contiguous n x n float64 CUDA tensor and
`weights` a contiguous {k}x{k} float64 CUDA tensor on the same device: any positive values summing to 1,
drawn afresh for every check and timed call (read them; never assume the task's own).
Return a new contiguous n x n float64 CUDA tensor; never write `field` or `weights`. Compute in FP64
(no float32, half or TF32 anywhere); any summation order passes (rtol={TOLERANCE[0]:g}, atol={TOLERANCE[1]:g} times
the output's RMS). Launch on `at::cuda::getCurrentCUDAStream()` and create no streams or threads:
the call is timed from its start until the device is idle.
This task calls it with n={n}, radius={r} and steps={steps}, and checks it on n = {sizes} too."""
    return Contract(
        source_filename=SOURCE_FILENAME,
        interface=interface,
        files={
            BINDING_FILENAME: _binding(steps),
            "torch_demo.py": _torch_demo(r, steps),
            "groundtruth.py": _groundtruth(r, steps, n),
        },
        binding=BINDING_FILENAME,
    )


def _temporal(steps: int) -> str:
    if steps == 1:
        return ""
    return (
        f" The whole call ({steps} applications) is timed and checked: intermediate grids need not reach global"
        " memory, so several applications may be fused in one launch (temporal blocking), each computed"
        " exactly as above, zeros outside the grid after every application."
    )


# --- the contract's files ------------------------------------------------------------------------


def _binding(steps: int) -> str:
    return f"""\
// The frozen binding of the stencil2d contract: cuda_source.cu defines stencil2d.
#include <torch/extension.h>

{DECLARATION}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{
    m.def("{ENTRY}", &stencil2d, "steps applications of the FP64 box stencil, zero outside the grid",
          py::arg("field"), py::arg("weights"), py::arg("steps") = {steps});
}}
"""


def _torch_demo(radius: int, steps: int) -> str:
    return f'''\
"""How a stencil2d candidate is used from PyTorch: build the extension from the two sources, call it."""

import torch
from torch.utils.cpp_extension import load


class ModelNew(torch.nn.Module):
    """`steps` applications of a {2 * radius + 1}x{2 * radius + 1} FP64 box stencil, zero outside the grid."""

    def __init__(self, weights: torch.Tensor, steps: int = {steps}, directory: str = ".") -> None:
        super().__init__()
        self.register_buffer("weights", weights.to(torch.float64).contiguous())
        self.steps = steps
        self.extension = load(
            name="stencil2d_candidate",
            sources=[f"{{directory}}/{BINDING_FILENAME}", f"{{directory}}/{SOURCE_FILENAME}"],
            extra_cuda_cflags=["-O3"],
        )

    def forward(self, field: torch.Tensor) -> torch.Tensor:
        return self.extension.{ENTRY}(field.to(torch.float64).contiguous(), self.weights, self.steps)
'''


def _groundtruth(radius: int, steps: int, n: int) -> str:
    k = 2 * radius + 1
    return f'''\
"""The stencil2d reference in PyTorch: what a candidate computes, and the baseline it is timed against."""

import torch
import torch.nn.functional as F

N, RADIUS, STEPS = {n}, {radius}, {steps}


class Model(torch.nn.Module):
    """next[i][j] = sum of weights[a + r][b + r] * cur[i + a][j + b] over |a|, |b| <= r, zero outside the
    n x n grid (cross-correlation, as conv2d computes it), applied `steps` times, in FP64."""

    def forward(self, field: torch.Tensor, weights: torch.Tensor, steps: int = STEPS) -> torch.Tensor:
        n, k = field.shape[0], weights.shape[0]
        x = field.view(1, 1, n, n)
        for _ in range(steps):
            x = F.conv2d(x, weights.view(1, 1, k, k), padding=k // 2)
        return x.view(n, n)


def get_inputs(n: int = N, device: str = "cuda") -> list[torch.Tensor]:
    """A uniform field in [-1, 1] and positive weights that sum to 1."""
    weights = torch.rand({k}, {k}, dtype=torch.float64, device=device) + 0.5
    field = torch.rand(n, n, dtype=torch.float64, device=device) * 2 - 1
    return [field, weights / weights.sum()]
'''
