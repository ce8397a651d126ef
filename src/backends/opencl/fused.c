/*
 * fused.c — the OpenCL backend's fused kernels (backend.h, ABI 3): unary_backward and
 * adam_step, one work item an element (kernels in fused.cl, one program per float dtype).
 */
#include <stdio.h>

#include "ocl_internal.h"

/* fused.cl's UB_ code of an op, or -1: not fused (the core composes). */
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

/* A scalar of fused.cl's `ca` type for dtype dt (double for f64, else float). */
typedef union fu_scalar {
    float f;
    double d;
} fu_scalar;

static ocl_arg fu_arg(em_dtype dt, double v, fu_scalar *u) {
    if (dt == EM_F64) {
        u->d = v;
        return (ocl_arg){sizeof u->d, &u->d};
    }
    u->f = (float)v;
    return (ocl_arg){sizeof u->f, &u->f};
}

static bool fu_float(em_dtype dt) {
    return dt == EM_F32 || dt == EM_F64 || dt == EM_F16 || dt == EM_BF16;
}

static cl_int fu_contig(const em_view *const *vs, int n) {
    for (int i = 0; i < n; i++)
        if (!ocl_contiguous(vs[i])) return 0;
    return 1;
}

em_status ocl_unary_backward(void *ctx, em_unary_op op, const em_view *gx, const em_view *x,
                             const em_view *y, const em_view *gy, const double *params) {
    ocl_dev *d = ctx;
    const int code = ub_code(op);
    if (code < 0)
        return em_backend_set_error(EM_ERR_UNSUPPORTED, "opencl: unary_backward: op %d is not "
                                    "fused", (int)op);
    const bool reads_x = code <= 8;
    const em_view *v = reads_x ? x : y;
    if (!v)
        return em_backend_set_error(EM_ERR_ARG, "opencl: unary_backward: op %d reads %s",
                                    (int)op, reads_x ? "x" : "y");
    const em_dtype dt = gx->dtype;
    if (!fu_float(dt) || v->dtype != dt || gy->dtype != dt)
        return em_backend_set_error(EM_ERR_UNSUPPORTED, "opencl: unary_backward: float dtypes "
                                    "only");
    em_status s = ocl_check_dtype(d, "unary_backward", dt);
    if (s != EM_OK) return s;
    int64_t n = ocl_numel(gx);
    if (n == 0) return EM_OK;
    const em_view *vs[3] = {gx, v, gy};
    fu_scalar u0, u1;
    cl_mem mo = ocl_mem(gx), mv = ocl_mem(v), mg = ocl_mem(gy);
    ocl_view_arg ov = ocl_view(gx), vv = ocl_view(v), gv = ocl_view(gy);
    cl_long nn = n;
    cl_int contig = fu_contig(vs, 3), cop = code;
    ocl_arg args[] = {OCL_ARG(mo),  OCL_ARG(ov),     OCL_ARG(mv),  OCL_ARG(vv),
                      OCL_ARG(mg),  OCL_ARG(gv),     OCL_ARG(nn),  OCL_ARG(contig),
                      OCL_ARG(cop), fu_arg(dt, params ? params[0] : 0, &u0),
                      fu_arg(dt, params ? params[1] : 0, &u1)};
    char opts[32];
    snprintf(opts, sizeof opts, "-DA=%s", ocl_dtype_tag(dt));
    size_t local = ocl_group_size(d), global = ocl_round_up((size_t)n, local);
    return ocl_launch(d, "fused", opts, "ew_unary_bw", 1, &global, &local, 11, args);
}

em_status ocl_adam_step(void *ctx, const em_view *param, const em_view *exp_avg,
                        const em_view *exp_avg_sq, const em_view *grad, const em_adam_args *a) {
    ocl_dev *d = ctx;
    const em_dtype dt = param->dtype;
    if (!fu_float(dt) || exp_avg->dtype != dt || exp_avg_sq->dtype != dt || grad->dtype != dt)
        return em_backend_set_error(EM_ERR_UNSUPPORTED, "opencl: adam_step: float dtypes only");
    em_status s = ocl_check_dtype(d, "adam_step", dt);
    if (s != EM_OK) return s;
    int64_t n = ocl_numel(param);
    if (n == 0) return EM_OK;
    const em_view *vs[4] = {param, exp_avg, exp_avg_sq, grad};
    fu_scalar u[10];
    cl_mem mp = ocl_mem(param), mm = ocl_mem(exp_avg), mv = ocl_mem(exp_avg_sq),
           mg = ocl_mem(grad);
    ocl_view_arg pv = ocl_view(param), mvw = ocl_view(exp_avg), vv = ocl_view(exp_avg_sq),
                 gv = ocl_view(grad);
    cl_long nn = n;
    cl_int contig = fu_contig(vs, 4);
    ocl_arg args[] = {OCL_ARG(mp), OCL_ARG(pv), OCL_ARG(mm), OCL_ARG(mvw), OCL_ARG(mv),
                      OCL_ARG(vv), OCL_ARG(mg), OCL_ARG(gv), OCL_ARG(nn), OCL_ARG(contig),
                      fu_arg(dt, a->grad_scale, &u[0]), fu_arg(dt, a->weight_decay, &u[1]),
                      fu_arg(dt, a->beta1, &u[2]), fu_arg(dt, a->c1, &u[3]),
                      fu_arg(dt, a->beta2, &u[4]), fu_arg(dt, a->c2, &u[5]),
                      fu_arg(dt, a->denom_scale, &u[6]), fu_arg(dt, a->denom_eps, &u[7]),
                      fu_arg(dt, a->step_scale, &u[8]), fu_arg(dt, a->decay, &u[9])};
    char opts[32];
    snprintf(opts, sizeof opts, "-DA=%s", ocl_dtype_tag(dt));
    size_t local = ocl_group_size(d), global = ocl_round_up((size_t)n, local);
    return ocl_launch(d, "fused", opts, "ew_adam", 1, &global, &local, 20, args);
}
