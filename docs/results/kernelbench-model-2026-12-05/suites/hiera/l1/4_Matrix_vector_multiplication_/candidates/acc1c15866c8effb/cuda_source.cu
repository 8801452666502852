// Split-K streaming GEMV: out[M,1] = A[M,K] @ B[K,1], FP32 throughout.
// Main kernel: grid (KSPLIT, M/ROWS); each block streams ROWS rows of one K slice with float4 loads,
// reusing one float4 of B for all ROWS rows. Deterministic two-stage reduction (no atomics).
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

constexpr int kRows = 4;
constexpr int kSplit = 64;
constexpr int kThreads = 256;
constexpr int kMinBlocks = 4;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ float4 load_stream(const float4* p) {
    float4 v;
    asm("ld.global.nc.L1::no_allocate.v4.f32 {%0, %1, %2, %3}, [%4];"
        : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
        : "l"(p));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 16);
    v += __shfl_xor_sync(0xffffffffu, v, 8);
    v += __shfl_xor_sync(0xffffffffu, v, 4);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v;
}

// Vectorized path. Requirements (checked on host): A rows unit-stride, row pitch lda4 float4s,
// 16-byte aligned A and B, slice4 % kThreads == 0, M % kRows == 0.
__global__ void __launch_bounds__(kThreads, kMinBlocks)
gemv_splitk_vec4_kernel(const float4* __restrict__ A, const float4* __restrict__ B,
                        float* __restrict__ partials, long long lda4, int slice4) {
    const int ks = blockIdx.x;
    const int row0 = blockIdx.y * kRows;
    const int tid = threadIdx.x;
    const long long kbase = (long long)ks * (long long)slice4 + tid;

    const float4* __restrict__ a = A + (long long)row0 * lda4 + kbase;
    const float4* __restrict__ b = B + kbase;

    float acc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;

    const int iters = slice4 / kThreads;
#pragma unroll 2
    for (int i = 0; i < iters; ++i) {
        const int off = i * kThreads;
        const float4 bv = __ldg(b + off);
        float4 av[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) av[r] = load_stream(a + (long long)r * lda4 + off);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            float s = acc[r];
            s = fmaf(av[r].x, bv.x, s);
            s = fmaf(av[r].y, bv.y, s);
            s = fmaf(av[r].z, bv.z, s);
            s = fmaf(av[r].w, bv.w, s);
            acc[r] = s;
        }
    }

    __shared__ float red[kWarps][kRows];
    const int warp = tid >> 5;
    const int lane = tid & 31;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const float v = warp_sum(acc[r]);
        if (lane == 0) red[warp][r] = v;
    }
    __syncthreads();
    if (tid < kRows) {
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) s += red[w][tid];
        partials[(long long)(row0 + tid) * kSplit + ks] = s;
    }
}

// Scalar fallback: any strides, any shape, any alignment.
__global__ void __launch_bounds__(kThreads)
gemv_splitk_scalar_kernel(const float* __restrict__ A, const float* __restrict__ B,
                          float* __restrict__ partials, int M, long long K,
                          long long sa0, long long sa1, long long sb0, long long chunk) {
    const int ks = blockIdx.x;
    const int row0 = blockIdx.y * kRows;
    const int tid = threadIdx.x;
    const long long kbeg = (long long)ks * chunk;
    long long kend = kbeg + chunk;
    if (kend > K) kend = K;

    float acc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;

    for (long long k = kbeg + tid; k < kend; k += kThreads) {
        const float bv = __ldg(B + k * sb0);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            const int row = row0 + r;
            if (row < M) acc[r] = fmaf(__ldg(A + (long long)row * sa0 + k * sa1), bv, acc[r]);
        }
    }

    __shared__ float red[kWarps][kRows];
    const int warp = tid >> 5;
    const int lane = tid & 31;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const float v = warp_sum(acc[r]);
        if (lane == 0) red[warp][r] = v;
    }
    __syncthreads();
    if (tid < kRows && row0 + tid < M) {
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) s += red[w][tid];
        partials[(long long)(row0 + tid) * kSplit + ks] = s;
    }
}

// Finishing reduction: one warp per output row, fixed summation order.
__global__ void __launch_bounds__(256)
gemv_finish_kernel(const float* __restrict__ partials, float* __restrict__ out, int M) {
    const int row = (int)((blockIdx.x * (unsigned)blockDim.x + threadIdx.x) >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= M) return;  // uniform per warp
    const float* __restrict__ p = partials + (long long)row * kSplit;
    float s = 0.0f;
    for (int j = lane; j < kSplit; j += 32) s += p[j];
    s = warp_sum(s);
    if (lane == 0) out[row] = s;
}

}  // namespace

torch::Tensor forward(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "A and B must be CUDA tensors");
    TORCH_CHECK(A.scalar_type() == at::kFloat && B.scalar_type() == at::kFloat,
                "A and B must be float32");
    TORCH_CHECK(A.dim() == 2, "A must be 2-D");
    TORCH_CHECK(B.dim() == 2 && B.size(1) == 1, "B must have shape [K, 1]");
    TORCH_CHECK(A.device() == B.device(), "A and B must be on the same device");

    const int64_t M = A.size(0);
    const int64_t K = A.size(1);
    TORCH_CHECK(B.numel() == K, "B must have K*1 elements");

    const c10::cuda::CUDAGuard device_guard(A.device());
    auto out = at::empty({M, 1}, A.options());
    if (M == 0) return out;
    if (K == 0) return at::zeros({M, 1}, A.options());

    auto partials = at::empty({M, (int64_t)kSplit}, A.options());
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();

    const float* a_ptr = A.data_ptr<float>();
    const float* b_ptr = B.data_ptr<float>();
    float* p_ptr = partials.data_ptr<float>();
    float* o_ptr = out.data_ptr<float>();

    const int64_t sa0 = A.stride(0);
    const int64_t sa1 = A.stride(1);
    const int64_t sb0 = B.stride(0);

    const bool aligned = ((reinterpret_cast<uintptr_t>(a_ptr) & 15u) == 0) &&
                         ((reinterpret_cast<uintptr_t>(b_ptr) & 15u) == 0);
    const bool vec_ok = aligned && (sa1 == 1) && (sb0 == 1) && (sa0 % 4 == 0) && (sa0 >= K) &&
                        (K % ((int64_t)4 * kThreads * kSplit) == 0) && (M % kRows == 0) &&
                        (M / kRows <= 65535) && (K / 4 / kSplit <= (int64_t)INT32_MAX);

    if (vec_ok) {
        const int slice4 = (int)(K / 4 / kSplit);
        dim3 grid(kSplit, (unsigned)(M / kRows));
        gemv_splitk_vec4_kernel<<<grid, kThreads, 0, stream>>>(
            reinterpret_cast<const float4*>(a_ptr), reinterpret_cast<const float4*>(b_ptr), p_ptr,
            (long long)(sa0 / 4), slice4);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    } else {
        const int64_t gy = (M + kRows - 1) / kRows;
        TORCH_CHECK(gy <= 65535, "M too large for this kernel");
        const long long chunk = (long long)((K + kSplit - 1) / kSplit);
        dim3 grid(kSplit, (unsigned)gy);
        gemv_splitk_scalar_kernel<<<grid, kThreads, 0, stream>>>(
            a_ptr, b_ptr, p_ptr, (int)M, (long long)K, (long long)sa0, (long long)sa1,
            (long long)sb0, chunk);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }

    const int64_t fin_blocks = (M * 32 + 255) / 256;
    gemv_finish_kernel<<<(unsigned)fin_blocks, 256, 0, stream>>>(p_ptr, o_ptr, (int)M);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
