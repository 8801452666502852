"""The `host` architecture: candidates are C compiled by this machine's compiler and run on its CPU."""

from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

import attrs

from hiera_core.source_rules import SourceRule, violation


@attrs.frozen(kw_only=True)
class HostConfig:
    """`[arch.host]`: the toolchain every host candidate is built with."""

    cc: str = "cc"
    cflags: list[str] = attrs.field(factory=lambda: ["-O3", "-march=native", "-ffp-contract=fast", "-fopenmp"])


SOURCE_RULES = [
    SourceRule(r"#\s*pragma\s+omp\b", "an OpenMP pragma", 1),
    SourceRule(r"#\s*include\s*<omp\.h>", "the OpenMP runtime", 1),
    SourceRule(r"\bomp_\w+\s*\(", "an OpenMP runtime call", 1),
    SourceRule(r"\bcblas_\w+|\bdgemm_?\s*\(", "a BLAS call", 1),
    SourceRule(r"#\s*include\s*<pthread\.h>", "the pthreads library", 1),
    SourceRule(r"#\s*include\s*[<\"]Python\.h", "the Python C API", 2),
    SourceRule(r"#\s*include\s*[<\"](torch|ATen)/", "PyTorch", 2),
]
"""What C on the host may use by space rank: rank 0 only the candidate's own code, rank 1 adds threads and
libraries (OpenMP, BLAS, pthreads), rank 2 adds Python and PyTorch."""


class HostArchitecture:
    name: ClassVar[str] = "host"
    config_class: ClassVar[type] = HostConfig

    def __init__(self, config: HostConfig) -> None:
        self.config = config

    def check_source(self, source: str, rank: int) -> str | None:
        return violation(source, SOURCE_RULES, rank)

    def unavailable_reason(self) -> str | None:
        if shutil.which(self.config.cc) is None:
            return f"no C compiler '{self.config.cc}' on PATH (set [arch.host] cc)"
        return None

    def hardware(self) -> dict[str, Any]:
        return {
            "model": _cpu_model(),
            "cores": cpu_cores(),
            "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "machine": platform.machine(),
        }

    def toolchain(self) -> dict[str, Any]:
        return {"cc": self.config.cc, "version": _compiler_version(self.config.cc), "cflags": list(self.config.cflags)}

    @functools.cache
    def peaks(self, dtype: str) -> tuple[float, float]:
        """Copy bandwidth and FP64 FMA rate over all cores, measured by a small C program."""
        if dtype != "float64":
            raise ValueError(f"the host architecture measures float64 peaks only, not {dtype}")
        with tempfile.TemporaryDirectory(prefix="hiera-peaks-") as tmp:
            source = Path(tmp) / "peaks.c"
            source.write_text(resources.files(__package__).joinpath("peaks.c").read_text())
            binary = Path(tmp) / "peaks"
            subprocess.run([self.config.cc, *self.config.cflags, str(source), "-o", str(binary)], check=True)
            out = subprocess.run([str(binary)], check=True, capture_output=True, text=True, timeout=120).stdout
        gbps, gflops = (float(x) for x in out.split())
        return gbps, gflops


def cpu_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.cache
def _compiler_version(cc: str) -> str:
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.splitlines()[0] if out else "unknown"
