"""The explorer's FP64 tensor-core kernel (`research/explore_stencil_kernels.py --dmma`), emulated on the CPU:
its CUDA source compiled as C++ with one std::thread per CUDA thread, a barrier for __syncthreads, the warp's
mma.m8n8k4 done by its 32 lanes together in the PTX fragment layout, cp.async as an immediate copy, under
AddressSanitizer; every output compared with the stencil's definition. On the H200 it is correct and slower
than the ring (docs/stencil2d-h200.md)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from hiera_workloads.stencil2d.reference import reference

SCRIPT = Path(__file__).parent.parent / "explore_stencil_kernels.py"

RUNTIME = r"""
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>
struct Index { int x, y, z; };
thread_local Index threadIdx, blockIdx;
struct double2 { double x, y; };
static inline double2 make_double2(double a, double b) { return {a, b}; }
#define __syncthreads() g_block->arrive_and_wait()
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __launch_bounds__(a, b)
std::barrier<>* g_block;
double* g_shared;
struct Warp { double a[32], b[32]; std::unique_ptr<std::barrier<>> bar = std::make_unique<std::barrier<>>(32); };
Warp* g_warps;
// mma.m8n8k4 .f64, lane = 4 g + q: A[g][q] = a, B[q][g] = b, D[g][2q + i] = d_i.
static inline void dmma(double& d0, double& d1, double a, double b) {
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    Warp& w = g_warps[threadIdx.x >> 5];
    w.a[lane] = a, w.b[lane] = b;
    w.bar->arrive_and_wait();
    double r0 = d0, r1 = d1;
    for (int k = 0; k < 4; ++k) r0 += w.a[4 * g + k] * w.b[8 * q + k], r1 += w.a[4 * g + k] * w.b[8 * q + 4 + k];
    w.bar->arrive_and_wait();
    d0 = r0, d1 = r1;
}
static inline void cp_async16(double* smem, const double* gmem, int bytes) {
    std::memset(smem, 0, 16);
    if (bytes) std::memcpy(smem, gmem, bytes);
}
"""

MAIN = r"""
int main(int, char** argv) {
    int n = std::atoi(argv[1]);
    std::vector<double> in((size_t)n * n), out((size_t)n * n, NAN), shared(SC * 4 * WS);
    FILE* f = std::fopen(argv[2], "rb");
    if (std::fread(in.data(), 8, in.size(), f) != in.size() || std::fread(c_w, 8, K * K, f) != K * K) return 2;
    std::fclose(f);
    g_shared = shared.data();
    for (int by = 0; by < (n + H - 1) / H; ++by)
        for (int bx = 0; bx < (n + WT - 1) / WT; ++bx) {
            for (double& v : shared) v = NAN;  // a read of a row never copied shows
            std::barrier<> block(32 * NW);
            std::vector<Warp> warps(NW);
            g_block = &block, g_warps = warps.data();
            std::vector<std::thread> threads;
            for (int t = 0; t < 32 * NW; ++t)
                threads.emplace_back([&, t] { threadIdx = {t, 0, 0}, blockIdx = {bx, by, 0}; stencil(in.data(), out.data(), n); });
            for (auto& t : threads) t.join();
        }
    f = std::fopen(argv[3], "wb");
    std::fwrite(out.data(), 8, out.size(), f);
    std::fclose(f);
}
"""


def emulation(params: dict) -> str:
    spec = importlib.util.spec_from_file_location("explore_stencil_kernels", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    source = module.DMMA_SOURCE.format(**params)
    for helper in ("dmma", "cp_async16"):  # the runtime's versions replace the inline PTX
        source = re.sub(rf"__device__ __forceinline__ void {helper}\(.*?\n}}\n", "", source, flags=re.S)
    source = source.replace('asm volatile("cp.async.commit_group;\\n" ::);', ";")
    source = source.replace('asm volatile("cp.async.wait_group %0;\\n" ::"n"(SC - 2));', ";")
    source = source.replace('extern "C" ', "").replace("__constant__ ", "")
    source = source.replace("extern __shared__ __align__(16) double ring[];", "double* ring = g_shared;")
    assert "asm" not in source and "__shared__" not in source
    return RUNTIME + source + MAIN


@pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler")
@pytest.mark.parametrize("params", [
    {"R": 3, "NW": 2, "TX": 2, "H": 16, "SC": 3, "PADW": 1},  # four 4-row chunks per 8-row tile
    {"R": 1, "NW": 1, "TX": 2, "H": 24, "SC": 4, "PADW": 0},  # three
    {"R": 4, "NW": 2, "TX": 1, "H": 8, "SC": 5, "PADW": 1},  # four, every input row of the chunks used
], ids=lambda p: f"radius{p['R']}")
def test_the_fp64_tensor_core_kernel_computes_the_stencil_emulated_on_the_cpu(params, tmp_path):
    (tmp_path / "k.cpp").write_text(emulation({**params, "MINB": 1}))
    build = subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", "-fsanitize=address", "-w", "k.cpp", "-o", "k"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    rng = np.random.default_rng(params["R"])
    k = 2 * params["R"] + 1
    for n in (37, 22):  # odd: a 16-byte copy straddles the last column; not a multiple of any tile
        field, weights = rng.random((n, n)) * 2 - 1, rng.random((k, k)) + 0.5
        weights /= weights.sum()
        (tmp_path / "in.bin").write_bytes(field.tobytes() + weights.tobytes())
        run = subprocess.run(["./k", str(n), "in.bin", "out.bin"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        got = np.fromfile(tmp_path / "out.bin").reshape(n, n)
        assert np.abs(got - reference(field, weights, 1)).max() < 1e-14, n  # NaN (an output never written) fails too
