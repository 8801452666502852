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

// Loads input columns 4t..4t+5 of one row. The tail float2 (cols 4t+4, 4t+5) is read at a
// clamped in-bounds offset for the last thread (its values are then unused).
__device__ __forceinline__ void load_row(const float* __restrict__ src, int tail_off, float (&v)[6]) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(src));
    const float2 b = __ldg(reinterpret_cast<const float2*>(src + tail_off));
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y;
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

// One block per (plane, strip of ROWS output rows); 128 threads, thread t owns output cols 4t..4t+3.
// The last strip is clamped to end at row kOH-1 (it may recompute and rewrite identical values of
// a couple of rows of the previous strip).
template <int ROWS, int U>
__global__ void __launch_bounds__(128) dwconv3x3_kernel(const float* __restrict__ x,
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

    const float* __restrict__ xp = x + (size_t)p * (size_t)(kH * kW) + 4 * t;
    float* __restrict__ op = out + (size_t)p * (size_t)(kOH * kOW) + 4 * t;
    const int tail_off = (t < 127) ? 4 : 0;
    const bool st_hi = (4 * t + 2) < kOW;

    float r0[6], r1[6];
    load_row(xp + oy0 * kW, tail_off, r0);
    load_row(xp + (oy0 + 1) * kW, tail_off, r1);

#pragma unroll 1
    for (int oy = oy0; oy < oy0 + ROWS; oy += U) {
        float nx[U][6];
#pragma unroll
        for (int u = 0; u < U; ++u) load_row(xp + (oy + 2 + u) * kW, tail_off, nx[u]);
#pragma unroll
        for (int u = 0; u < U; ++u) {
            float o[4];
            compute_row(r0, r1, nx[u], w, o);
            float* dst = op + (oy + u) * kOW;
            __stcs(reinterpret_cast<float2*>(dst), make_float2(o[0], o[1]));
            if (st_hi) __stcs(reinterpret_cast<float2*>(dst + 2), make_float2(o[2], o[3]));
#pragma unroll
            for (int k = 0; k < 6; ++k) { r0[k] = r1[k]; r1[k] = nx[u][k]; }
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

    constexpr int ROWS = 64;
    constexpr int U = 8;
    dim3 grid(kN * kC, (kOH + ROWS - 1) / ROWS);
    dim3 block(128);
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    dwconv3x3_kernel<ROWS, U><<<grid, block, 0, stream>>>(xc.data_ptr<float>(), wc.data_ptr<float>(),
                                                          out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
