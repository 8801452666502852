"""Explore register-streaming stencil kernels on a GPU with CuPy (NVRTC builds each variant in about a second).

Two families: `ldg` (each thread streams down its W columns, loading every input row from global memory
through L1) and `ring` (the same, with rows copied S - 1 ahead into a shared-memory ring by cp.async: the
kernel behind the stencil2d template's tiling=ring). Each variant is checked against a CuPy shifted-add FP64 reference at n and at an odd-shaped n, then timed
(median of CUDA-event times over repeated launches). Prints one line per variant, fastest first, and the
measured copy floor. Usage: python scripts/explore_stencil_kernels.py [--n 10240] [--radius 3] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time

import cupy as cp
import numpy as np

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
__device__ __forceinline__ void issue(const double* __restrict__ in, double* ring, int n, int xb, int y0, int j) {{
    const int i = y0 - R + j;
    double* dst = ring + (j % S) * SEG;
    const bool row_ok = i >= 0 && i < n && j < H + 2 * R;
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
__device__ __forceinline__ void strip(const double* __restrict__ in, double* __restrict__ out, double* ring, int n, int xb, int y0) {{
    const int x0 = xb + threadIdx.x * W;
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
    double acc[K][W];
#pragma unroll
    for (int s = 0; s < K; ++s)
#pragma unroll
        for (int w = 0; w < W; ++w) acc[s][w] = 0.0;
#pragma unroll
    for (int j = 0; j < S - 1; ++j) issue<INTERIOR>(in, ring, n, xb, y0, j);
    for (int ib = 0; ib < H + 2 * R; ib += K) {{
#pragma unroll
        for (int u = 0; u < K; ++u) {{
            const int j = ib + u;
            if ((H + 2 * R) % K == 0 || j < H + 2 * R) {{
                asm volatile("cp.async.wait_group %0;\n" ::"n"(S - 2));
                __syncthreads();
                issue<INTERIOR>(in, ring, n, xb, y0, j + S - 1);
                const double* src = ring + (j % S) * SEG + threadIdx.x * W;
                double v[NV];
#pragma unroll
                for (int q = 0; q < NV; q += 2) {{
                    const double2 t = *reinterpret_cast<const double2*>(src + q);
                    v[q] = t.x;
                    v[q + 1] = t.y;
                }}
#pragma unroll
                for (int a = 0; a < K; ++a) {{
                    const int s = (u - a + K) % K;
#pragma unroll
                    for (int b = 0; b < K; ++b)
#pragma unroll
                        for (int w = 0; w < W; ++w) acc[s][w] = fma(WEIGHT(a * K + b), v[w + b - R + HX], acc[s][w]);
                }}
                const int o = y0 + j - 2 * R, s = (u + 1) % K;
                if (o >= y0 && o < n && (INTERIOR || x0 < n)) {{
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

extern "C" __global__ void __launch_bounds__(BX, MINB) stencil(const double* __restrict__ in, double* __restrict__ out, int n) {{
    extern __shared__ __align__(16) double ring[];
    const int xb = blockIdx.x * BX * W, y0 = blockIdx.y * H;
    if (xb - HX >= 0 && xb + BX * W + HX <= n)
        strip<true>(in, out, ring, n, xb, y0);
    else
        strip<false>(in, out, ring, n, xb, y0);
}}
"""


def reference(field: cp.ndarray, weights: np.ndarray) -> cp.ndarray:
    n, k = field.shape[0], weights.shape[0]
    r = k // 2
    padded = cp.zeros((n + 2 * r, n + 2 * r), dtype=cp.float64)
    padded[r : r + n, r : r + n] = field
    out = cp.zeros_like(field)
    for a in range(k):
        for b in range(k):
            out += float(weights[a, b]) * padded[a : a + n, b : b + n]
    return out


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
    out = cp.empty_like(field)
    copy_ms = time_it(lambda: out.__setitem__(Ellipsis, field), args.repeats)
    floor_ms = copy_ms
    print(f"copy {n}^2 FP64: {copy_ms:.4f} ms = {2 * 8 * n * n / copy_ms / 1e9:.2f} TB/s (the one-step memory floor)")

    variants = [{"kind": "ring", "W": 2, "BX": bx, "H": h, "S": st, "WREG": 0, "MINB": 1, "L2HINT": l2, "STCS": cs}
                for bx in (64, 128, 192) for h in (90, 120, 150) for st in (4, 5) for l2 in (0, 1) for cs in (0, 1)]
    variants += [{"kind": "ring", "W": 4, "BX": bx, "H": 120, "S": 4, "WREG": wr, "MINB": 1, "L2HINT": 0, "STCS": 0}
                 for bx in (128, 256) for wr in (0, 1)]
    variants += [{"kind": "ldg", "W": w, "BX": 128, "H": 120, "YFAST": 0, "PF": pf, "MINB": m}
                 for w, m in ((2, 3), (4, 2)) for pf in (0, 1)]
    if args.quick:
        variants = variants[:1]
    rows = []
    for p in variants:
        t0 = time.perf_counter()
        source = {"ldg": SOURCE, "ring": RING_SOURCE}[p["kind"]].format(R=r, **p)
        module = cp.RawModule(code=source, options=("-std=c++17",))
        kernel = module.get_function("stencil")
        shared = 0
        if p["kind"] != "ldg":
            shared = 8 * p["S"] * (p["BX"] * p["W"] + 2 * (r + (r & 1)))
            kernel.max_dynamic_shared_size_bytes = shared
        build_s = time.perf_counter() - t0
        c_w = cp.ndarray((k * k,), cp.float64, module.get_global("c_w"))
        c_w[...] = cp.asarray(weights.ravel())

        def launch(src, dst, p=p, kernel=kernel):
            m = src.shape[0]
            gx = (m + p["BX"] * p["W"] - 1) // (p["BX"] * p["W"])
            gy = (m + p["H"] - 1) // p["H"]
            grid = (gy, gx) if p.get("YFAST") else (gx, gy)
            kernel(grid, (p["BX"],), (src, dst, np.int32(m)), shared_mem=shared)

        errors = []
        for f, w_ in ((small, want_small), (field, want)):
            got = cp.full_like(f, cp.nan)
            launch(f, got)
            errors.append(float(cp.max(cp.abs(got - w_))))
        ok = all(e < 1e-12 for e in errors)
        ms = time_it(lambda: launch(field, out), args.repeats)
        rows.append({**p, "ms": ms, "ok": ok, "max_err": max(errors), "regs": kernel.num_regs,
                     "spill_bytes": kernel.local_size_bytes, "build_s": round(build_s, 2),
                     "floor_fraction": floor_ms / ms})
        print(json.dumps(rows[-1]), flush=True) if not rows[-1]["ok"] else None
    rows.sort(key=lambda row: (not row["ok"], row["ms"]))
    clocks = subprocess.run(["nvidia-smi", "--query-gpu=name,clocks.sm,clocks.max.sm,power.draw", "--format=csv"],
                            capture_output=True, text=True).stdout
    with open(args.json, "w") as f:
        json.dump({"n": n, "radius": r, "copy_ms": copy_ms, "rows": rows, "nvidia_smi": clocks}, f, indent=1)
    print(clocks)
    print(f"{'kind':>4} {'W':>2} {'BX':>4} {'H':>4} {'S':>2} {'MB':>2} {'L2':>2} {'CS':>2} {'regs':>4} {'spill':>5} {'ms':>7} {'floor%':>6} ok")
    for row in rows[:25]:
        print(f"{row['kind']:>4} {row['W']:>2} {row['BX']:>4} {row['H']:>4} {row.get('S', 0):>2} {row['MINB']:>2} {row.get('L2HINT', 0):>2} {row.get('STCS', 0):>2} "
              f"{row['regs']:>4} {row['spill_bytes']:>5} {row['ms']:7.4f} {100 * row['floor_fraction']:6.1f} {row['ok']}")


if __name__ == "__main__":
    main()
