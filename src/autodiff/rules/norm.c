/* norm.c — backward rules of batch_norm, group_norm and rms_norm (src/ops/norm.c). Each op
 * records the statistics its forward used (mean and inverse standard deviation, untracked)
 * as extra inputs, so backward reads them instead of recomputing them.
 *
 * batch_norm's gradients come from the batch_norm_backward slot (one per-channel reduction
 * and one elementwise pass; composed when a backend leaves it NULL). group_norm and rms_norm
 * compose theirs from public ops:
 *   group_norm, per (n, group) with xhat = (x - mean) * invstd and gh = gy * weight:
 *     gx = (gh - mean(gh) - xhat * mean(gh * xhat)) * invstd,
 *   rms_norm, per row with xhat = x * invrms and gh = gy * weight:
 *     gx = (gh - xhat * mean(gh * xhat)) * invrms,
 *   and for both gweight = sum of gy * xhat, gbias = sum of gy over all but the channel. */
#include "autodiff/rules/rules.h"

#define NR_TRY(expr)                                                                         \
    do {                                                                                     \
        s = (expr);                                                                          \
        if (s != EM_OK) goto done;                                                           \
    } while (0)

static em_device nr_inner(const em_tensor *t) {
    em_device d = em_tensor_device(t);
    d.autodiff = false;
    d.checkpointing = EM_CKPT_NONE;
    return d;
}

/* ---- batch_norm ---- */

static em_status batch_norm_backward(emi_ad_bw *bw) {
    const emi_rule_batch_norm_params *p = bw->params;
    em_tensor *x = NULL, *w = NULL, *mean = NULL, *inv = NULL, *gx = NULL, *gw = NULL,
              *gb = NULL;
    em_status s;
    int wr;
    emi_bw_in_shape(bw, 1, &wr);
    NR_TRY(emi_bw_input(bw, 0, &x));
    if (wr >= 0 && bw->need[0]) NR_TRY(emi_bw_input(bw, 1, &w));
    NR_TRY(emi_bw_input(bw, 3, &mean));
    NR_TRY(emi_bw_input(bw, 4, &inv));
    NR_TRY(emi_batch_norm_backward(bw->grad, x, mean, inv, w, p->training,
                                   bw->need[0] ? &gx : NULL, bw->need[1] ? &gw : NULL,
                                   bw->need[2] ? &gb : NULL));
    bw->gin[0] = gx;
    bw->gin[1] = gw;
    bw->gin[2] = gb;
done:
    return s;
}

/* The training forward again, without the running statistics (the forward updated them
 * already): the batch statistics come from the same x through the same kernel, so the output
 * is the same bits. */
static em_status batch_norm_forward(const void *p, em_tensor *const *in, int nin,
                                    em_tensor **out) {
    (void)nin;
    const emi_rule_batch_norm_params *r = p;
    return em_batch_norm(in[0], NULL, NULL, in[1], in[2], true, 0.0, r->eps, out);
}

#define BN_NEEDS (EMI_NEED_IN(0) | EMI_NEED_IN(1) | EMI_NEED_IN(3) | EMI_NEED_IN(4))
const emi_ad_rule emi_rule_batch_norm = {"batch_norm", false, BN_NEEDS, batch_norm_forward,
                                         batch_norm_backward};
/* Eval: not recomputable, the running statistics it read may be updated in place later. */
const emi_ad_rule emi_rule_batch_norm_eval = {"batch_norm", false, BN_NEEDS, NULL,
                                              batch_norm_backward};

/* ---- group_norm ---- */

static em_status group_norm_forward(const void *p, em_tensor *const *in, int nin,
                                    em_tensor **out) {
    (void)nin;
    const emi_rule_group_norm_params *g = p;
    return em_group_norm(in[0], g->groups, in[1], in[2], g->eps, out);
}

/* gin[i] = zeros of input i's shape for i < n. */
static em_status nr_zero_grads(emi_ad_bw *bw, int n) {
    em_status s = EM_OK;
    for (int i = 0; i < n && s == EM_OK; i++) {
        if (!bw->need[i]) continue;
        int r;
        const int64_t *sh = emi_bw_in_shape(bw, i, &r);
        s = em_zeros(sh, r, emi_bw_in_dtype(bw, i), nr_inner(bw->grad), &bw->gin[i]);
    }
    return s;
}

/* t [N, C, S] summed over dims 0 and 2, reshaped to `shape`. */
static em_status nr_chan_sum(const em_tensor *t, const int64_t *shape, int rank,
                             em_tensor **out) {
    em_tensor *a = NULL, *b = NULL;
    em_status s = em_sum_dim(t, 2, false, &a);
    if (s == EM_OK) s = em_sum_dim(a, 0, false, &b);
    if (s == EM_OK) s = em_reshape(b, shape, rank, out);
    em_tensor_release(a);
    em_tensor_release(b);
    return s;
}

static em_status group_norm_backward(emi_ad_bw *bw) {
    const emi_rule_group_norm_params *p = bw->params;
    int xr, wr;
    const int64_t *xs = emi_bw_in_shape(bw, 0, &xr);
    const int64_t *ws = emi_bw_in_shape(bw, 1, &wr);
    const int64_t N = xs[0], C = xs[1], G = p->groups;
    int64_t S = 1;
    for (int d = 2; d < xr; d++) S *= xs[d];
    if (N * C * S == 0) return nr_zero_grads(bw, 3);
    const int64_t s3[3] = {N, C, S}, g3[3] = {N, G, (C / G) * S}, st[3] = {N, G, 1},
                  c1[3] = {1, C, 1};
    em_tensor *x = NULL, *w = NULL, *mean = NULL, *inv = NULL, *xg = NULL, *m3 = NULL,
              *i3 = NULL, *xc = NULL, *xh = NULL, *xh3 = NULL, *gy3 = NULL, *t = NULL,
              *w3 = NULL, *gh = NULL, *ghg = NULL, *m1 = NULL, *m2 = NULL, *u = NULL, *v = NULL;
    em_status s;
    NR_TRY(emi_bw_input(bw, 0, &x));
    NR_TRY(emi_bw_input(bw, 3, &mean));
    NR_TRY(emi_bw_input(bw, 4, &inv));
    NR_TRY(em_reshape(x, g3, 3, &xg));
    NR_TRY(em_reshape(mean, st, 3, &m3));
    NR_TRY(em_reshape(inv, st, 3, &i3));
    NR_TRY(em_sub(xg, m3, &xc));
    NR_TRY(em_mul(xc, i3, &xh)); /* [N, G, K] */
    NR_TRY(em_reshape(xh, s3, 3, &xh3));
    NR_TRY(em_reshape(bw->grad, s3, 3, &gy3));
    if (bw->need[2]) {
        int br;
        const int64_t *bs = emi_bw_in_shape(bw, 2, &br);
        NR_TRY(nr_chan_sum(gy3, bs, br, &bw->gin[2]));
    }
    if (bw->need[1]) {
        NR_TRY(em_mul(gy3, xh3, &t));
        NR_TRY(nr_chan_sum(t, ws, wr, &bw->gin[1]));
        em_tensor_release(t);
        t = NULL;
    }
    if (bw->need[0]) {
        if (wr >= 0) {
            NR_TRY(emi_bw_input(bw, 1, &w));
            NR_TRY(em_reshape(w, c1, 3, &w3));
            NR_TRY(em_mul(gy3, w3, &gh));
        } else {
            em_tensor_retain(gy3);
            gh = gy3;
        }
        NR_TRY(em_reshape(gh, g3, 3, &ghg));
        NR_TRY(em_mean_dim(ghg, 2, true, &m1));
        NR_TRY(em_mul(ghg, xh, &t));
        NR_TRY(em_mean_dim(t, 2, true, &m2));
        em_tensor_release(t);
        t = NULL;
        NR_TRY(em_mul(xh, m2, &u));
        NR_TRY(em_sub(ghg, m1, &v));
        NR_TRY(em_sub(v, u, &t));
        em_tensor_release(v);
        v = NULL;
        NR_TRY(em_mul(t, i3, &v));
        NR_TRY(em_reshape(v, xs, xr, &bw->gin[0]));
    }
done:
    em_tensor_release(xg);
    em_tensor_release(m3);
    em_tensor_release(i3);
    em_tensor_release(xc);
    em_tensor_release(xh);
    em_tensor_release(xh3);
    em_tensor_release(gy3);
    em_tensor_release(t);
    em_tensor_release(w3);
    em_tensor_release(gh);
    em_tensor_release(ghg);
    em_tensor_release(m1);
    em_tensor_release(m2);
    em_tensor_release(u);
    em_tensor_release(v);
    return s;
}

const emi_ad_rule emi_rule_group_norm = {
    "group_norm", false, EMI_NEED_IN(0) | EMI_NEED_IN(1) | EMI_NEED_IN(3) | EMI_NEED_IN(4),
    group_norm_forward, group_norm_backward};

/* ---- rms_norm ---- */

static em_status rms_norm_forward(const void *p, em_tensor *const *in, int nin,
                                  em_tensor **out) {
    (void)nin;
    const emi_rule_rms_norm_params *r = p;
    return em_rms_norm(in[0], r->normalized_ndim, in[1], r->eps, out);
}

static em_status rms_norm_backward(emi_ad_bw *bw) {
    const emi_rule_rms_norm_params *p = bw->params;
    int xr, wr;
    const int64_t *xs = emi_bw_in_shape(bw, 0, &xr);
    const int64_t *ws = emi_bw_in_shape(bw, 1, &wr);
    int64_t rows = 1, cols = 1;
    for (int d = 0; d < xr; d++) {
        if (d < xr - p->normalized_ndim) rows *= xs[d];
        else cols *= xs[d];
    }
    if (rows * cols == 0) return nr_zero_grads(bw, 2);
    const int64_t s2[2] = {rows, cols}, r1[2] = {rows, 1};
    em_tensor *x = NULL, *w = NULL, *inv = NULL, *x2 = NULL, *i2 = NULL, *xh = NULL,
              *g2 = NULL, *t = NULL, *u = NULL, *w1 = NULL, *gh = NULL, *m = NULL, *v = NULL;
    em_status s;
    NR_TRY(emi_bw_input(bw, 0, &x));
    NR_TRY(emi_bw_input(bw, 2, &inv));
    NR_TRY(em_reshape(x, s2, 2, &x2));
    NR_TRY(em_reshape(inv, r1, 2, &i2));
    NR_TRY(em_mul(x2, i2, &xh));
    NR_TRY(em_reshape(bw->grad, s2, 2, &g2));
    if (bw->need[1]) {
        NR_TRY(em_mul(g2, xh, &t));
        NR_TRY(em_sum_dim(t, 0, false, &u));
        NR_TRY(em_reshape(u, ws, wr, &bw->gin[1]));
        em_tensor_release(t);
        em_tensor_release(u);
        t = u = NULL;
    }
    if (bw->need[0]) {
        if (wr >= 0) {
            NR_TRY(emi_bw_input(bw, 1, &w));
            NR_TRY(em_reshape(w, &cols, 1, &w1));
            NR_TRY(em_mul(g2, w1, &gh));
        } else {
            em_tensor_retain(g2);
            gh = g2;
        }
        NR_TRY(em_mul(gh, xh, &t));
        NR_TRY(em_mean_dim(t, 1, true, &m));
        NR_TRY(em_mul(xh, m, &u));
        NR_TRY(em_sub(gh, u, &v));
        em_tensor_release(t);
        t = NULL;
        NR_TRY(em_mul(v, i2, &t));
        NR_TRY(em_reshape(t, xs, xr, &bw->gin[0]));
    }
done:
    em_tensor_release(x2);
    em_tensor_release(i2);
    em_tensor_release(xh);
    em_tensor_release(g2);
    em_tensor_release(t);
    em_tensor_release(u);
    em_tensor_release(w1);
    em_tensor_release(gh);
    em_tensor_release(m);
    em_tensor_release(v);
    return s;
}

const emi_ad_rule emi_rule_rms_norm = {"rms_norm", false,
                                       EMI_NEED_IN(0) | EMI_NEED_IN(1) | EMI_NEED_IN(2),
                                       rms_norm_forward, rms_norm_backward};
