"""Direction M: memory transaction efficiency."""

from __future__ import annotations

from typing import ClassVar

from hiera_core import StrategyTemplate, hookimpl
from hiera_core.records import Profile
from hiera_directions._catalogue import nested
from hiera_directions._signals import HEADROOM, first_signal, scaled_score

SECTOR_EFFICIENCY = "sector_efficiency"
"""GPU: useful bytes / bytes moved in 32-byte sectors."""

MEMORY_FLOOR = "memory_floor_fraction"
"""Host: memory floor time / measured time; the only memory signal the host timer gives."""

HOST_WEIGHT = 0.5
"""The host signal cannot tell wasted transactions from other stalls, so it counts half."""

_CATALOGUE = {
    "pure_cuda": (
        StrategyTemplate(
            name="unit-stride-row-streaming",
            steps=(
                "Order the loops, and map threads, so the innermost loop (GPU: `threadIdx.x`) walks the "
                "contiguous, unit-stride dimension of every array, streaming whole rows.",
                "Interchange loops whose inner index strides across rows, so each cache line or 32-byte sector "
                "fetched is used completely before it is evicted.",
                "Route unavoidable column or transposed accesses through a shared-memory tile (host: a small "
                "cache-resident buffer) so global reads and writes both stay contiguous.",
            ),
            constraints=(
                "Only loops whose iterations are independent are interchanged; each output is still computed "
                "from the same inputs.",
                "The contract's array layout is fixed: change the access order, not the interface.",
            ),
        ),
        StrategyTemplate(
            name="vectorized-coalesced-loads",
            steps=(
                "Load and store 16 bytes per thread (`double2`, `float4`, `ld.global.nc.v2.f64`) from 16-byte "
                "aligned addresses, so a warp moves whole 128-byte lines with a quarter of the instructions.",
                "Mark read-only inputs `const __restrict__` so loads can take the non-coherent path and be "
                "reordered.",
                "Handle a misaligned head and tail of each row with scalar accesses.",
            ),
            constraints=(
                "Alignment of the base pointer and row pitch is checked at run time, with a scalar fallback.",
            ),
        ),
        StrategyTemplate(
            name="conflict-free-shared-memory",
            steps=(
                "Pad shared-memory tiles by one element per row, or XOR-swizzle the column index, so a warp's "
                "column access touches 32 distinct banks.",
                "Check `l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{ld,st}.sum` against the wavefront "
                "count before and after.",
            ),
            constraints=("Padding is included in the shared-memory budget (227 KB per block on H200).",),
        ),
        StrategyTemplate(
            name="eliminate-register-spills",
            steps=(
                "Read spill stores and loads from `-Xptxas -v`; shorten live ranges, drop redundant per-thread "
                "arrays, or lower unrolling until they are 0 bytes.",
                "Index per-thread arrays only with compile-time constants so they stay in registers.",
            ),
            constraints=("Occupancy must not fall below the level measured before the change.",),
        ),
    ),
    "cuda_libraries": (
        StrategyTemplate(
            name="library-native-layout",
            steps=(
                "Pick the library layout that matches the data as stored: for row-major data call column-major "
                "cuBLAS as C^T = B^T A^T, and describe cuDNN tensors in the layout they already have (NHWC or "
                "NCHW).",
                "Remove explicit transpose or repacking copies around the call.",
            ),
            constraints=("The result is the reference's, in the contract's output layout.",),
        ),
        StrategyTemplate(
            name="cub-vectorized-block-io",
            steps=(
                "Move tiles with CUB `BlockLoad`/`BlockStore` using `BLOCK_LOAD_VECTORIZE` or the warp-striped "
                "`BLOCK_LOAD_WARP_TRANSPOSE`, so global accesses are coalesced vectors whatever the per-thread "
                "layout.",
            ),
            constraints=("The temporary storage CUB needs fits the shared-memory budget.",),
        ),
    ),
    "libraries_pytorch": (
        StrategyTemplate(
            name="contiguous-native-layout",
            steps=(
                "Make inputs contiguous once, outside any loop (`.contiguous()`, or `torch.channels_last` for "
                "convolutions), so ATen takes its vectorised contiguous kernels.",
                "Avoid operators on strided views that copy behind the scenes.",
            ),
            constraints=("The output has the shape, dtype and strides the contract expects.",),
        ),
        StrategyTemplate(
            name="avoid-hidden-copies",
            steps=(
                "Find implicit copies (dtype promotion, `.to()`, `.clone()`, non-contiguous inputs) with "
                "`torch.profiler` and remove them.",
                "Write results into preallocated tensors with `out=` or in-place variants (`add_`, `mul_`).",
            ),
            constraints=("In-place updates never overwrite a tensor that is read later in the same call.",),
        ),
    ),
}


class MemoryTransactions:
    name: ClassVar[str] = "M"
    order: ClassVar[int] = 2
    signals: ClassVar[tuple[str, ...]] = (SECTOR_EFFICIENCY, *HEADROOM)  # MEMORY_FLOOR is among them
    title: ClassVar[str] = "Memory transaction efficiency"
    description: ClassVar[str] = (
        "Make every byte moved useful: coalesced, aligned and vectorised global accesses, conflict-free shared "
        "memory and no spills, so each 32-byte sector fetched is fully used."
    )
    knowledge: ClassVar[str] = "\n".join(
        (
            "- Global memory is served in 32-byte sectors within 128-byte lines; a warp's access is coalesced "
            "when its 32 threads touch consecutive addresses (4 sectors per request for 4-byte elements, 8 for "
            "FP64).",
            "- Let `threadIdx.x` (host: the innermost loop) walk the contiguous dimension; a strided or "
            "transposed pattern multiplies the sectors per request up to 32x.",
            "- 16-byte vector accesses (`double2`, `float4`) on 16-byte aligned addresses cut LSU instructions "
            "and `lg_throttle` stalls; check the alignment of the base pointer and row pitch.",
            "- Shared memory has 32 banks of 4 bytes; consecutive 8-byte accesses are conflict-free, while column "
            "walks of a tile need one element of padding per row or an XOR swizzle.",
            "- Register spills go to local memory (off-chip, cached in L1): any spill in a hot loop "
            "(`-Xptxas -v`) is an M problem.",
            "- Partial-sector stores force read-modify-write in L2; keep stores coalesced and aligned like loads.",
            "- `const __restrict__` on read-only inputs lets the compiler use the non-coherent read path and "
            "reorder loads.",
            "- H200: ~4.8 TB/s of HBM3e and a 50 MB L2; a well-coalesced streaming kernel reaches 85-90% of the "
            "nominal DRAM bandwidth.",
            "- Host: traverse row-major arrays with the last index innermost so prefetchers stream whole 64-byte "
            "lines and the loop vectorises; a strided inner loop uses one element per line.",
        )
    )
    rubric: ClassVar[str] = (
        "Score M high when memory transactions carry wasted bytes. GPU: "
        "`smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio` / 32 (sector_efficiency) below 0.5; "
        "sectors per request `l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum` / "
        "`l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum` above 8 for FP64 (4 for FP32); "
        "`derived__memory_l2_theoretical_sectors_global_excessive` above 0; shared bank conflicts "
        "`l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{ld,st}.sum` at 10% or more of "
        "`l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{ld,st}.sum`; any local-memory spill traffic; "
        "`lg_throttle` or `mio_throttle` stalls above 30% of the CPI. Host: only the memory floor is observable, "
        "so the estimate counts half. Rule: score = 1 - sector_efficiency, else 0.5 x (1 - memory_floor_fraction), "
        "times the headroom 1 - max(memory_floor_fraction, compute_floor_fraction)."
    )
    config_class: ClassVar[type | None] = None

    def __init__(self, config: None) -> None:
        self.config = config

    def strategies(self, rank: int) -> list[StrategyTemplate]:
        return nested(_CATALOGUE, rank)

    def score(self, profile: Profile | None) -> tuple[float, str]:
        if profile is None:
            return 0.0, "no profile"
        found = first_signal(profile, (SECTOR_EFFICIENCY,))
        if found is not None:
            return scaled_score("M", f"{SECTOR_EFFICIENCY}={found[1]:.2f}", 1.0 - found[1], profile)
        found = first_signal(profile, (MEMORY_FLOOR,))
        if found is not None:
            evidence = (
                f"{MEMORY_FLOOR}={found[1]:.2f} (host: transaction efficiency estimated from the memory floor "
                f"only, weighted {HOST_WEIGHT:g})"
            )
            return scaled_score("M", evidence, HOST_WEIGHT * (1.0 - found[1]), profile)
        return 0.0, f"M: no {SECTOR_EFFICIENCY} or {MEMORY_FLOOR} signal"


@hookimpl
def hiera_register_directions() -> list[type]:
    return [MemoryTransactions]
