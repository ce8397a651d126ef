/*
 * reduce.c — the reductions: sum mean prod max min argmax argmin var logsumexp, over the whole
 * tensor (a 0-d result) or along one dim (kept as size 1 when keepdim).
 *
 * Every one routes to the backend's `reduce` slot with a keepdim-shaped output (0-d for the
 * whole form); without keepdim the result is a view of that output without the reduced dim.
 * Result dtypes follow PyTorch: sum and prod of ints give EM_I64, argmax/argmin EM_I64,
 * max/min keep the dtype; mean, var and logsumexp take floats only.
 *
 * Autodiff: each float result records its rule (src/autodiff/rules/reduce.c) with the
 * normalized dim (-1 for a whole reduction), keepdim and correction.
 */
#include "autodiff/rules/rules.h"

/** Normalizes the dim of a _dim form into *d; a 0-d tensor takes 0 and -1 and reduces as a
 *  whole (*d = -1), like PyTorch. */
static em_status red_dim(const char *fn, int dim, int rank, int *d) {
    if (rank == 0) {
        if (dim == 0 || dim == -1) {
            *d = -1;
            return EM_OK;
        }
        return emi_fail(EM_ERR_ARG, "%s: dim %d out of range for rank 0", fn, dim);
    }
    return emi_norm_dim(fn, dim, rank, d);
}

/** True for the reductions that have no identity (an empty extent is an error). */
static bool red_needs_elements(em_reduce_op op) {
    return op == EM_RED_MAX || op == EM_RED_MIN || op == EM_RED_ARGMAX || op == EM_RED_ARGMIN;
}

/** The result dtype of reduction op on dtype dt. */
static em_dtype red_out_dtype(em_reduce_op op, em_dtype dt) {
    if (op == EM_RED_ARGMAX || op == EM_RED_ARGMIN) return EM_I64;
    if ((op == EM_RED_SUM || op == EM_RED_PROD) && em_dtype_kind(dt) == EM_KIND_INT)
        return EM_I64;
    return dt;
}

/** The common path: checks x, normalizes dim (whole: dim ignored), allocates the keepdim
 *  output, calls the backend's reduce slot, and drops the dim unless keepdim. */
static em_status reduce(const char *fn, em_reduce_op op, const em_tensor *x, bool whole, int dim,
                        bool keepdim, int correction, em_tensor **out) {
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_out(fn, out));
    bool float_only = op == EM_RED_MEAN || op == EM_RED_VAR || op == EM_RED_LOGSUMEXP;
    EMI_TRY(float_only ? emi_check_float(fn, x) : emi_check_numeric(fn, x));
    int rank = x->v.rank, d = -1;
    if (!whole) EMI_TRY(red_dim(fn, dim, rank, &d));
    if (red_needs_elements(op)) {
        char sb[160];
        emi_shape_str(x->v.shape, rank, sb, sizeof sb);
        if (d < 0 && emi_numel(x->v.shape, rank) == 0)
            return emi_fail(EM_ERR_SHAPE, "%s: cannot reduce an empty tensor of shape %s (the "
                            "reduction has no identity)", fn, sb);
        if (d >= 0 && x->v.shape[d] == 0)
            return emi_fail(EM_ERR_SHAPE, "%s: cannot reduce dim %d of size 0 (shape %s; the "
                            "reduction has no identity)", fn, d, sb);
    }
    const em_backend_ops *ops = x->st->ops;
    EMI_TRY(emi_need(fn, ops, ops->reduce != NULL, "reduce"));
    const em_tensor *ins[1] = {x};
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, ins, 1, &ad));

    int64_t shape[EM_MAX_RANK];
    int orank = d < 0 ? 0 : rank;
    for (int i = 0; i < orank; i++) shape[i] = i == d ? 1 : x->v.shape[i];
    em_tensor *o = NULL;
    EMI_TRY(emi_empty(fn, emi_result_device(ins, 1), red_out_dtype(op, x->dtype), shape, orank,
                      &o));
    if (emi_numel(shape, orank) > 0) {
        em_view iv;
        em_tensor *tmp = NULL;
        double params[1] = {(double)correction};
        em_status s = emi_input_view(fn, x, &iv, &tmp);
        if (s == EM_OK) s = ops->reduce(x->st->ctx, op, &o->v, &iv, d, params);
        em_tensor_release(tmp);
        if (s != EM_OK) {
            em_tensor_release(o);
            return s;
        }
    }
    if (d >= 0 && !keepdim) {
        int64_t st[EM_MAX_RANK];
        for (int i = 0, j = 0; i < rank; i++) {
            if (i == d) continue;
            shape[j] = o->v.shape[i];
            st[j++] = o->v.strides[i];
        }
        em_tensor *r = NULL;
        em_status s = emi_view_tensor(o, shape, st, rank - 1, o->v.offset, &r);
        em_tensor_release(o);
        EMI_TRY(s);
        o = r;
    }
    /* argmax / argmin (int results) have no rule */
    emi_rule_reduce_params p = {op, d, keepdim, correction};
    em_status s = emi_ad_end(&ad, emi_rules_reduce[op], ins, 1, o, &p, sizeof p);
    if (s != EM_OK) {
        em_tensor_release(o);
        return s;
    }
    *out = o;
    return EM_OK;
}

/* ---- the public entry points: whole-tensor and _dim forms ---- */

/** Sum of all elements (0-d; ints give EM_I64). */
em_status em_sum(const em_tensor *x, em_tensor **out) {
    return reduce("em_sum", EM_RED_SUM, x, true, 0, false, 0, out);
}
/** Sum along dim. */
em_status em_sum_dim(const em_tensor *x, int dim, bool keepdim, em_tensor **out) {
    return reduce("em_sum_dim", EM_RED_SUM, x, false, dim, keepdim, 0, out);
}
/** Mean of all elements (floats; NaN when empty). */
em_status em_mean(const em_tensor *x, em_tensor **out) {
    return reduce("em_mean", EM_RED_MEAN, x, true, 0, false, 0, out);
}
/** Mean along dim. */
em_status em_mean_dim(const em_tensor *x, int dim, bool keepdim, em_tensor **out) {
    return reduce("em_mean_dim", EM_RED_MEAN, x, false, dim, keepdim, 0, out);
}
/** Product of all elements (0-d; ints give EM_I64; 1 when empty). */
em_status em_prod(const em_tensor *x, em_tensor **out) {
    return reduce("em_prod", EM_RED_PROD, x, true, 0, false, 0, out);
}
/** Product along dim. */
em_status em_prod_dim(const em_tensor *x, int dim, bool keepdim, em_tensor **out) {
    return reduce("em_prod_dim", EM_RED_PROD, x, false, dim, keepdim, 0, out);
}
/** Maximum of all elements (NaN propagates; EM_ERR_SHAPE when empty). */
em_status em_max(const em_tensor *x, em_tensor **out) {
    return reduce("em_max", EM_RED_MAX, x, true, 0, false, 0, out);
}
/** Maximum along dim. */
em_status em_max_dim(const em_tensor *x, int dim, bool keepdim, em_tensor **out) {
    return reduce("em_max_dim", EM_RED_MAX, x, false, dim, keepdim, 0, out);
}
/** Minimum of all elements (NaN propagates; EM_ERR_SHAPE when empty). */
em_status em_min(const em_tensor *x, em_tensor **out) {
    return reduce("em_min", EM_RED_MIN, x, true, 0, false, 0, out);
}
/** Minimum along dim. */
em_status em_min_dim(const em_tensor *x, int dim, bool keepdim, em_tensor **out) {
    return reduce("em_min_dim", EM_RED_MIN, x, false, dim, keepdim, 0, out);
}
/** Flat index (EM_I64) of the first maximum; a NaN counts as the maximum. */
em_status em_argmax(const em_tensor *x, em_tensor **out) {
    return reduce("em_argmax", EM_RED_ARGMAX, x, true, 0, false, 0, out);
}
/** Index of the first maximum along dim. */
em_status em_argmax_dim(const em_tensor *x, int dim, bool keepdim, em_tensor **out) {
    return reduce("em_argmax_dim", EM_RED_ARGMAX, x, false, dim, keepdim, 0, out);
}
/** Flat index (EM_I64) of the first minimum; a NaN counts as the minimum. */
em_status em_argmin(const em_tensor *x, em_tensor **out) {
    return reduce("em_argmin", EM_RED_ARGMIN, x, true, 0, false, 0, out);
}
/** Index of the first minimum along dim. */
em_status em_argmin_dim(const em_tensor *x, int dim, bool keepdim, em_tensor **out) {
    return reduce("em_argmin_dim", EM_RED_ARGMIN, x, false, dim, keepdim, 0, out);
}
/** Variance of all elements: sum of squared deviations / max(n - correction, 0). */
em_status em_var(const em_tensor *x, int correction, em_tensor **out) {
    return reduce("em_var", EM_RED_VAR, x, true, 0, false, correction, out);
}
/** Variance along dim. */
em_status em_var_dim(const em_tensor *x, int dim, int correction, bool keepdim,
                     em_tensor **out) {
    return reduce("em_var_dim", EM_RED_VAR, x, false, dim, keepdim, correction, out);
}
/** log(sum(exp(x))) of all elements, computed stably (-inf when empty). */
em_status em_logsumexp(const em_tensor *x, em_tensor **out) {
    return reduce("em_logsumexp", EM_RED_LOGSUMEXP, x, true, 0, false, 0, out);
}
/** logsumexp along dim. */
em_status em_logsumexp_dim(const em_tensor *x, int dim, bool keepdim, em_tensor **out) {
    return reduce("em_logsumexp_dim", EM_RED_LOGSUMEXP, x, false, dim, keepdim, 0, out);
}
