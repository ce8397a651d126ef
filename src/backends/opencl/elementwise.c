/*
 * elementwise.c — the OpenCL backend's fill, arange, copy, unary, binary, binary_scalar and
 * where (kernels in elementwise.cl, one program per dtype pair, the op an argument).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ocl_internal.h"

/* The int tag of an element size: bit-for-bit copies (same-dtype copy, where, fill). */
static const char *bits_tag(em_dtype dt) {
    switch (em_dtype_size(dt)) {
    case 1: return "u8";
    case 2: return "i16";
    case 4: return "i32";
    default: return "i64";
    }
}

/* A 1-d launch of kernel `k` of elementwise.cl with -DA=a -DO=o (-DC=c unless NULL or b8). */
static em_status ew_launch(ocl_dev *d, const char *k, const char *a, const char *o,
                           const char *c, int64_t n, int nargs, const ocl_arg *args) {
    char opts[64];
    if (c && strcmp(c, "b8") != 0)
        snprintf(opts, sizeof opts, "-DA=%s -DO=%s -DC=%s", a, o, c);
    else
        snprintf(opts, sizeof opts, "-DA=%s -DO=%s", a, o);
    size_t local = ocl_group_size(d), global = ocl_round_up((size_t)n, local);
    return ocl_launch(d, "elementwise", opts, k, 1, &global, &local, nargs, args);
}

/* EM_OK when the device runs the dtypes of all nv views. */
static em_status ew_check(ocl_dev *d, const char *op, const em_view *const *vs, int nv) {
    for (int i = 0; i < nv; i++) {
        em_status s = ocl_check_dtype(d, op, vs[i]->dtype);
        if (s != EM_OK) return s;
    }
    return EM_OK;
}

/* 1 when all nv views are contiguous. */
static cl_int all_contig(const em_view *const *vs, int nv) {
    for (int i = 0; i < nv; i++)
        if (!ocl_contiguous(vs[i])) return 0;
    return 1;
}

/* A scalar argument of the type elementwise.cl's `sct` has for dtype dt: the float
 * arithmetic type, or long for ints. For ints, v is already an int64 value. */
typedef union ew_scalar {
    float f;
    double d;
    cl_long l;
} ew_scalar;

static ocl_arg scalar_arg(em_dtype dt, double v, int64_t iv, ew_scalar *u) {
    if (dt == EM_F64) {
        u->d = v;
        return (ocl_arg){sizeof u->d, &u->d};
    }
    if (em_dtype_kind(dt) == EM_KIND_FLOAT) {
        u->f = (float)v;
        return (ocl_arg){sizeof u->f, &u->f};
    }
    u->l = iv;
    return (ocl_arg){sizeof u->l, &u->l};
}

/* A double as an int64 the way ref_binary_scalar converts it (NaN -> 0, saturating). */
static int64_t sat_i64(double s) {
    return s != s                         ? 0
           : s >= 9.2233720368547758e18  ? INT64_MAX
           : s <= -9.2233720368547758e18 ? INT64_MIN
                                         : (int64_t)s;
}

/* One element of dtype dt holding v, in host byte order, converted as every backend converts
 * a double (ember's rule, the one ref implements): floats round to the dtype, ints truncate
 * toward zero saturating at the int64 range (NaN -> 0) then wrap to their width, bool is
 * v != 0. */
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

em_status ocl_fill(void *ctx, const em_view *out, double value) {
    ocl_dev *d = ctx;
    em_status s = ocl_check_dtype(d, "fill", out->dtype);
    if (s != EM_OK) return s;
    int64_t n = ocl_numel(out);
    if (n == 0) return EM_OK;
    /* the element's bits, converted exactly as ref converts */
    unsigned char elem[8] = {0};
    elem_bits(out->dtype, value, elem);
    size_t es = em_dtype_size(out->dtype);
    if (ocl_contiguous(out)) {
        cl_int err = clEnqueueFillBuffer(d->queue, ocl_mem(out), elem, es,
                                         (size_t)out->offset * es, (size_t)n * es, 0, NULL, NULL);
        return err == CL_SUCCESS ? EM_OK : ocl_fail(err, "clEnqueueFillBuffer");
    }
    cl_long bits = 0;
    switch (es) {
    case 1: bits = (int8_t)elem[0]; break;
    case 2: { int16_t v; memcpy(&v, elem, 2); bits = v; break; }
    case 4: { int32_t v; memcpy(&v, elem, 4); bits = v; break; }
    default: memcpy(&bits, elem, 8); break;
    }
    cl_mem m = ocl_mem(out);
    ocl_view_arg ov = ocl_view(out);
    cl_long nn = n;
    cl_int contig = 0;
    ocl_arg args[] = {OCL_ARG(m), OCL_ARG(ov), OCL_ARG(nn), OCL_ARG(contig), OCL_ARG(bits)};
    const char *t = bits_tag(out->dtype);
    return ew_launch(d, "ew_fill", t, t, NULL, n, 5, args);
}

em_status ocl_arange(void *ctx, const em_view *out, double start, double step) {
    ocl_dev *d = ctx;
    em_status s = ocl_check_dtype(d, "arange", out->dtype);
    if (s != EM_OK) return s;
    int64_t n = ocl_numel(out);
    cl_mem m = ocl_mem(out);
    ocl_view_arg ov = ocl_view(out);
    cl_long nn = n;
    double ds = start, dt = step;
    float fs = (float)start, ft = (float)step;
    ocl_arg args[] = {OCL_ARG(m), OCL_ARG(ov), OCL_ARG(nn), d->fp64 ? OCL_ARG(ds) : OCL_ARG(fs),
                      d->fp64 ? OCL_ARG(dt) : OCL_ARG(ft)};
    const char *t = ocl_dtype_tag(out->dtype);
    return ew_launch(d, "ew_arange", t, t, NULL, n, 5, args);
}

em_status ocl_copy(void *ctx, const em_view *out, const em_view *in) {
    ocl_dev *d = ctx;
    const em_view *vs[2] = {out, in};
    em_status s = ew_check(d, "copy", vs, 2);
    if (s != EM_OK) return s;
    int64_t n = ocl_numel(out);
    if (n == 0) return EM_OK;
    cl_int contig = all_contig(vs, 2);
    if (contig && out->dtype == in->dtype) {
        size_t es = em_dtype_size(in->dtype);
        if (ocl_mem(out) == ocl_mem(in) && out->offset == in->offset) return EM_OK;
        cl_int err = clEnqueueCopyBuffer(d->queue, ocl_mem(in), ocl_mem(out),
                                         (size_t)in->offset * es, (size_t)out->offset * es,
                                         (size_t)n * es, 0, NULL, NULL);
        /* overlapping ranges of one buffer are not allowed: fall through to the kernel */
        if (err == CL_SUCCESS) return EM_OK;
        if (err != CL_MEM_COPY_OVERLAP) return ocl_fail(err, "clEnqueueCopyBuffer");
    }
    cl_mem mo = ocl_mem(out), mi = ocl_mem(in);
    ocl_view_arg ov = ocl_view(out), iv = ocl_view(in);
    cl_long nn = n;
    ocl_arg args[] = {OCL_ARG(mo), OCL_ARG(ov), OCL_ARG(mi), OCL_ARG(iv), OCL_ARG(nn),
                      OCL_ARG(contig)};
    const char *ta, *to;
    if (out->dtype == in->dtype)
        ta = to = bits_tag(in->dtype);
    else
        ta = ocl_dtype_tag(in->dtype), to = ocl_dtype_tag(out->dtype);
    return ew_launch(d, "ew_copy", ta, to, NULL, n, 6, args);
}

/* A clamp bound as int64, rounded inward (ceil for lo, floor for hi), saturating. */
static int64_t bound_to_int(double v, int lower) {
    v = lower ? ceil(v) : floor(v);
    if (v != v) return lower ? INT64_MIN : INT64_MAX;
    return sat_i64(v);
}

em_status ocl_unary(void *ctx, em_unary_op op, const em_view *out, const em_view *in,
                    const double *params) {
    ocl_dev *d = ctx;
    const em_view *vs[2] = {out, in};
    em_status s = ew_check(d, "unary", vs, 2);
    if (s != EM_OK) return s;
    int64_t n = ocl_numel(out);
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
    ew_scalar u0, u1, u2;
    cl_mem mo = ocl_mem(out), mi = ocl_mem(in);
    ocl_view_arg ov = ocl_view(out), iv = ocl_view(in);
    cl_long nn = n;
    cl_int contig = all_contig(vs, 2), cop = (cl_int)op;
    ocl_arg args[] = {OCL_ARG(mo), OCL_ARG(ov), OCL_ARG(mi), OCL_ARG(iv), OCL_ARG(nn),
                      OCL_ARG(contig), OCL_ARG(cop), scalar_arg(in->dtype, lo, ilo, &u0),
                      scalar_arg(in->dtype, hi, ihi, &u1), scalar_arg(in->dtype, p2, 0, &u2)};
    return ew_launch(d, "ew_unary", ocl_dtype_tag(in->dtype), ocl_dtype_tag(out->dtype), NULL, n,
                     10, args);
}

em_status ocl_binary(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                     const em_view *b) {
    ocl_dev *d = ctx;
    const em_view *vs[3] = {out, a, b};
    em_status s = ew_check(d, "binary", vs, 3);
    if (s != EM_OK) return s;
    int64_t n = ocl_numel(out);
    cl_mem mo = ocl_mem(out), ma = ocl_mem(a), mb = ocl_mem(b);
    ocl_view_arg ov = ocl_view(out), av = ocl_view(a), bv = ocl_view(b);
    cl_long nn = n;
    cl_int contig = all_contig(vs, 3), cop = (cl_int)op;
    ocl_arg args[] = {OCL_ARG(mo), OCL_ARG(ov), OCL_ARG(ma), OCL_ARG(av), OCL_ARG(mb),
                      OCL_ARG(bv), OCL_ARG(nn), OCL_ARG(contig), OCL_ARG(cop)};
    return ew_launch(d, "ew_binary", ocl_dtype_tag(a->dtype), ocl_dtype_tag(out->dtype), NULL, n,
                     9, args);
}

em_status ocl_binary_scalar(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                            double sv) {
    ocl_dev *d = ctx;
    const em_view *vs[2] = {out, a};
    em_status s = ew_check(d, "binary_scalar", vs, 2);
    if (s != EM_OK) return s;
    int64_t n = ocl_numel(out);
    ew_scalar u;
    cl_mem mo = ocl_mem(out), ma = ocl_mem(a);
    ocl_view_arg ov = ocl_view(out), av = ocl_view(a);
    cl_long nn = n;
    cl_int contig = all_contig(vs, 2), cop = (cl_int)op;
    ocl_arg args[] = {OCL_ARG(mo),     OCL_ARG(ov), OCL_ARG(ma),
                      OCL_ARG(av),     OCL_ARG(nn), OCL_ARG(contig),
                      OCL_ARG(cop),    scalar_arg(a->dtype, sv, sat_i64(sv), &u)};
    return ew_launch(d, "ew_binary_scalar", ocl_dtype_tag(a->dtype), ocl_dtype_tag(out->dtype),
                     NULL, n, 8, args);
}

em_status ocl_where(void *ctx, const em_view *out, const em_view *cond, const em_view *a,
                    const em_view *b) {
    ocl_dev *d = ctx;
    const em_view *vs[4] = {out, cond, a, b};
    em_status s = ew_check(d, "where", vs, 4);
    if (s != EM_OK) return s;
    int64_t n = ocl_numel(out);
    cl_mem mo = ocl_mem(out), mc = ocl_mem(cond), ma = ocl_mem(a), mb = ocl_mem(b);
    ocl_view_arg ov = ocl_view(out), cv = ocl_view(cond), av = ocl_view(a), bv = ocl_view(b);
    cl_long nn = n;
    cl_int contig = all_contig(vs, 4);
    ocl_arg args[] = {OCL_ARG(mo), OCL_ARG(ov), OCL_ARG(mc), OCL_ARG(cv), OCL_ARG(ma),
                      OCL_ARG(av), OCL_ARG(mb), OCL_ARG(bv), OCL_ARG(nn), OCL_ARG(contig)};
    const char *t = bits_tag(out->dtype);
    return ew_launch(d, "ew_where", t, t, ocl_dtype_tag(cond->dtype), n, 10, args);
}
