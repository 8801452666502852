"""A KernelBench task's frozen cuda contract: the binding, the wrapper, the reference and, for levels 2-3,
the parameters' semantics, as the paper generates them."""

from __future__ import annotations

import json
from typing import Any

from hiera_core.records import Contract, Task
from hiera_workloads.kernelbench.analysis import INIT_SEED, Argument, TaskAnalysis

SOURCE_FILENAME = "cuda_source.cu"
BINDING_FILENAME = "cpp_source.cpp"
ENTRY = "forward"


PACK_STATE_ABOVE = 400
"""Arguments above which the model's state reaches `forward` as one `std::vector<torch::Tensor> state`.
pybind11 builds a function's signature at compile time: g++ built DenseNet121's 380 arguments and stopped
at its constexpr limits on ResNet101's 627 and DenseNet201's 620 (KernelBench level 3)."""


def packed(analysis: TaskAnalysis) -> bool:
    return len(analysis.arguments) > PACK_STATE_ABOVE


def _state(analysis: TaskAnalysis) -> list[Argument]:
    return [a for a in analysis.arguments if a.role in ("parameter", "buffer")]


def declaration(analysis: TaskAnalysis) -> str:
    params = [f"{a.cpp_type} {a.name}" for a in analysis.arguments if not packed(analysis) or a.role in ("input", "scalar")]
    if packed(analysis):
        inputs = sum(a.role == "input" for a in analysis.arguments)
        params.insert(inputs, "const std::vector<torch::Tensor>& state")
    return f"torch::Tensor {ENTRY}({', '.join(params)});"


def state_aliases(analysis: TaskAnalysis) -> str:
    """For a packed contract, lines naming each state tensor as the unpacked contract does; else nothing."""
    if not packed(analysis):
        return ""
    return "".join(f"    const torch::Tensor& {a.name} = state[{i}];\n" for i, a in enumerate(_state(analysis)))


def contract(task: Task, analysis: TaskAnalysis, groundtruth: str) -> Contract:
    files = {
        BINDING_FILENAME: _binding(analysis),
        "torch_demo.py": _torch_demo(analysis),
        "groundtruth.py": groundtruth,
    }
    if task.params["level"] >= 2:
        files["params_semantics.json"] = json.dumps(params_semantics(analysis), indent=1) + "\n"
    return Contract(source_filename=SOURCE_FILENAME, interface=_interface(task, analysis), files=files, binding=BINDING_FILENAME)


def _describe(a: Argument) -> str:
    if a.role == "scalar":
        return f"`{a.name}`: {a.cpp_type} forward argument `{a.source}` (called with {a.value!r})"
    where = f"forward argument `{a.source}`" if a.role == "input" else f"the model's {a.role} `{a.source}`"
    return f"`{a.name}`: {a.dtype} CUDA tensor of shape {list(a.dims)}, {where}"


def _interface(task: Task, analysis: TaskAnalysis) -> str:
    if packed(analysis):
        state = {a.name: i for i, a in enumerate(_state(analysis))}
        arguments = "\n".join(
            f"  - {'`state[%d]` = ' % state[a.name] if a.name in state else ''}{_describe(a)}" for a in analysis.arguments
        )
    else:
        arguments = "\n".join(f"  - {_describe(a)}" for a in analysis.arguments)
    return f"""\
{declaration(analysis)}

`{SOURCE_FILENAME}` defines this function (include <torch/extension.h>); the frozen `{BINDING_FILENAME}` binds it
as `{ENTRY}`. It computes exactly what `Model.forward` in `groundtruth.py` computes (KernelBench level
{task.params["level"]}, task {task.params["id"]} `{task.name}`), with the model's state passed explicitly:
{arguments}
Return a new contiguous {analysis.output_dtype} CUDA tensor of shape {list(analysis.output_shape)}; never write an
argument. Compute in FP32 or wider (no half, bfloat16 or TF32). Launch on `at::cuda::getCurrentCUDAStream()`
and create no streams or threads: the call is timed from its start until the device is idle. The task has one
shape (KernelBench's); it is checked on several seeds and two input distributions (as generated, and x*2+0.5)."""


def _binding(analysis: TaskAnalysis) -> str:
    if packed(analysis):
        return _packed_binding(analysis)
    args = ", ".join(
        f'py::arg("{a.name}")' + (f" = {_cpp_literal(a.value)}" if a.role == "scalar" else "") for a in analysis.arguments
    )
    return f"""\
// The frozen binding of a KernelBench contract: cuda_source.cu defines {ENTRY}.
#include <torch/extension.h>

{declaration(analysis)}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{
    m.def("{ENTRY}", &{ENTRY}, "Model.forward with the model's parameters and buffers as arguments", {args});
}}
"""


def _packed_binding(analysis: TaskAnalysis) -> str:
    inputs = [a for a in analysis.arguments if a.role == "input"]
    scalars = [_cpp_literal(a.value) for a in analysis.arguments if a.role == "scalar"]
    total = len(inputs) + len(_state(analysis))
    call = ", ".join([f"args[{i}].cast<torch::Tensor>()" for i in range(len(inputs))] + ["state"] + scalars)
    return f"""\
// The frozen binding of a KernelBench contract: cuda_source.cu defines {ENTRY}. Python passes the inputs,
// then every parameter and buffer, as positional tensors ({total} in all); they are gathered into `state`
// here, since a typed signature this long is more than pybind11 and g++ compile. Scalars keep their
// get_inputs() values.
#include <torch/extension.h>

{declaration(analysis)}

torch::Tensor {ENTRY}_positional(py::args args) {{
    TORCH_CHECK(args.size() == {total}, "{ENTRY} takes {total} tensors ({len(inputs)} inputs, then the model's state), got ", args.size());
    std::vector<torch::Tensor> state;
    state.reserve({total - len(inputs)});
    for (size_t i = {len(inputs)}; i < args.size(); ++i) state.push_back(args[i].cast<torch::Tensor>());
    return {ENTRY}({call});
}}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{
    m.def("{ENTRY}", &{ENTRY}_positional, "Model.forward with the model's parameters and buffers as arguments");
}}
"""


def _cpp_literal(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return (
            repr(value)
            if value == value and abs(value) != float("inf")
            else ("NAN" if value != value else ("INFINITY" if value > 0 else "-INFINITY"))
        )
    return str(value)


def _torch_demo(analysis: TaskAnalysis) -> str:
    state = [a for a in analysis.arguments if a.role in ("parameter", "buffer")]
    registrations = (
        "\n".join(
            f'        self.register_{a.role}("{a.name}", '
            + (
                f'torch.nn.Parameter(reference.get_parameter("{a.source}").detach().clone()))'
                if a.role == "parameter"
                else f'reference.get_buffer("{a.source}").detach().clone())'
            )
            for a in state
        )
        or "        pass  # the reference holds no parameters or buffers"
    )
    forward_args = [a for a in analysis.arguments if a.role in ("input", "scalar")]
    forward_args.sort(key=lambda a: a.position)
    signature = ", ".join(a.name for a in forward_args)
    call = ", ".join(
        [a.name for a in analysis.tensor_arguments if a.role == "input"]
        + [f"self.{a.name}" for a in state]
        + [a.name for a in analysis.arguments if a.role == "scalar" and not packed(analysis)]
    )
    return f'''\
"""How a candidate is used from PyTorch: `ModelNew` holds the same parameters and buffers as `Model`, initialised
identically (seed {INIT_SEED}, the same init inputs), and its forward calls the extension with them."""

import torch
from torch.utils.cpp_extension import load

from groundtruth import Model, get_init_inputs, get_inputs  # noqa: F401

SEED = {INIT_SEED}


class ModelNew(torch.nn.Module):
    def __init__(self, *init_inputs, directory: str = "."):
        super().__init__()
        torch.manual_seed(SEED)
        reference = Model(*init_inputs)
{registrations}
        self.training = reference.training
        self.directory = directory
        self.extension = None

    def forward(self, {signature}):
        if self.extension is None:
            self.extension = load(name="kernelbench_candidate", extra_cuda_cflags=["-O3"],
                                  sources=[f"{{self.directory}}/{BINDING_FILENAME}", f"{{self.directory}}/{SOURCE_FILENAME}"])
        return self.extension.{ENTRY}({call})
'''


def params_semantics(analysis: TaskAnalysis) -> dict:
    """Each argument's role, shape, dtype and constraints, and the sizes it shares with the other arguments in
    the traced call (a dependency when the sizes must agree; possibly a coincidence)."""
    arguments = []
    tensors = analysis.tensor_arguments
    for a in analysis.arguments:
        entry: dict[str, Any] = {"name": a.name, "role": a.role, "source": a.source}
        if a.role == "scalar":
            entry |= {"type": a.cpp_type, "value": a.value, "constraints": ["fixed by get_inputs(); bound as the default"]}
        else:
            entry |= {
                "shape": list(a.dims),
                "dtype": a.dtype,
                "constraints": [f"{a.dtype}", "CUDA", "contiguous", "read-only"],
                "dependencies": [
                    f"{a.name}.shape[{i}] == {b.name}.shape[{j}] == {size}"
                    for i, size in enumerate(a.dims)
                    if size > 1
                    for b in tensors
                    if b is not a
                    for j, other in enumerate(b.dims)
                    if other == size and (b.role != a.role or b.role == "input")
                ],
            }
        arguments.append(entry)
    return {
        "arguments": arguments,
        "output": {"shape": list(analysis.output_shape), "dtype": analysis.output_dtype},
        "traced_on": analysis.traced_on,
        "training_mode": analysis.training,
        "init_seed": INIT_SEED,
    }
