/*
 * test_cpu_cumulative.c — the cpu backend's cumprod, cummax and cummin (the cumulative slot,
 * src/backends/cpu/cumulative.c) against the ref kernel, computed in the same test, at every
 * instruction-set level this build and CPU have:
 *   - inputs contiguous, with the last two dims transposed, all dims reversed, sliced with a
 *     step and an offset, broadcast (a stride-0 dim), flipped (a negative stride, first or
 *     last dim); outputs contiguous and strided (gaps, an offset, the last two dims swapped);
 *   - f32, f64, f16, bf16; every dim of shapes with extent-1 dims, odd extents that are not
 *     multiples of the vector width, few long lines (the lines path, chunked), many columns
 *     (the columns path, in blocks), empty tensors; NaNs, ties (values drawn from a few
 *     integers) and zeros;
 *   - values and indices equal to ref's (cummax / cummin exactly; cumprod to the dtype's
 *     rounding), and none of it runs ref's loops (the fallback counter stays at zero for
 *     float dtypes) while integer inputs do go to ref, counted.
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

#include "cpu_test_util.h"

#ifndef EMBER_TEST_HAVE_CPU
int main(void) {
    printf("test_cpu_cumulative: no cpu backend in this build: skipped\n");
    return 77;
}
#else
#include "backends/cpu/fallback.h"
#include "backends/cpu/isa.h"

static const em_dtype DTYPES[] = {EM_F32, EM_F64, EM_F16, EM_BF16};
static const char *OPNAMES[] = {"cumprod", "cummax", "cummin"};

#define CT_SEED 0x243f6a8885a308d3ull
#include "cpu_test_lines.h"

/* value kinds: 0 near 1 (products stay finite), 1 small integers (ties), 2 with NaNs and
 * zeros */
static double draw(int kind) {
    if (kind == 0) return 1.0 + 0.05 * urand();
    if (kind == 1) return floor(urand() * 3);
    double u = urand();
    if (u > 0.9) return NAN;
    if (u < -0.85) return 0.0;
    return 2 * u;
}

static em_view make_input(em_dtype dt, int rank, const int64_t *shape, int lay, int kind,
                          void **buf) {
    int64_t total;
    em_view v = lines_view(dt, rank, shape, lay, &total);
    *buf = calloc((size_t)total + 64, esz(dt));
    for (int64_t i = 0; i < total; i++) ct_store(*buf, dt, i, draw(kind));
    v.buf = *buf;
    return v;
}

static double tol_of(em_dtype dt) {
    return dt == EM_F64 ? 1e-12 : dt == EM_F32 ? 1e-6 : dt == EM_F16 ? 1e-3 : 8e-3;
}


static const int64_t SHAPES[][5] = {
    /* rank, extents */
    {4, 3, 5, 7, 9}, {2, 33, 17},   {2, 1, 70},  {2, 70, 1},  {3, 2, 1, 300}, {1, 1000},
    {2, 3, 1300},    {2, 1300, 3},  {2, 7, 600}, {2, 9, 300}, {2, 600, 300},  {3, 0, 4, 5},
    {2, 6, 0},       {1, 1},        {1, 13},     {3, 130, 3, 2},
};
#define NSHAPES (int)(sizeof SHAPES / sizeof SHAPES[0])

static void cumulative_all(void **state) {
    (void)state;
    setup_levels();
    cpu_fallback_reset();
    for (int si = 0; si < NSHAPES; si++) {
        const int rank = (int)SHAPES[si][0];
        const int64_t *shape = SHAPES[si] + 1;
        for (size_t di = 0; di < sizeof DTYPES / sizeof DTYPES[0]; di++) {
            const em_dtype dt = DTYPES[di];
            for (int lay = 0; lay < L_COUNT; lay++) {
                for (int op = 0; op < EM_CUM_COUNT; op++) {
                    const int kind = op == EM_CUM_PROD ? (si + lay) % 3 == 2 ? 2 : 0
                                                       : (si + lay) % 3;
                    void *ib;
                    em_view in = make_input(dt, rank, shape, lay, kind, &ib);
                    for (int dim = 0; dim < rank; dim++) {
                        /* values and indices each dense or strided: all four pairs occur */
                        const bool strided = (op + dim + lay) % 2 == 1, ext = op != EM_CUM_PROD;
                        const bool kstrided = (op + dim + lay + si) / 2 % 2 == 1;
                        void *rb, *rk = NULL;
                        em_view ro = make_same(dt, &in, strided, &rb), rx;
                        if (ext) rx = make_same(EM_I64, &in, kstrided, &rk);
                        assert_int_equal(ref->cumulative(NULL, (em_cum_op)op, &ro,
                                                         ext ? &rx : NULL, &in, dim),
                                         EM_OK);
                        for (int l = 0; l < nlevels; l++) {
                            void *cb, *ck = NULL;
                            em_view co = make_same(dt, &in, strided, &cb), cx;
                            if (ext) cx = make_same(EM_I64, &in, kstrided, &ck);
                            assert_int_equal(levels[l]->cumulative(NULL, (em_cum_op)op, &co,
                                                                   ext ? &cx : NULL, &in, dim),
                                             EM_OK);
                            char what[160];
                            snprintf(what, sizeof what, "%s %s shape #%d %s dim %d %s",
                                     OPNAMES[op], em_dtype_name(dt), si, LNAMES[lay], dim,
                                     cpu_isa_name(levels[l]->isa));
                            compare(what, &co, &ro, ext ? 0 : tol_of(dt), 0);
                            if (ext) compare(what, &cx, &rx, 0, 0);
                            free(cb);
                            free(ck);
                        }
                        free(rb);
                        free(rk);
                    }
                    free(ib);
                }
            }
        }
    }
    for (size_t di = 0; di < sizeof DTYPES / sizeof DTYPES[0]; di++)
        assert_int_equal(cpu_fallback_count(CPU_FB_CUMULATIVE, DTYPES[di]), 0);
    assert_int_equal(fails, 0);
}

/* integer inputs run ref's loop through the counted fallback, with ref's results */
static void integers_fall_back(void **state) {
    (void)state;
    setup_levels();
    cpu_fallback_reset();
    const int64_t shape[2] = {3, 5};
    int32_t x[15];
    for (int i = 0; i < 15; i++) x[i] = (int32_t)(urand() * 4);
    em_view in = ct_dense(x, EM_I32, 2, shape);
    for (int op = 0; op < EM_CUM_COUNT; op++) {
        const em_dtype vdt = op == EM_CUM_PROD ? EM_I64 : EM_I32;
        int64_t rv[15], cv[15], ri[15], ci[15];
        em_view ro = ct_dense(rv, vdt, 2, shape), co = ct_dense(cv, vdt, 2, shape);
        em_view rx = ct_dense(ri, EM_I64, 2, shape), cx = ct_dense(ci, EM_I64, 2, shape);
        const bool ext = op != EM_CUM_PROD;
        assert_int_equal(ref->cumulative(NULL, (em_cum_op)op, &ro, ext ? &rx : NULL, &in, 1),
                         EM_OK);
        assert_int_equal(levels[0]->cumulative(NULL, (em_cum_op)op, &co, ext ? &cx : NULL, &in,
                                               1),
                         EM_OK);
        compare(OPNAMES[op], &co, &ro, 0, 0);
        if (ext) compare(OPNAMES[op], &cx, &rx, 0, 0);
    }
    assert_int_equal(cpu_fallback_count(CPU_FB_CUMULATIVE, EM_I64), 1);
    assert_int_equal(cpu_fallback_count(CPU_FB_CUMULATIVE, EM_I32), 2);
    assert_int_equal(fails, 0);
}

/* the public ops on cpu against ref, through the core: a permuted f32 input, a 0-d one */
static void public_ops(void **state) {
    (void)state;
    em_device cpu, refd;
    assert_int_equal(em_device_parse("cpu", &cpu), EM_OK);
    assert_int_equal(em_device_parse("ref", &refd), EM_OK);
    const int64_t shape[3] = {5, 9, 11};
    float data[5 * 9 * 11];
    for (size_t i = 0; i < sizeof data / sizeof data[0]; i++) data[i] = (float)draw(2);
    em_tensor *x[2], *p[2];
    for (int k = 0; k < 2; k++) {
        assert_int_equal(em_tensor_from_data(data, EM_F32, shape, 3, k ? refd : cpu, &x[k]),
                         EM_OK);
        const int perm[3] = {2, 0, 1};
        assert_int_equal(em_permute(x[k], perm, 3, &p[k]), EM_OK);
    }
    for (int dim = -3; dim < 3; dim++) {
        float a[5 * 9 * 11], b[5 * 9 * 11];
        int64_t ia[5 * 9 * 11], ib[5 * 9 * 11];
        em_tensor *v[2], *i[2];
        for (int k = 0; k < 2; k++)
            assert_int_equal(em_cummin(p[k], dim, &v[k], &i[k]), EM_OK);
        assert_int_equal(em_tensor_to_data(v[0], a, sizeof a), EM_OK);
        assert_int_equal(em_tensor_to_data(v[1], b, sizeof b), EM_OK);
        assert_int_equal(em_tensor_to_data(i[0], ia, sizeof ia), EM_OK);
        assert_int_equal(em_tensor_to_data(i[1], ib, sizeof ib), EM_OK);
        assert_memory_equal(a, b, sizeof a);
        assert_memory_equal(ia, ib, sizeof ia);
        for (int k = 0; k < 2; k++) {
            em_tensor_release(v[k]);
            em_tensor_release(i[k]);
        }
        for (int k = 0; k < 2; k++) assert_int_equal(em_cumprod(p[k], dim, &v[k]), EM_OK);
        assert_int_equal(em_tensor_to_data(v[0], a, sizeof a), EM_OK);
        assert_int_equal(em_tensor_to_data(v[1], b, sizeof b), EM_OK);
        for (size_t j = 0; j < sizeof a / sizeof a[0]; j++)
            assert_true((a[j] != a[j] && b[j] != b[j]) || a[j] == b[j]);
        for (int k = 0; k < 2; k++) em_tensor_release(v[k]);
    }
    for (int k = 0; k < 2; k++) {
        em_tensor_release(p[k]);
        em_tensor_release(x[k]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cumulative_all),
        cmocka_unit_test(integers_fall_back),
        cmocka_unit_test(public_ops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif
