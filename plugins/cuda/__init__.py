"""The `cuda` architecture: candidates built as PyTorch CUDA extensions, checked, timed and profiled on an
NVIDIA GPU, each in its own process."""

from hiera_core import hookimpl

from hiera_plugins.cuda.architecture import CudaArchitecture
from hiera_plugins.cuda.evaluators import CudaCompile, CudaProfile, CudaRun, CudaStatic


@hookimpl
def hiera_register_architectures():
    return [CudaArchitecture]


@hookimpl
def hiera_register_evaluators():
    return [CudaStatic, CudaCompile, CudaRun, CudaProfile]
