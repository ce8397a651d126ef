/*
 * test_cpu_attention.c — the cpu backend's blocked attention kernels (sdpa, sdpa_backward)
 * against ref's, run in the same test on the same views, at every instruction-set level this
 * build and CPU have: f32, f64, f16, bf16; q, k, v contiguous, with heads split by a permute
 * (not contiguous), padded at an offset, and shared across the batch (stride 0); masks none,
 * bool broadcast over the batch, bool per batch broadcast over the queries (key padding),
 * float, a bool mask with a row that attends to nothing (NaN, as torch); causal with L < S,
 * L > S and L = S; dropout; sizes that are not multiples of the kernels' blocks (64) nor of
 * the vector width, one row and one key. Then, through the public API on the cpu device:
 * the fused path's numbers equal the composition's (matmul, softmax, em_dropout, matmul) with
 * dropout too, and none of it counts a fallback to ref.
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

#include "ember/backend.h"
#include "ember/ember.h"

#ifndef EMBER_TEST_HAVE_CPU
int main(void) {
    printf("test_cpu_attention: no cpu backend in this build: skipped\n");
    return 77;
}
#else
#include "backends/cpu/fallback.h"
#include "backends/cpu/isa.h"
#include "cpu_test_util.h"

static const em_backend_ops *REF;
static void *CTX;

static uint64_t rng = 0x2545f4914f6cdd1dull;
static double urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

typedef struct buf {
    void *p;
    size_t n;
    em_dtype dt;
} buf;

static buf mkbuf(em_dtype dt, size_t n, double lo, double hi) {
    buf b = {calloc(n ? n : 1, em_dtype_size(dt)), n, dt};
    assert_non_null(b.p);
    for (size_t i = 0; i < n; i++) ct_store(b.p, dt, i, lo + (hi - lo) * urand());
    return b;
}

static buf clone(const buf *a) {
    buf b = *a;
    size_t bytes = (a->n ? a->n : 1) * em_dtype_size(a->dt);
    b.p = malloc(bytes);
    assert_non_null(b.p);
    memcpy(b.p, a->p, bytes);
    return b;
}

static void free_buf(buf *b) {
    free(b->p);
    b->p = NULL;
}

/* layouts of a [B, H, R, C] operand */
enum { L_CONTIG, L_HEADS, L_PADDED, L_SHARED, L_COUNT };

static em_view mk4(buf *b, em_dtype dt, const int64_t sh[4], int lay, double lo, double hi) {
    em_view v;
    memset(&v, 0, sizeof v);
    v.dtype = dt;
    v.rank = 4;
    for (int d = 0; d < 4; d++) v.shape[d] = sh[d];
    const int64_t B = sh[0], H = sh[1], R = sh[2], C = sh[3];
    size_t n = (size_t)(B * H * R * C);
    switch (lay) {
    case L_CONTIG:
        v.strides[0] = H * R * C, v.strides[1] = R * C, v.strides[2] = C, v.strides[3] = 1;
        break;
    case L_HEADS: /* a [B, R, H, C] buffer permuted to [B, H, R, C] */
        v.strides[0] = R * H * C, v.strides[1] = C, v.strides[2] = H * C, v.strides[3] = 1;
        break;
    case L_PADDED: /* rows of C + 2 with a gap, elements 2 apart... at offset 5 */
        v.strides[3] = 2, v.strides[2] = 2 * C + 3, v.strides[1] = R * (2 * C + 3) + 1;
        v.strides[0] = H * v.strides[1];
        v.offset = 5;
        n = (size_t)(5 + B * v.strides[0]);
        break;
    default: /* one [R, C] shared by every batch and head */
        v.strides[0] = 0, v.strides[1] = 0, v.strides[2] = C, v.strides[3] = 1;
        n = (size_t)(R * C);
        break;
    }
    *b = mkbuf(dt, n, lo, hi);
    v.buf = b->p;
    return v;
}

static em_view dense4(buf *b, em_dtype dt, const int64_t sh[4], int rank) {
    em_view v;
    memset(&v, 0, sizeof v);
    v.dtype = dt;
    v.rank = rank;
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        v.shape[d] = sh[d];
        v.strides[d] = s;
        s *= sh[d];
    }
    *b = mkbuf(dt, (size_t)s, -9, 9);
    v.buf = b->p;
    return v;
}

/* masks of [B, H, L, S]: 0 none, 1 bool [L, S] shared, 2 bool [B, 1, 1, S] (key padding),
 * 3 float [L, S] per (b, h) padded, 4 bool [L, S] with row 0 all false */
static bool mk_mask(buf *b, em_view *v, int kind, em_dtype dt, const int64_t sh[4]) {
    const int64_t B = sh[0], H = sh[1], L = sh[2], S = sh[3];
    memset(v, 0, sizeof *v);
    v->rank = 4;
    for (int d = 0; d < 4; d++) v->shape[d] = sh[d];
    if (kind == 0) return false;
    if (kind == 3) {
        *v = mk4(b, dt, sh, L_PADDED, -2, 2);
        return true;
    }
    v->dtype = EM_BOOL;
    if (kind == 2) {
        v->strides[0] = S, v->strides[1] = 0, v->strides[2] = 0, v->strides[3] = 1;
        *b = mkbuf(EM_BOOL, (size_t)(B * S), 0, 1);
        for (int64_t i = 0; i < B * S; i++) ((uint8_t *)b->p)[i] = urand() < 0.7 || i % S == 0;
    } else {
        v->strides[0] = 0, v->strides[1] = 0, v->strides[2] = S, v->strides[3] = 1;
        *b = mkbuf(EM_BOOL, (size_t)(L * S), 0, 1);
        for (int64_t i = 0; i < L * S; i++)
            ((uint8_t *)b->p)[i] = kind == 4 && i < S ? 0 : (urand() < 0.7 || i % S == 0);
    }
    (void)H;
    v->buf = b->p;
    return true;
}

static double tol_of(em_dtype dt) {
    switch (dt) {
    case EM_F64: return 1e-9;
    case EM_F32: return 1e-5;
    case EM_F16: return 4e-3;
    case EM_BF16: return 2e-2;
    default: return 0;
    }
}

static void check_same(const char *what, const buf *got, const buf *want, double scale,
                       int level, int mode) {
    const double tol = tol_of(got->dt) * scale;
    for (size_t i = 0; i < got->n; i++) {
        double g = ct_load(got->p, got->dt, i), w = ct_load(want->p, want->dt, i);
        bool ok = (isnan(g) && isnan(w)) || g == w ||
                  (fabs(g - w) <= tol * (1 + fabs(w)) && !isnan(g) && !isnan(w));
        if (!ok)
            fail_msg("%s (%s, level %d, mode %d): element %zu: got %.9g, want %.9g", what,
                     em_dtype_name(got->dt), level, mode, i, g, w);
    }
}

static uint64_t fb_count(int c) {
    uint64_t n = 0;
    for (int d = 0; d < EM_DTYPE_COUNT; d++) n += cpu_fallback_count(c, (em_dtype)d);
    return n;
}

static void no_fallbacks(void) {
    for (int c = 0; cpu_fallback_case(c); c++)
        if (fb_count(c) != 0 && c != CPU_FB_COPY)
            fail_msg("cpu fell back to ref: %s (%s)", cpu_fallback_case(c)->slot,
                     cpu_fallback_case(c)->when);
}

static const em_dtype FLOATS[] = {EM_F32, EM_F64, EM_F16, EM_BF16};

/* B, H, L, S, E, Ev: odd sizes, blocks of 64 and around them, one row and one key */
static const int64_t SHAPES[][6] = {{2, 2, 5, 6, 4, 7}, {1, 2, 65, 130, 5, 3},
                                    {2, 1, 64, 64, 16, 16}, {1, 1, 1, 1, 1, 1},
                                    {1, 3, 130, 63, 32, 8}, {1, 1, 300, 300, 8, 9}};
#define NSHAPES 6

static void run_case(const cpu_kernels *K, int level, em_dtype dt, const int64_t *sh, int mode) {
    const int64_t B = sh[0], H = sh[1], L = sh[2], S = sh[3], E = sh[4], Ev = sh[5];
    const int64_t qs[4] = {B, H, L, E}, ks[4] = {B, H, S, E}, vs[4] = {B, H, S, Ev};
    const int64_t os[4] = {B, H, L, Ev}, ms[4] = {B, H, L, S};
    const bool causal = mode % 3 == 1;
    const double dropout = mode % 4 == 3 ? 0.3 : 0.0;
    const int mk = mode % 5;
    const double scale = mode % 2 ? 0.37 : 1.0 / sqrt((double)E);
    buf bq, bk, bv, bm = {0}, bo, bl, bg, bdq, bdk, bdv;
    em_view q = mk4(&bq, dt, qs, mode % L_COUNT, -2, 2);
    em_view k = mk4(&bk, dt, ks, (mode + 1) % L_COUNT, -2, 2);
    em_view v = mk4(&bv, dt, vs, (mode + 2) % L_COUNT, -2, 2);
    em_view m;
    const bool has_m = mk_mask(&bm, &m, mk, dt, ms);
    const em_dtype lt = dt == EM_F64 ? EM_F64 : EM_F32;
    em_view o = dense4(&bo, dt, os, 4), l = dense4(&bl, lt, os, 3);
    em_view g = mk4(&bg, dt, os, (mode + 3) % L_COUNT, -1, 1);
    em_view dq = dense4(&bdq, dt, qs, 4), dk = dense4(&bdk, dt, ks, 4),
            dv = dense4(&bdv, dt, vs, 4);
    buf wo = clone(&bo), wl = clone(&bl), wdq = clone(&bdq), wdk = clone(&bdk),
        wdv = clone(&bdv);
    em_view wov = o, wlv = l, wdqv = dq, wdkv = dk, wdvv = dv;
    wov.buf = wo.p, wlv.buf = wl.p, wdqv.buf = wdq.p, wdkv.buf = wdk.p, wdvv.buf = wdv.p;
    const em_view *pm = has_m ? &m : NULL;
    assert_int_equal(REF->sdpa(NULL, &wov, &wlv, &q, &k, &v, pm, causal, scale, dropout, 11),
                     EM_OK);
    assert_int_equal(K->sdpa(CTX, &o, &l, &q, &k, &v, pm, causal, scale, dropout, 11), EM_OK);
    check_same("sdpa out", &bo, &wo, 2, level, mode);
    check_same("sdpa lse", &bl, &wl, 2, level, mode);
    assert_int_equal(REF->sdpa_backward(NULL, &wdqv, &wdkv, &wdvv, &q, &k, &v, pm, &wov, &g,
                                        &wlv, causal, scale, dropout, 11),
                     EM_OK);
    assert_int_equal(K->sdpa_backward(CTX, &dq, &dk, &dv, &q, &k, &v, pm, &o, &g, &l, causal,
                                      scale, dropout, 11),
                     EM_OK);
    const double gs = dt == EM_F16 || dt == EM_BF16 ? 4 : 8;
    check_same("sdpa dq", &bdq, &wdq, gs, level, mode);
    check_same("sdpa dk", &bdk, &wdk, gs, level, mode);
    check_same("sdpa dv", &bdv, &wdv, gs, level, mode);
    free_buf(&bq), free_buf(&bk), free_buf(&bv), free_buf(&bo), free_buf(&bl), free_buf(&bg);
    free_buf(&bdq), free_buf(&bdk), free_buf(&bdv), free_buf(&wo), free_buf(&wl);
    free_buf(&wdq), free_buf(&wdk), free_buf(&wdv);
    if (has_m) free_buf(&bm);
}

static void kernels_vs_ref(void **state) {
    (void)state;
    cpu_fallback_reset();
    for (int lvl = 0; lvl <= cpu_isa_best(); lvl++) {
        const cpu_kernels *K = cpu_kernels_of(lvl);
        if (!K) continue;
        for (int t = 0; t < 4; t++)
            for (int s = 0; s < NSHAPES; s++)
                for (int mode = 0; mode < 12; mode++) {
                    if (s == NSHAPES - 1 && (t >= 2 || mode % 3)) continue; /* the long one */
                    run_case(K, lvl, FLOATS[t], SHAPES[s], mode);
                }
    }
    no_fallbacks();
}

/* causal with L != S is top-left aligned (torch's tril): query i sees keys 0..i */
static void causal_top_left(void **state) {
    (void)state;
    const int64_t sh[4] = {1, 1, 3, 2}, ksh[4] = {1, 1, 5, 2}, vsh[4] = {1, 1, 5, 1};
    float qd[6] = {0}, kd[10] = {0}, vd[5] = {1, 2, 3, 4, 5}, od[3], ld[3];
    em_view q = ct_dense(qd, EM_F32, 4, sh), k = ct_dense(kd, EM_F32, 4, ksh),
            v = ct_dense(vd, EM_F32, 4, vsh);
    const int64_t osh[4] = {1, 1, 3, 1};
    em_view o = ct_dense(od, EM_F32, 4, osh), l = ct_dense(ld, EM_F32, 3, osh);
    const cpu_kernels *K = cpu_kernels_of(cpu_isa_best());
    assert_int_equal(K->sdpa(CTX, &o, &l, &q, &k, &v, NULL, true, 1.0, 0.0, 0), EM_OK);
    /* zero scores: row i averages v[0..i] */
    assert_float_equal(od[0], 1.0, 1e-6);
    assert_float_equal(od[1], 1.5, 1e-6);
    assert_float_equal(od[2], 2.0, 1e-6);
    assert_float_equal(ld[2], log(3.0), 1e-6);
}

/* the public op on cpu: fused (dropout included) = the composition's numbers */
static em_status compose(const em_tensor *q, const em_tensor *k, const em_tensor *v,
                         const em_tensor *bmask, double p, uint64_t seed, em_tensor **out) {
    em_tensor *kt = NULL, *s = NULL, *ss = NULL, *hide = NULL, *sm = NULL, *a = NULL, *d = NULL;
    em_status st = em_transpose(k, -2, -1, &kt);
    if (st == EM_OK) st = em_matmul(q, kt, &s);
    if (st == EM_OK) st = em_mul_scalar(s, 1.0 / sqrt((double)em_tensor_shape(q)[3]), &ss);
    if (st == EM_OK) st = em_logical_not(bmask, &hide);
    if (st == EM_OK) st = em_masked_fill(ss, hide, -INFINITY, &sm);
    if (st == EM_OK) st = em_softmax(sm, -1, &a);
    if (st == EM_OK) st = em_dropout(a, p, true, seed, &d);
    if (st == EM_OK) st = em_matmul(d, v, out);
    em_tensor *all[] = {kt, s, ss, hide, sm, a, d};
    for (int i = 0; i < 7; i++) em_tensor_release(all[i]);
    return st;
}

static void fused_equals_composed(void **state) {
    (void)state;
    em_device cpu;
    assert_int_equal(em_device_parse("cpu", &cpu), EM_OK);
    const int64_t qs[4] = {2, 3, 70, 16}, ks[4] = {2, 3, 90, 16}, vs[4] = {2, 3, 90, 12};
    const int64_t ms[2] = {70, 90};
    em_tensor *q = NULL, *k = NULL, *v = NULL, *mu = NULL, *m = NULL;
    assert_int_equal(em_rand_normal(qs, 4, EM_F32, 0, 1, 1, cpu, &q), EM_OK);
    assert_int_equal(em_rand_normal(ks, 4, EM_F32, 0, 1, 2, cpu, &k), EM_OK);
    assert_int_equal(em_rand_normal(vs, 4, EM_F32, 0, 1, 3, cpu, &v), EM_OK);
    assert_int_equal(em_rand_uniform(ms, 2, EM_F32, 0, 1, 4, cpu, &mu), EM_OK);
    assert_int_equal(em_lt_scalar(mu, 0.8, &m), EM_OK);
    for (int t = 0; t < 2; t++) {
        const double p = t ? 0.25 : 0.0;
        em_tensor *a = NULL, *b = NULL;
        assert_int_equal(em_scaled_dot_product_attention(q, k, v, m, p, false, 0, 99, &a), EM_OK);
        assert_int_equal(compose(q, k, v, m, p, 99, &b), EM_OK);
        const int64_t n = em_tensor_numel(a);
        float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
        assert_int_equal(em_tensor_to_data(a, x, sizeof(float) * (size_t)n), EM_OK);
        assert_int_equal(em_tensor_to_data(b, y, sizeof(float) * (size_t)n), EM_OK);
        for (int64_t i = 0; i < n; i++)
            if (!(fabsf(x[i] - y[i]) <= 1e-5f * (1 + fabsf(y[i]))))
                fail_msg("dropout %g: element %lld: fused %.9g, composed %.9g", p, (long long)i,
                         x[i], y[i]);
        free(x), free(y);
        em_tensor_release(a), em_tensor_release(b);
    }
    em_tensor_release(q), em_tensor_release(k), em_tensor_release(v);
    em_tensor_release(mu), em_tensor_release(m);
}

static void integer_fallbacks(void **state) {
    (void)state;
    int32_t qd[4] = {1, 2, 3, 4}, od[4] = {0};
    float ld[2] = {0};
    const int64_t sh[2] = {2, 2}, ls[1] = {2};
    em_view q = ct_dense(qd, EM_I32, 2, sh), o = ct_dense(od, EM_I32, 2, sh),
            l = ct_dense(ld, EM_F32, 1, ls);
    cpu_fallback_reset();
    const cpu_kernels *K = cpu_kernels_of(cpu_isa_best());
    (void)K->sdpa(CTX, &o, &l, &q, &q, &q, NULL, false, 1.0, 0.0, 0);
    assert_int_equal(fb_count(CPU_FB_SDPA), 1);
    cpu_fallback_reset();
}

static int setup(void **state) {
    (void)state;
    REF = em_backend_get(EM_BACKEND_REF);
    const em_backend_ops *cpu = em_backend_get_native(EM_BACKEND_CPU);
    if (!REF || !cpu || cpu->open(0, &CTX) != EM_OK) return -1;
    cpu_fallback_reset();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(kernels_vs_ref),
        cmocka_unit_test(causal_top_left),
        cmocka_unit_test(fused_equals_composed),
        cmocka_unit_test(integer_fallbacks),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
#endif
