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
    "relu": "fmaxf({v}, 0.0f)",
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
    "hardsigmoid": "fminf(fmaxf({v} / 6.0f + 0.5f, 0.0f), 1.0f)",
    "hardswish": "({v} * fminf(fmaxf({v} + 3.0f, 0.0f), 6.0f) / 6.0f)",
    "mish": "({v} * tanhf(log1pf(expf({v}))))",
    "selu": "(1.0507009873554805f * ({v} > 0.0f ? {v} : 1.6732632423543772f * expm1f({v})))",
    "softsign": "({v} / (fabsf({v}) + 1.0f))",
}
"""C expressions of one float `{v}` for the unary pointwise operators (their PyTorch definitions)."""

BINARY_C = {"add": "({a} + {b})", "sub": "({a} - {b})", "mul": "({a} * {b})", "truediv": "({a} / {b})",
            "div": "({a} / {b})", "maximum": "fmaxf({a}, {b})", "minimum": "fminf({a}, {b})"}


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
        expression = "{v}" if lo is None else f"fmaxf({{v}}, {flit(lo)})"
        return expression if hi is None else f"fminf({expression}, {flit(hi)})"
    raise ValueError(f"no pointwise expression for {name}")


def kernel_source(index: int, steps: list[Step]) -> str:
    """The kernel and host function `pointwise_<index>(input, {operands})` for one chain."""
    operands, body = [], []
    for step in steps:
        names = {}
        for tensor in step.tensors:
            names[f"t{len(names)}"] = f"a{len(operands)}.data[offset_of(i, shape, a{len(operands)}.stride)]"
            operands.append(tensor)
        body.append(f"        v = {step.expression.format(v='v', **names)};")
    params = "".join(f"Operand a{k}, " for k in range(len(operands)))
    setup = "".join(f"    const Operand a{k} = operand(operands[{k}], x, shape);\n" for k in range(len(operands)))
    args = "".join(f"a{k}, " for k in range(len(operands)))
    lines = "\n".join(body)
    return f"""
__global__ void pointwise_kernel_{index}(const float* __restrict__ x, {params}float* __restrict__ out, int64_t n, Shape shape) {{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {{
        float v = x[i];
{lines}
        out[i] = v;
    }}
}}

at::Tensor pointwise_{index}(const at::Tensor& input, const std::vector<at::Tensor>& operands) {{
    TORCH_CHECK(input.is_cuda() && input.scalar_type() == at::kFloat, "pointwise_{index}: a float32 CUDA input");
    TORCH_CHECK(operands.size() == {len(operands)}, "pointwise_{index}: {len(operands)} operands");
    const at::Tensor x = input.contiguous();
    at::Tensor out = at::empty_like(x);
    const Shape shape = shape_of(x);
{setup}    const int64_t n = x.numel();
    if (n == 0) return out;
    const int threads = 256;
    const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
    pointwise_kernel_{index}<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), {args}out.data_ptr<float>(), n, shape);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}}
"""


PRELUDE = """
// Fused pointwise chains (expert move fuse_pointwise): one kernel per chain, operands broadcast by strides.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

constexpr int MAX_DIMS = 8;
struct Shape {
    int dims;
    int64_t size[MAX_DIMS];
};
struct Operand {
    const float* data;
    int64_t stride[MAX_DIMS];  // 0 along broadcast dimensions
};

Shape shape_of(const at::Tensor& x) {
    TORCH_CHECK(x.dim() <= MAX_DIMS, "at most ", MAX_DIMS, " dimensions");
    Shape s{static_cast<int>(x.dim()), {}};
    for (int d = 0; d < s.dims; ++d) s.size[d] = x.size(d);
    return s;
}

// `t` broadcast to x's shape (expand refuses a tensor that does not broadcast to it).
Operand operand(const at::Tensor& t, const at::Tensor& x, const Shape& shape) {
    TORCH_CHECK(t.scalar_type() == at::kFloat && t.device() == x.device(), "operands are float32 on the input's device");
    const at::Tensor e = t.expand(x.sizes());
    Operand o{e.data_ptr<float>(), {}};
    for (int d = 0; d < shape.dims; ++d) o.stride[d] = e.stride(d);
    return o;
}

__device__ __forceinline__ int64_t offset_of(int64_t i, const Shape& shape, const int64_t* stride) {
    int64_t offset = 0;
    for (int d = shape.dims - 1; d >= 0; --d) {
        offset += (i % shape.size[d]) * stride[d];
        i /= shape.size[d];
    }
    return offset;
}
"""
