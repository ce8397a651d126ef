/*
 * layout.c — the layout ops that copy: slice_assign, cat, stack, repeat. Each allocates a
 * fresh output and fills it with the backend's copy slot (emi_copy_into) through views of the
 * output, so no dedicated kernel is needed.
 *
 * Autodiff: each op records itself once (stack with its own rule, not as unsqueeze + cat);
 * the public ops they call inside run on untracked inner aliases and record nothing.
 */
#include <limits.h>
#include <string.h>

#include "layout_util.h"

/** A view tensor of `base` (shape/strides/offset as given) into which emi_copy_into writes
 *  src; the temporary view is released before returning. */
static em_status lay_copy_to_region(const char *fn, em_tensor *base, const int64_t *shape,
                                    const int64_t *strides, int rank, int64_t offset,
                                    const em_tensor *src) {
    em_tensor *dst = NULL;
    EMI_TRY(emi_view_tensor(base, shape, strides, rank, offset, &dst));
    em_status s = emi_copy_into(fn, dst, src);
    em_tensor_release(dst);
    return s;
}

static em_status lay_slice_assign(const char *fn, const em_tensor *x, int d, int64_t start,
                                  int64_t stop, int64_t step, const em_tensor *value,
                                  em_tensor **out);

/* em_slice_assign: a copy of x whose slice start:stop:step along dim is overwritten by value
 * (same dtype and device, broadcast to the slice's shape). */
em_status em_slice_assign(const em_tensor *x, int dim, int64_t start, int64_t stop,
                          int64_t step, const em_tensor *value, em_tensor **out) {
    static const char fn[] = "em_slice_assign";
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_tensor(fn, "value", value));
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_not_quantized(fn, x));
    EMI_TRY(emi_check_same_device(fn, x, value));
    EMI_TRY(emi_check_same_dtype(fn, x, value));
    if (x->v.rank == 0) return emi_fail(EM_ERR_ARG, "%s: cannot slice a 0-d tensor", fn);
    int d = 0;
    EMI_TRY(emi_norm_dim(fn, dim, x->v.rank, &d));
    if (step == 0) return emi_fail(EM_ERR_ARG, "%s: step must not be 0", fn);
    const em_tensor *ins[2] = {x, value};
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, ins, 2, &ad));
    em_tensor *xa = NULL, *va = NULL;
    em_status s = lay_ad_inner(x, &x, &xa);
    if (s == EM_OK) s = lay_ad_inner(value, &value, &va);
    em_tensor *res = NULL;
    if (s == EM_OK) s = lay_slice_assign(fn, x, d, start, stop, step, value, &res);
    em_tensor_release(xa);
    em_tensor_release(va);
    if (s != EM_OK) return s;
    emi_rule_slice_params p = {d, start, stop, step};
    return lay_ad_finish(&ad, &emi_rule_slice_assign, ins, 2, res, &p, sizeof p, out);
}

/** slice_assign after the argument checks (d normalized), without recording. */
static em_status lay_slice_assign(const char *fn, const em_tensor *x, int d, int64_t start,
                                  int64_t stop, int64_t step, const em_tensor *value,
                                  em_tensor **out) {
    /* The slice's shape, from a view of x (cheap; checks nothing more). */
    em_tensor *probe = NULL;
    EMI_TRY(em_slice(x, d, start, stop, step, &probe));
    int64_t sshape[EM_MAX_RANK];
    int srank = probe->v.rank;
    memcpy(sshape, probe->v.shape, sizeof sshape);
    em_tensor_release(probe);
    int64_t bshape[EM_MAX_RANK];
    int brank = 0;
    char a[128], b[128];
    em_status s = emi_broadcast_shapes(fn, value->v.shape, value->v.rank, sshape, srank,
                                       bshape, &brank);
    if (s != EM_OK || brank != srank || memcmp(bshape, sshape, sizeof(int64_t) * srank) != 0)
        return emi_fail(EM_ERR_SHAPE, "%s: value of shape %s cannot be broadcast to the slice %s",
                        fn, emi_shape_str(value->v.shape, value->v.rank, a, sizeof a),
                        emi_shape_str(sshape, srank, b, sizeof b));
    em_tensor *res = NULL, *region = NULL, *src = NULL;
    EMI_TRY(em_clone(x, &res));
    if (emi_numel(sshape, srank) == 0) {
        *out = res;
        return EM_OK;
    }
    s = em_slice(res, d, start, stop, step, &region);
    if (s == EM_OK) {
        em_view bv = emi_broadcast_view(value, sshape, srank);
        s = emi_view_tensor(value, bv.shape, bv.strides, bv.rank, bv.offset, &src);
    }
    if (s == EM_OK) s = emi_copy_into(fn, region, src);
    em_tensor_release(src);
    em_tensor_release(region);
    if (s != EM_OK) {
        em_tensor_release(res);
        return s;
    }
    *out = res;
    return EM_OK;
}

/** Checks the tensor list of cat/stack: 1 <= n <= INT_MAX, no NULL, one dtype and device. */
static em_status lay_check_list(const char *fn, const em_tensor *const *xs, size_t n) {
    if (xs == NULL) return emi_fail(EM_ERR_ARG, "%s: xs is NULL", fn);
    if (n == 0) return emi_fail(EM_ERR_ARG, "%s: expected at least one tensor", fn);
    if (n > INT_MAX) return emi_fail(EM_ERR_ARG, "%s: too many tensors (%zu)", fn, n);
    for (size_t i = 0; i < n; i++) {
        if (xs[i] == NULL) return emi_fail(EM_ERR_ARG, "%s: xs[%zu] is NULL", fn, i);
    }
    EMI_TRY(emi_check_not_quantized(fn, xs[0]));
    for (size_t i = 1; i < n; i++) {
        EMI_TRY(emi_check_same_device(fn, xs[0], xs[i]));
        EMI_TRY(emi_check_same_dtype(fn, xs[0], xs[i]));
    }
    return EM_OK;
}

/* em_cat: concatenates n tensors of one dtype, device and rank along dim; the other dims
 * must agree (EM_ERR_SHAPE otherwise). Empty pieces are allowed. */
em_status em_cat(const em_tensor *const *xs, size_t n, int dim, em_tensor **out) {
    static const char fn[] = "em_cat";
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(lay_check_list(fn, xs, n));
    int r = xs[0]->v.rank;
    if (r == 0) return emi_fail(EM_ERR_SHAPE, "%s: 0-d tensors cannot be concatenated", fn);
    int d = 0;
    EMI_TRY(emi_norm_dim(fn, dim, r, &d));
    int64_t shape[EM_MAX_RANK];
    memcpy(shape, xs[0]->v.shape, sizeof shape);
    shape[d] = 0;
    char a[128], b[128];
    for (size_t i = 0; i < n; i++) {
        const em_view *v = &xs[i]->v;
        bool ok = v->rank == r;
        for (int k = 0; ok && k < r; k++) ok = k == d || v->shape[k] == shape[k];
        if (!ok)
            return emi_fail(EM_ERR_SHAPE, "%s: shapes %s and %s differ outside dim %d", fn,
                            emi_shape_str(xs[0]->v.shape, r, a, sizeof a),
                            emi_shape_str(v->shape, v->rank, b, sizeof b), dim);
        if (v->shape[d] > INT64_MAX - shape[d])
            return emi_fail(EM_ERR_SHAPE, "%s: the concatenated size overflows", fn);
        shape[d] += v->shape[d];
    }
    int64_t numel = 0;
    EMI_TRY(emi_check_shape(fn, shape, r, &numel));
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, xs, (int)n, &ad));
    em_tensor *res = NULL;
    EMI_TRY(emi_empty(fn, emi_result_device(xs, (int)n),
                      xs[0]->dtype, shape, r, &res));
    int64_t at = 0;
    for (size_t i = 0; i < n && numel > 0; i++) {
        const em_view *v = &xs[i]->v;
        if (emi_numel(v->shape, r) == 0) continue;
        em_status s = lay_copy_to_region(fn, res, v->shape, res->v.strides, r,
                                         res->v.offset + at * res->v.strides[d], xs[i]);
        if (s != EM_OK) {
            em_tensor_release(res);
            return s;
        }
        at += v->shape[d];
    }
    return lay_ad_finish(&ad, &emi_rule_cat, xs, (int)n, res, &d, sizeof d, out);
}

/* em_stack: stacks n tensors of one shape along a new dim (in -rank-1 .. rank). */
em_status em_stack(const em_tensor *const *xs, size_t n, int dim, em_tensor **out) {
    static const char fn[] = "em_stack";
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(lay_check_list(fn, xs, n));
    int r = xs[0]->v.rank;
    char a[128], b[128];
    for (size_t i = 1; i < n; i++) {
        const em_view *v = &xs[i]->v;
        if (v->rank != r || memcmp(v->shape, xs[0]->v.shape, sizeof(int64_t) * r) != 0)
            return emi_fail(EM_ERR_SHAPE, "%s: shapes %s and %s differ", fn,
                            emi_shape_str(xs[0]->v.shape, r, a, sizeof a),
                            emi_shape_str(v->shape, v->rank, b, sizeof b));
    }
    if (r + 1 > EM_MAX_RANK)
        return emi_fail(EM_ERR_SHAPE, "%s: rank %d exceeds the maximum of %d", fn, r + 1,
                        EM_MAX_RANK);
    int d = dim < 0 ? dim + r + 1 : dim;
    if (d < 0 || d > r)
        return emi_fail(EM_ERR_ARG, "%s: dim %d out of range for rank %d (expected %d..%d)", fn,
                        dim, r, -r - 1, r);
    int64_t shape[EM_MAX_RANK];
    for (int k = 0, j = 0; k <= r; k++) shape[k] = k == d ? (int64_t)n : xs[0]->v.shape[j++];
    int64_t numel = 0;
    EMI_TRY(emi_check_shape(fn, shape, r + 1, &numel));
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, xs, (int)n, &ad));
    em_tensor *res = NULL;
    EMI_TRY(emi_empty(fn, emi_result_device(xs, (int)n),
                      xs[0]->dtype, shape, r + 1, &res));
    /* Piece i is the region of res at index i of dim d: res's strides without dim d. */
    int64_t strides[EM_MAX_RANK];
    for (int k = 0, j = 0; k <= r; k++)
        if (k != d) strides[j++] = res->v.strides[k];
    for (size_t i = 0; i < n && numel > 0; i++) {
        em_status s = lay_copy_to_region(fn, res, xs[0]->v.shape, strides, r,
                                         res->v.offset + (int64_t)i * res->v.strides[d], xs[i]);
        if (s != EM_OK) {
            em_tensor_release(res);
            return s;
        }
    }
    return lay_ad_finish(&ad, &emi_rule_stack, xs, (int)n, res, &d, sizeof d, out);
}

/** One tiling stage of repeat: cur (contiguous, viewed as [A, 1, B] where A is the product of
 *  dims before d) becomes [A, r, B] in a fresh tensor of shape `shape` (cur's with dim d
 *  multiplied by r). Consumes nothing; *next is new. */
static em_status lay_tile(const char *fn, const em_tensor *cur, const int64_t *shape, int rank,
                          int d, int64_t r, em_tensor **next) {
    int64_t outer = 1, inner = 1;
    for (int k = 0; k < d; k++) outer *= cur->v.shape[k];
    for (int k = d; k < rank; k++) inner *= cur->v.shape[k];
    em_tensor *res = NULL;
    EMI_TRY(emi_empty(fn, cur->dev, cur->dtype, shape, rank, &res));
    int64_t s3[3] = {outer, r, inner};
    int64_t src_strides[3] = {inner, 0, 1};
    int64_t dst_strides[3] = {r * inner, inner, 1};
    em_tensor *src = NULL;
    em_status s = emi_view_tensor(cur, s3, src_strides, 3, cur->v.offset, &src);
    if (s == EM_OK) s = lay_copy_to_region(fn, res, s3, dst_strides, 3, res->v.offset, src);
    em_tensor_release(src);
    if (s != EM_OK) {
        em_tensor_release(res);
        return s;
    }
    *next = res;
    return EM_OK;
}

static em_status lay_repeat(const char *fn, const em_tensor *x, const int64_t *reps, int nreps,
                            const int64_t *pshape, em_tensor **out);

/* em_repeat: x tiled reps[i] times along each dim, like torch.Tensor.repeat (x is padded
 * with leading size-1 dims to nreps dims; nreps < rank is EM_ERR_ARG). Always a copy. */
em_status em_repeat(const em_tensor *x, const int64_t *reps, int nreps, em_tensor **out) {
    static const char fn[] = "em_repeat";
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_not_quantized(fn, x));
    if (nreps > 0 && reps == NULL) return emi_fail(EM_ERR_ARG, "%s: reps is NULL", fn);
    if (nreps > EM_MAX_RANK)
        return emi_fail(EM_ERR_SHAPE, "%s: %d reps exceed the maximum rank %d", fn, nreps,
                        EM_MAX_RANK);
    int xr = x->v.rank;
    if (nreps < xr)
        return emi_fail(EM_ERR_ARG, "%s: %d reps for a tensor of rank %d (need at least %d)", fn,
                        nreps, xr, xr);
    int64_t pshape[EM_MAX_RANK] = {0}, oshape[EM_MAX_RANK];
    for (int i = 0; i < nreps; i++) {
        if (reps[i] < 0)
            return emi_fail(EM_ERR_ARG, "%s: negative repeat %lld at dim %d", fn,
                            (long long)reps[i], i);
        int xd = i - (nreps - xr);
        pshape[i] = xd < 0 ? 1 : x->v.shape[xd];
        if (pshape[i] != 0 && reps[i] > INT64_MAX / pshape[i])
            return emi_fail(EM_ERR_SHAPE, "%s: the repeated shape overflows", fn);
        oshape[i] = pshape[i] * reps[i];
    }
    int64_t numel = 0;
    EMI_TRY(emi_check_shape(fn, oshape, nreps, &numel));
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, &x, 1, &ad));
    emi_rule_repeat_params p = {nreps, {0}};
    if (nreps > 0) memcpy(p.reps, reps, sizeof(int64_t) * (size_t)nreps);
    em_tensor *res = NULL;
    if (numel == 0) {
        EMI_TRY(emi_empty(fn, x->dev, x->dtype, oshape, nreps, &res));
    } else {
        const em_tensor *xs = NULL;
        em_tensor *alias = NULL;
        EMI_TRY(lay_ad_inner(x, &xs, &alias));
        em_status s = lay_repeat(fn, xs, reps, nreps, pshape, &res);
        em_tensor_release(alias);
        if (s != EM_OK) return s;
    }
    return lay_ad_finish(&ad, &emi_rule_repeat, &x, 1, res, &p, sizeof p, out);
}

/** repeat of a non-empty result after the argument checks (pshape: x's shape padded to
 *  nreps dims), without recording. */
static em_status lay_repeat(const char *fn, const em_tensor *x, const int64_t *reps, int nreps,
                            const int64_t *pshape, em_tensor **out) {
    /* Start from a contiguous copy with the padded shape, then tile one dim at a time. */
    em_tensor *cur = NULL, *tmp = NULL;
    EMI_TRY(em_clone(x, &tmp));
    int64_t strides[EM_MAX_RANK];
    emi_contiguous_strides(pshape, nreps, strides);
    em_status s = emi_view_tensor(tmp, pshape, strides, nreps, tmp->v.offset, &cur);
    em_tensor_release(tmp);
    if (s != EM_OK) return s;
    int64_t shape[EM_MAX_RANK];
    memcpy(shape, pshape, sizeof shape);
    for (int d = 0; d < nreps; d++) {
        if (reps[d] == 1) continue;
        shape[d] *= reps[d];
        em_tensor *next = NULL;
        s = lay_tile(fn, cur, shape, nreps, d, reps[d], &next);
        em_tensor_release(cur);
        if (s != EM_OK) return s;
        cur = next;
    }
    *out = cur;
    return EM_OK;
}
