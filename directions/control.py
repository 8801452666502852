"""Direction C: control flow and boundary specialisation."""

from __future__ import annotations

from typing import ClassVar

from hiera_core import StrategyTemplate, hookimpl
from hiera_core.records import Profile
from hiera_directions._catalogue import nested
from hiera_directions._signals import HEADROOM, deficit_score

SIGNALS = ("branch_uniformity", "branch_free_fraction")
"""GPU: fraction of branch targets taken uniformly by a warp. Host: share of innermost loops free of conditionals."""

_CATALOGUE = {
    "pure_cuda": (
        StrategyTemplate(
            name="split-interior-boundary",
            steps=(
                "Partition the output domain into an interior, where every neighbour index is in range, and a "
                "boundary shell as wide as the stencil radius or halo.",
                "Compute the interior with a loop nest (GPU: a kernel or a set of blocks) that contains no bounds "
                "checks, so the compiler unrolls and vectorises it.",
                "Compute the boundary shell with a separate guarded loop or kernel that applies the padding rule "
                "explicitly.",
                "Align interior tiles to whole warps (32 threads in x) or SIMD widths so the split adds no new tail.",
            ),
            constraints=(
                "Interior and boundary tile the domain with no gap and no overlap: every output is written once.",
                "Boundary outputs follow the reference's padding semantics exactly (zero padding stays zero).",
                "A grid smaller than twice the halo has no interior and must take the guarded path.",
            ),
        ),
        StrategyTemplate(
            name="padded-halo-no-branches",
            steps=(
                "Stage each tile with its halo into shared memory, writing zeros for out-of-range cells while "
                "loading (the only place that tests indices).",
                "Run the compute loop over the staged tile with no index tests and a fully unrolled neighbourhood.",
                "Give the boundary blocks the same code path as interior blocks so no warp diverges on position.",
            ),
            constraints=(
                "Only the load phase may test bounds; the compute phase reads the staged tile unconditionally.",
                "The tile plus halo fits the shared-memory budget (227 KB per block on H200) at the intended "
                "occupancy.",
            ),
        ),
        StrategyTemplate(
            name="hoist-invariant-branches",
            steps=(
                "Move conditions that do not depend on the element (radius, zero coefficients, alignment, dtype) "
                "out of the loops, or make them template or constexpr parameters.",
                "Fully unroll fixed-size inner loops (`#pragma unroll`) once their trip counts are compile-time "
                "constants.",
                "Replace per-element integer division and modulo in index decomposition with 2D indexing or "
                "incremented pointers.",
                "Peel the remainder of unrolled or vectorised loops into one tail instead of guarding every "
                "iteration.",
            ),
            constraints=(
                "Specialised paths cover every runtime case the contract admits; keep a generic fallback.",
            ),
        ),
    ),
    "cuda_libraries": (
        StrategyTemplate(
            name="library-owned-padding",
            steps=(
                "Express the padded operation as a library call that owns edge handling: a cuDNN convolution with "
                "padding equal to the radius, or a CUTLASS kernel whose predicated tile iterators mask the edges.",
                "Pass the unpadded input and let the library apply the padding instead of custom guards.",
            ),
            constraints=(
                "The library's convention (cross-correlation versus convolution, zero padding) matches the "
                "reference.",
                "No reduced-precision math mode is enabled to reach a faster algorithm.",
            ),
        ),
        StrategyTemplate(
            name="cub-guarded-tail-tiles",
            steps=(
                "Load and store tiles with CUB `BlockLoad`/`BlockStore`, using the guarded overloads (with "
                "`valid_items`) only for the last, partial tile.",
                "Dispatch full tiles to an unguarded code path, decided once per block, not per element.",
            ),
            constraints=("Out-of-range lanes of the partial tile neither read past the input nor write output.",),
        ),
    ),
    "libraries_pytorch": (
        StrategyTemplate(
            name="pad-then-dense-op",
            steps=(
                "Materialise the padding once (`torch.nn.functional.pad`, or the operator's own `padding=` "
                "argument) and run one branch-free dense operator on the padded tensor.",
                "Remove Python-level special cases for edges and corners.",
            ),
            constraints=(
                "The padding mode matches the reference (constant zeros, not reflect or circular).",
                "A separate pad copy costs one extra read and write of the grid; prefer the operator's own padding.",
            ),
        ),
        StrategyTemplate(
            name="masked-tensor-ops",
            steps=(
                "Replace Python loops and boolean indexing over boundary regions with whole-tensor masked "
                "operations (`torch.where` with a mask built once per call).",
                "Keep every shape static so a single kernel sequence runs whatever the data.",
            ),
            constraints=(
                "No host synchronisation inside the timed call (`.item()`, boolean-mask indexing with a "
                "data-dependent shape).",
            ),
        ),
    ),
}


class ControlFlow:
    name: ClassVar[str] = "C"
    order: ClassVar[int] = 0
    """The paper's order: C, P, M, R, T."""
    signals: ClassVar[tuple[str, ...]] = (*SIGNALS, *HEADROOM)
    title: ClassVar[str] = "Control flow and boundary specialisation"
    description: ClassVar[str] = (
        "Remove divergent branches and per-element bounds checks from the hot path: specialise interior and "
        "boundary work, hoist invariant conditions, and predicate short arms instead of branching."
    )
    knowledge: ClassVar[str] = "\n".join(
        (
            "- A warp runs both sides of a divergent branch one after the other; fewer than 24 active threads "
            "per warp instruction means lanes are lost to divergence or predication.",
            "- Boundary cells are a thin shell (about 4r/N of an N x N grid of radius r): split them off rather "
            "than testing every point, and the interior becomes branch-free.",
            "- Zero padding can be materialised once (a padded copy, or zeros written into the shared-memory halo "
            "while staging) so the compute loop never tests indices.",
            "- Hoist conditions that do not depend on the element out of loops or into template/constexpr "
            "parameters; compile-time trip counts let the compiler unroll fully.",
            "- Short arms compile to predicated selects (`cond ? a : b`, `fmin`/`fmax`) without a branch; "
            "warp-uniform branches (on blockIdx or loop counters) cost almost nothing.",
            "- Divergence only matters within a warp: align tile edges to 32 threads in x so boundary work fills "
            "whole warps.",
            "- Peel loop remainders into one tail instead of guarding every iteration; give the grid one guarded "
            "tail block, not a guard in every thread.",
            "- Integer division and modulo cost tens of instructions on a GPU; use 2D grids, strength reduction or "
            "precomputed tables for index decomposition.",
            "- Boundary blocks also cause load imbalance: a partial last wave (`launch__waves_per_multiprocessor`) "
            "or a wide min/max spread of `sm__cycles_active`.",
            "- On CPU a conditional inside the innermost loop usually blocks auto-vectorisation "
            "(`gcc -fopt-info-vec-missed` says why); the interior/boundary split restores it.",
        )
    )
    rubric: ClassVar[str] = (
        "Score C high when lanes or iterations are lost to control flow. GPU: branch efficiency "
        "`smsp__sass_average_branch_targets_threads_uniform.pct` below 90%, "
        "`smsp__thread_inst_executed_per_inst_executed.ratio` (or its `_pred_on_` variant) below 24 of 32, or "
        "`smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio` above 30% of the CPI point "
        "to C (0.6-1.0); uniform branches with 30+ active threads per instruction score near 0. Host: "
        "`branch_free_fraction` from a static scan of the source (1 = no conditional in the innermost loops). "
        "Rule: score = 1 - (branch_uniformity, else branch_free_fraction), times the headroom "
        "1 - max(memory_floor_fraction, compute_floor_fraction)."
    )
    config_class: ClassVar[type | None] = None

    def __init__(self, config: None) -> None:
        self.config = config

    def strategies(self, rank: int) -> list[StrategyTemplate]:
        return nested(_CATALOGUE, rank)

    def score(self, profile: Profile | None) -> tuple[float, str]:
        return deficit_score("C", profile, SIGNALS)


@hookimpl
def hiera_register_directions() -> list[type]:
    return [ControlFlow]
