"""A workload with two host tasks (the stencil at radius 1 and 2): what `--all-tasks` and suite reports need."""

import attrs

from hiera_core import hookimpl
from hiera_workloads.stencil2d.workload import Stencil2D


class MultiStencil(Stencil2D):
    name = "multistencil"

    def tasks(self):
        return [task for radius in (1, 2) for task in Stencil2D(attrs.evolve(self.config, radius=radius)).tasks()]


@hookimpl
def hiera_register_workloads():
    return [MultiStencil]
