/*
 * The quantized tensors' wrappers for the conformance runner (cases/quant.py says what each
 * op computes and how it is compared).
 *
 * Scheme params: "bits" (8 or 4), "kind" (em_quant_kind), "sdt" (the block scale dtype,
 * f32 when absent); "a_bits", "a_kind", "a_sdt" for quant_matmul's quantized left operand;
 * "plain" calls em_quantize instead of em_quantize_as. Results made here (bytes, scales,
 * sizes) are created on the device the case runs on, from what ember handed back.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"

#define LIST_CAP 16

/** The scheme of params p, with `prefix` ("" or "a_") on the names. */
static em_quant_scheme scheme_of(const conf_params *p, const char *prefix) {
    char key[32];
    em_quant_scheme s;
    memset(&s, 0, sizeof s);
    snprintf(key, sizeof key, "%sbits", prefix);
    s.storage = conf_int(p, key, 8) == 4 ? EM_Q4 : EM_Q8;
    snprintf(key, sizeof key, "%skind", prefix);
    s.kind = (em_quant_kind)conf_int(p, key, EM_QK_AFFINE);
    snprintf(key, sizeof key, "%ssdt", prefix);
    s.scale_dtype = (em_dtype)conf_int(p, key, EM_F32);
    return s;
}

/** x quantized with the scheme of p (prefix as scheme_of). */
static em_status quantize(const em_tensor *x, const conf_params *p, const char *prefix,
                          em_tensor **out) {
    em_quant_scheme s = scheme_of(p, prefix);
    if (!prefix[0] && conf_bool(p, "plain", false)) return em_quantize(x, s.storage, out);
    return em_quantize_as(x, &s, out);
}

/** A 1-d tensor of n values of dt on t's device. */
static em_status vector_like(const em_tensor *t, const void *data, em_dtype dt, int64_t n,
                             em_tensor **out) {
    return em_tensor_from_data(data, dt, &n, 1, em_tensor_device(t), out);
}

/** q's bytes (em_tensor_to_data: the contiguous form of the view) as a u8 tensor. */
static em_status bytes_of(const em_tensor *q, em_tensor **out) {
    em_quant_scheme s;
    size_t n = 0;
    em_status st = em_tensor_scheme(q, &s);
    if (st == EM_OK) st = em_quant_nbytes(&s, em_tensor_shape(q), em_tensor_rank(q), &n);
    if (st != EM_OK) return st;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) return EM_ERR_NOMEM;
    st = em_tensor_to_data(q, buf, n);
    if (st == EM_OK) st = vector_like(q, buf, EM_U8, (int64_t)n, out);
    free(buf);
    return st;
}

/* quant_bytes: the bytes of in[0] quantized; for a per-tensor kind also the scale (f32) and
 * the zero point (i32) that em_tensor_scheme reports. */
static em_status w_quant_bytes(em_tensor *const *in, int nin, const conf_params *p,
                               em_tensor **out, int *nout) {
    em_tensor *q = NULL;
    *nout = 0;
    if (nin < 1) return EM_ERR_ARG;
    em_status s = quantize(in[0], p, "", &q);
    em_quant_scheme qs;
    if (s == EM_OK) s = em_tensor_scheme(q, &qs);
    if (s == EM_OK) s = bytes_of(q, &out[0]);
    if (s == EM_OK) *nout = 1;
    if (s == EM_OK && (qs.kind == EM_QK_AFFINE || qs.kind == EM_QK_SYMMETRIC)) {
        s = vector_like(q, &qs.scale, EM_F32, 1, &out[1]);
        if (s == EM_OK) *nout = 2;
        if (s == EM_OK) s = vector_like(q, &qs.zero_point, EM_I32, 1, &out[2]);
        if (s == EM_OK) *nout = 3;
    }
    em_tensor_release(q);
    return s;
}

/* quant_roundtrip: dequantize(quantize(in[0])). */
static em_status w_quant_roundtrip(em_tensor *const *in, int nin, const conf_params *p,
                                   em_tensor **out, int *nout) {
    em_tensor *q = NULL;
    *nout = 0;
    if (nin < 1) return EM_ERR_ARG;
    em_status s = quantize(in[0], p, "", &q);
    if (s == EM_OK) s = em_dequantize(q, &out[0]);
    if (s == EM_OK) *nout = 1;
    em_tensor_release(q);
    return s;
}

/* quant_matmul, by "form": 0 in[0] @ quantize(in[1])^T (W [N, K] quantized by rows: blocks
 * along the reduction; a 1-d W is used as it is); 1 in[0] @ quantize(in[1]) (W [K, N]: blocks
 * along N, backend.h's case 2); 2 quantize_a(in[0]) @ quantize(in[1])^T, both quantized;
 * 3 quantize(in[1]) @ in[0]^T (the quantized operand on the left). */
static em_status w_quant_matmul(em_tensor *const *in, int nin, const conf_params *p,
                                em_tensor **out, int *nout) {
    em_tensor *qa = NULL, *qb = NULL, *t = NULL;
    const int64_t form = conf_int(p, "form", 0);
    *nout = 0;
    if (nin < 2) return EM_ERR_ARG;
    em_status s = quantize(in[1], p, "", &qb);
    if (s == EM_OK && form == 2) s = quantize(in[0], p, "a_", &qa);
    if (s == EM_OK && (form == 0 || form == 2) && em_tensor_rank(qb) == 2) {
        s = em_transpose(qb, 0, 1, &t);
        em_tensor_release(qb);
        qb = s == EM_OK ? t : NULL;
        t = NULL;
    }
    if (s == EM_OK && form == 3) s = em_transpose(in[0], -2, -1, &t);
    if (s == EM_OK) {
        if (form == 2) s = em_matmul(qa, qb, &out[0]);
        else if (form == 3) s = em_matmul(qb, t, &out[0]);
        else s = em_matmul(in[0], qb, &out[0]);
    }
    if (s == EM_OK) *nout = 1;
    em_tensor_release(qa);
    em_tensor_release(qb);
    em_tensor_release(t);
    return s;
}

/* The views of quant_layout ("view"; cases/quant.py's V_* codes). */
enum { V_SLICE, V_TRANSPOSE, V_RESHAPE, V_UNSQUEEZE, V_SELECT, V_FLIP, V_EXPAND, V_PERMUTE };

static em_status view_of(const em_tensor *x, const conf_params *p, em_tensor **out) {
    int64_t list[LIST_CAP];
    int ints[LIST_CAP];
    int n;
    const int dim = (int)conf_int(p, "dim", 0);
    switch (conf_int(p, "view", -1)) {
    case V_SLICE:
        return em_slice(x, dim, conf_int(p, "start", 0), conf_int(p, "stop", INT64_MAX),
                        conf_int(p, "step", 1), out);
    case V_TRANSPOSE:
        return em_transpose(x, (int)conf_int(p, "dim0", 0), (int)conf_int(p, "dim1", 1), out);
    case V_RESHAPE:
    case V_EXPAND:
        n = conf_ints(p, "shape", list, LIST_CAP);
        if (n < 0 || n > LIST_CAP) return EM_ERR_ARG;
        return conf_int(p, "view", -1) == V_RESHAPE ? em_reshape(x, list, n, out)
                                                    : em_expand(x, list, n, out);
    case V_UNSQUEEZE:
        return em_unsqueeze(x, dim, out);
    case V_SELECT: {
        em_tensor *row = NULL;
        const int64_t i = conf_int(p, "index", 0);
        em_status s = em_slice(x, dim, i, i + 1, 1, &row);
        if (s == EM_OK) s = em_squeeze(row, dim, out);
        em_tensor_release(row);
        return s;
    }
    case V_FLIP:
    case V_PERMUTE:
        n = conf_ints(p, conf_int(p, "view", -1) == V_FLIP ? "dims" : "perm", list, LIST_CAP);
        if (n < 0 || n > LIST_CAP) return EM_ERR_ARG;
        for (int k = 0; k < n; k++) ints[k] = (int)list[k];
        return conf_int(p, "view", -1) == V_FLIP ? em_flip(x, ints, n, out)
                                                 : em_permute(x, ints, n, out);
    default:
        return EM_ERR_ARG;
    }
}

/* quant_layout: a view of quantize(in[0]), dequantized; with "bytes" also the view's bytes
 * (em_tensor_to_data), with "axis" the block axis em_tensor_scheme reports for the view. */
static em_status w_quant_layout(em_tensor *const *in, int nin, const conf_params *p,
                                em_tensor **out, int *nout) {
    em_tensor *q = NULL, *v = NULL;
    *nout = 0;
    if (nin < 1) return EM_ERR_ARG;
    em_status s = quantize(in[0], p, "", &q);
    if (s == EM_OK) s = view_of(q, p, &v);
    if (s == EM_OK) s = em_dequantize(v, &out[(*nout)++]);
    if (s == EM_OK && conf_bool(p, "bytes", false)) s = bytes_of(v, &out[(*nout)++]);
    if (s == EM_OK && conf_bool(p, "axis", false)) {
        em_quant_scheme vs;
        s = em_tensor_scheme(v, &vs);
        if (s == EM_OK) s = vector_like(v, &vs.axis, EM_I32, 1, &out[(*nout)++]);
    }
    if (s != EM_OK) {
        for (int k = 0; k < *nout; k++) em_tensor_release(out[k]);
        *nout = 0;
    }
    em_tensor_release(q);
    em_tensor_release(v);
    return s;
}

/* quant_from_bytes: in[0] (u8) read by em_tensor_from_quantized as "shape" with the scheme
 * (per-tensor kinds: "scale", "zp"), dequantized. */
static em_status w_quant_from_bytes(em_tensor *const *in, int nin, const conf_params *p,
                                    em_tensor **out, int *nout) {
    int64_t shape[LIST_CAP];
    em_quant_scheme sch = scheme_of(p, "");
    em_tensor *q = NULL;
    *nout = 0;
    if (nin < 1) return EM_ERR_ARG;
    int rank = conf_ints(p, "shape", shape, LIST_CAP);
    if (rank < 0 || rank > LIST_CAP) return EM_ERR_ARG;
    sch.scale = (float)conf_f64(p, "scale", 0.0);
    sch.zero_point = (int32_t)conf_int(p, "zp", 0);
    const size_t n = (size_t)em_tensor_numel(in[0]);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) return EM_ERR_NOMEM;
    em_status s = em_tensor_to_data(in[0], buf, n);
    if (s == EM_OK)
        s = em_tensor_from_quantized(buf, n, &sch, shape, rank, em_tensor_device(in[0]), &q);
    free(buf);
    if (s == EM_OK) s = em_dequantize(q, &out[0]);
    if (s == EM_OK) *nout = 1;
    em_tensor_release(q);
    return s;
}

/* quant_nbytes: em_quant_nbytes of "shape" with the scheme, as an i64 [1]. */
static em_status w_quant_nbytes(em_tensor *const *in, int nin, const conf_params *p,
                                em_tensor **out, int *nout) {
    int64_t shape[LIST_CAP], one = 1;
    em_quant_scheme sch = scheme_of(p, "");
    size_t n = 0;
    *nout = 0;
    int rank = conf_ints(p, "shape", shape, LIST_CAP);
    if (rank < 0 || rank > LIST_CAP) return EM_ERR_ARG;
    em_status s = em_quant_nbytes(&sch, shape, rank, &n);
    if (s == EM_OK) {
        int64_t v = (int64_t)n;
        s = em_tensor_from_data(&v, EM_I64, &one, 1, p->dev, &out[0]);
    }
    if (s == EM_OK) *nout = 1;
    return s;
}

/* quant_op: an op on quantize(in[0]): "what" 0 em_exp, 1 em_add with in[0]. */
static em_status w_quant_op(em_tensor *const *in, int nin, const conf_params *p,
                            em_tensor **out, int *nout) {
    em_tensor *q = NULL;
    *nout = 0;
    if (nin < 1) return EM_ERR_ARG;
    em_status s = quantize(in[0], p, "", &q);
    if (s == EM_OK)
        s = conf_int(p, "what", 0) == 0 ? em_exp(q, &out[0]) : em_add(q, in[0], &out[0]);
    if (s == EM_OK) *nout = 1;
    em_tensor_release(q);
    return s;
}

const conf_op conf_ops_quant[] = {
    {"quant_bytes", w_quant_bytes},
    {"quant_roundtrip", w_quant_roundtrip},
    {"quant_matmul", w_quant_matmul},
    {"quant_layout", w_quant_layout},
    {"quant_from_bytes", w_quant_from_bytes},
    {"quant_nbytes", w_quant_nbytes},
    {"quant_op", w_quant_op},
    {NULL, NULL},
};
