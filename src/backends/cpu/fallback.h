/*
 * fallback.h — where the cpu backend still runs ref's kernels, and how often it did.
 *
 * Every case in which a cpu kernel slot hands its work to the ref kernel (a dtype, a layout or
 * an op it has no loop of its own for), and every slot the backend leaves to ref altogether,
 * is one row of the table in fallback.c: the slot, the case in words, and whether it is on the
 * short list of expected fallbacks (cases where ref's loop is the right code: integer-only
 * ops, random streams that must match ref's bit for bit, ...). ember-info prints the table
 * (per slot and per case); the kernels count each fallback they take, per case and per
 * dtype, with cpu_fallback_hit. With EMBER_REPORT_FALLBACKS=1 in the environment the counts
 * are printed to stderr at exit; the conformance runner reads them (cpu_fallback_count) and
 * fails on an unexpected f32/f64/f16/bf16 fallback.
 *
 * Compiled once (not per ISA level); the counters are atomics, kernels on any thread may hit.
 */
#ifndef EMBER_CPU_FALLBACK_H
#define EMBER_CPU_FALLBACK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ember/backend.h"

/* One value per case. Keep in step with the table in fallback.c (a static assertion there
 * checks the count). */
typedef enum cpu_fb {
    CPU_FB_COPY,          /* copy: a layout or a cast copy does not handle */
    CPU_FB_FILL,          /* fill: a dtype or layout fill does not handle */
    CPU_FB_UNARY,         /* unary: a dtype, layout or op unary does not handle */
    CPU_FB_BINARY,        /* binary: a dtype, layout or op binary does not handle */
    CPU_FB_BINARY_SCALAR, /* binary_scalar: likewise */
    CPU_FB_WHERE,         /* where: a dtype or layout where does not handle */
    CPU_FB_REDUCE,        /* reduce: a dtype or layout reduce does not handle */
    CPU_FB_SOFTMAX,       /* softmax: likewise */
    CPU_FB_MATMUL,        /* matmul: a rank-1 operand or a strided output */
    CPU_FB_GATHER,        /* gather: a layout or index dtype gather does not handle */
    CPU_FB_SCATTER_ADD,   /* scatter_add: likewise */
    CPU_FB_CONV2D,        /* conv2d and its weight gradient, conv_transpose2d */
    CPU_FB_CONV2D_WGRAD,
    CPU_FB_CONV_T2D,
    CPU_FB_MAX_POOL2D, /* pooling: a layout or dtype the pooling kernels do not handle */
    CPU_FB_AVG_POOL2D,
    CPU_FB_AVG_POOL2D_BWD,
    CPU_FB_LAYER_NORM,
    CPU_FB_BATCH_NORM, /* normalization (norm.c): integer dtypes only */
    CPU_FB_BATCH_NORM_BWD,
    CPU_FB_GROUP_NORM,
    CPU_FB_RMS_NORM,
    CPU_FB_CUMULATIVE, /* cumprod / cummax / cummin (cumulative.c): integer and bool inputs */
    CPU_FB_SDPA, /* attention (attention.c): views the core never makes */
    CPU_FB_SDPA_BWD,
    /* slots the cpu backend leaves to ref altogether (index_select and adaptive_avg_pool2d's
       two have kernels of their own now: their rows name what is left) */
    CPU_FB_ARANGE,
    CPU_FB_RANDOM,
    CPU_FB_CUMSUM, /* cumsum has a kernel of its own now (reduce.c): integer inputs only */
    CPU_FB_INDEX_SELECT,
    CPU_FB_SORT,
    CPU_FB_ADAPTIVE_AVG_POOL2D,
    CPU_FB_ADAPTIVE_AVG_POOL2D_BWD,
    CPU_FB_COUNT
} cpu_fb;

/** One row of the table. */
typedef struct cpu_fb_case {
    const char *slot;  /* the em_backend_ops slot, e.g. "where" */
    const char *when;  /* the case, in words */
    bool whole_slot;   /* the backend has no kernel of its own for the slot */
    bool expected;     /* on the short list: ref's loop is the right code for it (why: in
                          `when`); the conformance run does not fail on it */
} cpu_fb_case;

/** Row c of the table (NULL when c is out of range). */
const cpu_fb_case *cpu_fallback_case(int c);
/** Counts one fallback of case c for output dtype dt. */
void cpu_fallback_hit(cpu_fb c, em_dtype dt);
/** How many fallbacks of case c with output dtype dt ran since the start (or the last reset). */
uint64_t cpu_fallback_count(int c, em_dtype dt);
void cpu_fallback_reset(void);
/** Prints the nonzero counts, one line per case and dtype, to f; returns how many lines. */
int cpu_fallback_print(FILE *f);
/** Registers the print at exit when EMBER_REPORT_FALLBACKS is set to a non-zero value (once). */
void cpu_fallback_init(void);

/** ref's kernel for `slot`, counted as case c with output dtype dt:
 *  `return CPU_FALLBACK(CPU_FB_WHERE, out->dtype, where, ctx, out, cond, a, b);` */
#define CPU_FALLBACK(c, dt, slot, ...) (cpu_fallback_hit((c), (dt)), cpu_ref()->slot(__VA_ARGS__))

#endif /* EMBER_CPU_FALLBACK_H */
