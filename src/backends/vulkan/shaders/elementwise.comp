/*
 * elementwise.comp — copy/cast, fill, arange, unary, binary, binary-with-scalar and where.
 *
 * One kernel per variant, chosen by a define (elementwise.list): K_COPY (A -> O converting),
 * K_MOVE (A = O = a w* tag: bits as they are), K_FILL (O a w* tag: P.d holds the element's
 * bits), K_ARANGE, K_UNARY (op P.i[0]), K_BINARY and K_BSCALAR (op P.i[0]), K_WHERE (A = O a
 * w* tag, C the condition's tag). The semantics are ref's (src/backends/ref/elementwise.c), as
 * opencl's elementwise.cl: floats computed in CT_A (float for f16/bf16/f32, double for f64),
 * ints in CT_A wrapping like two's complement (int for the small ints: the same low bits),
 * int division floors, remainder takes the divisor's sign, x / 0 and x % 0 are 0 for ints,
 * max/min propagate NaN.
 * Views: P.v[0] out, P.v[1] a (where: the condition), P.v[2] b (where: a), P.v[3] (where: b).
 */
#version 450
#include "common.glsl"
#include "math.glsl"
layout(local_size_x = WG) in;

#define N (P.v[0].numel)

#if defined(K_MOVE) || defined(K_WHERE)
BUF(1, O, o_);
#if defined(K_WHERE)
BUF(2, C, c_);
BUF(3, A, a_);
BUF(4, A, b_);
void main() {
    GRID_LOOP(i, N) {
        bool pick = CAT(LD_, C)(c_[vidx(1, i)]) != 0;
#ifdef WHERE_NARROW
        o_[vidx(0, i)] = CAT(TY_, O)(pick ? uint(a_[vidx(2, i)]) : uint(b_[vidx(3, i)]));
#else
        o_[vidx(0, i)] = pick ? a_[vidx(2, i)] : b_[vidx(3, i)];
#endif
    }
}
#else
BUF(2, A, a_);
void main() {
    GRID_LOOP(i, N) o_[vidx(0, i)] = a_[vidx(1, i)];
}
#endif

#elif defined(K_FILL)
BUF(1, O, o_);
void main() {
    uvec2 w = uvec2(P.d[0], P.d[1]);
    GRID_LOOP(i, N) {
#if defined(O_IS_W64)
        o_[vidx(0, i)] = w;
#else
        o_[vidx(0, i)] = CAT(TY_, O)(w.x);
#endif
    }
}

#elif defined(K_ARANGE)
BUF(1, O, o_);
void main() {
    GRID_LOOP(i, N) {
#ifdef USE_F64
        double v = PF64(0) + double(i) * PF64(1);
        o_[vidx(0, i)] = CAT(ST_, O)(CAT(FROMD_, O)(v));
#else
        float v = P.f[0] + float(i) * P.f[1];
        o_[vidx(0, i)] = CAT(ST_, O)(CAT(FROMF_, O)(v));
#endif
    }
}

#elif defined(K_COPY)
BUF(1, O, o_);
BUF(2, A, a_);
void main() {
    GRID_LOOP(i, N) {
        CAT(CT_, A) x = CAT(LD_, A)(a_[vidx(1, i)]);
        o_[vidx(0, i)] = CAT(ST_, O)(CVT(A, O, x));
    }
}

#else /* K_UNARY, K_BINARY, K_BSCALAR */
BUF(1, O, o_);
BUF(2, A, a_);
BUF(3, A, b_);

#define xt CAT(CT_, A)

/* Op numbers: em_unary_op and em_binary_op of include/ember/backend.h. */
const int UN_NEG = 0, UN_ABS = 1, UN_EXP = 2, UN_LOG = 3, UN_LOG1P = 4, UN_SQRT = 5,
          UN_RSQRT = 6, UN_SIN = 7, UN_COS = 8, UN_TANH = 9, UN_SIGMOID = 10, UN_RELU = 11,
          UN_GELU = 12, UN_SILU = 13, UN_ERF = 14, UN_FLOOR = 15, UN_CEIL = 16, UN_ROUND = 17,
          UN_RECIP = 18, UN_SIGN = 19, UN_CLAMP = 20, UN_LOGICAL_NOT = 21, UN_SOFTPLUS = 22,
          UN_TAN = 23, UN_ASIN = 24, UN_ACOS = 25, UN_ATAN = 26, UN_SINH = 27, UN_COSH = 28,
          UN_EXPM1 = 29, UN_LOG2 = 30, UN_LOG10 = 31, UN_ISNAN = 32, UN_ISINF = 33,
          UN_ISFINITE = 34, UN_NAN_TO_NUM = 35;
const int BIN_ADD = 0, BIN_SUB = 1, BIN_MUL = 2, BIN_DIV = 3, BIN_POW = 4, BIN_REM = 5,
          BIN_MAX = 6, BIN_MIN = 7, BIN_EQ = 8, BIN_NE = 9, BIN_LT = 10, BIN_LE = 11,
          BIN_GT = 12, BIN_GE = 13, BIN_AND = 14, BIN_OR = 15, BIN_ATAN2 = 16, BIN_XOR = 17;

#ifdef A_ISF
/* ---- float kinds ---- */
#define ONE xt(1)
#define ZERO xt(0)

xt un_op(int op, xt x, xt lo, xt hi, xt p2) {
    switch (op) {
    case UN_NEG: return -x;
    case UN_ABS: return abs(x);
    case UN_EXP: return m_exp(x);
    case UN_LOG: return m_log(x);
    case UN_LOG1P: return m_log1p(x);
    case UN_SQRT: return m_sqrt(x);
    case UN_RSQRT: return ONE / m_sqrt(x);
    case UN_SIN: return m_sin(x);
    case UN_COS: return m_cos(x);
    case UN_TANH: return m_tanh(x);
    case UN_SIGMOID: return ONE / (ONE + m_exp(-x));
    case UN_RELU: return x > ZERO || m_isnan(x) ? x : ZERO;
    case UN_GELU: return xt(0.5) * x * (ONE + m_erf(x * xt(0.70710678118654752440LF)));
    case UN_SILU: return x / (ONE + m_exp(-x));
    case UN_ERF: return m_erf(x);
    case UN_FLOOR: return m_floor(x);
    case UN_CEIL: return m_ceil(x);
    case UN_ROUND: return m_rint(x);
    case UN_RECIP: return ONE / x;
    case UN_SIGN: return x > ZERO ? ONE : x < ZERO ? -ONE : x;
    case UN_CLAMP: return x < lo ? lo : x > hi ? hi : x;
    case UN_LOGICAL_NOT: return x == ZERO ? ONE : ZERO;
    case UN_SOFTPLUS: return x * lo > hi ? x : m_log1p(m_exp(x * lo)) / lo;
    case UN_TAN: return m_tan(x);
    case UN_ASIN: return m_asin(x);
    case UN_ACOS: return m_acos(x);
    case UN_ATAN: return m_atan(x);
    case UN_SINH: return m_sinh(x);
    case UN_COSH: return m_cosh(x);
    case UN_EXPM1: return m_expm1(x);
    case UN_LOG2: return m_log2(x);
    case UN_LOG10: return m_log10(x);
    case UN_ISNAN: return m_isnan(x) ? ONE : ZERO;
    case UN_ISINF: return m_isinf(x) ? ONE : ZERO;
    case UN_ISFINITE: return !m_isnan(x) && !m_isinf(x) ? ONE : ZERO;
    case UN_NAN_TO_NUM: return m_isnan(x) ? lo : m_isinf(x) ? (x > ZERO ? hi : p2) : x;
    }
    return x;
}

/* numpy.remainder: the result takes the divisor's sign. */
xt rem_op(xt a, xt b) {
    xt m = m_fmod(a, b);
    if (b == ZERO) return m;
    if (m != ZERO) {
        if ((b < ZERO) != (m < ZERO)) m += b;
    } else {
        m = m_copysign(ZERO, b);
    }
    return m;
}

xt bin_op(int op, xt a, xt b) {
    switch (op) {
    case BIN_ADD: return a + b;
    case BIN_SUB: return a - b;
    case BIN_MUL: return a * b;
    case BIN_DIV: return a / b;
    case BIN_POW: return m_pow(a, b);
    case BIN_REM: return rem_op(a, b);
    case BIN_MAX: return m_isnan(a) ? a : m_isnan(b) ? b : a >= b ? a : b;
    case BIN_MIN: return m_isnan(a) ? a : m_isnan(b) ? b : a <= b ? a : b;
    case BIN_EQ: return a == b ? ONE : ZERO;
    case BIN_NE: return a != b ? ONE : ZERO;
    case BIN_LT: return a < b ? ONE : ZERO;
    case BIN_LE: return a <= b ? ONE : ZERO;
    case BIN_GT: return a > b ? ONE : ZERO;
    case BIN_GE: return a >= b ? ONE : ZERO;
    case BIN_AND: return a != ZERO && b != ZERO ? ONE : ZERO;
    case BIN_OR: return a != ZERO || b != ZERO ? ONE : ZERO;
    case BIN_ATAN2: return m_atan2(a, b);
    case BIN_XOR: return (a != ZERO) != (b != ZERO) ? ONE : ZERO;
    }
    return ZERO;
}

#ifdef USE_F64
#define SCALAR(k) PF64(k)
#else
#define SCALAR(k) xt(P.f[k])
#endif
#define STORE_RES(i, r) o_[i] = CAT(ST_, O)(CVT(A, O, r))

#else
/* ---- ints and bool, wrapping ---- */
#define ONE xt(1)
#define ZERO xt(0)

xt un_op(int op, xt x, xt lo, xt hi, xt p2) {
    switch (op) {
    case UN_NEG: return -x;
    case UN_ABS: return x < ZERO ? -x : x;
    case UN_RELU: return x > ZERO ? x : ZERO;
    case UN_SIGN: return x > ZERO ? ONE : x < ZERO ? -ONE : ZERO;
    case UN_CLAMP: return x < lo ? lo : x > hi ? hi : x;
    case UN_LOGICAL_NOT: return x == ZERO ? ONE : ZERO;
    case UN_ISFINITE: return ONE;
    case UN_ISNAN: case UN_ISINF: return ZERO;
    }
    return x;
}

/* Floor division; 0 for a zero divisor; MIN / -1 wraps. */
xt div_op(xt a, xt b) {
    if (b == ZERO) return ZERO;
    if (b == -ONE) return -a;
    xt q = a / b;
    if (q * b != a && ((a < ZERO) != (b < ZERO))) q -= ONE;
    return q;
}

/* Python's % on ints: the divisor's sign; 0 for a zero divisor. */
xt rem_op(xt a, xt b) {
    if (b == ZERO || b == -ONE) return ZERO;
    xt r = a - (a / b) * b;
    if (r != ZERO && ((r < ZERO) != (b < ZERO))) r += b;
    return r;
}

/* a ** b by squaring, wrapping (ref: pow in double, saturated to int64, wrapped: the same low
 * bits for every result below 2^53); b < 0: 1 / a^|b| truncated. */
xt pow_op(xt a, xt b) {
    if (b < ZERO) return a == ONE ? ONE : a == -ONE ? ((b & ONE) != ZERO ? -ONE : ONE) : ZERO;
    xt r = ONE;
    while (b > ZERO) {
        if ((b & ONE) != ZERO) r *= a;
        a *= a;
        b >>= 1;
    }
    return r;
}

xt bin_op(int op, xt a, xt b) {
    switch (op) {
    case BIN_ADD: return a + b;
    case BIN_SUB: return a - b;
    case BIN_MUL: return a * b;
    case BIN_DIV: return div_op(a, b);
    case BIN_POW: return pow_op(a, b);
    case BIN_REM: return rem_op(a, b);
    case BIN_MAX: return a >= b ? a : b;
    case BIN_MIN: return a <= b ? a : b;
    case BIN_EQ: return a == b ? ONE : ZERO;
    case BIN_NE: return a != b ? ONE : ZERO;
    case BIN_LT: return a < b ? ONE : ZERO;
    case BIN_LE: return a <= b ? ONE : ZERO;
    case BIN_GT: return a > b ? ONE : ZERO;
    case BIN_GE: return a >= b ? ONE : ZERO;
    case BIN_AND: return a != ZERO && b != ZERO ? ONE : ZERO;
    case BIN_OR: return a != ZERO || b != ZERO ? ONE : ZERO;
    case BIN_XOR: return (a != ZERO) != (b != ZERO) ? ONE : ZERO;
    }
    return ZERO;
}

#ifdef USE_I64
#define SCALAR(k) xt(PI64(k))
#else
#define SCALAR(k) xt(P.i[8 + (k)])
#endif
#define STORE_RES(i, r) o_[i] = CAT(ST_, O)(CVT(A, O, r))
#endif

void main() {
    int op = OP_OR(P.i[0]);
#if defined(K_UNARY)
    xt lo = SCALAR(0), hi = SCALAR(1), p2 = SCALAR(2);
    GRID_LOOP(i, N) {
        xt x = CAT(LD_, A)(a_[vidx(1, i)]);
        STORE_RES(vidx(0, i), un_op(op, x, lo, hi, p2));
    }
#elif defined(K_BINARY)
    GRID_LOOP(i, N) {
        xt x = CAT(LD_, A)(a_[vidx(1, i)]), y = CAT(LD_, A)(b_[vidx(2, i)]);
        STORE_RES(vidx(0, i), bin_op(op, x, y));
    }
#else
    xt s = SCALAR(0);
    GRID_LOOP(i, N) {
        xt x = CAT(LD_, A)(a_[vidx(1, i)]);
        STORE_RES(vidx(0, i), bin_op(op, x, s));
    }
#endif
}
#endif
