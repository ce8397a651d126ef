/*
 * test_io.c — include/ember/io.h: IDX datasets (files the test writes itself, plain and gzip,
 * and their truncated or corrupt variants; the real Fashion-MNIST files when Debian's
 * dataset-fashion-mnist is installed), seeded shuffles, and safetensors (a round trip of every
 * dtype on every device, the reference file written by tests/io/make_safetensors.py, and each
 * reason a corrupt or truncated file is refused).
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
#include <zlib.h>

#include "ember/ember.h"
#include "ember/io.h"

#ifndef EMBER_TEST_IO_DIR
#define EMBER_TEST_IO_DIR "tests/io"
#endif

#define OK(call)                                                                             \
    do {                                                                                     \
        em_status s_ = (call);                                                               \
        if (s_ != EM_OK)                                                                     \
            fail_msg("%s:%d: %s: %s: %s", __FILE__, __LINE__, #call, em_status_name(s_),     \
                     em_last_error());                                                       \
    } while (0)

/* A call that must fail with `want` and a message containing `part`. */
#define FAILS(want, part, call)                                                              \
    do {                                                                                     \
        em_clear_error();                                                                    \
        em_status s_ = (call);                                                               \
        if (s_ != (want) || strstr(em_last_error(), (part)) == NULL)                         \
            fail_msg("%s:%d: %s: expected %s with \"%s\", got %s: \"%s\"", __FILE__,         \
                     __LINE__, #call, em_status_name(want), (part), em_status_name(s_),      \
                     em_last_error());                                                       \
    } while (0)

static const em_device REF = {EM_BACKEND_REF, 0, false, EM_CKPT_NONE};

static char tmpdir[64];

static int setup_dir(void **state) {
    (void)state;
    strcpy(tmpdir, "/tmp/ember-test-io-XXXXXX");
    return mkdtemp(tmpdir) == NULL ? -1 : 0;
}

static int remove_dir(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *tmp_path(const char *name) {
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static void write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void write_gz(const char *path, const void *data, size_t len) {
    gzFile f = gzopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(gzwrite(f, data, (unsigned)len), (int)len);
    assert_int_equal(gzclose(f), Z_OK);
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

/* ---- IDX ------------------------------------------------------------------------------------ */

enum { N = 5, ROWS = 3, COLS = 4 };

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* An images file of n x rows x cols bytes (pixel value (17 * i + j) % 256) and its size. */
static size_t make_images(uint8_t *buf, uint32_t n, uint32_t rows, uint32_t cols) {
    put_be32(buf, 0x803);
    put_be32(buf + 4, n), put_be32(buf + 8, rows), put_be32(buf + 12, cols);
    size_t body = (size_t)n * rows * cols;
    for (size_t i = 0; i < body; i++) buf[16 + i] = (uint8_t)((17 * (i / (rows * cols)) + i % (rows * cols)) % 256);
    return 16 + body;
}

static size_t make_labels(uint8_t *buf, uint32_t n) {
    put_be32(buf, 0x801);
    put_be32(buf + 4, n);
    for (uint32_t i = 0; i < n; i++) buf[8 + i] = (uint8_t)((3 * i) % 10);
    return 8 + n;
}

static void check_dataset(const char *ip, const char *lp) {
    em_dataset *ds = NULL;
    OK(em_idx_load(ip, lp, &ds));
    assert_int_equal(em_dataset_size(ds), N);
    int64_t r = 0, c = 0;
    OK(em_dataset_shape(ds, &r, &c));
    assert_int_equal(r, ROWS);
    assert_int_equal(c, COLS);
    assert_int_equal(em_dataset_num_classes(ds), 10); /* labels 0 3 6 9 2 */
    const int64_t idx[3] = {4, 0, 2};
    size_t ndev = 0;
    OK(em_devices(NULL, 0, &ndev));
    em_device devs[16];
    OK(em_devices(devs, 16, &ndev));
    for (size_t d = 0; d < ndev && d < 16; d++) {
        em_tensor *x = NULL, *y = NULL;
        OK(em_dataset_batch(ds, idx, 3, devs[d], &x, &y));
        assert_int_equal(em_tensor_dtype(x), EM_F32);
        assert_int_equal(em_tensor_rank(x), 4);
        const int64_t *sh = em_tensor_shape(x);
        assert_true(sh[0] == 3 && sh[1] == 1 && sh[2] == ROWS && sh[3] == COLS);
        assert_int_equal(em_tensor_dtype(y), EM_I64);
        float xv[3 * ROWS * COLS];
        int64_t yv[3];
        OK(em_tensor_to_data(x, xv, sizeof xv));
        OK(em_tensor_to_data(y, yv, sizeof yv));
        for (int b = 0; b < 3; b++) {
            assert_int_equal(yv[b], (3 * idx[b]) % 10);
            for (int j = 0; j < ROWS * COLS; j++) {
                float want = (float)((17 * idx[b] + j) % 256) / 255.0f;
                assert_float_equal(xv[b * ROWS * COLS + j], want, 1e-6);
            }
        }
        em_tensor_release(x), em_tensor_release(y);
    }
    em_dataset_release(ds);
}

static void test_idx_round_trip(void **state) {
    (void)state;
    uint8_t img[16 + N * ROWS * COLS], lab[8 + N];
    size_t il = make_images(img, N, ROWS, COLS), ll = make_labels(lab, N);
    write_file(tmp_path("img.idx"), img, il);
    write_file(tmp_path("lab.idx"), lab, ll);
    write_gz(tmp_path("img.idx.gz"), img, il);
    write_gz(tmp_path("lab.idx.gz"), lab, ll);
    check_dataset(tmp_path("img.idx"), tmp_path("lab.idx"));
    check_dataset(tmp_path("img.idx.gz"), tmp_path("lab.idx.gz"));
    check_dataset(tmp_path("img.idx.gz"), tmp_path("lab.idx")); /* mixed */
}

static void test_idx_errors(void **state) {
    (void)state;
    uint8_t img[16 + N * ROWS * COLS + 8], lab[8 + N];
    size_t il = make_images(img, N, ROWS, COLS), ll = make_labels(lab, N);
    char ip[256], lp[256], bad[256];
    snprintf(ip, sizeof ip, "%s", tmp_path("img.idx"));
    snprintf(lp, sizeof lp, "%s", tmp_path("lab.idx"));
    snprintf(bad, sizeof bad, "%s", tmp_path("bad.idx"));
    write_file(ip, img, il);
    write_file(lp, lab, ll);
    em_dataset *ds = (em_dataset *)(uintptr_t)1;

    FAILS(EM_ERR_ARG, "em_idx_load", em_idx_load(NULL, lp, &ds));
    FAILS(EM_ERR_ARG, "em_idx_load", em_idx_load(ip, NULL, &ds));
    FAILS(EM_ERR_ARG, "em_idx_load", em_idx_load(ip, lp, NULL));
    FAILS(EM_ERR_IO, "cannot open", em_idx_load(tmp_path("missing.idx"), lp, &ds));

    char want[512];
    write_file(bad, img, 40); /* truncated body */
    snprintf(want, sizeof want, "%s: truncated: %zu bytes expected, 40 found", bad, il);
    FAILS(EM_ERR_IO, want, em_idx_load(bad, lp, &ds));
    write_file(bad, img, 10); /* truncated header */
    FAILS(EM_ERR_IO, "truncated: 16 header bytes expected, 10 found", em_idx_load(bad, lp, &ds));
    write_file(bad, img, 2);
    FAILS(EM_ERR_IO, "truncated: 2 bytes", em_idx_load(bad, lp, &ds));
    write_file(bad, img, 0);
    FAILS(EM_ERR_IO, "truncated: 0 bytes", em_idx_load(bad, lp, &ds));
    img[il] = 7; /* one byte too many */
    write_file(bad, img, il + 1);
    FAILS(EM_ERR_IO, "found 1 more", em_idx_load(bad, lp, &ds));
    FAILS(EM_ERR_IO, "3 dimensions, expected 1", em_idx_load(ip, ip, &ds)); /* swapped */
    FAILS(EM_ERR_IO, "1 dimensions, expected 3", em_idx_load(lp, lp, &ds));
    uint8_t img2[sizeof img];
    memcpy(img2, img, il);
    img2[0] = 0x1f, img2[1] = 0x7a; /* not IDX */
    write_file(bad, img2, il);
    FAILS(EM_ERR_IO, "not an IDX file", em_idx_load(bad, lp, &ds));
    memcpy(img2, img, il);
    img2[2] = 0x0d; /* float elements */
    write_file(bad, img2, il);
    FAILS(EM_ERR_IO, "element type 0x0d", em_idx_load(bad, lp, &ds));
    make_images(img2, N, 0, COLS);
    write_file(bad, img2, 16);
    FAILS(EM_ERR_IO, "dimension 1 is 0", em_idx_load(bad, lp, &ds));
    put_be32(img2 + 4, 0xffffffffu), put_be32(img2 + 8, 0xffffffffu), put_be32(img2 + 12, 2);
    write_file(bad, img2, 16);
    FAILS(EM_ERR_IO, "header declares more than", em_idx_load(bad, lp, &ds));
    /* counts that differ */
    uint8_t lab2[8 + N];
    make_labels(lab2, N - 1);
    write_file(bad, lab2, 8 + N - 1);
    FAILS(EM_ERR_IO, "5 images but", em_idx_load(ip, bad, &ds));
    /* gzip: truncated stream, corrupt stream */
    write_gz(tmp_path("img.gz"), img, il);
    size_t gl = 0;
    uint8_t *gz = read_file(tmp_path("img.gz"), &gl);
    write_file(bad, gz, gl / 2);
    FAILS(EM_ERR_IO, "truncated", em_idx_load(bad, lp, &ds));
    for (size_t i = 12; i < gl - 8; i++) gz[i] ^= 0x5a;
    write_file(bad, gz, gl);
    FAILS(EM_ERR_IO, "corrupt gzip data", em_idx_load(bad, lp, &ds));
    free(gz);
    assert_true(ds == (em_dataset *)(uintptr_t)1); /* never written on failure */

    /* batch and shuffle arguments */
    OK(em_idx_load(ip, lp, &ds));
    em_tensor *x = NULL, *y = NULL;
    const int64_t out_of_range[2] = {0, N}, negative[1] = {-1};
    FAILS(EM_ERR_ARG, "indices[1] = 5 is outside [0, 5)",
          em_dataset_batch(ds, out_of_range, 2, REF, &x, &y));
    FAILS(EM_ERR_ARG, "outside", em_dataset_batch(ds, negative, 1, REF, &x, &y));
    FAILS(EM_ERR_ARG, "n is 0", em_dataset_batch(ds, negative, 0, REF, &x, &y));
    FAILS(EM_ERR_ARG, "is NULL", em_dataset_batch(NULL, negative, 1, REF, &x, &y));
    FAILS(EM_ERR_ARG, "is NULL", em_dataset_batch(ds, NULL, 1, REF, &x, &y));
    FAILS(EM_ERR_ARG, "is NULL", em_dataset_batch(ds, out_of_range, 1, REF, NULL, &y));
    assert_null(x);
    assert_null(y);
    FAILS(EM_ERR_ARG, "em_dataset_shape", em_dataset_shape(NULL, NULL, NULL));
    FAILS(EM_ERR_ARG, "em_dataset_shuffle", em_dataset_shuffle(-1, 0, NULL));
    FAILS(EM_ERR_ARG, "em_dataset_shuffle", em_dataset_shuffle(3, 0, NULL));
    OK(em_dataset_shuffle(0, 0, NULL));
    assert_int_equal(em_dataset_size(NULL), 0);
    em_dataset_release(ds);
    em_dataset_release(NULL);
}

static void test_shuffle(void **state) {
    (void)state;
    enum { M = 1000 };
    int64_t a[M], b[M], c[M];
    OK(em_dataset_shuffle(M, 42, a));
    OK(em_dataset_shuffle(M, 42, b));
    OK(em_dataset_shuffle(M, 43, c));
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
    bool seen[M] = {false};
    int fixed = 0;
    for (int i = 0; i < M; i++) {
        assert_true(a[i] >= 0 && a[i] < M && !seen[a[i]]);
        seen[a[i]] = true;
        fixed += a[i] == i;
    }
    assert_true(fixed < 10);
    /* The same on every machine: SplitMix64 and rejection sampling are fully specified. */
    int64_t p[10];
    OK(em_dataset_shuffle(10, 1, p));
    const int64_t want[10] = {4, 2, 8, 1, 9, 3, 0, 6, 7, 5}; /* checked in Python */
    assert_memory_equal(p, want, sizeof p);
}

static void test_fashion_mnist(void **state) {
    (void)state;
    const char *dir = getenv("EMBER_FASHION_MNIST_DIR");
    if (dir == NULL) dir = "/usr/share/datasets/fashion-mnist";
    char ti[512], tl[512], vi[512], vl[512];
    snprintf(ti, sizeof ti, "%s/train-images-idx3-ubyte.gz", dir);
    snprintf(tl, sizeof tl, "%s/train-labels-idx1-ubyte.gz", dir);
    snprintf(vi, sizeof vi, "%s/t10k-images-idx3-ubyte.gz", dir);
    snprintf(vl, sizeof vl, "%s/t10k-labels-idx1-ubyte.gz", dir);
    if (access(ti, R_OK) != 0 || access(vi, R_OK) != 0) {
        print_message("skipping: Fashion-MNIST not found in %s (apt-get install "
                      "dataset-fashion-mnist)\n", dir);
        skip();
    }
    em_dataset *train = NULL, *test = NULL;
    OK(em_idx_load(ti, tl, &train));
    OK(em_idx_load(vi, vl, &test));
    assert_int_equal(em_dataset_size(train), 60000);
    assert_int_equal(em_dataset_size(test), 10000);
    int64_t r = 0, c = 0;
    OK(em_dataset_shape(train, &r, &c));
    assert_true(r == 28 && c == 28);
    assert_int_equal(em_dataset_num_classes(train), 10);
    assert_int_equal(em_dataset_num_classes(test), 10);
    /* a shuffled batch: values in [0, 1], labels in [0, 10), 6000 of each class in train */
    int64_t *perm = malloc(60000 * sizeof *perm);
    assert_non_null(perm);
    OK(em_dataset_shuffle(60000, 7, perm));
    em_tensor *x = NULL, *y = NULL;
    OK(em_dataset_batch(train, perm, 60000, REF, &x, &y));
    float *xv = malloc(64 * 784 * sizeof *xv);
    int64_t *yv = malloc(60000 * sizeof *yv);
    assert_true(xv != NULL && yv != NULL);
    OK(em_tensor_to_data(y, yv, 60000 * sizeof *yv));
    int64_t count[10] = {0};
    for (int i = 0; i < 60000; i++) {
        assert_true(yv[i] >= 0 && yv[i] < 10);
        count[yv[i]]++;
    }
    for (int k = 0; k < 10; k++) assert_int_equal(count[k], 6000);
    em_tensor_release(x), em_tensor_release(y);
    OK(em_dataset_shuffle(10000, 7, perm));
    OK(em_dataset_batch(test, perm, 64, em_device_default(), &x, &y));
    OK(em_tensor_to_data(x, xv, 64 * 784 * sizeof *xv));
    float lo = 1, hi = 0;
    for (int i = 0; i < 64 * 784; i++) lo = xv[i] < lo ? xv[i] : lo, hi = xv[i] > hi ? xv[i] : hi;
    assert_true(lo == 0.0f && hi == 1.0f);
    em_tensor_release(x), em_tensor_release(y);
    free(xv), free(yv), free(perm);
    em_dataset_release(train), em_dataset_release(test);
}

/* ---- safetensors ---------------------------------------------------------------------------- */

static const em_dtype ALL[] = {EM_F32, EM_F64, EM_F16, EM_BF16, EM_I64,
                               EM_I32, EM_I16, EM_I8,  EM_U8,   EM_BOOL};
#define NALL (sizeof ALL / sizeof ALL[0])

/* Valid bytes of `bytes` elements of dt: finite floats, 0/1 bools, distinct ints. */
static void fill(em_dtype dt, uint8_t *p, size_t count, int salt) {
    for (size_t i = 0; i < count; i++) {
        double v = (double)((int)i * 7 + salt * 3) - 11.0;
        switch (dt) {
        case EM_F32: { float f = (float)(v * 0.25); memcpy(p + 4 * i, &f, 4); break; }
        case EM_F64: { double d = v / 3.0; memcpy(p + 8 * i, &d, 8); break; }
        case EM_F16: { uint16_t h = em_f32_to_f16((float)v); memcpy(p + 2 * i, &h, 2); break; }
        case EM_BF16: { uint16_t h = em_f32_to_bf16((float)v); memcpy(p + 2 * i, &h, 2); break; }
        case EM_I64: { int64_t q = (int64_t)v * 1000000007LL; memcpy(p + 8 * i, &q, 8); break; }
        case EM_I32: { int32_t q = (int32_t)v * 70001; memcpy(p + 4 * i, &q, 4); break; }
        case EM_I16: { int16_t q = (int16_t)(v * 301); memcpy(p + 2 * i, &q, 2); break; }
        case EM_I8: { int8_t q = (int8_t)v; memcpy(p + i, &q, 1); break; }
        case EM_U8: p[i] = (uint8_t)(i * 37 + (size_t)salt); break;
        default: p[i] = (uint8_t)((i + (size_t)salt) % 3 == 0); break;
        }
    }
}

static void round_trip_on(em_device dev) {
    char dname[64];
    OK(em_device_name(dev, dname, sizeof dname));
    /* each dtype as [2, 3], plus a 0-d f32, an empty [0, 4] i32 and a rank-8 u8 */
    enum { NT = NALL + 3 };
    const char *names[NT];
    em_tensor *ts[NT];
    uint8_t bytes[NT][64];
    char name_buf[NT][32];
    for (size_t i = 0; i < NALL; i++) {
        const int64_t shape[2] = {2, 3};
        fill(ALL[i], bytes[i], 6, (int)i);
        OK(em_tensor_from_data(bytes[i], ALL[i], shape, 2, dev, &ts[i]));
        snprintf(name_buf[i], sizeof name_buf[i], "layer.%zu.%s", i, em_dtype_name(ALL[i]));
        names[i] = name_buf[i];
    }
    fill(EM_F32, bytes[NALL], 1, 5);
    OK(em_tensor_from_data(bytes[NALL], EM_F32, NULL, 0, dev, &ts[NALL]));
    names[NALL] = "scalar";
    const int64_t empty_shape[2] = {0, 4}, r8[8] = {1, 2, 1, 2, 1, 2, 1, 2};
    OK(em_tensor_from_data(bytes[NALL + 1], EM_I32, empty_shape, 2, dev, &ts[NALL + 1]));
    names[NALL + 1] = "empty \"quoted\" name";
    fill(EM_U8, bytes[NALL + 2], 16, 1);
    OK(em_tensor_from_data(bytes[NALL + 2], EM_U8, r8, 8, dev, &ts[NALL + 2]));
    names[NALL + 2] = "rank8";

    const char *path = tmp_path("rt.safetensors");
    OK(em_safetensors_save(path, names, (const em_tensor *const *)ts, NT));
    em_tensor_map *m = NULL;
    OK(em_safetensors_load(path, dev, &m));
    assert_int_equal(em_tensor_map_size(m), NT);
    for (size_t i = 0; i < NT; i++) {
        assert_string_equal(em_tensor_map_name(m, i), names[i]);
        em_tensor *t = NULL;
        OK(em_tensor_map_get(m, names[i], &t));
        assert_true(em_device_equal(em_tensor_device(t), dev));
        assert_int_equal(em_tensor_dtype(t), em_tensor_dtype(ts[i]));
        assert_int_equal(em_tensor_rank(t), em_tensor_rank(ts[i]));
        if (em_tensor_rank(t) > 0)
            assert_memory_equal(em_tensor_shape(t), em_tensor_shape(ts[i]),
                                sizeof(int64_t) * (size_t)em_tensor_rank(t));
        size_t nb = (size_t)em_tensor_numel(t) * em_dtype_size(em_tensor_dtype(t));
        uint8_t got[64];
        OK(em_tensor_to_data(t, got, sizeof got));
        if (nb > 0 && memcmp(got, bytes[i], nb) != 0)
            fail_msg("%s: tensor %s differs after the round trip", dname, names[i]);
        em_tensor_release(t);
    }
    em_tensor *t = (em_tensor *)(uintptr_t)1;
    FAILS(EM_ERR_ARG, "no tensor named \"nope\"", em_tensor_map_get(m, "nope", &t));
    assert_true(t == (em_tensor *)(uintptr_t)1);
    assert_null(em_tensor_map_name(m, NT));
    em_tensor_map_release(m);
    /* the same file onto ref: devices do not matter to the bytes */
    OK(em_safetensors_load(path, REF, &m));
    assert_int_equal(em_tensor_map_size(m), NT);
    em_tensor_map_release(m);
    for (size_t i = 0; i < NT; i++) em_tensor_release(ts[i]);
}

static void test_safetensors_round_trip(void **state) {
    (void)state;
    em_device devs[16];
    size_t n = 0;
    OK(em_devices(devs, 16, &n));
    assert_true(n >= 1);
    for (size_t i = 0; i < n && i < 16; i++) {
        round_trip_on(devs[i]);
        em_device ad;
        OK(em_device_autodiff(devs[i], EM_CKPT_DISABLED, &ad));
        round_trip_on(ad);
    }
    /* an empty file: no tensors */
    OK(em_safetensors_save(tmp_path("none.safetensors"), NULL, NULL, 0));
    em_tensor_map *m = NULL;
    OK(em_safetensors_load(tmp_path("none.safetensors"), REF, &m));
    assert_int_equal(em_tensor_map_size(m), 0);
    em_tensor_map_release(m);
    em_tensor_map_release(NULL);
    assert_int_equal(em_tensor_map_size(NULL), 0);
}

static void test_safetensors_reference_file(void **state) {
    (void)state;
    em_tensor_map *m = NULL;
    OK(em_safetensors_load(EMBER_TEST_IO_DIR "/ref.safetensors", REF, &m));
    assert_int_equal(em_tensor_map_size(m), 12);
    assert_string_equal(em_tensor_map_name(m, 0), "weight");
    assert_string_equal(em_tensor_map_name(m, 11), "empty");
    em_tensor *t = NULL;
#define GET(name, dt, rank)                                                                  \
    do {                                                                                     \
        OK(em_tensor_map_get(m, name, &t));                                                  \
        assert_int_equal(em_tensor_dtype(t), dt);                                            \
        assert_int_equal(em_tensor_rank(t), rank);                                           \
    } while (0)
    {
        float v[6];
        GET("weight", EM_F32, 2);
        assert_true(em_tensor_shape(t)[0] == 2 && em_tensor_shape(t)[1] == 3);
        OK(em_tensor_to_data(t, v, sizeof v));
        const float want[6] = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, -7.0f};
        assert_memory_equal(v, want, sizeof v);
        em_tensor_release(t);
    }
    {
        double v[3];
        GET("bias", EM_F64, 1);
        OK(em_tensor_to_data(t, v, sizeof v));
        assert_true(v[0] == 0.1 && v[1] == -0.2 && v[2] == 1e100);
        em_tensor_release(t);
    }
    {
        uint16_t v[4];
        GET("half", EM_F16, 2);
        OK(em_tensor_to_data(t, v, sizeof v));
        assert_true(em_f16_to_f32(v[0]) == 1.0f && em_f16_to_f32(v[1]) == -0.5f &&
                    em_f16_to_f32(v[2]) == 65504.0f && em_f16_to_f32(v[3]) == 0x1p-14f);
        em_tensor_release(t);
    }
    {
        uint16_t v[3];
        GET("brain", EM_BF16, 1);
        OK(em_tensor_to_data(t, v, sizeof v));
        assert_true(em_bf16_to_f32(v[0]) == 1.0f && em_bf16_to_f32(v[1]) == -3.5f &&
                    em_bf16_to_f32(v[2]) == 256.0f);
        em_tensor_release(t);
    }
    {
        int64_t v[2];
        GET("steps", EM_I64, 1);
        OK(em_tensor_to_data(t, v, sizeof v));
        assert_true(v[0] == -(INT64_C(1) << 40) && v[1] == (INT64_C(1) << 62));
        em_tensor_release(t);
    }
    {
        int32_t v[4];
        GET("ids", EM_I32, 2);
        OK(em_tensor_to_data(t, v, sizeof v));
        assert_true(v[0] == 1 && v[1] == -2 && v[2] == INT32_MAX && v[3] == INT32_MIN);
        em_tensor_release(t);
    }
    {
        int16_t v[3];
        GET("shorts", EM_I16, 1);
        OK(em_tensor_to_data(t, v, sizeof v));
        assert_true(v[0] == INT16_MIN && v[1] == 0 && v[2] == INT16_MAX);
        em_tensor_release(t);
    }
    {
        int8_t v[4];
        GET("bytes", EM_I8, 1);
        OK(em_tensor_to_data(t, v, sizeof v));
        assert_true(v[0] == -128 && v[1] == -1 && v[2] == 1 && v[3] == 127);
        em_tensor_release(t);
    }
    {
        uint8_t v[4];
        GET("pixels", EM_U8, 3);
        OK(em_tensor_to_data(t, v, sizeof v));
        assert_true(v[0] == 0 && v[1] == 1 && v[2] == 128 && v[3] == 255);
        em_tensor_release(t);
    }
    {
        uint8_t v[3];
        GET("mask", EM_BOOL, 1);
        OK(em_tensor_to_data(t, v, sizeof v));
        assert_true(v[0] == 1 && v[1] == 0 && v[2] == 1);
        em_tensor_release(t);
    }
    {
        float v;
        GET("scalar", EM_F32, 0);
        OK(em_tensor_to_data(t, &v, sizeof v));
        assert_true(v == 42.0f);
        em_tensor_release(t);
    }
    GET("empty", EM_F32, 2);
    assert_int_equal(em_tensor_numel(t), 0);
    em_tensor_release(t);
#undef GET
    em_tensor_map_release(m);
}

/* A safetensors image with the given header text and `data_len` bytes of zeros. */
static uint8_t *image(const char *header, size_t data_len, size_t *len) {
    size_t h = strlen(header);
    *len = 8 + h + data_len;
    uint8_t *b = calloc(1, *len);
    assert_non_null(b);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    return b;
}

static void expect_corrupt(const char *header, size_t data_len, const char *reason) {
    size_t len = 0;
    uint8_t *b = image(header, data_len, &len);
    em_tensor_map *m = (em_tensor_map *)(uintptr_t)1;
    em_clear_error();
    em_status s = em_safetensors_load_buffer(b, len, REF, &m);
    free(b);
    if (s != EM_ERR_IO || strstr(em_last_error(), reason) == NULL ||
        strstr(em_last_error(), "em_safetensors_load_buffer: ") == NULL)
        fail_msg("header %s: expected EM_ERR_IO with \"%s\", got %s: \"%s\"", header, reason,
                 em_status_name(s), em_last_error());
    assert_true(m == (em_tensor_map *)(uintptr_t)1);
}

static void test_safetensors_corrupt(void **state) {
    (void)state;
    const char *T = "\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";
    char h[512];
    snprintf(h, sizeof h, "{%s}", T);
    {
        size_t len = 0;
        uint8_t *b = image(h, 8, &len);
        em_tensor_map *m = NULL;
        OK(em_safetensors_load_buffer(b, len, REF, &m));
        em_tensor_map_release(m);
        /* every truncation of a valid image is refused */
        for (size_t k = 0; k < len; k++) {
            em_clear_error();
            em_status s = em_safetensors_load_buffer(b, k, REF, &m);
            if (s != EM_ERR_IO) fail_msg("prefix of %zu bytes: %s", k, em_status_name(s));
        }
        /* header length beyond the buffer, and above the limit */
        b[0] = 200;
        em_clear_error();
        FAILS(EM_ERR_IO, "truncated: header length 200", em_safetensors_load_buffer(b, len, REF, &m));
        b[0] = 0, b[5] = 1;
        FAILS(EM_ERR_IO, "exceeds the limit", em_safetensors_load_buffer(b, len, REF, &m));
        free(b);
        FAILS(EM_ERR_IO, "too short", em_safetensors_load_buffer("abc", 3, REF, &m));
        FAILS(EM_ERR_IO, "too short", em_safetensors_load_buffer(NULL, 0, REF, &m));
        FAILS(EM_ERR_ARG, "out is NULL", em_safetensors_load_buffer("abc", 3, REF, NULL));
        FAILS(EM_ERR_ARG, "data is NULL", em_safetensors_load_buffer(NULL, 3, REF, &m));
    }
    expect_corrupt("{\"t\":", 0, "not valid JSON");
    expect_corrupt("[1,2]", 0, "not a JSON object");
    expect_corrupt("{} x", 0, "data after");
    {
        size_t len = 0; /* padding after the object is fine */
        uint8_t *b = image("{}  \n ", 0, &len);
        em_tensor_map *m = NULL;
        OK(em_safetensors_load_buffer(b, len, REF, &m));
        assert_int_equal(em_tensor_map_size(m), 0);
        em_tensor_map_release(m);
        free(b);
    }
    expect_corrupt("{\"t\":1}", 0, "tensor \"t\": not a JSON object");
    expect_corrupt("{\"t\":{\"shape\":[],\"data_offsets\":[0,4]}}", 4, "missing string \"dtype\"");
    expect_corrupt("{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "missing array \"shape\"");
    expect_corrupt("{\"t\":{\"dtype\":\"F32\",\"shape\":[]}}", 4, "missing array \"data_offsets\"");
    expect_corrupt("{\"t\":{\"dtype\":\"F33\",\"shape\":[],\"data_offsets\":[0,4]}}", 4,
                   "unknown dtype \"F33\"");
    expect_corrupt("{\"t\":{\"dtype\":\"U32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4,
                   "dtype \"U32\" is not supported");
    expect_corrupt("{\"t\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}",
                   1, "rank 9 > 8");
    expect_corrupt("{\"t\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", 1,
                   "shape[0] is not a non-negative integer");
    expect_corrupt("{\"t\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,1]}}", 1,
                   "shape[0] is not a non-negative integer");
    expect_corrupt("{\"t\":{\"dtype\":\"U8\",\"shape\":[\"2\"],\"data_offsets\":[0,1]}}", 1,
                   "shape[0] is not a non-negative integer");
    expect_corrupt("{\"t\":{\"dtype\":\"F64\",\"shape\":[4503599627370496,4503599627370496],"
                   "\"data_offsets\":[0,1]}}", 1, "element count overflows");
    expect_corrupt("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 1,
                   "data_offsets is not two non-negative integers");
    expect_corrupt("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 1,
                   "data_offsets is not two non-negative integers");
    expect_corrupt("{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[2,1]}}", 2,
                   "are reversed");
    expect_corrupt("{\"t\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
                   "hold 8 bytes, but shape x dtype size is 12");
    expect_corrupt("{\"t\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}}", 8,
                   "exceed the 8 data bytes");
    expect_corrupt("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
                   "tensors \"a\" and \"b\" overlap");
    expect_corrupt("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                   "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
                   "duplicate name \"a\"");
    expect_corrupt("{\"__metadata__\":[1]}", 0, "__metadata__ is not an object");
    expect_corrupt("{\"__metadata__\":{\"k\":1}}", 0, "__metadata__ \"k\" is not a string");

    /* a truncated file on disk names the file */
    size_t len = 0;
    uint8_t *ref = read_file(EMBER_TEST_IO_DIR "/ref.safetensors", &len);
    const char *p = tmp_path("trunc.safetensors");
    write_file(p, ref, len - 3);
    em_tensor_map *m = NULL;
    char want[512];
    snprintf(want, sizeof want, "em_safetensors_load: %s: tensor", p);
    FAILS(EM_ERR_IO, want, em_safetensors_load(p, REF, &m));
    FAILS(EM_ERR_IO, "cannot open", em_safetensors_load(tmp_path("missing"), REF, &m));
    FAILS(EM_ERR_ARG, "path is NULL", em_safetensors_load(NULL, REF, &m));
    /* bool bytes other than 0 read as 1 */
    size_t blen = 0;
    uint8_t *b = image("{\"m\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2,
                       &blen);
    b[blen - 2] = 7;
    OK(em_safetensors_load_buffer(b, blen, REF, &m));
    em_tensor *t = NULL;
    OK(em_tensor_map_get(m, "m", &t));
    uint8_t v[2];
    OK(em_tensor_to_data(t, v, 2));
    assert_true(v[0] == 1 && v[1] == 0);
    em_tensor_release(t);
    em_tensor_map_release(m);
    free(b);
    free(ref);
}

static void test_safetensors_save_errors(void **state) {
    (void)state;
    em_tensor *a = NULL;
    const int64_t shape[1] = {2};
    const float v[2] = {1, 2};
    OK(em_tensor_from_data(v, EM_F32, shape, 1, REF, &a));
    const em_tensor *ts[2] = {a, a};
    const char *dup[2] = {"x", "x"}, *null_name[1] = {NULL}, *empty[1] = {""},
               *meta[1] = {"__metadata__"}, *ok[1] = {"x"};
    const em_tensor *null_t[1] = {NULL};
    const char *p = tmp_path("save.safetensors");
    FAILS(EM_ERR_ARG, "path is NULL", em_safetensors_save(NULL, ok, ts, 1));
    FAILS(EM_ERR_ARG, "names is NULL", em_safetensors_save(p, NULL, ts, 1));
    FAILS(EM_ERR_ARG, "tensors is NULL", em_safetensors_save(p, ok, NULL, 1));
    FAILS(EM_ERR_ARG, "duplicate name \"x\"", em_safetensors_save(p, dup, ts, 2));
    FAILS(EM_ERR_ARG, "names[0] is NULL", em_safetensors_save(p, null_name, ts, 1));
    FAILS(EM_ERR_ARG, "names[0] is empty", em_safetensors_save(p, empty, ts, 1));
    FAILS(EM_ERR_ARG, "reserved", em_safetensors_save(p, meta, ts, 1));
    FAILS(EM_ERR_ARG, "tensors[0] is NULL", em_safetensors_save(p, ok, null_t, 1));
    FAILS(EM_ERR_IO, "cannot open for writing",
          em_safetensors_save("/nonexistent-dir/x.safetensors", ok, ts, 1));
    assert_int_equal(access(p, F_OK), -1); /* nothing written */
    em_tensor_release(a);
}

/* ---- safetensors: UTF-8, many tensors, files that cannot be mapped --------------------------- */

/* A header whose only tensor is called `name` (raw JSON string text, between the quotes), with
 * `meta` (raw JSON object members, or "") as its __metadata__. */
static void utf8_header(char *h, size_t cap, const char *name, const char *meta) {
    snprintf(h, cap, "{%s%s%s\"%s\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
             meta[0] ? "\"__metadata__\":{" : "", meta, meta[0] ? "}," : "", name);
}

static void expect_bad_utf8(const char *name, const char *meta, const char *reason,
                            const char *where) {
    char h[256];
    utf8_header(h, sizeof h, name, meta);
    size_t len = 0;
    uint8_t *b = image(h, 1, &len);
    em_tensor_map *m = (em_tensor_map *)(uintptr_t)1;
    em_clear_error();
    em_status s = em_safetensors_load_buffer(b, len, REF, &m);
    free(b);
    if (s != EM_ERR_IO || strstr(em_last_error(), reason) == NULL ||
        strstr(em_last_error(), where) == NULL)
        fail_msg("name \"%s\", metadata {%s}: expected EM_ERR_IO with \"%s\" and \"%s\", got "
                 "%s: \"%s\"", name, meta, reason, where, em_status_name(s), em_last_error());
    assert_true(m == (em_tensor_map *)(uintptr_t)1);
}

/* Loads a header with tensor `name` (raw JSON text) and checks the map holds `want` (bytes). */
static void expect_name(const char *name, const char *meta, const char *want) {
    char h[256];
    utf8_header(h, sizeof h, name, meta);
    size_t len = 0;
    uint8_t *b = image(h, 1, &len);
    em_tensor_map *m = NULL;
    em_clear_error();
    em_status s = em_safetensors_load_buffer(b, len, REF, &m);
    free(b);
    if (s != EM_OK)
        fail_msg("name \"%s\", metadata {%s}: %s: %s", name, meta, em_status_name(s),
                 em_last_error());
    assert_int_equal(em_tensor_map_size(m), 1);
    assert_string_equal(em_tensor_map_name(m, 0), want);
    em_tensor *t = NULL;
    OK(em_tensor_map_get(m, want, &t));
    em_tensor_release(t);
    em_tensor_map_release(m);
}

static void test_safetensors_utf8(void **state) {
    (void)state;
    const char *NAME = "tensor name", *KEY = "__metadata__ key", *VAL = "__metadata__ value";
    /* valid: 2, 3 and 4 bytes, the edges of each range, an escaped surrogate pair, an escaped
     * backslash before a "u" */
    expect_name("caf\xc3\xa9", "", "caf\xc3\xa9");
    expect_name("\xc2\x80\xdf\xbf", "", "\xc2\x80\xdf\xbf");
    expect_name("\xe2\x82\xac\xe0\xa0\x80\xed\x9f\xbf\xee\x80\x80\xef\xbf\xbf", "",
                "\xe2\x82\xac\xe0\xa0\x80\xed\x9f\xbf\xee\x80\x80\xef\xbf\xbf");
    expect_name("\xf0\x90\x80\x80\xf4\x8f\xbf\xbf", "", "\xf0\x90\x80\x80\xf4\x8f\xbf\xbf");
    expect_name("smile \\uD83D\\uDE00", "", "smile \xf0\x9f\x98\x80");
    expect_name("\\u00e9\\u20AC", "", "\xc3\xa9\xe2\x82\xac");
    expect_name("a\\\\uD800", "", "a\\uD800");
    expect_name("t", "\"cl\xc3\xa9\":\"\xe2\x82\xac\\uDBFF\\uDFFF\"", "t");

    /* overlong forms */
    expect_bad_utf8("a\xc0\xaf", "", "overlong", NAME);
    expect_bad_utf8("a\xc1\xbf", "", "overlong", NAME);
    expect_bad_utf8("a\xe0\x80\xaf", "", "overlong", NAME);
    expect_bad_utf8("a\xe0\x9f\xbf", "", "overlong", NAME);
    expect_bad_utf8("a\xf0\x80\x80\xaf", "", "overlong", NAME);
    expect_bad_utf8("a\xf0\x8f\xbf\xbf", "", "overlong", NAME);
    /* surrogates, raw */
    expect_bad_utf8("a\xed\xa0\x80", "", "surrogate U+D800", NAME);
    expect_bad_utf8("a\xed\xbf\xbf", "", "surrogate U+DFFF", NAME);
    /* above U+10FFFF */
    expect_bad_utf8("a\xf4\x90\x80\x80", "", "above U+10FFFF", NAME);
    expect_bad_utf8("a\xf5\x80\x80\x80", "", "above U+10FFFF", NAME);
    expect_bad_utf8("a\xf7\xbf\xbf\xbf", "", "above U+10FFFF", NAME);
    expect_bad_utf8("a\xf8\x88\x80\x80\x80", "", "0xf8", NAME);
    expect_bad_utf8("a\xff", "", "0xff", NAME);
    /* truncated sequences: at the end of the string, before another character */
    expect_bad_utf8("a\xc3", "", "truncated", NAME);
    expect_bad_utf8("a\xe2\x82", "", "truncated", NAME);
    expect_bad_utf8("a\xf0\x9f\x98", "", "truncated", NAME);
    expect_bad_utf8("a\xe2x", "", "truncated", NAME);
    /* stray continuation bytes */
    expect_bad_utf8("a\x80", "", "stray continuation byte 0x80", NAME);
    expect_bad_utf8("\xbf", "", "stray continuation byte 0xbf", NAME);
    expect_bad_utf8("\xc3\xa9\xa9", "", "stray continuation", NAME);
    /* the message shows the string, with the bad bytes escaped */
    expect_bad_utf8("w\xc0\xaf", "", "\"w\\xc0\\xaf\"", NAME);
    /* lone surrogate escapes, which would unescape into invalid UTF-8 */
    expect_bad_utf8("\\uD800", "", "lone surrogate \\uD800", NAME);
    expect_bad_utf8("x\\udbff", "", "lone surrogate \\udbff", NAME);
    expect_bad_utf8("\\uDC00", "", "lone surrogate \\uDC00", NAME);
    expect_bad_utf8("\\uD800\\u0041", "", "lone surrogate \\uD800", NAME);
    expect_bad_utf8("\\uD800x", "", "lone surrogate \\uD800", NAME);
    expect_bad_utf8("\\uDE00\\uD83D", "", "lone surrogate \\uDE00", NAME);
    /* \u0000: a C string cannot hold it */
    expect_bad_utf8("a\\u0000b", "", "\\u0000", NAME);
    /* metadata keys and values */
    expect_bad_utf8("t", "\"k\xff\":\"v\"", "0xff", KEY);
    expect_bad_utf8("t", "\"k\":\"v\xed\xa0\x80\"", "surrogate U+D800", VAL);
    expect_bad_utf8("t", "\"k\":\"ok\",\"k2\":\"\\uDFFF\"", "lone surrogate \\uDFFF", VAL);
    expect_bad_utf8("t", "\"\\uD800\":\"v\"", "lone surrogate", KEY);
    expect_bad_utf8("t", "\"k\":\"\xc0\x80\"", "overlong", VAL);
    /* anywhere else in the header (the whole header is JSON, so UTF-8) */
    expect_corrupt("{\"t\":{\"dtype\":\"U8\xe9\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                   "not valid UTF-8");
    expect_corrupt("{}  \xc2", 0, "not valid UTF-8");
    expect_corrupt("{\"t\xe2\x82", 0, "not valid UTF-8");

    /* the writer refuses names that are not UTF-8, and round-trips those that are */
    em_tensor *a = NULL;
    const int64_t shape[1] = {1};
    const uint8_t v = 7;
    OK(em_tensor_from_data(&v, EM_U8, shape, 1, REF, &a));
    const em_tensor *ts[3] = {a, a, a};
    const char *p = tmp_path("utf8.safetensors");
    static const char *const bad[] = {"a\xc0\xaf", "\xed\xa0\x80", "x\xf4\x90\x80\x80",
                                      "ok\xe2\x82", "\x80", "\xfe"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *names[2] = {"fine", bad[i]};
        FAILS(EM_ERR_ARG, "names[1] is not valid UTF-8", em_safetensors_save(p, names, ts, 2));
        assert_int_equal(access(p, F_OK), -1);
    }
    const char *good[3] = {"caf\xc3\xa9", "\xf0\x9f\x98\x80", "\xf4\x8f\xbf\xbf"};
    OK(em_safetensors_save(p, good, ts, 3));
    em_tensor_map *m = NULL;
    OK(em_safetensors_load(p, REF, &m));
    assert_int_equal(em_tensor_map_size(m), 3);
    for (size_t i = 0; i < 3; i++) assert_string_equal(em_tensor_map_name(m, i), good[i]);
    em_tensor_map_release(m);
    em_tensor_release(a);
}

/* 100,000 tiny tensors: save, load, every one read back by name (in reverse order), a missing
 * name, and duplicates far apart in a big header. Quick once the map is indexed (it took
 * minutes with a linear scan per lookup and a quadratic duplicate check in save). */
static void test_safetensors_many(void **state) {
    (void)state;
    enum { M = 100000 };
    char **names = malloc(M * sizeof *names);
    em_tensor **ts = malloc(M * sizeof *ts);
    assert_true(names != NULL && ts != NULL);
    const int64_t shape[1] = {1};
    for (int i = 0; i < M; i++) {
        names[i] = malloc(32);
        assert_non_null(names[i]);
        /* not in sorted order, and sharing long prefixes */
        snprintf(names[i], 32, "model.layers.%d.w", (i * 7919) % M);
        int32_t val = (i * 7919) % M;
        OK(em_tensor_from_data(&val, EM_I32, shape, 1, REF, &ts[i]));
    }
    const char *p = tmp_path("many.safetensors");
    OK(em_safetensors_save(p, (const char *const *)names, (const em_tensor *const *)ts, M));
    em_tensor_map *m = NULL;
    OK(em_safetensors_load(p, REF, &m));
    assert_int_equal(em_tensor_map_size(m), M);
    for (int i = M - 1; i >= 0; i--) {
        assert_string_equal(em_tensor_map_name(m, (size_t)i), names[i]); /* header order */
        em_tensor *t = NULL;
        OK(em_tensor_map_get(m, names[i], &t));
        int32_t got = -1;
        OK(em_tensor_to_data(t, &got, sizeof got));
        assert_int_equal(got, (i * 7919) % M);
        em_tensor_release(t);
    }
    em_tensor *t = (em_tensor *)(uintptr_t)1;
    FAILS(EM_ERR_ARG, "no tensor named \"model.layers.100000.w\"",
          em_tensor_map_get(m, "model.layers.100000.w", &t));
    FAILS(EM_ERR_ARG, "no tensor named \"model.layers.1.\"",
          em_tensor_map_get(m, "model.layers.1.", &t));
    FAILS(EM_ERR_ARG, "no tensor named \"\"", em_tensor_map_get(m, "", &t));
    assert_true(t == (em_tensor *)(uintptr_t)1);
    em_tensor_map_release(m);

    /* the saver: a duplicate pair far apart among many names */
    char *keep = names[M - 1];
    names[M - 1] = names[3];
    char want[64];
    snprintf(want, sizeof want, "duplicate name \"%s\"", names[3]);
    FAILS(EM_ERR_ARG, want,
          em_safetensors_save(p, (const char *const *)names, (const em_tensor *const *)ts, M));
    names[M - 1] = keep;

    /* the loader: a header of M entries whose first and last share a name */
    size_t cap = (size_t)M * 96 + 64, hl = 0;
    char *h = malloc(cap);
    assert_non_null(h);
    hl += (size_t)snprintf(h + hl, cap - hl, "{");
    for (int i = 0; i < M; i++)
        hl += (size_t)snprintf(h + hl, cap - hl,
                               "%s\"n%d\":{\"dtype\":\"U8\",\"shape\":[1],"
                               "\"data_offsets\":[%d,%d]}",
                               i ? "," : "", i == M - 1 ? 0 : i, i, i + 1);
    hl += (size_t)snprintf(h + hl, cap - hl, "}");
    expect_corrupt(h, M, "duplicate name \"n0\"");
    free(h);

    for (int i = 0; i < M; i++) free(names[i]), em_tensor_release(ts[i]);
    free(names), free(ts);
}

/* Files that cannot be mapped are read instead: a pipe, an empty file; a directory is an
 * error. A file whose tensors are not aligned loads from its mapping too. */
static void test_safetensors_unmappable(void **state) {
    (void)state;
    const char *hdr = "{\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[3,11]}}";
    size_t len = 0;
    uint8_t *b = image(hdr, 11, &len); /* 107-byte header: b starts at byte 118, unaligned */
    const uint8_t av[3] = {1, 2, 3};
    const float bv[2] = {1.5f, -2.0f};
    memcpy(b + len - 11, av, 3);
    memcpy(b + len - 8, bv, 8);
    const char *p = tmp_path("unaligned.safetensors");
    write_file(p, b, len);
    for (int via_pipe = 0; via_pipe < 2; via_pipe++) {
        char path[64];
        int fds[2] = {-1, -1};
        if (via_pipe) {
            assert_int_equal(pipe(fds), 0);
            assert_int_equal(write(fds[1], b, len), (ssize_t)len); /* fits a pipe's buffer */
            close(fds[1]);
            snprintf(path, sizeof path, "/proc/self/fd/%d", fds[0]);
            if (access(path, R_OK) != 0) {
                close(fds[0]);
                print_message("no /proc/self/fd: the pipe case is skipped\n");
                break;
            }
        } else {
            snprintf(path, sizeof path, "%s", p);
        }
        em_tensor_map *m = NULL;
        OK(em_safetensors_load(path, REF, &m));
        assert_int_equal(em_tensor_map_size(m), 2);
        em_tensor *t = NULL;
        uint8_t ag[3];
        float bg[2];
        OK(em_tensor_map_get(m, "a", &t));
        OK(em_tensor_to_data(t, ag, sizeof ag));
        em_tensor_release(t);
        OK(em_tensor_map_get(m, "b", &t));
        OK(em_tensor_to_data(t, bg, sizeof bg));
        em_tensor_release(t);
        assert_memory_equal(ag, av, 3);
        assert_memory_equal(bg, bv, 8);
        em_tensor_map_release(m);
        if (via_pipe) close(fds[0]);
    }
    /* a corrupt image through a pipe is refused like a file */
    {
        int fds[2];
        assert_int_equal(pipe(fds), 0);
        assert_int_equal(write(fds[1], b, len - 1), (ssize_t)(len - 1));
        close(fds[1]);
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fds[0]);
        em_tensor_map *m = NULL;
        if (access(path, R_OK) == 0)
            FAILS(EM_ERR_IO, "exceed the 10 data bytes", em_safetensors_load(path, REF, &m));
        close(fds[0]);
    }
    free(b);
    em_tensor_map *m = NULL;
    const char *empty = tmp_path("empty.safetensors");
    write_file(empty, "", 0);
    FAILS(EM_ERR_IO, "too short", em_safetensors_load(empty, REF, &m));
    FAILS(EM_ERR_IO, "is a directory", em_safetensors_load(tmpdir, REF, &m));
    assert_null(m);
}

/* A file loaded from its mapping, with tensors of several pages listed out of data order and
 * sharing pages with their neighbours: every byte arrives (the pages of each tensor are given
 * back once it is made, and re-read where a neighbour needs them). */
static void test_safetensors_mapped_pages(void **state) {
    (void)state;
    const char *hdr =
        "{\"late\":{\"dtype\":\"U8\",\"shape\":[3,4099],\"data_offsets\":[20483,32780]},"
        "\"mid\":{\"dtype\":\"I8\",\"shape\":[16384],\"data_offsets\":[4099,20483]},"
        "\"early\":{\"dtype\":\"U8\",\"shape\":[4099],\"data_offsets\":[0,4099]},"
        "\"tail\":{\"dtype\":\"U8\",\"shape\":[5],\"data_offsets\":[32780,32785]}}";
    const size_t D = 32785;
    size_t len = 0;
    uint8_t *b = image(hdr, D, &len);
    uint8_t *data = b + len - D;
    for (size_t i = 0; i < D; i++) data[i] = (uint8_t)((i * 2654435761u) >> 13);
    const char *p = tmp_path("pages.safetensors");
    write_file(p, b, len);
    static const struct { const char *name; size_t begin, end; } want[] = {
        {"late", 20483, 32780}, {"mid", 4099, 20483}, {"early", 0, 4099}, {"tail", 32780, 32785}};
    uint8_t *got = malloc(D);
    assert_non_null(got);
    for (int round = 0; round < 2; round++) {
        em_tensor_map *m = NULL;
        OK(em_safetensors_load(p, REF, &m));
        assert_int_equal(em_tensor_map_size(m), 4);
        for (size_t k = 0; k < 4; k++) {
            assert_string_equal(em_tensor_map_name(m, k), want[k].name);
            em_tensor *t = NULL;
            OK(em_tensor_map_get(m, want[k].name, &t));
            size_t n = want[k].end - want[k].begin;
            OK(em_tensor_to_data(t, got, n));
            if (memcmp(got, data + want[k].begin, n) != 0)
                fail_msg("round %d: tensor %s differs from the file", round, want[k].name);
            em_tensor_release(t);
        }
        em_tensor_map_release(m);
    }
    free(got);
    free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idx_round_trip),
        cmocka_unit_test(test_idx_errors),
        cmocka_unit_test(test_shuffle),
        cmocka_unit_test(test_fashion_mnist),
        cmocka_unit_test(test_safetensors_round_trip),
        cmocka_unit_test(test_safetensors_reference_file),
        cmocka_unit_test(test_safetensors_corrupt),
        cmocka_unit_test(test_safetensors_save_errors),
        cmocka_unit_test(test_safetensors_utf8),
        cmocka_unit_test(test_safetensors_many),
        cmocka_unit_test(test_safetensors_unmappable),
        cmocka_unit_test(test_safetensors_mapped_pages),
    };
    return cmocka_run_group_tests(tests, setup_dir, remove_dir);
}
