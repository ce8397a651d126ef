/*
 * norm.c — the reference backend's normalization kernels: batch_norm (training and eval,
 * with the running statistics updated in place) and its backward, group_norm and rms_norm.
 * They are the definitions: plain loops over views of any strides, two passes in double
 * (the mean, summed shifted by the first element so that a large mean does not swamp the
 * sum, then the sum of squared deviations from it).
 */
#include <math.h>

#include "ref.h"

/** Element [i0, i1, i2] of a 3-d view as a double / its offset. */
static inline int64_t off3(const em_view *v, int64_t i0, int64_t i1, int64_t i2) {
    return v->offset + i0 * v->strides[0] + i1 * v->strides[1] + i2 * v->strides[2];
}
static inline double ld3(const em_view *v, int64_t i0, int64_t i1, int64_t i2) {
    return ref_ld(v->buf, v->dtype, off3(v, i0, i1, i2));
}
/** Element i of an optional 1-d view (dflt when the view is NULL). */
static inline double ld1(const em_view *v, int64_t i, double dflt) {
    return v ? ref_ld(v->buf, v->dtype, v->offset + i * v->strides[0]) : dflt;
}
static inline void st1(const em_view *v, int64_t i, double x) {
    if (v) ref_st(v->buf, v->dtype, v->offset + i * v->strides[0], x);
}

em_status ref_batch_norm(void *ctx, const em_view *out, const em_view *save_mean,
                         const em_view *save_invstd, const em_view *x, const em_view *weight,
                         const em_view *bias, const em_view *running_mean,
                         const em_view *running_var, bool training, double momentum,
                         double eps) {
    (void)ctx;
    const int64_t N = x->shape[0], C = x->shape[1], S = x->shape[2], M = N * S;
    if (M * C == 0) return EM_OK; /* no values: nothing is written */
    for (int64_t c = 0; c < C; c++) {
        double mean, var;
        if (training) {
            double s = 0, q = 0;
            const double sh = M ? ld3(x, 0, c, 0) : 0.0;
            for (int64_t n = 0; n < N; n++)
                for (int64_t i = 0; i < S; i++) s += ld3(x, n, c, i) - sh;
            mean = M ? sh + s / (double)M : 0.0;
            for (int64_t n = 0; n < N; n++)
                for (int64_t i = 0; i < S; i++) {
                    double d = ld3(x, n, c, i) - mean;
                    q += d * d;
                }
            var = M ? q / (double)M : 0.0;
            if (running_mean && running_var) {
                const double unbiased = M > 1 ? q / (double)(M - 1) : var;
                st1(running_mean, c, (1.0 - momentum) * ld1(running_mean, c, 0) + momentum * mean);
                st1(running_var, c, (1.0 - momentum) * ld1(running_var, c, 0) + momentum * unbiased);
            }
        } else {
            mean = ld1(running_mean, c, 0);
            var = ld1(running_var, c, 1);
        }
        const double inv = 1.0 / sqrt(var + eps);
        st1(save_mean, c, mean);
        st1(save_invstd, c, inv);
        const double w = ld1(weight, c, 1.0), b = ld1(bias, c, 0.0);
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < S; i++)
                ref_st(out->buf, out->dtype, off3(out, n, c, i),
                       (ld3(x, n, c, i) - mean) * inv * w + b);
    }
    return EM_OK;
}

/** With xhat = (x - mean) * invstd per channel and M = N*S:
 *    gbias = sum gy,  gweight = sum gy * xhat,
 *    gx = weight * invstd * (gy - [training] (gbias + xhat * gweight) / M). */
em_status ref_batch_norm_backward(void *ctx, const em_view *gx, const em_view *gweight,
                                  const em_view *gbias, const em_view *gy, const em_view *x,
                                  const em_view *mean, const em_view *invstd,
                                  const em_view *weight, bool training) {
    (void)ctx;
    const int64_t N = x->shape[0], C = x->shape[1], S = x->shape[2], M = N * S;
    for (int64_t c = 0; c < C; c++) {
        const double mu = ld1(mean, c, 0), inv = ld1(invstd, c, 1);
        double sg = 0, sgx = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < S; i++) {
                const double g = ld3(gy, n, c, i);
                sg += g;
                sgx += g * (ld3(x, n, c, i) - mu) * inv;
            }
        st1(gbias, c, sg);
        st1(gweight, c, sgx);
        if (!gx) continue;
        const double k = ld1(weight, c, 1.0) * inv;
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < S; i++) {
                double g = ld3(gy, n, c, i);
                if (training && M > 0) {
                    const double xh = (ld3(x, n, c, i) - mu) * inv;
                    g -= (sg + xh * sgx) / (double)M;
                }
                ref_st(gx->buf, gx->dtype, off3(gx, n, c, i), g * k);
            }
    }
    return EM_OK;
}

em_status ref_group_norm(void *ctx, const em_view *out, const em_view *save_mean,
                         const em_view *save_invstd, const em_view *x, const em_view *weight,
                         const em_view *bias, int64_t groups, double eps) {
    (void)ctx;
    const int64_t N = x->shape[0], C = x->shape[1], S = x->shape[2];
    const int64_t Cg = groups > 0 ? C / groups : 0, K = Cg * S;
    if (N * K == 0) return EM_OK; /* no values: nothing is written */
    for (int64_t n = 0; n < N; n++)
        for (int64_t g = 0; g < groups; g++) {
            double s = 0, q = 0;
            const double sh = K ? ld3(x, n, g * Cg, 0) : 0.0;
            for (int64_t c = g * Cg; c < (g + 1) * Cg; c++)
                for (int64_t i = 0; i < S; i++) s += ld3(x, n, c, i) - sh;
            const double mean = K ? sh + s / (double)K : 0.0;
            for (int64_t c = g * Cg; c < (g + 1) * Cg; c++)
                for (int64_t i = 0; i < S; i++) {
                    double d = ld3(x, n, c, i) - mean;
                    q += d * d;
                }
            const double inv = 1.0 / sqrt((K ? q / (double)K : 0.0) + eps);
            if (save_mean)
                ref_st(save_mean->buf, save_mean->dtype,
                       save_mean->offset + n * save_mean->strides[0] + g * save_mean->strides[1],
                       mean);
            if (save_invstd)
                ref_st(save_invstd->buf, save_invstd->dtype,
                       save_invstd->offset + n * save_invstd->strides[0] +
                           g * save_invstd->strides[1],
                       inv);
            for (int64_t c = g * Cg; c < (g + 1) * Cg; c++) {
                const double w = ld1(weight, c, 1.0), b = ld1(bias, c, 0.0);
                for (int64_t i = 0; i < S; i++)
                    ref_st(out->buf, out->dtype, off3(out, n, c, i),
                           (ld3(x, n, c, i) - mean) * inv * w + b);
            }
        }
    return EM_OK;
}

em_status ref_rms_norm(void *ctx, const em_view *out, const em_view *save_invrms,
                       const em_view *x, const em_view *weight, int64_t norm_numel,
                       double eps) {
    (void)ctx;
    const int64_t rows = x->shape[0];
    const int64_t xs0 = x->strides[0], xs1 = x->strides[1];
    const int64_t os0 = out->strides[0], os1 = out->strides[1];
    if (rows * norm_numel == 0) return EM_OK; /* no values: nothing is written */
    for (int64_t r = 0; r < rows; r++) {
        const int64_t xb = x->offset + r * xs0, ob = out->offset + r * os0;
        double q = 0;
        for (int64_t j = 0; j < norm_numel; j++) {
            const double v = ref_ld(x->buf, x->dtype, xb + j * xs1);
            q += v * v;
        }
        const double inv = 1.0 / sqrt((norm_numel ? q / (double)norm_numel : 0.0) + eps);
        st1(save_invrms, r, inv);
        for (int64_t j = 0; j < norm_numel; j++)
            ref_st(out->buf, out->dtype, ob + j * os1,
                   ref_ld(x->buf, x->dtype, xb + j * xs1) * inv * ld1(weight, j, 1.0));
    }
    return EM_OK;
}
