"""Direction P: thread, warp and core parallelism."""

from __future__ import annotations

from typing import ClassVar

from hiera_core import StrategyTemplate, hookimpl
from hiera_core.records import Profile
from hiera_directions._catalogue import nested
from hiera_directions._signals import HEADROOM, first_signal, scaled_score

SIGNALS = ("achieved_occupancy", "parallel_utilization")
"""GPU: achieved warps / peak warps per SM. Host: CPU time / (wall time x cores)."""

GRID_FILL = "grid_fill"
"""GPU: blocks launched / SMs, capped at 1; below 1 some SMs get no work at all."""

_CATALOGUE = {
    "pure_cuda": (
        StrategyTemplate(
            name="size-grid-to-fill-sms",
            steps=(
                "Choose the work per block so the grid has at least two full waves: blocks >= 2 x the SM count "
                "(264 on a 132-SM H200), with the last wave nearly full.",
                "Read the SM count at run time (`cudaDeviceGetAttribute(..., cudaDevAttrMultiProcessorCount, dev)`) "
                "instead of hard-coding it.",
                "When the problem is small, split a further axis (rows within a tile, a reduction dimension) to "
                "create more independent blocks.",
            ),
            constraints=(
                "Every output is computed exactly once whatever the grid size.",
                "Splitting a reduction combines the partial results deterministically, within the contract "
                "tolerance.",
            ),
        ),
        StrategyTemplate(
            name="occupancy-limiter-tuning",
            steps=(
                "Find the limiting resource from `-Xptxas -v` (registers, shared memory per block) or "
                "`launch__occupancy_limit_{registers,shared_mem,warps,blocks}`.",
                "Add `__launch_bounds__(BLOCK, MIN_BLOCKS)` or cut live registers and shared memory until 8-16 "
                "warps per SM stay resident.",
                "Measure block sizes of 128, 256 and 512 threads and keep the fastest.",
            ),
            constraints=("No local-memory spills: `-Xptxas -v` reports 0 bytes of spill stores.",),
        ),
        StrategyTemplate(
            name="persistent-grid-stride-kernel",
            steps=(
                "Launch a small multiple of the SM count of blocks (as many as can be resident) and loop over "
                "tiles with a grid-stride loop.",
                "Order the tile loop so consecutive blocks take neighbouring tiles, keeping shared halos in L2.",
            ),
            constraints=("Tiles are independent: no block waits on another block's result.",),
        ),
    ),
    "cuda_libraries": (
        StrategyTemplate(
            name="parallelize-outer-loops",
            steps=(
                "Distribute independent rows or tiles across all cores or SMs: an OpenMP `parallel for` over the "
                "outermost independent loop on the host, a grid that covers every SM on the GPU.",
                "Give each thread or block a contiguous chunk (`schedule(static)`) so it streams its own rows and "
                "first touch places its pages near it.",
                "Use one thread per physical core, pinned (`OMP_PROC_BIND=close`, `OMP_PLACES=cores`), and never "
                "more threads than cores.",
                "Switch to `schedule(dynamic, chunk)` (host) or smaller blocks (GPU) only when rows carry unequal "
                "work.",
            ),
            constraints=(
                "Parallel iterations are independent: each output is written by one worker, shared accumulators "
                "use a reduction clause.",
                "Results do not depend on the thread count beyond the contract tolerance.",
            ),
        ),
        StrategyTemplate(
            name="batched-library-calls",
            steps=(
                "Replace loops of small library calls with batched or strided-batched variants "
                "(`cublasDgemmStridedBatched`, cuFFT plans with `batch`) so one launch fills the device.",
                "Run truly independent library calls on separate streams (`cublasSetStream`, `cudnnSetStream`) "
                "and join them back to the caller's stream before returning.",
            ),
            constraints=("All work is ordered on, or joined back to, the stream the contract gives.",),
        ),
        StrategyTemplate(
            name="cuda-graph-launches",
            steps=(
                "Capture the call's fixed sequence of kernel launches and library calls in a CUDA Graph once, "
                "then replay it, removing several microseconds of launch latency per kernel.",
            ),
            constraints=("Shapes, pointers and launch parameters are identical between replays.",),
        ),
    ),
    "libraries_pytorch": (
        StrategyTemplate(
            name="batched-tensor-ops",
            steps=(
                "Replace Python loops over slices or time steps that launch one small operator each with one "
                "batched operator (`torch.bmm`, broadcasting, `torch.vmap`) over the whole problem.",
                "On the host, set `torch.set_num_threads` to the cores in use so ATen's intra-op parallelism "
                "covers them.",
            ),
            constraints=("No host synchronisation (`.item()`, `.cpu()`) inside the timed call.",),
        ),
        StrategyTemplate(
            name="torch-cuda-graph",
            steps=(
                "Warm up on a side stream, then capture the steady-state sequence of ATen calls with "
                "`torch.cuda.CUDAGraph` and replay it each call.",
            ),
            constraints=(
                "Inputs are copied into the captured static tensors; shapes never change between replays.",
            ),
        ),
    ),
}


class Parallelism:
    name: ClassVar[str] = "P"
    order: ClassVar[int] = 1
    signals: ClassVar[tuple[str, ...]] = (*SIGNALS, GRID_FILL, *HEADROOM)
    title: ClassVar[str] = "Thread, warp and core parallelism"
    description: ClassVar[str] = (
        "Expose enough independent work to keep every SM or core busy and enough resident warps to hide "
        "latency: grid and block shape, occupancy limiters, threads per core."
    )
    knowledge: ClassVar[str] = "\n".join(
        (
            "- H200: 132 SMs, each with at most 64 resident warps (2048 threads), 32 blocks and 65,536 32-bit "
            "registers; a grid needs >= 132 blocks to touch every SM and ideally >= 2 full waves.",
            "- The occupancy limiter is the smallest of `launch__occupancy_limit_{registers,shared_mem,warps,"
            "blocks}`; more than 128 registers per thread caps an SM at 16 warps (25%).",
            "- Occupancy is a means: a memory-bound kernel needs bytes in flight (Little's law: ~4.8 TB/s x "
            "~700 ns is ~3 MB, ~25 KB per SM), from many warps or from several independent loads per thread.",
            "- Block sizes are multiples of 32, usually 128-256 threads; 1024-thread blocks idle the whole block "
            "at every `__syncthreads`.",
            "- Persistent or grid-stride kernels (grid = k x SM count, read at run time) decouple the problem "
            "size from the launch and amortise per-block setup.",
            "- Thread-block clusters (sm_90, up to 8 blocks portably) share distributed shared memory; check "
            "`launch__occupancy_cluster_pct` when using them.",
            "- Each launch costs a few microseconds: batch small calls, or replay them from a CUDA Graph.",
            "- Host: parallelise the outermost independent loop with OpenMP `parallel for schedule(static)`, one "
            "pinned thread per physical core; contiguous row chunks give first-touch locality and no false "
            "sharing of 64-byte lines.",
            "- Achieved well below theoretical occupancy (a gap over 10 points) means imbalance or a tail effect, "
            "not a resource limit.",
        )
    )
    rubric: ClassVar[str] = (
        "Score P high when the machine idles for lack of parallel work. GPU: achieved occupancy "
        "`sm__warps_active.avg.pct_of_peak_sustained_active` (achieved_occupancy) far below the theoretical "
        "`sm__maximum_warps_per_active_cycle_pct` or theoretical below 80%; `launch__grid_size` below "
        "`launch__sm_count` (132) or `launch__waves_per_multiprocessor` below 1 (grid_fill = blocks / SMs) is a "
        "hard gate; both `sm__throughput` and `gpu__compute_memory_throughput` "
        "(`.avg.pct_of_peak_sustained_elapsed`) below 60% with `smsp__warps_eligible.avg.per_cycle_active` below "
        "1 confirms a latency-bound kernel. Host: `parallel_utilization` = CPU time / (wall time x cores); a "
        "single-threaded kernel on two cores scores 0.5. Rule: score = max(1 - (achieved_occupancy, else "
        "parallel_utilization), 1 - grid_fill), times the headroom 1 - max(memory_floor_fraction, "
        "compute_floor_fraction)."
    )
    config_class: ClassVar[type | None] = None

    def __init__(self, config: None) -> None:
        self.config = config

    def strategies(self, rank: int) -> list[StrategyTemplate]:
        return nested(_CATALOGUE, rank)

    def score(self, profile: Profile | None) -> tuple[float, str]:
        if profile is None:
            return 0.0, "no profile"
        evidence, raw = [], 0.0
        found = first_signal(profile, SIGNALS)
        if found is not None:
            signal, value = found
            evidence.append(f"{signal}={value:.2f}")
            raw = 1.0 - value
        fill = first_signal(profile, (GRID_FILL,))
        if fill is not None and fill[1] < 1.0:
            evidence.append(f"{GRID_FILL}={fill[1]:.2f}")
            raw = max(raw, 1.0 - fill[1])
        if not evidence:
            return 0.0, f"P: no {' or '.join((*SIGNALS, GRID_FILL))} signal"
        return scaled_score("P", ", ".join(evidence), raw, profile)


@hookimpl
def hiera_register_directions() -> list[type]:
    return [Parallelism]
