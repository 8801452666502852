"""hiera as a library (docs/embedding.md): its example runs as written, runs in one process keep their plugins
and settings apart, and bad input raises a typed error instead of exiting."""

import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import hiera_core
from hiera_core import hookimpl
from hiera_core.config import ConfigError
from hiera_core.plugins import UnknownName
from hiera_core.records import Measured
from hiera_core.store import RunStore

DOC = Path(__file__).parents[1] / "docs" / "embedding.md"


def _files(tmp_path: Path) -> None:
    """docs/embedding.md's Python blocks, each into the file its first line names."""
    for block in re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S):
        name = block.splitlines()[0].removeprefix("# ").strip()
        if name.endswith(".py"):
            (tmp_path / name).write_text(block)


@pytest.mark.slow
def test_the_documented_example_runs_as_written(tmp_path):
    _files(tmp_path)
    done = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if not re.match(r"^\d{4}-\d\d-\d\d ", line)]  # structlog's default
    found = re.match(r"best [0-9a-f]{16}: [0-9.]+ ms, [0-9.]+x numpy; (\d+) candidates, 2 plans; report .*report.md$", lines[0])
    assert found, lines
    assert lines[1:] == [
        f"watched {found.group(1)} evaluations",
        "replayed from its recorded answers: the same candidates",
        "a wrong candidate: Incorrect",
        "refused: settings: [run]: rounds: expected an integer, got 2.5 (a float)",
    ]


class Tiny:
    """An in-process plugin: the scale workload of the docs (imported from the example's module)."""

    def __init__(self, workload):
        self.workload = workload

    @hookimpl
    def hiera_register_workloads(self):
        return [self.workload]


@pytest.fixture
def scale(tmp_path, monkeypatch):
    _files(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    import scale_workload

    yield scale_workload.Scale
    sys.modules.pop("scale_workload", None)


@pytest.mark.slow
def test_two_runs_in_one_process_keep_their_plugins_and_settings_apart(tmp_path, scale):
    small = {"arch": "host", "rounds": 0, "remeasure": False}
    first = hiera_core.run(
        workload="scale", plugins=[Tiny(scale)], config={"workload": {"scale": {"n": 4096}}}, run_dir=str(tmp_path / "a"), **small
    )
    assert isinstance(first.best_evaluation, Measured)
    with pytest.raises(UnknownName, match="unknown workload 'scale'"):  # the first run's plugin is not installed here
        hiera_core.run(workload="scale", run_dir=str(tmp_path / "b"), **small)

    results, errors = {}, []

    def one(name, n):
        try:
            results[name] = hiera_core.run(
                workload="scale",
                plugins=[Tiny(scale)],
                config={"workload": {"scale": {"n": n}}},
                run_dir=str(tmp_path / name),
                **small,
            )
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(name, n)) for name, n in (("c", 2048), ("d", 8192))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    for name, n in (("c", 2048), ("d", 8192)):
        manifest = RunStore.open(tmp_path / name).manifest
        assert manifest.config["workload"]["scale"]["n"] == n and manifest.task.name == f"scale-n{n}"
        assert isinstance(results[name].best_evaluation, Measured)


def test_bad_settings_raise_a_typed_error_not_system_exit(tmp_path):
    with pytest.raises(ConfigError, match=r"rounds: expected an integer, got 2.5"):
        hiera_core.run(workload="stencil2d", arch="host", rounds=2.5, run_dir=str(tmp_path / "r"))
    with pytest.raises(hiera_core.HieraError, match=r"unknown key|roundz"):
        hiera_core.settings(roundz=3)
    with pytest.raises(UnknownName, match="unknown space 'anywhere'"):
        hiera_core.evaluate("int x;", workload="stencil2d", arch="host", space="anywhere")
    with pytest.raises(ConfigError, match=r"run_dir: expected a string, got 5 \(an integer\)"):
        hiera_core.run(workload="stencil2d", arch="host", run_dir=5)
    assert hiera_core.settings(run_dir=tmp_path / "r").run.run_dir == str(tmp_path / "r")  # a Path is a path

    class Observer:
        @hiera_core.hookimpl
        def hiera_run_finished(self, context, run_dir, best):
            pass

    with pytest.raises(
        hiera_core.HieraError, match=r"plugin .*Observer is a class: register an instance \(.*Observer\(\)\) or a module"
    ):
        hiera_core.run(workload="stencil2d", arch="host", plugins=[Observer], run_dir=str(tmp_path / "r"))
    assert not (tmp_path / "r").exists() and not Path("5").exists()
