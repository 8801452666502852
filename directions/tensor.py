"""Direction T: tensor cores and the instruction pipeline."""

from __future__ import annotations

from typing import ClassVar

from hiera_core import StrategyTemplate, hookimpl
from hiera_core.records import Profile
from hiera_directions._catalogue import nested
from hiera_directions._signals import HEADROOM, deficit_score

SIGNALS = ("pipe_utilization", "in_cache_compute_fraction")
"""GPU: the busiest compute pipe (tensor/DMMA included), fraction of peak. Host: GFLOP/s on a cache-resident
grid / peak of the cores in use."""

_CATALOGUE = {
    "pure_cuda": (
        StrategyTemplate(
            name="register-blocking",
            steps=(
                "Give each thread (host: each inner-loop iteration) a small block of adjacent outputs, 4-16 "
                "along the contiguous dimension, held in registers as independent accumulators.",
                "Load each input value into a register once and apply it to every output of the block that uses "
                "it, sliding the window along the row.",
                "Fully unroll the loops over the block and the fixed-size coefficients (compile-time trip counts) "
                "so the hot loop is dense FMA with no index arithmetic.",
                "Confirm in the SASS (`cuobjdump -sass`) or the compiler's vectorisation report that the hot loop "
                "is FMA-dense and spill-free.",
            ),
            constraints=(
                "No register spills: the block is bounded by the register file (GPU: keep <= 128 registers per "
                "thread for occupancy; host: 16 AVX2 or 32 AVX-512 vector registers).",
                "The summation order changes only within the contract tolerance, and precision is never lowered.",
            ),
        ),
        StrategyTemplate(
            name="dmma-tensor-core-formulation",
            steps=(
                "Reformulate the inner products as small matrix multiplies: build the A operand from the input "
                "in shared memory (e.g. a stencil2row or im2row tile) and the B operand from the coefficients.",
                "Issue FP64 MMAs with `wmma::mma_sync` on `fragment<..., 8, 8, 4, double>` or "
                "`mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64` (sm_90 adds m16n8k4/k8/k16), accumulating in "
                "fragments across k.",
                "Lay out the operand tiles in shared memory so fragment loads are conflict-free.",
                "Compare useful GFLOP/s with the FMA path: the formulation's redundant FLOPs (about 2x for a 7x7 "
                "box) must be repaid by fewer issued instructions.",
            ),
            constraints=(
                "FP64 in, FP64 out: TF32, FP16 or BF16 tensor-core formats are inadmissible for an FP64 or FP32 "
                "contract.",
                "Compiled for sm_90 (`-gencode arch=compute_90,code=sm_90`).",
            ),
        ),
        StrategyTemplate(
            name="cut-instruction-overhead",
            steps=(
                "Replace per-element address arithmetic with incremented pointers and 32-bit indices, and integer "
                "division or modulo with strength reduction.",
                "Keep coefficients in registers or `__constant__` memory (warp-uniform reads) instead of reloading "
                "them from global memory.",
                "Use 4-8 independent accumulators per thread to break dependent FMA chains (`wait` and "
                "`short_scoreboard` stalls).",
            ),
            constraints=("Fast-math intrinsics (`__fdividef`, `-use_fast_math`) only where the tolerance allows.",),
        ),
    ),
    "cuda_libraries": (
        StrategyTemplate(
            name="blas-gemm-formulation",
            steps=(
                "Recast the computation as a GEMM or batched GEMM and call cuBLAS `cublasDgemm` (or cuBLASLt with "
                "`CUBLAS_COMPUTE_64F`), which runs on the DMMA tensor cores on sm_90; on the host call the BLAS "
                "runtime's `dgemm`.",
                "Size the GEMM so its extra FLOPs (im2col redundancy) cost less than the speedup it buys.",
            ),
            constraints=(
                "No reduced-precision modes (`CUBLAS_COMPUTE_32F_FAST_TF32`, `CUBLAS_TF32_TENSOR_OP_MATH`) for an "
                "FP32 or FP64 contract.",
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
    "libraries_pytorch": (
        StrategyTemplate(
            name="torch-matmul-formulation",
            steps=(
                "Express the computation through `torch.matmul`, `torch.bmm` or `torch.nn.functional.conv2d` in "
                "the contract dtype, so ATen dispatches to cuBLAS or cuDNN tensor-core kernels (host: its BLAS "
                "or oneDNN backend).",
            ),
            constraints=(
                "`torch.backends.cuda.matmul.allow_tf32` and `torch.backends.cudnn.allow_tf32` stay False for an "
                "FP32 contract; nothing is cast to a lower precision.",
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
}


class TensorCores:
    name: ClassVar[str] = "T"
    order: ClassVar[int] = 4
    signals: ClassVar[tuple[str, ...]] = (*SIGNALS, *HEADROOM)
    title: ClassVar[str] = "Tensor cores and instruction pipeline"
    description: ClassVar[str] = (
        "Raise useful arithmetic per issued instruction: map the math onto tensor cores (FP64 DMMA on Hopper) or "
        "onto a dense FMA stream through register blocking, unrolling and fewer non-math instructions."
    )
    knowledge: ClassVar[str] = "\n".join(
        (
            "- H200 FP64: ~67 TFLOP/s on the tensor cores (DMMA) versus ~34 TFLOP/s on the FP64 FMA pipe; "
            "TF32/FP16/BF16 tensor cores are far faster but round the inputs, so they break an FP32/FP64 contract.",
            "- FP64 MMA is `mma.sync.m8n8k4.f64` (WMMA `fragment<..., 8, 8, 4, double>`), plus m16n8k4/k8/k16 on "
            "sm_90; warpgroup `wgmma` (sm_90a) has no FP64 form.",
            "- Lowering a stencil or convolution to MMA adds FLOPs (about 2x for a 7x7 box with stencil2row); "
            "the gain comes from fewer issued instructions and shared operands, so judge by useful FLOP/s.",
            "- Register blocking: each thread computes several adjacent outputs so each loaded value feeds many "
            "FMAs; accumulators stay in registers and the fixed-size loops unroll fully.",
            "- Non-math instructions (address arithmetic, loads, shuffles, predicates) should be well below the "
            "FMA count; check the hot loop's SASS for DFMA/DMMA density.",
            "- Dependent FMA chains stall on `wait`/`short_scoreboard`: 4-8 independent accumulators per thread "
            "expose ILP (this reassociates sums).",
            "- Slow pipes (XU: division, sqrt, transcendentals) limit when SM Busy is high but issue is low; "
            "replace divisions by reciprocal multiplies where the tolerance allows.",
            "- Host: the equivalent is SIMD FMA (AVX2/AVX-512 `vfmadd`) with enough independent vector "
            "accumulators to cover latency x ports (4 cycles x 2 = 8), built with `-O3 -march=native`.",
        )
    )
    rubric: ClassVar[str] = (
        "Score T high when the arithmetic pipes run far below peak on compute-heavy work. GPU: "
        "pipe_utilization = the busiest of `sm__pipe_tensor_op_dmma_cycles_active`, "
        "`sm__pipe_tensor_op_hmma_cycles_active`, `sm__inst_executed_pipe_tensor_op_gmma`, "
        "`sm__pipe_fma_cycles_active`, `sm__pipe_fp64_cycles_active` and `sm__pipe_alu_cycles_active` "
        "(`.avg.pct_of_peak_sustained_elapsed`); a tensor pipe below 20% on GEMM-like or DMMA-formulable work, "
        "`sm__inst_issued.avg.pct_of_peak_sustained_elapsed` high with low FLOP/s (overhead instructions), or "
        "`math_pipe_throttle`, `wait` or `gmma` stalls above 30% of the CPI point to T. A dominant pipe at 80% or "
        "more exhausts T unless the work moves to a faster pipe (FMA to DMMA). Host: `in_cache_compute_fraction` "
        "= GFLOP/s on a cache-resident grid / peak of the cores in use. Rule: score = 1 - (pipe_utilization, else "
        "in_cache_compute_fraction), times the headroom 1 - max(memory_floor_fraction, compute_floor_fraction)."
    )
    config_class: ClassVar[type | None] = None

    def __init__(self, config: None) -> None:
        self.config = config

    def strategies(self, rank: int) -> list[StrategyTemplate]:
        return nested(_CATALOGUE, rank)

    def score(self, profile: Profile | None) -> tuple[float, str]:
        return deficit_score("T", profile, SIGNALS)


@hookimpl
def hiera_register_directions() -> list[type]:
    return [TensorCores]
