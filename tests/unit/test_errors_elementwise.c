/*
 * test_errors_elementwise.c — bad inputs to the elementwise ops: unary, binary, with a scalar,
 * consuming variants, comparisons, logical ops, where and masked_fill.
 * Each must fail with the right status and an "em_<op>: ..." message, and write nothing.
 */
#include "errcheck.h"

/* ---- one-input ops (the scalar forms and clamp through small wrappers) ---- */

typedef em_status (*un_fn)(const em_tensor *, em_tensor **);

typedef struct un_case {
    const char *name;
    un_fn fn;
    unsigned reject; /* kinds that must give EM_ERR_DTYPE */
} un_case;

#define SCALAR_WRAP(op, s)                                                                   \
    static em_status w_##op(const em_tensor *x, em_tensor **out) { return em_##op(x, s, out); }
SCALAR_WRAP(add_scalar, 1.0)
SCALAR_WRAP(sub_scalar, 1.0)
SCALAR_WRAP(mul_scalar, 2.0)
SCALAR_WRAP(div_scalar, 2.0)
SCALAR_WRAP(pow_scalar, 2.0)
SCALAR_WRAP(remainder_scalar, 2.0)
SCALAR_WRAP(maximum_scalar, 1.0)
SCALAR_WRAP(minimum_scalar, 1.0)
SCALAR_WRAP(eq_scalar, 1.0)
SCALAR_WRAP(lt_scalar, 1.0)
SCALAR_WRAP(gt_scalar, 1.0)

/** em_clamp with bounds [0, 1]. */
static em_status w_clamp(const em_tensor *x, em_tensor **out) { return em_clamp(x, 0, 1, out); }
/** em_softplus with PyTorch's defaults; em_nan_to_num with its. */
static em_status w_softplus(const em_tensor *x, em_tensor **out) {
    return em_softplus(x, 1.0, 20.0, out);
}
static em_status w_nan_to_num(const em_tensor *x, em_tensor **out) {
    return em_nan_to_num(x, 0.0, NULL, NULL, out);
}

#define NUM_REJ (K_BOOL | K_QUANT)
#define FLT_REJ (K_INT | K_BOOL | K_QUANT)

static const un_case UNARY[] = {
    {"em_neg", em_neg, NUM_REJ},
    {"em_abs", em_abs, NUM_REJ},
    {"em_exp", em_exp, FLT_REJ},
    {"em_log", em_log, FLT_REJ},
    {"em_log1p", em_log1p, FLT_REJ},
    {"em_sqrt", em_sqrt, FLT_REJ},
    {"em_rsqrt", em_rsqrt, FLT_REJ},
    {"em_sin", em_sin, FLT_REJ},
    {"em_cos", em_cos, FLT_REJ},
    {"em_tanh", em_tanh, FLT_REJ},
    {"em_sigmoid", em_sigmoid, FLT_REJ},
    {"em_relu", em_relu, NUM_REJ},
    {"em_gelu", em_gelu, FLT_REJ},
    {"em_silu", em_silu, FLT_REJ},
    {"em_erf", em_erf, FLT_REJ},
    {"em_floor", em_floor, NUM_REJ},
    {"em_ceil", em_ceil, NUM_REJ},
    {"em_round", em_round, NUM_REJ},
    {"em_recip", em_recip, FLT_REJ},
    {"em_sign", em_sign, NUM_REJ},
    {"em_clamp", w_clamp, NUM_REJ},
    {"em_logical_not", em_logical_not, K_FLOAT | K_INT | K_QUANT},
    {"em_tan", em_tan, FLT_REJ},
    {"em_asin", em_asin, FLT_REJ},
    {"em_acos", em_acos, FLT_REJ},
    {"em_atan", em_atan, FLT_REJ},
    {"em_sinh", em_sinh, FLT_REJ},
    {"em_cosh", em_cosh, FLT_REJ},
    {"em_expm1", em_expm1, FLT_REJ},
    {"em_log2", em_log2, FLT_REJ},
    {"em_log10", em_log10, FLT_REJ},
    {"em_softplus", w_softplus, FLT_REJ},
    {"em_isnan", em_isnan, K_QUANT},
    {"em_isinf", em_isinf, K_QUANT},
    {"em_isfinite", em_isfinite, K_QUANT},
    {"em_nan_to_num", w_nan_to_num, K_QUANT},
    {"em_add_scalar", w_add_scalar, NUM_REJ},
    {"em_sub_scalar", w_sub_scalar, NUM_REJ},
    {"em_mul_scalar", w_mul_scalar, NUM_REJ},
    {"em_div_scalar", w_div_scalar, NUM_REJ},
    {"em_pow_scalar", w_pow_scalar, FLT_REJ},
    {"em_remainder_scalar", w_remainder_scalar, NUM_REJ},
    {"em_maximum_scalar", w_maximum_scalar, NUM_REJ},
    {"em_minimum_scalar", w_minimum_scalar, NUM_REJ},
    {"em_eq_scalar", w_eq_scalar, K_QUANT},
    {"em_lt_scalar", w_lt_scalar, NUM_REJ},
    {"em_gt_scalar", w_gt_scalar, NUM_REJ},
};
#define N_UNARY (sizeof UNARY / sizeof UNARY[0])

/** The first kind an op accepts (its fixture is used for the NULL-out case). */
static int accepted_kind(unsigned reject) {
    for (int k = 0; k < 4; k++)
        if (!(reject & (1u << k))) return k;
    return 0;
}

/** NULL input, NULL out and every rejected kind, for each one-input op. */
static void test_unary_bad_inputs(void **state) {
    (void)state;
    em_tensor *fix[4];
    for (int k = 0; k < 4; k++) fix[k] = mk2(kind_dtype(k), 2, 3);
    for (size_t i = 0; i < N_UNARY; i++) {
        const un_case *c = &UNARY[i];
        EXPECT_ERR(EM_ERR_ARG, c->name, c->fn(NULL, &o));
        em_clear_error();
        EXPECT_ERR(EM_ERR_ARG, c->name, c->fn(fix[accepted_kind(c->reject)], NULL));
        for (int k = 0; k < 4; k++)
            if (c->reject & (1u << k)) EXPECT_ERR(EM_ERR_DTYPE, c->name, c->fn(fix[k], &o));
    }
    for (int k = 0; k < 4; k++) em_tensor_release(fix[k]);
    CHECKS_DONE();
}

/** The exact wording of a kind error. */
static void test_exp_message(void **state) {
    (void)state;
    em_tensor *x = mk1(EM_I64, 3);
    EXPECT_ERR(EM_ERR_DTYPE, "em_exp", em_exp(x, &o));
    CHECK(strcmp(em_last_error(), "em_exp: expected a float tensor, got int (i64)") == 0,
          em_last_error());
    em_tensor *b = mk1(EM_BOOL, 3);
    EXPECT_ERR_MSG(EM_ERR_DTYPE, "em_sqrt", "got bool (bool)", em_sqrt(b, &o));
    em_tensor_release(b);
    em_tensor_release(x);
    CHECKS_DONE();
}

/** clamp with lo > hi; the f16 and i32 cases of a float-only op. */
static void test_unary_values(void **state) {
    (void)state;
    em_tensor *x = mk1(EM_F32, 3);
    EXPECT_ERR(EM_ERR_ARG, "em_clamp", em_clamp(x, 2.0, 1.0, &o));
    em_tensor *i = mk1(EM_I32, 3);
    EXPECT_ERR_MSG(EM_ERR_DTYPE, "em_tanh", "got int (i32)", em_tanh(i, &o));
    em_tensor *u = mk1(EM_U8, 3);
    EXPECT_ERR(EM_ERR_DTYPE, "em_log", em_log(u, &o));
    em_tensor_release(u);
    em_tensor_release(i);
    em_tensor_release(x);
    CHECKS_DONE();
}

/* ---- two-input ops ---- */

typedef em_status (*bin_fn)(const em_tensor *, const em_tensor *, em_tensor **);

typedef struct bin_case {
    const char *name;
    bin_fn fn;
    unsigned reject;
} bin_case;

static const bin_case BINARY[] = {
    {"em_add", em_add, NUM_REJ},
    {"em_sub", em_sub, NUM_REJ},
    {"em_mul", em_mul, NUM_REJ},
    {"em_div", em_div, NUM_REJ},
    {"em_pow", em_pow, FLT_REJ},
    {"em_remainder", em_remainder, NUM_REJ},
    {"em_maximum", em_maximum, NUM_REJ},
    {"em_minimum", em_minimum, NUM_REJ},
    {"em_eq", em_eq, K_QUANT},
    {"em_ne", em_ne, K_QUANT},
    {"em_lt", em_lt, NUM_REJ},
    {"em_le", em_le, NUM_REJ},
    {"em_gt", em_gt, NUM_REJ},
    {"em_ge", em_ge, NUM_REJ},
    {"em_logical_and", em_logical_and, K_FLOAT | K_INT | K_QUANT},
    {"em_logical_or", em_logical_or, K_FLOAT | K_INT | K_QUANT},
    {"em_atan2", em_atan2, FLT_REJ},
};
#define N_BINARY (sizeof BINARY / sizeof BINARY[0])

/** NULLs, rejected kinds, mixed dtypes, shapes that do not broadcast, two devices. */
static void test_binary_bad_inputs(void **state) {
    (void)state;
    em_device fake = fake_dev();
    em_tensor *fix[4];
    for (int k = 0; k < 4; k++) fix[k] = mk2(kind_dtype(k), 2, 3);
    em_tensor *f64 = mk2(EM_F64, 2, 3);
    em_tensor *u8 = mk2(EM_U8, 2, 3);
    for (size_t i = 0; i < N_BINARY; i++) {
        const bin_case *c = &BINARY[i];
        int k = accepted_kind(c->reject);
        em_dtype dt = kind_dtype(k);
        em_tensor *a = fix[k];
        EXPECT_ERR(EM_ERR_ARG, c->name, c->fn(NULL, a, &o));
        EXPECT_ERR(EM_ERR_ARG, c->name, c->fn(a, NULL, &o));
        EXPECT_ERR(EM_ERR_ARG, c->name, c->fn(NULL, NULL, &o));
        EXPECT_ERR(EM_ERR_ARG, c->name, c->fn(a, a, NULL));
        for (int r = 0; r < 4; r++)
            if (c->reject & (1u << r)) EXPECT_ERR(EM_ERR_DTYPE, c->name, c->fn(fix[r], fix[r], &o));
        /* mixed dtypes: f32 with f64 for float/int ops, bool with u8 for logical ones */
        em_tensor *other = k == EM_KIND_BOOL ? u8 : f64;
        EXPECT_ERR(EM_ERR_DTYPE, c->name, c->fn(a, other, &o));
        EXPECT_ERR(EM_ERR_DTYPE, c->name, c->fn(other, a, &o));
        /* shapes [2, 3] with [4], [3, 2] and [2, 2, 3, 2] do not broadcast */
        em_tensor *b4 = mk1(dt, 4), *b32 = mk2(dt, 3, 2), *b2232 = mk4(dt, 2, 2, 3, 2);
        EXPECT_ERR(EM_ERR_SHAPE, c->name, c->fn(a, b4, &o));
        EXPECT_ERR(EM_ERR_SHAPE, c->name, c->fn(b4, a, &o));
        EXPECT_ERR(EM_ERR_SHAPE, c->name, c->fn(a, b32, &o));
        EXPECT_ERR(EM_ERR_SHAPE, c->name, c->fn(a, b2232, &o));
        em_tensor_release(b4);
        em_tensor_release(b32);
        em_tensor_release(b2232);
        /* one input on ref, the other on fake */
        int64_t shp[2] = {2, 3};
        em_tensor *f = mk_on(fake, dt, shp, 2);
        EXPECT_ERR_MSG(EM_ERR_DEVICE, c->name, "ref", c->fn(a, f, &o));
        CHECK(strstr(em_last_error(), "fake") != NULL, em_last_error());
        EXPECT_ERR_MSG(EM_ERR_DEVICE, c->name, "fake", c->fn(f, a, &o));
        CHECK(strstr(em_last_error(), "ref") != NULL, em_last_error());
        em_tensor_release(f);
    }
    em_tensor_release(u8);
    em_tensor_release(f64);
    for (int k = 0; k < 4; k++) em_tensor_release(fix[k]);
    CHECKS_DONE();
}

/** The case the design names: em_add of a ref tensor and a fake tensor. */
static void test_add_two_devices(void **state) {
    (void)state;
    em_device fake = fake_dev();
    em_tensor *a = mk1(EM_F32, 4);
    int64_t n = 4;
    em_tensor *b = mk_on(fake, EM_F32, &n, 1);
    EXPECT_ERR_MSG(EM_ERR_DEVICE, "em_add", "ref", em_add(a, b, &o));
    CHECK(strstr(em_last_error(), "fake") != NULL, em_last_error());
    /* the same shapes on one device do work, on either */
    em_tensor *c = NULL;
    assert_int_equal(em_add(b, b, &c), EM_OK);
    em_device d = em_tensor_device(c);
    assert_int_equal(d.backend, FAKE_ID);
    float v[4];
    assert_int_equal(em_tensor_to_data(c, v, sizeof v), EM_OK);
    assert_true(v[0] == 0.0f && v[3] == 6.0f);
    em_tensor_release(c);
    em_tensor_release(b);
    em_tensor_release(a);
    CHECKS_DONE();
}

/* ---- consuming variants: `a` is released also on failure ---- */

typedef em_status (*cbin_fn)(em_tensor *, const em_tensor *, em_tensor **);
typedef em_status (*cun_fn)(em_tensor *, em_tensor **);

static em_status w_mul_scalar_(em_tensor *a, em_tensor **out) { return em_mul_scalar_(a, 2, out); }
static em_status w_add_scalar_(em_tensor *a, em_tensor **out) { return em_add_scalar_(a, 1, out); }

/** A fresh tensor with an extra reference held by the test: after a consuming call that
 *  released its reference, em_tensor_can_mut() is true again. */
static em_tensor *held(em_tensor *t) {
    em_tensor_retain(t);
    return t;
}

/** Checks that a consuming call released exactly its reference, then drops the test's. */
static void check_consumed(em_tensor *t, const char *fn, int line) {
    if (!em_tensor_can_mut(t)) {
        char w[256];
        snprintf(w, sizeof w, "%s did not release its consumed input on failure", fn);
        chk_report(__FILE__, line, fn, w);
    }
    em_tensor_release(t);
}

static void test_consuming_bad_inputs(void **state) {
    (void)state;
    em_device fake = fake_dev();
    static const struct {
        const char *name;
        cbin_fn fn;
    } CB[] = {{"em_add_", em_add_}, {"em_sub_", em_sub_}, {"em_mul_", em_mul_}, {"em_div_", em_div_}};
    int64_t shp[2] = {2, 3};
    for (size_t i = 0; i < sizeof CB / sizeof CB[0]; i++) {
        const char *fn = CB[i].name;
        em_tensor *b = mk2(EM_F32, 2, 3), *bb = mk2(EM_BOOL, 2, 3), *b4 = mk1(EM_F32, 4);
        em_tensor *bf = mk_on(fake, EM_F32, shp, 2), *b64 = mk2(EM_F64, 2, 3);
        em_tensor *a;
        EXPECT_ERR(EM_ERR_ARG, fn, CB[i].fn(NULL, b, &o));
        a = held(mk2(EM_F32, 2, 3));
        EXPECT_ERR(EM_ERR_ARG, fn, CB[i].fn(a, NULL, &o));
        check_consumed(a, fn, __LINE__);
        a = held(mk2(EM_F32, 2, 3));
        EXPECT_ERR(EM_ERR_ARG, fn, CB[i].fn(a, b, NULL));
        check_consumed(a, fn, __LINE__);
        a = held(mk2(EM_BOOL, 2, 3));
        EXPECT_ERR(EM_ERR_DTYPE, fn, CB[i].fn(a, bb, &o));
        check_consumed(a, fn, __LINE__);
        a = held(mk2(EM_F32, 2, 3));
        EXPECT_ERR(EM_ERR_DTYPE, fn, CB[i].fn(a, b64, &o));
        check_consumed(a, fn, __LINE__);
        a = held(mk2(EM_F32, 2, 3));
        EXPECT_ERR(EM_ERR_SHAPE, fn, CB[i].fn(a, b4, &o));
        check_consumed(a, fn, __LINE__);
        a = held(mk2(EM_F32, 2, 3));
        EXPECT_ERR_MSG(EM_ERR_DEVICE, fn, "fake", CB[i].fn(a, bf, &o));
        check_consumed(a, fn, __LINE__);
        em_tensor_release(b);
        em_tensor_release(bb);
        em_tensor_release(b4);
        em_tensor_release(bf);
        em_tensor_release(b64);
    }
    static const struct {
        const char *name;
        cun_fn fn;
    } CU[] = {{"em_mul_scalar_", w_mul_scalar_},
              {"em_add_scalar_", w_add_scalar_},
              {"em_relu_", em_relu_},
              {"em_exp_", em_exp_}};
    for (size_t i = 0; i < sizeof CU / sizeof CU[0]; i++) {
        const char *fn = CU[i].name;
        em_tensor *a;
        EXPECT_ERR(EM_ERR_ARG, fn, CU[i].fn(NULL, &o));
        a = held(mk2(EM_F32, 2, 3));
        EXPECT_ERR(EM_ERR_ARG, fn, CU[i].fn(a, NULL));
        check_consumed(a, fn, __LINE__);
        a = held(mk2(EM_BOOL, 2, 3));
        EXPECT_ERR(EM_ERR_DTYPE, fn, CU[i].fn(a, &o));
        check_consumed(a, fn, __LINE__);
        a = held(mk2(EM_Q8, 2, 3));
        EXPECT_ERR(EM_ERR_DTYPE, fn, CU[i].fn(a, &o));
        check_consumed(a, fn, __LINE__);
    }
    CHECKS_DONE();
}

/* ---- where and masked_fill ---- */

static void test_where_bad_inputs(void **state) {
    (void)state;
    em_device fake = fake_dev();
    int64_t shp[2] = {2, 3};
    em_tensor *c = mk2(EM_BOOL, 2, 3), *a = mk2(EM_F32, 2, 3), *b = mk2(EM_F32, 2, 3);
    em_tensor *cf = mk2(EM_F32, 2, 3), *ci = mk2(EM_I64, 2, 3), *b64 = mk2(EM_F64, 2, 3);
    em_tensor *b4 = mk1(EM_F32, 4), *c4 = mk1(EM_BOOL, 4), *q = mk2(EM_Q8, 2, 3);
    em_tensor *af = mk_on(fake, EM_F32, shp, 2), *cfk = mk_on(fake, EM_BOOL, shp, 2);
    const char *fn = "em_where";
    EXPECT_ERR(EM_ERR_ARG, fn, em_where(NULL, a, b, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_where(c, NULL, b, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_where(c, a, NULL, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_where(c, a, b, NULL));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_where(cf, a, b, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_where(ci, a, b, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_where(c, a, b64, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_where(c, q, q, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_where(c, a, b4, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_where(c4, a, b, &o));
    EXPECT_ERR_MSG(EM_ERR_DEVICE, fn, "fake", em_where(c, af, b, &o));
    EXPECT_ERR_MSG(EM_ERR_DEVICE, fn, "fake", em_where(cfk, a, b, &o));
    EXPECT_ERR_MSG(EM_ERR_DEVICE, fn, "fake", em_where(c, a, af, &o));

    fn = "em_masked_fill";
    em_tensor *m423 = mk3(EM_BOOL, 4, 2, 3);
    EXPECT_ERR(EM_ERR_ARG, fn, em_masked_fill(NULL, c, 1.0, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_masked_fill(a, NULL, 1.0, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_masked_fill(a, c, 1.0, NULL));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_masked_fill(a, cf, 1.0, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_masked_fill(a, ci, 1.0, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_masked_fill(q, c, 1.0, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_masked_fill(a, c4, 1.0, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_masked_fill(a, m423, 1.0, &o));
    EXPECT_ERR_MSG(EM_ERR_DEVICE, fn, "fake", em_masked_fill(a, cfk, 1.0, &o));
    EXPECT_ERR_MSG(EM_ERR_DEVICE, fn, "fake", em_masked_fill(af, c, 1.0, &o));

    em_tensor *all[] = {c, a, b, cf, ci, b64, b4, c4, q, af, cfk, m423};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) em_tensor_release(all[i]);
    CHECKS_DONE();
}

/* ---- issue 14: softplus's arguments, logical_xor (any dtypes), clamp_tensor ---- */

static void test_issue14_bad_inputs(void **state) {
    (void)state;
    em_device fake = fake_dev();
    int64_t shp[2] = {2, 3};
    em_tensor *a = mk2(EM_F32, 2, 3), *b = mk2(EM_F32, 2, 3), *i = mk2(EM_I64, 2, 3);
    em_tensor *bl = mk2(EM_BOOL, 2, 3), *q = mk2(EM_Q8, 2, 3), *d = mk2(EM_F64, 2, 3);
    em_tensor *b4 = mk1(EM_F32, 4), *af = mk_on(fake, EM_F32, shp, 2);
    const char *fn = "em_softplus";
    EXPECT_ERR(EM_ERR_ARG, fn, em_softplus(a, 0.0, 20.0, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_softplus(a, INFINITY, 20.0, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_softplus(a, NAN, 20.0, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_softplus(a, 1.0, NAN, &o));
    fn = "em_logical_xor";
    EXPECT_ERR(EM_ERR_ARG, fn, em_logical_xor(NULL, a, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_logical_xor(a, NULL, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_logical_xor(a, b, NULL));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_logical_xor(q, a, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_logical_xor(a, q, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_logical_xor(a, b4, &o));
    EXPECT_ERR_MSG(EM_ERR_DEVICE, fn, "fake", em_logical_xor(a, af, &o));
    em_tensor *x = NULL; /* mixed dtypes are allowed */
    assert_int_equal(em_logical_xor(i, d, &x), EM_OK);
    assert_int_equal(em_tensor_dtype(x), EM_BOOL);
    em_tensor_release(x);
    fn = "em_clamp_tensor";
    EXPECT_ERR(EM_ERR_ARG, fn, em_clamp_tensor(a, NULL, NULL, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_clamp_tensor(NULL, a, b, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_clamp_tensor(a, a, b, NULL));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_clamp_tensor(a, d, NULL, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_clamp_tensor(a, NULL, i, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_clamp_tensor(bl, bl, bl, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_clamp_tensor(q, q, NULL, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_clamp_tensor(a, b4, NULL, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_clamp_tensor(a, b, b4, &o));
    EXPECT_ERR_MSG(EM_ERR_DEVICE, fn, "fake", em_clamp_tensor(a, af, NULL, &o));
    EXPECT_ERR_MSG(EM_ERR_DEVICE, fn, "fake", em_clamp_tensor(a, b, af, &o));
    em_tensor *all[] = {a, b, i, bl, q, d, b4, af};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) em_tensor_release(all[k]);
    CHECKS_DONE();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_issue14_bad_inputs),
        cmocka_unit_test(test_unary_bad_inputs),   cmocka_unit_test(test_exp_message),
        cmocka_unit_test(test_unary_values),       cmocka_unit_test(test_binary_bad_inputs),
        cmocka_unit_test(test_add_two_devices),    cmocka_unit_test(test_consuming_bad_inputs),
        cmocka_unit_test(test_where_bad_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
