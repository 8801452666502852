// Max Pooling 2D (kernel 4, stride 1, padding 1, dilation 1) for x[32,64,512,512] fp32 -> [32,64,511,511].
// cp.async multistage row pipeline: each block (128 threads) owns output rows [oh0, oh0+nrows) of one plane.
// Input rows stream through a static shared ring of S rows (cp.async.cg, 16 B per thread per row, no L2 prefetch hint);
// the -inf padding lives in 4-float pads on both sides of each ring row. Each thread owns the columns
// j = t + 128*m (m = 0..3): horizontal 4-max from conflict-free scalar LDS, vertical 4-max from a 3-row register
// window, and coalesced scalar stores straight to global (no staging, one barrier per input row).
// Config: R=128 rows/block, S=8 ring rows, __launch_bounds__(128, 12), streaming stores=true.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>
#include <cstdint>

namespace {

constexpr int kN = 32;
constexpr int kC = 64;
constexpr int kH = 512;
constexpr int kW = 512;
constexpr int kOH = 511;
constexpr int kOW = 511;
constexpr int kPlanes = kN * kC;
constexpr int kNT = 128;          // threads per block; thread t copies float4 t of each input row
constexpr int kPad = 4;           // -inf pad floats on each side of a ring row
constexpr int kRowStride = kW + 2 * kPad;   // 520 floats = 2080 B (multiple of 16 B)

constexpr int kR = 128;
constexpr int kS = 8;
constexpr int kMinBlocks = 12;
constexpr bool kStream = true;

static_assert(kS >= 3, "ring must hold at least 3 rows");
static_assert(kS * kRowStride * 4 <= 48 * 1024, "static shared memory must stay <= 48 KB");
static_assert(kNT * 4 == kW, "one float4 per thread per row");

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

__device__ __forceinline__ void cp_async16(float* smem_dst, const float* gmem_src) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(s), "l"(gmem_src) : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}

template <bool S>
__device__ __forceinline__ void st1(float* p, float v) {
    if constexpr (S) { __stcs(p, v); } else { *p = v; }
}

template <int R, int S, bool STREAM>
__global__ void __launch_bounds__(kNT, kMinBlocks)
maxpool2d_k4s1p1_cpasync_kernel(const float* __restrict__ x, float* __restrict__ out) {
    __shared__ __align__(16) float ring[S][kRowStride];

    const int t = threadIdx.x;
    const int oh0 = blockIdx.x * R;
    const int plane = blockIdx.y;
    const int nrows = min(R, kOH - oh0);
    const int nin = nrows + 3;    // input rows oh0-1 .. oh0+nrows+1
    const float* __restrict__ xp = x + (size_t)plane * (size_t)(kH * kW) + 4 * t;
    float* __restrict__ op = out + (size_t)plane * (size_t)(kOH * kOW);

    const float ninf = neg_inf();
    const float4 ninf4 = make_float4(ninf, ninf, ninf, ninf);

    // Pads (columns -4..-1 and 512..515) of every slot hold -inf; cp.async never touches them.
    if (t < S) {
        *reinterpret_cast<float4*>(&ring[t][0]) = ninf4;
        *reinterpret_cast<float4*>(&ring[t][kPad + kW]) = ninf4;
    }

    // Prologue: input rows idx = 0..S-2 into slots 0..S-2, one commit group per row.
#pragma unroll
    for (int idx = 0; idx < S - 1; ++idx) {
        if (idx < nin) {
            const int r = oh0 - 1 + idx;
            float* dst = &ring[idx][kPad + 4 * t];
            if (r >= 0 && r < kH) {
                cp_async16(dst, xp + r * kW);
            } else {
                *reinterpret_cast<float4*>(dst) = ninf4;
            }
        }
        cp_async_commit();
    }

    // Vertical window: a = h[i-3], b = h[i-2], c = h[i-1] per owned column.
    float a[4], b[4], c[4];
#pragma unroll
    for (int m = 0; m < 4; ++m) { a[m] = ninf; b[m] = ninf; c[m] = ninf; }

    int rd = 0;        // slot of input row i
    int wr = S - 1;    // slot of input row i + S - 1 (== slot of row i - 1)

#pragma unroll 1
    for (int i = 0; i < nin; ++i) {
        cp_async_wait<S - 2>();   // row i has landed (for this thread's copies)
        __syncthreads();          // ... and for everyone's; slot wr is no longer read by anyone

        {
            const int idx = i + S - 1;
            if (idx < nin) {
                const int r = oh0 - 1 + idx;
                float* dst = &ring[wr][kPad + 4 * t];
                if (r < kH) {     // r >= 0 always here (idx >= S-1 >= 2)
                    cp_async16(dst, xp + r * kW);
                } else {
                    *reinterpret_cast<float4*>(dst) = ninf4;
                }
            }
            cp_async_commit();    // uniform group count, possibly empty
        }

        const float* s = &ring[rd][kPad];
        float h[4];
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            const int j = t + kNT * m;
            h[m] = fmaxf(fmaxf(s[j - 1], s[j]), fmaxf(s[j + 1], s[j + 2]));
        }

        if (i >= 3) {
            float* orow = op + (oh0 + i - 3) * kOW + t;
#pragma unroll
            for (int m = 0; m < 4; ++m) {
                const float o = fmaxf(fmaxf(a[m], b[m]), fmaxf(c[m], h[m]));
                if (m < 3 || t < kNT - 1) st1<STREAM>(orow + kNT * m, o);   // column 511 is not an output
            }
        }

#pragma unroll
        for (int m = 0; m < 4; ++m) { a[m] = b[m]; b[m] = c[m]; c[m] = h[m]; }

        rd = (rd + 1 == S) ? 0 : rd + 1;
        wr = (wr + 1 == S) ? 0 : wr + 1;
    }
}

}  // namespace

torch::Tensor forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == at::kFloat, "x must be float32");
    TORCH_CHECK(x.dim() == 4 && x.size(0) == kN && x.size(1) == kC && x.size(2) == kH && x.size(3) == kW,
                "x must have shape [32, 64, 512, 512]");
    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor xc = x.contiguous();
    torch::Tensor out = torch::empty({kN, kC, kOH, kOW}, xc.options());

    auto kfn = maxpool2d_k4s1p1_cpasync_kernel<kR, kS, kStream>;
    static bool configured = false;
    if (!configured) {
        C10_CUDA_CHECK(cudaFuncSetAttribute(kfn, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
        configured = true;
    }

    const dim3 grid((kOH + kR - 1) / kR, kPlanes, 1);
    const dim3 block(kNT, 1, 1);
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    kfn<<<grid, block, 0, stream>>>(xc.data_ptr<float>(), out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
