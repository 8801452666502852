"""The KernelBench workload: tasks from the user's KernelBench checkout, their generated cuda contracts and
ATen-translated seeds."""

from hiera_core import hookimpl
from hiera_workloads.kernelbench.workload import KernelBench


@hookimpl
def hiera_register_workloads():
    return [KernelBench]
