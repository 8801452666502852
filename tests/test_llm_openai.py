"""The `openai` backend against a real chat-completions server on 127.0.0.1: scripted good, damaged,
empty, cut-off, rate-limited and slow answers; costs; the key kept secret; the run replayed offline."""

import json
import secrets

import pytest
from llm_chat_server import ChatServer, Reply

from hiera_core import records
from hiera_core.store import RunStore
from hiera_judge.sandbox import candidate_environment
from hiera_workloads.stencil2d.host import HostStencilTemplate

KEY_VAR = "HIERA_TEST_LLM_KEY"
TEMPLATE = HostStencilTemplate()


def render(**knobs) -> str:
    return TEMPLATE.render({**TEMPLATE.defaults(), **knobs})


def guarded(source: str, condition: str) -> str:
    """`source` whose output is spoiled whenever `condition` holds inside the candidate's process."""
    return source.replace("int hiera_stencil2d(", "static int stencil_impl(", 1) + (
        "\n#include <stdlib.h>\n"
        "int hiera_stencil2d(int n, int radius, int steps, const double *w, const double *in, double *out, double *scratch)\n"
        "{\n"
        "    int rc = stencil_impl(n, radius, steps, w, in, out, scratch);\n"
        f"    if ({condition})\n"
        "        out[0] += 1.0;\n"
        "    return rc;\n"
        "}\n"
    )


KEY_BLIND = guarded(render(boundary="split"), f'getenv("{KEY_VAR}") != NULL')
"""Correct only if the API key is not in the candidate's environment."""
PATH_SIGHTED = guarded(render(loop_order="row_streaming"), 'getenv("PATH") == NULL')
"""Correct only if the candidate does see the variables it is allowed (getenv works there)."""
UNROLLED2, UNROLLED4, BLOCKED = render(unroll=2), render(unroll=4), render(block_cols=256)

SSDA = {
    "space": "pure_cuda",
    "scores": {"C": 0.9, "P": 0.1, "M": 0.3, "R": 0.2, "T": 0.4},
    "rationale": "branches in the hot loop",
}
SPA = {
    1: {"name": "split-interior", "steps": ["split interior and boundary"], "constraints": ["same padding"]},
    2: {"name": "stream-rows", "steps": ["stream rows", "unroll taps"], "constraints": []},
}


def candidates(*sources: str) -> str:
    return json.dumps({"candidates": [{"source": s} for s in sources]})


def respond(call) -> Reply:
    """The script: every kind of answer a real endpoint gives, good and bad, by role, round and request."""
    if call.role == "ssda":
        if call.round == 1:
            return Reply(f"My decision:\n```json\n{json.dumps(SSDA)}\n```\nThat is all.")
        # minor damage: trailing commas and a raw newline inside a string
        return Reply(
            '{"space": "pure_cuda", "scores": {"C": 0.2, "P": 0.1, "M": 0.7, "R": 0.3, "T": 0.4,},\n'
            ' "rationale": "memory\nbound",}'
        )
    if call.role == "spa":
        if call.round == 1 and call.attempt == 1:
            return Reply('{"name": "split", "steps": [split the interior from the boundary]}')  # broken JSON
        if call.round == 2 and call.seen == 0:
            return Reply(status=429, content="rate limited", headers={"Retry-After": "0"})
        return Reply(json.dumps(SPA[call.round]))
    script = {
        (1, 1): lambda: Reply(candidates(KEY_BLIND)),
        (1, 2): lambda: Reply(f"Here it is:\n```c\n{PATH_SIGHTED}```\n"),
        (1, 3): lambda: (
            Reply("Unroll the inner loop by two; that should help.") if call.attempt == 1 else Reply(candidates(UNROLLED2))
        ),
        (2, 1): lambda: Reply(candidates(UNROLLED4), delay_s=2.5 if call.seen == 0 else 0.0),
        (2, 2): lambda: (
            Reply(candidates(BLOCKED)[:400], finish_reason="length") if call.attempt == 1 else Reply(candidates(BLOCKED))
        ),
        (2, 3): lambda: Reply("I cannot write this kernel."),
    }
    return script[(call.round, call.request)]()


CONFIG = """\
[run]
workload = "stencil2d"
arch = "host"
backend = "openai"
rounds = 2
population = 3

[workload.stencil2d]
host_n = 48

[backend.openai]
base_url = "{url}"
model = "fake-model"
api_key_env = "{key_var}"
timeout_s = 1.0
max_retries = 2
backoff_s = 0.05
concurrency = 3

[backend.openai.prices.fake-model]
input_usd_per_mtok = 1.0
output_usd_per_mtok = 2.0
"""


@pytest.fixture
def key():
    return f"sk-hiera-test-{secrets.token_hex(12)}"


def _sources(batch):
    return [c.source.strip() for c in batch.candidates]


@pytest.mark.slow
def test_a_run_survives_every_kind_of_bad_answer_costs_it_and_replays_offline(hiera, tmp_path, key):
    server = ChatServer(respond, key=key).start()
    try:
        (tmp_path / "hiera.toml").write_text(CONFIG.format(url=server.url, key_var=KEY_VAR))
        done = hiera("--run-dir", "run", env={KEY_VAR: key})
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    events = RunStore.open(tmp_path / "run").events
    batches = {e.round: e for e in events if isinstance(e, records.CandidatesGenerated)}
    evaluated = {e.candidate.id: e.evaluation for e in events if isinstance(e, records.CandidateEvaluated)}
    calls = [e for e in events if isinstance(e, records.AgentCalled)]

    # round 1: fenced JSON, broken JSON asked again, JSON, bare fenced code, an answer without code asked again
    assert _sources(batches[1]) == [KEY_BLIND.strip(), PATH_SIGHTED.strip(), UNROLLED2.strip()]
    assert all(isinstance(evaluated[c.id], records.Measured) for c in batches[1].candidates)  # the key stayed out
    assert {(c.space, c.direction, c.strategy) for c in batches[1].candidates} == {("pure_cuda", "C", "split-interior")}
    assert [c.origin for c in batches[1].candidates] == ["openai fake-model"] * 3
    # round 2: damaged JSON repaired, 429 then success, a time-out retried, a cut-off answer asked again,
    # and a request that never gives code, recorded with its reason
    assert _sources(batches[2]) == [UNROLLED4.strip(), BLOCKED.strip()]
    assert any("oa request 3: no usable answer after 3 attempts" in note for note in batches[2].notes)
    plans = {e.plan.round: e.plan for e in events if isinstance(e, records.PlanMade)}
    assert plans[1].decision.scores == SSDA["scores"] and plans[1].strategy.name == "split-interior"
    assert plans[2].decision.direction == "M" and plans[2].decision.rationale == "memory\nbound"

    def errors(round_, role, sample=0):
        return [c.error for c in calls if (c.round, c.role, c.sample) == (round_, role, sample) and c.error]

    assert errors(1, "ssda") == [] and errors(2, "ssda") == []
    assert len(errors(1, "spa")) == 1 and "unusable answer" in errors(1, "spa")[0]
    assert "no candidate source in the answer" in errors(1, "oa", 2)[0]
    assert "cut off at the output-token limit" in errors(2, "oa", 1)[0]
    assert len(errors(2, "oa", 2)) == 3
    assert errors(2, "spa") == [] and errors(2, "oa", 0) == []  # the 429 and the time-out were retried by the backend
    seen_twice = [c for c in server.calls if c.seen == 1]
    assert {(c.role, c.round) for c in seen_twice} == {("spa", 2), ("oa", 2)}
    assert {c.temperature for c in server.calls} == {0.3} and {c.model for c in server.calls} == {"fake-model"}

    # costs: tokens from the server's usage, money from the price table, wall time per stage
    spent = [c for c in calls if not c.cached]
    cost = sum(c.cost_usd for c in spent)
    assert cost == pytest.approx(sum(c.input_tokens * 1e-6 + c.output_tokens * 2e-6 for c in spent)) and cost > 0
    report = (tmp_path / "run" / "report.md").read_text()
    assert "## Costs" in report and f"| total | {len(calls)} | 0 |" in report and f"{cost:.4f}" in report
    assert "| evaluation: host-compile |" in report and "| generation (OA) |" in report
    assert f"${cost:.4f}" in done.stdout

    # the key is nowhere: not in the run directory (logs included), not in the output
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert key not in path.read_text(errors="replace"), path
    assert key not in done.stdout + done.stderr

    # the same run again with the server stopped: same candidates, same decisions, nothing spent
    replayed = hiera("run", "--replay", "run", "--run-dir", "replayed")
    assert replayed.returncode == 0, replayed.stderr
    again = RunStore.open(tmp_path / "replayed").events
    again_batches = {e.round: e for e in again if isinstance(e, records.CandidatesGenerated)}
    assert {r: [c.id for c in b.candidates] for r, b in again_batches.items()} == {
        r: [c.id for c in b.candidates] for r, b in batches.items()
    }
    again_plans = {e.plan.round: e.plan for e in again if isinstance(e, records.PlanMade)}
    assert {r: (p.decision, p.strategy) for r, p in again_plans.items()} == {
        r: (p.decision, p.strategy) for r, p in plans.items()
    }
    again_calls = [e for e in again if isinstance(e, records.AgentCalled)]
    assert {c.backend for c in again_calls} == {"replay"} and sum(c.cost_usd or 0 for c in again_calls) == 0
    assert [(c.round, c.role, c.sample, c.attempt, c.error is None) for c in sorted(again_calls, key=_place)] == [
        (c.round, c.role, c.sample, c.attempt, c.error is None) for c in sorted(calls, key=_place)
    ]


def _place(call):
    return call.round, call.role, call.sample, call.attempt


def test_a_missing_key_is_one_line_naming_the_variable(hiera, tmp_path):
    (tmp_path / "hiera.toml").write_text(CONFIG.format(url="http://127.0.0.1:9/v1", key_var=KEY_VAR))
    done = hiera("--run-dir", "run", env={KEY_VAR: ""})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"hiera: error: the environment variable {KEY_VAR} (api_key_env of [backend.openai]) is not set;"
        ' set api_key_env = "" for an endpoint that needs no key'
    ]


@pytest.mark.slow
def test_a_rejected_key_ends_the_run_at_its_first_request_in_one_line(hiera, tmp_path, key):
    server = ChatServer(respond, key="sk-the-right-one").start()
    try:
        config = CONFIG.format(url=server.url, key_var=KEY_VAR).replace("rounds = 2", "rounds = 1")
        (tmp_path / "hiera.toml").write_text(
            "\n".join(line for line in config.splitlines() if not line.startswith(("base_url", "model")))
        )
        done = hiera("--run-dir", "run", "--model", "fake-model", "--base-url", server.url, env={KEY_VAR: key})
        stopped = RunStore.open(tmp_path / "run").events
        asked = (server.unauthorized, len(server.calls))
        fixed = hiera("resume", "run", env={KEY_VAR: "sk-the-right-one"})
    finally:
        server.stop()
    reason = f"backend openai: HTTP 401: invalid api key from {server.url} (model fake-model)"
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"hiera: error: {reason} (round 1's ssda request): no request can be answered, so the run stops"
        f" (what it recorded is in {(tmp_path / 'run').resolve()})"
    ]
    assert asked == (1, 0)  # asked once: not again, not in any later round

    # what was recorded stays (the seed, and the call that failed), and the run continues once the key is right
    assert [e.error for e in stopped if isinstance(e, records.AgentCalled)] == [reason]
    assert [e.candidate.round for e in stopped if isinstance(e, records.CandidateEvaluated)] == [0]
    assert not any(isinstance(e, records.RunFinished | records.PlanMade) for e in stopped)
    assert fixed.returncode == 0, fixed.stderr
    resumed = RunStore.open(tmp_path / "run").events
    assert [e.candidate.round for e in resumed if isinstance(e, records.CandidateEvaluated)] == [0, 1, 1, 1]
    assert [e.plan.strategy.name for e in resumed if isinstance(e, records.PlanMade)] == ["split-interior"]
    assert key not in (tmp_path / "run" / "hiera.log.jsonl").read_text() and key not in done.stdout + done.stderr
    manifest = RunStore.open(tmp_path / "run").manifest.config["backend"]["openai"]
    assert (manifest["model"], manifest["base_url"], manifest["api_key_env"]) == ("fake-model", server.url, KEY_VAR)


@pytest.mark.slow
@pytest.mark.parametrize("status", [403, 404])
def test_a_forbidden_model_or_an_unknown_endpoint_ends_the_run_as_well(hiera, tmp_path, key, status):
    server = ChatServer(lambda call: Reply(status=403, content="this key may not use fake-model"), key=key).start()
    url = server.url if status == 403 else server.url.replace("/v1", "/v9")  # the server has no such route: 404
    try:
        (tmp_path / "hiera.toml").write_text(CONFIG.format(url=url, key_var=KEY_VAR).replace("rounds = 2", "rounds = 1"))
        done = hiera("--run-dir", "run", env={KEY_VAR: key})
    finally:
        server.stop()
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert f"hiera: error: backend openai: HTTP {status}: " in done.stderr and "the run stops" in done.stderr
    assert len([e for e in RunStore.open(tmp_path / "run").events if isinstance(e, records.AgentCalled)]) == 1


@pytest.mark.slow
def test_a_run_whose_every_request_fails_exits_non_zero_saying_why(hiera, tmp_path, key):
    served = iter(range(100))

    def failing(call) -> Reply:  # the service fails, or answers with no usable answer, by turns
        return Reply(status=500, content="overloaded") if next(served) % 2 == 0 else Reply("I would rather not.")

    server = ChatServer(failing, key=key).start()
    try:
        config = (
            CONFIG.format(url=server.url, key_var=KEY_VAR)
            .replace("rounds = 2", "rounds = 1")
            .replace("max_retries = 2", "max_retries = 0")
        )
        (tmp_path / "hiera.toml").write_text(config)
        done = hiera("--run-dir", "run", env={KEY_VAR: key})
    finally:
        server.stop()
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (  # after the warnings logged for each call
        "hiera: error: no agent request got a usable answer (3 call(s) failed; the last: backend openai: HTTP 500: overloaded"
        " (after 1 tries)), so nothing was searched"
    )
    assert f"report: {(tmp_path / 'run').resolve() / 'report.md'}" in done.stdout
    events = RunStore.open(tmp_path / "run").events  # the run is recorded to its end all the same
    assert [bool(e.error) for e in events if isinstance(e, records.AgentCalled)] == [True] * 3
    assert any(isinstance(e, records.RunFinished) for e in events) and (tmp_path / "run" / "report.md").is_file()


def test_the_candidate_environment_holds_no_key(monkeypatch, tmp_path, key):
    monkeypatch.setenv(KEY_VAR, key)
    monkeypatch.setenv("OPENAI_API_KEY", key)
    environment = candidate_environment(tmp_path)
    assert key not in json.dumps(environment) and "PATH" in environment
