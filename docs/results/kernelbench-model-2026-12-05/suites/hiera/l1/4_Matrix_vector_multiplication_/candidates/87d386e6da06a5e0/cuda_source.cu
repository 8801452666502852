// Persistent, exactly load-balanced stream-K GEMV: out[M,1] = A[M,K] @ B[K,1], FP32 throughout.
// A chunk is kRows rows x (kThreads*4) floats of A (one float4 per thread per row). With
// C = K/(4*kThreads) chunks per row group, G = M/kRows groups and U = G*C chunks (row-group-major),
// a single resident wave of P = SMs * blocksPerSM plain blocks (clamped to [G, U]) splits [0, U)
// exactly: block b owns [floor(b*U/P), floor((b+1)*U/P)). Since P >= G a block spans at most two
// row groups; it walks its range from high to low chunk index, accumulating each segment in
// registers, and flushes each segment's row sums (fixed-order block reduction) to ws slot 0/1.
// A tiny finish kernel (one thread per output row) adds the slots of the owning blocks in
// ascending block order: deterministic, no atomics, no counters, no inter-block waiting.
// Generic-stride fallback: scalar split-K + finish.
// Variant: (f) 256 threads, 8 rows/chunk (B reuse x8), unroll 1, __launch_bounds__(256,3)
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <limits>

namespace {

constexpr int kThreads = 256;
constexpr int kRows = 8;
constexpr int kUnroll = 1;
constexpr int kMinBlocks = 3;
constexpr int kWarps = kThreads / 32;
constexpr int kFinishThreads = 256;

static_assert(kThreads % 32 == 0, "kThreads must be a multiple of 32");
static_assert(kRows <= kThreads, "kRows must not exceed kThreads");

// Fallback (generic strides) configuration.
constexpr int fbSplit = 32;
constexpr int fbRows = 4;
constexpr int fbThreads = 512;
constexpr int fbWarps = fbThreads / 32;

__device__ __forceinline__ float4 load_a(const float4* p) {
    return __ldcs(p);
}

__device__ __forceinline__ float warp_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 16);
    v += __shfl_xor_sync(0xffffffffu, v, 8);
    v += __shfl_xor_sync(0xffffffffu, v, 4);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v;
}

// Requirements (checked on host): A rows unit-stride with pitch lda4 float4s (lda4 >= K/4),
// 16-byte aligned A and B, K % (4*kThreads) == 0, C = K/(4*kThreads), U = (M/kRows)*C,
// M/kRows <= P <= U, gridDim.x == P, (P+1)*U fits in int64.
__global__ void __launch_bounds__(kThreads, kMinBlocks)
gemv_streamk_kernel(const float4* __restrict__ A, const float4* __restrict__ B,
                    float* __restrict__ ws, long long lda4, long long C, long long U,
                    long long P) {
    const long long b = (long long)blockIdx.x;
    const int tid = threadIdx.x;
    const int warp = tid >> 5;
    const int lane = tid & 31;

    const long long ubeg = (b * U) / P;
    long long hi = ((b + 1) * U) / P;  // exclusive end of the not-yet-walked part

    __shared__ float red[kWarps][kRows];

    int slot = 0;
#pragma unroll 1
    while (hi > ubeg) {  // block-uniform; at most two iterations because P >= G
        const long long g = (hi - 1) / C;
        const long long gstart = g * C;
        const long long lo = ubeg > gstart ? ubeg : gstart;
        int n = (int)(hi - lo);               // chunks in this segment (<= C)
        const long long jhi = hi - gstart;    // exclusive K-slot end within row group g

        const float4* pa = A + g * (long long)kRows * lda4 + jhi * (long long)kThreads + tid;
        const float4* pb = B + jhi * (long long)kThreads + tid;

        float acc[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;

#pragma unroll 1
        while (n >= kUnroll) {
            pa -= kUnroll * kThreads;
            pb -= kUnroll * kThreads;
            n -= kUnroll;
            float4 bv[kUnroll];
            float4 av[kUnroll][kRows];
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
                bv[u] = __ldg(pb + u * kThreads);
#pragma unroll
                for (int r = 0; r < kRows; ++r)
                    av[u][r] = load_a(pa + (long long)r * lda4 + u * kThreads);
            }
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
                for (int r = 0; r < kRows; ++r) {
                    float s = acc[r];
                    s = fmaf(av[u][r].x, bv[u].x, s);
                    s = fmaf(av[u][r].y, bv[u].y, s);
                    s = fmaf(av[u][r].z, bv[u].z, s);
                    s = fmaf(av[u][r].w, bv[u].w, s);
                    acc[r] = s;
                }
            }
        }
#pragma unroll 1
        while (n > 0) {  // segment remainder: fewer than kUnroll chunks
            pa -= kThreads;
            pb -= kThreads;
            --n;
            const float4 bv = __ldg(pb);
            float4 av[kRows];
#pragma unroll
            for (int r = 0; r < kRows; ++r) av[r] = load_a(pa + (long long)r * lda4);
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

        // Segment flush: fixed-order block reduction into ws slot.
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
            ws[(b * 2 + slot) * (long long)kRows + tid] = s;
        }
        __syncthreads();  // red is reused by the next segment

        ++slot;
        hi = lo;
    }
}

// Deterministic finish: one thread per output row; adds the partials of every block whose chunk
// range intersects the row's group, in ascending block order.
__global__ void __launch_bounds__(kFinishThreads)
gemv_streamk_finish_kernel(const float* __restrict__ ws, float* __restrict__ out, int M,
                           long long C, long long U, long long P) {
    const int row = (int)(blockIdx.x * (unsigned)blockDim.x + threadIdx.x);
    if (row >= M) return;
    const long long g = (long long)(row / kRows);
    const int rr = row - (int)g * kRows;
    const long long xlo = g * C;
    const long long xhi = g * C + C - 1;
    const long long blo = ((xlo + 1) * P - 1) / U;  // owner(x) = floor(((x+1)*P - 1)/U)
    const long long bhi = ((xhi + 1) * P - 1) / U;
    float s = 0.0f;
    for (long long b = blo; b <= bhi; ++b) {
        const long long first = ((b + 1) * U) / P - 1;  // block b's first-walked chunk
        const int slot = (first / C == g) ? 0 : 1;
        s += ws[(b * 2 + slot) * (long long)kRows + rr];
    }
    out[row] = s;
}

// Scalar fallback: any strides, any shape, any alignment.
__global__ void __launch_bounds__(fbThreads)
gemv_splitk_scalar_kernel(const float* __restrict__ A, const float* __restrict__ B,
                          float* __restrict__ partials, int M, long long K,
                          long long sa0, long long sa1, long long sb0, long long chunk) {
    const int ks = blockIdx.x;
    const int row0 = blockIdx.y * fbRows;
    const int tid = threadIdx.x;
    const long long kbeg = (long long)ks * chunk;
    long long kend = kbeg + chunk;
    if (kend > K) kend = K;

    float acc[fbRows];
#pragma unroll
    for (int r = 0; r < fbRows; ++r) acc[r] = 0.0f;

    for (long long k = kbeg + tid; k < kend; k += fbThreads) {
        const float bv = __ldg(B + k * sb0);
#pragma unroll
        for (int r = 0; r < fbRows; ++r) {
            const int row = row0 + r;
            if (row < M) acc[r] = fmaf(__ldg(A + (long long)row * sa0 + k * sa1), bv, acc[r]);
        }
    }

    __shared__ float red[fbWarps][fbRows];
    const int warp = tid >> 5;
    const int lane = tid & 31;
#pragma unroll
    for (int r = 0; r < fbRows; ++r) {
        const float v = warp_sum(acc[r]);
        if (lane == 0) red[warp][r] = v;
    }
    __syncthreads();
    if (tid < fbRows && row0 + tid < M) {
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < fbWarps; ++w) s += red[w][tid];
        partials[(long long)(row0 + tid) * fbSplit + ks] = s;
    }
}

// Finishing reduction for the fallback: one warp per output row, fixed summation order.
__global__ void __launch_bounds__(256)
gemv_finish_kernel(const float* __restrict__ partials, float* __restrict__ out, int M) {
    const int row = (int)((blockIdx.x * (unsigned)blockDim.x + threadIdx.x) >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= M) return;  // uniform per warp
    const float* __restrict__ p = partials + (long long)row * fbSplit;
    float s = 0.0f;
    for (int j = lane; j < fbSplit; j += 32) s += p[j];
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
    TORCH_CHECK(B.size(0) == K, "B must have K rows");

    const c10::cuda::CUDAGuard device_guard(A.device());
    auto out = at::empty({M, 1}, A.options());
    if (M == 0) return out;
    if (K == 0) return at::zeros({M, 1}, A.options());

    cudaStream_t stream = at::cuda::getCurrentCUDAStream();

    const float* a_ptr = A.data_ptr<float>();
    const float* b_ptr = B.data_ptr<float>();
    float* o_ptr = out.data_ptr<float>();

    const int64_t sa0 = A.stride(0);
    const int64_t sa1 = A.stride(1);
    const int64_t sb0 = B.stride(0);

    const bool aligned = ((reinterpret_cast<uintptr_t>(a_ptr) & 15u) == 0) &&
                         ((reinterpret_cast<uintptr_t>(b_ptr) & 15u) == 0);
    const bool vec_ok = aligned && (sa1 == 1) && (sb0 == 1) && (sa0 % 4 == 0) && (sa0 >= K) &&
                        (K % ((int64_t)4 * kThreads) == 0) && (M % kRows == 0) &&
                        (M <= (int64_t)std::numeric_limits<int>::max());

    if (vec_ok) {
        const long long C = (long long)(K / ((int64_t)4 * kThreads));  // chunks per row group
        const long long G = (long long)(M / kRows);                    // row groups
        const long long kMax = std::numeric_limits<long long>::max();
        if (C >= 1 && G >= 1 && C <= kMax / G) {
            const long long U = G * C;  // total chunks
            int sms = 0;
            int bps = 0;
            if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, A.get_device()) !=
                    cudaSuccess || sms < 1) {
                (void)cudaGetLastError();
                sms = 1;
            }
            if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, gemv_streamk_kernel, kThreads,
                                                              0) != cudaSuccess || bps < 1) {
                (void)cudaGetLastError();
                bps = 1;
            }
            long long P = (long long)sms * (long long)bps;
            if (P < G) P = G;  // each block spans at most two row groups
            if (P > U) P = U;  // every block owns at least one chunk
            if (P <= (long long)std::numeric_limits<int>::max() && U <= kMax / (P + 1)) {
                auto ws = at::empty({(int64_t)P * 2 * kRows}, A.options());
                float* w_ptr = ws.data_ptr<float>();
                const float4* a4 = reinterpret_cast<const float4*>(a_ptr);
                const float4* b4 = reinterpret_cast<const float4*>(b_ptr);
                const long long lda4 = (long long)(sa0 / 4);
                gemv_streamk_kernel<<<(unsigned)P, kThreads, 0, stream>>>(a4, b4, w_ptr, lda4, C,
                                                                          U, P);
                C10_CUDA_KERNEL_LAUNCH_CHECK();
                const unsigned fin_blocks =
                    (unsigned)((M + kFinishThreads - 1) / kFinishThreads);
                gemv_streamk_finish_kernel<<<fin_blocks, kFinishThreads, 0, stream>>>(
                    w_ptr, o_ptr, (int)M, C, U, P);
                C10_CUDA_KERNEL_LAUNCH_CHECK();
                return out;
            }
        }
    }

    auto partials = at::empty({M, (int64_t)fbSplit}, A.options());
    float* p_ptr = partials.data_ptr<float>();
    const int64_t gy = (M + fbRows - 1) / fbRows;
    TORCH_CHECK(gy <= 65535, "M too large for this kernel");
    const long long chunk = (long long)((K + fbSplit - 1) / fbSplit);
    dim3 grid((unsigned)fbSplit, (unsigned)gy);
    gemv_splitk_scalar_kernel<<<grid, fbThreads, 0, stream>>>(
        a_ptr, b_ptr, p_ptr, (int)M, (long long)K, (long long)sa0, (long long)sa1,
        (long long)sb0, chunk);
    C10_CUDA_KERNEL_LAUNCH_CHECK();

    const int64_t fin_blocks = (M * 32 + 255) / 256;
    gemv_finish_kernel<<<(unsigned)fin_blocks, 256, 0, stream>>>(p_ptr, o_ptr, (int)M);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
