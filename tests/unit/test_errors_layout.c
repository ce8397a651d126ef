/*
 * test_errors_layout.c — bad inputs to the layout ops: reshape, flatten, permute, transpose,
 * expand, slice, slice_assign, cat, stack, split, squeeze, unsqueeze, flip, repeat.
 */
#include "errcheck.h"

#define BIG (INT64_C(1) << 40)

/* ---- NULL input / NULL out for every one-input layout op, with otherwise valid arguments
 *      for an x of shape [1, 3] ---- */

typedef em_status (*lay_fn)(const em_tensor *, em_tensor **);

static em_status w_reshape(const em_tensor *x, em_tensor **o) {
    int64_t s[1] = {3};
    return em_reshape(x, s, 1, o);
}
static em_status w_flatten(const em_tensor *x, em_tensor **o) { return em_flatten(x, 0, -1, o); }
static em_status w_permute(const em_tensor *x, em_tensor **o) {
    int p[2] = {1, 0};
    return em_permute(x, p, 2, o);
}
static em_status w_transpose(const em_tensor *x, em_tensor **o) {
    return em_transpose(x, 0, 1, o);
}
static em_status w_expand(const em_tensor *x, em_tensor **o) {
    int64_t s[3] = {2, 4, 3};
    return em_expand(x, s, 3, o);
}
static em_status w_slice(const em_tensor *x, em_tensor **o) { return em_slice(x, 1, 0, 2, 1, o); }
static em_status w_squeeze(const em_tensor *x, em_tensor **o) { return em_squeeze(x, 0, o); }
static em_status w_unsqueeze(const em_tensor *x, em_tensor **o) {
    return em_unsqueeze(x, 0, o);
}
static em_status w_flip(const em_tensor *x, em_tensor **o) {
    int d[1] = {1};
    return em_flip(x, d, 1, o);
}
static em_status w_repeat(const em_tensor *x, em_tensor **o) {
    int64_t r[2] = {2, 2};
    return em_repeat(x, r, 2, o);
}

static const struct {
    const char *name;
    lay_fn fn;
} LAYOUT[] = {
    {"em_reshape", w_reshape},     {"em_flatten", w_flatten},   {"em_permute", w_permute},
    {"em_transpose", w_transpose}, {"em_expand", w_expand},     {"em_slice", w_slice},
    {"em_squeeze", w_squeeze},     {"em_squeeze_all", em_squeeze_all},
    {"em_unsqueeze", w_unsqueeze}, {"em_flip", w_flip},         {"em_repeat", w_repeat},
};

static void test_layout_nulls(void **state) {
    (void)state;
    em_tensor *x = mk2(EM_F32, 1, 3);
    for (size_t i = 0; i < sizeof LAYOUT / sizeof LAYOUT[0]; i++) {
        EXPECT_ERR(EM_ERR_ARG, LAYOUT[i].name, LAYOUT[i].fn(NULL, &o));
        EXPECT_ERR(EM_ERR_ARG, LAYOUT[i].name, LAYOUT[i].fn(x, NULL));
        /* the valid call works and leaves x alone */
        em_tensor *y = NULL;
        em_status s = LAYOUT[i].fn(x, &y);
        CHECK(s == EM_OK, LAYOUT[i].name);
        em_tensor_release(y);
    }
    em_tensor_release(x);
    CHECKS_DONE();
}

/* ---- shape arguments ---- */

static void test_reshape(void **state) {
    (void)state;
    const char *fn = "em_reshape";
    em_tensor *x = mk2(EM_F32, 2, 3);
    int64_t s9[9] = {1, 1, 1, 1, 1, 1, 1, 2, 3};
    int64_t neg[2] = {-2, 3}, two_inf[2] = {-1, -1}, wrong[2] = {4, 2}, over[2] = {BIG, BIG};
    int64_t nodiv[2] = {-1, 4}, infer0[2] = {-1, 0};
    EXPECT_ERR(EM_ERR_ARG, fn, em_reshape(x, NULL, 2, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_reshape(x, s9, 9, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_reshape(x, neg, 2, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_reshape(x, two_inf, 2, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_reshape(x, wrong, 2, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_reshape(x, over, 2, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_reshape(x, nodiv, 2, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_reshape(x, infer0, 2, &o));
    em_tensor_release(x);
    CHECKS_DONE();
}

static void test_flatten_permute_transpose(void **state) {
    (void)state;
    em_tensor *x = mk3(EM_F32, 2, 3, 4);
    EXPECT_ERR(EM_ERR_ARG, "em_flatten", em_flatten(x, 3, -1, &o));
    EXPECT_ERR(EM_ERR_ARG, "em_flatten", em_flatten(x, 0, -4, &o));
    EXPECT_ERR(EM_ERR_ARG, "em_flatten", em_flatten(x, 2, 1, &o));

    int p_short[2] = {1, 0}, p_dup[3] = {0, 0, 1}, p_out[3] = {0, 1, 3}, p_neg[3] = {0, 1, -4};
    EXPECT_ERR(EM_ERR_ARG, "em_permute", em_permute(x, NULL, 3, &o));
    EXPECT_ERR(EM_ERR_ARG, "em_permute", em_permute(x, p_short, 2, &o));
    EXPECT_ERR(EM_ERR_ARG, "em_permute", em_permute(x, p_dup, 3, &o));
    EXPECT_ERR(EM_ERR_ARG, "em_permute", em_permute(x, p_out, 3, &o));
    EXPECT_ERR(EM_ERR_ARG, "em_permute", em_permute(x, p_neg, 3, &o));

    EXPECT_ERR(EM_ERR_ARG, "em_transpose", em_transpose(x, 3, 0, &o));
    EXPECT_ERR(EM_ERR_ARG, "em_transpose", em_transpose(x, 0, -4, &o));
    em_tensor_release(x);
    CHECKS_DONE();
}

static void test_expand(void **state) {
    (void)state;
    const char *fn = "em_expand";
    em_tensor *x = mk2(EM_F32, 2, 3);
    int64_t bad[2] = {4, 3}, shorter[1] = {3}, s9[9] = {1, 1, 1, 1, 1, 1, 1, 2, 3};
    int64_t neg[2] = {2, -2}, over[4] = {BIG, BIG, 2, 3};
    EXPECT_ERR(EM_ERR_ARG, fn, em_expand(x, NULL, 2, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_expand(x, bad, 2, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_expand(x, shorter, 1, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_expand(x, s9, 9, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_expand(x, neg, 2, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_expand(x, over, 4, &o));
    em_tensor_release(x);
    CHECKS_DONE();
}

static void test_slice(void **state) {
    (void)state;
    em_device fake = fake_dev();
    em_tensor *x = mk2(EM_F32, 2, 3);
    EXPECT_ERR(EM_ERR_ARG, "em_slice", em_slice(x, 0, 0, 2, 0, &o));
    EXPECT_ERR(EM_ERR_ARG, "em_slice", em_slice(x, 2, 0, 2, 1, &o));
    EXPECT_ERR(EM_ERR_ARG, "em_slice", em_slice(x, -3, 0, 2, 1, &o));

    const char *fn = "em_slice_assign";
    int64_t shp1[1] = {3};
    em_tensor *v = mk2(EM_F32, 1, 3), *v4 = mk1(EM_F32, 4), *vf = mk_on(fake, EM_F32, shp1, 1);
    EXPECT_ERR(EM_ERR_ARG, fn, em_slice_assign(NULL, 0, 0, 1, 1, v, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_slice_assign(x, 0, 0, 1, 1, NULL, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_slice_assign(x, 0, 0, 1, 1, v, NULL));
    EXPECT_ERR(EM_ERR_ARG, fn, em_slice_assign(x, 0, 0, 1, 0, v, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_slice_assign(x, 2, 0, 1, 1, v, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_slice_assign(x, 0, 0, 1, 1, v4, &o));
    EXPECT_ERR_MSG(EM_ERR_DEVICE, fn, "fake", em_slice_assign(x, 0, 0, 1, 1, vf, &o));
    em_tensor_release(v);
    em_tensor_release(v4);
    em_tensor_release(vf);
    em_tensor_release(x);
    CHECKS_DONE();
}

static void test_cat_stack(void **state) {
    (void)state;
    em_device fake = fake_dev();
    int64_t shp[2] = {2, 3};
    em_tensor *a = mk2(EM_F32, 2, 3), *b = mk2(EM_F32, 2, 4), *c = mk1(EM_F32, 3);
    em_tensor *d = mk2(EM_F64, 2, 3), *f = mk_on(fake, EM_F32, shp, 2);
    em_tensor *r8;
    {
        int64_t s8[8] = {1, 1, 1, 1, 1, 1, 2, 3};
        r8 = mk(EM_F32, s8, 8);
    }
    for (int which = 0; which < 2; which++) {
        const char *fn = which ? "em_stack" : "em_cat";
        em_status (*call)(const em_tensor *const *, size_t, int, em_tensor **) =
            which ? em_stack : em_cat;
        const em_tensor *ok2[2] = {a, a};
        const em_tensor *with_null[2] = {a, NULL};
        const em_tensor *mixed_dt[2] = {a, d};
        const em_tensor *mixed_dev[2] = {a, f};
        const em_tensor *mixed_rank[2] = {a, c};
        EXPECT_ERR(EM_ERR_ARG, fn, call(NULL, 2, 0, &o));
        EXPECT_ERR(EM_ERR_ARG, fn, call(ok2, 0, 0, &o));
        EXPECT_ERR(EM_ERR_ARG, fn, call(ok2, 2, 0, NULL));
        EXPECT_ERR(EM_ERR_ARG, fn, call(with_null, 2, 0, &o));
        EXPECT_ERR(EM_ERR_DTYPE, fn, call(mixed_dt, 2, 0, &o));
        EXPECT_ERR_MSG(EM_ERR_DEVICE, fn, "fake", call(mixed_dev, 2, 0, &o));
        EXPECT_ERR(EM_ERR_SHAPE, fn, call(mixed_rank, 2, 0, &o));
        EXPECT_ERR(EM_ERR_ARG, fn, call(ok2, 2, 3, &o));   /* out of range for cat and stack */
        EXPECT_ERR(EM_ERR_ARG, fn, call(ok2, 2, -4, &o));
    }
    const em_tensor *ab[2] = {a, b};
    EXPECT_ERR(EM_ERR_SHAPE, "em_cat", em_cat(ab, 2, 0, &o));   /* dim 1 differs: 3 vs 4 */
    EXPECT_ERR(EM_ERR_ARG, "em_cat", em_cat(ab, 2, 2, &o));
    EXPECT_ERR(EM_ERR_SHAPE, "em_stack", em_stack(ab, 2, 0, &o));
    const em_tensor *r88[2] = {r8, r8};
    EXPECT_ERR(EM_ERR_SHAPE, "em_stack", em_stack(r88, 2, 0, &o)); /* rank 9 result */
    em_tensor *all[] = {a, b, c, d, f, r8};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) em_tensor_release(all[i]);
    CHECKS_DONE();
}

/** split writes an array of outputs: none may be written on failure. */
static void test_split(void **state) {
    (void)state;
    const char *fn = "em_split";
    em_tensor *x = mk2(EM_F32, 5, 2);
    em_tensor *outs[4];
    size_t count;
#define RESET()                                                                              \
    do {                                                                                     \
        for (int i_ = 0; i_ < 4; i_++) outs[i_] = SENTINEL;                                  \
        count = 12345;                                                                       \
    } while (0)
#define UNTOUCHED() (outs[0] == SENTINEL && outs[1] == SENTINEL && outs[2] == SENTINEL && outs[3] == SENTINEL)
    RESET();
    chk_err(em_split(NULL, 2, 0, outs, 4, &count), EM_ERR_ARG, fn, UNTOUCHED(), "split(NULL)",
            __FILE__, __LINE__);
    RESET();
    chk_err(em_split(x, 0, 0, outs, 4, &count), EM_ERR_ARG, fn, UNTOUCHED(), "split size 0",
            __FILE__, __LINE__);
    RESET();
    chk_err(em_split(x, -1, 0, outs, 4, &count), EM_ERR_ARG, fn, UNTOUCHED(), "split size -1",
            __FILE__, __LINE__);
    RESET();
    chk_err(em_split(x, 2, 2, outs, 4, &count), EM_ERR_ARG, fn, UNTOUCHED(), "split dim 2",
            __FILE__, __LINE__);
    RESET();
    chk_err(em_split(x, 2, 0, NULL, 4, &count), EM_ERR_ARG, fn, true, "split outs NULL",
            __FILE__, __LINE__);
    RESET();
    chk_err(em_split(x, 2, 0, outs, 4, NULL), EM_ERR_ARG, fn, UNTOUCHED(), "split count NULL",
            __FILE__, __LINE__);
    /* 5 rows in pieces of 2: 3 pieces; cap 2 is too small, count still reported */
    RESET();
    chk_err(em_split(x, 2, 0, outs, 2, &count), EM_ERR_ARG, fn, UNTOUCHED(), "split cap 2",
            __FILE__, __LINE__);
    CHECK(count == 3, "em_split: *count must hold the number of pieces when cap is too small");
#undef RESET
#undef UNTOUCHED
    em_tensor_release(x);
    CHECKS_DONE();
}

static void test_squeeze_unsqueeze_flip_repeat(void **state) {
    (void)state;
    em_tensor *x = mk3(EM_F32, 2, 1, 3);
    EXPECT_ERR(EM_ERR_SHAPE, "em_squeeze", em_squeeze(x, 0, &o)); /* size 2, not 1 */
    EXPECT_ERR(EM_ERR_ARG, "em_squeeze", em_squeeze(x, 3, &o));
    EXPECT_ERR(EM_ERR_ARG, "em_squeeze", em_squeeze(x, -4, &o));

    EXPECT_ERR(EM_ERR_ARG, "em_unsqueeze", em_unsqueeze(x, 4, &o)); /* valid: -4 .. 3 */
    EXPECT_ERR(EM_ERR_ARG, "em_unsqueeze", em_unsqueeze(x, -5, &o));
    int64_t s8[8] = {1, 1, 1, 1, 1, 1, 2, 3};
    em_tensor *r8 = mk(EM_F32, s8, 8);
    EXPECT_ERR(EM_ERR_SHAPE, "em_unsqueeze", em_unsqueeze(r8, 0, &o));

    int d_out[1] = {3}, d_dup[2] = {0, 0};
    EXPECT_ERR(EM_ERR_ARG, "em_flip", em_flip(x, NULL, 1, &o));
    EXPECT_ERR(EM_ERR_ARG, "em_flip", em_flip(x, d_out, 1, &o));
    EXPECT_ERR(EM_ERR_ARG, "em_flip", em_flip(x, d_dup, 2, &o));
    EXPECT_ERR(EM_ERR_ARG, "em_flip", em_flip(x, d_dup, -1, &o));

    int64_t r_short[2] = {1, 1}, r_neg[3] = {1, -1, 1}, r_over[3] = {BIG, 1, BIG};
    int64_t r9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    EXPECT_ERR(EM_ERR_ARG, "em_repeat", em_repeat(x, NULL, 3, &o));
    EXPECT_ERR(EM_ERR_ARG, "em_repeat", em_repeat(x, r_short, 2, &o));
    EXPECT_ERR(EM_ERR_ARG, "em_repeat", em_repeat(x, r_neg, 3, &o));
    EXPECT_ERR(EM_ERR_SHAPE, "em_repeat", em_repeat(x, r_over, 3, &o));
    EXPECT_ERR(EM_ERR_SHAPE, "em_repeat", em_repeat(x, r9, 9, &o));
    em_tensor_release(r8);
    em_tensor_release(x);
    CHECKS_DONE();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_nulls),
        cmocka_unit_test(test_reshape),
        cmocka_unit_test(test_flatten_permute_transpose),
        cmocka_unit_test(test_expand),
        cmocka_unit_test(test_slice),
        cmocka_unit_test(test_cat_stack),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_squeeze_unsqueeze_flip_repeat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
