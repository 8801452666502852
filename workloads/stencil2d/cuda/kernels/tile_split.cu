    // Blocks whose whole input tile lies inside the grid load and store without tests (a block-uniform branch).
    const bool interior = x0 >= 0 && y0 >= 0 && x0 + SMEM_W <= n && y0 + SMEM_H <= n;
    if (interior)
        ${loader}<false${pairs_arg}>(in, tile, n, x0, y0);
    else
        ${loader}<true${pairs_arg}>(in, tile, n, x0, y0);
    __syncthreads();
    if (interior)
        thread_outputs<false>(tile, out, n, bx0, by0);
    else
        thread_outputs<true>(tile, out, n, bx0, by0);
