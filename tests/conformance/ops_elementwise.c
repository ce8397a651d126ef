/*
 * The elementwise family's wrappers for the conformance runner: one per op name.
 * Params: "s" (the scalar of the *_scalar ops), "lo"/"hi" (clamp; absent means no bound),
 * "value" (masked_fill). The consuming `_` ops run on a clone of input 0, so that they take
 * their in-place path on every backend.
 */
#include <math.h>

#include "conformance.h"

/* A unary op: in[0]. */
#define W_UNARY(name)                                                                        \
    static em_status w_##name(em_tensor *const *in, int nin, const conf_params *p,           \
                              em_tensor **out, int *nout) {                                  \
        (void)p;                                                                             \
        *nout = 1;                                                                           \
        if (nin < 1) return EM_ERR_ARG;                                                      \
        return em_##name(in[0], &out[0]);                                                    \
    }

/* A binary op: in[0], in[1]. */
#define W_BINARY(name)                                                                       \
    static em_status w_##name(em_tensor *const *in, int nin, const conf_params *p,           \
                              em_tensor **out, int *nout) {                                  \
        (void)p;                                                                             \
        *nout = 1;                                                                           \
        if (nin < 2) return EM_ERR_ARG;                                                      \
        return em_##name(in[0], in[1], &out[0]);                                             \
    }

/* A scalar op: in[0] and param "s". */
#define W_SCALAR(name)                                                                       \
    static em_status w_##name(em_tensor *const *in, int nin, const conf_params *p,           \
                              em_tensor **out, int *nout) {                                  \
        *nout = 1;                                                                           \
        if (nin < 1) return EM_ERR_ARG;                                                      \
        return em_##name(in[0], conf_f64(p, "s", 0.0), &out[0]);                             \
    }

/* A consuming binary op applied to a clone of in[0] (which it then owns). */
#define W_BINARY_(name)                                                                      \
    static em_status w_##name##_(em_tensor *const *in, int nin, const conf_params *p,        \
                                 em_tensor **out, int *nout) {                               \
        (void)p;                                                                             \
        *nout = 1;                                                                           \
        if (nin < 2) return EM_ERR_ARG;                                                      \
        em_tensor *c = NULL;                                                                 \
        em_status s = em_clone(in[0], &c);                                                   \
        if (s != EM_OK) return s;                                                            \
        return em_##name##_(c, in[1], &out[0]);                                              \
    }

/* A consuming scalar op applied to a clone of in[0]. */
#define W_SCALAR_(name)                                                                      \
    static em_status w_##name##_(em_tensor *const *in, int nin, const conf_params *p,        \
                                 em_tensor **out, int *nout) {                               \
        *nout = 1;                                                                           \
        if (nin < 1) return EM_ERR_ARG;                                                      \
        em_tensor *c = NULL;                                                                 \
        em_status s = em_clone(in[0], &c);                                                   \
        if (s != EM_OK) return s;                                                            \
        return em_##name##_(c, conf_f64(p, "s", 0.0), &out[0]);                              \
    }

W_UNARY(neg) W_UNARY(abs) W_UNARY(exp) W_UNARY(log) W_UNARY(log1p) W_UNARY(sqrt)
W_UNARY(rsqrt) W_UNARY(sin) W_UNARY(cos) W_UNARY(tanh) W_UNARY(sigmoid) W_UNARY(relu)
W_UNARY(gelu) W_UNARY(silu) W_UNARY(erf) W_UNARY(floor) W_UNARY(ceil) W_UNARY(round)
W_UNARY(recip) W_UNARY(sign) W_UNARY(logical_not)

W_BINARY(add) W_BINARY(sub) W_BINARY(mul) W_BINARY(div) W_BINARY(pow) W_BINARY(remainder)
W_BINARY(maximum) W_BINARY(minimum)
W_BINARY(eq) W_BINARY(ne) W_BINARY(lt) W_BINARY(le) W_BINARY(gt) W_BINARY(ge)
W_BINARY(logical_and) W_BINARY(logical_or)

/* issue 14 */
W_UNARY(tan) W_UNARY(asin) W_UNARY(acos) W_UNARY(atan) W_UNARY(sinh) W_UNARY(cosh)
W_UNARY(expm1) W_UNARY(log2) W_UNARY(log10) W_UNARY(isnan) W_UNARY(isinf) W_UNARY(isfinite)
W_BINARY(atan2) W_BINARY(logical_xor)

/* softplus(in[0], beta, threshold): PyTorch's defaults 1 and 20 when absent. */
static em_status w_softplus(em_tensor *const *in, int nin, const conf_params *p,
                            em_tensor **out, int *nout) {
    *nout = 1;
    if (nin < 1) return EM_ERR_ARG;
    return em_softplus(in[0], conf_f64(p, "beta", 1.0), conf_f64(p, "threshold", 20.0), &out[0]);
}

/* nan_to_num(in[0], nan, posinf, neginf): an absent posinf / neginf is the default (NULL). */
static em_status w_nan_to_num(em_tensor *const *in, int nin, const conf_params *p,
                              em_tensor **out, int *nout) {
    *nout = 1;
    if (nin < 1) return EM_ERR_ARG;
    double pi = conf_f64(p, "posinf", NAN), ni = conf_f64(p, "neginf", NAN);
    return em_nan_to_num(in[0], conf_f64(p, "nan", 0.0), isnan(pi) ? NULL : &pi,
                         isnan(ni) ? NULL : &ni, &out[0]);
}

/* clamp_tensor(in[0], lo, hi): inputs x, lo, hi, or x and one bound named by param "which"
 * (0: lo, 1: hi). */
static em_status w_clamp_tensor(em_tensor *const *in, int nin, const conf_params *p,
                                em_tensor **out, int *nout) {
    *nout = 1;
    if (nin < 2) return EM_ERR_ARG;
    if (nin >= 3) return em_clamp_tensor(in[0], in[1], in[2], &out[0]);
    bool hi = conf_int(p, "which", 0) == 1;
    return em_clamp_tensor(in[0], hi ? NULL : in[1], hi ? in[1] : NULL, &out[0]);
}

W_SCALAR(add_scalar) W_SCALAR(sub_scalar) W_SCALAR(mul_scalar) W_SCALAR(div_scalar)
W_SCALAR(pow_scalar) W_SCALAR(remainder_scalar) W_SCALAR(maximum_scalar)
W_SCALAR(minimum_scalar) W_SCALAR(eq_scalar) W_SCALAR(lt_scalar) W_SCALAR(gt_scalar)

W_BINARY_(add) W_BINARY_(sub) W_BINARY_(mul) W_BINARY_(div)
W_SCALAR_(mul_scalar) W_SCALAR_(add_scalar)

/* A consuming unary op (relu_, exp_) on a clone of in[0]. */
#define W_UNARY_(name)                                                                         \
    static em_status w_##name(em_tensor *const *in, int nin, const conf_params *p,             \
                              em_tensor **out, int *nout) {                                    \
        (void)p;                                                                               \
        *nout = 1;                                                                             \
        if (nin < 1) return EM_ERR_ARG;                                                        \
        em_tensor *c = NULL;                                                                   \
        em_status s = em_clone(in[0], &c);                                                     \
        if (s != EM_OK) return s;                                                              \
        return em_##name(c, &out[0]);                                                          \
    }
W_UNARY_(relu_) W_UNARY_(exp_)

/* clamp(in[0], lo, hi); an absent bound is infinite. */
static em_status w_clamp(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                         int *nout) {
    *nout = 1;
    if (nin < 1) return EM_ERR_ARG;
    return em_clamp(in[0], conf_f64(p, "lo", -INFINITY), conf_f64(p, "hi", INFINITY), &out[0]);
}

/* where(in[0] cond, in[1], in[2]). */
static em_status w_where(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                         int *nout) {
    (void)p;
    *nout = 1;
    if (nin < 3) return EM_ERR_ARG;
    return em_where(in[0], in[1], in[2], &out[0]);
}

/* masked_fill(in[0] x, in[1] mask, value). */
static em_status w_masked_fill(em_tensor *const *in, int nin, const conf_params *p,
                               em_tensor **out, int *nout) {
    *nout = 1;
    if (nin < 2) return EM_ERR_ARG;
    return em_masked_fill(in[0], in[1], conf_f64(p, "value", 0.0), &out[0]);
}

/* cast(in[0], dtype). */
static em_status w_cast(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                        int *nout) {
    *nout = 1;
    if (nin < 1) return EM_ERR_ARG;
    return em_cast(in[0], (em_dtype)conf_int(p, "dtype", EM_F32), &out[0]);
}

/* full(shape, value, dtype) on the case's device; full_like(in[0], value). */
static em_status w_full(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                        int *nout) {
    (void)in, (void)nin;
    int64_t shape[EM_MAX_RANK];
    int r = conf_ints(p, "shape", shape, EM_MAX_RANK);
    *nout = 1;
    return em_full(shape, r < 0 ? 0 : r, conf_f64(p, "value", 0.0),
                   (em_dtype)conf_int(p, "dtype", EM_F32), p->dev, &out[0]);
}

static em_status w_full_like(em_tensor *const *in, int nin, const conf_params *p,
                             em_tensor **out, int *nout) {
    *nout = 1;
    if (nin < 1) return EM_ERR_ARG;
    return em_full_like(in[0], conf_f64(p, "value", 0.0), &out[0]);
}

/* arange(start, stop, step, dtype) on the case's device. */
static em_status w_eye(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                       int *nout) {
    (void)in, (void)nin;
    *nout = 1;
    return em_eye(conf_int(p, "n", 0), conf_int(p, "m", -1),
                  (em_dtype)conf_int(p, "dtype", EM_F32), p->dev, &out[0]);
}

static em_status w_linspace(em_tensor *const *in, int nin, const conf_params *p,
                            em_tensor **out, int *nout) {
    (void)in, (void)nin;
    *nout = 1;
    return em_linspace(conf_f64(p, "start", 0.0), conf_f64(p, "end", 0.0),
                       conf_int(p, "steps", 0), (em_dtype)conf_int(p, "dtype", EM_F32), p->dev,
                       &out[0]);
}

static em_status w_arange(em_tensor *const *in, int nin, const conf_params *p, em_tensor **out,
                          int *nout) {
    (void)in, (void)nin;
    *nout = 1;
    return em_arange(conf_f64(p, "start", 0.0), conf_f64(p, "stop", 0.0),
                     conf_f64(p, "step", 1.0), (em_dtype)conf_int(p, "dtype", EM_F32), p->dev,
                     &out[0]);
}

#define E(name) {#name, w_##name}

const conf_op conf_ops_elementwise[] = {
    E(neg), E(abs), E(exp), E(log), E(log1p), E(sqrt), E(rsqrt), E(sin), E(cos), E(tanh),
    E(sigmoid), E(relu), E(gelu), E(silu), E(erf), E(floor), E(ceil), E(round), E(recip),
    E(sign), E(clamp), E(logical_not),
    E(add), E(sub), E(mul), E(div), E(pow), E(remainder), E(maximum), E(minimum),
    E(add_scalar), E(sub_scalar), E(mul_scalar), E(div_scalar), E(pow_scalar),
    E(remainder_scalar), E(maximum_scalar), E(minimum_scalar),
    E(add_), E(sub_), E(mul_), E(div_), E(mul_scalar_), E(add_scalar_), E(relu_), E(exp_),
    E(eq), E(ne), E(lt), E(le), E(gt), E(ge), E(eq_scalar), E(lt_scalar), E(gt_scalar),
    E(logical_and), E(logical_or), E(where), E(masked_fill), E(cast),
    E(full), E(full_like), E(arange), E(eye), E(linspace),
    E(tan), E(asin), E(acos), E(atan), E(sinh), E(cosh), E(expm1), E(log2), E(log10),
    E(isnan), E(isinf), E(isfinite), E(atan2), E(logical_xor), E(softplus), E(nan_to_num),
    E(clamp_tensor),
    {NULL, NULL},
};
