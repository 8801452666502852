"""The `kernelbench` workload: tasks loaded from the user's KernelBench checkout, by level and selection."""

from __future__ import annotations

import os
import random
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import attrs

from hiera_core.protocols import Knob, NoSeed, Template, UnsupportedArchitecture
from hiera_core.records import Contract, Task
from hiera_workloads.kernelbench import contract as contract_files
from hiera_workloads.kernelbench.analysis import TaskAnalysis, TaskUnusable, analyse, load_task_module, one_line
from hiera_workloads.kernelbench.translate import NoTranslation, pointwise_kernel, translate

ROOT_ENV = "KERNELBENCH_ROOT"
TASK_FILE = re.compile(r"^(\d+)_(\w+)\.py$")


@attrs.frozen(kw_only=True)
class KernelBenchConfig:
    """`[workload.kernelbench]`: where the checkout is, which level, which tasks, and the tolerance."""

    root: str = ""
    """The KernelBench checkout (holding `KernelBench/level<N>/`); empty: the environment's KERNELBENCH_ROOT."""
    level: int = 1
    tasks: str = ""
    """Ids, ranges and names, comma-separated (`1-10,17,Conv2D_ReLU_BiasAdd`); empty: every task of the level."""
    sample: int = 0
    """Draw this many of the selected tasks at random (`sample_seed`), not chosen by hand; 0: all of them."""
    sample_seed: int = 0
    """The seed of that draw (`random.Random(f"{seed}:level{level}").sample` over the selection in id order: each
    level draws on its own, so one seed does not pick the same ids on every level): the same seed, level, checkout
    and selection give the same tasks."""
    rtol: float = 1e-4
    atol: float = 1e-4
    """KernelBench's FP32 tolerance (1e-4, `get_tolerance_for_precision`; its versions 0 and 0.1 used 1e-2)."""

    def __attrs_post_init__(self) -> None:
        if self.level not in (1, 2, 3):
            raise ValueError(f"workload.kernelbench: level must be 1, 2 or 3, got {self.level}")
        if self.sample < 0:
            raise ValueError(f"workload.kernelbench: sample must be >= 0, got {self.sample}")


@attrs.frozen(kw_only=True)
class _Loaded:
    task: Task
    analysis: TaskAnalysis
    module: Any


class KernelBench:
    name: ClassVar[str] = "kernelbench"
    config_class: ClassVar[type] = KernelBenchConfig

    def __init__(self, config: KernelBenchConfig | None) -> None:
        self.config = config or KernelBenchConfig()
        self.root = Path(self.config.root or os.environ.get(ROOT_ENV, "")).expanduser()
        self._loaded: dict[str, _Loaded] | None = None
        self._failures: dict[str, str] = {}
        self._seeds: dict[str, tuple[str | None, str | None]] = {}

    # --- loading -------------------------------------------------------------------------------

    def level_dir(self) -> Path:
        for candidate in (self.root / "KernelBench" / f"level{self.config.level}", self.root / f"level{self.config.level}"):
            if candidate.is_dir():
                return candidate
        return self.root / "KernelBench" / f"level{self.config.level}"

    def _load(self) -> dict[str, _Loaded]:
        if self._loaded is not None:
            return self._loaded
        self._loaded, self._failures = {}, {}
        level = f"level{self.config.level}"
        if not str(self.root) or str(self.root) == ".":
            self._failures[level] = f"no KernelBench checkout given: set workload.kernelbench.root or {ROOT_ENV}"
            return self._loaded
        if not self.root.is_dir():
            self._failures[level] = f"{self.root}: no such directory (workload.kernelbench.root or {ROOT_ENV})"
            return self._loaded
        directory = self.level_dir()
        if not directory.is_dir():
            self._failures[level] = f"{directory}: no such directory: the checkout has no {level}"
            return self._loaded
        files = sorted((int(m.group(1)), m.group(2), path) for path in directory.iterdir() if (m := TASK_FILE.match(path.name)))
        chosen = self._select(files)
        if self.config.sample and self.config.sample < len(chosen):  # drawn before loading: a task that fails is a failure
            draw = random.Random(f"{self.config.sample_seed}:level{self.config.level}")  # each level its own draw
            chosen = sorted(draw.sample(chosen, self.config.sample))
        for task_id, name, path in chosen:
            stem = path.stem
            try:
                module = load_task_module(path)
                analysis = analyse(module)
            except TaskUnusable as exc:
                self._failures[stem] = str(exc)
                continue
            task = Task(
                workload=self.name,
                name=stem,
                params={
                    "level": self.config.level,
                    "id": task_id,
                    "path": str(path.resolve()),
                    "dtype": "float32",
                    "rtol": self.config.rtol,
                    "atol": self.config.atol,
                },
                description=f"KernelBench level {self.config.level} task {task_id}, {name.replace('_', ' ').strip()}: "
                f"the PyTorch Model in groundtruth.py, FP32, output {list(analysis.output_shape)}.",
            )
            self._loaded[stem] = _Loaded(task=task, analysis=analysis, module=module)
        return self._loaded

    def _select(self, files: list[tuple[int, str, Path]]) -> list[tuple[int, str, Path]]:
        selection = [part.strip() for part in self.config.tasks.split(",") if part.strip()]
        if not selection:
            return files
        chosen: dict[int, tuple[int, str, Path]] = {}
        for part in selection:
            if m := re.fullmatch(r"(\d+)(?:-(\d+))?", part):
                low, high = int(m.group(1)), int(m.group(2) or m.group(1))
                hits = [f for f in files if low <= f[0] <= high]
            else:
                key = part.lower().strip("_")
                hits = [f for f in files if key in (f[2].stem.lower(), f[1].lower().strip("_"))]
            if not hits:
                self._failures[part] = f"no task of level {self.config.level} matches '{part}'"
            chosen.update({f[0]: f for f in hits})
        return [chosen[k] for k in sorted(chosen)]

    def tasks(self) -> list[Task]:
        return [loaded.task for loaded in self._load().values()]

    def failures(self) -> dict[str, str]:
        """Every selected task (or the level) that could not be loaded, with a one-line reason."""
        self._load()
        return dict(self._failures)

    def analysis(self, task: Task) -> TaskAnalysis:
        """What tracing the task's reference found: its arguments, their roles and shapes, the output."""
        return self._get(task).analysis

    def _get(self, task: Task) -> _Loaded:
        loaded = self._load().get(task.name)
        if loaded is None:
            raise UnsupportedArchitecture(f"{task.name}: {self._failures.get(task.name, 'not a loaded task')}")
        return loaded

    # --- the Workload protocol -------------------------------------------------------------------

    def contract(self, task: Task, arch: str) -> Contract:
        self._check_arch(arch)
        loaded = self._get(task)
        return contract_files.contract(task, loaded.analysis, Path(task.params["path"]).read_text())

    def seed(self, task: Task, arch: str) -> tuple[str, dict[str, Any], str]:
        self._check_arch(arch)
        source, reason = self.translated_seed(task)
        if source is None:
            raise NoSeed(f"{task.name}: no seed: {reason}")
        template = TranslationTemplate(self._get(task))
        return source, template.defaults(), template.describe(template.defaults())

    def translated_seed(self, task: Task) -> tuple[str | None, str | None]:
        """(source, None), or (None, why the forward could not be translated)."""
        if task.name not in self._seeds:
            loaded = self._get(task)
            try:
                self._seeds[task.name] = (translate(loaded.module, loaded.analysis), None)
            except NoTranslation as exc:
                self._seeds[task.name] = (None, str(exc))
            except Exception as exc:  # noqa: BLE001 -- a translator fault is this task's missing seed, not the batch's end
                self._seeds[task.name] = (None, f"the translation failed: {one_line(exc)}")
        return self._seeds[task.name]

    def templates(self, task: Task, arch: str) -> list[Template]:
        """The translation with its expert moves, for tasks that have a seed."""
        self._check_arch(arch)
        return [TranslationTemplate(self._get(task))] if self.translated_seed(task)[0] is not None else []

    def work(self, task: Task, arch: str) -> tuple[float, float]:
        """Bytes: every tensor argument read and the output written once, FP32; flops 0, deliberately: the reference's
        operator count is no floor (a candidate may rightly do less arithmetic, as when a sum after a GEMM folds into a
        matrix-vector product), and a compute floor above an honest candidate would reject it as impossible."""
        analysis = self._get(task).analysis
        elements = sum(_numel(a.shape) for a in analysis.tensor_arguments) + _numel(analysis.output_shape)
        return 4.0 * elements, 0.0

    def reference_flops(self, task: Task, arch: str) -> float:
        """The reference's own arithmetic, by PyTorch's FLOP counter on the meta device (`TaskAnalysis.reference_flops`):
        the headroom quoted to a model and in the report, never a floor."""
        return self._get(task).analysis.reference_flops

    def inputs(self, task: Task, arch: str) -> str:
        """The `get_inputs()` tensors with their shapes, the two distributions, the seeds, the model's state."""
        from hiera_workloads.kernelbench.harness import CALL_SEED, CHECK_SEEDS, REMEASURE_SEEDS

        self._check_arch(arch)
        analysis = self._get(task).analysis
        tensors = [f"`{a.source}` {a.dtype or 'tensor'} {list(a.shape or ())}" for a in analysis.arguments if a.role == "input"]
        scalars = [f"`{a.source}` = {a.value!r}" for a in analysis.arguments if a.role == "scalar"]
        state = [a for a in analysis.arguments if a.role in ("parameter", "buffer")]
        lines = [
            f"The forward's tensors come from the task's `get_inputs()` (groundtruth.py): {', '.join(tensors) or 'none'},"
            " generated on the GPU after `torch.manual_seed(seed)`, in two distributions: as `get_inputs()` writes them,"
            " and with every floating tensor as x*2+0.5 (still positive where the task's are).",
        ]
        if scalars:
            lines.append(f"Scalar arguments keep their `get_inputs()` values: {', '.join(scalars)}.")
        if state:
            lines.append(
                f"The model's {len(state)} parameters and buffers are passed as tensors, as `Model` initialises them"
                " (the same values on every call)."
            )
        if analysis.random:
            lines.append(f"The forward draws random numbers: the reference and every call start from RNG seed {CALL_SEED}.")
        lines.append(
            f"KernelBench tasks have one shape: correctness is checked on it with seeds {', '.join(map(str, CHECK_SEEDS))}"
            " and both distributions (one seed and distribution where the full set of inputs would not fit in half the"
            f" GPU's memory), the calls are timed on fresh inputs, and the best few candidates are measured again at the end"
            f" with seeds {', '.join(map(str, REMEASURE_SEEDS))}."
        )
        return "\n".join(lines)

    def harness(self, task: Task, arch: str) -> Any:
        self._check_arch(arch)
        from hiera_workloads.kernelbench.harness import KernelBenchHarness

        return KernelBenchHarness(Path(task.params["path"]), (task.params["rtol"], task.params["atol"]))

    def _check_arch(self, arch: str) -> None:
        if arch != "cuda":
            raise UnsupportedArchitecture(f"kernelbench has a contract for cuda only, not {arch}")


class TranslationTemplate:
    """The seed's translation and the moves an expert makes on it without a model: `fuse_pointwise` turns
    each chain of pointwise operators into one generated kernel (direction R: intermediates stay on chip);
    `pointwise_kernel`, where the whole forward is such a chain on its input, makes that kernel the whole
    candidate, in pure CUDA (direction M: the kernel's own loads and stores)."""

    name = "kernelbench-aten"
    knobs: Mapping[str, Knob] = {
        "fuse_pointwise": Knob(values=(False, True), direction="R", space="libraries_pytorch"),
        "pointwise_kernel": Knob(values=(False, True), direction="M", space="pure_cuda"),
    }

    def __init__(self, loaded: _Loaded) -> None:
        self.loaded = loaded

    def defaults(self) -> dict[str, Any]:
        return {name: knob.values[0] for name, knob in self.knobs.items()}

    def describe(self, params: Mapping[str, Any]) -> str:
        return " ".join([self.name, *(f"{k}={params[k]}" for k in self.knobs)])

    def render(self, params: Mapping[str, Any]) -> str:
        params = {**self.defaults(), **params}  # a knob left out keeps its default
        if params["pointwise_kernel"] and (kernel := pointwise_kernel(self.loaded.module, self.loaded.analysis)):
            return kernel
        return translate(self.loaded.module, self.loaded.analysis, fuse_pointwise=bool(params["fuse_pointwise"]))


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
