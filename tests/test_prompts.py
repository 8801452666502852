"""What the prompts tell a model about its target, read as the model reads them: the hardware and its measured
peaks, what each space admits on this architecture in the terms its checks enforce, the workload's inputs, and
each candidate's spread in the history."""

from __future__ import annotations

import json
import re
import threading

import pytest

from hiera_core import AgentAnswer, hookimpl
from hiera_core.agents.prompts import figure
from hiera_core.config import load_config
from hiera_core.engine import Engine, create_run
from hiera_core.plugins import make_plugin_manager
from hiera_core.records import Measured
from hiera_core.session import Session
from hiera_plugins.cuda.architecture import CudaArchitecture, CudaConfig
from hiera_plugins.host.architecture import SOURCE_RULES, HostArchitecture, HostConfig, cpu_cores, simd_extensions
from hiera_plugins.host.evaluators import RUNNER_ENVIRONMENT

GPU_WORDS = re.compile(
    r"\bwarps?\b|threadIdx|blockIdx|shared[ -]memory|\bGPU|CUDA|cuBLAS|cuDNN|cuFFT|CUTLASS|tensor[ -]cores?|\bSMs?\b"
    r"|OMP_\w+=",
    re.IGNORECASE,
)
"""What no text about C on a CPU should say (the space names `pure_cuda`, `cuda_libraries` are the paper's, and the
`OMP_*` settings the runner fixes are stated once: both are taken out before matching)."""


class PromptRecorder:
    """A model in-process: keeps every request, answers SSDA with M first, SPA with one strategy, OA with the seed."""

    name = "prompt-recorder"
    config_class = None
    requests: list = []
    lock = threading.Lock()

    def __init__(self, config, context):
        self.context = context

    def answer(self, request):
        with self.lock:
            self.requests.append(request)
        if request.role == "ssda":
            data = {"space": "pure_cuda", "scores": {"C": 0.1, "P": 0.1, "M": 0.9, "R": 0.1, "T": 0.1}, "rationale": "r"}
        elif request.role == "spa":
            data = {"name": "stream-rows", "steps": ["stream along rows"], "constraints": ["keep zero padding"]}
        else:
            source, _, _ = self.context.workload.seed(self.context.task, self.context.kind)
            data = {"candidates": [{"source": source.replace("One application", f"Round {request.round}'s application")}]}
        return AgentAnswer(text=json.dumps(data))


class Registers:
    @hookimpl
    def hiera_register_backends(self):
        return [PromptRecorder]


@pytest.fixture(scope="module")
def host_run(tmp_path_factory):
    """One host run of 2 rounds x 1 candidate; the prompts by role, in order, and the engine."""
    tmp = tmp_path_factory.mktemp("host-run")
    PromptRecorder.requests.clear()
    config = load_config(
        tmp,
        environ={},
        cli={"arch": "host", "rounds": 2, "population": 1, "backend": "prompt-recorder"},
        overrides=["workload.stencil2d.host_n=48", "run.remeasure=false"],
    )
    session = Session.create(config, make_plugin_manager(extra_plugins=[Registers()]))
    engine = Engine(session, create_run(session, tmp / "run"))
    engine.optimize()
    prompts: dict[str, list[str]] = {}
    for request in PromptRecorder.requests:
        prompts.setdefault(request.role, []).append(request.prompt)
    return prompts, engine


def section(prompt: str, title: str) -> str:
    """The text of the section whose heading starts with `# {title}`, up to the next top-level heading."""
    match = re.search(rf"^# {re.escape(title)}[^\n]*\n(.*?)(?=^# |\Z)", prompt, re.S | re.M)
    assert match, f"no section '# {title}' in the prompt"
    return match.group(1)


def without_space_names(text: str) -> str:
    fixed = ", ".join(f"{k}={v}" for k, v in RUNNER_ENVIRONMENT.items())
    return re.sub(r"pure_cuda|cuda_libraries|libraries_pytorch", "<space>", text.replace(fixed, "<runner environment>"))


# --- the hardware ------------------------------------------------------------------------------


@pytest.mark.slow
def test_every_host_prompt_names_the_cpu_its_vector_extensions_cores_and_measured_peaks(host_run):
    prompts, engine = host_run
    hardware = HostArchitecture(HostConfig()).hardware()
    roofline = engine.roofline
    for role in ("ssda", "spa", "oa"):
        target = section(prompts[role][0], "Target")
        assert hardware["model"] in target, role
        assert f"{cpu_cores()} cores available to a candidate" in target, role
        assert all(flag in target for flag in simd_extensions()), role
        assert f"{figure(roofline.peak_gbps)} GB/s memory bandwidth, {figure(roofline.peak_gflops)} GFLOP/s in float64" in target
        assert f"floors are {roofline.memory_floor_ms:.3g} ms for memory" in target and "below 90% of the larger floor" in target
        assert "-march=native" in target and not GPU_WORDS.search(without_space_names(target)), role


def test_the_host_names_its_widest_vectors_from_its_flags(monkeypatch):
    from hiera_plugins.host import architecture

    monkeypatch.setattr(architecture, "simd_extensions", lambda: ["sse4_2", "avx", "avx2", "fma"])
    text = HostArchitecture(HostConfig()).describe_hardware()
    assert "Vector extensions: sse4_2, avx, avx2, fma." in text and "256-bit (4 doubles), with 16 vector registers" in text
    monkeypatch.setattr(architecture, "simd_extensions", lambda: ["avx2", "fma", "avx512f", "avx512bw"])
    assert "512-bit (8 doubles), with 32 vector registers" in HostArchitecture(HostConfig()).describe_hardware()


def test_cuda_describes_what_it_can_know_without_a_visible_gpu(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    text = CudaArchitecture(CudaConfig(arch_list="9.0a")).describe_hardware()
    assert "compute capability 9.0a" in text and "not known here" in text


def test_the_toolchain_a_prompt_states_is_versions_and_flags_not_this_machine_s_paths(tmp_path):
    from hiera_core.agents.prompts import built_with

    toolchain = CudaArchitecture(CudaConfig(arch_list="9.0a", cache_dir=str(tmp_path / "builds"))).toolchain()
    line = built_with(toolchain)
    assert f"torch: {toolchain['torch']}" in line and "arch_list: 9.0a" in line and "cuda_cflags: -O3" in line, line
    assert str(tmp_path) not in line and "cache_dir" not in line, line
    assert toolchain["cuda_home"] not in line or not toolchain["cuda_home"].startswith("/"), line
    mixed = built_with(
        {
            "nvcc": "12.8",
            "cuda_home": "None",
            "cuda_cflags": ["-O3", "-I/opt/cutlass/include", "--x=~/y"],
            "extra": "/srv/cache",
            "flags": "-DFOO -Wall",
        }
    )
    assert mixed == "nvcc: 12.8; cuda_cflags: -O3; flags: -DFOO -Wall", mixed


@pytest.mark.slow  # 5 s or more on the 2-core machine
def test_no_host_prompt_speaks_of_gpu_hardware_outside_the_space_names_and_the_task_s_gpu_size(host_run):
    prompts, _ = host_run
    for role, texts in prompts.items():
        for text in texts:
            task = section(text, "Task:")
            assert "on a GPU" in task  # the task's description gives both sides' grids; nothing else names a GPU
            rest = without_space_names(text.replace(task, ""))
            assert not GPU_WORDS.search(rest), (role, GPU_WORDS.search(rest).group())
    assert (
        "- P (Thread and core parallelism)" in prompts["ssda"][0]
        and "- T (SIMD FMA and instruction pipeline)" in prompts["ssda"][0]
    )


# --- the workload's inputs -------------------------------------------------------------------------


def test_the_stencil_prompts_say_the_weights_are_random_and_sum_to_1_and_give_ranges_and_checked_sizes(host_run):
    prompts, engine = host_run
    harness = engine.session.workload.harness(engine.session.task, "host")
    for role in ("ssda", "spa", "oa"):
        task = section(prompts[role][0], "Task:")
        assert "box stencil (radius 3, normalized weights)" not in task and "not a uniform average" in task
        inputs = task.split("## Inputs\n")[1]
        assert "each drawn uniform in [0.25, 1.75] and then scaled so that they sum to 1" in inputs
        assert "`uniform`, every value uniform in [-1, 1]" in inputs and "+-[1, 100] and every other point exactly 0" in inputs
        sizes = re.search(r"checked at n = ([\d, ]+) with seeds 1, 2, 3 and both distributions, and at n = (\d+)", inputs)
        assert [int(n) for n in sizes.group(1).split(", ")] + [int(sizes.group(2))] == sorted(
            (c["n"] for c in harness.correctness_cases(False)), key=lambda n: n == harness.n
        )
        assert f"timed at n = {harness.timing_case()['n']}" in inputs


@pytest.mark.parametrize("seed", [1, 2])
def test_the_inputs_a_host_check_draws_are_what_the_prompt_says(seed):
    import numpy as np

    from hiera_workloads.stencil2d.host import HostStencilHarness

    harness = HostStencilHarness(n=37, radius=3, steps=1)
    uniform = harness.make_inputs({"n": 37}, seed, "uniform")
    spiky = harness.make_inputs({"n": 37}, seed, "spiky")["field"]
    assert -1 <= uniform["field"].min() and uniform["field"].max() <= 1
    assert np.count_nonzero(spiky) == 37 * 37 // 100 and 1 <= np.abs(spiky[spiky != 0]).min() <= np.abs(spiky).max() <= 100
    weights = uniform["weights"]
    assert weights.sum() == pytest.approx(1) and weights.min() > 0 and weights.std() > 0.1 / 49


def test_a_kernelbench_task_says_what_get_inputs_gives_and_how_it_is_checked():
    from pathlib import Path

    from hiera_workloads.kernelbench.workload import KernelBench, KernelBenchConfig

    workload = KernelBench(KernelBenchConfig(root=str(Path(__file__).parent / "plugins" / "kernelbench_tasks"), level=2))
    text = workload.inputs(workload.tasks()[0], "cuda")
    assert "`x` float32 [4, 12]" in text and "x*2+0.5" in text and "seeds 1, 2, 3" in text
    assert "3 parameters and buffers" in text


def test_a_gemm_s_headroom_counts_the_reference_s_arithmetic_while_its_rejection_floor_stays_the_bytes():
    """A GEMM at the FP32 peak was told it ran at "34.49x the roofline floor" (the floor had no FLOPs: H200, 2026-12-03):
    the prompt and the planning signals now measure against the reference's own arithmetic, by PyTorch's FLOP counter."""
    from pathlib import Path
    from types import SimpleNamespace

    from hiera_core.agents.prompts import _peaks
    from hiera_core.records import Roofline
    from hiera_workloads.kernelbench.workload import KernelBench, KernelBenchConfig

    root = str(Path(__file__).parent / "plugins" / "kernelbench_tasks")
    level1 = KernelBench(KernelBenchConfig(root=root, level=1))
    tasks = {t.name: t for t in level1.tasks()}
    matmul = next(t for name, t in tasks.items() if "matmul" in name)
    relu = next(t for name, t in tasks.items() if "ReLU" in name)
    assert level1.reference_flops(matmul, "cuda") == 2 * 8 * 6 * 4  # [8, 6] @ [6, 4]
    assert level1.reference_flops(relu, "cuda") == 0
    bytes_moved, flops = level1.work(matmul, "cuda")
    roofline = Roofline(
        bytes_moved=bytes_moved,
        flops=flops,
        peak_gbps=4000.0,
        peak_gflops=1e-6,
        reference_flops=level1.reference_flops(matmul, "cuda"),
    )
    assert roofline.floor_ms == roofline.memory_floor_ms < roofline.headroom_floor_ms == roofline.compute_headroom_ms
    text = _peaks(SimpleNamespace(roofline=roofline, task=matmul), 0.9)
    assert "The reference itself computes" in text and "cannot be faster" in text


def test_cuda_describes_a_visible_gpu_by_name_sms_memory_and_capability(monkeypatch):
    from types import SimpleNamespace

    from hiera_plugins.cuda import architecture

    torch = pytest.importorskip("torch")
    props = SimpleNamespace(
        name="NVIDIA H200", major=9, minor=0, multi_processor_count=132, total_memory=150 * 2**30, L2_cache_size=60 * 2**20
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    monkeypatch.setattr(architecture, "_driver_version", lambda: "580.1")
    text = CudaArchitecture(CudaConfig(arch_list="9.0a")).describe_hardware()
    assert text == (
        "GPU: NVIDIA H200 (device 0), compute capability 9.0 (built for 9.0a), 132 SMs, 150.0 GiB of device"
        " memory, 60.0 MiB L2; driver 580.1."
    )


# --- what each space admits, in the terms of the checks -----------------------------------------


def test_the_host_prompts_say_what_each_space_admits_in_the_checks_terms_with_no_gpu_words(host_run):
    prompts, _engine = host_run
    spaces = section(prompts["ssda"][0], "Implementation spaces you may choose")
    lines = dict(line[2:].split(": ", 1) for line in spaces.strip().splitlines())
    assert lines["pure_cuda"].count("No threads: the candidate runs on one core") == 1
    assert "Rejected by the source check before compiling" in lines["pure_cuda"] and "the pthreads library" in lines["pure_cuda"]
    assert "Threads are admitted: OpenMP pragmas, `<omp.h>` and `omp_*` calls, and `<pthread.h>`" in lines["cuda_libraries"]
    assert "never through environment variables" in lines["cuda_libraries"]
    assert "PyTorch's headers are C++ and unusable here" in lines["libraries_pytorch"]
    for role in ("spa", "oa"):
        assert lines["pure_cuda"] in section(prompts[role][0], "Implementation space pure_cuda")
    assert not GPU_WORDS.search(without_space_names(spaces))


@pytest.mark.parametrize(
    "source, what, admitted_from",
    [
        ("#include <pthread.h>\nint f(void) { return 0; }", "the pthreads library", 1),
        (
            "int f(double *x) {\n#pragma omp parallel for\n for (int i = 0; i < 4; i++) x[i] = 0; return 0; }",
            "an OpenMP pragma",
            1,
        ),
        ("#include <Python.h>\nint f(void) { return 0; }", "the Python C API", 2),
    ],
)
def test_what_a_host_space_says_it_rejects_is_what_its_check_rejects(source, what, admitted_from):
    host = HostArchitecture(HostConfig())
    assert any(rule.what == what for rule in SOURCE_RULES)
    for rank in range(3):
        _, _, rejected = host.describe_space(rank).partition("Rejected by the source check before compiling")
        if rank < admitted_from:
            assert host.check_source(source, rank) is not None and what in rejected
        else:
            assert host.check_source(source, rank) is None and what not in rejected


def test_cuda_spaces_say_what_the_source_symbol_and_runtime_checks_admit():
    cuda = CudaArchitecture(CudaConfig())
    pure, libraries, pytorch = (cuda.describe_space(rank) for rank in range(3))
    assert "checked three times" in pure and "cuBLAS, cuDNN" in pure.split("Not admitted")[1]
    assert "Vendor libraries are admitted: cuBLAS, cuDNN" in libraries and "cuBLAS" not in libraries.split("Not admitted")[1]
    assert "operators that compute" in pytorch and "Not admitted" not in pytorch
    assert cuda.check_source("#include <cublas_v2.h>\n", 0) and cuda.check_source("#include <cublas_v2.h>\n", 1) is None
    assert all("starts a thread" in text and "own CUDA stream" in text for text in (pure, libraries, pytorch))


class Plain:
    """A third party's architecture that describes neither its hardware nor its spaces."""

    name, config_class = "plain", None

    def __init__(self, config):
        pass

    def hardware(self):
        return {"model": "plain board", "cores": 3}


def test_without_the_architecture_s_account_the_prompts_quote_its_hardware_and_the_spaces_own_words():
    from hiera_core.session import _hardware_text, _space_rules
    from hiera_plugins.spaces import PureCuda

    assert _hardware_text(Plain(None), device=True) == "model: plain board; cores: 3"
    assert _hardware_text(Plain(None), device=False) == ""
    assert _space_rules(Plain(None), [PureCuda(None)]) == {"pure_cuda": PureCuda.description}


# --- the history the SSDA reads ----------------------------------------------------------------------


def test_the_ssda_history_gives_each_candidate_s_spread_and_weakest_signals(host_run):
    prompts, engine = host_run
    assert len(prompts["ssda"]) == 2
    history = section(prompts["ssda"][1], "Candidates so far")
    measured = [(c, e) for c, e in engine.history if c.round < 2 and isinstance(e, Measured)]
    assert measured and measured[0][0].round == 0, history  # the seed at least
    for candidate, evaluation in measured:
        row = next(line for line in history.splitlines() if f"`{candidate.id}`" in line)
        assert f"(p10 {evaluation.latency_p10_ms:.4g}, p90 {evaluation.latency_p90_ms:.4g})" in row
        weakest = min(evaluation.profile.signals, key=lambda name: (evaluation.profile.signals[name], name))
        assert f"weakest signals: {weakest} " in row and f"{evaluation.speedup_vs_reference:.2f}x the reference" in row


def test_the_optimizer_sees_what_was_tried_in_its_space_with_results(host_run):
    """The OA of round 2 reads the round-1 candidate written for its space (pure_cuda), with its figure; round 1's reads
    the seed's, whose space may differ: none then."""
    prompts, engine = host_run
    tried = section(prompts["oa"][1], "Tried so far in pure_cuda")
    earlier = [(c, e) for c, e in engine.history if c.round == 1 and c.space == "pure_cuda"]
    assert earlier, engine.history
    for candidate, evaluation in earlier:
        row = next(line for line in tried.splitlines() if f"`{candidate.id}`" in line)
        assert (f"{evaluation.latency_ms:.4g} ms" if isinstance(evaluation, Measured) else type(evaluation).__name__) in row


# --- the directions' knowledge on the host ----------------------------------------------------------


def test_host_knowledge_asks_for_nothing_a_c_source_cannot_do():
    from hiera_plugins.host.knowledge import KNOWLEDGE

    for name, knowledge in KNOWLEDGE.items():
        texts = [knowledge.knowledge, knowledge.rubric]
        texts += [" ".join((s.name, *s.steps, *s.constraints)) for s in knowledge.strategies_for(2)]
        for text in texts:  # no environment variable, build flag, tool run, PyTorch or GPU word
            assert not re.search(
                r"OMP_[A-Z_]+=|objdump|-fopt-info|-ffast-math|torch|ATen|\bGPU|CUDA|cuDNN|shared memory|warp", text
            ), (name, text)
        assert knowledge.strategies[2] == (), f"{name}: PyTorch strategies for C on a CPU"
    assert (
        "proc_bind(close)" in KNOWLEDGE["P"].knowledge and "cannot set `OMP_*` environment variables" in KNOWLEDGE["P"].knowledge
    )


def test_the_conformance_kit_rejects_a_description_that_is_not_a_method():
    import types

    from hiera_contracts.conformance import conformance_problems

    class Described(HostArchitecture):
        name = "described"
        describe_space = "C on a CPU"

    registers = types.SimpleNamespace(hiera_register_architectures=hookimpl(lambda: [Described]))
    problems = conformance_problems(make_plugin_manager(autoload=False, extra_plugins=[registers]))
    assert problems == [
        f"architecture 'described' ({__name__}.{Described.__qualname__}): `describe_space` must be a method, not str 'C on a CPU'"
    ]
