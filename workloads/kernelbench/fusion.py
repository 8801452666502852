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

BINARY_C = {
    "add": "({a} + {b})",
    "sub": "({a} - {b})",
    "mul": "({a} * {b})",
    "truediv": "({a} / {b})",
    "div": "({a} / {b})",
    "maximum": "max_nan({a}, {b})",
    "minimum": "min_nan({a}, {b})",
}


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
    operands: list[Any] = []
    body: list[str] = []
    for step in steps:
        names: dict[str, str] = {}
        for tensor in step.tensors:
            names[f"t{len(names)}"] = f"o{len(operands)}[u].v[e]"
            operands.append(tensor)
        body.append(f"                        v = {step.expression.format(v='v', **names)};")
    refs = "".join(f"    const Operand& a{k} = layout.operands[{k}];\n" for k in range(len(operands)))
    bases = "".join(f"        const int64_t base{k} = row_offset(row, layout, a{k});\n" for k in range(len(operands)))
    arrays = "".join(f", o{k}[UNROLL]" for k in range(len(operands)))
    loads = "".join(
        f"\n                    o{k}[u] = load_pack<VEC>(a{k}.data + base{k} + j * VEC * a{k}.inner, a{k}.inner);"
        for k in range(len(operands))
    )
    lines = "\n".join(body)
    launch = "pointwise_kernel_{i}<{n}><<<grid_of(layout, {n}), block_of(layout, {n}), 0, stream>>>(in, out_data, layout);"
    return f"""
template <int VEC>
__global__ void pointwise_kernel_{index}(const float* __restrict__ x, float* __restrict__ out, const Layout layout) {{
{refs}    const int64_t chunks = layout.inner / VEC;  // of VEC consecutive elements of a row
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t row = blockIdx.y * (int64_t)blockDim.y + threadIdx.y; row < layout.rows; row += (int64_t)gridDim.y * blockDim.y) {{
{bases}        for (int64_t j0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j0 < chunks; j0 += UNROLL * stride) {{
            Pack<VEC> xs[UNROLL]{arrays};
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {{  // all loads first: UNROLL of each in flight per thread
                const int64_t j = j0 + u * stride;
                if (j < chunks) {{
                    xs[u] = load_pack<VEC>(x + row * layout.inner + j * VEC, 1);{loads}
                }}
            }}
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {{
                const int64_t j = j0 + u * stride;
                if (j < chunks) {{
                    Pack<VEC> result;
#pragma unroll
                    for (int e = 0; e < VEC; ++e) {{
                        float v = xs[u].v[e];
{lines}
                        result.v[e] = v;
                    }}
                    store_pack<VEC>(out + row * layout.inner + j * VEC, result);
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
    const float* in = x.data_ptr<float>();
    float* out_data = out.data_ptr<float>();
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    if (vectorisable(layout, {len(operands)}, in, out_data))
        {launch.format(i=index, n=4)}
    else
        {launch.format(i=index, n=1)}
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

// 256 threads: along the row (in chunks of `vec` elements), as many warps as it fills (up to all 8); the rest
// take further rows.
dim3 block_of(const Layout& layout, int vec) {
    const int64_t along = std::min<int64_t>(256, (layout.inner / vec + 31) / 32 * 32);
    return dim3(static_cast<unsigned>(along), static_cast<unsigned>(256 / along));
}

// Each thread walks PER_THREAD chunks of its row or more. A row's operand offsets take a division and a
// modulo per outer dimension, issued once per warp and row: with one element per thread they were the
// kernel's cost (level 2 task 1 on the H200: 1.35 ms slower than the two ATen ops it replaced).
constexpr int64_t PER_THREAD = 16;
// Loads a thread issues before it computes: one at a time left the memory system idle (level 1 task 25, Swish,
// on the H200: 7.08 ms for one read and one write of 6.4 GB, 1.8 TB/s).
constexpr int UNROLL = 4;

dim3 grid_of(const Layout& layout, int vec) {
    const dim3 block = block_of(layout, vec);
    const int64_t along = block.x * PER_THREAD;
    return dim3(static_cast<unsigned>(std::min<int64_t>((layout.inner / vec + along - 1) / along, 1024)),
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

// VEC consecutive floats, loaded and stored in one access: 16 bytes where VEC is 4. Four-byte accesses, four
// in flight per thread, moved 3.0 TB/s where ATen's vectorised kernels move 4.15 (the pure-CUDA ReLU of level 1
// task 19 on the H200: 4.27 ms against eager's 3.10 ms for 12.9 GB).
template <int VEC>
struct alignas(4 * VEC) Pack {
    float v[VEC];
};

// VEC values `inner` apart from `p`: one access where they are consecutive (`vectorisable` checked the
// alignment), one per value otherwise (0 apart: a value broadcast along the row).
template <int VEC>
__device__ __forceinline__ Pack<VEC> load_pack(const float* p, int64_t inner) {
    if (VEC > 1 && inner == 1) return *reinterpret_cast<const Pack<VEC>*>(p);
    Pack<VEC> pack;
#pragma unroll
    for (int e = 0; e < VEC; ++e) pack.v[e] = p[e * inner];
    return pack;
}

// A streaming store (written once, not read again here): a plain store of the Pack became four 4-byte stores in
// half of the unrolled iterations (nvcc 13.0, sm_90).
template <int VEC>
__device__ __forceinline__ void store_pack(float* p, const Pack<VEC>& pack) {
    if constexpr (VEC == 4) {
        __stcs(reinterpret_cast<float4*>(p), make_float4(pack.v[0], pack.v[1], pack.v[2], pack.v[3]));
    } else {
        *p = pack.v[0];
    }
}

// Whether the 16-byte accesses are sound: rows a multiple of 4 long, and every such access aligned.
bool vectorisable(const Layout& layout, int operands, const float* x, const float* out) {
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    if (layout.inner % 4 != 0 || !aligned(x) || !aligned(out)) return false;
    for (int k = 0; k < operands; ++k) {
        const Operand& a = layout.operands[k];
        if (a.inner != 1) continue;  // loaded a value at a time
        if (!aligned(a.data)) return false;
        for (int d = 0; d < layout.outer_dims; ++d)
            if (a.stride[d] % 4 != 0) return false;
    }
    return true;
}
"""
