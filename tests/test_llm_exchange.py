"""The `exchange` backend: a complete small run whose answers a separate process writes with
`hiera exchange pending` and `hiera exchange answer`, as a person or an external agent would."""

import json
import os
import subprocess
import sys

from conftest import HIERA

from hiera_core import records
from hiera_core.store import RunStore
from hiera_workloads.stencil2d.host import HostStencilTemplate

TEMPLATE = HostStencilTemplate()
SOURCES = [TEMPLATE.render({**TEMPLATE.defaults(), **knobs}) for knobs in ({"boundary": "split"}, {"unroll": 4})]
ANSWERS = {
    "ssda": json.dumps({"space": "pure_cuda", "scores": {"C": 0.8, "P": 0.0, "M": 0.2, "R": 0.1, "T": 0.3}, "rationale": "a person read the profile"}),
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


def test_a_separate_process_answers_a_whole_run_through_the_exchange_folder(tmp_path, hiera):
    (tmp_path / "answers.json").write_text(json.dumps(ANSWERS))
    (tmp_path / "answerer.py").write_text(ANSWERER)
    run = subprocess.Popen(
        [str(HIERA), "--workload", "stencil2d", "--arch", "host", "--rounds", "1", "--population", "2", "--backend", "exchange",
         "--run-dir", "run", "--no-remeasure", "--set", "workload.stencil2d.host_n=48", "--set", "backend.exchange.dir=ex",
         "--set", "backend.exchange.poll_s=0.05"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ,
    )
    answerer = subprocess.run(
        [sys.executable, "answerer.py", str(HIERA), "ex", "answers.json"], cwd=tmp_path, capture_output=True, text=True, timeout=180,
    )
    out, err = run.communicate(timeout=180)
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
