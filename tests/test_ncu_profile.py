"""The ncu profile of a CUDA candidate: the command, ncu's raw CSV, and the signals the directions read."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hiera_core.plugins import collect, make_plugin_manager
from hiera_core.records import Roofline
from hiera_directions import control, memory, parallelism, reuse, tensor
from hiera_directions._signals import headroom
from hiera_plugins.ncu import profile as ncu
from hiera_plugins.ncu.profile import KernelMetrics

GPU_SIGNALS = {
    "branch_uniformity",
    "achieved_occupancy",
    "grid_fill",
    "sector_efficiency",
    "dram_reuse",
    "onchip_reuse",
    "pipe_utilization",
    "memory_floor_fraction",
    "compute_floor_fraction",
}

# What `ncu --csv --page raw --print-units base` prints for a runner that launches two kernels inside the
# NVTX range: ncu's own lines and the program's output first, then a header, a row of units and one row per
# kernel, every field quoted, thousands separators inside the quotes, `n/a` where a metric does not apply.
NCU_OUTPUT = """\
==PROF== Connected to process 41872 (/usr/bin/python3.12)
warm-up: 3 calls
"status","ok"
==PROF== Profiling "stencil5" - 0: 0%....50%....100% - 9 passes
==PROF== Profiling "boundary_fix" - 1: 0%....50%....100% - 9 passes
{"latency_ms": 0.07}
==PROF== Disconnected from process 41872
"ID","Process ID","Process Name","Host Name","thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes_read.sum","gpu__time_duration.sum","launch__grid_size","sm__warps_active.avg.pct_of_peak_sustained_active","smsp__sass_average_branch_targets_threads_uniform.pct"
"","","","","","","","","","","","","byte","nsecond","","%","%"
"0","41872","python3.12","127.0.0.1","<default>:cand:none:none:none:none:none:none","void stencil5<double>(const double *, double *, int)","1","7","(256, 1, 1)","(16384, 1, 1)","0","9.0","136,314,880","66,528","16,384","82.41","100"
"1","41872","python3.12","127.0.0.1","<default>:cand:none:none:none:none:none:none","boundary_fix(double *, int)","1","7","(64, 1, 1)","(64, 1, 1)","0","9.0","65,536","3,200","64","8.10","n/a"
"""

# A memory-bound FP64 5-point stencil on a 4096 x 4096 grid, and the small kernel that fixes its boundary:
# (metric, unit, stencil5, boundary_fix), written out as ncu's raw page by `raw_page`.
STENCIL = [
    ("dram__bytes_read.sum", "byte", "136,314,880", "65,536"),
    ("dram__bytes_write.sum", "byte", "134,217,728", "131,072"),
    ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "%", "89.12", "11.40"),
    ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "%", "88.47", "4.02"),
    ("gpu__time_duration.sum", "nsecond", "66,500", "3,200"),
    ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "", "0", "0"),
    ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", "", "0", "0"),
    ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "", "0", "0"),
    ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum", "", "0", "0"),
    ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "request", "2,621,440", "512"),
    ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "sector", "21,495,808", "4,096"),
    ("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", "sector", "4,194,304", "4,096"),
    ("launch__block_size", "", "256", "64"),
    ("launch__grid_size", "", "16,384", "64"),
    ("launch__occupancy_limit_blocks", "block", "32", "32"),
    ("launch__occupancy_limit_registers", "block", "8", "32"),
    ("launch__occupancy_limit_shared_mem", "block", "32", "32"),
    ("launch__occupancy_limit_warps", "block", "8", "32"),
    ("launch__registers_per_thread", "register/thread", "32", "16"),
    ("launch__sm_count", "SM", "132", "132"),
    ("lts__t_sector_hit_rate.pct", "%", "52.30", "n/a"),
    ("sm__maximum_warps_per_active_cycle_pct", "%", "100", "50"),
    ("sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_elapsed", "%", "7.20", "1.10"),
    ("sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed", "%", "3.10", "0.40"),
    ("sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_elapsed", "%", "18.30", "2.00"),
    ("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed", "%", "0", "0"),
    ("sm__pipe_tensor_op_dmma_cycles_active.avg.pct_of_peak_sustained_elapsed", "%", "0", "0"),
    ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", "41.20", "3.50"),
    ("sm__warps_active.avg.pct_of_peak_sustained_active", "%", "82.40", "8.10"),
    ("smsp__average_warp_latency_per_inst_issued.ratio", "", "17.50", "9.00"),
    ("smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio", "", "0", "0"),
    ("smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio", "", "0.40", "0.10"),
    ("smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio", "", "14.20", "6.00"),
    ("smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio", "", "0.20", "0"),
    ("smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio", "", "0.10", "0"),
    ("smsp__issue_active.avg.per_cycle_active", "", "0.21", "0.05"),
    ("smsp__sass_average_branch_targets_threads_uniform.pct", "%", "0", "62.50"),
    ("smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio", "byte/sector", "31.20", "16"),
    ("smsp__sass_average_data_bytes_per_sector_mem_global_op_st.ratio", "byte/sector", "32", "32"),
    ("smsp__sass_branch_targets_threads_divergent.sum", "", "0", "256"),
    ("smsp__thread_inst_executed_pred_on_per_inst_executed.ratio", "", "31.40", "22.50"),
]
STENCIL_TIMES_NS = (66_500, 3_200)
STENCIL_ROOFLINE = Roofline(bytes_moved=2 * 4096**2 * 8, flops=9 * 4096**2, peak_gbps=4300.0, peak_gflops=34000.0)


def raw_page(table, kernel_names) -> str:
    identity = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Block Size", "Grid Size"]
    lines = [[*identity, *(row[0] for row in table)], ["" for _ in identity] + [row[1] for row in table]]
    for i, name in enumerate(kernel_names):
        identity_values = [str(i), "41872", "python3.12", "127.0.0.1", name, "(256, 1, 1)", "(1, 1, 1)"]
        lines.append(identity_values + [row[2 + i] for row in table])
    return "==PROF== Disconnected from process 41872\n" + "".join(
        ",".join(f'"{field}"' for field in line) + "\n" for line in lines
    )


def weighted(stencil5: float, boundary_fix: float) -> float:
    first, second = STENCIL_TIMES_NS
    return (stencil5 * first + boundary_fix * second) / (first + second)


@pytest.fixture
def directions():
    registry = collect(
        make_plugin_manager(autoload=False, extra_plugins=(control, parallelism, memory, reuse, tensor)), "directions"
    )
    return {name: registry.get(name)(None) for name in registry.names()}


# --- the metric list and the command ------------------------------------------------------------------------


def test_metric_list_is_small_unique_and_holds_what_the_signals_read():
    assert 20 <= len(ncu.METRICS) <= 45
    assert len(set(ncu.METRICS)) == len(ncu.METRICS)
    assert not any(set(name) & set("{} ,") for name in ncu.METRICS), "ncu does not expand braces"
    read = {
        "sm__warps_active.avg.pct_of_peak_sustained_active",
        "launch__grid_size",
        "dram__bytes_read.sum",
        "dram__bytes_write.sum",
        ncu.LANES,
        ncu.BRANCH_EFFICIENCY,
        ncu.DIVERGENT_BRANCHES,
        ncu.CPI,
        *ncu.PIPES.values(),
        *ncu.STALLS.values(),
    }
    for op in ("ld", "st"):
        read |= {ncu.GLOBAL_SECTORS.format(op=op), ncu.BYTES_PER_SECTOR.format(op=op)}
    assert read <= set(ncu.METRICS)


def test_ncu_command_profiles_the_nvtx_range_with_clocks_untouched():
    argv = ["/venv/bin/python", "-m", "hiera_plugins.cuda.runner", "0", "--profile"]
    command = ncu.ncu_command(argv, ncu="/usr/local/cuda/bin/ncu", nvtx_range="cand")

    assert command[0] == "/usr/local/cuda/bin/ncu"
    assert command[-len(argv) :] == argv
    options = command[: -len(argv)]
    assert options[options.index("--clock-control") + 1] == "none"
    assert "--nvtx" in options and options[options.index("--nvtx-include") + 1] == "cand/"
    assert options[options.index("--metrics") + 1].split(",") == list(ncu.METRICS)
    assert options[options.index("--page") + 1] == "raw" and "--csv" in options
    assert options[options.index("--target-processes") + 1] == "all"

    without_csv = ncu.ncu_command(argv, ncu="ncu", nvtx_range="cand", output_csv=False)
    assert "--csv" not in without_csv and "--page" not in without_csv
    assert "--launch-count" not in command
    capped = ncu.ncu_command(argv, ncu="ncu", nvtx_range="cand", max_kernels=200)
    assert capped[capped.index("--launch-count") + 1] == "200" and capped[-len(argv) :] == argv


def test_find_ncu_prefers_path_and_says_none_when_there_is_none(monkeypatch):
    monkeypatch.setattr(ncu.shutil, "which", lambda name: "/somewhere/bin/ncu")
    assert ncu.find_ncu() == "/somewhere/bin/ncu"

    monkeypatch.setattr(ncu.shutil, "which", lambda name: None)
    monkeypatch.setattr(ncu.Path, "is_file", lambda self: False)
    monkeypatch.setattr(ncu.glob, "glob", lambda pattern: [])
    assert ncu.find_ncu() is None

    installs = ["/opt/nvidia/nsight-compute/2025.3.1/ncu", "/opt/nvidia/nsight-compute/2024.10.2/ncu"]
    monkeypatch.setattr(ncu.glob, "glob", lambda pattern: installs)
    assert ncu.find_ncu() == "/opt/nvidia/nsight-compute/2025.3.1/ncu"


# --- parsing ------------------------------------------------------------------------------------------------


def test_parse_reads_one_row_per_kernel_and_skips_everything_else():
    kernels = ncu.parse_ncu_csv(NCU_OUTPUT)

    assert [k.kernel_name for k in kernels] == [
        "void stencil5<double>(const double *, double *, int)",
        "boundary_fix(double *, int)",
    ]
    stencil, boundary = kernels
    assert stencil.metrics == {
        "dram__bytes_read.sum": 136_314_880.0,
        "gpu__time_duration.sum": 66_528.0,
        "launch__grid_size": 16_384.0,
        "sm__warps_active.avg.pct_of_peak_sustained_active": 82.41,
        "smsp__sass_average_branch_targets_threads_uniform.pct": 100.0,
    }
    assert "smsp__sass_average_branch_targets_threads_uniform.pct" not in boundary.metrics  # n/a
    assert boundary.metrics["launch__grid_size"] == 64.0


def test_parse_scales_auto_units_to_nanoseconds_and_bytes():
    text = (
        '"ID","Kernel Name","dram__bytes_read.sum","gpu__time_duration.sum","lts__t_sector_hit_rate.pct"\n'
        '"","","Mbyte","usecond","%"\n'
        '"0","k","136.31","66.50","52.3"\n'
    )
    (kernel,) = ncu.parse_ncu_csv(text)
    assert kernel.metrics["dram__bytes_read.sum"] == pytest.approx(136_310_000)
    assert kernel.metrics["gpu__time_duration.sum"] == pytest.approx(66_500)
    assert kernel.metrics["lts__t_sector_hit_rate.pct"] == pytest.approx(52.3)


def test_parse_keeps_the_kernels_figures_and_drops_device_facts_and_unit_extremes():
    """The H200's raw page carries ~200 device__attribute_/nvlink__ columns and the max, min and sum of every
    percentage: a prompt that quoted them all spent a third of its 37 KB on them."""
    names = [
        "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "sm__throughput.max.pct_of_peak_sustained_elapsed",
        "sm__throughput.min.pct_of_peak_sustained_elapsed",
        "sm__throughput.sum.pct_of_peak_sustained_elapsed",
        "gpu__time_duration.sum",
        "gpu__time_duration.max",
        "device__attribute_l2_cache_size",
        "nvlink__count_logical",
        "profiler__replayer_passes",
        "launch__grid_size",
    ]
    header = ",".join(f'"{name}"' for name in names)
    text = f'"ID","Kernel Name",{header}\n' + '"",""' + ',""' * len(names) + '\n"0","k"' + ',"7"' * len(names) + "\n"
    (kernel,) = ncu.parse_ncu_csv(text)
    assert sorted(kernel.metrics) == [
        "gpu__time_duration.sum",
        "launch__grid_size",
        "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    ]


def test_a_table_the_candidate_printed_before_ncus_own_forges_nothing():
    """ncu prints its table after the profiled process ends: a table the program printed (a candidate saying its
    kernel moved no bytes, or adding a kernel) comes before it, and only the last one counts."""
    forged = '"ID","Kernel Name","dram__bytes_read.sum"\n"","","byte"\n"0","forged","0"\n"1","forged","0"\n'
    kernels = ncu.parse_ncu_csv(forged + NCU_OUTPUT)
    assert [k.kernel_name for k in kernels] == [k.kernel_name for k in ncu.parse_ncu_csv(NCU_OUTPUT)]
    assert kernels[0].metrics["dram__bytes_read.sum"] == 136_314_880.0


def test_parse_finds_no_kernels_in_output_without_a_table():
    assert ncu.parse_ncu_csv("") == []
    assert ncu.parse_ncu_csv('==PROF== Connected to process 1\n"a","b"\n==WARNING== No kernels were profiled.\n') == []


# --- summarizing --------------------------------------------------------------------------------------------


def test_memory_bound_stencil_gives_healthy_signals_and_little_headroom(directions):
    kernels = ncu.parse_ncu_csv(raw_page(STENCIL, ["stencil5", "boundary_fix"]))
    profile = ncu.summarize(kernels, latency_ms=0.070, roofline=STENCIL_ROOFLINE)

    assert profile.source == "ncu" and profile.unavailable is None
    assert set(profile.signals) == GPU_SIGNALS
    assert all(0.0 <= value <= 1.0 for value in profile.signals.values())
    signals = profile.signals
    assert signals["achieved_occupancy"] == pytest.approx(weighted(82.40, 8.10) / 100, abs=1e-4)
    assert signals["grid_fill"] == pytest.approx(weighted(1.0, 64 / 132), abs=1e-4)
    # stencil5 has no divergent branches (its 0% branch efficiency means "no branches"): its lanes decide
    assert signals["branch_uniformity"] == pytest.approx(weighted(31.40 / 32, 0.625), abs=1e-4)
    useful = 31.20 * 21_495_808 + 32 * 4_194_304 + 16 * 4_096 + 32 * 4_096
    assert signals["sector_efficiency"] == pytest.approx(useful / (32 * (21_495_808 + 4_194_304 + 2 * 4_096)), abs=1e-4)
    measured = 136_314_880 + 134_217_728 + 65_536 + 131_072
    assert signals["dram_reuse"] == pytest.approx(STENCIL_ROOFLINE.bytes_moved / measured, abs=1e-4)
    assert signals["pipe_utilization"] == pytest.approx(weighted(18.30, 2.00) / 100, abs=1e-4)
    assert signals["memory_floor_fraction"] == pytest.approx(STENCIL_ROOFLINE.memory_floor_ms / 0.070, abs=1e-4)
    assert signals["memory_floor_fraction"] > 0.85

    metrics = profile.metrics
    assert metrics["dram__bytes_read.sum"] == 136_314_880 + 65_536  # counts add up over kernels
    assert metrics["launch__grid_size"] == 16_384  # launch attributes: the longest kernel's
    assert metrics["kernel_count"] == 2
    assert metrics["ncu_duration_ms"] == pytest.approx(0.0697)
    assert metrics["global_load_sectors_per_request"] == pytest.approx((21_495_808 + 4_096) / (2_621_440 + 512))

    assert headroom(profile) < 0.15
    assert max(direction.score(profile)[0] for direction in directions.values()) < 0.15
    assert 3 <= len(profile.findings) <= 6
    assert "DRAM-bandwidth-bound" in profile.findings[0] and "roofline floor" in profile.findings[0]
    assert "boundary_fix launches 64 blocks: 52% of the SMs get no work (5% of the GPU time)" in profile.findings


def test_latency_bound_kernel_points_at_parallelism(directions):
    small_grid = KernelMetrics(
        kernel_name="stencil_naive",
        metrics={
            "gpu__time_duration.sum": 900_000.0,
            "sm__throughput.avg.pct_of_peak_sustained_elapsed": 12.0,
            "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": 18.0,
            "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": 9.0,
            "launch__grid_size": 64.0,
            "launch__sm_count": 132.0,
            "launch__registers_per_thread": 128.0,
            "launch__occupancy_limit_registers": 2.0,
            "launch__occupancy_limit_shared_mem": 32.0,
            "launch__occupancy_limit_warps": 8.0,
            "launch__occupancy_limit_blocks": 32.0,
            "sm__maximum_warps_per_active_cycle_pct": 25.0,
            "sm__warps_active.avg.pct_of_peak_sustained_active": 23.1,
            "smsp__sass_average_branch_targets_threads_uniform.pct": 71.0,
            "smsp__sass_branch_targets_threads_divergent.sum": 1_200.0,
            "smsp__thread_inst_executed_pred_on_per_inst_executed.ratio": 20.1,
            "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": 1_000_000.0,
            "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": 31_250.0,
            "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio": 8.0,
            "dram__bytes_read.sum": 300_000_000.0,
            "dram__bytes_write.sum": 134_217_728.0,
            "sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_elapsed": 4.0,
        },
    )
    profile = ncu.summarize([small_grid], latency_ms=0.9, roofline=STENCIL_ROOFLINE)

    assert profile.signals["grid_fill"] == pytest.approx(64 / 132, abs=1e-4)
    assert profile.signals["sector_efficiency"] == pytest.approx(0.25)
    assert profile.signals["branch_uniformity"] == pytest.approx(20.1 / 32, abs=1e-4)
    scores = {name: direction.score(profile)[0] for name, direction in directions.items()}
    assert scores["P"] > scores["M"] > max(scores["C"], scores["R"])
    assert "latency-bound" in profile.findings[0]
    assert "stencil_naive launches 64 blocks: 52% of the SMs get no work" in profile.findings
    assert any("limited by registers: 128/thread" in line for line in profile.findings)
    assert any("32.0 sectors per load request" in line for line in profile.findings)


def test_the_naive_stencil_on_the_h200_points_at_data_reuse(directions):
    """The naive 7x7 FP64 stencil's real profile (H200, 10240², 2026-11-29): DRAM sees each byte about once,
    but 49 loads per output keep L1/L2 at 91% of peak; R, not the busy ALU pipe's T, must come first."""
    naive = KernelMetrics(
        kernel_name="stencil_step",
        metrics={
            "gpu__time_duration.sum": 1_560_000.0,
            "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": 90.8,
            "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": 22.06,
            "sm__throughput.avg.pct_of_peak_sustained_elapsed": 83.81,
            "sm__warps_active.avg.pct_of_peak_sustained_active": 85.52,
            "smsp__thread_inst_executed_pred_on_per_inst_executed.ratio": 31.31,
            "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": 1_421_463_112.0,
            "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": 160_536_320.0,
            "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": 26_214_400.0,
            "dram__bytes_read.sum": 838_892_800.0,
            "dram__bytes_write.sum": 822_459_136.0,
            "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_elapsed": 52.78,
            "sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_elapsed": 19.74,
            "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed": 13.09,
        },
    )
    roofline = Roofline(bytes_moved=2 * 8 * 10240**2, flops=98 * 10240**2, peak_gbps=4227.0, peak_gflops=30100.0)
    profile = ncu.summarize([naive], latency_ms=1.601, roofline=roofline)
    assert profile.signals["dram_reuse"] > 0.99 and profile.signals["onchip_reuse"] < 0.05
    scores = {name: direction.score(profile)[0] for name, direction in directions.items()}
    assert max(scores, key=scores.__getitem__) == "R", scores
    assert "onchip_reuse=0.04" in directions["R"].score(profile)[1]


def test_a_profile_of_a_call_s_first_kernels_says_so_and_sets_none_of_their_bytes_against_the_whole_call():
    """A level 3 model launches hundreds of kernels; ncu profiles the first `max_kernels`. Their DRAM bytes are a part
    of the call's: against the roofline's whole-call bytes they would read as reuse that is not there."""
    kernels = ncu.parse_ncu_csv(raw_page(STENCIL, ["stencil5", "boundary_fix"]))
    whole = ncu.summarize(kernels, latency_ms=0.070, roofline=STENCIL_ROOFLINE)
    first = ncu.summarize(kernels[:1], latency_ms=0.070, roofline=STENCIL_ROOFLINE, partial=True)

    assert "dram_reuse" in whole.signals and "dram_to_ideal_ratio" in whole.metrics
    assert not set(ncu.WHOLE_CALL) & (set(first.signals) | set(first.metrics))
    assert first.findings[0].startswith("only the call's first 1 kernels were profiled")
    assert first.signals["memory_floor_fraction"] == whole.signals["memory_floor_fraction"]  # from the judge's latency


def test_without_a_roofline_there_are_no_floor_or_reuse_signals():
    kernels = ncu.parse_ncu_csv(raw_page(STENCIL, ["stencil5", "boundary_fix"]))
    profile = ncu.summarize(kernels, latency_ms=0.070, roofline=None)
    assert set(profile.signals) == GPU_SIGNALS - {"dram_reuse", "onchip_reuse", "memory_floor_fraction", "compute_floor_fraction"}
    assert "roofline floor" not in profile.findings[0]


def test_a_kernel_without_global_memory_wastes_no_sectors():
    compute_only = KernelMetrics(
        kernel_name="k",
        metrics={ncu.GLOBAL_SECTORS.format(op="ld"): 0.0, ncu.BYTES_PER_SECTOR.format(op="ld"): 0.0},
    )
    assert ncu.summarize([compute_only], latency_ms=1.0, roofline=None).signals["sector_efficiency"] == 1.0


def test_no_kernels_is_an_unavailable_profile():
    assert ncu.summarize([], latency_ms=1.0, roofline=None).unavailable


# --- ncu failures -------------------------------------------------------------------------------------------


def test_counter_permission_error_is_recognised():
    output = (
        "==PROF== Connected to process 5120 (/usr/bin/python3.12)\n"
        "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters "
        "on the target device 0. For instructions on enabling permissions and to get more information see "
        "https://developer.nvidia.com/ERR_NVGPUCTRPERM\n"
        "==PROF== Disconnected from process 5120\n"
    )
    reason = ncu.permission_problem(output)
    assert reason is not None and "ERR_NVGPUCTRPERM" in reason and "\n" not in reason

    profile = ncu.unavailable_profile(reason)
    assert profile.source == "ncu" and profile.unavailable == reason
    assert profile.signals == {} and profile.metrics == {}


def test_other_fatal_ncu_errors_are_recognised_and_a_clean_run_is_not():
    assert "sm__bogus.sum" in ncu.permission_problem("==ERROR== Failed to find metric sm__bogus.sum\n")
    assert "no kernels" in ncu.permission_problem("==PROF== Disconnected\n==WARNING== No kernels were profiled.\n")
    assert ncu.permission_problem(NCU_OUTPUT) is None


def test_profile_module_imports_without_torch():
    code = "import sys, hiera_plugins.ncu.profile; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
