"""Feedback a model can act on: a crash names the call it died in, its signal and what its process last
wrote to stderr; a compile error quotes the source lines its log cites; and when a round continues the
strategy whose candidate failed, one of its K requests shows that candidate and its failure and asks for a fix."""

import json
import secrets
from types import SimpleNamespace

import pytest
from llm_chat_server import ChatServer, Reply

from hiera_core import records, serialization
from hiera_core.agents import execution_feedback
from hiera_core.config import load_config
from hiera_core.engine import evaluate_source
from hiera_core.plugins import make_plugin_manager
from hiera_core.session import Session
from hiera_core.store import RunStore
from hiera_plugins.llm.replay import ReplayBackend, ReplayConfig
from hiera_plugins.searches import repair_target
from hiera_workloads.stencil2d.host import HostStencilTemplate

TEMPLATE = HostStencilTemplate()
HONEST = TEMPLATE.render(TEMPLATE.defaults())


def crashing_on(n: int, source: str = HONEST) -> str:
    """`source` that says so on stderr and writes through a null pointer when called on an n x n grid."""
    return source.replace("int hiera_stencil2d(", "static int stencil_impl(", 1) + (
        "\n#include <stdio.h>\n"
        "int hiera_stencil2d(int n, int radius, int steps, const double *w, const double *in, double *out, double *scratch)\n"
        "{\n"
        f"    if (n == {n}) {{\n"
        '        fprintf(stderr, "\\x1b[31mabout to write row %d\\x1b[0m\\n", n);\n'
        "        volatile double *nowhere = 0;\n"
        "        nowhere[n] = 1.0;\n"
        "    }\n"
        "    return stencil_impl(n, radius, steps, w, in, out, scratch);\n"
        "}\n"
    )


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    root = tmp_path_factory.mktemp("feedback")
    config = load_config(
        root,
        environ={},
        cli={"arch": "host"},
        overrides=[
            "workload.stencil2d.host_n=48",
            "evaluator.host-run.call_timeout_s=3",
            "evaluator.host-run.min_time_s=0.05",
        ],
    )
    return Session.create(config, make_plugin_manager()), root


def test_a_crash_names_its_call_its_signal_and_the_end_of_its_stderr(session):
    session, root = session
    _, crashed = evaluate_source(session, crashing_on(37), space="pure_cuda", workdir=root / "crash")
    assert isinstance(crashed, records.Crashed), crashed
    # the task grid (48) passes with the first seed; the odd grid (37) is next, with seed 1 and uniform values
    assert crashed.case == "odd (n=37), seed 1, uniform inputs"
    assert crashed.signal == "SIGSEGV" and "SIGSEGV" in crashed.reason
    assert crashed.stderr_tail == "about to write row 37"  # the colour escapes are gone
    feedback = execution_feedback(crashed)
    assert "The call it crashed in: odd (n=37), seed 1, uniform inputs" in feedback
    assert "```\nabout to write row 37\n```" in feedback


@pytest.mark.slow  # 5 s or more on the 2-core machine
def test_a_hang_names_the_call_it_hung_in(session):
    session, root = session
    hangs = crashing_on(37).replace("nowhere[n] = 1.0;", "for (;;) nowhere = 0;")
    _, hung = evaluate_source(session, hangs, space="pure_cuda", workdir=root / "hang")
    assert isinstance(hung, records.TimedOut) and hung.limit_s == 3, hung
    assert hung.case == "odd (n=37), seed 1, uniform inputs"
    assert execution_feedback(hung).endswith("(too slow, or it hangs)\nThe call it was in: odd (n=37), seed 1, uniform inputs")


def test_a_compile_error_quotes_the_lines_its_log_cites(session):
    session, root = session
    lines = HONEST.splitlines()
    broken = next(i for i, line in enumerate(lines) if line.rstrip().endswith(";") and "for" not in line)
    source = "\n".join([*lines[:broken], lines[broken].rstrip()[:-1], *lines[broken + 1 :]]) + "\n"
    candidate, failed = evaluate_source(session, source, space="pure_cuda", workdir=root / "compile", device=False)
    assert isinstance(failed, records.CompileFailed), failed
    feedback = execution_feedback(failed, candidate.source, "host_source.c")
    assert f"host_source.c:{broken + 2}:" in feedback or f"host_source.c:{broken + 1}:" in feedback
    assert "/host_source.c" not in feedback  # the build directory is not the model's business
    assert "The lines of `host_source.c` it cites:" in feedback
    assert f"{broken + 1:5d} | {lines[broken].rstrip()[:-1]}" in feedback


def test_a_crash_recorded_before_these_fields_still_loads():
    line = (
        '{"candidate": {"id": "c", "source": "", "space": "pure_cuda", "round": 1}, "evaluation": {"kind": "crashed",'
        ' "reason": "killed by SIGSEGV"}, "kind": "candidate_evaluated", "schema_version": %d, "wall_s": 1.0}'
        % records.SCHEMA_VERSION
    )
    evaluation = serialization.event_from_line(line).evaluation
    assert evaluation == records.Crashed(reason="killed by SIGSEGV")
    assert execution_feedback(evaluation) == "crashed: killed by SIGSEGV"


# --- repairs: a real run against a chat-completions server on 127.0.0.1 ------------------------------------

KEY_VAR = "HIERA_TEST_LLM_KEY"
CRASHING = crashing_on(37)
REPAIRED = CRASHING.replace("if (n == 37)", "if (n < 0)")
UNROLLED2, UNROLLED4 = (TEMPLATE.render({**TEMPLATE.defaults(), "unroll": u}) for u in (2, 4))
DECISION = {"space": "pure_cuda", "scores": {"C": 0.1, "P": 0.1, "M": 0.9, "R": 0.2, "T": 0.1}, "rationale": "memory bound"}
STRATEGY = {"name": "stream-rows", "steps": ["stream along rows"], "constraints": ["keep zero padding"]}
CONFIG = """\
[run]
workload = "stencil2d"
arch = "host"
backend = "openai"
rounds = 2
population = 2
remeasure = false
baselines = false

[workload.stencil2d]
host_n = 48

[evaluator.host-run]
min_time_s = 0.05

[backend.openai]
base_url = "{url}"
model = "fake-model"
api_key_env = "{key_var}"
concurrency = 2
"""


def respond(call):
    """The same decision and strategy every round; round 1 writes a candidate that crashes on the odd grid,
    round 2 answers the repair request with its fix."""
    if call.role == "ssda":
        return Reply(json.dumps(DECISION))
    if call.role == "spa":
        return Reply(json.dumps(STRATEGY))
    if "# Failed candidate to repair: " in call.prompt:
        source = REPAIRED
    else:
        source = {(1, 1): CRASHING, (1, 2): UNROLLED2}.get((call.round, call.request), UNROLLED4)
    return Reply(json.dumps({"candidates": [{"source": source}]}))


@pytest.mark.slow
def test_a_crash_is_repaired_from_its_failing_call_and_source_when_its_strategy_continues(hiera, tmp_path):
    key = f"sk-hiera-test-{secrets.token_hex(8)}"
    with ChatServer(respond, key=key) as server:
        (tmp_path / "hiera.toml").write_text(CONFIG.format(url=server.url, key_var=KEY_VAR))
        done = hiera("--run-dir", "run", env={KEY_VAR: key})
    assert done.returncode == 0, done.stderr
    events = RunStore.open(tmp_path / "run").events
    evaluated = {e.candidate.id: (e.candidate, e.evaluation) for e in events if isinstance(e, records.CandidateEvaluated)}
    [crashed] = [c for c, e in evaluated.values() if isinstance(e, records.Crashed)]
    assert crashed.round == 1 and crashed.source.strip() == CRASHING.strip()

    # round 2 continues round 1's strategy: one request starts from the best, the other repairs the crash
    fresh, repair = sorted((c for c in server.calls if c.role == "oa" and c.round == 2), key=lambda c: c.request)
    assert "# Starting point: " in fresh.prompt and "# Failed candidate to repair" not in fresh.prompt
    prompt = repair.prompt
    assert f"# Failed candidate to repair: `{crashed.id}`" in prompt
    assert CRASHING.strip() in prompt  # the failed source itself
    assert "crashed: killed by SIGSEGV" in prompt
    assert "The call it crashed in: odd (n=37), seed 1, uniform inputs" in prompt
    assert "The last lines its process wrote to stderr:\n```\nabout to write row 37\n```" in prompt
    assert "Find why it failed" in prompt and "1. stream along rows" in prompt

    # the repair is recorded as one: its parent is the failed candidate, its origin says so, and it is correct
    [fixed] = [c for c, _ in evaluated.values() if c.source.strip() == REPAIRED.strip()]
    assert fixed.round == 2 and fixed.parent_id == crashed.id and fixed.origin == "openai fake-model (repair)"
    assert isinstance(evaluated[fixed.id][1], records.Measured)
    [other] = [c for c, _ in evaluated.values() if c.round == 2 and c.id != fixed.id]
    assert other.origin == "openai fake-model" and other.parent_id != crashed.id

    # its replay asks for repairs too (a replayed expert run asks for none: the expert never repairs)
    assert ReplayBackend(ReplayConfig(source=str(tmp_path / "run")), None).repairs


def _plan(round_, direction):
    decision = records.SpaceDecision(space="pure_cuda", scores={direction: 1.0})
    strategy = records.Strategy(space="pure_cuda", direction=direction, name="s")
    return records.Plan(round=round_, decision=decision, strategy=strategy, parent_id=None)


@pytest.mark.parametrize(
    "k, repairs, last_direction, failure, expected",
    [
        (2, True, "M", records.Crashed(reason="killed"), True),
        (2, True, "M", records.CompileFailed(log="error", compile_s=0.1), True),
        (2, True, "M", records.Incorrect(reason="wrong"), True),
        (1, True, "M", records.Crashed(reason="killed"), False),  # K = 1: the one request stays with the best
        (2, True, "C", records.Crashed(reason="killed"), False),  # the strategy changed: its failure is not this round's
        (2, False, "M", records.Crashed(reason="killed"), False),  # a backend that cannot repair (the expert)
        (2, True, "M", records.TimedOut(limit_s=4), False),  # slow, perhaps correct: not a bug to fix
    ],
    ids=["crash", "compile", "incorrect", "k1", "new-direction", "no-repairs", "timed-out"],
)
def test_a_repair_is_asked_only_when_the_failed_candidate_s_strategy_continues(k, repairs, last_direction, failure, expected):
    failed = records.Candidate(id="f", source="int x;", space="pure_cuda", round=1, direction=last_direction)
    ctx = SimpleNamespace(round=2, plans=[_plan(1, last_direction)], history=[(failed, failure)])
    target = repair_target(SimpleNamespace(repairs=repairs), ctx, _plan(2, "M"), k)
    assert target == ((failed, failure) if expected else None)


def test_a_call_that_raises_leaves_its_backtrace_in_the_runner_s_log():
    """A cuda candidate's C++ error arrives as a Python exception in its runner: the reply names it in one line, and
    the backtrace goes to the runner's stderr, whose end the Crashed record and the model's feedback carry."""
    import json
    import subprocess
    import sys

    from hiera_core.serialization import to_dict
    from hiera_judge.messages import Order, StartBatch

    code = (
        "from hiera_judge import judging\n"
        "def candidate_call(order):\n    raise RuntimeError('CUDA error: an illegal memory access was encountered')\n"
        "judging.serve(candidate_call)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(to_dict(StartBatch(), Order)) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert replies[-1]["raised"] is True and "illegal memory access" in replies[-1]["reason"], replies
    assert "Traceback" in done.stderr and "in candidate_call" in done.stderr, done.stderr
