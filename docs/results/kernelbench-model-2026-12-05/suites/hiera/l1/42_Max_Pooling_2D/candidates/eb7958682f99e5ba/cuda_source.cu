// Custom MaxPool2d (k=4, s=1, p=1, d=1) for [32,64,512,512] -> [32,64,511,511], FP32.
// Row-strip kernel: 128 threads span one input row (4 columns per thread), horizontal
// 4-wide max via warp shuffles (separable pair maxima), vertical 4-tall max streamed in
// registers with reused vertical pair maxima (loads prefetched two rows ahead), coalesced scalar stores through a
// warp-private shared-memory transpose. Max uses PTX max.NaN.f32 (NaN-propagating).
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
constexpr int kStrip = 128;
constexpr unsigned kFull = 0xffffffffu;

// NaN-propagating max in one instruction (sm_80+).
__device__ __forceinline__ float nmax(float a, float b) {
    float d;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}

struct RowRaw {
    float4 a;   // columns 4t..4t+3
    float l;    // column 4t-1 (used by lane 0 only)
    float2 rr;  // columns 4t+4, 4t+5 (used by lane 31 only)
};

__device__ __forceinline__ RowRaw load_row(const float* __restrict__ xp, int r, int t, int lane) {
    RowRaw raw;
    raw.a = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
    raw.l = -INFINITY;
    raw.rr = make_float2(-INFINITY, -INFINITY);
    if (r >= 0 && r < kH) {  // block-uniform
        const float* row = xp + (size_t)r * kW;
        raw.a = __ldg(reinterpret_cast<const float4*>(row) + t);
        if (lane == 0 && t > 0) raw.l = __ldg(row + 4 * t - 1);
        if (lane == 31 && t < kThreads - 1)
            raw.rr = __ldg(reinterpret_cast<const float2*>(row + 4 * t + 4));
    }
    return raw;
}

// Horizontal 4-wide window maxima for output columns 4t..4t+3 (input columns 4t-1..4t+5).
__device__ __forceinline__ float4 hpass(const RowRaw& raw, int lane) {
    float left = __shfl_up_sync(kFull, raw.a.w, 1);
    float r0 = __shfl_down_sync(kFull, raw.a.x, 1);
    float r1 = __shfl_down_sync(kFull, raw.a.y, 1);
    if (lane == 0) left = raw.l;
    if (lane == 31) { r0 = raw.rr.x; r1 = raw.rr.y; }
    const float p0 = nmax(left, raw.a.x);
    const float p1 = nmax(raw.a.x, raw.a.y);
    const float p2 = nmax(raw.a.y, raw.a.z);
    const float p3 = nmax(raw.a.z, raw.a.w);
    const float p4 = nmax(raw.a.w, r0);
    const float p5 = nmax(r0, r1);
    return make_float4(nmax(p0, p2), nmax(p1, p3), nmax(p2, p4), nmax(p3, p5));
}

__device__ __forceinline__ float4 max4v(const float4& a, const float4& b) {
    return make_float4(nmax(a.x, b.x), nmax(a.y, b.y), nmax(a.z, b.z), nmax(a.w, b.w));
}

template <int R>
__global__ void __launch_bounds__(kThreads)
maxpool2d_k4s1p1_kernel(const float* __restrict__ x, float* __restrict__ out) {
    __shared__ __align__(16) float s_buf[kThreads / 32][kThreads + 4];

    const int t = threadIdx.x;
    const int lane = t & 31;
    const int w = t >> 5;
    const int plane = blockIdx.y;
    const int oh0 = blockIdx.x * R;
    const int oh1 = min(oh0 + R - 1, kOH - 1);

    const float* __restrict__ xp = x + (size_t)plane * (kH * kW);
    float* __restrict__ op = out + (size_t)plane * (kOH * kOW);
    float* sw = &s_buf[w][0];

    const RowRaw rA = load_row(xp, oh0 - 1, t, lane);
    const RowRaw rB = load_row(xp, oh0, t, lane);
    const RowRaw rC = load_row(xp, oh0 + 1, t, lane);
    RowRaw n0 = load_row(xp, oh0 + 2, t, lane);
    RowRaw n1 = n0;
    if (oh0 + 1 <= oh1) n1 = load_row(xp, oh0 + 3, t, lane);

    const float4 hA = hpass(rA, lane);
    const float4 hB = hpass(rB, lane);
    float4 h2 = hpass(rC, lane);
    // q[r] = max(h[r], h[r+1]); out[oh] = max(q[oh-1], q[oh+1]).
    float4 qa = max4v(hA, hB);  // q[oh-1]
    float4 qb = max4v(hB, h2);  // q[oh]

#pragma unroll 2
    for (int oh = oh0; oh <= oh1; ++oh) {
        const RowRaw cur = n0;  // row oh+2
        n0 = n1;                // row oh+3
        if (oh + 2 <= oh1) n1 = load_row(xp, oh + 4, t, lane);  // prefetch two rows ahead

        const float4 h3 = hpass(cur, lane);   // row oh+2
        const float4 qn = max4v(h2, h3);      // q[oh+1]
        const float4 o = max4v(qa, qn);

        *reinterpret_cast<float4*>(sw + 4 * lane) = o;
        __syncwarp();
        float* orow = op + (size_t)oh * kOW + 128 * w + lane;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            if (128 * w + 32 * k + lane < kOW) __stcs(orow + 32 * k, sw[32 * k + lane]);
        }
        __syncwarp();

        qa = qb;
        qb = qn;
        h2 = h3;
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
    maxpool2d_k4s1p1_kernel<kStrip><<<grid, kThreads, 0, stream>>>(x.data_ptr<float>(), out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
