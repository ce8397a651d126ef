/*
 * pool.c — 2-d pooling over NCHW tensors: em_max_pool2d (with optional indices),
 * em_avg_pool2d and em_adaptive_avg_pool2d. Parameter rules and output sizes follow PyTorch
 * (torch.nn.functional.max_pool2d / avg_pool2d / adaptive_avg_pool2d on batched inputs).
 * Each records itself for autodiff; max_pool2d then computes its indices even when the caller
 * does not want them (backward scatters by them). The internal entry points of the backward
 * kernels (emi_avg_pool2d_backward, emi_adaptive_avg_pool2d_backward) close the file.
 */
#include "autodiff/rules/rules.h"

/* Parameters beyond this are refused (EM_ERR_ARG), which keeps the size arithmetic in int64. */
#define POOL_PARAM_MAX ((int64_t)1 << 31)

/** Checks the input of a pooling op: present, float, 4-d with non-empty non-batch dims. */
static em_status pool_check_x(const char *fn, const em_tensor *x) {
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_float(fn, x));
    if (x->v.rank != 4)
        return emi_fail(EM_ERR_SHAPE, "%s: expected x of rank 4 [N, C, H, W], got rank %d", fn,
                        x->v.rank);
    for (int d = 1; d < 4; d++)
        if (x->v.shape[d] == 0)
            return emi_fail(EM_ERR_SHAPE, "%s: x has a zero-sized non-batch dim (dim %d)", fn, d);
    return EM_OK;
}

/** PyTorch's pooling output size along one axis, including ceil_mode's rule that the last
 *  window must start inside the input or its left padding. */
static int64_t pool_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil) {
    int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil ? s - 1 : 0);
    int64_t q = num >= 0 ? num / s : -((-num + s - 1) / s); /* floor division */
    int64_t o = q + 1;
    if (ceil && o > 0 && (o - 1) * s >= in + p) o--;
    return o;
}

/** Resolves and checks pool params for x (4-d), computing the output shape. `max` allows
 *  dilation (avg pooling ignores it). */
static em_status pool_resolve(const char *fn, const int64_t xshape[4], const em_pool_params *p,
                              bool max, em_pool_args *a, int64_t oshape[4]) {
    if (!p) return emi_fail(EM_ERR_ARG, "%s: params is NULL", fn);
    for (int i = 0; i < 2; i++) {
        const char *ax = i == 0 ? "H" : "W";
        int64_t k = p->kernel[i], s = p->stride[i] ? p->stride[i] : k;
        int64_t d = max && p->dilation[i] ? p->dilation[i] : 1, pad = p->padding[i];
        if (k < 1 || k > POOL_PARAM_MAX)
            return emi_fail(EM_ERR_ARG, "%s: kernel (%s) must be in 1..2^31, got %lld", fn, ax,
                            (long long)k);
        if (s < 1 || s > POOL_PARAM_MAX)
            return emi_fail(EM_ERR_ARG, "%s: stride (%s) must be in 1..2^31 (0: the kernel), "
                            "got %lld", fn, ax, (long long)s);
        if (d < 1 || d > POOL_PARAM_MAX)
            return emi_fail(EM_ERR_ARG, "%s: dilation (%s) must be in 1..2^31 (0: 1), got %lld",
                            fn, ax, (long long)d);
        if (pad < 0 || pad > k / 2)
            return emi_fail(EM_ERR_ARG,
                            "%s: padding (%s) must be between 0 and half the kernel (%lld), "
                            "got %lld", fn, ax, (long long)(k / 2), (long long)pad);
        a->kernel[i] = k;
        a->stride[i] = s;
        a->dilation[i] = d;
        a->padding[i] = pad;
        int64_t o = pool_out_size(xshape[2 + i], k, s, pad, d, p->ceil_mode);
        if (o < 1)
            return emi_fail(EM_ERR_SHAPE,
                            "%s: the output %s would be %lld: the input (%lld) is too small "
                            "for the kernel",
                            fn, i == 0 ? "height" : "width", (long long)o,
                            (long long)xshape[2 + i]);
        oshape[2 + i] = o;
    }
    a->count_include_pad = p->count_include_pad;
    oshape[0] = xshape[0];
    oshape[1] = xshape[1];
    return EM_OK;
}

/** Reads x through a view the backend takes and runs one pooling kernel into o (and idx). */
static em_status pool_run(const char *fn, const em_tensor *x, em_tensor *o, em_tensor *idx,
                          const em_pool_args *a, int which) {
    em_view xv;
    em_tensor *tmp = NULL;
    EMI_TRY(emi_input_view(fn, x, &xv, &tmp));
    const em_backend_ops *ops = x->st->ops;
    void *ctx = x->st->ctx;
    em_status s;
    if (which == 0)
        s = ops->max_pool2d(ctx, &o->v, idx ? &idx->v : NULL, &xv, a);
    else if (which == 1)
        s = ops->avg_pool2d(ctx, &o->v, &xv, a);
    else
        s = ops->adaptive_avg_pool2d(ctx, &o->v, &xv);
    em_tensor_release(tmp);
    return s;
}

em_status em_max_pool2d(const em_tensor *x, const em_pool_params *p, em_tensor **out,
                        em_tensor **indices) {
    static const char fn[] = "em_max_pool2d";
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(pool_check_x(fn, x));
    em_pool_args a;
    int64_t oshape[4];
    EMI_TRY(pool_resolve(fn, x->v.shape, p, true, &a, oshape));
    const em_backend_ops *ops = x->st->ops;
    EMI_TRY(emi_need(fn, ops, ops->max_pool2d != NULL, "max_pool2d"));
    const em_tensor *ins[1] = {x};
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, ins, 1, &ad));
    em_tensor *o = NULL, *idx = NULL;
    em_status s = emi_empty(fn, x->dev, x->v.dtype, oshape, 4, &o);
    if (s == EM_OK && (indices || ad.tracked)) s = emi_empty(fn, x->dev, EM_I64, oshape, 4, &idx);
    if (s == EM_OK && emi_numel(oshape, 4) > 0) s = pool_run(fn, x, o, idx, &a, 0);
    if (s == EM_OK && idx) s = emi_ad_end(&ad, NULL, ins, 1, idx, NULL, 0);
    if (s == EM_OK) {
        /* the indices are an input of the node: backward scatters the gradient by them */
        const emi_rule_pool_params rp = {*p};
        const em_tensor *rin[2] = {x, idx};
        s = emi_ad_end(&ad, &emi_rule_max_pool2d, rin, 2, o, &rp, sizeof rp);
    }
    if (s != EM_OK) {
        em_tensor_release(o);
        em_tensor_release(idx);
        return s;
    }
    *out = o;
    if (indices) *indices = idx;
    else em_tensor_release(idx);
    return EM_OK;
}

em_status em_avg_pool2d(const em_tensor *x, const em_pool_params *p, em_tensor **out) {
    static const char fn[] = "em_avg_pool2d";
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(pool_check_x(fn, x));
    em_pool_args a;
    int64_t oshape[4];
    EMI_TRY(pool_resolve(fn, x->v.shape, p, false, &a, oshape));
    const em_backend_ops *ops = x->st->ops;
    EMI_TRY(emi_need(fn, ops, ops->avg_pool2d != NULL, "avg_pool2d"));
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, &x, 1, &ad));
    em_tensor *o;
    EMI_TRY(emi_empty(fn, x->dev, x->v.dtype, oshape, 4, &o));
    em_status s = EM_OK;
    if (emi_numel(oshape, 4) > 0) s = pool_run(fn, x, o, NULL, &a, 1);
    if (s == EM_OK) {
        const emi_rule_pool_params rp = {*p};
        s = emi_ad_end(&ad, &emi_rule_avg_pool2d, &x, 1, o, &rp, sizeof rp);
    }
    if (s != EM_OK) {
        em_tensor_release(o);
        return s;
    }
    *out = o;
    return EM_OK;
}

em_status em_adaptive_avg_pool2d(const em_tensor *x, int64_t oh, int64_t ow, em_tensor **out) {
    static const char fn[] = "em_adaptive_avg_pool2d";
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(pool_check_x(fn, x));
    if (oh < 1 || ow < 1 || oh > POOL_PARAM_MAX || ow > POOL_PARAM_MAX)
        return emi_fail(EM_ERR_ARG, "%s: output size [%lld, %lld] must be in 1..2^31", fn,
                        (long long)oh, (long long)ow);
    /* The bins are computed as i * H / oh: keep those products inside int64. */
    if (x->v.shape[2] > INT64_MAX / 4 / (oh + 1) || x->v.shape[3] > INT64_MAX / 4 / (ow + 1))
        return emi_fail(EM_ERR_SHAPE, "%s: input and output sizes are too large", fn);
    const em_backend_ops *ops = x->st->ops;
    EMI_TRY(emi_need(fn, ops, ops->adaptive_avg_pool2d != NULL, "adaptive_avg_pool2d"));
    const int64_t oshape[4] = {x->v.shape[0], x->v.shape[1], oh, ow};
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, &x, 1, &ad));
    em_tensor *o;
    EMI_TRY(emi_empty(fn, x->dev, x->v.dtype, oshape, 4, &o));
    em_status s = EM_OK;
    if (emi_numel(oshape, 4) > 0) s = pool_run(fn, x, o, NULL, NULL, 2);
    if (s == EM_OK) {
        const int64_t rp[2] = {oh, ow};
        s = emi_ad_end(&ad, &emi_rule_adaptive_avg_pool2d, &x, 1, o, rp, sizeof rp);
    }
    if (s != EM_OK) {
        em_tensor_release(o);
        return s;
    }
    *out = o;
    return EM_OK;
}

/* ---- backward kernels (internal: the autodiff rules call them) ---- */

/** Checks what both pooling backward entry points share: gy present, float, rank 4, untracked,
 *  with xshape's N and C. */
static em_status pool_check_gy(const char *fn, const em_tensor *gy, const int64_t *xshape,
                               em_tensor **out) {
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_tensor(fn, "gy", gy));
    if (!xshape) return emi_fail(EM_ERR_ARG, "%s: xshape is NULL", fn);
    EMI_TRY(emi_check_float(fn, gy));
    if (gy->ad)
        return emi_fail(EM_ERR_UNSUPPORTED, "%s: a tracked gy (no second derivatives)", fn);
    if (gy->v.rank != 4)
        return emi_fail(EM_ERR_SHAPE, "%s: expected gy of rank 4, got rank %d", fn, gy->v.rank);
    for (int d = 0; d < 4; d++)
        if (xshape[d] < 0 || (d > 0 && xshape[d] == 0))
            return emi_fail(EM_ERR_SHAPE, "%s: invalid input shape", fn);
    if (gy->v.shape[0] != xshape[0] || gy->v.shape[1] != xshape[1])
        return emi_fail(EM_ERR_SHAPE, "%s: gy's batch and channels [%lld, %lld] differ from "
                        "x's [%lld, %lld]", fn, (long long)gy->v.shape[0],
                        (long long)gy->v.shape[1], (long long)xshape[0], (long long)xshape[1]);
    return EM_OK;
}

/** Allocates gx (xshape) and runs one pooling backward kernel (which = 1: avg, 2: adaptive). */
static em_status pool_backward_run(const char *fn, const em_tensor *gy, const int64_t *xshape,
                                   const em_pool_args *a, int which, em_tensor **out) {
    const em_backend_ops *ops = gy->st->ops;
    EMI_TRY(emi_need(fn, ops,
                     which == 1 ? ops->avg_pool2d_backward != NULL
                                : ops->adaptive_avg_pool2d_backward != NULL,
                     which == 1 ? "avg_pool2d_backward" : "adaptive_avg_pool2d_backward"));
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, &gy, 1, &ad));
    em_tensor *gx;
    EMI_TRY(emi_empty(fn, gy->dev, gy->v.dtype, xshape, 4, &gx));
    em_status s = EM_OK;
    if (emi_numel(xshape, 4) > 0) {
        em_view gv;
        em_tensor *tmp = NULL;
        s = emi_input_view(fn, gy, &gv, &tmp);
        if (s == EM_OK)
            s = which == 1 ? ops->avg_pool2d_backward(gy->st->ctx, &gx->v, &gv, a)
                           : ops->adaptive_avg_pool2d_backward(gy->st->ctx, &gx->v, &gv);
        em_tensor_release(tmp);
    }
    if (s == EM_OK) s = emi_ad_end(&ad, NULL, &gy, 1, gx, NULL, 0);
    if (s != EM_OK) {
        em_tensor_release(gx);
        return s;
    }
    *out = gx;
    return EM_OK;
}

em_status emi_avg_pool2d_backward(const em_tensor *gy, const int64_t xshape[4],
                                  const em_pool_params *p, em_tensor **out) {
    static const char fn[] = "emi_avg_pool2d_backward";
    EMI_TRY(pool_check_gy(fn, gy, xshape, out));
    em_pool_args a;
    int64_t oshape[4];
    EMI_TRY(pool_resolve(fn, xshape, p, false, &a, oshape));
    if (oshape[2] != gy->v.shape[2] || oshape[3] != gy->v.shape[3])
        return emi_fail(EM_ERR_SHAPE, "%s: gy is %lld x %lld, the pooling gives %lld x %lld",
                        fn, (long long)gy->v.shape[2], (long long)gy->v.shape[3],
                        (long long)oshape[2], (long long)oshape[3]);
    return pool_backward_run(fn, gy, xshape, &a, 1, out);
}

em_status emi_adaptive_avg_pool2d_backward(const em_tensor *gy, const int64_t xshape[4],
                                           em_tensor **out) {
    static const char fn[] = "emi_adaptive_avg_pool2d_backward";
    EMI_TRY(pool_check_gy(fn, gy, xshape, out));
    const int64_t oh = gy->v.shape[2], ow = gy->v.shape[3];
    if (oh < 1 || ow < 1 || oh > POOL_PARAM_MAX || ow > POOL_PARAM_MAX ||
        xshape[2] > INT64_MAX / 4 / (oh + 1) || xshape[3] > INT64_MAX / 4 / (ow + 1))
        return emi_fail(EM_ERR_SHAPE, "%s: invalid output size", fn);
    return pool_backward_run(fn, gy, xshape, NULL, 2, out);
}
