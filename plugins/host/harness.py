"""What a workload's host side gives the host judge and runner: `Workload.harness(task, "host")`."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class HostHarness(Protocol):
    """The semantics of one task for C candidates on the CPU. The judge calls everything but `call`, which
    only the runner (the candidate's process) calls. Optional: `reference_engine: str`, what computes the
    reference (the report names it)."""

    symbol: str
    """The function the candidate's shared library exports."""
    distributions: tuple[str, ...]
    """Input value distributions (names `make_inputs` understands); checks cycle through them."""
    tolerance: tuple[float, float]
    """(rtol, atol): an element passes when |out - ref| <= atol + rtol * |ref|."""

    def correctness_cases(self, remeasure: bool) -> list[dict[str, Any]]:
        """Cases checked before timing, each a dict with a "label"; `"first_seed_only": True` runs a large case
        with the first seed only. `remeasure`: the final re-measurement's cases (may differ)."""
        ...

    def seeds(self, remeasure: bool) -> tuple[int, ...]: ...

    def make_inputs(self, case: dict[str, Any], seed: int, distribution: str) -> dict[str, np.ndarray]:
        """Every data input of one call, drawn from `seed` (the judge draws fresh ones for every call)."""
        ...

    def reference(self, case: dict[str, Any], inputs: dict[str, np.ndarray]) -> np.ndarray: ...

    def output(self, case: dict[str, Any]) -> np.ndarray:
        """An array of the output's shape and dtype."""
        ...

    def call(self, lib: Any, case: dict[str, Any], inputs: dict[str, np.ndarray], out: np.ndarray) -> None:
        """Runner side: call the candidate (`lib`, a ctypes CDLL) on `inputs`, writing `out`."""
        ...

    def timing_case(self) -> dict[str, Any]: ...

    def cache_case(self) -> dict[str, Any]:
        """A cache-resident case, timed beside the task for the planning signals."""
        ...

    def points(self, case: dict[str, Any]) -> int:
        """Output points of `case` (per-point figures)."""
        ...
