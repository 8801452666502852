// Max Pooling 2D (kernel 4, stride 1, padding 1, dilation 1) for x[32,64,512,512] fp32 -> [32,64,511,511].
// Persistent, balanced flat row partition: the grid is exactly one full wave (occupancy x SM count), and CTA b
// owns output rows [b*TOTAL/grid, (b+1)*TOTAL/grid) of the flat list of kPlanes*kOH output rows, walked as
// per-plane segments. Per-row work unchanged: one float4 per thread per input row, horizontal max through warp
// shuffles, vertical max through a register ring of pairwise row maxima.
// Config: G=4 rows/group, store mode 1 (1 row-staged smem, 2 flat-staged float4),
// __launch_bounds__(128, 5), streaming stores=true.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>

namespace {

constexpr int kN = 32;
constexpr int kC = 64;
constexpr int kH = 512;
constexpr int kW = 512;
constexpr int kOH = 511;
constexpr int kOW = 511;
constexpr int kPlanes = kN * kC;
constexpr int kTotalRows = kPlanes * kOH;   // 1,046,528 output rows
constexpr int kNT = 128;
constexpr unsigned kFull = 0xffffffffu;

constexpr int kG = 4;
constexpr int kMode = 1;
constexpr int kMinB = 5;
constexpr bool kStream = true;

__device__ __forceinline__ float neg_inf() { return -__int_as_float(0x7f800000); }

__device__ __forceinline__ float4 fmax4(const float4 a, const float4 b) {
    return make_float4(fmaxf(a.x, b.x), fmaxf(a.y, b.y), fmaxf(a.z, b.z), fmaxf(a.w, b.w));
}

template <bool S>
__device__ __forceinline__ void st1(float* p, float v) {
    if constexpr (S) { __stcs(p, v); } else { *p = v; }
}

template <bool S>
__device__ __forceinline__ void st4(float* p, float4 v) {
    if constexpr (S) { __stcs(reinterpret_cast<float4*>(p), v); } else { *reinterpret_cast<float4*>(p) = v; }
}

struct RowIn {
    float4 v;   // columns 4t..4t+3
    float l;    // column 4t-1 (only meaningful for lane 0)
    float r4;   // column 4t+4 (only meaningful for lane 31)
    float r5;   // column 4t+5 (only meaningful for lane 31)
};

// Load input row r of the plane. Rows outside [0, kH) are padding (-inf); rows above rlim are not needed by
// this segment and are not read (also -inf). The condition is block-uniform.
__device__ __forceinline__ RowIn load_row(const float* __restrict__ xp, int r, int rlim, int t, int lane) {
    const float ninf = neg_inf();
    RowIn d;
    d.v = make_float4(ninf, ninf, ninf, ninf);
    d.l = ninf;
    d.r4 = ninf;
    d.r5 = ninf;
    if (r >= 0 && r < kH && r <= rlim) {
        const float* rowp = xp + r * kW;
        d.v = __ldg(reinterpret_cast<const float4*>(rowp) + t);
        if (lane == 0 && t > 0) {
            d.l = __ldg(rowp + 4 * t - 1);
        }
        if (lane == 31 && t < kNT - 1) {
            const float2 q = __ldg(reinterpret_cast<const float2*>(rowp + 4 * t + 4));
            d.r4 = q.x;
            d.r5 = q.y;
        }
    }
    return d;
}

// Horizontal 4-wide max for output columns 4t..4t+3 (all 32 lanes must call this).
__device__ __forceinline__ float4 hmax(const RowIn& d, int lane) {
    float l = __shfl_up_sync(kFull, d.v.w, 1);
    float r4 = __shfl_down_sync(kFull, d.v.x, 1);
    float r5 = __shfl_down_sync(kFull, d.v.y, 1);
    if (lane == 0) l = d.l;
    if (lane == 31) { r4 = d.r4; r5 = d.r5; }
    const float c0 = d.v.x, c1 = d.v.y, c2 = d.v.z, c3 = d.v.w;
    const float m12 = fmaxf(c1, c2);
    const float m23 = fmaxf(c2, c3);
    float4 h;
    h.x = fmaxf(fmaxf(l, c0), m12);
    h.y = fmaxf(fmaxf(c0, c1), m23);
    h.z = fmaxf(m12, fmaxf(c3, r4));
    h.w = fmaxf(m23, fmaxf(r4, r5));
    return h;
}

template <int G, int MODE, int MINB, bool STREAM>
__global__ void __launch_bounds__(kNT, MINB)
maxpool2d_k4s1p1_persistent(const float* __restrict__ x, float* __restrict__ out) {
    static_assert(G >= 1, "G must be at least 1");
    static_assert(MODE == 1 || MODE == 2, "store mode must be 1 or 2");
    constexpr int SMEM_FLOATS = 2 * G * 512;
    __shared__ __align__(16) float smem[SMEM_FLOATS];

    const int t = threadIdx.x;
    const int lane = t & 31;
    const int start = (int)(((long long)blockIdx.x * (long long)kTotalRows) / (long long)gridDim.x);
    const int end = (int)(((long long)(blockIdx.x + 1) * (long long)kTotalRows) / (long long)gridDim.x);

    int grp = 0;   // running group counter: shared-memory buffer parity stays alternating across segments
    int cur = start;
    while (cur < end) {
        const int plane = cur / kOH;
        const int oh0 = cur - plane * kOH;
        const int nrows = min(end, (plane + 1) * kOH) - cur;   // >= 1, block-uniform
        const int rlim = oh0 + nrows + 1;                      // last input row this segment needs
        const float* __restrict__ xp = x + (size_t)plane * (size_t)(kH * kW);
        float* __restrict__ op = out + (size_t)plane * (size_t)(kOH * kOW);

        // Ring state: hc = h[r-1], pm3 = max(h[r-3], h[r-2]), pm2 = max(h[r-2], h[r-1]) for the next row r.
        float4 hc, pm3, pm2;
        {
            const RowIn a = load_row(xp, oh0 - 1, rlim, t, lane);
            const RowIn b = load_row(xp, oh0, rlim, t, lane);
            const RowIn c = load_row(xp, oh0 + 1, rlim, t, lane);
            const float4 ha = hmax(a, lane);
            const float4 hb = hmax(b, lane);
            hc = hmax(c, lane);
            pm3 = fmax4(ha, hb);
            pm2 = fmax4(hb, hc);
        }

        RowIn nxt[G];
#pragma unroll
        for (int k = 0; k < G; ++k) nxt[k] = load_row(xp, oh0 + 2 + k, rlim, t, lane);

#pragma unroll 1
        for (int g = 0; g < nrows; g += G, ++grp) {
            RowIn d[G];
#pragma unroll
            for (int k = 0; k < G; ++k) d[k] = nxt[k];
            if (g + G < nrows) {
#pragma unroll
                for (int k = 0; k < G; ++k) nxt[k] = load_row(xp, oh0 + g + G + 2 + k, rlim, t, lane);
            }

            const int row0 = oh0 + g;
            const int nr = min(G, nrows - g);
            float* sb = smem + (grp & 1) * (G * 512);
            size_t gbase = 0;
            int off = 0;
            if constexpr (MODE == 2) {
                gbase = (size_t)plane * (size_t)(kOH * kOW) + (size_t)row0 * (size_t)kOW;
                off = (int)(gbase & 3);
            }

#pragma unroll
            for (int k = 0; k < G; ++k) {
                const float4 hd = hmax(d[k], lane);
                const float4 pm1 = fmax4(hc, hd);
                const float4 o = fmax4(pm3, pm1);   // output row row0 + k
                pm3 = pm2;
                pm2 = pm1;
                hc = hd;
                if constexpr (MODE == 1) {
                    reinterpret_cast<float4*>(sb)[k * kNT + t] = o;
                } else {
                    float* s = sb + off + k * kOW + 4 * t;
                    s[0] = o.x;
                    s[1] = o.y;
                    s[2] = o.z;
                    if (t < kNT - 1) s[3] = o.w;
                }
            }

            __syncthreads();

            if constexpr (MODE == 1) {
                float* obase = op + row0 * kOW;
#pragma unroll
                for (int k = 0; k < G; ++k) {
                    if (k < nr) {
#pragma unroll
                        for (int m = 0; m < 4; ++m) {
                            const int j = t + m * kNT;
                            if (j < kOW) st1<STREAM>(obase + k * kOW + j, sb[k * 512 + j]);
                        }
                    }
                }
            } else {
                const int send = off + nr * kOW;
                const int nq = (send + 3) >> 2;
                float* gb = out + (gbase - (size_t)off);   // 16-byte aligned
#pragma unroll 4
                for (int q = t; q < nq; q += kNT) {
                    const int s0 = q << 2;
                    if (s0 >= off && s0 + 4 <= send) {
                        st4<STREAM>(gb + s0, *reinterpret_cast<const float4*>(sb + s0));
                    } else {
#pragma unroll
                        for (int c = 0; c < 4; ++c) {
                            const int s = s0 + c;
                            if (s >= off && s < send) st1<STREAM>(gb + s, sb[s]);
                        }
                    }
                }
            }
        }
        cur += nrows;
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

    void (*kern)(const float*, float*) = maxpool2d_k4s1p1_persistent<kG, kMode, kMinB, kStream>;
    static int s_grid = 0;
    if (s_grid <= 0) {
        int nb = 0;
        C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, kern, kNT, 0));
        const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
        if (nb < 1) nb = 1;
        int g = nb * sms;
        if (g < 1) g = 1;
        if (g > kTotalRows) g = kTotalRows;
        s_grid = g;
    }

    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    maxpool2d_k4s1p1_persistent<kG, kMode, kMinB, kStream><<<dim3(s_grid, 1, 1), dim3(kNT, 1, 1), 0, stream>>>(
        xc.data_ptr<float>(), out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
