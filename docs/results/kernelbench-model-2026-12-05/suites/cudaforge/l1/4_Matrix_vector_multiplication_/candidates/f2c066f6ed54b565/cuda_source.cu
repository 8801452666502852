// bulk-copy-smem-pipeline: A (and B) streamed by Hopper 1-D bulk async copies (cp.async.bulk, TMA engine)
// into a 3-stage shared-memory ring, completion tracked by mbarrier transaction counts.
// Grid = 256 CTAs x 256 threads (one wave at 2 CTAs/SM), each CTA owns 8 consecutive rows over the
// full K. Per stage: 8 row slices of 1024 floats (4 KiB each) + the matching 4 KiB of B = 36 KiB;
// up to 3 stages (108 KiB) in flight per CTA, independent of registers, so DRAM demand never drains.
// Thread 0 refills a stage right after the CTA has consumed it. FP32 fmaf into float4 accumulators,
// deterministic fixed-order reduction, no atomics, no workspace.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

constexpr int kM = 2048;
constexpr int kK = 1048576;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRows = 8;                          // rows per CTA
constexpr int kChunkF = kThreads * 4;             // floats per row per stage (one float4 per thread)
constexpr int kChunkF4 = kChunkF / 4;
constexpr int kStages = 3;
constexpr int kIters = kK / kChunkF;              // 1024
constexpr uint32_t kSliceBytes = kChunkF * 4;     // 4096
constexpr int kStageFloats = (kRows + 1) * kChunkF;   // 8 A slices + 1 B slice
constexpr uint32_t kStageBytes = (uint32_t)kStageFloats * 4u;   // 36864
constexpr int kSmemBytes = kStages * kStageFloats * 4;          // 110592
constexpr int kGrid = kM / kRows;                 // 256
constexpr int kMinBlocks = 2;

static_assert(kK % kChunkF == 0, "K must divide by the stage slice");
static_assert(kM % kRows == 0, "M must divide by rows per CTA");
static_assert(kIters >= kStages, "pipeline deeper than the loop");
static_assert(kSliceBytes % 16 == 0, "bulk copy size must be a multiple of 16");
static_assert(kRows <= kThreads, "one finishing thread per row");

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void fence_mbar_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 :: "r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ uint32_t mbar_try_wait(uint32_t bar, uint32_t parity) {
    uint32_t ok;
    asm volatile(
        "{\n\t"
        ".reg .pred p;\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t"
        "}\n"
        : "=r"(ok)
        : "r"(bar), "r"(parity)
        : "memory");
    return ok;
}

__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    while (!mbar_try_wait(bar, parity)) {
    }
}

__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
        :: "r"(dst), "l"(src), "r"(bytes), "r"(bar)
        : "memory");
}

// Issue the 9 bulk copies (8 A row slices + 1 B slice) of chunk `chunk` into stage buffer `dst`.
__device__ __forceinline__ void issue_stage(uint32_t dst, uint32_t bar, const float* a_rows,
                                            const float* B, int chunk) {
    mbar_arrive_expect_tx(bar, kStageBytes);
    const size_t col = (size_t)chunk * kChunkF;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
        bulk_g2s(dst + (uint32_t)r * kSliceBytes, a_rows + (size_t)r * kK + col, kSliceBytes, bar);
    bulk_g2s(dst + (uint32_t)kRows * kSliceBytes, B + col, kSliceBytes, bar);
}

__global__ void __launch_bounds__(kThreads, kMinBlocks)
gemv_bulk_kernel(const float* __restrict__ A, const float* __restrict__ B,
                 float* __restrict__ out) {
    extern __shared__ __align__(128) float smem[];
    __shared__ __align__(8) uint64_t full_bar[kStages];
    __shared__ float red[kRows][kWarps];

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int cta = blockIdx.x;

    const float* a_rows = A + (size_t)cta * kRows * kK;
    const uint32_t smem_base = smem_u32(smem);
    const uint32_t bar_base = smem_u32(&full_bar[0]);

    if (tid == 0) {
#pragma unroll
        for (int s = 0; s < kStages; ++s) mbar_init(bar_base + 8u * s, 1u);
        fence_mbar_init();
    }
    __syncthreads();

    if (tid == 0) {
#pragma unroll
        for (int s = 0; s < kStages; ++s)
            issue_stage(smem_base + (uint32_t)s * kStageBytes, bar_base + 8u * s, a_rows, B, s);
    }

    float4 acc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = make_float4(0.f, 0.f, 0.f, 0.f);

    int stage = 0;
    uint32_t phase = 0;
#pragma unroll 1
    for (int it = 0; it < kIters; ++it) {
        const uint32_t bar = bar_base + 8u * stage;
        mbar_wait(bar, phase);

        const float4* st = reinterpret_cast<const float4*>(smem + stage * kStageFloats) + tid;
        const float4 bv = st[kRows * kChunkF4];
        float4 av[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) av[r] = st[r * kChunkF4];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            acc[r].x = fmaf(av[r].x, bv.x, acc[r].x);
            acc[r].y = fmaf(av[r].y, bv.y, acc[r].y);
            acc[r].z = fmaf(av[r].z, bv.z, acc[r].z);
            acc[r].w = fmaf(av[r].w, bv.w, acc[r].w);
        }

        // Everyone has read this stage: refill it with the chunk kStages ahead.
        __syncthreads();
        if (tid == 0 && it + kStages < kIters)
            issue_stage(smem_base + (uint32_t)stage * kStageBytes, bar, a_rows, B, it + kStages);

        if (++stage == kStages) {
            stage = 0;
            phase ^= 1u;
        }
    }

    float sum[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
        sum[r] = (acc[r].x + acc[r].y) + (acc[r].z + acc[r].w);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], o);
    }
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) red[r][warp] = sum[r];
    }
    __syncthreads();
    if (tid < kRows) {
        float s = 0.f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) s += red[tid][w];
        out[(size_t)cta * kRows + tid] = s;
    }
}

}  // namespace

torch::Tensor forward(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "A and B must be CUDA tensors");
    TORCH_CHECK(A.device() == B.device(), "A and B must be on the same device");
    TORCH_CHECK(A.scalar_type() == at::kFloat && B.scalar_type() == at::kFloat,
                "A and B must be float32");
    TORCH_CHECK(A.dim() == 2 && A.size(0) == kM && A.size(1) == kK, "A must be [2048, 1048576]");
    TORCH_CHECK(B.dim() == 2 && B.size(0) == kK && B.size(1) == 1, "B must be [1048576, 1]");
    TORCH_CHECK(A.is_contiguous() && B.is_contiguous(), "A and B must be contiguous");

    const at::cuda::OptionalCUDAGuard device_guard(A.device());
    const float* a_ptr = A.data_ptr<float>();
    const float* b_ptr = B.data_ptr<float>();
    TORCH_CHECK((reinterpret_cast<uintptr_t>(a_ptr) & 15) == 0 &&
                    (reinterpret_cast<uintptr_t>(b_ptr) & 15) == 0,
                "A and B must be 16-byte aligned");

    torch::Tensor out = torch::empty({kM, 1}, A.options());

    // 108 KiB of dynamic shared memory per CTA (2 CTAs/SM): opt in above 48 KiB, prefer max carveout.
    static int configured_device = -1;
    const int dev = A.get_device();
    if (configured_device != dev) {
        C10_CUDA_CHECK(cudaFuncSetAttribute(gemv_bulk_kernel,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
        C10_CUDA_CHECK(cudaFuncSetAttribute(gemv_bulk_kernel,
                                            cudaFuncAttributePreferredSharedMemoryCarveout,
                                            (int)cudaSharedmemCarveoutMaxShared));
        configured_device = dev;
    }

    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    gemv_bulk_kernel<<<kGrid, kThreads, kSmemBytes, stream>>>(a_ptr, b_ptr, out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
