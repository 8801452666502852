"""Strategy catalogues: one list per space rank, narrowest (rank 0) first."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hiera_core import StrategyTemplate


def nested(catalogue: Mapping[str, Sequence[StrategyTemplate]], rank: int) -> list[StrategyTemplate]:
    """The strategies of a space of `rank`: those of its own rank, then those of every narrower rank (it admits
    them), widest first. The catalogue's keys name the built-in spaces in rank order (0, 1, 2); a wider rank
    than the catalogue knows gets all of it."""
    ranked = list(catalogue.values())[: max(0, rank) + 1]
    return [strategy for own in reversed(ranked) for strategy in own]
