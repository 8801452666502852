void launch_step(const double* in, double* out, int n${pairs_param}, cudaStream_t stream) {
    const dim3 block(BX, BY), grid((n + BX - 1) / BX, (n + TILE_H - 1) / TILE_H);
    TORCH_CHECK(grid.y <= 65535, "n=", n, " needs more than 65535 blocks in y");
${call}
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
