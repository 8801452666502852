// Depthwise 3x3 conv, FP32. Method: smem-staged float4 streaming stores with shuffle halo, plus a
// register-lean partial-sum window and a rolling register prefetch of the next group's rows.
// One block per (plane, strip of 32 output rows); strips of one plane are adjacent in the 1-D grid.
// 128 threads, thread t owns output columns 4t..4t+3. Each input row: one float4 per thread, halo
// columns 4t+4, 4t+5 from the neighbour lane via shuffle (lane 31 of warps 0..2 loads them itself).
// Instead of keeping the two previous input rows (12 registers), each thread keeps the two pending output
// partial sums (8 registers); the fmaf chain is in exactly the same order as the 3x3 window
// (row oy taps 0..2, then row oy+1 taps 3..5, then row oy+2 taps 6..8), so results are bit-identical.
// As soon as row u of the current group is consumed, the register is refilled with row u of the next
// group, so loads stay in flight through the compute, the barrier and the store phase.
// Output rows of a group (U=4 rows, contiguous in memory) are staged in smem and written as one flat
// 16 B-aligned float4 stream.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <cstdint>

namespace {

constexpr int kN = 64;
constexpr int kC = 128;
constexpr int kH = 256;
constexpr int kW = 512;
constexpr int kOH = 254;
constexpr int kOW = 510;
constexpr int kThreads = 128;
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ void load_row(const float* __restrict__ src, bool fix, float (&v)[6]) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(src));
    float2 f = make_float2(0.f, 0.f);
    if (fix) f = __ldg(reinterpret_cast<const float2*>(src + 4));
    float hx = __shfl_down_sync(kFull, a.x, 1);
    float hy = __shfl_down_sync(kFull, a.y, 1);
    if (fix) { hx = f.x; hy = f.y; }
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = hx;  v[5] = hy;
}

// First tap row of a new output row: s = v[j]*w0 + v[j+1]*w1 + v[j+2]*w2 (same order as the window form).
__device__ __forceinline__ void taps_top(const float (&v)[6], const float (&w)[9], float (&b)[4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        float s = v[j] * w[0];
        s = fmaf(v[j + 1], w[1], s);
        s = fmaf(v[j + 2], w[2], s);
        b[j] = s;
    }
}
__device__ __forceinline__ void taps_mid(const float (&v)[6], const float (&w)[9], float (&a)[4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        float s = a[j];
        s = fmaf(v[j], w[3], s);
        s = fmaf(v[j + 1], w[4], s);
        s = fmaf(v[j + 2], w[5], s);
        a[j] = s;
    }
}
__device__ __forceinline__ void taps_bot(const float (&v)[6], const float (&w)[9], float (&a)[4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        float s = a[j];
        s = fmaf(v[j], w[6], s);
        s = fmaf(v[j + 1], w[7], s);
        s = fmaf(v[j + 2], w[8], s);
        a[j] = s;
    }
}

template <int ROWS, int U>
__global__ void __launch_bounds__(kThreads, 8)
dwconv3x3_prefetch_kernel(const float* __restrict__ x, const float* __restrict__ wt, float* __restrict__ out) {
    static_assert(ROWS % U == 0, "ROWS must be a multiple of U");
    static_assert(U % 2 == 0, "U must be even so every group starts at an even output row");
    static_assert(ROWS % 2 == 0 && (kOH - ROWS) % 2 == 0, "strip starts must be even");
    static_assert((U * kOW) % 4 == 0, "group must be a whole number of float4");
    constexpr int kStrips = (kOH + ROWS - 1) / ROWS;
    constexpr int kGroupVec = U * kOW / 4;
    constexpr int kStoreIters = (kGroupVec + kThreads - 1) / kThreads;

    __shared__ __align__(16) float sOut[U * kOW];

    const int strip = blockIdx.x % kStrips;
    const int p = blockIdx.x / kStrips;
    const int c = p % kC;
    const int t = threadIdx.x;
    const bool fix = ((t & 31) == 31) && (t < kThreads - 1);
    const bool hi = (4 * t + 2) < kOW;

    int oy0 = strip * ROWS;
    if (oy0 > kOH - ROWS) oy0 = kOH - ROWS;

    const float* __restrict__ xp = x + (size_t)p * (size_t)(kH * kW) + 4 * t;
    float* __restrict__ op = out + (size_t)p * (size_t)(kOH * kOW);

    // Prefetch the first group's rows before anything else.
    float4 a[U];
    float2 f[U];
#pragma unroll
    for (int u = 0; u < U; ++u) a[u] = __ldg(reinterpret_cast<const float4*>(xp + (oy0 + 2 + u) * kW));
#pragma unroll
    for (int u = 0; u < U; ++u) {
        f[u] = make_float2(0.f, 0.f);
        if (fix) f[u] = __ldg(reinterpret_cast<const float2*>(xp + (oy0 + 2 + u) * kW + 4));
    }

    float w[9];
#pragma unroll
    for (int i = 0; i < 9; ++i) w[i] = __ldg(wt + c * 9 + i);

    // A: output row oy (taps of rows oy, oy+1 done); B: output row oy+1 (taps of row oy+1 done).
    float A[4], B[4];
    {
        float v0[6], v1[6];
        load_row(xp + oy0 * kW, fix, v0);
        load_row(xp + (oy0 + 1) * kW, fix, v1);
        taps_top(v0, w, A);
        taps_mid(v1, w, A);
        taps_top(v1, w, B);
    }

#pragma unroll 1
    for (int oy = oy0; oy < oy0 + ROWS; oy += U) {
        const bool has_next = (oy + U) < (oy0 + ROWS);
        const float* __restrict__ nsrc = xp + (oy + U + 2) * kW;
#pragma unroll
        for (int u = 0; u < U; ++u) {
            float hx = __shfl_down_sync(kFull, a[u].x, 1);
            float hy = __shfl_down_sync(kFull, a[u].y, 1);
            if (fix) { hx = f[u].x; hy = f[u].y; }
            const float v[6] = {a[u].x, a[u].y, a[u].z, a[u].w, hx, hy};
            // Refill this slot with row u of the next group right away.
            if (has_next) {
                a[u] = __ldg(reinterpret_cast<const float4*>(nsrc + u * kW));
                if (fix) f[u] = __ldg(reinterpret_cast<const float2*>(nsrc + u * kW + 4));
            }
            float o[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) o[j] = A[j];
            taps_bot(v, w, o);          // output row oy+u complete
#pragma unroll
            for (int j = 0; j < 4; ++j) A[j] = B[j];
            taps_mid(v, w, A);          // output row oy+u+1: taps of rows oy+u+1, oy+u+2
            taps_top(v, w, B);          // output row oy+u+2: taps of row oy+u+2
            float* s = sOut + u * kOW + 4 * t;
            if ((u & 1) == 0) {
                // u*510 is a multiple of 4 for even u: the slot is 16 B aligned.
                if (hi) *reinterpret_cast<float4*>(s) = make_float4(o[0], o[1], o[2], o[3]);
                else    *reinterpret_cast<float2*>(s) = make_float2(o[0], o[1]);
            } else {
                *reinterpret_cast<float2*>(s) = make_float2(o[0], o[1]);
                if (hi) *reinterpret_cast<float2*>(s + 2) = make_float2(o[2], o[3]);
            }
        }
        __syncthreads();
        float4* gdst = reinterpret_cast<float4*>(op + (size_t)oy * kOW);
        const float4* ssrc = reinterpret_cast<const float4*>(sOut);
#pragma unroll
        for (int k = 0; k < kStoreIters; ++k) {
            const int i = t + k * kThreads;
            if (i < kGroupVec) __stcs(gdst + i, ssrc[i]);
        }
        __syncthreads();
    }
}

}  // namespace

torch::Tensor forward(torch::Tensor x, torch::Tensor conv2d_weight) {
    TORCH_CHECK(x.is_cuda() && conv2d_weight.is_cuda(), "x and conv2d_weight must be CUDA tensors");
    TORCH_CHECK(x.scalar_type() == at::kFloat && conv2d_weight.scalar_type() == at::kFloat,
                "x and conv2d_weight must be float32");
    TORCH_CHECK(x.dim() == 4 && x.size(0) == kN && x.size(1) == kC && x.size(2) == kH && x.size(3) == kW,
                "x must have shape [64, 128, 256, 512]");
    TORCH_CHECK(conv2d_weight.dim() == 4 && conv2d_weight.size(0) == kC && conv2d_weight.size(1) == 1 &&
                conv2d_weight.size(2) == 3 && conv2d_weight.size(3) == 3,
                "conv2d_weight must have shape [128, 1, 3, 3]");
    auto xc = x.contiguous();
    if (reinterpret_cast<uintptr_t>(xc.data_ptr<float>()) % 16 != 0) {
        auto tmp = at::empty({kN, kC, kH, kW}, xc.options());
        tmp.copy_(xc);
        xc = tmp;
    }
    auto wc = conv2d_weight.contiguous();
    auto out = at::empty({kN, kC, kOH, kOW}, xc.options());

    constexpr int ROWS = 32;
    constexpr int U = 4;
    constexpr int kStrips = (kOH + ROWS - 1) / ROWS;
    C10_CUDA_CHECK(cudaFuncSetAttribute(dwconv3x3_prefetch_kernel<ROWS, U>,
                                        cudaFuncAttributePreferredSharedMemoryCarveout,
                                        static_cast<int>(cudaSharedmemCarveoutMaxShared)));
    const dim3 grid(kN * kC * kStrips);
    const dim3 block(kThreads);
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    dwconv3x3_prefetch_kernel<ROWS, U><<<grid, block, 0, stream>>>(xc.data_ptr<float>(), wc.data_ptr<float>(),
                                                                     out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
