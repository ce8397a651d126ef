/*
 * test_autodiff_nn.c — gradients of the neural ops: conv1d, conv2d, conv_transpose2d across
 * stride/padding/dilation/groups/bias/output_padding, max/avg pooling (padding, ceil_mode,
 * count_include_pad, dilation), adaptive average pooling with non-divisible sizes, layer_norm
 * with and without weight and bias, and the compositions embedding (repeated ids),
 * cross_entropy (both target kinds) and dropout (fixed seed); a chain of them that makes
 * BALANCED recompute; random ops on autodiff devices; the internal backward entry points.
 *
 * Every check builds loss = sum(op(in...) * r) with a fixed random r of the output's shape and
 * compares d loss / d in with central finite differences (f64, eps 1e-6) computed on plain ref,
 * on ref+autodiff and ref+autodiff:balanced, whose gradients must be identical. Each case also
 * runs in f32 against the f64 gradients.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "autodiff/rules/rules.h"
#include "ember/ember.h"

#define EPS 1e-6
#define TOL 1e-6
#define MAXIN 4

static em_device dev_of(const char *text) {
    em_device d;
    assert_int_equal(em_device_parse(text, &d), EM_OK);
    return d;
}

static const char *const AD_DEVS[2] = {"ref+autodiff", "ref+autodiff:balanced"};

/* ---- data ---- */

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* n values uniform in [-1, 1) from seed. */
static void fill(uint64_t seed, int64_t n, double *out) {
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++)
        out[i] = 2.0 * ((double)(rng_next(&s) >> 11) / 9007199254740992.0) - 1.0;
}

static int64_t numel(const int64_t *shape, int rank) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= shape[i];
    return n;
}

static double *alloc_d(int64_t n) {
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    assert_non_null(v);
    return v;
}

/* t's values as doubles (t is f64 or f32). */
static double *read_all(const em_tensor *t) {
    int64_t n = em_tensor_numel(t);
    double *v = alloc_d(n);
    if (em_tensor_dtype(t) == EM_F64) {
        assert_int_equal(em_tensor_to_data(t, v, sizeof(double) * (size_t)n), EM_OK);
    } else {
        assert_int_equal(em_tensor_dtype(t), EM_F32);
        float *f = malloc(sizeof(float) * (size_t)(n ? n : 1));
        assert_non_null(f);
        assert_int_equal(em_tensor_to_data(t, f, sizeof(float) * (size_t)n), EM_OK);
        for (int64_t i = 0; i < n; i++) v[i] = f[i];
        free(f);
    }
    return v;
}

/* ---- cases ---- */

typedef em_status (*op_fn)(em_tensor *const *in, const void *p, em_tensor **out);

typedef enum { IN_FLOAT, IN_INT, IN_ABSENT } in_kind;

typedef struct input {
    in_kind kind;
    int rank;
    int64_t shape[EM_MAX_RANK];
    const int64_t *ints; /* IN_INT: the values (i64) */
} input;

typedef struct gcase {
    const char *name;
    op_fn fn;
    const void *p;
    int nin;
    input in[MAXIN];
} gcase;

/* Data of every float input (NULL for the others). */
static void case_data(const gcase *c, double **data) {
    for (int i = 0; i < MAXIN; i++) {
        data[i] = NULL;
        if (i >= c->nin || c->in[i].kind != IN_FLOAT) continue;
        int64_t n = numel(c->in[i].shape, c->in[i].rank);
        data[i] = alloc_d(n);
        fill(31 + 1000 * (uint64_t)i + (uint64_t)n, n, data[i]);
    }
}

/* The inputs of c on dev in dtype dt (float ones; int ones are i64), or NULL (absent). */
static void build(const gcase *c, double *const *data, em_device dev, em_dtype dt,
                  em_tensor **t) {
    for (int i = 0; i < c->nin; i++) {
        const input *in = &c->in[i];
        t[i] = NULL;
        if (in->kind == IN_ABSENT) continue;
        if (in->kind == IN_INT) {
            assert_int_equal(em_tensor_from_data(in->ints, EM_I64, in->shape, in->rank, dev, &t[i]),
                             EM_OK);
            continue;
        }
        int64_t n = numel(in->shape, in->rank);
        if (dt == EM_F64) {
            assert_int_equal(em_tensor_from_data(data[i], EM_F64, in->shape, in->rank, dev, &t[i]),
                             EM_OK);
        } else {
            float *f = malloc(sizeof(float) * (size_t)(n ? n : 1));
            assert_non_null(f);
            for (int64_t j = 0; j < n; j++) f[j] = (float)data[i][j];
            assert_int_equal(em_tensor_from_data(f, EM_F32, in->shape, in->rank, dev, &t[i]),
                             EM_OK);
            free(f);
        }
    }
}

static void release_all(em_tensor **t, int n) {
    for (int i = 0; i < n; i++) em_tensor_release(t[i]);
}

/* loss = sum(y * r) with r the fixed weights of y's size, built on y's device. */
static em_tensor *weighted_sum(const gcase *c, em_tensor *y) {
    int64_t n = em_tensor_numel(y);
    double *rd = alloc_d(n);
    fill(4321 + (uint64_t)n, n, rd);
    em_tensor *r = NULL, *r2 = NULL, *yr = NULL, *loss = NULL;
    assert_int_equal(em_tensor_from_data(rd, EM_F64, em_tensor_shape(y), em_tensor_rank(y),
                                         em_tensor_device(y), &r),
                     EM_OK);
    free(rd);
    assert_int_equal(em_cast(r, em_tensor_dtype(y), &r2), EM_OK);
    if (em_mul(y, r2, &yr) != EM_OK || em_sum(yr, &loss) != EM_OK)
        fail_msg("%s: the loss: %s", c->name, em_last_error());
    em_tensor_release(r);
    em_tensor_release(r2);
    em_tensor_release(yr);
    return loss;
}

/* The loss on plain ref in f64. */
static double plain_loss(const gcase *c, double *const *data) {
    em_tensor *t[MAXIN], *y = NULL;
    build(c, data, dev_of("ref"), EM_F64, t);
    if (c->fn(t, c->p, &y) != EM_OK) fail_msg("%s: %s", c->name, em_last_error());
    em_tensor *loss = weighted_sum(c, y);
    double l = 0;
    assert_int_equal(em_tensor_item(loss, &l), EM_OK);
    em_tensor_release(loss);
    em_tensor_release(y);
    release_all(t, c->nin);
    return l;
}

/* The autodiff gradients of every float input on device text in dtype dt (grads[i], malloc'd,
 * NULL for non-float inputs). */
static void ad_grads(const gcase *c, double *const *data, const char *text, em_dtype dt,
                     double **grads) {
    em_tensor *t[MAXIN], *y = NULL;
    build(c, data, dev_of(text), dt, t);
    for (int i = 0; i < c->nin; i++)
        if (c->in[i].kind == IN_FLOAT) assert_int_equal(em_tensor_require_grad(t[i]), EM_OK);
    if (c->fn(t, c->p, &y) != EM_OK) fail_msg("%s on %s: %s", c->name, text, em_last_error());
    if (!em_tensor_is_tracked(y)) fail_msg("%s on %s: the result is not tracked", c->name, text);
    em_tensor *loss = weighted_sum(c, y);
    em_tensor_release(y);
    if (!em_tensor_is_tracked(loss)) fail_msg("%s on %s: the loss is not tracked", c->name, text);
    em_grads *g = NULL;
    if (em_backward(loss, &g) != EM_OK)
        fail_msg("%s on %s: backward: %s", c->name, text, em_last_error());
    for (int i = 0; i < c->nin; i++) {
        grads[i] = NULL;
        if (c->in[i].kind != IN_FLOAT) continue;
        em_tensor *gi = NULL;
        assert_int_equal(em_grads_get(g, t[i], &gi), EM_OK);
        if (!gi) fail_msg("%s on %s: input %d got no gradient", c->name, text, i);
        assert_int_equal(em_tensor_dtype(gi), dt);
        assert_int_equal(em_tensor_rank(gi), c->in[i].rank);
        for (int d = 0; d < c->in[i].rank; d++)
            assert_int_equal(em_tensor_shape(gi)[d], c->in[i].shape[d]);
        assert_false(em_tensor_is_tracked(gi));
        grads[i] = read_all(gi);
        em_tensor_release(gi);
    }
    em_grads_release(g);
    em_tensor_release(loss);
    release_all(t, c->nin);
}

/* Checks case c: both autodiff devices against finite differences and against each other
 * (identical), then f32 against the f64 gradients. */
static void gradcheck(const gcase *c) {
    double *data[MAXIN], *g[2][MAXIN], *g32[MAXIN];
    case_data(c, data);
    for (int dv = 0; dv < 2; dv++) ad_grads(c, data, AD_DEVS[dv], EM_F64, g[dv]);
    ad_grads(c, data, AD_DEVS[0], EM_F32, g32);
    for (int i = 0; i < c->nin; i++) {
        if (c->in[i].kind != IN_FLOAT) continue;
        int64_t n = numel(c->in[i].shape, c->in[i].rank);
        for (int64_t j = 0; j < n; j++) {
            if (g[0][i][j] != g[1][i][j])
                fail_msg("%s: d/d in%d[%lld]: DISABLED %.17g != BALANCED %.17g", c->name, i,
                         (long long)j, g[0][i][j], g[1][i][j]);
            double x0 = data[i][j];
            data[i][j] = x0 + EPS;
            double lp = plain_loss(c, data);
            data[i][j] = x0 - EPS;
            double lm = plain_loss(c, data);
            data[i][j] = x0;
            double fd = (lp - lm) / (2 * EPS);
            if (!(fabs(fd - g[0][i][j]) <= TOL * fmax(1.0, fabs(fd))))
                fail_msg("%s: d/d in%d[%lld]: autodiff %.12g, finite differences %.12g", c->name,
                         i, (long long)j, g[0][i][j], fd);
            if (!(fabs(g32[i][j] - g[0][i][j]) <= 2e-4 * fmax(1.0, fabs(g[0][i][j]))))
                fail_msg("%s: d/d in%d[%lld]: f32 %.9g, f64 %.12g", c->name, i, (long long)j,
                         g32[i][j], g[0][i][j]);
        }
    }
    for (int i = 0; i < MAXIN; i++) {
        free(data[i]);
        if (i < c->nin) {
            free(g[0][i]);
            free(g[1][i]);
            free(g32[i]);
        }
    }
}

/* ---- the ops ---- */

static em_status f_conv1d(em_tensor *const *in, const void *p, em_tensor **out) {
    return em_conv1d(in[0], in[1], in[2], p, out);
}
static em_status f_conv2d(em_tensor *const *in, const void *p, em_tensor **out) {
    return em_conv2d(in[0], in[1], in[2], p, out);
}
static em_status f_conv_t(em_tensor *const *in, const void *p, em_tensor **out) {
    return em_conv_transpose2d(in[0], in[1], in[2], p, out);
}

typedef struct maxp {
    em_pool_params p;
    bool want_indices;
} maxp;

static em_status f_max_pool(em_tensor *const *in, const void *p, em_tensor **out) {
    const maxp *m = p;
    em_tensor *idx = NULL;
    em_status s = em_max_pool2d(in[0], &m->p, out, m->want_indices ? &idx : NULL);
    if (s == EM_OK && m->want_indices) {
        /* the indices are an untracked int result on the same device */
        assert_int_equal(em_tensor_dtype(idx), EM_I64);
        assert_false(em_tensor_is_tracked(idx));
        assert_true(em_device_equal(em_tensor_device(idx), em_tensor_device(*out)));
        em_tensor_release(idx);
    }
    return s;
}
static em_status f_avg_pool(em_tensor *const *in, const void *p, em_tensor **out) {
    return em_avg_pool2d(in[0], p, out);
}
static em_status f_adaptive(em_tensor *const *in, const void *p, em_tensor **out) {
    const int64_t *o = p;
    return em_adaptive_avg_pool2d(in[0], o[0], o[1], out);
}

typedef struct lnp {
    int nd;
    double eps;
} lnp;

static em_status f_layer_norm(em_tensor *const *in, const void *p, em_tensor **out) {
    const lnp *l = p;
    return em_layer_norm(in[0], l->nd, in[1], in[2], l->eps, out);
}
static em_status f_embedding(em_tensor *const *in, const void *p, em_tensor **out) {
    (void)p;
    return em_embedding(in[0], in[1], out);
}
static em_status f_cross_entropy(em_tensor *const *in, const void *p, em_tensor **out) {
    (void)p;
    return em_cross_entropy(in[0], in[1], out);
}
static em_status f_dropout(em_tensor *const *in, const void *p, em_tensor **out) {
    const double *d = p;
    return em_dropout(in[0], d[0], true, (uint64_t)d[1], out);
}

/* x [2,2,6,6] -> conv2d(w1 [3,2,3,3], b1, pad 1) -> relu -> max_pool 2x2 -> layer_norm(lw)
 *   -> conv_transpose2d(w1, stride 2, output_padding 1x0) [2,2,8,7] -> avg_pool -> flattened to
 *   [2, 2, 72] -> conv1d(w1[0:2] as [2,2,9]) -> [2, 2, 1, 64] -> adaptive pool (1, 3).
 * Under BALANCED every memory-bound value a later rule needs is recomputed from the kept
 * convolution outputs. */
static em_status f_chain(em_tensor *const *in, const void *p, em_tensor **out) {
    (void)p;
    em_conv_params cp = em_conv_params_default();
    cp.padding[0] = cp.padding[1] = 1;
    const em_pool_params mp = {{2, 2}, {2, 2}, {0, 0}, {1, 1}, false, false};
    const em_pool_params ap = {{2, 2}, {1, 1}, {1, 1}, {0, 0}, true, false};
    em_conv_params tp = em_conv_params_default();
    tp.stride[0] = tp.stride[1] = 2;
    tp.output_padding[0] = 1;
    const int64_t fs[3] = {2, 2, 72}, w3s[3] = {2, 2, 9}, hs[4] = {2, 2, 1, 64};
    em_tensor *t[11] = {NULL};
    em_status s = em_conv2d(in[0], in[1], in[2], &cp, &t[0]);
    if (s == EM_OK) s = em_relu(t[0], &t[1]);
    if (s == EM_OK) s = em_max_pool2d(t[1], &mp, &t[2], NULL);
    if (s == EM_OK) s = em_layer_norm(t[2], 3, in[3], NULL, 1e-5, &t[3]);
    if (s == EM_OK) s = em_conv_transpose2d(t[3], in[1], NULL, &tp, &t[4]);
    if (s == EM_OK) s = em_avg_pool2d(t[4], &ap, &t[5]);
    if (s == EM_OK) s = em_reshape(t[5], fs, 3, &t[6]);
    if (s == EM_OK) s = em_slice(in[1], 0, 0, 2, 1, &t[7]);
    if (s == EM_OK) s = em_reshape(t[7], w3s, 3, &t[8]);
    if (s == EM_OK) s = em_conv1d(t[6], t[8], NULL, NULL, &t[9]);
    if (s == EM_OK) s = em_reshape(t[9], hs, 4, &t[10]);
    if (s == EM_OK) s = em_adaptive_avg_pool2d(t[10], 1, 3, out);
    release_all(t, 11);
    return s;
}

/* ---- shapes ---- */

#define F(r, ...) {IN_FLOAT, r, {__VA_ARGS__}, NULL}
#define ABSENT {IN_ABSENT, 0, {0}, NULL}

static em_conv_params cparams(int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,
                              int64_t dw, int64_t oh, int64_t ow, int64_t g) {
    em_conv_params p = {{sh, sw}, {ph, pw}, {dh, dw}, {oh, ow}, g};
    return p;
}

static void test_conv2d(void **state) {
    (void)state;
    em_conv_params p1 = cparams(2, 1, 1, 0, 1, 2, 0, 0, 2);
    gcase c1 = {"conv2d stride/pad/dil/groups/bias", f_conv2d, &p1, 3,
                {F(4, 2, 4, 5, 6), F(4, 6, 2, 3, 2), F(1, 6)}};
    gradcheck(&c1);
    em_conv_params p2 = cparams(1, 1, 1, 1, 1, 1, 0, 0, 1);
    gcase c2 = {"conv2d pad 1 no bias", f_conv2d, &p2, 3,
                {F(4, 1, 3, 5, 5), F(4, 4, 3, 3, 3), ABSENT}};
    gradcheck(&c2);
    em_conv_params p3 = cparams(3, 2, 1, 1, 2, 1, 0, 0, 2);
    gcase c3 = {"conv2d depthwise stride 3x2 dil 2x1", f_conv2d, &p3, 3,
                {F(4, 2, 2, 8, 5), F(4, 2, 1, 2, 3), F(1, 2)}};
    gradcheck(&c3);
    gcase c4 = {"conv2d defaults (NULL params)", f_conv2d, NULL, 3,
                {F(4, 2, 2, 4, 4), F(4, 3, 2, 2, 1), F(1, 3)}};
    gradcheck(&c4);
}

static void test_conv1d(void **state) {
    (void)state;
    em_conv_params p1 = cparams(2, 0, 1, 0, 2, 0, 0, 0, 2);
    gcase c1 = {"conv1d stride/pad/dil/groups/bias", f_conv1d, &p1, 3,
                {F(3, 2, 4, 9), F(3, 6, 2, 3), F(1, 6)}};
    gradcheck(&c1);
    gcase c2 = {"conv1d defaults no bias", f_conv1d, NULL, 3,
                {F(3, 3, 2, 6), F(3, 2, 2, 2), ABSENT}};
    gradcheck(&c2);
}

static void test_conv_transpose2d(void **state) {
    (void)state;
    em_conv_params p1 = cparams(2, 3, 1, 0, 1, 2, 1, 2, 2);
    gcase c1 = {"conv_transpose2d stride/pad/dil/groups/output_padding/bias", f_conv_t, &p1, 3,
                {F(4, 2, 4, 3, 4), F(4, 4, 3, 3, 2), F(1, 6)}};
    gradcheck(&c1);
    /* output_padding >= stride (allowed as it is < dilation): x padded in the weight grad */
    em_conv_params p2 = cparams(1, 2, 0, 1, 3, 2, 2, 1, 1);
    gcase c2 = {"conv_transpose2d output_padding >= stride", f_conv_t, &p2, 3,
                {F(4, 1, 2, 3, 3), F(4, 2, 3, 2, 2), ABSENT}};
    gradcheck(&c2);
    gcase c3 = {"conv_transpose2d defaults", f_conv_t, NULL, 3,
                {F(4, 2, 3, 2, 3), F(4, 3, 2, 2, 2), F(1, 2)}};
    gradcheck(&c3);
}

static void test_pooling(void **state) {
    (void)state;
    const maxp m[] = {
        {{{3, 2}, {2, 2}, {1, 1}, {1, 1}, true, false}, false},
        {{{2, 2}, {0, 0}, {0, 0}, {2, 1}, false, false}, true},
        {{{3, 3}, {2, 1}, {1, 0}, {1, 2}, true, false}, false},
    };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        gcase c = {"max_pool2d", f_max_pool, &m[i], 1, {F(4, 2, 3, 7, 6)}};
        gradcheck(&c);
    }
    const em_pool_params a[] = {
        {{3, 3}, {2, 2}, {1, 1}, {0, 0}, true, true},
        {{3, 3}, {2, 2}, {1, 1}, {0, 0}, true, false},
        {{2, 3}, {1, 2}, {0, 1}, {0, 0}, false, true},
        {{2, 3}, {1, 2}, {0, 1}, {0, 0}, false, false},
        {{2, 2}, {0, 0}, {0, 0}, {0, 0}, true, false},
    };
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) {
        gcase c = {"avg_pool2d", f_avg_pool, &a[i], 1, {F(4, 2, 2, 7, 6)}};
        gradcheck(&c);
    }
    static const int64_t sizes[][2] = {{3, 2}, {4, 4}, {7, 5}, {1, 1}, {2, 3}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        gcase c = {"adaptive_avg_pool2d", f_adaptive, sizes[i], 1, {F(4, 2, 2, 7, 5)}};
        gradcheck(&c);
    }
}

static void test_layer_norm(void **state) {
    (void)state;
    const lnp l2 = {2, 1e-5}, l1 = {1, 0.1};
    gcase c1 = {"layer_norm weight+bias", f_layer_norm, &l2, 3,
                {F(3, 3, 4, 5), F(2, 4, 5), F(2, 4, 5)}};
    gradcheck(&c1);
    gcase c2 = {"layer_norm plain", f_layer_norm, &l1, 3, {F(3, 3, 4, 5), ABSENT, ABSENT}};
    gradcheck(&c2);
    gcase c3 = {"layer_norm weight only", f_layer_norm, &l1, 3,
                {F(2, 6, 5), F(1, 5), ABSENT}};
    gradcheck(&c3);
    gcase c4 = {"layer_norm bias only", f_layer_norm, &l2, 3,
                {F(3, 2, 3, 4), ABSENT, F(2, 3, 4)}};
    gradcheck(&c4);
}

static void test_compositions(void **state) {
    (void)state;
    static const int64_t ids[6] = {1, 3, 1, 0, 3, 3};
    gcase e = {"embedding (repeated ids)", f_embedding, NULL, 2,
               {F(2, 5, 3), {IN_INT, 2, {2, 3}, ids}}};
    gradcheck(&e);
    static const int64_t cls[4] = {2, 0, 4, 2};
    gcase ce1 = {"cross_entropy (class indices)", f_cross_entropy, NULL, 2,
                 {F(2, 4, 5), {IN_INT, 1, {4}, cls}}};
    gradcheck(&ce1);
    gcase ce2 = {"cross_entropy (probabilities)", f_cross_entropy, NULL, 2,
                 {F(2, 4, 5), F(2, 4, 5)}};
    gradcheck(&ce2);
    static const double dp[2] = {0.3, 42};
    gcase d = {"dropout (seed 42)", f_dropout, dp, 1, {F(2, 4, 6)}};
    gradcheck(&d);
}

static void test_chain(void **state) {
    (void)state;
    gcase c = {"chain", f_chain, NULL, 4,
               {F(4, 2, 2, 6, 6), F(4, 3, 2, 3, 3), F(1, 3), F(3, 3, 3, 3)}};
    gradcheck(&c);
}

/* ---- random ops and the internal entry points ---- */

/* Float random tensors on an autodiff device are leaves (they take require_grad); int ones
 * are untracked values that report the device. */
static void test_random_leaves(void **state) {
    (void)state;
    for (int dv = 0; dv < 2; dv++) {
        em_device dev = dev_of(AD_DEVS[dv]);
        const int64_t shape[2] = {3, 4};
        em_tensor *u = NULL, *n = NULL, *b = NULL, *bi = NULL, *y = NULL, *loss = NULL;
        assert_int_equal(em_rand_uniform(shape, 2, EM_F64, -1, 1, 7, dev, &u), EM_OK);
        assert_int_equal(em_rand_normal(shape, 2, EM_F64, 0, 1, 8, dev, &n), EM_OK);
        assert_int_equal(em_rand_bernoulli(shape, 2, EM_F64, 0.5, 9, dev, &b), EM_OK);
        assert_int_equal(em_rand_bernoulli(shape, 2, EM_I64, 0.5, 9, dev, &bi), EM_OK);
        assert_true(em_tensor_is_tracked(u) && em_tensor_is_tracked(n) && em_tensor_is_tracked(b));
        assert_false(em_tensor_is_tracked(bi));
        assert_true(em_device_equal(em_tensor_device(bi), dev));
        assert_true(em_device_equal(em_tensor_device(u), dev));
        assert_int_equal(em_tensor_require_grad(u), EM_OK);
        assert_int_equal(em_mul(u, n, &y), EM_OK);
        assert_int_equal(em_sum(y, &loss), EM_OK);
        em_grads *g = NULL;
        assert_int_equal(em_backward(loss, &g), EM_OK);
        em_tensor *gu = NULL;
        assert_int_equal(em_grads_get(g, u, &gu), EM_OK);
        assert_non_null(gu);
        double *a = read_all(gu), *e = read_all(n);
        for (int i = 0; i < 12; i++) assert_true(a[i] == e[i]);
        free(a);
        free(e);
        em_tensor_release(gu);
        em_grads_release(g);
        em_tensor *all[] = {u, n, b, bi, y, loss};
        release_all(all, 6);
    }
    /* on a plain device nothing is tracked */
    const int64_t shape[1] = {5};
    em_tensor *u = NULL;
    assert_int_equal(em_rand_uniform(shape, 1, EM_F32, 0, 1, 1, dev_of("ref"), &u), EM_OK);
    assert_false(em_tensor_is_tracked(u));
    em_tensor_release(u);
}

/* The internal entry points check their arguments and refuse tracked inputs. */
static void test_entry_points(void **state) {
    (void)state;
    em_device ref = dev_of("ref"), ad = dev_of("ref+autodiff");
    const int64_t xs[4] = {1, 2, 5, 5}, gs[4] = {1, 3, 3, 3}, bad[4] = {1, 3, 4, 3};
    em_tensor *x = NULL, *gy = NULL, *gb = NULL, *xt = NULL, *out = NULL;
    assert_int_equal(em_ones(xs, 4, EM_F64, ref, &x), EM_OK);
    assert_int_equal(em_ones(gs, 4, EM_F64, ref, &gy), EM_OK);
    assert_int_equal(em_ones(bad, 4, EM_F64, ref, &gb), EM_OK);
    assert_int_equal(em_ones(xs, 4, EM_F64, ad, &xt), EM_OK);
    em_conv_args a = {{1, 1}, {0, 0}, {1, 1}, {0, 0}, 1};
    const int64_t k[2] = {3, 3};
    assert_int_equal(emi_conv2d_weight_grad(x, gy, k, &a, &out), EM_OK);
    /* every weight-gradient entry of a conv of ones with ones: 9 positions */
    double *v = read_all(out);
    assert_int_equal(em_tensor_numel(out), 3 * 2 * 9);
    for (int i = 0; i < 54; i++) assert_true(v[i] == 9.0);
    free(v);
    em_tensor_release(out);
    out = NULL;
    assert_int_equal(emi_conv2d_weight_grad(x, gb, k, &a, &out), EM_ERR_SHAPE);
    assert_int_equal(emi_conv2d_weight_grad(xt, gy, k, &a, &out), EM_ERR_UNSUPPORTED);
    assert_int_equal(emi_conv2d_weight_grad(x, gy, NULL, &a, &out), EM_ERR_ARG);
    assert_int_equal(emi_conv2d_weight_grad(NULL, gy, k, &a, &out), EM_ERR_ARG);
    a.groups = 2;
    assert_int_equal(emi_conv2d_weight_grad(x, gy, k, &a, &out), EM_ERR_SHAPE);
    assert_null(out);
    em_pool_params p = {{3, 3}, {1, 1}, {0, 0}, {0, 0}, false, true};
    assert_int_equal(emi_avg_pool2d_backward(gy, (const int64_t[]){1, 3, 5, 5}, &p, &out), EM_OK);
    em_tensor_release(out);
    out = NULL;
    assert_int_equal(emi_avg_pool2d_backward(gb, (const int64_t[]){1, 3, 5, 5}, &p, &out),
                     EM_ERR_SHAPE);
    assert_int_equal(emi_avg_pool2d_backward(gy, (const int64_t[]){1, 2, 5, 5}, &p, &out),
                     EM_ERR_SHAPE);
    assert_int_equal(emi_adaptive_avg_pool2d_backward(gy, (const int64_t[]){1, 3, 7, 4}, &out),
                     EM_OK);
    /* adaptive bins of 7 into 3: [0,3) [2,5) [4,7); of 4 into 3: [0,2) [1,3) [2,4) */
    v = read_all(out);
    assert_true(fabs(v[0] - 1.0 / 6) < 1e-15);         /* (0, 0): one bin of 3x2 */
    assert_true(fabs(v[2 * 4 + 1] - 4.0 / 6) < 1e-15); /* (2, 1): 2 x 2 bins of 3x2 */
    free(v);
    em_tensor_release(out);
    out = NULL;
    assert_int_equal(emi_adaptive_avg_pool2d_backward(NULL, xs, &out), EM_ERR_ARG);
    em_tensor *all[] = {x, gy, gb, xt};
    release_all(all, 4);
}

/* conv1d records itself: a conv1d result on tracked inputs is tracked, the result of
 * max_pool2d too, and an untracked conv on an autodiff device gives a leaf. */
static void test_recording(void **state) {
    (void)state;
    em_device ad = dev_of("ref+autodiff:balanced");
    const int64_t xs[3] = {1, 2, 5}, ws[3] = {3, 2, 2};
    em_tensor *x = NULL, *w = NULL, *y = NULL;
    assert_int_equal(em_ones(xs, 3, EM_F32, ad, &x), EM_OK);
    assert_int_equal(em_ones(ws, 3, EM_F32, ad, &w), EM_OK);
    assert_int_equal(em_conv1d(x, w, NULL, NULL, &y), EM_OK);
    assert_true(em_tensor_is_tracked(y));
    assert_int_equal(em_tensor_checkpointing(y), EM_CKPT_BALANCED);
    em_tensor_release(y);
    em_tensor_release(x);
    em_tensor_release(w);
}

/* The gradient of sum(op(...)) w.r.t. input i of c on dev: all zeros, of the input's shape
 * (the batch is empty). */
static void check_zero_grads(const gcase *c, const char *text) {
    double *data[MAXIN];
    case_data(c, data);
    em_tensor *t[MAXIN], *y = NULL, *loss = NULL;
    build(c, data, dev_of(text), EM_F64, t);
    for (int i = 0; i < c->nin; i++)
        if (c->in[i].kind == IN_FLOAT) assert_int_equal(em_tensor_require_grad(t[i]), EM_OK);
    if (c->fn(t, c->p, &y) != EM_OK) fail_msg("%s: %s", c->name, em_last_error());
    assert_int_equal(em_sum(y, &loss), EM_OK);
    em_grads *g = NULL;
    if (em_backward(loss, &g) != EM_OK) fail_msg("%s: backward: %s", c->name, em_last_error());
    for (int i = 0; i < c->nin; i++) {
        if (c->in[i].kind != IN_FLOAT) continue;
        em_tensor *gi = NULL;
        assert_int_equal(em_grads_get(g, t[i], &gi), EM_OK);
        if (!gi) continue; /* an empty x may get no gradient at all */
        assert_int_equal(em_tensor_numel(gi), numel(c->in[i].shape, c->in[i].rank));
        double *v = read_all(gi);
        for (int64_t j = 0; j < em_tensor_numel(gi); j++) assert_true(v[j] == 0.0);
        free(v);
        em_tensor_release(gi);
    }
    em_grads_release(g);
    em_tensor_release(loss);
    em_tensor_release(y);
    release_all(t, c->nin);
    for (int i = 0; i < MAXIN; i++) free(data[i]);
}

/* An empty batch: the parameters get zero gradients. */
static void test_empty_batch(void **state) {
    (void)state;
    em_conv_params p = cparams(1, 1, 1, 1, 1, 1, 0, 0, 1);
    em_conv_params pt = cparams(2, 2, 0, 0, 1, 1, 1, 1, 1);
    const maxp m = {{{2, 2}, {0, 0}, {0, 0}, {1, 1}, false, false}, false};
    const em_pool_params a = {{2, 2}, {0, 0}, {1, 1}, {0, 0}, true, false};
    static const int64_t ad[2] = {2, 3};
    const lnp l = {2, 1e-5};
    const gcase cases[] = {
        {"conv2d N=0", f_conv2d, &p, 3, {F(4, 0, 2, 4, 4), F(4, 3, 2, 3, 3), F(1, 3)}},
        {"conv1d N=0", f_conv1d, &p, 3, {F(3, 0, 2, 4), F(3, 3, 2, 3), F(1, 3)}},
        {"conv_transpose2d N=0", f_conv_t, &pt, 3, {F(4, 0, 2, 4, 4), F(4, 2, 3, 3, 3), F(1, 3)}},
        {"max_pool2d N=0", f_max_pool, &m, 1, {F(4, 0, 2, 4, 4)}},
        {"avg_pool2d N=0", f_avg_pool, &a, 1, {F(4, 0, 2, 4, 4)}},
        {"adaptive N=0", f_adaptive, ad, 1, {F(4, 0, 2, 4, 4)}},
        {"layer_norm rows=0", f_layer_norm, &l, 3, {F(3, 0, 4, 5), F(2, 4, 5), F(2, 4, 5)}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int dv = 0; dv < 2; dv++) check_zero_grads(&cases[i], AD_DEVS[dv]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv2d),         cmocka_unit_test(test_conv1d),
        cmocka_unit_test(test_conv_transpose2d), cmocka_unit_test(test_pooling),
        cmocka_unit_test(test_layer_norm),     cmocka_unit_test(test_compositions),
        cmocka_unit_test(test_chain),          cmocka_unit_test(test_random_leaves),
        cmocka_unit_test(test_entry_points),   cmocka_unit_test(test_recording),
        cmocka_unit_test(test_empty_batch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
