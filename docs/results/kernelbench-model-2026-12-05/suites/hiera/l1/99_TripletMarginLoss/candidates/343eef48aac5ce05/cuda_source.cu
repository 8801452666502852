// TripletMarginLoss (margin 1, p 2, eps 1e-6, mean): persistent warp-per-row stream.
// Variant: db kernel, 256 threads/block, VEC=4, __launch_bounds__(256, 2).
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <limits>

// Compile-time switch: 1 keeps the round-1 configuration (one 256-thread block per row, fused
// last-block mean) as the fast path; 0 (default) uses the persistent warp-per-row kernel.
#ifndef TML_USE_BLOCK_PER_ROW
#define TML_USE_BLOCK_PER_ROW 0
#endif

#define TML_EPS 1e-6f
#define TML_MARGIN 1.0f
#define TML_MAX_DEVICES 64

#define TML_CHECK_LAUNCH()                                                        \
    do {                                                                          \
        cudaError_t err__ = cudaGetLastError();                                   \
        TORCH_CHECK(err__ == cudaSuccess, "CUDA launch failed: ",                 \
                    cudaGetErrorString(err__));                                   \
    } while (0)

__device__ __forceinline__ float tml_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double tml_warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Result valid in thread 0 (in all of warp 0).
template <int THREADS>
__device__ __forceinline__ void tml_block_reduce2(float& a, float& b) {
    constexpr int NW = THREADS / 32;
    __shared__ float sa[NW];
    __shared__ float sb[NW];
    a = tml_warp_sum(a);
    b = tml_warp_sum(b);
    const int lane = threadIdx.x & 31;
    const int w = threadIdx.x >> 5;
    if (lane == 0) { sa[w] = a; sb[w] = b; }
    __syncthreads();
    if (w == 0) {
        a = (lane < NW) ? sa[lane] : 0.0f;
        b = (lane < NW) ? sb[lane] : 0.0f;
        a = tml_warp_sum(a);
        b = tml_warp_sum(b);
    }
}

__device__ __forceinline__ void tml_accum4(const float4 a, const float4 p, const float4 q,
                                           float& sp0, float& sp1, float& sp2, float& sp3,
                                           float& sn0, float& sn1, float& sn2, float& sn3) {
    float d;
    d = (a.x - p.x) + TML_EPS; sp0 = fmaf(d, d, sp0);
    d = (a.y - p.y) + TML_EPS; sp1 = fmaf(d, d, sp1);
    d = (a.z - p.z) + TML_EPS; sp2 = fmaf(d, d, sp2);
    d = (a.w - p.w) + TML_EPS; sp3 = fmaf(d, d, sp3);
    d = (a.x - q.x) + TML_EPS; sn0 = fmaf(d, d, sn0);
    d = (a.y - q.y) + TML_EPS; sn1 = fmaf(d, d, sn1);
    d = (a.z - q.z) + TML_EPS; sn2 = fmaf(d, d, sn2);
    d = (a.w - q.w) + TML_EPS; sn3 = fmaf(d, d, sn3);
}

__device__ __forceinline__ float tml_row_loss(float sp, float sn) {
    const float dap = sqrtf(sp);
    const float dan = sqrtf(sn);
    return fmaxf((TML_MARGIN + dap) - dan, 0.0f);
}

// Generic scalar path: any D, any alignment. One block per row.
template <int THREADS>
__global__ void __launch_bounds__(THREADS)
tml_row_scalar_kernel(const float* __restrict__ A, const float* __restrict__ P,
                      const float* __restrict__ Q, float* __restrict__ row_loss, int64_t D) {
    const int64_t base = (int64_t)blockIdx.x * D;
    const float* a = A + base;
    const float* p = P + base;
    const float* q = Q + base;
    float sp = 0.0f, sn = 0.0f;
    for (int64_t j = threadIdx.x; j < D; j += THREADS) {
        const float av = a[j];
        float d = (av - p[j]) + TML_EPS;
        sp = fmaf(d, d, sp);
        d = (av - q[j]) + TML_EPS;
        sn = fmaf(d, d, sn);
    }
    tml_block_reduce2<THREADS>(sp, sn);
    if (threadIdx.x == 0) row_loss[blockIdx.x] = tml_row_loss(sp, sn);
}

// Deterministic fixed-order mean of N per-row losses, accumulated in double.
template <int THREADS>
__global__ void __launch_bounds__(THREADS)
tml_final_mean_kernel(const float* __restrict__ row_loss, int64_t N, float* __restrict__ out) {
    constexpr int NW = THREADS / 32;
    __shared__ double sd[NW];
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < N; i += THREADS) s += (double)row_loss[i];
    s = tml_warp_sum_d(s);
    const int lane = threadIdx.x & 31;
    const int w = threadIdx.x >> 5;
    if (lane == 0) sd[w] = s;
    __syncthreads();
    if (w == 0) {
        s = (lane < NW) ? sd[lane] : 0.0;
        s = tml_warp_sum_d(s);
        if (lane == 0) out[0] = (float)(s / (double)N);
    }
}

static inline bool tml_aligned16(const void* ptr) {
    return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0;
}

__device__ __forceinline__ float4 tml_ld(const float4* ptr) { return __ldcs(ptr); }

// ---------------------------------------------------------------------------------------------
// Round-1 configuration (kept selectable): one block per row, float4 loads, fused last-block mean.
// ---------------------------------------------------------------------------------------------
template <int THREADS, int VEC>
__device__ __forceinline__ void tml_row_sums(const float4* __restrict__ a, const float4* __restrict__ p,
                                             const float4* __restrict__ q, int D4,
                                             float& sp_out, float& sn_out) {
    const int tid = threadIdx.x;
    float sp0 = 0.f, sp1 = 0.f, sp2 = 0.f, sp3 = 0.f;
    float sn0 = 0.f, sn1 = 0.f, sn2 = 0.f, sn3 = 0.f;
    constexpr int CHUNK = THREADS * VEC;
    const int full = (D4 / CHUNK) * CHUNK;
    for (int s = 0; s < full; s += CHUNK) {
        float4 ra[VEC], rp[VEC], rq[VEC];
#pragma unroll
        for (int k = 0; k < VEC; ++k) ra[k] = tml_ld(a + s + tid + k * THREADS);
#pragma unroll
        for (int k = 0; k < VEC; ++k) rp[k] = tml_ld(p + s + tid + k * THREADS);
#pragma unroll
        for (int k = 0; k < VEC; ++k) rq[k] = tml_ld(q + s + tid + k * THREADS);
#pragma unroll
        for (int k = 0; k < VEC; ++k)
            tml_accum4(ra[k], rp[k], rq[k], sp0, sp1, sp2, sp3, sn0, sn1, sn2, sn3);
    }
    for (int i = full + tid; i < D4; i += THREADS) {
        const float4 va = tml_ld(a + i);
        const float4 vp = tml_ld(p + i);
        const float4 vq = tml_ld(q + i);
        tml_accum4(va, vp, vq, sp0, sp1, sp2, sp3, sn0, sn1, sn2, sn3);
    }
    sp_out = (sp0 + sp1) + (sp2 + sp3);
    sn_out = (sn0 + sn1) + (sn2 + sn3);
}

template <int THREADS, int VEC>
__global__ void __launch_bounds__(THREADS)
tml_fused_kernel(const float4* __restrict__ A, const float4* __restrict__ P,
                 const float4* __restrict__ Q, float* __restrict__ row_loss,
                 unsigned int* __restrict__ counter, float* __restrict__ out, int N, int D4) {
    const size_t base = (size_t)blockIdx.x * (size_t)D4;
    float sp, sn;
    tml_row_sums<THREADS, VEC>(A + base, P + base, Q + base, D4, sp, sn);
    tml_block_reduce2<THREADS>(sp, sn);
    __shared__ unsigned int s_is_last;
    if (threadIdx.x == 0) {
        row_loss[blockIdx.x] = tml_row_loss(sp, sn);
        __threadfence();
        const unsigned int ticket = atomicAdd(counter, 1u);
        s_is_last = (ticket == gridDim.x - 1u) ? 1u : 0u;
    }
    __syncthreads();
    if (s_is_last) {
        __threadfence();
        constexpr int NW = THREADS / 32;
        __shared__ double sd[NW];
        double s = 0.0;
        for (int i = threadIdx.x; i < N; i += THREADS) s += (double)__ldcg(row_loss + i);
        s = tml_warp_sum_d(s);
        const int lane = threadIdx.x & 31;
        const int w = threadIdx.x >> 5;
        if (lane == 0) sd[w] = s;
        __syncthreads();
        if (w == 0) {
            s = (lane < NW) ? sd[lane] : 0.0;
            s = tml_warp_sum_d(s);
            if (lane == 0) out[0] = (float)(s / (double)N);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Persistent warp-per-row building blocks.
// ---------------------------------------------------------------------------------------------

// Loads one chunk (VEC float4 per lane per tensor, lane-strided by 32) at float4 offset `off`
// (which already includes the lane). All loads of a, then p, then q are issued before any math.
template <int VEC>
__device__ __forceinline__ void tml_load_chunk(const float4* __restrict__ A, const float4* __restrict__ P,
                                               const float4* __restrict__ Q, int off,
                                               float4 (&ra)[VEC], float4 (&rp)[VEC], float4 (&rq)[VEC]) {
    const float4* a = A + off;
    const float4* p = P + off;
    const float4* q = Q + off;
#pragma unroll
    for (int k = 0; k < VEC; ++k) ra[k] = tml_ld(a + k * 32);
#pragma unroll
    for (int k = 0; k < VEC; ++k) rp[k] = tml_ld(p + k * 32);
#pragma unroll
    for (int k = 0; k < VEC; ++k) rq[k] = tml_ld(q + k * 32);
}

template <int VEC>
__device__ __forceinline__ void tml_accum_chunk(const float4 (&ra)[VEC], const float4 (&rp)[VEC],
                                                const float4 (&rq)[VEC],
                                                float& sp0, float& sp1, float& sp2, float& sp3,
                                                float& sn0, float& sn1, float& sn2, float& sn3) {
#pragma unroll
    for (int k = 0; k < VEC; ++k)
        tml_accum4(ra[k], rp[k], rq[k], sp0, sp1, sp2, sp3, sn0, sn1, sn2, sn3);
}

// Fixed-order (row index order per thread, then fixed warp/block tree) double-precision mean,
// executed by the whole last block. Loads are batched so many L2 reads are in flight at once,
// while the accumulation order stays the same fixed order every run.
template <int THREADS>
__device__ __forceinline__ void tml_last_block_mean(const float* __restrict__ row_loss, int N,
                                                    float* __restrict__ out) {
    constexpr int NW = THREADS / 32;
    constexpr int B = 8;
    __shared__ double sd[NW];
    double s = 0.0;
    const int n4 = N >> 2;
    const float4* rl4 = reinterpret_cast<const float4*>(row_loss);
    int i = threadIdx.x;
    for (; i + (B - 1) * THREADS < n4; i += B * THREADS) {
        float4 v[B];
#pragma unroll
        for (int k = 0; k < B; ++k) v[k] = __ldcg(rl4 + i + k * THREADS);
#pragma unroll
        for (int k = 0; k < B; ++k) {
            s += (double)v[k].x;
            s += (double)v[k].y;
            s += (double)v[k].z;
            s += (double)v[k].w;
        }
    }
    for (; i < n4; i += THREADS) {
        const float4 v = __ldcg(rl4 + i);
        s += (double)v.x;
        s += (double)v.y;
        s += (double)v.z;
        s += (double)v.w;
    }
    for (int j = (n4 << 2) + (int)threadIdx.x; j < N; j += THREADS) s += (double)__ldcg(row_loss + j);
    s = tml_warp_sum_d(s);
    const int lane = threadIdx.x & 31;
    const int w = threadIdx.x >> 5;
    if (lane == 0) sd[w] = s;
    __syncthreads();
    if (w == 0) {
        s = (lane < NW) ? sd[lane] : 0.0;
        s = tml_warp_sum_d(s);
        if (lane == 0) out[0] = (float)(s / (double)N);
    }
}

// Called by every thread of the block once all of its warps are done (one barrier per block,
// not per row). The atomic ticket only decides which block finishes, never the summation order.
// Each row_loss writer (lane 0 of each warp) has already issued __threadfence() after its stores.
template <int THREADS>
__device__ __forceinline__ void tml_block_finish(const float* __restrict__ row_loss,
                                                 unsigned int* __restrict__ counter,
                                                 float* __restrict__ out, int N) {
    __shared__ unsigned int s_is_last;
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        const unsigned int ticket = atomicAdd(counter, 1u);
        s_is_last = (ticket == gridDim.x - 1u) ? 1u : 0u;
    }
    __syncthreads();
    if (s_is_last) {
        __threadfence();
        tml_last_block_mean<THREADS>(row_loss, N, out);
    }
}

// ---------------------------------------------------------------------------------------------
// Host helpers.
// ---------------------------------------------------------------------------------------------
static int tml_sm_count(int dev) {
    static int cache[TML_MAX_DEVICES] = {0};
    const bool cacheable = dev >= 0 && dev < TML_MAX_DEVICES;
    if (cacheable && cache[dev] > 0) return cache[dev];
    int v = 0;
    const cudaError_t e = cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev);
    TORCH_CHECK(e == cudaSuccess, "cudaDeviceGetAttribute failed: ", cudaGetErrorString(e));
    if (v < 1) v = 1;
    if (cacheable) cache[dev] = v;
    return v;
}

template <typename KernelT>
static int tml_blocks_per_sm(KernelT kernel, int threads, int dev, int* cache) {
    const bool cacheable = dev >= 0 && dev < TML_MAX_DEVICES;
    if (cacheable && cache[dev] > 0) return cache[dev];
    int v = 0;
    const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, kernel, threads, 0);
    TORCH_CHECK(e == cudaSuccess, "cudaOccupancyMaxActiveBlocksPerMultiprocessor failed: ",
                cudaGetErrorString(e));
    if (v < 1) v = 1;
    if (cacheable) cache[dev] = v;
    return v;
}

// Persistent grid: numSMs x blocksPerSM, never more blocks than there are rows to give warps.
static int64_t tml_persistent_grid(int sms, int bps, int64_t N, int warps_per_block) {
    int64_t grid = (int64_t)sms * (int64_t)bps;
    const int64_t want = (N + warps_per_block - 1) / warps_per_block;
    if (grid > want) grid = want;
    if (grid < 1) grid = 1;
    return grid;
}

// Offsets inside the warp kernels are 32-bit: every float4 index touched, plus the row stride
// overshoot of one grid of warps, must fit in a signed int.
static inline bool tml_fits_int32(int64_t N, int64_t D4, int64_t total_warps) {
    return N * D4 + total_warps * (D4 + 1) + 4096 <= (int64_t)INT32_MAX;
}

static void tml_launch_block_fused(const float* pa, const float* pp, const float* pn, float* prl,
                                   unsigned int* counter, float* pout, int64_t N, int64_t D,
                                   cudaStream_t stream) {
    constexpr int T = 256;
    constexpr int V = 8;
    tml_fused_kernel<T, V><<<(unsigned int)N, T, 0, stream>>>(
        reinterpret_cast<const float4*>(pa), reinterpret_cast<const float4*>(pp),
        reinterpret_cast<const float4*>(pn), prl, counter, pout, (int)N, (int)(D / 4));
    TML_CHECK_LAUNCH();
}

static void tml_launch_scalar_fallback(const float* pa, const float* pp, const float* pn, float* prl,
                                       float* pout, int64_t N, int64_t D, cudaStream_t stream) {
    tml_row_scalar_kernel<256><<<(unsigned int)N, 256, 0, stream>>>(pa, pp, pn, prl, D);
    TML_CHECK_LAUNCH();
    tml_final_mean_kernel<1024><<<1, 1024, 0, stream>>>(prl, N, pout);
    TML_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------------------------
// Persistent warp-per-row kernel, register double-buffered. A warp owns a whole row and walks
// it in pairs of chunks (X, Y) of 32*VEC float4 each: Y's loads are issued before X is consumed
// and X is refilled (with the next chunk, or the next row's first chunk at the end of a row)
// before Y is consumed, so at least one chunk (3*VEC independent 16-byte loads per lane) is
// always in flight, including across the row boundary and during the shuffle reduction.
// Rows are handed out grid-stride over warps. Requires D4 % (64*VEC) == 0 and D4 > 0 (host).
// ---------------------------------------------------------------------------------------------
template <int THREADS, int VEC, int MINB>
__global__ void __launch_bounds__(THREADS, MINB)
tml_warp_row_db_kernel(const float4* __restrict__ A, const float4* __restrict__ P,
                       const float4* __restrict__ Q, float* __restrict__ row_loss,
                       unsigned int* __restrict__ counter, float* __restrict__ out, int N, int D4) {
    constexpr int WPB = THREADS / 32;
    constexpr int CH = 32 * VEC;
    constexpr int CH2 = 2 * CH;
    const int lane = threadIdx.x & 31;
    const int total_warps = (int)gridDim.x * WPB;
    int row = (int)blockIdx.x * WPB + (int)(threadIdx.x >> 5);

    float4 xa[VEC], xp[VEC], xq[VEC];
    float4 ya[VEC], yp[VEC], yq[VEC];
    if (row < N) tml_load_chunk<VEC>(A, P, Q, row * D4 + lane, xa, xp, xq);

    while (row < N) {
        const int rbase = row * D4 + lane;
        const int next = row + total_warps;
        float sp0 = 0.f, sp1 = 0.f, sp2 = 0.f, sp3 = 0.f;
        float sn0 = 0.f, sn1 = 0.f, sn2 = 0.f, sn3 = 0.f;
        for (int c = 0; c < D4; c += CH2) {
            tml_load_chunk<VEC>(A, P, Q, rbase + c + CH, ya, yp, yq);
            tml_accum_chunk<VEC>(xa, xp, xq, sp0, sp1, sp2, sp3, sn0, sn1, sn2, sn3);
            if (c + CH2 < D4) {
                tml_load_chunk<VEC>(A, P, Q, rbase + c + CH2, xa, xp, xq);
            } else if (next < N) {
                tml_load_chunk<VEC>(A, P, Q, next * D4 + lane, xa, xp, xq);
            }
            tml_accum_chunk<VEC>(ya, yp, yq, sp0, sp1, sp2, sp3, sn0, sn1, sn2, sn3);
        }
        float sp = (sp0 + sp1) + (sp2 + sp3);
        float sn = (sn0 + sn1) + (sn2 + sn3);
        sp = tml_warp_sum(sp);
        sn = tml_warp_sum(sn);
        if (lane == 0) row_loss[row] = tml_row_loss(sp, sn);
        row = next;
    }
    if (lane == 0) __threadfence();
    tml_block_finish<THREADS>(row_loss, counter, out, N);
}

torch::Tensor forward(torch::Tensor anchor, torch::Tensor positive, torch::Tensor negative) {
    TORCH_CHECK(anchor.is_cuda() && positive.is_cuda() && negative.is_cuda(),
                "inputs must be CUDA tensors");
    TORCH_CHECK(anchor.scalar_type() == at::kFloat && positive.scalar_type() == at::kFloat &&
                negative.scalar_type() == at::kFloat, "inputs must be float32");
    TORCH_CHECK(anchor.dim() == 2, "anchor must be 2-D");
    TORCH_CHECK(anchor.sizes() == positive.sizes() && anchor.sizes() == negative.sizes(),
                "input shapes must match");
    const c10::cuda::CUDAGuard device_guard(anchor.device());
    auto a = anchor.contiguous();
    auto p = positive.contiguous();
    auto n = negative.contiguous();
    const int64_t N = a.size(0);
    const int64_t D = a.size(1);
    auto opts = a.options();
    auto out = at::empty({}, opts);
    if (N == 0) {
        out.fill_(std::numeric_limits<float>::quiet_NaN());
        return out;
    }
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    const float* pa = a.data_ptr<float>();
    const float* pp = p.data_ptr<float>();
    const float* pn = n.data_ptr<float>();
    float* pout = out.data_ptr<float>();
    const bool vec_ok = (D % 4 == 0) && (D / 4 <= (int64_t)INT32_MAX) &&
                        tml_aligned16(pa) && tml_aligned16(pp) && tml_aligned16(pn);
    auto row_loss = at::empty({N}, opts);
    float* prl = row_loss.data_ptr<float>();
    if (vec_ok && N <= (int64_t)INT32_MAX) {
        auto counter = at::zeros({1}, opts.dtype(at::kInt));
        unsigned int* pc = reinterpret_cast<unsigned int*>(counter.data_ptr<int>());
#if TML_USE_BLOCK_PER_ROW
        tml_launch_block_fused(pa, pp, pn, prl, pc, pout, N, D, stream);
#else
        constexpr int T = 256;
        constexpr int V = 4;
        constexpr int MINB = 2;
        constexpr int WPB = T / 32;
        const int64_t D4 = D / 4;
        const int dev = a.get_device();
        static int s_bps[TML_MAX_DEVICES] = {0};
        auto kern = &tml_warp_row_db_kernel<T, V, MINB>;
        const int sms = tml_sm_count(dev);
        const int bps = tml_blocks_per_sm(kern, T, dev, s_bps);
        const int64_t grid = tml_persistent_grid(sms, bps, N, WPB);
        if ((D4 > 0) && (D4 % (64 * V) == 0) && tml_fits_int32(N, D4, grid * WPB) && tml_aligned16(prl)) {
            tml_warp_row_db_kernel<T, V, MINB><<<(unsigned int)grid, T, 0, stream>>>(
                reinterpret_cast<const float4*>(pa), reinterpret_cast<const float4*>(pp),
                reinterpret_cast<const float4*>(pn), prl, pc, pout, (int)N, (int)D4);
            TML_CHECK_LAUNCH();
        } else {
            tml_launch_block_fused(pa, pp, pn, prl, pc, pout, N, D, stream);
        }
#endif
    } else {
        tml_launch_scalar_fallback(pa, pp, pn, prl, pout, N, D, stream);
    }
    return out;
}
