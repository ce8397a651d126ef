/*
 * test_errors_reduce.c — bad inputs to the reductions (whole and along a dim), cumsum,
 * cumprod, cummax, cummin,
 * softmax / log_softmax, and matmul.
 */
#include "errcheck.h"

typedef em_status (*red_fn)(const em_tensor *, em_tensor **);
typedef em_status (*red_dim_fn)(const em_tensor *, int, em_tensor **);

#define NUM_REJ (K_BOOL | K_QUANT)
#define FLT_REJ (K_INT | K_BOOL | K_QUANT)

/* Wrappers giving every reduction the shape (x, dim, out); whole forms ignore dim. */
#define WHOLE(op)                                                                            \
    static em_status w_##op(const em_tensor *x, int dim, em_tensor **out) {                  \
        (void)dim;                                                                           \
        return em_##op(x, out);                                                              \
    }
#define ALONG(op)                                                                            \
    static em_status w_##op##_dim(const em_tensor *x, int dim, em_tensor **out) {            \
        return em_##op##_dim(x, dim, false, out);                                            \
    }
WHOLE(sum) WHOLE(mean) WHOLE(prod) WHOLE(max) WHOLE(min) WHOLE(argmax) WHOLE(argmin)
WHOLE(logsumexp)
ALONG(sum) ALONG(mean) ALONG(prod) ALONG(max) ALONG(min) ALONG(argmax) ALONG(argmin)
ALONG(logsumexp)

static em_status w_var(const em_tensor *x, int dim, em_tensor **out) {
    (void)dim;
    return em_var(x, 1, out);
}
static em_status w_var_dim(const em_tensor *x, int dim, em_tensor **out) {
    return em_var_dim(x, dim, 1, true, out);
}
static em_status w_cumsum(const em_tensor *x, int dim, em_tensor **out) {
    return em_cumsum(x, dim, out);
}
static em_status w_cumprod(const em_tensor *x, int dim, em_tensor **out) {
    return em_cumprod(x, dim, out);
}
static em_status w_cummax(const em_tensor *x, int dim, em_tensor **out) {
    return em_cummax(x, dim, out, NULL);
}
static em_status w_cummin_idx(const em_tensor *x, int dim, em_tensor **out) {
    return em_cummin(x, dim, NULL, out);
}
static em_status w_softmax(const em_tensor *x, int dim, em_tensor **out) {
    return em_softmax(x, dim, out);
}
static em_status w_log_softmax(const em_tensor *x, int dim, em_tensor **out) {
    return em_log_softmax(x, dim, out);
}

typedef struct red_case {
    const char *name;
    red_dim_fn fn;
    unsigned reject;
    bool has_dim;       /* takes a dim: out-of-range dims are EM_ERR_ARG */
    bool empty_fails;   /* an empty extent is EM_ERR_SHAPE (max, min, argmax, argmin) */
} red_case;

static const red_case RED[] = {
    {"em_sum", w_sum, NUM_REJ, false, false},
    {"em_sum_dim", w_sum_dim, NUM_REJ, true, false},
    {"em_mean", w_mean, FLT_REJ, false, false},
    {"em_mean_dim", w_mean_dim, FLT_REJ, true, false},
    {"em_prod", w_prod, NUM_REJ, false, false},
    {"em_prod_dim", w_prod_dim, NUM_REJ, true, false},
    {"em_max", w_max, NUM_REJ, false, true},
    {"em_max_dim", w_max_dim, NUM_REJ, true, true},
    {"em_min", w_min, NUM_REJ, false, true},
    {"em_min_dim", w_min_dim, NUM_REJ, true, true},
    {"em_argmax", w_argmax, NUM_REJ, false, true},
    {"em_argmax_dim", w_argmax_dim, NUM_REJ, true, true},
    {"em_argmin", w_argmin, NUM_REJ, false, true},
    {"em_argmin_dim", w_argmin_dim, NUM_REJ, true, true},
    {"em_var", w_var, FLT_REJ, false, false},
    {"em_var_dim", w_var_dim, FLT_REJ, true, false},
    {"em_logsumexp", w_logsumexp, FLT_REJ, false, false},
    {"em_logsumexp_dim", w_logsumexp_dim, FLT_REJ, true, false},
    {"em_cumsum", w_cumsum, NUM_REJ, true, false},
    {"em_cumprod", w_cumprod, NUM_REJ, true, false},
    {"em_cummax", w_cummax, K_QUANT, true, false},
    {"em_cummin", w_cummin_idx, K_QUANT, true, false},
    {"em_softmax", w_softmax, FLT_REJ, true, false},
    {"em_log_softmax", w_log_softmax, FLT_REJ, true, false},
};
#define N_RED (sizeof RED / sizeof RED[0])

/** NULLs, rejected kinds, out-of-range dims, empty extents. */
static void test_reduce_bad_inputs(void **state) {
    (void)state;
    em_tensor *fix[4];
    for (int k = 0; k < 4; k++) fix[k] = mk2(kind_dtype(k), 2, 3);
    em_tensor *f = fix[EM_KIND_FLOAT];
    em_tensor *empty = mk1(EM_F32, 0), *empty2 = mk2(EM_F32, 2, 0);
    for (size_t i = 0; i < N_RED; i++) {
        const red_case *c = &RED[i];
        EXPECT_ERR(EM_ERR_ARG, c->name, c->fn(NULL, 0, &o));
        EXPECT_ERR(EM_ERR_ARG, c->name, c->fn(f, 0, NULL));
        for (int k = 0; k < 4; k++)
            if (c->reject & (1u << k)) EXPECT_ERR(EM_ERR_DTYPE, c->name, c->fn(fix[k], 0, &o));
        if (c->has_dim) {
            EXPECT_ERR_MSG(EM_ERR_ARG, c->name, "2", c->fn(f, 2, &o));
            EXPECT_ERR_MSG(EM_ERR_ARG, c->name, "-3", c->fn(f, -3, &o));
            EXPECT_ERR(EM_ERR_ARG, c->name, c->fn(f, 100, &o));
            EXPECT_ERR(EM_ERR_ARG, c->name, c->fn(f, INT32_MIN, &o));
        }
        if (c->empty_fails) {
            EXPECT_ERR(EM_ERR_SHAPE, c->name, c->fn(empty, 0, &o));
            if (c->has_dim) EXPECT_ERR(EM_ERR_SHAPE, c->name, c->fn(empty2, 1, &o));
        }
    }
    em_tensor_release(empty);
    em_tensor_release(empty2);
    for (int k = 0; k < 4; k++) em_tensor_release(fix[k]);
    CHECKS_DONE();
}

/** keepdim=true forms go through the same checks. */
static void test_reduce_keepdim(void **state) {
    (void)state;
    em_tensor *f = mk2(EM_F32, 2, 3), *b = mk2(EM_BOOL, 2, 3);
    EXPECT_ERR(EM_ERR_ARG, "em_sum_dim", em_sum_dim(f, 5, true, &o));
    EXPECT_ERR(EM_ERR_DTYPE, "em_mean_dim", em_mean_dim(b, 0, true, &o));
    EXPECT_ERR(EM_ERR_ARG, "em_var_dim", em_var_dim(NULL, 0, 0, true, &o));
    EXPECT_ERR(EM_ERR_ARG, "em_argmin_dim", em_argmin_dim(f, -4, true, &o));
    EXPECT_ERR(EM_ERR_ARG, "em_logsumexp_dim", em_logsumexp_dim(f, 2, true, &o));
    em_tensor_release(f);
    em_tensor_release(b);
    CHECKS_DONE();
}

/** cummax / cummin: both outputs NULL is EM_ERR_ARG; either alone is fine. */
static void test_cum_extreme_outputs(void **state) {
    (void)state;
    em_tensor *x = mk2(EM_F32, 2, 3), *v = NULL, *i = NULL;
    EXPECT_ERR_MSG(EM_ERR_ARG, "em_cummax", "NULL", em_cummax(x, 1, NULL, NULL));
    EXPECT_ERR_MSG(EM_ERR_ARG, "em_cummin", "NULL", em_cummin(x, 1, NULL, NULL));
    CHECK(em_cummax(x, 1, &v, NULL) == EM_OK && v && em_tensor_dtype(v) == EM_F32, "values");
    CHECK(em_cummin(x, -1, NULL, &i) == EM_OK && i && em_tensor_dtype(i) == EM_I64, "indices");
    em_tensor_release(v);
    em_tensor_release(i);
    em_tensor_release(x);
    CHECKS_DONE();
}

/* "bare": ref's table under another id without EM_CAP_HOST_MEMORY and without the
 * cumulative slot, so that the core composes cumprod / cummax / cummin there. */
static em_backend_ops bare_ops;
static em_device bare_dev(void) {
    static bool done;
    if (!done) {
        bare_ops = *em_backend_get(EM_BACKEND_REF);
        bare_ops.name = "bare";
        bare_ops.id = FAKE_ID + 1;
        bare_ops.caps &= ~EM_CAP_HOST_MEMORY;
        bare_ops.cumulative = NULL;
        assert_int_equal(em_backend_register(&bare_ops), EM_OK);
        done = true;
    }
    em_device d = {FAKE_ID + 1, 0, false, EM_CKPT_NONE};
    return d;
}

static void expect_same(const char *what, em_tensor *a, em_tensor *b) {
    CHECK(a && b && em_tensor_dtype(a) == em_tensor_dtype(b) &&
              em_tensor_numel(a) == em_tensor_numel(b),
          what);
    if (!a || !b) return;
    size_t n = (size_t)em_tensor_numel(a) * em_dtype_size(em_tensor_dtype(a));
    unsigned char *x = calloc(n + 1, 1), *y = calloc(n + 1, 1);
    CHECK(em_tensor_to_data(a, x, n) == EM_OK && em_tensor_to_data(b, y, n) == EM_OK, what);
    if (em_tensor_dtype(a) == EM_F32) { /* NaN == NaN, whatever its bits */
        for (size_t i = 0; i + 4 <= n; i += 4) {
            float p, q;
            memcpy(&p, x + i, 4);
            memcpy(&q, y + i, 4);
            CHECK((p != p && q != q) || p == q, what);
        }
    } else {
        CHECK(memcmp(x, y, n) == 0, what);
    }
    free(x);
    free(y);
}

/** The composed cumprod / cummax / cummin (a backend without the slot) equal ref's kernel:
 *  ties, NaNs, every dim of a 3-d tensor, ints, bool, 0-d and empty inputs. */
static void test_cum_composed(void **state) {
    (void)state;
    em_device bare = bare_dev(), ref;
    CHECK(em_device_parse("ref", &ref) == EM_OK, "ref");
    const float f[24] = {1, 3, 3, 2, NAN, 0.5f, NAN, 7, -1, 0, 0, 2,
                         4, 4, -2, 9, 1, 1, 0.25f, 3, 2, NAN, 5, 5};
    const int32_t iv[24] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4};
    const uint8_t bv[6] = {0, 1, 0, 1, 1, 0};
    const int64_t s3[3] = {2, 3, 4}, s2[2] = {2, 3}, s0[2] = {0, 3};
    struct {
        const void *data;
        em_dtype dt;
        const int64_t *shape;
        int rank;
    } in[] = {{f, EM_F32, s3, 3}, {iv, EM_I32, s3, 3}, {bv, EM_BOOL, s2, 2},
              {f, EM_F32, s3, 0}, {f, EM_F32, s0, 2}};
    for (size_t c = 0; c < sizeof in / sizeof in[0]; c++) {
        em_tensor *xb = NULL, *xr = NULL;
        CHECK(em_tensor_from_data(in[c].data, in[c].dt, in[c].shape, in[c].rank, bare, &xb) ==
                  EM_OK, "bare input");
        CHECK(em_tensor_from_data(in[c].data, in[c].dt, in[c].shape, in[c].rank, ref, &xr) ==
                  EM_OK, "ref input");
        for (int dim = -1; dim < (in[c].rank ? in[c].rank : 1); dim++) {
            for (int op = 0; op < 3; op++) {
                if (op == 0 && in[c].dt == EM_BOOL) continue;
                em_tensor *vb = NULL, *ib = NULL, *vr = NULL, *ir = NULL, *hb = NULL;
                em_status sb, sr;
                if (op == 0) {
                    sb = em_cumprod(xb, dim, &vb);
                    sr = em_cumprod(xr, dim, &vr);
                } else if (op == 1) {
                    sb = em_cummax(xb, dim, &vb, &ib);
                    sr = em_cummax(xr, dim, &vr, &ir);
                } else {
                    sb = em_cummin(xb, dim, &vb, &ib);
                    sr = em_cummin(xr, dim, &vr, &ir);
                }
                CHECK(sb == EM_OK && sr == EM_OK, em_last_error());
                expect_same("values", vb, vr);
                if (op) expect_same("indices", ib, ir);
                /* the values stay on the bare device */
                CHECK(vb && em_to_device(vb, ref, &hb) == EM_OK, "to ref");
                em_tensor_release(hb);
                em_tensor_release(vb);
                em_tensor_release(ib);
                em_tensor_release(vr);
                em_tensor_release(ir);
            }
        }
        em_tensor_release(xb);
        em_tensor_release(xr);
    }
    CHECKS_DONE();
}

/** matmul: NULLs, kinds, mixed dtypes, shapes that do not fit, two devices. */
static void test_matmul_bad_inputs(void **state) {
    (void)state;
    const char *fn = "em_matmul";
    em_device fake = fake_dev();
    em_tensor *a = mk2(EM_F32, 2, 3), *b = mk2(EM_F32, 3, 4);
    em_tensor *b45 = mk2(EM_F32, 4, 5), *b64 = mk2(EM_F64, 3, 4);
    em_tensor *ab = mk2(EM_BOOL, 2, 3), *bb = mk2(EM_BOOL, 3, 4);
    em_tensor *aq = mk2(EM_Q8, 2, 3), *bq = mk2(EM_Q8, 3, 4);
    em_tensor *v3 = mk1(EM_F32, 3), *v4 = mk1(EM_F32, 4), *s = mk0(EM_F32);
    em_tensor *x223 = mk3(EM_F32, 2, 2, 3), *y334 = mk3(EM_F32, 3, 3, 4);
    int64_t shp[2] = {3, 4};
    em_tensor *bf = mk_on(fake, EM_F32, shp, 2);

    EXPECT_ERR(EM_ERR_ARG, fn, em_matmul(NULL, b, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_matmul(a, NULL, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_matmul(a, b, NULL));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_matmul(ab, bb, &o));
    /* q8 affine with zero points: an int8 product needs them 0 (test_quant has the rest) */
    EXPECT_ERR(EM_ERR_UNSUPPORTED, fn, em_matmul(aq, bq, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_matmul(a, b64, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_matmul(a, b45, &o));  /* k 3 vs 4 */
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_matmul(v3, v4, &o));  /* 1-d of different lengths */
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_matmul(a, v4, &o));   /* [2,3] @ [4] */
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_matmul(v4, b, &o));   /* [4] @ [3,4] */
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_matmul(s, b, &o));    /* 0-d operand */
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_matmul(a, s, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_matmul(x223, y334, &o)); /* batch 2 vs 3 */
    EXPECT_ERR_MSG(EM_ERR_DEVICE, fn, "fake", em_matmul(a, bf, &o));
    CHECK(strstr(em_last_error(), "ref") != NULL, em_last_error());

    em_tensor *all[] = {a, b, b45, b64, ab, bb, aq, bq, v3, v4, s, x223, y334, bf};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) em_tensor_release(all[i]);
    CHECKS_DONE();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reduce_bad_inputs),
        cmocka_unit_test(test_reduce_keepdim),
        cmocka_unit_test(test_matmul_bad_inputs),
        cmocka_unit_test(test_cum_extreme_outputs),
        cmocka_unit_test(test_cum_composed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
