"""Direction C: control flow and boundary specialisation."""

from __future__ import annotations

from typing import ClassVar

from hiera_core import hookimpl
from hiera_core.records import Profile
from hiera_directions._signals import HEADROOM, deficit_score

SIGNALS = ("branch_uniformity", "branch_free_fraction")
"""GPU: fraction of branch targets taken uniformly by a warp. Host: share of innermost loops free of conditionals."""


class ControlFlow:
    name: ClassVar[str] = "C"
    order: ClassVar[int] = 0
    """The paper's order: C, P, M, R, T."""
    signals: ClassVar[tuple[str, ...]] = (*SIGNALS, *HEADROOM)
    title: ClassVar[str] = "Control flow and boundary specialisation"
    description: ClassVar[str] = (
        "Remove data-dependent branches and per-element bounds checks from the hot path: specialise interior "
        "and boundary work, hoist invariant conditions, and predicate short arms instead of branching."
    )
    config_class: ClassVar[type | None] = None

    def __init__(self, config: None) -> None:
        self.config = config

    def score(self, profile: Profile | None) -> tuple[float, str]:
        return deficit_score("C", profile, SIGNALS)


@hookimpl
def hiera_register_directions() -> list[type]:
    return [ControlFlow]
