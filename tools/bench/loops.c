/* loops.c — the plain C baselines of `ember-bench cpu`, compiled -O3 -march=native in the
 * same binary: what a programmer would write by hand for these elementwise jobs. */
#include <stdint.h>

#include "bench.h"

void bench_loop_add(float *restrict z, const float *restrict x, const float *restrict y,
                    int64_t n) {
    for (int64_t i = 0; i < n; i++) z[i] = x[i] + y[i];
}

void bench_loop_fma_relu(float *restrict z, const float *restrict a, const float *restrict b,
                         const float *restrict c, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float v = a[i] * b[i] + c[i];
        z[i] = v > 0 ? v : 0;
    }
}
