/* reduce.c — backward rules of the reductions (sum mean prod max min var logsumexp, whole and
 * along a dim) and of the shape-keeping ops along a dim (cumsum, softmax, log_softmax).
 * Gradients follow PyTorch's formulas. */
#include "autodiff/rules/rules.h"

/* Evaluates a status expression into `s` and jumps to `done` when it fails. */
#define R_TRY(expr)                                                                          \
    do {                                                                                     \
        s = (expr);                                                                          \
        if (s != EM_OK) goto done;                                                           \
    } while (0)

/* ---- reductions ---- */

static const emi_rule_reduce_params *red_p(const emi_ad_bw *bw) { return bw->params; }

/* Recomputes a reduction with the public op (whole form when dim < 0). */
static em_status red_forward(const void *params, em_tensor *const *in, int nin,
                             em_tensor **out) {
    (void)nin;
    const emi_rule_reduce_params *p = params;
    bool whole = p->dim < 0;
    int d = p->dim;
    bool k = p->keepdim;
    switch (p->op) {
    case EM_RED_SUM: return whole ? em_sum(in[0], out) : em_sum_dim(in[0], d, k, out);
    case EM_RED_MEAN: return whole ? em_mean(in[0], out) : em_mean_dim(in[0], d, k, out);
    case EM_RED_PROD: return whole ? em_prod(in[0], out) : em_prod_dim(in[0], d, k, out);
    case EM_RED_MAX: return whole ? em_max(in[0], out) : em_max_dim(in[0], d, k, out);
    case EM_RED_MIN: return whole ? em_min(in[0], out) : em_min_dim(in[0], d, k, out);
    case EM_RED_VAR:
        return whole ? em_var(in[0], p->correction, out)
                     : em_var_dim(in[0], d, p->correction, k, out);
    case EM_RED_LOGSUMEXP:
        return whole ? em_logsumexp(in[0], out) : em_logsumexp_dim(in[0], d, k, out);
    default: break;
    }
    return emi_fail(EM_ERR_STATE, "reduce forward: op %d has no recompute", (int)p->op);
}

/* t in the keepdim shape: unsqueezed at the reduced dim when the op removed it (a new
 * reference). A whole reduction's 0-d result broadcasts as it is. */
static em_status red_keepdim(const emi_rule_reduce_params *p, const em_tensor *t,
                             em_tensor **out) {
    if (p->dim >= 0 && !p->keepdim) return em_unsqueeze(t, p->dim, out);
    em_tensor_retain((em_tensor *)t);
    *out = (em_tensor *)t;
    return EM_OK;
}

/* The reduction's keepdim form of x: x reduced over the op's dim (kept), or as a whole. */
static em_status red_again(const emi_rule_reduce_params *p, em_reduce_op op, const em_tensor *x,
                           em_tensor **out) {
    bool whole = p->dim < 0;
    switch (op) {
    case EM_RED_SUM: return whole ? em_sum(x, out) : em_sum_dim(x, p->dim, true, out);
    case EM_RED_MEAN: return whole ? em_mean(x, out) : em_mean_dim(x, p->dim, true, out);
    case EM_RED_PROD: return whole ? em_prod(x, out) : em_prod_dim(x, p->dim, true, out);
    default: break;
    }
    return emi_fail(EM_ERR_STATE, "reduce backward: no keepdim form of op %d", (int)op);
}

/* The number of elements each output element reduced. */
static int64_t red_count(const emi_ad_bw *bw) {
    int rank;
    const int64_t *shape = emi_bw_in_shape(bw, 0, &rank);
    int d = red_p(bw)->dim;
    return d < 0 ? emi_numel(shape, rank) : shape[d];
}

/* gin[0] = t broadcast to the input's shape (t has the keepdim shape; consumed). */
static em_status red_expand(emi_ad_bw *bw, em_tensor *t) {
    int rank;
    const int64_t *shape = emi_bw_in_shape(bw, 0, &rank);
    em_status s = em_expand(t, shape, rank, &bw->gin[0]);
    em_tensor_release(t);
    return s;
}

/* sum: the gradient broadcast back over the reduced elements. */
static em_status sum_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *gk;
    EMI_TRY(red_keepdim(red_p(bw), bw->grad, &gk));
    return red_expand(bw, gk);
}

/* g without its broadcast dims: a view with size 1 at each dim of stride 0 (and size > 1),
 * which broadcasts back to the same values. A gradient that is itself an expand (the
 * backward of an earlier mean or sum, e.g. a batch norm's means over (0, 2, 3)) is then
 * scaled on its own elements, not on the expanded shape. A new reference. */
static em_status red_compact(const em_tensor *g, em_tensor **out) {
    em_tensor *cur = (em_tensor *)g;
    em_tensor_retain(cur);
    for (int d = 0; d < g->v.rank; d++) {
        if (g->v.strides[d] != 0 || g->v.shape[d] <= 1) continue;
        em_tensor *next = NULL;
        em_status s = em_slice(cur, d, 0, 1, 1, &next);
        em_tensor_release(cur);
        if (s != EM_OK) return s;
        cur = next;
    }
    *out = cur;
    return EM_OK;
}

/* mean: the gradient / n broadcast back. */
static em_status mean_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *t = NULL, *gk = NULL, *c = NULL;
    em_status s = red_compact(bw->grad, &c);
    if (s == EM_OK) s = em_div_scalar(c, (double)red_count(bw), &t);
    em_tensor_release(c);
    if (s == EM_OK) s = red_keepdim(red_p(bw), t, &gk);
    em_tensor_release(t);
    if (s == EM_OK) s = red_expand(bw, gk);
    return s;
}

/* prod: d/dx_i = the product of the other elements of x_i's slice. With x' = x with zeros
 * replaced by 1 and P' = prod(x'), that product is P' / x'_i where the slice has no zero, P'
 * at the zero of a slice with exactly one zero, and 0 elsewhere (at the nonzeros of a slice
 * with one zero, and everywhere in a slice with two or more). No division by zero. */
static em_status prod_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    const emi_rule_reduce_params *p = red_p(bw);
    em_tensor *x, *z = NULL, *zf = NULL, *xnz = NULL, *pnz = NULL, *cnt = NULL, *c0 = NULL,
                  *c0f = NULL, *c1 = NULL, *c1f = NULL, *m1 = NULL, *m = NULL, *q = NULL,
                  *gk = NULL, *r = NULL;
    em_status s;
    R_TRY(emi_bw_input(bw, 0, &x));
    em_dtype dt = x->dtype;
    R_TRY(em_eq_scalar(x, 0.0, &z));
    R_TRY(em_cast(z, dt, &zf));
    R_TRY(em_masked_fill(x, z, 1.0, &xnz));
    R_TRY(red_again(p, EM_RED_PROD, xnz, &pnz));
    R_TRY(red_again(p, EM_RED_SUM, zf, &cnt));
    R_TRY(em_eq_scalar(cnt, 0.0, &c0));
    R_TRY(em_cast(c0, dt, &c0f));
    R_TRY(em_eq_scalar(cnt, 1.0, &c1));
    R_TRY(em_cast(c1, dt, &c1f));
    R_TRY(em_mul(c1f, zf, &m1));
    R_TRY(em_add(c0f, m1, &m));  /* 1 where the gradient flows, else 0 */
    R_TRY(em_div(pnz, xnz, &q)); /* the product of the others (where m is 1) */
    R_TRY(red_keepdim(p, bw->grad, &gk));
    R_TRY(em_mul(gk, q, &r));
    R_TRY(em_mul(r, m, &bw->gin[0]));
done:
    em_tensor_release(z);
    em_tensor_release(zf);
    em_tensor_release(xnz);
    em_tensor_release(pnz);
    em_tensor_release(cnt);
    em_tensor_release(c0);
    em_tensor_release(c0f);
    em_tensor_release(c1);
    em_tensor_release(c1f);
    em_tensor_release(m1);
    em_tensor_release(m);
    em_tensor_release(q);
    em_tensor_release(gk);
    em_tensor_release(r);
    return s;
}

/* max / min.
 * Along a dim (PyTorch's max(dim) / min(dim)): the whole gradient goes to the index that
 * argmax / argmin returns, the first extreme of the slice (a NaN counts as the extreme,
 * matching the NaN the value propagates); it is scattered there with em_scatter_add.
 * Whole tensor (PyTorch's max() / min()): the gradient is split evenly among all positions
 * equal to the result (NaN positions when the result is NaN), like PyTorch's
 * evenly_distribute_backward. */
static em_status minmax_backward(emi_ad_bw *bw, bool is_max) {
    if (!bw->need[0]) return EM_OK;
    const emi_rule_reduce_params *p = red_p(bw);
    em_tensor *x, *y, *idx = NULL, *zero = NULL, *gk = NULL, *eq = NULL, *nx = NULL,
                      *ny = NULL, *nn = NULL, *mask = NULL, *mf = NULL, *cnt = NULL,
                      *share = NULL;
    em_status s;
    R_TRY(emi_bw_input(bw, 0, &x));
    if (p->dim >= 0) {
        R_TRY(is_max ? em_argmax_dim(x, p->dim, true, &idx)
                     : em_argmin_dim(x, p->dim, true, &idx));
        R_TRY(em_full_like(x, 0.0, &zero));
        R_TRY(red_keepdim(p, bw->grad, &gk));
        R_TRY(em_scatter_add(zero, p->dim, idx, gk, &bw->gin[0]));
    } else {
        R_TRY(emi_bw_output(bw, &y));
        R_TRY(em_eq(x, y, &eq));
        R_TRY(em_ne(x, x, &nx));
        R_TRY(em_ne(y, y, &ny));
        R_TRY(em_logical_and(nx, ny, &nn));
        R_TRY(em_logical_or(eq, nn, &mask));
        R_TRY(em_cast(mask, x->dtype, &mf));
        R_TRY(em_sum(mf, &cnt));
        R_TRY(em_div(bw->grad, cnt, &share));
        R_TRY(em_mul(mf, share, &bw->gin[0]));
    }
done:
    em_tensor_release(idx);
    em_tensor_release(zero);
    em_tensor_release(gk);
    em_tensor_release(eq);
    em_tensor_release(nx);
    em_tensor_release(ny);
    em_tensor_release(nn);
    em_tensor_release(mask);
    em_tensor_release(mf);
    em_tensor_release(cnt);
    em_tensor_release(share);
    return s;
}

static em_status max_backward(emi_ad_bw *bw) { return minmax_backward(bw, true); }
static em_status min_backward(emi_ad_bw *bw) { return minmax_backward(bw, false); }

/* var: 2 (x - mean) / (n - correction) * grad, as PyTorch. */
static em_status var_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    const emi_rule_reduce_params *p = red_p(bw);
    em_tensor *x, *mu = NULL, *dx = NULL, *gk = NULL, *t = NULL;
    em_status s;
    R_TRY(emi_bw_input(bw, 0, &x));
    R_TRY(red_again(p, EM_RED_MEAN, x, &mu));
    R_TRY(em_sub(x, mu, &dx));
    R_TRY(red_keepdim(p, bw->grad, &gk));
    R_TRY(em_mul(gk, dx, &t));
    R_TRY(em_mul_scalar(t, 2.0 / ((double)red_count(bw) - (double)p->correction),
                        &bw->gin[0]));
done:
    em_tensor_release(mu);
    em_tensor_release(dx);
    em_tensor_release(gk);
    em_tensor_release(t);
    return s;
}

/* logsumexp: grad * exp(x - result) = grad * softmax(x). */
static em_status logsumexp_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    const emi_rule_reduce_params *p = red_p(bw);
    em_tensor *x, *y, *yk = NULL, *dx = NULL, *e = NULL, *gk = NULL;
    em_status s;
    R_TRY(emi_bw_input(bw, 0, &x));
    R_TRY(emi_bw_output(bw, &y));
    R_TRY(red_keepdim(p, y, &yk));
    R_TRY(em_sub(x, yk, &dx));
    R_TRY(em_exp(dx, &e));
    R_TRY(red_keepdim(p, bw->grad, &gk));
    R_TRY(em_mul(gk, e, &bw->gin[0]));
done:
    em_tensor_release(yk);
    em_tensor_release(dx);
    em_tensor_release(e);
    em_tensor_release(gk);
    return s;
}

#define IN0 EMI_NEED_IN(0)
static const emi_ad_rule rule_sum = {"sum", false, 0, red_forward, sum_backward};
static const emi_ad_rule rule_mean = {"mean", false, 0, red_forward, mean_backward};
static const emi_ad_rule rule_prod = {"prod", false, IN0, red_forward, prod_backward};
static const emi_ad_rule rule_max = {"max", false, IN0 | EMI_NEED_OUT, red_forward,
                                     max_backward};
static const emi_ad_rule rule_min = {"min", false, IN0 | EMI_NEED_OUT, red_forward,
                                     min_backward};
static const emi_ad_rule rule_var = {"var", false, IN0, red_forward, var_backward};
static const emi_ad_rule rule_logsumexp = {"logsumexp", false, IN0 | EMI_NEED_OUT, red_forward,
                                           logsumexp_backward};

const emi_ad_rule *const emi_rules_reduce[EM_RED_COUNT] = {
    [EM_RED_SUM] = &rule_sum, [EM_RED_MEAN] = &rule_mean, [EM_RED_PROD] = &rule_prod,
    [EM_RED_MAX] = &rule_max, [EM_RED_MIN] = &rule_min,   [EM_RED_VAR] = &rule_var,
    [EM_RED_LOGSUMEXP] = &rule_logsumexp,
};

/* ---- cumsum, softmax, log_softmax: params: int, the normalized dim ---- */

static int along_dim(const emi_ad_bw *bw) { return *(const int *)bw->params; }

static em_status cumsum_forward(const void *p, em_tensor *const *in, int nin, em_tensor **out) {
    (void)nin;
    return em_cumsum(in[0], *(const int *)p, out);
}

/* cumsum: the reversed running sum of the gradient, flip(cumsum(flip(g))). */
static em_status cumsum_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    if (bw->grad->v.rank == 0) { /* a 0-d cumsum is the identity */
        em_tensor_retain(bw->grad);
        bw->gin[0] = bw->grad;
        return EM_OK;
    }
    int d = along_dim(bw);
    em_tensor *f = NULL, *c = NULL;
    em_status s;
    R_TRY(em_flip(bw->grad, &d, 1, &f));
    R_TRY(em_cumsum(f, d, &c));
    R_TRY(em_flip(c, &d, 1, &bw->gin[0]));
done:
    em_tensor_release(f);
    em_tensor_release(c);
    return s;
}

const emi_ad_rule emi_rule_cumsum = {"cumsum", false, 0, cumsum_forward, cumsum_backward};

/* ---- cumprod: params int, the normalized dim; needs x and y = cumprod(x) ---- */

static em_status cumprod_forward(const void *p, em_tensor *const *in, int nin,
                                 em_tensor **out) {
    (void)nin;
    return em_cumprod(in[0], *(const int *)p, out);
}

/* flip(cumsum(flip(a))) along d: sum_{i >= j} a_i */
static em_status rev_cumsum(const em_tensor *a, int d, em_tensor **out) {
    em_tensor *f = NULL, *c = NULL;
    em_status s;
    R_TRY(em_flip(a, &d, 1, &f));
    R_TRY(em_cumsum(f, d, &c));
    R_TRY(em_flip(c, &d, 1, out));
done:
    em_tensor_release(f);
    em_tensor_release(c);
    return s;
}

/* cumprod, as PyTorch's cumprod_backward, exact where x has zeros: gx_j = sum_{i >= j} g_i
 * prod_{m <= i, m != j} x_m. Along each line, before its first zero (no zero at all: every
 * j) that is rev_cumsum(g * y)_j / x_j (y_i is 0 from the first zero on); at the first zero
 * k it is rev_cumsum(g * y')_k with y' the cumprod of x whose first zero is replaced by 1;
 * after it, every product holds x_k = 0: 0. */
static em_status cumprod_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    if (bw->grad->v.rank == 0) { /* a 0-d cumprod is the identity */
        em_tensor_retain(bw->grad);
        bw->gin[0] = bw->grad;
        return EM_OK;
    }
    int d = along_dim(bw);
    em_tensor *x, *y, *z = NULL, *zi = NULL, *cnt = NULL, *before = NULL, *c1 = NULL,
                      *first = NULL, *one = NULL, *zero = NULL, *xs = NULL, *gy = NULL,
                      *rg = NULL, *a = NULL, *x1 = NULL, *y1 = NULL, *gy1 = NULL, *b = NULL,
                      *bz = NULL;
    em_status s;
    R_TRY(emi_bw_input(bw, 0, &x));
    R_TRY(emi_bw_output(bw, &y));
    R_TRY(em_eq_scalar(x, 0.0, &z));
    R_TRY(em_cast(z, EM_I32, &zi));
    R_TRY(em_cumsum(zi, d, &cnt));
    R_TRY(em_eq_scalar(cnt, 0.0, &before));
    R_TRY(em_eq_scalar(cnt, 1.0, &c1));
    R_TRY(em_logical_and(z, c1, &first));
    R_TRY(em_full_like(x, 1.0, &one));
    R_TRY(em_full_like(x, 0.0, &zero));
    R_TRY(em_where(before, x, one, &xs));
    R_TRY(em_mul(bw->grad, y, &gy));
    R_TRY(rev_cumsum(gy, d, &rg));
    R_TRY(em_div(rg, xs, &a));
    R_TRY(em_where(first, one, x, &x1));
    R_TRY(em_cumprod(x1, d, &y1));
    R_TRY(em_mul(bw->grad, y1, &gy1));
    R_TRY(rev_cumsum(gy1, d, &b));
    R_TRY(em_where(first, b, zero, &bz));
    R_TRY(em_where(before, a, bz, &bw->gin[0]));
done:
    em_tensor_release(z);
    em_tensor_release(zi);
    em_tensor_release(cnt);
    em_tensor_release(before);
    em_tensor_release(c1);
    em_tensor_release(first);
    em_tensor_release(one);
    em_tensor_release(zero);
    em_tensor_release(xs);
    em_tensor_release(gy);
    em_tensor_release(rg);
    em_tensor_release(a);
    em_tensor_release(x1);
    em_tensor_release(y1);
    em_tensor_release(gy1);
    em_tensor_release(b);
    em_tensor_release(bz);
    return s;
}

const emi_ad_rule emi_rule_cumprod = {"cumprod", false, EMI_NEED_IN(0) | EMI_NEED_OUT,
                                      cumprod_forward, cumprod_backward};

static em_status softmax_forward(const void *p, em_tensor *const *in, int nin,
                                 em_tensor **out) {
    (void)nin;
    return em_softmax(in[0], *(const int *)p, out);
}

/* softmax: y * (g - sum(g * y, dim, keepdim)). */
static em_status softmax_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *y, *gy = NULL, *sm = NULL, *t = NULL;
    em_status s;
    R_TRY(emi_bw_output(bw, &y));
    R_TRY(em_mul(bw->grad, y, &gy));
    R_TRY(em_sum_dim(gy, along_dim(bw), true, &sm));
    em_tensor_release(gy); /* its buffer (warm) is free for t */
    gy = NULL;
    R_TRY(em_sub(bw->grad, sm, &t));
    s = em_mul_(t, y, &bw->gin[0]); /* y * t, in t's buffer */
    t = NULL;
done:
    em_tensor_release(gy);
    em_tensor_release(sm);
    em_tensor_release(t);
    return s;
}

const emi_ad_rule emi_rule_softmax = {"softmax", false, EMI_NEED_OUT, softmax_forward,
                                      softmax_backward};

static em_status log_softmax_forward(const void *p, em_tensor *const *in, int nin,
                                     em_tensor **out) {
    (void)nin;
    return em_log_softmax(in[0], *(const int *)p, out);
}

/* log_softmax: g - exp(y) * sum(g, dim, keepdim), softmax taken from the output. Computed
 * as exp(y) * -sum(g) + g in y's own buffer (this rule is y's last reader): the same bits
 * (negation is exact), and no full-size temporary at the peak of a classifier's backward
 * (two fewer than exp, mul and add each writing a new one). */
static em_status log_softmax_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *y = NULL, *e = NULL, *sm = NULL, *nsm = NULL, *t = NULL;
    em_status s;
    R_TRY(emi_bw_output_take(bw, &y));
    R_TRY(em_sum_dim(bw->grad, along_dim(bw), true, &sm));
    R_TRY(em_neg(sm, &nsm));
    s = em_exp_(y, &e); /* in y's buffer when nothing else holds it */
    y = NULL;
    if (s != EM_OK) goto done;
    s = em_mul_(e, nsm, &t); /* in e's buffer */
    e = NULL;
    if (s != EM_OK) goto done;
    s = em_add_(t, bw->grad, &bw->gin[0]); /* in t's buffer */
    t = NULL;
done:
    em_tensor_release(y);
    em_tensor_release(nsm);
    em_tensor_release(e);
    em_tensor_release(sm);
    em_tensor_release(t);
    return s;
}

const emi_ad_rule emi_rule_log_softmax = {"log_softmax", false, EMI_NEED_OUT,
                                          log_softmax_forward, log_softmax_backward};
