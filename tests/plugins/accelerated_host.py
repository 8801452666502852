"""The host architecture with an accelerator, `FAKE` (a Ray resource the tests' cluster declares): the `ray`
executor's path for a GPU (builds on a CPU worker, the device stages on a worker holding one), on a CPU; through the
`local` executor, a round's candidates evaluated at once and a workload's baselines judged beside the search."""

from hiera_core import hookimpl
from hiera_plugins.host.architecture import HostArchitecture


class AcceleratedHost(HostArchitecture):
    name = "host-accelerated"
    kind = "host"
    accelerator = "FAKE"


@hookimpl
def hiera_register_architectures():
    return [AcceleratedHost]
