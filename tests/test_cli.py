"""What a user sees from the `hiera` command: plugins, configuration and bad input."""

import pytest
from conftest import write_distribution


def test_plugins_lists_every_builtin_with_its_distribution_and_entry_point(hiera):
    done = hiera("plugins")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for direction in ("C", "P", "M", "R", "T"):
        assert f"directions: {direction}" in out
    assert "spaces: pure_cuda, cuda_libraries, libraries_pytorch" in out
    assert "backends: expert" in out
    assert "architectures: host" in out
    assert "workloads: stencil2d" in out
    assert "hiera 0.1.0; entry point stencil2d = hiera_workloads.stencil2d.plugin" in out
    assert "hooks: hiera_register_workloads" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--workload", "nope"], "unknown workload 'nope' (choose from: kernelbench, stencil2d)"),
        (["--workload", "stencil2d", "--arch", "tpu"], "unknown architecture 'tpu' (choose from: cuda, host)"),
        (
            ["--workload", "stencil2d", "--space", "anywhere"],
            "unknown space 'anywhere' (choose from: adaptive, cuda_libraries, libraries_pytorch, pure_cuda)",
        ),
        (
            ["--workload", "stencil2d", "--backend", "gpt"],
            "unknown backend 'gpt' (choose from: exchange, expert, openai, replay)",
        ),
    ],
)
def test_an_unknown_name_gets_one_line_with_the_choices_and_exit_code_2(hiera, args, message):
    done = hiera(*args)
    assert done.returncode == 2
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr


def test_a_workload_without_a_contract_for_the_architecture_is_one_line_and_writes_nothing(hiera, tmp_path):
    from test_kernelbench import one_task_checkout

    one_task_checkout(tmp_path / "kb", 1, "1_Relu", init="pass", forward="return torch.relu(x)", inputs="torch.rand(8, 8)")
    done = hiera(
        "run",
        "--workload",
        "kernelbench",
        "--arch",
        "host",
        "--set",
        f"workload.kernelbench.root={tmp_path / 'kb'}",
        "--run-dir",
        "r",
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["hiera: error: kernelbench has a contract for cuda only, not host"]
    assert not (tmp_path / "r").exists()


def test_a_plugin_that_fails_to_import_stops_hiera_with_one_line_naming_it(hiera, tmp_path):
    from test_core import BROKEN_PLUGIN

    site = write_distribution(
        tmp_path / "site", "hiera-broken", "0.2.0", {"broken": "hiera_broken"}, {"hiera_broken": BROKEN_PLUGIN}
    )
    for args in (["plugins"], ["--workload", "stencil2d"]):
        done = hiera(*args, env={"PYTHONPATH": str(site)})
        assert done.returncode == 2
        assert done.stderr.splitlines() == [
            "hiera: error: plugin 'broken' (entry point broken = hiera_broken of distribution hiera-broken 0.2.0) cannot be"
            " loaded: ModuleNotFoundError: No module named 'a_module_nobody_installed'; HIERA_DISABLE_PLUGINS=broken skips it"
        ]


@pytest.mark.slow  # 5 s or more on the 2-core machine
def test_a_direction_whose_score_raises_stops_the_run_with_one_line_naming_it(hiera, tmp_path):
    done = hiera(
        "--plugin",
        "broken_direction",
        "--workload",
        "stencil2d",
        "--arch",
        "host",
        "--rounds",
        "2",
        "--population",
        "2",
        "--set",
        "workload.stencil2d.host_n=32",
        "--run-dir",
        "r",
    )
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "hiera: error: backend 'expert' failed on round 1's ssda request: KeyError: 'vector_fraction'"
        " (in direction 'V' (broken_direction.Broken).score)"
    )
    assert "round 1:" not in done.stdout and "report:" not in done.stdout  # stopped at the first plan, reporting no result


def test_an_unknown_key_in_hiera_toml_names_file_table_and_key(hiera, tmp_path):
    (tmp_path / "hiera.toml").write_text("[workload.stencil2d]\nhost_n = 64\nnxx = 3\n")
    done = hiera("--workload", "stencil2d")
    assert done.returncode == 2
    assert "hiera.toml: [workload.stencil2d]" in done.stderr and "nxx" in done.stderr


def test_a_plugin_table_value_of_another_type_is_refused_naming_file_table_key_and_value(hiera, tmp_path):
    (tmp_path / "hiera.toml").write_text("[workload.stencil2d]\nhost_n = 64.5\n")
    done = hiera("config", "show")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"hiera: error: {tmp_path / 'hiera.toml'}: [workload.stencil2d]: host_n: expected an integer, got 64.5 (a float)"
    ]
    done = hiera("config", "show", "--set", "workload.stencil2d.host_n=64", "--set", "evaluator.host-run.timeout_s=30")
    assert done.returncode == 0, done.stderr
    assert "host_n = 64" in done.stdout and "timeout_s = 30.0" in done.stdout


def test_a_table_for_a_plugin_that_is_not_installed_is_an_error(hiera, tmp_path):
    (tmp_path / "hiera.toml").write_text("[arch.gpu9000]\ncc = 'x'\n")
    done = hiera("config", "show")
    assert done.returncode == 2
    assert "no arch named 'gpu9000' (known: cuda, host)" in done.stderr


def test_config_show_prints_what_is_in_force(hiera, tmp_path):
    (tmp_path / "hiera.toml").write_text("[run]\nrounds = 4\n[workload.stencil2d]\nhost_n = 64\n")
    done = hiera("config", "show", "--set", "run.population=2", env={"HIERA_PARENTS": "3"})
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "rounds = 4" in out and "population = 2" in out and "parents = 3" in out
    assert "[workload.stencil2d]" in out and "host_n = 64" in out and "radius = 3" in out
    assert "[evaluator.host-run]" in out


@pytest.mark.slow
def test_without_a_gpu_the_default_architecture_is_host_and_says_so(hiera, tmp_path):
    done = hiera("--workload", "stencil2d", "--rounds", "0", "--set", "workload.stencil2d.host_n=32", "--run-dir", "r")
    assert done.returncode == 0, done.stderr
    assert "'cuda' cannot run here" in done.stdout.splitlines()[0]
    assert "running on the 'host' architecture" in done.stdout.splitlines()[0]


@pytest.mark.slow
def test_a_run_directory_in_use_is_refused_with_one_line_and_exit_code_2(hiera, tmp_path):
    from hiera_core.store import RunStore

    done = hiera(
        "--workload", "stencil2d", "--arch", "host", "--rounds", "0", "--set", "workload.stencil2d.host_n=32", "--run-dir", "r"
    )
    assert done.returncode == 0, done.stderr
    holder = RunStore.open(tmp_path / "r")
    holder.lock()  # as a running `hiera run` holds it
    try:
        again = hiera("resume", "r")
    finally:
        holder.unlock()
    assert again.returncode == 2
    assert again.stderr.strip().splitlines() == [
        f"hiera: error: {tmp_path / 'r'} is in use by hiera process {__import__('os').getpid()};"
        " wait for it to finish (or stop it) first"
    ]
    assert hiera("resume", "r").returncode == 0  # free again: it resumes (and redoes nothing)


@pytest.mark.slow
def test_a_run_resumes_without_a_plugin_it_does_not_use_and_names_one_it_uses_in_one_line(hiera, tmp_path):
    import json

    done = hiera(
        "--workload", "stencil2d", "--arch", "host", "--rounds", "0", "--set", "workload.stencil2d.host_n=32", "--run-dir", "r"
    )
    assert done.returncode == 0, done.stderr
    assert "cuda-profile" in json.loads((tmp_path / "r" / "manifest.json").read_text())["config"]["evaluator"]  # ncu's table
    resumed = hiera("resume", "r", env={"HIERA_DISABLE_PLUGINS": "ncu"})
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith("resuming ")
    gone = hiera("resume", "r", env={"HIERA_DISABLE_PLUGINS": "stencil2d"})
    assert gone.returncode == 2
    assert gone.stderr.splitlines() == [
        f"hiera: error: {tmp_path / 'r'}: the run used workload 'stencil2d', which no installed"
        " plugin provides now (installed: kernelbench)"
    ]


@pytest.mark.slow
def test_the_run_manifest_records_the_sandbox_in_force(hiera, tmp_path):
    import json

    done = hiera(
        "--workload", "stencil2d", "--arch", "host", "--rounds", "0", "--set", "workload.stencil2d.host_n=32", "--run-dir", "r"
    )
    assert done.returncode == 0, done.stderr
    protection = json.loads((tmp_path / "r" / "manifest.json").read_text())["protection"]
    assert set(protection) >= {"pid_namespace", "read_only_root", "dropped_capabilities", "cgroup", "missing"}
    for line in protection["missing"]:  # every missing part was said in one line at the start
        assert f"sandbox: {line}" in done.stdout
