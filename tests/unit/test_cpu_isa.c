/*
 * test_cpu_isa.c — the cpu backend's instruction-set levels (src/backends/cpu/isa.h):
 *   - the rule that turns EMBER_CPU_ISA into a level (auto, each level, a level above what the
 *     CPU has, unknown values: never an error, a note when the answer differs);
 *   - this process runs the level its environment asks for (ctest runs it again under
 *     EMBER_CPU_ISA=portable, avx2, avx512 and an unknown value);
 *   - every level compiled into the build and supported by this CPU gives the answers of the
 *     portable level, kernel by kernel (exp, sigmoid, add with broadcast, a comparison, sum,
 *     argmax, softmax, layer_norm, max and avg pooling, conv2d);
 *   - the OpenBLAS kernel warning (pre-AVX2 kernel on an AVX2 / AVX-512 CPU);
 *   - ops large enough to be split over the thread pool, from three threads at once (the
 *     pool's busy fallback), for the ThreadSanitizer build.
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ember/ember.h"

#include "../cpu/cpu_test_util.h"

#ifndef EMBER_TEST_HAVE_CPU
int main(void) {
    printf("test_cpu_isa: no cpu backend in this build: skipped\n");
    return 77;
}
#else
#include "backends/cpu/isa.h"

static void choose_rule(void **state) {
    (void)state;
    char note[256];
    /* unset, empty, auto: the best */
    assert_int_equal(cpu_isa_choose(NULL, CPU_ISA_AVX2, note, sizeof note), CPU_ISA_AVX2);
    assert_string_equal(note, "");
    assert_int_equal(cpu_isa_choose("", CPU_ISA_AVX512, note, sizeof note), CPU_ISA_AVX512);
    assert_int_equal(cpu_isa_choose("auto", CPU_ISA_PORTABLE, note, sizeof note),
                     CPU_ISA_PORTABLE);
    assert_int_equal(cpu_isa_choose("AUTO", CPU_ISA_AVX2, note, sizeof note), CPU_ISA_AVX2);
    assert_string_equal(note, "");
    /* each level at or below the best, any case */
    assert_int_equal(cpu_isa_choose("portable", CPU_ISA_AVX512, note, sizeof note),
                     CPU_ISA_PORTABLE);
    assert_int_equal(cpu_isa_choose("avx2", CPU_ISA_AVX512, note, sizeof note), CPU_ISA_AVX2);
    assert_int_equal(cpu_isa_choose("AVX512", CPU_ISA_AVX512, note, sizeof note),
                     CPU_ISA_AVX512);
    assert_int_equal(cpu_isa_choose("avx2", CPU_ISA_AVX2, note, sizeof note), CPU_ISA_AVX2);
    assert_string_equal(note, "");
    /* above the best: the best, with a note */
    assert_int_equal(cpu_isa_choose("avx512", CPU_ISA_AVX2, note, sizeof note), CPU_ISA_AVX2);
    assert_non_null(strstr(note, "EMBER_CPU_ISA=avx512"));
    assert_non_null(strstr(note, "AVX-512F"));
    assert_non_null(strstr(note, "using avx2"));
    assert_int_equal(cpu_isa_choose("avx2", CPU_ISA_PORTABLE, note, sizeof note),
                     CPU_ISA_PORTABLE);
    assert_non_null(strstr(note, "using portable"));
    /* unknown values (also a known name with a tail, a very long value): auto, with a note */
    const char *bad[] = {"fast", "avx", "avx5120", "avx2 ", "x86-64-v3",
                         "avx512avx512avx512avx512avx512avx512avx512avx512avx512avx512"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(cpu_isa_choose(bad[i], CPU_ISA_AVX2, note, sizeof note), CPU_ISA_AVX2);
        assert_non_null(strstr(note, "is not auto, portable, avx2 or avx512"));
    }
    /* a NULL note, a tiny one, an out-of-range best */
    assert_int_equal(cpu_isa_choose("avx512", CPU_ISA_PORTABLE, NULL, 0), CPU_ISA_PORTABLE);
    char tiny[4];
    assert_int_equal(cpu_isa_choose("bogus", CPU_ISA_AVX2, tiny, sizeof tiny), CPU_ISA_AVX2);
    assert_int_equal(strlen(tiny), 3);
    assert_int_equal(cpu_isa_choose(NULL, 7, note, sizeof note), CPU_ISA_PORTABLE);
}

/* This process runs what EMBER_CPU_ISA asks for, as far as the CPU allows. */
static void process_level(void **state) {
    (void)state;
    const int best = cpu_isa_best(), level = cpu_isa();
    assert_in_range(best, CPU_ISA_PORTABLE, CPU_ISA_COUNT - 1);
    assert_in_range(level, CPU_ISA_PORTABLE, best);
    assert_int_equal(level, cpu_isa_choose(getenv("EMBER_CPU_ISA"), best, NULL, 0));
    assert_non_null(cpu_kernels_of(level));
    assert_non_null(cpu_kernels_of(best));
    char line[320];
    cpu_isa_describe(line, sizeof line);
    assert_int_equal(strncmp(line, cpu_isa_name(level), strlen(cpu_isa_name(level))), 0);
    const char *env = getenv("EMBER_CPU_ISA");
    char note[256];
    cpu_isa_choose(env, best, note, sizeof note);
    if (note[0]) assert_non_null(strstr(line, note)); /* the reason is shown */
    print_message("level %s, best %s (EMBER_CPU_ISA=%s)\n", cpu_isa_name(level),
                  cpu_isa_name(best), env ? env : "(unset)");
    /* the public path runs too */
    em_device dev;
    assert_int_equal(em_device_parse("cpu", &dev), EM_OK);
    const float xd[4] = {-1, 0, 1, 2};
    const int64_t shape[1] = {4};
    em_tensor *x = NULL, *y = NULL;
    assert_int_equal(em_tensor_from_data(xd, EM_F32, shape, 1, dev, &x), EM_OK);
    assert_int_equal(em_exp(x, &y), EM_OK);
    float yd[4];
    assert_int_equal(em_tensor_to_data(y, yd, sizeof yd), EM_OK);
    for (int i = 0; i < 4; i++) assert_true(fabsf(yd[i] - expf(xd[i])) <= 1e-6f * expf(xd[i]));
    em_tensor_release(x), em_tensor_release(y);
}

/* ---- every level against portable, kernel by kernel ---- */

static uint64_t rng = 88172645463325252ull;
static float frand(void) { /* xorshift in [-2, 2) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 4.0 - 2.0);
}

/* max |a - b| / (1 + |b|) over n floats; NaN where exactly one is NaN */
static double rel_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) {
            if (isnan(a[i]) != isnan(b[i])) return NAN;
            continue;
        }
        double d = fabs((double)a[i] - (double)b[i]) / (1 + fabs((double)b[i]));
        if (d > m) m = d;
    }
    return m;
}

enum { NX = 2 * 8 * 30 * 30 };

static void levels_agree(void **state) {
    (void)state;
    const int best = cpu_isa_best();
    const cpu_kernels *ref = cpu_kernels_of(CPU_ISA_PORTABLE);
    assert_non_null(ref);
    static float x[NX], x2[NX], w[16 * 8 * 3 * 3], bias[16];
    for (int i = 0; i < NX; i++) x[i] = frand(), x2[i] = frand();
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) w[i] = frand();
    for (int i = 0; i < 16; i++) bias[i] = frand();
    x[17] = NAN; /* NaN handling must agree too */
    static float outs[2][NX * 2];
    static int64_t idx[2][NX];
    static uint8_t masks[2][NX];
    int tested = 0;
    for (int level = CPU_ISA_PORTABLE + 1; level <= best; level++) {
        const cpu_kernels *k = cpu_kernels_of(level);
        if (!k) continue;
        tested++;
        assert_int_equal(k->isa, level);
        const int64_t flat[1] = {NX}, rows[2] = {60, NX / 60}, row1[2] = {1, NX / 60};
        const int64_t img[4] = {2, 8, 30, 30}, wsh[4] = {16, 8, 3, 3}, bsh[1] = {16};
        for (int op = 0; op < 12; op++) {
            for (int side = 0; side < 2; side++) {
                const cpu_kernels *t = side ? ref : k;
                float *o = outs[side];
                memset(o, 0, sizeof outs[side]);
                em_view vx = ct_dense(x, EM_F32, 1, flat), vo = ct_dense(o, EM_F32, 1, flat);
                em_view rx = ct_dense(x, EM_F32, 2, rows), ro = ct_dense(o, EM_F32, 2, rows);
                em_view ix = ct_dense(x, EM_F32, 4, img);
                em_status s = EM_OK;
                switch (op) {
                case 0: s = t->unary(NULL, EM_UN_EXP, &vo, &vx, NULL); break;
                case 1: s = t->unary(NULL, EM_UN_SIGMOID, &vo, &vx, NULL); break;
                case 2: { /* rows + a broadcast row */
                    em_view b = ct_dense(x2, EM_F32, 2, row1);
                    b.strides[0] = 0;
                    b.shape[0] = rows[0];
                    s = t->binary(NULL, EM_BIN_ADD, &ro, &rx, &b);
                    break;
                }
                case 3: {
                    em_view m = ct_dense(masks[side], EM_BOOL, 1, flat),
                            b = ct_dense(x2, EM_F32, 1, flat);
                    s = t->binary(NULL, EM_BIN_LT, &m, &vx, &b);
                    for (int i = 0; i < NX; i++) o[i] = masks[side][i];
                    break;
                }
                case 4: {
                    const int64_t r1[1] = {rows[0]};
                    em_view so = ct_dense(o, EM_F32, 1, r1);
                    s = t->reduce(NULL, EM_RED_SUM, &so, &rx, 1, NULL);
                    break;
                }
                case 5: {
                    const int64_t r1[1] = {rows[1]};
                    em_view ai = ct_dense(idx[side], EM_I64, 1, r1);
                    s = t->reduce(NULL, EM_RED_ARGMAX, &ai, &rx, 0, NULL);
                    for (int64_t i = 0; i < rows[1]; i++) o[i] = (float)idx[side][i];
                    break;
                }
                case 6: s = t->softmax(NULL, &ro, &rx, 1, false); break;
                case 7: s = t->softmax(NULL, &ro, &rx, 0, true); break;
                case 8: s = t->layer_norm(NULL, &ro, &rx, NULL, NULL, rows[1], 1e-5); break;
                case 9: { /* 2x2 max pooling with indices */
                    const int64_t osh[4] = {2, 8, 15, 15};
                    em_view po = ct_dense(o, EM_F32, 4, osh),
                            pi = ct_dense(idx[side], EM_I64, 4, osh);
                    em_pool_args a = {{2, 2}, {2, 2}, {0, 0}, {1, 1}, false};
                    s = t->max_pool2d(NULL, &po, &pi, &ix, &a);
                    for (int i = 0; i < 2 * 8 * 15 * 15; i++) o[NX + i] = (float)idx[side][i];
                    break;
                }
                case 10: { /* 3x3 / 2 average pooling, padded */
                    const int64_t osh[4] = {2, 8, 15, 15};
                    em_view po = ct_dense(o, EM_F32, 4, osh);
                    em_pool_args a = {{3, 3}, {2, 2}, {1, 1}, {1, 1}, false};
                    s = t->avg_pool2d(NULL, &po, &ix, &a);
                    break;
                }
                case 11: { /* 3x3 conv, padding 1, bias */
                    const int64_t osh[4] = {2, 16, 30, 30};
                    em_view co = ct_dense(o, EM_F32, 4, osh), cw = ct_dense(w, EM_F32, 4, wsh),
                            cb = ct_dense(bias, EM_F32, 1, bsh);
                    x[17] = 0.5f; /* NaN would spread over the whole window */
                    em_conv_args a = {{1, 1}, {1, 1}, {1, 1}, {0, 0}, 1};
                    s = t->conv2d(NULL, &co, &ix, &cw, &cb, &a);
                    x[17] = NAN;
                    break;
                }
                }
                assert_int_equal(s, EM_OK);
            }
            const double d = rel_diff(outs[0], outs[1], NX * 2);
            if (!(d <= 1e-5))
                fail_msg("level %s differs from portable on case %d: %g", cpu_isa_name(level),
                         op, d);
        }
    }
    print_message("%d level(s) above portable checked against it\n", tested);
}

static void blas_warning(void **state) {
    (void)state;
    char buf[400];
    assert_true(cpu_blas_core_warning("Prescott", CPU_ISA_AVX512, buf, sizeof buf));
    assert_non_null(strstr(buf, "Prescott"));
    assert_non_null(strstr(buf, "OPENBLAS_CORETYPE=SkylakeX"));
    assert_true(cpu_blas_core_warning("PRESCOTT", CPU_ISA_AVX2, buf, sizeof buf));
    assert_non_null(strstr(buf, "OPENBLAS_CORETYPE=Haswell"));
    assert_true(cpu_blas_core_warning("Nehalem", CPU_ISA_AVX2, buf, sizeof buf));
    assert_true(cpu_blas_core_warning("Sandybridge", CPU_ISA_AVX2, buf, sizeof buf));
    /* an AVX2 kernel, or a CPU without AVX2: nothing */
    const char *fine[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"};
    for (size_t i = 0; i < sizeof fine / sizeof fine[0]; i++) {
        assert_false(cpu_blas_core_warning(fine[i], CPU_ISA_AVX512, buf, sizeof buf));
        assert_string_equal(buf, "");
    }
    assert_false(cpu_blas_core_warning("Prescott", CPU_ISA_PORTABLE, buf, sizeof buf));
    assert_false(cpu_blas_core_warning(NULL, CPU_ISA_AVX2, buf, sizeof buf));
    assert_true(cpu_blas_core_warning("Prescott", CPU_ISA_AVX2, NULL, 0));
}

/* A kernel forced with OPENBLAS_CORETYPE that the CPU cannot run (it would die of SIGILL). */
static void blas_unrunnable(void **state) {
    (void)state;
    char buf[400];
    assert_true(cpu_blas_core_unrunnable("SkylakeX", CPU_ISA_AVX2, buf, sizeof buf));
    assert_non_null(strstr(buf, "AVX-512"));
    assert_non_null(strstr(buf, "Haswell"));
    assert_true(cpu_blas_core_unrunnable("cooperlake", CPU_ISA_PORTABLE, buf, sizeof buf));
    assert_true(cpu_blas_core_unrunnable("Haswell", CPU_ISA_PORTABLE, buf, sizeof buf));
    assert_non_null(strstr(buf, "Prescott"));
    assert_true(cpu_blas_core_unrunnable("Zen", CPU_ISA_PORTABLE, NULL, 0));
    const char *fine[] = {"SkylakeX", "Haswell", "Zen", "Prescott", "Sandybridge"};
    for (size_t i = 0; i < sizeof fine / sizeof fine[0]; i++) {
        assert_false(cpu_blas_core_unrunnable(fine[i], CPU_ISA_AVX512, buf, sizeof buf));
        assert_string_equal(buf, "");
    }
    assert_false(cpu_blas_core_unrunnable("Haswell", CPU_ISA_AVX2, buf, sizeof buf));
    assert_false(cpu_blas_core_unrunnable("Prescott", CPU_ISA_PORTABLE, buf, sizeof buf));
    assert_false(cpu_blas_core_unrunnable(NULL, CPU_ISA_PORTABLE, buf, sizeof buf));
}

/* ---- the pool from several threads ---- */

enum { PN = 1 << 18 };

static void *pool_user(void *arg) {
    long bad = 0;
    em_device dev;
    if (em_device_parse("cpu", &dev) != EM_OK) return (void *)1L;
    const int64_t shape[2] = {PN / 512, 512};
    float *x = malloc(sizeof(float) * PN), *y = malloc(sizeof(float) * PN);
    for (int i = 0; x && i < PN; i++) x[i] = (float)(i % 7) - 3.0f + (float)(intptr_t)arg;
    for (int it = 0; x && y && it < 8 && !bad; it++) {
        em_tensor *t = NULL, *u = NULL, *v = NULL, *w = NULL;
        bad |= em_tensor_from_data(x, EM_F32, shape, 2, dev, &t) != EM_OK;
        bad |= !bad && em_add(t, t, &u) != EM_OK;             /* split over the pool */
        bad |= !bad && em_sum_dim(u, 0, false, &v) != EM_OK; /* columns, split */
        bad |= !bad && em_softmax(u, 1, &w) != EM_OK;        /* rows, split */
        bad |= !bad && em_tensor_to_data(u, y, sizeof(float) * PN) != EM_OK;
        for (int i = 0; !bad && i < PN; i++) bad |= y[i] != 2 * x[i];
        em_tensor_release(t), em_tensor_release(u), em_tensor_release(v), em_tensor_release(w);
    }
    free(x), free(y);
    return (void *)bad;
}

static void pool_from_threads(void **state) {
    (void)state;
    pthread_t th[2];
    for (intptr_t i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, pool_user, (void *)(i + 1)), 0);
    void *mine = pool_user((void *)0);
    for (int i = 0; i < 2; i++) {
        void *r;
        assert_int_equal(pthread_join(th[i], &r), 0);
        assert_null(r);
    }
    assert_null(mine);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(choose_rule),
        cmocka_unit_test(process_level),
        cmocka_unit_test(levels_agree),
        cmocka_unit_test(blas_warning),
        cmocka_unit_test(blas_unrunnable),
        cmocka_unit_test(pool_from_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif
