"""The stencil's GPU (`cuda`) side: the frozen PyTorch-extension contract, the expert's CUDA sources
(kernels/*.cu, rendered by `CudaStencilTemplate`), the baselines and the judge's harness.

The workload calls this package's `grid`, `contract`, `seed`, `templates`, `baselines`, `inputs` and `harness`; the
modules behind them are private (`_contract`, `_template`, `_baselines`, `_harness`) so that none of
them is shadowed by the function of the same name.
"""

from hiera_workloads.stencil2d.cuda._baselines import BASELINES, baselines
from hiera_workloads.stencil2d.cuda._contract import (
    BINDING_FILENAME,
    CHECK_SIZES,
    DECLARATION,
    ENTRY,
    REMEASURE_SIZES,
    SOURCE_FILENAME,
    TOLERANCE,
    contract,
    grid,
)
from hiera_workloads.stencil2d.cuda._harness import CudaStencilHarness, harness, inputs
from hiera_workloads.stencil2d.cuda._template import CudaStencilTemplate, seed, templates

__all__ = [
    "BASELINES",
    "BINDING_FILENAME",
    "CHECK_SIZES",
    "DECLARATION",
    "ENTRY",
    "REMEASURE_SIZES",
    "SOURCE_FILENAME",
    "TOLERANCE",
    "CudaStencilHarness",
    "CudaStencilTemplate",
    "baselines",
    "contract",
    "grid",
    "harness",
    "inputs",
    "seed",
    "templates",
]
