#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <limits>

#define TML_EPS 1e-6f
#define TML_MARGIN 1.0f

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

// Fast path: one block per row, float4 loads, VEC float4 per tensor per thread in flight.
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
tml_row_vec4_kernel(const float4* __restrict__ A, const float4* __restrict__ P,
                    const float4* __restrict__ Q, float* __restrict__ row_loss, int D4) {
    const size_t base = (size_t)blockIdx.x * (size_t)D4;
    float sp, sn;
    tml_row_sums<THREADS, VEC>(A + base, P + base, Q + base, D4, sp, sn);
    tml_block_reduce2<THREADS>(sp, sn);
    if (threadIdx.x == 0) row_loss[blockIdx.x] = tml_row_loss(sp, sn);
}

// Fused: per-row loss + last-block fixed-order mean (atomic ticket only decides who finishes).
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

torch::Tensor forward(torch::Tensor anchor, torch::Tensor positive, torch::Tensor negative) {
    TORCH_CHECK(anchor.is_cuda() && positive.is_cuda() && negative.is_cuda(),
                "inputs must be CUDA tensors");
    TORCH_CHECK(anchor.scalar_type() == at::kFloat && positive.scalar_type() == at::kFloat &&
                negative.scalar_type() == at::kFloat, "inputs must be float32");
    TORCH_CHECK(anchor.dim() == 2, "anchor must be 2-D");
    TORCH_CHECK(anchor.sizes() == positive.sizes() && anchor.sizes() == negative.sizes(),
                "input shapes must match");
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
    const bool vec_ok = (D % 4 == 0) && (D / 4 <= (int64_t)INT32_MAX) &&
                        tml_aligned16(pa) && tml_aligned16(pp) && tml_aligned16(pn);
    auto row_loss = at::empty({N}, opts);
    float* prl = row_loss.data_ptr<float>();
    if (vec_ok && N <= (int64_t)INT32_MAX) {
        constexpr int T = 256;
        constexpr int V = 8;
        auto counter = at::zeros({1}, opts.dtype(at::kInt));
        tml_fused_kernel<T, V><<<(unsigned int)N, T, 0, stream>>>(
            reinterpret_cast<const float4*>(pa), reinterpret_cast<const float4*>(pp),
            reinterpret_cast<const float4*>(pn), prl,
            reinterpret_cast<unsigned int*>(counter.data_ptr<int>()), out.data_ptr<float>(),
            (int)N, (int)(D / 4));
        TML_CHECK_LAUNCH();
    } else {
        tml_row_scalar_kernel<256><<<(unsigned int)N, 256, 0, stream>>>(pa, pp, pn, prl, D);
        TML_CHECK_LAUNCH();
        tml_final_mean_kernel<1024><<<1, 1024, 0, stream>>>(prl, N, out.data_ptr<float>());
        TML_CHECK_LAUNCH();
    }
    return out;
}
