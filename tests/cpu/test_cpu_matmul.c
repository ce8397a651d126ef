/*
 * test_cpu_matmul.c — cpu_matmul's batch handling (matmul.c) against ref's matmul on the same
 * views, f32, f64 and f16, under whichever GEMM cpu_gemm runs (ctest runs it with
 * EMBER_CPU_GEMM unset, =ember and =openblas):
 *   - b shared by the batch (stride 0: nn.Linear's x @ W^T), which folds the batch into the
 *     rows of one GEMM: a contiguous, a with a padded row stride, a transposed as a whole
 *     (x^T of a [k, B*T] matrix), at offsets, m = 1 with a contiguous or padded batch;
 *   - the same layouts where folding would be wrong: gaps between a's batch items, a
 *     transposed item by item, b batched, a shared and b batched (the mirror case);
 *   - rank 4 with b broadcast over one batch dim only (folds the inner dim, or none), over
 *     both, and with dims of 1;
 *   - batches of small items (split over the pool item by item), k = 0, out at an offset;
 *   - none of these counts a fallback to ref.
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

#include "backends/cpu/cpu.h"
#include "cpu_test_util.h"

static const em_backend_ops *REF;
static void *CTX;

static uint64_t rng = 0x2545f4914f6cdd1dull;
static double urand(void) { /* [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}

/* A view of `rank` dims with the given shape, strides and offset, in a fresh buffer of random
 * values large enough for it. */
static em_view mk(em_dtype dt, int rank, const int64_t *shape, const int64_t *strides,
                  int64_t offset) {
    em_view v;
    memset(&v, 0, sizeof v);
    v.dtype = dt;
    v.rank = rank;
    v.offset = offset;
    int64_t last = offset;
    for (int d = 0; d < rank; d++) {
        v.shape[d] = shape[d];
        v.strides[d] = strides[d];
        if (shape[d] > 0) last += (shape[d] - 1) * strides[d];
    }
    const size_t n = (size_t)last + 1;
    v.buf = malloc(n * em_dtype_size(dt));
    assert_non_null(v.buf);
    for (size_t i = 0; i < n; i++) ct_store(v.buf, dt, (int64_t)i, urand());
    return v;
}

/* Contiguous strides of shape. */
static void contig(int rank, const int64_t *shape, int64_t *strides) {
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        strides[d] = s;
        s *= shape[d];
    }
}

/* out (contiguous at `ooff`) = a @ b on cpu and on ref; compared element by element. */
static void check(const char *what, const em_view *a, const em_view *b, int64_t ooff) {
    const int r = a->rank;
    int64_t os[EM_MAX_RANK], ost[EM_MAX_RANK];
    for (int d = 0; d < r - 2; d++) os[d] = a->shape[d] > b->shape[d] ? a->shape[d] : b->shape[d];
    os[r - 2] = a->shape[r - 2];
    os[r - 1] = b->shape[r - 1];
    contig(r, os, ost);
    em_view o = mk(a->dtype, r, os, ost, ooff), w = o;
    int64_t numel = 1;
    for (int d = 0; d < r; d++) numel *= os[d];
    const size_t bytes = (size_t)(ooff + numel + 1) * em_dtype_size(a->dtype);
    w.buf = malloc(bytes);
    assert_non_null(w.buf);
    memcpy(w.buf, o.buf, bytes - em_dtype_size(a->dtype)); /* the offset's gap as well */
    assert_int_equal(REF->matmul(NULL, &w, a, b), EM_OK);
    assert_int_equal(cpu_matmul(CTX, &o, a, b), EM_OK);
    const int64_t k = a->shape[r - 1];
    const double tol = a->dtype == EM_F64 ? 1e-12 : a->dtype == EM_F32 ? 2e-6 : 2e-2;
    int bad = 0;
    for (int64_t i = 0; i < ooff + numel && bad < 5; i++) {
        const double x = ct_load(o.buf, o.dtype, i), y = ct_load(w.buf, w.dtype, i);
        if (!(fabs(x - y) <= tol * (1.0 + (double)k))) {
            print_error("%s (%s, %s GEMM): element %lld of out's buffer = %.9g, ref %.9g\n",
                        what, em_dtype_name(a->dtype), cpu_gemm_is_ember() ? "ember's" :
                        "OpenBLAS's", (long long)i, x, y);
            bad++;
        }
    }
    free(o.buf);
    free(w.buf);
    assert_int_equal(bad, 0);
}

static const em_dtype DTS[] = {EM_F32, EM_F64, EM_F16};

/* rank 3: a [B, T, C] in a layout, b [B, C, N] shared (W^T, W [N, C]) or batched */
static void rank3(void **state) {
    (void)state;
    /* small (gemm_small's sizes) and large enough for the packed GEMM after folding */
    static const int64_t sizes[][4] = {{3, 5, 7, 6}, {4, 37, 70, 45}, {5, 1, 33, 19},
                                       {2, 64, 40, 24}};
    for (size_t t = 0; t < sizeof DTS / sizeof DTS[0]; t++)
        for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
            const em_dtype dt = DTS[t];
            const int64_t B = sizes[z][0], T = sizes[z][1], C = sizes[z][2], N = sizes[z][3];
            const int64_t ash[3] = {B, T, C}, bsh[3] = {B, C, N};
            /* a's layouts: {strides, offset, what} */
            const struct {
                int64_t st[3], off;
                const char *what;
            } as[] = {
                {{T * C, C, 1}, 0, "a contiguous"},
                {{T * (C + 3), C + 3, 1}, 2, "a with a padded row stride, at an offset"},
                {{T * (C + 3) + 5, C + 3, 1}, 0, "a with gaps between batch items"},
                {{T, 1, B * T + 1}, 1, "a transposed as a whole (x^T, x [C, B*T])"},
                {{T * C, 1, T}, 0, "a transposed item by item"},
                {{0, C, 1}, 0, "a shared by the batch"},
                {{2 * T * C, C, 1}, 0, "a with every other item (stride 2TC)"},
            };
            const struct {
                int64_t st[3], off;
                const char *what;
            } bs[] = {
                {{0, 1, C}, 0, "b = W^T shared"},
                {{0, N, 1}, 3, "b shared row-major, at an offset"},
                {{C * N, 1, C}, 0, "b batched, transposed"},
                {{C * N, N, 1}, 0, "b batched"},
            };
            for (size_t i = 0; i < sizeof as / sizeof as[0]; i++)
                for (size_t j = 0; j < sizeof bs / sizeof bs[0]; j++) {
                    em_view a = mk(dt, 3, ash, as[i].st, as[i].off);
                    em_view b = mk(dt, 3, bsh, bs[j].st, bs[j].off);
                    char what[160];
                    snprintf(what, sizeof what, "[%lld,%lld,%lld] @ [%lld,%lld,%lld]: %s, %s",
                             (long long)B, (long long)T, (long long)C, (long long)B,
                             (long long)C, (long long)N, as[i].what, bs[j].what);
                    check(what, &a, &b, (int64_t)(i + j) % 3);
                    free(a.buf);
                    free(b.buf);
                }
        }
    assert_int_equal(cpu_fallback_count(CPU_FB_MATMUL, EM_F32), 0);
}

/* rank 4: a [P, Q, T, C], b broadcast over P, over Q, over both, or batched; dims of 1 */
static void rank4(void **state) {
    (void)state;
    for (size_t t = 0; t < sizeof DTS / sizeof DTS[0]; t++)
        for (int ones = 0; ones < 3; ones++) {
            const em_dtype dt = DTS[t];
            const int64_t P = ones == 1 ? 1 : 2, Q = ones == 2 ? 1 : 3, T = 9, C = 21, N = 17;
            const int64_t ash[4] = {P, Q, T, C}, bsh[4] = {P, Q, C, N};
            int64_t ast[4];
            contig(4, ash, ast);
            const struct {
                int64_t st[4];
                const char *what;
            } bs[] = {
                {{C * N, 0, N, 1}, "b broadcast over Q only"},
                {{0, C * N, N, 1}, "b broadcast over P only"},
                {{0, 0, 1, C}, "b = W^T broadcast over P and Q"},
                {{Q * C * N, C * N, N, 1}, "b batched"},
            };
            const struct {
                int64_t st[4];
                const char *what;
            } as[] = {
                {{ast[0], ast[1], ast[2], ast[3]}, "a contiguous"},
                {{Q * T * C + 4, T * C, C, 1}, "a with a gap between P items"},
                {{T * C, P * T * C, C, 1}, "a with P and Q swapped (a permute)"},
            };
            for (size_t i = 0; i < sizeof as / sizeof as[0]; i++)
                for (size_t j = 0; j < sizeof bs / sizeof bs[0]; j++) {
                    em_view a = mk(dt, 4, ash, as[i].st, 1);
                    em_view b = mk(dt, 4, bsh, bs[j].st, 0);
                    char what[160];
                    snprintf(what, sizeof what, "[%lld,%lld,%d,%d] @ W: %s, %s", (long long)P,
                             (long long)Q, (int)T, (int)C, as[i].what, bs[j].what);
                    check(what, &a, &b, 0);
                    free(a.buf);
                    free(b.buf);
                }
        }
    assert_int_equal(cpu_fallback_count(CPU_FB_MATMUL, EM_F32), 0);
}

/* batches of small items (attention's bmm, split over the pool item by item), k = 0 */
static void small_items(void **state) {
    (void)state;
    for (size_t t = 0; t < 2; t++) {
        const em_dtype dt = DTS[t];
        const int64_t ash[3] = {48, 16, 8}, bsh[3] = {48, 8, 16};
        int64_t ast[3], bst[3];
        contig(3, ash, ast);
        contig(3, bsh, bst);
        em_view a = mk(dt, 3, ash, ast, 0), b = mk(dt, 3, bsh, bst, 0);
        check("48 items of 16x8 @ 8x16", &a, &b, 0);
        free(a.buf);
        free(b.buf);
        const int64_t a0[3] = {4, 5, 0}, b0[3] = {4, 0, 6}, z[3] = {0, 1, 1};
        const int64_t bz[3] = {0, 1, 1};
        a = mk(dt, 3, a0, z, 0);
        b = mk(dt, 3, b0, bz, 0);
        check("k = 0, b shared", &a, &b, 1);
        free(a.buf);
        free(b.buf);
    }
}

static int setup(void **state) {
    (void)state;
    REF = em_backend_get(EM_BACKEND_REF);
    const em_backend_ops *cpu = em_backend_get_native(EM_BACKEND_CPU);
    if (!REF || !cpu || cpu->open(0, &CTX) != EM_OK) return -1;
    cpu_fallback_reset();
    char line[256];
    cpu_gemm_describe(line, sizeof line);
    print_message("cpu_gemm: %s\n", line);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rank3),
        cmocka_unit_test(rank4),
        cmocka_unit_test(small_items),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
