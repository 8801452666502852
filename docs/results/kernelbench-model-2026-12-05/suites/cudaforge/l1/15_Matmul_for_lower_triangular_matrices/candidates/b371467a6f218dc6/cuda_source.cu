// Triangular-tile-skipping FP32 SIMT GEMM for tril(A @ B), N = 4096 (no TF32, no libraries).
// Operands staged global->shared with cp.async in a multi-stage pipeline (no register staging).
#define CFG_BK 16
#define CFG_STAGES 3
#define CFG_AVEC 4
#define CFG_SPLIT 12

#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

constexpr int kN = 4096;
constexpr int kTile = 128;
constexpr int kNT = kN / kTile;                        // 32 tiles per side
constexpr int kThreads = 256;
constexpr int kBK = CFG_BK;                            // k depth of one pipeline stage
constexpr int kStages = CFG_STAGES;
constexpr int kAVec = CFG_AVEC;                        // k values per A-fragment shared load
constexpr int kLDA = kBK + 4;                          // padded pitch of the row-major A tile
constexpr int kAStage = kTile * kLDA;                  // floats of A per stage
constexpr int kBStage = kBK * kTile;                   // floats of B per stage
constexpr int kStageFloats = kAStage + kBStage;
constexpr int kSmemBytes = kStages * kStageFloats * (int)sizeof(float);
constexpr int kAF4 = kBK / 4;                          // float4 per row of the A tile
constexpr int kARowStep = kThreads / kAF4;             // rows between one thread's A copies
constexpr int kALd = (kTile * kBK / 4) / kThreads;     // A float4 copies per thread per stage
constexpr int kBLd = (kBK * kTile / 4) / kThreads;     // B float4 copies per thread per stage
constexpr int kNumLower = kNT * (kNT + 1) / 2;         // 528 tiles with bi >= bj
constexpr int kNumUpper = kNT * (kNT - 1) / 2;         // 496 tiles with bi < bj
constexpr int kSplit = CFG_SPLIT;                      // max k-units (of 128) per work item
constexpr int kSplitMinD = (kSplit < kNT) ? kSplit : kNT;   // tiles with bi-bj >= this are split
constexpr int kNumSplitTiles = (kNT - kSplitMinD) * (kNT - kSplitMinD + 1) / 2;

constexpr int count_items(int S) {
    int n = 0;
    for (int w = 1; w <= kNT; ++w) n += (kNT + 1 - w) * ((w + S - 1) / S);
    return n;
}
constexpr int kNumItems = count_items(kSplit);

static_assert(kBK % 8 == 0 && kBK >= 8 && kBK <= 32, "BK must be 8, 16, 24 or 32");
static_assert(kBK % kAVec == 0, "BK must be a multiple of the A vector width");
static_assert(kAVec == 2 || kAVec == 4, "A vector width must be 2 or 4");
static_assert(kStages >= 2, "need at least two stages");
static_assert(kLDA % 4 == 0, "A pitch must keep 16-byte alignment");
static_assert(kStageFloats % 4 == 0, "stage size must keep 16-byte alignment");
static_assert(kSmemBytes <= 227 * 1024, "too much shared memory");
static_assert(kALd * kThreads * 4 == kTile * kBK, "A tile copy mapping");
static_assert(kBLd * kThreads * 4 == kTile * kBK, "B tile copy mapping");
static_assert(kNumItems >= kNumLower, "bad item count");
static_assert(kNumUpper <= 2 * kThreads, "flag gather assumes <= 512 flags");

// ---------------------------------------------------------------------------------------------
// cp.async helpers (16-byte, L2-only .cg variant).
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ void cp_async16(float* smem_dst, const float* gmem_src) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem_dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(s), "l"(gmem_src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}

// ---------------------------------------------------------------------------------------------
// Check kernel.
//  blocks [0, kNumUpper): strictly-upper 128x128 block (r, c), c > r. Reads that block of A and B
//      and records whether any element is nonzero (bit 1: A, bit 2: B). The GEMM kernel zeroes
//      the same block of C (tril zeroes it anyway).
//  blocks [kNumUpper, kNumUpper + kNumSplitTiles): zero the lower tiles that split-K accumulates into.
// ---------------------------------------------------------------------------------------------
__global__ void __launch_bounds__(kThreads)
check_kernel(const float* __restrict__ A, const float* __restrict__ B,
             float* __restrict__ C, int* __restrict__ flags)
{
    const int tid = threadIdx.x;
    const int col = (tid & 31) << 2;
    const int row0 = tid >> 5;
    const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
    const int b = blockIdx.x;
    if (b < kNumUpper) {
        int u = b;
        int r = 0;
        while (u >= kNT - 1 - r) { u -= kNT - 1 - r; ++r; }
        const int c = r + 1 + u;
        const size_t base = (size_t)r * kTile * kN + (size_t)c * kTile + (size_t)row0 * kN + col;
        int nzA = 0, nzB = 0;
#pragma unroll 4
        for (int it = 0; it < kTile / 8; ++it) {
            const size_t off = base + (size_t)it * 8 * kN;
            const float4 a = __ldcs(reinterpret_cast<const float4*>(A + off));
            const float4 v = __ldcs(reinterpret_cast<const float4*>(B + off));
            nzA |= (int)(a.x != 0.f) | (int)(a.y != 0.f) | (int)(a.z != 0.f) | (int)(a.w != 0.f);
            nzB |= (int)(v.x != 0.f) | (int)(v.y != 0.f) | (int)(v.z != 0.f) | (int)(v.w != 0.f);
        }
        const int oa = __syncthreads_or(nzA);
        const int ob = __syncthreads_or(nzB);
        if (tid == 0) flags[b] = (oa ? 1 : 0) | (ob ? 2 : 0);
    } else {
        if (kNumSplitTiles == 0) return;
        int zi = b - kNumUpper;
        int d = kSplitMinD;
        while (zi >= kNT - d) { zi -= kNT - d; ++d; }
        const int bj = zi;
        const int bi = zi + d;
        const size_t base = (size_t)bi * kTile * kN + (size_t)bj * kTile + (size_t)row0 * kN + col;
#pragma unroll 4
        for (int it = 0; it < kTile / 8; ++it)
            *reinterpret_cast<float4*>(C + base + (size_t)it * 8 * kN) = z;
    }
}

// One work item: lower tile (bi, bj), k range [kb*128, ke*128), and whether it accumulates atomically.
struct WorkTable {
    unsigned int item[kNumItems];
};

// Issue one stage of cp.async copies. sA/sB: this thread's destinations in the stage;
// gA/gB: this thread's sources for the stage's first k.
__device__ __forceinline__ void load_stage(float* sA, float* sB, const float* gA, const float* gB) {
#pragma unroll
    for (int q = 0; q < kALd; ++q)
        cp_async16(sA + q * kARowStep * kLDA, gA + (size_t)q * kARowStep * kN);
#pragma unroll
    for (int q = 0; q < kBLd; ++q)
        cp_async16(sB + q * 8 * kTile, gB + (size_t)q * 8 * kN);
}

// ---------------------------------------------------------------------------------------------
// FP32 SIMT GEMM over lower tiles: 128x128 output tile per CTA, 256 threads, 8x8 per thread
// (2x2 sub-blocks of 4x4), kStages-deep cp.async shared-memory pipeline of BK-deep stages.
// Shared stage layout: As[128][BK+4] (row-major as in global), Bs[BK][128].
// ---------------------------------------------------------------------------------------------
__global__ void __launch_bounds__(kThreads, 2)
tril_gemm_kernel(const float* __restrict__ A, const float* __restrict__ B,
                 float* __restrict__ C, const int* __restrict__ flags,
                 const __grid_constant__ WorkTable tab)
{
    extern __shared__ __align__(16) float smem[];

    const int tid = threadIdx.x;
    const int bid = blockIdx.x;

    // Zero-tile CTAs at the end of the grid: write zeros into one strictly-upper block of C.
    {
        const int zStart = (int)gridDim.x - kNumUpper;
        if (bid >= zStart) {
            int u = bid - zStart;
            int r = 0;
            while (u >= kNT - 1 - r) { u -= kNT - 1 - r; ++r; }
            const int c = r + 1 + u;
            float* base = C + (size_t)r * kTile * kN + (size_t)c * kTile
                        + (size_t)(tid >> 5) * kN + ((tid & 31) << 2);
            const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
            for (int it = 0; it < kTile / 8; ++it)
                __stcs(reinterpret_cast<float4*>(base + (size_t)it * 8 * kN), z);
            return;
        }
    }

    int pf = 0;
    if (tid < kNumUpper) pf |= __ldg(flags + tid);
    if (tid + kThreads < kNumUpper) pf |= __ldg(flags + tid + kThreads);
    const int fa = __syncthreads_or(pf & 1);
    const int fb = __syncthreads_or(pf & 2);
    const int f = (fa ? 1 : 0) | (fb ? 2 : 0);

    int bi, bj, kBeg, kEnd;
    bool useAtomic = false;
    if (f == 0) {
        if (bid >= kNumItems) return;
        const unsigned int it = tab.item[bid];
        bi = (int)(it & 31u);
        bj = (int)((it >> 5) & 31u);
        kBeg = (int)((it >> 10) & 63u) * kTile;
        kEnd = (int)((it >> 16) & 63u) * kTile;
        useAtomic = ((it >> 22) & 1u) != 0u;
    } else {
        if (bid >= kNumLower) return;
        int b = bid;
        int d = kNT - 1;
        while (b >= kNT - d) { b -= kNT - d; --d; }
        bj = b;
        bi = b + d;
        // bit 1: A has nonzeros above its block diagonal -> full K to the end
        // bit 2: B has nonzeros above its block diagonal -> full K from the start
        kBeg = (f & 2) ? 0 : bj * kTile;
        kEnd = (f & 1) ? kN : (bi + 1) * kTile;
    }

    const int m0 = bi * kTile;
    const int n0 = bj * kTile;

    // Copy mapping.
    const int aRow = tid / kAF4;
    const int aCol = (tid % kAF4) * 4;
    const int bRow = tid >> 5;
    const int bCol = (tid & 31) << 2;

    const float* gA = A + (size_t)(m0 + aRow) * kN + kBeg + aCol;
    const float* gB = B + (size_t)(kBeg + bRow) * kN + n0 + bCol;
    float* const sAw = smem + aRow * kLDA + aCol;
    float* const sBw = smem + kAStage + bRow * kTile + bCol;

    // Compute mapping.
    const int tx = tid & 15;
    const int ty = tid >> 4;
    const float* const sAr = smem + (ty * 4) * kLDA;
    const float* const sBr = smem + kAStage + tx * 4;

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

    const int numK = (kEnd - kBeg) / kBK;

    // Prologue: stages 0 .. kStages-2 (an empty group where past the end keeps the count uniform).
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < numK) {
            load_stage(sAw + s * kStageFloats, sBw + s * kStageFloats, gA, gB);
            gA += kBK;
            gB += (size_t)kBK * kN;
        }
        cp_async_commit();
    }

    int wslot = kStages - 1;   // slot the next issued stage goes into
    int rslot = 0;             // slot computed this step
    for (int t = 0; t < numK; ++t) {
        cp_async_wait<kStages - 2>();
        __syncthreads();
        if (t + kStages - 1 < numK) {
            load_stage(sAw + wslot * kStageFloats, sBw + wslot * kStageFloats, gA, gB);
            gA += kBK;
            gB += (size_t)kBK * kN;
        }
        cp_async_commit();
        wslot = (wslot + 1 == kStages) ? 0 : wslot + 1;

        const float* sa = sAr + rslot * kStageFloats;
        const float* sb = sBr + rslot * kStageFloats;
#pragma unroll
        for (int kk = 0; kk < kBK; kk += kAVec) {
            float a[8][kAVec];
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const int r = (i < 4) ? i : (64 + i - 4);   // row relative to ty*4
#if CFG_AVEC == 4
                const float4 v = *reinterpret_cast<const float4*>(sa + r * kLDA + kk);
                a[i][0] = v.x; a[i][1] = v.y; a[i][2] = v.z; a[i][3] = v.w;
#else
                const float2 v = *reinterpret_cast<const float2*>(sa + r * kLDA + kk);
                a[i][0] = v.x; a[i][1] = v.y;
#endif
            }
#pragma unroll
            for (int t2 = 0; t2 < kAVec; ++t2) {
                const float4 b0 = *reinterpret_cast<const float4*>(sb + (kk + t2) * kTile);
                const float4 b1 = *reinterpret_cast<const float4*>(sb + (kk + t2) * kTile + 64);
                const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
                for (int i = 0; i < 8; ++i)
#pragma unroll
                    for (int j = 0; j < 8; ++j)
                        acc[i][j] = fmaf(a[i][t2], bv[j], acc[i][j]);
            }
        }
        rslot = (rslot + 1 == kStages) ? 0 : rslot + 1;
    }
    cp_async_wait<0>();

    // Epilogue: tril folded in (diagonal tiles zero col > row).
    const bool diag = (bi == bj);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int lr = (i < 4) ? (ty * 4 + i) : (64 + ty * 4 + (i - 4));
        float* crow = C + (size_t)(m0 + lr) * kN + n0;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int lc = h * 64 + tx * 4;
            float4 v = make_float4(acc[i][4 * h + 0], acc[i][4 * h + 1],
                                   acc[i][4 * h + 2], acc[i][4 * h + 3]);
            if (diag) {
                if (lc + 0 > lr) v.x = 0.f;
                if (lc + 1 > lr) v.y = 0.f;
                if (lc + 2 > lr) v.z = 0.f;
                if (lc + 3 > lr) v.w = 0.f;
            }
            float* dst = crow + lc;
            if (useAtomic) {
                atomicAdd(dst + 0, v.x);
                atomicAdd(dst + 1, v.y);
                atomicAdd(dst + 2, v.z);
                atomicAdd(dst + 3, v.w);
            } else {
                *reinterpret_cast<float4*>(dst) = v;
            }
        }
    }
}

// Work items (lower tile, k chunk) sorted by length, longest first (LPT order for the block scheduler).
void build_table(WorkTable& t) {
    unsigned int tmp[kNumItems];
    int lens[kNumItems];
    int hist[kNT + 1];
    for (int i = 0; i <= kNT; ++i) hist[i] = 0;
    int n = 0;
    for (int d = kNT - 1; d >= 0; --d) {
        const int w = d + 1;
        const int c = (w + kSplit - 1) / kSplit;
        for (int bj = 0; bj + d < kNT; ++bj) {
            const int bi = bj + d;
            for (int q = 0; q < c; ++q) {
                const int s = bj + (w * q) / c;
                const int e = bj + (w * (q + 1)) / c;
                tmp[n] = (unsigned)bi | ((unsigned)bj << 5) | ((unsigned)s << 10) |
                         ((unsigned)e << 16) | (c > 1 ? (1u << 22) : 0u);
                lens[n] = e - s;
                hist[e - s] += 1;
                ++n;
            }
        }
    }
    int pos[kNT + 1];
    int accum = 0;
    for (int L = kNT; L >= 1; --L) { pos[L] = accum; accum += hist[L]; }
    pos[0] = accum;
    for (int i = 0; i < n; ++i) t.item[pos[lens[i]]++] = tmp[i];
}

}  // namespace

torch::Tensor forward(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "A and B must be CUDA tensors");
    TORCH_CHECK(A.scalar_type() == at::kFloat && B.scalar_type() == at::kFloat, "A and B must be float32");
    TORCH_CHECK(A.dim() == 2 && B.dim() == 2 && A.size(0) == kN && A.size(1) == kN &&
                B.size(0) == kN && B.size(1) == kN, "A and B must be [4096, 4096]");
    const c10::cuda::CUDAGuard guard(A.device());
    auto Ac = A.contiguous();
    auto Bc = B.contiguous();
    auto C = at::empty({kN, kN}, Ac.options());
    auto flags = at::empty({kNumUpper}, Ac.options().dtype(at::kInt));
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    const float* pA = Ac.data_ptr<float>();
    const float* pB = Bc.data_ptr<float>();
    float* pC = C.data_ptr<float>();
    int* pF = flags.data_ptr<int>();

    check_kernel<<<kNumUpper + kNumSplitTiles, kThreads, 0, stream>>>(pA, pB, pC, pF);
    C10_CUDA_KERNEL_LAUNCH_CHECK();

    const int grid = kNumItems + kNumUpper;
    WorkTable tab;
    build_table(tab);
    C10_CUDA_CHECK(cudaFuncSetAttribute(tril_gemm_kernel,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    C10_CUDA_CHECK(cudaFuncSetAttribute(tril_gemm_kernel,
                                        cudaFuncAttributePreferredSharedMemoryCarveout,
                                        (int)cudaSharedmemCarveoutMaxShared));
    tril_gemm_kernel<<<grid, kThreads, kSmemBytes, stream>>>(pA, pB, pC, pF, tab);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return C;
}
