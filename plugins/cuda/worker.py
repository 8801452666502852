"""The cuda worker: one fresh process per candidate. Reads a JSON request on stdin, prints one JSON answer.

Order matters for honesty (eval.md §3, §4):
1. every reference output (correctness cases, the timing input sets, and values written later into the
   timing inputs in place) is computed in FP64, without TF32, before the candidate's library is loaded,
   and stays allocated on the GPU until the process ends (outputs are compared there, without copies);
2. each correctness case runs with a NaN-poisoned allocator, pristine input copies, and checks that the
   output is exactly a torch.Tensor of the right shape, dtype and device, aliases no input, and that no
   input changed;
3. timing: a 256 MiB L2 flush before every call, CUDA events with a device-wide synchronize before the
   end event, rotating input sets, candidate and reference interleaved; then the timed outputs and a
   call on inputs rewritten in place (same pointers, new values) are checked again;
4. the thread count and the timer functions must be as they were before the candidate was loaded;
5. one call under the profiler and a dispatcher log: the kernels and ATen operators it really ran.

The workload's harness (`Workload.harness(task, "cuda")`) supplies the semantics:

    entry (the bound function), dtype, distributions, tolerance -> (rtol, atol); an element passes when
        |out - ref| <= atol * max(1, rms(ref)) + rtol * |ref|
    correctness_cases(remeasure) -> [case dict with "label"; "first_seed_only": True runs a large case
        with the first seed and distribution only], seeds(remeasure) -> (int, ...)
    make_inputs(case, seed, distribution) -> [Tensor, ...] on the GPU (positional arguments)
    optional: timing_sets(requested) -> how many timing input sets to hold (fewer when they would not fit)
    optional: compiled_baseline() -> a callable like baseline, the reference under torch.compile (timed on
        the final re-measurement, when the request asks for it)
    optional: pytorch_error_factor -> a candidate whose largest error is at most this times the baseline's own
        (eager FP32) error on the same inputs passes even where elements exceed the tolerance
    optional: call_seed -> int or None: the RNG seed every call of the candidate and the baseline starts
        from (the references were computed from it: a task that draws random numbers)
    reference(case, inputs) -> Tensor (FP64), baseline(inputs) -> Tensor (the timed PyTorch reference)
    timing_case() -> case
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import statistics
import sys
import threading
import time
from typing import Any

STARTED = time.perf_counter()

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from hiera_core.config import structure
from hiera_core.isolation import wait_for_go
from hiera_core.records import Task
from hiera_core.serialization import from_dict


OS_THREAD_SLACK = 4
"""OS threads the CUDA runtime may add on its own while a candidate runs (module loading, event pools)."""


class Rejected(Exception):
    """A check failed: the candidate is incorrect (not crashed)."""


def main() -> None:
    request = json.loads(sys.stdin.readline())
    module, _, qualname = request["workload_factory"].partition(":")
    workload_cls = getattr(importlib.import_module(module), qualname)
    config = structure(request["workload_config"], workload_cls.config_class, where="worker") if workload_cls.config_class else None
    harness = workload_cls(config).harness(from_dict(request["task"], Task), "cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(1)  # the harness's CPU work needs no thread pool, and a pool would blur the thread check
    torch.cuda.set_device(request["device"])
    if request.get("profile"):  # under ncu, which the parent runs while holding the GPU
        profile_one_call(harness, request)
        return
    torch.cuda.init()
    print(f"phases: {json.dumps({'start_to_ready': round(time.perf_counter() - STARTED, 3)})}", file=sys.stderr, flush=True)
    wait_for_go()
    try:
        answer = evaluate(harness, request)
    except Rejected as exc:
        answer = {"kind": "incorrect", "reason": str(exc)}
    except (RuntimeError, TypeError, ValueError) as exc:  # a CUDA error, a wrong signature, ...
        answer = {"kind": "crashed", "reason": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:400]}"}
    print(json.dumps(answer), flush=True)


def load_candidate(path: str):
    name = os.path.basename(path).split(".")[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def evaluate(harness: Any, request: dict[str, Any]) -> dict[str, Any]:
    phases = Phases()
    remeasure, timing = request["remeasure"], request["timing"]
    seeds = harness.seeds(remeasure)
    cases = []
    for case in harness.correctness_cases(remeasure):
        large = case.get("first_seed_only", False)  # the task grid itself: once, to keep large tasks affordable
        for seed in seeds[:1] if large else seeds:
            for distribution in harness.distributions[:1] if large else harness.distributions:
                inputs = harness.make_inputs(case, seed, distribution)
                cases.append((case, seed, distribution, inputs, harness.reference(case, inputs)))
    timing_case = harness.timing_case()
    timing_sets = []
    sets = harness.timing_sets(timing["input_sets"]) if hasattr(harness, "timing_sets") else timing["input_sets"]
    for k in range(sets):
        inputs = harness.make_inputs(timing_case, seeds[-1] + 1000 + k, harness.distributions[k % len(harness.distributions)])
        timing_sets.append((inputs, harness.reference(timing_case, inputs)))
    rewrite = harness.make_inputs(timing_case, seeds[-1] + 2000, harness.distributions[0])
    rewrite_reference = harness.reference(timing_case, rewrite)
    flush = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device="cuda")
    call_seed = getattr(harness, "call_seed", None)
    baseline = seeded(harness.baseline, call_seed)
    timed(flush, lambda: baseline(timing_sets[0][0]))  # the harness's own threads exist before the candidate's
    rtol, atol = harness.tolerance
    factor = getattr(harness, "pytorch_error_factor", None)

    def allowed(inputs, reference) -> float:
        """`factor` x eager PyTorch's own FP32 error on these inputs: what a candidate may always have (0 without)."""
        if not factor:
            return 0.0
        error, first_bad = max_error(baseline(inputs), reference, rtol, atol)
        return 0.0 if first_bad == "non-finite" else factor * error

    cases = [(*case, allowed(case[3], case[4])) for case in cases]
    timing_allowed = [allowed(inputs, reference) for inputs, reference in timing_sets]
    rewrite_allowed = allowed(rewrite, rewrite_reference)
    phases.mark("references")
    compiled, compiled_note = None, ""
    if request.get("compile_baseline") and hasattr(harness, "compiled_baseline"):
        try:  # compiled on its first call, and run on every timing set, before the candidate is loaded
            compiled = seeded(harness.compiled_baseline(), call_seed)
            for inputs, _ in timing_sets:
                timed(flush, lambda: compiled(inputs))
        except Exception as exc:  # noqa: BLE001 -- a baseline that does not compile is reported, not fatal
            compiled, compiled_note = None, f"torch.compile failed: {type(exc).__name__}: {str(exc).strip()[:300]}"
    phases.mark("compiled_baseline")
    timers = _timer_identity()
    threads_before = threading.active_count(), _os_threads()
    fn = seeded(getattr(load_candidate(request["library"]), harness.entry), call_seed)  # it enters the process only now
    phases.mark("load")
    checks, largest_error = [], 0.0
    for case, seed, distribution, inputs, reference, allowance in cases:
        label = f"{case['label']} seed {seed} {distribution}"
        largest_error = max(largest_error, _checked_call(fn, inputs, reference, harness.dtype, rtol, atol, label, allowance))
        checks.append(label)

    phases.mark("correctness")
    for inputs, _ in timing_sets:  # warm-up
        fn(*inputs)
        baseline(inputs)
    torch.cuda.synchronize()
    times, reference_times, compiled_times, outputs = [], [], [], {}
    reference_budget_s = timing["reference_budget_s"]
    spent = compiled_spent = 0.0
    trial = 0
    while not timing_done(times, timing):
        k = trial % len(timing_sets)
        trial += 1
        inputs = timing_sets[k][0]
        elapsed, out = timed(flush, lambda: fn(*inputs))
        times.append(elapsed)
        outputs[k] = out
        if len(reference_times) < timing["min_reference_repeats"] or spent < reference_budget_s * 1e3:
            elapsed, _ = timed(flush, lambda: baseline(inputs))
            reference_times.append(elapsed)
            spent += elapsed
        if compiled is not None and (len(compiled_times) < timing["min_reference_repeats"]
                                     or compiled_spent < reference_budget_s * 1e3):
            elapsed, _ = timed(flush, lambda: compiled(inputs))
            compiled_times.append(elapsed)
            compiled_spent += elapsed
    for k, (inputs, reference) in enumerate(timing_sets):
        _compare(outputs[k], reference, harness.dtype, rtol, atol, f"timed call on input set {k}", timing_allowed[k])
    target = timing_sets[0][0]
    for tensor, new in zip(target, rewrite):
        tensor.copy_(new)
    _checked_call(fn, target, rewrite_reference, harness.dtype, rtol, atol, "inputs rewritten in place", rewrite_allowed)
    torch.cuda.synchronize()

    phases.mark("timing")
    if _timer_identity() != timers:
        raise Rejected("the timing functions were replaced while the candidate ran")
    threads_after = threading.active_count(), _os_threads()
    if threads_after[0] > threads_before[0] or threads_after[1] > threads_before[1] + OS_THREAD_SLACK:
        raise Rejected(f"the candidate left threads running ({threads_before} -> {threads_after} Python/OS threads)")
    kernels, ops = _runtime_calls(fn, timing_sets[0][0])
    phases.mark("runtime_check")
    print(f"phases: {json.dumps(phases.seconds)}", file=sys.stderr, flush=True)
    return {
        "kind": "measured",
        "latency_ms": statistics.median(times),
        "latency_p10_ms": _quantile(times, 0.1),
        "latency_p90_ms": _quantile(times, 0.9),
        "repeats": len(times),
        "reference_latency_ms": statistics.median(reference_times),
        "reference_repeats": len(reference_times),
        "compiled_reference_latency_ms": statistics.median(compiled_times) if compiled_times else None,
        "compiled_reference_note": compiled_note,
        "max_abs_error": largest_error,
        "checks": checks,
        "threads": [threads_before, threads_after],
        "kernels": kernels,
        "aten_ops": ops,
    }


def seeded(call, seed: int | None):
    """`call` starting from the RNG state `torch.manual_seed(seed)` gives (a task that draws random numbers,
    like dropout in training mode, as the harness computed its references); `call` itself when seed is None."""
    if seed is None:
        return call

    def from_seed(*args):
        torch.manual_seed(seed)
        return call(*args)

    return from_seed


class Phases:
    """Wall time of each phase, printed to the worker's log: where a candidate's evaluation time goes."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.last = time.perf_counter()

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = round(now - self.last, 3)
        self.last = now


def timing_done(times: list[float], timing: dict[str, Any]) -> bool:
    """Enough timed calls: `repeats`; when adaptive, until the relative standard error of the mean is
    below `target_rse` (at most `max_repeats`)."""
    if len(times) < timing["repeats"]:
        return False
    if not timing["adaptive"] or len(times) >= timing["max_repeats"]:
        return True
    return statistics.stdev(times) / len(times) ** 0.5 / statistics.mean(times) < timing["target_rse"]


def timed(flush: torch.Tensor, call) -> tuple[float, Any]:
    """(milliseconds, result) of one `call`, timed with CUDA events after `flush` (a buffer larger than L2) is
    overwritten, so the call starts from a cold L2 as every timed call of the protocol does."""
    flush.zero_()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    out = call()
    torch.cuda.synchronize()  # device-wide: work on any stream is inside the interval
    end.record()
    end.synchronize()
    return start.elapsed_time(end), out


def _checked_call(fn, inputs, reference, dtype, rtol, atol, label, allowance=0.0) -> float:
    pristine = [t.clone() for t in inputs]
    _poison_allocator(sum(t.numel() * t.element_size() for t in inputs), reference.numel() * 8)
    out = fn(*inputs)
    torch.cuda.synchronize()
    if type(out) is not torch.Tensor:
        raise Rejected(f"{label}: the output is a {type(out).__module__}.{type(out).__qualname__}, not exactly a torch.Tensor")
    for i, (tensor, copy) in enumerate(zip(inputs, pristine)):
        if _overlaps(out, tensor):
            raise Rejected(f"{label}: the output shares memory with input {i}")
        if not torch.equal(tensor, copy):
            raise Rejected(f"{label}: input {i} was modified")
    return _compare(out, reference, dtype, rtol, atol, label, allowance)


def _poison_allocator(input_bytes: int, output_bytes: int) -> None:
    """Fill the memory the candidate's outputs will be allocated from with all-ones bytes (NaN in every
    float type), so that an output it never writes fails. The cached blocks (earlier comparisons'
    temporaries) go back to the driver first; outputs below 1 MiB come from the allocator's 2 MiB
    small-block segments, which a single large block never feeds."""
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info()  # twice the largest tensor, within half of what is free (large tasks)
    blocks = [torch.empty(min(max(input_bytes, output_bytes) * 2, free // 2), dtype=torch.uint8, device="cuda")]
    if output_bytes < 2**20:
        size = max(output_bytes, 512)
        blocks += [torch.empty(size, dtype=torch.uint8, device="cuda") for _ in range(min(4096, 2**21 // size + 1))]
    for block in blocks:
        block.fill_(0xFF)
    del blocks


COMPARE_CHUNK = 2**26
"""Elements compared at a time: FP64 temporaries of 512 MiB whatever the output's size (level 1 task 38's
output is 2.1 G elements; whole-tensor temporaries ran the H200 out of memory)."""


def _compare(out, reference, dtype, rtol, atol, label, allowance=0.0) -> float:
    """The largest abs error; Rejected unless every element is within tolerance or the largest error is at most
    `allowance` (what eager PyTorch's own FP32 error on the same inputs allows)."""
    if out.device.type != "cuda":
        raise Rejected(f"{label}: the output is on {out.device}, not the GPU")
    if str(out.dtype) != f"torch.{dtype}":
        raise Rejected(f"{label}: the output dtype is {out.dtype}, the contract says {dtype}")
    if tuple(out.shape) != tuple(reference.shape):
        raise Rejected(f"{label}: output shape {tuple(out.shape)}, expected {tuple(reference.shape)}")
    # On the GPU, against references that stay allocated for the whole process (no candidate output can be
    # handed their memory); no temporary below holds a copy of a reference that a later output could reuse.
    error, first_bad = max_error(out.detach(), reference.to(out.device), rtol, atol)
    if first_bad == "non-finite":
        raise Rejected(f"{label}: non-finite values in the output (never written?)")
    if first_bad is not None and error > allowance:
        where = tuple(int(i) for i in torch.unravel_index(torch.tensor(first_bad), tuple(out.shape)))
        allowed = f"; PyTorch's own FP32 error allows {allowance:.3g}" if allowance else ""
        raise Rejected(
            f"{label}: max abs error {error:.3g} (at {where}: got {float(out[where]):.6g},"
            f" expected {float(reference[where]):.6g}; rtol {rtol:g}, atol {atol:g}{allowed})"
        )
    return error


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


def _overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    sa, sb = a.untyped_storage(), b.untyped_storage()
    a0, b0 = sa.data_ptr(), sb.data_ptr()
    return a0 < b0 + sb.nbytes() and b0 < a0 + sa.nbytes() and sa.nbytes() > 0 and sb.nbytes() > 0


def _timer_identity() -> tuple[int, ...]:
    return tuple(map(id, (torch.cuda.Event.record, torch.cuda.Event.elapsed_time, torch.cuda.synchronize,
                          torch.cuda.Event.synchronize, time.perf_counter, torch.equal, torch.Tensor.abs)))


def _os_threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


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


def _runtime_calls(fn, inputs) -> tuple[list[str], list[str]]:
    """The GPU kernels and ATen operators one call really ran (the runtime space check reads them)."""
    from torch.profiler import ProfilerActivity, profile

    ops = OpNames()
    with profile(activities=[ProfilerActivity.CUDA]) as prof, ops:
        fn(*inputs)
        torch.cuda.synchronize()
    kernels = sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})
    return kernels, sorted(ops.names)


def profile_one_call(harness: Any, request: dict[str, Any]) -> None:
    """For Nsight Compute: an unprofiled warm-up, then exactly one call inside the NVTX range."""
    inputs = harness.make_inputs(harness.timing_case(), harness.seeds(False)[0], harness.distributions[0])
    fn = getattr(load_candidate(request["library"]), harness.entry)
    fn(*inputs)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(request["nvtx_range"])
    fn(*inputs)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()


if __name__ == "__main__":
    main()
