"""The stencil's numerics: its weights and its FP64 reference (numpy here, CuPy in the cuda harness)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

WEIGHT_KINDS = ("normalized", "uniform")
WEIGHTS_SEED = 2026


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
    weights = rng.uniform(0.25, 1.75, size=(k, k))
    return weights / weights.sum()


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
