/*
 * client.h — private interface of the remote backend's client side (client.c: connections and
 * memory; client_kernels.c: the kernel slots, each one pipelined message).
 */
#ifndef EMBER_REMOTE_CLIENT_H
#define EMBER_REMOTE_CLIENT_H

#include "backends/remote/wire.h"

/** What em_view.buf points to on this backend. */
typedef struct rc_buf {
    uint64_t id;
    size_t bytes;
} rc_buf;

/** The buffer id of a view. */
static inline uint64_t rc_id(const em_view *v) { return ((const rc_buf *)v->buf)->id; }

/** Appends one kernel message on connection ctx (views[i] NULL: absent). Returns
 *  EM_ERR_UNSUPPORTED (synchronously) when the hosted device lacks the slot, EM_ERR_STATE
 *  when disconnected, EM_ERR_IO when the connection broke; otherwise EM_OK: the kernel's own
 *  failure is reported at the next read or sync. */
em_status rc_kernel(void *ctx, rw_slot slot, int sub, const em_view *const views[RW_MAX_VIEWS],
                    const int64_t *ints, const double *doubles);

/* client_kernels.c: the slots of em_remote_backend_ops */
em_status rc_fill(void *ctx, const em_view *out, double value);
em_status rc_arange(void *ctx, const em_view *out, double start, double step);
em_status rc_random(void *ctx, em_random_op op, const em_view *out, uint64_t seed,
                    const double *params);
em_status rc_copy(void *ctx, const em_view *out, const em_view *in);
em_status rc_unary(void *ctx, em_unary_op op, const em_view *out, const em_view *in,
                   const double *params);
em_status rc_binary(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                    const em_view *b);
em_status rc_binary_scalar(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                           double s);
em_status rc_where(void *ctx, const em_view *out, const em_view *cond, const em_view *a,
                   const em_view *b);
em_status rc_reduce(void *ctx, em_reduce_op op, const em_view *out, const em_view *in, int dim,
                    const double *params);
em_status rc_cumsum(void *ctx, const em_view *out, const em_view *in, int dim);
em_status rc_cumulative(void *ctx, em_cum_op op, const em_view *values, const em_view *indices,
                        const em_view *in, int dim);
em_status rc_softmax(void *ctx, const em_view *out, const em_view *in, int dim, bool log);
em_status rc_matmul(void *ctx, const em_view *out, const em_view *a, const em_view *b);
em_status rc_gather(void *ctx, const em_view *out, const em_view *in, int dim,
                    const em_view *index);
em_status rc_scatter_add(void *ctx, const em_view *out, int dim, const em_view *index,
                         const em_view *src);
em_status rc_index_select(void *ctx, const em_view *out, const em_view *in, int dim,
                          const em_view *index);
em_status rc_sort(void *ctx, const em_view *values, const em_view *indices, const em_view *in,
                  int dim, bool descending);
em_status rc_conv2d(void *ctx, const em_view *out, const em_view *x, const em_view *w,
                    const em_view *bias, const em_conv_args *a);
em_status rc_conv_transpose2d(void *ctx, const em_view *out, const em_view *x, const em_view *w,
                              const em_view *bias, const em_conv_args *a);
em_status rc_max_pool2d(void *ctx, const em_view *out, const em_view *indices, const em_view *x,
                        const em_pool_args *a);
em_status rc_avg_pool2d(void *ctx, const em_view *out, const em_view *x, const em_pool_args *a);
em_status rc_adaptive_avg_pool2d(void *ctx, const em_view *out, const em_view *x);
em_status rc_conv2d_weight_grad(void *ctx, const em_view *gw, const em_view *x, const em_view *gy,
                                const em_conv_args *a);
em_status rc_avg_pool2d_backward(void *ctx, const em_view *gx, const em_view *gy,
                                 const em_pool_args *a);
em_status rc_adaptive_avg_pool2d_backward(void *ctx, const em_view *gx, const em_view *gy);
em_status rc_layer_norm(void *ctx, const em_view *out, const em_view *x, const em_view *weight,
                        const em_view *bias, int64_t norm_numel, double eps);

/** Conv and pool arguments as the 9 wire ints (see docs/remote-protocol.md). */
void rw_conv_ints(const em_conv_args *a, int64_t ints[9]);
void rw_pool_ints(const em_pool_args *a, int64_t ints[9]);

#endif /* EMBER_REMOTE_CLIENT_H */
