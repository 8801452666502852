// dw3x3_stream_kernel: depthwise 3x3 conv streamed down the rows of one plane.
// RCHUNK = 64. Input rows are staged with 16-byte cp.async.cg into a 4-stage
// shared-memory ring (3 rows in flight), each thread reads its float4 plus the
// 2-float halo from shared memory, and a 3-row register window feeds the 9 taps.
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
constexpr int STAGES = 4;                             // power of two
constexpr int SROW = W + 4;                           // padded row (16-byte multiple)

__device__ __forceinline__ void cp_async16(float* smem, const float* gmem) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(s), "l"(gmem) : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int NPEND>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(NPEND) : "memory");
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
    __shared__ __align__(16) float sm[STAGES][SROW];

    const int plane = blockIdx.x;
    const int c = plane % CH;
    const int t = threadIdx.x;
    const int oh0 = blockIdx.y * RCHUNK;
    const int oh1 = min(oh0 + RCHUNK, OH);
    const int nin = oh1 - oh0 + 2;                    // input rows of this chunk
    const float* __restrict__ xp = x + static_cast<size_t>(plane) * (H * W);
    float* __restrict__ yp = y + static_cast<size_t>(plane) * (OH * OW);
    const float* src = xp + oh0 * W + 4 * t;

    // Padding columns 512..515 (read only for the discarded outputs 510/511 of thread 127).
    if (t < STAGES) {
        sm[t][W + 0] = 0.0f;
        sm[t][W + 1] = 0.0f;
        sm[t][W + 2] = 0.0f;
        sm[t][W + 3] = 0.0f;
    }

    // Prologue: rows 0 .. STAGES-2 in flight (one commit group per row).
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < nin) cp_async16(&sm[s][4 * t], src + s * W);
        cp_async_commit();
    }

    float w[9];
#pragma unroll
    for (int k = 0; k < 9; ++k) w[k] = __ldg(wt + c * 9 + k);

    float r0[6], r1[6], r2[6];
#pragma unroll
    for (int j = 0; j < 6; ++j) { r0[j] = 0.0f; r1[j] = 0.0f; r2[j] = 0.0f; }

    for (int i = 0; i < nin; ++i) {
        // Groups committed so far: STAGES-1+i; row i is group i -> at most STAGES-2 pending.
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        // Refill the stage of row i-1 (all threads finished reading it before this barrier).
        const int nx = i + STAGES - 1;
        if (nx < nin) cp_async16(&sm[nx & (STAGES - 1)][4 * t], src + nx * W);
        cp_async_commit();

        const float* srow = &sm[i & (STAGES - 1)][0];
        const float4 a = *reinterpret_cast<const float4*>(srow + 4 * t);
        const float2 b = *reinterpret_cast<const float2*>(srow + 4 * t + 4);
#pragma unroll
        for (int j = 0; j < 6; ++j) { r0[j] = r1[j]; r1[j] = r2[j]; }
        r2[0] = a.x; r2[1] = a.y; r2[2] = a.z; r2[3] = a.w; r2[4] = b.x; r2[5] = b.y;

        if (i >= 2) {
            float o[4];
            conv_row(r0, r1, r2, w, o);
            store_row(yp + (oh0 + i - 2) * OW, t, o);
        }
    }
    cp_async_wait<0>();
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
