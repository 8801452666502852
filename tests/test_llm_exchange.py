"""The `exchange` backend: a complete small run whose answers a separate process writes with
`hiera exchange pending` and `hiera exchange answer`, as a person or an external agent would."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import HIERA

import hiera_core
from hiera_core import records
from hiera_core.store import RunStore
from hiera_plugins.llm.exchange import ExchangeFolder
from hiera_workloads.stencil2d.host import HostStencilTemplate

TEMPLATE = HostStencilTemplate()
SOURCES = [TEMPLATE.render({**TEMPLATE.defaults(), **knobs}) for knobs in ({"boundary": "split"}, {"unroll": 4})]
ANSWERS = {
    "ssda": json.dumps(
        {
            "space": "pure_cuda",
            "scores": {"C": 0.8, "P": 0.0, "M": 0.2, "R": 0.1, "T": 0.3},
            "rationale": "a person read the profile",
        }
    ),
    "spa": json.dumps({"name": "split-interior", "steps": ["split the interior off"], "constraints": []}),
    "oa-1": f"```c\n{SOURCES[0]}```",
    "oa-2": json.dumps({"candidates": [{"source": SOURCES[1]}]}),
}

ANSWERER = """\
import json, pathlib, subprocess, sys, time
hiera, folder, answers = sys.argv[1], sys.argv[2], json.loads(pathlib.Path(sys.argv[3]).read_text())
answered, deadline = set(), time.time() + 120
while len(answered) < len(answers) and time.time() < deadline:
    out = subprocess.run([hiera, "exchange", "pending", "--dir", folder], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if line.startswith("no request"):
            continue
        request_id, role, *rest = line.split()
        key = f"{role}-{rest[1]}" if role == "oa" else role
        assert "# Contract" in pathlib.Path(rest[-1]).read_text()
        answer = pathlib.Path(folder).parent / f"{request_id}.answer"
        answer.write_text(answers[key])
        subprocess.run([hiera, "exchange", "answer", request_id, str(answer), "--dir", folder], check=True, capture_output=True)
        answered.add(request_id)
    time.sleep(0.1)
print(len(answered))
"""


@pytest.mark.slow
def test_a_separate_process_answers_a_whole_run_through_the_exchange_folder(tmp_path, hiera):
    (tmp_path / "answers.json").write_text(json.dumps(ANSWERS))
    (tmp_path / "answerer.py").write_text(ANSWERER)
    run = subprocess.Popen(
        [
            str(HIERA),
            "--workload",
            "stencil2d",
            "--arch",
            "host",
            "--rounds",
            "1",
            "--population",
            "2",
            "--backend",
            "exchange",
            "--run-dir",
            "run",
            "--no-remeasure",
            "--set",
            "workload.stencil2d.host_n=48",
            "--set",
            "backend.exchange.dir=ex",
            "--set",
            "backend.exchange.poll_s=0.05",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ,
    )
    answerer = subprocess.run(
        [sys.executable, "answerer.py", str(HIERA), "ex", "answers.json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    _out, err = run.communicate(timeout=180)
    assert answerer.returncode == 0 and answerer.stdout.strip() == "4", answerer.stderr
    assert run.returncode == 0, err

    events = RunStore.open(tmp_path / "run").events
    plan = next(e.plan for e in events if isinstance(e, records.PlanMade))
    assert plan.decision.rationale == "a person read the profile" and plan.strategy.name == "split-interior"
    batch = next(e for e in events if isinstance(e, records.CandidatesGenerated) and e.round == 1)
    assert [c.source.strip() for c in batch.candidates] == [s.strip() for s in SOURCES]
    assert {c.origin for c in batch.candidates} == {"exchange"}
    assert all(isinstance(e.evaluation, records.Measured) for e in events if isinstance(e, records.CandidateEvaluated))

    assert hiera("exchange", "pending", "--dir", "ex").stdout.strip() == "no request is waiting in ex"
    done = sorted(p.name.split(".", 1)[1] for p in (tmp_path / "ex" / "done").iterdir())
    assert done == ["json"] * 4 + ["prompt.md"] * 4 + ["txt"] * 4


def test_answering_an_unknown_request_is_one_line_with_the_waiting_ones(hiera, tmp_path):
    (tmp_path / "a.txt").write_text("{}")
    done = hiera("exchange", "answer", "r9-ssda-a1-deadbeef", "a.txt", "--dir", "ex")
    assert done.returncode == 2
    assert done.stderr.strip() == "hiera: error: no request 'r9-ssda-a1-deadbeef' is waiting in ex (waiting: none)"


PAUSED_RUN = [
    "--workload",
    "stencil2d",
    "--arch",
    "host",
    "--rounds",
    "2",
    "--population",
    "2",
    "--backend",
    "exchange",
    "--run-dir",
    "run",
    "--no-remeasure",
    "--set",
    "workload.stencil2d.host_n=48",
    "--set",
    "backend.exchange.dir=ex",
    "--set",
    'backend.exchange.when_waiting="pause"',
]
ROUND_SOURCES = {
    1: SOURCES,
    2: [TEMPLATE.render({**TEMPLATE.defaults(), **knobs}) for knobs in ({"unroll": 2}, {"block_cols": 256})],
}


def answer_elsewhere(folder) -> list[dict]:
    """What an agent on another machine does with a carried exchange folder: read each waiting request (its
    `.json` and `.prompt.md`) and write its answer to `answers/<id>.txt` whole (a temporary name, then a rename).
    Round 1's first OA request is answered unusably once, so that its re-asking also goes through a pause."""
    answered = []
    for meta_path in sorted((folder / "requests").glob("*.json")):
        meta = json.loads(meta_path.read_text())
        assert "# Contract" in (folder / "requests" / f"{meta['id']}.prompt.md").read_text()
        if meta["role"] == "oa":
            unusable = (meta["round"], meta["sample"], meta["attempt"]) == (1, 0, 1)
            text = "I would unroll it." if unusable else f"```c\n{ROUND_SOURCES[meta['round']][meta['sample']]}```"
        else:
            text = ANSWERS[meta["role"]]
        (folder / "answers").mkdir(exist_ok=True)
        (folder / "answers" / f".{meta['id']}.tmp").write_text(text)
        os.replace(folder / "answers" / f".{meta['id']}.tmp", folder / "answers" / f"{meta['id']}.txt")
        answered.append(meta)
    return answered


@pytest.mark.slow
def test_a_paused_run_is_driven_to_its_end_by_answers_carried_between_resumes(tmp_path, hiera):
    run = (tmp_path / "run").resolve()
    done = hiera(*PAUSED_RUN)
    again = hiera("resume", "run")  # resumed before anything was answered: it pauses again, posting nothing new
    assert again.returncode == 75 and again.stderr == done.stderr, again.stderr
    pauses, answered = [], []
    while done.returncode == 75 and len(pauses) < 12:
        line = done.stderr.strip().splitlines()[-1]  # after the warning logged for an unusable answer, if any
        assert line.startswith("hiera: run paused: ") and "`hiera exchange pending --dir ex`" in line
        assert line.endswith(f"then `hiera resume {run}` continues the run")
        pauses.append(line)
        elsewhere = tmp_path / "elsewhere" / str(len(pauses)) / "ex"  # carried there, answered, carried back
        shutil.copytree(tmp_path / "ex" / "requests", elsewhere / "requests")
        batch = answer_elsewhere(elsewhere)
        assert {m["id"] for m in batch}.isdisjoint(m["id"] for m in answered)  # nothing is asked twice
        answered += batch
        shutil.copytree(elsewhere / "answers", tmp_path / "ex" / "answers", dirs_exist_ok=True)
        done = hiera("resume", "run")
    assert done.returncode == 0, done.stderr
    assert "best " in done.stdout

    # three pauses a round (SSDA, SPA, then the round's two OA requests together), one more for the re-asked answer
    waits = [(m["round"], m["role"], m["sample"], m["attempt"]) for m in answered]
    assert waits == [
        (1, "ssda", 0, 1),
        (1, "spa", 0, 1),
        (1, "oa", 0, 1),
        (1, "oa", 1, 1),
        (1, "oa", 0, 2),
        (2, "ssda", 0, 1),
        (2, "spa", 0, 1),
        (2, "oa", 0, 1),
        (2, "oa", 1, 1),
    ]
    assert [p.split(" request(s)")[0] for p in pauses] == ["hiera: run paused: " + n for n in "1121112"]
    events = RunStore.open(run).events
    assert [(e.round, e.waiting) for e in events if isinstance(e, records.RunPaused)] == [
        (1, 1),
        (1, 1),
        (1, 1),
        (1, 2),
        (1, 1),
        (2, 1),
        (2, 1),
        (2, 2),
    ]

    # nothing was done twice: every candidate evaluated once, every round generated and finished once
    evaluated = [e.candidate.id for e in events if isinstance(e, records.CandidateEvaluated)]
    assert len(evaluated) == len(set(evaluated)) == 5
    assert [e.round for e in events if isinstance(e, records.CandidatesGenerated)] == [0, 1, 2]
    assert [e.round for e in events if isinstance(e, records.RoundFinished)] == [0, 1, 2]
    assert [e.plan.round for e in events if isinstance(e, records.PlanMade)] == [1, 2]
    # each answer taken and recorded once: a later resume answers it from the run's cache without recording it again
    calls = [c for c in events if isinstance(c, records.AgentCalled)]
    assert sorted((c.round, c.role, c.sample, c.attempt) for c in calls) == sorted(waits) and not any(c.cached for c in calls)
    assert [c.error is None for c in calls].count(False) == 1  # the one unusable answer, counted once
    batches = {e.round: e for e in events if isinstance(e, records.CandidatesGenerated)}
    assert {r: [c.source.strip() for c in batches[r].candidates] for r in (1, 2)} == {
        r: [s.strip() for s in ROUND_SOURCES[r]] for r in (1, 2)
    }
    assert all(isinstance(e.evaluation, records.Measured) for e in events if isinstance(e, records.CandidateEvaluated))
    assert hiera("exchange", "pending", "--dir", "ex").stdout.strip() == "no request is waiting in ex"
    assert "- paused 8 time(s) for answers that came later (rounds 1, 2), resumed each time" in (run / "report.md").read_text()


def test_through_the_python_api_a_pause_is_a_typed_exception_and_resume_takes_the_answers(tmp_path):
    exchange = tmp_path / "ex"
    config = {"workload": {"stencil2d": {"host_n": 48}}, "backend": {"exchange": {"dir": str(exchange), "when_waiting": "pause"}}}
    with pytest.raises(hiera_core.api.AwaitingAnswers) as paused:
        hiera_core.run(
            workload="stencil2d",
            arch="host",
            rounds=1,
            population=1,
            backend="exchange",
            remeasure=False,
            config=config,
            run_dir=str(tmp_path / "run"),
        )
    assert (paused.value.run_dir, paused.value.waiting) == ((tmp_path / "run").resolve(), 1)
    folder = ExchangeFolder(exchange)
    [ssda] = folder.pending()
    assert ssda.role == "ssda"
    folder.answer(ssda.id, ANSWERS["ssda"])
    with pytest.raises(hiera_core.api.AwaitingAnswers):
        hiera_core.resume(tmp_path / "run")
    assert [p.role for p in folder.pending()] == ["spa"]
    events = RunStore.open(tmp_path / "run").events
    assert [(e.round, e.role, e.error) for e in events if isinstance(e, records.AgentCalled)] == [(1, "ssda", None)]


@pytest.mark.slow
def test_a_paused_run_plans_on_a_machine_without_its_device_and_evaluates_only_where_the_device_is(tmp_path, hiera):
    """The paper's experiment on a GPU lent by the call: every answer is read, and every plan and candidate made, on
    the development machine, so that a round costs the GPU's machine one call (to evaluate) and no answer waits there."""
    run = (tmp_path / "run").resolve()
    cmd = ["--plugin", "gated_host", *PAUSED_RUN]
    cmd[cmd.index("--arch") + 1], cmd[cmd.index("--rounds") + 1] = "host-gated", "1"
    elsewhere = {"HIERA_TEST_NO_DEVICE": "1"}
    folder = ExchangeFolder(tmp_path / "ex")
    done = hiera(*cmd)  # round 0 evaluated where the device is; the SSDA request of round 1 waits
    assert done.returncode == 75, done.stderr
    for role in ("ssda", "spa", "oa"):
        for request in folder.pending():
            assert request.role == role
            folder.answer(request.id, ANSWERS[role] if role != "oa" else f"```c\n{SOURCES[request.sample]}```")
        done = hiera("resume", "run", "--plugin", "gated_host", env=elsewhere)
        assert done.returncode == 75, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "hiera: run paused: 2 candidate(s) of round 1 to evaluate on the device (architecture 'host-gated' cannot run"
        " here: its device is on another machine (HIERA_TEST_NO_DEVICE)); `hiera resume"
        f" {run}` where architecture 'host-gated' runs continues the run"
    )
    again = hiera("resume", "run", "--plugin", "gated_host", env=elsewhere)  # nothing new to do there
    assert again.returncode == 75 and again.stderr.strip().splitlines()[-1] == done.stderr.strip().splitlines()[-1]
    events = RunStore.open(run).events
    assert [e.round for e in events if isinstance(e, records.CandidatesGenerated)] == [0, 1]
    assert {e.candidate.round for e in events if isinstance(e, records.CandidateEvaluated)} == {0}
    prompts = {p.name.split("-")[1]: p.read_text() for p in (tmp_path / "ex" / "done").glob("*.prompt.md")}
    target = {role: text.split("# Target")[1].split("\n#")[0] for role, text in prompts.items()}
    assert target["ssda"] == target["spa"] == target["oa"]  # the device's machine and the planning one describe it alike

    finished = hiera("resume", "run", "--plugin", "gated_host")  # where the device is: evaluates, asks nothing
    assert finished.returncode == 0, finished.stderr
    events = RunStore.open(run).events
    evaluated = [e.candidate.id for e in events if isinstance(e, records.CandidateEvaluated)]
    assert len(evaluated) == len(set(evaluated)) == 3
    assert sorted(c.role for c in events if isinstance(c, records.AgentCalled)) == ["oa", "oa", "spa", "ssda"]
    assert [e.waiting for e in events if isinstance(e, records.RunPaused)] == [1, 1, 2, 0, 0]
    report = (run / "report.md").read_text()
    assert "- paused 3 time(s) for answers that came later (rounds 1), resumed each time" in report
    assert "- paused 2 time(s) for the device, planned on a machine without it (rounds 1), resumed each time" in report


@pytest.mark.slow
def test_a_suite_costs_the_device_one_call_a_round_and_plans_where_the_device_is_not(tmp_path, hiera):
    """The paper's experiment as it runs: several tasks, a round's sources asked in one request a task, every answer
    read and every candidate written on the planning machine, and one call of the same command where the device is
    evaluating the round for every task of the suite."""
    suite = [
        "run",
        "--plugin",
        "gated_host",
        "--plugin",
        "multi_stencil",
        "--workload",
        "multistencil",
        "--arch",
        "host-gated",
        "--rounds",
        "1",
        "--population",
        "2",
        "--no-remeasure",
        "--set",
        "workload.multistencil.host_n=48",
        "--all-tasks",
        "--backend",
        "exchange",
        "--set",
        "backend.exchange.dir=ex",
        "--set",
        'backend.exchange.when_waiting="pause"',
        "--set",
        "backend.exchange.candidates_per_request=2",
        "--set",
        "executor.local.runs=2",
        "--run-dir",
        "suite",
    ]
    tasks = ["box3x3-n10240-s1", "box5x5-n10240-s1"]
    elsewhere = {"HIERA_TEST_NO_DEVICE": "1"}
    folder = ExchangeFolder(tmp_path / "ex")

    def evaluated_rounds(task: str) -> list[int]:
        return [
            e.candidate.round
            for e in RunStore.open(tmp_path / "suite" / task).events
            if isinstance(e, records.CandidateEvaluated)
        ]

    done = hiera(*suite)  # where the device is: round 0 of both tasks, then both SSDA requests wait
    assert done.returncode == 75, done.stderr
    for role in ("ssda", "spa", "oa"):
        pending = folder.pending()
        assert sorted(p.role for p in pending) == [role, role]  # one request a task, the OA's for both sources
        for request in pending:
            folder.answer(
                request.id, ANSWERS[role] if role != "oa" else json.dumps({"candidates": [{"source": s} for s in SOURCES]})
            )
        done = hiera(*suite, env=elsewhere)
        assert done.returncode == 75, done.stderr
    assert done.stdout.count("2 candidate(s) of round 1 to evaluate on the device") == 2, done.stdout
    assert all(evaluated_rounds(task) == [0] for task in tasks)

    finished = hiera(*suite)  # one call where the device is: the round of every task
    assert finished.returncode == 0, finished.stderr
    for task in tasks:
        assert evaluated_rounds(task) == [0, 1, 1]
        events = RunStore.open(tmp_path / "suite" / task).events
        assert sorted(e.role for e in events if isinstance(e, records.AgentCalled)) == ["oa", "spa", "ssda"]
    assert (
        folder.pending() == []
        and "| stencil2d | hiera, exchange | adaptive | 2 |" in (tmp_path / "suite" / "suite.md").read_text()
    )
