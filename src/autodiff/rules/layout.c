/* layout.c — backward rules of the layout ops: the views (reshape, flatten, squeeze,
 * unsqueeze, expand, permute, transpose, slice, split, flip) and the copies (slice_assign,
 * cat, stack, repeat). Every rule can recompute its op from the input values (BALANCED). */
#include "autodiff/rules/rules.h"

/* ---- reshape, flatten, squeeze, unsqueeze: params emi_rule_shape_params (the output) ---- */

static em_status reshape_forward(const void *p, em_tensor *const *in, int nin, em_tensor **out) {
    (void)nin;
    const emi_rule_shape_params *sp = p;
    return em_reshape(in[0], sp->shape, sp->rank, out);
}

/* The gradient reshaped back to the input's shape. */
static em_status reshape_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    int rank;
    const int64_t *shape = emi_bw_in_shape(bw, 0, &rank);
    return em_reshape(bw->grad, shape, rank, &bw->gin[0]);
}

const emi_ad_rule emi_rule_reshape = {"reshape", false, 0, reshape_forward, reshape_backward};
const emi_ad_rule emi_rule_flatten = {"flatten", false, 0, reshape_forward, reshape_backward};
const emi_ad_rule emi_rule_squeeze = {"squeeze", false, 0, reshape_forward, reshape_backward};
const emi_ad_rule emi_rule_unsqueeze = {"unsqueeze", false, 0, reshape_forward,
                                        reshape_backward};

/* ---- expand: params emi_rule_shape_params (the output) ---- */

static em_status expand_forward(const void *p, em_tensor *const *in, int nin, em_tensor **out) {
    (void)nin;
    const emi_rule_shape_params *sp = p;
    return em_expand(in[0], sp->shape, sp->rank, out);
}

/* The gradient summed over the dims that expand added or stretched. */
static em_status expand_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    int rank;
    const int64_t *shape = emi_bw_in_shape(bw, 0, &rank);
    return emi_ad_unbroadcast(bw->grad, shape, rank, &bw->gin[0]);
}

const emi_ad_rule emi_rule_expand = {"expand", false, 0, expand_forward, expand_backward};

/* ---- permute, transpose: params emi_rule_perm_params (normalized) ---- */

static em_status permute_forward(const void *p, em_tensor *const *in, int nin, em_tensor **out) {
    (void)nin;
    const emi_rule_perm_params *pp = p;
    return em_permute(in[0], pp->perm, pp->rank, out);
}

/* The gradient permuted by the inverse permutation. */
static em_status permute_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    const emi_rule_perm_params *pp = bw->params;
    int inv[EM_MAX_RANK];
    for (int i = 0; i < pp->rank; i++) inv[pp->perm[i]] = i;
    return em_permute(bw->grad, inv, pp->rank, &bw->gin[0]);
}

const emi_ad_rule emi_rule_permute = {"permute", false, 0, permute_forward, permute_backward};
const emi_ad_rule emi_rule_transpose = {"transpose", false, 0, permute_forward,
                                        permute_backward};

/* ---- slice, split: params emi_rule_slice_params ---- */

static em_status slice_forward(const void *p, em_tensor *const *in, int nin, em_tensor **out) {
    (void)nin;
    const emi_rule_slice_params *sp = p;
    return em_slice(in[0], sp->dim, sp->start, sp->stop, sp->step, out);
}

/* The gradient written into the slice of zeros shaped like the input. */
static em_status slice_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    const emi_rule_slice_params *sp = bw->params;
    int rank;
    const int64_t *shape = emi_bw_in_shape(bw, 0, &rank);
    em_tensor *z = NULL;
    em_status s = em_zeros(shape, rank, bw->grad->dtype, em_tensor_device(bw->grad), &z);
    if (s == EM_OK)
        s = em_slice_assign(z, sp->dim, sp->start, sp->stop, sp->step, bw->grad, &bw->gin[0]);
    em_tensor_release(z);
    return s;
}

const emi_ad_rule emi_rule_slice = {"slice", false, 0, slice_forward, slice_backward};
const emi_ad_rule emi_rule_split = {"split", false, 0, slice_forward, slice_backward};

/* ---- flip: params emi_rule_flip_params (normalized, no repeats) ---- */

static em_status flip_forward(const void *p, em_tensor *const *in, int nin, em_tensor **out) {
    (void)nin;
    const emi_rule_flip_params *fp = p;
    return em_flip(in[0], fp->dims, fp->ndims, out);
}

/* Flipping is its own inverse. */
static em_status flip_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    const emi_rule_flip_params *fp = bw->params;
    return em_flip(bw->grad, fp->dims, fp->ndims, &bw->gin[0]);
}

const emi_ad_rule emi_rule_flip = {"flip", false, 0, flip_forward, flip_backward};

/* ---- slice_assign(x, value): inputs (x, value), params emi_rule_slice_params ---- */

static em_status slice_assign_forward(const void *p, em_tensor *const *in, int nin,
                                      em_tensor **out) {
    (void)nin;
    const emi_rule_slice_params *sp = p;
    return em_slice_assign(in[0], sp->dim, sp->start, sp->stop, sp->step, in[1], out);
}

/* x gets the gradient with the slice zeroed; value gets the slice of the gradient, summed
 * over the dims that broadcasting stretched. */
static em_status slice_assign_backward(emi_ad_bw *bw) {
    const emi_rule_slice_params *sp = bw->params;
    em_status s = EM_OK;
    if (bw->need[0]) {
        em_tensor *z = NULL;
        s = em_zeros(NULL, 0, bw->grad->dtype, em_tensor_device(bw->grad), &z);
        if (s == EM_OK)
            s = em_slice_assign(bw->grad, sp->dim, sp->start, sp->stop, sp->step, z,
                                &bw->gin[0]);
        em_tensor_release(z);
    }
    if (s == EM_OK && bw->need[1]) {
        int rank;
        const int64_t *shape = emi_bw_in_shape(bw, 1, &rank);
        em_tensor *g = NULL, *u = NULL;
        s = em_slice(bw->grad, sp->dim, sp->start, sp->stop, sp->step, &g);
        if (s == EM_OK) s = emi_ad_unbroadcast(g, shape, rank, &u);
        /* a copy, so that the gradient does not keep the whole output's alive */
        if (s == EM_OK) s = em_contiguous(u, &bw->gin[1]);
        em_tensor_release(g);
        em_tensor_release(u);
    }
    return s;
}

const emi_ad_rule emi_rule_slice_assign = {"slice_assign", false, 0, slice_assign_forward,
                                           slice_assign_backward};

/* ---- cat, stack: inputs the pieces, params int (the normalized dim) ---- */

static em_status cat_forward(const void *p, em_tensor *const *in, int nin, em_tensor **out) {
    return em_cat((const em_tensor *const *)in, (size_t)nin, *(const int *)p, out);
}

/* Each piece gets its own range of the gradient along dim. */
static em_status cat_backward(emi_ad_bw *bw) {
    int d = *(const int *)bw->params;
    int64_t at = 0;
    em_status s = EM_OK;
    for (int i = 0; i < bw->nin && s == EM_OK; i++) {
        int rank;
        int64_t len = emi_bw_in_shape(bw, i, &rank)[d];
        if (bw->need[i]) s = em_slice(bw->grad, d, at, at + len, 1, &bw->gin[i]);
        at += len;
    }
    return s;
}

const emi_ad_rule emi_rule_cat = {"cat", false, 0, cat_forward, cat_backward};

static em_status stack_forward(const void *p, em_tensor *const *in, int nin, em_tensor **out) {
    return em_stack((const em_tensor *const *)in, (size_t)nin, *(const int *)p, out);
}

/* Piece i gets index i of the gradient along the new dim. */
static em_status stack_backward(emi_ad_bw *bw) {
    int d = *(const int *)bw->params;
    em_status s = EM_OK;
    for (int i = 0; i < bw->nin && s == EM_OK; i++) {
        if (!bw->need[i]) continue;
        em_tensor *g = NULL;
        s = em_slice(bw->grad, d, i, (int64_t)i + 1, 1, &g);
        if (s == EM_OK) s = em_squeeze(g, d, &bw->gin[i]);
        em_tensor_release(g);
    }
    return s;
}

const emi_ad_rule emi_rule_stack = {"stack", false, 0, stack_forward, stack_backward};

/* ---- repeat: params emi_rule_repeat_params ---- */

static em_status repeat_forward(const void *p, em_tensor *const *in, int nin, em_tensor **out) {
    (void)nin;
    const emi_rule_repeat_params *rp = p;
    return em_repeat(in[0], rp->reps, rp->nreps, out);
}

/* The gradient summed over the tiles: dim i of size reps[i] * p[i] is viewed as
 * [A, reps[i], p[i], B] (A, B: the products of the dims around it) and summed over the reps,
 * one dim at a time so that the rank never grows past 4. */
static em_status repeat_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    const emi_rule_repeat_params *rp = bw->params;
    int xr, n = rp->nreps;
    const int64_t *xshape = emi_bw_in_shape(bw, 0, &xr);
    em_device dev = em_tensor_device(bw->grad);
    if (em_tensor_numel(bw->grad) == 0)
        return em_zeros(xshape, xr, bw->grad->dtype, dev, &bw->gin[0]);
    int64_t cur[EM_MAX_RANK];
    for (int i = 0; i < n; i++) cur[i] = em_tensor_shape(bw->grad)[i];
    em_tensor *g = bw->grad;
    em_tensor_retain(g);
    em_status s = EM_OK;
    for (int i = 0; i < n && s == EM_OK; i++) {
        if (rp->reps[i] == 1) continue;
        int64_t p = i < n - xr ? 1 : xshape[i - (n - xr)];
        int64_t a = 1, b = 1;
        for (int k = 0; k < i; k++) a *= cur[k];
        for (int k = i + 1; k < n; k++) b *= cur[k];
        int64_t four[4] = {a, rp->reps[i], p, b};
        em_tensor *v = NULL, *sum = NULL, *next = NULL;
        s = em_reshape(g, four, 4, &v);
        if (s == EM_OK) s = em_sum_dim(v, 1, false, &sum);
        cur[i] = p;
        if (s == EM_OK) s = em_reshape(sum, cur, n, &next);
        em_tensor_release(v);
        em_tensor_release(sum);
        em_tensor_release(g);
        g = next;
    }
    if (s == EM_OK) s = em_reshape(g, xshape, xr, &bw->gin[0]);
    em_tensor_release(g);
    return s;
}

const emi_ad_rule emi_rule_repeat = {"repeat", false, 0, repeat_forward, repeat_backward};
