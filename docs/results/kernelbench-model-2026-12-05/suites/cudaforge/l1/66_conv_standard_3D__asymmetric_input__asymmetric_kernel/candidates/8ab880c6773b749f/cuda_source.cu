// Direct FP32 3D convolution: register-tiled (16 oc x 4 ow per thread), weights broadcast from smem.
// Block: fixed (n, od), 32 output channels (two warp groups of 16), 4 output rows, full width.
// 124 = 31 * 4, so no output rows are wasted.
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

constexpr int OCBLK = 32;                   // output channels per block
constexpr int OCT = 16;                     // output channels per thread
constexpr int ROWS = 4;                     // output rows per block
constexpr int IROWS = ROWS + KH - 1;        // 8
constexpr int XS = 136;                     // padded smem row stride (floats)
constexpr int NXROWS = CIK * IROWS;         // 72
constexpr int SW_FLOATS = TAPS * OCBLK;     // 10080
constexpr int SX_FLOATS = NXROWS * XS;      // 9792
constexpr int SMEM_BYTES = (SW_FLOATS + SX_FLOATS) * (int)sizeof(float);  // 79488
constexpr int OH_TILES = OH / ROWS;         // 31
constexpr int OSTRIDE_OC = OD * OH * OW;

__global__ void __launch_bounds__(THREADS, 2)
direct_conv3d_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ out)
{
    extern __shared__ __align__(16) float smem[];
    float* sW = smem;                 // [TAPS][OCBLK]
    float* sX = smem + SW_FLOATS;     // [CIK][IROWS][XS]

    const int tid = threadIdx.x;
    const int oh0 = blockIdx.x * ROWS;
    const int n = blockIdx.y / OD;
    const int od = blockIdx.y - n * OD;
    const int oc0 = blockIdx.z * OCBLK;

    for (int i = tid; i < SW_FLOATS; i += THREADS) {
        const int t = i / OCBLK;
        const int o = i - t * OCBLK;
        sW[i] = __ldg(w + (oc0 + o) * TAPS + t);
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

    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int wrow = warp & (ROWS - 1);
    const int ocg = warp >> 2;        // 0..1, warp-uniform

    float acc[OCT][4];
    #pragma unroll
    for (int o = 0; o < OCT; ++o) {
        #pragma unroll
        for (int j = 0; j < 4; ++j) acc[o][j] = 0.f;
    }

    const float* xbase = sX + wrow * XS + 4 * lane;
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
            const float xin[12] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w, c.x, c.y, c.z, c.w};
            #pragma unroll
            for (int kw = 0; kw < KW; ++kw) {
                #pragma unroll
                for (int q = 0; q < OCT / 4; ++q) {
                    const float4 wv = wp[(kh * KW + kw) * (OCBLK / 4) + q];
                    #pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        const float xv = xin[j + kw];
                        acc[4 * q + 0][j] = fmaf(wv.x, xv, acc[4 * q + 0][j]);
                        acc[4 * q + 1][j] = fmaf(wv.y, xv, acc[4 * q + 1][j]);
                        acc[4 * q + 2][j] = fmaf(wv.z, xv, acc[4 * q + 2][j]);
                        acc[4 * q + 3][j] = fmaf(wv.w, xv, acc[4 * q + 3][j]);
                    }
                }
            }
        }
    }

    const int oh = oh0 + wrow;
    const int ow0 = 4 * lane;
    if (oh < OH && ow0 < OW) {
        float* obase = out + ((((size_t)n * CO + oc0 + ocg * OCT) * OD + od) * OH + oh) * OW + ow0;
        const bool second = (ow0 + 2) < OW;
        #pragma unroll
        for (int o = 0; o < OCT; ++o) {
            float* p = obase + (size_t)o * OSTRIDE_OC;
            *reinterpret_cast<float2*>(p) = make_float2(acc[o][0], acc[o][1]);
            if (second) *reinterpret_cast<float2*>(p + 2) = make_float2(acc[o][2], acc[o][3]);
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
    auto out = at::empty({NB, CO, OD, OH, OW}, xc.options());
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    C10_CUDA_CHECK(cudaFuncSetAttribute(direct_conv3d_kernel,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES));
    dim3 grid(OH_TILES, NB * OD, CO / OCBLK);
    direct_conv3d_kernel<<<grid, THREADS, SMEM_BYTES, stream>>>(
        xc.data_ptr<float>(), wc.data_ptr<float>(), out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
