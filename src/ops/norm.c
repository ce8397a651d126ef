/*
 * norm.c — the normalization ops beside layer_norm: em_batch_norm (training and eval, the
 * running statistics updated in place), em_group_norm and em_rms_norm, and the internal
 * emi_batch_norm_backward that their autodiff rule calls.
 *
 * Each routes to its backend slot with x viewed as [N, C, S] (or [rows, cols]) contiguous and
 * the [C] parameters contiguous. A backend that leaves a slot NULL (the remote one) gets the
 * op composed from public ops (sum_dim, mul, rsqrt, ...) on untracked values: the same
 * definition, the same saved statistics. Each op records one node of its own with the saved
 * statistics (mean and inverse standard deviation) as extra untracked inputs, so that backward
 * need not recompute them.
 */
#include <math.h>

#include "autodiff/rules/rules.h"
#include "graph/graph_internal.h"

/* Evaluates a status expression into `s` and jumps to `done` when it fails. */
#define NM_TRY(expr)                                                                         \
    do {                                                                                     \
        s = (expr);                                                                          \
        if (s != EM_OK) goto done;                                                           \
    } while (0)

/** t's device without the autodiff wrapping. */
static em_device nm_inner(em_device d) {
    d.autodiff = false;
    d.checkpointing = EM_CKPT_NONE;
    return d;
}

/** An untracked plain view of contiguous t with a new shape (same storage). */
static em_status nm_view(const em_tensor *t, const int64_t *shape, int rank, em_tensor **out) {
    int64_t st[EM_MAX_RANK];
    emi_contiguous_strides(shape, rank, st);
    EMI_TRY(emi_view_tensor(t, shape, st, rank, t->v.offset, out));
    (*out)->dev = nm_inner((*out)->dev);
    (*out)->ckpt = EM_CKPT_NONE;
    return EM_OK;
}

/** An untracked plain view of contiguous t (NULL for NULL) with its own shape. */
static em_status nm_plain(const em_tensor *t, em_tensor **out) {
    *out = NULL;
    return t ? nm_view(t, t->v.shape, t->v.rank, out) : EM_OK;
}

/** A contiguous copy of t when it is not contiguous (*tmp gets it), else t itself. */
static em_status nm_contiguous(const char *fn, const em_tensor *t, const em_tensor **c,
                               em_tensor **tmp) {
    *tmp = NULL;
    *c = t;
    if (!t || emi_view_is_contiguous(&t->v)) return EM_OK;
    EMI_TRY(emi_empty(fn, nm_inner(t->dev), t->v.dtype, t->v.shape, t->v.rank, tmp));
    em_status s = emi_copy_into(fn, *tmp, t);
    if (s != EM_OK) {
        em_tensor_release(*tmp);
        *tmp = NULL;
        return s;
    }
    *c = *tmp;
    return EM_OK;
}

/** The view of contiguous t with the given shape (rank 1..3). */
static em_view nm_flat(const em_tensor *t, int rank, int64_t a, int64_t b, int64_t c) {
    em_view v = t->v;
    const int64_t sh[3] = {a, b, c};
    v.rank = rank;
    for (int d = 0; d < rank; d++) v.shape[d] = sh[d];
    emi_contiguous_strides(v.shape, rank, v.strides);
    return v;
}

/** Checks an optional per-channel tensor: x's dtype and device, shape [C]. */
static em_status nm_check_chan(const char *fn, const char *what, const em_tensor *x,
                               const em_tensor *p, int64_t C) {
    if (!p) return EM_OK;
    EMI_TRY(emi_check_tensor(fn, what, p));
    EMI_TRY(emi_check_same_dtype(fn, x, p));
    EMI_TRY(emi_check_same_device(fn, x, p));
    if (p->v.rank != 1 || p->v.shape[0] != C) {
        char a[128];
        return emi_fail(EM_ERR_SHAPE, "%s: %s has shape %s, expected [%lld] (x's channels)", fn,
                        what, emi_shape_str(p->v.shape, p->v.rank, a, sizeof a), (long long)C);
    }
    return EM_OK;
}

static em_status nm_check_eps(const char *fn, double eps) {
    if (!(eps >= 0) || isinf(eps))
        return emi_fail(EM_ERR_ARG, "%s: eps must be finite and >= 0, got %g", fn, eps);
    return EM_OK;
}

/** t [N, C, S] summed over dims 0 and 2: [C]. */
static em_status nm_chan_sum(const em_tensor *t, em_tensor **out) {
    em_tensor *a = NULL;
    em_status s = em_sum_dim(t, 2, false, &a);
    if (s == EM_OK) s = em_sum_dim(a, 0, false, out);
    em_tensor_release(a);
    return s;
}

/** [C] viewed as [1, C, 1] (a new reference). */
static em_status nm_bc(const em_tensor *t, int64_t C, em_tensor **out) {
    const int64_t sh[3] = {1, C, 1};
    return em_reshape(t, sh, 3, out);
}

/* On the capture device the slots above are NULL, so the ops are recorded composed; the call
 * a device with the slot makes is recorded first (gr_rec_alt_begin), so that a replay on such
 * a device runs that kernel, as its eager run does, and any other device the composition. */
static bool nm_captured(const em_backend_ops *ops) { return ops->id == EM_BACKEND_CAPTURE; }
#define NM_VIEWS(...) ((const em_view *const[RW_MAX_VIEWS]){__VA_ARGS__})

/* ---- batch_norm ---- */

/* The composition of batch_norm (the slot's contract) from public ops: x3 [N, C, S] plain. */
static em_status bn_compose(em_tensor *x3, em_tensor *rm, em_tensor *rv, const em_tensor *w,
                            const em_tensor *b, bool training, double momentum, double eps,
                            em_tensor *o, em_tensor *sm, em_tensor *si) {
    static const char fn[] = "em_batch_norm";
    const int64_t N = x3->v.shape[0], C = x3->v.shape[1], S = x3->v.shape[2], M = N * S;
    em_tensor *sum = NULL, *mean = NULL, *mb = NULL, *xc = NULL, *sq = NULL, *q = NULL,
              *var = NULL, *t = NULL, *inv = NULL, *ib = NULL, *y = NULL, *y2 = NULL, *pb = NULL,
              *r1 = NULL, *r2 = NULL, *sh0 = NULL, *sh = NULL, *xs = NULL, *ms = NULL,
              *msb = NULL;
    em_status s;
    if (training) {
        /* shifted by x[0, c, 0] first, so that |mean| >> std costs no accuracy in the
         * dtype's arithmetic: xs = x - shift (exact near the mean), its mean ms is small,
         * x - mean = xs - ms and mean = shift + ms */
        NM_TRY(em_slice(x3, 0, 0, 1, 1, &sh0));
        NM_TRY(em_slice(sh0, 2, 0, 1, 1, &sh));
        NM_TRY(em_sub(x3, sh, &xs));
        NM_TRY(nm_chan_sum(xs, &sum));
        NM_TRY(em_mul_scalar(sum, 1.0 / (double)M, &ms));
        NM_TRY(nm_bc(ms, C, &msb));
        NM_TRY(em_sub(xs, msb, &xc));
        NM_TRY(em_mul(xc, xc, &sq));
        NM_TRY(nm_chan_sum(sq, &q));
        NM_TRY(em_mul_scalar(q, 1.0 / (double)M, &var));
        NM_TRY(em_reshape(sh, &C, 1, &t));
        NM_TRY(em_add(t, ms, &mean));
        em_tensor_release(t);
        t = NULL;
    } else {
        em_tensor_retain(rm);
        mean = rm;
        em_tensor_retain(rv);
        var = rv;
        NM_TRY(nm_bc(mean, C, &mb));
        NM_TRY(em_sub(x3, mb, &xc));
    }
    NM_TRY(em_add_scalar(var, eps, &t));
    NM_TRY(em_rsqrt(t, &inv));
    NM_TRY(nm_bc(inv, C, &ib));
    NM_TRY(em_mul(xc, ib, &y));
    if (w) {
        NM_TRY(nm_bc(w, C, &pb));
        NM_TRY(em_mul(y, pb, &y2));
        em_tensor_release(y);
        em_tensor_release(pb);
        pb = NULL;
        y = y2;
        y2 = NULL;
    }
    if (b) {
        NM_TRY(nm_bc(b, C, &pb));
        NM_TRY(em_add(y, pb, &y2));
        em_tensor_release(y);
        y = y2;
        y2 = NULL;
    }
    NM_TRY(emi_copy_into(fn, o, y));
    NM_TRY(emi_copy_into(fn, sm, mean));
    NM_TRY(emi_copy_into(fn, si, inv));
    if (training && rm) { /* r = (1 - m) r + m stat, the variance unbiased */
        em_tensor_release(t);
        t = NULL;
        NM_TRY(em_mul_scalar(rm, 1.0 - momentum, &r1));
        NM_TRY(em_mul_scalar(mean, momentum, &t));
        NM_TRY(em_add(r1, t, &r2));
        NM_TRY(emi_copy_into(fn, rm, r2));
        em_tensor_release(r1);
        em_tensor_release(r2);
        em_tensor_release(t);
        r1 = r2 = t = NULL;
        NM_TRY(em_mul_scalar(rv, 1.0 - momentum, &r1));
        NM_TRY(em_mul_scalar(q, momentum / (double)(M > 1 ? M - 1 : 1), &t));
        NM_TRY(em_add(r1, t, &r2));
        NM_TRY(emi_copy_into(fn, rv, r2));
    }
done:
    em_tensor_release(sh0);
    em_tensor_release(sh);
    em_tensor_release(xs);
    em_tensor_release(ms);
    em_tensor_release(msb);
    em_tensor_release(sum);
    em_tensor_release(mean);
    em_tensor_release(mb);
    em_tensor_release(xc);
    em_tensor_release(sq);
    em_tensor_release(q);
    em_tensor_release(var);
    em_tensor_release(t);
    em_tensor_release(inv);
    em_tensor_release(ib);
    em_tensor_release(y);
    em_tensor_release(y2);
    em_tensor_release(pb);
    em_tensor_release(r1);
    em_tensor_release(r2);
    return s;
}

/** Runs the batch_norm slot (or its composition) on x (numel > 0) into o, sm and si. */
static em_status bn_run(const char *fn, const em_tensor *x, em_tensor *rm, em_tensor *rv,
                        const em_tensor *w, const em_tensor *b, bool training, double momentum,
                        double eps, em_tensor *o, em_tensor *sm, em_tensor *si) {
    const int64_t N = x->v.shape[0], C = x->v.shape[1];
    const int64_t S = emi_numel(x->v.shape + 2, x->v.rank - 2);
    const em_backend_ops *ops = x->st->ops;
    const em_tensor *xc = NULL, *wc = NULL, *bc = NULL, *rmc = NULL, *rvc = NULL;
    em_tensor *tx = NULL, *tw = NULL, *tb = NULL, *trm = NULL, *trv = NULL, *x3 = NULL,
              *o3 = NULL, *pw = NULL, *pb = NULL, *prm = NULL, *prv = NULL;
    em_status s;
    NM_TRY(nm_contiguous(fn, x, &xc, &tx));
    NM_TRY(nm_contiguous(fn, rm, &rmc, &trm));
    NM_TRY(nm_contiguous(fn, rv, &rvc, &trv));
    NM_TRY(nm_contiguous(fn, w, &wc, &tw));
    NM_TRY(nm_contiguous(fn, b, &bc, &tb));
    const bool cap = nm_captured(ops);
    if (ops->batch_norm || cap) {
        const em_view ov = nm_flat(o, 3, N, C, S), xv = nm_flat(xc, 3, N, C, S);
        em_view wv, bv, rmv, rvv;
        if (wc) wv = nm_flat(wc, 1, C, 0, 0);
        if (bc) bv = nm_flat(bc, 1, C, 0, 0);
        if (rmc) rmv = nm_flat(rmc, 1, C, 0, 0);
        if (rvc) rvv = nm_flat(rvc, 1, C, 0, 0);
        if (cap) {
            const int64_t ti = training;
            const double d[2] = {momentum, eps};
            NM_TRY(gr_rec_alt_begin(RW_K_BATCH_NORM, 0,
                                    NM_VIEWS(&ov, &sm->v, &si->v, &xv, wc ? &wv : NULL,
                                             bc ? &bv : NULL, rmc ? &rmv : NULL,
                                             rvc ? &rvv : NULL),
                                    &ti, d));
        } else {
            NM_TRY(ops->batch_norm(x->st->ctx, &ov, &sm->v, &si->v, &xv, wc ? &wv : NULL,
                                   bc ? &bv : NULL, rmc ? &rmv : NULL, rvc ? &rvv : NULL,
                                   training, momentum, eps));
        }
    }
    if (!ops->batch_norm) {
        const int64_t sh[3] = {N, C, S};
        NM_TRY(nm_view(xc, sh, 3, &x3));
        NM_TRY(nm_view(o, sh, 3, &o3));
        NM_TRY(nm_plain(wc, &pw));
        NM_TRY(nm_plain(bc, &pb));
        NM_TRY(nm_plain(rmc, &prm));
        NM_TRY(nm_plain(rvc, &prv));
        s = bn_compose(x3, prm, prv, pw, pb, training, momentum, eps, o3, sm, si);
        if (cap) gr_rec_alt_end();
        if (s != EM_OK) goto done;
    }
    /* running statistics that were strided: copied back */
    if (training && trm) NM_TRY(emi_copy_into(fn, rm, trm));
    if (training && trv) NM_TRY(emi_copy_into(fn, rv, trv));
done:
    em_tensor_release(tx);
    em_tensor_release(tw);
    em_tensor_release(tb);
    em_tensor_release(trm);
    em_tensor_release(trv);
    em_tensor_release(x3);
    em_tensor_release(o3);
    em_tensor_release(pw);
    em_tensor_release(pb);
    em_tensor_release(prm);
    em_tensor_release(prv);
    return s;
}

em_status em_batch_norm(const em_tensor *x, em_tensor *running_mean, em_tensor *running_var,
                        const em_tensor *weight, const em_tensor *bias, bool training,
                        double momentum, double eps, em_tensor **out) {
    static const char fn[] = "em_batch_norm";
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_float(fn, x));
    if (x->v.rank < 2) {
        char a[128];
        return emi_fail(EM_ERR_SHAPE, "%s: expected x of rank >= 2 [N, C, ...], got %s", fn,
                        emi_shape_str(x->v.shape, x->v.rank, a, sizeof a));
    }
    const int64_t C = x->v.shape[1];
    EMI_TRY(nm_check_chan(fn, "weight", x, weight, C));
    EMI_TRY(nm_check_chan(fn, "bias", x, bias, C));
    EMI_TRY(nm_check_chan(fn, "running_mean", x, running_mean, C));
    EMI_TRY(nm_check_chan(fn, "running_var", x, running_var, C));
    if ((running_mean == NULL) != (running_var == NULL))
        return emi_fail(EM_ERR_ARG, "%s: running_mean and running_var go together: got %s only",
                        fn, running_mean ? "running_mean" : "running_var");
    if (!training && !running_mean)
        return emi_fail(EM_ERR_ARG, "%s: eval mode (training false) needs running_mean and "
                                    "running_var", fn);
    EMI_TRY(nm_check_eps(fn, eps));
    if (!isfinite(momentum))
        return emi_fail(EM_ERR_ARG, "%s: momentum must be finite, got %g", fn, momentum);
    const int64_t numel = emi_numel(x->v.shape, x->v.rank);
    if (training && C > 0 && numel / C == 1) {
        char a[128];
        return emi_fail(EM_ERR_SHAPE, "%s: expected more than 1 value per channel when "
                                      "training, got x of shape %s", fn,
                        emi_shape_str(x->v.shape, x->v.rank, a, sizeof a));
    }
    const em_backend_ops *ops = x->st->ops;
    EMI_TRY(emi_need(fn, ops, ops->reduce != NULL, "reduce"));
    const em_tensor *ins[5] = {x, weight, bias, NULL, NULL};
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, ins, 3, &ad));
    em_tensor *o = NULL, *sm = NULL, *si = NULL;
    em_status s;
    NM_TRY(emi_empty(fn, emi_result_device(ins, 1), x->v.dtype, x->v.shape, x->v.rank, &o));
    if (numel > 0) {
        NM_TRY(emi_empty(fn, nm_inner(x->dev), x->v.dtype, &C, 1, &sm));
        NM_TRY(emi_empty(fn, nm_inner(x->dev), x->v.dtype, &C, 1, &si));
        NM_TRY(bn_run(fn, x, running_mean, running_var, weight, bias, training, momentum, eps,
                      o, sm, si));
    } else { /* no values: the statistics of nothing (the running ones unchanged) */
        NM_TRY(em_full(&C, 1, 0.0, x->v.dtype, nm_inner(x->dev), &sm));
        NM_TRY(em_full(&C, 1, 1.0, x->v.dtype, nm_inner(x->dev), &si));
    }
    ins[3] = sm;
    ins[4] = si;
    const emi_rule_batch_norm_params rp = {training, eps};
    NM_TRY(emi_ad_end(&ad, training ? &emi_rule_batch_norm : &emi_rule_batch_norm_eval, ins, 5,
                      o, &rp, sizeof rp));
done:
    em_tensor_release(sm);
    em_tensor_release(si);
    if (s != EM_OK) {
        em_tensor_release(o);
        return s;
    }
    *out = o;
    return EM_OK;
}

/* The composition of batch_norm_backward from public ops: gy3, x3 [N, C, S] plain. */
static em_status bn_bw_compose(const em_tensor *gy3, const em_tensor *x3, const em_tensor *mean,
                               const em_tensor *invstd, const em_tensor *w, bool training,
                               em_tensor *gx3, em_tensor *gw, em_tensor *gb) {
    static const char fn[] = "em_batch_norm";
    const int64_t N = x3->v.shape[0], C = x3->v.shape[1], S = x3->v.shape[2], M = N * S;
    em_tensor *mb = NULL, *ib = NULL, *xc = NULL, *xh = NULL, *sg = NULL, *p = NULL,
              *sgx = NULL, *k = NULL, *kb = NULL, *t = NULL, *u = NULL, *a = NULL, *ab = NULL;
    em_status s;
    NM_TRY(nm_bc(mean, C, &mb));
    NM_TRY(nm_bc(invstd, C, &ib));
    NM_TRY(em_sub(x3, mb, &xc));
    NM_TRY(em_mul(xc, ib, &xh));
    NM_TRY(nm_chan_sum(gy3, &sg));
    NM_TRY(em_mul(gy3, xh, &p));
    NM_TRY(nm_chan_sum(p, &sgx));
    if (gb) NM_TRY(emi_copy_into(fn, gb, sg));
    if (gw) NM_TRY(emi_copy_into(fn, gw, sgx));
    if (gx3) {
        if (w) NM_TRY(em_mul(invstd, w, &k));
        else {
            em_tensor_retain((em_tensor *)invstd);
            k = (em_tensor *)invstd;
        }
        NM_TRY(nm_bc(k, C, &kb));
        if (training) {
            NM_TRY(em_mul_scalar(sg, 1.0 / (double)M, &a));
            NM_TRY(nm_bc(a, C, &ab));
            NM_TRY(em_sub(gy3, ab, &t));
            em_tensor_release(a);
            em_tensor_release(ab);
            a = ab = NULL;
            NM_TRY(em_mul_scalar(sgx, 1.0 / (double)M, &a));
            NM_TRY(nm_bc(a, C, &ab));
            NM_TRY(em_mul(xh, ab, &u));
            em_tensor_release(p);
            p = NULL;
            NM_TRY(em_sub(t, u, &p));
            em_tensor_release(t);
            t = NULL;
            NM_TRY(em_mul(p, kb, &t));
        } else {
            NM_TRY(em_mul(gy3, kb, &t));
        }
        NM_TRY(emi_copy_into(fn, gx3, t));
    }
done:
    em_tensor_release(mb);
    em_tensor_release(ib);
    em_tensor_release(xc);
    em_tensor_release(xh);
    em_tensor_release(sg);
    em_tensor_release(p);
    em_tensor_release(sgx);
    em_tensor_release(k);
    em_tensor_release(kb);
    em_tensor_release(t);
    em_tensor_release(u);
    em_tensor_release(a);
    em_tensor_release(ab);
    return s;
}

em_status emi_batch_norm_backward(const em_tensor *gy, const em_tensor *x, const em_tensor *mean,
                                  const em_tensor *invstd, const em_tensor *weight, bool training,
                                  em_tensor **gx, em_tensor **gw, em_tensor **gb) {
    static const char fn[] = "em_batch_norm";
    const int64_t N = x->v.shape[0], C = x->v.shape[1];
    const int64_t S = emi_numel(x->v.shape + 2, x->v.rank - 2);
    const em_device dev = nm_inner(x->dev);
    const em_dtype dt = x->v.dtype;
    em_tensor *ogx = NULL, *ogw = NULL, *ogb = NULL, *tg = NULL, *tx = NULL, *tm = NULL,
              *ti = NULL, *tw = NULL, *g3 = NULL, *x3 = NULL, *gx3 = NULL;
    const em_tensor *gc = NULL, *xc = NULL, *mc = NULL, *ic = NULL, *wc = NULL;
    em_status s;
    if (N * C * S == 0) {
        if (gx) NM_TRY(em_zeros(x->v.shape, x->v.rank, dt, dev, &ogx));
        if (gw) NM_TRY(em_zeros(&C, 1, dt, dev, &ogw));
        if (gb) NM_TRY(em_zeros(&C, 1, dt, dev, &ogb));
        goto done;
    }
    if (gx) NM_TRY(emi_empty(fn, dev, dt, x->v.shape, x->v.rank, &ogx));
    if (gw) NM_TRY(emi_empty(fn, dev, dt, &C, 1, &ogw));
    if (gb) NM_TRY(emi_empty(fn, dev, dt, &C, 1, &ogb));
    NM_TRY(nm_contiguous(fn, gy, &gc, &tg));
    NM_TRY(nm_contiguous(fn, x, &xc, &tx));
    const em_backend_ops *ops = x->st->ops;
    const bool cap = nm_captured(ops);
    if (ops->batch_norm_backward || cap) {
        NM_TRY(nm_contiguous(fn, mean, &mc, &tm));
        NM_TRY(nm_contiguous(fn, invstd, &ic, &ti));
        NM_TRY(nm_contiguous(fn, weight, &wc, &tw));
        const em_view gyv = nm_flat(gc, 3, N, C, S), xv = nm_flat(xc, 3, N, C, S);
        const em_view mv = nm_flat(mc, 1, C, 0, 0), iv = nm_flat(ic, 1, C, 0, 0);
        em_view gxv, gwv, gbv, wv;
        if (ogx) gxv = nm_flat(ogx, 3, N, C, S);
        if (ogw) gwv = nm_flat(ogw, 1, C, 0, 0);
        if (ogb) gbv = nm_flat(ogb, 1, C, 0, 0);
        if (wc) wv = nm_flat(wc, 1, C, 0, 0);
        if (cap) {
            const int64_t tr = training;
            NM_TRY(gr_rec_alt_begin(RW_K_BATCH_NORM_BACKWARD, 0,
                                    NM_VIEWS(ogx ? &gxv : NULL, ogw ? &gwv : NULL,
                                             ogb ? &gbv : NULL, &gyv, &xv, &mv, &iv,
                                             wc ? &wv : NULL),
                                    &tr, NULL));
        } else {
            NM_TRY(ops->batch_norm_backward(x->st->ctx, ogx ? &gxv : NULL, ogw ? &gwv : NULL,
                                            ogb ? &gbv : NULL, &gyv, &xv, &mv, &iv,
                                            wc ? &wv : NULL, training));
        }
    }
    if (!ops->batch_norm_backward) {
        const int64_t sh[3] = {N, C, S};
        NM_TRY(nm_view(gc, sh, 3, &g3));
        NM_TRY(nm_view(xc, sh, 3, &x3));
        if (ogx) NM_TRY(nm_view(ogx, sh, 3, &gx3));
        s = bn_bw_compose(g3, x3, mean, invstd, weight, training, gx3, ogw, ogb);
        if (cap) gr_rec_alt_end();
        if (s != EM_OK) goto done;
    }
done:
    em_tensor_release(tg);
    em_tensor_release(tx);
    em_tensor_release(tm);
    em_tensor_release(ti);
    em_tensor_release(tw);
    em_tensor_release(g3);
    em_tensor_release(x3);
    em_tensor_release(gx3);
    if (s != EM_OK) {
        em_tensor_release(ogx);
        em_tensor_release(ogw);
        em_tensor_release(ogb);
        return s;
    }
    if (gx) *gx = ogx;
    if (gw) *gw = ogw;
    if (gb) *gb = ogb;
    return EM_OK;
}

/* ---- group_norm ---- */

/* The composition of group_norm from public ops: x3 [N, C, S] plain, o3 likewise. */
static em_status gn_compose(em_tensor *x3, int64_t G, const em_tensor *w, const em_tensor *b,
                            double eps, em_tensor *o3, em_tensor *sm, em_tensor *si) {
    static const char fn[] = "em_group_norm";
    const int64_t N = x3->v.shape[0], C = x3->v.shape[1], S = x3->v.shape[2];
    const int64_t r2[2] = {N * G, (C / G) * S}, sh[3] = {N, C, S}, ng[2] = {N, G};
    em_tensor *xr = NULL, *mean = NULL, *var = NULL, *t = NULL, *inv = NULL, *xc = NULL,
              *y = NULL, *y3 = NULL, *pb = NULL, *y2 = NULL, *m2 = NULL, *i2 = NULL, *sh0 = NULL,
              *xs = NULL, *ms = NULL;
    em_status s;
    /* shifted by each row's first element, as bn_compose */
    NM_TRY(em_reshape(x3, r2, 2, &xr));
    NM_TRY(em_slice(xr, 1, 0, 1, 1, &sh0));
    NM_TRY(em_sub(xr, sh0, &xs));
    NM_TRY(em_mean_dim(xs, 1, true, &ms));
    NM_TRY(em_var_dim(xs, 1, 0, true, &var));
    NM_TRY(em_add_scalar(var, eps, &t));
    NM_TRY(em_rsqrt(t, &inv));
    NM_TRY(em_sub(xs, ms, &xc));
    NM_TRY(em_mul(xc, inv, &y));
    NM_TRY(em_add(sh0, ms, &mean));
    NM_TRY(em_reshape(y, sh, 3, &y3));
    if (w) {
        NM_TRY(nm_bc(w, C, &pb));
        NM_TRY(em_mul(y3, pb, &y2));
        em_tensor_release(y3);
        em_tensor_release(pb);
        pb = NULL;
        y3 = y2;
        y2 = NULL;
    }
    if (b) {
        NM_TRY(nm_bc(b, C, &pb));
        NM_TRY(em_add(y3, pb, &y2));
        em_tensor_release(y3);
        y3 = y2;
        y2 = NULL;
    }
    NM_TRY(emi_copy_into(fn, o3, y3));
    NM_TRY(em_reshape(mean, ng, 2, &m2));
    NM_TRY(em_reshape(inv, ng, 2, &i2));
    NM_TRY(emi_copy_into(fn, sm, m2));
    NM_TRY(emi_copy_into(fn, si, i2));
done:
    em_tensor_release(sh0);
    em_tensor_release(xs);
    em_tensor_release(ms);
    em_tensor_release(xr);
    em_tensor_release(mean);
    em_tensor_release(var);
    em_tensor_release(t);
    em_tensor_release(inv);
    em_tensor_release(xc);
    em_tensor_release(y);
    em_tensor_release(y3);
    em_tensor_release(pb);
    em_tensor_release(y2);
    em_tensor_release(m2);
    em_tensor_release(i2);
    return s;
}

em_status em_group_norm(const em_tensor *x, int64_t num_groups, const em_tensor *weight,
                        const em_tensor *bias, double eps, em_tensor **out) {
    static const char fn[] = "em_group_norm";
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_float(fn, x));
    if (x->v.rank < 2) {
        char a[128];
        return emi_fail(EM_ERR_SHAPE, "%s: expected x of rank >= 2 [N, C, ...], got %s", fn,
                        emi_shape_str(x->v.shape, x->v.rank, a, sizeof a));
    }
    const int64_t N = x->v.shape[0], C = x->v.shape[1];
    const int64_t S = emi_numel(x->v.shape + 2, x->v.rank - 2);
    if (num_groups < 1 || C % num_groups != 0)
        return emi_fail(EM_ERR_ARG, "%s: num_groups %lld must be >= 1 and divide the %lld "
                                    "channels", fn, (long long)num_groups, (long long)C);
    EMI_TRY(nm_check_chan(fn, "weight", x, weight, C));
    EMI_TRY(nm_check_chan(fn, "bias", x, bias, C));
    EMI_TRY(nm_check_eps(fn, eps));
    const em_backend_ops *ops = x->st->ops;
    EMI_TRY(emi_need(fn, ops, ops->reduce != NULL, "reduce"));
    const em_tensor *ins[5] = {x, weight, bias, NULL, NULL};
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, ins, 3, &ad));
    const int64_t ng[2] = {N, num_groups}, sh[3] = {N, C, S};
    em_tensor *o = NULL, *sm = NULL, *si = NULL, *tx = NULL, *tw = NULL, *tb = NULL, *x3 = NULL,
              *o3 = NULL, *pw = NULL, *pb = NULL;
    const em_tensor *xc = NULL, *wc = NULL, *bc = NULL;
    em_status s;
    NM_TRY(emi_empty(fn, emi_result_device(ins, 1), x->v.dtype, x->v.shape, x->v.rank, &o));
    if (N * C * S == 0) {
        NM_TRY(em_full(ng, 2, 0.0, x->v.dtype, nm_inner(x->dev), &sm));
        NM_TRY(em_full(ng, 2, 1.0, x->v.dtype, nm_inner(x->dev), &si));
    } else {
        NM_TRY(emi_empty(fn, nm_inner(x->dev), x->v.dtype, ng, 2, &sm));
        NM_TRY(emi_empty(fn, nm_inner(x->dev), x->v.dtype, ng, 2, &si));
        NM_TRY(nm_contiguous(fn, x, &xc, &tx));
        NM_TRY(nm_contiguous(fn, weight, &wc, &tw));
        NM_TRY(nm_contiguous(fn, bias, &bc, &tb));
        const bool cap = nm_captured(ops);
        if (ops->group_norm || cap) {
            const em_view ov = nm_flat(o, 3, N, C, S), xv = nm_flat(xc, 3, N, C, S);
            em_view wv, bv;
            if (wc) wv = nm_flat(wc, 1, C, 0, 0);
            if (bc) bv = nm_flat(bc, 1, C, 0, 0);
            if (cap)
                NM_TRY(gr_rec_alt_begin(RW_K_GROUP_NORM, 0,
                                        NM_VIEWS(&ov, &sm->v, &si->v, &xv, wc ? &wv : NULL,
                                                 bc ? &bv : NULL, NULL, NULL),
                                        &num_groups, &eps));
            else
                NM_TRY(ops->group_norm(x->st->ctx, &ov, &sm->v, &si->v, &xv, wc ? &wv : NULL,
                                       bc ? &bv : NULL, num_groups, eps));
        }
        if (!ops->group_norm) {
            NM_TRY(nm_view(xc, sh, 3, &x3));
            NM_TRY(nm_view(o, sh, 3, &o3));
            NM_TRY(nm_plain(wc, &pw));
            NM_TRY(nm_plain(bc, &pb));
            s = gn_compose(x3, num_groups, pw, pb, eps, o3, sm, si);
            if (cap) gr_rec_alt_end();
            if (s != EM_OK) goto done;
        }
    }
    ins[3] = sm;
    ins[4] = si;
    const emi_rule_group_norm_params rp = {num_groups, eps};
    NM_TRY(emi_ad_end(&ad, &emi_rule_group_norm, ins, 5, o, &rp, sizeof rp));
done:
    em_tensor_release(sm);
    em_tensor_release(si);
    em_tensor_release(tx);
    em_tensor_release(tw);
    em_tensor_release(tb);
    em_tensor_release(x3);
    em_tensor_release(o3);
    em_tensor_release(pw);
    em_tensor_release(pb);
    if (s != EM_OK) {
        em_tensor_release(o);
        return s;
    }
    *out = o;
    return EM_OK;
}

/* ---- rms_norm ---- */

/* The composition of rms_norm from public ops: x2 [rows, cols] plain, o2 likewise. */
static em_status rms_compose(em_tensor *x2, const em_tensor *w, double eps, em_tensor *o2,
                             em_tensor *si) {
    static const char fn[] = "em_rms_norm";
    const int64_t rows = x2->v.shape[0], cols = x2->v.shape[1];
    em_tensor *sq = NULL, *ms = NULL, *t = NULL, *inv = NULL, *y = NULL, *w1 = NULL, *y2 = NULL,
              *i1 = NULL;
    em_status s;
    NM_TRY(em_mul(x2, x2, &sq));
    NM_TRY(em_mean_dim(sq, 1, true, &ms));
    NM_TRY(em_add_scalar(ms, eps, &t));
    NM_TRY(em_rsqrt(t, &inv));
    NM_TRY(em_mul(x2, inv, &y));
    if (w) {
        NM_TRY(em_reshape(w, &cols, 1, &w1));
        NM_TRY(em_mul(y, w1, &y2));
        em_tensor_release(y);
        y = y2;
        y2 = NULL;
    }
    NM_TRY(emi_copy_into(fn, o2, y));
    NM_TRY(em_reshape(inv, &rows, 1, &i1));
    NM_TRY(emi_copy_into(fn, si, i1));
done:
    em_tensor_release(sq);
    em_tensor_release(ms);
    em_tensor_release(t);
    em_tensor_release(inv);
    em_tensor_release(y);
    em_tensor_release(w1);
    em_tensor_release(y2);
    em_tensor_release(i1);
    return s;
}

em_status em_rms_norm(const em_tensor *x, int normalized_ndim, const em_tensor *weight,
                      double eps, em_tensor **out) {
    static const char fn[] = "em_rms_norm";
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_float(fn, x));
    const int nd = normalized_ndim;
    if (nd < 1 || nd > x->v.rank)
        return emi_fail(EM_ERR_ARG, "%s: normalized_ndim %d must be in 1..%d (x's rank)", fn, nd,
                        x->v.rank);
    if (weight) {
        EMI_TRY(emi_check_tensor(fn, "weight", weight));
        EMI_TRY(emi_check_same_dtype(fn, x, weight));
        EMI_TRY(emi_check_same_device(fn, x, weight));
        const int64_t *trail = x->v.shape + (x->v.rank - nd);
        if (!emi_same_shape(weight->v.shape, weight->v.rank, trail, nd)) {
            char a[128], b[128];
            return emi_fail(EM_ERR_SHAPE, "%s: weight has shape %s, expected the normalized "
                                          "shape %s", fn,
                            emi_shape_str(weight->v.shape, weight->v.rank, a, sizeof a),
                            emi_shape_str(trail, nd, b, sizeof b));
        }
    }
    EMI_TRY(nm_check_eps(fn, eps));
    const em_backend_ops *ops = x->st->ops;
    EMI_TRY(emi_need(fn, ops, ops->reduce != NULL, "reduce"));
    const em_tensor *ins[3] = {x, weight, NULL};
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, ins, 2, &ad));
    const int64_t numel = emi_numel(x->v.shape, x->v.rank);
    const int64_t cols = emi_numel(x->v.shape + (x->v.rank - nd), nd);
    const int64_t rows = emi_numel(x->v.shape, x->v.rank - nd);
    const int64_t sh[2] = {rows, cols};
    em_tensor *o = NULL, *si = NULL, *tx = NULL, *tw = NULL, *x2 = NULL, *o2 = NULL, *pw = NULL;
    const em_tensor *xc = NULL, *wc = NULL;
    em_status s;
    NM_TRY(emi_empty(fn, emi_result_device(ins, 1), x->v.dtype, x->v.shape, x->v.rank, &o));
    if (numel == 0) {
        NM_TRY(em_full(&rows, 1, 1.0, x->v.dtype, nm_inner(x->dev), &si));
    } else {
        NM_TRY(emi_empty(fn, nm_inner(x->dev), x->v.dtype, &rows, 1, &si));
        NM_TRY(nm_contiguous(fn, x, &xc, &tx));
        NM_TRY(nm_contiguous(fn, weight, &wc, &tw));
        const bool cap = nm_captured(ops);
        if (ops->rms_norm || cap) {
            const em_view ov = nm_flat(o, 2, rows, cols, 0), xv = nm_flat(xc, 2, rows, cols, 0);
            em_view wv;
            if (wc) wv = nm_flat(wc, 1, cols, 0, 0);
            if (cap)
                NM_TRY(gr_rec_alt_begin(RW_K_RMS_NORM, 0,
                                        NM_VIEWS(&ov, &si->v, &xv, wc ? &wv : NULL, NULL, NULL,
                                                 NULL, NULL),
                                        &cols, &eps));
            else
                NM_TRY(ops->rms_norm(x->st->ctx, &ov, &si->v, &xv, wc ? &wv : NULL, cols, eps));
        }
        if (!ops->rms_norm) {
            NM_TRY(nm_view(xc, sh, 2, &x2));
            NM_TRY(nm_view(o, sh, 2, &o2));
            NM_TRY(nm_plain(wc, &pw));
            s = rms_compose(x2, pw, eps, o2, si);
            if (cap) gr_rec_alt_end();
            if (s != EM_OK) goto done;
        }
    }
    ins[2] = si;
    const emi_rule_rms_norm_params rp = {nd, eps};
    NM_TRY(emi_ad_end(&ad, &emi_rule_rms_norm, ins, 3, o, &rp, sizeof rp));
done:
    em_tensor_release(si);
    em_tensor_release(tx);
    em_tensor_release(tw);
    em_tensor_release(x2);
    em_tensor_release(o2);
    em_tensor_release(pw);
    if (s != EM_OK) {
        em_tensor_release(o);
        return s;
    }
    *out = o;
    return EM_OK;
}
