// split-row LayerNorm (v4): three launches.
//  1) partial stats: grid (R, C=256) (row index fastest), 256 threads, 16 float4 per thread,
//     per-thread fp32 partials reduced in double, one double2 slot per block (no atomics).
//  2) finalize: one block reduces the C partials of every row in double -> (mean, rstd) floats.
//  3) normalize: column chunks (reverse order) with all rows looped inside the block;
//     weight/bias read once into registers, x streamed with evict-first loads.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

constexpr int kStatsThreads = 256;
constexpr int kStatsChunks = 256;
constexpr int kFinalThreads = 512;
constexpr int kNormThreads = 256;
constexpr int kNormVec = 4;
constexpr int kMaxRows = 64;
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

// One block: warp w handles rows w, w + 16, ...
__global__ void __launch_bounds__(kFinalThreads)
ln_finalize_kernel(const double2* __restrict__ ws, float2* __restrict__ stats,
                   int R, int C, double inv_n) {
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    for (int r = warp; r < R; r += kFinalThreads / 32) {
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
            stats[r] = make_float2((float)mean, (float)(1.0 / sqrt(var + kEps)));
        }
    }
}

template <int VEC>
__global__ void __launch_bounds__(kNormThreads)
ln_normalize_kernel(const float4* __restrict__ x, const float4* __restrict__ w,
                    const float4* __restrict__ b, const float2* __restrict__ stats,
                    float4* __restrict__ out, long long n4, int R) {
    __shared__ float2 sh_stats[kMaxRows];
    for (int r = threadIdx.x; r < R; r += kNormThreads) sh_stats[r] = stats[r];

    const long long blk = (long long)(gridDim.x - 1 - blockIdx.x);   // reverse chunk order
    const long long base = blk * (long long)(VEC * kNormThreads) + threadIdx.x;
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
    __syncthreads();

    for (int r = 0; r < R; ++r) {
        const float2 st = sh_stats[r];
        const float m = st.x;
        const float rs = st.y;
        const float4* __restrict__ xr = x + (long long)r * n4;
        float4* __restrict__ orow = out + (long long)r * n4;
        float4 xv[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const long long idx = base + (long long)j * kNormThreads;
            if (idx < n4) xv[j] = __ldcs(xr + idx);
            else xv[j] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
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
    TORCH_CHECK(N % 4 == 0, "normalized size must be a multiple of 4");
    TORCH_CHECK(R <= kMaxRows, "too many rows");
    TORCH_CHECK((reinterpret_cast<uintptr_t>(xc.data_ptr<float>()) & 15) == 0 &&
                (reinterpret_cast<uintptr_t>(wc.data_ptr<float>()) & 15) == 0 &&
                (reinterpret_cast<uintptr_t>(bc.data_ptr<float>()) & 15) == 0 &&
                (reinterpret_cast<uintptr_t>(out.data_ptr<float>()) & 15) == 0,
                "16-byte alignment required");

    const long long n4 = (long long)(N / 4);
    const int C = kStatsChunks;
    auto ws = at::empty({R, (int64_t)C, 2}, xc.options().dtype(at::kDouble));
    auto stats = at::empty({R, 2}, xc.options());
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();

    const float4* xp = reinterpret_cast<const float4*>(xc.data_ptr<float>());
    const float4* wp = reinterpret_cast<const float4*>(wc.data_ptr<float>());
    const float4* bp = reinterpret_cast<const float4*>(bc.data_ptr<float>());
    float4* op = reinterpret_cast<float4*>(out.data_ptr<float>());
    double2* wsp = reinterpret_cast<double2*>(ws.data_ptr<double>());
    float2* stp = reinterpret_cast<float2*>(stats.data_ptr<float>());

    dim3 g1((unsigned)R, (unsigned)C);
    ln_partial_stats_kernel<<<g1, kStatsThreads, 0, stream>>>(xp, wsp, n4, C);
    C10_CUDA_KERNEL_LAUNCH_CHECK();

    ln_finalize_kernel<<<1, kFinalThreads, 0, stream>>>(wsp, stp, (int)R, C, 1.0 / (double)N);
    C10_CUDA_KERNEL_LAUNCH_CHECK();

    const long long per_block = (long long)kNormVec * kNormThreads;
    const long long C2 = (n4 + per_block - 1) / per_block;
    ln_normalize_kernel<kNormVec><<<(unsigned)C2, kNormThreads, 0, stream>>>(
        xp, wp, bp, stp, op, n4, (int)R);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
