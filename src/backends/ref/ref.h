/*
 * ref.h — private helpers of the reference backend: element loads and stores for every dtype
 * and a strided iterator. The ref backend is the oracle: plain loops, computed in double for
 * float dtypes (f16/bf16/f32 rounded on store) and in int64 for int dtypes.
 *
 * Buffers are host memory from malloc; a view's element i lives at
 * (char *)v->buf + (v->offset + sum(idx[d] * v->strides[d])) * em_dtype_size(v->dtype).
 */
#ifndef EMBER_REF_H
#define EMBER_REF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ember/backend.h"

/* ---- element access by element offset (already including view offset) ---- */

static inline double ref_ld(const void *buf, em_dtype dt, int64_t off) {
    switch (dt) {
    case EM_F32: return ((const float *)buf)[off];
    case EM_F64: return ((const double *)buf)[off];
    case EM_F16: return em_f16_to_f32(((const uint16_t *)buf)[off]);
    case EM_BF16: return em_bf16_to_f32(((const uint16_t *)buf)[off]);
    case EM_I64: return (double)((const int64_t *)buf)[off];
    case EM_I32: return ((const int32_t *)buf)[off];
    case EM_I16: return ((const int16_t *)buf)[off];
    case EM_I8: case EM_Q8: case EM_Q4: return ((const int8_t *)buf)[off];
    case EM_U8: return ((const uint8_t *)buf)[off];
    case EM_BOOL: return ((const uint8_t *)buf)[off] != 0;
    }
    return 0;
}

static inline int64_t ref_ldi(const void *buf, em_dtype dt, int64_t off) {
    switch (dt) {
    case EM_I64: return ((const int64_t *)buf)[off];
    case EM_I32: return ((const int32_t *)buf)[off];
    case EM_I16: return ((const int16_t *)buf)[off];
    case EM_I8: case EM_Q8: case EM_Q4: return ((const int8_t *)buf)[off];
    case EM_U8: return ((const uint8_t *)buf)[off];
    case EM_BOOL: return ((const uint8_t *)buf)[off] != 0;
    default: {
        double d = ref_ld(buf, dt, off);
        if (d != d) return 0;
        if (d >= 9.2233720368547758e18) return INT64_MAX;
        if (d <= -9.2233720368547758e18) return INT64_MIN;
        return (int64_t)d; /* truncation toward zero */
    }
    }
}

/** Integer conversion to a narrower int dtype wraps modulo 2^bits, as C and numpy do. */
static inline void ref_sti(void *buf, em_dtype dt, int64_t off, int64_t v) {
    switch (dt) {
    case EM_I64: ((int64_t *)buf)[off] = v; break;
    case EM_I32: ((int32_t *)buf)[off] = (int32_t)(uint32_t)(uint64_t)v; break;
    case EM_I16: ((int16_t *)buf)[off] = (int16_t)(uint16_t)(uint64_t)v; break;
    case EM_I8: case EM_Q8: case EM_Q4: ((int8_t *)buf)[off] = (int8_t)(uint8_t)(uint64_t)v; break;
    case EM_U8: ((uint8_t *)buf)[off] = (uint8_t)(uint64_t)v; break;
    case EM_BOOL: ((uint8_t *)buf)[off] = v != 0; break;
    case EM_F32: ((float *)buf)[off] = (float)v; break;
    case EM_F64: ((double *)buf)[off] = (double)v; break;
    case EM_F16: ((uint16_t *)buf)[off] = em_f32_to_f16((float)v); break;
    case EM_BF16: ((uint16_t *)buf)[off] = em_f32_to_bf16((float)v); break;
    }
}

/** Stores a double: floats round to the dtype, ints truncate toward zero (saturating at the
 *  int64 range, NaN -> 0) and then wrap to the dtype's width, bool is v != 0. */
static inline void ref_st(void *buf, em_dtype dt, int64_t off, double v) {
    switch (dt) {
    case EM_F32: ((float *)buf)[off] = (float)v; break;
    case EM_F64: ((double *)buf)[off] = v; break;
    case EM_F16: ((uint16_t *)buf)[off] = em_f32_to_f16((float)v); break;
    case EM_BF16: ((uint16_t *)buf)[off] = em_f32_to_bf16((float)v); break;
    case EM_BOOL: ((uint8_t *)buf)[off] = v != 0; break;
    default: {
        int64_t i;
        if (v != v) i = 0;
        else if (v >= 9.2233720368547758e18) i = INT64_MAX;
        else if (v <= -9.2233720368547758e18) i = INT64_MIN;
        else i = (int64_t)v;
        ref_sti(buf, dt, off, i);
    }
    }
}

static inline int ref_is_float(em_dtype dt) {
    return dt == EM_F32 || dt == EM_F64 || dt == EM_F16 || dt == EM_BF16;
}

static inline int64_t ref_numel(const em_view *v) {
    int64_t n = 1;
    for (int d = 0; d < v->rank; d++) n *= v->shape[d];
    return n;
}

/** Element offset of the element with row-major linear index `lin` in view v. */
static inline int64_t ref_offset(const em_view *v, int64_t lin) {
    int64_t off = v->offset;
    for (int d = v->rank - 1; d >= 0; d--) {
        int64_t s = v->shape[d];
        if (s == 0) return v->offset;
        off += (lin % s) * v->strides[d];
        lin /= s;
    }
    return off;
}

/** Element offset of a multi-index in view v. */
static inline int64_t ref_offset_idx(const em_view *v, const int64_t *idx) {
    int64_t off = v->offset;
    for (int d = 0; d < v->rank; d++) off += idx[d] * v->strides[d];
    return off;
}

/* ---- a strided iterator over up to 4 views of one shape (the first view's shape) ----
 *
 *   ref_iter it; ref_iter_init(&it, 2, out, in);
 *   for (int64_t i = 0; i < it.numel; i++, ref_iter_next(&it)) {
 *       ... it.off[0] is out's element offset, it.off[1] is in's ...
 *   }
 */
typedef struct ref_iter {
    int n, rank;
    int64_t numel;
    int64_t shape[EM_MAX_RANK];
    int64_t idx[EM_MAX_RANK];
    int64_t strides[4][EM_MAX_RANK];
    int64_t off[4];
} ref_iter;

static inline void ref_iter_init4(ref_iter *it, int n, const em_view *const *vs) {
    it->n = n;
    it->rank = vs[0]->rank;
    it->numel = ref_numel(vs[0]);
    for (int d = 0; d < it->rank; d++) {
        it->shape[d] = vs[0]->shape[d];
        it->idx[d] = 0;
    }
    for (int k = 0; k < n; k++) {
        it->off[k] = vs[k]->offset;
        for (int d = 0; d < it->rank; d++) it->strides[k][d] = vs[k]->strides[d];
    }
}

static inline void ref_iter_init(ref_iter *it, int n, const em_view *a, const em_view *b) {
    const em_view *vs[2] = {a, b};
    ref_iter_init4(it, n, vs);
}

static inline void ref_iter_next(ref_iter *it) {
    for (int d = it->rank - 1; d >= 0; d--) {
        it->idx[d]++;
        for (int k = 0; k < it->n; k++) it->off[k] += it->strides[k][d];
        if (it->idx[d] < it->shape[d]) return;
        for (int k = 0; k < it->n; k++) it->off[k] -= it->strides[k][d] * it->shape[d];
        it->idx[d] = 0;
    }
}

/* ---- the kernels, one family a file ---- */
/* ref.c */
em_status ref_copy(void *ctx, const em_view *out, const em_view *in);
em_status ref_fill(void *ctx, const em_view *out, double value);
em_status ref_arange(void *ctx, const em_view *out, double start, double step);
/* random.c */
em_status ref_random(void *ctx, em_random_op op, const em_view *out, uint64_t seed,
                     const double *params);
/* elementwise.c */
/* fused.c (ABI 3) */
em_status ref_unary_backward(void *ctx, em_unary_op op, const em_view *gx, const em_view *x,
                             const em_view *y, const em_view *gy, const double *params);
em_status ref_adam_step(void *ctx, const em_view *param, const em_view *exp_avg,
                        const em_view *exp_avg_sq, const em_view *grad, const em_adam_args *a);
em_status ref_unary(void *ctx, em_unary_op op, const em_view *out, const em_view *in,
                    const double *params);
em_status ref_binary(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                     const em_view *b);
em_status ref_binary_scalar(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                            double s);
em_status ref_where(void *ctx, const em_view *out, const em_view *cond, const em_view *a,
                    const em_view *b);
/* reduce.c */
em_status ref_reduce(void *ctx, em_reduce_op op, const em_view *out, const em_view *in, int dim,
                     const double *params);
em_status ref_cumsum(void *ctx, const em_view *out, const em_view *in, int dim);
em_status ref_cumulative(void *ctx, em_cum_op op, const em_view *values, const em_view *indices,
                         const em_view *in, int dim);
em_status ref_softmax(void *ctx, const em_view *out, const em_view *in, int dim, bool log);
/* linalg.c */
em_status ref_matmul(void *ctx, const em_view *out, const em_view *a, const em_view *b);
em_status ref_quantize(void *ctx, const em_view *out, const em_view *x, const em_quant_scheme *s);
em_status ref_dequantize(void *ctx, const em_view *out, const em_view *q,
                         const em_quant_scheme *s);
em_status ref_qmatmul(void *ctx, const em_view *out, const em_view *a, const em_quant_scheme *as,
                      const em_view *b, const em_quant_scheme *bs);
/* index.c */
em_status ref_gather(void *ctx, const em_view *out, const em_view *in, int dim,
                     const em_view *index);
em_status ref_scatter_add(void *ctx, const em_view *out, int dim, const em_view *index,
                          const em_view *src);
em_status ref_index_select(void *ctx, const em_view *out, const em_view *in, int dim,
                           const em_view *index);
em_status ref_sort(void *ctx, const em_view *values, const em_view *indices, const em_view *in,
                   int dim, bool descending);
/* nn.c */
em_status ref_conv2d(void *ctx, const em_view *out, const em_view *x, const em_view *w,
                     const em_view *bias, const em_conv_args *a);
em_status ref_conv_transpose2d(void *ctx, const em_view *out, const em_view *x,
                               const em_view *w, const em_view *bias, const em_conv_args *a);
em_status ref_max_pool2d(void *ctx, const em_view *out, const em_view *indices,
                         const em_view *x, const em_pool_args *a);
em_status ref_avg_pool2d(void *ctx, const em_view *out, const em_view *x,
                         const em_pool_args *a);
em_status ref_adaptive_avg_pool2d(void *ctx, const em_view *out, const em_view *x);
em_status ref_layer_norm(void *ctx, const em_view *out, const em_view *x, const em_view *weight,
                         const em_view *bias, int64_t norm_numel, double eps);

/* norm.c */
em_status ref_batch_norm(void *ctx, const em_view *out, const em_view *save_mean,
                         const em_view *save_invstd, const em_view *x, const em_view *weight,
                         const em_view *bias, const em_view *running_mean,
                         const em_view *running_var, bool training, double momentum,
                         double eps);
em_status ref_batch_norm_backward(void *ctx, const em_view *gx, const em_view *gweight,
                                  const em_view *gbias, const em_view *gy, const em_view *x,
                                  const em_view *mean, const em_view *invstd,
                                  const em_view *weight, bool training);
em_status ref_group_norm(void *ctx, const em_view *out, const em_view *save_mean,
                         const em_view *save_invstd, const em_view *x, const em_view *weight,
                         const em_view *bias, int64_t groups, double eps);
em_status ref_rms_norm(void *ctx, const em_view *out, const em_view *save_invrms,
                       const em_view *x, const em_view *weight, int64_t norm_numel,
                       double eps);

/* attention.c */
em_status ref_sdpa(void *ctx, const em_view *out, const em_view *lse, const em_view *q,
                   const em_view *k, const em_view *v, const em_view *mask, bool causal,
                   double scale, double dropout_p, uint64_t seed);
em_status ref_sdpa_backward(void *ctx, const em_view *dq, const em_view *dk, const em_view *dv,
                            const em_view *q, const em_view *k, const em_view *v,
                            const em_view *mask, const em_view *out, const em_view *dout,
                            const em_view *lse, bool causal, double scale, double dropout_p,
                            uint64_t seed);

/* nn_backward.c */
em_status ref_conv2d_weight_grad(void *ctx, const em_view *gw, const em_view *x,
                                 const em_view *gy, const em_conv_args *a);
em_status ref_avg_pool2d_backward(void *ctx, const em_view *gx, const em_view *gy,
                                  const em_pool_args *a);
em_status ref_adaptive_avg_pool2d_backward(void *ctx, const em_view *gx, const em_view *gy);

#endif /* EMBER_REF_H */
