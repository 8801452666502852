"""The `cuda` architecture: candidates are CUDA sources built as PyTorch extensions and run on an NVIDIA GPU."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import attrs

from hiera_judge.judging import device_lock
from hiera_judge.source_rules import admitted, violation
from hiera_plugins.cuda.checks import ALLOWED_OPS, HACKS, SOURCE_RULES


@attrs.frozen(kw_only=True)
class CudaConfig:
    """`[arch.cuda]`: the toolchain and device every cuda candidate is built for and run on."""

    device: int = 0
    arch_list: str = ""
    """TORCH_CUDA_ARCH_LIST, e.g. "9.0a"; empty means the device's own capability (sm_90 -> "9.0a")."""
    cuda_home: str = ""
    """The CUDA toolkit root; empty means $CUDA_HOME, else the first of /usr/local/cuda* with nvcc and headers."""
    cuda_cflags: list[str] = attrs.field(factory=lambda: ["-O3", "-lineinfo"])
    cache_dir: str = "~/.cache/hiera/cuda-builds"
    """Content-addressed build cache: an identical candidate (source, contract, toolchain) never recompiles."""


class CudaArchitecture:
    name: ClassVar[str] = "cuda"
    config_class: ClassVar[type] = CudaConfig
    preference: ClassVar[int] = 10
    """`--arch auto` takes the GPU where it can run, before the host."""
    accelerator: ClassVar[str] = "GPU"
    """Its timing and profiling stages hold one GPU each: a distributed executor places them on a worker that has one."""

    def __init__(self, config: CudaConfig) -> None:
        self.config = config

    def check_source(self, source: str, rank: int) -> str | None:
        return violation(source, SOURCE_RULES, rank)

    def unavailable_reason(self) -> str | None:
        try:
            import torch
        except ImportError:
            return "PyTorch is not installed"
        if not torch.cuda.is_available():
            return "PyTorch sees no CUDA device"
        if self.config.device >= torch.cuda.device_count():
            return f"no CUDA device {self.config.device} (this machine has {torch.cuda.device_count()})"
        if find_cuda_home(self.config.cuda_home) is None:
            return "no CUDA toolkit (nvcc and headers) found; set [arch.cuda] cuda_home or CUDA_HOME"
        return None

    def hardware(self) -> dict[str, Any]:
        import torch

        props = torch.cuda.get_device_properties(self.config.device)
        return {
            "model": props.name,
            "compute_capability": f"{props.major}.{props.minor}",
            "sms": props.multi_processor_count,
            "memory_gib": round(props.total_memory / 2**30, 1),
            "l2_mib": round(getattr(props, "L2_cache_size", 0) / 2**20, 1),
            "driver": _driver_version(),
        }

    def describe_hardware(self, hardware: dict[str, Any] | None = None) -> str:
        """The GPU of `hardware` (what a run recorded, when it plans on a machine without it), else as the planning
        process sees it; without one, what the configuration alone says: the compute capability candidates are built
        for."""
        if hardware is None:
            try:
                import torch

                visible = torch.cuda.is_available() and self.config.device < torch.cuda.device_count()
            except Exception:  # noqa: BLE001 -- no torch, or no driver: say what is known without it
                visible = False
            if not visible:
                return (
                    f"An NVIDIA GPU (device {self.config.device}) that this planning process cannot see: candidates are"
                    f" built for compute capability {self.arch_list()}; its name, SM count and memory are not known here."
                )
        hw = hardware or self.hardware()
        return (
            f"GPU: {hw['model']} (device {self.config.device}), compute capability {hw['compute_capability']}"
            f" (built for {self.arch_list()}), {hw['sms']} SMs, {hw['memory_gib']} GiB of device memory,"
            f" {hw['l2_mib']} MiB L2; driver {hw['driver']}."
        )

    def describe_space(self, rank: int) -> str:
        yes, no = admitted(SOURCE_RULES, rank)
        libraries = [what for what in yes if what != "a PyTorch/ATen operator"]
        parts = [
            "CUDA C++ built by nvcc as a PyTorch extension: the candidate's own kernels, launched on the current"
            f" stream, and ATen calls that only allocate, view or copy ({', '.join(op for op in _SHOWN_OPS if op in ALLOWED_OPS)})."
        ]
        if libraries:
            parts.append(f"Vendor libraries are admitted: {', '.join(libraries)}.")
        if "a PyTorch/ATen operator" in yes:
            parts.append("PyTorch/ATen operators that compute (`at::conv2d`, `torch::matmul`, `.mm(...)`) are admitted.")
        if no:
            parts.append(
                f"Not admitted, and checked three times: in the source before compiling ({', '.join(no)}), in the built"
                " library's imported symbols, and in the kernels and ATen operators the judge sees run."
            )
        reasons = "; ".join(reason.split(" (")[0] for _, reason in HACKS)
        parts.append(f"No space admits a source that: {reasons}; or uses a type below the contract's precision.")
        return " ".join(parts)

    def toolchain(self) -> dict[str, Any]:
        import torch

        cuda_home = find_cuda_home(self.config.cuda_home)
        return {
            "torch": torch.__version__,
            "torch_cuda": torch.version.cuda,
            "nvcc": _nvcc_version(str(cuda_home)) if cuda_home else "none",
            "cuda_home": str(cuda_home),
            "arch_list": self.arch_list(),
            "cuda_cflags": list(self.config.cuda_cflags),
            "include_paths": library_include_paths(cuda_home),
            "cache_dir": str(Path(self.config.cache_dir).expanduser()),
        }

    def arch_list(self) -> str:
        if self.config.arch_list:
            return self.config.arch_list
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability(self.config.device)
            return f"{major}.{minor}{'a' if (major, minor) in ((9, 0), (10, 0)) else ''}"
        return "9.0a"

    @functools.cache  # noqa: B019 -- one architecture object a process; its peaks are measured once
    def peaks(self, dtype: str) -> tuple[float, float]:
        """Device copy bandwidth and the best GEMM rate for `dtype`, measured in a fresh process that holds the GPU's
        lock: several runs of a suite start side by side, and a measurement beside a judge's timing slows both."""
        code = _PEAKS.format(device=self.config.device, dtype=dtype)
        with device_lock(gpu_lock_name(self.config.device)):
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
        gbps, gflops = json.loads(out.stdout.strip().splitlines()[-1])
        return gbps, gflops


_SHOWN_OPS = ("empty", "empty_like", "zeros", "zeros_like", "fill_", "view", "reshape", "contiguous", "copy_")
"""The allocation, view and copy operators a space description names (all of `checks.ALLOWED_OPS` are admitted)."""

_PEAKS = """
import json, torch
torch.backends.cuda.matmul.allow_tf32 = False
torch.cuda.set_device({device})
def best(fn, n=10):
    times = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize(); times.append(a.elapsed_time(b))
    return min(times)
src = torch.empty(2**28, dtype=torch.float32, device="cuda"); dst = torch.empty_like(src)
dst.copy_(src)
gbps = 2 * src.numel() * 4 / (best(lambda: dst.copy_(src)) * 1e6)
n = 8192
x = torch.rand(n, n, dtype=getattr(torch, "{dtype}"), device="cuda"); y = torch.rand_like(x)
x @ y
gflops = 2 * n**3 / (best(lambda: x @ y, 5) * 1e6)
print(json.dumps([gbps, gflops]))
"""


def find_cuda_home(configured: str = "") -> Path | None:
    """The toolkit root whose bin/nvcc is the real compiler and include/ has cuda_runtime.h."""
    candidates = [
        configured,
        os.environ.get("CUDA_HOME", ""),
        "/usr/local/cuda",
        *sorted((str(p) for p in Path("/usr/local").glob("cuda-*")), reverse=True),
    ]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(str(Path(nvcc).resolve().parent.parent))
    for candidate in filter(None, candidates):
        root = Path(candidate).expanduser()
        if (root / "bin" / "nvcc").is_file() and (root / "include" / "cuda_runtime.h").is_file():
            return root
    return None


@functools.cache
def _nvcc_version(cuda_home: str) -> str:
    try:
        out = subprocess.run([f"{cuda_home}/bin/nvcc", "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.strip().splitlines()[-1] if out.strip() else "unknown"


def _driver_version() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.strip().splitlines()[0] if out.strip() else "unknown"


def library_include_paths(cuda_home: Path | None) -> list[str]:
    """Headers of the CUDA libraries torch's own headers need (cuBLAS, cuSPARSE, cuSOLVER, cuDNN), from
    the NVIDIA wheels torch depends on, when the toolkit itself lacks them."""
    if cuda_home is not None and (cuda_home / "include" / "cusparse.h").is_file():
        return []
    import torch

    nvidia = Path(torch.__file__).parent.parent / "nvidia"
    return [str(p) for p in sorted(nvidia.glob("*/include")) if (p / "cusparse.h").is_file() or (p / "cudnn.h").is_file()]


def gpu_lock_name(device: int) -> str:
    """The name of the lock of the `device`-th GPU this process sees (`hiera_judge.judging.device_lock`): the machine's
    own index or UUID of it, from CUDA_VISIBLE_DEVICES when that is set. An executor's worker holding one GPU sees it
    as device 0 (Ray sets CUDA_VISIBLE_DEVICES to it), so workers on two GPUs of one machine take two locks."""
    visible = [entry.strip() for entry in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if entry.strip()]
    return f"gpu-{visible[device] if device < len(visible) else device}"
