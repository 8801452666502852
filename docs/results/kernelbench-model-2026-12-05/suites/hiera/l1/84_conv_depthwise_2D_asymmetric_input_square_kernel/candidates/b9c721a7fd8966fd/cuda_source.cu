// dw3x3_stream_kernel: register-streaming depthwise 3x3 conv, float4 rows.
// RCHUNK = 127; two output rows per iteration, and the two input rows needed by the
// next iteration are prefetched (issued) before the FMAs of the current iteration.
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
constexpr int RCHUNK = 127;
constexpr int NCHUNK = (OH + RCHUNK - 1) / RCHUNK;

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

__global__ void __launch_bounds__(THREADS, 8)
dw3x3_stream_kernel(const float* __restrict__ x, const float* __restrict__ wt, float* __restrict__ y) {
    const int plane = blockIdx.x;
    const int c = plane % CH;
    const int t = threadIdx.x;
    const int oh0 = blockIdx.y * RCHUNK;
    const int oh1 = min(oh0 + RCHUNK, OH);
    const float* __restrict__ xp = x + static_cast<size_t>(plane) * (H * W);
    float* __restrict__ yp = y + static_cast<size_t>(plane) * (OH * OW);

    float w[9];
#pragma unroll
    for (int k = 0; k < 9; ++k) w[k] = __ldg(wt + c * 9 + k);

    // Window: r0 = row oh, r1 = row oh+1, c0 = row oh+2, c1 = row oh+3.
    float r0[6], r1[6], c0[6], c1[6];
    load_row(xp + oh0 * W, t, r0);
    load_row(xp + (oh0 + 1) * W, t, r1);
    load_row(xp + min(oh0 + 2, H - 1) * W, t, c0);
    load_row(xp + min(oh0 + 3, H - 1) * W, t, c1);

    for (int oh = oh0; oh < oh1; oh += 2) {
        float n0[6], n1[6];
        if (oh + 2 < oh1) {
            // Rows oh+4 and oh+5 for the next iteration (clamped inside the plane).
            load_row(xp + min(oh + 4, H - 1) * W, t, n0);
            load_row(xp + min(oh + 5, H - 1) * W, t, n1);
        } else {
#pragma unroll
            for (int j = 0; j < 6; ++j) { n0[j] = 0.0f; n1[j] = 0.0f; }
        }
        {
            float o[4];
            conv_row(r0, r1, c0, w, o);
            store_row(yp + oh * OW, t, o);
        }
        if (oh + 1 < oh1) {
            float o[4];
            conv_row(r1, c0, c1, w, o);
            store_row(yp + (oh + 1) * OW, t, o);
        }
#pragma unroll
        for (int j = 0; j < 6; ++j) {
            r0[j] = c0[j];
            r1[j] = c1[j];
            c0[j] = n0[j];
            c1[j] = n1[j];
        }
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
