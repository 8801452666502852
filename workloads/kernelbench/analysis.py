"""What a KernelBench task file defines, found by importing it and tracing one call of its `Model`.

A task file defines `Model(nn.Module)` (constructed as `Model(*get_init_inputs())`), its `forward`, and
module-level `get_inputs()` / `get_init_inputs()`. The trace runs on the `meta` device (shapes and dtypes,
no data, so a 4096² matmul costs nothing); a forward that the meta device cannot run is traced once more
on the CPU when its inputs are small.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs

INIT_SEED = 42
"""KernelBench's seed for the reference's weights (`set_seed(42)` before `Model(*get_init_inputs())`)."""
CPU_TRACE_LIMIT = 1 << 24
"""Elements (inputs plus state) up to which a forward the meta device cannot run is traced on the CPU."""
RANDOM_OPS = {
    "bernoulli",
    "bernoulli_",
    "native_dropout",
    "rand",
    "rand_like",
    "randn",
    "randn_like",
    "randint",
    "randint_like",
    "randperm",
    "normal",
    "normal_",
    "uniform_",
    "exponential_",
    "geometric_",
    "cauchy_",
    "log_normal_",
    "random_",
    "multinomial",
    "poisson",
    "rrelu_with_noise",
}
"""ATen operators that draw from the RNG."""
CPP_KEYWORDS = {
    "auto",
    "int",
    "float",
    "double",
    "char",
    "bool",
    "return",
    "class",
    "struct",
    "new",
    "delete",
    "default",
    "template",
    "this",
    "register",
    "union",
    "namespace",
    "switch",
    "case",
    "out",
    "at",
    "torch",
}


class TaskUnusable(Exception):
    """The task file cannot be used; the message is the one-line reason a user sees."""


@attrs.frozen(kw_only=True)
class Argument:
    """One argument of the contract's `forward`, in binding order."""

    name: str
    """The C++ parameter name."""
    role: str
    """`input` (a tensor `get_inputs()` returns), `parameter` or `buffer` (the model's state, as a tensor), or
    `scalar` (a non-tensor forward argument, a C++ scalar bound with its `get_inputs()` value as default)."""
    source: str
    """The forward argument's name, or the state's dotted path in the model (`conv.weight`)."""
    cpp_type: str
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    value: Any = None
    """A scalar's value in `get_inputs()`."""

    @property
    def dims(self) -> tuple[int, ...]:
        """A tensor argument's shape (a scalar has none: asking is a bug)."""
        if self.shape is None:
            raise ValueError(f"argument {self.name} is a scalar: it has no shape")
        return self.shape

    position: int = -1
    """Where a forward argument sits in `get_inputs()`; -1 for state."""


@attrs.frozen(kw_only=True)
class TaskAnalysis:
    """A task's contract-relevant facts: arguments in binding order, the output, and how they were found."""

    arguments: tuple[Argument, ...]
    output_shape: tuple[int, ...]
    output_dtype: str
    traced_on: str
    """`meta` or `cpu`."""
    training: bool
    """Whether the model is in training mode when constructed (KernelBench never calls `.eval()`)."""
    random: bool = False
    """Whether the forward draws random numbers (dropout in training mode, `torch.rand`, ...): its output
    depends on the RNG state, so it is checked as KernelBench does, reference and candidate from one seed."""
    largest_numel: int = 0
    """Elements of the largest tensor one forward makes (an input, an intermediate or the output)."""
    reference_flops: float = 0.0
    """The forward's arithmetic as PyTorch's FLOP counter (`torch.utils.flop_counter`) counts it: matrix products and
    convolutions, two a multiply-add; elementwise work is not counted."""

    @property
    def tensor_arguments(self) -> tuple[Argument, ...]:
        return tuple(a for a in self.arguments if a.role != "scalar")


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:240] if text else ''}".rstrip(": ")


def load_task_module(path: Path) -> ModuleType:
    """Import a task file under a private name; any failure is a `TaskUnusable` with one line."""
    name = "kernelbench_task_" + re.sub(r"\W", "_", f"{path.parent.name}_{path.stem}")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TaskUnusable(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 -- a user's file may raise anything, SystemExit included
        raise TaskUnusable(f"importing it failed: {one_line(exc)}") from None
    for attr in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(module, attr):
            raise TaskUnusable(f"it defines no `{attr}`")
    sys.modules.setdefault(name, module)  # fx and pickling look modules up by name
    return module


def build_model(module: ModuleType, device: str = "cpu"):
    """`Model(*get_init_inputs())` under KernelBench's weight seed, as the wrapper and the harness build it."""
    import torch

    with torch.device(device):
        torch.manual_seed(INIT_SEED)
        return module.Model(*module.get_init_inputs())


def meta_model(module: ModuleType):
    """The model on the meta device, for tracing; a constructor that reads values (`.item()`, which the meta
    device refuses: level 3's Swin tasks) is built on the CPU first."""
    try:
        return build_model(module, "meta")
    except Exception:  # noqa: BLE001
        return build_model(module, "cpu").to("meta")


def meta_inputs(module: ModuleType) -> list[Any]:
    """`get_inputs()` on the meta device, from the seed every trace starts from."""
    import torch

    with torch.device("meta"):
        torch.manual_seed(INIT_SEED)
        return list(module.get_inputs())


def state_of(model) -> list[tuple[str, str, Any]]:
    """(role, dotted path, tensor) of every parameter then every buffer, in the binding's order."""
    return [("parameter", n, t) for n, t in model.named_parameters()] + [("buffer", n, t) for n, t in model.named_buffers()]


def analyse(module: ModuleType) -> TaskAnalysis:
    """Trace one call; raise `TaskUnusable` when the task cannot run or its forward has no C++ signature."""
    import torch

    try:
        model = meta_model(module)
        inputs = meta_inputs(module)
    except Exception as exc:  # noqa: BLE001
        raise TaskUnusable(f"building the model or its inputs failed: {one_line(exc)}") from None
    from torch.utils.flop_counter import FlopCounterMode

    from hiera_plugins.cuda.runner import OpNames

    traced_on = "meta"
    ops, flops = OpNames(), FlopCounterMode(display=False)
    try:
        with torch.no_grad(), ops, flops:
            out = model(*inputs)
    except Exception as meta_exc:  # noqa: BLE001 -- data-dependent ops (.item(), nonzero) need real data
        size = sum(t.numel() for t in inputs if isinstance(t, torch.Tensor)) + sum(t.numel() for _, _, t in state_of(model))
        if size > CPU_TRACE_LIMIT:
            raise TaskUnusable(
                f"its forward does not run on the meta device ({one_line(meta_exc)}) and is too large"
                f" ({size} elements) to trace on the CPU"
            ) from None
        try:
            model = build_model(module, "cpu")
            torch.manual_seed(INIT_SEED)
            inputs = list(module.get_inputs())
            ops, flops = OpNames(), FlopCounterMode(display=False)
            with torch.no_grad(), ops, flops:
                out = model(*inputs)
        except Exception as exc:  # noqa: BLE001
            raise TaskUnusable(f"running the reference failed: {one_line(exc)}") from None
        traced_on = "cpu"
    if type(out) is not torch.Tensor:
        raise TaskUnusable(f"its forward returns a {type(out).__name__}, not one tensor: the binding returns torch::Tensor")
    return TaskAnalysis(
        arguments=_arguments(module.Model.forward, inputs, model),
        output_shape=tuple(out.shape),
        output_dtype=str(out.dtype).removeprefix("torch."),
        traced_on=traced_on,
        training=model.training,
        random=bool(ops.names & RANDOM_OPS),
        largest_numel=ops.largest,
        reference_flops=float(flops.get_total_flops()),
    )


def _arguments(forward, inputs: list[Any], model) -> tuple[Argument, ...]:
    import torch

    parameters = list(inspect.signature(forward).parameters.values())[1:]
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters):
        names = [f"arg{i}" for i in range(len(inputs))]  # forward(*args): get_inputs() decides the arity
    else:
        names = [p.name for p in parameters]
        if len(inputs) > len(names):
            raise TaskUnusable(f"get_inputs() returns {len(inputs)} values but forward takes {len(names)}")
    used: set[str] = set()

    def cpp_name(text: str) -> str:
        name = re.sub(r"\W", "_", text)
        if name in CPP_KEYWORDS or name in used or name[0].isdigit():
            name = f"{name}_"
        while name in used:
            name += "_"
        used.add(name)
        return name

    tensors, scalars = [], []
    for position, (name, value) in enumerate(zip(names, inputs)):
        if isinstance(value, torch.Tensor):
            tensors.append(
                Argument(
                    name=cpp_name(name),
                    role="input",
                    source=name,
                    cpp_type="torch::Tensor",
                    shape=tuple(value.shape),
                    dtype=str(value.dtype).removeprefix("torch."),
                    position=position,
                )
            )
        elif isinstance(value, (bool, int, float)):
            cpp_type = {bool: "bool", int: "int64_t", float: "double"}[type(value)]
            scalars.append(
                Argument(name=cpp_name(name), role="scalar", source=name, cpp_type=cpp_type, value=value, position=position)
            )
        else:
            raise TaskUnusable(f"forward argument `{name}` is a {type(value).__name__}: no C++ type for it in the binding")
    state = [
        Argument(
            name=cpp_name(path),
            role=role,
            source=path,
            cpp_type="torch::Tensor",
            shape=tuple(t.shape),
            dtype=str(t.dtype).removeprefix("torch."),
        )
        for role, path, t in state_of(model)
    ]
    return tuple(tensors + state + scalars)
