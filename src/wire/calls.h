/*
 * calls.h — the kernel slots of a backend whose kernels are recorded or sent, not run here
 * (remote, capture). Each slot packs its arguments into the wire form of a call and hands it
 * to the sink that the device's context starts with. Private to ember.
 */
#ifndef EMBER_WIRE_CALLS_H
#define EMBER_WIRE_CALLS_H

#include "wire/wire.h"

/** Where a device's kernel calls go: views[i] NULL is an absent view; ints and doubles hold
 *  the slot's rw_slots[slot].nints and .ndoubles values. The context of a backend that uses
 *  these slots starts with its sink. */
typedef em_status (*rw_sink)(void *ctx, rw_slot slot, int sub,
                             const em_view *const views[RW_MAX_VIEWS], const int64_t *ints,
                             const double *doubles);

static inline em_status rw_call(void *ctx, rw_slot slot, int sub,
                                const em_view *const views[RW_MAX_VIEWS], const int64_t *ints,
                                const double *doubles) {
    return (*(const rw_sink *)ctx)(ctx, slot, sub, views, ints, doubles);
}

/* The slots: each builds the call and hands it to rw_call. */
em_status rw_fill(void *ctx, const em_view *out, double value);
em_status rw_arange(void *ctx, const em_view *out, double start, double step);
em_status rw_random(void *ctx, em_random_op op, const em_view *out, uint64_t seed,
                    const double *params);
em_status rw_copy(void *ctx, const em_view *out, const em_view *in);
em_status rw_unary(void *ctx, em_unary_op op, const em_view *out, const em_view *in,
                   const double *params);
em_status rw_binary(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                    const em_view *b);
em_status rw_binary_scalar(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                           double s);
em_status rw_where(void *ctx, const em_view *out, const em_view *cond, const em_view *a,
                   const em_view *b);
em_status rw_reduce(void *ctx, em_reduce_op op, const em_view *out, const em_view *in, int dim,
                    const double *params);
em_status rw_cumsum(void *ctx, const em_view *out, const em_view *in, int dim);
em_status rw_cumulative(void *ctx, em_cum_op op, const em_view *values, const em_view *indices,
                        const em_view *in, int dim);
em_status rw_softmax(void *ctx, const em_view *out, const em_view *in, int dim, bool log);
em_status rw_matmul(void *ctx, const em_view *out, const em_view *a, const em_view *b);
em_status rw_gather(void *ctx, const em_view *out, const em_view *in, int dim,
                    const em_view *index);
em_status rw_scatter_add(void *ctx, const em_view *out, int dim, const em_view *index,
                         const em_view *src);
em_status rw_index_select(void *ctx, const em_view *out, const em_view *in, int dim,
                          const em_view *index);
em_status rw_sort(void *ctx, const em_view *values, const em_view *indices, const em_view *in,
                  int dim, bool descending);
em_status rw_conv2d(void *ctx, const em_view *out, const em_view *x, const em_view *w,
                    const em_view *bias, const em_conv_args *a);
em_status rw_conv_transpose2d(void *ctx, const em_view *out, const em_view *x, const em_view *w,
                              const em_view *bias, const em_conv_args *a);
em_status rw_max_pool2d(void *ctx, const em_view *out, const em_view *indices, const em_view *x,
                        const em_pool_args *a);
em_status rw_avg_pool2d(void *ctx, const em_view *out, const em_view *x, const em_pool_args *a);
em_status rw_adaptive_avg_pool2d(void *ctx, const em_view *out, const em_view *x);
em_status rw_conv2d_weight_grad(void *ctx, const em_view *gw, const em_view *x, const em_view *gy,
                                const em_conv_args *a);
em_status rw_avg_pool2d_backward(void *ctx, const em_view *gx, const em_view *gy,
                                 const em_pool_args *a);
em_status rw_adaptive_avg_pool2d_backward(void *ctx, const em_view *gx, const em_view *gy);
em_status rw_layer_norm(void *ctx, const em_view *out, const em_view *x, const em_view *weight,
                        const em_view *bias, int64_t norm_numel, double eps);

/* The quantized slots (ABI 5): the remote backend's only; the capture backend leaves them
 * NULL, so that its core reports them unsupported. */
em_status rw_quantize(void *ctx, const em_view *out, const em_view *x, const em_quant_scheme *s);
em_status rw_dequantize(void *ctx, const em_view *out, const em_view *q, const em_quant_scheme *s);
em_status rw_qmatmul(void *ctx, const em_view *out, const em_view *a, const em_quant_scheme *as,
                     const em_view *b, const em_quant_scheme *bs);

/** Conv and pool arguments as the 9 wire ints (see docs/remote-protocol.md). */
void rw_conv_ints(const em_conv_args *a, int64_t ints[9]);
void rw_pool_ints(const em_pool_args *a, int64_t ints[9]);


/** The kernel slots above, as designated initializers of an em_backend_ops. */
#define RW_CALL_SLOTS                                                                          \
    .fill = rw_fill, .arange = rw_arange, .random = rw_random, .copy = rw_copy,                \
    .unary = rw_unary, .binary = rw_binary, .binary_scalar = rw_binary_scalar,                 \
    .where = rw_where, .reduce = rw_reduce, .cumsum = rw_cumsum,                               \
    .cumulative = rw_cumulative, .softmax = rw_softmax, .matmul = rw_matmul,                   \
    .gather = rw_gather, .scatter_add = rw_scatter_add, .index_select = rw_index_select,       \
    .sort = rw_sort, .conv2d = rw_conv2d, .conv_transpose2d = rw_conv_transpose2d,             \
    .max_pool2d = rw_max_pool2d, .avg_pool2d = rw_avg_pool2d,                                  \
    .adaptive_avg_pool2d = rw_adaptive_avg_pool2d,                                             \
    .conv2d_weight_grad = rw_conv2d_weight_grad, .avg_pool2d_backward = rw_avg_pool2d_backward, \
    .adaptive_avg_pool2d_backward = rw_adaptive_avg_pool2d_backward,                           \
    .layer_norm = rw_layer_norm

/** The quantized slots, likewise (the remote backend's table only). */
#define RW_QUANT_SLOTS .quantize = rw_quantize, .dequantize = rw_dequantize, .qmatmul = rw_qmatmul

#endif /* EMBER_WIRE_CALLS_H */
