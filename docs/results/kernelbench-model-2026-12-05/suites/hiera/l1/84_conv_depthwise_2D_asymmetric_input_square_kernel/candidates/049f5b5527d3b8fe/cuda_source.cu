// dw3x3_stream_kernel: register-streaming depthwise 3x3 conv, float4 rows.
// 256-thread blocks (128 x 2): threadIdx.y picks one of two adjacent row chunks of
// RCHUNK = 32 output rows of the same plane, so the shared halo rows hit L1/L2.
// Groups of G = 4 rows are loaded together.
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
constexpr int RCHUNK = 32;
constexpr int NCHUNK = (OH + RCHUNK - 1) / RCHUNK;
constexpr int CPB = 2;                                // row chunks per block
constexpr int GRID_Y = (NCHUNK + CPB - 1) / CPB;
constexpr int G = 4;

__device__ __forceinline__ void load_row(const float* __restrict__ rowp, int t, float (&r)[6]) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(rowp) + t);
    float2 b = make_float2(0.0f, 0.0f);
    if (t < THREADS - 1) b = __ldg(reinterpret_cast<const float2*>(rowp + 4 * t + 4));
    r[0] = a.x; r[1] = a.y; r[2] = a.z; r[3] = a.w; r[4] = b.x; r[5] = b.y;
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

__global__ void __launch_bounds__(THREADS * CPB, 4)
dw3x3_stream_kernel(const float* __restrict__ x, const float* __restrict__ wt, float* __restrict__ y) {
    const int plane = blockIdx.x;
    const int c = plane % CH;
    const int t = threadIdx.x;
    const int chunk = blockIdx.y * CPB + threadIdx.y;
    if (chunk >= NCHUNK) return;
    const int oh0 = chunk * RCHUNK;
    const int oh1 = min(oh0 + RCHUNK, OH);
    const float* __restrict__ xp = x + static_cast<size_t>(plane) * (H * W);
    float* __restrict__ yp = y + static_cast<size_t>(plane) * (OH * OW);

    float w[9];
#pragma unroll
    for (int k = 0; k < 9; ++k) w[k] = __ldg(wt + c * 9 + k);

    float r0[6], r1[6];
    load_row(xp + oh0 * W, t, r0);
    load_row(xp + (oh0 + 1) * W, t, r1);

    for (int oh = oh0; oh < oh1; oh += G) {
        float win[G + 2][6];
#pragma unroll
        for (int j = 0; j < 6; ++j) { win[0][j] = r0[j]; win[1][j] = r1[j]; }
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const int ih = min(oh + 2 + g, H - 1);
            load_row(xp + ih * W, t, win[g + 2]);
        }
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

    const dim3 grid(NB * CH, GRID_Y);
    const dim3 block(THREADS, CPB);
    dw3x3_stream_kernel<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), conv2d_weight.data_ptr<float>(), y.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
