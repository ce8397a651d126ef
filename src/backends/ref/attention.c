/*
 * attention.c — the reference backend's scaled dot-product attention (the sdpa and
 * sdpa_backward slots, see backend.h): the definition in plain loops over views of any
 * strides, one query row at a time, everything in double (the scores of a row, its softmax,
 * the weighted sums), rounded once on store. The backward recomputes each row's scores and
 * weights in double from q and k (it does not use the saved lse or out: they are the cpu
 * kernel's shortcuts, and ref is the oracle they are compared with).
 *
 * Dropout draws the Philox bernoulli of random.c at element (b * L + i) * S + j: the numbers
 * em_dropout gives the [B..., L, S] weights of the composition.
 */
#include <math.h>
#include <stdlib.h>

#include "ref.h"

/* Philox-4x32-10 (random.c's mapping, a copy: the keep decision of element n of a bernoulli
 * draw with probability keep_p). */
static bool at_keep(uint64_t seed, uint64_t n, double keep_p) {
    uint32_t c0 = (uint32_t)(n / 4), c1 = (uint32_t)((n / 4) >> 32), c2 = 2, c3 = 0;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        const uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n1 = (uint32_t)p1;
        const uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1, n3 = (uint32_t)p0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    const uint32_t w[4] = {c0, c1, c2, c3};
    return (double)(w[n % 4] >> 8) * (1.0 / 16777216.0) < keep_p;
}

/* The element offset of batch b's [0, 0] in a view of rank r (batch dims 0..r-2). */
static int64_t at_base(const em_view *v, int64_t b) {
    int64_t off = v->offset;
    for (int d = v->rank - 3; d >= 0; d--) {
        const int64_t n = v->shape[d];
        off += (b % n) * v->strides[d];
        b /= n;
    }
    return off;
}

static inline double at_ld(const em_view *v, int64_t base, int64_t i, int64_t j) {
    const int r = v->rank;
    return ref_ld(v->buf, v->dtype, base + i * v->strides[r - 2] + j * v->strides[r - 1]);
}

typedef struct at_dims {
    int64_t nb, L, S, E, Ev;
} at_dims;

static at_dims at_dims_of(const em_view *q, const em_view *v) {
    const int r = q->rank;
    at_dims d = {1, q->shape[r - 2], v->shape[r - 2], q->shape[r - 1], v->shape[r - 1]};
    for (int i = 0; i < r - 2; i++) d.nb *= q->shape[i];
    return d;
}

/* The scaled, masked scores of row i of batch b into s[0..S); returns their max. */
static double at_scores(const at_dims *d, int64_t b, int64_t i, const em_view *q, int64_t qb,
                        const em_view *k, int64_t kb, const em_view *mask, int64_t mb,
                        bool causal, double scale, double *s) {
    double m = -INFINITY;
    for (int64_t j = 0; j < d->S; j++) {
        double x = -INFINITY;
        bool on = !(causal && j > i);
        double add = 0;
        if (on && mask) {
            const double mv = at_ld(mask, mb, i, j);
            if (mask->dtype == EM_BOOL) on = mv != 0;
            else add = mv;
        }
        if (on) {
            double dot = 0;
            for (int64_t e = 0; e < d->E; e++) dot += at_ld(q, qb, i, e) * at_ld(k, kb, j, e);
            x = dot * scale + add;
        }
        s[j] = x;
        if (x > m) m = x;
    }
    (void)b;
    return m;
}

em_status ref_sdpa(void *ctx, const em_view *out, const em_view *lse, const em_view *q,
                   const em_view *k, const em_view *v, const em_view *mask, bool causal,
                   double scale, double dropout_p, uint64_t seed) {
    (void)ctx;
    const at_dims d = at_dims_of(q, v);
    if (d.nb * d.L == 0) return EM_OK;
    double *s = malloc(sizeof(double) * (size_t)(d.S + d.Ev + 1));
    if (!s) return em_backend_set_error(EM_ERR_NOMEM, "ref: out of memory (sdpa)");
    double *acc = s + d.S;
    const double keep_p = 1.0 - dropout_p, inv_keep = 1.0 / keep_p;
    const int r = q->rank;
    for (int64_t b = 0; b < d.nb; b++) {
        const int64_t qb = at_base(q, b), kb = at_base(k, b), vb = at_base(v, b);
        const int64_t ob = at_base(out, b), mb = mask ? at_base(mask, b) : 0;
        for (int64_t i = 0; i < d.L; i++) {
            const double m = at_scores(&d, b, i, q, qb, k, kb, mask, mb, causal, scale, s);
            const int64_t lo = lse->offset + b * d.L + i; /* lse is contiguous */
            for (int64_t e = 0; e < d.Ev; e++) acc[e] = 0;
            double l = -INFINITY;
            if (m == -INFINITY) {
                for (int64_t e = 0; e < d.Ev; e++) acc[e] = NAN;
            } else {
                double sum = 0;
                for (int64_t j = 0; j < d.S; j++) sum += exp(s[j] - m);
                l = m + log(sum);
                for (int64_t j = 0; j < d.S; j++) {
                    double p = exp(s[j] - m) / sum;
                    if (p == 0) continue;
                    if (dropout_p > 0) {
                        const uint64_t n = (uint64_t)((b * d.L + i) * d.S + j);
                        p = at_keep(seed, n, keep_p) ? p * inv_keep : 0;
                    }
                    for (int64_t e = 0; e < d.Ev; e++) acc[e] += p * at_ld(v, vb, j, e);
                }
            }
            ref_st(lse->buf, lse->dtype, lo, l);
            for (int64_t e = 0; e < d.Ev; e++)
                ref_st(out->buf, out->dtype,
                       ob + i * out->strides[r - 2] + e * out->strides[r - 1], acc[e]);
        }
    }
    free(s);
    return EM_OK;
}

em_status ref_sdpa_backward(void *ctx, const em_view *dq, const em_view *dk, const em_view *dv,
                            const em_view *q, const em_view *k, const em_view *v,
                            const em_view *mask, const em_view *out, const em_view *dout,
                            const em_view *lse, bool causal, double scale, double dropout_p,
                            uint64_t seed) {
    (void)ctx, (void)out, (void)lse;
    const at_dims d = at_dims_of(q, v);
    const int r = q->rank;
    const size_t n = (size_t)(3 * d.S + d.E + d.S * d.E + d.S * d.Ev + 1);
    double *s = malloc(sizeof(double) * n);
    if (!s) return em_backend_set_error(EM_ERR_NOMEM, "ref: out of memory (sdpa_backward)");
    double *pd = s + d.S, *dp = pd + d.S, *gq = dp + d.S, *gk = gq + d.E, *gv = gk + d.S * d.E;
    const double keep_p = 1.0 - dropout_p, inv_keep = 1.0 / keep_p;
    for (int64_t b = 0; b < d.nb; b++) {
        const int64_t qb = at_base(q, b), kb = at_base(k, b), vb = at_base(v, b);
        const int64_t gb = at_base(dout, b), mb = mask ? at_base(mask, b) : 0;
        for (int64_t x = 0; x < d.S * d.E; x++) gk[x] = 0;
        for (int64_t x = 0; x < d.S * d.Ev; x++) gv[x] = 0;
        for (int64_t i = 0; i < d.L; i++) {
            const double m = at_scores(&d, b, i, q, qb, k, kb, mask, mb, causal, scale, s);
            for (int64_t e = 0; e < d.E; e++) gq[e] = 0;
            if (m == -INFINITY) { /* the row's weights are NaN: v's gradient too */
                for (int64_t x = 0; x < d.S * d.Ev; x++) gv[x] = NAN;
            } else {
                double sum = 0;
                for (int64_t j = 0; j < d.S; j++) sum += exp(s[j] - m);
                double D = 0;
                for (int64_t j = 0; j < d.S; j++) {
                    const double p = exp(s[j] - m) / sum;
                    double kf = 1; /* the dropout factor of weight j */
                    if (dropout_p > 0) {
                        const uint64_t c = (uint64_t)((b * d.L + i) * d.S + j);
                        kf = at_keep(seed, c, keep_p) ? inv_keep : 0;
                    }
                    double g = 0; /* dout_i . v_j */
                    for (int64_t e = 0; e < d.Ev; e++) {
                        const double go = at_ld(dout, gb, i, e);
                        g += go * at_ld(v, vb, j, e);
                        gv[j * d.Ev + e] += p * kf * go;
                    }
                    s[j] = p;
                    pd[j] = p * kf;
                    dp[j] = g * kf;
                    D += p * dp[j];
                }
                for (int64_t j = 0; j < d.S; j++) {
                    const double ds = s[j] * (dp[j] - D) * scale;
                    if (ds == 0) continue;
                    for (int64_t e = 0; e < d.E; e++) {
                        gq[e] += ds * at_ld(k, kb, j, e);
                        gk[j * d.E + e] += ds * at_ld(q, qb, i, e);
                    }
                }
            }
            const int64_t qo = dq->offset + b * d.L * d.E + i * d.E;
            for (int64_t e = 0; e < d.E; e++) ref_st(dq->buf, dq->dtype, qo + e, gq[e]);
        }
        (void)pd;
        for (int64_t x = 0; x < d.S * d.E; x++)
            ref_st(dk->buf, dk->dtype, dk->offset + b * d.S * d.E + x, gk[x]);
        for (int64_t x = 0; x < d.S * d.Ev; x++)
            ref_st(dv->buf, dv->dtype, dv->offset + b * d.S * d.Ev + x, gv[x]);
    }
    (void)r;
    free(s);
    return EM_OK;
}
