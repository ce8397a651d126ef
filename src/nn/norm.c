/* norm.c — normalization layers on em_batch_norm / em_group_norm / em_rms_norm: BatchNorm1d
 * and BatchNorm2d (running statistics as buffers, momentum, eval mode), GroupNorm, RMSNorm. */
#include <stdio.h>
#include <stdlib.h>

#include "nn/nn_internal.h"

typedef struct bn_data {
    int dims; /* 1 or 2 */
    int64_t features, groups;
    double eps, momentum;
    bool affine, track;
} bn_data;

/* weight (ones) and bias (zeros) of size n, when affine */
static em_status norm_affine(const char *fn, em_module *m, const em_module_opts *o, int64_t n,
                             bool bias) {
    em_tensor *w = NULL, *b = NULL;
    NN_TRY(nn_param(fn, o, &n, 1, -1, 1.0, 0, &w));
    NN_TRY(em_module_add_param(m, "weight", w));
    if (!bias) return EM_OK;
    NN_TRY(nn_param(fn, o, &n, 1, -1, 0.0, 0, &b));
    return em_module_add_param(m, "bias", b);
}

static em_status bn_forward(em_module *self, const em_tensor *x, bool training, em_tensor **y) {
    bn_data *d = em_module_data(self);
    const int r = em_tensor_rank(x);
    const bool ok = d->dims == 2 ? r == 4 : (r == 2 || r == 3);
    if (!ok || em_tensor_shape(x)[1] != d->features)
        return em_backend_set_error(EM_ERR_SHAPE, "the input must be %s with C = %lld, got rank "
                                    "%d%s", d->dims == 2 ? "[N, C, H, W]" : "[N, C] or [N, C, L]",
                                    (long long)d->features, r,
                                    ok ? " with another C" : "");
    em_tensor *rm = em_module_get(self, "running_mean"), *rv = em_module_get(self, "running_var");
    em_tensor *w = em_module_get(self, "weight"), *b = em_module_get(self, "bias");
    /* eval without running statistics normalizes with the batch's, as torch */
    bool batch_stats = training || !d->track;
    em_status s = em_batch_norm(x, training ? rm : (d->track ? rm : NULL),
                                training ? rv : (d->track ? rv : NULL), w, b, batch_stats,
                                d->momentum, d->eps, y);
    if (s == EM_OK && training && d->track) {
        em_tensor *nbt = em_module_get(self, "num_batches_tracked"), *next = NULL;
        s = em_add_scalar(nbt, 1, &next);
        if (s == EM_OK) s = em_tensor_assign_(nbt, next);
        if (s != EM_OK) {
            em_tensor_release(*y);
            *y = NULL;
        }
    }
    return s;
}

static void bn_describe(const em_module *self, char *buf, size_t cap) {
    const bn_data *d = em_module_data(self);
    snprintf(buf, cap, "%lld, eps %g, momentum %g%s%s", (long long)d->features, d->eps,
             d->momentum, d->affine ? "" : ", no affine", d->track ? "" : ", no running stats");
}

static const em_module_class bn1_class = {"BatchNorm1d", bn_forward, bn_describe, free};
static const em_module_class bn2_class = {"BatchNorm2d", bn_forward, bn_describe, free};

em_nn_batch_norm_opts em_nn_batch_norm_opts_default(void) {
    em_nn_batch_norm_opts o = {1e-5, 0.1, true, true};
    return o;
}

static em_status nn_bn(const char *fn, int dims, int64_t features,
                       const em_nn_batch_norm_opts *bo, em_module_opts *opts, em_module **out) {
    if (!out) return nn_null(fn, "out");
    em_nn_batch_norm_opts b = bo ? *bo : em_nn_batch_norm_opts_default();
    if (features < 1)
        return em_backend_set_error(EM_ERR_ARG, "%s: num_features must be >= 1, got %lld", fn,
                                    (long long)features);
    if (!(b.eps >= 0) || !(b.momentum >= 0 && b.momentum <= 1))
        return em_backend_set_error(EM_ERR_ARG, "%s: eps must be >= 0 and momentum in [0, 1], "
                                    "got %g and %g", fn, b.eps, b.momentum);
    em_module_opts o;
    NN_TRY(nn_check_opts(fn, opts, &o));
    em_module *m = NULL;
    bn_data *d = NULL;
    NN_TRY(nn_new(fn, dims == 2 ? &bn2_class : &bn1_class, sizeof *d, &m, (void **)&d));
    *d = (bn_data){dims, features, 0, b.eps, b.momentum, b.affine, b.track_running_stats};
    em_status s = b.affine ? norm_affine(fn, m, &o, features, true) : EM_OK;
    if (s == EM_OK && b.track_running_stats) {
        /* the buffers live on the parameters' inner device, untracked */
        em_device in = em_device_inner(o.device);
        em_tensor *rm = NULL, *rv = NULL, *nbt = NULL;
        s = em_zeros(&features, 1, o.dtype, in, &rm);
        if (s == EM_OK) s = em_module_add_buffer(m, "running_mean", rm);
        if (s == EM_OK) s = em_ones(&features, 1, o.dtype, in, &rv);
        if (s == EM_OK) s = em_module_add_buffer(m, "running_var", rv);
        if (s == EM_OK) s = em_zeros(NULL, 0, EM_I64, in, &nbt);
        if (s == EM_OK) s = em_module_add_buffer(m, "num_batches_tracked", nbt);
    }
    if (s != EM_OK) {
        em_module_release(m);
        return s;
    }
    *out = m;
    return EM_OK;
}

em_status em_nn_batch_norm1d(int64_t num_features, const em_nn_batch_norm_opts *bn,
                             em_module_opts *opts, em_module **out) {
    return nn_bn("em_nn_batch_norm1d", 1, num_features, bn, opts, out);
}

em_status em_nn_batch_norm2d(int64_t num_features, const em_nn_batch_norm_opts *bn,
                             em_module_opts *opts, em_module **out) {
    return nn_bn("em_nn_batch_norm2d", 2, num_features, bn, opts, out);
}

/* ---- GroupNorm ---- */

static em_status gn_forward(em_module *self, const em_tensor *x, bool training, em_tensor **y) {
    (void)training;
    const bn_data *d = em_module_data(self);
    if (em_tensor_rank(x) < 2 || em_tensor_shape(x)[1] != d->features)
        return em_backend_set_error(EM_ERR_SHAPE, "the input must be [N, %lld, ...], got rank "
                                    "%d", (long long)d->features, em_tensor_rank(x));
    return em_group_norm(x, d->groups, em_module_get(self, "weight"),
                         em_module_get(self, "bias"), d->eps, y);
}

static void gn_describe(const em_module *self, char *buf, size_t cap) {
    const bn_data *d = em_module_data(self);
    snprintf(buf, cap, "%lld groups, %lld channels, eps %g%s", (long long)d->groups,
             (long long)d->features, d->eps, d->affine ? "" : ", no affine");
}

static const em_module_class gn_class = {"GroupNorm", gn_forward, gn_describe, free};

em_status em_nn_group_norm(int64_t num_groups, int64_t num_channels, double eps, bool affine,
                           em_module_opts *opts, em_module **out) {
    static const char fn[] = "em_nn_group_norm";
    if (!out) return nn_null(fn, "out");
    if (num_groups < 1 || num_channels < 1 || num_channels % num_groups != 0)
        return em_backend_set_error(EM_ERR_ARG, "%s: num_groups (%lld) must be >= 1 and divide "
                                    "num_channels (%lld)", fn, (long long)num_groups,
                                    (long long)num_channels);
    if (!(eps >= 0)) return em_backend_set_error(EM_ERR_ARG, "%s: eps must be >= 0", fn);
    em_module_opts o;
    NN_TRY(nn_check_opts(fn, opts, &o));
    em_module *m = NULL;
    bn_data *d = NULL;
    NN_TRY(nn_new(fn, &gn_class, sizeof *d, &m, (void **)&d));
    *d = (bn_data){0, num_channels, num_groups, eps, 0, affine, false};
    em_status s = affine ? norm_affine(fn, m, &o, num_channels, true) : EM_OK;
    if (s != EM_OK) {
        em_module_release(m);
        return s;
    }
    *out = m;
    return EM_OK;
}

/* ---- RMSNorm ---- */

static em_status rms_forward(em_module *self, const em_tensor *x, bool training, em_tensor **y) {
    (void)training;
    const bn_data *d = em_module_data(self);
    const int r = em_tensor_rank(x);
    if (r < 1 || em_tensor_shape(x)[r - 1] != d->features)
        return em_backend_set_error(EM_ERR_SHAPE, "the input's last dim must be %lld",
                                    (long long)d->features);
    return em_rms_norm(x, 1, em_module_get(self, "weight"), d->eps, y);
}

static void rms_describe(const em_module *self, char *buf, size_t cap) {
    const bn_data *d = em_module_data(self);
    snprintf(buf, cap, "%lld, eps %g%s", (long long)d->features, d->eps,
             d->affine ? "" : ", no weight");
}

static const em_module_class rms_class = {"RMSNorm", rms_forward, rms_describe, free};

em_status em_nn_rms_norm(int64_t size, double eps, bool affine, em_module_opts *opts,
                         em_module **out) {
    static const char fn[] = "em_nn_rms_norm";
    if (!out) return nn_null(fn, "out");
    if (size < 1) return em_backend_set_error(EM_ERR_ARG, "%s: size must be >= 1", fn);
    if (!(eps >= 0)) return em_backend_set_error(EM_ERR_ARG, "%s: eps must be >= 0", fn);
    em_module_opts o;
    NN_TRY(nn_check_opts(fn, opts, &o));
    em_module *m = NULL;
    bn_data *d = NULL;
    NN_TRY(nn_new(fn, &rms_class, sizeof *d, &m, (void **)&d));
    *d = (bn_data){0, size, 0, eps, 0, affine, false};
    em_status s = affine ? norm_affine(fn, m, &o, size, false) : EM_OK;
    if (s != EM_OK) {
        em_module_release(m);
        return s;
    }
    *out = m;
    return EM_OK;
}
