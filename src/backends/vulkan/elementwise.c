/*
 * elementwise.c — the Vulkan backend's fill, arange, copy, unary, binary, binary_scalar and
 * where (shaders/elementwise.comp; one variant per dtype pair, the op a parameter).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "vk_internal.h"

/* The raw-word tag of an element size: bit-for-bit moves (same-dtype copy, where, fill). */
static const char *word_tag(em_dtype dt) {
    switch (em_dtype_size(dt)) {
    case 1: return "w8";
    case 2: return "w16";
    case 4: return "w32";
    default: return "w64";
    }
}

/* EM_OK when the device runs the dtypes of all nv views. */
static em_status ew_check(vk_dev *d, const char *op, const em_view *const *vs, int nv) {
    for (int i = 0; i < nv; i++) {
        em_status s = vk_check_dtype(d, op, vs[i]->dtype);
        if (s != EM_OK) return s;
    }
    return EM_OK;
}

/* The parameters with views vs[0..nv) (the rest zero). */
static void ew_params(vk_params *p, const em_view *const *vs, int nv) {
    memset(p, 0, sizeof *p);
    for (int i = 0; i < nv; i++) p->v[i] = vk_view(vs[i]);
}

/* A double as an int64 the way ref converts it (NaN -> 0, saturating). */
static int64_t sat_i64(double s) {
    return s != s                         ? 0
           : s >= 9.2233720368547758e18  ? INT64_MAX
           : s <= -9.2233720368547758e18 ? INT64_MIN
                                         : (int64_t)s;
}

/* A scalar k of elementwise.comp's SCALAR(k) for dtype dt: f32 (f16, bf16) in P.f, f64 and
 * i64 in P.d, the smaller ints in P.i[8 + k], clamped to the int32 range (their values are
 * int32s: a bound beyond that range clamps the same). */
static void set_scalar(vk_params *p, em_dtype dt, int k, double v, int64_t iv) {
    if (dt == EM_F64) vk_set_f64(p, k, v);
    else if (em_dtype_kind(dt) == EM_KIND_FLOAT) p->f[k] = (float)v;
    else if (dt == EM_I64) vk_set_i64(p, k, iv);
    else p->i[8 + k] = iv < INT32_MIN ? INT32_MIN : iv > INT32_MAX ? INT32_MAX : (int32_t)iv;
}

/* One element of dtype dt holding v, converted as ref converts a double (ref_st). */
static void elem_bits(em_dtype dt, double v, unsigned char *elem) {
    int64_t i = sat_i64(v);
    switch (dt) {
    case EM_F32: { float f = (float)v; memcpy(elem, &f, 4); break; }
    case EM_F64: memcpy(elem, &v, 8); break;
    case EM_F16: { uint16_t h = em_f32_to_f16((float)v); memcpy(elem, &h, 2); break; }
    case EM_BF16: { uint16_t h = em_f32_to_bf16((float)v); memcpy(elem, &h, 2); break; }
    case EM_BOOL: elem[0] = v != 0; break;
    case EM_I64: memcpy(elem, &i, 8); break;
    case EM_I32: { uint32_t u = (uint32_t)(uint64_t)i; memcpy(elem, &u, 4); break; }
    case EM_I16: { uint16_t u = (uint16_t)(uint64_t)i; memcpy(elem, &u, 2); break; }
    default: elem[0] = (uint8_t)(uint64_t)i; break;
    }
}

/* Records a copy command of bytes between two buffers (in order with the dispatches). */
static em_status ew_copy_cmd(vk_dev *d, vk_buf *dst, size_t doff, vk_buf *src, size_t soff,
                             size_t bytes) {
    pthread_mutex_lock(&d->lock);
    vk_batch *b;
    em_status s = vk_batch_current(d, &b);
    if (s == EM_OK) {
        vk_barrier(d, b->cb);
        VkBufferCopy r = {.srcOffset = soff, .dstOffset = doff, .size = bytes};
        vkCmdCopyBuffer(b->cb, src->buffer, dst->buffer, 1, &r);
    }
    pthread_mutex_unlock(&d->lock);
    return s;
}

em_status vk_fill(void *ctx, const em_view *out, double value) {
    vk_dev *d = ctx;
    em_status s = vk_check_dtype(d, "fill", out->dtype);
    if (s != EM_OK) return s;
    int64_t n = vk_numel(out);
    if (n == 0) return EM_OK;
    unsigned char elem[8] = {0};
    elem_bits(out->dtype, value, elem);
    size_t es = em_dtype_size(out->dtype);
    vk_params p;
    ew_params(&p, &out, 1);
    uint32_t w[2] = {0, 0};
    if (es == 1) w[0] = elem[0];
    else if (es == 2) { uint16_t h; memcpy(&h, elem, 2); w[0] = h; }
    else memcpy(w, elem, es);
    p.d[0] = w[0];
    p.d[1] = w[1];
    char name[32];
    snprintf(name, sizeof name, "fill.%s", word_tag(out->dtype));
    vk_buf *b = vk_vbuf(out);
    return vk_launch_1d(d, name, n, &p, 1, &b);
}

em_status vk_arange(void *ctx, const em_view *out, double start, double step) {
    vk_dev *d = ctx;
    em_status s = vk_check_dtype(d, "arange", out->dtype);
    if (s != EM_OK) return s;
    vk_params p;
    ew_params(&p, &out, 1);
    vk_set_f64(&p, 0, start);
    vk_set_f64(&p, 1, step);
    p.f[0] = (float)start;
    p.f[1] = (float)step;
    char name[32];
    /* in double where the device has it, as ref computes */
    snprintf(name, sizeof name, "%s.%s", d->f64 ? "arange64" : "arange", vk_dtype_tag(out->dtype));
    vk_buf *b = vk_vbuf(out);
    return vk_launch_1d(d, name, vk_numel(out), &p, 1, &b);
}

em_status vk_copy(void *ctx, const em_view *out, const em_view *in) {
    vk_dev *d = ctx;
    const em_view *vs[2] = {out, in};
    em_status s = ew_check(d, "copy", vs, 2);
    if (s != EM_OK) return s;
    int64_t n = vk_numel(out);
    if (n == 0) return EM_OK;
    vk_buf *bo = vk_vbuf(out), *bi = vk_vbuf(in);
    if (out->dtype == in->dtype && vk_contiguous(out) && vk_contiguous(in)) {
        size_t es = em_dtype_size(in->dtype);
        size_t so = (size_t)in->offset * es, doff = (size_t)out->offset * es, bytes = (size_t)n * es;
        if (bo == bi && so == doff) return EM_OK;
        /* a copy command's regions must not overlap: the kernel does those */
        if (bo != bi || so + bytes <= doff || doff + bytes <= so)
            return ew_copy_cmd(d, bo, doff, bi, so, bytes);
    }
    vk_params p;
    ew_params(&p, vs, 2);
    char name[48];
    if (out->dtype == in->dtype) snprintf(name, sizeof name, "move.%s", word_tag(in->dtype));
    else snprintf(name, sizeof name, "copy.%s.%s", vk_dtype_tag(in->dtype), vk_dtype_tag(out->dtype));
    vk_buf *bufs[2] = {bo, bi};
    return vk_launch_1d(d, name, n, &p, 2, bufs);
}

/* A clamp bound as int64, rounded inward (ceil for lo, floor for hi), saturating. */
static int64_t bound_to_int(double v, int lower) {
    v = lower ? ceil(v) : floor(v);
    if (v != v) return lower ? INT64_MIN : INT64_MAX;
    return sat_i64(v);
}

em_status vk_unary(void *ctx, em_unary_op op, const em_view *out, const em_view *in,
                   const double *params) {
    vk_dev *d = ctx;
    const em_view *vs[2] = {out, in};
    em_status s = ew_check(d, "unary", vs, 2);
    if (s != EM_OK) return s;
    double lo = 0, hi = 0, p2 = 0;
    int64_t ilo = INT64_MIN, ihi = INT64_MAX;
    if (op == EM_UN_CLAMP && params) {
        lo = params[0], hi = params[1];
        ilo = bound_to_int(lo, 1), ihi = bound_to_int(hi, 0);
    }
    if ((op == EM_UN_SOFTPLUS || op == EM_UN_NAN_TO_NUM) && params) {
        lo = params[0], hi = params[1];
        if (op == EM_UN_NAN_TO_NUM) p2 = params[2];
    }
    vk_params p;
    ew_params(&p, vs, 2);
    p.i[0] = (int32_t)op;
    set_scalar(&p, in->dtype, 0, lo, ilo);
    set_scalar(&p, in->dtype, 1, hi, ihi);
    set_scalar(&p, in->dtype, 2, p2, 0);
    char name[48];
    snprintf(name, sizeof name, "unary.%s.%s", vk_dtype_tag(in->dtype), vk_dtype_tag(out->dtype));
    vk_buf *bufs[2] = {vk_vbuf(out), vk_vbuf(in)};
    return vk_launch_1d_op(d, name, (int)op, vk_numel(out), &p, 2, bufs);
}

em_status vk_binary(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                    const em_view *b) {
    vk_dev *d = ctx;
    const em_view *vs[3] = {out, a, b};
    em_status s = ew_check(d, "binary", vs, 3);
    if (s != EM_OK) return s;
    vk_params p;
    ew_params(&p, vs, 3);
    p.i[0] = (int32_t)op;
    char name[48];
    snprintf(name, sizeof name, "binary.%s.%s", vk_dtype_tag(a->dtype), vk_dtype_tag(out->dtype));
    vk_buf *bufs[3] = {vk_vbuf(out), vk_vbuf(a), vk_vbuf(b)};
    return vk_launch_1d_op(d, name, (int)op, vk_numel(out), &p, 3, bufs);
}

em_status vk_binary_scalar(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                           double sv) {
    vk_dev *d = ctx;
    const em_view *vs[2] = {out, a};
    em_status s = ew_check(d, "binary_scalar", vs, 2);
    if (s != EM_OK) return s;
    vk_params p;
    ew_params(&p, vs, 2);
    p.i[0] = (int32_t)op;
    set_scalar(&p, a->dtype, 0, sv, sat_i64(sv));
    char name[48];
    snprintf(name, sizeof name, "bscalar.%s.%s", vk_dtype_tag(a->dtype), vk_dtype_tag(out->dtype));
    vk_buf *bufs[2] = {vk_vbuf(out), vk_vbuf(a)};
    return vk_launch_1d_op(d, name, (int)op, vk_numel(out), &p, 2, bufs);
}

em_status vk_where(void *ctx, const em_view *out, const em_view *cond, const em_view *a,
                   const em_view *b) {
    vk_dev *d = ctx;
    const em_view *vs[4] = {out, cond, a, b};
    em_status s = ew_check(d, "where", vs, 4);
    if (s != EM_OK) return s;
    vk_params p;
    ew_params(&p, vs, 4);
    char name[48];
    snprintf(name, sizeof name, "where.%s.%s", word_tag(out->dtype), vk_dtype_tag(cond->dtype));
    vk_buf *bufs[4] = {vk_vbuf(out), vk_vbuf(cond), vk_vbuf(a), vk_vbuf(b)};
    return vk_launch_1d(d, name, vk_numel(out), &p, 4, bufs);
}
