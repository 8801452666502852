// dw3x3_pair_kernel: depthwise 3x3 conv streamed down the rows of one plane.
// RCHUNK = 64 output rows per block, 128 threads. Input rows are staged with
// 16-byte cp.async.cg into an 8-row shared ring used as 4 pair slots (one
// commit group and one barrier per pair of rows, up to 6 rows in flight).
// Each thread reads two aligned float4s per row (conflict-free), keeps a
// 3 x 8 register window, and writes 16-byte aligned float4 streaming stores:
// even output rows at column 4t, odd output rows at column 4t+2.
// Variant: pair 0 peeled, both rows read up front, incremented pointers, max-shared carveout.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cstdint>

namespace {

constexpr int NB = 64;
constexpr int CH = 128;
constexpr int H = 256;
constexpr int W = 512;
constexpr int OH = 254;
constexpr int OW = 510;
constexpr int THREADS = 128;
constexpr int RCHUNK = 64;
constexpr int NCHUNK = (OH + RCHUNK - 1) / RCHUNK;   // 4
constexpr int STAGES = 8;                            // row slots = 4 pair slots
constexpr int SROW = W + 4;                          // 516 floats, 16-byte multiple

static_assert(RCHUNK % 2 == 0, "chunk start must keep output-row parity");
static_assert((OH * OW) % 4 == 0, "planes must start 16-byte aligned");
static_assert(4 * THREADS == W, "one float4 per thread per row");

__device__ __forceinline__ void cp_async16(float* smem, const float* gmem) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(s), "l"(gmem) : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int NPEND>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(NPEND) : "memory");
}

// Two aligned, thread-consecutive float4 reads: window columns 4t .. 4t+7.
__device__ __forceinline__ void read_row8(const float* srow, int t, float (&n)[8]) {
    const float4 a = *reinterpret_cast<const float4*>(srow + 4 * t);
    const float4 b = *reinterpret_cast<const float4*>(srow + 4 * t + 4);
    n[0] = a.x; n[1] = a.y; n[2] = a.z; n[3] = a.w;
    n[4] = b.x; n[5] = b.y; n[6] = b.z; n[7] = b.w;
}

__device__ __forceinline__ void shift_in(float (&r0)[8], float (&r1)[8], float (&r2)[8], const float (&n)[8]) {
#pragma unroll
    for (int j = 0; j < 8; ++j) { r0[j] = r1[j]; r1[j] = r2[j]; r2[j] = n[j]; }
}

// o[j] = sum_{kh,kw} w[3kh+kw] * r_kh[OFF + j + kw], j = 0 .. NOUT-1.
template <int OFF, int NOUT>
__device__ __forceinline__ void conv(const float (&a)[8], const float (&b)[8], const float (&c)[8],
                                     const float (&w)[9], float (&o)[NOUT]) {
#pragma unroll
    for (int j = 0; j < NOUT; ++j) {
        float s = w[0] * a[OFF + j];
        s = fmaf(w[1], a[OFF + j + 1], s);
        s = fmaf(w[2], a[OFF + j + 2], s);
        s = fmaf(w[3], b[OFF + j], s);
        s = fmaf(w[4], b[OFF + j + 1], s);
        s = fmaf(w[5], b[OFF + j + 2], s);
        s = fmaf(w[6], c[OFF + j], s);
        s = fmaf(w[7], c[OFF + j + 1], s);
        s = fmaf(w[8], c[OFF + j + 2], s);
        o[j] = s;
    }
}

// Even output row: 16-byte aligned row start; thread t owns columns 4t..4t+3.
__device__ __forceinline__ void even_row(float* __restrict__ rowp, int t, const float (&r0)[8],
                                         const float (&r1)[8], const float (&r2)[8], const float (&w)[9]) {
    float o[4];
    conv<0, 4>(r0, r1, r2, w, o);
    float* p = rowp + 4 * t;
    if (t < THREADS - 1) {
        __stcs(reinterpret_cast<float4*>(p), make_float4(o[0], o[1], o[2], o[3]));
    } else {
        __stcs(reinterpret_cast<float2*>(p), make_float2(o[0], o[1]));      // columns 508, 509
    }
}

// Odd output row: row start is 8 mod 16 bytes; thread t owns columns 4t+2..4t+5,
// thread 0 additionally columns 0, 1; thread 127 stores nothing.
__device__ __forceinline__ void odd_row(float* __restrict__ rowp, int t, const float (&r0)[8],
                                        const float (&r1)[8], const float (&r2)[8], const float (&w)[9]) {
    if (t < THREADS - 1) {
        float o[4];
        conv<2, 4>(r0, r1, r2, w, o);
        __stcs(reinterpret_cast<float4*>(rowp + 4 * t + 2), make_float4(o[0], o[1], o[2], o[3]));
    }
    if (t == 0) {
        float e[2];
        conv<0, 2>(r0, r1, r2, w, e);
        __stcs(reinterpret_cast<float2*>(rowp), make_float2(e[0], e[1]));
    }
}

__global__ void __launch_bounds__(THREADS, 8)
dw3x3_pair_kernel(const float* __restrict__ x, const float* __restrict__ wt, float* __restrict__ y) {
    __shared__ __align__(16) float sm[STAGES][SROW];

    const int plane = blockIdx.x;
    const int c = plane % CH;
    const int t = threadIdx.x;
    const int oh0 = blockIdx.y * RCHUNK;
    const int oh1 = min(oh0 + RCHUNK, OH);
    const int nin = oh1 - oh0 + 2;                   // 66 or 64: always even
    const int npairs = nin >> 1;
    const float* __restrict__ xp = x + static_cast<size_t>(plane) * (H * W);
    float* __restrict__ yp = y + static_cast<size_t>(plane) * (OH * OW);
    const float* src = xp + static_cast<size_t>(oh0) * W + 4 * t;

    // Padding columns 512..515 of every ring slot (read only by thread 127's second float4).
    if (t < STAGES) {
        *reinterpret_cast<float4*>(&sm[t][W]) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }

    // Prologue: pairs 0, 1, 2 (rows 0..5), one commit group per pair.
#pragma unroll
    for (int q = 0; q < 3; ++q) {
        if (2 * q < nin) cp_async16(&sm[2 * q][4 * t], src + (2 * q) * W);
        if (2 * q + 1 < nin) cp_async16(&sm[2 * q + 1][4 * t], src + (2 * q + 1) * W);
        cp_async_commit();
    }

    float w[9];
#pragma unroll
    for (int k = 0; k < 9; ++k) w[k] = __ldg(wt + c * 9 + k);

    // Pair 0 (input rows 0, 1): fills the window, produces no output.
    cp_async_wait<2>();
    __syncthreads();
    if (3 < npairs) {                                // pair 3 -> pair slot 3 (never read yet)
        cp_async16(&sm[6][4 * t], src + 6 * W);
        cp_async16(&sm[7][4 * t], src + 7 * W);
    }
    cp_async_commit();

    float r0[8], r1[8], r2[8];
    read_row8(&sm[0][0], t, r1);
    read_row8(&sm[1][0], t, r2);
#pragma unroll
    for (int j = 0; j < 8; ++j) r0[j] = 0.0f;

    const float* nsrc = src + 8 * W;                 // first row of pair 4
    float* yrow = yp + oh0 * OW;                     // even output row of pair 1

#pragma unroll 1
    for (int p = 1; p < npairs; ++p) {
        // Committed groups: 3 + p; pair p is group p -> at most 2 pending.
        cp_async_wait<2>();
        __syncthreads();
        // Refill the pair slot read in iteration p-1 (finished by every thread before this barrier).
        if (p + 3 < npairs) {
            const int s = ((p + 3) & 3) * 2;
            cp_async16(&sm[s][4 * t], nsrc);
            cp_async16(&sm[s + 1][4 * t], nsrc + W);
        }
        cp_async_commit();
        nsrc += 2 * W;

        // Both rows of the pair: four aligned float4 shared reads issued together.
        const float* s0 = &sm[(p & 3) * 2][0];
        float n0[8], n1[8];
        read_row8(s0, t, n0);
        read_row8(s0 + SROW, t, n1);

        // Input row 2p -> even output row oh0 + 2p - 2.
        shift_in(r0, r1, r2, n0);
        even_row(yrow, t, r0, r1, r2, w);

        // Input row 2p+1 -> odd output row oh0 + 2p - 1.
        shift_in(r0, r1, r2, n1);
        odd_row(yrow + OW, t, r0, r1, r2, w);
        yrow += 2 * OW;
    }
    cp_async_wait<0>();
}

}  // namespace

torch::Tensor forward(torch::Tensor x, torch::Tensor conv2d_weight) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(conv2d_weight.is_cuda(), "conv2d_weight must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == at::kFloat, "x must be float32");
    TORCH_CHECK(conv2d_weight.scalar_type() == at::kFloat, "conv2d_weight must be float32");
    TORCH_CHECK(x.dim() == 4 && x.size(0) == NB && x.size(1) == CH && x.size(2) == H && x.size(3) == W,
                "x must have shape [64, 128, 256, 512]");
    TORCH_CHECK(conv2d_weight.dim() == 4 && conv2d_weight.size(0) == CH && conv2d_weight.size(1) == 1 &&
                conv2d_weight.size(2) == 3 && conv2d_weight.size(3) == 3,
                "conv2d_weight must have shape [128, 1, 3, 3]");
    if (!x.is_contiguous()) x = x.contiguous();
    if (!conv2d_weight.is_contiguous()) conv2d_weight = conv2d_weight.contiguous();
    TORCH_CHECK(reinterpret_cast<uintptr_t>(x.data_ptr<float>()) % 16 == 0, "x must be 16-byte aligned");

    const c10::cuda::CUDAGuard guard(x.device());
    auto y = torch::empty({NB, CH, OH, OW}, x.options());
    TORCH_CHECK(reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0, "output must be 16-byte aligned");

    // Prefer the largest shared-memory carveout so 8 blocks x 17.5 KB (16.5 KB ring + 1 KB
    // driver reserve) fit on every SM; set once per process.
    static bool carveout_set = false;
    if (!carveout_set) {
        C10_CUDA_CHECK(cudaFuncSetAttribute(dw3x3_pair_kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                            static_cast<int>(cudaSharedmemCarveoutMaxShared)));
        carveout_set = true;
    }

    const dim3 grid(NB * CH, NCHUNK);
    const dim3 block(THREADS);
    dw3x3_pair_kernel<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), conv2d_weight.data_ptr<float>(), y.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
