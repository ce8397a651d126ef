/*
 * norm.cl — batch normalization (and its backward), group normalization and RMS
 * normalization: one work-group per channel (batch_norm), per (sample, group) (group_norm)
 * or per row (rms_norm). Built with -DA=<tag of a float dtype> (common.cl).
 *
 * The statistics take one pass: each item sums d = x - shift and d*d (Kahan-compensated; the
 * shift is the line's first element, which keeps a large mean out of the squares), the
 * partial sums meet in a tree in local memory, and mean = shift + S1/M, var = (S2 - S1^2/M)/M.
 * The normalizing pass computes (x - shift - S1/M) * scale + bias, so a large mean costs no
 * accuracy in f32 either. Arithmetic: float for f16 / bf16 / f32, double for f64.
 */

#define NK_CAT_(a, b) a##b
#define NK_CAT(a, b) NK_CAT_(a, b)
#define NK_F64_f64 1
#define NK_F64_f32 0
#define NK_F64_f16 0
#define NK_F64_bf16 0
#define TYA NK_CAT(TY_, A)
#define LDA(p, i) NK_CAT(LD_, A)(p, i)
#define STA(p, i, v) NK_CAT(ST_, A)(p, i, v)
#if NK_CAT(NK_F64_, A)
typedef double acc_t;
#else
typedef float acc_t;
#endif

/** The sum of x over the group; every item gets it. */
static acc_t nk_sum(acc_t x, __local acc_t *lv) {
    const int lid = get_local_id(0), L = get_local_size(0);
    if (L == 1) return x;
    lv[lid] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = L / 2; h > 0; h /= 2) {
        if (lid < h) lv[lid] = lv[lid] + lv[lid + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    acc_t r = lv[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/** Kahan step: s += y with compensation c. */
static void nk_add(acc_t *s, acc_t *c, acc_t x) {
    acc_t y = x - *c, t = *s + y;
    *c = isfinite(t) ? (t - *s) - y : (acc_t)0;
    *s = t;
}

/** An optional per-channel value: p[off + i * st] or dflt. */
#define NK_LD1(p, off, st, has, i, dflt) ((has) ? (acc_t)LDA(p, (off) + (i) * (st)) : (acc_t)(dflt))

/**
 * batch_norm_chan: group c normalizes channel c of x [N, C, S] (offset, strides xs0..2) into
 * out; w, b, rm, rv, sm, si are [C] views (offset, stride, present). training: batch
 * statistics, rm / rv updated with momentum (the variance unbiased); else rm / rv are used.
 */
__kernel void batch_norm_chan(__global const TYA *x, long x_off, long xs0, long xs1, long xs2,
                              __global TYA *out, long o_off, long os0, long os1, long os2,
                              long N, long S,
                              __global const TYA *w, long w_off, long ws, int has_w,
                              __global const TYA *b, long b_off, long bs, int has_b,
                              __global TYA *rm, long rm_off, long rms, __global TYA *rv,
                              long rv_off, long rvs, int has_r,
                              __global TYA *sm, long sm_off, long sms, int has_sm,
                              __global TYA *si, long si_off, long sis, int has_si,
                              int training, acc_t momentum, acc_t eps, __local acc_t *lv) {
    const long c = get_group_id(0);
    const long lid = get_local_id(0), L = get_local_size(0);
    const long M = N * S;
    acc_t sh = 0, ms = 0, mean, var;
    if (training) {
        sh = (acc_t)LDA(x, x_off + c * xs1);
        acc_t s1 = 0, c1 = 0, s2 = 0, c2 = 0;
        for (long j = lid; j < M; j += L) {
            const long n = j / S, i = j - n * S;
            acc_t d = (acc_t)LDA(x, x_off + n * xs0 + c * xs1 + i * xs2) - sh;
            nk_add(&s1, &c1, d);
            nk_add(&s2, &c2, d * d);
        }
        s1 = nk_sum(s1, lv);
        s2 = nk_sum(s2, lv);
        ms = s1 / (acc_t)M;
        mean = sh + ms;
        var = (s2 - s1 * ms) / (acc_t)M;
        if (var < 0) var = 0;
        if (lid == 0 && has_r) {
            const acc_t unb = M > 1 ? var * (acc_t)M / (acc_t)(M - 1) : var;
            const long a = rm_off + c * rms, v = rv_off + c * rvs;
            STA(rm, a, ((acc_t)1 - momentum) * (acc_t)LDA(rm, a) + momentum * mean);
            STA(rv, v, ((acc_t)1 - momentum) * (acc_t)LDA(rv, v) + momentum * unb);
        }
    } else {
        mean = (acc_t)LDA(rm, rm_off + c * rms);
        var = (acc_t)LDA(rv, rv_off + c * rvs);
        sh = mean;
    }
    const acc_t inv = (acc_t)1 / sqrt(var + eps);
    if (lid == 0 && has_sm) STA(sm, sm_off + c * sms, mean);
    if (lid == 0 && has_si) STA(si, si_off + c * sis, inv);
    const acc_t k = inv * NK_LD1(w, w_off, ws, has_w, c, 1);
    const acc_t bb = NK_LD1(b, b_off, bs, has_b, c, 0);
    for (long j = lid; j < M; j += L) {
        const long n = j / S, i = j - n * S;
        acc_t d = ((acc_t)LDA(x, x_off + n * xs0 + c * xs1 + i * xs2) - sh) - ms;
        STA(out, o_off + n * os0 + c * os1 + i * os2, d * k + bb);
    }
}

/**
 * batch_norm_bwd_chan: group c's gradients: gb = sum gy, gw = sum gy * xhat, and
 * gx = gy * k1 + (x - mean) * k2 + k3 (k2 = k3 = 0 in eval), over x and gy [N, C, S].
 */
__kernel void batch_norm_bwd_chan(__global const TYA *gy, long g_off, long gs0, long gs1,
                                  long gs2, __global const TYA *x, long x_off, long xs0,
                                  long xs1, long xs2, __global TYA *gx, long gx_off, long gxs0,
                                  long gxs1, long gxs2, int has_gx, long N, long S,
                                  __global const TYA *mean, long m_off, long ms_,
                                  __global const TYA *invstd, long i_off, long is_,
                                  __global const TYA *w, long w_off, long ws, int has_w,
                                  __global TYA *gw, long gw_off, long gws, int has_gw,
                                  __global TYA *gb, long gb_off, long gbs, int has_gb,
                                  int training, __local acc_t *lv) {
    const long c = get_group_id(0);
    const long lid = get_local_id(0), L = get_local_size(0);
    const long M = N * S;
    const acc_t mu = (acc_t)LDA(mean, m_off + c * ms_), inv = (acc_t)LDA(invstd, i_off + c * is_);
    acc_t sg = 0, cg = 0, sx = 0, cx = 0;
    for (long j = lid; j < M; j += L) {
        const long n = j / S, i = j - n * S;
        const acc_t g = (acc_t)LDA(gy, g_off + n * gs0 + c * gs1 + i * gs2);
        nk_add(&sg, &cg, g);
        nk_add(&sx, &cx, g * ((acc_t)LDA(x, x_off + n * xs0 + c * xs1 + i * xs2) - mu));
    }
    sg = nk_sum(sg, lv);
    sx = nk_sum(sx, lv);
    const acc_t sgxh = sx * inv;
    if (lid == 0 && has_gb) STA(gb, gb_off + c * gbs, sg);
    if (lid == 0 && has_gw) STA(gw, gw_off + c * gws, sgxh);
    if (!has_gx) return;
    const acc_t k1 = NK_LD1(w, w_off, ws, has_w, c, 1) * inv;
    const acc_t k2 = training && M > 0 ? -k1 * inv * sgxh / (acc_t)M : (acc_t)0;
    const acc_t k3 = training && M > 0 ? -k1 * sg / (acc_t)M : (acc_t)0;
    for (long j = lid; j < M; j += L) {
        const long n = j / S, i = j - n * S;
        const acc_t g = (acc_t)LDA(gy, g_off + n * gs0 + c * gs1 + i * gs2);
        const acc_t d = (acc_t)LDA(x, x_off + n * xs0 + c * xs1 + i * xs2) - mu;
        STA(gx, gx_off + n * gxs0 + c * gxs1 + i * gxs2, g * k1 + d * k2 + k3);
    }
}

/**
 * group_norm_rows: group r = n * G + g normalizes the Cg = C / G channels of group g of sample
 * n of x [N, C, S]; sm / si are [N, G] (offset and two strides).
 */
__kernel void group_norm_rows(__global const TYA *x, long x_off, long xs0, long xs1, long xs2,
                              __global TYA *out, long o_off, long os0, long os1, long os2,
                              long G, long Cg, long S,
                              __global const TYA *w, long w_off, long ws, int has_w,
                              __global const TYA *b, long b_off, long bs, int has_b,
                              __global TYA *sm, long sm_off, long sm0, long sm1, int has_sm,
                              __global TYA *si, long si_off, long si0, long si1, int has_si,
                              acc_t eps, __local acc_t *lv) {
    const long r = get_group_id(0), n = r / G, g = r - n * G;
    const long lid = get_local_id(0), L = get_local_size(0);
    const long K = Cg * S, c0 = g * Cg;
    const acc_t sh = (acc_t)LDA(x, x_off + n * xs0 + c0 * xs1);
    acc_t s1 = 0, c1 = 0, s2 = 0, c2 = 0;
    for (long j = lid; j < K; j += L) {
        const long cc = j / S, i = j - cc * S;
        acc_t d = (acc_t)LDA(x, x_off + n * xs0 + (c0 + cc) * xs1 + i * xs2) - sh;
        nk_add(&s1, &c1, d);
        nk_add(&s2, &c2, d * d);
    }
    s1 = nk_sum(s1, lv);
    s2 = nk_sum(s2, lv);
    const acc_t ms = s1 / (acc_t)K;
    acc_t var = (s2 - s1 * ms) / (acc_t)K;
    if (var < 0) var = 0;
    const acc_t inv = (acc_t)1 / sqrt(var + eps);
    if (lid == 0 && has_sm) STA(sm, sm_off + n * sm0 + g * sm1, sh + ms);
    if (lid == 0 && has_si) STA(si, si_off + n * si0 + g * si1, inv);
    for (long j = lid; j < K; j += L) {
        const long cc = j / S, i = j - cc * S, c = c0 + cc;
        acc_t d = ((acc_t)LDA(x, x_off + n * xs0 + c * xs1 + i * xs2) - sh) - ms;
        const acc_t k = inv * NK_LD1(w, w_off, ws, has_w, c, 1);
        STA(out, o_off + n * os0 + c * os1 + i * os2, d * k + NK_LD1(b, b_off, bs, has_b, c, 0));
    }
}

/** rms_norm_rows: row g of x [rows, n]: x / sqrt(mean(x^2) + eps) * w; si [rows]. */
__kernel void rms_norm_rows(__global const TYA *x, long x_off, long xs0, long xs1, long n,
                            __global TYA *out, long o_off, long os0, long os1,
                            __global const TYA *w, long w_off, long ws, int has_w,
                            __global TYA *si, long si_off, long sis, int has_si, acc_t eps,
                            __local acc_t *lv) {
    const long g = get_group_id(0);
    const long lid = get_local_id(0), L = get_local_size(0);
    acc_t s = 0, c = 0;
    for (long j = lid; j < n; j += L) {
        const acc_t v = (acc_t)LDA(x, x_off + g * xs0 + j * xs1);
        nk_add(&s, &c, v * v);
    }
    s = nk_sum(s, lv);
    const acc_t inv = (acc_t)1 / sqrt(s / (acc_t)n + eps);
    if (lid == 0 && has_si) STA(si, si_off + g * sis, inv);
    for (long j = lid; j < n; j += L)
        STA(out, o_off + g * os0 + j * os1,
            (acc_t)LDA(x, x_off + g * xs0 + j * xs1) * inv * NK_LD1(w, w_off, ws, has_w, j, 1));
}
