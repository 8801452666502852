"""Direction R: data reuse and data-movement pipelining."""

from __future__ import annotations

from typing import ClassVar

from hiera_core import StrategyTemplate, hookimpl
from hiera_core.records import Profile
from hiera_directions._catalogue import nested
from hiera_directions._signals import HEADROOM, deficit_score

SIGNALS = ("onchip_reuse", "dram_reuse", "cache_resilience")
"""GPU: ideal bytes / bytes requested from L1 by global loads and stores, and ideal DRAM bytes / measured DRAM
bytes; the worse of the two counts. Host: per-point time on a cache-resident grid / at task size."""
GPU_SIGNALS = SIGNALS[:2]

_CATALOGUE = {
    "pure_cuda": (
        StrategyTemplate(
            name="cache-blocking",
            steps=(
                "Split the columns (the contiguous dimension) into blocks whose working set, the input rows one "
                "block of outputs reads, fits in L1/L2 on the host or in shared memory on the GPU.",
                "Sweep all rows of one column block before moving to the next, so each input line comes from "
                "DRAM once and serves every output that needs it.",
                "Choose the block width by measurement around cache size / (rows in flight x element size).",
            ),
            constraints=(
                "Blocks cover the domain exactly: halos are read by several blocks, outputs written once.",
                "Block widths are multiples of the SIMD or warp width except for the last block.",
            ),
        ),
        StrategyTemplate(
            name="shared-memory-tiling",
            steps=(
                "Load each block's tile plus halo into shared memory once with coalesced loads, then "
                "`__syncthreads()` and compute every output of the tile from shared memory.",
                "Let each thread compute a column of outputs and keep the sliding window of rows in registers "
                "(2.5D streaming) to cut shared-memory reads.",
                "Raise the shared-memory limit with `cudaFuncSetAttribute(..., "
                "cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)` when the tile needs more than 48 KB.",
            ),
            constraints=(
                "Shared memory per block stays at or below 227 KB and leaves room for two blocks per SM unless "
                "measured otherwise.",
            ),
        ),
        StrategyTemplate(
            name="cp-async-double-buffering",
            steps=(
                "Allocate 2-4 shared-memory stages and issue `cp.async` (16-byte, `.cg`, via "
                "`cuda::memcpy_async` or `__pipeline_memcpy_async`) for tile k+1 before computing tile k.",
                "Commit each stage's copies as a group and wait with `cp.async.wait_group(stages - 2)` plus a "
                "barrier before reading it.",
            ),
            constraints=(
                "A stage is overwritten only after every warp has finished reading it.",
                "16-byte copies need 16-byte aligned source and destination addresses.",
            ),
        ),
        StrategyTemplate(
            name="tma-bulk-tile-pipeline",
            steps=(
                "Describe the input as a tensor map (`cuTensorMapEncodeTiled`, box = tile plus halo) and let one "
                "thread issue `cp.async.bulk.tensor` per stage, completing on an mbarrier.",
                "Use 3-4 stages, or a producer warp feeding consumer warps, to cover TMA's higher latency.",
            ),
            constraints=(
                "Compile for sm_90 or sm_90a; shared-memory destinations are 128-byte aligned.",
                "Out-of-bounds boxes are zero-filled by TMA only when that matches the reference padding.",
            ),
        ),
    ),
    "cuda_libraries": (
        StrategyTemplate(
            name="fuse-into-library-epilogue",
            steps=(
                "Fold elementwise pre- and post-processing into the library call: alpha/beta scaling and "
                "cuBLASLt epilogues (bias, ReLU, GELU), cuDNN fused convolution-bias-activation, or a CUTLASS "
                "epilogue, so intermediates never round-trip through DRAM.",
            ),
            constraints=("The fused epilogue computes what the reference computes, within the tolerance.",),
        ),
        StrategyTemplate(
            name="cutlass-multistage-mainloop",
            steps=(
                "Use a CUTLASS kernel with a multistage `cp.async` mainloop or an sm_90 TMA warp-specialised "
                "collective, and tune tile shape and stage count.",
            ),
            constraints=("Tile shape divides the problem or the kernel's predicated path handles the rest.",),
        ),
    ),
    "libraries_pytorch": (
        StrategyTemplate(
            name="fuse-torch-ops",
            steps=(
                "Replace chains of ATen operators that each write a full intermediate with fused ones "
                "(`torch.addmm`, `torch.baddbmm`, `torch.addcmul`, a convolution with its `bias`).",
            ),
            constraints=("The fused operator keeps the contract dtype and reference semantics.",),
        ),
        StrategyTemplate(
            name="hoist-invariant-tensors",
            steps=(
                "Build tensors that stay the same across the call's inner steps (reshaped weights, masks, index "
                "tensors) once, before the loop.",
                "Ping-pong two preallocated buffers across time steps instead of allocating a new output each "
                "step.",
            ),
            constraints=("Nothing is cached across calls: each call recomputes from its own inputs.",),
        ),
    ),
}


class DataReuse:
    name: ClassVar[str] = "R"
    order: ClassVar[int] = 3
    signals: ClassVar[tuple[str, ...]] = (*SIGNALS, *HEADROOM)
    title: ClassVar[str] = "Data reuse and data-movement pipelining"
    description: ClassVar[str] = (
        "Bring each byte from DRAM once and reuse it on chip: tiling in shared memory, registers and cache, "
        "fusion of passes, and multi-stage asynchronous copies that overlap loads with compute."
    )
    knowledge: ClassVar[str] = "\n".join(
        (
            "- Compare `dram__bytes_read.sum` + `dram__bytes_write.sum` with the ideal (unique inputs + outputs): "
            "a ratio above 1.5 means data is fetched repeatedly; tile or fuse.",
            "- Compare the sectors requested from L1 (`l1tex__t_sectors_pipe_lsu_mem_global_op_{ld,st}.sum` x 32 B) "
            "with the same ideal: a kernel can see each byte once in DRAM and still be bound by L1/L2 bandwidth "
            "when every output re-loads its neighbours (memory throughput far above DRAM throughput); keep them "
            "in shared memory or registers instead.",
            "- H200: 228 KB of shared memory per SM carved from the 256 KB L1 (227 KB per block, opt-in above "
            "48 KB); size tiles so two blocks or all pipeline stages fit.",
            "- A radius-r stencil on a T x T tile reads (T + 2r)^2 inputs for T^2 outputs: larger tiles amortise "
            "the halo, and registers can hold a sliding window along the streaming axis (2.5D blocking).",
            "- `cp.async` (LDGSTS; 4, 8 or 16 bytes; `.cg` bypasses L1) copies global to shared memory without "
            "registers; 2-4 stages overlap tile k+1's loads with tile k's compute.",
            "- Hopper TMA (`cp.async.bulk.tensor` with a `cuTensorMapEncodeTiled` map) moves a whole tile from "
            "one thread and signals an mbarrier; its latency is higher, so it needs 3-4 stages.",
            "- The ~50 MB L2 can serve halos and panels across blocks: raster or swizzle the block order so "
            "neighbours run together; `cudaAccessPolicyWindow` can keep a region persisting.",
            "- Fusing passes (epilogues, several time steps by temporal blocking) removes intermediate DRAM round "
            "trips; temporal blocking pays only while the kernel stays memory-bound.",
            "- Host: block loops so the working set of one block (e.g. 2r + 1 input rows of a column block) stays "
            "in L1/L2; the per-point time on a cache-resident grid shows what perfect reuse would give.",
        )
    )
    rubric: ClassVar[str] = (
        "Score R high when data comes from DRAM more often than needed or its loads are not overlapped with "
        "compute. GPU: dram_reuse = ideal bytes / (`dram__bytes_read.sum` + `dram__bytes_write.sum`), with "
        "measured/ideal above 1.5 a strong signal; a low `lts__t_sector_hit_rate.pct` with redundant reads; "
        "`long_scoreboard` stalls above 30% of the CPI while `smsp__inst_executed_op_ldgsts.sum` (cp.async) or "
        "`sm__pipe_tma_cycles_active.avg.pct_of_peak_sustained_elapsed` is 0 on a tiled kernel; `barrier` stalls "
        "above 30% (pipeline too shallow). DRAM throughput at 80% of peak or more with a ratio near 1 means R is "
        "exhausted. Host: `cache_resilience` = per-point time on a cache-resident grid / per-point time at task "
        "size. Rule: score = 1 - (dram_reuse, else cache_resilience), times the headroom "
        "1 - max(memory_floor_fraction, compute_floor_fraction)."
    )
    config_class: ClassVar[type | None] = None

    def __init__(self, config: None) -> None:
        self.config = config

    def strategies(self, rank: int) -> list[StrategyTemplate]:
        return nested(_CATALOGUE, rank)

    def score(self, profile: Profile | None) -> tuple[float, str]:
        present = [name for name in GPU_SIGNALS if profile is not None and name in profile.signals]
        if present:  # reuse is missing wherever data is fetched again: on chip or from DRAM
            return deficit_score("R", profile, (min(present, key=profile.signals.__getitem__),))
        return deficit_score("R", profile, SIGNALS)


@hookimpl
def hiera_register_directions() -> list[type]:
    return [DataReuse]
