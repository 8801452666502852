"""The FP64 rates a stencil kernel can draw on, measured: DFMA on the CUDA cores and each FP64 tensor-core
(DMMA) shape of `mma.sync` (m8n8k4 since sm_80; m16n8k4, m16n8k8, m16n8k16 since sm_90).

Each kernel keeps 8 independent accumulators per thread (latency hidden), runs on 8 blocks of 256 threads per
SM, and is timed with CUDA events over repeated calls for about a second while nvidia-smi samples the SM
clock and power. Prints TFLOP/s, FLOP per clock per SM at the median clock, and the share of the sheet's peak
(the sheet's figures assume the boost clock). Writes the rows to --json.

    source .whl/setup-device.sh && python3 research/bench_fp64_pipes.py
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import cupy as cp
import numpy as np
from time_stencil_steps import with_clocks

SOURCE = r"""
#define ACC 8
#define UNROLL 16
extern "C" __global__ void dfma(double* out, int iters) {
    const double b = 0.999999, c = 1e-9 * threadIdx.x;
    double acc[ACC];
#pragma unroll
    for (int i = 0; i < ACC; ++i) acc[i] = i;
    for (int it = 0; it < iters; ++it)
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
#pragma unroll
            for (int i = 0; i < ACC; ++i) acc[i] = fma(acc[i], b, c);
    double s = 0.0;
#pragma unroll
    for (int i = 0; i < ACC; ++i) s += acc[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

// One kernel per shape: NA / NB / NC are the A, B, C/D fragment registers per lane.
#define DMMA_KERNEL(NAME, SHAPE, NA, NB, NC, ARGS)                                                       \
extern "C" __global__ void NAME(double* out, int iters) {                                              \
    double a[NA], b[NB], acc[ACC][NC];                                                                 \
    for (int i = 0; i < NA; ++i) a[i] = 1e-3 * (threadIdx.x + i);                                      \
    for (int i = 0; i < NB; ++i) b[i] = 1e-3 * (threadIdx.x - i);                                      \
    for (int i = 0; i < ACC; ++i) for (int j = 0; j < NC; ++j) acc[i][j] = i + j;                      \
    for (int it = 0; it < iters; ++it)                                                                 \
        _Pragma("unroll") for (int u = 0; u < UNROLL; ++u)                                             \
        _Pragma("unroll") for (int i = 0; i < ACC; ++i)                                                \
            asm volatile("mma.sync.aligned." SHAPE ".row.col.f64.f64.f64.f64 " ARGS ";\n" : DMMA_IO_##NC); \
    double s = 0.0;                                                                                    \
    for (int i = 0; i < ACC; ++i) for (int j = 0; j < NC; ++j) s += acc[i][j];                         \
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;                                                    \
}
#define DMMA_IO_2 "+d"(acc[i][0]), "+d"(acc[i][1]) : "d"(a[0]), "d"(b[0])
#define DMMA_IO_4 "+d"(acc[i][0]), "+d"(acc[i][1]), "+d"(acc[i][2]), "+d"(acc[i][3]) : DMMA_AB
DMMA_KERNEL(m8n8k4, "m8n8k4", 1, 1, 2, "{%0, %1}, {%2}, {%3}, {%0, %1}")
#define DMMA_AB "d"(a[0]), "d"(a[1]), "d"(b[0])
DMMA_KERNEL(m16n8k4, "m16n8k4", 2, 1, 4, "{%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3}")
#undef DMMA_AB
#define DMMA_AB "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1])
DMMA_KERNEL(m16n8k8, "m16n8k8", 4, 2, 4, "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3}")
#undef DMMA_AB
#define DMMA_AB "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]), \
                "d"(b[0]), "d"(b[1]), "d"(b[2]), "d"(b[3])
DMMA_KERNEL(m16n8k16, "m16n8k16", 8, 4, 4,
            "{%0, %1, %2, %3}, {%4, %5, %6, %7, %8, %9, %10, %11}, {%12, %13, %14, %15}, {%0, %1, %2, %3}")
"""

# FLOP of one instruction: per thread for DFMA, per warp for an MMA (2 m n k).
KERNELS = {"dfma": ("CUDA cores", 2, 1), "m8n8k4": ("tensor cores", 2 * 8 * 8 * 4, 32),
           "m16n8k4": ("tensor cores", 2 * 16 * 8 * 4, 32), "m16n8k8": ("tensor cores", 2 * 16 * 8 * 8, 32),
           "m16n8k16": ("tensor cores", 2 * 16 * 8 * 16, 32)}
SHEET_TFLOPS = {"CUDA cores": 33.5, "tensor cores": 66.9}  # H100 SXM / H200 data sheets, FP64


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=1.0, help="timed calls per kernel, about this long")
    parser.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."), "fp64_pipes.json"))
    args = parser.parse_args()
    device = cp.cuda.Device()
    sms = device.attributes["MultiProcessorCount"]
    name = cp.cuda.runtime.getDeviceProperties(device.id)["name"].decode()
    module = cp.RawModule(code=SOURCE, options=("-std=c++17",))
    threads, blocks = 256, 8 * sms
    out = cp.empty(threads * blocks, dtype=cp.float64)
    rows = []
    for kernel_name, (pipe, flop, per) in KERNELS.items():
        kernel = module.get_function(kernel_name)
        iters = 64
        start, stop = cp.cuda.Event(), cp.cuda.Event()

        def call(iters_):
            start.record()
            kernel((blocks,), (threads,), (out, np.int32(iters_)))
            stop.record()
            stop.synchronize()
            return cp.cuda.get_elapsed_time(start, stop)

        while call(iters) < 20.0:  # a call of 20-40 ms
            iters *= 2

        def timed_for_a_while():
            times, t_end = [], time.perf_counter() + args.seconds
            while time.perf_counter() < t_end:
                times.append(call(iters))
            return times

        times, clocks = with_clocks(timed_for_a_while)
        ms = statistics.median(times)
        flops = blocks * threads / per * iters * 16 * 8 * flop
        tflops = flops / ms / 1e9
        row = {"kernel": kernel_name, "pipe": pipe, "tflops": tflops, "ms": ms, "calls": len(times),
               "regs": kernel.num_regs, "sheet_tflops": SHEET_TFLOPS[pipe], "clocks": clocks}
        if "sm_mhz" in clocks:
            row["flop_per_clock_per_sm"] = tflops * 1e12 / (clocks["sm_mhz"][1] * 1e6) / sms
        rows.append(row)
        check = cp.asnumpy(out[:4])
        assert np.isfinite(check).all(), f"{kernel_name}: non-finite result {check}"
    with open(args.json, "w") as f:
        json.dump({"gpu": name, "sms": sms, "rows": rows}, f, indent=1)
    print(f"{name}, {sms} SMs; 8 independent accumulators per thread, {blocks} blocks of {threads} threads")
    print(f"{'kernel':>9} {'pipe':>12} {'TFLOP/s':>8} {'of sheet':>8} {'FLOP/clk/SM':>11} {'SM MHz (min/med/max)':>21} {'W (med)':>7} regs")
    for row in rows:
        clk = row["clocks"]
        mhz = "/".join(f"{v:.0f}" for v in clk["sm_mhz"]) if "sm_mhz" in clk else clk["error"][:21]
        watts = f"{clk['power_w'][1]:.0f}" if "power_w" in clk else "-"
        print(f"{row['kernel']:>9} {row['pipe']:>12} {row['tflops']:8.2f} {row['tflops'] / row['sheet_tflops']:8.0%} "
              f"{row.get('flop_per_clock_per_sm', float('nan')):11.0f} {mhz:>21} {watts:>7} {row['regs']}")


if __name__ == "__main__":
    main()
