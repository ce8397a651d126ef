/*
 * fused.c — the Vulkan backend's fused kernels (backend.h, ABI 3): unary_backward and
 * adam_step, one item an element (shaders/fused.comp, one variant per float dtype).
 * Semantics: ref's src/backends/ref/fused.c.
 */
#include <stdio.h>
#include <string.h>

#include "vk_internal.h"

/* fused.comp's UB_ code of an op, or -1: not fused (the core composes). */
static int ub_code(em_unary_op op) {
    switch (op) {
    case EM_UN_ABS: return 0;
    case EM_UN_LOG: return 1;
    case EM_UN_LOG1P: return 2;
    case EM_UN_SIN: return 3;
    case EM_UN_COS: return 4;
    case EM_UN_GELU: return 5;
    case EM_UN_SILU: return 6;
    case EM_UN_ERF: return 7;
    case EM_UN_CLAMP: return 8;
    case EM_UN_EXP: return 9;
    case EM_UN_SQRT: return 10;
    case EM_UN_RSQRT: return 11;
    case EM_UN_TANH: return 12;
    case EM_UN_SIGMOID: return 13;
    case EM_UN_RECIP: return 14;
    case EM_UN_RELU: return 15;
    default: return -1;
    }
}

static bool fu_float(em_dtype dt) {
    return dt == EM_F32 || dt == EM_F64 || dt == EM_F16 || dt == EM_BF16;
}

/* A scalar k of fused.comp's SC(k): a double for f64, else a float. */
static void fu_scalar(vk_params *p, em_dtype dt, int k, double v) {
    if (dt == EM_F64) vk_set_f64(p, k, v);
    else p->f[k] = (float)v;
}

em_status vk_unary_backward(void *ctx, em_unary_op op, const em_view *gx, const em_view *x,
                            const em_view *y, const em_view *gy, const double *params) {
    vk_dev *d = ctx;
    const int code = ub_code(op);
    if (code < 0)
        return em_backend_set_error(EM_ERR_UNSUPPORTED,
                                    "vulkan: unary_backward: op %d is not fused", (int)op);
    const bool reads_x = code <= 8;
    const em_view *v = reads_x ? x : y;
    if (!v)
        return em_backend_set_error(EM_ERR_ARG, "vulkan: unary_backward: op %d reads %s",
                                    (int)op, reads_x ? "x" : "y");
    const em_dtype dt = gx->dtype;
    if (!fu_float(dt) || v->dtype != dt || gy->dtype != dt)
        return em_backend_set_error(EM_ERR_UNSUPPORTED,
                                    "vulkan: unary_backward: float dtypes only");
    em_status s = vk_check_dtype(d, "unary_backward", dt);
    if (s != EM_OK) return s;
    const int64_t n = vk_numel(gx);
    if (n == 0) return EM_OK;
    if (n > INT32_MAX)
        return em_backend_set_error(EM_ERR_UNSUPPORTED,
                                    "vulkan: unary_backward: more than 2^31 elements");
    vk_params p;
    memset(&p, 0, sizeof p);
    p.v[0] = vk_view(gx);
    p.v[1] = vk_view(v);
    p.v[2] = vk_view(gy);
    p.i[0] = code;
    fu_scalar(&p, dt, 0, params ? params[0] : 0);
    fu_scalar(&p, dt, 1, params ? params[1] : 0);
    char name[32];
    snprintf(name, sizeof name, "unary_bw.%s", vk_dtype_tag(dt));
    vk_buf *b[3] = {vk_vbuf(gx), vk_vbuf(v), vk_vbuf(gy)};
    return vk_launch_1d_op(d, name, code, n, &p, 3, b); /* specialized: the switch folds */
}

em_status vk_adam_step(void *ctx, const em_view *param, const em_view *exp_avg,
                       const em_view *exp_avg_sq, const em_view *grad, const em_adam_args *a) {
    vk_dev *d = ctx;
    const em_dtype dt = param->dtype;
    if (!fu_float(dt) || exp_avg->dtype != dt || exp_avg_sq->dtype != dt || grad->dtype != dt)
        return em_backend_set_error(EM_ERR_UNSUPPORTED, "vulkan: adam_step: float dtypes only");
    em_status s = vk_check_dtype(d, "adam_step", dt);
    if (s != EM_OK) return s;
    const int64_t n = vk_numel(param);
    if (n == 0) return EM_OK;
    if (n > INT32_MAX)
        return em_backend_set_error(EM_ERR_UNSUPPORTED,
                                    "vulkan: adam_step: more than 2^31 elements");
    vk_params p;
    memset(&p, 0, sizeof p);
    p.v[0] = vk_view(param);
    p.v[1] = vk_view(exp_avg);
    p.v[2] = vk_view(exp_avg_sq);
    p.v[3] = vk_view(grad);
    p.i[0] = a->weight_decay != 0;
    const double sc[10] = {a->grad_scale, a->weight_decay, a->beta1,       a->c1,
                           a->beta2,      a->c2,           a->denom_scale, a->denom_eps,
                           a->step_scale, a->decay};
    if (dt == EM_F64) {
        /* 8 doubles in P.d, the last 2 as words in P.i[8..11] (fused.comp's SC_HI) */
        for (int k = 0; k < 8; k++) vk_set_f64(&p, k, sc[k]);
        memcpy(&p.i[8], &sc[8], 2 * sizeof(double));
    } else {
        for (int k = 0; k < 10; k++) p.f[k] = (float)sc[k];
    }
    char name[32];
    snprintf(name, sizeof name, "adam.%s", vk_dtype_tag(dt));
    vk_buf *b[4] = {vk_vbuf(param), vk_vbuf(exp_avg), vk_vbuf(exp_avg_sq), vk_vbuf(grad)};
    return vk_launch_1d(d, name, n, &p, 4, b);
}
