/*
 * test_cpu_gemm.c — ember's own GEMM (src/backends/cpu/gemm.c) against a naive loop that
 * accumulates in double: every ISA level compiled in that this CPU runs (cpu_kernels_of), f32
 * and f64, the four transpose combinations, odd m/n/k (1, 7, 17, 65, 257, and across the
 * packing blocks KC, MC and NC), leading dimensions larger than the rows, beta 0 (C's old
 * contents ignored, NaN included) and 1; the padding between rows of C is never written.
 * Then cpu_gemm (matmul.c), the entry point that picks ember's GEMM or OpenBLAS from
 * EMBER_CPU_GEMM and splits over the pool: the same checks, and that the choice follows the
 * documented rule (skinny products included: cpu_gemm_ember_for). ctest runs this with
 * EMBER_CPU_GEMM unset, =ember and =openblas.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include "backends/cpu/cpu.h"

char *openblas_get_corename(void);

typedef void (*gemm_fn)(em_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                        const void *a, int64_t lda, const void *b, int64_t ldb, double beta,
                        void *c, int64_t ldc);

static uint64_t rng = 88172645463325252ull;
static double urand(void) { /* xorshift, in [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / (double)(1ull << 52) - 1.0;
}

/* cpu_gemm through the same signature (its CBLAS enums from the flags) */
static void via_cpu_gemm(em_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                         const void *a, int64_t lda, const void *b, int64_t ldb, double beta,
                         void *c, int64_t ldc) {
    cpu_gemm(dt, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, a, lda,
             b, ldb, beta, c, ldc);
}

/* One product: op(A) m x k, op(B) k x n, with `pad` extra elements a row of every operand. */
static void check_one(gemm_fn g, const char *what, em_dtype dt, bool ta, bool tb, int64_t m,
                      int64_t n, int64_t k, int64_t pad, double beta) {
    const bool f32 = dt == EM_F32;
    const size_t sz = f32 ? sizeof(float) : sizeof(double);
    const int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    const int64_t lda = ac + pad, ldb = bc + pad, ldc = n + pad;
    double *A = malloc(sizeof(double) * (size_t)(ar * lda + 1));
    double *B = malloc(sizeof(double) * (size_t)(br * ldb + 1));
    double *C0 = malloc(sizeof(double) * (size_t)(m * ldc + 1));
    void *a = malloc(sz * (size_t)(ar * lda + 1)), *b = malloc(sz * (size_t)(br * ldb + 1));
    void *c = malloc(sz * (size_t)(m * ldc + 1));
    assert_non_null(A);
    assert_non_null(B);
    assert_non_null(C0);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    for (int64_t i = 0; i < ar * lda; i++) {
        A[i] = f32 ? (double)(float)urand() : urand();
        if (f32) ((float *)a)[i] = (float)A[i];
        else ((double *)a)[i] = A[i];
    }
    for (int64_t i = 0; i < br * ldb; i++) {
        B[i] = f32 ? (double)(float)urand() : urand();
        if (f32) ((float *)b)[i] = (float)B[i];
        else ((double *)b)[i] = B[i];
    }
    for (int64_t i = 0; i < m * ldc; i++) {
        bool padding = i % ldc >= n;
        /* beta 0 must ignore C (NaN); padding holds a sentinel that must survive */
        C0[i] = padding ? 12345.0 : beta == 0 ? NAN : (f32 ? (double)(float)urand() : urand());
        if (f32) ((float *)c)[i] = (float)C0[i];
        else ((double *)c)[i] = C0[i];
    }
    g(dt, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
    const double tol = f32 ? 2e-6 : 1e-14;
    int64_t bad = 0;
    for (int64_t i = 0; i < m && bad < 5; i++)
        for (int64_t j = 0; j < ldc && bad < 5; j++) {
            double got = f32 ? (double)((float *)c)[i * ldc + j] : ((double *)c)[i * ldc + j];
            if (j >= n) {
                if (got != 12345.0) {
                    print_error("%s: %s ta=%d tb=%d m=%lld n=%lld k=%lld pad=%lld: padding "
                                "C[%lld][%lld] written\n", what, f32 ? "f32" : "f64", ta, tb,
                                (long long)m, (long long)n, (long long)k, (long long)pad,
                                (long long)i, (long long)j);
                    bad++;
                }
                continue;
            }
            double acc = 0, mag = 0;
            for (int64_t p = 0; p < k; p++) {
                double x = ta ? A[p * lda + i] : A[i * lda + p];
                double y = tb ? B[j * ldb + p] : B[p * ldb + j];
                acc += x * y;
                mag += fabs(x * y);
            }
            if (beta != 0) {
                acc += beta * C0[i * ldc + j];
                mag += fabs(beta * C0[i * ldc + j]);
            }
            double lim = tol * (mag + 1.0) * (1.0 + sqrt((double)k));
            if (!(fabs(got - acc) <= lim)) {
                print_error("%s: %s ta=%d tb=%d m=%lld n=%lld k=%lld pad=%lld beta=%g: "
                            "C[%lld][%lld] = %.17g, want %.17g\n", what, f32 ? "f32" : "f64",
                            ta, tb, (long long)m, (long long)n, (long long)k, (long long)pad,
                            beta, (long long)i, (long long)j, got, acc);
                bad++;
            }
        }
    free(A);
    free(B);
    free(C0);
    free(a);
    free(b);
    free(c);
    assert_int_equal(bad, 0);
}

static void check_all(gemm_fn g, const char *what, bool big) {
    static const int64_t odd[] = {1, 7, 17, 65};
    for (int d = 0; d < 2; d++) {
        em_dtype dt = d ? EM_F64 : EM_F32;
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = t & 2;
            for (size_t i = 0; i < 4; i++)
                for (size_t j = 0; j < 4; j++)
                    for (size_t q = 0; q < 4; q++)
                        check_one(g, what, dt, ta, tb, odd[i], odd[j], odd[q],
                                  (int64_t)((i + j + q) % 3) * 3, (i + j + q) % 2 ? 1.0 : 0.0);
            /* past the blocks: k > KC (256), m > MC (144 f32 at avx2, up to 288), n > NR */
            check_one(g, what, dt, ta, tb, 257, 65, 257, 5, 0.0);
            check_one(g, what, dt, ta, tb, 65, 257, 300, 0, 1.0);
            check_one(g, what, dt, ta, tb, 300, 33, 513, 1, 1.0);
            if (big) /* n > NC (4096 f32, 2048 f64), and big enough to be split over the pool */
                check_one(g, what, dt, ta, tb, 5, 4100, 3, 2, 1.0);
        }
        /* big enough that cpu_gemm splits rows, and columns (few rows) over the pool */
        check_one(g, what, dt, false, false, 301, 190, 120, 3, 0.0);
        check_one(g, what, dt, true, true, 9, 1500, 200, 1, 1.0);
        /* skinny (m <= 64, n and k >= 256): OpenBLAS's under auto where its kernel fits */
        check_one(g, what, dt, false, true, 19, 260, 300, 1, 0.0);
        check_one(g, what, dt, true, false, 64, 256, 256, 0, 1.0);
        /* k = 0: C = beta C (beta 0: zeros, whatever C held) */
        check_one(g, what, dt, false, false, 7, 9, 0, 2, 0.0);
        check_one(g, what, dt, true, false, 7, 9, 0, 2, 1.0);
    }
}

/* Every level compiled in that this CPU runs. */
static void levels(void **state) {
    (void)state;
    int ran = 0;
    for (int level = 0; level < CPU_ISA_COUNT; level++) {
        const cpu_kernels *k = cpu_kernels_of(level);
        if (!k || level > cpu_isa_best()) continue;
        assert_int_equal(k->isa, level);
        assert_non_null(k->gemm);
        assert_true(k->gemm_mr > 0 && k->gemm_nr > 0);
        char what[32];
        snprintf(what, sizeof what, "gemm %s", cpu_isa_name(level));
        check_all(k->gemm, what, level == cpu_isa_best());
        ran++;
    }
    assert_true(ran >= 1);
}

/* cpu_gemm: the choice's rule, then the products. */
static void entry(void **state) {
    (void)state;
    const char *env = getenv("EMBER_CPU_GEMM"), *core = openblas_get_corename();
    const bool unrunnable = cpu_blas_core_unrunnable(core, cpu_isa_best(), NULL, 0);
    const bool below = cpu_blas_core_warning(core, cpu_isa_best(), NULL, 0);
    /* auto: ember's unless OpenBLAS runs an AVX-512 kernel on an AVX-512 CPU or ember's
     * would run a level without FMA; skinny products (m <= 64, n and k >= 256) to OpenBLAS
     * where its kernel fits and ember's runs no wider vectors (ember's avx512 level beats an
     * AVX2 kernel on them too) */
    const bool blas512 = core && (strcasecmp(core, "skylakex") == 0 ||
                                  strcasecmp(core, "cooperlake") == 0 ||
                                  strcasecmp(core, "sapphirerapids") == 0) &&
                         cpu_isa_best() >= CPU_ISA_AVX512;
    bool want, skinny_blas = false;
    if (env && strcasecmp(env, "ember") == 0) want = true;
    else if (env && strcasecmp(env, "openblas") == 0) want = unrunnable;
    else {
        want = unrunnable || below || (!blas512 && cpu_isa() >= CPU_ISA_AVX2);
        skinny_blas = want && !unrunnable && !below && cpu_isa() < CPU_ISA_AVX512;
    }
    assert_int_equal(cpu_gemm_is_ember(), want);
    /* the shape rule: only auto with a fit kernel sends skinny products to OpenBLAS */
    assert_int_equal(cpu_gemm_ember_for(64, 256, 256), want && !skinny_blas);
    assert_int_equal(cpu_gemm_ember_for(16, 1024, 1024), want && !skinny_blas);
    assert_int_equal(cpu_gemm_ember_for(65, 256, 256), want);
    assert_int_equal(cpu_gemm_ember_for(64, 255, 1024), want);
    assert_int_equal(cpu_gemm_ember_for(64, 1024, 255), want);
    assert_int_equal(cpu_gemm_ember_for(1024, 1024, 1024), want);
    assert_int_equal(cpu_blas_usable(), !unrunnable);
    char line[256];
    cpu_gemm_describe(line, sizeof line);
    assert_true(strncmp(line, want ? "ember " : "openblas ", want ? 6 : 9) == 0);
    print_message("cpu_gemm: %s\n", line);
    check_all(via_cpu_gemm, "cpu_gemm", true);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(levels),
        cmocka_unit_test(entry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
