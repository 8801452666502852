"""The `host` architecture: C candidates built by the machine's compiler, checked and timed on its CPU.

It makes the whole HIERA loop run, and be tested, where there is no GPU.
"""

from hiera_core import hookimpl

from hiera_plugins.host.architecture import HostArchitecture
from hiera_plugins.host.evaluators import HostCompile, HostRun


@hookimpl
def hiera_register_architectures():
    return [HostArchitecture]


@hookimpl
def hiera_register_evaluators():
    return [HostCompile, HostRun]
