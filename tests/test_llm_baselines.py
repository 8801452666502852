"""The paper's two baselines as strategies, against a real chat-completions server: Caesar-like
generate-and-fix (execution feedback only, one lineage per request) and CudaForge-like refinement (a
judge reads the profile and names one bottleneck; pure CUDA)."""

import json
import secrets

import pytest
from llm_chat_server import ChatServer, Reply

from hiera_core import records
from hiera_core.store import RunStore
from hiera_workloads.stencil2d.host import HostStencilTemplate

TEMPLATE = HostStencilTemplate()
BROKEN = "int hiera_stencil2d(int n) { this is not C }\n"
UNROLLED2, UNROLLED4, BLOCKED, STREAMING = (
    TEMPLATE.render({**TEMPLATE.defaults(), **knobs})
    for knobs in ({"unroll": 2}, {"unroll": 4}, {"block_cols": 256}, {"loop_order": "row_streaming"})
)
KEY = f"sk-hiera-test-{secrets.token_hex(8)}"


def _config(url: str, strategy: str, rounds: int) -> str:
    return f"""\
[run]
workload = "stencil2d"
arch = "host"
backend = "openai"
strategy = "{strategy}"
rounds = {rounds}
population = 2
remeasure = false

[workload.stencil2d]
host_n = 48

[backend.openai]
base_url = "{url}"
model = "fake-model"
api_key_env = "HIERA_TEST_LLM_KEY"
"""


def _run(hiera, tmp_path, respond, strategy, rounds):
    server = ChatServer(respond, key=KEY).start()
    try:
        (tmp_path / "hiera.toml").write_text(_config(server.url, strategy, rounds))
        done = hiera("--run-dir", "run", env={"HIERA_TEST_LLM_KEY": KEY})
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    return server, RunStore.open(tmp_path / "run").events


def _source(text: str) -> Reply:
    return Reply(json.dumps({"candidates": [{"source": text}]}))


@pytest.mark.slow
def test_caesar_fixes_each_lineage_from_its_own_execution_feedback_alone(hiera, tmp_path):
    def respond(call):
        script = {(1, 1): BROKEN, (1, 2): UNROLLED2, (2, 1): UNROLLED4, (2, 2): BLOCKED}
        return _source(script[(call.round, call.request)])

    server, events = _run(hiera, tmp_path, respond, "caesar", rounds=2)
    assert {c.role for c in server.calls} == {"oa"} and len(server.calls) == 4
    batches = {e.round: e for e in events if isinstance(e, records.CandidatesGenerated)}
    evaluated = {e.candidate.id: e.evaluation for e in events if isinstance(e, records.CandidateEvaluated)}
    broken, unrolled = batches[1].candidates
    assert isinstance(evaluated[broken.id], records.CompileFailed)
    assert {(c.space, c.strategy, c.direction) for c in batches[1].candidates + batches[2].candidates} == {
        ("libraries_pytorch", "generate-and-fix", None)
    }
    assert [c.parent_id for c in batches[2].candidates] == [broken.id, unrolled.id]
    assert not any(isinstance(e, records.PlanMade) for e in events)

    prompts = {c.request: c.prompt for c in server.calls if c.round == 2}
    assert BROKEN.strip() in prompts[1] and "did not compile" in prompts[1] and UNROLLED2.strip() not in prompts[1]
    assert UNROLLED2.strip() in prompts[2] and "correct; " in prompts[2] and "did not compile" not in prompts[2]
    for prompt in prompts.values():  # execution feedback only: no profile, no planning knowledge
        assert "metrics (" not in prompt and "signals (" not in prompt and "Rubric" not in prompt


@pytest.mark.slow
def test_cudaforge_judges_one_bottleneck_from_the_profile_and_refines_in_pure_cuda(hiera, tmp_path):
    verdict = {
        "bottleneck": "one of two cores idles (cpu utilization 50%)",
        "method": "stream-rows",
        "steps": ["stream along rows so the loop vectorises"],
        "constraints": ["no OpenMP"],
    }

    def respond(call):
        if call.role == "judge":
            return Reply(json.dumps(verdict))
        return _source((STREAMING, UNROLLED2)[call.request - 1])

    server, events = _run(hiera, tmp_path, respond, "cudaforge", rounds=1)
    roles = sorted(c.role for c in server.calls)
    assert roles == ["judge", "oa", "oa"]
    judge = next(c.prompt for c in server.calls if c.role == "judge")
    assert "metrics (host-timer), by unit:" in judge and "top findings:" in judge
    for call in server.calls:
        if call.role == "oa":
            assert "Remove this bottleneck: one of two cores idles" in call.prompt
            assert "1. stream along rows so the loop vectorises" in call.prompt
            assert "# Implementation space pure_cuda" in call.prompt
    batch = next(e for e in events if isinstance(e, records.CandidatesGenerated) and e.round == 1)
    assert {(c.space, c.strategy) for c in batch.candidates} == {("pure_cuda", "stream-rows")}
    assert batch.notes[0] == f"judge: {verdict['bottleneck']} -> stream-rows"
    assert not any(isinstance(e, records.PlanMade) for e in events)
    assert "| 1 | pure_cuda | - | stream-rows | 2 / 2 |" in (tmp_path / "run" / "report.md").read_text()


@pytest.mark.slow
def test_baselines_refuse_what_they_cannot_do(hiera):
    done = hiera("--workload", "stencil2d", "--strategy", "caesar", "--backend", "openai", "--no-planning")
    assert done.returncode == 2
    assert "--no-planning is an ablation of a search that plans; 'caesar' plans its own way" in done.stderr
    done = hiera("--workload", "stencil2d", "--strategy", "cudaforge")
    assert done.returncode == 2
    assert "the 'cudaforge' search needs a backend that answers it: 'expert' answers only hiera" in done.stderr
