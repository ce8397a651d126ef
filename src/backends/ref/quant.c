/*
 * quant.c — the reference kernels of quantized tensors: quantize, dequantize and qmatmul, as
 * plain loops that follow the text of ember.h (em_quant_kind: the schemes and their bytes)
 * and backend.h (the slots' arithmetic) step by step. The other backends are checked
 * against these.
 *
 * A block view addresses logical elements: element offset e (offset + index . strides) lies
 * in the block that starts at byte (e / 32) * block_bytes, at position e % 32 (the view
 * rules make every block start at a multiple of 32). Per-tensor views are int8 views.
 */
#include <float.h>
#include <stdlib.h>

#include "ref.h"

/* ---- one block's scale and integers ---- */

static size_t rq_sbytes(em_dtype sdt) { return sdt == EM_F16 ? 2 : 4; }

static float rq_ld_scale(const uint8_t *p, em_dtype sdt) {
    if (sdt == EM_F16) {
        uint16_t h = (uint16_t)(p[0] | p[1] << 8);
        return em_f16_to_f32(h);
    }
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                 (uint32_t)p[3] << 24;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void rq_st_scale(uint8_t *p, em_dtype sdt, float v) {
    if (sdt == EM_F16) {
        uint16_t h = em_f32_to_f16(v);
        p[0] = (uint8_t)h, p[1] = (uint8_t)(h >> 8);
        return;
    }
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(u >> (8 * i));
}

/* v rounded to the scale dtype, as it will be stored. */
static float rq_round_scale(float v, em_dtype sdt) {
    return sdt == EM_F16 ? em_f16_to_f32(em_f32_to_f16(v)) : v;
}

/* The integer at position j of a block (q8: int8; q4: the nibble, 0..15). */
static int rq_q(const uint8_t *blk, const em_quant_scheme *s, int j) {
    size_t sb = rq_sbytes(s->scale_dtype);
    if (s->storage == EM_Q8) return (int8_t)blk[sb + (size_t)j];
    const uint8_t *qs = blk + (s->kind == EM_QK_BLOCK_MIN ? 2 * sb : sb);
    uint8_t b = qs[j & 15];
    return j < 16 ? b & 15 : b >> 4;
}

/* The real value at position j of a block. */
static float rq_real(const uint8_t *blk, const em_quant_scheme *s, int j) {
    float d = rq_ld_scale(blk, s->scale_dtype);
    int q = rq_q(blk, s, j);
    if (s->storage == EM_Q8) return d * (float)q;
    if (s->kind == EM_QK_BLOCK) return d * (float)(q - 8);
    float m = rq_ld_scale(blk + rq_sbytes(s->scale_dtype), s->scale_dtype);
    return d * (float)q + m;
}

static bool rq_block_kind(const em_quant_scheme *s) {
    return s->kind == EM_QK_BLOCK || s->kind == EM_QK_BLOCK_MIN;
}

/* The integer and the real value of the element at element offset e of view v. */
static const uint8_t *rq_block_of(const em_view *v, const em_quant_scheme *s, int64_t e,
                                  int *j) {
    *j = (int)(e % EM_QBLOCK);
    return (const uint8_t *)v->buf + (size_t)(e / EM_QBLOCK) * em_quant_block_bytes(s);
}

static float rq_real_at(const em_view *v, const em_quant_scheme *s, int64_t e) {
    if (!rq_block_kind(s))
        return s->scale * (float)((int)((const int8_t *)v->buf)[e] - s->zero_point);
    int j;
    const uint8_t *blk = rq_block_of(v, s, e, &j);
    return rq_real(blk, s, j);
}

/* ---- quantize ---- */

static float rq_clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

/* 1 / d, or 0 where d is 0, below FLT_MIN (1 / d would overflow) or not finite (an
 * activation block holding a NaN or an infinity): q is then 0 (Q4_0: 8). */
static float rq_inv(float d) { return isfinite(d) && fabsf(d) >= FLT_MIN ? 1.0f / d : 0.0f; }

/* Quantizes the 32 values x of one block into blk, as em_quant_kind says. */
static void rq_quantize_block(uint8_t *blk, const float *x, const em_quant_scheme *s) {
    const em_dtype sdt = s->scale_dtype;
    const size_t sb = rq_sbytes(sdt);
    int q[EM_QBLOCK];
    if (s->storage == EM_Q8) {
        float amax = 0;
        for (int j = 0; j < EM_QBLOCK; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        float d = rq_round_scale(amax / 127.0f, sdt);
        float id = rq_inv(d);
        rq_st_scale(blk, sdt, d);
        for (int j = 0; j < EM_QBLOCK; j++)
            blk[sb + (size_t)j] = (uint8_t)(int8_t)rq_clampf(rintf(x[j] * id), -127, 127);
        return;
    }
    uint8_t *qs;
    if (s->kind == EM_QK_BLOCK) {
        float v = 0, amax = 0;
        for (int j = 0; j < EM_QBLOCK; j++)
            if (fabsf(x[j]) > amax) amax = fabsf(x[j]), v = x[j];
        float d = rq_round_scale(v / -8.0f, sdt);
        float id = rq_inv(d);
        rq_st_scale(blk, sdt, d);
        for (int j = 0; j < EM_QBLOCK; j++) q[j] = (int)rq_clampf(rintf(x[j] * id) + 8, 0, 15);
        qs = blk + sb;
    } else {
        float mn = x[0], mx = x[0];
        for (int j = 1; j < EM_QBLOCK; j++) {
            mn = x[j] < mn ? x[j] : mn;
            mx = x[j] > mx ? x[j] : mx;
        }
        float m = rq_round_scale(mn, sdt);
        float d = rq_round_scale((mx - mn) / 15.0f, sdt);
        float id = rq_inv(d);
        rq_st_scale(blk, sdt, d);
        rq_st_scale(blk + sb, sdt, m);
        for (int j = 0; j < EM_QBLOCK; j++)
            q[j] = (int)rq_clampf(rintf((x[j] - m) * id), 0, 15);
        qs = blk + 2 * sb;
    }
    for (int j = 0; j < EM_QBLOCK / 2; j++) qs[j] = (uint8_t)(q[j] | q[j + 16] << 4);
}

em_status ref_quantize(void *ctx, const em_view *out, const em_view *x,
                       const em_quant_scheme *s) {
    (void)ctx;
    const int64_t n = ref_numel(x);
    if (!rq_block_kind(s)) {
        float lo = s->storage == EM_Q4 ? -8.0f : s->kind == EM_QK_SYMMETRIC ? -127.0f : -128.0f;
        float hi = s->storage == EM_Q4 ? 7.0f : 127.0f;
        float inv = 1.0f / s->scale, zp = (float)s->zero_point;
        int8_t *q = (int8_t *)out->buf + out->offset;
        for (int64_t i = 0; i < n; i++) {
            float v = (float)ref_ld(x->buf, x->dtype, ref_offset(x, i));
            q[i] = (int8_t)rq_clampf(rintf(v * inv) + zp, lo, hi);
        }
        return EM_OK;
    }
    const size_t bb = em_quant_block_bytes(s);
    uint8_t *base = (uint8_t *)out->buf + (size_t)(out->offset / EM_QBLOCK) * bb;
    float xs[EM_QBLOCK];
    for (int64_t b = 0; b < n / EM_QBLOCK; b++) {
        for (int j = 0; j < EM_QBLOCK; j++)
            xs[j] = (float)ref_ld(x->buf, x->dtype, ref_offset(x, b * EM_QBLOCK + j));
        rq_quantize_block(base + (size_t)b * bb, xs, s);
    }
    return EM_OK;
}

/* ---- dequantize ---- */

em_status ref_dequantize(void *ctx, const em_view *out, const em_view *q,
                         const em_quant_scheme *s) {
    (void)ctx;
    const int64_t n = ref_numel(q);
    float *o = (float *)out->buf + out->offset;
    for (int64_t i = 0; i < n; i++) o[i] = rq_real_at(q, s, ref_offset(q, i));
    return EM_OK;
}

/* ---- qmatmul ---- */

/* The integer of quantized operand v (per-tensor: int8; blocks: q8 int8 or q4 0..15) at
 * element offset e. */
static int rq_int_at(const em_view *v, const em_quant_scheme *s, int64_t e) {
    if (!rq_block_kind(s)) return ((const int8_t *)v->buf)[e];
    int j;
    const uint8_t *blk = rq_block_of(v, s, e, &j);
    return rq_q(blk, s, j);
}

/* Case (2): b's blocks run along N; out = a @ real(b), summed in double and rounded once
 * (ref is the oracle: any f32 order is within tolerance of it). */
static void rq_matmul_real(const em_view *out, const em_view *a, const em_view *b,
                           const em_quant_scheme *bs) {
    const int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1];
    float *o = (float *)out->buf + out->offset;
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++) {
                double av = ref_ld(a->buf, a->dtype, a->offset + m * a->strides[0] + k * a->strides[1]);
                acc += av * rq_real_at(b, bs, b->offset + k * b->strides[0] + n * b->strides[1]);
            }
            o[m * N + n] = (float)acc;
        }
}

em_status ref_qmatmul(void *ctx, const em_view *out, const em_view *a,
                      const em_quant_scheme *as, const em_view *b, const em_quant_scheme *bs) {
    (void)ctx;
    const int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1];
    if (!as && rq_block_kind(bs) && bs->axis == 1) {
        rq_matmul_real(out, a, b, bs);
        return EM_OK;
    }
    const int64_t nb = (K + EM_QBLOCK - 1) / EM_QBLOCK;
    int8_t *qa = malloc((size_t)K);
    float *da = malloc((size_t)nb * sizeof *da);
    int32_t *sa = malloc((size_t)nb * sizeof *sa);
    if (!qa || !da || !sa) {
        free(qa), free(da), free(sa);
        return em_backend_set_error(EM_ERR_NOMEM, "ref qmatmul: out of memory");
    }
    float *o = (float *)out->buf + out->offset;
    for (int64_t m = 0; m < M; m++) {
        /* a's row as q8 blocks along K: quantized here (f32 a) or read (int8 a) */
        for (int64_t kb = 0; kb < nb; kb++) {
            const int64_t k0 = kb * EM_QBLOCK, k1 = k0 + EM_QBLOCK < K ? k0 + EM_QBLOCK : K;
            if (!as) {
                float amax = 0; /* a NaN stays: the block's d is NaN, its outputs too */
                for (int64_t k = k0; k < k1; k++) {
                    float v = (float)ref_ld(a->buf, a->dtype, a->offset + m * a->strides[0] + k * a->strides[1]);
                    amax = isnan(v) || fabsf(v) > amax ? fabsf(v) : amax;
                }
                float d = amax / 127.0f, id = rq_inv(d);
                for (int64_t k = k0; k < k1; k++) {
                    float v = (float)ref_ld(a->buf, a->dtype, a->offset + m * a->strides[0] + k * a->strides[1]);
                    qa[k] = id != 0 ? (int8_t)rq_clampf(rintf(v * id), -127, 127) : 0;
                }
                da[kb] = d;
            } else {
                for (int64_t k = k0; k < k1; k++)
                    qa[k] = (int8_t)rq_int_at(a, as, a->offset + m * a->strides[0] + k * a->strides[1]);
                if (rq_block_kind(as)) {
                    int j;
                    const uint8_t *blk = rq_block_of(a, as, a->offset + m * a->strides[0] + k0 * a->strides[1], &j);
                    da[kb] = rq_ld_scale(blk, as->scale_dtype);
                } else {
                    da[kb] = 1.0f;
                }
            }
            int32_t sum = 0;
            for (int64_t k = k0; k < k1; k++) sum += qa[k];
            sa[kb] = sum;
        }
        for (int64_t n = 0; n < N; n++) {
            float acc = 0;
            for (int64_t kb = 0; kb < nb; kb++) {
                const int64_t k0 = kb * EM_QBLOCK, k1 = k0 + EM_QBLOCK < K ? k0 + EM_QBLOCK : K;
                int32_t S = 0;
                for (int64_t k = k0; k < k1; k++)
                    S += qa[k] * rq_int_at(b, bs, b->offset + k * b->strides[0] + n * b->strides[1]);
                if (!rq_block_kind(bs)) {
                    acc += da[kb] * bs->scale * (float)(S - bs->zero_point * sa[kb]);
                    continue;
                }
                int j;
                const uint8_t *blk = rq_block_of(b, bs, b->offset + k0 * b->strides[0] + n * b->strides[1], &j);
                float db = rq_ld_scale(blk, bs->scale_dtype);
                if (bs->storage == EM_Q8) {
                    acc += da[kb] * db * (float)S;
                } else if (bs->kind == EM_QK_BLOCK) {
                    acc += da[kb] * db * (float)(S - 8 * sa[kb]);
                } else {
                    float mb = rq_ld_scale(blk + rq_sbytes(bs->scale_dtype), bs->scale_dtype);
                    acc += da[kb] * db * (float)S + da[kb] * mb * (float)sa[kb];
                }
            }
            if (as && !rq_block_kind(as)) acc *= as->scale;
            o[m * N + n] = acc;
        }
    }
    free(qa), free(da), free(sa);
    return EM_OK;
}
