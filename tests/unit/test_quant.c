/* test_quant.c — quantized tensors through the public API on ref: each scheme's bytes as
 * ember.h documents them, round trips, block-preserving views, copies across devices, the
 * matrix product with a quantized operand (and its gradient), and bad input. */
#include "errcheck.h"

static em_device dev_of(const char *name) {
    em_device d;
    assert_int_equal(em_device_parse(name, &d), EM_OK);
    return d;
}

static em_tensor *f32_on(const float *v, const int64_t *shape, int rank, const char *dev) {
    em_tensor *t = NULL;
    if (em_tensor_from_data(v, EM_F32, shape, rank, dev_of(dev), &t) != EM_OK)
        fail_msg("from_data: %s", em_last_error());
    return t;
}

static em_tensor *quant(const em_tensor *x, em_dtype storage, em_quant_kind kind, em_dtype sdt) {
    em_quant_scheme s = {.storage = storage, .kind = kind, .scale_dtype = sdt};
    em_tensor *q = NULL;
    if (em_quantize_as(x, &s, &q) != EM_OK) fail_msg("em_quantize_as: %s", em_last_error());
    return q;
}

static float *values(const em_tensor *t) {
    em_tensor *f = NULL;
    if (em_dtype_kind(em_tensor_dtype(t)) == EM_KIND_QUANTIZED) {
        if (em_dequantize(t, &f) != EM_OK) fail_msg("em_dequantize: %s", em_last_error());
    } else if (em_cast(t, EM_F32, &f) != EM_OK) {
        fail_msg("em_cast: %s", em_last_error());
    }
    size_t n = (size_t)em_tensor_numel(f);
    float *v = malloc((n ? n : 1) * sizeof *v);
    assert_non_null(v);
    assert_int_equal(em_tensor_to_data(f, v, n * sizeof *v), EM_OK);
    em_tensor_release(f);
    return v;
}

static uint8_t *bytes_of(const em_tensor *q, size_t *n) {
    em_quant_scheme s;
    assert_int_equal(em_tensor_scheme(q, &s), EM_OK);
    /* (em_quant_nbytes takes the block-axis-last shape: a transposed view's is not that) */
    const int64_t numel = em_tensor_numel(q);
    *n = s.kind >= EM_QK_BLOCK ? (size_t)(numel / 32) * em_quant_block_bytes(&s) : (size_t)numel;
    if (s.axis == em_tensor_rank(q) - 1 || s.kind < EM_QK_BLOCK) {
        size_t n2;
        assert_int_equal(em_quant_nbytes(&s, em_tensor_shape(q), em_tensor_rank(q), &n2), EM_OK);
        assert_int_equal(n2, *n);
    }
    uint8_t *b = malloc(*n ? *n : 1);
    assert_non_null(b);
    assert_int_equal(em_tensor_to_data(q, b, *n), EM_OK);
    return b;
}

static float ld_f32(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}

/* A deterministic float pattern with both signs and a few exact zeros. */
static void pattern(float *v, int64_t n, unsigned seed) {
    uint32_t x = 2463534242u ^ seed;
    for (int64_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        v[i] = (float)((int32_t)(x % 2001) - 1000) / 250.0f;
        if (i % 37 == 5) v[i] = 0;
    }
}

/* ---- the documented bytes ---- */

static void test_block_bytes(void **state) {
    (void)state;
    const em_quant_scheme k[] = {
        {.storage = EM_Q8, .kind = EM_QK_BLOCK},
        {.storage = EM_Q8, .kind = EM_QK_BLOCK, .scale_dtype = EM_F16},
        {.storage = EM_Q4, .kind = EM_QK_BLOCK},
        {.storage = EM_Q4, .kind = EM_QK_BLOCK, .scale_dtype = EM_F16},
        {.storage = EM_Q4, .kind = EM_QK_BLOCK_MIN},
        {.storage = EM_Q4, .kind = EM_QK_BLOCK_MIN, .scale_dtype = EM_F16},
        {.storage = EM_Q8, .kind = EM_QK_AFFINE},
        {.storage = EM_Q4, .kind = EM_QK_BLOCK_MIN, .scale_dtype = EM_I8},
    };
    const size_t want[] = {36, 34, 20, 18, 24, 20, 1, 0};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        assert_int_equal(em_quant_block_bytes(&k[i]), want[i]);
}

static void test_q8_block_layout(void **state) {
    (void)state;
    float x[64];
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 10) * 0.5f; /* amax 10.5 */
    for (int j = 32; j < 64; j++) x[j] = 0;                     /* d = 0: q = 0 */
    em_tensor *t = f32_on(x, (const int64_t[]){2, 32}, 2, "ref");
    em_tensor *q = quant(t, EM_Q8, EM_QK_BLOCK, EM_F32);
    size_t n;
    uint8_t *b = bytes_of(q, &n);
    assert_int_equal(n, 72);
    const float d = 10.5f / 127.0f, id = 1.0f / d;
    assert_true(ld_f32(b) == d);
    for (int j = 0; j < 32; j++) assert_int_equal((int8_t)b[4 + j], (int)rintf(x[j] * id));
    assert_true(ld_f32(b + 36) == 0.0f);
    for (int j = 0; j < 32; j++) assert_int_equal(b[40 + j], 0);
    em_quant_scheme s;
    assert_int_equal(em_tensor_scheme(q, &s), EM_OK);
    assert_int_equal(s.kind, EM_QK_BLOCK);
    assert_int_equal(s.block, 32);
    assert_int_equal(s.axis, 1);
    assert_int_equal(em_tensor_dtype(q), EM_Q8);
    free(b);
    em_tensor_release(q);
    em_tensor_release(t);
}

static void test_q4_layouts(void **state) {
    (void)state;
    float x[32];
    for (int j = 0; j < 32; j++) x[j] = (float)j / 4.0f - 2.0f; /* -2 .. 5.75 */
    x[7] = -6.0f;                                              /* the largest magnitude */
    em_tensor *t = f32_on(x, (const int64_t[]){32}, 1, "ref");
    /* Q4_0: d = v / -8 with v = -6 */
    em_tensor *q = quant(t, EM_Q4, EM_QK_BLOCK, EM_F32);
    size_t n;
    uint8_t *b = bytes_of(q, &n);
    assert_int_equal(n, 20);
    const float d = -6.0f / -8.0f, id = 1.0f / d;
    assert_true(ld_f32(b) == d);
    for (int j = 0; j < 32; j++) {
        int want = (int)fminf(fmaxf(rintf(x[j] * id) + 8, 0), 15);
        int got = j < 16 ? b[4 + j] & 15 : b[4 + j - 16] >> 4;
        assert_int_equal(got, want);
    }
    assert_int_equal(b[4 + 7] & 15, 0); /* v itself is q = 0 */
    free(b);
    em_tensor_release(q);
    /* Q4_1 with f16 scales: d = (max - min) / 15, m = min, both rounded to f16 */
    q = quant(t, EM_Q4, EM_QK_BLOCK_MIN, EM_F16);
    b = bytes_of(q, &n);
    assert_int_equal(n, 20);
    const float d1 = em_f16_to_f32(em_f32_to_f16((5.75f - -6.0f) / 15.0f));
    const float m1 = em_f16_to_f32(em_f32_to_f16(-6.0f));
    assert_true(em_f16_to_f32((uint16_t)(b[0] | b[1] << 8)) == d1);
    assert_true(em_f16_to_f32((uint16_t)(b[2] | b[3] << 8)) == m1);
    float *r = values(q);
    for (int j = 0; j < 32; j++) {
        int want = (int)fminf(fmaxf(rintf((x[j] - m1) * (1.0f / d1)), 0), 15);
        int got = j < 16 ? b[4 + j] & 15 : b[4 + j - 16] >> 4;
        assert_int_equal(got, want);
        assert_true(r[j] == d1 * (float)want + m1);
    }
    free(r);
    free(b);
    em_tensor_release(q);
    em_tensor_release(t);
}

/* Every scheme's round trip stays within half a step of the data (a step per block). */
static void test_round_trip_error(void **state) {
    (void)state;
    enum { R = 3, C = 96 };
    float x[R * C];
    pattern(x, R * C, 1);
    em_tensor *t = f32_on(x, (const int64_t[]){R, C}, 2, "ref");
    const struct {
        em_dtype st;
        em_quant_kind k;
        em_dtype sdt;
        float steps; /* the levels a block's range spans */
    } cases[] = {
        {EM_Q8, EM_QK_AFFINE, EM_F32, 255}, {EM_Q4, EM_QK_AFFINE, EM_F32, 15},
        {EM_Q8, EM_QK_SYMMETRIC, EM_F32, 254}, {EM_Q8, EM_QK_BLOCK, EM_F32, 254},
        {EM_Q8, EM_QK_BLOCK, EM_F16, 254}, {EM_Q4, EM_QK_BLOCK, EM_F32, 15},
        {EM_Q4, EM_QK_BLOCK, EM_F16, 15}, {EM_Q4, EM_QK_BLOCK_MIN, EM_F32, 15},
        {EM_Q4, EM_QK_BLOCK_MIN, EM_F16, 15},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        em_tensor *q = quant(t, cases[c].st, cases[c].k, cases[c].sdt);
        float *r = values(q);
        const bool block = cases[c].k >= EM_QK_BLOCK;
        for (int64_t i = 0; i < R * C; i += block ? 32 : R * C) {
            const int64_t n = block ? 32 : R * C;
            float lo = 0, hi = 0;
            for (int64_t j = i; j < i + n; j++) lo = fminf(lo, x[j]), hi = fmaxf(hi, x[j]);
            /* Q4_0 spans 2 * amax over 16 levels, the others their range */
            float step = (hi - lo) / cases[c].steps * 1.01f + 1e-3f;
            if (cases[c].st == EM_Q4 && cases[c].k == EM_QK_BLOCK)
                step = 2 * fmaxf(-lo, hi) / 16 * 1.01f + 1e-3f;
            for (int64_t j = i; j < i + n; j++)
                if (fabsf(r[j] - x[j]) > step)
                    fail_msg("case %zu: element %lld: %g round-trips to %g (step %g)", c,
                             (long long)j, (double)x[j], (double)r[j], (double)step);
        }
        free(r);
        em_tensor_release(q);
    }
    em_tensor_release(t);
}

static void test_from_bytes(void **state) {
    (void)state;
    float x[2 * 64];
    pattern(x, 128, 2);
    em_tensor *t = f32_on(x, (const int64_t[]){2, 64}, 2, "ref");
    em_tensor *q = quant(t, EM_Q4, EM_QK_BLOCK, EM_F16);
    size_t n;
    uint8_t *b = bytes_of(q, &n);
    em_quant_scheme s = {.storage = EM_Q4, .kind = EM_QK_BLOCK, .scale_dtype = EM_F16};
    em_tensor *q2 = NULL;
    assert_int_equal(em_tensor_from_quantized(b, n, &s, (const int64_t[]){2, 64}, 2,
                                              dev_of("ref"), &q2),
                     EM_OK);
    size_t n2;
    uint8_t *b2 = bytes_of(q2, &n2);
    assert_int_equal(n2, n);
    assert_memory_equal(b, b2, n);
    /* a per-tensor one, with its scale and zero point */
    em_quant_scheme pt = {.storage = EM_Q8, .scale = 0.5f, .zero_point = 3};
    int8_t raw[4] = {3, 5, -1, 127};
    em_tensor *q3 = NULL;
    assert_int_equal(em_tensor_from_quantized(raw, 4, &pt, (const int64_t[]){4}, 1,
                                              dev_of("ref"), &q3),
                     EM_OK);
    float *r = values(q3);
    assert_true(r[0] == 0 && r[1] == 1 && r[2] == -2 && r[3] == 62);
    double item;
    em_tensor *one = NULL;
    assert_int_equal(em_slice(q3, 0, 1, 2, 1, &one), EM_OK);
    assert_int_equal(em_tensor_item(one, &item), EM_OK);
    assert_true(item == 1.0);
    free(r);
    free(b);
    free(b2);
    em_tensor_release(one);
    em_tensor_release(q3);
    em_tensor_release(q2);
    em_tensor_release(q);
    em_tensor_release(t);
}

/* ---- views and copies ---- */

static void expect_values(const em_tensor *q, const float *want, int64_t n) {
    float *r = values(q);
    for (int64_t i = 0; i < n; i++)
        if (r[i] != want[i])
            fail_msg("element %lld: %g, want %g", (long long)i, (double)r[i], (double)want[i]);
    free(r);
}

static void test_views(void **state) {
    (void)state;
    enum { A = 3, B = 4, C = 64 };
    float x[A * B * C];
    pattern(x, A * B * C, 3);
    em_tensor *t = f32_on(x, (const int64_t[]){A, B, C}, 3, "ref");
    em_tensor *q = quant(t, EM_Q8, EM_QK_BLOCK, EM_F32);
    float *full = values(q);
    em_tensor *v = NULL, *w = NULL, *c = NULL;
    /* a slice of the block axis at block boundaries */
    assert_int_equal(em_slice(q, 2, 32, 64, 1, &v), EM_OK);
    {
        float want[A * B * 32];
        for (int i = 0; i < A * B; i++) memcpy(want + i * 32, full + i * C + 32, 32 * sizeof(float));
        expect_values(v, want, A * B * 32);
    }
    em_tensor_release(v);
    /* slices that cut blocks */
    assert_int_equal(em_slice(q, 2, 16, 48, 1, &v), EM_ERR_UNSUPPORTED);
    assert_non_null(strstr(em_last_error(), "cut its blocks"));
    assert_int_equal(em_slice(q, 2, 0, 64, 2, &v), EM_ERR_UNSUPPORTED);
    assert_int_equal(em_reshape(q, (const int64_t[]){A * B * 4, 16}, 2, &v), EM_ERR_UNSUPPORTED);
    /* leading dims: permute, slice with a step, reshape, unsqueeze */
    assert_int_equal(em_transpose(q, 0, 1, &v), EM_OK);
    {
        float want[A * B * C];
        for (int a = 0; a < A; a++)
            for (int b = 0; b < B; b++)
                memcpy(want + (b * A + a) * C, full + (a * B + b) * C, C * sizeof(float));
        expect_values(v, want, A * B * C);
        /* copied: the same values, in a contiguous tensor of its own */
        assert_int_equal(em_contiguous(v, &c), EM_OK);
        assert_true(em_tensor_is_contiguous(c));
        expect_values(c, want, A * B * C);
        em_tensor_release(c);
    }
    em_tensor_release(v);
    assert_int_equal(em_slice(q, 1, 0, B, 2, &v), EM_OK);
    assert_int_equal(em_reshape(q, (const int64_t[]){A * B * C}, 1, &w), EM_OK);
    expect_values(w, full, A * B * C);
    em_tensor_release(v);
    em_tensor_release(w);
    /* the block axis moved by a transpose: the scheme says where it went */
    assert_int_equal(em_transpose(q, 1, 2, &v), EM_OK);
    em_quant_scheme s;
    assert_int_equal(em_tensor_scheme(v, &s), EM_OK);
    assert_int_equal(s.axis, 1);
    assert_int_equal(em_contiguous(v, &c), EM_ERR_UNSUPPORTED);
    assert_int_equal(em_clone(v, &c), EM_OK); /* keeps the layout */
    {
        float want[A * C * B];
        for (int a = 0; a < A; a++)
            for (int k = 0; k < C; k++)
                for (int b = 0; b < B; b++) want[(a * C + k) * B + b] = full[(a * B + b) * C + k];
        expect_values(v, want, A * B * C);
        expect_values(c, want, A * B * C);
        /* its bytes are those of the block-axis-last form: q's */
        size_t n1, n2;
        uint8_t *b1 = bytes_of(q, &n1), *b2 = bytes_of(c, &n2);
        assert_int_equal(n1, n2);
        assert_memory_equal(b1, b2, n1);
        free(b1);
        free(b2);
    }
    em_tensor_release(c);
    em_tensor_release(v);
    free(full);
    em_tensor_release(q);
    em_tensor_release(t);
}

static void test_to_device(void **state) {
    (void)state;
    em_device d2, list[64];
    size_t nd = 0;
    bool have = false;
    assert_int_equal(em_devices(list, 64, &nd), EM_OK);
    for (size_t i = 0; i < nd && i < 64; i++)
        if (list[i].backend == EM_BACKEND_CPU) d2 = list[i], have = true;
    if (!have) {
        print_message("no cpu device: skipping the cross-device copies\n");
        return;
    }
    float x[4 * 64];
    pattern(x, 256, 4);
    em_tensor *t = f32_on(x, (const int64_t[]){4, 64}, 2, "ref");
    const em_quant_kind kinds[] = {EM_QK_AFFINE, EM_QK_BLOCK, EM_QK_BLOCK_MIN};
    for (int k = 0; k < 3; k++) {
        em_tensor *q = quant(t, EM_Q4, kinds[k], EM_F16), *qt = NULL, *m = NULL, *back = NULL;
        assert_int_equal(em_transpose(q, 0, 1, &qt), EM_OK);
        assert_int_equal(em_to_device(qt, d2, &m), EM_OK);
        assert_int_equal(em_to_device(m, dev_of("ref"), &back), EM_OK);
        float *a = values(qt), *b = values(m), *c = values(back);
        assert_memory_equal(a, b, sizeof(float) * 256);
        assert_memory_equal(a, c, sizeof(float) * 256);
        em_quant_scheme s1, s2;
        assert_int_equal(em_tensor_scheme(qt, &s1), EM_OK);
        assert_int_equal(em_tensor_scheme(back, &s2), EM_OK);
        assert_memory_equal(&s1, &s2, sizeof s1);
        free(a), free(b), free(c);
        em_tensor_release(q), em_tensor_release(qt), em_tensor_release(m), em_tensor_release(back);
    }
    em_tensor_release(t);
}

/* ---- the matrix product ---- */

/* out = x [M, K] @ w^T with w [N, K] of scheme (storage, kind), against an independent
 * computation of the documented arithmetic from w's dequantized values. */
static void check_linear(em_dtype storage, em_quant_kind kind, int64_t M, int64_t N, int64_t K,
                         const char *dev) {
    float *x = malloc(sizeof(float) * (size_t)(M * K)), *w = malloc(sizeof(float) * (size_t)(N * K));
    pattern(x, M * K, 5);
    pattern(w, N * K, 6);
    em_tensor *xt = f32_on(x, (const int64_t[]){M, K}, 2, dev);
    em_tensor *wt = f32_on(w, (const int64_t[]){N, K}, 2, dev);
    em_tensor *wq = quant(wt, storage, kind, EM_F32), *wqt = NULL, *y = NULL, *yd = NULL,
              *wd = NULL, *wdt = NULL;
    assert_int_equal(em_transpose(wq, 0, 1, &wqt), EM_OK);
    if (em_matmul(xt, wqt, &y) != EM_OK) fail_msg("em_matmul: %s", em_last_error());
    assert_int_equal(em_dequantize(wq, &wd), EM_OK);
    assert_int_equal(em_transpose(wd, 0, 1, &wdt), EM_OK);
    assert_int_equal(em_matmul(xt, wdt, &yd), EM_OK);
    float *a = values(y), *b = values(yd);
    /* the activations' rounding: each term is off by at most half a step of its block */
    for (int64_t m = 0; m < M; m++) {
        double bound = 0;
        for (int64_t k0 = 0; k0 < K; k0 += 32) {
            float amax = 0;
            for (int64_t k = k0; k < k0 + 32 && k < K; k++) amax = fmaxf(amax, fabsf(x[m * K + k]));
            bound += amax / 127.0 / 2 * 32 * 4.0; /* |w| <= 4 */
        }
        for (int64_t n = 0; n < N; n++)
            if (fabs(a[m * N + n] - b[m * N + n]) > bound + 1e-3)
                fail_msg("[%lld, %lld]: %g, dequantized product %g", (long long)m, (long long)n,
                         (double)a[m * N + n], (double)b[m * N + n]);
    }
    free(a), free(b), free(x), free(w);
    em_tensor_release(xt), em_tensor_release(wt), em_tensor_release(wq), em_tensor_release(wqt);
    em_tensor_release(y), em_tensor_release(yd), em_tensor_release(wd), em_tensor_release(wdt);
}

static void test_matmul_linear(void **state) {
    (void)state;
    check_linear(EM_Q8, EM_QK_BLOCK, 3, 5, 96, "ref");
    check_linear(EM_Q4, EM_QK_BLOCK, 1, 7, 64, "ref");
    check_linear(EM_Q4, EM_QK_BLOCK_MIN, 2, 3, 32, "ref");
    check_linear(EM_Q8, EM_QK_SYMMETRIC, 2, 3, 40, "ref");
    check_linear(EM_Q8, EM_QK_AFFINE, 2, 3, 40, "ref");
    check_linear(EM_Q4, EM_QK_AFFINE, 2, 3, 33, "ref");
}

/* The exact arithmetic of the slot for q8 blocks: d_a d_b S per block, summed in f32. */
static void test_matmul_exact(void **state) {
    (void)state;
    float x[64], w[2 * 64];
    pattern(x, 64, 7);
    pattern(w, 128, 8);
    em_tensor *xt = f32_on(x, (const int64_t[]){64}, 1, "ref");
    em_tensor *wt = f32_on(w, (const int64_t[]){2, 64}, 2, "ref");
    em_tensor *wq = quant(wt, EM_Q8, EM_QK_BLOCK, EM_F32), *xq = quant(xt, EM_Q8, EM_QK_BLOCK, EM_F32);
    em_tensor *wqt = NULL, *y = NULL, *yi = NULL;
    assert_int_equal(em_transpose(wq, 0, 1, &wqt), EM_OK);
    assert_int_equal(em_matmul(xt, wqt, &y), EM_OK); /* 1-d @ 2-d: [2] */
    assert_int_equal(em_tensor_rank(y), 1);
    assert_int_equal(em_matmul(xq, wqt, &yi), EM_OK); /* int8 @ int8: the same numbers */
    size_t nw, nx;
    uint8_t *bw = bytes_of(wq, &nw), *bx = bytes_of(xq, &nx);
    float *a = values(y), *ai = values(yi);
    for (int n = 0; n < 2; n++) {
        float acc = 0;
        for (int kb = 0; kb < 2; kb++) {
            const uint8_t *ba = bx + kb * 36, *bb = bw + (n * 2 + kb) * 36;
            int32_t S = 0;
            for (int j = 0; j < 32; j++) S += (int8_t)ba[4 + j] * (int8_t)bb[4 + j];
            acc += ld_f32(ba) * ld_f32(bb) * (float)S;
        }
        assert_true(a[n] == acc);
        assert_true(ai[n] == acc);
    }
    free(a), free(ai), free(bw), free(bx);
    em_tensor_release(xt), em_tensor_release(wt), em_tensor_release(wq), em_tensor_release(xq);
    em_tensor_release(wqt), em_tensor_release(y), em_tensor_release(yi);
}

/* Blocks along the output (b = W quantized by rows, not transposed), a quantized left operand,
 * f64 activations. */
static void test_matmul_forms(void **state) {
    (void)state;
    enum { M = 3, K = 5, N = 64 };
    float x[M * K], w[K * N];
    pattern(x, M * K, 9);
    pattern(w, K * N, 10);
    em_tensor *xt = f32_on(x, (const int64_t[]){M, K}, 2, "ref");
    em_tensor *wt = f32_on(w, (const int64_t[]){K, N}, 2, "ref");
    em_tensor *wq = quant(wt, EM_Q4, EM_QK_BLOCK_MIN, EM_F16), *wd = NULL, *y = NULL, *yd = NULL;
    assert_int_equal(em_dequantize(wq, &wd), EM_OK);
    assert_int_equal(em_matmul(xt, wq, &y), EM_OK); /* case (2): f32, a @ real(b) */
    assert_int_equal(em_matmul(xt, wd, &yd), EM_OK);
    float *a = values(y), *b = values(yd);
    for (int i = 0; i < M * N; i++) assert_true(fabsf(a[i] - b[i]) <= 1e-4f * (1 + fabsf(b[i])));
    free(a), free(b);
    em_tensor_release(y), em_tensor_release(yd);
    /* quantized @ float: W^T [N, K] @ x^T [K, M] */
    em_tensor *wqt = NULL, *wdt = NULL, *xtt = NULL;
    assert_int_equal(em_transpose(wq, 0, 1, &wqt), EM_OK);
    assert_int_equal(em_transpose(wd, 0, 1, &wdt), EM_OK);
    assert_int_equal(em_transpose(xt, 0, 1, &xtt), EM_OK);
    assert_int_equal(em_matmul(wqt, xtt, &y), EM_OK);
    assert_int_equal(em_matmul(wdt, xtt, &yd), EM_OK);
    const int64_t *sh = em_tensor_shape(y);
    assert_int_equal(sh[0], N);
    assert_int_equal(sh[1], M);
    a = values(y), b = values(yd);
    for (int i = 0; i < M * N; i++) assert_true(fabsf(a[i] - b[i]) <= 0.05f * (1 + fabsf(b[i])));
    free(a), free(b);
    em_tensor_release(y), em_tensor_release(yd);
    /* f64 activations give f64 results */
    em_tensor *x64 = NULL;
    assert_int_equal(em_cast(xt, EM_F64, &x64), EM_OK);
    assert_int_equal(em_matmul(x64, wq, &y), EM_OK);
    assert_int_equal(em_tensor_dtype(y), EM_F64);
    em_tensor_release(y);
    em_tensor_release(x64), em_tensor_release(xt), em_tensor_release(wt), em_tensor_release(wq);
    em_tensor_release(wd), em_tensor_release(wqt), em_tensor_release(wdt), em_tensor_release(xtt);
}

/* Gradients flow to x through x @ Wq^T as through x @ dequantize(W)^T; W is a constant. */
static void test_matmul_grad(void **state) {
    (void)state;
    enum { B = 2, T = 3, K = 64, N = 4 };
    float x[B * T * K], w[N * K];
    pattern(x, B * T * K, 11);
    pattern(w, N * K, 12);
    em_device ad = dev_of("ref+autodiff");
    em_tensor *xt = f32_on(x, (const int64_t[]){B, T, K}, 3, "ref+autodiff");
    assert_int_equal(em_tensor_require_grad(xt), EM_OK);
    em_tensor *wt = f32_on(w, (const int64_t[]){N, K}, 2, "ref");
    em_tensor *wq = quant(wt, EM_Q8, EM_QK_BLOCK, EM_F16), *wqa = NULL, *wqt = NULL, *y = NULL,
              *l = NULL, *g = NULL, *wd = NULL;
    assert_int_equal(em_to_device(wq, ad, &wqa), EM_OK);
    assert_int_equal(em_transpose(wqa, 0, 1, &wqt), EM_OK);
    assert_int_equal(em_matmul(xt, wqt, &y), EM_OK);
    assert_int_equal(em_sum(y, &l), EM_OK);
    em_grads *gr = NULL;
    assert_int_equal(em_backward(l, &gr), EM_OK);
    assert_int_equal(em_grads_get(gr, xt, &g), EM_OK);
    em_grads_release(gr);
    assert_non_null(g);
    assert_int_equal(em_dequantize(wq, &wd), EM_OK);
    float *gv = values(g), *wv = values(wd);
    /* d sum(x W^T) / dx[b, t, k] = sum_n W[n, k] */
    for (int i = 0; i < B * T; i++)
        for (int k = 0; k < K; k++) {
            float want = 0;
            for (int n = 0; n < N; n++) want += wv[n * K + k];
            assert_true(fabsf(gv[i * K + k] - want) <= 1e-5f);
        }
    free(gv), free(wv);
    em_tensor_release(xt), em_tensor_release(wt), em_tensor_release(wq), em_tensor_release(wqa);
    em_tensor_release(wqt), em_tensor_release(y), em_tensor_release(l), em_tensor_release(g);
    em_tensor_release(wd);
}

/* ---- edges every backend must treat as ref does ---- */

/* The devices present besides ref that run quantized kernels of their own. */
static int other_devices(em_device *out, int cap) {
    em_device list[64];
    size_t nd = 0;
    int n = 0;
    assert_int_equal(em_devices(list, 64, &nd), EM_OK);
    for (size_t i = 0; i < nd && i < 64 && n < cap; i++)
        if (!list[i].autodiff &&
            (list[i].backend == EM_BACKEND_CPU || list[i].backend == EM_BACKEND_OPENCL))
            out[n++] = list[i];
    return n;
}

/* A non-finite activation makes its row of x @ W^T NaN (its block's d is NaN or inf), the
 * other rows stay finite; blocks whose d is below FLT_MIN quantize to q = 0 (Q4_0: 8). */
static void test_edges(void **state) {
    (void)state;
    em_device devs[8];
    int nd = other_devices(devs, 7);
    devs[nd++] = dev_of("ref");
    float x[3 * 64], w[4 * 64], tiny[64];
    pattern(x, 3 * 64, 13);
    pattern(w, 4 * 64, 14);
    x[3] = NAN;
    x[64 + 40] = -INFINITY;
    for (int i = 0; i < 64; i++) tiny[i] = (float)(i - 20) * 1e-41f; /* subnormal: d < FLT_MIN */
    size_t nref[3] = {0, 0, 0};
    uint8_t *bref[3] = {NULL, NULL, NULL};
    const em_quant_kind kinds[3] = {EM_QK_BLOCK, EM_QK_BLOCK, EM_QK_BLOCK_MIN};
    const em_dtype st[3] = {EM_Q8, EM_Q4, EM_Q4};
    for (int d = nd - 1; d >= 0; d--) {
        char name[64];
        em_device_name(devs[d], name, sizeof name);
        em_tensor *xt = NULL, *wt = NULL, *tt = NULL;
        assert_int_equal(em_tensor_from_data(x, EM_F32, (const int64_t[]){3, 64}, 2, devs[d], &xt), EM_OK);
        assert_int_equal(em_tensor_from_data(w, EM_F32, (const int64_t[]){4, 64}, 2, devs[d], &wt), EM_OK);
        assert_int_equal(em_tensor_from_data(tiny, EM_F32, (const int64_t[]){64}, 1, devs[d], &tt), EM_OK);
        for (int k = 0; k < 3; k++) {
            em_tensor *wq = quant(wt, st[k], kinds[k], EM_F32), *wqt = NULL, *y = NULL;
            assert_int_equal(em_transpose(wq, 0, 1, &wqt), EM_OK);
            if (em_matmul(xt, wqt, &y) != EM_OK) fail_msg("%s: %s", name, em_last_error());
            float *r = values(y);
            for (int n = 0; n < 4; n++) {
                if (!isnan(r[n]) || !isnan(r[4 + n]) || !isfinite(r[8 + n]))
                    fail_msg("%s kind %d: column %d: %g %g %g", name, k, n, (double)r[n],
                             (double)r[4 + n], (double)r[8 + n]);
            }
            free(r);
            em_tensor *tq = quant(tt, st[k], kinds[k], EM_F32);
            size_t nb;
            uint8_t *b = bytes_of(tq, &nb);
            if (devs[d].backend == EM_BACKEND_REF) {
                bref[k] = b, nref[k] = nb;
                /* q8: d = 43e-41 / 127 < FLT_MIN, so q = 0 */
                if (k == 0)
                    for (int j = 0; j < 32; j++) assert_int_equal(b[4 + j], 0);
            } else {
                assert_int_equal(nb, nref[k]);
                if (memcmp(b, bref[k], nb) != 0) fail_msg("%s kind %d: tiny blocks differ from ref's", name, k);
                free(b);
            }
            em_tensor_release(tq), em_tensor_release(wq), em_tensor_release(wqt), em_tensor_release(y);
        }
        em_tensor_release(xt), em_tensor_release(wt), em_tensor_release(tt);
    }
    for (int k = 0; k < 3; k++) free(bref[k]);
}

/* ---- bad input ---- */

static void test_errors(void **state) {
    (void)state;
    float x[64] = {0};
    em_tensor *t = f32_on(x, (const int64_t[]){2, 32}, 2, "ref");
    em_tensor *t40 = f32_on(x, (const int64_t[]){40}, 1, "ref");
    em_tensor *q = quant(t, EM_Q4, EM_QK_BLOCK, EM_F32), *q8 = quant(t, EM_Q8, EM_QK_AFFINE, EM_F32);
    em_tensor *qt = NULL;
    assert_int_equal(em_transpose(q, 0, 1, &qt), EM_OK);
    int32_t iv[2] = {1, 2};
    em_tensor *ti = NULL;
    assert_int_equal(em_tensor_from_data(iv, EM_I32, (const int64_t[]){2}, 1, dev_of("ref"), &ti),
                     EM_OK);
    em_quant_scheme sym4 = {.storage = EM_Q4, .kind = EM_QK_SYMMETRIC},
                    blk = {.storage = EM_Q8, .kind = EM_QK_BLOCK},
                    badsd = {.storage = EM_Q8, .kind = EM_QK_BLOCK, .scale_dtype = EM_BF16},
                    badk = {.storage = EM_Q8, .kind = (em_quant_kind)9},
                    badst = {.storage = EM_F32, .kind = EM_QK_BLOCK},
                    badblk = {.storage = EM_Q8, .kind = EM_QK_BLOCK, .block = 16};
    const char *fn = "em_quantize_as";
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_quantize_as(t, &sym4, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_quantize_as(t, &badsd, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_quantize_as(t, &badk, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_quantize_as(t, &badst, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_quantize_as(t, &badblk, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_quantize_as(t40, &blk, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_quantize_as(ti, &blk, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_quantize_as(q, &blk, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_quantize_as(NULL, &blk, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_quantize_as(t, NULL, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_quantize_as(t, &blk, NULL));
    x[3] = NAN;
    em_tensor *tn = f32_on(x, (const int64_t[]){2, 32}, 2, "ref");
    x[3] = INFINITY;
    em_tensor *ti2 = f32_on(x, (const int64_t[]){2, 32}, 2, "ref");
    EXPECT_ERR(EM_ERR_ARG, fn, em_quantize_as(tn, &blk, &o));
    {
        /* f16 scales cannot hold d = 1e7 / 127 (it would be inf: a block of NaNs) */
        float big[32] = {1e7f};
        em_tensor *tb = f32_on(big, (const int64_t[]){32}, 1, "ref");
        em_quant_scheme h8 = {.storage = EM_Q8, .kind = EM_QK_BLOCK, .scale_dtype = EM_F16},
                        h4 = {.storage = EM_Q4, .kind = EM_QK_BLOCK_MIN, .scale_dtype = EM_F16};
        EXPECT_ERR(EM_ERR_ARG, fn, em_quantize_as(tb, &h8, &o));
        EXPECT_ERR(EM_ERR_ARG, fn, em_quantize_as(tb, &h4, &o));
        big[0] = 8e6f; /* d = 62992: still an f16 */
        em_tensor *tok = f32_on(big, (const int64_t[]){32}, 1, "ref"), *qo = NULL;
        assert_int_equal(em_quantize_as(tok, &h8, &qo), EM_OK);
        float *r = values(qo);
        assert_true(fabsf(r[0] - 8e6f) < 8e6f / 200);
        free(r);
        em_tensor_release(qo), em_tensor_release(tok), em_tensor_release(tb);
    }
    EXPECT_ERR(EM_ERR_ARG, fn, em_quantize_as(ti2, &blk, &o));

    fn = "em_tensor_from_quantized";
    uint8_t raw[80] = {0};
    em_quant_scheme pt = {.storage = EM_Q8, .scale = 0.0f}, ptz = {.storage = EM_Q8, .scale = 1.0f, .zero_point = 300};
    em_device r = dev_of("ref");
    EXPECT_ERR(EM_ERR_ARG, fn, em_tensor_from_quantized(raw, 40, &blk, (const int64_t[]){2, 32}, 2, r, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_tensor_from_quantized(raw, 4, &pt, (const int64_t[]){4}, 1, r, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_tensor_from_quantized(raw, 4, &ptz, (const int64_t[]){4}, 1, r, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_tensor_from_quantized(raw, 40, &blk, (const int64_t[]){40}, 1, r, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_tensor_from_quantized(NULL, 72, &blk, (const int64_t[]){2, 32}, 2, r, &o));

    fn = "em_matmul";
    EXPECT_ERR(EM_ERR_UNSUPPORTED, fn, em_matmul(qt, q, &o));   /* q4 @ q4 */
    EXPECT_ERR(EM_ERR_UNSUPPORTED, fn, em_matmul(q8, qt, &o));  /* zero point, q4 */
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_matmul(t, q, &o));          /* [2,32] @ [2,32] */
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_matmul(ti, q, &o));         /* int @ quantized */

    /* every other op says to dequantize */
    EXPECT_ERR(EM_ERR_DTYPE, "em_add", em_add(q, q, &o));
    EXPECT_ERR(EM_ERR_DTYPE, "em_exp", em_exp(q, &o));
    EXPECT_ERR(EM_ERR_DTYPE, "em_sum", em_sum(q, &o));
    EXPECT_ERR(EM_ERR_DTYPE, "em_cast", em_cast(q, EM_F32, &o));
    EXPECT_ERR(EM_ERR_UNSUPPORTED, "em_contiguous", em_contiguous(qt, &o));

    em_tensor_release(t), em_tensor_release(t40), em_tensor_release(q), em_tensor_release(q8);
    em_tensor_release(qt), em_tensor_release(ti), em_tensor_release(tn), em_tensor_release(ti2);
    CHECKS_DONE();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_bytes),    cmocka_unit_test(test_q8_block_layout),
        cmocka_unit_test(test_q4_layouts),     cmocka_unit_test(test_round_trip_error),
        cmocka_unit_test(test_from_bytes),     cmocka_unit_test(test_views),
        cmocka_unit_test(test_to_device),      cmocka_unit_test(test_matmul_linear),
        cmocka_unit_test(test_matmul_exact),   cmocka_unit_test(test_matmul_forms),
        cmocka_unit_test(test_matmul_grad),    cmocka_unit_test(test_edges),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
