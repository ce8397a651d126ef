/*
 * The reduce family's wrappers for the conformance runner: the reductions, cumsum, softmax,
 * log_softmax, and matmul.
 *
 * Params: "dim" (absent: the whole-tensor form), "keepdim" (default false), "correction"
 * (var only, default 1).
 */
#include <stddef.h>

#include "conformance.h"

#define NO_DIM INT64_MIN

typedef em_status (*whole_fn)(const em_tensor *, em_tensor **);
typedef em_status (*dim_fn)(const em_tensor *, int, bool, em_tensor **);

/** Calls the whole form when "dim" is absent, else the _dim form. */
static em_status red(whole_fn w, dim_fn d, em_tensor *const *in, const conf_params *p,
                     em_tensor **out, int *nout) {
    int64_t dim = conf_int(p, "dim", NO_DIM);
    *nout = 1;
    if (dim == NO_DIM) return w(in[0], &out[0]);
    return d(in[0], (int)dim, conf_bool(p, "keepdim", false), &out[0]);
}

#define RED_WRAPPER(name)                                                                    \
    static em_status w_##name(em_tensor *const *in, int nin, const conf_params *p,         \
                              em_tensor **out, int *nout) {                                \
        (void)nin;                                                                         \
        return red(em_##name, em_##name##_dim, in, p, out, nout);                          \
    }

RED_WRAPPER(sum)
RED_WRAPPER(mean)
RED_WRAPPER(prod)
RED_WRAPPER(max)
RED_WRAPPER(min)
RED_WRAPPER(argmax)
RED_WRAPPER(argmin)
RED_WRAPPER(logsumexp)

static em_status w_var(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                       int *nout) {
    (void)nin;
    int64_t dim = conf_int(p, "dim", NO_DIM);
    int corr = (int)conf_int(p, "correction", 1);
    *nout = 1;
    if (dim == NO_DIM) return em_var(in[0], corr, &out[0]);
    return em_var_dim(in[0], (int)dim, corr, conf_bool(p, "keepdim", false), &out[0]);
}

static em_status w_std(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                       int *nout) {
    (void)nin;
    int64_t dim = conf_int(p, "dim", NO_DIM);
    int corr = (int)conf_int(p, "correction", 1);
    *nout = 1;
    if (dim == NO_DIM) return em_std(in[0], corr, &out[0]);
    return em_std_dim(in[0], (int)dim, corr, conf_bool(p, "keepdim", false), &out[0]);
}

#define ANY_ALL_WRAPPER(op)                                                                  \
    static em_status w_##op(em_tensor *const *in, int nin, const conf_params *p,             \
                            em_tensor **out, int *nout) {                                    \
        (void)nin;                                                                           \
        int64_t dim = conf_int(p, "dim", NO_DIM);                                            \
        *nout = 1;                                                                           \
        if (dim == NO_DIM) return em_##op(in[0], &out[0]);                                   \
        return em_##op##_dim(in[0], (int)dim, conf_bool(p, "keepdim", false), &out[0]);      \
    }
ANY_ALL_WRAPPER(any)
ANY_ALL_WRAPPER(all)

static em_status w_reduce_dims(em_tensor *const *in, const conf_params *p, em_tensor **out,
                               int *nout, bool mean) {
    int64_t d64[EM_MAX_RANK];
    int dims[EM_MAX_RANK];
    int n = conf_ints(p, "dims", d64, EM_MAX_RANK);
    for (int i = 0; i < n; i++) dims[i] = (int)d64[i];
    *nout = 1;
    bool keep = conf_bool(p, "keepdim", false);
    return mean ? em_mean_dims(in[0], dims, n < 0 ? 0 : n, keep, &out[0])
                : em_sum_dims(in[0], dims, n < 0 ? 0 : n, keep, &out[0]);
}

static em_status w_sum_dims(em_tensor *const *in, int nin, const conf_params *p,
                            em_tensor **out, int *nout) {
    (void)nin;
    return w_reduce_dims(in, p, out, nout, false);
}

static em_status w_mean_dims(em_tensor *const *in, int nin, const conf_params *p,
                             em_tensor **out, int *nout) {
    (void)nin;
    return w_reduce_dims(in, p, out, nout, true);
}

static em_status w_cumsum(em_tensor *const *in, int nin, const conf_params *p,
                          em_tensor **out, int *nout) {
    (void)nin;
    *nout = 1;
    return em_cumsum(in[0], (int)conf_int(p, "dim", 0), &out[0]);
}

static em_status w_cumprod(em_tensor *const *in, int nin, const conf_params *p,
                           em_tensor **out, int *nout) {
    (void)nin;
    *nout = 1;
    return em_cumprod(in[0], (int)conf_int(p, "dim", 0), &out[0]);
}

/* cummax / cummin: want 0 both outputs, 1 values only, 2 indices only */
static em_status w_cum_ext(em_tensor *const *in, const conf_params *p, em_tensor **out,
                           int *nout, bool is_max) {
    int64_t want = conf_int(p, "want", 0);
    em_tensor **v = want == 0 || want == 1 ? &out[0] : NULL;
    em_tensor **i = want == 0 ? &out[1] : want == 2 ? &out[0] : NULL;
    int dim = (int)conf_int(p, "dim", 0);
    em_status s = is_max ? em_cummax(in[0], dim, v, i) : em_cummin(in[0], dim, v, i);
    *nout = s != EM_OK ? 0 : want == 0 ? 2 : 1;
    return s;
}

static em_status w_cummax(em_tensor *const *in, int nin, const conf_params *p,
                          em_tensor **out, int *nout) {
    (void)nin;
    return w_cum_ext(in, p, out, nout, true);
}

static em_status w_cummin(em_tensor *const *in, int nin, const conf_params *p,
                          em_tensor **out, int *nout) {
    (void)nin;
    return w_cum_ext(in, p, out, nout, false);
}

static em_status w_softmax(em_tensor *const *in, int nin, const conf_params *p,
                           em_tensor **out, int *nout) {
    (void)nin;
    *nout = 1;
    return em_softmax(in[0], (int)conf_int(p, "dim", -1), &out[0]);
}

static em_status w_log_softmax(em_tensor *const *in, int nin, const conf_params *p,
                               em_tensor **out, int *nout) {
    (void)nin;
    *nout = 1;
    return em_log_softmax(in[0], (int)conf_int(p, "dim", -1), &out[0]);
}

static em_status w_matmul(em_tensor *const *in, int nin, const conf_params *p,
                          em_tensor **out, int *nout) {
    (void)nin;
    (void)p;
    *nout = 1;
    return em_matmul(in[0], in[1], &out[0]);
}

const conf_op conf_ops_reduce[] = {
    {"sum", w_sum},
    {"mean", w_mean},
    {"prod", w_prod},
    {"max", w_max},
    {"min", w_min},
    {"argmax", w_argmax},
    {"argmin", w_argmin},
    {"var", w_var},
    {"logsumexp", w_logsumexp},
    {"std", w_std},
    {"any", w_any},
    {"all", w_all},
    {"sum_dims", w_sum_dims},
    {"mean_dims", w_mean_dims},
    {"cumsum", w_cumsum},
    {"cumprod", w_cumprod},
    {"cummax", w_cummax},
    {"cummin", w_cummin},
    {"softmax", w_softmax},
    {"log_softmax", w_log_softmax},
    {"matmul", w_matmul},
    {NULL, NULL},
};
