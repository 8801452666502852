    stencil_step<<<grid, block, 0, stream>>>(in, out, n);
