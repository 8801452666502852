"""Nsight Compute profiling of one candidate call: the ncu command, its CSV, and the `Profile` it becomes.

The runner (`--profile`) runs an unprofiled warm-up, then one candidate call inside an NVTX push/pop range; `ncu_command`
profiles every kernel launched inside that range and nothing else. `parse_ncu_csv` reads ncu's raw CSV page
(one row per kernel), and `summarize` turns the kernels into the `Profile` the direction rules read.

Signals (all in [0, 1], 1 = healthy; the contract with `hiera_directions`):

* `branch_uniformity` (C) = time-weighted mean over kernels of min(branch efficiency, lane efficiency).
  Branch efficiency is `smsp__sass_average_branch_targets_threads_uniform.pct` / 100, taken as 1 when
  `smsp__sass_branch_targets_threads_divergent.sum` is 0 (ncu reports 0% for a kernel without branches);
  lane efficiency is `smsp__thread_inst_executed_pred_on_per_inst_executed.ratio` / 32 (lanes lost to
  divergence and to predication, which the compiler uses for short guarded bodies such as boundary checks).
* `achieved_occupancy` (P) = `sm__warps_active.avg.pct_of_peak_sustained_active` / 100.
* `grid_fill` (P) = time-weighted mean over kernels of min(1, `launch__grid_size` / `launch__sm_count`),
  the SM count falling back to `sm_count`.
* `sector_efficiency` (M) = useful bytes / bytes fetched for global loads and stores:
  sum(`smsp__sass_average_data_bytes_per_sector_mem_global_op_{ld,st}.ratio` x
  `l1tex__t_sectors_pipe_lsu_mem_global_op_{ld,st}.sum`) / (32 x the sectors). This is independent of the
  access width (a coalesced FP64 load and a coalesced float4 load both score 1), unlike sectors per request.
  1 when the kernels touch no global memory.
* `dram_reuse` (R) = roofline `bytes_moved` / (`dram__bytes_read.sum` + `dram__bytes_write.sum`), capped at 1;
  only with a roofline.
* `onchip_reuse` (R) = roofline `bytes_moved` / (32 x the global load and store sectors the SMs request from
  L1), capped at 1; only with a roofline. Low when every output re-reads its inputs through L1/L2 (a naive
  stencil: 49 loads per point) although DRAM sees each byte once. `cp.async` copies are not counted.
* `pipe_utilization` (T) = the busiest of the FP64, FMA, ALU, tensor (all) and DMMA pipes,
  `sm__pipe_*_cycles_active.avg.pct_of_peak_sustained_elapsed` / 100.
* `memory_floor_fraction`, `compute_floor_fraction` = the roofline's floor / `latency_ms`, capped at 1 (on compute,
  the reference's own arithmetic where the workload counts it: `Roofline.compute_headroom_ms`).

Kernels are aggregated by summing counts (bytes, sectors, conflicts, time) and averaging rates and percentages
weighted by `gpu__time_duration.sum`; launch attributes in `metrics` are those of the longest kernel.
"""

from __future__ import annotations

import csv
import glob
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import attrs

from hiera_core.records import Profile, Roofline

SOURCE = "ncu"

# Every name is taken from the ncu 2025.x section files for sm_90 (see reference/eval.md §1.2-1.3).
# ncu aborts the whole run on an unknown name, so add names only after `ncu --query-metrics --chip gh100`.
SPEED_OF_LIGHT = (
    "gpu__time_duration.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
)
LAUNCH = (  # launch attributes: read from the launch, no replay pass
    "launch__grid_size",
    "launch__block_size",
    "launch__sm_count",
    "launch__registers_per_thread",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps",
    "launch__occupancy_limit_blocks",
)
LANES = "smsp__thread_inst_executed_pred_on_per_inst_executed.ratio"
BRANCH_EFFICIENCY = "smsp__sass_average_branch_targets_threads_uniform.pct"
DIVERGENT_BRANCHES = "smsp__sass_branch_targets_threads_divergent.sum"
CONTROL = (LANES, BRANCH_EFFICIENCY, DIVERGENT_BRANCHES)
PARALLELISM = (
    "sm__maximum_warps_per_active_cycle_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "smsp__issue_active.avg.per_cycle_active",
)
GLOBAL_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_{op}.sum"
GLOBAL_LOAD_REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"
BYTES_PER_SECTOR = "smsp__sass_average_data_bytes_per_sector_mem_global_op_{op}.ratio"
SHARED_CONFLICTS = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{op}.sum"
SHARED_WAVEFRONTS = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{op}.sum"
MEMORY = (
    *(template.format(op=op) for template in (GLOBAL_SECTORS, BYTES_PER_SECTOR) for op in ("ld", "st")),
    GLOBAL_LOAD_REQUESTS,
    *(template.format(op=op) for template in (SHARED_CONFLICTS, SHARED_WAVEFRONTS) for op in ("ld", "st")),
)
REUSE = (
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_sector_hit_rate.pct",
)
PIPES = {  # label -> metric; `pipe_utilization` is the busiest
    "FP64": "sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "FMA": "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "ALU": "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "tensor": "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "DMMA": "sm__pipe_tensor_op_dmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
}
STALLS = {  # CPI stack: cycles of each reason per issued instruction; they add up to CPI
    reason: f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"
    for reason in ("long_scoreboard", "lg_throttle", "mio_throttle", "barrier", "math_pipe_throttle")
}
CPI = "smsp__average_warp_latency_per_inst_issued.ratio"

METRICS: tuple[str, ...] = (
    *SPEED_OF_LIGHT,
    *LAUNCH,
    *CONTROL,
    *PARALLELISM,
    *MEMORY,
    *REUSE,
    *PIPES.values(),
    *STALLS.values(),
    CPI,
)
"""What `ncu_command` collects: Speed-Of-Light triage plus the evidence for each direction."""

_SUMMED = frozenset(name for name in METRICS if name.endswith(".sum"))
"""Counts, added over kernels; every other metric is averaged, weighted by kernel time."""

SECTOR_BYTES = 32
WARP_SIZE = 32


@attrs.frozen(kw_only=True)
class KernelMetrics:
    """One row of ncu's raw page: a kernel launch and its metrics, in ncu's base units (ns, bytes, %)."""

    kernel_name: str
    metrics: dict[str, float] = attrs.field(factory=dict)
    """Metric name -> value; a metric ncu reported as `n/a` (or not at all) is absent."""


def find_ncu() -> str | None:
    """The ncu executable: on PATH, else in /usr/local/cuda/bin, else the newest /opt/nvidia/nsight-compute."""
    found = shutil.which("ncu")
    if found:
        return found
    if Path("/usr/local/cuda/bin/ncu").is_file():
        return "/usr/local/cuda/bin/ncu"
    installs = sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), key=_version_key)
    return installs[-1] if installs else None


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", Path(path).parent.name))


def ncu_command(python_argv: list[str], *, ncu: str, nvtx_range: str, output_csv: bool = True, max_kernels: int = 0) -> list[str]:
    """The command that profiles every kernel launched inside the NVTX push/pop range `nvtx_range` (the first
    `max_kernels` of them, if not 0).

    Clocks are left alone (`--clock-control none`, as in timing); caches are flushed before each replay pass
    (`--cache-control all`), so DRAM bytes include compulsory traffic. With `output_csv`, ncu
    prints the raw page as CSV (one row per kernel, base units) on stdout after the program's own output;
    without it, the caller adds its own output options (e.g. `--export FILE`).
    """
    command = [ncu, "--target-processes", "all", "--clock-control", "none", "--cache-control", "all"]
    # The trailing "/" selects a push/pop range in the default domain; without it ncu matches start/end ranges.
    command += ["--nvtx", "--nvtx-include", f"{nvtx_range}/", "--metrics", ",".join(METRICS)]
    if max_kernels:
        command += ["--launch-count", str(max_kernels)]
    if output_csv:
        command += ["--csv", "--page", "raw", "--print-units", "base"]
    return [*command, *python_argv]


def parse_ncu_csv(text: str) -> list[KernelMetrics]:
    """The kernels of ncu's raw CSV page, in launch order; lines that are not part of the table are skipped.

    The table is a header row (identity columns such as "ID", "Kernel Name", then metric names), a row of
    units, and one row per kernel. ncu's `==PROF==` lines and the program's output may come before it; ncu prints
    its table last, when the profiled process has ended, so only the last table counts (a candidate that printed
    a table of its own during its call, before the profiled runner took its stdout away, forges nothing).
    Values lose thousands separators and are scaled to ns and bytes when a unit says otherwise; `n/a` and other
    non-numbers are dropped.
    """
    kernels: list[KernelMetrics] = []
    header: list[str] | None = None
    units: list[str] | None = None
    for line in text.splitlines():
        if not line.startswith('"'):
            continue
        row = next(csv.reader([line]))
        if row[:1] == ["ID"] and "Kernel Name" in row:
            header, units, kernels = row, None, []
        elif header is None or len(row) != len(header):
            continue
        elif units is None:
            units = row
        else:
            kernels.append(_kernel(header, units, row))
    return kernels


DEVICE_FACTS = ("device__attribute_", "nvlink__", "c2clink__", "numa__", "profiler__")
"""Raw-page columns that describe the GPU, its links or the profiler rather than the kernel: the prompt's Target
section states the GPU (a profile of the H200 carried some 200 of them, a third of a 37 KB prompt)."""


def _kept(name: str) -> bool:
    """A kernel metric worth recording: not a device fact, not the per-unit max or min of a figure whose average is
    there, not a sum of percentages."""
    if "__" not in name or name.startswith(DEVICE_FACTS):  # identity columns: ID, Kernel Name, Block Size, Device, ...
        return False
    parts = name.split(".")
    return not (len(parts) > 1 and (parts[1] in ("max", "min") or (parts[1] == "sum" and "pct" in name)))


def _kernel(header: list[str], units: list[str], row: list[str]) -> KernelMetrics:
    metrics = {}
    for name, unit, text in zip(header, units, row, strict=True):
        if not _kept(name):
            continue
        value = _number(text)
        if value is not None:
            metrics[name] = value * _unit_scale(unit)
    return KernelMetrics(kernel_name=row[header.index("Kernel Name")], metrics=metrics)


def _number(text: str) -> float | None:
    try:  # an instanced cell, "158 (0: 158)", starts with its aggregate
        return float(text.split(" (", 1)[0].replace(",", "").strip())
    except ValueError:
        return None


_PREFIX = {"": 1.0, "n": 1e-9, "u": 1e-6, "m": 1e-3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_SHORT_TIMES = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def _unit_scale(unit: str) -> float:
    """Factor to ns (times) or bytes (sizes; ncu's prefixes are decimal); 1 for every other unit."""
    if unit in _SHORT_TIMES:
        return _SHORT_TIMES[unit]
    for base, to_base in (("second", 1e9), ("byte", 1.0)):
        if unit.endswith(base) and unit[: -len(base)] in _PREFIX:
            return _PREFIX[unit[: -len(base)]] * to_base
    return 1.0


def permission_problem(output: str) -> str | None:
    """A one-line reason when ncu's output shows that it could not profile, else None.

    Recognises the counter-permission error (ERR_NVGPUCTRPERM), any other `==ERROR==` line (unknown metric,
    unknown option, the program failing) and a run in which no kernel was profiled (the NVTX range matched
    nothing).
    """
    if "ERR_NVGPUCTRPERM" in output:
        return (
            "GPU performance counters are restricted to admin users (ERR_NVGPUCTRPERM) and the profiled process "
            "runs without capabilities: load the driver with NVreg_RestrictProfilingToAdminUsers=0"
        )
    for line in output.splitlines():
        if line.startswith("==ERROR=="):
            return "ncu: " + line.removeprefix("==ERROR==").strip()
    if "No kernels were profiled" in output:
        return "ncu profiled no kernels: no kernel was launched inside the NVTX range"
    return None


def unavailable_profile(reason: str) -> Profile:
    """The profile of a call ncu could not profile; planning falls back to latency alone."""
    return Profile(source=SOURCE, unavailable=reason)


WHOLE_CALL = ("dram_reuse", "onchip_reuse", "dram_to_ideal_ratio")
"""Figures that set the profiled kernels' bytes against the whole call's (the roofline's): wrong when only the first
kernels of a call were profiled, so such a profile leaves them out."""


def summarize(
    kernels: Sequence[KernelMetrics],
    *,
    latency_ms: float,
    roofline: Roofline | None,
    sm_count: int = 132,
    partial: bool = False,
) -> Profile:
    """Aggregate the kernels of one call into metrics, signals and findings (see the module docstring). `partial`:
    the kernels are the first of a call that launched more."""
    if not kernels:
        return unavailable_profile("ncu reported no kernels for the call")
    metrics = _aggregate(kernels)
    signals = _signals(kernels, metrics, latency_ms=latency_ms, roofline=roofline, sm_count=sm_count)
    derived = _derived(metrics, roofline)
    if partial:
        signals = {name: value for name, value in signals.items() if name not in WHOLE_CALL}
        derived = {name: value for name, value in derived.items() if name not in WHOLE_CALL}
    findings = _findings(kernels, metrics, derived, signals, roofline, sm_count)
    if partial:
        findings.insert(
            0, f"only the call's first {len(kernels)} kernels were profiled: the figures are theirs, not the whole call's"
        )
    return Profile(
        source=SOURCE,
        metrics={**metrics, **derived},
        signals={name: round(value, 4) for name, value in signals.items()},
        findings=findings,
    )


def _aggregate(kernels: Sequence[KernelMetrics]) -> dict[str, float]:
    times = [k.metrics.get("gpu__time_duration.sum", 0.0) for k in kernels]
    weights = times if sum(times) > 0 else [1.0] * len(kernels)
    longest = kernels[max(range(len(kernels)), key=weights.__getitem__)]
    aggregated: dict[str, float] = {"kernel_count": float(len(kernels))}
    for name in sorted({name for k in kernels for name in k.metrics}):
        present = [(k.metrics[name], w) for k, w in zip(kernels, weights, strict=True) if name in k.metrics]
        if name.startswith("launch__"):
            if name in longest.metrics:
                aggregated[name] = longest.metrics[name]
        elif name in _SUMMED:
            aggregated[name] = sum(value for value, _ in present)
        elif sum(w for _, w in present) > 0:
            aggregated[name] = sum(value * w for value, w in present) / sum(w for _, w in present)
    return aggregated


def _signals(
    kernels: Sequence[KernelMetrics],
    metrics: dict[str, float],
    *,
    latency_ms: float,
    roofline: Roofline | None,
    sm_count: int,
) -> dict[str, float]:
    signals: dict[str, float] = {}
    uniformity = _time_weighted(kernels, _branch_uniformity)
    if uniformity is not None:
        signals["branch_uniformity"] = uniformity
    if "sm__warps_active.avg.pct_of_peak_sustained_active" in metrics:
        signals["achieved_occupancy"] = metrics["sm__warps_active.avg.pct_of_peak_sustained_active"] / 100
    fill = _time_weighted(kernels, lambda m: _grid_fill(m, sm_count))
    if fill is not None:
        signals["grid_fill"] = fill
    efficiency = _sector_efficiency(kernels)
    if efficiency is not None:
        signals["sector_efficiency"] = efficiency
    dram = _dram_bytes(metrics)
    if roofline is not None and dram is not None:
        signals["dram_reuse"] = 1.0 if dram == 0 else roofline.bytes_moved / dram
    requested = sum(metrics.get(GLOBAL_SECTORS.format(op=op), 0.0) for op in ("ld", "st")) * 32
    if roofline is not None and requested > 0:
        signals["onchip_reuse"] = roofline.bytes_moved / requested
    pipes = [metrics[name] for name in PIPES.values() if name in metrics]
    if pipes:
        signals["pipe_utilization"] = max(pipes) / 100
    if roofline is not None and latency_ms > 0:
        signals["memory_floor_fraction"] = roofline.memory_floor_ms / latency_ms
        signals["compute_floor_fraction"] = roofline.compute_headroom_ms / latency_ms
    return {name: min(1.0, max(0.0, value)) for name, value in signals.items()}


def _time_weighted(kernels: Sequence[KernelMetrics], value_of) -> float | None:
    """Mean of a per-kernel value over the kernels that have it, weighted by kernel time."""
    pairs = [(value_of(k.metrics), k.metrics.get("gpu__time_duration.sum", 0.0)) for k in kernels]
    pairs = [(value, weight) for value, weight in pairs if value is not None]
    if not pairs:
        return None
    if sum(weight for _, weight in pairs) <= 0:
        pairs = [(value, 1.0) for value, _ in pairs]
    return sum(value * weight for value, weight in pairs) / sum(weight for _, weight in pairs)


def _branch_uniformity(metrics: dict[str, float]) -> float | None:
    fractions = []
    if BRANCH_EFFICIENCY in metrics:  # ncu reports 0% for a kernel without divergent branches too
        fractions.append(1.0 if metrics.get(DIVERGENT_BRANCHES) == 0 else metrics[BRANCH_EFFICIENCY] / 100)
    if LANES in metrics:
        fractions.append(metrics[LANES] / WARP_SIZE)
    return min(fractions) if fractions else None


def _grid_fill(metrics: dict[str, float], sm_count: int) -> float | None:
    if "launch__grid_size" not in metrics:
        return None
    return min(1.0, metrics["launch__grid_size"] / metrics.get("launch__sm_count", sm_count))


def _sector_efficiency(kernels: Sequence[KernelMetrics]) -> float | None:
    useful = fetched = 0.0
    measured = False
    for kernel in kernels:
        for op in ("ld", "st"):
            per_sector = kernel.metrics.get(BYTES_PER_SECTOR.format(op=op))
            sectors = kernel.metrics.get(GLOBAL_SECTORS.format(op=op))
            if per_sector is not None and sectors is not None:
                measured = True
                useful += per_sector * sectors
                fetched += SECTOR_BYTES * sectors
    if not measured:
        return None
    return useful / fetched if fetched > 0 else 1.0


def _dram_bytes(metrics: dict[str, float]) -> float | None:
    if "dram__bytes_read.sum" not in metrics and "dram__bytes_write.sum" not in metrics:
        return None
    return metrics.get("dram__bytes_read.sum", 0.0) + metrics.get("dram__bytes_write.sum", 0.0)


def _derived(metrics: dict[str, float], roofline: Roofline | None) -> dict[str, float]:
    """A few unit-named figures that prompts and plots read more easily than raw ncu names."""
    derived: dict[str, float] = {}
    duration_ns = metrics.get("gpu__time_duration.sum", 0.0)
    if duration_ns > 0:
        derived["ncu_duration_ms"] = duration_ns / 1e6
    dram = _dram_bytes(metrics)
    if dram is not None:
        derived["dram_bytes"] = dram
        if duration_ns > 0:
            derived["dram_gbps"] = dram / duration_ns
        if roofline is not None and roofline.bytes_moved > 0:
            derived["dram_to_ideal_ratio"] = dram / roofline.bytes_moved
    requests = metrics.get(GLOBAL_LOAD_REQUESTS, 0.0)
    if requests > 0 and GLOBAL_SECTORS.format(op="ld") in metrics:
        derived["global_load_sectors_per_request"] = metrics[GLOBAL_SECTORS.format(op="ld")] / requests
    wavefronts = sum(metrics.get(SHARED_WAVEFRONTS.format(op=op), 0.0) for op in ("ld", "st"))
    if wavefronts > 0:
        conflicts = sum(metrics.get(SHARED_CONFLICTS.format(op=op), 0.0) for op in ("ld", "st"))
        derived["shared_bank_conflict_fraction"] = conflicts / wavefronts
    return derived


def _findings(
    kernels: Sequence[KernelMetrics],
    metrics: dict[str, float],
    derived: dict[str, float],
    signals: dict[str, float],
    roofline: Roofline | None,
    sm_count: int,
) -> list[str]:
    """At most six lines: the Speed-Of-Light verdict first, then the rest by a rough severity in [0, 1]."""
    ranked: list[tuple[float, str]] = []

    fills = [(k, _grid_fill(k.metrics, sm_count)) for k in kernels]
    starved = [(k, fill) for k, fill in fills if fill is not None and fill < 1]
    if starved:
        kernel, fill = min(starved, key=lambda item: item[1])
        total_ns = sum(k.metrics.get("gpu__time_duration.sum", 0.0) for k in kernels)
        share = kernel.metrics.get("gpu__time_duration.sum", 0.0) / total_ns if total_ns > 0 else 1.0
        line = (
            f"{_short_name(kernel.kernel_name)} launches {kernel.metrics['launch__grid_size']:.0f} blocks: "
            f"{1 - fill:.0%} of the SMs get no work"
        )
        if len(kernels) > 1:
            line += f" ({share:.0%} of the GPU time)"
        ranked.append(((1 - fill) * share, line))
    if "achieved_occupancy" in signals:
        theoretical = metrics.get("sm__maximum_warps_per_active_cycle_pct")
        line = f"achieved occupancy {signals['achieved_occupancy']:.0%}"
        if theoretical is not None:
            line += f" of theoretical {theoretical / 100:.0%}"
            limiter = _occupancy_limiter(metrics)
            if theoretical < 80 and limiter:
                line += f" (limited by {limiter})"
        ranked.append((0.8 * (1 - signals["achieved_occupancy"]), line))
    if "sector_efficiency" in signals:
        line = f"global accesses use {signals['sector_efficiency']:.0%} of the bytes of each 32-byte sector fetched"
        if "global_load_sectors_per_request" in derived:
            line += f" ({derived['global_load_sectors_per_request']:.1f} sectors per load request)"
        ranked.append((1 - signals["sector_efficiency"], line))
    if derived.get("shared_bank_conflict_fraction", 0) > 0:
        fraction = derived["shared_bank_conflict_fraction"]
        ranked.append((fraction, f"shared-memory bank conflicts in {fraction:.0%} of shared wavefronts"))
    if "branch_uniformity" in signals:
        line = f"branch uniformity {signals['branch_uniformity']:.0%}"
        if LANES in metrics:
            line += f" ({metrics[LANES]:.1f} of {WARP_SIZE} lanes active per instruction)"
        ranked.append((1 - signals["branch_uniformity"], line))
    if roofline is not None and "dram_to_ideal_ratio" in derived:
        line = f"DRAM traffic {derived['dram_to_ideal_ratio']:.2f}x the ideal {roofline.bytes_moved / 1e6:.1f} MB"
        ranked.append((1 - signals.get("dram_reuse", 1.0), line))
    pipes = {label: metrics[name] for label, name in PIPES.items() if name in metrics}
    if pipes:
        label = max(pipes, key=pipes.__getitem__)
        ranked.append((0.5 * pipes[label] / 100, f"busiest compute pipe: {label} at {pipes[label]:.0f}% of peak"))
    stall = _top_stall(metrics)
    if stall is not None:
        reason, share = stall
        ranked.append((0.6 * share, f"top warp stall: {reason} ({share:.0%} of cycles per issued instruction)"))

    ranked.sort(key=lambda item: -item[0])
    return [_verdict(metrics, signals, roofline), *(line for _, line in ranked[:5])]


def _verdict(metrics: dict[str, float], signals: dict[str, float], roofline: Roofline | None) -> str:
    """NVIDIA's Speed-Of-Light triage (SpeedOfLight.py): latency-bound below 60%, else the busier unit."""
    compute = metrics.get("sm__throughput.avg.pct_of_peak_sustained_elapsed", 0.0)
    memory = metrics.get("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", 0.0)
    dram = metrics.get("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", 0.0)
    if max(compute, memory) < 60:
        line = f"SM {compute:.0f}% and memory {memory:.0f}% of peak: latency-bound, neither unit is busy"
    elif memory >= compute:
        unit = "DRAM" if dram >= memory - 10 else "cache"
        line = f"memory {memory:.0f}% of peak (DRAM {dram:.0f}%): {unit}-bandwidth-bound"
    else:
        line = f"SM {compute:.0f}% of peak (memory {memory:.0f}%): compute-bound"
    if roofline is not None and "memory_floor_fraction" in signals:
        floor = max(signals["memory_floor_fraction"], signals["compute_floor_fraction"])
        if floor > 0:
            line += f"; latency {1 / floor:.2f}x the roofline floor"
    return line


def _short_name(kernel_name: str) -> str:
    """`void stencil5<double>(const double *, ...)` -> `stencil5<double>`."""
    return kernel_name.split("(", 1)[0].removeprefix("void ").strip() or kernel_name


def _occupancy_limiter(metrics: dict[str, float]) -> str | None:
    limits = {
        what: metrics[f"launch__occupancy_limit_{what}"]
        for what in ("registers", "shared_mem", "warps", "blocks")
        if f"launch__occupancy_limit_{what}" in metrics
    }
    if not limits:
        return None
    what = min(limits, key=limits.__getitem__)
    if what == "registers" and "launch__registers_per_thread" in metrics:
        return f"registers: {metrics['launch__registers_per_thread']:.0f}/thread"
    return {"shared_mem": "shared memory", "warps": "block size", "blocks": "blocks per SM"}.get(what, what)


def _top_stall(metrics: dict[str, float]) -> tuple[str, float] | None:
    cpi = metrics.get(CPI, 0.0)
    stalls = {reason: metrics[name] for reason, name in STALLS.items() if name in metrics}
    if cpi <= 0 or not stalls:
        return None
    reason = max(stalls, key=stalls.__getitem__)
    return reason, min(1.0, stalls[reason] / cpi)
