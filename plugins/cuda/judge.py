"""The cuda judge: decides a cuda candidate's verdict without ever loading it (eval.md §3, §4).

It owns two GPU buffers that the runner opens through CUDA IPC, one for the calls' inputs and one for their
outputs, each with places for many calls. The runner's processes run only from an order to its reply (frozen as a
cgroup in between). For every call the judge draws fresh inputs (every data input the harness makes) and writes them
into a place of their own:

1. correctness: every case, seed and distribution against an FP64 reference computed here (TF32 off), one call at
   a time (the runner copies its output into the judge's place);
2. timing: batches of calls back to back, each on a place's never-seen inputs; the figure is the judge's clock around
   a batch (from thawing the candidate to freezing it again) less a null batch's, per call (`judging.timing_verdict`);
   after each batch the judge's idle probe shows the GPU has nothing of the candidate's left running, and the judge
   reads every output itself, through the IPC handle the runner names (`ipc`); a secret share (one call a batch at
   least, and the last) is checked like the correctness cases; the runner's CUDA events must agree with the figure;
   the reference (eager PyTorch) is timed here by the same rule;
3. one more checked call under the runner's profiler and a dispatcher log: the kernels and ATen operators
   it really ran, for the runtime space check (a claim of the runner's: the binary check is the judge's).

The workload's harness (`Workload.harness(task, "cuda")`, a `hiera_plugins.cuda.harness.CudaHarness`)
supplies the semantics.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import functools
import itertools
import json
import math
import pickle
import re
import secrets
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import attrs
import torch
from torch.multiprocessing.reductions import reduce_tensor

from hiera_core.records import Crashed, Incorrect, Measured, Rejected, TimedOut
from hiera_judge import judging
from hiera_judge.messages import (
    AttachOrder,
    BatchDone,
    BatchOrder,
    BufferView,
    CallFailed,
    CallOrder,
    JudgeAnswer,
    Judged,
    JudgeRequest,
    Loaded,
)
from hiera_plugins.cuda import ipc
from hiera_plugins.cuda.evaluators import JUDGE_OUT_OF_MEMORY, CudaJudgeSettings, CudaRunConfig
from hiera_plugins.cuda.runner import ColdStart, seeded

ALIGN = 256
PLACEMENT_BYTES = 64 * 2**30
"""At most this much GPU memory (and half the GPU's) for the places of a timed batch (each place's inputs and output,
and the runner's output of its call): a task whose buffers are larger gets fewer places (one, if one alone is larger)."""
OTHERS_FRACTION = 0.1
"""The share of the GPU's memory a judge's places leave to the other processes on it, counting what they hold already:
the judges and runners that start beside it, each with a device context (~0.5 GiB), and a profiler's. On an 80 GB H100 (2026-12-06) the case
study's judges took 64 GiB of places and kept ~5 GiB free: the references of 7 of 24 ran out of memory."""
LARGE_PLACE_BYTES = 2**30
"""A place at least this large (inputs and output) makes the judge hand its references' memory back to the device
after every checked batch (`torch.cuda.empty_cache`): it would otherwise stay in this process's cache, where the
runner cannot use it."""
JUDGE_ALLOCATOR = "max_split_size_mb:1024"
"""The judge's own PyTorch allocator never splits a cached block of more than 1 GiB to serve a smaller request, so
a large free block stays whole for the next large one or goes back to the device. Split, on the H100 (2026-12-07),
KernelBench level 1 task 4 (8 GiB of inputs, a 16 GiB FP64 reference) failed 4 of its 12 candidates' judges: 16 GiB
cached but free in blocks split by 8 GiB inputs, which neither its 16 GiB reference nor a release could use. The
runner's (the candidate's) allocator is left as PyTorch sets it."""
PLACE_ALIGN = 2**21
STAGGER = 2**16
"""Each input place starts this much further past a 2 MiB boundary than the one before (the output places do
not), so that the places differ in where an input lies against its output as well as in their pages."""
CALIBRATION_BATCHES = 7
MIN_BATCHES = 5
"""A series has at least this many timed batches: its figure is their median."""
PROBE_LIMIT_MS = 0.12
"""The judge's idle probe (one tiny kernel of its own, right after the runner's reply) takes ~0.02 ms on an idle H200
and >= 0.29 ms when another context still has work queued, however little (2026-12-03): a reply before the work was
done shows. A probe slower than this adds its wait to the batch's time (work that outlived the reply, or the judge's
own wake-up: either way the candidate is not favoured)."""
SLICE_MS = 1.5
"""Beyond this the probe may have run in a time slice of its own (~2 ms on the H200) while the candidate's work went
on: the batch is timed again."""
IDLE_WAIT_S = 2.0
"""Before a batch's inputs are written the judge waits this long at most for an idle probe within the limit: another
process's device context starting beside the judge (a judge or runner of the candidates built beside it, a
profiler) slows every probe for a moment; on an H100 (2026-12-06) three probes in a row failed that way and a trusted
baseline was rejected. Work the candidate left running outlasts the wait and is rejected."""
REPLY_SPIN_S = 1.0
"""The judge polls for the runner's reply this long before it blocks (`judging.Runner`): every batch the judge times
is shorter, so the reply is read as it comes, not ~0.1 ms later by a judge woken from sleep. It costs one core while
the judge holds the device: its own, on a machine of 8 cores or more (`judging.timing_cores`). The host judge, whose
candidates are timed on the CPU, does not poll."""
COMPARE_CHUNK = 2**26
"""Elements compared at a time: FP64 temporaries of 512 MiB whatever the output's size (level 1 task 38's
output is 2.1 G elements; whole-tensor temporaries ran the H200 out of memory)."""


class Failed(Exception):
    """The candidate's call raised."""


def main() -> None:
    request = judging.read_request(CudaJudgeSettings)
    s = request.settings
    harness = judging.harness_of(request.workload_factory, request.workload_config, request.task, "cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(1)
    torch.cuda.memory._set_allocator_settings(JUDGE_ALLOCATOR)  # this process's only: its runner starts from its environment
    torch.cuda.set_device(s.run.device)
    judging.raise_priority()
    runner = judging.Runner(
        "hiera_plugins.cuda.runner",
        scratch=Path.cwd(),
        args=[str(s.run.device)],
        rlimit_data_bytes=s.memory_bytes,
        spin_s=REPLY_SPIN_S,
    )
    torch.cuda.init()
    judge = None
    try:
        runner.started(timeout_s=s.run.timeout_s)
        library = judging.wait_for_go()
        judging.take_timing_cores(s.timing_cores, runner)
        judge = CudaJudge(harness, request, runner)
        result = judge.evaluate(library)
    except judging.RunnerGone as exc:
        case = judge.current if judge else judging.STARTUP
        limit = s.run.call_timeout_s if judge else s.run.timeout_s
        result = TimedOut(limit_s=limit, case=case) if exc.timed_out else runner.crashed(str(exc), case=case, signal=exc.signal)
    except torch.OutOfMemoryError as exc:  # the judge's own allocation: its inputs, a reference, a comparison
        result = Crashed(reason=_own_out_of_memory(exc), case=judge.current if judge else "")
    except (RuntimeError, TypeError, ValueError) as exc:  # the harness on inputs a candidate broke, a CUDA error
        result = runner.crashed(
            f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:400]}", case=judge.current if judge else ""
        )
    finally:
        runner.close()
    judging.answer(result)


def _own_out_of_memory(exc: torch.OutOfMemoryError) -> str:
    """Why a judge that ran out of GPU memory itself gives no verdict, said as the judge's, not as the candidate's
    crash (KernelBench level 1 task 4 on an H100, 2026-12-07: four candidates were told their kernel ran out of memory,
    and the model's next strategy forbade allocations that had nothing to do with it), with who held the memory."""
    asked = re.search(r"Tried to allocate ([\d.]+ [KMGT]iB)", str(exc))
    free, total = torch.cuda.mem_get_info()
    own = torch.cuda.memory_reserved()
    return (
        f"{JUDGE_OUT_OF_MEMORY}{' (asking ' + asked.group(1) + ')' if asked else ''}:"
        f" it held {_gib(own)} GiB, other processes (the candidate's among them, and other judges) {_gib(total - free - own)}"
        f" GiB, {_gib(free)} GiB of {_gib(total)} were free; the candidate's call had not failed"
    )


def timed(cold_start: ColdStart, call) -> tuple[float, Any]:
    """(milliseconds, result) of one `call` in this process, timed as the runner times the candidate: CUDA events
    queued around it right after the L2 flush and the cover (`ColdStart`), so the call starts from a cold L2 and its
    launch is queued before the GPU reaches it."""
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cold_start()
    start.record()
    out = call()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end), out


def device_state(device: int) -> dict[str, float]:
    """The GPU's clocks, power and temperature now, read through NVML (nvidia-ml-py); {} where NVML cannot tell.
    Read only: the device's clocks and power settings are the user's."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{torch.cuda.get_device_properties(device).uuid}")
        return {
            "sm_clock_mhz": float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
            "memory_clock_mhz": float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM)),
            "power_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            "temperature_c": float(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)),
        }
    except Exception:  # noqa: BLE001 -- no NVML, no permission, an older driver: the figures go without
        return {}


def max_error(
    out: torch.Tensor, reference: torch.Tensor, rtol: float, atol: float, chunk: int = COMPARE_CHUNK
) -> tuple[float, int | str | None]:
    """The largest |out - reference| and where the first element out of tolerance is (a flat index;
    "non-finite" if any output value is NaN or infinite; None if all pass). An element passes when
    |out - ref| <= atol * max(1, rms(ref)) + rtol * |ref|. Works through both tensors `chunk` elements at a time.

    Every element within atol x max(1, rms(ref)) passes whatever its rtol share, so the largest error alone decides
    a correct output (after the finiteness and the scale's passes, one read of each tensor): each element is tested
    only when that bound is passed. Testing every element always cost ~150 bytes of GPU traffic an element (on an
    H100, 110 ms for each of KernelBench level 1 task 20's checked outputs of 1.6 G elements, half of its judge's GPU
    time)."""
    got_all, ref_all = out.reshape(-1), reference.reshape(-1)
    n = ref_all.numel()
    if n == 0:
        return 0.0, None
    spans = [(start, min(n, start + chunk)) for start in range(0, n, chunk)]
    if not all(bool(torch.isfinite(got_all[a:b]).all()) for a, b in spans):
        return float("nan"), "non-finite"
    squares = sum(float(torch.linalg.vector_norm(ref_all[a:b], dtype=torch.float64)) ** 2 for a, b in spans)
    scale = max(1.0, math.sqrt(squares / n))  # atol is relative to the output's RMS magnitude
    # in FP64 (exact for FP32 operands; `.double()` of an FP64 tensor is the tensor itself)
    errors = [float(torch.linalg.vector_norm(got_all[a:b] - ref_all[a:b].double(), ord=math.inf)) for a, b in spans]
    error = max(errors)
    if all(e <= atol * scale for e in errors):
        return error, None
    first_bad = None
    for a, b in spans:
        ref = ref_all[a:b].double()
        bad = (got_all[a:b] - ref).abs_() > ref.abs().mul_(rtol).add_(atol * scale)
        if bool(bad.any()):
            first_bad = a + int(torch.nonzero(bad)[0])
            break
    return error, first_bad


def _aligned(n: int, align: int = ALIGN) -> int:
    return (n + align - 1) // align * align


def _gib(n: float) -> float:
    return round(n / 2**30, 3)


def shaped(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor's shape and dtype without its memory (the meta device)."""
    return torch.empty(tensor.shape, dtype=tensor.dtype, device="meta")


@attrs.frozen
class MemoryPlan:
    places: int
    """How many places the calls rotate over; 0: not even one fits (`why`)."""
    in_stride: int
    out_stride: int
    why: str = ""
    too_large: bool = False
    """Not even one place would fit were the other processes' memory free too (`Crashed.task_too_large`)."""


def memory_plan(
    in_bytes: int, out_bytes: int, working: int, free: int, wanted: int, total: int = 0, others_use: int = 0
) -> MemoryPlan:
    """Places for inputs of `in_bytes` and an output of `out_bytes` (`wanted` at most, within `PLACEMENT_BYTES`) in the
    `free` bytes of the GPU, beside what the evaluation needs outside them: a check's fresh inputs and its reference
    (`working`: what computing one took beyond its inputs, its FP64 output included), the candidate's own working
    memory (half as much: an FP32 forward's intermediates, which the runner's allocator keeps while the judge checks),
    PyTorch's baseline output and the comparison's chunks. On a GPU of `total` bytes (0: not said), the places take
    half of it at most, and the other processes on it keep `OTHERS_FRACTION` of it, counting the `others_use` bytes they
    hold already (four runs' judges on an 80 GB H100 left one another too little for KernelBench level 1 task 20,
    when what they held was left to them a second time). A place is its inputs and output here and the runner's
    output of its call."""
    others = max(0, int(OTHERS_FRACTION * total) - others_use)
    cap = min(PLACEMENT_BYTES, total // 2 or PLACEMENT_BYTES)
    in_stride = _aligned(max(in_bytes, ALIGN), PLACE_ALIGN) + STAGGER
    out_stride = _aligned(max(out_bytes, ALIGN), PLACE_ALIGN)
    per_place = in_stride + 2 * out_stride
    reserve = in_bytes + working + working // 2 + out_bytes + 2 * COMPARE_CHUNK * 8
    fits = max(0, free - others - reserve) // per_place
    if fits == 0:
        alone = max(0, free + others_use - int(OTHERS_FRACTION * total) - reserve) // per_place
        return MemoryPlan(
            0,
            in_stride,
            out_stride,
            f"one place ({_gib(per_place)} GiB: inputs {_gib(in_bytes)}, the output twice {_gib(2 * out_bytes)})"
            f" beside {_gib(reserve)} GiB for a check (fresh inputs, the reference's {_gib(working)} GiB of working"
            f" memory, the candidate's half as much) is more than the {_gib(free)} GiB free"
            + (f" less {_gib(others)} GiB more left to other processes" if others else ""),
            too_large=alone == 0,
        )
    return MemoryPlan(min(fits, max(1, min(wanted, cap // per_place))), in_stride, out_stride)


class CudaJudge:
    def __init__(self, harness: Any, request: JudgeRequest[CudaJudgeSettings], runner: judging.Runner) -> None:
        self.h, self.request, self.runner = harness, request, runner
        self.s = request.settings
        self.timeout_s = self.s.run.call_timeout_s
        self.random = secrets.SystemRandom()  # which timed calls are checked: the candidate cannot know
        self.cold_start = ColdStart()
        self.probe_tensor = torch.zeros(1, device="cuda")
        self.phases: dict[str, float] = {}
        self.steps: collections.defaultdict[str, float] = collections.defaultdict(float)
        """Seconds of the timing phase by step (`spending`), for the judge's log: where a batch's time goes besides
        the calls (a 6 GiB task took 23 s for 100 calls of 5 ms on an H100, 2026-12-07)."""
        self.clock_parts: list[list[float]] = []
        self.last = time.perf_counter()
        self.call_seed = getattr(harness, "call_seed", None)
        self.baseline = seeded(harness.baseline, self.call_seed)
        self.factor = getattr(harness, "pytorch_error_factor", None)
        self.current = ""
        """The call the candidate is in (`judging.describe_call`), named in its `Crashed` record if it dies there."""

    @contextlib.contextmanager
    def spending(self, step: str):
        """The block's seconds, its GPU work done, added to `steps[step]` (outside the judge's clock: a batch's
        timed window lies inside `batch` and `null_batch`, which end synchronized anyway)."""
        started = time.perf_counter()
        yield  # a block that raises is not counted: its error stays the one raised
        torch.cuda.synchronize()
        self.steps[step] += time.perf_counter() - started

    def mark(self, phase: str) -> None:
        now = time.perf_counter()
        self.phases[phase] = round(now - self.last, 3)
        self.last = now

    # --- the buffers ------------------------------------------------------------------------------

    def attach(self, cases: list[tuple], working: int) -> Crashed | None:
        """Allocate the two buffers, each with `placements` places for the largest inputs and output of `cases`
        ((inputs, reference) pairs, their shapes; `working`: what computing a reference took beyond its inputs), as many as
        the GPU's free memory holds beside what the rest of the evaluation needs (`memory_plan`), and hand them to the
        runner. Every call goes to the next place (`CudaRunConfig.placements`). Where not even one place fits, why
        (before the candidate is loaded)."""
        in_bytes = max(sum(_aligned(t.numel() * t.element_size()) for t in inputs) for inputs, _ in cases)
        out_bytes = max(ref.numel() * torch.empty((), dtype=self.out_dtype).element_size() for _, ref in cases)
        torch.cuda.empty_cache()  # what the references took goes back to the device: the runner may need it
        free, total = torch.cuda.mem_get_info()
        others_use = max(0, total - free - torch.cuda.memory_reserved())  # this process's context counts as theirs
        plan = memory_plan(in_bytes, out_bytes, working, free, self.s.run.placements, total, others_use)
        self.memory = {
            "free_at_start_gib": _gib(free),
            "total_gib": _gib(total),
            "others_use_gib": _gib(others_use),
            "reference_working_gib": _gib(working),
            "places": plan.places,
        }
        if plan.places == 0:
            return Crashed(
                reason=f"the task does not fit in the GPU's memory: {plan.why}",
                case="the judge's buffers, before the candidate was loaded",
                task_too_large=plan.too_large,
            )
        self.place_count, self.in_stride, self.out_stride = plan.places, plan.in_stride, plan.out_stride
        self.place_index = 0
        self.inputs_arena = torch.empty(self.place_count * self.in_stride, dtype=torch.uint8, device="cuda")
        self.output_arena = torch.empty(self.place_count * self.out_stride, dtype=torch.uint8, device="cuda")
        handles = base64.b64encode(pickle.dumps((reduce_tensor(self.inputs_arena), reduce_tensor(self.output_arena)))).decode()
        reply, _ = self.runner.ask(AttachOrder(handles=handles, places=self.place_count), timeout_s=self.timeout_s)
        if not isinstance(reply, Loaded):
            raise judging.RunnerGone(f"the runner could not open the judge's buffers: {reply}")
        return None

    def note_memory(self) -> None:
        """The device's memory in use now (every process's) and this judge's own, at their highest so far
        (`Judged.conditions`): read after a batch, outside the clock."""
        free, total = torch.cuda.mem_get_info()
        self.memory["device_used_peak_gib"] = max(self.memory.get("device_used_peak_gib", 0.0), _gib(total - free))
        self.memory["judge_reserved_peak_gib"] = _gib(torch.cuda.max_memory_reserved())

    def layout(self, inputs: list[torch.Tensor], reference: torch.Tensor) -> tuple[dict[str, BufferView], BufferView]:
        """Where the next place holds inputs shaped as `inputs` and an output shaped as `reference`; nothing written."""
        k = self.place_index
        self.place_index = (k + 1) % self.place_count
        views, offset = {}, k * self.in_stride
        for i, tensor in enumerate(inputs):
            views[str(i)] = BufferView(offset_bytes=offset, shape=list(tensor.shape), dtype=str(tensor.dtype)[6:])
            offset = _aligned(offset + tensor.numel() * tensor.element_size())
        return views, BufferView(offset_bytes=k * self.out_stride, shape=list(reference.shape), dtype=str(self.out_dtype)[6:])

    def write(self, inputs: list[torch.Tensor], views: dict[str, BufferView], out: BufferView) -> torch.Tensor:
        """Write `inputs` where `views` say, fill the output `out` with NaN (-1 for integers); the output's place."""
        for i, tensor in enumerate(inputs):
            view = views[str(i)]
            if list(tensor.shape) != view.shape or str(tensor.dtype)[6:] != view.dtype:
                raise RuntimeError(f"input {i} is {tensor.dtype} {list(tensor.shape)}, its place was laid out for {view}")
            self._array(self.inputs_arena, view).copy_(tensor)
        target = self._array(self.output_arena, out)
        target.fill_(float("nan")) if target.is_floating_point() else target.fill_(-1)
        return target

    def place(
        self, inputs: list[torch.Tensor], reference: torch.Tensor
    ) -> tuple[dict[str, BufferView], BufferView, torch.Tensor]:
        """Write `inputs` into the next place, fill its output with NaN (-1 for integers)."""
        views, out = self.layout(inputs, reference)
        target = self.write(inputs, views, out)
        torch.cuda.synchronize()
        return views, out, target

    @staticmethod
    def _array(arena: torch.Tensor, view: BufferView) -> torch.Tensor:
        dtype = getattr(torch, view.dtype)
        nbytes = math.prod(view.shape) * torch.empty((), dtype=dtype).element_size()
        return arena[view.offset_bytes : view.offset_bytes + nbytes].view(dtype).view(view.shape)

    # --- one call ---------------------------------------------------------------------------------

    def call(self, inputs, reference, *, null=False, inspect=False, flush=True):
        """One call of the runner on `inputs`, placed in the buffers first."""
        views, out, target = self.place(inputs, reference)
        order = CallOrder(case={}, inputs=views, output=out, null=null, inspect=inspect, flush_cache=flush)
        try:
            reply, wall = judging.call(self.runner, order, timeout_s=self.timeout_s)
        except judging.CandidateFailed as exc:
            if exc.raised:  # a CUDA error, a wrong signature: the candidate crashed
                raise Failed(str(exc)) from None
            raise judging.Wrong(str(exc)) from None
        return reply, wall, views, target

    def check(self, label: str, inputs, views, target, reference) -> float:
        for i, tensor in enumerate(inputs):
            if not torch.equal(self._array(self.inputs_arena, views[str(i)]), tensor):
                raise judging.Wrong(f"{label}: input {i} was modified")
        rtol, atol = self.h.tolerance
        error, first_bad = max_error(target, reference, rtol, atol)
        if first_bad == "non-finite":
            raise judging.Wrong(f"{label}: non-finite values in the output (never written?)")
        allowance = self.allowed(inputs, reference) if first_bad is not None else 0.0
        if first_bad is not None and error > allowance:
            where = tuple(int(i) for i in torch.unravel_index(torch.tensor(first_bad), tuple(target.shape)))
            allowed = f"; PyTorch's own FP32 error allows {allowance:.3g}" if allowance else ""
            raise judging.Wrong(
                f"{label}: max abs error {error:.3g} (at {where}: got {float(target[where]):.6g},"
                f" expected {float(reference[where]):.6g}; rtol {rtol:g}, atol {atol:g}{allowed})",
                error,
            )
        return error

    def allowed(self, inputs, reference) -> float:
        """`factor` x eager PyTorch's own FP32 error on these inputs: what a candidate may always have (0 without)."""
        if not self.factor:
            return 0.0
        error, first_bad = max_error(self.baseline(inputs), reference, *self.h.tolerance)
        return 0.0 if first_bad == "non-finite" else self.factor * error

    def checked_call(self, label: str, inputs, reference, **kwargs):
        reply, wall, views, target = self.call(inputs, reference, **kwargs)
        return reply, wall, self.check(label, inputs, views, target, reference)

    # --- the protocol -----------------------------------------------------------------------------

    def evaluate(self, library: str) -> JudgeAnswer:
        """The verdict on the candidate built as `library`."""
        try:
            return self._evaluate(library)
        except judging.Wrong as exc:
            return Incorrect(reason=exc.reason, max_abs_error=exc.error)
        except Failed as exc:
            return self.runner.crashed(str(exc), case=self.current)

    def _evaluate(self, library: str) -> JudgeAnswer:
        h, s, remeasure = self.h, self.s, self.request.remeasure
        self.out_dtype = getattr(torch, h.dtype)
        seeds = h.seeds(remeasure)
        checks = []
        for case in h.correctness_cases(remeasure):
            large = case.get("first_seed_only", False)  # the task grid itself: once, to keep large tasks affordable
            for seed in seeds[:1] if large else seeds:
                for distribution in h.distributions[:1] if large else h.distributions:
                    checks.append((f"{case['label']} seed {seed} {distribution}", case, seed, distribution))
        timing_case = h.timing_case()
        # The null batches' and warm-up calls' inputs: made again where used, never held (a large task's inputs
        # are a place's worth of GPU memory: KernelBench level 1 task 20's 6 GiB did not fit an 80 GB card beside
        # its place and a check while the judge kept them)
        make_sample = functools.partial(h.make_inputs, timing_case, seeds[0], h.distributions[0])
        torch.cuda.reset_peak_memory_stats()
        sample = make_sample()
        timing_reference = shaped(h.reference(timing_case, sample))  # its shape: each check computes its own
        sizes = [([shaped(t) for t in sample], timing_reference)]
        for _, case, seed, distribution in checks:
            if case != timing_case:
                inputs = h.make_inputs(case, seed, distribution)
                sizes.append(([shaped(t) for t in inputs], shaped(h.reference(case, inputs))))
                del inputs
        working = torch.cuda.max_memory_allocated() - torch.cuda.memory_allocated()  # a reference's own, beyond its inputs
        del sample
        if failed := self.attach(sizes, working):
            return failed
        del sizes
        self.mark("buffers")

        null = self.calibrate(make_sample, timing_reference)
        self.mark("calibration")
        compiled, compiled_note = None, ""
        warm_inputs = make_sample()
        if self.s.compile_baseline and hasattr(h, "compiled_baseline"):
            try:  # compiled on its first call, in this process: the candidate never shares it
                compiled = seeded(h.compiled_baseline(), self.call_seed)
                timed(self.cold_start, functools.partial(compiled, warm_inputs))
            except Exception as exc:  # noqa: BLE001 -- a baseline that does not compile is reported, not fatal
                compiled, compiled_note = None, f"torch.compile failed: {type(exc).__name__}: {str(exc).strip()[:300]}"
        timed(self.cold_start, functools.partial(self.baseline, warm_inputs))
        del warm_inputs
        self.mark("compiled_baseline")
        failed = judging.load(self.runner, self.request, library, timeout_s=self.timeout_s)
        if failed is not None:
            return failed
        self.mark("load")

        labels, largest = [], 0.0
        for label, case, seed, distribution in checks:
            self.current = judging.describe_call(case, seed, distribution)
            inputs = h.make_inputs(case, seed, distribution)
            reference = h.reference(case, inputs)
            largest = max(largest, self.checked_call(label, inputs, reference, flush=False)[2])
            labels.append(label)
        inputs = reference = None
        torch.cuda.empty_cache()  # the references' blocks back to the device, for the runner's outputs
        self.mark("correctness")

        checked = count = busy = 0
        reference_times: list[float] = []
        compiled_times: list[float] = []
        budget_ms = s.run.reference_budget_s * 1e3

        def timed_batch(n: int, last: bool) -> judging.TimedBatch:
            """One batch of `n` calls on fresh inputs: every output read by the judge itself, a secret share checked
            (one at least), the reference (and the compiled one) timed on the same inputs in this process."""
            nonlocal checked, count, busy, largest
            draws = [(self.random.getrandbits(62), h.distributions[(count + k) % len(h.distributions)]) for k in range(n)]
            inputs = [functools.partial(h.make_inputs, timing_case, seed, distribution) for seed, distribution in draws]
            self.current = f"timed calls {count}-{count + n - 1}: a batch on fresh inputs ({judging.describe_call(timing_case, *draws[0])}, ...)"
            for _attempt in range(s.run.timing_attempts + 1):
                with self.spending("null_batch"):
                    paired, _ = self.batch([make_sample] * n, timing_reference, null=True)
                with self.spending("batch"):
                    batch, placed = self.batch(inputs, timing_reference)
                if batch is not None:
                    batch = attrs.evolve(batch, null_ms=paired.wall_ms if paired is not None else None)
                    break
                busy += 1
            else:
                raise judging.Wrong(
                    "the GPU was still busy with the candidate's work after its reply, batch after batch"
                    f" (the judge's idle probe took more than {SLICE_MS} ms)"
                )
            first, count = count, count + n
            for k, (_views, target) in enumerate(placed):
                if not bool(torch.isfinite(target).all()) and target.is_floating_point():
                    raise judging.Wrong(f"timed call {first + k}: non-finite values in its output (never written?)")
            chosen = {self.random.randrange(n)} | {k for k in range(n) if self.random.random() < s.run.check_fraction}
            if last:
                chosen.add(n - 1)
            for k in sorted(chosen):  # the same inputs again, from their draw: a batch holds no copy of them
                views, target = placed[k]
                with self.spending("check_inputs"):
                    again = inputs[k]()
                with self.spending("check_reference"):
                    reference = h.reference(timing_case, again)
                with self.spending("check_compare"):
                    largest = max(largest, self.check(f"timed call {first + k} (fresh inputs)", again, views, target, reference))
                checked += 1
            if self.in_stride + self.out_stride >= LARGE_PLACE_BYTES:
                with self.spending("empty_cache"):
                    torch.cuda.empty_cache()  # a large task's references go back to the device at once
            views_in = [views for views, _ in placed]
            with self.spending("reference_timing"):
                if s.reference_ms is None and (
                    len(reference_times) < s.run.min_reference_repeats or sum(reference_times) < budget_ms
                ):
                    reference_times.extend([self.judge_batch(self.baseline, views_in)] * n)
                if compiled is not None and (
                    len(compiled_times) < s.run.min_reference_repeats or sum(compiled_times) < budget_ms
                ):
                    compiled_times.extend([self.judge_batch(compiled, views_in)] * n)
            return batch

        warm = timed_batch(min(self.place_count, 4), last=False)  # sizes the first batch; not part of the figure
        estimate = (warm.wall_ms - null.cost_ms(warm.calls)) / warm.calls

        def series() -> list[judging.TimedBatch]:
            batches: list[judging.TimedBatch] = []
            while True:
                calls = judging.resized(null, batches, estimate, places=self.place_count)
                total = sum(b.calls for b in batches) + calls
                last = timing_done(total, len(batches) + 1, sum(b.wall_ms for b in batches), batches, null, s.run)
                batches.append(timed_batch(calls, last))
                if last:
                    log = {
                        "null_one_ms": [round(x, 4) for x in null.one_ms],
                        "null_full_ms": [round(x, 4) for x in null.full_ms],
                        "calls": [b.calls for b in batches],
                        "wall_ms": [round(b.wall_ms, 4) for b in batches],
                        "paired_null_ms": [round(b.null_ms, 4) if b.null_ms is not None else None for b in batches],
                        "in_process_ms": [round(statistics.fmean(b.in_process_ms), 4) for b in batches],
                        "clock_parts": self.clock_parts,
                    }  # `judging.clock_part` of every batch
                    print(f"timing: {json.dumps(log)}", file=sys.stderr, flush=True)
                    return batches

        before = device_state(s.run.device)
        batches, verdict = judging.timed_series(
            series,
            null,
            attempts=s.run.timing_attempts,
            tolerance_fraction=s.run.timer_tolerance,
            tolerance_ms=s.run.timer_tolerance_ms,
        )
        after = device_state(s.run.device)
        self.mark("timing")
        if not verdict.consistent:
            return Rejected(reason=verdict.reason, latency_ms=verdict.latency_ms)

        seed = self.random.getrandbits(62)
        inputs = h.make_inputs(timing_case, seed, h.distributions[0])
        self.current = f"the profiled call: {judging.describe_call(timing_case, seed, h.distributions[0])}"
        reply, _, _ = self.checked_call(
            "the profiled call (fresh inputs)", inputs, h.reference(timing_case, inputs), inspect=True
        )
        self.mark("runtime_check")
        print(f"phases: {json.dumps(self.phases)}", file=sys.stderr, flush=True)
        print(f"timing steps (s): {json.dumps({k: round(v, 3) for k, v in self.steps.items()})}", file=sys.stderr, flush=True)
        return Judged(
            measurement=Measured(
                latency_ms=verdict.latency_ms,
                latency_p10_ms=verdict.latency_p10_ms,
                latency_p90_ms=verdict.latency_p90_ms,
                repeats=sum(b.calls for b in batches),
                reference_latency_ms=s.reference_ms if s.reference_ms is not None else statistics.median(reference_times),
                max_abs_error=largest,
                checks=labels,
                timing_bound=verdict.reason + (f"; {busy} batches redone: the GPU was busy after the reply" if busy else ""),
                reference_engine=getattr(h, "reference_engine", ""),
                compiled_reference_latency_ms=statistics.median(compiled_times) if compiled_times else None,
                compiled_reference_note=compiled_note,
                conditions={
                    **{f"{k}_start": v for k, v in before.items()},
                    **{f"{k}_end": v for k, v in after.items()},
                    "batch_calls": batches[-1].calls,
                    "protocol_ms_per_batch": round(null.cost_ms(batches[-1].calls), 4),
                    "in_process_ms": round(statistics.median(statistics.fmean(b.in_process_ms) for b in batches), 6),
                    **{f"memory_{k}": v for k, v in self.memory.items()},
                },
            ),
            checked_timed_calls=checked,
            kernels=reply.kernels,
            aten_ops=reply.aten_ops,
        )

    # --- timed batches ----------------------------------------------------------------------------

    def calibrate(self, make_sample, reference) -> judging.NullBatches:
        """Null batches of one call and of every place, before the candidate is loaded; and the idle probe's own time,
        which sets how long a probe may take before the GPU counts as busy."""
        one: list[float] = []
        full: list[float] = []
        probes: list[float] = []
        for _ in range(CALIBRATION_BATCHES):
            for n, into in ((1, one), (self.place_count, full)):
                batch, _ = self.batch([make_sample] * n, reference, null=True, probes=probes)
                into.append(batch.wall_ms)
        self.probe_limit_ms = max(PROBE_LIMIT_MS, 2 * judging.quantile(probes, 0.9))
        self.probe_idle_ms = statistics.median(probes)
        return judging.NullBatches(one_ms=one, full_ms=full, calls=self.place_count)

    def batch(self, inputs: list, reference, *, null: bool = False, probes: list | None = None):
        """One batch: the inputs each of `inputs` makes (a `null` batch: the first's, in every place) written into places of their own, L2 flushed, the calls ordered at once; the judge's
        clock runs from letting the candidate run to stopping it again. Then the judge checks the GPU is idle (a
        kernel of its own comes back at once only when no other context has work queued: a reply before the work was
        done shows here) and copies every output from the runner's memory into its own places. (the `TimedBatch`,
        [(views, output place)]), or (None, []) when the GPU was still busy."""
        with self.spending("make_first_inputs"):
            first = inputs[0]()  # the shapes of every call's inputs (one timing case)
        layouts = [self.layout(first, reference) for _ in inputs]
        calls = [CallOrder(case={}, inputs=views, output=out, null=null) for views, out in layouts]
        placed = []

        def write() -> None:  # each made, placed and let go: the places hold the only copy
            if probes is None and not self.idle():
                raise judging.Wrong(
                    "the candidate's process left work on the GPU while its batch was being prepared"
                    " (before its inputs existed): that work would run outside the judge's clock"
                )
            with self.spending("write_inputs"):
                for k, (make, (views, out)) in enumerate(zip(inputs, layouts, strict=True)):
                    placed.append((views, self.write(first if k == 0 or null else make(), views, out)))
                self.cold_start.flush.zero_()  # L2 holds no input: every place's inputs are untouched until its call
                torch.cuda.synchronize()

        reply, wall = self.runner.batch(BatchOrder(calls=calls, null=null), write, timeout_s=self.timeout_s * len(calls))
        if isinstance(reply, CallFailed):
            raise (Failed(reply.reason) if reply.raised else judging.Wrong(reply.reason))
        if not isinstance(reply, BatchDone) or len(reply.in_process_ms) != len(calls) or len(reply.outputs) != len(calls):
            raise judging.RunnerGone(f"the runner answered {type(reply).__name__} to a batch of {len(calls)} calls")
        probe = self.probe()
        self.clock_parts.append(judging.clock_part(self.runner, len(calls), null, reply.stamps, probe))
        if probes is not None:
            probes.append(probe)
        elif probe > SLICE_MS:  # the probe may have run in a time slice while the candidate's work went on
            return None, []
        elif probe > self.probe_limit_ms:  # the GPU was busy (or the judge slow): the wait counts as the candidate's
            wall += probe - self.probe_idle_ms
        with self.spending("collect_outputs"):
            self.collect(reply.handles, reply.outputs, [target for _, target in placed])
        self.note_memory()
        return judging.TimedBatch(calls=len(calls), wall_ms=wall, in_process_ms=reply.in_process_ms), placed

    def idle(self) -> bool:
        """Whether the GPU runs nothing but the judge's work: an idle probe within the limit, within `IDLE_WAIT_S` (a
        resident kernel of another context slows every probe for as long as it runs; a context starting, for a
        moment; a hiccup of the judge's own, one probe)."""
        deadline = time.monotonic() + IDLE_WAIT_S
        while self.probe() > self.probe_limit_ms:
            if time.monotonic() > deadline:
                return False
            time.sleep(1e-3)
        return True

    def probe(self) -> float:
        torch.cuda.synchronize()
        started = time.perf_counter()
        self.probe_tensor.add_(1)
        torch.cuda.synchronize()
        return (time.perf_counter() - started) * 1e3

    def collect(self, handles: list[str], outputs: list[list[int]], targets: list[torch.Tensor]) -> None:
        """Copy each output the runner names (`BatchDone.outputs`) into the judge's place for it: each handle opened
        here, every range checked against the allocation's real size, no two outputs on the same bytes."""
        if len(handles) > len(outputs) or any(len(o) != 2 or not 0 <= o[0] < len(handles) for o in outputs):
            raise judging.RunnerGone("the runner named its outputs' memory in a form the protocol does not have")
        opened: dict[str, tuple[int, int]] = {}  # by the handle itself: one allocation named twice is one
        try:
            spans = []
            for k, ((index, start), target) in enumerate(zip(outputs, targets)):
                handle = handles[index]
                if handle not in opened:
                    opened[handle] = ipc.open_handle(handle)
                nbytes = target.numel() * target.element_size()
                if start < 0 or start + nbytes > opened[handle][1]:
                    raise judging.RunnerGone(f"the runner placed output {k} outside the memory it names")
                spans.append((handle, start, start + nbytes, k))
            spans.sort()
            for (handle, _, end, k), (other, start, _, j) in itertools.pairwise(spans):
                if handle == other and start < end:
                    raise judging.Wrong(f"timed calls {min(j, k)} and {max(j, k)} of a batch returned the same memory")
            for handle, start, end, k in spans:
                targets[k].reshape(-1).view(torch.uint8).copy_(ipc.bytes_at(opened[handle][0] + start, end - start))
            torch.cuda.synchronize()
        except ipc.IpcError as exc:
            raise judging.RunnerGone(f"the judge could not read the runner's outputs: {exc}") from None
        finally:
            for pointer, _ in opened.values():
                ipc.close(pointer)

    def judge_batch(self, function, views_in: list[dict[str, BufferView]]) -> float:
        """Milliseconds a call of `function` (trusted: a reference) takes by the same rule as the candidate's: back to
        back on the batch's places, after an L2 flush, by this process's clock, less the same loop with no call. One
        untimed call first: a large task's references give their memory back to the device between batches, and the
        candidate's calls find theirs in its runner's allocator, so without it the reference alone would pay for
        allocating its output and intermediates (gigabytes on KernelBench's level 1: its seeds read 1.04-1.31x faster
        than the very calls they are made of, on an H100, 2026-12-06)."""
        args = [[self._array(self.inputs_arena, v[str(i)]) for i in range(len(v))] for v in views_in]
        function(args[0])

        def run(call) -> float:
            self.cold_start.flush.zero_()
            torch.cuda.synchronize()
            started = time.perf_counter()
            for a in args:
                call(a)
            torch.cuda.synchronize()
            return (time.perf_counter() - started) * 1e3

        return max(0.0, run(function) - run(lambda a: None)) / len(args)


def timing_done(total: int, batches: int, walls_ms: float, done: list, null: judging.NullBatches, timing: CudaRunConfig) -> bool:
    """Enough timed calls after the next batch: `MIN_BATCHES` batches at least, and `repeats` calls, or `min_repeats` once the
    batches' wall times (the judge's clock) add up to `timing_budget_s`; when adaptive, until the relative standard
    error of the per-batch figures is below `target_rse` (at most `max_repeats` calls)."""
    if batches < MIN_BATCHES:
        return False
    if total >= timing.min_repeats and walls_ms >= timing.timing_budget_s * 1e3:
        return True
    if total < timing.repeats:
        return False
    if not timing.adaptive or total >= timing.max_repeats or len(done) < 3:
        return True
    figures = [(b.wall_ms - null.cost_ms(b.calls)) / b.calls for b in done]
    return statistics.stdev(figures) / len(figures) ** 0.5 / statistics.mean(figures) < timing.target_rse


if __name__ == "__main__":
    main()
