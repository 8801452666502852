    C10_CUDA_CHECK(cudaFuncSetAttribute(stencil_step, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM_BYTES));
    stencil_step<<<grid, block, SMEM_BYTES, stream>>>(in, out, n);
