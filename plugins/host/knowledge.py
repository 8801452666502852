"""What the host architecture knows of the directions C, P, M, R, T for C on a CPU: the knowledge and rubric the
prompts quote (caches, SIMD, OpenMP, the host timer's signals) and each strategy catalogue, one tuple per space
rank: 0 the candidate's own C, 1 adds threads and libraries (OpenMP, pthreads, BLAS where the build links one),
2 nothing of its own (its Python and PyTorch are unusable from C). A candidate writes only its source: advice
that needs a build flag or an environment variable says how to get the same from the source, or is left out."""

from __future__ import annotations

from hiera_core import DirectionKnowledge, StrategyTemplate

HEADROOM_RULE = "times the headroom 1 - max(memory_floor_fraction, compute_floor_fraction)."
BLAS_LINKED = (
    "Only where the build links a BLAS library (the space's description says whether it does): otherwise the call "
    "fails to build or load."
)

CONTROL = DirectionKnowledge(
    knowledge="\n".join(
        (
            "- A conditional inside the innermost loop usually blocks auto-vectorisation; the interior/boundary "
            "split restores it.",
            "- Boundary cells are a thin shell (about 4r/N of an N x N grid of radius r): split them off rather "
            "than testing every point, and the interior becomes branch-free.",
            "- Zero padding can be materialised once (a padded copy of the grid) so the compute loop never tests indices.",
            "- Hoist conditions that do not depend on the element out of loops, or into compile-time constants and "
            "specialised copies of the loop; compile-time trip counts let the compiler unroll fully.",
            "- Short arms compile to conditional moves or SIMD blends (`cond ? a : b`, `fmin`/`fmax`) without a "
            "branch; a branch that goes the same way for a whole loop is predicted and costs almost nothing.",
            "- Peel loop remainders into one tail instead of guarding every iteration.",
            "- Integer division and modulo cost tens of cycles and keep a loop scalar; use nested loops, strength "
            "reduction or precomputed tables for index decomposition.",
        )
    ),
    rubric=(
        "Score C high when iterations are lost to control flow: a conditional in the innermost loops keeps them "
        "scalar and can mispredict. `branch_free_fraction` comes from a static scan of the source (1 = no "
        f"conditional in the innermost loops). Rule: score = 1 - branch_free_fraction, {HEADROOM_RULE}"
    ),
    strategies=(
        (
            StrategyTemplate(
                name="split-interior-boundary",
                steps=(
                    "Partition the output domain into an interior, where every neighbour index is in range, and a "
                    "boundary shell as wide as the stencil radius or halo.",
                    "Compute the interior with a loop nest that contains no bounds checks, so the compiler unrolls "
                    "and vectorises it.",
                    "Compute the boundary shell with a separate guarded loop that applies the padding rule explicitly.",
                    "Align the interior's width to the SIMD width so the split adds no new tail.",
                ),
                constraints=(
                    "Interior and boundary tile the domain with no gap and no overlap: every output is written once.",
                    "Boundary outputs follow the reference's padding semantics exactly (zero padding stays zero).",
                    "A grid smaller than twice the halo has no interior and must take the guarded path.",
                ),
            ),
            StrategyTemplate(
                name="hoist-invariant-branches",
                steps=(
                    "Move conditions that do not depend on the element (radius, zero coefficients, alignment) out "
                    "of the loops, or into compile-time constants and specialised copies of the loop.",
                    "Fully unroll fixed-size inner loops (`#pragma GCC unroll`) once their trip counts are "
                    "compile-time constants.",
                    "Replace per-element integer division and modulo in index decomposition with nested loops or "
                    "incremented pointers.",
                    "Peel the remainder of unrolled or vectorised loops into one tail instead of guarding every iteration.",
                ),
                constraints=("Specialised paths cover every runtime case the contract admits; keep a generic fallback.",),
            ),
        ),
        (),
        (),
    ),
)

PARALLELISM = DirectionKnowledge(
    title="Thread and core parallelism",
    knowledge="\n".join(
        (
            "- Threads come from a library (OpenMP, pthreads), admitted from the space of rank 1 up: a rank-0 "
            "candidate runs on one core.",
            "- Parallelise the outermost independent loop with OpenMP `parallel for schedule(static)`, one thread "
            "per core a candidate gets; contiguous row chunks give first-touch locality and no false sharing of "
            "64-byte lines.",
            "- A candidate writes only its source and cannot set `OMP_*` environment variables; the runner already "
            "binds OpenMP threads one per core and lets them sleep between regions (the target's environment "
            "says how), as the `proc_bind(close)` clause would. Size the team with "
            "`num_threads(omp_get_num_procs())`; more threads than cores, and migration, cost more than they hide.",
            "- `schedule(dynamic, chunk)` pays only when rows carry unequal work; shared accumulators take a "
            "`reduction` clause, and each output is written by one thread.",
            "- One core rarely saturates DRAM: a memory-bound loop needs bytes in flight from several cores "
            "(Little's law), so it gains from threads too.",
            "- Opening a parallel region costs microseconds: open it once around the outermost loop, not per row.",
        )
    ),
    rubric=(
        "Score P high when cores idle for lack of parallel work. `parallel_utilization` = CPU time / (wall time x "
        "cores); a single-threaded kernel on two cores scores 0.5. "
        f"Rule: score = 1 - parallel_utilization, {HEADROOM_RULE}"
    ),
    strategies=(
        (),
        (
            StrategyTemplate(
                name="parallelize-outer-loops",
                steps=(
                    "Distribute independent rows or tiles across all cores: an OpenMP `parallel for` over the "
                    "outermost independent loop.",
                    "Give each thread a contiguous chunk (`schedule(static)`) so it streams its own rows and first "
                    "touch places its pages near it.",
                    "Use one thread per core a candidate gets, set in the source (`num_threads(omp_get_num_procs())`, "
                    "`proc_bind(close)` on the parallel region), never more threads than cores.",
                    "Switch to `schedule(dynamic, chunk)` only when rows carry unequal work.",
                ),
                constraints=(
                    "Parallel iterations are independent: each output is written by one worker, shared accumulators "
                    "use a reduction clause.",
                    "Results do not depend on the thread count beyond the contract tolerance.",
                ),
            ),
        ),
        (),
    ),
)

MEMORY = DirectionKnowledge(
    knowledge="\n".join(
        (
            "- Traverse row-major arrays with the last index innermost so the prefetchers stream whole 64-byte "
            "lines and the loop vectorises; a strided inner loop uses one element per line.",
            "- Interchange loops whose inner index strides across rows; route unavoidable column or transposed "
            "accesses through a small cache-resident buffer.",
            "- Unit-stride, aligned accesses let the compiler use full-width SIMD loads and stores (`-march=native`: "
            "32 bytes with AVX2, 64 with AVX-512); handle a misaligned head and tail with scalar code.",
            "- `restrict` on the pointer parameters tells the compiler the arrays do not alias, so it vectorises "
            "without run-time overlap checks and reorders loads.",
            "- The host timer sees no memory transactions: only the memory floor fraction shows how near DRAM "
            "bandwidth the kernel runs, so M is an estimate here.",
        )
    ),
    rubric=(
        "Score M high when memory accesses waste the bytes they move (strided, unaligned or scalar accesses). The "
        "host timer observes no transactions, only the memory floor, so the estimate counts half. "
        f"Rule: score = 0.5 x (1 - memory_floor_fraction), {HEADROOM_RULE}"
    ),
    strategies=(
        (
            StrategyTemplate(
                name="unit-stride-row-streaming",
                steps=(
                    "Order the loops so the innermost loop walks the contiguous, unit-stride dimension of every "
                    "array, streaming whole rows.",
                    "Interchange loops whose inner index strides across rows, so each 64-byte cache line fetched is "
                    "used completely before it is evicted.",
                    "Route unavoidable column or transposed accesses through a small cache-resident buffer so reads "
                    "and writes of the large arrays both stay contiguous.",
                ),
                constraints=(
                    "Only loops whose iterations are independent are interchanged; each output is still computed "
                    "from the same inputs.",
                    "The contract's array layout is fixed: change the access order, not the interface.",
                ),
            ),
        ),
        (
            StrategyTemplate(
                name="library-native-layout",
                steps=(
                    "Pick the BLAS layout that matches the data as stored: `cblas_dgemm` with `CblasRowMajor`, or "
                    "call column-major `dgemm` as C^T = B^T A^T for row-major data.",
                    "Remove explicit transpose or repacking copies around the call.",
                ),
                constraints=("The result is the reference's, in the contract's output layout.", BLAS_LINKED),
            ),
        ),
        (),
    ),
)

REUSE = DirectionKnowledge(
    knowledge="\n".join(
        (
            "- Block loops so the working set of one block (e.g. 2r + 1 input rows of a column block) stays in "
            "L1/L2; the per-point time on a cache-resident grid shows what perfect reuse would give.",
            "- Sweep all rows of one column block before the next, so each input line comes from DRAM once and "
            "serves every output that needs it.",
            "- Choose the block width by measurement around cache size / (rows in flight x element size), a "
            "multiple of the SIMD width.",
            "- A radius-r stencil on a T x T tile reads (T + 2r)^2 inputs for T^2 outputs: larger tiles amortise "
            "the halo, and registers can hold a sliding window along the streaming axis.",
            "- Fusing passes (several time steps by temporal blocking) removes intermediate DRAM round trips; "
            "temporal blocking pays only while the kernel stays memory-bound.",
        )
    ),
    rubric=(
        "Score R high when data comes from DRAM more often than needed. `cache_resilience` = per-point time on a "
        "cache-resident grid / per-point time at task size (1: the task runs as fast as if it fit in cache). "
        f"Rule: score = 1 - cache_resilience, {HEADROOM_RULE}"
    ),
    strategies=(
        (
            StrategyTemplate(
                name="cache-blocking",
                steps=(
                    "Split the columns (the contiguous dimension) into blocks whose working set, the input rows one "
                    "block of outputs reads, fits in L1/L2.",
                    "Sweep all rows of one column block before moving to the next, so each input line comes from "
                    "DRAM once and serves every output that needs it.",
                    "Choose the block width by measurement around cache size / (rows in flight x element size).",
                ),
                constraints=(
                    "Blocks cover the domain exactly: halos are read by several blocks, outputs written once.",
                    "Block widths are multiples of the SIMD width except for the last block.",
                ),
            ),
        ),
        (
            StrategyTemplate(
                name="fuse-into-library-epilogue",
                steps=(
                    "Fold scaling and accumulation into the BLAS call's `alpha` and `beta` (C = alpha A B + beta C), "
                    "so intermediates never round-trip through DRAM.",
                ),
                constraints=("The fused call computes what the reference computes, within the tolerance.", BLAS_LINKED),
            ),
        ),
        (),
    ),
)

TENSOR = DirectionKnowledge(
    title="SIMD FMA and instruction pipeline",
    knowledge="\n".join(
        (
            "- Peak arithmetic needs SIMD FMA (AVX2/AVX-512 `vfmadd`) with enough independent vector accumulators "
            "to cover latency x ports (4 cycles x 2 = 8), built with `-O3 -march=native`.",
            "- Register blocking: each inner-loop iteration computes several adjacent outputs so each loaded value "
            "feeds many FMAs; accumulators stay in registers and the fixed-size loops unroll fully.",
            "- The block is bounded by the register file, 16 AVX2 or 32 AVX-512 vector registers: a spill puts "
            "loads and stores back into the hot loop.",
            "- Address arithmetic, loads and shuffles should be well below the FMA count: keep index arithmetic out "
            "of the hot loop so it is mostly packed `vfmadd`s (the build's assembly is not shown; intrinsics from "
            "`<immintrin.h>` make the instruction mix explicit).",
            "- Independent accumulators reassociate sums: keep the result within the contract tolerance and never "
            "lower the precision.",
            "- Division and square root have low throughput: replace divisions by reciprocal multiplies where the "
            "tolerance allows.",
            "- A GEMM-shaped computation runs fastest in a BLAS `dgemm` (a library: from the space of rank 1 up, and "
            "only where the build links one, as the space's description says) when its extra FLOPs (im2col "
            "redundancy) cost less than it buys.",
        )
    ),
    rubric=(
        "Score T high when the cores' FMA units run far below peak on compute-heavy work. "
        "`in_cache_compute_fraction` = GFLOP/s on a cache-resident grid / peak of the cores in use. "
        f"Rule: score = 1 - in_cache_compute_fraction, {HEADROOM_RULE}"
    ),
    strategies=(
        (
            StrategyTemplate(
                name="register-blocking",
                steps=(
                    "Give each inner-loop iteration a small block of adjacent outputs, 4-16 along the contiguous "
                    "dimension, held in registers as independent accumulators.",
                    "Load each input value into a register once and apply it to every output of the block that uses "
                    "it, sliding the window along the row.",
                    "Fully unroll the loops over the block and the fixed-size coefficients (compile-time trip "
                    "counts) so the hot loop is dense FMA with no index arithmetic.",
                    "Keep the hot loop simple enough to vectorise (unit stride, `restrict` pointers, no calls), or "
                    "write it with `<immintrin.h>` intrinsics so it is FMA-dense and spill-free by construction.",
                ),
                constraints=(
                    "No register spills: the block is bounded by the register file (16 AVX2 or 32 AVX-512 vector registers).",
                    "The summation order changes only within the contract tolerance, and precision is never lowered.",
                ),
            ),
            StrategyTemplate(
                name="cut-instruction-overhead",
                steps=(
                    "Replace per-element address arithmetic with incremented pointers, and integer division or "
                    "modulo with strength reduction.",
                    "Keep coefficients in registers instead of reloading them from memory in the inner loop.",
                    "Use 4-8 independent accumulators to break dependent FMA chains.",
                ),
                constraints=(
                    "The build flags are fixed: reassociate sums by hand (independent accumulators), or with "
                    '`#pragma GCC optimize("fast-math")` in the source, only where the tolerance allows.',
                ),
            ),
        ),
        (
            StrategyTemplate(
                name="blas-gemm-formulation",
                steps=(
                    "Recast the computation as a GEMM or batched GEMM and call the BLAS runtime's `dgemm` (`cblas_dgemm`).",
                    "Size the GEMM so its extra FLOPs (im2col redundancy) cost less than the speedup it buys.",
                ),
                constraints=(
                    "The call computes in the contract dtype (`dgemm` for FP64), never in a lower precision.",
                    BLAS_LINKED,
                ),
            ),
        ),
        (),
    ),
)

KNOWLEDGE = {"C": CONTROL, "P": PARALLELISM, "M": MEMORY, "R": REUSE, "T": TENSOR}
"""By direction letter: what the `host` kind of architecture knows of each built-in direction."""
