"""Registers the stencil2d workload with hiera."""

from hiera_core import hookimpl
from hiera_workloads.stencil2d.workload import Stencil2D


@hookimpl
def hiera_register_workloads():
    return [Stencil2D]


@hookimpl
def hiera_run_defaults() -> dict[str, str]:
    return {"workload": Stencil2D.name}  # the case study: `hiera` alone runs it
