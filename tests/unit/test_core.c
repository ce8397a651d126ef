/*
 * test_core.c — the core pieces on good input: statuses, dtypes, f16/bf16 conversion, device
 * text forms and the default device, tensor metadata and lifetime, data round trips, casts,
 * moving to the same device, quantization.
 */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv */
#include <float.h>
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

static const em_device REF = {EM_BACKEND_REF, 0, false, EM_CKPT_NONE};

static float f32_of_bits(uint32_t b) {
    float f;
    memcpy(&f, &b, 4);
    return f;
}
static uint32_t bits_of_f32(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

/* ---- version, statuses, dtypes ---- */

static void test_version_status(void **state) {
    (void)state;
    assert_string_equal(em_version(), EMBER_VERSION_STRING);
    static const char *const names[EM_STATUS_COUNT] = {
        "EM_OK",          "EM_ERR_ARG",     "EM_ERR_SHAPE",    "EM_ERR_DTYPE",
        "EM_ERR_DEVICE",  "EM_ERR_UNSUPPORTED", "EM_ERR_NOMEM", "EM_ERR_BACKEND",
        "EM_ERR_IO",      "EM_ERR_PROTOCOL", "EM_ERR_AUTH",    "EM_ERR_STATE",
    };
    for (int s = 0; s < EM_STATUS_COUNT; s++) assert_string_equal(em_status_name((em_status)s), names[s]);
    assert_string_equal(em_status_name((em_status)EM_STATUS_COUNT), "EM_ERR_UNKNOWN");
    /* the last error is per call and can be cleared */
    em_tensor *o = NULL;
    assert_int_equal(em_exp(NULL, &o), EM_ERR_ARG);
    assert_true(em_last_error()[0] != '\0');
    em_clear_error();
    assert_string_equal(em_last_error(), "");
}

static void test_dtypes(void **state) {
    (void)state;
    static const struct {
        em_dtype dt;
        const char *name;
        em_kind kind;
        size_t size;
    } T[EM_DTYPE_COUNT] = {
        {EM_F32, "f32", EM_KIND_FLOAT, 4},  {EM_F64, "f64", EM_KIND_FLOAT, 8},
        {EM_F16, "f16", EM_KIND_FLOAT, 2},  {EM_BF16, "bf16", EM_KIND_FLOAT, 2},
        {EM_I64, "i64", EM_KIND_INT, 8},    {EM_I32, "i32", EM_KIND_INT, 4},
        {EM_I16, "i16", EM_KIND_INT, 2},    {EM_I8, "i8", EM_KIND_INT, 1},
        {EM_U8, "u8", EM_KIND_INT, 1},      {EM_BOOL, "bool", EM_KIND_BOOL, 1},
        {EM_Q8, "q8", EM_KIND_QUANTIZED, 1}, {EM_Q4, "q4", EM_KIND_QUANTIZED, 1},
    };
    for (int i = 0; i < EM_DTYPE_COUNT; i++) {
        assert_int_equal(T[i].dt, i);
        assert_string_equal(em_dtype_name(T[i].dt), T[i].name);
        assert_int_equal(em_dtype_kind(T[i].dt), T[i].kind);
        assert_int_equal(em_dtype_size(T[i].dt), T[i].size);
        em_dtype back = (em_dtype)99;
        assert_int_equal(em_dtype_parse(T[i].name, &back), EM_OK);
        assert_int_equal(back, T[i].dt);
    }
    assert_string_equal(em_kind_name(EM_KIND_FLOAT), "float");
    assert_string_equal(em_kind_name(EM_KIND_INT), "int");
    assert_string_equal(em_kind_name(EM_KIND_BOOL), "bool");
    assert_string_equal(em_kind_name(EM_KIND_QUANTIZED), "quantized");
}

/* ---- f16 / bf16 ---- */

static void test_f16(void **state) {
    (void)state;
    static const struct {
        float f;
        uint16_t h;
    } TO[] = {
        {1.0f, 0x3C00},           {-2.0f, 0xC000},          {0.1f, 0x2E66},
        {65504.0f, 0x7BFF},       {65519.0f, 0x7BFF},       {65520.0f, 0x7C00}, /* tie: to inf */
        {1e10f, 0x7C00},          {-1e10f, 0xFC00},         {INFINITY, 0x7C00},
        {-INFINITY, 0xFC00},      {0x1p-24f, 0x0001},       {0x1p-25f, 0x0000}, /* tie: to 0 */
        {0x3p-26f, 0x0001},       {0x3p-25f, 0x0002},       {0x1p-26f, 0x0000},
        {0x1p-14f, 0x0400},       {0x3FFp-24f, 0x03FF},     {-0.0f, 0x8000},
        {1.0f + 0x1p-11f, 0x3C00}, /* tie between 0x3C00 and 0x3C01: even */
        {1.0f + 0x3p-11f, 0x3C02}, /* tie between 0x3C01 and 0x3C02: even */
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3C01},
        {1e-40f, 0x0000},         {-1e-40f, 0x8000},
    };
    for (size_t i = 0; i < sizeof TO / sizeof TO[0]; i++) {
        uint16_t got = em_f32_to_f16(TO[i].f);
        if (got != TO[i].h) fail_msg("em_f32_to_f16(%a) = 0x%04x, want 0x%04x", (double)TO[i].f, got, TO[i].h);
    }
    /* NaN stays NaN, also one whose payload is only in the low bits */
    uint16_t n1 = em_f32_to_f16(NAN), n2 = em_f32_to_f16(f32_of_bits(0x7F800001u));
    uint16_t n3 = em_f32_to_f16(f32_of_bits(0xFF801000u));
    assert_true((n1 & 0x7C00) == 0x7C00 && (n1 & 0x03FF) != 0);
    assert_true((n2 & 0x7C00) == 0x7C00 && (n2 & 0x03FF) != 0);
    assert_true((n3 & 0x7C00) == 0x7C00 && (n3 & 0x03FF) != 0);

    static const struct {
        uint16_t h;
        float f;
    } FROM[] = {
        {0x3C00, 1.0f},        {0xC000, -2.0f},      {0x0001, 0x1p-24f}, {0x03FF, 0x3FFp-24f},
        {0x0400, 0x1p-14f},    {0x7BFF, 65504.0f},   {0x7C00, INFINITY}, {0xFC00, -INFINITY},
        {0x3555, 0.333251953125f}, {0x0000, 0.0f},
    };
    for (size_t i = 0; i < sizeof FROM / sizeof FROM[0]; i++) {
        float got = em_f16_to_f32(FROM[i].h);
        if (bits_of_f32(got) != bits_of_f32(FROM[i].f))
            fail_msg("em_f16_to_f32(0x%04x) = %a, want %a", FROM[i].h, (double)got, (double)FROM[i].f);
    }
    assert_true(isnan(em_f16_to_f32(0x7E00)));
    assert_true(isnan(em_f16_to_f32(0x7C01)));
    float nz = em_f16_to_f32(0x8000);
    assert_true(nz == 0.0f && signbit(nz));
    /* every finite f16 survives f16 -> f32 -> f16 */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) continue;
        uint16_t back = em_f32_to_f16(em_f16_to_f32((uint16_t)h));
        if (back != h) fail_msg("f16 0x%04x does not round-trip (got 0x%04x)", h, back);
    }
}

static void test_bf16(void **state) {
    (void)state;
    static const struct {
        float f;
        uint16_t h;
    } TO[] = {
        {1.0f, 0x3F80},
        {-2.0f, 0xC000},
        {1.0f + 0x1p-8f, 0x3F80}, /* tie: even */
        {1.0f + 0x3p-8f, 0x3F82}, /* tie: even */
        {1.0f + 0x1p-8f + 0x1p-16f, 0x3F81},
        {FLT_MAX, 0x7F80}, /* rounds up to inf */
        {INFINITY, 0x7F80},
        {-INFINITY, 0xFF80},
        {-0.0f, 0x8000},
        {1e-40f, 0x0001}, /* f32 subnormal 0x000116C2 */
    };
    for (size_t i = 0; i < sizeof TO / sizeof TO[0]; i++) {
        uint16_t got = em_f32_to_bf16(TO[i].f);
        if (got != TO[i].h) fail_msg("em_f32_to_bf16(%a) = 0x%04x, want 0x%04x", (double)TO[i].f, got, TO[i].h);
    }
    uint16_t n1 = em_f32_to_bf16(NAN), n2 = em_f32_to_bf16(f32_of_bits(0x7F800001u));
    uint16_t n3 = em_f32_to_bf16(f32_of_bits(0x7FFFFFFFu));
    assert_true((n1 & 0x7F80) == 0x7F80 && (n1 & 0x7F) != 0);
    assert_true((n2 & 0x7F80) == 0x7F80 && (n2 & 0x7F) != 0);
    assert_true((n3 & 0x7F80) == 0x7F80 && (n3 & 0x7F) != 0);
    assert_true(em_bf16_to_f32(0x3F80) == 1.0f);
    assert_true(em_bf16_to_f32(0x7F80) == INFINITY);
    assert_true(isnan(em_bf16_to_f32(0x7FC0)));
    assert_int_equal(bits_of_f32(em_bf16_to_f32(0x0001)), 0x00010000u);
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7F80) == 0x7F80 && (h & 0x7F)) continue;
        uint16_t back = em_f32_to_bf16(em_bf16_to_f32((uint16_t)h));
        if (back != h) fail_msg("bf16 0x%04x does not round-trip (got 0x%04x)", h, back);
    }
}

/* ---- devices ---- */

static em_device parse_ok(const char *text) {
    em_device d;
    em_status s = em_device_parse(text, &d);
    if (s != EM_OK) fail_msg("em_device_parse(\"%s\"): %s: %s", text, em_status_name(s), em_last_error());
    return d;
}

static void test_device_text(void **state) {
    (void)state;
    static const struct {
        const char *text, *name;
        bool autodiff;
        em_checkpointing ckpt;
    } OK[] = {
        {"ref", "ref", false, EM_CKPT_NONE},
        {"ref:0", "ref", false, EM_CKPT_NONE},
        {"ref+autodiff", "ref+autodiff", true, EM_CKPT_DISABLED},
        {"ref+autodiff:balanced", "ref+autodiff:balanced", true, EM_CKPT_BALANCED},
        {"ref:0+autodiff:balanced", "ref+autodiff:balanced", true, EM_CKPT_BALANCED},
        {"capture", "capture", false, EM_CKPT_NONE},
        {"capture+autodiff", "capture+autodiff", true, EM_CKPT_DISABLED},
    };
    for (size_t i = 0; i < sizeof OK / sizeof OK[0]; i++) {
        em_device d = parse_ok(OK[i].text);
        assert_int_equal(d.backend, strncmp(OK[i].text, "capture", 7) == 0 ? EM_BACKEND_CAPTURE
                                                                           : EM_BACKEND_REF);
        assert_int_equal(d.index, 0);
        assert_int_equal(d.autodiff, OK[i].autodiff);
        if (d.autodiff) assert_int_equal(d.checkpointing, OK[i].ckpt);
        char buf[64];
        assert_int_equal(em_device_name(d, buf, sizeof buf), EM_OK);
        assert_string_equal(buf, OK[i].name);
        assert_true(em_device_equal(parse_ok(buf), d));
        /* exactly enough room */
        char tight[64];
        assert_int_equal(em_device_name(d, tight, strlen(OK[i].name) + 1), EM_OK);
        assert_string_equal(tight, OK[i].name);
    }
    assert_true(em_device_equal(parse_ok("ref"), REF));
    assert_false(em_device_equal(parse_ok("ref"), parse_ok("ref+autodiff")));
    assert_false(em_device_equal(parse_ok("ref+autodiff"), parse_ok("ref+autodiff:balanced")));
    em_device ad;
    assert_int_equal(em_device_autodiff(REF, EM_CKPT_BALANCED, &ad), EM_OK);
    assert_true(em_device_equal(ad, parse_ok("ref+autodiff:balanced")));

    static const struct {
        const char *text;
        em_status want;
    } BAD[] = {
        {"cpu:1", EM_ERR_DEVICE},     {"cpu:0:0", EM_ERR_ARG},  {"opencl:1", EM_ERR_DEVICE},
        {"ref:99", EM_ERR_DEVICE},    {"remote:0", EM_ERR_DEVICE},
        {"capture:1", EM_ERR_DEVICE}, {"hello world", EM_ERR_ARG}, {"ref;rm", EM_ERR_ARG},
        {"ref+", EM_ERR_ARG},         {"", EM_ERR_ARG},          {"\xff\xfe", EM_ERR_ARG},
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        em_device d = {(em_backend)9, 9, false, EM_CKPT_NONE};
        em_status s = em_device_parse(BAD[i].text, &d);
        if (s != BAD[i].want)
            fail_msg("em_device_parse(\"%s\") = %s, want %s", BAD[i].text, em_status_name(s),
                     em_status_name(BAD[i].want));
        assert_true(strstr(em_last_error(), "em_device_parse") != NULL);
        assert_int_equal(d.index, 9);
    }
    /* "cpu" parses exactly when the cpu backend is compiled in */
    em_device c = {(em_backend)9, 9, false, EM_CKPT_NONE};
    em_status cs = em_device_parse("cpu", &c);
    if (em_backend_get(EM_BACKEND_CPU)) {
        assert_int_equal(cs, EM_OK);
        assert_int_equal(c.backend, EM_BACKEND_CPU);
    } else {
        assert_int_equal(cs, EM_ERR_DEVICE);
        assert_int_equal(c.index, 9);
    }
    assert_string_equal(em_backend_name(EM_BACKEND_REF), "ref");
    assert_string_equal(em_backend_name(EM_BACKEND_CPU), "cpu");
    assert_string_equal(em_backend_name(EM_BACKEND_OPENCL), "opencl");
}

static void test_devices_list(void **state) {
    (void)state;
    size_t count = 0;
    assert_int_equal(em_devices(NULL, 0, &count), EM_OK);
    assert_true(count >= 1);
    em_device *list = calloc(count, sizeof *list);
    assert_non_null(list);
    size_t again = 0;
    assert_int_equal(em_devices(list, count, &again), EM_OK);
    assert_int_equal(again, count);
    bool has_ref = false;
    for (size_t i = 0; i < count; i++) {
        char buf[64];
        assert_int_equal(em_device_name(list[i], buf, sizeof buf), EM_OK);
        assert_true(em_device_equal(parse_ok(buf), list[i]));
        if (em_device_equal(list[i], REF)) has_ref = true;
    }
    assert_true(has_ref);
    /* a smaller cap still reports the total */
    em_device one;
    assert_int_equal(em_devices(&one, 1, &again), EM_OK);
    assert_int_equal(again, count);
    assert_true(em_device_equal(one, list[0]));
    free(list);
}

static bool is_listed(em_device d) {
    em_device list[64];
    size_t n = 0;
    assert_int_equal(em_devices(list, 64, &n), EM_OK);
    for (size_t i = 0; i < n && i < 64; i++)
        if (em_device_equal(list[i], d)) return true;
    return false;
}

static void test_device_default(void **state) {
    (void)state;
    unsetenv("EMBER_DEVICE");
    em_device best = em_device_default();
    assert_true(is_listed(best));
    assert_false(best.autodiff);

    setenv("EMBER_DEVICE", "ref", 1);
    assert_true(em_device_equal(em_device_default(), REF));
    setenv("EMBER_DEVICE", "ref+autodiff:balanced", 1);
    assert_true(em_device_equal(em_device_default(), parse_ok("ref+autodiff:balanced")));
    /* an invalid value is ignored, and does not clobber the caller's last error */
    em_tensor *o = NULL;
    assert_int_equal(em_exp(NULL, &o), EM_ERR_ARG);
    char before[256];
    snprintf(before, sizeof before, "%s", em_last_error());
    static const char *const ignored[] = {"opencl:3", "ref:5", "no such thing", ""};
    for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++) {
        setenv("EMBER_DEVICE", ignored[i], 1);
        assert_true(em_device_equal(em_device_default(), best));
        assert_string_equal(em_last_error(), before);
    }
    unsetenv("EMBER_DEVICE");
}

/* ---- tensors: metadata and lifetime ---- */

static void test_metadata(void **state) {
    (void)state;
    double data[24];
    for (int i = 0; i < 24; i++) data[i] = i;
    const int64_t shape[3] = {2, 3, 4};
    em_tensor *x = NULL;
    assert_int_equal(em_tensor_from_data(data, EM_F64, shape, 3, REF, &x), EM_OK);
    assert_int_equal(em_tensor_rank(x), 3);
    assert_memory_equal(em_tensor_shape(x), shape, sizeof shape);
    assert_int_equal(em_tensor_numel(x), 24);
    assert_int_equal(em_tensor_dim(x, 0), 2);
    assert_int_equal(em_tensor_dim(x, -1), 4);
    assert_int_equal(em_tensor_dtype(x), EM_F64);
    assert_int_equal(em_tensor_kind(x), EM_KIND_FLOAT);
    assert_true(em_device_equal(em_tensor_device(x), REF));
    assert_int_equal(em_tensor_checkpointing(x), EM_CKPT_NONE);
    assert_true(em_tensor_is_contiguous(x));
    assert_true(em_tensor_can_mut(x));
    em_tensor_retain(x);
    assert_false(em_tensor_can_mut(x));
    em_tensor_release(x);
    assert_true(em_tensor_can_mut(x));
    /* a view shares the buffer: neither owns it alone */
    em_tensor *t = NULL;
    assert_int_equal(em_transpose(x, 0, 2, &t), EM_OK);
    assert_false(em_tensor_is_contiguous(t));
    assert_false(em_tensor_can_mut(x));
    assert_false(em_tensor_can_mut(t));
    em_tensor_release(t);
    assert_true(em_tensor_can_mut(x));
    em_tensor_release(x);

    /* 0-d and empty */
    float one = 2.5f;
    em_tensor *s = NULL;
    assert_int_equal(em_tensor_from_data(&one, EM_F32, NULL, 0, REF, &s), EM_OK);
    assert_int_equal(em_tensor_rank(s), 0);
    assert_int_equal(em_tensor_numel(s), 1);
    double item = 0;
    assert_int_equal(em_tensor_item(s, &item), EM_OK);
    assert_true(item == 2.5);
    em_tensor_release(s);
    const int64_t eshape[2] = {3, 0};
    em_tensor *e = NULL;
    assert_int_equal(em_zeros(eshape, 2, EM_I32, REF, &e), EM_OK);
    assert_int_equal(em_tensor_numel(e), 0);
    int32_t none[1];
    assert_int_equal(em_tensor_to_data(e, none, 0), EM_OK);
    em_tensor_release(e);
}

/* ---- data round trips ---- */

/** Fills n elements of dt with values that exercise the dtype (all bit patterns for ints). */
static void fill_pattern(em_dtype dt, void *buf, size_t n) {
    unsigned char *p = buf;
    size_t es = em_dtype_size(dt);
    uint64_t r = 0x9E3779B97F4A7C15u;
    for (size_t i = 0; i < n; i++) {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        double v = (double)((int)(i * 7 % 23) - 11) * 0.375;
        switch (dt) {
        case EM_F32: { float f = (float)v; memcpy(p + i * es, &f, 4); break; }
        case EM_F64: memcpy(p + i * es, &v, 8); break;
        case EM_F16: { uint16_t h = em_f32_to_f16((float)v); memcpy(p + i * es, &h, 2); break; }
        case EM_BF16: { uint16_t h = em_f32_to_bf16((float)v); memcpy(p + i * es, &h, 2); break; }
        case EM_BOOL: p[i] = (unsigned char)(r & 1); break;
        default: memcpy(p + i * es, &r, es); break;
        }
    }
}

static void test_data_round_trip(void **state) {
    (void)state;
    const int64_t shape[2] = {3, 5};
    for (int dt = 0; dt < EM_DTYPE_COUNT; dt++) {
        if (em_dtype_kind((em_dtype)dt) == EM_KIND_QUANTIZED) continue;
        size_t bytes = 15 * em_dtype_size((em_dtype)dt);
        unsigned char in[15 * 8], out[15 * 8 + 4];
        fill_pattern((em_dtype)dt, in, 15);
        em_tensor *x = NULL;
        assert_int_equal(em_tensor_from_data(in, (em_dtype)dt, shape, 2, REF, &x), EM_OK);
        assert_int_equal(em_tensor_dtype(x), dt);
        memset(out, 0xCD, sizeof out);
        assert_int_equal(em_tensor_to_data(x, out, bytes + 4), EM_OK); /* larger dst is fine */
        if (memcmp(in, out, bytes) != 0) fail_msg("%s: data does not round-trip", em_dtype_name((em_dtype)dt));
        assert_int_equal(out[bytes], 0xCD);
        em_tensor_release(x);
        /* 0-d */
        assert_int_equal(em_tensor_from_data(in, (em_dtype)dt, NULL, 0, REF, &x), EM_OK);
        memset(out, 0, sizeof out);
        assert_int_equal(em_tensor_to_data(x, out, em_dtype_size((em_dtype)dt)), EM_OK);
        assert_memory_equal(in, out, em_dtype_size((em_dtype)dt));
        em_tensor_release(x);
    }
}

/* ---- casts ---- */

static double load(em_dtype dt, const void *buf, size_t i) {
    const unsigned char *p = (const unsigned char *)buf + i * em_dtype_size(dt);
    switch (dt) {
    case EM_F32: { float f; memcpy(&f, p, 4); return f; }
    case EM_F64: { double d; memcpy(&d, p, 8); return d; }
    case EM_F16: { uint16_t h; memcpy(&h, p, 2); return em_f16_to_f32(h); }
    case EM_BF16: { uint16_t h; memcpy(&h, p, 2); return em_bf16_to_f32(h); }
    case EM_I64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    case EM_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case EM_I16: { int16_t v; memcpy(&v, p, 2); return v; }
    case EM_I8: return (int8_t)*p;
    case EM_U8: case EM_BOOL: return *p;
    default: return NAN;
    }
}

static void store(em_dtype dt, void *buf, size_t i, double v) {
    unsigned char *p = (unsigned char *)buf + i * em_dtype_size(dt);
    switch (dt) {
    case EM_F32: { float f = (float)v; memcpy(p, &f, 4); break; }
    case EM_F64: memcpy(p, &v, 8); break;
    case EM_F16: { uint16_t h = em_f32_to_f16((float)v); memcpy(p, &h, 2); break; }
    case EM_BF16: { uint16_t h = em_f32_to_bf16((float)v); memcpy(p, &h, 2); break; }
    case EM_I64: { int64_t x = (int64_t)v; memcpy(p, &x, 8); break; }
    case EM_I32: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
    case EM_I16: { int16_t x = (int16_t)v; memcpy(p, &x, 2); break; }
    case EM_I8: *(int8_t *)p = (int8_t)v; break;
    default: *p = (unsigned char)v; break;
    }
}

/** Casts `n` values given as doubles from `from` to `to` and compares with `want`. */
static void check_cast(em_dtype from, em_dtype to, const double *vals, const double *want, int n) {
    unsigned char in[64], out[64];
    for (int i = 0; i < n; i++) store(from, in, (size_t)i, vals[i]);
    const int64_t shape[1] = {n};
    em_tensor *x = NULL, *y = NULL;
    assert_int_equal(em_tensor_from_data(in, from, shape, 1, REF, &x), EM_OK);
    em_status s = em_cast(x, to, &y);
    if (s != EM_OK) fail_msg("em_cast %s -> %s: %s", em_dtype_name(from), em_dtype_name(to), em_last_error());
    assert_int_equal(em_tensor_dtype(y), to);
    assert_int_equal(em_tensor_to_data(y, out, (size_t)n * em_dtype_size(to)), EM_OK);
    for (int i = 0; i < n; i++) {
        double got = load(to, out, (size_t)i);
        if (!(got == want[i] || (isnan(got) && isnan(want[i]))))
            fail_msg("em_cast %s -> %s of %g: got %g, want %g", em_dtype_name(from),
                     em_dtype_name(to), vals[i], got, want[i]);
    }
    if (from == to) assert_ptr_equal(x, y); /* a new reference to x itself */
    em_tensor_release(y);
    em_tensor_release(x);
}

static void test_cast_pairs(void **state) {
    (void)state;
    /* values every non-quantized dtype holds exactly */
    const double vals[5] = {0, 1, 2, 5, 100};
    const double bools[5] = {0, 1, 0, 1, 1};
    for (int a = 0; a < EM_DTYPE_COUNT; a++) {
        if (em_dtype_kind((em_dtype)a) == EM_KIND_QUANTIZED) continue;
        for (int b = 0; b < EM_DTYPE_COUNT; b++) {
            if (em_dtype_kind((em_dtype)b) == EM_KIND_QUANTIZED) continue;
            const double *src = a == EM_BOOL ? bools : vals;
            double want[5];
            for (int i = 0; i < 5; i++) want[i] = b == EM_BOOL ? (src[i] != 0) : src[i];
            check_cast((em_dtype)a, (em_dtype)b, src, want, 5);
        }
    }
    /* floats to ints truncate toward zero; to bool is != 0 (NaN is true) */
    const double fv[4] = {-2.75, 2.75, -0.5, 7.0};
    const double fi[4] = {-2, 2, 0, 7};
    check_cast(EM_F32, EM_I32, fv, fi, 4);
    check_cast(EM_F64, EM_I64, fv, fi, 4);
    check_cast(EM_F16, EM_I8, fv, fi, 4);
    check_cast(EM_BF16, EM_I16, fv, fi, 4);
    const double bv[4] = {0.0, -0.0, 0.125, NAN};
    const double bw[4] = {0, 0, 1, 1};
    check_cast(EM_F32, EM_BOOL, bv, bw, 4);
    /* narrowing ints wrap like C and NumPy */
    const double iv[3] = {300, -1, 128};
    const double u8w[3] = {44, 255, 128}, i8w[3] = {44, -1, -128};
    check_cast(EM_I32, EM_U8, iv, u8w, 3);
    check_cast(EM_I64, EM_I8, iv, i8w, 3);
    /* rounding to nearest even when narrowing floats */
    const double rv[2] = {1.0 + 0x1p-11, 16777217.0};
    const double rw16[2] = {1.0, INFINITY}, rw32[2] = {1.0 + 0x1p-11, 16777216.0};
    check_cast(EM_F64, EM_F16, rv, rw16, 2);
    check_cast(EM_F64, EM_F32, rv, rw32, 2);
    const double big[1] = {16777217.0}, bigw[1] = {16777216.0};
    check_cast(EM_I64, EM_F32, big, bigw, 1);
}

/* ---- moving, quantization ---- */

static void test_to_device_same(void **state) {
    (void)state;
    em_tensor *x = NULL, *y = NULL;
    assert_int_equal(em_arange(0, 6, 1, EM_F32, REF, &x), EM_OK);
    assert_int_equal(em_to_device(x, REF, &y), EM_OK);
    assert_ptr_equal(x, y); /* the same device: a new reference to x */
    assert_false(em_tensor_can_mut(x));
    em_tensor_release(y);
    assert_true(em_tensor_can_mut(x));
    em_tensor_release(x);
}

static void check_quant(em_dtype storage) {
    enum { N = 33 };
    float v[N], back[N];
    for (int i = 0; i < N; i++) v[i] = -3.0f + 0.25f * (float)i + ((i % 3) ? 0.01f : 0.0f);
    const int64_t shape[1] = {N};
    em_tensor *x = NULL, *q = NULL, *d = NULL;
    assert_int_equal(em_tensor_from_data(v, EM_F32, shape, 1, REF, &x), EM_OK);
    if (em_quantize(x, storage, &q) != EM_OK) fail_msg("em_quantize: %s", em_last_error());
    assert_int_equal(em_tensor_dtype(q), storage);
    assert_int_equal(em_tensor_kind(q), EM_KIND_QUANTIZED);
    assert_int_equal(em_tensor_numel(q), N);
    em_quant_scheme sc;
    assert_int_equal(em_tensor_scheme(q, &sc), EM_OK);
    assert_int_equal(sc.storage, storage);
    assert_true(sc.scale > 0);
    if (em_dequantize(q, &d) != EM_OK) fail_msg("em_dequantize: %s", em_last_error());
    assert_int_equal(em_tensor_dtype(d), EM_F32);
    assert_int_equal(em_tensor_numel(d), N);
    assert_int_equal(em_tensor_to_data(d, back, sizeof back), EM_OK);
    for (int i = 0; i < N; i++) {
        double err = fabs((double)back[i] - (double)v[i]);
        if (err > sc.scale / 2 * (1 + 1e-5) + 1e-7)
            fail_msg("%s: %g came back as %g (scale %g)", em_dtype_name(storage), (double)v[i],
                     (double)back[i], (double)sc.scale);
    }
    em_tensor_release(d);
    em_tensor_release(q);
    em_tensor_release(x);
}

static void test_quantize(void **state) {
    (void)state;
    check_quant(EM_Q8);
    check_quant(EM_Q4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_status), cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_f16),            cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_device_text),    cmocka_unit_test(test_devices_list),
        cmocka_unit_test(test_device_default), cmocka_unit_test(test_metadata),
        cmocka_unit_test(test_data_round_trip), cmocka_unit_test(test_cast_pairs),
        cmocka_unit_test(test_to_device_same), cmocka_unit_test(test_quantize),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
