"""Do a run's figures come back? (a benchmark, not a test)

    python3 research/bench_repeatability.py RUN_DIR [--times 10] [--candidate ID] [--json OUT.json]

Takes the winner of a finished run (`RunFinished`; or any candidate of the run, `--candidate`), evaluates its source again `--times` times through the run's own
pipeline and settings (each evaluation a fresh judge and runner process on fresh inputs, as `hiera eval` does), one
after the other, and prints each figure with its spread and stage times, then: the median of the figures, how far
the farthest lies from it (the protocol's spread between fresh processes), and how far the run's headline figure
(its final re-measurement; the search's figure where it had none) lies from that median. The issue's bar: every
figure and the headline within ±3% of the median.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

from hiera_core import api, records
from hiera_core.engine import new_job, roofline_for
from hiera_core.store import RunStore


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--times", type=int, default=10)
    parser.add_argument("--candidate", help="a candidate id of the run (default: its winner)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    store = RunStore.open(args.run_dir)
    finished = next((e for e in store.events if isinstance(e, records.RunFinished)), None)
    chosen = args.candidate or (finished.best_candidate_id if finished is not None else None)
    if chosen is None or chosen not in store.evaluated() or not isinstance(store.evaluated()[chosen].evaluation, records.Measured):
        print(f"{args.run_dir}: no measured candidate {chosen or '(the run has not finished with a winner)'}", file=sys.stderr)
        return 1
    evaluated = store.evaluated()[chosen]
    candidate = evaluated.candidate
    if chosen == finished.best_candidate_id and isinstance(finished.remeasured, records.Measured) and finished.finalists:
        headline, where = finished.remeasured.latency_ms, "the run's final re-measurement"
    else:
        headline, where = evaluated.evaluation.latency_ms, "the search"

    config = api.settings(config=store.manifest.config)
    session = api.session(config)
    contract = session.workload.contract(session.task, session.arch_kind)
    toolchain = session.arch.toolchain()
    roofline = roofline_for(session)
    scratch = Path(args.run_dir) / "repeatability" / time.strftime("%Y%m%d-%H%M%S")
    print(f"{candidate.id} of {store.manifest.run_id} ({store.manifest.task.name} on {session.arch_name}):"
          f" {headline:.4f} ms in {where}; {args.times} fresh evaluations")
    rows = []

    def record() -> dict:
        """What is measured so far, also written to `--json` after every evaluation: a run cut short keeps it."""
        figures = [r["latency_ms"] for r in rows if "latency_ms" in r]
        median = statistics.median(figures) if figures else None
        result = {
            "run": str(args.run_dir), "candidate": candidate.id, "task": store.manifest.task.name, "arch": session.arch_name,
            "hardware": store.manifest.hardware, "host": platform.node(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "headline_ms": headline, "headline_from": where, "evaluations": rows, "median_ms": median,
            "max_deviation_fraction": max(abs(f - median) for f in figures) / median if figures else None,
            "headline_deviation_fraction": (headline - median) / median if figures else None,
        }
        if args.json:
            args.json.write_text(json.dumps(result, indent=2))
        return result

    for i in range(args.times):
        job = new_job(session, candidate, contract=contract, toolchain=toolchain, roofline=roofline, workdir=scratch / str(i))
        outcome = session.pipeline.evaluate(job)
        ev = outcome.evaluation
        stages = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in outcome.stage_s.items())
        held = sum(b - a for a, b in outcome.timeline.device_held)
        if not isinstance(ev, records.Measured):
            print(f"  {i}: {type(ev).__name__}: {getattr(ev, 'reason', '')}  [{stages}]")
            rows.append({"outcome": type(ev).__name__})
            record()
            continue
        print(f"  {i}: {ev.latency_ms:.4f} ms (p10 {ev.latency_p10_ms:.4f}, p90 {ev.latency_p90_ms:.4f}, {ev.repeats} calls)"
              f"{'  disturbed: ' + ev.disturbed if ev.disturbed else ''}  [{stages}; device held {held:.2f} s]"
              + (f"\n     {', '.join(f'{k} {v:g}' for k, v in sorted(ev.conditions.items()))}" if ev.conditions else ""))
        rows.append({"latency_ms": ev.latency_ms, "p10_ms": ev.latency_p10_ms, "p90_ms": ev.latency_p90_ms, "repeats": ev.repeats,
                     "disturbed": ev.disturbed, "conditions": ev.conditions, "stage_s": outcome.stage_s, "device_held_s": held, "wall_s": outcome.wall_s})
        record()
    result = record()
    if result["median_ms"] is None:
        print("no evaluation was measured")
        return 1
    figures = [r["latency_ms"] for r in rows if "latency_ms" in r]
    spread, off = result["max_deviation_fraction"], result["headline_deviation_fraction"]
    print(f"median {result['median_ms']:.4f} ms; farthest {spread:+.1%} of it ({min(figures):.4f}–{max(figures):.4f} ms);"
          f" the headline {headline:.4f} ms is {off:+.1%} from it;"
          f" {'within' if spread <= 0.03 and abs(off) <= 0.03 else 'NOT within'} ±3%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
