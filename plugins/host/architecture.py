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

from hiera_judge.judging import device_lock
from hiera_judge.source_rules import SourceRule, admitted, violation

TIMING_LOCK = "host-cpu"
"""One candidate is timed at a time on this machine, whatever the executor's concurrency: a lock across threads and
processes (an executor's workers are processes), the GPU lock's counterpart (`hiera_judge.judging.device_lock`)."""


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

SIMD_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "avx512f",
    "avx512dq",
    "avx512cd",
    "avx512bw",
    "avx512vl",
    "avx512ifma",
    "avx512vbmi",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "asimd",
    "sve",
    "sve2",
)
"""The /proc/cpuinfo flags a prompt names: the vector extensions `-march=native` lets the compiler use."""


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
            "online_cores": os.cpu_count() or cpu_cores(),
            "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "machine": platform.machine(),
            "isa": simd_extensions(),
            "caches": caches(),
        }

    def describe_hardware(self, hardware: dict[str, Any] | None = None) -> str:
        hw = hardware or self.hardware()
        online = hw.get("online_cores", hw["cores"])
        cores = f"{hw['cores']} cores available to a candidate" + (f" (of {online} online)" if online != hw["cores"] else "")
        isa = hw["isa"]
        lines = [f"CPU: {hw['model']} ({hw['machine']}); {cores}; memory {hw['memory_gib']} GiB."]
        if isa:
            bits = 512 if "avx512f" in isa else 256 if "avx" in isa else 128
            registers = 32 if "avx512f" in isa else 16
            lines.append(
                f"Vector extensions: {', '.join(isa)}. The widest vectors are {bits}-bit ({bits // 64} doubles), with"
                f" {registers} vector registers; `-march=native` lets the compiler use all of these, and intrinsics"
                " (`<immintrin.h>`) or GCC vector extensions may name them."
            )
        if hw["caches"]:
            lines.append(f"Caches: {'; '.join(hw['caches'])}.")
        return "\n".join(lines)

    def describe_space(self, rank: int) -> str:
        yes, no = admitted(SOURCE_RULES, rank)
        build = f"`{self.config.cc} {' '.join(self.config.cflags)}` builds the source as C into a shared library"
        parts = [
            f"C on the CPU: {build}; the candidate's own code and the C standard library are always admitted,"
            " vector intrinsics included."
        ]
        if "an OpenMP pragma" not in yes and "the pthreads library" not in yes:
            parts.append("No threads: the candidate runs on one core (the kernel holds it to one, whatever it starts).")
        else:
            from hiera_plugins.host.evaluators import RUNNER_ENVIRONMENT

            fixed = ", ".join(f"{k}={v}" for k, v in RUNNER_ENVIRONMENT.items())
            openmp = "" if "-fopenmp" in self.config.cflags else " (but the cflags lack -fopenmp)"
            parts.append(
                f"Threads are admitted: OpenMP pragmas, `<omp.h>` and `omp_*` calls{openmp}, and `<pthread.h>`,"
                f" on the {cpu_cores()} cores a candidate gets. The environment the candidate runs in is"
                f" hiera's ({fixed}; OpenMP's default thread count is the cores): a candidate writes only its source, so"
                " it sets thread counts and binding there (`num_threads(...)`, `proc_bind(...)`, `omp_set_num_threads`)"
                " where it wants other than these, never through environment variables."
            )
            if not any("blas" in flag for flag in self.config.cflags):
                parts.append(
                    "BLAS calls (`cblas_*`, `dgemm`) pass the source check, but the build links no BLAS library"
                    " (no `-l...blas` in the cflags), so a candidate that calls one fails to build or load here."
                )
        if rank >= 2:
            python = _finds_header(self.config.cc, tuple(self.config.cflags), "Python.h")
            parts.append(
                "The source check also admits the Python C API (`Python.h`) and PyTorch headers, but the file is C: PyTorch's"
                " headers are C++ and unusable here, and this compiler "
                + (
                    "finds `Python.h`."
                    if python
                    else "does not find `Python.h`, so this space admits in practice what the space below it admits."
                )
            )
        if no:
            parts.append(f"Rejected by the source check before compiling (a wider space admits them): {', '.join(no)}.")
        return " ".join(parts)

    def toolchain(self) -> dict[str, Any]:
        return {"cc": self.config.cc, "version": _compiler_version(self.config.cc), "cflags": list(self.config.cflags)}

    @functools.cache  # noqa: B019 -- one architecture object a process; its peaks are measured once
    def peaks(self, dtype: str) -> tuple[float, float]:
        """Copy bandwidth and FP64 FMA rate over all cores, measured by a small C program that holds the timing lock:
        several runs of a suite start side by side, and a measurement beside a judge's timing slows both."""
        if dtype != "float64":
            raise ValueError(f"the host architecture measures float64 peaks only, not {dtype}")
        with tempfile.TemporaryDirectory(prefix="hiera-peaks-") as tmp:
            source = Path(tmp) / "peaks.c"
            source.write_text(resources.files(__package__).joinpath("peaks.c").read_text())
            binary = Path(tmp) / "peaks"
            subprocess.run([self.config.cc, *self.config.cflags, str(source), "-o", str(binary)], check=True)
            with device_lock(TIMING_LOCK):
                out = subprocess.run([str(binary)], check=True, capture_output=True, text=True, timeout=120).stdout
        gbps, gflops = (float(x) for x in out.split())
        return gbps, gflops


def cpu_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def candidate_cores(rank: int) -> int:
    """The cores a candidate of a space of `rank` runs on: one where the space admits no threads, else all; the
    kernel enforces it (the candidate's cpuset), whatever pragma or clone the candidate uses."""
    yes, _ = admitted(SOURCE_RULES, rank)
    return cpu_cores() if "an OpenMP pragma" in yes or "the pthreads library" in yes else 1


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def simd_extensions() -> list[str]:
    """The vector extensions of SIMD_FLAGS that this CPU has (the first processor's `flags` or `Features`)."""
    for line in _cpuinfo().splitlines():
        if line.startswith(("flags", "Features")):
            present = set(line.split(":", 1)[1].split())
            return [flag for flag in SIMD_FLAGS if flag in present]
    return []


def caches() -> list[str]:
    """The first CPU's data and unified caches, `L1d 48 KiB (per 2 CPUs)`, from sysfs; empty where it has none."""
    found = []
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level, kind, size = ((index / name).read_text().strip() for name in ("level", "type", "size"))
            shared = (index / "shared_cpu_list").read_text().strip()
        except OSError:
            continue
        if kind == "Instruction":
            continue
        kib = int(size.rstrip("K")) if size.endswith("K") else None
        shown = size if kib is None else f"{kib // 1024} MiB" if kib >= 1024 and kib % 1024 == 0 else f"{kib} KiB"
        cpus = sum(int(b) - int(a) + 1 if "-" in part else 1 for part in shared.split(",") for a, _, b in [part.partition("-")])
        found.append(f"L{level}{'d' if kind == 'Data' else ''} {shown} (shared by {cpus} CPU{'s' if cpus > 1 else ''})")
    return found


@functools.cache
def _finds_header(cc: str, cflags: tuple[str, ...], header: str) -> bool:
    try:
        done = subprocess.run(
            [cc, *cflags, "-E", "-x", "c", "-"], input=f"#include <{header}>\n", capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _cpu_model() -> str:
    for line in _cpuinfo().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


@functools.cache
def _compiler_version(cc: str) -> str:
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.splitlines()[0] if out else "unknown"
