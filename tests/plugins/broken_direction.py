"""A direction V whose score has a bug (it reads a signal no profile has): a run planned by the expert stops."""

from hiera_core import hookimpl
from hiera_directions.control import ControlFlow


class Broken(ControlFlow):
    name = "V"

    def score(self, profile):
        return profile.signals["vector_fraction"], "V: reads a signal the profile lacks"


@hookimpl
def hiera_register_directions():
    return [Broken]
