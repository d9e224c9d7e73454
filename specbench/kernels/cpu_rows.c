/* y[M, N] = x[M, K] @ w[N, K]^T in float32 for a few rows (the CPU's decode and verify products), on a copy of w
 * packed as [ceil(N / 16), K, 16] (16 output columns side by side for each k; cpu_rows.pack). Each output is summed
 * over k = 0, 1, ..., K - 1 in that order, one multiply-add a step (fused where the CPU has FMA: -ffp-contract=fast
 * contracts `acc += w * x` alike in every kernel below; tests/kernels/test_cpu_rows.py checks the bits), so a row's
 * result is bit for bit what it gets alone, whatever M, the other rows, or N's split between threads.
 * The packed weight is streamed once for all M rows (at most ROWS_MAX a pass, below), prefetched ahead; the rows
 * stay in cache.
 * Built and loaded by specbench/kernels/cpu_rows.py. */
#include <stdint.h>
#include <string.h>

/* the vector the CPU has registers for: 16 floats with AVX-512 (32 registers), else 8 (AVX2's 16 registers; a
 * 16-float vector there was lowered through memory: 20x slower at 6 rows, -march=haswell on the Xeon of
 * experiments/cpu/intel-noamx-run2/, products_isa.txt). A block of 16 columns is SUB such vectors; each lane is one
 * output, so the width changes nothing in its sum (the bits were the same either way there). */
#ifdef __AVX512F__
#define VW 16
#else
#define VW 8
#endif
#define SUB (16 / VW)
typedef float vf __attribute__((vector_size(VW * 4)));
/* how many k ahead each block's weights are prefetched (0: none). The hardware's own prefetch follows the G blocks'
 * streams less well the more rows there are: SmolLM2-135M's products in forward order on the Intel Xeon without AMX
 * of experiments/cpu/intel-noamx-run2/ (products_sweep.txt) took 25.9 / 26.0 ms a pass at 6 / 8 rows with it,
 * 28.0 / 31.9 without (1 row: 22.7, 22.4). 32 ahead (2 KB a block) read best of 16, 32, 64 and 128 there, within
 * that machine's noise. */
#ifndef PREFETCH_K
#define PREFETCH_K 32
#endif

/* G blocks of 16 columns (from block b) against M rows of x: G * M * SUB independent sums in registers */
#define KERNEL(M, G)                                                                                        \
    static void kernel_##M##_##G(const float *x, const float *wp, float *y, int64_t b, int64_t N,          \
                                 int64_t K) {                                                              \
        vf acc[G][M][SUB];                                                                                 \
        for (int g = 0; g < G; g++)                                                                        \
            for (int m = 0; m < M; m++)                                                                    \
                for (int s = 0; s < SUB; s++) acc[g][m][s] = (vf){0};                                      \
        const float *w = wp + b * K * 16;                                                                  \
        for (int64_t k = 0; k < K; k++) {                                                                  \
            vf wv[G][SUB];                                                                                 \
            for (int g = 0; g < G; g++) {                                                                  \
                for (int s = 0; s < SUB; s++) memcpy(&wv[g][s], w + (g * K + k) * 16 + s * VW, sizeof(vf)); \
                if (PREFETCH_K) __builtin_prefetch(w + (g * K + k + PREFETCH_K) * 16);                     \
            }                                                                                              \
            for (int m = 0; m < M; m++) {                                                                  \
                const float xs = x[m * K + k];                                                             \
                for (int g = 0; g < G; g++)                                                                \
                    for (int s = 0; s < SUB; s++) acc[g][m][s] += wv[g][s] * xs;                           \
            }                                                                                              \
        }                                                                                                  \
        for (int g = 0; g < G; g++) {                                                                      \
            const int64_t n0 = (b + g) * 16, cols = N - n0 < 16 ? N - n0 : 16;                            \
            for (int m = 0; m < M; m++) {                                                                  \
                float out[16];                                                                             \
                memcpy(out, acc[g][m], sizeof out);                                                        \
                memcpy(y + m * N + n0, out, cols * sizeof(float));                                         \
            }                                                                                              \
        }                                                                                                  \
    }

KERNEL(1, 1) KERNEL(2, 1) KERNEL(3, 1) KERNEL(4, 1) KERNEL(5, 1) KERNEL(6, 1) KERNEL(7, 1) KERNEL(8, 1)

typedef void (*kernel_fn)(const float *, const float *, float *, int64_t, int64_t, int64_t);
/* how many blocks a pass takes together for M rows (enough sums in flight to hide an add's latency, within the
 * registers), and its kernel; ROWS_MAX rows a pass at most (more go ROWS_MAX at a time, each pass streaming the
 * weights again): 16 with AVX-512's 32 registers (16 sums and a weight vector), so that a tree's verify of 9-16 rows
 * streams them once (8 nodes and the root: r 1.53 on the default job when 9 rows went as 8 + 1,
 * experiments/cpu/intel-noamx-run2/nodes-summary.txt), 8 without */
#if VW == 16
#define ROWS_MAX 16
KERNEL(9, 1) KERNEL(10, 1) KERNEL(11, 1) KERNEL(12, 1) KERNEL(13, 1) KERNEL(14, 1) KERNEL(15, 1) KERNEL(16, 1)
KERNEL(1, 8) KERNEL(2, 8) KERNEL(3, 4) KERNEL(4, 4) KERNEL(5, 2) KERNEL(6, 2) KERNEL(7, 2) KERNEL(8, 2)
static const kernel_fn ONE[ROWS_MAX + 1] = {0, kernel_1_1, kernel_2_1, kernel_3_1, kernel_4_1, kernel_5_1, kernel_6_1,
                                            kernel_7_1, kernel_8_1, kernel_9_1, kernel_10_1, kernel_11_1, kernel_12_1,
                                            kernel_13_1, kernel_14_1, kernel_15_1, kernel_16_1};
static const int GROUP[ROWS_MAX + 1] = {0, 8, 8, 4, 4, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1};
static const kernel_fn GROUPED[ROWS_MAX + 1] = {0, kernel_1_8, kernel_2_8, kernel_3_4, kernel_4_4, kernel_5_2,
                                                kernel_6_2, kernel_7_2, kernel_8_2, kernel_9_1, kernel_10_1, kernel_11_1,
                                                kernel_12_1, kernel_13_1, kernel_14_1, kernel_15_1, kernel_16_1};
#else
#define ROWS_MAX 8
KERNEL(1, 4) KERNEL(2, 2) KERNEL(3, 2)
static const kernel_fn ONE[ROWS_MAX + 1] = {0, kernel_1_1, kernel_2_1, kernel_3_1, kernel_4_1,
                                            kernel_5_1, kernel_6_1, kernel_7_1, kernel_8_1};
static const int GROUP[ROWS_MAX + 1] = {0, 4, 2, 2, 1, 1, 1, 1, 1};
static const kernel_fn GROUPED[ROWS_MAX + 1] = {0, kernel_1_4, kernel_2_2, kernel_3_2, kernel_4_1,
                                                kernel_5_1, kernel_6_1, kernel_7_1, kernel_8_1};
#endif

/* x [M, K] and y [M, N] row-major and contiguous, wp [ceil(N / 16), K, 16] contiguous; any M */
void specbench_rows_gemm(const float *x, const float *wp, float *y, int64_t M, int64_t N, int64_t K) {
    const int64_t blocks = (N + 15) / 16;
    for (int64_t m0 = 0; m0 < M; m0 += ROWS_MAX) {
        const int m = M - m0 < ROWS_MAX ? (int)(M - m0) : ROWS_MAX;
        const float *xm = x + m0 * K;
        float *ym = y + m0 * N;
#pragma omp parallel
        {
#ifdef _OPENMP
            extern int omp_get_num_threads(void), omp_get_thread_num(void);
            const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
#else
            const int64_t threads = 1, t = 0;
#endif
            const int64_t b0 = blocks * t / threads, b1 = blocks * (t + 1) / threads;
            int64_t b = b0;
            for (; b + GROUP[m] <= b1; b += GROUP[m]) GROUPED[m](xm, wp, ym, b, N, K);
            for (; b < b1; b++) ONE[m](xm, wp, ym, b, N, K);
        }
    }
}
