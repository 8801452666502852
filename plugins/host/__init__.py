"""The `host` architecture: C candidates built by the machine's compiler, checked and timed on its CPU.

It makes the whole HIERA loop run, and be tested, where there is no GPU.
"""

from hiera_core import hookimpl
from hiera_plugins.host.architecture import HostArchitecture
from hiera_plugins.host.evaluators import HostCompile, HostRun
from hiera_plugins.host.knowledge import KNOWLEDGE


@hookimpl
def hiera_register_architectures():
    return [HostArchitecture]


@hookimpl
def hiera_register_evaluators():
    return [HostCompile, HostRun]


@hookimpl
def hiera_direction_knowledge(direction, kind):
    # HostArchitecture has no `kind` of its own: its kind is its name, which another CPU's architecture may share
    return KNOWLEDGE.get(direction) if kind == HostArchitecture.name else None
