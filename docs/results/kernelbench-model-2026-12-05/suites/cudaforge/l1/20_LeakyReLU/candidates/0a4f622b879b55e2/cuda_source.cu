// Persistent grid-stride streaming LeakyReLU (negative_slope = 0.01), FP32.
// Variant: 512 threads/block, 4 blocks/SM, UNROLL 4, loads via __ldcs, stores via __stcs.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>
#include <climits>

#define LR_THREADS 512
#define LR_BLOCKS_PER_SM 4
#define LR_UNROLL 4
#define LR_MIN_BLOCKS 4

// Bit-exact with torch's leaky_relu: NaN -> NaN (v > 0 false, NaN * 0.01 = NaN), -0.0 -> -0.0.
__device__ __forceinline__ float lrelu_f(float v) { return v > 0.f ? v : v * 0.01f; }

__device__ __forceinline__ float4 lrelu_f4(float4 v) {
    float4 r;
    r.x = lrelu_f(v.x);
    r.y = lrelu_f(v.y);
    r.z = lrelu_f(v.z);
    r.w = lrelu_f(v.w);
    return r;
}

// x is read exactly once: streaming load.
__device__ __forceinline__ float4 ld_stream(const float4* p) { return __ldcs(p); }

// Scalar grid-stride kernel over [start, n): used for the n % 4 tail and for misaligned pointers.
__global__ void __launch_bounds__(256) lrelu_scalar_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                           int64_t start, int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * (int64_t)blockDim.x;
    for (int64_t i = start + (int64_t)blockIdx.x * (int64_t)blockDim.x + (int64_t)threadIdx.x; i < n; i += stride) {
        y[i] = lrelu_f(x[i]);
    }
}

// Persistent kernel: grid = num_SMs * LR_BLOCKS_PER_SM. Tiles of LR_THREADS * LR_UNROLL float4 are walked
// round-robin (tile = blockIdx.x; tile += gridDim.x), so concurrently running blocks touch neighbouring
// addresses. Inside a tile, thread t handles tile*TILE + k*LR_THREADS + t: every warp access is a fully
// coalesced 512 B request. All loads of an iteration are issued before any store.
// IdxT is int for tensors whose float4 count (plus one grid stride) fits in int32, int64_t otherwise;
// pointer offsets are always formed in 64 bits.
template <typename IdxT>
__global__ void __launch_bounds__(LR_THREADS, LR_MIN_BLOCKS)
lrelu_persistent_kernel(const float4* __restrict__ x, float4* __restrict__ y, IdxT n4) {
    constexpr int TILE = LR_THREADS * LR_UNROLL;
    const IdxT num_tiles = n4 / (IdxT)TILE;
    const int t = (int)threadIdx.x;

    for (IdxT tile = (IdxT)blockIdx.x; tile < num_tiles; tile += (IdxT)gridDim.x) {
        const size_t base = (size_t)tile * (size_t)TILE + (size_t)t;
        const float4* __restrict__ xp = x + base;
        float4* __restrict__ yp = y + base;
        float4 v[LR_UNROLL];
#pragma unroll
        for (int k = 0; k < LR_UNROLL; ++k) v[k] = ld_stream(xp + k * LR_THREADS);
#pragma unroll
        for (int k = 0; k < LR_UNROLL; ++k) v[k] = lrelu_f4(v[k]);
#pragma unroll
        for (int k = 0; k < LR_UNROLL; ++k) __stcs(yp + k * LR_THREADS, v[k]);
    }

    // Remainder of n4 that does not fill a whole tile (empty for the task's shape).
    const IdxT tail_start = num_tiles * (IdxT)TILE;
    const IdxT stride = (IdxT)gridDim.x * (IdxT)LR_THREADS;
    for (IdxT i = tail_start + (IdxT)blockIdx.x * (IdxT)LR_THREADS + (IdxT)t; i < n4; i += stride) {
        __stcs(y + (size_t)i, lrelu_f4(ld_stream(x + (size_t)i)));
    }
}

static void launch_persistent(const float4* x4, float4* y4, int64_t n4, cudaStream_t stream) {
    const int64_t sms = (int64_t)at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
    const int64_t tile = (int64_t)LR_THREADS * LR_UNROLL;
    const int64_t num_tiles = n4 / tile;
    int64_t grid = sms * (int64_t)LR_BLOCKS_PER_SM;
    if (num_tiles < grid) grid = num_tiles;
    if (grid < 1) grid = 1;
    if (n4 + grid * tile < (int64_t)INT_MAX) {
        lrelu_persistent_kernel<int><<<(unsigned int)grid, LR_THREADS, 0, stream>>>(x4, y4, (int)n4);
    } else {
        lrelu_persistent_kernel<int64_t><<<(unsigned int)grid, LR_THREADS, 0, stream>>>(x4, y4, n4);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

torch::Tensor forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == at::kFloat, "x must be float32");
    auto xc = x.contiguous();
    auto out = at::empty_like(xc, at::MemoryFormat::Contiguous);
    const int64_t n = xc.numel();
    if (n == 0) return out;

    const float* xp = xc.data_ptr<float>();
    float* yp = out.data_ptr<float>();
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();

    const bool aligned = ((reinterpret_cast<uintptr_t>(xp) & 15) == 0) && ((reinterpret_cast<uintptr_t>(yp) & 15) == 0);
    if (aligned) {
        const int64_t n4 = n / 4;
        if (n4 > 0) {
            launch_persistent(reinterpret_cast<const float4*>(xp), reinterpret_cast<float4*>(yp), n4, stream);
        }
        const int64_t tail_start = n4 * 4;
        if (tail_start < n) {
            lrelu_scalar_kernel<<<1, 32, 0, stream>>>(xp, yp, tail_start, n);
            C10_CUDA_KERNEL_LAUNCH_CHECK();
        }
    } else {
        const int64_t sms = (int64_t)at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
        int64_t blocks = (n + 255) / 256;
        const int64_t cap = sms * 32;
        if (blocks > cap) blocks = cap;
        lrelu_scalar_kernel<<<(unsigned int)blocks, 256, 0, stream>>>(xp, yp, (int64_t)0, n);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return out;
}
