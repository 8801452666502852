"""What the cuda architecture knows of the directions C, P, M, R, T on an NVIDIA GPU: the knowledge and rubric
the prompts quote (H200 figures, Nsight Compute metric names, CUDA idioms) and each strategy catalogue, one
tuple per space rank: 0 custom kernels, 1 adds the CUDA libraries, 2 adds PyTorch operators."""

from __future__ import annotations

from hiera_core import DirectionKnowledge, StrategyTemplate

HEADROOM_RULE = "times the headroom 1 - max(memory_floor_fraction, compute_floor_fraction)."

CONTROL = DirectionKnowledge(
    knowledge="\n".join(
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
            "- Divergence only matters within a warp: align tile edges to 32 threads in x so boundary work fills whole warps.",
            "- Peel loop remainders into one tail instead of guarding every iteration; give the grid one guarded "
            "tail block, not a guard in every thread.",
            "- Integer division and modulo cost tens of instructions on a GPU; use 2D grids, strength reduction or "
            "precomputed tables for index decomposition.",
            "- Boundary blocks also cause load imbalance: a partial last wave (`launch__waves_per_multiprocessor`) "
            "or a wide min/max spread of `sm__cycles_active`.",
        )
    ),
    rubric=(
        "Score C high when lanes are lost to control flow: branch efficiency "
        "`smsp__sass_average_branch_targets_threads_uniform.pct` below 90%, "
        "`smsp__thread_inst_executed_per_inst_executed.ratio` (or its `_pred_on_` variant) below 24 of 32, or "
        "`smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio` above 30% of the CPI point "
        "to C (0.6-1.0); uniform branches with 30+ active threads per instruction score near 0. "
        f"Rule: score = 1 - branch_uniformity, {HEADROOM_RULE}"
    ),
    strategies=(
        (
            StrategyTemplate(
                name="split-interior-boundary",
                steps=(
                    "Partition the output domain into an interior, where every neighbour index is in range, and a "
                    "boundary shell as wide as the stencil radius or halo.",
                    "Compute the interior with a kernel or a set of blocks that contains no bounds checks, so the "
                    "compiler unrolls it and no warp diverges on position.",
                    "Compute the boundary shell with a separate guarded kernel or set of blocks that applies the "
                    "padding rule explicitly.",
                    "Align interior tiles to whole warps (32 threads in x) so the split adds no new tail.",
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
                    "The tile plus halo fits the shared-memory budget (227 KB per block on H200) at the intended occupancy.",
                ),
            ),
            StrategyTemplate(
                name="hoist-invariant-branches",
                steps=(
                    "Move conditions that do not depend on the element (radius, zero coefficients, alignment, dtype) "
                    "out of the loops, or make them template or constexpr parameters.",
                    "Fully unroll fixed-size inner loops (`#pragma unroll`) once their trip counts are compile-time constants.",
                    "Replace per-element integer division and modulo in index decomposition with 2D indexing or "
                    "incremented pointers.",
                    "Peel the remainder of unrolled or vectorised loops into one tail instead of guarding every iteration.",
                ),
                constraints=("Specialised paths cover every runtime case the contract admits; keep a generic fallback.",),
            ),
        ),
        (
            StrategyTemplate(
                name="library-owned-padding",
                steps=(
                    "Express the padded operation as a library call that owns edge handling: a cuDNN convolution "
                    "with padding equal to the radius, or a CUTLASS kernel whose predicated tile iterators mask the "
                    "edges.",
                    "Pass the unpadded input and let the library apply the padding instead of custom guards.",
                ),
                constraints=(
                    "The library's convention (cross-correlation versus convolution, zero padding) matches the reference.",
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
        (
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
    ),
)

PARALLELISM = DirectionKnowledge(
    knowledge="\n".join(
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
            "- Achieved well below theoretical occupancy (a gap over 10 points) means imbalance or a tail effect, "
            "not a resource limit.",
        )
    ),
    rubric=(
        "Score P high when the GPU idles for lack of parallel work: achieved occupancy "
        "`sm__warps_active.avg.pct_of_peak_sustained_active` (achieved_occupancy) far below the theoretical "
        "`sm__maximum_warps_per_active_cycle_pct` or theoretical below 80%; `launch__grid_size` below "
        "`launch__sm_count` (132) or `launch__waves_per_multiprocessor` below 1 (grid_fill = blocks / SMs) is a "
        "hard gate; both `sm__throughput` and `gpu__compute_memory_throughput` "
        "(`.avg.pct_of_peak_sustained_elapsed`) below 60% with `smsp__warps_eligible.avg.per_cycle_active` below "
        "1 confirms a latency-bound kernel. "
        f"Rule: score = max(1 - achieved_occupancy, 1 - grid_fill), {HEADROOM_RULE}"
    ),
    strategies=(
        (
            StrategyTemplate(
                name="size-grid-to-fill-sms",
                steps=(
                    "Choose the work per block so the grid has at least two full waves: blocks >= 2 x the SM count "
                    "(264 on a 132-SM H200), with the last wave nearly full.",
                    "Read the SM count at run time (`cudaDeviceGetAttribute(..., cudaDevAttrMultiProcessorCount, "
                    "dev)`) instead of hard-coding it.",
                    "When the problem is small, split a further axis (rows within a tile, a reduction dimension) to "
                    "create more independent blocks.",
                ),
                constraints=(
                    "Every output is computed exactly once whatever the grid size.",
                    "Splitting a reduction combines the partial results deterministically, within the contract tolerance.",
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
        (
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
        (
            StrategyTemplate(
                name="batched-tensor-ops",
                steps=(
                    "Replace Python loops over slices or time steps that launch one small operator each with one "
                    "batched operator (`torch.bmm`, broadcasting, `torch.vmap`) over the whole problem.",
                ),
                constraints=("No host synchronisation (`.item()`, `.cpu()`) inside the timed call.",),
            ),
            StrategyTemplate(
                name="torch-cuda-graph",
                steps=(
                    "Warm up on a side stream, then capture the steady-state sequence of ATen calls with "
                    "`torch.cuda.CUDAGraph` and replay it each call.",
                ),
                constraints=("Inputs are copied into the captured static tensors; shapes never change between replays.",),
            ),
        ),
    ),
)

MEMORY = DirectionKnowledge(
    knowledge="\n".join(
        (
            "- Global memory is served in 32-byte sectors within 128-byte lines; a warp's access is coalesced "
            "when its 32 threads touch consecutive addresses (4 sectors per request for 4-byte elements, 8 for "
            "FP64).",
            "- Let `threadIdx.x` walk the contiguous dimension; a strided or transposed pattern multiplies the "
            "sectors per request up to 32x.",
            "- 16-byte vector accesses (`double2`, `float4`) on 16-byte aligned addresses cut LSU instructions "
            "and `lg_throttle` stalls; check the alignment of the base pointer and row pitch.",
            "- Shared memory has 32 banks of 4 bytes; consecutive 8-byte accesses are conflict-free, while column "
            "walks of a tile need one element of padding per row or an XOR swizzle.",
            "- Register spills go to local memory (off-chip, cached in L1): any spill in a hot loop "
            "(`-Xptxas -v`) is an M problem.",
            "- Partial-sector stores force read-modify-write in L2; keep stores coalesced and aligned like loads.",
            "- `const __restrict__` on read-only inputs lets the compiler use the non-coherent read path and reorder loads.",
            "- H200: ~4.8 TB/s of HBM3e and a 50 MB L2; a well-coalesced streaming kernel reaches 85-90% of the "
            "nominal DRAM bandwidth.",
        )
    ),
    rubric=(
        "Score M high when memory transactions carry wasted bytes: "
        "`smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio` / 32 (sector_efficiency) below 0.5; "
        "sectors per request `l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum` / "
        "`l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum` above 8 for FP64 (4 for FP32); "
        "`derived__memory_l2_theoretical_sectors_global_excessive` above 0; shared bank conflicts "
        "`l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{ld,st}.sum` at 10% or more of "
        "`l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{ld,st}.sum`; any local-memory spill traffic; "
        "`lg_throttle` or `mio_throttle` stalls above 30% of the CPI. Without a Nsight Compute profile only the "
        "memory floor is observable, so the estimate counts half. Rule: score = 1 - sector_efficiency, else "
        f"0.5 x (1 - memory_floor_fraction), {HEADROOM_RULE}"
    ),
    strategies=(
        (
            StrategyTemplate(
                name="unit-stride-row-streaming",
                steps=(
                    "Order the loops, and map threads, so `threadIdx.x` walks the contiguous, unit-stride dimension "
                    "of every array, streaming whole rows.",
                    "Interchange loops whose inner index strides across rows, so each 32-byte sector fetched is used "
                    "completely before it is evicted.",
                    "Route unavoidable column or transposed accesses through a shared-memory tile so global reads and "
                    "writes both stay contiguous.",
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
                    "Mark read-only inputs `const __restrict__` so loads can take the non-coherent path and be reordered.",
                    "Handle a misaligned head and tail of each row with scalar accesses.",
                ),
                constraints=("Alignment of the base pointer and row pitch is checked at run time, with a scalar fallback.",),
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
        (
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
        (
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
    ),
)

REUSE = DirectionKnowledge(
    knowledge="\n".join(
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
        )
    ),
    rubric=(
        "Score R high when data comes from DRAM, or from L1/L2, more often than needed or its loads are not "
        "overlapped with compute: dram_reuse = ideal bytes / (`dram__bytes_read.sum` + `dram__bytes_write.sum`), "
        "with measured/ideal above 1.5 a strong signal; onchip_reuse = ideal bytes / the bytes requested from L1 "
        "(`l1tex__t_sectors_pipe_lsu_mem_global_op_{ld,st}.sum` x 32 B); a low `lts__t_sector_hit_rate.pct` with "
        "redundant reads; `long_scoreboard` stalls above 30% of the CPI while `smsp__inst_executed_op_ldgsts.sum` "
        "(cp.async) or `sm__pipe_tma_cycles_active.avg.pct_of_peak_sustained_elapsed` is 0 on a tiled kernel; "
        "`barrier` stalls above 30% (pipeline too shallow). DRAM throughput at 80% of peak or more with a ratio "
        f"near 1 means R is exhausted. Rule: score = 1 - min(onchip_reuse, dram_reuse), {HEADROOM_RULE}"
    ),
    strategies=(
        (
            StrategyTemplate(
                name="cache-blocking",
                steps=(
                    "Split the columns (the contiguous dimension) into blocks whose working set, the input rows one "
                    "block of outputs reads, fits in shared memory (or stays in L1/L2).",
                    "Sweep all rows of one column block before moving to the next, so each input line comes from "
                    "DRAM once and serves every output that needs it.",
                    "Choose the block width by measurement around the on-chip capacity / (rows in flight x element size).",
                ),
                constraints=(
                    "Blocks cover the domain exactly: halos are read by several blocks, outputs written once.",
                    "Block widths are multiples of the warp width except for the last block.",
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
        (
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
        (
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
                    "Ping-pong two preallocated buffers across time steps instead of allocating a new output each step.",
                ),
                constraints=("Nothing is cached across calls: each call recomputes from its own inputs.",),
            ),
        ),
    ),
)

TENSOR = DirectionKnowledge(
    knowledge="\n".join(
        (
            "- H200 FP64, measured: 66.6 TFLOP/s on the tensor cores with `mma.sync` m16n8k4/k8/k16 (sm_90) "
            "against 33.0 on the FP64 FMA pipe; `m8n8k4` (the only shape before sm_90, and WMMA's double "
            "fragment) runs at half the tensor rate, no faster than DFMA. TF32/FP16/BF16 tensor cores are far "
            "faster but round the inputs, so they break an FP32/FP64 contract; `wgmma` has no FP64 form.",
            "- Lowering a stencil or convolution to MMA adds FLOPs (2.04-2.12x for a 7x7 box, with 4x4 output "
            "patches or stencil2row), so its useful rate is at best DFMA's: two such m16n8k8 kernels, one and two "
            "steps a launch, ran 6% and 37% slower than their DFMA counterparts on an H100, at half the tensor "
            "pipe. The gain has to come from fewer issued instructions; judge by useful FLOP/s.",
            "- Register blocking: each thread computes several adjacent outputs so each loaded value feeds many "
            "FMAs; accumulators stay in registers and the fixed-size loops unroll fully.",
            "- Non-math instructions (address arithmetic, loads, shuffles, predicates) should be well below the "
            "FMA count; check the hot loop's SASS for DFMA/DMMA density.",
            "- Dependent FMA chains stall on `wait`/`short_scoreboard`: 4-8 independent accumulators per thread "
            "expose ILP (this reassociates sums).",
            "- Slow pipes (XU: division, sqrt, transcendentals) limit when SM Busy is high but issue is low; "
            "replace divisions by reciprocal multiplies where the tolerance allows.",
        )
    ),
    rubric=(
        "Score T high when the arithmetic pipes run far below peak on compute-heavy work: "
        "pipe_utilization = the busiest of `sm__pipe_tensor_op_dmma_cycles_active`, "
        "`sm__pipe_tensor_op_hmma_cycles_active`, `sm__inst_executed_pipe_tensor_op_gmma`, "
        "`sm__pipe_fma_cycles_active`, `sm__pipe_fp64_cycles_active` and `sm__pipe_alu_cycles_active` "
        "(`.avg.pct_of_peak_sustained_elapsed`); a tensor pipe below 20% on GEMM-like or DMMA-formulable work, "
        "`sm__inst_issued.avg.pct_of_peak_sustained_elapsed` high with low FLOP/s (overhead instructions), or "
        "`math_pipe_throttle`, `wait` or `gmma` stalls above 30% of the CPI point to T. A dominant pipe at 80% or "
        "more exhausts T unless the work moves to a faster pipe (FMA to DMMA). "
        f"Rule: score = 1 - pipe_utilization, {HEADROOM_RULE}"
    ),
    strategies=(
        (
            StrategyTemplate(
                name="register-blocking",
                steps=(
                    "Give each thread a small block of adjacent outputs, 4-16 along the contiguous dimension, held "
                    "in registers as independent accumulators.",
                    "Load each input value into a register once and apply it to every output of the block that uses "
                    "it, sliding the window along the row.",
                    "Fully unroll the loops over the block and the fixed-size coefficients (compile-time trip "
                    "counts) so the hot loop is dense FMA with no index arithmetic.",
                    "Confirm in the SASS (`cuobjdump -sass`) that the hot loop is FMA-dense and spill-free.",
                ),
                constraints=(
                    "No register spills: the block is bounded by the register file (keep <= 128 registers per "
                    "thread for occupancy).",
                    "The summation order changes only within the contract tolerance, and precision is never lowered.",
                ),
            ),
            StrategyTemplate(
                name="dmma-tensor-core-formulation",
                steps=(
                    "Reformulate the inner products as small matrix multiplies: build the A operand from the input "
                    "in shared memory (e.g. a stencil2row or im2row tile) and the B operand from the coefficients.",
                    "Issue FP64 MMAs with `mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64` (or k4/k16: the "
                    "full-rate sm_90 shapes; m8n8k4 and WMMA's double fragment run at half rate), accumulating "
                    "in fragments across k, with several independent accumulators per warp.",
                    "Lay out the operand tiles in shared memory so fragment loads are conflict-free.",
                    "Compare useful GFLOP/s with the FMA path: the formulation's redundant FLOPs (about 2x for a 7x7 "
                    "box) must be repaid by fewer issued instructions.",
                ),
                constraints=(
                    "FP64 in, FP64 out: TF32, FP16 or BF16 tensor-core formats are inadmissible for an FP64 or FP32 contract.",
                    "Compiled for sm_90 (`-gencode arch=compute_90,code=sm_90`).",
                ),
            ),
            StrategyTemplate(
                name="cut-instruction-overhead",
                steps=(
                    "Replace per-element address arithmetic with incremented pointers and 32-bit indices, and "
                    "integer division or modulo with strength reduction.",
                    "Keep coefficients in registers or `__constant__` memory (warp-uniform reads) instead of "
                    "reloading them from global memory.",
                    "Use 4-8 independent accumulators per thread to break dependent FMA chains (`wait` and "
                    "`short_scoreboard` stalls).",
                ),
                constraints=("Fast-math intrinsics (`__fdividef`, `-use_fast_math`) only where the tolerance allows.",),
            ),
        ),
        (
            StrategyTemplate(
                name="blas-gemm-formulation",
                steps=(
                    "Recast the computation as a GEMM or batched GEMM and call cuBLAS `cublasDgemm` (or cuBLASLt "
                    "with `CUBLAS_COMPUTE_64F`), which runs on the DMMA tensor cores on sm_90.",
                    "Size the GEMM so its extra FLOPs (im2col redundancy) cost less than the speedup it buys.",
                ),
                constraints=(
                    "No reduced-precision modes (`CUBLAS_COMPUTE_32F_FAST_TF32`, `CUBLAS_TF32_TENSOR_OP_MATH`) for "
                    "an FP32 or FP64 contract.",
                ),
            ),
            StrategyTemplate(
                name="cutlass-sm90-tensorop",
                steps=(
                    "Instantiate a CUTLASS 3.x GEMM or convolution for `arch::Sm90` with `OpClassTensorOp` and the "
                    "contract's element type, and tune tile shape and stage count.",
                ),
                constraints=("The element and accumulator types equal the contract dtype.",),
            ),
            StrategyTemplate(
                name="cudnn-algorithm-search",
                steps=(
                    "For convolution-shaped work, time every cuDNN forward algorithm "
                    "(`cudnnFindConvolutionForwardAlgorithm`) once and keep the fastest.",
                ),
                constraints=(
                    "Math type `CUDNN_DEFAULT_MATH` or `CUDNN_TENSOR_OP_MATH`, never `_ALLOW_CONVERSION`.",
                    "Measure on the target: single-channel FP64 convolutions can be pathologically slow on Hopper.",
                ),
            ),
        ),
        (
            StrategyTemplate(
                name="torch-matmul-formulation",
                steps=(
                    "Express the computation through `torch.matmul`, `torch.bmm` or `torch.nn.functional.conv2d` "
                    "in the contract dtype, so ATen dispatches to cuBLAS or cuDNN tensor-core kernels.",
                ),
                constraints=(
                    "`torch.backends.cuda.matmul.allow_tf32` and `torch.backends.cudnn.allow_tf32` stay False for "
                    "an FP32 contract; nothing is cast to a lower precision.",
                ),
            ),
            StrategyTemplate(
                name="unfold-then-gemm",
                steps=(
                    "Compare `torch.nn.functional.conv2d` (with `torch.backends.cudnn.benchmark = True`) against "
                    "`torch.nn.functional.unfold` followed by one matmul, and keep the faster.",
                ),
                constraints=(
                    "`unfold` multiplies memory by the kernel size (49x for 7x7): process the grid in row bands if "
                    "the full unfolded tensor does not fit.",
                ),
            ),
        ),
    ),
)

KNOWLEDGE = {"C": CONTROL, "P": PARALLELISM, "M": MEMORY, "R": REUSE, "T": TENSOR}
"""By direction letter: what the `cuda` kind of architecture knows of each built-in direction."""
