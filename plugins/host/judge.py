"""The host judge: decides a host candidate's verdict without ever loading it.

It makes every input (fresh values for every check and every timed call, the stencil's weights too),
places them in a memfd it shares with the runner, poisons the output with NaN, orders one call, stops
the runner's processes, and reads the output and the inputs back itself. Timed calls run on inputs never
seen before; a secret random share of them (at least two) is checked against a reference computed here.
Each call is timed by the runner's clock and bounded by the judge's own (`judging.bound_timing`).

The workload's harness (`Workload.harness(task, "host")`, a `hiera_plugins.host.harness.HostHarness`)
supplies the semantics.
"""

from __future__ import annotations

import mmap
import os
import secrets
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from hiera_core import judging
from hiera_core.records import (
    BufferView,
    CallOrder,
    Incorrect,
    JudgeAnswer,
    JudgeRequest,
    Judged,
    Rejected,
    TimedOut,
)

ALIGN = 64
CALIBRATION_CALLS = 31


class Arena:
    """One memfd: the inputs of a call, then its output, laid out afresh for every call."""

    def __init__(self, size: int) -> None:
        self.fd = os.memfd_create("hiera-arena", 0)
        os.ftruncate(self.fd, max(size, ALIGN))
        self.map = mmap.mmap(self.fd, max(size, ALIGN))

    def place(self, inputs: dict[str, np.ndarray], output: np.ndarray) -> tuple[dict[str, BufferView], BufferView]:
        views, offset = {}, 0
        for name, array in inputs.items():
            views[name] = self._write(offset, array)
            offset = _aligned(offset + array.nbytes)
        poisoned = np.full(output.shape, np.nan, dtype=output.dtype)
        return views, self._write(offset, poisoned)

    def _write(self, offset: int, array: np.ndarray) -> BufferView:
        self.array(BufferView(offset_bytes=offset, shape=list(array.shape), dtype=array.dtype.str))[...] = array
        return BufferView(offset_bytes=offset, shape=list(array.shape), dtype=array.dtype.str)

    def array(self, view: BufferView) -> np.ndarray:
        count = int(np.prod(view.shape, dtype=np.int64))
        return np.frombuffer(self.map, dtype=view.dtype, count=count, offset=view.offset_bytes).reshape(view.shape)


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def arena_bytes(harness: Any, cases: list[dict[str, Any]]) -> int:
    largest = 0
    for case in cases:
        inputs = harness.make_inputs(case, 0, harness.distributions[0])
        size = sum(_aligned(a.nbytes) for a in inputs.values()) + harness.output(case).nbytes
        largest = max(largest, size)
    return largest


def main() -> None:
    request = judging.read_request()
    harness = judging.harness_of(request.workload_factory, request.workload_config, request.task, "host")
    cases = harness.correctness_cases(request.remeasure)
    arena = Arena(arena_bytes(harness, [*cases, harness.timing_case(), harness.cache_case()]))
    memory = request.settings.get("memory_bytes")
    runner = judging.Runner("hiera_plugins.host.runner", scratch=Path.cwd(), args=[str(arena.fd)],
                            pass_fds=[arena.fd], rlimit_data_bytes=memory)
    judge = Judge(harness, request, runner, arena)
    started = False
    try:
        runner.started(timeout_s=request.settings["timeout_s"])
        started = True
        result = judge.evaluate(judging.wait_for_go())
    except judging.RunnerGone as exc:
        case, limit = ((judge.current, request.settings["call_timeout_s"]) if started
                       else (judging.STARTUP, request.settings["timeout_s"]))
        result = (TimedOut(limit_s=limit, case=case) if exc.timed_out
                  else runner.crashed(str(exc), case=case, signal=exc.signal))
    finally:
        runner.close()
    judging.answer(result)


class Judge:
    def __init__(self, harness: Any, request: JudgeRequest, runner: judging.Runner, arena: Arena) -> None:
        self.harness, self.request, self.runner, self.arena = harness, request, runner, arena
        self.settings = request.settings
        self.timeout_s = self.settings["call_timeout_s"]
        self.random = secrets.SystemRandom()  # which timed calls are checked: the candidate cannot know
        self.current = ""
        """The call the candidate is in (`judging.describe_call`), named in its `Crashed` record if it dies there."""

    def call(self, case: dict[str, Any], inputs: dict[str, np.ndarray], *, null: bool = False):
        """One call on `inputs`, placed in the arena first; returns (reply, wall ms, views, the output array)."""
        views, out = self.arena.place(inputs, self.harness.output(case))
        self.placed = case, views, out
        reply, wall = judging.call(self.runner, CallOrder(case=case, inputs=views, output=out, null=null),
                                   timeout_s=self.timeout_s)
        return reply, wall, views, self.arena.array(out)

    def warm_up(self) -> None:
        """A null call just before the next inputs are placed, so that a timed call follows a call as every
        calibration call did (a runner woken from a long sleep answers later). It runs on the inputs of the
        call before, which the candidate has seen; its figures are not used (the candidate can slow it)."""
        case, views, out = self.placed
        judging.call(self.runner, CallOrder(case=case, inputs=views, output=out, null=True), timeout_s=self.timeout_s)

    def check(self, label: str, case, inputs, views, out, reference=None) -> float:
        """Compare the output with the reference and the shared inputs with the judge's own copies."""
        for name, array in inputs.items():
            if not np.array_equal(self.arena.array(views[name]), array, equal_nan=True):
                raise judging.Wrong(f"{label}: input '{name}' was modified")
        reference = self.harness.reference(case, inputs) if reference is None else reference
        error, bad = compare(out, reference, *self.harness.tolerance)
        if bad:
            raise judging.Wrong(f"{label}: {bad}", error)
        return error

    def checked_call(self, label: str, case, inputs) -> float:
        try:
            _, _, views, out = self.call(case, inputs)
        except judging.CandidateFailed as exc:
            raise judging.Wrong(f"{label}: the call failed: {exc}") from None
        return self.check(label, case, inputs, views, out)

    def evaluate(self, library: str) -> JudgeAnswer:
        """The verdict on the candidate built as `library`."""
        h = self.harness
        timing_case = h.timing_case()
        overhead = []
        for _ in range(CALIBRATION_CALLS):  # the protocol around a null call: before the candidate is loaded
            reply, wall, _, _ = self.call(timing_case, h.make_inputs(timing_case, 0, h.distributions[0]), null=True)
            overhead.append(wall - reply.in_process_ms)
        failed = judging.load(self.runner, self.request, library, timeout_s=self.timeout_s)
        if failed is not None:
            return failed
        try:
            return self._measure(timing_case, overhead)
        except judging.Wrong as exc:
            return Incorrect(reason=exc.reason, max_abs_error=exc.error)

    def _measure(self, timing_case, overhead: list[float]) -> JudgeAnswer:
        h, s = self.harness, self.settings
        seeds = h.seeds(self.request.remeasure)
        checks, largest = [], 0.0
        for case in h.correctness_cases(self.request.remeasure):
            for seed in seeds[:1] if case.get("first_seed_only") else seeds:
                for distribution in h.distributions:
                    label = f"{case['label']} seed {seed} {distribution}"
                    self.current = judging.describe_call(case, seed, distribution)
                    largest = max(largest, self.checked_call(label, case, h.make_inputs(case, seed, distribution)))
                    checks.append(label)

        forced = set(self.random.sample(range(s["min_repeats"]), min(2, s["min_repeats"])))
        checked = 0
        cpu, reference_times = [], []
        load = judging.OtherLoad(self.runner.process.pid)

        def series() -> tuple[list[float], list[float]]:
            """One series of timed calls, each on fresh inputs, the reference timed between them."""
            nonlocal checked
            times, walls = [], []
            cpu.clear()

            def more() -> bool:
                return len(times) < s["max_repeats"] and (len(times) < s["min_repeats"] or sum(walls) / 1e3 < s["min_time_s"])

            again = True
            while again:
                i = len(times)
                seed, distribution = self.random.getrandbits(62), h.distributions[i % len(h.distributions)]
                inputs = h.make_inputs(timing_case, seed, distribution)
                self.current = f"timed call {i}: {judging.describe_call(timing_case, seed, distribution)}"
                try:
                    self.warm_up()
                    reply, wall, views, out = self.call(timing_case, inputs)
                except judging.CandidateFailed as exc:
                    raise judging.Wrong(f"timed call {i}: the call failed: {exc}") from None
                times.append(reply.in_process_ms)
                walls.append(wall)
                cpu.append(reply.cpu_ms)
                again = more()
                if i in forced or self.random.random() < s["check_fraction"] or not again:  # the last one too
                    self.check(f"timed call {i} (fresh inputs)", timing_case, inputs, views, out)
                    checked += 1
                if s.get("reference_ms") is None and len(reference_times) < s["reference_repeats"]:
                    t0 = time.perf_counter()
                    h.reference(timing_case, inputs)
                    reference_times.append((time.perf_counter() - t0) * 1e3)
            return times, walls

        times, _, bound = judging.bounded_series(series, overhead, attempts=s["timing_attempts"])
        other_cores = load.cores()
        latency = statistics.median(times)
        if not bound.consistent:
            return Rejected(reason=bound.reason, latency_ms=latency)

        cache_case = h.cache_case()
        cache_runs = []
        for k in range(7):
            seed = self.random.getrandbits(62)
            inputs = h.make_inputs(cache_case, seed, h.distributions[0])
            self.current = f"cache-size call {k}: {judging.describe_call(cache_case, seed, h.distributions[0])}"
            try:
                reply, _, views, out = self.call(cache_case, inputs)
            except judging.CandidateFailed as exc:
                raise judging.Wrong(f"cache-size call {k}: the call failed: {exc}") from None
            self.check(f"cache-size call {k}", cache_case, inputs, views, out)
            cache_runs.append((reply.in_process_ms, reply.cpu_ms))
        cache_wall = statistics.median(w for w, _ in cache_runs)
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        disturbed = ""
        if other_cores is not None and other_cores >= s["busy_cores"]:
            disturbed = (f"other processes kept {other_cores:.2f} of the machine's {os.cpu_count()} cores busy while it was"
                         " timed")
        return Judged(
            latency_ms=latency,
            latency_p10_ms=judging.quantile(times, 0.1),
            latency_p90_ms=judging.quantile(times, 0.9),
            repeats=len(times),
            reference_latency_ms=statistics.median(reference_times) if reference_times else s["reference_ms"],
            max_abs_error=largest,
            checks=checks,
            timing_bound=bound.reason,
            reference_engine=getattr(h, "reference_engine", ""),
            checked_timed_calls=checked,
            disturbed=disturbed,
            conditions={"other_load_cores": round(other_cores, 3)} if other_cores is not None else {},
            metrics={  # from the runner's CPU clock: a planning signal, not a verdict
                "cpu_utilization_fraction": sum(cpu) / sum(times) / cores,
                "cache_cpu_utilization_fraction": sum(c for _, c in cache_runs) / sum(w for w, _ in cache_runs) / cores,
                "task_ns_per_point": latency * 1e6 / h.points(timing_case),
                "cache_ns_per_point": cache_wall * 1e6 / h.points(cache_case),
                "task_points": h.points(timing_case),
                "cores": cores,
            },
        )


def compare(out: np.ndarray, reference: np.ndarray, rtol: float, atol: float) -> tuple[float, str | None]:
    if out.shape != reference.shape:
        return float("nan"), f"output shape {out.shape}, expected {reference.shape}"
    if not np.all(np.isfinite(out)):
        where = np.argwhere(~np.isfinite(out))[0]
        return float("nan"), f"non-finite output at {tuple(int(i) for i in where)} (never written?)"
    diff = np.abs(out - reference)
    error = float(diff.max(initial=0.0))
    bound = atol + rtol * np.abs(reference)
    if np.any(diff > bound):
        where = tuple(int(i) for i in np.unravel_index(np.argmax(diff - bound), diff.shape))
        return error, (f"max abs error {error:.3g} at {where} (got {out[where]:.6g}, expected {reference[where]:.6g};"
                       f" rtol {rtol:g}, atol {atol:g})")
    return error, None


if __name__ == "__main__":
    main()
