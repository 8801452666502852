"""The host judge: decides a host candidate's verdict without ever loading it.

It makes every input (fresh values for every check and every timed call, the stencil's weights too),
places them in a memfd it shares with the runner (sealed: the runner cannot shrink it under the judge), poisons
the outputs with NaN, orders the calls, stops the runner's processes, and reads the outputs and the inputs back
itself. Timed calls run in batches, back to back, each on its own place's inputs, never seen before; the figure
is the judge's clock around a batch less a null batch's, per call (`judging.timing_verdict`); every output of a
batch must have been written, and a secret random share of them (one in each batch at least, and the last) is
checked against a reference computed here.

The workload's harness (`Workload.harness(task, "host")`, a `hiera_plugins.host.harness.HostHarness`)
supplies the semantics.
"""

from __future__ import annotations

import fcntl
import json
import mmap
import os
import secrets
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from hiera_core.records import Incorrect, Measured, Rejected, TimedOut
from hiera_judge import judging
from hiera_judge.messages import BatchDone, BatchOrder, BufferView, CallFailed, CallOrder, JudgeAnswer, Judged, JudgeRequest
from hiera_plugins.host.evaluators import HostJudgeSettings

ALIGN = 64
CALIBRATION_BATCHES = 9
CACHE_BATCHES = 5
"""Timed batches of the cache-resident case (`Harness.cache_case`), for the planning signals; their median is the
figure."""
PLACES_BYTES = 256 * 2**20
"""At most this much memory for the timed calls' places (one per call of a batch)."""


class Arena:
    """One memfd, sealed at its size: `places` places, each for the inputs of a call and its output."""

    def __init__(self, place_bytes: int, places: int) -> None:
        self.stride = _aligned(max(place_bytes, ALIGN))
        size = self.stride * places
        self.fd = os.memfd_create("hiera-arena", os.MFD_ALLOW_SEALING)
        os.ftruncate(self.fd, size)
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        self.map = mmap.mmap(self.fd, size)

    def layout(
        self, inputs: dict[str, np.ndarray], output: np.ndarray, place: int = 0
    ) -> tuple[dict[str, BufferView], BufferView]:
        """Where `inputs` and `output` lie in place `place`; nothing written."""
        views, offset = {}, place * self.stride
        for name, array in inputs.items():
            views[name] = BufferView(offset_bytes=offset, shape=list(array.shape), dtype=array.dtype.str)
            offset = _aligned(offset + array.nbytes)
        return views, BufferView(offset_bytes=offset, shape=list(output.shape), dtype=output.dtype.str)

    def place(
        self, inputs: dict[str, np.ndarray], output: np.ndarray, place: int = 0
    ) -> tuple[dict[str, BufferView], BufferView]:
        """Write `inputs` into place `place` and fill its output with NaN; where they lie."""
        views, out = self.layout(inputs, output, place)
        for name, array in inputs.items():
            self.array(views[name])[...] = array
        self.array(out)[...] = np.nan
        return views, out

    def array(self, view: BufferView) -> np.ndarray:
        count = int(np.prod(view.shape, dtype=np.int64))
        return np.frombuffer(self.map, dtype=view.dtype, count=count, offset=view.offset_bytes).reshape(view.shape)


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def place_bytes(harness: Any, cases: list[dict[str, Any]]) -> int:
    largest = 0
    for case in cases:
        inputs = harness.make_inputs(case, 0, harness.distributions[0])
        size = sum(_aligned(a.nbytes) for a in inputs.values()) + harness.output(case).nbytes
        largest = max(largest, size)
    return largest


def main() -> None:
    request = judging.read_request(HostJudgeSettings)
    harness = judging.harness_of(request.workload_factory, request.workload_config, request.task, "host")
    cases = harness.correctness_cases(request.remeasure)
    largest = place_bytes(harness, [*cases, harness.timing_case(), harness.cache_case()])
    places = max(1, min(request.settings.run.max_repeats, PLACES_BYTES // max(largest, 1)))
    arena = Arena(largest, places)
    memory = request.settings.memory_bytes
    judging.raise_priority()
    runner = judging.Runner(
        "hiera_plugins.host.runner", scratch=Path.cwd(), args=[str(arena.fd)], pass_fds=[arena.fd], rlimit_data_bytes=memory
    )
    judge = Judge(harness, request, runner, arena)
    judge.arena_places = places
    started = False
    try:
        runner.started(timeout_s=request.settings.run.timeout_s)
        started = True
        result = judge.evaluate(judging.wait_for_go())
    except judging.RunnerGone as exc:
        case, limit = (
            (judge.current, request.settings.run.call_timeout_s) if started else (judging.STARTUP, request.settings.run.timeout_s)
        )
        result = TimedOut(limit_s=limit, case=case) if exc.timed_out else runner.crashed(str(exc), case=case, signal=exc.signal)
    finally:
        runner.close()
    judging.answer(result)


class Judge:
    arena_places: int  # how many places the arena holds: set by `main` before the evaluation

    def __init__(self, harness: Any, request: JudgeRequest[HostJudgeSettings], runner: judging.Runner, arena: Arena) -> None:
        self.harness, self.request, self.runner, self.arena = harness, request, runner, arena
        self.settings = request.settings
        self.timeout_s = self.settings.run.call_timeout_s
        self.random = secrets.SystemRandom()  # which timed calls are checked: the candidate cannot know
        self.current = ""
        self.clock_parts: list[list[float]] = []
        """The call the candidate is in (`judging.describe_call`), named in its `Crashed` record if it dies there."""

    def call(self, case: dict[str, Any], inputs: dict[str, np.ndarray], *, null: bool = False):
        """One call on `inputs`, placed in the arena first; returns (reply, wall ms, views, the output array)."""
        views, out = self.arena.place(inputs, self.harness.output(case))
        self.placed = case, views, out
        reply, wall = judging.call(
            self.runner, CallOrder(case=case, inputs=views, output=out, null=null), timeout_s=self.timeout_s
        )
        return reply, wall, views, self.arena.array(out)

    def batch(self, case: dict[str, Any], inputs: list[dict[str, np.ndarray]], *, null: bool = False):
        """One batch: the calls on `inputs`, each placed in a place of its own first, ordered at once; returns the
        `TimedBatch`, the candidate's CPU milliseconds over the batch (the kernel's count, `Runner.cpu_ms`), and
        each call's (views, output array)."""
        calls, placed = [], []
        for k, arrays in enumerate(inputs):
            views, out = self.arena.layout(arrays, self.harness.output(case), place=k)
            calls.append(CallOrder(case=case, inputs=views, output=out, null=null))
            placed.append((views, self.arena.array(out)))

        before: list[float] = []

        def write() -> None:
            for k, arrays in enumerate(inputs):
                self.arena.place(arrays, self.harness.output(case), place=k)
            before.append(self.runner.cpu_ms())  # the candidate is stopped: what follows is its batch's

        reply, wall = self.runner.batch(BatchOrder(calls=calls, null=null), write, timeout_s=self.timeout_s * len(calls))
        if isinstance(reply, CallFailed):
            raise judging.CandidateFailed(reply.reason, raised=reply.raised)
        if not isinstance(reply, BatchDone) or len(reply.in_process_ms) != len(calls):
            raise judging.RunnerGone(f"the runner answered {type(reply).__name__} to a batch of {len(calls)} calls")
        self.clock_parts.append(judging.clock_part(self.runner, len(calls), null, reply.stamps))
        cpu_ms = self.runner.cpu_ms() - before[0]
        return judging.TimedBatch(calls=len(calls), wall_ms=wall, in_process_ms=reply.in_process_ms), cpu_ms, placed

    def checked_batch(self, what: str, first: int, case, inputs: list[dict[str, np.ndarray]], *, last: bool = False):
        """A timed batch on fresh `inputs` (calls `first`, ... of the kind `what` names), behind a null batch of as many
        calls: every output written, a secret share of them checked in full (one at least; the last too with `last`).
        Returns the `TimedBatch` with its `null_ms`, the candidate's CPU ms over it, and how many calls were checked."""
        n = len(inputs)
        paired = self.batch(case, [inputs[0]] * n, null=True)[0]
        self.current = f"{what}s {first}-{first + n - 1} (a batch on fresh inputs)"
        try:
            batch, cpu_ms, placed = self.batch(case, inputs)
        except judging.CandidateFailed as exc:
            raise judging.Wrong(f"{what}s {first}-{first + n - 1}: a call failed: {exc}") from None
        for k, (_, out) in enumerate(placed):
            if not np.all(np.isfinite(out)):
                raise judging.Wrong(f"{what} {first + k}: non-finite values in its output (never written?)")
        chosen = {self.random.randrange(n)} | {k for k in range(n) if self.random.random() < self.settings.run.check_fraction}
        if last:
            chosen.add(n - 1)
        for k in sorted(chosen):
            self.check(f"{what} {first + k} (fresh inputs)", case, inputs[k], *placed[k])
        return attrs.evolve(batch, null_ms=paired.wall_ms), cpu_ms, len(chosen)

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
        sample = h.make_inputs(timing_case, 0, h.distributions[0])
        places = self.arena_places
        one, full = [], []
        for _ in range(CALIBRATION_BATCHES):  # the protocol's own cost: before the candidate is loaded
            one.append(self.batch(timing_case, [sample], null=True)[0].wall_ms)
            full.append(self.batch(timing_case, [sample] * places, null=True)[0].wall_ms)
        null = judging.NullBatches(one_ms=one, full_ms=full, calls=places)
        failed = judging.load(self.runner, self.request, library, timeout_s=self.timeout_s)
        if failed is not None:
            return failed
        try:
            return self._measure(timing_case, null)
        except judging.Wrong as exc:
            return Incorrect(reason=exc.reason, max_abs_error=exc.error)

    def _measure(self, timing_case, null: judging.NullBatches) -> JudgeAnswer:
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

        checked = 0
        cpu: list[float] = []  # the candidate's CPU ms in each timed batch (the kernel's count)
        reference_times: list[float] = []
        count = 0

        def fresh(n: int) -> list[dict[str, np.ndarray]]:
            return [
                h.make_inputs(timing_case, self.random.getrandbits(62), h.distributions[(count + k) % len(h.distributions)])
                for k in range(n)
            ]

        def timed(inputs: list[dict[str, np.ndarray]], last: bool) -> judging.TimedBatch:
            """One timed batch on `inputs`: every output written, a secret share of them checked (one at least)."""
            nonlocal checked, count
            batch, cpu_ms, checks_made = self.checked_batch("timed call", count, timing_case, inputs, last=last)
            count += len(inputs)
            checked += checks_made
            cpu.append(cpu_ms)
            if s.reference_ms is None and len(reference_times) < s.run.reference_repeats:
                t0 = time.perf_counter()
                h.reference(timing_case, inputs[-1])
                reference_times.append((time.perf_counter() - t0) * 1e3)
            return batch

        warm = timed(fresh(min(2, self.arena_places)), last=False)  # the estimate that sizes the first batch; not a figure
        estimate = max((warm.wall_ms - null.cost_ms(warm.calls)) / warm.calls, 1e-3)
        places = min(self.arena_places, max(1, s.run.max_repeats // 4))
        load = judging.OtherLoad(self.runner)

        def series() -> list[judging.TimedBatch]:
            batches: list[judging.TimedBatch] = []
            cpu.clear()
            while True:
                calls = judging.resized(null, batches, estimate, places=places)
                total = sum(b.calls for b in batches) + calls
                last = total + calls > s.run.max_repeats or (
                    total >= s.run.min_repeats and len(batches) >= 4 and sum(b.wall_ms for b in batches) / 1e3 >= s.run.min_time_s
                )
                batches.append(timed(fresh(calls), last))
                if last:
                    return batches

        batches, verdict = judging.timed_series(
            series,
            null,
            attempts=s.run.timing_attempts,
            tolerance_fraction=s.run.timer_tolerance,
            tolerance_ms=s.run.timer_tolerance_ms,
        )
        print(f"timing: {json.dumps({'clock_parts': self.clock_parts})}", file=sys.stderr, flush=True)  # `judging.clock_part`s
        other_cores = load.cores()
        latency = verdict.latency_ms
        busy = other_cores is not None and other_cores >= s.run.busy_cores
        if not verdict.consistent and not busy:
            return Rejected(reason=verdict.reason, latency_ms=latency)
        # on a busy machine the judge's clock holds other processes' time and the runner's timer does not: the figure
        # is the judge's all the same (the candidate cannot lower it), marked as disturbed, the disagreement said

        cache_case = h.cache_case()
        cache_runs = []  # (ms per call, the batch's wall ms, the candidate's CPU ms): batches sized like the timed ones
        calls, first = 1, 0  # the first batch, of one call, sizes the others and is not a figure
        for k in range(CACHE_BATCHES + 1):
            inputs = [h.make_inputs(cache_case, self.random.getrandbits(62), h.distributions[0]) for _ in range(calls)]
            batch, cpu_ms, _ = self.checked_batch("cache-size call", first, cache_case, inputs)
            first += calls
            per_call = max((batch.wall_ms - null.cost_ms(calls, batch.null_ms)) / calls, 1e-6)
            if k:
                cache_runs.append((per_call, batch.wall_ms, cpu_ms))
            calls = judging.batch_length(null, statistics.median([per_call, *(r[0] for r in cache_runs)]), places=places)
        cache_wall = statistics.median(w for w, _, _ in cache_runs)
        cores = s.candidate_cores or len(os.sched_getaffinity(0))
        disturbed = ""
        if busy:
            disturbed = (
                f"other processes kept {other_cores:.2f} of the machine's {os.cpu_count()} cores busy while it was"
                " timed" + ("" if verdict.consistent else "; the runner's timer disagreed with the judge's clock")
            )
        return Judged(
            measurement=Measured(
                latency_ms=latency,
                latency_p10_ms=verdict.latency_p10_ms,
                latency_p90_ms=verdict.latency_p90_ms,
                repeats=sum(b.calls for b in batches),
                reference_latency_ms=s.reference_ms if s.reference_ms is not None else statistics.median(reference_times),
                max_abs_error=largest,
                checks=checks,
                timing_bound=verdict.reason,
                reference_engine=getattr(h, "reference_engine", ""),
                disturbed=disturbed,
                conditions={"other_load_cores": round(other_cores, 3)} if other_cores is not None else {},
            ),
            checked_timed_calls=checked,
            metrics={  # the candidate's CPU time by the kernel over the judge's clock around the same calls (where the
                # candidate ran and nowhere else): at most its cores; a planning signal, not a verdict
                "cpu_utilization_fraction": sum(cpu) / max(sum(b.wall_ms for b in batches), 1e-9) / cores,
                "cache_cpu_utilization_fraction": sum(c for _, _, c in cache_runs) / sum(w for _, w, _ in cache_runs) / cores,
                "task_ns_per_point": latency * 1e6 / h.points(timing_case),
                "cache_ns_per_point": cache_wall * 1e6 / h.points(cache_case),
                "task_points": h.points(timing_case),
                "cores": cores,
                "batch_calls": batches[-1].calls,
                "in_process_ms": round(statistics.median(statistics.fmean(b.in_process_ms) for b in batches), 6),
                "protocol_ms_per_batch": round(null.cost_ms(batches[-1].calls), 4),
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
        return error, (
            f"max abs error {error:.3g} at {where} (got {out[where]:.6g}, expected {reference[where]:.6g};"
            f" rtol {rtol:g}, atol {atol:g})"
        )
    return error, None


if __name__ == "__main__":
    main()
