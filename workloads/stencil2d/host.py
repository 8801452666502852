"""The stencil's host side: the C contract, the expert template and the judge's harness."""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from typing import Any, ClassVar, cast

import numpy as np

from hiera_core.protocols import Knob
from hiera_core.records import Contract, Task
from hiera_workloads.stencil2d.reference import (
    CHECK_SEEDS,
    FIELD_RANGE,
    REMEASURE_SEEDS,
    SPIKES,
    describe_inputs,
    draw_weights,
    reference,
)

SOURCE_FILENAME = "host_source.c"
SYMBOL = "hiera_stencil2d"
DECLARATION = (
    "int hiera_stencil2d(int n, int radius, int steps, const double *weights,\n"
    "                    const double *in, double *out, double *scratch);"
)
HEADER = f"""\
/* The stencil2d host contract: the one symbol a candidate defines. */
#ifndef HIERA_STENCIL2D_H
#define HIERA_STENCIL2D_H

{DECLARATION}

#endif
"""
TOLERANCE = (1e-10, 1e-10)
"""(rtol, atol) of the host check. Fields are at most 100 in magnitude and the weights sum to 1, so
FP64 summation-order differences stay below ~1e-12; an indexing or boundary bug moves outputs by far
more than 1e-10."""
CACHE_N = 128
"""The cache-resident grid: in + out are 256 KiB, inside any current core's L2."""


def grid(task: Task) -> int:
    """The side of the grid the host runs: the task's `host_n` (the host is ~100x slower than a GPU)."""
    return task.params["host_n"]


def contract(task: Task) -> Contract:
    """The frozen host contract of `task`: `hiera_stencil2d` in C, declared in `stencil2d.h`."""
    p = task.params
    interface = f"""\
{DECLARATION}

Apply a (2*radius+1) x (2*radius+1) box stencil `steps` times to the n x n FP64 grid `in`:
    next[i][j] = sum over di, dj in [-radius, radius] of
                 weights[(di + radius) * (2*radius + 1) + (dj + radius)] * cur[i + di][j + dj]
where cur[y][x] is 0 outside 0 <= y, x < n (zero padding). `in`, `out` and `scratch` are n*n
row-major doubles that do not overlap; the last step's result goes to `out`; `in` must not be
written; `scratch` may be overwritten (e.g. to ping-pong between steps). Return 0 on success,
nonzero on invalid arguments. `weights` holds any positive values summing to 1: the checks draw
new ones for every input, so read them, never assume the task's own. Compute in FP64; any summation
order passes (rtol={TOLERANCE[0]:g}, atol={TOLERANCE[1]:g}). This task calls it with n={grid(task)}, radius={p["radius"]} and steps={p["steps"]}, and
checks it on smaller grids too, down to n=1."""
    return Contract(source_filename=SOURCE_FILENAME, interface=interface, files={"stencil2d.h": HEADER})


def seed(task: Task) -> tuple[str, dict[str, Any], str]:
    """The naive kernel: the template with every knob at its default."""
    template = HostStencilTemplate()
    params = template.defaults()
    return template.render(params), params, template.describe(params)


def templates(task: Task) -> list[HostStencilTemplate]:
    return [HostStencilTemplate()]


def inputs(task: Task) -> str:
    """What the judge feeds a candidate, from the harness's own cases."""
    h = harness(task)
    return describe_inputs(
        field="in",
        radius=h.radius,
        steps=h.steps,
        cases=h.correctness_cases(False),
        remeasure_cases=h.correctness_cases(True),
        timed=h.timing_case()["n"],
    )


def harness(task: Task) -> HostStencilHarness:
    p = task.params
    return HostStencilHarness(n=grid(task), radius=p["radius"], steps=p["steps"])


class HostStencilTemplate:
    """The C kernels an expert writes for the stencil, from the naive seed to blocked OpenMP code.

    Every combination of knob values renders a complete `host_source.c` that works for any n >= 1,
    radius >= 0 and steps >= 1.
    """

    name = "stencil2d-host"
    knobs: ClassVar[dict[str, Knob]] = {
        "boundary": Knob(values=("checked", "split"), direction="C", space="pure_cuda"),
        "loop_order": Knob(values=("taps_inner", "row_streaming"), direction="M", space="pure_cuda"),
        "unroll": Knob(values=(1, 2, 4, 8), direction="T", space="pure_cuda"),
        "block_cols": Knob(values=(0, 512, 256, 128), direction="R", space="pure_cuda"),
        "threads": Knob(values=(1, 0, 2), direction="P", space="cuda_libraries"),
    }

    def defaults(self) -> dict[str, Any]:
        return {name: knob.values[0] for name, knob in self.knobs.items()}

    def describe(self, params: Mapping[str, Any]) -> str:
        """`name knob=value ...` with the knobs that shape the source (boundary is moot when streaming)."""
        shown = [k for k in self.knobs if not (k == "boundary" and params["loop_order"] == "row_streaming")]
        return " ".join([self.name, *(f"{k}={params[k]}" for k in shown)])

    def render(self, params: Mapping[str, Any]) -> str:
        for name, knob in self.knobs.items():
            if params.get(name) not in knob.values:
                raise ValueError(f"knob {name}={params.get(name)!r} is not one of {knob.values}")
        unroll, block_cols, threads = params["unroll"], params["block_cols"], params["threads"]
        streaming = params["loop_order"] == "row_streaming"
        split = params["boundary"] == "split" and not streaming

        includes = "#include <stddef.h>\n" + "#include <omp.h>\n" * (threads != 1)
        parts = [f"/* {self.describe(params)}\n * {_SUMMARY} */\n{includes}"]
        defines = ""
        if unroll > 1:
            defines += f"#define UNROLL {unroll}\n"
        if block_cols:
            defines += f"#define BLOCK_COLS {block_cols}\n"
        if defines:
            parts.append(defines)
        if split or streaming or block_cols:
            parts.append(_MINMAX)
        if streaming:
            parts += [_STREAM_ROW] if unroll == 1 else [_STREAM_TAPS, _stream_block(unroll)]
        else:
            parts.append(_POINT_CHECKED)
            if unroll > 1 and not split:
                parts.append(_POINTS_CHECKED)
            if split:
                parts.append(_POINT_INTERIOR)
                parts += [_POINTS_INTERIOR, _ROW_SPLIT_UNROLLED] if unroll > 1 else [_ROW_SPLIT]
            else:
                parts.append(_ROW_CHECKED_UNROLLED if unroll > 1 else _ROW_CHECKED)
        parts += [_stencil_step(streaming, unroll, block_cols, threads), _ENTRY]
        return "\n".join(parts)


_SUMMARY = "dst[i][j] = sum of w[di+r][dj+r] * src[i+di][j+dj] over |di|, |dj| <= r, zero outside the grid."

_MINMAX = """\
static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }
"""

_POINT_CHECKED = """\
/* One output, with a bounds test on every tap. */
static inline double point_checked(int n, int r, const double *w, const double *src, int i, int j)
{
    const int k = 2 * r + 1;
    double acc = 0.0;
    for (int di = -r; di <= r; di++)
        for (int dj = -r; dj <= r; dj++) {
            const int y = i + di, x = j + dj;
            if (y >= 0 && y < n && x >= 0 && x < n)
                acc += w[(di + r) * k + (dj + r)] * src[(size_t)y * n + x];
        }
    return acc;
}
"""

_POINTS_CHECKED = """\
/* UNROLL consecutive outputs (i, j..j+UNROLL-1) in registers, each weight loaded once for all. */
static inline void points_checked(int n, int r, const double *w, const double *src, int i, int j,
                                  double *restrict out)
{
    const int k = 2 * r + 1;
    double acc[UNROLL] = {0.0};
    for (int di = -r; di <= r; di++) {
        const int y = i + di;
        for (int dj = -r; dj <= r; dj++) {
            const double wt = w[(di + r) * k + (dj + r)];
            for (int u = 0; u < UNROLL; u++) {
                const int x = j + u + dj;
                if (y >= 0 && y < n && x >= 0 && x < n)
                    acc[u] += wt * src[(size_t)y * n + x];
            }
        }
    }
    for (int u = 0; u < UNROLL; u++)
        out[u] = acc[u];
}
"""

_POINT_INTERIOR = """\
/* One output whose taps all lie inside the grid: no tests. */
static inline double point_interior(int n, int r, const double *w, const double *src, int i, int j)
{
    const int k = 2 * r + 1;
    double acc = 0.0;
    for (int di = -r; di <= r; di++) {
        const double *row = src + (size_t)(i + di) * n + j;
        const double *wrow = w + (di + r) * k + r;
        for (int dj = -r; dj <= r; dj++)
            acc += wrow[dj] * row[dj];
    }
    return acc;
}
"""

_POINTS_INTERIOR = """\
/* UNROLL consecutive interior outputs (i, j..j+UNROLL-1) in registers: each weight is loaded once
 * for all of them and neighbouring outputs share their input loads. */
static inline void points_interior(int n, int r, const double *w, const double *src, int i, int j,
                                   double *restrict out)
{
    const int k = 2 * r + 1;
    double acc[UNROLL] = {0.0};
    for (int di = -r; di <= r; di++) {
        const double *row = src + (size_t)(i + di) * n + j;
        const double *wrow = w + (di + r) * k + r;
        for (int dj = -r; dj <= r; dj++) {
            const double wt = wrow[dj];
            for (int u = 0; u < UNROLL; u++)
                acc[u] += wt * row[u + dj];
        }
    }
    for (int u = 0; u < UNROLL; u++)
        out[u] = acc[u];
}
"""

_ROW_CHECKED = """\
/* Outputs (i, j0..j1-1) of one row. */
static void stencil_row(int n, int r, const double *w, const double *src, double *restrict d, int i,
                        int j0, int j1)
{
    for (int j = j0; j < j1; j++)
        d[j] = point_checked(n, r, w, src, i, j);
}
"""

_ROW_CHECKED_UNROLLED = """\
/* Outputs (i, j0..j1-1) of one row, UNROLL at a time. */
static void stencil_row(int n, int r, const double *w, const double *src, double *restrict d, int i,
                        int j0, int j1)
{
    int j = j0;
    for (; j + UNROLL <= j1; j += UNROLL)
        points_checked(n, r, w, src, i, j, d + j);
    for (; j < j1; j++)
        d[j] = point_checked(n, r, w, src, i, j);
}
"""

_ROW_SPLIT_HEAD = """\
/* Outputs (i, j0..j1-1) of one row: interior columns (all taps inside the grid) run without tests,
 * the border (first and last r rows and columns) with them. */
static void stencil_row(int n, int r, const double *w, const double *src, double *restrict d, int i,
                        int j0, int j1)
{
    const int interior_row = i >= r && i < n - r;
    const int a = interior_row ? imin(imax(r, j0), j1) : j1; /* interior columns: [a, b) */
    const int b = interior_row ? imin(imax(n - r, a), j1) : j1;
    int j = j0;
    for (; j < a; j++)
        d[j] = point_checked(n, r, w, src, i, j);
"""

_ROW_SPLIT_TAIL = """\
    for (; j < b; j++)
        d[j] = point_interior(n, r, w, src, i, j);
    for (; j < j1; j++)
        d[j] = point_checked(n, r, w, src, i, j);
}
"""

_ROW_SPLIT = _ROW_SPLIT_HEAD + _ROW_SPLIT_TAIL

_ROW_SPLIT_UNROLLED = (
    _ROW_SPLIT_HEAD
    + """\
    for (; j + UNROLL <= b; j += UNROLL)
        points_interior(n, r, w, src, i, j, d + j);
"""
    + _ROW_SPLIT_TAIL
)

_STREAM_ROW = """\
/* Output row i, columns j0..j1-1: zero it, then add one tap at a time, streaming along j over the
 * columns whose input j + dj lies inside the grid (no tests, vectorised). */
static void stream_row(int n, int r, const double *w, const double *restrict src, double *restrict d,
                       int i, int j0, int j1)
{
    const int k = 2 * r + 1;
    for (int j = j0; j < j1; j++)
        d[j] = 0.0;
    for (int y = imax(i - r, 0); y <= imin(i + r, n - 1); y++) {
        const double *s = src + (size_t)y * n;
        for (int dj = -r; dj <= r; dj++) {
            const double wt = w[(y - i + r) * k + (dj + r)];
            const int lo = imax(j0, -dj), hi = imin(j1, n - dj);
#pragma GCC ivdep
            for (int j = lo; j < hi; j++)
                d[j] += wt * s[j + dj];
        }
    }
}
"""

_STREAM_TAPS = """\
/* m output rows d[0..m-1] take one tap of input row s, each load of s feeding all m. Called with a
 * constant m, so the m updates become one vectorised loop. */
static inline void stream_taps(int m, double *const *d, const double *wcol, const double *restrict s,
                               int dj, int lo, int hi)
{
#pragma GCC ivdep
    for (int j = lo; j < hi; j++) {
        const double v = s[j + dj];
        for (int u = 0; u < m; u++)
            d[u][j] += wcol[u] * v;
    }
}
"""


def _stream_block(unroll: int) -> str:
    cases = "".join(
        f"            case {m}: stream_taps({m}, d + u0, wcol, s, dj, lo, hi); break;\n" for m in range(1, unroll + 1)
    )
    return f"""\
/* Output rows i..i+rows-1 (rows <= UNROLL), columns j0..j1-1: each input row within r of them is
 * streamed once per dj and feeds every output row it reaches. */
static void stream_block(int n, int r, const double *w, const double *src, double *dst, int i, int rows,
                         int j0, int j1)
{{
    const int k = 2 * r + 1;
    double *d[UNROLL];
    for (int u = 0; u < rows; u++) {{
        d[u] = dst + (size_t)(i + u) * n;
        for (int j = j0; j < j1; j++)
            d[u][j] = 0.0;
    }}
    for (int y = imax(i - r, 0); y < imin(i + rows + r, n); y++) {{
        const double *s = src + (size_t)y * n;
        const int u0 = imax(y - i - r, 0), u1 = imin(y - i + r + 1, rows); /* rows y reaches */
        for (int dj = -r; dj <= r; dj++) {{
            double wcol[UNROLL];
            for (int u = u0; u < u1; u++)
                wcol[u - u0] = w[(y - i - u + r) * k + (dj + r)];
            const int lo = imax(j0, -dj), hi = imin(j1, n - dj);
            switch (u1 - u0) {{
{cases}            }}
        }}
    }}
}}
"""


_BLOCKS_COMMENT = "/* Column blocks: the 2r+1 input rows of a block stay in cache from one output row to the next."
_STATIC_COMMENT = " * Static scheduling keeps each thread on the same rows in every block: no waiting between blocks."


def _stencil_step(streaming: bool, unroll: int, block_cols: int, threads: int) -> str:
    cols = "jb, je" if block_cols else "0, n"
    if streaming and unroll > 1:
        rows = f"for (int i = 0; i < n; i += UNROLL)\n    stream_block(n, r, w, src, dst, i, imin(UNROLL, n - i), {cols});"
    else:
        row = "stream_row" if streaming else "stencil_row"
        rows = f"for (int i = 0; i < n; i++)\n    {row}(n, r, w, src, dst + (size_t)i * n, i, {cols});"
    team = " num_threads(2)" * (threads == 2)
    if block_cols and threads == 1:
        rows = f"{_BLOCKS_COMMENT} */\nfor (int jb = 0; jb < n; jb += BLOCK_COLS) {{\n" + _blocked(rows)
    elif block_cols:
        rows = (
            f"{_BLOCKS_COMMENT}\n{_STATIC_COMMENT} */\n#pragma omp parallel{team}\n"
            "for (int jb = 0; jb < n; jb += BLOCK_COLS) {\n" + _blocked("#pragma omp for schedule(static) nowait\n" + rows)
        )
    elif threads != 1:
        rows = f"#pragma omp parallel for schedule(static){team}\n" + rows
    return f"""\
/* One application of the stencil: dst = W * src. */
static void stencil_step(int n, int r, const double *w, const double *src, double *dst)
{{
{_indent(rows)}
}}
"""


def _blocked(rows: str) -> str:
    """The body of the column-block loop around `rows`, with its closing brace."""
    return "    const int je = imin(jb + BLOCK_COLS, n);\n" + _indent(rows) + "\n}"


def _indent(text: str) -> str:
    return "\n".join(line if line.startswith("#") else "    " + line for line in text.splitlines())


_ENTRY = """\
int hiera_stencil2d(int n, int radius, int steps, const double *weights, const double *in, double *out,
                    double *scratch)
{
    if (n < 1 || radius < 0 || steps < 1)
        return 1;
    /* Ping-pong between scratch and out so that the last step writes out; in is only read. */
    const double *src = in;
    for (int s = 0; s < steps; s++) {
        double *dst = (steps - s) % 2 ? out : scratch;
        stencil_step(n, radius, weights, src, dst);
        src = dst;
    }
    return 0;
}
"""


class HostStencilHarness:
    """What the host judge and runner need to check and time `hiera_stencil2d` candidates of one task.

    A case is a JSON-able dict: `label`, `n` (the grid side) and `first_seed_only` (the task-size case
    is checked with the first seed only, to keep the check fast; the others with every seed). The
    judge combines each case with `seeds(remeasure)` and every distribution. Every input is drawn per seed,
    the weights too (any positive values summing to 1, as the contract states); the radius and
    steps are fixed per task and held here, not in the inputs.
    """

    symbol = SYMBOL
    distributions = ("uniform", "spiky")
    tolerance = TOLERANCE
    reference_engine = f"NumPy {np.__version__} (FP64 shifted adds)"

    def __init__(self, *, n: int, radius: int, steps: int) -> None:
        self.n = n
        self.radius = radius
        self.steps = steps
        self._scratch: dict[int, np.ndarray] = {}

    def correctness_cases(self, remeasure: bool) -> list[dict[str, Any]]:
        """The task grid, an odd size that is no multiple of any unroll or block, and a grid smaller
        than the stencil (2r-1, or 1 when remeasuring: fresh shapes as well as fresh seeds)."""
        odd, tiny = (53, 1) if remeasure else (37, 2 * self.radius - 1)
        return [
            {"label": "task", "n": self.n, "first_seed_only": True},
            {"label": "odd", "n": odd, "first_seed_only": False},
            {"label": "tiny", "n": tiny, "first_seed_only": False},
        ]

    def seeds(self, remeasure: bool) -> tuple[int, ...]:
        return REMEASURE_SEEDS if remeasure else CHECK_SEEDS

    def make_inputs(self, case: Mapping[str, Any], seed: int, distribution: str) -> dict[str, np.ndarray]:
        """`field`: uniform in [-1, 1], or spiky: 1% of the points (at least one) at +-[1, 100], the rest 0;
        `weights`: positive, summing to 1."""
        if distribution not in self.distributions:
            raise ValueError(f"unknown distribution {distribution!r}; known: {', '.join(self.distributions)}")
        n = case["n"]
        rng = np.random.default_rng([seed, n, self.distributions.index(distribution)])
        weights = draw_weights(self.radius, rng)
        if distribution == "uniform":
            return {"field": rng.uniform(*cast("tuple[float, float]", FIELD_RANGE), size=(n, n)), "weights": weights}
        fraction, low, high = SPIKES
        field = np.zeros(n * n)
        spikes = rng.choice(n * n, size=max(n * n // round(1 / fraction), 1), replace=False)
        field[spikes] = rng.uniform(low, high, size=spikes.size) * rng.choice((-1.0, 1.0), size=spikes.size)
        return {"field": field.reshape(n, n), "weights": weights}

    def reference(self, case: Mapping[str, Any], inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        return reference(inputs["field"], inputs["weights"], self.steps)

    def output(self, case: Mapping[str, Any]) -> np.ndarray:
        return np.empty((case["n"], case["n"]))

    def call(self, lib: ctypes.CDLL, case: Mapping[str, Any], inputs: Mapping[str, np.ndarray], out: np.ndarray) -> None:
        n = case["n"]
        scratch = self._scratch.get(n)
        if scratch is None:
            scratch = self._scratch[n] = np.empty((n, n))
        kernel = getattr(lib, self.symbol)
        kernel.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int, *[ctypes.c_void_p] * 4)
        kernel.restype = ctypes.c_int
        grids = [_data(array, (n, n)) for array in (inputs["field"], out, scratch)]
        k = 2 * self.radius + 1
        status = kernel(n, self.radius, self.steps, _data(inputs["weights"], (k, k)), *grids)
        if status != 0:
            raise RuntimeError(f"{self.symbol} returned {status} for n={n}")

    def timing_case(self) -> dict[str, Any]:
        return {"label": "task", "n": self.n, "first_seed_only": True}

    def cache_case(self) -> dict[str, Any]:
        """A grid whose in and out fit in L2 together (256 KiB)."""
        return {"label": "cache", "n": CACHE_N, "first_seed_only": True}

    def points(self, case: Mapping[str, Any]) -> int:
        """Grid points updated by one call."""
        return case["n"] ** 2 * self.steps


def _data(array: np.ndarray, shape: tuple[int, ...]) -> int:
    """The address of `array`, after checking that C code may read it as `shape` FP64 values."""
    if array.shape != shape or array.dtype != np.float64 or not array.flags.c_contiguous:
        raise ValueError(f"expected a C-contiguous float64 array of shape {shape}, got {array.dtype} {array.shape}")
    return array.ctypes.data
