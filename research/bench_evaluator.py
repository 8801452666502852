"""Benchmark of the cuda evaluator itself (not a test): how much a batch of candidates costs beyond compiling,
and how busy the GPU stays while compiles run in parallel.

    python3 research/bench_evaluator.py [--candidates 8] [--workers 8] [--json OUT.json]

It evaluates distinct variants of an FP32 matmul (2048^3) through the real stages: `cuda-compile` in a
thread pool, then `cuda-run` and `cuda-profile`, one candidate on the GPU at a time. It prints per-stage
times, the per-candidate overhead of the GPU stages beyond the timed GPU work, the share of the batch's
wall time during which a candidate held the GPU, and the time of a build-cache hit.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "plugins"))
os.environ["PYTHONPATH"] = ":".join(filter(None, [str(ROOT / "tests" / "plugins"), os.environ.get("PYTHONPATH")]))

from gpu_tasks import SEEDS  # noqa: E402

from hiera_core import StagePassed  # noqa: E402
from hiera_core.config import load_config  # noqa: E402
from hiera_core.engine import candidate_id, new_job, roofline_for  # noqa: E402
from hiera_core.plugins import make_plugin_manager  # noqa: E402
from hiera_core.records import Candidate, Measured  # noqa: E402
from hiera_core.session import Session  # noqa: E402


def variant(i: int) -> str:
    """Distinct, valid sources: the seed with a different block shape and a marker."""
    block = [(16, 16), (32, 8), (8, 32), (32, 16), (16, 32), (8, 16), (16, 8), (32, 32)][i % 8]
    source = SEEDS["matmul"].replace("dim3 block(16, 16), grid((n + 15) / 16, (m + 15) / 16);",
                                     f"dim3 block({block[0]}, {block[1]}), grid((n + {block[0] - 1}) / {block[0]}, (m + {block[1] - 1}) / {block[1]});")
    return source + f"\n// variant {i}\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"hiera-bench-{os.getpid()}"
    config = load_config(workdir, environ={}, cli={"workload": "tinyops", "task": "matmul-2048", "arch": "cuda"},
                         overrides=[f"arch.cuda.cache_dir='{workdir / 'cache'}'"])
    session = Session.create(config, make_plugin_manager(extra_plugins=["gpu_tasks"]))
    stages = {e.name: e for e in session.evaluators}
    contract = session.workload.contract(session.task, "cuda")
    toolchain = session.arch.toolchain()
    roofline = roofline_for(session)

    def job_for(source: str, tag: str):
        candidate = Candidate(id=candidate_id(source, contract, toolchain), source=source, space="pure_cuda", round=1)
        return new_job(session, candidate, contract=contract, toolchain=toolchain, roofline=roofline, workdir=workdir / tag)

    gpu = threading.Lock()
    rows = []
    batch_start = time.perf_counter()

    def evaluate(i: int) -> dict:
        job = job_for(variant(i), f"c{i}")
        t0 = time.perf_counter()
        for name in ("cuda-static", "cuda-compile"):
            result = stages[name].evaluate(job)
            assert isinstance(result, StagePassed), result
            job = result.job
        compiled = time.perf_counter()
        with gpu:
            held = time.perf_counter()
            measured = stages["cuda-run"].evaluate(job)
            ran = time.perf_counter()
            profiled = stages["cuda-profile"].evaluate(attrs.evolve(job, measured=measured))
            released = time.perf_counter()
        assert isinstance(measured, Measured), measured
        phases = {}
        for line in (job.workdir / "judge.log").read_text().splitlines():
            if line.startswith("phases: "):
                phases.update(json.loads(line[len("phases: "):]))
        timed_gpu_s = (measured.latency_ms * measured.repeats + measured.reference_latency_ms * 5) / 1e3
        return {
            "candidate": i, "compile_s": compiled - t0, "wait_s": held - compiled, "run_s": ran - held,
            "profile_s": released - ran, "held": (held - batch_start, released - batch_start),
            "latency_ms": measured.latency_ms, "repeats": measured.repeats, "timed_gpu_s": timed_gpu_s,
            "run_overhead_s": (ran - held) - timed_gpu_s, "profile_source": profiled.profile.source, "phases": phases,
        }

    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        rows = list(pool.map(evaluate, range(args.candidates)))
    wall = time.perf_counter() - batch_start
    first_hold = min(r["held"][0] for r in rows)
    busy = sum(r["held"][1] - r["held"][0] for r in rows)
    started = time.perf_counter()
    hit = stages["cuda-compile"].evaluate(job_for(variant(0), "hit"))
    cache_hit_s = time.perf_counter() - started
    assert isinstance(hit, StagePassed) and hit.job.built is not None and hit.job.built.cache_hit

    summary = {
        "gpu": session.arch.hardware()["model"], "date": time.strftime("%Y-%m-%d"), "candidates": args.candidates,
        "workers": args.workers, "batch_wall_s": wall,
        "compile_s_median": statistics.median(r["compile_s"] for r in rows),
        "run_stage_s_median": statistics.median(r["run_s"] for r in rows),
        "profile_stage_s_median": statistics.median(r["profile_s"] for r in rows),
        "run_overhead_beyond_timed_gpu_work_s_median": statistics.median(r["run_overhead_s"] for r in rows),
        "gpu_held_fraction_once_underway": busy / (wall - first_hold),
        "cache_hit_s": cache_hit_s,
    }
    print(f"{'cand':>4} {'compile s':>9} {'wait s':>7} {'run s':>6} {'ncu s':>6} {'latency ms':>10} {'overhead s':>10}")
    for r in rows:
        print(f"{r['candidate']:>4} {r['compile_s']:9.1f} {r['wait_s']:7.1f} {r['run_s']:6.2f} {r['profile_s']:6.2f}"
              f" {r['latency_ms']:10.3f} {r['run_overhead_s']:10.2f}")
    for phase in rows[0]["phases"]:
        summary[f"judge_phase_{phase}_s_median"] = statistics.median(r["phases"].get(phase, 0.0) for r in rows)
    for key, value in summary.items():
        print(f"{key}: {value:.3f}" if isinstance(value, float) else f"{key}: {value}")
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
