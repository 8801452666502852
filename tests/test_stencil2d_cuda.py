"""The stencil2d workload's GPU side, on the CPU: contract, rendered CUDA sources and their static checks,
the harness's reference, work figures; one real extension build when a CUDA toolkit is present."""

from __future__ import annotations

import ast
import re
import subprocess

import attrs
import numpy as np
import pytest

from hiera_core import EvalJob
from hiera_core.protocols import Template
from hiera_core.records import Candidate
from hiera_judge.source_rules import violation
from hiera_plugins.cuda import checks
from hiera_plugins.cuda.architecture import CudaArchitecture, CudaConfig, find_cuda_home
from hiera_plugins.spaces import CudaLibraries, LibrariesPytorch, PureCuda
from hiera_workloads.stencil2d import cuda
from hiera_workloads.stencil2d.cuda import CudaStencilHarness, CudaStencilTemplate
from hiera_workloads.stencil2d.reference import reference, stencil_weights
from hiera_workloads.stencil2d.workload import Stencil2D, Stencil2DConfig

SPACES = [PureCuda(None), CudaLibraries(None), LibrariesPytorch(None)]
RANK = {space.name: space.rank for space in SPACES}
TEMPLATE = CudaStencilTemplate(radius=3)


def cuda_rules(source, rank):
    return violation(source, checks.SOURCE_RULES, rank)


def task(**config):
    return Stencil2D(Stencil2DConfig(**config)).tasks()[0]


def params(**overrides):
    return {**TEMPLATE.defaults(), **overrides}


def home_space(template, p):
    """The smallest space admitting every non-default knob value of `p`."""
    ranks = [RANK[knob.space] for name, knob in template.knobs.items() if p[name] != knob.values[0]]
    return SPACES[max(ranks, default=0)]


def test_the_contract_holds_what_the_binding_and_a_reader_need():
    workload = Stencil2D(Stencil2DConfig(steps=3, radius=2))
    contract = workload.contract(workload.tasks()[0], "cuda")
    binding = contract.files["cpp_source.cpp"]
    assert contract.source_filename == "cuda_source.cu" and contract.binding == "cpp_source.cpp"
    assert cuda.DECLARATION in binding and cuda.DECLARATION in contract.interface
    assert "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)" in binding
    assert 'm.def("forward", &stencil2d' in binding and 'py::arg("steps") = 3' in binding  # the task's steps
    assert "n=10240, radius=2 and steps=3" in contract.interface and "5x5" in contract.interface
    assert "(temporal blocking)" in contract.interface  # several steps: the whole run is timed, fusing is allowed
    one_step = Stencil2D(Stencil2DConfig()).tasks()[0]
    assert "temporal blocking" not in cuda.contract(one_step).interface
    for name in ("torch_demo.py", "groundtruth.py"):
        ast.parse(contract.files[name])  # Python that parses
    assert "class ModelNew(torch.nn.Module)" in contract.files["torch_demo.py"]
    assert "F.conv2d" in contract.files["groundtruth.py"] and "N, RADIUS, STEPS = 10240, 2, 3" in contract.files["groundtruth.py"]


def test_groundtruth_computes_the_reference():
    pytest.importorskip("torch")
    namespace = {}
    exec(cuda.contract(task(radius=1, steps=2)).files["groundtruth.py"], namespace)
    field, weights = namespace["get_inputs"](n=9, device="cpu")
    got = namespace["Model"]()(field, weights, 2)
    np.testing.assert_allclose(got.numpy(), reference(field.numpy(), weights.numpy(), 2), rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("knob", sorted(TEMPLATE.knobs))
def test_every_knob_value_renders_a_source_that_names_it(knob):
    for value in TEMPLATE.knobs[knob].values:
        p = params(**{knob: value}, **({"tiling": "smem"} if knob == "vector_loads" else {}))
        source = TEMPLATE.render(p)
        assert source.startswith(f"// {TEMPLATE.describe(p)}\n")
        if knob in TEMPLATE.shaping(p):
            assert f"{knob}={value}" in TEMPLATE.describe(p)


@pytest.mark.slow
def test_every_variant_passes_its_space_and_the_hack_scan_and_only_its_space():
    """Every combination with fuse_steps=False (one step: True renders the same source, see the moot
    test): admitted by the smallest space their knobs name, rejected by the one below; no evaluation hack;
    the radius is a compile-time constant."""
    for p in TEMPLATE.variants():
        if p["fuse_steps"]:
            continue
        source = TEMPLATE.render(p)
        space = home_space(TEMPLATE, p)
        assert cuda_rules(source, space.rank) is None, (TEMPLATE.describe(p), cuda_rules(source, space.rank))
        assert checks.hack_in_source(source, "float64") is None, (TEMPLATE.describe(p), checks.hack_in_source(source, "float64"))
        assert "constexpr int R = 3;" in source and "at::Tensor stencil2d(at::Tensor field" in source
        if space.rank > 0:
            below = SPACES[space.rank - 1]
            assert cuda_rules(source, below.rank) is not None, TEMPLATE.describe(p)


def test_moot_knobs_do_not_change_the_source():
    """Variants that differ only in knobs their source does not use render the same text, so the expert
    never evaluates one kernel twice."""
    sources = {}
    for p in TEMPLATE.variants():
        key = tuple((k, p[k]) for k in TEMPLATE.shaping(p))
        sources.setdefault(key, set()).add(TEMPLATE.render(p))
    assert all(len(texts) == 1 for texts in sources.values())
    distinct = {text for texts in sources.values() for text in texts}
    kernels = 4 * 4 * 2 + 2 * (4 * 4 * 2 * 2) + 2 * 2 * (2 * 3 * 3 * 3)  # global (no vector loads), smem, smem_stream, ring
    assert len(distinct) == len(sources) == kernels + 1 + 2  # + cuDNN + ATen's conv2d and FFT


def test_describe_starts_with_the_template_name_and_the_template_is_a_template():
    assert isinstance(TEMPLATE, Template)
    assert TEMPLATE.describe(params()) == "stencil2d-cuda tiling=global block=32x8 outputs_per_thread=1 boundary=checked"
    assert TEMPLATE.describe(params(aten="fft", cudnn=True)) == "stencil2d-cuda aten=fft"
    assert TEMPLATE.describe(params(cudnn=True, tiling="smem")) == "stencil2d-cuda cudnn=True"
    for p in TEMPLATE.variants()[::37]:
        assert TEMPLATE.describe(p).split()[0] == TEMPLATE.name


def test_knobs_name_a_direction_and_the_smallest_space_and_the_seed_is_naive():
    for knob in TEMPLATE.knobs.values():
        assert knob.direction in "CPMRT" and knob.space in RANK
    assert {k.direction for k in TEMPLATE.knobs.values()} == set("CPMRT")
    assert TEMPLATE.knobs["cudnn"].space == "cuda_libraries" and TEMPLATE.knobs["aten"].space == "libraries_pytorch"
    t = task(radius=2)
    source, seed_params, origin = Stencil2D(Stencil2DConfig(radius=2)).seed(t, "cuda")
    assert seed_params == TEMPLATE.defaults() and origin.startswith("stencil2d-cuda tiling=global")
    assert "constexpr int R = 2;" in source and "__shared__" not in source


def test_a_kernel_source_uses_the_current_stream_and_checks_its_launch():
    for p in (params(), params(tiling="smem_stream", vector_loads=True, boundary="split")):
        source = TEMPLATE.render(p)
        assert "c10::cuda::getCurrentCUDAStream()" in source and "C10_CUDA_KERNEL_LAUNCH_CHECK();" in source
        assert re.search(r"<<<grid, block, \w+, stream>>>", source)
    assert "SMEM_BYTES" in TEMPLATE.render(params(tiling="smem"))
    assert "double2" in TEMPLATE.render(params(tiling="smem", vector_loads=True))
    assert "double2" not in TEMPLATE.render(params(tiling="smem"))


def test_the_cudnn_candidate_finds_the_fastest_algorithm_with_a_workspace():
    source = TEMPLATE.render(params(cudnn=True))
    assert "cudnnFindConvolutionForwardAlgorithmEx(" in source and "CUDNN_CONVOLUTION_FWD_ALGO_COUNT" in source
    assert "workspace.data_ptr(), workspace_bytes" in source and "CUDNN_DEFAULT_MATH" in source


def test_render_rejects_unknown_values():
    with pytest.raises(ValueError, match="block"):
        TEMPLATE.render(params(block="16x16"))


def test_every_kernel_file_the_package_ships_is_a_piece_of_some_source(monkeypatch):
    """The CUDA text lives in the package's kernels/*.cu: rendering one source of each shape (with steps,
    so the fused kernel too) reads every file shipped, and nothing else."""
    from importlib import resources

    from hiera_workloads.stencil2d.cuda import _template

    folder = resources.files("hiera_workloads.stencil2d.cuda") / "kernels"
    shipped = {f.name.removesuffix(".cu") for f in folder.iterdir() if f.name.endswith(".cu")}
    read, piece = set(), _template._piece
    monkeypatch.setattr(_template, "_piece", lambda name, **values: read.add(name) or piece(name, **values))
    two = CudaStencilTemplate(radius=3, steps=2)
    shapes = {two.describe(p): p for p in two.variants()}
    for p in shapes.values():
        two.render(p)
    assert read == shipped and "ring" in shipped and "head" in shipped


def test_the_harness_needs_no_gpu_to_exist():
    h = Stencil2D(Stencil2DConfig(n=2048, radius=2, steps=2)).harness(task(n=2048, radius=2, steps=2), "cuda")
    assert isinstance(h, CudaStencilHarness)
    assert h.entry == "forward" and h.dtype == "float64" and h.tolerance == (1e-10, 1e-12)
    assert h.reference_engine.startswith("CuPy ") and h.steps == 2
    cases = h.correctness_cases(remeasure=False)
    assert cases[0] == {"label": "task n=2048", "n": 2048, "first_seed_only": True} == h.timing_case()
    assert [c["n"] for c in cases[1:]] == [1000, 333, 256, 37, 5] and not any(c["first_seed_only"] for c in cases[1:])
    fresh = h.correctness_cases(remeasure=True)
    assert {c["n"] for c in fresh[1:]}.isdisjoint(c["n"] for c in cases[1:])
    assert set(h.seeds(True)).isdisjoint(h.seeds(False))
    small = CudaStencilHarness(n=1000, radius=3, steps=1)
    assert [c["n"] for c in small.correctness_cases(False)] == [1000, 333, 256, 37, 5]  # the task size once


def test_the_reference_is_the_numpy_definition_whatever_the_array_module():
    """The judge's reference runs `reference` on CuPy arrays, written for any array module: on torch CPU
    tensors the same code agrees with numpy to the last bit."""
    torch = pytest.importorskip("torch")
    weights = stencil_weights(2, "normalized")
    field = np.random.default_rng(3).uniform(-1, 1, size=(11, 11))
    expected = reference(field, weights, 3)
    got = reference(torch.from_numpy(field), weights, 3, zeros=lambda shape: torch.zeros(shape, dtype=torch.float64))
    np.testing.assert_array_equal(got.numpy(), expected)


def test_work_counts_one_read_and_one_write_a_call_and_an_fma_per_tap_and_step():
    """Three steps move no more than one read and one write of the grid at least (every step on chip): a kernel that
    keeps them there is not below the floor."""
    workload = Stencil2D(Stencil2DConfig(n=4096, radius=4, steps=3))
    assert workload.work(workload.tasks()[0], "cuda") == (2 * 8 * 4096**2, 2 * 81 * 4096**2 * 3)
    default = Stencil2D(Stencil2DConfig())
    bytes_moved, flops = default.work(default.tasks()[0], "cuda")
    assert bytes_moved == pytest.approx(1.678e9, rel=1e-3) and flops == pytest.approx(10.28e9, rel=1e-3)


@pytest.mark.slow
@pytest.mark.timeout(900)  # nvcc compiles the fused kernel (with torch's headers)
def test_fuse_steps_runs_two_steps_per_launch_in_the_ring_only_when_there_are_steps_to_fuse(tmp_path):
    """With steps > 1 the ring with fuse_steps renders a second kernel, two steps per launch, that nvcc
    compiles without spills (device code only, when a toolkit is there); with one step, or another
    tiling, the knob is moot: the same source, and describe leaves it out."""
    two = cuda.templates(task(steps=2))[0]
    assert two.steps == 2
    ring = params(tiling="ring", boundary="split", vector_loads=True)
    fused, plain = two.render({**ring, "fuse_steps": True}), two.render({**ring, "fuse_steps": False})
    assert "fuse_steps=True" in two.describe({**ring, "fuse_steps": True})
    assert "stencil_two_steps<<<" in fused and "stencil_two_steps" not in plain
    assert plain.split("\n", 1)[1] == TEMPLATE.render(ring).split("\n", 1)[1]  # steps only change the first line
    assert TEMPLATE.render({**ring, "fuse_steps": True}) == TEMPLATE.render(ring)  # one step: moot
    assert "fuse_steps" not in TEMPLATE.describe({**ring, "fuse_steps": True})
    smem = params(tiling="smem", fuse_steps=True)
    assert two.render(smem) == two.render(params(tiling="smem")) and "fuse_steps" not in two.describe(smem)
    assert cuda_rules(fused, PureCuda.rank) is None and checks.hack_in_source(fused, "float64") is None
    cuda_home = find_cuda_home()
    if cuda_home is None:
        pytest.skip("no CUDA toolkit")
    cpp_extension = pytest.importorskip("torch.utils.cpp_extension")
    (tmp_path / "fused.cu").write_text(fused)
    includes = [f"-I{path}" for path in cpp_extension.include_paths()]
    ptxas = subprocess.run(
        [
            str(cuda_home / "bin" / "nvcc"),
            "-cubin",
            "-std=c++20",
            "-O3",
            "-arch=sm_90",
            "-Xptxas",
            "-v",
            *includes,
            str(tmp_path / "fused.cu"),
            "-o",
            str(tmp_path / "fused.cubin"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert ptxas.returncode == 0, ptxas.stderr[-3000:]
    report = ptxas.stderr.split("stencil_two_steps", 1)[1].split("Compiling entry function", 1)[0]
    assert " 0 bytes spill stores" in report, report


@pytest.mark.slow
@pytest.mark.skipif(find_cuda_home() is None, reason="no CUDA toolkit")
@pytest.mark.timeout(900)  # a real build
def test_the_most_complex_kernel_builds(tmp_path):
    """Compile-only (no GPU): the cp.async ring with split boundaries and 16-byte copies, as the
    evaluator builds it; ptxas reports both instantiations of the kernel without spills."""
    pytest.importorskip("torch")
    from hiera_plugins.cuda.build import build_candidate

    arch = CudaArchitecture(CudaConfig(cache_dir=str(tmp_path / "cache")))
    t = task()
    source = TEMPLATE.render(params(tiling="ring", ring_columns=4, ring_threads=256, boundary="split", vector_loads=True))
    job = EvalJob(
        candidate=Candidate(id="ring", source=source, space="pure_cuda", round=1),
        task=t,
        contract=cuda.contract(t),
        arch="cuda",
        space_rank=0,
        workdir=tmp_path,
        workload_factory="",
        workload_config={},
        toolchain=arch.toolchain(),
    )
    built = build_candidate(job, timeout_s=900)
    assert built.library is not None, built.log[-3000:]
    kernels = [name for name in built.resources if "stencil_step" in name]
    assert len(kernels) == 2, built.resources
    assert all(built.resources[k].get("spill_store_bytes", 0) == 0 for k in kernels), built.resources
    assert checks.binary_space_violation(checks.imported_symbols(built.library), 0) is None

    # the next candidate of the task compiles only its own source and links the binding the first one left
    other = attrs.evolve(job, candidate=Candidate(id="other", source=source + "// another\n", space="pure_cuda", round=1))
    again = build_candidate(other, timeout_s=900)
    assert again.library is not None and not again.cache_hit, again.log[-3000:]
    steps = (again.library.parent / ".ninja_log").read_text()
    assert "cuda_source.cuda.o" in steps and "cpp_source.o" not in steps
    assert again.library.name == built.library.name and again.library != built.library
    from hiera_plugins.cuda.runner import load_candidate

    assert "steps applications of the FP64 box stencil" in load_candidate(str(again.library)).forward.__doc__
    assert checks.binary_space_violation(checks.imported_symbols(again.library), 0) is None


def test_the_gpu_tests_cover_every_knob_value():
    """tests/test_stencil2d_gpu.py runs every non-default value of every knob in a source that value shapes
    (fuse_steps with more than one step)."""
    from test_stencil2d_gpu import BEST, COVERING, FUSED, SHAPES, VARIANTS

    assert BEST in COVERING and FUSED in VARIANTS
    runs = [(TEMPLATE, name) for name in COVERING]
    runs += [(CudaStencilTemplate(radius=r, steps=s), name) for (r, s), names in SHAPES.items() for name in names]
    for name, knob in TEMPLATE.knobs.items():
        seen = {p[name] for t, p in ((t, params(**VARIANTS[v])) for t, v in runs) if name in t.shaping(p)}
        assert seen | {knob.values[0]} == set(knob.values), (name, seen)  # the naive seed runs every default
    fused_shapes = {shape for shape, names in SHAPES.items() if FUSED in names}
    assert {r for r, _ in fused_shapes} == {1, 2, 3, 4} and {s for _, s in fused_shapes} == {2, 3}
