// Lower-triangular product: persistent 128x128x16 FP32 SGEMM over lower output tiles,
// with per-tile k ranges derived on the device from a zero-tile scan of A and B.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <stdint.h>

#define TILE 128
#define BK 16
#define NT 256
#define ASTRIDE (TILE + 4)
#define A_LD (BK / 8)
#define B_LD (BK / 8)
#define A_ROWS_PER_PASS (1024 / BK)

// Kernel 1: one block per strictly-upper 128x128 tile of A and of B.
__global__ void __launch_bounds__(NT)
range_scan_kernel(const float* __restrict__ A, const float* __restrict__ B,
                  int* __restrict__ W, int N, int T)
{
    const int P = T * (T - 1) / 2;
    const int b = blockIdx.x;
    const bool isB = (b >= P);
    int p = isB ? (b - P) : b;
    int r = 0;
    int cnt = T - 1;
    while (p >= cnt) { p -= cnt; ++r; --cnt; }
    const int c = r + 1 + p;
    const float* base = (isB ? B : A) + (size_t)r * TILE * (size_t)N + (size_t)c * TILE;
    const int tid = threadIdx.x;
    int nz = 0;
#pragma unroll
    for (int i = 0; i < (TILE * TILE / 4) / NT; ++i) {
        const int idx = i * NT + tid;
        const int row = idx >> 5;
        const int c4 = (idx & 31) << 2;
        const float4 v = __ldg(reinterpret_cast<const float4*>(base + (size_t)row * N + c4));
        nz |= (int)((v.x != 0.f) | (v.y != 0.f) | (v.z != 0.f) | (v.w != 0.f));
    }
    const int any = __syncthreads_or(nz);
    if (any != 0 && tid == 0) {
        if (isB) atomicMax(&W[T + c], c - r);
        else     atomicMax(&W[r], c - r);
    }
}

__device__ __forceinline__ void load_slab(const float* __restrict__ Ag, const float* __restrict__ Bg,
                                          int k0, size_t Ns, float4 (&ra)[A_LD], float4 (&rb)[B_LD])
{
#pragma unroll
    for (int l = 0; l < A_LD; ++l)
        ra[l] = __ldg(reinterpret_cast<const float4*>(Ag + (size_t)l * A_ROWS_PER_PASS * Ns + k0));
#pragma unroll
    for (int l = 0; l < B_LD; ++l)
        rb[l] = __ldg(reinterpret_cast<const float4*>(Bg + (size_t)(k0 + 8 * l) * Ns));
}

__device__ __forceinline__ void stash_slab(float* As_buf, float* Bs_buf,
                                           const float4 (&ra)[A_LD], const float4 (&rb)[B_LD],
                                           int a_row, int a_k, int b_k, int b_col)
{
#pragma unroll
    for (int l = 0; l < A_LD; ++l) {
        float* a = As_buf + a_k * ASTRIDE + a_row + l * A_ROWS_PER_PASS;
        a[0] = ra[l].x;
        a[ASTRIDE] = ra[l].y;
        a[2 * ASTRIDE] = ra[l].z;
        a[3 * ASTRIDE] = ra[l].w;
    }
#pragma unroll
    for (int l = 0; l < B_LD; ++l)
        *reinterpret_cast<float4*>(Bs_buf + (b_k + 8 * l) * TILE + b_col) = rb[l];
}

__device__ __forceinline__ void compute_slab(const float* As_buf, const float* Bs_buf,
                                             int tx, int ty, float (&acc)[8][8])
{
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
        const float4 a0 = *reinterpret_cast<const float4*>(As_buf + kk * ASTRIDE + ty * 4);
        const float4 a1 = *reinterpret_cast<const float4*>(As_buf + kk * ASTRIDE + ty * 4 + 64);
        const float4 b0 = *reinterpret_cast<const float4*>(Bs_buf + kk * TILE + tx * 4);
        const float4 b1 = *reinterpret_cast<const float4*>(Bs_buf + kk * TILE + tx * 4 + 64);
        const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
        const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j)
                acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
}

// Kernel 2: persistent SGEMM; items 0..L-1 are lower tiles (longest k range first),
// items L..T*T-1 are strictly-upper tiles that are zero-filled.
__global__ void __launch_bounds__(NT, 2)
tri_sgemm_kernel(const float* __restrict__ A, const float* __restrict__ B,
                 float* __restrict__ C, int* __restrict__ W, int N, int T)
{
    __shared__ __align__(16) float As[2][BK * ASTRIDE];
    __shared__ __align__(16) float Bs[2][BK * TILE];
    __shared__ int s_item;

    const int tid = threadIdx.x;
    const int tx = tid & 15;
    const int ty = tid >> 4;
    const int L = T * (T + 1) / 2;
    const int total = T * T;
    const size_t Ns = (size_t)N;

    const int a_row = tid / (BK / 4);
    const int a_k = (tid % (BK / 4)) * 4;
    const int b_k = tid >> 5;
    const int b_col = (tid & 31) * 4;

    for (;;) {
        if (tid == 0) s_item = atomicAdd(&W[2 * T], 1);
        __syncthreads();
        const int item = s_item;
        if (item >= total) break;

        if (item < L) {
            int idx = item;
            int d = T - 1;
            int cnt = 1;
            while (idx >= cnt) { idx -= cnt; --d; ++cnt; }
            const int jb = idx;
            const int ib = jb + d;
            const int kLo = (jb - W[T + jb]) * TILE;
            const int kHi = (ib + 1 + W[ib]) * TILE;
            const int m0 = ib * TILE;
            const int n0 = jb * TILE;
            const float* Ag = A + (size_t)(m0 + a_row) * Ns + a_k;
            const float* Bg = B + (size_t)b_k * Ns + n0 + b_col;

            float acc[8][8];
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

            float4 ra[A_LD], rb[B_LD];
            load_slab(Ag, Bg, kLo, Ns, ra, rb);
            stash_slab(As[0], Bs[0], ra, rb, a_row, a_k, b_k, b_col);
            __syncthreads();

            int cur = 0;
            for (int k0 = kLo; k0 < kHi; k0 += BK) {
                const bool hasNext = (k0 + BK) < kHi;
                if (hasNext) load_slab(Ag, Bg, k0 + BK, Ns, ra, rb);
                compute_slab(As[cur], Bs[cur], tx, ty, acc);
                if (hasNext) stash_slab(As[cur ^ 1], Bs[cur ^ 1], ra, rb, a_row, a_k, b_k, b_col);
                __syncthreads();
                cur ^= 1;
            }

            float* Cb = C + (size_t)m0 * Ns + n0;
            if (ib != jb) {
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const int rl = (i < 4) ? (ty * 4 + i) : (64 + ty * 4 + (i - 4));
                    float* crow = Cb + (size_t)rl * Ns;
                    *reinterpret_cast<float4*>(crow + tx * 4) =
                        make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
                    *reinterpret_cast<float4*>(crow + 64 + tx * 4) =
                        make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]);
                }
            } else {
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const int rl = (i < 4) ? (ty * 4 + i) : (64 + ty * 4 + (i - 4));
                    float v[8];
#pragma unroll
                    for (int j = 0; j < 8; ++j) {
                        const int cl = (j < 4) ? (tx * 4 + j) : (64 + tx * 4 + (j - 4));
                        v[j] = (rl >= cl) ? acc[i][j] : 0.f;
                    }
                    float* crow = Cb + (size_t)rl * Ns;
                    *reinterpret_cast<float4*>(crow + tx * 4) = make_float4(v[0], v[1], v[2], v[3]);
                    *reinterpret_cast<float4*>(crow + 64 + tx * 4) = make_float4(v[4], v[5], v[6], v[7]);
                }
            }
        } else {
            int p = item - L;
            int r = 0;
            int cnt = T - 1;
            while (p >= cnt) { p -= cnt; ++r; --cnt; }
            const int ib = r;
            const int jb = r + 1 + p;
            float* Cb = C + (size_t)ib * TILE * Ns + (size_t)jb * TILE;
            const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int i = 0; i < (TILE * TILE / 4) / NT; ++i) {
                const int e = i * NT + tid;
                *reinterpret_cast<float4*>(Cb + (size_t)(e >> 5) * Ns + ((e & 31) << 2)) = z;
            }
        }
        __syncthreads();
    }
}

// Fallback for shapes outside the fast path: simple tiled FP32 product, lower part kept.
__global__ void generic_lower_mm_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                        float* __restrict__ C, int M, int K, int N)
{
    __shared__ float As[16][17];
    __shared__ float Bs[16][17];
    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int row = blockIdx.y * 16 + ty;
    const int col = blockIdx.x * 16 + tx;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += 16) {
        const int ak = k0 + tx;
        As[ty][tx] = (row < M && ak < K) ? A[(size_t)row * K + ak] : 0.f;
        const int bk = k0 + ty;
        Bs[ty][tx] = (bk < K && col < N) ? B[(size_t)bk * N + col] : 0.f;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < 16; ++kk) acc = fmaf(As[ty][kk], Bs[kk][tx], acc);
        __syncthreads();
    }
    if (row < M && col < N) C[(size_t)row * N + col] = (row >= col) ? acc : 0.f;
}

torch::Tensor forward(torch::Tensor A, torch::Tensor B)
{
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "forward: A and B must be CUDA tensors");
    TORCH_CHECK(A.scalar_type() == at::kFloat && B.scalar_type() == at::kFloat,
                "forward: A and B must be float32");
    TORCH_CHECK(A.dim() == 2 && B.dim() == 2, "forward: A and B must be 2-D");
    TORCH_CHECK(A.size(1) == B.size(0), "forward: inner dimensions must agree");
    TORCH_CHECK(A.device() == B.device(), "forward: A and B must be on the same device");

    const c10::cuda::CUDAGuard guard(A.device());
    const at::Tensor Ac = A.contiguous();
    const at::Tensor Bc = B.contiguous();
    const int64_t M = Ac.size(0);
    const int64_t K = Ac.size(1);
    const int64_t Nn = Bc.size(1);
    at::Tensor C = at::empty({M, Nn}, Ac.options());
    if (M == 0 || Nn == 0) return C;
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();

    const float* Ap = Ac.data_ptr<float>();
    const float* Bp = Bc.data_ptr<float>();
    float* Cp = C.data_ptr<float>();
    const bool aligned =
        ((reinterpret_cast<uintptr_t>(Ap) | reinterpret_cast<uintptr_t>(Bp)) & (uintptr_t)15) == 0;
    const bool fast = aligned && (M == K) && (K == Nn) && (M % TILE == 0) && (M <= 32768);

    if (fast) {
        const int N = (int)M;
        const int T = N / TILE;
        at::Tensor W = at::zeros({2 * T + 1}, Ac.options().dtype(at::kInt));
        int* Wp = W.data_ptr<int>();
        const int P = T * (T - 1) / 2;
        if (P > 0) {
            range_scan_kernel<<<2 * P, NT, 0, stream>>>(Ap, Bp, Wp, N, T);
            C10_CUDA_KERNEL_LAUNCH_CHECK();
        }
        const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
        int grid = 2 * sms;
        if (grid > T * T) grid = T * T;
        if (grid < 1) grid = 1;
        tri_sgemm_kernel<<<grid, NT, 0, stream>>>(Ap, Bp, Cp, Wp, N, T);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
        return C;
    }

    TORCH_CHECK(M <= 1048000LL && K <= 2147483647LL && Nn <= 2147483647LL,
                "forward: dimensions too large");
    const dim3 block(16, 16);
    const dim3 grid((unsigned int)((Nn + 15) / 16), (unsigned int)((M + 15) / 16));
    generic_lower_mm_kernel<<<grid, block, 0, stream>>>(Ap, Bp, Cp, (int)M, (int)K, (int)Nn);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return C;
}
