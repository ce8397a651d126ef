/*
 * quant.c — the Vulkan backend's quantized tensors (shaders/quant.comp, variants in
 * quant.list): quantize, dequantize and qmatmul with the arithmetic backend.h gives, so that
 * the bytes match ref's. A port of the OpenCL backend's quant.c.
 *
 * Quantized bytes are read and written through 8-bit storage (storageBuffer8BitAccess), f16
 * scales bytewise with common.glsl's conversions (no 16-bit storage needed); the float
 * operands are f32.
 *
 * qmatmul case (1), the int8 product: a first kernel writes a's rows as q8 blocks of 32 along
 * K into scratch memory (quantizing an f32 a on the fly, copying an int8 one), with each
 * block's scale and sum of q; a second one takes tiles of those rows and of b's integers
 * (read from its blocks, or from a per-tensor int8 view) through shared memory and sums each
 * block's products in int. Rows go in chunks whose scratch fits one storage binding. Case
 * (2), b blocked along N: a tiled f32 product that decodes b's blocks as it stages them (b
 * is never dequantized whole).
 */
#include <stdio.h>
#include <string.h>

#include "vk_internal.h"

/* quant.comp's block forms */
enum { QF_Q8 = 0, QF_Q4 = 1, QF_Q4MIN = 2 };
#define QT 16 /* quant.comp's qmatmul groups: QT x QT */
#define QMAX_GROUPS 65535u

/** True for the block kinds. */
static bool q_blocked(const em_quant_scheme *s) {
    return s->kind == EM_QK_BLOCK || s->kind == EM_QK_BLOCK_MIN;
}

/** quant.comp's form of a block scheme. */
static int q_form(const em_quant_scheme *s) {
    if (s->kind == EM_QK_BLOCK_MIN) return QF_Q4MIN;
    return s->storage == EM_Q4 ? QF_Q4 : QF_Q8;
}

/** Bytes of one stored scale of a block scheme. */
static int q_scale_bytes(const em_quant_scheme *s) { return s->scale_dtype == EM_F16 ? 2 : 4; }

/** EM_OK when the device has what the quantized kernels need (8-bit storage), and `f32`
 *  (NULL: none) is an f32 view. */
static em_status q_check(vk_dev *d, const char *op, const em_view *f32) {
    if (!d->s8)
        return em_backend_set_error(EM_ERR_UNSUPPORTED,
                                    "vulkan: %s: quantized tensors need the device feature "
                                    "storageBuffer8BitAccess, which %s (vulkan:%d) lacks",
                                    op, d->name, d->index);
    if (f32 && f32->dtype != EM_F32)
        return em_backend_set_error(EM_ERR_UNSUPPORTED, "vulkan: %s: dtype %s is not supported "
                                    "(f32 only)", op, em_dtype_name(f32->dtype));
    return EM_OK;
}

/** Groups of a 2-d tiled launch over rows x cols (each dim capped: the kernels loop). */
static void q_groups(int64_t rows, int64_t cols, uint32_t g[3]) {
    int64_t gx = (cols + QT - 1) / QT, gy = (rows + QT - 1) / QT;
    g[0] = gx > QMAX_GROUPS ? QMAX_GROUPS : (uint32_t)gx;
    g[1] = gy > QMAX_GROUPS ? QMAX_GROUPS : (uint32_t)gy;
    g[2] = 1;
}

em_status vk_quantize(void *ctx, const em_view *out, const em_view *x,
                      const em_quant_scheme *s) {
    vk_dev *d = ctx;
    em_status st = q_check(d, "quantize", x);
    if (st != EM_OK) return st;
    int64_t n = vk_numel(x);
    if (n == 0) return EM_OK;
    vk_params p;
    memset(&p, 0, sizeof p);
    p.v[0] = vk_view(x);
    vk_buf *bufs[2] = {vk_vbuf(out), vk_vbuf(x)};
    if (!q_blocked(s)) {
        p.v[1] = vk_view(out);
        p.f[0] = 1.0f / s->scale;
        p.f[1] = (float)s->zero_point;
        p.f[2] = s->storage == EM_Q4 ? -8.0f : s->kind == EM_QK_SYMMETRIC ? -127.0f : -128.0f;
        p.f[3] = s->storage == EM_Q4 ? 7.0f : 127.0f;
        return vk_launch_1d(d, "quant_tensor", n, &p, 2, bufs);
    }
    const int64_t bb = (int64_t)em_quant_block_bytes(s);
    p.i[0] = (int32_t)(n / EM_QBLOCK);
    p.i[1] = q_form(s);
    p.i[2] = q_scale_bytes(s);
    p.i[3] = (int32_t)bb;
    p.i[4] = (int32_t)(out->offset / EM_QBLOCK * bb);
    p.i[5] = (int32_t)x->strides[x->rank - 1];
    return vk_launch_1d(d, "quant_block", n / EM_QBLOCK, &p, 2, bufs);
}

em_status vk_dequantize(void *ctx, const em_view *out, const em_view *q,
                        const em_quant_scheme *s) {
    vk_dev *d = ctx;
    em_status st = q_check(d, "dequantize", out);
    if (st != EM_OK) return st;
    int64_t n = vk_numel(q);
    if (n == 0) return EM_OK;
    vk_params p;
    memset(&p, 0, sizeof p);
    p.v[0] = vk_view(q);
    p.v[1] = vk_view(out);
    vk_buf *bufs[2] = {vk_vbuf(q), vk_vbuf(out)};
    if (!q_blocked(s)) {
        p.f[0] = s->scale;
        p.i[0] = s->zero_point;
        return vk_launch_1d(d, "dequant_tensor", n, &p, 2, bufs);
    }
    p.i[1] = q_form(s);
    p.i[2] = q_scale_bytes(s);
    p.i[3] = (int32_t)em_quant_block_bytes(s);
    return vk_launch_1d(d, "dequant_block", n, &p, 2, bufs);
}

/** Case (2): out = a @ real(b), b blocked along N. */
static em_status qmm_along_n(vk_dev *d, const em_view *out, const em_view *a, const em_view *b,
                             const em_quant_scheme *bs) {
    const int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1];
    vk_params p;
    memset(&p, 0, sizeof p);
    int32_t *I = p.i;
    I[0] = (int32_t)M, I[1] = (int32_t)N, I[2] = (int32_t)K;
    I[3] = (int32_t)a->offset, I[4] = (int32_t)a->strides[0], I[5] = (int32_t)a->strides[1];
    I[6] = (int32_t)b->offset, I[7] = (int32_t)b->strides[0], I[8] = (int32_t)b->strides[1];
    I[9] = q_form(bs), I[10] = q_scale_bytes(bs), I[11] = (int32_t)em_quant_block_bytes(bs);
    I[12] = (int32_t)out->offset;
    uint32_t g[3];
    q_groups(M, N, g);
    vk_buf *bufs[3] = {vk_vbuf(b), vk_vbuf(a), vk_vbuf(out)};
    return vk_launch(d, "qmm_bn", g, &p, 3, bufs);
}

em_status vk_qmatmul(void *ctx, const em_view *out, const em_view *a, const em_quant_scheme *as,
                     const em_view *b, const em_quant_scheme *bs) {
    vk_dev *d = ctx;
    em_status st = q_check(d, "qmatmul", as ? NULL : a);
    if (st == EM_OK) st = q_check(d, "qmatmul", out);
    if (st != EM_OK) return st;
    const int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1];
    if (M == 0 || N == 0) return EM_OK;
    if (q_blocked(bs) && bs->axis == 1) return qmm_along_n(d, out, a, b, bs);
    /* case (1): a's rows as q8 blocks along K in scratch memory, then the int8 product; the
     * rows in chunks whose int8 blocks fit one binding (and int32 indices) */
    const int64_t nkb = (K + EM_QBLOCK - 1) / EM_QBLOCK, row_bytes = nkb * EM_QBLOCK;
    VkDeviceSize cap = d->max_range < (VkDeviceSize)INT32_MAX ? d->max_range : INT32_MAX;
    int64_t chunk = (int64_t)(cap / (VkDeviceSize)row_bytes); /* int32 indices in the shaders */
    if (chunk > M) chunk = M;
    if (chunk < 1)
        return em_backend_set_error(EM_ERR_UNSUPPORTED, "vulkan: qmatmul: K = %lld is too large "
                                    "for a storage binding of %s", (long long)K, d->name);
    const char *prep = !as ? "qmm_prep_f32" : q_blocked(as) ? "qmm_prep_block" : "qmm_prep_tensor";
    const size_t rows = (size_t)(chunk * nkb);
    vk_buf *qa = NULL, *da = NULL, *sa = NULL;
    st = vk_scratch(d, rows * EM_QBLOCK, &qa);
    if (st == EM_OK) st = vk_scratch(d, rows * sizeof(float), &da);
    if (st == EM_OK) st = vk_scratch(d, rows * sizeof(int32_t), &sa);
    for (int64_t m0 = 0; st == EM_OK && m0 < M; m0 += chunk) {
        const int64_t mc = M - m0 < chunk ? M - m0 : chunk;
        vk_params p;
        memset(&p, 0, sizeof p);
        p.i[0] = (int32_t)mc, p.i[1] = (int32_t)K, p.i[2] = (int32_t)nkb;
        p.i[3] = (int32_t)(a->offset + m0 * a->strides[0]);
        p.i[4] = (int32_t)a->strides[0], p.i[5] = (int32_t)a->strides[1];
        p.i[6] = as && q_blocked(as) ? q_scale_bytes(as) : 4;
        p.i[7] = as && q_blocked(as) ? (int32_t)em_quant_block_bytes(as) : 0;
        /* an f32 a goes to binding 5 (binding 1 holds quantized bytes) */
        vk_buf *pb[5] = {as ? vk_vbuf(a) : NULL, qa, da, sa, as ? NULL : vk_vbuf(a)};
        st = vk_launch_1d(d, prep, mc * nkb, &p, 5, pb);
        if (st != EM_OK) break;
        memset(&p, 0, sizeof p);
        int32_t *I = p.i;
        I[0] = (int32_t)mc, I[1] = (int32_t)N, I[2] = (int32_t)K, I[3] = (int32_t)nkb;
        I[4] = (int32_t)b->offset, I[5] = (int32_t)b->strides[0], I[6] = (int32_t)b->strides[1];
        I[7] = q_blocked(bs) ? q_form(bs) : -1;
        I[8] = q_blocked(bs) ? q_scale_bytes(bs) : 4;
        I[9] = q_blocked(bs) ? (int32_t)em_quant_block_bytes(bs) : 0;
        I[10] = q_blocked(bs) ? 0 : bs->zero_point;
        I[11] = (int32_t)(out->offset + m0 * N);
        p.f[0] = q_blocked(bs) ? 1.0f : bs->scale;
        p.f[1] = as && !q_blocked(as) ? as->scale : 1.0f;
        uint32_t g[3];
        q_groups(mc, N, g);
        vk_buf *db[5] = {vk_vbuf(b), qa, da, sa, vk_vbuf(out)};
        st = vk_launch(d, "qmm_dot", g, &p, 5, db);
    }
    vk_scratch_free(d, qa);
    vk_scratch_free(d, da);
    vk_scratch_free(d, sa);
    return st;
}
