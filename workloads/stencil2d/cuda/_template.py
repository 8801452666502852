"""The expert's CUDA sources for the stencil: the template's knobs, and rendering a choice of them from
the kernel files in kernels/.

Each kernels/*.cu file is one piece of a source, exactly as it appears there, with string.Template
placeholders (${name}: CUDA never writes a dollar sign, so its braces need no escaping). A piece that comes
in several shapes is one file per shape (ring_checked.cu, ring_split.cu); a piece that differs only by a
token (a name, a template argument, an extra parameter) takes the token as a placeholder. The blank lines
around a file's text are not part of it: the renderer puts two between the pieces of a kernel.
"""

from __future__ import annotations

import functools
import itertools
import string
from collections.abc import Mapping
from importlib import resources
from typing import Any, ClassVar

from hiera_core.protocols import Knob
from hiera_core.records import Task


def seed(task: Task) -> tuple[str, dict[str, Any], str]:
    """The naive kernel: one output per thread from global memory, every knob at its default."""
    template = CudaStencilTemplate(radius=task.params["radius"], steps=task.params["steps"])
    params = template.defaults()
    return template.render(params), params, template.describe(params)


def templates(task: Task) -> list[CudaStencilTemplate]:
    return [CudaStencilTemplate(radius=task.params["radius"], steps=task.params["steps"])]


class CudaStencilTemplate:
    """The CUDA sources an expert writes for the stencil, from the naive seed to register streaming,
    plus cuDNN called directly (cuda_libraries) and ATen's conv2d or FFT (libraries_pytorch).

    Every combination of knob values renders a complete `cuda_source.cu` that works for any n >= 1 and
    steps >= 1; the radius is the task's, a compile-time constant. When `aten` is not "none" it decides
    the source alone; otherwise `cudnn` does; otherwise the five kernel knobs shape a custom kernel.
    `steps` is the task's: `fuse_steps` (two steps per launch in the ring kernel) only matters when it is
    more than 1.
    """

    name = "stencil2d-cuda"
    knobs: ClassVar[dict[str, Knob]] = {
        "tiling": Knob(values=("global", "smem", "smem_stream", "ring"), direction="R", space="pure_cuda"),
        "block": Knob(values=("32x8", "64x4", "32x16", "128x2"), direction="P", space="pure_cuda"),
        "outputs_per_thread": Knob(values=(1, 4, 8, 16), direction="T", space="pure_cuda"),
        "boundary": Knob(values=("checked", "split"), direction="C", space="pure_cuda"),
        "vector_loads": Knob(values=(False, True), direction="M", space="pure_cuda"),
        # The ring kernel's own shape (tiling=ring): each value's first entry is the best we measured on
        # the H200 (research/explore_stencil_kernels.py), the others are the neighbours a search moves to.
        "ring_columns": Knob(values=(2, 4), direction="T", space="pure_cuda"),
        "ring_threads": Knob(values=(128, 64, 256), direction="P", space="pure_cuda"),
        "strip_rows": Knob(values=(120, 60, 240), direction="M", space="pure_cuda"),
        "ring_stages": Knob(values=(4, 3, 6), direction="R", space="pure_cuda"),
        # Temporal blocking in the ring kernel (tiling=ring, steps > 1): two steps per launch, the
        # intermediate grid kept on chip (the explorer's fused2, this kernel's origin: 0.516 ms per step at
        # n=10240, radius 3, on the H200 — no faster than one step per launch there; docs/stencil2d-h200.md).
        "fuse_steps": Knob(values=(False, True), direction="R", space="pure_cuda"),
        "cudnn": Knob(values=(False, True), direction="T", space="cuda_libraries"),
        "aten": Knob(values=("none", "conv2d", "fft"), direction="T", space="libraries_pytorch"),
    }

    def __init__(self, radius: int, steps: int = 1) -> None:
        self.radius = radius
        self.steps = steps

    def defaults(self) -> dict[str, Any]:
        return {name: knob.values[0] for name, knob in self.knobs.items()}

    def variants(self) -> list[dict[str, Any]]:
        """Every combination of knob values."""
        return [dict(zip(self.knobs, values)) for values in itertools.product(*(k.values for k in self.knobs.values()))]

    def shaping(self, params: Mapping[str, Any]) -> list[str]:
        """The knobs that shape the source for `params` (the others are moot)."""
        if params["aten"] != "none":
            return ["aten"]
        if params["cudnn"]:
            return ["cudnn"]
        if params["tiling"] == "ring":
            ring = ["tiling", "boundary", "vector_loads", "ring_columns", "ring_threads", "strip_rows", "ring_stages"]
            return [*ring, "fuse_steps"] if self.steps > 1 else ring  # one step: nothing to fuse
        kernel = ["tiling", "block", "outputs_per_thread", "boundary", "vector_loads"]
        return kernel[:-1] if params["tiling"] == "global" else kernel  # vector loads fill a shared tile

    def describe(self, params: Mapping[str, Any]) -> str:
        """`name knob=value ...` with the knobs that shape the source."""
        return " ".join([self.name, *(f"{k}={params[k]}" for k in self.shaping(params))])

    def render(self, params: Mapping[str, Any]) -> str:
        for name, knob in self.knobs.items():
            if params.get(name) not in knob.values:
                raise ValueError(f"knob {name}={params.get(name)!r} is not one of {knob.values}")
        head = _piece("head", origin=self.describe(params), radius=self.radius)
        # A library's call follows the head at once; a kernel of our own after a blank line.
        if params["aten"] != "none":
            return f"{head}\n{_piece('aten_' + params['aten'])}\n"
        if params["cudnn"]:
            return f"{head}\n{_piece('cudnn')}\n"
        pieces = _custom_kernel(params, fuse=params["fuse_steps"] and self.steps > 1)
        return f"{head}\n\n{PIECE_GAP.join(pieces)}\n"


PIECE_GAP = "\n\n\n"
"""Between the pieces of a kernel of our own: two blank lines."""


@functools.cache
def _kernel_file(name: str) -> tuple[string.Template, frozenset[str]]:
    text = (resources.files(__package__) / "kernels" / f"{name}.cu").read_text(encoding="utf-8")
    template = string.Template(text.strip("\n"))
    return template, frozenset(template.get_identifiers())


def _piece(name: str, **values: Any) -> str:
    """The text of kernels/<name>.cu, its placeholders filled with `values` (exactly those it has)."""
    template, placeholders = _kernel_file(name)
    if placeholders != values.keys():
        raise ValueError(f"kernels/{name}.cu takes {sorted(placeholders)}, not {sorted(values)}")
    return template.substitute(values)


def _custom_kernel(params: Mapping[str, Any], fuse: bool) -> list[str]:
    """The pieces of a kernel of our own: its constants and device code, launch_step, then stencil2d."""
    boundary = params["boundary"]  # checked or split: the pieces <name>_checked.cu and <name>_split.cu
    vector = params["vector_loads"]
    if params["tiling"] == "ring":
        pieces = [
            _piece(
                "ring",
                w=params["ring_columns"],
                bx=params["ring_threads"],
                h=params["strip_rows"],
                s=params["ring_stages"],
                interior=_piece(f"ring_{boundary}"),
                pairs_param=_PAIRS_PARAM[vector],
                kernel="pairs ? stencil_step<true> : stencil_step<false>" if vector else "stencil_step<false>",
            )
        ]
        if fuse:
            pieces.append(_piece("fused", interior=_piece(f"fused_{boundary}")))
        return [*pieces, _entry(vector, fuse)]
    bx, by = (int(v) for v in params["block"].split("x"))
    rows = params["outputs_per_thread"]
    if params["tiling"] == "global":
        return [
            _piece("global", bx=bx, by=by, rows=rows, body=_piece(f"global_{boundary}")),
            _piece("launch", pairs_param="", call=_piece("launch_global")),
            _entry(vector=False, fuse=False),
        ]
    halo, why = (
        ("R + (R & 1)", "  // R rounded up to even: tile rows start 16-byte aligned")
        if vector
        else ("R", "  // columns loaded left and right of the block's outputs")
    )
    pieces = [_piece("tile", bx=bx, by=by, rows=rows, halo=halo, why=why)]
    if vector:
        pieces.append(_piece("tile_vector"))
    pieces.append(_piece("tile_stream" if params["tiling"] == "smem_stream" else "tile_outputs"))
    body = _piece(f"tile_{boundary}", loader="stage_tile" if vector else "load_tile", pairs_arg=", PAIRS" if vector else "")
    pieces.append(_piece("tile_step", template="template <bool PAIRS>\n" if vector else "", body=body))
    call = _piece("launch_tile_pairs" if vector else "launch_tile")
    pieces.append(_piece("launch", pairs_param=_PAIRS_PARAM[vector], call=call))
    return [*pieces, _entry(vector, fuse=False)]


_PAIRS_PARAM = {False: "", True: ", bool pairs"}
"""launch_step's parameter `pairs` (16-byte loads allowed), which it has when the kernel has vector loads."""


def _entry(vector: bool, fuse: bool) -> str:
    """stencil2d, the contract's function: the test for 16-byte loads where a kernel uses them, then the
    launches."""
    pairs_check = ""  # lines after the scratch allocation: each starts with a newline
    if vector or fuse:
        pairs_check = "\n" + _piece("entry_pairs_fused" if fuse else "entry_pairs")
    loop = _piece("entry_loop_fused" if fuse else "entry_loop", pairs_arg=", pairs" if vector else "")
    return _piece("entry", pairs_check=pairs_check, loop=loop)
