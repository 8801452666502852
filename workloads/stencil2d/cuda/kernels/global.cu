constexpr int BX = ${bx}, BY = ${by};  // threads per block: BX columns x BY rows
constexpr int T = ${rows};  // outputs per thread, consecutive rows of one column
constexpr int TILE_H = BY * T;  // output rows per block

__constant__ double c_w[K * K];  // the weights: every thread of a warp reads the same one


// The T outputs (y0 .. y0 + T - 1, x) of one thread, every tap read from global memory (through L1).
// CHECKED: test every output and tap against the grid; otherwise all of them lie inside it.
template <bool CHECKED>
__device__ __forceinline__ void thread_outputs(const double* __restrict__ in, double* __restrict__ out, int n,
                                               int x, int y0) {
#pragma unroll
    for (int t = 0; t < T; ++t) {
        const int y = y0 + t;
        if (CHECKED && (x >= n || y >= n)) continue;
        double acc = 0.0;
#pragma unroll
        for (int a = 0; a < K; ++a) {
            const int yy = y + a - R;
            if (CHECKED && (yy < 0 || yy >= n)) continue;
            const double* row = in + (size_t)yy * n;
#pragma unroll
            for (int b = 0; b < K; ++b) {
                const int xx = x + b - R;
                if (!CHECKED || (xx >= 0 && xx < n)) acc = fma(c_w[a * K + b], row[xx], acc);
            }
        }
        out[(size_t)y * n + x] = acc;
    }
}


// One application: BX x TILE_H outputs per block, T per thread.
__global__ void __launch_bounds__(BX * BY) stencil_step(const double* __restrict__ in, double* __restrict__ out, int n) {
    const int x = blockIdx.x * BX + threadIdx.x;
    const int y0 = (blockIdx.y * BY + threadIdx.y) * T;
${body}
}
