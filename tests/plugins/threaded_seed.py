"""The host stencil whose seed already uses OpenMP threads: a seed that pure_cuda does not admit."""

from hiera_core import hookimpl
from hiera_workloads.stencil2d.workload import Stencil2D


class ThreadedSeed(Stencil2D):
    name = "threaded"

    def seed(self, task, arch):
        [template] = self.templates(task, arch)
        params = {**template.defaults(), "threads": 0}
        return template.render(params), params, template.describe(params)


@hookimpl
def hiera_register_workloads():
    return [ThreadedSeed]
