/*
 * unary.c — the public unary elementwise ops: math functions, activations, rounding, sign,
 * clamp, and the consuming em_relu_.
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
