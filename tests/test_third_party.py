"""A plugin distribution installed with pip is found through its entry point and takes part in a run. The guide's
two complete examples (docs/plugins.md: a direction, an architecture with a space) are installed from the guide."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_hiera

from hiera_core import records
from hiera_core.store import RunStore

GUIDE = (Path(__file__).parents[1] / "docs" / "plugins.md").read_text()


def guide_block(language: str, first_line: str) -> str:
    """The guide's one fenced `language` block whose first line starts with `first_line`, as a file holds it."""
    blocks = re.findall(rf"^```{language}\n(.*?)^```$", GUIDE, re.M | re.S)
    [block] = [b for b in blocks if b.startswith(first_line)]
    return block


ARCH_PLUGIN = guide_block("python", '"""hiera-acme-cpu:')
DIRECTION_PLUGIN = guide_block("python", '"""hiera-occupancy:')
PYPROJECT = guide_block("toml", "[build-system]")
"""The guide's `pyproject.toml` of hiera-occupancy: `pip_install` renames its distribution and entry point."""

PLUGIN = '''
"""hiera-acme: a direction V and a workload `scale` for the host architecture."""
import ctypes
from typing import ClassVar

import attrs
import numpy as np

from hiera_core import DirectionKnowledge, Knob, StrategyTemplate, UnsupportedArchitecture, hookimpl
from hiera_core.records import Contract, Task

SOURCE = """void scale(long n, double a, const double *x, double *y) {
    %s
    for (long i = 0; i < n; i++) y[i] = a * x[i];
}"""


class Vectorize:
    name: ClassVar[str] = "V"
    title: ClassVar[str] = "vectorisation"
    description: ClassVar[str] = "Wide vector instructions."
    config_class = None

    def __init__(self, config):
        pass

    def score(self, profile):
        return (0.99, "V: acme always wants vectors") if profile else (0.0, "no profile")


ON_A_CPU = DirectionKnowledge(
    knowledge="Use the widest vector unit.",
    rubric="High when the hot loop is scalar.",
    strategies=((StrategyTemplate(name="vectorize", steps=("vectorize the hot loop",)),),),  # from rank 0 up
)


class ScaleTemplate:
    name = "scale-host"
    knobs = {"pragma": Knob(values=("", "#pragma GCC ivdep"), direction="V", space="pure_cuda")}

    def render(self, params):
        return SOURCE % params["pragma"]

    def describe(self, params):
        return f"scale-host pragma={params['pragma'] or 'none'}"


@attrs.frozen(kw_only=True)
class ScaleConfig:
    n: int = 4096


class Harness:
    symbol = "scale"
    distributions = ("uniform", "normal")
    tolerance = (1e-12, 0.0)

    def __init__(self, n):
        self.n = n

    def correctness_cases(self, remeasure):
        return [{"label": f"n={self.n}", "n": self.n}, {"label": "n=3", "n": 3}]

    def seeds(self, remeasure):
        return (11, 12, 13) if remeasure else (1, 2, 3)

    def make_inputs(self, case, seed, distribution):
        rng = np.random.default_rng(seed)
        x = rng.uniform(-1, 1, case["n"]) if distribution == "uniform" else rng.normal(size=case["n"])
        return {"x": x}

    def reference(self, case, inputs):
        return 2.5 * inputs["x"]

    def output(self, case):
        return np.empty(case["n"])

    def call(self, lib, case, inputs, out):
        pointer = ctypes.POINTER(ctypes.c_double)
        lib.scale(ctypes.c_long(case["n"]), ctypes.c_double(2.5), inputs["x"].ctypes.data_as(pointer), out.ctypes.data_as(pointer))

    def timing_case(self):
        return {"label": f"n={self.n}", "n": self.n}

    def cache_case(self):
        return {"label": "n=1024", "n": 1024}

    def points(self, case):
        return case["n"]


class Scale:
    name: ClassVar[str] = "scale"
    config_class: ClassVar[type] = ScaleConfig

    def __init__(self, config):
        self.config = config

    def tasks(self):
        return [Task(workload="scale", name=f"scale-n{self.config.n}", params={"n": self.config.n}, description="y = 2.5 x")]

    def contract(self, task, arch):
        if arch != "host":
            raise UnsupportedArchitecture(arch)
        return Contract(source_filename="host_source.c", interface="void scale(long n, double a, const double *x, double *y);")

    def templates(self, task, arch):
        return [ScaleTemplate()]

    def seed(self, task, arch):
        template = ScaleTemplate()
        params = {"pragma": ""}
        return template.render(params), params, template.describe(params)

    def work(self, task, arch):
        return 16.0 * task.params["n"], 1.0 * task.params["n"]

    def harness(self, task, arch):
        return Harness(task.params["n"])


@hookimpl
def hiera_register_directions():
    return [Vectorize]


@hookimpl
def hiera_direction_knowledge(direction, kind):
    return ON_A_CPU if (direction, kind) == ("V", "host") else None


@hookimpl
def hiera_register_workloads():
    return [Scale]
'''


def pip_install(tmp_path, distribution: str, package: str, code: str) -> dict[str, str]:
    """Build `distribution` (one module `package`, entry point named after it) and install it with pip into a
    folder of its own; the environment that puts it on the path."""
    source = tmp_path / distribution
    (source / package).mkdir(parents=True)
    entry = distribution.removeprefix("hiera-")
    (source / "pyproject.toml").write_text(
        PYPROJECT.replace('name = "hiera-occupancy"', f'name = "{distribution}"').replace(
            'occupancy = "hiera_occupancy"', f'{entry} = "{package}"'
        )
    )
    (source / package / "__init__.py").write_text(code)
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(source),
        ],
        check=True,
    )
    return {"PYTHONPATH": str(site)}


@pytest.mark.slow
def test_a_pip_installed_plugin_shows_up_and_runs(tmp_path):
    env = pip_install(tmp_path, "hiera-acme", "hiera_acme", PLUGIN)

    listing = run_hiera("plugins", cwd=tmp_path, env=env)
    assert listing.returncode == 0, listing.stderr
    assert "acme  (hiera-acme 0.1.0; entry point acme = hiera_acme)" in listing.stdout
    assert "directions: V" in listing.stdout and "workloads: scale" in listing.stdout

    done = run_hiera(
        "--workload", "scale", "--arch", "host", "--rounds", "1", "--population", "2", "--run-dir", "run", cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr
    events = RunStore.open(tmp_path / "run").events
    [plan] = [e.plan for e in events if isinstance(e, records.PlanMade)]
    assert plan.decision.direction == "V" and plan.strategy.name == "vectorize"
    measured = [e for e in events if isinstance(e, records.CandidateEvaluated) and isinstance(e.evaluation, records.Measured)]
    assert len(measured) == 2


@pytest.mark.slow
def test_a_run_recorded_before_a_direction_was_installed_replays_only_without_it(tmp_path):
    """Its plans scored C M P R T and no recorded answer scores acme's V: with V installed every round's planning
    would fail, so the replay refuses in one line naming the plugin to leave out, and replays the run without it."""
    small = ["--workload", "stencil2d", "--arch", "host", "--set", "workload.stencil2d.host_n=32", "--set", "run.remeasure=false"]
    recorded = run_hiera(*small, "--rounds", "1", "--population", "2", "--run-dir", "recorded", cwd=tmp_path)
    assert recorded.returncode == 0, recorded.stderr
    env = pip_install(tmp_path, "hiera-acme", "hiera_acme", PLUGIN)

    refused = run_hiera("run", "--replay", "recorded", "--run-dir", "again", cwd=tmp_path, env=env)
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        f"hiera: error: {tmp_path / 'recorded'} cannot be replayed with direction(s) V: its plans scored only C, M, P, R, T,"
        " and no recorded answer scores the others; replay it without them: HIERA_DISABLE_PLUGINS=acme"
    ]
    replayed = run_hiera(
        "run", "--replay", "recorded", "--run-dir", "again", cwd=tmp_path, env={**env, "HIERA_DISABLE_PLUGINS": "acme"}
    )
    assert replayed.returncode == 0, replayed.stderr
    decisions = [
        [e.plan.decision for e in RunStore.open(tmp_path / run).events if isinstance(e, records.PlanMade)]
        for run in ("recorded", "again")
    ]
    assert len(decisions[0]) == 1 and decisions[1] == decisions[0]

    gone = run_hiera(
        "run", "--replay", "recorded", "--run-dir", "later", cwd=tmp_path, env={"HIERA_DISABLE_PLUGINS": "direction-t"}
    )
    assert gone.returncode == 2
    assert gone.stderr.splitlines() == [
        f"hiera: error: {tmp_path / 'recorded'} cannot be replayed: its plans scored"
        " direction(s) T, which no installed plugin provides now"
    ]


@pytest.mark.slow
def test_a_pip_installed_architecture_and_space_run_the_host_loop_under_their_own_names(tmp_path):
    """Nothing in hiera_core or the built-ins names `acme-cpu` or `acme_asm`: the architecture's kind (`host`)
    brings the workload's C side and the host evaluators, its own rules check the sources by rank."""
    env = pip_install(tmp_path, "hiera-acme-cpu", "hiera_acme_cpu", ARCH_PLUGIN)
    listing = run_hiera("plugins", cwd=tmp_path, env=env)
    assert "architectures: acme-cpu" in listing.stdout and "spaces: acme_asm" in listing.stdout, listing.stdout + listing.stderr

    done = run_hiera(
        "--workload",
        "stencil2d",
        "--arch",
        "acme-cpu",
        "--space",
        "acme_asm",
        "--rounds",
        "1",
        "--population",
        "2",
        "--set",
        "workload.stencil2d.host_n=64",
        "--run-dir",
        "run",
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "on acme-cpu" in done.stdout
    store = RunStore.open(tmp_path / "run")
    assert store.manifest.config["run"]["arch"] == "acme-cpu"
    evaluated = [e for e in store.events if isinstance(e, records.CandidateEvaluated)]
    assert {e.candidate.space for e in evaluated} == {"acme_asm"}
    assert any(isinstance(e.evaluation, records.Measured) for e in evaluated)

    asm = tmp_path / "asm.c"
    asm.write_text('int hiera_stencil2d(void) { __asm__("nop"); return 0; }\n')
    checked = run_hiera(
        "eval",
        str(asm),
        "--workload",
        "stencil2d",
        "--arch",
        "acme-cpu",
        "--space",
        "cuda_libraries",
        "--set",
        "workload.stencil2d.host_n=64",
        cwd=tmp_path,
        env=env,
    )
    assert "uses inline assembly" in checked.stdout + checked.stderr


NOTHING_PLUGIN = '''
"""hiera-nothing: a direction Z that steers no knob any workload has."""
from typing import ClassVar

from hiera_core import hookimpl


class Nothing:
    name: ClassVar[str] = "Z"
    order: ClassVar[int] = 0
    title: ClassVar[str] = "Nothing"
    description: ClassVar[str] = "Moves no knob any workload has."
    config_class = None

    def __init__(self, config):
        pass

    def score(self, profile):
        return 1.0, "Z: always keen"


@hookimpl
def hiera_register_directions():
    return [Nothing]
'''


@pytest.mark.slow
def test_a_pip_installed_direction_steers_existing_knobs_and_the_expert_picks_it(tmp_path):
    """The expert scores a third-party direction by its own rule and moves the knobs it declares (`moves`); a
    direction that moves no knob scores 0 there. With only that one, every score is 0: the search stops with a note,
    no strategy is asked for, and nothing raises."""
    env = pip_install(tmp_path, "hiera-occupancy", "hiera_occupancy", DIRECTION_PLUGIN)
    pip_install(tmp_path, "hiera-nothing", "hiera_nothing", NOTHING_PLUGIN)  # into the same folder
    small = [
        "--workload",
        "stencil2d",
        "--arch",
        "host",
        "--set",
        "workload.stencil2d.host_n=256",
        "--set",
        "run.remeasure=false",
        "--rounds",
        "1",
        "--population",
        "2",
    ]
    done = run_hiera(*small, "--run-dir", "run", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    events = RunStore.open(tmp_path / "run").events
    [plan] = [e.plan for e in events if isinstance(e, records.PlanMade)]
    assert plan.decision.direction == "O", plan.decision
    assert plan.decision.scores["Z"] == 0 and "Z: no untried move left" in plan.decision.rationale
    assert plan.strategy.name == "occupy every core"
    [batch] = [e for e in events if isinstance(e, records.CandidatesGenerated) and e.round == 1]
    assert len(batch.candidates) == 2 and all(c.direction == "O" and "threads=" in c.origin for c in batch.candidates)

    only_z = {**env, "HIERA_DISABLE_PLUGINS": "direction-c,direction-p,direction-m,direction-r,direction-t,occupancy"}
    alone = run_hiera(*small, "--run-dir", "alone", cwd=tmp_path, env=only_z)
    assert alone.returncode == 0, alone.stderr
    events = RunStore.open(tmp_path / "alone").events
    [plan] = [e.plan for e in events if isinstance(e, records.PlanMade)]
    assert plan.decision.exhausted and plan.strategy.name == "none: every direction scored 0"
    assert [e.notes for e in events if isinstance(e, records.CandidatesGenerated) and e.round == 1] == [
        [f"the search stops: the planner scored every direction 0 ({plan.decision.rationale})"]
    ]

    none = run_hiera(
        *small,
        "--run-dir",
        "none",
        cwd=tmp_path,
        env={**only_z, "HIERA_DISABLE_PLUGINS": only_z["HIERA_DISABLE_PLUGINS"] + ",nothing"},
    )
    assert none.returncode == 2 and not (tmp_path / "none").exists()
    assert none.stderr.splitlines() == [
        "hiera: error: the 'hiera' search plans by direction, and no direction plugin is"
        " installed or enabled (see HIERA_DISABLE_PLUGINS)"
    ]


SURFACE = {"hiera_core", "hiera_core.records", "hiera_core.protocols"}


@pytest.mark.parametrize("name", ["PLUGIN", "ARCH_PLUGIN", "DIRECTION_PLUGIN", "NOTHING_PLUGIN"])
def test_the_third_party_examples_use_nothing_but_the_plugin_surface(name):
    """A workload, a direction, an architecture and a space written by a third party import only what hiera_core
    exports (and its records and protocols modules): nothing of the built-in plugins or of the core's insides."""
    import ast

    tree = ast.parse(globals()[name])
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    ours = {m for m in imported if m and m.split(".")[0].startswith("hiera")}
    assert ours and ours <= SURFACE, ours - SURFACE
