// fused cooperative LayerNorm with on-chip x stash + register-held last step (v2):
// one persistent 512-thread block per SM; each block owns a balanced contiguous column range,
// split into equal-width steps (<= 512 float4) x 16 rows. Phase 1 accumulates per-row sums,
// stashes the first NS row-steps in shared memory and keeps the LAST step in registers across
// the grid barrier. Phase 2 normalizes the held step first, then walks the remaining steps in
// reverse (L2-hot ones first, stashed ones last).
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <stdint.h>
#include <climits>

namespace cg = cooperative_groups;

namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kRows = 16;
constexpr int kSlotBytes = kThreads * 16;
constexpr int kMaxSlots = 256;
constexpr double kEps = 1e-5;

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

__device__ __forceinline__ float4 ln_apply(const float4 v, const float m, const float rs,
                                           const float4 w, const float4 b) {
    float4 y;
    y.x = fmaf((v.x - m) * rs, w.x, b.x);
    y.y = fmaf((v.y - m) * rs, w.y, b.y);
    y.z = fmaf((v.z - m) * rs, w.z, b.z);
    y.w = fmaf((v.w - m) * rs, w.w, b.w);
    return y;
}

__device__ __forceinline__ int step_begin(int k, int cnt, int nsteps) {
    return (int)(((long long)k * cnt) / nsteps);
}

__device__ __forceinline__ void load_rows(float4 (&v)[kRows], const float4* __restrict__ x,
                                          int n4, int idx, bool act) {
    if (act) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) v[r] = __ldg(x + (r * n4 + idx));
    } else {
#pragma unroll
        for (int r = 0; r < kRows; ++r) v[r] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

__device__ __forceinline__ void store_rows(const float4 (&v)[kRows], float4* __restrict__ out,
                                           int n4, int idx, const float4 wv, const float4 bv,
                                           const float* sm, const float* sr) {
#pragma unroll
    for (int r = 0; r < kRows; ++r)
        __stcs(out + (r * n4 + idx), ln_apply(v[r], sm[r], sr[r], wv, bv));
}

__global__ void __launch_bounds__(kThreads, 1)
ln_fused_kernel(const float4* __restrict__ x, const float4* __restrict__ w,
                const float4* __restrict__ b, float4* __restrict__ out,
                double2* ws, int n4, int ns, double inv_n) {
    extern __shared__ float4 stash[];
    __shared__ double2 red[kWarps][kRows];
    __shared__ float sh_mean[kRows];
    __shared__ float sh_rstd[kRows];

    cg::grid_group grid = cg::this_grid();
    const int tid = threadIdx.x;
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int G = (int)gridDim.x;
    const int c0 = (int)(((long long)blockIdx.x * n4) / G);
    const int c1 = (int)(((long long)(blockIdx.x + 1) * n4) / G);
    const int cnt = c1 - c0;
    const int nsteps = (cnt + kThreads - 1) / kThreads;   // step width <= kThreads
    const int kstash = (ns + kRows - 1) / kRows;
    const int klast = nsteps - 1;

    float s[kRows], q[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) { s[r] = 0.f; q[r] = 0.f; }

    // ---------------- Phase 1a: all steps but the last ----------------
    for (int k = 0; k < klast; ++k) {
        const int idx = c0 + step_begin(k, cnt, nsteps) + tid;
        const int hi = c0 + step_begin(k + 1, cnt, nsteps);
        float4 v[kRows];
        load_rows(v, x, n4, idx, idx < hi);
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc4(v[r], s[r], q[r]);
        if (k < kstash) {
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                const int slot = k * kRows + r;
                if (slot < ns) stash[slot * kThreads + tid] = v[r];
            }
        }
    }

    // ---------------- Phase 1b: last step, held in registers ----------------
    float4 hold[kRows];
    int hidx = 0;
    bool hact = false;
    if (nsteps > 0) {
        hidx = c0 + step_begin(klast, cnt, nsteps) + tid;
        hact = hidx < c1;
    }
    load_rows(hold, x, n4, hidx, hact);
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc4(hold[r], s[r], q[r]);

    // Block partials (double) -> ws[r * G + block]
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const double ds = warp_sum((double)s[r]);
        const double dq = warp_sum((double)q[r]);
        if (lane == 0) red[warp][r] = make_double2(ds, dq);
    }
    __syncthreads();
    if (tid < kRows) {
        double ts = 0.0, tq = 0.0;
#pragma unroll
        for (int i = 0; i < kWarps; ++i) {
            const double2 p = red[i][tid];
            ts += p.x;
            tq += p.y;
        }
        ws[tid * G + blockIdx.x] = make_double2(ts, tq);
    }

    grid.sync();

    for (int r = warp; r < kRows; r += kWarps) {
        double ts = 0.0, tq = 0.0;
        const double2* pr = ws + r * G;
        for (int i = lane; i < G; i += 32) {
            const double2 p = __ldcg(pr + i);
            ts += p.x;
            tq += p.y;
        }
        ts = warp_sum(ts);
        tq = warp_sum(tq);
        if (lane == 0) {
            const double mean = ts * inv_n;
            double var = tq * inv_n - mean * mean;
            var = var > 0.0 ? var : 0.0;
            sh_mean[r] = (float)mean;
            sh_rstd[r] = (float)(1.0 / sqrt(var + kEps));
        }
    }
    __syncthreads();

    // ---------------- Phase 2: held step, then the rest in reverse ----------------
    if (hact) {
        const float4 wv = __ldcs(w + hidx);
        const float4 bv = __ldcs(b + hidx);
        store_rows(hold, out, n4, hidx, wv, bv, sh_mean, sh_rstd);
    }
    for (int k = klast - 1; k >= 0; --k) {
        const int idx = c0 + step_begin(k, cnt, nsteps) + tid;
        const int hi = c0 + step_begin(k + 1, cnt, nsteps);
        if (idx >= hi) continue;
        const float4 wv = __ldcs(w + idx);
        const float4 bv = __ldcs(b + idx);
        float4 v[kRows];
        if (k >= kstash) {
#pragma unroll
            for (int r = 0; r < kRows; ++r) v[r] = __ldcs(x + (r * n4 + idx));
        } else {
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                const int slot = k * kRows + r;
                v[r] = (slot < ns) ? stash[slot * kThreads + tid] : __ldcs(x + (r * n4 + idx));
            }
        }
        store_rows(v, out, n4, idx, wv, bv, sh_mean, sh_rstd);
    }
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
    TORCH_CHECK(R == kRows, "kernel specialised for 16 normalized rows");
    TORCH_CHECK(N % 4 == 0, "normalized size must be a multiple of 4");
    TORCH_CHECK(total / 4 <= (int64_t)INT_MAX, "tensor too large");
    TORCH_CHECK((reinterpret_cast<uintptr_t>(xc.data_ptr<float>()) & 15) == 0 &&
                (reinterpret_cast<uintptr_t>(wc.data_ptr<float>()) & 15) == 0 &&
                (reinterpret_cast<uintptr_t>(bc.data_ptr<float>()) & 15) == 0 &&
                (reinterpret_cast<uintptr_t>(out.data_ptr<float>()) & 15) == 0,
                "16-byte alignment required");

    static int cfg_dev = -1;
    static int cfg_ns = 0;
    static int cfg_grid = 0;
    const int dev = (int)x.get_device();
    if (cfg_dev != dev) {
        int num_sms = 0, max_optin = 0;
        C10_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, dev));
        C10_CUDA_CHECK(cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        cudaFuncAttributes fa;
        C10_CUDA_CHECK(cudaFuncGetAttributes(&fa, ln_fused_kernel));
        const int avail = max_optin - (int)fa.sharedSizeBytes;
        int ns = avail > 0 ? avail / kSlotBytes : 0;
        if (ns > kMaxSlots) ns = kMaxSlots;
        int bpsm = 0;
        for (;;) {
            const int bytes = ns * kSlotBytes;
            C10_CUDA_CHECK(cudaFuncSetAttribute(ln_fused_kernel,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
            C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bpsm, ln_fused_kernel,
                                                                         kThreads, (size_t)bytes));
            if (bpsm > 0 || ns == 0) break;
            ns /= 2;
        }
        TORCH_CHECK(bpsm > 0, "fused LayerNorm kernel cannot be resident");
        cfg_ns = ns;
        cfg_grid = num_sms * bpsm;
        cfg_dev = dev;
    }

    const int G = cfg_grid;
    auto ws = at::empty({R, (int64_t)G, 2}, xc.options().dtype(at::kDouble));
    const float4* xp = reinterpret_cast<const float4*>(xc.data_ptr<float>());
    const float4* wp = reinterpret_cast<const float4*>(wc.data_ptr<float>());
    const float4* bp = reinterpret_cast<const float4*>(bc.data_ptr<float>());
    float4* op = reinterpret_cast<float4*>(out.data_ptr<float>());
    double2* wsp = reinterpret_cast<double2*>(ws.data_ptr<double>());
    int n4 = (int)(N / 4);
    int ns = cfg_ns;
    double inv_n = 1.0 / (double)N;
    void* args[] = {(void*)&xp, (void*)&wp, (void*)&bp, (void*)&op,
                    (void*)&wsp, (void*)&n4, (void*)&ns, (void*)&inv_n};
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    C10_CUDA_CHECK(cudaLaunchCooperativeKernel((const void*)ln_fused_kernel, dim3((unsigned)G),
                                               dim3(kThreads), args, (size_t)ns * kSlotBytes, stream));
    return out;
}
