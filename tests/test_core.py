"""The core on its own: records, configuration, plugin loading and layering."""

import subprocess
import sys
import types
from pathlib import Path

import pytest
from conftest import write_distribution

from hiera_core import hookimpl, hookspecs, records, serialization
from hiera_core.config import ConfigError, load_config
from hiera_core.plugins import PluginError, collect, make_plugin_manager

CORE = Path(__file__).parents[1] / "hiera_core"


def test_importing_the_core_loads_no_heavy_library_and_no_plugin():
    code = "import sys, hiera_core, hiera_core.cli, hiera_core.engine; print(sorted(m for m in ('torch', 'cupy', 'openai', 'numpy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    for path in CORE.glob("*.py"):
        text = path.read_text()
        for package in ("hiera_plugins", "hiera_directions", "hiera_workloads"):
            assert f"import {package}" not in text and f"from {package}" not in text, (path, package)


def test_every_hook_documents_its_contract():
    hooks = [name for name in dir(hookspecs) if name.startswith("hiera_")]
    assert len(hooks) >= 13
    for name in hooks:
        assert len((getattr(hookspecs, name).__doc__ or "").strip()) > 40, name


def test_every_record_round_trips_through_json():
    profile = records.Profile(source="t", metrics={"a_ms": 1.0}, signals={"x": 0.5}, findings=["f"])
    candidate = records.Candidate(id="c1", source="int f;", space="pure_cuda", round=1, direction="M", params={"u": 2})
    evaluations = [
        records.StaticRejected(reason="r"),
        records.CompileFailed(log="l", compile_s=1.0),
        records.Incorrect(reason="r", max_abs_error=0.5),
        records.Crashed(reason="SIGSEGV"),
        records.TimedOut(limit_s=5),
        records.Measured(
            latency_ms=1, latency_p10_ms=1, latency_p90_ms=2, repeats=5, reference_latency_ms=3, max_abs_error=0, profile=profile
        ),
    ]
    for evaluation in evaluations:
        event = records.CandidateEvaluated(candidate=candidate, evaluation=evaluation, wall_s=0.1)
        line = serialization.event_to_line(event)
        assert serialization.event_from_line(line) == event
        assert f'"schema_version": {records.SCHEMA_VERSION}' in line
    decision = records.SpaceDecision(space="pure_cuda", scores={"C": 0.1, "M": 0.9})
    plan = records.Plan(
        round=1, decision=decision, strategy=records.Strategy(space="pure_cuda", direction="M", name="s"), parent_id=None
    )
    assert serialization.event_from_line(serialization.event_to_line(records.PlanMade(plan=plan))).plan.decision.direction == "M"


def test_a_record_of_another_schema_is_refused():
    line = serialization.event_to_line(records.RoundFinished(round=0, best_candidate_id=None, best_latency_ms=None))
    with pytest.raises(serialization.SchemaMismatch):
        serialization.event_from_line(line.replace(f'"schema_version": {records.SCHEMA_VERSION}', '"schema_version": 99'))


def test_precedence_is_cli_then_environment_then_file_then_defaults(tmp_path):
    (tmp_path / "hiera.toml").write_text('[run]\nrounds = 5\npopulation = 3\nspace = "pure_cuda"\n')
    config = load_config(tmp_path, environ={"HIERA_POPULATION": "7", "HIERA_SPACE": "cuda_libraries"}, cli={"space": "adaptive"})
    assert (config.run.rounds, config.run.population, config.run.space, config.run.parents) == (5, 7, "adaptive", 2)
    assert config.source.endswith("hiera.toml")


def test_pyproject_tool_table_is_read_when_there_is_no_hiera_toml(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n[tool.hiera.run]\nrounds = 9\n[tool.hiera.workload.stencil2d]\nhost_n = 64\n'
    )
    config = load_config(tmp_path, environ={})
    assert config.run.rounds == 9
    assert config.plugin_tables["workload"] == {"stencil2d": {"host_n": 64}}


@pytest.mark.parametrize(
    "text, expected",
    [
        ("[run\nrounds = 1", "not valid TOML"),
        ("[run]\nroundz = 1", "roundz"),
        ("[run]\nrounds = 'three'", "rounds"),
        ('[run]\nplanning = "no"', '[run]: planning: expected a boolean (true or false), got "no" (a string)'),
        ("[run]\nrounds = 2.7", "[run]: rounds: expected an integer, got 2.7 (a float)"),
        ("[run]\nrounds = true", "[run]: rounds: expected an integer, got true (a boolean)"),
        ("[run]\nfloor_margin = '0.5'", '[run]: floor_margin: expected a number, got "0.5" (a string)'),
        ("[bogus]\nx = 1", "unknown table(s) bogus"),
        ("[workload]\nn = 1", "one table per plugin"),
    ],
)
def test_a_malformed_config_names_the_file_key_and_reason(tmp_path, text, expected):
    (tmp_path / "hiera.toml").write_text(text)
    with pytest.raises(ConfigError) as error:
        load_config(tmp_path, environ={})
    assert str(tmp_path / "hiera.toml") in str(error.value)
    assert expected in str(error.value)


def test_a_value_of_another_type_is_refused_not_rounded_and_a_number_field_takes_an_integer(tmp_path):
    with pytest.raises(ConfigError, match=r"^\[run\]: rounds: expected an integer, got 2.7 \(a float\)$"):
        load_config(tmp_path, environ={}, overrides=["run.rounds=2.7"])
    config = load_config(tmp_path, environ={"HIERA_FLOOR_MARGIN": "0.5"}, overrides=["run.max_speedup=50"])
    assert (config.run.floor_margin, config.run.max_speedup) == (0.5, 50.0)


def test_a_bad_environment_value_is_named():
    with pytest.raises(ConfigError, match="HIERA_ROUNDS"):
        load_config(Path("/nonexistent"), environ={"HIERA_ROUNDS": "many"})


def _plugin(**hooks):
    module = types.ModuleType("plugin_" + "_".join(hooks))
    for name, function in hooks.items():
        setattr(module, name, hookimpl(function))
    return module


def test_a_name_registered_twice_is_an_error_naming_both():
    class A:
        name = "same"

    class B:
        name = "same"

    pm = make_plugin_manager(
        autoload=False,
        extra_plugins=[
            _plugin(hiera_register_workloads=lambda: [A]),
            types.SimpleNamespace(hiera_register_workloads=hookimpl(lambda: [B])),
        ],
    )
    with pytest.raises(PluginError, match=r"registered twice: by .*A and by .*B|registered twice: by .*B and by .*A"):
        collect(pm, "workloads")


def test_a_misspelt_hook_fails_loudly():
    with pytest.raises(PluginError, match="hiera_register_workload"):
        make_plugin_manager(autoload=False, extra_plugins=[_plugin(hiera_register_workload=lambda: [])])


def test_a_blocked_plugin_is_not_loaded(monkeypatch):
    monkeypatch.setenv("HIERA_DISABLE_PLUGINS", "stencil2d")
    workloads = collect(make_plugin_manager(), "workloads")
    assert "stencil2d" not in workloads.classes


BROKEN_PLUGIN = "import hiera_core\nimport a_module_nobody_installed\n"
"""A plugin whose import fails, as one does when its own dependency is missing."""


def test_a_plugin_that_fails_to_import_is_named_with_its_entry_point_and_distribution(tmp_path, monkeypatch):
    write_distribution(tmp_path, "hiera-broken", "0.2.0", {"broken": "hiera_broken"}, {"hiera_broken": BROKEN_PLUGIN})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError) as error:
        make_plugin_manager()
    assert str(error.value) == (
        "plugin 'broken' (entry point broken = hiera_broken of distribution hiera-broken 0.2.0) cannot be loaded:"
        " ModuleNotFoundError: No module named 'a_module_nobody_installed'; HIERA_DISABLE_PLUGINS=broken skips it"
    )
    monkeypatch.setenv("HIERA_DISABLE_PLUGINS", "broken")
    assert "stencil2d" in collect(make_plugin_manager(), "workloads").classes


def test_the_run_log_keeps_every_hiera_event_and_only_warnings_of_other_libraries(tmp_path):
    """On the H200, matplotlib's font search filled a KernelBench task's hiera.log.jsonl with 1200 lines."""
    import json
    import logging

    import structlog

    from hiera_core.logging import configure_logging

    configure_logging(json_file=tmp_path / "hiera.log.jsonl")
    structlog.get_logger("hiera_core.engine").debug("candidate_built", candidate="c1")
    logging.getLogger("matplotlib.font_manager").info("findfont: score(...)")
    logging.getLogger("matplotlib").warning("a real warning")
    lines = [json.loads(line) for line in (tmp_path / "hiera.log.jsonl").read_text().splitlines()]
    assert [line["event"] for line in lines] == ["candidate_built", "a real warning"]
    logging.getLogger().handlers.clear()


CORE_ALONE = """
import importlib, os, pkgutil, sys
from importlib.metadata import entry_points

class Block:  # the built-in plugins' packages are gone
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("hiera_plugins", "hiera_workloads", "hiera_directions", "hiera_contracts"):
            raise ImportError(f"deleted: {name}")

sys.meta_path.insert(0, Block())
import hiera_core
for module in pkgutil.walk_packages(hiera_core.__path__, "hiera_core."):
    importlib.import_module(module.name)
os.environ["HIERA_DISABLE_PLUGINS"] = ",".join(ep.name for ep in entry_points(group="hiera") if ep.dist.name == "hiera")
from hiera_core.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_the_core_imports_and_answers_with_every_built_in_plugin_deleted(tmp_path):
    """hiera_core imports no plugin: with the built-in packages gone, every core module imports, and the command
    line still answers, naming what is missing in one line."""

    def hiera(*args):
        return subprocess.run([sys.executable, "-c", CORE_ALONE, *args], cwd=tmp_path, capture_output=True, text=True, timeout=60)

    listing = hiera("plugins")
    assert listing.returncode == 0 and "direction" not in listing.stdout, listing.stdout + listing.stderr
    done = hiera("--rounds", "1")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "hiera: error: no workload given, and no installed plugin is the default one (choose with --workload: none installed)"
    )
