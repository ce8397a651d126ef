/* module.c — layers: Linear, Conv2d, MaxPool2d, Flatten, Dropout, LayerNorm, ReLU, GELU,
 * Sequential; their parameters and initialization. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_internal.h"

typedef enum nn_kind {
    NN_LINEAR,
    NN_CONV2D,
    NN_MAXPOOL,
    NN_FLATTEN,
    NN_DROPOUT,
    NN_LAYERNORM,
    NN_RELU,
    NN_GELU,
    NN_SEQUENTIAL
} nn_kind;

struct em_module {
    nn_kind kind;
    em_tensor *weight, *bias; /* owned; NULL when absent */
    int64_t kernel, stride, padding;
    double p;
    uint64_t seed;
    em_module **children; /* sequential */
    size_t nchildren;
};

em_module_opts em_module_opts_default(em_device dev, uint64_t seed) {
    em_module_opts o;
    o.device = dev;
    o.dtype = EM_F32;
    o.init = EM_INIT_KAIMING_UNIFORM;
    o.seed = seed;
    return o;
}

/* A seed for the k-th tensor of a module (splitmix64 of seed and k). */
static uint64_t nn_derive(uint64_t seed, uint64_t k) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ull * (k + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A parameter: U(-bound, bound) (or `fill` when bound < 0) on opts' device, a leaf requiring
 * grad on an autodiff device. */
static em_status nn_param(const char *fn, const em_module_opts *o, const int64_t *shape,
                          int rank, double bound, double fill, uint64_t seed, em_tensor **out) {
    em_tensor *t = NULL;
    em_status s = bound >= 0
                      ? em_rand_uniform(shape, rank, o->dtype, -bound, bound, seed, o->device, &t)
                      : em_full(shape, rank, fill, o->dtype, o->device, &t);
    if (s == EM_OK && o->device.autodiff) s = em_tensor_require_grad(t);
    if (s != EM_OK) {
        em_tensor_release(t);
        return em_backend_set_error(s, "%s: creating a parameter: %s", fn, em_last_error());
    }
    *out = t;
    return EM_OK;
}

static em_status nn_new(const char *fn, nn_kind kind, em_module **out) {
    if (!out) return nn_null(fn, "out");
    em_module *m = calloc(1, sizeof *m);
    if (!m) return em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
    m->kind = kind;
    *out = m;
    return EM_OK;
}

static em_status nn_check_opts(const char *fn, const em_module_opts *opts, em_module_opts *o) {
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
    NN_TRY(nn_param(fn, o, wshape, wrank, wb, 0, nn_derive(o->seed, 0), &m->weight));
    if (bias) {
        bool zero = o->init == EM_INIT_XAVIER_UNIFORM;
        NN_TRY(nn_param(fn, o, wshape, 1, zero ? -1 : kb, 0, nn_derive(o->seed, 1), &m->bias));
    }
    return EM_OK;
}

em_status em_nn_linear(int64_t in_features, int64_t out_features, bool bias,
                       const em_module_opts *opts, em_module **out) {
    static const char fn[] = "em_nn_linear";
    if (!out) return nn_null(fn, "out");
    if (in_features < 1 || out_features < 1)
        return em_backend_set_error(EM_ERR_ARG, "%s: sizes must be >= 1, got in %lld, out %lld",
                                    fn, (long long)in_features, (long long)out_features);
    em_module_opts o;
    NN_TRY(nn_check_opts(fn, opts, &o));
    em_module *m = NULL;
    NN_TRY(nn_new(fn, NN_LINEAR, &m));
    int64_t ws[2] = {out_features, in_features};
    em_status s = nn_weight_bias(fn, m, &o, ws, 2, in_features, out_features, bias);
    if (s != EM_OK) {
        em_module_release(m);
        return s;
    }
    *out = m;
    return EM_OK;
}

em_status em_nn_conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride,
                       int64_t padding, bool bias, const em_module_opts *opts, em_module **out) {
    static const char fn[] = "em_nn_conv2d";
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
    NN_TRY(nn_new(fn, NN_CONV2D, &m));
    m->kernel = kernel;
    m->stride = stride;
    m->padding = padding;
    int64_t ws[4] = {out_channels, in_channels, kernel, kernel};
    em_status s = nn_weight_bias(fn, m, &o, ws, 4, in_channels * kernel * kernel,
                                 out_channels * kernel * kernel, bias);
    if (s != EM_OK) {
        em_module_release(m);
        return s;
    }
    *out = m;
    return EM_OK;
}

em_status em_nn_max_pool2d(int64_t kernel, int64_t stride, em_module **out) {
    static const char fn[] = "em_nn_max_pool2d";
    if (!out) return nn_null(fn, "out");
    if (kernel < 1 || stride < 0)
        return em_backend_set_error(EM_ERR_ARG, "%s: bad kernel %lld or stride %lld", fn,
                                    (long long)kernel, (long long)stride);
    em_module *m = NULL;
    NN_TRY(nn_new(fn, NN_MAXPOOL, &m));
    m->kernel = kernel;
    m->stride = stride ? stride : kernel;
    *out = m;
    return EM_OK;
}

em_status em_nn_flatten(em_module **out) { return nn_new("em_nn_flatten", NN_FLATTEN, out); }
em_status em_nn_relu(em_module **out) { return nn_new("em_nn_relu", NN_RELU, out); }
em_status em_nn_gelu(em_module **out) { return nn_new("em_nn_gelu", NN_GELU, out); }

em_status em_nn_dropout(double p, uint64_t seed, em_module **out) {
    static const char fn[] = "em_nn_dropout";
    if (!out) return nn_null(fn, "out");
    if (!(p >= 0 && p < 1))
        return em_backend_set_error(EM_ERR_ARG, "%s: p must be in [0, 1), got %g", fn, p);
    em_module *m = NULL;
    NN_TRY(nn_new(fn, NN_DROPOUT, &m));
    m->p = p;
    m->seed = seed;
    *out = m;
    return EM_OK;
}

em_status em_nn_layer_norm(int64_t size, const em_module_opts *opts, em_module **out) {
    static const char fn[] = "em_nn_layer_norm";
    if (!out) return nn_null(fn, "out");
    if (size < 1)
        return em_backend_set_error(EM_ERR_ARG, "%s: size must be >= 1, got %lld", fn,
                                    (long long)size);
    em_module_opts o;
    NN_TRY(nn_check_opts(fn, opts, &o));
    em_module *m = NULL;
    NN_TRY(nn_new(fn, NN_LAYERNORM, &m));
    em_status s = nn_param(fn, &o, &size, 1, -1, 1.0, 0, &m->weight);
    if (s == EM_OK) s = nn_param(fn, &o, &size, 1, -1, 0.0, 0, &m->bias);
    if (s != EM_OK) {
        em_module_release(m);
        return s;
    }
    *out = m;
    return EM_OK;
}

em_status em_nn_sequential(em_module *const *mods, size_t n, em_module **out) {
    static const char fn[] = "em_nn_sequential";
    em_status s = EM_OK;
    if (!out) s = nn_null(fn, "out");
    else if (!mods) s = nn_null(fn, "mods");
    else if (n == 0) s = em_backend_set_error(EM_ERR_ARG, "%s: no modules", fn);
    else
        for (size_t i = 0; i < n && s == EM_OK; i++)
            if (!mods[i]) s = em_backend_set_error(EM_ERR_ARG, "%s: module %zu is NULL", fn, i);
    em_module *m = NULL;
    if (s == EM_OK) s = nn_new(fn, NN_SEQUENTIAL, &m);
    if (s == EM_OK) {
        m->children = malloc(n * sizeof *m->children);
        if (!m->children) {
            free(m);
            m = NULL;
            s = em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
        }
    }
    if (s != EM_OK || !m) {
        if (mods)
            for (size_t i = 0; i < n; i++) em_module_release(mods[i]);
        return s;
    }
    memcpy(m->children, mods, n * sizeof *m->children);
    m->nchildren = n;
    *out = m;
    return EM_OK;
}

void em_module_release(em_module *m) {
    if (!m) return;
    em_tensor_release(m->weight);
    em_tensor_release(m->bias);
    for (size_t i = 0; i < m->nchildren; i++) em_module_release(m->children[i]);
    free(m->children);
    free(m);
}

static em_status nn_linear_forward(const em_module *m, const em_tensor *x, em_tensor **y) {
    em_tensor *wt = NULL, *xw = NULL;
    em_status s = em_transpose(m->weight, 0, 1, &wt);
    if (s == EM_OK) s = em_matmul(x, wt, &xw);
    em_tensor_release(wt);
    if (s != EM_OK) return s;
    if (!m->bias) {
        *y = xw;
        return EM_OK;
    }
    return em_add_(xw, m->bias, y);
}

em_status em_module_forward(em_module *m, const em_tensor *x, bool training, em_tensor **y) {
    static const char fn[] = "em_module_forward";
    if (!m) return nn_null(fn, "module");
    if (!x) return nn_null(fn, "x");
    if (!y) return nn_null(fn, "y");
    switch (m->kind) {
    case NN_LINEAR: return nn_linear_forward(m, x, y);
    case NN_CONV2D: {
        em_conv_params p = em_conv_params_default();
        p.stride[0] = p.stride[1] = m->stride;
        p.padding[0] = p.padding[1] = m->padding;
        return em_conv2d(x, m->weight, m->bias, &p, y);
    }
    case NN_MAXPOOL: {
        em_pool_params p;
        memset(&p, 0, sizeof p);
        p.kernel[0] = p.kernel[1] = m->kernel;
        p.stride[0] = p.stride[1] = m->stride;
        return em_max_pool2d(x, &p, y, NULL);
    }
    case NN_FLATTEN:
        if (em_tensor_rank(x) < 1)
            return em_backend_set_error(EM_ERR_SHAPE, "%s: flatten needs rank >= 1, got 0", fn);
        if (em_tensor_rank(x) == 1) return em_reshape(x, (const int64_t[]){1, -1}, 2, y);
        return em_flatten(x, 1, -1, y);
    case NN_DROPOUT: {
        em_status s = em_dropout(x, m->p, training, m->seed, y);
        if (s == EM_OK && training) m->seed++;
        return s;
    }
    case NN_LAYERNORM: return em_layer_norm(x, 1, m->weight, m->bias, 1e-5, y);
    case NN_RELU: return em_relu(x, y);
    case NN_GELU: return em_gelu(x, y);
    case NN_SEQUENTIAL: {
        em_tensor *cur = (em_tensor *)x;
        em_tensor_retain(cur);
        for (size_t i = 0; i < m->nchildren; i++) {
            em_tensor *next = NULL;
            em_status s = em_module_forward(m->children[i], cur, training, &next);
            em_tensor_release(cur);
            if (s != EM_OK) return s;
            cur = next;
        }
        *y = cur;
        return EM_OK;
    }
    }
    return em_backend_set_error(EM_ERR_STATE, "%s: unknown module kind", fn);
}

static em_status nn_add(em_params *params, const char *prefix, const char *name,
                        em_tensor **slot) {
    char buf[256];
    int n = prefix && prefix[0] ? snprintf(buf, sizeof buf, "%s.%s", prefix, name)
                                : snprintf(buf, sizeof buf, "%s", name);
    if (n < 0 || (size_t)n >= sizeof buf)
        return em_backend_set_error(EM_ERR_ARG, "em_module_params: name '%s.%s' is too long",
                                    prefix, name);
    return em_params_add(params, buf, slot);
}

em_status em_module_params(em_module *m, const char *prefix, em_params *params) {
    static const char fn[] = "em_module_params";
    if (!m) return nn_null(fn, "module");
    if (!params) return nn_null(fn, "params");
    if (m->weight) NN_TRY(nn_add(params, prefix, "weight", &m->weight));
    if (m->bias) NN_TRY(nn_add(params, prefix, "bias", &m->bias));
    for (size_t i = 0; i < m->nchildren; i++) {
        char buf[256];
        int n = prefix && prefix[0] ? snprintf(buf, sizeof buf, "%s.%zu", prefix, i)
                                    : snprintf(buf, sizeof buf, "%zu", i);
        if (n < 0 || (size_t)n >= sizeof buf)
            return em_backend_set_error(EM_ERR_ARG, "%s: prefix is too long", fn);
        NN_TRY(em_module_params(m->children[i], buf, params));
    }
    return EM_OK;
}

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
