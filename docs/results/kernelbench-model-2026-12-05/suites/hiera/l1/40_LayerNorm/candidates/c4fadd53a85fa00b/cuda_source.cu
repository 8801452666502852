// LayerNorm over the trailing [64,256,256]: ONE persistent cooperative kernel (fast path).
// Each block owns the same contiguous float4 slice of every row. The current row lives in registers,
// the next row streams into shared memory (per-thread cp.async, 1024 threads x 8 float4, w/b evict_last) while the grid barrier and the normalize of the
// current row run. Stats: per-block (s, ss) in double -> partials -> every block sums them in the same
// fixed order after grid.sync, so mean / rstd are bit-identical everywhere.
// Fallback: round 1's two-kernel split-row path.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <cstdint>
#include <climits>

namespace cg = cooperative_groups;

namespace {

// ---------------------------------------------------------------- fast-path configuration
constexpr int kFThreads = 1024;
constexpr int kFSlots = 8;          // float4 slots per thread (register-resident row slice)
constexpr int kFWarps = kFThreads / 32;
constexpr int kWBBatch = 2;         // w/b float4 loads in flight per thread during normalize
constexpr int kPieces = 4;         // bulk-copy pieces per slice (TMA mode)
constexpr bool kUseTMA = false;        // true: cp.async.bulk + mbarrier; false: per-thread cp.async
constexpr bool kXHint = false;          // evict_first L2 hint on the x bulk copies
constexpr bool kWBHint = true;        // evict_last L2 hint on w / b loads
constexpr int kFCap = kFThreads * kFSlots;
static_assert(kFSlots % kWBBatch == 0, "batch must divide slots");

// ---------------------------------------------------------------- fallback configuration
constexpr int kThreads = 256;
constexpr int kChunks = 128;
constexpr int kUnroll = 4;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

// ---------------------------------------------------------------- PTX helpers
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint32_t addr, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(addr), "r"(count) : "memory");
}

__device__ __forceinline__ void fence_mbar_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void fence_proxy_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t addr, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(addr), "r"(bytes) : "memory");
}

__device__ __forceinline__ bool mbar_try_wait(uint32_t addr, uint32_t parity) {
    uint32_t ok;
    asm volatile(
        "{\n\t"
        ".reg .pred p;\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t"
        "}"
        : "=r"(ok)
        : "r"(addr), "r"(parity)
        : "memory");
    return ok != 0u;
}

__device__ __forceinline__ uint64_t policy_evict_first() {
    uint64_t p;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}

__device__ __forceinline__ uint64_t policy_evict_last() {
    uint64_t p;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
    return p;
}

__device__ __forceinline__ void bulk_g2s_hint(uint32_t dst, const void* src, uint32_t bytes, uint32_t mbar,
                                              uint64_t pol) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
        ::"r"(dst), "l"(src), "r"(bytes), "r"(mbar), "l"(pol)
        : "memory");
}

__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t mbar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
        ::"r"(dst), "l"(src), "r"(bytes), "r"(mbar)
        : "memory");
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}

__device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.wait_group 0;" ::: "memory");
}

__device__ __forceinline__ float4 ld_wb(const float4* p, uint64_t pol) {
    if constexpr (kWBHint) {
        float4 v;
        asm("ld.global.nc.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
            : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
            : "l"(p), "l"(pol));
        return v;
    } else {
        (void)pol;
        return __ldg(p);
    }
}

// Thread 0 only: expect the slice's bytes on the mbarrier and issue the bulk copies.
__device__ __forceinline__ void issue_slice_tma(uint32_t buf, const float4* src, int Sb, uint32_t mbar) {
    mbar_arrive_expect_tx(mbar, (uint32_t)Sb * 16u);
    const int per = (Sb + kPieces - 1) / kPieces;
    uint64_t pol = 0;
    if constexpr (kXHint) pol = policy_evict_first();
#pragma unroll
    for (int p = 0; p < kPieces; ++p) {
        const int start = p * per;
        if (start < Sb) {
            const int cnt = min(per, Sb - start);
            if constexpr (kXHint) {
                bulk_g2s_hint(buf + (uint32_t)start * 16u, src + start, (uint32_t)cnt * 16u, mbar, pol);
            } else {
                bulk_g2s(buf + (uint32_t)start * 16u, src + start, (uint32_t)cnt * 16u, mbar);
            }
        }
    }
}

// Every thread: async-copy its own slots (the same slots it reads back later).
__device__ __forceinline__ void issue_slice_cpasync(uint32_t buf, const float4* src, int Sb, int tid) {
#pragma unroll
    for (int k = 0; k < kFSlots; ++k) {
        const int i = tid + k * kFThreads;
        if (i < Sb) cp_async16(buf + (uint32_t)i * 16u, src + i);
    }
    cp_async_commit();
}

// ---------------------------------------------------------------- fused persistent kernel
__global__ void __launch_bounds__(kFThreads, 1)
ln_fused_persistent(const float4* __restrict__ x, const float4* __restrict__ w, const float4* __restrict__ b,
                    double2* partials, float4* __restrict__ out,
                    int R, long long N4, int S, double N, double eps) {
    extern __shared__ __align__(128) unsigned char dyn_smem[];
    float4* sbuf = reinterpret_cast<float4*>(dyn_smem);
    __shared__ __align__(8) unsigned long long mbar;
    __shared__ double red_s[kFWarps];
    __shared__ double red_ss[kFWarps];
    __shared__ float sh_stat[2];

    cg::grid_group grid = cg::this_grid();
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int G = (int)gridDim.x;
    const long long base = (long long)blockIdx.x * (long long)S;
    const long long remL = N4 - base;
    const int Sb = (int)(remL < (long long)S ? remL : (long long)S);
    const uint32_t buf_addr = smem_u32(sbuf);
    const uint32_t mbar_addr = smem_u32(&mbar);
    uint64_t pol_w = 0;
    if constexpr (kWBHint) pol_w = policy_evict_last();

    // Prologue: start row 0's slice.
    if constexpr (kUseTMA) {
        if (tid == 0) {
            mbar_init(mbar_addr, 1u);
            fence_mbar_init();
        }
        __syncthreads();
        if (tid == 0) issue_slice_tma(buf_addr, x + base, Sb, mbar_addr);
    } else {
        issue_slice_cpasync(buf_addr, x + base, Sb, tid);
    }

    const float4* __restrict__ wb = w + base;
    const float4* __restrict__ bb = b + base;

    for (int r = 0; r < R; ++r) {
        // (a) wait for row r's slice, move it into registers, local stats.
        if constexpr (kUseTMA) {
            while (!mbar_try_wait(mbar_addr, (uint32_t)(r & 1))) {
            }
        } else {
            cp_async_wait_all();
        }
        float4 v[kFSlots];
        float s = 0.f, ss = 0.f;
#pragma unroll
        for (int k = 0; k < kFSlots; ++k) {
            const int i = tid + k * kFThreads;
            if (i < Sb) {
                v[k] = sbuf[i];
            } else {
                v[k] = make_float4(0.f, 0.f, 0.f, 0.f);
            }
            s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
            ss = fmaf(v[k].x, v[k].x, ss);
            ss = fmaf(v[k].y, v[k].y, ss);
            ss = fmaf(v[k].z, v[k].z, ss);
            ss = fmaf(v[k].w, v[k].w, ss);
        }
        double ds = warp_sum_d((double)s);
        double dss = warp_sum_d((double)ss);

        // cp.async mode: this thread's slots are consumed -> start row r+1 now.
        if constexpr (!kUseTMA) {
            if (r + 1 < R) issue_slice_cpasync(buf_addr, x + (long long)(r + 1) * N4 + base, Sb, tid);
        }

        // (b) block reduction in double; thread 0 publishes the partial and (TMA) prefetches row r+1.
        if (lane == 0) {
            red_s[warp] = ds;
            red_ss[warp] = dss;
        }
        __syncthreads();
        if (tid == 0) {
            double a = 0.0, c = 0.0;
#pragma unroll
            for (int q = 0; q < kFWarps; ++q) {
                a += red_s[q];
                c += red_ss[q];
            }
            partials[(long long)r * G + blockIdx.x] = make_double2(a, c);
            if constexpr (kUseTMA) {
                if (r + 1 < R) {
                    fence_proxy_async_smem();
                    issue_slice_tma(buf_addr, x + (long long)(r + 1) * N4 + base, Sb, mbar_addr);
                }
            }
        }

        // (c) grid barrier, then every block combines the G partials in the same fixed order.
        grid.sync();
        if (warp == 0) {
            const double2* pr = partials + (long long)r * G;
            double a = 0.0, c = 0.0;
            for (int j = lane; j < G; j += 32) {
                const double2 p = __ldcg(pr + j);
                a += p.x;
                c += p.y;
            }
            a = warp_sum_d(a);
            c = warp_sum_d(c);
            if (lane == 0) {
                const double mean = a / N;
                double var = c / N - mean * mean;
                if (var < 0.0) var = 0.0;
                sh_stat[0] = (float)mean;
                sh_stat[1] = (float)(1.0 / sqrt(var + eps));
            }
        }
        __syncthreads();
        const float mean = sh_stat[0];
        const float rstd = sh_stat[1];

        // (d) normalize straight from registers.
        float4* __restrict__ orow = out + (long long)r * N4 + base;
#pragma unroll
        for (int k0 = 0; k0 < kFSlots; k0 += kWBBatch) {
            float4 wv[kWBBatch], bv[kWBBatch];
#pragma unroll
            for (int u = 0; u < kWBBatch; ++u) {
                const int i = tid + (k0 + u) * kFThreads;
                if (i < Sb) {
                    wv[u] = ld_wb(wb + i, pol_w);
                    bv[u] = ld_wb(bb + i, pol_w);
                } else {
                    wv[u] = make_float4(0.f, 0.f, 0.f, 0.f);
                    bv[u] = make_float4(0.f, 0.f, 0.f, 0.f);
                }
            }
#pragma unroll
            for (int u = 0; u < kWBBatch; ++u) {
                const int i = tid + (k0 + u) * kFThreads;
                if (i < Sb) {
                    const float4 xv = v[k0 + u];
                    float4 y;
                    y.x = fmaf((xv.x - mean) * rstd, wv[u].x, bv[u].x);
                    y.y = fmaf((xv.y - mean) * rstd, wv[u].y, bv[u].y);
                    y.z = fmaf((xv.z - mean) * rstd, wv[u].z, bv[u].z);
                    y.w = fmaf((xv.w - mean) * rstd, wv[u].w, bv[u].w);
                    __stcs(orow + i, y);
                }
            }
        }
    }
}

// ================================================================ round 1 fallback (unchanged)
// Deterministic block reduction of (s, ss) in double; thread 0 writes the result.
__device__ __forceinline__ void block_write_partial(double s, double ss, double2* dst) {
    __shared__ double sh_s[kWarps];
    __shared__ double sh_ss[kWarps];
    s = warp_sum_d(s);
    ss = warp_sum_d(ss);
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    if (lane == 0) { sh_s[warp] = s; sh_ss[warp] = ss; }
    __syncthreads();
    if (threadIdx.x == 0) {
        double a = 0.0, b = 0.0;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) { a += sh_s[w]; b += sh_ss[w]; }
        *dst = make_double2(a, b);
    }
}

// Warp 0 combines the nchunk partials of a row in fixed order and publishes mean / rstd.
__device__ __forceinline__ void row_stats(const double2* __restrict__ pr, int nchunk, double N, double eps,
                                          float* sh_mean, float* sh_rstd) {
    if (threadIdx.x < 32) {
        double a = 0.0, c = 0.0;
        for (int j = threadIdx.x; j < nchunk; j += 32) {
            const double2 v = pr[j];
            a += v.x;
            c += v.y;
        }
        a = warp_sum_d(a);
        c = warp_sum_d(c);
        if (threadIdx.x == 0) {
            const double mean = a / N;
            double var = c / N - mean * mean;
            if (var < 0.0) var = 0.0;
            *sh_mean = (float)mean;
            *sh_rstd = (float)(1.0 / sqrt(var + eps));
        }
    }
    __syncthreads();
}

__global__ void __launch_bounds__(kThreads)
ln_stats_vec(const float4* __restrict__ x, double2* __restrict__ partials,
             int R, int nchunk, int chunk4, long long N4) {
    const int row = blockIdx.x % R;
    const int chunk = blockIdx.x / R;
    const float4* __restrict__ p = x + (long long)row * N4 + (long long)chunk * chunk4;
    float s[kUnroll], ss[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) { s[u] = 0.f; ss[u] = 0.f; }
    int i = threadIdx.x;
    for (; i + (kUnroll - 1) * kThreads < chunk4; i += kUnroll * kThreads) {
        float4 v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) v[u] = __ldg(p + i + u * kThreads);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            s[u] += (v[u].x + v[u].y) + (v[u].z + v[u].w);
            ss[u] = fmaf(v[u].x, v[u].x, ss[u]);
            ss[u] = fmaf(v[u].y, v[u].y, ss[u]);
            ss[u] = fmaf(v[u].z, v[u].z, ss[u]);
            ss[u] = fmaf(v[u].w, v[u].w, ss[u]);
        }
    }
    for (; i < chunk4; i += kThreads) {
        const float4 v = __ldg(p + i);
        s[0] += (v.x + v.y) + (v.z + v.w);
        ss[0] = fmaf(v.x, v.x, ss[0]);
        ss[0] = fmaf(v.y, v.y, ss[0]);
        ss[0] = fmaf(v.z, v.z, ss[0]);
        ss[0] = fmaf(v.w, v.w, ss[0]);
    }
    double ds = 0.0, dss = 0.0;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) { ds += (double)s[u]; dss += (double)ss[u]; }
    block_write_partial(ds, dss, partials + (long long)row * nchunk + chunk);
}

__global__ void __launch_bounds__(kThreads)
ln_norm_vec(const float4* __restrict__ x, const float4* __restrict__ w, const float4* __restrict__ b,
            const double2* __restrict__ partials, float4* __restrict__ out,
            int R, int nchunk, int chunk4, long long N4, double N, double eps) {
    __shared__ float sh_mean, sh_rstd;
    const int row = blockIdx.x % R;
    const int chunk = nchunk - 1 - (int)(blockIdx.x / R);
    row_stats(partials + (long long)row * nchunk, nchunk, N, eps, &sh_mean, &sh_rstd);
    const float mean = sh_mean;
    const float rstd = sh_rstd;
    const long long off = (long long)chunk * chunk4;
    const float4* __restrict__ xp = x + (long long)row * N4 + off;
    float4* __restrict__ op = out + (long long)row * N4 + off;
    const float4* __restrict__ wp = w + off;
    const float4* __restrict__ bp = b + off;
    int i = threadIdx.x;
    for (; i + (kUnroll - 1) * kThreads < chunk4; i += kUnroll * kThreads) {
        float4 xv[kUnroll], wv[kUnroll], bv[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            xv[u] = __ldcs(xp + i + u * kThreads);
            wv[u] = __ldg(wp + i + u * kThreads);
            bv[u] = __ldg(bp + i + u * kThreads);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            float4 y;
            y.x = fmaf((xv[u].x - mean) * rstd, wv[u].x, bv[u].x);
            y.y = fmaf((xv[u].y - mean) * rstd, wv[u].y, bv[u].y);
            y.z = fmaf((xv[u].z - mean) * rstd, wv[u].z, bv[u].z);
            y.w = fmaf((xv[u].w - mean) * rstd, wv[u].w, bv[u].w);
            __stcs(op + i + u * kThreads, y);
        }
    }
    for (; i < chunk4; i += kThreads) {
        const float4 xv = __ldcs(xp + i);
        const float4 wv = __ldg(wp + i);
        const float4 bv = __ldg(bp + i);
        float4 y;
        y.x = fmaf((xv.x - mean) * rstd, wv.x, bv.x);
        y.y = fmaf((xv.y - mean) * rstd, wv.y, bv.y);
        y.z = fmaf((xv.z - mean) * rstd, wv.z, bv.z);
        y.w = fmaf((xv.w - mean) * rstd, wv.w, bv.w);
        __stcs(op + i, y);
    }
}

// Scalar fallback for shapes / alignments the float4 path does not cover.
__global__ void __launch_bounds__(kThreads)
ln_stats_scalar(const float* __restrict__ x, double2* __restrict__ partials,
                int R, int nchunk, long long N, long long cs) {
    const int row = blockIdx.x % R;
    const int chunk = blockIdx.x / R;
    const long long start = (long long)chunk * cs;
    long long end = start + cs;
    if (end > N) end = N;
    const float* __restrict__ p = x + (long long)row * N;
    double s = 0.0, ss = 0.0;
    for (long long i = start + threadIdx.x; i < end; i += kThreads) {
        const double v = (double)p[i];
        s += v;
        ss += v * v;
    }
    block_write_partial(s, ss, partials + (long long)row * nchunk + chunk);
}

__global__ void __launch_bounds__(kThreads)
ln_norm_scalar(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
               const double2* __restrict__ partials, float* __restrict__ out,
               int R, int nchunk, long long N, long long cs, double eps) {
    __shared__ float sh_mean, sh_rstd;
    const int row = blockIdx.x % R;
    const int chunk = nchunk - 1 - (int)(blockIdx.x / R);
    row_stats(partials + (long long)row * nchunk, nchunk, (double)N, eps, &sh_mean, &sh_rstd);
    const float mean = sh_mean;
    const float rstd = sh_rstd;
    const long long start = (long long)chunk * cs;
    long long end = start + cs;
    if (end > N) end = N;
    const float* __restrict__ xp = x + (long long)row * N;
    float* __restrict__ op = out + (long long)row * N;
    for (long long i = start + threadIdx.x; i < end; i += kThreads) {
        op[i] = fmaf((xp[i] - mean) * rstd, w[i], b[i]);
    }
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Host-side cache of the kernel attribute setup (plain ints, per device; no tensors).
constexpr int kMaxDevCache = 64;
int g_cfg_smem[kMaxDevCache] = {0};
int g_cfg_occ[kMaxDevCache] = {0};

// Tries the single cooperative launch; returns false (nothing launched) when it does not apply.
bool launch_fast(const float* xptr, const float* wptr, const float* bptr, float* optr,
                 int64_t R64, int64_t N, const at::TensorOptions& opts, cudaStream_t stream, double eps) {
    if (N % 4 != 0) return false;
    if (!(aligned16(xptr) && aligned16(wptr) && aligned16(bptr) && aligned16(optr))) return false;
    if (R64 <= 0 || R64 > (int64_t)INT_MAX) return false;
    const cudaDeviceProp* prop = at::cuda::getCurrentDeviceProperties();
    if (!prop->cooperativeLaunch) return false;
    const int nsm = prop->multiProcessorCount;
    if (nsm <= 0) return false;
    const long long N4 = (long long)(N / 4);
    const long long S0 = (N4 + nsm - 1) / nsm;
    if (S0 > (long long)kFCap) return false;
    long long S = (S0 + 7) / 8 * 8;  // 128-byte granular slices (kFCap is a multiple of 8)
    if (S > (long long)kFCap) S = S0;
    const long long G64 = (N4 + S - 1) / S;
    if (G64 <= 0 || G64 > nsm) return false;
    const int G = (int)G64;
    const int smem = (int)(S * 16);
    const size_t static_smem = 1024;  // generous bound on the static shared memory of the kernel
    if ((size_t)smem + static_smem > (size_t)prop->sharedMemPerBlockOptin) return false;

    int dev = -1;
    if (cudaGetDevice(&dev) != cudaSuccess) { (void)cudaGetLastError(); return false; }
    int occ = 0;
    if (dev >= 0 && dev < kMaxDevCache && g_cfg_smem[dev] == smem) {
        occ = g_cfg_occ[dev];
    } else {
        if (cudaFuncSetAttribute(ln_fused_persistent, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) !=
            cudaSuccess) {
            (void)cudaGetLastError();
            return false;
        }
        if (cudaFuncSetAttribute(ln_fused_persistent, cudaFuncAttributePreferredSharedMemoryCarveout,
                                 (int)cudaSharedmemCarveoutMaxShared) != cudaSuccess) {
            (void)cudaGetLastError();
        }
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, ln_fused_persistent, kFThreads, (size_t)smem) !=
            cudaSuccess) {
            (void)cudaGetLastError();
            return false;
        }
        if (dev >= 0 && dev < kMaxDevCache) {
            g_cfg_occ[dev] = occ;
            g_cfg_smem[dev] = smem;
        }
    }
    if (occ < 1 || (long long)G > (long long)occ * nsm) return false;

    auto partials = torch::empty({R64, (int64_t)G, 2}, opts.dtype(torch::kFloat64));
    const float4* xa = reinterpret_cast<const float4*>(xptr);
    const float4* wa = reinterpret_cast<const float4*>(wptr);
    const float4* ba = reinterpret_cast<const float4*>(bptr);
    double2* pa = reinterpret_cast<double2*>(partials.data_ptr<double>());
    float4* oa = reinterpret_cast<float4*>(optr);
    int Ri = (int)R64;
    long long N4a = N4;
    int Si = (int)S;
    double Nd = (double)N;
    double epsd = eps;
    void* args[] = {(void*)&xa, (void*)&wa, (void*)&ba, (void*)&pa, (void*)&oa,
                    (void*)&Ri, (void*)&N4a, (void*)&Si, (void*)&Nd, (void*)&epsd};
    cudaError_t err = cudaLaunchCooperativeKernel((const void*)ln_fused_persistent, dim3(G), dim3(kFThreads), args,
                                                  (size_t)smem, stream);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return true;
}

}  // namespace

torch::Tensor forward(torch::Tensor x, torch::Tensor ln_weight, torch::Tensor ln_bias) {
    TORCH_CHECK(x.is_cuda() && ln_weight.is_cuda() && ln_bias.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(x.scalar_type() == at::kFloat && ln_weight.scalar_type() == at::kFloat &&
                ln_bias.scalar_type() == at::kFloat, "inputs must be float32");
    c10::cuda::CUDAGuard guard(x.device());
    auto xc = x.contiguous();
    auto wc = ln_weight.contiguous();
    auto bc = ln_bias.contiguous();
    const int64_t N = wc.numel();
    TORCH_CHECK(N > 0 && bc.numel() == N, "weight/bias size mismatch");
    TORCH_CHECK(xc.numel() % N == 0, "x is not a multiple of the normalized shape");
    const int64_t R64 = xc.numel() / N;
    auto out = torch::empty(xc.sizes(), xc.options());
    if (R64 == 0) return out;
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    const double eps = 1e-5;

    const float* xptr = xc.data_ptr<float>();
    const float* wptr = wc.data_ptr<float>();
    const float* bptr = bc.data_ptr<float>();
    float* optr = out.data_ptr<float>();

    if (launch_fast(xptr, wptr, bptr, optr, R64, N, xc.options(), stream, eps)) return out;

    // ---- fallback: round 1's two-kernel path
    TORCH_CHECK(R64 * kChunks < (int64_t)INT32_MAX, "too many rows");
    const int R = (int)R64;
    const int nchunk = kChunks;
    auto partials = torch::empty({R64, (int64_t)nchunk, 2}, xc.options().dtype(torch::kFloat64));
    double2* pp = reinterpret_cast<double2*>(partials.data_ptr<double>());
    const int grid = R * nchunk;

    const bool vec = (N % ((int64_t)nchunk * 4) == 0) && (N / 4 / nchunk) < (int64_t)INT32_MAX &&
                     aligned16(xptr) && aligned16(wptr) && aligned16(bptr) && aligned16(optr);
    if (vec) {
        const long long N4 = N / 4;
        const int chunk4 = (int)(N4 / nchunk);
        ln_stats_vec<<<grid, kThreads, 0, stream>>>(reinterpret_cast<const float4*>(xptr), pp, R, nchunk, chunk4, N4);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
        ln_norm_vec<<<grid, kThreads, 0, stream>>>(reinterpret_cast<const float4*>(xptr),
                                                   reinterpret_cast<const float4*>(wptr),
                                                   reinterpret_cast<const float4*>(bptr), pp,
                                                   reinterpret_cast<float4*>(optr),
                                                   R, nchunk, chunk4, N4, (double)N, eps);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    } else {
        const long long cs = (N + nchunk - 1) / nchunk;
        ln_stats_scalar<<<grid, kThreads, 0, stream>>>(xptr, pp, R, nchunk, (long long)N, cs);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
        ln_norm_scalar<<<grid, kThreads, 0, stream>>>(xptr, wptr, bptr, pp, optr, R, nchunk, (long long)N, cs, eps);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return out;
}
