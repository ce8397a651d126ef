/*
 * quant.c — quantized tensors: the schemes (ember.h's em_quant_kind), quantize and
 * dequantize, tensors from and to their bytes, block-preserving views and copies, and the
 * matrix product with a quantized operand (backend.h's quantize / dequantize / qmatmul
 * slots do the arithmetic).
 *
 * A per-tensor quantized tensor is an int8 tensor with a scale and zero point: its view is
 * an ordinary EM_I8 view and every layout op works on it as on any int8 tensor. A block
 * tensor's view counts logical elements but its buffer holds blocks of 32 (backend.h tells
 * how a view addresses them); the core keeps its views block-preserving (emi_qview_check)
 * and moves its bytes through `copy` on EM_U8 views of the blocks (qs_bytes_view).
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autodiff/autodiff.h"
#include "autodiff/rules/rules.h"

/* ---- schemes ---- */

static bool qs_is_block(em_quant_kind k) { return k == EM_QK_BLOCK || k == EM_QK_BLOCK_MIN; }

size_t em_quant_block_bytes(const em_quant_scheme *s) {
    if (!s) return 0;
    const bool q8 = s->storage == EM_Q8, q4 = s->storage == EM_Q4;
    const size_t sb = s->scale_dtype == EM_F16 ? 2 : s->scale_dtype == EM_F32 ? 4 : 0;
    switch (s->kind) {
    case EM_QK_AFFINE: return q8 || q4 ? 1 : 0;
    case EM_QK_SYMMETRIC: return q8 ? 1 : 0;
    case EM_QK_BLOCK: return !sb ? 0 : q8 ? sb + 32 : q4 ? sb + 16 : 0;
    case EM_QK_BLOCK_MIN: return sb && q4 ? 2 * sb + 16 : 0;
    }
    return 0;
}

static const char *qs_kind_name(em_quant_kind k) {
    switch (k) {
    case EM_QK_AFFINE: return "affine";
    case EM_QK_SYMMETRIC: return "symmetric";
    case EM_QK_BLOCK: return "block";
    case EM_QK_BLOCK_MIN: return "block_min";
    }
    return "?";
}

/* Checks the scheme a caller asks for and normalizes it into *n (block 32, axis set by the
 * caller later, per-tensor fields cleared for block kinds and the reverse). */
static em_status qs_check_scheme(const char *fn, const em_quant_scheme *s, em_quant_scheme *n) {
    if (!s) return emi_fail_null(fn, "scheme");
    if (s->storage != EM_Q8 && s->storage != EM_Q4)
        return emi_fail(EM_ERR_DTYPE, "%s: the scheme's storage must be q8 or q4, got %s", fn,
                        em_dtype_name(s->storage));
    if ((unsigned)s->kind > EM_QK_BLOCK_MIN)
        return emi_fail(EM_ERR_ARG, "%s: unknown quantization kind %d", fn, (int)s->kind);
    if (qs_is_block(s->kind)) {
        if (s->scale_dtype != EM_F32 && s->scale_dtype != EM_F16)
            return emi_fail(EM_ERR_DTYPE, "%s: block scales are f32 or f16, got %s", fn,
                            em_dtype_name(s->scale_dtype));
        if (s->block != 0 && s->block != EM_QBLOCK)
            return emi_fail(EM_ERR_ARG, "%s: blocks hold %d elements, got block = %d", fn,
                            EM_QBLOCK, (int)s->block);
    }
    if ((s->kind == EM_QK_SYMMETRIC && s->storage != EM_Q8) ||
        (s->kind == EM_QK_BLOCK_MIN && s->storage != EM_Q4))
        return emi_fail(EM_ERR_DTYPE, "%s: %s %s is not a scheme (symmetric is q8 only, "
                        "block_min q4 only)", fn, em_dtype_name(s->storage),
                        qs_kind_name(s->kind));
    *n = (em_quant_scheme){.storage = s->storage, .kind = s->kind};
    if (qs_is_block(s->kind)) {
        n->scale_dtype = s->scale_dtype;
        n->block = EM_QBLOCK;
    } else {
        n->scale = s->scale;
        n->zero_point = s->zero_point;
    }
    return EM_OK;
}

/* Checks the shape for the scheme (block kinds: rank >= 1, last dim % 32 == 0) and gives the
 * bytes of its contiguous layout. */
static em_status qs_nbytes(const char *fn, const em_quant_scheme *n, const int64_t *shape,
                           int rank, size_t *out) {
    int64_t numel;
    EMI_TRY(emi_check_shape(fn, shape, rank, &numel));
    if (!qs_is_block(n->kind)) {
        *out = (size_t)numel;
        return EM_OK;
    }
    if (rank == 0)
        return emi_fail(EM_ERR_SHAPE, "%s: a block scheme needs a dim to run along (0-d given)",
                        fn);
    if (shape[rank - 1] % EM_QBLOCK != 0) {
        char sb[160];
        return emi_fail(EM_ERR_SHAPE, "%s: blocks of %d run along the last dim, whose size %lld "
                        "(shape %s) is not a multiple of %d", fn, EM_QBLOCK,
                        (long long)shape[rank - 1], emi_shape_str(shape, rank, sb, sizeof sb),
                        EM_QBLOCK);
    }
    *out = (size_t)(numel / EM_QBLOCK) * em_quant_block_bytes(n);
    return EM_OK;
}

em_status em_quant_nbytes(const em_quant_scheme *scheme, const int64_t *shape, int rank,
                          size_t *out) {
    static const char fn[] = "em_quant_nbytes";
    EMI_TRY(emi_check_out(fn, out));
    em_quant_scheme n = {0};
    EMI_TRY(qs_check_scheme(fn, scheme, &n));
    return qs_nbytes(fn, &n, shape, rank, out);
}

size_t emi_data_bytes(const em_tensor *t) {
    const int64_t numel = emi_numel(t->v.shape, t->v.rank);
    if (!emi_qblocked(t)) return (size_t)numel * emi_dtype_size(t->v.dtype);
    return (size_t)(numel / EM_QBLOCK) * em_quant_block_bytes(&t->scheme);
}

/* A fresh contiguous quantized tensor of scheme n (normalized) and shape, on dev. */
static em_status qs_empty(const char *fn, em_device dev, const em_quant_scheme *n,
                          const int64_t *shape, int rank, em_tensor **out) {
    em_tensor *t;
    if (!qs_is_block(n->kind)) {
        EMI_TRY(emi_empty(fn, dev, EM_I8, shape, rank, &t));
    } else {
        size_t bytes;
        EMI_TRY(qs_nbytes(fn, n, shape, rank, &bytes));
        const int64_t nb = (int64_t)bytes;
        EMI_TRY(emi_empty(fn, dev, EM_U8, &nb, 1, &t));
        t->v.rank = rank;
        for (int i = 0; i < rank; i++) t->v.shape[i] = shape[i];
        emi_contiguous_strides(shape, rank, t->v.strides);
        t->v.dtype = n->storage;
    }
    t->dtype = n->storage;
    t->scheme = *n;
    t->scheme.axis = qs_is_block(n->kind) ? rank - 1 : 0;
    t->dev = dev;
    *out = t;
    return EM_OK;
}

/* ---- block views ---- */

em_status emi_qview_check(em_tensor *t) {
    const em_view *v = &t->v;
    char sb[160], tb[160];
    const char *why = NULL;
    int axis = -1;
    if (v->offset % EM_QBLOCK) why = "it starts inside a block";
    for (int i = 0; !why && i < v->rank; i++) {
        if (v->shape[i] <= 1) continue;
        if (v->strides[i] == 1) {
            if (axis >= 0) why = "two dims run along the blocks";
            axis = i;
        } else if (v->strides[i] % EM_QBLOCK) {
            why = "a dim steps inside the blocks";
        }
    }
    if (!why && emi_numel(v->shape, v->rank) == 0) {
        /* nothing is read: keep the axis where it was (within the rank) */
        t->scheme.axis = t->scheme.axis < v->rank ? t->scheme.axis : v->rank - 1;
        return EM_OK;
    }
    if (!why && axis < 0) why = "no dim runs along the blocks";
    if (!why && v->shape[axis] % EM_QBLOCK) why = "the dim along the blocks is not a multiple of 32";
    if (why)
        return emi_fail(EM_ERR_UNSUPPORTED,
                        "a view of shape %s (strides %s) of a %s %s tensor would cut its blocks "
                        "of %d elements: %s (dequantize first)",
                        emi_shape_str(v->shape, v->rank, sb, sizeof sb),
                        emi_shape_str(v->strides, v->rank, tb, sizeof tb),
                        em_dtype_name(t->dtype), qs_kind_name(t->scheme.kind), EM_QBLOCK, why);
    t->scheme.axis = axis;
    return EM_OK;
}

/* v with its block axis moved last (*perm gets the order of dims taken). */
static em_view qs_axis_last(const em_view *v, int axis, int *perm) {
    em_view p = *v;
    int j = 0;
    for (int i = 0; i < v->rank; i++)
        if (i != axis) perm[j++] = i;
    perm[j] = axis;
    for (int i = 0; i < v->rank; i++) {
        p.shape[i] = v->shape[perm[i]];
        p.strides[i] = v->strides[perm[i]];
    }
    return p;
}

/* The EM_U8 view of the blocks of p (a block view with its axis last): [dims..., blocks, bb]. */
static em_status qs_bytes_view(const char *fn, const em_view *p, size_t bb, em_view *out) {
    if (p->rank + 1 > EM_MAX_RANK)
        return emi_fail(EM_ERR_UNSUPPORTED, "%s: a block tensor of rank %d cannot be copied (its "
                        "bytes need rank %d, above %d)", fn, p->rank, p->rank + 1, EM_MAX_RANK);
    em_view b = *p;
    const int r = p->rank;
    b.dtype = EM_U8;
    b.rank = r + 1;
    for (int i = 0; i < r - 1; i++) {
        b.shape[i] = p->shape[i];
        b.strides[i] = p->shape[i] > 1 ? p->strides[i] / EM_QBLOCK * (int64_t)bb : 0;
    }
    b.shape[r - 1] = p->shape[r - 1] / EM_QBLOCK;
    b.strides[r - 1] = (int64_t)bb;
    b.shape[r] = (int64_t)bb;
    b.strides[r] = 1;
    b.offset = p->offset / EM_QBLOCK * (int64_t)bb;
    *out = b;
    return EM_OK;
}

em_status emi_qclone(const char *fn, const em_tensor *t, em_device dev, em_tensor **out) {
    const int r = t->v.rank, axis = t->scheme.axis;
    int perm[EM_MAX_RANK];
    const em_view p = qs_axis_last(&t->v, axis, perm);
    const size_t bb = em_quant_block_bytes(&t->scheme);
    em_view src;
    EMI_TRY(qs_bytes_view(fn, &p, bb, &src));
    em_tensor *o;
    EMI_TRY(qs_empty(fn, dev, &t->scheme, p.shape, r, &o));
    em_status s = EM_OK;
    if (emi_numel(p.shape, r) > 0) {
        if (t->dev.backend == dev.backend && t->dev.index == dev.index) {
            em_view dst;
            s = qs_bytes_view(fn, &o->v, bb, &dst);
            if (s == EM_OK) s = o->st->ops->copy(o->st->ctx, &dst, &src);
        } else {
            em_tensor raw = *t; /* t's blocks seen as bytes (not a handle anyone holds) */
            raw.v = src;
            raw.dtype = EM_U8;
            void *data;
            size_t bytes;
            s = emi_read_all(&raw, &data, &bytes);
            if (s == EM_OK) {
                s = o->st->ops->write(o->st->ctx, o->st->buf, 0, data, bytes);
                free(data);
            }
        }
    }
    if (s != EM_OK) {
        em_tensor_release(o);
        return s;
    }
    /* back to t's dim order: o's contiguous axis-last strides, un-permuted */
    int64_t cs[EM_MAX_RANK];
    for (int i = 0; i < r; i++) cs[i] = o->v.strides[i];
    for (int i = 0; i < r; i++) {
        o->v.shape[perm[i]] = p.shape[i];
        o->v.strides[perm[i]] = cs[i];
    }
    o->scheme = t->scheme;
    *out = o;
    return EM_OK;
}

em_status emi_qread_all(const em_tensor *t, void **data, size_t *bytes) {
    int perm[EM_MAX_RANK];
    const em_view p = qs_axis_last(&t->v, t->scheme.axis, perm);
    em_tensor raw = *t;
    EMI_TRY(qs_bytes_view("em_tensor_to_data", &p, em_quant_block_bytes(&t->scheme), &raw.v));
    raw.dtype = EM_U8;
    return emi_read_all(&raw, data, bytes);
}

/* ---- quantize, dequantize ---- */

/* An untracked handle of x's value on x's inner device: ops on it record nothing and make
 * no leaves of an autodiff graph (what an op returns gets its node from emi_ad_end). */
static em_status qs_alias(const em_tensor *x, em_tensor **out) {
    EMI_TRY(emi_view_tensor(x, x->v.shape, x->v.strides, x->v.rank, x->v.offset, out));
    (*out)->dev.autodiff = false;
    (*out)->dev.checkpointing = EM_CKPT_NONE;
    (*out)->ckpt = EM_CKPT_NONE;
    return EM_OK;
}

/* dev without autodiff. */
static em_device qs_inner(em_device dev) {
    dev.autodiff = false;
    dev.checkpointing = EM_CKPT_NONE;
    return dev;
}

/* *out = the double value of 0-d tensor op(x) (em_min / em_max). */
static em_status qs_extreme(em_status (*op)(const em_tensor *, em_tensor **), const em_tensor *x,
                            double *out) {
    em_tensor *r;
    EMI_TRY(op(x, &r));
    em_status s = em_tensor_item(r, out);
    em_tensor_release(r);
    return s;
}

em_status em_quantize_as(const em_tensor *x, const em_quant_scheme *scheme, em_tensor **out) {
    static const char fn[] = "em_quantize_as";
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_out(fn, out));
    em_quant_scheme n = {0};
    EMI_TRY(qs_check_scheme(fn, scheme, &n));
    if (emi_kind(x->dtype) != EM_KIND_FLOAT)
        return emi_fail(EM_ERR_DTYPE, "%s: quantizes a float tensor, got %s (%s)", fn,
                        em_kind_name(emi_kind(x->dtype)), em_dtype_name(x->dtype));
    size_t bytes;
    EMI_TRY(qs_nbytes(fn, &n, x->v.shape, x->v.rank, &bytes));
    const em_backend_ops *ops = x->st->ops;
    EMI_TRY(emi_need(fn, ops, ops->quantize != NULL, "quantize"));
    const int64_t numel = emi_numel(x->v.shape, x->v.rank);
    em_tensor *xa = NULL, *xf = NULL, *o = NULL;
    em_status s = qs_alias(x, &xa);
    if (s == EM_OK) s = em_cast(xa, EM_F32, &xf);
    double lo = 0, hi = 0;
    if (s == EM_OK && numel > 0) {
        /* the range; NaN wins both (as PyTorch's max), infinities show at the ends */
        s = qs_extreme(em_min, xf, &lo);
        if (s == EM_OK) s = qs_extreme(em_max, xf, &hi);
        if (s == EM_OK && !(isfinite(lo) && isfinite(hi)))
            s = emi_fail(EM_ERR_ARG, "%s: the tensor holds a non-finite value (%s)", fn,
                         isnan(lo) || isnan(hi) ? "NaN" : "an infinity");
    }
    if (s == EM_OK && numel > 0 && qs_is_block(n.kind) && n.scale_dtype == EM_F16) {
        /* the largest d (and |m|) a block of this data can have must be an f16 */
        const double amax = fabs(lo) > fabs(hi) ? fabs(lo) : fabs(hi);
        const double big = n.storage == EM_Q8            ? amax / 127
                           : n.kind == EM_QK_BLOCK       ? amax / 8
                           : (hi - lo) / 15 > fabs(lo) ? (hi - lo) / 15 : fabs(lo);
        if (big > 65504.0)
            s = emi_fail(EM_ERR_ARG, "%s: the data's range (up to %g) needs block scales beyond "
                         "f16's (65504): use f32 scales", fn, amax);
    }
    if (s == EM_OK && !qs_is_block(n.kind)) {
        if (n.kind == EM_QK_SYMMETRIC) {
            double amax = fabs(lo) > fabs(hi) ? fabs(lo) : fabs(hi);
            float sc = (float)(amax / 127.0);
            n.scale = sc >= FLT_MIN ? sc : sc > 0 ? FLT_MIN : 1.0f; /* 1 / scale finite */
            n.zero_point = 0;
        } else {
            const double qmin = n.storage == EM_Q8 ? -128 : -8, qmax = n.storage == EM_Q8 ? 127 : 7;
            lo = lo < 0 ? lo : 0;
            hi = hi > 0 ? hi : 0;
            float sc = (float)((hi - lo) / (qmax - qmin));
            n.scale = sc >= FLT_MIN ? sc : sc > 0 ? FLT_MIN : 1.0f; /* 1 / scale finite */
            double zp = nearbyint(qmin - lo / (double)n.scale);
            n.zero_point = (int32_t)(zp < qmin ? qmin : zp > qmax ? qmax : zp);
        }
    }
    if (s == EM_OK) s = qs_empty(fn, x->dev, &n, x->v.shape, x->v.rank, &o);
    if (s == EM_OK && numel > 0) {
        em_view xv;
        em_tensor *tmp = NULL;
        s = emi_input_view(fn, xf, &xv, &tmp);
        if (s == EM_OK) s = ops->quantize(x->st->ctx, &o->v, &xv, &o->scheme);
        em_tensor_release(tmp);
    }
    if (s == EM_OK) s = emi_ad_created(o, x->dev);
    em_tensor_release(xa);
    em_tensor_release(xf);
    if (s != EM_OK) {
        em_tensor_release(o);
        return s;
    }
    *out = o;
    return EM_OK;
}

em_status em_quantize(const em_tensor *x, em_dtype storage, em_tensor **out) {
    static const char fn[] = "em_quantize";
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_out(fn, out));
    if (storage != EM_Q8 && storage != EM_Q4)
        return emi_fail(EM_ERR_DTYPE, "%s: storage must be q8 or q4, got %s", fn,
                        em_dtype_name(storage));
    const em_quant_scheme s = {.storage = storage, .kind = EM_QK_AFFINE};
    return em_quantize_as(x, &s, out);
}

em_status em_dequantize(const em_tensor *q, em_tensor **out) {
    static const char fn[] = "em_dequantize";
    EMI_TRY(emi_check_tensor(fn, "q", q));
    EMI_TRY(emi_check_out(fn, out));
    if (emi_kind(q->dtype) != EM_KIND_QUANTIZED)
        return emi_fail(EM_ERR_DTYPE, "%s: expected a quantized tensor, got %s (%s)", fn,
                        em_kind_name(emi_kind(q->dtype)), em_dtype_name(q->dtype));
    const em_backend_ops *ops = q->st->ops;
    EMI_TRY(emi_need(fn, ops, ops->dequantize != NULL, "dequantize"));
    em_tensor *o;
    EMI_TRY(emi_empty(fn, q->dev, EM_F32, q->v.shape, q->v.rank, &o));
    em_status s = EM_OK;
    if (emi_numel(q->v.shape, q->v.rank) > 0) {
        em_view qv = q->v;
        em_tensor *tmp = NULL;
        /* per-tensor views are int8 views: a backend without strided inputs gets them dense */
        if (!emi_qblocked(q)) s = emi_input_view(fn, q, &qv, &tmp);
        if (s == EM_OK) s = ops->dequantize(q->st->ctx, &o->v, &qv, &q->scheme);
        em_tensor_release(tmp);
    }
    if (s == EM_OK) s = emi_ad_created(o, q->dev);
    if (s != EM_OK) {
        em_tensor_release(o);
        return s;
    }
    *out = o;
    return EM_OK;
}

em_status em_tensor_from_quantized(const void *bytes, size_t nbytes, const em_quant_scheme *scheme,
                                   const int64_t *shape, int rank, em_device dev,
                                   em_tensor **out) {
    static const char fn[] = "em_tensor_from_quantized";
    EMI_TRY(emi_check_out(fn, out));
    em_quant_scheme n = {0};
    EMI_TRY(qs_check_scheme(fn, scheme, &n));
    if (!qs_is_block(n.kind)) {
        const int32_t qmin = n.storage == EM_Q8 ? -128 : -8, qmax = n.storage == EM_Q8 ? 127 : 7;
        if (!(isfinite(n.scale) && n.scale > 0))
            return emi_fail(EM_ERR_ARG, "%s: the scale must be finite and > 0, got %g", fn,
                            (double)n.scale);
        if (n.kind == EM_QK_SYMMETRIC ? n.zero_point != 0
                                      : (n.zero_point < qmin || n.zero_point > qmax))
            return emi_fail(EM_ERR_ARG, "%s: zero point %d is outside %s's range", fn,
                            (int)n.zero_point, em_dtype_name(n.storage));
    }
    size_t need;
    EMI_TRY(qs_nbytes(fn, &n, shape, rank, &need));
    if (nbytes != need)
        return emi_fail(EM_ERR_ARG, "%s: %zu bytes given, the layout holds %zu", fn, nbytes, need);
    if (need && !bytes) return emi_fail(EM_ERR_ARG, "%s: bytes is NULL", fn);
    EMI_TRY(emi_check_device(fn, dev));
    em_tensor *o;
    EMI_TRY(qs_empty(fn, dev, &n, shape, rank, &o));
    em_status s = need ? o->st->ops->write(o->st->ctx, o->st->buf, 0, bytes, need) : EM_OK;
    if (s == EM_OK) s = emi_ad_created(o, dev);
    if (s != EM_OK) {
        em_tensor_release(o);
        return s;
    }
    *out = o;
    return EM_OK;
}

/* ---- the matrix product with a quantized operand ---- */

/* An int8 operand of the int8 product: q8 with zero point 0; a block scheme's blocks along
 * the reduction (dim `kdim` of the operand). */
static bool qs_int8_operand(const em_tensor *t, int kdim) {
    const em_quant_scheme *s = &t->scheme;
    if (s->storage != EM_Q8) return false;
    if (s->kind == EM_QK_SYMMETRIC) return true;
    if (s->kind == EM_QK_AFFINE) return s->zero_point == 0;
    return s->axis == kdim;
}

/* a (float, or int8 quantized as a [.., K] with its blocks along K) @ b (quantized, 1-d or
 * 2-d): the qmatmul slot on [M, K] and [K, N] views, the result reshaped to numpy.matmul's. */
static em_status qs_matmul_slot(const char *fn, const em_tensor *a, const em_tensor *b,
                                em_tensor **out) {
    const bool qa = emi_kind(a->dtype) == EM_KIND_QUANTIZED;
    const int ra = a->v.rank, rb = b->v.rank;
    const int64_t K = a->v.shape[ra - 1], N = rb == 2 ? b->v.shape[1] : 1;
    const int64_t M = K ? emi_numel(a->v.shape, ra) / K : emi_numel(a->v.shape, ra - 1);
    int64_t fs[EM_MAX_RANK];
    int fr = 0;
    for (int i = 0; i < ra - 1; i++) fs[fr++] = a->v.shape[i];
    if (rb == 2) fs[fr++] = N;
    const em_dtype odt = qa ? EM_F32 : a->dtype;
    const em_backend_ops *ops = b->st->ops;
    EMI_TRY(emi_need(fn, ops, ops->qmatmul != NULL, "qmatmul"));
    if (M == 0 || N == 0 || K == 0) {
        em_tensor *z;
        EMI_TRY(emi_empty(fn, qs_inner(a->dev), odt, fs, fr, &z));
        em_status s = emi_numel(fs, fr) ? z->st->ops->fill(z->st->ctx, &z->v, 0.0) : EM_OK;
        if (s != EM_OK) {
            em_tensor_release(z);
            return s;
        }
        *out = z;
        return EM_OK;
    }
    /* b as [K, N] */
    em_view bv = b->v;
    em_quant_scheme bs = b->scheme;
    if (rb == 1) {
        bv.rank = 2;
        bv.shape[1] = 1;
        bv.strides[1] = 0;
        bs.axis = 0;
    }
    em_tensor *a2 = NULL, *af = NULL, *tmp = NULL, *o = NULL, *r = NULL;
    em_view av;
    em_status s = EM_OK;
    em_quant_scheme as = a->scheme;
    if (qa) {
        /* a 1-d or 2-d int8 tensor as [M, K] */
        av = a->v;
        if (ra == 1) {
            av.rank = 2;
            av.shape[0] = 1, av.shape[1] = K;
            av.strides[0] = 0, av.strides[1] = a->v.strides[0];
            as.axis = 1;
        }
        if (!emi_qblocked(a) && !(a->st->ops->caps & EM_CAP_STRIDED_INPUTS)) {
            s = em_contiguous(a, &tmp);
            if (s == EM_OK) {
                av = tmp->v;
                if (ra == 1) {
                    av.rank = 2;
                    av.shape[0] = 1, av.shape[1] = K;
                    av.strides[0] = 0, av.strides[1] = 1;
                }
            }
        }
    } else {
        const int64_t s2[2] = {M, K};
        s = qs_alias(a, &a2);
        if (s == EM_OK) s = em_cast(a2, EM_F32, &af);
        if (s == EM_OK) {
            em_tensor_release(a2);
            a2 = NULL;
            s = em_reshape(af, s2, 2, &a2);
        }
        if (s == EM_OK) s = emi_input_view(fn, a2, &av, &tmp);
    }
    const int64_t os[2] = {M, N};
    if (s == EM_OK) s = emi_empty(fn, qs_inner(a->dev), EM_F32, os, 2, &o);
    if (s == EM_OK) s = ops->qmatmul(b->st->ctx, &o->v, &av, qa ? &as : NULL, &bv, &bs);
    if (s == EM_OK) s = em_reshape(o, fs, fr, &r);
    em_tensor_release(o);
    o = NULL;
    if (s == EM_OK && odt != EM_F32) {
        s = em_cast(r, odt, &o);
        em_tensor_release(r);
        r = o;
        o = NULL;
    }
    em_tensor_release(a2);
    em_tensor_release(af);
    em_tensor_release(tmp);
    if (s != EM_OK) {
        em_tensor_release(r);
        return s;
    }
    *out = r;
    return EM_OK;
}

em_status emi_qmatmul(const char *fn, const em_tensor *a, const em_tensor *b, em_tensor **out) {
    EMI_TRY(emi_check_same_device(fn, a, b));
    const bool qa = emi_kind(a->dtype) == EM_KIND_QUANTIZED,
               qb = emi_kind(b->dtype) == EM_KIND_QUANTIZED;
    const int ra = a->v.rank, rb = b->v.rank;
    char sa[160], sb[160];
    emi_shape_str(a->v.shape, ra, sa, sizeof sa);
    emi_shape_str(b->v.shape, rb, sb, sizeof sb);
    if (ra == 0 || rb == 0)
        return emi_fail(EM_ERR_SHAPE, "%s: shapes %s and %s: a 0-d operand has no matrix dims",
                        fn, sa, sb);
    if ((qa && ra > 2) || (qb && rb > 2))
        return emi_fail(EM_ERR_UNSUPPORTED, "%s: shapes %s and %s: a quantized operand must be "
                        "1-d or 2-d (a weight); dequantize a batched one", fn, sa, sb);
    const em_tensor *f = qa ? b : a;
    if (!(qa && qb) && emi_kind(f->dtype) != EM_KIND_FLOAT)
        return emi_fail(EM_ERR_DTYPE, "%s: a quantized operand multiplies a float tensor, got "
                        "%s", fn, em_dtype_name(f->dtype));
    const int64_t ka = a->v.shape[ra - 1], kb = rb == 1 ? b->v.shape[0] : b->v.shape[rb - 2];
    if (ka != kb)
        return emi_fail(EM_ERR_SHAPE, "%s: shapes %s and %s do not match for a matrix product "
                        "(%lld != %lld)", fn, sa, sb, (long long)ka, (long long)kb);
    if (qa && qb) {
        if (!qs_int8_operand(a, ra - 1) || !qs_int8_operand(b, 0))
            return emi_fail(EM_ERR_UNSUPPORTED, "%s: the product of two quantized tensors is an "
                            "int8 one: both q8 with zero point 0 (symmetric, or blocks along the "
                            "reduction), got %s %s and %s %s; dequantize one", fn,
                            em_dtype_name(a->dtype), qs_kind_name(a->scheme.kind),
                            em_dtype_name(b->dtype), qs_kind_name(b->scheme.kind));
        return qs_matmul_slot(fn, a, b, out);
    }
    if (qa) {
        /* a @ b = (b^T @ a^T)^T: the quantized operand on the right, where the slot takes it */
        em_tensor *at = NULL, *bt = NULL, *p = NULL;
        em_status s = ra == 2 ? em_transpose(a, 0, 1, &at) : emi_share(a, &at);
        if (s == EM_OK) s = rb == 2 ? em_transpose(b, -1, -2, &bt) : emi_share(b, &bt);
        if (s == EM_OK) s = em_matmul(bt, at, &p);
        em_tensor_release(at);
        em_tensor_release(bt);
        if (s == EM_OK && ra == 2 && rb >= 2) {
            s = em_transpose(p, -1, -2, out);
            em_tensor_release(p);
            return s;
        }
        if (s == EM_OK) *out = p;
        return s;
    }
    /* float a @ quantized b: recorded as matmul, whose rule gives a's gradient as
     * g @ b^T, itself a product with a quantized operand (b stays a constant) */
    const em_tensor *ins[2] = {a, b};
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, ins, 2, &ad));
    em_tensor *o;
    EMI_TRY(qs_matmul_slot(fn, a, b, &o));
    em_status s = emi_ad_end(&ad, &emi_rule_matmul, ins, 2, o, NULL, 0);
    if (s != EM_OK) {
        em_tensor_release(o);
        return s;
    }
    *out = o;
    return EM_OK;
}
