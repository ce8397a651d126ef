/* elementwise_binary.c — backward rules of add sub mul div pow remainder maximum minimum,
 * and where. Broadcasting is undone with emi_ad_unbroadcast. */
#include "autodiff/rules/rules.h"

/* Recomputes a binary op from its two inputs. */
static em_status binary_forward(const void *p, em_tensor *const *in, int nin, em_tensor **out) {
    (void)nin;
    switch (*(const em_binary_op *)p) {
    case EM_BIN_ADD: return em_add(in[0], in[1], out);
    case EM_BIN_SUB: return em_sub(in[0], in[1], out);
    case EM_BIN_MUL: return em_mul(in[0], in[1], out);
    case EM_BIN_DIV: return em_div(in[0], in[1], out);
    case EM_BIN_POW: return em_pow(in[0], in[1], out);
    case EM_BIN_REM: return em_remainder(in[0], in[1], out);
    case EM_BIN_MAX: return em_maximum(in[0], in[1], out);
    case EM_BIN_MIN: return em_minimum(in[0], in[1], out);
    case EM_BIN_ATAN2: return em_atan2(in[0], in[1], out);
    default: return emi_fail(EM_ERR_STATE, "binary_forward: op %d has no recompute", (int)*(const em_binary_op *)p);
    }
}

/* binary_forward writing into a consumed input's buffer: a's for any op, b's for the
 * commutative add and mul (a + b and b + a are the same bits). */
em_status emi_binary_forward_own(const void *p, em_tensor **in, const bool *own, int nin,
                                 em_tensor **out) {
    em_binary_op op = *(const em_binary_op *)p;
    em_status (*inplace)(em_tensor *, const em_tensor *, em_tensor **) =
        op == EM_BIN_ADD ? em_add_ : op == EM_BIN_SUB ? em_sub_ : op == EM_BIN_MUL ? em_mul_
        : op == EM_BIN_DIV ? em_div_ : NULL;
    bool commutes = op == EM_BIN_ADD || op == EM_BIN_MUL;
    int c = !inplace ? -1 : own[0] ? 0 : own[1] && commutes ? 1 : -1;
    em_status s;
    if (c < 0) {
        s = binary_forward(p, in, nin, out);
    } else {
        s = inplace(in[c], in[1 - c], out); /* consumes in[c] */
        in[c] = NULL;
    }
    for (int i = 0; i < 2; i++)
        if (own[i] && in[i]) {
            em_tensor_release(in[i]);
            in[i] = NULL;
        }
    return s;
}

/* gin[i] = unbroadcast(g) for input i; consumes g. */
static em_status put(emi_ad_bw *bw, int i, em_tensor *g) {
    int rank;
    const int64_t *shape = emi_bw_in_shape(bw, i, &rank);
    em_status s = emi_ad_unbroadcast(g, shape, rank, &bw->gin[i]);
    em_tensor_release(g);
    return s;
}

/* gin[i] = -unbroadcast(g) (g borrowed): negated after the sum over broadcast dims, which is
 * the same value on fewer elements. */
static em_status put_neg(emi_ad_bw *bw, int i, const em_tensor *g) {
    int rank;
    const int64_t *shape = emi_bw_in_shape(bw, i, &rank);
    em_tensor *u = NULL;
    em_status s = emi_ad_unbroadcast(g, shape, rank, &u);
    if (s == EM_OK) s = em_neg(u, &bw->gin[i]);
    em_tensor_release(u);
    return s;
}

static em_status add_backward(emi_ad_bw *bw) {
    em_status s = EM_OK;
    for (int i = 0; i < 2 && s == EM_OK; i++) {
        if (!bw->need[i]) continue;
        em_tensor_retain(bw->grad);
        s = put(bw, i, bw->grad);
    }
    return s;
}

static em_status sub_backward(emi_ad_bw *bw) {
    em_status s = EM_OK;
    if (bw->need[0]) {
        em_tensor_retain(bw->grad);
        s = put(bw, 0, bw->grad);
    }
    if (s == EM_OK && bw->need[1]) s = put_neg(bw, 1, bw->grad);
    return s;
}

static em_status mul_backward(emi_ad_bw *bw) {
    em_status s = EM_OK;
    if (bw->need[0] && bw->need[1] && emi_bw_same_input(bw, 0, 1)) {
        /* x * x: one product, doubled (exactly what the two equal halves sum to) */
        em_tensor *x, *g = NULL, *g2 = NULL;
        s = emi_bw_input(bw, 0, &x);
        if (s == EM_OK) s = em_mul(bw->grad, x, &g);
        if (s == EM_OK) s = em_mul_scalar_(g, 2.0, &g2);
        if (s == EM_OK) s = put(bw, 0, g2);
        return s;
    }
    for (int i = 0; i < 2 && s == EM_OK; i++) {
        if (!bw->need[i]) continue;
        em_tensor *other, *g;
        s = emi_bw_input(bw, 1 - i, &other);
        if (s == EM_OK) s = em_mul(bw->grad, other, &g);
        if (s == EM_OK) s = put(bw, i, g);
    }
    return s;
}

/* d(a/b)/da = 1/b; d(a/b)/db = -a/b^2 = -(a/b)/b */
static em_status div_backward(emi_ad_bw *bw) {
    em_tensor *a = NULL, *b = NULL, *g = NULL, *t = NULL, *u = NULL;
    em_status s = emi_bw_input(bw, 1, &b);
    if (s == EM_OK && bw->need[0]) {
        s = em_div(bw->grad, b, &g);
        if (s == EM_OK) s = put(bw, 0, g);
        g = NULL;
    }
    if (s == EM_OK && bw->need[1]) {
        s = emi_bw_input(bw, 0, &a);
        if (s == EM_OK) s = em_div(a, b, &t); /* a/b */
        if (s == EM_OK) {
            s = em_div_(t, b, &u); /* a/b^2, in t's buffer */
            t = NULL;
        }
        if (s == EM_OK) {
            s = em_mul_(u, bw->grad, &g); /* g a/b^2 */
            u = NULL;
        }
        if (s == EM_OK) s = put_neg(bw, 1, g);
        em_tensor_release(t);
        em_tensor_release(u);
        em_tensor_release(g);
    }
    return s;
}

/* d(a^b)/da = b a^(b-1), 0 where b == 0; d(a^b)/db = a^b ln a, 0 where a == 0 and b >= 0
 * (PyTorch's pow_backward_self / pow_backward_exponent) */
static em_status pow_backward(emi_ad_bw *bw) {
    em_tensor *a, *b, *t1 = NULL, *t2 = NULL, *t3 = NULL;
    em_status s = emi_bw_input(bw, 0, &a);
    if (s == EM_OK) s = emi_bw_input(bw, 1, &b);
    if (s == EM_OK && bw->need[0]) {
        s = em_sub_scalar(b, 1.0, &t1);
        if (s == EM_OK) s = em_pow(a, t1, &t2);
        if (s == EM_OK) s = em_mul(t2, b, &t3);
        em_tensor_release(t1);
        em_tensor_release(t2);
        t1 = NULL;
        if (s == EM_OK) s = em_mul(bw->grad, t3, &t1);
        em_tensor_release(t3);
        /* b a^(b-1) is 0 * inf where a == 0 and b == 0: 0 wherever b == 0, as PyTorch */
        t2 = t3 = NULL;
        if (s == EM_OK) s = em_eq_scalar(b, 0.0, &t2);
        if (s == EM_OK) s = em_masked_fill(t1, t2, 0.0, &t3);
        em_tensor_release(t1);
        em_tensor_release(t2);
        if (s == EM_OK) s = put(bw, 0, t3); /* consumes t3 */
        else em_tensor_release(t3);
        t1 = t2 = t3 = NULL;
    }
    if (s == EM_OK && bw->need[1]) {
        em_tensor *y, *lna = NULL, *az = NULL, *bnn = NULL, *mask = NULL;
        s = emi_bw_output(bw, &y);
        if (s == EM_OK) s = em_log(a, &lna);
        if (s == EM_OK) s = em_mul(y, lna, &t1);
        if (s == EM_OK) s = em_mul(bw->grad, t1, &t2);
        /* where a == 0 and b >= 0 the product y ln a is 0 * -inf: 0 there, as PyTorch (b < 0
         * keeps inf * -inf) */
        if (s == EM_OK) s = em_eq_scalar(a, 0.0, &az);
        if (s == EM_OK) {
            em_tensor *zero = NULL;
            s = em_full(NULL, 0, 0.0, b->dtype, em_tensor_device(b), &zero);
            if (s == EM_OK) s = em_ge(b, zero, &bnn);
            em_tensor_release(zero);
        }
        if (s == EM_OK) s = em_logical_and(az, bnn, &mask);
        if (s == EM_OK) s = em_masked_fill(t2, mask, 0.0, &t3);
        em_tensor_release(lna);
        em_tensor_release(az);
        em_tensor_release(bnn);
        em_tensor_release(mask);
        em_tensor_release(t1);
        em_tensor_release(t2);
        if (s == EM_OK) s = put(bw, 1, t3);
        else em_tensor_release(t3);
    }
    return s;
}

/* remainder(a, b) = a - floor(a/b) b: d/da = 1, d/db = -floor(a/b) */
static em_status rem_backward(emi_ad_bw *bw) {
    em_status s = EM_OK;
    if (bw->need[0]) {
        em_tensor_retain(bw->grad);
        s = put(bw, 0, bw->grad);
    }
    if (s == EM_OK && bw->need[1]) {
        em_tensor *a, *b, *q = NULL, *f = NULL, *g = NULL, *n = NULL;
        s = emi_bw_input(bw, 0, &a);
        if (s == EM_OK) s = emi_bw_input(bw, 1, &b);
        if (s == EM_OK) s = em_div(a, b, &q);
        if (s == EM_OK) s = em_floor(q, &f);
        if (s == EM_OK) s = em_mul(bw->grad, f, &g);
        if (s == EM_OK) s = em_neg(g, &n);
        em_tensor_release(q);
        em_tensor_release(f);
        em_tensor_release(g);
        if (s == EM_OK) s = put(bw, 1, n);
    }
    return s;
}

/* maximum / minimum: the gradient goes to the winner; ties split it half and half, as
 * PyTorch does. */
static em_status minmax_backward(emi_ad_bw *bw, bool is_max) {
    em_tensor *a, *b, *win = NULL, *tie = NULL, *wf = NULL, *tf = NULL, *half = NULL;
    em_status s = emi_bw_input(bw, 0, &a);
    if (s == EM_OK) s = emi_bw_input(bw, 1, &b);
    if (s == EM_OK) s = is_max ? em_gt(a, b, &win) : em_lt(a, b, &win);
    if (s == EM_OK) s = em_eq(a, b, &tie);
    if (s == EM_OK) s = em_cast(win, bw->grad->dtype, &wf);
    if (s == EM_OK) s = em_cast(tie, bw->grad->dtype, &tf);
    if (s == EM_OK) s = em_mul_scalar(tf, 0.5, &half);
    /* share of a: win + tie/2; share of b: 1 - share of a (where neither is NaN) */
    em_tensor *sa = NULL, *sb = NULL;
    if (s == EM_OK) s = em_add(wf, half, &sa);
    if (s == EM_OK) s = em_mul_scalar(sa, -1.0, &sb);
    if (s == EM_OK) {
        em_tensor *t;
        s = em_add_scalar(sb, 1.0, &t);
        em_tensor_release(sb);
        sb = t;
    }
    for (int i = 0; i < 2 && s == EM_OK; i++) {
        if (!bw->need[i]) continue;
        em_tensor *g;
        s = em_mul(bw->grad, i == 0 ? sa : sb, &g);
        if (s == EM_OK) s = put(bw, i, g);
    }
    em_tensor_release(win);
    em_tensor_release(tie);
    em_tensor_release(wf);
    em_tensor_release(tf);
    em_tensor_release(half);
    em_tensor_release(sa);
    em_tensor_release(sb);
    return s;
}

/* atan2(a, b): d/da = b / (a^2 + b^2), d/db = -a / (a^2 + b^2) */
static em_status atan2_backward(emi_ad_bw *bw) {
    em_tensor *a, *b, *a2 = NULL, *b2 = NULL, *r = NULL, *gr = NULL, *g = NULL;
    em_status s = emi_bw_input(bw, 0, &a);
    if (s == EM_OK) s = emi_bw_input(bw, 1, &b);
    if (s == EM_OK) s = em_mul(a, a, &a2);
    if (s == EM_OK) s = em_mul(b, b, &b2);
    if (s == EM_OK) s = em_add(a2, b2, &r);
    if (s == EM_OK) s = em_div(bw->grad, r, &gr); /* grad / (a^2 + b^2) */
    if (s == EM_OK && bw->need[0]) {
        s = em_mul(gr, b, &g);
        if (s == EM_OK) s = put(bw, 0, g);
        g = NULL;
    }
    if (s == EM_OK && bw->need[1]) {
        s = em_mul(gr, a, &g);
        if (s == EM_OK) s = put_neg(bw, 1, g);
    }
    em_tensor_release(g);
    em_tensor_release(a2);
    em_tensor_release(b2);
    em_tensor_release(r);
    em_tensor_release(gr);
    return s;
}

static em_status max_backward(emi_ad_bw *bw) { return minmax_backward(bw, true); }
static em_status min_backward(emi_ad_bw *bw) { return minmax_backward(bw, false); }

#define IN01 (EMI_NEED_IN(0) | EMI_NEED_IN(1))
static const emi_ad_rule rule_add = {"add", false, 0, binary_forward, add_backward};
static const emi_ad_rule rule_sub = {"sub", false, 0, binary_forward, sub_backward};
static const emi_ad_rule rule_mul = {"mul", false, IN01, binary_forward, mul_backward};
static const emi_ad_rule rule_div = {"div", false, IN01, binary_forward, div_backward};
static const emi_ad_rule rule_pow = {"pow", false, IN01 | EMI_NEED_OUT, binary_forward,
                                     pow_backward};
static const emi_ad_rule rule_rem = {"remainder", false, IN01, binary_forward, rem_backward};
static const emi_ad_rule rule_max = {"maximum", false, IN01, binary_forward, max_backward};
static const emi_ad_rule rule_min = {"minimum", false, IN01, binary_forward, min_backward};
static const emi_ad_rule rule_atan2 = {"atan2", false, IN01, binary_forward, atan2_backward};

const emi_ad_rule *const emi_rules_binary[EM_BIN_COUNT] = {
    [EM_BIN_ADD] = &rule_add, [EM_BIN_SUB] = &rule_sub, [EM_BIN_MUL] = &rule_mul,
    [EM_BIN_DIV] = &rule_div, [EM_BIN_POW] = &rule_pow, [EM_BIN_REM] = &rule_rem,
    [EM_BIN_MAX] = &rule_max, [EM_BIN_MIN] = &rule_min, [EM_BIN_ATAN2] = &rule_atan2,
};

/* ---- where(cond, a, b), inputs (a, b, cond) ---- */

static em_status where_forward(const void *p, em_tensor *const *in, int nin, em_tensor **out) {
    (void)p;
    (void)nin;
    return em_where(in[2], in[0], in[1], out);
}

static em_status where_backward(emi_ad_bw *bw) {
    em_tensor *cond;
    em_status s = emi_bw_input(bw, 2, &cond);
    for (int i = 0; i < 2 && s == EM_OK; i++) {
        if (!bw->need[i]) continue;
        em_tensor *zero = NULL, *g = NULL;
        /* a 0-d zero, broadcast by where: no full-size tensor of zeros */
        s = em_full(NULL, 0, 0.0, bw->grad->dtype, em_tensor_device(bw->grad), &zero);
        if (s == EM_OK)
            s = i == 0 ? em_where(cond, bw->grad, zero, &g) : em_where(cond, zero, bw->grad, &g);
        em_tensor_release(zero);
        if (s == EM_OK) s = put(bw, i, g);
    }
    return s;
}

const emi_ad_rule emi_rule_where = {"where", false, EMI_NEED_IN(2), where_forward,
                                    where_backward};

/* ---- clamp_tensor(x, lo, hi), inputs (x, lo or NULL, hi or NULL) ---- */

static em_status clamp_tensor_forward(const void *p, em_tensor *const *in, int nin,
                                      em_tensor **out) {
    (void)nin;
    const emi_rule_clamp_tensor_params *cp = p;
    return em_clamp_tensor(in[0], cp->has_lo ? in[1] : NULL, cp->has_hi ? in[2] : NULL, out);
}

/* gin[i] = unbroadcast(where(m, grad, 0)); m consumed. */
static em_status put_where(emi_ad_bw *bw, int i, em_tensor *m, em_status s) {
    em_tensor *zero = NULL, *g = NULL;
    if (s == EM_OK) s = em_full(NULL, 0, 0.0, bw->grad->dtype, em_tensor_device(bw->grad), &zero);
    if (s == EM_OK) s = em_where(m, bw->grad, zero, &g);
    em_tensor_release(zero);
    em_tensor_release(m);
    if (s == EM_OK) return put(bw, i, g);
    em_tensor_release(g);
    return s;
}

/* a op b, then combined with *acc by and (or `or`) when *acc is set. */
static em_status mask_join(em_status s, em_tensor **acc, em_tensor *m, bool or) {
    if (s != EM_OK || !*acc) {
        if (s == EM_OK) *acc = m;
        else em_tensor_release(m);
        return s;
    }
    em_tensor *r = NULL;
    s = or ? em_logical_or(*acc, m, &r) : em_logical_and(*acc, m, &r);
    em_tensor_release(*acc);
    em_tensor_release(m);
    *acc = r;
    return s;
}

/* As PyTorch's clamp_backward and clamp_backward_min_max: x gets the gradient where
 * lo <= x <= hi (NaN blocks it); lo where x < lo (and lo < hi when hi is given); hi where
 * x > hi (or hi < lo when lo is given). */
static em_status clamp_tensor_backward(emi_ad_bw *bw) {
    const emi_rule_clamp_tensor_params *cp = bw->params;
    em_tensor *x, *lo = NULL, *hi = NULL;
    em_status s = emi_bw_input(bw, 0, &x);
    if (s == EM_OK && cp->has_lo) s = emi_bw_input(bw, 1, &lo);
    if (s == EM_OK && cp->has_hi) s = emi_bw_input(bw, 2, &hi);
    if (s != EM_OK) return s;
    if (bw->need[0]) {
        em_tensor *m = NULL, *t = NULL;
        if (lo) {
            s = em_ge(x, lo, &t);
            s = mask_join(s, &m, t, false);
        }
        if (s == EM_OK && hi) {
            t = NULL;
            s = em_le(x, hi, &t);
            s = mask_join(s, &m, t, false);
        }
        s = put_where(bw, 0, m, s);
    }
    if (s == EM_OK && lo && bw->need[1]) {
        em_tensor *m = NULL, *t = NULL;
        s = em_lt(x, lo, &t);
        s = mask_join(s, &m, t, false);
        if (s == EM_OK && hi) {
            t = NULL;
            s = em_lt(lo, hi, &t);
            s = mask_join(s, &m, t, false);
        }
        s = put_where(bw, 1, m, s);
    }
    if (s == EM_OK && hi && bw->need[2]) {
        em_tensor *m = NULL, *t = NULL;
        s = em_gt(x, hi, &t);
        s = mask_join(s, &m, t, false);
        if (s == EM_OK && lo) {
            t = NULL;
            s = em_lt(hi, lo, &t);
            s = mask_join(s, &m, t, true);
        }
        s = put_where(bw, 2, m, s);
    }
    return s;
}

const emi_ad_rule emi_rule_clamp_tensor = {"clamp_tensor", false,
                                           EMI_NEED_IN(0) | EMI_NEED_IN(1) | EMI_NEED_IN(2),
                                           clamp_tensor_forward, clamp_tensor_backward};
