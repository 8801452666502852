"""The arithmetic every built-in direction's score shares: which signal applies, and the headroom."""

from __future__ import annotations

from collections.abc import Sequence

from hiera_core.records import Profile

HEADROOM = ("memory_floor_fraction", "compute_floor_fraction")
"""Floor time / measured time, memory and arithmetic: every score is scaled by what they leave to win."""


def _clip(value: float) -> float:
    return min(1.0, max(0.0, value))


def first_signal(profile: Profile, names: Sequence[str]) -> tuple[str, float] | None:
    """Return (name, value clipped to [0, 1]) of the first of `names` in `profile.signals`, or None."""
    for name in names:
        if name in profile.signals:
            return name, _clip(profile.signals[name])
    return None


def headroom(profile: Profile) -> float:
    """1 - the larger of the memory and compute floor fractions: what is left to win anywhere."""
    signals = profile.signals
    return _clip(1.0 - max(signals.get(name, 0.0) for name in HEADROOM))


def scaled_score(letter: str, evidence: str, raw: float, profile: Profile) -> tuple[float, str]:
    """Scale a direction's raw score by the headroom; return it rounded, with a reason citing `evidence`."""
    room = headroom(profile)
    score = round(_clip(raw) * room, 3)
    return score, f"{letter}: {evidence}, headroom {room:.2f} -> {score:.3f}"


def deficit_score(letter: str, profile: Profile | None, names: Sequence[str]) -> tuple[float, str]:
    """The common rule: 1 - the first present of `names` (1 = healthy), scaled by the headroom."""
    if profile is None:
        return 0.0, "no profile"
    found = first_signal(profile, names)
    if found is None:
        return 0.0, f"{letter}: no {' or '.join(names)} signal"
    signal, value = found
    return scaled_score(letter, f"{signal}={value:.2f}", 1.0 - value, profile)
