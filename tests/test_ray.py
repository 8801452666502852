"""The `ray` executor on a real Ray cluster of this machine (two CPU workers, no GPU): the same candidates and
decisions as the `local` executor, a suite several runs at once, a worker killed mid-run, an unreachable cluster."""

import itertools
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import HIERA, PLUGINS, run_hiera

import hiera_core
from hiera_core import records
from hiera_core.pipeline import CannotTravel
from hiera_core.store import RunStore

pytest.importorskip("ray")

CLUSTER = """
import shutil, sys, tempfile, ray
folder = tempfile.mkdtemp(prefix="hiera-test-ray-")
ray.init(num_cpus=2, num_gpus=0, resources={"FAKE": 1}, include_dashboard=False, _temp_dir=folder, log_to_driver=False,
         logging_level="ERROR")
print(ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.read()  # until the test closes it
ray.shutdown()
shutil.rmtree(folder, ignore_errors=True)
"""
"""A Ray head node with two CPU workers and one `FAKE` accelerator, started as a process of the test's own, stopped by
closing its stdin."""

HOST = ["--arch", "host", "--no-remeasure", "--set", "run.baselines=false"]
RUN = ["--workload", "stencil2d", *HOST, "--set", "workload.stencil2d.host_n=96"]
SUITE = [
    "--workload",
    "multistencil",
    "--plugin",
    "multi_stencil",
    *HOST,
    "--rounds",
    "1",
    "--population",
    "2",
    "--set",
    "workload.multistencil.host_n=48",
    "--all-tasks",
]


@pytest.fixture(scope="module")
def cluster():
    """(the `--set` options that point hiera at the cluster, the environment it needs, the head process)."""
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")])),
    }
    head = subprocess.Popen(
        [sys.executable, "-c", CLUSTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    address = head.stdout.readline().strip()
    assert address, "the Ray head did not start"
    yield ["--set", "run.executor=ray", "--set", f'executor.ray.address="{address}"'], env, head
    head.stdin.close()
    try:
        head.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(head.pid, signal.SIGKILL)
        head.wait()


def _decisions(run_dir: Path):
    """What the search decided: each round's candidates (in the order generated), its plan, each candidate's outcome."""
    events = RunStore.open(run_dir).events
    batches = [[c.id for c in e.candidates] for e in events if isinstance(e, records.CandidatesGenerated)]
    plans = [
        (e.plan.round, e.plan.decision.space, e.plan.decision.direction, e.plan.strategy.name)
        for e in events
        if isinstance(e, records.PlanMade)
    ]
    outcomes = {e.candidate.id: type(e.evaluation).__name__ for e in events if isinstance(e, records.CandidateEvaluated)}
    return batches, plans, outcomes


def _evaluated(run_dir: Path) -> list[records.CandidateEvaluated]:
    return [e for e in RunStore.open(run_dir).events if isinstance(e, records.CandidateEvaluated)]


@pytest.mark.slow
def test_a_run_on_the_cluster_makes_the_same_candidates_and_decisions_as_local(cluster, tmp_path):
    flags, env, _ = cluster
    budget = ["--rounds", "2", "--population", "2"]
    local = run_hiera(*RUN, *budget, "--run-dir", "local", cwd=tmp_path)
    assert local.returncode == 0, local.stderr
    done = run_hiera(*RUN, *budget, *flags, "--run-dir", "ray", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    batches, plans, outcomes = _decisions(tmp_path / "ray")
    assert (batches, plans, outcomes) == _decisions(tmp_path / "local")
    assert len(plans) == 2 and sum(map(len, batches)) == 5 and set(outcomes.values()) == {"Measured"}
    manifest = json.loads((tmp_path / "ray" / "manifest.json").read_text())
    assert manifest["config"]["run"]["executor"] == "ray"
    for candidate in outcomes:  # the workers' logs came back to the driver, which alone wrote the run directory
        folder = tmp_path / "ray" / "candidates" / candidate
        assert "-shared" in (folder / "build.log").read_text() and (folder / "judge.log").is_file()
        assert (folder / "evaluation.json").is_file() and not (folder / "scratch").exists()
    assert "best" in done.stdout and (tmp_path / "ray" / "report.md").is_file()


@pytest.mark.slow
def test_a_suite_runs_its_tasks_at_once_on_the_cluster_as_local_runs_them_one_by_one(cluster, tmp_path):
    flags, env, _ = cluster
    local = run_hiera("run", *SUITE, "--run-dir", "local", cwd=tmp_path)
    assert local.returncode == 0, local.stderr
    done = run_hiera("run", *SUITE, *flags, "--set", "executor.ray.runs=2", "--run-dir", "ray", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert "2 task(s) of multistencil → ray, 2 at once" in done.stdout
    tasks = ["box3x3-n10240-s1", "box5x5-n10240-s1"]
    for task in tasks:
        assert _decisions(tmp_path / "ray" / task) == _decisions(tmp_path / "local" / task)
    # at once: each run had started before the other finished
    started = [(tmp_path / "ray" / task / "manifest.json").stat().st_mtime for task in tasks]
    finished = [(tmp_path / "ray" / task / "report.md").stat().st_mtime for task in tasks]
    assert max(started) < min(finished)
    assert "| stencil2d | hiera, expert | adaptive | 2 |" in (tmp_path / "ray" / "suite.md").read_text()

    again = run_hiera("run", *SUITE, *flags, "--set", "executor.ray.runs=2", "--run-dir", "ray", cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("finished earlier, skipped") == 2


@pytest.mark.slow
def test_device_stages_go_to_a_worker_holding_the_accelerator_with_or_after_the_build(cluster, tmp_path):
    """A GPU's path on a CPU: an architecture whose device stages need `FAKE`, which the cluster has one of, in two
    shares (`device_jobs`). Of a round's three candidates two find a share free and go to it whole (their judges
    start beside their builds), both under way at once, their timing one at a time under the lock; the third builds
    on a CPU worker and is handed over when a share frees. Every job reaches `FAKE` once."""
    flags, env, _ = cluster
    done = run_hiera(
        "--workload",
        "stencil2d",
        "--plugin",
        "accelerated_host",
        "--arch",
        "host-accelerated",
        "--rounds",
        "1",
        "--population",
        "3",
        "--set",
        "run.baselines=false",
        "--set",
        "workload.stencil2d.host_n=96",
        "--set",
        "executor.ray.device_jobs=2",
        "--set",
        "evaluator.host-run.min_time_s=3",  # each timing outlasts the gap between the round's two builds' ends
        "--set",
        "evaluator.host-run.max_repeats=1000000",
        *flags,
        "--run-dir",
        "run",
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    evaluated = _evaluated(tmp_path / "run")
    assert len(evaluated) == 4 and all(isinstance(e.evaluation, records.Measured) for e in evaluated)
    assert all({"space-check", "host-compile", "host-run"} <= set(e.stage_s) for e in evaluated)
    log = [json.loads(line) for line in (tmp_path / "run" / "hiera.log.jsonl").read_text().splitlines()]
    went = [line for line in log if line["event"] in ("ray_whole_job", "ray_device_stages") and line["accelerator"] == "FAKE"]
    first = {}  # how each candidate first reached `FAKE`: in its round (the finalists reach it again to be re-measured)
    for line in went:
        first.setdefault(line["candidate"], line["event"])
    whole = [e for e in evaluated[1:] if first[e.candidate.id] == "ray_whole_job"]
    assert len(whole) == 2 and [first[e.candidate.id] for e in evaluated[1:] if e not in whole] == ["ray_device_stages"]
    runs = [(e.timeline.stage_at["host-run"], e.timeline.stage_at["host-run"] + e.stage_s["host-run"]) for e in whole]
    assert max(start for start, _ in runs) < min(end for _, end in runs), runs  # the two judges at once on `FAKE`
    holds = sorted(hold for e in evaluated[1:] for hold in e.timeline.device_held)
    assert holds and all(end <= start for (_, end), (start, _) in itertools.pairwise(holds))  # the lock: one at a time
    events = RunStore.open(tmp_path / "run").events
    [finished] = [e for e in events if isinstance(e, records.RunFinished)]
    assert isinstance(finished.remeasured, records.Measured)  # the finalists measured again, by the same path
    remeasured = [e.candidate_id for e in events if isinstance(e, records.Remeasured)]
    assert sorted(line["candidate"] for line in went) == sorted([e.candidate.id for e in evaluated] + remeasured)
    assert (tmp_path / "run" / "candidates" / finished.best_candidate_id / "remeasure-1" / "judge.log").is_file()


def _workers(root: int, title: str) -> list[int]:
    """The processes under `root` whose command line starts with `title` (Ray names a busy worker `ray::FUNCTION`)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            if (Path("/proc") / str(pid) / "cmdline").read_bytes().startswith(title.encode()):
                found.append(pid)
        except OSError:
            continue
    return found


@pytest.mark.slow
@pytest.mark.parametrize("retries", [1, 0])
def test_a_worker_killed_mid_run_costs_at_most_its_candidate_and_nothing_is_evaluated_twice(cluster, tmp_path, retries):
    """Killed once: with a retry (the default) the candidate is evaluated elsewhere; without one it is recorded as
    Crashed with Ray's reason. Either way every candidate is recorded, once."""
    flags, env, head = cluster
    args = [
        str(HIERA),
        *RUN,
        "--rounds",
        "1",
        "--population",
        "4",
        *flags,
        "--set",
        f"executor.ray.retries={retries}",
        "--run-dir",
        "run",
    ]
    run = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        killed, deadline = None, time.time() + 240
        while killed is None and run.poll() is None and time.time() < deadline:
            busy = _workers(head.pid, "ray::_evaluate")
            if busy:
                killed = busy[0]
                os.kill(killed, signal.SIGKILL)
            time.sleep(0.1)
        _, stderr = run.communicate(timeout=600)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert killed is not None, "no Ray worker was seen evaluating"
    assert run.returncode == 0, stderr
    evaluated = _evaluated(tmp_path / "run")
    assert len(evaluated) == 5 and len({e.candidate.id for e in evaluated}) == 5  # nothing lost, nothing twice
    log = [json.loads(line) for line in (tmp_path / "run" / "hiera.log.jsonl").read_text().splitlines()]
    lost = [line["candidate"] for line in log if line["event"] == "ray_worker_lost"]
    crashed = [e for e in evaluated if isinstance(e.evaluation, records.Crashed)]
    if retries:
        assert all(isinstance(e.evaluation, records.Measured) for e in evaluated)  # the lost one was evaluated elsewhere
        retried = [line["candidate"] for line in log if line["event"] == "candidate_evaluated" and line["attempts"] == 2]
        assert len(lost) == 1 and retried == lost
    else:
        assert not lost and len(crashed) == 1
        assert crashed[0].evaluation.reason.startswith("its Ray worker died 1 time(s): ")
        assert "Crashed" in (tmp_path / "run" / "report.md").read_text()


def test_an_unreachable_cluster_is_one_line_and_exit_code_2(hiera, tmp_path):
    done = hiera(*RUN, "--set", "run.executor=ray", "--set", 'executor.ray.address="127.0.0.1:9"', "--run-dir", "run")
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["hiera: error: the Ray cluster at '127.0.0.1:9' cannot be reached: Connection refused"]
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_a_plugin_passed_as_an_object_cannot_travel_to_a_worker_and_says_so(tmp_path):
    class Lab:
        @hiera_core.hookimpl
        def hiera_register_evaluators(self):
            return []

    with pytest.raises(CannotTravel, match=r"plugin Lab was registered as an object.*register its module instead"):
        hiera_core.run(
            workload="stencil2d",
            arch="host",
            executor="ray",
            plugins=[Lab()],
            run_dir=str(tmp_path / "run"),
            config={"executor": {"ray": {"address": "127.0.0.1:9"}}},
        )
    assert not (tmp_path / "run").exists()


def test_a_worker_whose_sandbox_holds_less_than_the_runs_machine_evaluates_nothing(tmp_path, monkeypatch):
    """The manifest says what the sandbox held; a worker where it holds less must not make that untrue."""
    from hiera_core import api
    from hiera_core.engine import candidate_id, new_job
    from hiera_core.pipeline import decode_answer, evaluate_elsewhere
    from hiera_judge import sandbox

    session = api.session(api.settings(workload="stencil2d", arch="host", executor="ray"))
    contract, toolchain = session.workload.contract(session.task, "host"), session.arch.toolchain()
    source, _params, _origin = session.workload.seed(session.task, "host")
    candidate = records.Candidate(id=candidate_id(source, contract, toolchain), source=source, space="pure_cuda", round=0)
    job = new_job(session, candidate, contract=contract, toolchain=toolchain, roofline=None, workdir=tmp_path / "run")
    here = records.Protection(
        pid_namespace=False, network_namespace=False, read_only_root=False, dropped_capabilities=True, cgroup=None
    )
    monkeypatch.setattr(sandbox, "protection", lambda: here)
    answer = decode_answer(evaluate_elsewhere(session.pipeline.request(job), tmp_path / "worker"))
    assert isinstance(answer.evaluation, records.Crashed)
    assert "holds less than the run's machine's (pid namespace, network namespace, read only root" in answer.evaluation.reason
    assert not (tmp_path / "worker").exists()
