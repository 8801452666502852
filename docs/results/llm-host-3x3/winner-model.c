#define _GNU_SOURCE
/* stencil2d-host r3 fast path: AVX-512 register blocking 8 output rows x 16 columns (16 zmm
 * accumulators). Interior blocks: each of the 14 source rows is read once with 4 loads (columns
 * j0-8 .. j0+23) and the 7 column-shifted vectors per output vector are built in registers with
 * valignq, then reused by every output row and column offset; weights come as broadcast operands.
 * Blocks touching the grid border use a dj-outer schedule with zero-masked loads (AVX-512 masks
 * suppress faults on masked lanes) and masked stores, which apply the zero padding exactly.
 * Work split: two contiguous halves of the row blocks; the caller computes the first half and a
 * persistent helper pthread (created once, pinned to another CPU of the affinity mask, spin-then-
 * sleep wait on a generation counter) computes the second.
 * dst[i][j] = sum of w[di+r][dj+r] * src[i+di][j+dj] over |di|, |dj| <= r, zero outside the grid. */
#include <stddef.h>
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#include <dlfcn.h>

/* ---------------- generic fallback (any radius) ---------------- */
static inline double point_checked(int n, int r, const double *w, const double *src, int i, int j)
{
    const int k = 2 * r + 1;
    double acc = 0.0;
    for (int di = -r; di <= r; di++) {
        const int y = i + di;
        if (y < 0 || y >= n)
            continue;
        for (int dj = -r; dj <= r; dj++) {
            const int x = j + dj;
            if (x >= 0 && x < n)
                acc += w[(di + r) * k + (dj + r)] * src[(size_t)y * n + x];
        }
    }
    return acc;
}

static void generic_step(int n, int r, const double *w, const double *src, double *dst)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            dst[(size_t)i * n + j] = point_checked(n, r, w, src, i, j);
}

/* ---------------- radius 3 ---------------- */
#define RB 8        /* output rows per block */
#define NT (RB + 6) /* source rows per block */

/* Lanes l in 0..7 with 0 <= a + l < n. */
static inline __mmask8 range_mask(long a, long n)
{
    long lo = -a, hi = n - a;
    if (lo < 0)
        lo = 0;
    if (hi > 8)
        hi = 8;
    if (hi <= lo)
        return (__mmask8)0;
    return (__mmask8)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}

/* acc(r) += w_k * (v0, v1) */
#define FMA2(r, k)                                                                                        \
    a##r##0 = _mm512_fmadd_pd(w##k, v0, a##r##0);                                                         \
    a##r##1 = _mm512_fmadd_pd(w##k, v1, a##r##1);

/* Source row t (0..13) feeds output row r with weight row k = t - r (0..6). */
#define BODY(LD)                                                                                          \
    LD(0)  FMA2(0, 0)                                                                                     \
    LD(1)  FMA2(0, 1) FMA2(1, 0)                                                                          \
    LD(2)  FMA2(0, 2) FMA2(1, 1) FMA2(2, 0)                                                               \
    LD(3)  FMA2(0, 3) FMA2(1, 2) FMA2(2, 1) FMA2(3, 0)                                                    \
    LD(4)  FMA2(0, 4) FMA2(1, 3) FMA2(2, 2) FMA2(3, 1) FMA2(4, 0)                                         \
    LD(5)  FMA2(0, 5) FMA2(1, 4) FMA2(2, 3) FMA2(3, 2) FMA2(4, 1) FMA2(5, 0)                              \
    LD(6)  FMA2(0, 6) FMA2(1, 5) FMA2(2, 4) FMA2(3, 3) FMA2(4, 2) FMA2(5, 1) FMA2(6, 0)                   \
    LD(7)  FMA2(1, 6) FMA2(2, 5) FMA2(3, 4) FMA2(4, 3) FMA2(5, 2) FMA2(6, 1) FMA2(7, 0)                   \
    LD(8)  FMA2(2, 6) FMA2(3, 5) FMA2(4, 4) FMA2(5, 3) FMA2(6, 2) FMA2(7, 1)                              \
    LD(9)  FMA2(3, 6) FMA2(4, 5) FMA2(5, 4) FMA2(6, 3) FMA2(7, 2)                                         \
    LD(10) FMA2(4, 6) FMA2(5, 5) FMA2(6, 4) FMA2(7, 3)                                                    \
    LD(11) FMA2(5, 6) FMA2(6, 5) FMA2(7, 4)                                                               \
    LD(12) FMA2(6, 6) FMA2(7, 5)                                                                          \
    LD(13) FMA2(7, 6)

#define DECL_ACC                                                                                          \
    __m512d a00 = _mm512_setzero_pd(), a01 = _mm512_setzero_pd(), a10 = _mm512_setzero_pd(),              \
            a11 = _mm512_setzero_pd(), a20 = _mm512_setzero_pd(), a21 = _mm512_setzero_pd(),              \
            a30 = _mm512_setzero_pd(), a31 = _mm512_setzero_pd(), a40 = _mm512_setzero_pd(),              \
            a41 = _mm512_setzero_pd(), a50 = _mm512_setzero_pd(), a51 = _mm512_setzero_pd(),              \
            a60 = _mm512_setzero_pd(), a61 = _mm512_setzero_pd(), a70 = _mm512_setzero_pd(),              \
            a71 = _mm512_setzero_pd();

#define DECL_W(dj)                                                                                        \
    const __m512d w0 = _mm512_set1_pd(w[0 * 7 + (dj)]), w1 = _mm512_set1_pd(w[1 * 7 + (dj)]),            \
                  w2 = _mm512_set1_pd(w[2 * 7 + (dj)]), w3 = _mm512_set1_pd(w[3 * 7 + (dj)]),            \
                  w4 = _mm512_set1_pd(w[4 * 7 + (dj)]), w5 = _mm512_set1_pd(w[5 * 7 + (dj)]),            \
                  w6 = _mm512_set1_pd(w[6 * 7 + (dj)]);

/* Interior block: source rows i0-3..i0+10 and columns j0-8..j0+23 all inside the grid.
 * s = src + (i0-3)*n + j0; o = dst + i0*n + j0. */
static void blk_full(const double *w, const double *s, long n, double *o)
{
    __m512d acc[RB][2];
#pragma GCC unroll 8
    for (int r = 0; r < RB; r++) {
        acc[r][0] = _mm512_setzero_pd();
        acc[r][1] = _mm512_setzero_pd();
    }
#pragma GCC unroll 14
    for (int t = 0; t < NT; t++) {
        const double *q = s + (long)t * n;
        const __m512i x0 = _mm512_castpd_si512(_mm512_loadu_pd(q - 8));
        const __m512i x1 = _mm512_castpd_si512(_mm512_loadu_pd(q));
        const __m512i x2 = _mm512_castpd_si512(_mm512_loadu_pd(q + 8));
        const __m512i x3 = _mm512_castpd_si512(_mm512_loadu_pd(q + 16));
#pragma GCC unroll 2
        for (int c = 0; c < 2; c++) {
            const __m512i P = c ? x1 : x0; /* columns j0+8c-8 .. j0+8c-1  */
            const __m512i M = c ? x2 : x1; /* columns j0+8c   .. j0+8c+7  */
            const __m512i N = c ? x3 : x2; /* columns j0+8c+8 .. j0+8c+15 */
            __m512d sv[7]; /* sv[dj][l] = row[j0 + 8c + l + dj - 3] */
            sv[0] = _mm512_castsi512_pd(_mm512_alignr_epi64(M, P, 5));
            sv[1] = _mm512_castsi512_pd(_mm512_alignr_epi64(M, P, 6));
            sv[2] = _mm512_castsi512_pd(_mm512_alignr_epi64(M, P, 7));
            sv[3] = _mm512_castsi512_pd(M);
            sv[4] = _mm512_castsi512_pd(_mm512_alignr_epi64(N, M, 1));
            sv[5] = _mm512_castsi512_pd(_mm512_alignr_epi64(N, M, 2));
            sv[6] = _mm512_castsi512_pd(_mm512_alignr_epi64(N, M, 3));
#pragma GCC unroll 7
            for (int dj = 0; dj < 7; dj++)
#pragma GCC unroll 8
                for (int r = 0; r < RB; r++)
                    if (t - r >= 0 && t - r <= 6)
                        acc[r][c] = _mm512_fmadd_pd(_mm512_set1_pd(w[(t - r) * 7 + dj]), sv[dj], acc[r][c]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < RB; r++) {
        _mm512_storeu_pd(o + (long)r * n, acc[r][0]);
        _mm512_storeu_pd(o + (long)r * n + 8, acc[r][1]);
    }
}

/* Border block: rp[t] is source row i0-3+t (any valid pointer when rm[t] == 0), rm[t] 0xFF when that
 * row exists; op[r] is output row i0+r (any valid pointer when om[r] == 0), om[r] 0xFF when it exists. */
static void blk_mask(const double *w, const double *const *rp, const __mmask8 *rm, double *const *op,
                     const __mmask8 *om, long n, long j0)
{
    DECL_ACC
    for (int dj = 0; dj < 7; dj++) {
        DECL_W(dj)
        const long x0 = j0 + dj - 3;
        const __mmask8 cm0 = range_mask(x0, n), cm1 = range_mask(x0 + 8, n);
        __m512d v0, v1;
#define LDM(t)                                                                                            \
    v0 = _mm512_maskz_loadu_pd((__mmask8)(cm0 & rm[t]), rp[t] + x0);                                      \
    v1 = _mm512_maskz_loadu_pd((__mmask8)(cm1 & rm[t]), rp[t] + x0 + 8);
        BODY(LDM)
#undef LDM
    }
    const __mmask8 sm0 = range_mask(j0, n), sm1 = range_mask(j0 + 8, n);
#define STM(r)                                                                                            \
    _mm512_mask_storeu_pd(op[r] + j0, (__mmask8)(sm0 & om[r]), a##r##0);                                  \
    _mm512_mask_storeu_pd(op[r] + j0 + 8, (__mmask8)(sm1 & om[r]), a##r##1);
    STM(0) STM(1) STM(2) STM(3) STM(4) STM(5) STM(6) STM(7)
#undef STM
}

/* All outputs of rows i0 .. min(i0 + RB, n) - 1. */
static void rowblock(long n, const double *w, const double *src, double *dst, long i0)
{
    const int rows_full = (i0 >= 3 && i0 + RB + 3 <= n);
    const double *rp[NT];
    __mmask8 rm[NT];
    double *op[RB];
    __mmask8 om[RB];
    for (int t = 0; t < NT; t++) {
        const long y = i0 - 3 + t;
        const int ok = (y >= 0 && y < n);
        rp[t] = ok ? src + y * n : src;
        rm[t] = ok ? (__mmask8)0xFF : (__mmask8)0;
    }
    for (int r = 0; r < RB; r++) {
        const long y = i0 + r;
        const int ok = (y < n);
        op[r] = ok ? dst + y * n : dst;
        om[r] = ok ? (__mmask8)0xFF : (__mmask8)0;
    }
    for (long j0 = 0; j0 < n; j0 += 16) {
        if (rows_full && j0 >= 8 && j0 + 24 <= n)
            blk_full(w, src + (i0 - 3) * n + j0, n, dst + i0 * n + j0);
        else
            blk_mask(w, rp, rm, op, om, n, j0);
    }
}

/* Row blocks [b0, b1). */
static void run_blocks(long n, const double *w, const double *src, double *dst, int b0, int b1)
{
    for (int b = b0; b < b1; b++)
        rowblock(n, w, src, dst, (long)b * RB);
}

/* ---------------- persistent helper thread ---------------- */
struct job {
    long n;
    const double *w, *src;
    double *dst;
    int b0, b1;
};

static struct job g_job;                      /* published by a release store to g_gen */
static atomic_ulong g_gen = 0;                /* generation of the latest job */
static atomic_ulong g_done = 0;               /* generation of the latest finished job */
static pthread_mutex_t g_mtx = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_helper_ok = 0;                   /* 1 once the helper runs */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *helper_main(void *arg)
{
    (void)arg;
    unsigned long seen = 0;
    for (;;) {
        unsigned long g = atomic_load_explicit(&g_gen, memory_order_acquire);
        if (g == seen) {
            /* spin for up to ~200 us, then sleep on the condition variable */
            const double t0 = now_s();
            int k = 0;
            while ((g = atomic_load_explicit(&g_gen, memory_order_acquire)) == seen) {
                _mm_pause();
                if (++k == 256) {
                    k = 0;
                    if (now_s() - t0 > 200e-6)
                        break;
                }
            }
            if (g == seen) {
                pthread_mutex_lock(&g_mtx);
                while ((g = atomic_load_explicit(&g_gen, memory_order_acquire)) == seen)
                    pthread_cond_wait(&g_cv, &g_mtx);
                pthread_mutex_unlock(&g_mtx);
            }
        }
        seen = g;
        const struct job j = g_job;
        run_blocks(j.n, j.w, j.src, j.dst, j.b0, j.b1);
        atomic_store_explicit(&g_done, g, memory_order_release);
    }
    return NULL;
}

static void helper_start(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0 || CPU_COUNT(&set) < 2)
        return; /* one CPU only: stay single-threaded */
    /* the helper lives as long as the process: keep this library mapped even if it is dlclose()d */
    Dl_info info;
    if (dladdr((void *)&helper_main, &info) != 0 && info.dli_fname != NULL) {
        void *h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
        if (h == NULL)
            return; /* cannot pin the library in memory: stay single-threaded */
    }
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0)
        return;
    /* pin the helper to a CPU of the mask other than the caller's current one */
    const int me = sched_getcpu();
    int target = -1;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &set) && cpu != me) {
            target = cpu;
            break;
        }
    if (target >= 0) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(target, &one);
        pthread_attr_setaffinity_np(&attr, sizeof(one), &one);
    }
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t th;
    if (pthread_create(&th, &attr, helper_main, NULL) == 0)
        g_helper_ok = 1;
    pthread_attr_destroy(&attr);
}

static void step3(int n, const double *w, const double *src, double *dst)
{
    const int nb = (n + RB - 1) / RB;
    if (n >= 128)
        pthread_once(&g_once, helper_start);
    if (n < 128 || !g_helper_ok) {
        run_blocks((long)n, w, src, dst, 0, nb);
        return;
    }
    const int half = nb / 2;
    g_job.n = (long)n;
    g_job.w = w;
    g_job.src = src;
    g_job.dst = dst;
    g_job.b0 = half;
    g_job.b1 = nb;
    pthread_mutex_lock(&g_mtx);
    const unsigned long g = atomic_load_explicit(&g_gen, memory_order_relaxed) + 1;
    atomic_store_explicit(&g_gen, g, memory_order_release);
    pthread_cond_signal(&g_cv);
    pthread_mutex_unlock(&g_mtx);

    run_blocks((long)n, w, src, dst, 0, half);

    int k = 0;
    while (atomic_load_explicit(&g_done, memory_order_acquire) != g) {
        _mm_pause();
        if (++k == 4096) {
            k = 0;
            sched_yield(); /* let the helper run if it shares our CPU */
        }
    }
}

int hiera_stencil2d(int n, int radius, int steps, const double *weights, const double *in, double *out,
                    double *scratch)
{
    if (n < 1 || radius < 0 || steps < 1 || !weights || !in || !out)
        return 1;
    if (steps > 1 && !scratch)
        return 1;
    double wl[49];
    if (radius == 3)
        for (int k = 0; k < 49; k++)
            wl[k] = weights[k];
    /* Ping-pong between scratch and out so that the last step writes out; in is only read. */
    const double *src = in;
    for (int s = 0; s < steps; s++) {
        double *dst = (steps - s) % 2 ? out : scratch;
        if (radius == 3)
            step3(n, wl, src, dst);
        else
            generic_step(n, radius, weights, src, dst);
        src = dst;
    }
    return 0;
}
