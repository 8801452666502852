// dw3x3_stream_kernel: register-streaming depthwise 3x3 conv, float4 rows.
// RCHUNK = 64, groups of G = 4 rows; the 2-value halo comes from lane+1's float4
// via __shfl_down_sync, with a float2 global load only on lane 31 of warps 0..2.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cstdint>

namespace {

constexpr int NB = 64;
constexpr int CH = 128;
constexpr int H = 256;
constexpr int W = 512;
constexpr int OH = 254;
constexpr int OW = 510;
constexpr int THREADS = 128;
constexpr int RCHUNK = 64;
constexpr int NCHUNK = (OH + RCHUNK - 1) / RCHUNK;
constexpr int G = 4;

// Phase 1: issue the loads (float4 for all lanes, float2 halo only for lane 31 of non-last warps).
__device__ __forceinline__ void issue_row(const float* __restrict__ rowp, int t, bool lane31,
                                          float4& a, float2& b) {
    a = __ldg(reinterpret_cast<const float4*>(rowp) + t);
    b = make_float2(0.0f, 0.0f);
    if (lane31 && t < THREADS - 1) b = __ldg(reinterpret_cast<const float2*>(rowp + 4 * t + 4));
}

// Phase 2: build the 6-value window row (all lanes of the warp must call this together).
__device__ __forceinline__ void finish_row(const float4& a, const float2& b, bool lane31, float (&r)[6]) {
    float hx = __shfl_down_sync(0xffffffffu, a.x, 1);
    float hy = __shfl_down_sync(0xffffffffu, a.y, 1);
    if (lane31) { hx = b.x; hy = b.y; }
    r[0] = a.x; r[1] = a.y; r[2] = a.z; r[3] = a.w; r[4] = hx; r[5] = hy;
}

__device__ __forceinline__ void conv_row(const float (&a)[6], const float (&b)[6], const float (&c)[6],
                                         const float (&w)[9], float (&o)[4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        float s = 0.0f;
        s = fmaf(w[0], a[j], s);
        s = fmaf(w[1], a[j + 1], s);
        s = fmaf(w[2], a[j + 2], s);
        s = fmaf(w[3], b[j], s);
        s = fmaf(w[4], b[j + 1], s);
        s = fmaf(w[5], b[j + 2], s);
        s = fmaf(w[6], c[j], s);
        s = fmaf(w[7], c[j + 1], s);
        s = fmaf(w[8], c[j + 2], s);
        o[j] = s;
    }
}

__device__ __forceinline__ void store_row(float* __restrict__ rowp, int t, const float (&o)[4]) {
    float* p = rowp + 4 * t;
    __stcs(reinterpret_cast<float2*>(p), make_float2(o[0], o[1]));
    if (t < THREADS - 1) __stcs(reinterpret_cast<float2*>(p + 2), make_float2(o[2], o[3]));
}

__global__ void __launch_bounds__(THREADS, 8)
dw3x3_stream_kernel(const float* __restrict__ x, const float* __restrict__ wt, float* __restrict__ y) {
    const int plane = blockIdx.x;
    const int c = plane % CH;
    const int t = threadIdx.x;
    const bool lane31 = (t & 31) == 31;
    const int oh0 = blockIdx.y * RCHUNK;
    const int oh1 = min(oh0 + RCHUNK, OH);
    const float* __restrict__ xp = x + static_cast<size_t>(plane) * (H * W);
    float* __restrict__ yp = y + static_cast<size_t>(plane) * (OH * OW);

    float w[9];
#pragma unroll
    for (int k = 0; k < 9; ++k) w[k] = __ldg(wt + c * 9 + k);

    float r0[6], r1[6];
    {
        float4 a0, a1;
        float2 b0, b1;
        issue_row(xp + oh0 * W, t, lane31, a0, b0);
        issue_row(xp + (oh0 + 1) * W, t, lane31, a1, b1);
        finish_row(a0, b0, lane31, r0);
        finish_row(a1, b1, lane31, r1);
    }

    for (int oh = oh0; oh < oh1; oh += G) {
        float4 a[G];
        float2 b[G];
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const int ih = min(oh + 2 + g, H - 1);
            issue_row(xp + ih * W, t, lane31, a[g], b[g]);
        }
        float win[G + 2][6];
#pragma unroll
        for (int j = 0; j < 6; ++j) { win[0][j] = r0[j]; win[1][j] = r1[j]; }
#pragma unroll
        for (int g = 0; g < G; ++g) finish_row(a[g], b[g], lane31, win[g + 2]);
#pragma unroll
        for (int g = 0; g < G; ++g) {
            if (oh + g < oh1) {
                float o[4];
                conv_row(win[g], win[g + 1], win[g + 2], w, o);
                store_row(yp + (oh + g) * OW, t, o);
            }
        }
#pragma unroll
        for (int j = 0; j < 6; ++j) { r0[j] = win[G][j]; r1[j] = win[G + 1][j]; }
    }
}

}  // namespace

torch::Tensor forward(torch::Tensor x, torch::Tensor conv2d_weight) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(conv2d_weight.is_cuda(), "conv2d_weight must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == at::kFloat, "x must be float32");
    TORCH_CHECK(conv2d_weight.scalar_type() == at::kFloat, "conv2d_weight must be float32");
    TORCH_CHECK(x.dim() == 4 && x.size(0) == NB && x.size(1) == CH && x.size(2) == H && x.size(3) == W,
                "x must have shape [64, 128, 256, 512]");
    TORCH_CHECK(conv2d_weight.dim() == 4 && conv2d_weight.size(0) == CH && conv2d_weight.size(1) == 1 &&
                conv2d_weight.size(2) == 3 && conv2d_weight.size(3) == 3,
                "conv2d_weight must have shape [128, 1, 3, 3]");
    if (!x.is_contiguous()) x = x.contiguous();
    if (!conv2d_weight.is_contiguous()) conv2d_weight = conv2d_weight.contiguous();
    TORCH_CHECK(reinterpret_cast<uintptr_t>(x.data_ptr<float>()) % 16 == 0, "x must be 16-byte aligned");

    const c10::cuda::CUDAGuard guard(x.device());
    auto y = torch::empty({NB, CH, OH, OW}, x.options());
    TORCH_CHECK(reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0, "output must be 16-byte aligned");

    const dim3 grid(NB * CH, NCHUNK);
    const dim3 block(THREADS);
    dw3x3_stream_kernel<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), conv2d_weight.data_ptr<float>(), y.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
