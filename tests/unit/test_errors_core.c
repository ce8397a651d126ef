/*
 * test_errors_core.c — bad inputs to the core calls: dtypes, devices, backend registration,
 * creation, data, metadata, moving and converting, quantization, random numbers.
 */
#include "errcheck.h"

#define BIG40 (INT64_C(1) << 40)
#define BIG21 (INT64_C(1) << 21)

/* ---- dtypes and statuses ---- */

static void test_dtype_status_bad(void **state) {
    (void)state;
    em_dtype dt = (em_dtype)77;
    em_clear_error();
    chk_err(em_dtype_parse(NULL, &dt), EM_ERR_ARG, "em_dtype_parse", dt == 77, "parse(NULL)",
            __FILE__, __LINE__);
    chk_err(em_dtype_parse("f33", &dt), EM_ERR_ARG, "em_dtype_parse", dt == 77, "parse(f33)",
            __FILE__, __LINE__);
    chk_err(em_dtype_parse("", &dt), EM_ERR_ARG, "em_dtype_parse", dt == 77, "parse(\"\")",
            __FILE__, __LINE__);
    chk_err(em_dtype_parse("f32 ", &dt), EM_ERR_ARG, "em_dtype_parse", dt == 77,
            "parse(\"f32 \")", __FILE__, __LINE__);
    chk_err(em_dtype_parse("f32", NULL), EM_ERR_ARG, "em_dtype_parse", true, "parse(f32, NULL)",
            __FILE__, __LINE__);
    CHECK(strcmp(em_dtype_name((em_dtype)EM_DTYPE_COUNT), "?") == 0, "invalid dtype name");
    CHECK(strcmp(em_dtype_name((em_dtype)-1), "?") == 0, "negative dtype name");
    CHECK(em_dtype_size((em_dtype)EM_DTYPE_COUNT) == 0, "invalid dtype size");
    CHECK(em_dtype_size((em_dtype)-1) == 0, "negative dtype size");
    CHECK(strcmp(em_status_name((em_status)EM_STATUS_COUNT), "EM_ERR_UNKNOWN") == 0,
          "status name past the end");
    CHECK(strcmp(em_status_name((em_status)-1), "EM_ERR_UNKNOWN") == 0, "negative status");
    CHECK(strcmp(em_backend_name((em_backend)EM_BACKEND_MAX), "?") == 0, "backend past max");
    CHECK(strcmp(em_backend_name((em_backend)-1), "?") == 0, "negative backend");
    CHECK(strcmp(em_backend_name((em_backend)(EM_BACKEND_EXTERNAL0 + 5)), "?") == 0,
          "unregistered external backend");
    CHECKS_DONE();
}

/* ---- devices ---- */

static bool dev_is(em_device d, int backend, int index) {
    return (int)d.backend == backend && d.index == index;
}

static void test_device_parse_bad(void **state) {
    (void)state;
    static const char *const bad_text[] = {
        "",        "bogus",         "ref:",          "ref:x",        "ref:-1",
        "ref:0:0", "ref+",          "ref+autograd",  "ref+autodiff:fast", " ref",
        "ref ",    "REF?",          "ref+autodiff+autodiff", "ref:0x1", ":0",
        "+autodiff", "ref:1e3",
    };
    static const char *const absent[] = {"ref:99", "ref:1", "cpu:7", "opencl:1", "cuda:3"};
    em_device d;
    for (size_t i = 0; i < sizeof bad_text / sizeof bad_text[0]; i++) {
        d.backend = (em_backend)99;
        d.index = 42;
        em_clear_error();
        chk_err(em_device_parse(bad_text[i], &d), EM_ERR_ARG, "em_device_parse",
                dev_is(d, 99, 42), bad_text[i], __FILE__, __LINE__);
    }
    for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++) {
        d.backend = (em_backend)99;
        d.index = 42;
        em_clear_error();
        chk_err(em_device_parse(absent[i], &d), EM_ERR_DEVICE, "em_device_parse",
                dev_is(d, 99, 42), absent[i], __FILE__, __LINE__);
    }
    em_clear_error();
    chk_err(em_device_parse(NULL, &d), EM_ERR_ARG, "em_device_parse", true, "parse(NULL)",
            __FILE__, __LINE__);
    chk_err(em_device_parse("ref", NULL), EM_ERR_ARG, "em_device_parse", true,
            "parse(ref, NULL)", __FILE__, __LINE__);
    CHECKS_DONE();
}

static void test_device_name_bad(void **state) {
    (void)state;
    char buf[16];
    memset(buf, 'x', sizeof buf);
    em_clear_error();
    chk_err(em_device_name(ref_dev(), NULL, 16), EM_ERR_ARG, "em_device_name", true,
            "name(NULL buf)", __FILE__, __LINE__);
    chk_err(em_device_name(ref_dev(), buf, 0), EM_ERR_ARG, "em_device_name", buf[0] == 'x',
            "name(cap 0)", __FILE__, __LINE__);
    /* "ref" needs 4 bytes */
    chk_err(em_device_name(ref_dev(), buf, 3), EM_ERR_ARG, "em_device_name", buf[3] == 'x',
            "name(cap 3)", __FILE__, __LINE__);
    em_device nodev = {(em_backend)(EM_BACKEND_EXTERNAL0 + 9), 0, false, EM_CKPT_NONE};
    em_device negidx = {EM_BACKEND_REF, -1, false, EM_CKPT_NONE};
    chk_err(em_device_name(nodev, buf, sizeof buf), EM_ERR_ARG, "em_device_name", buf[0] == 'x',
            "name(unregistered backend)", __FILE__, __LINE__);
    chk_err(em_device_name(negidx, buf, sizeof buf), EM_ERR_ARG, "em_device_name", buf[0] == 'x',
            "name(index -1)", __FILE__, __LINE__);
    em_device ad;
    assert_int_equal(em_device_autodiff(ref_dev(), EM_CKPT_BALANCED, &ad), EM_OK);
    memset(buf, 'x', sizeof buf);
    chk_err(em_device_name(ad, buf, 8), EM_ERR_ARG, "em_device_name", buf[8] == 'x',
            "name(ref+autodiff:balanced, cap 8)", __FILE__, __LINE__);

    size_t count = 12345;
    em_device list[4];
    chk_err(em_devices(NULL, 4, &count), EM_ERR_ARG, "em_devices", count == 12345,
            "devices(NULL, 4)", __FILE__, __LINE__);
    chk_err(em_devices(list, 4, NULL), EM_ERR_ARG, "em_devices", true, "devices(count NULL)",
            __FILE__, __LINE__);

    em_device out = {(em_backend)99, 42, false, EM_CKPT_NONE};
    chk_err(em_device_autodiff(ref_dev(), EM_CKPT_NONE, &out), EM_ERR_ARG, "em_device_autodiff",
            dev_is(out, 99, 42), "autodiff(NONE)", __FILE__, __LINE__);
    chk_err(em_device_autodiff(ref_dev(), (em_checkpointing)7, &out), EM_ERR_ARG,
            "em_device_autodiff", dev_is(out, 99, 42), "autodiff(7)", __FILE__, __LINE__);
    chk_err(em_device_autodiff(ad, EM_CKPT_DISABLED, &out), EM_ERR_STATE, "em_device_autodiff",
            dev_is(out, 99, 42), "autodiff(autodiff device)", __FILE__, __LINE__);
    chk_err(em_device_autodiff(ref_dev(), EM_CKPT_DISABLED, NULL), EM_ERR_ARG,
            "em_device_autodiff", true, "autodiff(NULL out)", __FILE__, __LINE__);
    CHECKS_DONE();
}

/* ---- backend registration ---- */

static em_backend_ops make_ops(void) {
    em_backend_ops ops = *em_backend_get(EM_BACKEND_REF);
    ops.name = "fake2";
    ops.id = (em_backend)(EM_BACKEND_EXTERNAL0 + 1);
    return ops;
}

static void test_backend_register_bad(void **state) {
    (void)state;
    const char *fn = "em_backend_register";
    assert_non_null(em_backend_get(EM_BACKEND_REF));
    static em_backend_ops ops; /* must outlive its use if registration wrongly succeeds */
    em_clear_error();
    chk_err(em_backend_register(NULL), EM_ERR_ARG, fn, true, "register(NULL)", __FILE__,
            __LINE__);
    ops = make_ops();
    ops.abi_version = EM_BACKEND_ABI_VERSION + 1;
    chk_err(em_backend_register(&ops), EM_ERR_ARG, fn, true, "wrong abi_version", __FILE__,
            __LINE__);
    ops = make_ops();
    ops.abi_version = 0;
    chk_err(em_backend_register(&ops), EM_ERR_ARG, fn, true, "abi_version 0", __FILE__,
            __LINE__);
    /* built-in ids are taken only under their own name (a plugin's "torch"), never "fake2" */
    static const em_backend bad_ids[] = {EM_BACKEND_REF, EM_BACKEND_CPU, EM_BACKEND_CAPTURE,
                                         EM_BACKEND_TORCH, EM_BACKEND_VULKAN,
                                         (em_backend)15, EM_BACKEND_MAX, (em_backend)-1};
    for (size_t i = 0; i < sizeof bad_ids / sizeof bad_ids[0]; i++) {
        ops = make_ops();
        ops.id = bad_ids[i];
        chk_err(em_backend_register(&ops), EM_ERR_ARG, fn, true, "id out of range", __FILE__,
                __LINE__);
    }
    /* each required slot missing */
    for (int slot = 0; slot < 7; slot++) {
        ops = make_ops();
        switch (slot) {
        case 0: ops.device_count = NULL; break;
        case 1: ops.open = NULL; break;
        case 2: ops.alloc = NULL; break;
        case 3: ops.free = NULL; break;
        case 4: ops.read = NULL; break;
        case 5: ops.write = NULL; break;
        default: /* copy may be NULL only for host memory (ref's is used) */
            ops.copy = NULL;
            ops.caps &= ~EM_CAP_HOST_MEMORY;
            break;
        }
        char what[64];
        snprintf(what, sizeof what, "required slot %d NULL", slot);
        chk_err(em_backend_register(&ops), EM_ERR_ARG, fn, true, what, __FILE__, __LINE__);
    }
    CHECK(em_backend_get((em_backend)(EM_BACKEND_EXTERNAL0 + 1)) == NULL,
          "a refused registration must leave the id free");
    /* a good one, then the same id again */
    em_device fake = fake_dev();
    const em_backend_ops *got = em_backend_get(FAKE_ID);
    CHECK(got != NULL && strcmp(got->name, "fake") == 0, "em_backend_get(fake)");
    static em_backend_ops again;
    again = fake_ops;
    again.name = "fake-again";
    chk_err(em_backend_register(&again), EM_ERR_STATE, fn, true, "id taken", __FILE__, __LINE__);
    CHECK(strcmp(em_backend_get(FAKE_ID)->name, "fake") == 0, "the first table stays");
    CHECK(strcmp(em_backend_name(FAKE_ID), "fake") == 0, "em_backend_name(fake)");
    char name[32];
    CHECK(em_device_name(fake, name, sizeof name) == EM_OK && strncmp(name, "fake", 4) == 0,
          "em_device_name(fake)");

    CHECK(em_backend_get(EM_BACKEND_MAX) == NULL, "em_backend_get(MAX)");
    CHECK(em_backend_get((em_backend)-1) == NULL, "em_backend_get(-1)");
    CHECK(em_backend_get((em_backend)(EM_BACKEND_EXTERNAL0 + 2)) == NULL, "unregistered");

    em_clear_error();
    CHECK(em_backend_set_error(EM_ERR_BACKEND, "driver said %d", 7) == EM_ERR_BACKEND,
          "em_backend_set_error returns its status");
    CHECK(strcmp(em_last_error(), "driver said 7") == 0, em_last_error());
    CHECKS_DONE();
}

/* ---- creation ---- */

/** Shape errors common to every call that takes (shape, rank). */
typedef em_status (*shape_fn)(const int64_t *shape, int rank, em_tensor **out);

static float zeros_data[64];

static em_status s_from_data(const int64_t *s, int r, em_tensor **o) {
    return em_tensor_from_data(zeros_data, EM_F32, s, r, ref_dev(), o);
}
static em_status s_zeros(const int64_t *s, int r, em_tensor **o) {
    return em_zeros(s, r, EM_F32, ref_dev(), o);
}
static em_status s_ones(const int64_t *s, int r, em_tensor **o) {
    return em_ones(s, r, EM_I32, ref_dev(), o);
}
static em_status s_full(const int64_t *s, int r, em_tensor **o) {
    return em_full(s, r, 2.5, EM_F64, ref_dev(), o);
}
static em_status s_uniform(const int64_t *s, int r, em_tensor **o) {
    return em_rand_uniform(s, r, EM_F32, 0, 1, 1, ref_dev(), o);
}
static em_status s_normal(const int64_t *s, int r, em_tensor **o) {
    return em_rand_normal(s, r, EM_F32, 0, 1, 1, ref_dev(), o);
}
static em_status s_bernoulli(const int64_t *s, int r, em_tensor **o) {
    return em_rand_bernoulli(s, r, EM_BOOL, 0.5, 1, ref_dev(), o);
}

static const struct {
    const char *name;
    shape_fn fn;
} SHAPED[] = {
    {"em_tensor_from_data", s_from_data}, {"em_zeros", s_zeros},
    {"em_ones", s_ones},                  {"em_full", s_full},
    {"em_rand_uniform", s_uniform},       {"em_rand_normal", s_normal},
    {"em_rand_bernoulli", s_bernoulli},
};

static void test_shape_args(void **state) {
    (void)state;
    int64_t s9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    int64_t neg[2] = {2, -1}, neg_min[2] = {INT64_MIN, 1};
    int64_t over2[2] = {BIG40, BIG40}, over3[3] = {BIG21, BIG21, BIG21};
    int64_t over_max[2] = {INT64_MAX, 2}, ok[2] = {2, 3};
    for (size_t i = 0; i < sizeof SHAPED / sizeof SHAPED[0]; i++) {
        const char *fn = SHAPED[i].name;
        shape_fn f = SHAPED[i].fn;
        EXPECT_ERR(EM_ERR_ARG, fn, f(ok, 2, NULL));
        EXPECT_ERR(EM_ERR_ARG, fn, f(NULL, 2, &o));
        EXPECT_ERR(EM_ERR_SHAPE, fn, f(s9, 9, &o));
        EXPECT_ERR(EM_ERR_SHAPE, fn, f(s9, 1000, &o));
        EXPECT_ERR(EM_ERR_SHAPE, fn, f(ok, -1, &o)); /* a rank outside 0..8 */
        EXPECT_ERR(EM_ERR_ARG, fn, f(neg, 2, &o));
        EXPECT_ERR(EM_ERR_ARG, fn, f(neg_min, 2, &o));
        EXPECT_ERR(EM_ERR_SHAPE, fn, f(over2, 2, &o));
        EXPECT_ERR(EM_ERR_SHAPE, fn, f(over3, 3, &o));
        EXPECT_ERR(EM_ERR_SHAPE, fn, f(over_max, 2, &o));
    }
    CHECKS_DONE();
}

static void test_creation_bad(void **state) {
    (void)state;
    em_device fake = fake_dev();
    (void)fake;
    int64_t s2[1] = {2}, s0[1] = {0};
    em_device cuda = {EM_BACKEND_CUDA, 0, false, EM_CKPT_NONE};
    em_device unreg = {(em_backend)(EM_BACKEND_EXTERNAL0 + 3), 0, false, EM_CKPT_NONE};
    em_device bogus = {(em_backend)1000, 0, false, EM_CKPT_NONE};
    em_device negidx = {EM_BACKEND_REF, -1, false, EM_CKPT_NONE};
    float data[2] = {1, 2};

    const char *fn = "em_tensor_from_data";
    EXPECT_ERR(EM_ERR_ARG, fn, em_tensor_from_data(NULL, EM_F32, s2, 1, ref_dev(), &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_tensor_from_data(data, EM_Q8, s2, 1, ref_dev(), &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_tensor_from_data(data, EM_Q4, s2, 1, ref_dev(), &o));
    EXPECT_ERR(EM_ERR_DEVICE, fn, em_tensor_from_data(data, EM_F32, s2, 1, absent_dev(), &o));
    EXPECT_ERR(EM_ERR_DEVICE, fn, em_tensor_from_data(data, EM_F32, s2, 1, cuda, &o));
    EXPECT_ERR(EM_ERR_DEVICE, fn, em_tensor_from_data(data, EM_F32, s2, 1, unreg, &o));
    /* not a device value at all: an argument error naming the field */
    EXPECT_ERR_MSG(EM_ERR_ARG, fn, "backend 1000",
                   em_tensor_from_data(data, EM_F32, s2, 1, bogus, &o));
    EXPECT_ERR_MSG(EM_ERR_ARG, fn, "index -1",
                   em_tensor_from_data(data, EM_F32, s2, 1, negidx, &o));
    /* NULL data is fine when there are no elements */
    em_tensor *e = NULL;
    CHECK(em_tensor_from_data(NULL, EM_F32, s0, 1, ref_dev(), &e) == EM_OK,
          "from_data(NULL, shape [0])");
    em_tensor_release(e);

    EXPECT_ERR(EM_ERR_DEVICE, "em_zeros", em_zeros(s2, 1, EM_F32, absent_dev(), &o));
    EXPECT_ERR(EM_ERR_DEVICE, "em_ones", em_ones(s2, 1, EM_F32, cuda, &o));
    EXPECT_ERR(EM_ERR_DEVICE, "em_full", em_full(s2, 1, 1.0, EM_F32, unreg, &o));

    fn = "em_full_like";
    em_tensor *x = mk1(EM_F32, 2);
    EXPECT_ERR(EM_ERR_ARG, fn, em_full_like(NULL, 1.0, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_full_like(x, 1.0, NULL));

    fn = "em_arange";
    EXPECT_ERR(EM_ERR_ARG, fn, em_arange(0, 5, 0, EM_F32, ref_dev(), &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_arange(0, 5, INFINITY, EM_F32, ref_dev(), &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_arange(0, 5, -INFINITY, EM_F32, ref_dev(), &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_arange(0, 5, NAN, EM_F32, ref_dev(), &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_arange(0, 5, 1, EM_F32, ref_dev(), NULL));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_arange(0, 5, 1, EM_Q8, ref_dev(), &o));
    EXPECT_ERR(EM_ERR_DEVICE, fn, em_arange(0, 5, 1, EM_F32, absent_dev(), &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_arange(0, 1e30, 1, EM_F32, ref_dev(), &o));

    em_tensor_retain(NULL);
    em_tensor_release(NULL);
    em_tensor_release(x);
    CHECKS_DONE();
}

static void test_random_bad(void **state) {
    (void)state;
    int64_t s2[1] = {2};
    static const em_dtype not_float[] = {EM_I64, EM_I32, EM_U8, EM_BOOL, EM_Q8, EM_Q4};
    for (size_t i = 0; i < sizeof not_float / sizeof not_float[0]; i++) {
        em_dtype dt = not_float[i];
        EXPECT_ERR(EM_ERR_DTYPE, "em_rand_uniform",
                   em_rand_uniform(s2, 1, dt, 0, 1, 1, ref_dev(), &o));
        EXPECT_ERR(EM_ERR_DTYPE, "em_rand_normal",
                   em_rand_normal(s2, 1, dt, 0, 1, 1, ref_dev(), &o));
    }
    EXPECT_ERR(EM_ERR_DTYPE, "em_rand_bernoulli",
               em_rand_bernoulli(s2, 1, EM_Q8, 0.5, 1, ref_dev(), &o));
    EXPECT_ERR(EM_ERR_ARG, "em_rand_normal", em_rand_normal(s2, 1, EM_F32, 0, -1, 1, ref_dev(), &o));
    EXPECT_ERR(EM_ERR_ARG, "em_rand_bernoulli",
               em_rand_bernoulli(s2, 1, EM_F32, -0.5, 1, ref_dev(), &o));
    EXPECT_ERR(EM_ERR_ARG, "em_rand_bernoulli",
               em_rand_bernoulli(s2, 1, EM_F32, 1.5, 1, ref_dev(), &o));
    EXPECT_ERR(EM_ERR_ARG, "em_rand_bernoulli",
               em_rand_bernoulli(s2, 1, EM_F32, NAN, 1, ref_dev(), &o));
    EXPECT_ERR(EM_ERR_DEVICE, "em_rand_uniform",
               em_rand_uniform(s2, 1, EM_F32, 0, 1, 1, absent_dev(), &o));
    EXPECT_ERR(EM_ERR_DEVICE, "em_rand_normal",
               em_rand_normal(s2, 1, EM_F32, 0, 1, 1, absent_dev(), &o));
    EXPECT_ERR(EM_ERR_DEVICE, "em_rand_bernoulli",
               em_rand_bernoulli(s2, 1, EM_F32, 0.5, 1, absent_dev(), &o));
    CHECKS_DONE();
}

/* ---- data and metadata ---- */

static void test_to_data_bad(void **state) {
    (void)state;
    const char *fn = "em_tensor_to_data";
    em_tensor *x = mk1(EM_F32, 4);
    unsigned char dst[16];
    memset(dst, 0xAB, sizeof dst);
    em_clear_error();
    chk_err(em_tensor_to_data(NULL, dst, sizeof dst), EM_ERR_ARG, fn, dst[0] == 0xAB,
            "to_data(NULL)", __FILE__, __LINE__);
    chk_err(em_tensor_to_data(x, NULL, 16), EM_ERR_ARG, fn, true, "to_data(dst NULL)", __FILE__,
            __LINE__);
    chk_err(em_tensor_to_data(x, dst, 15), EM_ERR_ARG, fn, dst[0] == 0xAB && dst[14] == 0xAB,
            "to_data(15 bytes for 16)", __FILE__, __LINE__);
    chk_err(em_tensor_to_data(x, dst, 0), EM_ERR_ARG, fn, dst[0] == 0xAB, "to_data(0 bytes)",
            __FILE__, __LINE__);
    em_tensor_release(x);
    CHECKS_DONE();
}

/** Each metadata call on NULL returns its zero value and sets a message naming itself. */
static void test_metadata_null(void **state) {
    (void)state;
#define META(call, zero, name)                                                               \
    do {                                                                                     \
        em_clear_error();                                                                    \
        CHECK((call) == (zero), name ": zero value for NULL");                               \
        CHECK(strstr(em_last_error(), name) != NULL, name ": message must name the call");   \
    } while (0)
    META(em_tensor_dtype(NULL), EM_F32, "em_tensor_dtype");
    META(em_tensor_rank(NULL), 0, "em_tensor_rank");
    META(em_tensor_shape(NULL), NULL, "em_tensor_shape");
    META(em_tensor_numel(NULL), 0, "em_tensor_numel");
    META(em_tensor_kind(NULL), EM_KIND_FLOAT, "em_tensor_kind");
    META(em_tensor_can_mut(NULL), false, "em_tensor_can_mut");
    META(em_tensor_is_contiguous(NULL), false, "em_tensor_is_contiguous");
    META(em_tensor_checkpointing(NULL), EM_CKPT_NONE, "em_tensor_checkpointing");
    META(em_tensor_dim(NULL, 0), -1, "em_tensor_dim");
    META(em_tensor_device(NULL).backend, EM_BACKEND_REF, "em_tensor_device");
#undef META
    em_tensor *x = mk2(EM_F32, 2, 3);
    em_clear_error();
    CHECK(em_tensor_dim(x, 2) == -1, "em_tensor_dim(x, 2)");
    CHECK(em_tensor_dim(x, -3) == -1, "em_tensor_dim(x, -3)");
    CHECK(strstr(em_last_error(), "em_tensor_dim") != NULL, "em_tensor_dim message");
    CHECK(em_tensor_dim(x, -1) == 3, "em_tensor_dim(x, -1)");

    em_quant_scheme sc = {.storage = EM_F64, .scale = 9.0f, .zero_point = 99};
    em_clear_error();
    chk_err(em_tensor_scheme(NULL, &sc), EM_ERR_ARG, "em_tensor_scheme", sc.zero_point == 99,
            "scheme(NULL)", __FILE__, __LINE__);
    chk_err(em_tensor_scheme(x, &sc), EM_ERR_DTYPE, "em_tensor_scheme", sc.zero_point == 99,
            "scheme(f32)", __FILE__, __LINE__);
    em_tensor *q = mk1(EM_Q8, 4);
    chk_err(em_tensor_scheme(q, NULL), EM_ERR_ARG, "em_tensor_scheme", true, "scheme(q, NULL)",
            __FILE__, __LINE__);

    double v = 123.0;
    chk_err(em_tensor_item(NULL, &v), EM_ERR_ARG, "em_tensor_item", v == 123.0, "item(NULL)",
            __FILE__, __LINE__);
    em_tensor *one = mk0(EM_F32);
    chk_err(em_tensor_item(one, NULL), EM_ERR_ARG, "em_tensor_item", true, "item(out NULL)",
            __FILE__, __LINE__);
    chk_err(em_tensor_item(x, &v), EM_ERR_SHAPE, "em_tensor_item", v == 123.0,
            "item(6 elements)", __FILE__, __LINE__);
    em_tensor *empty = mk1(EM_F32, 0);
    chk_err(em_tensor_item(empty, &v), EM_ERR_SHAPE, "em_tensor_item", v == 123.0,
            "item(0 elements)", __FILE__, __LINE__);
    em_tensor_release(empty);
    em_tensor_release(one);
    em_tensor_release(q);
    em_tensor_release(x);
    CHECKS_DONE();
}

/* ---- moving and converting ---- */

static void test_moving_bad(void **state) {
    (void)state;
    em_device fake = fake_dev();
    em_device cuda = {EM_BACKEND_CUDA, 0, false, EM_CKPT_NONE};
    em_tensor *x = mk2(EM_F32, 2, 3), *xi = mk2(EM_I64, 2, 3), *xb = mk2(EM_BOOL, 2, 3);
    em_tensor *q = mk2(EM_Q8, 2, 3);

    const char *fn = "em_to_device";
    EXPECT_ERR(EM_ERR_ARG, fn, em_to_device(NULL, ref_dev(), &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_to_device(x, ref_dev(), NULL));
    EXPECT_ERR(EM_ERR_DEVICE, fn, em_to_device(x, absent_dev(), &o));
    EXPECT_ERR(EM_ERR_DEVICE, fn, em_to_device(x, cuda, &o));
    /* across the two devices and back: the only way across */
    em_tensor *y = NULL, *z = NULL;
    CHECK(em_to_device(x, fake, &y) == EM_OK, "em_to_device(ref -> fake)");
    CHECK(y != NULL && em_tensor_device(y).backend == FAKE_ID, "on fake");
    CHECK(em_to_device(y, ref_dev(), &z) == EM_OK, "em_to_device(fake -> ref)");
    float a[6], b[6];
    CHECK(z != NULL && em_tensor_to_data(x, a, sizeof a) == EM_OK &&
              em_tensor_to_data(z, b, sizeof b) == EM_OK && memcmp(a, b, sizeof a) == 0,
          "round trip through fake");
    em_tensor_release(y);
    em_tensor_release(z);

    fn = "em_cast";
    EXPECT_ERR(EM_ERR_ARG, fn, em_cast(NULL, EM_F64, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_cast(x, EM_F64, NULL));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_cast(x, EM_Q8, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_cast(x, EM_Q4, &o));

    EXPECT_ERR(EM_ERR_ARG, "em_contiguous", em_contiguous(NULL, &o));
    EXPECT_ERR(EM_ERR_ARG, "em_contiguous", em_contiguous(x, NULL));
    EXPECT_ERR(EM_ERR_ARG, "em_clone", em_clone(NULL, &o));
    EXPECT_ERR(EM_ERR_ARG, "em_clone", em_clone(x, NULL));

    fn = "em_quantize";
    EXPECT_ERR(EM_ERR_ARG, fn, em_quantize(NULL, EM_Q8, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_quantize(x, EM_Q8, NULL));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_quantize(xi, EM_Q8, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_quantize(xb, EM_Q8, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_quantize(q, EM_Q8, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_quantize(x, EM_F32, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_quantize(x, EM_I8, &o));

    fn = "em_dequantize";
    EXPECT_ERR(EM_ERR_ARG, fn, em_dequantize(NULL, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_dequantize(q, NULL));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_dequantize(x, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_dequantize(xi, &o));

    em_tensor_release(x);
    em_tensor_release(xi);
    em_tensor_release(xb);
    em_tensor_release(q);
    CHECKS_DONE();
}

/* ---- invalid device values: every entry point that takes an em_device refuses them ---- */

typedef struct bad_device {
    em_device dev;
    const char *field; /* what the message must name */
} bad_device;

static const bad_device BAD_DEVICES[] = {
    {{EM_BACKEND_REF, 0, true, (em_checkpointing)9}, "checkpointing 9"},
    {{EM_BACKEND_REF, 0, false, (em_checkpointing)9}, "checkpointing 9"},
    {{EM_BACKEND_REF, 0, false, (em_checkpointing)-1}, "checkpointing -1"},
    {{EM_BACKEND_REF, 0, true, EM_CKPT_NONE}, "EM_CKPT_NONE"},
    {{(em_backend)1000, 0, false, EM_CKPT_NONE}, "backend 1000"},
    {{(em_backend)-1, 0, false, EM_CKPT_NONE}, "backend -1"},
    {{(em_backend)EM_BACKEND_MAX, 0, false, EM_CKPT_NONE}, "backend 32"},
    {{EM_BACKEND_REF, -1, false, EM_CKPT_NONE}, "index -1"},
    {{EM_BACKEND_CPU, -5, true, EM_CKPT_BALANCED}, "index -5"},
};
#define N_BAD_DEVICES (sizeof BAD_DEVICES / sizeof BAD_DEVICES[0])

static void test_device_values_bad(void **state) {
    (void)state;
    int64_t s2[1] = {2};
    float data[2] = {1, 2};
    em_tensor *x = mk1(EM_F32, 2);
    for (size_t i = 0; i < N_BAD_DEVICES; i++) {
        const em_device d = BAD_DEVICES[i].dev;
        const char *f = BAD_DEVICES[i].field;
        EXPECT_ERR_MSG(EM_ERR_ARG, "em_tensor_from_data", f,
                       em_tensor_from_data(data, EM_F32, s2, 1, d, &o));
        EXPECT_ERR_MSG(EM_ERR_ARG, "em_zeros", f, em_zeros(s2, 1, EM_F32, d, &o));
        EXPECT_ERR_MSG(EM_ERR_ARG, "em_ones", f, em_ones(s2, 1, EM_F32, d, &o));
        EXPECT_ERR_MSG(EM_ERR_ARG, "em_full", f, em_full(s2, 1, 2.0, EM_F32, d, &o));
        EXPECT_ERR_MSG(EM_ERR_ARG, "em_arange", f, em_arange(0, 4, 1, EM_F32, d, &o));
        EXPECT_ERR_MSG(EM_ERR_ARG, "em_rand_uniform", f,
                       em_rand_uniform(s2, 1, EM_F32, 0, 1, 7, d, &o));
        EXPECT_ERR_MSG(EM_ERR_ARG, "em_rand_normal", f,
                       em_rand_normal(s2, 1, EM_F32, 0, 1, 7, d, &o));
        EXPECT_ERR_MSG(EM_ERR_ARG, "em_rand_bernoulli", f,
                       em_rand_bernoulli(s2, 1, EM_F32, 0.5, 7, d, &o));
        EXPECT_ERR_MSG(EM_ERR_ARG, "em_to_device", f, em_to_device(x, d, &o));

        char buf[64];
        memset(buf, 'x', sizeof buf);
        em_clear_error();
        chk_err(em_device_name(d, buf, sizeof buf), EM_ERR_ARG, "em_device_name", buf[0] == 'x',
                f, __FILE__, __LINE__);
        CHECK(strstr(em_last_error(), f) != NULL, "em_device_name names the bad field");

        em_device out = {(em_backend)99, 42, false, EM_CKPT_NONE};
        if (!d.autodiff) { /* an autodiff device is refused as inner for its own reason */
            em_clear_error();
            chk_err(em_device_autodiff(d, EM_CKPT_BALANCED, &out), EM_ERR_ARG,
                    "em_device_autodiff", out.backend == (em_backend)99, f, __FILE__, __LINE__);
            CHECK(strstr(em_last_error(), f) != NULL, "em_device_autodiff names the bad field");
        }

        em_memory_stats m;
        memset(&m, 0, sizeof m);
        m.bytes_in_use = 7;
        em_clear_error();
        chk_err(em_device_memory(d, &m), EM_ERR_ARG, "em_device_memory", m.bytes_in_use == 7, f,
                __FILE__, __LINE__);
        CHECK(strstr(em_last_error(), f) != NULL, "em_device_memory names the bad field");
        em_clear_error();
        chk_err(em_device_memory_reset_peak(d), EM_ERR_ARG, "em_device_memory_reset_peak", true,
                f, __FILE__, __LINE__);
        em_clear_error();
        chk_err(em_device_memory_release(d), EM_ERR_ARG, "em_device_memory_release", true, f,
                __FILE__, __LINE__);
    }
    /* valid values still work: a plain device whose (ignored) strategy is set, and an
     * autodiff device made by em_device_autodiff */
    em_tensor *t = NULL;
    em_device plain_marked = {EM_BACKEND_REF, 0, false, EM_CKPT_BALANCED};
    CHECK(em_zeros(s2, 1, EM_F32, plain_marked, &t) == EM_OK, "zeros on ref with a strategy");
    em_tensor_release(t);
    t = NULL;
    em_device ad;
    CHECK(em_device_autodiff(ref_dev(), EM_CKPT_BALANCED, &ad) == EM_OK, "autodiff device");
    CHECK(em_zeros(s2, 1, EM_F32, ad, &t) == EM_OK, "zeros on ref+autodiff:balanced");
    em_tensor_release(t);
    em_tensor_release(x);
    CHECKS_DONE();
}

/* ---- released handles ---- */

#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif

/* A handle passed back after its last release is refused (EM_ERR_ARG "released tensor")
 * while its memory still belongs to ember's handle cache; a second release is a no-op that
 * says so, rather than putting the handle in the cache twice. (ASan builds free released
 * handles at once, so this use is a heap-use-after-free there: tests/asan checks that.) */
static void test_released_handle(void **state) {
    (void)state;
#ifdef TEST_ASAN
    skip();
#else
    em_tensor *x = mk1(EM_F32, 2), *stale = mk1(EM_F32, 2);
    em_tensor_release(stale); /* now in this thread's cache, not yet reused */
    EXPECT_ERR_MSG(EM_ERR_ARG, "em_add", "released tensor", em_add(stale, x, &o));
    EXPECT_ERR_MSG(EM_ERR_ARG, "em_add", "released tensor", em_add(x, stale, &o));
    EXPECT_ERR_MSG(EM_ERR_ARG, "em_exp", "released tensor", em_exp(stale, &o));
    EXPECT_ERR_MSG(EM_ERR_ARG, "em_to_device", "released tensor",
                   em_to_device(stale, ref_dev(), &o));
    em_clear_error();
    CHECK(em_tensor_rank(stale) == 0, "rank of a released tensor");
    CHECK(strstr(em_last_error(), "released tensor") != NULL, "em_tensor_rank says why");
    em_clear_error();
    CHECK(em_tensor_numel(stale) == 0, "numel of a released tensor");
    CHECK(strstr(em_last_error(), "em_tensor_numel") != NULL, "em_tensor_numel says why");
    em_clear_error();
    em_tensor_release(stale); /* a double release */
    CHECK(strstr(em_last_error(), "em_tensor_release") != NULL, "double release is reported");
    em_clear_error();
    em_tensor_retain(stale);
    CHECK(strstr(em_last_error(), "em_tensor_retain") != NULL, "retain after release");
    /* the handle was cached once: two new tensors get two different handles */
    em_tensor *n1 = mk1(EM_F32, 2), *n2 = mk1(EM_F32, 2);
    CHECK(n1 && n2 && n1 != n2, "two live tensors share a handle after a double release");
    float v[2] = {0, 0};
    CHECK(em_tensor_to_data(n1, v, sizeof v) == EM_OK, "a recycled handle works");
    em_tensor_release(n1);
    em_tensor_release(n2);
    em_tensor_release(x);
    CHECKS_DONE();
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_status_bad),   cmocka_unit_test(test_device_parse_bad),
        cmocka_unit_test(test_device_name_bad),    cmocka_unit_test(test_backend_register_bad),
        cmocka_unit_test(test_shape_args),         cmocka_unit_test(test_creation_bad),
        cmocka_unit_test(test_random_bad),         cmocka_unit_test(test_to_data_bad),
        cmocka_unit_test(test_metadata_null),      cmocka_unit_test(test_moving_bad),
        cmocka_unit_test(test_device_values_bad),  cmocka_unit_test(test_released_handle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
