    if (pairs) {
        C10_CUDA_CHECK(cudaFuncSetAttribute(stencil_step<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM_BYTES));
        stencil_step<true><<<grid, block, SMEM_BYTES, stream>>>(in, out, n);
    } else {
        C10_CUDA_CHECK(cudaFuncSetAttribute(stencil_step<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM_BYTES));
        stencil_step<false><<<grid, block, SMEM_BYTES, stream>>>(in, out, n);
    }
