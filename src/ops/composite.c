/* composite.c — ops the core composes from other ops on every backend (so that each backend
 * and autodiff get them from the slots they already have): tril, triu, eye, linspace, std,
 * any / all, sums and means over several dims at once, and scaled dot-product attention. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autodiff/rules/rules.h"
#include "ops/fused.h"

typedef struct cp_tmps {
    em_tensor *t[16];
    int n;
} cp_tmps;

static void cp_free(cp_tmps *a) {
    for (int i = 0; i < a->n; i++) em_tensor_release(a->t[i]);
}

/* With `em_status s` and `cp_tmps tm` in scope: s = call (writing var) while s is EM_OK. */
#define CP(call, var)                                                                        \
    do {                                                                                     \
        if (s == EM_OK) {                                                                    \
            var = NULL;                                                                      \
            s = (call);                                                                      \
            if (s == EM_OK) tm.t[tm.n++] = var;                                              \
        }                                                                                    \
    } while (0)

static em_device cp_inner(em_device d) {
    d.autodiff = false;
    d.checkpointing = EM_CKPT_NONE;
    return d;
}

/* col - row as i64 [R, C] on dev */
static em_status cp_diag_offsets(int64_t R, int64_t C, em_device dev, em_tensor **out) {
    cp_tmps tm = {{0}, 0};
    em_status s = EM_OK;
    em_tensor *ar = NULL, *ac = NULL, *rows = NULL, *cols = NULL;
    CP(em_arange(0, (double)R, 1, EM_I64, dev, &ar), ar);
    CP(em_arange(0, (double)C, 1, EM_I64, dev, &ac), ac);
    CP(em_reshape(ar, (const int64_t[]){R, 1}, 2, &rows), rows);
    CP(em_reshape(ac, (const int64_t[]){1, C}, 2, &cols), cols);
    if (s == EM_OK) s = em_sub(cols, rows, out);
    cp_free(&tm);
    return s;
}

static em_status cp_tri(const char *fn, const em_tensor *x, int64_t diagonal, bool lower,
                        em_tensor **out) {
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_not_quantized(fn, x));
    const int r = x->v.rank;
    if (r < 2)
        return emi_fail(EM_ERR_SHAPE, "%s: x must have rank >= 2, got %d", fn, r);
    cp_tmps tm = {{0}, 0};
    em_status s = EM_OK;
    em_tensor *off = NULL, *keep = NULL, *zero = NULL;
    const em_device in = cp_inner(x->dev);
    CP(cp_diag_offsets(x->v.shape[r - 2], x->v.shape[r - 1], in, &off), off);
    /* lower: col - row <= k; upper: col - row >= k (k clamped: the offsets fit in int64) */
    double k = (double)diagonal;
    CP(lower ? em_lt_scalar(off, k + 1, &keep) : em_gt_scalar(off, k - 1, &keep), keep);
    CP(em_zeros(NULL, 0, x->dtype, in, &zero), zero);
    if (s == EM_OK) s = em_where(keep, x, zero, out);
    cp_free(&tm);
    return s;
}

em_status em_tril(const em_tensor *x, int64_t diagonal, em_tensor **out) {
    return cp_tri("em_tril", x, diagonal, true, out);
}

em_status em_triu(const em_tensor *x, int64_t diagonal, em_tensor **out) {
    return cp_tri("em_triu", x, diagonal, false, out);
}

em_status em_eye(int64_t n, int64_t m, em_dtype dt, em_device dev, em_tensor **out) {
    static const char fn[] = "em_eye";
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_device(fn, dev));
    if (m < 0) m = n;
    if (n < 0) return emi_fail(EM_ERR_ARG, "%s: n must be >= 0, got %lld", fn, (long long)n);
    if (emi_kind(dt) == EM_KIND_QUANTIZED || em_dtype_size(dt) == 0)
        return emi_fail(EM_ERR_DTYPE, "%s: %s is not a dtype eye can make", fn,
                        em_dtype_name(dt));
    cp_tmps tm = {{0}, 0};
    em_status s = EM_OK;
    em_tensor *off = NULL, *d = NULL;
    CP(cp_diag_offsets(n, m, cp_inner(dev), &off), off);
    CP(em_eq_scalar(off, 0, &d), d);
    em_tensor *moved = NULL;
    CP(em_to_device(d, dev, &moved), moved);
    if (s == EM_OK) s = em_cast(moved, dt, out);
    cp_free(&tm);
    return s;
}

em_status em_linspace(double start, double end, int64_t steps, em_dtype dt, em_device dev,
                      em_tensor **out) {
    static const char fn[] = "em_linspace";
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_device(fn, dev));
    if (steps < 0)
        return emi_fail(EM_ERR_ARG, "%s: steps must be >= 0, got %lld", fn, (long long)steps);
    if (emi_kind(dt) != EM_KIND_FLOAT || em_dtype_size(dt) == 0)
        return emi_fail(EM_ERR_DTYPE, "%s: a float dtype, got %s", fn, em_dtype_name(dt));
    if (!isfinite(start) || !isfinite(end))
        return emi_fail(EM_ERR_ARG, "%s: start and end must be finite, got %g and %g", fn, start,
                        end);
    /* torch's: step = (end - start) / (steps - 1); the first half start + i step, the second
     * end - (steps - 1 - i) step (both ends exact), computed in f64 */
    cp_tmps tm = {{0}, 0};
    em_status s = EM_OK;
    const double step = steps > 1 ? (end - start) / (double)(steps - 1) : 0;
    const em_device in = cp_inner(dev);
    em_tensor *i = NULL, *lo = NULL, *lo2 = NULL, *back = NULL, *hi = NULL, *hi2 = NULL,
              *first = NULL, *v = NULL, *moved = NULL;
    CP(em_arange(0, (double)steps, 1, EM_F64, in, &i), i);
    CP(em_mul_scalar(i, step, &lo), lo);
    CP(em_add_scalar(lo, start, &lo2), lo2);
    CP(em_sub_scalar(i, (double)(steps - 1), &back), back); /* i - (steps - 1) <= 0 */
    CP(em_mul_scalar(back, step, &hi), hi);
    CP(em_add_scalar(hi, end, &hi2), hi2);
    CP(em_lt_scalar(i, (double)(steps / 2), &first), first);
    CP(em_where(first, lo2, hi2, &v), v);
    CP(em_to_device(v, dev, &moved), moved);
    if (s == EM_OK) s = em_cast(moved, dt, out);
    cp_free(&tm);
    return s;
}

em_status em_std(const em_tensor *x, int correction, em_tensor **out) {
    em_tensor *v = NULL;
    EMI_TRY(em_var(x, correction, &v));
    em_status s = em_sqrt(v, out);
    em_tensor_release(v);
    return s;
}

em_status em_std_dim(const em_tensor *x, int dim, int correction, bool keepdim,
                     em_tensor **out) {
    em_tensor *v = NULL;
    EMI_TRY(em_var_dim(x, dim, correction, keepdim, &v));
    em_status s = em_sqrt(v, out);
    em_tensor_release(v);
    return s;
}

/* The count of nonzero elements (i64) over everything (dim < 0, all) or along dim. */
static em_status cp_count(const char *fn, const em_tensor *x, bool all_dims, int dim,
                          bool keepdim, em_tensor **out, int64_t *n) {
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_not_quantized(fn, x));
    int d = 0;
    if (!all_dims) {
        if (x->v.rank == 0) return emi_fail(EM_ERR_SHAPE, "%s: x is 0-d: no dim %d", fn, dim);
        EMI_TRY(emi_norm_dim(fn, dim, x->v.rank, &d));
        *n = x->v.shape[d];
    } else {
        *n = em_tensor_numel(x);
    }
    cp_tmps tm = {{0}, 0};
    em_status s = EM_OK;
    em_tensor *b = NULL, *c = NULL, *plain = NULL;
    /* a bool is a value, never tracked: the count is computed on x's values */
    CP(em_tensor_detach(x, &plain), plain);
    CP(em_cast(plain, EM_BOOL, &b), b);
    CP(em_cast(b, EM_I64, &c), c);
    if (s == EM_OK) s = all_dims ? em_sum(c, out) : em_sum_dim(c, d, keepdim, out);
    cp_free(&tm);
    return s;
}

static em_status cp_any_all(const char *fn, const em_tensor *x, bool all_dims, int dim,
                            bool keepdim, bool all, em_tensor **out) {
    em_tensor *cnt = NULL;
    int64_t n = 0;
    EMI_TRY(cp_count(fn, x, all_dims, dim, keepdim, &cnt, &n));
    em_status s = all ? em_eq_scalar(cnt, (double)n, out) : em_gt_scalar(cnt, 0, out);
    em_tensor_release(cnt);
    return s;
}

em_status em_any(const em_tensor *x, em_tensor **out) {
    return cp_any_all("em_any", x, true, 0, false, false, out);
}
em_status em_all(const em_tensor *x, em_tensor **out) {
    return cp_any_all("em_all", x, true, 0, false, true, out);
}
em_status em_any_dim(const em_tensor *x, int dim, bool keepdim, em_tensor **out) {
    return cp_any_all("em_any_dim", x, false, dim, keepdim, false, out);
}
em_status em_all_dim(const em_tensor *x, int dim, bool keepdim, em_tensor **out) {
    return cp_any_all("em_all_dim", x, false, dim, keepdim, true, out);
}

/* sum or mean over dims[0..n) (any order, negative from the end, no repeats): one reduction a
 * dim, innermost first, keepdim, then the kept dims dropped unless keepdim */
static em_status cp_reduce_dims(const char *fn, const em_tensor *x, const int *dims, int n,
                                bool keepdim, bool mean, em_tensor **out) {
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_tensor(fn, "x", x));
    if (n < 0 || (n > 0 && !dims))
        return emi_fail(EM_ERR_ARG, "%s: %d dims at %p", fn, n, (const void *)dims);
    if (n == 0) return mean ? em_mean(x, out) : em_sum(x, out);
    const int r = x->v.rank;
    bool used[EM_MAX_RANK] = {false};
    for (int i = 0; i < n; i++) {
        int d;
        EMI_TRY(emi_norm_dim(fn, dims[i], r, &d));
        if (used[d]) return emi_fail(EM_ERR_ARG, "%s: dim %d appears twice", fn, d);
        used[d] = true;
    }
    em_tensor *cur = (em_tensor *)x;
    em_tensor_retain(cur);
    em_status s = EM_OK;
    for (int d = r - 1; d >= 0 && s == EM_OK; d--) {
        if (!used[d]) continue;
        em_tensor *next = NULL;
        s = mean ? em_mean_dim(cur, d, true, &next) : em_sum_dim(cur, d, true, &next);
        em_tensor_release(cur);
        cur = s == EM_OK ? next : NULL;
    }
    if (s != EM_OK) return s;
    if (keepdim) {
        *out = cur;
        return EM_OK;
    }
    int64_t shape[EM_MAX_RANK];
    int k = 0;
    for (int d = 0; d < r; d++)
        if (!used[d]) shape[k++] = x->v.shape[d];
    s = em_reshape(cur, shape, k, out);
    em_tensor_release(cur);
    return s;
}

em_status em_sum_dims(const em_tensor *x, const int *dims, int n, bool keepdim,
                      em_tensor **out) {
    return cp_reduce_dims("em_sum_dims", x, dims, n, keepdim, false, out);
}

em_status em_mean_dims(const em_tensor *x, const int *dims, int n, bool keepdim,
                       em_tensor **out) {
    return cp_reduce_dims("em_mean_dims", x, dims, n, keepdim, true, out);
}

/* The composition: softmax(q k^T sc + mask) (dropped out) @ v, the [L, S] scores whole. */
static em_status cp_sdpa_compose(const em_tensor *q, const em_tensor *k, const em_tensor *v,
                                 const em_tensor *mask, double dropout_p, bool causal,
                                 double sc, uint64_t seed, em_tensor **out) {
    const int64_t L = q->v.shape[q->v.rank - 2], S = k->v.shape[k->v.rank - 2];
    cp_tmps tm = {{0}, 0};
    em_status s = EM_OK;
    em_tensor *kt = NULL, *sco = NULL, *scs = NULL, *att = NULL, *drop = NULL;
    CP(em_transpose(k, -2, -1, &kt), kt);
    CP(em_matmul(q, kt, &sco), sco);
    CP(em_mul_scalar(sco, sc, &scs), scs);
    em_tensor *cur = scs;
    if (causal) {
        em_tensor *off = NULL, *hide = NULL, *m = NULL;
        CP(cp_diag_offsets(L, S, cp_inner(q->dev), &off), off);
        CP(em_gt_scalar(off, 0, &hide), hide);
        CP(em_masked_fill(cur, hide, -INFINITY, &m), m);
        cur = m;
    }
    if (mask) {
        em_tensor *m = NULL;
        if (emi_kind(mask->dtype) == EM_KIND_BOOL) {
            em_tensor *hide = NULL;
            CP(em_logical_not(mask, &hide), hide);
            CP(em_masked_fill(cur, hide, -INFINITY, &m), m);
        } else {
            CP(em_add(cur, mask, &m), m);
        }
        cur = m;
    }
    CP(em_softmax(cur, -1, &att), att);
    em_tensor *a = att;
    if (dropout_p > 0) {
        CP(em_dropout(att, dropout_p, true, seed, &drop), drop);
        a = drop;
    }
    if (s == EM_OK) s = em_matmul(a, v, out);
    cp_free(&tm);
    return s;
}

/* ---- the fused path (the sdpa slots) ---- */

/* The broadcast batch dims [B...] of q, k, v and mask (each without its last two dims; a
 * mask of rank < 2 has none). False when they do not broadcast (the composition reports it)
 * or the result would not fit EM_MAX_RANK. */
static bool cp_sdpa_batch(const em_tensor *const *t, int n, int64_t *shape, int *rank) {
    int r = 0;
    for (int i = 0; i < n; i++)
        if (t[i] && t[i]->v.rank - 2 > r) r = t[i]->v.rank - 2;
    if (r + 2 > EM_MAX_RANK) return false;
    for (int d = 0; d < r; d++) shape[d] = 1;
    for (int i = 0; i < n; i++) {
        if (!t[i]) continue;
        const int tr = t[i]->v.rank - 2;
        for (int d = 0; d < tr; d++) {
            const int64_t x = t[i]->v.shape[d], o = r - tr + d;
            if (x == shape[o] || x == 1) continue;
            if (shape[o] != 1) return false;
            shape[o] = x;
        }
    }
    *rank = r;
    return true;
}

/* t's view broadcast to batch + [a, b]. */
static em_view cp_sdpa_view(const em_tensor *t, const int64_t *batch, int nb, int64_t a,
                            int64_t b) {
    int64_t sh[EM_MAX_RANK];
    for (int d = 0; d < nb; d++) sh[d] = batch[d];
    sh[nb] = a, sh[nb + 1] = b;
    return emi_broadcast_view(t, sh, nb + 2);
}

/* True when the fused slots can compute this call (else the composition does: a backend
 * without them, fused kernels switched off by EMBER_FUSED=0, a float mask that needs its
 * gradient, mixed dtypes or devices, empty operands), the batch dims in batch[0..*nb). */
static bool cp_sdpa_fusable(const em_tensor *q, const em_tensor *k, const em_tensor *v,
                            const em_tensor *mask, double dropout_p, bool tracked,
                            int64_t *batch, int *nb) {
    const em_backend_ops *ops = q->st->ops;
    if (!ops->sdpa || (tracked && !ops->sdpa_backward) || !emi_fused_on()) return false;
    if (!(ops->caps & EM_CAP_STRIDED_INPUTS)) return false;
    if (k->dtype != q->dtype || v->dtype != q->dtype) return false;
    if (k->dev.backend != q->dev.backend || k->dev.index != q->dev.index ||
        v->dev.backend != q->dev.backend || v->dev.index != q->dev.index)
        return false;
    const int64_t L = q->v.shape[q->v.rank - 2], S = k->v.shape[k->v.rank - 2];
    const int64_t E = q->v.shape[q->v.rank - 1], Ev = v->v.shape[v->v.rank - 1];
    if (L == 0 || S == 0 || E == 0 || Ev == 0) return false; /* the composition's zeros */
    if (mask) {
        if (mask->dev.backend != q->dev.backend || mask->dev.index != q->dev.index) return false;
        if (emi_kind(mask->dtype) == EM_KIND_FLOAT) {
            if (mask->dtype != q->dtype) return false;
            const char *what = NULL;
            if (emi_ad_in_graph(mask, &what)) return false; /* its gradient: composed */
        }
        const int mr = mask->v.rank;
        const int64_t ml = mr >= 2 ? mask->v.shape[mr - 2] : 1, ms = mr >= 1 ? mask->v.shape[mr - 1] : 1;
        if ((ml != 1 && ml != L) || (ms != 1 && ms != S)) return false;
    }
    const em_tensor *all[4] = {q, k, v, mask};
    if (!cp_sdpa_batch(all, 4, batch, nb)) return false;
    if (emi_numel(batch, *nb) == 0) return false;
    if (dropout_p > 0) {
        /* the dropout counters number the weights [B..., L, S] of the composition, whose
         * batch dims are q's, k's and the mask's: v must not add any */
        int64_t wb[EM_MAX_RANK];
        int wr = 0;
        const em_tensor *w[3] = {q, k, mask};
        if (!cp_sdpa_batch(w, 3, wb, &wr) || !emi_same_shape(wb, wr, batch, *nb)) return false;
    }
    return true;
}

em_status em_scaled_dot_product_attention(const em_tensor *q, const em_tensor *k,
                                          const em_tensor *v, const em_tensor *mask,
                                          double dropout_p, bool causal, double scale,
                                          uint64_t seed, em_tensor **out) {
    static const char fn[] = "em_scaled_dot_product_attention";

    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_tensor(fn, "q", q));
    EMI_TRY(emi_check_tensor(fn, "k", k));
    EMI_TRY(emi_check_tensor(fn, "v", v));
    EMI_TRY(emi_check_float(fn, q));
    if (q->v.rank < 2 || k->v.rank < 2 || v->v.rank < 2)
        return emi_fail(EM_ERR_SHAPE, "%s: q, k and v must be [..., L, E], [..., S, E] and "
                        "[..., S, Ev]", fn);
    const int64_t L = q->v.shape[q->v.rank - 2], S = k->v.shape[k->v.rank - 2];
    const int64_t E = q->v.shape[q->v.rank - 1];
    if (k->v.shape[k->v.rank - 1] != E || v->v.shape[v->v.rank - 2] != S)
        return emi_fail(EM_ERR_SHAPE, "%s: q [..., %lld, %lld] needs k [..., S, %lld] and v "
                        "[..., S, Ev] with one S", fn, (long long)L, (long long)E,
                        (long long)E);
    if (!(dropout_p >= 0 && dropout_p < 1))
        return emi_fail(EM_ERR_ARG, "%s: dropout_p must be in [0, 1), got %g", fn, dropout_p);
    if (!(scale >= 0) || isinf(scale))
        return emi_fail(EM_ERR_ARG, "%s: scale must be finite and >= 0 (0: 1/sqrt(E)), got %g",
                        fn, scale);
    if (mask) EMI_TRY(emi_check_tensor(fn, "mask", mask));
    if (mask && emi_kind(mask->dtype) != EM_KIND_BOOL && emi_kind(mask->dtype) != EM_KIND_FLOAT)
        return emi_fail(EM_ERR_DTYPE, "%s: the mask must be bool (true: attend) or float "
                        "(added to the scores), got %s", fn, em_dtype_name(mask->dtype));
    const double sc = scale > 0 ? scale : 1.0 / sqrt((double)E);
    const em_tensor *ins[5] = {q, k, v, mask, NULL};
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, ins, 4, &ad));
    int64_t batch[EM_MAX_RANK];
    int nb = 0;
    if (!cp_sdpa_fusable(q, k, v, mask, dropout_p, ad.tracked, batch, &nb))
        return cp_sdpa_compose(q, k, v, mask, dropout_p, causal, sc, seed, out);
    const int64_t Ev = v->v.shape[v->v.rank - 1];
    int64_t osh[EM_MAX_RANK];
    for (int d = 0; d < nb; d++) osh[d] = batch[d];
    osh[nb] = L, osh[nb + 1] = Ev;
    const em_dtype lt = q->dtype == EM_F64 ? EM_F64 : EM_F32;
    em_tensor *o = NULL, *lse = NULL;
    em_status s = emi_empty(fn, emi_result_device(ins, 1), q->dtype, osh, nb + 2, &o);
    if (s == EM_OK) s = emi_empty(fn, cp_inner(q->dev), lt, osh, nb + 1, &lse);
    if (s == EM_OK) {
        const em_view qv = cp_sdpa_view(q, batch, nb, L, E), kv = cp_sdpa_view(k, batch, nb, S, E);
        const em_view vv = cp_sdpa_view(v, batch, nb, S, Ev);
        em_view mv;
        if (mask) mv = cp_sdpa_view(mask, batch, nb, L, S);
        s = q->st->ops->sdpa(q->st->ctx, &o->v, &lse->v, &qv, &kv, &vv, mask ? &mv : NULL,
                             causal, sc, dropout_p, seed);
        if (s == EM_ERR_UNSUPPORTED) { /* a case the kernel leaves to the composition */
            em_tensor_release(o);
            em_tensor_release(lse);
            return cp_sdpa_compose(q, k, v, mask, dropout_p, causal, sc, seed, out);
        }
        if (s != EM_OK) s = emi_fail_prefixed(s, fn);
    }
    if (s == EM_OK) {
        ins[4] = lse;
        const emi_rule_sdpa_params rp = {causal, sc, dropout_p, seed};
        s = emi_ad_end(&ad, &emi_rule_sdpa, ins, 5, o, &rp, sizeof rp);
    }
    em_tensor_release(lse);
    if (s != EM_OK) {
        em_tensor_release(o);
        return s;
    }
    *out = o;
    return EM_OK;
}

em_status emi_sdpa_backward(const em_tensor *q, const em_tensor *k, const em_tensor *v,
                            const em_tensor *mask, const em_tensor *out, const em_tensor *dout,
                            const em_tensor *lse, const emi_rule_sdpa_params *p, em_tensor **dq,
                            em_tensor **dk, em_tensor **dv) {
    static const char fn[] = "em_scaled_dot_product_attention (backward)";
    const em_backend_ops *ops = q->st->ops;
    EMI_TRY(emi_need(fn, ops, ops->sdpa_backward != NULL, "sdpa_backward"));
    const em_tensor *all[4] = {q, k, v, mask};
    int64_t batch[EM_MAX_RANK];
    int nb = 0;
    if (!cp_sdpa_batch(all, 4, batch, &nb))
        return emi_fail(EM_ERR_SHAPE, "%s: the batch dims do not broadcast", fn);
    const int64_t L = q->v.shape[q->v.rank - 2], S = k->v.shape[k->v.rank - 2];
    const int64_t E = q->v.shape[q->v.rank - 1], Ev = v->v.shape[v->v.rank - 1];
    int64_t sh[EM_MAX_RANK];
    for (int d = 0; d < nb; d++) sh[d] = batch[d];
    const em_device in = cp_inner(q->dev);
    em_tensor *gq = NULL, *gk = NULL, *gv = NULL;
    sh[nb] = L, sh[nb + 1] = E;
    em_status s = emi_empty(fn, in, q->dtype, sh, nb + 2, &gq);
    sh[nb] = S;
    if (s == EM_OK) s = emi_empty(fn, in, q->dtype, sh, nb + 2, &gk);
    sh[nb + 1] = Ev;
    if (s == EM_OK) s = emi_empty(fn, in, q->dtype, sh, nb + 2, &gv);
    if (s == EM_OK) {
        const em_view qv = cp_sdpa_view(q, batch, nb, L, E), kv = cp_sdpa_view(k, batch, nb, S, E);
        const em_view vv = cp_sdpa_view(v, batch, nb, S, Ev);
        const em_view ov = cp_sdpa_view(out, batch, nb, L, Ev);
        const em_view gov = cp_sdpa_view(dout, batch, nb, L, Ev);
        em_view mv;
        if (mask) mv = cp_sdpa_view(mask, batch, nb, L, S);
        s = ops->sdpa_backward(q->st->ctx, &gq->v, &gk->v, &gv->v, &qv, &kv, &vv,
                               mask ? &mv : NULL, &ov, &gov, &lse->v, p->causal, p->scale,
                               p->dropout_p, p->seed);
        if (s != EM_OK) s = emi_fail_prefixed(s, fn);
    }
    if (s != EM_OK) {
        em_tensor_release(gq);
        em_tensor_release(gk);
        em_tensor_release(gv);
        return s;
    }
    *dq = gq, *dk = gk, *dv = gv;
    return EM_OK;
}
