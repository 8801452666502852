#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <stdint.h>

__device__ __forceinline__ float sig_f(float x) {
    return 1.0f / (1.0f + expf(-x));
}

__device__ __forceinline__ float4 sig4(float4 v) {
    float4 r;
    r.x = sig_f(v.x); r.y = sig_f(v.y); r.z = sig_f(v.z); r.w = sig_f(v.w);
    return r;
}

__global__ void __launch_bounds__(256) sigmoid_scalar(const float* __restrict__ in, float* __restrict__ out,
                                                      int64_t start, int64_t n) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = start + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = sig_f(in[i]);
    }
}

#define THREADS 256
#define UNROLL 2

__global__ void __launch_bounds__(THREADS) sigmoid_vec4_u2(const float4* __restrict__ in, float4* __restrict__ out, int64_t n4) {
    const int64_t chunk = (int64_t)THREADS * UNROLL;
    for (int64_t blk = blockIdx.x; blk * chunk < n4; blk += gridDim.x) {
        const int64_t base = blk * chunk + threadIdx.x;
        float4 v[UNROLL];
        if (base + (UNROLL - 1) * THREADS < n4) {
#pragma unroll
            for (int k = 0; k < UNROLL; ++k) v[k] = __ldg(in + base + k * THREADS);
#pragma unroll
            for (int k = 0; k < UNROLL; ++k) __stcs(out + base + k * THREADS, sig4(v[k]));
        } else {
#pragma unroll
            for (int k = 0; k < UNROLL; ++k) {
                int64_t i = base + k * THREADS;
                if (i < n4) __stcs(out + i, sig4(__ldg(in + i)));
            }
        }
    }
}

static void launch_vec(const float4* in, float4* out, int64_t n4, cudaStream_t stream) {
    int64_t blocks = (n4 + (int64_t)THREADS * UNROLL - 1) / ((int64_t)THREADS * UNROLL);
    if (blocks > 2147483647LL) blocks = 2147483647LL;
    sigmoid_vec4_u2<<<(unsigned)blocks, THREADS, 0, stream>>>(in, out, n4);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

static void launch_scalar(const float* in, float* out, int64_t start, int64_t n, cudaStream_t stream) {
    if (n <= start) return;
    int64_t cnt = n - start;
    int64_t blocks = (cnt + 255) / 256;
    if (blocks > 65536) blocks = 65536;
    sigmoid_scalar<<<(unsigned)blocks, 256, 0, stream>>>(in, out, start, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

torch::Tensor forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    auto xc = x.contiguous();
    auto y = torch::empty(xc.sizes(), xc.options());
    const int64_t n = xc.numel();
    if (n == 0) return y;
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    const float* in = xc.data_ptr<float>();
    float* out = y.data_ptr<float>();
    const bool aligned = (reinterpret_cast<uintptr_t>(in) % 16 == 0) && (reinterpret_cast<uintptr_t>(out) % 16 == 0);
    if (!aligned) {
        launch_scalar(in, out, 0, n, stream);
        return y;
    }
    const int64_t n4 = n / 4;
    if (n4 > 0) {
        launch_vec(reinterpret_cast<const float4*>(in), reinterpret_cast<float4*>(out), n4, stream);
    }
    launch_scalar(in, out, n4 * 4, n, stream);
    return y;
}
