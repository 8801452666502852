"""Direction R: data reuse and data-movement pipelining."""

from __future__ import annotations

from typing import ClassVar, cast

from hiera_core import hookimpl
from hiera_core.records import Profile
from hiera_directions._signals import HEADROOM, deficit_score

SIGNALS = ("onchip_reuse", "dram_reuse", "cache_resilience")
"""GPU: ideal bytes / bytes requested from L1 by global loads and stores, and ideal DRAM bytes / measured DRAM
bytes; the worse of the two counts. Host: per-point time on a cache-resident grid / at task size."""
GPU_SIGNALS = SIGNALS[:2]


class DataReuse:
    name: ClassVar[str] = "R"
    order: ClassVar[int] = 3
    signals: ClassVar[tuple[str, ...]] = (*SIGNALS, *HEADROOM)
    title: ClassVar[str] = "Data reuse and data-movement pipelining"
    description: ClassVar[str] = (
        "Bring each byte from DRAM once and reuse it on chip: tiling in caches, on-chip memory and registers, "
        "fusion of passes, and asynchronous copies that overlap loads with compute."
    )
    config_class: ClassVar[type | None] = None

    def __init__(self, config: None) -> None:
        self.config = config

    def score(self, profile: Profile | None) -> tuple[float, str]:
        present = [name for name in GPU_SIGNALS if profile is not None and name in profile.signals]
        if present:  # reuse is missing wherever data is fetched again: on chip or from DRAM
            return deficit_score("R", profile, (min(present, key=cast(Profile, profile).signals.__getitem__),))
        return deficit_score("R", profile, SIGNALS)


@hookimpl
def hiera_register_directions() -> list[type]:
    return [DataReuse]
