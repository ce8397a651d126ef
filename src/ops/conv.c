/*
 * conv.c — convolutions: em_conv1d, em_conv2d, em_conv_transpose2d. Shapes, errors and output
 * sizes follow PyTorch (torch.nn.functional.conv1d / conv2d / conv_transpose2d, batched NCHW
 * inputs). conv1d runs as conv2d with H = 1 through size-1 views. Each records itself for
 * autodiff (conv1d with its own rule, since its views are internal); emi_conv2d_weight_grad is
 * the internal entry point of the weight-gradient kernel that the rules use.
 */
#include "autodiff/rules/rules.h"

/* Parameters beyond this are refused (EM_ERR_ARG), which keeps the size arithmetic in int64. */
#define CONV_PARAM_MAX ((int64_t)1 << 31)

em_conv_params em_conv_params_default(void) {
    em_conv_params p = {{1, 1}, {0, 0}, {1, 1}, {0, 0}, 1};
    return p;
}

/** Checks the tensors of a convolution: present, float, one dtype, one device, and ranks. */
static em_status conv_check_tensors(const char *fn, const em_tensor *x, const em_tensor *w,
                                    const em_tensor *bias, int rank, em_tensor **out) {
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_tensor(fn, "weight", w));
    EMI_TRY(emi_check_float(fn, x));
    EMI_TRY(emi_check_same_dtype(fn, x, w));
    EMI_TRY(emi_check_same_device(fn, x, w));
    if (bias) {
        EMI_TRY(emi_check_same_dtype(fn, x, bias));
        EMI_TRY(emi_check_same_device(fn, x, bias));
    }
    const char *dims = rank == 3 ? "[N, C, L]" : "[N, C, H, W]";
    if (x->v.rank != rank)
        return emi_fail(EM_ERR_SHAPE, "%s: expected x of rank %d %s, got rank %d", fn, rank, dims,
                        x->v.rank);
    if (w->v.rank != rank)
        return emi_fail(EM_ERR_SHAPE, "%s: expected a weight of rank %d, got rank %d", fn, rank,
                        w->v.rank);
    if (bias && bias->v.rank != 1)
        return emi_fail(EM_ERR_SHAPE, "%s: expected a 1-d bias, got rank %d", fn, bias->v.rank);
    for (int d = 1; d < rank; d++)
        if (x->v.shape[d] == 0)
            return emi_fail(EM_ERR_SHAPE, "%s: x has a zero-sized non-batch dim (dim %d)", fn, d);
    for (int d = 2; d < rank; d++)
        if (w->v.shape[d] == 0)
            return emi_fail(EM_ERR_SHAPE, "%s: the kernel has a zero-sized dim (dim %d)", fn, d);
    return EM_OK;
}

/** Resolves public params into kernel args. nd = 1 takes index 0 of each array into the W
 *  slot and gives H the identity settings; nd = 2 takes both. NULL p means the defaults. */
static em_status conv_resolve(const char *fn, const em_conv_params *p, int nd, bool transposed,
                              em_conv_args *a) {
    em_conv_params def = em_conv_params_default();
    if (!p) p = &def;
    for (int i = 0; i < nd; i++) {
        const char *ax = nd == 1 ? "" : (i == 0 ? " (H)" : " (W)");
        if (p->stride[i] < 1 || p->stride[i] > CONV_PARAM_MAX)
            return emi_fail(EM_ERR_ARG, "%s: stride%s must be in 1..2^31, got %lld", fn, ax,
                            (long long)p->stride[i]);
        if (p->dilation[i] < 1 || p->dilation[i] > CONV_PARAM_MAX)
            return emi_fail(EM_ERR_ARG, "%s: dilation%s must be in 1..2^31, got %lld", fn, ax,
                            (long long)p->dilation[i]);
        if (p->padding[i] < 0 || p->padding[i] > CONV_PARAM_MAX)
            return emi_fail(EM_ERR_ARG, "%s: padding%s must be in 0..2^31, got %lld", fn, ax,
                            (long long)p->padding[i]);
        if (transposed) {
            int64_t op = p->output_padding[i];
            if (op < 0 || (op >= p->stride[i] && op >= p->dilation[i]))
                return emi_fail(EM_ERR_ARG,
                                "%s: output_padding%s (%lld) must be >= 0 and smaller than "
                                "either stride (%lld) or dilation (%lld)",
                                fn, ax, (long long)op, (long long)p->stride[i],
                                (long long)p->dilation[i]);
        }
    }
    if (p->groups < 1 || p->groups > CONV_PARAM_MAX)
        return emi_fail(EM_ERR_ARG, "%s: groups must be >= 1, got %lld", fn, (long long)p->groups);
    int src = 0;
    for (int i = 0; i < 2; i++) {
        bool id = nd == 1 && i == 0; /* conv1d's H axis */
        a->stride[i] = id ? 1 : p->stride[src];
        a->padding[i] = id ? 0 : p->padding[src];
        a->dilation[i] = id ? 1 : p->dilation[src];
        a->output_padding[i] = id || !transposed ? 0 : p->output_padding[src];
        if (!id) src++;
    }
    a->groups = p->groups;
    return EM_OK;
}

/** Checks channels and computes the output shape of a 4-d (N, C, H, W) convolution; spatial
 *  messages speak of "length" for conv1d (nd = 1). */
static em_status conv_shape(const char *fn, const em_tensor *x, const em_tensor *w,
                            const em_tensor *bias, const em_conv_args *a, bool transposed,
                            int nd, int64_t oshape[4]) {
    const int64_t *xs = x->v.shape, *ws = w->v.shape, G = a->groups;
    int64_t O;
    if (!transposed) {
        if (ws[0] % G != 0)
            return emi_fail(EM_ERR_SHAPE,
                            "%s: groups=%lld does not divide the weight's %lld output channels",
                            fn, (long long)G, (long long)ws[0]);
        if (ws[1] * G != xs[1])
            return emi_fail(EM_ERR_SHAPE,
                            "%s: groups=%lld and a weight of %lld input channels per group "
                            "expect x with %lld channels, got %lld",
                            fn, (long long)G, (long long)ws[1], (long long)(ws[1] * G),
                            (long long)xs[1]);
        O = ws[0];
    } else {
        if (ws[0] != xs[1])
            return emi_fail(EM_ERR_SHAPE,
                            "%s: the weight has %lld input channels (dim 0), x has %lld", fn,
                            (long long)ws[0], (long long)xs[1]);
        if (xs[1] % G != 0)
            return emi_fail(EM_ERR_SHAPE, "%s: groups=%lld does not divide x's %lld channels",
                            fn, (long long)G, (long long)xs[1]);
        O = ws[1] * G;
    }
    if (bias && bias->v.shape[0] != O)
        return emi_fail(EM_ERR_SHAPE, "%s: expected a bias of %lld elements, got %lld", fn,
                        (long long)O, (long long)bias->v.shape[0]);
    oshape[0] = xs[0];
    oshape[1] = O;
    for (int i = 0; i < 2; i++) {
        const int64_t in = xs[2 + i], k = ws[2 + i];
        const char *ax = nd == 1 ? "length" : (i == 0 ? "height" : "width");
        /* Dims and params are < 2^59 and <= 2^31: guard the products against overflow. */
        const int64_t lim = INT64_MAX / 8;
        if (k - 1 > lim / a->dilation[i] || (transposed && in - 1 > lim / a->stride[i]))
            return emi_fail(EM_ERR_SHAPE, "%s: the output %s overflows", fn, ax);
        const int64_t ek = a->dilation[i] * (k - 1) + 1; /* the dilated kernel's extent */
        int64_t o;
        if (!transposed) {
            const int64_t padded = in + 2 * a->padding[i];
            if (padded < ek)
                return emi_fail(EM_ERR_SHAPE,
                                "%s: the padded input %s (%lld) is smaller than the dilated "
                                "kernel (%lld)",
                                fn, ax, (long long)padded, (long long)ek);
            o = (padded - ek) / a->stride[i] + 1;
        } else {
            o = (in - 1) * a->stride[i] - 2 * a->padding[i] + ek + a->output_padding[i];
            if (o < 1)
                return emi_fail(EM_ERR_SHAPE, "%s: the output %s would be %lld (non-positive)",
                                fn, ax, (long long)o);
        }
        oshape[2 + i] = o;
    }
    return EM_OK;
}

/** Runs a validated 4-d convolution: allocates the output and routes to the backend slot. */
static em_status conv_run(const char *fn, const em_tensor *x, const em_tensor *w,
                          const em_tensor *bias, const em_conv_args *a, bool transposed,
                          const int64_t oshape[4], em_tensor **out) {
    const em_backend_ops *ops = x->st->ops;
    EMI_TRY(emi_need(fn, ops, transposed ? ops->conv_transpose2d != NULL : ops->conv2d != NULL,
                     transposed ? "conv_transpose2d" : "conv2d"));
    const em_tensor *ins[3] = {x, w, bias};
    em_tensor *o;
    EMI_TRY(emi_empty(fn, emi_result_device(ins, bias ? 3 : 2), x->v.dtype, oshape, 4, &o));
    if (emi_numel(oshape, 4) == 0) {
        *out = o;
        return EM_OK;
    }
    em_view xv, wv, bv;
    em_tensor *tx = NULL, *tw = NULL, *tb = NULL;
    em_status s = emi_input_view(fn, x, &xv, &tx);
    if (s == EM_OK) s = emi_input_view(fn, w, &wv, &tw);
    if (s == EM_OK && bias) s = emi_input_view(fn, bias, &bv, &tb);
    if (s == EM_OK)
        s = transposed ? ops->conv_transpose2d(x->st->ctx, &o->v, &xv, &wv, bias ? &bv : NULL, a)
                       : ops->conv2d(x->st->ctx, &o->v, &xv, &wv, bias ? &bv : NULL, a);
    em_tensor_release(tx);
    em_tensor_release(tw);
    em_tensor_release(tb);
    if (s != EM_OK) {
        em_tensor_release(o);
        return s;
    }
    *out = o;
    return EM_OK;
}

/** A view of a rank-3 tensor with a size-1 dim inserted at 2 ([N, C, L] -> [N, C, 1, L]). */
static em_status conv_lift(const em_tensor *t, em_tensor **out) {
    int64_t shape[4] = {t->v.shape[0], t->v.shape[1], 1, t->v.shape[2]};
    int64_t strides[4] = {t->v.strides[0], t->v.strides[1], t->v.strides[2] * t->v.shape[2],
                          t->v.strides[2]};
    return emi_view_tensor(t, shape, strides, 4, t->v.offset, out);
}

/** The params a rule records: the public params as given (defaults for NULL) and the args. */
static emi_rule_conv_params conv_rule_params(const em_conv_params *p, const em_conv_args *a) {
    emi_rule_conv_params rp;
    memset(&rp, 0, sizeof rp);
    rp.p = p ? *p : em_conv_params_default();
    rp.a = *a;
    return rp;
}

/** Runs a checked 2-d convolution and records it for autodiff with `rule`. */
static em_status conv_record(const char *fn, const em_tensor *x, const em_tensor *w,
                             const em_tensor *bias, const em_conv_params *p,
                             const em_conv_args *a, bool transposed, const int64_t oshape[4],
                             const emi_ad_rule *rule, em_tensor **out) {
    const em_tensor *ins[3] = {x, w, bias};
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, ins, 3, &ad));
    em_tensor *o;
    EMI_TRY(conv_run(fn, x, w, bias, a, transposed, oshape, &o));
    const emi_rule_conv_params rp = conv_rule_params(p, a);
    em_status s = emi_ad_end(&ad, rule, ins, 3, o, &rp, sizeof rp);
    if (s != EM_OK) {
        em_tensor_release(o);
        return s;
    }
    *out = o;
    return EM_OK;
}

em_status em_conv2d(const em_tensor *x, const em_tensor *w, const em_tensor *bias,
                    const em_conv_params *p, em_tensor **out) {
    static const char fn[] = "em_conv2d";
    EMI_TRY(conv_check_tensors(fn, x, w, bias, 4, out));
    em_conv_args a;
    EMI_TRY(conv_resolve(fn, p, 2, false, &a));
    int64_t oshape[4];
    EMI_TRY(conv_shape(fn, x, w, bias, &a, false, 2, oshape));
    return conv_record(fn, x, w, bias, p, &a, false, oshape, &emi_rule_conv2d, out);
}

em_status em_conv_transpose2d(const em_tensor *x, const em_tensor *w, const em_tensor *bias,
                              const em_conv_params *p, em_tensor **out) {
    static const char fn[] = "em_conv_transpose2d";
    EMI_TRY(conv_check_tensors(fn, x, w, bias, 4, out));
    em_conv_args a;
    EMI_TRY(conv_resolve(fn, p, 2, true, &a));
    int64_t oshape[4];
    EMI_TRY(conv_shape(fn, x, w, bias, &a, true, 2, oshape));
    return conv_record(fn, x, w, bias, p, &a, true, oshape, &emi_rule_conv_transpose2d, out);
}

em_status em_conv1d(const em_tensor *x, const em_tensor *w, const em_tensor *bias,
                    const em_conv_params *p, em_tensor **out) {
    static const char fn[] = "em_conv1d";
    EMI_TRY(conv_check_tensors(fn, x, w, bias, 3, out));
    em_conv_args a;
    EMI_TRY(conv_resolve(fn, p, 1, false, &a));
    const em_tensor *ins[3] = {x, w, bias};
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, ins, 3, &ad));
    em_tensor *x4 = NULL, *w4 = NULL, *o4 = NULL;
    em_status s = conv_lift(x, &x4);
    if (s == EM_OK) s = conv_lift(w, &w4);
    int64_t oshape[4];
    if (s == EM_OK) s = conv_shape(fn, x4, w4, bias, &a, false, 1, oshape);
    if (s == EM_OK) s = conv_run(fn, x4, w4, bias, &a, false, oshape, &o4);
    em_tensor_release(x4);
    em_tensor_release(w4);
    if (s != EM_OK) return s;
    /* Drop the size-1 H dim again: [N, O, 1, L'] -> [N, O, L']. */
    const int64_t shape[3] = {oshape[0], oshape[1], oshape[3]};
    const int64_t strides[3] = {o4->v.strides[0], o4->v.strides[1], o4->v.strides[3]};
    em_tensor *o;
    s = emi_view_tensor(o4, shape, strides, 3, o4->v.offset, &o);
    em_tensor_release(o4);
    if (s != EM_OK) return s;
    const emi_rule_conv_params rp = conv_rule_params(p, &a);
    s = emi_ad_end(&ad, &emi_rule_conv1d, ins, 3, o, &rp, sizeof rp);
    if (s != EM_OK) {
        em_tensor_release(o);
        return s;
    }
    *out = o;
    return EM_OK;
}

/* ---- the weight gradient (internal: the autodiff rules call it) ---- */

em_status emi_conv2d_weight_grad(const em_tensor *x, const em_tensor *gy, const int64_t kernel[2],
                                 const em_conv_args *a, em_tensor **out) {
    static const char fn[] = "emi_conv2d_weight_grad";
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_tensor(fn, "gy", gy));
    if (!kernel || !a) return emi_fail(EM_ERR_ARG, "%s: kernel or args is NULL", fn);
    EMI_TRY(emi_check_float(fn, x));
    EMI_TRY(emi_check_same_dtype(fn, x, gy));
    EMI_TRY(emi_check_same_device(fn, x, gy));
    if (x->ad || gy->ad)
        return emi_fail(EM_ERR_UNSUPPORTED, "%s: tracked inputs (no second derivatives)", fn);
    if (x->v.rank != 4 || gy->v.rank != 4)
        return emi_fail(EM_ERR_SHAPE, "%s: expected x and gy of rank 4, got %d and %d", fn,
                        x->v.rank, gy->v.rank);
    const int64_t G = a->groups, C = x->v.shape[1], O = gy->v.shape[1];
    if (G < 1 || C % G != 0 || O % G != 0 || x->v.shape[0] != gy->v.shape[0])
        return emi_fail(EM_ERR_SHAPE,
                        "%s: x [%lld, %lld, ...] and gy [%lld, %lld, ...] do not fit groups=%lld",
                        fn, (long long)x->v.shape[0], (long long)C, (long long)gy->v.shape[0],
                        (long long)O, (long long)G);
    for (int i = 0; i < 2; i++) {
        if (kernel[i] < 1 || a->stride[i] < 1 || a->dilation[i] < 1 || a->padding[i] < 0 ||
            kernel[i] > CONV_PARAM_MAX || a->stride[i] > CONV_PARAM_MAX ||
            a->dilation[i] > CONV_PARAM_MAX || a->padding[i] > CONV_PARAM_MAX)
            return emi_fail(EM_ERR_ARG, "%s: invalid kernel size or args", fn);
        const int64_t padded = x->v.shape[2 + i] + 2 * a->padding[i];
        const int64_t ek = a->dilation[i] * (kernel[i] - 1) + 1;
        const int64_t o = padded < ek ? -1 : (padded - ek) / a->stride[i] + 1;
        if (o != gy->v.shape[2 + i])
            return emi_fail(EM_ERR_SHAPE, "%s: gy has %lld positions along dim %d, the "
                            "convolution gives %lld", fn, (long long)gy->v.shape[2 + i], 2 + i,
                            (long long)o);
    }
    const em_backend_ops *ops = x->st->ops;
    EMI_TRY(emi_need(fn, ops, ops->conv2d_weight_grad != NULL, "conv2d_weight_grad"));
    const int64_t wshape[4] = {O, C / G, kernel[0], kernel[1]};
    const em_tensor *ins[2] = {x, gy};
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, ins, 2, &ad));
    em_tensor *gw;
    EMI_TRY(emi_empty(fn, emi_result_device(ins, 2), x->v.dtype, wshape, 4, &gw));
    em_status s = EM_OK;
    if (emi_numel(wshape, 4) > 0) {
        em_view xv, gv;
        em_tensor *tx = NULL, *tg = NULL;
        s = emi_input_view(fn, x, &xv, &tx);
        if (s == EM_OK) s = emi_input_view(fn, gy, &gv, &tg);
        if (s == EM_OK) s = ops->conv2d_weight_grad(x->st->ctx, &gw->v, &xv, &gv, a);
        em_tensor_release(tx);
        em_tensor_release(tg);
    }
    if (s == EM_OK) s = emi_ad_end(&ad, NULL, ins, 2, gw, NULL, 0);
    if (s != EM_OK) {
        em_tensor_release(gw);
        return s;
    }
    *out = gw;
    return EM_OK;
}
