"""What a workload's cuda side gives the cuda judge and runner: `Workload.harness(task, "cuda")`."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class CudaHarness(Protocol):
    """The semantics of one task for CUDA candidates called through PyTorch. The judge calls everything but
    `entry`'s function, which only the runner (the candidate's process) calls.

    Optional: `compiled_baseline()` -> a callable like `baseline`, the reference under torch.compile (timed on
    the final re-measurement when asked); `pytorch_error_factor: float` -> a candidate whose largest error is at
    most this times eager PyTorch's own (FP32) error on the same inputs passes even where elements exceed the
    tolerance; `call_seed: int | None` -> the RNG seed every call of the candidate and the baseline starts from
    (a task that draws random numbers); `reference_engine: str` -> what computes the reference."""

    entry: str
    """The name of the function the candidate's extension binds."""
    dtype: str
    """The output's dtype (`torch` name: "float32", "float64", ...)."""
    distributions: tuple[str, ...]
    tolerance: tuple[float, float]
    """(rtol, atol): an element passes when |out - ref| <= atol * max(1, rms(ref)) + rtol * |ref|."""

    def correctness_cases(self, remeasure: bool) -> list[dict[str, Any]]:
        """Cases checked before timing, each a dict with a "label"; `"first_seed_only": True` runs a large case
        with the first seed and distribution only."""
        ...

    def seeds(self, remeasure: bool) -> tuple[int, ...]: ...

    def make_inputs(self, case: dict[str, Any], seed: int, distribution: str) -> list[Any]:
        """The positional arguments of one call (tensors on the GPU), drawn from `seed`."""
        ...

    def reference(self, case: dict[str, Any], inputs: list[Any]) -> Any:
        """The expected output, in FP64."""
        ...

    def baseline(self, inputs: list[Any]) -> Any:
        """The timed PyTorch reference (eager)."""
        ...

    def timing_case(self) -> dict[str, Any]: ...
