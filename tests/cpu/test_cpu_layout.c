/*
 * test_cpu_layout.c — the cpu backend's copy, fill, binary, binary_scalar, comparisons and
 * where against ref's kernels on the same views, for every dtype and every layout the
 * iteration claims: random shapes (odd sizes, size-1 and empty dims), operands permuted,
 * stepped, flipped (negative strides), broadcast (stride 0) and offset, strided outputs for
 * copy and fill, and the layouts of the models (a channel broadcast [N,C,H,W] x [1,C,1,1] with
 * W = 1..7, permute(0,2,1,3) + contiguous, a [T,T] mask over [B,H,T,T], 2-d transposes with
 * edges of tiles). Each case runs on both backends with outputs in pools that start equal;
 * the whole pools must match afterwards (floats within a few ulps, everything else bit for
 * bit), so a write outside the view is caught too. binary, binary_scalar and where run on
 * every instruction-set level this build and CPU have. At the end no case may have gone to
 * ref (the fallback counters of copy, fill, binary, binary_scalar and where are zero).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/cpu/fallback.h"
#include "backends/cpu/isa.h"
#include "ember/backend.h"
#include "ember/ember.h"

#include "cpu_test_util.h"

#define POOL 40000 /* elements a pool holds */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static int rndn(int n) { return (int)(rnd() % (uint32_t)n); }

static const em_dtype all_dt[] = {EM_F32, EM_F64, EM_F16, EM_BF16, EM_I64,
                                  EM_I32, EM_I16, EM_I8,  EM_U8,   EM_BOOL};
#define NDT (int)(sizeof all_dt / sizeof all_dt[0])

/* A random value for dt: small numbers, a few specials. */
static double value(em_dtype dt) {
    int r = rndn(64);
    if (ct_is_float(dt)) {
        if (r == 0) return NAN;
        if (r == 1) return INFINITY;
        if (r == 2) return -0.0;
        if (r == 3) return 0;
        if (r == 4) return 3e9; /* float -> int casts saturate and wrap */
        if (r == 5) return -1e20;
        return (rndn(8001) - 4000) / 997.0;
    }
    if (dt == EM_BOOL) return rndn(2);
    if (r < 3) { /* extremes: wrapping arithmetic */
        switch (dt) {
        case EM_I8: return r ? 127 : -128;
        case EM_U8: return r ? 255 : 0;
        case EM_I16: return r ? 32767 : -32768;
        case EM_I32: return r ? 2147483647.0 : -2147483648.0;
        default: return r ? 9.2e18 : -9.2e18;
        }
    }
    if (r < 8) return 0;
    return rndn(201) - 100 + (dt == EM_U8 ? 100 : 0);
}

static void fill_pool(void *p, em_dtype dt) {
    for (int64_t i = 0; i < POOL; i++) ct_store(p, dt, i, value(dt));
}

/* A view of `shape` in pool p: dims in a random order, some stepped by 2, some flipped,
 * some broadcast (bcast), an offset. Falls back to plainer layouts until it fits. */
static em_view make_view(void *p, em_dtype dt, int rank, const int64_t *shape, bool bcast,
                         bool plain) {
    for (int tries = 0;; tries++) {
        bool simple = plain || tries > 8;
        em_view v = {.buf = p, .dtype = dt, .rank = rank};
        int perm[EM_MAX_RANK];
        for (int d = 0; d < rank; d++) perm[d] = d;
        if (!simple)
            for (int d = rank - 1; d > 0; d--) {
                int k = rndn(d + 1), t = perm[d];
                perm[d] = perm[k];
                perm[k] = t;
            }
        int64_t cur = 1;
        for (int q = rank - 1; q >= 0; q--) {
            int d = perm[q];
            int64_t step = !simple && rndn(4) == 0 ? 2 : 1;
            v.shape[d] = shape[d];
            v.strides[d] = cur * step;
            cur *= step * (shape[d] ? shape[d] : 1);
        }
        int64_t off = simple ? rndn(2) : rndn(8);
        for (int d = 0; d < rank; d++) {
            if (bcast && rndn(5) == 0) v.strides[d] = 0;
            else if (!simple && rndn(5) == 0) {
                off += (shape[d] > 0 ? shape[d] - 1 : 0) * v.strides[d];
                v.strides[d] = -v.strides[d];
            }
        }
        v.offset = off;
        int64_t hi = off;
        for (int d = 0; d < rank; d++)
            if (v.strides[d] > 0 && shape[d] > 0) hi += (shape[d] - 1) * v.strides[d];
        if (hi < POOL) return v;
        assert_true(tries < 20);
    }
}

static void rand_shape(int *rank, int64_t *shape) {
    *rank = rndn(5);
    for (int d = 0; d < *rank; d++) {
        int r = rndn(16);
        shape[d] = r == 0 ? 1 : r == 1 && rndn(4) == 0 ? 0 : 1 + rndn(r < 8 ? 7 : 13);
    }
}

/* ---- the two sides ---- */

typedef struct side {
    unsigned char *pool[4]; /* out, then inputs */
} side;

static side S[2]; /* 0: cpu, 1: ref */
static const em_backend_ops *cpu_ops, *ref_ops;
static void *cpu_ctx, *ref_ctx;

static int setup(void **state) {
    (void)state;
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 4; k++) S[s].pool[k] = malloc(POOL * 8);
    cpu_ops = em_backend_get(EM_BACKEND_CPU);
    ref_ops = em_backend_get(EM_BACKEND_REF);
    if (!cpu_ops || !ref_ops) return -1;
    if (cpu_ops->open(0, &cpu_ctx) != EM_OK || ref_ops->open(0, &ref_ctx) != EM_OK) return -1;
    cpu_fallback_reset();
    return 0;
}

static int teardown(void **state) {
    (void)state;
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 4; k++) free(S[s].pool[k]);
    return 0;
}

/* Pools k of both sides get the same random contents of dtype dt. */
static void init_pool(int k, em_dtype dt) {
    fill_pool(S[0].pool[k], dt);
    memcpy(S[1].pool[k], S[0].pool[k], POOL * em_dtype_size(dt));
}

/* the view v moved to side s's pool k */
static em_view on(em_view v, int s, int k) {
    v.buf = S[s].pool[k];
    return v;
}

/* The out pools (index 0) of both sides agree: bit for bit, floats within tol (rel). */
static void check_out(em_dtype dt, double tol, const char *what) {
    size_t es = em_dtype_size(dt);
    if (!ct_is_float(dt) || tol == 0) {
        if (memcmp(S[0].pool[0], S[1].pool[0], POOL * es) != 0) {
            for (int64_t i = 0; i < POOL; i++)
                if (memcmp(S[0].pool[0] + i * es, S[1].pool[0] + i * es, es)) {
                    fail_msg("%s (%s): element %lld differs", what, em_dtype_name(dt),
                             (long long)i);
                }
        }
        return;
    }
    for (int64_t i = 0; i < POOL; i++) {
        double a = ct_load(S[0].pool[0], dt, i), b = ct_load(S[1].pool[0], dt, i);
        if (a != a && b != b) continue;
        if (a == b) continue;
        if (fabs(a - b) <= tol * fabs(b)) continue;
        fail_msg("%s (%s): element %lld: cpu %.9g, ref %.9g", what, em_dtype_name(dt),
                 (long long)i, a, b);
    }
}

static double tol_of(em_dtype dt, em_binary_op op) {
    bool exact = op != EM_BIN_POW && op != EM_BIN_REM && op != EM_BIN_ATAN2;
    switch (dt) {
    case EM_F32: return exact ? 0 : 1e-6;
    case EM_F64: return exact ? 0 : 1e-13;
    case EM_F16: return exact ? 0 : 2e-3;
    case EM_BF16: return exact ? 0 : 1.6e-2;
    default: return 0;
    }
}

static bool op_ok(em_binary_op op, em_dtype dt) {
    if (op == EM_BIN_AND || op == EM_BIN_OR || op == EM_BIN_XOR) return dt == EM_BOOL;
    if (op == EM_BIN_POW || op == EM_BIN_ATAN2) return ct_is_float(dt);
    if (dt == EM_BOOL) return op >= EM_BIN_EQ;
    return true;
}

/* ---- binary and comparisons ---- */

/* out (contiguous) = a op b on every level's kernels and ref, then compare. */
static void run_binary(em_binary_op op, em_dtype dt, int rank, const int64_t *shape,
                       const em_view *va, const em_view *vb, const char *what) {
    em_dtype odt = op >= EM_BIN_EQ && op <= EM_BIN_GE ? EM_BOOL : dt;
    em_view vo = make_view(NULL, odt, rank, shape, false, true);
    vo.offset = 0;
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        vo.strides[d] = s;
        s *= shape[d];
    }
    for (int level = 0; level < CPU_ISA_COUNT; level++) {
        const cpu_kernels *k = cpu_kernels_of(level);
        if (!k || level > cpu_isa_best()) continue;
        memset(S[0].pool[0], 0xA5, POOL * 8);
        memset(S[1].pool[0], 0xA5, POOL * 8);
        em_view o0 = on(vo, 0, 0), a0 = on(*va, 0, 1), b0 = on(*vb, 0, 2);
        em_view o1 = on(vo, 1, 0), a1 = on(*va, 1, 1), b1 = on(*vb, 1, 2);
        assert_int_equal(k->binary(cpu_ctx, op, &o0, &a0, &b0), EM_OK);
        assert_int_equal(ref_ops->binary(ref_ctx, op, &o1, &a1, &b1), EM_OK);
        check_out(odt, tol_of(dt, op), what);
        /* the same with b as a scalar (its first element) */
        if (vb->rank == rank) {
            double sv;
            {
                em_view one = *vb;
                one.rank = 0;
                em_view t = on(one, 1, 0);
                (void)t;
                const unsigned char *p = S[1].pool[2] + vb->offset * (int64_t)em_dtype_size(dt);
                switch (dt) {
                case EM_F32: sv = *(const float *)p; break;
                case EM_F64: sv = *(const double *)p; break;
                case EM_F16: sv = em_f16_to_f32(*(const uint16_t *)p); break;
                case EM_BF16: sv = em_bf16_to_f32(*(const uint16_t *)p); break;
                case EM_I64: sv = (double)*(const int64_t *)p; break;
                case EM_I32: sv = *(const int32_t *)p; break;
                case EM_I16: sv = *(const int16_t *)p; break;
                case EM_I8: sv = *(const int8_t *)p; break;
                default: sv = *(const uint8_t *)p; break;
                }
                if (dt == EM_I64 && fabs(sv) > 9e15) sv = 3; /* keep it exact in a double */
            }
            memset(S[0].pool[0], 0xA5, POOL * 8);
            memset(S[1].pool[0], 0xA5, POOL * 8);
            assert_int_equal(k->binary_scalar(cpu_ctx, op, &o0, &a0, sv), EM_OK);
            assert_int_equal(ref_ops->binary_scalar(ref_ctx, op, &o1, &a1, sv), EM_OK);
            check_out(odt, tol_of(dt, op), what);
        }
    }
}

static void binary_random(void **state) {
    (void)state;
    char what[160];
    for (int t = 0; t < NDT; t++) {
        em_dtype dt = all_dt[t];
        init_pool(1, dt);
        init_pool(2, dt);
        for (int op = 0; op < EM_BIN_COUNT; op++) {
            if (!op_ok((em_binary_op)op, dt)) continue;
            for (int trial = 0; trial < 12; trial++) {
                int64_t shape[EM_MAX_RANK];
                int rank;
                rand_shape(&rank, shape);
                em_view a = make_view(NULL, dt, rank, shape, true, false);
                em_view b = make_view(NULL, dt, rank, shape, true, false);
                snprintf(what, sizeof what, "binary op %d trial %d rank %d", op, trial, rank);
                run_binary((em_binary_op)op, dt, rank, shape, &a, &b, what);
            }
        }
    }
}

/* [N,C,H,W] op [1,C,1,1] and [1,C,1,1] op [N,C,H,W], W = 1..7; row broadcasts [M,K] op [K] */
static void binary_model_layouts(void **state) {
    (void)state;
    const em_dtype dts[] = {EM_F32, EM_F64, EM_F16, EM_BF16, EM_I32};
    const em_binary_op ops[] = {EM_BIN_ADD, EM_BIN_MUL, EM_BIN_SUB, EM_BIN_DIV, EM_BIN_GT};
    for (int t = 0; t < 5; t++) {
        em_dtype dt = dts[t];
        init_pool(1, dt);
        init_pool(2, dt);
        for (int w = 1; w <= 7; w++)
            for (int oi = 0; oi < 5; oi++) {
                int64_t shape[4] = {3, 5, 1 + w % 3, w};
                em_view a = make_view(NULL, dt, 4, shape, false, true), b = a;
                b.offset = 1;
                b.strides[0] = b.strides[2] = b.strides[3] = 0;
                b.strides[1] = 1;
                run_binary(ops[oi], dt, 4, shape, &a, &b, "channel broadcast");
                run_binary(ops[oi], dt, 4, shape, &b, &a, "channel broadcast (first)");
            }
        /* large enough for the pool to split rows: [2, 64, 9, 17] x [1, 64, 1, 1] */
        int64_t big[4] = {2, 64, 9, 17};
        em_view a = make_view(NULL, dt, 4, big, false, true), b = a;
        b.strides[0] = b.strides[2] = b.strides[3] = 0;
        b.strides[1] = 1;
        run_binary(EM_BIN_MUL, dt, 4, big, &a, &b, "channel broadcast, big");
        /* a transposed operand: [67, 91] + [91, 67]^T */
        int64_t sq[2] = {67, 91};
        em_view x = make_view(NULL, dt, 2, sq, false, true), y = x;
        y.strides[0] = 1;
        y.strides[1] = 67;
        run_binary(EM_BIN_ADD, dt, 2, sq, &x, &y, "transposed operand");
        run_binary(EM_BIN_ADD, dt, 2, sq, &y, &x, "transposed operand (first)");
        /* a row broadcast: [67, 91] op [91] */
        em_view r = x;
        r.strides[0] = 0;
        run_binary(EM_BIN_SUB, dt, 2, sq, &x, &r, "row broadcast");
        /* a column broadcast: [67, 91] op [67, 1] */
        em_view c = x;
        c.strides[1] = 0;
        c.strides[0] = 1;
        run_binary(EM_BIN_MAX, dt, 2, sq, &c, &x, "column broadcast");
    }
}

/* ---- where ---- */

static void run_where(em_dtype dt, int rank, const int64_t *shape, const em_view *vc,
                      const em_view *va, const em_view *vb, const char *what) {
    em_view vo = make_view(NULL, dt, rank, shape, false, true);
    for (int level = 0; level < CPU_ISA_COUNT; level++) {
        const cpu_kernels *k = cpu_kernels_of(level);
        if (!k || level > cpu_isa_best()) continue;
        memset(S[0].pool[0], 0x5A, POOL * 8);
        memset(S[1].pool[0], 0x5A, POOL * 8);
        em_view o0 = on(vo, 0, 0), c0 = on(*vc, 0, 3), a0 = on(*va, 0, 1), b0 = on(*vb, 0, 2);
        em_view o1 = on(vo, 1, 0), c1 = on(*vc, 1, 3), a1 = on(*va, 1, 1), b1 = on(*vb, 1, 2);
        assert_int_equal(k->where(cpu_ctx, &o0, &c0, &a0, &b0), EM_OK);
        assert_int_equal(ref_ops->where(ref_ctx, &o1, &c1, &a1, &b1), EM_OK);
        check_out(dt, 0, what);
    }
}

static void where_layouts(void **state) {
    (void)state;
    init_pool(3, EM_BOOL);
    for (int t = 0; t < NDT; t++) {
        em_dtype dt = all_dt[t];
        init_pool(1, dt);
        init_pool(2, dt);
        for (int trial = 0; trial < 40; trial++) {
            int64_t shape[EM_MAX_RANK];
            int rank;
            rand_shape(&rank, shape);
            em_view c = make_view(NULL, EM_BOOL, rank, shape, true, false);
            em_view a = make_view(NULL, dt, rank, shape, true, false);
            em_view b = make_view(NULL, dt, rank, shape, true, false);
            run_where(dt, rank, shape, &c, &a, &b, "where, random layout");
        }
        /* attention's causal mask: [T,T] over [B,H,T,T], the fill value broadcast */
        int64_t sh[4] = {2, 3, 37, 37};
        em_view x = make_view(NULL, dt, 4, sh, false, true), m = x, v = x;
        m.dtype = EM_BOOL;
        m.strides[0] = m.strides[1] = 0;
        m.strides[2] = 37;
        m.strides[3] = 1;
        for (int d = 0; d < 4; d++) v.strides[d] = 0;
        run_where(dt, 4, sh, &m, &v, &x, "masked_fill, [T,T] mask");
        run_where(dt, 4, sh, &m, &x, &v, "where, [T,T] mask, value second");
        /* a mask broadcast along the last dim: [B,H,T,1] */
        em_view m2 = x;
        m2.dtype = EM_BOOL;
        m2.strides[3] = 0;
        run_where(dt, 4, sh, &m2, &x, &v, "where, [B,H,T,1] mask");
    }
}

/* ---- copy ---- */

static void run_copy(em_dtype to, em_dtype from, int rank, const int64_t *shape,
                     const em_view *vo, const em_view *vi, const char *what) {
    memset(S[0].pool[0], 0x3C, POOL * 8);
    memset(S[1].pool[0], 0x3C, POOL * 8);
    em_view o0 = on(*vo, 0, 0), i0 = on(*vi, 0, 1), o1 = on(*vo, 1, 0), i1 = on(*vi, 1, 1);
    (void)rank;
    (void)shape;
    assert_int_equal(cpu_ops->copy(cpu_ctx, &o0, &i0), EM_OK);
    assert_int_equal(ref_ops->copy(ref_ctx, &o1, &i1), EM_OK);
    check_out(to, 0, what);
    (void)from;
}

static void copy_layouts(void **state) {
    (void)state;
    char what[160];
    for (int f = 0; f < NDT; f++) {
        em_dtype from = all_dt[f];
        init_pool(1, from);
        for (int t = 0; t < NDT; t++) {
            em_dtype to = all_dt[t];
            for (int trial = 0; trial < 25; trial++) {
                int64_t shape[EM_MAX_RANK];
                int rank;
                rand_shape(&rank, shape);
                em_view vi = make_view(NULL, from, rank, shape, true, trial < 3);
                em_view vo = make_view(NULL, to, rank, shape, false, trial < 6);
                snprintf(what, sizeof what, "copy %s -> %s, trial %d, rank %d",
                         em_dtype_name(from), em_dtype_name(to), trial, rank);
                run_copy(to, from, rank, shape, &vo, &vi, what);
            }
        }
        /* permute(0,2,1,3) of [B,T,H,D] and back; 2-d and 3-d transposes (tile edges) */
        int64_t bthd[4] = {2, 9, 3, 40};
        em_view x = make_view(NULL, from, 4, bthd, false, true);
        em_view p = x; /* [B,H,T,D] view of x */
        p.shape[1] = 3; p.shape[2] = 9;
        p.strides[1] = x.strides[2]; p.strides[2] = x.strides[1];
        em_view o = make_view(NULL, from, 4, p.shape, false, true);
        o.offset = 0;
        run_copy(from, from, 4, p.shape, &o, &p, "permute(0,2,1,3) + contiguous");
        int64_t mn[2] = {70, 45};
        em_view a = make_view(NULL, from, 2, mn, false, true), at = a;
        at.shape[0] = 45; at.shape[1] = 70;
        at.strides[0] = 1; at.strides[1] = 45;
        em_view ot = make_view(NULL, from, 2, at.shape, false, true);
        run_copy(from, from, 2, at.shape, &ot, &at, "2-d transpose");
        em_view ot2 = make_view(NULL, EM_F32, 2, at.shape, false, true);
        run_copy(EM_F32, from, 2, at.shape, &ot2, &at, "2-d transpose with a cast");
        int64_t nchw[4] = {2, 35, 6, 7}; /* NCHW -> NHWC */
        em_view c = make_view(NULL, from, 4, nchw, false, true), ch = c;
        int64_t nhwc[4] = {2, 6, 7, 35};
        for (int d = 0; d < 4; d++) ch.shape[d] = nhwc[d];
        ch.strides[0] = c.strides[0]; ch.strides[1] = c.strides[2];
        ch.strides[2] = c.strides[3]; ch.strides[3] = c.strides[1];
        em_view oc = make_view(NULL, from, 4, nhwc, false, true);
        run_copy(from, from, 4, nhwc, &oc, &ch, "NCHW -> NHWC");
        /* a strided output: writing into a slice [:, 3:3+45] of a [70, 60] buffer */
        em_view os = a;
        os.strides[0] = 60; os.offset = 3; os.shape[0] = 70; os.shape[1] = 45;
        run_copy(from, from, 2, mn, &os, &a, "copy into a slice");
        em_view osf = os; /* ... flipped */
        osf.strides[1] = -1; osf.offset = 3 + 44;
        run_copy(from, from, 2, mn, &osf, &a, "copy into a flipped slice");
    }
}

static void fill_layouts(void **state) {
    (void)state;
    const double vals[] = {0, -0.0, 1, -3.7, 2.5, 1e10, -1e10, 300, -129, NAN, INFINITY, 65504,
                           70000, 1e-8};
    for (int t = 0; t < NDT; t++) {
        em_dtype dt = all_dt[t];
        for (int trial = 0; trial < 40; trial++) {
            int64_t shape[EM_MAX_RANK];
            int rank;
            rand_shape(&rank, shape);
            em_view vo = make_view(NULL, dt, rank, shape, false, trial < 5);
            double v = vals[rndn((int)(sizeof vals / sizeof vals[0]))];
            memset(S[0].pool[0], 0x77, POOL * 8);
            memset(S[1].pool[0], 0x77, POOL * 8);
            em_view o0 = on(vo, 0, 0), o1 = on(vo, 1, 0);
            assert_int_equal(cpu_ops->fill(cpu_ctx, &o0, v), EM_OK);
            assert_int_equal(ref_ops->fill(ref_ctx, &o1, v), EM_OK);
            check_out(dt, 0, "fill");
        }
    }
}

/* The public path: em_contiguous of a permute, em_masked_fill with a broadcast mask, em_cast
 * of a transposed view, cat (strided outputs) — cpu against ref. */
static void public_ops(void **state) {
    (void)state;
    em_device dc, dr;
    assert_int_equal(em_device_parse("cpu", &dc), EM_OK);
    assert_int_equal(em_device_parse("ref", &dr), EM_OK);
    int64_t sh[4] = {2, 5, 3, 8};
    float data[240];
    for (int i = 0; i < 240; i++) data[i] = (float)((i * 37) % 101) / 7.0f;
    float got[2][240];
    for (int s = 0; s < 2; s++) {
        em_tensor *x, *p, *c;
        assert_int_equal(em_tensor_from_data(data, EM_F32, sh, 4, s ? dr : dc, &x), EM_OK);
        const int perm[4] = {0, 2, 1, 3};
        assert_int_equal(em_permute(x, perm, 4, &p), EM_OK);
        assert_int_equal(em_contiguous(p, &c), EM_OK);
        assert_int_equal(em_tensor_to_data(c, got[s], sizeof got[s]), EM_OK);
        em_tensor_release(x);
        em_tensor_release(p);
        em_tensor_release(c);
    }
    assert_memory_equal(got[0], got[1], sizeof got[0]);
    /* masked_fill of [2,5,8,8] with a [8,8] lower-triangular mask */
    int64_t sa[4] = {2, 5, 8, 8}, sm[2] = {8, 8};
    uint8_t mask[64];
    for (int i = 0; i < 64; i++) mask[i] = (i % 8) > (i / 8);
    float d2[640];
    for (int i = 0; i < 640; i++) d2[i] = (float)i;
    float g2[2][640];
    for (int s = 0; s < 2; s++) {
        em_tensor *x, *m, *o;
        assert_int_equal(em_tensor_from_data(d2, EM_F32, sa, 4, s ? dr : dc, &x), EM_OK);
        assert_int_equal(em_tensor_from_data(mask, EM_BOOL, sm, 2, s ? dr : dc, &m), EM_OK);
        assert_int_equal(em_masked_fill(x, m, -INFINITY, &o), EM_OK);
        assert_int_equal(em_tensor_to_data(o, g2[s], sizeof g2[s]), EM_OK);
        em_tensor_release(x);
        em_tensor_release(m);
        em_tensor_release(o);
    }
    assert_memory_equal(g2[0], g2[1], sizeof g2[0]);
}

static void no_fallbacks(void **state) {
    (void)state;
    const int cases[] = {CPU_FB_COPY, CPU_FB_FILL, CPU_FB_BINARY, CPU_FB_BINARY_SCALAR,
                         CPU_FB_WHERE};
    for (int c = 0; c < 5; c++)
        for (int d = 0; d < EM_DTYPE_COUNT; d++)
            if (cpu_fallback_count(cases[c], (em_dtype)d))
                fail_msg("%s ran ref's kernel for %s", cpu_fallback_case(cases[c])->slot,
                         em_dtype_name((em_dtype)d));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(binary_random), cmocka_unit_test(binary_model_layouts),
        cmocka_unit_test(where_layouts), cmocka_unit_test(copy_layouts),
        cmocka_unit_test(fill_layouts),  cmocka_unit_test(public_ops),
        cmocka_unit_test(no_fallbacks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
