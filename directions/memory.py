"""Direction M: memory transaction efficiency."""

from __future__ import annotations

from typing import ClassVar

from hiera_core import hookimpl
from hiera_core.records import Profile
from hiera_directions._signals import HEADROOM, first_signal, scaled_score

SECTOR_EFFICIENCY = "sector_efficiency"
"""GPU: useful bytes / bytes moved in 32-byte sectors."""

MEMORY_FLOOR = "memory_floor_fraction"
"""Host: memory floor time / measured time; the only memory signal the host timer gives."""

HOST_WEIGHT = 0.5
"""The host signal cannot tell wasted transactions from other stalls, so it counts half."""


class MemoryTransactions:
    name: ClassVar[str] = "M"
    order: ClassVar[int] = 2
    signals: ClassVar[tuple[str, ...]] = (SECTOR_EFFICIENCY, *HEADROOM)  # MEMORY_FLOOR is among them
    title: ClassVar[str] = "Memory transaction efficiency"
    description: ClassVar[str] = (
        "Make every byte moved useful: contiguous, aligned and vectorised accesses, no conflicts or spills on "
        "chip, so each line or sector fetched from memory is fully used."
    )
    config_class: ClassVar[type | None] = None

    def __init__(self, config: None) -> None:
        self.config = config

    def score(self, profile: Profile | None) -> tuple[float, str]:
        if profile is None:
            return 0.0, "no profile"
        found = first_signal(profile, (SECTOR_EFFICIENCY,))
        if found is not None:
            return scaled_score("M", f"{SECTOR_EFFICIENCY}={found[1]:.2f}", 1.0 - found[1], profile)
        found = first_signal(profile, (MEMORY_FLOOR,))
        if found is not None:
            evidence = (
                f"{MEMORY_FLOOR}={found[1]:.2f} (host: transaction efficiency estimated from the memory floor "
                f"only, weighted {HOST_WEIGHT:g})"
            )
            return scaled_score("M", evidence, HOST_WEIGHT * (1.0 - found[1]), profile)
        return 0.0, f"M: no {SECTOR_EFFICIENCY} or {MEMORY_FLOOR} signal"


@hookimpl
def hiera_register_directions() -> list[type]:
    return [MemoryTransactions]
