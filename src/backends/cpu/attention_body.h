/* attention_body.h — the blocked attention loops of attention.c for one compute type, included
 * once with AT_T float (AT_S f32, AT_DT EM_F32) and once with AT_T double (f64). The block
 * products (the scores, the weights times v, and backward's four) are ember's GEMM at this
 * level on small packed blocks; the softmax steps are plain loops along a block's rows that
 * GCC vectorizes at every level. */

#define AT_F(name) AT_F_(name, AT_S)
#define AT_F_(name, s) AT_F__(name, s)
#define AT_F__(name, s) at_##name##_##s

/* n contiguous values of the view's dtype from element off of its buffer view: src rounded */
static void AT_F(store)(const em_view *v, int64_t off, const AT_T *restrict src, int64_t n) {
    if (v->dtype == AT_DT) {
        AT_T *restrict d = (AT_T *)v->buf + v->offset + off;
        for (int64_t x = 0; x < n; x++) d[x] = src[x];
        return;
    }
#if AT_IS_F32
    cpu_f32_to_half_n(v->dtype, (uint16_t *)v->buf + v->offset + off, src, n);
#endif
}

/* scratch elements a thread needs */
static int64_t AT_F(fwd_need)(const at_ctx *c) {
    return AT_BQ * c->E + AT_BQ * c->Ev + AT_BK * c->E + AT_BK * c->Ev + AT_BQ * AT_BK +
           2 * AT_BQ + AT_BK;
}
static int64_t AT_F(bwd_need)(const at_ctx *c) {
    const int64_t L = c->L, E = c->E, Ev = c->Ev;
    return 2 * L * E + L * Ev + 2 * L + 2 * AT_BK * E + 2 * AT_BK * Ev + 3 * AT_BQ * AT_BK +
           AT_BK + Ev;
}

/* C = op(A) op(B) + beta C on this thread: ember's GEMM at this level */
#define AT_GEMM(ta, tb, m, n, k, a, lda, b, ldb, beta, cc, ldc)                                  \
    CPU_K(cpu_gemm_kernel)(AT_DT, ta, tb, m, n, k, a, lda, b, ldb, beta, cc, ldc)

/* dst[r * ld + c] = v[r0 + r, c] * mul for r < nr, c < nc (v's batch at base) */
static void AT_F(pack)(AT_T *restrict dst, int64_t ld, const em_view *v, int64_t base,
                       int64_t r0, int64_t nr, int64_t nc, AT_T mul) {
    const int R = v->rank;
    const int64_t sr = v->strides[R - 2], sc = v->strides[R - 1];
    if (v->dtype == AT_DT && sc == 1) {
        for (int64_t r = 0; r < nr; r++) {
            const AT_T *restrict s = (const AT_T *)v->buf + base + (r0 + r) * sr;
            for (int64_t c = 0; c < nc; c++) dst[r * ld + c] = s[c] * mul;
        }
        return;
    }
#if AT_IS_F32
    if (cpu_is_half(v->dtype) && sc == 1) {
        for (int64_t r = 0; r < nr; r++) {
            AT_T *restrict d = dst + r * ld;
            cpu_half_to_f32_n(v->dtype, d, (const uint16_t *)v->buf + base + (r0 + r) * sr, nc);
            if (mul != 1)
                for (int64_t c = 0; c < nc; c++) d[c] *= mul;
        }
        return;
    }
#endif
    for (int64_t r = 0; r < nr; r++)
        for (int64_t c = 0; c < nc; c++)
            dst[r * ld + c] = (AT_T)at_ld(v->buf, v->dtype, base + (r0 + r) * sr + c * sc) * mul;
}

/* the dropout factors of row i (batch b) at keys j0..j0+nc: keep / (1 - p) or 0 */
static void AT_F(drop_row)(AT_T *restrict f, const at_ctx *c, int64_t b, int64_t i, int64_t j0,
                           int64_t nc) {
    const AT_T inv = (AT_T)(1.0 / (1.0 - c->dropout_p));
    const uint64_t n0 = (uint64_t)((b * c->L + i) * c->S + j0);
    for (int64_t j = 0; j < nc; j++) f[j] = at_keep(c->seed, n0 + (uint64_t)j, c->keep_p) ? inv : 0;
}

static inline AT_T AT_F(exp)(AT_T x) {
#if AT_IS_F32
    return cpu_expf(x);
#else
    return exp(x);
#endif
}

/* s (nr rows of AT_BK, nc valid columns) plus the causal and mask terms of rows i0.., keys
 * j0.. (-inf where a query does not attend) */
static void AT_F(mask)(AT_T *restrict s, int64_t nr, int64_t nc, const at_ctx *c, int64_t mb,
                       int64_t i0, int64_t j0) {
    for (int64_t i = 0; i < nr; i++) {
        AT_T *restrict row = s + i * AT_BK;
        int64_t lim = nc; /* causal: keys j0 + j <= i0 + i */
        if (c->causal && i0 + i - j0 + 1 < lim) lim = i0 + i - j0 + 1 > 0 ? i0 + i - j0 + 1 : 0;
        for (int64_t j = lim; j < nc; j++) row[j] = -INFINITY;
        if (!c->mask) continue;
        const em_view *m = c->mask;
        const int R = m->rank;
        const int64_t mo = mb + (i0 + i) * m->strides[R - 2], ms = m->strides[R - 1];
        if (m->dtype == EM_BOOL) {
            const uint8_t *mp = (const uint8_t *)m->buf + mo;
            for (int64_t j = 0; j < lim; j++)
                if (!mp[(j0 + j) * ms]) row[j] = -INFINITY;
        } else {
            for (int64_t j = 0; j < lim; j++)
                row[j] += (AT_T)at_ld(m->buf, m->dtype, mo + (j0 + j) * ms);
        }
    }
}

/* the sum and the max of p[0..n), 8 lanes apart (vectorizable without reassociation) */
static inline AT_T AT_F(sum)(const AT_T *restrict p, int64_t n) {
    AT_T acc[8] = {0};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int u = 0; u < 8; u++) acc[u] += p[j + u];
    for (; j < n; j++) acc[0] += p[j];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}
static inline AT_T AT_F(max)(const AT_T *restrict p, int64_t n) {
    AT_T acc[8];
    for (int u = 0; u < 8; u++) acc[u] = -INFINITY;
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int u = 0; u < 8; u++) acc[u] = p[j + u] > acc[u] ? p[j + u] : acc[u];
    for (; j < n; j++) acc[0] = p[j] > acc[0] ? p[j] : acc[0];
    AT_T m = acc[0];
    for (int u = 1; u < 8; u++) m = acc[u] > m ? acc[u] : m;
    return m;
}

/* ---- forward: tasks are (batch, query block) ---- */
static void AT_F(fwd_range)(int64_t lo, int64_t hi, void *arg) {
    const at_ctx *c = arg;
    const int64_t E = c->E, Ev = c->Ev, nqb = (c->L + AT_BQ - 1) / AT_BQ;
    AT_T *w = cpu_scratch(sizeof(AT_T) * (size_t)AT_F(fwd_need)(c));
    if (!w) {
        atomic_store(&((at_ctx *)c)->nomem, 1);
        return;
    }
    AT_T *Q = w, *O = Q + AT_BQ * E, *K = O + AT_BQ * Ev, *V = K + AT_BK * E,
         *S = V + AT_BK * Ev, *m = S + AT_BQ * AT_BK, *l = m + AT_BQ, *f = l + AT_BQ;
    for (int64_t t = lo; t < hi; t++) {
        const int64_t b = t / nqb, i0 = (t % nqb) * AT_BQ;
        const int64_t nr = c->L - i0 < AT_BQ ? c->L - i0 : AT_BQ;
        const int64_t qb = at_base(c->q, b), kb = at_base(c->k, b), vb = at_base(c->v, b);
        const int64_t mb = c->mask ? at_base(c->mask, b) : 0;
        AT_F(pack)(Q, E, c->q, qb, i0, nr, E, (AT_T)c->scale);
        for (int64_t x = 0; x < nr * Ev; x++) O[x] = 0;
        for (int64_t i = 0; i < nr; i++) m[i] = -INFINITY, l[i] = 0;
        int64_t send = c->S; /* causal: the last row sees keys <= i0 + nr - 1 */
        if (c->causal && i0 + nr < send) send = i0 + nr;
        for (int64_t j0 = 0; j0 < send; j0 += AT_BK) {
            const int64_t nc = send - j0 < AT_BK ? send - j0 : AT_BK;
            AT_F(pack)(K, E, c->k, kb, j0, nc, E, 1);
            AT_F(pack)(V, Ev, c->v, vb, j0, nc, Ev, 1);
            AT_GEMM(false, true, nr, nc, E, Q, E, K, E, 0, S, AT_BK);
            AT_F(mask)(S, nr, nc, c, mb, i0, j0);
            for (int64_t i = 0; i < nr; i++) {
                AT_T *restrict row = S + i * AT_BK;
                const AT_T mx = AT_F(max)(row, nc);
                const AT_T mn = mx > m[i] ? mx : m[i];
                if (mn == -INFINITY) { /* nothing seen yet: no weight */
                    for (int64_t j = 0; j < nc; j++) row[j] = 0;
                    continue;
                }
                const AT_T alpha = AT_F(exp)(m[i] - mn);
                for (int64_t j = 0; j < nc; j++) row[j] = AT_F(exp)(row[j] - mn);
                l[i] = l[i] * alpha + AT_F(sum)(row, nc);
                m[i] = mn;
                AT_T *restrict o = O + i * Ev;
                if (alpha != 1)
                    for (int64_t e = 0; e < Ev; e++) o[e] *= alpha;
                if (c->dropout_p > 0) {
                    AT_F(drop_row)(f, c, b, i0 + i, j0, nc);
                    for (int64_t j = 0; j < nc; j++) row[j] *= f[j];
                }
            }
            AT_GEMM(false, false, nr, Ev, nc, S, AT_BK, V, Ev, 1, O, Ev);
        }
        for (int64_t i = 0; i < nr; i++) {
            const bool none = m[i] == -INFINITY;
            const AT_T inv = none ? (AT_T)NAN : 1 / l[i];
            const double lse = none ? -INFINITY : (double)m[i] + log((double)l[i]);
            at_st(c->lse, (b * c->L + i0 + i), lse);
            AT_T *restrict o = O + i * Ev;
            for (int64_t e = 0; e < Ev; e++) o[e] = none ? (AT_T)NAN : o[e] * inv;
            AT_F(store)(c->out, (b * c->L + i0 + i) * Ev, o, Ev);
        }
    }
    cpu_scratch_free(w);
}

/* ---- backward: tasks are batches ---- */
static void AT_F(bwd_range)(int64_t lo, int64_t hi, void *arg) {
    const at_ctx *c = arg;
    const int64_t E = c->E, Ev = c->Ev, L = c->L, S = c->S;
    AT_T *w = cpu_scratch(sizeof(AT_T) * (size_t)AT_F(bwd_need)(c));
    if (!w) {
        atomic_store(&((at_ctx *)c)->nomem, 1);
        return;
    }
    AT_T *Q = w, *dO = Q + L * E, *dQ = dO + L * Ev, *D = dQ + L * E, *lse = D + L,
         *K = lse + L, *V = K + AT_BK * E, *dK = V + AT_BK * Ev, *dV = dK + AT_BK * E,
         *P = dV + AT_BK * Ev, *dP = P + AT_BQ * AT_BK, *PD = dP + AT_BQ * AT_BK,
         *f = PD + AT_BQ * AT_BK, *orow = f + AT_BK;
    for (int64_t b = lo; b < hi; b++) {
        const int64_t qb = at_base(c->q, b), kb = at_base(c->k, b), vb = at_base(c->v, b);
        const int64_t ob = at_base(c->o, b), gb = at_base(c->dout, b);
        const int64_t mb = c->mask ? at_base(c->mask, b) : 0;
        AT_F(pack)(Q, E, c->q, qb, 0, L, E, (AT_T)c->scale);
        AT_F(pack)(dO, Ev, c->dout, gb, 0, L, Ev, 1);
        bool any_none = false;
        for (int64_t i = 0; i < L; i++) {
            AT_F(pack)(orow, Ev, c->o, ob, i, 1, Ev, 1);
            AT_T d = 0;
            for (int64_t e = 0; e < Ev; e++) d += dO[i * Ev + e] * orow[e];
            D[i] = d;
            lse[i] = (AT_T)at_ld(c->lse->buf, c->lse->dtype, c->lse->offset + b * L + i);
            any_none |= lse[i] == -INFINITY;
        }
        for (int64_t x = 0; x < L * E; x++) dQ[x] = 0;
        const bool drop = c->dropout_p > 0;
        for (int64_t j0 = 0; j0 < S; j0 += AT_BK) {
            const int64_t nc = S - j0 < AT_BK ? S - j0 : AT_BK;
            AT_F(pack)(K, E, c->k, kb, j0, nc, E, 1);
            AT_F(pack)(V, Ev, c->v, vb, j0, nc, Ev, 1);
            for (int64_t x = 0; x < nc * E; x++) dK[x] = 0;
            for (int64_t x = 0; x < nc * Ev; x++) dV[x] = 0;
            const int64_t istart = c->causal ? j0 / AT_BQ * AT_BQ : 0; /* rows i >= j0 only */
            for (int64_t i0 = istart; i0 < L; i0 += AT_BQ) {
                const int64_t nr = L - i0 < AT_BQ ? L - i0 : AT_BQ;
                AT_GEMM(false, true, nr, nc, E, Q + i0 * E, E, K, E, 0, P, AT_BK);
                AT_F(mask)(P, nr, nc, c, mb, i0, j0);
                AT_GEMM(false, true, nr, nc, Ev, dO + i0 * Ev, Ev, V, Ev, 0, dP, AT_BK);
                for (int64_t i = 0; i < nr; i++) {
                    AT_T *restrict p = P + i * AT_BK, *restrict dp = dP + i * AT_BK;
                    AT_T *restrict pd = PD + i * AT_BK;
                    const AT_T ls = lse[i0 + i], di = D[i0 + i];
                    if (ls == -INFINITY) { /* a row that attends to nothing */
                        for (int64_t j = 0; j < nc; j++) p[j] = 0, dp[j] = 0, pd[j] = 0;
                        continue;
                    }
                    for (int64_t j = 0; j < nc; j++) p[j] = AT_F(exp)(p[j] - ls);
                    if (drop) {
                        AT_F(drop_row)(f, c, b, i0 + i, j0, nc);
                        for (int64_t j = 0; j < nc; j++) pd[j] = p[j] * f[j], dp[j] *= f[j];
                    }
                    for (int64_t j = 0; j < nc; j++) dp[j] = p[j] * (dp[j] - di); /* dS */
                }
                AT_GEMM(true, false, nc, Ev, nr, drop ? PD : P, AT_BK, dO + i0 * Ev, Ev, 1, dV,
                        Ev);
                AT_GEMM(true, false, nc, E, nr, dP, AT_BK, Q + i0 * E, E, 1, dK, E);
                AT_GEMM(false, false, nr, E, nc, dP, AT_BK, K, E, 1, dQ + i0 * E, E);
            }
            if (any_none)
                for (int64_t x = 0; x < nc * Ev; x++) dV[x] = (AT_T)NAN;
            AT_F(store)(c->dk, (b * S + j0) * E, dK, nc * E);
            AT_F(store)(c->dv, (b * S + j0) * Ev, dV, nc * Ev);
        }
        const AT_T sc = (AT_T)c->scale;
        for (int64_t x = 0; x < L * E; x++) dQ[x] *= sc;
        AT_F(store)(c->dq, b * L * E, dQ, L * E);
    }
    cpu_scratch_free(w);
}

#undef AT_GEMM
#undef AT_F
#undef AT_F_
#undef AT_F__
