"""The stencil2d workload: its configuration, its task, and each architecture's side of it."""

from __future__ import annotations

from types import ModuleType
from typing import Any, ClassVar

import attrs

from hiera_core.protocols import Template, UnsupportedArchitecture
from hiera_core.records import Baseline, Contract, Task
from hiera_workloads.stencil2d import cuda, host
from hiera_workloads.stencil2d.reference import WEIGHT_KINDS

SIDES: dict[str, ModuleType] = {"host": host, "cuda": cuda}
"""Each architecture's side of the workload: a module with `grid`, `contract`, `seed`, `templates`, `inputs` and
`harness`, each taking the task (and optionally `baselines`)."""


@attrs.frozen(kw_only=True)
class Stencil2DConfig:
    """`[workload.stencil2d]`: the grid, the stencil and how often it is applied."""

    n: int = 10240
    """Side of the square grid on a GPU (the case-study size)."""
    host_n: int = 1024
    """Side of the grid on the host architecture, which is ~100x slower."""
    radius: int = 3
    steps: int = 1
    """Applications of the stencil per call. 1: the per-step time of one application. More: the whole run is
    timed and checked, the contract allows temporal blocking (fusing applications per launch), and the report
    gives the time per application, amortised."""
    weights: str = "normalized"
    """The task's own weights, recorded in its parameters (`reference.stencil_weights`): `normalized` (seeded positive
    random weights summing to 1) or `uniform` (all 1/(2r+1)^2). The checks and timed calls never use them: every
    input draws fresh positive weights summing to 1, as the contract and the prompts say."""

    def __attrs_post_init__(self) -> None:
        for field in ("n", "host_n", "radius", "steps"):
            if getattr(self, field) < 1:
                raise ValueError(f"workload.stencil2d: {field} must be >= 1, got {getattr(self, field)}")
        if self.weights not in WEIGHT_KINDS:
            known = ", ".join(WEIGHT_KINDS)
            raise ValueError(f"workload.stencil2d: weights must be one of {known}, got {self.weights!r}")


class Stencil2D:
    name: ClassVar[str] = "stencil2d"
    config_class: ClassVar[type] = Stencil2DConfig

    def __init__(self, config: Stencil2DConfig) -> None:
        self.config = config

    def tasks(self) -> list[Task]:
        c = self.config
        k = 2 * c.radius + 1
        return [
            Task(
                workload=self.name,
                name=f"box{k}x{k}-n{c.n}-s{c.steps}",
                params={
                    "n": c.n,
                    "host_n": c.host_n,
                    "radius": c.radius,
                    "steps": c.steps,
                    "weights": c.weights,
                    "dtype": "float64",
                },
                description=(
                    f"A {k}x{k} stencil (radius {c.radius}) in FP64 on a square grid, zero outside it, applied "
                    f"{c.steps} time(s): each output is the weighted sum of the {k * k} inputs around it, with "
                    "weights passed in every call: random positive values summing to 1, not a uniform average. "
                    f"The grid is {c.n}x{c.n} on a GPU and {c.host_n}x{c.host_n} on the host."
                ),
            )
        ]

    def contract(self, task: Task, arch: str) -> Contract:
        return self._side(arch).contract(task)

    def seed(self, task: Task, arch: str) -> tuple[str, dict[str, Any], str]:
        return self._side(arch).seed(task)

    def templates(self, task: Task, arch: str) -> list[Template]:
        return self._side(arch).templates(task)

    def work(self, task: Task, arch: str) -> tuple[float, float]:
        """Minimum traffic: read the grid and write it once a call, whatever its steps (a kernel that keeps every step
        on chip moves no more; one that reads and writes the grid every step moves `steps` times that); flops: one
        FMA per tap, point and step."""
        n = self._side(arch).grid(task)
        k = 2 * task.params["radius"] + 1
        return 2.0 * 8 * n * n, 2.0 * k * k * n * n * task.params["steps"]

    def baselines(self, task: Task, arch: str) -> list[Baseline]:
        """What users compare against, measured in every run (the GPU side: cuDNN two ways and FFT)."""
        side = self._side(arch)
        return side.baselines(task) if hasattr(side, "baselines") else []

    def inputs(self, task: Task, arch: str) -> str:
        """The field's two distributions and ranges, the random weights, and the sizes and seeds checked."""
        return self._side(arch).inputs(task)

    def harness(self, task: Task, arch: str) -> Any:
        return self._side(arch).harness(task)

    def _side(self, arch: str) -> ModuleType:
        side = SIDES.get(arch)
        if side is None:
            raise UnsupportedArchitecture(f"stencil2d has a contract for {', '.join(SIDES)} only, not {arch}")
        return side
