/* unary_more.h — the cpu backend's kernels of the unary ops issue 14 added (softplus, tan,
 * asin, acos, atan, sinh, cosh, expm1, log2, log10, isnan, isinf, isfinite, nan_to_num) for
 * f32, f64, f16 and bf16 in every layout. Included by unary.c only, so it is compiled once per
 * instruction-set level with it.
 *   - f32 (f16 / bf16 through f32, rounded once on store): softplus, sinh, cosh, expm1, log2
 *     and log10 are branch-free functions of vmath.h's exp / log (loops GCC vectorizes);
 *     tan, asin, acos, atan are libm in double rounded to float, as sin and cos are;
 *     isnan / isinf / isfinite and nan_to_num are compares and selects;
 *   - f64: libm, as ref;
 *   - any layout: the N-d iteration of iter.h, a row at a time, strided operands gathered and
 *     half types converted a block at a time (blocks.h); a broadcast input row (stride 0) is
 *     computed once.
 * isnan / isinf / isfinite write EM_BOOL outputs. */
#ifndef EMBER_CPU_UNARY_MORE_H
#define EMBER_CPU_UNARY_MORE_H

#include "blocks.h"
#include "iter.h"
#include "vmath.h"

/* e^x - 1: Taylor's series to x^11 for |x| < 0.7 (no cancellation), e^x - 1 above. */
static inline float cpu_expm1f(float x) {
    float p = 2.505210839e-8f; /* 1/11! */
    p = CPU_FMAF(p, x, 2.755731922e-7f);
    p = CPU_FMAF(p, x, 2.755731922e-6f);
    p = CPU_FMAF(p, x, 2.480158730e-5f);
    p = CPU_FMAF(p, x, 1.984126984e-4f);
    p = CPU_FMAF(p, x, 1.388888889e-3f);
    p = CPU_FMAF(p, x, 8.333333333e-3f);
    p = CPU_FMAF(p, x, 4.166666667e-2f);
    p = CPU_FMAF(p, x, 1.666666667e-1f);
    p = CPU_FMAF(p, x, 0.5f);
    float small = CPU_FMAF(p * x, x, x);
    float big = cpu_expf(x) - 1.0f; /* NaN, ±inf go through: -inf gives -1 */
    return cpu_fabsf(x) < 0.7f ? small : big;
}

/* e^|x| / 2 (|x| clamped to 90, where it is inf): e^(|x| - ln 2) with the reduction exact. */
static inline float cpu_exph_abs(float x) {
    float a = cpu_fabsf(x);
    a = a < 90.0f ? a : 90.0f; /* NaN to 90 too: answered by the callers */
    float s2, hi = cpu_expf_2(a, -0.693147182f, &s2);
    return hi * s2;
}

/* sinh: x + x^3/3! + ... + x^11/11! below 1, e^|x|/2 - e^-|x|/2 (signed) above. */
static inline float cpu_sinhf(float x) {
    float z = x * x;
    float p = 2.505210839e-8f; /* 1/11! */
    p = CPU_FMAF(p, z, 2.755731922e-6f);
    p = CPU_FMAF(p, z, 1.984126984e-4f);
    p = CPU_FMAF(p, z, 8.333333333e-3f);
    p = CPU_FMAF(p, z, 1.666666667e-1f);
    float small = CPU_FMAF(p * z, x, x);
    float e = cpu_exph_abs(x);
    float big = e - 0.25f / e;
    big = x < 0 ? -big : big;
    float y = cpu_fabsf(x) < 1.0f ? small : big;
    return x != x ? x : y;
}

/* cosh = e^|x|/2 + e^-|x|/2. */
static inline float cpu_coshf(float x) {
    float e = cpu_exph_abs(x);
    float y = e + 0.25f / e;
    return x != x ? x : y;
}

static inline float cpu_log2f(float x) { return cpu_logf(x) * 1.44269504088896341f; }
static inline float cpu_log10f(float x) { return cpu_logf(x) * 0.434294481903251828f; }

/* The rounding error of a*b: a*b = h + cpu_prod_lo(a, b, h) exactly (no overflow in the
 * split: |a|, |b| < 2^100 or the caller ignores the result). */
static inline float cpu_prod_lo(float a, float b, float h) {
#if CPU_HAVE_FMA
    return fmaf(a, b, -h);
#else
    float ca = 4097.0f * a, cb = 4097.0f * b; /* Veltkamp's split, as cpu_sqr_lo */
    float ah = ca - (ca - a), al = a - ah, bh = cb - (cb - b), bl = b - bh;
    return ((ah * bh - h) + ah * bl + al * bh) + al * bl;
#endif
}

/* PyTorch's softplus: x where beta x > threshold, log1p(e^(beta x)) / beta else. e^(beta x)
 * is taken of the exact product (its rounding error passed to the exp's reduction), so that
 * the far negative tail, where softplus = e^(beta x) / beta, keeps its relative accuracy
 * whatever beta (PyTorch's float kernel rounds beta x first: ~|beta x| ulps there). */
static inline float cpu_softplusf(float x, float beta, float thr) {
    float bx = x * beta;
    float bc = bx > -104.0f ? bx : -104.0f; /* NaN to -104 too: answered last */
    bc = bc < 89.0f ? bc : 89.0f;
    float lo = bc == bx ? cpu_prod_lo(x, beta, bx) : 0.0f;
    float s2, hi = cpu_expf_2(bc, lo, &s2);
    float y = cpu_log1pf(hi * s2) / beta;
    y = bx != bx ? bx : y;
    return bx > thr ? x : y;
}

typedef struct umore_ctx {
    em_unary_op op;
    em_dtype it, ot; /* input and output dtypes */
    float pf[3];     /* params as float (f32 / f16 / bf16) */
    double pd[3];    /* params as double (f64) */
} umore_ctx;

static inline bool umore_is_class(em_unary_op op) {
    return op == EM_UN_ISNAN || op == EM_UN_ISINF || op == EM_UN_ISFINITE;
}

/* o = op(x) over n floats (not the classes). */
static void umore_f32(const umore_ctx *c, float *restrict o, const float *restrict x, int64_t n) {
    const float p0 = c->pf[0], p1 = c->pf[1], p2 = c->pf[2];
    switch (c->op) {
    case EM_UN_SOFTPLUS: for (int64_t i = 0; i < n; i++) o[i] = cpu_softplusf(x[i], p0, p1); break;
    case EM_UN_TAN: for (int64_t i = 0; i < n; i++) o[i] = (float)tan(x[i]); break;
    case EM_UN_ASIN: for (int64_t i = 0; i < n; i++) o[i] = (float)asin(x[i]); break;
    case EM_UN_ACOS: for (int64_t i = 0; i < n; i++) o[i] = (float)acos(x[i]); break;
    case EM_UN_ATAN: for (int64_t i = 0; i < n; i++) o[i] = (float)atan(x[i]); break;
    case EM_UN_SINH: for (int64_t i = 0; i < n; i++) o[i] = cpu_sinhf(x[i]); break;
    case EM_UN_COSH: for (int64_t i = 0; i < n; i++) o[i] = cpu_coshf(x[i]); break;
    case EM_UN_EXPM1: for (int64_t i = 0; i < n; i++) o[i] = cpu_expm1f(x[i]); break;
    case EM_UN_LOG2: for (int64_t i = 0; i < n; i++) o[i] = cpu_log2f(x[i]); break;
    case EM_UN_LOG10: for (int64_t i = 0; i < n; i++) o[i] = cpu_log10f(x[i]); break;
    case EM_UN_NAN_TO_NUM:
        for (int64_t i = 0; i < n; i++) {
            float v = x[i];
            v = v == INFINITY ? p1 : v;
            v = v == -INFINITY ? p2 : v;
            o[i] = v != v ? p0 : v;
        }
        break;
    default: break;
    }
}

static void umore_f64(const umore_ctx *c, double *restrict o, const double *restrict x,
                      int64_t n) {
    const double p0 = c->pd[0], p1 = c->pd[1], p2 = c->pd[2];
    switch (c->op) {
    case EM_UN_SOFTPLUS:
        for (int64_t i = 0; i < n; i++) {
            double bx = x[i] * p0;
            o[i] = bx > p1 ? x[i] : log1p(exp(bx)) / p0;
        }
        break;
    case EM_UN_TAN: for (int64_t i = 0; i < n; i++) o[i] = tan(x[i]); break;
    case EM_UN_ASIN: for (int64_t i = 0; i < n; i++) o[i] = asin(x[i]); break;
    case EM_UN_ACOS: for (int64_t i = 0; i < n; i++) o[i] = acos(x[i]); break;
    case EM_UN_ATAN: for (int64_t i = 0; i < n; i++) o[i] = atan(x[i]); break;
    case EM_UN_SINH: for (int64_t i = 0; i < n; i++) o[i] = sinh(x[i]); break;
    case EM_UN_COSH: for (int64_t i = 0; i < n; i++) o[i] = cosh(x[i]); break;
    case EM_UN_EXPM1: for (int64_t i = 0; i < n; i++) o[i] = expm1(x[i]); break;
    case EM_UN_LOG2: for (int64_t i = 0; i < n; i++) o[i] = log2(x[i]); break;
    case EM_UN_LOG10: for (int64_t i = 0; i < n; i++) o[i] = log10(x[i]); break;
    case EM_UN_NAN_TO_NUM:
        for (int64_t i = 0; i < n; i++) {
            double v = x[i];
            v = v == INFINITY ? p1 : v;
            v = v == -INFINITY ? p2 : v;
            o[i] = v != v ? p0 : v;
        }
        break;
    default: break;
    }
}

/* isnan / isinf / isfinite of n values of type T, as 0/1 bytes. */
#define UMORE_CLASS(T, SUFFIX, INF)                                                            \
    static void umore_class_##SUFFIX(em_unary_op op, uint8_t *restrict o,                      \
                                     const T *restrict x, int64_t n) {                         \
        switch (op) {                                                                          \
        case EM_UN_ISNAN: for (int64_t i = 0; i < n; i++) o[i] = x[i] != x[i]; break;          \
        case EM_UN_ISINF:                                                                      \
            for (int64_t i = 0; i < n; i++) o[i] = x[i] == INF || x[i] == -INF;                \
            break;                                                                             \
        default: /* finite: neither NaN nor ±inf */                                            \
            for (int64_t i = 0; i < n; i++) o[i] = x[i] - x[i] == 0;                           \
            break;                                                                             \
        }                                                                                      \
    }
UMORE_CLASS(float, f32, INFINITY)
UMORE_CLASS(double, f64, (double)INFINITY)

/* One row (iter.h): p[0]/s[0] out, p[1]/s[1] in; a block of CPU_BLK at a time. */
static void umore_row(void *ctx, char *const *p, const int64_t *s, int64_t n) {
    const umore_ctx *c = ctx;
    const bool cls = umore_is_class(c->op);
    const int64_t ei = (int64_t)em_dtype_size(c->it), eo = (int64_t)em_dtype_size(c->ot);
    const int64_t si = s[1], so = s[0];
    for (int64_t i = 0; i < n; i += CPU_BLK) {
        int64_t m = n - i < CPU_BLK ? n - i : CPU_BLK;
        const int64_t mc = si == 0 ? 1 : m; /* a broadcast input: one value */
        const char *pi = p[1] + i * si * ei;
        char *po = p[0] + i * so * eo;
        if (cls) {
            uint8_t bo[CPU_BLK];
            uint8_t *o = so == 1 && mc == m ? (uint8_t *)po : bo;
            if (c->it == EM_F64) {
                double bx[CPU_BLK];
                umore_class_f64(c->op, o, cpu_blk_f64(pi, si, mc, bx), mc);
            } else {
                float bx[CPU_BLK];
                umore_class_f32(c->op, o, cpu_blk_f32(c->it, pi, si, mc, bx), mc);
            }
            if (o == bo) {
                for (int64_t k = 1; k < m && mc == 1; k++) bo[k] = bo[0];
                for (int64_t k = 0; k < m; k++) ((uint8_t *)po)[k * so] = bo[k];
            }
        } else if (c->it == EM_F64) {
            double bx[CPU_BLK], bo[CPU_BLK];
            const bool direct = so == 1 && mc == m;
            double *o = direct ? (double *)po : bo;
            umore_f64(c, o, cpu_blk_f64(pi, si, mc, bx), mc);
            if (!direct) {
                for (int64_t k = 1; k < m && mc == 1; k++) bo[k] = bo[0];
                cpu_blk_st_f64(po, so, bo, m);
            }
        } else {
            float bx[CPU_BLK], bo[CPU_BLK];
            const bool direct = c->it == EM_F32 && so == 1 && mc == m;
            float *o = direct ? (float *)po : bo;
            umore_f32(c, o, cpu_blk_f32(c->it, pi, si, mc, bx), mc);
            if (!direct) {
                for (int64_t k = 1; k < m && mc == 1; k++) bo[k] = bo[0];
                cpu_blk_st_f32(c->ot, po, so, bo, m);
            }
        }
    }
}

/* The new ops on float inputs: false for other dtypes (then ref's loop runs). */
static bool unary_more(em_unary_op op, const em_view *out, const em_view *in,
                       const double *params) {
    const em_dtype it = in->dtype;
    if (!(it == EM_F32 || it == EM_F64 || cpu_is_half(it))) return false;
    if (out->dtype != (umore_is_class(op) ? EM_BOOL : it)) return false;
    umore_ctx c = {op, it, out->dtype, {0, 0, 0}, {0, 0, 0}};
    const int np = op == EM_UN_NAN_TO_NUM ? 3 : op == EM_UN_SOFTPLUS ? 2 : 0;
    for (int k = 0; k < np && params; k++) {
        c.pd[k] = params[k];
        c.pf[k] = (float)params[k];
    }
    cpu_iter_job j = {.row = umore_row, .ctx = &c};
    const em_view *vs[2] = {out, in};
    cpu_iter_init(&j.it, 2, vs);
    if (j.it.numel == 0) return true;
    cpu_parallel_for(j.it.numel, 1 << 14, cpu_iter_job_range, &j);
    return true;
}

#endif /* EMBER_CPU_UNARY_MORE_H */
