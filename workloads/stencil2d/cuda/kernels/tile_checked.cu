    ${loader}<true${pairs_arg}>(in, tile, n, x0, y0);
    __syncthreads();
    thread_outputs<true>(tile, out, n, bx0, by0);
