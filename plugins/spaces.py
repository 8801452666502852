"""The paper's three nested implementation spaces: name, rank and what each admits.

A space admits everything of a smaller rank. What that means in a source, a binary or a run is the
architecture's to enforce (`Architecture.check_source`, and its own evaluators), by rank: a third
party's space of any rank is checked the same way. The descriptions here are the paper's, for a GPU; the
prompts quote each architecture's own account of a space (`Architecture.describe_space`), so C on a CPU
reads what the host's checks admit.
"""

from __future__ import annotations

from typing import ClassVar

from hiera_core import hookimpl


class PureCuda:
    name: ClassVar[str] = "pure_cuda"
    rank: ClassVar[int] = 0
    config_class: ClassVar[type | None] = None
    description: ClassVar[str] = (
        "Custom kernels only: the candidate implements every computation itself. No vendor libraries"
        " (cuBLAS, cuDNN, cuFFT, CUTLASS) and no PyTorch operators beyond allocating tensors."
    )

    def __init__(self, config: None) -> None:
        pass


class CudaLibraries:
    name: ClassVar[str] = "cuda_libraries"
    rank: ClassVar[int] = 1
    config_class: ClassVar[type | None] = None
    description: ClassVar[str] = (
        "Custom kernels plus vendor libraries: cuBLAS, cuDNN, cuFFT, CUTLASS. No PyTorch operators beyond allocating tensors."
    )

    def __init__(self, config: None) -> None:
        pass


class LibrariesPytorch:
    name: ClassVar[str] = "libraries_pytorch"
    rank: ClassVar[int] = 2
    config_class: ClassVar[type | None] = None
    description: ClassVar[str] = "Anything of the other spaces plus PyTorch/ATen operators called from the source."

    def __init__(self, config: None) -> None:
        pass


@hookimpl
def hiera_register_spaces():
    return [PureCuda, CudaLibraries, LibrariesPytorch]
