/*
 * test_quant_cpu.c — the cpu backend's quantized kernels (src/backends/cpu/quant.c,
 * quant_x86.c) against ref's, through the public API, at the qmatmul level this process runs
 * (ctest runs it again under each EMBER_CPU_QUANT: portable, avx2, avxvnni, avx512vnni;
 * a level the CPU lacks runs the best one below it):
 *   - the cpu table has kernels of its own (not ref's, which a host-memory backend would get
 *     for a NULL slot), and the level is the one asked for where the CPU has it;
 *   - em_quantize_as: the same bytes as ref for every scheme (affine q8 / q4, symmetric,
 *     q8 / q4 blocks and q4 blocks with minimums, f32 and f16 scales), from contiguous and
 *     transposed inputs; em_dequantize: the same bits, contiguous and transposed views;
 *   - em_matmul of f32 x @ W^T (W [N, K] quantized by rows, the int8 product): every scheme,
 *     M = 1, 3, 17, N = 1, 5, 33 (no multiple of the tiles' widths), K = 32, 96, 4096, within
 *     f32 rounding of ref (the integer sums are exact; only the f32 order of the blocks'
 *     terms differs); weights sliced (rows with a step, K at an offset), flipped, not
 *     transposed (per tensor: K a row of b), K not a multiple of 32 (per tensor); a
 *     transposed x; 1-d b; M = 130 at K = 4096 (several of the kernel's blocks of rows);
 *   - int8 a (symmetric, q8 blocks) @ int8 b, and weights blocked along N (case 2);
 *   - x with a NaN, an infinity (their rows NaN, as ref's) and a block of subnormals.
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

#include "backends/cpu/quant.h"
#include "ember/backend.h"
#include "ember/ember.h"

static em_device REFD, CPUD;

#define OK(call) assert_int_equal((call), EM_OK)

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float urand(void) { /* [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 4503599627370496.0 - 1.0);
}

static int setup(void **state) {
    (void)state;
    if (em_device_parse("ref", &REFD) != EM_OK || em_device_parse("cpu", &CPUD) != EM_OK)
        return -1;
    return 0;
}

/* A random f32 tensor of `shape` on dev; a few rows with outliers and one block of zeros, so
 * that scales differ from block to block and d = 0 happens. */
static em_tensor *rnd(const int64_t *shape, int rank, em_device dev, uint64_t seed) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= shape[i];
    float *v = malloc((size_t)n * sizeof *v);
    rng = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        v[i] = urand() * (1.0f + 3.0f * (float)((i / 32) % 3));
        if ((i / 32) % 7 == 5) v[i] = 0;
    }
    em_tensor *t;
    OK(em_tensor_from_data(v, EM_F32, shape, rank, dev, &t));
    free(v);
    return t;
}

static float *values(const em_tensor *t) {
    const int64_t n = em_tensor_numel(t);
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    OK(em_tensor_to_data(t, v, (size_t)n * sizeof *v));
    return v;
}

static uint8_t *qbytes(const em_tensor *t, size_t *nbytes) {
    em_quant_scheme s;
    OK(em_tensor_scheme(t, &s));
    OK(em_quant_nbytes(&s, em_tensor_shape(t), em_tensor_rank(t), nbytes));
    uint8_t *b = malloc(*nbytes + 1);
    OK(em_tensor_to_data(t, b, *nbytes));
    return b;
}

typedef struct scheme_case {
    const char *name;
    em_quant_scheme s;
    bool block;
} scheme_case;

static const scheme_case SCHEMES[] = {
    {"affine q8", {.storage = EM_Q8}, false},
    {"affine q4", {.storage = EM_Q4}, false},
    {"symmetric q8", {.storage = EM_Q8, .kind = EM_QK_SYMMETRIC}, false},
    {"q8 blocks f32", {.storage = EM_Q8, .kind = EM_QK_BLOCK, .scale_dtype = EM_F32}, true},
    {"q8 blocks f16", {.storage = EM_Q8, .kind = EM_QK_BLOCK, .scale_dtype = EM_F16}, true},
    {"q4 blocks f32", {.storage = EM_Q4, .kind = EM_QK_BLOCK, .scale_dtype = EM_F32}, true},
    {"q4 blocks f16", {.storage = EM_Q4, .kind = EM_QK_BLOCK, .scale_dtype = EM_F16}, true},
    {"q4 blocks+min f32", {.storage = EM_Q4, .kind = EM_QK_BLOCK_MIN, .scale_dtype = EM_F32},
     true},
    {"q4 blocks+min f16", {.storage = EM_Q4, .kind = EM_QK_BLOCK_MIN, .scale_dtype = EM_F16},
     true},
};
#define NSCHEMES (int)(sizeof SCHEMES / sizeof SCHEMES[0])

/* ---- the table and the level ---- */

static void kernels_and_level(void **state) {
    (void)state;
    const em_backend_ops *cpu = em_backend_get(EM_BACKEND_CPU), *ref = em_backend_get(EM_BACKEND_REF);
    assert_non_null(cpu);
    assert_non_null(ref);
    assert_non_null(cpu->quantize);
    assert_non_null(cpu->dequantize);
    assert_non_null(cpu->qmatmul);
    assert_ptr_not_equal(cpu->quantize, ref->quantize);
    assert_ptr_not_equal(cpu->dequantize, ref->dequantize);
    assert_ptr_not_equal(cpu->qmatmul, ref->qmatmul);
    em_tensor *t;
    OK(em_zeros((int64_t[]){1}, 1, EM_F32, CPUD, &t)); /* opens the cpu device */
    em_tensor_release(t);
    const int level = cpu_quant_level();
    const char *want = getenv("EMBER_CPU_QUANT");
    printf("qmatmul level: %s (EMBER_CPU_QUANT=%s)\n", cpu_quant_level_name(level),
           want ? want : "(unset)");
    const char *isa = getenv("EMBER_CPU_ISA");
    for (int l = 0; want && !isa && l < CPU_QL_COUNT; l++)
        if (strcasecmp(want, cpu_quant_level_name(l)) == 0 && cpu_quant_level_supported(l))
            assert_int_equal(level, l);
}

/* ---- quantize and dequantize: ref's bytes and values exactly ---- */

static void check_quantize(const em_tensor *xr, const em_tensor *xc, const scheme_case *sc) {
    em_tensor *qr, *qc, *dr, *dc;
    OK(em_quantize_as(xr, &sc->s, &qr));
    OK(em_quantize_as(xc, &sc->s, &qc));
    size_t nr, nc;
    uint8_t *br = qbytes(qr, &nr), *bc = qbytes(qc, &nc);
    assert_int_equal(nr, nc);
    if (memcmp(br, bc, nr) != 0) fail_msg("%s: cpu's quantized bytes differ from ref's", sc->name);
    /* dequantize ref's bytes moved to cpu (the same values), and a transposed view of them */
    em_tensor *qm;
    OK(em_to_device(qr, CPUD, &qm));
    OK(em_dequantize(qr, &dr));
    OK(em_dequantize(qm, &dc));
    const int64_t n = em_tensor_numel(dr);
    float *vr = values(dr), *vc = values(dc);
    if (memcmp(vr, vc, (size_t)n * sizeof(float)) != 0)
        fail_msg("%s: cpu's dequantized values differ from ref's", sc->name);
    free(vr), free(vc);
    em_tensor_release(dr), em_tensor_release(dc);
    if (em_tensor_rank(qr) == 2) {
        em_tensor *tr, *tc;
        OK(em_transpose(qr, 0, 1, &tr));
        OK(em_transpose(qm, 0, 1, &tc));
        OK(em_dequantize(tr, &dr));
        OK(em_dequantize(tc, &dc));
        vr = values(dr), vc = values(dc);
        if (memcmp(vr, vc, (size_t)n * sizeof(float)) != 0)
            fail_msg("%s: cpu's dequantized transposed view differs from ref's", sc->name);
        free(vr), free(vc);
        em_tensor_release(dr), em_tensor_release(dc), em_tensor_release(tr),
            em_tensor_release(tc);
    }
    free(br), free(bc);
    em_tensor_release(qr), em_tensor_release(qc), em_tensor_release(qm);
}

static void quantize_dequantize(void **state) {
    (void)state;
    const int64_t shapes[][2] = {{3, 64}, {17, 96}, {64, 4096}, {1, 32}};
    for (int s = 0; s < NSCHEMES; s++)
        for (int i = 0; i < 4; i++) {
            em_tensor *xr = rnd(shapes[i], 2, REFD, (uint64_t)(10 * s + i)), *xc;
            OK(em_to_device(xr, CPUD, &xc));
            check_quantize(xr, xc, &SCHEMES[s]);
            /* from a transposed f32 input (any strides): x^T of a [K, M] tensor */
            const int64_t ts[2] = {shapes[i][1], shapes[i][0]};
            em_tensor *yr = rnd(ts, 2, REFD, (uint64_t)(10 * s + i + 5)), *yc, *tr, *tc;
            OK(em_to_device(yr, CPUD, &yc));
            OK(em_transpose(yr, 0, 1, &tr));
            OK(em_transpose(yc, 0, 1, &tc));
            check_quantize(tr, tc, &SCHEMES[s]);
            em_tensor_release(xr), em_tensor_release(xc), em_tensor_release(yr),
                em_tensor_release(yc), em_tensor_release(tr), em_tensor_release(tc);
        }
    /* the per-tensor kinds at any length (no blocks) */
    for (int s = 0; s < 3; s++) {
        em_tensor *xr = rnd((int64_t[]){7, 50}, 2, REFD, 99), *xc;
        OK(em_to_device(xr, CPUD, &xc));
        check_quantize(xr, xc, &SCHEMES[s]);
        em_tensor_release(xr), em_tensor_release(xc);
    }
}

/* ---- matmul ---- */

/* out_cpu against out_ref: within 1e-5 of sum_k |x| |w| (what f32 reordering can move; a
 * block's term wrong is ~32 / K of it, orders of magnitude more). */
static void compare_mm(const em_tensor *outr, const em_tensor *outc, const em_tensor *xr,
                       const em_tensor *wr, const char *what) {
    assert_int_equal(em_tensor_rank(outr), em_tensor_rank(outc));
    const int64_t n = em_tensor_numel(outr);
    assert_int_equal(n, em_tensor_numel(outc));
    /* the bound from |x| @ |dequantize(w)| on ref */
    em_tensor *ax, *aw, *bound;
    if (em_tensor_kind(xr) == EM_KIND_QUANTIZED) {
        em_tensor *t;
        OK(em_dequantize(xr, &t));
        OK(em_abs(t, &ax));
        em_tensor_release(t);
    } else {
        OK(em_abs(xr, &ax));
    }
    if (em_tensor_kind(wr) == EM_KIND_QUANTIZED) {
        em_tensor *t;
        OK(em_dequantize(wr, &t));
        OK(em_abs(t, &aw));
        em_tensor_release(t);
    } else {
        OK(em_abs(wr, &aw));
    }
    OK(em_matmul(ax, aw, &bound));
    float *r = values(outr), *c = values(outc), *b = values(bound);
    for (int64_t i = 0; i < n; i++) {
        if (isnan(r[i]) || isnan(c[i])) { /* a NaN or an infinity in x's row: NaN, as ref */
            if (!(isnan(r[i]) && isnan(c[i])))
                fail_msg("%s: element %lld: cpu %g, ref %g", what, (long long)i, (double)c[i],
                         (double)r[i]);
            continue;
        }
        const float tol = 1e-5f * b[i] + 1e-6f;
        if (!(fabsf(r[i] - c[i]) <= tol))
            fail_msg("%s: element %lld: cpu %.9g, ref %.9g (tolerance %.3g)", what, (long long)i,
                     (double)c[i], (double)r[i], (double)tol);
    }
    free(r), free(c), free(b);
    em_tensor_release(ax), em_tensor_release(aw), em_tensor_release(bound);
}

/* x [M, K] @ w (a quantized [K, N] view built by `view` from the weight on each device). */
typedef em_status (*view_fn)(const em_tensor *w, em_tensor **out);

static em_status v_transpose(const em_tensor *w, em_tensor **out) {
    return em_transpose(w, 0, 1, out);
}

static void run_mm(const em_tensor *xr, const em_tensor *wqr, view_fn view, const char *what) {
    em_tensor *xc, *wqc, *vr, *vc, *or, *oc;
    OK(em_to_device(xr, CPUD, &xc));
    OK(em_to_device(wqr, CPUD, &wqc));
    if (view) {
        OK(view(wqr, &vr));
        OK(view(wqc, &vc));
    } else {
        OK(em_to_device(wqr, REFD, &vr)); /* a new reference to the same tensor */
        vc = wqc;
        em_tensor_retain(vc);
    }
    OK(em_matmul(xr, vr, &or));
    OK(em_matmul(xc, vc, &oc));
    compare_mm(or, oc, xr, vr, what);
    em_tensor_release(xc), em_tensor_release(wqc), em_tensor_release(vr), em_tensor_release(vc),
        em_tensor_release(or), em_tensor_release(oc);
}

static void matmul_weights(void **state) {
    (void)state;
    const int64_t Ms[] = {1, 3, 17}, Ns[] = {1, 5, 33}, Ks[] = {32, 96, 4096};
    char what[160];
    for (int s = 0; s < NSCHEMES; s++)
        for (int ki = 0; ki < 3; ki++)
            for (int mi = 0; mi < 3; mi++)
                for (int ni = 0; ni < 3; ni++) {
                    const int64_t M = Ms[mi], N = Ns[ni], K = Ks[ki];
                    if (K == 4096 && M * N > 17 * 5) continue; /* ref is slow */
                    em_tensor *x = rnd((int64_t[]){M, K}, 2, REFD, (uint64_t)(M * 7 + K));
                    em_tensor *w = rnd((int64_t[]){N, K}, 2, REFD, (uint64_t)(N * 13 + K + s));
                    em_tensor *wq;
                    OK(em_quantize_as(w, &SCHEMES[s].s, &wq));
                    snprintf(what, sizeof what, "%s: x [%lld, %lld] @ W^T, W [%lld, %lld]",
                             SCHEMES[s].name, (long long)M, (long long)K, (long long)N,
                             (long long)K);
                    run_mm(x, wq, v_transpose, what);
                    em_tensor_release(x), em_tensor_release(w), em_tensor_release(wq);
                }
    /* more rows than one of the kernel's row blocks holds (64 at K = 4096), and tails */
    for (int s = 3; s < NSCHEMES; s += 2) {
        em_tensor *x = rnd((int64_t[]){130, 4096}, 2, REFD, 5);
        em_tensor *w = rnd((int64_t[]){9, 4096}, 2, REFD, 6), *wq;
        OK(em_quantize_as(w, &SCHEMES[s].s, &wq));
        snprintf(what, sizeof what, "%s: x [130, 4096] @ W^T, W [9, 4096]", SCHEMES[s].name);
        run_mm(x, wq, v_transpose, what);
        em_tensor_release(x), em_tensor_release(w), em_tensor_release(wq);
    }
}

/* sliced weights: every other row of W, and K from 64 on (block-aligned), then W^T */
static em_status v_slice_t(const em_tensor *w, em_tensor **out) {
    em_tensor *a, *b;
    em_status s = em_slice(w, 0, 1, em_tensor_shape(w)[0], 2, &a);
    if (s != EM_OK) return s;
    s = em_slice(a, 1, 64, em_tensor_shape(a)[1], 1, &b);
    em_tensor_release(a);
    if (s != EM_OK) return s;
    s = em_transpose(b, 0, 1, out);
    em_tensor_release(b);
    return s;
}

/* flipped rows of W (a negative stride between columns of W^T) */
static em_status v_flip_t(const em_tensor *w, em_tensor **out) {
    em_tensor *a;
    em_status s = em_flip(w, (int[]){0}, 1, &a);
    if (s != EM_OK) return s;
    s = em_transpose(a, 0, 1, out);
    em_tensor_release(a);
    return s;
}

static void matmul_views(void **state) {
    (void)state;
    char what[160];
    for (int s = 0; s < NSCHEMES; s++) {
        const int64_t M = 5, N = 11, K = 160;
        em_tensor *w = rnd((int64_t[]){2 * N + 1, K + 64}, 2, REFD, 77 + (uint64_t)s), *wq;
        OK(em_quantize_as(w, &SCHEMES[s].s, &wq));
        em_tensor *x = rnd((int64_t[]){M, K}, 2, REFD, 78);
        snprintf(what, sizeof what, "%s: sliced W^T", SCHEMES[s].name);
        run_mm(x, wq, v_slice_t, what);
        em_tensor *x2 = rnd((int64_t[]){M, K + 64}, 2, REFD, 79);
        snprintf(what, sizeof what, "%s: flipped W^T", SCHEMES[s].name);
        run_mm(x2, wq, v_flip_t, what);
        /* a transposed x: x^T of a [K + 64, M] tensor */
        em_tensor *xt0 = rnd((int64_t[]){K + 64, M}, 2, REFD, 80), *xt;
        OK(em_transpose(xt0, 0, 1, &xt));
        snprintf(what, sizeof what, "%s: transposed x @ W^T", SCHEMES[s].name);
        run_mm(xt, wq, v_transpose, what);
        /* 1-d b: x @ w[0] */
        em_tensor *row;
        OK(em_slice(wq, 0, 0, 1, 1, &row));
        em_tensor *row1;
        OK(em_reshape(row, (int64_t[]){K + 64}, 1, &row1));
        snprintf(what, sizeof what, "%s: x @ a 1-d weight", SCHEMES[s].name);
        run_mm(x2, row1, NULL, what);
        em_tensor_release(row), em_tensor_release(row1);
        em_tensor_release(w), em_tensor_release(wq), em_tensor_release(x), em_tensor_release(x2),
            em_tensor_release(xt0), em_tensor_release(xt);
        if (SCHEMES[s].block) continue;
        /* per tensor: b not transposed ([K, N] row-major, K a row) and K not a multiple of 32 */
        for (int64_t k = 50; k <= 64; k += 14) {
            em_tensor *b = rnd((int64_t[]){k, 9}, 2, REFD, 81 + (uint64_t)k), *bq;
            OK(em_quantize_as(b, &SCHEMES[s].s, &bq));
            em_tensor *xa = rnd((int64_t[]){4, k}, 2, REFD, 82);
            snprintf(what, sizeof what, "%s: x @ b [%lld, 9]", SCHEMES[s].name, (long long)k);
            run_mm(xa, bq, NULL, what);
            em_tensor_release(b), em_tensor_release(bq), em_tensor_release(xa);
        }
    }
}

/* int8 a @ int8 b, and weights blocked along N (case 2) */
static void matmul_int8_and_case2(void **state) {
    (void)state;
    char what[160];
    const em_quant_scheme sym = {.storage = EM_Q8, .kind = EM_QK_SYMMETRIC};
    const em_quant_scheme blk = {.storage = EM_Q8, .kind = EM_QK_BLOCK, .scale_dtype = EM_F32};
    const em_quant_scheme blk16 = {.storage = EM_Q8, .kind = EM_QK_BLOCK, .scale_dtype = EM_F16};
    const em_quant_scheme *as[] = {&sym, &blk, &blk16};
    const em_quant_scheme *bs[] = {&sym, &blk, &blk16};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            if (i == 0 && j != 0) continue; /* symmetric a with block b: not an int8 pair */
            if (i != 0 && j == 0) continue;
            em_tensor *x = rnd((int64_t[]){6, 128}, 2, REFD, 90), *w = rnd((int64_t[]){7, 128}, 2, REFD, 91);
            em_tensor *xq, *wq;
            OK(em_quantize_as(x, as[i], &xq));
            OK(em_quantize_as(w, bs[j], &wq));
            snprintf(what, sizeof what, "int8 a (%d) @ int8 W^T (%d)", i, j);
            run_mm(xq, wq, v_transpose, what);
            em_tensor_release(x), em_tensor_release(w), em_tensor_release(xq),
                em_tensor_release(wq);
        }
    for (int s = 3; s < NSCHEMES; s++) {
        /* x [M, K] @ W [K, N] with W's blocks along N (the last dim) */
        em_tensor *x = rnd((int64_t[]){9, 40}, 2, REFD, 92), *w = rnd((int64_t[]){40, 96}, 2, REFD, 93);
        em_tensor *wq;
        OK(em_quantize_as(w, &SCHEMES[s].s, &wq));
        snprintf(what, sizeof what, "%s: x @ W, blocks along N", SCHEMES[s].name);
        run_mm(x, wq, NULL, what);
        em_tensor_release(x), em_tensor_release(w), em_tensor_release(wq);
    }
}

/* a NaN and an infinity in x: their rows' outputs NaN, the others as ref's; a block of
 * subnormal activations (d below FLT_MIN) quantizes to 0 */
static void matmul_edges(void **state) {
    (void)state;
    char what[160];
    for (int s = 0; s < NSCHEMES; s++) {
        em_tensor *x = rnd((int64_t[]){5, 96}, 2, REFD, 94), *w = rnd((int64_t[]){11, 96}, 2, REFD, 95);
        float xv[5 * 96];
        OK(em_tensor_to_data(x, xv, sizeof xv));
        xv[3] = NAN;
        xv[96 + 40] = -INFINITY;
        for (int i = 0; i < 32; i++) xv[3 * 96 + 32 + i] = (float)(i - 20) * 1e-41f;
        em_tensor *xe, *wq;
        OK(em_tensor_from_data(xv, EM_F32, (int64_t[]){5, 96}, 2, REFD, &xe));
        OK(em_quantize_as(w, &SCHEMES[s].s, &wq));
        snprintf(what, sizeof what, "%s: x with NaN, inf and subnormals @ W^T", SCHEMES[s].name);
        run_mm(xe, wq, v_transpose, what);
        em_tensor_release(x), em_tensor_release(w), em_tensor_release(xe), em_tensor_release(wq);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(kernels_and_level),
        cmocka_unit_test(quantize_dequantize),
        cmocka_unit_test(matmul_weights),
        cmocka_unit_test(matmul_views),
        cmocka_unit_test(matmul_int8_and_case2),
        cmocka_unit_test(matmul_edges),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
