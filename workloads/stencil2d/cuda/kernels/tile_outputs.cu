// The T outputs of one thread, each the K x K taps read from the shared tile.
template <bool CHECKED>
__device__ __forceinline__ void thread_outputs(const double* tile, double* __restrict__ out, int n, int bx0, int by0) {
    const int x = bx0 + threadIdx.x, ty0 = threadIdx.y * T;
#pragma unroll
    for (int t = 0; t < T; ++t) {
        const double* s = tile + (ty0 + t) * SMEM_W + threadIdx.x + (HALO_X - R);
        double acc = 0.0;
#pragma unroll
        for (int a = 0; a < K; ++a)
#pragma unroll
            for (int b = 0; b < K; ++b) acc = fma(c_w[a * K + b], s[a * SMEM_W + b], acc);
        const int y = by0 + ty0 + t;
        if (!CHECKED || (x < n && y < n)) out[(size_t)y * n + x] = acc;
    }
}
