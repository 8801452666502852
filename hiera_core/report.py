"""report.md and plots/best_latency.png of a run, computed from its trajectory alone."""

from __future__ import annotations

import contextlib
import re
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from hiera_core import records
from hiera_core.records import Measured

if TYPE_CHECKING:
    from hiera_core.store import RunStore

BUDGETS = (1, 6, 12, 18)
"""The paper's candidate budgets; fast_p at B counts the first B evaluated candidates, seed first."""


@attrs.frozen(kw_only=True)
class FastP:
    budget: int
    evaluated: int
    """How many candidates the trajectory had within this budget (fewer when the run was smaller)."""
    fast_0: bool
    fast_1: bool
    fast_2: bool
    best_speedup: float | None


def fast_p(evaluated: list[records.CandidateEvaluated], budgets: tuple[int, ...] = BUDGETS) -> list[FastP]:
    """fast_0 (a valid candidate), fast_1 (valid and faster than the reference), fast_2 (> 2x), per budget."""
    rows = []
    for budget in budgets:
        speedups = [e.evaluation.speedup_vs_reference for e in evaluated[:budget] if isinstance(e.evaluation, Measured)]
        best = max(speedups, default=None)
        rows.append(
            FastP(
                budget=budget,
                evaluated=min(budget, len(evaluated)),
                fast_0=bool(speedups),
                fast_1=best is not None and best > 1.0,
                fast_2=best is not None and best > 2.0,
                best_speedup=best,
            )
        )
    return rows


@attrs.frozen(kw_only=True)
class RoundRow:
    round: int
    space: str
    direction: str
    strategy: str
    valid: int
    total: int
    round_best_ms: float | None
    best_so_far_ms: float | None
    notes: list[str]


def round_rows(events: list[records.Event]) -> list[RoundRow]:
    plans = {e.plan.round: e.plan for e in events if isinstance(e, records.PlanMade)}
    batches = {e.round: e for e in events if isinstance(e, records.CandidatesGenerated)}
    evaluated = {e.candidate.id: e.evaluation for e in events if isinstance(e, records.CandidateEvaluated)}
    rows, best = [], None
    for round_ in sorted(batches):
        batch = batches[round_]
        latencies = [e.latency_ms for c in batch.candidates if isinstance(e := evaluated.get(c.id), Measured)]
        round_best = min(latencies, default=None)
        if round_best is not None:
            best = round_best if best is None else min(best, round_best)
        plan = plans.get(round_)
        spaces = sorted({c.space for c in batch.candidates})
        rows.append(
            RoundRow(
                round=round_,
                space=plan.decision.space if plan else ", ".join(spaces) or "-",
                direction=plan.decision.direction if plan else "-",
                strategy=plan.strategy.name if plan else ("initial candidate" if round_ == 0 else _strategies(batch)),
                valid=len(latencies),
                total=sum(1 for c in batch.candidates if c.id in evaluated),
                round_best_ms=round_best,
                best_so_far_ms=best,
                notes=list(batch.notes),
            )
        )
    return rows


def _strategies(batch: records.CandidatesGenerated) -> str:
    return ", ".join(sorted({c.strategy for c in batch.candidates if c.strategy})) or "-"


@attrs.frozen(kw_only=True)
class CallCosts:
    """What a set of agent calls cost. Calls answered from the answer cache spent nothing and count
    only in `calls` and `cached`."""

    calls: int
    cached: int
    failed: int
    """Calls whose answer was unusable or that got none (each was asked again within its attempts)."""
    input_tokens: int
    output_tokens: int
    cost_usd: float
    unpriced: int
    """Calls that spent tokens on a model without a price in the backend's table."""
    wall_s: float

    def describe(self) -> str:
        money = f"${self.cost_usd:.4f}" + (f" + {self.unpriced} call(s) without a price" if self.unpriced else "")
        return (
            f"{self.calls} calls ({self.cached} from the cache, {self.failed} unusable or failed),"
            f" {self.input_tokens:,} tokens in, {self.output_tokens:,} out, {money}"
        )


def agent_costs(events: list[records.Event], roles: tuple[str, ...] = ("ssda", "spa", "oa")) -> CallCosts:
    """Totals of the run's `AgentCalled` events of `roles`."""
    calls = [e for e in events if isinstance(e, records.AgentCalled) and e.role in roles]
    spent = [e for e in calls if not e.cached]
    return CallCosts(
        calls=len(calls),
        cached=len(calls) - len(spent),
        failed=sum(1 for e in calls if e.error is not None),
        input_tokens=sum(e.input_tokens for e in spent),
        output_tokens=sum(e.output_tokens for e in spent),
        cost_usd=sum(e.cost_usd for e in spent if e.cost_usd is not None),
        unpriced=sum(1 for e in spent if e.cost_usd is None and e.input_tokens + e.output_tokens > 0),
        wall_s=sum(e.wall_s for e in calls),
    )


@attrs.frozen(kw_only=True)
class TimelineRow:
    """One evaluation on the run's timeline: seconds since the run started."""

    label: str
    stages: list[tuple[str, float, float]]
    """(stage, start, length) of each stage that ran."""
    device_held: list[tuple[float, float]]
    """(start, length) of each hold of the device."""


@attrs.frozen(kw_only=True)
class Timeline:
    rows: list[TimelineRow]
    span_s: float
    """From the run's start to its end (or its last record)."""
    held_s: float
    """How long some evaluation held the device (the union of the holds)."""
    from_first_s: float
    """From the first hold to the run's end."""

    @property
    def busy_share(self) -> float:
        return self.held_s / self.span_s if self.span_s > 0 else 0.0

    @property
    def busy_share_after_first(self) -> float:
        return self.held_s / self.from_first_s if self.from_first_s > 0 else 0.0


def timeline(events: list[records.Event], times: list[float | None]) -> Timeline | None:
    """The run's evaluations on one clock (the stages' own, Unix seconds), from when the run started (its first record)
    to its end; None for a run recorded without times."""
    if not times or times[0] is None:
        return None
    start = times[0]
    end = next((t for e, t in zip(events, times) if isinstance(e, records.RunFinished) and t is not None), None)
    end = end or max(t for t in times if t is not None)
    rows, holds = [], []
    for event in events:
        if not isinstance(
            event, records.CandidateEvaluated | records.BaselineEvaluated | records.Remeasured | records.CandidateProfiled
        ):
            continue
        at = event.timeline.stage_at
        if not at:
            continue
        if isinstance(event, records.Remeasured):
            label = f"{event.candidate_id[:8]} re-measure {event.pass_index}"
        elif isinstance(event, records.CandidateProfiled):
            label = f"{event.candidate_id[:8]} profile"
        elif isinstance(event, records.BaselineEvaluated):
            label = f"baseline {event.name}"
        else:
            label = f"{event.candidate.id[:8]} round {event.candidate.round}"
        stages = [(name, at[name] - start, event.stage_s.get(name, 0.0)) for name in at]
        held = [(a - start, b - a) for a, b in event.timeline.device_held]
        holds += [(a, b) for a, b in event.timeline.device_held]
        rows.append(TimelineRow(label=label, stages=stages, device_held=held))
    if not rows:
        return None
    held_s, first, reach = 0.0, None, None
    for a, b in sorted(holds):
        first = a if first is None else first
        if reach is None or a > reach:
            held_s += b - a
            reach = b
        elif b > reach:
            held_s += b - reach
            reach = b
    return Timeline(rows=rows, span_s=end - start, held_s=held_s, from_first_s=end - first if first is not None else 0.0)


def _costs_section(events: list[records.Event], line: Timeline | None = None) -> list[str]:
    evaluated = [e for e in events if isinstance(e, records.CandidateEvaluated)]
    finished = next((e for e in events if isinstance(e, records.RunFinished)), None)
    started = next((e for e in events if isinstance(e, records.RunStarted)), None)
    stages: dict[str, float] = {}
    later = [e.stage_s for e in events if isinstance(e, records.Remeasured | records.CandidateProfiled)]
    for stage_s in [e.stage_s for e in evaluated] + later + ([finished.remeasure_stage_s] if finished else []):
        for stage, seconds in stage_s.items():
            stages[stage] = stages.get(stage, 0.0) + seconds
    generation_s = sum(e.wall_s for e in events if isinstance(e, records.CandidatesGenerated))
    lines = [
        "",
        "## Costs",
        "",
        "Wall-clock seconds per stage (evaluation stages summed over candidates, the parents' on-demand profiles and the final re-measurements):",
        "",
        "| stage | wall (s) |",
        "|---|---|",
        f"| planning (SSDA, SPA) | {agent_costs(events, ('ssda', 'spa')).wall_s:.2f} |",
        f"| generation (OA) | {generation_s:.2f} |",
        *(f"| evaluation: {stage} | {seconds:.2f} |" for stage, seconds in stages.items()),
        "",
    ]
    device_stages = started.device_stages if started else []
    if line is not None and line.held_s > 0:
        lines.append(
            f"The device was held {line.held_s:.1f} s of the run's {line.span_s:.1f} s wall ({line.busy_share:.0%}),"
            f" {line.busy_share_after_first:.0%} from its first hold on (by {', '.join(device_stages) or 'the device stages'};"
            " a stage's time also holds its start-up and its wait for the device). Timeline: plots/timeline.png."
        )
    elif device_stages:
        device_s = sum(stages.get(stage, 0.0) for stage in device_stages)
        lines.append(f"Device-seconds: {device_s:.2f} (the stages that hold the device: {', '.join(device_stages)}).")
    else:
        lines.append("Device-seconds: not counted; no evaluation stage of this architecture declares `holds_device`.")
    lines += [
        "",
        "| agent | calls | from cache | unusable or failed | tokens in | tokens out | cost (USD) |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, roles in (("SSDA", ("ssda",)), ("SPA", ("spa",)), ("OA", ("oa",)), ("total", ("ssda", "spa", "oa"))):
        c = agent_costs(events, roles)
        lines.append(
            f"| {label} | {c.calls} | {c.cached} | {c.failed} | {c.input_tokens:,} | {c.output_tokens:,} |"
            f" {c.cost_usd:.4f}{f' + {c.unpriced} unpriced' if c.unpriced else ''} |"
        )
    models = sorted({f"{e.model} ({e.backend})" if e.model else e.backend for e in events if isinstance(e, records.AgentCalled)})
    if models:
        lines += [
            "",
            f"Answered by: {inline(', '.join(models))}. Money comes from the `prices` table of the backend's configuration.",
        ]
    return lines


_MARKDOWN_SPECIAL = re.compile(r"([\\`*\[\]<>|&])")
"""What Markdown or HTML would read in running text: `_` is left alone (C and kebab names are full of it,
and an intraword `_` emphasises nothing), as are `#` and `-` (never at the start of the line here)."""


def inline(text: str | None, *, limit: int | None = None) -> str:
    """`text` (a model's strategy name, an error quoting its answer, a compiler's line) as one line of
    Markdown that shows it literally: whitespace runs and newlines become one space, and every character
    Markdown or HTML would read (`|` of a table, backticks, `*`, `[`, `<`, `&`) is escaped. Cut to
    `limit` characters before escaping, so that an escape is never cut in half."""
    flat = " ".join((text or "").split())
    if limit is not None and len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    return _MARKDOWN_SPECIAL.sub(r"\\\1", flat)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def write_report(store: RunStore) -> Path:
    """Write report.md and the plot; return the report's path."""
    events = store.events
    manifest = store.manifest
    evaluated = [e for e in events if isinstance(e, records.CandidateEvaluated)]
    roofline = next((e.roofline for e in events if isinstance(e, records.RunStarted)), None)
    finished = next((e for e in events if isinstance(e, records.RunFinished)), None)
    baselines = [e for e in events if isinstance(e, records.BaselineEvaluated)]
    measured = [e for e in evaluated if isinstance(e.evaluation, Measured)]
    best = records.best_of(events)
    seed = evaluated[0] if evaluated and evaluated[0].candidate.round == 0 else None
    run = manifest.config.get("run", {})
    rows = round_rows(events)

    lines = [
        f"# hiera run {manifest.run_id}",
        "",
        f"- task: `{manifest.task.name}` ({manifest.task.workload}) — {manifest.task.description}",
        f"- architecture: {run.get('arch')} — {manifest.hardware.get('model', '')}",
        f"- planner: backend `{run.get('backend')}`, strategy `{run.get('strategy', 'hiera')}`, space `{run.get('space')}`,"
        f" planning {'on' if run.get('planning') else 'off'},"
        f" {run.get('rounds')} rounds × {run.get('population')} candidates",
        f"- created {manifest.created_at}; hiera {manifest.versions.get('hiera', '?')}, Python {manifest.versions.get('python')}",
    ]
    pauses = [e for e in events if isinstance(e, records.RunPaused)]
    for waited, what in ((True, "for answers that came later"), (False, "for the device, planned on a machine without it")):
        these = [p for p in pauses if (p.waiting > 0) == waited]
        if these:
            lines.append(
                f"- paused {len(these)} time(s) {what} (rounds"
                f" {', '.join(str(r) for r in sorted({p.round for p in these}))}), resumed each time"
            )
    lines += ["", "## Result", ""]
    if best is None:
        lines.append(
            "No valid candidate was found."
            if not measured
            else "No finalist held up in the final re-measurement (see Finalists); no winner is named."
        )
    else:
        b, shown = best.search, best.headline
        in_search = f"{b.latency_ms:.3f} ms (p10 {b.latency_p10_ms:.3f}, p90 {b.latency_p90_ms:.3f}, {b.repeats} timed calls)"
        head = f"- best: candidate `{best.candidate.id}` (round {best.candidate.round}, {inline(best.candidate.origin or best.candidate.strategy)})"
        if finished is not None and finished.finalists and best.remeasured is not None:
            won = finished.finalists[0]
            passes = sum(1 for e in events if isinstance(e, records.Remeasured) and e.candidate_id == best.candidate.id)
            lines.append(
                f"{head} — **{shown.latency_ms:.3f} ms**, re-measured {passes} times in fresh processes on fresh inputs,"
                f" interleaved with the other finalists ({won.low_ms:.3f}–{won.high_ms:.3f} ms across them; the figure is"
                f" their median{', the slower of two' if passes == 2 else ''}); in the search {in_search}"
            )
        else:
            lines.append(f"{head} — **{in_search.replace(' ms', ' ms**', 1)}")
        steps = manifest.task.params.get("steps", 1)
        if isinstance(steps, int) and steps > 1:
            lines.append(f"- amortised over the call's {steps} steps: **{shown.latency_ms / steps:.4f} ms per step**")
            if roofline is not None:
                one = roofline.memory_floor_ms  # the grid read and written once: one launch's traffic
                two = f" {one / 2:.4f} ms with two kept on chip," if steps > 2 else ""
                lines.append(
                    f"- per step: memory floor {one:.4f} ms with one step a launch,{two} {one / steps:.4f} ms with all"
                    f" {steps} on chip; compute floor {roofline.compute_floor_ms / steps:.4f} ms at {roofline.peak_gflops:.1f} GFLOP/s"
                )
        lines.append(
            f"- reference: {shown.reference_latency_ms:.3f} ms → speedup over the reference **{shown.speedup_vs_reference:.2f}×**"
        )
        if seed is not None and isinstance(seed.evaluation, Measured):
            lines.append(
                f"- initial candidate: {seed.evaluation.latency_ms:.3f} ms in the search → best is"
                f" **{seed.evaluation.latency_ms / b.latency_ms:.2f}×** faster than the initial candidate (both in the search)"
            )
        if roofline is not None:
            arithmetic = (
                f", the reference's own arithmetic {roofline.compute_headroom_ms:.3f} ms ({roofline.reference_flops / 1e6:.1f}"
                " MFLOP by PyTorch's FLOP counter: no floor, a candidate may do less)"
                if roofline.reference_flops
                else ""
            )
            lines.append(
                f"- floors: memory {roofline.memory_floor_ms:.3f} ms ({roofline.bytes_moved / 1e6:.1f} MB at {roofline.peak_gbps:.1f} GB/s),"
                f" compute {roofline.compute_floor_ms:.3f} ms ({roofline.flops / 1e6:.1f} MFLOP at {roofline.peak_gflops:.1f} GFLOP/s){arithmetic};"
                f" the best runs at {roofline.headroom_floor_ms / shown.latency_ms:.0%} of the {'larger' if arithmetic else 'floor'}"
            )
            if roofline.measurements > 1 and roofline.measured_gbps is not None:
                lines.append(
                    f"- peaks: remembered over this machine's last {roofline.measurements} measurements; this run measured"
                    f" {roofline.measured_gbps:.1f} GB/s and {roofline.measured_gflops:.1f} GFLOP/s"
                )
        disturbed = [(e.candidate, m) for e in measured if isinstance(m := e.evaluation, Measured) and m.disturbed]
        if disturbed:
            lines.append(
                f"- {len(disturbed)} of {len(measured)} valid candidates were timed while the machine was disturbed"
                f" (e.g. `{disturbed[0][0].id}`: {inline(disturbed[0][1].disturbed)}); their figures may read"
                " slow, and the search may have passed them over"
            )
        if b.reference_engine:
            lines.append(f"- correctness judged against {b.reference_engine}; timing bound: {b.timing_bound or 'none'}")
        if finished is not None and finished.remeasured is not None and not finished.finalists:
            r = finished.remeasured  # a run recorded before finalists: one re-measurement of the best
            figure = f"{r.latency_ms:.3f} ms" if isinstance(r, Measured) else f"{type(r).__name__}: {getattr(r, 'reason', '')}"
            lines.append(f"- re-measured in a fresh process on fresh inputs: {figure}")
        compiled = compiled_reference(events)
        if compiled is not None and compiled.compiled_reference_latency_ms is not None:
            lines.append(
                f"- the reference under torch.compile, timed by a judge of the re-measurement:"
                f" {compiled.compiled_reference_latency_ms:.3f} ms → speedup {compiled.compiled_reference_latency_ms / shown.latency_ms:.2f}×"
            )
        elif compiled is not None:
            lines.append(f"- the reference under torch.compile: not measured ({compiled.compiled_reference_note})")
    if finished is not None and finished.finalists:
        busy = {
            e.candidate_id
            for e in events
            if isinstance(e, records.Remeasured) and isinstance(e.evaluation, Measured) and e.evaluation.disturbed
        }
        lines += _finalists_section(finished, {e.candidate.id: e.candidate for e in evaluated}, busy)
    lines += _baselines_section(baselines, shown if best else None, roofline)

    lines += [
        "",
        "## Rounds",
        "",
        "| round | space | direction | strategy | valid / evaluated | round best (ms) | best so far (ms) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.round} | {row.space} | {row.direction} | {inline(row.strategy)} | {row.valid} / {row.total} |"
            f" {_ms(row.round_best_ms)} | {_ms(row.best_so_far_ms)} |"
        )
    notes = [f"- round {row.round}: {inline(note)}" for row in rows for note in row.notes]
    if notes:
        lines += ["", *notes]

    lines += [
        "",
        "## fast_p by budget",
        "",
        "B counts evaluated candidates in trajectory order, the initial candidate first; one task, so each cell is 0 or 1.",
        "",
        "| B | evaluated | fast_0 | fast_1 | fast_2 | best speedup |",
        "|---|---|---|---|---|---|",
    ]
    for fast in fast_p(evaluated):
        speedup = "-" if fast.best_speedup is None else f"{fast.best_speedup:.2f}×"
        lines.append(
            f"| {fast.budget} | {fast.evaluated} | {int(fast.fast_0)} | {int(fast.fast_1)} | {int(fast.fast_2)} | {speedup} |"
        )

    line = timeline(events, store.times)
    lines += _costs_section(events, line)

    outcomes = Counter(type(e.evaluation).__name__ for e in evaluated)
    lines += ["", "## Candidates", "", "Outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())), ""]
    lines += ["| id | round | space | dir | origin | outcome |", "|---|---|---|---|---|---|"]
    for e in evaluated:
        ev = e.evaluation
        outcome = (
            f"{ev.latency_ms:.3f} ms{' (disturbed)' if ev.disturbed else ''}"
            if isinstance(ev, Measured)
            else f"{type(ev).__name__}: {_reason(ev)}"
        )
        lines.append(
            f"| `{e.candidate.id}` | {e.candidate.round} | {e.candidate.space} | {e.candidate.direction or '-'} |"
            f" {inline(e.candidate.origin) or '-'} | {outcome} |"
        )
    plot = _plot(store.path, rows, evaluated, roofline, baselines)
    if plot is not None:
        lines += ["", f"![best latency per round]({plot.relative_to(store.path)})"]
    if line is not None:
        lines += ["", f"![timeline of the run's evaluations]({_plot_timeline(store.path, line).relative_to(store.path)})"]
    path = store.path / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def compiled_reference(events: list[records.Event]) -> Measured | None:
    """The final re-measurement that timed the task's reference under torch.compile, or says why it could not (one
    judge of the re-measurement does, where the workload offers it); None when none did."""
    finished = [e.remeasured for e in events if isinstance(e, records.RunFinished)]
    finals = [e.evaluation for e in events if isinstance(e, records.Remeasured)] + finished
    return next(
        (
            m
            for m in finals
            if isinstance(m, Measured) and (m.compiled_reference_latency_ms is not None or m.compiled_reference_note)
        ),
        None,
    )


def _finalists_section(finished: records.RunFinished, candidates: dict[str, records.Candidate], busy: set[str]) -> list[str]:
    """The Finalists table; `busy`: the finalists one of whose re-measurements was disturbed."""
    lines = [
        "",
        "## Finalists",
        "",
        "The best candidates of the search, each measured again in fresh processes on fresh inputs, interleaved; the"
        " winner has the lowest re-measured figure. A finalist whose re-measurement is not valid is out.",
        "",
        "| candidate | round | in the search (ms) | re-measured (ms) | range (ms) | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for i, f in enumerate(finished.finalists):
        candidate = candidates.get(f.candidate_id)
        round_ = candidate.round if candidate else "-"
        if f.latency_ms is None:
            lines.append(f"| `{f.candidate_id}` | {round_} | {f.in_search_ms:.3f} | - | - | out: {inline(f.reason, limit=120)} |")
            continue
        winner_ms = finished.finalists[0].latency_ms  # the first finalist holds up whenever another does
        verdict = (
            "**winner**"
            if i == 0 and f.candidate_id == finished.best_candidate_id
            else f"{f.latency_ms / winner_ms:.2f}× the winner's time"
            if winner_ms
            else "-"
        )
        mark = " (disturbed)" if f.candidate_id in busy else ""
        lines.append(
            f"| `{f.candidate_id}` | {round_} | {f.in_search_ms:.3f} | {f.latency_ms:.3f}{mark} | {f.low_ms:.3f}–{f.high_ms:.3f} | {verdict} |"
        )
    return lines


def _baselines_section(
    baselines: list[records.BaselineEvaluated], best: Measured | None, roofline: records.Roofline | None
) -> list[str]:
    if not baselines:
        return []
    lines = [
        "",
        "## Baselines (measured in this run)" if not any(e.reused_from for e in baselines) else "## Baselines",
        "",
        "| baseline | space | latency (ms) | of the floor | best found is |",
        "|---|---|---|---|---|",
    ]
    for e in baselines:
        ev = e.evaluation
        name = f"{e.name} (measured in {e.reused_from})" if e.reused_from else e.name
        if not isinstance(ev, Measured):
            lines.append(f"| {name} | {e.candidate.space} | {type(ev).__name__}: {_reason(ev)} | - | - |")
            continue
        floor = f"{roofline.headroom_floor_ms / ev.latency_ms:.0%}" if roofline is not None else "-"
        versus = f"**{ev.latency_ms / best.latency_ms:.2f}×** faster" if best is not None else "-"
        lines.append(f"| {name} | {e.candidate.space} | {ev.latency_ms:.3f} | {floor} | {versus} |")
    if any(e.reused_from for e in baselines):
        lines += [
            "",
            "A baseline measured in an earlier run on this machine, toolchain and settings was taken from the"
            " baseline cache (`[run] baseline_cache`; empty measures every run's baselines).",
        ]
    return lines


def _reason(evaluation: records.Evaluation) -> str:
    text = getattr(evaluation, "reason", None) or getattr(evaluation, "log", None) or ""
    if isinstance(evaluation, records.TimedOut):
        text = f"killed after {evaluation.limit_s:.0f} s"
    first = text.strip().splitlines()[0] if text.strip() else ""
    return inline(first, limit=120)


def _plot(
    run_dir: Path,
    rows: list[RoundRow],
    evaluated: list[records.CandidateEvaluated],
    roofline,
    baselines: list[records.BaselineEvaluated],
) -> Path | None:
    points = [(e.candidate.round, e.evaluation.latency_ms) for e in evaluated if isinstance(e.evaluation, Measured)]
    if not points:
        return None
    path = run_dir / "plots" / "best_latency.png"
    with drawing(path, figsize=(7, 4), dpi=120) as ax:
        _draw_latencies(ax, points, rows, evaluated, roofline, baselines)
    return path


def _draw_latencies(ax, points, rows, evaluated, roofline, baselines) -> None:
    xs, ys = zip(*points)
    ax.scatter(xs, ys, s=14, color="0.6", label="valid candidates", zorder=2)
    best = [(r.round, r.best_so_far_ms) for r in rows if r.best_so_far_ms is not None]
    ax.plot(*zip(*best), marker="o", color="C0", label="best so far", zorder=3)
    for row in rows:
        if row.best_so_far_ms is not None and row.round > 0:
            label = f"{row.direction} · {row.space}"
            ax.annotate(label, (row.round, row.best_so_far_ms), textcoords="offset points", xytext=(4, 6), fontsize=7)
    reference = [e.evaluation.reference_latency_ms for e in evaluated if isinstance(e.evaluation, Measured)]
    ax.axhline(sorted(reference)[len(reference) // 2], color="C3", linestyle="--", label="reference")
    if roofline is not None:
        ax.axhline(roofline.floor_ms, color="C2", linestyle=":", label="roofline floor")
    styles = iter([(c, "-.") for c in ("C1", "C4", "C5", "C6", "C8", "C9")] * 4)
    for e in baselines:
        if isinstance(e.evaluation, Measured):
            color, style = next(styles)
            ax.axhline(e.evaluation.latency_ms, color=color, linestyle=style, linewidth=1, label=e.name)
    ax.set_yscale("log")
    ax.set_xlabel("round")
    ax.set_ylabel("latency (ms, log)")
    ax.set_xticks(sorted({r.round for r in rows}))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)


def _plot_timeline(run_dir: Path, line: Timeline) -> Path:
    """plots/timeline.png: one row per evaluation, a bar per stage, the device holds in black beneath."""
    path = run_dir / "plots" / "timeline.png"
    with drawing(path, figsize=(9, 1.2 + 0.22 * len(line.rows)), dpi=110) as ax:
        _draw_timeline(ax, line)
    return path


def _draw_timeline(ax, line: Timeline) -> None:
    names = list(dict.fromkeys(name for row in line.rows for name, _, _ in row.stages))
    colors = {name: f"C{i % 10}" for i, name in enumerate(names)}
    for y, row in enumerate(line.rows):
        for name, start, length in row.stages:
            ax.broken_barh([(start, max(length, line.span_s / 2000))], (y - 0.35, 0.5), color=colors[name])
        ax.broken_barh(row.device_held, (y + 0.2, 0.15), color="black")
    for name in names:
        ax.bar(0, 0, color=colors[name], label=name)
    ax.bar(0, 0, color="black", label="device held")
    ax.set_yticks(range(len(line.rows)), [row.label for row in line.rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the run started")
    ax.set_title(
        f"device held {line.held_s:.1f} s of {line.span_s:.1f} s ({line.busy_share:.0%};"
        f" {line.busy_share_after_first:.0%} from the first hold)",
        fontsize=9,
    )
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(axis="x", alpha=0.3)


_DRAWING = threading.Lock()


@contextlib.contextmanager
def drawing(path: Path, **subplots: Any) -> Iterator[Any]:
    """Axes to draw on (`plt.subplots(**subplots)`), the figure laid out and written to `path` when the block ends.
    matplotlib is not thread-safe (pyplot's figures, mathtext's parser), and a suite's runs end in threads at once
    (`[executor.local] runs`): figures are drawn one at a time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with _DRAWING:
        fig, ax = plt.subplots(**subplots)
        try:
            yield ax
            fig.tight_layout()
            path.parent.mkdir(exist_ok=True)
            fig.savefig(path)
        finally:
            plt.close(fig)
