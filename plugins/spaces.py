"""The paper's three nested implementation spaces and their static source checks.

A space admits everything of a smaller rank. Each check is a list of (pattern, what it is) that the
space forbids on an architecture; the runtime and binary checks of the `cuda` architecture add to
these in its own evaluator.
"""

from __future__ import annotations

import re
from typing import ClassVar

from hiera_core import hookimpl

# Forbidden below a rank, per architecture: (regex, what it is).
LIBRARY_CALLS = {
    "host": [
        (r"#\s*pragma\s+omp\b", "an OpenMP pragma"),
        (r"#\s*include\s*<omp\.h>", "the OpenMP runtime"),
        (r"\bomp_\w+\s*\(", "an OpenMP runtime call"),
        (r"\bcblas_\w+|\bdgemm_?\s*\(", "a BLAS call"),
        (r"#\s*include\s*<pthread\.h>", "the pthreads library"),
    ],
    "cuda": [
        (r"\bcublas\w*\s*\(|#\s*include\s*[<\"]cublas", "cuBLAS"),
        (r"\bcudnn\w*\s*\(|#\s*include\s*[<\"]cudnn", "cuDNN"),
        (r"\bcufft\w*\s*\(|#\s*include\s*[<\"]cufft", "cuFFT"),
        (r"#\s*include\s*[<\"]cutlass/", "CUTLASS"),
        (r"#\s*include\s*[<\"]cusparse|\bcusparse\w*\s*\(", "cuSPARSE"),
    ],
}
FRAMEWORK_CALLS = {
    "host": [
        (r"#\s*include\s*[<\"]Python\.h", "the Python C API"),
        (r"#\s*include\s*[<\"](torch|ATen)/", "PyTorch"),
    ],
    "cuda": [
        (r"\b(at|torch)::(?!empty\b|empty_like\b|zeros\b|zeros_like\b|Tensor\b|ScalarType\b|kFloat|kDouble|kHalf|kBFloat16|kInt|kLong|cuda::)(\w+)\s*\(",
         "a PyTorch/ATen operator"),
        (r"\.(matmul|mm|bmm|conv2d|addmm|einsum)\s*\(", "a PyTorch/ATen operator"),
        (r"\bat::_ops::\w+::(call|redispatch)\s*\(", "a PyTorch/ATen operator"),  # an operator's own entry point
    ],
}


def _violation(source: str, rules: list[tuple[str, str]]) -> str | None:
    code = re.sub(r"//[^\n]*|/\*.*?\*/", "", source, flags=re.S)
    for pattern, what in rules:
        match = re.search(pattern, code)
        if match:
            line = code[: match.start()].count("\n") + 1
            return f"uses {what} (`{match.group(0).strip()}`, line {line}), which this space does not admit"
    return None


class PureCuda:
    name: ClassVar[str] = "pure_cuda"
    rank: ClassVar[int] = 0
    config_class: ClassVar[type | None] = None
    description: ClassVar[str] = (
        "Custom kernels only: the candidate implements every computation itself. No vendor libraries"
        " (cuBLAS, cuDNN, cuFFT, CUTLASS; on the host: OpenMP, BLAS, pthreads) and no PyTorch operators"
        " beyond allocating tensors."
    )

    def __init__(self, config: None) -> None:
        pass

    def check_source(self, source: str, arch: str) -> str | None:
        return _violation(source, LIBRARY_CALLS.get(arch, []) + FRAMEWORK_CALLS.get(arch, []))


class CudaLibraries:
    name: ClassVar[str] = "cuda_libraries"
    rank: ClassVar[int] = 1
    config_class: ClassVar[type | None] = None
    description: ClassVar[str] = (
        "Custom kernels plus vendor libraries: cuBLAS, cuDNN, cuFFT, CUTLASS (on the host: OpenMP and BLAS)."
        " No PyTorch operators beyond allocating tensors."
    )

    def __init__(self, config: None) -> None:
        pass

    def check_source(self, source: str, arch: str) -> str | None:
        return _violation(source, FRAMEWORK_CALLS.get(arch, []))


class LibrariesPytorch:
    name: ClassVar[str] = "libraries_pytorch"
    rank: ClassVar[int] = 2
    config_class: ClassVar[type | None] = None
    description: ClassVar[str] = (
        "Anything of the other spaces plus PyTorch/ATen operators called from the source."
    )

    def __init__(self, config: None) -> None:
        pass

    def check_source(self, source: str, arch: str) -> str | None:
        return None


@hookimpl
def hiera_register_spaces():
    return [PureCuda, CudaLibraries, LibrariesPytorch]
