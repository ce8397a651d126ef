/*
 * test_autodiff_layout.c — gradients of the layout and indexing ops (reshape, flatten,
 * permute, transpose, expand, slice, split, squeeze, unsqueeze, flip, repeat, cat, stack,
 * slice_assign, gather, scatter_add, index_select, sort and topk values, one_hot as a
 * constant), checked against central finite differences (f64, eps 1e-6) on ref+autodiff and
 * ref+autodiff:balanced, with bit-equal gradients under both strategies; views of views,
 * negative steps, repeated indices; and what is tracked: views of tracked tensors are, int
 * results (argsort, indices) are not.
 *
 * Every check builds loss = sum_k sum(out_k * out_k * w_k) over the op's outputs with fixed
 * random weights w_k of each output's shape, so that the whole Jacobian is exercised (a plain
 * sum of a permutation would not tell a right gradient from a wrong one) and BALANCED has to
 * recompute every output (mul's backward reads it), and compares d loss / d x with
 * (loss(x + eps e_j) - loss(x - eps e_j)) / (2 eps) computed on plain ref.
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

#include "ember/ember.h"

#define EPS 1e-6
#define TOL 1e-6
#define MAX_IN 3
#define MAX_OUT 8

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

static double rng_unit(uint64_t *s) { return (double)(rng_next(s) >> 11) / 9007199254740992.0; }

/* n values: uniform in [-1, 1], or (distinct) a shuffled ladder with steps of 0.05, so that
 * sort and topk see no ties within a step of each other. */
static void fill(bool distinct, uint64_t seed, int64_t n, double *out) {
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) out[i] = 2.0 * rng_unit(&s) - 1.0;
    if (!distinct) return;
    for (int64_t i = 0; i < n; i++) out[i] = 0.05 * (double)(i - n / 2);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(rng_next(&s) % (uint64_t)(i + 1));
        double t = out[i];
        out[i] = out[j];
        out[j] = t;
    }
}

static int64_t numel(const int64_t *shape, int rank) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= shape[i];
    return n;
}

static em_tensor *make(const double *data, const int64_t *shape, int rank, em_device dev) {
    em_tensor *t = NULL;
    assert_int_equal(em_tensor_from_data(data, EM_F64, shape, rank, dev, &t), EM_OK);
    return t;
}

static em_tensor *make_index(const int64_t *data, const int64_t *shape, int rank,
                             em_device dev) {
    em_tensor *t = NULL;
    assert_int_equal(em_tensor_from_data(data, EM_I64, shape, rank, dev, &t), EM_OK);
    return t;
}

static double *read_all(const em_tensor *t) {
    int64_t n = em_tensor_numel(t);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    assert_non_null(v);
    assert_int_equal(em_tensor_to_data(t, v, sizeof(double) * (size_t)n), EM_OK);
    return v;
}

/* ---- the gradient check ---- */

/* An op under test: float inputs in[0..nin), an optional int index tensor (on the same
 * device), outputs written to outs[0..*nout). */
typedef em_status (*op_fn)(em_tensor *const *in, const em_tensor *idx, em_tensor **outs,
                           int *nout);

typedef struct gcase {
    const char *name;
    op_fn fn;
    int nin;
    int rank[MAX_IN];
    int64_t shape[MAX_IN][EM_MAX_RANK];
    bool distinct;
    int irank; /* -1: no index tensor */
    int64_t ishape[EM_MAX_RANK];
    int64_t idx[32];
} gcase;

/* w_k: a fixed weight of n elements for output k. */
static double *weights(int k, int64_t n) {
    double *w = malloc(sizeof(double) * (size_t)(n ? n : 1));
    assert_non_null(w);
    fill(false, 1234 + 31 * (uint64_t)k + (uint64_t)n, n, w);
    return w;
}

static em_tensor *index_on(const gcase *c, em_device dev) {
    return c->irank < 0 ? NULL : make_index(c->idx, c->ishape, c->irank, dev);
}

/* loss = sum_k sum(out_k * out_k * w_k) on plain ref, computed on the host. */
static double plain_loss(const gcase *c, double *const *data) {
    em_device ref = dev_of("ref");
    em_tensor *in[MAX_IN] = {NULL}, *outs[MAX_OUT] = {NULL}, *idx = index_on(c, ref);
    for (int i = 0; i < c->nin; i++) in[i] = make(data[i], c->shape[i], c->rank[i], ref);
    int nout = 0;
    em_status s = c->fn(in, idx, outs, &nout);
    if (s != EM_OK) fail_msg("%s: %s", c->name, em_last_error());
    double l = 0.0;
    for (int k = 0; k < nout; k++) {
        int64_t n = em_tensor_numel(outs[k]);
        double *v = read_all(outs[k]), *w = weights(k, n);
        for (int64_t j = 0; j < n; j++) l += v[j] * v[j] * w[j];
        free(v);
        free(w);
        em_tensor_release(outs[k]);
    }
    for (int i = 0; i < c->nin; i++) em_tensor_release(in[i]);
    em_tensor_release(idx);
    return l;
}

/* sum(x) as a tracked scalar: em_sum when it records, else a scatter_add of every element
 * into one. Consumes x. */
static em_tensor *total(em_tensor *x, em_device dev) {
    em_tensor *s = NULL;
    assert_int_equal(em_sum(x, &s), EM_OK);
    if (em_tensor_is_tracked(s)) {
        em_tensor_release(x);
        return s;
    }
    em_tensor_release(s);
    int64_t n = em_tensor_numel(x), one = 1;
    int64_t *zi = calloc((size_t)(n ? n : 1), sizeof *zi);
    assert_non_null(zi);
    em_tensor *flat = NULL, *z = NULL, *idx = make_index(zi, &n, 1, dev);
    free(zi);
    assert_int_equal(em_reshape(x, &n, 1, &flat), EM_OK);
    assert_int_equal(em_zeros(&one, 1, EM_F64, dev, &z), EM_OK);
    assert_int_equal(em_scatter_add(z, 0, idx, flat, &s), EM_OK);
    em_tensor_release(flat);
    em_tensor_release(z);
    em_tensor_release(idx);
    em_tensor_release(x);
    return s;
}

/* The autodiff gradients of every input on device text (written to grads[i], malloc'd). */
static void ad_grads(const gcase *c, double *const *data, const char *text, double **grads) {
    em_device dev = dev_of(text);
    em_tensor *in[MAX_IN] = {NULL}, *outs[MAX_OUT] = {NULL}, *idx = index_on(c, dev);
    for (int i = 0; i < c->nin; i++) {
        in[i] = make(data[i], c->shape[i], c->rank[i], dev);
        assert_int_equal(em_tensor_require_grad(in[i]), EM_OK);
    }
    int nout = 0;
    em_status s = c->fn(in, idx, outs, &nout);
    if (s != EM_OK) fail_msg("%s on %s: %s", c->name, text, em_last_error());
    em_tensor *loss = NULL;
    for (int k = 0; k < nout; k++) {
        if (!em_tensor_is_tracked(outs[k]))
            fail_msg("%s on %s: output %d is not tracked", c->name, text, k);
        if (em_tensor_checkpointing(outs[k]) != dev.checkpointing)
            fail_msg("%s on %s: output %d has the wrong strategy", c->name, text, k);
        double *wd = weights(k, em_tensor_numel(outs[k]));
        em_tensor *w = make(wd, em_tensor_shape(outs[k]), em_tensor_rank(outs[k]), dev), *yw,
                  *yy;
        free(wd);
        /* out * out: mul's backward reads out, which BALANCED recomputes with the op's rule */
        assert_int_equal(em_mul(outs[k], outs[k], &yy), EM_OK);
        assert_int_equal(em_mul(yy, w, &yw), EM_OK);
        em_tensor_release(yy);
        em_tensor_release(w);
        em_tensor_release(outs[k]);
        em_tensor *part = total(yw, dev);
        if (!loss) {
            loss = part;
        } else {
            em_tensor *sum = NULL;
            assert_int_equal(em_add(loss, part, &sum), EM_OK);
            em_tensor_release(loss);
            em_tensor_release(part);
            loss = sum;
        }
    }
    em_grads *g = NULL;
    s = em_backward(loss, &g);
    if (s != EM_OK) fail_msg("%s on %s: backward: %s", c->name, text, em_last_error());
    for (int i = 0; i < c->nin; i++) {
        em_tensor *gi = NULL;
        assert_int_equal(em_grads_get(g, in[i], &gi), EM_OK);
        int64_t n = numel(c->shape[i], c->rank[i]);
        if (!gi) { /* no path from this input to the loss (an empty output): zero */
            grads[i] = calloc((size_t)(n ? n : 1), sizeof(double));
            continue;
        }
        assert_int_equal(em_tensor_dtype(gi), EM_F64);
        assert_int_equal(em_tensor_rank(gi), c->rank[i]);
        for (int d = 0; d < c->rank[i]; d++)
            assert_int_equal(em_tensor_shape(gi)[d], c->shape[i][d]);
        if (em_tensor_is_tracked(gi) || em_tensor_device(gi).autodiff)
            fail_msg("%s on %s: the gradient of input %d is tracked", c->name, text, i);
        grads[i] = read_all(gi);
        em_tensor_release(gi);
    }
    em_grads_release(g);
    em_tensor_release(loss);
    for (int i = 0; i < c->nin; i++) em_tensor_release(in[i]);
    em_tensor_release(idx);
}

/* Checks case c on both autodiff devices against finite differences, and that both
 * strategies give the same gradients bit for bit. */
static void gradcheck(const gcase *c) {
    double *data[MAX_IN] = {NULL};
    for (int i = 0; i < c->nin; i++) {
        int64_t n = numel(c->shape[i], c->rank[i]);
        data[i] = malloc(sizeof(double) * (size_t)(n ? n : 1));
        assert_non_null(data[i]);
        fill(c->distinct, 77 + 1000 * (uint64_t)i + (uint64_t)n, n, data[i]);
    }
    double *g[2][MAX_IN] = {{NULL}};
    for (int dv = 0; dv < 2; dv++) ad_grads(c, data, AD_DEVS[dv], g[dv]);
    for (int i = 0; i < c->nin; i++) {
        int64_t n = numel(c->shape[i], c->rank[i]);
        for (int64_t j = 0; j < n; j++) {
            if (memcmp(&g[0][i][j], &g[1][i][j], sizeof(double)) != 0)
                fail_msg("%s: d/d in%d[%lld]: disabled %.17g, balanced %.17g", c->name, i,
                         (long long)j, g[0][i][j], g[1][i][j]);
            double x0 = data[i][j];
            data[i][j] = x0 + EPS;
            double lp = plain_loss(c, data);
            data[i][j] = x0 - EPS;
            double lm = plain_loss(c, data);
            data[i][j] = x0;
            double fd = (lp - lm) / (2 * EPS);
            if (!(fabs(fd - g[0][i][j]) <= TOL * fmax(1.0, fabs(fd))))
                fail_msg("%s: d/d in%d[%lld]: autodiff %.12g, finite differences %.12g",
                         c->name, i, (long long)j, g[0][i][j], fd);
        }
    }
    for (int i = 0; i < c->nin; i++) {
        free(g[0][i]);
        free(g[1][i]);
        free(data[i]);
    }
}

/* ---- the ops ---- */

#define ONE(name, call)                                                                      \
    static em_status name(em_tensor *const *in, const em_tensor *idx, em_tensor **outs,      \
                          int *nout) {                                                       \
        (void)idx;                                                                           \
        *nout = 1;                                                                           \
        return call;                                                                         \
    }

ONE(f_reshape, em_reshape(in[0], (int64_t[]){4, -1}, 2, &outs[0]))
ONE(f_reshape_0d, em_reshape(in[0], (int64_t[]){1, 1}, 2, &outs[0]))
ONE(f_flatten, em_flatten(in[0], 1, -1, &outs[0]))
ONE(f_flatten_0d, em_flatten(in[0], 0, 0, &outs[0]))
ONE(f_permute, em_permute(in[0], (int[]){2, 0, 1}, 3, &outs[0]))
ONE(f_permute_neg, em_permute(in[0], (int[]){-1, 0, -2}, 3, &outs[0]))
ONE(f_transpose, em_transpose(in[0], 0, -1, &outs[0]))
ONE(f_expand, em_expand(in[0], (int64_t[]){2, 3, 4}, 3, &outs[0]))
ONE(f_expand_keep, em_expand(in[0], (int64_t[]){5, -1, 4}, 3, &outs[0]))
ONE(f_expand_0d, em_expand(in[0], (int64_t[]){2, 3}, 2, &outs[0]))
ONE(f_slice_step, em_slice(in[0], 1, 1, INT64_MAX, 2, &outs[0]))
ONE(f_slice_neg, em_slice(in[0], -1, -1, INT64_MIN, -2, &outs[0]))
ONE(f_slice_neg_mid, em_slice(in[0], 0, 3, 0, -1, &outs[0]))
ONE(f_slice_empty, em_slice(in[0], 0, 2, 2, 1, &outs[0]))
ONE(f_squeeze, em_squeeze(in[0], 1, &outs[0]))
ONE(f_squeeze_0d, em_squeeze(in[0], 0, &outs[0]))
ONE(f_squeeze_all, em_squeeze_all(in[0], &outs[0]))
ONE(f_unsqueeze, em_unsqueeze(in[0], -1, &outs[0]))
ONE(f_unsqueeze_0d, em_unsqueeze(in[0], 0, &outs[0]))
ONE(f_flip, em_flip(in[0], (int[]){0, -1}, 2, &outs[0]))
ONE(f_flip_0d, em_flip(in[0], (int[]){0}, 1, &outs[0]))
ONE(f_repeat, em_repeat(in[0], (int64_t[]){2, 1, 3}, 3, &outs[0]))
ONE(f_repeat_rank8, em_repeat(in[0], (int64_t[]){1, 2, 1, 1, 1, 1, 2, 3}, 8, &outs[0]))
ONE(f_repeat_zero, em_repeat(in[0], (int64_t[]){0, 2}, 2, &outs[0]))
ONE(f_repeat_0d, em_repeat(in[0], (int64_t[]){3}, 1, &outs[0]))
ONE(f_cat0, em_cat((const em_tensor *const *)in, 3, 0, &outs[0]))
ONE(f_cat1, em_cat((const em_tensor *const *)in, 2, -1, &outs[0]))
ONE(f_stack1, em_stack((const em_tensor *const *)in, 3, 1, &outs[0]))
ONE(f_stack_last, em_stack((const em_tensor *const *)in, 2, -1, &outs[0]))
ONE(f_slice_assign, em_slice_assign(in[0], 0, 0, 4, 2, in[1], &outs[0]))
ONE(f_slice_assign_neg, em_slice_assign(in[0], 1, -1, INT64_MIN, -2, in[1], &outs[0]))
ONE(f_gather1, em_gather(in[0], 1, idx, &outs[0]))
ONE(f_gather0, em_gather(in[0], 0, idx, &outs[0]))
ONE(f_scatter_add, em_scatter_add(in[0], 1, idx, in[1], &outs[0]))
ONE(f_scatter_add0, em_scatter_add(in[0], 0, idx, in[1], &outs[0]))
ONE(f_index_select0, em_index_select(in[0], 0, idx, &outs[0]))
ONE(f_index_select1, em_index_select(in[0], -1, idx, &outs[0]))
ONE(f_sort, em_sort(in[0], 1, false, &outs[0], NULL))
ONE(f_sort_desc0, em_sort(in[0], 0, true, &outs[0], NULL))
ONE(f_topk, em_topk(in[0], 2, 1, true, &outs[0], NULL))
ONE(f_topk_small0, em_topk(in[0], 2, 0, false, &outs[0], NULL))
ONE(f_topk_0d, em_topk(in[0], 1, 0, true, &outs[0], NULL))

/* a slice of a transpose (a view of a view with steps along a strided dim) */
static em_status f_slice_of_transpose(em_tensor *const *in, const em_tensor *idx,
                                      em_tensor **outs, int *nout) {
    (void)idx;
    em_tensor *t = NULL;
    *nout = 1;
    em_status s = em_transpose(in[0], 0, 1, &t);
    if (s == EM_OK) s = em_slice(t, 0, 4, 0, -2, &outs[0]);
    em_tensor_release(t);
    return s;
}

/* a chain of views: permute, negative-step slice, flip, unsqueeze, expand, reshape (which
 * must copy: the expanded strides cannot be regrouped), then a transpose of that */
static em_status f_view_chain(em_tensor *const *in, const em_tensor *idx, em_tensor **outs,
                              int *nout) {
    (void)idx;
    em_tensor *a = NULL, *b = NULL, *c = NULL, *d = NULL, *e = NULL, *f = NULL;
    *nout = 1;
    em_status s = em_permute(in[0], (int[]){1, 2, 0}, 3, &a); /* [3, 4, 2] */
    if (s == EM_OK) s = em_slice(a, 1, INT64_MAX, INT64_MIN, -1, &b); /* reversed */
    if (s == EM_OK) s = em_flip(b, (int[]){0}, 1, &c);
    if (s == EM_OK) s = em_unsqueeze(c, 1, &d); /* [3, 1, 4, 2] */
    if (s == EM_OK) s = em_expand(d, (int64_t[]){3, 2, 4, 2}, 4, &e);
    if (s == EM_OK) s = em_reshape(e, (int64_t[]){6, 8}, 2, &f);
    if (s == EM_OK) s = em_transpose(f, 0, 1, &outs[0]);
    em_tensor_release(a);
    em_tensor_release(b);
    em_tensor_release(c);
    em_tensor_release(d);
    em_tensor_release(e);
    em_tensor_release(f);
    return s;
}

/* split into pieces of 3 along dim 0 (the last smaller): every piece is an output */
static em_status f_split(em_tensor *const *in, const em_tensor *idx, em_tensor **outs,
                         int *nout) {
    (void)idx;
    size_t n = 0;
    em_status s = em_split(in[0], 3, 0, outs, MAX_OUT, &n);
    *nout = s == EM_OK ? (int)n : 0;
    return s;
}

/* split along the last dim, keeping only the middle piece (the others get no gradient) */
static em_status f_split_mid(em_tensor *const *in, const em_tensor *idx, em_tensor **outs,
                             int *nout) {
    (void)idx;
    em_tensor *p[MAX_OUT] = {NULL};
    size_t n = 0;
    em_status s = em_split(in[0], 2, -1, p, MAX_OUT, &n);
    *nout = 0;
    if (s != EM_OK) return s;
    for (size_t i = 0; i < n; i++) {
        if (i == 1) outs[(*nout)++] = p[i];
        else em_tensor_release(p[i]);
    }
    return EM_OK;
}

/* pieces of two splits of x along the last dim that overlap (sizes 2 and 3), one along dim 0,
 * and x itself: the engine's cat of a split's pieces falls back to one slice_assign each */
static em_status f_split_mixed(em_tensor *const *in, const em_tensor *idx, em_tensor **outs,
                               int *nout) {
    (void)idx;
    em_tensor *a[MAX_OUT] = {NULL}, *b[MAX_OUT] = {NULL}, *c[MAX_OUT] = {NULL};
    size_t na = 0, nb = 0, nc = 0;
    *nout = 0;
    em_status s = em_split(in[0], 2, -1, a, MAX_OUT, &na);
    if (s == EM_OK) s = em_split(in[0], 3, -1, b, MAX_OUT, &nb);
    if (s == EM_OK) s = em_split(in[0], 1, 0, c, MAX_OUT, &nc);
    if (s == EM_OK) {
        outs[(*nout)++] = a[0];
        outs[(*nout)++] = a[2];
        outs[(*nout)++] = b[1];
        outs[(*nout)++] = c[1];
        a[0] = a[2] = b[1] = c[1] = NULL;
        em_tensor_retain(in[0]);
        outs[(*nout)++] = in[0];
    }
    for (size_t i = 0; i < MAX_OUT; i++) {
        em_tensor_release(a[i]);
        em_tensor_release(b[i]);
        em_tensor_release(c[i]);
    }
    return s;
}

/* sort with both outputs: values weighted, indices an int result */
static em_status f_sort_both(em_tensor *const *in, const em_tensor *idx, em_tensor **outs,
                             int *nout) {
    (void)idx;
    em_tensor *ind = NULL;
    *nout = 1;
    em_status s = em_sort(in[0], -1, true, &outs[0], &ind);
    if (s == EM_OK && (em_tensor_is_tracked(ind) || em_tensor_dtype(ind) != EM_I64))
        s = EM_ERR_STATE;
    em_tensor_release(ind);
    return s;
}

/* topk with both outputs, then the values gathered back by the indices from x (the gradient
 * of x gets both paths) */
static em_status f_topk_gather(em_tensor *const *in, const em_tensor *idx, em_tensor **outs,
                               int *nout) {
    (void)idx;
    em_tensor *ind = NULL;
    *nout = 2;
    em_status s = em_topk(in[0], 3, -1, true, &outs[0], &ind);
    if (s == EM_OK) s = em_gather(in[0], -1, ind, &outs[1]);
    em_tensor_release(ind);
    return s;
}

/* x * one_hot(idx): one_hot is a constant of the graph */
static em_status f_one_hot_mul(em_tensor *const *in, const em_tensor *idx, em_tensor **outs,
                               int *nout) {
    em_tensor *oh = NULL;
    *nout = 1;
    em_status s = em_one_hot(idx, 4, EM_F64, &oh);
    if (s == EM_OK) s = em_mul(in[0], oh, &outs[0]);
    em_tensor_release(oh);
    return s;
}

/* index_select of a flipped x with a repeated index, then gather along the other dim */
static em_status f_select_gather(em_tensor *const *in, const em_tensor *idx, em_tensor **outs,
                                 int *nout) {
    em_tensor *f = NULL, *sel = NULL, *ix = NULL;
    *nout = 1;
    em_status s = em_flip(in[0], (int[]){0}, 1, &f);
    if (s == EM_OK) s = em_index_select(f, 0, idx, &sel); /* [4, 3] */
    int64_t gi[8] = {2, 2, 0, 1, 1, 1, 0, 2};
    if (s == EM_OK)
        s = em_tensor_from_data(gi, EM_I64, (int64_t[]){4, 2}, 2, em_tensor_device(idx), &ix);
    if (s == EM_OK) s = em_gather(sel, 1, ix, &outs[0]);
    em_tensor_release(f);
    em_tensor_release(sel);
    em_tensor_release(ix);
    return s;
}

/* ---- the cases ---- */

#define NOIDX -1, {0}, {0}
#define S(...) {__VA_ARGS__}

static void test_views(void **state) {
    (void)state;
    const gcase cases[] = {
        {"reshape", f_reshape, 1, {3}, {S(2, 3, 4)}, false, NOIDX},
        {"reshape 0-d", f_reshape_0d, 1, {0}, {S(0)}, false, NOIDX},
        {"flatten", f_flatten, 1, {3}, {S(2, 3, 4)}, false, NOIDX},
        {"flatten 0-d", f_flatten_0d, 1, {0}, {S(0)}, false, NOIDX},
        {"permute", f_permute, 1, {3}, {S(2, 3, 4)}, false, NOIDX},
        {"permute negative dims", f_permute_neg, 1, {3}, {S(2, 3, 4)}, false, NOIDX},
        {"transpose", f_transpose, 1, {3}, {S(2, 3, 4)}, false, NOIDX},
        {"expand", f_expand, 1, {2}, {S(3, 1)}, false, NOIDX},
        {"expand -1", f_expand_keep, 1, {3}, {S(1, 3, 1)}, false, NOIDX},
        {"expand 0-d", f_expand_0d, 1, {0}, {S(0)}, false, NOIDX},
        {"slice step 2", f_slice_step, 1, {2}, {S(3, 6)}, false, NOIDX},
        {"slice step -2", f_slice_neg, 1, {2}, {S(3, 5)}, false, NOIDX},
        {"slice step -1 inner", f_slice_neg_mid, 1, {2}, {S(5, 2)}, false, NOIDX},
        {"slice empty", f_slice_empty, 1, {2}, {S(4, 2)}, false, NOIDX},
        {"slice of transpose", f_slice_of_transpose, 1, {2}, {S(3, 5)}, false, NOIDX},
        {"view chain", f_view_chain, 1, {3}, {S(2, 3, 4)}, false, NOIDX},
        {"squeeze", f_squeeze, 1, {3}, {S(3, 1, 4)}, false, NOIDX},
        {"squeeze 0-d", f_squeeze_0d, 1, {0}, {S(0)}, false, NOIDX},
        {"squeeze_all", f_squeeze_all, 1, {4}, {S(1, 3, 1, 2)}, false, NOIDX},
        {"unsqueeze", f_unsqueeze, 1, {2}, {S(3, 4)}, false, NOIDX},
        {"unsqueeze 0-d", f_unsqueeze_0d, 1, {0}, {S(0)}, false, NOIDX},
        {"flip", f_flip, 1, {3}, {S(2, 3, 4)}, false, NOIDX},
        {"flip 0-d", f_flip_0d, 1, {0}, {S(0)}, false, NOIDX},
        {"split", f_split, 1, {2}, {S(7, 2)}, false, NOIDX},
        {"split, one piece used", f_split_mid, 1, {2}, {S(2, 5)}, false, NOIDX},
        {"split, overlapping splits and x", f_split_mixed, 1, {2}, {S(3, 6)}, false, NOIDX},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) gradcheck(&cases[i]);
}

static void test_copies(void **state) {
    (void)state;
    const gcase cases[] = {
        {"repeat", f_repeat, 1, {2}, {S(2, 3)}, false, NOIDX},
        {"repeat to rank 8", f_repeat_rank8, 1, {2}, {S(2, 3)}, false, NOIDX},
        {"repeat 0 times", f_repeat_zero, 1, {2}, {S(2, 3)}, false, NOIDX},
        {"repeat 0-d", f_repeat_0d, 1, {0}, {S(0)}, false, NOIDX},
        {"cat dim 0", f_cat0, 3, {2, 2, 2}, {S(2, 3), S(1, 3), S(4, 3)}, false, NOIDX},
        {"cat dim -1", f_cat1, 2, {3, 3}, {S(2, 3, 1), S(2, 3, 2)}, false, NOIDX},
        {"cat with an empty piece", f_cat0, 3, {2, 2, 2}, {S(2, 3), S(0, 3), S(1, 3)}, false,
         NOIDX},
        {"stack dim 1", f_stack1, 3, {2, 2, 2}, {S(2, 3), S(2, 3), S(2, 3)}, false, NOIDX},
        {"stack dim -1 of 0-d", f_stack_last, 2, {0, 0}, {S(0), S(0)}, false, NOIDX},
        {"slice_assign broadcast", f_slice_assign, 2, {2, 1}, {S(5, 3), S(3)}, false, NOIDX},
        {"slice_assign full value", f_slice_assign, 2, {2, 2}, {S(4, 3), S(2, 3)}, false,
         NOIDX},
        {"slice_assign step -2", f_slice_assign_neg, 2, {2, 2}, {S(2, 5), S(2, 1)}, false,
         NOIDX},
        {"slice_assign 0-d value", f_slice_assign_neg, 2, {2, 0}, {S(3, 4), S(0)}, false,
         NOIDX},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) gradcheck(&cases[i]);
}

static void test_indexing(void **state) {
    (void)state;
    const gcase cases[] = {
        {"gather dim 1, repeated", f_gather1, 1, {2}, {S(3, 4)}, false, 2, S(3, 3),
         S(0, 0, 3, 1, 1, 1, 2, 0, 2)},
        {"gather dim 0, smaller index", f_gather0, 1, {2}, {S(3, 4)}, false, 2, S(2, 3),
         S(2, 2, 0, 1, 2, 2)},
        {"gather 0-d", f_gather0, 1, {0}, {S(0)}, false, 0, S(0), S(0)},
        {"scatter_add", f_scatter_add, 2, {2, 2}, {S(3, 5), S(3, 4)}, false, 2, S(2, 3),
         S(4, 4, 0, 1, 3, 1)},
        {"scatter_add same shapes", f_scatter_add0, 2, {2, 2}, {S(3, 2), S(2, 2)}, false, 2,
         S(2, 2), S(1, 1, 1, 0)},
        {"index_select dim 0, repeated", f_index_select0, 1, {2}, {S(4, 3)}, false, 1, S(5),
         S(3, 0, 3, 3, 1)},
        {"index_select dim -1", f_index_select1, 1, {3}, {S(2, 2, 3)}, false, 1, S(2),
         S(2, 2)},
        {"index_select 0-d index", f_index_select1, 1, {2}, {S(2, 3)}, false, 0, S(0), S(1)},
        {"index_select 0-d x", f_index_select0, 1, {0}, {S(0)}, false, 1, S(1), S(0)},
        {"index_select then gather", f_select_gather, 1, {2}, {S(3, 3)}, false, 1, S(4),
         S(0, 2, 2, 1)},
        {"sort", f_sort, 1, {2}, {S(3, 5)}, true, NOIDX},
        {"sort descending dim 0", f_sort_desc0, 1, {3}, {S(4, 2, 3)}, true, NOIDX},
        {"sort with indices", f_sort_both, 1, {2}, {S(2, 4)}, true, NOIDX},
        {"topk", f_topk, 1, {2}, {S(3, 5)}, true, NOIDX},
        {"topk smallest dim 0", f_topk_small0, 1, {2}, {S(4, 3)}, true, NOIDX},
        {"topk 0-d", f_topk_0d, 1, {0}, {S(0)}, true, NOIDX},
        {"topk and gather", f_topk_gather, 1, {2}, {S(2, 5)}, true, NOIDX},
        {"one_hot constant", f_one_hot_mul, 1, {2}, {S(3, 4)}, false, 1, S(3), S(3, 0, 3)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) gradcheck(&cases[i]);
}

/* ---- what is tracked ---- */

/* Views of a tracked tensor are tracked (their own nodes over the shared buffer); int
 * results are not, but report the autodiff device; one_hot is a constant there and plain
 * elsewhere. */
static void test_tracking(void **state) {
    (void)state;
    double x[6] = {3, 1, 2, 6, 5, 4};
    int64_t s23[2] = {2, 3}, s3[1] = {3}, iv[3] = {2, 0, 1};
    for (int dv = 0; dv < 2; dv++) {
        em_device dev = dev_of(AD_DEVS[dv]);
        em_tensor *t = make(x, s23, 2, dev), *v[8] = {NULL};
        assert_int_equal(em_tensor_require_grad(t), EM_OK);
        assert_int_equal(em_slice(t, 1, 0, 2, 1, &v[0]), EM_OK);
        assert_int_equal(em_transpose(t, 0, 1, &v[1]), EM_OK);
        assert_int_equal(em_slice(v[1], 0, INT64_MAX, INT64_MIN, -2, &v[2]), EM_OK);
        assert_int_equal(em_reshape(t, (int64_t[]){6}, 1, &v[3]), EM_OK);
        assert_int_equal(em_unsqueeze(t, 0, &v[4]), EM_OK);
        assert_int_equal(em_flip(t, (int[]){1}, 1, &v[5]), EM_OK);
        assert_int_equal(em_expand(t, (int64_t[]){2, 2, 3}, 3, &v[6]), EM_OK);
        assert_int_equal(em_permute(t, (int[]){1, 0}, 2, &v[7]), EM_OK);
        for (int i = 0; i < 8; i++) {
            assert_true(em_tensor_is_tracked(v[i]));
            assert_false(em_tensor_requires_grad(v[i]));
            assert_true(em_tensor_device(v[i]).autodiff);
            assert_int_equal(em_tensor_checkpointing(v[i]), dev.checkpointing);
            em_tensor_release(v[i]);
        }
        /* split pieces */
        em_tensor *p[3] = {NULL};
        size_t n = 0;
        assert_int_equal(em_split(t, 2, 1, p, 3, &n), EM_OK);
        assert_int_equal(n, 2);
        for (size_t i = 0; i < n; i++) {
            assert_true(em_tensor_is_tracked(p[i]));
            em_tensor_release(p[i]);
        }
        /* int results: untracked, on the autodiff device */
        em_tensor *as = NULL, *sv = NULL, *si = NULL, *tv = NULL, *ti = NULL;
        assert_int_equal(em_argsort(t, 1, false, &as), EM_OK);
        assert_int_equal(em_sort(t, 1, false, &sv, &si), EM_OK);
        assert_int_equal(em_topk(t, 2, 1, true, &tv, &ti), EM_OK);
        em_tensor *ints[3] = {as, si, ti};
        for (int i = 0; i < 3; i++) {
            assert_int_equal(em_tensor_dtype(ints[i]), EM_I64);
            assert_false(em_tensor_is_tracked(ints[i]));
            assert_true(em_tensor_device(ints[i]).autodiff);
            em_tensor_release(ints[i]);
        }
        assert_true(em_tensor_is_tracked(sv));
        assert_true(em_tensor_is_tracked(tv));
        em_tensor_release(sv);
        em_tensor_release(tv);
        /* one_hot of an index on the autodiff device: a constant of the graph (a leaf that
         * does not require grad); on plain ref: untracked */
        em_tensor *ix = make_index(iv, s3, 1, dev), *oh = NULL, *ohe = NULL;
        assert_int_equal(em_one_hot(ix, 4, EM_F32, &oh), EM_OK);
        assert_true(em_tensor_is_tracked(oh));
        assert_false(em_tensor_requires_grad(oh));
        em_tensor *ie = make_index(iv, (int64_t[]){0}, 1, dev);
        assert_int_equal(em_one_hot(ie, 3, EM_F32, &ohe), EM_OK); /* the empty path */
        assert_true(em_tensor_is_tracked(ohe));
        em_tensor_release(oh);
        em_tensor_release(ohe);
        em_tensor_release(ie);
        em_tensor_release(ix);
        /* views of an int tensor stay untracked */
        ix = make_index(iv, s3, 1, dev);
        em_tensor *iv2 = NULL;
        assert_int_equal(em_flip(ix, (int[]){0}, 1, &iv2), EM_OK);
        assert_false(em_tensor_is_tracked(iv2));
        assert_true(em_tensor_device(iv2).autodiff);
        em_tensor_release(iv2);
        em_tensor_release(ix);
        em_tensor_release(t);
    }
    /* plain ref: nothing is tracked */
    em_tensor *ix = make_index(iv, s3, 1, dev_of("ref")), *oh = NULL;
    assert_int_equal(em_one_hot(ix, 4, EM_F32, &oh), EM_OK);
    assert_false(em_tensor_is_tracked(oh));
    em_tensor_release(oh);
    em_tensor_release(ix);
    em_tensor *t = make(x, s23, 2, dev_of("ref")), *v = NULL;
    assert_int_equal(em_transpose(t, 0, 1, &v), EM_OK);
    assert_false(em_tensor_is_tracked(v));
    assert_int_equal(em_tensor_checkpointing(v), EM_CKPT_NONE);
    em_tensor_release(v);
    em_tensor_release(t);
}

/* A view shares its input's buffer also when tracked, and an untracked constant (on the
 * plain inner device) mixed into cat / slice_assign gets no gradient while the tracked input
 * gets its part. */
static void test_constants_and_sharing(void **state) {
    (void)state;
    double x[6] = {1, 2, 3, 4, 5, 6}, c[3] = {7, 8, 9};
    int64_t s23[2] = {2, 3}, s13[2] = {1, 3};
    for (int dv = 0; dv < 2; dv++) {
        em_device dev = dev_of(AD_DEVS[dv]);
        em_tensor *t = make(x, s23, 2, dev), *k = make(c, s13, 2, dev_of("ref"));
        assert_int_equal(em_tensor_require_grad(t), EM_OK);
        em_tensor *v = NULL;
        assert_int_equal(em_transpose(t, 0, 1, &v), EM_OK);
        assert_false(em_tensor_is_contiguous(v)); /* a view, not a copy */
        em_tensor_release(v);
        const em_tensor *parts[2] = {k, t};
        em_tensor *cat = NULL, *sa = NULL, *sum = NULL, *loss = NULL, *w = NULL, *m = NULL;
        assert_int_equal(em_cat(parts, 2, 0, &cat), EM_OK); /* [3, 3] */
        assert_true(em_tensor_is_tracked(cat));
        em_tensor *k0 = make(c, NULL, 0, dev_of("ref"));
        assert_int_equal(em_slice_assign(cat, 1, 0, 1, 1, k0, &sa), EM_OK);
        em_tensor_release(k0);
        double wd[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
        w = make(wd, (int64_t[]){3, 3}, 2, dev);
        assert_int_equal(em_mul(sa, w, &m), EM_OK);
        assert_int_equal(em_sum(m, &sum), EM_OK);
        loss = sum;
        em_grads *g = NULL;
        assert_int_equal(em_backward(loss, &g), EM_OK);
        em_tensor *gt = NULL, *gk = NULL;
        assert_int_equal(em_grads_get(g, t, &gt), EM_OK);
        assert_int_equal(em_grads_get(g, k, &gk), EM_OK);
        assert_null(gk);
        assert_non_null(gt);
        double *got = read_all(gt);
        /* t is rows 1..2 of cat; column 0 was overwritten by slice_assign */
        const double want[6] = {0, 5, 6, 0, 8, 9};
        for (int i = 0; i < 6; i++) assert_true(got[i] == want[i]);
        free(got);
        em_tensor_release(gt);
        em_grads_release(g);
        em_tensor_release(loss);
        em_tensor_release(m);
        em_tensor_release(w);
        em_tensor_release(sa);
        em_tensor_release(cat);
        em_tensor_release(k);
        em_tensor_release(t);
    }
}

/* A long chain of views and indexing ops under BALANCED: the values the rules need are
 * recomputed from the leaf, and the gradients equal DISABLED's. */
static void test_balanced_chain(void **state) {
    (void)state;
    int64_t shape[2] = {4, 6};
    double data[24];
    fill(true, 5, 24, data);
    double *got[2] = {NULL, NULL};
    for (int dv = 0; dv < 2; dv++) {
        em_device dev = dev_of(AD_DEVS[dv]);
        em_tensor *t = make(data, shape, 2, dev);
        assert_int_equal(em_tensor_require_grad(t), EM_OK);
        em_tensor *cur = t;
        em_tensor_retain(cur);
        for (int step = 0; step < 12; step++) {
            em_tensor *next = NULL, *e = NULL;
            switch (step % 4) {
            case 0: assert_int_equal(em_transpose(cur, 0, 1, &next), EM_OK); break;
            case 1: assert_int_equal(em_flip(cur, (int[]){0}, 1, &next), EM_OK); break;
            case 2: /* exp needs its output: recomputed under BALANCED through the views */
                assert_int_equal(em_exp(cur, &e), EM_OK);
                assert_int_equal(em_mul_scalar(e, 0.5, &next), EM_OK);
                em_tensor_release(e);
                break;
            case 3: assert_int_equal(em_sort(cur, -1, step % 8 == 3, &next, NULL), EM_OK);
                break;
            }
            em_tensor_release(cur);
            cur = next;
        }
        em_tensor *sq = NULL, *loss = NULL;
        assert_int_equal(em_mul(cur, cur, &sq), EM_OK);
        assert_int_equal(em_sum(sq, &loss), EM_OK);
        em_grads *g = NULL;
        assert_int_equal(em_backward(loss, &g), EM_OK);
        em_tensor *gt = NULL;
        assert_int_equal(em_grads_get(g, t, &gt), EM_OK);
        assert_non_null(gt);
        got[dv] = read_all(gt);
        em_tensor_release(gt);
        em_grads_release(g);
        em_tensor_release(loss);
        em_tensor_release(sq);
        em_tensor_release(cur);
        em_tensor_release(t);
    }
    assert_memory_equal(got[0], got[1], sizeof data);
    free(got[0]);
    free(got[1]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_views),
        cmocka_unit_test(test_copies),
        cmocka_unit_test(test_indexing),
        cmocka_unit_test(test_tracking),
        cmocka_unit_test(test_constants_and_sharing),
        cmocka_unit_test(test_balanced_chain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
