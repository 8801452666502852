"""The amortised per-step time of a long stencil2d run on the GPU, with and without temporal blocking.

The search's best kernel (the template's `tiling=ring boundary=split vector_loads=True`) is built twice through
the cuda evaluator's build (its cache and flags): one step per launch, and two steps per launch
(`fuse_steps=True`). Each is called once for S steps (default 10240) on the n x n grid (default 10240) and
timed with CUDA events; the per-step time is that over S. The floor beside it is one step's memory traffic: a
copy of the grid (one read, one write), measured here. Correctness: the two kernels' S-step results agree
(relative to the largest value); each matches the harness's CuPy FP64 reference at n = 1002 for S steps, and
at n for `--check-steps` steps (the reference takes ~20 ms a step at n = 10240). Prints one line per kernel,
with the SM clock nvidia-smi sampled during its timed call (a long FP64 run may lower it), and writes them to
--json.

    source .whl/setup-device.sh && python3 research/time_stencil_steps.py [--n 10240] [--steps 10240] [--radius 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from hiera_core.config import load_config
from hiera_core.engine import evaluate_source
from hiera_core.plugins import make_plugin_manager
from hiera_core.protocols import StagePassed
from hiera_core.session import Session
from hiera_plugins.cuda.judge import timed
from hiera_plugins.cuda.runner import load_candidate
from hiera_workloads.stencil2d.cuda import CudaStencilHarness

BEST = {"tiling": "ring", "boundary": "split", "vector_loads": True}
"""The search's best kernel at radius 3 (docs/stencil2d-h200.md); the template's defaults for the rest."""


def built(session: Session, params: dict, workdir: Path):
    """(origin, extension module) of the template's kernel with `params`, through `hiera eval --compile-only`'s
    path: the space's static check, then the evaluator's build (its cache and flags)."""
    template = session.workload.templates(session.task, "cuda")[0]
    params = {**template.defaults(), **params}
    origin = template.describe(params)
    _, result = evaluate_source(session, template.render(params), space="pure_cuda", workdir=workdir, device=False)
    if not isinstance(result, StagePassed):
        raise SystemExit(f"{origin}: {type(result).__name__}: {getattr(result, 'reason', '') or result.log[-3000:]}")
    return origin, load_candidate(str(result.job.library))


def with_clocks(call):
    """(call(), the GPU's SM clock in MHz and power in W as min / median / max of nvidia-smi's samples every
    100 ms while it ran), or the reason there are none in place of the figures."""
    try:
        uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
        smi = subprocess.Popen(["nvidia-smi", "-i", uuid if uuid.startswith("GPU-") else f"GPU-{uuid}", "-lms", "100",
                                "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except (OSError, RuntimeError, AssertionError) as error:
        return call(), {"error": f"no clock samples: {error}"}
    try:
        result = call()
    finally:
        smi.terminate()
        out = smi.communicate(timeout=10)[0]
    try:
        samples = [[float(v) for v in line.split(",")] for line in out.splitlines() if line.strip()]
        return result, {what: [min(values), statistics.median(values), max(values)]
                        for what, values in zip(("sm_mhz", "power_w"), zip(*samples))} | {"samples": len(samples)}
    except ValueError:
        return result, {"error": f"no clock samples: {out.strip()[-300:]}"}


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-300))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10240)
    parser.add_argument("--steps", type=int, default=10240)
    parser.add_argument("--radius", type=int, default=3)
    parser.add_argument("--check-steps", type=int, default=16)
    parser.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."), "stencil-steps.json"))
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="stencil-steps-"))
    overrides = [f"workload.stencil2d.n={args.n}", f"workload.stencil2d.radius={args.radius}",
                 f"workload.stencil2d.steps={args.steps}"]
    config = load_config(scratch, environ={}, cli={"workload": "stencil2d", "arch": "cuda"}, overrides=overrides)
    session = Session.create(config, make_plugin_manager(), device=torch.cuda.is_available())  # builds without one
    variants = {"one step per launch": BEST, "two steps per launch": {**BEST, "fuse_steps": True}}
    with ThreadPoolExecutor(len(variants)) as pool:  # the two builds side by side
        futures = {name: pool.submit(built, session, params, scratch / str(k)) for k, (name, params) in enumerate(variants.items())}
        kernels = {name: future.result() for name, future in futures.items()}
    if not torch.cuda.is_available():
        raise SystemExit("built both kernels; timing them needs a CUDA device")
    def harness(n: int, steps: int) -> CudaStencilHarness:
        return CudaStencilHarness(n=n, radius=args.radius, steps=steps)

    def inputs(n: int) -> list[torch.Tensor]:
        return harness(n, 1).make_inputs({"n": n}, seed=1, distribution="uniform")

    field, w = inputs(args.n)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")  # each timed call starts from a cold L2
    copy = torch.empty_like(field)
    copy.copy_(field)
    floor_ms = min(timed(flush, lambda: copy.copy_(field))[0] for _ in range(20))
    rows, results = [], {}
    for name, (origin, module) in kernels.items():
        module.forward(field, w, 2)  # warm up
        (ms, results[name]), clocks = with_clocks(lambda: timed(flush, lambda: module.forward(field, w, args.steps)))
        small = inputs(1002)
        errors = {
            f"n=1002, {args.steps} steps": relative_error(module.forward(*small, args.steps),
                                                          harness(1002, args.steps).reference({"n": 1002}, small)),
            f"n={args.n}, {args.check_steps} steps": relative_error(
                module.forward(field, w, args.check_steps),
                harness(args.n, args.check_steps).reference({"n": args.n}, [field, w])),
        }
        rows.append({"kernel": name, "origin": origin, "n": args.n, "radius": args.radius, "steps": args.steps,
                     "ms": ms, "ms_per_step": ms / args.steps, "copy_floor_ms": floor_ms,
                     "floor_over_per_step": floor_ms / (ms / args.steps), "relative_errors": errors, "clocks": clocks})
        print(json.dumps(rows[-1]), flush=True)
    single, fused = results.values()
    agreement = relative_error(fused, single)
    print(f"{torch.cuda.get_device_name()}, n={args.n}, radius {args.radius}, {args.steps} steps; one step's copy "
          f"floor {floor_ms:.4f} ms; the two kernels' results agree to {agreement:.2e} (relative)")
    for row in rows:
        verdict = "beats" if row["ms_per_step"] < floor_ms else "does not beat"
        print(f"  {row['kernel']}: {row['ms']:.1f} ms, {row['ms_per_step']:.4f} ms per step "
              f"({100 * row['floor_over_per_step']:.0f}% of the floor's speed; {verdict} the one-step floor); "
              + (f"SM clock {'/'.join(f'{v:.0f}' for v in row['clocks']['sm_mhz'])} MHz (min/median/max)"
                 if "sm_mhz" in row["clocks"] else row["clocks"]["error"]))
    Path(args.json).write_text(json.dumps({"rows": rows, "agreement": agreement,
                                           "gpu": torch.cuda.get_device_name()}, indent=1))


if __name__ == "__main__":
    main()
