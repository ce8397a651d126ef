/*
 * softmax.c — the shape-keeping ops along one dim: cumsum, cumprod, cummax, cummin, softmax,
 * log_softmax.
 *
 * Each routes to its backend slot with a dim in [0, rank); a 0-d input (which takes dim 0 or
 * -1, like PyTorch) is handed to the kernel as a one-element 1-d view. Float results record
 * their rule (src/autodiff/rules/reduce.c) with the normalized dim.
 */
#include "autodiff/rules/rules.h"

/** Normalizes dim; a 0-d tensor takes 0 and -1. */
static em_status along_dim(const char *fn, int dim, int rank, int *d) {
    if (rank == 0) {
        if (dim == 0 || dim == -1) {
            *d = 0;
            return EM_OK;
        }
        return emi_fail(EM_ERR_ARG, "%s: dim %d out of range for rank 0", fn, dim);
    }
    return emi_norm_dim(fn, dim, rank, d);
}

/** v itself, or a one-element 1-d view of it when v is 0-d. */
static em_view as_1d(const em_view *v) {
    em_view r = *v;
    if (r.rank == 0) {
        r.rank = 1;
        r.shape[0] = 1;
        r.strides[0] = 1;
    }
    return r;
}

/** The common path: x checked by the caller; allocates an output of x's shape in dtype odt and
 *  calls the cumsum (log < 0) or softmax slot. */
static em_status along(const char *fn, const em_tensor *x, int dim, em_dtype odt, int log_,
                       em_tensor **out) {
    int d = 0;
    EMI_TRY(along_dim(fn, dim, x->v.rank, &d));
    const em_backend_ops *ops = x->st->ops;
    if (log_ < 0)
        EMI_TRY(emi_need(fn, ops, ops->cumsum != NULL, "cumsum"));
    else
        EMI_TRY(emi_need(fn, ops, ops->softmax != NULL, "softmax"));
    const em_tensor *ins[1] = {x};
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, ins, 1, &ad));
    em_tensor *o = NULL;
    EMI_TRY(emi_empty(fn, emi_result_device(ins, 1), odt, x->v.shape, x->v.rank, &o));
    if (emi_numel(x->v.shape, x->v.rank) > 0) {
        em_view iv, iv1, ov1;
        em_tensor *tmp = NULL;
        em_status s = emi_input_view(fn, x, &iv, &tmp);
        if (s == EM_OK) {
            iv1 = as_1d(&iv);
            ov1 = as_1d(&o->v);
            if (log_ < 0)
                s = ops->cumsum(x->st->ctx, &ov1, &iv1, d);
            else
                s = ops->softmax(x->st->ctx, &ov1, &iv1, d, log_ > 0);
        }
        em_tensor_release(tmp);
        if (s != EM_OK) {
            em_tensor_release(o);
            return s;
        }
    }
    const emi_ad_rule *rule = log_ < 0 ? &emi_rule_cumsum
                              : log_ > 0 ? &emi_rule_log_softmax : &emi_rule_softmax;
    em_status s = emi_ad_end(&ad, rule, ins, 1, o, &d, sizeof d);
    if (s != EM_OK) {
        em_tensor_release(o);
        return s;
    }
    *out = o;
    return EM_OK;
}

/** Running sum along dim (same shape; ints give EM_I64, bool is EM_ERR_DTYPE). */
em_status em_cumsum(const em_tensor *x, int dim, em_tensor **out) {
    const char *fn = "em_cumsum";
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_numeric(fn, x));
    em_dtype odt = em_dtype_kind(x->dtype) == EM_KIND_INT ? EM_I64 : x->dtype;
    return along(fn, x, dim, odt, -1, out);
}

/** exp(x) / sum(exp(x)) along dim, computed stably (floats only). */
em_status em_softmax(const em_tensor *x, int dim, em_tensor **out) {
    const char *fn = "em_softmax";
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_float(fn, x));
    return along(fn, x, dim, x->dtype, 0, out);
}

/** x - logsumexp(x) along dim, computed stably (floats only). */
em_status em_log_softmax(const em_tensor *x, int dim, em_tensor **out) {
    const char *fn = "em_log_softmax";
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_float(fn, x));
    return along(fn, x, dim, x->dtype, 1, out);
}

/* new[j] = combine(old[j - k], old[j]) for j >= k along d, old[j] for j < k: one step of the
 * scan (Hillis-Steele) that cum_composed runs. *v (and *ix for max / min) are replaced. */
static em_status cum_step(em_cum_op op, int d, int64_t n, int64_t k, em_tensor **v,
                          em_tensor **ix) {
    em_tensor *head = NULL, *a = NULL, *b = NULL, *c = NULL, *ge = NULL, *nan = NULL,
              *keep = NULL, *ih = NULL, *ia = NULL, *ib = NULL, *ic = NULL, *nv = NULL,
              *ni = NULL;
    em_status s = em_slice(*v, d, 0, k, 1, &head);
    if (s == EM_OK) s = em_slice(*v, d, 0, n - k, 1, &a);
    if (s == EM_OK) s = em_slice(*v, d, k, n, 1, &b);
    if (s == EM_OK && op == EM_CUM_PROD) s = em_mul(b, a, &c);
    if (s == EM_OK && op != EM_CUM_PROD) {
        /* the later element b wins when b >= a (<= for min) or b is NaN */
        s = op == EM_CUM_MAX ? em_ge(b, a, &ge) : em_le(b, a, &ge);
        if (s == EM_OK) s = em_isnan(b, &nan);
        if (s == EM_OK) s = em_logical_or(ge, nan, &keep);
        if (s == EM_OK) s = em_where(keep, b, a, &c);
        if (s == EM_OK) s = em_slice(*ix, d, 0, k, 1, &ih);
        if (s == EM_OK) s = em_slice(*ix, d, 0, n - k, 1, &ia);
        if (s == EM_OK) s = em_slice(*ix, d, k, n, 1, &ib);
        if (s == EM_OK) s = em_where(keep, ib, ia, &ic);
        const em_tensor *parts[2] = {ih, ic};
        if (s == EM_OK) s = em_cat(parts, 2, d, &ni);
    }
    const em_tensor *parts[2] = {head, c};
    if (s == EM_OK) s = em_cat(parts, 2, d, &nv);
    if (s == EM_OK) {
        em_tensor_release(*v);
        *v = nv;
        nv = NULL;
        if (ni) {
            em_tensor_release(*ix);
            *ix = ni;
            ni = NULL;
        }
    }
    em_tensor *all[] = {head, a, b, c, ge, nan, keep, ih, ia, ib, ic, nv, ni};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) em_tensor_release(all[i]);
    return s;
}

/** cumprod / cummax / cummin composed from other ops, for a backend without the cumulative
 *  slot: log2(n) steps of a parallel scan along d over x's untracked alias (products in x's
 *  dtype, or i64 for ints; bool compared as u8). The same values and indices as the kernel
 *  (the combine is associative, NaN rule included); products may round differently. */
static em_status cum_composed(const em_tensor *x, int d, em_cum_op op, em_dtype vdt,
                              em_tensor **values, em_tensor **indices) {
    em_tensor *xa = NULL, *v = NULL, *ix = NULL, *ar = NULL, *arv = NULL;
    em_status s = EM_OK;
    const em_tensor *xs = x;
    if (x->dev.autodiff) {
        s = em_tensor_detach(x, &xa);
        xs = xa;
    }
    const bool is_bool = x->dtype == EM_BOOL;
    int rank = xs ? xs->v.rank : 0;
    int64_t one[1] = {1};
    if (s == EM_OK && rank == 0) s = em_reshape(xs, one, 1, &v); /* 0-d: one element */
    else if (s == EM_OK) s = em_contiguous(xs, &v);
    if (s == EM_OK && (is_bool || v->dtype != vdt)) {
        em_tensor *c = NULL;
        s = em_cast(v, is_bool ? EM_U8 : vdt, &c);
        em_tensor_release(v);
        v = c;
    }
    int64_t n = s == EM_OK ? v->v.shape[d] : 0;
    if (s == EM_OK && op != EM_CUM_PROD) {
        int64_t shp[EM_MAX_RANK];
        for (int i = 0; i < v->v.rank; i++) shp[i] = i == d ? n : 1;
        s = em_arange(0, (double)n, 1, EM_I64, v->dev, &ar);
        if (s == EM_OK) s = em_reshape(ar, shp, v->v.rank, &arv);
        if (s == EM_OK) {
            em_tensor *e = NULL;
            s = em_expand(arv, v->v.shape, v->v.rank, &e);
            if (s == EM_OK) s = em_contiguous(e, &ix);
            em_tensor_release(e);
        }
    }
    for (int64_t k = 1; s == EM_OK && k < n; k *= 2) s = cum_step(op, d, n, k, &v, &ix);
    if (s == EM_OK && (is_bool || rank == 0)) {
        em_tensor *c = NULL;
        if (is_bool) s = em_cast(v, EM_BOOL, &c);
        else s = em_reshape(v, one, 0, &c);
        if (s == EM_OK) {
            em_tensor_release(v);
            v = c;
        }
        if (s == EM_OK && ix && rank == 0) {
            s = em_reshape(ix, one, 0, &c);
            if (s == EM_OK) {
                em_tensor_release(ix);
                ix = c;
            }
        }
    }
    em_tensor_release(xa);
    em_tensor_release(ar);
    em_tensor_release(arv);
    if (s != EM_OK) {
        em_tensor_release(v);
        em_tensor_release(ix);
        return s;
    }
    *values = v;
    if (indices) *indices = ix;
    else em_tensor_release(ix);
    return EM_OK;
}

/** cumprod / cummax / cummin after the caller's checks of x: the outputs wanted (values of
 *  dtype vdt, indices EM_I64 for max/min) through the cumulative slot, or composed
 *  (cum_composed) when the backend leaves it NULL. *values and *indices may be NULL (not
 *  asked for); the indices are computed for max/min whatever is asked. */
static em_status cumulative(const char *fn, const em_tensor *x, int d, em_cum_op op,
                            em_dtype vdt, em_tensor **values, em_tensor **indices) {
    const em_backend_ops *ops = x->st->ops;
    if (!ops->cumulative) return cum_composed(x, d, op, vdt, values, indices);
    em_tensor *vals = NULL, *idx = NULL, *xt = NULL;
    em_status s = emi_empty(fn, x->dev, vdt, x->v.shape, x->v.rank, &vals);
    if (s == EM_OK && op != EM_CUM_PROD)
        s = emi_empty(fn, x->dev, EM_I64, x->v.shape, x->v.rank, &idx);
    if (s == EM_OK && emi_numel(x->v.shape, x->v.rank) > 0) {
        em_view iv, iv1, vv1, kv1;
        s = emi_input_view(fn, x, &iv, &xt);
        if (s == EM_OK) {
            iv1 = as_1d(&iv);
            vv1 = as_1d(&vals->v);
            if (idx) kv1 = as_1d(&idx->v);
            s = ops->cumulative(x->st->ctx, op, &vv1, idx ? &kv1 : NULL, &iv1, d);
        }
        em_tensor_release(xt);
    }
    if (s != EM_OK) {
        em_tensor_release(vals);
        em_tensor_release(idx);
        return s;
    }
    *values = vals;
    if (indices) *indices = idx;
    else em_tensor_release(idx);
    return EM_OK;
}

/** Running product along dim (ints give EM_I64, bool is EM_ERR_DTYPE). */
em_status em_cumprod(const em_tensor *x, int dim, em_tensor **out) {
    const char *fn = "em_cumprod";
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_numeric(fn, x));
    int d = 0;
    EMI_TRY(along_dim(fn, dim, x->v.rank, &d));
    const em_tensor *ins[1] = {x};
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, ins, 1, &ad));
    em_dtype odt = em_dtype_kind(x->dtype) == EM_KIND_INT ? EM_I64 : x->dtype;
    em_tensor *o = NULL;
    EMI_TRY(cumulative(fn, x, d, EM_CUM_PROD, odt, &o, NULL));
    em_status s = emi_ad_end(&ad, &emi_rule_cumprod, ins, 1, o, &d, sizeof d);
    if (s != EM_OK) {
        em_tensor_release(o);
        return s;
    }
    *out = o;
    return EM_OK;
}

/** cummax / cummin: values recorded as a gather of x by the indices (the gradient goes to
 *  the elements the values came from), the indices untracked. */
static em_status cum_extreme(const char *fn, const em_tensor *x, int dim, em_cum_op op,
                             em_tensor **values, em_tensor **indices) {
    EMI_TRY(emi_check_tensor(fn, "x", x));
    if (values == NULL && indices == NULL)
        return emi_fail(EM_ERR_ARG, "%s: values and indices are both NULL", fn);
    EMI_TRY(emi_check_not_quantized(fn, x));
    int d = 0;
    EMI_TRY(along_dim(fn, dim, x->v.rank, &d));
    const em_tensor *ins1[1] = {x};
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, ins1, 1, &ad));
    em_tensor *vals = NULL, *idx = NULL;
    EMI_TRY(cumulative(fn, x, d, op, x->dtype, &vals, &idx));
    const em_tensor *ins[2] = {x, idx};
    em_status s = emi_ad_end(&ad, op == EM_CUM_MAX ? &emi_rule_cummax : &emi_rule_cummin, ins,
                             2, vals, &d, sizeof d);
    if (s == EM_OK) s = emi_ad_end(&ad, NULL, ins1, 1, idx, NULL, 0);
    if (s != EM_OK) {
        em_tensor_release(vals);
        em_tensor_release(idx);
        return s;
    }
    if (values) *values = vals;
    else em_tensor_release(vals);
    if (indices) *indices = idx;
    else em_tensor_release(idx);
    return EM_OK;
}

/** Running maximum along dim with its indices (EM_I64), as torch.cummax. */
em_status em_cummax(const em_tensor *x, int dim, em_tensor **values, em_tensor **indices) {
    return cum_extreme("em_cummax", x, dim, EM_CUM_MAX, values, indices);
}

/** Running minimum along dim with its indices (EM_I64), as torch.cummin. */
em_status em_cummin(const em_tensor *x, int dim, em_tensor **values, em_tensor **indices) {
    return cum_extreme("em_cummin", x, dim, EM_CUM_MIN, values, indices);
}
