"""The built-in directions C, P, M, R, T: registration and scoring rules; what the host and cuda architectures
know of them (knowledge, rubric, strategy catalogues); the hook that brings that knowledge to a run."""

from __future__ import annotations

import itertools
import re

import pytest

from hiera_core import DirectionKnowledge, StrategyTemplate, hookimpl
from hiera_core.plugins import PluginError, collect, direction_knowledge, make_plugin_manager
from hiera_core.protocols import Direction
from hiera_core.records import Profile
from hiera_directions import control, memory, parallelism, reuse, tensor

LETTERS = ("C", "P", "M", "R", "T")  # the paper's order
RANKS = (0, 1, 2)  # pure_cuda, cuda_libraries, libraries_pytorch

MODULES = (control, parallelism, memory, reuse, tensor)
KINDS = ("host", "cuda")
ARCHITECTURES = ("hiera_plugins.host", "hiera_plugins.cuda")

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


@pytest.fixture(scope="module")
def known() -> dict[str, dict[str, DirectionKnowledge]]:
    """By kind, then letter: what the built-in architectures know of the built-in directions."""
    pm = make_plugin_manager(autoload=False, extra_plugins=[*MODULES, *ARCHITECTURES])
    return {kind: direction_knowledge(pm, LETTERS, kind) for kind in KINDS}


def prompt_texts(knowledge: DirectionKnowledge) -> list[str]:
    """Everything of it a prompt quotes: knowledge, rubric, and every strategy's name, steps and constraints."""
    strategies = knowledge.strategies_for(len(knowledge.strategies))
    return [knowledge.knowledge, knowledge.rubric, *(t for s in strategies for t in (s.name, *s.steps, *s.constraints))]


def scores(directions: dict[str, Direction], signals: dict[str, float]) -> dict[str, float]:
    profile = Profile(source="test", signals=signals)
    return {name: direction.score(profile)[0] for name, direction in directions.items()}


def test_the_five_directions_register_and_satisfy_the_protocol(directions):
    assert list(directions) == list(LETTERS)  # in the session's order: the paper's
    for name, direction in directions.items():
        assert isinstance(direction, Direction)
        assert direction.config_class is None
        for text in (direction.title, direction.description):
            assert text.strip(), f"{name} has an empty text"
        assert not GPU_ONLY.search(direction.description), name  # quoted on every architecture
        for hardware_knowledge in ("knowledge", "rubric", "strategies"):  # the architectures' to say
            assert not hasattr(direction, hardware_knowledge), (name, hardware_knowledge)


@pytest.mark.parametrize("kind", KINDS)
def test_each_architecture_knows_every_builtin_direction_and_its_rubric_names_a_signal_it_gives(directions, known, kind):
    for name, direction in directions.items():
        knowledge = known[kind][name]
        assert knowledge.knowledge.strip() and knowledge.rubric.strip(), (kind, name)
        assert len(knowledge.knowledge.splitlines()) >= 5, (kind, name)
        rule = knowledge.rubric.split("Rule:")[1].split("times the headroom")[0]
        assert any(signal in rule for signal in direction.signals), (kind, name, rule)
        assert len(knowledge.strategies) == len(RANKS), (kind, name)  # one tuple per built-in space


GPU_ONLY = re.compile(
    r"\bwarps?\b|threadIdx|blockIdx|\bncu\b|Nsight|shared[ -]memory|H200|Hopper|\bGPU|CUDA|cuBLAS|cuDNN|CUTLASS|\bCUB\b"
    r"|tensor[ -]cores?|\bSMs?\b|SASS|sm_90|__\w+__|\w+__\w+\.(sum|pct|ratio)",
    re.IGNORECASE,
)


def test_on_the_host_no_prompt_text_speaks_of_a_gpu(known):
    for name, knowledge in known["host"].items():
        for text in prompt_texts(knowledge):
            assert not GPU_ONLY.search(text), (name, GPU_ONLY.search(text).group(), text)


def test_on_cuda_no_prompt_text_speaks_of_the_host(known):
    for name, knowledge in known["cuda"].items():
        for text in prompt_texts(knowledge):
            assert not re.search(r"\bhost\b(?! synchronis)|OpenMP|AVX|-march=native", text, re.IGNORECASE), (name, text)


NCU_METRICS = {  # what the rubrics quoted before they moved to the cuda architecture
    "C": (
        "smsp__sass_average_branch_targets_threads_uniform.pct",
        "smsp__thread_inst_executed_per_inst_executed.ratio",
        "smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio",
    ),
    "P": (
        "sm__warps_active.avg.pct_of_peak_sustained_active",
        "sm__maximum_warps_per_active_cycle_pct",
        "launch__grid_size",
        "launch__sm_count",
        "launch__waves_per_multiprocessor",
        "sm__throughput",
        "gpu__compute_memory_throughput",
        "smsp__warps_eligible.avg.per_cycle_active",
    ),
    "M": (
        "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio",
        "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
        "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
        "derived__memory_l2_theoretical_sectors_global_excessive",
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{ld,st}.sum",
        "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{ld,st}.sum",
    ),
    "R": (
        "dram__bytes_read.sum",
        "dram__bytes_write.sum",
        "lts__t_sector_hit_rate.pct",
        "smsp__inst_executed_op_ldgsts.sum",
        "sm__pipe_tma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    ),
    "T": (
        "sm__pipe_tensor_op_dmma_cycles_active",
        "sm__pipe_tensor_op_hmma_cycles_active",
        "sm__inst_executed_pipe_tensor_op_gmma",
        "sm__pipe_fma_cycles_active",
        "sm__pipe_fp64_cycles_active",
        "sm__pipe_alu_cycles_active",
        "sm__inst_issued.avg.pct_of_peak_sustained_elapsed",
    ),
}


def test_on_cuda_the_rubrics_keep_the_nsight_compute_metric_names(known):
    for name, metrics in NCU_METRICS.items():
        assert [m for m in metrics if f"`{m}`" not in known["cuda"][name].rubric] == [], name


def test_each_module_registers_exactly_one_direction():
    assert [[cls.name for cls in module.hiera_register_directions()] for module in MODULES] == [[letter] for letter in LETTERS]


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


@pytest.mark.parametrize("kind", KINDS)
def test_catalogues_nest_from_the_narrowest_space_outwards(known, kind):
    for name, knowledge in known[kind].items():
        catalogues = [[s.name for s in knowledge.strategies_for(rank)] for rank in RANKS]
        for narrow, wide in itertools.pairwise(catalogues):
            assert len(wide) >= len(narrow) and wide[len(wide) - len(narrow) :] == narrow, (kind, name)
        own = catalogues[-1]
        assert own and len(own) == len(set(own)), f"{kind} {name} repeats a strategy name or has none"
    if kind == "cuda":  # every space adds something of its own on a GPU
        assert all(all(own) for own in (k.strategies for k in known[kind].values()))


@pytest.mark.parametrize("kind", KINDS)
def test_a_space_wider_than_the_catalogue_gets_all_of_it(known, kind):
    for knowledge in known[kind].values():  # e.g. a third party's `triton` space of rank 3
        assert knowledge.strategies_for(3) == knowledge.strategies_for(RANKS[-1])


def test_a_catalogue_lists_a_spaces_own_strategies_first_then_the_narrower_ones():
    one, two, three = (StrategyTemplate(name=n, steps=("s",)) for n in ("one", "two", "three"))
    knowledge = DirectionKnowledge(knowledge="k", rubric="r", strategies=[[one], [], [two, three]])
    assert knowledge.strategies == ((one,), (), (two, three))
    assert [s.name for s in knowledge.strategies_for(2)] == ["two", "three", "one"]
    assert knowledge.strategies_for(1) == knowledge.strategies_for(0) == knowledge.strategies_for(-1) == (one,)
    assert knowledge.strategies_for(7) == knowledge.strategies_for(2)
    assert DirectionKnowledge(knowledge="k", rubric="r").strategies_for(3) == ()


@pytest.mark.parametrize("kind", KINDS)
def test_every_strategy_is_concrete(known, kind):
    for knowledge in known[kind].values():
        for strategy in knowledge.strategies_for(RANKS[-1]):
            assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", strategy.name), strategy.name
            assert strategy.steps and all(step.strip() for step in strategy.steps)


STRATEGY_NAMES = {  # every name a recorded run may refer to: each lives on in the architecture it describes
    "split-interior-boundary",
    "padded-halo-no-branches",
    "hoist-invariant-branches",
    "library-owned-padding",
    "cub-guarded-tail-tiles",
    "pad-then-dense-op",
    "masked-tensor-ops",
    "size-grid-to-fill-sms",
    "occupancy-limiter-tuning",
    "persistent-grid-stride-kernel",
    "parallelize-outer-loops",
    "batched-library-calls",
    "cuda-graph-launches",
    "batched-tensor-ops",
    "torch-cuda-graph",
    "unit-stride-row-streaming",
    "vectorized-coalesced-loads",
    "conflict-free-shared-memory",
    "eliminate-register-spills",
    "library-native-layout",
    "cub-vectorized-block-io",
    "contiguous-native-layout",
    "avoid-hidden-copies",
    "cache-blocking",
    "shared-memory-tiling",
    "cp-async-double-buffering",
    "tma-bulk-tile-pipeline",
    "fuse-into-library-epilogue",
    "cutlass-multistage-mainloop",
    "fuse-torch-ops",
    "hoist-invariant-tensors",
    "register-blocking",
    "dmma-tensor-core-formulation",
    "cut-instruction-overhead",
    "blas-gemm-formulation",
    "cutlass-sm90-tensorop",
    "cudnn-algorithm-search",
    "torch-matmul-formulation",
    "unfold-then-gemm",
}


def test_no_strategy_was_renamed_or_lost_when_the_catalogues_moved(known):
    names = {s.name for by_letter in known.values() for k in by_letter.values() for s in k.strategies_for(RANKS[-1])}
    assert names == STRATEGY_NAMES


def test_host_moves_lead_their_catalogues(known):
    # The host expert templates move one knob per direction; the first strategy must describe that move.
    host = known["host"]
    first = {name: knowledge.strategies_for(0)[0].name for name, knowledge in host.items() if name != "P"}
    first["P"] = host["P"].strategies_for(1)[0].name  # threads: a library on the host (rank 1)
    assert first == {
        "C": "split-interior-boundary",
        "P": "parallelize-outer-loops",
        "M": "unit-stride-row-streaming",
        "R": "cache-blocking",
        "T": "register-blocking",
    }


def test_cuda_moves_lead_their_catalogues(known):
    # The stencil's cuda template has a pure_cuda knob for every direction: the expert plans the rank-0 head.
    assert {name: knowledge.strategies_for(0)[0].name for name, knowledge in known["cuda"].items()} == {
        "C": "split-interior-boundary",
        "P": "size-grid-to-fill-sms",
        "M": "unit-stride-row-streaming",
        "R": "cache-blocking",
        "T": "register-blocking",
    }


class Knows:
    """A plugin that knows direction C on `host` architectures (as the host plugin does) and V on `acme`."""

    @hookimpl
    def hiera_direction_knowledge(self, direction, kind):
        if (direction, kind) in (("C", "host"), ("V", "acme")):
            return DirectionKnowledge(knowledge=f"- {direction} on {kind}", rubric="r")
        return None


def test_two_plugins_knowing_one_direction_on_one_kind_is_an_error_naming_both():
    knows = Knows()
    pm = make_plugin_manager(autoload=False, extra_plugins=[control, "hiera_plugins.host", knows])
    with pytest.raises(PluginError) as error:
        direction_knowledge(pm, ["C"], "host")
    assert str(error.value) == (
        f"plugins 'hiera_plugins.host' and '{pm.get_name(knows)}' both give the knowledge of direction C on 'host'"
        " architectures: block one (HIERA_DISABLE_PLUGINS)"
    )
    assert direction_knowledge(pm, ["C"], "cuda")["C"].strategies == ()  # another kind: nobody answers twice


def test_a_direction_nobody_knows_on_a_kind_is_scored_with_texts_that_say_so_and_no_strategies():
    pm = make_plugin_manager(autoload=False, extra_plugins=[*MODULES, *ARCHITECTURES, Knows()])
    knowledge = direction_knowledge(pm, ["V", "C"], "hip")
    assert list(knowledge) == ["V", "C"]
    for letter, known in knowledge.items():
        assert f"direction {letter} on 'hip'" in known.knowledge and f"for {letter} on 'hip'" in known.rubric
        assert known.strategies_for(9) == ()
    assert direction_knowledge(pm, ["V"], "acme")["V"].knowledge == "- V on acme"


def test_prompts_group_each_signal_under_the_directions_that_declare_it(directions):
    """The vocabulary is declared (`Direction.signals`), not found in a rubric's prose: a third party's
    direction that reads a new signal gets it, and a signal nobody reads is said to be unclaimed."""
    from hiera_core.agents import profile_summary
    from hiera_core.records import Measured

    class Divergence:
        name, order, signals = "D", 5, ("warp_divergence",)
        rubric = "mentions sector_efficiency in passing"

    signals = {"sector_efficiency": 0.4, "warp_divergence": 0.3, "memory_floor_fraction": 0.2, "mystery": 0.9}
    measured = Measured(
        latency_ms=1.0,
        latency_p10_ms=1.0,
        latency_p90_ms=1.0,
        repeats=5,
        reference_latency_ms=2.0,
        max_abs_error=0.0,
        profile=Profile(source="test", signals=signals),
    )
    text = profile_summary(measured, {**directions, "D": Divergence()})
    assert "- M: sector_efficiency = 0.40" in text
    assert "- D: warp_divergence = 0.30" in text
    assert "- shared (headroom): memory_floor_fraction = 0.20" in text
    assert "- unclaimed: mystery = 0.90" in text
