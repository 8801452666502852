"""The cuda judge's harness for a KernelBench task (a `hiera_plugins.cuda.harness.CudaHarness`).

Positional inputs are the `get_inputs()` tensors on the GPU followed by the model's parameters and buffers, in
the binding's order; scalar forward arguments are not passed (the binding's defaults hold their values). The
reference is the task's `Model` in FP64 (`model.double()`, floating inputs `.double()`, TF32 off, as the judge
sets it); the baseline is the same `Model` in FP32, eager. A forward that draws random numbers (dropout in
training mode) is checked as KernelBench checks it: the reference is the FP32 `Model` and every call, the
candidate's too, starts from one RNG seed (the draws depend on the dtype). KernelBench tasks have one shape each, so the
correctness cases are that shape under several seeds and two distributions (one seed and distribution, and
one timing input set, where the full protocol's sets would take more than half of the GPU's memory).
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

from hiera_workloads.kernelbench.analysis import analyse, build_model, load_task_module, state_of

FULL_SETS = 10
"""Input sets the judge holds at once under the full protocol: 3 seeds x 2 distributions, 3 timing sets, and
the values written into the timed inputs in place."""

LARGE_SHARE = 0.5
"""The share of the GPU's memory the input sets may take; the rest is for outputs, copies and the candidate."""

PYTORCH_ERROR_FACTOR = 2.0
"""A candidate may always be twice as far from the FP64 reference as eager PyTorch's FP32 is on the same inputs:
on ill-conditioned tasks PyTorch itself misses the tolerance (level 3 task 45, UNet with training-mode batch
norm and softmax: eager FP32 is 8.9e-4 from FP64 against 1e-4; eval.md's defence against loose tolerances)."""

CALL_SEED = 42
"""The RNG seed every call of a task that draws random numbers starts from."""

CHECK_SEEDS = (1, 2, 3)
REMEASURE_SEEDS = (11, 12, 13)
"""The seeds of the correctness checks, and of the winner's final re-measurement."""

DISTRIBUTIONS = ("as-generated", "scaled-offset")
"""`get_inputs()` as written, and its floating tensors as x*2+0.5 (still positive where the task's are, so
log, sqrt and probability inputs stay in their domain)."""


class KernelBenchHarness:
    entry = "forward"
    distributions = DISTRIBUTIONS
    pytorch_error_factor = PYTORCH_ERROR_FACTOR

    def __init__(self, path: Path, tolerance: tuple[float, float]) -> None:
        import torch

        self.module = load_task_module(path)
        self.analysis = analyse(self.module)
        self.dtype = self.analysis.output_dtype
        self.tolerance = tolerance
        """(rtol, atol): KernelBench's FP32 tolerance by default, 1e-4 each (`get_tolerance_for_precision`;
        versions 0 and 0.1 used 1e-2); the judge scales atol by max(1, rms(reference))."""
        model = build_model(self.module, "cpu")
        self.reference_model = copy.deepcopy(model).double().cuda()
        self.model = model.cuda()
        self.state = [t.detach() for _, _, t in state_of(self.model)]
        """The model's parameters and buffers as plain tensors (same storage): the judge writes every
        argument in place between calls, which autograd refuses on a parameter that requires grad."""
        self.call_seed = CALL_SEED if self.analysis.random else None
        self.reference_engine = f"PyTorch {torch.__version__}: the task's Model in FP64" + (
            " (FP32 from one RNG seed: it draws random numbers)" if self.call_seed is not None else ""
        )
        self._scalars: dict[int, Any] = {}
        self._torch = torch
        inputs = sum(math.prod(a.shape) * 4 for a in self.analysis.arguments if a.role == "input" and a.shape is not None)
        per_set = inputs + math.prod(self.analysis.output_shape) * 8  # FP32 inputs and their FP64 reference
        self.large = per_set * FULL_SETS > LARGE_SHARE * torch.cuda.get_device_properties(0).total_memory
        """The full protocol's sets would not fit: one correctness case and one timing set instead (level 1
        task 45's inputs alone are 17 GB a set)."""

    def seeds(self, remeasure: bool) -> tuple[int, ...]:
        return REMEASURE_SEEDS if remeasure else CHECK_SEEDS

    def correctness_cases(self, remeasure: bool) -> list[dict[str, Any]]:
        shapes = ", ".join(str(list(a.dims)) for a in self.analysis.arguments if a.role == "input")
        return [{"label": f"KernelBench shape {shapes}", "first_seed_only": self.large}]

    def timing_case(self) -> dict[str, Any]:
        return self.correctness_cases(False)[0]

    def make_inputs(self, case: dict[str, Any], seed: int, distribution: str) -> list:
        torch = self._torch
        torch.manual_seed(seed)
        with torch.device("cuda"):  # generated where they are used: a single CPU thread took minutes for GB-sized inputs
            values = self.module.get_inputs()
        tensors = []
        for position, value in enumerate(values):
            if not isinstance(value, torch.Tensor):
                self._scalars[position] = value
                continue
            if distribution == "scaled-offset" and value.is_floating_point():
                value = value * 2 + 0.5
            tensors.append(value.cuda())
        return tensors + list(self.state)

    def _forward_args(self, inputs: list, double: bool) -> list:
        tensors = iter(inputs[: len(inputs) - len(self.state)])
        count = len(self._scalars) + len(inputs) - len(self.state)
        args = []
        for position in range(count):
            if position in self._scalars:
                args.append(self._scalars[position])
            else:
                t = next(tensors)
                args.append(t.double() if double and t.is_floating_point() else t)
        return args

    def reference(self, case: dict[str, Any], inputs: list):
        with self._torch.no_grad():
            if self.call_seed is not None:
                self._torch.manual_seed(self.call_seed)
                return self.model(*self._forward_args(inputs, double=False)).double()
            return self.reference_model(*self._forward_args(inputs, double=True)).double()

    def baseline(self, inputs: list):
        with self._torch.no_grad():
            return self.model(*self._forward_args(inputs, double=False))

    def compiled_baseline(self):
        """KernelBench's second baseline: the same FP32 `Model` under `torch.compile` (default mode)."""
        compiled = self._torch.compile(self.model)

        def call(inputs: list):
            with self._torch.no_grad():
                return compiled(*self._forward_args(inputs, double=False))

        return call
