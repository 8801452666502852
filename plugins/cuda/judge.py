"""The cuda judge: decides a cuda candidate's verdict without ever loading it (eval.md §3, §4).

It owns two GPU buffers that the runner opens through CUDA IPC, one for a call's inputs and one for its
output. The runner's processes run only from an order to its reply (stopped in between). For every call the
judge draws fresh inputs (every data input the harness makes), writes them into the input buffer, fills the
output buffer with NaN, orders the call, and reads the output buffer and the inputs back itself:

1. correctness: every case, seed and distribution against an FP64 reference computed here (TF32 off);
2. timing: each timed call on inputs never seen before (no result cache can hit), a secret random share of
   them (at least two, and the last) checked like the correctness cases; the runner's CUDA events (queued
   around the call right after an L2 flush and a 0.5 ms cover, with no wait on the host in between: the host's
   latency in launching the call, up to the cover, is not in the figure) are accepted only where the judge's clock around the call,
   less the protocol's own overhead measured before the candidate was loaded, agrees
   (`judging.bound_timing`); the reference (eager PyTorch) is timed here, interleaved, the same way;
3. one more checked call under the runner's profiler and a dispatcher log: the kernels and ATen operators
   it really ran, for the runtime space check (a claim of the runner's: the binary check is the judge's).

The workload's harness (`Workload.harness(task, "cuda")`, a `hiera_plugins.cuda.harness.CudaHarness`)
supplies the semantics.
"""

from __future__ import annotations

import base64
import json
import math
import pickle
import secrets
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.multiprocessing.reductions import reduce_tensor

from hiera_core import judging
from hiera_core.records import (
    AttachOrder,
    BufferView,
    CallOrder,
    Incorrect,
    JudgeAnswer,
    JudgeRequest,
    Judged,
    Loaded,
    Rejected,
    TimedOut,
)
from hiera_plugins.cuda.runner import ColdStart, seeded

ALIGN = 256
PLACEMENT_BYTES = 8 * 2**30
"""At most this much GPU memory for the inputs' and the output's places together: a task whose buffers are larger
gets fewer places (one, if one pair alone is larger)."""
PLACE_ALIGN = 2**21
STAGGER = 2**16
"""Each input place starts this much further past a 2 MiB boundary than the one before (the output places do
not), so that the places differ in where an input lies against its output as well as in their pages."""
CALIBRATION_CALLS = 21
COMPARE_CHUNK = 2**26
"""Elements compared at a time: FP64 temporaries of 512 MiB whatever the output's size (level 1 task 38's
output is 2.1 G elements; whole-tensor temporaries ran the H200 out of memory)."""


class Failed(Exception):
    """The candidate's call raised."""


def main() -> None:
    request = judging.read_request()
    s = request.settings
    harness = judging.harness_of(request.workload_factory, request.workload_config, request.task, "cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(1)
    torch.cuda.set_device(s["device"])
    runner = judging.Runner("hiera_plugins.cuda.runner", scratch=Path.cwd(), args=[str(s["device"])],
                            rlimit_data_bytes=s.get("memory_bytes"))
    torch.cuda.init()
    judge = None
    try:
        runner.started(timeout_s=s["timeout_s"])
        library = judging.wait_for_go()
        judge = CudaJudge(harness, request, runner)
        result = judge.evaluate(library)
    except judging.RunnerGone as exc:
        case = judge.current if judge else judging.STARTUP
        limit = s["call_timeout_s"] if judge else s["timeout_s"]
        result = (TimedOut(limit_s=limit, case=case) if exc.timed_out
                  else runner.crashed(str(exc), case=case, signal=exc.signal))
    except (RuntimeError, TypeError, ValueError) as exc:  # the harness on inputs a candidate broke, a CUDA error
        result = runner.crashed(f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:400]}",
                                case=judge.current if judge else "")
    finally:
        runner.close()
    judging.answer(result)


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


def timing_done(times: list[float], walls: list[float], timing: dict[str, Any]) -> bool:
    """Enough timed calls: `repeats`, or `min_repeats` once their wall times (the judge's clock, not the
    runner's figures) add up to `timing_budget_s`; when adaptive, until the relative standard error of the mean is
    below `target_rse` (at most `max_repeats`)."""
    if len(times) >= timing["min_repeats"] and sum(walls) >= timing["timing_budget_s"] * 1e3:
        return True
    if len(times) < timing["repeats"]:
        return False
    if not timing["adaptive"] or len(times) >= timing["max_repeats"]:
        return True
    return statistics.stdev(times) / len(times) ** 0.5 / statistics.mean(times) < timing["target_rse"]


def max_error(out: torch.Tensor, reference: torch.Tensor, rtol: float, atol: float,
              chunk: int = COMPARE_CHUNK) -> tuple[float, int | str | None]:
    """The largest |out - reference| and where the first element out of tolerance is (a flat index;
    "non-finite" if any output value is NaN or infinite; None if all pass). An element passes when
    |out - ref| <= atol * max(1, rms(ref)) + rtol * |ref|. Works through both tensors `chunk` elements at a time."""
    got_all, ref_all = out.reshape(-1), reference.reshape(-1)
    n = ref_all.numel()
    if n == 0:
        return 0.0, None
    spans = [(start, min(n, start + chunk)) for start in range(0, n, chunk)]
    if not all(bool(torch.isfinite(got_all[a:b]).all()) for a, b in spans):
        return float("nan"), "non-finite"
    squares = sum(float(ref_all[a:b].double().pow(2).sum()) for a, b in spans)
    scale = max(1.0, math.sqrt(squares / n))  # atol is relative to the output's RMS magnitude
    error, first_bad = 0.0, None
    for a, b in spans:
        ref = ref_all[a:b].double()
        diff = (got_all[a:b].double() - ref).abs_()
        error = max(error, float(diff.max()))
        bad = diff > ref.abs().mul_(rtol).add_(atol * scale)
        if first_bad is None and bool(bad.any()):
            first_bad = a + int(torch.nonzero(bad)[0])
    return error, first_bad


def _aligned(n: int, align: int = ALIGN) -> int:
    return (n + align - 1) // align * align


def places(in_bytes: int, out_bytes: int, wanted: int) -> tuple[int, int, int]:
    """(places, input stride, output stride): how many places the calls rotate over, for inputs of `in_bytes`
    and an output of `out_bytes`, and how far apart they lie; `wanted` at most, within `PLACEMENT_BYTES`."""
    in_stride = _aligned(max(in_bytes, ALIGN), PLACE_ALIGN) + STAGGER
    out_stride = _aligned(max(out_bytes, ALIGN), PLACE_ALIGN)
    return max(1, min(wanted, PLACEMENT_BYTES // (in_stride + out_stride))), in_stride, out_stride


class CudaJudge:
    def __init__(self, harness: Any, request: JudgeRequest, runner: judging.Runner) -> None:
        self.h, self.request, self.runner = harness, request, runner
        self.s = request.settings
        self.timeout_s = self.s["call_timeout_s"]
        self.random = secrets.SystemRandom()  # which timed calls are checked: the candidate cannot know
        self.cold_start = ColdStart()
        self.phases: dict[str, float] = {}
        self.last = time.perf_counter()
        self.call_seed = getattr(harness, "call_seed", None)
        self.baseline = seeded(harness.baseline, self.call_seed)
        self.factor = getattr(harness, "pytorch_error_factor", None)
        self.current = ""
        """The call the candidate is in (`judging.describe_call`), named in its `Crashed` record if it dies there."""

    def mark(self, phase: str) -> None:
        now = time.perf_counter()
        self.phases[phase] = round(now - self.last, 3)
        self.last = now

    # --- the buffers ------------------------------------------------------------------------------

    def attach(self, cases: list[tuple]) -> None:
        """Allocate the two buffers, each with `placements` places for the largest inputs and output of `cases`,
        and hand them to the runner. Every call goes to the next place (`CudaRunConfig.placements`)."""
        in_bytes = max(sum(_aligned(t.numel() * t.element_size()) for t in inputs) for _, inputs, _ in cases)
        out_bytes = max(ref.numel() * torch.empty((), dtype=self.out_dtype).element_size() for _, _, ref in cases)
        self.place_count, self.in_stride, self.out_stride = places(in_bytes, out_bytes, self.s["placements"])
        self.place_index = 0
        self.inputs_arena = torch.empty(self.place_count * self.in_stride, dtype=torch.uint8, device="cuda")
        self.output_arena = torch.empty(self.place_count * self.out_stride, dtype=torch.uint8, device="cuda")
        handles = base64.b64encode(pickle.dumps((reduce_tensor(self.inputs_arena), reduce_tensor(self.output_arena)))).decode()
        reply, _ = self.runner.ask(AttachOrder(handles=handles, places=self.place_count), timeout_s=self.timeout_s)
        if not isinstance(reply, Loaded):
            raise judging.RunnerGone(f"the runner could not open the judge's buffers: {reply}")

    def place(self, inputs: list[torch.Tensor], reference: torch.Tensor) -> tuple[dict[str, BufferView], BufferView, torch.Tensor]:
        """Write `inputs` into the next place, fill its output with NaN (-1 for integers)."""
        k = self.place_index
        self.place_index = (k + 1) % self.place_count
        views, offset = {}, k * self.in_stride
        for i, tensor in enumerate(inputs):
            view = BufferView(offset_bytes=offset, shape=list(tensor.shape), dtype=str(tensor.dtype)[6:])
            self._array(self.inputs_arena, view).copy_(tensor)
            views[str(i)] = view
            offset = _aligned(offset + tensor.numel() * tensor.element_size())
        out = BufferView(offset_bytes=k * self.out_stride, shape=list(reference.shape), dtype=str(self.out_dtype)[6:])
        target = self._array(self.output_arena, out)
        target.fill_(float("nan")) if target.is_floating_point() else target.fill_(-1)
        torch.cuda.synchronize()
        return views, out, target

    @staticmethod
    def _array(arena: torch.Tensor, view: BufferView) -> torch.Tensor:
        dtype = getattr(torch, view.dtype)
        nbytes = math.prod(view.shape) * torch.empty((), dtype=dtype).element_size()
        return arena[view.offset_bytes: view.offset_bytes + nbytes].view(dtype).view(view.shape)

    # --- one call ---------------------------------------------------------------------------------

    def call(self, inputs, reference, *, null=False, inspect=False, flush=True):
        """One call of the runner on `inputs`, placed in the buffers first."""
        views, out, target = self.place(inputs, reference)
        self.placed = views, out
        order = CallOrder(case={}, inputs=views, output=out, null=null, inspect=inspect, flush_cache=flush)
        try:
            reply, wall = judging.call(self.runner, order, timeout_s=self.timeout_s)
        except judging.CandidateFailed as exc:
            if exc.raised:  # a CUDA error, a wrong signature: the candidate crashed
                raise Failed(str(exc)) from None
            raise judging.Wrong(str(exc)) from None
        return reply, wall, views, target

    def warm_up(self) -> None:
        """A null call just before the next inputs are placed, so that a timed call follows a call as every
        calibration call did (a runner woken from a long sleep answers later: on the H200, 0.2-0.4 ms more a
        call with the judge's checks and reference between timed calls). It runs on the inputs of the call
        before, which the candidate has seen; its figures are not used (the candidate can slow it)."""
        views, out = self.placed
        judging.call(self.runner, CallOrder(case={}, inputs=views, output=out, null=True), timeout_s=self.timeout_s)

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
            raise judging.Wrong(f"{label}: max abs error {error:.3g} (at {where}: got {float(target[where]):.6g},"
                        f" expected {float(reference[where]):.6g}; rtol {rtol:g}, atol {atol:g}{allowed})", error)
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
        sample = h.make_inputs(timing_case, seeds[0], h.distributions[0])
        timing_reference = h.reference(timing_case, sample)
        sizes = [(timing_case, sample, timing_reference)]
        for _, case, seed, distribution in checks:
            if case != timing_case:
                inputs = h.make_inputs(case, seed, distribution)
                sizes.append((case, inputs, h.reference(case, inputs)))
        self.attach(sizes)
        del sizes
        self.mark("buffers")

        overhead = []
        for _ in range(CALIBRATION_CALLS):  # the protocol around a null call, before the candidate is loaded
            reply, wall, _, _ = self.call(sample, timing_reference, null=True)
            overhead.append(wall - reply.in_process_ms)
        self.mark("calibration")
        compiled, compiled_note = None, ""
        if self.request.settings.get("compile_baseline") and hasattr(h, "compiled_baseline"):
            try:  # compiled on its first call, in this process: the candidate never shares it
                compiled = seeded(h.compiled_baseline(), self.call_seed)
                timed(self.cold_start, lambda: compiled(sample))
            except Exception as exc:  # noqa: BLE001 -- a baseline that does not compile is reported, not fatal
                compiled, compiled_note = None, f"torch.compile failed: {type(exc).__name__}: {str(exc).strip()[:300]}"
        timed(self.cold_start, lambda: self.baseline(sample))
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
        self.mark("correctness")

        # two checked calls chosen in secret: one among the first `min_repeats` (timing may stop there), one anywhere
        forced = {self.random.randrange(max(1, min(s["min_repeats"], s["repeats"]))), self.random.randrange(max(1, s["repeats"]))}
        checked = 0
        reference_times, compiled_times = [], []
        spent = compiled_spent = 0.0
        budget_ms = s["reference_budget_s"] * 1e3

        def series() -> tuple[list[float], list[float]]:
            """One series of timed calls, each on fresh inputs, the reference (and the compiled one) interleaved."""
            nonlocal largest, checked, spent, compiled_spent
            times, walls = [], []
            done = False
            while not done:
                i = len(times)
                seed, distribution = self.random.getrandbits(62), h.distributions[i % len(h.distributions)]
                inputs = h.make_inputs(timing_case, seed, distribution)
                self.current = f"timed call {i}: {judging.describe_call(timing_case, seed, distribution)}"
                self.warm_up()
                reply, wall, views, target = self.call(inputs, timing_reference)
                times.append(reply.in_process_ms)
                walls.append(wall)
                done = timing_done(times, walls, s)
                if i in forced or done or self.random.random() < s["check_fraction"]:  # the last one too
                    largest = max(largest, self.check(f"timed call {i} (fresh inputs)", inputs, views, target,
                                                      h.reference(timing_case, inputs)))
                    checked += 1
                if s.get("reference_ms") is None and (len(reference_times) < s["min_reference_repeats"] or spent < budget_ms):
                    elapsed, _ = timed(self.cold_start, lambda: self.baseline(inputs))
                    reference_times.append(elapsed)
                    spent += elapsed
                if compiled is not None and (len(compiled_times) < s["min_reference_repeats"] or compiled_spent < budget_ms):
                    elapsed, _ = timed(self.cold_start, lambda: compiled(inputs))
                    compiled_times.append(elapsed)
                    compiled_spent += elapsed
            print(f"timing: {json.dumps({'overhead_ms': [round(x, 4) for x in overhead], 'in_process_ms': [round(x, 4) for x in times], 'wall_ms': [round(x, 4) for x in walls]})}",
                  file=sys.stderr, flush=True)
            return times, walls

        before = device_state(s["device"])
        times, walls, bound = judging.bounded_series(series, overhead, attempts=s["timing_attempts"])
        after = device_state(s["device"])
        self.mark("timing")
        latency = statistics.median(times)
        if not bound.consistent:
            return Rejected(reason=bound.reason, latency_ms=latency)

        seed = self.random.getrandbits(62)
        inputs = h.make_inputs(timing_case, seed, h.distributions[0])
        self.current = f"the profiled call: {judging.describe_call(timing_case, seed, h.distributions[0])}"
        reply, _, _ = self.checked_call("the profiled call (fresh inputs)", inputs, h.reference(timing_case, inputs),
                                        inspect=True)
        self.mark("runtime_check")
        print(f"phases: {json.dumps(self.phases)}", file=sys.stderr, flush=True)
        return Judged(
            latency_ms=latency,
            latency_p10_ms=judging.quantile(times, 0.1),
            latency_p90_ms=judging.quantile(times, 0.9),
            repeats=len(times),
            reference_latency_ms=statistics.median(reference_times) if reference_times else s["reference_ms"],
            max_abs_error=largest,
            checks=labels,
            timing_bound=bound.reason,
            reference_engine=getattr(h, "reference_engine", ""),
            checked_timed_calls=checked,
            metrics={"judge_overhead_ms": statistics.median(overhead)},
            kernels=reply.kernels,
            aten_ops=reply.aten_ops,
            compiled_reference_latency_ms=statistics.median(compiled_times) if compiled_times else None,
            compiled_reference_note=compiled_note,
            conditions={**{f"{k}_start": v for k, v in before.items()}, **{f"{k}_end": v for k, v in after.items()}},
        )


if __name__ == "__main__":
    main()
