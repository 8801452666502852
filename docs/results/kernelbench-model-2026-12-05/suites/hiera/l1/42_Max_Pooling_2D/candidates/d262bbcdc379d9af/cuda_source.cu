// MaxPool2d (k=4, s=1, p=1, d=1) for [32,64,512,512] -> [32,64,511,511], FP32.
// Row-strip kernel: 128 threads span one input row (one float4 per thread), horizontal
// 4-wide window max via warp shuffles (+ lane-0 / lane-31 edge loads packed in one float2),
// vertical 4-tall max slides over registers h0,h1,h2, and a ring of 4 rows is prefetched
// ahead in registers. Coalesced scalar streaming stores through a warp-private smem transpose.
// Config: strip 103 output rows per block, prefetch depth 4, __launch_bounds__(128, 8).
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>
#include <cstdint>

namespace {

constexpr int kN = 32;
constexpr int kC = 64;
constexpr int kH = 512;
constexpr int kW = 512;
constexpr int kOH = 511;
constexpr int kOW = 511;
constexpr int kThreads = 128;
constexpr int kStrip = 103;      // output rows per block
constexpr int kDepth = 4;      // input rows prefetched ahead (register ring)
constexpr int kMinBlocks = 8;  // resident blocks per SM requested from ptxas
constexpr int kUnroll = 12;     // multiple of kDepth (and of 3 where cheap) -> ring/h rotation are renames
constexpr unsigned kFull = 0xffffffffu;

static_assert(kUnroll % kDepth == 0, "unroll must be a multiple of the prefetch depth");

// NaN-propagating max (like PyTorch's max_pool2d) in one instruction: PTX max.NaN.f32 (sm_80+).
__device__ __forceinline__ float nmax(float a, float b) {
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

struct RowRaw {
    float4 a;  // columns 4t..4t+3
    float2 e;  // lane 0: e.x = column 4t-1; lane 31: (column 4t+4, column 4t+5); else unused
};

// Loads one input row's slice for this thread; rows with ok == false are -INFINITY padding
// and are never dereferenced. 'ok' is block-uniform.
__device__ __forceinline__ RowRaw load_row(const float* __restrict__ xp, int r, bool ok, int t,
                                           bool has_left, bool has_right) {
    RowRaw raw;
    raw.a = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
    raw.e = make_float2(-INFINITY, -INFINITY);
    if (ok) {
        const float* row = xp + r * kW;
        raw.a = __ldg(reinterpret_cast<const float4*>(row) + t);
        if (has_left) raw.e.x = __ldg(row + 4 * t - 1);
        if (has_right) raw.e = __ldg(reinterpret_cast<const float2*>(row + 4 * t + 4));
    }
    return raw;
}

// Horizontal 4-wide window maxima for output columns 4t..4t+3 (input columns 4t-1..4t+5).
__device__ __forceinline__ float4 hpass(const RowRaw& raw, bool is0, bool is31) {
    float left = __shfl_up_sync(kFull, raw.a.w, 1);
    float q0 = __shfl_down_sync(kFull, raw.a.x, 1);
    float q1 = __shfl_down_sync(kFull, raw.a.y, 1);
    if (is0) left = raw.e.x;
    if (is31) { q0 = raw.e.x; q1 = raw.e.y; }
    const float p0 = nmax(left, raw.a.x);
    const float p1 = nmax(raw.a.x, raw.a.y);
    const float p2 = nmax(raw.a.y, raw.a.z);
    const float p3 = nmax(raw.a.z, raw.a.w);
    const float p4 = nmax(raw.a.w, q0);
    const float p5 = nmax(q0, q1);
    return make_float4(nmax(p0, p2), nmax(p1, p3), nmax(p2, p4), nmax(p3, p5));
}

__device__ __forceinline__ float4 max4v(const float4& a, const float4& b) {
    return make_float4(nmax(a.x, b.x), nmax(a.y, b.y), nmax(a.z, b.z), nmax(a.w, b.w));
}

__global__ void __launch_bounds__(kThreads, kMinBlocks)
maxpool2d_k4s1p1_kernel(const float* __restrict__ x, float* __restrict__ out) {
    __shared__ __align__(16) float s_buf[kThreads / 32][kThreads];

    const int t = threadIdx.x;
    const int lane = t & 31;
    const int w = t >> 5;
    const bool is0 = (lane == 0);
    const bool is31 = (lane == 31);
    const bool has_left = is0 && (t > 0);
    const bool has_right = is31 && (t < kThreads - 1);

    const int oh0 = blockIdx.x * kStrip;
    const int nrows = min(kStrip, kOH - oh0);  // >= 1
    const int rlast = oh0 + nrows + 1;         // last input row this strip needs (oh1 + 2)

    const float* __restrict__ xp = x + (size_t)blockIdx.y * (size_t)(kH * kW);
    float* __restrict__ op = out + (size_t)blockIdx.y * (size_t)(kOH * kOW) + (oh0 * kOW + 128 * w + lane);
    float* sw = &s_buf[w][0];
    const bool st3 = (128 * w + 96 + lane) < kOW;

    // Prologue: 3 window rows + kDepth prefetch rows, all issued before any use.
    const RowRaw rowA = load_row(xp, oh0 - 1, oh0 >= 1, t, has_left, has_right);
    const RowRaw rowB = load_row(xp, oh0, true, t, has_left, has_right);
    const RowRaw rowC = load_row(xp, oh0 + 1, true, t, has_left, has_right);
    RowRaw ring[kDepth];
#pragma unroll
    for (int j = 0; j < kDepth; ++j) {
        const int r = oh0 + 2 + j;
        ring[j] = load_row(xp, r, (r <= rlast) && (r < kH), t, has_left, has_right);
    }

    float4 h0 = hpass(rowA, is0, is31);
    float4 h1 = hpass(rowB, is0, is31);
    float4 h2 = hpass(rowC, is0, is31);

#pragma unroll 1
    for (int base = 0; base < nrows; base += kUnroll) {
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) {
            const int s = base + j;
            if (s < nrows) {  // block-uniform
                const float4 h3 = hpass(ring[j % kDepth], is0, is31);
                const int r = oh0 + 2 + kDepth + s;  // row needed kDepth steps from now
                ring[j % kDepth] = load_row(xp, r, (r <= rlast) && (r < kH), t, has_left, has_right);

                const float4 o = max4v(max4v(h0, h1), max4v(h2, h3));
                *reinterpret_cast<float4*>(sw + 4 * lane) = o;
                __syncwarp();
                float* orow = op + s * kOW;
                __stcs(orow, sw[lane]);
                __stcs(orow + 32, sw[32 + lane]);
                __stcs(orow + 64, sw[64 + lane]);
                if (st3) __stcs(orow + 96, sw[96 + lane]);
                __syncwarp();

                h0 = h1;
                h1 = h2;
                h2 = h3;
            }
        }
    }
}

}  // namespace

torch::Tensor forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == at::kFloat, "x must be float32");
    TORCH_CHECK(x.dim() == 4 && x.size(0) == kN && x.size(1) == kC && x.size(2) == kH && x.size(3) == kW,
                "x must have shape [32, 64, 512, 512]");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    if ((reinterpret_cast<std::uintptr_t>(x.data_ptr<float>()) & 15u) != 0) {
        auto tmp = at::empty(x.sizes(), x.options());
        tmp.copy_(x);
        x = tmp;
    }
    auto out = at::empty({kN, kC, kOH, kOW}, x.options());
    dim3 grid((kOH + kStrip - 1) / kStrip, kN * kC);
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    maxpool2d_k4s1p1_kernel<<<grid, kThreads, 0, stream>>>(x.data_ptr<float>(), out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
