"""The built-in directions C, P, M, R, T: registration, knowledge, catalogues and scoring rules."""

from __future__ import annotations

import itertools
import re

import pytest

from hiera_core.plugins import collect, make_plugin_manager
from hiera_core.protocols import Direction
from hiera_core.records import Profile

LETTERS = ("C", "P", "M", "R", "T")  # the paper's order
RANKS = (0, 1, 2)  # pure_cuda, cuda_libraries, libraries_pytorch
from hiera_directions import control, memory, parallelism, reuse, tensor

MODULES = (control, parallelism, memory, reuse, tensor)

HOST_HEALTHY = {
    "branch_free_fraction": 1.0,
    "parallel_utilization": 1.0,
    "cache_resilience": 1.0,
    "in_cache_compute_fraction": 1.0,
    "memory_floor_fraction": 0.5,
}
GPU_HEALTHY = {
    "branch_uniformity": 1.0,
    "achieved_occupancy": 1.0,
    "grid_fill": 1.0,
    "sector_efficiency": 1.0,
    "dram_reuse": 1.0,
    "pipe_utilization": 1.0,
    "memory_floor_fraction": 0.2,
}
# (direction, the signal that flags it, host or GPU baseline)
BOTTLENECKS = [
    ("C", "branch_free_fraction", HOST_HEALTHY),
    ("P", "parallel_utilization", HOST_HEALTHY),
    ("M", "memory_floor_fraction", HOST_HEALTHY),
    ("R", "cache_resilience", HOST_HEALTHY),
    ("T", "in_cache_compute_fraction", HOST_HEALTHY),
    ("C", "branch_uniformity", GPU_HEALTHY),
    ("P", "achieved_occupancy", GPU_HEALTHY),
    ("P", "grid_fill", GPU_HEALTHY),
    ("M", "sector_efficiency", GPU_HEALTHY),
    ("R", "dram_reuse", GPU_HEALTHY),
    ("T", "pipe_utilization", GPU_HEALTHY),
]
# (direction, GPU signal, host signal)
PREFERRED = [
    ("C", "branch_uniformity", "branch_free_fraction"),
    ("P", "achieved_occupancy", "parallel_utilization"),
    ("M", "sector_efficiency", "memory_floor_fraction"),
    ("R", "dram_reuse", "cache_resilience"),
    ("T", "pipe_utilization", "in_cache_compute_fraction"),
]


@pytest.fixture
def directions() -> dict[str, Direction]:
    registry = collect(make_plugin_manager(autoload=False, extra_plugins=MODULES), "directions")
    return {name: registry.get(name)(None) for name in sorted(registry.names(), key=lambda n: registry.get(n).order)}


def scores(directions: dict[str, Direction], signals: dict[str, float]) -> dict[str, float]:
    profile = Profile(source="test", signals=signals)
    return {name: direction.score(profile)[0] for name, direction in directions.items()}


def test_the_five_directions_register_and_satisfy_the_protocol(directions):
    assert list(directions) == list(LETTERS)  # in the session's order: the paper's
    for name, direction in directions.items():
        assert isinstance(direction, Direction)
        assert direction.config_class is None
        for text in (direction.title, direction.description, direction.knowledge, direction.rubric):
            assert text.strip(), f"{name} has an empty text"
        assert len(direction.knowledge.splitlines()) >= 6


def test_each_module_registers_exactly_one_direction():
    assert [[cls.name for cls in module.hiera_register_directions()] for module in MODULES] == [
        [letter] for letter in LETTERS
    ]


@pytest.mark.parametrize("value", [0.0, 0.3, 1.0])
def test_scores_stay_within_unit_interval(directions, value):
    names = {name for signals in (HOST_HEALTHY, GPU_HEALTHY) for name in signals} | {"compute_floor_fraction"}
    for signals in ({name: value for name in names}, {name: 1.0 - value for name in names}, {"grid_fill": value}):
        for score in scores(directions, signals).values():
            assert 0.0 <= score <= 1.0


def test_no_profile_or_no_signal_scores_zero(directions):
    for name, direction in directions.items():
        assert direction.score(None) == (0.0, "no profile")
        score, reason = direction.score(Profile(source="test"))
        assert score == 0.0 and reason.startswith(f"{name}: no ")


@pytest.mark.parametrize(("letter", "signal", "baseline"), BOTTLENECKS)
def test_the_flagged_direction_scores_highest(directions, letter, signal, baseline):
    result = scores(directions, {**baseline, signal: 0.0})
    assert max(result, key=result.get) == letter
    assert all(result[letter] > score for name, score in result.items() if name != letter)


@pytest.mark.parametrize(("letter", "gpu", "host"), PREFERRED)
def test_gpu_signal_is_preferred_over_host_signal(directions, letter, gpu, host):
    score, reason = directions[letter].score(Profile(source="test", signals={gpu: 1.0, host: 0.0}))
    assert score == 0.0
    assert f"{gpu}=1.00" in reason and host not in reason


def test_reason_cites_signal_and_headroom(directions):
    profile = Profile(source="test", signals={"in_cache_compute_fraction": 0.04, "compute_floor_fraction": 0.03})
    assert directions["T"].score(profile) == (0.931, "T: in_cache_compute_fraction=0.04, headroom 0.97 -> 0.931")


def test_host_memory_estimate_counts_half(directions):
    score, reason = directions["M"].score(Profile(source="test", signals={"memory_floor_fraction": 0.2}))
    assert score == pytest.approx(0.5 * 0.8 * 0.8)
    assert "memory floor only" in reason


def test_grid_fill_overrides_a_healthy_occupancy(directions):
    profile = Profile(source="test", signals={"achieved_occupancy": 0.9, "grid_fill": 0.25})
    score, reason = directions["P"].score(profile)
    assert score == 0.75 and "grid_fill=0.25" in reason


@pytest.mark.parametrize("floor", ["memory_floor_fraction", "compute_floor_fraction"])
def test_a_kernel_near_its_floor_has_little_left_anywhere(directions, floor):
    signals = {name: 0.0 for signals in (HOST_HEALTHY, GPU_HEALTHY) for name in signals}
    assert all(score <= 0.05 for score in scores(directions, {**signals, floor: 0.95}).values())


def test_catalogues_nest_from_pure_cuda_outwards(directions):
    for name, direction in directions.items():
        catalogues = [[s.name for s in direction.strategies(rank)] for rank in RANKS]
        for narrow, wide in itertools.pairwise(catalogues):
            assert len(wide) > len(narrow) and wide[-len(narrow) :] == narrow, name
        own = catalogues[-1]
        assert len(own) == len(set(own)), f"{name} repeats a strategy name"


def test_a_space_wider_than_the_catalogue_gets_all_of_it(directions):
    for direction in directions.values():  # e.g. a third party's `triton` space of rank 3
        assert direction.strategies(3) == direction.strategies(RANKS[-1])


def test_every_strategy_is_concrete(directions):
    for direction in directions.values():
        for strategy in direction.strategies(RANKS[-1]):
            assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", strategy.name), strategy.name
            assert strategy.steps and all(step.strip() for step in strategy.steps)


def test_host_moves_lead_their_catalogues(directions):
    # The host expert templates move one knob per direction; the first strategy must describe that move.
    first = {name: direction.strategies(0)[0].name for name, direction in directions.items()}
    first["P"] = directions["P"].strategies(1)[0].name
    assert first == {
        "C": "split-interior-boundary",
        "P": "parallelize-outer-loops",
        "M": "unit-stride-row-streaming",
        "R": "cache-blocking",
        "T": "register-blocking",
    }


def test_prompts_group_each_signal_under_the_directions_that_declare_it(directions):
    """The vocabulary is declared (`Direction.signals`), not found in a rubric's prose: a third party's
    direction that reads a new signal gets it, and a signal nobody reads is said to be unclaimed."""
    from hiera_core.agents import profile_summary
    from hiera_core.records import Measured

    class Divergence:
        name, order, signals = "D", 5, ("warp_divergence",)
        rubric = "mentions sector_efficiency in passing"

    signals = {"sector_efficiency": 0.4, "warp_divergence": 0.3, "memory_floor_fraction": 0.2, "mystery": 0.9}
    measured = Measured(latency_ms=1.0, latency_p10_ms=1.0, latency_p90_ms=1.0, repeats=5, reference_latency_ms=2.0,
                        max_abs_error=0.0, profile=Profile(source="test", signals=signals))
    text = profile_summary(measured, {**directions, "D": Divergence()})
    assert "- M: sector_efficiency = 0.40" in text
    assert "- D: warp_divergence = 0.30" in text
    assert "- shared (headroom): memory_floor_fraction = 0.20" in text
    assert "- unclaimed: mystery = 0.90" in text
