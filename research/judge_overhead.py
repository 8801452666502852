"""Where a run's device time went, judge by judge: for each search judge of one or more run folders, how long it held
the device (`timeline.device_held` in trajectory.jsonl), the phases its judge.log names, and the rest (the hold
less the phases: the `go` exchange, the runner's end and the judge's own, what hiera waits for before it gives the
device back); and where each round's wall time went.

    python3 research/judge_overhead.py RUN_DIR [RUN_DIR ...]

Prints one block per run: medians (range) over the search's judges, then one line per round (and the final
re-measurement): its wall time from its candidates' generation to its end, when its first candidate's judge took the
device, and how long the device was held by its jobs."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

PHASES = ("buffers", "calibration", "compiled_baseline", "load", "correctness", "timing", "runtime_check")


def trajectory(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "trajectory.jsonl").read_text().splitlines() if line.strip()]


def judged(run: Path, events: list[dict]) -> tuple[list[tuple[float, dict[str, float]]], dict[str, float]]:
    """([(seconds held, phases)] of the search's judges, the run's totals)."""
    start = events[0]["at"]
    totals = {"wall_s": events[-1]["at"] - start, "held_s": 0.0}
    judges = []
    for event in events:
        held = sum(b - a for a, b in (event.get("timeline") or {}).get("device_held", []))
        totals["held_s"] += held
        if event["kind"] != "candidate_evaluated":
            continue
        log = run / "candidates" / event["candidate"]["id"] / "judge.log"
        phases = [json.loads(line[len("phases: ") :]) for line in log.read_text().splitlines() if line.startswith("phases: ")]
        if phases:
            judges.append((held, phases[-1]))
    return judges, totals


def rounds(events: list[dict]) -> list[tuple[str, float, float, float]]:
    """[(round, wall s, s to the first device hold, device held s)]: from each round's `candidates_generated` to its
    `round_finished`, and from the last round's end to the run's end for the re-measurement."""
    spans, start = [], None
    for event in events:
        if event["kind"] == "candidates_generated":
            start = (f"round {event['round']}", event["at"])
        elif event["kind"] == "round_finished" and start:
            spans.append((*start, event["at"], "candidate_evaluated"))
            start = None
    if spans and events[-1]["kind"] == "run_finished":
        spans.append(("re-measure", spans[-1][2], events[-1]["at"], "remeasured"))
    table = []
    for name, begin, end, kind in spans:
        holds = [
            span
            for event in events
            if event["kind"] == kind and begin <= event["at"] <= end
            for span in (event.get("timeline") or {}).get("device_held", [])
        ]
        first = min((a for a, _ in holds), default=end)
        table.append((name, end - begin, first - begin, sum(b - a for a, b in holds)))
    return table


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    for name in sys.argv[1:]:
        events = trajectory(Path(name))
        judges, totals = judged(Path(name), events)
        print(f"{name}: {len(judges)} search judges; the run's device held {totals['held_s']:.1f} s of {totals['wall_s']:.1f} s")
        print(f"  held        {spread([h for h, _ in judges])}")
        for phase in PHASES:
            values = [p[phase] for _, p in judges if phase in p]
            if values:
                print(f"  {phase:<11} {spread(values)}")
        print(f"  the rest    {spread([h - sum(p.values()) for h, p in judges])}")
        print("  round        wall s  first hold at s  held s")
        for name, wall, first, held in rounds(events):
            print(f"  {name:<12} {wall:6.1f} {first:16.1f} {held:7.1f}")


if __name__ == "__main__":
    main()
