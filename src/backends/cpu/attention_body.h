/* attention_body.h — the blocked attention loops of attention.c for one compute type, included
 * once with AT_T float (AT_S f32, AT_DT EM_F32) and once with AT_T double (f64). Plain loops
 * over small packed blocks whose innermost loop runs along a contiguous row (a key block's
 * columns, or E / Ev): GCC vectorizes them at every level. */

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
    return AT_BQ * c->E + AT_BQ * c->Ev + c->E * AT_BK + AT_BK * c->Ev + AT_BQ * AT_BK +
           2 * AT_BQ + AT_BK;
}
static int64_t AT_F(bwd_need)(const at_ctx *c) {
    const int64_t L = c->L, E = c->E, Ev = c->Ev;
    return 2 * L * E + L * Ev + 2 * L + 2 * AT_BK * E + 2 * Ev * AT_BK + E * AT_BK +
           2 * AT_BQ * AT_BK + AT_BK + Ev;
}


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
    for (int64_t r = 0; r < nr; r++)
        for (int64_t c = 0; c < nc; c++)
            dst[r * ld + c] = (AT_T)at_ld(v->buf, v->dtype, base + (r0 + r) * sr + c * sc) * mul;
}

/* dst[c * ld + r] = v[r0 + r, c] (the block transposed) */
static void AT_F(pack_t)(AT_T *restrict dst, int64_t ld, const em_view *v, int64_t base,
                         int64_t r0, int64_t nr, int64_t nc) {
    const int R = v->rank;
    const int64_t sr = v->strides[R - 2], sc = v->strides[R - 1];
    for (int64_t r = 0; r < nr; r++)
        for (int64_t c = 0; c < nc; c++)
            dst[c * ld + r] = (AT_T)at_ld(v->buf, v->dtype, base + (r0 + r) * sr + c * sc);
}

/* s[i * AT_BK + j] = sum_e q[i * E + e] kt[e * AT_BK + j] for i < nr, j < AT_BK, then the
 * causal and mask terms of rows i0.., keys j0.. (nc valid columns; the rest -inf) */
static void AT_F(scores)(AT_T *restrict s, const AT_T *restrict q, int64_t ldq,
                         const AT_T *restrict kt, int64_t E, int64_t nr, int64_t nc,
                         const at_ctx *c, int64_t mb, int64_t i0, int64_t j0) {
    int64_t i = 0;
    for (; i + 4 <= nr; i += 4) {
        AT_T *restrict s0 = s + i * AT_BK, *restrict s1 = s0 + AT_BK, *restrict s2 = s1 + AT_BK,
             *restrict s3 = s2 + AT_BK;
        for (int j = 0; j < AT_BK; j++) s0[j] = s1[j] = s2[j] = s3[j] = 0;
        for (int64_t e = 0; e < E; e++) {
            const AT_T a0 = q[i * ldq + e], a1 = q[(i + 1) * ldq + e], a2 = q[(i + 2) * ldq + e],
                       a3 = q[(i + 3) * ldq + e];
            const AT_T *restrict k = kt + e * AT_BK;
            for (int j = 0; j < AT_BK; j++) {
                s0[j] += a0 * k[j];
                s1[j] += a1 * k[j];
                s2[j] += a2 * k[j];
                s3[j] += a3 * k[j];
            }
        }
    }
    for (; i < nr; i++) {
        AT_T *restrict s0 = s + i * AT_BK;
        for (int j = 0; j < AT_BK; j++) s0[j] = 0;
        for (int64_t e = 0; e < E; e++) {
            const AT_T a0 = q[i * ldq + e];
            const AT_T *restrict k = kt + e * AT_BK;
            for (int j = 0; j < AT_BK; j++) s0[j] += a0 * k[j];
        }
    }
    for (i = 0; i < nr; i++) {
        AT_T *restrict row = s + i * AT_BK;
        int64_t lim = nc; /* causal: keys j0 + j <= i0 + i */
        if (c->causal && i0 + i - j0 + 1 < lim) lim = i0 + i - j0 + 1 > 0 ? i0 + i - j0 + 1 : 0;
        for (int64_t j = lim; j < AT_BK; j++) row[j] = -INFINITY;
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

/* ---- forward: tasks are (batch, query block) ---- */
static void AT_F(fwd_range)(int64_t lo, int64_t hi, void *arg) {
    const at_ctx *c = arg;
    const int64_t E = c->E, Ev = c->Ev, nqb = (c->L + AT_BQ - 1) / AT_BQ;
    AT_T *w = cpu_scratch(sizeof(AT_T) * (size_t)AT_F(fwd_need)(c));
    if (!w) {
        atomic_store(&((at_ctx *)c)->nomem, 1);
        return;
    }
    AT_T *Q = w, *O = Q + AT_BQ * E, *Kt = O + AT_BQ * Ev, *V = Kt + E * AT_BK,
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
            AT_F(pack_t)(Kt, AT_BK, c->k, kb, j0, nc, E);
            for (int64_t x = nc; x < AT_BK; x++)
                for (int64_t e = 0; e < E; e++) Kt[e * AT_BK + x] = 0;
            AT_F(pack)(V, Ev, c->v, vb, j0, nc, Ev, 1);
            AT_F(scores)(S, Q, E, Kt, E, nr, nc, c, mb, i0, j0);
            for (int64_t i = 0; i < nr; i++) {
                AT_T *restrict row = S + i * AT_BK;
                AT_T mx = -INFINITY;
                for (int64_t j = 0; j < nc; j++) mx = row[j] > mx ? row[j] : mx;
                const AT_T mn = mx > m[i] ? mx : m[i];
                if (mn == -INFINITY) continue; /* nothing seen yet */
                const AT_T alpha = AT_F(exp)(m[i] - mn);
                AT_T sum = 0;
                for (int64_t j = 0; j < nc; j++) {
                    row[j] = AT_F(exp)(row[j] - mn);
                    sum += row[j];
                }
                l[i] = l[i] * alpha + sum;
                m[i] = mn;
                AT_T *restrict o = O + i * Ev;
                if (alpha != 1)
                    for (int64_t e = 0; e < Ev; e++) o[e] *= alpha;
                if (c->dropout_p > 0) {
                    AT_F(drop_row)(f, c, b, i0 + i, j0, nc);
                    for (int64_t j = 0; j < nc; j++) row[j] *= f[j];
                }
                for (int64_t j = 0; j < nc; j++) {
                    const AT_T p = row[j];
                    if (p == 0) continue;
                    const AT_T *restrict vr = V + j * Ev;
                    for (int64_t e = 0; e < Ev; e++) o[e] += p * vr[e];
                }
            }
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
         *K = lse + L, *Kt = K + AT_BK * E, *Vt = Kt + E * AT_BK, *dK = Vt + Ev * AT_BK,
         *dV = dK + AT_BK * E, *P = dV + AT_BK * Ev, *dP = P + AT_BQ * AT_BK, *f = dP + AT_BQ * AT_BK,
         *orow = f + AT_BK;
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
        for (int64_t j0 = 0; j0 < S; j0 += AT_BK) {
            const int64_t nc = S - j0 < AT_BK ? S - j0 : AT_BK;
            AT_F(pack)(K, E, c->k, kb, j0, nc, E, 1);
            AT_F(pack_t)(Kt, AT_BK, c->k, kb, j0, nc, E);
            AT_F(pack_t)(Vt, AT_BK, c->v, vb, j0, nc, Ev);
            for (int64_t x = nc; x < AT_BK; x++) {
                for (int64_t e = 0; e < E; e++) Kt[e * AT_BK + x] = 0;
                for (int64_t e = 0; e < Ev; e++) Vt[e * AT_BK + x] = 0;
            }
            for (int64_t x = 0; x < AT_BK * E; x++) dK[x] = 0;
            for (int64_t x = 0; x < AT_BK * Ev; x++) dV[x] = 0;
            const int64_t istart = c->causal ? j0 / AT_BQ * AT_BQ : 0; /* rows i >= j0 only */
            for (int64_t i0 = istart; i0 < L; i0 += AT_BQ) {
                const int64_t nr = L - i0 < AT_BQ ? L - i0 : AT_BQ;
                AT_F(scores)(P, Q + i0 * E, E, Kt, E, nr, nc, c, mb, i0, j0);
                /* dP = dO Vt */
                for (int64_t i = 0; i < nr; i++) {
                    AT_T *restrict dp = dP + i * AT_BK;
                    for (int j = 0; j < AT_BK; j++) dp[j] = 0;
                    for (int64_t e = 0; e < Ev; e++) {
                        const AT_T g = dO[(i0 + i) * Ev + e];
                        const AT_T *restrict vt = Vt + e * AT_BK;
                        for (int j = 0; j < AT_BK; j++) dp[j] += g * vt[j];
                    }
                }
                for (int64_t i = 0; i < nr; i++) {
                    AT_T *restrict p = P + i * AT_BK, *restrict dp = dP + i * AT_BK;
                    const AT_T ls = lse[i0 + i], di = D[i0 + i];
                    if (ls == -INFINITY) { /* a row that attends to nothing */
                        for (int j = 0; j < AT_BK; j++) p[j] = 0, dp[j] = 0;
                        continue;
                    }
                    for (int64_t j = 0; j < nc; j++) p[j] = AT_F(exp)(p[j] - ls);
                    for (int64_t j = nc; j < AT_BK; j++) p[j] = 0;
                    const AT_T *restrict go = dO + (i0 + i) * Ev;
                    if (c->dropout_p > 0) {
                        AT_F(drop_row)(f, c, b, i0 + i, j0, nc);
                        for (int64_t j = 0; j < nc; j++) {
                            const AT_T pd = p[j] * f[j];
                            if (pd != 0) {
                                AT_T *restrict dv = dV + j * Ev;
                                for (int64_t e = 0; e < Ev; e++) dv[e] += pd * go[e];
                            }
                            dp[j] *= f[j];
                        }
                    } else {
                        for (int64_t j = 0; j < nc; j++) {
                            const AT_T pd = p[j];
                            if (pd == 0) continue;
                            AT_T *restrict dv = dV + j * Ev;
                            for (int64_t e = 0; e < Ev; e++) dv[e] += pd * go[e];
                        }
                    }
                    /* dS = P (dP - D), into dp */
                    for (int j = 0; j < AT_BK; j++) dp[j] = p[j] * (dp[j] - di);
                    AT_T *restrict dq = dQ + (i0 + i) * E;
                    const AT_T *restrict qi = Q + (i0 + i) * E;
                    for (int64_t j = 0; j < nc; j++) {
                        const AT_T ds = dp[j];
                        if (ds == 0) continue;
                        const AT_T *restrict kr = K + j * E;
                        AT_T *restrict dk = dK + j * E;
                        for (int64_t e = 0; e < E; e++) {
                            dq[e] += ds * kr[e];
                            dk[e] += ds * qi[e];
                        }
                    }
                }
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

#undef AT_F
#undef AT_F_
#undef AT_F__
