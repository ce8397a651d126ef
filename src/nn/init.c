/* init.c — initialization of a tensor or of every tensor of a parameter set: normal,
 * truncated normal (torch.nn.init.trunc_normal_'s method: uniform draws mapped through the
 * inverse normal CDF, then clamped), constants. The random numbers are ember's Philox
 * (em_rand_*), so one seed gives the same values on every device. New values are written in
 * place with em_tensor_assign: tracked parameters stay the same leaves. */
#include <math.h>
#include <stdlib.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

#include "nn/nn_internal.h"

static em_device nn_inner_dev(const em_tensor *t) {
    em_device d = em_tensor_device(t);
    d.autodiff = false;
    d.checkpointing = EM_CKPT_NONE;
    return d;
}

static em_status nn_check_float(const char *fn, const em_tensor *t) {
    if (!t) return nn_null(fn, "t");
    em_dtype dt = em_tensor_dtype(t);
    if (dt != EM_F32 && dt != EM_F64 && dt != EM_F16 && dt != EM_BF16)
        return em_backend_set_error(EM_ERR_DTYPE, "%s: t must be a float tensor, got %s", fn,
                                    em_dtype_name(dt));
    return EM_OK;
}

/* t = v (consumed) */
static em_status nn_put(em_tensor *t, em_tensor *v) {
    em_status s = em_tensor_assign(t, v);
    em_tensor_release(v);
    return s;
}

em_status em_init_tensor_normal(em_tensor *t, double mean, double std, uint64_t seed) {
    static const char fn[] = "em_init_tensor_normal";
    NN_TRY(nn_check_float(fn, t));
    if (!isfinite(mean)) return em_backend_set_error(EM_ERR_ARG, "%s: mean must be finite", fn);
    if (!(std >= 0) || !isfinite(std))
        return em_backend_set_error(EM_ERR_ARG, "%s: std must be >= 0, got %g", fn, std);
    em_tensor *v = NULL;
    NN_TRY(em_rand_normal(em_tensor_shape(t), em_tensor_rank(t), em_tensor_dtype(t), mean, std,
                          seed, nn_inner_dev(t), &v));
    return nn_put(t, v);
}

em_status em_init_tensor_constant(em_tensor *t, double value) {
    static const char fn[] = "em_init_tensor_constant";
    NN_TRY(nn_check_float(fn, t));
    em_tensor *v = NULL;
    NN_TRY(em_full(em_tensor_shape(t), em_tensor_rank(t), value, em_tensor_dtype(t),
                   nn_inner_dev(t), &v));
    return nn_put(t, v);
}

static double nn_norm_cdf(double x) { return 0.5 * (1.0 + erf(x / sqrt(2.0))); }

/* erf^-1(y) for y in [-1, 1]: Giles' approximation refined by Newton steps on erf. */
static double nn_erfinv(double y) {
    if (y <= -1) return -INFINITY;
    if (y >= 1) return INFINITY;
    double w = -log((1.0 - y) * (1.0 + y)), x;
    if (w < 5.0) {
        w -= 2.5;
        x = 2.81022636e-08;
        x = 3.43273939e-07 + x * w;
        x = -3.5233877e-06 + x * w;
        x = -4.39150654e-06 + x * w;
        x = 0.00021858087 + x * w;
        x = -0.00125372503 + x * w;
        x = -0.00417768164 + x * w;
        x = 0.246640727 + x * w;
        x = 1.50140941 + x * w;
    } else {
        w = sqrt(w) - 3.0;
        x = -0.000200214257;
        x = 0.000100950558 + x * w;
        x = 0.00134934322 + x * w;
        x = -0.00367342844 + x * w;
        x = 0.00573950773 + x * w;
        x = -0.0076224613 + x * w;
        x = 0.00943887047 + x * w;
        x = 1.00167406 + x * w;
        x = 2.83297682 + x * w;
    }
    x *= y;
    for (int k = 0; k < 3; k++) {
        double e = erf(x) - y, d = 2.0 / sqrt(M_PI) * exp(-x * x);
        if (!(d > 0)) break;
        x -= e / d;
    }
    return x;
}

em_status em_init_tensor_trunc_normal(em_tensor *t, double mean, double std, double a,
                                      double b, uint64_t seed) {
    static const char fn[] = "em_init_tensor_trunc_normal";
    NN_TRY(nn_check_float(fn, t));
    if (!isfinite(mean)) return em_backend_set_error(EM_ERR_ARG, "%s: mean must be finite", fn);
    if (!(std > 0) || !isfinite(std))
        return em_backend_set_error(EM_ERR_ARG, "%s: std must be > 0, got %g", fn, std);
    if (!(a < b) || isnan(a) || isnan(b))
        return em_backend_set_error(EM_ERR_ARG, "%s: a must be < b, got a %g, b %g", fn, a, b);
    double l = nn_norm_cdf((a - mean) / std), u = nn_norm_cdf((b - mean) / std);
    int64_t n = em_tensor_numel(t);
    em_tensor *r = NULL, *v = NULL, *c = NULL;
    /* uniform in [2l - 1, 2u - 1), in f64 on the host's side of the inner device */
    NN_TRY(em_rand_uniform(em_tensor_shape(t), em_tensor_rank(t), EM_F64, 2 * l - 1, 2 * u - 1,
                           seed, nn_inner_dev(t), &r));
    double *h = malloc((size_t)(n ? n : 1) * sizeof *h);
    em_status s = h ? EM_OK : em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
    if (s == EM_OK) s = em_tensor_to_data(r, h, (size_t)(n ? n : 1) * sizeof *h);
    em_tensor_release(r);
    for (int64_t i = 0; s == EM_OK && i < n; i++) {
        double x = nn_erfinv(h[i]) * std * sqrt(2.0) + mean;
        h[i] = x < a ? a : x > b ? b : x;
    }
    if (s == EM_OK)
        s = em_tensor_from_data(h, EM_F64, em_tensor_shape(t), em_tensor_rank(t),
                                nn_inner_dev(t), &v);
    free(h);
    if (s == EM_OK && em_tensor_dtype(t) != EM_F64) {
        s = em_cast(v, em_tensor_dtype(t), &c);
        em_tensor_release(v);
        v = c;
    }
    if (s != EM_OK) {
        em_tensor_release(v);
        return s;
    }
    return nn_put(t, v);
}

/* ---- on every tensor of a set: tensor i with seed nn_derive(seed, i) ---- */

typedef enum { NN_I_NORMAL, NN_I_TRUNC, NN_I_CONST } nn_init_kind;

static em_status nn_init_all(const char *fn, const em_params *params, nn_init_kind k,
                             double mean, double std, double a, double b, uint64_t seed) {
    if (!params) return nn_null(fn, "params");
    size_t n = em_params_count(params);
    for (size_t i = 0; i < n; i++) {
        em_tensor *t = em_params_get(params, i);
        if (em_tensor_kind(t) == EM_KIND_QUANTIZED) continue; /* a constant (em_params_quantize) */
        em_status s = k == NN_I_NORMAL ? em_init_tensor_normal(t, mean, std, nn_derive(seed, i))
                      : k == NN_I_TRUNC
                          ? em_init_tensor_trunc_normal(t, mean, std, a, b, nn_derive(seed, i))
                          : em_init_tensor_constant(t, mean);
        if (s != EM_OK) return nn_context(s, "%s: '%s'", fn, em_params_name(params, i));
    }
    return EM_OK;
}

em_status em_init_normal(const em_params *params, double mean, double std, uint64_t seed) {
    return nn_init_all("em_init_normal", params, NN_I_NORMAL, mean, std, 0, 0, seed);
}

em_status em_init_trunc_normal(const em_params *params, double mean, double std, double a,
                               double b, uint64_t seed) {
    return nn_init_all("em_init_trunc_normal", params, NN_I_TRUNC, mean, std, a, b, seed);
}

em_status em_init_constant(const em_params *params, double value) {
    return nn_init_all("em_init_constant", params, NN_I_CONST, value, 0, 0, 0, 0);
}

em_status em_init_zeros(const em_params *params) {
    return nn_init_all("em_init_zeros", params, NN_I_CONST, 0, 0, 0, 0, 0);
}

em_status em_init_ones(const em_params *params) {
    return nn_init_all("em_init_ones", params, NN_I_CONST, 1, 0, 0, 0, 0);
}
