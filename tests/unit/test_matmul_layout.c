/*
 * test_matmul_layout.c — matmul's gradients when an operand is a transposed (column-major)
 * matrix, as a Linear layer's weight is used (x @ w^T). The rule then computes that
 * operand's gradient in the operand's own layout, so that the leaf behind the transpose gets
 * a contiguous gradient. Checked on every autodiff device of the machine's ref and cpu, f64:
 * values against the products written out here, and the layout of the leaves' gradients.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "ember/ember.h"

enum { M = 5, K = 4, N = 3 };

/* loss = sum(matmul(A, B) * W) with A = pa^T ([M, K], pa is [K, M]) and B either pb^T
 * (pb [N, K]) or pb itself ([K, N]); checks d loss / d pa and d loss / d pb. */
static void check(const char *devname, bool b_transposed) {
    em_device dev;
    assert_int_equal(em_device_parse(devname, &dev), EM_OK);
    double pa[K * M], pb[K * N], w[M * N];
    for (int i = 0; i < K * M; i++) pa[i] = 0.1 * (i % 7) - 0.3;
    for (int i = 0; i < K * N; i++) pb[i] = 0.05 * (i % 5) + 0.1 * (i % 3) - 0.2;
    for (int i = 0; i < M * N; i++) w[i] = 0.2 * (i % 4) - 0.25;
    /* A[m][k] = pa[k][m]; B[k][n] = pb[n][k] (transposed) or pb[k][n] */
    double ga[K * M] = {0}, gb[K * N] = {0};
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++)
            for (int n = 0; n < N; n++) {
                double b = b_transposed ? pb[n * K + k] : pb[k * N + n];
                ga[k * M + m] += w[m * N + n] * b;            /* d/dA[m][k] = sum_n W B */
                double a = pa[k * M + m];
                if (b_transposed) gb[n * K + k] += w[m * N + n] * a;
                else gb[k * N + n] += w[m * N + n] * a;
            }
    int64_t sa[2] = {K, M}, sb[2] = {b_transposed ? N : K, b_transposed ? K : N}, sw[2] = {M, N};
    em_tensor *ta, *tb, *tw, *at, *bt = NULL, *p, *q, *loss;
    assert_int_equal(em_tensor_from_data(pa, EM_F64, sa, 2, dev, &ta), EM_OK);
    assert_int_equal(em_tensor_from_data(pb, EM_F64, sb, 2, dev, &tb), EM_OK);
    assert_int_equal(em_tensor_from_data(w, EM_F64, sw, 2, dev, &tw), EM_OK);
    assert_int_equal(em_tensor_require_grad(ta), EM_OK);
    assert_int_equal(em_tensor_require_grad(tb), EM_OK);
    assert_int_equal(em_transpose(ta, 0, 1, &at), EM_OK);
    if (b_transposed) assert_int_equal(em_transpose(tb, 0, 1, &bt), EM_OK);
    assert_int_equal(em_matmul(at, b_transposed ? bt : tb, &p), EM_OK);
    assert_int_equal(em_mul(p, tw, &q), EM_OK);
    assert_int_equal(em_sum(q, &loss), EM_OK);
    em_grads *g;
    assert_int_equal(em_backward(loss, &g), EM_OK);
    em_tensor *leaves[2] = {ta, tb};
    const double *want[2] = {ga, gb};
    for (int l = 0; l < 2; l++) {
        em_tensor *gr = NULL;
        assert_int_equal(em_grads_get(g, leaves[l], &gr), EM_OK);
        assert_non_null(gr);
        assert_true(em_tensor_is_contiguous(gr));
        double got[K * M];
        size_t n = (size_t)(l == 0 ? K * M : K * N);
        assert_int_equal(em_tensor_to_data(gr, got, n * sizeof(double)), EM_OK);
        for (size_t i = 0; i < n; i++) {
            if (!(got[i] - want[l][i] < 1e-12 && want[l][i] - got[i] < 1e-12))
                fail_msg("%s, %s: gradient %d element %zu: %.17g, want %.17g", devname,
                         b_transposed ? "B = pb^T" : "B = pb", l, i, got[i], want[l][i]);
        }
        em_tensor_release(gr);
    }
    em_grads_release(g);
    em_tensor_release(loss), em_tensor_release(q), em_tensor_release(p);
    em_tensor_release(bt), em_tensor_release(at);
    em_tensor_release(tw), em_tensor_release(tb), em_tensor_release(ta);
}

static void test_transposed_operands(void **state) {
    (void)state;
    const char *devs[] = {"ref+autodiff", "ref+autodiff:balanced", "cpu+autodiff",
                          "cpu+autodiff:balanced"};
    for (size_t i = 0; i < sizeof devs / sizeof *devs; i++) {
        em_device d;
        if (em_device_parse(devs[i], &d) != EM_OK) {
            printf("skip %s: not in this build\n", devs[i]);
            continue;
        }
        check(devs[i], true);
        check(devs[i], false);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_transposed_operands)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
