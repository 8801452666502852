/* Measures this machine's peaks for the roofline: copy bandwidth (read + write) and FP64 fused
   multiply-add rate, of all cores. Prints "<GB/s> <GFLOP/s>".
   The peaks bound what a candidate may reach, so they must not be underestimated when other work shares
   the machine: an OpenMP loop over all cores waits for its slowest thread, and one busy core makes it
   look like a slow machine. So each figure is the larger of all threads at once and one thread (its rate
   times the threads, for the FMA figure: cores do not share FMA units), each the best of its trials. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#define ELEMENTS (16L * 1024 * 1024) /* 128 MiB per array: far beyond the last-level cache */
#define CHAINS 12
#define ITERATIONS 400000000L

typedef double vec __attribute__((vector_size(32)));

static double copy_gbps(int threads) {
    omp_set_num_threads(threads);
    double *a = malloc(ELEMENTS * sizeof(double)), *b = malloc(ELEMENTS * sizeof(double));
#pragma omp parallel for
    for (long i = 0; i < ELEMENTS; i++) { a[i] = (double)i; b[i] = 0.0; }
    double best = 1e30;
    for (int trial = 0; trial < 20; trial++) {
        double t = omp_get_wtime();
#pragma omp parallel for
        for (long i = 0; i < ELEMENTS; i++) b[i] = a[i];
        t = omp_get_wtime() - t;
        if (t < best) best = t;
    }
    double sink = b[ELEMENTS / 3];
    free(a); free(b);
    return 2.0 * ELEMENTS * sizeof(double) / best / 1e9 + 0.0 * sink;
}

static double fma_gflops(int threads) {
    omp_set_num_threads(threads);
    double best = 1e30, sink = 0.0;
    for (int trial = 0; trial < 3; trial++) {
        double t = omp_get_wtime();
#pragma omp parallel reduction(+ : sink)
        {
            vec acc[CHAINS], x = {1.0000001, 1.0000002, 1.0000003, 1.0000004}, y = {1e-9, 2e-9, 3e-9, 4e-9};
            for (int k = 0; k < CHAINS; k++) acc[k] = x * (double)(k + omp_get_thread_num());
            for (long it = 0; it < ITERATIONS / CHAINS; it++)
                for (int k = 0; k < CHAINS; k++) acc[k] = acc[k] * x + y;
            for (int k = 0; k < CHAINS; k++) sink += acc[k][0] + acc[k][3];
        }
        t = omp_get_wtime() - t;
        if (t < best) best = t;
    }
    double flops = 2.0 * 4 * (ITERATIONS / CHAINS) * CHAINS * threads;
    return flops / best / 1e9 + 0.0 * sink;
}

int main(void) {
    int all = omp_get_max_threads();
    double gbps = copy_gbps(all), one_gbps = copy_gbps(1);
    double gflops = fma_gflops(all), one_gflops = fma_gflops(1) * all;
    printf("%.3f %.3f\n", gbps > one_gbps ? gbps : one_gbps, gflops > one_gflops ? gflops : one_gflops);
    return 0;
}
