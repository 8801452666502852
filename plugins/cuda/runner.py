"""The cuda runner: the only process that loads a cuda candidate. It opens the judge's two GPU buffers
(CUDA IPC; judge and runner share the sandbox's PID namespace), calls the candidate on the inputs the judge
wrote, copies its output into the judge's output buffer, and says what its CUDA events measured. Nothing it
says is believed: the judge reads the output itself and bounds every figure with its own clock.

`python -m hiera_plugins.cuda.runner DEVICE` serves the judge; `... DEVICE --profile` (under Nsight Compute,
no judge) runs an unprofiled warm-up and then exactly one call inside the NVTX range named on stdin.
"""

from __future__ import annotations

import base64
import collections
import importlib.util
import json
import os
import pickle
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from hiera_core.records import Task
from hiera_core.serialization import from_dict
from hiera_judge import judging
from hiera_judge.messages import (
    AttachOrder,
    BatchDone,
    BatchOrder,
    BufferView,
    CallDone,
    CallFailed,
    CallOrder,
    Loaded,
    LoadOrder,
    Order,
    Prepared,
    Reply,
    StartBatch,
)
from hiera_plugins.cuda import ipc

if TYPE_CHECKING:
    from collections.abc import Callable
    from importlib.abc import Loader
    from importlib.machinery import ModuleSpec

    PreparedBatch = tuple[
        list[tuple[list[torch.Tensor], BufferView]],
        tuple[torch.cuda.Event, torch.cuda.Event],
        list[torch.Tensor] | None,
        tuple[torch.Size, Any] | None,
    ]  # what `Runner.prepare` holds for `Runner.batch`: calls, events, a null batch's outputs, the one output shape

FLUSH_BYTES = 256 * 2**20
"""Overwritten before every timed call: more than the H200's 50 MiB L2, so every call starts cold."""
COVER_MS = 0.5
"""After the flush the GPU waits this long (a one-thread spin) before the call's start event, while the host queues
the call: a call's figure is the GPU's time for it, not the host's latency in launching it. Without it, a
launch-bound call whose launch outlasted the flush (~70 us) had the host's stalls in its figure: a 35 us KernelBench
call measured 0.035-0.045 ms medians in ten fresh processes, single calls up to 0.32 ms (H200, 2026-12-02)."""


class ColdStart:
    """Queue the L2 flush and the cover on the current stream: what every timed call, the candidate's and the
    reference's, starts after. The cover's cycles come from the device's peak SM clock (at a lower clock it lasts
    longer)."""

    def __init__(self) -> None:
        self.flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
        peak_khz = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "clock_rate", 0) or 2_000_000
        self.cover_cycles = int(COVER_MS * peak_khz)

    def __call__(self) -> None:
        self.flush.zero_()
        torch.cuda._sleep(self.cover_cycles)


def load_candidate(path: str):
    name = os.path.basename(path).split(".")[0]
    spec = cast("ModuleSpec", importlib.util.spec_from_file_location(name, path))  # a built .so always has one
    module = importlib.util.module_from_spec(spec)
    cast("Loader", spec.loader).exec_module(module)
    return module


def seeded(call, seed: int | None):
    """`call` starting from the RNG state `torch.manual_seed(seed)` gives (a task that draws random numbers);
    `call` itself when seed is None."""
    if seed is None:
        return call

    def from_seed(*args):
        torch.manual_seed(seed)
        return call(*args)

    return from_seed


def view(arena: torch.Tensor, buffer: BufferView) -> torch.Tensor:
    dtype = getattr(torch, buffer.dtype)
    count = 1
    for size in buffer.shape:
        count *= size
    nbytes = count * torch.empty((), dtype=dtype).element_size()
    return arena[buffer.offset_bytes : buffer.offset_bytes + nbytes].view(dtype).view(buffer.shape)


class OpNames(TorchDispatchMode):
    """A dispatch mode that collects the names of the ATen operators run inside it (`.names`) and the elements
    of the largest tensor one of them returned (`.largest`)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func.overloadpacket.__name__)
        out = func(*args, **(kwargs or {}))
        for value in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(value, torch.Tensor):
                self.largest = max(self.largest, value.numel())
        return out


def runtime_calls(fn, inputs) -> tuple[Any, list[str], list[str]]:
    """The output of one call, and the GPU kernels and ATen operators it ran."""
    from torch.profiler import ProfilerActivity, profile

    ops = OpNames()
    with profile(activities=[ProfilerActivity.CUDA]) as prof, ops:
        out = fn(*inputs)
        torch.cuda.synchronize()
    kernels = sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})
    return out, kernels, sorted(ops.names)


def warm_profiler() -> None:
    """One profiled call of a trivial kernel, before the runner says Ready: the profiler's first start (CUPTI and
    Kineto, 4-7 s of a judge's time under the device lock on the H200) falls in the runner's start-up, which overlaps
    other candidates' device time; the runtime check's own session then reuses what it set up (Kineto keeps CUPTI
    unless TEARDOWN_CUPTI=1)."""
    runtime_calls(lambda x: x + 1, [torch.zeros(1, device="cuda")])


class Runner:
    # None until the AttachOrder and the LoadOrder, which come before any call
    inputs_arena: torch.Tensor
    output_arena: torch.Tensor
    fn: Callable[..., Any]

    def __init__(self) -> None:
        self.inputs_arena = self.output_arena = None  # type: ignore[assignment]  # set before any call
        self.fn = None  # type: ignore[assignment]  # set before any call
        self.cold_start = ColdStart()
        self.null_sources: dict[tuple, torch.Tensor] = {}
        self.kept: collections.deque[torch.Tensor] = collections.deque(maxlen=0)
        self.batch_outputs: list[torch.Tensor] = []
        self.prepared: PreparedBatch | None = None

    def prepare(self, order: BatchOrder) -> Reply:
        """Hold `order`'s calls ready (each place's input views, its timers; for a null batch its outputs), outside the
        judge's clock: the judge writes the inputs only after this reply, while this process is stopped."""
        self.batch_outputs = []
        calls = [([view(self.inputs_arena, c.inputs[str(i)]) for i in range(len(c.inputs))], c.output) for c in order.calls]
        shapes = {(tuple(c.output.shape), c.output.dtype) for c in order.calls}
        [(shape, dtype)] = shapes if len(shapes) == 1 else [((), "")]
        expected = (torch.Size(shape), getattr(torch, dtype)) if dtype else None  # one timing case: one output shape
        events = (
            torch.cuda.Event(enable_timing=True),
            torch.cuda.Event(enable_timing=True),
        )  # around the batch: a pair a call costs 13 µs of the clock
        self.kept.clear()  # a batch's outputs are its own: the single calls' kept ones are not needed beside them
        nulls = None
        if order.null:  # distinct allocations, as a candidate's outputs are, so exporting them costs the same; made
            first = calls[0][1]  # afresh (from the blocks the last batch's outputs left), so they never sit beside those
            nulls = [torch.empty(first.shape, dtype=getattr(torch, first.dtype), device="cuda") for _ in calls]
        self.prepared = calls, events, nulls, expected
        return Prepared()

    def batch(self) -> Reply:
        """The prepared calls back to back on the current stream, each on its place's inputs, with no wait between
        them; one device-wide synchronize at the end; then where each output lies. The outputs stay alive until the
        next batch: the judge reads them while this process is stopped."""
        began = time.perf_counter()
        (calls, (start, end), nulls, expected), self.prepared = cast("PreparedBatch", self.prepared), None
        torch.cuda.synchronize()
        outs, calling = [], time.perf_counter()
        start.record()
        for k, (inputs, _) in enumerate(calls):
            out = nulls[k] if nulls is not None else self.fn(*inputs)
            if type(out) is torch.Tensor and not out.is_contiguous():
                out = out.contiguous()  # part of the call: the judge reads contiguous bytes
            outs.append(out)
        end.record()
        torch.cuda.synchronize()
        called = time.perf_counter()
        for out, (_, buffer) in zip(outs, calls):
            if type(out) is torch.Tensor and out.is_cuda and (out.shape, out.dtype) == expected:
                continue  # the usual case, in a fraction of a µs: this loop is inside the judge's clock
            if type(out) is not torch.Tensor:
                return CallFailed(
                    reason=f"the output is a {type(out).__module__}.{type(out).__qualname__}, not exactly a torch.Tensor"
                )
            if out.device.type != "cuda":
                return CallFailed(reason=f"the output is on {out.device}, not the GPU")
            if str(out.dtype)[6:] != buffer.dtype or list(out.shape) != list(buffer.shape):
                return CallFailed(
                    reason=f"the output is {str(out.dtype)[6:]} {list(out.shape)}; the contract says"
                    f" {buffer.dtype} {list(buffer.shape)}"
                )
        self.batch_outputs = outs
        handles, places = ipc.export_all(outs)
        return BatchDone(
            in_process_ms=[start.elapsed_time(end) / len(calls)] * len(calls),
            handles=handles,
            outputs=places,
            stamps=[began, calling, called, time.perf_counter()],
        )

    def handle(self, order: Order) -> Reply:
        if isinstance(order, AttachOrder):
            (rebuild_in, args_in), (rebuild_out, args_out) = pickle.loads(base64.b64decode(order.handles))
            self.inputs_arena, self.output_arena = rebuild_in(*args_in), rebuild_out(*args_out)
            self.kept = collections.deque(maxlen=order.places - 1)
            return Loaded()
        if isinstance(order, LoadOrder):
            harness = judging.harness_of(order.workload_factory, order.workload_config, order.task, "cuda")
            module = load_candidate(order.library)  # the candidate enters the process only now
            self.fn = seeded(getattr(module, harness.entry), getattr(harness, "call_seed", None))
            return Loaded()
        if isinstance(order, BatchOrder):
            return self.prepare(order)
        if isinstance(order, StartBatch):
            return self.batch()
        assert isinstance(order, CallOrder)
        self.batch_outputs = []
        inputs = [view(self.inputs_arena, order.inputs[str(i)]) for i in range(len(order.inputs))]
        target = view(self.output_arena, order.output)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        kernels: list[str] = []
        ops: list[str] = []
        if order.flush_cache:
            self.cold_start()  # queued: the GPU is busy with it while this process launches the call
        start.record()
        if order.null:  # trusted work that moves the output's bytes, so the GPU is as busy as in a real call
            key = (tuple(target.shape), target.dtype)
            out = self.null_sources.setdefault(key, torch.empty_like(target))
            source = inputs[0] if inputs and inputs[0].shape == out.shape and inputs[0].dtype == out.dtype else None
            out.copy_(source) if source is not None else out.zero_()
        elif order.inspect:
            out, kernels, ops = runtime_calls(self.fn, inputs)
        else:
            out = self.fn(*inputs)
        end.record()
        torch.cuda.synchronize()  # device-wide: the reply waits for work on any stream (the judge's clock sees it)
        if type(out) is not torch.Tensor:
            return CallFailed(
                reason=f"the output is a {type(out).__module__}.{type(out).__qualname__}, not exactly a torch.Tensor"
            )
        if out.device.type != "cuda":
            return CallFailed(reason=f"the output is on {out.device}, not the GPU")
        if out.dtype != target.dtype or tuple(out.shape) != tuple(target.shape):
            return CallFailed(
                reason=f"the output is {str(out.dtype)[6:]} {list(out.shape)}; the contract says"
                f" {str(target.dtype)[6:]} {list(target.shape)}"
            )
        target.copy_(out)
        torch.cuda.synchronize()
        if not order.null and self.kept.maxlen:
            self.kept.append(out)  # held until `places - 1` calls later: the next output lands elsewhere
        return CallDone(in_process_ms=start.elapsed_time(end), kernels=kernels, aten_ops=ops)


def _seconds_since_start() -> float:
    """How long ago this process started (its interpreter, imports and CUDA's start-up, under ncu)."""
    ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])  # field 22, starttime
    return float(Path("/proc/uptime").read_text().split()[0]) - ticks / os.sysconf("SC_CLK_TCK")


def profile_one_call(request: dict[str, Any]) -> None:
    """For Nsight Compute: once started (the interpreter and CUDA under ncu, the harness: ~8 s, 2026-12-07 on an H100),
    READY and the wait for `go`, which comes when hiera holds the GPU (`sandbox.Handshake`); then an unprofiled
    warm-up and exactly one call inside the NVTX range. The seconds of each step go to stderr (`ncu.log`)."""
    seconds, last = {"process_start": round(_seconds_since_start(), 3)}, time.monotonic()

    def step(name: str) -> None:
        nonlocal last
        seconds[name], last = round(time.monotonic() - last, 3), time.monotonic()

    harness = judging.harness_of(
        request["workload_factory"], request["workload_config"], from_dict(request["task"], Task), "cuda"
    )
    step("harness")
    library = judging.wait_for_go()
    step("waiting_for_the_device")
    # ncu prints its table on the stdout it shares with this process: the candidate, loaded below, never gets it.
    # Its prints (and its children's) go to stderr, into ncu.log, which is never read as a table.
    sys.stdout.flush()
    os.dup2(2, 1)
    inputs = harness.make_inputs(harness.timing_case(), harness.seeds(False)[0], harness.distributions[0])
    torch.cuda.synchronize()
    step("inputs")
    fn = getattr(load_candidate(library), harness.entry)
    fn(*inputs)
    torch.cuda.synchronize()
    step("load_and_warm_up")
    torch.cuda.nvtx.range_push(request["nvtx_range"])
    fn(*inputs)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    step("profiled_call")
    print(f"profile steps (s): {json.dumps(seconds)}", file=sys.stderr, flush=True)


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(1)
    torch.cuda.set_device(int(sys.argv[1]))
    if "--profile" in sys.argv:
        profile_one_call(json.loads(sys.stdin.readline()))
        return
    warm_profiler()
    judging.serve(Runner().handle)


if __name__ == "__main__":
    main()
