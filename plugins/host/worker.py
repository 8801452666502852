"""The host worker: one process per candidate. Reads a JSON request on stdin, prints one JSON answer.

Order matters for honesty: every reference output is computed before the candidate's library is
loaded, so the candidate cannot read or reuse them. Then each (case, seed, distribution) runs with a
NaN-poisoned output buffer and an input copy to detect writes to inputs; then the candidate and the
reference are timed, interleaved, on the task grid, and the timed output is checked again; last, a
cache-resident grid is timed for the profile.

The workload's harness (`Workload.harness(task, "host")`) supplies the semantics:

    symbol, distributions, tolerance -> (rtol, atol)
    correctness_cases(remeasure) -> [case dict], seeds(remeasure) -> (int, ...)
    make_inputs(case, seed, distribution) -> {name: ndarray}, reference(case, inputs) -> ndarray
    output(case) -> ndarray, call(lib, case, inputs, out), timing_case(), cache_case(), points(case)
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

from hiera_core.config import structure
from hiera_core.isolation import wait_for_go
from hiera_core.records import Task
from hiera_core.serialization import from_dict


def main() -> None:
    request = json.loads(sys.stdin.readline())
    module, _, qualname = request["workload_factory"].partition(":")
    workload_cls = getattr(importlib.import_module(module), qualname)
    config = structure(request["workload_config"], workload_cls.config_class, where="worker") if workload_cls.config_class else None
    task = from_dict(request["task"], Task)
    harness = workload_cls(config).harness(task, "host")
    wait_for_go()
    print(json.dumps(evaluate(harness, request)), flush=True)


def evaluate(harness: Any, request: dict[str, Any]) -> dict[str, Any]:
    remeasure = request["remeasure"]
    seeds = harness.seeds(remeasure)
    cases = []
    for case in harness.correctness_cases(remeasure):
        case_seeds = seeds[:1] if case == harness.timing_case() else seeds
        for seed in case_seeds:
            for distribution in harness.distributions:
                inputs = harness.make_inputs(case, seed, distribution)
                cases.append((case, seed, distribution, inputs, harness.reference(case, inputs)))
    timing_case = harness.timing_case()
    timing_inputs = harness.make_inputs(timing_case, seeds[-1] + 7919, harness.distributions[0])
    timing_reference = harness.reference(timing_case, timing_inputs)

    lib = ctypes.CDLL(request["library"])  # the candidate enters the process only now
    rtol, atol = harness.tolerance
    checks, max_error = [], 0.0
    for case, seed, distribution, inputs, reference in cases:
        label = f"{case['label']} seed {seed} {distribution}"
        failure, error = _check_call(harness, lib, case, inputs, reference, rtol, atol)
        if failure:
            return {"kind": "incorrect", "reason": f"{label}: {failure}", "max_abs_error": error}
        max_error = max(max_error, error)
        checks.append(label)

    timing = request["timing"]
    out = harness.output(timing_case)
    times, reference_times, cpu_times = [], [], []
    harness.call(lib, timing_case, timing_inputs, out)  # warm-up
    started = time.perf_counter()
    while len(times) < timing["max_repeats"] and (
        len(times) < timing["min_repeats"] or time.perf_counter() - started < timing["min_time_s"]
    ):
        wall, cpu = _timed(lambda: harness.call(lib, timing_case, timing_inputs, out))
        times.append(wall)
        cpu_times.append(cpu)
        if len(reference_times) < timing["reference_repeats"]:
            reference_times.append(_timed(lambda: harness.reference(timing_case, timing_inputs))[0])
    _, bad = _compare(out, timing_reference, rtol, atol)
    if bad:
        return {"kind": "incorrect", "reason": f"the output of the timed calls is wrong: {bad}"}

    cache_case = harness.cache_case()
    cache_inputs = harness.make_inputs(cache_case, seeds[0], harness.distributions[0])
    cache_out = harness.output(cache_case)
    harness.call(lib, cache_case, cache_inputs, cache_out)
    cache_runs = [_timed(lambda: harness.call(lib, cache_case, cache_inputs, cache_out)) for _ in range(7)]
    cache_wall = statistics.median(w for w, _ in cache_runs)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    latency = statistics.median(times)
    deciles = statistics.quantiles(times, n=10) if len(times) > 1 else [latency] * 9
    return {
        "kind": "measured",
        "latency_ms": latency * 1e3,
        "latency_p10_ms": deciles[0] * 1e3,
        "latency_p90_ms": deciles[-1] * 1e3,
        "repeats": len(times),
        "reference_latency_ms": statistics.median(reference_times) * 1e3,
        "max_abs_error": max_error,
        "checks": checks,
        "metrics": {
            "cpu_utilization_fraction": sum(cpu_times) / sum(times) / cores,
            "cache_cpu_utilization_fraction": sum(c for _, c in cache_runs) / sum(w for w, _ in cache_runs) / cores,
            "task_ns_per_point": latency * 1e9 / harness.points(timing_case),
            "cache_ns_per_point": cache_wall * 1e9 / harness.points(cache_case),
            "task_points": harness.points(timing_case),
            "cores": cores,
        },
    }


def _timed(call) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def _check_call(harness, lib, case, inputs, reference, rtol, atol) -> tuple[str | None, float]:
    saved = {name: array.copy() for name, array in inputs.items()}
    out = harness.output(case)
    out.fill(np.nan)
    try:
        harness.call(lib, case, inputs, out)
    except Exception as exc:  # the harness reports a failing return code this way
        return f"the call failed: {exc}", float("nan")
    for name, array in inputs.items():
        if not np.array_equal(array, saved[name]):
            return f"input '{name}' was modified", float("nan")
    error, bad = _compare(out, reference, rtol, atol)
    if bad:
        return bad, error
    return None, error


def _compare(out: np.ndarray, reference: np.ndarray, rtol: float, atol: float) -> tuple[float, str | None]:
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
        return error, f"max abs error {error:.3g} at {where} (got {out[where]:.6g}, expected {reference[where]:.6g}; rtol {rtol:g}, atol {atol:g})"
    return error, None


if __name__ == "__main__":
    main()
