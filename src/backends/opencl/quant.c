/*
 * quant.c — the OpenCL backend's quantized tensors (kernels in quant.cl, one program for
 * every scheme): quantize, dequantize and qmatmul, with the arithmetic backend.h gives, so
 * that the bytes match ref's.
 *
 * qmatmul case (1), the int8 product: a first kernel writes a's rows as q8 blocks of 32 along
 * K into scratch memory (quantizing an f32 a on the fly, copying an int8 one), with each
 * block's scale and sum of q; a second one takes tiles of those rows and of b's integers
 * (read from its blocks, or from a per-tensor int8 view) through local memory and sums each
 * block's products in int. Case (2), b blocked along N: a tiled f32 product that decodes b's
 * blocks as it stages them (b is never dequantized whole).
 */
#include <string.h>

#include "backends/opencl/ocl_kern.h"

/* quant.cl's block forms */
enum { QF_Q8 = 0, QF_Q4 = 1, QF_Q4MIN = 2 };
/* quant.cl's qmm_prep_a modes, and qmm_dot's mode for a per-tensor b */
enum { QA_F32 = 0, QA_TENSOR = 1, QA_BLOCK = 2 };
#define QB_TENSOR (-1)

/** True for the block kinds. */
static bool q_blocked(const em_quant_scheme *s) {
    return s->kind == EM_QK_BLOCK || s->kind == EM_QK_BLOCK_MIN;
}

/** quant.cl's form of a block scheme. */
static cl_int q_form(const em_quant_scheme *s) {
    if (s->kind == EM_QK_BLOCK_MIN) return QF_Q4MIN;
    return s->storage == EM_Q4 ? QF_Q4 : QF_Q8;
}

/** Bytes of one stored scale of a block scheme. */
static cl_int q_scale_bytes(const em_quant_scheme *s) { return s->scale_dtype == EM_F16 ? 2 : 4; }

/** The work-group side of the qmatmul kernels: 16, or 8 where the device's groups are
 *  smaller (as matmul.c), and the build options that go with it. */
static size_t q_tile(ocl_dev *d, char *opts, size_t cap) {
    const size_t ts = ocl_group_size(d) >= 256 ? 16 : 8;
    snprintf(opts, cap, "-cl-fp32-correctly-rounded-divide-sqrt%s", ts == 16 ? "" : " -DQT=8");
    return ts;
}

/** A 1-d launch of n items of a quant.cl kernel. */
static em_status q_launch1(ocl_dev *d, const char *k, int64_t n, int nargs, const ocl_arg *args) {
    char opts[64];
    q_tile(d, opts, sizeof opts);
    size_t local = ocl_group_size(d), global = ocl_round_up((size_t)n, local);
    return ocl_launch(d, "quant", opts, k, 1, &global, &local, nargs, args);
}

em_status ocl_quantize(void *ctx, const em_view *out, const em_view *x,
                       const em_quant_scheme *s) {
    ocl_dev *d = ctx;
    cl_long n = ocl_numel(x);
    if (n == 0) return EM_OK;
    ocl_view_arg xv = ocl_view(x);
    cl_mem xm = ocl_mem(x), om = ocl_mem(out);
    if (!q_blocked(s)) {
        cl_long ooff = out->offset;
        cl_float inv = 1.0f / s->scale, zp = (cl_float)s->zero_point;
        cl_float qmin = s->storage == EM_Q4 ? -8.0f : s->kind == EM_QK_SYMMETRIC ? -127.0f : -128.0f;
        cl_float qmax = s->storage == EM_Q4 ? 7.0f : 127.0f;
        ocl_arg args[] = {OCL_ARG(xm),  OCL_ARG(xv),  OCL_ARG(om),   OCL_ARG(ooff), OCL_ARG(n),
                          OCL_ARG(inv), OCL_ARG(zp),  OCL_ARG(qmin), OCL_ARG(qmax)};
        return q_launch1(d, "quant_tensor", n, (int)(sizeof args / sizeof args[0]), args);
    }
    cl_long bb = (cl_long)em_quant_block_bytes(s), nblk = n / EM_QBLOCK;
    cl_long sl = x->strides[x->rank - 1], obase = out->offset / EM_QBLOCK * bb;
    cl_int form = q_form(s), sb = q_scale_bytes(s);
    ocl_arg args[] = {OCL_ARG(xm),   OCL_ARG(xv),   OCL_ARG(sl), OCL_ARG(om), OCL_ARG(obase),
                      OCL_ARG(nblk), OCL_ARG(form), OCL_ARG(sb), OCL_ARG(bb)};
    return q_launch1(d, "quant_block", nblk, (int)(sizeof args / sizeof args[0]), args);
}

em_status ocl_dequantize(void *ctx, const em_view *out, const em_view *q,
                         const em_quant_scheme *s) {
    ocl_dev *d = ctx;
    cl_long n = ocl_numel(q), ooff = out->offset;
    if (n == 0) return EM_OK;
    ocl_view_arg qv = ocl_view(q);
    cl_mem qm = ocl_mem(q), om = ocl_mem(out);
    if (!q_blocked(s)) {
        cl_float scale = s->scale;
        cl_int zp = s->zero_point;
        ocl_arg args[] = {OCL_ARG(qm), OCL_ARG(qv),    OCL_ARG(om), OCL_ARG(ooff),
                          OCL_ARG(n),  OCL_ARG(scale), OCL_ARG(zp)};
        return q_launch1(d, "dequant_tensor", n, (int)(sizeof args / sizeof args[0]), args);
    }
    cl_int form = q_form(s), sb = q_scale_bytes(s);
    cl_long bb = (cl_long)em_quant_block_bytes(s);
    ocl_arg args[] = {OCL_ARG(qm), OCL_ARG(qv),   OCL_ARG(om), OCL_ARG(ooff),
                      OCL_ARG(n),  OCL_ARG(form), OCL_ARG(sb), OCL_ARG(bb)};
    return q_launch1(d, "dequant_block", n, (int)(sizeof args / sizeof args[0]), args);
}

/** Case (2): out = a @ real(b), b blocked along N. */
static em_status qmm_along_n(ocl_dev *d, const em_view *out, const em_view *a, const em_view *b,
                             const em_quant_scheme *bs) {
    cl_long M = a->shape[0], K = a->shape[1], N = b->shape[1];
    cl_long aoff = a->offset, as0 = a->strides[0], as1 = a->strides[1];
    cl_long boff = b->offset, bs0 = b->strides[0], bs1 = b->strides[1], ooff = out->offset;
    cl_int form = q_form(bs), sb = q_scale_bytes(bs);
    cl_long bb = (cl_long)em_quant_block_bytes(bs);
    cl_mem am = ocl_mem(a), bm = ocl_mem(b), om = ocl_mem(out);
    char opts[64];
    const size_t ts = q_tile(d, opts, sizeof opts);
    size_t global[2] = {ocl_round_up((size_t)N, ts), ocl_round_up((size_t)M, ts)};
    size_t local[2] = {ts, ts};
    ocl_arg args[] = {OCL_ARG(am),  OCL_ARG(aoff), OCL_ARG(as0), OCL_ARG(as1), OCL_ARG(bm),
                      OCL_ARG(boff), OCL_ARG(bs0), OCL_ARG(bs1), OCL_ARG(form), OCL_ARG(sb),
                      OCL_ARG(bb),  OCL_ARG(om),   OCL_ARG(ooff), OCL_ARG(M),  OCL_ARG(N),
                      OCL_ARG(K)};
    return ocl_launch(d, "quant", opts, "qmm_bn", 2, global, local,
                      (int)(sizeof args / sizeof args[0]), args);
}

em_status ocl_qmatmul(void *ctx, const em_view *out, const em_view *a, const em_quant_scheme *as,
                      const em_view *b, const em_quant_scheme *bs) {
    ocl_dev *d = ctx;
    cl_long M = a->shape[0], K = a->shape[1], N = b->shape[1];
    if (M == 0 || N == 0) return EM_OK;
    if (q_blocked(bs) && bs->axis == 1) return qmm_along_n(d, out, a, b, bs);
    /* case (1): a's rows as q8 blocks along K in scratch memory, then the int8 product */
    cl_long nkb = (K + EM_QBLOCK - 1) / EM_QBLOCK;
    cl_int amode = !as ? QA_F32 : q_blocked(as) ? QA_BLOCK : QA_TENSOR;
    cl_int asb = as && q_blocked(as) ? q_scale_bytes(as) : 4;
    cl_long abb = as && q_blocked(as) ? (cl_long)em_quant_block_bytes(as) : 0;
    cl_float ascale = as && !q_blocked(as) ? as->scale : 1.0f;
    cl_long aoff = a->offset, as0 = a->strides[0], as1 = a->strides[1];
    size_t rows = (size_t)(M * nkb);
    cl_mem qa = NULL, da = NULL, sa = NULL;
    em_status st = ocl_scratch(d, rows * EM_QBLOCK, &qa);
    if (st == EM_OK) st = ocl_scratch(d, rows * sizeof(cl_float), &da);
    if (st == EM_OK) st = ocl_scratch(d, rows * sizeof(cl_int), &sa);
    cl_mem am = ocl_mem(a), bm = ocl_mem(b), om = ocl_mem(out);
    if (st == EM_OK) {
        ocl_arg args[] = {OCL_ARG(am), OCL_ARG(aoff), OCL_ARG(as0), OCL_ARG(as1),
                          OCL_ARG(amode), OCL_ARG(asb), OCL_ARG(abb), OCL_ARG(qa),
                          OCL_ARG(da), OCL_ARG(sa), OCL_ARG(M), OCL_ARG(K), OCL_ARG(nkb)};
        st = q_launch1(d, "qmm_prep_a", (int64_t)rows, (int)(sizeof args / sizeof args[0]), args);
    }
    if (st == EM_OK) {
        cl_long boff = b->offset, bs0 = b->strides[0], bs1 = b->strides[1], ooff = out->offset;
        cl_int bmode = q_blocked(bs) ? q_form(bs) : QB_TENSOR;
        cl_int bsb = q_blocked(bs) ? q_scale_bytes(bs) : 4;
        cl_long bbb = q_blocked(bs) ? (cl_long)em_quant_block_bytes(bs) : 0;
        cl_float bscale = q_blocked(bs) ? 1.0f : bs->scale;
        cl_int bzp = q_blocked(bs) ? 0 : bs->zero_point;
        char opts[80];
        const size_t ts = q_tile(d, opts, sizeof opts);
        /* rows a group: 1 or 4 for a few rows (a matrix-vector product), else ts */
        const size_t ty = M >= (cl_long)ts ? ts : M >= 4 ? 4 : 1;
        if (ty != ts) snprintf(opts + strlen(opts), sizeof opts - strlen(opts), " -DQY=%zu", ty);
        size_t global[2] = {ocl_round_up((size_t)N, ts * 4) / 4, ocl_round_up((size_t)M, ty)};
        size_t local[2] = {ts, ty};
        ocl_arg args[] = {OCL_ARG(qa),   OCL_ARG(da),  OCL_ARG(sa),     OCL_ARG(nkb),
                          OCL_ARG(bm),   OCL_ARG(boff), OCL_ARG(bs0),   OCL_ARG(bs1),
                          OCL_ARG(bmode), OCL_ARG(bsb), OCL_ARG(bbb),   OCL_ARG(bscale),
                          OCL_ARG(bzp),  OCL_ARG(om),  OCL_ARG(ooff),   OCL_ARG(M),
                          OCL_ARG(N),    OCL_ARG(K),   OCL_ARG(ascale)};
        st = ocl_launch(d, "quant", opts, "qmm_dot", 2, global, local,
                        (int)(sizeof args / sizeof args[0]), args);
    }
    ocl_scratch_free(d, qa);
    ocl_scratch_free(d, da);
    ocl_scratch_free(d, sa);
    return st;
}
