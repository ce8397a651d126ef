/*
 * test_cpu_reduce.c — the cpu backend's reductions, softmax / log_softmax and cumsum
 * (src/backends/cpu/reduce.c) against the ref kernels, computed in the same test, at every
 * instruction-set level this build and CPU have:
 *   - every reduce op (sum mean prod max min argmax argmin var logsumexp), over every dim and
 *     over the whole tensor;
 *   - inputs contiguous, permuted (a transpose of the last two dims, the reverse of all
 *     dims, NCHW -> NHWC), sliced with a step and an offset, broadcast (a stride-0 dim),
 *     flipped (a negative stride, first or last dim); outputs contiguous and strided (inside a larger buffer,
 *     with gaps and an offset);
 *   - f32, f64, f16, bf16; shapes with extent-1 dims, odd extents that are not multiples of
 *     the vector width, long lines (chunked and tiled paths), empty tensors; NaNs;
 *   - none of it runs ref's loops (the fallback counters stay at zero for float dtypes).
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
    printf("test_cpu_reduce: no cpu backend in this build: skipped\n");
    return 77;
}
#else
#include "backends/cpu/fallback.h"
#include "backends/cpu/isa.h"

static const em_dtype DTYPES[] = {EM_F32, EM_F64, EM_F16, EM_BF16};
static const char *dt_name(em_dtype dt) {
    return dt == EM_F32 ? "f32" : dt == EM_F64 ? "f64" : dt == EM_F16 ? "f16" : "bf16";
}

#include "cpu_test_lines.h"

/** A view of `shape` with layout lay over a fresh buffer (*buf, to free) of random values. */
static em_view make_input(em_dtype dt, int rank, const int64_t *shape, int lay, void **buf,
                          bool nan) {
    int64_t total;
    em_view v = lines_view(dt, rank, shape, lay, &total);
    *buf = calloc((size_t)total + 64, esz(dt));
    for (int64_t i = 0; i < total; i++) ct_store(*buf, dt, i, urand() * 3);
    if (nan && total > 5) ct_store(*buf, dt, total / 2, NAN);
    v.buf = *buf;
    return v;
}

/** A keepdim-form output for in reduced over dim (dim < 0: 0-d); strided when gaps. */
static em_view make_output(em_dtype dt, const em_view *in, int dim, bool gaps, void **buf) {
    em_view v;
    memset(&v, 0, sizeof v);
    v.dtype = dt;
    v.rank = dim < 0 ? 0 : in->rank;
    int64_t s = 1;
    for (int d = v.rank - 1; d >= 0; d--) {
        v.shape[d] = d == dim ? 1 : in->shape[d];
        v.strides[d] = s * (gaps ? 2 : 1);
        s *= v.shape[d] * (gaps ? 2 : 1);
    }
    v.offset = gaps ? 5 : 0;
    *buf = calloc((size_t)(s + 16), esz(dt) < 8 ? 8 : esz(dt));
    v.buf = *buf;
    return v;
}

static double tol_of(em_dtype dt) {
    return dt == EM_F64 ? 1e-12 : dt == EM_F32 ? 2e-5 : dt == EM_F16 ? 4e-3 : 2e-2;
}

static const int64_t SHAPES[][5] = {
    /* rank, extents */
    {4, 3, 5, 7, 9},   {2, 33, 17},   {2, 1, 70},    {2, 70, 1},   {3, 2, 1, 300},
    {1, 1000},         {2, 9, 4100},  {2, 4100, 9},  {3, 0, 4, 5}, {2, 6, 0},
    {4, 2, 16, 5, 5},  {1, 1},        {3, 130, 3, 2},
};
#define NSHAPES (int)(sizeof SHAPES / sizeof SHAPES[0])

static void reduce_all(void **state) {
    (void)state;
    setup_levels();
    cpu_fallback_reset();
    for (int si = 0; si < NSHAPES; si++) {
        const int rank = (int)SHAPES[si][0];
        const int64_t *shape = SHAPES[si] + 1;
        for (size_t di = 0; di < sizeof DTYPES / sizeof DTYPES[0]; di++) {
            const em_dtype dt = DTYPES[di];
            for (int lay = 0; lay < L_COUNT; lay++) {
                if (lay == L_NHWC && rank != 4) continue;
                void *ib;
                em_view in = make_input(dt, rank, shape, lay, &ib, lay == L_FLIP && si == 1);
                for (int dim = -1; dim < rank; dim++) {
                    for (int op = 0; op < EM_RED_COUNT; op++) {
                        const bool arg = op == EM_RED_ARGMAX || op == EM_RED_ARGMIN;
                        const em_dtype odt = arg ? EM_I64 : dt;
                        const bool gaps = (op + dim + lay) % 2 == 1;
                        const double corr = (op % 2) ? 0.0 : 1.0;
                        void *rb;
                        em_view ro = make_output(odt, &in, dim, gaps, &rb);
                        assert_int_equal(ref->reduce(NULL, (em_reduce_op)op, &ro, &in, dim, &corr),
                                         EM_OK);
                        for (int l = 0; l < nlevels; l++) {
                            void *cb;
                            em_view co = make_output(odt, &in, dim, gaps, &cb);
                            assert_int_equal(levels[l]->reduce(NULL, (em_reduce_op)op, &co, &in,
                                                               dim, &corr),
                                             EM_OK);
                            char what[160];
                            snprintf(what, sizeof what, "reduce op %d %s shape #%d %s dim %d %s",
                                     op, dt_name(dt), si, LNAMES[lay], dim,
                                     cpu_isa_name(levels[l]->isa));
                            compare(what, &co, &ro, arg ? 0 : tol_of(dt), 1);
                            free(cb);
                        }
                        free(rb);
                    }
                }
                free(ib);
            }
        }
    }
    for (size_t di = 0; di < sizeof DTYPES / sizeof DTYPES[0]; di++)
        assert_int_equal(cpu_fallback_count(CPU_FB_REDUCE, DTYPES[di]), 0);
    assert_int_equal(fails, 0);
}

/* softmax, log_softmax (kind 0, 1) and cumsum (kind 2) */
static void lines_all(void **state) {
    (void)state;
    setup_levels();
    cpu_fallback_reset();
    for (int si = 0; si < NSHAPES; si++) {
        const int rank = (int)SHAPES[si][0];
        const int64_t *shape = SHAPES[si] + 1;
        for (size_t di = 0; di < sizeof DTYPES / sizeof DTYPES[0]; di++) {
            const em_dtype dt = DTYPES[di];
            for (int lay = 0; lay < L_COUNT; lay++) {
                if (lay == L_NHWC && rank != 4) continue;
                void *ib;
                em_view in = make_input(dt, rank, shape, lay, &ib, lay == L_FLIP && si == 1);
                for (int dim = 0; dim < rank; dim++) {
                    for (int kind = 0; kind < 3; kind++) {
                        const bool strided = (kind + dim + lay) % 2 == 1;
                        void *rb;
                        em_view ro = make_same(dt, &in, strided, &rb);
                        em_status s = kind == 2 ? ref->cumsum(NULL, &ro, &in, dim)
                                                : ref->softmax(NULL, &ro, &in, dim, kind == 1);
                        assert_int_equal(s, EM_OK);
                        for (int l = 0; l < nlevels; l++) {
                            void *cb;
                            em_view co = make_same(dt, &in, strided, &cb);
                            s = kind == 2 ? levels[l]->cumsum(NULL, &co, &in, dim)
                                          : levels[l]->softmax(NULL, &co, &in, dim, kind == 1);
                            assert_int_equal(s, EM_OK);
                            char what[160];
                            snprintf(what, sizeof what, "%s %s shape #%d %s dim %d %s",
                                     kind == 2 ? "cumsum" : kind ? "log_softmax" : "softmax",
                                     dt_name(dt), si, LNAMES[lay], dim,
                                     cpu_isa_name(levels[l]->isa));
                            compare(what, &co, &ro, tol_of(dt), 1);
                            free(cb);
                        }
                        free(rb);
                    }
                }
                free(ib);
            }
        }
    }
    for (size_t di = 0; di < sizeof DTYPES / sizeof DTYPES[0]; di++) {
        assert_int_equal(cpu_fallback_count(CPU_FB_SOFTMAX, DTYPES[di]), 0);
        assert_int_equal(cpu_fallback_count(CPU_FB_CUMSUM, DTYPES[di]), 0);
    }
    assert_int_equal(fails, 0);
}

/* the public ops on the cpu device against ref: views made by the layout ops, and the
 * broadcast gradient reduction of batch norm's scale through autodiff */
static void public_ops(void **state) {
    (void)state;
    em_device cpu, refd;
    assert_int_equal(em_device_parse("cpu", &cpu), EM_OK);
    assert_int_equal(em_device_parse("ref", &refd), EM_OK);
    const int64_t shape[4] = {4, 6, 5, 7};
    double data[4 * 6 * 5 * 7];
    for (size_t i = 0; i < sizeof data / sizeof data[0]; i++) data[i] = urand();
    em_tensor *x[2], *p[2], *s[2];
    for (int k = 0; k < 2; k++) {
        assert_int_equal(em_tensor_from_data(data, EM_F64, shape, 4, k ? refd : cpu, &x[k]),
                         EM_OK);
        const int perm[4] = {2, 0, 3, 1};
        assert_int_equal(em_permute(x[k], perm, 4, &p[k]), EM_OK);
    }
    for (int dim = 0; dim < 4; dim++) {
        double a[4 * 6 * 5 * 7], b[4 * 6 * 5 * 7];
        for (int k = 0; k < 2; k++) assert_int_equal(em_var_dim(p[k], dim, 1, true, &s[k]), EM_OK);
        size_t n = (size_t)em_tensor_numel(s[0]);
        assert_int_equal(em_tensor_to_data(s[0], a, n * 8), EM_OK);
        assert_int_equal(em_tensor_to_data(s[1], b, n * 8), EM_OK);
        for (size_t i = 0; i < n; i++) assert_true(fabs(a[i] - b[i]) <= 1e-12 * (1 + fabs(b[i])));
        for (int k = 0; k < 2; k++) em_tensor_release(s[k]);
    }
    for (int k = 0; k < 2; k++) {
        em_tensor_release(p[k]);
        em_tensor_release(x[k]);
    }
}

/* d(sum(x * w))/dw for w of shape [1, C, 1, 1] broadcast over x [N, C, H, W] is x summed
 * over N, H, W: the reduction the autodiff layer does for batch norm's scale. */
static void broadcast_grad(void **state) {
    (void)state;
    const char *devs[] = {"ref+autodiff", "cpu+autodiff"};
    const int64_t xs[4] = {3, 4, 5, 6}, ws[4] = {1, 4, 1, 1};
    double xd[3 * 4 * 5 * 6], wd[4] = {0.5, -1, 2, 3};
    for (size_t i = 0; i < sizeof xd / sizeof xd[0]; i++) xd[i] = urand();
    double want[4] = {0};
    for (int n = 0; n < 3; n++)
        for (int c = 0; c < 4; c++)
            for (int i = 0; i < 30; i++) want[c] += xd[(n * 4 + c) * 30 + i];
    for (int k = 0; k < 2; k++) {
        em_device d;
        assert_int_equal(em_device_parse(devs[k], &d), EM_OK);
        em_tensor *x, *w, *y, *l;
        assert_int_equal(em_tensor_from_data(xd, EM_F64, xs, 4, d, &x), EM_OK);
        assert_int_equal(em_tensor_from_data(wd, EM_F64, ws, 4, d, &w), EM_OK);
        assert_int_equal(em_tensor_require_grad(w), EM_OK);
        assert_int_equal(em_mul(x, w, &y), EM_OK);
        assert_int_equal(em_sum(y, &l), EM_OK);
        em_grads *g;
        assert_int_equal(em_backward(l, &g), EM_OK);
        em_tensor *gw;
        assert_int_equal(em_grads_get(g, w, &gw), EM_OK);
        assert_int_equal(em_tensor_rank(gw), 4);
        for (int dd = 0; dd < 4; dd++) assert_int_equal(em_tensor_shape(gw)[dd], ws[dd]);
        double got[4];
        assert_int_equal(em_tensor_to_data(gw, got, sizeof got), EM_OK);
        for (int c = 0; c < 4; c++) assert_true(fabs(got[c] - want[c]) <= 1e-12 * (1 + fabs(want[c])));
        em_tensor_release(gw);
        em_grads_release(g);
        em_tensor_release(l);
        em_tensor_release(y);
        em_tensor_release(w);
        em_tensor_release(x);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reduce_all),
        cmocka_unit_test(lines_all),
        cmocka_unit_test(public_ops),
        cmocka_unit_test(broadcast_grad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif
