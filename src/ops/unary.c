/*
 * unary.c — the public unary elementwise ops: math functions, activations, rounding, sign,
 * clamp, and the consuming em_relu_ and em_exp_.
 */
#include <math.h>

#include "ops/elementwise.h"

/* Defines em_<name>(x, out) as the unary op `op` over tensors of kind `k`. */
#define EW_UNARY(name, op, k)                                                                \
    em_status em_##name(const em_tensor *x, em_tensor **out) {                               \
        return ew_unary("em_" #name, op, k, x, NULL, out);                                   \
    }

/* Numeric (float or int). */
EW_UNARY(neg, EM_UN_NEG, EW_NUMERIC)
EW_UNARY(abs, EM_UN_ABS, EW_NUMERIC)
EW_UNARY(relu, EM_UN_RELU, EW_NUMERIC)
EW_UNARY(sign, EM_UN_SIGN, EW_NUMERIC)
EW_UNARY(floor, EM_UN_FLOOR, EW_NUMERIC)
EW_UNARY(ceil, EM_UN_CEIL, EW_NUMERIC)
EW_UNARY(round, EM_UN_ROUND, EW_NUMERIC)

/* Float only. */
EW_UNARY(exp, EM_UN_EXP, EW_FLOAT)
EW_UNARY(log, EM_UN_LOG, EW_FLOAT)
EW_UNARY(log1p, EM_UN_LOG1P, EW_FLOAT)
EW_UNARY(sqrt, EM_UN_SQRT, EW_FLOAT)
EW_UNARY(rsqrt, EM_UN_RSQRT, EW_FLOAT)
EW_UNARY(sin, EM_UN_SIN, EW_FLOAT)
EW_UNARY(cos, EM_UN_COS, EW_FLOAT)
EW_UNARY(tanh, EM_UN_TANH, EW_FLOAT)
EW_UNARY(sigmoid, EM_UN_SIGMOID, EW_FLOAT)
EW_UNARY(gelu, EM_UN_GELU, EW_FLOAT)
EW_UNARY(silu, EM_UN_SILU, EW_FLOAT)
EW_UNARY(erf, EM_UN_ERF, EW_FLOAT)
EW_UNARY(recip, EM_UN_RECIP, EW_FLOAT)

/* Bool. */
EW_UNARY(logical_not, EM_UN_LOGICAL_NOT, EW_BOOL)

/* Clamps x into [lo, hi]; the bounds must not be NaN and lo <= hi. */
em_status em_clamp(const em_tensor *x, double lo, double hi, em_tensor **out) {
    static const char fn[] = "em_clamp";
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_out(fn, out));
    if (isnan(lo) || isnan(hi))
        return emi_fail(EM_ERR_ARG, "%s: bounds must not be NaN (lo %g, hi %g)", fn, lo, hi);
    if (lo > hi) return emi_fail(EM_ERR_ARG, "%s: lo %g is greater than hi %g", fn, lo, hi);
    const double params[2] = {lo, hi};
    return ew_unary(fn, EM_UN_CLAMP, EW_NUMERIC, x, params, out);
}

/* relu consuming x: written into x's buffer when em_tensor_can_mut(x). */
em_status em_relu_(em_tensor *x, em_tensor **out) {
    return ew_unary_("em_relu_", EM_UN_RELU, EW_NUMERIC, x, NULL, out);
}

/* exp consuming x, likewise (a log_softmax backward's exp(y) in y's buffer). */
em_status em_exp_(em_tensor *x, em_tensor **out) {
    return ew_unary_("em_exp_", EM_UN_EXP, EW_FLOAT, x, NULL, out);
}

/* ---- issue 14: more math, softplus, the float classes, nan_to_num ---- */

/* Float only (an int or bool input is EM_ERR_DTYPE, as for em_sin). */
EW_UNARY(tan, EM_UN_TAN, EW_FLOAT)
EW_UNARY(asin, EM_UN_ASIN, EW_FLOAT)
EW_UNARY(acos, EM_UN_ACOS, EW_FLOAT)
EW_UNARY(atan, EM_UN_ATAN, EW_FLOAT)
EW_UNARY(sinh, EM_UN_SINH, EW_FLOAT)
EW_UNARY(cosh, EM_UN_COSH, EW_FLOAT)
EW_UNARY(expm1, EM_UN_EXPM1, EW_FLOAT)
EW_UNARY(log2, EM_UN_LOG2, EW_FLOAT)
EW_UNARY(log10, EM_UN_LOG10, EW_FLOAT)

/* PyTorch's softplus: log(1 + exp(beta x)) / beta, and x itself where beta x > threshold. */
em_status em_softplus(const em_tensor *x, double beta, double threshold, em_tensor **out) {
    static const char fn[] = "em_softplus";
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_out(fn, out));
    if (isnan(beta) || isnan(threshold))
        return emi_fail(EM_ERR_ARG, "%s: beta and threshold must not be NaN (beta %g, threshold %g)",
                        fn, beta, threshold);
    if (beta == 0 || isinf(beta))
        return emi_fail(EM_ERR_ARG, "%s: beta must be finite and nonzero, got %g", fn, beta);
    const double params[2] = {beta, threshold};
    return ew_unary(fn, EM_UN_SOFTPLUS, EW_FLOAT, x, params, out);
}

/* isnan / isinf / isfinite: float inputs go to the kernel; an int or bool tensor has no NaN
 * and no infinity, so its answer is a constant (as PyTorch's). */
static em_status float_class(const char *fn, em_unary_op op, const em_tensor *x,
                             em_tensor **out) {
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_not_quantized(fn, x));
    if (emi_kind(x->dtype) == EM_KIND_FLOAT) return ew_unary(fn, op, EW_FLOAT, x, NULL, out);
    em_tensor *o = NULL;
    EMI_TRY(em_full(x->v.shape, x->v.rank, op == EM_UN_ISFINITE ? 1.0 : 0.0, EM_BOOL, x->dev, &o));
    *out = o;
    return EM_OK;
}

em_status em_isnan(const em_tensor *x, em_tensor **out) {
    return float_class("em_isnan", EM_UN_ISNAN, x, out);
}
em_status em_isinf(const em_tensor *x, em_tensor **out) {
    return float_class("em_isinf", EM_UN_ISINF, x, out);
}
em_status em_isfinite(const em_tensor *x, em_tensor **out) {
    return float_class("em_isfinite", EM_UN_ISFINITE, x, out);
}

/* The largest finite value of a float dtype. */
static double float_max(em_dtype dt) {
    switch (dt) {
    case EM_F64: return 1.7976931348623157e308;
    case EM_F16: return 65504.0;
    case EM_BF16: return 3.3895313892515355e38;
    default: return 3.4028234663852886e38;
    }
}

/* NaN, +inf and -inf replaced; posinf / neginf NULL: the dtype's largest / lowest finite value
 * (PyTorch's defaults). Int and bool tensors have none of them: a copy. */
em_status em_nan_to_num(const em_tensor *x, double nan, const double *posinf,
                        const double *neginf, em_tensor **out) {
    static const char fn[] = "em_nan_to_num";
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_not_quantized(fn, x));
    if (emi_kind(x->dtype) != EM_KIND_FLOAT) return em_clone(x, out);
    const double m = float_max(x->dtype);
    const double params[3] = {nan, posinf ? *posinf : m, neginf ? *neginf : -m};
    return ew_unary(fn, EM_UN_NAN_TO_NUM, EW_FLOAT, x, params, out);
}
