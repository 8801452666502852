"""The kernelbench workload on a real GPU: the ATen seed and the fused expert move of a level-2 task are built,
checked against the FP64 reference and timed against eager PyTorch; a wrong kernel is rejected."""

import re
from pathlib import Path

import pytest
from conftest import run_hiera

from hiera_core import records
from hiera_core.report import compiled_reference
from hiera_core.store import RunStore

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.timeout(1200),  # builds two extensions (~60 s each, more when other tests build beside it)
]

ROOT = Path(__file__).parent / "plugins" / "kernelbench_tasks"
TASK = [
    "--workload",
    "kernelbench",
    "--task",
    "1_Gemm_ReLU_Scaling",
    "--arch",
    "cuda",
    "--set",
    f"workload.kernelbench.root={ROOT}",
    "--set",
    "workload.kernelbench.level=2",
]


def test_the_seed_and_the_fused_candidate_are_correct_and_timed(tmp_path):
    done = run_hiera(
        "run",
        *TASK,
        "--rounds",
        "1",
        "--population",
        "2",
        "--run-dir",
        str(tmp_path / "run"),
        "--set",
        "executor.local.workers=4",
        cwd=tmp_path,
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    store = RunStore.open(tmp_path / "run")
    evaluated = [e for e in store.events if isinstance(e, records.CandidateEvaluated)]
    kinds = {e.candidate.origin: type(e.evaluation).__name__ for e in evaluated}
    assert any(origin.startswith("kernelbench-aten") and "fuse_pointwise=False" in origin for origin in kinds), kinds
    assert any("fuse_pointwise=True" in origin for origin in kinds), kinds
    assert set(kinds.values()) == {"Measured"}, kinds
    for e in evaluated:
        assert e.evaluation.latency_ms > 0 and e.evaluation.reference_latency_ms > 0  # eager FP32, same worker
    compiled = compiled_reference(store.events)  # one judge of the final re-measurement times torch.compile too
    assert compiled is not None and compiled.compiled_reference_latency_ms > 0, compiled
    assert (tmp_path / "run" / "report.md").is_file()


def test_a_wrong_kernel_is_rejected_as_incorrect(tmp_path):
    from hiera_workloads.kernelbench.workload import KernelBench, KernelBenchConfig

    w = KernelBench(KernelBenchConfig(root=str(ROOT), level=2))
    [task] = [t for t in w.tasks() if t.name == "1_Gemm_ReLU_Scaling"]
    seed = w.seed(task, "cuda")[0]
    assert "at::relu(v1)" in seed
    source = tmp_path / "cuda_source.cu"
    source.write_text(seed.replace("at::relu(v1)", "at::abs(v1)"))  # the linear layer's negatives come out positive
    done = run_hiera("eval", str(source), *TASK, "--space", "libraries_pytorch", cwd=tmp_path, timeout=900)
    assert '"kind": "incorrect"' in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]


def verdicts_of(tmp_path, task_name, sources: dict[str, str]) -> dict[str, str]:
    """`hiera eval` of each named source as `task_name` of the checkout in tmp_path/kb (level 2): its output."""
    verdicts = {}
    for name, source in sources.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "cuda_source.cu").write_text(source)
        done = run_hiera(
            "eval",
            str(tmp_path / name / "cuda_source.cu"),
            "--workload",
            "kernelbench",
            "--task",
            task_name,
            "--arch",
            "cuda",
            "--space",
            "libraries_pytorch",
            "--set",
            f"workload.kernelbench.root={tmp_path / 'kb'}",
            "--set",
            "workload.kernelbench.level=2",
            cwd=tmp_path / name,
            timeout=900,
        )
        verdicts[name] = done.stdout + done.stderr[-2000:]
    return verdicts


def test_a_task_that_draws_random_numbers_is_checked_from_one_seed(tmp_path):
    """Dropout in training mode: the reference and every call start from one RNG seed, so the ATen seed,
    which draws as PyTorch does, is correct, and a kernel that skips the dropout is not. Against an FP64
    reference every candidate of KernelBench's level 2 task 66 was rejected (H200, 2026-11-29)."""
    from test_kernelbench import one_task_checkout

    w = one_task_checkout(
        tmp_path / "kb",
        2,
        "1_Linear_Dropout",
        init="self.lin = nn.Linear(256, 256)\n        self.drop = nn.Dropout(0.5)",
        forward="return self.drop(self.lin(x))",
        inputs="torch.rand(64, 256)",
    )
    [task] = w.tasks()
    seed = w.seed(task, "cuda")[0]
    skipped = re.sub(r"at::dropout\((\w+), [^)]*\)", r"\1", seed)
    assert skipped != seed
    verdicts = verdicts_of(tmp_path, "1_Linear_Dropout", {"seed": seed, "skipped": skipped})
    assert '"kind": "measured"' in verdicts["seed"], verdicts["seed"]
    assert '"kind": "incorrect"' in verdicts["skipped"], verdicts["skipped"]


def test_a_task_where_pytorch_itself_misses_the_tolerance_accepts_what_pytorch_computes(tmp_path):
    """A variance of values shifted by 1e6: FP32 rounding of the shift alone puts eager PyTorch ~1e-3 from the
    FP64 reference, beyond KernelBench's 1e-4. The seed, which computes what PyTorch computes, is accepted
    (within twice PyTorch's own error); one that averages |deviation| instead is not. (Found on KernelBench
    level 3 task 45 on the CPU, 2026-11-29: eager FP32 is 8.9e-4 from FP64 there.)"""
    from test_kernelbench import one_task_checkout

    w = one_task_checkout(
        tmp_path / "kb",
        2,
        "1_Shifted_variance",
        init="pass",
        forward="y = x + 1000000.0\n        return ((y - y.mean(dim=1, keepdim=True)) ** 2).mean(dim=1)",
        inputs="torch.rand(16, 4096)",
    )
    [task] = w.tasks()
    seed = w.seed(task, "cuda")[0]
    wrong = seed.replace("at::pow(v3, 2)", "at::abs(v3)")
    assert wrong != seed
    verdicts = verdicts_of(tmp_path, "1_Shifted_variance", {"seed": seed, "wrong": wrong})
    assert '"kind": "measured"' in verdicts["seed"], verdicts["seed"]
    assert '"kind": "incorrect"' in verdicts["wrong"], verdicts["wrong"]


def test_a_task_with_gigabytes_of_inputs_is_judged_within_the_gpus_memory(tmp_path):
    """Shaped as KernelBench's level 1 task 36 (RMSNorm over one 7.5 GiB input): its seed crashed in timed call 9,
    out of GPU memory, where the judge took 64 GiB of places and held the FP64 reference of its timing input (H200,
    2026-12-03). Now the places fit beside a check's needs and the seed is Measured, with the memory it took. On a
    smaller GPU the input shrinks with it (on an 80 GB H100, 7 GiB and its FP64 reference's 28 GiB do not fit beside
    a place: the task says so before the candidate runs, 2026-12-06)."""
    import json

    import torch
    from test_kernelbench import one_task_checkout

    batch = min(112, int(112 * torch.cuda.get_device_properties(0).total_memory / (140 * 2**30)))

    one_task_checkout(
        tmp_path / "kb",
        2,
        "1_RMSNorm_large",
        init="pass",
        forward="return x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-5)",
        inputs=f"torch.rand({batch}, 64, 512, 512)",
    )
    from hiera_workloads.kernelbench.workload import KernelBench, KernelBenchConfig

    w = KernelBench(KernelBenchConfig(root=str(tmp_path / "kb"), level=2))
    [task] = w.tasks()
    output = verdicts_of(tmp_path, "1_RMSNorm_large", {"seed": w.seed(task, "cuda")[0]})["seed"]
    assert '"kind": "measured"' in output, output
    evaluation = json.loads(output[output.index("{") : output.rindex("}") + 1])["evaluation"]
    conditions = evaluation["conditions"]
    print({k: v for k, v in conditions.items() if k.startswith("memory_")})
    # the seed makes the reference's own calls: neither is timed paying for memory the other finds allocated (on an
    # H100, 2026-12-06, level 1's seeds read 1.04-1.31x faster than their references while the reference paid). What
    # is left is the caching allocator's state, which neither side controls: in one process the very same calls
    # read 7.94 or 8.91 ms (1.12x) on this input by what was allocated and freed before them
    # (research/probe_reference_gap.py, H100 2026-12-07), and this test read 8.68 against 8.00-8.08 (1.07-1.09x)
    assert 1 / 1.13 < evaluation["reference_latency_ms"] / evaluation["latency_ms"] < 1.13, evaluation
    assert conditions["memory_places"] >= 1
    assert conditions["memory_device_used_peak_gib"] < conditions["memory_total_gib"]
