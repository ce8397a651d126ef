/*
 * test_quant_opencl.c — the opencl backend's quantized kernels (src/backends/opencl/quant.cl)
 * against ref's, through the public API: em_quantize_as gives the same bytes on opencl:0 as
 * on ref for every scheme (strided inputs, f16 scales down to subnormals, all-zero blocks,
 * ties of magnitude); em_dequantize the same f32 values for any view (transposed, sliced at
 * block boundaries and with steps, flipped, offset, rank 3); em_matmul with a quantized
 * weight within f32 tolerance of ref's in both of qmatmul's cases (blocks along the
 * reduction: the int8 product, with f32 or int8 activations; blocks along N: the f32
 * product), for odd shapes and transposed or sliced weights.
 *
 * The bytes are compared exactly: quant.cl's divisions are correctly rounded (its program is
 * built with -cl-fp32-correctly-rounded-divide-sqrt) and its rounding (rint, the f16
 * conversion) is ref's, so no step may differ. When the build has the opencl backend, the
 * whole set runs again on opencl:0 with its group size lowered to 64 (quant.cl's 8 x 8
 * tiles). Skips (exit 77) without an OpenCL device.
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

#ifdef EMBER_TEST_HAVE_OPENCL
#include "backends/opencl/ocl_internal.h"
#endif

static em_device ocl0, ref0 = {EM_BACKEND_REF, 0, false, EM_CKPT_NONE};

/* ---- data ---- */

static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* n values in rows of `cols`: uniform in [-1, 1) times a row's magnitude (1, 0.01, 100 or
 * 1e-5: f16 scales from normal to subnormal and zero), with an all-zero block of 32 now and
 * then, blocks whose largest magnitude comes twice with both signs (q4's "first such"),
 * minimums that are f16 ties and constant blocks (d = 0, m != 0). */
static float *data(size_t n, int64_t cols, uint32_t seed) {
    static const float mag[4] = {1.0f, 0.01f, 100.0f, 1e-5f};
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    uint32_t s = seed;
    for (size_t i = 0; i < n; i++) {
        float u = (float)(lcg(&s) & 0xffffff) / 8388608.0f - 1.0f;
        x[i] = u * mag[(i / (size_t)cols) % 4];
    }
    for (size_t b = 0; b + 32 <= n; b += 32) {
        if (b / 32 % 7 == 3) memset(x + b, 0, 32 * sizeof *x);
        if (b / 32 % 5 == 2) x[b + 4] = 1.5f, x[b + 9] = -1.5f;
        if (b / 32 % 5 == 4) x[b + 2] = -1.5f, x[b + 20] = 1.5f;
        /* minimums halfway between two f16 values: ties to even, down and up */
        if (b / 32 % 5 == 1) x[b + 7] = -(1.0f + 0x1p-11f);
        if (b / 32 % 5 == 3) x[b + 30] = -(1.0f + 0x3p-11f);
        if (b / 32 % 11 == 6) /* a constant block, halfway between two f16 subnormals */
            for (int j = 0; j < 32; j++) x[b + (size_t)j] = -0x5p-25f;
    }
    return x;
}

/* ---- helpers ---- */

/* True when opencl:0 exists. */
static bool have_device(void) { return em_device_parse("opencl:0", &ocl0) == EM_OK; }

static em_tensor *from(const float *x, const int64_t *shape, int rank, em_device dev) {
    em_tensor *t = NULL;
    assert_int_equal(em_tensor_from_data(x, EM_F32, shape, rank, dev, &t), EM_OK);
    return t;
}

/* The f32 values of t (n of them), malloc'ed. */
static float *values(const em_tensor *t) {
    size_t n = (size_t)em_tensor_numel(t);
    float *v = malloc((n ? n : 1) * sizeof *v);
    assert_non_null(v);
    assert_int_equal(em_tensor_to_data(t, v, n * sizeof *v), EM_OK);
    return v;
}

/* The bytes of quantized t in its contiguous layout, malloc'ed, and their count. */
static uint8_t *qbytes(const em_tensor *t, size_t *nb) {
    em_quant_scheme s;
    assert_int_equal(em_tensor_scheme(t, &s), EM_OK);
    assert_int_equal(em_quant_nbytes(&s, em_tensor_shape(t), em_tensor_rank(t), nb), EM_OK);
    uint8_t *b = malloc(*nb ? *nb : 1);
    assert_non_null(b);
    assert_int_equal(em_tensor_to_data(t, b, *nb), EM_OK);
    return b;
}

static const char *kind_name(const em_quant_scheme *s) {
    static const char *k[] = {"affine", "symmetric", "block", "block_min"};
    return k[s->kind];
}

/* The schemes of em_quant_kind (storage, kind, scale dtype). */
static const em_quant_scheme schemes[] = {
    {.storage = EM_Q8, .kind = EM_QK_AFFINE},
    {.storage = EM_Q4, .kind = EM_QK_AFFINE},
    {.storage = EM_Q8, .kind = EM_QK_SYMMETRIC},
    {.storage = EM_Q8, .kind = EM_QK_BLOCK, .scale_dtype = EM_F32},
    {.storage = EM_Q8, .kind = EM_QK_BLOCK, .scale_dtype = EM_F16},
    {.storage = EM_Q4, .kind = EM_QK_BLOCK, .scale_dtype = EM_F32},
    {.storage = EM_Q4, .kind = EM_QK_BLOCK, .scale_dtype = EM_F16},
    {.storage = EM_Q4, .kind = EM_QK_BLOCK_MIN, .scale_dtype = EM_F32},
    {.storage = EM_Q4, .kind = EM_QK_BLOCK_MIN, .scale_dtype = EM_F16},
};
#define NSCHEMES (sizeof schemes / sizeof schemes[0])

static bool blocked(const em_quant_scheme *s) {
    return s->kind == EM_QK_BLOCK || s->kind == EM_QK_BLOCK_MIN;
}

/* Asserts that qr (ref) and qo (opencl) hold the same scheme and bytes. */
static void same_bytes(const em_tensor *qr, const em_tensor *qo, const char *what) {
    em_quant_scheme sr, so;
    assert_int_equal(em_tensor_scheme(qr, &sr), EM_OK);
    assert_int_equal(em_tensor_scheme(qo, &so), EM_OK);
    assert_int_equal(sr.kind, so.kind);
    assert_true(sr.scale == so.scale);
    assert_int_equal(sr.zero_point, so.zero_point);
    size_t nr, no;
    uint8_t *br = qbytes(qr, &nr), *bo = qbytes(qo, &no);
    assert_int_equal(nr, no);
    for (size_t i = 0; i < nr; i++)
        if (br[i] != bo[i]) {
            print_message("%s: %s %s byte %zu of %zu: ref %02x, opencl %02x\n", what,
                          em_dtype_name(sr.storage), kind_name(&sr), i, nr, br[i], bo[i]);
            fail();
        }
    free(br), free(bo);
}

/* Asserts that the f32 tensors r (ref) and o (opencl) are equal within tol * max|r| (0:
 * exactly, bit for bit but for the sign of zero). */
static void close_to(const em_tensor *r, const em_tensor *o, double tol, const char *what) {
    assert_int_equal(em_tensor_rank(r), em_tensor_rank(o));
    for (int d = 0; d < em_tensor_rank(r); d++)
        assert_int_equal(em_tensor_shape(r)[d], em_tensor_shape(o)[d]);
    size_t n = (size_t)em_tensor_numel(r);
    float *vr = values(r), *vo = values(o);
    double amax = 0, worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) amax = fmax(amax, fabs(vr[i]));
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)vr[i] - vo[i]);
        if (e > worst || vr[i] != vr[i] || vo[i] != vo[i]) worst = e, at = i;
    }
    if (worst > tol * amax || (n && (vr[at] != vr[at] || vo[at] != vo[at]))) {
        print_message("%s: element %zu of %zu: ref %.9g, opencl %.9g (max |ref| %g)\n", what, at,
                      n, vr[at], vo[at], amax);
        fail();
    }
    free(vr), free(vo);
}

/* x quantized with s on ref and on opencl. */
static void quant_both(const float *x, const int64_t *shape, int rank, const em_quant_scheme *s,
                       em_tensor **qr, em_tensor **qo) {
    em_tensor *xr = from(x, shape, rank, ref0), *xo = from(x, shape, rank, ocl0);
    assert_int_equal(em_quantize_as(xr, s, qr), EM_OK);
    if (em_quantize_as(xo, s, qo) != EM_OK) {
        print_message("opencl em_quantize_as: %s\n", em_last_error());
        fail();
    }
    em_tensor_release(xr), em_tensor_release(xo);
}

/* The same quantized bytes (ref's quantization of x) as a tensor on ref and on opencl. */
static void qtensor_both(const float *x, const int64_t *shape, int rank,
                         const em_quant_scheme *s, em_tensor **qr, em_tensor **qo) {
    em_tensor *xr = from(x, shape, rank, ref0);
    assert_int_equal(em_quantize_as(xr, s, qr), EM_OK);
    em_quant_scheme rs;
    assert_int_equal(em_tensor_scheme(*qr, &rs), EM_OK);
    size_t nb;
    uint8_t *b = qbytes(*qr, &nb);
    assert_int_equal(em_tensor_from_quantized(b, nb, &rs, shape, rank, ocl0, qo), EM_OK);
    free(b);
    em_tensor_release(xr);
}

/* ---- tests ---- */

/* The opencl table has its own quantized kernels (not a NULL slot). */
static void test_native_slots(void **state) {
    (void)state;
    const em_backend_ops *o = em_backend_get_native(EM_BACKEND_OPENCL);
    assert_non_null(o);
    assert_non_null(o->quantize);
    assert_non_null(o->dequantize);
    assert_non_null(o->qmatmul);
}

/* em_quantize_as: the same bytes on opencl as on ref, every scheme, contiguous and strided. */
static void test_quantize_bytes(void **state) {
    (void)state;
    static const int64_t shapes[][3] = {{1, 32, 2}, {3, 96, 2}, {5, 64, 2}, {17, 288, 2},
                                        {2, 3, 3},  {4, 5, 2}}; /* {rows, cols, rank} */
    for (size_t si = 0; si < NSCHEMES; si++) {
        const em_quant_scheme *s = &schemes[si];
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            int64_t rows = shapes[k][0], cols = shapes[k][1];
            if (blocked(s) && cols % 32) continue;
            size_t n = (size_t)(rows * cols);
            float *x = data(n, cols, (uint32_t)(7 + si * 31 + k));
            em_tensor *qr, *qo;
            if (shapes[k][2] == 3) { /* rank 3: [rows, 1, cols] */
                int64_t sh3[3] = {rows, 1, cols};
                quant_both(x, sh3, 3, s, &qr, &qo);
            } else {
                int64_t sh[2] = {rows, cols};
                quant_both(x, sh, 2, s, &qr, &qo);
            }
            same_bytes(qr, qo, "quantize");
            em_tensor_release(qr), em_tensor_release(qo);
            if (!blocked(s)) { /* strided: x stored as [cols, rows], transposed */
                int64_t tsh[2] = {cols, rows};
                em_tensor *tr = from(x, tsh, 2, ref0), *to = from(x, tsh, 2, ocl0), *vr, *vo;
                assert_int_equal(em_transpose(tr, 0, 1, &vr), EM_OK);
                assert_int_equal(em_transpose(to, 0, 1, &vo), EM_OK);
                assert_int_equal(em_quantize_as(vr, s, &qr), EM_OK);
                assert_int_equal(em_quantize_as(vo, s, &qo), EM_OK);
                same_bytes(qr, qo, "quantize (strided input)");
                em_tensor_release(qr), em_tensor_release(qo);
                em_tensor_release(vr), em_tensor_release(vo);
                em_tensor_release(tr), em_tensor_release(to);
            }
            free(x);
        }
    }
}

/* Block quantize of a strided input whose last dim is a multiple of 32: a [64, 5]
 * tensor's transpose, and a slice with a step along the first dim. */
static void test_quantize_strided_blocks(void **state) {
    (void)state;
    for (size_t si = 0; si < NSCHEMES; si++) {
        const em_quant_scheme *s = &schemes[si];
        int64_t sh[2] = {64, 5};
        float *x = data(320, 5, (uint32_t)(101 + si));
        em_tensor *tr = from(x, sh, 2, ref0), *to = from(x, sh, 2, ocl0), *vr, *vo, *qr, *qo;
        assert_int_equal(em_transpose(tr, 0, 1, &vr), EM_OK);
        assert_int_equal(em_transpose(to, 0, 1, &vo), EM_OK);
        assert_int_equal(em_quantize_as(vr, s, &qr), EM_OK);
        assert_int_equal(em_quantize_as(vo, s, &qo), EM_OK);
        same_bytes(qr, qo, "quantize (transposed input)");
        em_tensor_release(qr), em_tensor_release(qo), em_tensor_release(vr), em_tensor_release(vo);
        em_tensor_release(tr), em_tensor_release(to);
        int64_t sh2[2] = {9, 96};
        float *y = data(9 * 96, 96, (uint32_t)(202 + si));
        tr = from(y, sh2, 2, ref0), to = from(y, sh2, 2, ocl0);
        assert_int_equal(em_slice(tr, 0, 1, INT64_MAX, 3, &vr), EM_OK);
        assert_int_equal(em_slice(to, 0, 1, INT64_MAX, 3, &vo), EM_OK);
        assert_int_equal(em_quantize_as(vr, s, &qr), EM_OK);
        assert_int_equal(em_quantize_as(vo, s, &qo), EM_OK);
        same_bytes(qr, qo, "quantize (sliced input)");
        em_tensor_release(qr), em_tensor_release(qo), em_tensor_release(vr), em_tensor_release(vo);
        em_tensor_release(tr), em_tensor_release(to);
        free(x), free(y);
    }
}

/* em_dequantize of the same bytes on both devices, through views. */
static void dequant_views(em_tensor *qr, em_tensor *qo, const char *what) {
    em_tensor *vr[8] = {0}, *vo[8] = {0};
    const char *names[8] = {"whole", "transposed", "sliced along the blocks",
                            "rows with a step", "flipped rows", "rows from 1"};
    int nv = 0;
    em_tensor_retain(qr), em_tensor_retain(qo);
    vr[nv] = qr, vo[nv++] = qo;
    assert_int_equal(em_transpose(qr, 0, 1, &vr[nv]), EM_OK);
    assert_int_equal(em_transpose(qo, 0, 1, &vo[nv++]), EM_OK);
    const int64_t cols = em_tensor_shape(qr)[1], rows = em_tensor_shape(qr)[0];
    if (cols >= 64) {
        assert_int_equal(em_slice(qr, 1, 32, cols, 1, &vr[nv]), EM_OK);
        assert_int_equal(em_slice(qo, 1, 32, cols, 1, &vo[nv++]), EM_OK);
    } else {
        names[nv] = "empty slice of rows";
        assert_int_equal(em_slice(qr, 0, 0, 0, 1, &vr[nv]), EM_OK);
        assert_int_equal(em_slice(qo, 0, 0, 0, 1, &vo[nv++]), EM_OK);
    }
    assert_int_equal(em_slice(qr, 0, 0, INT64_MAX, 2, &vr[nv]), EM_OK);
    assert_int_equal(em_slice(qo, 0, 0, INT64_MAX, 2, &vo[nv++]), EM_OK);
    int d0 = 0;
    assert_int_equal(em_flip(qr, &d0, 1, &vr[nv]), EM_OK);
    assert_int_equal(em_flip(qo, &d0, 1, &vo[nv++]), EM_OK);
    if (rows > 1) {
        assert_int_equal(em_slice(qr, 0, 1, INT64_MAX, 1, &vr[nv]), EM_OK);
        assert_int_equal(em_slice(qo, 0, 1, INT64_MAX, 1, &vo[nv++]), EM_OK);
    }
    for (int i = 0; i < nv; i++) {
        em_tensor *dr, *d_o;
        assert_int_equal(em_dequantize(vr[i], &dr), EM_OK);
        if (em_dequantize(vo[i], &d_o) != EM_OK) {
            print_message("opencl em_dequantize (%s, %s): %s\n", what, names[i], em_last_error());
            fail();
        }
        char msg[128];
        snprintf(msg, sizeof msg, "dequantize %s, %s", what, names[i]);
        close_to(dr, d_o, 0, msg);
        em_tensor_release(dr), em_tensor_release(d_o);
        em_tensor_release(vr[i]), em_tensor_release(vo[i]);
    }
}

static void test_dequantize_views(void **state) {
    (void)state;
    static const int64_t shapes[][2] = {{1, 32}, {3, 96}, {5, 64}, {17, 288}, {4, 5}};
    for (size_t si = 0; si < NSCHEMES; si++) {
        const em_quant_scheme *s = &schemes[si];
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            if (blocked(s) && shapes[k][1] % 32) continue;
            size_t n = (size_t)(shapes[k][0] * shapes[k][1]);
            float *x = data(n, shapes[k][1], (uint32_t)(303 + si * 17 + k));
            em_tensor *qr, *qo;
            qtensor_both(x, shapes[k], 2, s, &qr, &qo);
            char what[64];
            snprintf(what, sizeof what, "%s %s [%lld, %lld]", em_dtype_name(s->storage),
                     kind_name(s), (long long)shapes[k][0], (long long)shapes[k][1]);
            dequant_views(qr, qo, what);
            em_tensor_release(qr), em_tensor_release(qo);
            free(x);
        }
        /* rank 3, permuted: [2, 3, 64] -> [3, 2, 64] */
        int64_t sh3[3] = {2, 3, 64};
        float *x = data(384, 64, (uint32_t)(404 + si));
        em_tensor *qr, *qo, *pr, *po, *dr, *d_o;
        qtensor_both(x, sh3, 3, s, &qr, &qo);
        int perm[3] = {1, 0, 2};
        assert_int_equal(em_permute(qr, perm, 3, &pr), EM_OK);
        assert_int_equal(em_permute(qo, perm, 3, &po), EM_OK);
        assert_int_equal(em_dequantize(pr, &dr), EM_OK);
        assert_int_equal(em_dequantize(po, &d_o), EM_OK);
        close_to(dr, d_o, 0, "dequantize rank 3, permuted");
        em_tensor_release(dr), em_tensor_release(d_o), em_tensor_release(pr);
        em_tensor_release(po), em_tensor_release(qr), em_tensor_release(qo);
        free(x);
    }
}

/* em_matmul(a, b) on both devices; within f32 tolerance. */
static void matmul_both(em_tensor *ar, em_tensor *ao, em_tensor *br, em_tensor *bo,
                        const char *what) {
    em_tensor *r, *o;
    if (em_matmul(ar, br, &r) != EM_OK) {
        print_message("ref em_matmul (%s): %s\n", what, em_last_error());
        fail();
    }
    if (em_matmul(ao, bo, &o) != EM_OK) {
        print_message("opencl em_matmul (%s): %s\n", what, em_last_error());
        fail();
    }
    close_to(r, o, 2e-6, what);
    em_tensor_release(r), em_tensor_release(o);
}

/* Case (1): x [M, K] f32 @ W^T, W [N, K] quantized by rows (blocks along K: the int8
 * product), W whole, W's columns sliced at a block boundary, W's rows with a step; per-tensor
 * W also with K not a multiple of 32 and untransposed. */
static void test_qmatmul_int8(void **state) {
    (void)state;
    static const int64_t Ms[] = {1, 3, 17}, Ns[] = {5, 64}, Ks[] = {32, 96, 288, 40};
    for (size_t si = 0; si < NSCHEMES; si++) {
        const em_quant_scheme *s = &schemes[si];
        for (size_t ki = 0; ki < 4; ki++)
            for (size_t ni = 0; ni < 2; ni++) {
                const int64_t K = Ks[ki], N = Ns[ni];
                if (blocked(s) && K % 32) continue;
                float *w = data((size_t)(N * K), K, (uint32_t)(505 + si * 13 + ki * 3 + ni));
                int64_t wsh[2] = {N, K};
                em_tensor *wr, *wo;
                qtensor_both(w, wsh, 2, s, &wr, &wo);
                em_tensor *wtr, *wto;
                assert_int_equal(em_transpose(wr, 0, 1, &wtr), EM_OK);
                assert_int_equal(em_transpose(wo, 0, 1, &wto), EM_OK);
                for (size_t mi = 0; mi < 3; mi++) {
                    const int64_t M = Ms[mi];
                    float *x = data((size_t)(M * K), K, (uint32_t)(606 + mi + ki * 7));
                    int64_t xsh[2] = {M, K};
                    em_tensor *xr = from(x, xsh, 2, ref0), *xo = from(x, xsh, 2, ocl0);
                    char what[128];
                    snprintf(what, sizeof what, "x [%lld, %lld] @ W^T, W %s %s %s [%lld, %lld]",
                             (long long)M, (long long)K, em_dtype_name(s->storage),
                             kind_name(s), blocked(s) ? em_dtype_name(s->scale_dtype) : "",
                             (long long)N, (long long)K);
                    matmul_both(xr, xo, wtr, wto, what);
                    /* x's rows with a step and x transposed twice: a strided a */
                    em_tensor *xsr, *xso;
                    assert_int_equal(em_slice(xr, 0, 0, INT64_MAX, 2, &xsr), EM_OK);
                    assert_int_equal(em_slice(xo, 0, 0, INT64_MAX, 2, &xso), EM_OK);
                    matmul_both(xsr, xso, wtr, wto, "strided x @ W^T");
                    em_tensor_release(xsr), em_tensor_release(xso);
                    if (K >= 64 && K % 32 == 0) { /* W[:, 32:]^T with x[:, 32:] */
                        em_tensor *a1r, *a1o, *b1r, *b1o, *b2r, *b2o;
                        assert_int_equal(em_slice(xr, 1, 32, K, 1, &a1r), EM_OK);
                        assert_int_equal(em_slice(xo, 1, 32, K, 1, &a1o), EM_OK);
                        assert_int_equal(em_slice(wr, 1, 32, K, 1, &b1r), EM_OK);
                        assert_int_equal(em_slice(wo, 1, 32, K, 1, &b1o), EM_OK);
                        assert_int_equal(em_transpose(b1r, 0, 1, &b2r), EM_OK);
                        assert_int_equal(em_transpose(b1o, 0, 1, &b2o), EM_OK);
                        matmul_both(a1r, a1o, b2r, b2o, "x[:, 32:] @ W[:, 32:]^T");
                        em_tensor_release(a1r), em_tensor_release(a1o), em_tensor_release(b1r);
                        em_tensor_release(b1o), em_tensor_release(b2r), em_tensor_release(b2o);
                    }
                    if (N > 1) { /* W[::2]^T */
                        em_tensor *b1r, *b1o, *b2r, *b2o;
                        assert_int_equal(em_slice(wr, 0, 1, INT64_MAX, 2, &b1r), EM_OK);
                        assert_int_equal(em_slice(wo, 0, 1, INT64_MAX, 2, &b1o), EM_OK);
                        assert_int_equal(em_transpose(b1r, 0, 1, &b2r), EM_OK);
                        assert_int_equal(em_transpose(b1o, 0, 1, &b2o), EM_OK);
                        matmul_both(xr, xo, b2r, b2o, "x @ W[1::2]^T");
                        em_tensor_release(b1r), em_tensor_release(b1o);
                        em_tensor_release(b2r), em_tensor_release(b2o);
                    }
                    if (!blocked(s)) { /* per tensor: y [M, N] @ W [N, K] as it is */
                        float *y = data((size_t)(M * N), N, (uint32_t)(707 + mi));
                        int64_t ysh[2] = {M, N};
                        em_tensor *yr = from(y, ysh, 2, ref0), *yo = from(y, ysh, 2, ocl0);
                        matmul_both(yr, yo, wr, wo, "y @ W (per tensor)");
                        em_tensor_release(yr), em_tensor_release(yo);
                        free(y);
                    }
                    em_tensor_release(xr), em_tensor_release(xo);
                    free(x);
                }
                em_tensor_release(wtr), em_tensor_release(wto);
                em_tensor_release(wr), em_tensor_release(wo);
                free(w);
            }
    }
}

/* Both operands int8 quantized: symmetric @ symmetric, affine (zero point 0: a symmetric
 * range) @ symmetric, q8 blocks @ q8 blocks (f32 and f16 scales); and a quantized a @ a
 * float b (through the transposes). */
static void test_qmatmul_quantized_a(void **state) {
    (void)state;
    static const int64_t Ms[] = {1, 3, 17}, Ks[] = {32, 96, 288};
    const em_quant_scheme pairs[][2] = {
        {{.storage = EM_Q8, .kind = EM_QK_SYMMETRIC}, {.storage = EM_Q8, .kind = EM_QK_SYMMETRIC}},
        {{.storage = EM_Q8, .kind = EM_QK_SYMMETRIC},
         {.storage = EM_Q8, .kind = EM_QK_BLOCK, .scale_dtype = EM_F16}},
        {{.storage = EM_Q8, .kind = EM_QK_BLOCK, .scale_dtype = EM_F32},
         {.storage = EM_Q8, .kind = EM_QK_BLOCK, .scale_dtype = EM_F16}},
        {{.storage = EM_Q8, .kind = EM_QK_BLOCK, .scale_dtype = EM_F16},
         {.storage = EM_Q8, .kind = EM_QK_SYMMETRIC}},
    };
    for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++)
        for (size_t mi = 0; mi < 3; mi++)
            for (size_t ki = 0; ki < 3; ki++) {
                const int64_t M = Ms[mi], K = Ks[ki], N = 5 + 59 * (int64_t)(ki & 1);
                float *x = data((size_t)(M * K), K, (uint32_t)(808 + p * 9 + mi * 3 + ki));
                float *w = data((size_t)(N * K), K, (uint32_t)(909 + p * 9 + mi * 3 + ki));
                int64_t xsh[2] = {M, K}, wsh[2] = {N, K};
                em_tensor *ar, *ao, *wr, *wo, *br, *bo;
                qtensor_both(x, xsh, 2, &pairs[p][0], &ar, &ao);
                qtensor_both(w, wsh, 2, &pairs[p][1], &wr, &wo);
                assert_int_equal(em_transpose(wr, 0, 1, &br), EM_OK);
                assert_int_equal(em_transpose(wo, 0, 1, &bo), EM_OK);
                char what[128];
                snprintf(what, sizeof what, "int8 a (%s) [%lld, %lld] @ int8 W^T (%s), N %lld",
                         kind_name(&pairs[p][0]), (long long)M, (long long)K,
                         kind_name(&pairs[p][1]), (long long)N);
                matmul_both(ar, ao, br, bo, what);
                if (M > 1) { /* a[1:], a view with an offset */
                    em_tensor *a1r, *a1o;
                    assert_int_equal(em_slice(ar, 0, 1, INT64_MAX, 1, &a1r), EM_OK);
                    assert_int_equal(em_slice(ao, 0, 1, INT64_MAX, 1, &a1o), EM_OK);
                    matmul_both(a1r, a1o, br, bo, "int8 a[1:] @ int8 W^T");
                    em_tensor_release(a1r), em_tensor_release(a1o);
                }
                em_tensor_release(br), em_tensor_release(bo);
                em_tensor_release(wr), em_tensor_release(wo);
                /* quantized a @ float b [K, N] */
                float *f = data((size_t)(K * N), N, (uint32_t)(111 + p + ki));
                int64_t fsh[2] = {K, N};
                em_tensor *fr = from(f, fsh, 2, ref0), *fo = from(f, fsh, 2, ocl0);
                matmul_both(ar, ao, fr, fo, "quantized a @ float b");
                em_tensor_release(fr), em_tensor_release(fo);
                em_tensor_release(ar), em_tensor_release(ao);
                free(x), free(w), free(f);
            }
}

/* Case (2): g [M, N] f32 @ W [N, K] with W's blocks along K (b's blocks along its last dim:
 * the f32 product), W whole, W's columns sliced at block boundaries, W's rows with a step. */
static void test_qmatmul_along_n(void **state) {
    (void)state;
    static const int64_t Ms[] = {1, 3, 17}, Ns[] = {5, 64}, Ks[] = {32, 96, 288};
    for (size_t si = 3; si < NSCHEMES; si++) {
        const em_quant_scheme *s = &schemes[si];
        for (size_t ki = 0; ki < 3; ki++)
            for (size_t ni = 0; ni < 2; ni++) {
                const int64_t K = Ks[ki], N = Ns[ni];
                float *w = data((size_t)(N * K), K, (uint32_t)(1212 + si * 5 + ki * 2 + ni));
                int64_t wsh[2] = {N, K};
                em_tensor *wr, *wo;
                qtensor_both(w, wsh, 2, s, &wr, &wo);
                for (size_t mi = 0; mi < 3; mi++) {
                    const int64_t M = Ms[mi];
                    float *g = data((size_t)(M * N), N, (uint32_t)(1313 + mi + ni));
                    int64_t gsh[2] = {M, N};
                    em_tensor *gr = from(g, gsh, 2, ref0), *go = from(g, gsh, 2, ocl0);
                    char what[128];
                    snprintf(what, sizeof what, "g [%lld, %lld] @ W, W %s %s %s [%lld, %lld]",
                             (long long)M, (long long)N, em_dtype_name(s->storage),
                             kind_name(s), em_dtype_name(s->scale_dtype), (long long)N,
                             (long long)K);
                    matmul_both(gr, go, wr, wo, what);
                    if (K >= 64) {
                        em_tensor *b1r, *b1o;
                        assert_int_equal(em_slice(wr, 1, 32, K, 1, &b1r), EM_OK);
                        assert_int_equal(em_slice(wo, 1, 32, K, 1, &b1o), EM_OK);
                        matmul_both(gr, go, b1r, b1o, "g @ W[:, 32:]");
                        em_tensor_release(b1r), em_tensor_release(b1o);
                    }
                    if (N > 1) {
                        em_tensor *b1r, *b1o, *g1r, *g1o;
                        assert_int_equal(em_slice(wr, 0, 0, INT64_MAX, 2, &b1r), EM_OK);
                        assert_int_equal(em_slice(wo, 0, 0, INT64_MAX, 2, &b1o), EM_OK);
                        assert_int_equal(em_slice(gr, 1, 0, (N + 1) / 2, 1, &g1r), EM_OK);
                        assert_int_equal(em_slice(go, 1, 0, (N + 1) / 2, 1, &g1o), EM_OK);
                        matmul_both(g1r, g1o, b1r, b1o, "g[:, :N/2] @ W[::2]");
                        em_tensor_release(b1r), em_tensor_release(b1o);
                        em_tensor_release(g1r), em_tensor_release(g1o);
                    }
                    em_tensor_release(gr), em_tensor_release(go);
                    free(g);
                }
                em_tensor_release(wr), em_tensor_release(wo);
                free(w);
            }
    }
}

#ifdef EMBER_TEST_HAVE_OPENCL
/* A device whose work-groups hold 64 items, simulated by lowering the group size opencl:0
 * was opened with: quant.cl's 8 x 8 tiles (-DQT=8) and 1-d launches of 64. */
static void test_small_groups(void **state) {
    void *ctx = NULL;
    assert_int_equal(em_backend_get(EM_BACKEND_OPENCL)->open(0, &ctx), EM_OK);
    ocl_dev *d = ctx;
    const size_t saved = d->group;
    d->group = 64;
    test_quantize_bytes(state);
    test_dequantize_views(state);
    test_qmatmul_int8(state);
    test_qmatmul_quantized_a(state);
    test_qmatmul_along_n(state);
    d->group = saved;
}
#endif

int main(void) {
    if (!have_device()) {
        printf("test_quant_opencl: no OpenCL device (or no opencl backend): skipped (%s)\n",
               em_last_error());
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_native_slots),
        cmocka_unit_test(test_quantize_bytes),
        cmocka_unit_test(test_quantize_strided_blocks),
        cmocka_unit_test(test_dequantize_views),
        cmocka_unit_test(test_qmatmul_int8),
        cmocka_unit_test(test_qmatmul_quantized_a),
        cmocka_unit_test(test_qmatmul_along_n),
#ifdef EMBER_TEST_HAVE_OPENCL
        cmocka_unit_test(test_small_groups),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
