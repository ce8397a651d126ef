/* elementwise_unary.c — backward rules of the unary elementwise ops: neg abs exp log log1p
 * sqrt rsqrt sin cos tanh sigmoid relu gelu silu erf recip clamp softplus tan asin acos atan
 * sinh cosh expm1 log2 log10 nan_to_num (floor ceil round sign have no gradient; logical_not,
 * isnan, isinf and isfinite have no float result). */
#include <math.h>

#include "autodiff/rules/rules.h"
#include "ops/fused.h"

/* Recomputes a unary op from its input. */
static em_status unary_forward(const void *params, em_tensor *const *in, int nin,
                               em_tensor **out) {
    (void)nin;
    const emi_rule_unary_params *p = params;
    const em_tensor *x = in[0];
    switch (p->op) {
    case EM_UN_NEG: return em_neg(x, out);
    case EM_UN_ABS: return em_abs(x, out);
    case EM_UN_EXP: return em_exp(x, out);
    case EM_UN_LOG: return em_log(x, out);
    case EM_UN_LOG1P: return em_log1p(x, out);
    case EM_UN_SQRT: return em_sqrt(x, out);
    case EM_UN_RSQRT: return em_rsqrt(x, out);
    case EM_UN_SIN: return em_sin(x, out);
    case EM_UN_COS: return em_cos(x, out);
    case EM_UN_TANH: return em_tanh(x, out);
    case EM_UN_SIGMOID: return em_sigmoid(x, out);
    case EM_UN_RELU: return em_relu(x, out);
    case EM_UN_GELU: return em_gelu(x, out);
    case EM_UN_SILU: return em_silu(x, out);
    case EM_UN_ERF: return em_erf(x, out);
    case EM_UN_RECIP: return em_recip(x, out);
    case EM_UN_CLAMP: return em_clamp(x, p->p[0], p->p[1], out);
    case EM_UN_SOFTPLUS: return em_softplus(x, p->p[0], p->p[1], out);
    case EM_UN_TAN: return em_tan(x, out);
    case EM_UN_ASIN: return em_asin(x, out);
    case EM_UN_ACOS: return em_acos(x, out);
    case EM_UN_ATAN: return em_atan(x, out);
    case EM_UN_SINH: return em_sinh(x, out);
    case EM_UN_COSH: return em_cosh(x, out);
    case EM_UN_EXPM1: return em_expm1(x, out);
    case EM_UN_LOG2: return em_log2(x, out);
    case EM_UN_LOG10: return em_log10(x, out);
    case EM_UN_NAN_TO_NUM: return em_nan_to_num(x, p->p[0], &p->p[1], &p->p[2], out);
    default: break;
    }
    return emi_fail(EM_ERR_STATE, "unary_forward: op %d has no recompute", (int)p->op);
}

/* gin[0] from the backend's fused unary_backward kernel (one pass, fused.h) when it has one:
 * EM_OK or a failure; EM_ERR_UNSUPPORTED (no slot, or the kernel declined): the rule then
 * composes the gradient from public ops, as it did before the slot existed. */
/* On the capture device the fused call is recorded with the composition as its alternative
 * (emi_unary_backward_captured): the rule runs again with this set, composing, and its result
 * is copied into the fused call's output. */
static _Thread_local bool ub_composing;

static em_status fused_bw(emi_ad_bw *bw, em_unary_op op, const em_tensor *x,
                          const em_tensor *y) {
    if (ub_composing) return EM_ERR_UNSUPPORTED;
    const emi_rule_unary_params *p = bw->params;
    em_tensor *gx = NULL;
    em_status s = emi_unary_backward_captured(op, x, y, bw->grad, p->p, &gx);
    if (s == EM_OK) {
        ub_composing = true;
        s = emi_rules_unary[op]->backward(bw);
        ub_composing = false;
        return emi_unary_backward_captured_end(s, gx, &bw->gin[0]);
    }
    if (s != EM_ERR_UNSUPPORTED) return s;
    if (!emi_has_unary_backward(bw->grad)) return EM_ERR_UNSUPPORTED;
    return emi_unary_backward(op, x, y, bw->grad, p->p, &bw->gin[0]);
}

/* After the value v was fetched into s: the fused kernel, returning unless it declined. */
#define FUSED(op, x, y)                                                                      \
    do {                                                                                     \
        if (s == EM_OK) {                                                                    \
            s = fused_bw(bw, op, x, y);                                                      \
            if (s != EM_ERR_UNSUPPORTED) return s;                                           \
            s = EM_OK;                                                                       \
        }                                                                                    \
    } while (0)

/* gin[0] = grad * f (f consumed; NULL f on entry means the step that made it failed). */
static em_status put_mul(emi_ad_bw *bw, em_status s, em_tensor *f) {
    if (s == EM_OK) s = em_mul(bw->grad, f, &bw->gin[0]);
    em_tensor_release(f);
    return s;
}

static em_status neg_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    return em_neg(bw->grad, &bw->gin[0]);
}

/* d|x| = sign(x) (0 at 0, as PyTorch) */
static em_status abs_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *x, *f = NULL;
    em_status s = emi_bw_input(bw, 0, &x);
    FUSED(EM_UN_ABS, x, NULL);
    if (s == EM_OK) s = em_sign(x, &f);
    return put_mul(bw, s, f);
}

/* d exp(x) = exp(x) = y */
static em_status exp_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *y;
    em_status s = emi_bw_output(bw, &y);
    FUSED(EM_UN_EXP, NULL, y);
    if (s == EM_OK) s = em_mul(bw->grad, y, &bw->gin[0]);
    return s;
}

/* d log(x) = 1/x */
static em_status log_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *x;
    em_status s = emi_bw_input(bw, 0, &x);
    FUSED(EM_UN_LOG, x, NULL);
    if (s == EM_OK) s = em_div(bw->grad, x, &bw->gin[0]);
    return s;
}

/* d log1p(x) = 1/(1+x) */
static em_status log1p_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *x, *t = NULL;
    em_status s = emi_bw_input(bw, 0, &x);
    FUSED(EM_UN_LOG1P, x, NULL);
    if (s == EM_OK) s = em_add_scalar(x, 1.0, &t);
    if (s == EM_OK) s = em_div(bw->grad, t, &bw->gin[0]);
    em_tensor_release(t);
    return s;
}

/* d sqrt(x) = 1/(2 y) */
static em_status sqrt_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *y, *t = NULL;
    em_status s = emi_bw_output(bw, &y);
    FUSED(EM_UN_SQRT, NULL, y);
    if (s == EM_OK) s = em_mul_scalar(y, 2.0, &t);
    if (s == EM_OK) s = em_div(bw->grad, t, &bw->gin[0]);
    em_tensor_release(t);
    return s;
}

/* d x^(-1/2) = -x^(-3/2) / 2 = -y^3 / 2 */
static em_status rsqrt_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *y, *y2 = NULL, *y3 = NULL, *f = NULL;
    em_status s = emi_bw_output(bw, &y);
    FUSED(EM_UN_RSQRT, NULL, y);
    if (s == EM_OK) s = em_mul(y, y, &y2);
    if (s == EM_OK) s = em_mul(y2, y, &y3);
    if (s == EM_OK) s = em_mul_scalar(y3, -0.5, &f);
    em_tensor_release(y2);
    em_tensor_release(y3);
    return put_mul(bw, s, f);
}

/* d sin(x) = cos(x) */
static em_status sin_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *x, *f = NULL;
    em_status s = emi_bw_input(bw, 0, &x);
    FUSED(EM_UN_SIN, x, NULL);
    if (s == EM_OK) s = em_cos(x, &f);
    return put_mul(bw, s, f);
}

/* d cos(x) = -sin(x) */
static em_status cos_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *x, *t = NULL, *f = NULL;
    em_status s = emi_bw_input(bw, 0, &x);
    FUSED(EM_UN_COS, x, NULL);
    if (s == EM_OK) s = em_sin(x, &t);
    if (s == EM_OK) s = em_neg(t, &f);
    em_tensor_release(t);
    return put_mul(bw, s, f);
}

/* d tanh(x) = 1 - y^2 */
static em_status tanh_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *y, *y2 = NULL, *t = NULL, *f = NULL;
    em_status s = emi_bw_output(bw, &y);
    FUSED(EM_UN_TANH, NULL, y);
    if (s == EM_OK) s = em_mul(y, y, &y2);
    if (s == EM_OK) s = em_neg(y2, &t);
    if (s == EM_OK) s = em_add_scalar(t, 1.0, &f);
    em_tensor_release(y2);
    em_tensor_release(t);
    return put_mul(bw, s, f);
}

/* d sigmoid(x) = y (1 - y) */
static em_status sigmoid_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *y, *t = NULL, *u = NULL, *f = NULL;
    em_status s = emi_bw_output(bw, &y);
    FUSED(EM_UN_SIGMOID, NULL, y);
    if (s == EM_OK) s = em_neg(y, &t);
    if (s == EM_OK) s = em_add_scalar(t, 1.0, &u);
    if (s == EM_OK) s = em_mul(y, u, &f);
    em_tensor_release(t);
    em_tensor_release(u);
    return put_mul(bw, s, f);
}

/* grad where x > 0, else 0. It reads the output (y > 0 exactly where x > 0), as PyTorch
 * does: the output is usually saved anyway as the next layer's input, so a Linear + ReLU
 * stack keeps one activation per layer under DISABLED, not two. */
static em_status relu_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *x, *pos = NULL, *zero = NULL;
    em_status s = emi_bw_output(bw, &x);
    FUSED(EM_UN_RELU, NULL, x);
    if (s == EM_OK) s = em_gt_scalar(x, 0.0, &pos);
    if (s == EM_OK) /* a 0-d zero, broadcast by where */
        s = em_full(NULL, 0, 0.0, em_tensor_dtype(bw->grad), em_tensor_device(bw->grad), &zero);
    if (s == EM_OK) s = em_where(pos, bw->grad, zero, &bw->gin[0]);
    em_tensor_release(pos);
    em_tensor_release(zero);
    return s;
}

/* exp(-x^2 / 2) * c, the shared part of the erf and gelu gradients (c = 2/sqrt(pi) for erf,
 * 1/sqrt(2 pi) for the normal density of gelu; `half` false: exp(-x^2) instead). */
static em_status gauss(const em_tensor *x, bool half, double c, em_tensor **out) {
    em_tensor *x2 = NULL, *t = NULL, *e = NULL;
    em_status s = em_mul(x, x, &x2);
    if (s == EM_OK) s = em_mul_scalar(x2, half ? -0.5 : -1.0, &t);
    if (s == EM_OK) s = em_exp(t, &e);
    if (s == EM_OK) s = em_mul_scalar(e, c, out);
    em_tensor_release(x2);
    em_tensor_release(t);
    em_tensor_release(e);
    return s;
}

/* gelu(x) = x Phi(x): d = Phi(x) + x phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2,
 * phi(x) = exp(-x^2/2) / sqrt(2 pi); the temporaries are reused in place (consuming ops). */
static em_status gelu_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *x, *t = NULL, *cdf = NULL, *pdf = NULL, *u = NULL;
    em_status s = emi_bw_input(bw, 0, &x);
    FUSED(EM_UN_GELU, x, NULL);
    if (s == EM_OK) s = em_mul_scalar(x, 0.70710678118654752440, &t);
    if (s == EM_OK) s = em_erf(t, &u);
    em_tensor_release(t);
    t = NULL;
    if (s == EM_OK) {
        s = em_add_scalar_(u, 1.0, &t);
        u = NULL;
    }
    if (s == EM_OK) {
        s = em_mul_scalar_(t, 0.5, &cdf);
        t = NULL;
    }
    if (s == EM_OK) s = em_mul(x, x, &t);
    if (s == EM_OK) {
        s = em_mul_scalar_(t, -0.5, &u);
        t = NULL;
    }
    if (s == EM_OK) s = em_exp(u, &t);
    em_tensor_release(u);
    u = NULL;
    if (s == EM_OK) {
        s = em_mul_scalar_(t, 0.39894228040143267794, &pdf);
        t = NULL;
    }
    if (s == EM_OK) {
        s = em_mul_(pdf, x, &t); /* x phi(x) */
        pdf = NULL;
    }
    if (s == EM_OK) {
        s = em_add_(cdf, t, &u);
        cdf = NULL;
    }
    if (s == EM_OK) {
        s = em_mul_(u, bw->grad, &bw->gin[0]); /* grad * d, in d's buffer */
        u = NULL;
    }
    em_tensor_release(t);
    em_tensor_release(u);
    em_tensor_release(cdf);
    em_tensor_release(pdf);
    return s;
}

/* silu(x) = x sigmoid(x): d = sg (1 + x (1 - sg)) */
static em_status silu_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *x, *sg = NULL, *t = NULL, *u = NULL, *v = NULL, *w = NULL, *f = NULL;
    em_status s = emi_bw_input(bw, 0, &x);
    FUSED(EM_UN_SILU, x, NULL);
    if (s == EM_OK) s = em_sigmoid(x, &sg);
    if (s == EM_OK) s = em_neg(sg, &t);
    if (s == EM_OK) s = em_add_scalar(t, 1.0, &u);  /* 1 - sg */
    if (s == EM_OK) s = em_mul(x, u, &v);           /* x (1 - sg) */
    if (s == EM_OK) s = em_add_scalar(v, 1.0, &w);  /* 1 + x (1 - sg) */
    if (s == EM_OK) s = em_mul(sg, w, &f);
    em_tensor_release(sg);
    em_tensor_release(t);
    em_tensor_release(u);
    em_tensor_release(v);
    em_tensor_release(w);
    return put_mul(bw, s, f);
}

/* d erf(x) = 2/sqrt(pi) exp(-x^2) */
static em_status erf_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *x, *f = NULL;
    em_status s = emi_bw_input(bw, 0, &x);
    FUSED(EM_UN_ERF, x, NULL);
    if (s == EM_OK) s = gauss(x, false, 1.12837916709551257390, &f);
    return put_mul(bw, s, f);
}

/* d (1/x) = -1/x^2 = -y^2 */
static em_status recip_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *y, *y2 = NULL, *f = NULL;
    em_status s = emi_bw_output(bw, &y);
    FUSED(EM_UN_RECIP, NULL, y);
    if (s == EM_OK) s = em_mul(y, y, &y2);
    if (s == EM_OK) s = em_neg(y2, &f);
    em_tensor_release(y2);
    return put_mul(bw, s, f);
}

/* The gradient passes where lo <= x <= hi (bounds included, NaN blocked), as PyTorch. */
static em_status clamp_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    const emi_rule_unary_params *p = bw->params;
    em_tensor *x, *lo = NULL, *hi = NULL, *mlo = NULL, *mhi = NULL, *m = NULL, *zero = NULL;
    em_status s = emi_bw_input(bw, 0, &x);
    FUSED(EM_UN_CLAMP, x, NULL);
    if (s == EM_OK) s = em_full(NULL, 0, p->p[0], x->dtype, em_tensor_device(x), &lo);
    if (s == EM_OK) s = em_full(NULL, 0, p->p[1], x->dtype, em_tensor_device(x), &hi);
    if (s == EM_OK) s = em_ge(x, lo, &mlo);
    if (s == EM_OK) s = em_le(x, hi, &mhi);
    if (s == EM_OK) s = em_logical_and(mlo, mhi, &m);
    if (s == EM_OK) s = em_full_like(bw->grad, 0.0, &zero);
    if (s == EM_OK) s = em_where(m, bw->grad, zero, &bw->gin[0]);
    em_tensor_release(lo);
    em_tensor_release(hi);
    em_tensor_release(mlo);
    em_tensor_release(mhi);
    em_tensor_release(m);
    em_tensor_release(zero);
    return s;
}

/* ---- issue 14's ops ---- */

/* softplus: d = sigmoid(beta x), 1 where beta x > threshold (the identity branch), as PyTorch */
static em_status softplus_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    const emi_rule_unary_params *p = bw->params;
    em_tensor *x, *bx = NULL, *sg = NULL, *m = NULL, *f = NULL;
    em_status s = emi_bw_input(bw, 0, &x);
    if (s == EM_OK) s = em_mul_scalar(x, p->p[0], &bx);
    if (s == EM_OK) s = em_sigmoid(bx, &sg);
    if (s == EM_OK) s = em_gt_scalar(bx, p->p[1], &m);
    if (s == EM_OK) s = em_masked_fill(sg, m, 1.0, &f);
    em_tensor_release(bx);
    em_tensor_release(sg);
    em_tensor_release(m);
    return put_mul(bw, s, f);
}

/* d tan(x) = 1 + y^2 */
static em_status tan_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *y, *y2 = NULL, *f = NULL;
    em_status s = emi_bw_output(bw, &y);
    if (s == EM_OK) s = em_mul(y, y, &y2);
    if (s == EM_OK) s = em_add_scalar(y2, 1.0, &f);
    em_tensor_release(y2);
    return put_mul(bw, s, f);
}

/* 1 - x^2 (asin, acos) */
static em_status one_minus_sq(const em_tensor *x, em_tensor **out) {
    em_tensor *x2 = NULL, *n = NULL;
    em_status s = em_mul(x, x, &x2);
    if (s == EM_OK) s = em_neg(x2, &n);
    if (s == EM_OK) s = em_add_scalar(n, 1.0, out);
    em_tensor_release(x2);
    em_tensor_release(n);
    return s;
}

/* d asin(x) = 1 / sqrt(1 - x^2); d acos(x) = -1 / sqrt(1 - x^2) */
static em_status asin_acos_backward(emi_ad_bw *bw, bool neg) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *x, *t = NULL, *r = NULL, *f = NULL;
    em_status s = emi_bw_input(bw, 0, &x);
    if (s == EM_OK) s = one_minus_sq(x, &t);
    if (s == EM_OK) s = em_rsqrt(t, &r);
    if (s == EM_OK && neg) s = em_neg(r, &f);
    else if (s == EM_OK) {
        f = r;
        r = NULL;
    }
    em_tensor_release(t);
    em_tensor_release(r);
    return put_mul(bw, s, f);
}
static em_status asin_backward(emi_ad_bw *bw) { return asin_acos_backward(bw, false); }
static em_status acos_backward(emi_ad_bw *bw) { return asin_acos_backward(bw, true); }

/* d atan(x) = 1 / (1 + x^2) */
static em_status atan_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *x, *x2 = NULL, *t = NULL;
    em_status s = emi_bw_input(bw, 0, &x);
    if (s == EM_OK) s = em_mul(x, x, &x2);
    if (s == EM_OK) s = em_add_scalar(x2, 1.0, &t);
    if (s == EM_OK) s = em_div(bw->grad, t, &bw->gin[0]);
    em_tensor_release(x2);
    em_tensor_release(t);
    return s;
}

/* d sinh(x) = cosh(x); d cosh(x) = sinh(x) */
static em_status sinh_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *x, *f = NULL;
    em_status s = emi_bw_input(bw, 0, &x);
    if (s == EM_OK) s = em_cosh(x, &f);
    return put_mul(bw, s, f);
}
static em_status cosh_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *x, *f = NULL;
    em_status s = emi_bw_input(bw, 0, &x);
    if (s == EM_OK) s = em_sinh(x, &f);
    return put_mul(bw, s, f);
}

/* d expm1(x) = e^x = y + 1 */
static em_status expm1_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *y, *f = NULL;
    em_status s = emi_bw_output(bw, &y);
    if (s == EM_OK) s = em_add_scalar(y, 1.0, &f);
    return put_mul(bw, s, f);
}

/* d log_b(x) = 1 / (x ln b) */
static em_status logb_backward(emi_ad_bw *bw, double lnb) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *x, *t = NULL;
    em_status s = emi_bw_input(bw, 0, &x);
    if (s == EM_OK) s = em_mul_scalar(x, lnb, &t);
    if (s == EM_OK) s = em_div(bw->grad, t, &bw->gin[0]);
    em_tensor_release(t);
    return s;
}
static em_status log2_backward(emi_ad_bw *bw) {
    return logb_backward(bw, 0.69314718055994530942);
}
static em_status log10_backward(emi_ad_bw *bw) {
    return logb_backward(bw, 2.30258509299404568402);
}

/* nan_to_num passes the gradient where x is finite (the replaced elements are constants) */
static em_status nan_to_num_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *x, *m = NULL, *zero = NULL;
    em_status s = emi_bw_input(bw, 0, &x);
    if (s == EM_OK) s = em_isfinite(x, &m);
    if (s == EM_OK)
        s = em_full(NULL, 0, 0.0, em_tensor_dtype(bw->grad), em_tensor_device(bw->grad), &zero);
    if (s == EM_OK) s = em_where(m, bw->grad, zero, &bw->gin[0]);
    em_tensor_release(m);
    em_tensor_release(zero);
    return s;
}

#define IN0 EMI_NEED_IN(0)
#define OUT EMI_NEED_OUT
/* unary_forward in a consumed input's buffer where a consuming op exists (relu). */
em_status emi_unary_forward_own(const void *params, em_tensor **in, const bool *own, int nin,
                                em_tensor **out) {
    const emi_rule_unary_params *p = params;
    if (own[0] && p->op == EM_UN_RELU) {
        em_tensor *x = in[0];
        in[0] = NULL;
        return em_relu_(x, out);
    }
    em_status s = unary_forward(params, in, nin, out);
    if (own[0]) {
        em_tensor_release(in[0]);
        in[0] = NULL;
    }
    return s;
}

#define RULE(id, nm, needs, bw) \
    static const emi_ad_rule rule_##id = {nm, false, needs, unary_forward, bw}
RULE(neg, "neg", 0, neg_backward);
RULE(abs, "abs", IN0, abs_backward);
RULE(exp, "exp", OUT, exp_backward);
RULE(log, "log", IN0, log_backward);
RULE(log1p, "log1p", IN0, log1p_backward);
RULE(sqrt, "sqrt", OUT, sqrt_backward);
RULE(rsqrt, "rsqrt", OUT, rsqrt_backward);
RULE(sin, "sin", IN0, sin_backward);
RULE(cos, "cos", IN0, cos_backward);
RULE(tanh, "tanh", OUT, tanh_backward);
RULE(sigmoid, "sigmoid", OUT, sigmoid_backward);
RULE(relu, "relu", OUT, relu_backward);
RULE(gelu, "gelu", IN0, gelu_backward);
RULE(silu, "silu", IN0, silu_backward);
RULE(erf, "erf", IN0, erf_backward);
RULE(recip, "recip", OUT, recip_backward);
RULE(clamp, "clamp", IN0, clamp_backward);
RULE(softplus, "softplus", IN0, softplus_backward);
RULE(tan, "tan", OUT, tan_backward);
RULE(asin, "asin", IN0, asin_backward);
RULE(acos, "acos", IN0, acos_backward);
RULE(atan, "atan", IN0, atan_backward);
RULE(sinh, "sinh", IN0, sinh_backward);
RULE(cosh, "cosh", IN0, cosh_backward);
RULE(expm1, "expm1", OUT, expm1_backward);
RULE(log2, "log2", IN0, log2_backward);
RULE(log10, "log10", IN0, log10_backward);
RULE(nan_to_num, "nan_to_num", IN0, nan_to_num_backward);

const emi_ad_rule *const emi_rules_unary[EM_UN_COUNT] = {
    [EM_UN_NEG] = &rule_neg,          [EM_UN_ABS] = &rule_abs,
    [EM_UN_EXP] = &rule_exp,          [EM_UN_LOG] = &rule_log,
    [EM_UN_LOG1P] = &rule_log1p,      [EM_UN_SQRT] = &rule_sqrt,
    [EM_UN_RSQRT] = &rule_rsqrt,      [EM_UN_SIN] = &rule_sin,
    [EM_UN_COS] = &rule_cos,          [EM_UN_TANH] = &rule_tanh,
    [EM_UN_SIGMOID] = &rule_sigmoid,  [EM_UN_RELU] = &rule_relu,
    [EM_UN_GELU] = &rule_gelu,        [EM_UN_SILU] = &rule_silu,
    [EM_UN_ERF] = &rule_erf,          [EM_UN_RECIP] = &rule_recip,
    [EM_UN_CLAMP] = &rule_clamp,      [EM_UN_FLOOR] = &emi_rule_no_grad,
    [EM_UN_CEIL] = &emi_rule_no_grad, [EM_UN_ROUND] = &emi_rule_no_grad,
    [EM_UN_SIGN] = &emi_rule_no_grad, [EM_UN_LOGICAL_NOT] = NULL,
    [EM_UN_SOFTPLUS] = &rule_softplus, [EM_UN_TAN] = &rule_tan,
    [EM_UN_ASIN] = &rule_asin,         [EM_UN_ACOS] = &rule_acos,
    [EM_UN_ATAN] = &rule_atan,         [EM_UN_SINH] = &rule_sinh,
    [EM_UN_COSH] = &rule_cosh,         [EM_UN_EXPM1] = &rule_expm1,
    [EM_UN_LOG2] = &rule_log2,         [EM_UN_LOG10] = &rule_log10,
    [EM_UN_ISNAN] = NULL,              [EM_UN_ISINF] = NULL,
    [EM_UN_ISFINITE] = NULL,           [EM_UN_NAN_TO_NUM] = &rule_nan_to_num,
};
