/*
 * elementwise.cl — copy/cast, fill, arange, unary, binary, binary-with-scalar and where.
 *
 * Built per dtype pair: -DA=<input tag> -DO=<output tag> (where adds -DC=<cond tag> when the
 * condition is not bool). The op is a kernel argument (the em_unary_op / em_binary_op value),
 * so one program serves every op of a dtype pair. The semantics are ref's
 * (src/backends/ref/elementwise.c): floats computed in CT_A (float for f16/bf16/f32, double for
 * f64), ints in long wrapping like two's complement, int division floors, remainder takes the
 * divisor's sign, x / 0 and x % 0 are 0 for ints, max/min propagate NaN.
 *
 * Every kernel takes n (elements) and contig (1: every view is row-major contiguous, so element
 * i is at view.offset + i); the global size is n rounded up to the group size.
 */
#ifndef C
#define C b8
#endif

typedef CAT(TY_, A) ta;
typedef CAT(CT_, A) ca;
typedef CAT(TY_, O) to;
typedef CAT(CT_, O) co;
typedef CAT(TY_, C) tc;

#if CAT(ISF_, A)
typedef ca sct; /* scalar arguments: float kinds in A's arithmetic type, ints as long */
#else
typedef long sct;
#endif

#ifdef OCL_FP64
typedef double real; /* arange's arithmetic */
#else
typedef float real;
#endif

#define LDA(p, i) CAT(LD_, A)(p, i)
#define STO(p, i, v) CAT(ST_, O)(p, i, v)
#define IDX(v, i) (contig ? (v).offset + (i) : vidx((v), (i)))

/* Op numbers: em_unary_op and em_binary_op of include/ember/backend.h. */
enum {
    UN_NEG, UN_ABS, UN_EXP, UN_LOG, UN_LOG1P, UN_SQRT, UN_RSQRT, UN_SIN, UN_COS, UN_TANH,
    UN_SIGMOID, UN_RELU, UN_GELU, UN_SILU, UN_ERF, UN_FLOOR, UN_CEIL, UN_ROUND, UN_RECIP, UN_SIGN,
    UN_CLAMP, UN_LOGICAL_NOT, UN_SOFTPLUS, UN_TAN, UN_ASIN, UN_ACOS, UN_ATAN, UN_SINH, UN_COSH,
    UN_EXPM1, UN_LOG2, UN_LOG10, UN_ISNAN, UN_ISINF, UN_ISFINITE, UN_NAN_TO_NUM
};
enum {
    BIN_ADD, BIN_SUB, BIN_MUL, BIN_DIV, BIN_POW, BIN_REM, BIN_MAX, BIN_MIN, BIN_EQ, BIN_NE,
    BIN_LT, BIN_LE, BIN_GT, BIN_GE, BIN_AND, BIN_OR, BIN_ATAN2, BIN_XOR
};

#if CAT(ISF_, A)
/* ---- float kinds ---- */

/* op(x); lo and hi are clamp's bounds (softplus: beta and threshold; nan_to_num: the values
 * for NaN and +inf, p2 the one for -inf). */
static inline ca un_op(int op, ca x, ca lo, ca hi, ca p2) {
    const ca one = (ca)1, zero = (ca)0;
    switch (op) {
    case UN_NEG: return -x;
    case UN_ABS: return fabs(x);
    case UN_EXP: return exp(x);
    case UN_LOG: return log(x);
    case UN_LOG1P: return log1p(x);
    case UN_SQRT: return sqrt(x);
    case UN_RSQRT: return one / sqrt(x);
    case UN_SIN: return sin(x);
    case UN_COS: return cos(x);
    case UN_TANH: return tanh(x);
    case UN_SIGMOID: return one / (one + exp(-x));
    case UN_RELU: return x > zero || isnan(x) ? x : zero;
    case UN_GELU: return (ca)0.5 * x * (one + erf(x * (ca)0.70710678118654752440));
    case UN_SILU: return x / (one + exp(-x));
    case UN_ERF: return erf(x);
    case UN_FLOOR: return floor(x);
    case UN_CEIL: return ceil(x);
    case UN_ROUND: return rint(x);
    case UN_RECIP: return one / x;
    case UN_SIGN: return x > zero ? one : x < zero ? -one : x;
    case UN_CLAMP: return x < lo ? lo : x > hi ? hi : x;
    case UN_LOGICAL_NOT: return x == zero ? one : zero;
    case UN_SOFTPLUS: return x * lo > hi ? x : log1p(exp(x * lo)) / lo;
    case UN_TAN: return tan(x);
    case UN_ASIN: return asin(x);
    case UN_ACOS: return acos(x);
    case UN_ATAN: return atan(x);
    case UN_SINH: return sinh(x);
    case UN_COSH: return cosh(x);
    case UN_EXPM1: return expm1(x);
    case UN_LOG2: return log2(x);
    case UN_LOG10: return log10(x);
    case UN_ISNAN: return isnan(x) ? one : zero;
    case UN_ISINF: return isinf(x) ? one : zero;
    case UN_ISFINITE: return isfinite(x) ? one : zero;
    case UN_NAN_TO_NUM: return isnan(x) ? lo : isinf(x) ? (x > zero ? hi : p2) : x;
    }
    return x;
}

/* numpy.remainder: the result takes the divisor's sign. */
static inline ca rem_op(ca a, ca b) {
    ca m = fmod(a, b);
    if (b == (ca)0) return m;
    if (m != (ca)0) {
        if ((b < (ca)0) != (m < (ca)0)) m += b;
    } else {
        m = copysign((ca)0, b);
    }
    return m;
}

/* a op b; comparisons give 0/1. */
static inline ca bin_op(int op, ca a, ca b) {
    switch (op) {
    case BIN_ADD: return a + b;
    case BIN_SUB: return a - b;
    case BIN_MUL: return a * b;
    case BIN_DIV: return a / b;
    case BIN_POW: return pow(a, b);
    case BIN_REM: return rem_op(a, b);
    case BIN_MAX: return isnan(a) ? a : isnan(b) ? b : a >= b ? a : b;
    case BIN_MIN: return isnan(a) ? a : isnan(b) ? b : a <= b ? a : b;
    case BIN_EQ: return a == b;
    case BIN_NE: return a != b;
    case BIN_LT: return a < b;
    case BIN_LE: return a <= b;
    case BIN_GT: return a > b;
    case BIN_GE: return a >= b;
    case BIN_AND: return a != (ca)0 && b != (ca)0;
    case BIN_OR: return a != (ca)0 || b != (ca)0;
    case BIN_ATAN2: return atan2(a, b);
    case BIN_XOR: return (a != (ca)0) != (b != (ca)0);
    }
    return (ca)0;
}

#define LOADX(p, i) LDA(p, i)
#define STORE_RES(p, i, r) STO(p, i, CAT(FROMF_, O)(r))
typedef ca xt; /* the arithmetic type of the kernels below */

#else
/* ---- ints and bool, in long ---- */

static inline long neg_wrap(long x) { return (long)(0ul - (ulong)x); }

/* op(x); lo and hi are clamp's bounds (p2 unused: the float-only ops never reach here). */
static inline long un_op(int op, long x, long lo, long hi, long p2) {
    switch (op) {
    case UN_NEG: return neg_wrap(x);
    case UN_ABS: return x < 0 ? neg_wrap(x) : x;
    case UN_RELU: return x > 0 ? x : 0;
    case UN_SIGN: return (x > 0) - (x < 0);
    case UN_CLAMP: return x < lo ? lo : x > hi ? hi : x;
    case UN_LOGICAL_NOT: return x == 0;
    case UN_ISFINITE: return 1;
    case UN_ISNAN: case UN_ISINF: return 0;
    }
    return x;
}

/* Floor division; 0 for a zero divisor; LONG_MIN / -1 wraps. */
static inline long div_op(long a, long b) {
    if (b == 0) return 0;
    if (b == -1) return neg_wrap(a);
    long q = a / b;
    if (a % b != 0 && ((a < 0) != (b < 0))) q--;
    return q;
}

/* Python's % on ints: the divisor's sign; 0 for a zero divisor. */
static inline long rem_op(long a, long b) {
    if (b == 0 || b == -1) return 0;
    long r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}

/* a op b, wrapping. */
static inline long bin_op(int op, long a, long b) {
    switch (op) {
    case BIN_ADD: return (long)((ulong)a + (ulong)b);
    case BIN_SUB: return (long)((ulong)a - (ulong)b);
    case BIN_MUL: return (long)((ulong)a * (ulong)b);
    case BIN_DIV: return div_op(a, b);
#ifdef OCL_FP64
    case BIN_POW: return convert_long_sat(pow((double)a, (double)b));
#else
    case BIN_POW: return convert_long_sat(pow((float)a, (float)b));
#endif
    case BIN_REM: return rem_op(a, b);
    case BIN_MAX: return a >= b ? a : b;
    case BIN_MIN: return a <= b ? a : b;
    case BIN_EQ: return a == b;
    case BIN_NE: return a != b;
    case BIN_LT: return a < b;
    case BIN_LE: return a <= b;
    case BIN_GT: return a > b;
    case BIN_GE: return a >= b;
    case BIN_AND: return a != 0 && b != 0;
    case BIN_OR: return a != 0 || b != 0;
    case BIN_XOR: return (a != 0) != (b != 0);
    }
    return 0;
}

#define LOADX(p, i) ((long)LDA(p, i))
#define STORE_RES(p, i, r) STO(p, i, CAT(FROMI_, O)(r))
typedef long xt;
#endif

/* out = in converted to O's dtype. */
__kernel void ew_copy(__global to *o, view_t ov, __global const ta *a, view_t av, long n,
                      int contig) {
    long i = get_global_id(0);
    if (i >= n) return;
    STO(o, IDX(ov, i), CVT(A, O, LDA(a, IDX(av, i))));
}

/* out = op(in); p0, p1, p2: the op's params (clamp's bounds, ...). */
__kernel void ew_unary(__global to *o, view_t ov, __global const ta *a, view_t av, long n,
                       int contig, int op, sct p0, sct p1, sct p2) {
    long i = get_global_id(0);
    if (i >= n) return;
    xt x = LOADX(a, IDX(av, i));
    STORE_RES(o, IDX(ov, i), un_op(op, x, (xt)p0, (xt)p1, (xt)p2));
}

/* out = a op b (views already broadcast). */
__kernel void ew_binary(__global to *o, view_t ov, __global const ta *a, view_t av,
                        __global const ta *b, view_t bv, long n, int contig, int op) {
    long i = get_global_id(0);
    if (i >= n) return;
    xt x = LOADX(a, IDX(av, i)), y = LOADX(b, IDX(bv, i));
    STORE_RES(o, IDX(ov, i), bin_op(op, x, y));
}

/* out = a op s. */
__kernel void ew_binary_scalar(__global to *o, view_t ov, __global const ta *a, view_t av,
                               long n, int contig, int op, sct s) {
    long i = get_global_id(0);
    if (i >= n) return;
    STORE_RES(o, IDX(ov, i), bin_op(op, LOADX(a, IDX(av, i)), (xt)s));
}

/* out = cond ? a : b, bit for bit (A and O are the int tag of the element size). */
__kernel void ew_where(__global to *o, view_t ov, __global const tc *c, view_t cv,
                       __global const ta *a, view_t av, __global const ta *b, view_t bv, long n,
                       int contig) {
    long i = get_global_id(0);
    if (i >= n) return;
    bool pick = CAT(LD_, C)(c, IDX(cv, i)) != 0;
    STO(o, IDX(ov, i), (co)(pick ? LDA(a, IDX(av, i)) : LDA(b, IDX(bv, i))));
}

/* out[...] = the element whose bits are `bits` (O is the int tag of the element size). */
__kernel void ew_fill(__global to *o, view_t ov, long n, int contig, long bits) {
    long i = get_global_id(0);
    if (i >= n) return;
    STO(o, IDX(ov, i), (co)bits);
}

/* out[i] = start + i * step (1-d), converted like ref. */
__kernel void ew_arange(__global to *o, view_t ov, long n, real start, real step) {
    long i = get_global_id(0);
    if (i >= n) return;
    real v = start + (real)i * step;
    STO(o, vidx(ov, i), CAT(FROMF_, O)(v));
}
