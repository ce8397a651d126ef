/*
 * test_io_quant.c — quantized tensors in safetensors files (io.h): a round trip of every
 * scheme on every device (the layout's bytes and the scheme come back equal, the float tensors
 * beside them unchanged, the metadata key written as documented), and each reason a hostile
 * "ember.quant.<name>" metadata value is refused (EM_ERR_IO with the reason, never a crash).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ember/ember.h"
#include "ember/io.h"

#define OK(call)                                                                             \
    do {                                                                                     \
        em_status s_ = (call);                                                               \
        if (s_ != EM_OK)                                                                     \
            fail_msg("%s:%d: %s: %s: %s", __FILE__, __LINE__, #call, em_status_name(s_),     \
                     em_last_error());                                                       \
    } while (0)

static const em_device REF = {EM_BACKEND_REF, 0, false, EM_CKPT_NONE};

/* The schemes of em_quant_kind, as em_quantize_as takes them. */
typedef struct scheme_case {
    const char *name; /* the file's name of the scheme */
    em_quant_scheme sc;
} scheme_case;

static const scheme_case schemes[] = {
    {"q8_affine", {.storage = EM_Q8, .kind = EM_QK_AFFINE}},
    {"q4_affine", {.storage = EM_Q4, .kind = EM_QK_AFFINE}},
    {"q8_symmetric", {.storage = EM_Q8, .kind = EM_QK_SYMMETRIC}},
    {"q8_block", {.storage = EM_Q8, .kind = EM_QK_BLOCK, .scale_dtype = EM_F32}},
    {"q8_block", {.storage = EM_Q8, .kind = EM_QK_BLOCK, .scale_dtype = EM_F16}},
    {"q4_block", {.storage = EM_Q4, .kind = EM_QK_BLOCK, .scale_dtype = EM_F32}},
    {"q4_block", {.storage = EM_Q4, .kind = EM_QK_BLOCK, .scale_dtype = EM_F16}},
    {"q4_block_min", {.storage = EM_Q4, .kind = EM_QK_BLOCK_MIN, .scale_dtype = EM_F32}},
    {"q4_block_min", {.storage = EM_Q4, .kind = EM_QK_BLOCK_MIN, .scale_dtype = EM_F16}},
};
#define NSCHEMES (sizeof schemes / sizeof schemes[0])

static char tmpdir[64];

static int setup_dir(void **state) {
    (void)state;
    strcpy(tmpdir, "/tmp/ember-test-io-quant-XXXXXX");
    return mkdtemp(tmpdir) == NULL ? -1 : 0;
}

static int remove_dir(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static uint8_t *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* The layout's bytes of a quantized tensor (malloc'd) and their count. */
static uint8_t *quant_bytes(const em_tensor *q, size_t *n) {
    em_quant_scheme sc;
    OK(em_tensor_scheme(q, &sc));
    OK(em_quant_nbytes(&sc, em_tensor_shape(q), em_tensor_rank(q), n));
    uint8_t *b = malloc(*n ? *n : 1);
    assert_non_null(b);
    OK(em_tensor_to_data(q, b, *n));
    return b;
}

/* Every scheme on every device: saved beside a float tensor, loaded back on the device with its
 * scheme and bytes; the float tensor unchanged; the metadata key in the file's header. */
static void test_quant_round_trip(void **state) {
    (void)state;
    em_device devs[16];
    size_t nd = 0;
    OK(em_devices(devs, 16, &nd));
    char path[128];
    snprintf(path, sizeof path, "%s/q.safetensors", tmpdir);
    for (size_t di = 0; di < nd; di++) {
        em_device dev = devs[di];
        if (dev.autodiff || dev.backend == EM_BACKEND_CAPTURE) continue;
        char dn[64];
        em_device_name(dev, dn, sizeof dn);
        for (size_t k = 0; k < NSCHEMES; k++) {
            const scheme_case *c = &schemes[k];
            /* [3, 64]: two blocks a row; per-tensor kinds also [5] */
            const bool block = c->sc.kind == EM_QK_BLOCK || c->sc.kind == EM_QK_BLOCK_MIN;
            const int64_t shape[2] = {3, 64}, shape1[1] = {5};
            em_tensor *x = NULL, *q = NULL, *f = NULL, *x1 = NULL, *q1 = NULL;
            OK(em_rand_normal(shape, 2, EM_F32, 0.0, 1.0, 7 + k, dev, &x));
            OK(em_quantize_as(x, &c->sc, &q));
            OK(em_rand_uniform(shape1, 1, EM_F32, -1, 1, 3, dev, &f));
            const char *names[3] = {"layer.weight", "bias", "small"};
            const em_tensor *ts[3] = {q, f, NULL};
            size_t n = 2;
            if (!block) {
                OK(em_rand_uniform(shape1, 1, EM_F32, -2, 3, 5, dev, &x1));
                OK(em_quantize_as(x1, &c->sc, &q1));
                ts[n++] = q1;
            }
            OK(em_safetensors_save(path, names, ts, n));
            /* the header: a U8 entry, and the documented key with the scheme's name */
            size_t flen = 0;
            uint8_t *file = read_file(path, &flen);
            char want[64];
            snprintf(want, sizeof want, "\\\"scheme\\\":\\\"%s\\\"", c->name);
            if (strstr((const char *)file + 8, "\"ember.quant.layer.weight\"") == NULL ||
                strstr((const char *)file + 8, want) == NULL ||
                strstr((const char *)file + 8, "\"U8\"") == NULL)
                fail_msg("%s %s: the header lacks the key or %s", dn, c->name, want);
            free(file);
            em_tensor_map *m = NULL;
            OK(em_safetensors_load(path, dev, &m));
            assert_int_equal(em_tensor_map_size(m), n);
            for (size_t i = 0; i < n; i++) {
                em_tensor *got = NULL;
                OK(em_tensor_map_get(m, names[i], &got));
                const em_tensor *src = ts[i];
                assert_int_equal(em_tensor_dtype(got), em_tensor_dtype(src));
                assert_int_equal(em_tensor_rank(got), em_tensor_rank(src));
                assert_memory_equal(em_tensor_shape(got), em_tensor_shape(src),
                                    (size_t)em_tensor_rank(src) * sizeof(int64_t));
                em_device gd = em_tensor_device(got);
                assert_int_equal(gd.backend, dev.backend);
                if (em_tensor_kind(src) == EM_KIND_QUANTIZED) {
                    em_quant_scheme a, b;
                    OK(em_tensor_scheme(src, &a));
                    OK(em_tensor_scheme(got, &b));
                    assert_int_equal(a.storage, b.storage);
                    assert_int_equal(a.kind, b.kind);
                    if (block) assert_int_equal(a.scale_dtype, b.scale_dtype);
                    if (!block) {
                        assert_memory_equal(&a.scale, &b.scale, sizeof a.scale);
                        assert_int_equal(a.zero_point, b.zero_point);
                    }
                    size_t na = 0, nb = 0;
                    uint8_t *ba = quant_bytes(src, &na), *bb = quant_bytes(got, &nb);
                    assert_int_equal(na, nb);
                    if (memcmp(ba, bb, na) != 0)
                        fail_msg("%s %s '%s': the bytes differ", dn, c->name, names[i]);
                    free(ba), free(bb);
                } else {
                    float va[5], vb[5];
                    OK(em_tensor_to_data(src, va, sizeof va));
                    OK(em_tensor_to_data(got, vb, sizeof vb));
                    assert_memory_equal(va, vb, sizeof va);
                }
                em_tensor_release(got);
            }
            em_tensor_map_release(m);
            em_tensor_release(x), em_tensor_release(q), em_tensor_release(f);
            em_tensor_release(x1), em_tensor_release(q1);
        }
    }
}

/* A 2-d block tensor's transpose (blocks along dim 0, em_params_quantize's form of a weight
 * whose in is not a multiple of 32) saves as "transposed" and loads back as that view; a view
 * whose blocks run along a middle dim is refused, the tensor it views saves. */
static void test_quant_save_view(void **state) {
    (void)state;
    const int64_t shape[2] = {40, 64}, shape3[3] = {2, 2, 64};
    em_tensor *x = NULL, *q = NULL, *qt = NULL, *x3 = NULL, *q3 = NULL, *q3p = NULL;
    OK(em_rand_normal(shape, 2, EM_F32, 0.0, 1.0, 1, REF, &x));
    em_quant_scheme sc = {.storage = EM_Q4, .kind = EM_QK_BLOCK_MIN, .scale_dtype = EM_F16};
    OK(em_quantize_as(x, &sc, &q));
    OK(em_transpose(q, 0, 1, &qt)); /* [64, 40], blocks along dim 0 */
    char path[128];
    snprintf(path, sizeof path, "%s/view.safetensors", tmpdir);
    const char *names[1] = {"w"};
    const em_tensor *ts[1] = {qt};
    OK(em_safetensors_save(path, names, ts, 1));
    size_t flen = 0;
    uint8_t *file = read_file(path, &flen);
    assert_non_null(strstr((const char *)file + 8, "\\\"transposed\\\":true"));
    free(file);
    em_tensor_map *m = NULL;
    em_tensor *got = NULL, *d1 = NULL, *d2 = NULL;
    OK(em_safetensors_load(path, REF, &m));
    OK(em_tensor_map_get(m, "w", &got));
    assert_int_equal(em_tensor_rank(got), 2);
    assert_int_equal(em_tensor_shape(got)[0], 64);
    assert_int_equal(em_tensor_shape(got)[1], 40);
    em_quant_scheme gs;
    OK(em_tensor_scheme(got, &gs));
    assert_int_equal(gs.axis, 0);
    assert_int_equal(gs.kind, EM_QK_BLOCK_MIN);
    OK(em_dequantize(qt, &d1));
    OK(em_dequantize(got, &d2));
    float a[64 * 40], b[64 * 40];
    OK(em_tensor_to_data(d1, a, sizeof a));
    OK(em_tensor_to_data(d2, b, sizeof b));
    assert_memory_equal(a, b, sizeof a);
    em_tensor_release(got), em_tensor_release(d1), em_tensor_release(d2);
    em_tensor_map_release(m);
    /* blocks along the middle dim of a 3-d view */
    OK(em_rand_normal(shape3, 3, EM_F32, 0.0, 1.0, 2, REF, &x3));
    OK(em_quantize_as(x3, &sc, &q3));
    const int perm[3] = {0, 2, 1};
    OK(em_permute(q3, perm, 3, &q3p));
    ts[0] = q3p;
    em_status s = em_safetensors_save(path, names, ts, 1);
    assert_int_equal(s, EM_ERR_UNSUPPORTED);
    assert_non_null(strstr(em_last_error(), "save the tensor it views"));
    ts[0] = q3;
    OK(em_safetensors_save(path, names, ts, 1));
    em_tensor_release(x), em_tensor_release(q), em_tensor_release(qt);
    em_tensor_release(x3), em_tensor_release(q3), em_tensor_release(q3p);
}

/* A safetensors image with one tensor "q" (dtype, shape text, nbytes bytes of `fill`) and the
 * metadata pairs meta[0..2*nmeta) (keys, then values given as raw text and JSON-escaped here). */
static uint8_t *image(const char *dtype, const char *shape, size_t nbytes, uint8_t fill,
                      const char *const *meta, size_t nmeta, size_t *len) {
    char *h = malloc(8192);
    assert_non_null(h);
    size_t k = (size_t)snprintf(h, 8192, "{\"__metadata__\":{");
    for (size_t i = 0; i < nmeta; i++) {
        k += (size_t)snprintf(h + k, 8192 - k, "%s\"%s\":\"", i ? "," : "", meta[2 * i]);
        for (const char *p = meta[2 * i + 1]; *p; p++) {
            if (*p == '"' || *p == '\\') h[k++] = '\\';
            h[k++] = *p;
        }
        h[k++] = '"';
    }
    k += (size_t)snprintf(h + k, 8192 - k,
                          "},\"q\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[0,%zu]}}",
                          dtype, shape, nbytes);
    size_t padded = (k + 7) / 8 * 8;
    uint8_t *buf = malloc(8 + padded + nbytes + 1);
    assert_non_null(buf);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    memcpy(buf + 8, h, k);
    memset(buf + 8 + k, ' ', padded - k);
    memset(buf + 8 + padded, fill, nbytes);
    free(h);
    *len = 8 + padded + nbytes;
    return buf;
}

typedef struct hostile {
    const char *value;  /* the "ember.quant.q" value */
    const char *dtype;  /* the entry's */
    const char *shape;
    size_t nbytes;
    uint8_t fill;
    const char *why;    /* in the message */
} hostile;

static const hostile rows[] = {
    {"not json", "U8", "[34]", 34, 0, "is not a JSON object"},
    {"[1, 2]", "U8", "[34]", 34, 0, "is not a JSON object"},
    {"{\"scheme\":\"q8_block\"", "U8", "[34]", 34, 0, "is not a JSON object"},
    {"{}", "U8", "[34]", 34, 0, "has no string \"scheme\""},
    {"{\"scheme\":8}", "U8", "[34]", 34, 0, "has no string \"scheme\""},
    {"{\"scheme\":\"q3_block\",\"scale_dtype\":\"f16\",\"shape\":[1,32]}", "U8", "[34]", 34, 0,
     "unknown scheme \"q3_block\""},
    {"{\"scheme\":\"q8_block\",\"shape\":[1,32]}", "U8", "[34]", 34, 0, "does not have the keys"},
    {"{\"scheme\":\"q8_block\",\"scale_dtype\":\"f16\",\"shape\":[1,32],\"scale\":1}", "U8",
     "[34]", 34, 0, "does not have the keys"},
    {"{\"scheme\":\"q8_block\",\"scale_dtype\":\"f16\",\"shape\":[1,32],\"axis\":0}", "U8",
     "[34]", 34, 0, "does not have the keys"},
    {"{\"scheme\":\"q8_symmetric\",\"scale\":1,\"zero_point\":0,\"shape\":[2]}", "U8", "[2]", 2,
     0, "does not have the keys"},
    {"{\"scheme\":\"q8_affine\",\"scale\":1,\"shape\":[2]}", "U8", "[2]", 2, 0,
     "does not have the keys"},
    {"{\"scheme\":\"q8_block\",\"scale_dtype\":\"bf16\",\"shape\":[1,32]}", "U8", "[34]", 34, 0,
     "scale_dtype"},
    {"{\"scheme\":\"q8_block\",\"scale_dtype\":16,\"shape\":[1,32]}", "U8", "[34]", 34, 0,
     "scale_dtype"},
    {"{\"scheme\":\"q8_affine\",\"scale\":0,\"zero_point\":0,\"shape\":[2]}", "U8", "[2]", 2, 0,
     "\"scale\""},
    {"{\"scheme\":\"q8_affine\",\"scale\":-1,\"zero_point\":0,\"shape\":[2]}", "U8", "[2]", 2, 0,
     "\"scale\""},
    {"{\"scheme\":\"q8_affine\",\"scale\":1e300,\"zero_point\":0,\"shape\":[2]}", "U8", "[2]", 2,
     0, "\"scale\""},
    {"{\"scheme\":\"q8_affine\",\"scale\":\"1\",\"zero_point\":0,\"shape\":[2]}", "U8", "[2]", 2,
     0, "\"scale\""},
    {"{\"scheme\":\"q8_affine\",\"scale\":0.5,\"zero_point\":200,\"shape\":[2]}", "U8", "[2]", 2,
     0, "zero_point"},
    {"{\"scheme\":\"q4_affine\",\"scale\":0.5,\"zero_point\":8,\"shape\":[2]}", "U8", "[2]", 2,
     0, "zero_point"},
    {"{\"scheme\":\"q4_affine\",\"scale\":0.5,\"zero_point\":1.5,\"shape\":[2]}", "U8", "[2]", 2,
     0, "zero_point"},
    {"{\"scheme\":\"q8_block\",\"scale_dtype\":\"f16\",\"shape\":\"1,32\"}", "U8", "[34]", 34, 0,
     "\"shape\""},
    {"{\"scheme\":\"q8_block\",\"scale_dtype\":\"f16\",\"shape\":[1,1,1,1,1,1,1,1,32]}", "U8",
     "[34]", 34, 0, "at most 8"},
    {"{\"scheme\":\"q8_block\",\"scale_dtype\":\"f16\",\"shape\":[-1,32]}", "U8", "[34]", 34, 0,
     "non-negative integer"},
    {"{\"scheme\":\"q8_block\",\"scale_dtype\":\"f16\",\"shape\":[1.5,32]}", "U8", "[34]", 34, 0,
     "non-negative integer"},
    {"{\"scheme\":\"q8_block\",\"scale_dtype\":\"f16\",\"shape\":[1,33]}", "U8", "[34]", 34, 0,
     "cannot hold"},
    {"{\"scheme\":\"q8_block\",\"scale_dtype\":\"f16\",\"shape\":[]}", "U8", "[34]", 34, 0,
     "cannot hold"},
    {"{\"scheme\":\"q8_block\",\"scale_dtype\":\"f16\",\"shape\":[9007199254740992,"
     "9007199254740992,32]}",
     "U8", "[34]", 34, 0, "cannot hold"},
    {"{\"scheme\":\"q8_block\",\"scale_dtype\":\"f16\",\"shape\":[2,32]}", "U8", "[34]", 34, 0,
     "needs 68 bytes"},
    {"{\"scheme\":\"q8_block\",\"scale_dtype\":\"f32\",\"shape\":[1,32]}", "U8", "[34]", 34, 0,
     "needs 36 bytes"},
    {"{\"scheme\":\"q4_block_min\",\"scale_dtype\":\"f16\",\"shape\":[1,32]}", "F32", "[5]", 20,
     0, "not \"U8\" of rank 1"},
    {"{\"scheme\":\"q4_block_min\",\"scale_dtype\":\"f16\",\"shape\":[1,32]}", "U8", "[4,5]", 20,
     0, "not \"U8\" of rank 1"},
    {"{\"scheme\":\"q8_block\",\"scale_dtype\":\"f16\",\"shape\":[1,32],\"transposed\":1}",
     "U8", "[34]", 34, 0, "\"transposed\" that is not a boolean"},
    {"{\"scheme\":\"q8_affine\",\"scale\":1,\"zero_point\":0,\"shape\":[2],\"transposed\":"
     "true}",
     "U8", "[2]", 2, 0, "\"transposed\" that is not a boolean"},
    {"{\"scheme\":\"q8_block\",\"scale_dtype\":\"f16\",\"shape\":[1,1,32],\"transposed\":"
     "true}",
     "U8", "[34]", 34, 0, "shape is not 2-d"},
    {"{\"scheme\":\"q8_block\",\"scale_dtype\":\"f16\",\"shape\":[1,32],\"transposed\":"
     "true}",
     "U8", "[34]", 34, 0, "cannot hold"},
    {"{\"scheme\":\"q8_symmetric\",\"scale\":1,\"shape\":[4]}", "U8", "[4]", 4, 0x80,
     "outside [-127, 127]"},
    {"{\"scheme\":\"q4_affine\",\"scale\":1,\"zero_point\":0,\"shape\":[4]}", "U8", "[4]", 4, 0x10,
     "outside [-8, 7]"},
    {"{\"scheme\":\"q4_affine\",\"scale\":1,\"zero_point\":0,\"shape\":[4]}", "U8", "[4]", 4, 0xf7,
     "outside [-8, 7]"},
};

static void test_quant_hostile(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const hostile *r = &rows[i];
        const char *meta[2] = {"ember.quant.q", r->value};
        size_t len = 0;
        uint8_t *buf = image(r->dtype, r->shape, r->nbytes, r->fill, meta, 1, &len);
        em_tensor_map *m = NULL;
        em_clear_error();
        em_status s = em_safetensors_load_buffer(buf, len, REF, &m);
        if (s != EM_ERR_IO || m != NULL || strstr(em_last_error(), r->why) == NULL)
            fail_msg("row %zu (%s): expected EM_ERR_IO with \"%s\", got %s: \"%s\"", i, r->value,
                     r->why, em_status_name(s), em_last_error());
        free(buf);
    }
    /* a key that names no tensor; one tensor described twice */
    const char *none[2] = {"ember.quant.nope",
                           "{\"scheme\":\"q8_block\",\"scale_dtype\":\"f16\",\"shape\":[1,32]}"};
    const char *twice[4] = {"ember.quant.q",
                            "{\"scheme\":\"q8_block\",\"scale_dtype\":\"f16\",\"shape\":[1,32]}",
                            "ember.quant.q",
                            "{\"scheme\":\"q8_block\",\"scale_dtype\":\"f16\",\"shape\":[1,32]}"};
    struct {
        const char *const *meta;
        size_t n;
        const char *why;
    } more[] = {{none, 1, "does not have"}, {twice, 2, "given twice"}};
    for (size_t i = 0; i < 2; i++) {
        size_t len = 0;
        uint8_t *buf = image("U8", "[34]", 34, 0, more[i].meta, more[i].n, &len);
        em_tensor_map *m = NULL;
        em_status s = em_safetensors_load_buffer(buf, len, REF, &m);
        if (s != EM_ERR_IO || strstr(em_last_error(), more[i].why) == NULL)
            fail_msg("expected EM_ERR_IO with \"%s\", got %s: \"%s\"", more[i].why,
                     em_status_name(s), em_last_error());
        free(buf);
    }
    /* the well-formed row loads: a q8 block of 32 with an f16 scale (NaN scales taken as
     * given), and other metadata keys are left alone */
    const char *good[4] = {"ember.quant.q",
                           "{\"scheme\":\"q8_block\",\"scale_dtype\":\"f16\",\"shape\":[1,32]}",
                           "ember.other", "anything"};
    size_t len = 0;
    uint8_t *buf = image("U8", "[34]", 34, 0xff, good, 2, &len);
    em_tensor_map *m = NULL;
    OK(em_safetensors_load_buffer(buf, len, REF, &m));
    em_tensor *q = NULL, *d = NULL;
    OK(em_tensor_map_get(m, "q", &q));
    assert_int_equal(em_tensor_dtype(q), EM_Q8);
    assert_int_equal(em_tensor_numel(q), 32);
    OK(em_dequantize(q, &d));
    em_tensor_release(d), em_tensor_release(q);
    em_tensor_map_release(m);
    free(buf);
    /* without the key the same bytes are a plain U8 tensor */
    buf = image("U8", "[34]", 34, 0xff, good + 2, 1, &len);
    OK(em_safetensors_load_buffer(buf, len, REF, &m));
    OK(em_tensor_map_get(m, "q", &q));
    assert_int_equal(em_tensor_dtype(q), EM_U8);
    assert_int_equal(em_tensor_numel(q), 34);
    em_tensor_release(q);
    em_tensor_map_release(m);
    free(buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quant_round_trip),
        cmocka_unit_test(test_quant_save_view),
        cmocka_unit_test(test_quant_hostile),
    };
    return cmocka_run_group_tests(tests, setup_dir, remove_dir);
}
