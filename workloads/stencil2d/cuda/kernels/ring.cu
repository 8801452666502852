constexpr int W = ${w};  // outputs per thread: W consecutive columns of one row at a time
constexpr int BX = ${bx};  // threads per block, one row of them: a block owns BX * W columns
constexpr int H = ${h};  // output rows per block: the strip it streams down
constexpr int S = ${s};  // stages of the shared-memory ring: rows loaded ahead of the one computed
constexpr int HX = R + (R & 1);  // halo columns, rounded up to even so that pairs stay 16-byte aligned
constexpr int NV = W + 2 * HX;  // the input values of one row a thread reads
constexpr int SEG = BX * W + 2 * HX;  // doubles of one input row segment (one ring stage)
constexpr size_t SMEM_BYTES = sizeof(double) * S * SEG;

__constant__ double c_w[K * K];  // the weights: every thread of a warp reads the same one


// Register streaming through a shared-memory ring. A block owns BX * W columns and H rows; it walks down
// its H + 2R input rows. Row j + S - 1 is copied into the ring (cp.async, no registers) while row j is
// computed, so S - 1 rows of loads are always in flight. Each thread reads the NV values of row j it needs
// into registers and adds them into the K rows of W outputs the row touches (acc[K][W], a rotating window
// whose slots are compile-time constants because the loop is unrolled K times); an output row is complete
// after its last input row, stored and its slot reused. Every input is read from DRAM once (plus 2R halo
// rows per strip) and every weight comes from constant memory.
__device__ __forceinline__ void copy_async(double* smem, const double* gmem, int bytes) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    if (bytes == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(s), "l"(gmem));
}

// Strip row j (input row y0 - R + j, columns xb - HX ..) into stage j % S, zero outside the grid and from
// row ROWS of the strip on, as one commit group. PAIRS: 16-byte copies (n even, grid aligned); INTERIOR:
// every column of the segment is inside the grid.
template <bool PAIRS, bool INTERIOR, int ROWS = H + 2 * R>
__device__ __forceinline__ void stage_row(const double* __restrict__ in, double* ring, int n, int xb, int y0, int j) {
    constexpr int UNIT = PAIRS ? 2 : 1, UNITS = SEG / UNIT, LOADS = (UNITS + BX - 1) / BX;
    const int i = y0 - R + j;
    double* dst = ring + (j % S) * SEG;
    const bool row_inside = i >= 0 && i < n && j < ROWS;
    const double* row = in + (size_t)(row_inside ? i : 0) * n + xb - HX;
#pragma unroll
    for (int k = 0; k < LOADS; ++k) {
        const int u = threadIdx.x + k * BX;
        if ((k + 1) * BX <= UNITS || u < UNITS) {
            const int c = xb - HX + UNIT * u;
            if (row_inside && (INTERIOR || (c >= 0 && c < n))) {
                copy_async(dst + UNIT * u, row + UNIT * u, 8 * UNIT);
            } else {
#pragma unroll
                for (int e = 0; e < UNIT; ++e) dst[UNIT * u + e] = 0.0;
            }
        }
    }
    asm volatile("cp.async.commit_group;\n" ::);
}

// The NV values of a staged row that one thread needs (its W columns and the halo), 16 bytes at a time.
__device__ __forceinline__ void read_row(const double* src, double (&v)[NV]) {
#pragma unroll
    for (int q = 0; q < NV; q += 2) {
        const double2 t = *reinterpret_cast<const double2*>(src + q);
        v[q] = t.x;
        v[q + 1] = t.y;
    }
}

template <bool PAIRS, bool INTERIOR>
__device__ __forceinline__ void stream_strip(const double* __restrict__ in, double* __restrict__ out, double* ring,
                                             int n, int xb, int y0) {
    const int x0 = xb + threadIdx.x * W;
    double acc[K][W];
#pragma unroll
    for (int s = 0; s < K; ++s)
#pragma unroll
        for (int w = 0; w < W; ++w) acc[s][w] = 0.0;
#pragma unroll
    for (int j = 0; j < S - 1; ++j) stage_row<PAIRS, INTERIOR>(in, ring, n, xb, y0, j);
    for (int jb = 0; jb < H + 2 * R; jb += K) {
#pragma unroll
        for (int u = 0; u < K; ++u) {  // row j's window slots are (u - a) mod K: constants
            const int j = jb + u;
            if ((H + 2 * R) % K == 0 || j < H + 2 * R) {
                asm volatile("cp.async.wait_group %0;\n" ::"n"(S - 2));  // row j has landed
                __syncthreads();  // for every thread, and every thread is done with row j - 1
                stage_row<PAIRS, INTERIOR>(in, ring, n, xb, y0, j + S - 1);  // into row j - 1's stage
                double v[NV];
                read_row(ring + (j % S) * SEG + threadIdx.x * W, v);
#pragma unroll
                for (int a = 0; a < K; ++a) {  // input row j meets weight row a in output row j - a (strip-relative)
                    const int s = (u - a + K) % K;
#pragma unroll
                    for (int b = 0; b < K; ++b)
#pragma unroll
                        for (int w = 0; w < W; ++w) acc[s][w] = fma(c_w[a * K + b], v[w + b - R + HX], acc[s][w]);
                }
                const int o = y0 + j - 2 * R, s = (u + 1) % K;  // the output row that row j completes
                if (o >= y0 && o < n && (INTERIOR || x0 < n)) {
                    double* dst = out + (size_t)o * n + x0;
                    if (PAIRS && (INTERIOR || x0 + W <= n)) {
#pragma unroll
                        for (int w = 0; w < W; w += 2) *reinterpret_cast<double2*>(dst + w) = make_double2(acc[s][w], acc[s][w + 1]);
                    } else {
#pragma unroll
                        for (int w = 0; w < W; ++w)
                            if (INTERIOR || x0 + w < n) dst[w] = acc[s][w];
                    }
                }
#pragma unroll
                for (int w = 0; w < W; ++w) acc[s][w] = 0.0;
            }
        }
    }
}



template <bool PAIRS>
__global__ void __launch_bounds__(BX) stencil_step(const double* __restrict__ in, double* __restrict__ out, int n) {
    extern __shared__ __align__(16) double ring[];
    const int xb = blockIdx.x * BX * W, y0 = blockIdx.y * H;
${interior}
}

void launch_step(const double* in, double* out, int n${pairs_param}, cudaStream_t stream) {
    const dim3 block(BX), grid((n + BX * W - 1) / (BX * W), (n + H - 1) / H);
    TORCH_CHECK(grid.y <= 65535, "n=", n, " needs more than 65535 blocks in y");
    auto kernel = ${kernel};
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM_BYTES));
    kernel<<<grid, block, SMEM_BYTES, stream>>>(in, out, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
