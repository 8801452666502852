// Depthwise 3x3 conv, FP32. Method: fully asynchronous bulk-copy (TMA, sm_90) pipeline.
// One block per (plane, strip of 64 output rows; the last strip is clamped to start at row 190); strips of
// one plane are adjacent in the 1-D grid so the two shared halo rows come from L2.
// Input: after the strip's first two rows (loaded directly), the strip's remaining 64 input rows are
// fetched as 16 chunks of 4 contiguous rows (8192 B) by cp.async.bulk into a 4-stage smem ring guarded
// by mbarriers; one thread issues them, so the load path costs almost no LSU instructions and keeps up to
// 32 KB per block in flight. Thread t (of 128) owns output columns 4t..4t+3: per row one float4 smem
// read, halo columns 4t+4, 4t+5 from the neighbour lane by shuffle (lane 31 of warps 0..2 reads them
// from smem). Output: each group of 4 rows (8160 contiguous bytes, 16 B aligned) is staged in a
// double-buffered smem tile and written by one cp.async.bulk store.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <cstdint>

namespace {

constexpr int kN = 64;
constexpr int kC = 128;
constexpr int kH = 256;
constexpr int kW = 512;
constexpr int kOH = 254;
constexpr int kOW = 510;
constexpr int kThreads = 128;
constexpr unsigned kFull = 0xffffffffu;

constexpr int kRows = 64;                       // output rows per block
constexpr int kU = 4;                           // output rows per group = input rows per chunk
constexpr int kChunks = kRows / kU;             // 16
constexpr int kStages = 4;                      // input ring depth
constexpr int kStrips = (kOH + kRows - 1) / kRows;  // 4
constexpr int kChunkFloats = kU * kW;           // 2048
constexpr int kChunkBytes = kChunkFloats * 4;   // 8192
constexpr int kOutFloats = kU * kOW;            // 2040
constexpr int kOutBytes = kOutFloats * 4;       // 8160
constexpr int kInSmemBytes = kStages * kChunkBytes;       // 32768
constexpr int kOutSmemBytes = 2 * kOutBytes;              // 16320
constexpr int kBarOffset = kInSmemBytes + kOutSmemBytes;  // 49088
constexpr int kSmemBytes = kBarOffset + kStages * 8;      // 49120

static_assert(kRows % kU == 0 && kU % 2 == 0, "groups must start at even output rows");
static_assert((kOH - kRows) % 2 == 0, "clamped strip start must be even");
static_assert(kOutBytes % 16 == 0 && kChunkBytes % 16 == 0, "bulk copies need multiples of 16 B");
static_assert(kInSmemBytes % 16 == 0 && kOutBytes % 16 == 0 && kBarOffset % 8 == 0, "smem layout alignment");
static_assert(kSmemBytes <= 48 * 1024, "fits the default dynamic smem limit");

__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void fence_mbar_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// Makes this thread's generic-proxy smem accesses ordered with later async-proxy (bulk copy) accesses.
__device__ __forceinline__ void fence_proxy_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile(
            "{\n\t"
            ".reg .pred p;\n\t"
            "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
            "selp.u32 %0, 1, 0, p;\n\t"
            "}"
            : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (done == 0);
}
__device__ __forceinline__ void bulk_load_g2s(uint32_t sdst, const void* gsrc, uint32_t bytes, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(sdst), "l"(reinterpret_cast<uint64_t>(gsrc)), "r"(bytes), "r"(bar) : "memory");
}
__device__ __forceinline__ void bulk_store_s2g(void* gdst, uint32_t ssrc, uint32_t bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                 :: "l"(reinterpret_cast<uint64_t>(gdst)), "r"(ssrc), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bulk_commit() {
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
__device__ __forceinline__ void bulk_wait_read_all() {
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
__device__ __forceinline__ void bulk_wait_all() {
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// Prologue rows straight from global memory.
__device__ __forceinline__ void load_row_global(const float* __restrict__ src, bool fix, float (&v)[6]) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(src));
    float2 f = make_float2(0.f, 0.f);
    if (fix) f = __ldg(reinterpret_cast<const float2*>(src + 4));
    float hx = __shfl_down_sync(kFull, a.x, 1);
    float hy = __shfl_down_sync(kFull, a.y, 1);
    if (fix) { hx = f.x; hy = f.y; }
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = hx;  v[5] = hy;
}

__device__ __forceinline__ void compute_row(const float (&r0)[6], const float (&r1)[6], const float (&r2)[6],
                                            const float (&w)[9], float (&o)[4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        float s = r0[j] * w[0];
        s = fmaf(r0[j + 1], w[1], s);
        s = fmaf(r0[j + 2], w[2], s);
        s = fmaf(r1[j], w[3], s);
        s = fmaf(r1[j + 1], w[4], s);
        s = fmaf(r1[j + 2], w[5], s);
        s = fmaf(r2[j], w[6], s);
        s = fmaf(r2[j + 1], w[7], s);
        s = fmaf(r2[j + 2], w[8], s);
        o[j] = s;
    }
}

__global__ void __launch_bounds__(kThreads, 4)
dwconv3x3_tma_pipeline_kernel(const float* __restrict__ x, const float* __restrict__ wt, float* __restrict__ out) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    float* sIn = reinterpret_cast<float*>(smem_raw);
    float* sOutBase = reinterpret_cast<float*>(smem_raw + kInSmemBytes);
    const uint32_t sInAddr = smem_u32(smem_raw);
    const uint32_t sOutAddr = smem_u32(smem_raw + kInSmemBytes);
    const uint32_t barAddr = smem_u32(smem_raw + kBarOffset);

    const int strip = blockIdx.x % kStrips;
    const int p = blockIdx.x / kStrips;
    const int c = p % kC;
    const int t = threadIdx.x;
    const bool fix = ((t & 31) == 31) && (t < kThreads - 1);
    const bool hi = (4 * t + 2) < kOW;

    int oy0 = strip * kRows;
    if (oy0 > kOH - kRows) oy0 = kOH - kRows;

    const float* __restrict__ xplane = x + (size_t)p * (size_t)(kH * kW);
    const float* __restrict__ xchunks = xplane + (size_t)(oy0 + 2) * kW;  // chunk k = rows oy0+2+4k .. +3
    float* __restrict__ oplane = out + (size_t)p * (size_t)(kOH * kOW);

    if (t == 0) {
#pragma unroll
        for (int s = 0; s < kStages; ++s) mbar_init(barAddr + 8 * s, 1);
        fence_mbar_init();
        fence_proxy_async_smem();
#pragma unroll
        for (int s = 0; s < kStages; ++s) {
            if (s < kChunks) {
                mbar_arrive_expect_tx(barAddr + 8 * s, kChunkBytes);
                bulk_load_g2s(sInAddr + s * kChunkBytes, xchunks + (size_t)s * kChunkFloats, kChunkBytes,
                              barAddr + 8 * s);
            }
        }
    }

    float w[9];
#pragma unroll
    for (int i = 0; i < 9; ++i) w[i] = __ldg(wt + c * 9 + i);

    float r0[6], r1[6];
    load_row_global(xplane + (size_t)oy0 * kW + 4 * t, fix, r0);
    load_row_global(xplane + (size_t)(oy0 + 1) * kW + 4 * t, fix, r1);

    __syncthreads();  // barrier init visible to all threads before anyone waits

    int buf = 0;
#pragma unroll 1
    for (int k = 0; k < kChunks; ++k) {
        const int s = k % kStages;
        mbar_wait(barAddr + 8 * s, (uint32_t)((k / kStages) & 1));

        const float* src = sIn + s * kChunkFloats + 4 * t;
        float* sOut = sOutBase + buf * kOutFloats;
#pragma unroll
        for (int u = 0; u < kU; ++u) {
            const float4 a = *reinterpret_cast<const float4*>(src + u * kW);
            float hx = __shfl_down_sync(kFull, a.x, 1);
            float hy = __shfl_down_sync(kFull, a.y, 1);
            if (fix) {
                const float2 f = *reinterpret_cast<const float2*>(src + u * kW + 4);
                hx = f.x; hy = f.y;
            }
            const float nx[6] = {a.x, a.y, a.z, a.w, hx, hy};
            float o[4];
            compute_row(r0, r1, nx, w, o);
            float* d = sOut + u * kOW + 4 * t;
            if ((u & 1) == 0) {
                // u*510 is a multiple of 4 for even u: the slot is 16 B aligned.
                if (hi) *reinterpret_cast<float4*>(d) = make_float4(o[0], o[1], o[2], o[3]);
                else    *reinterpret_cast<float2*>(d) = make_float2(o[0], o[1]);
            } else {
                *reinterpret_cast<float2*>(d) = make_float2(o[0], o[1]);
                if (hi) *reinterpret_cast<float2*>(d + 2) = make_float2(o[2], o[3]);
            }
#pragma unroll
            for (int q = 0; q < 6; ++q) { r0[q] = r1[q]; r1[q] = nx[q]; }
        }

        // Writers publish their smem writes to the async proxy. Thread 0 makes sure the bulk store issued
        // one group ago (which reads the other output buffer, written by the next group) is done reading.
        fence_proxy_async_smem();
        if (t == 0) bulk_wait_read_all();
        __syncthreads();  // all reads of input stage s and all writes of sOut[buf] are done
        if (t == 0) {
            bulk_store_s2g(oplane + (size_t)(oy0 + kU * k) * kOW, sOutAddr + buf * kOutBytes, kOutBytes);
            bulk_commit();
            const int kn = k + kStages;
            if (kn < kChunks) {
                mbar_arrive_expect_tx(barAddr + 8 * s, kChunkBytes);
                bulk_load_g2s(sInAddr + s * kChunkBytes, xchunks + (size_t)kn * kChunkFloats, kChunkBytes,
                              barAddr + 8 * s);
            }
        }
        buf ^= 1;
    }
    if (t == 0) bulk_wait_all();
}

}  // namespace

torch::Tensor forward(torch::Tensor x, torch::Tensor conv2d_weight) {
    TORCH_CHECK(x.is_cuda() && conv2d_weight.is_cuda(), "x and conv2d_weight must be CUDA tensors");
    TORCH_CHECK(x.scalar_type() == at::kFloat && conv2d_weight.scalar_type() == at::kFloat,
                "x and conv2d_weight must be float32");
    TORCH_CHECK(x.dim() == 4 && x.size(0) == kN && x.size(1) == kC && x.size(2) == kH && x.size(3) == kW,
                "x must have shape [64, 128, 256, 512]");
    TORCH_CHECK(conv2d_weight.dim() == 4 && conv2d_weight.size(0) == kC && conv2d_weight.size(1) == 1 &&
                conv2d_weight.size(2) == 3 && conv2d_weight.size(3) == 3,
                "conv2d_weight must have shape [128, 1, 3, 3]");
    auto xc = x.contiguous();
    if (reinterpret_cast<uintptr_t>(xc.data_ptr<float>()) % 16 != 0) {
        auto tmp = at::empty({kN, kC, kH, kW}, xc.options());
        tmp.copy_(xc);
        xc = tmp;
    }
    auto wc = conv2d_weight.contiguous();
    auto out = at::empty({kN, kC, kOH, kOW}, xc.options());

    C10_CUDA_CHECK(cudaFuncSetAttribute(dwconv3x3_tma_pipeline_kernel,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    C10_CUDA_CHECK(cudaFuncSetAttribute(dwconv3x3_tma_pipeline_kernel,
                                        cudaFuncAttributePreferredSharedMemoryCarveout,
                                        static_cast<int>(cudaSharedmemCarveoutMaxShared)));
    const dim3 grid(kN * kC * kStrips);
    const dim3 block(kThreads);
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    dwconv3x3_tma_pipeline_kernel<<<grid, block, kSmemBytes, stream>>>(xc.data_ptr<float>(), wc.data_ptr<float>(),
                                                                       out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
