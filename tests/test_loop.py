"""The whole HIERA loop on the host architecture: run, report, resume, and hostile candidates."""

import json
import os
import signal
import subprocess
import time

import pytest
from conftest import HIERA, SMALL, run_hiera

from hiera_core import records
from hiera_core.store import RunStore


def _evaluated(run_dir):
    return [e for e in RunStore.open(run_dir).events if isinstance(e, records.CandidateEvaluated)]


@pytest.mark.slow
def test_the_main_job_finds_a_faster_valid_kernel_and_reports_it(hiera, tmp_path):
    done = hiera("--workload", "stencil2d", "--arch", "host", "--rounds", "3", "--population", "4", "--run-dir", "run")
    assert done.returncode == 0, done.stderr
    run = tmp_path / "run"
    evaluated = _evaluated(run)
    assert len(evaluated) == 13
    assert evaluated[0].candidate.round == 0
    assert len({e.candidate.id for e in evaluated}) == 13
    # every candidate was checked against the FP64 reference: measured (correct) or rejected with a reason
    assert all(isinstance(e.evaluation, (records.Measured, records.Incorrect)) for e in evaluated)
    seed = evaluated[0].evaluation
    # the winner is the finalist fastest when re-measured, not necessarily the search's fastest: the report compares its
    # figure in the search with the initial candidate's
    [finished] = [e for e in RunStore.open(run).events if isinstance(e, records.RunFinished)]
    best = next(e.evaluation for e in evaluated if e.candidate.id == finished.best_candidate_id)
    assert seed.latency_ms / best.latency_ms > 2.0
    report = (run / "report.md").read_text()
    assert f"{seed.latency_ms / best.latency_ms:.2f}×** faster than the initial candidate" in report
    assert "| 18 | 13 |" in report and "fast_0" in report
    assert "correctness judged against NumPy" in report  # the report names the reference engine
    assert (run / "plots" / "best_latency.png").stat().st_size > 10_000
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["hardware"]["cores"] >= 1 and manifest["config"]["run"]["arch"] == "host"
    plans = [e.plan for e in RunStore.open(run).events if isinstance(e, records.PlanMade)]
    assert [p.round for p in plans] == [1, 2, 3]
    assert "best" in done.stdout and "report:" in done.stdout


@pytest.mark.slow
def test_a_killed_run_resumes_without_evaluating_anything_twice(tmp_path):
    env = {**os.environ}
    args = [
        str(HIERA),
        "--workload",
        "stencil2d",
        "--arch",
        "host",
        "--rounds",
        "3",
        "--population",
        "3",
        "--run-dir",
        "run",
        *SMALL,
    ]
    process = subprocess.Popen(
        args, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    trajectory = tmp_path / "run" / "trajectory.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline:
        if trajectory.exists() and trajectory.read_text().count('"kind": "candidate_evaluated"') >= 4:
            break
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    before = _evaluated(tmp_path / "run")
    assert 4 <= len(before) < 10

    manifest = tmp_path / "run" / "manifest.json"  # measured on another machine's CPU: its figures would not compare
    recorded = manifest.read_text()
    manifest.write_text(recorded.replace(json.loads(recorded)["hardware"]["model"], "Another CPU 9000"))
    elsewhere = run_hiera("resume", "run", cwd=tmp_path)
    assert elsewhere.returncode == 2 and "was measured on Another CPU 9000" in elsewhere.stderr
    assert len(elsewhere.stderr.strip().splitlines()) == 1 and len(_evaluated(tmp_path / "run")) == len(before)
    manifest.write_text(recorded)

    done = run_hiera("resume", "run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    after = _evaluated(tmp_path / "run")
    assert len(after) == 10
    assert len({e.candidate.id for e in after}) == 10
    assert [e.candidate.id for e in after[: len(before)]] == [e.candidate.id for e in before]
    assert (tmp_path / "run" / "report.md").exists()

    again = run_hiera("resume", "run", cwd=tmp_path)
    assert again.returncode == 0 and len(_evaluated(tmp_path / "run")) == 10


@pytest.mark.slow
def test_hostile_candidates_are_recorded_with_their_reason_and_the_run_finishes(hiera, tmp_path):
    done = hiera(
        "--workload",
        "stencil2d",
        "--arch",
        "host",
        "--rounds",
        "1",
        "--population",
        "6",
        "--backend",
        "scripted",
        "--plugin",
        "scripted_backend",
        "--run-dir",
        "run",
        *SMALL,
        "--set",
        "evaluator.host-run.timeout_s=4",
    )
    assert done.returncode == 0, done.stderr
    outcomes = {e.candidate.origin: e.evaluation for e in _evaluated(tmp_path / "run") if e.candidate.round == 1}
    assert isinstance(outcomes["segfault"], records.Crashed) and "SIGSEGV" in outcomes["segfault"].reason
    assert isinstance(outcomes["hang"], records.TimedOut) and outcomes["hang"].limit_s == 4
    assert isinstance(outcomes["wrong"], records.Incorrect) and "max abs error" in outcomes["wrong"].reason
    assert isinstance(outcomes["syntax"], records.CompileFailed) and "error" in outcomes["syntax"].log
    assert isinstance(outcomes["openmp"], records.StaticRejected) and "OpenMP" in outcomes["openmp"].reason
    assert (
        isinstance(outcomes["writes-input"], records.Incorrect)
        and "input 'field' was modified" in outcomes["writes-input"].reason
    )
    assert "Crashed" in (tmp_path / "run" / "report.md").read_text()


@pytest.mark.slow
def test_fixed_space_and_no_planning_ablations(hiera, tmp_path):
    done = hiera(
        "--workload",
        "stencil2d",
        "--arch",
        "host",
        "--rounds",
        "2",
        "--population",
        "3",
        "--space",
        "pure_cuda",
        "--run-dir",
        "fixed",
        *SMALL,
    )
    assert done.returncode == 0, done.stderr
    fixed = _evaluated(tmp_path / "fixed")
    assert {e.candidate.space for e in fixed} == {"pure_cuda"}
    assert all("omp" not in e.candidate.source for e in fixed)

    done = hiera(
        "--workload",
        "stencil2d",
        "--arch",
        "host",
        "--rounds",
        "2",
        "--population",
        "3",
        "--no-planning",
        "--run-dir",
        "free",
        *SMALL,
    )
    assert done.returncode == 0, done.stderr
    events = RunStore.open(tmp_path / "free").events
    assert not any(isinstance(e, records.PlanMade) for e in events)
    assert {e.candidate.strategy for e in _evaluated(tmp_path / "free")[1:]} == {"unconstrained"}
