import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

signal.signal(signal.SIGINT, signal.default_int_handler)
"""SIGINT stops the tests (pytest's summary, its exit status) even where the parent left it ignored, as a script
without job control does for its background commands: research/gpu_tests.sh's pytest on the lent GPU machine went on
past its SIGINT to the call's end (2026-12-07)."""

HIERA = Path(sys.executable).with_name("hiera")
PLUGINS = Path(__file__).parent / "plugins"
SMALL = ["--set", "workload.stencil2d.host_n=192"]
"""A host grid small enough that a whole loop takes seconds."""


def run_hiera(*args: str, cwd: Path, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the installed `hiera` console script, as a user would."""
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")]))}
    environ.update(env or {})
    return subprocess.run([str(HIERA), *args], cwd=cwd, env=environ, capture_output=True, text=True, timeout=timeout)


def write_distribution(site: Path, name: str, version: str, entry_points: dict[str, str], modules: dict[str, str]) -> Path:
    """An installed distribution in `site` as pip leaves one (its dist-info: metadata and `hiera` entry points) with
    its modules' sources; `site` on the import path makes it found like any other."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text("[hiera]\n" + "".join(f"{ep} = {value}\n" for ep, value in entry_points.items()))
    for module, source in modules.items():
        (site / f"{module}.py").write_text(source)
    return site


@pytest.fixture(scope="session", autouse=True)
def home_of_its_own(tmp_path_factory):
    """hiera keeps its caches under ~/.cache/hiera (builds, baselines, the machine's peaks): the suite's, and the
    `hiera` processes it starts, go to a home of the session's own, so a test run neither reads nor changes the user's."""
    saved = os.environ.get("HOME")
    os.environ["HOME"] = str(tmp_path_factory.mktemp("home"))
    yield
    if saved is None:
        os.environ.pop("HOME", None)
    else:
        os.environ["HOME"] = saved


@pytest.fixture
def hiera(tmp_path):
    def call(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
        return run_hiera(*args, cwd=tmp_path, env=env, timeout=timeout)

    return call


def running_in(root: Path) -> list[str]:
    """The processes (that this one may inspect) working in a folder under `root`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and Path(os.readlink(proc / "cwd")).is_relative_to(root.resolve()):
                found.append(proc.name)
        except OSError:
            continue
    return found
