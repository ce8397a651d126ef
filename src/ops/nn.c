/*
 * nn.c — the neural ops that are not convolution or pooling: em_embedding, em_layer_norm,
 * em_dropout and em_cross_entropy. layer_norm routes to its backend slot; the others compose
 * from public ops (index_select, reshape, rand_bernoulli, mul, log_softmax, gather, mean...),
 * so that every backend and the autodiff layer get them for free: only layer_norm records a
 * rule of its own; the compositions are recorded by their parts.
 */
#include <math.h>
#include <stdlib.h>

#include "autodiff/rules/rules.h"

/** Reads an EM_I64/EM_I32 tensor to the host and checks each value is in [0, limit):
 *  "<fn>: <what> 7 is out of range [0, 5)". */
static em_status nn_check_range(const char *fn, const char *what, const em_tensor *index,
                                int64_t limit) {
    if (emi_numel(index->v.shape, index->v.rank) == 0) return EM_OK;
    /* a captured index has no values yet: the graph's run checks them (src/wire/exec.c) */
    if (index->dev.backend == EM_BACKEND_CAPTURE) return EM_OK;
    void *data = NULL;
    size_t bytes = 0;
    EMI_TRY(emi_read_all(index, &data, &bytes));
    const size_t n = bytes / em_dtype_size(index->dtype);
    em_status s = EM_OK;
    for (size_t i = 0; i < n; i++) {
        int64_t v = index->dtype == EM_I64 ? ((const int64_t *)data)[i]
                                            : (int64_t)((const int32_t *)data)[i];
        if (v < 0 || v >= limit) {
            s = emi_fail(EM_ERR_ARG, "%s: %s %lld is out of range [0, %lld)", fn, what,
                         (long long)v, (long long)limit);
            break;
        }
    }
    free(data);
    return s;
}

em_status em_embedding(const em_tensor *weight, const em_tensor *idx, em_tensor **out) {
    static const char fn[] = "em_embedding";
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_tensor(fn, "weight", weight));
    EMI_TRY(emi_check_tensor(fn, "idx", idx));
    EMI_TRY(emi_check_float(fn, weight));
    EMI_TRY(emi_check_index(fn, idx));
    EMI_TRY(emi_check_same_device(fn, weight, idx));
    if (weight->v.rank != 2)
        return emi_fail(EM_ERR_SHAPE, "%s: expected a weight of rank 2 [V, D], got rank %d", fn,
                        weight->v.rank);
    if (idx->v.rank >= EM_MAX_RANK)
        return emi_fail(EM_ERR_SHAPE, "%s: idx of rank %d gives a result of rank %d > %d", fn,
                        idx->v.rank, idx->v.rank + 1, EM_MAX_RANK);
    EMI_TRY(nn_check_range(fn, "index", idx, weight->v.shape[0]));
    /* rows = weight[flatten(idx)], then reshaped to idx.shape + [D]. */
    const int64_t n = emi_numel(idx->v.shape, idx->v.rank);
    em_tensor *flat = NULL, *rows = NULL;
    em_status s = em_reshape(idx, &n, 1, &flat);
    if (s == EM_OK) s = em_index_select(weight, 0, flat, &rows);
    em_tensor_release(flat);
    if (s != EM_OK) return s;
    int64_t shape[EM_MAX_RANK];
    for (int d = 0; d < idx->v.rank; d++) shape[d] = idx->v.shape[d];
    shape[idx->v.rank] = weight->v.shape[1];
    s = em_reshape(rows, shape, idx->v.rank + 1, out);
    em_tensor_release(rows);
    return s;
}

/** A contiguous copy of t when it is not contiguous (*tmp gets it), else t itself. */
static em_status nn_contiguous(const char *fn, const em_tensor *t, const em_tensor **c,
                               em_tensor **tmp) {
    *tmp = NULL;
    *c = t;
    if (emi_view_is_contiguous(&t->v)) return EM_OK;
    EMI_TRY(emi_empty(fn, t->dev, t->v.dtype, t->v.shape, t->v.rank, tmp));
    em_status s = emi_copy_into(fn, *tmp, t);
    if (s != EM_OK) {
        em_tensor_release(*tmp);
        *tmp = NULL;
        return s;
    }
    *c = *tmp;
    return EM_OK;
}

/** The view of contiguous t as [rows, cols] (rank 2) or, when rows < 0, as [cols] (rank 1). */
static em_view nn_flat_view(const em_tensor *t, int64_t rows, int64_t cols) {
    em_view v = t->v;
    if (rows < 0) {
        v.rank = 1;
        v.shape[0] = cols;
        v.strides[0] = 1;
    } else {
        v.rank = 2;
        v.shape[0] = rows;
        v.shape[1] = cols;
        v.strides[0] = cols;
        v.strides[1] = 1;
    }
    return v;
}

/** Checks an optional affine parameter of layer_norm: x's dtype and device, shape equal to
 *  x's trailing `nd` dims. */
static em_status ln_check_param(const char *fn, const char *what, const em_tensor *x,
                                const em_tensor *p, int nd) {
    if (!p) return EM_OK;
    EMI_TRY(emi_check_same_dtype(fn, x, p));
    EMI_TRY(emi_check_same_device(fn, x, p));
    const int64_t *trail = x->v.shape + (x->v.rank - nd);
    bool ok = p->v.rank == nd;
    for (int d = 0; ok && d < nd; d++) ok = p->v.shape[d] == trail[d];
    if (!ok) {
        char a[128], b[128];
        return emi_fail(EM_ERR_SHAPE, "%s: %s has shape %s, expected the normalized shape %s",
                        fn, what, emi_shape_str(p->v.shape, p->v.rank, a, sizeof a),
                        emi_shape_str(trail, nd, b, sizeof b));
    }
    return EM_OK;
}

em_status em_layer_norm(const em_tensor *x, int normalized_ndim, const em_tensor *weight,
                        const em_tensor *bias, double eps, em_tensor **out) {
    static const char fn[] = "em_layer_norm";
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_float(fn, x));
    if (normalized_ndim < 1 || normalized_ndim > x->v.rank)
        return emi_fail(EM_ERR_ARG, "%s: normalized_ndim %d must be in 1..%d (x's rank)", fn,
                        normalized_ndim, x->v.rank);
    EMI_TRY(ln_check_param(fn, "weight", x, weight, normalized_ndim));
    EMI_TRY(ln_check_param(fn, "bias", x, bias, normalized_ndim));
    if (!(eps >= 0) || isinf(eps))
        return emi_fail(EM_ERR_ARG, "%s: eps must be finite and >= 0, got %g", fn, eps);
    const em_backend_ops *ops = x->st->ops;
    EMI_TRY(emi_need(fn, ops, ops->layer_norm != NULL, "layer_norm"));
    const em_tensor *ins[3] = {x, weight, bias};
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, ins, 3, &ad));
    em_tensor *o;
    EMI_TRY(emi_empty(fn, emi_result_device(ins, 1), x->v.dtype, x->v.shape, x->v.rank, &o));
    const int64_t numel = emi_numel(x->v.shape, x->v.rank);
    const int64_t cols = emi_numel(x->v.shape + (x->v.rank - normalized_ndim), normalized_ndim);
    const int64_t rows = numel ? numel / cols : 0;
    const em_tensor *xc = NULL, *wc = NULL, *bc = NULL;
    em_tensor *tx = NULL, *tw = NULL, *tb = NULL;
    em_status s = EM_OK;
    if (numel > 0) s = nn_contiguous(fn, x, &xc, &tx);
    if (numel > 0 && s == EM_OK && weight) s = nn_contiguous(fn, weight, &wc, &tw);
    if (numel > 0 && s == EM_OK && bias) s = nn_contiguous(fn, bias, &bc, &tb);
    if (numel > 0 && s == EM_OK) {
        const em_view ov = nn_flat_view(o, rows, cols), xv = nn_flat_view(xc, rows, cols);
        em_view wv, bv;
        if (wc) wv = nn_flat_view(wc, -1, cols);
        if (bc) bv = nn_flat_view(bc, -1, cols);
        s = ops->layer_norm(x->st->ctx, &ov, &xv, wc ? &wv : NULL, bc ? &bv : NULL, cols, eps);
    }
    em_tensor_release(tx);
    em_tensor_release(tw);
    em_tensor_release(tb);
    if (s == EM_OK) {
        const emi_rule_layer_norm_params rp = {normalized_ndim, eps};
        s = emi_ad_end(&ad, &emi_rule_layer_norm, ins, 3, o, &rp, sizeof rp);
    }
    if (s != EM_OK) {
        em_tensor_release(o);
        return s;
    }
    *out = o;
    return EM_OK;
}

em_status em_dropout(const em_tensor *x, double p, bool training, uint64_t seed,
                     em_tensor **out) {
    static const char fn[] = "em_dropout";
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_float(fn, x));
    if (!(p >= 0.0 && p <= 1.0))
        return emi_fail(EM_ERR_ARG, "%s: p must be in [0, 1], got %g", fn, p);
    if (!training || p == 0.0) return emi_share(x, out);
    if (p == 1.0) return em_full_like(x, 0.0, out);
    /* keep element i when bernoulli(1 - p) gives 1 there; the kept ones scale by 1/(1-p). */
    em_tensor *mask = NULL, *kept = NULL;
    em_status s = em_rand_bernoulli(x->v.shape, x->v.rank, x->v.dtype, 1.0 - p, seed, x->dev,
                                    &mask);
    if (s == EM_OK) s = em_mul(x, mask, &kept);
    if (s == EM_OK) s = em_div_scalar(kept, 1.0 - p, out);
    em_tensor_release(mask);
    em_tensor_release(kept);
    return s;
}

/** -sum(target * log_softmax(logits)) / N for probability targets. */
static em_status ce_probs(const em_tensor *logits, const em_tensor *target, em_tensor **out) {
    em_tensor *ls = NULL, *prod = NULL, *sum = NULL;
    em_status s = em_log_softmax(logits, 1, &ls);
    if (s == EM_OK) s = em_mul(target, ls, &prod);
    if (s == EM_OK) s = em_sum(prod, &sum);
    if (s == EM_OK) s = em_div_scalar(sum, -(double)logits->v.shape[0], out);
    em_tensor_release(ls);
    em_tensor_release(prod);
    em_tensor_release(sum);
    return s;
}

/** -mean(log_softmax(logits)[n, target[n]]) for class-index targets. */
static em_status ce_indices(const em_tensor *logits, const em_tensor *target, em_tensor **out) {
    const int64_t shape[2] = {logits->v.shape[0], 1};
    em_tensor *ls = NULL, *idx = NULL, *picked = NULL, *mean = NULL;
    em_status s = em_log_softmax(logits, 1, &ls);
    if (s == EM_OK) s = em_reshape(target, shape, 2, &idx);
    if (s == EM_OK) s = em_gather(ls, 1, idx, &picked);
    if (s == EM_OK) s = em_mean(picked, &mean);
    if (s == EM_OK) s = em_neg(mean, out);
    em_tensor_release(ls);
    em_tensor_release(idx);
    em_tensor_release(picked);
    em_tensor_release(mean);
    return s;
}

em_status em_cross_entropy(const em_tensor *logits, const em_tensor *target, em_tensor **out) {
    static const char fn[] = "em_cross_entropy";
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_tensor(fn, "logits", logits));
    EMI_TRY(emi_check_tensor(fn, "target", target));
    EMI_TRY(emi_check_float(fn, logits));
    EMI_TRY(emi_check_same_device(fn, logits, target));
    if (logits->v.rank != 2)
        return emi_fail(EM_ERR_SHAPE, "%s: expected logits of rank 2 [N, C], got rank %d", fn,
                        logits->v.rank);
    const int64_t N = logits->v.shape[0], C = logits->v.shape[1];
    char a[128], b[128];
    if (em_dtype_kind(target->dtype) == EM_KIND_FLOAT) {
        EMI_TRY(emi_check_same_dtype(fn, logits, target));
        if (target->v.rank != 2 || target->v.shape[0] != N || target->v.shape[1] != C)
            return emi_fail(EM_ERR_SHAPE,
                            "%s: probability targets must have the logits' shape %s, got %s", fn,
                            emi_shape_str(logits->v.shape, 2, a, sizeof a),
                            emi_shape_str(target->v.shape, target->v.rank, b, sizeof b));
        return ce_probs(logits, target, out);
    }
    if (target->dtype != EM_I64 && target->dtype != EM_I32)
        return emi_fail(EM_ERR_DTYPE,
                        "%s: expected class indices (i64 or i32) or probabilities (%s), got %s",
                        fn, em_dtype_name(logits->dtype), em_dtype_name(target->dtype));
    if (target->v.rank != 1 || target->v.shape[0] != N)
        return emi_fail(EM_ERR_SHAPE, "%s: class-index targets must have shape [%lld], got %s",
                        fn, (long long)N,
                        emi_shape_str(target->v.shape, target->v.rank, b, sizeof b));
    EMI_TRY(nn_check_range(fn, "class index", target, C));
    return ce_indices(logits, target, out);
}
