/* fused.c — the cpu backend's fused kernels (backend.h, ABI 3), compiled once per
 * instruction-set level (isa.h):
 *   - unary_backward: gx = gy * f'(v) in one pass, v the op's input or output. f32 loops over
 *     vmath.h's functions (erf and exp for gelu), sin / cos in double as the forward kernels;
 *     f64 in double with libm; f16 / bf16 through f32 blocks (half.h), rounded once on store;
 *   - adam_step: the update of backend.h operation by operation, in float for f32 / f16 / bf16
 *     (the same bits as the composed step for f32) and double for f64.
 * Any layout: the views go through one N-d iteration (iter.h); rows whose strides are not all
 * 1 are gathered a block at a time onto the stack. Large tensors are split over the pool. */
#include <math.h>
#include <string.h>

#include "cpu.h"
#include "half.h"
#include "iter.h"

#define FUSED_GRAIN (1 << 14)
#define FB 256 /* the block of a gathered row */

/* ---- unary backward ---- */

/* Phi(x) + x phi(x) with Phi = (1 + erf(x / sqrt 2)) / 2, as PyTorch and the composed rule:
 * 1 + erf cancels in the negative tail (an absolute error of about 3e-8 in Phi), which
 * gelu(x) / x would avoid at one more division and a costlier function (1.5 times the time) */
static inline float ub_gelu_f32(float x) {
    float cdf = 0.5f + 0.5f * cpu_erff(x * 0.70710678118654752440f);
    float pdf = cpu_expf(-0.5f * x * x) * 0.39894228040143267794f;
    return cdf + x * pdf;
}

/* o[i] = g[i] * f'(v[i]), contiguous (o may be g or v: read before written) */
static void ub_f32(em_unary_op op, float *o, const float *v, const float *g, int64_t n, float lo,
                   float hi) {
    switch (op) {
    case EM_UN_ABS:
        for (int64_t i = 0; i < n; i++) {
            float x = v[i];
            o[i] = g[i] * (x > 0 ? 1.0f : x < 0 ? -1.0f : x);
        }
        break;
    case EM_UN_LOG: for (int64_t i = 0; i < n; i++) o[i] = g[i] / v[i]; break;
    case EM_UN_LOG1P: for (int64_t i = 0; i < n; i++) o[i] = g[i] / (1.0f + v[i]); break;
    case EM_UN_SIN: for (int64_t i = 0; i < n; i++) o[i] = g[i] * (float)cos(v[i]); break;
    case EM_UN_COS: for (int64_t i = 0; i < n; i++) o[i] = g[i] * -(float)sin(v[i]); break;
    case EM_UN_GELU: for (int64_t i = 0; i < n; i++) o[i] = g[i] * ub_gelu_f32(v[i]); break;
    case EM_UN_SILU:
        for (int64_t i = 0; i < n; i++) {
            float x = v[i], s = cpu_sigmoidf(x);
            o[i] = g[i] * (s * (1.0f + x * (1.0f - s)));
        }
        break;
    case EM_UN_ERF:
        for (int64_t i = 0; i < n; i++)
            o[i] = g[i] * (cpu_expf(-v[i] * v[i]) * 1.12837916709551257390f);
        break;
    case EM_UN_CLAMP:
        for (int64_t i = 0; i < n; i++) o[i] = v[i] >= lo && v[i] <= hi ? g[i] : 0.0f;
        break;
    case EM_UN_EXP: for (int64_t i = 0; i < n; i++) o[i] = g[i] * v[i]; break;
    case EM_UN_SQRT: for (int64_t i = 0; i < n; i++) o[i] = g[i] / (2.0f * v[i]); break;
    case EM_UN_RSQRT:
        for (int64_t i = 0; i < n; i++) o[i] = g[i] * (-0.5f * v[i] * v[i] * v[i]);
        break;
    case EM_UN_TANH: for (int64_t i = 0; i < n; i++) o[i] = g[i] * (1.0f - v[i] * v[i]); break;
    case EM_UN_SIGMOID:
        for (int64_t i = 0; i < n; i++) o[i] = g[i] * (v[i] * (1.0f - v[i]));
        break;
    case EM_UN_RECIP: for (int64_t i = 0; i < n; i++) o[i] = g[i] * -(v[i] * v[i]); break;
    case EM_UN_RELU: for (int64_t i = 0; i < n; i++) o[i] = v[i] > 0 ? g[i] : 0.0f; break;
    default: break;
    }
}

/* the same in double (strided: libm per element dominates) */
static inline double ub_f64_1(em_unary_op op, double x, double g, double lo, double hi) {
    switch (op) {
    case EM_UN_ABS: return g * (x > 0 ? 1.0 : x < 0 ? -1.0 : x);
    case EM_UN_LOG: return g / x;
    case EM_UN_LOG1P: return g / (1.0 + x);
    case EM_UN_SIN: return g * cos(x);
    case EM_UN_COS: return g * -sin(x);
    case EM_UN_GELU:
        return g * (0.5 * (1.0 + erf(x * 0.70710678118654752440)) +
                    x * (exp(-0.5 * x * x) * 0.39894228040143267794));
    case EM_UN_SILU: {
        double s = 1.0 / (1.0 + exp(-x));
        return g * (s * (1.0 + x * (1.0 - s)));
    }
    case EM_UN_ERF: return g * (exp(-x * x) * 1.12837916709551257390);
    case EM_UN_CLAMP: return x >= lo && x <= hi ? g : 0.0;
    case EM_UN_EXP: return g * x;
    case EM_UN_SQRT: return g / (2.0 * x);
    case EM_UN_RSQRT: return g * (-0.5 * x * x * x);
    case EM_UN_TANH: return g * (1.0 - x * x);
    case EM_UN_SIGMOID: return g * (x * (1.0 - x));
    case EM_UN_RECIP: return g * -(x * x);
    case EM_UN_RELU: return x > 0 ? g : 0.0;
    default: return 0.0;
    }
}

typedef struct ub_ctx {
    em_unary_op op;
    em_dtype dt;
    double lo, hi;
} ub_ctx;

/* n elements of view k's row (stride s, dtype dt) to f32 */
static inline void ld_f32(em_dtype dt, float *restrict d, const char *p, int64_t s, int64_t n) {
    if (dt == EM_F32) {
        const float *f = (const float *)p;
        if (s == 1) memcpy(d, f, (size_t)n * sizeof *d);
        else for (int64_t i = 0; i < n; i++) d[i] = f[i * s];
    } else {
        const uint16_t *h = (const uint16_t *)p;
        uint16_t t[FB];
        if (s != 1) {
            for (int64_t i = 0; i < n; i++) t[i] = h[i * s];
            h = t;
        }
        cpu_half_to_f32_n(dt, d, h, n);
    }
}

static inline void st_f32(em_dtype dt, char *p, int64_t s, const float *restrict v, int64_t n) {
    if (dt == EM_F32) {
        float *f = (float *)p;
        if (s == 1) memcpy(f, v, (size_t)n * sizeof *v);
        else for (int64_t i = 0; i < n; i++) f[i * s] = v[i];
    } else {
        uint16_t *h = (uint16_t *)p, t[FB];
        if (s == 1) {
            cpu_f32_to_half_n(dt, h, v, n);
        } else {
            cpu_f32_to_half_n(dt, t, v, n);
            for (int64_t i = 0; i < n; i++) h[i * s] = t[i];
        }
    }
}

/* one row: p[0] gx, p[1] the value, p[2] gy */
static void ub_row(void *arg, char *const *p, const int64_t *s, int64_t n) {
    const ub_ctx *c = arg;
    const float lo = (float)c->lo, hi = (float)c->hi;
    if (c->dt == EM_F64) {
        double *o = (double *)p[0];
        const double *v = (const double *)p[1], *g = (const double *)p[2];
        for (int64_t i = 0; i < n; i++)
            o[i * s[0]] = ub_f64_1(c->op, v[i * s[1]], g[i * s[2]], c->lo, c->hi);
        return;
    }
    if (c->dt == EM_F32 && s[0] == 1 && s[1] == 1 && s[2] == 1) {
        ub_f32(c->op, (float *)p[0], (const float *)p[1], (const float *)p[2], n, lo, hi);
        return;
    }
    const int64_t es = c->dt == EM_F32 ? 4 : 2;
    _Alignas(64) float bv[FB], bg[FB];
    for (int64_t i = 0; i < n; i += FB) {
        int64_t m = n - i < FB ? n - i : FB;
        ld_f32(c->dt, bv, p[1] + i * s[1] * es, s[1], m);
        ld_f32(c->dt, bg, p[2] + i * s[2] * es, s[2], m);
        ub_f32(c->op, bv, bv, bg, m, lo, hi);
        st_f32(c->dt, p[0] + i * s[0] * es, s[0], bv, m);
    }
}

em_status CPU_K(cpu_unary_backward)(void *ctx, em_unary_op op, const em_view *gx,
                                    const em_view *x, const em_view *y, const em_view *gy,
                                    const double *params) {
    (void)ctx;
    switch (op) {
    case EM_UN_ABS: case EM_UN_LOG: case EM_UN_LOG1P: case EM_UN_SIN: case EM_UN_COS:
    case EM_UN_GELU: case EM_UN_SILU: case EM_UN_ERF: case EM_UN_CLAMP:
        if (!x) return em_backend_set_error(EM_ERR_ARG, "unary_backward: op %d reads x", (int)op);
        break;
    case EM_UN_EXP: case EM_UN_SQRT: case EM_UN_RSQRT: case EM_UN_TANH: case EM_UN_SIGMOID:
    case EM_UN_RECIP: case EM_UN_RELU:
        if (!y) return em_backend_set_error(EM_ERR_ARG, "unary_backward: op %d reads y", (int)op);
        break;
    default:
        return em_backend_set_error(EM_ERR_UNSUPPORTED, "unary_backward: op %d is not fused",
                                    (int)op);
    }
    const em_view *v = x ? x : y;
    const em_dtype dt = gx->dtype;
    if (!cpu_is_float_dt(dt) || v->dtype != dt || gy->dtype != dt)
        return em_backend_set_error(EM_ERR_UNSUPPORTED, "unary_backward: float dtypes only");
    ub_ctx c = {op, dt, params ? params[0] : 0, params ? params[1] : 0};
    cpu_iter_job j;
    const em_view *vs[3] = {gx, v, gy};
    cpu_iter_init(&j.it, 3, vs);
    if (j.it.numel == 0) return EM_OK;
    j.row = ub_row;
    j.ctx = &c;
    cpu_parallel_for(j.it.numel, FUSED_GRAIN, cpu_iter_job_range, &j);
    return EM_OK;
}

/* ---- Adam / AdamW ---- */

#if defined(__clang__) /* clang contracts a * b + c into an FMA by default; GCC's ISO mode does not */
#pragma STDC FP_CONTRACT OFF
#endif

typedef struct adam_ctx {
    em_dtype dt;
    em_adam_args a;
} adam_ctx;

/* p, m, v updated in place from g (contiguous, float arithmetic, operation by operation) */
static void adam_f32(const em_adam_args *a, float *restrict p, float *restrict m,
                     float *restrict v, const float *restrict g, int64_t n) {
    const float gs = (float)a->grad_scale, wd = (float)a->weight_decay;
    const float b1 = (float)a->beta1, c1 = (float)a->c1, b2 = (float)a->beta2,
                c2 = (float)a->c2;
    const float k = (float)a->denom_scale, e = (float)a->denom_eps,
                ss = (float)a->step_scale, dc = (float)a->decay;
    if (wd != 0) {
        for (int64_t i = 0; i < n; i++) {
            float d = g[i] * gs + p[i] * wd;
            float mi = m[i] * b1 + d * c1, vi = v[i] * b2 + (d * d) * c2;
            m[i] = mi;
            v[i] = vi;
            p[i] = p[i] * dc - (mi / (sqrtf(vi) * k + e)) * ss;
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            float d = g[i] * gs;
            float mi = m[i] * b1 + d * c1, vi = v[i] * b2 + (d * d) * c2;
            m[i] = mi;
            v[i] = vi;
            p[i] = p[i] * dc - (mi / (sqrtf(vi) * k + e)) * ss;
        }
    }
}

static void adam_f64(const em_adam_args *a, double *p, double *m, double *v, const double *g,
                     int64_t gs_, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        double gi = g[i * gs_] * a->grad_scale;
        double d = a->weight_decay != 0 ? gi + p[i] * a->weight_decay : gi;
        double mi = m[i] * a->beta1 + d * a->c1, vi = v[i] * a->beta2 + (d * d) * a->c2;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * a->decay - (mi / (sqrt(vi) * a->denom_scale + a->denom_eps)) * a->step_scale;
    }
}

/* one row: p[0] param, p[1] exp_avg, p[2] exp_avg_sq (all dense), p[3] grad */
static void adam_row(void *arg, char *const *p, const int64_t *s, int64_t n) {
    const adam_ctx *c = arg;
    if (c->dt == EM_F64) {
        adam_f64(&c->a, (double *)p[0], (double *)p[1], (double *)p[2], (const double *)p[3],
                 s[3], n);
        return;
    }
    if (c->dt == EM_F32 && s[3] == 1) {
        adam_f32(&c->a, (float *)p[0], (float *)p[1], (float *)p[2], (const float *)p[3], n);
        return;
    }
    const int64_t es = c->dt == EM_F32 ? 4 : 2;
    _Alignas(64) float bp[FB], bm[FB], bv[FB], bg[FB];
    for (int64_t i = 0; i < n; i += FB) {
        int64_t k = n - i < FB ? n - i : FB;
        ld_f32(c->dt, bp, p[0] + i * es, 1, k);
        ld_f32(c->dt, bm, p[1] + i * es, 1, k);
        ld_f32(c->dt, bv, p[2] + i * es, 1, k);
        ld_f32(c->dt, bg, p[3] + i * s[3] * es, s[3], k);
        adam_f32(&c->a, bp, bm, bv, bg, k);
        st_f32(c->dt, p[0] + i * es, 1, bp, k);
        st_f32(c->dt, p[1] + i * es, 1, bm, k);
        st_f32(c->dt, p[2] + i * es, 1, bv, k);
    }
}

em_status CPU_K(cpu_adam_step)(void *ctx, const em_view *param, const em_view *exp_avg,
                               const em_view *exp_avg_sq, const em_view *grad,
                               const em_adam_args *a) {
    (void)ctx;
    const em_dtype dt = param->dtype;
    if (!cpu_is_float_dt(dt) || exp_avg->dtype != dt || exp_avg_sq->dtype != dt ||
        grad->dtype != dt)
        return em_backend_set_error(EM_ERR_UNSUPPORTED, "adam_step: float dtypes only");
    if (!cpu_contiguous(param) || !cpu_contiguous(exp_avg) || !cpu_contiguous(exp_avg_sq))
        return em_backend_set_error(EM_ERR_UNSUPPORTED, "adam_step: strided state");
    adam_ctx c = {dt, *a};
    cpu_iter_job j;
    const em_view *vs[4] = {param, exp_avg, exp_avg_sq, grad};
    cpu_iter_init(&j.it, 4, vs);
    if (j.it.numel == 0) return EM_OK;
    j.row = adam_row;
    j.ctx = &c;
    cpu_parallel_for(j.it.numel, FUSED_GRAIN, cpu_iter_job_range, &j);
    return EM_OK;
}
