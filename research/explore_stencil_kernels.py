"""Explore register-streaming stencil kernels on a GPU with CuPy (NVRTC builds each variant in about a second).

Seven families. `ldg`: each thread streams down its W columns, loading every input row from global memory
through L1. `ring`: the same with rows copied ahead into an S-stage shared-memory ring by cp.async (the
kernel behind the stencil2d template's tiling=ring), RB input rows per barrier, weights from constant memory
or as shared-memory broadcasts (WSMEM); with --persist also as a persistent grid (PERSIST) and with other
strip heights, with --wide with wider tiles, deeper rings and streaming stores (sweeps 8 and 9). `fused2`
(with --fused or --only-fused): two steps in one pass (temporal blocking; the intermediate grid is zero
outside the n x n grid, as between two launches).
`gather` (with --gather, beside the template's ring): each lane owns W adjacent outputs and gathers them from
the input rows it needs in a warp-private ring (FastStencil's layout; sweep 6, slower than the ring).
`dmma` (with --dmma, beside the template's ring): FP64 tensor cores, 8 x 8 output tiles as banded-matrix
products (mma.m8n8k4), streamed through a shared-memory ring of 4-row chunks (sweep 7, 0.82 ms against the
ring's 0.50: m8n8k4 runs at half the tensor-core rate on the H200, see research/bench_fp64_pipes.py).
`dmma16` (with --dmma16, beside the template's ring): FP64 tensor cores at the full sm_90 rate (mma.m16n8k8),
4 x 4 output patches, K a patch's (4 + 2R)^2 input window padded to a multiple of 8 (2.12 times the stencil's
FLOPs at R = 3), eight patches side by side per instruction, B gathered from a ring of 4-row chunks; checked
only by a CPU emulation of its source (research/tests/test_stencil_explorer.py), not yet run on a GPU.
`dmma16x2` (with --dmma16x2, beside fused2's best and the template's ring): two steps per launch, both on
m16n8k8 DMMA with dmma16's lowering; step 1 over the tile's columns plus one more group of eight patches (the
halo, zero outside the grid) into a second shared-memory ring of 4-row chunks, which step 2 reads as step 1
reads the input ring (2.30-2.65 times the 2 x 49 taps' FLOPs per output at R = 3 in its variants, halo
included); likewise checked only by the CPU emulation, not yet run on a GPU.
Each variant is checked against a CuPy shifted-add FP64 reference (applied twice for fused2 and dmma16x2) at n
and at n = 1002, then timed (median of CUDA-event times over back-to-back launches). Prints the measured copy
floor and one line per variant, fastest per step first; writes every row to --json.
Usage: python research/explore_stencil_kernels.py [--n 10240] [--radius 3] [--quick | --variant I] [--fused | --only-fused | --gather | --dmma | --dmma16 | --dmma16x2 | --persist | --wide]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import time

import numpy as np

from hiera_workloads.stencil2d.reference import reference as stencil_reference

try:
    import cupy as cp
except ImportError:  # the kernel sources are importable without it (research/tests/test_stencil_explorer.py)
    cp = None

SOURCE = r"""
#define R {R}
#define K (2 * R + 1)
#define W {W}
#define BX {BX}
#define H {H}
#define YFAST {YFAST}
#define PREFETCH {PF}
#define MINB {MINB}
#define HX (R + (R & 1))
#define NV (W + 2 * HX)
#define NP (NV / 2)

__constant__ double c_w[K * K];

__device__ __forceinline__ void load_row(const double* __restrict__ in, int n, int i, int x0, double (&v)[NV]) {{
    const bool row_ok = i >= 0 && i < n;
    const double* row = in + (size_t)(row_ok ? i : 0) * n;
#pragma unroll
    for (int p = 0; p < NP; ++p) {{
        const int c = x0 - HX + 2 * p;
        double2 t = make_double2(0.0, 0.0);
        if (row_ok && c >= 0 && c < n) t = __ldg(reinterpret_cast<const double2*>(row + c));
        v[2 * p] = t.x;
        v[2 * p + 1] = t.y;
    }}
}}

extern "C" __global__ void __launch_bounds__(BX, MINB) stencil(const double* __restrict__ in, double* __restrict__ out, int n) {{
    const int bxi = YFAST ? blockIdx.y : blockIdx.x;
    const int byi = YFAST ? blockIdx.x : blockIdx.y;
    const int x0 = (bxi * BX + threadIdx.x) * W;
    const int y0 = byi * H;
    if (x0 >= n) return;
    double acc[K][W];
#pragma unroll
    for (int s = 0; s < K; ++s)
#pragma unroll
        for (int w = 0; w < W; ++w) acc[s][w] = 0.0;
    double v[NV];
#if PREFETCH
    double nv[NV];
    load_row(in, n, y0 - R, x0, nv);
#endif
    for (int ib = 0; ib < H + 2 * R; ib += K) {{
#pragma unroll
        for (int u = 0; u < K; ++u) {{
            if (ib + u < H + 2 * R) {{
                const int i = y0 - R + ib + u;
#if PREFETCH
#pragma unroll
                for (int j = 0; j < NV; ++j) v[j] = nv[j];
                if (ib + u + 1 < H + 2 * R) load_row(in, n, i + 1, x0, nv);
#else
                load_row(in, n, i, x0, v);
#endif
#pragma unroll
                for (int a = 0; a < K; ++a) {{
                    const int s = (u - a + K) % K;
#pragma unroll
                    for (int b = 0; b < K; ++b)
#pragma unroll
                        for (int w = 0; w < W; ++w) acc[s][w] = fma(c_w[a * K + b], v[w + b - R + HX], acc[s][w]);
                }}
                const int o = i - R, s = (u + 1) % K;
                if (o >= y0 && o < n) {{
                    double* dst = out + (size_t)o * n + x0;
                    if (x0 + W <= n) {{
#pragma unroll
                        for (int w = 0; w < W; w += 2) *reinterpret_cast<double2*>(dst + w) = make_double2(acc[s][w], acc[s][w + 1]);
                    }} else {{
#pragma unroll
                        for (int w = 0; w < W; ++w) if (x0 + w < n) dst[w] = acc[s][w];
                    }}
                }}
#pragma unroll
                for (int w = 0; w < W; ++w) acc[s][w] = 0.0;
            }}
        }}
    }}
}}
"""

RING_SOURCE = r"""
#define R {R}
#define K (2 * R + 1)
#define W {W}
#define BX {BX}
#define H {H}
#define S {S}
#define WREG {WREG}
#define MINB {MINB}
#define L2HINT {L2HINT}
#define STCS {STCS}
#define RB {RB}
#define WSMEM {WSMEM}
#define PERSIST {PERSIST}
#define KW (K + RB - 1)
#define UG {UG}
#define HX (R + (R & 1))
#define NV (W + 2 * HX)
#define SEG (BX * W + 2 * HX)
#define SEGP (SEG / 2)
#define LOADS ((SEGP + BX - 1) / BX)

__constant__ double c_w[K * K];

__device__ __forceinline__ void cp_async16(double* smem, const double* gmem) {{
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
#if L2HINT
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
#endif
}}

// Row j of the strip (input row y0 - R + j) into stage j % S, zero outside the grid; one commit group.
// Pair p of the segment (columns xb - HX + 2p, +1) is thread p % BX's, its k = p / BX-th load.
template <bool INTERIOR>
__device__ __forceinline__ void issue(const double* __restrict__ in, double* ring, int n, int xb, int y0, int h, int j) {{
    const int i = y0 - R + j;
    double* dst = ring + (j % S) * SEG;
    const bool row_ok = i >= 0 && i < n && j < h + 2 * R;
    const double* row = in + (size_t)(row_ok ? i : 0) * n + xb - HX;
#pragma unroll
    for (int k = 0; k < LOADS; ++k) {{
        const int p = threadIdx.x + k * BX;
        if (k * BX + BX <= SEGP || p < SEGP) {{
            const int c = xb - HX + 2 * p;
            if (row_ok && (INTERIOR || (c >= 0 && c < n)))
                cp_async16(dst + 2 * p, row + 2 * p);
            else
                *reinterpret_cast<double2*>(dst + 2 * p) = make_double2(0.0, 0.0);
        }}
    }}
    asm volatile("cp.async.commit_group;\n" ::);
}}

template <bool INTERIOR>
__device__ __forceinline__ void strip(const double* __restrict__ in, double* __restrict__ out, double* ring, int n, int xb, int y0, int h) {{
    const int x0 = xb + threadIdx.x * W;
#if PERSIST
    __syncthreads();  // the previous strip's last rows are read before this one's first copies land
#endif
#if WSMEM
    // The weights in shared memory, rows padded to 8: each row of weights comes back as four 16-byte
    // broadcast loads per input row (volatile: not hoisted into registers), instead of 49 uniform loads.
    __shared__ __align__(16) double sw[K * 8];
    for (int q = threadIdx.x; q < K * 8; q += BX) sw[q] = q % 8 < K ? c_w[q / 8 * K + q % 8] : 0.0;
    __syncthreads();
    const unsigned swa = static_cast<unsigned>(__cvta_generic_to_shared(sw));
#endif
#if WREG
    // The weights in ordinary registers: opaque shared-memory loads keep the compiler from moving them
    // into uniform registers (every DFMA operand would then go through R2UR / ULDC).
    __shared__ double sw[K * K];
    if (threadIdx.x < K * K) sw[threadIdx.x] = c_w[threadIdx.x];
    __syncthreads();
    double wr[K * K];
#pragma unroll
    for (int q = 0; q < K * K; ++q)
        asm volatile("ld.shared.f64 %0, [%1];" : "=d"(wr[q]) : "r"(static_cast<unsigned>(__cvta_generic_to_shared(sw + q))));
#define WEIGHT(q) wr[q]
#else
#define WEIGHT(q) c_w[q]
#endif
    double acc[KW][W];
#pragma unroll
    for (int s = 0; s < KW; ++s)
#pragma unroll
        for (int w = 0; w < W; ++w) acc[s][w] = 0.0;
#pragma unroll
    for (int j = 0; j < S - RB; ++j) issue<INTERIOR>(in, ring, n, xb, y0, h, j);
    // Rows go RB at a time; output row o lives in accumulator slot o % KW, a compile-time constant
    // because the loop below is unrolled over UG groups (UG * RB rows, a multiple of KW).
    for (int ib = 0; ib < h + 2 * R; ib += UG * RB) {{
#pragma unroll
        for (int u = 0; u < UG; ++u) {{
            const int j0 = ib + u * RB;
            if ((!PERSIST && (H + 2 * R) % (UG * RB) == 0) || j0 < h + 2 * R) {{
                asm volatile("cp.async.wait_group %0;\n" ::"n"(S - 2 * RB));
                __syncthreads();
#pragma unroll
                for (int t = 0; t < RB; ++t) issue<INTERIOR>(in, ring, n, xb, y0, h, j0 + S - RB + t);
                double v[RB][NV];
#pragma unroll
                for (int t = 0; t < RB; ++t) {{
                    const double* src = ring + ((j0 + t) % S) * SEG + threadIdx.x * W;
#pragma unroll
                    for (int q = 0; q < NV; q += 2) {{
                        const double2 x = *reinterpret_cast<const double2*>(src + q);
                        v[t][q] = x.x;
                        v[t][q + 1] = x.y;
                    }}
                }}
#pragma unroll
                for (int a = 0; a < K; ++a) {{
#if WSMEM
                    double wrow[8];
#pragma unroll
                    for (int p = 0; p < 8; p += 2)
                        asm volatile("ld.shared.v2.f64 {{%0, %1}}, [%2];" : "=d"(wrow[p]), "=d"(wrow[p + 1]) : "r"(swa + 8 * (a * 8 + p)));
#endif
#pragma unroll
                    for (int b = 0; b < K; ++b) {{
#if WSMEM
                        const double wt = wrow[b];
#else
                        const double wt = WEIGHT(a * K + b);
#endif
#pragma unroll
                        for (int t = 0; t < RB; ++t) {{
                            const int s = ((u * RB + t - a) % KW + KW) % KW;
#pragma unroll
                            for (int w = 0; w < W; ++w) acc[s][w] = fma(wt, v[t][w + b - R + HX], acc[s][w]);
                        }}
                    }}
                }}
#pragma unroll
                for (int t = 0; t < RB; ++t) {{
                    const int j = j0 + t, o = y0 + j - 2 * R, s = ((u * RB + t - 2 * R) % KW + KW) % KW;
                    if (j < h + 2 * R && o >= y0 && o < n && (INTERIOR || x0 < n)) {{
                        double* dst = out + (size_t)o * n + x0;
                        if (INTERIOR || x0 + W <= n) {{
#pragma unroll
                            for (int w = 0; w < W; w += 2) {{
#if STCS
                                __stcs(reinterpret_cast<double2*>(dst + w), make_double2(acc[s][w], acc[s][w + 1]));
#else
                                *reinterpret_cast<double2*>(dst + w) = make_double2(acc[s][w], acc[s][w + 1]);
#endif
                            }}
                        }} else {{
#pragma unroll
                            for (int w = 0; w < W; ++w) if (x0 + w < n) dst[w] = acc[s][w];
                        }}
                    }}
#pragma unroll
                    for (int w = 0; w < W; ++w) acc[s][w] = 0.0;
                }}
            }}
        }}
    }}
}}

extern "C" __global__ void __launch_bounds__(BX, MINB) stencil(const double* __restrict__ in, double* __restrict__ out, int n) {{
    extern __shared__ __align__(16) double ring[];
#if PERSIST
    // As many blocks as fit at once; the column tiles' rows, laid end to end, split evenly among them (no
    // last partial wave). A block's share is one or more strips (a new one where it crosses a column tile).
    const long long tiles = (n + BX * W - 1) / (BX * W), total = tiles * n;
    for (long long f = total * blockIdx.x / gridDim.x, end = total * (blockIdx.x + 1) / gridDim.x; f < end;) {{
        const int xb = static_cast<int>(f / n) * BX * W, y0 = static_cast<int>(f % n);
        const int h = static_cast<int>(min(static_cast<long long>(n - y0), end - f));
        if (xb - HX >= 0 && xb + BX * W + HX <= n)
            strip<true>(in, out, ring, n, xb, y0, h);
        else
            strip<false>(in, out, ring, n, xb, y0, h);
        f += h;
    }}
#else
    const int xb = blockIdx.x * BX * W, y0 = blockIdx.y * H;
    if (xb - HX >= 0 && xb + BX * W + HX <= n)
        strip<true>(in, out, ring, n, xb, y0, H);
    else
        strip<false>(in, out, ring, n, xb, y0, H);
#endif
}}
"""


FUSED_SOURCE = r"""
#define R {R}
#define K (2 * R + 1)
#define W {W}
#define BX {BX}
#define H {H}
#define S {S}
#define TRIM {TRIM}
#define MINB {MINB}
#define HX (R + (R & 1))
#define NV (W + 2 * HX)
#define OW (BX * W - TRIM * 2 * HX)
#define NC1 ((OW + 2 * HX + W - 1) / W)
#define K1 ((NC1 + BX - 1) / BX)
#define SEG1 (NC1 * W)
#define SEG0 (SEG1 + 2 * HX)
#define SEG0P (SEG0 / 2)
#define LOADS ((SEG0P + BX - 1) / BX)
#define J (H + 4 * R)
#define NIT (J + 1)

// Two steps in one pass. The block owns output columns [xb, xb + OW) and rows [y0, y0 + H).
// Step 1 (the intermediate t) is computed for columns [xb - HX, xb - HX + SEG1) and rows [y0 - R, y0 + H + R),
// from input columns [xb - 2 HX, xb - 2 HX + SEG0) and rows [y0 - 2R, y0 + H + 2R) (J rows, streamed through
// an S-stage cp.async ring). Input row j of the strip completes step-1 row jt = j - 2R (relative to y0 - R);
// it goes (zero outside the grid) into tbuf[jt & 1], and the next iteration streams it through step 2, which
// completes output row jt - 1 - 2R. Both rotating register windows share the slot index u = j % K, since
// (j - 2R - 1) % K == j % K. One __syncthreads per input row: tbuf[jt & 1] is written after the barrier of
// iteration j and read after that of iteration j + 1; it is written again after that of iteration j + 2.
// TRIM = 0: OW = BX * W, step 1 has NC1 = BX + 2 HX / W chunks of W columns, the extra ones on threads 0...
// TRIM = 1: OW = BX * W - 2 HX, step 1 has exactly BX chunks, threads with threadIdx.x * W >= OW idle in step 2.

__constant__ double c_w[K * K];

__device__ __forceinline__ void cp_async16(double* smem, const double* gmem) {{
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}}

// Input row j of the strip (row y0 - 2R + j) into stage j % S, zero outside the grid; always one commit group.
template <bool INTERIOR>
__device__ __forceinline__ void issue(const double* __restrict__ in, double* ring, int n, int xb, int y0, int j) {{
    if (j < J) {{
        const int i = y0 - 2 * R + j;
        double* dst = ring + (j % S) * SEG0;
        const bool row_ok = i >= 0 && i < n;
        const double* row = in + (size_t)(row_ok ? i : 0) * n + xb - 2 * HX;
#pragma unroll
        for (int k = 0; k < LOADS; ++k) {{
            const int p = threadIdx.x + k * BX;
            if (k * BX + BX <= SEG0P || p < SEG0P) {{
                const int c = xb - 2 * HX + 2 * p;
                if (row_ok && (INTERIOR || (c >= 0 && c < n)))
                    cp_async16(dst + 2 * p, row + 2 * p);
                else
                    *reinterpret_cast<double2*>(dst + 2 * p) = make_double2(0.0, 0.0);
            }}
        }}
    }}
    asm volatile("cp.async.commit_group;\n" ::);
}}

template <bool INTERIOR>
__device__ __forceinline__ void strip(const double* __restrict__ in, double* __restrict__ out, double* ring, int n, int xb, int y0) {{
    double* tbuf = ring + S * SEG0;
    const int x0 = xb + threadIdx.x * W;
    const bool out_thread = TRIM == 0 || threadIdx.x * W < OW;
    double acc1[K1][K][W], acc2[K][W];
#pragma unroll
    for (int s = 0; s < K; ++s)
#pragma unroll
        for (int w = 0; w < W; ++w) {{
            acc2[s][w] = 0.0;
#pragma unroll
            for (int k = 0; k < K1; ++k) acc1[k][s][w] = 0.0;
        }}
#pragma unroll
    for (int j = 0; j < S - 1; ++j) issue<INTERIOR>(in, ring, n, xb, y0, j);
    for (int ib = 0; ib < NIT; ib += K) {{
#pragma unroll
        for (int u = 0; u < K; ++u) {{
            const int j = ib + u;
            if (NIT % K == 0 || j < NIT) {{
                asm volatile("cp.async.wait_group %0;\n" ::"n"(S - 2));
                __syncthreads();
                issue<INTERIOR>(in, ring, n, xb, y0, j + S - 1);
                const int jt = j - 2 * R;
                const bool step2 = jt >= 1 && out_thread;
                double v2[NV];
                if (step2) {{
                    const double* src = tbuf + ((jt - 1) & 1) * SEG1 + threadIdx.x * W;
#pragma unroll
                    for (int q = 0; q < NV; q += 2) {{
                        const double2 t = *reinterpret_cast<const double2*>(src + q);
                        v2[q] = t.x;
                        v2[q + 1] = t.y;
                    }}
                }}
                const int s = (u + 1) % K;
                if (j < J) {{
                    const double* src = ring + (j % S) * SEG0;
#pragma unroll
                    for (int k = 0; k < K1; ++k) {{
                        const int qc = threadIdx.x + k * BX;
                        if (k * BX + BX <= NC1 || qc < NC1) {{
                            double v[NV];
#pragma unroll
                            for (int q = 0; q < NV; q += 2) {{
                                const double2 t = *reinterpret_cast<const double2*>(src + qc * W + q);
                                v[q] = t.x;
                                v[q + 1] = t.y;
                            }}
#pragma unroll
                            for (int a = 0; a < K; ++a) {{
                                const int sa = (u - a + K) % K;
#pragma unroll
                                for (int b = 0; b < K; ++b)
#pragma unroll
                                    for (int w = 0; w < W; ++w) acc1[k][sa][w] = fma(c_w[a * K + b], v[w + b - R + HX], acc1[k][sa][w]);
                            }}
                            if (jt >= 0) {{
                                const int t = y0 - R + jt;
                                const bool row_ok = t >= 0 && t < n;
                                double* dst = tbuf + (jt & 1) * SEG1 + qc * W;
#pragma unroll
                                for (int w = 0; w < W; w += 2) {{
                                    const int c = xb - HX + qc * W + w;
                                    double2 val = make_double2(acc1[k][s][w], acc1[k][s][w + 1]);
                                    if (!row_ok || (!INTERIOR && (c < 0 || c >= n))) val = make_double2(0.0, 0.0);
                                    *reinterpret_cast<double2*>(dst + w) = val;
                                }}
                            }}
#pragma unroll
                            for (int w = 0; w < W; ++w) acc1[k][s][w] = 0.0;
                        }}
                    }}
                }}
                if (step2) {{
#pragma unroll
                    for (int a = 0; a < K; ++a) {{
                        const int sa = (u - a + K) % K;
#pragma unroll
                        for (int b = 0; b < K; ++b)
#pragma unroll
                            for (int w = 0; w < W; ++w) acc2[sa][w] = fma(c_w[a * K + b], v2[w + b - R + HX], acc2[sa][w]);
                    }}
                    const int o = y0 + j - 4 * R - 1;
                    if (o >= y0 && o < n && (INTERIOR || x0 < n)) {{
                        double* dst = out + (size_t)o * n + x0;
                        if (INTERIOR || x0 + W <= n) {{
#pragma unroll
                            for (int w = 0; w < W; w += 2) *reinterpret_cast<double2*>(dst + w) = make_double2(acc2[s][w], acc2[s][w + 1]);
                        }} else {{
#pragma unroll
                            for (int w = 0; w < W; ++w) if (x0 + w < n) dst[w] = acc2[s][w];
                        }}
                    }}
#pragma unroll
                    for (int w = 0; w < W; ++w) acc2[s][w] = 0.0;
                }}
            }}
        }}
    }}
}}

extern "C" __global__ void __launch_bounds__(BX, MINB) stencil(const double* __restrict__ in, double* __restrict__ out, int n) {{
    extern __shared__ __align__(16) double ring[];
    const int xb = blockIdx.x * OW, y0 = blockIdx.y * H;
    if (xb - 2 * HX >= 0 && xb - 2 * HX + SEG0 <= n)
        strip<true>(in, out, ring, n, xb, y0);
    else
        strip<false>(in, out, ring, n, xb, y0);
}}
"""


GATHER_SOURCE = r"""
#define R {R}
#define K (2 * R + 1)
#define W {W}
#define NW {NW}
#define H {H}
#define Y {Y}
#define S {S}
#define P {P}
#define PADD {PADD}
#define SH {SH}
#define MINB {MINB}
#define HX (R + (R & 1))
#define L (32 * W + 2 * HX)
#define LP (L / 2)
#define POS(j) ((j) + ((j) / W) * PADD)
#define ROWLEN (((POS(L - 1) + 1) + 1) / 2 * 2)
#define NV (W + 2 * HX)

// A warp owns the 32 * W columns [x0, x0 + 32 * W) of a strip of H output rows and streams down it with a
// private S-row shared-memory ring: lane l holds W adjacent outputs (gather: per output row it reads the
// 2R + 1 input rows it needs from the ring), so no accumulators stay alive across rows.
// Stored column j of a row is input column x0 - HX + j, at POS(j): PADD doubles after every W columns keep
// the lanes' 16-byte loads free of bank conflicts.
__constant__ double c_w[K * K];

__device__ __forceinline__ void cp_async16(double* smem, const double* gmem, int bytes) {{
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes));
}}

// Input rows [first, first + count) of the strip (row m is input row y0 - R + m) into slots m % S; one group.
__device__ __forceinline__ void issue(const double* __restrict__ in, double* ring, int n, int x0, int y0, int first, int count, int lane) {{
    for (int m = first; m < first + count; ++m) {{
        const int i = y0 - R + m;
        const bool row_ok = i >= 0 && i < n && m < H + 2 * R;
        double* dst = ring + (m % S) * ROWLEN;
        const double* row = in + (size_t)(row_ok ? i : 0) * n;
#pragma unroll
        for (int k = 0; k < (LP + 31) / 32; ++k) {{
            const int p = lane + 32 * k;
            if (LP % 32 == 0 || p < LP) {{
                const int c = x0 - HX + 2 * p;
                const bool ok = row_ok && c >= 0 && c < n;
                cp_async16(dst + POS(2 * p), ok ? row + c : in, ok ? 16 : 0);
            }}
        }}
    }}
    asm volatile("cp.async.commit_group;\n" ::);
}}

extern "C" __global__ void __launch_bounds__(32 * NW, MINB) stencil(const double* __restrict__ in, double* __restrict__ out, int n) {{
    extern __shared__ __align__(16) double smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int x0 = (blockIdx.x * NW + warp) * 32 * W, y0 = blockIdx.y * H;
    if (x0 >= n) return;
    double* ring = smem + warp * S * ROWLEN;
    const int base = lane * (W + PADD);  // POS(lane * W + t) = base + POS(t)
    // Prologue: rows [0, 2R), then P groups of Y rows. Iteration it issues group it + P, then waits for
    // group it: rows [it * Y, it * Y + Y + 2R) are in.
    issue(in, ring, n, x0, y0, 0, 2 * R, lane);
#pragma unroll
    for (int g = 0; g < P; ++g) issue(in, ring, n, x0, y0, 2 * R + g * Y, Y, lane);
    for (int it = 0; it < H / Y; ++it) {{
        __syncwarp();
        issue(in, ring, n, x0, y0, 2 * R + (it + P) * Y, Y, lane);
        asm volatile("cp.async.wait_group %0;\n" ::"n"(P));
        __syncwarp();
        double acc[Y][W];
#pragma unroll
        for (int y = 0; y < Y; ++y)
#pragma unroll
            for (int w = 0; w < W; ++w) acc[y][w] = 0.0;
#pragma unroll
        for (int a = 0; a < Y + 2 * R; ++a) {{
            const double* src = ring + ((it * Y + a) % S) * ROWLEN + base;
            double v[NV];
#if SH
#pragma unroll
            for (int t = HX; t < HX + W; t += 2) {{
                const double2 q = *reinterpret_cast<const double2*>(src + POS(t));
                v[t] = q.x; v[t + 1] = q.y;
            }}
#pragma unroll
            for (int t = HX - R; t < HX; ++t) {{
                v[t] = __shfl_up_sync(0xffffffffu, v[t + W], 1);
                if (lane == 0) v[t] = src[POS(t)];
            }}
#pragma unroll
            for (int t = HX + W; t < HX + W + R; ++t) {{
                v[t] = __shfl_down_sync(0xffffffffu, v[t - W], 1);
                if (lane == 31) v[t] = src[POS(t)];
            }}
#else
            // Columns [HX - R, HX + W + R): 16-byte loads of the even-aligned pairs, single loads at odd ends.
            if ((HX - R) & 1) v[HX - R] = src[POS(HX - R)];
#pragma unroll
            for (int t = HX - R + ((HX - R) & 1); t + 1 < HX + W + R; t += 2) {{
                const double2 q = *reinterpret_cast<const double2*>(src + POS(t));
                v[t] = q.x; v[t + 1] = q.y;
            }}
            if ((HX + W + R) & 1) v[HX + W + R - 1] = src[POS(HX + W + R - 1)];
#endif
#pragma unroll
            for (int y = 0; y < Y; ++y) {{
                const int ar = a - y;
                if (ar >= 0 && ar < K) {{
#pragma unroll
                    for (int b = 0; b < K; ++b)
#pragma unroll
                        for (int w = 0; w < W; ++w) acc[y][w] = fma(c_w[ar * K + b], v[w + b - R + HX], acc[y][w]);
                }}
            }}
        }}
        const int xl = x0 + lane * W;
#pragma unroll
        for (int y = 0; y < Y; ++y) {{
            const int o = y0 + it * Y + y;
            if (o < n && xl < n) {{
                double* dst = out + (size_t)o * n + xl;
                if (xl + W <= n) {{
#pragma unroll
                    for (int w = 0; w < W; w += 2) *reinterpret_cast<double2*>(dst + w) = make_double2(acc[y][w], acc[y][w + 1]);
                }} else {{
#pragma unroll
                    for (int w = 0; w < W; ++w) if (xl + w < n) dst[w] = acc[y][w];
                }}
            }}
        }}
    }}
    asm volatile("cp.async.wait_group 0;\n" ::);
}}
"""


# Pieces the chunk-ring kernels (dmma, dmma16, dmma16x2) share, as format strings like the sources.
CP_ASYNC = r"""__device__ __forceinline__ void cp_async16(double* smem, const double* gmem, int bytes) {{
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes));
}}

__device__ __forceinline__ void cp_async8(double* smem, const double* gmem, int bytes) {{
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes));
}}

// One pair of doubles, base + at (`bytes` of them inside the grid: 16, 8 or 0, the rest zero-filled; from `in`, a
// valid address, when 0). With n odd, every other row of the grid starts 8 bytes off a 16-byte boundary, which a
// 16-byte cp.async may not: two 8-byte copies there.
__device__ __forceinline__ void copy_pair(double* dst, const double* __restrict__ in, const double* __restrict__ base, int at, int bytes, int n) {{
    const double* src = bytes ? base + at : in;
    if (n & 1) {{
        cp_async8(dst, src, bytes ? 8 : 0);
        cp_async8(dst + 1, bytes == 16 ? src + 1 : in, bytes == 16 ? 8 : 0);
    }} else
        cp_async16(dst, src, bytes);
}}
"""

CHUNK_COPIES = CP_ASYNC + r"""// The copies of one thread: pair k (columns x, x + 1 of row r of a chunk, x = x0 + 2 c2 with x0 the chunk's first
// column) is pair threadIdx.x + k * 32 NW of the chunk's WN / 2 pairs a row; where it lands in a ring slot, where it
// comes from relative to the chunk's first input row, and how many of its bytes are inside the grid's columns.
// Fixed for the whole strip.
#define LOADS ((PAIRS + 32 * NW - 1) / (32 * NW))
struct Copies {{
    int dst[LOADS], src[LOADS], r[LOADS], bytes[LOADS];
}};

__device__ __forceinline__ Copies copies(int n, int x0) {{
    Copies c;
#pragma unroll
    for (int k = 0; k < LOADS; ++k) {{
        const int p = threadIdx.x + k * 32 * NW, r = p / (WN / 2), c2 = p % (WN / 2), x = x0 + 2 * c2;
        c.r[k] = p < PAIRS ? r : 4;  // 4: no pair
        c.dst[k] = r * WS + 2 * c2;
        c.src[k] = r * n + x;
        c.bytes[k] = x >= 0 && x < n ? (x + 1 < n ? 16 : 8) : 0;
    }}
    return c;
}}
"""

DMMA16_INSTRUCTION = r"""__device__ __forceinline__ void dmma16(double (&d)[4], const double (&a)[4], double b0, double b1) {{
    asm("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};\n"
        : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3]) : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b0), "d"(b1));
}}

"""


DMMA_SOURCE = r"""
#define R {R}
#define K (2 * R + 1)
#define NW {NW}
#define TX {TX}
#define H {H}
#define SC {SC}
#define PADW {PADW}
#define MINB {MINB}
#define HX (R + (R & 1))
#define NC ((8 + 2 * R + 3) / 4)
#define WT (8 * TX * NW)
#define WS0 (WT + 2 * HX)
#define WS (PADW ? WS0 + ((4 - WS0 % 16) + 16) % 16 : WS0)
#define WN WS0
#define PAIRS (4 * WN / 2)
#define T (H / 8)

// FP64 tensor cores (DMMA, mma.m8n8k4). A warp owns TX tiles of 8 x 8 outputs side by side and walks down a
// strip of H output rows, 8 rows (one tile row) at a time. For a tile whose first output row is y0,
//     C = sum over dx of  A_dx . B_dx,   A_dx[i][k] = w[k - i][dx] (0 <= k - i <= 2R, else 0), 8 x 4NC,
//     B_dx[k][j] = in[y0 - R + k][x + j + dx - R],
// split along k into NC chunks of 4 input rows: NC * K DMMAs per tile, the A fragments (weights) held in
// registers for the whole kernel. Chunk c of tile t is chunk c - 2 of tile t + 1, so the block streams
// chunks of 4 input rows through an SC-chunk shared-memory ring (cp.async) and each chunk's B fragments
// (one 8-byte load per lane and dx) serve the two tiles that read it.
// Fragments (PTX ISA, mma.m8n8k4 .f64): lane = 4 g + q; A: row g, col q; B: row q, col g;
// C: row g, cols 2q, 2q + 1.
__constant__ double c_w[K * K];

__device__ __forceinline__ void dmma(double& d0, double& d1, double a, double b) {{
    asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {{%0, %1}}, {{%2}}, {{%3}}, {{%0, %1}};\n"
        : "+d"(d0), "+d"(d1) : "d"(a), "d"(b));
}}

""" + CHUNK_COPIES + r"""
// Chunk j of the strip (input rows ys - R + 4 j .. + 3) into ring slot j % SC, zero outside the grid; one
// commit group per chunk, also when there is nothing left to copy.
__device__ __forceinline__ void issue(const double* __restrict__ in, double* ring, int n, int ys, int j, const Copies& c) {{
    if (j < 2 * T + NC - 2) {{
        double* dst = ring + (j % SC) * 4 * WS;
        const int i0 = ys - R + 4 * j;
        const double* base = in + (long long)i0 * n;
#pragma unroll
        for (int k = 0; k < LOADS; ++k)
            if (c.r[k] < 4) {{
                const int i = i0 + c.r[k];
                const int bytes = i >= 0 && i < n ? c.bytes[k] : 0;
                copy_pair(dst + c.dst[k], in, base, c.src[k], bytes, n);
            }}
    }}
    asm volatile("cp.async.commit_group;\n" ::);
}}

// Iteration t reads chunks 2t and 2t + 1: tile t's chunks 0 and 1, tile t - 1's chunks 2 and 3 (when NC = 4);
// tile t lives in acc[CUR], CUR = t & 1 a template argument so that every register index is a constant.
template <int CUR>
__device__ __forceinline__ void step(const double* __restrict__ in, double* __restrict__ out, double* ring, int n,
                                     int xb, int ys, int t, const double (&a)[NC][K], double (&acc)[2][TX][2], const Copies& cp) {{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    constexpr int PREV = CUR ^ 1;
#pragma unroll
    for (int tx = 0; tx < TX; ++tx) acc[CUR][tx][0] = acc[CUR][tx][1] = 0.0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {{
        const int j = 2 * t + h;
        asm volatile("cp.async.wait_group %0;\n" ::"n"(SC - 2));
        __syncthreads();
        issue(in, ring, n, ys, j + SC - 1, cp);
        const double* rows = ring + (j % SC) * 4 * WS + q * WS + warp * 8 * TX + g + HX - R;
#pragma unroll
        for (int tx = 0; tx < TX; ++tx)
#pragma unroll
            for (int dx = 0; dx < K; ++dx) {{
                const double b = rows[tx * 8 + dx];
                if (t < T) dmma(acc[CUR][tx][0], acc[CUR][tx][1], a[h][dx], b);
                if (t > 0 && h + 2 < NC) dmma(acc[PREV][tx][0], acc[PREV][tx][1], a[h + 2][dx], b);
            }}
    }}
    if (t > 0) {{  // tile t - 1 is complete
        const int y = ys + 8 * (t - 1) + g;
        if (y < n)
#pragma unroll
            for (int tx = 0; tx < TX; ++tx) {{
                const int x = xb + (warp * TX + tx) * 8 + 2 * q;
                double* o = out + (size_t)y * n + x;
                if (x + 1 < n && n % 2 == 0) *reinterpret_cast<double2*>(o) = make_double2(acc[PREV][tx][0], acc[PREV][tx][1]);
                else {{
                    if (x < n) o[0] = acc[PREV][tx][0];
                    if (x + 1 < n) o[1] = acc[PREV][tx][1];
                }}
            }}
    }}
}}

extern "C" __global__ void __launch_bounds__(32 * NW, MINB)
stencil(const double* __restrict__ in, double* __restrict__ out, int n) {{
    extern __shared__ __align__(16) double ring[];
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int xb = blockIdx.x * WT, ys = blockIdx.y * H;
    double a[NC][K];
#pragma unroll
    for (int c = 0; c < NC; ++c)
#pragma unroll
        for (int dx = 0; dx < K; ++dx) {{
            const int dy = 4 * c + q - g;
            a[c][dx] = dy >= 0 && dy <= 2 * R ? c_w[dy * K + dx] : 0.0;
        }}
    double acc[2][TX][2];
#pragma unroll
    const Copies cp = copies(n, xb - HX);
#pragma unroll
    for (int j = 0; j < SC - 1; ++j) issue(in, ring, n, ys, j, cp);
    for (int t = 0; t <= T; t += 2) {{
        step<0>(in, out, ring, n, xb, ys, t, a, acc, cp);
        if (t + 1 <= T) step<1>(in, out, ring, n, xb, ys, t + 1, a, acc, cp);
    }}
}}
"""


DMMA16_SOURCE = r"""
#define R {R}
#define K (2 * R + 1)
#define NW {NW}
#define PX {PX}
#define H {H}
#define SC {SC}
#define MINB {MINB}
#define HX (R + (R & 1))
#define WIN (4 + 2 * R)
#define NG4 (WIN / 4)
#define NMAIN (NG4 * (WIN / 2))
#define NTAIL (WIN % 4 ? (WIN + 3) / 4 : 0)
#define KS (NMAIN + NTAIL)
#define NCH ((WIN + 3) / 4)
#define WT (32 * PX * NW)
#define WS0 (WT + 2 * HX)
#define WS (WS0 + 2)
#define WN WS0
#define PAIRS (4 * WN / 2)
#define T (H / 4)

// FP64 tensor cores at the full sm_90 rate (DMMA, mma.m16n8k8). The outputs are cut into 4 x 4 patches; for
// eight patches side by side (32 columns x 4 rows, one DMMA group),
//     D (16 x 8) = A (16 x 8 KS) . B (8 KS x 8),   A[o][k] = w[wy - oy][wx - ox] (0 outside the 2R + 1 box),
//     B[k][c] = in[y - R + wy][x_c - R + wx],
// where row o = 4 oy + ox of A and D is one output of a patch, column c of B and D one patch (top-left output
// (y, x_c)), and k one position (wy, wx) of a patch's WIN x WIN input window (WIN = 4 + 2R), padded with zero
// weights to KS k-steps of 8 (R = 3: 100 positions in 13 steps, 2.12 times the stencil's 49 FMAs per output).
// A is the same for every patch, so each lane keeps its A fragments (4 KS doubles) in registers for the whole
// kernel. A warp owns PX such groups of eight patches (32 PX columns) and walks down a strip of H output rows,
// 4 rows (one patch row) at a time, reading B straight from an SC-chunk shared-memory ring of 4-row input
// chunks filled by cp.async: patch row t reads chunks t .. t + NCH - 1, so each input row is copied once per
// strip (plus the 2R halo rows).
// Fragments (PTX ISA 9.7.14.5.7, "Matrix Fragments for mma.m16n8k8", .f64; lane = 4 g + q): A: a0 (g, q),
// a1 (g + 8, q), a2 (g, q + 4), a3 (g + 8, q + 4); B: b0 (q, g), b1 (q + 4, g); C, D: c0 (g, 2q),
// c1 (g, 2q + 1), c2 (g + 8, 2q), c3 (g + 8, 2q + 1).
// The order of k within a step is ours to choose (A and B only have to agree). Lane (g, q) loads patch g's
// window, so with the patches side by side the order keeps q along x: then a warp's 32 loads of one B register
// are 32 consecutive doubles of one ring row, free of bank conflicts. NMAIN main steps take 4 columns x 2 rows
// of the window (b0: row 2 rp, column 4 cg + q; b1 the row below); when WIN = 2 mod 4 (odd R) NTAIL tail
// steps take the last 2 columns x 4 rows (b0: row 4 tt + q / 2, column 4 NG4 + q % 2; b1 two rows below; in
// the last one b1 is the padding). Every step's rows lie in one chunk, so each load is a chunk pointer plus a
// compile-time offset plus one of two lane offsets. Ring rows are WS = 2 (mod 4) doubles apart, so that a tail
// step's two rows fall on complementary banks.
__constant__ double c_w[K * K];

""" + DMMA16_INSTRUCTION + CHUNK_COPIES + r"""
// Chunk j of the strip (input rows ys - R + 4 j .. + 3) into ring slot j % SC, zero outside the grid; one
// commit group per chunk, also when there is nothing left to copy.
__device__ __forceinline__ void issue(const double* __restrict__ in, double* ring, int n, int ys, int j, const Copies& c) {{
    if (j < T + NCH - 1) {{
        double* dst = ring + (j % SC) * 4 * WS;
        const int i0 = ys - R + 4 * j;
        const double* base = in + (long long)i0 * n;
#pragma unroll
        for (int k = 0; k < LOADS; ++k)
            if (c.r[k] < 4) {{
                const int i = i0 + c.r[k];
                const int bytes = i >= 0 && i < n ? c.bytes[k] : 0;
                copy_pair(dst + c.dst[k], in, base, c.src[k], bytes, n);
            }}
    }}
    asm volatile("cp.async.commit_group;\n" ::);
}}

extern "C" __global__ void __launch_bounds__(32 * NW, MINB)
stencil(const double* __restrict__ in, double* __restrict__ out, int n) {{
    static_assert(SC >= NCH + 1, "a chunk in flight beside the NCH a patch row reads");
    static_assert(H % 4 == 0 && K * K <= 4 * WS, "whole patch rows; the weights fit in a ring slot");
    extern __shared__ __align__(16) double ring[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    const int xb = blockIdx.x * WT, ys = blockIdx.y * H;
    const Copies cp = copies(n, xb - HX);
#pragma unroll
    for (int j = 0; j < SC - 1; ++j) issue(in, ring, n, ys, j, cp);
    // The weights pass through ring slot SC - 1, which the prologue leaves alone and iteration 0 fills only after
    // its barrier: building the fragments from shared memory avoids 4 KS constant loads whose addresses differ
    // across the warp (serialized by the constant cache).
    double* sw = ring + (SC - 1) * 4 * WS;
    for (int i = threadIdx.x; i < K * K; i += 32 * NW) sw[i] = c_w[i];
    __syncthreads();
    double a[KS][4];
#pragma unroll
    for (int s = 0; s < KS; ++s)
#pragma unroll
        for (int i = 0; i < 4; ++i) {{
            const int h = i >> 1, o = g + 8 * (i & 1);
            const int wy = s < NMAIN ? 2 * (s % (WIN / 2)) + h : 4 * (s - NMAIN) + (q >> 1) + 2 * h;
            const int wx = s < NMAIN ? 4 * (s / (WIN / 2)) + q : 4 * NG4 + (q & 1);
            const int dy = wy - (o >> 2), dx = wx - (o & 3);
            a[s][i] = wy < WIN && dy >= 0 && dy <= 2 * R && dx >= 0 && dx <= 2 * R ? sw[dy * K + dx] : 0.0;
        }}
    // Window column 0 of the warp's first patch; lane offsets of the main and the tail steps' loads.
    const double* w0 = ring + HX - R + warp * 32 * PX;
    const int lmain = lane, ltail = 4 * g + (q & 1) + (q >> 1) * WS;
    for (int t = 0; t < T; ++t) {{
        asm volatile("cp.async.wait_group %0;\n" ::"n"(SC - 1 - NCH));
        __syncthreads();
        issue(in, ring, n, ys, t + SC - 1, cp);
        const double* ch[NCH];
#pragma unroll
        for (int c = 0; c < NCH; ++c) ch[c] = w0 + ((t + c) % SC) * 4 * WS;
        double acc[PX][4];
#pragma unroll
        for (int p = 0; p < PX; ++p) acc[p][0] = acc[p][1] = acc[p][2] = acc[p][3] = 0.0;
#pragma unroll
        for (int s = 0; s < KS; ++s)
#pragma unroll
            for (int p = 0; p < PX; ++p) {{
                double b0, b1;
                if (s < NMAIN) {{
                    const int rp = s % (WIN / 2), cg = s / (WIN / 2);
                    const double* b = ch[rp >> 1] + 2 * (rp & 1) * WS + 4 * cg + 32 * p + lmain;
                    b0 = b[0];
                    b1 = b[WS];
                }} else {{
                    const int tt = s - NMAIN;
                    const double* b = ch[tt] + 4 * NG4 + 32 * p + ltail;
                    b0 = b[0];
                    b1 = 4 * tt + 2 < WIN ? b[2 * WS] : 0.0;
                }}
                dmma16(acc[p], a[s], b0, b1);
            }}
        // D row o of patch column c is output (oy, ox) = (o / 4, o % 4) of patch c: lane (g, q) holds rows g and
        // g + 8 of patches 2q and 2q + 1.
#pragma unroll
        for (int p = 0; p < PX; ++p)
#pragma unroll
            for (int i = 0; i < 4; ++i) {{
                const int o = g + 8 * (i >> 1), y = ys + 4 * t + (o >> 2);
                const int x = xb + (warp * PX + p) * 32 + 4 * (2 * q + (i & 1)) + (o & 3);
                if (y < n && x < n) out[(size_t)y * n + x] = acc[p][i];
            }}
    }}
}}
"""


DMMA16X2_SOURCE = r"""
#define R {R}
#define K (2 * R + 1)
#define NW {NW}
#define G {G}
#define H {H}
#define SC {SC}
#define MINB {MINB}
#define HX (R + (R & 1))
#define WIN (4 + 2 * R)
#define NG4 (WIN / 4)
#define NMAIN (NG4 * (WIN / 2))
#define NTAIL (WIN % 4 ? (WIN + 3) / 4 : 0)
#define KS (NMAIN + NTAIL)
#define NCH ((WIN + 3) / 4)
#define CH (4 * ((R + 3) / 4))
#define G1 (G + 1)
#define WT (32 * G)
#define WS (32 * G1 + 2 * HX + 2)
#define SC1 (NCH + 1)
#define WN (WT + 2 * CH + 2 * HX)
#define PAIRS (4 * WN / 2)
#define T (H / 4)
#define NT1 (T + NCH - 1)
#define NI (T + R)
#define NU (G1 + G)
#define PU ((NU + NW - 1) / NW)
#define SMEM_DOUBLES ((SC + SC1) * 4 * WS)

// Two stencil steps per launch, both on FP64 tensor cores at the full sm_90 rate (mma.m16n8k8), each step
// lowered as in dmma16 (4 x 4 output patches, K a patch's WIN x WIN window padded to KS k-steps of 8, eight
// patches side by side per instruction, A = the weights in registers, B read from a ring of 4-row chunks; see
// DMMA16_SOURCE for the fragment layout and the order of k, which are the same here, the A fragments too).
// A block owns the WT = 32 G output columns [xb, xb + WT) (G groups of eight patches) and walks down the strip
// of output rows [ys, ys + H), one patch row (4 rows) per iteration:
// - Input ring: SC slots of 4-row chunks; chunk i holds input rows ys - 2R + 4 i .. + 3, columns from
//   xb - CH - HX on (ring column 0); the WN columns [xb - CH - HX, xb + WT + CH + HX) are copied by cp.async,
//   zero outside the grid. NI = T + R chunks per strip: the H + 4R rows two steps need, each copied once per
//   strip (the 4R halo rows are copied again by the strips above and below).
// - Step 1 (the intermediate grid t) is computed as G1 = G + 1 groups of eight patches: columns
//   [xb - CH, xb - CH + 32 G1) with CH = R rounded up to a patch (4 at R <= 4), so a halo of CH >= R columns on
//   the left and 32 - CH >= R on the right; rows [ys - R, ys - R + 4 NT1), NT1 = T + NCH - 1 patch rows
//   (H + 2R rows rounded up to patches). Step-1 patch row j reads input chunks j .. j + NCH - 1 (its window
//   starts at input row ys - 2R + 4 j) and writes step-1 chunk j (rows ys - R + 4 j .. + 3) into slot j % SC1
//   of the step-1 ring, zero where the row or the column is outside the grid (what a second launch would read
//   there). When H + 2R is not a multiple of 4 (odd R), the last patch row's rows past ys + H + R - 1 read
//   chunks past NI (stale slots), and no step-2 window reaches them. Likewise the halo group's patches wholly
//   outside [xb - CH, xb + WT + CH) read input columns never copied (stale shared memory), and no step-2
//   window reaches them: a patch's D column depends on its B column only.
// - Step-1 ring: SC1 = NCH + 1 slots of 4 rows, the same row stride WS as the input ring, so the B loads of both
//   steps share their compile-time offsets; step-1 ring column 0 is grid column xb - CH.
// - Step 2, patch row t: reads step-1 chunks t .. t + NCH - 1 exactly as step 1 reads input chunks, from ring
//   column CH - R + 32 v (group v), and stores output rows ys + 4 t .. + 3 (as dmma16: D straight to global).
// Work units: per patch row, NU = G1 + G groups of eight patches (G1 of step 1, G of step 2); unit v goes to
// warp v % NW, as its unit v / NW of PU; PU DMMAs of a k-step are issued back to back (independent
// accumulators), step-1 and step-2 units alike, since A is the same weights. NU % NW == 0 balances the warps
// (e.g. NW = 3, G = 4: 3 units each); otherwise some warps idle a unit per patch row.
// Iteration it (0 .. T + NCH - 1), after one cp.async wait and one __syncthreads: issue input chunk
// it + SC - 1; step 1 for patch row it (if it < NT1); step 2 for patch row it - NCH (if it >= NCH), i.e. one
// whose step-1 chunks it - NCH .. it - 1 were all written before this iteration's barrier. Sync: input slot
// (it - 1) % SC, refilled here, was last read by step 1 in iteration it - 1; step-1 slot it % SC1, written
// here, last held chunk it - SC1 = it - NCH - 1, last read by step 2 in iteration it - 1; chunk it + NCH - 1,
// the newest step 1 reads, is complete after a wait that leaves SC - 1 - NCH groups in flight.
// Redundant work, per output of the two steps: step 1 computes 32 G1 columns for WT outputs, a factor
// (G + 1) / G (of the 32 halo columns only 2 CH are used: 8 at R = 3), and 4 NT1 = H + 4 NCH - 4 rows for H,
// a factor (T + NCH - 1) / T (H + 8 for H + 6 needed at R = 3). MACs per output: 8 KS (1 + (G + 1) (T + NCH - 1)
// / (G T)); at R = 3 (KS = 13: 104 per patch output and step, 2.12 times 49 taps) that is, against 2 x 49 = 98
// taps, 2.65x for G = 3, H = 64; 2.55x for G = 4, H = 64; 2.47x for G = 4, H = 128; 2.43x for G = 7, H = 64;
// 2.35x for G = 7, H = 128; 2.30x for G = 10, H = 128; 2.12x in the limit (the lowering's own padding; a step
// at a time with dmma16 is 2.12x too, with no halo). Input columns copied per output
// column: (WT + 2 CH + 2 HX) / WT (1.125 at G = 4, R = 3), the neighbouring tiles' overlap, mostly from L2.
__constant__ double c_w[K * K];

""" + DMMA16_INSTRUCTION + CHUNK_COPIES + r"""
// Input chunk j of the strip (input rows ys - 2R + 4 j .. + 3) into ring slot j % SC, zero outside the grid;
// one commit group per chunk, also when there is nothing left to copy.
__device__ __forceinline__ void issue(const double* __restrict__ in, double* ring, int n, int ys, int j, const Copies& c) {{
    if (j < NI) {{
        double* dst = ring + (j % SC) * 4 * WS;
        const int i0 = ys - 2 * R + 4 * j;
        const double* base = in + (long long)i0 * n;
#pragma unroll
        for (int k = 0; k < LOADS; ++k)
            if (c.r[k] < 4) {{
                const int i = i0 + c.r[k];
                const int bytes = i >= 0 && i < n ? c.bytes[k] : 0;
                copy_pair(dst + c.dst[k], in, base, c.src[k], bytes, n);
            }}
    }}
    asm volatile("cp.async.commit_group;\n" ::);
}}

extern "C" __global__ void __launch_bounds__(32 * NW, MINB)
stencil(const double* __restrict__ in, double* __restrict__ out, int n) {{
    static_assert(SC >= NCH + 1, "a chunk in flight beside the NCH a patch row reads");
    static_assert(H % 4 == 0 && K * K <= 4 * WS, "whole patch rows; the weights fit in a ring slot");
    static_assert(CH + R <= 32, "the halo group covers R step-1 columns on both sides");
    extern __shared__ __align__(16) double ring[];  // SC input slots, then SC1 step-1 slots, each 4 rows of WS
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    const int xb = blockIdx.x * WT, ys = blockIdx.y * H;
    const Copies cp = copies(n, xb - CH - HX);
#pragma unroll
    for (int j = 0; j < SC - 1; ++j) issue(in, ring, n, ys, j, cp);
    // The weights pass through step-1 slot 0, which iteration 0 writes only after its barrier.
    double* sw = ring + SC * 4 * WS;
    for (int i = threadIdx.x; i < K * K; i += 32 * NW) sw[i] = c_w[i];
    __syncthreads();
    double a[KS][4];
#pragma unroll
    for (int s = 0; s < KS; ++s)
#pragma unroll
        for (int i = 0; i < 4; ++i) {{
            const int h = i >> 1, o = g + 8 * (i & 1);
            const int wy = s < NMAIN ? 2 * (s % (WIN / 2)) + h : 4 * (s - NMAIN) + (q >> 1) + 2 * h;
            const int wx = s < NMAIN ? 4 * (s / (WIN / 2)) + q : 4 * NG4 + (q & 1);
            const int dy = wy - (o >> 2), dx = wx - (o & 3);
            a[s][i] = wy < WIN && dy >= 0 && dy <= 2 * R && dx >= 0 && dx <= 2 * R ? sw[dy * K + dx] : 0.0;
        }}
    // This warp's units: unit u is v = warp + NW u of the patch row; step (1 or 2, 0: none), group within its
    // step, and the ring column of its first patch's window column 0.
    int step[PU], grp[PU], col[PU];
#pragma unroll
    for (int u = 0; u < PU; ++u) {{
        const int v = warp + NW * u;
        step[u] = v < G1 ? 1 : v < NU ? 2 : 0;
        grp[u] = v < G1 ? v : v - G1;
        col[u] = v < G1 ? 32 * v + HX - R : 32 * (v - G1) + CH - R;
    }}
    const int lmain = lane, ltail = 4 * g + (q & 1) + (q >> 1) * WS;
    for (int it = 0; it < T + NCH; ++it) {{
        asm volatile("cp.async.wait_group %0;\n" ::"n"(SC - 1 - NCH));
        __syncthreads();
        issue(in, ring, n, ys, it + SC - 1, cp);
        // Step 1 reads input chunks it .. it + NCH - 1, step 2 step-1 chunks it - NCH .. it - 1.
        bool live[PU];
        const double* ch[PU][NCH];
#pragma unroll
        for (int u = 0; u < PU; ++u) {{
            live[u] = step[u] == 1 ? it < NT1 : step[u] == 2 && it >= NCH;
#pragma unroll
            for (int c = 0; c < NCH; ++c)
                ch[u][c] = ring + col[u] + (step[u] == 2 ? SC + (it - NCH + c + SC1) % SC1 : (it + c) % SC) * 4 * WS;
        }}
        double acc[PU][4];
#pragma unroll
        for (int u = 0; u < PU; ++u) acc[u][0] = acc[u][1] = acc[u][2] = acc[u][3] = 0.0;
#pragma unroll
        for (int s = 0; s < KS; ++s)
#pragma unroll
            for (int u = 0; u < PU; ++u)
                if (live[u]) {{
                    double b0, b1;
                    if (s < NMAIN) {{
                        const int rp = s % (WIN / 2), cg = s / (WIN / 2);
                        const double* b = ch[u][rp >> 1] + 2 * (rp & 1) * WS + 4 * cg + lmain;
                        b0 = b[0];
                        b1 = b[WS];
                    }} else {{
                        const int tt = s - NMAIN;
                        const double* b = ch[u][tt] + 4 * NG4 + ltail;
                        b0 = b[0];
                        b1 = 4 * tt + 2 < WIN ? b[2 * WS] : 0.0;
                    }}
                    dmma16(acc[u], a[s], b0, b1);
                }}
        // D row o of patch column c is output (o / 4, o % 4) of patch c: lane (g, q) holds rows g and g + 8 of
        // patches 2q and 2q + 1. Step 1: into step-1 slot it % SC1, zero outside the grid; step 2: to out.
#pragma unroll
        for (int u = 0; u < PU; ++u)
            if (live[u])
#pragma unroll
                for (int i = 0; i < 4; ++i) {{
                    const int o = g + 8 * (i >> 1), oy = o >> 2, ox = 32 * grp[u] + 4 * (2 * q + (i & 1)) + (o & 3);
                    if (step[u] == 1) {{
                        const int y = ys - R + 4 * it + oy, x = xb - CH + ox;
                        ring[(SC + it % SC1) * 4 * WS + oy * WS + ox] = y >= 0 && y < n && x >= 0 && x < n ? acc[u][i] : 0.0;
                    }} else {{
                        const int y = ys + 4 * (it - NCH) + oy, x = xb + ox;
                        if (y < n && x < n) out[(size_t)y * n + x] = acc[u][i];
                    }}
                }}
    }}
}}
"""

# The stencil2d template's ring defaults (tiling=ring): the comparison point of sweeps 6-9.
TEMPLATE_RING = {"kind": "ring", "W": 2, "BX": 128, "H": 120, "S": 4, "RB": 1, "WSMEM": 0, "WREG": 0, "MINB": 1,
                 "L2HINT": 1, "STCS": 0}
# fused2's best on the H200 (sweep 5, docs/stencil2d-h200.md: 0.516 ms per step): the comparison point of dmma16x2.
FUSED2_BEST = {"kind": "fused2", "W": 2, "BX": 128, "H": 120, "S": 4, "TRIM": 1, "MINB": 1}


def reference(field, weights: np.ndarray, steps: int = 1):
    """The workload's FP64 definition (one shifted add per tap), on the GPU with CuPy."""
    return stencil_reference(field, weights, steps, zeros=lambda shape: cp.zeros(shape, dtype=cp.float64))


def time_it(fn, repeats: int) -> float:
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    fn()
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(repeats):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop))
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10240)
    parser.add_argument("--radius", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--variant", type=int, help="run only this entry of the family's list (0: the comparison kernel)")
    parser.add_argument("--fused", action="store_true", help="also run the two-steps-in-one-pass family fused2")
    parser.add_argument("--only-fused", action="store_true", help="run only the fused2 family")
    parser.add_argument("--gather", action="store_true", help="run the gather family and the template's ring")
    parser.add_argument("--dmma", action="store_true", help="run the FP64 tensor-core family and the template's ring")
    parser.add_argument("--dmma16", action="store_true", help="run the m16n8k8 FP64 tensor-core family and the template's ring")
    parser.add_argument("--dmma16x2", action="store_true",
                        help="run the two-step m16n8k8 FP64 tensor-core family beside fused2's best and the template's ring")
    parser.add_argument("--persist", action="store_true", help="run the ring with other strip heights and as a persistent grid")
    parser.add_argument("--wide", action="store_true", help="run the ring with wider tiles, deeper rings, streaming stores")
    parser.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."), "explore.json"))
    args = parser.parse_args()
    n, r = args.n, args.radius
    k = 2 * r + 1
    rng = np.random.default_rng(0)
    weights = rng.random((k, k)) + 0.5
    weights /= weights.sum()
    field = cp.asarray(rng.random((n, n)) * 2 - 1)
    small = cp.asarray(rng.random((1002, 1002)) * 2 - 1)
    want, want_small = reference(field, weights), reference(small, weights)
    fused = args.fused or args.only_fused
    if fused or args.dmma16x2:
        want2, want2_small = reference(field, weights, 2), reference(small, weights, 2)
    out = cp.empty_like(field)
    copy_ms = time_it(lambda: out.__setitem__(Ellipsis, field), args.repeats)
    floor_ms = copy_ms
    print(f"copy {n}^2 FP64: {copy_ms:.4f} ms = {2 * 8 * n * n / copy_ms / 1e9:.2f} TB/s (the one-step memory floor)")

    # Sweep 5: fewer non-DFMA instructions per DFMA. Weights as four 16-byte shared-memory broadcasts per
    # weight row (WSMEM) instead of 49 uniform-register loads; RB input rows per barrier; W = 4 columns.
    variants = [{"kind": "ring", "W": w, "BX": bx, "H": 120, "S": st, "RB": rb, "WSMEM": ws, "WREG": 0, "MINB": mb,
                 "L2HINT": 1, "STCS": 0}
                for w in (2, 4) for bx in (64, 128) for rb in (1, 2) for st in (4, 6) for ws in (0, 1) for mb in (1, 3)
                if st >= 2 * rb and not (w == 2 and mb == 3)]
    hx = r + (r & 1)
    fused_variants = [{"kind": "fused2", "W": 2, "BX": bx, "H": h, "S": 4, "TRIM": trim, "MINB": 1}
                      for bx in (64, 128) for h in (60, 120) for trim in (0, 1)]
    fused_variants += [{"kind": "fused2", "W": 4, "BX": 128, "H": 120, "S": 4, "TRIM": 1, "MINB": 1}]
    if args.gather:  # sweep 6: per-lane strips of W columns, gather from a warp-private ring
        variants = [TEMPLATE_RING]
        variants += [{"kind": "gather", "W": w, "NW": nw, "BX": 32 * nw, "H": h, "Y": y, "P": pf, "S": 2 * r + (pf + 1) * y,
                      "PADD": 2, "SH": sh, "MINB": 1}
                     for w in (8, 16) for y in (1, 2) for pf in (1, 2) for nw in (1, 2, 4) for h in (64, 128)
                     for sh in (0, 1) if not sh or (pf == 1 and nw == 2 and h == 128)]
        variants += [{"kind": "gather", "W": 4, "NW": 4, "BX": 128, "H": 128, "Y": 2, "P": pf, "S": 2 * r + (pf + 1) * 2,
                      "PADD": 2, "SH": 0, "MINB": 1} for pf in (1, 2)]
    elif args.dmma:  # sweep 7: FP64 tensor cores; W is the 8-column tiles per warp, BX the threads per block
        variants = [TEMPLATE_RING]
        variants += [{"kind": "dmma", "W": tx, "NW": nw, "BX": 32 * nw, "H": h, "S": sc, "PADW": pad, "MINB": 1}
                     for nw in (2, 4, 8) for tx in (2, 4) for h in (64, 128) for sc in (3, 4) for pad in (0, 1)]
    elif args.dmma16:  # FP64 tensor cores at the full rate; W is the groups of eight 4 x 4 patches per warp, S the
        # ring's 4-row chunks: one more than a patch row reads (one chunk in flight) or two more
        nch = (2 * r + 7) // 4
        variants = [TEMPLATE_RING]
        variants += [{"kind": "dmma16", "W": px, "NW": nw, "BX": 32 * nw, "H": h, "S": nch + ahead, "MINB": 1}
                     for nw in (2, 4, 8) for px in (1, 2) for h in (64, 128) for ahead in (1, 2)]
    elif args.dmma16x2:  # two steps on FP64 tensor cores; W is the output groups of eight 4 x 4 patches per block
        # (step 1 computes W + 1), NW warps share the 2 W + 1 groups of a patch row, 3 per warp (balanced; 7 warps
        # x 1 with W = 3; 4 warps x 5 with W = 8 leaves three of 20 slots idle), S the input ring's 4-row chunks
        # (the step-1 ring has NCH + 1). ptxas, sm_90, R = 3: 214, 214, 192, 168, 255 registers, no spills.
        nch = (2 * r + 7) // 4
        variants = [FUSED2_BEST, TEMPLATE_RING]
        variants += [{"kind": "dmma16x2", "W": g, "NW": nw, "BX": 32 * nw, "H": h, "S": nch + 1, "MINB": 1}
                     for nw, g in ((3, 4), (5, 7), (7, 10), (7, 3), (4, 8)) for h in (64, 128)]
        variants += [{"kind": "dmma16x2", "W": g, "NW": nw, "BX": 32 * nw, "H": 128, "S": nch + 2, "MINB": 1}
                     for nw, g in ((3, 4), (5, 7))]
    elif args.persist:  # sweep 8: the ring's last partial wave; strip heights, and a persistent grid
        # of 1 or 2 blocks per resident slot (PERSIST)
        variants = [{**TEMPLATE_RING, "H": h} for h in (120, 60, 90, 160, 240, 480)]
        variants += [{**TEMPLATE_RING, "BX": bx, "S": st, "MINB": mb, "PERSIST": fill}
                     for bx in (64, 128, 256) for st in (4, 6) for mb in (1, 4) for fill in (1, 2)]
    elif args.wide:  # sweep 9: the ring's share of the copy bandwidth; wider tiles, deeper rings, streaming stores
        variants = [{**TEMPLATE_RING, "W": w, "BX": bx, "S": st, "STCS": cs}
                    for w in (2, 4) for bx in (128, 256, 512) for st in (4, 8) for cs in (0, 1)]
    elif args.only_fused:
        variants = fused_variants
    elif fused:
        variants += fused_variants
    if args.quick:
        variants = variants[:1]
    if args.variant is not None:  # one kernel of the family, e.g. under ncu (it is launched 4 + repeats times)
        variants = [variants[args.variant]]
    rows = []
    for p in variants:
        t0 = time.perf_counter()
        extra = {}
        if p["kind"] == "ring":  # unrolled over UG groups of RB rows: a multiple of the K + RB - 1 accumulator rows
            extra["UG"] = (k + p["RB"] - 1) // math.gcd(k + p["RB"] - 1, p["RB"])
            extra["PERSIST"] = int(bool(p.get("PERSIST")))
        if p["kind"] == "dmma":
            extra = {"TX": p["W"], "SC": p["S"]}
        if p["kind"] == "dmma16":
            extra = {"PX": p["W"], "SC": p["S"]}
        if p["kind"] == "dmma16x2":
            extra = {"G": p["W"], "SC": p["S"]}
        sources = {"ldg": SOURCE, "ring": RING_SOURCE, "fused2": FUSED_SOURCE, "gather": GATHER_SOURCE, "dmma": DMMA_SOURCE,
                   "dmma16": DMMA16_SOURCE, "dmma16x2": DMMA16X2_SOURCE}
        source = sources[p["kind"]].format(R=r, **{**p, **extra})
        module = cp.RawModule(code=source, options=("-std=c++17",))
        kernel = module.get_function("stencil")
        steps = 2 if p["kind"] in ("fused2", "dmma16x2") else 1
        tile_x = p["BX"] * p["W"]  # output columns per block
        shared = 0
        if p["kind"] == "ring":
            shared = 8 * p["S"] * (p["BX"] * p["W"] + 2 * hx)
        elif p["kind"] == "fused2":
            # The same sizes as FUSED_SOURCE's OW, SEG1, SEG0: S input rows of SEG0, two step-1 rows of SEG1.
            tile_x = p["BX"] * p["W"] - p["TRIM"] * 2 * hx
            seg1 = (tile_x + 2 * hx + p["W"] - 1) // p["W"] * p["W"]
            shared = 8 * (p["S"] * (seg1 + 2 * hx) + 2 * seg1)
        elif p["kind"] == "gather":  # NW private rings of S rows of ROWLEN doubles (GATHER_SOURCE's sizes)
            tile_x = p["NW"] * 32 * p["W"]
            last = 32 * p["W"] + 2 * hx - 1
            rowlen = (last + last // p["W"] * p["PADD"] + 2) // 2 * 2
            shared = 8 * p["NW"] * p["S"] * rowlen
        elif p["kind"] == "dmma":  # SC chunks of 4 rows of WS doubles (DMMA_SOURCE's sizes)
            tile_x = 8 * p["W"] * p["NW"]
            ws = tile_x + 2 * hx
            ws += ((4 - ws % 16) + 16) % 16 if p["PADW"] else 0
            shared = 8 * p["S"] * 4 * ws
        elif p["kind"] == "dmma16":  # S chunks of 4 rows of WS doubles (DMMA16_SOURCE's sizes)
            tile_x = 32 * p["W"] * p["NW"]
            shared = 8 * p["S"] * 4 * (tile_x + 2 * hx + 2)
        elif p["kind"] == "dmma16x2":  # S input and NCH + 1 step-1 chunks of 4 rows of WS doubles (DMMA16X2_SOURCE's)
            tile_x = 32 * p["W"]
            shared = 8 * (p["S"] + (2 * r + 7) // 4 + 1) * 4 * (tile_x + 32 + 2 * hx + 2)
        if shared:
            kernel.max_dynamic_shared_size_bytes = shared
        resident = 0
        if p.get("PERSIST"):  # PERSIST blocks per resident slot: 1 or 2 waves, every block the same share of rows
            per_sm = cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.kernel.ptr, p["BX"], shared)
            resident = per_sm * cp.cuda.Device().attributes["MultiProcessorCount"] * p["PERSIST"]
        build_s = time.perf_counter() - t0
        c_w = cp.ndarray((k * k,), cp.float64, module.get_global("c_w"))
        c_w[...] = cp.asarray(weights.ravel())

        def launch(src, dst, p=p, kernel=kernel, shared=shared, tile_x=tile_x, resident=resident):
            m = src.shape[0]
            gx = (m + tile_x - 1) // tile_x
            gy = (m + p["H"] - 1) // p["H"]
            grid = (resident,) if resident else (gy, gx) if p.get("YFAST") else (gx, gy)
            kernel(grid, (p["BX"],), (src, dst, np.int32(m)), shared_mem=shared)

        errors = []
        checks = ((small, want2_small), (field, want2)) if steps == 2 else ((small, want_small), (field, want))
        for f, w_ in checks:
            got = cp.full_like(f, cp.nan)
            launch(f, got)
            errors.append(float(cp.max(cp.abs(got - w_))))
        ok = all(e < 1e-12 for e in errors)
        ms = time_it(lambda: launch(field, out), args.repeats)
        rows.append({**p, "ms": ms, "steps": steps, "ms_per_step": ms / steps, "ok": ok, "max_err": max(errors),
                     "regs": kernel.num_regs, "spill_bytes": kernel.local_size_bytes, "build_s": round(build_s, 2),
                     "floor_fraction": floor_ms / (ms / steps)})
        print(json.dumps(rows[-1]), flush=True) if not rows[-1]["ok"] else None
    rows.sort(key=lambda row: (not row["ok"], row["ms_per_step"]))
    clocks = subprocess.run(["nvidia-smi", "--query-gpu=name,clocks.sm,clocks.max.sm,power.draw", "--format=csv"],
                            capture_output=True, text=True).stdout
    with open(args.json, "w") as f:
        json.dump({"n": n, "radius": r, "copy_ms": copy_ms, "rows": rows, "nvidia_smi": clocks}, f, indent=1)
    print(clocks)
    print(f"copy floor (one step): {floor_ms:.4f} ms; floor% = copy ms / (ms per step)")
    print(f"{'kind':>6} {'W':>2} {'BX':>4} {'H':>4} {'S':>2} {'RB':>2} {'WS':>2} {'MB':>2} {'L2':>2} {'CS':>2} {'TR':>2} {'Y':>2} {'P':>2} {'SH':>2} {'PE':>2} {'regs':>4} {'spill':>5} {'steps':>5} {'ms':>7} {'ms/step':>7} {'floor%':>6} ok")
    for row in rows[:25]:
        print(f"{row['kind']:>6} {row['W']:>2} {row['BX']:>4} {row['H']:>4} {row.get('S', 0):>2} {row.get('RB', 0):>2} {row.get('WSMEM', 0):>2} {row['MINB']:>2} {row.get('L2HINT', 0):>2} {row.get('STCS', 0):>2} {row.get('TRIM', 0):>2} {row.get('Y', 0):>2} {row.get('P', 0):>2} {row.get('SH', 0):>2} {row.get('PERSIST', 0):>2} "
              f"{row['regs']:>4} {row['spill_bytes']:>5} {row['steps']:>5} {row['ms']:7.4f} {row['ms_per_step']:7.4f} {100 * row['floor_fraction']:6.1f} {row['ok']}")


if __name__ == "__main__":
    main()
