/* norm.c — the cpu backend's normalization kernels: batch_norm (training and eval, running
 * statistics updated in place) and its backward, group_norm and rms_norm. The loops run f32
 * and f64 on contiguous data; the entry points stage f16/bf16 through f32 and strided
 * operands (stage.h), as layer_norm does. Integer dtypes (which the core never passes) go to
 * ref.
 *
 * Statistics take one pass over the data: per block of NM_BLOCK elements, vector lanes (GCC
 * vectors, the same source at every level) of the element type sum d = x - shift and d*d (shift: the first element of the channel or group,
 * which takes the mean's magnitude out of the squares: no catastrophic cancellation when
 * |mean| >> std), and each block's lane sums are added in double. mean = shift + S1/M and
 * var = (S2 - S1^2/M)/M, both in double. A second pass normalizes: y = (x - mean) * scale + b
 * (see nm_affine for the f32 rounding of the mean).
 * batch_norm runs its channels on the pool, group_norm its (n, group) rows, rms_norm its rows.
 * The backward of batch_norm is the same pair: one fused pass of sum(gy) and
 * sum(gy * (x - mean)) per channel, then gx = gy*k1 + (x - mean)*k2 + k3. */
#include <math.h>

#include "cpu.h"
#include "stage.h"

#define NM_BLOCK 512       /* elements summed in the element type before a double add */
#define NM_GRAIN (1 << 15) /* elements per task, about */

static inline int64_t nm_imax(int64_t a, int64_t b) { return a > b ? a : b; }

/* 32-byte GCC vectors (two registers of SSE at the portable level, one of AVX above); the
 * reductions below keep NM_ACC of them as independent accumulators. */
typedef float nm_vf32 __attribute__((vector_size(32)));
typedef double nm_vf64 __attribute__((vector_size(32)));
#define NM_ACC 2
/* An unaligned load of a vector of type V at p, and the sum of a vector's W lanes in double
 * (macros: a function taking or returning them would change the ABI at the portable level). */
#define NM_VLD(V, p)                                                                              \
    ({                                                                                            \
        V v_;                                                                                     \
        __builtin_memcpy(&v_, (p), sizeof v_);                                                    \
        v_;                                                                                       \
    })
#define NM_HSUM(W, v)                                                                             \
    ({                                                                                            \
        double t_ = 0;                                                                            \
        for (int k_ = 0; k_ < (W); k_++) t_ += (double)(v)[k_];                                   \
        t_;                                                                                       \
    })

/* The loops for one element type T (vector type V of W lanes). */
#define NM_LOOPS(T, S, V, W)                                                                      \
    /* s1 += sum(p[i] - sh), s2 += sum((p[i] - sh)^2) over n elements, blocked */                 \
    static void nm_sums_##S(const T *restrict p, int64_t n, T sh, double *s1, double *s2) {       \
        const V vs = (V){0} + sh;                                                                 \
        for (int64_t b0 = 0; b0 < n; b0 += NM_BLOCK) {                                            \
            const int64_t m = n - b0 < NM_BLOCK ? n - b0 : NM_BLOCK;                              \
            const T *restrict q = p + b0;                                                         \
            V a0 = {0}, a1 = {0}, c0 = {0}, c1 = {0};                                             \
            int64_t i = 0;                                                                        \
            for (; i + NM_ACC * W <= m; i += NM_ACC * W) {                                        \
                const V d0 = NM_VLD(V, q + i) - vs, d1 = NM_VLD(V, q + i + W) - vs;               \
                a0 += d0, a1 += d1;                                                               \
                c0 += d0 * d0, c1 += d1 * d1;                                                     \
            }                                                                                     \
            double ta = NM_HSUM(W, a0 + a1), tc = NM_HSUM(W, c0 + c1);                          \
            for (; i < m; i++) {                                                                  \
                const T d = q[i] - sh;                                                            \
                ta += (double)d;                                                                  \
                tc += (double)d * (double)d;                                                      \
            }                                                                                     \
            *s1 += ta;                                                                            \
            *s2 += tc;                                                                            \
        }                                                                                         \
    }                                                                                             \
    /* s2 += sum(p[i]^2), blocked */                                                              \
    static void nm_sumsq_##S(const T *restrict p, int64_t n, double *s2) {                        \
        for (int64_t b0 = 0; b0 < n; b0 += NM_BLOCK) {                                            \
            const int64_t m = n - b0 < NM_BLOCK ? n - b0 : NM_BLOCK;                              \
            const T *restrict q = p + b0;                                                         \
            V c0 = {0}, c1 = {0};                                                                 \
            int64_t i = 0;                                                                        \
            for (; i + NM_ACC * W <= m; i += NM_ACC * W) {                                        \
                const V v0 = NM_VLD(V, q + i), v1 = NM_VLD(V, q + i + W);                         \
                c0 += v0 * v0, c1 += v1 * v1;                                                     \
            }                                                                                     \
            double tc = NM_HSUM(W, c0 + c1);                                                     \
            for (; i < m; i++) tc += (double)q[i] * (double)q[i];                                 \
            *s2 += tc;                                                                            \
        }                                                                                         \
    }                                                                                             \
    /* sg += sum(g[i]), sgx += sum(g[i] * (x[i] - mu)), blocked */                                \
    static void nm_gsums_##S(const T *restrict g, const T *restrict x, int64_t n, T mu,           \
                             double *sg, double *sgx) {                                           \
        const V vm = (V){0} + mu;                                                                 \
        for (int64_t b0 = 0; b0 < n; b0 += NM_BLOCK) {                                            \
            const int64_t m = n - b0 < NM_BLOCK ? n - b0 : NM_BLOCK;                              \
            const T *restrict gq = g + b0, *restrict xq = x + b0;                                 \
            V a0 = {0}, a1 = {0}, c0 = {0}, c1 = {0};                                             \
            int64_t i = 0;                                                                        \
            for (; i + NM_ACC * W <= m; i += NM_ACC * W) {                                        \
                const V g0 = NM_VLD(V, gq + i), g1 = NM_VLD(V, gq + i + W);                       \
                a0 += g0, a1 += g1;                                                               \
                c0 += g0 * (NM_VLD(V, xq + i) - vm), c1 += g1 * (NM_VLD(V, xq + i + W) - vm);     \
            }                                                                                     \
            double ta = NM_HSUM(W, a0 + a1), tc = NM_HSUM(W, c0 + c1);                          \
            for (; i < m; i++) {                                                                  \
                ta += (double)gq[i];                                                              \
                tc += (double)gq[i] * (double)(xq[i] - mu);                                       \
            }                                                                                     \
            *sg += ta;                                                                            \
            *sgx += tc;                                                                           \
        }                                                                                         \
    }                                                                                             \
    /* o[i] = (x[i] - mu) * k + b */                                                              \
    static void nm_affine_##S(T *restrict o, const T *restrict x, int64_t n, T mu, T k, T b) {    \
        for (int64_t i = 0; i < n; i++) o[i] = (x[i] - mu) * k + b;                               \
    }                                                                                             \
    /* o[i] = g[i] * k1 + (x[i] - mu) * k2 + k3 */                                                \
    static void nm_bwd_##S(T *restrict o, const T *restrict g, const T *restrict x, int64_t n,    \
                           T mu, T k1, T k2, T k3) {                                              \
        for (int64_t i = 0; i < n; i++) o[i] = g[i] * k1 + (x[i] - mu) * k2 + k3;                 \
    }                                                                                             \
    /* o[i] = x[i] * r * w[i] (w NULL: 1) */                                                      \
    static void nm_rms_row_##S(T *restrict o, const T *restrict x, const T *restrict w,           \
                               int64_t n, T r) {                                                  \
        if (w)                                                                                    \
            for (int64_t i = 0; i < n; i++) o[i] = x[i] * r * w[i];                               \
        else                                                                                      \
            for (int64_t i = 0; i < n; i++) o[i] = x[i] * r;                                      \
    }

NM_LOOPS(float, f32, nm_vf32, 8)
NM_LOOPS(double, f64, nm_vf64, 4)

/* Element i of an optional contiguous [n] array of dtype dt (f32 or f64), dflt when NULL. */
static inline double nm_ld(em_dtype dt, const void *p, int64_t i, double dflt) {
    if (!p) return dflt;
    return dt == EM_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}
static inline void nm_st(em_dtype dt, void *p, int64_t i, double v) {
    if (!p) return;
    if (dt == EM_F32) ((float *)p)[i] = (float)v;
    else ((double *)p)[i] = v;
}

/* mean and biased variance of nseg segments of len elements, segment j at p + j * stride
 * (elements of dt), in one blocked pass shifted by the first element. */
static void nm_stats(em_dtype dt, const void *p, int64_t nseg, int64_t stride, int64_t len,
                     double *mean, double *var) {
    double s1 = 0, s2 = 0;
    const double m = (double)(nseg * len);
    if (dt == EM_F32) {
        const float *x = p, sh = x[0];
        for (int64_t j = 0; j < nseg; j++) nm_sums_f32(x + j * stride, len, sh, &s1, &s2);
        *mean = (double)sh + s1 / m;
    } else {
        const double *x = p, sh = x[0];
        for (int64_t j = 0; j < nseg; j++) nm_sums_f64(x + j * stride, len, sh, &s1, &s2);
        *mean = sh + s1 / m;
    }
    const double v = (s2 - s1 * (s1 / m)) / m;
    *var = v > 0 ? v : 0;
}

/* o = (x - mu) * k + b over n elements at off. In f32 the mean is rounded to float for the
 * subtraction, and what that rounding took off (mu - (float)mu, times k) goes into b, so
 * that |mean| >> std costs no accuracy (x - (float)mu is exact when x is near the mean). */
static void nm_affine(em_dtype dt, void *o, const void *x, int64_t off, int64_t n, double mu,
                      double k, double b) {
    if (dt == EM_F32)
        nm_affine_f32((float *)o + off, (const float *)x + off, n, (float)mu, (float)k,
                      (float)(b - (mu - (double)(float)mu) * k));
    else
        nm_affine_f64((double *)o + off, (const double *)x + off, n, mu, k, b);
}

/* ---- batch_norm ---- */

typedef struct bn_job {
    em_dtype dt;
    const void *x, *w, *b;
    void *o, *sm, *si, *rm, *rv;
    int64_t N, C, S;
    bool training;
    double momentum, eps;
} bn_job;

static void bn_range(int64_t lo, int64_t hi, void *arg) {
    const bn_job *j = arg;
    const size_t esz = em_dtype_size(j->dt);
    const int64_t M = j->N * j->S;
    for (int64_t c = lo; c < hi; c++) {
        double mean, var;
        if (j->training) {
            nm_stats(j->dt, (const char *)j->x + (size_t)(c * j->S) * esz, j->N, j->C * j->S,
                     j->S, &mean, &var);
            if (j->rm) {
                const double unb = M > 1 ? var * (double)M / (double)(M - 1) : var;
                nm_st(j->dt, j->rm, c,
                      (1.0 - j->momentum) * nm_ld(j->dt, j->rm, c, 0) + j->momentum * mean);
                nm_st(j->dt, j->rv, c,
                      (1.0 - j->momentum) * nm_ld(j->dt, j->rv, c, 0) + j->momentum * unb);
            }
        } else {
            mean = nm_ld(j->dt, j->rm, c, 0);
            var = nm_ld(j->dt, j->rv, c, 1);
        }
        const double inv = 1.0 / sqrt(var + j->eps);
        nm_st(j->dt, j->sm, c, mean);
        nm_st(j->dt, j->si, c, inv);
        const double k = inv * nm_ld(j->dt, j->w, c, 1.0), b = nm_ld(j->dt, j->b, c, 0.0);
        for (int64_t n = 0; n < j->N; n++)
            nm_affine(j->dt, j->o, j->x, (n * j->C + c) * j->S, j->S, mean, k, b);
    }
}

static bool nm_is_float(em_dtype dt) {
    return dt == EM_F32 || dt == EM_F64 || dt == EM_F16 || dt == EM_BF16;
}

/* v is NULL or a view of dtype dt with n elements. */
static bool nm_param_ok(const em_view *v, em_dtype dt, int64_t n) {
    return !v || (v->dtype == dt && cpu_numel(v) == n);
}

em_status CPU_K(cpu_batch_norm)(void *ctx, const em_view *out, const em_view *save_mean,
                                const em_view *save_invstd, const em_view *x,
                                const em_view *weight, const em_view *bias,
                                const em_view *running_mean, const em_view *running_var,
                                bool training, double momentum, double eps) {
    const em_dtype dt = x->dtype;
    const int64_t N = x->rank == 3 ? x->shape[0] : 0, C = x->rank == 3 ? x->shape[1] : 0,
                  S = x->rank == 3 ? x->shape[2] : 0;
    const bool ok = nm_is_float(dt) && x->rank == 3 && out->dtype == dt &&
                    cpu_numel(out) == cpu_numel(x) && nm_param_ok(weight, dt, C) &&
                    nm_param_ok(bias, dt, C) && nm_param_ok(save_mean, dt, C) &&
                    nm_param_ok(save_invstd, dt, C) && nm_param_ok(running_mean, dt, C) &&
                    nm_param_ok(running_var, dt, C) &&
                    (training || (running_mean && running_var));
    if (!ok)
        return CPU_FALLBACK(CPU_FB_BATCH_NORM, dt, batch_norm, ctx, out, save_mean, save_invstd,
                            x, weight, bias, running_mean, running_var, training, momentum,
                            eps);
    if (N * C * S == 0) return EM_OK;
    const bool run = running_mean && running_var;
    const em_dtype ct = cpu_stage_dtype(dt);
    cpu_stage sx = {0}, sw = {0}, sb = {0}, so = {0}, ssm = {0}, ssi = {0}, srm = {0},
              srv = {0};
    em_status st = cpu_stage_in(x, ct, &sx);
    if (st == EM_OK) st = cpu_stage_in(weight, ct, &sw);
    if (st == EM_OK) st = cpu_stage_in(bias, ct, &sb);
    if (st == EM_OK) st = cpu_stage_out(out, ct, false, &so);
    if (st == EM_OK && save_mean) st = cpu_stage_out(save_mean, ct, false, &ssm);
    if (st == EM_OK && save_invstd) st = cpu_stage_out(save_invstd, ct, false, &ssi);
    if (st == EM_OK && run) st = cpu_stage_out(running_mean, ct, true, &srm);
    if (st == EM_OK && run) st = cpu_stage_out(running_var, ct, true, &srv);
    if (st == EM_OK) {
        bn_job j = {ct,
                    cpu_ptr(&sx.v),
                    weight ? cpu_ptr(&sw.v) : NULL,
                    bias ? cpu_ptr(&sb.v) : NULL,
                    cpu_ptr(&so.v),
                    save_mean ? cpu_ptr(&ssm.v) : NULL,
                    save_invstd ? cpu_ptr(&ssi.v) : NULL,
                    run ? cpu_ptr(&srm.v) : NULL,
                    run ? cpu_ptr(&srv.v) : NULL,
                    N,
                    C,
                    S,
                    training,
                    momentum,
                    eps};
        cpu_parallel_for(C, nm_imax(1, NM_GRAIN / nm_imax(1, N * S)), bn_range, &j);
    }
    st = cpu_stage_out_finish(out, &so, st);
    if (save_mean) st = cpu_stage_out_finish(save_mean, &ssm, st);
    if (save_invstd) st = cpu_stage_out_finish(save_invstd, &ssi, st);
    /* the running statistics are written back in training only (eval only reads them) */
    if (run && training) {
        st = cpu_stage_out_finish(running_mean, &srm, st);
        st = cpu_stage_out_finish(running_var, &srv, st);
    }
    cpu_stage_free(&srm);
    cpu_stage_free(&srv);
    cpu_stage_free(&sx);
    cpu_stage_free(&sw);
    cpu_stage_free(&sb);
    return st;
}

typedef struct bnb_job {
    em_dtype dt;
    const void *gy, *x, *mean, *inv, *w;
    void *gx, *gw, *gb;
    int64_t N, C, S;
    bool training;
} bnb_job;

static void bnb_range(int64_t lo, int64_t hi, void *arg) {
    const bnb_job *j = arg;
    const int64_t M = j->N * j->S, CS = j->C * j->S;
    for (int64_t c = lo; c < hi; c++) {
        const double mu = nm_ld(j->dt, j->mean, c, 0), inv = nm_ld(j->dt, j->inv, c, 1);
        double sg = 0, sgx = 0;
        for (int64_t n = 0; n < j->N; n++) {
            const int64_t off = n * CS + c * j->S;
            if (j->dt == EM_F32)
                nm_gsums_f32((const float *)j->gy + off, (const float *)j->x + off, j->S,
                             (float)mu, &sg, &sgx);
            else
                nm_gsums_f64((const double *)j->gy + off, (const double *)j->x + off, j->S, mu,
                             &sg, &sgx);
        }
        const double sgxh = sgx * inv; /* sum of gy * xhat */
        nm_st(j->dt, j->gb, c, sg);
        nm_st(j->dt, j->gw, c, sgxh);
        if (!j->gx) continue;
        const double k1 = nm_ld(j->dt, j->w, c, 1.0) * inv;
        const double k2 = j->training && M > 0 ? -k1 * inv * sgxh / (double)M : 0.0;
        const double k3 = j->training && M > 0 ? -k1 * sg / (double)M : 0.0;
        for (int64_t n = 0; n < j->N; n++) {
            const int64_t off = n * CS + c * j->S;
            if (j->dt == EM_F32)
                nm_bwd_f32((float *)j->gx + off, (const float *)j->gy + off,
                           (const float *)j->x + off, j->S, (float)mu, (float)k1, (float)k2,
                           (float)k3);
            else
                nm_bwd_f64((double *)j->gx + off, (const double *)j->gy + off,
                           (const double *)j->x + off, j->S, mu, k1, k2, k3);
        }
    }
}

em_status CPU_K(cpu_batch_norm_backward)(void *ctx, const em_view *gx, const em_view *gweight,
                                         const em_view *gbias, const em_view *gy,
                                         const em_view *x, const em_view *mean,
                                         const em_view *invstd, const em_view *weight,
                                         bool training) {
    const em_dtype dt = x->dtype;
    const int64_t N = x->rank == 3 ? x->shape[0] : 0, C = x->rank == 3 ? x->shape[1] : 0,
                  S = x->rank == 3 ? x->shape[2] : 0;
    const bool ok = nm_is_float(dt) && x->rank == 3 && gy->dtype == dt &&
                    cpu_numel(gy) == cpu_numel(x) && (!gx || (gx->dtype == dt &&
                                                              cpu_numel(gx) == cpu_numel(x))) &&
                    nm_param_ok(gweight, dt, C) && nm_param_ok(gbias, dt, C) &&
                    mean && invstd && nm_param_ok(mean, dt, C) &&
                    nm_param_ok(invstd, dt, C) && nm_param_ok(weight, dt, C);
    if (!ok)
        return CPU_FALLBACK(CPU_FB_BATCH_NORM_BWD, dt, batch_norm_backward, ctx, gx, gweight,
                            gbias, gy, x, mean, invstd, weight, training);
    const em_dtype ct = cpu_stage_dtype(dt);
    cpu_stage sg = {0}, sx = {0}, sm = {0}, si = {0}, sw = {0}, sgx = {0}, sgw = {0}, sgb = {0};
    em_status st = cpu_stage_in(gy, ct, &sg);
    if (st == EM_OK) st = cpu_stage_in(x, ct, &sx);
    if (st == EM_OK) st = cpu_stage_in(mean, ct, &sm);
    if (st == EM_OK) st = cpu_stage_in(invstd, ct, &si);
    if (st == EM_OK) st = cpu_stage_in(weight, ct, &sw);
    if (st == EM_OK && gx) st = cpu_stage_out(gx, ct, false, &sgx);
    if (st == EM_OK && gweight) st = cpu_stage_out(gweight, ct, false, &sgw);
    if (st == EM_OK && gbias) st = cpu_stage_out(gbias, ct, false, &sgb);
    if (st == EM_OK && N * C * S == 0) { /* no values: zero sums */
        for (int64_t c = 0; c < C; c++) {
            nm_st(ct, gweight ? cpu_ptr(&sgw.v) : NULL, c, 0.0);
            nm_st(ct, gbias ? cpu_ptr(&sgb.v) : NULL, c, 0.0);
        }
    } else if (st == EM_OK) {
        bnb_job j = {ct,
                     cpu_ptr(&sg.v),
                     cpu_ptr(&sx.v),
                     cpu_ptr(&sm.v),
                     cpu_ptr(&si.v),
                     weight ? cpu_ptr(&sw.v) : NULL,
                     gx ? cpu_ptr(&sgx.v) : NULL,
                     gweight ? cpu_ptr(&sgw.v) : NULL,
                     gbias ? cpu_ptr(&sgb.v) : NULL,
                     N,
                     C,
                     S,
                     training};
        cpu_parallel_for(C, nm_imax(1, NM_GRAIN / nm_imax(1, 2 * N * S)), bnb_range, &j);
    }
    if (gx) st = cpu_stage_out_finish(gx, &sgx, st);
    if (gweight) st = cpu_stage_out_finish(gweight, &sgw, st);
    if (gbias) st = cpu_stage_out_finish(gbias, &sgb, st);
    cpu_stage_free(&sg);
    cpu_stage_free(&sx);
    cpu_stage_free(&sm);
    cpu_stage_free(&si);
    cpu_stage_free(&sw);
    return st;
}

/* ---- group_norm ---- */

typedef struct gn_job {
    em_dtype dt;
    const void *x, *w, *b;
    void *o, *sm, *si;
    int64_t C, S, G;
    double eps;
} gn_job;

static void gn_range(int64_t lo, int64_t hi, void *arg) {
    const gn_job *j = arg;
    const size_t esz = em_dtype_size(j->dt);
    const int64_t Cg = j->C / j->G, K = Cg * j->S;
    for (int64_t r = lo; r < hi; r++) { /* r = n * G + g: its elements are contiguous */
        double mean, var;
        nm_stats(j->dt, (const char *)j->x + (size_t)(r * K) * esz, 1, 0, K, &mean, &var);
        const double inv = 1.0 / sqrt(var + j->eps);
        nm_st(j->dt, j->sm, r, mean);
        nm_st(j->dt, j->si, r, inv);
        const int64_t c0 = (r % j->G) * Cg;
        for (int64_t c = c0; c < c0 + Cg; c++)
            nm_affine(j->dt, j->o, j->x, r * K + (c - c0) * j->S, j->S, mean,
                      inv * nm_ld(j->dt, j->w, c, 1.0), nm_ld(j->dt, j->b, c, 0.0));
    }
}

em_status CPU_K(cpu_group_norm)(void *ctx, const em_view *out, const em_view *save_mean,
                                const em_view *save_invstd, const em_view *x,
                                const em_view *weight, const em_view *bias, int64_t groups,
                                double eps) {
    const em_dtype dt = x->dtype;
    const int64_t N = x->rank == 3 ? x->shape[0] : 0, C = x->rank == 3 ? x->shape[1] : 0,
                  S = x->rank == 3 ? x->shape[2] : 0;
    const bool ok = nm_is_float(dt) && x->rank == 3 && groups >= 1 && C % groups == 0 &&
                    out->dtype == dt && cpu_numel(out) == cpu_numel(x) &&
                    nm_param_ok(weight, dt, C) && nm_param_ok(bias, dt, C) &&
                    nm_param_ok(save_mean, dt, N * groups) &&
                    nm_param_ok(save_invstd, dt, N * groups);
    if (!ok)
        return CPU_FALLBACK(CPU_FB_GROUP_NORM, dt, group_norm, ctx, out, save_mean, save_invstd,
                            x, weight, bias, groups, eps);
    if (N * C * S == 0) return EM_OK;
    const em_dtype ct = cpu_stage_dtype(dt);
    cpu_stage sx = {0}, sw = {0}, sb = {0}, so = {0}, ssm = {0}, ssi = {0};
    em_status st = cpu_stage_in(x, ct, &sx);
    if (st == EM_OK) st = cpu_stage_in(weight, ct, &sw);
    if (st == EM_OK) st = cpu_stage_in(bias, ct, &sb);
    if (st == EM_OK) st = cpu_stage_out(out, ct, false, &so);
    if (st == EM_OK && save_mean) st = cpu_stage_out(save_mean, ct, false, &ssm);
    if (st == EM_OK && save_invstd) st = cpu_stage_out(save_invstd, ct, false, &ssi);
    if (st == EM_OK) {
        gn_job j = {ct,
                    cpu_ptr(&sx.v),
                    weight ? cpu_ptr(&sw.v) : NULL,
                    bias ? cpu_ptr(&sb.v) : NULL,
                    cpu_ptr(&so.v),
                    save_mean ? cpu_ptr(&ssm.v) : NULL,
                    save_invstd ? cpu_ptr(&ssi.v) : NULL,
                    C,
                    S,
                    groups,
                    eps};
        cpu_parallel_for(N * groups, nm_imax(1, NM_GRAIN / nm_imax(1, C / groups * S)),
                         gn_range, &j);
    }
    st = cpu_stage_out_finish(out, &so, st);
    if (save_mean) st = cpu_stage_out_finish(save_mean, &ssm, st);
    if (save_invstd) st = cpu_stage_out_finish(save_invstd, &ssi, st);
    cpu_stage_free(&sx);
    cpu_stage_free(&sw);
    cpu_stage_free(&sb);
    return st;
}

/* ---- rms_norm ---- */

typedef struct rms_job {
    em_dtype dt;
    const void *x, *w;
    void *o, *si;
    int64_t n;
    double eps;
} rms_job;

static void rms_range(int64_t lo, int64_t hi, void *arg) {
    const rms_job *j = arg;
    for (int64_t r = lo; r < hi; r++) {
        double q = 0;
        if (j->dt == EM_F32) nm_sumsq_f32((const float *)j->x + r * j->n, j->n, &q);
        else nm_sumsq_f64((const double *)j->x + r * j->n, j->n, &q);
        const double inv = 1.0 / sqrt(q / (double)j->n + j->eps);
        nm_st(j->dt, j->si, r, inv);
        if (j->dt == EM_F32)
            nm_rms_row_f32((float *)j->o + r * j->n, (const float *)j->x + r * j->n, j->w, j->n,
                           (float)inv);
        else
            nm_rms_row_f64((double *)j->o + r * j->n, (const double *)j->x + r * j->n, j->w,
                           j->n, inv);
    }
}

em_status CPU_K(cpu_rms_norm)(void *ctx, const em_view *out, const em_view *save_invrms,
                              const em_view *x, const em_view *weight, int64_t norm_numel,
                              double eps) {
    const em_dtype dt = x->dtype;
    const int64_t rows = norm_numel > 0 ? cpu_numel(x) / norm_numel : 0;
    const bool ok = nm_is_float(dt) && norm_numel >= 0 && out->dtype == dt &&
                    cpu_numel(out) == cpu_numel(x) && nm_param_ok(weight, dt, norm_numel) &&
                    nm_param_ok(save_invrms, dt, rows);
    if (!ok)
        return CPU_FALLBACK(CPU_FB_RMS_NORM, dt, rms_norm, ctx, out, save_invrms, x, weight,
                            norm_numel, eps);
    if (rows == 0) return EM_OK;
    const em_dtype ct = cpu_stage_dtype(dt);
    cpu_stage sx = {0}, sw = {0}, so = {0}, ssi = {0};
    em_status st = cpu_stage_in(x, ct, &sx);
    if (st == EM_OK) st = cpu_stage_in(weight, ct, &sw);
    if (st == EM_OK) st = cpu_stage_out(out, ct, false, &so);
    if (st == EM_OK && save_invrms) st = cpu_stage_out(save_invrms, ct, false, &ssi);
    if (st == EM_OK) {
        rms_job j = {ct,           cpu_ptr(&sx.v),
                     weight ? cpu_ptr(&sw.v) : NULL,
                     cpu_ptr(&so.v), save_invrms ? cpu_ptr(&ssi.v) : NULL,
                     norm_numel,   eps};
        cpu_parallel_for(rows, nm_imax(1, NM_GRAIN / norm_numel), rms_range, &j);
    }
    st = cpu_stage_out_finish(out, &so, st);
    if (save_invrms) st = cpu_stage_out_finish(save_invrms, &ssi, st);
    cpu_stage_free(&sx);
    cpu_stage_free(&sw);
    return st;
}
