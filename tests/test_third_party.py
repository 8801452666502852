"""A plugin distribution installed with pip is found through its entry point and takes part in a run."""

import subprocess
import sys
import textwrap

import pytest
from conftest import run_hiera

from hiera_core import records
from hiera_core.store import RunStore

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

PYPROJECT = """
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "hiera-acme"
version = "0.3.0"

[project.entry-points.hiera]
acme = "hiera_acme"
"""


def pip_install(tmp_path, distribution: str, package: str, code: str) -> dict[str, str]:
    """Build `distribution` (one module `package`, entry point named after it) and install it with pip into a
    folder of its own; the environment that puts it on the path."""
    source = tmp_path / distribution
    (source / package).mkdir(parents=True)
    entry = distribution.removeprefix("hiera-")
    (source / "pyproject.toml").write_text(
        textwrap.dedent(PYPROJECT)
        .replace('name = "hiera-acme"', f'name = "{distribution}"')
        .replace('acme = "hiera_acme"', f'{entry} = "{package}"')
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
    assert "acme  (hiera-acme 0.3.0; entry point acme = hiera_acme)" in listing.stdout
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


ARCH_PLUGIN = '''
"""hiera-acme-cpu: an architecture `acme-cpu` for C candidates (kind `host`) and a space `acme_asm`."""
import os
import shutil
from typing import ClassVar

import attrs

from hiera_core import SourceRule, hookimpl, violation

RULES = [
    SourceRule(r"#\\s*pragma\\s+omp\\b", "an OpenMP pragma", 1),
    SourceRule(r"\\b__asm__\\b|\\basm\\s*\\(", "inline assembly", 3),
]


@attrs.frozen(kw_only=True)
class AcmeConfig:
    cflags: list[str] = attrs.field(factory=lambda: ["-O2", "-fopenmp"])


class AcmeCpu:
    name: ClassVar[str] = "acme-cpu"
    kind: ClassVar[str] = "host"
    preference: ClassVar[int] = 5
    config_class: ClassVar[type] = AcmeConfig

    def __init__(self, config):
        self.config = config

    def unavailable_reason(self):
        return None if shutil.which("cc") else "no cc"

    def check_source(self, source, rank):
        return violation(source, RULES, rank)

    def hardware(self):
        return {"model": "acme reference board", "cores": os.cpu_count()}

    def toolchain(self):
        return {"cc": "cc", "cflags": list(self.config.cflags)}

    def peaks(self, dtype):
        return 1e4, 1e5  # the datasheet's (GB/s, GFLOP/s): floors far below anything measured here


class AcmeAsm:
    name: ClassVar[str] = "acme_asm"
    rank: ClassVar[int] = 3
    config_class = None
    description: ClassVar[str] = "Anything of the other spaces, plus inline assembly."

    def __init__(self, config):
        pass


@hookimpl
def hiera_register_architectures():
    return [AcmeCpu]


@hookimpl
def hiera_register_spaces():
    return [AcmeAsm]
'''


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


DIRECTION_PLUGIN = '''
"""hiera-occupancy: a direction O that steers the parallelism knobs workloads already have."""
from typing import ClassVar

from hiera_core import DirectionKnowledge, StrategyTemplate, hookimpl


class Occupancy:
    name: ClassVar[str] = "O"
    order: ClassVar[int] = 0
    moves: ClassVar[tuple[str, ...]] = ("P",)
    signals: ClassVar[tuple[str, ...]] = ("memory_floor_fraction",)
    title: ClassVar[str] = "Occupancy"
    description: ClassVar[str] = "Keep every core busy."
    config_class = None

    def __init__(self, config):
        pass

    def score(self, profile):
        if profile is None or "memory_floor_fraction" not in profile.signals:
            return 0.0, "O: no memory_floor_fraction"
        fraction = profile.signals["memory_floor_fraction"]
        return (1.0 if fraction < 0.5 else 0.0), f"O: the memory floor is {fraction:.2f} of the time: cores idle"


@hookimpl
def hiera_register_directions():
    return [Occupancy]


@hookimpl
def hiera_direction_knowledge(direction, kind):
    if direction != "O":
        return None
    return DirectionKnowledge(knowledge="Idle cores waste the memory system.", rubric="High when cores idle.",
                              strategies=((), (StrategyTemplate(name="occupy every core", steps=("thread it",)),)))
'''

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
