// The same copy in 16-byte double2 loads when PAIRS: needs n even, a 16-byte aligned grid and x0 even, so
// a pair (x, x + 1) never straddles the grid's edge.
template <bool CHECKED, bool PAIRS>
__device__ __forceinline__ void stage_tile(const double* __restrict__ in, double* tile, int n, int x0, int y0) {
    if (!PAIRS) {
        load_tile<CHECKED>(in, tile, n, x0, y0);
        return;
    }
    constexpr int ROW_PAIRS = SMEM_W / 2;
    for (int idx = threadIdx.y * BX + threadIdx.x; idx < ROW_PAIRS * SMEM_H; idx += BX * BY) {
        const int r = idx / ROW_PAIRS, c = 2 * (idx - r * ROW_PAIRS);
        const int y = y0 + r, x = x0 + c;
        double2 v = make_double2(0.0, 0.0);
        if (!CHECKED || (y >= 0 && y < n && x >= 0 && x < n))
            v = *reinterpret_cast<const double2*>(in + (size_t)y * n + x);
        *reinterpret_cast<double2*>(tile + r * SMEM_W + c) = v;
    }
}
