/* fused.c — the ref backend's fused kernels (backend.h, ABI 3): the input gradient of a unary
 * op in one pass, and one Adam / AdamW step in place. The definitions the other backends
 * follow: unary_backward computes in double and rounds once on store; adam_step computes
 * operation by operation in the dtype's arithmetic type (double for f64, float otherwise). */
#include "ref.h"

#if defined(__clang__) /* clang contracts a * b + c into an FMA by default; GCC's ISO mode does not */
#pragma STDC FP_CONTRACT OFF
#endif

/* gy * f'(v), v the value op reads (x or y, backend.h). */
static double ub_float(em_unary_op op, double v, double g, const double *p) {
    switch (op) {
    case EM_UN_ABS: return g * (v > 0 ? 1.0 : v < 0 ? -1.0 : v);
    case EM_UN_LOG: return g / v;
    case EM_UN_LOG1P: return g / (1.0 + v);
    case EM_UN_SIN: return g * cos(v);
    case EM_UN_COS: return g * -sin(v);
    case EM_UN_GELU:
        return g * (0.5 * (1.0 + erf(v * 0.70710678118654752440)) +
                    v * (exp(-0.5 * v * v) * 0.39894228040143267794));
    case EM_UN_SILU: {
        double s = 1.0 / (1.0 + exp(-v));
        return g * (s * (1.0 + v * (1.0 - s)));
    }
    case EM_UN_ERF: return g * (exp(-v * v) * 1.12837916709551257390);
    case EM_UN_CLAMP: return v >= p[0] && v <= p[1] ? g : 0.0;
    case EM_UN_EXP: return g * v;
    case EM_UN_SQRT: return g / (2.0 * v);
    case EM_UN_RSQRT: return g * (-0.5 * v * v * v);
    case EM_UN_TANH: return g * (1.0 - v * v);
    case EM_UN_SIGMOID: return g * (v * (1.0 - v));
    case EM_UN_RECIP: return g * -(v * v);
    case EM_UN_RELU: return v > 0 ? g : 0.0;
    default: return 0.0;
    }
}

em_status ref_unary_backward(void *ctx, em_unary_op op, const em_view *gx, const em_view *x,
                             const em_view *y, const em_view *gy, const double *params) {
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
    if (!ref_is_float(gx->dtype) || v->dtype != gx->dtype || gy->dtype != gx->dtype)
        return em_backend_set_error(EM_ERR_UNSUPPORTED, "unary_backward: float dtypes only");
    const double none[2] = {0, 0};
    const double *p = params ? params : none;
    const em_view *vs[3] = {gx, v, gy};
    ref_iter it;
    ref_iter_init4(&it, 3, vs);
    const em_dtype dt = gx->dtype;
    for (int64_t i = 0; i < it.numel; i++, ref_iter_next(&it))
        ref_st(gx->buf, dt, it.off[0],
               ub_float(op, ref_ld(v->buf, dt, it.off[1]), ref_ld(gy->buf, dt, it.off[2]), p));
    return EM_OK;
}

/* The step of one element in type T (backend.h's adam_step, operation by operation). */
#define ADAM_ELEM(T, SQRT, p, m, v, gr, a)                                                   \
    do {                                                                                     \
        T g_ = (T)(gr) * (T)(a)->grad_scale;                                                 \
        T d_ = (a)->weight_decay != 0 ? g_ + (T)(p) * (T)(a)->weight_decay : g_;             \
        (m) = (m) * (T)(a)->beta1 + d_ * (T)(a)->c1;                                         \
        (v) = (v) * (T)(a)->beta2 + (d_ * d_) * (T)(a)->c2;                                  \
        T den_ = SQRT(v) * (T)(a)->denom_scale + (T)(a)->denom_eps;                          \
        T q_ = ((m) / den_) * (T)(a)->step_scale;                                            \
        (p) = (p) * (T)(a)->decay - q_;                                                      \
    } while (0)

em_status ref_adam_step(void *ctx, const em_view *param, const em_view *exp_avg,
                        const em_view *exp_avg_sq, const em_view *grad, const em_adam_args *a) {
    (void)ctx;
    const em_dtype dt = param->dtype;
    if (!ref_is_float(dt) || exp_avg->dtype != dt || exp_avg_sq->dtype != dt ||
        grad->dtype != dt)
        return em_backend_set_error(EM_ERR_UNSUPPORTED, "adam_step: float dtypes only");
    const em_view *vs[4] = {param, exp_avg, exp_avg_sq, grad};
    ref_iter it;
    ref_iter_init4(&it, 4, vs);
    for (int64_t i = 0; i < it.numel; i++, ref_iter_next(&it)) {
        double gr = ref_ld(grad->buf, dt, it.off[3]);
        if (dt == EM_F64) {
            double p = ref_ld(param->buf, dt, it.off[0]), m = ref_ld(exp_avg->buf, dt, it.off[1]),
                   v = ref_ld(exp_avg_sq->buf, dt, it.off[2]);
            ADAM_ELEM(double, sqrt, p, m, v, gr, a);
            ref_st(param->buf, dt, it.off[0], p);
            ref_st(exp_avg->buf, dt, it.off[1], m);
            ref_st(exp_avg_sq->buf, dt, it.off[2], v);
        } else {
            float p = (float)ref_ld(param->buf, dt, it.off[0]),
                  m = (float)ref_ld(exp_avg->buf, dt, it.off[1]),
                  v = (float)ref_ld(exp_avg_sq->buf, dt, it.off[2]);
            ADAM_ELEM(float, sqrtf, p, m, v, gr, a);
            ref_st(param->buf, dt, it.off[0], p);
            ref_st(exp_avg->buf, dt, it.off[1], m);
            ref_st(exp_avg_sq->buf, dt, it.off[2], v);
        }
    }
    return EM_OK;
}
