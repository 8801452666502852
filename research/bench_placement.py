"""Does where a kernel's buffers lie move its figure? (a benchmark, not a test)

    python3 research/bench_placement.py [--source FILE.cu] [--workload stencil2d] [--task NAME]
                                        [--placements 6] [--rounds 30] [--set KEY=VALUE ...] [--json OUT.json]

The question behind it (issue 18): one kernel measured 0.555-0.592 ms in eight fresh processes on the H200
(2026-12-01), ten times the median's standard error within one process, with the clocks constant. Within a
process every timed call uses the same pair of buffers (the judge's input buffer; the output the candidate's own
allocation reuses), so a per-process effect of *where* they lie would show exactly so.

This builds the source with hiera's own build (`api.evaluate(device=False)`; default: the stencil2d template's ring
kernel, the H200 runs' winner), loads it into this process (a known kernel, not a candidate: no judge, no sandbox),
and times it over `--placements` independent placements: each its own input allocation (after a spacer of a
different size, so that their addresses differ) and its own output block (each placement's last output is kept
alive until its next call, so the caching allocator hands every placement a block of its own). Each round times
every placement once, in a rotated order, L2 flushed before each call, CUDA events around it, inputs drawn fresh
outside the timed interval as the judge does.

It prints each placement's median, p10 and p90 and the spread of the placements' medians against the median's
standard error within one. Placements that differ by several percent while interleaved: the spread between fresh
processes is where the buffers land, and the judge should average over placements; agreeing within ~1%: it is not.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from hiera_core import api
from hiera_core.protocols import StagePassed
from hiera_plugins.cuda.runner import FLUSH_BYTES, load_candidate


def built_library(source_path: Path | None, config, session, out: Path, who: str) -> str | None:
    """The library hiera's own build makes of `source_path` (default: the stencil2d template's ring kernel, the H200
    runs' winner), built into `out`; None, said on stderr, when it does not build."""
    if source_path is not None:
        source = source_path.read_text()
    else:
        template = session.workload.templates(session.task, "cuda")[0]
        params = {**template.defaults(), "tiling": "ring", "boundary": "split", "vector_loads": True}
        source = template.render(params)
        print(f"source: {template.describe(params)}")
    built = api.evaluate(source, config, workdir=out, device=False).evaluation
    if not isinstance(built, StagePassed):
        print(f"{who}: the source did not build: {built}", file=sys.stderr)
        return None
    return str(built.job.library)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, help="a cuda_source.cu (default: the stencil2d ring kernel)")
    parser.add_argument("--workload", default="stencil2d")
    parser.add_argument("--task")
    parser.add_argument("--placements", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", type=Path, default=Path("bench-placement"), help="where the build goes")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_placement: needs a CUDA device", file=sys.stderr)
        return 1

    config = api.settings(workload=args.workload, task=args.task, arch="cuda", sets=args.sets)
    session = api.session(config)
    library = built_library(args.source, config, session, args.out, "bench_placement")
    if library is None:
        return 1
    harness = session.workload.harness(session.task, "cuda")
    fn = getattr(load_candidate(library), harness.entry)
    case = harness.timing_case()
    seed = harness.seeds(False)[0]

    spacers, placements = [], []
    for k in range(args.placements):  # each placement after a spacer of its own size: different addresses
        spacers.append(torch.empty((k + 1) * 3 * 2**20 + k * 4096, dtype=torch.uint8, device="cuda"))
        placements.append([t.clone() for t in harness.make_inputs(case, seed, harness.distributions[0])])
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    outputs: list[torch.Tensor | None] = [fn(*inputs) for inputs in placements]  # each placement's output block
    torch.cuda.synchronize()
    addresses = [(inputs[0].data_ptr(), out.data_ptr()) for inputs, out in zip(placements, outputs)]

    times: list[list[float]] = [[] for _ in placements]
    for r in range(args.rounds):
        for k in [(r + i) % len(placements) for i in range(len(placements))]:
            fresh = harness.make_inputs(case, seed + 1 + r * len(placements) + k, harness.distributions[0])
            for slot, value in zip(placements[k], fresh):
                slot.copy_(value)
            del fresh
            outputs[k] = None  # its block goes back to the allocator, which hands it to this call again
            flush.zero_()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            outputs[k] = fn(*placements[k])
            torch.cuda.synchronize()
            end.record()
            end.synchronize()
            times[k].append(start.elapsed_time(end))

    rows = []
    print(f"{session.task.name} on {torch.cuda.get_device_name()}: {args.placements} placements x {args.rounds} calls, interleaved")
    print(f"{'placement':>9} {'input at':>14} {'output at':>14} {'median ms':>10} {'p10':>8} {'p90':>8}")
    for k, series in enumerate(times):
        ordered = sorted(series)
        p10, p90 = ordered[len(ordered) // 10], ordered[(9 * len(ordered)) // 10]
        rows.append({"placement": k, "input_ptr": addresses[k][0], "output_ptr": addresses[k][1],
                     "median_ms": statistics.median(series), "p10_ms": p10, "p90_ms": p90, "times_ms": series})
        print(f"{k:>9} {addresses[k][0]:>#14x} {addresses[k][1]:>#14x} {rows[-1]['median_ms']:>10.4f} {p10:>8.4f} {p90:>8.4f}")
    medians = [row["median_ms"] for row in rows]
    centre = statistics.median(medians)
    stderr = statistics.median([1.2533 * (r["p90_ms"] - r["p10_ms"]) / 2.5631 / len(r["times_ms"]) ** 0.5 for r in rows])
    farthest = max(medians, key=lambda m: abs(m - centre))
    print(f"placements' medians {min(medians):.4f}-{max(medians):.4f} ms, median {centre:.4f} ms, farthest"
          f" {100 * (farthest - centre) / centre:+.1f}%; a median's standard error within one placement ~{stderr:.4f} ms"
          f" ({100 * stderr / centre:.1f}%)")
    if args.json:
        args.json.write_text(json.dumps({"task": session.task.name, "device": torch.cuda.get_device_name(),
                                         "rounds": args.rounds, "placements": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
