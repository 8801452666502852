"""The explorer's FP64 tensor-core kernels (`research/explore_stencil_kernels.py --dmma`, `--dmma16`, `--dmma16x2`), emulated
on the CPU: each CUDA source compiled as C++ with one std::thread per CUDA thread, a barrier for __syncthreads,
the warp's mma.m8n8k4 or mma.m16n8k8 done by its 32 lanes together in the PTX fragment layout, cp.async as an
immediate copy or deferred to the wait that must complete it, under AddressSanitizer; every output compared
with the stencil's definition. On the H200 the m8n8k4 kernel is correct and slower than the ring
(docs/stencil2d-h200.md); the m16n8k8 ones (one step, and two steps per launch) have not run on a GPU yet,
so this emulation is their only check."""

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
#include <cstdlib>
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
const double* g_in;
struct Warp { double a[32][4], b[32][2]; std::unique_ptr<std::barrier<>> bar = std::make_unique<std::barrier<>>(32); };
Warp* g_warps;
// mma.m8n8k4 .f64, lane = 4 g + q: A[g][q] = a, B[q][g] = b, D[g][2q + i] = d_i.
static inline void dmma(double& d0, double& d1, double a, double b) {
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    Warp& w = g_warps[threadIdx.x >> 5];
    w.a[lane][0] = a, w.b[lane][0] = b;
    w.bar->arrive_and_wait();
    double r0 = d0, r1 = d1;
    for (int k = 0; k < 4; ++k) r0 += w.a[4 * g + k][0] * w.b[8 * q + k][0], r1 += w.a[4 * g + k][0] * w.b[8 * q + 4 + k][0];
    w.bar->arrive_and_wait();
    d0 = r0, d1 = r1;
}
// mma.m16n8k8 .f64 (sm_90), D = A B + C, as the PTX ISA lays out its fragments (section 9.7.14.5.7, "Matrix
// Fragments for mma.m16n8k8", the .f64 tables; groupID g = lane >> 2, threadID_in_group q = lane % 4):
// A (16 x 8): a0 at (g, q), a1 at (g + 8, q), a2 at (g, q + 4), a3 at (g + 8, q + 4);
// B (8 x 8): b0 at (q, g), b1 at (q + 4, g);
// C and D (16 x 8): c0 at (g, 2q), c1 at (g, 2q + 1), c2 at (g + 8, 2q), c3 at (g + 8, 2q + 1).
// The 32 lanes' fragments are assembled into whole matrices, so a lane whose fragment the kernel fills wrongly
// changes other lanes' results, as on the GPU.
static inline void dmma16(double (&d)[4], const double (&a)[4], double b0, double b1) {
    const int lane = threadIdx.x & 31;
    Warp& w = g_warps[threadIdx.x >> 5];
    for (int i = 0; i < 4; ++i) w.a[lane][i] = a[i];
    w.b[lane][0] = b0, w.b[lane][1] = b1;
    w.bar->arrive_and_wait();
    double A[16][8], B[8][8];
    for (int l = 0; l < 32; ++l) {
        const int g = l >> 2, q = l & 3;
        A[g][q] = w.a[l][0], A[g + 8][q] = w.a[l][1], A[g][q + 4] = w.a[l][2], A[g + 8][q + 4] = w.a[l][3];
        B[q][g] = w.b[l][0], B[q + 4][g] = w.b[l][1];
    }
    w.bar->arrive_and_wait();
    const int g = lane >> 2, q = lane & 3;
    for (int i = 0; i < 4; ++i) {
        const int row = g + 8 * (i >> 1), col = 2 * q + (i & 1);
        for (int k = 0; k < 8; ++k) d[i] += A[row][k] * B[k][col];
    }
}
// A copy must be aligned to its size at both ends, as cp.async requires: in shared memory relative to the ring, in
// global memory relative to the grid (cudaMalloc's allocations are 256-byte aligned).
static inline void check_alignment(const double* smem, const double* gmem, int size, int bytes) {
    if ((smem - g_shared) % (size / 8) || (bytes && (gmem - g_in) % (size / 8))) {
        std::fprintf(stderr, "misaligned %d-byte copy: shared +%td, global +%td doubles\n", size, smem - g_shared, gmem - g_in);
        std::abort();
    }
}
// cp.async copies at once, or with g_defer in the wait that must complete it, the latest the GPU may: a
// wait_group count that lets a row in use still be in flight then reads it uncopied (NaN).
struct Copy { double* smem; const double* gmem; int size, bytes; };
thread_local std::vector<std::vector<Copy>> t_groups(1);  // the committed groups, then the open one
bool g_defer;
static inline void perform(const Copy& c) {
    std::memset(c.smem, 0, c.size);
    if (c.bytes) std::memcpy(c.smem, c.gmem, c.bytes);
}
static inline void cp_async(double* smem, const double* gmem, int size, int bytes) {
    check_alignment(smem, gmem, size, bytes);
    if (g_defer) t_groups.back().push_back({smem, gmem, size, bytes});
    else perform({smem, gmem, size, bytes});
}
static inline void cp_async16(double* smem, const double* gmem, int bytes) { cp_async(smem, gmem, 16, bytes); }
static inline void cp_async8(double* smem, const double* gmem, int bytes) { cp_async(smem, gmem, 8, bytes); }
static inline void cp_async_commit() { t_groups.emplace_back(); }
static inline void cp_async_wait(size_t pending) {  // all committed groups but the newest `pending` complete
    for (; t_groups.size() - 1 > pending; t_groups.erase(t_groups.begin()))
        for (const Copy& c : t_groups.front()) perform(c);
}
"""

MAIN = r"""
#ifndef SMEM_DOUBLES  // the kernel's dynamic shared memory: one ring of SC chunks of 4 rows, unless it says
#define SMEM_DOUBLES (SC * 4 * WS)
#endif
int main(int argc, char** argv) {
    int n = std::atoi(argv[1]);
    g_defer = argc > 4;
    std::vector<double> in((size_t)n * n), out((size_t)n * n, NAN), shared(SMEM_DOUBLES);
    FILE* f = std::fopen(argv[2], "rb");
    if (std::fread(in.data(), 8, in.size(), f) != in.size() || std::fread(c_w, 8, K * K, f) != K * K) return 2;
    std::fclose(f);
    g_shared = shared.data(), g_in = in.data();
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


LAYOUT_MAIN = r"""
int main(int, char** argv) {
    std::vector<double> lanes(32 * 10);  // per lane a0..a3, b0, b1, c0..c3; d0..d3 come back in place of c
    FILE* f = std::fopen(argv[1], "rb");
    if (std::fread(lanes.data(), 8, lanes.size(), f) != lanes.size()) return 2;
    std::fclose(f);
    std::vector<Warp> warps(1);
    g_warps = warps.data();
    std::vector<std::thread> threads;
    for (int t = 0; t < 32; ++t)
        threads.emplace_back([&, t] {
            threadIdx = {t, 0, 0};
            double* x = &lanes[10 * t];
            double a[4] = {x[0], x[1], x[2], x[3]}, d[4] = {x[6], x[7], x[8], x[9]};
            dmma16(d, a, x[4], x[5]);
            for (int i = 0; i < 4; ++i) x[6 + i] = d[i];
        });
    for (auto& t : threads) t.join();
    f = std::fopen(argv[2], "wb");
    std::fwrite(lanes.data(), 8, lanes.size(), f);
    std::fclose(f);
}
"""


def emulation(name: str, params: dict) -> str:
    """The kernel source `name` of the explorer with `params`, as C++ for the runtime, every copy checked to be
    aligned to its size (at odd n every other row of the grid starts 8 bytes off a 16-byte boundary)."""
    spec = importlib.util.spec_from_file_location("explore_stencil_kernels", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    source = getattr(module, name).format(**params)
    for helper in ("dmma", "dmma16", "cp_async16", "cp_async8"):  # the runtime's versions replace the inline PTX
        source = re.sub(rf"__device__ __forceinline__ void {helper}\(.*?\n}}\n", "", source, flags=re.S)
    source = source.replace('asm volatile("cp.async.commit_group;\\n" ::);', "cp_async_commit();")
    source = re.sub(r'asm volatile\("cp\.async\.wait_group %0;\\n" ::"n"\((.*?)\)\);', r"cp_async_wait(\1);", source)
    source = source.replace('extern "C" ', "").replace("__constant__ ", "")
    source = source.replace("extern __shared__ __align__(16) double ring[];", "double* ring = g_shared;")
    assert "asm" not in source and "__shared__" not in source
    return RUNTIME + source + MAIN


def build(source: str, tmp_path: Path) -> None:
    (tmp_path / "k.cpp").write_text(source)
    build = subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", "-fsanitize=address", "-w", "k.cpp", "-o", "k"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]


def check_stencil(source: str, radius: int, tmp_path: Path, steps: int = 1) -> None:
    """Build the emulation and compare every output with the stencil's definition (`steps` steps) on small
    grids."""
    build(source, tmp_path)
    rng = np.random.default_rng(radius)
    k = 2 * radius + 1
    for n, copies in ((37, []), (22, []), (37, ["deferred"])):  # odd n: a 16-byte copy straddles the last column
        field, weights = rng.random((n, n)) * 2 - 1, rng.random((k, k)) + 0.5
        weights /= weights.sum()
        (tmp_path / "in.bin").write_bytes(field.tobytes() + weights.tobytes())
        command = ["./k", str(n), "in.bin", "out.bin", *copies]
        run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        got = np.fromfile(tmp_path / "out.bin").reshape(n, n)
        error = np.abs(got - reference(field, weights, steps)).max()
        assert error < (1e-14 if steps == 1 else 1e-13), (n, copies, error)  # NaN (never written) fails too


@pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler")
@pytest.mark.parametrize("params", [
    {"R": 3, "NW": 2, "TX": 2, "H": 16, "SC": 3, "PADW": 1},  # four 4-row chunks per 8-row tile
    {"R": 1, "NW": 1, "TX": 2, "H": 24, "SC": 4, "PADW": 0},  # three
    {"R": 4, "NW": 2, "TX": 1, "H": 8, "SC": 5, "PADW": 1},  # four, every input row of the chunks used
], ids=lambda p: f"radius{p['R']}")
def test_the_fp64_tensor_core_kernel_computes_the_stencil_emulated_on_the_cpu(params, tmp_path):
    check_stencil(emulation("DMMA_SOURCE", {**params, "MINB": 1}), params["R"], tmp_path)


@pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler")
def test_the_emulated_m16n8k8_follows_the_ptx_fragment_layout(tmp_path):
    """The runtime's dmma16 against D = A B + C, its fragments placed by the PTX ISA's .f64 tables for
    mma.m16n8k8 (section 9.7.14.5.7) written out again here: a typo in either placement fails."""
    build(RUNTIME + LAYOUT_MAIN, tmp_path)
    rng = np.random.default_rng(0)
    a, b, c = rng.random((16, 8)), rng.random((8, 8)), rng.random((16, 8))
    lane = np.arange(32)
    g, q = lane >> 2, lane & 3
    a_at = [(g, q), (g + 8, q), (g, q + 4), (g + 8, q + 4)]
    b_at = [(q, g), (q + 4, g)]
    c_at = [(g, 2 * q), (g, 2 * q + 1), (g + 8, 2 * q), (g + 8, 2 * q + 1)]
    lanes = np.stack([a[at] for at in a_at] + [b[at] for at in b_at] + [c[at] for at in c_at], axis=1)
    (tmp_path / "in.bin").write_bytes(lanes.tobytes())
    run = subprocess.run(["./k", "in.bin", "out.bin"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    got = np.fromfile(tmp_path / "out.bin").reshape(32, 10)[:, 6:]
    d = a @ b + c
    assert np.abs(got - np.stack([d[at] for at in c_at], axis=1)).max() < 1e-14


@pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler")
@pytest.mark.parametrize("params", [
    {"R": 3, "NW": 1, "PX": 1, "H": 16, "SC": 4},  # 6 chunks through 4 slots; two column tiles at n = 37
    {"R": 3, "NW": 2, "PX": 2, "H": 20, "SC": 5},  # two groups of eight patches per warp, 7 chunks through 5 slots
    {"R": 1, "NW": 2, "PX": 1, "H": 16, "SC": 3},  # 36 window positions in 5 steps, the ring one deeper than read
    {"R": 4, "NW": 1, "PX": 2, "H": 12, "SC": 4},  # 144 positions in 18 steps, no tail steps
], ids=lambda p: f"radius{p['R']}-{p['NW']}warps-{8 * p['PX']}patches-per-warp")
def test_the_full_rate_fp64_tensor_core_kernel_computes_the_stencil_emulated_on_the_cpu(params, tmp_path):
    check_stencil(emulation("DMMA16_SOURCE", {**params, "MINB": 1}), params["R"], tmp_path)


@pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler")
@pytest.mark.parametrize("params", [
    {"R": 3, "NW": 1, "G": 1, "H": 16, "SC": 4},  # 3 units on one warp; at n = 37 two column tiles, three strips
    {"R": 3, "NW": 3, "G": 4, "H": 12, "SC": 5},  # 9 units on 3 warps (balanced), two input chunks in flight
    {"R": 3, "NW": 2, "G": 1, "H": 8, "SC": 4},  # 3 units on 2 warps: one warp idles a unit
    {"R": 1, "NW": 2, "G": 1, "H": 16, "SC": 3},  # 2 chunks per window, the input ring one deeper than read
    {"R": 1, "NW": 3, "G": 2, "H": 20, "SC": 4},  # 5 units on 3 warps: step-1 and step-2 units on one warp
    {"R": 4, "NW": 3, "G": 1, "H": 12, "SC": 5},  # 18 k-steps, no tail steps; a halo of CH = R columns
    {"R": 4, "NW": 1, "G": 2, "H": 8, "SC": 6},  # 5 units on one warp, three input chunks in flight
], ids=lambda p: f"radius{p['R']}-{p['NW']}warps-{8 * p['G']}patches-H{p['H']}-S{p['SC']}")
def test_the_two_step_fp64_tensor_core_kernel_computes_two_steps_emulated_on_the_cpu(params, tmp_path):
    """DMMA16X2_SOURCE (`--dmma16x2`): step 1 on the tile's columns plus a halo group of eight patches, zero
    outside the grid, through a second ring into step 2; against the definition applied twice."""
    check_stencil(emulation("DMMA16X2_SOURCE", {**params, "MINB": 1}), params["R"], tmp_path, steps=2)
