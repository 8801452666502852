"""How tight the judge's clock is for kernels of a few µs to a few ms (a benchmark, not a test)

    python3 research/bench_batch_timing.py [--times 3] [--json OUT.json] [TASK ...]

Evaluates the seed kernel of each task of the GPU tests' `tinyops` workload (tests/plugins/gpu_tasks.py: `scale-add`,
FP32 y = 2x + b on 2^20 elements, ~3 µs of memory traffic on an H200; `scale-add-4m`, on 2^22, ~12 µs; `matmul-2048`, a
naive FP32 2048³ GEMM, a few ms) `--times` times, each in a fresh judge and runner on fresh inputs through hiera's own
pipeline (as `hiera eval` does), one after the other, and prints per evaluation: the judge's figure with its p10-p90 over
batches, the runner's CUDA events, the calls a batch, the null batch it subtracts, and where the judge's clock went in a
null batch and in a timed one (thawing the candidate's cgroup, the runner's reply, freezing it; from `judge.log`). Last,
per task: the median of the figures and how far the farthest lies from it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[1] / "tests" / "plugins"
sys.path.insert(0, str(PLUGINS))
os.environ["PYTHONPATH"] = ":".join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")]))

from hiera_core import records  # noqa: E402
from hiera_core.config import load_config  # noqa: E402
from hiera_core.engine import candidate_id, new_job, roofline_for  # noqa: E402
from hiera_core.plugins import make_plugin_manager  # noqa: E402
from hiera_core.session import Session  # noqa: E402


def median_parts(parts: list[list[float]], null: int) -> list[float]:
    """Median ms of each part of the judge's clock (`clock_parts` in judge.log: thaw, reply, freeze; then the runner's
    calls, its time before them, after them to its reply, its reply to the judge's read; the idle probe) over the
    batches of the most calls that are (null=1) or are not (null=0) null."""
    chosen = [p for p in parts if p[1] == null and len(p) >= 5]
    if not chosen:
        return []
    most = max(p[0] for p in chosen)
    chosen = [p for p in chosen if p[0] == most]
    return [round(statistics.median(p[k] for p in chosen), 3) for k in range(2, min(map(len, chosen)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", nargs="*", default=["scale-add", "scale-add-4m", "matmul-2048"])
    parser.add_argument("--times", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--set", action="append", default=[], help="a config override, as `hiera --set`")
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench_batch_timing"))
    args = parser.parse_args()
    rows = []
    for task in args.tasks:
        config = load_config(args.work, environ={}, cli={"workload": "tinyops", "task": task, "arch": "cuda"},
                             overrides=["evaluator.cuda-profile.enabled=false", *args.set])
        session = Session.create(config, make_plugin_manager(extra_plugins=["gpu_tasks"]))
        contract = session.workload.contract(session.task, "cuda")
        toolchain = session.arch.toolchain()
        source, _, _ = session.workload.seed(session.task, "cuda")
        candidate = records.Candidate(id=candidate_id(source, contract, toolchain), source=source, space="pure_cuda", round=1,
                                      origin="seed")
        for k in range(args.times):
            workdir = args.work / f"{task}-{time.strftime('%H%M%S')}-{k}"
            job = new_job(session, candidate, contract=contract, toolchain=toolchain, roofline=roofline_for(session),
                          workdir=workdir, remeasure=bool(k % 2))
            [(_, evaluated)] = list(session.executor.run([job], session.pipeline))
            e = evaluated.evaluation
            log = {}
            for line in (workdir / "judge.log").read_text(errors="replace").splitlines() if (workdir / "judge.log").exists() else []:
                if line.startswith("timing: "):
                    log = json.loads(line[len("timing: "):])
            row = {"task": task, "verdict": type(e).__name__, "latency_ms": getattr(e, "latency_ms", None),
                   "p10_ms": getattr(e, "latency_p10_ms", None), "p90_ms": getattr(e, "latency_p90_ms", None),
                   "events_ms": (getattr(e, "conditions", {}) or {}).get("in_process_ms"),
                   "batch_calls": (getattr(e, "conditions", {}) or {}).get("batch_calls"),
                   "null_ms": (getattr(e, "conditions", {}) or {}).get("protocol_ms_per_batch"),
                   "reference_ms": getattr(e, "reference_latency_ms", None),
                   "null_full_ms": log.get("null_full_ms"), "null_one_ms": log.get("null_one_ms"), "wall_ms": log.get("wall_ms"),
                   "paired_null_ms": log.get("paired_null_ms"),
                   "null_parts": median_parts(log.get("clock_parts", []), 1), "timed_parts": median_parts(log.get("clock_parts", []), 0),
                   "reason": getattr(e, "timing_bound", "") or getattr(e, "reason", "")}
            rows.append(row)
            if args.json:
                args.json.write_text(json.dumps(rows, indent=1))
            full = sorted(row["null_full_ms"] or [0])
            print(f"{task} #{k}: {row['verdict']} {row['latency_ms']} ms (p10 {row['p10_ms']}, p90 {row['p90_ms']}), events"
                  f" {row['events_ms']}, reference {row['reference_ms']}; {row['batch_calls']} calls a batch less"
                  f" {row['null_ms']} ms; null batches {full[0]:.3f}-{full[-1]:.3f} ms; clock [thaw, reply, freeze, calls,"
                  " before, after, to the read, probe] null"
                  f" {row['null_parts']} timed {row['timed_parts']}", flush=True)
            if row["verdict"] != "Measured":
                print(f"   {row['reason'][:600]}", flush=True)
    print("\n| task | figures (ms) | median | farthest | events (ms) | calls a batch |\n|---|---|---|---|---|---|")
    for task in args.tasks:
        figures = [r["latency_ms"] for r in rows if r["task"] == task and r["verdict"] == "Measured"]
        if not figures:
            print(f"| {task} | none measured | | | | |")
            continue
        mid = statistics.median(figures)
        far = max(figures, key=lambda f: abs(f - mid))
        events = [r["events_ms"] for r in rows if r["task"] == task and r["verdict"] == "Measured"]
        calls = sorted({r["batch_calls"] for r in rows if r["task"] == task and r["verdict"] == "Measured"})
        print(f"| {task} | {', '.join(f'{f:.4f}' for f in figures)} | {mid:.4f} | {(far - mid) / mid:+.1%} |"
              f" {', '.join(f'{v:.4f}' for v in events if v is not None)} | {'/'.join(map(str, calls))} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
