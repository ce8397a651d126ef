/* loss.c — losses as torch.nn.functional computes them, composed from public ops (so that
 * autodiff differentiates them on every device): cross-entropy over [N, C, ...] with class
 * weights, ignore_index and label smoothing, NLL, binary cross-entropy with logits, MSE, L1,
 * smooth L1 and Huber, each with reduction none / mean / sum. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "nn/nn_internal.h"

em_ce_opts em_ce_opts_default(void) {
    em_ce_opts o;
    memset(&o, 0, sizeof o);
    o.reduction = EM_REDUCTION_MEAN;
    o.ignore_index = -100;
    o.label_smoothing = 0;
    o.weight = NULL;
    return o;
}

static em_status nn_check_reduction(const char *fn, em_reduction r) {
    if (r != EM_REDUCTION_MEAN && r != EM_REDUCTION_SUM && r != EM_REDUCTION_NONE)
        return em_backend_set_error(EM_ERR_ARG, "%s: unknown reduction %d", fn, (int)r);
    return EM_OK;
}

/* The reduction of per-element losses x (consumed). */
static em_status nn_reduce(em_tensor *x, em_reduction r, em_tensor **loss) {
    em_status s = EM_OK;
    if (r == EM_REDUCTION_NONE) {
        *loss = x;
        return EM_OK;
    }
    s = r == EM_REDUCTION_SUM ? em_sum(x, loss) : em_mean(x, loss);
    em_tensor_release(x);
    return s;
}

static bool nn_same_shape(const em_tensor *a, const em_tensor *b) {
    int r = em_tensor_rank(a);
    return r == em_tensor_rank(b) &&
           memcmp(em_tensor_shape(a), em_tensor_shape(b), (size_t)r * sizeof(int64_t)) == 0;
}

static const char *nn_shape(const em_tensor *t, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < em_tensor_rank(t) && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, d ? ", %lld" : "%lld",
                              (long long)em_tensor_shape(t)[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
    return buf;
}

/* [1, C, 1, ...] (rank r, classes at dim cd): how a per-class vector meets [N, C, ...]. */
static em_status nn_class_view(const em_tensor *w, int r, int cd, em_tensor **out) {
    int64_t sh[EM_MAX_RANK];
    for (int d = 0; d < r; d++) sh[d] = 1;
    sh[cd] = em_tensor_shape(w)[0];
    return em_reshape(w, sh, r, out);
}

/* Cross-entropy / NLL on log-probabilities lp [N, C, ...] or [C] (classes at dim cd). */
static em_status nn_ce(const char *fn, const em_tensor *lp, const em_tensor *target,
                       const em_ce_opts *o, em_tensor **loss) {
    const int r = em_tensor_rank(lp), cd = r == 1 ? 0 : 1;
    const int64_t C = em_tensor_shape(lp)[cd];
    const double eps = o->label_smoothing;
    char a[128], b[128];
    nn_tmps tm = {{0}, 0};
    em_status s = EM_OK;
    em_tensor *wv = NULL; /* the class weights as [1, C, 1...] */
    if (o->weight) {
        if (em_tensor_rank(o->weight) != 1 || em_tensor_shape(o->weight)[0] != C)
            return em_backend_set_error(EM_ERR_SHAPE, "%s: weight must be [%lld] (one per class), "
                                        "got %s", fn, (long long)C,
                                        nn_shape(o->weight, a, sizeof a));
        if (em_tensor_dtype(o->weight) != em_tensor_dtype(lp))
            return em_backend_set_error(EM_ERR_DTYPE, "%s: weight is %s, the input %s", fn,
                                        em_dtype_name(em_tensor_dtype(o->weight)),
                                        em_dtype_name(em_tensor_dtype(lp)));
        NN_STEP(nn_class_view(o->weight, r, cd, &wv), wv);
    }
    if (em_tensor_kind(target) == EM_KIND_FLOAT) {
        /* class probabilities, lp's shape: -sum_c w_c t'_c lp_c, t' = (1-eps) t + eps / C */
        if (!nn_same_shape(lp, target)) {
            nn_tmps_free(&tm);
            return em_backend_set_error(EM_ERR_SHAPE, "%s: probability targets must have the "
                                        "input's shape %s, got %s", fn, nn_shape(lp, a, sizeof a),
                                        nn_shape(target, b, sizeof b));
        }
        em_tensor *t = (em_tensor *)target, *ts = NULL, *p = NULL, *pw = NULL, *per = NULL;
        if (eps > 0) {
            NN_STEP(em_mul_scalar(target, 1 - eps, &ts), ts);
            em_tensor *tt = NULL;
            NN_STEP(em_add_scalar(ts, eps / (double)C, &tt), tt);
            t = tt;
        }
        NN_STEP(em_mul(t, lp, &p), p);
        if (wv) NN_STEP(em_mul(p, wv, &pw), pw);
        NN_STEP(em_sum_dim(pw ? pw : p, cd, false, &per), per);
        em_tensor *neg = NULL;
        if (s == EM_OK) s = em_neg(per, &neg);
        nn_tmps_free(&tm);
        if (s != EM_OK) return s;
        return nn_reduce(neg, o->reduction, loss);
    }
    /* class indices: lp's shape without the class dim */
    em_dtype it = em_tensor_dtype(target);
    if (it != EM_I64 && it != EM_I32) {
        nn_tmps_free(&tm);
        return em_backend_set_error(EM_ERR_DTYPE, "%s: targets must be class indices (i64 or "
                                    "i32) or probabilities (%s), got %s", fn,
                                    em_dtype_name(em_tensor_dtype(lp)), em_dtype_name(it));
    }
    bool shape_ok = em_tensor_rank(target) == r - 1;
    for (int d = 0, e = 0; shape_ok && d < r; d++) {
        if (d == cd) continue;
        shape_ok = em_tensor_shape(target)[e++] == em_tensor_shape(lp)[d];
    }
    if (!shape_ok) {
        nn_tmps_free(&tm);
        return em_backend_set_error(EM_ERR_SHAPE, "%s: class-index targets must have the "
                                    "input's shape without its class dim (input %s), got %s", fn,
                                    nn_shape(lp, a, sizeof a), nn_shape(target, b, sizeof b));
    }
    /* ignored targets pick class 0 and count for nothing (mask 0) */
    em_tensor *ign = NULL, *keep = NULL, *zero = NULL, *safe = NULL, *idx = NULL, *picked = NULL;
    em_tensor *nll = NULL, *maskf = NULL;
    NN_STEP(em_eq_scalar(target, (double)o->ignore_index, &ign), ign);
    NN_STEP(em_full_like(target, 0.0, &zero), zero);
    NN_STEP(em_where(ign, zero, target, &safe), safe);
    NN_STEP(em_logical_not(ign, &keep), keep);
    NN_STEP(em_cast(keep, em_tensor_dtype(lp), &maskf), maskf);
    /* range check of the kept indices, as nll_loss's */
    if (s == EM_OK) {
        em_tensor *lo = NULL, *hi = NULL, *bad = NULL, *anyb = NULL, *bf = NULL;
        NN_STEP(em_lt_scalar(safe, 0, &lo), lo);
        NN_STEP(em_gt_scalar(safe, (double)C - 1, &hi), hi);
        NN_STEP(em_logical_or(lo, hi, &bad), bad);
        NN_STEP(em_cast(bad, EM_F32, &bf), bf);
        NN_STEP(em_sum(bf, &anyb), anyb);
        double nbad = 0;
        if (s == EM_OK) s = em_tensor_item(anyb, &nbad);
        if (s == EM_OK && nbad > 0)
            s = em_backend_set_error(EM_ERR_ARG, "%s: %g target(s) outside [0, %lld) that are "
                                     "not ignore_index %lld", fn, nbad, (long long)C,
                                     (long long)o->ignore_index);
    }
    NN_STEP(em_unsqueeze(safe, cd, &idx), idx);
    NN_STEP(em_gather(lp, cd, idx, &picked), picked);
    em_tensor *pk = NULL, *wy = NULL, *w_y = NULL, *num = NULL;
    NN_STEP(em_squeeze(picked, cd, &pk), pk);
    /* the weight of each target's class, 0 where ignored */
    if (o->weight) {
        em_tensor *flat = NULL, *sel = NULL;
        NN_STEP(em_reshape(safe, (const int64_t[]){-1}, 1, &flat), flat);
        NN_STEP(em_index_select(o->weight, 0, flat, &sel), sel);
        NN_STEP(em_reshape(sel, em_tensor_shape(target), em_tensor_rank(target), &wy), wy);
        NN_STEP(em_mul(wy, maskf, &w_y), w_y);
    } else {
        w_y = maskf;
    }
    NN_STEP(em_mul(pk, w_y, &num), num);
    NN_STEP(em_neg(num, &nll), nll);
    /* the mean divides by the weight of the kept targets (their count without weights) */
    em_tensor *den = NULL;
    if (o->reduction == EM_REDUCTION_MEAN) NN_STEP(em_sum(w_y, &den), den);
    em_tensor *main_loss = NULL;
    if (o->reduction == EM_REDUCTION_NONE) main_loss = nll;
    else if (o->reduction == EM_REDUCTION_SUM) NN_STEP(em_sum(nll, &main_loss), main_loss);
    else {
        em_tensor *tot = NULL;
        NN_STEP(em_sum(nll, &tot), tot);
        NN_STEP(em_div(tot, den, &main_loss), main_loss);
    }
    em_tensor *result = main_loss;
    if (eps > 0) {
        /* smoothing: -sum_c w_c lp_c per element (0 where ignored), reduced like the main
         * term, weighted eps / C; the main term (1 - eps) */
        em_tensor *lw = NULL, *sm = NULL, *smn = NULL, *smm = NULL, *sr = NULL, *a1 = NULL,
                  *a2 = NULL, *sum = NULL;
        NN_STEP(wv ? em_mul(lp, wv, &lw) : em_clone(lp, &lw), lw);
        NN_STEP(em_sum_dim(lw, cd, false, &sm), sm);
        NN_STEP(em_neg(sm, &smn), smn);
        NN_STEP(em_mul(smn, maskf, &smm), smm);
        if (o->reduction == EM_REDUCTION_NONE) sr = smm;
        else if (o->reduction == EM_REDUCTION_SUM) NN_STEP(em_sum(smm, &sr), sr);
        else {
            em_tensor *tot = NULL;
            NN_STEP(em_sum(smm, &tot), tot);
            NN_STEP(em_div(tot, den, &sr), sr);
        }
        NN_STEP(em_mul_scalar(main_loss, 1 - eps, &a1), a1);
        NN_STEP(em_mul_scalar(sr, eps / (double)C, &a2), a2);
        NN_STEP(em_add(a1, a2, &sum), sum);
        result = sum;
    }
    if (s == EM_OK) {
        em_tensor_retain(result);
        *loss = result;
    }
    nn_tmps_free(&tm);
    return s;
}

static em_status nn_ce_args(const char *fn, const em_tensor *x, const em_tensor *target,
                            em_tensor **loss, const em_ce_opts *o) {
    if (!x) return nn_null(fn, "input");
    if (!target) return nn_null(fn, "target");
    if (!loss) return nn_null(fn, "loss");
    if (em_tensor_kind(x) != EM_KIND_FLOAT)
        return em_backend_set_error(EM_ERR_DTYPE, "%s: the input must be float, got %s", fn,
                                    em_dtype_name(em_tensor_dtype(x)));
    if (em_tensor_rank(x) < 1)
        return em_backend_set_error(EM_ERR_SHAPE, "%s: the input must be [C] or [N, C, ...], "
                                    "got a 0-d tensor", fn);
    NN_TRY(nn_check_reduction(fn, o->reduction));
    if (!(o->label_smoothing >= 0 && o->label_smoothing <= 1))
        return em_backend_set_error(EM_ERR_ARG, "%s: label_smoothing must be in [0, 1], got %g",
                                    fn, o->label_smoothing);
    return EM_OK;
}

em_status em_loss_cross_entropy_ex(const em_tensor *logits, const em_tensor *target,
                                   const em_ce_opts *opts, em_tensor **loss) {
    static const char fn[] = "em_loss_cross_entropy_ex";
    em_ce_opts o = opts ? *opts : em_ce_opts_default();
    NN_TRY(nn_ce_args(fn, logits, target, loss, &o));
    em_tensor *lp = NULL;
    NN_TRY(em_log_softmax(logits, em_tensor_rank(logits) == 1 ? 0 : 1, &lp));
    em_status s = nn_ce(fn, lp, target, &o, loss);
    em_tensor_release(lp);
    return s;
}

em_status em_loss_nll(const em_tensor *log_probs, const em_tensor *target,
                      const em_ce_opts *opts, em_tensor **loss) {
    static const char fn[] = "em_loss_nll";
    em_ce_opts o = opts ? *opts : em_ce_opts_default();
    NN_TRY(nn_ce_args(fn, log_probs, target, loss, &o));
    if (o.label_smoothing != 0)
        return em_backend_set_error(EM_ERR_ARG, "%s: NLL takes no label smoothing (got %g)", fn,
                                    o.label_smoothing);
    if (em_tensor_kind(target) == EM_KIND_FLOAT)
        return em_backend_set_error(EM_ERR_DTYPE, "%s: targets must be class indices (i64 or "
                                    "i32), got %s", fn, em_dtype_name(em_tensor_dtype(target)));
    return nn_ce(fn, log_probs, target, &o, loss);
}

em_status em_loss_cross_entropy(const em_tensor *logits, const em_tensor *target,
                                em_tensor **loss) {
    static const char fn[] = "em_loss_cross_entropy";
    if (!logits) return nn_null(fn, "logits");
    if (!target) return nn_null(fn, "target");
    if (!loss) return nn_null(fn, "loss");
    return em_cross_entropy(logits, target, loss);
}

/* ---- regression and binary losses: pred and target of one shape and float dtype ---- */

static em_status nn_pair(const char *fn, const em_tensor *pred, const em_tensor *target,
                         em_tensor **loss, em_reduction r) {
    if (!pred) return nn_null(fn, "pred");
    if (!target) return nn_null(fn, "target");
    if (!loss) return nn_null(fn, "loss");
    NN_TRY(nn_check_reduction(fn, r));
    char a[128], b[128];
    if (!nn_same_shape(pred, target))
        return em_backend_set_error(EM_ERR_SHAPE, "%s: pred and target shapes differ: %s and %s",
                                    fn, nn_shape(pred, a, sizeof a), nn_shape(target, b, sizeof b));
    if (em_tensor_dtype(pred) != em_tensor_dtype(target))
        return em_backend_set_error(EM_ERR_DTYPE, "%s: dtypes differ: %s and %s", fn,
                                    em_dtype_name(em_tensor_dtype(pred)),
                                    em_dtype_name(em_tensor_dtype(target)));
    if (em_tensor_kind(pred) != EM_KIND_FLOAT)
        return em_backend_set_error(EM_ERR_DTYPE, "%s: expected float tensors, got %s", fn,
                                    em_dtype_name(em_tensor_dtype(pred)));
    return EM_OK;
}

em_status em_loss_mse_ex(const em_tensor *pred, const em_tensor *target, em_reduction r,
                         em_tensor **loss) {
    NN_TRY(nn_pair("em_loss_mse", pred, target, loss, r));
    nn_tmps tm = {{0}, 0};
    em_status s = EM_OK;
    em_tensor *d = NULL, *sq = NULL;
    NN_STEP(em_sub(pred, target, &d), d);
    if (s == EM_OK) s = em_mul(d, d, &sq);
    nn_tmps_free(&tm);
    return s == EM_OK ? nn_reduce(sq, r, loss) : s;
}

em_status em_loss_mse(const em_tensor *pred, const em_tensor *target, em_tensor **loss) {
    return em_loss_mse_ex(pred, target, EM_REDUCTION_MEAN, loss);
}

em_status em_loss_l1(const em_tensor *pred, const em_tensor *target, em_reduction r,
                     em_tensor **loss) {
    NN_TRY(nn_pair("em_loss_l1", pred, target, loss, r));
    nn_tmps tm = {{0}, 0};
    em_status s = EM_OK;
    em_tensor *d = NULL, *ad = NULL;
    NN_STEP(em_sub(pred, target, &d), d);
    if (s == EM_OK) s = em_abs(d, &ad);
    nn_tmps_free(&tm);
    return s == EM_OK ? nn_reduce(ad, r, loss) : s;
}

/* |d| < k: 0.5 d^2 * qs; else lin * (|d| - 0.5 k) — smooth L1 (qs = 1/beta, lin = 1) and
 * Huber (qs = 1, lin = delta) */
static em_status nn_smooth(const char *fn, const em_tensor *pred, const em_tensor *target,
                           double k, double qs, double lin, em_reduction r, em_tensor **loss) {
    nn_tmps tm = {{0}, 0};
    em_status s = EM_OK;
    em_tensor *d = NULL, *ad = NULL, *q = NULL, *qh = NULL, *l = NULL, *ls = NULL, *c = NULL,
              *out = NULL;
    (void)fn;
    NN_STEP(em_sub(pred, target, &d), d);
    NN_STEP(em_abs(d, &ad), ad);
    NN_STEP(em_mul(d, d, &q), q);
    NN_STEP(em_mul_scalar(q, 0.5 * qs, &qh), qh);
    NN_STEP(em_add_scalar(ad, -0.5 * k, &l), l);
    NN_STEP(em_mul_scalar(l, lin, &ls), ls);
    NN_STEP(em_lt_scalar(ad, k, &c), c);
    if (s == EM_OK) s = em_where(c, qh, ls, &out);
    nn_tmps_free(&tm);
    return s == EM_OK ? nn_reduce(out, r, loss) : s;
}

em_status em_loss_smooth_l1(const em_tensor *pred, const em_tensor *target, double beta,
                            em_reduction r, em_tensor **loss) {
    static const char fn[] = "em_loss_smooth_l1";
    NN_TRY(nn_pair(fn, pred, target, loss, r));
    if (!(beta >= 0) || isinf(beta))
        return em_backend_set_error(EM_ERR_ARG, "%s: beta must be finite and >= 0, got %g", fn,
                                    beta);
    if (beta == 0) return em_loss_l1(pred, target, r, loss);
    return nn_smooth(fn, pred, target, beta, 1.0 / beta, 1.0, r, loss);
}

em_status em_loss_huber(const em_tensor *pred, const em_tensor *target, double delta,
                        em_reduction r, em_tensor **loss) {
    static const char fn[] = "em_loss_huber";
    NN_TRY(nn_pair(fn, pred, target, loss, r));
    if (!(delta > 0) || isinf(delta))
        return em_backend_set_error(EM_ERR_ARG, "%s: delta must be finite and > 0, got %g", fn,
                                    delta);
    /* Huber's quadratic part is |d| <= delta; equal at |d| = delta, so '<' gives the same */
    return nn_smooth(fn, pred, target, delta, 1.0, delta, r, loss);
}

em_status em_loss_bce_with_logits(const em_tensor *logits, const em_tensor *target,
                                  const em_tensor *pos_weight, em_reduction r, em_tensor **loss) {
    static const char fn[] = "em_loss_bce_with_logits";
    NN_TRY(nn_pair(fn, logits, target, loss, r));
    if (pos_weight && em_tensor_dtype(pos_weight) != em_tensor_dtype(logits))
        return em_backend_set_error(EM_ERR_DTYPE, "%s: pos_weight is %s, logits %s", fn,
                                    em_dtype_name(em_tensor_dtype(pos_weight)),
                                    em_dtype_name(em_tensor_dtype(logits)));
    /* (1 - t) x + lw (log(exp(-m) + exp(-x - m)) + m), m = max(-x, 0),
     * lw = 1 + (pos_weight - 1) t (1 without pos_weight): torch's stable form */
    nn_tmps tm = {{0}, 0};
    em_status s = EM_OK;
    em_tensor *nx = NULL, *m = NULL, *nm = NULL, *e1 = NULL, *xm = NULL, *e2 = NULL, *es = NULL,
              *lg = NULL, *sp = NULL, *omt = NULL, *lin = NULL, *pw1 = NULL, *pwt = NULL,
              *lw = NULL, *spw = NULL, *out = NULL;
    NN_STEP(em_neg(logits, &nx), nx);
    NN_STEP(em_relu(nx, &m), m);
    NN_STEP(em_neg(m, &nm), nm);
    NN_STEP(em_exp(nm, &e1), e1);
    NN_STEP(em_sub(nx, m, &xm), xm);
    NN_STEP(em_exp(xm, &e2), e2);
    NN_STEP(em_add(e1, e2, &es), es);
    NN_STEP(em_log(es, &lg), lg);
    NN_STEP(em_add(lg, m, &sp), sp);
    NN_STEP(em_mul_scalar(target, -1.0, &omt), omt);
    em_tensor *omt1 = NULL;
    NN_STEP(em_add_scalar(omt, 1.0, &omt1), omt1);
    NN_STEP(em_mul(omt1, logits, &lin), lin);
    em_tensor *wsp = sp;
    if (pos_weight) {
        NN_STEP(em_add_scalar(pos_weight, -1.0, &pw1), pw1);
        NN_STEP(em_mul(pw1, target, &pwt), pwt);
        NN_STEP(em_add_scalar(pwt, 1.0, &lw), lw);
        NN_STEP(em_mul(lw, sp, &spw), spw);
        wsp = spw;
    }
    if (s == EM_OK) s = em_add(lin, wsp, &out);
    if (s == EM_OK && !nn_same_shape(out, logits)) {
        char a[128], b[128];
        s = em_backend_set_error(EM_ERR_SHAPE, "%s: pos_weight %s does not broadcast to the "
                                 "logits %s", fn, nn_shape(pos_weight, a, sizeof a),
                                 nn_shape(logits, b, sizeof b));
        em_tensor_release(out);
    }
    nn_tmps_free(&tm);
    return s == EM_OK ? nn_reduce(out, r, loss) : s;
}
