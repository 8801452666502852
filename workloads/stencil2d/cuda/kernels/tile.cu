constexpr int BX = ${bx}, BY = ${by};  // threads per block: BX columns x BY rows
constexpr int T = ${rows};  // outputs per thread, consecutive rows of one column
constexpr int TILE_H = BY * T;  // output rows per block
constexpr int HALO_X = ${halo};${why}
constexpr int SMEM_W = BX + 2 * HALO_X, SMEM_H = TILE_H + 2 * R;  // the block's input tile
constexpr size_t SMEM_BYTES = sizeof(double) * SMEM_W * SMEM_H;

__constant__ double c_w[K * K];  // the weights: every thread of a warp reads the same one


// Copy the input tile (rows y0 .., columns x0 ..) into shared memory, zero outside the grid.
template <bool CHECKED>
__device__ __forceinline__ void load_tile(const double* __restrict__ in, double* tile, int n, int x0, int y0) {
    for (int idx = threadIdx.y * BX + threadIdx.x; idx < SMEM_W * SMEM_H; idx += BX * BY) {
        const int r = idx / SMEM_W, c = idx - r * SMEM_W;
        const int y = y0 + r, x = x0 + c;
        tile[idx] = (!CHECKED || (y >= 0 && y < n && x >= 0 && x < n)) ? in[(size_t)y * n + x] : 0.0;
    }
}
