"""The seed candidate: the reference's forward, traced with torch.fx, translated node by node into ATen calls
in `cuda_source.cu` (the libraries_pytorch space). A node without a translation leaves the task without a seed,
and the reason names the operators that are missing."""

from __future__ import annotations

import math
import operator
import re
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

from hiera_workloads.kernelbench import fusion
from hiera_workloads.kernelbench.analysis import TaskAnalysis, meta_inputs, meta_model, one_line
from hiera_workloads.kernelbench.contract import declaration, state_aliases

if TYPE_CHECKING:
    Pointwise = tuple[Any, fusion.Step]  # what `pointwise_step` finds: the tensor an operator applies to, its step


class NoTranslation(Exception):
    """The forward cannot be translated mechanically; the message says why (missing operators)."""


class _Cascade(NoTranslation):
    """A node whose input was not translated: not a missing operator of its own."""


_UNSET = object()
LOSS_DEFAULTS = {
    "weight": None,
    "size_average": None,
    "reduce": None,
    "ignore_index": -100,
    "reduction": "mean",
    "label_smoothing": 0.0,
    "beta": 1.0,
    "log_target": False,
}
"""Keyword arguments that torch.fx records with their default values: dropped, as if not given."""

ALIASES: dict[str | None, str] = {  # looked up with None too: a function `_function_names` does not name
    "multiply": "mul",
    "subtract": "sub",
    "divide": "div",
    "true_divide": "div",
    "clip": "clamp",
    "swish": "silu",
    "negative": "neg",
    "absolute": "abs",
}

VIEWS = {
    "detach",
    "view",
    "reshape",
    "permute",
    "transpose",
    "squeeze",
    "unsqueeze",
    "flatten",
    "expand",
    "contiguous",
    "t",
    "getitem",
    "narrow",
    "select",
    "unflatten",
}
"""Operations whose result may share memory with their argument: an output produced only by these is cloned."""


def lit(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NAN"
        if math.isinf(value):
            return "INFINITY" if value > 0 else "-INFINITY"
        text = repr(value)
        return text if any(c in text for c in ".en") else text + ".0"
    if isinstance(value, (tuple, list)) and all(isinstance(v, (int, bool)) for v in value):
        return "{" + ", ".join(lit(v) for v in value) + "}"
    if isinstance(value, str):
        return '"' + value + '"'
    raise NoTranslation(f"no C++ literal for {type(value).__name__} {value!r}")


def _opt(value: Any) -> str:
    return "std::nullopt" if value is None else lit(value)


def _pair(value: Any, n: int) -> str:
    return lit(tuple(value) if isinstance(value, (tuple, list)) else (value,) * n)


def _bind(args: tuple, kwargs: dict, names: list[str], defaults: dict[str, Any]) -> dict[str, Any]:
    bound = dict(defaults)
    bound.update(zip(names, args))
    bound.update(kwargs)
    return bound


def _dims(dim: Any) -> str:
    return lit(tuple(dim) if isinstance(dim, (tuple, list)) else (dim,))


UNARY = {
    "relu": "at::relu({x})",
    "sigmoid": "at::sigmoid({x})",
    "tanh": "at::tanh({x})",
    "exp": "at::exp({x})",
    "log": "at::log({x})",
    "abs": "at::abs({x})",
    "sqrt": "at::sqrt({x})",
    "rsqrt": "at::rsqrt({x})",
    "erf": "at::erf({x})",
    "neg": "(-{x})",
    "selu": "at::selu({x})",
    "silu": "at::silu({x})",
    "mish": "at::mish({x})",
    "hardsigmoid": "at::hardsigmoid({x})",
    "hardswish": "at::hardswish({x})",
    "softsign": "({x} / (at::abs({x}) + 1))",
    "contiguous": "{x}.contiguous()",
    "t": "{x}.t()",
    "float": "{x}.to(at::kFloat)",
    "sign": "at::sign({x})",
    "square": "at::square({x})",
    "log1p": "at::log1p({x})",
    "sin": "at::sin({x})",
    "cos": "at::cos({x})",
    "reciprocal": "at::reciprocal({x})",
    "floor": "at::floor({x})",
    "ceil": "at::ceil({x})",
    "clone": "{x}.clone()",
    "detach": "{x}.detach()",
    "diag": "at::diag({x})",
    "logsigmoid": "at::log_sigmoid({x})",
    "identity": "{x}",
}
BINARY = {
    "add": "({a} + {b})",
    "sub": "({a} - {b})",
    "mul": "({a} * {b})",
    "truediv": "({a} / {b})",
    "div": "({a} / {b})",
    "matmul": "at::matmul({a}, {b})",
    "mm": "at::mm({a}, {b})",
    "bmm": "at::bmm({a}, {b})",
    "pow": "at::pow({a}, {b})",
    "maximum": "at::maximum({a}, {b})",
    "minimum": "at::minimum({a}, {b})",
    "radd": "({b} + {a})",
    "rsub": "({b} - {a})",
    "rmul": "({b} * {a})",
    "rtruediv": "({b} / {a})",
    "gt": "({a} > {b})",
    "lt": "({a} < {b})",
    "ge": "({a} >= {b})",
    "le": "({a} <= {b})",
    "eq": "({a} == {b})",
}


CLAMPS = ("clamp", "clamp_min", "clamp_max", "hardtanh", "relu6")
ACTIVATION_MODULES = {
    "ReLU": "relu",
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
    "SELU": "selu",
    "SiLU": "silu",
    "Mish": "mish",
    "Hardsigmoid": "hardsigmoid",
    "Hardswish": "hardswish",
    "Softsign": "softsign",
    "Identity": "identity",
    "LogSigmoid": "logsigmoid",
}
"""nn modules that apply one parameterless elementwise function, by the function's name."""


def _clamp_bounds(name: str, args: tuple, kwargs: dict) -> tuple[Any, Any]:
    """(min, max) of a clamp-like call, None where unbounded; NoTranslation for tensor bounds."""
    defaults = {"hardtanh": (-1.0, 1.0), "relu6": (0.0, 6.0)}.get(name, (None, None))
    names = {
        "clamp_min": ["input", "min"],
        "clamp_max": ["input", "max"],
        "hardtanh": ["input", "min_val", "max_val"],
        "relu6": ["input"],
    }.get(name, ["input", "min", "max"])
    b = _bind(args, kwargs, names, {})
    lo = b.get("min", b.get("min_val", defaults[0]))
    hi = b.get("max", b.get("max_val", defaults[1]))
    if hasattr(lo, "op") or hasattr(hi, "op"):
        raise NoTranslation(f"{name} with tensor bounds")
    return lo, hi


def _function_names() -> dict[Any, str]:
    import torch
    import torch.nn.functional as F

    names = {
        getattr(operator, n): n
        for n in ("add", "sub", "mul", "truediv", "floordiv", "matmul", "pow", "neg", "getitem", "gt", "lt", "ge", "le", "eq")
    }
    for n in (
        list(UNARY)
        + list(BINARY)
        + [
            "softmax",
            "log_softmax",
            "sum",
            "mean",
            "amax",
            "amin",
            "max",
            "min",
            "argmax",
            "argmin",
            "prod",
            "cumsum",
            "cumprod",
            "clamp",
            "logsumexp",
            "tril",
            "triu",
            "where",
            "norm",
            "var",
            "std",
            "einsum",
            "flip",
            "flatten",
            "transpose",
            "permute",
            "unsqueeze",
            "squeeze",
            "reshape",
            "cat",
            "stack",
            "gelu",
            "leaky_relu",
            "elu",
            "softplus",
            "hardtanh",
            "relu6",
            "dropout",
            "mse_loss",
            "smooth_l1_loss",
            "cross_entropy",
            "kl_div",
            "cosine_similarity",
            "layer_norm",
            "group_norm",
            "clamp_min",
            "clamp_max",
            "linear",
            "conv2d",
            "scaled_dot_product_attention",
            "flip",
            "adaptive_avg_pool1d",
            "adaptive_avg_pool2d",
            "adaptive_avg_pool3d",
            "tensor",
            "multiply",
            "subtract",
            "divide",
            "smooth_l1_loss",
            "kl_div",
            "cross_entropy",
            "selu",
            "mish",
            "hardswish",
            "hardsigmoid",
            "silu",
            "max_pool1d",
            "max_pool2d",
            "max_pool3d",
        ]
    ):
        for namespace in (torch, F, torch.special):
            if (fn := getattr(namespace, n, None)) is not None and callable(fn):
                names.setdefault(fn, n)
    names[torch.clip] = "clamp"
    names[F.dropout] = "dropout"
    return names


def translate(module: ModuleType, analysis: TaskAnalysis, *, fuse_pointwise: bool = False) -> str:
    """Return the seed's `cuda_source.cu`, or raise NoTranslation naming every operator it lacks (after trying
    the lowering to ATen operators, `lowered`, where the node-by-node translation fails). With
    `fuse_pointwise`, chains of two or more pointwise operators become one generated kernel each
    (`fusion`); a forward without such a chain translates as without it."""
    try:
        model, traced, emitter, source = _emitted(module, analysis)
    except NoTranslation as exc:
        return _lowered(module, analysis, str(exc))
    if not fuse_pointwise:
        return source
    _propagate_shapes(module, traced)
    chains = emitter.pointwise_chains(traced.graph)
    return _Emitter(model, analysis, traced).emit(traced.graph, chains) if chains else source


def pointwise_kernel(module: ModuleType, analysis: TaskAnalysis) -> str | None:
    """The pure-CUDA candidate of a forward that is one chain of pointwise operators applied to its input (ReLU,
    ELU, Swish, ...): the chain's generated kernel (`fusion`) is the whole forward, with nothing of ATen but
    allocation and views. None for any other forward."""
    try:
        _, traced, emitter, _ = _emitted(module, analysis)
    except NoTranslation:  # no translation node by node: no chain either
        return None
    _propagate_shapes(module, traced)
    chain = emitter.whole_chain(traced.graph)
    if chain is None:
        return None
    call, _ = emitter.fused_call(0, chain)
    steps = [emitter.pointwise_step(node)[1] for node in chain]
    return f"""\
// Pure CUDA: the forward is one chain of pointwise operators on its input, computed by one generated kernel.
#include <torch/extension.h>
{fusion.PRELUDE}{fusion.kernel_source(0, steps)}
{declaration(analysis)[:-1]} {{
{state_aliases(analysis)}    return {call};
}}
"""


def _emitted(module: ModuleType, analysis: TaskAnalysis):
    """(model, traced graph module, the emitter that translated it, the seed's source), node by node;
    NoTranslation where torch.fx cannot trace the forward or an operator has no translation."""
    import torch.fx

    model = meta_model(module)
    try:
        traced = torch.fx.symbolic_trace(model)
    except Exception as exc:  # noqa: BLE001 -- control flow on values, unsupported Python
        raise NoTranslation(f"torch.fx cannot trace the forward: {one_line(exc)}") from None
    emitter = _Emitter(model, analysis, traced)
    return model, traced, emitter, emitter.emit(traced.graph)


def _lowered(module: ModuleType, analysis: TaskAnalysis, reason: str) -> str:
    """The seed lowered to ATen operators (`lowered`), for a forward the node-by-node translation cannot take;
    NoTranslation with both reasons if that fails too."""
    from hiera_workloads.kernelbench.lowered import lowered_seed

    try:
        return lowered_seed(module, analysis)
    except NoTranslation as exc:
        raise NoTranslation(f"{reason}; {exc}") from None


def _propagate_shapes(module: ModuleType, traced) -> None:
    """Every node's output shape in `node.meta["tensor_meta"]`, from one run on the meta device; nodes stay
    without one where that run fails (a forward that needs values)."""
    import torch
    from torch.fx.passes.shape_prop import ShapeProp

    try:
        with torch.no_grad():
            ShapeProp(traced).propagate(*meta_inputs(module))
    except Exception:  # noqa: BLE001 -- then no chain is fused: `pointwise_chains` needs the shapes
        pass


def _shape(node) -> tuple[int, ...] | None:
    meta = getattr(node, "meta", {}).get("tensor_meta")
    return tuple(meta.shape) if meta is not None and hasattr(meta, "shape") else None


TENSOR_KINDS = ("input", "new", "view")


class _Emitter:
    def __init__(self, model, analysis: TaskAnalysis, traced) -> None:
        self.model = model
        self.traced = traced
        """The fx GraphModule: it holds the constants the trace made (`torch.tensor(0.5)` in a forward)."""
        self.constants: dict[Any, float | int | bool] = {}
        self.analysis = analysis
        self.functions = _function_names()
        self.state = {a.source: a.name for a in analysis.arguments if a.role in ("parameter", "buffer")}
        self.inputs = [a for a in analysis.arguments if a.role in ("input", "scalar")]
        self.inputs.sort(key=lambda a: a.position)
        self.names: dict[Any, str] = {}
        self.kind: dict[Any, str] = {}
        self.missing: list[str] = []
        self._extends: dict[Any, bool] = {}

    def emit(self, graph, chains: list[list[Any]] | None = None) -> str:
        """The source; each chain of `chains` (from `pointwise_chains`) becomes one call of its fused kernel."""
        chains = chains or []
        tails = {chain[-1]: (k, chain) for k, chain in enumerate(chains)}
        interior = {node for chain in chains for node in chain[:-1]}
        lines, output = [], None
        placeholders = iter(self.inputs)
        for node in graph.nodes:
            if node.op == "placeholder":
                argument = next(placeholders, None)
                if argument is None:
                    raise NoTranslation(f"forward argument `{node.target}` has no value in get_inputs()")
                self.names[node] = argument.name
                self.kind[node] = "scalar" if argument.role == "scalar" else "input"  # a C++ number: never a kernel operand
                continue
            if node.op == "output":
                output = node.args[0]
                continue
            if node.op == "get_attr":
                if node.target in self.state:
                    self.names[node], self.kind[node] = self.state[node.target], "input"
                    continue
                name = f"v{len(self.names)}"
                lines.append(f"    auto {name} = {self.scalar_constant(node)};")
                self.names[node], self.kind[node] = name, "constant"  # on the CPU: never a fused kernel's operand
                continue
            if node in interior:
                continue  # computed inside its chain's kernel; its only user is the chain's next node
            try:
                expr, kind = self.fused_call(*tails[node]) if node in tails else self.expression(node)
            except _Cascade:
                continue  # an earlier node is already named as missing
            except NoTranslation as exc:
                self.missing.append(str(exc))
                continue
            name = f"v{len(self.names)}"
            self.names[node], self.kind[node] = name, kind
            lines.append(f"    auto {name} = {expr};")
        if self.missing:
            unique = list(dict.fromkeys(self.missing))
            raise NoTranslation("no ATen translation for " + "; ".join(unique[:6]))
        if not hasattr(output, "op"):
            raise NoTranslation("the forward returns no traced tensor")
        result = self.names[output]
        if self.kind.get(output) in ("input", "view"):
            result += ".clone()"  # a view of an argument would alias it; the contract wants a new tensor
        # a constant that a fused kernel took in as a literal is not made at all
        used = set(re.findall(r"\bv\d+\b", " ".join(line.split(" = ", 1)[1] for line in lines) + " " + result))
        unused = {self.names[n] for n in self.constants} - used
        body = "\n".join(line for line in lines if line.split(" = ")[0].split()[-1] not in unused)
        kernels = "".join(
            fusion.kernel_source(k, [cast("Pointwise", self.pointwise_step(node))[1] for node in chain])
            for k, chain in enumerate(chains)
        )
        fused = f"{fusion.PRELUDE}{kernels}" if chains else ""
        return f"""\
// Seed: the reference's forward translated node by node (torch.fx) into ATen calls (libraries_pytorch).
#include <torch/extension.h>
{fused}
{declaration(self.analysis)[:-1]} {{
{state_aliases(self.analysis)}{body}
    return {result}.contiguous();
}}
"""

    def scalar_constant(self, node) -> str:
        """A one-element tensor the forward made from a Python number (fx keeps it as a constant attribute),
        as a 0-dim CPU tensor, which ATen's pointwise operators take beside CUDA tensors, as PyTorch does."""
        import torch

        value = getattr(self.traced, node.target, None)
        dtypes = {torch.float32: "at::kFloat", torch.float64: "at::kDouble", torch.int64: "at::kLong", torch.bool: "at::kBool"}
        if not isinstance(value, torch.Tensor) or value.dim() != 0 or value.dtype not in dtypes or value.is_meta:
            raise NoTranslation(f"reads `self.{node.target}`, which is neither a parameter, a buffer nor a number")
        self.constants[node] = value.item()
        return f"at::scalar_tensor({lit(self.constants[node])}, at::TensorOptions().dtype({dtypes[value.dtype]}))"

    # --- fusing pointwise chains -------------------------------------------------------------------

    def pointwise_chains(self, graph) -> list[list[Any]]:
        """Runs of 2+ pointwise nodes, each the only user of the one before, over tensors, each of the shape of
        the value it applies to (after `emit`, which records every node's kind, and `_propagate_shapes`)."""
        steps = {}
        for node in graph.nodes:
            if node.op not in ("call_function", "call_method", "call_module") or self.kind.get(node) != "new":
                continue
            found = self.pointwise_step(node)
            if (
                found is not None
                and all(self.kind.get(t) in TENSOR_KINDS for t in (found[0], *found[1].tensors))
                and _shape(node) is not None
                and _shape(node) == _shape(found[0])
            ):  # operands broadcast to the
                steps[node] = found  # value, not it to them (level 2 task 51: [2048, 1] + [2048, 8192])
        chains: list[list[Any]] = []
        member: dict[Any, list[Any]] = {}
        for node, (main, _) in steps.items():
            if main in member and len(main.users) == 1:
                member[main].append(node)
                member[node] = member[main]
            else:
                member[node] = [node]
                chains.append(member[node])
        return [chain for chain in chains if len(chain) >= 2]

    def whole_chain(self, graph) -> list[Any] | None:
        """The forward's operators when they are one chain of pointwise operators from a forward argument to the
        output, each keeping the argument's shape, with only arguments as tensor operands; else None."""
        nodes = [n for n in graph.nodes if n.op in ("call_function", "call_method", "call_module")]
        output = next(n for n in graph.nodes if n.op == "output").args[0]
        if not nodes or output is not nodes[-1]:
            return None
        for k, node in enumerate(nodes):
            found = self.pointwise_step(node)
            if found is None:
                return None
            main, step = found
            runs_on = main.op == "placeholder" if k == 0 else main is nodes[k - 1] and len(main.users) == 1
            if not runs_on or any(self.kind.get(t) != "input" for t in step.tensors):
                return None
            if _shape(node) is None or _shape(node) != _shape(main):
                return None
        return nodes

    def pointwise_step(self, node) -> tuple[Any, fusion.Step] | None:
        """(the tensor the operator applies to, its fusion step) when `node` is a pointwise operator."""
        args, kwargs = node.args, {k: v for k, v in node.kwargs.items() if k != "inplace"}
        if node.op == "call_module":
            return self._pointwise_module(self.model.get_submodule(node.target), args)
        name = node.target if node.op == "call_method" else self.functions.get(node.target)
        name = ALIASES.get(name, name)
        if name in ("max", "min") and len(args) == 2 and self.kind.get(args[1]) in (*TENSOR_KINDS, "constant"):
            name = "maximum" if name == "max" else "minimum"  # torch.min(x, other): elementwise, not a reduction
        if not args or (not hasattr(args[0], "op") and name not in fusion.BINARY_C):
            return None
        if name in fusion.UNARY_C and len(args) == 1 and not kwargs:
            return args[0], fusion.Step(fusion.UNARY_C[name])
        parameters = {
            "gelu": ["input", "approximate"],
            "leaky_relu": ["input", "negative_slope"],
            "elu": ["input", "alpha"],
            "softplus": ["input", "beta", "threshold"],
        }
        if (name in parameters or name in CLAMPS) and hasattr(args[0], "op"):
            try:
                if name in CLAMPS:
                    lo, hi = _clamp_bounds(name, args, kwargs)
                    bound = {"min": lo, "max": hi}
                else:
                    bound = _bind(args, kwargs, parameters[name], {})
            except NoTranslation:
                return None
            return args[0], fusion.Step(fusion.parametric("clamp" if name in CLAMPS else name, bound))
        if name in fusion.BINARY_C and len(args) == 2 and not kwargs:
            a, b = args
            if not hasattr(a, "op") and not hasattr(b, "op"):
                return None
            main, other, main_first = (a, b, True) if hasattr(a, "op") else (b, a, False)
            if main_first and hasattr(b, "op") and not self._extends_chain(a) and self._extends_chain(b):
                main, other, main_first = b, a, False  # x * sigmoid(x): the chain runs through sigmoid
            tensors: tuple[Any, ...]
            if other is main:
                operand, tensors = "{v}", ()
            elif isinstance(self.constants.get(other), float):  # a number the forward made a 0-dim tensor of
                operand, tensors = fusion.flit(self.constants[other]), ()
            elif hasattr(other, "op"):
                operand, tensors = "{t0}", (other,)
            elif isinstance(other, (int, float)) and not isinstance(other, bool):
                operand, tensors = fusion.flit(other), ()
            else:
                return None
            first, second = ("{v}", operand) if main_first else (operand, "{v}")
            return main, fusion.Step(fusion.BINARY_C[name].format(a=first, b=second), tensors)
        return None

    def _extends_chain(self, node) -> bool:
        """Whether `node` is a pointwise operator whose only user is the next step (so a chain can run on)."""
        if node not in self._extends:
            self._extends[node] = (
                node.op in ("call_function", "call_method", "call_module")
                and len(node.users) == 1
                and self.pointwise_step(node) is not None
            )
        return self._extends[node]

    def _pointwise_module(self, mod, args) -> tuple[Any, fusion.Step] | None:
        if len(args) != 1 or not hasattr(args[0], "op"):
            return None
        kind = type(mod).__name__
        if ACTIVATION_MODULES.get(kind) in fusion.UNARY_C:
            return args[0], fusion.Step(fusion.UNARY_C[ACTIVATION_MODULES[kind]])
        parametric = {
            "GELU": ("gelu", lambda m: {"approximate": m.approximate}),
            "LeakyReLU": ("leaky_relu", lambda m: {"negative_slope": m.negative_slope}),
            "ELU": ("elu", lambda m: {"alpha": m.alpha}),
            "Softplus": ("softplus", lambda m: {"beta": m.beta, "threshold": m.threshold}),
            "Hardtanh": ("clamp", lambda m: {"min": m.min_val, "max": m.max_val}),
            "ReLU6": ("clamp", lambda m: {"min": m.min_val, "max": m.max_val}),
        }
        if kind in parametric:
            name, params = parametric[kind]
            return args[0], fusion.Step(fusion.parametric(name, params(mod)))
        return None

    def fused_call(self, index: int, chain: list[Any]) -> tuple[str, str]:
        head, _ = cast("Pointwise", self.pointwise_step(chain[0]))  # a chain's members are pointwise
        operands = [t for node in chain for t in cast("Pointwise", self.pointwise_step(node))[1].tensors]
        return f"pointwise_{index}({self.arg(head)}, {{{', '.join(self.arg(t) for t in operands)}}})", "new"

    def arg(self, value: Any) -> str:
        if hasattr(value, "op"):
            if value not in self.names:
                raise _Cascade(value.name)
            return self.names[value]
        if isinstance(value, (tuple, list)) and value and any(hasattr(v, "op") for v in value):
            return "{" + ", ".join(self.arg(v) for v in value) + "}"
        return lit(value)

    def expression(self, node) -> tuple[str, str]:
        if node.op == "call_module":
            expr, kind = self.module_call(self.model.get_submodule(node.target), node.args, node.kwargs)
            if kind == "view" and self.kind.get(node.args[0]) not in ("input", "view"):
                kind = "new"
            return expr, kind
        if node.op == "call_method":
            name = node.target
        else:
            name = self.functions.get(node.target)
            if name is None and node.target is getattr:
                name = "getattr"
            if name is None:
                raise NoTranslation(getattr(node.target, "__name__", str(node.target)))
        expr, kind = self.call(name, node.args, node.kwargs, node)
        if kind == "view" and node.args and self.kind.get(node.args[0]) not in ("input", "view"):
            kind = "new"  # a view of a tensor this call made aliases no argument
        return expr, kind

    def call(self, name: str, args: tuple, kwargs: dict, node) -> tuple[str, str]:
        a = self.arg
        name = ALIASES.get(name, name)
        kwargs = {k: v for k, v in kwargs.items() if k != "inplace" and LOSS_DEFAULTS.get(k, _UNSET) != v}
        if name in ("add", "sub") and ("alpha" in kwargs):
            raise NoTranslation(f"{name}(alpha=)")
        if name in UNARY and len(args) == 1 and not kwargs:
            return UNARY[name].format(x=a(args[0])), "view" if name in VIEWS else "new"
        if name in BINARY and len(args) == 2 and not kwargs:
            return BINARY[name].format(a=a(args[0]), b=a(args[1])), "new"
        x = a(args[0]) if args else a(kwargs["input"]) if "input" in kwargs else None  # torch.fx keeps `input=x`
        if name in ("softmax", "log_softmax"):
            b = _bind(args, kwargs, ["input", "dim"], {"dim": None})
            return f"at::{name}({x}, {lit(b['dim'])})", "new"
        if name in ("sum", "mean", "amax", "amin", "logsumexp", "prod"):
            b = _bind(args, kwargs, ["input", "dim", "keepdim"], {"dim": None, "keepdim": False})
            if b["dim"] is None and name in ("sum", "mean", "prod"):
                return f"at::{name}({x})", "new"
            if name == "prod":
                return f"at::prod({x}, {lit(b['dim'])}, {lit(b['keepdim'])})", "new"
            return f"at::{name}({x}, {_dims(b['dim'])}, {lit(b['keepdim'])})", "new"
        if name in ("max", "min") and len(args) + len(kwargs) >= 2:
            b = _bind(args, kwargs, ["input", "dim", "keepdim"], {"keepdim": False})
            if hasattr(b["dim"], "op"):
                return BINARY["maximum" if name == "max" else "minimum"].format(a=x, b=a(b["dim"])), "new"
            return f"at::{name}({x}, {lit(b['dim'])}, {lit(b['keepdim'])})", "tuple"
        if name in ("max", "min"):
            return f"at::{name}({x})", "new"
        if name in ("argmax", "argmin"):
            b = _bind(args, kwargs, ["input", "dim", "keepdim"], {"dim": None, "keepdim": False})
            return f"at::{name}({x}, {_opt(b['dim'])}, {lit(b['keepdim'])})", "new"
        if name in ("cumsum", "cumprod"):
            b = _bind(args, kwargs, ["input", "dim"], {})
            if kwargs.get("dtype") is not None:
                raise NoTranslation(f"{name}(dtype=)")
            return f"at::{name}({x}, {lit(b['dim'])})", "new"
        if name in CLAMPS:
            lo, hi = _clamp_bounds(name, args, kwargs)
            return f"at::clamp({x}, {_opt(lo)}, {_opt(hi)})", "new"
        if name == "gelu":
            b = _bind(args, kwargs, ["input", "approximate"], {"approximate": "none"})
            return f'at::gelu({x}, "{b["approximate"]}")', "new"
        if name == "leaky_relu":
            b = _bind(args, kwargs, ["input", "negative_slope", "inplace"], {"negative_slope": 0.01})
            return f"at::leaky_relu({x}, {lit(float(b['negative_slope']))})", "new"
        if name == "elu":
            b = _bind(args, kwargs, ["input", "alpha", "inplace"], {"alpha": 1.0})
            return f"at::elu({x}, {lit(float(b['alpha']))})", "new"
        if name == "softplus":
            b = _bind(args, kwargs, ["input", "beta", "threshold"], {"beta": 1.0, "threshold": 20.0})
            return f"at::softplus({x}, {lit(float(b['beta']))}, {lit(float(b['threshold']))})", "new"
        if name == "dropout":
            b = _bind(args, kwargs, ["input", "p", "training", "inplace"], {"p": 0.5, "training": True})
            if b["p"] == 0 or not b["training"]:
                return cast(str, x), "view"  # `input` is bound: x is it
            return f"at::dropout({x}, {lit(float(b['p']))}, true)", "new"
        if name in ("tril", "triu"):
            b = _bind(args, kwargs, ["input", "diagonal"], {"diagonal": 0})
            return f"at::{name}({x}, {lit(b['diagonal'])})", "new"
        if name in ("view", "reshape"):
            shape = args[1:] if len(args) > 2 or not isinstance(args[1] if len(args) > 1 else None, (tuple, list)) else args[1]
            shape = kwargs.get("shape", shape)
            return f"{x}.{name}({self.int_list(shape)})", "view"
        if name == "permute":
            dims = args[1:] if len(args) > 2 or not isinstance(args[1], (tuple, list)) else args[1]
            return f"{x}.permute({self.int_list(dims)})", "view"
        if name == "transpose":
            b = _bind(args, kwargs, ["input", "dim0", "dim1"], {})
            return f"{x}.transpose({lit(b['dim0'])}, {lit(b['dim1'])})", "view"
        if name in ("unsqueeze", "squeeze"):
            b = _bind(args, kwargs, ["input", "dim"], {"dim": None})
            return (f"{x}.{name}({lit(b['dim'])})" if b["dim"] is not None else f"{x}.squeeze()"), "view"
        if name == "flatten":
            b = _bind(args, kwargs, ["input", "start_dim", "end_dim"], {"start_dim": 0, "end_dim": -1})
            return f"{x}.flatten({lit(b['start_dim'])}, {lit(b['end_dim'])})", "view"
        if name == "size":
            b = _bind(args, kwargs, ["input", "dim"], {"dim": None})
            if b["dim"] is None:
                return f"{x}.sizes().vec()", "sizes"
            return f"{x}.size({lit(b['dim'])})", "int"
        if name == "getattr" and args[1] == "shape":
            return f"{x}.sizes().vec()", "sizes"
        if name == "getattr" and self.kind.get(args[0]) == "tuple" and args[1] in ("values", "indices"):
            return f"std::get<{0 if args[1] == 'values' else 1}>({x})", "new"
        if name == "getattr" and args[1] in ("T", "mT"):
            return (f"{x}.t()" if args[1] == "T" else f"{x}.mT()"), "view"
        if name == "getattr" and args[1] == "device":
            return f"{x}.device()", "device"
        if name == "tensor" and isinstance(args[0], (int, float)) and set(kwargs) <= {"device", "dtype"}:
            if kwargs.get("dtype") is not None:
                raise NoTranslation("tensor(dtype=)")
            device = a(kwargs["device"]) if hasattr(kwargs.get("device"), "op") else "at::kCPU"
            kind_ = "at::kFloat" if isinstance(args[0], float) else "at::kLong"
            return f"at::scalar_tensor({lit(args[0])}, at::TensorOptions().dtype({kind_}).device({device}))", "new"
        if name == "norm":
            b = _bind(args, kwargs, ["input", "p", "dim", "keepdim"], {"p": "fro", "dim": None, "keepdim": False})
            if b["dim"] is None and b["p"] in ("fro", 2, 2.0, None):
                return f"at::norm({x})", "new"
            if b["p"] == "fro" or isinstance(b["p"], str):
                raise NoTranslation(f"norm(p={b['p']!r}, dim=)")
            return f"at::linalg_vector_norm({x}, {lit(float(b['p']))}, {_dims(b['dim'])}, {lit(b['keepdim'])})", "new"
        if name == "flip":
            b = _bind(args, kwargs, ["input", "dims"], {})
            return f"at::flip({x}, {_dims(b['dims'])})", "new"
        if name.startswith("adaptive_avg_pool"):
            n = int(name[-2])
            b = _bind(args, kwargs, ["input", "output_size"], {})
            return f"at::{name}({x}, {_pair(b['output_size'], n)})", "new"
        if name == "cross_entropy" and len(args) == 2 and not kwargs:
            return f"at::cross_entropy_loss({x}, {a(args[1])})", "new"
        if name == "smooth_l1_loss" and len(args) == 2 and not kwargs:
            return f"at::smooth_l1_loss({x}, {a(args[1])})", "new"
        if name == "kl_div" and len(args) == 2 and kwargs.get("reduction") == "batchmean" and len(kwargs) == 1:
            return f"(at::kl_div({x}, {a(args[1])}, at::Reduction::Sum) / {x}.size(0))", "new"
        if name == "scaled_dot_product_attention" and len(args) == 3 and not kwargs:
            return f"at::scaled_dot_product_attention({x}, {a(args[1])}, {a(args[2])})", "new"
        if name == "getitem":
            source_kind = self.kind.get(args[0])
            if source_kind == "lstm" and args[1] in (0, 1):  # at::lstm is flat (out, h, c); nn.LSTM is (out, (h, c))
                return (
                    ("std::get<0>(%s)" % x, "new")
                    if args[1] == 0
                    else (f"std::make_tuple(std::get<1>({x}), std::get<2>({x}))", "tuple")
                )
            if source_kind == "tuple" and isinstance(args[1], int):
                return f"std::get<{args[1]}>({x})", "new"
            if source_kind == "sizes" and isinstance(args[1], int):
                return f"{x}[{args[1] if args[1] >= 0 else f'{x}.size() - {-args[1]}'}]", "int"
            if source_kind in TENSOR_KINDS:
                return self.indexed(cast(str, x), args[1]), "view"  # args[1]: x is args[0]'s
            raise NoTranslation("getitem")
        if name == "linear":
            b = _bind(args, kwargs, ["input", "weight", "bias"], {"bias": None})
            return f"at::linear({x}, {a(b['weight'])}, {self.optional_tensor(b['bias'])})", "new"
        if name == "einsum":
            return f'at::einsum("{args[0]}", {{{", ".join(a(t) for t in args[1:])}}})', "new"
        if name == "where" and len(args) == 3:
            return f"at::where({a(args[0])}, {a(args[1])}, {a(args[2])})", "new"
        if name in ("cat", "stack"):
            b = _bind(args, kwargs, ["tensors", "dim"], {"dim": 0})
            if not isinstance(b["tensors"], (tuple, list)):
                raise NoTranslation(f"{name} of a computed sequence")
            return f"at::{name}({{{', '.join(a(t) for t in b['tensors'])}}}, {lit(b['dim'])})", "new"
        if name == "floordiv" and len(args) == 2 and all(isinstance(v, int) or self.kind.get(v) == "int" for v in args):
            return f"({a(args[0])} / {a(args[1])})", "int"  # sizes: non-negative, so C++ division is floor division
        if name.startswith("max_pool"):
            n = int(name[-2])
            b = _bind(
                args,
                kwargs,
                ["input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"],
                {"stride": None, "padding": 0, "dilation": 1, "ceil_mode": False, "return_indices": False},
            )
            if b["return_indices"]:
                raise NoTranslation(f"{name}(return_indices=True)")
            stride = b["stride"] if b["stride"] not in (None, [], ()) else b["kernel_size"]
            return (
                f"at::{name}({x}, {_pair(b['kernel_size'], n)}, {_pair(stride, n)}, {_pair(b['padding'], n)}, "
                f"{_pair(b['dilation'], n)}, {lit(b['ceil_mode'])})"
            ), "new"
        if name == "mse_loss" and not kwargs:
            return f"at::mse_loss({x}, {a(args[1])})", "new"
        raise NoTranslation(f"{name}({', '.join(type(v).__name__ for v in args[1:])})" if args else name)

    def indexed(self, x: str, index: Any) -> str:
        """`x[index]` for basic indexing (ints, slices, None) as select / slice / unsqueeze views."""
        expr, dim = x, 0
        for item in index if isinstance(index, tuple) else (index,):
            if isinstance(item, slice):
                step = 1 if item.step is None else item.step
                if not isinstance(step, int) or step < 1:
                    raise NoTranslation(f"a slice with step {step!r}")
                if (item.start, item.stop, step) != (None, None, 1):
                    start, stop = ("std::nullopt" if v is None else self.arg(v) for v in (item.start, item.stop))
                    expr = f"{expr}.slice({dim}, {start}, {stop}, {step})"
                dim += 1
            elif item is None:
                expr = f"{expr}.unsqueeze({dim})"
                dim += 1
            elif (isinstance(item, int) and not isinstance(item, bool)) or self.kind.get(item) == "int":
                expr = f"{expr}.select({dim}, {self.arg(item)})"
            else:
                raise NoTranslation(f"tensor indexing with {type(item).__name__}")
        return expr

    def int_list(self, values) -> str:
        return "{" + ", ".join(self.arg(v) for v in values) + "}"

    def optional_tensor(self, value) -> str:
        return "{}" if value is None else self.arg(value)

    def module_call(self, mod, args: tuple, kwargs: dict) -> tuple[str, str]:
        import torch.nn as nn

        kind = type(mod).__name__
        x = self.arg(args[0])
        path = next(p for p, m in self.model.named_modules() if m is mod)

        def state(attr: str) -> str:
            if getattr(mod, attr, None) is None:
                return "{}"
            return self.state[f"{path}.{attr}" if path else attr]

        if kind in ACTIVATION_MODULES:
            return UNARY[ACTIVATION_MODULES[kind]].format(x=x), "view" if kind == "Identity" else "new"
        if kind == "Linear":
            return f"at::linear({x}, {state('weight')}, {state('bias')})", "new"
        if kind in ("Conv1d", "Conv2d", "Conv3d"):
            n = int(kind[-2])
            # a braced list would also match the overload taking padding as a string ("same"/"valid")
            padding = lit(mod.padding) if isinstance(mod.padding, str) else f"at::IntArrayRef({lit(tuple(mod.padding))})"
            if mod.padding_mode != "zeros":
                raise NoTranslation(f"{kind}(padding_mode={mod.padding_mode})")
            return (
                f"at::{kind.lower()}({x}, {state('weight')}, {state('bias')}, {_pair(mod.stride, n)}, "
                f"{padding}, {_pair(mod.dilation, n)}, {mod.groups})"
            ), "new"
        if kind in ("ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"):
            n = int(kind[-2])
            if len(args) > 1:
                raise NoTranslation(f"{kind}(output_size=)")
            return (
                f"at::conv_transpose{n}d({x}, {state('weight')}, {state('bias')}, {_pair(mod.stride, n)}, "
                f"{_pair(mod.padding, n)}, {_pair(mod.output_padding, n)}, {mod.groups}, {_pair(mod.dilation, n)})"
            ), "new"
        if kind in ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d"):
            training = mod.training or not mod.track_running_stats
            # training mode normalises with the batch's statistics; the running ones are not passed, because
            # updating them would write the call's arguments
            stats = "{}, {}" if training else f"{state('running_mean')}, {state('running_var')}"
            return (
                f"at::batch_norm({x}, {state('weight')}, {state('bias')}, {stats}, {lit(training)}, "
                f"{lit(float(mod.momentum or 0.0))}, {lit(float(mod.eps))}, true)"
            ), "new"
        if kind in ("InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"):
            use_input_stats = mod.training or not mod.track_running_stats
            stats = "{}, {}" if use_input_stats else f"{state('running_mean')}, {state('running_var')}"
            return (
                f"at::instance_norm({x}, {state('weight')}, {state('bias')}, {stats}, {lit(use_input_stats)}, "
                f"{lit(float(mod.momentum or 0.0))}, {lit(float(mod.eps))}, true)"
            ), "new"
        if kind == "GroupNorm":
            return f"at::group_norm({x}, {mod.num_groups}, {state('weight')}, {state('bias')}, {lit(float(mod.eps))})", "new"
        if kind == "LayerNorm":
            return (
                f"at::layer_norm({x}, {lit(tuple(mod.normalized_shape))}, {state('weight')}, {state('bias')}, "
                f"{lit(float(mod.eps))})"
            ), "new"
        if kind in ("MaxPool1d", "MaxPool2d", "MaxPool3d"):
            n = int(kind[-2])
            if mod.return_indices:
                raise NoTranslation(f"{kind}(return_indices=True)")
            stride = mod.stride if mod.stride is not None else mod.kernel_size
            return (
                f"at::max_pool{n}d({x}, {_pair(mod.kernel_size, n)}, {_pair(stride, n)}, {_pair(mod.padding, n)}, "
                f"{_pair(mod.dilation, n)}, {lit(mod.ceil_mode)})"
            ), "new"
        if kind in ("AvgPool1d", "AvgPool2d", "AvgPool3d"):
            n = int(kind[-2])
            stride = mod.stride if mod.stride is not None else mod.kernel_size
            common = (
                f"at::avg_pool{n}d({x}, {_pair(mod.kernel_size, n)}, {_pair(stride, n)}, {_pair(mod.padding, n)}, "
                f"{lit(mod.ceil_mode)}, {lit(mod.count_include_pad)}"
            )
            if n == 1:
                return common + ")", "new"
            return common + f", {_opt(mod.divisor_override)})", "new"
        if kind in ("AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d"):
            n = int(kind[-2])
            if not all(
                isinstance(v, int) for v in (mod.output_size if isinstance(mod.output_size, tuple) else (mod.output_size,))
            ):
                raise NoTranslation(f"{kind}(output_size with None)")
            return f"at::adaptive_avg_pool{n}d({x}, {_pair(mod.output_size, n)})", "new"
        if kind in ("Softmax", "LogSoftmax"):
            return f"at::{'softmax' if kind == 'Softmax' else 'log_softmax'}({x}, {lit(mod.dim)})", "new"
        if kind == "LeakyReLU":
            return f"at::leaky_relu({x}, {lit(float(mod.negative_slope))})", "new"
        if kind == "GELU":
            return f'at::gelu({x}, "{mod.approximate}")', "new"
        if kind == "ELU":
            return f"at::elu({x}, {lit(float(mod.alpha))})", "new"
        if kind in ("Hardtanh", "ReLU6"):
            return f"at::clamp({x}, {lit(float(mod.min_val))}, {lit(float(mod.max_val))})", "new"
        if kind == "Softplus":
            return f"at::softplus({x}, {lit(float(mod.beta))}, {lit(float(mod.threshold))})", "new"
        if kind in ("Dropout", "Dropout2d", "Dropout3d"):
            if mod.p == 0 or not mod.training:
                return x, "view"
            if kind != "Dropout":
                raise NoTranslation(f"{kind}(p={mod.p}) in training mode")
            return f"at::dropout({x}, {lit(float(mod.p))}, true)", "new"
        if kind == "TripletMarginLoss" and len(args) == 3 and not kwargs:
            reduction = {"none": "None", "mean": "Mean", "sum": "Sum"}[mod.reduction]
            return (
                f"at::triplet_margin_loss({x}, {self.arg(args[1])}, {self.arg(args[2])}, {lit(float(mod.margin))}, "
                f"{lit(float(mod.p))}, {lit(float(mod.eps))}, {lit(mod.swap)}, at::Reduction::{reduction})"
            ), "new"
        if kind in ("LSTM", "GRU"):
            if len(args) < 2 or args[1] is None or cast(int, getattr(mod, "proj_size", 0)):  # cast: else mypy wants a bool
                raise NoTranslation(f"nn.{kind} without an initial state, or with proj_size")
            weights = ", ".join(self.state[f"{path}.{n}" if path else n] for n in mod._flat_weights_names)
            flags = (
                f"{lit(mod.bias)}, {mod.num_layers}, {lit(float(mod.dropout))}, {lit(mod.training)}, "
                f"{lit(mod.bidirectional)}, {lit(mod.batch_first)}"
            )
            if kind == "GRU":
                return f"at::gru({x}, {self.arg(args[1])}, {{{weights}}}, {flags})", "tuple"
            if not isinstance(args[1], (tuple, list)) or len(args[1]) != 2:
                raise NoTranslation("nn.LSTM's state is not an (h0, c0) pair")
            return f"at::lstm({x}, {{{self.arg(args[1][0])}, {self.arg(args[1][1])}}}, {{{weights}}}, {flags})", "lstm"
        if kind == "Flatten":
            return f"{x}.flatten({mod.start_dim}, {mod.end_dim})", "view"
        if isinstance(mod, nn.Module):
            raise NoTranslation(f"nn.{kind}")
        raise NoTranslation(kind)
