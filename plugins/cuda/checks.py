"""Checks that need no GPU: known evaluation hacks in the source, and library calls in the built binary.

Source patterns answer eval.md §3 (streams escaping the timer, threads finishing work later, reaching
into Python to patch timers or the reference, static result caches, exception fallbacks, lower
precision in a higher-precision contract). Symbol checks are the second of the three space checks:
what the shared object actually imports (cuBLAS, cuDNN, ATen operators beyond allocation).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from hiera_judge.source_rules import SourceRule

SOURCE_RULES = [
    SourceRule(r"\bcublas\w*\s*\(|#\s*include\s*[<\"]cublas", "cuBLAS", 1),
    SourceRule(r"\bcudnn\w*\s*\(|#\s*include\s*[<\"]cudnn", "cuDNN", 1),
    SourceRule(r"\bcufft\w*\s*\(|#\s*include\s*[<\"]cufft", "cuFFT", 1),
    SourceRule(r"#\s*include\s*[<\"]cutlass/", "CUTLASS", 1),
    SourceRule(r"#\s*include\s*[<\"]cusparse|\bcusparse\w*\s*\(", "cuSPARSE", 1),
    SourceRule(
        r"\b(at|torch)::(?!empty\b|empty_like\b|zeros\b|zeros_like\b|Tensor\b|ScalarType\b|kFloat|kDouble|kHalf|kBFloat16|kInt|kLong|cuda::)(\w+)\s*\(",
        "a PyTorch/ATen operator",
        2,
    ),
    SourceRule(r"\.(matmul|mm|bmm|conv2d|addmm|einsum)\s*\(", "a PyTorch/ATen operator", 2),
    SourceRule(r"\bat::_ops::\w+::(call|redispatch)\s*\(", "a PyTorch/ATen operator", 2),  # an operator's own entry point
]
"""The first of the three space checks, on the source: vendor libraries from rank 1, ATen operators beyond
allocation from rank 2 (the binary and the run are checked too: `binary_space_violation`,
`runtime_space_violation`)."""

HACKS: list[tuple[str, str]] = [
    (
        r"\bcu(?:da)?StreamCreate\w*\s*\(|getStreamFrom(?:Pool|External)|\bcudaStreamNonBlocking\b|\bStreamCreate\b|\bcuCtxCreate\w*",
        "creates its own CUDA stream or context (work could escape the timer)",
    ),
    (
        r"\bcudaGetDriverEntryPoint\w*|\bcuGetProcAddress\w*|\bdl(?:open|sym|vsym)\s*\(",
        "reaches the CUDA driver's or a library's functions by name (a stream of its own could escape the timer)",
    ),
    (
        r"\bstd::(thread|async|jthread)\b|\bpthread_create\b|\bat::(?:launch|intraop_launch\w*)\b|\blaunch_no_thread_state\b"
        r"|\b(?:c10::)?(?:Task)?ThreadPool\b|\bget_thread_pool\b",
        "starts a thread (work could finish after the timer)",
    ),
    (
        r"\bpy::module_?::import\b|\bPyImport_\w+|\bPyRun_\w+|\bpy::exec\b|\bpy::eval\b|\bPyObject_SetAttr",
        "reaches into the Python interpreter (timers and the reference must stay out of reach)",
    ),
    (
        r"\bstatic\s+(?:const\s+)?(?:torch|at)::Tensor\b|\bstatic\s+std::(?:unordered_)?map\s*<",
        "keeps tensors in static storage across calls (a result cache)",
    ),
    (r"\bcatch\s*\(", "catches exceptions (a fallback path can hide there)"),
    (r"\b(?:setenv|putenv|system|popen|fork|execv\w*)\s*\(", "touches the process environment or spawns programs"),
    (
        r"\bsetAllow\w*(?:TF32|FP16|BF16)\w*\s*\(|\bsetFloat32\w*Precision\s*\(",
        "changes PyTorch's precision settings (TF32 or reduced-precision math) that the reference is pinned by",
    ),
]
"""(pattern, reason) for hacks every cuda candidate is checked against."""

LOWER_PRECISION = (
    r"\b__half2?\b|\bhalf2?\b|__float2half|__nv_bfloat16|\bkHalf\b|\bkBFloat16\b|\bat::Half\b|\bc10::Half\b|"
    r"__float2bfloat16|\bwmma::precision::tf32\b|\.tf32\b|__float_to_tf32"
)
"""Types and intrinsics below FP32; a float32 or float64 contract does not admit them."""

ESCAPE_SYMBOLS = re.compile(
    r"^(?:cudaStreamCreate\w*|cuStreamCreate\w*|cuCtxCreate\w*|cudaGetDriverEntryPoint\w*|cuGetProcAddress\w*"
    r"|dlopen|dlsym|dlvsym|pthread_create"
    r"|at::(?:launch|intraop_launch\w*|internal::launch_no_thread_state)\(.*|c10::(?:Task)?ThreadPool::.*|at::get_thread_pool\(.*)$"
)
"""Imports by which a built library could run GPU work beside the legacy default stream the runner times (its own
stream or context, the driver's functions by name) or after the call returns (a thread: its own, or one of PyTorch's
pools through `at::launch`): the source scan's rules, in
the binary, where a macro cannot hide them. Not PyTorch's stream pool (`c10::cuda::getStreamFromPool`): every
library that includes <c10/cuda/CUDAStream.h> imports it, used or not; the source scan alone names it."""
LIBRARY_SYMBOLS = re.compile(r"^(cublas|cublasLt|cudnn|cufft|cusparse|cusolver|curand|nccl)\w*", re.M)
ALLOWED_OPS = {
    "empty",
    "empty_like",
    "empty_strided",
    "zeros",
    "zeros_like",
    "ones",
    "ones_like",
    "fill_",
    "zero_",
    "view",
    "expand",
    "reshape",
    "_reshape_alias",
    "contiguous",
    "as_strided",
    "resize_",
    "detach",
    "alias",
    "_to_copy",
    "to",
    "copy_",
    "lift_fresh",
    "size",
    "stride",
    "sym_size",
    "sym_stride",
    "is_contiguous",
}
"""ATen operators every space admits: allocation, copies and views, no computation."""
OVERLOAD = re.compile(r"_(memory_format|names|out|Tensor|Scalar|dtype|device|dtype_layout|other|int|symint|src|self)$")
"""The overload suffix of an `at::_ops` name (`empty_memory_format` is the `empty` operator)."""
LIBRARY_KERNELS = re.compile(r"cublas|cutlass|cudnn|xmma|gemm|gemv|cufft|at::native|void at::|sm90_", re.I)
"""Kernel names that come from vendor libraries or ATen, not from the candidate (unless its library defines them:
`runtime_space_violation`)."""
ALLOWED_OP_KERNELS = re.compile(r"at::native::\w*elementwise_kernel\b.*(?:at::native::FillFunctor<|direct_copy_kernel_cuda)")
"""ATen's kernels for the operators every space admits (`ALLOWED_OPS`): `zeros`, `fill_` and `ones` fill, `copy_`,
`contiguous` and `_to_copy` copy. KernelBench level 1 task 15 on an H100 (2026-12-07): two pure CUDA candidates that
zeroed their output with `torch::zeros` were rejected for the fill kernel it launched."""
LIBRARY_NAMESPACE = re.compile(r"\b(?:cublas\w*|cutlass|cute|cudnn\w*|cufft\w*|at)::")
"""A kernel in a library's namespace is the library's even where the candidate's library holds it (a header's template
instantiated there)."""


def _code(source: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", "", source, flags=re.S)


def hack_in_source(source: str, dtype: str) -> str | None:
    """Why the source looks like a known evaluation hack, or None."""
    code = _code(source)
    for pattern, reason in HACKS:
        if match := re.search(pattern, code):
            return f"{reason}: `{match.group(0).strip()}` on line {code[: match.start()].count(chr(10)) + 1}"
    if dtype in ("float32", "float64") and (match := re.search(LOWER_PRECISION, code)):
        return f"uses a type below {dtype} (`{match.group(0)}`) in a {dtype} contract"
    return None


def imported_symbols(library: Path) -> list[str]:
    """Undefined dynamic symbols of a shared object, demangled, without their versions (`nm -D -C --undefined-only`)."""
    out = subprocess.run(["nm", "-D", "-C", "--undefined-only", str(library)], capture_output=True, text=True, timeout=60)
    return [parts[1].split("@")[0] for line in out.stdout.splitlines() if len(parts := line.strip().split(None, 1)) == 2]


def defined_functions(library: Path) -> frozenset[str]:
    """The base names (`kernel_base_name`) of the functions a shared object defines, its local ones included
    (`nm -C --defined-only`): a `__global__` kernel's host-side stub has the kernel's own name."""
    out = subprocess.run(["nm", "-C", "--defined-only", str(library)], capture_output=True, text=True, timeout=60)
    return frozenset(
        kernel_base_name(parts[2])
        for line in out.stdout.splitlines()
        if len(parts := line.strip().split(None, 2)) == 3 and parts[1] in "tTwW"
    )


def kernel_base_name(name: str) -> str:
    """A demangled function's own name: `void ns::gemv<4>(float const*)` and `(anonymous namespace)::gemv(float*)`
    are `gemv`."""
    name = name.replace("(anonymous namespace)", "")
    depth, end = 0, len(name)
    for position, char in enumerate(name):  # the argument list starts at the first "(" outside template arguments
        depth += (char == "<") - (char == ">")
        if char == "(" and depth == 0:
            end = position
            break
    head = name[:end].strip()
    while head.endswith(">"):  # the template arguments, balanced from the end
        depth = 0
        for position in range(len(head) - 1, -1, -1):
            depth += (head[position] == ">") - (head[position] == "<")
            if depth == 0:
                head = head[:position].strip()
                break
        else:
            break
    words = head.rsplit("::", 1)[-1].split()
    return words[-1] if words else head


def binary_hack(symbols: list[str]) -> str | None:
    """Why a built library's imports (`imported_symbols`) look like a timer escape (`ESCAPE_SYMBOLS`), whatever its
    space; or None."""
    escapes = sorted({s for s in symbols if ESCAPE_SYMBOLS.match(s)})
    if escapes:
        return f"the built library imports {', '.join(escapes[:4])}: its own stream, context or thread could run work the timer does not see"
    return None


def library_calls(symbols: list[str]) -> list[str]:
    """Vendor-library functions the binary calls."""
    return sorted({s for s in symbols if LIBRARY_SYMBOLS.match(s)})


def aten_compute_calls(symbols: list[str]) -> list[str]:
    """ATen operators beyond allocation and views that the binary calls (`at::_ops::<op>::call`)."""
    ops = {m.group(1) for s in symbols if (m := re.match(r"at::_ops::(\w+)::(?:call|redispatch)", s))}
    return sorted(op for op in ops if op not in ALLOWED_OPS and OVERLOAD.sub("", op) not in ALLOWED_OPS)


def binary_space_violation(symbols: list[str], space_rank: int) -> str | None:
    """Of a built library's imports (`imported_symbols`): rank 0 (pure_cuda) admits neither vendor libraries nor ATen
    compute; rank 1 admits libraries only."""
    aten = aten_compute_calls(symbols)
    libraries = library_calls(symbols)
    if space_rank == 0 and libraries:
        return f"the built library calls {', '.join(libraries[:4])}, which this space does not admit"
    if space_rank <= 1 and aten:
        return f"the built library calls ATen operators {', '.join(aten[:4])}, which this space does not admit"
    return None


def runtime_space_violation(kernels: list[str], ops: list[str], space_rank: int, own: frozenset[str] = frozenset()) -> str | None:
    """Rank 0 runs only the candidate's own kernels and the admitted operators' (`ALLOWED_OP_KERNELS`); rank 1 adds
    library kernels. A kernel whose name looks like a library's (`LIBRARY_KERNELS`: a pure CUDA kernel may well be
    called `gemv_finish_kernel`) is the candidate's own where its library defines it (`own`: `defined_functions`)
    outside a library's namespace."""
    compute_ops = [op for op in ops if op not in ALLOWED_OPS]
    if space_rank <= 1 and compute_ops:
        return f"it ran ATen operators {', '.join(compute_ops[:4])}, which this space does not admit"
    library = [
        k
        for k in kernels
        if LIBRARY_KERNELS.search(k)
        and not ALLOWED_OP_KERNELS.search(k)
        and (kernel_base_name(k) not in own or LIBRARY_NAMESPACE.search(k))
    ]
    if space_rank == 0 and library:
        return f"it launched library kernels ({library[0][:80]}), which this space does not admit"
    return None
