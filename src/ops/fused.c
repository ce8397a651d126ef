/*
 * fused.c — the internal entry points of the fused kernel slots (fused.h): checks, the
 * output, routing to the backend's unary_backward / adam_step.
 */
#include <stdlib.h>

#include "autodiff/autodiff.h"
#include "ops/elementwise.h"
#include "ops/fused.h"

/* -1: not read yet; 0 off; 1 on. */
static atomic_int fused_state = -1;

bool emi_fused_on(void) {
    int v = atomic_load_explicit(&fused_state, memory_order_relaxed);
    if (v < 0) {
        const char *e = getenv("EMBER_FUSED");
        int want = !(e && e[0] == '0' && e[1] == 0);
        int expect = -1;
        atomic_compare_exchange_strong(&fused_state, &expect, want);
        v = atomic_load(&fused_state);
    }
    return v == 1;
}

bool emi_fused_set(bool on) {
    bool was = emi_fused_on();
    atomic_store(&fused_state, on ? 1 : 0);
    return was;
}

bool emi_has_unary_backward(const em_tensor *t) {
    return t && t->magic == EMI_TENSOR_LIVE && t->st->ops->unary_backward && emi_fused_on();
}

bool emi_has_adam_step(const em_tensor *t) {
    return t && t->magic == EMI_TENSOR_LIVE && t->st->ops->adam_step && emi_fused_on();
}

/* Which value op's gradient reads: 'x' (input), 'y' (output), 0: not a fused op. */
static char ub_reads(em_unary_op op) {
    switch (op) {
    case EM_UN_ABS: case EM_UN_LOG: case EM_UN_LOG1P: case EM_UN_SIN: case EM_UN_COS:
    case EM_UN_GELU: case EM_UN_SILU: case EM_UN_ERF: case EM_UN_CLAMP: return 'x';
    case EM_UN_EXP: case EM_UN_SQRT: case EM_UN_RSQRT: case EM_UN_TANH: case EM_UN_SIGMOID:
    case EM_UN_RECIP: case EM_UN_RELU: return 'y';
    default: return 0;
    }
}

/* t is present, untracked, of gy's dtype, shape and device. */
static em_status fused_check_like(const char *fn, const char *what, const em_tensor *t,
                                  const em_tensor *ref) {
    EMI_TRY(emi_check_tensor(fn, what, t));
    EMI_TRY(emi_check_same_device(fn, t, ref));
    EMI_TRY(emi_check_same_dtype(fn, t, ref));
    if (t->ad) return emi_fail(EM_ERR_UNSUPPORTED, "%s: %s is tracked (no second derivatives)", fn, what);
    if (!emi_same_shape(t->v.shape, t->v.rank, ref->v.shape, ref->v.rank)) {
        char a[96], b[96];
        return emi_fail(EM_ERR_SHAPE, "%s: %s has shape %s, expected %s", fn, what,
                        emi_shape_str(t->v.shape, t->v.rank, a, sizeof a),
                        emi_shape_str(ref->v.shape, ref->v.rank, b, sizeof b));
    }
    return EM_OK;
}

em_status emi_unary_backward(em_unary_op op, const em_tensor *x, const em_tensor *y,
                             const em_tensor *gy, const double *params, em_tensor **gx) {
    static const char fn[] = "emi_unary_backward";
    EMI_TRY(emi_check_out(fn, gx));
    EMI_TRY(emi_check_tensor(fn, "gy", gy));
    EMI_TRY(emi_check_float(fn, gy));
    if (gy->ad) return emi_fail(EM_ERR_UNSUPPORTED, "%s: gy is tracked (no second derivatives)", fn);
    const char reads = (unsigned)op < EM_UN_COUNT ? ub_reads(op) : 0;
    if (!reads) return emi_fail(EM_ERR_ARG, "%s: op %d has no fused gradient", fn, (int)op);
    const em_tensor *v = reads == 'x' ? x : y;
    if ((reads == 'x' && y) || (reads == 'y' && x))
        return emi_fail(EM_ERR_ARG, "%s: op %d reads %s only; pass NULL for %s", fn, (int)op,
                        reads == 'x' ? "x" : "y", reads == 'x' ? "y" : "x");
    EMI_TRY(fused_check_like(fn, reads == 'x' ? "x" : "y", v, gy));
    if (op == EM_UN_CLAMP && !params) return emi_fail(EM_ERR_ARG, "%s: clamp needs its bounds", fn);
    /* clamp's bounds as values of the dtype: x is compared with them there, as the composed
     * rule's em_ge / em_le compare x with its bounds made tensors of x's dtype (0.7 is
     * 0.7002 in f16, and an f16 x of 0.7002 passes the gradient) */
    double pb[2] = {0, 0};
    if (op == EM_UN_CLAMP) {
        pb[0] = ew_scalar_cast(gy->dtype, params[0]);
        pb[1] = ew_scalar_cast(gy->dtype, params[1]);
        params = pb;
    }
    const em_backend_ops *ops = gy->st->ops;
    if (!ops->unary_backward || !emi_fused_on()) return EM_ERR_UNSUPPORTED;
    em_tensor *o = NULL, *tv = NULL, *tg = NULL;
    const em_tensor *ins[2] = {gy, v};
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, ins, 2, &ad));
    em_status s = emi_empty(fn, emi_result_device(ins, 2), gy->dtype, gy->v.shape, gy->v.rank, &o);
    if (s != EM_OK) return s;
    if (emi_numel(gy->v.shape, gy->v.rank) > 0) {
        em_view vv, vg;
        s = emi_input_view(fn, v, &vv, &tv);
        if (s == EM_OK) s = emi_input_view(fn, gy, &vg, &tg);
        if (s == EM_OK)
            s = ops->unary_backward(gy->st->ctx, op, &o->v, reads == 'x' ? &vv : NULL,
                                    reads == 'y' ? &vv : NULL, &vg, params);
    }
    em_tensor_release(tv);
    em_tensor_release(tg);
    /* the device and mark any op on these inputs gives its result */
    if (s == EM_OK) s = emi_ad_end(&ad, NULL, ins, 2, o, NULL, 0);
    if (s != EM_OK) {
        em_tensor_release(o);
        return s;
    }
    *gx = o;
    return EM_OK;
}

em_status emi_adam_step(em_tensor *param, em_tensor *exp_avg, em_tensor *exp_avg_sq,
                        const em_tensor *grad, const em_adam_args *a) {
    static const char fn[] = "emi_adam_step";
    EMI_TRY(emi_check_tensor(fn, "param", param));
    EMI_TRY(emi_check_float(fn, param));
    if (!a) return emi_fail_null(fn, "args");
    if (param->ad) return emi_fail(EM_ERR_UNSUPPORTED, "%s: param is tracked (pass its detached value)", fn);
    EMI_TRY(fused_check_like(fn, "exp_avg", exp_avg, param));
    EMI_TRY(fused_check_like(fn, "exp_avg_sq", exp_avg_sq, param));
    EMI_TRY(fused_check_like(fn, "grad", grad, param));
    const em_backend_ops *ops = param->st->ops;
    if (!ops->adam_step || !emi_fused_on()) return EM_ERR_UNSUPPORTED;
    /* written in place: contiguous, and no two of the four in one buffer */
    if (!emi_view_is_contiguous(&param->v) || !emi_view_is_contiguous(&exp_avg->v) ||
        !emi_view_is_contiguous(&exp_avg_sq->v) || param->st == exp_avg->st ||
        param->st == exp_avg_sq->st || exp_avg->st == exp_avg_sq->st ||
        grad->st == param->st || grad->st == exp_avg->st || grad->st == exp_avg_sq->st)
        return EM_ERR_UNSUPPORTED;
    if (emi_numel(param->v.shape, param->v.rank) == 0) return EM_OK;
    em_view vg;
    em_tensor *tg = NULL;
    em_status s = emi_input_view(fn, grad, &vg, &tg);
    if (s == EM_OK)
        s = ops->adam_step(param->st->ctx, &param->v, &exp_avg->v, &exp_avg_sq->v, &vg, a);
    em_tensor_release(tg);
    return s;
}
