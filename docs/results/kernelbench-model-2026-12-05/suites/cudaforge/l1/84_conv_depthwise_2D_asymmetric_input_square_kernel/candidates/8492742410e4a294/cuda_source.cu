#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

namespace {

constexpr int kN = 64;
constexpr int kC = 128;
constexpr int kH = 256;
constexpr int kW = 512;
constexpr int kOH = 254;
constexpr int kOW = 510;

// Loads input columns 8t..8t+9 of one row (tail float2 at a clamped in-bounds offset for t = 63).
__device__ __forceinline__ void load_row8(const float* __restrict__ src, int tail_off, float (&v)[10]) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(src));
    const float4 b = __ldg(reinterpret_cast<const float4*>(src + 4));
    const float2 e = __ldg(reinterpret_cast<const float2*>(src + tail_off));
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    v[8] = e.x; v[9] = e.y;
}

__device__ __forceinline__ void compute_row8(const float (&r0)[10], const float (&r1)[10], const float (&r2)[10],
                                             const float (&w)[9], float (&o)[8]) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
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

// One block per (plane, strip of ROWS output rows); 64 threads, thread t owns output cols 8t..8t+7.
template <int ROWS, int U>
__global__ void __launch_bounds__(64) dwconv3x3_kernel(const float* __restrict__ x,
                                                       const float* __restrict__ wt,
                                                       float* __restrict__ out) {
    static_assert(ROWS % U == 0, "ROWS must be a multiple of U");
    const int p = blockIdx.x;
    const int c = p % kC;
    const int t = threadIdx.x;

    float w[9];
#pragma unroll
    for (int i = 0; i < 9; ++i) w[i] = __ldg(wt + c * 9 + i);

    int oy0 = blockIdx.y * ROWS;
    if (oy0 > kOH - ROWS) oy0 = kOH - ROWS;

    const float* __restrict__ xp = x + (size_t)p * (size_t)(kH * kW) + 8 * t;
    float* __restrict__ op = out + (size_t)p * (size_t)(kOH * kOW) + 8 * t;
    const int tail_off = (t < 63) ? 8 : 4;
    const bool st_last = (8 * t + 6) < kOW;

    float r0[10], r1[10];
    load_row8(xp + oy0 * kW, tail_off, r0);
    load_row8(xp + (oy0 + 1) * kW, tail_off, r1);

#pragma unroll 1
    for (int oy = oy0; oy < oy0 + ROWS; oy += U) {
        float nx[U][10];
#pragma unroll
        for (int u = 0; u < U; ++u) load_row8(xp + (oy + 2 + u) * kW, tail_off, nx[u]);
#pragma unroll
        for (int u = 0; u < U; ++u) {
            float o[8];
            compute_row8(r0, r1, nx[u], w, o);
            float* dst = op + (oy + u) * kOW;
            __stcs(reinterpret_cast<float2*>(dst), make_float2(o[0], o[1]));
            __stcs(reinterpret_cast<float2*>(dst + 2), make_float2(o[2], o[3]));
            __stcs(reinterpret_cast<float2*>(dst + 4), make_float2(o[4], o[5]));
            if (st_last) __stcs(reinterpret_cast<float2*>(dst + 6), make_float2(o[6], o[7]));
#pragma unroll
            for (int k = 0; k < 10; ++k) { r0[k] = r1[k]; r1[k] = nx[u][k]; }
        }
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
    auto wc = conv2d_weight.contiguous();
    auto out = at::empty({kN, kC, kOH, kOW}, xc.options());

    constexpr int ROWS = 32;
    constexpr int U = 2;
    dim3 grid(kN * kC, (kOH + ROWS - 1) / ROWS);
    dim3 block(64);
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    dwconv3x3_kernel<ROWS, U><<<grid, block, 0, stream>>>(xc.data_ptr<float>(), wc.data_ptr<float>(),
                                                          out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
