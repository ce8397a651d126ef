/*
 * The nn family's wrappers for the conformance runner: convolutions, pooling, embedding,
 * layer_norm, dropout, cross_entropy, and the random ops.
 *
 * Params:
 *   conv1d / conv2d / conv_transpose2d: inputs x, weight[, bias]; "stride", "padding",
 *     "dilation", "output_padding" (lists of 1 or 2 ints; one value is used for both axes),
 *     "groups".
 *   max_pool2d / avg_pool2d: "kernel", "stride", "padding", "dilation" (lists as above),
 *     "ceil_mode", "count_include_pad", "indices" (max: also return the indices).
 *   adaptive_avg_pool2d: "output" [oh, ow].
 *   embedding: inputs weight, idx.   cross_entropy: inputs logits, target.
 *   layer_norm: inputs x[, weight][, bias]; "ndim", "eps", "weight" and "bias" (bools saying
 *     which of the extra inputs are present; default: weight if 2 inputs, both if 3).
 *   dropout: "p", "training", "seed".
 *   rand_uniform / rand_normal / rand_bernoulli: no inputs (p->dev is the device); "shape",
 *     "dtype", "seed", "lo", "hi", "mean", "std", "p".
 */
#include <stddef.h>

#include "conformance.h"

/** Reads a pair param: absent leaves out as is, one value fills both. */
static void pair(const conf_params *p, const char *key, int64_t out[2]) {
    int64_t v[2];
    int n = conf_ints(p, key, v, 2);
    if (n == 1) out[0] = out[1] = v[0];
    else if (n >= 2) out[0] = v[0], out[1] = v[1];
}

static em_conv_params conv_params(const conf_params *p) {
    em_conv_params c = em_conv_params_default();
    pair(p, "stride", c.stride);
    pair(p, "padding", c.padding);
    pair(p, "dilation", c.dilation);
    pair(p, "output_padding", c.output_padding);
    c.groups = conf_int(p, "groups", 1);
    return c;
}

static em_pool_params pool_params(const conf_params *p) {
    em_pool_params q = {{1, 1}, {0, 0}, {0, 0}, {0, 0}, false, true};
    pair(p, "kernel", q.kernel);
    pair(p, "stride", q.stride);
    pair(p, "padding", q.padding);
    pair(p, "dilation", q.dilation);
    q.ceil_mode = conf_bool(p, "ceil_mode", false);
    q.count_include_pad = conf_bool(p, "count_include_pad", true);
    return q;
}

typedef em_status (*conv_fn)(const em_tensor *, const em_tensor *, const em_tensor *,
                             const em_conv_params *, em_tensor **);

static em_status conv(conv_fn f, em_tensor *const *in, int nin, const conf_params *p,
                      em_tensor **out, int *nout) {
    em_conv_params c = conv_params(p);
    *nout = 1;
    return f(in[0], in[1], nin > 2 ? in[2] : NULL, &c, &out[0]);
}

static em_status w_conv1d(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                          int *nout) {
    return conv(em_conv1d, in, nin, p, out, nout);
}

static em_status w_conv2d(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                          int *nout) {
    return conv(em_conv2d, in, nin, p, out, nout);
}

static em_status w_conv_transpose2d(em_tensor *const *in, int nin, const conf_params *p,
                                    em_tensor **out, int *nout) {
    return conv(em_conv_transpose2d, in, nin, p, out, nout);
}

static em_status w_max_pool2d(em_tensor *const *in, int nin, const conf_params *p,
                              em_tensor **out, int *nout) {
    (void)nin;
    em_pool_params q = pool_params(p);
    bool idx = conf_bool(p, "indices", false);
    *nout = idx ? 2 : 1;
    return em_max_pool2d(in[0], &q, &out[0], idx ? &out[1] : NULL);
}

static em_status w_avg_pool2d(em_tensor *const *in, int nin, const conf_params *p,
                              em_tensor **out, int *nout) {
    (void)nin;
    em_pool_params q = pool_params(p);
    *nout = 1;
    return em_avg_pool2d(in[0], &q, &out[0]);
}

static em_status w_adaptive_avg_pool2d(em_tensor *const *in, int nin, const conf_params *p,
                                       em_tensor **out, int *nout) {
    (void)nin;
    int64_t o[2] = {1, 1};
    pair(p, "output", o);
    *nout = 1;
    return em_adaptive_avg_pool2d(in[0], o[0], o[1], &out[0]);
}

static em_status w_embedding(em_tensor *const *in, int nin, const conf_params *p,
                             em_tensor **out, int *nout) {
    (void)nin, (void)p;
    *nout = 1;
    return em_embedding(in[0], in[1], &out[0]);
}

static em_status w_layer_norm(em_tensor *const *in, int nin, const conf_params *p,
                              em_tensor **out, int *nout) {
    bool hw = conf_bool(p, "weight", nin >= 2), hb = conf_bool(p, "bias", nin >= 3);
    int k = 1;
    const em_tensor *w = hw ? in[k++] : NULL;
    const em_tensor *b = hb ? in[k++] : NULL;
    *nout = 1;
    return em_layer_norm(in[0], (int)conf_int(p, "ndim", 1), w, b, conf_f64(p, "eps", 1e-5),
                         &out[0]);
}

static em_status w_dropout(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                           int *nout) {
    (void)nin;
    *nout = 1;
    return em_dropout(in[0], conf_f64(p, "p", 0.5), conf_bool(p, "training", true),
                      (uint64_t)conf_int(p, "seed", 0), &out[0]);
}

static em_status w_cross_entropy(em_tensor *const *in, int nin, const conf_params *p,
                                 em_tensor **out, int *nout) {
    (void)nin, (void)p;
    *nout = 1;
    return em_cross_entropy(in[0], in[1], &out[0]);
}

/** The shape param of the random ops (rank = its length; absent: 0-d). */
static int rand_shape(const conf_params *p, int64_t shape[EM_MAX_RANK]) {
    int r = conf_ints(p, "shape", shape, EM_MAX_RANK);
    return r < 0 ? 0 : r;
}

static em_status w_rand_uniform(em_tensor *const *in, int nin, const conf_params *p,
                                em_tensor **out, int *nout) {
    (void)in, (void)nin;
    int64_t shape[EM_MAX_RANK];
    int r = rand_shape(p, shape);
    *nout = 1;
    return em_rand_uniform(shape, r, (em_dtype)conf_int(p, "dtype", EM_F32),
                           conf_f64(p, "lo", 0.0), conf_f64(p, "hi", 1.0),
                           (uint64_t)conf_int(p, "seed", 0), p->dev, &out[0]);
}

static em_status w_rand_normal(em_tensor *const *in, int nin, const conf_params *p,
                               em_tensor **out, int *nout) {
    (void)in, (void)nin;
    int64_t shape[EM_MAX_RANK];
    int r = rand_shape(p, shape);
    *nout = 1;
    return em_rand_normal(shape, r, (em_dtype)conf_int(p, "dtype", EM_F32),
                          conf_f64(p, "mean", 0.0), conf_f64(p, "std", 1.0),
                          (uint64_t)conf_int(p, "seed", 0), p->dev, &out[0]);
}

static em_status w_rand_bernoulli(em_tensor *const *in, int nin, const conf_params *p,
                                  em_tensor **out, int *nout) {
    (void)in, (void)nin;
    int64_t shape[EM_MAX_RANK];
    int r = rand_shape(p, shape);
    *nout = 1;
    return em_rand_bernoulli(shape, r, (em_dtype)conf_int(p, "dtype", EM_F32),
                             conf_f64(p, "p", 0.5), (uint64_t)conf_int(p, "seed", 0), p->dev,
                             &out[0]);
}

static em_status w_sdpa(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                        int *nout) {
    *nout = 1;
    return em_scaled_dot_product_attention(in[0], in[1], in[2], nin > 3 ? in[3] : NULL,
                                           conf_f64(p, "dropout_p", 0.0),
                                           conf_bool(p, "causal", false),
                                           conf_f64(p, "scale", 0.0),
                                           (uint64_t)conf_int(p, "seed", 0), &out[0]);
}

/* sdpa with the float mask where(m, 0.75, -1.25) made from the bool input m: a float mask
 * outside the graph (no gradient), so the fused path runs under autodiff too */
static em_status w_sdpa_fmask(em_tensor *const *in, int nin, const conf_params *p,
                              em_tensor **out, int *nout) {
    (void)nin;
    *nout = 1;
    em_tensor *f = NULL, *f2 = NULL, *m = NULL;
    em_status s = em_cast(in[3], em_tensor_dtype(in[0]), &f);
    if (s == EM_OK) s = em_mul_scalar(f, 2.0, &f2);
    if (s == EM_OK) s = em_sub_scalar(f2, 1.25, &m);
    if (s == EM_OK)
        s = em_scaled_dot_product_attention(in[0], in[1], in[2], m, 0.0,
                                            conf_bool(p, "causal", false),
                                            conf_f64(p, "scale", 0.0), 0, &out[0]);
    em_tensor_release(f);
    em_tensor_release(f2);
    em_tensor_release(m);
    return s;
}

const conf_op conf_ops_nn[] = {
    {"conv1d", w_conv1d},
    {"conv2d", w_conv2d},
    {"conv_transpose2d", w_conv_transpose2d},
    {"max_pool2d", w_max_pool2d},
    {"avg_pool2d", w_avg_pool2d},
    {"adaptive_avg_pool2d", w_adaptive_avg_pool2d},
    {"embedding", w_embedding},
    {"layer_norm", w_layer_norm},
    {"dropout", w_dropout},
    {"cross_entropy", w_cross_entropy},
    {"rand_uniform", w_rand_uniform},
    {"rand_normal", w_rand_normal},
    {"rand_bernoulli", w_rand_bernoulli},
    {"sdpa", w_sdpa},
    {"sdpa_fmask", w_sdpa_fmask},
    {NULL, NULL},
};
