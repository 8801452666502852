"""What evaluating a candidate gave, as a prompt reads it: a measurement with its profile grouped by unit
and by the direction that reads each signal, or the failure a model can act on."""

from __future__ import annotations

import re
from typing import Any

from hiera_core import protocols
from hiera_core.records import CompileFailed, Crashed, Evaluation, Incorrect, Measured, Rejected, StaticRejected, TimedOut

LOG_LIMIT = 1500
"""Characters of one compiler log or failure quoted in a prompt."""
CITED_LINES = 6
"""Source lines a compiler log cites that a prompt quotes (the first ones), each with `CITED_CONTEXT` lines either side."""
CITED_CONTEXT = 2


_METRIC_GROUPS = (
    ("time", {"ms", "us", "ns", "s", "cycles"}),
    ("throughput", {"gbps", "gflops", "tflops", "throughput"}),
    ("utilisation", {"fraction", "pct", "percent", "ratio", "utilization", "occupancy", "efficiency"}),
    ("size", {"bytes", "sectors", "requests"}),
)
"""Metrics are grouped by the unit their name carries (`task_ns_per_point`, `achieved_gbps`, ...)."""


def _labelled(name: str, value: float) -> tuple[str, str]:
    """(group, `name = value`) of one metric; a fraction also as a percentage."""
    tokens = set(re.split(r"[_.]+", name.lower()))
    group = next((group for group, units in _METRIC_GROUPS if tokens & units), "counts and other")
    shown = f"{value:,.0f}" if float(value).is_integer() and abs(value) >= 1e4 else f"{value:.4g}"
    return group, f"{name} = {shown}" + (f" ({value:.0%})" if "fraction" in tokens else "")


def profile_summary(evaluation: Evaluation | None, directions: dict[str, Any]) -> str:
    """A measurement as a prompt reads it: latency and reference, metrics grouped by the unit their
    name carries, signals grouped by the directions that read them (`Direction.signals`), then the top findings."""
    if evaluation is None:
        return "not measured yet"
    if not isinstance(evaluation, Measured):
        return execution_feedback(evaluation)
    lines = [
        f"latency {evaluation.latency_ms:.4g} ms (p10 {evaluation.latency_p10_ms:.4g}, p90 {evaluation.latency_p90_ms:.4g},"
        f" {evaluation.repeats} timed calls); the reference takes {evaluation.reference_latency_ms:.4g} ms"
        f" ({evaluation.speedup_vs_reference:.2f}x)"
    ]
    if evaluation.disturbed:
        lines.append(f"timing disturbed: {evaluation.disturbed}; this figure may read slow")
    profile = evaluation.profile
    if profile is None:
        return "\n".join(lines)
    if profile.unavailable:
        lines.append(f"profiler counters unavailable: {profile.unavailable}")
    grouped: dict[str, list[str]] = {}
    for name, value in sorted(profile.metrics.items()):
        group, text = _labelled(name, value)
        grouped.setdefault(group, []).append(text)
    if grouped:
        lines.append(f"metrics ({profile.source}), by unit:")
        order = [group for group, _ in _METRIC_GROUPS] + ["counts and other"]
        lines += [f"- {group}: {'; '.join(grouped[group])}" for group in order if group in grouped]
    if profile.signals:
        by_reader: dict[str, list[str]] = {}
        for name, value in sorted(profile.signals.items()):
            readers = [letter for letter, d in directions.items() if name in protocols.optional(d, "signals")]
            reader = "unclaimed" if not readers else ("shared (headroom)" if len(readers) > 2 else " and ".join(readers))
            by_reader.setdefault(reader, []).append(f"{name} = {value:.2f}")
        lines.append("signals (normalised, 1 = healthy), by the direction that reads them:")
        lines += [
            f"- {reader}: {'; '.join(by_reader.pop(reader))}"
            for reader in [*directions, *sorted(by_reader)]
            if reader in by_reader
        ]
    if profile.findings:
        lines.append("top findings:")
        lines += [f"- {finding}" for finding in profile.findings[:5]]
    return "\n".join(lines)


def execution_feedback(evaluation: Evaluation, source: str = "", filename: str = "") -> str:
    """What running a candidate gave, without any profile: all a generate-and-fix loop sees. A crash says in
    which call (case, seed, distribution) and what the candidate's process last wrote to stderr; a compile
    error, given the candidate's `source` and its `filename`, quotes the source lines the log cites."""
    if isinstance(evaluation, Measured):
        return (
            f"correct; {evaluation.latency_ms:.4g} ms, the reference takes {evaluation.reference_latency_ms:.4g} ms"
            f" ({evaluation.speedup_vs_reference:.2f}x)"
            + (f"; timing disturbed: {evaluation.disturbed}" if evaluation.disturbed else "")
        )
    if isinstance(evaluation, CompileFailed):
        log = _short_paths(evaluation.log, filename)
        cited = cited_lines(log, source, filename)
        tail = log[-LOG_LIMIT:]
        if len(log) > LOG_LIMIT and "\n" in tail:  # from the first whole line
            tail = tail[tail.index("\n") + 1 :]
        return f"did not compile:\n{tail}" + (f"\nThe lines of `{filename}` it cites:\n{cited}" if cited else "")
    if isinstance(evaluation, Incorrect):
        return f"compiled and ran, but the output is wrong: {evaluation.reason[:LOG_LIMIT]}"
    if isinstance(evaluation, Crashed):
        lines = [f"crashed: {evaluation.reason[:LOG_LIMIT]}"]
        if evaluation.case:
            lines.append(f"The call it crashed in: {evaluation.case}")
        if evaluation.stderr_tail:
            lines.append(f"The last lines its process wrote to stderr:\n{_fence(evaluation.stderr_tail)}")
        return "\n".join(lines)
    if isinstance(evaluation, TimedOut):
        call = f"\nThe call it was in: {evaluation.case}" if evaluation.case else ""
        return f"was killed after {evaluation.limit_s:.0f} s (too slow, or it hangs){call}"
    if isinstance(evaluation, StaticRejected):
        return f"was rejected before compiling: {evaluation.reason[:LOG_LIMIT]}"
    if isinstance(evaluation, Rejected):
        return f"ran correctly, but its measurement was rejected as impossible: {evaluation.reason[:LOG_LIMIT]}"
    raise TypeError(f"unknown evaluation {type(evaluation).__name__}")


def _short_paths(log: str, filename: str) -> str:
    """`log` with every directory before `filename` dropped (`/tmp/.../host_source.c:42:7` -> `host_source.c:42:7`)."""
    return re.sub(rf"[^\s:()'\"`]*/(?={re.escape(filename)}\b)", "", log) if filename else log


def cited_lines(log: str, source: str, filename: str) -> str:
    """The lines of `source` that a compiler `log` cites as `filename:LINE` (gcc, clang) or `filename(LINE)`
    (nvcc), the first `CITED_LINES` of them, each with `CITED_CONTEXT` lines either side, numbered, the cited
    ones marked `>`; "" when it cites none."""
    if not source or not filename:
        return ""
    cited: list[int] = []
    lines = source.splitlines()
    for match in re.finditer(rf"(?<![\w.-]){re.escape(filename)}(?::(\d+)|\((\d+)\))", log):
        number = int(match.group(1) or match.group(2))
        if 1 <= number <= len(lines) and number not in cited:
            cited.append(number)
        if len(cited) == CITED_LINES:
            break
    shown = sorted({n for c in cited for n in range(max(1, c - CITED_CONTEXT), min(len(lines), c + CITED_CONTEXT) + 1)})
    quoted, previous = [], None
    for number in shown:
        if previous is not None and number != previous + 1:
            quoted.append("...")
        quoted.append(f"{'>' if number in cited else ' '}{number:5d} | {lines[number - 1]}")
        previous = number
    return _fence("\n".join(quoted)) if quoted else ""


def _fence(text: str) -> str:
    """`text` in a code fence longer than any run of backticks in it."""
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}\n{text}\n{fence}"


def outcome(evaluation: Evaluation) -> str:
    """One line of what evaluating a candidate gave: its latency, or its failure's kind and first line."""
    if isinstance(evaluation, Measured):
        return f"{evaluation.latency_ms:.4g} ms"
    first = execution_feedback(evaluation).splitlines()
    return f"{type(evaluation).__name__}: {first[0][:160] if first else ''}"
