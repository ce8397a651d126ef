/*
 * test_random.c — the Philox-based random ops (em_rand_uniform, em_rand_normal,
 * em_rand_bernoulli) and em_dropout on ref: determinism per seed, the statistics of 1e5
 * samples, and exact values that pin the counter-to-value mapping documented in
 * src/backends/ref/random.c.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ember/ember.h"

#define NSAMPLES 100000

static em_device ref_dev(void) {
    em_device d = {EM_BACKEND_REF, 0, false, EM_CKPT_NONE};
    return d;
}

/* The n values of t as doubles (t is f32 or f64); caller frees. */
static double *values(const em_tensor *t, int64_t n) {
    assert_int_equal(em_tensor_numel(t), n);
    double *v = malloc((size_t)n * sizeof *v);
    assert_non_null(v);
    if (em_tensor_dtype(t) == EM_F64) {
        assert_int_equal(em_tensor_to_data(t, v, (size_t)n * sizeof *v), EM_OK);
    } else {
        float *f = malloc((size_t)n * sizeof *f);
        assert_non_null(f);
        assert_int_equal(em_tensor_to_data(t, f, (size_t)n * sizeof *f), EM_OK);
        for (int64_t i = 0; i < n; i++) v[i] = f[i];
        free(f);
    }
    return v;
}

static void mean_var(const double *v, int64_t n, double *mean, double *var) {
    double m = 0, s = 0;
    for (int64_t i = 0; i < n; i++) m += v[i];
    m /= (double)n;
    for (int64_t i = 0; i < n; i++) s += (v[i] - m) * (v[i] - m);
    *mean = m;
    *var = s / (double)n;
}

/* One seed gives the same numbers every time; another seed gives other numbers. */
static void test_determinism(void **state) {
    (void)state;
    const int64_t shape[2] = {25, 40};
    em_tensor *a = NULL, *b = NULL, *c = NULL;
    assert_int_equal(em_rand_uniform(shape, 2, EM_F32, 0, 1, 1234, ref_dev(), &a), EM_OK);
    assert_int_equal(em_rand_uniform(shape, 2, EM_F32, 0, 1, 1234, ref_dev(), &b), EM_OK);
    assert_int_equal(em_rand_uniform(shape, 2, EM_F32, 0, 1, 1235, ref_dev(), &c), EM_OK);
    double *va = values(a, 1000), *vb = values(b, 1000), *vc = values(c, 1000);
    int same = 0;
    for (int i = 0; i < 1000; i++) {
        assert_true(va[i] == vb[i]);
        same += va[i] == vc[i];
    }
    assert_true(same < 10);
    free(va), free(vb), free(vc);
    em_tensor_release(a), em_tensor_release(b), em_tensor_release(c);

    /* The seed's high word is part of the key as well. */
    assert_int_equal(em_rand_normal(shape, 2, EM_F64, 0, 1, 7, ref_dev(), &a), EM_OK);
    assert_int_equal(em_rand_normal(shape, 2, EM_F64, 0, 1, 7 | (1ull << 32), ref_dev(), &b),
                     EM_OK);
    va = values(a, 1000), vb = values(b, 1000);
    same = 0;
    for (int i = 0; i < 1000; i++) same += va[i] == vb[i];
    assert_true(same < 10);
    free(va), free(vb);
    em_tensor_release(a), em_tensor_release(b);
}

/* Uniform in [lo, hi): every value in range, mean (lo+hi)/2 and variance (hi-lo)^2/12. */
static void test_uniform_stats(void **state) {
    (void)state;
    const int64_t n = NSAMPLES;
    const double lo = -2, hi = 3;
    em_tensor *t = NULL;
    assert_int_equal(em_rand_uniform(&n, 1, EM_F64, lo, hi, 99, ref_dev(), &t), EM_OK);
    double *v = values(t, n), m, var;
    for (int64_t i = 0; i < n; i++) assert_true(v[i] >= lo && v[i] < hi);
    mean_var(v, n, &m, &var);
    const double want_var = (hi - lo) * (hi - lo) / 12;
    assert_true(fabs(m - 0.5) < 5 * sqrt(want_var / (double)n)); /* 5 sigma */
    assert_true(fabs(var / want_var - 1) < 0.02);
    free(v);
    em_tensor_release(t);
}

/* Normal: mean and std of 1e5 samples. */
static void test_normal_stats(void **state) {
    (void)state;
    const int64_t shape[2] = {400, 250};
    em_tensor *t = NULL;
    assert_int_equal(em_rand_normal(shape, 2, EM_F32, 1.5, 2.0, 2024, ref_dev(), &t), EM_OK);
    double *v = values(t, NSAMPLES), m, var;
    mean_var(v, NSAMPLES, &m, &var);
    assert_true(fabs(m - 1.5) < 5 * 2.0 / sqrt(NSAMPLES));
    assert_true(fabs(sqrt(var) / 2.0 - 1) < 0.02);
    /* Box-Muller with u1 in (0, 1] never gives an infinity. */
    for (int64_t i = 0; i < NSAMPLES; i++) assert_true(isfinite(v[i]));
    free(v);
    em_tensor_release(t);
}

/* Bernoulli: values are 0 or 1 at rate p, in float, int and bool dtypes alike. */
static void test_bernoulli_rate(void **state) {
    (void)state;
    const int64_t n = NSAMPLES;
    const double p = 0.3;
    em_tensor *t = NULL, *ti = NULL, *tb = NULL;
    assert_int_equal(em_rand_bernoulli(&n, 1, EM_F64, p, 5, ref_dev(), &t), EM_OK);
    assert_int_equal(em_rand_bernoulli(&n, 1, EM_I64, p, 5, ref_dev(), &ti), EM_OK);
    assert_int_equal(em_rand_bernoulli(&n, 1, EM_BOOL, p, 5, ref_dev(), &tb), EM_OK);
    double *v = values(t, n);
    int64_t *vi = malloc((size_t)n * sizeof *vi);
    uint8_t *vb = malloc((size_t)n);
    assert_non_null(vi);
    assert_non_null(vb);
    assert_int_equal(em_tensor_to_data(ti, vi, (size_t)n * sizeof *vi), EM_OK);
    assert_int_equal(em_tensor_to_data(tb, vb, (size_t)n), EM_OK);
    int64_t ones = 0;
    for (int64_t i = 0; i < n; i++) {
        assert_true(v[i] == 0 || v[i] == 1);
        assert_true(vi[i] == (int64_t)v[i] && vb[i] == (uint8_t)v[i]);
        ones += v[i] == 1;
    }
    assert_true(fabs((double)ones / (double)n - p) < 5 * sqrt(p * (1 - p) / (double)n));
    free(v), free(vi), free(vb);
    em_tensor_release(t), em_tensor_release(ti), em_tensor_release(tb);
}

/* Exact values. They come from the Python Philox-4x32-10 of
 * tests/conformance/cases/nn.py (p_uniform / p_normal / p_bernoulli), which is checked there
 * against the Random123 known-answer vectors. */
static void test_exact_values(void **state) {
    (void)state;
    em_tensor *t = NULL;
    /* Seed 0, elements 0..3: the words of Philox(counter 0, key 0) = 6627e8d5 e169c58d
     * bc57ac4c 9b00dbd8, each >> 8, times 2^-24. */
    const int64_t n4 = 4;
    assert_int_equal(em_rand_uniform(&n4, 1, EM_F64, 0, 1, 0, ref_dev(), &t), EM_OK);
    double *v = values(t, 4);
    const double kat[4] = {0x6627e8 / 16777216.0, 0xe169c5 / 16777216.0,
                           0xbc57ac / 16777216.0, 0x9b00db / 16777216.0};
    const double kat_py[4] = {0.3990464210510254, 0.8805201649665833, 0.7357127666473389,
                              0.6054818034172058};
    for (int i = 0; i < 4; i++) {
        assert_true(v[i] == kat[i]);
        assert_true(v[i] == kat_py[i]);
    }
    free(v);
    em_tensor_release(t);

    /* uniform [-1, 3), seed 42, f64 and f32 (these values are exact in f32 too). */
    const double u42[6] = {1.4518394470214844, 0.8743460178375244, -0.7070732116699219,
                           0.3634459972381592, 2.9508745670318604, 0.30825328826904297};
    const int64_t s23[2] = {2, 3};
    for (int k = 0; k < 2; k++) {
        assert_int_equal(
            em_rand_uniform(s23, 2, k ? EM_F32 : EM_F64, -1, 3, 42, ref_dev(), &t), EM_OK);
        v = values(t, 6);
        for (int i = 0; i < 6; i++) assert_true(v[i] == u42[i]);
        free(v);
        em_tensor_release(t);
    }

    /* uniform [0, 1), seed 2^40 + 7: the key's high word at work. */
    const double ubig[5] = {0.20300090312957764, 0.95677649974823, 0.04486304521560669,
                            0.6159486174583435, 0.3672235608100891};
    const int64_t n5 = 5;
    assert_int_equal(em_rand_uniform(&n5, 1, EM_F64, 0, 1, (1ull << 40) + 7, ref_dev(), &t),
                     EM_OK);
    v = values(t, 5);
    for (int i = 0; i < 5; i++) assert_true(v[i] == ubig[i]);
    free(v);
    em_tensor_release(t);

    /* normal: libm's log/cos may differ in the last ulp between platforms, hence 1e-14. */
    const double n1[4] = {-0.1650469297113944, 1.584493897032317, -0.6218669617585789,
                          -0.16403050725716284};
    assert_int_equal(em_rand_normal(&n4, 1, EM_F64, 0, 1, 1, ref_dev(), &t), EM_OK);
    v = values(t, 4);
    for (int i = 0; i < 4; i++) assert_true(fabs(v[i] - n1[i]) <= 1e-14 * fabs(n1[i]));
    free(v);
    em_tensor_release(t);
    const double nbig[3] = {1.8938219271596761, -0.23115400603400538, 3.2493522514589523};
    const int64_t n3 = 3;
    assert_int_equal(em_rand_normal(&n3, 1, EM_F64, 2, 3, (1ull << 40) + 7, ref_dev(), &t),
                     EM_OK);
    v = values(t, 3);
    for (int i = 0; i < 3; i++) assert_true(fabs(v[i] - nbig[i]) <= 1e-14 * fabs(nbig[i]));
    free(v);
    em_tensor_release(t);

    /* bernoulli p = 0.3, seed 5. */
    const int64_t b5[16] = {0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1};
    const int64_t n16 = 16;
    int64_t got[16];
    assert_int_equal(em_rand_bernoulli(&n16, 1, EM_I64, 0.3, 5, ref_dev(), &t), EM_OK);
    assert_int_equal(em_tensor_to_data(t, got, sizeof got), EM_OK);
    for (int i = 0; i < 16; i++) assert_int_equal(got[i], b5[i]);
    em_tensor_release(t);
}

/* Dropout keeps exactly where bernoulli(1 - p) gives 1 and scales the kept by 1/(1-p). */
static void test_dropout(void **state) {
    (void)state;
    const int64_t n = 10000;
    const double p = 0.25;
    em_tensor *x = NULL, *y = NULL, *mask = NULL;
    assert_int_equal(em_full(&n, 1, 2.0, EM_F64, ref_dev(), &x), EM_OK);
    assert_int_equal(em_dropout(x, p, true, 77, &y), EM_OK);
    assert_int_equal(em_rand_bernoulli(&n, 1, EM_F64, 1 - p, 77, ref_dev(), &mask), EM_OK);
    double *vy = values(y, n), *vm = values(mask, n);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
        assert_true(vy[i] == (vm[i] == 1 ? 2.0 / 0.75 : 0.0));
        kept += vm[i] == 1;
    }
    assert_true(fabs((double)kept / (double)n - 0.75) < 5 * sqrt(0.75 * 0.25 / (double)n));
    free(vy), free(vm);
    em_tensor_release(y), em_tensor_release(mask);

    /* Not training, or p == 0: the same tensor back. p == 1: zeros. */
    assert_int_equal(em_dropout(x, p, false, 77, &y), EM_OK);
    assert_ptr_equal(y, x);
    em_tensor_release(y);
    assert_int_equal(em_dropout(x, 0.0, true, 77, &y), EM_OK);
    assert_ptr_equal(y, x);
    em_tensor_release(y);
    assert_int_equal(em_dropout(x, 1.0, true, 77, &y), EM_OK);
    vy = values(y, n);
    for (int64_t i = 0; i < n; i++) assert_true(vy[i] == 0.0);
    free(vy);
    em_tensor_release(y);
    em_tensor_release(x);
}

/* Bad arguments fail with a status and leave *out alone. */
static void test_errors(void **state) {
    (void)state;
    em_tensor *sentinel = (em_tensor *)(uintptr_t)0x5e5e5e50u, *o = sentinel;
    const int64_t n = 3, neg = -1;
    em_device bad = {EM_BACKEND_VULKAN, 7, false, EM_CKPT_NONE};
    assert_int_equal(em_rand_uniform(&n, 1, EM_I32, 0, 1, 0, ref_dev(), &o), EM_ERR_DTYPE);
    assert_int_equal(em_rand_uniform(&n, 1, EM_F32, 1, 0, 0, ref_dev(), &o), EM_ERR_ARG);
    assert_int_equal(em_rand_uniform(&n, 1, EM_F32, 0, INFINITY, 0, ref_dev(), &o), EM_ERR_ARG);
    assert_int_equal(em_rand_uniform(&neg, 1, EM_F32, 0, 1, 0, ref_dev(), &o), EM_ERR_ARG);
    assert_int_equal(em_rand_uniform(NULL, 1, EM_F32, 0, 1, 0, ref_dev(), &o), EM_ERR_ARG);
    assert_int_equal(em_rand_uniform(&n, 1, EM_F32, 0, 1, 0, ref_dev(), NULL), EM_ERR_ARG);
    assert_int_equal(em_rand_uniform(&n, 1, EM_F32, 0, 1, 0, bad, &o), EM_ERR_DEVICE);
    assert_int_equal(em_rand_normal(&n, 1, EM_F64, 0, -1, 0, ref_dev(), &o), EM_ERR_ARG);
    assert_int_equal(em_rand_normal(&n, 1, EM_F64, NAN, 1, 0, ref_dev(), &o), EM_ERR_ARG);
    assert_int_equal(em_rand_normal(&n, 1, EM_BOOL, 0, 1, 0, ref_dev(), &o), EM_ERR_DTYPE);
    assert_int_equal(em_rand_bernoulli(&n, 1, EM_F32, NAN, 0, ref_dev(), &o), EM_ERR_ARG);
    assert_int_equal(em_rand_bernoulli(&n, 1, EM_F32, -0.5, 0, ref_dev(), &o), EM_ERR_ARG);
    assert_int_equal(em_rand_bernoulli(&n, 1, EM_Q8, 0.5, 0, ref_dev(), &o), EM_ERR_DTYPE);
    assert_int_equal(em_rand_bernoulli(&n, 1, (em_dtype)99, 0.5, 0, ref_dev(), &o),
                     EM_ERR_DTYPE);
    assert_ptr_equal(o, sentinel);
    assert_true(strstr(em_last_error(), "em_rand_bernoulli") != NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_determinism),   cmocka_unit_test(test_uniform_stats),
        cmocka_unit_test(test_normal_stats),  cmocka_unit_test(test_bernoulli_rate),
        cmocka_unit_test(test_exact_values),  cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
