/* norm.c — the OpenCL backend's normalization slots (norm.cl): batch_norm and its backward
 * (one work-group per channel), group_norm (per sample and group), rms_norm (per row). The
 * views may have any strides; float dtypes only. */
#include "backends/opencl/ocl_kern.h"

/* An optional 1-d view as kernel arguments: buffer (x's when absent), offset, stride,
 * present. */
typedef struct nk_p1 {
    cl_mem m;
    cl_long off, st;
    cl_int has;
} nk_p1;

static nk_p1 nk_p1_of(const em_view *v, cl_mem dflt) {
    nk_p1 p = {dflt, 0, 0, 0};
    if (v) p = (nk_p1){ocl_mem(v), v->offset, v->strides[0], 1};
    return p;
}

#define NK_P1(p) OCL_ARG((p).m), OCL_ARG((p).off), OCL_ARG((p).st), OCL_ARG((p).has)

em_status ocl_batch_norm(void *ctx, const em_view *out, const em_view *save_mean,
                         const em_view *save_invstd, const em_view *x, const em_view *weight,
                         const em_view *bias, const em_view *running_mean,
                         const em_view *running_var, bool training, double momentum,
                         double eps) {
    ocl_dev *d = ctx;
    em_status s = ocl_check_dtype(d, "batch_norm", x->dtype);
    if (s != EM_OK) return s;
    cl_long N = x->shape[0], C = x->shape[1], S = x->shape[2];
    if (N * C * S == 0) return EM_OK;
    cl_mem xm = ocl_mem(x), om = ocl_mem(out);
    cl_long x_off = x->offset, xs0 = x->strides[0], xs1 = x->strides[1], xs2 = x->strides[2];
    cl_long o_off = out->offset, os0 = out->strides[0], os1 = out->strides[1],
            os2 = out->strides[2];
    nk_p1 w = nk_p1_of(weight, xm), b = nk_p1_of(bias, xm), rm = nk_p1_of(running_mean, om),
          rv = nk_p1_of(running_var, om), sm = nk_p1_of(save_mean, om),
          si = nk_p1_of(save_invstd, om);
    cl_int has_r = running_mean && running_var, tr = training;
    okern_acc mo = okern_acc_of(x->dtype, momentum), e = okern_acc_of(x->dtype, eps);
    char opt[32];
    okern_opts(opt, sizeof opt, x->dtype);
    size_t L = okern_line_group(d, N * S, 8);
    size_t global = (size_t)C * L;
    ocl_arg args[] = {OCL_ARG(xm),    OCL_ARG(x_off), OCL_ARG(xs0),   OCL_ARG(xs1),
                      OCL_ARG(xs2),   OCL_ARG(om),    OCL_ARG(o_off), OCL_ARG(os0),
                      OCL_ARG(os1),   OCL_ARG(os2),   OCL_ARG(N),     OCL_ARG(S),
                      NK_P1(w),       NK_P1(b),       OCL_ARG(rm.m),  OCL_ARG(rm.off),
                      OCL_ARG(rm.st), OCL_ARG(rv.m),  OCL_ARG(rv.off), OCL_ARG(rv.st),
                      OCL_ARG(has_r), NK_P1(sm),      NK_P1(si),      OCL_ARG(tr),
                      OKERN_ACC_ARG(mo), OKERN_ACC_ARG(e), OCL_LOCAL(L * 8)};
    return ocl_launch(d, "norm", opt, "batch_norm_chan", 1, &global, &L,
                      (int)(sizeof args / sizeof args[0]), args);
}

em_status ocl_batch_norm_backward(void *ctx, const em_view *gx, const em_view *gweight,
                                  const em_view *gbias, const em_view *gy, const em_view *x,
                                  const em_view *mean, const em_view *invstd,
                                  const em_view *weight, bool training) {
    ocl_dev *d = ctx;
    em_status s = ocl_check_dtype(d, "batch_norm_backward", x->dtype);
    if (s != EM_OK) return s;
    cl_long N = x->shape[0], C = x->shape[1], S = x->shape[2];
    if (C == 0) return EM_OK;
    cl_mem gm = ocl_mem(gy), xm = ocl_mem(x);
    cl_long g_off = gy->offset, gs0 = gy->strides[0], gs1 = gy->strides[1], gs2 = gy->strides[2];
    cl_long x_off = x->offset, xs0 = x->strides[0], xs1 = x->strides[1], xs2 = x->strides[2];
    cl_mem gxm = gx ? ocl_mem(gx) : xm;
    cl_long gx_off = gx ? gx->offset : 0, gxs0 = gx ? gx->strides[0] : 0,
            gxs1 = gx ? gx->strides[1] : 0, gxs2 = gx ? gx->strides[2] : 0;
    cl_int has_gx = gx != NULL, tr = training;
    nk_p1 m = nk_p1_of(mean, xm), iv = nk_p1_of(invstd, xm), w = nk_p1_of(weight, xm),
          gw = nk_p1_of(gweight, xm), gb = nk_p1_of(gbias, xm);
    char opt[32];
    okern_opts(opt, sizeof opt, x->dtype);
    size_t L = okern_line_group(d, N * S, 8);
    size_t global = (size_t)C * L;
    ocl_arg args[] = {OCL_ARG(gm),     OCL_ARG(g_off),  OCL_ARG(gs0),    OCL_ARG(gs1),
                      OCL_ARG(gs2),    OCL_ARG(xm),     OCL_ARG(x_off),  OCL_ARG(xs0),
                      OCL_ARG(xs1),    OCL_ARG(xs2),    OCL_ARG(gxm),    OCL_ARG(gx_off),
                      OCL_ARG(gxs0),   OCL_ARG(gxs1),   OCL_ARG(gxs2),   OCL_ARG(has_gx),
                      OCL_ARG(N),      OCL_ARG(S),      OCL_ARG(m.m),    OCL_ARG(m.off),
                      OCL_ARG(m.st),   OCL_ARG(iv.m),   OCL_ARG(iv.off), OCL_ARG(iv.st),
                      NK_P1(w),        NK_P1(gw),       NK_P1(gb),       OCL_ARG(tr),
                      OCL_LOCAL(L * 8)};
    return ocl_launch(d, "norm", opt, "batch_norm_bwd_chan", 1, &global, &L,
                      (int)(sizeof args / sizeof args[0]), args);
}

em_status ocl_group_norm(void *ctx, const em_view *out, const em_view *save_mean,
                         const em_view *save_invstd, const em_view *x, const em_view *weight,
                         const em_view *bias, int64_t groups, double eps) {
    ocl_dev *d = ctx;
    em_status s = ocl_check_dtype(d, "group_norm", x->dtype);
    if (s != EM_OK) return s;
    cl_long N = x->shape[0], C = x->shape[1], S = x->shape[2], G = groups;
    if (N * C * S == 0 || G <= 0) return EM_OK;
    cl_long Cg = C / G;
    cl_mem xm = ocl_mem(x), om = ocl_mem(out);
    cl_long x_off = x->offset, xs0 = x->strides[0], xs1 = x->strides[1], xs2 = x->strides[2];
    cl_long o_off = out->offset, os0 = out->strides[0], os1 = out->strides[1],
            os2 = out->strides[2];
    nk_p1 w = nk_p1_of(weight, xm), b = nk_p1_of(bias, xm);
    cl_mem smm = save_mean ? ocl_mem(save_mean) : om, sim = save_invstd ? ocl_mem(save_invstd) : om;
    cl_long sm_off = save_mean ? save_mean->offset : 0,
            sm0 = save_mean ? save_mean->strides[0] : 0, sm1 = save_mean ? save_mean->strides[1] : 0;
    cl_long si_off = save_invstd ? save_invstd->offset : 0,
            si0 = save_invstd ? save_invstd->strides[0] : 0,
            si1 = save_invstd ? save_invstd->strides[1] : 0;
    cl_int has_sm = save_mean != NULL, has_si = save_invstd != NULL;
    okern_acc e = okern_acc_of(x->dtype, eps);
    char opt[32];
    okern_opts(opt, sizeof opt, x->dtype);
    size_t L = okern_line_group(d, Cg * S, 8);
    size_t global = (size_t)(N * G) * L;
    ocl_arg args[] = {OCL_ARG(xm),     OCL_ARG(x_off), OCL_ARG(xs0),    OCL_ARG(xs1),
                      OCL_ARG(xs2),    OCL_ARG(om),    OCL_ARG(o_off),  OCL_ARG(os0),
                      OCL_ARG(os1),    OCL_ARG(os2),   OCL_ARG(G),      OCL_ARG(Cg),
                      OCL_ARG(S),      NK_P1(w),       NK_P1(b),        OCL_ARG(smm),
                      OCL_ARG(sm_off), OCL_ARG(sm0),   OCL_ARG(sm1),    OCL_ARG(has_sm),
                      OCL_ARG(sim),    OCL_ARG(si_off), OCL_ARG(si0),   OCL_ARG(si1),
                      OCL_ARG(has_si), OKERN_ACC_ARG(e), OCL_LOCAL(L * 8)};
    return ocl_launch(d, "norm", opt, "group_norm_rows", 1, &global, &L,
                      (int)(sizeof args / sizeof args[0]), args);
}

em_status ocl_rms_norm(void *ctx, const em_view *out, const em_view *save_invrms,
                       const em_view *x, const em_view *weight, int64_t norm_numel,
                       double eps) {
    ocl_dev *d = ctx;
    em_status s = ocl_check_dtype(d, "rms_norm", x->dtype);
    if (s != EM_OK) return s;
    cl_long n = norm_numel;
    int64_t rows = n > 0 ? ocl_numel(x) / n : 0;
    if (rows == 0) return EM_OK;
    cl_mem xm = ocl_mem(x), om = ocl_mem(out);
    cl_long x_off = x->offset, xs0 = x->strides[0], xs1 = x->strides[1];
    cl_long o_off = out->offset, os0 = out->strides[0], os1 = out->strides[1];
    nk_p1 w = nk_p1_of(weight, xm), si = nk_p1_of(save_invrms, om);
    okern_acc e = okern_acc_of(x->dtype, eps);
    char opt[32];
    okern_opts(opt, sizeof opt, x->dtype);
    size_t L = okern_line_group(d, n, 8);
    size_t global = (size_t)rows * L;
    ocl_arg args[] = {OCL_ARG(xm),  OCL_ARG(x_off), OCL_ARG(xs0), OCL_ARG(xs1),
                      OCL_ARG(n),   OCL_ARG(om),    OCL_ARG(o_off), OCL_ARG(os0),
                      OCL_ARG(os1), NK_P1(w),       NK_P1(si),    OKERN_ACC_ARG(e),
                      OCL_LOCAL(L * 8)};
    return ocl_launch(d, "norm", opt, "rms_norm_rows", 1, &global, &L,
                      (int)(sizeof args / sizeof args[0]), args);
}
