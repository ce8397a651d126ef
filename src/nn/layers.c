/* layers.c — ember's built-in layers, each an em_module_class written on the public module
 * interface (module.c) as a user's module is: Linear, Conv1d, Conv2d, MaxPool2d, AvgPool2d,
 * AdaptiveAvgPool2d, Flatten, Dropout, LayerNorm, Embedding, ReLU, GELU, Identity,
 * Sequential, Residual; their parameters and initialization. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_internal.h"

em_module_opts em_module_opts_default(em_device dev, uint64_t seed) {
    em_module_opts o;
    o.device = dev;
    o.dtype = EM_F32;
    o.init = EM_INIT_KAIMING_UNIFORM;
    o.seed = seed;
    return o;
}

/* A seed for the k-th tensor of a module (splitmix64 of seed and k). */
uint64_t nn_derive(uint64_t seed, uint64_t k) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ull * (k + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

em_status nn_param(const char *fn, const em_module_opts *o, const int64_t *shape, int rank,
                   double bound, double fill, uint64_t seed, em_tensor **out) {
    em_tensor *t = NULL;
    em_status s = bound >= 0
                      ? em_rand_uniform(shape, rank, o->dtype, -bound, bound, seed, o->device, &t)
                      : em_full(shape, rank, fill, o->dtype, o->device, &t);
    if (s == EM_OK && o->device.autodiff) s = em_tensor_require_grad(t);
    if (s != EM_OK) {
        em_tensor_release(t);
        return nn_context(s, "%s: creating a parameter", fn);
    }
    *out = t;
    return EM_OK;
}

em_status nn_new(const char *fn, const em_module_class *cls, size_t data_size, em_module **out,
                 void **data) {
    if (!out) return nn_null(fn, "out");
    void *d = NULL;
    if (data_size) {
        d = calloc(1, data_size);
        if (!d) return em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
    }
    em_status s = em_module_create(cls, d, out);
    if (s != EM_OK) {
        free(d);
        return s;
    }
    if (data) *data = d;
    return EM_OK;
}

em_status nn_check_opts(const char *fn, const em_module_opts *opts, em_module_opts *o) {
    *o = opts ? *opts : em_module_opts_default(em_device_default(), 0);
    if (em_dtype_kind(o->dtype) != EM_KIND_FLOAT || em_dtype_size(o->dtype) == 0)
        return em_backend_set_error(EM_ERR_DTYPE, "%s: parameters need a float dtype, got %s", fn,
                                    em_dtype_name(o->dtype));
    if (o->init != EM_INIT_KAIMING_UNIFORM && o->init != EM_INIT_XAVIER_UNIFORM)
        return em_backend_set_error(EM_ERR_ARG, "%s: unknown init %d", fn, (int)o->init);
    return EM_OK;
}

/* weight and (optional) bias of a layer with the given fans. */
static em_status nn_weight_bias(const char *fn, em_module *m, const em_module_opts *o,
                                const int64_t *wshape, int wrank, int64_t fan_in,
                                int64_t fan_out, bool bias) {
    double kb = 1.0 / sqrt((double)fan_in);
    double wb = o->init == EM_INIT_XAVIER_UNIFORM ? sqrt(6.0 / (double)(fan_in + fan_out)) : kb;
    em_tensor *t = NULL;
    NN_TRY(nn_param(fn, o, wshape, wrank, wb, 0, nn_derive(o->seed, 0), &t));
    NN_TRY(em_module_add_param(m, "weight", t));
    if (bias) {
        bool zero = o->init == EM_INIT_XAVIER_UNIFORM;
        NN_TRY(nn_param(fn, o, wshape, 1, zero ? -1 : kb, 0, nn_derive(o->seed, 1), &t));
        NN_TRY(em_module_add_param(m, "bias", t));
    }
    return EM_OK;
}

/* Finishes a constructor: on failure the half-made module goes. */
static em_status nn_done(em_status s, em_module *m, em_module **out) {
    if (s != EM_OK) {
        em_module_release(m);
        return s;
    }
    *out = m;
    return EM_OK;
}

/* nn_done for a constructor that drew numbers from opts: the next layer gets others. */
static em_status nn_done_drawn(em_status s, em_module *m, em_module **out,
                               em_module_opts *opts) {
    s = nn_done(s, m, out);
    if (s == EM_OK && opts) opts->seed = nn_derive(opts->seed, 0x5eedull);
    return s;
}

static const char *nn_shape_str(const em_tensor *t, char *buf, size_t cap) {
    int r = em_tensor_rank(t);
    const int64_t *sh = em_tensor_shape(t);
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < r && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, d ? ", %lld" : "%lld", (long long)sh[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
    return buf;
}

/* EM_ERR_SHAPE unless x has rank in [lo, hi] and size `want` at dim `dim` (from the end when
 * negative); want < 0: any size. */
static em_status nn_expect(const em_tensor *x, int lo, int hi, int dim, int64_t want,
                           const char *what) {
    int r = em_tensor_rank(x);
    char sb[160];
    if (r < lo || r > hi) {
        if (lo == hi)
            return em_backend_set_error(EM_ERR_SHAPE, "the input must have rank %d (%s), got %s",
                                        lo, what, nn_shape_str(x, sb, sizeof sb));
        return em_backend_set_error(EM_ERR_SHAPE, "the input must have rank %d to %d (%s), got %s",
                                    lo, hi, what, nn_shape_str(x, sb, sizeof sb));
    }
    int d = dim < 0 ? r + dim : dim;
    if (want >= 0 && em_tensor_shape(x)[d] != want)
        return em_backend_set_error(EM_ERR_SHAPE, "the input's dim %d must be %lld (%s), got %s",
                                    d, (long long)want, what, nn_shape_str(x, sb, sizeof sb));
    return EM_OK;
}

/* ---- Linear ---- */

typedef struct linear_data {
    int64_t in, out;
} linear_data;

static em_status linear_forward(em_module *self, const em_tensor *x, bool training,
                                em_tensor **y) {
    (void)training;
    const linear_data *d = em_module_data(self);
    NN_TRY(nn_expect(x, 1, EM_MAX_RANK, -1, d->in, "[..., in_features]"));
    em_tensor *w = em_module_get(self, "weight"), *b = em_module_get(self, "bias");
    em_tensor *wt = NULL, *xw = NULL;
    /* a quantized weight (em_params_quantize) too: W^T is a view whose blocks run along the
     * reduction, the form em_matmul multiplies without a dequantized copy */
    em_status s = em_transpose(w, 0, 1, &wt);
    if (s == EM_OK) s = em_matmul(x, wt, &xw);
    em_tensor_release(wt);
    if (s != EM_OK) return s;
    if (!b) {
        *y = xw;
        return EM_OK;
    }
    return em_add_(xw, b, y);
}

static void linear_describe(const em_module *self, char *buf, size_t cap) {
    const linear_data *d = em_module_data(self);
    snprintf(buf, cap, "in %lld, out %lld%s", (long long)d->in, (long long)d->out,
             em_module_get(self, "bias") ? ", bias" : "");
}

static const em_module_class linear_class = {"Linear", linear_forward, linear_describe, free};

em_status em_nn_linear(int64_t in_features, int64_t out_features, bool bias,
                       em_module_opts *opts, em_module **out) {
    static const char fn[] = "em_nn_linear";
    if (!out) return nn_null(fn, "out");
    if (in_features < 1 || out_features < 1)
        return em_backend_set_error(EM_ERR_ARG, "%s: sizes must be >= 1, got in %lld, out %lld",
                                    fn, (long long)in_features, (long long)out_features);
    em_module_opts o;
    NN_TRY(nn_check_opts(fn, opts, &o));
    em_module *m = NULL;
    linear_data *d = NULL;
    NN_TRY(nn_new(fn, &linear_class, sizeof *d, &m, (void **)&d));
    d->in = in_features;
    d->out = out_features;
    int64_t ws[2] = {out_features, in_features};
    return nn_done_drawn(nn_weight_bias(fn, m, &o, ws, 2, in_features, out_features, bias), m,
                         out, opts);
}

/* ---- Conv1d, Conv2d ---- */

typedef struct conv_data {
    int dims; /* 1 or 2 */
    int64_t in, out, kernel, stride, padding;
} conv_data;

static em_status conv_forward(em_module *self, const em_tensor *x, bool training, em_tensor **y) {
    (void)training;
    const conv_data *d = em_module_data(self);
    NN_TRY(nn_expect(x, d->dims + 2, d->dims + 2, 1, d->in,
                     d->dims == 1 ? "[N, in_channels, L]" : "[N, in_channels, H, W]"));
    em_conv_params p = em_conv_params_default();
    p.stride[0] = p.stride[1] = d->stride;
    p.padding[0] = p.padding[1] = d->padding;
    em_tensor *w = em_module_get(self, "weight"), *b = em_module_get(self, "bias");
    return d->dims == 1 ? em_conv1d(x, w, b, &p, y) : em_conv2d(x, w, b, &p, y);
}

static void conv_describe(const em_module *self, char *buf, size_t cap) {
    const conv_data *d = em_module_data(self);
    snprintf(buf, cap, "in %lld, out %lld, kernel %lld, stride %lld, padding %lld%s",
             (long long)d->in, (long long)d->out, (long long)d->kernel, (long long)d->stride,
             (long long)d->padding, em_module_get(self, "bias") ? ", bias" : "");
}

static const em_module_class conv1d_class = {"Conv1d", conv_forward, conv_describe, free};
static const em_module_class conv2d_class = {"Conv2d", conv_forward, conv_describe, free};

static em_status nn_conv(const char *fn, int dims, int64_t in_channels, int64_t out_channels,
                         int64_t kernel, int64_t stride, int64_t padding, bool bias,
                         em_module_opts *opts, em_module **out) {
    if (!out) return nn_null(fn, "out");
    if (in_channels < 1 || out_channels < 1 || kernel < 1 || stride < 1 || padding < 0)
        return em_backend_set_error(EM_ERR_ARG,
                                    "%s: bad sizes (in %lld, out %lld, kernel %lld, stride %lld, "
                                    "padding %lld)", fn, (long long)in_channels,
                                    (long long)out_channels, (long long)kernel, (long long)stride,
                                    (long long)padding);
    em_module_opts o;
    NN_TRY(nn_check_opts(fn, opts, &o));
    em_module *m = NULL;
    conv_data *d = NULL;
    NN_TRY(nn_new(fn, dims == 1 ? &conv1d_class : &conv2d_class, sizeof *d, &m, (void **)&d));
    *d = (conv_data){dims, in_channels, out_channels, kernel, stride, padding};
    int64_t ws[4] = {out_channels, in_channels, kernel, kernel};
    int64_t area = dims == 1 ? kernel : kernel * kernel;
    return nn_done_drawn(nn_weight_bias(fn, m, &o, ws, dims + 2, in_channels * area,
                                        out_channels * area, bias),
                         m, out, opts);
}

em_status em_nn_conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride,
                       int64_t padding, bool bias, em_module_opts *opts, em_module **out) {
    return nn_conv("em_nn_conv2d", 2, in_channels, out_channels, kernel, stride, padding, bias,
                   opts, out);
}

em_status em_nn_conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride,
                       int64_t padding, bool bias, em_module_opts *opts, em_module **out) {
    return nn_conv("em_nn_conv1d", 1, in_channels, out_channels, kernel, stride, padding, bias,
                   opts, out);
}

/* ---- pooling ---- */

typedef struct pool_data {
    int64_t kernel, stride, padding, oh, ow;
} pool_data;

static em_pool_params pool_params(const pool_data *d) {
    em_pool_params p;
    memset(&p, 0, sizeof p);
    p.kernel[0] = p.kernel[1] = d->kernel;
    p.stride[0] = p.stride[1] = d->stride;
    p.padding[0] = p.padding[1] = d->padding;
    p.count_include_pad = true; /* torch.nn.AvgPool2d's default (max pooling ignores it) */
    return p;
}

static em_status maxpool_forward(em_module *self, const em_tensor *x, bool training,
                                 em_tensor **y) {
    (void)training;
    em_pool_params p = pool_params(em_module_data(self));
    return em_max_pool2d(x, &p, y, NULL);
}

static em_status avgpool_forward(em_module *self, const em_tensor *x, bool training,
                                 em_tensor **y) {
    (void)training;
    em_pool_params p = pool_params(em_module_data(self));
    return em_avg_pool2d(x, &p, y);
}

static void pool_describe(const em_module *self, char *buf, size_t cap) {
    const pool_data *d = em_module_data(self);
    snprintf(buf, cap, "kernel %lld, stride %lld, padding %lld", (long long)d->kernel,
             (long long)d->stride, (long long)d->padding);
}

static em_status adaptive_forward(em_module *self, const em_tensor *x, bool training,
                                  em_tensor **y) {
    (void)training;
    const pool_data *d = em_module_data(self);
    return em_adaptive_avg_pool2d(x, d->oh, d->ow, y);
}

static void adaptive_describe(const em_module *self, char *buf, size_t cap) {
    const pool_data *d = em_module_data(self);
    snprintf(buf, cap, "%lld x %lld", (long long)d->oh, (long long)d->ow);
}

static const em_module_class maxpool_class = {"MaxPool2d", maxpool_forward, pool_describe, free};
static const em_module_class avgpool_class = {"AvgPool2d", avgpool_forward, pool_describe, free};
static const em_module_class adaptive_class = {"AdaptiveAvgPool2d", adaptive_forward,
                                               adaptive_describe, free};

static em_status nn_pool(const char *fn, const em_module_class *cls, int64_t kernel,
                         int64_t stride, int64_t padding, em_module **out) {
    if (!out) return nn_null(fn, "out");
    if (kernel < 1 || stride < 0 || padding < 0 || 2 * padding > kernel)
        return em_backend_set_error(EM_ERR_ARG, "%s: bad kernel %lld, stride %lld or padding "
                                    "%lld (padding at most half the kernel)", fn,
                                    (long long)kernel, (long long)stride, (long long)padding);
    em_module *m = NULL;
    pool_data *d = NULL;
    NN_TRY(nn_new(fn, cls, sizeof *d, &m, (void **)&d));
    d->kernel = kernel;
    d->stride = stride ? stride : kernel;
    d->padding = padding;
    *out = m;
    return EM_OK;
}

em_status em_nn_max_pool2d(int64_t kernel, int64_t stride, em_module **out) {
    return nn_pool("em_nn_max_pool2d", &maxpool_class, kernel, stride, 0, out);
}

em_status em_nn_avg_pool2d(int64_t kernel, int64_t stride, int64_t padding, em_module **out) {
    return nn_pool("em_nn_avg_pool2d", &avgpool_class, kernel, stride, padding, out);
}

em_status em_nn_adaptive_avg_pool2d(int64_t oh, int64_t ow, em_module **out) {
    static const char fn[] = "em_nn_adaptive_avg_pool2d";
    if (!out) return nn_null(fn, "out");
    if (oh < 1 || ow < 1)
        return em_backend_set_error(EM_ERR_ARG, "%s: output size must be >= 1, got %lld x %lld",
                                    fn, (long long)oh, (long long)ow);
    em_module *m = NULL;
    pool_data *d = NULL;
    NN_TRY(nn_new(fn, &adaptive_class, sizeof *d, &m, (void **)&d));
    d->oh = oh;
    d->ow = ow;
    *out = m;
    return EM_OK;
}

/* ---- layers without parameters ---- */

static em_status flatten_forward(em_module *self, const em_tensor *x, bool training,
                                 em_tensor **y) {
    (void)self, (void)training;
    if (em_tensor_rank(x) < 1)
        return em_backend_set_error(EM_ERR_SHAPE, "flatten needs rank >= 1, got 0");
    if (em_tensor_rank(x) == 1) return em_reshape(x, (const int64_t[]){1, -1}, 2, y);
    return em_flatten(x, 1, -1, y);
}

static em_status relu_forward(em_module *self, const em_tensor *x, bool training,
                              em_tensor **y) {
    (void)self, (void)training;
    return em_relu(x, y);
}

static em_status gelu_forward(em_module *self, const em_tensor *x, bool training,
                              em_tensor **y) {
    (void)self, (void)training;
    return em_gelu(x, y);
}

static em_status identity_forward(em_module *self, const em_tensor *x, bool training,
                                  em_tensor **y) {
    (void)self, (void)training;
    return em_tensor_alias(x, y); /* x itself retained, or in a tensor scope a handle of its own */
}

static const em_module_class flatten_class = {"Flatten", flatten_forward, NULL, NULL};
static const em_module_class relu_class = {"ReLU", relu_forward, NULL, NULL};
static const em_module_class gelu_class = {"GELU", gelu_forward, NULL, NULL};
static const em_module_class identity_class = {"Identity", identity_forward, NULL, NULL};

em_status em_nn_flatten(em_module **out) {
    return nn_new("em_nn_flatten", &flatten_class, 0, out, NULL);
}
em_status em_nn_relu(em_module **out) { return nn_new("em_nn_relu", &relu_class, 0, out, NULL); }
em_status em_nn_gelu(em_module **out) { return nn_new("em_nn_gelu", &gelu_class, 0, out, NULL); }
em_status em_nn_identity(em_module **out) {
    return nn_new("em_nn_identity", &identity_class, 0, out, NULL);
}

/* ---- Dropout ---- */

typedef struct dropout_data {
    double p;
    uint64_t seed;
} dropout_data;

static em_status dropout_forward(em_module *self, const em_tensor *x, bool training,
                                 em_tensor **y) {
    dropout_data *d = em_module_data(self);
    em_status s = em_dropout(x, d->p, training, d->seed, y);
    if (s == EM_OK && training) d->seed++;
    return s;
}

static void dropout_describe(const em_module *self, char *buf, size_t cap) {
    const dropout_data *d = em_module_data(self);
    snprintf(buf, cap, "p %g", d->p);
}

static const em_module_class dropout_class = {"Dropout", dropout_forward, dropout_describe, free};

em_status em_nn_dropout(double p, uint64_t seed, em_module **out) {
    static const char fn[] = "em_nn_dropout";
    if (!out) return nn_null(fn, "out");
    if (!(p >= 0 && p < 1))
        return em_backend_set_error(EM_ERR_ARG, "%s: p must be in [0, 1), got %g", fn, p);
    em_module *m = NULL;
    dropout_data *d = NULL;
    NN_TRY(nn_new(fn, &dropout_class, sizeof *d, &m, (void **)&d));
    d->p = p;
    d->seed = seed;
    *out = m;
    return EM_OK;
}

/* ---- LayerNorm ---- */

typedef struct norm_data {
    int64_t size;
    double eps;
} norm_data;

static em_status layernorm_forward(em_module *self, const em_tensor *x, bool training,
                                   em_tensor **y) {
    (void)training;
    const norm_data *d = em_module_data(self);
    NN_TRY(nn_expect(x, 1, EM_MAX_RANK, -1, d->size, "[..., size]"));
    return em_layer_norm(x, 1, em_module_get(self, "weight"), em_module_get(self, "bias"),
                         d->eps, y);
}

static void norm_describe(const em_module *self, char *buf, size_t cap) {
    const norm_data *d = em_module_data(self);
    snprintf(buf, cap, "%lld, eps %g", (long long)d->size, d->eps);
}

static const em_module_class layernorm_class = {"LayerNorm", layernorm_forward, norm_describe,
                                                free};

em_status em_nn_layer_norm(int64_t size, em_module_opts *opts, em_module **out) {
    static const char fn[] = "em_nn_layer_norm";
    if (!out) return nn_null(fn, "out");
    if (size < 1)
        return em_backend_set_error(EM_ERR_ARG, "%s: size must be >= 1, got %lld", fn,
                                    (long long)size);
    em_module_opts o;
    NN_TRY(nn_check_opts(fn, opts, &o));
    em_module *m = NULL;
    norm_data *d = NULL;
    NN_TRY(nn_new(fn, &layernorm_class, sizeof *d, &m, (void **)&d));
    d->size = size;
    d->eps = 1e-5;
    em_tensor *w = NULL, *b = NULL;
    em_status s = nn_param(fn, &o, &size, 1, -1, 1.0, 0, &w);
    if (s == EM_OK) s = em_module_add_param(m, "weight", w);
    if (s == EM_OK) s = nn_param(fn, &o, &size, 1, -1, 0.0, 0, &b);
    if (s == EM_OK) s = em_module_add_param(m, "bias", b);
    return nn_done(s, m, out);
}

/* ---- Embedding ---- */

typedef struct embedding_data {
    int64_t num, dim;
} embedding_data;

static em_status embedding_forward(em_module *self, const em_tensor *x, bool training,
                                   em_tensor **y) {
    (void)training;
    return em_embedding(em_module_get(self, "weight"), x, y);
}

static void embedding_describe(const em_module *self, char *buf, size_t cap) {
    const embedding_data *d = em_module_data(self);
    snprintf(buf, cap, "%lld, %lld", (long long)d->num, (long long)d->dim);
}

static const em_module_class embedding_class = {"Embedding", embedding_forward,
                                                embedding_describe, free};

em_status em_nn_embedding(int64_t num_embeddings, int64_t dim, em_module_opts *opts,
                          em_module **out) {
    static const char fn[] = "em_nn_embedding";
    if (!out) return nn_null(fn, "out");
    if (num_embeddings < 1 || dim < 1)
        return em_backend_set_error(EM_ERR_ARG, "%s: sizes must be >= 1, got %lld, %lld", fn,
                                    (long long)num_embeddings, (long long)dim);
    em_module_opts o;
    NN_TRY(nn_check_opts(fn, opts, &o));
    em_module *m = NULL;
    embedding_data *d = NULL;
    NN_TRY(nn_new(fn, &embedding_class, sizeof *d, &m, (void **)&d));
    d->num = num_embeddings;
    d->dim = dim;
    /* N(0, 1), as torch.nn.Embedding */
    int64_t ws[2] = {num_embeddings, dim};
    em_tensor *w = NULL;
    em_status s = em_rand_normal(ws, 2, o.dtype, 0.0, 1.0, nn_derive(o.seed, 0), o.device, &w);
    if (s == EM_OK && o.device.autodiff) s = em_tensor_require_grad(w);
    if (s != EM_OK) {
        em_tensor_release(w);
        em_module_release(m);
        return nn_context(s, "%s: creating a parameter", fn);
    }
    return nn_done_drawn(em_module_add_param(m, "weight", w), m, out, opts);
}

/* ---- Sequential, Residual ---- */

typedef struct seq_data {
    int every; /* children per checkpoint region, 0: none (em_sequential_set_checkpoint) */
} seq_data;

static em_status sequential_forward(em_module *self, const em_tensor *x, bool training,
                                    em_tensor **y) {
    const seq_data *d = em_module_data(self);
    em_tensor *cur = NULL;
    NN_TRY(em_tensor_alias(x, &cur)); /* in a tensor scope, no child: a handle of y's own */
    size_t n = em_module_child_count(self);
    size_t every = d && d->every > 0 ? (size_t)d->every : 0;
    em_status s = EM_OK;
    bool open = false;
    for (size_t i = 0; i < n && s == EM_OK; i++) {
        /* children [i, i + every) run in one region: what it keeps is its input, cur */
        if (every && i % every == 0) {
            s = em_checkpoint_begin();
            if (s != EM_OK) break;
            open = true;
        }
        em_tensor *next = NULL;
        s = em_module_forward(em_module_child_at(self, i), cur, training, &next);
        em_tensor_release(cur);
        cur = next;
        if (open && (s != EM_OK || (i + 1) % every == 0 || i + 1 == n)) {
            open = false;
            em_status e = em_checkpoint_end();
            if (s == EM_OK) s = e;
        }
    }
    if (s != EM_OK) {
        em_tensor_release(cur);
        return s;
    }
    *y = cur;
    return EM_OK;
}

static void sequential_describe(const em_module *self, char *buf, size_t cap) {
    size_t n = em_module_child_count(self);
    snprintf(buf, cap, "%zu module%s", n, n == 1 ? "" : "s");
}

static const em_module_class sequential_class = {"Sequential", sequential_forward,
                                                 sequential_describe, free};

em_status em_sequential_set_checkpoint(em_module *seq, int every) {
    static const char fn[] = "em_sequential_set_checkpoint";
    if (!seq) return nn_null(fn, "seq");
    if (nn_module_class(seq) != &sequential_class)
        return em_backend_set_error(EM_ERR_ARG, "%s: the module is a %s, not a Sequential", fn,
                                    em_module_type(seq));
    if (every < 0)
        return em_backend_set_error(EM_ERR_ARG, "%s: every must be >= 0 (0: no regions), got %d",
                                    fn, every);
    ((seq_data *)em_module_data(seq))->every = every;
    return EM_OK;
}

em_status em_nn_sequential(em_module *const *mods, size_t n, em_module **out) {
    static const char fn[] = "em_nn_sequential";
    em_status s = EM_OK;
    if (!out) s = nn_null(fn, "out");
    else if (!mods) s = nn_null(fn, "mods");
    else if (n == 0) s = em_backend_set_error(EM_ERR_ARG, "%s: no modules", fn);
    else
        for (size_t i = 0; i < n && s == EM_OK; i++) {
            if (!mods[i]) s = em_backend_set_error(EM_ERR_ARG, "%s: module %zu is NULL", fn, i);
            for (size_t j = 0; j < i && s == EM_OK; j++)
                if (mods[j] == mods[i])
                    s = em_backend_set_error(EM_ERR_ARG, "%s: module %zu is also module %zu", fn,
                                             i, j);
        }
    em_module *m = NULL;
    if (s == EM_OK) s = nn_new(fn, &sequential_class, sizeof(seq_data), &m, NULL);
    size_t i = 0;
    for (; s == EM_OK && i < n; i++) {
        char name[24];
        snprintf(name, sizeof name, "%zu", i);
        s = em_module_add_child(m, name, mods[i]); /* consumes mods[i] on every path */
    }
    if (s != EM_OK) {
        /* mods[0, i) are m's now; the others go once each (a module may be listed twice) */
        for (size_t k = i; mods && k < n; k++) {
            bool seen = !mods[k];
            for (size_t j = 0; j < k && !seen; j++) seen = mods[j] == mods[k];
            if (!seen) em_module_release(mods[k]);
        }
        em_module_release(m);
        return s;
    }
    *out = m;
    return EM_OK;
}

static em_status residual_forward(em_module *self, const em_tensor *x, bool training,
                                  em_tensor **y) {
    em_tensor *h = NULL;
    NN_TRY(em_module_forward(em_module_child_at(self, 0), x, training, &h));
    bool same = em_tensor_rank(h) == em_tensor_rank(x) &&
                memcmp(em_tensor_shape(h), em_tensor_shape(x),
                       (size_t)em_tensor_rank(x) * sizeof(int64_t)) == 0;
    char sb[160], sh[160];
    nn_shape_str(h, sh, sizeof sh);
    /* em_add_ consumes h (on failure too) and reuses its buffer; em_add leaves it */
    em_status s = same ? em_add_(h, x, y) : em_add(h, x, y);
    if (!same) em_tensor_release(h);
    if (s != EM_OK)
        s = nn_context(s, "the body's output %s does not add to its input %s", sh,
                       nn_shape_str(x, sb, sizeof sb));
    return s;
}

static const em_module_class residual_class = {"Residual", residual_forward, NULL, NULL};

em_status em_nn_residual(em_module *body, em_module **out) {
    static const char fn[] = "em_nn_residual";
    em_status s = EM_OK;
    if (!out) s = nn_null(fn, "out");
    else if (!body) s = nn_null(fn, "body");
    em_module *m = NULL;
    if (s == EM_OK) s = em_module_create(&residual_class, NULL, &m);
    if (s != EM_OK) {
        em_module_release(body);
        return s;
    }
    return nn_done(em_module_add_child(m, "body", body), m, out);
}

/* ---- initialization of a parameter set ---- */

static bool nn_ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

em_status em_init_xavier_uniform(const em_params *params, uint64_t seed) {
    static const char fn[] = "em_init_xavier_uniform";
    if (!params) return nn_null(fn, "params");
    size_t n = em_params_count(params);
    for (size_t i = 0; i < n; i++) {
        const char *name = em_params_name(params, i);
        em_tensor *t = em_params_get(params, i);
        if (em_tensor_kind(t) == EM_KIND_QUANTIZED) continue; /* a constant (em_params_quantize) */
        int rank = em_tensor_rank(t);
        const int64_t *shape = em_tensor_shape(t);
        em_device inner = em_tensor_device(t);
        inner.autodiff = false;
        inner.checkpointing = EM_CKPT_NONE;
        em_tensor *v = NULL;
        em_status s = EM_OK;
        if (nn_ends_with(name, "weight") && rank >= 2) {
            int64_t rf = 1;
            for (int d = 2; d < rank; d++) rf *= shape[d];
            double a = sqrt(6.0 / (double)(shape[0] * rf + shape[1] * rf));
            s = em_rand_uniform(shape, rank, em_tensor_dtype(t), -a, a, nn_derive(seed, i), inner,
                                &v);
        } else if (nn_ends_with(name, "bias")) {
            s = em_zeros(shape, rank, em_tensor_dtype(t), inner, &v);
        } else {
            continue;
        }
        if (s == EM_OK) s = em_tensor_assign(t, v);
        em_tensor_release(v);
        if (s != EM_OK) return s;
    }
    return EM_OK;
}
