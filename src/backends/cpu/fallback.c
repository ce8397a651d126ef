/* fallback.c — the table of cases in which the cpu backend runs ref's kernels, their
 * counters, and the kernels of the slots it leaves to ref (see fallback.h). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "fallback.h"

static const cpu_fb_case fb_cases[] = {
    [CPU_FB_COPY] = {"copy", "none: every layout (strided, broadcast, flipped inputs and outputs) "
                             "and every pair of dtypes runs cpu's own copy", false, false},
    [CPU_FB_FILL] = {"fill", "none: every dtype and output layout runs cpu's own fill (the row "
                             "would count elements of a size other than 1, 2, 4 or 8 bytes)",
                     false, false},
    [CPU_FB_UNARY] = {"unary", "integer dtypes (neg, abs, relu, sign, floor/ceil/round, clamp "
                               "on i8..i64/u8 run ref's int64 loop); f32/f64/f16/bf16 and "
                               "logical_not on bool are native in every layout",
                      false, true},
    [CPU_FB_BINARY] = {"binary", "integer pow or atan2 (float-only: the core never asks) and operands "
                                 "whose dtype differs from out's or each other's (the core never "
                                 "makes them); every layout and dtype else is native",
                       false, false},
    [CPU_FB_BINARY_SCALAR] = {"binary_scalar", "likewise (integer pow or atan2, mixed dtypes)", false,
                              false},
    [CPU_FB_WHERE] = {"where", "a condition that is not bool or operands of another dtype than "
                               "out's (the core never makes them); every layout is native",
                      false, false},
    [CPU_FB_REDUCE] = {"reduce", "integer and bool inputs (ref's int64 arithmetic); float "
                                 "inputs of every layout are native",
                       false, false},
    [CPU_FB_SOFTMAX] = {"softmax", "none for float dtypes (every layout native); a dtype that "
                                   "is not float",
                        false, false},
    [CPU_FB_MATMUL] = {"matmul", "quantized dtypes (never sent: the core gives their "
                                 "products to qmatmul)",
                       false, true},
    [CPU_FB_GATHER] = {"gather", "views of unequal rank, in and out of two dtypes, an index "
                                 "neither i64 nor i32 (none reach it from the core)",
                       false, true},
    [CPU_FB_SCATTER_ADD] = {"scatter_add", "views of unequal rank, out and src of two dtypes, "
                                           "an index neither i64 nor i32, quantized dtypes (none "
                                           "reach it from the core)",
                            false, true},
    [CPU_FB_CONV2D] = {"conv2d", "integer dtypes, operands of two dtypes (the core takes "
                                 "floats of one dtype)",
                       false, true},
    [CPU_FB_CONV2D_WGRAD] = {"conv2d_weight_grad", "integer dtypes, operands of two dtypes (the "
                                                   "core takes floats of one dtype)",
                             false, true},
    [CPU_FB_CONV_T2D] = {"conv_transpose2d", "integer dtypes, operands of two dtypes (the core "
                                             "takes floats of one dtype)",
                         false, true},
    [CPU_FB_MAX_POOL2D] = {"max_pool2d", "integer dtypes, indices other than i64 (the core takes "
                                         "floats, i64 indices)",
                           false, true},
    [CPU_FB_AVG_POOL2D] = {"avg_pool2d", "integer dtypes (the core takes floats)", false, true},
    [CPU_FB_AVG_POOL2D_BWD] = {"avg_pool2d_backward", "integer dtypes (the core takes floats)",
                               false, true},
    [CPU_FB_LAYER_NORM] = {"layer_norm", "integer dtypes, parameters of another dtype or size "
                                         "(the core takes floats of one dtype)",
                           false, true},
    [CPU_FB_BATCH_NORM] = {"batch_norm", "integer dtypes, views of another dtype or size (the "
                                         "core takes floats of one dtype); f32/f64/f16/bf16 "
                                         "training and eval are native",
                           false, true},
    [CPU_FB_BATCH_NORM_BWD] = {"batch_norm_backward", "integer dtypes, views of another dtype "
                                                      "or size (the core takes floats of one "
                                                      "dtype)",
                               false, true},
    [CPU_FB_GROUP_NORM] = {"group_norm", "integer dtypes, views of another dtype or size (the "
                                         "core takes floats of one dtype)",
                           false, true},
    [CPU_FB_RMS_NORM] = {"rms_norm", "integer dtypes, views of another dtype or size (the core "
                                     "takes floats of one dtype)",
                         false, true},
    [CPU_FB_CUMULATIVE] = {"cumulative", "integer and bool inputs (cumprod: ref's wrapping int64 "
                                         "products; cummax / cummin: ref's exact int64 "
                                         "compares); f32/f64/f16/bf16 of every layout are "
                                         "native",
                           false, true},
    [CPU_FB_SDPA] = {"sdpa", "integer dtypes, operands of two dtypes, a non-contiguous out or "
                             "lse (the core takes floats of one dtype and fresh outputs); "
                             "f32/f64/f16/bf16 with every mask, causal and dropout are native",
                     false, true},
    [CPU_FB_SDPA_BWD] = {"sdpa_backward", "integer dtypes, operands of two dtypes, "
                                          "non-contiguous gradients (the core takes floats of "
                                          "one dtype and fresh outputs)",
                         false, true},
    [CPU_FB_ARANGE] = {"arange", "every case (creation: written once, no loop worth a kernel)",
                       true, true},
    [CPU_FB_RANDOM] = {"random", "every case (Philox streams must match ref's bit for bit)",
                       true, true},
    [CPU_FB_CUMSUM] = {"cumsum", "integer inputs (ref's wrapping int64 sums); float inputs of "
                                 "every layout are native",
                       false, false},
    [CPU_FB_INDEX_SELECT] = {"index_select", "views of unequal rank, in and out of two dtypes, "
                                             "an index neither 1-d nor i64/i32 (none reach it "
                                             "from the core)",
                             false, true},
    [CPU_FB_SORT] = {"sort", "every case (ref's stable merge sort)", true, true},
    [CPU_FB_ADAPTIVE_AVG_POOL2D] = {"adaptive_avg_pool2d", "integer dtypes (the core takes "
                                                           "floats)",
                                    false, true},
    [CPU_FB_ADAPTIVE_AVG_POOL2D_BWD] = {"adaptive_avg_pool2d_backward", "integer dtypes (the "
                                                                        "core takes floats)",
                                        false, true},
};
_Static_assert(sizeof fb_cases / sizeof fb_cases[0] == CPU_FB_COUNT,
               "fallback.c: one row per cpu_fb value");

static _Atomic uint64_t fb_counts[CPU_FB_COUNT][EM_DTYPE_COUNT];

const cpu_fb_case *cpu_fallback_case(int c) {
    return c >= 0 && c < CPU_FB_COUNT && fb_cases[c].slot ? &fb_cases[c] : NULL;
}

void cpu_fallback_hit(cpu_fb c, em_dtype dt) {
    if ((int)c < 0 || c >= CPU_FB_COUNT || (int)dt < 0 || dt >= EM_DTYPE_COUNT) return;
    atomic_fetch_add_explicit(&fb_counts[c][dt], 1, memory_order_relaxed);
}

uint64_t cpu_fallback_count(int c, em_dtype dt) {
    if (c < 0 || c >= CPU_FB_COUNT || (int)dt < 0 || dt >= EM_DTYPE_COUNT) return 0;
    return atomic_load_explicit(&fb_counts[c][dt], memory_order_relaxed);
}

void cpu_fallback_reset(void) {
    for (int c = 0; c < CPU_FB_COUNT; c++)
        for (int d = 0; d < EM_DTYPE_COUNT; d++)
            atomic_store_explicit(&fb_counts[c][d], 0, memory_order_relaxed);
}

int cpu_fallback_print(FILE *f) {
    int lines = 0;
    for (int c = 0; c < CPU_FB_COUNT; c++)
        for (int d = 0; d < EM_DTYPE_COUNT; d++) {
            uint64_t n = cpu_fallback_count(c, (em_dtype)d);
            if (!n) continue;
            if (!lines++) fprintf(f, "ember: cpu kernels that ran ref's loops (EMBER_REPORT_FALLBACKS):\n");
            fprintf(f, "ember:   %-28s %-5s %10llu  %s%s\n", fb_cases[c].slot,
                    em_dtype_name((em_dtype)d), (unsigned long long)n, fb_cases[c].when,
                    fb_cases[c].expected ? " [expected]" : "");
        }
    if (!lines) fprintf(f, "ember: cpu kernels that ran ref's loops: none\n");
    return lines;
}

static void fb_print_at_exit(void) { cpu_fallback_print(stderr); }

static void fb_init_once(void) {
    const char *e = getenv("EMBER_REPORT_FALLBACKS");
    if (e && *e && strcmp(e, "0") != 0) atexit(fb_print_at_exit);
}

#include <pthread.h>
static pthread_once_t fb_once = PTHREAD_ONCE_INIT;
void cpu_fallback_init(void) { pthread_once(&fb_once, fb_init_once); }

/* ---- the slots the cpu backend leaves to ref: counted, then ref's kernel ---- */

em_status cpu_arange(void *ctx, const em_view *out, double start, double step) {
    return CPU_FALLBACK(CPU_FB_ARANGE, out->dtype, arange, ctx, out, start, step);
}
em_status cpu_random(void *ctx, em_random_op op, const em_view *out, uint64_t seed,
                     const double *params) {
    return CPU_FALLBACK(CPU_FB_RANDOM, out->dtype, random, ctx, op, out, seed, params);
}
em_status cpu_sort(void *ctx, const em_view *values, const em_view *indices, const em_view *in,
                   int dim, bool descending) {
    return CPU_FALLBACK(CPU_FB_SORT, in->dtype, sort, ctx, values, indices, in, dim, descending);
}
