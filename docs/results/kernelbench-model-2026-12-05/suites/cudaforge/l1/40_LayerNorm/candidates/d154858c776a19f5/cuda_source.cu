// persistent-cooperative-row-resident LayerNorm (F): next row TMA bulk-copied into smem with evict_first hint, w/b plain read-only loads; two-kernel fallback.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

constexpr int kStatsThreads = 256;
constexpr int kStatsChunks = 128;
constexpr int kNormThreads = 512;
constexpr int kNormVec = 4;
constexpr int kMaxRows = 64;
constexpr double kEps = 1e-5;

// Fused persistent path: one 512-thread block per SM, 16 float4 of each row per thread.
constexpr int kFThreads = 512;
constexpr int kFVec = 16;
constexpr int kFWarps = kFThreads / 32;
constexpr unsigned kChunkBytes = 8192u;

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ void acc4(const float4 v, float& s, float& q) {
    s += (v.x + v.y) + (v.z + v.w);
    q = fmaf(v.x, v.x, q);
    q = fmaf(v.y, v.y, q);
    q = fmaf(v.z, v.z, q);
    q = fmaf(v.w, v.w, q);
}

// ---------------------------------------------------------------------------------------------
// Fallback: split-row two-kernel LayerNorm (unchanged).
// ---------------------------------------------------------------------------------------------
__global__ void __launch_bounds__(kStatsThreads)
ln_partial_stats_kernel(const float4* __restrict__ x, double2* __restrict__ ws,
                        long long n4, int C) {
    const int r = blockIdx.x;
    const int c = blockIdx.y;
    const long long start = ((long long)c * n4) / C;
    const long long end = ((long long)(c + 1) * n4) / C;
    const int cnt = (int)(end - start);
    const float4* __restrict__ p = x + (long long)r * n4 + start;

    float s0 = 0.f, s1 = 0.f, q0 = 0.f, q1 = 0.f;
    int i = threadIdx.x;
    for (; i + 3 * kStatsThreads < cnt; i += 4 * kStatsThreads) {
        const float4 a = __ldg(p + i);
        const float4 b = __ldg(p + i + kStatsThreads);
        const float4 cc = __ldg(p + i + 2 * kStatsThreads);
        const float4 d = __ldg(p + i + 3 * kStatsThreads);
        acc4(a, s0, q0);
        acc4(b, s1, q1);
        acc4(cc, s0, q0);
        acc4(d, s1, q1);
    }
    for (; i < cnt; i += kStatsThreads) {
        const float4 a = __ldg(p + i);
        acc4(a, s0, q0);
    }
    double s = (double)s0 + (double)s1;
    double q = (double)q0 + (double)q1;
    s = warp_sum(s);
    q = warp_sum(q);
    __shared__ double sh_s[kStatsThreads / 32];
    __shared__ double sh_q[kStatsThreads / 32];
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    if (lane == 0) { sh_s[warp] = s; sh_q[warp] = q; }
    __syncthreads();
    if (warp == 0) {
        s = (lane < kStatsThreads / 32) ? sh_s[lane] : 0.0;
        q = (lane < kStatsThreads / 32) ? sh_q[lane] : 0.0;
        s = warp_sum(s);
        q = warp_sum(q);
        if (lane == 0) ws[(long long)r * C + c] = make_double2(s, q);
    }
}

template <int VEC>
__device__ __forceinline__ void load_row(const float4* __restrict__ xr, long long base,
                                         long long n4, float4 (&v)[VEC]) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
        const long long idx = base + (long long)j * kNormThreads;
        if (idx < n4) v[j] = __ldcs(xr + idx);
        else v[j] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

template <int VEC>
__global__ void __launch_bounds__(kNormThreads)
ln_normalize_kernel(const float4* __restrict__ x, const float4* __restrict__ w,
                    const float4* __restrict__ b, const double2* __restrict__ ws,
                    float4* __restrict__ out, long long n4, int R, int C, double inv_n) {
    __shared__ float sh_mean[kMaxRows];
    __shared__ float sh_rstd[kMaxRows];
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;

    const long long blk = (long long)(gridDim.x - 1 - blockIdx.x);   // reverse chunk order
    const long long base = blk * (long long)(VEC * kNormThreads) + threadIdx.x;

    float4 xv[VEC];
    load_row<VEC>(x, base, n4, xv);
    float4 wv[VEC], bv[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
        const long long idx = base + (long long)j * kNormThreads;
        if (idx < n4) {
            wv[j] = __ldg(w + idx);
            bv[j] = __ldg(b + idx);
        } else {
            wv[j] = make_float4(0.f, 0.f, 0.f, 0.f);
            bv[j] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
    }

    for (int r = warp; r < R; r += kNormThreads / 32) {
        double s = 0.0, q = 0.0;
        const double2* __restrict__ pr = ws + (long long)r * C;
        for (int k = lane; k < C; k += 32) {
            const double2 v = pr[k];
            s += v.x;
            q += v.y;
        }
        s = warp_sum(s);
        q = warp_sum(q);
        if (lane == 0) {
            const double mean = s * inv_n;
            double var = q * inv_n - mean * mean;
            var = var > 0.0 ? var : 0.0;
            sh_mean[r] = (float)mean;
            sh_rstd[r] = (float)(1.0 / sqrt(var + kEps));
        }
    }
    __syncthreads();

    for (int r = 0; r < R; ++r) {
        float4 xn[VEC];
        const bool has_next = (r + 1 < R);
        if (has_next) load_row<VEC>(x + (long long)(r + 1) * n4, base, n4, xn);

        const float m = sh_mean[r];
        const float rs = sh_rstd[r];
        float4* __restrict__ orow = out + (long long)r * n4;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const long long idx = base + (long long)j * kNormThreads;
            if (idx < n4) {
                float4 y;
                y.x = fmaf((xv[j].x - m) * rs, wv[j].x, bv[j].x);
                y.y = fmaf((xv[j].y - m) * rs, wv[j].y, bv[j].y);
                y.z = fmaf((xv[j].z - m) * rs, wv[j].z, bv[j].z);
                y.w = fmaf((xv[j].w - m) * rs, wv[j].w, bv[j].w);
                __stcs(orow + idx, y);
            }
        }
        if (has_next) {
#pragma unroll
            for (int j = 0; j < VEC; ++j) xv[j] = xn[j];
        }
    }
}

// ---------------------------------------------------------------------------------------------
// PTX helpers for the fused persistent path.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ uint64_t policy_evict_last() {
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}

__device__ __forceinline__ uint64_t policy_evict_first() {
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}

// Read-only 16-byte load with an L2 cache policy. volatile keeps it inside the row loop
// (it must not be hoisted into a register array that would blow the register budget).
__device__ __forceinline__ float4 ld_nc_hint(const float4* p, uint64_t pol) {
    float4 v;
    asm volatile("ld.global.nc.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "l"(p), "l"(pol));
    return v;
}

__device__ __forceinline__ float4 ld_nc_v4(const float4* p) {
    float4 v;
    asm volatile("ld.global.nc.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ int ld_acquire_gpu(const int* p) {
    int v;
    asm volatile("ld.global.acquire.gpu.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void bulk_prefetch_l2(const void* p, unsigned bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(p), "r"(bytes) : "memory");
}

// All 32 lanes of one warp: prefetch n float4 starting at p into L2, in 8 KB bulk pieces.
__device__ __forceinline__ void prefetch_slice_bulk(const float4* p, int n, int lane) {
    const unsigned total = (unsigned)n * 16u;
    const char* base = reinterpret_cast<const char*>(p);
    for (unsigned off = (unsigned)lane * kChunkBytes; off < total; off += 32u * kChunkBytes) {
        const unsigned rem = total - off;
        bulk_prefetch_l2(base + off, rem < kChunkBytes ? rem : kChunkBytes);
    }
}

__device__ __forceinline__ void prefetch_l2_line(const void* p) {
    asm volatile("prefetch.global.L2 [%0];" :: "l"(p));
}

// All threads of the block: prefetch n float4 starting at p into L2, one 128 B line each.
__device__ __forceinline__ void prefetch_slice_lines(const float4* p, int n, int t) {
    for (int i = t * 8; i < n; i += kFThreads * 8) prefetch_l2_line(p + i);
    if (t == 0 && n > 0) prefetch_l2_line(p + (n - 1));
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_u32(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 :: "r"(smem_u32(bar)), "r"(bytes) : "memory");
}

__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
    uint32_t ok;
    asm volatile("{\n\t.reg .pred p;\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                 "selp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(ok) : "r"(smem_u32(bar)), "r"(parity) : "memory");
    return ok != 0u;
}

__device__ __forceinline__ void tma_load_1d(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(bar)) : "memory");
}

__device__ __forceinline__ void tma_load_1d_hint(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                                 uint64_t pol) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
                 :: "r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(pol) : "memory");
}

// Warp 0 after the grid barrier of row r: sum the G partials in a fixed order (bit-identical in
// every block), then mean / rstd in double, stored as float to shared memory.
__device__ __forceinline__ void finalize_stats(const double2* wsr, int G, int lane, double inv_n,
                                               float* sh_stat) {
    double s = 0.0, q = 0.0;
    for (int k = lane; k < G; k += 32) {
        const double2 v = __ldcg(wsr + k);
        s += v.x;
        q += v.y;
    }
    s = warp_sum(s);
    q = warp_sum(q);
    if (lane == 0) {
        const double mean = s * inv_n;
        double var = q * inv_n - mean * mean;
        var = var > 0.0 ? var : 0.0;
        sh_stat[0] = (float)mean;
        sh_stat[1] = (float)(1.0 / sqrt(var + kEps));
    }
}

// Warp 0 of a block: final block reduction of the per-warp partials and publication.
__device__ __forceinline__ void block_publish(const double* red_s, const double* red_q, int lane,
                                              double2* wsr, int* counter) {
    double s = (lane < kFWarps) ? red_s[lane] : 0.0;
    double q = (lane < kFWarps) ? red_q[lane] : 0.0;
    s = warp_sum(s);
    q = warp_sum(q);
    if (lane == 0) {
        wsr[blockIdx.x] = make_double2(s, q);
        __threadfence();
        atomicAdd(counter, 1);
    }
}

__device__ __forceinline__ void grid_wait(const int* counter, int G, int lane) {
    if (lane == 0) {
        while (ld_acquire_gpu(counter) < G) __nanosleep(32);
    }
    __syncwarp();
}

__device__ __forceinline__ float4 ln_apply(const float4 xv, float m, float rs, const float4 wv,
                                           const float4 bv) {
    float4 y;
    y.x = fmaf((xv.x - m) * rs, wv.x, bv.x);
    y.y = fmaf((xv.y - m) * rs, wv.y, bv.y);
    y.z = fmaf((xv.z - m) * rs, wv.z, bv.z);
    y.w = fmaf((xv.w - m) * rs, wv.w, bv.w);
    return y;
}

// ---------------------------------------------------------------------------------------------
// Fused persistent cooperative LayerNorm with a TMA-staged row (x copies hinted evict_first,
// weight/bias plain read-only loads): one block per SM owns a
// contiguous float4 slice of every row. The slice of row r+1 is bulk-copied (cp.async.bulk,
// mbarrier completion) from DRAM straight into a 128 KB shared-memory buffer while row r is
// reduced, grid-synchronised and normalised from registers. x is read from DRAM exactly once
// and never depends on L2 residency; weight and bias stay L2-resident across rows.
// ---------------------------------------------------------------------------------------------
constexpr size_t kFusedSmem = (size_t)kFVec * kFThreads * sizeof(float4);

// Warp 0 (all lanes): arm the mbarrier with the byte count and issue the slice copy in pieces.
__device__ __forceinline__ void tma_issue_slice_ef(float4* dst, const float4* src, uint32_t bytes,
                                                uint64_t* bar, int lane) {
    const uint64_t pol = policy_evict_first();
    if (lane == 0) mbar_arrive_expect_tx(bar, bytes);
    __syncwarp();
    const char* s = reinterpret_cast<const char*>(src);
    char* d = reinterpret_cast<char*>(dst);
    for (uint32_t off = (uint32_t)lane * kChunkBytes; off < bytes; off += 32u * kChunkBytes) {
        const uint32_t rem = bytes - off;
        tma_load_1d_hint(d + off, s + off, rem < kChunkBytes ? rem : kChunkBytes, bar, pol);
    }
}

__global__ void __launch_bounds__(kFThreads, 1)
ln_fused_tma_ef(const float4* __restrict__ x, const float4* __restrict__ w,
             const float4* __restrict__ b, double2* __restrict__ ws,
             int* __restrict__ cnt, float4* __restrict__ out,
             long long n4, int R, int S, double inv_n) {
    extern __shared__ __align__(128) float4 xbuf[];
    __shared__ __align__(8) uint64_t bar;
    __shared__ double red_s[kFWarps];
    __shared__ double red_q[kFWarps];
    __shared__ float sh_stat[2];

    const int t = threadIdx.x;
    const int warp = t >> 5;
    const int lane = t & 31;
    const int G = (int)gridDim.x;
    const long long start = (long long)blockIdx.x * (long long)S;
    long long stop = start + (long long)S;
    if (stop > n4) stop = n4;
    const int ne = (stop > start) ? (int)(stop - start) : 0;
    const int last = (ne > 0) ? ne - 1 : 0;
    const uint32_t bytes = (uint32_t)ne * 16u;

    if (t == 0) {
        mbar_init(&bar, 1u);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();
    if (warp == 0 && ne > 0) tma_issue_slice_ef(xbuf, x + start, bytes, &bar, lane);

    const float4* __restrict__ wsl = w + start;
    const float4* __restrict__ bs = b + start;

#pragma unroll 1
    for (int r = 0; r < R; ++r) {
        if (ne > 0) {
            while (!mbar_try_wait(&bar, (uint32_t)(r & 1))) {
            }
        }
        float4 xv[kFVec];
#pragma unroll
        for (int j = 0; j < kFVec; ++j) {
            const int idx = t + j * kFThreads;
            const float4 v = xbuf[idx];
            xv[j] = (idx < ne) ? v : make_float4(0.f, 0.f, 0.f, 0.f);
        }
        float s0 = 0.f, s1 = 0.f, q0 = 0.f, q1 = 0.f;
#pragma unroll
        for (int j = 0; j < kFVec; j += 2) {
            acc4(xv[j], s0, q0);
            acc4(xv[j + 1], s1, q1);
        }
        double s = (double)s0 + (double)s1;
        double q = (double)q0 + (double)q1;
        s = warp_sum(s);
        q = warp_sum(q);
        if (lane == 0) { red_s[warp] = s; red_q[warp] = q; }
        __syncthreads();   // every thread has consumed xbuf: it may be refilled
        if (warp == 0) {
            if (r + 1 < R && ne > 0) {
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                tma_issue_slice_ef(xbuf, x + (long long)(r + 1) * n4 + start, bytes, &bar, lane);
            }
            double2* wsr = ws + (long long)r * G;
            block_publish(red_s, red_q, lane, wsr, cnt + r);
            grid_wait(cnt + r, G, lane);
            finalize_stats(wsr, G, lane, inv_n, sh_stat);
        }
        __syncthreads();
        if (ne > 0) {
            const float m = sh_stat[0];
            const float rs = sh_stat[1];
            float4* __restrict__ orow = out + (long long)r * n4 + start;
#pragma unroll
            for (int j = 0; j < kFVec; ++j) {
                const int idx = t + j * kFThreads;
                const int ci = (idx < ne) ? idx : last;
                const float4 wv = ld_nc_v4(wsl + ci);
                const float4 bv = ld_nc_v4(bs + ci);
                const float4 y = ln_apply(xv[j], m, rs, wv, bv);
                if (idx < ne) __stcs(orow + idx, y);
            }
        }
    }
}

#define FUSED_KERNEL ln_fused_tma_ef

}  // namespace

namespace {

bool try_launch_fused(const at::Tensor& xc, const float4* xp, const float4* wp, const float4* bp,
                      float4* op, long long n4, int64_t R, int64_t N, cudaStream_t stream) {
    const cudaDeviceProp* prop = at::cuda::getCurrentDeviceProperties();
    if (prop == nullptr || !prop->cooperativeLaunch) return false;
    const int G = prop->multiProcessorCount;
    if (G <= 0 || R <= 0 || R > (int64_t)(1 << 20)) return false;
    const long long S = (n4 + G - 1) / G;
    if (S <= 0 || S > (long long)kFVec * kFThreads) return false;
    const size_t smem = kFusedSmem;
    if (smem > (size_t)prop->sharedMemPerBlockOptin) return false;
    const int dev = xc.get_device();
    static int s_state[256] = {0};   // per device: 0 unknown, 1 usable, 2 not usable
    if (dev < 0 || dev >= 256) return false;
    if (s_state[dev] == 0) {
        cudaError_t e = cudaSuccess;
        if (smem > 0)
            e = cudaFuncSetAttribute((const void*)FUSED_KERNEL, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)smem);
        int nb = 0;
        if (e == cudaSuccess)
            e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, FUSED_KERNEL, kFThreads, smem);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            s_state[dev] = 2;
        } else {
            s_state[dev] = (nb >= 1) ? 1 : 2;
        }
    }
    if (s_state[dev] != 1) return false;

    auto ws = at::empty({R * (int64_t)G * 2}, xc.options().dtype(at::kDouble));
    auto counters = at::zeros({R}, xc.options().dtype(at::kInt));

    const float4* a_x = xp;
    const float4* a_w = wp;
    const float4* a_b = bp;
    double2* a_ws = reinterpret_cast<double2*>(ws.data_ptr<double>());
    int* a_cnt = counters.data_ptr<int>();
    float4* a_out = op;
    long long a_n4 = n4;
    int a_R = (int)R;
    int a_S = (int)S;
    double a_inv = 1.0 / (double)N;
    void* args[] = {(void*)&a_x, (void*)&a_w, (void*)&a_b, (void*)&a_ws, (void*)&a_cnt,
                    (void*)&a_out, (void*)&a_n4, (void*)&a_R, (void*)&a_S, (void*)&a_inv};
    C10_CUDA_CHECK(cudaLaunchCooperativeKernel((const void*)FUSED_KERNEL, dim3((unsigned)G),
                                               dim3(kFThreads), args, smem, stream));
    return true;
}

}  // namespace

torch::Tensor forward(torch::Tensor x, torch::Tensor ln_weight, torch::Tensor ln_bias) {
    TORCH_CHECK(x.is_cuda() && ln_weight.is_cuda() && ln_bias.is_cuda(), "CUDA tensors expected");
    TORCH_CHECK(x.scalar_type() == at::kFloat && ln_weight.scalar_type() == at::kFloat &&
                ln_bias.scalar_type() == at::kFloat, "float32 tensors expected");
    const c10::cuda::CUDAGuard device_guard(x.device());
    auto xc = x.contiguous();
    auto wc = ln_weight.contiguous();
    auto bc = ln_bias.contiguous();
    const int64_t N = wc.numel();
    TORCH_CHECK(N > 0 && bc.numel() == N, "weight/bias size mismatch");
    const int64_t total = xc.numel();
    TORCH_CHECK(total % N == 0, "x numel must be a multiple of the normalized size");
    const int64_t R = total / N;
    auto out = at::empty(xc.sizes(), xc.options());
    if (R == 0) return out;
    TORCH_CHECK(N % 4 == 0, "normalized size must be a multiple of 4");
    TORCH_CHECK((reinterpret_cast<uintptr_t>(xc.data_ptr<float>()) & 15) == 0 &&
                (reinterpret_cast<uintptr_t>(wc.data_ptr<float>()) & 15) == 0 &&
                (reinterpret_cast<uintptr_t>(bc.data_ptr<float>()) & 15) == 0 &&
                (reinterpret_cast<uintptr_t>(out.data_ptr<float>()) & 15) == 0,
                "16-byte alignment required");

    const long long n4 = (long long)(N / 4);
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();

    const float4* xp = reinterpret_cast<const float4*>(xc.data_ptr<float>());
    const float4* wp = reinterpret_cast<const float4*>(wc.data_ptr<float>());
    const float4* bp = reinterpret_cast<const float4*>(bc.data_ptr<float>());
    float4* op = reinterpret_cast<float4*>(out.data_ptr<float>());

    if (try_launch_fused(xc, xp, wp, bp, op, n4, R, N, stream)) return out;

    // Fallback: split-row two-kernel path.
    TORCH_CHECK(R <= kMaxRows, "too many rows");
    const int C = kStatsChunks;
    auto ws = at::empty({R, (int64_t)C, 2}, xc.options().dtype(at::kDouble));
    double2* wsp = reinterpret_cast<double2*>(ws.data_ptr<double>());

    dim3 g1((unsigned)R, (unsigned)C);
    ln_partial_stats_kernel<<<g1, kStatsThreads, 0, stream>>>(xp, wsp, n4, C);
    C10_CUDA_KERNEL_LAUNCH_CHECK();

    const long long per_block = (long long)kNormVec * kNormThreads;
    const long long C2 = (n4 + per_block - 1) / per_block;
    ln_normalize_kernel<kNormVec><<<(unsigned)C2, kNormThreads, 0, stream>>>(
        xp, wp, bp, wsp, op, n4, (int)R, C, 1.0 / (double)N);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
