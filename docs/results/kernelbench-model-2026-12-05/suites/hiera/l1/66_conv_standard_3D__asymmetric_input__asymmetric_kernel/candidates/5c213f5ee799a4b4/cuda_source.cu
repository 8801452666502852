// Direct FP32 3D convolution (valid, stride 1, no bias), depth-sliding blocks:
// one block = (n, 8-row oh tile, 16-co group, 14 output depths). A 4-slot ring of input depth
// planes lives in shared memory and is refilled with 4-byte cp.async one plane ahead of use, so
// loads overlap the FMA work. Compute core as round 1: 8 co x 8 ow register blocking per thread,
// odd row pitch P=137 (conflict-free LDS), float4 weight broadcasts from sW[k][COB].
// Variant: 512 blocks walking all 14 od; per-warp 8x33 staging buffer, row-contiguous scalar __stcs stores
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>
#include <cstdint>

#define CFG_ODC 14        // output depths walked per block (14 -> 512 blocks, 7 -> 1024 blocks)
#define CFG_OUT 1        // 0: float2 stores straight from registers; 1: warp-staged, scalar row stores; 2: warp-staged, float2 stores
#define CFG_KD_UNROLL 0  // 1: kd unrolled inside the ci loop with 3 precomputed ring-slot offsets

namespace {

constexpr int NB = 8, CI = 3, ID = 16, IH = 128, IW = 128;
constexpr int CO = 64, KD = 3, KH = 5, KW = 7;
constexpr int OD = 14, OH = 124, OW = 122;
constexpr int TH = 8;                          // output rows per tile
constexpr int COB = 16;                        // output channels per block
constexpr int P = 137;                         // odd row pitch -> conflict-free scalar reads/writes
constexpr int ROWS = TH + KH - 1;              // 12 input rows per tile
constexpr int NSLOT = 4;                       // ring slots (depth planes)
constexpr int SLAB = ROWS * P;                 // one ci of one plane
constexpr int PLANE = CI * SLAB;               // 4932 floats
constexpr int RING_FLOATS = NSLOT * PLANE;     // 19728 floats = 78,912 B
constexpr int WK = CI * KD * KH * KW;          // 315 taps
constexpr int W_FLOATS = WK * COB;             // 5040 floats = 20,160 B
constexpr int KSLAB = KH * KW * COB;           // weights of one (ci, kd) slab
constexpr int NT = 256;
constexpr int NWARPS = NT / 32;
constexpr int SP = 33;                         // per-warp staging pitch (odd -> conflict-free)
constexpr int STAGE_FLOATS = (CFG_OUT != 0) ? NWARPS * TH * SP : 0;
constexpr int SMEM_FLOATS = RING_FLOATS + W_FLOATS + STAGE_FLOATS;
constexpr int SMEM_BYTES = SMEM_FLOATS * 4;
constexpr int NTILES = (OH + TH - 1) / TH;     // 16
constexpr int NCOG = CO / COB;                 // 4
constexpr int ODC = CFG_ODC;
constexpr int NCHUNK = OD / ODC;
constexpr int NPLANES = ODC + KD - 1;          // input planes one block consumes
constexpr int NBLOCKS = NCOG * NCHUNK * NTILES * NB;
constexpr int ROWS_PER_PASS = NT / IW;         // 2 rows per pass of 256 threads
constexpr int ROW_ITERS = ROWS / ROWS_PER_PASS;// 6
constexpr int CP_ITERS = CI * ROW_ITERS;       // 18 copies per thread per plane
constexpr int CH_STRIDE = OD * OH * OW;        // output channel stride (floats)

static_assert(OD % ODC == 0, "od chunks must tile OD");
static_assert(NT % IW == 0 && ROWS % ROWS_PER_PASS == 0, "plane copy mapping");
static_assert(CP_ITERS * NT == CI * ROWS * IW, "plane copy covers the plane");
static_assert(RING_FLOATS % 4 == 0, "sW must be 16-byte aligned");
static_assert((RING_FLOATS + W_FLOATS) % 4 == 0, "staging alignment");
static_assert(2 * (SMEM_BYTES + 1024) <= 233472, "two blocks per SM must fit");
static_assert(COB == 16 && NWARPS == 8 && TH == 8, "warp/lane mapping assumes these");
static_assert(IH - (NTILES - 1) * TH >= 0, "tile math");

__device__ __forceinline__ void cp_async4(float* sdst, const float* gsrc)
{
    const unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(sdst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" :: "r"(sa), "l"(gsrc) : "memory");
}
__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void cp_async_wait_all()
{
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// Copy one input depth plane (3 ci x 12 rows x 128 cols) into a ring slot.
// Thread t handles column (t & 127) of rows 2*i' + (t >> 7): consecutive lanes -> consecutive
// columns (coalesced 128-B global reads, conflict-free odd-pitch smem writes).
// gRow = x + (n,ci=0,d,ih=oh0+rr0,col) ; sRow = slot + rr0*P + col.
__device__ __forceinline__ void issue_plane(float* sRow, const float* gRow, int rowLim)
{
#pragma unroll
    for (int i = 0; i < CP_ITERS; ++i) {
        const int ci = i / ROW_ITERS;
        const int rb = ROWS_PER_PASS * (i % ROW_ITERS);
        if (rb < rowLim)     // rowLim = (IH - oh0) - rr0 : skip rows with ih >= IH
            cp_async4(sRow + (ci * ROWS + rb) * P, gRow + (size_t)ci * (ID * IH * IW) + rb * IW);
    }
}

__device__ __forceinline__ void slab_accum(float (&acc)[8][8], const float* __restrict__ ip,
                                           const float* __restrict__ wp)
{
#pragma unroll
    for (int kh = 0; kh < KH; ++kh) {
        float in[14];
#pragma unroll
        for (int k = 0; k < 14; ++k) in[k] = ip[kh * P + k];
#pragma unroll
        for (int kw = 0; kw < KW; ++kw) {
            const float4 w0 = *reinterpret_cast<const float4*>(wp + (kh * KW + kw) * COB);
            const float4 w1 = *reinterpret_cast<const float4*>(wp + (kh * KW + kw) * COB + 4);
            const float wv[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
            for (int c = 0; c < 8; ++c) {
#pragma unroll
                for (int p = 0; p < 8; ++p) {
                    acc[c][p] = fmaf(wv[c], in[p + kw], acc[c][p]);
                }
            }
        }
    }
}

__global__ void __launch_bounds__(NT, 2)
conv3d_ring_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ out)
{
    extern __shared__ __align__(16) float smem[];
    float* sIn = smem;                    // [slot][ci][ROWS][P]
    float* sW = smem + RING_FLOATS;       // [k][COB]

    const int tid = threadIdx.x;
    int b = blockIdx.x;
    const int cog = b % NCOG; b /= NCOG;          // co-group fastest: 4 blocks sharing an input tile run together
    const int chunk = b % NCHUNK; b /= NCHUNK;
    const int tile = b % NTILES; b /= NTILES;
    const int n = b;
    const int oh0 = tile * TH;
    const int od0 = chunk * ODC;
    const int validRows = IH - oh0;               // tile rows j with ih < IH: j < validRows

    // ---- per-thread plane-copy coordinates ----
    const int ccol = tid & (IW - 1);
    const int rr0 = tid / IW;
    const float* gRow = x + ((size_t)(n * CI) * ID * IH + (size_t)(oh0 + rr0)) * IW + ccol;   // ci = 0, d = 0
    float* sRow = sIn + rr0 * P + ccol;
    const int rowLim = validRows - rr0;

    // ---- prologue: planes od0 .. od0+KD-1 into their slots ----
#pragma unroll 1
    for (int p = 0; p < KD; ++p) {
        const int d = od0 + p;
        issue_plane(sRow + (d & (NSLOT - 1)) * PLANE, gRow + (size_t)d * (IH * IW), rowLim);
    }
    cp_async_commit();

    // ---- weights, once per block: sW[k*COB + col] = w[cog*COB + col][k] ----
    {
        const float* wg = w + (size_t)cog * COB * WK;
        for (int f = tid; f < W_FLOATS; f += NT) {
            const int col = f & (COB - 1);
            const int k = f / COB;
            sW[f] = __ldg(wg + col * WK + k);
        }
    }
    // ---- cells cp.async never writes: pad columns of every row, rows with ih >= IH ----
    {
        constexpr int PADC = P - IW;
        for (int f = tid; f < NSLOT * CI * ROWS * PADC; f += NT) {
            const int row = f / PADC;
            const int c = f - row * PADC;
            sIn[row * P + IW + c] = 0.f;
        }
        if (validRows < ROWS) {
            const int nbad = ROWS - validRows;
            for (int f = tid; f < NSLOT * CI * nbad * IW; f += NT) {
                const int c = f & (IW - 1);
                const int t = f / IW;
                const int sc = t / nbad;              // slot*CI + ci
                const int j = validRows + (t - sc * nbad);
                sIn[(sc * ROWS + j) * P + c] = 0.f;
            }
        }
    }

    // ---- compute mapping (as round 1) ----
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int sub = warp & 1;             // which 8 of the 16 co
    const int q = warp >> 1;              // 32-column quarter
    const int r = lane & 7;               // output row in tile
    const int s = lane >> 3;              // 8-wide column chunk
    const int owb = 32 * q + 8 * s;
    const int nrows = min(TH, OH - oh0);

    const float* inBase = sIn + r * P + owb;
    const float* wBase = sW + sub * 8;
    const int co0 = cog * COB + sub * 8;

#if CFG_OUT != 0
    float* buf = smem + RING_FLOATS + W_FLOATS + warp * (TH * SP);
#endif

#pragma unroll 1
    for (int od = od0; od < od0 + ODC; ++od) {
        cp_async_wait_all();      // plane od+2 (issued last step) has landed for this thread
        __syncthreads();          // ...for all threads; and every warp finished step od-1 -> slot (od-1)&3 free
        {
            const int pn = od + NSLOT - 1;
            if (pn < od0 + NPLANES) {
                issue_plane(sRow + (pn & (NSLOT - 1)) * PLANE, gRow + (size_t)pn * (IH * IW), rowLim);
                cp_async_commit();
            }
        }

        float acc[8][8];
#pragma unroll
        for (int c = 0; c < 8; ++c)
#pragma unroll
            for (int p = 0; p < 8; ++p) acc[c][p] = 0.f;

#if CFG_KD_UNROLL
        {
            const int o0 = ((od + 0) & (NSLOT - 1)) * PLANE;
            const int o1 = ((od + 1) & (NSLOT - 1)) * PLANE;
            const int o2 = ((od + 2) & (NSLOT - 1)) * PLANE;
#pragma unroll 1
            for (int ci = 0; ci < CI; ++ci) {
                const float* ip = inBase + ci * SLAB;
                const float* wp = wBase + ci * (KD * KSLAB);
                slab_accum(acc, ip + o0, wp);
                slab_accum(acc, ip + o1, wp + KSLAB);
                slab_accum(acc, ip + o2, wp + 2 * KSLAB);
            }
        }
#else
#pragma unroll 1
        for (int ci = 0; ci < CI; ++ci) {
#pragma unroll 1
            for (int kd = 0; kd < KD; ++kd) {
                slab_accum(acc, inBase + ((od + kd) & (NSLOT - 1)) * PLANE + ci * SLAB,
                           wBase + (ci * KD + kd) * KSLAB);
            }
        }
#endif

        // ---- store this od's outputs (streaming, not waited on) ----
        float* outTile = out + ((size_t)((n * CO + co0) * OD + od) * OH + oh0) * OW;
#if CFG_OUT == 0
        if (r < nrows) {
            float* d0 = outTile + r * OW + owb;
#pragma unroll
            for (int c = 0; c < 8; ++c) {
                float* d = d0 + c * CH_STRIDE;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    if (owb + 2 * j < OW)
                        __stcs(reinterpret_cast<float2*>(d + 2 * j),
                               make_float2(acc[c][2 * j], acc[c][2 * j + 1]));
                }
            }
        }
#elif CFG_OUT == 1
        {
            const int ocol = 32 * q + lane;
            float* d0 = outTile + ocol;
#pragma unroll
            for (int c = 0; c < 8; ++c) {
#pragma unroll
                for (int p = 0; p < 8; ++p) buf[r * SP + 8 * s + p] = acc[c][p];
                __syncwarp();
                if (ocol < OW) {
#pragma unroll
                    for (int j = 0; j < TH; ++j) {
                        if (j < nrows) __stcs(d0 + c * CH_STRIDE + j * OW, buf[j * SP + lane]);
                    }
                }
                __syncwarp();
            }
        }
#else
        {
            const int cl = lane & 15;
            const int rh = lane >> 4;
            const int ocol = 32 * q + 2 * cl;     // even -> 8-byte aligned (OW even)
            float* d0 = outTile + ocol;
#pragma unroll
            for (int c = 0; c < 8; ++c) {
#pragma unroll
                for (int p = 0; p < 8; ++p) buf[r * SP + 8 * s + p] = acc[c][p];
                __syncwarp();
                if (ocol < OW) {
#pragma unroll
                    for (int jj = 0; jj < TH / 2; ++jj) {
                        const int row = 2 * jj + rh;
                        if (row < nrows)
                            __stcs(reinterpret_cast<float2*>(d0 + c * CH_STRIDE + row * OW),
                                   make_float2(buf[row * SP + 2 * cl], buf[row * SP + 2 * cl + 1]));
                    }
                }
                __syncwarp();
            }
        }
#endif
    }
}

}  // namespace

torch::Tensor forward(torch::Tensor x, torch::Tensor conv3d_weight) {
    TORCH_CHECK(x.is_cuda() && conv3d_weight.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(x.scalar_type() == at::kFloat && conv3d_weight.scalar_type() == at::kFloat, "float32 expected");
    TORCH_CHECK(x.dim() == 5 && x.size(0) == NB && x.size(1) == CI && x.size(2) == ID &&
                x.size(3) == IH && x.size(4) == IW, "x must be [8, 3, 16, 128, 128]");
    TORCH_CHECK(conv3d_weight.dim() == 5 && conv3d_weight.size(0) == CO && conv3d_weight.size(1) == CI &&
                conv3d_weight.size(2) == KD && conv3d_weight.size(3) == KH && conv3d_weight.size(4) == KW,
                "weight must be [64, 3, 3, 5, 7]");
    auto xc = x.contiguous();
    auto wc = conv3d_weight.contiguous();
    auto out = at::empty({NB, CO, OD, OH, OW}, xc.options());
    cudaFuncSetAttribute(conv3d_ring_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
    cudaFuncSetAttribute(conv3d_ring_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    conv3d_ring_kernel<<<NBLOCKS, NT, SMEM_BYTES, stream>>>(
        xc.data_ptr<float>(), wc.data_ptr<float>(), out.data_ptr<float>());
    return out;
}
