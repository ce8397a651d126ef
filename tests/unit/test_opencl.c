/*
 * test_opencl.c — the opencl backend itself (the conformance table covers its kernels):
 * device listing, round trips cpu <-> opencl for every dtype and for strided views, work
 * that runs after the call returns (inputs released while kernels are queued), the buffer
 * cache, casts rounding like ref's bit for bit, Philox
 * numbers equal to ref's, error paths (an impossible allocation, a program that does not
 * build, an unknown kernel) with the driver's message, a device without cl_khr_fp64 (f64
 * refused with EM_ERR_UNSUPPORTED, f32 still computed), and the disk cache of program
 * binaries (reuse, and a corrupt file ignored). Every test skips when the machine has no
 * OpenCL device (or the build has no opencl backend).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ember/backend.h"
#include "ember/ember.h"

#ifdef EMBER_TEST_HAVE_OPENCL
#include "backends/opencl/ocl_internal.h"
#endif

static em_device ocl0, cpu0 = {EM_BACKEND_CPU, 0, false, EM_CKPT_NONE},
                       ref0 = {EM_BACKEND_REF, 0, false, EM_CKPT_NONE};

/* True when opencl:0 exists; otherwise the calling test is skipped with a message. */
static bool have_device(void) {
    if (em_device_parse("opencl:0", &ocl0) == EM_OK) return true;
    print_message("opencl: no OpenCL device (or no opencl backend): skipped (%s)\n",
                  em_last_error());
    return false;
}

/* opencl:N is listed by em_devices exactly when the backend reports devices. */
static void test_listing(void **state) {
    (void)state;
    if (!have_device()) skip();
    em_device list[64];
    size_t n = 0;
    assert_int_equal(em_devices(list, 64, &n), EM_OK);
    bool found = false;
    for (size_t i = 0; i < n && i < 64; i++)
        if (em_device_equal(list[i], ocl0)) found = true;
    assert_true(found);
    char name[32];
    assert_int_equal(em_device_name(ocl0, name, sizeof name), EM_OK);
    assert_int_equal(em_device_parse(name, &list[0]), EM_OK);
    assert_true(em_device_equal(list[0], ocl0));
    const em_backend_ops *o = em_backend_get(EM_BACKEND_OPENCL);
    assert_non_null(o);
    em_device bad;
    int count = o->device_count();
    char text[32];
    snprintf(text, sizeof text, "opencl:%d", count);
    assert_int_equal(em_device_parse(text, &bad), EM_ERR_DEVICE);
}

/* Every dtype goes cpu -> opencl -> cpu unchanged, bit for bit. */
static void test_round_trip(void **state) {
    (void)state;
    if (!have_device()) skip();
    const em_dtype dts[] = {EM_F32, EM_F64, EM_F16, EM_BF16, EM_I64,
                            EM_I32, EM_I16, EM_I8,  EM_U8,   EM_BOOL};
    unsigned char src[8 * 37], back[8 * 37];
    for (size_t i = 0; i < sizeof src; i++) src[i] = (unsigned char)(i * 37 + 11);
    for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
        size_t es = em_dtype_size(dts[k]);
        if (dts[k] == EM_BOOL)
            for (size_t i = 0; i < 37; i++) src[i] = (unsigned char)(i % 3 == 0);
        const int64_t shape[1] = {37};
        em_tensor *c = NULL, *g = NULL, *c2 = NULL;
        assert_int_equal(em_tensor_from_data(src, dts[k], shape, 1, cpu0, &c), EM_OK);
        assert_int_equal(em_to_device(c, ocl0, &g), EM_OK);
        assert_int_equal(em_to_device(g, cpu0, &c2), EM_OK);
        memset(back, 0, sizeof back);
        assert_int_equal(em_tensor_to_data(c2, back, 37 * es), EM_OK);
        assert_memory_equal(src, back, 37 * es);
        /* and read straight from the device */
        memset(back, 0, sizeof back);
        assert_int_equal(em_tensor_to_data(g, back, 37 * es), EM_OK);
        assert_memory_equal(src, back, 37 * es);
        em_tensor_release(c), em_tensor_release(g), em_tensor_release(c2);
    }
}

/* A transposed (strided) view made on opencl comes back in the view's order. */
static void test_strided_round_trip(void **state) {
    (void)state;
    if (!have_device()) skip();
    float src[6] = {1, 2, 3, 4, 5, 6}, back[6];
    const int64_t shape[2] = {2, 3};
    em_tensor *g = NULL, *t = NULL, *c = NULL;
    assert_int_equal(em_tensor_from_data(src, EM_F32, shape, 2, ocl0, &g), EM_OK);
    assert_int_equal(em_transpose(g, 0, 1, &t), EM_OK);
    assert_int_equal(em_to_device(t, cpu0, &c), EM_OK);
    assert_int_equal(em_tensor_to_data(c, back, sizeof back), EM_OK);
    const float want[6] = {1, 4, 2, 5, 3, 6};
    assert_memory_equal(back, want, sizeof want);
    em_tensor_release(g), em_tensor_release(t), em_tensor_release(c);
}

/* Kernels are queued: a chain of ops whose inputs are released at once (the queue keeps the
 * buffers alive) reads back right, and memory stats count the live buffers. */
static void test_async_chain(void **state) {
    (void)state;
    if (!have_device()) skip();
    enum { N = 1 << 16, STEPS = 40 };
    const int64_t shape[1] = {N};
    em_memory_stats m0, m1;
    assert_int_equal(em_device_memory(ocl0, &m0), EM_OK);
    em_tensor *x = NULL;
    assert_int_equal(em_full(shape, 1, 1.0, EM_F32, ocl0, &x), EM_OK);
    for (int i = 0; i < STEPS; i++) {
        em_tensor *y = NULL;
        assert_int_equal(em_add_scalar(x, 0.5, &y), EM_OK);
        em_tensor_release(x); /* still in use by the queued kernel */
        x = y;
    }
    assert_int_equal(em_device_memory(ocl0, &m1), EM_OK);
    assert_int_equal(m1.bytes_in_use - m0.bytes_in_use, (size_t)N * sizeof(float));
    float *v = malloc(N * sizeof *v);
    assert_non_null(v);
    assert_int_equal(em_tensor_to_data(x, v, N * sizeof *v), EM_OK);
    for (int i = 0; i < N; i++)
        if (v[i] != 1.0f + 0.5f * STEPS) fail_msg("element %d is %g", i, (double)v[i]);
    free(v);
    em_tensor_release(x);
    assert_int_equal(em_device_memory(ocl0, &m1), EM_OK);
    assert_int_equal(m1.bytes_in_use, m0.bytes_in_use);
    /* freed buffers are kept for reuse until released */
    assert_true(m1.bytes_cached >= (size_t)N * sizeof(float));
    assert_int_equal(em_device_memory_release(ocl0), EM_OK);
    assert_int_equal(em_device_memory(ocl0, &m1), EM_OK);
    assert_int_equal(m1.bytes_cached, 0);
}

/* Random numbers: the same Philox numbers as ref (uniform and bernoulli exactly, normal to
 * within the device's log/cos rounding). */
static void test_random_matches_ref(void **state) {
    (void)state;
    if (!have_device()) skip();
    enum { N = 1001 };
    const int64_t shape[1] = {N};
    double a[N], b[N];
    for (int op = 0; op < 3; op++) {
        em_tensor *r = NULL, *g = NULL;
        em_status s1, s2;
        if (op == 0) {
            s1 = em_rand_uniform(shape, 1, EM_F64, -2, 3, 99, ref0, &r);
            s2 = em_rand_uniform(shape, 1, EM_F64, -2, 3, 99, ocl0, &g);
        } else if (op == 1) {
            s1 = em_rand_normal(shape, 1, EM_F64, 1, 2, (uint64_t)1 << 40, ref0, &r);
            s2 = em_rand_normal(shape, 1, EM_F64, 1, 2, (uint64_t)1 << 40, ocl0, &g);
        } else {
            s1 = em_rand_bernoulli(shape, 1, EM_F64, 0.3, 7, ref0, &r);
            s2 = em_rand_bernoulli(shape, 1, EM_F64, 0.3, 7, ocl0, &g);
        }
        assert_int_equal(s1, EM_OK);
        if (s2 == EM_ERR_UNSUPPORTED) { /* a device without fp64 */
            em_tensor_release(r);
            continue;
        }
        assert_int_equal(s2, EM_OK);
        assert_int_equal(em_tensor_to_data(r, a, sizeof a), EM_OK);
        assert_int_equal(em_tensor_to_data(g, b, sizeof b), EM_OK);
        for (int i = 0; i < N; i++) {
            double tol = op == 1 ? 1e-12 * (1 + fabs(a[i])) : 0;
            if (!(fabs(a[i] - b[i]) <= tol)) fail_msg("op %d element %d: ref %.17g opencl %.17g", op, i, a[i], b[i]);
        }
        em_tensor_release(r), em_tensor_release(g);
    }
}

/* Casts round like ref's, bit for bit: f32 -> f16 / bf16 at ties, subnormals, overflow, NaN
 * and -0; f32 -> ints truncating, saturating at the int64 range and wrapping; NaN -> 0. */
static void test_cast_bits(void **state) {
    (void)state;
    if (!have_device()) skip();
    const float vals[] = {1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 65504.0f, 65520.0f, 1e6f,
                          5.96e-8f, 8.9e-8f, 1e-9f, -0.0f, NAN, -INFINITY, 1.00390625f,
                          1.01171875f, -3.7f, 3.99f, 1e20f, -1e20f, 300.5f, -129.0f, 2.5e9f};
    enum { N = sizeof vals / sizeof vals[0] };
    const int64_t shape[1] = {N};
    const em_dtype to[] = {EM_F16, EM_BF16, EM_I64, EM_I32, EM_I16, EM_I8, EM_U8, EM_BOOL};
    em_tensor *xr = NULL, *xg = NULL;
    assert_int_equal(em_tensor_from_data(vals, EM_F32, shape, 1, ref0, &xr), EM_OK);
    assert_int_equal(em_tensor_from_data(vals, EM_F32, shape, 1, ocl0, &xg), EM_OK);
    for (size_t k = 0; k < sizeof to / sizeof to[0]; k++) {
        em_tensor *yr = NULL, *yg = NULL;
        unsigned char br[8 * N], bg[8 * N];
        size_t bytes = em_dtype_size(to[k]) * N;
        assert_int_equal(em_cast(xr, to[k], &yr), EM_OK);
        assert_int_equal(em_cast(xg, to[k], &yg), EM_OK);
        assert_int_equal(em_tensor_to_data(yr, br, bytes), EM_OK);
        assert_int_equal(em_tensor_to_data(yg, bg, bytes), EM_OK);
        size_t es = em_dtype_size(to[k]);
        for (int i = 0; i < N; i++)
            if (memcmp(br + i * es, bg + i * es, es) != 0) {
                uint64_t r = 0, g = 0;
                memcpy(&r, br + i * es, es), memcpy(&g, bg + i * es, es);
                fail_msg("cast f32 %g -> %s: ref 0x%llx, opencl 0x%llx", (double)vals[i],
                         em_dtype_name(to[k]), (unsigned long long)r, (unsigned long long)g);
            }
        em_tensor_release(yr), em_tensor_release(yg);
    }
    em_tensor_release(xr), em_tensor_release(xg);
}

/* An allocation no device can make is EM_ERR_NOMEM with a message naming opencl. */
static void test_impossible_alloc(void **state) {
    (void)state;
    if (!have_device()) skip();
    const int64_t shape[2] = {(int64_t)1 << 30, (int64_t)1 << 14}; /* 64 TiB of f32 */
    em_tensor *t = NULL;
    assert_int_equal(em_zeros(shape, 2, EM_F32, ocl0, &t), EM_ERR_NOMEM);
    assert_null(t);
    assert_non_null(strstr(em_last_error(), "opencl"));
}

#ifdef EMBER_TEST_HAVE_OPENCL
/* The device context of opencl:0. */
static ocl_dev *dev0(void) {
    void *ctx = NULL;
    assert_int_equal(em_backend_get(EM_BACKEND_OPENCL)->open(0, &ctx), EM_OK);
    return ctx;
}

/* A device without cl_khr_fp64, simulated by clearing the flag opencl:0 was opened with:
 * every f64 kernel is EM_ERR_UNSUPPORTED naming the extension, while f32 work (arange,
 * random, arithmetic) still runs, from programs built without fp64. */
static void test_no_fp64(void **state) {
    (void)state;
    if (!have_device()) skip();
    ocl_dev *d = dev0();
    const bool saved = d->fp64;
    d->fp64 = false;
    ocl_drop_programs(d); /* the programs in memory were built for the device as it is */
    const double v[4] = {1, 2, 3, 4};
    const int64_t shape[1] = {4}, big[1] = {1000};
    em_tensor *x = NULL, *y = NULL, *a = NULL, *b = NULL, *r = NULL;
    em_status s = em_tensor_from_data(v, EM_F64, shape, 1, ocl0, &x);
    if (s == EM_OK) {
        assert_int_equal(em_exp(x, &y), EM_ERR_UNSUPPORTED);
        assert_null(y);
    } else {
        assert_int_equal(s, EM_ERR_UNSUPPORTED);
    }
    assert_non_null(strstr(em_last_error(), "cl_khr_fp64"));
    assert_int_equal(em_zeros(shape, 1, EM_F64, ocl0, &y), EM_ERR_UNSUPPORTED);
    assert_null(y);
    /* f32 still works */
    assert_int_equal(em_arange(0, 8, 1, EM_F32, ocl0, &a), EM_OK);
    assert_int_equal(em_add(a, a, &b), EM_OK);
    float got[8];
    assert_int_equal(em_tensor_to_data(b, got, sizeof got), EM_OK);
    for (int i = 0; i < 8; i++) {
        assert_true(got[i] == 2.0f * (float)i);
    }
    assert_int_equal(em_rand_uniform(big, 1, EM_F32, 0.0, 1.0, 7, ocl0, &r), EM_OK);
    float u[1000];
    double mean = 0;
    assert_int_equal(em_tensor_to_data(r, u, sizeof u), EM_OK);
    for (int i = 0; i < 1000; i++) {
        assert_true(u[i] >= 0.0f && u[i] < 1.0f);
        mean += u[i] / 1000.0;
    }
    assert_true(mean > 0.45 && mean < 0.55);
    d->fp64 = saved;
    ocl_drop_programs(d);
    em_tensor_release(x), em_tensor_release(a), em_tensor_release(b), em_tensor_release(r);
}

/* A program that does not compile is EM_ERR_BACKEND carrying the build log; an unknown
 * program or kernel is EM_ERR_BACKEND too; a zero global size enqueues nothing. */
static void test_build_failure(void **state) {
    (void)state;
    if (!have_device()) skip();
    ocl_dev *d = dev0();
    size_t g = 64;
    em_status s = ocl_launch(d, "elementwise", "-DA=nosuchtag -DO=f32", "ew_copy", 1, &g, NULL,
                             0, NULL);
    assert_int_equal(s, EM_ERR_BACKEND);
    assert_non_null(strstr(em_last_error(), "CL_BUILD_PROGRAM_FAILURE"));
    assert_non_null(strstr(em_last_error(), "nosuchtag")); /* from the build log */
    s = ocl_launch(d, "no_such_program", "", "k", 1, &g, NULL, 0, NULL);
    assert_int_equal(s, EM_ERR_BACKEND);
    assert_non_null(strstr(em_last_error(), "no_such_program"));
    s = ocl_launch(d, "elementwise", "-DA=f32 -DO=f32", "no_such_kernel", 1, &g, NULL, 0, NULL);
    assert_int_equal(s, EM_ERR_BACKEND);
    assert_non_null(strstr(em_last_error(), "CL_INVALID_KERNEL_NAME"));
    g = 0;
    assert_int_equal(ocl_launch(d, "no_such_program", "", "k", 1, &g, NULL, 0, NULL), EM_OK);
    assert_int_equal(ocl_check_dtype(d, "t", EM_Q8), EM_ERR_UNSUPPORTED);
    assert_int_equal(ocl_check_dtype(d, "t", EM_F64), d->fp64 ? EM_OK : EM_ERR_UNSUPPORTED);
}

/* Runs neg on a small f32 tensor of opencl:0 and checks it. */
static void run_neg(void) {
    const float src[3] = {1, -2, 3};
    float back[3];
    const int64_t shape[1] = {3};
    em_tensor *x = NULL, *y = NULL;
    assert_int_equal(em_tensor_from_data(src, EM_F32, shape, 1, ocl0, &x), EM_OK);
    assert_int_equal(em_neg(x, &y), EM_OK);
    assert_int_equal(em_tensor_to_data(y, back, sizeof back), EM_OK);
    assert_true(back[0] == -1 && back[1] == 2 && back[2] == -3);
    em_tensor_release(x), em_tensor_release(y);
}

/* The one .bin file of dir (its path into path), or fails. */
static void only_file(const char *dir, char *path, size_t cap) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls %s/*.bin 2>/dev/null | wc -l", dir);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    int n = 0;
    assert_int_equal(fscanf(p, "%d", &n), 1);
    pclose(p);
    assert_int_equal(n, 1);
    snprintf(cmd, sizeof cmd, "ls %s/*.bin", dir);
    p = popen(cmd, "r");
    assert_non_null(p);
    assert_non_null(fgets(path, (int)cap, p));
    pclose(p);
    path[strcspn(path, "\n")] = 0;
}

/* The disk cache: a build stores one binary; once the in-memory programs are gone the next
 * launch loads it instead of building; a corrupt file is ignored and rebuilt. */
static void test_disk_cache(void **state) {
    (void)state;
    if (!have_device()) skip();
    ocl_dev *d = dev0();
    char dir[] = "/tmp/ember-ocl-cache-XXXXXX";
    assert_non_null(mkdtemp(dir));
    const char *old = getenv("EMBER_CACHE_DIR");
    char *saved = old ? strdup(old) : NULL;
    setenv("EMBER_CACHE_DIR", dir, 1);

    ocl_drop_programs(d);
    int built = ocl_stat_built, loaded = ocl_stat_loaded;
    run_neg();
    assert_int_equal(ocl_stat_built, built + 1);
    assert_int_equal(ocl_stat_loaded, loaded);
    char path[700];
    only_file(dir, path, sizeof path);

    ocl_drop_programs(d);
    run_neg();
    assert_int_equal(ocl_stat_built, built + 1);
    assert_int_equal(ocl_stat_loaded, loaded + 1);

    /* corrupt: flip a payload byte (the hash no longer matches) */
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, 100, SEEK_SET), 0);
    int c = fgetc(f);
    assert_int_equal(fseek(f, 100, SEEK_SET), 0);
    fputc(c ^ 0x5a, f);
    fclose(f);
    ocl_drop_programs(d);
    run_neg();
    assert_int_equal(ocl_stat_built, built + 2);
    assert_int_equal(ocl_stat_loaded, loaded + 1);

    /* truncated: ignored too */
    assert_int_equal(truncate(path, 30), 0);
    ocl_drop_programs(d);
    run_neg();
    assert_int_equal(ocl_stat_built, built + 3);

    /* the rebuilt file is whole again and used */
    ocl_drop_programs(d);
    run_neg();
    assert_int_equal(ocl_stat_built, built + 3);
    assert_int_equal(ocl_stat_loaded, loaded + 2);

    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    if (saved) setenv("EMBER_CACHE_DIR", saved, 1);
    else unsetenv("EMBER_CACHE_DIR");
    free(saved);
}
#endif

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_listing),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_strided_round_trip),
        cmocka_unit_test(test_async_chain),
        cmocka_unit_test(test_random_matches_ref),
        cmocka_unit_test(test_cast_bits),
        cmocka_unit_test(test_impossible_alloc),
#ifdef EMBER_TEST_HAVE_OPENCL
        cmocka_unit_test(test_build_failure),
        cmocka_unit_test(test_no_fp64),
        cmocka_unit_test(test_disk_cache),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
