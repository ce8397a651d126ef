/*
 * norm.comp — batch normalization (and its backward), group normalization and RMS
 * normalization (norm.c; the semantics of ref's src/backends/ref/norm.c).
 *
 * One variant per kernel and float dtype A (norm.list), the kernel chosen by a define:
 *   K_BN_STATS   one workgroup a channel of x [N, C, S]: the statistics (training: of the
 *                batch, the running statistics updated; eval: the running ones), save_mean
 *                and save_invstd written, and (shift, mean - shift, invstd) per channel into
 *                the scratch buffer for K_BN_APPLY.
 *   K_BN_APPLY   one item an element: out = ((x - shift) - ms) * invstd * w + b.
 *   K_BNB_STATS  one workgroup a channel: sum gy and sum gy * xhat (gbias, gweight), and
 *                (mean, invstd, sum gy, sum gy * xhat) into the scratch buffer.
 *   K_BNB_APPLY  one item an element: gx = w * invstd * (gy - [training] (sg + xhat sgx) / M).
 *   K_GN         one workgroup an (n, group) of x [N, C, S]: statistics, then normalized.
 *   K_RMS        one workgroup a row of x [rows, n]: x / sqrt(mean(x^2) + eps) * w.
 * (batch_norm needs 8 buffers, more than a dispatch binds: hence the split in two.)
 *
 * The statistics take two passes over the line, in the accumulation type (float for f16,
 * bf16, f32; double for f64), Kahan-compensated per invocation, the invocations' partial sums
 * added in a tree in shared memory: the mean of x - shift (shift: the line's first element,
 * which keeps a large mean out of the sum), then the sum of squared deviations from it.
 * Lines beyond the 65,535 workgroups of a dispatch are taken in a loop.
 *
 * lavapipe's loop limiter ends a shader's loops silently once an invocation has run 65,535
 * iterations of them in all (nesting does not help): the line loops take UNR = 16 elements an
 * iteration, written out (UNROLL), out-of-line elements adding 0 and writing nothing, so that
 * a line of 64M elements (the most a 128 MiB binding holds) takes 16,384 iterations a pass.
 * norm.c refuses (EM_ERR_UNSUPPORTED) the shapes that could still come near the limit there.
 */
#version 450
#include "common.glsl"
#include "math.glsl"

#define RWG 256 /* norm.c's NORM_RWG */
#if defined(K_BN_APPLY) || defined(K_BNB_APPLY)
layout(local_size_x = WG) in;
#else
layout(local_size_x = RWG) in;
#endif

#ifdef USE_F64
#define acc double
#define SC(k) PF64(k)
#define ACC_TAG f64
#else
#define acc float
#define SC(k) P.f[k]
#define ACC_TAG f32
#endif
#define LDA(x) acc(CAT(LD_, A)(x))
#define STA(v) CAT(ST_, A)(CAT(CT_, A)(v))

/* Offsets: element [i0, i1, i2] of 3-d view k, element i of 1-d view k. */
int at3(int k, int i0, int i1, int i2) {
    return P.v[k].offset + i0 * P.v[k].strides[0] + i1 * P.v[k].strides[1] +
           i2 * P.v[k].strides[2];
}
int at1(int k, int i) { return P.v[k].offset + i * P.v[k].strides[0]; }
int at2(int k, int i0, int i1) {
    return P.v[k].offset + i0 * P.v[k].strides[0] + i1 * P.v[k].strides[1];
}

/* Kahan step s += x with compensation c (the variables precise: no reassociation). */
#define KADD(s, c, x)                                                                          \
    {                                                                                          \
        precise acc y_ = (x) - c;                                                              \
        precise acc t_ = s + y_;                                                               \
        c = isinf(t_) || isnan(t_) ? acc(0) : (t_ - s) - y_;                                   \
        s = t_;                                                                                \
    }

#if !defined(K_BN_APPLY) && !defined(K_BNB_APPLY)
shared acc lv[RWG];

/* The sum of x over the workgroup; every invocation gets it. */
acc wg_sum(acc x) {
    uint lid = gl_LocalInvocationID.x;
    lv[lid] = x;
    memoryBarrierShared();
    barrier();
    for (uint h = RWG / 2; h > 0u; h >>= 1) {
        if (lid < h) lv[lid] = lv[lid] + lv[lid + h];
        memoryBarrierShared();
        barrier();
    }
    acc r = lv[0];
    memoryBarrierShared();
    barrier();
    return r;
}
#define LID int(gl_LocalInvocationID.x)
#define UNR 16
#define UNROLL(F) F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8) F(9) F(10) F(11) F(12) F(13) F(14) F(15)
/* j over this invocation's first elements of UNR-element blocks (element j + u * RWG) */
#define BLOCK_LOOP(j, n) for (int j = LID; j < (n); j += RWG * UNR)
#define LINE_LOOP(l, n) for (int l = int(gl_WorkGroupID.x); l < (n); l += int(gl_NumWorkGroups.x))
#endif

#if defined(K_BN_STATS)
/* Views: 0 x, 1 running_mean, 2 running_var, 3 save_mean, 4 save_invstd.
 * Ints: N C S training has_rm has_rv has_sm has_si. Scalars: momentum, eps. */
BUF(1, A, x_);
BUF(2, A, rm_);
BUF(3, A, rv_);
BUF(4, A, sm_);
BUF(5, A, si_);
BUF(6, ACC_TAG, st_);
/* element j of channel c less sub (0 beyond the line) */
acc bn_d(int c, int j, int M, int S, acc sub) {
    if (j >= M) return acc(0);
    int n = j / S, i = j - n * S;
    return LDA(x_[at3(0, n, c, i)]) - sub;
}
/* its squared deviation ((x - sh) - ms)^2 (0 beyond the line) */
acc bn_sq(int c, int j, int M, int S, acc sh, acc ms) {
    if (j >= M) return acc(0);
    precise acc dd = bn_d(c, j, M, S, sh) - ms;
    return dd * dd;
}
void main() {
    int N = P.i[0], C = P.i[1], S = P.i[2], M = N * S;
    bool training = P.i[3] != 0, has_rm = P.i[4] != 0, has_rv = P.i[5] != 0;
    acc momentum = acc(SC(0)), eps = acc(SC(1));
    LINE_LOOP(c, C) {
        acc sh, ms, mean, var;
        if (training) {
            sh = LDA(x_[at3(0, 0, c, 0)]);
            precise acc s = acc(0), k = acc(0);
#define P1(u) KADD(s, k, bn_d(c, j + (u) * RWG, M, S, sh))
            BLOCK_LOOP(j, M) { UNROLL(P1) }
            s = wg_sum(s);
            ms = s / acc(M);
            mean = sh + ms;
            precise acc q = acc(0), kq = acc(0);
#define P2(u) KADD(q, kq, bn_sq(c, j + (u) * RWG, M, S, sh, ms))
            BLOCK_LOOP(j, M) { UNROLL(P2) }
            q = wg_sum(q);
            var = q / acc(M);
            if (LID == 0 && has_rm && has_rv) {
                acc unb = M > 1 ? q / acc(M - 1) : var;
                int a = at1(1, c), b = at1(2, c);
                rm_[a] = STA((acc(1) - momentum) * LDA(rm_[a]) + momentum * mean);
                rv_[b] = STA((acc(1) - momentum) * LDA(rv_[b]) + momentum * unb);
            }
        } else {
            mean = has_rm ? LDA(rm_[at1(1, c)]) : acc(0);
            var = has_rv ? LDA(rv_[at1(2, c)]) : acc(1);
            sh = mean;
            ms = acc(0);
        }
        acc inv = acc(1) / m_sqrt(var + eps);
        if (LID == 0) {
            if (P.i[6] != 0) sm_[at1(3, c)] = STA(mean);
            if (P.i[7] != 0) si_[at1(4, c)] = STA(inv);
            st_[3 * c] = sh;
            st_[3 * c + 1] = ms;
            st_[3 * c + 2] = inv;
        }
    }
}

#elif defined(K_BN_APPLY)
/* Views: 0 out, 1 x, 2 weight, 3 bias. Ints: N C S has_w has_b. */
BUF(1, A, o_);
BUF(2, A, x_);
BUF(3, A, w_);
BUF(4, A, b_);
BUF(5, ACC_TAG, st_);
void main() {
    int C = P.i[1], S = P.i[2];
    bool has_w = P.i[3] != 0, has_b = P.i[4] != 0;
    GRID_LOOP(j, P.v[0].numel) {
        int q = j / S, i = j - q * S, n = q / C, c = q - n * C;
        acc k = st_[3 * c + 2];
        if (has_w) k *= LDA(w_[at1(2, c)]);
        acc bb = has_b ? LDA(b_[at1(3, c)]) : acc(0);
        acc d = (LDA(x_[at3(1, n, c, i)]) - st_[3 * c]) - st_[3 * c + 1];
        o_[at3(0, n, c, i)] = STA(d * k + bb);
    }
}

#elif defined(K_BNB_STATS)
/* Views: 0 gy, 1 x, 2 mean, 3 invstd, 4 gweight, 5 gbias.
 * Ints: N C S has_gw has_gb has_mean has_invstd. */
BUF(1, A, gy_);
BUF(2, A, x_);
BUF(3, A, mu_);
BUF(4, A, iv_);
BUF(5, A, gw_);
BUF(6, A, gb_);
BUF(7, ACC_TAG, st_);
#ifdef USE_F64
#define acc2 dvec2
#else
#define acc2 vec2
#endif
/* (gy, gy * (x - mu)) of element j of channel c (0 beyond the line) */
acc2 bnb_g(int c, int j, int M, int S, acc mu) {
    if (j >= M) return acc2(0);
    int n = j / S, i = j - n * S;
    acc g = LDA(gy_[at3(0, n, c, i)]);
    return acc2(g, g * (LDA(x_[at3(1, n, c, i)]) - mu));
}
void main() {
    int N = P.i[0], C = P.i[1], S = P.i[2], M = N * S;
    LINE_LOOP(c, C) {
        acc mu = P.i[5] != 0 ? LDA(mu_[at1(2, c)]) : acc(0);
        acc inv = P.i[6] != 0 ? LDA(iv_[at1(3, c)]) : acc(1);
        precise acc sg = acc(0), kg = acc(0), sx = acc(0), kx = acc(0);
#define P1(u)                                                                                  \
    {                                                                                          \
        acc2 t = bnb_g(c, j + (u) * RWG, M, S, mu);                                            \
        KADD(sg, kg, t.x);                                                                     \
        KADD(sx, kx, t.y);                                                                     \
    }
        BLOCK_LOOP(j, M) { UNROLL(P1) }
        sg = wg_sum(sg);
        sx = wg_sum(sx);
        acc sgx = sx * inv;
        if (LID == 0) {
            if (P.i[4] != 0) gb_[at1(5, c)] = STA(sg);
            if (P.i[3] != 0) gw_[at1(4, c)] = STA(sgx);
            st_[4 * c] = mu;
            st_[4 * c + 1] = inv;
            st_[4 * c + 2] = sg;
            st_[4 * c + 3] = sgx;
        }
    }
}

#elif defined(K_BNB_APPLY)
/* Views: 0 gx, 1 gy, 2 x, 3 weight. Ints: N C S has_w training. */
BUF(1, A, gx_);
BUF(2, A, gy_);
BUF(3, A, x_);
BUF(4, A, w_);
BUF(5, ACC_TAG, st_);
void main() {
    int N = P.i[0], C = P.i[1], S = P.i[2], M = N * S;
    bool has_w = P.i[3] != 0, training = P.i[4] != 0;
    GRID_LOOP(j, P.v[0].numel) {
        int q = j / S, i = j - q * S, n = q / C, c = q - n * C;
        acc mu = st_[4 * c], inv = st_[4 * c + 1];
        acc g = LDA(gy_[at3(1, n, c, i)]);
        if (training && M > 0) {
            acc xh = (LDA(x_[at3(2, n, c, i)]) - mu) * inv;
            g -= (st_[4 * c + 2] + xh * st_[4 * c + 3]) / acc(M);
        }
        acc k = has_w ? LDA(w_[at1(3, c)]) * inv : inv;
        gx_[at3(0, n, c, i)] = STA(g * k);
    }
}

#elif defined(K_GN)
/* Views: 0 x, 1 out, 2 weight, 3 bias, 4 save_mean, 5 save_invstd ([N, G]).
 * Ints: N C S G has_w has_b has_sm has_si. Scalar: eps. */
BUF(1, A, x_);
BUF(2, A, o_);
BUF(3, A, w_);
BUF(4, A, b_);
BUF(5, A, sm_);
BUF(6, A, si_);
/* element j of the line of sample n starting at channel c0, less sub (0 beyond the line) */
acc gn_d(int n, int c0, int j, int K, int S, acc sub) {
    if (j >= K) return acc(0);
    int cc = j / S, i = j - cc * S;
    return LDA(x_[at3(0, n, c0 + cc, i)]) - sub;
}
acc gn_sq(int n, int c0, int j, int K, int S, acc sh, acc ms) {
    if (j >= K) return acc(0);
    precise acc dd = gn_d(n, c0, j, K, S, sh) - ms;
    return dd * dd;
}
void gn_out(int n, int c0, int j, int K, int S, acc sh, acc ms, acc inv, bool has_w, bool has_b) {
    if (j >= K) return;
    int cc = j / S, i = j - cc * S, c = c0 + cc;
    acc d = (LDA(x_[at3(0, n, c, i)]) - sh) - ms;
    acc kk = has_w ? inv * LDA(w_[at1(2, c)]) : inv;
    acc bb = has_b ? LDA(b_[at1(3, c)]) : acc(0);
    o_[at3(1, n, c, i)] = STA(d * kk + bb);
}
void main() {
    int N = P.i[0], C = P.i[1], S = P.i[2], G = P.i[3], Cg = C / G, K = Cg * S;
    bool has_w = P.i[4] != 0, has_b = P.i[5] != 0;
    acc eps = acc(SC(0));
    LINE_LOOP(r, N * G) {
        int n = r / G, g = r - n * G, c0 = g * Cg;
        acc sh = LDA(x_[at3(0, n, c0, 0)]);
        precise acc s = acc(0), k = acc(0);
#define P1(u) KADD(s, k, gn_d(n, c0, j + (u) * RWG, K, S, sh))
        BLOCK_LOOP(j, K) { UNROLL(P1) }
        s = wg_sum(s);
        acc ms = s / acc(K);
        precise acc q = acc(0), kq = acc(0);
#define P2(u) KADD(q, kq, gn_sq(n, c0, j + (u) * RWG, K, S, sh, ms))
        BLOCK_LOOP(j, K) { UNROLL(P2) }
        q = wg_sum(q);
        acc inv = acc(1) / m_sqrt(q / acc(K) + eps);
        if (LID == 0) {
            if (P.i[6] != 0) sm_[at2(4, n, g)] = STA(sh + ms);
            if (P.i[7] != 0) si_[at2(5, n, g)] = STA(inv);
        }
#define P3(u) gn_out(n, c0, j + (u) * RWG, K, S, sh, ms, inv, has_w, has_b);
        BLOCK_LOOP(j, K) { UNROLL(P3) }
    }
}

#elif defined(K_RMS)
/* Views: 0 x [rows, n], 1 out, 2 weight [n], 3 save_invrms [rows].
 * Ints: rows n has_w has_si. Scalar: eps. */
BUF(1, A, x_);
BUF(2, A, o_);
BUF(3, A, w_);
BUF(4, A, si_);
acc rms_sq(int r, int j, int n) {
    if (j >= n) return acc(0);
    acc v = LDA(x_[at2(0, r, j)]);
    return v * v;
}
void rms_out(int r, int j, int n, acc inv, bool has_w) {
    if (j >= n) return;
    acc v = LDA(x_[at2(0, r, j)]) * inv;
    if (has_w) v *= LDA(w_[at1(2, j)]);
    o_[at2(1, r, j)] = STA(v);
}
void main() {
    int rows = P.i[0], n = P.i[1];
    bool has_w = P.i[2] != 0;
    acc eps = acc(SC(0));
    LINE_LOOP(r, rows) {
        precise acc s = acc(0), k = acc(0);
#define P1(u) KADD(s, k, rms_sq(r, j + (u) * RWG, n))
        BLOCK_LOOP(j, n) { UNROLL(P1) }
        s = wg_sum(s);
        acc inv = acc(1) / m_sqrt(s / acc(n) + eps);
        if (LID == 0 && P.i[3] != 0) si_[at1(3, r)] = STA(inv);
#define P2(u) rms_out(r, j + (u) * RWG, n, inv, has_w);
        BLOCK_LOOP(j, n) { UNROLL(P2) }
    }
}
#endif
