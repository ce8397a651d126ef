/*
 * nn.c — the Vulkan backend's neural kernels (shaders/nn.comp, one variant per kernel and
 * float dtype): conv2d, conv_transpose2d, max / average / adaptive average pooling, the
 * backward kernels the autodiff layer uses (conv2d weight gradient, average pooling input
 * gradients) and layer_norm. Every kernel gathers its output elements (no atomics), so
 * results are deterministic.
 */
#include <stdio.h>
#include <string.h>

#include "vk_internal.h"

#define NN_MAX_GROUPS 65535

/* Checks the dtypes of views vs[0..nv) (NULL entries skipped). */
static em_status nn_check(vk_dev *d, const char *op, const em_view *const *vs, int nv) {
    for (int i = 0; i < nv; i++) {
        if (!vs[i]) continue;
        em_status s = vk_check_dtype(d, op, vs[i]->dtype);
        if (s != EM_OK) return s;
        if (vs[i]->dtype != vs[0]->dtype || em_dtype_kind(vs[i]->dtype) != EM_KIND_FLOAT)
            return em_backend_set_error(EM_ERR_UNSUPPORTED, "vulkan %s: dtype %s", op,
                                        em_dtype_name(vs[i]->dtype));
    }
    return EM_OK;
}

/* The parameters with views vs[0..nv) (NULL entries left zero). */
static void nn_params(vk_params *p, const em_view *const *vs, int nv) {
    memset(p, 0, sizeof *p);
    for (int i = 0; i < nv; i++)
        if (vs[i]) p->v[i] = vk_view(vs[i]);
}

static void conv_params(vk_params *p, const em_conv_args *a) {
    p->i[0] = (int32_t)a->stride[0];
    p->i[1] = (int32_t)a->stride[1];
    p->i[2] = (int32_t)a->padding[0];
    p->i[3] = (int32_t)a->padding[1];
    p->i[4] = (int32_t)a->dilation[0];
    p->i[5] = (int32_t)a->dilation[1];
    p->i[6] = (int32_t)a->groups;
}

static void pool_params(vk_params *p, const em_pool_args *a) {
    p->i[0] = (int32_t)a->stride[0];
    p->i[1] = (int32_t)a->stride[1];
    p->i[2] = (int32_t)a->padding[0];
    p->i[3] = (int32_t)a->padding[1];
    p->i[4] = (int32_t)a->dilation[0];
    p->i[5] = (int32_t)a->dilation[1];
    p->i[6] = (int32_t)a->kernel[0];
    p->i[7] = (int32_t)a->kernel[1];
    p->i[8] = a->count_include_pad ? 1 : 0;
}

/* Launches kernel `kern` with one invocation per element of vs[0] (nothing when empty); the
 * views vs[i] are P.v[i] and their buffers bindings 1 + i (NULL: a dummy). */
static em_status per_elem(vk_dev *d, const char *kern, vk_params *p, const em_view *const *vs,
                          int nv) {
    int64_t n = vk_numel(vs[0]);
    if (n == 0) return EM_OK;
    vk_buf *bufs[VK_MAX_VIEWS];
    for (int i = 0; i < nv; i++) bufs[i] = vs[i] ? vk_vbuf(vs[i]) : NULL;
    char name[48];
    snprintf(name, sizeof name, "%s.%s", kern, vk_dtype_tag(vs[0]->dtype));
    return vk_launch_1d(d, name, n, p, nv, bufs);
}

/* conv2d and conv_transpose2d: (out, x, w, bias). */
static em_status conv_like(vk_dev *d, const char *op, const char *kern, const em_view *out,
                           const em_view *x, const em_view *w, const em_view *bias,
                           const em_conv_args *a) {
    const em_view *vs[4] = {out, x, w, bias};
    em_status s = nn_check(d, op, vs, 4);
    if (s != EM_OK) return s;
    vk_params p;
    nn_params(&p, vs, 4);
    conv_params(&p, a);
    p.i[9] = bias != NULL;
    return per_elem(d, kern, &p, vs, 4);
}

em_status vk_conv2d(void *ctx, const em_view *out, const em_view *x, const em_view *w,
                    const em_view *bias, const em_conv_args *a) {
    return conv_like(ctx, "conv2d", "conv2d", out, x, w, bias, a);
}

em_status vk_conv_transpose2d(void *ctx, const em_view *out, const em_view *x, const em_view *w,
                              const em_view *bias, const em_conv_args *a) {
    return conv_like(ctx, "conv_transpose2d", "conv_t2d", out, x, w, bias, a);
}

em_status vk_max_pool2d(void *ctx, const em_view *out, const em_view *indices, const em_view *x,
                        const em_pool_args *a) {
    vk_dev *d = ctx;
    const em_view *vs[2] = {out, x};
    em_status s = nn_check(d, "max_pool2d", vs, 2);
    if (s != EM_OK) return s;
    /* the indices are written as two 32-bit words each: no shaderInt64 needed */
    if (indices && indices->dtype != EM_I64)
        return em_backend_set_error(EM_ERR_UNSUPPORTED, "vulkan max_pool2d: indices of dtype %s",
                                    em_dtype_name(indices->dtype));
    const em_view *all[4] = {out, x, NULL, indices};
    vk_params p;
    nn_params(&p, all, 4);
    pool_params(&p, a);
    p.i[9] = indices != NULL;
    return per_elem(d, "max_pool2d", &p, all, 4);
}

/* A pooling kernel `kern` (slot `op`) over two views, an invocation per element of the first
 * (out, or gx for a backward); a is NULL for the adaptive pools. */
static em_status pool_pass(void *ctx, const char *op, const char *kern, const em_view *first,
                           const em_view *second, const em_pool_args *a) {
    vk_dev *d = ctx;
    const em_view *vs[2] = {first, second};
    em_status s = nn_check(d, op, vs, 2);
    if (s != EM_OK) return s;
    vk_params p;
    nn_params(&p, vs, 2);
    if (a) pool_params(&p, a);
    return per_elem(d, kern, &p, vs, 2);
}

em_status vk_avg_pool2d(void *ctx, const em_view *out, const em_view *x, const em_pool_args *a) {
    return pool_pass(ctx, "avg_pool2d", "avg_pool2d", out, x, a);
}

em_status vk_adaptive_avg_pool2d(void *ctx, const em_view *out, const em_view *x) {
    return pool_pass(ctx, "adaptive_avg_pool2d", "adaptive_avg", out, x, NULL);
}

em_status vk_avg_pool2d_backward(void *ctx, const em_view *gx, const em_view *gy,
                                 const em_pool_args *a) {
    return pool_pass(ctx, "avg_pool2d_backward", "avg_pool2d_bwd", gx, gy, a);
}

em_status vk_adaptive_avg_pool2d_backward(void *ctx, const em_view *gx, const em_view *gy) {
    return pool_pass(ctx, "adaptive_avg_pool2d_backward", "adaptive_avg_bwd", gx, gy, NULL);
}

/* Workgroups for `items` one-group items (the shader loops past the grid). */
static uint32_t groups_of(int64_t items) {
    return items > NN_MAX_GROUPS ? NN_MAX_GROUPS : (uint32_t)items;
}

em_status vk_conv2d_weight_grad(void *ctx, const em_view *gw, const em_view *x,
                                const em_view *gy, const em_conv_args *a) {
    vk_dev *d = ctx;
    const em_view *vs[3] = {gw, x, gy};
    em_status s = nn_check(d, "conv2d_weight_grad", vs, 3);
    if (s != EM_OK) return s;
    int64_t elems = vk_numel(gw);
    if (elems == 0) return EM_OK;
    vk_params p;
    nn_params(&p, vs, 3);
    conv_params(&p, a);
    char name[48];
    snprintf(name, sizeof name, "conv2d_wgrad.%s", vk_dtype_tag(gw->dtype));
    const uint32_t groups[3] = {groups_of(elems), 1, 1};
    vk_buf *bufs[3] = {vk_vbuf(gw), vk_vbuf(x), vk_vbuf(gy)};
    return vk_launch(d, name, groups, &p, 3, bufs);
}

em_status vk_layer_norm(void *ctx, const em_view *out, const em_view *x, const em_view *weight,
                        const em_view *bias, int64_t norm_numel, double eps) {
    vk_dev *d = ctx;
    const em_view *vs[4] = {out, x, weight, bias};
    em_status s = nn_check(d, "layer_norm", vs, 4);
    if (s != EM_OK) return s;
    const int64_t n = norm_numel;
    const int64_t rows = n > 0 ? vk_numel(x) / n : 0;
    if (rows == 0) return EM_OK;
    vk_params p;
    memset(&p, 0, sizeof p);
    p.i[0] = (int32_t)n;
    p.i[1] = (int32_t)rows;
    p.i[2] = (int32_t)x->offset;
    p.i[3] = (int32_t)(x->rank == 2 ? x->strides[0] : n);
    p.i[4] = (int32_t)x->strides[x->rank - 1];
    p.i[5] = (int32_t)out->offset;
    p.i[6] = (int32_t)(out->rank == 2 ? out->strides[0] : n);
    p.i[7] = (int32_t)out->strides[out->rank - 1];
    if (weight) {
        p.i[8] = (int32_t)weight->offset;
        p.i[9] = (int32_t)weight->strides[0];
        p.i[10] = 1;
    }
    if (bias) {
        p.i[11] = (int32_t)bias->offset;
        p.i[12] = (int32_t)bias->strides[0];
        p.i[13] = 1;
    }
    p.f[0] = (float)eps;
    vk_set_f64(&p, 0, eps);
    char name[48];
    snprintf(name, sizeof name, "layer_norm.%s", vk_dtype_tag(x->dtype));
    const uint32_t groups[3] = {groups_of(rows), 1, 1};
    vk_buf *bufs[4] = {vk_vbuf(out), vk_vbuf(x), weight ? vk_vbuf(weight) : NULL,
                       bias ? vk_vbuf(bias) : NULL};
    return vk_launch(d, name, groups, &p, 4, bufs);
}
