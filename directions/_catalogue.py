"""Strategy catalogues keyed by implementation space, narrowest space first."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hiera_core import StrategyTemplate


def nested(catalogue: Mapping[str, Sequence[StrategyTemplate]], space: str) -> list[StrategyTemplate]:
    """Return `space`'s own strategies, then those of every narrower space it admits, widest first.

    The catalogue's keys are the spaces in nesting order, narrowest first.
    """
    spaces = list(catalogue)
    if space not in catalogue:
        raise ValueError(f"unknown implementation space '{space}' (choose from: {', '.join(spaces)})")
    return [strategy for own in reversed(spaces[: spaces.index(space) + 1]) for strategy in catalogue[own]]
