"""Answers read strictly and helpfully: every schema violation named at once, an answer cut off (at the
token limit, or mid-JSON or mid-fence while the server says "stop") named as such and asked again shorter,
and what a backend's own code says of its sources kept with its answer."""

import pytest

from hiera_core import AgentAnswer, AgentRequest, records
from hiera_core.agents import AnswerCache, SchemaError, cut_off, ssda_schema, validate


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
    with pytest.raises(SchemaError, match="13 schema violations: .*; and 1 more$"):
        validate({"candidates": [{"source": ""}] * 12}, {"type": "object", "required": ["name"], "properties": {
            "candidates": {"type": "array", "items": {"type": "object", "properties": {"source": {"type": "string", "minLength": 1}}}}}})


@pytest.mark.parametrize(
    "text, where",
    [
        ('{"source": "int f(void) { return', "inside a JSON string that it never closes"),
        ('Sure:\n{"name": "x", "steps": ["a", "b"', "inside a JSON object that it never closes"),
        ("Here:\n```c\nint f(void)\n{\n    for (;;) {\n", "inside a code fence (```c) that it never closes"),
        ('```json\n{"candidates": [{"source": "int f(void) {', "inside a JSON string that it never closes"),
        ("```\nint f(void) {\n", "inside a code fence (```) that it never closes"),
        ('Done.\n```c\nint f(void) { return 0; }\n```\n', None),
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
    cache.put(request, AgentAnswer(text='{"candidates": [{"source": "int x;"}]}', labels=[label]), "expert")
    assert cache.get(request).labels == [label]
