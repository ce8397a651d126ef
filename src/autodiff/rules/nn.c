/* nn.c — backward rules of the neural ops with a native forward: conv1d, conv2d,
 * conv_transpose2d, max_pool2d, avg_pool2d, adaptive_avg_pool2d and layer_norm. Embedding,
 * dropout and cross_entropy are compositions of public ops and record through their parts.
 *
 * Convolutions run their backward in the 4-d form (conv1d's tensors get a size-1 H dim):
 * the input gradient of conv2d is a conv_transpose2d of the output gradient and that of
 * conv_transpose2d a conv2d; weight gradients come from the conv2d_weight_grad kernel (for
 * conv_transpose2d with the roles of x and the output gradient swapped). */
#include "autodiff/rules/rules.h"

/* Evaluates a status expression into `s` and jumps to `done` when it fails. */
#define NN_TRY(expr)                                                                         \
    do {                                                                                     \
        s = (expr);                                                                          \
        if (s != EM_OK) goto done;                                                           \
    } while (0)

/* The same for a call that consumes `t` (released also on failure): t is NULL after it. */
#define NN_TRY_C(expr, t)                                                                    \
    do {                                                                                     \
        s = (expr);                                                                          \
        (t) = NULL;                                                                          \
        if (s != EM_OK) goto done;                                                           \
    } while (0)

/* t's device without the autodiff wrapping: where untracked backward values belong. */
static em_device inner_dev(const em_tensor *t) {
    em_device d = em_tensor_device(t);
    d.autodiff = false;
    d.checkpointing = EM_CKPT_NONE;
    return d;
}

/* ---- convolutions ---- */

static em_status conv1d_forward(const void *p, em_tensor *const *in, int nin, em_tensor **out) {
    (void)nin;
    return em_conv1d(in[0], in[1], in[2], &((const emi_rule_conv_params *)p)->p, out);
}

static em_status conv2d_forward(const void *p, em_tensor *const *in, int nin, em_tensor **out) {
    (void)nin;
    return em_conv2d(in[0], in[1], in[2], &((const emi_rule_conv_params *)p)->p, out);
}

static em_status conv_transpose2d_forward(const void *p, em_tensor *const *in, int nin,
                                          em_tensor **out) {
    (void)nin;
    return em_conv_transpose2d(in[0], in[1], in[2], &((const emi_rule_conv_params *)p)->p, out);
}

/* t as a 4-d tensor: a view with a size-1 dim at 2 for a 3-d t, else t retained. */
static em_status lift4(const em_tensor *t, em_tensor **out) {
    if (em_tensor_rank(t) == 3) return em_unsqueeze(t, 2, out);
    em_tensor_retain((em_tensor *)t);
    *out = (em_tensor *)t;
    return EM_OK;
}

/* The public params of the 4-d op the args describe, with output_padding op. */
static em_conv_params conv_params_4d(const em_conv_args *a, const int64_t op[2]) {
    em_conv_params q;
    for (int i = 0; i < 2; i++) {
        q.stride[i] = a->stride[i];
        q.padding[i] = a->padding[i];
        q.dilation[i] = a->dilation[i];
        q.output_padding[i] = op[i];
    }
    q.groups = a->groups;
    return q;
}

/* gin[2] = the bias gradient: g4 summed over N, H and W. */
static em_status conv_bias_grad(emi_ad_bw *bw, const em_tensor *g4) {
    em_tensor *t3 = NULL, *t2 = NULL;
    em_status s = em_sum_dim(g4, 3, false, &t3);
    if (s == EM_OK) s = em_sum_dim(t3, 2, false, &t2);
    if (s == EM_OK) s = em_sum_dim(t2, 0, false, &bw->gin[2]);
    em_tensor_release(t3);
    em_tensor_release(t2);
    return s;
}

/* conv2d (and conv1d in its 4-d form): gx = conv_transpose2d(gy, w) with the output_padding
 * that restores x's size, gw = conv2d_weight_grad(x, gy), gbias = sum of gy. */
static em_status conv_backward(emi_ad_bw *bw) {
    const emi_rule_conv_params *rp = bw->params;
    const em_conv_args *a = &rp->a;
    int xr, wr;
    const int64_t *xs = emi_bw_in_shape(bw, 0, &xr);
    const int64_t *ws = emi_bw_in_shape(bw, 1, &wr);
    em_tensor *x, *w, *g4 = NULL, *x4 = NULL, *w4 = NULL, *t = NULL;
    em_status s;
    NN_TRY(lift4(bw->grad, &g4));
    /* w's gradient first: it is the one that reads x */
    if (bw->need[1]) {
        NN_TRY(emi_bw_input(bw, 0, &x));
        NN_TRY(lift4(x, &x4));
        const int64_t kernel[2] = {wr == 3 ? 1 : ws[2], ws[wr - 1]};
        NN_TRY(emi_conv2d_weight_grad(x4, g4, kernel, a, &t));
        NN_TRY(em_reshape(t, ws, wr, &bw->gin[1]));
        em_tensor_release(t);
        t = NULL;
    }
    /* x's value is not read again (x's gradient reads w and gy): it goes before that
     * gradient, as large as x, is made */
    em_tensor_release(x4);
    x4 = NULL;
    emi_bw_input_done(bw, 0);
    if (bw->need[0]) {
        NN_TRY(emi_bw_input(bw, 1, &w));
        NN_TRY(lift4(w, &w4));
        const int64_t *gs = em_tensor_shape(g4);
        const int64_t *w4s = em_tensor_shape(w4);
        int64_t op[2];
        for (int i = 0; i < 2; i++) {
            const int64_t in = xr == 3 && i == 0 ? 1 : xs[xr - 2 + i];
            op[i] = in - ((gs[2 + i] - 1) * a->stride[i] - 2 * a->padding[i] +
                          a->dilation[i] * (w4s[2 + i] - 1) + 1);
        }
        const em_conv_params q = conv_params_4d(a, op);
        NN_TRY(em_conv_transpose2d(g4, w4, NULL, &q, &t));
        NN_TRY(em_reshape(t, xs, xr, &bw->gin[0]));
        em_tensor_release(t);
        t = NULL;
    }
    if (bw->nin > 2 && bw->need[2]) NN_TRY(conv_bias_grad(bw, g4));
done:
    em_tensor_release(g4);
    em_tensor_release(x4);
    em_tensor_release(w4);
    em_tensor_release(t);
    return s;
}

/* conv_transpose2d: gx = conv2d(gy, w) cut to x's size; gw = conv2d_weight_grad with gy as
 * the input and x as the output gradient (x padded with zeros to the conv2d output size when
 * an output_padding >= stride makes that larger); gbias = sum of gy. */
static em_status conv_transpose_backward(emi_ad_bw *bw) {
    const emi_rule_conv_params *rp = bw->params;
    const em_conv_args *a = &rp->a;
    int xr, wr;
    const int64_t *xs = emi_bw_in_shape(bw, 0, &xr);
    const int64_t *ws = emi_bw_in_shape(bw, 1, &wr);
    const em_tensor *g = bw->grad;
    const int64_t *gs = em_tensor_shape(g);
    em_tensor *x, *w, *t = NULL, *u = NULL, *z = NULL;
    em_status s = EM_OK;
    const int64_t zero[2] = {0, 0};
    const em_conv_params q = conv_params_4d(a, zero);
    em_conv_args a0 = *a;
    a0.output_padding[0] = a0.output_padding[1] = 0;
    /* the conv2d of gy has this many positions along H and W (>= x's) */
    int64_t hc[2];
    for (int i = 0; i < 2; i++)
        hc[i] = (gs[2 + i] + 2 * a->padding[i] - a->dilation[i] * (ws[2 + i] - 1) - 1) /
                    a->stride[i] + 1;
    if (bw->need[0]) {
        NN_TRY(emi_bw_input(bw, 1, &w));
        NN_TRY(em_conv2d(g, w, NULL, &q, &t));
        for (int i = 0; i < 2; i++) {
            if (hc[i] == xs[2 + i]) continue;
            NN_TRY(em_slice(t, 2 + i, 0, xs[2 + i], 1, &u));
            em_tensor_release(t);
            t = u;
            u = NULL;
        }
        bw->gin[0] = t;
        t = NULL;
    }
    if (bw->need[1]) {
        NN_TRY(emi_bw_input(bw, 0, &x));
        em_tensor_retain(x);
        t = x;
        for (int i = 0; i < 2; i++) {
            if (hc[i] == xs[2 + i]) continue;
            int64_t zs[4];
            for (int d = 0; d < 4; d++) zs[d] = em_tensor_shape(t)[d];
            zs[2 + i] = hc[i] - xs[2 + i];
            NN_TRY(em_zeros(zs, 4, em_tensor_dtype(t), inner_dev(t), &z));
            const em_tensor *parts[2] = {t, z};
            NN_TRY(em_cat(parts, 2, 2 + i, &u));
            em_tensor_release(t);
            em_tensor_release(z);
            z = NULL;
            t = u;
            u = NULL;
        }
        const int64_t kernel[2] = {ws[2], ws[3]};
        NN_TRY(emi_conv2d_weight_grad(g, t, kernel, &a0, &bw->gin[1]));
    }
    if (bw->nin > 2 && bw->need[2]) NN_TRY(conv_bias_grad(bw, g));
done:
    em_tensor_release(t);
    em_tensor_release(u);
    em_tensor_release(z);
    return s;
}

#define CONV_NEEDS (EMI_NEED_IN(0) | EMI_NEED_IN(1))
const emi_ad_rule emi_rule_conv1d = {"conv1d", true, CONV_NEEDS, conv1d_forward, conv_backward};
const emi_ad_rule emi_rule_conv2d = {"conv2d", true, CONV_NEEDS, conv2d_forward, conv_backward};
const emi_ad_rule emi_rule_conv_transpose2d = {"conv_transpose2d", true, CONV_NEEDS,
                                               conv_transpose2d_forward,
                                               conv_transpose_backward};

/* ---- pooling ---- */

static em_status max_pool2d_forward(const void *p, em_tensor *const *in, int nin,
                                    em_tensor **out) {
    (void)nin;
    return em_max_pool2d(in[0], &((const emi_rule_pool_params *)p)->p, out, NULL);
}

/* gx = zeros [N, C, H*W] with gy scattered (added) at the recorded argmax indices. */
static em_status max_pool2d_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    int xr;
    const int64_t *xs = emi_bw_in_shape(bw, 0, &xr);
    const int64_t *gs = em_tensor_shape(bw->grad);
    const int64_t zs[3] = {xs[0], xs[1], xs[2] * xs[3]};
    const int64_t fs[3] = {gs[0], gs[1], gs[2] * gs[3]};
    /* the saved indices still report the autodiff device (int tensors do): a view of them on
     * the inner device keeps the scatter from making its result a leaf of the graph */
    const em_device inner = inner_dev(bw->grad);
    em_tensor *idx, *ii = NULL, *fi = NULL, *fg = NULL, *z = NULL, *sc = NULL;
    em_status s;
    NN_TRY(emi_bw_input(bw, 1, &idx));
    NN_TRY(em_to_device(idx, inner, &ii));
    NN_TRY(em_reshape(ii, fs, 3, &fi));
    NN_TRY(em_reshape(bw->grad, fs, 3, &fg));
    NN_TRY(emi_scatter_add_zeros(zs, 3, 2, fi, fg, &sc));
    NN_TRY(em_reshape(sc, xs, xr, &bw->gin[0]));
done:
    em_tensor_release(ii);
    em_tensor_release(fi);
    em_tensor_release(fg);
    em_tensor_release(z);
    em_tensor_release(sc);
    return s;
}

static em_status avg_pool2d_forward(const void *p, em_tensor *const *in, int nin,
                                    em_tensor **out) {
    (void)nin;
    return em_avg_pool2d(in[0], &((const emi_rule_pool_params *)p)->p, out);
}

static em_status avg_pool2d_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    int xr;
    const int64_t *xs = emi_bw_in_shape(bw, 0, &xr);
    return emi_avg_pool2d_backward(bw->grad, xs, &((const emi_rule_pool_params *)bw->params)->p,
                                   &bw->gin[0]);
}

static em_status adaptive_forward(const void *p, em_tensor *const *in, int nin,
                                  em_tensor **out) {
    (void)nin;
    const int64_t *o = p;
    return em_adaptive_avg_pool2d(in[0], o[0], o[1], out);
}

static em_status adaptive_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    int xr;
    const int64_t *xs = emi_bw_in_shape(bw, 0, &xr);
    return emi_adaptive_avg_pool2d_backward(bw->grad, xs, &bw->gin[0]);
}

const emi_ad_rule emi_rule_max_pool2d = {"max_pool2d", false, EMI_NEED_IN(1),
                                         max_pool2d_forward, max_pool2d_backward};
const emi_ad_rule emi_rule_avg_pool2d = {"avg_pool2d", false, 0, avg_pool2d_forward,
                                         avg_pool2d_backward};
const emi_ad_rule emi_rule_adaptive_avg_pool2d = {"adaptive_avg_pool2d", false, 0,
                                                  adaptive_forward, adaptive_backward};

/* ---- layer_norm ---- */

static em_status layer_norm_forward(const void *p, em_tensor *const *in, int nin,
                                    em_tensor **out) {
    (void)nin;
    const emi_rule_layer_norm_params *lp = p;
    return em_layer_norm(in[0], lp->normalized_ndim, in[1], in[2], lp->eps, out);
}

/* gin[i] = the zeros of input i's shape (a layer_norm with no elements). */
static em_status layer_norm_zero_grads(emi_ad_bw *bw) {
    em_status s = EM_OK;
    for (int i = 0; i < 3 && s == EM_OK; i++) {
        if (!bw->need[i]) continue;
        int r;
        const int64_t *sh = emi_bw_in_shape(bw, i, &r);
        s = em_zeros(sh, r, emi_bw_in_dtype(bw, i), inner_dev(bw->grad), &bw->gin[i]);
    }
    return s;
}

/* With x as [rows, cols], xhat = (x - mean) * rstd and gh = gy * weight (gy without one):
 *   gx = (gh - mean(gh) - xhat * mean(gh * xhat)) * rstd,
 *   gweight = sum over rows of gy * xhat,  gbias = sum over rows of gy,
 * where mean and rstd = 1/sqrt(var + eps) (biased variance) are recomputed from x. The
 * full-size temporaries are few and reused in place (the consuming ops): xc becomes xhat,
 * gy * xhat (made for gweight) becomes gh * xhat, and gh becomes gx. */
static em_status layer_norm_backward(emi_ad_bw *bw) {
    const emi_rule_layer_norm_params *lp = bw->params;
    int xr, wr;
    const int64_t *xs = emi_bw_in_shape(bw, 0, &xr);
    const int64_t *ws = emi_bw_in_shape(bw, 1, &wr);
    int64_t rows = 1, cols = 1;
    for (int d = 0; d < xr; d++) {
        if (d < xr - lp->normalized_ndim) rows *= xs[d];
        else cols *= xs[d];
    }
    if (rows * cols == 0) return layer_norm_zero_grads(bw);
    const int64_t s2[2] = {rows, cols};
    em_tensor *x, *w = NULL, *x2 = NULL, *g2 = NULL, *mean = NULL, *xc = NULL, *var = NULL,
                 *rstd = NULL, *xhat = NULL, *gh = NULL, *w1 = NULL, *t = NULL, *u = NULL,
                 *m1 = NULL, *m2 = NULL;
    em_status s;
    NN_TRY(emi_bw_input(bw, 0, &x));
    NN_TRY(em_reshape(x, s2, 2, &x2));
    NN_TRY(em_reshape(bw->grad, s2, 2, &g2));
    NN_TRY(em_mean_dim(x2, 1, true, &mean));
    NN_TRY(em_sub(x2, mean, &xc));
    NN_TRY(em_var_dim(x2, 1, 0, true, &var));
    NN_TRY_C(em_add_scalar_(var, lp->eps, &t), var);
    NN_TRY(em_rsqrt(t, &rstd));
    em_tensor_release(t);
    t = NULL;
    NN_TRY_C(em_mul_(xc, rstd, &xhat), xc);
    if (wr >= 0 && bw->need[0]) {
        NN_TRY(emi_bw_input(bw, 1, &w));
        NN_TRY(em_reshape(w, &cols, 1, &w1));
    }
    if (bw->need[2]) {
        NN_TRY(em_sum_dim(g2, 0, false, &t));
        int br;
        const int64_t *bs = emi_bw_in_shape(bw, 2, &br);
        NN_TRY(em_reshape(t, bs, br, &bw->gin[2]));
        em_tensor_release(t);
        t = NULL;
    }
    if (bw->need[1]) {
        NN_TRY(em_mul(g2, xhat, &u));
        NN_TRY(em_sum_dim(u, 0, false, &t));
        NN_TRY(em_reshape(t, ws, wr, &bw->gin[1]));
        em_tensor_release(t);
        t = NULL;
    }
    if (bw->need[0]) {
        if (w1) {
            NN_TRY(em_mul(g2, w1, &gh));
        } else {
            em_tensor_retain(g2);
            gh = g2;
        }
        NN_TRY(em_mean_dim(gh, 1, true, &m1));
        if (u && w1) { /* gy * xhat * weight */
            NN_TRY_C(em_mul_(u, w1, &t), u);
        } else if (u) {
            t = u;
            u = NULL;
        } else {
            NN_TRY(em_mul(gh, xhat, &t));
        }
        NN_TRY(em_mean_dim(t, 1, true, &m2));
        em_tensor_release(t);
        t = NULL;
        NN_TRY_C(em_mul_(xhat, m2, &u), xhat); /* xhat * mean(gh * xhat) */
        NN_TRY_C(em_sub_(gh, m1, &t), gh);
        NN_TRY_C(em_sub_(t, u, &gh), t);
        NN_TRY_C(em_mul_(gh, rstd, &t), gh);
        NN_TRY(em_reshape(t, xs, xr, &bw->gin[0]));
    }
done:
    em_tensor_release(x2);
    em_tensor_release(g2);
    em_tensor_release(mean);
    em_tensor_release(xc);
    em_tensor_release(var);
    em_tensor_release(rstd);
    em_tensor_release(xhat);
    em_tensor_release(gh);
    em_tensor_release(w1);
    em_tensor_release(t);
    em_tensor_release(u);
    em_tensor_release(m1);
    em_tensor_release(m2);
    return s;
}

const emi_ad_rule emi_rule_layer_norm = {"layer_norm", false, EMI_NEED_IN(0) | EMI_NEED_IN(1),
                                         layer_norm_forward, layer_norm_backward};
