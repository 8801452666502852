// One application: each block stages its input tile in shared memory, then computes BX x TILE_H outputs.
${template}__global__ void __launch_bounds__(BX * BY) stencil_step(const double* __restrict__ in, double* __restrict__ out, int n) {
    extern __shared__ __align__(16) double tile[];
    const int bx0 = blockIdx.x * BX, by0 = blockIdx.y * TILE_H;
    const int x0 = bx0 - HALO_X, y0 = by0 - R;
${body}
}
