/* unary_more.h — the cpu backend's kernels of the unary ops issue 14 added (softplus, tan,
 * asin, acos, atan, sinh, cosh, expm1, log2, log10, isnan, isinf, isfinite, nan_to_num) for
 * f32, f64, f16 and bf16 in every layout. Included by unary.c only, so it is compiled once per
 * instruction-set level with it.
 *   - f32 (f16 / bf16 through f32, rounded once on store): the branch-free functions of
 *     vmath_more.h (loops GCC vectorizes; tan of |x| >= 65536 goes to libm after the loop);
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
#include "vmath_more.h"

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
    case EM_UN_TAN:
        for (int64_t i = 0; i < n; i++) o[i] = cpu_tanf(x[i]);
        for (int64_t i = 0; i < n; i++) /* |x| >= 65536 and ±inf: libm (rare) */
            if (cpu_tanf_far(x[i])) o[i] = (float)tan(x[i]);
        break;
    case EM_UN_ASIN: for (int64_t i = 0; i < n; i++) o[i] = cpu_asinf(x[i]); break;
    case EM_UN_ACOS: for (int64_t i = 0; i < n; i++) o[i] = cpu_acosf(x[i]); break;
    case EM_UN_ATAN: for (int64_t i = 0; i < n; i++) o[i] = cpu_atanf(x[i]); break;
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
            /* out written directly unless it is the input itself (tan reads x after) */
            const bool direct = c->it == EM_F32 && so == 1 && mc == m && po != pi;
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
