"""The agent layer: tolerant answer parsing, schemas, what the prompts hold, asking again with the
error, parallel OA requests, and the answer cache that makes a resumed run pay nothing twice."""

import json
import threading

import pytest

from hiera_core import AgentAnswer, hookimpl, records
from hiera_core.agents import extract_json, ssda_schema, validate
from hiera_core.config import load_config
from hiera_core.engine import Engine, create_run
from hiera_core.plugins import make_plugin_manager
from hiera_core.session import Session
from hiera_core.store import TRAJECTORY, RunStore
from hiera_workloads.stencil2d.host import HostStencilTemplate

TEMPLATE = HostStencilTemplate()
UNROLLED = TEMPLATE.render({**TEMPLATE.defaults(), "unroll": 2})
STREAMING = TEMPLATE.render({**TEMPLATE.defaults(), "loop_order": "row_streaming"})


@pytest.mark.parametrize(
    "text, expected",
    [
        ('Sure.\n```json\n{"a": 1}\n```\nDone.', {"a": 1}),
        ('The plan is {"a": {"b": [1, 2]}} and nothing more {}.', {"a": {"b": [1, 2]}}),
        ('{"a": [1, 2,], "b": 3,}', {"a": [1, 2], "b": 3}),
        ('{"source": "int f(void)\n{\n    return 0;\n}"}', {"source": "int f(void)\n{\n    return 0;\n}"}),
        ('{"source": "if (x) { y(\\"}\\"); }", "n": 1', {"source": 'if (x) { y("}"); }', "n": 1}),
        ('```json\n{"a": {"b": 1}\n```', {"a": {"b": 1}}),
    ],
    ids=["fenced-with-prose", "bare-with-prose", "trailing-commas", "raw-newlines", "braces-in-strings", "missing-brace"],
)
def test_minor_json_damage_is_repaired(text, expected):
    assert extract_json(text) == expected


def test_a_cut_off_answer_is_not_completed_by_guessing():
    assert extract_json('{"a": {"b": 1}', complete=True) == {"a": {"b": 1}}
    with pytest.raises(ValueError, match="no JSON object"):
        extract_json('{"a": {"b": 1}', complete=False)
    with pytest.raises(ValueError, match="no JSON object"):
        extract_json('{"source": "int main(void) { return')


def test_schema_errors_name_the_path_and_the_rule():
    schema = ssda_schema(["pure_cuda"], ["C", "M"])
    good = {"space": "pure_cuda", "scores": {"C": 0.5, "M": 1}, "rationale": ""}
    validate(good, schema)
    for bad, message in [
        ({**good, "space": "gpu"}, 'answer.space must be one of "pure_cuda", got "gpu"'),
        ({**good, "scores": {"C": 0.5}}, "answer.scores lacks M"),
        ({**good, "scores": {"C": 1.5, "M": 0}}, r"answer.scores.C = 1.5 is outside \[0, 1\]"),
        ({**good, "scores": {"C": "high", "M": 0}}, 'answer.scores.C must be a JSON number, got "high"'),
        ({**good, "scores": {"C": 0, "M": 0, "X": 0}}, "answer.scores has unknown keys X"),
        ({"scores": good["scores"]}, "answer lacks space, rationale"),
    ]:
        with pytest.raises(ValueError, match=message):
            validate(bad, schema)


class ScriptedModel:
    """A model in-process: answers by role and request, records every request it is asked."""

    name = "scripted-model"
    config_class = None
    parallel_requests = 2
    candidates_per_request = 1
    requests: list = []
    in_flight = {"now": 0, "most": 0}
    lock = threading.Lock()

    def __init__(self, config, context):
        pass

    def answer(self, request):
        with self.lock:
            self.requests.append(request)
            self.in_flight["now"] += 1
            self.in_flight["most"] = max(self.in_flight["most"], self.in_flight["now"])
        try:
            if request.role == "ssda":
                score = 1.5 if request.attempt == 1 else 0.9  # out of range first: asked again with the error
                data = {"space": "pure_cuda", "scores": {"C": 0.1, "P": 0.1, "M": score, "R": 0.1, "T": 0.1}, "rationale": "r"}
                return AgentAnswer(text=json.dumps(data), input_tokens=100, output_tokens=10, model="m1", cost_usd=0.001)
            if request.role == "spa":
                data = {"name": "stream-rows", "steps": ["stream along rows"], "constraints": ["keep zero padding"]}
                return AgentAnswer(text=json.dumps(data), input_tokens=100, output_tokens=10, model="m1", cost_usd=0.001)
            threading.Event().wait(0.2)  # long enough for the two OA requests to overlap
            source = (UNROLLED, STREAMING)[request.sample]
            return AgentAnswer(text=f"```c\n{source}```", input_tokens=100, output_tokens=500, model="m1", cost_usd=0.002)
        finally:
            with self.lock:
                self.in_flight["now"] -= 1


class Registers:
    @hookimpl
    def hiera_register_backends(self):
        return [ScriptedModel]


def _engine(tmp_path, run_dir=None):
    config = load_config(
        tmp_path,
        environ={},
        cli={"arch": "host", "rounds": 1, "population": 2, "backend": "scripted-model"},
        overrides=["workload.stencil2d.host_n=48", "run.remeasure=false"],
    )
    session = Session.create(config, make_plugin_manager(extra_plugins=[Registers()]))
    store = RunStore.open(run_dir) if run_dir else create_run(session, tmp_path / "run")
    return Engine(session, store)


@pytest.mark.slow
def test_prompts_quote_the_contract_the_plugins_knowledge_and_the_profile_and_oa_asks_in_parallel(tmp_path):
    ScriptedModel.requests.clear()
    engine = _engine(tmp_path)
    engine.optimize()
    by_role = {}
    for request in ScriptedModel.requests:
        by_role.setdefault(request.role, []).append(request)
    ssda, spa, oa = by_role["ssda"], by_role["spa"], by_role["oa"]
    session, contract = engine.session, engine.contract

    assert [r.attempt for r in ssda] == [1, 2]
    assert "answer.scores.M = 1.5 is outside [0, 1]" in ssda[1].prompt and "Answer again" in ssda[1].prompt
    first = ssda[0].prompt
    assert contract.interface.strip() in first and "`host_source.c`" in first and "cuda_source.cu" not in first
    assert contract.files["stencil2d.h"].strip() in first
    knowledge = session.context.knowledge  # the host architecture's, for C on a CPU
    assert all(knowledge[d].rubric in first for d in session.directions)
    assert "branch_free_fraction" in first and "smsp__" not in first and "shared memory" not in first
    assert all(session.context.space_rules[s.name] in first for s in session.spaces)
    seed = engine.history[0][0]
    assert seed.source.strip() in first
    assert "metrics (host-timer), by unit:" in first and "- P: parallel_utilization" in first and "top findings:" in first

    assert knowledge["M"].knowledge in spa[0].prompt and session.directions["M"].description in spa[0].prompt
    assert [s.name for s in knowledge["M"].strategies_for(0)] == ["unit-stride-row-streaming"]
    assert "- unit-stride-row-streaming: Order the loops" in spa[0].prompt and "threadIdx" not in spa[0].prompt
    assert "space pure_cuda, direction M" in spa[0].prompt

    assert sorted(r.sample for r in oa) == [0, 1] and all(r.candidates == 1 for r in oa)
    assert "This is request 1 of 2" in oa[0].prompt or "This is request 1 of 2" in oa[1].prompt
    assert all("1. stream along rows" in r.prompt and "- keep zero padding" in r.prompt for r in oa)
    assert ScriptedModel.in_flight["most"] == 2

    batch = next(e for e in engine.store.events if isinstance(e, records.CandidatesGenerated) and e.round == 1)
    assert [c.source.strip() for c in batch.candidates] == [UNROLLED.strip(), STREAMING.strip()]
    assert {(c.direction, c.strategy, c.origin) for c in batch.candidates} == {("M", "stream-rows", "scripted-model m1")}
    assert batch.wall_s >= 0.2
    calls = [e for e in engine.store.events if isinstance(e, records.AgentCalled)]
    assert len(calls) == 5 and sum(c.cost_usd for c in calls) == pytest.approx(0.007)
    assert [c.error is not None for c in calls if c.role == "ssda"] == [True, False]


class Vectors:
    """A third party's direction that no architecture plugin knows on the host."""

    name, order, title, description, signals, config_class = "V", 5, "Vectors", "Wide vector instructions.", (), None

    def __init__(self, config):
        pass

    def score(self, profile):
        return 0.0, "V: no signal"


class ScriptedVectorModel(ScriptedModel):
    name = "scripted-vector-model"

    def answer(self, request):
        if request.role == "ssda":
            self.requests.append(request)
            data = {
                "space": "pure_cuda",
                "scores": {"C": 0.1, "P": 0.1, "M": 0.1, "R": 0.1, "T": 0.1, "V": 0.9},
                "rationale": "r",
            }
            return AgentAnswer(text=json.dumps(data))
        return super().answer(request)


class RegistersVectors:
    @hookimpl
    def hiera_register_directions(self):
        return [Vectors]

    @hookimpl
    def hiera_register_backends(self):
        return [ScriptedVectorModel]


@pytest.mark.slow
def test_prompts_say_when_no_plugin_knows_a_direction_on_this_architecture(tmp_path):
    ScriptedModel.requests.clear()
    config = load_config(
        tmp_path,
        environ={},
        cli={"arch": "host", "rounds": 1, "population": 2, "backend": "scripted-vector-model"},
        overrides=["workload.stencil2d.host_n=48", "run.remeasure=false"],
    )
    session = Session.create(config, make_plugin_manager(extra_plugins=[RegistersVectors()]))
    Engine(session, create_run(session, tmp_path / "run")).optimize()
    [ssda] = [r for r in ScriptedModel.requests if r.role == "ssda"]
    [spa] = [r for r in ScriptedModel.requests if r.role == "spa"]
    assert (
        "- V (Vectors): Wide vector instructions.\n  Rubric: No installed plugin gives a rubric for V on 'host' architectures"
    ) in ssda.prompt
    assert "No installed plugin knows direction V on 'host' architectures" in spa.prompt
    assert (
        "# Known strategies for V in pure_cuda\n- none known here on 'host' architectures: devise one from the profile"
    ) in spa.prompt


@pytest.mark.slow
def test_a_resumed_run_answers_from_the_cache_and_calls_the_backend_for_nothing(tmp_path):
    ScriptedModel.requests.clear()
    engine = _engine(tmp_path)
    engine.optimize()
    asked = len(ScriptedModel.requests)
    first_ids = [e.candidate.id for e in engine.store.events if isinstance(e, records.CandidateEvaluated)]

    # as if killed right after the initial candidate: the trajectory ends with round 0
    trajectory = tmp_path / "run" / TRAJECTORY
    lines = trajectory.read_text().splitlines()
    end = next(i for i, line in enumerate(lines) if '"kind": "round_finished"' in line)
    trajectory.write_text("\n".join(lines[: end + 1]) + "\n")

    resumed = _engine(tmp_path, run_dir=tmp_path / "run")
    resumed.optimize()
    assert len(ScriptedModel.requests) == asked
    calls = [e for e in resumed.store.events if isinstance(e, records.AgentCalled)]
    assert len(calls) == 5 and all(c.cached for c in calls)
    assert [e.candidate.id for e in resumed.store.events if isinstance(e, records.CandidateEvaluated)] == first_ids
    assert "| total | 5 | 5 | 1 | 0 | 0 | 0.0000 |" in (tmp_path / "run" / "report.md").read_text()


def test_the_paper_s_search_and_its_two_baselines_are_installed_and_hiera_is_the_default():
    from hiera_core.plugins import collect, make_plugin_manager, run_defaults

    pm = make_plugin_manager()
    assert collect(pm, "searches").names() == ["caesar", "cudaforge", "hiera"]
    assert run_defaults(pm)["strategy"] == "hiera"
