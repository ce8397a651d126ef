/*
 * cpu_test_views.h — the harness of the cpu tests that run a kernel and ref's on the same
 * views (test_cpu_nnidx.c, test_cpu_norm.c): random buffers of any dtype, views of a shape in
 * three layouts (row-major, dims reversed, padded at an offset), whole-buffer comparisons
 * within the conformance table's tolerances, the fallback counter's check, and the list of
 * instruction-set levels this build and CPU have. Include after <cmocka.h>; define CT_SEED
 * first for another random stream.
 */
#ifndef EMBER_CPU_TEST_VIEWS_H
#define EMBER_CPU_TEST_VIEWS_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ember/backend.h"
#include "ember/ember.h"
#include "backends/cpu/fallback.h"
#include "backends/cpu/isa.h"
#include "cpu_test_util.h"

#ifndef CT_SEED
#define CT_SEED 0x9e3779b97f4a7c15ull
#endif
static uint64_t rng = CT_SEED;
static inline double urand(void) { /* [0, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

typedef struct buf {
    void *p;
    size_t n; /* elements */
    em_dtype dt;
} buf;

/* n elements of dt: random values in [lo, hi) (integers: rounded down) */
static inline buf mkbuf(em_dtype dt, size_t n, double lo, double hi) {
    buf b = {calloc(n ? n : 1, em_dtype_size(dt) > 0 ? em_dtype_size(dt) : 1), n, dt};
    assert_non_null(b.p);
    for (size_t i = 0; i < n; i++) {
        double v = lo + (hi - lo) * urand();
        ct_store(b.p, dt, i, ct_is_float(dt) ? v : floor(v));
    }
    return b;
}

static inline buf clone(const buf *a) {
    buf b = *a;
    size_t bytes = (a->n ? a->n : 1) * em_dtype_size(a->dt);
    b.p = malloc(bytes);
    assert_non_null(b.p);
    memcpy(b.p, a->p, bytes);
    return b;
}

/* Layouts of a view of `shape` inside a buffer. */
enum {
    L_CONTIG,     /* row-major */
    L_REVERSED,   /* dims stored in reverse order (a transpose / channels-last) */
    L_PADDED,     /* row-major with gaps (each dim's stride one row wider) at an offset */
    L_COUNT
};

/* The view and the buffer size it needs. */
static inline em_view layout(em_dtype dt, int rank, const int64_t *shape, int lay, size_t *need) {
    em_view v;
    memset(&v, 0, sizeof v);
    v.dtype = dt;
    v.rank = rank;
    int64_t s = 1;
    for (int k = 0; k < rank; k++) {
        int d = lay == L_REVERSED ? k : rank - 1 - k;
        v.shape[d] = shape[d];
        v.strides[d] = s;
        s *= shape[d] + (lay == L_PADDED ? 1 : 0);
    }
    if (lay == L_PADDED && rank > 0) { /* the innermost dim with stride 2 */
        for (int d = 0; d < rank; d++) v.strides[d] *= 2;
        v.offset = 3;
    }
    int64_t last = v.offset;
    bool empty = false;
    for (int d = 0; d < rank; d++) {
        if (shape[d] == 0) empty = true;
        else last += (shape[d] - 1) * v.strides[d];
    }
    *need = empty ? (size_t)v.offset + 1 : (size_t)last + 1;
    return v;
}

/* A view of the given layout over a fresh random buffer (b gets the buffer). */
static inline em_view mkview(buf *b, em_dtype dt, int rank, const int64_t *shape, int lay, double lo,
                      double hi) {
    size_t need;
    em_view v = layout(dt, rank, shape, lay, &need);
    *b = mkbuf(dt, need, lo, hi);
    v.buf = b->p;
    return v;
}

static inline double tol_of(em_dtype dt) {
    switch (dt) {
    case EM_F64: return 1e-9;
    case EM_F32: return 1e-5;
    case EM_F16: return 4e-3;
    case EM_BF16: return 2e-2;
    default: return 0;
    }
}

/* got and want agree element for element over the whole buffer: NaN where the other is NaN,
 * else within scale times the table's tolerance for the dtype (scale 0: exactly) */
static inline void check_same(const char *what, const buf *got, const buf *want, double scale) {
    const double tol = tol_of(got->dt) * scale;
    for (size_t i = 0; i < got->n; i++) {
        double g = ct_load(got->p, got->dt, i), w = ct_load(want->p, want->dt, i);
        bool ok = (isnan(g) && isnan(w)) || g == w ||
                  (fabs(g - w) <= tol * (1 + fabs(w)) && !isnan(g) && !isnan(w));
        if (!ok) fail_msg("%s (%s): element %zu: got %.9g, want %.9g", what,
                          em_dtype_name(got->dt), i, g, w);
    }
}

/* v over b's buffer (the ref run's copy of an output) */
static inline em_view on(const em_view *v, const buf *b) {
    em_view w = *v;
    w.buf = b->p;
    return w;
}

static inline void free_buf(buf *b) {
    free(b->p);
    b->p = NULL;
}

/* Counted fallbacks of case c, any dtype. */
static inline uint64_t fb_count(int c) {
    uint64_t n = 0;
    for (int d = 0; d < EM_DTYPE_COUNT; d++) n += cpu_fallback_count(c, (em_dtype)d);
    return n;
}

static inline void no_fallbacks(void) {
    for (int c = 0; cpu_fallback_case(c); c++)
        if (fb_count(c) != 0 && c != CPU_FB_COPY) /* copy: another slot's work (packing, staging) */
            fail_msg("cpu fell back to ref: %s (%s)", cpu_fallback_case(c)->slot,
                     cpu_fallback_case(c)->when);
}

static const em_dtype FLOATS[] = {EM_F32, EM_F64, EM_F16, EM_BF16};
#define NFLOATS 4

typedef struct lv {
    const cpu_kernels *k;
    int level;
} lv;

static inline int levels(lv *out) {
    int n = 0;
    for (int l = 0; l <= cpu_isa_best(); l++)
        if (cpu_kernels_of(l)) out[n++] = (lv){cpu_kernels_of(l), l};
    return n;
}

#endif
