/* gemm_body.h — the type-generic part of gemm.c, included once for float and once for double
 * with T (the element type), V (its vector type at this level), FMA, GEMM_MC, GEMM_NC and G
 * (the name suffixer) defined. */

#define W ((int64_t)(GEMM_VB / sizeof(T)))   /* lanes of a vector */
#define NR (GEMM_NV * (int)(GEMM_VB / sizeof(T))) /* columns of a tile */
#define MR GEMM_MR
#define GEMM_PB 4 /* B micro-panels packed together (B not transposed) */

/* A block: op(A)'s rows [0, mc) and columns [0, kc) as micro-panels of MR rows, each stored
 * column by column (MR values a column), rows past mc zero. Element (i, p) of op(A) is
 * a[p * lda + i] when ta, else a[i * lda + p]. */
static void G(pack_a)(bool ta, const T *a, int64_t lda, int64_t mc, int64_t kc,
                      T *restrict pa) {
    if (ta) { /* a row of the block (mc values) a step, into every panel: whole lines read */
        for (int64_t p = 0; p < kc; p++) {
            const T *s = a + p * lda;
            T *d = pa + p * MR;
            /* a row 8 steps ahead (an address only): short streams the hardware misses */
            for (int64_t i = 0; i < mc; i += 64 / (int64_t)sizeof(T))
                __builtin_prefetch((const void *)((uintptr_t)(s + i) +
                                                  (uintptr_t)(8 * lda) * sizeof(T)), 0, 3);
            int64_t i0 = 0;
            for (; i0 + MR <= mc; i0 += MR, d += MR * kc)
                for (int r = 0; r < MR; r++) d[r] = s[i0 + r]; /* a fixed count: no memcpy */
            if (i0 < mc)
                for (int r = 0; r < MR; r++) d[r] = i0 + r < mc ? s[i0 + r] : 0;
        }
        return;
    }
    for (int64_t i0 = 0; i0 < mc; i0 += MR, pa += MR * kc) {
        /* the next panel's rows, from memory: short streams the hardware does not foresee */
        for (int64_t r = 0; i0 + MR < mc && r < gemm_min(MR, mc - i0 - MR); r++)
            for (int64_t p = 0; p < kc; p += 64 / (int64_t)sizeof(T))
                __builtin_prefetch(a + (i0 + MR + r) * lda + p, 0, 3);
        G(pack_t)(a + i0 * lda, lda, gemm_min(MR, mc - i0), MR, kc, pa);
    }
}

/* A panel: op(B)'s rows [0, kc) and columns [0, nc) as micro-panels of NR columns, each
 * stored row by row (NR values a row), columns past nc zero. Element (p, j) of op(B) is
 * b[j * ldb + p] when tb, else b[p * ldb + j]. */
static void G(pack_b)(bool tb, const T *b, int64_t ldb, int64_t kc, int64_t nc,
                      T *restrict pb) {
    if (!tb) { /* a row of the panel (nc values, GEMM_PB micro-panels) a step */
        for (int64_t p = 0; p < kc; p++) {
            const T *s = b + p * ldb;
            T *d = pb + p * NR;
            /* the next panel's row, as wide as this one (addresses only: they may lie past B),
             * into L2 while the microkernel runs on this one: B's rows are short streams */
            for (int64_t q = 0; q <= nc; q += 64 / (int64_t)sizeof(T))
                __builtin_prefetch((const void *)((uintptr_t)s + (uintptr_t)(nc + q) * sizeof(T)),
                                   0, 2);
            int64_t j0 = 0;
            for (; j0 + NR <= nc; j0 += NR, d += NR * kc)
                for (int q = 0; q < NR; q++) d[q] = s[j0 + q]; /* a fixed count: no memcpy */
            if (j0 < nc)
                for (int q = 0; q < NR; q++) d[q] = j0 + q < nc ? s[j0 + q] : 0;
        }
        return;
    }
    for (int64_t j0 = 0; j0 < nc; j0 += NR, pb += NR * kc) {
        /* the next micro-panel's rows (addresses only: they may lie past B) into L2 while the
         * microkernel runs on this one: B^T's rows are streams too many to foresee */
        for (int64_t q = 0; q < NR; q++)
            for (int64_t p = 0; p < kc; p += 64 / (int64_t)sizeof(T))
                __builtin_prefetch((const void *)((uintptr_t)(b + p) +
                                                  (uintptr_t)((j0 + NR + q) * ldb) * sizeof(T)),
                                   0, 2);
        G(pack_t)(b + j0 * ldb, ldb, gemm_min(NR, nc - j0), NR, kc, pb);
    }
}

static inline V G(ldu)(const T *p) {
    V v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void G(stu)(T *p, V v) { memcpy(p, &v, sizeof v); }

/* x in every lane: a broadcast (`(V){0} + x` would be an add, kept for the sign of -0) */
static inline V G(splat)(T x) {
#if CPU_ISA_LEVEL >= CPU_ISA_AVX512
    return (V)(sizeof(T) == 4 ? (V)_mm512_set1_ps((float)x) : (V)_mm512_set1_pd((double)x));
#elif CPU_ISA_LEVEL == CPU_ISA_AVX2
    return (V)(sizeof(T) == 4 ? (V)_mm256_set1_ps((float)x) : (V)_mm256_set1_pd((double)x));
#elif defined(__SSE2__)
    return (V)(sizeof(T) == 4 ? (V)_mm_set1_ps((float)x) : (V)_mm_set1_pd((double)x));
#else
    V v = {0};
    for (int i = 0; i < (int)W; i++) v[i] = x;
    return v;
#endif
}

/* One step of the microkernel: row p of the micro-panels, ROWS x NV FMAs. */
#define STEP(P)                                                                               \
    do {                                                                                      \
        const V b0 = G(ldu)(pb + (P) * NR), b1 = G(ldu)(pb + (P) * NR + W);                   \
        for (int r = 0; r < ROWS; r++) {                                                      \
            const V ar = G(splat)(pa[(P) * MR + r]);                                          \
            acc[r][0] = FMA(ar, b0, acc[r][0]);                                               \
            acc[r][1] = FMA(ar, b1, acc[r][1]);                                               \
        }                                                                                     \
    } while (0)

/* The ROWS x NR tile of C at c (mr x nr of it inside C) = pa (MR x kc, its first ROWS rows)
 * pb (kc x NR), plus C itself when `add`, plus beta C when `first` (the first run of kc;
 * beta 0: C not read). Two copies (KERNEL below): ROWS = MR, and MRH = MR / 2 rounded up for
 * a last tile of at most that many rows (m = 128 at MR 6: 21 tiles and one of 2 rows, which
 * the whole tile would compute at the cost of 6). */
/* Not inlined: one copy of the loop, whose accumulators stay in registers (checked with objdump
 * at each level, GCC 12 and clang: no stack access in the loop; a hand-unrolled loop spilled,
 * `#pragma GCC unroll 4` does not). */
#define KERNEL(NAME, ROWS_)                                                                   \
    __attribute__((noinline)) static void NAME(int64_t kc, const T *restrict pa,              \
                                               const T *restrict pb, T *restrict c,           \
                                               int64_t ldc, int64_t mr, int64_t nr,           \
                                               bool first, T beta) {                          \
        enum { ROWS = ROWS_ };                                                                \
        _Static_assert(GEMM_NV == 2, "the microkernel's steps load two vectors of B");        \
        V acc[ROWS][GEMM_NV];                                                                 \
        for (int r = 0; r < ROWS; r++) acc[r][0] = acc[r][1] = (V){0};                        \
        /* the tile's rows of C, wanted after the loop: their cache misses overlap it */      \
        for (int64_t r = 0; r < mr; r++) {                                                    \
            __builtin_prefetch(c + r * ldc, 1, 3);                                            \
            __builtin_prefetch(c + r * ldc + nr - 1, 1, 3);                                   \
        }                                                                                     \
        int64_t p = 0;                                                                        \
        _Pragma("GCC unroll 4") for (; p < kc; p++, pa += MR, pb += NR) STEP(0);              \
        if (mr == ROWS && nr == NR) {                                                         \
            for (int r = 0; r < ROWS; r++)                                                    \
                for (int v = 0; v < GEMM_NV; v++) {                                           \
                    T *o = c + r * ldc + v * W;                                               \
                    if (!first) G(stu)(o, acc[r][v] + G(ldu)(o));                             \
                    else if (beta == 0) G(stu)(o, acc[r][v]);                                 \
                    else G(stu)(o, acc[r][v] + beta * G(ldu)(o));                             \
                }                                                                             \
            return;                                                                           \
        }                                                                                     \
        T t[ROWS * NR] __attribute__((aligned(64)));                                          \
        for (int r = 0; r < ROWS; r++)                                                        \
            for (int v = 0; v < GEMM_NV; v++) G(stu)(t + r * NR + v * W, acc[r][v]);          \
        for (int64_t r = 0; r < mr; r++)                                                      \
            for (int64_t q = 0; q < nr; q++) {                                                \
                T *o = c + r * ldc + q;                                                       \
                const T x = t[r * NR + q];                                                    \
                *o = !first ? x + *o : beta == 0 ? x : x + beta * *o;                         \
            }                                                                                 \
    }
#define MRH ((MR + 1) / 2)
KERNEL(G(kernel), MR)
KERNEL(G(kernel_h), MRH)
#undef KERNEL
#undef STEP

/* sum of x[p * ix] y[p * iy], p < k: vectors when both are contiguous */
static T G(dot)(const T *x, int64_t ix, const T *y, int64_t iy, int64_t k) {
    int64_t p = 0;
    T s = 0;
    if (ix == 1 && iy == 1) {
        V s0 = {0}, s1 = {0};
        for (; p + 2 * W <= k; p += 2 * W) {
            s0 = FMA(G(ldu)(x + p), G(ldu)(y + p), s0);
            s1 = FMA(G(ldu)(x + p + W), G(ldu)(y + p + W), s1);
        }
        s0 += s1;
        for (int i = 0; i < (int)W; i++) s += s0[i];
        for (; p < k; p++) s += x[p] * y[p];
        return s;
    }
    T s1 = 0, s2 = 0, s3 = 0;
    for (; p + 4 <= k; p += 4) {
        s += x[p * ix] * y[p * iy];
        s1 += x[(p + 1) * ix] * y[(p + 1) * iy];
        s2 += x[(p + 2) * ix] * y[(p + 2) * iy];
        s3 += x[(p + 3) * ix] * y[(p + 3) * iy];
    }
    for (; p < k; p++) s += x[p * ix] * y[p * iy];
    return (s + s1) + (s2 + s3);
}

/* Products where packing costs more than it saves (a row or a column of C, or a few thousand
 * multiply-adds in all): C's rows as sums of B's rows (B not transposed), else as dot
 * products of op(A)'s rows and op(B)'s columns. */
static void G(gemm_small)(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T *a,
                          int64_t lda, const T *b, int64_t ldb, T beta, T *c, int64_t ldc) {
    const int64_t ia = ta ? lda : 1; /* step of p along a row of op(A) */
    for (int64_t i = 0; i < m; i++) {
        const T *ai = a + (ta ? i : i * lda);
        T *ci = c + i * ldc;
        if (!tb && n > 1) {
            for (int64_t j = 0; j < n; j++) ci[j] = beta == 0 ? 0 : beta * ci[j];
            for (int64_t p = 0; p < k; p++) {
                const T x = ai[p * ia], *bp = b + p * ldb;
                for (int64_t j = 0; j < n; j++) ci[j] += x * bp[j];
            }
        } else {
            for (int64_t j = 0; j < n; j++) {
                const T d = G(dot)(ai, ia, b + (tb ? j * ldb : j), tb ? 1 : ldb, k);
                ci[j] = beta == 0 ? d : d + beta * ci[j];
            }
        }
    }
}

static void G(gemm)(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T *a, int64_t lda,
                    const T *b, int64_t ldb, T beta, T *c, int64_t ldc) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) { /* C = beta C, and beta 0 writes zeros whatever C held */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) c[i * ldc + j] = beta == 0 ? 0 : beta * c[i * ldc + j];
        return;
    }
    if (m == 1 || n == 1 || m * n * k <= 4096) {
        G(gemm_small)(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    /* blocks of equal size (k = 784: 4 x 196, not 3 x 256 and a pass of 16, whose C updates
     * and packing cost as much as a whole pass); kc a multiple of 8 (the packs' transposes) */
    int64_t kcb = gemm_balance(k, GEMM_KC, 8), mcb = gemm_balance(m, GEMM_MC, MR),
            ncb = gemm_balance(n, GEMM_NC, NR);
    /* the buffers sized to the problem */
    const int64_t kmax = gemm_min(k, kcb), mmax = (gemm_min(m, mcb) + MR - 1) / MR * MR,
                  nmax = (gemm_min(n, ncb) + NR - 1) / NR * NR;
    T *pa = cpu_scratch((size_t)(mmax * kmax + GEMM_SLACK) * sizeof(T));
    T *pb = cpu_scratch((size_t)(kmax * nmax) * sizeof(T));
    /* out of memory: one micro-panel of each, on the stack (slower, never wrong) */
    T sa[MR * 64 + GEMM_SLACK] __attribute__((aligned(64)));
    T sb[64 * NR] __attribute__((aligned(64)));
    const bool own = pa && pb;
    if (!own) {
        if (pa) cpu_scratch_free(pa);
        if (pb) cpu_scratch_free(pb);
        pa = sa;
        pb = sb;
        kcb = 64;
        mcb = MR;
        ncb = NR;
    }
    for (int64_t jc = 0; jc < n; jc += ncb) {
        const int64_t nc = gemm_min(ncb, n - jc);
        for (int64_t pc = 0; pc < k; pc += kcb) {
            const int64_t kc = gemm_min(kcb, k - pc);
            const T *bp = b + (tb ? jc * ldb + pc : pc * ldb + jc);
            for (int64_t ic = 0; ic < m; ic += mcb) {
                const int64_t mc = gemm_min(mcb, m - ic);
                G(pack_a)(ta, a + (ta ? pc * lda + ic : ic * lda + pc), lda, mc, kc, pa);
                for (int64_t jr = 0; jr < nc; jr += NR) {
                    /* B's micro-panels are packed as the first A block reaches them, so that
                     * the microkernel finds them in L1 or L2: B^T's one at a time, B's
                     * GEMM_PB at a time (rows of 4 lines read together: 1.0-1.2x on
                     * 16..128 x 1024 x 1024 nn in three A/B runs, the same elsewhere) */
                    if (ic == 0 && (tb || jr % (GEMM_PB * NR) == 0))
                        G(pack_b)(tb, bp + (tb ? jr * ldb : jr), ldb, kc,
                                  gemm_min(tb ? NR : GEMM_PB * NR, nc - jr), pb + jr * kc);
                    for (int64_t ir = 0; ir < mc; ir += MR) {
                        const int64_t mr = gemm_min(MR, mc - ir);
                        (mr > MRH ? G(kernel) : G(kernel_h))(kc, pa + ir * kc, pb + jr * kc,
                                                             c + (ic + ir) * ldc + jc + jr, ldc,
                                                             mr, gemm_min(NR, nc - jr),
                                                             pc == 0, beta);
                    }
                }
            }
        }
    }
    if (own) {
        cpu_scratch_free(pa);
        cpu_scratch_free(pb);
    }
}

#undef W
#undef NR
#undef MR
#undef MRH
#undef GEMM_PB
