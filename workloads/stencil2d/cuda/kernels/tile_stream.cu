// The T outputs of one thread by register streaming down its column: each of the T + 2R input rows
// of the window is read from the shared tile once, K values into registers, and feeds every output
// row within R of it; the T accumulators stay in registers.
template <bool CHECKED>
__device__ __forceinline__ void thread_outputs(const double* tile, double* __restrict__ out, int n, int bx0, int by0) {
    const int x = bx0 + threadIdx.x, ty0 = threadIdx.y * T;
    const double* s = tile + ty0 * SMEM_W + threadIdx.x + (HALO_X - R);
    double acc[T];
#pragma unroll
    for (int t = 0; t < T; ++t) acc[t] = 0.0;
#pragma unroll
    for (int row = 0; row < T + 2 * R; ++row) {
        double v[K];
#pragma unroll
        for (int b = 0; b < K; ++b) v[b] = s[row * SMEM_W + b];
#pragma unroll
        for (int t = 0; t < T; ++t) {
            const int a = row - t;  // the weight row that input row `row` meets in output t; known at compile time
            if (a >= 0 && a < K) {
#pragma unroll
                for (int b = 0; b < K; ++b) acc[t] = fma(c_w[a * K + b], v[b], acc[t]);
            }
        }
    }
#pragma unroll
    for (int t = 0; t < T; ++t) {
        const int y = by0 + ty0 + t;
        if (!CHECKED || (x < n && y < n)) out[(size_t)y * n + x] = acc[t];
    }
}
