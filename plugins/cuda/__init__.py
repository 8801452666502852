"""The `cuda` architecture: candidates built as PyTorch CUDA extensions, then checked and timed on an NVIDIA
GPU by a judge that never loads them (profiling is the `ncu` plugin's)."""

from hiera_core import hookimpl
from hiera_plugins.cuda.architecture import CudaArchitecture
from hiera_plugins.cuda.evaluators import CudaCompile, CudaRun, CudaStatic
from hiera_plugins.cuda.knowledge import KNOWLEDGE


@hookimpl
def hiera_register_architectures():
    return [CudaArchitecture]


@hookimpl
def hiera_register_evaluators():
    return [CudaStatic, CudaCompile, CudaRun]


@hookimpl
def hiera_direction_knowledge(direction, kind):
    # CudaArchitecture has no `kind` of its own: its kind is its name, which another GPU's architecture may share
    return KNOWLEDGE.get(direction) if kind == CudaArchitecture.name else None
