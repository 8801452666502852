// Direct FP32 3D convolution (valid, stride 1): smem halo tile + register blocking (8 co x 8 ow per thread).
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>

#define CFG_TH 8
#define CFG_COB 16
#define CFG_STAGED 1
#define CFG_KD_UNROLL 1

namespace {

constexpr int NB = 8, CI = 3, ID = 16, IH = 128, IW = 128;
constexpr int CO = 64, KD = 3, KH = 5, KW = 7;
constexpr int OD = 14, OH = 124, OW = 122;
constexpr int TH = CFG_TH;
constexpr int COB = CFG_COB;
constexpr int P = 137;                       // odd row pitch -> conflict-free scalar reads
constexpr int ROWS = TH + KH - 1;
constexpr int NSLAB = CI * KD;
constexpr int IN_FLOATS = ((NSLAB * ROWS * P) + 3) & ~3;
constexpr int WK = CI * KD * KH * KW;        // 315
constexpr int W_FLOATS = WK * COB;
constexpr int NSUB = COB / 8;
constexpr int NWARPS = NSUB * 4 * (TH / 8);
constexpr int NT = NWARPS * 32;
constexpr int MINB = (NT <= 256) ? 2 : 1;
constexpr int TILE_OUT = TH * OW;
constexpr int OUT_FLOATS = CFG_STAGED ? COB * TILE_OUT : 0;
constexpr int CALC_FLOATS = IN_FLOATS + W_FLOATS;
constexpr int SMEM_FLOATS = CALC_FLOATS > OUT_FLOATS ? CALC_FLOATS : OUT_FLOATS;
constexpr int SMEM_BYTES = SMEM_FLOATS * 4;
constexpr int NTILES = (OH + TH - 1) / TH;
constexpr int NCOG = CO / COB;
constexpr int NBLOCKS = NCOG * NTILES * NB * OD;

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

__global__ void __launch_bounds__(NT, MINB)
conv3d_direct_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ out)
{
    extern __shared__ __align__(16) float smem[];
    float* sIn = smem;
    float* sW = smem + IN_FLOATS;

    const int tid = threadIdx.x;
    int b = blockIdx.x;
    const int cog = b % NCOG; b /= NCOG;      // co-group fastest: blocks sharing an input tile run together
    const int tile = b % NTILES; b /= NTILES;
    const int nod = b;
    const int n = nod / OD;
    const int od = nod - n * OD;
    const int oh0 = tile * TH;

    // ---- input tile: [slab = ci*KD+kd][ROWS][P] ----
    for (int f = tid; f < NSLAB * ROWS * (IW / 4); f += NT) {
        const int row = f >> 5;
        const int c4 = f & 31;
        const int sl = row / ROWS;
        const int j = row - sl * ROWS;
        const int ci = sl / KD;
        const int kd = sl - ci * KD;
        const int ih = oh0 + j;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (ih < IH) {
            const float* src = x + ((size_t)((n * CI + ci) * ID + (od + kd)) * IH + ih) * IW + c4 * 4;
            v = __ldg(reinterpret_cast<const float4*>(src));
        }
        float* d = sIn + row * P + c4 * 4;
        d[0] = v.x; d[1] = v.y; d[2] = v.z; d[3] = v.w;
    }
    constexpr int PADC = P - IW;
    for (int f = tid; f < NSLAB * ROWS * PADC; f += NT) {
        const int row = f / PADC;
        const int c = f - row * PADC;
        sIn[row * P + IW + c] = 0.f;
    }
    // ---- weights: sW[k][COB], k = ((ci*KD+kd)*KH+kh)*KW+kw ----
    const float* wg = w + (size_t)cog * COB * WK;
    for (int f = tid; f < W_FLOATS; f += NT) {
        const int col = f / WK;
        const int k = f - col * WK;
        sW[k * COB + col] = __ldg(wg + f);
    }
    __syncthreads();

    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int sub = warp % NSUB;
    const int rest = warp / NSUB;
    const int q = rest & 3;
    const int rh = rest >> 2;
    const int r = (lane & 7) + 8 * rh;
    const int s = lane >> 3;
    const int owb = 32 * q + 8 * s;

    float acc[8][8];
#pragma unroll
    for (int c = 0; c < 8; ++c)
#pragma unroll
        for (int p = 0; p < 8; ++p) acc[c][p] = 0.f;

    const float* inBase = sIn + r * P + owb;
    const float* wBase = sW + sub * 8;

#if CFG_KD_UNROLL
#pragma unroll 1
    for (int ci = 0; ci < CI; ++ci) {
#pragma unroll
        for (int kd = 0; kd < KD; ++kd) {
            const int sl = ci * KD + kd;
            slab_accum(acc, inBase + sl * ROWS * P, wBase + sl * (KH * KW * COB));
        }
    }
#else
#pragma unroll 1
    for (int sl = 0; sl < NSLAB; ++sl) {
        slab_accum(acc, inBase + sl * ROWS * P, wBase + sl * (KH * KW * COB));
    }
#endif

#if CFG_STAGED
    __syncthreads();   // everyone done reading sIn/sW
    float* sO = smem;  // [COB][TH*OW]
#pragma unroll
    for (int c = 0; c < 8; ++c) {
        float* d = sO + (sub * 8 + c) * TILE_OUT + r * OW + owb;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (owb + 2 * j < OW)
                *reinterpret_cast<float2*>(d + 2 * j) = make_float2(acc[c][2 * j], acc[c][2 * j + 1]);
        }
    }
    __syncthreads();
    const int nrows = min(TH, OH - oh0);
    const int cnt4 = (nrows * OW) >> 2;
    const int total = COB * cnt4;
    for (int f = tid; f < total; f += NT) {
        const int col = f / cnt4;
        const int i = f - col * cnt4;
        const float4 v = *reinterpret_cast<const float4*>(sO + col * TILE_OUT + 4 * i);
        const int co = cog * COB + col;
        float* dst = out + ((size_t)((n * CO + co) * OD + od) * OH + oh0) * OW + 4 * i;
        __stcs(reinterpret_cast<float4*>(dst), v);
    }
#else
    const int oh = oh0 + r;
    if (oh < OH) {
#pragma unroll
        for (int c = 0; c < 8; ++c) {
            const int co = cog * COB + sub * 8 + c;
            float* dst = out + ((size_t)((n * CO + co) * OD + od) * OH + oh) * OW + owb;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                if (owb + 2 * j < OW)
                    __stcs(reinterpret_cast<float2*>(dst + 2 * j),
                           make_float2(acc[c][2 * j], acc[c][2 * j + 1]));
            }
        }
    }
#endif
}

}  // namespace

torch::Tensor forward(torch::Tensor x, torch::Tensor conv3d_weight) {
    auto xc = x.contiguous();
    auto wc = conv3d_weight.contiguous();
    auto out = at::empty({NB, CO, OD, OH, OW}, xc.options());
    cudaFuncSetAttribute(conv3d_direct_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    conv3d_direct_kernel<<<NBLOCKS, NT, SMEM_BYTES, stream>>>(
        xc.data_ptr<float>(), wc.data_ptr<float>(), out.data_ptr<float>());
    return out;
}
