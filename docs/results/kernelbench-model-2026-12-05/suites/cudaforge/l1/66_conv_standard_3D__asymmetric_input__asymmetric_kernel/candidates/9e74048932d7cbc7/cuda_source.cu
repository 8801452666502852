// Direct FP32 3D convolution: register-tiled (8 oc x 8 ow per thread), weights broadcast from smem.
// Block: fixed (n, od), all 64 output channels (8 warps, one 8-oc group each), 2 output rows,
// full width. Each input tile is read once for all 64 channels. Weights packed to [tap][oc] once
// per call by a tiny kernel and copied into smem with float4 loads.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

namespace {

constexpr int NB = 8, CI = 3, D = 16, H = 128, W = 128;
constexpr int CO = 64, KD = 3, KH = 5, KW = 7;
constexpr int OD = 14, OH = 124, OW = 122;
constexpr int TAPS = CI * KD * KH * KW;     // 315
constexpr int KHW = KH * KW;                // 35
constexpr int CIK = CI * KD;                // 9
constexpr int THREADS = 256;

constexpr int OCBLK = 64;                   // output channels per block
constexpr int OCT = 8;                      // output channels per thread
constexpr int OWT = 8;                      // output columns per thread
constexpr int ROWS = 2;                     // output rows per block
constexpr int IROWS = ROWS + KH - 1;        // 6
constexpr int XS = 136;                     // padded smem row stride (floats)
constexpr int NXROWS = CIK * IROWS;         // 54
constexpr int SW_FLOATS = TAPS * OCBLK;     // 20160
constexpr int SX_FLOATS = NXROWS * XS;      // 7344
constexpr int SMEM_BYTES = (SW_FLOATS + SX_FLOATS) * (int)sizeof(float);  // 110016
constexpr int OH_TILES = OH / ROWS;         // 62
constexpr int OSTRIDE_OC = OD * OH * OW;

// wt[t * CO + oc] = w[oc * TAPS + t]
__global__ void pack_weights_kernel(const float* __restrict__ w, float* __restrict__ wt)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < TAPS * CO) {
        const int t = i / CO;
        const int o = i - t * CO;
        wt[i] = w[o * TAPS + t];
    }
}

__global__ void __launch_bounds__(THREADS, 2)
direct_conv3d_kernel(const float* __restrict__ x, const float* __restrict__ wt, float* __restrict__ out)
{
    extern __shared__ __align__(16) float smem[];
    float* sW = smem;                 // [TAPS][OCBLK]
    float* sX = smem + SW_FLOATS;     // [CIK][IROWS][XS]

    const int tid = threadIdx.x;
    const int oh0 = blockIdx.x * ROWS;
    const int n = blockIdx.y / OD;
    const int od = blockIdx.y - n * OD;

    {
        const float4* wt4 = reinterpret_cast<const float4*>(wt);
        float4* sW4 = reinterpret_cast<float4*>(sW);
        for (int i = tid; i < SW_FLOATS / 4; i += THREADS) sW4[i] = __ldg(wt4 + i);
    }

    constexpr int F4R = XS / 4;
    for (int i = tid; i < NXROWS * F4R; i += THREADS) {
        const int row = i / F4R;
        const int c4 = i - row * F4R;
        const int cik = row / IROWS;
        const int r = row - cik * IROWS;
        const int ci = cik / KD;
        const int kd = cik - ci * KD;
        const int ih = oh0 + r;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (c4 < W / 4 && ih < H) {
            const float* src = x + ((((size_t)n * CI + ci) * D + (od + kd)) * H + ih) * W;
            v = __ldg(reinterpret_cast<const float4*>(src) + c4);
        }
        reinterpret_cast<float4*>(sX + row * XS)[c4] = v;
    }
    __syncthreads();

    const int g = tid & 15;               // column group: ow0 = 8 * g
    const int row = (tid >> 4) & (ROWS - 1);
    const int ocg = tid >> 5;             // 0..7, warp-uniform

    float acc[OCT][OWT];
    #pragma unroll
    for (int o = 0; o < OCT; ++o) {
        #pragma unroll
        for (int j = 0; j < OWT; ++j) acc[o][j] = 0.f;
    }

    const float* xbase = sX + row * XS + OWT * g;
    const float* wbase = sW + ocg * OCT;

    #pragma unroll 1
    for (int cik = 0; cik < CIK; ++cik) {
        const float* xr = xbase + cik * (IROWS * XS);
        const float4* wp = reinterpret_cast<const float4*>(wbase + cik * (KHW * OCBLK));
        #pragma unroll
        for (int kh = 0; kh < KH; ++kh) {
            const float4* xp = reinterpret_cast<const float4*>(xr + kh * XS);
            const float4 a = xp[0];
            const float4 b = xp[1];
            const float4 c = xp[2];
            const float4 d = xp[3];
            const float xin[16] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w,
                                   c.x, c.y, c.z, c.w, d.x, d.y, d.z, d.w};
            #pragma unroll
            for (int kw = 0; kw < KW; ++kw) {
                const float4 w0 = wp[(kh * KW + kw) * (OCBLK / 4) + 0];
                const float4 w1 = wp[(kh * KW + kw) * (OCBLK / 4) + 1];
                #pragma unroll
                for (int j = 0; j < OWT; ++j) {
                    const float xv = xin[j + kw];
                    acc[0][j] = fmaf(w0.x, xv, acc[0][j]);
                    acc[1][j] = fmaf(w0.y, xv, acc[1][j]);
                    acc[2][j] = fmaf(w0.z, xv, acc[2][j]);
                    acc[3][j] = fmaf(w0.w, xv, acc[3][j]);
                    acc[4][j] = fmaf(w1.x, xv, acc[4][j]);
                    acc[5][j] = fmaf(w1.y, xv, acc[5][j]);
                    acc[6][j] = fmaf(w1.z, xv, acc[6][j]);
                    acc[7][j] = fmaf(w1.w, xv, acc[7][j]);
                }
            }
        }
    }

    const int oh = oh0 + row;
    const int ow0 = OWT * g;
    if (oh < OH) {
        float* obase = out + ((((size_t)n * CO + ocg * OCT) * OD + od) * OH + oh) * OW + ow0;
        #pragma unroll
        for (int o = 0; o < OCT; ++o) {
            float* p = obase + (size_t)o * OSTRIDE_OC;
            #pragma unroll
            for (int m = 0; m < OWT / 2; ++m) {
                if (ow0 + 2 * m < OW)
                    *reinterpret_cast<float2*>(p + 2 * m) = make_float2(acc[o][2 * m], acc[o][2 * m + 1]);
            }
        }
    }
}

}  // namespace

torch::Tensor forward(torch::Tensor x, torch::Tensor conv3d_weight) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat, "x must be a float32 CUDA tensor");
    TORCH_CHECK(conv3d_weight.is_cuda() && conv3d_weight.scalar_type() == at::kFloat,
                "conv3d_weight must be a float32 CUDA tensor");
    TORCH_CHECK(x.dim() == 5 && x.size(0) == NB && x.size(1) == CI && x.size(2) == D &&
                x.size(3) == H && x.size(4) == W, "unexpected x shape");
    TORCH_CHECK(conv3d_weight.dim() == 5 && conv3d_weight.size(0) == CO && conv3d_weight.size(1) == CI &&
                conv3d_weight.size(2) == KD && conv3d_weight.size(3) == KH && conv3d_weight.size(4) == KW,
                "unexpected weight shape");
    const at::cuda::CUDAGuard guard(x.device());
    auto xc = x.contiguous();
    auto wc = conv3d_weight.contiguous();
    auto wt = at::empty({TAPS * CO}, wc.options());
    auto out = at::empty({NB, CO, OD, OH, OW}, xc.options());
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();

    pack_weights_kernel<<<(TAPS * CO + 255) / 256, 256, 0, stream>>>(wc.data_ptr<float>(), wt.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();

    C10_CUDA_CHECK(cudaFuncSetAttribute(direct_conv3d_kernel,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES));
    dim3 grid(OH_TILES, NB * OD, 1);
    direct_conv3d_kernel<<<grid, THREADS, SMEM_BYTES, stream>>>(
        xc.data_ptr<float>(), wt.data_ptr<float>(), out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
