/* calls.c — kernel slots that turn each call into an rw_kernel handed to the device's sink:
 * the remote backend sends it as one message, the capture backend appends it to a graph. */
#include "wire/calls.h"

#define RC_V(...) ((const em_view *const[RW_MAX_VIEWS]){__VA_ARGS__})

void rw_conv_ints(const em_conv_args *a, int64_t ints[9]) {
    for (int i = 0; i < 2; i++) {
        ints[i] = a->stride[i];
        ints[2 + i] = a->padding[i];
        ints[4 + i] = a->dilation[i];
        ints[6 + i] = a->output_padding[i];
    }
    ints[8] = a->groups;
}

void rw_pool_ints(const em_pool_args *a, int64_t ints[9]) {
    for (int i = 0; i < 2; i++) {
        ints[i] = a->kernel[i];
        ints[2 + i] = a->stride[i];
        ints[4 + i] = a->padding[i];
        ints[6 + i] = a->dilation[i];
    }
    ints[8] = a->count_include_pad ? 1 : 0;
}

em_status rw_fill(void *ctx, const em_view *out, double value) {
    return rw_call(ctx, RW_K_FILL, 0, RC_V(out), NULL, &value);
}

em_status rw_arange(void *ctx, const em_view *out, double start, double step) {
    double d[2] = {start, step};
    return rw_call(ctx, RW_K_ARANGE, 0, RC_V(out), NULL, d);
}

em_status rw_random(void *ctx, em_random_op op, const em_view *out, uint64_t seed,
                    const double *params) {
    int64_t i = (int64_t)seed;
    double d[2] = {params ? params[0] : 0, params && op != EM_RAND_BERNOULLI ? params[1] : 0};
    return rw_call(ctx, RW_K_RANDOM, (int)op, RC_V(out), &i, d);
}

em_status rw_copy(void *ctx, const em_view *out, const em_view *in) {
    return rw_call(ctx, RW_K_COPY, 0, RC_V(out, in), NULL, NULL);
}

em_status rw_unary(void *ctx, em_unary_op op, const em_view *out, const em_view *in,
                   const double *params) {
    double d[3] = {0, 0, 0}; /* clamp and softplus: two params; nan_to_num: three */
    const int np = op == EM_UN_NAN_TO_NUM ? 3 : (op == EM_UN_CLAMP || op == EM_UN_SOFTPLUS) ? 2 : 0;
    for (int k = 0; k < np && params; k++) d[k] = params[k];
    return rw_call(ctx, RW_K_UNARY, (int)op, RC_V(out, in), NULL, d);
}

em_status rw_binary(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                    const em_view *b) {
    return rw_call(ctx, RW_K_BINARY, (int)op, RC_V(out, a, b), NULL, NULL);
}

em_status rw_binary_scalar(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                           double s) {
    return rw_call(ctx, RW_K_BINARY_SCALAR, (int)op, RC_V(out, a), NULL, &s);
}

em_status rw_where(void *ctx, const em_view *out, const em_view *cond, const em_view *a,
                   const em_view *b) {
    return rw_call(ctx, RW_K_WHERE, 0, RC_V(out, cond, a, b), NULL, NULL);
}

em_status rw_reduce(void *ctx, em_reduce_op op, const em_view *out, const em_view *in, int dim,
                    const double *params) {
    int64_t i = dim;
    double d = op == EM_RED_VAR && params ? params[0] : 0;
    return rw_call(ctx, RW_K_REDUCE, (int)op, RC_V(out, in), &i, &d);
}

em_status rw_cumsum(void *ctx, const em_view *out, const em_view *in, int dim) {
    int64_t i = dim;
    return rw_call(ctx, RW_K_CUMSUM, 0, RC_V(out, in), &i, NULL);
}

em_status rw_cumulative(void *ctx, em_cum_op op, const em_view *values, const em_view *indices,
                        const em_view *in, int dim) {
    int64_t i = dim;
    return rw_call(ctx, RW_K_CUMULATIVE, (int)op, RC_V(values, indices, in), &i, NULL);
}

em_status rw_softmax(void *ctx, const em_view *out, const em_view *in, int dim, bool log) {
    int64_t i[2] = {dim, log ? 1 : 0};
    return rw_call(ctx, RW_K_SOFTMAX, 0, RC_V(out, in), i, NULL);
}

em_status rw_matmul(void *ctx, const em_view *out, const em_view *a, const em_view *b) {
    return rw_call(ctx, RW_K_MATMUL, 0, RC_V(out, a, b), NULL, NULL);
}

em_status rw_gather(void *ctx, const em_view *out, const em_view *in, int dim,
                    const em_view *index) {
    int64_t i = dim;
    return rw_call(ctx, RW_K_GATHER, 0, RC_V(out, in, index), &i, NULL);
}

em_status rw_scatter_add(void *ctx, const em_view *out, int dim, const em_view *index,
                         const em_view *src) {
    int64_t i = dim;
    return rw_call(ctx, RW_K_SCATTER_ADD, 0, RC_V(out, index, src), &i, NULL);
}

em_status rw_index_select(void *ctx, const em_view *out, const em_view *in, int dim,
                          const em_view *index) {
    int64_t i = dim;
    return rw_call(ctx, RW_K_INDEX_SELECT, 0, RC_V(out, in, index), &i, NULL);
}

em_status rw_sort(void *ctx, const em_view *values, const em_view *indices, const em_view *in,
                  int dim, bool descending) {
    int64_t i[2] = {dim, descending ? 1 : 0};
    return rw_call(ctx, RW_K_SORT, 0, RC_V(values, indices, in), i, NULL);
}

em_status rw_conv2d(void *ctx, const em_view *out, const em_view *x, const em_view *w,
                    const em_view *bias, const em_conv_args *a) {
    int64_t i[9];
    rw_conv_ints(a, i);
    return rw_call(ctx, RW_K_CONV2D, 0, RC_V(out, x, w, bias), i, NULL);
}

em_status rw_conv_transpose2d(void *ctx, const em_view *out, const em_view *x, const em_view *w,
                              const em_view *bias, const em_conv_args *a) {
    int64_t i[9];
    rw_conv_ints(a, i);
    return rw_call(ctx, RW_K_CONV_TRANSPOSE2D, 0, RC_V(out, x, w, bias), i, NULL);
}

em_status rw_max_pool2d(void *ctx, const em_view *out, const em_view *indices, const em_view *x,
                        const em_pool_args *a) {
    int64_t i[9];
    rw_pool_ints(a, i);
    return rw_call(ctx, RW_K_MAX_POOL2D, 0, RC_V(out, indices, x), i, NULL);
}

em_status rw_avg_pool2d(void *ctx, const em_view *out, const em_view *x, const em_pool_args *a) {
    int64_t i[9];
    rw_pool_ints(a, i);
    return rw_call(ctx, RW_K_AVG_POOL2D, 0, RC_V(out, x), i, NULL);
}

em_status rw_adaptive_avg_pool2d(void *ctx, const em_view *out, const em_view *x) {
    return rw_call(ctx, RW_K_ADAPTIVE_AVG_POOL2D, 0, RC_V(out, x), NULL, NULL);
}

em_status rw_conv2d_weight_grad(void *ctx, const em_view *gw, const em_view *x, const em_view *gy,
                                const em_conv_args *a) {
    int64_t i[9];
    rw_conv_ints(a, i);
    return rw_call(ctx, RW_K_CONV2D_WEIGHT_GRAD, 0, RC_V(gw, x, gy), i, NULL);
}

em_status rw_avg_pool2d_backward(void *ctx, const em_view *gx, const em_view *gy,
                                 const em_pool_args *a) {
    int64_t i[9];
    rw_pool_ints(a, i);
    return rw_call(ctx, RW_K_AVG_POOL2D_BACKWARD, 0, RC_V(gx, gy), i, NULL);
}

em_status rw_adaptive_avg_pool2d_backward(void *ctx, const em_view *gx, const em_view *gy) {
    return rw_call(ctx, RW_K_ADAPTIVE_AVG_POOL2D_BACKWARD, 0, RC_V(gx, gy), NULL, NULL);
}

em_status rw_layer_norm(void *ctx, const em_view *out, const em_view *x, const em_view *weight,
                        const em_view *bias, int64_t norm_numel, double eps) {
    return rw_call(ctx, RW_K_LAYER_NORM, 0, RC_V(out, x, weight, bias), &norm_numel, &eps);
}

em_status rw_quantize(void *ctx, const em_view *out, const em_view *x, const em_quant_scheme *s) {
    int64_t i[RW_SCHEME_INTS];
    double d;
    rw_scheme_put(s, i, &d);
    return rw_call(ctx, RW_K_QUANTIZE, 0, RC_V(out, x), i, &d);
}

em_status rw_dequantize(void *ctx, const em_view *out, const em_view *q, const em_quant_scheme *s) {
    int64_t i[RW_SCHEME_INTS];
    double d;
    rw_scheme_put(s, i, &d);
    return rw_call(ctx, RW_K_DEQUANTIZE, 0, RC_V(out, q), i, &d);
}

em_status rw_qmatmul(void *ctx, const em_view *out, const em_view *a, const em_quant_scheme *as,
                     const em_view *b, const em_quant_scheme *bs) {
    int64_t i[2 * RW_SCHEME_INTS];
    double d[2];
    rw_scheme_put(as, i, &d[0]); /* NULL (an f32 a): all zeros */
    rw_scheme_put(bs, i + RW_SCHEME_INTS, &d[1]);
    return rw_call(ctx, RW_K_QMATMUL, 0, RC_V(out, a, b), i, d);
}
