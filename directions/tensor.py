"""Direction T: tensor cores and the instruction pipeline."""

from __future__ import annotations

from typing import ClassVar

from hiera_core import hookimpl
from hiera_core.records import Profile
from hiera_directions._signals import HEADROOM, deficit_score

SIGNALS = ("pipe_utilization", "in_cache_compute_fraction")
"""GPU: the busiest compute pipe (tensor/DMMA included), fraction of peak. Host: GFLOP/s on a cache-resident
grid / peak of the cores in use."""


class TensorCores:
    name: ClassVar[str] = "T"
    order: ClassVar[int] = 4
    signals: ClassVar[tuple[str, ...]] = (*SIGNALS, *HEADROOM)
    title: ClassVar[str] = "Tensor cores and instruction pipeline"
    description: ClassVar[str] = (
        "Raise useful arithmetic per issued instruction: map the math onto the fastest arithmetic units the "
        "hardware has (matrix units, SIMD FMA) through register blocking, unrolling and fewer non-math "
        "instructions."
    )
    config_class: ClassVar[type | None] = None

    def __init__(self, config: None) -> None:
        self.config = config

    def score(self, profile: Profile | None) -> tuple[float, str]:
        return deficit_score("T", profile, SIGNALS)


@hookimpl
def hiera_register_directions() -> list[type]:
    return [TensorCores]
