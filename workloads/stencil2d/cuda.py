"""The stencil's GPU (`cuda`) side: the frozen PyTorch-extension contract, the expert kernels and the
judge's harness.

The harness checks candidates against an FP64 reference computed with CuPy (one shifted add per tap),
independently of PyTorch; CuPy is a dependency of hiera, and a harness without it refuses to start. The
timed baseline is PyTorch's `conv2d` (cuDNN) in FP64.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np

from hiera_core.protocols import Knob
from hiera_core.records import Baseline, Contract, Task
from hiera_workloads.stencil2d.reference import draw_weights
from hiera_workloads.stencil2d.reference import reference as shifted_add_reference

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


def contract(task: Task) -> Contract:
    """The frozen cuda contract of `task`: `stencil2d` in `cuda_source.cu`, bound as `forward`."""
    p = task.params
    r, steps, n = p["radius"], p["steps"], grid(task)
    k = 2 * r + 1
    sizes = ", ".join(str(s) for s in _check_sizes(n, remeasure=False))
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


def seed(task: Task) -> tuple[str, dict[str, Any], str]:
    """The naive kernel: one output per thread from global memory, every knob at its default."""
    template = CudaStencilTemplate(radius=task.params["radius"], steps=task.params["steps"])
    params = template.defaults()
    return template.render(params), params, template.describe(params)


def templates(task: Task) -> list[CudaStencilTemplate]:
    return [CudaStencilTemplate(radius=task.params["radius"], steps=task.params["steps"])]


BASELINES = (
    ("cuDNN via torch conv2d", "libraries_pytorch", {"aten": "conv2d"}),
    ("cuDNN direct (fastest of cudnnFind)", "cuda_libraries", {"cudnn": True}),
    ("FFT (ATen rfft2 · irfft2)", "libraries_pytorch", {"aten": "fft"}),
)
"""(name, space, template knobs) of what users compare a stencil kernel against."""


def baselines(task: Task) -> list[Baseline]:
    template = CudaStencilTemplate(radius=task.params["radius"], steps=task.params["steps"])
    out = []
    for name, space, knobs in BASELINES:
        params = {**template.defaults(), **knobs}
        out.append(Baseline(name=name, space=space, source=template.render(params), origin=template.describe(params)))
    return out


def harness(task: Task) -> CudaStencilHarness:
    p = task.params
    return CudaStencilHarness(n=grid(task), radius=p["radius"], steps=p["steps"])


def _check_sizes(n: int, remeasure: bool) -> list[int]:
    return [s for s in (REMEASURE_SIZES if remeasure else CHECK_SIZES) if s != n]


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


# --- the expert's kernels ------------------------------------------------------------------------


class CudaStencilTemplate:
    """The CUDA sources an expert writes for the stencil, from the naive seed to register streaming,
    plus cuDNN called directly (cuda_libraries) and ATen's conv2d or FFT (libraries_pytorch).

    Every combination of knob values renders a complete `cuda_source.cu` that works for any n >= 1 and
    steps >= 1; the radius is the task's, a compile-time constant. When `aten` is not "none" it decides
    the source alone; otherwise `cudnn` does; otherwise the five kernel knobs shape a custom kernel.
    `steps` is the task's: `fuse_steps` (two steps per launch in the ring kernel) only matters when it is
    more than 1.
    """

    name = "stencil2d-cuda"
    knobs = {
        "tiling": Knob(values=("global", "smem", "smem_stream", "ring"), direction="R", space="pure_cuda"),
        "block": Knob(values=("32x8", "64x4", "32x16", "128x2"), direction="P", space="pure_cuda"),
        "outputs_per_thread": Knob(values=(1, 4, 8, 16), direction="T", space="pure_cuda"),
        "boundary": Knob(values=("checked", "split"), direction="C", space="pure_cuda"),
        "vector_loads": Knob(values=(False, True), direction="M", space="pure_cuda"),
        # The ring kernel's own shape (tiling=ring): each value's first entry is the best we measured on
        # the H200 (research/explore_stencil_kernels.py), the others are the neighbours a search moves to.
        "ring_columns": Knob(values=(2, 4), direction="T", space="pure_cuda"),
        "ring_threads": Knob(values=(128, 64, 256), direction="P", space="pure_cuda"),
        "strip_rows": Knob(values=(120, 60, 240), direction="M", space="pure_cuda"),
        "ring_stages": Knob(values=(4, 3, 6), direction="R", space="pure_cuda"),
        # Temporal blocking in the ring kernel (tiling=ring, steps > 1): two steps per launch, the
        # intermediate grid kept on chip (the explorer's fused2, this kernel's origin: 0.516 ms per step at
        # n=10240, radius 3, on the H200 — no faster than one step per launch there; docs/stencil2d-h200.md).
        "fuse_steps": Knob(values=(False, True), direction="R", space="pure_cuda"),
        "cudnn": Knob(values=(False, True), direction="T", space="cuda_libraries"),
        "aten": Knob(values=("none", "conv2d", "fft"), direction="T", space="libraries_pytorch"),
    }

    def __init__(self, radius: int, steps: int = 1) -> None:
        self.radius = radius
        self.steps = steps

    def defaults(self) -> dict[str, Any]:
        return {name: knob.values[0] for name, knob in self.knobs.items()}

    def variants(self) -> list[dict[str, Any]]:
        """Every combination of knob values."""
        return [dict(zip(self.knobs, values)) for values in itertools.product(*(k.values for k in self.knobs.values()))]

    def shaping(self, params: Mapping[str, Any]) -> list[str]:
        """The knobs that shape the source for `params` (the others are moot)."""
        if params["aten"] != "none":
            return ["aten"]
        if params["cudnn"]:
            return ["cudnn"]
        if params["tiling"] == "ring":
            ring = ["tiling", "boundary", "vector_loads", "ring_columns", "ring_threads", "strip_rows", "ring_stages"]
            return ring + ["fuse_steps"] if self.steps > 1 else ring  # one step: nothing to fuse
        kernel = ["tiling", "block", "outputs_per_thread", "boundary", "vector_loads"]
        return kernel[:-1] if params["tiling"] == "global" else kernel  # vector loads fill a shared tile

    def describe(self, params: Mapping[str, Any]) -> str:
        """`name knob=value ...` with the knobs that shape the source."""
        return " ".join([self.name, *(f"{k}={params[k]}" for k in self.shaping(params))])

    def render(self, params: Mapping[str, Any]) -> str:
        for name, knob in self.knobs.items():
            if params.get(name) not in knob.values:
                raise ValueError(f"knob {name}={params.get(name)!r} is not one of {knob.values}")
        head = _HEAD.format(origin=self.describe(params), radius=self.radius)
        if params["aten"] == "conv2d":
            return head + _ATEN_CONV2D
        if params["aten"] == "fft":
            return head + _ATEN_FFT
        if params["cudnn"]:
            return head + _CUDNN
        return head + _custom_kernel(params, fuse=params["fuse_steps"] and self.steps > 1)


_HEAD = """\
// {origin}
// next[i][j] = sum over |a|, |b| <= R of w[a + R][b + R] * cur[i + a][j + b], zero outside the n x n grid.
// ATen's and c10's own headers rather than <torch/extension.h>: the file builds about 4x faster.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

constexpr int R = {radius};  // the task's radius, fixed at compile time
constexpr int K = 2 * R + 1;

void check_arguments(const at::Tensor& field, const at::Tensor& weights, int64_t steps) {{
    TORCH_CHECK(field.is_cuda() && field.scalar_type() == at::kDouble && field.dim() == 2 &&
                    field.size(0) == field.size(1) && field.size(0) >= 1 && field.is_contiguous(),
                "field must be a contiguous square float64 CUDA tensor");
    TORCH_CHECK(weights.is_cuda() && weights.scalar_type() == at::kDouble && weights.dim() == 2 &&
                    weights.size(0) == K && weights.size(1) == K && weights.is_contiguous() &&
                    weights.device() == field.device(),
                "weights must be a contiguous ", K, "x", K, " float64 tensor on the field's device");
    TORCH_CHECK(steps >= 1, "steps must be >= 1, got ", steps);
}}
"""


def _custom_kernel(params: Mapping[str, Any], fuse: bool) -> str:
    if params["tiling"] == "ring":
        return _ring_kernel(params, fuse)
    bx, by = (int(v) for v in params["block"].split("x"))
    rows = params["outputs_per_thread"]
    split = params["boundary"] == "split"
    if params["tiling"] == "global":
        parts = [_GLOBAL_CONSTANTS.format(bx=bx, by=by, rows=rows), _GLOBAL_OUTPUTS, _global_kernel(split)]
        parts.append(_launch(shared=False, vector=False))
        parts.append(_entry(vector=False))
        return "\n".join(parts)
    vector = params["vector_loads"]
    halo = "R + (R & 1)" if vector else "R"
    why = (
        "  // R rounded up to even: tile rows start 16-byte aligned"
        if vector
        else "  // columns loaded left and right of the block's outputs"
    )
    parts = [_TILE_CONSTANTS.format(bx=bx, by=by, rows=rows, halo=halo, why=why), _LOAD_TILE_SCALAR]
    if vector:
        parts.append(_LOAD_TILE_VECTOR)
    parts.append(_STREAM_OUTPUTS if params["tiling"] == "smem_stream" else _TILE_OUTPUTS)
    parts.append(_tile_kernel(split, vector))
    parts.append(_launch(shared=True, vector=vector))
    parts.append(_entry(vector=vector))
    return "\n".join(parts)


_GLOBAL_CONSTANTS = """
constexpr int BX = {bx}, BY = {by};  // threads per block: BX columns x BY rows
constexpr int T = {rows};  // outputs per thread, consecutive rows of one column
constexpr int TILE_H = BY * T;  // output rows per block

__constant__ double c_w[K * K];  // the weights: every thread of a warp reads the same one
"""

_GLOBAL_OUTPUTS = """
// The T outputs (y0 .. y0 + T - 1, x) of one thread, every tap read from global memory (through L1).
// CHECKED: test every output and tap against the grid; otherwise all of them lie inside it.
template <bool CHECKED>
__device__ __forceinline__ void thread_outputs(const double* __restrict__ in, double* __restrict__ out, int n,
                                               int x, int y0) {
#pragma unroll
    for (int t = 0; t < T; ++t) {
        const int y = y0 + t;
        if (CHECKED && (x >= n || y >= n)) continue;
        double acc = 0.0;
#pragma unroll
        for (int a = 0; a < K; ++a) {
            const int yy = y + a - R;
            if (CHECKED && (yy < 0 || yy >= n)) continue;
            const double* row = in + (size_t)yy * n;
#pragma unroll
            for (int b = 0; b < K; ++b) {
                const int xx = x + b - R;
                if (!CHECKED || (xx >= 0 && xx < n)) acc = fma(c_w[a * K + b], row[xx], acc);
            }
        }
        out[(size_t)y * n + x] = acc;
    }
}
"""


def _global_kernel(split: bool) -> str:
    if split:
        body = """\
    // Blocks whose outputs and taps all lie inside the grid skip every test (a block-uniform branch).
    const int bx0 = blockIdx.x * BX, by0 = blockIdx.y * TILE_H;
    const bool interior = bx0 >= R && by0 >= R && bx0 + BX + R <= n && by0 + TILE_H + R <= n;
    if (interior)
        thread_outputs<false>(in, out, n, x, y0);
    else
        thread_outputs<true>(in, out, n, x, y0);"""
    else:
        body = "    thread_outputs<true>(in, out, n, x, y0);"
    return f"""
// One application: BX x TILE_H outputs per block, T per thread.
__global__ void __launch_bounds__(BX * BY) stencil_step(const double* __restrict__ in, double* __restrict__ out, int n) {{
    const int x = blockIdx.x * BX + threadIdx.x;
    const int y0 = (blockIdx.y * BY + threadIdx.y) * T;
{body}
}}
"""


_TILE_CONSTANTS = """
constexpr int BX = {bx}, BY = {by};  // threads per block: BX columns x BY rows
constexpr int T = {rows};  // outputs per thread, consecutive rows of one column
constexpr int TILE_H = BY * T;  // output rows per block
constexpr int HALO_X = {halo};{why}
constexpr int SMEM_W = BX + 2 * HALO_X, SMEM_H = TILE_H + 2 * R;  // the block's input tile
constexpr size_t SMEM_BYTES = sizeof(double) * SMEM_W * SMEM_H;

__constant__ double c_w[K * K];  // the weights: every thread of a warp reads the same one
"""

_LOAD_TILE_SCALAR = """
// Copy the input tile (rows y0 .., columns x0 ..) into shared memory, zero outside the grid.
template <bool CHECKED>
__device__ __forceinline__ void load_tile(const double* __restrict__ in, double* tile, int n, int x0, int y0) {
    for (int idx = threadIdx.y * BX + threadIdx.x; idx < SMEM_W * SMEM_H; idx += BX * BY) {
        const int r = idx / SMEM_W, c = idx - r * SMEM_W;
        const int y = y0 + r, x = x0 + c;
        tile[idx] = (!CHECKED || (y >= 0 && y < n && x >= 0 && x < n)) ? in[(size_t)y * n + x] : 0.0;
    }
}
"""

_LOAD_TILE_VECTOR = """
// The same copy in 16-byte double2 loads when PAIRS: needs n even, a 16-byte aligned grid and x0 even, so
// a pair (x, x + 1) never straddles the grid's edge.
template <bool CHECKED, bool PAIRS>
__device__ __forceinline__ void stage_tile(const double* __restrict__ in, double* tile, int n, int x0, int y0) {
    if (!PAIRS) {
        load_tile<CHECKED>(in, tile, n, x0, y0);
        return;
    }
    constexpr int ROW_PAIRS = SMEM_W / 2;
    for (int idx = threadIdx.y * BX + threadIdx.x; idx < ROW_PAIRS * SMEM_H; idx += BX * BY) {
        const int r = idx / ROW_PAIRS, c = 2 * (idx - r * ROW_PAIRS);
        const int y = y0 + r, x = x0 + c;
        double2 v = make_double2(0.0, 0.0);
        if (!CHECKED || (y >= 0 && y < n && x >= 0 && x < n))
            v = *reinterpret_cast<const double2*>(in + (size_t)y * n + x);
        *reinterpret_cast<double2*>(tile + r * SMEM_W + c) = v;
    }
}
"""

_TILE_OUTPUTS = """
// The T outputs of one thread, each the K x K taps read from the shared tile.
template <bool CHECKED>
__device__ __forceinline__ void thread_outputs(const double* tile, double* __restrict__ out, int n, int bx0, int by0) {
    const int x = bx0 + threadIdx.x, ty0 = threadIdx.y * T;
#pragma unroll
    for (int t = 0; t < T; ++t) {
        const double* s = tile + (ty0 + t) * SMEM_W + threadIdx.x + (HALO_X - R);
        double acc = 0.0;
#pragma unroll
        for (int a = 0; a < K; ++a)
#pragma unroll
            for (int b = 0; b < K; ++b) acc = fma(c_w[a * K + b], s[a * SMEM_W + b], acc);
        const int y = by0 + ty0 + t;
        if (!CHECKED || (x < n && y < n)) out[(size_t)y * n + x] = acc;
    }
}
"""

_STREAM_OUTPUTS = """
// The T outputs of one thread by register streaming down its column: each of the T + 2R input rows
// of the window is read from the shared tile once, K values into registers, and feeds every output
// row within R of it; the T accumulators stay in registers.
template <bool CHECKED>
__device__ __forceinline__ void thread_outputs(const double* tile, double* __restrict__ out, int n, int bx0, int by0) {
    const int x = bx0 + threadIdx.x, ty0 = threadIdx.y * T;
    const double* s = tile + ty0 * SMEM_W + threadIdx.x + (HALO_X - R);
    double acc[T];
#pragma unroll
    for (int t = 0; t < T; ++t) acc[t] = 0.0;
#pragma unroll
    for (int row = 0; row < T + 2 * R; ++row) {
        double v[K];
#pragma unroll
        for (int b = 0; b < K; ++b) v[b] = s[row * SMEM_W + b];
#pragma unroll
        for (int t = 0; t < T; ++t) {
            const int a = row - t;  // the weight row that input row `row` meets in output t; known at compile time
            if (a >= 0 && a < K) {
#pragma unroll
                for (int b = 0; b < K; ++b) acc[t] = fma(c_w[a * K + b], v[b], acc[t]);
            }
        }
    }
#pragma unroll
    for (int t = 0; t < T; ++t) {
        const int y = by0 + ty0 + t;
        if (!CHECKED || (x < n && y < n)) out[(size_t)y * n + x] = acc[t];
    }
}
"""


def _tile_kernel(split: bool, vector: bool) -> str:
    template = "template <bool PAIRS>\n" if vector else ""

    def load(checked: str) -> str:
        if vector:
            return f"stage_tile<{checked}, PAIRS>(in, tile, n, x0, y0)"
        return f"load_tile<{checked}>(in, tile, n, x0, y0)"

    if split:
        body = f"""\
    // Blocks whose whole input tile lies inside the grid load and store without tests (a block-uniform branch).
    const bool interior = x0 >= 0 && y0 >= 0 && x0 + SMEM_W <= n && y0 + SMEM_H <= n;
    if (interior)
        {load("false")};
    else
        {load("true")};
    __syncthreads();
    if (interior)
        thread_outputs<false>(tile, out, n, bx0, by0);
    else
        thread_outputs<true>(tile, out, n, bx0, by0);"""
    else:
        body = f"""\
    {load("true")};
    __syncthreads();
    thread_outputs<true>(tile, out, n, bx0, by0);"""
    return f"""
// One application: each block stages its input tile in shared memory, then computes BX x TILE_H outputs.
{template}__global__ void __launch_bounds__(BX * BY) stencil_step(const double* __restrict__ in, double* __restrict__ out, int n) {{
    extern __shared__ __align__(16) double tile[];
    const int bx0 = blockIdx.x * BX, by0 = blockIdx.y * TILE_H;
    const int x0 = bx0 - HALO_X, y0 = by0 - R;
{body}
}}
"""


def _launch(shared: bool, vector: bool) -> str:
    if not shared:
        call = """\
    stencil_step<<<grid, block, 0, stream>>>(in, out, n);"""
    elif not vector:
        call = """\
    C10_CUDA_CHECK(cudaFuncSetAttribute(stencil_step, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM_BYTES));
    stencil_step<<<grid, block, SMEM_BYTES, stream>>>(in, out, n);"""
    else:
        call = """\
    if (pairs) {
        C10_CUDA_CHECK(cudaFuncSetAttribute(stencil_step<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM_BYTES));
        stencil_step<true><<<grid, block, SMEM_BYTES, stream>>>(in, out, n);
    } else {
        C10_CUDA_CHECK(cudaFuncSetAttribute(stencil_step<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM_BYTES));
        stencil_step<false><<<grid, block, SMEM_BYTES, stream>>>(in, out, n);
    }"""
    pairs = ", bool pairs" if vector else ""
    return f"""
void launch_step(const double* in, double* out, int n{pairs}, cudaStream_t stream) {{
    const dim3 block(BX, BY), grid((n + BX - 1) / BX, (n + TILE_H - 1) / TILE_H);
    TORCH_CHECK(grid.y <= 65535, "n=", n, " needs more than 65535 blocks in y");
{call}
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}}
"""


def _entry(vector: bool, fuse: bool = False) -> str:
    pairs = ""
    if vector or fuse:
        pairs = """
    // double2 loads need even rows and a 16-byte aligned grid (out and scratch are fresh allocations)."""
        pairs += """
    // The two-step kernel copies 16 bytes at a time: it runs only then.""" if fuse else ""
        pairs += """
    const bool pairs = n % 2 == 0 && reinterpret_cast<uintptr_t>(field.data_ptr<double>()) % 16 == 0;"""
    if fuse:
        loop = f"""\
    // Two steps per launch while two remain (one step per launch when pairs is false), then one; the
    // launches ping-pong between scratch and out so that the last one writes out; field is only read.
    const int64_t launches = pairs ? steps / 2 + steps % 2 : steps;
    const double* src = field.data_ptr<double>();
    for (int64_t l = 0, s = 0; l < launches; ++l) {{
        double* dst = (launches - l) % 2 == 1 ? out.data_ptr<double>() : scratch.data_ptr<double>();
        if (pairs && steps - s >= 2) {{
            launch_two_steps(src, dst, n, stream);
            s += 2;
        }} else {{
            launch_step(src, dst, n{", pairs" if vector else ""}, stream);
            s += 1;
        }}
        src = dst;
    }}"""
    else:
        loop = f"""\
    // One launch per step, ping-ponging between scratch and out so that the last step writes out; field is
    // only read. (With tiling=ring, fuse_steps=True runs two steps per launch instead.)
    const double* src = field.data_ptr<double>();
    for (int64_t s = 0; s < steps; ++s) {{
        double* dst = (steps - s) % 2 == 1 ? out.data_ptr<double>() : scratch.data_ptr<double>();
        launch_step(src, dst, n{", pairs" if vector else ""}, stream);
        src = dst;
    }}"""
    return f"""
at::Tensor stencil2d(at::Tensor field, at::Tensor weights, int64_t steps) {{
    check_arguments(field, weights, steps);
    const c10::cuda::CUDAGuard guard(field.device());
    const int n = static_cast<int>(field.size(0));
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    C10_CUDA_CHECK(cudaMemcpyToSymbolAsync(c_w, weights.data_ptr<double>(), sizeof(double) * K * K, 0,
                                           cudaMemcpyDeviceToDevice, stream));
    auto out = at::empty_like(field);
    auto scratch = steps > 1 ? at::empty_like(field) : out;{pairs}
{loop}
    return out;
}}
"""


def _ring_kernel(params: Mapping[str, Any], fuse: bool) -> str:
    constants = _RING_CONSTANTS.format(
        w=params["ring_columns"], bx=params["ring_threads"], h=params["strip_rows"], s=params["ring_stages"]
    )
    if params["boundary"] == "split":
        interior = """\
    // Blocks whose segment columns all lie inside the grid copy and store without tests (block-uniform).
    if (xb - HX >= 0 && xb + BX * W + HX <= n)
        stream_strip<PAIRS, true>(in, out, ring, n, xb, y0);
    else
        stream_strip<PAIRS, false>(in, out, ring, n, xb, y0);"""
    else:
        interior = "    stream_strip<PAIRS, false>(in, out, ring, n, xb, y0);"
    vector = params["vector_loads"]
    launch = _RING_LAUNCH.format(
        interior=interior,
        pairs_param=", bool pairs" if vector else "",
        kernel="pairs ? stencil_step<true> : stencil_step<false>" if vector else "stencil_step<false>",
    )
    parts = [constants, _RING_BODY, launch]
    if fuse:
        if params["boundary"] == "split":
            interior = """\
    // Blocks whose input segment lies inside the grid copy and store without tests (block-uniform).
    if (xb - 2 * HX >= 0 && xb + BX * W <= n)
        stream_two_steps<true>(in, out, ring, n, xb, y0);
    else
        stream_two_steps<false>(in, out, ring, n, xb, y0);"""
        else:
            interior = "    stream_two_steps<false>(in, out, ring, n, xb, y0);"
        parts.append(_FUSED_BODY + _FUSED_LAUNCH.format(interior=interior))
    parts.append(_entry(vector=vector, fuse=fuse))
    return "\n".join(parts)


_RING_CONSTANTS = """
constexpr int W = {w};  // outputs per thread: W consecutive columns of one row at a time
constexpr int BX = {bx};  // threads per block, one row of them: a block owns BX * W columns
constexpr int H = {h};  // output rows per block: the strip it streams down
constexpr int S = {s};  // stages of the shared-memory ring: rows loaded ahead of the one computed
constexpr int HX = R + (R & 1);  // halo columns, rounded up to even so that pairs stay 16-byte aligned
constexpr int NV = W + 2 * HX;  // the input values of one row a thread reads
constexpr int SEG = BX * W + 2 * HX;  // doubles of one input row segment (one ring stage)
constexpr size_t SMEM_BYTES = sizeof(double) * S * SEG;

__constant__ double c_w[K * K];  // the weights: every thread of a warp reads the same one
"""

_RING_BODY = """
// Register streaming through a shared-memory ring. A block owns BX * W columns and H rows; it walks down
// its H + 2R input rows. Row j + S - 1 is copied into the ring (cp.async, no registers) while row j is
// computed, so S - 1 rows of loads are always in flight. Each thread reads the NV values of row j it needs
// into registers and adds them into the K rows of W outputs the row touches (acc[K][W], a rotating window
// whose slots are compile-time constants because the loop is unrolled K times); an output row is complete
// after its last input row, stored and its slot reused. Every input is read from DRAM once (plus 2R halo
// rows per strip) and every weight comes from constant memory.
__device__ __forceinline__ void copy_async(double* smem, const double* gmem, int bytes) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    if (bytes == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\\n" ::"r"(s), "l"(gmem));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\\n" ::"r"(s), "l"(gmem));
}

// Strip row j (input row y0 - R + j, columns xb - HX ..) into stage j % S, zero outside the grid and from
// row ROWS of the strip on, as one commit group. PAIRS: 16-byte copies (n even, grid aligned); INTERIOR:
// every column of the segment is inside the grid.
template <bool PAIRS, bool INTERIOR, int ROWS = H + 2 * R>
__device__ __forceinline__ void stage_row(const double* __restrict__ in, double* ring, int n, int xb, int y0, int j) {
    constexpr int UNIT = PAIRS ? 2 : 1, UNITS = SEG / UNIT, LOADS = (UNITS + BX - 1) / BX;
    const int i = y0 - R + j;
    double* dst = ring + (j % S) * SEG;
    const bool row_inside = i >= 0 && i < n && j < ROWS;
    const double* row = in + (size_t)(row_inside ? i : 0) * n + xb - HX;
#pragma unroll
    for (int k = 0; k < LOADS; ++k) {
        const int u = threadIdx.x + k * BX;
        if ((k + 1) * BX <= UNITS || u < UNITS) {
            const int c = xb - HX + UNIT * u;
            if (row_inside && (INTERIOR || (c >= 0 && c < n))) {
                copy_async(dst + UNIT * u, row + UNIT * u, 8 * UNIT);
            } else {
#pragma unroll
                for (int e = 0; e < UNIT; ++e) dst[UNIT * u + e] = 0.0;
            }
        }
    }
    asm volatile("cp.async.commit_group;\\n" ::);
}

// The NV values of a staged row that one thread needs (its W columns and the halo), 16 bytes at a time.
__device__ __forceinline__ void read_row(const double* src, double (&v)[NV]) {
#pragma unroll
    for (int q = 0; q < NV; q += 2) {
        const double2 t = *reinterpret_cast<const double2*>(src + q);
        v[q] = t.x;
        v[q + 1] = t.y;
    }
}

template <bool PAIRS, bool INTERIOR>
__device__ __forceinline__ void stream_strip(const double* __restrict__ in, double* __restrict__ out, double* ring,
                                             int n, int xb, int y0) {
    const int x0 = xb + threadIdx.x * W;
    double acc[K][W];
#pragma unroll
    for (int s = 0; s < K; ++s)
#pragma unroll
        for (int w = 0; w < W; ++w) acc[s][w] = 0.0;
#pragma unroll
    for (int j = 0; j < S - 1; ++j) stage_row<PAIRS, INTERIOR>(in, ring, n, xb, y0, j);
    for (int jb = 0; jb < H + 2 * R; jb += K) {
#pragma unroll
        for (int u = 0; u < K; ++u) {  // row j's window slots are (u - a) mod K: constants
            const int j = jb + u;
            if ((H + 2 * R) % K == 0 || j < H + 2 * R) {
                asm volatile("cp.async.wait_group %0;\\n" ::"n"(S - 2));  // row j has landed
                __syncthreads();  // for every thread, and every thread is done with row j - 1
                stage_row<PAIRS, INTERIOR>(in, ring, n, xb, y0, j + S - 1);  // into row j - 1's stage
                double v[NV];
                read_row(ring + (j % S) * SEG + threadIdx.x * W, v);
#pragma unroll
                for (int a = 0; a < K; ++a) {  // input row j meets weight row a in output row j - a (strip-relative)
                    const int s = (u - a + K) % K;
#pragma unroll
                    for (int b = 0; b < K; ++b)
#pragma unroll
                        for (int w = 0; w < W; ++w) acc[s][w] = fma(c_w[a * K + b], v[w + b - R + HX], acc[s][w]);
                }
                const int o = y0 + j - 2 * R, s = (u + 1) % K;  // the output row that row j completes
                if (o >= y0 && o < n && (INTERIOR || x0 < n)) {
                    double* dst = out + (size_t)o * n + x0;
                    if (PAIRS && (INTERIOR || x0 + W <= n)) {
#pragma unroll
                        for (int w = 0; w < W; w += 2) *reinterpret_cast<double2*>(dst + w) = make_double2(acc[s][w], acc[s][w + 1]);
                    } else {
#pragma unroll
                        for (int w = 0; w < W; ++w)
                            if (INTERIOR || x0 + w < n) dst[w] = acc[s][w];
                    }
                }
#pragma unroll
                for (int w = 0; w < W; ++w) acc[s][w] = 0.0;
            }
        }
    }
}

"""

_RING_LAUNCH = """
template <bool PAIRS>
__global__ void __launch_bounds__(BX) stencil_step(const double* __restrict__ in, double* __restrict__ out, int n) {{
    extern __shared__ __align__(16) double ring[];
    const int xb = blockIdx.x * BX * W, y0 = blockIdx.y * H;
{interior}
}}

void launch_step(const double* in, double* out, int n{pairs_param}, cudaStream_t stream) {{
    const dim3 block(BX), grid((n + BX * W - 1) / (BX * W), (n + H - 1) / H);
    TORCH_CHECK(grid.y <= 65535, "n=", n, " needs more than 65535 blocks in y");
    auto kernel = {kernel};
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM_BYTES));
    kernel<<<grid, block, SMEM_BYTES, stream>>>(in, out, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}}
"""


_FUSED_BODY = """
// Two steps per launch (temporal blocking; fuse_steps). A block owns OW = BX * W - 2HX output columns from
// xb and H rows from y0. Thread t computes step 1 (the intermediate grid) on the W columns
// xb - HX + t * W .., BX * W columns in all, for rows y0 - R .. y0 + H + R - 1, streaming the H + 4R input
// rows of the segment from xb - 2HX through the ring exactly as stream_strip does (stage_row with the
// origin moved out by one halo: the same SEG). Intermediate row m (strip-relative, from y0 - R) is complete
// after input row m + 2R; it goes, zero outside the grid (zero padding at every step), into one of two
// shared rows mid[m & 1], and the next iteration streams it through step 2 on the threads with outputs
// (t * W < OW), which completes output row m - 1 - 2R. Both rotating windows use the slot (u + 1) % K for
// the row they complete, as (j - 2R - 1) % K == j % K. One __syncthreads per input row: mid[m & 1] is
// written after the barrier of iteration j, read after that of j + 1 and written again after that of j + 2.
// The copies are always 16 bytes (n even, grid aligned), so the launcher runs it only then.
constexpr int OW = BX * W - 2 * HX;  // output columns per block
constexpr int ROWS2 = H + 4 * R;  // input rows a block streams
constexpr size_t SMEM2_BYTES = sizeof(double) * (S * SEG + 2 * BX * W);  // the ring and two intermediate rows
static_assert(W % 2 == 0 && OW > 0, "double2 rows and a positive output tile");

template <bool INTERIOR>
__device__ __forceinline__ void stream_two_steps(const double* __restrict__ in, double* __restrict__ out, double* ring,
                                                 int n, int xb, int y0) {
    double* mid = ring + S * SEG;
    const int x0 = xb + threadIdx.x * W;  // this thread's first output column
    const bool outputs = threadIdx.x * W < OW;
    double acc1[K][W], acc2[K][W];
#pragma unroll
    for (int s = 0; s < K; ++s)
#pragma unroll
        for (int w = 0; w < W; ++w) acc1[s][w] = acc2[s][w] = 0.0;
#pragma unroll
    for (int j = 0; j < S - 1; ++j) stage_row<true, INTERIOR, ROWS2>(in, ring, n, xb - HX, y0 - R, j);
    for (int jb = 0; jb < ROWS2 + 1; jb += K) {
#pragma unroll
        for (int u = 0; u < K; ++u) {  // row j's window slots are (u - a) mod K: constants
            const int j = jb + u;
            if ((ROWS2 + 1) % K == 0 || j < ROWS2 + 1) {
                asm volatile("cp.async.wait_group %0;\\n" ::"n"(S - 2));  // row j has landed
                __syncthreads();  // for every thread, and every thread is done with row j - 1 and with mid[m & 1]
                stage_row<true, INTERIOR, ROWS2>(in, ring, n, xb - HX, y0 - R, j + S - 1);
                const int m = j - 2 * R, s = (u + 1) % K;  // the intermediate row that row j completes, its slot
                const bool step2 = m >= 1 && outputs;
                double v2[NV];  // intermediate row m - 1, read before mid[m & 1] is written
                if (step2) read_row(mid + ((m - 1) & 1) * (BX * W) + threadIdx.x * W, v2);
                if (j < ROWS2) {  // step 1
                    double v[NV];
                    read_row(ring + (j % S) * SEG + threadIdx.x * W, v);
#pragma unroll
                    for (int a = 0; a < K; ++a) {
                        const int sa = (u - a + K) % K;
#pragma unroll
                        for (int b = 0; b < K; ++b)
#pragma unroll
                            for (int w = 0; w < W; ++w) acc1[sa][w] = fma(c_w[a * K + b], v[w + b - R + HX], acc1[sa][w]);
                    }
                    if (m >= 0) {
                        const int y = y0 - R + m;
                        const bool row_inside = y >= 0 && y < n;
                        double* dst = mid + (m & 1) * (BX * W) + threadIdx.x * W;
#pragma unroll
                        for (int w = 0; w < W; w += 2) {
                            const int c = xb - HX + threadIdx.x * W + w;  // c even, n even: c + 1 < n when c < n
                            double2 t = make_double2(acc1[s][w], acc1[s][w + 1]);
                            if (!row_inside || (!INTERIOR && (c < 0 || c >= n))) t = make_double2(0.0, 0.0);
                            *reinterpret_cast<double2*>(dst + w) = t;
                        }
                    }
#pragma unroll
                    for (int w = 0; w < W; ++w) acc1[s][w] = 0.0;
                }
                if (step2) {
#pragma unroll
                    for (int a = 0; a < K; ++a) {
                        const int sa = (u - a + K) % K;
#pragma unroll
                        for (int b = 0; b < K; ++b)
#pragma unroll
                            for (int w = 0; w < W; ++w) acc2[sa][w] = fma(c_w[a * K + b], v2[w + b - R + HX], acc2[sa][w]);
                    }
                    const int o = y0 + j - 4 * R - 1;  // the output row that intermediate row m - 1 completes
                    if (o >= y0 && o < n && (INTERIOR || x0 < n)) {
                        double* dst = out + (size_t)o * n + x0;
                        if (INTERIOR || x0 + W <= n) {
#pragma unroll
                            for (int w = 0; w < W; w += 2) *reinterpret_cast<double2*>(dst + w) = make_double2(acc2[s][w], acc2[s][w + 1]);
                        } else {
#pragma unroll
                            for (int w = 0; w < W; ++w)
                                if (x0 + w < n) dst[w] = acc2[s][w];
                        }
                    }
#pragma unroll
                    for (int w = 0; w < W; ++w) acc2[s][w] = 0.0;
                }
            }
        }
    }
}
"""

_FUSED_LAUNCH = """
__global__ void __launch_bounds__(BX) stencil_two_steps(const double* __restrict__ in, double* __restrict__ out, int n) {{
    extern __shared__ __align__(16) double ring[];
    const int xb = blockIdx.x * OW, y0 = blockIdx.y * H;
{interior}
}}

void launch_two_steps(const double* in, double* out, int n, cudaStream_t stream) {{
    const dim3 block(BX), grid((n + OW - 1) / OW, (n + H - 1) / H);
    TORCH_CHECK(grid.y <= 65535, "n=", n, " needs more than 65535 blocks in y");
    C10_CUDA_CHECK(cudaFuncSetAttribute(stencil_two_steps, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM2_BYTES));
    stencil_two_steps<<<grid, block, SMEM2_BYTES, stream>>>(in, out, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}}
"""


_CUDNN = """#include <ATen/ops/empty.h>
#include <cudnn.h>

#define CHECK_CUDNN(call)                                                                            \\
    do {                                                                                             \\
        const cudnnStatus_t status_ = (call);                                                        \\
        TORCH_CHECK(status_ == CUDNN_STATUS_SUCCESS, #call " failed: ", cudnnGetErrorString(status_)); \\
    } while (0)

// cuDNN's convolution, called directly: single-channel FP64 cross-correlation with zero padding R. The
// fastest forward algorithm is found once per grid size with cudnnFindConvolutionForwardAlgorithmEx over
// every algorithm whose workspace fits in half of the free device memory; only that choice is kept.
struct Descriptors {
    cudnnTensorDescriptor_t grid = nullptr;
    cudnnFilterDescriptor_t filter = nullptr;
    cudnnConvolutionDescriptor_t conv = nullptr;

    explicit Descriptors(int n) {
        CHECK_CUDNN(cudnnCreateTensorDescriptor(&grid));
        CHECK_CUDNN(cudnnSetTensor4dDescriptor(grid, CUDNN_TENSOR_NCHW, CUDNN_DATA_DOUBLE, 1, 1, n, n));
        CHECK_CUDNN(cudnnCreateFilterDescriptor(&filter));
        CHECK_CUDNN(cudnnSetFilter4dDescriptor(filter, CUDNN_DATA_DOUBLE, CUDNN_TENSOR_NCHW, 1, 1, K, K));
        CHECK_CUDNN(cudnnCreateConvolutionDescriptor(&conv));
        CHECK_CUDNN(cudnnSetConvolution2dDescriptor(conv, R, R, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_DOUBLE));
        CHECK_CUDNN(cudnnSetConvolutionMathType(conv, CUDNN_DEFAULT_MATH));
    }
    ~Descriptors() {
        cudnnDestroyConvolutionDescriptor(conv);
        cudnnDestroyFilterDescriptor(filter);
        cudnnDestroyTensorDescriptor(grid);
    }
};

struct AlgorithmChoice {
    int device = -1, n = -1;
    cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    size_t workspace_bytes = 0;
};

cudnnHandle_t cudnn_handle(int device) {
    static cudnnHandle_t handle = nullptr;  // created once; cuDNN handles are meant to be reused
    static int handle_device = -1;
    if (handle == nullptr || handle_device != device) {
        if (handle != nullptr) cudnnDestroy(handle);
        CHECK_CUDNN(cudnnCreate(&handle));
        handle_device = device;
    }
    return handle;
}

AlgorithmChoice find_algorithm(cudnnHandle_t handle, const Descriptors& d, const at::Tensor& field,
                               const at::Tensor& weights, at::Tensor& out, int device, int n) {
    size_t free_bytes = 0, total_bytes = 0;
    C10_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    size_t workspace_bytes = 0;
    for (int a = 0; a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; ++a) {
        size_t bytes = 0;
        const auto algo = static_cast<cudnnConvolutionFwdAlgo_t>(a);
        if (cudnnGetConvolutionForwardWorkspaceSize(handle, d.grid, d.filter, d.conv, d.grid, algo, &bytes) ==
                CUDNN_STATUS_SUCCESS && bytes <= free_bytes / 2)
            workspace_bytes = std::max(workspace_bytes, bytes);
    }
    auto workspace = at::empty({static_cast<int64_t>(std::max<size_t>(workspace_bytes, 1))},
                                  field.options().dtype(at::kByte));
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int returned = 0;
    CHECK_CUDNN(cudnnFindConvolutionForwardAlgorithmEx(
        handle, d.grid, field.data_ptr<double>(), d.filter, weights.data_ptr<double>(), d.conv, d.grid,
        out.data_ptr<double>(), CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf, workspace.data_ptr(), workspace_bytes));
    for (int i = 0; i < returned; ++i)  // sorted fastest first
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= workspace_bytes)
            return AlgorithmChoice{device, n, perf[i].algo, perf[i].memory};
    TORCH_CHECK(false, "cuDNN has no forward algorithm for this convolution");
    return AlgorithmChoice{};
}

at::Tensor stencil2d(at::Tensor field, at::Tensor weights, int64_t steps) {
    check_arguments(field, weights, steps);
    const c10::cuda::CUDAGuard guard(field.device());
    const int n = static_cast<int>(field.size(0));
    const int device = field.get_device();
    cudnnHandle_t handle = cudnn_handle(device);
    CHECK_CUDNN(cudnnSetStream(handle, c10::cuda::getCurrentCUDAStream()));
    const Descriptors d(n);
    auto out = at::empty_like(field);
    auto scratch = steps > 1 ? at::empty_like(field) : out;
    static AlgorithmChoice choice;  // the algorithm for the last grid size, never a result
    if (choice.device != device || choice.n != n) choice = find_algorithm(handle, d, field, weights, out, device, n);
    auto workspace = at::empty({static_cast<int64_t>(std::max<size_t>(choice.workspace_bytes, 1))},
                                  field.options().dtype(at::kByte));
    const double one = 1.0, zero = 0.0;
    // One convolution per step, ping-ponging so that the last step writes out; field is only read.
    const double* src = field.data_ptr<double>();
    for (int64_t s = 0; s < steps; ++s) {
        double* dst = (steps - s) % 2 == 1 ? out.data_ptr<double>() : scratch.data_ptr<double>();
        CHECK_CUDNN(cudnnConvolutionForward(handle, &one, d.grid, src, d.filter, weights.data_ptr<double>(), d.conv,
                                            choice.algo, workspace.data_ptr(), choice.workspace_bytes, &zero, d.grid, dst));
        src = dst;
    }
    return out;
}
"""

_ATEN_CONV2D = """#include <ATen/ops/conv2d.h>
// ATen's conv2d (cuDNN underneath) in FP64, once per step.
at::Tensor stencil2d(at::Tensor field, at::Tensor weights, int64_t steps) {
    check_arguments(field, weights, steps);
    const int64_t n = field.size(0);
    const auto w = weights.view({1, 1, K, K});
    auto x = field.view({1, 1, n, n});
    for (int64_t s = 0; s < steps; ++s) x = at::conv2d(x, w, /*bias=*/{}, /*stride=*/{1, 1}, /*padding=*/{R, R});
    return x.view({n, n});
}
"""

_ATEN_FFT = """#include <ATen/ops/fft_irfft2.h>
#include <ATen/ops/fft_rfft2.h>
#include <ATen/ops/zeros.h>
// The stencil as a product in Fourier space, once per step: the field zero-padded to m >= n + 2R (so the
// cyclic convolution does not wrap), times the spectrum of the flipped weights, cropped back to n x n.
// m has only the factors 2, 3, 5 and 7, which cuFFT transforms fastest.
int64_t fft_size(int64_t at_least) {
    for (int64_t m = at_least;; ++m) {
        int64_t rest = m;
        for (int64_t p : {2, 3, 5, 7})
            while (rest % p == 0) rest /= p;
        if (rest == 1) return m;
    }
}

at::Tensor stencil2d(at::Tensor field, at::Tensor weights, int64_t steps) {
    check_arguments(field, weights, steps);
    const int64_t n = field.size(0), m = fft_size(n + 2 * R);
    const std::vector<int64_t> shape{m, m};
    auto kernel = at::zeros({m, m}, field.options());
    kernel.narrow(0, 0, K).narrow(1, 0, K).copy_(weights.flip({0, 1}));
    const auto spectrum = at::fft_rfft2(kernel);
    auto padded = at::zeros({m, m}, field.options());
    auto x = field;
    for (int64_t s = 0; s < steps; ++s) {
        padded.narrow(0, 0, n).narrow(1, 0, n).copy_(x);
        const auto full = at::fft_irfft2(at::fft_rfft2(padded).mul(spectrum), shape);
        x = full.narrow(0, R, n).narrow(1, R, n).contiguous();
    }
    return x;
}
"""


# --- the judge's harness -------------------------------------------------------------------------


class CudaStencilHarness:
    """What the cuda judge and runner need to check and time `stencil2d` candidates of one task (see
    `hiera_plugins.cuda.judge` for the interface).

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
        task = {"label": f"task n={self.n}", "n": self.n, "first_seed_only": True}
        return [task] + [{"label": f"n={s}", "n": s, "first_seed_only": False} for s in _check_sizes(self.n, remeasure)]

    def seeds(self, remeasure: bool) -> tuple[int, ...]:
        return (101, 102, 103) if remeasure else (1, 2, 3)

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
        options = {"dtype": torch.float64, "device": "cuda"}
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
        """The FP64 result of `steps` shifted-add applications, computed with CuPy from the inputs."""
        import torch

        import cupy

        field, weights = inputs
        with cupy.cuda.Device(field.device.index):
            result = shifted_add_reference(
                cupy.from_dlpack(field.detach()), cupy.asnumpy(cupy.from_dlpack(weights.detach())),
                self.steps, zeros=cupy.zeros,
            )
            cupy.get_default_memory_pool().free_all_blocks()  # the temporaries; `result` stays
        return torch.from_dlpack(result)

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
    return f"CuPy {cupy.__version__} (FP64 shifted adds)"
