"""Answers read strictly and helpfully, through a real host run against a real chat-completions server on
127.0.0.1: every schema violation named at once, an answer cut off (at the token limit, or mid-JSON or
mid-fence while the server says "stop") named as such and asked again shorter, nothing outside the
schema taken from the answer, and what the model wrote shown literally in the report and on the console."""

import json
import re
import secrets

import pytest
from llm_chat_server import Reply, answered_run

from hiera_core import AgentAnswer, AgentRequest, records
from hiera_core.agents import AnswerCache, SchemaError, cut_off, ssda_schema, validate
from hiera_core.report import inline
from hiera_core.store import RunStore
from hiera_workloads.stencil2d.host import HostStencilTemplate

KEY_VAR = "HIERA_TEST_LLM_KEY"
TEMPLATE = HostStencilTemplate()
UNROLLED2, UNROLLED4, BLOCKED = (
    TEMPLATE.render({**TEMPLATE.defaults(), **knobs}) for knobs in ({"unroll": 2}, {"unroll": 4}, {"block_cols": 256})
)

SSDA = {
    "space": "pure_cuda",
    "scores": {"C": 0.9, "P": 0.1, "M": 0.3, "R": 0.2, "T": 0.4},
    "rationale": "branches | in\nthe loop",
}
BAD_SSDA = {"space": "gpu", "scores": {"C": 1.5, "P": "high", "M": 0.3, "R": 0.2, "X": 0.1}}
"""Six violations: an unknown space, a score out of range, a score not a number, T missing, X unknown, no rationale."""
STRATEGY = "tile [/] rows | `<b>x</b>`\n| injected | row |"
"""A strategy name (the model's to give) that is a table row, HTML and rich markup all at once."""
SPA = {"name": STRATEGY, "steps": ["split the interior from the boundary"], "constraints": []}
INJECTED = {"origin": "evil | model\n| injected | row |", "parent_id": "made-up-parent", "params": "not a dict"}


def candidates(source: str, **extra) -> str:
    return json.dumps({"candidates": [{"source": source, **extra}]})


def respond(call) -> Reply:
    """One fault per request, each answered properly when asked again."""
    again = call.attempt > 1
    if call.role == "ssda":
        return Reply(json.dumps(SSDA if again else BAD_SSDA))
    if call.role == "spa":  # cut off inside a JSON string, though the server says "stop"
        return Reply(json.dumps(SPA) if again else '{"name": "split", "steps": ["split the interior from the bou')
    if call.request == 1:  # cut off at the token limit
        return Reply(candidates(UNROLLED2)) if again else Reply(candidates(UNROLLED2)[:300], finish_reason="length")
    if call.request == 2:  # cut off inside a code fence, though the server says "stop"
        return Reply(candidates(UNROLLED4)) if again else Reply(f"Here it is:\n```c\n{UNROLLED4[:400]}")
    if call.request == 3:  # fields the schema does not own: ignored, not refused
        return Reply(candidates(BLOCKED, **INJECTED))
    return Reply(json.dumps({"candidates": [{"source": ["| injected |", "<b>x</b>"]}]}))  # never usable: quoted in a note


CONFIG = """\
[run]
workload = "stencil2d"
arch = "host"
backend = "openai"
rounds = 1
population = 4
remeasure = false

[workload.stencil2d]
host_n = 48

[backend.openai]
base_url = "{url}"
model = "fake-model"
api_key_env = "HIERA_TEST_LLM_KEY"
max_retries = 0
concurrency = 4
"""


def table(report: str, header: str) -> list[str]:
    """The lines of the Markdown table that starts with `header`, header and rule included."""
    lines = report.splitlines()
    start = lines.index(header)
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


def cells(line: str) -> int:
    """How many cells a Markdown table line has (escaped pipes are text, not separators)."""
    return len(re.findall(r"(?<!\\)\|", line)) - 1


@pytest.mark.slow
def test_every_answer_fault_is_named_asked_again_and_kept_out_of_the_record_and_the_report(hiera, tmp_path):
    server, done = answered_run(hiera, tmp_path, respond, CONFIG, key=f"sk-hiera-test-{secrets.token_hex(12)}", key_var=KEY_VAR)
    assert done.returncode == 0, done.stderr
    events = RunStore.open(tmp_path / "run").events
    calls = {(c.role, c.sample, c.attempt): c.error for c in events if isinstance(c, records.AgentCalled)}
    asked = {(c.role, c.request, c.attempt): c.prompt for c in server.calls}

    # every schema violation at once, with its path, in the error and in the prompt asked again
    violations = [
        "answer lacks rationale",
        'answer.space must be one of "pure_cuda", "cuda_libraries", "libraries_pytorch", got "gpu"',
        "answer.scores lacks T",
        "answer.scores has unknown keys X",
        "answer.scores.C = 1.5 is outside [0, 1]",
        'answer.scores.P must be a JSON number, got "high"',
    ]
    assert calls["ssda", 0, 1] == "unusable answer: 6 schema violations: " + "; ".join(violations)
    assert all(v in asked["ssda", 1, 2] for v in violations) and calls["ssda", 0, 2] is None

    # cut off: by the token limit, inside a JSON string and inside a code fence while the server said "stop";
    # each named as such, shown where it ended, asked again shorter, and answered
    assert calls["oa", 0, 1].startswith("unusable answer: the answer was cut off at the output-token limit; ")
    assert calls["spa", 0, 1].startswith("unusable answer: the answer was cut off inside a JSON string that it never closes; ")
    assert calls["oa", 1, 1].startswith(
        "unusable answer: the answer was cut off inside a code fence (```c) that it never closes; "
    )
    for role, request in (("spa", 1), ("oa", 1), ("oa", 2)):
        again = asked[role, request, 2]
        assert (
            "# Your previous answer (attempt 1) was cut off" in again
            and "Answer again, exactly in the format asked for and shorter" in again
        )
    assert "It ended:\n" in asked["oa", 2, 2] and UNROLLED4[:400][-100:] + "\n\nAnswer again" in asked["oa", 2, 2]
    assert all(calls[role, sample, 2] is None for role, sample in (("spa", 0), ("oa", 0), ("oa", 1)))

    # fields the schema does not own are ignored: the answer is used on its first attempt, and origin,
    # parent and parameters are hiera's
    assert calls["oa", 2, 1] is None and ("oa", 2, 2) not in calls
    seed = next(e.candidate for e in events if isinstance(e, records.CandidateEvaluated) and e.candidate.round == 0)
    batch = next(e for e in events if isinstance(e, records.CandidatesGenerated) and e.round == 1)
    assert [c.source.strip() for c in batch.candidates] == [UNROLLED2.strip(), UNROLLED4.strip(), BLOCKED.strip()]
    assert {(c.origin, c.parent_id, json.dumps(c.params)) for c in batch.candidates} == {("openai fake-model", seed.id, "{}")}
    assert batch.notes[0].startswith("oa request 4: no usable answer") and '"| injected |", "<b>x</b>"' in batch.notes[0]
    assert '"additionalProperties": true' in asked["oa", 3, 1] and "any other key is ignored" in asked["oa", 3, 1]

    # the report shows the model's strategy name literally, and its tables keep their columns
    report = (tmp_path / "run" / "report.md").read_text()
    rounds = table(report, "| round | space | direction | strategy | valid / evaluated | round best (ms) | best so far (ms) |")
    assert [cells(line) for line in rounds] == [7] * 4
    assert r"| tile \[/\] rows \| \`\<b\>x\</b\>\` \| injected \| row \| |" in rounds[-1]
    listed = table(report, "| id | round | space | dir | origin | outcome |")
    assert [cells(line) for line in listed] == [6] * len(listed) and len(listed) == 2 + 4
    notes = [line for line in report.splitlines() if line.startswith("- round 1: ")]
    assert (
        notes == [f"- round 1: {inline(note)}" for note in batch.notes]
        and r'got \["\| injected \|", "\<b\>x\</b\>"\]' in notes[0]
    )
    assert "<b>" not in report and "made-up-parent" not in report and "evil" not in report
    # and so does the console, where rich would otherwise read `[/]` as markup and stop the run
    assert "strategy tile [/] rows | `<b>x</b>` | injected | row |" in done.stdout


def test_every_schema_violation_is_reported_at_once_with_its_path():
    schema = ssda_schema(["pure_cuda"], ["C", "M"])
    with pytest.raises(SchemaError) as raised:
        validate({"space": "gpu", "scores": {"C": 2, "X": 0}}, schema)
    assert raised.value.violations == [
        "answer lacks rationale",
        'answer.space must be one of "pure_cuda", got "gpu"',
        "answer.scores lacks M",
        "answer.scores has unknown keys X",
        "answer.scores.C = 2 is outside [0, 1]",
    ]
    assert str(raised.value).startswith("5 schema violations: ")
    with pytest.raises(SchemaError, match=r"13 schema violations: .*; and 1 more$"):
        validate(
            {"candidates": [{"source": ""}] * 12},
            {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "candidates": {
                        "type": "array",
                        "items": {"type": "object", "properties": {"source": {"type": "string", "minLength": 1}}},
                    }
                },
            },
        )


@pytest.mark.parametrize(
    "text, where",
    [
        ('{"source": "int f(void) { return', "inside a JSON string that it never closes"),
        ('Sure:\n{"name": "x", "steps": ["a", "b"', "inside a JSON object that it never closes"),
        ("Here:\n```c\nint f(void)\n{\n    for (;;) {\n", "inside a code fence (```c) that it never closes"),
        ('```json\n{"candidates": [{"source": "int f(void) {', "inside a JSON string that it never closes"),
        ("```\nint f(void) {\n", "inside a code fence (```) that it never closes"),
        ("Done.\n```c\nint f(void) { return 0; }\n```\n", None),
        ('{"a": "}"} and {x} [y]', None),
        ("I cannot write this kernel.", None),
    ],
    ids=["json-string", "json-object", "code-fence", "json-in-fence", "bare-fence", "closed-fence", "closed-json", "prose"],
)
def test_an_answer_that_ends_inside_what_it_opened_is_seen_as_cut_off(text, where):
    assert cut_off(text) == where


def test_the_labels_a_backend_gives_travel_with_its_recorded_answer(tmp_path):
    label = records.SourceLabel(origin="stencil unroll=2", params={"unroll": 2}, parent_id="abc")
    request = AgentRequest(role="oa", prompt="p", context={}, round=1, candidates=1)
    cache = AnswerCache(tmp_path)
    cache.put(request, AgentAnswer(text=candidates("int x;"), labels=[label]), "expert")
    assert cache.get(request).labels == [label]
