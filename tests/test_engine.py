"""The engine embedded in another tool: observer hooks, plugin-added hooks, conformance, fast_p."""

import itertools
import os
import threading
import time
import types
from pathlib import Path

import attrs
import pluggy
import pytest

from hiera_contracts import check_plugins
from hiera_core import Knob, hookimpl, hookspecs, records
from hiera_core.config import load_config
from hiera_core.engine import Engine, create_run
from hiera_core.pipeline import Pipeline
from hiera_core.plugins import make_plugin_manager
from hiera_core.report import fast_p
from hiera_core.session import Session
from hiera_core.store import RunStore
from hiera_judge import judging

DOCS = Path(__file__).parents[1] / "docs" / "plugins.md"


class Recorder:
    def __init__(self):
        self.calls = []

    @hookimpl
    def hiera_run_started(self, context, manifest, run_dir):
        self.calls.append(("run_started", manifest.run_id))

    @hookimpl
    def hiera_plan_made(self, plan):
        self.calls.append(("plan_made", plan.round, plan.decision.space, plan.decision.direction))

    @hookimpl
    def hiera_candidate_evaluated(self, candidate, evaluation):
        self.calls.append(("candidate_evaluated", candidate.round, type(evaluation).__name__))

    @hookimpl
    def hiera_round_finished(self, round, best, best_latency_ms):
        self.calls.append(("round_finished", round, best_latency_ms is not None))

    @hookimpl
    def hiera_run_finished(self, run_dir, best):
        self.calls.append(("run_finished", (run_dir / "report.md").exists(), best is not None))


@pytest.mark.slow
def test_a_tool_embedding_the_core_sees_every_event_in_order(tmp_path):
    recorder = Recorder()
    config = load_config(
        tmp_path,
        environ={},
        cli={"arch": "host", "rounds": 1, "population": 2},
        overrides=["workload.stencil2d.host_n=48", "run.remeasure=false"],
    )
    session = Session.create(config, make_plugin_manager(extra_plugins=[recorder]))
    store = create_run(session, tmp_path / "run")
    best = Engine(session, store).optimize()
    assert best is not None
    kinds = [call[0] for call in recorder.calls]
    assert kinds == [
        "run_started",
        "candidate_evaluated",
        "round_finished",
        "plan_made",
        "candidate_evaluated",
        "candidate_evaluated",
        "round_finished",
        "run_finished",
    ]
    assert recorder.calls[-1] == ("run_finished", True, True)
    assert recorder.calls[3][1:3] == (1, "pure_cuda")


def test_a_plugin_can_add_its_own_hooks():
    spec_module = types.ModuleType("acme_specs")
    spec_module.acme_tuned = pluggy.HookspecMarker(hookspecs.PROJECT)(lambda knob: None)

    class Adds:
        @hookimpl
        def hiera_addhooks(self, pluginmanager):
            pluginmanager.add_hookspecs(spec_module)

        @hookimpl
        def acme_tuned(self, knob):
            return knob * 2

    pm = make_plugin_manager(autoload=False, extra_plugins=[Adds()])
    assert pm.hook.acme_tuned(knob=21) == [42]


def test_every_hook_is_in_the_plugin_guide():
    guide = DOCS.read_text()
    for name in dir(hookspecs):
        if name.startswith("hiera_"):
            assert f"`{name}(" in guide, name


def test_every_builtin_plugin_conforms_to_its_protocol():
    check_plugins(make_plugin_manager())


def test_the_conformance_kit_rejects_a_method_that_is_not_callable():
    class Scoreless:
        name = "V"
        title = description = "vectors"
        config_class = None
        score = 0.5

    registers = types.SimpleNamespace(hiera_register_directions=hookimpl(lambda: [Scoreless]))
    with pytest.raises(AssertionError) as error:
        check_plugins(make_plugin_manager(autoload=False, extra_plugins=[registers]))
    where = f"direction 'V' ({__name__}.{Scoreless.__qualname__})"
    assert f"{where}: `score` must be a method, not float 0.5" in str(error.value).splitlines()


def test_the_conformance_kit_rejects_direction_knowledge_that_is_not_a_record():
    from hiera_contracts.conformance import conformance_problems

    class Says:
        @hookimpl
        def hiera_direction_knowledge(self, direction, kind):
            return "use vectors" if direction == "C" else None

    says = Says()
    pm = make_plugin_manager(autoload=False, extra_plugins=["hiera_directions.control", "hiera_plugins.host", says])
    assert conformance_problems(pm) == [
        f"knowledge of the directions on 'host' architectures: plugin '{pm.get_name(says)}' answered"
        " hiera_direction_knowledge('C', 'host') with str, not DirectionKnowledge"
    ]


def _evaluated(speedups):
    events = []
    for i, speedup in enumerate(speedups):
        candidate = records.Candidate(id=str(i), source="", space="pure_cuda", round=min(i, 1))
        if speedup is None:
            evaluation = records.Incorrect(reason="wrong")
        else:
            evaluation = records.Measured(
                latency_ms=1.0, latency_p10_ms=1, latency_p90_ms=1, repeats=1, reference_latency_ms=speedup, max_abs_error=0
            )
        events.append(records.CandidateEvaluated(candidate=candidate, evaluation=evaluation, wall_s=0))
    return events


def test_fast_p_is_truncated_from_one_trajectory():
    rows = fast_p(_evaluated([None, 0.5, None, None, None, 1.5, None, 2.5]), budgets=(1, 2, 6, 12))
    assert [(r.fast_0, r.fast_1, r.fast_2) for r in rows] == [
        (False, False, False),
        (True, False, False),
        (True, True, False),
        (True, True, True),
    ]
    assert rows[-1].evaluated == 8 and rows[-1].best_speedup == 2.5


def stencil_variant(name: str, **methods):
    """A plugin registering the stencil2d workload under `name`, with some of its methods replaced."""

    class Variant:
        @hookimpl
        def hiera_register_workloads(self):
            from hiera_workloads.stencil2d.workload import Stencil2D

            return [type(name, (Stencil2D,), {"name": name, **methods})]

    return Variant()


@pytest.mark.slow  # 5 s or more on the 2-core machine
def test_a_task_without_a_seed_starts_from_nothing_and_says_why(tmp_path):
    from hiera_core import NoSeed

    def seed(self, task, arch):
        raise NoSeed("nothing to translate")

    config = load_config(
        tmp_path,
        environ={},
        cli={"workload": "unseeded", "arch": "host", "rounds": 1, "population": 2},
        overrides=["workload.unseeded.host_n=48", "run.remeasure=false"],
    )
    session = Session.create(config, make_plugin_manager(extra_plugins=[stencil_variant("unseeded", seed=seed)]))
    store = create_run(session, tmp_path / "run")
    Engine(session, store).optimize()
    batches = [e for e in store.events if isinstance(e, records.CandidatesGenerated)]
    assert batches[0].candidates == [] and "nothing to translate" in batches[0].notes[0]
    assert len(batches[1].candidates) == 2


def test_when_the_expert_has_no_move_left_the_search_stops_and_says_so(tmp_path):
    """A task whose seed has no expert move (most KernelBench level-1 tasks: one ATen call) ends after
    round 1's plan, with the reason in the trajectory; nobody is asked for candidates that cannot come."""

    config = load_config(
        tmp_path,
        environ={},
        cli={"workload": "nomoves", "arch": "host", "rounds": 3, "population": 2},
        overrides=["workload.nomoves.host_n=48", "run.remeasure=false"],
    )
    session = Session.create(
        config, make_plugin_manager(extra_plugins=[stencil_variant("nomoves", templates=lambda self, task, arch: [])])
    )
    store = create_run(session, tmp_path / "run")
    Engine(session, store).optimize()
    batches = [e for e in store.events if isinstance(e, records.CandidatesGenerated)]
    assert [b.round for b in batches] == [0, 1] and "the search stops" in batches[1].notes[0]
    assert not [e for e in store.events if isinstance(e, records.AgentCalled) and e.role == "oa"]
    assert "the search stops" in (store.path / "report.md").read_text()
    events = len(store.events)
    Engine(session, type(store).open(store.path)).optimize()  # resumed: nothing is redone
    assert len(type(store).open(store.path).events) == events


@pytest.mark.slow
def test_the_seed_is_evaluated_in_the_most_controlled_space_that_admits_it(tmp_path, monkeypatch):
    """A seed that uses a library (OpenMP threads here, ATen calls for KernelBench's translations) is not
    rejected by pure_cuda's check: it starts in the smallest allowed space that admits it; with `--space
    pure_cuda` it is rejected, with the reason."""

    plugins = str(Path(__file__).parent / "plugins")
    monkeypatch.syspath_prepend(plugins)
    monkeypatch.setenv("PYTHONPATH", plugins)  # the evaluation workers rebuild the workload by module name
    kinds, reasons = {}, {}
    for space in ("adaptive", "pure_cuda"):
        config = load_config(
            tmp_path,
            environ={},
            cli={"workload": "threaded", "arch": "host", "rounds": 0, "space": space},
            overrides=["workload.threaded.host_n=48", "run.remeasure=false"],
        )
        session = Session.create(config, make_plugin_manager(extra_plugins=["threaded_seed"]))
        store = create_run(session, tmp_path / space)
        Engine(session, store).optimize()
        [seed] = [e for e in store.events if isinstance(e, records.CandidateEvaluated)]
        kinds[space] = (seed.candidate.space, type(seed.evaluation).__name__)
        reasons[space] = getattr(seed.evaluation, "reason", "")
    assert kinds["adaptive"] == ("cuda_libraries", "Measured"), reasons
    assert kinds["pure_cuda"] == ("pure_cuda", "StaticRejected")


def test_without_a_profile_the_expert_moves_a_direction_that_has_a_move(tmp_path):
    """KernelBench's translation has one expert move (R: fuse a pointwise chain). With no profile to rank
    the directions (all score 0), the first round must still make that move, not an empty round of C."""
    from hiera_workloads.kernelbench.workload import KernelBench, KernelBenchConfig

    config = load_config(tmp_path, environ={}, cli={"arch": "host"}, overrides=["workload.stencil2d.host_n=48"])
    session = Session.create(config, make_plugin_manager())
    kernelbench = KernelBench(KernelBenchConfig(root=str(Path(__file__).parent / "plugins" / "kernelbench_tasks"), level=2))
    [task] = [t for t in kernelbench.tasks() if t.name == "1_Gemm_ReLU_Scaling"]
    session.backend.context = attrs.evolve(session.context, workload=kernelbench, kind="cuda")
    source, params, origin = kernelbench.seed(task, "cuda")
    seed = records.Candidate(id="s", source=source, space="libraries_pytorch", round=0, origin=origin, params=params)
    rejected = records.StaticRejected(reason="no profile")
    context = {
        "parent": seed,
        "parent_evaluation": rejected,
        "parents": [seed],
        "history": [(seed, rejected)],
        "allowed_spaces": [s.name for s in session.spaces],
        "task": task,
        "arch": "cuda",
        "kind": "cuda",
    }
    decision = session.backend.select_space(context)
    assert records.SpaceDecision(**decision).direction == "R" and decision["space"] == "libraries_pytorch"
    assert decision["scores"]["R"] > 0 and {d: s for d, s in decision["scores"].items() if d != "R"} == dict.fromkeys("CPMT", 0.0)


def test_the_expert_skips_a_direction_no_architecture_plugin_knows_on_this_kind(tmp_path):
    """A third party's direction V with a knob of its own in the stencil's host template, but no plugin that knows
    V on `host` architectures: it is still scored (a bug in its score would surface), then set to 0 with the reason,
    and the round plans a direction that has strategies."""
    from hiera_workloads.stencil2d import host

    class Vectors:
        name, order, title, description, signals, config_class = "V", 5, "Vectors", "Wide vector instructions.", (), None

        def __init__(self, config):
            pass

        def score(self, profile):
            return 0.99, "V: always wants vectors"

    class VectorTemplate(host.HostStencilTemplate):
        knobs = {**host.HostStencilTemplate.knobs, "ivdep": Knob(values=(False, True), direction="V", space="pure_cuda")}

        def render(self, params):
            return ("#pragma GCC ivdep\n" if params["ivdep"] else "") + super().render(params)

    plugin = types.SimpleNamespace(hiera_register_directions=hookimpl(lambda: [Vectors]))
    config = load_config(tmp_path, environ={}, cli={"arch": "host"}, overrides=["workload.stencil2d.host_n=48"])
    session = Session.create(config, make_plugin_manager(extra_plugins=[plugin]))
    assert session.context.knowledge["V"].strategies == () and "'host'" in session.context.knowledge["V"].rubric
    template = VectorTemplate()
    session.workload.templates = lambda task, kind: [template]
    params = template.defaults()
    seed = records.Candidate(
        id="s", source=template.render(params), space="pure_cuda", round=0, origin=template.describe(params), params=params
    )
    profile = records.Profile(source="test", signals={"branch_free_fraction": 0.0, "memory_floor_fraction": 0.1})
    measured = records.Measured(
        latency_ms=1, latency_p10_ms=1, latency_p90_ms=1, repeats=1, reference_latency_ms=2, max_abs_error=0, profile=profile
    )
    context = {
        "parent": seed,
        "parent_evaluation": measured,
        "parents": [seed],
        "history": [(seed, measured)],
        "allowed_spaces": [s.name for s in session.spaces],
        "task": session.task,
        "arch": "host",
        "kind": "host",
    }
    decision = records.SpaceDecision(**session.backend.select_space(context))
    assert decision.scores["V"] == 0.0 and "V: no strategy known on 'host' architectures" in decision.rationale
    assert decision.direction == "C"
    strategy = session.backend.plan_strategy({**context, "decision": decision})
    assert strategy["name"] == "split-interior-boundary"


def test_the_expert_does_not_give_up_the_best_candidates_library_features(tmp_path):
    """Once OpenMP threads (cuda_libraries on the host) made the best kernel, a new direction is tried
    in a space that keeps them, not in pure_cuda where the threads would have to go."""
    config = load_config(tmp_path, environ={}, cli={"arch": "host"}, overrides=["workload.stencil2d.host_n=48"])
    session = Session.create(config, make_plugin_manager())
    [template] = session.workload.templates(session.task, "host")
    params = {**template.defaults(), "boundary": "split", "threads": 0}
    parent = records.Candidate(
        id="p", source=template.render(params), space="cuda_libraries", round=1, origin=template.describe(params), params=params
    )
    profile = records.Profile(
        source="test",
        signals={
            "parallel_utilization": 1.0,
            "branch_free_fraction": 1.0,
            "cache_resilience": 1.0,
            "in_cache_compute_fraction": 1.0,
            "memory_floor_fraction": 0.1,
        },
    )
    measured = records.Measured(
        latency_ms=1, latency_p10_ms=1, latency_p90_ms=1, repeats=1, reference_latency_ms=2, max_abs_error=0, profile=profile
    )
    context = {
        "parent": parent,
        "parent_evaluation": measured,
        "parents": [parent],
        "history": [(parent, measured)],
        "allowed_spaces": [s.name for s in session.spaces],
        "task": session.task,
        "arch": "host",
        "kind": "host",
    }
    decision = session.backend.select_space(context)
    assert max(decision["scores"], key=decision["scores"].get) == "M"
    assert decision["space"] == "cuda_libraries"


def offer_baselines(monkeypatch) -> None:
    """The host stencil offers two baselines: the template unrolled by hand, and one that does not compile."""
    from hiera_workloads.stencil2d import host

    template = host.HostStencilTemplate()
    offered = [
        records.Baseline(
            name="unrolled by hand", space="pure_cuda", source=template.render({**template.defaults(), "unroll": 4})
        ),
        records.Baseline(name="broken", space="pure_cuda", source="int stencil2d(void) { return }"),
    ]
    monkeypatch.setattr(host, "baselines", lambda task: offered, raising=False)


@pytest.mark.slow
def test_a_workloads_baselines_are_measured_once_and_reported_beside_the_best(tmp_path, monkeypatch):
    """A workload's baselines go through the candidate pipeline beside the seed (their builds and device time
    overlap its), outside the budget; the report sets the best against each; a resumed run measures none of them
    again."""
    offer_baselines(monkeypatch)
    config = load_config(
        tmp_path,
        environ={},
        cli={"arch": "host", "rounds": 1, "population": 2},
        overrides=["workload.stencil2d.host_n=48", "run.remeasure=false", "executor.local.workers=3", 'run.baseline_cache=""'],
    )
    session = Session.create(config, make_plugin_manager())
    store = create_run(session, tmp_path / "run")
    Engine(session, store).optimize()

    events = store.events
    measured = [e for e in events if isinstance(e, records.BaselineEvaluated)]
    assert sorted((e.name, type(e.evaluation).__name__) for e in measured) == [
        ("broken", "CompileFailed"),
        ("unrolled by hand", "Measured"),
    ]
    seed = next(e for e in events if isinstance(e, records.CandidateEvaluated))
    assert seed.candidate.round == 0
    recorded = {id(e): at for e, at in zip(store.events, store.times)}
    seed_started = min(seed.timeline.stage_at.values())
    assert all(seed_started < recorded[id(e)] and min(e.timeline.stage_at.values()) < recorded[id(seed)] for e in measured)
    assert len([e for e in events if isinstance(e, records.CandidateEvaluated)]) == 3  # the budget is the candidates'
    report = (tmp_path / "run" / "report.md").read_text()
    assert "## Baselines (measured in this run)" in report
    assert "| unrolled by hand | pure_cuda |" in report and "| broken | pure_cuda | CompileFailed" in report

    Engine(session, store).optimize()  # resumed: nothing measured again
    assert len([e for e in store.events if isinstance(e, records.BaselineEvaluated)]) == 2


@pytest.mark.slow
def test_on_an_accelerator_the_baselines_are_judged_beside_the_search_not_before_it(tmp_path, monkeypatch):
    """Where the device stages occupy an accelerator, a workload's baselines no longer hold round 0 (the initial
    candidate, its profile and round 1 waited ~40 s for three baselines on an H100): they are judged beside the
    search, after the device's other waiters, and recorded once it ends; a resumed run measures none again."""
    from conftest import PLUGINS

    monkeypatch.syspath_prepend(str(PLUGINS))
    offer_baselines(monkeypatch)
    config = load_config(
        tmp_path,
        environ={},
        cli={"arch": "host-accelerated", "rounds": 1, "population": 2},
        overrides=["workload.stencil2d.host_n=48", "run.remeasure=false", 'run.baseline_cache=""'],
    )
    session = Session.create(config, make_plugin_manager(extra_plugins=["accelerated_host"]))
    store = create_run(session, tmp_path / "run")
    Engine(session, store).optimize()

    events = store.events
    kinds = [type(e).__name__ for e in events]
    assert sorted((e.name, type(e.evaluation).__name__) for e in events if isinstance(e, records.BaselineEvaluated)) == [
        ("broken", "CompileFailed"),
        ("unrolled by hand", "Measured"),
    ]
    assert "BaselineEvaluated" not in kinds[: kinds.index("RoundFinished")]  # round 0 did not wait for them
    assert kinds.index("BaselineEvaluated") < kinds.index("RunFinished")
    assert "## Baselines (measured in this run)" in (tmp_path / "run" / "report.md").read_text()

    Engine(session, store).optimize()  # resumed: nothing measured again
    assert len([e for e in store.events if isinstance(e, records.BaselineEvaluated)]) == 2


def test_a_background_holder_takes_the_device_after_every_waiting_search_job(tmp_path, monkeypatch):
    monkeypatch.setattr(judging.tempfile, "gettempdir", lambda: str(tmp_path))
    order, held = [], threading.Event()

    def take(who: str, background: bool, wait_s: float = 0.0) -> None:
        time.sleep(wait_s)
        with judging.device_lock("test-device", background=background):
            order.append(who)
            if who == "first":
                held.set()
                time.sleep(0.4)  # meanwhile a baseline, then a candidate, ask for the device
            time.sleep(0.05)

    threads = [
        threading.Thread(target=take, args=("first", False)),
        threading.Thread(target=take, args=("baseline", True, 0.1)),
        threading.Thread(target=take, args=("candidate", False, 0.2)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert held.is_set() and order == ["first", "candidate", "baseline"]


@pytest.mark.slow
def test_a_baseline_measured_by_an_earlier_run_on_this_machine_is_taken_from_the_cache(tmp_path, monkeypatch):
    """The second run of a task records its measured baseline from the first run's (saying so), measures again
    what failed, and with the cache off measures everything."""
    offer_baselines(monkeypatch)

    def run(name: str, cache: str) -> list[records.BaselineEvaluated]:
        config = load_config(
            tmp_path,
            environ={},
            cli={"arch": "host", "rounds": 0},
            overrides=["workload.stencil2d.host_n=48", "run.remeasure=false", f'run.baseline_cache="{cache}"'],
        )
        session = Session.create(config, make_plugin_manager())
        store = create_run(session, tmp_path / name)
        Engine(session, store).optimize()
        return {e.name: e for e in store.events if isinstance(e, records.BaselineEvaluated)}

    cache = str(tmp_path / "cache")
    first, second = run("first", cache), run("second", cache)
    assert not first["unrolled by hand"].reused_from and isinstance(first["unrolled by hand"].evaluation, records.Measured)
    reused = second["unrolled by hand"]
    assert reused.evaluation == first["unrolled by hand"].evaluation and reused.reused_from.startswith("run ")
    assert reused.timeline.stage_at == {} and not (tmp_path / "second" / "baselines" / reused.candidate.id).exists()
    assert not second["broken"].reused_from  # a failure is measured again
    report = (tmp_path / "second" / "report.md").read_text()
    assert f"| unrolled by hand (measured in {reused.reused_from}) |" in report
    assert not run("third", "")["unrolled by hand"].reused_from


@pytest.mark.slow  # 5 s or more on the 2-core machine
def test_a_several_step_task_reports_the_time_and_the_floors_per_step(tmp_path):
    config = load_config(
        tmp_path,
        environ={},
        cli={"arch": "host", "rounds": 0},
        overrides=["workload.stencil2d.host_n=48", "workload.stencil2d.steps=4", "run.remeasure=false"],
    )
    session = Session.create(config, make_plugin_manager())
    store = create_run(session, tmp_path / "run")
    best = Engine(session, store).optimize()
    latency = store.evaluated()[best.id].evaluation.latency_ms
    report = (tmp_path / "run" / "report.md").read_text()
    assert f"amortised over the call's 4 steps: **{latency / 4:.4f} ms per step**" in report
    roofline = next(e.roofline for e in store.events if isinstance(e, records.RunStarted))
    assert roofline.bytes_moved == 2 * 8 * 48**2  # the grid read and written once a call, whatever its steps
    one = roofline.memory_floor_ms
    assert f"per step: memory floor {one:.4f} ms with one step a launch, {one / 2:.4f} ms with two kept on chip," in report
    assert f"{one / 4:.4f} ms with all 4 on chip; compute floor {roofline.compute_floor_ms / 4:.4f} ms" in report


def _measured(template, name, latency, **knobs):
    """(candidate, its measurement) of the stencil template with `knobs` on top of its defaults."""
    params = {**template.defaults(), **knobs}
    candidate = records.Candidate(
        id=name, source=template.render(params), space="pure_cuda", round=1, origin=template.describe(params), params=params
    )
    return candidate, records.Measured(
        latency_ms=latency, latency_p10_ms=latency, latency_p90_ms=latency, repeats=1, reference_latency_ms=120.0, max_abs_error=0
    )


def test_the_expert_refines_the_best_kernel_before_a_far_slower_parent(tmp_path):
    """Round 2 of the H200 run (2026-11-29): parents the ring kernel (0.590 ms) and a shared-memory tile
    (1.602 ms, 2.7x slower), direction M. That round spent one of its six candidates on the tile's 16-byte
    loads (1.544 ms); now all six start from the ring, the winning pair (16-byte loads + interior split) among them."""
    config = load_config(tmp_path, environ={}, cli={"arch": "host"}, overrides=["workload.stencil2d.host_n=48"])
    session = Session.create(config, make_plugin_manager())
    [template] = session.workload.templates(session.task, "cuda")

    seed = _measured(template, "seed", 1.660)
    ring, tile = _measured(template, "ring", 0.590, tiling="ring"), _measured(template, "tile", 1.602, tiling="smem")
    others = [_measured(template, "stream", 1.681, tiling="smem_stream")] + [
        _measured(template, block, latency, tiling="smem", block=block)
        for block, latency in (("64x4", 1.651), ("32x16", 1.774), ("128x2", 1.642))
    ]
    context = {
        "parents": [ring[0], tile[0]],
        "history": [seed, ring, tile, *others],
        "task": session.task,
        "arch": "cuda",
        "kind": "cuda",
        "allowed_spaces": [s.name for s in session.spaces],
    }
    moves = list(itertools.islice(session.backend._moves(context, "M", "pure_cuda"), 6))
    assert {parent for _, _, parent in moves} == {"ring"}
    assert any(params == {**ring[0].params, "vector_loads": True, "boundary": "split"} for _, params, _ in moves)


def test_a_pair_move_belongs_to_a_direction_only_when_the_directions_knob_shapes_the_kernel(tmp_path):
    """Round 2 of the radius-4 run on the H200 (2026-11-30), direction P from the ring: its fastest candidate was
    `block=64x4` (a P knob the ring does not use) with 16-byte loads, so the ring with 16-byte loads, an M move,
    reported as P's. Now every P move from the ring changes the ring's own P knob, its thread count."""
    config = load_config(tmp_path, environ={}, cli={"arch": "host"}, overrides=["workload.stencil2d.host_n=48"])
    session = Session.create(config, make_plugin_manager())
    [template] = session.workload.templates(session.task, "cuda")
    ring = _measured(template, "ring", 0.866, tiling="ring")
    params = ring[0].params
    context = {
        "parents": [ring[0]],
        "history": [ring],
        "task": session.task,
        "arch": "cuda",
        "kind": "cuda",
        "allowed_spaces": [s.name for s in session.spaces],
    }
    moves = list(session.backend._moves(context, "P", "pure_cuda"))
    assert moves and all(p["ring_threads"] != 128 for _, p, _ in moves if p["tiling"] == "ring")
    assert not any(p == {**params, "block": "64x4", "vector_loads": True} for _, p, _ in moves)


class _Overlap(Pipeline):
    """A pipeline whose evaluation only notes how many evaluations run at once."""

    def evaluate(self, job):
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(0.2)
        with self.lock:
            self.running -= 1
        return job


@pytest.mark.parametrize(("accelerator", "at_once"), [("GPU", 3), (None, 1)])
def test_by_default_a_rounds_candidates_overlap_only_where_the_device_has_its_own_lock(accelerator, at_once):
    """On a GPU a round's builds overlap each other and the device time of those built before (the device
    stages queue on the GPU lock); on the host, whose timing uses the CPU a build would take, one at a time."""
    from hiera_core.config import RunConfig
    from hiera_plugins.local import LocalConfig, LocalExecutor

    pipeline = _Overlap(arch=types.SimpleNamespace(accelerator=accelerator), evaluators=[], run=RunConfig())
    pipeline.lock, pipeline.running, pipeline.most = threading.Lock(), 0, 0
    done = list(LocalExecutor(LocalConfig()).run(["a", "b", "c"], pipeline))
    assert done == [("a", "a"), ("b", "b"), ("c", "c")]  # in the order written, whatever finished first
    assert pipeline.most == min(at_once, len(os.sched_getaffinity(0)))
    assert LocalExecutor(LocalConfig(workers=2)).workers(pipeline, 3) == 2  # a setting wins


class _Judging(Pipeline):
    def evaluate(self, job):
        with judging.device_lock("test-stopping"):
            time.sleep(0.6)  # a judge timing the candidate
        return job


def test_a_stopping_run_ends_its_waits_for_the_device_and_gives_what_was_judged():
    """Ctrl-C with a round's candidates queued on the GPU's lock: the one judging answers, the others stop waiting
    (to be judged when the run resumes) instead of each taking its turn, and what was judged is still given. On
    2026-12-07 a suite asked to stop this way outlasted its call's last minute and lost everything it had done."""
    from hiera_core.config import RunConfig
    from hiera_plugins.local import LocalConfig, LocalExecutor

    pipeline = _Judging(arch=types.SimpleNamespace(accelerator="GPU"), evaluators=[], run=RunConfig())
    executor = LocalExecutor(LocalConfig(workers=4))
    executor.open(pipeline)
    given = []
    started = time.monotonic()
    threading.Timer(0.3, executor.cancel).start()  # while one judges and three wait
    try:
        with pytest.raises(judging.Interrupted):
            for _job, evaluated in executor.run(["a", "b", "c", "d"], pipeline):
                given.append(evaluated)
    finally:
        executor.close()  # the last run of the process: the stop is cleared for the next
    assert len(given) == 1 and given[0] in "abcd"
    assert time.monotonic() - started < 1.5  # not four turns of 0.6 s


def test_a_judges_wait_for_a_place_on_the_gpu_ends_when_the_run_stops():
    release = judging.judge_slot("test-stopping-slots", 1, wait=True)
    threading.Timer(0.2, judging.interrupt_waits).start()
    try:
        with pytest.raises(judging.Interrupted):
            judging.judge_slot("test-stopping-slots", 1, wait=True)
    finally:
        judging.allow_waits()
        release()
    assert judging.judge_slot("test-stopping-slots", 1, wait=False) is not None


class Counters:
    """A host profiler that runs on demand, as `cuda-profile` does by default: on the parents only."""

    name, config_class, arch, order, holds_device, on_demand = "host-counters", None, "host", 30, True, True
    seen: list[str] = []

    def __init__(self, config):
        pass

    def evaluate(self, job):
        Counters.seen.append(job.candidate.id)
        profile = attrs.evolve(job.measured.profile, metrics={**job.measured.profile.metrics, "counted_calls": 1.0})
        return attrs.evolve(job.measured, profile=profile)


class CountersPlugin:
    @hookimpl
    def hiera_register_evaluators(self):
        return [Counters]


@pytest.mark.slow
def test_an_on_demand_profiler_runs_only_on_the_parents_planning_reads_and_a_resume_runs_it_on_none(tmp_path):
    Counters.seen.clear()
    config = load_config(
        tmp_path,
        environ={},
        cli={"arch": "host", "rounds": 2, "population": 2, "parents": 1},
        overrides=["workload.stencil2d.host_n=48", "run.remeasure=false", "run.baselines=false"],
    )

    def optimize():
        session = Session.create(config, make_plugin_manager(extra_plugins=[CountersPlugin()]))
        store = create_run(session, tmp_path / "run") if not (tmp_path / "run").exists() else RunStore.open(tmp_path / "run")
        Engine(session, store).optimize()
        return RunStore.open(tmp_path / "run")

    store = optimize()
    plans = [e.plan for e in store.events if isinstance(e, records.PlanMade)]
    profiled = [e for e in store.events if isinstance(e, records.CandidateProfiled)]
    assert len(plans) == 2 and Counters.seen == [e.candidate_id for e in profiled]
    assert set(Counters.seen) == {plan.parent_id for plan in plans}  # every parent planned from, once each
    assert all(e.evaluation.profile.metrics["counted_calls"] == 1.0 for e in profiled)
    evaluated = [e for e in store.events if isinstance(e, records.CandidateEvaluated)]
    assert len(evaluated) == 5 and not any("counted_calls" in e.evaluation.profile.metrics for e in evaluated)
    # each profile comes before the plan that reads it
    order = [
        ("profile", e.candidate_id) if isinstance(e, records.CandidateProfiled) else ("plan", e.plan.parent_id)
        for e in store.events
        if isinstance(e, records.CandidateProfiled | records.PlanMade)
    ]
    assert all(order.index(("profile", parent)) < order.index(("plan", parent)) for _, parent in order)

    lines = (tmp_path / "run" / "trajectory.jsonl").read_text().splitlines()  # killed before its last record
    (tmp_path / "run" / "trajectory.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    seen = list(Counters.seen)
    optimize()
    assert Counters.seen == seen


class TooLarge:
    """A first stage that finds no room for the task on the device, as the cuda judge does before loading a candidate
    when the task's buffers outgrow the whole GPU."""

    name, config_class, arch, order = "too-large", None, "host", 5

    def __init__(self, config):
        pass

    def evaluate(self, job):
        return records.Crashed(reason="the task does not fit in the GPU's memory: ...", task_too_large=True)


class TooLargePlugin:
    @hookimpl
    def hiera_register_evaluators(self):
        return [TooLarge]


def test_a_task_too_large_for_the_device_ends_after_its_initial_candidate_with_the_reason(tmp_path):
    """No candidate of a task the device cannot hold can be judged: nobody is asked to plan or write one."""
    config = load_config(
        tmp_path,
        environ={},
        cli={"arch": "host", "rounds": 2, "population": 2},
        overrides=["workload.stencil2d.host_n=48", "run.remeasure=false", "run.baselines=false"],
    )
    session = Session.create(config, make_plugin_manager(extra_plugins=[TooLargePlugin()]))
    store = create_run(session, tmp_path / "run")
    assert Engine(session, store).optimize() is None
    evaluated = [e for e in store.events if isinstance(e, records.CandidateEvaluated)]
    assert len(evaluated) == 1 and evaluated[0].evaluation.task_too_large
    assert not any(isinstance(e, records.PlanMade | records.AgentCalled) for e in store.events)
    assert "does not fit in the GPU's memory" in (tmp_path / "run" / "report.md").read_text()
