"""The seed for a forward that torch.fx cannot trace symbolically (shapes read as Python numbers, control flow on
them, einops): the forward is run once on the meta device under `make_fx`, which records every ATen operator it
dispatches with the task's concrete shapes, functionalized (no in-place operators); each operator becomes a call
of its own C++ entry point, `at::_ops::<name>_<overload>::call(...)`, with every argument spelled out from the
operator's schema. The seed is specific to the task's shapes, as the task is."""

from __future__ import annotations

import re
from types import ModuleType
from typing import Any

from hiera_workloads.kernelbench.analysis import TaskAnalysis, meta_inputs, meta_model, one_line
from hiera_workloads.kernelbench.contract import declaration, state_aliases
from hiera_workloads.kernelbench.translate import NoTranslation, lit

DTYPES = {
    "float32": "at::kFloat",
    "float64": "at::kDouble",
    "float16": "at::kHalf",
    "bfloat16": "at::kBFloat16",
    "int64": "at::kLong",
    "int32": "at::kInt",
    "int16": "at::kShort",
    "int8": "at::kChar",
    "uint8": "at::kByte",
    "bool": "at::kBool",
    "complex64": "at::kComplexFloat",
}
MEMORY_FORMATS = {
    "contiguous_format": "at::MemoryFormat::Contiguous",
    "preserve_format": "at::MemoryFormat::Preserve",
    "channels_last": "at::MemoryFormat::ChannelsLast",
    "channels_last_3d": "at::MemoryFormat::ChannelsLast3d",
}
WRAPPED = """#include <ATen/ScalarOps.h>

// A Python number passed for a tensor operand, as PyTorch passes it: a 0-dim CPU tensor marked as a wrapped
// number, so it does not take part in type promotion (x * 0.5 stays float32).
inline at::Tensor wrapped(const at::Scalar& value) {
    at::Tensor tensor = at::scalar_to_tensor(value);
    tensor.unsafeGetTensorImpl()->set_wrapped_number(true);
    return tensor;
}
"""
MAX_OPERATORS = 5000
"""Operators above which the lowered forward is refused: an unrolled recurrence (level 3 task 35, an LSTM of 6
layers over 512 steps, lowers to 61 k lines that g++ did not compile in 15 minutes)."""
SMALL_CONSTANT = 64
"""Elements up to which a tensor the forward makes from Python values is written into the seed as a literal."""


def lowered_seed(module: ModuleType, analysis: TaskAnalysis) -> str:
    """Return the seed's `cuda_source.cu`, or raise NoTranslation saying why the lowering failed."""
    graph_module = _lower(module, analysis)
    operators = sum(node.op == "call_function" for node in graph_module.graph.nodes)
    if operators > MAX_OPERATORS:
        raise NoTranslation(f"the forward lowers to {operators} ATen operators (more than {MAX_OPERATORS} to compile)")
    return _Emitter(analysis, graph_module).emit()


def _lower(module: ModuleType, analysis: TaskAnalysis):
    import torch
    from torch.func import functional_call, functionalize
    from torch.fx.experimental.proxy_tensor import make_fx

    model = meta_model(module)
    call = meta_inputs(module)
    state = [a for a in analysis.arguments if a.role in ("parameter", "buffer")]
    tensors = [model.get_parameter(a.source) if a.role == "parameter" else model.get_buffer(a.source) for a in state]
    positions = [a.position for a in analysis.arguments if a.role == "input"]

    def forward(*flat):
        values = list(call)
        for position, tensor in zip(positions, flat[len(state) :], strict=True):
            values[position] = tensor
        return functional_call(model, {a.source: t for a, t in zip(state, flat, strict=False)}, tuple(values))

    flat = [t.detach() for t in tensors] + [call[p] for p in positions]
    try:
        with torch.no_grad(), torch.device("meta"):
            return make_fx(functionalize(forward, remove="mutations"))(*flat)
    except Exception as exc:  # noqa: BLE001 -- an operator without a meta kernel, a value read on the host, ...
        raise NoTranslation(f"lowering the forward to ATen operators failed: {one_line(exc)}") from None


def _declared_types(schema) -> list[str]:
    """Each argument's type as the schema declares it (`SymInt[]`, `ScalarType?`, `Tensor?[]`; alias marks
    dropped): the Python-side types merge SymInt into int and ScalarType into int, the C++ entry points do not."""
    text = re.sub(r"\([a-z]!?( -> \*)?\)", "", str(schema))
    inside = text[text.index("(") + 1 : text.rindex(") ->")]
    types = [part.strip().split(" ")[0] for part in inside.split(", ") if part.strip() != "*"]
    if len(types) != len(schema.arguments):
        raise NoTranslation(f"cannot read the schema {text}")
    return types


class _Emitter:
    def __init__(self, analysis: TaskAnalysis, graph_module) -> None:
        self.analysis = analysis
        self.gm = graph_module
        self.names: dict[Any, str] = {}
        self.lines: list[str] = []
        self.returns: dict[Any, str] = {}
        """Per node: `tuple` (std::tuple of tensors), `list` (std::vector) or `tensor`."""
        inputs = [a for a in analysis.arguments if a.role == "input"]
        self.device = f"{inputs[0].name}.device()" if inputs else None
        self.wrapped = False
        self.aliases: set[Any] = set()
        """The arguments and the views of them (`view`, `t`, `expand`, ... of an argument, or of such a view)."""
        """Whether a Python number stands where an operator takes a tensor (then the seed defines `wrapped`)."""

    def emit(self) -> str:
        arguments = iter(
            [a for a in self.analysis.arguments if a.role in ("parameter", "buffer")]
            + sorted((a for a in self.analysis.arguments if a.role == "input"), key=lambda a: a.position)
        )
        output = None
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                self.names[node], self.returns[node] = next(arguments).name, "tensor"
                self.aliases.add(node)
            elif node.op == "get_attr":
                self.bind(node, self.constant(node.target), "tensor")
            elif node.op == "output":
                output = node.args[0]
            elif node.op == "call_function":
                self.call(node)
            else:
                raise NoTranslation(f"a graph node of kind {node.op}")
        if isinstance(output, (tuple, list)):
            if len(output) != 1:
                raise NoTranslation(f"the forward returns {len(output)} values")
            output = output[0]
        if not hasattr(output, "op") or self.returns.get(output) != "tensor":
            raise NoTranslation("the forward returns no tensor")
        result = self.names[output]
        if output in self.aliases:
            result += ".clone()"  # the contract wants a new tensor, not a view of an argument
        body = "\n".join(self.lines)
        return f"""\
// Seed: the reference's forward lowered to ATen operators (make_fx on the meta device, functionalized, the
// task's shapes), one call of each operator's C++ entry point per node (libraries_pytorch).
#include <torch/extension.h>
{WRAPPED if self.wrapped else ""}
{declaration(self.analysis)[:-1]} {{
{state_aliases(self.analysis)}{body}
    return {result}.contiguous();
}}
"""

    def bind(self, node, expression: str, returns: str) -> None:
        name = f"v{len(self.lines)}"
        self.lines.append(f"    auto {name} = {expression};")
        self.names[node], self.returns[node] = name, returns

    def call(self, node) -> None:
        import operator

        import torch

        target = node.target
        if target is operator.getitem:
            source, index = node.args
            kind = self.returns[source]
            item = f"std::get<{index}>({self.names[source]})" if kind == "tuple" else f"{self.names[source]}[{index}]"
            self.bind(node, item, "tensor")
            if source in self.aliases:
                self.aliases.add(node)
            return
        if not isinstance(target, torch._ops.OpOverload):
            raise NoTranslation(f"a call of {getattr(target, '__name__', target)} outside ATen")
        schema = target._schema
        values = self.bound(node, schema)
        written = [v for a, v in zip(schema.arguments, values, strict=True) if a.alias_info is not None and a.alias_info.is_write]
        if schema.name == "aten::copy_":  # functionalization writes mutated state back this way
            dst, src = node.args[:2]
            self.lines.append(f"    {self.names[dst]}.copy_({self.names[src]});")
            return
        if any(v in self.aliases for v in written):
            raise NoTranslation(f"the in-place operator {schema.name} on an argument")
        # in place on a tensor the forward made (an LSTM cell's gates): the same call, on the same variable
        cpp = schema.name.split("::", 1)[1] + (f"_{schema.overload_name}" if schema.overload_name else "")
        args = ", ".join(
            self.argument(value, kind, a.name)
            for a, kind, value in zip(schema.arguments, _declared_types(schema), values, strict=True)
        )
        returns = [str(r.type) for r in schema.returns]
        kind = "tuple" if len(returns) > 1 else "list" if returns == ["List[Tensor]"] else "tensor"
        if returns and any(r not in ("Tensor", "List[Tensor]") for r in returns):
            raise NoTranslation(f"{schema.name} returns {', '.join(returns)}")
        self.bind(node, f"at::_ops::{cpp}::call({args})", kind)
        if schema.returns and schema.returns[0].alias_info is not None and any(v in self.aliases for v in values):
            self.aliases.add(node)

    def bound(self, node, schema) -> list[Any]:
        """Every schema argument's value: the node's positional and keyword arguments, then the defaults."""
        values = []
        for k, argument in enumerate(schema.arguments):
            if k < len(node.args) and not argument.kwarg_only:
                values.append(node.args[k])
            elif argument.name in node.kwargs:
                values.append(node.kwargs[argument.name])
            elif argument.has_default_value():
                values.append(argument.default_value)
            else:
                raise NoTranslation(f"{schema.name}: no value for `{argument.name}`")
        return values

    def argument(self, value: Any, kind: str, name: str) -> str:
        import torch

        optional = kind.endswith("?")
        base = kind[:-1] if optional else kind
        if value is None:
            if optional:
                return "::std::nullopt"
            raise NoTranslation(f"None for the {kind} argument `{name}`")
        if base == "Tensor":
            if isinstance(value, (int, float, bool)):  # a Python number where the operator takes a tensor
                self.wrapped = True
                return f"wrapped({lit(value)})"
            return self.names[value]
        if base in ("Tensor[]", "Tensor?[]"):
            items = ", ".join("::std::optional<at::Tensor>()" if v is None else self.names[v] for v in value)
            if base == "Tensor?[]":
                return f"c10::List<::std::optional<at::Tensor>>({{{items}}})"
            holder = f"list{len(self.lines)}"
            self.lines.append(f"    std::vector<at::Tensor> {holder}{{{items}}};")
            return f"at::TensorList({holder})"
        if re.fullmatch(r"(Sym)?[Ii]nt\[\d*\]", base):
            values = [int(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
            array = f"at::IntArrayRef({{{', '.join(map(str, values))}}})" if values else "at::IntArrayRef()"
            return f"c10::fromIntArrayRefSlow({array})" if base.startswith("Sym") else array
        if base in ("int", "SymInt", "bool", "float"):
            if hasattr(value, "op"):
                raise NoTranslation(f"`{name}` computed on the host from a tensor")
            return lit(float(value) if base == "float" else value)
        if base == "Scalar":
            if hasattr(value, "op"):
                raise NoTranslation(f"`{name}` computed on the host from a tensor")
            return f"at::Scalar({lit(value)})"
        if base == "ScalarType":
            return DTYPES[str(value).removeprefix("torch.")]
        if base == "Layout":
            if value != torch.strided:
                raise NoTranslation(f"layout {value}")
            return "at::kStrided"
        if base == "Device":
            if self.device is None:
                raise NoTranslation("a tensor made on a device, in a forward without tensor inputs")
            return self.device
        if base == "MemoryFormat":
            return MEMORY_FORMATS[str(value).removeprefix("torch.")]
        if base == "str":
            return lit(value)
        raise NoTranslation(f"no C++ spelling for an argument of type {kind}")

    def constant(self, target: str) -> str:
        """A tensor the forward made from Python values (make_fx keeps it as an attribute): a literal."""
        import torch

        value = getattr(self.gm, target)
        if not isinstance(value, torch.Tensor) or value.is_meta or value.numel() > SMALL_CONSTANT:
            raise NoTranslation(f"a constant tensor `{target}` of {getattr(value, 'shape', '?')} elements")
        dtype = DTYPES.get(str(value.dtype).removeprefix("torch."))
        if dtype is None or self.device is None:
            raise NoTranslation(f"a constant tensor of {value.dtype}")
        integral = not (value.is_floating_point() or value.is_complex())
        items = ", ".join(lit(int(v) if integral else float(v)) for v in value.flatten().tolist())
        shape = ", ".join(str(s) for s in value.shape)
        return (
            f"at::tensor(std::vector<{'int64_t' if integral else 'double'}>{{{items}}})"
            f".reshape(at::IntArrayRef({{{shape}}})).to({self.device}, {dtype})"
        )
