"""Reports over many runs: the paper's Table 2 (fast_p per level and budget) and Figure 4 (the speedup
distribution per implementation-space policy), computed from the run directories' trajectories alone.

A suite is any set of run directories, one task and one space policy each (a batch from
`hiera run --all-tasks` is one folder of them). Runs group by workload and level (KernelBench's level, when
the task has one) and by space policy (`run.space`: adaptive, or a fixed space).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

import attrs

from hiera_core import records
from hiera_core.records import Measured
from hiera_core.report import BUDGETS, compiled_reference, fast_p, save_figure
from hiera_core.store import MANIFEST, RunDirError, RunStore


@attrs.frozen(kw_only=True)
class TaskResult:
    """One run's outcome, as the suite tables count it."""

    group: str
    """`workload` or `workload level N`."""
    policy: str
    """The run's space policy: `adaptive` or a fixed space."""
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


NOISE = 1.05
"""A speedup below this is within what timing noise can give: reported beside fast_1, which counts any speedup > 1."""


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
    measured = [e.evaluation for e in evaluated if isinstance(e.evaluation, Measured)]
    finished = next((e for e in store.events if isinstance(e, records.RunFinished)), None)
    best = finished.remeasured if finished is not None and isinstance(finished.remeasured, Measured) else None
    best = best or min(measured, key=lambda m: m.latency_ms, default=None)
    compiled = compiled_reference(store.events)
    return TaskResult(
        group=group,
        policy=str(manifest.config.get("run", {}).get("space", "adaptive")),
        task=manifest.task.name,
        run_dir=store.path,
        evaluated=len(evaluated),
        fast={row.budget: (row.fast_0, row.fast_1, row.fast_2) for row in rows},
        best_speedup={row.budget: row.best_speedup for row in rows},
        best_ms=best.latency_ms if best else None,
        reference_ms=best.reference_latency_ms if best else None,
        compiled_ms=compiled.compiled_reference_latency_ms if compiled is not None else None,
        finished=finished is not None,
    )


def write_suite_report(run_dirs: list[Path], out: Path, budgets: tuple[int, ...] = BUDGETS) -> Path:
    """Write `out/suite.md` and `out/plots/speedup_by_policy.png` for the runs; return the report's path."""
    stores = [RunStore.open(path) for path in run_dirs]
    results = [task_result(store, budgets) for store in stores]
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# hiera suite report", "", *_setting(stores), "", *_table2(results, budgets), "",
             *_table2_beyond_noise(results, budgets), "", *_per_task(results, budgets)]
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
    timing = []
    for config, arch in zip(configs, archs, strict=True):
        stage = config.get("evaluator", {}).get(f"{arch}-run", {})
        if stage:
            timing.append(", ".join(f"{k}={v}" for k, v in sorted(stage.items()) if k != "device" and not k.endswith("timeout_s")))
    budgets = [f"{r.get('rounds')} rounds x {r.get('population')}" for r in runs]
    models = [c.get("backend", {}).get(r.get("backend", ""), {}).get("model") for c, r in zip(configs, runs, strict=True)]
    tolerance = [
        f"rtol {s.manifest.task.params['rtol']:g}, atol {s.manifest.task.params['atol']:g}"
        if "rtol" in s.manifest.task.params else "the workload's own"
        for s in stores
    ]
    return [
        f"- runs: {len(stores)} ({distinct(s.manifest.task.workload for s in stores)}), created "
        f"{distinct(s.manifest.created_at[:10] for s in stores)}",
        f"- hardware: {distinct(s.manifest.hardware.get('model') for s in stores)} (architecture {distinct(archs)})",
        f"- dtype: {distinct(s.manifest.task.params.get('dtype') for s in stores)}; tolerance: {distinct(tolerance)}",
        f"- timing: {distinct(timing)}",
        f"- planner: backend {distinct(r.get('backend') for r in runs)}, strategy {distinct(r.get('strategy', 'hiera') for r in runs)},"
        f" model {distinct(models)}; {distinct(budgets)} candidates",
    ]


def _table2(results: list[TaskResult], budgets: tuple[int, ...]) -> list[str]:
    """Table 2's shape: per group and space policy, fast_0 / fast_1 / fast_2 in % of tasks at each budget,
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
        f"| group | space policy | tasks | {head} | geomean speedup | median speedup | fast_1 below {NOISE}× |",
        "|---|---|---|" + "---|" * len(budgets) + "---|---|---|",
    ]
    groups: dict[tuple[str, str], list[TaskResult]] = defaultdict(list)
    for result in results:
        groups[result.group, result.policy].append(result)
    for (group, policy), listed in sorted(groups.items()):
        members = [r for r in listed if r.finished]
        unfinished = f" (+{len(listed) - len(members)} unfinished, not counted)" if len(members) < len(listed) else ""
        if not members:
            lines.append(f"| {group} | {policy} | 0{unfinished} | {' | '.join('-' for _ in budgets)} | - | - | - |")
            continue
        cells = []
        for b in budgets:
            shares = [100 * sum(r.fast[b][i] for r in members) / len(members) for i in range(3)]
            cells.append(" / ".join(f"{share:.0f}" for share in shares))
        speedups = [r.best_speedup[top] for r in members if r.best_speedup[top] is not None]
        geomean = statistics.geometric_mean(speedups) if speedups else None
        median = statistics.median(speedups) if speedups else None
        marginal = sum(1 for r in members if r.fast[top][1] and r.best_speedup[top] < NOISE)
        lines.append(
            f"| {group} | {policy} | {len(members)}{unfinished} | {' | '.join(cells)} | {_x(geomean)} | {_x(median)} |"
            f" {marginal} |"
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
        f"| group | space policy | tasks | {head} |",
        "|---|---|---|" + "---|" * len(budgets),
    ]
    groups: dict[tuple[str, str], list[TaskResult]] = defaultdict(list)
    for result in results:
        if result.finished:
            groups[result.group, result.policy].append(result)
    for (group, policy), members in sorted(groups.items()):
        cells = []
        for b in budgets:
            speedups = [r.best_speedup[b] for r in members]
            shares = [sum(1 for x in speedups if x is not None and x >= p * NOISE) if p else sum(r.fast[b][0] for r in members)
                      for p in (0, 1, 2)]
            cells.append(" / ".join(f"{100 * share / len(members):.0f}" for share in shares))
        lines.append(f"| {group} | {policy} | {len(members)} | {' | '.join(cells)} |")
    return lines


def _per_task(results: list[TaskResult], budgets: tuple[int, ...]) -> list[str]:
    top = max(budgets)
    lines = [
        "## Tasks",
        "",
        f"| group | task | space policy | evaluated | best (ms) | reference (ms) | speedup at B={top} | torch.compile (ms) |"
        " vs torch.compile | run |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(results, key=lambda r: (r.group, r.task, r.policy)):
        best = "-" if r.best_ms is None else f"{r.best_ms:.4g}"
        reference = "-" if r.reference_ms is None else f"{r.reference_ms:.4g}"
        compiled = "-" if r.compiled_ms is None else f"{r.compiled_ms:.4g}"
        versus = _x(r.compiled_ms / r.best_ms) if r.compiled_ms is not None and r.best_ms else "-"
        lines.append(
            f"| {r.group} | {r.task} | {r.policy} | {r.evaluated}{'' if r.finished else ' (unfinished)'} | {best} | {reference} | {_x(r.best_speedup[top])} |"
            f" {compiled} | {versus} | {r.run_dir.parent.name}/{r.run_dir.name} |"
        )
    return lines


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}×"


def _figure4(results: list[TaskResult], out: Path, budget: int) -> Path | None:
    """Figure 4's shape: one box of best speedups (log scale) per group and space policy (policies compared on
    the same tasks), tasks without a valid candidate left out and counted in the label, unfinished runs left out."""
    boxes: dict[tuple[str, str], list[float]] = defaultdict(list)
    missing: dict[tuple[str, str], int] = defaultdict(int)
    for r in (r for r in results if r.finished):
        if r.best_speedup[budget] is None:
            missing[r.group, r.policy] += 1
        else:
            boxes[r.group, r.policy].append(r.best_speedup[budget])
    if not boxes:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator

    keys = sorted(set(boxes) | set(missing), key=lambda k: (k[0], k[1] != "adaptive", k[1]))
    data = [boxes.get(k, []) or [float("nan")] for k in keys]
    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(keys), 4), dpi=120)
    ax.boxplot(data, showfliers=True)
    ax.set_xticks(range(1, len(keys) + 1))
    ax.set_xticklabels([f"{group}\n{policy}\n{len(boxes.get((group, policy), []))} valid, {missing[group, policy]} none"
                        for group, policy in keys], fontsize=8)
    ax.axhline(1.0, color="C3", linestyle="--", linewidth=1, label="reference")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
    ax.yaxis.set_minor_locator(LogLocator(base=10, subs=(1.2, 1.5, 2, 3, 5, 7, 8, 9)))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set_ylabel(f"best speedup over the reference at B={budget} (log)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    return save_figure(fig, out / "plots" / "speedup_by_policy.png")
