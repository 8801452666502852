"""The stencil's numerics: its weights and its FP64 reference (numpy; the cuda harness computes the same bits with one kernel a step)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

WEIGHT_KINDS = ("normalized", "uniform")
WEIGHTS_SEED = 2026
DRAWN_WEIGHTS = (0.25, 1.75)
"""Each weight a check draws is uniform in this range before the weights are scaled to sum to 1."""
FIELD_RANGE = (-1.0, 1.0)
"""The `uniform` distribution's field values."""
SPIKES = (0.01, 1.0, 100.0)
"""The `spiky` distribution: this fraction of the points (at least one) at +-[low, high] magnitude, the rest 0."""
CHECK_SEEDS = (1, 2, 3)
REMEASURE_SEEDS = (101, 102, 103)
"""The seeds of the correctness checks, and of the winner's final re-measurement."""


def stencil_weights(radius: int, kind: str) -> np.ndarray:
    """Return the (2r+1, 2r+1) FP64 weights of a task, the same on every call.

    `normalized`: positive random weights (seeded) scaled to sum to 1, so repeated steps stay finite.
    `uniform`: every weight 1 / (2r+1)^2.
    """
    k = 2 * radius + 1
    if kind == "normalized":
        weights = np.random.default_rng(WEIGHTS_SEED).uniform(0.5, 1.5, size=(k, k))
        return weights / weights.sum()
    if kind == "uniform":
        return np.full((k, k), 1.0 / (k * k))
    raise ValueError(f"unknown weights {kind!r}; known: {', '.join(WEIGHT_KINDS)}")


def draw_weights(radius: int, rng: np.random.Generator) -> np.ndarray:
    """Fresh weights within the contract's range (any positive (2r+1)^2 values summing to 1): the checks draw
    new ones for every input, so a candidate that bakes in the task's own weights fails them."""
    k = 2 * radius + 1
    weights = rng.uniform(*DRAWN_WEIGHTS, size=(k, k))
    return weights / weights.sum()


def describe_inputs(
    *,
    field: str,
    radius: int,
    steps: int,
    cases: Sequence[Mapping[str, Any]],
    remeasure_cases: Sequence[Mapping[str, Any]],
    timed: int,
    once: str = "the first seed only",
) -> str:
    """The inputs a stencil2d candidate is checked and timed on, as a prompt states them (`Workload.inputs`), from
    a side's correctness cases (dicts with `n` and `first_seed_only`), for its field argument named `field`;
    `once` says what a `first_seed_only` case is checked with."""
    k = 2 * radius + 1
    (low, high), (fraction, spike_low, spike_high) = DRAWN_WEIGHTS, SPIKES
    every = [str(c["n"]) for c in cases if not c["first_seed_only"]]
    large = [str(c["n"]) for c in cases if c["first_seed_only"]]
    checked = f"n = {', '.join(every)} with seeds {', '.join(map(str, CHECK_SEEDS))} and both distributions"
    if large:
        checked += f", and at n = {', '.join(large)} with {once}"
    return "\n".join(
        (
            "Every check and every timed call gets fresh inputs, drawn from its own seed:",
            f"- `{field}`: n x n FP64 values from one of two distributions: `uniform`, every value uniform in"
            f" [{FIELD_RANGE[0]:g}, {FIELD_RANGE[1]:g}]; `spiky`, {fraction:.0%} of the points (at least one) at"
            f" +-[{spike_low:g}, {spike_high:g}] and every other point exactly 0.",
            f"- `weights`: {k}x{k} = {k * k} FP64 values, each drawn uniform in [{low:g}, {high:g}] and then scaled so"
            f" that they sum to 1: random positive weights, new for every input, not a uniform average (not 1/{k * k}"
            " each), so read them on every call.",
            f"- radius {radius} and steps {steps}: fixed for this task.",
            f"Before timing, correctness is checked at {checked}; the calls are then timed at n = {timed}, each on"
            " fresh inputs, and a share of them, chosen in secret, is checked too. The best few candidates are measured"
            f" again at the end, each in fresh processes, at n = {', '.join(str(c['n']) for c in remeasure_cases)} with seeds"
            f" {', '.join(map(str, REMEASURE_SEEDS))}.",
        )
    )


def reference(field: Any, weights: np.ndarray, steps: int, zeros: Callable[[tuple[int, int]], Any] = np.zeros) -> Any:
    """Apply the stencil `steps` times to the square FP64 `field`, zero outside it, one shifted add per tap.

    out[i, j] = sum over di, dj in [-r, r] of weights[di + r, dj + r] * field[i + di, j + dj].

    `field` is a numpy array, or any array with numpy's slicing and `+=` (CuPy on a GPU) when `zeros(shape)`
    makes zeroed FP64 arrays of its kind; `weights` is a numpy array.
    """
    k = weights.shape[0]
    r = k // 2
    n = field.shape[0]
    current = field
    padded = zeros((n + 2 * r, n + 2 * r))
    for _ in range(steps):
        padded[r : r + n, r : r + n] = current
        current = zeros((n, n))
        for a in range(k):
            for b in range(k):
                current += float(weights[a, b]) * padded[a : a + n, b : b + n]
    return current
