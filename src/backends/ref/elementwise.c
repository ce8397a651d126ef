/*
 * elementwise.c — the reference backend's elementwise kernels: unary, binary, binary with a
 * scalar, and where. Floats are computed in double (rounded to the dtype on store), ints in
 * int64 wrapping like two's complement in the dtype's width, bools as 0/1.
 * Inputs are any strided views of out's shape; out may alias an input element for element
 * (the in-place `_` variants), which a read-then-write loop handles.
 */
#include "ref.h"

#define REF_SQRT1_2 0.70710678118654752440

/* ---- scalar functions ---- */

/* op(x) for a float element (computed in double). p holds clamp's lo and hi, softplus's beta
 * and threshold, nan_to_num's three values. */
static double un_float(em_unary_op op, double x, const double *p) {
    switch (op) {
    case EM_UN_NEG: return -x;
    case EM_UN_ABS: return fabs(x);
    case EM_UN_EXP: return exp(x);
    case EM_UN_LOG: return log(x);
    case EM_UN_LOG1P: return log1p(x);
    case EM_UN_SQRT: return sqrt(x);
    case EM_UN_RSQRT: return 1.0 / sqrt(x);
    case EM_UN_SIN: return sin(x);
    case EM_UN_COS: return cos(x);
    case EM_UN_TANH: return tanh(x);
    case EM_UN_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case EM_UN_RELU: return x > 0 || x != x ? x : 0.0;
    case EM_UN_GELU: return 0.5 * x * (1.0 + erf(x * REF_SQRT1_2));
    case EM_UN_SILU: return x / (1.0 + exp(-x));
    case EM_UN_ERF: return erf(x);
    case EM_UN_FLOOR: return floor(x);
    case EM_UN_CEIL: return ceil(x);
    case EM_UN_ROUND: return nearbyint(x); /* half to even in the default rounding mode */
    case EM_UN_RECIP: return 1.0 / x;
    case EM_UN_SIGN: return x > 0 ? 1.0 : x < 0 ? -1.0 : x; /* keeps 0 and NaN */
    case EM_UN_CLAMP: return x < p[0] ? p[0] : x > p[1] ? p[1] : x; /* NaN stays NaN */
    case EM_UN_LOGICAL_NOT: return x == 0;
    case EM_UN_SOFTPLUS: { /* PyTorch's: x itself above the threshold */
        double bx = x * p[0];
        return bx > p[1] ? x : log1p(exp(bx)) / p[0];
    }
    case EM_UN_TAN: return tan(x);
    case EM_UN_ASIN: return asin(x);
    case EM_UN_ACOS: return acos(x);
    case EM_UN_ATAN: return atan(x);
    case EM_UN_SINH: return sinh(x);
    case EM_UN_COSH: return cosh(x);
    case EM_UN_EXPM1: return expm1(x);
    case EM_UN_LOG2: return log2(x);
    case EM_UN_LOG10: return log10(x);
    case EM_UN_ISNAN: return x != x;
    case EM_UN_ISINF: return isinf(x) ? 1.0 : 0.0;
    case EM_UN_ISFINITE: return isfinite(x) ? 1.0 : 0.0;
    case EM_UN_NAN_TO_NUM: return x != x ? p[0] : x == INFINITY ? p[1] : x == -INFINITY ? p[2] : x;
    case EM_UN_COUNT: break;
    }
    return x;
}

/* A double bound as an int64, rounded inward: ceil for a lower bound, floor for an upper
 * one, saturating at the int64 range (so infinities mean "no bound"). */
static int64_t bound_to_int(double v, int lower) {
    v = lower ? ceil(v) : floor(v);
    if (v >= 9.2233720368547758e18) return INT64_MAX;
    if (v <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)v;
}

/* Wrapping two's-complement negation. */
static int64_t neg_wrap(int64_t x) { return (int64_t)(0u - (uint64_t)x); }

/* op(x) for an int or bool element. lo and hi are clamp's bounds. */
static int64_t un_int(em_unary_op op, int64_t x, int64_t lo, int64_t hi) {
    switch (op) {
    case EM_UN_NEG: return neg_wrap(x);
    case EM_UN_ABS: return x < 0 ? neg_wrap(x) : x;
    case EM_UN_RELU: return x > 0 ? x : 0;
    case EM_UN_SIGN: return (x > 0) - (x < 0);
    case EM_UN_FLOOR: case EM_UN_CEIL: case EM_UN_ROUND: return x;
    case EM_UN_CLAMP: return x < lo ? lo : x > hi ? hi : x;
    case EM_UN_LOGICAL_NOT: return x == 0;
    case EM_UN_ISNAN: case EM_UN_ISINF: return 0; /* ints: none (the core answers itself) */
    case EM_UN_ISFINITE: return 1;
    default: break;
    }
    return x; /* float-only ops never reach an int kernel; nan_to_num is the identity */
}

/* Python's % on doubles, as numpy.remainder: the result takes the divisor's sign. */
static double rem_float(double a, double b) {
    double m = fmod(a, b);
    if (b == 0) return m; /* NaN */
    if (m != 0) {
        if ((b < 0) != (m < 0)) m += b;
    } else {
        m = copysign(0.0, b);
    }
    return m;
}

/* a op b for float elements (comparisons give 0/1). max/min propagate NaN. */
static double bin_float(em_binary_op op, double a, double b) {
    switch (op) {
    case EM_BIN_ADD: return a + b;
    case EM_BIN_SUB: return a - b;
    case EM_BIN_MUL: return a * b;
    case EM_BIN_DIV: return a / b;
    case EM_BIN_POW: return pow(a, b);
    case EM_BIN_REM: return rem_float(a, b);
    case EM_BIN_MAX: return a != a ? a : b != b ? b : a >= b ? a : b;
    case EM_BIN_MIN: return a != a ? a : b != b ? b : a <= b ? a : b;
    case EM_BIN_EQ: return a == b;
    case EM_BIN_NE: return a != b;
    case EM_BIN_LT: return a < b;
    case EM_BIN_LE: return a <= b;
    case EM_BIN_GT: return a > b;
    case EM_BIN_GE: return a >= b;
    case EM_BIN_AND: return a != 0 && b != 0;
    case EM_BIN_OR: return a != 0 || b != 0;
    case EM_BIN_ATAN2: return atan2(a, b);
    case EM_BIN_XOR: return (a != 0) != (b != 0);
    case EM_BIN_COUNT: break;
    }
    return 0;
}

/* Floor division (Python //); 0 for a zero divisor; INT64_MIN // -1 wraps. */
static int64_t div_int(int64_t a, int64_t b) {
    if (b == 0) return 0;
    if (b == -1) return neg_wrap(a);
    int64_t q = a / b;
    if (a % b != 0 && ((a < 0) != (b < 0))) q--;
    return q;
}

/* Python's % on ints: the divisor's sign; 0 for a zero divisor. */
static int64_t rem_int(int64_t a, int64_t b) {
    if (b == 0 || b == -1) return 0;
    int64_t r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}

/* a op b for int or bool elements, wrapping in int64 (the store wraps to the width). */
static int64_t bin_int(em_binary_op op, int64_t a, int64_t b) {
    switch (op) {
    case EM_BIN_ADD: return (int64_t)((uint64_t)a + (uint64_t)b);
    case EM_BIN_SUB: return (int64_t)((uint64_t)a - (uint64_t)b);
    case EM_BIN_MUL: return (int64_t)((uint64_t)a * (uint64_t)b);
    case EM_BIN_DIV: return div_int(a, b);
    case EM_BIN_POW: return (int64_t)pow((double)a, (double)b); /* float-only; not reached */
    case EM_BIN_REM: return rem_int(a, b);
    case EM_BIN_MAX: return a >= b ? a : b;
    case EM_BIN_MIN: return a <= b ? a : b;
    case EM_BIN_EQ: return a == b;
    case EM_BIN_NE: return a != b;
    case EM_BIN_LT: return a < b;
    case EM_BIN_LE: return a <= b;
    case EM_BIN_GT: return a > b;
    case EM_BIN_GE: return a >= b;
    case EM_BIN_AND: return a != 0 && b != 0;
    case EM_BIN_OR: return a != 0 || b != 0;
    case EM_BIN_ATAN2: return (int64_t)atan2((double)a, (double)b); /* float-only; not reached */
    case EM_BIN_XOR: return (a != 0) != (b != 0);
    case EM_BIN_COUNT: break;
    }
    return 0;
}

/* ---- kernels ---- */

/* out = op(in), elementwise over strided views. */
em_status ref_unary(void *ctx, em_unary_op op, const em_view *out, const em_view *in,
                    const double *params) {
    (void)ctx;
    ref_iter it;
    ref_iter_init(&it, 2, out, in);
    const em_dtype id = in->dtype, od = out->dtype;
    if (ref_is_float(id)) {
        for (int64_t i = 0; i < it.numel; i++, ref_iter_next(&it))
            ref_st(out->buf, od, it.off[0], un_float(op, ref_ld(in->buf, id, it.off[1]), params));
    } else {
        int64_t lo = INT64_MIN, hi = INT64_MAX;
        if (op == EM_UN_CLAMP) {
            lo = bound_to_int(params[0], 1);
            hi = bound_to_int(params[1], 0);
        }
        for (int64_t i = 0; i < it.numel; i++, ref_iter_next(&it))
            ref_sti(out->buf, od, it.off[0], un_int(op, ref_ldi(in->buf, id, it.off[1]), lo, hi));
    }
    return EM_OK;
}

/* out = a op b over views already broadcast to out's shape. */
em_status ref_binary(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                     const em_view *b) {
    (void)ctx;
    const em_view *vs[3] = {out, a, b};
    ref_iter it;
    ref_iter_init4(&it, 3, vs);
    const em_dtype id = a->dtype, od = out->dtype;
    if (ref_is_float(id)) {
        for (int64_t i = 0; i < it.numel; i++, ref_iter_next(&it)) {
            double x = ref_ld(a->buf, id, it.off[1]), y = ref_ld(b->buf, id, it.off[2]);
            ref_st(out->buf, od, it.off[0], bin_float(op, x, y));
        }
    } else {
        for (int64_t i = 0; i < it.numel; i++, ref_iter_next(&it)) {
            int64_t x = ref_ldi(a->buf, id, it.off[1]), y = ref_ldi(b->buf, id, it.off[2]);
            ref_sti(out->buf, od, it.off[0], bin_int(op, x, y));
        }
    }
    return EM_OK;
}

/* out = a op s; s is already a value of a's dtype. */
em_status ref_binary_scalar(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                            double s) {
    (void)ctx;
    ref_iter it;
    ref_iter_init(&it, 2, out, a);
    const em_dtype id = a->dtype, od = out->dtype;
    if (ref_is_float(id)) {
        for (int64_t i = 0; i < it.numel; i++, ref_iter_next(&it))
            ref_st(out->buf, od, it.off[0], bin_float(op, ref_ld(a->buf, id, it.off[1]), s));
    } else {
        int64_t y = s != s                         ? 0
                    : s >= 9.2233720368547758e18  ? INT64_MAX
                    : s <= -9.2233720368547758e18 ? INT64_MIN
                                                  : (int64_t)s;
        for (int64_t i = 0; i < it.numel; i++, ref_iter_next(&it))
            ref_sti(out->buf, od, it.off[0], bin_int(op, ref_ldi(a->buf, id, it.off[1]), y));
    }
    return EM_OK;
}

/* out = cond ? a : b, copying elements bit for bit (a, b and out share a dtype). */
em_status ref_where(void *ctx, const em_view *out, const em_view *cond, const em_view *a,
                    const em_view *b) {
    (void)ctx;
    const em_view *vs[4] = {out, cond, a, b};
    ref_iter it;
    ref_iter_init4(&it, 4, vs);
    const size_t es = em_dtype_size(out->dtype);
    for (int64_t i = 0; i < it.numel; i++, ref_iter_next(&it)) {
        const int pick = ref_ldi(cond->buf, cond->dtype, it.off[1]) != 0;
        const em_view *src = pick ? a : b;
        const int64_t off = pick ? it.off[2] : it.off[3];
        memcpy((char *)out->buf + (size_t)it.off[0] * es, (const char *)src->buf + (size_t)off * es,
               es);
    }
    return EM_OK;
}
