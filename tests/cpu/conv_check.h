/*
 * conv_check.h — the harness the cpu convolution tests share (test_cpu_conv_direct.c,
 * test_cpu_conv_gemm.c): dense f32/f64 operands, checks within the conformance table's
 * tolerances, and one loop that runs a list of cases through conv2d, its weight gradient and
 * conv_transpose2d at every level this build and CPU have, with and without bias, against ref's
 * kernels on the same operands, then asserts that nothing fell back to ref. Each test picks
 * the method (EMBER_CPU_CONV) and the cases.
 */
#ifndef EMBER_CONV_CHECK_H
#define EMBER_CONV_CHECK_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ember/backend.h"
#include "ember/ember.h"
#include "backends/cpu/fallback.h"
#include "backends/cpu/isa.h"

static const em_backend_ops *REF;
static void *CTX;

static uint64_t rng = 0x2545f4914f6cdd1dull;
static inline double urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

typedef struct tensor {
    em_view v;
    void *p;
    int64_t n;
} tensor;

static tensor mk(em_dtype dt, int rank, const int64_t *shape, bool fill) {
    tensor t;
    memset(&t, 0, sizeof t);
    t.v.dtype = dt;
    t.v.rank = rank;
    t.n = 1;
    for (int d = rank - 1; d >= 0; d--) {
        t.v.shape[d] = shape[d];
        t.v.strides[d] = t.n;
        t.n *= shape[d];
    }
    t.p = calloc((size_t)(t.n ? t.n : 1), em_dtype_size(dt));
    assert_non_null(t.p);
    t.v.buf = t.p;
    for (int64_t i = 0; fill && i < t.n; i++) {
        double v = 2 * urand() - 1;
        if (dt == EM_F32) ((float *)t.p)[i] = (float)v;
        else ((double *)t.p)[i] = v;
    }
    return t;
}

static tensor twin(const tensor *a) {
    tensor t = *a;
    t.p = calloc((size_t)(a->n ? a->n : 1), em_dtype_size(a->v.dtype));
    assert_non_null(t.p);
    t.v.buf = t.p;
    return t;
}

static inline double at(const tensor *t, int64_t i) {
    return t->v.dtype == EM_F32 ? ((const float *)t->p)[i] : ((const double *)t->p)[i];
}

/* got within the table's tolerance of want; with mag (the sums of |terms| of k-term sums), also
 * within a rounding bound of those sums: the weight gradient sums up to 8192 terms in f32
 * (as PyTorch sums all of them), ref in double, and the sum of terms of magnitude ~1 may
 * cancel to near 0 */
static inline void check_sum(const char *what, const tensor *got, const tensor *want, int c,
                      const tensor *mag, int64_t k) {
    const double tol = got->v.dtype == EM_F32 ? 1e-5 : 1e-9;
    const double eps = got->v.dtype == EM_F32 ? 0x1p-24 : 0x1p-53;
    for (int64_t i = 0; i < got->n; i++) {
        double g = at(got, i), w = at(want, i);
        double bound = tol * (1 + fabs(w)) + (mag ? 4 * sqrt((double)k) * eps * at(mag, i) : 0);
        if (!(fabs(g - w) <= bound))
            fail_msg("%s case %d (%s): element %lld: got %.9g, want %.9g", what, c,
                     em_dtype_name(got->v.dtype), (long long)i, g, w);
    }
}

static inline void check(const char *what, const tensor *got, const tensor *want, int c) {
    check_sum(what, got, want, c, NULL, 0);
}

static tensor absolute(const tensor *a) {
    tensor t = twin(a);
    for (int64_t i = 0; i < a->n; i++) {
        if (a->v.dtype == EM_F32) ((float *)t.p)[i] = fabsf(((const float *)a->p)[i]);
        else ((double *)t.p)[i] = fabs(((const double *)a->p)[i]);
    }
    return t;
}

typedef struct cc {
    int64_t x[4], w[4], g, s, p, d, op; /* op: the transposed conv's output padding */
} cc;

/** Runs n cases at every level, f32 and f64, with and without bias. */
static inline void run_conv_cases(const cc *cases, int n) {
    const em_dtype dts[2] = {EM_F32, EM_F64};
    for (int l = 0; l <= cpu_isa_best(); l++) {
        const cpu_kernels *k = cpu_kernels_of(l);
        if (!k) continue;
        for (int t = 0; t < 2; t++)
            for (int c = 0; c < n; c++)
                for (int withb = 0; withb < 2; withb++) {
                    const cc *q = &cases[c];
                    const em_dtype dt = dts[t];
                    em_conv_args a = {{q->s, q->s}, {q->p, q->p}, {q->d, q->d}, {0, 0}, q->g};
                    int64_t osh[4] = {q->x[0], q->w[0], 0, 0};
                    for (int d = 0; d < 2; d++)
                        osh[2 + d] =
                            (q->x[2 + d] + 2 * q->p - q->d * (q->w[2 + d] - 1) - 1) / q->s + 1;
                    const int64_t bs[1] = {q->w[0]};
                    tensor x = mk(dt, 4, q->x, true), w = mk(dt, 4, q->w, true);
                    tensor b = mk(dt, 1, bs, true);
                    const em_view *pb = withb ? &b.v : NULL;
                    /* conv2d (when its output is not empty) */
                    if (osh[2] > 0 && osh[3] > 0) {
                        tensor o = mk(dt, 4, osh, false), ow = twin(&o);
                        assert_int_equal(REF->conv2d(NULL, &ow.v, &x.v, &w.v, pb, &a), EM_OK);
                        assert_int_equal(k->conv2d(CTX, &o.v, &x.v, &w.v, pb, &a), EM_OK);
                        check("conv2d", &o, &ow, c);
                        /* the weight gradient of x and gy = ref's output */
                        tensor gw = mk(dt, 4, q->w, false), gww = twin(&gw);
                        assert_int_equal(REF->conv2d_weight_grad(NULL, &gww.v, &x.v, &ow.v, &a),
                                         EM_OK);
                        assert_int_equal(k->conv2d_weight_grad(CTX, &gw.v, &x.v, &ow.v, &a),
                                         EM_OK);
                        tensor ax = absolute(&x), ag = absolute(&ow), mag = twin(&gw);
                        assert_int_equal(REF->conv2d_weight_grad(NULL, &mag.v, &ax.v, &ag.v, &a),
                                         EM_OK);
                        check_sum("conv2d_weight_grad", &gw, &gww, c, &mag,
                                  osh[0] * osh[2] * osh[3]);
                        free(o.p), free(ow.p), free(gw.p), free(gww.p), free(ax.p), free(ag.p),
                            free(mag.p);
                    }
                    /* conv_transpose2d of a [N, O, IH, IW] input back to C/G*G channels (the
                     * conv's input gradient), with the case's output padding */
                    {
                        const int64_t ish[4] = {q->x[0], q->w[0], q->x[2], q->x[3]};
                        int64_t tsh[4] = {q->x[0], q->w[1] * q->g, 0, 0};
                        a.output_padding[0] = a.output_padding[1] = q->op;
                        for (int d = 0; d < 2; d++)
                            tsh[2 + d] = (ish[2 + d] - 1) * q->s - 2 * q->p +
                                         q->d * (q->w[2 + d] - 1) + 1 + q->op;
                        if (tsh[2] > 0 && tsh[3] > 0) {
                            tensor in = mk(dt, 4, ish, true);
                            const int64_t tbs[1] = {tsh[1]};
                            tensor tb = mk(dt, 1, tbs, true);
                            const em_view *ptb = withb ? &tb.v : NULL;
                            tensor o = mk(dt, 4, tsh, false), ow = twin(&o);
                            assert_int_equal(
                                REF->conv_transpose2d(NULL, &ow.v, &in.v, &w.v, ptb, &a), EM_OK);
                            assert_int_equal(k->conv_transpose2d(CTX, &o.v, &in.v, &w.v, ptb, &a),
                                             EM_OK);
                            check("conv_transpose2d", &o, &ow, c);
                            free(in.p), free(tb.p), free(o.p), free(ow.p);
                        }
                    }
                    free(x.p), free(w.p), free(b.p);
                }
    }
    for (int d = 0; d < EM_DTYPE_COUNT; d++) {
        assert_int_equal(cpu_fallback_count(CPU_FB_CONV2D, (em_dtype)d), 0);
        assert_int_equal(cpu_fallback_count(CPU_FB_CONV2D_WGRAD, (em_dtype)d), 0);
        assert_int_equal(cpu_fallback_count(CPU_FB_CONV_T2D, (em_dtype)d), 0);
    }
}

static inline int setup(void **state) {
    (void)state;
    REF = em_backend_get(EM_BACKEND_REF);
    const em_backend_ops *cpu = em_backend_get_native(EM_BACKEND_CPU);
    if (!REF || !cpu || cpu->open(0, &CTX) != EM_OK) return -1;
    cpu_fallback_reset();
    return 0;
}

#endif
