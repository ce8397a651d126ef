/*
 * index.c — the indexing ops: gather, scatter_add, index_select, one_hot, sort, argsort, topk.
 * The core checks shapes and reads every index tensor to the host to range-check it before
 * the backend's kernel runs, so kernels never see a bad index. 0-d tensors reach kernels as
 * 1-d views of one element.
 *
 * Autodiff: gather, scatter_add and index_select record themselves with the index tensor as
 * an input of the node (an untracked constant, saved for backward); sort and topk record
 * their values output as a gather of x by the indices they found (computed for that even
 * when the caller does not want them); one_hot is composed of public ops, which record;
 * integer results (argsort, indices) only get the device and checkpointing mark.
 */
#include <stdlib.h>
#include <string.h>

#include "layout_util.h"

/** The size of dim d of v, where a 0-d tensor has one element along its only "dim". */
static int64_t lay_size(const em_view *v, int d) { return v->rank == 0 ? 1 : v->shape[d]; }

/** Checks that index (EM_I64 / EM_I32) is on x's device and has x's rank. */
static em_status lay_check_index_arg(const char *fn, const em_tensor *x, const em_tensor *index) {
    EMI_TRY(emi_check_index(fn, index));
    EMI_TRY(emi_check_same_device(fn, x, index));
    char a[128], b[128];
    if (index->v.rank != x->v.rank)
        return emi_fail(EM_ERR_SHAPE, "%s: index %s and x %s differ in rank", fn,
                        emi_shape_str(index->v.shape, index->v.rank, a, sizeof a),
                        emi_shape_str(x->v.shape, x->v.rank, b, sizeof b));
    return EM_OK;
}

/** Checks index.size(k) <= t.size(k) for every k (except skip, when skip >= 0). */
static em_status lay_check_not_larger(const char *fn, const em_tensor *index, const em_tensor *t,
                                      const char *what, int skip) {
    char a[128], b[128];
    for (int k = 0; k < index->v.rank; k++) {
        if (k != skip && index->v.shape[k] > t->v.shape[k])
            return emi_fail(EM_ERR_SHAPE, "%s: index %s is larger than %s %s at dim %d", fn,
                            emi_shape_str(index->v.shape, index->v.rank, a, sizeof a), what,
                            emi_shape_str(t->v.shape, t->v.rank, b, sizeof b), k);
    }
    return EM_OK;
}

/* em_gather: out[...] = x[... index[...] at dim ...] (torch.gather); out has index's shape and
 * x's dtype. index.size(k) <= x.size(k) for k != dim. */
em_status em_gather(const em_tensor *x, int dim, const em_tensor *index, em_tensor **out) {
    static const char fn[] = "em_gather";
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_tensor(fn, "index", index));
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_not_quantized(fn, x));
    EMI_TRY(lay_check_index_arg(fn, x, index));
    int d = 0;
    EMI_TRY(lay_dim(fn, dim, x->v.rank, &d));
    EMI_TRY(lay_check_not_larger(fn, index, x, "x", d));
    EMI_TRY(lay_check_indices(fn, index, lay_size(&x->v, d), d));
    const em_backend_ops *ops = x->st->ops;
    EMI_TRY(emi_need(fn, ops, ops->gather != NULL, "gather"));
    const em_tensor *ins[2] = {x, index};
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, ins, 2, &ad));
    em_tensor *res = NULL;
    EMI_TRY(emi_empty(fn, x->dev, x->dtype, index->v.shape, index->v.rank, &res));
    if (emi_numel(index->v.shape, index->v.rank) == 0)
        return lay_ad_finish(&ad, &emi_rule_gather, ins, 2, res, &d, sizeof d, out);
    em_view xv, iv, ov = res->v;
    em_tensor *xt = NULL, *it = NULL;
    em_status s = emi_input_view(fn, x, &xv, &xt);
    if (s == EM_OK) s = emi_input_view(fn, index, &iv, &it);
    if (s == EM_OK) {
        lay_view_1d(&xv);
        lay_view_1d(&iv);
        lay_view_1d(&ov);
        s = ops->gather(x->st->ctx, &ov, &xv, d, &iv);
    }
    em_tensor_release(xt);
    em_tensor_release(it);
    if (s != EM_OK) {
        em_tensor_release(res);
        return s;
    }
    return lay_ad_finish(&ad, &emi_rule_gather, ins, 2, res, &d, sizeof d, out);
}

/* em_scatter_add: a copy of x with src[...] added at x[... index[...] at dim ...]
 * (torch.scatter_add). index.size(k) <= src.size(k) for all k and <= x.size(k) for k != dim;
 * numeric dtypes. */
/* fresh: x is a tensor of zeros that the caller made for this call and owns alone (the
 * backward rules' scatter_grad): the kernel adds into it instead of into a copy. */
static em_status scatter_add_impl(const char *fn, const em_tensor *x, int dim,
                                  const em_tensor *index, const em_tensor *src, bool fresh,
                                  em_tensor **out) {
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_tensor(fn, "index", index));
    EMI_TRY(emi_check_tensor(fn, "src", src));
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_numeric(fn, x));
    EMI_TRY(emi_check_same_device(fn, x, src));
    EMI_TRY(emi_check_same_dtype(fn, x, src));
    EMI_TRY(lay_check_index_arg(fn, x, index));
    char a[128], b[128];
    if (src->v.rank != x->v.rank)
        return emi_fail(EM_ERR_SHAPE, "%s: src %s and x %s differ in rank", fn,
                        emi_shape_str(src->v.shape, src->v.rank, a, sizeof a),
                        emi_shape_str(x->v.shape, x->v.rank, b, sizeof b));
    int d = 0;
    EMI_TRY(lay_dim(fn, dim, x->v.rank, &d));
    EMI_TRY(lay_check_not_larger(fn, index, x, "x", d));
    EMI_TRY(lay_check_not_larger(fn, index, src, "src", -1));
    EMI_TRY(lay_check_indices(fn, index, lay_size(&x->v, d), d));
    const em_backend_ops *ops = x->st->ops;
    EMI_TRY(emi_need(fn, ops, ops->scatter_add != NULL, "scatter_add"));
    const em_tensor *ins[3] = {x, index, src};
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, ins, 3, &ad));
    em_tensor *res = NULL, *alias = NULL;
    const em_tensor *xs = NULL;
    em_status s;
    if (fresh) {
        em_tensor_retain((em_tensor *)x);
        res = (em_tensor *)x;
    } else {
        EMI_TRY(lay_ad_inner(x, &xs, &alias));
        s = em_clone(xs, &res);
        em_tensor_release(alias);
        if (s != EM_OK) return s;
    }
    if (emi_numel(index->v.shape, index->v.rank) == 0)
        return lay_ad_finish(&ad, &emi_rule_scatter_add, ins, 3, res, &d, sizeof d, out);
    em_view iv, sv, ov = res->v;
    em_tensor *st = NULL, *it = NULL;
    s = emi_input_view(fn, src, &sv, &st);
    if (s == EM_OK) s = emi_input_view(fn, index, &iv, &it);
    if (s == EM_OK) {
        /* The kernel reads src over index's extent only. */
        for (int k = 0; k < sv.rank; k++) sv.shape[k] = iv.shape[k];
        lay_view_1d(&sv);
        lay_view_1d(&iv);
        lay_view_1d(&ov);
        s = ops->scatter_add(x->st->ctx, &ov, d, &iv, &sv);
    }
    em_tensor_release(st);
    em_tensor_release(it);
    if (s != EM_OK) {
        em_tensor_release(res);
        return s;
    }
    return lay_ad_finish(&ad, &emi_rule_scatter_add, ins, 3, res, &d, sizeof d, out);
}

em_status em_scatter_add(const em_tensor *x, int dim, const em_tensor *index,
                         const em_tensor *src, em_tensor **out) {
    return scatter_add_impl("em_scatter_add", x, dim, index, src, false, out);
}

em_status emi_scatter_add_zeros(const int64_t *shape, int rank, int dim, const em_tensor *index,
                                const em_tensor *src, em_tensor **out) {
    static const char fn[] = "emi_scatter_add_zeros";
    EMI_TRY(emi_check_tensor(fn, "index", index));
    EMI_TRY(emi_check_tensor(fn, "src", src));
    EMI_TRY(emi_check_out(fn, out));
    if (emi_ad_tracked(index) || emi_ad_tracked(src))
        return emi_fail(EM_ERR_UNSUPPORTED, "%s: tracked inputs (no second derivatives)", fn);
    em_tensor *z = NULL;
    EMI_TRY(em_zeros(shape, rank, src->dtype, em_tensor_device(src), &z));
    em_status s = scatter_add_impl(fn, z, dim, index, src, true, out);
    em_tensor_release(z);
    return s;
}

/* em_index_select: the entries of x at the positions of a 1-d (or 0-d) index along dim; the
 * result has x's shape with dim resized to the index's length. */
em_status em_index_select(const em_tensor *x, int dim, const em_tensor *index,
                          em_tensor **out) {
    static const char fn[] = "em_index_select";
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_tensor(fn, "index", index));
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_not_quantized(fn, x));
    EMI_TRY(emi_check_index(fn, index));
    EMI_TRY(emi_check_same_device(fn, x, index));
    char a[128];
    if (index->v.rank > 1)
        return emi_fail(EM_ERR_SHAPE, "%s: index must be 1-d, got %s", fn,
                        emi_shape_str(index->v.shape, index->v.rank, a, sizeof a));
    int d = 0, r = x->v.rank;
    EMI_TRY(lay_dim(fn, dim, r, &d));
    int64_t n = emi_numel(index->v.shape, index->v.rank);
    if (r == 0 && n != 1)
        return emi_fail(EM_ERR_SHAPE, "%s: a 0-d x takes one index, got %lld", fn,
                        (long long)n);
    EMI_TRY(lay_check_indices(fn, index, lay_size(&x->v, d), d));
    const em_backend_ops *ops = x->st->ops;
    EMI_TRY(emi_need(fn, ops, ops->index_select != NULL, "index_select"));
    int64_t shape[EM_MAX_RANK];
    memcpy(shape, x->v.shape, sizeof shape);
    if (r > 0) shape[d] = n;
    int64_t numel = 0;
    EMI_TRY(emi_check_shape(fn, shape, r, &numel));
    const em_tensor *ins[2] = {x, index};
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, ins, 2, &ad));
    em_tensor *res = NULL;
    EMI_TRY(emi_empty(fn, x->dev, x->dtype, shape, r, &res));
    if (numel == 0)
        return lay_ad_finish(&ad, &emi_rule_index_select, ins, 2, res, &d, sizeof d, out);
    em_view xv, iv, ov = res->v;
    em_tensor *xt = NULL, *it = NULL;
    em_status s = emi_input_view(fn, x, &xv, &xt);
    if (s == EM_OK) s = emi_input_view(fn, index, &iv, &it);
    if (s == EM_OK) {
        lay_view_1d(&xv);
        lay_view_1d(&iv);
        lay_view_1d(&ov);
        s = ops->index_select(x->st->ctx, &ov, &xv, d, &iv);
    }
    em_tensor_release(xt);
    em_tensor_release(it);
    if (s != EM_OK) {
        em_tensor_release(res);
        return s;
    }
    return lay_ad_finish(&ad, &emi_rule_index_select, ins, 2, res, &d, sizeof d, out);
}

/* em_one_hot: index (EM_I64 / EM_I32) encoded along a new last dim of num_classes entries of
 * dtype dt, composed as (index[..., None] == arange(num_classes)) cast to dt. Values outside
 * [0, num_classes) and a negative num_classes are EM_ERR_ARG. */
em_status em_one_hot(const em_tensor *index, int64_t num_classes, em_dtype dt,
                     em_tensor **out) {
    static const char fn[] = "em_one_hot";
    EMI_TRY(emi_check_tensor(fn, "index", index));
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_index(fn, index));
    if ((int)dt < 0 || (int)dt >= EM_DTYPE_COUNT)
        return emi_fail(EM_ERR_DTYPE, "%s: invalid dtype %d", fn, (int)dt);
    if (em_dtype_kind(dt) == EM_KIND_QUANTIZED)
        return emi_fail(EM_ERR_DTYPE, "%s: cannot produce a quantized dtype (%s)", fn,
                        em_dtype_name(dt));
    if (num_classes < 0)
        return emi_fail(EM_ERR_ARG, "%s: negative num_classes %lld", fn, (long long)num_classes);
    int r = index->v.rank;
    if (r + 1 > EM_MAX_RANK)
        return emi_fail(EM_ERR_SHAPE, "%s: rank %d exceeds the maximum of %d", fn, r + 1,
                        EM_MAX_RANK);
    int64_t shape[EM_MAX_RANK], numel = 0;
    memcpy(shape, index->v.shape, sizeof(int64_t) * r);
    shape[r] = num_classes;
    EMI_TRY(emi_check_shape(fn, shape, r + 1, &numel));
    EMI_TRY(lay_check_indices(fn, index, num_classes, -1));
    if (numel == 0) {
        /* like the composed result: a constant of the graph on an autodiff device */
        emi_ad_op ad;
        EMI_TRY(emi_ad_begin(fn, &index, 1, &ad));
        em_tensor *res = NULL;
        EMI_TRY(emi_empty(fn, index->dev, dt, shape, r + 1, &res));
        return lay_ad_finish(&ad, NULL, &index, 1, res, NULL, 0, out);
    }
    em_tensor *u = NULL, *ar = NULL, *eq = NULL;
    em_status s = em_unsqueeze(index, -1, &u);
    if (s == EM_OK) s = em_arange(0.0, (double)num_classes, 1.0, index->dtype, index->dev, &ar);
    if (s == EM_OK && index->dev.backend == EM_BACKEND_CAPTURE && num_classes > 0) {
        /* the values are not known yet: an index_select of the classes by the indices (its
         * result dropped) makes the graph's run range-check them, as this call does now */
        em_tensor *flat = NULL, *picked = NULL;
        const int64_t n = emi_numel(index->v.shape, index->v.rank);
        s = em_reshape(index, &n, 1, &flat);
        if (s == EM_OK) s = em_index_select(ar, 0, flat, &picked);
        em_tensor_release(flat);
        em_tensor_release(picked);
    }
    if (s == EM_OK) s = em_eq(u, ar, &eq);
    if (s == EM_OK) s = em_cast(eq, dt, out);
    em_tensor_release(u);
    em_tensor_release(ar);
    em_tensor_release(eq);
    return s;
}

/** Sort after the caller's checks of x, d and the outputs: allocates the wanted outputs
 *  (values of x's dtype, indices EM_I64) and runs the backend's stable sort. */
static em_status lay_sort(const char *fn, const em_tensor *x, int d, bool descending,
                          em_tensor **values, em_tensor **indices) {
    const em_backend_ops *ops = x->st->ops;
    EMI_TRY(emi_need(fn, ops, ops->sort != NULL, "sort"));
    em_tensor *vals = NULL, *idx = NULL, *xt = NULL;
    em_status s = EM_OK;
    if (values) s = emi_empty(fn, x->dev, x->dtype, x->v.shape, x->v.rank, &vals);
    if (s == EM_OK && indices) s = emi_empty(fn, x->dev, EM_I64, x->v.shape, x->v.rank, &idx);
    if (s == EM_OK && emi_numel(x->v.shape, x->v.rank) > 0) {
        em_view xv, vv, iv;
        s = emi_input_view(fn, x, &xv, &xt);
        if (s == EM_OK) {
            lay_view_1d(&xv);
            if (vals) {
                vv = vals->v;
                lay_view_1d(&vv);
            }
            if (idx) {
                iv = idx->v;
                lay_view_1d(&iv);
            }
            s = ops->sort(x->st->ctx, vals ? &vv : NULL, idx ? &iv : NULL, &xv, d, descending);
        }
        em_tensor_release(xt);
    }
    if (s != EM_OK) {
        em_tensor_release(vals);
        em_tensor_release(idx);
        return s;
    }
    if (values) *values = vals;
    if (indices) *indices = idx;
    return EM_OK;
}

/** The checks common to sort / argsort / topk: x, at least one output, dtype, dim. */
static em_status lay_sort_args(const char *fn, const em_tensor *x, int dim, const void *values,
                               const void *indices, int *d) {
    EMI_TRY(emi_check_tensor(fn, "x", x));
    if (values == NULL && indices == NULL)
        return emi_fail(EM_ERR_ARG, "%s: values and indices are both NULL", fn);
    EMI_TRY(emi_check_not_quantized(fn, x));
    return lay_dim(fn, dim, x->v.rank, d);
}

/** Records the results of sort / topk: vals (may be NULL) as a gather of x by idx with
 *  `rule`, idx (an int result, may be NULL) with no rule. Hands them to *values / *indices
 *  (idx is released when indices is NULL); on failure releases both. */
static em_status lay_sort_finish(const emi_ad_op *ad, const emi_ad_rule *rule,
                                 const em_tensor *x, int d, em_tensor *vals, em_tensor *idx,
                                 em_tensor **values, em_tensor **indices) {
    em_status s = EM_OK;
    const em_tensor *ins[2] = {x, idx};
    if (vals) s = emi_ad_end(ad, rule, ins, 2, vals, &d, sizeof d);
    if (s == EM_OK && idx && indices) s = emi_ad_end(ad, NULL, &x, 1, idx, NULL, 0);
    if (s != EM_OK) {
        em_tensor_release(vals);
        em_tensor_release(idx);
        return s;
    }
    if (values) *values = vals;
    if (indices) *indices = idx;
    else em_tensor_release(idx);
    return EM_OK;
}

/* em_sort: stable sort along dim; NaN sorts last ascending, first descending. values (x's
 * dtype) or indices (EM_I64) may be NULL, not both. */
em_status em_sort(const em_tensor *x, int dim, bool descending, em_tensor **values,
                  em_tensor **indices) {
    static const char fn[] = "em_sort";
    int d = 0;
    EMI_TRY(lay_sort_args(fn, x, dim, values, indices, &d));
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, &x, 1, &ad));
    /* recorded values need the indices for backward */
    bool want_idx = indices || (values && ad.tracked);
    em_tensor *vals = NULL, *idx = NULL;
    EMI_TRY(lay_sort(fn, x, d, descending, values ? &vals : NULL, want_idx ? &idx : NULL));
    return lay_sort_finish(&ad, &emi_rule_sort, x, d, vals, idx, values, indices);
}

/* em_argsort: the EM_I64 indices that sort x along dim (stable). */
em_status em_argsort(const em_tensor *x, int dim, bool descending, em_tensor **out) {
    static const char fn[] = "em_argsort";
    int d = 0;
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(lay_sort_args(fn, x, dim, NULL, out, &d));
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, &x, 1, &ad));
    em_tensor *idx = NULL;
    EMI_TRY(lay_sort(fn, x, d, descending, NULL, &idx));
    return lay_ad_finish(&ad, NULL, &x, 1, idx, NULL, 0, out);
}

/** The first k entries of a sorted result along d, as a contiguous tensor. Consumes t. */
static em_status lay_head(em_tensor *t, int d, int64_t k, em_tensor **out) {
    if (t->v.rank == 0) {
        *out = t;
        return EM_OK;
    }
    em_tensor *v = NULL;
    em_status s = em_slice(t, d, 0, k, 1, &v);
    em_tensor_release(t);
    if (s != EM_OK) return s;
    s = em_contiguous(v, out);
    em_tensor_release(v);
    return s;
}

/* em_topk: the k largest (largest) or smallest entries along dim, sorted (via a stable sort);
 * NaN counts as the largest. values or indices may be NULL, not both. k outside
 * [0, size] is EM_ERR_ARG (a 0-d x takes k = 1). */
em_status em_topk(const em_tensor *x, int64_t k, int dim, bool largest, em_tensor **values,
                  em_tensor **indices) {
    static const char fn[] = "em_topk";
    int d = 0;
    EMI_TRY(lay_sort_args(fn, x, dim, values, indices, &d));
    int64_t size = lay_size(&x->v, d);
    if (k < 0 || k > size || (x->v.rank == 0 && k != 1))
        return emi_fail(EM_ERR_ARG, "%s: k = %lld is out of range for dim %d of size %lld", fn,
                        (long long)k, dim, (long long)size);
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, &x, 1, &ad));
    /* recorded values need the indices for backward */
    bool want_idx = indices || (values && ad.tracked);
    /* computed from the inner alias: the slices and copies inside record nothing */
    const em_tensor *xs = NULL;
    em_tensor *alias = NULL;
    EMI_TRY(lay_ad_inner(x, &xs, &alias));
    em_tensor *sv = NULL, *si = NULL, *rv = NULL, *ri = NULL;
    em_status s = lay_sort(fn, xs, d, largest, values ? &sv : NULL, want_idx ? &si : NULL);
    em_tensor_release(alias);
    if (s != EM_OK) return s;
    if (sv) s = lay_head(sv, d, k, &rv);
    if (si) {
        if (s == EM_OK) s = lay_head(si, d, k, &ri);
        else em_tensor_release(si);
    }
    if (s != EM_OK) {
        em_tensor_release(rv);
        em_tensor_release(ri);
        return s;
    }
    return lay_sort_finish(&ad, &emi_rule_topk, x, d, rv, ri, values, indices);
}
