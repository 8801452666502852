"""Reports over many runs: the paper's Table 2 (fast_p per level and budget) and Figure 4 (the speedup
distribution per implementation-space policy), computed from the run directories' trajectories alone.

A suite is any set of run directories, one task and one space policy each (a batch from
`hiera run --all-tasks` is one folder of them). Runs group by workload and level (KernelBench's level, when
the task has one), by planner (the search strategy and the backend that answered it) and by space policy
(`run.space`: adaptive, or a fixed space). Shares and speedups come with 95% bootstrap intervals over the tasks
of a row, and two planners run on the same tasks are compared task by task (a paired bootstrap).
"""

from __future__ import annotations

import math
import random
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from hiera_core import records
from hiera_core.report import BUDGETS, agent_costs, compiled_reference, drawing, fast_p, timeline
from hiera_core.store import MANIFEST, RunDirError, RunStore


@attrs.frozen(kw_only=True)
class TaskResult:
    """One run's outcome, as the suite tables count it."""

    group: str
    """`workload` or `workload level N`."""
    policy: str
    """The run's space policy: `adaptive` or a fixed space."""
    planner: str = "hiera, expert"
    """The run's search strategy and the backend that answered its requests (`hiera, exchange`)."""
    task: str
    run_dir: Path
    evaluated: int
    fast: dict[int, tuple[bool, bool, bool]]
    """Per budget B: (fast_0, fast_1, fast_2) within the first B evaluated candidates."""
    best_speedup: dict[int, float | None]
    """Per budget B: the best speedup over the reference within the first B candidates (None: none valid)."""
    best_ms: float | None
    """The winner's re-measured figure (the search's best where the run was not re-measured)."""
    reference_ms: float | None
    compiled_ms: float | None = None
    """The reference under `torch.compile`, from the final re-measurement (None where not measured)."""
    finished: bool = True
    """False for a run that stopped before its end (killed, a time limit): it is listed, not counted."""
    answers: int = 0
    """Agent calls that spent the backend's work (those answered from the answer cache are not counted)."""
    device_s: float = 0.0
    """How long the run's evaluations held the device (the union of their holds)."""

    @property
    def final_speedup(self) -> float | None:
        """The winner's re-measured speedup over the eager reference (None without a valid candidate)."""
        return self.reference_ms / self.best_ms if self.best_ms and self.reference_ms else None

    @property
    def compiled_speedup(self) -> float | None:
        """The winner's speedup over the reference under torch.compile (None where either is missing)."""
        return self.compiled_ms / self.best_ms if self.best_ms and self.compiled_ms else None


NOISE = 1.05
"""A speedup below this is within what timing noise can give: reported beside fast_1, which counts any speedup > 1."""
RESAMPLES = 10_000
"""Bootstrap resamples of a row's tasks for each 95% interval (drawn from a fixed seed: a report is reproducible)."""


def find_runs(paths: list[Path]) -> list[Path]:
    """The run directories among `paths` and their immediate subfolders, sorted; an error names a path
    that holds no run at all."""
    runs = []
    for path in paths:
        if (path / MANIFEST).is_file():
            runs.append(path)
            continue
        inside = sorted(p for p in path.iterdir() if (p / MANIFEST).is_file()) if path.is_dir() else []
        if not inside:
            raise RunDirError(f"{path} is neither a hiera run directory nor a folder of them")
        runs.extend(inside)
    return runs


def task_result(store: RunStore, budgets: tuple[int, ...] = BUDGETS) -> TaskResult:
    manifest = store.manifest
    evaluated = [e for e in store.events if isinstance(e, records.CandidateEvaluated)]
    level = manifest.task.params.get("level")
    group = manifest.task.workload + (f" level {level}" if level is not None else "")
    rows = fast_p(evaluated, budgets)
    finished = next((e for e in store.events if isinstance(e, records.RunFinished)), None)
    winner = records.best_of(store.events)
    best = winner.headline if winner is not None else None
    compiled = compiled_reference(store.events)
    run = manifest.config.get("run", {})
    line = timeline(store.events, store.times)
    calls = agent_costs(store.events)
    return TaskResult(
        group=group,
        policy=str(run.get("space", "adaptive")),
        planner=f"{run.get('strategy') or 'hiera'}, {run.get('backend') or '-'}",
        task=manifest.task.name,
        run_dir=store.path,
        evaluated=len(evaluated),
        fast={row.budget: (row.fast_0, row.fast_1, row.fast_2) for row in rows},
        best_speedup={row.budget: row.best_speedup for row in rows},
        best_ms=best.latency_ms if best else None,
        reference_ms=best.reference_latency_ms if best else None,
        compiled_ms=compiled.compiled_reference_latency_ms if compiled is not None else None,
        finished=finished is not None,
        answers=calls.calls - calls.cached,
        device_s=line.held_s if line is not None else 0.0,
    )


def write_suite_report(run_dirs: list[Path], out: Path, budgets: tuple[int, ...] = BUDGETS) -> Path:
    """Write `out/suite.md` and `out/plots/speedup_by_policy.png` for the runs; return the report's path."""
    stores = [RunStore.open(path) for path in run_dirs]
    results = [task_result(store, budgets) for store in stores]
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        "# hiera suite report",
        "",
        *_setting(stores),
        "",
        *_table2(results, budgets),
        "",
        *_table2_beyond_noise(results, budgets),
        "",
        *_intervals(results, max(budgets)),
        "",
        *_paired(results, max(budgets)),
        "",
        *_costs(results),
        "",
        *_per_task(results, budgets),
    ]
    plot = _figure4(results, out, max(budgets))
    if plot is not None:
        lines += ["", f"![best speedup per space policy at B = {max(budgets)}]({plot.relative_to(out)})"]
    path = out / "suite.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _setting(stores: list[RunStore]) -> list[str]:
    """What the figures were measured on and how, stated once (each distinct value when runs differ)."""

    def distinct(values) -> str:
        seen = sorted({str(v) for v in values if v not in (None, "")})
        return ", ".join(seen) or "-"

    configs = [s.manifest.config for s in stores]
    runs = [c.get("run", {}) for c in configs]
    archs = [r.get("arch", "") for r in runs]
    stages = [config.get("evaluator", {}).get(f"{arch}-run", {}) for config, arch in zip(configs, archs, strict=True)]
    stages = [{k: v for k, v in stage.items() if k != "device" and not k.endswith("timeout_s")} for stage in stages if stage]
    timing = []  # each setting once: its values where the runs differ, how many runs have it where some predate it
    for key in sorted(set().union(*stages)):
        having = [stage[key] for stage in stages if key in stage]
        timing.append(f"{key}={' or '.join(sorted({str(v) for v in having}))}")
        if len(having) < len(stages):
            timing[-1] += f" ({len(having)} of {len(stages)} runs)"
    budgets = [f"{r.get('rounds')} rounds x {r.get('population')}" for r in runs]
    models = [c.get("backend", {}).get(r.get("backend", ""), {}).get("model") for c, r in zip(configs, runs, strict=True)]
    tolerance = [
        f"rtol {s.manifest.task.params['rtol']:g}, atol {s.manifest.task.params['atol']:g}"
        if "rtol" in s.manifest.task.params
        else "the workload's own"
        for s in stores
    ]
    return [
        f"- runs: {len(stores)} ({distinct(s.manifest.task.workload for s in stores)}), created "
        f"{distinct(s.manifest.created_at[:10] for s in stores)}",
        f"- hardware: {distinct(s.manifest.hardware.get('model') for s in stores)} (architecture {distinct(archs)})",
        f"- dtype: {distinct(s.manifest.task.params.get('dtype') for s in stores)}; tolerance: {distinct(tolerance)}",
        f"- timing: {', '.join(timing) or '-'}",
        f"- planner: backend {distinct(r.get('backend') for r in runs)}, strategy {distinct(r.get('strategy', 'hiera') for r in runs)},"
        f" model {distinct(models)}; {distinct(budgets)} candidates",
    ]


def _rows(results: list[TaskResult], *, finished_only: bool = False) -> list[tuple[tuple[str, str, str], list[TaskResult]]]:
    """The report's rows: the runs of each (group, planner, space policy), in that order."""
    groups: dict[tuple[str, str, str], list[TaskResult]] = defaultdict(list)
    for result in results:
        if result.finished or not finished_only:
            groups[result.group, result.planner, result.policy].append(result)
    return sorted(groups.items())


def _table2(results: list[TaskResult], budgets: tuple[int, ...]) -> list[str]:
    """Table 2's shape: per group, planner and space policy, fast_0 / fast_1 / fast_2 in % of tasks at each budget,
    then the geometric-mean and median best speedup at the largest budget over the tasks with a valid
    candidate. Unfinished runs are not counted (their first B candidates may not exist yet): the tasks column
    says how many there are, and `hiera resume` finishes them."""
    top = max(budgets)
    head = " | ".join(f"B={b}" for b in budgets)
    lines = [
        "## fast_p (% of tasks: fast_0 / fast_1 / fast_2)",
        "",
        "fast_0: a valid candidate; fast_1: valid and faster than the reference; fast_2: more than 2x faster;"
        f" B counts the first B evaluated candidates of each run. Speedups at B={top}, over the tasks with a valid"
        f" candidate. The last column counts the fast_1 tasks at B={top} whose speedup is below {NOISE}×: a margin that"
        " timing noise alone can give (an ATen seed, which makes the reference's own calls, measured 1.00-1.01×"
        " on the H200).",
        "",
        f"| group | planner | space policy | tasks | {head} | geomean speedup | median speedup | fast_1 below {NOISE}× |",
        "|---|---|---|---|" + "---|" * len(budgets) + "---|---|---|",
    ]
    for (group, planner, policy), listed in _rows(results):
        members = [r for r in listed if r.finished]
        unfinished = f" (+{len(listed) - len(members)} unfinished, not counted)" if len(members) < len(listed) else ""
        if not members:
            lines.append(f"| {group} | {planner} | {policy} | 0{unfinished} | {' | '.join('-' for _ in budgets)} | - | - | - |")
            continue
        cells = []
        for b in budgets:
            shares = [100 * sum(r.fast[b][i] for r in members) / len(members) for i in range(3)]
            cells.append(" / ".join(f"{share:.0f}" for share in shares))
        speedups = [s for r in members if (s := r.best_speedup[top]) is not None]
        geomean = statistics.geometric_mean(speedups) if speedups else None
        median = statistics.median(speedups) if speedups else None
        marginal = sum(1 for r in members if r.fast[top][1] and (r.best_speedup[top] or 0.0) < NOISE)
        lines.append(
            f"| {group} | {planner} | {policy} | {len(members)}{unfinished} | {' | '.join(cells)} | {_x(geomean)} |"
            f" {_x(median)} | {marginal} |"
        )
    return lines


def _table2_beyond_noise(results: list[TaskResult], budgets: tuple[int, ...]) -> list[str]:
    """The same shares, counting a task faster than p× only when its best speedup is at least NOISE·p×: what a seed
    that makes the reference's own calls, or timing noise alone, cannot reach. Beside the plain table (the paper's
    definition), so both comparisons can be made."""
    head = " | ".join(f"B={b}" for b in budgets)
    lines = [
        f"## fast_p beyond the noise (% of tasks: fast_0 / fast_1 / fast_2, a speedup of at least {NOISE}× p)",
        "",
        f"fast_1 counts a best speedup ≥ {NOISE}×, fast_2 ≥ {2 * NOISE:.2f}×; fast_0 as above.",
        "",
        f"| group | planner | space policy | tasks | {head} |",
        "|---|---|---|---|" + "---|" * len(budgets),
    ]
    for (group, planner, policy), members in _rows(results, finished_only=True):
        cells = []
        for b in budgets:
            shares = [sum(_beyond(r, b, p) for r in members) for p in (0, 1, 2)]
            cells.append(" / ".join(f"{100 * share / len(members):.0f}" for share in shares))
        lines.append(f"| {group} | {planner} | {policy} | {len(members)} | {' | '.join(cells)} |")
    return lines


def _beyond(result: TaskResult, budget: int, p: int) -> bool:
    """fast_p beyond the noise: fast_0 as is; fast_1 and fast_2 need a best speedup of at least NOISE·p×."""
    if p == 0:
        return result.fast[budget][0]
    speedup = result.best_speedup[budget]
    return speedup is not None and speedup >= p * NOISE


def bootstrap(
    values: Sequence, statistic: Callable[[list], float | None], *, resamples: int = RESAMPLES, seed: int = 0
) -> tuple[float, float] | None:
    """The 95% percentile interval of `statistic` over `resamples` resamples of `values` with replacement (a
    resample where the statistic is undefined, such as a geomean of no valid task, is left out); None without
    values."""
    if not values:
        return None
    draw = random.Random(seed)
    n = len(values)
    stats = sorted(
        x for x in (statistic([values[draw.randrange(n)] for _ in range(n)]) for _ in range(resamples)) if x is not None
    )
    if not stats:
        return None
    return stats[math.floor(0.025 * (len(stats) - 1))], stats[math.ceil(0.975 * (len(stats) - 1))]


def _share(flags: list[bool]) -> float:
    return 100 * sum(flags) / len(flags)


def _geomean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.geometric_mean(present) if present else None


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _intervals(results: list[TaskResult], top: int) -> list[str]:
    """At the largest budget: each share and speedup of a row with its 95% bootstrap interval over the row's tasks.
    Speedups here are the winners' re-measured figures (the headline rule), over eager PyTorch and over torch.compile,
    over the tasks with a valid candidate (and a torch.compile figure)."""
    lines = [
        f"## With 95% intervals (B={top}; bootstrap over the tasks of each row, {RESAMPLES:,} resamples)",
        "",
        "fast_p in % of tasks (the paper's definition, then beyond the noise); speedups of the re-measured winners, as"
        " geometric mean and median.",
        "",
        f"| group | planner | space policy | tasks | fast_0 | fast_1 | fast_2 | fast_1 ≥ {NOISE}× | fast_2 ≥ {2 * NOISE:.2f}× |"
        " geomean vs eager | median vs eager | geomean vs torch.compile | median vs torch.compile |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (group, planner, policy), members in _rows(results, finished_only=True):
        shares = [_with_interval([r.fast[top][i] for r in members], _share, "{:.0f}") for i in range(3)] + [
            _with_interval([_beyond(r, top, p) for r in members], _share, "{:.0f}") for p in (1, 2)
        ]
        speedups = [
            _with_interval([getattr(r, field) for r in members], statistic, "{:.2f}×")
            for field in ("final_speedup", "compiled_speedup")
            for statistic in (_geomean, _median)
        ]
        lines.append(f"| {group} | {planner} | {policy} | {len(members)} | {' | '.join(shares + speedups)} |")
    return lines


def _with_interval(values: list, statistic: Callable[[list], float | None], form: str) -> str:
    point = statistic(values) if values else None
    if point is None:
        return "-"
    low, high = bootstrap(values, statistic) or (point, point)
    return f"{form.format(point)} [{form.format(low)}–{form.format(high)}]"


def _paired(results: list[TaskResult], top: int) -> list[str]:
    """Two planners (or space policies) of one group on the tasks both finished: how much faster one's winners are
    (the geometric mean over tasks of B's re-measured winner over A's, both valid) and the difference in fast_1
    (beyond the noise too), each with a paired bootstrap over those tasks (a resample draws whole tasks)."""
    lines = [
        f"## Planners compared on the same tasks (B={top}; paired bootstrap over the tasks both finished)",
        "",
        "A over B: the geometric mean over tasks of B's re-measured winner's time over A's (above 1: A's winners are"
        " faster), over the tasks where both have a valid candidate; fast_1 differences in points of the shared tasks.",
        "",
        f"| group | A | B | tasks in both | A over B | fast_1, A − B | fast_1 ≥ {NOISE}×, A − B |",
        "|---|---|---|---|---|---|---|",
    ]
    by_group: dict[str, list[tuple[str, dict[str, TaskResult]]]] = defaultdict(list)
    for (group, planner, policy), members in _rows(results, finished_only=True):
        by_group[group].append((f"{planner}, {policy}", {r.task: r for r in members}))
    compared = 0
    for group, rows in sorted(by_group.items()):
        for i, (a_name, a) in enumerate(rows):
            for b_name, b in rows[i + 1 :]:
                shared = sorted(set(a) & set(b))
                if not shared:
                    continue
                compared += 1
                pairs = [(a[t], b[t]) for t in shared]
                ratios = [y.best_ms / x.best_ms if x.best_ms and y.best_ms else None for x, y in pairs]
                plain = [int(x.fast[top][1]) - int(y.fast[top][1]) for x, y in pairs]
                beyond = [int(_beyond(x, top, 1)) - int(_beyond(y, top, 1)) for x, y in pairs]
                lines.append(
                    f"| {group} | {a_name} | {b_name} | {len(shared)} | {_with_interval(ratios, _geomean, '{:.2f}×')} |"
                    f" {_with_interval(plain, _points, '{:+.0f}')} | {_with_interval(beyond, _points, '{:+.0f}')} |"
                )
    if not compared:
        lines.append("| - | - | - | 0 | - | - | - |")
    return lines


def _points(differences: list[int]) -> float:
    return 100 * sum(differences) / len(differences)


def _costs(results: list[TaskResult]) -> list[str]:
    lines = [
        "## Costs",
        "",
        "Answers: agent calls that reached the backend (the answer cache's are not counted); device: seconds the"
        " evaluations held the GPU (the union of their holds), summed over the row's runs.",
        "",
        "| group | planner | space policy | runs | answers | device (s) | device per run (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for (group, planner, policy), members in _rows(results):
        device = sum(r.device_s for r in members)
        lines.append(
            f"| {group} | {planner} | {policy} | {len(members)} | {sum(r.answers for r in members)} |"
            f" {device:.0f} | {device / len(members):.0f} |"
        )
    return lines


def _per_task(results: list[TaskResult], budgets: tuple[int, ...]) -> list[str]:
    top = max(budgets)
    lines = [
        "## Tasks",
        "",
        f"| group | task | planner | space policy | evaluated | best (ms) | reference (ms) | speedup at B={top} |"
        " torch.compile (ms) | vs torch.compile | run |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(results, key=lambda r: (r.group, r.task, r.planner, r.policy)):
        best = "-" if r.best_ms is None else f"{r.best_ms:.4g}"
        reference = "-" if r.reference_ms is None else f"{r.reference_ms:.4g}"
        compiled = "-" if r.compiled_ms is None else f"{r.compiled_ms:.4g}"
        versus = _x(r.compiled_speedup)
        lines.append(
            f"| {r.group} | {r.task} | {r.planner} | {r.policy} | {r.evaluated}{'' if r.finished else ' (unfinished)'} |"
            f" {best} | {reference} | {_x(r.best_speedup[top])} | {compiled} | {versus} | {r.run_dir.parent.name}/{r.run_dir.name} |"
        )
    return lines


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}×"


def _figure4(results: list[TaskResult], out: Path, budget: int) -> Path | None:
    """Figure 4's shape: one box of best speedups (log scale) per group, planner and space policy (compared on the
    same tasks), tasks without a valid candidate left out and counted in the label, unfinished runs left out."""
    boxes: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    missing: dict[tuple[str, str, str], int] = defaultdict(int)
    for r in (r for r in results if r.finished):
        speedup = r.best_speedup[budget]
        if speedup is None:
            missing[r.group, r.planner, r.policy] += 1
        else:
            boxes[r.group, r.planner, r.policy].append(speedup)
    if not boxes:
        return None
    keys = sorted(set(boxes) | set(missing), key=lambda k: (k[0], k[1], k[2] != "adaptive", k[2]))
    data = [boxes.get(k, []) or [float("nan")] for k in keys]
    path = out / "plots" / "speedup_by_policy.png"
    with drawing(path, figsize=(1.8 + 1.6 * len(keys), 4), dpi=120) as ax:
        _draw_speedups(ax, keys, data, boxes, missing, budget)
    return path


def _draw_speedups(ax, keys, data, boxes, missing, budget: int) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.boxplot(data, showfliers=True)
    ax.set_xticks(range(1, len(keys) + 1))
    ax.set_xticklabels([f"{k[0]}\n{k[1]}\n{k[2]}\n{len(boxes.get(k, []))} valid, {missing[k]} none" for k in keys], fontsize=8)
    ax.axhline(1.0, color="C3", linestyle="--", linewidth=1, label="reference")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
    ax.yaxis.set_minor_locator(LogLocator(base=10, subs=(1.2, 1.5, 2, 3, 5, 7, 8, 9)))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set_ylabel(f"best speedup over the reference at B={budget} (log)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
