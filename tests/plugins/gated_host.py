"""The host architecture as a GPU's stands to a planning machine: `host-gated` cannot run where
HIERA_TEST_NO_DEVICE is set (its device is "elsewhere"), so a run resumed there can only plan."""

import os

from hiera_core import hookimpl
from hiera_plugins.host.architecture import HostArchitecture


class GatedHost(HostArchitecture):
    name = "host-gated"
    kind = "host"

    def unavailable_reason(self) -> str | None:
        return (
            "its device is on another machine (HIERA_TEST_NO_DEVICE)"
            if os.environ.get("HIERA_TEST_NO_DEVICE")
            else super().unavailable_reason()
        )


@hookimpl
def hiera_register_architectures():
    return [GatedHost]
