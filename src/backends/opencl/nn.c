/*
 * nn.c — the OpenCL backend's neural kernels (nn.cl, one program per dtype): conv2d,
 * conv_transpose2d, max / average / adaptive average pooling, and the backward kernels the
 * autodiff layer uses (conv2d weight gradient, average pooling input gradients).
 * Every kernel gathers one output element per work item (the weight gradient: one
 * work-group per element), so results are deterministic.
 */
#include "backends/opencl/ocl_kern.h"

/** nn.cl's nnp_t: conv or pool parameters as longs. */
typedef struct nnp_t {
    cl_long v[10];
} nnp_t;

/** The parameters of a convolution: stride, padding, dilation, groups. */
static nnp_t conv_params(const em_conv_args *a) {
    nnp_t p = {{a->stride[0], a->stride[1], a->padding[0], a->padding[1], a->dilation[0],
                a->dilation[1], a->groups, 0, 0, 0}};
    return p;
}

/** The parameters of a pooling: stride, padding, dilation, kernel, count_include_pad. */
static nnp_t pool_params(const em_pool_args *a) {
    nnp_t p = {{a->stride[0], a->stride[1], a->padding[0], a->padding[1], a->dilation[0],
                a->dilation[1], a->kernel[0], a->kernel[1], a->count_include_pad, 0}};
    return p;
}

/** Launches `kernel` with one item per element of `out` (nothing when it is empty). */
static em_status per_elem(ocl_dev *d, const char *op, const em_view *out, const char *kernel,
                          int nargs, const ocl_arg *args) {
    em_status s = ocl_check_dtype(d, op, out->dtype);
    if (s != EM_OK) return s;
    size_t n = (size_t)ocl_numel(out);
    if (n == 0) return EM_OK;
    char opt[32];
    okern_opts(opt, sizeof opt, out->dtype);
    return ocl_launch(d, "nn", opt, kernel, 1, &n, NULL, nargs, args);
}

/** Shared by conv2d and conv_transpose2d: (out, x, w, bias, params). */
static em_status conv_like(ocl_dev *d, const char *op, const char *kernel, const em_view *out,
                           const em_view *x, const em_view *w, const em_view *bias,
                           const em_conv_args *a) {
    ocl_view_arg ov = ocl_view(out), xv = ocl_view(x), wv = ocl_view(w);
    ocl_view_arg bv = bias ? ocl_view(bias) : ov;
    cl_mem om = ocl_mem(out), xm = ocl_mem(x), wm = ocl_mem(w), bm = bias ? ocl_mem(bias) : om;
    cl_int has_b = bias != NULL;
    nnp_t p = conv_params(a);
    ocl_arg args[] = {OCL_ARG(om), OCL_ARG(ov), OCL_ARG(xm), OCL_ARG(xv),    OCL_ARG(wm),
                      OCL_ARG(wv), OCL_ARG(bm), OCL_ARG(bv), OCL_ARG(has_b), OCL_ARG(p)};
    return per_elem(d, op, out, kernel, 10, args);
}

/** conv2d (bias may be NULL). */
em_status ocl_conv2d(void *ctx, const em_view *out, const em_view *x, const em_view *w,
                     const em_view *bias, const em_conv_args *a) {
    return conv_like(ctx, "conv2d", "conv2d_fwd", out, x, w, bias, a);
}

/** conv_transpose2d (bias may be NULL). */
em_status ocl_conv_transpose2d(void *ctx, const em_view *out, const em_view *x, const em_view *w,
                               const em_view *bias, const em_conv_args *a) {
    return conv_like(ctx, "conv_transpose2d", "conv_t2d_fwd", out, x, w, bias, a);
}

/** max_pool2d with optional indices (i64). */
em_status ocl_max_pool2d(void *ctx, const em_view *out, const em_view *indices, const em_view *x,
                         const em_pool_args *a) {
    ocl_view_arg ov = ocl_view(out), xv = ocl_view(x), iv = indices ? ocl_view(indices) : ov;
    cl_mem om = ocl_mem(out), xm = ocl_mem(x), im = indices ? ocl_mem(indices) : om;
    cl_int has_i = indices != NULL;
    nnp_t p = pool_params(a);
    ocl_arg args[] = {OCL_ARG(om),    OCL_ARG(ov), OCL_ARG(im), OCL_ARG(iv),
                      OCL_ARG(has_i), OCL_ARG(xm), OCL_ARG(xv), OCL_ARG(p)};
    return per_elem(ctx, "max_pool2d", out, "max_pool2d_fwd", 8, args);
}

/** avg_pool2d. */
em_status ocl_avg_pool2d(void *ctx, const em_view *out, const em_view *x, const em_pool_args *a) {
    ocl_view_arg ov = ocl_view(out), xv = ocl_view(x);
    cl_mem om = ocl_mem(out), xm = ocl_mem(x);
    nnp_t p = pool_params(a);
    ocl_arg args[] = {OCL_ARG(om), OCL_ARG(ov), OCL_ARG(xm), OCL_ARG(xv), OCL_ARG(p)};
    return per_elem(ctx, "avg_pool2d", out, "avg_pool2d_fwd", 5, args);
}

/** adaptive_avg_pool2d (out's spatial size sets the bins). */
em_status ocl_adaptive_avg_pool2d(void *ctx, const em_view *out, const em_view *x) {
    ocl_view_arg ov = ocl_view(out), xv = ocl_view(x);
    cl_mem om = ocl_mem(out), xm = ocl_mem(x);
    ocl_arg args[] = {OCL_ARG(om), OCL_ARG(ov), OCL_ARG(xm), OCL_ARG(xv)};
    return per_elem(ctx, "adaptive_avg_pool2d", out, "adaptive_avg_fwd", 4, args);
}

/** The weight gradient of conv2d: one work-group per gw element. */
em_status ocl_conv2d_weight_grad(void *ctx, const em_view *gw, const em_view *x,
                                 const em_view *gy, const em_conv_args *a) {
    ocl_dev *d = ctx;
    em_status s = ocl_check_dtype(d, "conv2d_weight_grad", gw->dtype);
    if (s != EM_OK) return s;
    int64_t elems = ocl_numel(gw);
    if (elems == 0) return EM_OK;
    int64_t rows = gy->shape[0] * gy->shape[2]; /* (n, oy) rows of gy, split over a group */
    size_t L = okern_line_group(d, rows, 2);
    size_t global = (size_t)elems * L;
    ocl_view_arg gwv = ocl_view(gw), xv = ocl_view(x), gyv = ocl_view(gy);
    cl_mem gm = ocl_mem(gw), xm = ocl_mem(x), ym = ocl_mem(gy);
    nnp_t p = conv_params(a);
    char opt[32];
    okern_opts(opt, sizeof opt, gw->dtype);
    ocl_arg args[] = {OCL_ARG(gm),  OCL_ARG(gwv), OCL_ARG(xm), OCL_ARG(xv),
                      OCL_ARG(ym),  OCL_ARG(gyv), OCL_ARG(p),  OCL_LOCAL(L * 8)};
    return ocl_launch(d, "nn", opt, "conv2d_wgrad", 1, &global, &L, 8, args);
}

/** The input gradient of avg_pool2d. */
em_status ocl_avg_pool2d_backward(void *ctx, const em_view *gx, const em_view *gy,
                                  const em_pool_args *a) {
    ocl_view_arg gxv = ocl_view(gx), gyv = ocl_view(gy);
    cl_mem xm = ocl_mem(gx), ym = ocl_mem(gy);
    nnp_t p = pool_params(a);
    ocl_arg args[] = {OCL_ARG(xm), OCL_ARG(gxv), OCL_ARG(ym), OCL_ARG(gyv), OCL_ARG(p)};
    return per_elem(ctx, "avg_pool2d_backward", gx, "avg_pool2d_bwd", 5, args);
}

/** The input gradient of adaptive_avg_pool2d. */
em_status ocl_adaptive_avg_pool2d_backward(void *ctx, const em_view *gx, const em_view *gy) {
    ocl_view_arg gxv = ocl_view(gx), gyv = ocl_view(gy);
    cl_mem xm = ocl_mem(gx), ym = ocl_mem(gy);
    ocl_arg args[] = {OCL_ARG(xm), OCL_ARG(gxv), OCL_ARG(ym), OCL_ARG(gyv)};
    return per_elem(ctx, "adaptive_avg_pool2d_backward", gx, "adaptive_avg_bwd", 4, args);
}
