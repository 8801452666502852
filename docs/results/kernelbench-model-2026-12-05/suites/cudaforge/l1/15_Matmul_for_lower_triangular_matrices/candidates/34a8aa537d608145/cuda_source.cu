// Triangular-tile-skipping FP32 SIMT GEMM for tril(A @ B), N = 4096 (no TF32, no libraries).
#define CFG_BK 16
#define CFG_SPLIT 12
#define CFG_USE_TABLE 1
#define CFG_BLOCK_FLAGS 1
#define CFG_ZERO_IN_GEMM 0

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
constexpr int kBK = CFG_BK;
constexpr int kLDA = kTile + 4;                        // padded row of the transposed A tile
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

static_assert(kBK == 8 || kBK == 16, "BK must be 8 or 16");
static_assert(CFG_USE_TABLE || kNumSplitTiles == 0, "split-K needs the work table");
static_assert(kNumItems >= kNumLower, "bad item count");
static_assert(kNumUpper <= 2 * kThreads, "flag gather assumes <= 512 flags");

// ---------------------------------------------------------------------------------------------
// Check kernel.
//  blocks [0, kNumUpper): strictly-upper 128x128 block (r, c), c > r. Reads that block of A and B,
//      records whether any element is nonzero (bit 1: A, bit 2: B), and (unless the GEMM does it)
//      writes zeros into the same block of C (tril zeroes it anyway).
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
#if !CFG_ZERO_IN_GEMM
            __stcs(reinterpret_cast<float4*>(C + off), z);
#endif
        }
#if CFG_BLOCK_FLAGS
        const int oa = __syncthreads_or(nzA);
        const int ob = __syncthreads_or(nzB);
        if (tid == 0) flags[b] = (oa ? 1 : 0) | (ob ? 2 : 0);
#else
        const unsigned ma = __ballot_sync(0xffffffffu, nzA);
        const unsigned mb = __ballot_sync(0xffffffffu, nzB);
        if ((tid & 31) == 0 && (ma | mb) != 0u) atomicOr(flags, (ma ? 1 : 0) | (mb ? 2 : 0));
#endif
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

#if CFG_USE_TABLE
// One work item: lower tile (bi, bj), k range [kb*128, ke*128), and whether it accumulates atomically.
struct WorkTable {
    unsigned int item[kNumItems];
};
#endif

// ---------------------------------------------------------------------------------------------
// FP32 SIMT GEMM over lower tiles: 128x128 output tile per CTA, 256 threads, 8x8 per thread
// (2x2 sub-blocks of 4x4), BK-deep double-buffered shared memory with register prefetch.
// ---------------------------------------------------------------------------------------------
__global__ void __launch_bounds__(kThreads, 2)
tril_gemm_kernel(const float* __restrict__ A, const float* __restrict__ B,
                 float* __restrict__ C, const int* __restrict__ flags
#if CFG_USE_TABLE
                 , const __grid_constant__ WorkTable tab
#endif
                 )
{
    __shared__ __align__(16) float As[2][kBK][kLDA];
    __shared__ __align__(16) float Bs[2][kBK][kTile];

    const int tid = threadIdx.x;
    const int bid = blockIdx.x;

#if CFG_ZERO_IN_GEMM
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
#endif

#if CFG_BLOCK_FLAGS
    int pf = 0;
    if (tid < kNumUpper) pf |= __ldg(flags + tid);
    if (tid + kThreads < kNumUpper) pf |= __ldg(flags + tid + kThreads);
    const int fa = __syncthreads_or(pf & 1);
    const int fb = __syncthreads_or(pf & 2);
    const int f = (fa ? 1 : 0) | (fb ? 2 : 0);
#else
    const int f = __ldg(flags);
#endif

    int bi, bj, kBeg, kEnd;
    bool useAtomic = false;
#if CFG_USE_TABLE
    if (f == 0) {
        if (bid >= kNumItems) return;
        const unsigned int it = tab.item[bid];
        bi = (int)(it & 31u);
        bj = (int)((it >> 5) & 31u);
        kBeg = (int)((it >> 10) & 63u) * kTile;
        kEnd = (int)((it >> 16) & 63u) * kTile;
        useAtomic = ((it >> 22) & 1u) != 0u;
    } else
#endif
    {
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

    constexpr int kLd = kBK / 8;                 // float4 loads per thread per tile (each of A, B)
    constexpr int kAF4 = kBK / 4;                // float4 per row of the A tile
    constexpr int kARowStep = kThreads / kAF4;   // 128 (BK=8) or 64 (BK=16)
    const int aRow = tid / kAF4;
    const int aCol = (tid % kAF4) * 4;
    const int bRow = tid >> 5;
    const int bCol = (tid & 31) << 2;

    const float* Ag = A + (size_t)(m0 + aRow) * kN + aCol;
    const float* Bg = B + (size_t)bRow * kN + n0 + bCol;

    const int tx = tid & 15;
    const int ty = tid >> 4;

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

    float4 ra[kLd], rb[kLd];
#pragma unroll
    for (int q = 0; q < kLd; ++q) {
        ra[q] = __ldg(reinterpret_cast<const float4*>(Ag + (size_t)q * kARowStep * kN + kBeg));
        rb[q] = __ldg(reinterpret_cast<const float4*>(Bg + (size_t)(kBeg + q * 8) * kN));
    }
#pragma unroll
    for (int q = 0; q < kLd; ++q) {
        const int r = aRow + q * kARowStep;
        As[0][aCol + 0][r] = ra[q].x;
        As[0][aCol + 1][r] = ra[q].y;
        As[0][aCol + 2][r] = ra[q].z;
        As[0][aCol + 3][r] = ra[q].w;
        *reinterpret_cast<float4*>(&Bs[0][bRow + q * 8][bCol]) = rb[q];
    }
    __syncthreads();

    int buf = 0;
    for (int k0 = kBeg; k0 < kEnd; k0 += kBK) {
        const int kn = k0 + kBK;
        const bool more = kn < kEnd;
        if (more) {
#pragma unroll
            for (int q = 0; q < kLd; ++q) {
                ra[q] = __ldg(reinterpret_cast<const float4*>(Ag + (size_t)q * kARowStep * kN + kn));
                rb[q] = __ldg(reinterpret_cast<const float4*>(Bg + (size_t)(kn + q * 8) * kN));
            }
        }
#pragma unroll
        for (int kk = 0; kk < kBK; ++kk) {
            const float4 a0 = *reinterpret_cast<const float4*>(&As[buf][kk][ty * 4]);
            const float4 a1 = *reinterpret_cast<const float4*>(&As[buf][kk][64 + ty * 4]);
            const float4 b0 = *reinterpret_cast<const float4*>(&Bs[buf][kk][tx * 4]);
            const float4 b1 = *reinterpret_cast<const float4*>(&Bs[buf][kk][64 + tx * 4]);
            const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j)
                    acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
        if (more) {
            const int nb = buf ^ 1;
#pragma unroll
            for (int q = 0; q < kLd; ++q) {
                const int r = aRow + q * kARowStep;
                As[nb][aCol + 0][r] = ra[q].x;
                As[nb][aCol + 1][r] = ra[q].y;
                As[nb][aCol + 2][r] = ra[q].z;
                As[nb][aCol + 3][r] = ra[q].w;
                *reinterpret_cast<float4*>(&Bs[nb][bRow + q * 8][bCol]) = rb[q];
            }
        }
        __syncthreads();
        buf ^= 1;
    }

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

#if CFG_USE_TABLE
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
#endif

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
#if CFG_BLOCK_FLAGS
    auto flags = at::empty({kNumUpper}, Ac.options().dtype(at::kInt));
#else
    auto flags = at::zeros({1}, Ac.options().dtype(at::kInt));
#endif
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    const float* pA = Ac.data_ptr<float>();
    const float* pB = Bc.data_ptr<float>();
    float* pC = C.data_ptr<float>();
    int* pF = flags.data_ptr<int>();

    check_kernel<<<kNumUpper + kNumSplitTiles, kThreads, 0, stream>>>(pA, pB, pC, pF);
    C10_CUDA_KERNEL_LAUNCH_CHECK();

#if CFG_USE_TABLE
    int grid = kNumItems;
#else
    int grid = kNumLower;
#endif
#if CFG_ZERO_IN_GEMM
    grid += kNumUpper;
#endif

#if CFG_USE_TABLE
    WorkTable tab;
    build_table(tab);
    tril_gemm_kernel<<<grid, kThreads, 0, stream>>>(pA, pB, pC, pF, tab);
#else
    tril_gemm_kernel<<<grid, kThreads, 0, stream>>>(pA, pB, pC, pF);
#endif
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return C;
}
