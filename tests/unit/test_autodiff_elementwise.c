/*
 * test_autodiff_elementwise.c — the backward rules of the elementwise ops (unary, a op s,
 * binary with broadcasting, where, masked_fill, the consuming `_` variants) against central
 * finite differences, in f64, on ref+autodiff and ref+autodiff:balanced.
 *
 * For a case f with inputs x_j, loss = sum(f(x) * w) with fixed weights w (a plain, untracked
 * ref tensor: every case also mixes an untracked constant with tracked tensors). The analytic
 * gradient of each tracked input comes from em_backward; the reference from central
 * differences of the same loss computed on plain ref (eps 1e-6). The gradients of DISABLED and
 * BALANCED must be bitwise equal.
 *
 * Each case also runs with the loss of each output element taken on its own (1-element
 * inputs, the broadcast done by hand), which needs no reduction; the summed form (which
 * exercises the rules' unbroadcasting) runs when em_sum records on autodiff.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "autodiff/rules/rules.h"
#include "autodiff/tape_impl.h"
#include "core/internal.h"
#include "ember/ember.h"

#define MAXN 8   /* elements of an input or output */
#define MAXIN 3  /* inputs of a case */
#define EPS 1e-6 /* finite difference step */
#define TOL 1e-6 /* relative tolerance (absolute below 1) */

#define OK(expr) assert_int_equal((expr), EM_OK)

static em_device ref_dev(void) {
    em_device d = {EM_BACKEND_REF, 0, false, EM_CKPT_NONE};
    return d;
}

static em_device ad_dev(em_checkpointing c) {
    em_device d;
    OK(em_device_autodiff(ref_dev(), c, &d));
    return d;
}

/* ---- cases ---- */

typedef em_status (*un_fn)(const em_tensor *, em_tensor **);
typedef em_status (*sc_fn)(const em_tensor *, double, em_tensor **);
typedef em_status (*bin_fn)(const em_tensor *, const em_tensor *, em_tensor **);

typedef struct gcase gcase;
struct gcase {
    const char *name;
    /* one of: */
    un_fn un;
    sc_fn sc;
    bin_fn bin;
    em_status (*fn)(const gcase *c, em_tensor *const *in, em_tensor **out);
    double s, lo, hi; /* sc: s; clamp: lo, hi (un == NULL, fn == NULL, sc == NULL, bin == NULL) */
    bool clamp;
    int nin;
    int rank[MAXIN];
    int64_t shape[MAXIN][2];
    const double *vals[MAXIN];
    bool constant[MAXIN]; /* a plain ref tensor, not tracked */
};

static em_status run_fn(const gcase *c, em_tensor *const *in, em_tensor **out) {
    if (c->fn) return c->fn(c, in, out);
    if (c->clamp) return em_clamp(in[0], c->lo, c->hi, out);
    if (c->un) return c->un(in[0], out);
    if (c->sc) return c->sc(in[0], c->s, out);
    return c->bin(in[0], in[1], out);
}

static int64_t numel_of(const int64_t *shape, int rank) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= shape[i];
    return n;
}

static double weight(int64_t k) { return (k % 2 ? -1.0 : 1.0) * (0.5 + 0.23 * (double)k); }

static em_tensor *make(const double *v, const int64_t *shape, int rank, em_device dev) {
    em_tensor *t = NULL;
    OK(em_tensor_from_data(v, EM_F64, shape, rank, dev, &t));
    return t;
}

/* The output shape of a case (run once on plain ref). */
static void out_shape(const gcase *c, int64_t *shape, int *rank) {
    em_tensor *in[MAXIN] = {0}, *y = NULL;
    for (int j = 0; j < c->nin; j++) in[j] = make(c->vals[j], c->shape[j], c->rank[j], ref_dev());
    OK(run_fn(c, in, &y));
    assert_int_equal(em_tensor_dtype(y), EM_F64);
    *rank = em_tensor_rank(y);
    memcpy(shape, em_tensor_shape(y), sizeof(int64_t) * (size_t)*rank);
    assert_true(numel_of(shape, *rank) <= MAXN);
    em_tensor_release(y);
    for (int j = 0; j < c->nin; j++) em_tensor_release(in[j]);
}

/* sum(f(vals) * w) on plain ref, untracked. */
static double eval_loss(const gcase *c, double vals[MAXIN][MAXN]) {
    em_tensor *in[MAXIN] = {0}, *y = NULL;
    for (int j = 0; j < c->nin; j++) in[j] = make(vals[j], c->shape[j], c->rank[j], ref_dev());
    OK(run_fn(c, in, &y));
    double yv[MAXN];
    int64_t n = em_tensor_numel(y);
    OK(em_tensor_to_data(y, yv, sizeof yv));
    double l = 0;
    for (int64_t k = 0; k < n; k++) l += yv[k] * weight(k);
    em_tensor_release(y);
    for (int j = 0; j < c->nin; j++) em_tensor_release(in[j]);
    return l;
}

/* Whether em_sum records on autodiff (else the loss is taken element by element). */
static bool sum_records(void) {
    static int known = -1;
    if (known < 0) {
        double v[2] = {1, 2};
        int64_t n = 2;
        em_tensor *x = make(v, &n, 1, ad_dev(EM_CKPT_DISABLED)), *s = NULL;
        OK(em_sum(x, &s));
        known = em_tensor_is_tracked(s);
        em_tensor_release(s);
        em_tensor_release(x);
        if (!known) print_message("note: em_sum does not record: losses per element only\n");
    }
    return known;
}

/* Backward of loss; adds the gradient of each tracked in[j] into g[j] at the positions map[j]
 * (identity when map is NULL). */
static void collect(const gcase *c, em_tensor *loss, em_tensor *const *in,
                    double g[MAXIN][MAXN], const int64_t (*map)[MAXN]) {
    em_grads *grads = NULL;
    OK(em_backward(loss, &grads));
    for (int j = 0; j < c->nin; j++) {
        if (c->constant[j]) continue;
        em_tensor *gt = NULL;
        OK(em_grads_get(grads, in[j], &gt));
        if (!gt) continue; /* no gradient reached it: zero */
        assert_int_equal(em_tensor_dtype(gt), EM_F64);
        assert_int_equal(em_tensor_rank(gt), em_tensor_rank(in[j]));
        int64_t n = em_tensor_numel(gt);
        assert_int_equal(n, em_tensor_numel(in[j]));
        for (int d = 0; d < em_tensor_rank(gt); d++)
            assert_int_equal(em_tensor_shape(gt)[d], em_tensor_shape(in[j])[d]);
        if (em_tensor_device(gt).autodiff)
            fail_msg("%s: the gradient of input %d is on an autodiff device", c->name, j);
        double v[MAXN];
        OK(em_tensor_to_data(gt, v, sizeof v));
        for (int64_t e = 0; e < n; e++) g[j][map ? map[j][e] : e] += v[e];
        em_tensor_release(gt);
    }
    em_grads_release(grads);
}

/* The analytic gradients on dev, loss = sum(f(x) * w) in one backward. */
static void grads_whole(const gcase *c, em_device dev, double g[MAXIN][MAXN]) {
    em_tensor *in[MAXIN] = {0}, *y = NULL, *w = NULL, *z = NULL, *loss = NULL;
    for (int j = 0; j < c->nin; j++) {
        in[j] = make(c->vals[j], c->shape[j], c->rank[j], c->constant[j] ? ref_dev() : dev);
        if (!c->constant[j]) OK(em_tensor_require_grad(in[j]));
    }
    OK(run_fn(c, in, &y));
    assert_true(em_tensor_is_tracked(y));
    assert_int_equal(em_tensor_checkpointing(y), dev.checkpointing);
    double wv[MAXN];
    int64_t n = em_tensor_numel(y);
    for (int64_t k = 0; k < n; k++) wv[k] = weight(k);
    w = make(wv, em_tensor_shape(y), em_tensor_rank(y), ref_dev()); /* untracked constant */
    OK(em_mul(y, w, &z));
    OK(em_sum(z, &loss));
    collect(c, loss, in, g, NULL);
    em_tensor_release(loss);
    em_tensor_release(z);
    em_tensor_release(w);
    em_tensor_release(y);
    for (int j = 0; j < c->nin; j++) em_tensor_release(in[j]);
}

/* The analytic gradients on dev, one backward per output element, on 1-element inputs that
 * hold the values broadcasting pairs with it. */
static void grads_per_element(const gcase *c, em_device dev, const int64_t *oshape, int orank,
                              double g[MAXIN][MAXN]) {
    int64_t n = numel_of(oshape, orank), one = 1;
    for (int64_t k = 0; k < n; k++) {
        int64_t idx[EM_MAX_RANK], rem = k;
        for (int d = orank - 1; d >= 0; d--) {
            idx[d] = rem % oshape[d];
            rem /= oshape[d];
        }
        em_tensor *in[MAXIN] = {0}, *y = NULL, *w = NULL, *loss = NULL;
        int64_t map[MAXIN][MAXN];
        for (int j = 0; j < c->nin; j++) {
            int64_t e = 0;
            for (int d = 0; d < c->rank[j]; d++) {
                int od = orank - c->rank[j] + d;
                e = e * c->shape[j][d] + (c->shape[j][d] == 1 ? 0 : idx[od]);
            }
            map[j][0] = e;
            in[j] = make(&c->vals[j][e], &one, 1, c->constant[j] ? ref_dev() : dev);
            if (!c->constant[j]) OK(em_tensor_require_grad(in[j]));
        }
        OK(run_fn(c, in, &y));
        assert_true(em_tensor_is_tracked(y));
        double wk = weight(k);
        w = make(&wk, &one, 1, ref_dev());
        OK(em_mul(y, w, &loss));
        collect(c, loss, in, g, (const int64_t(*)[MAXN])map);
        em_tensor_release(loss);
        em_tensor_release(w);
        em_tensor_release(y);
        for (int j = 0; j < c->nin; j++) em_tensor_release(in[j]);
    }
}

/* Checks a case on both strategies against finite differences. */
static void check_case(const gcase *c) {
    int64_t oshape[EM_MAX_RANK];
    int orank;
    out_shape(c, oshape, &orank);
    double vals[MAXIN][MAXN] = {{0}};
    for (int j = 0; j < c->nin; j++)
        memcpy(vals[j], c->vals[j], sizeof(double) * (size_t)numel_of(c->shape[j], c->rank[j]));

    /* finite differences */
    double fd[MAXIN][MAXN] = {{0}};
    for (int j = 0; j < c->nin; j++) {
        if (c->constant[j]) continue;
        for (int64_t e = 0; e < numel_of(c->shape[j], c->rank[j]); e++) {
            double v = vals[j][e];
            vals[j][e] = v + EPS;
            double lp = eval_loss(c, vals);
            vals[j][e] = v - EPS;
            double lm = eval_loss(c, vals);
            vals[j][e] = v;
            fd[j][e] = (lp - lm) / (2 * EPS);
        }
    }

    /* per element always; in one backward too once em_sum records */
    for (int mode = sum_records() ? 0 : 1; mode < 2; mode++) {
        double g[2][MAXIN][MAXN];
        memset(g, 0, sizeof g);
        const em_checkpointing strat[2] = {EM_CKPT_DISABLED, EM_CKPT_BALANCED};
        for (int si = 0; si < 2; si++) {
            if (mode == 0) grads_whole(c, ad_dev(strat[si]), g[si]);
            else grads_per_element(c, ad_dev(strat[si]), oshape, orank, g[si]);
            for (int j = 0; j < c->nin; j++) {
                if (c->constant[j]) continue;
                for (int64_t e = 0; e < numel_of(c->shape[j], c->rank[j]); e++) {
                    double want = fd[j][e], got = g[si][j][e];
                    if (!(fabs(got - want) <= TOL * fmax(1.0, fabs(want))))
                        fail_msg("%s (%s, %s): d/dx%d[%lld] = %.12g, finite differences %.12g",
                                 c->name, si ? "balanced" : "disabled",
                                 mode ? "per element" : "summed", j, (long long)e, got, want);
                }
            }
        }
        if (memcmp(g[0], g[1], sizeof g[0]) != 0)
            fail_msg("%s: DISABLED and BALANCED gradients differ", c->name);
    }
}

/* ---- values ---- */

static const double GEN[6] = {-1.3, -0.45, 0.2, 0.65, 1.15, 1.9}; /* no 0, no integers */
static const double POS[6] = {0.3, 0.75, 1.2, 1.65, 2.4, 3.1};
static const double GT_M1[6] = {-0.6, -0.25, 0.1, 0.5, 1.3, 2.2};   /* > -1 */
static const double B6[6] = {0.9, -1.1, 1.7, -0.35, 0.55, 2.3};
static const double B3[3] = {0.9, -1.1, 1.7};
static const double B21[2] = {1.35, -0.7};
static const double P3[3] = {0.9, 1.1, 1.7};

#define SHAPE23 {{2, 3}}
#define UN(nm, f, v) {.name = nm, .un = f, .nin = 1, .rank = {2}, .shape = SHAPE23, .vals = {v}}
#define SC(nm, f, sv, v)                                                                      \
    {.name = nm, .sc = f, .s = sv, .nin = 1, .rank = {2}, .shape = SHAPE23, .vals = {v}}

static void test_unary(void **state) {
    (void)state;
    const gcase cases[] = {
        UN("neg", em_neg, GEN),         UN("abs", em_abs, GEN),
        UN("exp", em_exp, GEN),         UN("log", em_log, POS),
        UN("log1p", em_log1p, GT_M1),   UN("sqrt", em_sqrt, POS),
        UN("rsqrt", em_rsqrt, POS),     UN("sin", em_sin, GEN),
        UN("cos", em_cos, GEN),         UN("tanh", em_tanh, GEN),
        UN("sigmoid", em_sigmoid, GEN), UN("relu", em_relu, GEN),
        UN("gelu", em_gelu, GEN),       UN("silu", em_silu, GEN),
        UN("erf", em_erf, GEN),         UN("recip", em_recip, GEN),
        UN("floor", em_floor, GEN),     UN("ceil", em_ceil, GEN),
        UN("round", em_round, GEN),     UN("sign", em_sign, GEN),
        {.name = "clamp", .clamp = true, .lo = -0.5, .hi = 1.0, .nin = 1, .rank = {2},
         .shape = SHAPE23, .vals = {GEN}},
        {.name = "clamp (no lower bound)", .clamp = true, .lo = -INFINITY, .hi = 0.4, .nin = 1,
         .rank = {2}, .shape = SHAPE23, .vals = {GEN}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_case(&cases[i]);
}

static void test_scalar(void **state) {
    (void)state;
    const gcase cases[] = {
        SC("add_scalar", em_add_scalar, 1.5, GEN),
        SC("sub_scalar", em_sub_scalar, 2.0, GEN),
        SC("mul_scalar", em_mul_scalar, -1.7, GEN),
        SC("div_scalar", em_div_scalar, 0.8, GEN),
        SC("pow_scalar 2.5", em_pow_scalar, 2.5, POS),
        SC("pow_scalar 3", em_pow_scalar, 3.0, GEN),
        SC("pow_scalar -1.5", em_pow_scalar, -1.5, POS),
        SC("pow_scalar 0", em_pow_scalar, 0.0, GEN),
        SC("remainder_scalar 0.7", em_remainder_scalar, 0.7, GEN),
        SC("remainder_scalar -0.8", em_remainder_scalar, -0.8, GEN),
        SC("maximum_scalar", em_maximum_scalar, 0.5, GEN),
        SC("minimum_scalar", em_minimum_scalar, 0.5, GEN),
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_case(&cases[i]);
}

/* Every binary op on shapes [2,3]x[2,3], [2,3]x[3], [2,3]x[2,1], [3]x[2,3], and with either
 * side an untracked plain ref constant. */
static void test_binary(void **state) {
    (void)state;
    static const struct {
        const char *name;
        bin_fn f;
        bool pos_a; /* a must be positive (pow) */
    } ops[] = {
        {"add", em_add, false},     {"sub", em_sub, false},
        {"mul", em_mul, false},     {"div", em_div, false},
        {"pow", em_pow, true},      {"remainder", em_remainder, false},
        {"maximum", em_maximum, false}, {"minimum", em_minimum, false},
    };
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        const double *a6 = ops[i].pos_a ? POS : GEN, *a3 = ops[i].pos_a ? P3 : B3;
        char names[6][64];
        for (int k = 0; k < 6; k++) snprintf(names[k], sizeof names[k], "%s #%d", ops[i].name, k);
        const gcase cases[] = {
            {.name = names[0], .bin = ops[i].f, .nin = 2, .rank = {2, 2},
             .shape = {{2, 3}, {2, 3}}, .vals = {a6, B6}},
            {.name = names[1], .bin = ops[i].f, .nin = 2, .rank = {2, 1},
             .shape = {{2, 3}, {3}}, .vals = {a6, B3}},
            {.name = names[2], .bin = ops[i].f, .nin = 2, .rank = {2, 2},
             .shape = {{2, 3}, {2, 1}}, .vals = {a6, B21}},
            {.name = names[3], .bin = ops[i].f, .nin = 2, .rank = {1, 2},
             .shape = {{3}, {2, 3}}, .vals = {a3, GEN}},
            {.name = names[4], .bin = ops[i].f, .nin = 2, .rank = {2, 1},
             .shape = {{2, 3}, {3}}, .vals = {a6, B3}, .constant = {false, true}},
            {.name = names[5], .bin = ops[i].f, .nin = 2, .rank = {2, 1},
             .shape = {{2, 3}, {3}}, .vals = {a6, B3}, .constant = {true, false}},
        };
        for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) check_case(&cases[k]);
    }
}

/* ---- compositions ---- */

/* x * x: one tensor used twice by one op. */
static em_status f_square(const gcase *c, em_tensor *const *in, em_tensor **out) {
    (void)c;
    return em_mul(in[0], in[0], out);
}

/* exp(x) + x * x: one tensor used by two ops, gradients summed. */
static em_status f_twice(const gcase *c, em_tensor *const *in, em_tensor **out) {
    (void)c;
    em_tensor *e = NULL, *q = NULL;
    em_status s = em_exp(in[0], &e);
    if (s == EM_OK) s = em_mul(in[0], in[0], &q);
    if (s == EM_OK) s = em_add(e, q, out);
    em_tensor_release(e);
    em_tensor_release(q);
    return s;
}

/* sigmoid(sqrt(exp(x)) * x) + tanh(recip(x)): rules that read their output, stacked, so that
 * BALANCED recomputes outputs from recomputed inputs. */
static em_status f_chain(const gcase *c, em_tensor *const *in, em_tensor **out) {
    (void)c;
    em_tensor *e = NULL, *r = NULL, *m = NULL, *sg = NULL, *rc = NULL, *th = NULL;
    em_status s = em_exp(in[0], &e);
    if (s == EM_OK) s = em_sqrt(e, &r);
    if (s == EM_OK) s = em_mul(r, in[0], &m);
    if (s == EM_OK) s = em_sigmoid(m, &sg);
    if (s == EM_OK) s = em_recip(in[0], &rc);
    if (s == EM_OK) s = em_tanh(rc, &th);
    if (s == EM_OK) s = em_add(sg, th, out);
    em_tensor_release(e);
    em_tensor_release(r);
    em_tensor_release(m);
    em_tensor_release(sg);
    em_tensor_release(rc);
    em_tensor_release(th);
    return s;
}

/* where(a > 0.3, a, b) with b broadcast. */
static em_status f_where(const gcase *c, em_tensor *const *in, em_tensor **out) {
    (void)c;
    em_tensor *m = NULL;
    em_status s = em_gt_scalar(in[0], 0.3, &m);
    if (s == EM_OK) s = em_where(m, in[0], in[1], out);
    em_tensor_release(m);
    return s;
}

/* masked_fill(x * 2, x > 0.5, 5) */
static em_status f_masked_fill(const gcase *c, em_tensor *const *in, em_tensor **out) {
    (void)c;
    em_tensor *m = NULL, *t = NULL;
    em_status s = em_gt_scalar(in[0], 0.5, &m);
    if (s == EM_OK) s = em_mul_scalar(in[0], 2.0, &t);
    if (s == EM_OK) s = em_masked_fill(t, m, 5.0, out);
    em_tensor_release(m);
    em_tensor_release(t);
    return s;
}

/* (relu_(exp(x)) * 2.5 + y) / y - 1, through the consuming variants: a tracked input they
 * consume is never overwritten. */
static em_status f_consuming(const gcase *c, em_tensor *const *in, em_tensor **out) {
    (void)c;
    em_tensor *t = NULL;
    em_status s = em_exp(in[0], &t);
    if (s == EM_OK) s = em_relu_(t, &t);
    if (s == EM_OK) s = em_mul_scalar_(t, 2.5, &t);
    if (s == EM_OK) s = em_add_(t, in[1], &t);
    if (s == EM_OK) s = em_div_(t, in[1], &t);
    if (s == EM_OK) s = em_add_scalar_(t, -1.0, &t);
    if (s == EM_OK) s = em_sub_(t, in[0], &t);
    if (s == EM_OK) s = em_mul_(t, in[0], out);
    return s;
}

/* c * x where c is a fresh, solely owned, untracked ref tensor consumed by em_mul_: it would be
 * overwritten in place without autodiff, but mul's backward reads it. */
static em_status f_consume_constant(const gcase *c, em_tensor *const *in, em_tensor **out) {
    (void)c;
    em_tensor *k = NULL;
    em_status s = em_full(em_tensor_shape(in[0]), em_tensor_rank(in[0]), 1.75, EM_F64,
                          ref_dev(), &k);
    if (s == EM_OK) s = em_mul_(k, in[0], out);
    return s;
}

static void test_compositions(void **state) {
    (void)state;
    const gcase cases[] = {
        {.name = "mul(x, x)", .fn = f_square, .nin = 1, .rank = {2}, .shape = SHAPE23,
         .vals = {GEN}},
        {.name = "exp(x) + x * x", .fn = f_twice, .nin = 1, .rank = {2}, .shape = SHAPE23,
         .vals = {GEN}},
        {.name = "chain", .fn = f_chain, .nin = 1, .rank = {2}, .shape = SHAPE23,
         .vals = {GEN}},
        {.name = "where", .fn = f_where, .nin = 2, .rank = {2, 1}, .shape = {{2, 3}, {3}},
         .vals = {GEN, B3}},
        {.name = "where (constant b)", .fn = f_where, .nin = 2, .rank = {2, 1},
         .shape = {{2, 3}, {3}}, .vals = {GEN, B3}, .constant = {false, true}},
        {.name = "masked_fill", .fn = f_masked_fill, .nin = 1, .rank = {2}, .shape = SHAPE23,
         .vals = {GEN}},
        {.name = "consuming variants", .fn = f_consuming, .nin = 2, .rank = {2, 1},
         .shape = {{2, 3}, {3}}, .vals = {GEN, B3}},
        {.name = "consumed constant", .fn = f_consume_constant, .nin = 1, .rank = {2},
         .shape = SHAPE23, .vals = {GEN}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_case(&cases[i]);
}

/* ---- kinks and ties: exact values on one element ---- */

/* d/dx of op(x) * w at a single point x (and, for binary ops, at b), on strategy c. */
static void grad_at(em_checkpointing cs, const gcase *c, double *ga, double *gb) {
    int64_t one = 1;
    em_tensor *in[2] = {0}, *y = NULL, *w = NULL, *loss = NULL;
    for (int j = 0; j < c->nin; j++) {
        in[j] = make(c->vals[j], &one, 1, ad_dev(cs));
        OK(em_tensor_require_grad(in[j]));
    }
    OK(run_fn(c, in, &y));
    double wv = 1.5;
    w = make(&wv, &one, 1, ref_dev());
    OK(em_mul(y, w, &loss));
    double g[MAXIN][MAXN] = {{0}};
    collect(c, loss, in, g, NULL);
    *ga = g[0][0];
    if (gb) *gb = g[1][0];
    em_tensor_release(loss);
    em_tensor_release(w);
    em_tensor_release(y);
    for (int j = 0; j < c->nin; j++) em_tensor_release(in[j]);
}

static void test_kinks(void **state) {
    (void)state;
    static const double zero[1] = {0.0}, half[1] = {0.5}, lo[1] = {-0.5}, hi[1] = {1.0},
                        nan1[1] = {NAN};
    static const struct {
        gcase c;
        double ga, gb; /* with w = 1.5 */
    } k[] = {
        {{.name = "relu(0)", .un = em_relu, .nin = 1, .vals = {zero}}, 0.0, 0},
        {{.name = "abs(0)", .un = em_abs, .nin = 1, .vals = {zero}}, 0.0, 0},
        {{.name = "clamp at lo", .clamp = true, .lo = -0.5, .hi = 1.0, .nin = 1, .vals = {lo}},
         1.5, 0},
        {{.name = "clamp at hi", .clamp = true, .lo = -0.5, .hi = 1.0, .nin = 1, .vals = {hi}},
         1.5, 0},
        {{.name = "clamp(NaN)", .clamp = true, .lo = -0.5, .hi = 1.0, .nin = 1, .vals = {nan1}},
         0.0, 0},
        {{.name = "maximum tie", .bin = em_maximum, .nin = 2, .vals = {half, half}}, 0.75, 0.75},
        {{.name = "minimum tie", .bin = em_minimum, .nin = 2, .vals = {half, half}}, 0.75, 0.75},
        {{.name = "maximum_scalar tie", .sc = em_maximum_scalar, .s = 0.5, .nin = 1,
          .vals = {half}}, 0.75, 0},
        {{.name = "minimum_scalar tie", .sc = em_minimum_scalar, .s = 0.5, .nin = 1,
          .vals = {half}}, 0.75, 0},
        {{.name = "pow_scalar(0, 0)", .sc = em_pow_scalar, .s = 0.0, .nin = 1, .vals = {zero}},
         0.0, 0},
        {{.name = "pow_scalar(0, 2)", .sc = em_pow_scalar, .s = 2.0, .nin = 1, .vals = {zero}},
         0.0, 0},
        {{.name = "sign(0.5)", .un = em_sign, .nin = 1, .vals = {half}}, 0.0, 0},
    };
    const em_checkpointing strat[2] = {EM_CKPT_DISABLED, EM_CKPT_BALANCED};
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        for (int si = 0; si < 2; si++) {
            double ga = NAN, gb = NAN;
            grad_at(strat[si], &k[i].c, &ga, k[i].c.nin > 1 ? &gb : NULL);
            if (ga != k[i].ga || (k[i].c.nin > 1 && gb != k[i].gb))
                fail_msg("%s: gradients %g %g, want %g %g", k[i].c.name, ga, gb, k[i].ga,
                         k[i].gb);
        }
    }
}

/* ---- recording ---- */

/* masked_fill records one node (where's), whose fill value is an untracked constant. */
static void test_masked_fill_records_once(void **state) {
    (void)state;
    const double xv[3] = {0.2, 0.9, -0.4};
    const bool mv[3] = {false, true, false};
    int64_t n = 3;
    em_tensor *x = make(xv, &n, 1, ad_dev(EM_CKPT_DISABLED)), *m = NULL, *y = NULL;
    OK(em_tensor_from_data(mv, EM_BOOL, &n, 1, ref_dev(), &m));
    OK(em_masked_fill(x, m, 5.0, &y));
    assert_non_null(y->ad);
    assert_ptr_equal(y->ad->rule, &emi_rule_where);
    assert_int_equal(y->ad->nin, 3);
    assert_null(y->ad->in[0].node);            /* the fill value: a constant */
    assert_ptr_equal(y->ad->in[1].node, x->ad); /* x itself, no intermediate node */
    assert_null(y->ad->in[2].node);            /* the mask */
    double yv[3];
    OK(em_tensor_to_data(y, yv, sizeof yv));
    assert_true(yv[0] == 0.2 && yv[1] == 5.0 && yv[2] == -0.4);
    em_tensor_release(y);
    em_tensor_release(m);
    em_tensor_release(x);
}

/* Each op records its rule; floor, ceil, round and sign record the no-gradient rule; their
 * outputs stay tracked. */
static void test_rules_recorded(void **state) {
    (void)state;
    const double xv[2] = {0.3, 1.7};
    int64_t n = 2;
    em_tensor *x = make(xv, &n, 1, ad_dev(EM_CKPT_BALANCED)), *y = NULL;
    const un_fn nog[4] = {em_floor, em_ceil, em_round, em_sign};
    for (int i = 0; i < 4; i++) {
        OK(nog[i](x, &y));
        assert_non_null(y->ad);
        assert_ptr_equal(y->ad->rule, &emi_rule_no_grad);
        em_tensor_release(y);
    }
    OK(em_exp(x, &y));
    assert_ptr_equal(y->ad->rule, emi_rules_unary[EM_UN_EXP]);
    assert_false(y->ad->rule->compute_bound);
    em_tensor_release(y);
    OK(em_clamp(x, 0.0, 1.0, &y));
    assert_ptr_equal(y->ad->rule, emi_rules_unary[EM_UN_CLAMP]);
    const emi_rule_unary_params *p = (const emi_rule_unary_params *)y->ad->params;
    assert_true(p->op == EM_UN_CLAMP && p->p[0] == 0.0 && p->p[1] == 1.0);
    em_tensor_release(y);
    OK(em_pow_scalar(x, 2.0, &y));
    assert_ptr_equal(y->ad->rule, emi_rules_scalar[EM_BIN_POW]);
    const emi_rule_scalar_params *q = (const emi_rule_scalar_params *)y->ad->params;
    assert_true(q->op == EM_BIN_POW && q->s == 2.0);
    em_tensor_release(y);
    /* comparisons: untracked bool on the autodiff device */
    OK(em_gt_scalar(x, 1.0, &y));
    assert_null(y->ad);
    assert_true(em_tensor_device(y).autodiff);
    em_tensor_release(y);
    for (int i = 0; i < EM_UN_COUNT; i++) {
        if (!em_unary_op_is_bool((em_unary_op)i)) assert_non_null(emi_rules_unary[i]);
        else assert_null(emi_rules_unary[i]); /* bool results: logical_not, isnan, ... */
    }
    for (int i = 0; i < EM_BIN_COUNT; i++) {
        if (i < EM_BIN_EQ) assert_non_null(emi_rules_scalar[i]);
        else assert_null(emi_rules_scalar[i]); /* comparisons, logic; atan2 has no _scalar */
        if (em_binary_op_is_bool((em_binary_op)i)) assert_null(emi_rules_binary[i]);
        else assert_non_null(emi_rules_binary[i]);
    }
    em_tensor_release(x);
}

/* A consuming variant on a tracked, solely owned input computes out of place (the result is
 * allocated while the input still lives, so distinct addresses mean a distinct tensor). */
static void test_consuming_keeps_tracked_input(void **state) {
    (void)state;
    const double xv[3] = {1.0, -2.0, 3.0};
    int64_t n = 3;
    em_tensor *x = make(xv, &n, 1, ad_dev(EM_CKPT_DISABLED)), *t = NULL, *u = NULL;
    OK(em_mul_scalar(x, 1.0, &t)); /* tracked, solely owned, its rule saves nothing */
    assert_true(em_tensor_can_mut(t));
    uintptr_t tp = (uintptr_t)t, bp = (uintptr_t)t->st->buf;
    OK(em_relu_(t, &u));
    assert_true((uintptr_t)u != tp);
    assert_true((uintptr_t)u->st->buf != bp);
    double uv[3];
    OK(em_tensor_to_data(u, uv, sizeof uv));
    assert_true(uv[0] == 1.0 && uv[1] == 0.0 && uv[2] == 3.0);
    assert_true(em_tensor_is_tracked(u));
    em_tensor_release(u);
    em_tensor_release(x);
}

/* The gradients of each input of y = f(ins) with loss sum(y), written into g[i] (n values
 * each), on dev. */
static void grads_of(em_device dev, em_status (*f)(em_tensor *const *, em_tensor **),
                     const double *const *vals, const int64_t *n, int nin, double g[][8]) {
    em_tensor *in[3] = {0}, *y = NULL, *l = NULL;
    for (int i = 0; i < nin; i++) {
        in[i] = make(vals[i], &n[i], 1, dev);
        OK(em_tensor_require_grad(in[i]));
    }
    OK(f(in, &y));
    OK(em_sum(y, &l));
    em_grads *gr = NULL;
    OK(em_backward(l, &gr));
    for (int i = 0; i < nin; i++) {
        em_tensor *gi = NULL;
        OK(em_grads_get(gr, in[i], &gi));
        OK(em_tensor_to_data(gi, g[i], sizeof(double) * (size_t)n[i]));
        em_tensor_release(gi);
    }
    em_grads_release(gr);
    em_tensor_release(l);
    em_tensor_release(y);
    for (int i = 0; i < nin; i++) em_tensor_release(in[i]);
}

static em_status f_pow(em_tensor *const *in, em_tensor **out) { return em_pow(in[0], in[1], out); }
static em_status f_clamp_t(em_tensor *const *in, em_tensor **out) {
    return em_clamp_tensor(in[0], in[1], in[2], out);
}
static em_status f_nan_to_num(em_tensor *const *in, em_tensor **out) {
    return em_nan_to_num(in[0], 0.0, NULL, NULL, out);
}
static em_status f_softplus(em_tensor *const *in, em_tensor **out) {
    return em_softplus(in[0], 1.0, 20.0, out);
}

/* Points where the rules must give PyTorch's values (finite differences cannot see them):
 * torch 1.13's gradients of the same expressions. */
static void test_issue14_points(void **state) {
    (void)state;
    for (int k = 0; k < 2; k++) {
        const em_device dev = ad_dev(k ? EM_CKPT_BALANCED : EM_CKPT_DISABLED);
        double g[3][8];
        /* pow(a, b) at a = 0: b = 0 gave NaN for a (0 * 0^-1); PyTorch masks b == 0 */
        {
            const double a[3] = {0, 0, 0}, b[3] = {0, 1, -1};
            const double *v[2] = {a, b};
            const int64_t n[2] = {3, 3};
            grads_of(dev, f_pow, v, n, 2, g);
            assert_true(g[0][0] == 0.0 && g[0][1] == 1.0 && g[0][2] == -INFINITY);
            assert_true(g[1][0] == 0.0 && g[1][1] == 0.0 && g[1][2] == -INFINITY);
        }
        /* clamp_tensor: ties go to x, lo > hi sends everything to hi */
        {
            const double x[5] = {0, 1, 2, 3, 0.5}, lo[5] = {1, 1, 1, 1, 2}, hi[5] = {2, 2, 2, 2, 1};
            const double *v[3] = {x, lo, hi};
            const int64_t n[3] = {5, 5, 5};
            grads_of(dev, f_clamp_t, v, n, 3, g);
            const double gx[5] = {0, 1, 1, 0, 0}, glo[5] = {1, 0, 0, 0, 0}, ghi[5] = {0, 0, 0, 1, 1};
            for (int i = 0; i < 5; i++) {
                assert_true(g[0][i] == gx[i]);
                assert_true(g[1][i] == glo[i]);
                assert_true(g[2][i] == ghi[i]);
            }
        }
        /* nan_to_num: no gradient through the replaced values */
        {
            const double x[3] = {1, INFINITY, NAN};
            const double *v[1] = {x};
            const int64_t n[1] = {3};
            grads_of(dev, f_nan_to_num, v, n, 1, g);
            assert_true(g[0][0] == 1.0 && g[0][1] == 0.0 && g[0][2] == 0.0);
        }
        /* softplus: the identity above the threshold, sigmoid below */
        {
            const double x[2] = {1, 25};
            const double *v[1] = {x};
            const int64_t n[1] = {2};
            grads_of(dev, f_softplus, v, n, 1, g);
            assert_true(fabs(g[0][0] - 1.0 / (1.0 + exp(-1.0))) < 1e-15 && g[0][1] == 1.0);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_issue14_points),
        cmocka_unit_test(test_unary),
        cmocka_unit_test(test_scalar),
        cmocka_unit_test(test_binary),
        cmocka_unit_test(test_compositions),
        cmocka_unit_test(test_kinks),
        cmocka_unit_test(test_masked_fill_records_once),
        cmocka_unit_test(test_rules_recorded),
        cmocka_unit_test(test_consuming_keeps_tracked_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
