/* elementwise_scalar.c — backward rules of a op s (the `_scalar` forms) for add sub mul div
 * pow remainder maximum minimum; s is a constant, so only a gets a gradient. */
#include "autodiff/rules/rules.h"

/* Recomputes a op s from a. */
static em_status scalar_forward(const void *params, em_tensor *const *in, int nin,
                                em_tensor **out) {
    (void)nin;
    const emi_rule_scalar_params *p = params;
    switch (p->op) {
    case EM_BIN_ADD: return em_add_scalar(in[0], p->s, out);
    case EM_BIN_SUB: return em_sub_scalar(in[0], p->s, out);
    case EM_BIN_MUL: return em_mul_scalar(in[0], p->s, out);
    case EM_BIN_DIV: return em_div_scalar(in[0], p->s, out);
    case EM_BIN_POW: return em_pow_scalar(in[0], p->s, out);
    case EM_BIN_REM: return em_remainder_scalar(in[0], p->s, out);
    case EM_BIN_MAX: return em_maximum_scalar(in[0], p->s, out);
    case EM_BIN_MIN: return em_minimum_scalar(in[0], p->s, out);
    default: break;
    }
    return emi_fail(EM_ERR_STATE, "scalar_forward: op %d has no recompute", (int)p->op);
}

/* scalar_forward in a consumed input's buffer (a * s and a + s). */
em_status emi_scalar_forward_own(const void *params, em_tensor **in, const bool *own, int nin,
                                 em_tensor **out) {
    const emi_rule_scalar_params *p = params;
    if (own[0] && (p->op == EM_BIN_MUL || p->op == EM_BIN_ADD)) {
        em_tensor *a = in[0];
        in[0] = NULL;
        return p->op == EM_BIN_MUL ? em_mul_scalar_(a, p->s, out) : em_add_scalar_(a, p->s, out);
    }
    em_status s = scalar_forward(params, in, nin, out);
    if (own[0]) {
        em_tensor_release(in[0]);
        in[0] = NULL;
    }
    return s;
}

/* a + s, a - s, remainder(a, s) = a - floor(a/s) s: d/da = 1 */
static em_status pass_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor_retain(bw->grad);
    bw->gin[0] = bw->grad;
    return EM_OK;
}

static em_status mul_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    const emi_rule_scalar_params *p = bw->params;
    return em_mul_scalar(bw->grad, p->s, &bw->gin[0]);
}

static em_status div_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    const emi_rule_scalar_params *p = bw->params;
    return em_div_scalar(bw->grad, p->s, &bw->gin[0]);
}

/* d a^s = s a^(s-1); 0 for s == 0 (as PyTorch, also where a == 0) */
static em_status pow_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    const emi_rule_scalar_params *p = bw->params;
    if (p->s == 0.0) return em_full_like(bw->grad, 0.0, &bw->gin[0]);
    em_tensor *a, *t = NULL, *f = NULL;
    em_status s = emi_bw_input(bw, 0, &a);
    if (s == EM_OK) s = em_pow_scalar(a, p->s - 1.0, &t);
    if (s == EM_OK) s = em_mul_scalar(t, p->s, &f);
    if (s == EM_OK) s = em_mul(bw->grad, f, &bw->gin[0]);
    em_tensor_release(t);
    em_tensor_release(f);
    return s;
}

/* maximum(a, s) / minimum(a, s): the gradient passes where a wins and half of it at ties, like
 * maximum / minimum of two tensors (elementwise_binary.c). */
static em_status minmax_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    const emi_rule_scalar_params *p = bw->params;
    em_tensor *a, *win = NULL, *tie = NULL, *wf = NULL, *tf = NULL, *half = NULL, *share = NULL;
    em_status s = emi_bw_input(bw, 0, &a);
    if (s == EM_OK)
        s = p->op == EM_BIN_MAX ? em_gt_scalar(a, p->s, &win) : em_lt_scalar(a, p->s, &win);
    if (s == EM_OK) s = em_eq_scalar(a, p->s, &tie);
    if (s == EM_OK) s = em_cast(win, bw->grad->dtype, &wf);
    if (s == EM_OK) s = em_cast(tie, bw->grad->dtype, &tf);
    if (s == EM_OK) s = em_mul_scalar(tf, 0.5, &half);
    if (s == EM_OK) s = em_add(wf, half, &share);
    if (s == EM_OK) s = em_mul(bw->grad, share, &bw->gin[0]);
    em_tensor_release(win);
    em_tensor_release(tie);
    em_tensor_release(wf);
    em_tensor_release(tf);
    em_tensor_release(half);
    em_tensor_release(share);
    return s;
}

#define RULE(id, nm, needs, bw) \
    static const emi_ad_rule rule_##id = {nm, false, needs, scalar_forward, bw}
RULE(add, "add_scalar", 0, pass_backward);
RULE(sub, "sub_scalar", 0, pass_backward);
RULE(mul, "mul_scalar", 0, mul_backward);
RULE(div, "div_scalar", 0, div_backward);
RULE(pow, "pow_scalar", EMI_NEED_IN(0), pow_backward);
RULE(rem, "remainder_scalar", 0, pass_backward);
RULE(max, "maximum_scalar", EMI_NEED_IN(0), minmax_backward);
RULE(min, "minimum_scalar", EMI_NEED_IN(0), minmax_backward);

const emi_ad_rule *const emi_rules_scalar[EM_BIN_COUNT] = {
    [EM_BIN_ADD] = &rule_add, [EM_BIN_SUB] = &rule_sub, [EM_BIN_MUL] = &rule_mul,
    [EM_BIN_DIV] = &rule_div, [EM_BIN_POW] = &rule_pow, [EM_BIN_REM] = &rule_rem,
    [EM_BIN_MAX] = &rule_max, [EM_BIN_MIN] = &rule_min,
};

emi_ad_forward_own emi_rule_forward_own(const emi_ad_rule *r) {
    for (int op = 0; op < EM_BIN_COUNT; op++) {
        if (emi_rules_scalar[op] == r) return emi_scalar_forward_own;
        if (emi_rules_binary[op] == r)
            return op == EM_BIN_ADD || op == EM_BIN_SUB || op == EM_BIN_MUL || op == EM_BIN_DIV
                       ? emi_binary_forward_own
                       : NULL;
    }
    for (int op = 0; op < EM_UN_COUNT; op++)
        if (emi_rules_unary[op] == r && r != &emi_rule_no_grad) return emi_unary_forward_own;
    return NULL;
}
