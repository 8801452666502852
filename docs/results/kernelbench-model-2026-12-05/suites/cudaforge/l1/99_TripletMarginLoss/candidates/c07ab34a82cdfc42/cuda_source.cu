#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>
#include <cstdint>
#include <algorithm>

#define TML_EPS 1e-6f
#define TML_MARGIN 1.0f

__device__ __forceinline__ void warp_reduce2(float& x, float& y) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        x += __shfl_down_sync(0xffffffffu, x, o);
        y += __shfl_down_sync(0xffffffffu, y, o);
    }
}

// Result valid in thread 0. Ends with a barrier so it can be called repeatedly.
template <int BLOCK>
__device__ __forceinline__ void block_reduce2(float& x, float& y) {
    constexpr int NW = BLOCK / 32;
    __shared__ float sx[NW];
    __shared__ float sy[NW];
    const int lane = threadIdx.x & 31;
    const int w = threadIdx.x >> 5;
    warp_reduce2(x, y);
    if (lane == 0) { sx[w] = x; sy[w] = y; }
    __syncthreads();
    if (w == 0) {
        x = (lane < NW) ? sx[lane] : 0.0f;
        y = (lane < NW) ? sy[lane] : 0.0f;
        warp_reduce2(x, y);
    }
    __syncthreads();
}

__device__ __forceinline__ void acc4(const float4 a, const float4 p, const float4 n, float& sp, float& sn) {
    float d;
    d = (a.x - p.x) + TML_EPS; sp = fmaf(d, d, sp);
    d = (a.x - n.x) + TML_EPS; sn = fmaf(d, d, sn);
    d = (a.y - p.y) + TML_EPS; sp = fmaf(d, d, sp);
    d = (a.y - n.y) + TML_EPS; sn = fmaf(d, d, sn);
    d = (a.z - p.z) + TML_EPS; sp = fmaf(d, d, sp);
    d = (a.z - n.z) + TML_EPS; sn = fmaf(d, d, sn);
    d = (a.w - p.w) + TML_EPS; sp = fmaf(d, d, sp);
    d = (a.w - n.w) + TML_EPS; sn = fmaf(d, d, sn);
}

__device__ __forceinline__ float row_loss_from(float sp, float sn) {
    return fmaxf(TML_MARGIN + sqrtf(sp) - sqrtf(sn), 0.0f);
}

// Generic fallback: any D, any alignment. One block per row.
template <int BLOCK>
__global__ void __launch_bounds__(BLOCK) tml_row_scalar_kernel(const float* __restrict__ a,
                                                              const float* __restrict__ p,
                                                              const float* __restrict__ n,
                                                              float* __restrict__ row_loss,
                                                              int64_t D) {
    const int64_t row = blockIdx.x;
    const float* ar = a + row * D;
    const float* pr = p + row * D;
    const float* nr = n + row * D;
    float sp = 0.0f, sn = 0.0f;
    for (int64_t j = threadIdx.x; j < D; j += BLOCK) {
        const float av = __ldg(ar + j);
        float d = (av - __ldg(pr + j)) + TML_EPS;
        sp = fmaf(d, d, sp);
        d = (av - __ldg(nr + j)) + TML_EPS;
        sn = fmaf(d, d, sn);
    }
    block_reduce2<BLOCK>(sp, sn);
    if (threadIdx.x == 0) row_loss[row] = row_loss_from(sp, sn);
}

// Vectorised fallback: D % 4 == 0 and 16-byte aligned, any D4. One block per row.
template <int BLOCK>
__global__ void __launch_bounds__(BLOCK) tml_row_vec_loop_kernel(const float4* __restrict__ a,
                                                                const float4* __restrict__ p,
                                                                const float4* __restrict__ n,
                                                                float* __restrict__ row_loss,
                                                                int64_t D4) {
    const int64_t row = blockIdx.x;
    const float4* ar = a + row * D4;
    const float4* pr = p + row * D4;
    const float4* nr = n + row * D4;
    float sp = 0.0f, sn = 0.0f;
    for (int64_t j = threadIdx.x; j < D4; j += BLOCK) {
        acc4(__ldg(ar + j), __ldg(pr + j), __ldg(nr + j), sp, sn);
    }
    block_reduce2<BLOCK>(sp, sn);
    if (threadIdx.x == 0) row_loss[row] = row_loss_from(sp, sn);
}

// Deterministic final mean in double: one block, any blockDim that is a multiple of 32 (<= 1024).
template <typename T>
__global__ void __launch_bounds__(1024) tml_finalize_kernel(const T* __restrict__ vals,
                                                            int64_t count,
                                                            int64_t n_rows,
                                                            float* __restrict__ out) {
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) s += (double)vals[i];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    __shared__ double ws[32];
    const int lane = threadIdx.x & 31;
    const int w = threadIdx.x >> 5;
    if (lane == 0) ws[w] = s;
    __syncthreads();
    if (w == 0) {
        const int nw = (blockDim.x + 31) >> 5;
        s = (lane < nw) ? ws[lane] : 0.0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
        if (lane == 0) out[0] = (float)(s / (double)n_rows);
    }
}

static void tml_check(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == at::kFloat, name, " must be float32");
    TORCH_CHECK(t.dim() == 2, name, " must be 2-D [N, D]");
}

// Balanced persistent grid: the largest g in [sms, min(N, 2*sms)] that divides N exactly,
// so every block gets the same number of rows and all blocks finish together.
// Falls back to min(N, 2*sms) when no such divisor exists.
static int64_t tml_balanced_grid(int64_t N, int sms) {
    const int64_t g0 = std::min<int64_t>(N, (int64_t)sms * 2);
    int64_t g = g0;
    while (g > (int64_t)sms && (N % g) != 0) --g;
    if (g < 1 || (N % g) != 0) g = g0;
    return g;
}

// Programmatic dependent launch helpers (sm_90+). griddepcontrol.wait blocks until every
// primary grid this launch depends on has completed and its memory is visible; it is a
// no-op when the kernel was launched without the programmatic-serialization attribute.
__device__ __forceinline__ void tml_pdl_wait() {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void tml_pdl_trigger() {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Persistent grid-stride over rows: each block accumulates its rows' losses in double
// (fixed order) and writes one partial; the finalizer sums the partials deterministically.
// Calls griddepcontrol.launch_dependents after its row loop so the PDL finalize launches early.
template <int BLOCK, int KPT>
__global__ void __launch_bounds__(BLOCK, 2) tml_persistent_kernel(const float4* __restrict__ a,
                                                                 const float4* __restrict__ p,
                                                                 const float4* __restrict__ n,
                                                                 double* __restrict__ partial,
                                                                 int64_t N, int64_t D4) {
    double acc = 0.0;
    for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
        const float4* ar = a + row * D4 + threadIdx.x;
        const float4* pr = p + row * D4 + threadIdx.x;
        const float4* nr = n + row * D4 + threadIdx.x;
        float4 va[KPT], vp[KPT], vn[KPT];
#pragma unroll
        for (int k = 0; k < KPT; ++k) {
            va[k] = __ldcs(ar + k * BLOCK);
            vp[k] = __ldcs(pr + k * BLOCK);
            vn[k] = __ldcs(nr + k * BLOCK);
        }
        float sp = 0.0f, sn = 0.0f;
#pragma unroll
        for (int k = 0; k < KPT; ++k) acc4(va[k], vp[k], vn[k], sp, sn);
        block_reduce2<BLOCK>(sp, sn);
        if (threadIdx.x == 0) acc += (double)row_loss_from(sp, sn);
    }
    // All row work of this block is done: allow the dependent finalize grid to be scheduled.
    // Its griddepcontrol.wait still waits for this grid to complete, so the partial write below
    // is visible to it.
    tml_pdl_trigger();
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// Deterministic final mean of the per-block double partials with a single warp:
// lane l sums partials l, l+32, l+64, ... in order, then a fixed shuffle tree. No barriers.
__global__ void __launch_bounds__(32) tml_finalize_warp_kernel(const double* __restrict__ vals,
                                                               int64_t count,
                                                               int64_t n_rows,
                                                               float* __restrict__ out) {
    tml_pdl_wait();  // partials come from the preceding (primary) grid
    const int lane = threadIdx.x;
    double s = 0.0;
    for (int64_t i = lane; i < count; i += 32) s += vals[i];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    if (lane == 0) out[0] = (float)(s / (double)n_rows);
}

// Launch a one-block finalize with programmatic stream serialization, so its launch
// overlaps the tail of the preceding persistent kernel (the kernel itself waits in
// griddepcontrol.wait for that grid to complete before it reads the partials).
template <typename Kernel>
static void tml_launch_finalize_pdl(Kernel kernel, unsigned int threads, cudaStream_t stream,
                                    const double* vals, int64_t count, int64_t n_rows, float* out) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(1, 1, 1);
    cfg.blockDim = dim3(threads, 1, 1);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, vals, count, n_rows, out));
}

torch::Tensor forward(torch::Tensor anchor, torch::Tensor positive, torch::Tensor negative) {
    tml_check(anchor, "anchor");
    tml_check(positive, "positive");
    tml_check(negative, "negative");
    TORCH_CHECK(anchor.sizes() == positive.sizes() && anchor.sizes() == negative.sizes(),
                "anchor, positive and negative must have the same shape");
    const c10::cuda::CUDAGuard guard(anchor.device());
    torch::Tensor a = anchor.is_contiguous() ? anchor : anchor.contiguous();
    torch::Tensor p = positive.is_contiguous() ? positive : positive.contiguous();
    torch::Tensor n = negative.is_contiguous() ? negative : negative.contiguous();

    const int64_t N = a.size(0);
    const int64_t D = a.size(1);
    auto opts = a.options();
    torch::Tensor out = at::empty({}, opts);
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();

    const float* ap = a.data_ptr<float>();
    const float* pp = p.data_ptr<float>();
    const float* np = n.data_ptr<float>();

    constexpr int BLOCK = 256;
    constexpr int KPT = 8;
    const bool aligned = ((reinterpret_cast<uintptr_t>(ap) | reinterpret_cast<uintptr_t>(pp) |
                           reinterpret_cast<uintptr_t>(np)) & (uintptr_t)15) == 0;
    if (N > 0 && D > 0 && (D % 4) == 0 && aligned && (D / 4) == (int64_t)BLOCK * KPT) {
        const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
        // N = 32768 on 132 SMs -> grid = 256: exactly 128 rows per block, no tail wave.
        const int64_t grid = tml_balanced_grid(N, sms);
        torch::Tensor partial = at::empty({grid}, opts.dtype(at::kDouble));
        double* pd = partial.data_ptr<double>();
        tml_persistent_kernel<BLOCK, KPT><<<dim3((unsigned int)grid), BLOCK, 0, stream>>>(
            reinterpret_cast<const float4*>(ap), reinterpret_cast<const float4*>(pp),
            reinterpret_cast<const float4*>(np), pd, N, D / 4);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
        // Single-warp finalize launched with PDL (fixed order, deterministic).
        tml_launch_finalize_pdl(tml_finalize_warp_kernel, 32u, stream, pd, grid, N, out.data_ptr<float>());
        return out;
    }

    torch::Tensor row_loss = at::empty({N > 0 ? N : (int64_t)1}, opts);
    float* rl = row_loss.data_ptr<float>();
    if (N > 0) {
        const dim3 grid((unsigned int)N);
        if (D > 0 && (D % 4) == 0 && aligned) {
            tml_row_vec_loop_kernel<256><<<grid, 256, 0, stream>>>(
                reinterpret_cast<const float4*>(ap), reinterpret_cast<const float4*>(pp),
                reinterpret_cast<const float4*>(np), rl, D / 4);
        } else {
            tml_row_scalar_kernel<256><<<grid, 256, 0, stream>>>(ap, pp, np, rl, D);
        }
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    tml_finalize_kernel<float><<<1, 1024, 0, stream>>>(rl, N, N, out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
