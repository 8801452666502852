// Depthwise 3x3 conv, FP32. Method: smem-staged float4 streaming stores with shuffle halo.
// One block per (plane, strip of 32 output rows); strips of one plane are adjacent in the 1-D grid.
// 128 threads, thread t owns output columns 4t..4t+3. Each input row: one float4 per thread, halo
// columns 4t+4, 4t+5 from the neighbour lane via shuffle (lane 31 of warps 0..2 loads them itself).
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

__device__ __forceinline__ void compute_row(const float (&r0)[6], const float (&r1)[6], const float (&r2)[6],
                                            const float (&w)[9], float (&o)[4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        float s = r0[j] * w[0];
        s = fmaf(r0[j + 1], w[1], s);
        s = fmaf(r0[j + 2], w[2], s);
        s = fmaf(r1[j], w[3], s);
        s = fmaf(r1[j + 1], w[4], s);
        s = fmaf(r1[j + 2], w[5], s);
        s = fmaf(r2[j], w[6], s);
        s = fmaf(r2[j + 1], w[7], s);
        s = fmaf(r2[j + 2], w[8], s);
        o[j] = s;
    }
}

template <int ROWS, int U>
__global__ void __launch_bounds__(kThreads, 16)
dwconv3x3_smem_store_kernel(const float* __restrict__ x, const float* __restrict__ wt, float* __restrict__ out) {
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

    float w[9];
#pragma unroll
    for (int i = 0; i < 9; ++i) w[i] = __ldg(wt + c * 9 + i);

    int oy0 = strip * ROWS;
    if (oy0 > kOH - ROWS) oy0 = kOH - ROWS;

    const float* __restrict__ xp = x + (size_t)p * (size_t)(kH * kW) + 4 * t;
    float* __restrict__ op = out + (size_t)p * (size_t)(kOH * kOW);

    float r0[6], r1[6];
    load_row(xp + oy0 * kW, fix, r0);
    load_row(xp + (oy0 + 1) * kW, fix, r1);

#pragma unroll 1
    for (int oy = oy0; oy < oy0 + ROWS; oy += U) {
        // Issue all loads of the group first so they are in flight together.
        float4 a[U];
        float2 f[U];
#pragma unroll
        for (int u = 0; u < U; ++u) a[u] = __ldg(reinterpret_cast<const float4*>(xp + (oy + 2 + u) * kW));
#pragma unroll
        for (int u = 0; u < U; ++u) {
            f[u] = make_float2(0.f, 0.f);
            if (fix) f[u] = __ldg(reinterpret_cast<const float2*>(xp + (oy + 2 + u) * kW + 4));
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            float hx = __shfl_down_sync(kFull, a[u].x, 1);
            float hy = __shfl_down_sync(kFull, a[u].y, 1);
            if (fix) { hx = f[u].x; hy = f[u].y; }
            const float nx[6] = {a[u].x, a[u].y, a[u].z, a[u].w, hx, hy};
            float o[4];
            compute_row(r0, r1, nx, w, o);
            float* s = sOut + u * kOW + 4 * t;
            *reinterpret_cast<float2*>(s) = make_float2(o[0], o[1]);
            if (hi) *reinterpret_cast<float2*>(s + 2) = make_float2(o[2], o[3]);
#pragma unroll
            for (int k = 0; k < 6; ++k) { r0[k] = r1[k]; r1[k] = nx[k]; }
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
    C10_CUDA_CHECK(cudaFuncSetAttribute(dwconv3x3_smem_store_kernel<ROWS, U>,
                                        cudaFuncAttributePreferredSharedMemoryCarveout,
                                        static_cast<int>(cudaSharedmemCarveoutMaxShared)));
    const dim3 grid(kN * kC * kStrips);
    const dim3 block(kThreads);
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    dwconv3x3_smem_store_kernel<ROWS, U><<<grid, block, 0, stream>>>(xc.data_ptr<float>(), wc.data_ptr<float>(),
                                                                     out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
