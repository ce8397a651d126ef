/*
 * test_cpu_norm.c — the cpu backend's normalization kernels (batch_norm and its backward,
 * group_norm, rms_norm) against ref's, run in the same test on the same views, at every
 * instruction-set level this build and CPU have: f32, f64, f16, bf16; x and out contiguous,
 * reversed (channels-last) and padded at an offset; parameters contiguous, padded or absent;
 * running statistics given or not, training and eval; saved statistics given or not; odd
 * sizes (not multiples of the vector width or of the kernels' blocks), a channel of one
 * element per sample, channels of several blocks, a mean 1000 times the spread; empty x.
 * Outputs are compared over their whole buffers (gaps of strided outputs stay as they were)
 * within the conformance table's tolerances; none of it counts a fallback to ref.
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
    printf("test_cpu_norm: no cpu backend in this build: skipped\n");
    return 77;
}
#else
#include "backends/cpu/fallback.h"
#include "backends/cpu/isa.h"
#include "cpu_test_util.h"

static const em_backend_ops *REF;
static void *CTX;

#define CT_SEED 0x2545f4914f6cdd1dull
#include "cpu_test_views.h"

/* [N, C, S] shapes: odd sizes, S = 1, channels of several blocks, empty */
static const int64_t BN_SHAPES[][3] = {{4, 3, 37}, {5, 2, 1}, {1, 2, 1500}, {3, 1, 16},
                                       {2, 7, 20}, {0, 3, 4}};
#define BN_NSHAPES 6

static void batch_norm_cases(void **state) {
    (void)state;
    lv L[CPU_ISA_COUNT];
    const int nl = levels(L);
    for (int l = 0; l < nl; l++)
        for (int t = 0; t < NFLOATS; t++)
            for (int s = 0; s < BN_NSHAPES; s++)
                for (int lx = 0; lx < L_COUNT; lx++)
                    for (int mode = 0; mode < 6; mode++) {
                        /* mode: 0 train all, 1 train plain, 2 train running only, 3 eval
                         * all, 4 eval plain, 5 train with a large mean, params padded */
                        const em_dtype dt = FLOATS[t];
                        const bool training = mode <= 2 || mode == 5;
                        const bool affine = mode == 0 || mode == 3 || mode == 5;
                        const bool run = mode != 1;
                        const bool save = mode != 4;
                        const int lp = mode == 5 ? L_PADDED : L_CONTIG;
                        const int64_t *sh = BN_SHAPES[s], C = sh[1], cs[1] = {C};
                        const double off = mode == 5 && dt != EM_F16 && dt != EM_BF16 ? 1000 : 0;
                        if (training && sh[0] * sh[2] == 1) continue;
                        buf bx, bo, bw, bb, bm, bi, brm, brv;
                        em_view x = mkview(&bx, dt, 3, sh, lx, off - 2, off + 2);
                        em_view out = mkview(&bo, dt, 3, sh, (lx + mode) % L_COUNT, -9, 9);
                        em_view w = mkview(&bw, dt, 1, cs, lp, -2, 2);
                        em_view b = mkview(&bb, dt, 1, cs, lp, -2, 2);
                        em_view sm = mkview(&bm, dt, 1, cs, lp, -9, 9);
                        em_view si = mkview(&bi, dt, 1, cs, L_PADDED, -9, 9);
                        em_view rm = mkview(&brm, dt, 1, cs, lp, off - 1, off + 1);
                        em_view rv = mkview(&brv, dt, 1, cs, L_PADDED, 0.5, 2);
                        buf wo = clone(&bo), wm = clone(&bm), wi = clone(&bi), wrm = clone(&brm),
                            wrv = clone(&brv);
                        em_view wov = on(&out, &wo), wmv = on(&sm, &wm), wiv = on(&si, &wi),
                                wrmv = on(&rm, &wrm), wrvv = on(&rv, &wrv);
                        const em_view *pw = affine ? &w : NULL, *pb = affine ? &b : NULL;
                        assert_int_equal(REF->batch_norm(NULL, &wov, save ? &wmv : NULL,
                                                         save ? &wiv : NULL, &x, pw, pb,
                                                         run ? &wrmv : NULL, run ? &wrvv : NULL,
                                                         training, 0.25, 1e-5),
                                         EM_OK);
                        assert_int_equal(L[l].k->batch_norm(CTX, &out, save ? &sm : NULL,
                                                            save ? &si : NULL, &x, pw, pb,
                                                            run ? &rm : NULL, run ? &rv : NULL,
                                                            training, 0.25, 1e-5),
                                         EM_OK);
                        check_same("batch_norm out", &bo, &wo, 1);
                        check_same("batch_norm save_mean", &bm, &wm, 1);
                        check_same("batch_norm save_invstd", &bi, &wi, 1);
                        check_same("batch_norm running_mean", &brm, &wrm, 1);
                        check_same("batch_norm running_var", &brv, &wrv, 1);
                        free_buf(&bx), free_buf(&bo), free_buf(&bw), free_buf(&bb);
                        free_buf(&bm), free_buf(&bi), free_buf(&brm), free_buf(&brv);
                        free_buf(&wo), free_buf(&wm), free_buf(&wi), free_buf(&wrm);
                        free_buf(&wrv);
                    }
    no_fallbacks();
}

static void batch_norm_backward_cases(void **state) {
    (void)state;
    lv L[CPU_ISA_COUNT];
    const int nl = levels(L);
    for (int l = 0; l < nl; l++)
        for (int t = 0; t < NFLOATS; t++)
            for (int s = 0; s < BN_NSHAPES; s++)
                for (int lx = 0; lx < L_COUNT; lx++)
                    for (int mode = 0; mode < 5; mode++) {
                        /* mode: 0 train all grads, 1 eval all, 2 train gx only no weight,
                         * 3 train gw/gb only, 4 eval gx only, params padded */
                        const em_dtype dt = FLOATS[t];
                        const bool training = mode == 0 || mode == 2 || mode == 3;
                        const bool want_gx = mode != 3, want_gp = mode <= 1 || mode == 3;
                        const bool hw = mode != 2;
                        const int lp = mode == 4 ? L_PADDED : L_CONTIG;
                        const int64_t *sh = BN_SHAPES[s], C = sh[1], cs[1] = {C};
                        buf bx, bg, bgx, bw, bm, bi, bgw, bgb;
                        em_view x = mkview(&bx, dt, 3, sh, lx, -2, 2);
                        em_view gy = mkview(&bg, dt, 3, sh, (lx + 1) % L_COUNT, -1, 1);
                        em_view gx = mkview(&bgx, dt, 3, sh, (lx + mode) % L_COUNT, -9, 9);
                        em_view w = mkview(&bw, dt, 1, cs, lp, -2, 2);
                        em_view m = mkview(&bm, dt, 1, cs, lp, -0.5, 0.5);
                        em_view iv = mkview(&bi, dt, 1, cs, lp, 0.5, 2);
                        em_view gw = mkview(&bgw, dt, 1, cs, L_PADDED, -9, 9);
                        em_view gb = mkview(&bgb, dt, 1, cs, lp, -9, 9);
                        buf wgx = clone(&bgx), wgw = clone(&bgw), wgb = clone(&bgb);
                        em_view wgxv = on(&gx, &wgx), wgwv = on(&gw, &wgw), wgbv = on(&gb, &wgb);
                        assert_int_equal(REF->batch_norm_backward(
                                             NULL, want_gx ? &wgxv : NULL, want_gp ? &wgwv : NULL,
                                             want_gp ? &wgbv : NULL, &gy, &x, &m, &iv,
                                             hw ? &w : NULL, training),
                                         EM_OK);
                        assert_int_equal(L[l].k->batch_norm_backward(
                                             CTX, want_gx ? &gx : NULL, want_gp ? &gw : NULL,
                                             want_gp ? &gb : NULL, &gy, &x, &m, &iv,
                                             hw ? &w : NULL, training),
                                         EM_OK);
                        /* sums of up to 3000 terms: the half dtypes' inputs are exact, but
                         * the rounding of the f32 lanes shows at f32's tolerance times 10 */
                        check_same("batch_norm_backward gx", &bgx, &wgx, 10);
                        check_same("batch_norm_backward gw", &bgw, &wgw, 10);
                        check_same("batch_norm_backward gb", &bgb, &wgb, 10);
                        free_buf(&bx), free_buf(&bg), free_buf(&bgx), free_buf(&bw);
                        free_buf(&bm), free_buf(&bi), free_buf(&bgw), free_buf(&bgb);
                        free_buf(&wgx), free_buf(&wgw), free_buf(&wgb);
                    }
    no_fallbacks();
}

static void group_norm_cases(void **state) {
    (void)state;
    lv L[CPU_ISA_COUNT];
    const int nl = levels(L);
    const int64_t shapes[][3] = {{2, 6, 5}, {1, 4, 300}, {3, 6, 1}, {0, 4, 3}, {2, 12, 7}};
    const int64_t groups[][2] = {{3, 6}, {2, 1}, {6, 2}, {2, 4}, {4, 12}};
    for (int l = 0; l < nl; l++)
        for (int t = 0; t < NFLOATS; t++)
            for (int s = 0; s < 5; s++)
                for (int g = 0; g < 2; g++)
                    for (int lx = 0; lx < L_COUNT; lx++)
                        for (int mode = 0; mode < 3; mode++) { /* affine, plain, padded w */
                            const em_dtype dt = FLOATS[t];
                            const int64_t *sh = shapes[s], G = groups[s][g], C = sh[1];
                            const int64_t cs[1] = {C}, ng[2] = {sh[0], G};
                            const int lp = mode == 2 ? L_PADDED : L_CONTIG;
                            buf bx, bo, bw, bb, bm, bi;
                            em_view x = mkview(&bx, dt, 3, sh, lx, -3 + 4 * s, 3 + 4 * s);
                            em_view out = mkview(&bo, dt, 3, sh, (lx + mode) % L_COUNT, -9, 9);
                            em_view w = mkview(&bw, dt, 1, cs, lp, -2, 2);
                            em_view b = mkview(&bb, dt, 1, cs, lp, -2, 2);
                            em_view sm = mkview(&bm, dt, 2, ng, lp, -9, 9);
                            em_view si = mkview(&bi, dt, 2, ng, L_REVERSED, -9, 9);
                            buf wo = clone(&bo), wm = clone(&bm), wi = clone(&bi);
                            em_view wov = on(&out, &wo), wmv = on(&sm, &wm), wiv = on(&si, &wi);
                            const em_view *pw = mode != 1 ? &w : NULL, *pb = mode == 0 ? &b : NULL;
                            const bool save = mode != 1;
                            assert_int_equal(REF->group_norm(NULL, &wov, save ? &wmv : NULL,
                                                             save ? &wiv : NULL, &x, pw, pb, G,
                                                             1e-5),
                                             EM_OK);
                            assert_int_equal(L[l].k->group_norm(CTX, &out, save ? &sm : NULL,
                                                                save ? &si : NULL, &x, pw, pb, G,
                                                                1e-5),
                                             EM_OK);
                            check_same("group_norm out", &bo, &wo, 1);
                            check_same("group_norm save_mean", &bm, &wm, 1);
                            check_same("group_norm save_invstd", &bi, &wi, 1);
                            free_buf(&bx), free_buf(&bo), free_buf(&bw), free_buf(&bb);
                            free_buf(&bm), free_buf(&bi), free_buf(&wo), free_buf(&wm);
                            free_buf(&wi);
                        }
    no_fallbacks();
}

static void rms_norm_cases(void **state) {
    (void)state;
    lv L[CPU_ISA_COUNT];
    const int nl = levels(L);
    const int64_t shapes[][2] = {{5, 37}, {3, 64}, {1, 1}, {0, 8}, {70, 33}, {2, 1200}};
    for (int l = 0; l < nl; l++)
        for (int t = 0; t < NFLOATS; t++)
            for (int s = 0; s < 6; s++)
                for (int lx = 0; lx < L_COUNT; lx++)
                    for (int mode = 0; mode < 3; mode++) { /* weight, none, padded weight */
                        const em_dtype dt = FLOATS[t];
                        const int64_t n = shapes[s][1], ps[1] = {n}, rs[1] = {shapes[s][0]};
                        const int lp = mode == 2 ? L_PADDED : L_CONTIG;
                        buf bx, bo, bw, bi;
                        em_view x = mkview(&bx, dt, 2, shapes[s], lx, -3, 3);
                        em_view out = mkview(&bo, dt, 2, shapes[s], (lx + mode) % L_COUNT, -9, 9);
                        em_view w = mkview(&bw, dt, 1, ps, lp, -2, 2);
                        em_view si = mkview(&bi, dt, 1, rs, lp, -9, 9);
                        buf wo = clone(&bo), wi = clone(&bi);
                        em_view wov = on(&out, &wo), wiv = on(&si, &wi);
                        const em_view *pw = mode != 1 ? &w : NULL;
                        const bool save = mode != 1;
                        assert_int_equal(REF->rms_norm(NULL, &wov, save ? &wiv : NULL, &x, pw, n,
                                                       1e-5),
                                         EM_OK);
                        assert_int_equal(L[l].k->rms_norm(CTX, &out, save ? &si : NULL, &x, pw,
                                                          n, 1e-5),
                                         EM_OK);
                        check_same("rms_norm out", &bo, &wo, 1);
                        check_same("rms_norm save_invrms", &bi, &wi, 1);
                        free_buf(&bx), free_buf(&bo), free_buf(&bw), free_buf(&bi);
                        free_buf(&wo), free_buf(&wi);
                    }
    no_fallbacks();
}

/* Integer views (which the core never passes) go to ref, counted under their own rows. */
static void integer_fallbacks(void **state) {
    (void)state;
    int32_t xv[6] = {1, 2, 3, 4, 5, 6}, ov[6] = {0};
    const int64_t sh[3] = {2, 3, 1};
    em_view x = ct_dense(xv, EM_I32, 3, sh), o = ct_dense(ov, EM_I32, 3, sh);
    cpu_fallback_reset();
    const cpu_kernels *k = cpu_kernels_of(cpu_isa_best());
    (void)k->batch_norm(CTX, &o, NULL, NULL, &x, NULL, NULL, NULL, NULL, true, 0.1, 1e-5);
    assert_int_equal(fb_count(CPU_FB_BATCH_NORM), 1);
    (void)k->group_norm(CTX, &o, NULL, NULL, &x, NULL, NULL, 1, 1e-5);
    assert_int_equal(fb_count(CPU_FB_GROUP_NORM), 1);
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
        cmocka_unit_test(batch_norm_cases), cmocka_unit_test(batch_norm_backward_cases),
        cmocka_unit_test(group_norm_cases), cmocka_unit_test(rms_norm_cases),
        cmocka_unit_test(integer_fallbacks),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
#endif
