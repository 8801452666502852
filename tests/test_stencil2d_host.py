"""The stencil2d workload on the host: reference, rendered C kernels, harness and contract."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from hiera_core.protocols import UnsupportedArchitecture
from hiera_plugins.host.harness import HostHarness
from hiera_workloads.stencil2d.host import HostStencilHarness, HostStencilTemplate
from hiera_workloads.stencil2d.reference import reference, stencil_weights
from hiera_workloads.stencil2d.workload import Stencil2D, Stencil2DConfig

CFLAGS = ["-std=c11", "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC"]
TEMPLATE = HostStencilTemplate()

# Every value of every knob at least once, in both loop orders, plus a few combinations.
COVERING = {
    "seed": {},
    "split": {"boundary": "split"},
    "checked-unroll2": {"unroll": 2},
    "split-unroll4": {"boundary": "split", "unroll": 4},
    "split-unroll8-block128": {"boundary": "split", "unroll": 8, "block_cols": 128},
    "checked-unroll8-block512": {"unroll": 8, "block_cols": 512},
    "checked-threads2": {"threads": 2},
    "split-unroll4-block256-threads0": {"boundary": "split", "unroll": 4, "block_cols": 256, "threads": 0},
    "split-unroll2-threads2": {"boundary": "split", "unroll": 2, "threads": 2},
    "streaming": {"loop_order": "row_streaming"},
    "streaming-unroll2-block256": {"loop_order": "row_streaming", "unroll": 2, "block_cols": 256},
    "streaming-unroll4": {"loop_order": "row_streaming", "unroll": 4},
    "streaming-unroll8-block128-threads2": {
        "loop_order": "row_streaming",
        "unroll": 8,
        "block_cols": 128,
        "threads": 2,
    },
    "streaming-block512-threads0": {"loop_order": "row_streaming", "block_cols": 512, "threads": 0},
}


def params(**overrides):
    return {**TEMPLATE.defaults(), **overrides}


def seed_source() -> str:
    return TEMPLATE.render(params())


def direct_stencil(field, weights, steps):
    """The definition, one tap at a time."""
    n, r = field.shape[0], weights.shape[0] // 2
    current = field
    for _ in range(steps):
        nxt = np.zeros_like(current)
        for i in range(n):
            for j in range(n):
                for di in range(-r, r + 1):
                    for dj in range(-r, r + 1):
                        if 0 <= i + di < n and 0 <= j + dj < n:
                            nxt[i, j] += weights[di + r, dj + r] * current[i + di, j + dj]
        current = nxt
    return current


@pytest.fixture(scope="session")
def build(tmp_path_factory):
    """Compile C sources (name -> source) in parallel and load them: name -> CDLL."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    directory = tmp_path_factory.mktemp("stencil2d")

    def compile_one(item):
        name, source = item
        path = directory / f"{name}.c"
        path.write_text(source)
        library = path.with_suffix(".so")
        result = subprocess.run(["cc", *CFLAGS, str(path), "-o", str(library)], capture_output=True, text=True)
        assert result.returncode == 0, f"{name} does not compile:\n{result.stderr}"
        return name, ctypes.CDLL(str(library))

    def build(sources):
        with ThreadPoolExecutor(max_workers=4) as pool:
            return dict(pool.map(compile_one, sources.items()))

    return build


@pytest.fixture(scope="session")
def kernels(build):
    return build({name: TEMPLATE.render(params(**overrides)) for name, overrides in COVERING.items()})


def harness_for(radius=3, steps=1, n=64):
    return HostStencilHarness(n=n, radius=radius, steps=steps)


def mismatches(lib, harness):
    """Labels of the checks (case, seed, distribution) the kernel fails, run as the judge runs them."""
    failed = []
    for case in harness.correctness_cases(remeasure=False):
        seeds = harness.seeds(remeasure=False)
        for seed in seeds[:1] if case["first_seed_only"] else seeds:
            for distribution in harness.distributions:
                inputs = harness.make_inputs(case, seed, distribution)
                field = inputs["field"].copy()
                out = harness.output(case)
                out.fill(np.nan)
                harness.call(lib, case, inputs, out)
                assert np.array_equal(inputs["field"], field), "the kernel wrote its input"
                if not np.allclose(out, harness.reference(case, inputs), *harness.tolerance):
                    failed.append(f"{case['label']}/{seed}/{distribution}")
    return failed


@pytest.mark.parametrize("n, radius, steps", [(1, 1, 1), (2, 2, 1), (4, 2, 3), (7, 3, 2), (9, 1, 4), (12, 3, 1)])
def test_reference_is_the_definition(n, radius, steps):
    field = np.random.default_rng(n).uniform(-1, 1, size=(n, n))
    weights = np.random.default_rng(radius).uniform(size=(2 * radius + 1, 2 * radius + 1))
    expected = direct_stencil(field, weights, steps)
    np.testing.assert_allclose(reference(field, weights, steps), expected, rtol=1e-13, atol=1e-13)


def test_checks_draw_fresh_normalised_weights():
    harness = harness_for()
    case = {"label": "small", "n": 8}
    first, second = (harness.make_inputs(case, seed, "uniform")["weights"] for seed in (1, 2))
    assert first.shape == (7, 7) and (first > 0).all() and first.sum() == pytest.approx(1.0)
    assert not np.array_equal(first, second)


def test_weights_are_fixed_and_normalised():
    normalized = stencil_weights(3, "normalized")
    assert normalized.shape == (7, 7) and (normalized > 0).all()
    assert normalized.sum() == pytest.approx(1.0)
    np.testing.assert_array_equal(normalized, stencil_weights(3, "normalized"))
    np.testing.assert_array_equal(stencil_weights(1, "uniform"), np.full((3, 3), 1 / 9))


@pytest.mark.parametrize("name", COVERING)
@pytest.mark.parametrize("radius", [1, 3])
def test_kernel_matches_reference(kernels, name, radius):
    for steps in (1, 3):
        harness = harness_for(radius, steps)
        for n in (1, 5, 37, 64):
            case = {"label": f"n{n}", "n": n}
            inputs = harness.make_inputs(case, 1, "uniform")
            out = harness.output(case)
            out.fill(np.nan)
            harness.call(kernels[name], case, inputs, out)
            expected = harness.reference(case, inputs)
            np.testing.assert_allclose(out, expected, *harness.tolerance, err_msg=f"n={n} steps={steps}")


def test_seed_and_best_pass_every_judge_check(kernels):
    workload = Stencil2D(Stencil2DConfig(host_n=96, steps=2))
    harness = workload.harness(workload.tasks()[0], "host")
    assert isinstance(harness, HostHarness)  # the host kind's one harness interface
    for name in ("seed", "split-unroll4-block256-threads0", "streaming-unroll8-block128-threads2"):
        assert mismatches(kernels[name], harness) == [], name


@pytest.mark.parametrize(
    "bug, fixed, broken",
    [
        ("transposed weights", "w[(di + r) * k + (dj + r)]", "w[(dj + r) * k + (di + r)]"),
        ("last column dropped", "x < n)", "x < n - 1)"),
    ],
)
def test_wrong_kernel_is_caught(build, bug, fixed, broken):
    source = seed_source()
    assert fixed in source
    lib = build({bug.replace(" ", "_"): source.replace(fixed, broken)})[bug.replace(" ", "_")]
    assert mismatches(lib, harness_for()) != []


def test_only_threaded_sources_mention_openmp():
    assert "omp" not in seed_source().lower()
    assert "omp" not in TEMPLATE.render(params(loop_order="row_streaming", unroll=8, block_cols=128)).lower()
    threaded = TEMPLATE.render(params(threads=0))
    assert "#include <omp.h>" in threaded and "#pragma omp parallel for" in threaded


def test_streaming_renders_the_same_for_either_boundary():
    streaming = params(loop_order="row_streaming", unroll=4)
    assert TEMPLATE.render({**streaming, "boundary": "checked"}) == TEMPLATE.render({**streaming, "boundary": "split"})


def test_render_rejects_values_outside_a_knob():
    with pytest.raises(ValueError, match="unroll"):
        TEMPLATE.render(params(unroll=3))


def test_inputs_are_deterministic_per_seed_and_differ_across_seeds():
    harness = harness_for()
    case = {"label": "odd", "n": 37}
    for distribution in harness.distributions:
        first = harness.make_inputs(case, 1, distribution)["field"]
        assert first.dtype == np.float64 and first.flags.c_contiguous and first.shape == (37, 37)
        np.testing.assert_array_equal(first, harness.make_inputs(case, 1, distribution)["field"])
        assert not np.array_equal(first, harness.make_inputs(case, 2, distribution)["field"])
    spiky = harness.make_inputs(case, 1, "spiky")["field"]
    assert 0 < np.count_nonzero(spiky) < spiky.size // 10 and spiky.min() < -1 and spiky.max() > 1


def test_harness_cases_cover_the_task_odd_and_tiny_grids():
    harness = harness_for(radius=3, n=1024)
    sizes = [case["n"] for case in harness.correctness_cases(remeasure=False)]
    assert sizes[0] == 1024 and any(n % 8 for n in sizes) and min(sizes) < 7
    assert set(harness.seeds(remeasure=True)).isdisjoint(harness.seeds(remeasure=False))
    assert harness.timing_case()["n"] == 1024 and 2 * harness.cache_case()["n"] ** 2 * 8 <= 512 * 1024
    assert harness.points(harness.timing_case()) == 1024**2


def test_task_contract_and_work():
    workload = Stencil2D(Stencil2DConfig(host_n=512, steps=2))
    task = workload.tasks()[0]
    assert task.name == "box7x7-n10240-s2" and task.params["dtype"] == "float64"
    contract = workload.contract(task, "host")
    assert contract.source_filename == "host_source.c"
    assert "int hiera_stencil2d(" in contract.interface and "int hiera_stencil2d(" in contract.files["stencil2d.h"]
    assert workload.work(task, "host") == (2 * 8 * 512**2, 2 * 49 * 512**2 * 2)
    source, seed_params, origin = workload.seed(task, "host")
    assert seed_params == TEMPLATE.defaults() and source == seed_source() and TEMPLATE.name in origin
    with pytest.raises(UnsupportedArchitecture, match="tpu"):
        workload.contract(task, "tpu")


@pytest.mark.parametrize("field, value", [("radius", 0), ("steps", 0), ("n", 0), ("weights", "gaussian")])
def test_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        Stencil2DConfig(**{field: value})
