"""An expert move that needs no model: runs of pointwise operators in the translated forward (a bias add, an
activation, a scaling, ...) become one generated CUDA kernel each, so their intermediates never go to DRAM.

A run is a chain of pointwise nodes, each the only user of the one before, starting from any tensor; its other
operands are number literals or tensors that broadcast to the chain's input (checked when the call runs:
`expand` refuses anything else). Every value is FP32, as KernelBench's contract is.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

UNARY_C = {
    "relu": "max_nan({v}, 0.0f)",
    "sigmoid": "(1.0f / (1.0f + expf(-{v})))",
    "tanh": "tanhf({v})",
    "exp": "expf({v})",
    "log": "logf({v})",
    "abs": "fabsf({v})",
    "sqrt": "sqrtf({v})",
    "rsqrt": "rsqrtf({v})",
    "erf": "erff({v})",
    "neg": "(-{v})",
    "silu": "({v} / (1.0f + expf(-{v})))",
    "square": "({v} * {v})",
    "log1p": "log1pf({v})",
    "sin": "sinf({v})",
    "cos": "cosf({v})",
    "reciprocal": "(1.0f / {v})",
    "floor": "floorf({v})",
    "ceil": "ceilf({v})",
    "hardsigmoid": "min_nan(max_nan({v} / 6.0f + 0.5f, 0.0f), 1.0f)",
    "hardswish": "({v} * min_nan(max_nan({v} + 3.0f, 0.0f), 6.0f) / 6.0f)",
    "mish": "({v} * tanhf(log1pf(expf({v}))))",
    "selu": "(1.0507009873554805f * ({v} > 0.0f ? {v} : 1.6732632423543772f * expm1f({v})))",
    "softsign": "({v} / (fabsf({v}) + 1.0f))",
}
"""C expressions of one float `{v}` for the unary pointwise operators (their PyTorch definitions)."""

BINARY_C = {"add": "({a} + {b})", "sub": "({a} - {b})", "mul": "({a} * {b})", "truediv": "({a} / {b})",
            "div": "({a} / {b})", "maximum": "max_nan({a}, {b})", "minimum": "min_nan({a}, {b})"}


def flit(value: Any) -> str:
    """A float literal."""
    value = float(value)
    if math.isnan(value):
        return "NAN"
    if math.isinf(value):
        return "INFINITY" if value > 0 else "-INFINITY"
    return repr(value) + "f"


@attrs.frozen
class Step:
    """One pointwise operator of a chain: a C expression of `{v}` (the running value) and `{t0}`, `{t1}`, ...
    (this step's tensor operands, fx nodes in `tensors`)."""

    expression: str
    tensors: tuple[Any, ...] = ()


def parametric(name: str, params: dict[str, Any]) -> str:
    """The C expression of a pointwise operator with parameters: gelu, leaky_relu, elu, softplus, clamp."""
    if name == "gelu":
        if params.get("approximate", "none") == "tanh":
            return "(0.5f * {v} * (1.0f + tanhf(0.7978845608028654f * ({v} + 0.044715f * {v} * {v} * {v}))))"
        return "(0.5f * {v} * (1.0f + erff({v} * 0.7071067811865476f)))"
    if name == "leaky_relu":
        return "({v} > 0.0f ? {v} : {v} * " + flit(params.get("negative_slope", 0.01)) + ")"
    if name == "elu":
        return "({v} > 0.0f ? {v} : " + flit(params.get("alpha", 1.0)) + " * expm1f({v}))"
    if name == "softplus":
        beta, threshold = float(params.get("beta", 1.0)), float(params.get("threshold", 20.0))
        return f"({{v}} * {flit(beta)} > {flit(threshold)} ? {{v}} : log1pf(expf({{v}} * {flit(beta)})) / {flit(beta)})"
    if name == "clamp":
        lo, hi = params.get("min"), params.get("max")
        expression = "{v}" if lo is None else f"max_nan({{v}}, {flit(lo)})"
        return expression if hi is None else f"min_nan({expression}, {flit(hi)})"
    raise ValueError(f"no pointwise expression for {name}")


def kernel_source(index: int, steps: list[Step]) -> str:
    """The kernel and host function `pointwise_<index>(input, {operands})` for one chain."""
    operands, body = [], []
    for step in steps:
        names = {}
        for tensor in step.tensors:
            names[f"t{len(names)}"] = f"o{len(operands)}[u]"
            operands.append(tensor)
        body.append(f"                    v = {step.expression.format(v='v', **names)};")
    refs = "".join(f"    const Operand& a{k} = layout.operands[{k}];\n" for k in range(len(operands)))
    bases = "".join(f"        const int64_t base{k} = row_offset(row, layout, a{k});\n" for k in range(len(operands)))
    arrays = "".join(f", o{k}[UNROLL]" for k in range(len(operands)))
    loads = "".join(f"\n                    o{k}[u] = a{k}.data[base{k} + j * a{k}.inner];" for k in range(len(operands)))
    lines = "\n".join(body)
    return f"""
__global__ void pointwise_kernel_{index}(const float* __restrict__ x, float* __restrict__ out, const Layout layout) {{
{refs}    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t row = blockIdx.y * (int64_t)blockDim.y + threadIdx.y; row < layout.rows; row += (int64_t)gridDim.y * blockDim.y) {{
{bases}        for (int64_t j0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j0 < layout.inner; j0 += UNROLL * stride) {{
            float xs[UNROLL]{arrays};
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {{  // all loads first: UNROLL of each in flight per thread
                const int64_t j = j0 + u * stride;
                if (j < layout.inner) {{
                    xs[u] = x[row * layout.inner + j];{loads}
                }}
            }}
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {{
                const int64_t j = j0 + u * stride;
                if (j < layout.inner) {{
                    float v = xs[u];
{lines}
                    out[row * layout.inner + j] = v;
                }}
            }}
        }}
    }}
}}

at::Tensor pointwise_{index}(const at::Tensor& input, const std::vector<at::Tensor>& operands) {{
    TORCH_CHECK(input.is_cuda() && input.scalar_type() == at::kFloat, "pointwise_{index}: a float32 CUDA input");
    TORCH_CHECK(operands.size() == {len(operands)}, "pointwise_{index}: {len(operands)} operands");
    const at::Tensor x = input.contiguous();
    at::Tensor out = at::empty_like(x);
    if (x.numel() == 0) return out;
    const Layout layout = layout_of(x, operands);
    pointwise_kernel_{index}<<<grid_of(layout), block_of(layout), 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), out.data_ptr<float>(), layout);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}}
"""


PRELUDE = """
// Fused pointwise chains (expert move fuse_pointwise): one kernel per chain, operands broadcast by strides.
// The input's dimensions are merged wherever every operand allows it; the last merged dimension is a row,
// so a thread block finds each operand's offset once per row and then walks the row with one stride.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

constexpr int MAX_DIMS = 8;
constexpr int MAX_OPERANDS = 8;
struct Operand {
    const float* data;
    int64_t stride[MAX_DIMS];  // per outer dimension; 0 along broadcast dimensions
    int64_t inner;             // along the row
};
struct Layout {
    int outer_dims;
    int64_t size[MAX_DIMS];  // the outer dimensions' sizes
    int64_t rows, inner;
    Operand operands[MAX_OPERANDS];
};

// Each operand broadcast to x's shape (expand refuses one that does not broadcast), then the dimensions
// merged: size-1 dimensions dropped, and a dimension folded into the next where every operand's strides
// make the pair one dimension (x is contiguous, so only the operands decide).
Layout layout_of(const at::Tensor& x, const std::vector<at::Tensor>& operands) {
    TORCH_CHECK(x.dim() <= MAX_DIMS && operands.size() <= MAX_OPERANDS, "at most ", MAX_DIMS, " dimensions and ",
                MAX_OPERANDS, " operands");
    std::vector<at::Tensor> expanded;
    for (const at::Tensor& t : operands) {
        TORCH_CHECK(t.scalar_type() == at::kFloat && t.device() == x.device(), "operands are float32 on the input's device");
        expanded.push_back(t.expand(x.sizes()));
    }
    std::vector<int64_t> sizes;
    std::vector<std::vector<int64_t>> strides(operands.size());
    for (int64_t d = 0; d < x.dim(); ++d) {
        if (x.size(d) == 1) continue;
        bool merge = !sizes.empty();
        for (size_t k = 0; k < expanded.size() && merge; ++k)
            merge = strides[k].back() == expanded[k].stride(d) * x.size(d);
        if (merge) {
            sizes.back() *= x.size(d);
            for (size_t k = 0; k < expanded.size(); ++k) strides[k].back() = expanded[k].stride(d);
        } else {
            sizes.push_back(x.size(d));
            for (size_t k = 0; k < expanded.size(); ++k) strides[k].push_back(expanded[k].stride(d));
        }
    }
    if (sizes.empty()) {  // a single element
        sizes.push_back(1);
        for (auto& s : strides) s.push_back(0);
    }
    Layout layout{};
    layout.outer_dims = static_cast<int>(sizes.size()) - 1;
    layout.inner = sizes.back();
    layout.rows = x.numel() / layout.inner;
    for (int d = 0; d < layout.outer_dims; ++d) layout.size[d] = sizes[d];
    for (size_t k = 0; k < expanded.size(); ++k) {
        layout.operands[k].data = expanded[k].data_ptr<float>();
        layout.operands[k].inner = strides[k].back();
        for (int d = 0; d < layout.outer_dims; ++d) layout.operands[k].stride[d] = strides[k][d];
    }
    return layout;
}

// 256 threads: along the row, as many warps as it fills (up to all 8); the rest take further rows.
dim3 block_of(const Layout& layout) {
    const int64_t along = std::min<int64_t>(256, (layout.inner + 31) / 32 * 32);
    return dim3(static_cast<unsigned>(along), static_cast<unsigned>(256 / along));
}

// Each thread walks PER_THREAD elements of its row or more. A row's operand offsets take a division and a
// modulo per outer dimension, issued once per warp and row: with one element per thread they were the
// kernel's cost (level 2 task 1 on the H200: 1.35 ms slower than the two ATen ops it replaced).
constexpr int64_t PER_THREAD = 16;
// Loads a thread issues before it computes: one at a time left the memory system idle (level 1 task 25, Swish,
// on the H200: 7.08 ms for one read and one write of 6.4 GB, 1.8 TB/s).
constexpr int UNROLL = 4;

dim3 grid_of(const Layout& layout) {
    const dim3 block = block_of(layout);
    const int64_t along = block.x * PER_THREAD;
    return dim3(static_cast<unsigned>(std::min<int64_t>((layout.inner + along - 1) / along, 1024)),
                static_cast<unsigned>(std::min<int64_t>((layout.rows + block.y - 1) / block.y, 65535)));
}

// PyTorch's maximum, minimum, clamp and relu return NaN where an operand is NaN; fmaxf and fminf return the other.
__device__ __forceinline__ float max_nan(float a, float b) { return a != a ? a : (b != b ? b : fmaxf(a, b)); }
__device__ __forceinline__ float min_nan(float a, float b) { return a != a ? a : (b != b ? b : fminf(a, b)); }

__device__ __forceinline__ int64_t row_offset(int64_t row, const Layout& layout, const Operand& operand) {
    int64_t offset = 0;
    if (layout.rows <= 0xFFFFFFFFLL) {  // 32-bit division, several times cheaper than 64-bit
        uint32_t r = static_cast<uint32_t>(row);
        for (int d = layout.outer_dims - 1; d >= 0; --d) {
            const uint32_t size = static_cast<uint32_t>(layout.size[d]);
            offset += static_cast<int64_t>(r % size) * operand.stride[d];
            r /= size;
        }
        return offset;
    }
    for (int d = layout.outer_dims - 1; d >= 0; --d) {
        offset += (row % layout.size[d]) * operand.stride[d];
        row /= layout.size[d];
    }
    return offset;
}
"""
