// Two steps per launch (temporal blocking; fuse_steps). A block owns OW = BX * W - 2HX output columns from
// xb and H rows from y0. Thread t computes step 1 (the intermediate grid) on the W columns
// xb - HX + t * W .., BX * W columns in all, for rows y0 - R .. y0 + H + R - 1, streaming the H + 4R input
// rows of the segment from xb - 2HX through the ring exactly as stream_strip does (stage_row with the
// origin moved out by one halo: the same SEG). Intermediate row m (strip-relative, from y0 - R) is complete
// after input row m + 2R; it goes, zero outside the grid (zero padding at every step), into one of two
// shared rows mid[m & 1], and the next iteration streams it through step 2 on the threads with outputs
// (t * W < OW), which completes output row m - 1 - 2R. Both rotating windows use the slot (u + 1) % K for
// the row they complete, as (j - 2R - 1) % K == j % K. One __syncthreads per input row: mid[m & 1] is
// written after the barrier of iteration j, read after that of j + 1 and written again after that of j + 2.
// The copies are always 16 bytes (n even, grid aligned), so the launcher runs it only then.
constexpr int OW = BX * W - 2 * HX;  // output columns per block
constexpr int ROWS2 = H + 4 * R;  // input rows a block streams
constexpr size_t SMEM2_BYTES = sizeof(double) * (S * SEG + 2 * BX * W);  // the ring and two intermediate rows
static_assert(W % 2 == 0 && OW > 0, "double2 rows and a positive output tile");

template <bool INTERIOR>
__device__ __forceinline__ void stream_two_steps(const double* __restrict__ in, double* __restrict__ out, double* ring,
                                                 int n, int xb, int y0) {
    double* mid = ring + S * SEG;
    const int x0 = xb + threadIdx.x * W;  // this thread's first output column
    const bool outputs = threadIdx.x * W < OW;
    double acc1[K][W], acc2[K][W];
#pragma unroll
    for (int s = 0; s < K; ++s)
#pragma unroll
        for (int w = 0; w < W; ++w) acc1[s][w] = acc2[s][w] = 0.0;
#pragma unroll
    for (int j = 0; j < S - 1; ++j) stage_row<true, INTERIOR, ROWS2>(in, ring, n, xb - HX, y0 - R, j);
    for (int jb = 0; jb < ROWS2 + 1; jb += K) {
#pragma unroll
        for (int u = 0; u < K; ++u) {  // row j's window slots are (u - a) mod K: constants
            const int j = jb + u;
            if ((ROWS2 + 1) % K == 0 || j < ROWS2 + 1) {
                asm volatile("cp.async.wait_group %0;\n" ::"n"(S - 2));  // row j has landed
                __syncthreads();  // for every thread, and every thread is done with row j - 1 and with mid[m & 1]
                stage_row<true, INTERIOR, ROWS2>(in, ring, n, xb - HX, y0 - R, j + S - 1);
                const int m = j - 2 * R, s = (u + 1) % K;  // the intermediate row that row j completes, its slot
                const bool step2 = m >= 1 && outputs;
                double v2[NV];  // intermediate row m - 1, read before mid[m & 1] is written
                if (step2) read_row(mid + ((m - 1) & 1) * (BX * W) + threadIdx.x * W, v2);
                if (j < ROWS2) {  // step 1
                    double v[NV];
                    read_row(ring + (j % S) * SEG + threadIdx.x * W, v);
#pragma unroll
                    for (int a = 0; a < K; ++a) {
                        const int sa = (u - a + K) % K;
#pragma unroll
                        for (int b = 0; b < K; ++b)
#pragma unroll
                            for (int w = 0; w < W; ++w) acc1[sa][w] = fma(c_w[a * K + b], v[w + b - R + HX], acc1[sa][w]);
                    }
                    if (m >= 0) {
                        const int y = y0 - R + m;
                        const bool row_inside = y >= 0 && y < n;
                        double* dst = mid + (m & 1) * (BX * W) + threadIdx.x * W;
#pragma unroll
                        for (int w = 0; w < W; w += 2) {
                            const int c = xb - HX + threadIdx.x * W + w;  // c even, n even: c + 1 < n when c < n
                            double2 t = make_double2(acc1[s][w], acc1[s][w + 1]);
                            if (!row_inside || (!INTERIOR && (c < 0 || c >= n))) t = make_double2(0.0, 0.0);
                            *reinterpret_cast<double2*>(dst + w) = t;
                        }
                    }
#pragma unroll
                    for (int w = 0; w < W; ++w) acc1[s][w] = 0.0;
                }
                if (step2) {
#pragma unroll
                    for (int a = 0; a < K; ++a) {
                        const int sa = (u - a + K) % K;
#pragma unroll
                        for (int b = 0; b < K; ++b)
#pragma unroll
                            for (int w = 0; w < W; ++w) acc2[sa][w] = fma(c_w[a * K + b], v2[w + b - R + HX], acc2[sa][w]);
                    }
                    const int o = y0 + j - 4 * R - 1;  // the output row that intermediate row m - 1 completes
                    if (o >= y0 && o < n && (INTERIOR || x0 < n)) {
                        double* dst = out + (size_t)o * n + x0;
                        if (INTERIOR || x0 + W <= n) {
#pragma unroll
                            for (int w = 0; w < W; w += 2) *reinterpret_cast<double2*>(dst + w) = make_double2(acc2[s][w], acc2[s][w + 1]);
                        } else {
#pragma unroll
                            for (int w = 0; w < W; ++w)
                                if (x0 + w < n) dst[w] = acc2[s][w];
                        }
                    }
#pragma unroll
                    for (int w = 0; w < W; ++w) acc2[s][w] = 0.0;
                }
            }
        }
    }
}

__global__ void __launch_bounds__(BX) stencil_two_steps(const double* __restrict__ in, double* __restrict__ out, int n) {
    extern __shared__ __align__(16) double ring[];
    const int xb = blockIdx.x * OW, y0 = blockIdx.y * H;
${interior}
}

void launch_two_steps(const double* in, double* out, int n, cudaStream_t stream) {
    const dim3 block(BX), grid((n + OW - 1) / OW, (n + H - 1) / H);
    TORCH_CHECK(grid.y <= 65535, "n=", n, " needs more than 65535 blocks in y");
    C10_CUDA_CHECK(cudaFuncSetAttribute(stencil_two_steps, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM2_BYTES));
    stencil_two_steps<<<grid, block, SMEM2_BYTES, stream>>>(in, out, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
