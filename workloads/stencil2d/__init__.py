"""The stencil2d workload: a 2D FP64 box stencil with zero padding, applied repeatedly."""
