"""Direction P: thread, warp and core parallelism."""

from __future__ import annotations

from typing import ClassVar

from hiera_core import hookimpl
from hiera_core.records import Profile
from hiera_directions._signals import HEADROOM, first_signal, scaled_score

SIGNALS = ("achieved_occupancy", "parallel_utilization")
"""GPU: achieved warps / peak warps per SM. Host: CPU time / (wall time x cores)."""

GRID_FILL = "grid_fill"
"""GPU: blocks launched / SMs, capped at 1; below 1 some SMs get no work at all."""


class Parallelism:
    name: ClassVar[str] = "P"
    order: ClassVar[int] = 1
    signals: ClassVar[tuple[str, ...]] = (*SIGNALS, GRID_FILL, *HEADROOM)
    title: ClassVar[str] = "Thread, warp and core parallelism"
    description: ClassVar[str] = (
        "Expose enough independent work to keep every core or multiprocessor busy, with enough work in flight "
        "to hide latency: how the work is split across threads and cores, and what limits how many run at once."
    )
    config_class: ClassVar[type | None] = None

    def __init__(self, config: None) -> None:
        self.config = config

    def score(self, profile: Profile | None) -> tuple[float, str]:
        if profile is None:
            return 0.0, "no profile"
        evidence, raw = [], 0.0
        found = first_signal(profile, SIGNALS)
        if found is not None:
            signal, value = found
            evidence.append(f"{signal}={value:.2f}")
            raw = 1.0 - value
        fill = first_signal(profile, (GRID_FILL,))
        if fill is not None and fill[1] < 1.0:
            evidence.append(f"{GRID_FILL}={fill[1]:.2f}")
            raw = max(raw, 1.0 - fill[1])
        if not evidence:
            return 0.0, f"P: no {' or '.join((*SIGNALS, GRID_FILL))} signal"
        return scaled_score("P", ", ".join(evidence), raw, profile)


@hookimpl
def hiera_register_directions() -> list[type]:
    return [Parallelism]
