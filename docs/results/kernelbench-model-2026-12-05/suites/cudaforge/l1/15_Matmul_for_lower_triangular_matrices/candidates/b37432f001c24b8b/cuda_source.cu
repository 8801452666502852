// tril(A @ B) for N = 4096, FP32 SIMT (FFMA only: no TF32, no tensor cores, no libraries).
//
// Kernel 1 (check_kernel): one CTA per strictly-upper 128x128 block records whether A / B hold a nonzero
//   there (streaming loads); extra CTAs zero the lower C tiles that split-K items accumulate into.
// Kernel 2 (tril_gemm_kernel): 128x128 output tile per CTA, 256 threads, 8x8 per thread (warp-tiled: 4x2
//   warps of 32x64, lanes 4x8, every fragment LDS.128 is one wavefront), BK = 16, 5-stage cp.async
//   pipeline with no register staging: the raw row-major A tile (128 x 16,
//   padded rows) and the B tile (16 x 128) land in shared memory by cp.async; one step ahead of the
//   compute, each thread moves 2 float4 of the raw A stage into a k-major double buffer (conflict-free on
//   both sides), so A needs no separate transpose pass over global memory. One __syncthreads per k-step.
//   Triangular k-range clipping, LPT-ordered split-K work table (built once on the host), diagonal tiles
//   masked, upper tiles zeroed by extra CTAs; if any upper block of A or B is nonzero, every lower tile
//   is recomputed over the k range the flags require (exact for any input).
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <vector>
#include <algorithm>

namespace {

constexpr int kN = 4096;
constexpr int kTile = 128;
constexpr int kNT = kN / kTile;                         // 32 tiles per side
constexpr int kThreads = 256;
constexpr int kBK = 16;
constexpr int kStages = 5;
constexpr int kSplit = 12;                              // max k-tiles (of 128) per work item
constexpr int kNumLower = kNT * (kNT + 1) / 2;          // 528
constexpr int kNumUpper = kNT * (kNT - 1) / 2;          // 496
constexpr int kSplitMinD = (kSplit < kNT) ? kSplit : kNT;
constexpr int kNumSplitTiles = (kNT - kSplitMinD) * (kNT - kSplitMinD + 1) / 2;
constexpr int kLDR = kBK + 4;                           // padded row (floats) of the raw row-major A stage
constexpr int kRawFloats = kTile * kLDR;                // raw A stage: [128][20]
constexpr int kBFloats = kBK * kTile;                   // B stage: [16][128]
constexpr int kTFloats = kBK * kTile;                   // k-major A buffer: [16][128]
constexpr int kSmemBytes = (kStages * (kRawFloats + kBFloats) + 2 * kTFloats) * (int)sizeof(float);  // 106 KB (2 CTAs/SM: 212 KB)

constexpr int count_items(int S) {
    int n = 0;
    for (int w = 1; w <= kNT; ++w) n += (kNT + 1 - w) * ((w + S - 1) / S);
    return n;
}
constexpr int kNumItems = count_items(kSplit);

static_assert(kBK == 16, "loader and transposer mappings assume BK = 16");
static_assert(kStages >= 3, "the k-major double buffer needs at least three stages");
static_assert(kNumItems >= kNumLower, "bad item count");
static_assert(kNumUpper % 4 == 0 && kNumUpper / 4 <= kThreads, "flag gather layout");
static_assert((kRawFloats * 4) % 16 == 0 && (kLDR * 4) % 16 == 0, "16-byte alignment of the raw stage");

struct WorkTable {
    unsigned int item[kNumItems];   // bi | bj<<5 | kbBeg<<10 | kbEnd<<16 | atomic<<22
};

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(dst), "l"(src) : "memory");
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
//  blocks [0, kNumUpper): strictly-upper 128x128 block (r, c), c > r: flags[b] = (A nonzero) | 2*(B nonzero).
//  blocks [kNumUpper, kNumUpper + kNumSplitTiles): zero the lower C tiles that split-K accumulates into.
// ---------------------------------------------------------------------------------------------
__global__ void __launch_bounds__(kThreads)
check_kernel(const float* __restrict__ A, const float* __restrict__ B,
             float* __restrict__ C, int* __restrict__ flags)
{
    const int tid = threadIdx.x;
    const int col = (tid & 31) << 2;
    const int row0 = tid >> 5;
    const int b = blockIdx.x;
    if (b < kNumUpper) {
        int u = b;
        int r = 0;
        while (u >= kNT - 1 - r) { u -= kNT - 1 - r; ++r; }
        const int c = r + 1 + u;
        const size_t base = (size_t)r * kTile * kN + (size_t)c * kTile + (size_t)row0 * kN + col;
        int nzA = 0, nzB = 0;
#pragma unroll 8
        for (int it = 0; it < kTile / 8; ++it) {
            const size_t off = base + (size_t)it * 8 * kN;
            const float4 a = __ldcs(reinterpret_cast<const float4*>(A + off));
            const float4 v = __ldcs(reinterpret_cast<const float4*>(B + off));
            nzA |= ((a.x != 0.f) || (a.y != 0.f) || (a.z != 0.f) || (a.w != 0.f)) ? 1 : 0;
            nzB |= ((v.x != 0.f) || (v.y != 0.f) || (v.z != 0.f) || (v.w != 0.f)) ? 1 : 0;
        }
        const int oa = __syncthreads_or(nzA);
        const int ob = __syncthreads_or(nzB);
        if (tid == 0) flags[b] = (oa ? 1 : 0) | (ob ? 2 : 0);
    } else {
        int zi = b - kNumUpper;
        int d = kSplitMinD;
        while (zi >= kNT - d) { zi -= kNT - d; ++d; }
        const int bj = zi;
        const int bi = zi + d;
        float* dst = C + (size_t)bi * kTile * kN + (size_t)bj * kTile + (size_t)row0 * kN + col;
        const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int it = 0; it < kTile / 8; ++it)
            *reinterpret_cast<float4*>(dst + (size_t)it * 8 * kN) = z;
    }
}

// ---------------------------------------------------------------------------------------------
// GEMM over lower tiles.
// ---------------------------------------------------------------------------------------------
__global__ void __launch_bounds__(kThreads, 2)
tril_gemm_kernel(const float* __restrict__ A, const float* __restrict__ B,
                 float* __restrict__ C, const int* __restrict__ flags,
                 const __grid_constant__ WorkTable tab)
{
    extern __shared__ __align__(16) float smem[];
    float* Araw = smem;                                 // [kStages][128][kLDR]  row-major A (m, k)
    float* Bs = smem + kStages * kRawFloats;            // [kStages][kBK][128]   (k, n)
    float* Ts = Bs + kStages * kBFloats;                // [2][kBK][128]         k-major A (k, m)

    const int tid = threadIdx.x;
    const int bid = blockIdx.x;

    // The last kNumUpper CTAs zero the strictly-upper 128x128 tiles of C (tril zeroes them).
    const int zStart = (int)gridDim.x - kNumUpper;
    if (bid >= zStart) {
        int u = bid - zStart;
        int r = 0;
        while (u >= kNT - 1 - r) { u -= kNT - 1 - r; ++r; }
        const int c = r + 1 + u;
        float* base = C + (size_t)r * kTile * kN + (size_t)c * kTile
                    + (size_t)(tid >> 5) * kN + ((tid & 31) << 2);
        const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int it = 0; it < kTile / 8; ++it)
            __stcs(reinterpret_cast<float4*>(base + (size_t)it * 8 * kN), z);
        return;
    }

    int pf = 0;
    if (tid < kNumUpper / 4) {
        const int4 f = __ldg(reinterpret_cast<const int4*>(flags) + tid);
        pf = f.x | f.y | f.z | f.w;
    }
    const int fa = __syncthreads_or(pf & 1);
    const int fb = __syncthreads_or(pf & 2);

    int bi, bj, kBeg, kEnd;
    bool useAtomic = false;
    if ((fa | fb) == 0) {
        const unsigned int it = tab.item[bid];
        bi = (int)(it & 31u);
        bj = (int)((it >> 5) & 31u);
        kBeg = (int)((it >> 10) & 63u) * kTile;
        kEnd = (int)((it >> 16) & 63u) * kTile;
        useAtomic = ((it >> 22) & 1u) != 0u;
    } else {
        // Fallback: one CTA per lower tile, k range widened as the flags require.
        if (bid >= kNumLower) return;
        int b = bid;
        int d = kNT - 1;
        while (b >= kNT - d) { b -= kNT - d; --d; }
        bj = b;
        bi = b + d;
        kBeg = fb ? 0 : bj * kTile;           // B nonzero above its block diagonal
        kEnd = fa ? kN : (bi + 1) * kTile;    // A nonzero above its block diagonal
    }

    const int m0 = bi * kTile;
    const int n0 = bj * kTile;
    const int nk = (kEnd - kBeg) / kBK;

    // Loader. A: rows aRow and aRow + 64 of the tile, 16-byte chunk aCh of the 64-byte k slice.
    //         B: rows bRow and bRow + 8 of the k slice, 16-byte chunk bCol of the 512-byte row.
    const int aRow = tid >> 2;
    const int aCh = (tid & 3) << 2;
    const int bRow = tid >> 5;
    const int bCol = (tid & 31) << 2;
    const float* gA = A + (size_t)(m0 + aRow) * kN + kBeg + aCh;
    const float* gB = B + (size_t)(kBeg + bRow) * kN + n0 + bCol;
    const uint32_t sA = smem_u32(Araw + aRow * kLDR + aCh);
    const uint32_t sB = smem_u32(Bs + bRow * kTile + bCol);

    auto issue = [&](int step, int st) {
        const float* a = gA + step * kBK;
        const float* bp = gB + (size_t)step * kBK * kN;
        const uint32_t oa = (uint32_t)(st * kRawFloats * (int)sizeof(float));
        const uint32_t ob = (uint32_t)(st * kBFloats * (int)sizeof(float));
        cp_async16(sA + oa, a);
        cp_async16(sA + oa + (uint32_t)(64 * kLDR * (int)sizeof(float)), a + (size_t)64 * kN);
        cp_async16(sB + ob, bp);
        cp_async16(sB + ob + (uint32_t)(8 * kTile * (int)sizeof(float)), bp + (size_t)8 * kN);
    };

    // Transposer: thread reads raw A (row tm, k = tkc..tkc+3 and tkc+8..tkc+11) and writes them k-major.
    // Reads: 8 consecutive rows per quarter-warp at a 20-word stride hit 32 distinct banks.
    // Writes: 32 consecutive m per warp.
    const int tm = tid & 127;
    const int tkc = (tid >> 7) << 2;
    auto transpose = [&](int st, int buf) {
        const float* rp = Araw + st * kRawFloats + tm * kLDR + tkc;
        const float4 v0 = *reinterpret_cast<const float4*>(rp);
        const float4 v1 = *reinterpret_cast<const float4*>(rp + 8);
        float* t = Ts + buf * kTFloats + tm;
        t[(tkc + 0) * kTile] = v0.x;
        t[(tkc + 1) * kTile] = v0.y;
        t[(tkc + 2) * kTile] = v0.z;
        t[(tkc + 3) * kTile] = v0.w;
        t[(tkc + 8) * kTile] = v1.x;
        t[(tkc + 9) * kTile] = v1.y;
        t[(tkc + 10) * kTile] = v1.z;
        t[(tkc + 11) * kTile] = v1.w;
    };

    // Prologue: steps 0 .. kStages-2 in flight; step 0 moved to the k-major buffer 0.
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < nk) issue(s, s);
        cp_async_commit();
    }
    cp_async_wait<kStages - 2>();
    __syncthreads();
    transpose(0, 0);

    // Warp tiling: warps 4 (M) x 2 (N), each 32x64; lanes 4 (M) x 8 (N), each 2x2 sub-blocks of 4x4.
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int rowBase = (warp >> 1) * 32 + (lane >> 3) * 4;   // rows rowBase + {0..3}, rowBase + 16 + {0..3}
    const int colBase = (warp & 1) * 64 + (lane & 7) * 4;     // cols colBase + {0..3}, colBase + 32 + {0..3}

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

    int rs = 0;                  // stage holding step kt
    int ws = kStages - 1;        // stage refilled in this iteration
#pragma unroll 1
    for (int kt = 0; kt < nk; ++kt) {
        // Groups committed so far: (kStages - 1) + kt; step kt+1 is group kt+1.
        cp_async_wait<kStages - 3>();     // this thread's copies of step kt+1 have landed
        __syncthreads();                  // k-major buffer of step kt complete; step kt-1 fully consumed
        if (kt + kStages - 1 < nk) issue(kt + kStages - 1, ws);
        cp_async_commit();                // always commit (possibly empty) to keep group counts aligned
        const int ns = (rs + 1 == kStages) ? 0 : rs + 1;
        if (kt + 1 < nk) transpose(ns, (kt + 1) & 1);

        const float* Ab = Ts + (kt & 1) * kTFloats;
        const float* Bb = Bs + rs * kBFloats;
#pragma unroll
        for (int kk = 0; kk < kBK; ++kk) {
            const float4 a0 = *reinterpret_cast<const float4*>(Ab + kk * kTile + rowBase);
            const float4 a1 = *reinterpret_cast<const float4*>(Ab + kk * kTile + rowBase + 16);
            const float4 b0 = *reinterpret_cast<const float4*>(Bb + kk * kTile + colBase);
            const float4 b1 = *reinterpret_cast<const float4*>(Bb + kk * kTile + colBase + 32);
            const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j)
                    acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
        rs = ns;
        ws = (ws + 1 == kStages) ? 0 : ws + 1;
    }

    // Epilogue.
    const bool diag = (bi == bj);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int row = m0 + rowBase + ((i < 4) ? i : (16 + (i - 4)));
        float* crow = C + (size_t)row * kN;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int col = n0 + colBase + h * 32;
            float4 v = make_float4(acc[i][4 * h + 0], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
            if (useAtomic) {
                atomicAdd(crow + col + 0, v.x);
                atomicAdd(crow + col + 1, v.y);
                atomicAdd(crow + col + 2, v.z);
                atomicAdd(crow + col + 3, v.w);
            } else {
                if (diag) {
                    if (col + 0 > row) v.x = 0.f;
                    if (col + 1 > row) v.y = 0.f;
                    if (col + 2 > row) v.z = 0.f;
                    if (col + 3 > row) v.w = 0.f;
                }
                __stcs(reinterpret_cast<float4*>(crow + col), v);
            }
        }
    }
}

// Work items: every lower tile (bi >= bj) with its k-tile range [bj, bi], split into ceil(w / kSplit)
// near-equal chunks (split tiles accumulate atomically into a pre-zeroed C tile), longest first.
// Built once per process (plain host data, not a tensor).
const WorkTable& work_table() {
    static WorkTable tab;
    static bool built = false;
    if (!built) {
        struct Item { int len, bi, bj, kb, ke, at; };
        std::vector<Item> v;
        v.reserve(kNumItems);
        for (int bi = 0; bi < kNT; ++bi) {
            for (int bj = 0; bj <= bi; ++bj) {
                const int w = bi - bj + 1;
                const int p = (w + kSplit - 1) / kSplit;
                const int q = w / p;
                const int rem = w % p;
                int k = bj;
                for (int c = 0; c < p; ++c) {
                    const int len = q + (c < rem ? 1 : 0);
                    v.push_back(Item{len, bi, bj, k, k + len, p > 1 ? 1 : 0});
                    k += len;
                }
            }
        }
        std::stable_sort(v.begin(), v.end(), [](const Item& x, const Item& y) { return x.len > y.len; });
        TORCH_CHECK((int)v.size() == kNumItems, "tril_gemm: work table size mismatch");
        for (int i = 0; i < kNumItems; ++i) {
            tab.item[i] = (unsigned int)v[i].bi | ((unsigned int)v[i].bj << 5) |
                          ((unsigned int)v[i].kb << 10) | ((unsigned int)v[i].ke << 16) |
                          ((unsigned int)v[i].at << 22);
        }
        built = true;
    }
    return tab;
}

}  // namespace

torch::Tensor forward(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "forward: A and B must be CUDA tensors");
    TORCH_CHECK(A.scalar_type() == at::kFloat && B.scalar_type() == at::kFloat, "forward: float32 expected");
    TORCH_CHECK(A.dim() == 2 && B.dim() == 2 && A.size(0) == kN && A.size(1) == kN &&
                B.size(0) == kN && B.size(1) == kN, "forward: expected [4096, 4096] inputs");
    TORCH_CHECK(A.device() == B.device(), "forward: A and B must be on the same device");

    const c10::cuda::CUDAGuard guard(A.device());
    torch::Tensor Ac = A.contiguous();
    torch::Tensor Bc = B.contiguous();
    // cp.async / float4 accesses need 16-byte aligned bases (always true for fresh allocations).
    if ((reinterpret_cast<uintptr_t>(Ac.data_ptr<float>()) & 15u) != 0) {
        torch::Tensor t = at::empty({kN, kN}, Ac.options());
        t.copy_(Ac);
        Ac = t;
    }
    if ((reinterpret_cast<uintptr_t>(Bc.data_ptr<float>()) & 15u) != 0) {
        torch::Tensor t = at::empty({kN, kN}, Bc.options());
        t.copy_(Bc);
        Bc = t;
    }
    torch::Tensor C = at::empty({kN, kN}, Ac.options());
    torch::Tensor flags = at::empty({kNumUpper}, Ac.options().dtype(at::kInt));

    const WorkTable& tab = work_table();

    static int attr_device = -1;
    const int dev = (int)Ac.get_device();
    if (attr_device != dev) {
        C10_CUDA_CHECK(cudaFuncSetAttribute(tril_gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
        C10_CUDA_CHECK(cudaFuncSetAttribute(tril_gemm_kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                            (int)cudaSharedmemCarveoutMaxShared));
        attr_device = dev;
    }

    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    const float* pA = Ac.data_ptr<float>();
    const float* pB = Bc.data_ptr<float>();
    float* pC = C.data_ptr<float>();
    int* pF = flags.data_ptr<int>();

    check_kernel<<<kNumUpper + kNumSplitTiles, kThreads, 0, stream>>>(pA, pB, pC, pF);
    C10_CUDA_KERNEL_LAUNCH_CHECK();

    tril_gemm_kernel<<<kNumItems + kNumUpper, kThreads, kSmemBytes, stream>>>(pA, pB, pC, pF, tab);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return C;
}
