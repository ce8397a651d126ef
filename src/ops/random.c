/*
 * random.c — em_rand_uniform, em_rand_normal, em_rand_bernoulli: checks, then the backend's
 * `random` slot (Philox-4x32-10; the exact counter-to-value mapping is documented at the top
 * of src/backends/ref/random.c, and every backend reproduces it). On an autodiff device a
 * float result is a leaf of the graph (a constant), as em_full's.
 */
#include <math.h>
#include <string.h>

#include "autodiff/autodiff.h"

/** Checks the shared arguments, allocates the output on dev and fills it with op. */
static em_status rand_make(const char *fn, const int64_t *shape, int rank, em_dtype dt,
                           em_random_op op, const double *params, uint64_t seed, em_device dev,
                           em_tensor **out) {
    int64_t numel;
    EMI_TRY(emi_check_shape(fn, shape, rank, &numel));
    EMI_TRY(emi_check_device_value(fn, dev));
    const em_backend_ops *ops;
    void *ctx;
    em_status s = emi_backend(dev, &ops, &ctx);
    if (s != EM_OK) return emi_fail_prefixed(s, fn);
    if (numel > 0) EMI_TRY(emi_need(fn, ops, ops->random != NULL, "random"));
    em_tensor *t;
    EMI_TRY(emi_empty(fn, dev, dt, shape, rank, &t));
    if (numel > 0) s = ops->random(t->st->ctx, op, &t->v, seed, params);
    if (s == EM_OK) s = emi_ad_created(t, dev);
    if (s != EM_OK) {
        em_tensor_release(t);
        return s;
    }
    *out = t;
    return EM_OK;
}

/** dt must be a valid dtype of the wanted kind: float (float_only) or any non-quantized. */
static em_status rand_check_dtype(const char *fn, em_dtype dt, bool float_only) {
    if ((int)dt < 0 || (int)dt >= EM_DTYPE_COUNT)
        return emi_fail(EM_ERR_DTYPE, "%s: invalid dtype %d", fn, (int)dt);
    em_kind k = em_dtype_kind(dt);
    if (float_only && k != EM_KIND_FLOAT)
        return emi_fail(EM_ERR_DTYPE, "%s: expected a float dtype, got %s (%s)", fn,
                        em_kind_name(k), em_dtype_name(dt));
    if (k == EM_KIND_QUANTIZED)
        return emi_fail(EM_ERR_DTYPE, "%s: quantized dtype %s is not supported", fn,
                        em_dtype_name(dt));
    return EM_OK;
}

em_status em_rand_uniform(const int64_t *shape, int rank, em_dtype dt, double lo, double hi,
                          uint64_t seed, em_device dev, em_tensor **out) {
    static const char fn[] = "em_rand_uniform";
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_shape(fn, shape, rank, NULL));
    EMI_TRY(rand_check_dtype(fn, dt, true));
    if (!isfinite(lo) || !isfinite(hi) || lo > hi)
        return emi_fail(EM_ERR_ARG, "%s: need finite lo <= hi, got [%g, %g)", fn, lo, hi);
    const double params[2] = {lo, hi};
    return rand_make(fn, shape, rank, dt, EM_RAND_UNIFORM, params, seed, dev, out);
}

em_status em_rand_normal(const int64_t *shape, int rank, em_dtype dt, double mean, double std,
                         uint64_t seed, em_device dev, em_tensor **out) {
    static const char fn[] = "em_rand_normal";
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_shape(fn, shape, rank, NULL));
    EMI_TRY(rand_check_dtype(fn, dt, true));
    if (!isfinite(mean) || !isfinite(std) || std < 0)
        return emi_fail(EM_ERR_ARG, "%s: need a finite mean and a finite std >= 0, got %g, %g",
                        fn, mean, std);
    const double params[2] = {mean, std};
    return rand_make(fn, shape, rank, dt, EM_RAND_NORMAL, params, seed, dev, out);
}

em_status em_rand_bernoulli(const int64_t *shape, int rank, em_dtype dt, double p,
                            uint64_t seed, em_device dev, em_tensor **out) {
    static const char fn[] = "em_rand_bernoulli";
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_shape(fn, shape, rank, NULL));
    EMI_TRY(rand_check_dtype(fn, dt, false));
    if (!(p >= 0.0 && p <= 1.0))
        return emi_fail(EM_ERR_ARG, "%s: p must be in [0, 1], got %g", fn, p);
    const double params[1] = {p};
    return rand_make(fn, shape, rank, dt, EM_RAND_BERNOULLI, params, seed, dev, out);
}
