"""The cuda evaluator on a real GPU: every hack of the adversarial suite is rejected with the right
reason, the run goes on after crashes and hangs, timing agrees with itself, ncu profiles one call."""

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "plugins"))

from adversarial import CANDIDATES, CUBLAS_HIDDEN, DRIVER_STREAM_HIDDEN, EARLY_REPLY, SCALED_EVENTS, SECRETS, SURVIVOR
from conftest import run_hiera
from gpu_tasks import SEEDS

from hiera_core import records
from hiera_core.config import load_config
from hiera_core.engine import candidate_id, new_job, roofline_for
from hiera_core.plugins import make_plugin_manager
from hiera_core.session import Session

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.timeout(900),  # a test builds up to a dozen candidates and waits for the GPU while other tests hold it
]

KIND = {
    "incorrect": records.Incorrect,
    "static_rejected": records.StaticRejected,
    "crashed": records.Crashed,
    "timed_out": records.TimedOut,
    "measured": records.Measured,
}


@pytest.fixture(autouse=True)
def _tasks_importable_by_workers(monkeypatch):
    """Worker processes rebuild the workload from `gpu_tasks:TinyOps`, so they need its folder on the path."""
    here = str(Path(__file__).parent / "plugins")
    monkeypatch.setenv("PYTHONPATH", ":".join(filter(None, [here, __import__("os").environ.get("PYTHONPATH")])))


def _session(tmp_path, task, *overrides):
    config = load_config(
        tmp_path,
        environ={},
        cli={"workload": "tinyops", "task": task, "arch": "cuda"},
        overrides=[
            "executor.local.workers=8",
            "evaluator.cuda-run.timeout_s=90",
            "evaluator.cuda-run.call_timeout_s=20",
            *overrides,
        ],
    )
    return Session.create(config, make_plugin_manager(extra_plugins=["gpu_tasks"]))


def _evaluate_all(session, sources, tmp_path, remeasure=False):
    """Evaluate (name, space, source) triples the way a run does: compiles in parallel, one GPU user at a time."""
    contract = session.workload.contract(session.task, "cuda")
    toolchain = session.arch.toolchain()
    roofline = roofline_for(session)
    jobs = {}
    for name, space, source in sources:
        candidate = records.Candidate(
            id=candidate_id(source, contract, toolchain), source=source, space=space, round=1, origin=name
        )
        jobs[name] = new_job(
            session,
            candidate,
            contract=contract,
            toolchain=toolchain,
            roofline=roofline,
            workdir=tmp_path / f"{name}-{remeasure}",
            remeasure=remeasure,
        )
    results = {job.workdir: e.evaluation for job, e in session.executor.run(list(jobs.values()), session.pipeline)}
    return {name: results[job.workdir] for name, job in jobs.items()}


@pytest.mark.parametrize("task", ["scale-add", "matmul"])
def test_every_hack_is_rejected_with_its_reason_and_the_run_goes_on(tmp_path, task, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-hiera-adversarial-0123")  # what no candidate may see
    session = _session(tmp_path, task)
    suite = [(name, space, source) for name, (t, space, source, _, _) in CANDIDATES.items() if t == task]
    suite.append(("seed", "pure_cuda", SEEDS[task]))
    if task == "matmul":
        suite.append(("cublas-hidden", "pure_cuda", CUBLAS_HIDDEN))
        suite.append(("cublas-allowed", "cuda_libraries", CUBLAS_HIDDEN))
    else:
        suite += [
            ("secrets", "pure_cuda", SECRETS),
            ("survivor", "pure_cuda", SURVIVOR),
            ("driver-stream-hidden", "libraries_pytorch", DRIVER_STREAM_HIDDEN),
        ]
    outcomes = _evaluate_all(session, suite, tmp_path)
    report = {
        name: f"{type(e).__name__}: {getattr(e, 'reason', '') or getattr(e, 'log', '')[:300]}" for name, e in outcomes.items()
    }
    print(json.dumps(report, indent=1))
    for name, (t, _space, _source, kind, words) in CANDIDATES.items():
        if t == task:
            evaluation = outcomes[name]
            assert isinstance(evaluation, KIND[kind]), (name, report[name])
            assert words in (getattr(evaluation, "reason", "") or ""), (name, report[name])
    assert isinstance(outcomes["seed"], records.Measured), report["seed"]
    if task == "matmul":
        assert "cublasSgemm_v2" in outcomes["cublas-hidden"].reason
        assert isinstance(outcomes["cublas-allowed"], records.Measured), report["cublas-allowed"]
    else:
        assert isinstance(outcomes["secrets"], records.Measured), report["secrets"]  # it found no key
        assert isinstance(outcomes["survivor"], records.Measured), report["survivor"]
        assert isinstance(outcomes["driver-stream-hidden"], records.StaticRejected), report["driver-stream-hidden"]
        assert "cudaGetDriverEntryPointByVersion" in outcomes["driver-stream-hidden"].reason
        comms = [p / "comm" for p in Path("/proc").iterdir() if p.name.isdigit()]
        assert not [c for c in comms if c.exists() and c.read_text(errors="replace").strip() == "hiera-survivor"]
    # after the crash and the hang, a fresh process still gets a clean GPU
    again = _evaluate_all(session, [("seed", "pure_cuda", SEEDS[task])], tmp_path, remeasure=True)
    assert isinstance(again["seed"], records.Measured)


def test_a_lie_to_the_runner_s_timer_or_an_early_reply_gains_nothing(tmp_path):
    """The figure is the judge's clock around batches of calls, less null batches: a candidate that halves the runner's
    CUDA events is measured like the honest kernel (or rejected: its timer contradicts the judge's clock); one that
    makes the runner reply before its kernels are done is caught by the judge's idle probe or its checks."""
    session = _session(tmp_path, "scale-add", "evaluator.cuda-profile.enabled=false")
    outcomes = _evaluate_all(
        session,
        [
            ("seed", "pure_cuda", SEEDS["scale-add"]),
            ("scaled-events", "pure_cuda", SCALED_EVENTS),
            ("early-reply", "pure_cuda", EARLY_REPLY),
            ("same-work-honest", "pure_cuda", EARLY_REPLY.replace("    in_python(", "    (void)(")),
        ],
        tmp_path,
    )
    print(
        {
            name: f"{type(e).__name__}: {getattr(e, 'latency_ms', '')} {getattr(e, 'timing_bound', '') or getattr(e, 'reason', '') or getattr(e, 'log', '')[:300]}"
            for name, e in outcomes.items()
        }
    )
    assert isinstance(outcomes["seed"], records.Measured) and isinstance(outcomes["same-work-honest"], records.Measured)
    for name, honest in (("scaled-events", outcomes["seed"]), ("early-reply", outcomes["same-work-honest"])):
        evaluation = outcomes[name]
        if isinstance(evaluation, records.Measured):
            # no faster than the honest kernel's own fast batches (a launch-bound call varies with the builds beside it)
            assert evaluation.latency_ms >= 0.9 * honest.latency_p10_ms, (name, evaluation)
        else:
            assert isinstance(evaluation, (records.Rejected, records.Incorrect, records.StaticRejected, records.Crashed)), (
                name,
                evaluation,
            )


def test_timing_agrees_with_itself_across_fresh_processes(tmp_path):
    session = _session(tmp_path, "matmul-2048", "evaluator.cuda-profile.enabled=false")
    first = _evaluate_all(session, [("seed", "pure_cuda", SEEDS["matmul"])], tmp_path)["seed"]
    second = _evaluate_all(session, [("seed", "pure_cuda", SEEDS["matmul"])], tmp_path, remeasure=True)["seed"]
    assert isinstance(first, records.Measured) and isinstance(second, records.Measured)
    print(f"fresh processes: {first.latency_ms:.4f} ms and {second.latency_ms:.4f} ms")
    said = [line for line in (tmp_path / "seed-False" / "judge.log").read_text().splitlines() if line.startswith("timing cores")]
    if len(os.sched_getaffinity(0)) >= 8:  # the H200's machine: the judge and its runner on cores of their own
        assert said and "not moved" not in said[0], said
    assert abs(first.latency_ms - second.latency_ms) / min(first.latency_ms, second.latency_ms) <= 0.03


FORGED_TABLE = r"""
    printf("\"ID\",\"Kernel Name\",\"dram__bytes_read.sum\"\n\"\",\"\",\"byte\"\n");
    printf("\"0\",\"forged\",\"123456789012345\"\n\"1\",\"forged\",\"123456789012345\"\n");
    fflush(stdout);
    return c;
"""


def test_one_call_is_profiled_with_nsight_compute(tmp_path):
    """The profile is ncu's: a candidate that prints a table of ncu's shape during its call (two kernels, absurd
    bytes) is profiled as the kernel it runs."""
    session = _session(tmp_path, "matmul", "evaluator.cuda-profile.when=every")  # by default: the parents, on demand
    forger = SEEDS["matmul"].replace("#include <torch/extension.h>", "#include <torch/extension.h>\n#include <cstdio>")
    forger = forger.replace("    return c;\n", FORGED_TABLE, 1)
    assert forger.count("forged") == 2
    results = _evaluate_all(session, [("seed", "pure_cuda", SEEDS["matmul"]), ("forger", "pure_cuda", forger)], tmp_path)
    forged = results["forger"]
    assert isinstance(forged, records.Measured) and forged.profile.source == "ncu", forged
    assert forged.profile.metrics["kernel_count"] == 1.0
    assert forged.profile.metrics["dram__bytes_read.sum"] < 1e9, forged.profile.metrics
    measured = results["seed"]
    assert isinstance(measured, records.Measured)
    profile = measured.profile
    print(
        json.dumps(
            {
                "source": profile.source,
                "unavailable": profile.unavailable,
                "signals": profile.signals,
                "findings": profile.findings,
            },
            indent=1,
        )
    )
    assert profile.source == "ncu" and profile.unavailable is None
    for signal in ("branch_uniformity", "achieved_occupancy", "grid_fill", "sector_efficiency", "pipe_utilization"):
        assert 0.0 <= profile.signals[signal] <= 1.0
    assert (tmp_path / "seed-False" / "ncu.log").is_file()  # the profiler's log stays in the record
    assert not (tmp_path / "seed-False" / "profile").exists()  # its scratch (~2 MB of ncu's own files) does not


def test_hiera_eval_prints_the_record_of_a_hand_written_kernel(tmp_path):
    source = tmp_path / "cuda_source.cu"
    source.write_text(SEEDS["scale-add"])
    done = run_hiera(
        "eval",
        str(source),
        "--workload",
        "tinyops",
        "--task",
        "scale-add",
        "--arch",
        "cuda",
        "--space",
        "pure_cuda",
        "--plugin",
        "gpu_tasks",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "correct;" in done.stdout and '"kind": "measured"' in done.stdout
