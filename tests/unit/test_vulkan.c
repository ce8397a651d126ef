/*
 * test_vulkan.c — the vulkan backend itself (the conformance table covers its kernels): device
 * listing, round trips cpu <-> vulkan for every dtype and for strided views, work that runs
 * after the call returns (inputs released while dispatches are pending, chains longer than a
 * batch), a dispatch of more than 65,535 workgroups' worth of elements (grid-stride loops), a
 * buffer above the storage-buffer range refused clearly, a dtype whose device feature is
 * missing refused naming the feature, an unknown shader variant, forced staging
 * (EMBER_VULKAN_STAGING: ctest runs this program again with it), the disk cache of pipelines
 * (written at exit; a corrupt file ignored), and no driver at all (ctest runs it again with
 * VK_DRIVER_FILES naming no file and EMBER_TEST_VULKAN_NONE=1: zero devices, not an error),
 * and lines longer than lavapipe's loop limiter allows one invocation (reduce, softmax, scans).
 * Every test skips when the machine has no Vulkan device (or the build no vulkan backend).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "ember/backend.h"
#include "ember/ember.h"

#ifdef EMBER_TEST_HAVE_VULKAN
#include "backends/vulkan/vk_internal.h"
#endif

static em_device vk0, cpu0 = {EM_BACKEND_CPU, 0, false, EM_CKPT_NONE};
static char cache_dir[256];

/* True when vulkan:0 exists; otherwise the calling test is skipped with a message. */
static bool have_device(void) {
    if (getenv("EMBER_TEST_VULKAN_NONE")) return false;
    if (em_device_parse("vulkan:0", &vk0) == EM_OK) return true;
    print_message("vulkan: no Vulkan device (or no vulkan backend): skipped (%s)\n",
                  em_last_error());
    return false;
}

static void test_listing(void **state) {
    (void)state;
    if (getenv("EMBER_TEST_VULKAN_NONE")) {
        /* no driver: the backend is compiled in and reports no device; parse refuses */
        const em_backend_ops *o = em_backend_get(EM_BACKEND_VULKAN);
        if (!o) skip();
        assert_int_equal(o->device_count(), 0);
        em_device d;
        assert_int_equal(em_device_parse("vulkan:0", &d), EM_ERR_DEVICE);
        assert_non_null(strstr(em_last_error(), "vulkan"));
        em_device list[64];
        size_t n = 0;
        assert_int_equal(em_devices(list, 64, &n), EM_OK);
        for (size_t i = 0; i < n && i < 64; i++) assert_int_not_equal(list[i].backend, EM_BACKEND_VULKAN);
        return;
    }
    if (!have_device()) skip();
    em_device list[64];
    size_t n = 0;
    assert_int_equal(em_devices(list, 64, &n), EM_OK);
    bool found = false;
    for (size_t i = 0; i < n && i < 64; i++)
        if (em_device_equal(list[i], vk0)) found = true;
    assert_true(found);
    char name[32];
    assert_int_equal(em_device_name(vk0, name, sizeof name), EM_OK);
    assert_string_equal(name, "vulkan");
    const em_backend_ops *o = em_backend_get(EM_BACKEND_VULKAN);
    assert_non_null(o);
    em_device bad;
    char text[32];
    snprintf(text, sizeof text, "vulkan:%d", o->device_count());
    assert_int_equal(em_device_parse(text, &bad), EM_ERR_DEVICE);
}

/* Every dtype: cpu -> vulkan -> cpu keeps the bytes; a transposed view copied on vulkan. */
static void test_round_trips(void **state) {
    (void)state;
    if (!have_device()) skip();
    const em_dtype dts[] = {EM_F32, EM_F64, EM_F16, EM_BF16, EM_I64,
                            EM_I32, EM_I16, EM_I8,  EM_U8,   EM_BOOL};
    for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
        int64_t shape[2] = {37, 19};
        em_tensor *a, *v, *t, *c, *back;
        assert_int_equal(em_rand_uniform(shape, 2, EM_F32, -50, 50, 7 + k, cpu0, &a), EM_OK);
        em_tensor *ad;
        assert_int_equal(em_cast(a, dts[k], &ad), EM_OK);
        assert_int_equal(em_to_device(ad, vk0, &v), EM_OK);
        assert_int_equal(em_transpose(v, 0, 1, &t), EM_OK);
        assert_int_equal(em_contiguous(t, &c), EM_OK);
        assert_int_equal(em_to_device(c, cpu0, &back), EM_OK);
        em_tensor *want_t, *want;
        assert_int_equal(em_transpose(ad, 0, 1, &want_t), EM_OK);
        assert_int_equal(em_contiguous(want_t, &want), EM_OK);
        size_t bytes = (size_t)(37 * 19) * em_dtype_size(dts[k]);
        unsigned char *g = malloc(bytes), *w = malloc(bytes);
        assert_int_equal(em_tensor_to_data(back, g, bytes), EM_OK);
        assert_int_equal(em_tensor_to_data(want, w, bytes), EM_OK);
        assert_memory_equal(g, w, bytes);
        free(g), free(w);
        em_tensor_release(a), em_tensor_release(ad), em_tensor_release(v);
        em_tensor_release(t), em_tensor_release(c), em_tensor_release(back);
        em_tensor_release(want_t), em_tensor_release(want);
    }
}

/* 1500 dependent adds (three batches' worth of dispatches), each input released as soon as the
 * next op is queued: the result is exact. */
static void test_async_chain(void **state) {
    (void)state;
    if (!have_device()) skip();
    int64_t shape[1] = {1000};
    em_tensor *x, *one;
    assert_int_equal(em_zeros(shape, 1, EM_I32, vk0, &x), EM_OK);
    assert_int_equal(em_full(shape, 1, 1, EM_I32, vk0, &one), EM_OK);
    for (int i = 0; i < 1500; i++) {
        em_tensor *y;
        assert_int_equal(em_add(x, one, &y), EM_OK);
        em_tensor_release(x);
        x = y;
    }
    int32_t got[1000];
    assert_int_equal(em_tensor_to_data(x, got, sizeof got), EM_OK);
    for (int i = 0; i < 1000; i++) assert_int_equal(got[i], 1500);
    em_tensor_release(x), em_tensor_release(one);
}

/* More elements than 65,535 groups of 256 invocations cover: every element is written. */
static void test_large_grid(void **state) {
    (void)state;
    if (!have_device()) skip();
    int64_t n = 65535LL * 256 + 4099;
    em_tensor *a, *b;
    assert_int_equal(em_full(&n, 1, 3, EM_U8, vk0, &a), EM_OK);
    assert_int_equal(em_mul_scalar(a, 5, &b), EM_OK);
    uint8_t *got = malloc((size_t)n);
    assert_non_null(got);
    assert_int_equal(em_tensor_to_data(b, got, (size_t)n), EM_OK);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += got[i] != 15;
    assert_int_equal(bad, 0);
    free(got);
    em_tensor_release(a), em_tensor_release(b);
}

/* A tensor larger than one storage-buffer binding: a clear EM_ERR_UNSUPPORTED, no crash. */
static void test_too_large(void **state) {
    (void)state;
    if (!have_device()) skip();
#ifdef EMBER_TEST_HAVE_VULKAN
    void *ctx;
    assert_int_equal(em_backend_get(EM_BACKEND_VULKAN)->open(0, &ctx), EM_OK);
    vk_dev *d = ctx;
    int64_t n = (int64_t)(d->max_range / 4) + 1024;
    em_tensor *t = NULL;
    em_status s = em_zeros(&n, 1, EM_F32, vk0, &t);
    assert_int_equal(s, EM_ERR_UNSUPPORTED);
    assert_null(t);
    assert_non_null(strstr(em_last_error(), "maxStorageBufferRange"));
#else
    skip();
#endif
}

/* A device without shaderFloat64 (faked): f64 refused naming the feature, f32 still runs. */
static void test_missing_feature(void **state) {
    (void)state;
    if (!have_device()) skip();
#ifdef EMBER_TEST_HAVE_VULKAN
    void *ctx;
    assert_int_equal(em_backend_get(EM_BACKEND_VULKAN)->open(0, &ctx), EM_OK);
    vk_dev *d = ctx;
    int64_t shape[1] = {4};
    em_tensor *a, *b = NULL, *c;
    assert_int_equal(em_full(shape, 1, 1, EM_F64, vk0, &a), EM_OK);
    bool had = d->f64;
    d->f64 = false;
    assert_int_equal(em_exp(a, &b), EM_ERR_UNSUPPORTED);
    assert_null(b);
    assert_non_null(strstr(em_last_error(), "shaderFloat64"));
    d->f64 = had;
    em_tensor *f;
    assert_int_equal(em_full(shape, 1, 0, EM_F32, vk0, &f), EM_OK);
    assert_int_equal(em_exp(f, &c), EM_OK);
    float got[4];
    assert_int_equal(em_tensor_to_data(c, got, sizeof got), EM_OK);
    assert_true(got[0] == 1.0f);
    em_tensor_release(a), em_tensor_release(c), em_tensor_release(f);
    /* an unknown shader variant: EM_ERR_UNSUPPORTED naming it */
    vk_params p;
    memset(&p, 0, sizeof p);
    uint32_t groups[3] = {1, 1, 1};
    assert_int_equal(vk_launch(d, "no-such-shader.f32", groups, &p, 0, NULL), EM_ERR_UNSUPPORTED);
    assert_non_null(strstr(em_last_error(), "no-such-shader.f32"));
#else
    skip();
#endif
}

/* Under EMBER_VULKAN_STAGING=1 the device maps no tensor buffer (every transfer is staged);
 * otherwise (lavapipe's memory is host-visible) it maps them. Writes at an offset land. */
static void test_staging(void **state) {
    (void)state;
    if (!have_device()) skip();
#ifdef EMBER_TEST_HAVE_VULKAN
    void *ctx;
    const em_backend_ops *o = em_backend_get(EM_BACKEND_VULKAN);
    assert_int_equal(o->open(0, &ctx), EM_OK);
    vk_dev *d = ctx;
    const char *env = getenv("EMBER_VULKAN_STAGING");
    bool forced = env && *env && strcmp(env, "0") != 0;
    if (forced) assert_true(d->staging);
    void *buf;
    assert_int_equal(o->alloc(ctx, 64, &buf), EM_OK);
    assert_true(d->staging ? ((vk_buf *)buf)->map == NULL : ((vk_buf *)buf)->map != NULL);
    unsigned char in[64], out[64];
    for (int i = 0; i < 64; i++) in[i] = (unsigned char)(i * 7);
    assert_int_equal(o->write(ctx, buf, 0, in, 64), EM_OK);
    assert_int_equal(o->write(ctx, buf, 13, in, 5), EM_OK);
    assert_int_equal(o->read(ctx, buf, 0, out, 64), EM_OK);
    for (int i = 0; i < 64; i++)
        assert_int_equal(out[i], i >= 13 && i < 18 ? in[i - 13] : in[i]);
    o->free(ctx, buf);
#else
    skip();
#endif
}

/* The values of t (any device, any dtype) as doubles (malloc'd, *n elements). */
static double *long_values(const em_tensor *t, int64_t *n) {
    em_tensor *c, *d;
    assert_int_equal(em_to_device(t, cpu0, &c), EM_OK);
    assert_int_equal(em_cast(c, EM_F64, &d), EM_OK);
    *n = em_tensor_numel(d);
    double *v = malloc((size_t)(*n > 0 ? *n : 1) * sizeof(double));
    assert_non_null(v);
    assert_int_equal(em_tensor_to_data(d, v, (size_t)*n * sizeof(double)), EM_OK);
    em_tensor_release(c), em_tensor_release(d);
    return v;
}

/* got (vulkan) matches want (cpu) elementwise within atol + rtol * |want|; both released. */
static void long_match(const char *what, em_tensor *got, em_tensor *want, double atol,
                       double rtol) {
    int64_t ng, nw;
    double *g = long_values(got, &ng), *w = long_values(want, &nw);
    assert_int_equal(ng, nw);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < ng; i++) {
        bool same_nan = isnan(g[i]) && isnan(w[i]);
        if (!same_nan && !(fabs(g[i] - w[i]) <= atol + rtol * fabs(w[i]))) {
            if (first < 0) first = i;
            bad++;
        }
    }
    if (bad)
        print_message("%s: %lld of %lld wrong, first at %lld: %.9g vs %.9g\n", what,
                      (long long)bad, (long long)ng, (long long)first, g[first], w[first]);
    assert_int_equal(bad, 0);
    free(g), free(w);
    em_tensor_release(got), em_tensor_release(want);
}

/* Lines longer than lavapipe's loop limiter lets one invocation walk (about 65,535 loop
 * iterations, after which llvmpipe leaves the loop silently): reductions whole and along a
 * dim (a strided line too), argmax, softmax, cumsum and cummax all match cpu. */
static void test_long_lines(void **state) {
    (void)state;
    if (!have_device()) skip();
    const int64_t big = 1LL << 24;
    em_tensor *xc, *xv;
    assert_int_equal(em_rand_uniform(&big, 1, EM_F32, -1, 1, 11, cpu0, &xc), EM_OK);
    assert_int_equal(em_to_device(xc, vk0, &xv), EM_OK);
    em_tensor *g, *w;
    /* whole-tensor sum, max, argmax */
    assert_int_equal(em_sum(xv, &g), EM_OK);
    assert_int_equal(em_sum(xc, &w), EM_OK);
    long_match("sum", g, w, 1e-3, 1e-5);
    assert_int_equal(em_max(xv, &g), EM_OK);
    assert_int_equal(em_max(xc, &w), EM_OK);
    long_match("max", g, w, 0, 0);
    assert_int_equal(em_argmax(xv, &g), EM_OK);
    assert_int_equal(em_argmax(xc, &w), EM_OK);
    long_match("argmax", g, w, 0, 0);
    /* along dim 1 of [2, 2^23] */
    int64_t s2[2] = {2, big / 2};
    em_tensor *rv, *rc;
    assert_int_equal(em_reshape(xv, s2, 2, &rv), EM_OK);
    assert_int_equal(em_reshape(xc, s2, 2, &rc), EM_OK);
    assert_int_equal(em_sum_dim(rv, 1, false, &g), EM_OK);
    assert_int_equal(em_sum_dim(rc, 1, false, &w), EM_OK);
    long_match("sum_dim", g, w, 1e-3, 1e-5);
    assert_int_equal(em_max_dim(rv, 1, false, &g), EM_OK);
    assert_int_equal(em_max_dim(rc, 1, false, &w), EM_OK);
    long_match("max_dim", g, w, 0, 0);
    assert_int_equal(em_argmin_dim(rv, 1, false, &g), EM_OK);
    assert_int_equal(em_argmin_dim(rc, 1, false, &w), EM_OK);
    long_match("argmin_dim", g, w, 0, 0);
    assert_int_equal(em_var_dim(rv, 1, 1, false, &g), EM_OK);
    assert_int_equal(em_var_dim(rc, 1, 1, false, &w), EM_OK);
    long_match("var_dim", g, w, 1e-9, 1e-5);
    assert_int_equal(em_logsumexp_dim(rv, 1, false, &g), EM_OK);
    assert_int_equal(em_logsumexp_dim(rc, 1, false, &w), EM_OK);
    long_match("logsumexp_dim", g, w, 1e-6, 1e-6);
    /* a whole sum of a view whose dims do not chain into one stride (walked by index) */
    em_tensor *tv, *tc;
    assert_int_equal(em_transpose(rv, 0, 1, &tv), EM_OK);
    assert_int_equal(em_transpose(rc, 0, 1, &tc), EM_OK);
    assert_int_equal(em_sum(tv, &g), EM_OK);
    assert_int_equal(em_sum(tc, &w), EM_OK);
    long_match("sum of a transposed view", g, w, 1e-3, 1e-5);
    em_tensor_release(tv), em_tensor_release(tc);
    em_tensor_release(rv), em_tensor_release(rc);
    /* mean along dim 0 of [2^23, 2]: two lines of stride 2 */
    int64_t s3[2] = {big / 2, 2};
    assert_int_equal(em_reshape(xv, s3, 2, &rv), EM_OK);
    assert_int_equal(em_reshape(xc, s3, 2, &rc), EM_OK);
    assert_int_equal(em_mean_dim(rv, 0, false, &g), EM_OK);
    assert_int_equal(em_mean_dim(rc, 0, false, &w), EM_OK);
    long_match("mean_dim", g, w, 1e-9, 1e-5);
    em_tensor_release(rv), em_tensor_release(rc);
    /* softmax and log-softmax along 4M-element lines ([4, 2^22]) */
    int64_t s4[2] = {4, big / 4};
    assert_int_equal(em_reshape(xv, s4, 2, &rv), EM_OK);
    assert_int_equal(em_reshape(xc, s4, 2, &rc), EM_OK);
    assert_int_equal(em_softmax(rv, 1, &g), EM_OK);
    assert_int_equal(em_softmax(rc, 1, &w), EM_OK);
    long_match("softmax", g, w, 1e-12, 1e-4);
    assert_int_equal(em_log_softmax(rv, 1, &g), EM_OK);
    assert_int_equal(em_log_softmax(rc, 1, &w), EM_OK);
    long_match("log_softmax", g, w, 1e-4, 1e-5);
    em_tensor_release(rv), em_tensor_release(rc);
    em_tensor_release(xv), em_tensor_release(xc);
    /* an int sum (wrapping int64) over 2^25 u8 ones: exact */
    const int64_t nu = 1LL << 25;
    assert_int_equal(em_full(&nu, 1, 1, EM_U8, vk0, &xv), EM_OK);
    assert_int_equal(em_sum(xv, &g), EM_OK);
    int64_t total = 0;
    assert_int_equal(em_tensor_to_data(g, &total, sizeof total), EM_OK);
    assert_int_equal(total, nu);
    em_tensor_release(g), em_tensor_release(xv);
    /* cumsum and cummax along a 100,000-element line */
    const int64_t m = 100000;
    assert_int_equal(em_rand_uniform(&m, 1, EM_F32, -1, 1, 12, cpu0, &xc), EM_OK);
    assert_int_equal(em_to_device(xc, vk0, &xv), EM_OK);
    assert_int_equal(em_cumsum(xv, 0, &g), EM_OK);
    assert_int_equal(em_cumsum(xc, 0, &w), EM_OK);
    long_match("cumsum", g, w, 1e-3, 1e-4);
    em_tensor *gi, *wi;
    assert_int_equal(em_cummax(xv, 0, &g, &gi), EM_OK);
    assert_int_equal(em_cummax(xc, 0, &w, &wi), EM_OK);
    long_match("cummax", g, w, 0, 0);
    long_match("cummax indices", gi, wi, 0, 0);
    assert_int_equal(em_cumprod(xv, 0, &g), EM_OK);
    assert_int_equal(em_cumprod(xc, 0, &w), EM_OK);
    long_match("cumprod", g, w, 1e-30, 1e-4);
    em_tensor_release(xv), em_tensor_release(xc);
}

/* The child's work: one op on vulkan:0 (its own instance; the cache loaded, saved at exit). */
static int child_main(void) {
    em_device d;
    em_tensor *a = NULL, *b = NULL;
    int64_t n = 16;
    float got[16];
    int ok = em_device_parse("vulkan:0", &d) == EM_OK &&
             em_full(&n, 1, 2, EM_F32, d, &a) == EM_OK && em_exp(a, &b) == EM_OK &&
             em_tensor_to_data(b, got, sizeof got) == EM_OK && fabsf(got[5] - 7.389056f) < 1e-5f;
    em_tensor_release(a), em_tensor_release(b);
    return ok ? 0 : 1;
}

/* Runs child_main in a fresh process (this program again: a forked copy of a process whose
 * driver has threads would not have them). */
static int child_run(void) {
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", "test_vulkan", "--child", (char *)NULL);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 99;
}

/* The pipeline cache is written at exit into EMBER_CACHE_DIR; a corrupt file is ignored. */
static void test_disk_cache(void **state) {
    (void)state;
    if (!have_device()) skip();
    assert_int_equal(child_run(), 0);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls %s/pipelines-*.bin >/dev/null 2>&1", cache_dir);
    assert_int_equal(system(cmd), 0);
    /* corrupt every cache file: the next process still runs (the driver refuses the data) */
    snprintf(cmd, sizeof cmd,
             "for f in %s/pipelines-*.bin; do head -c 300 /dev/urandom > \"$f\"; done",
             cache_dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(child_run(), 0);
}

#ifdef EMBER_TEST_HAVE_VULKAN
/* A memory layout for vk_choose_memory: heaps (size, device-local), types (flags, heap). */
typedef struct {
    int nheaps, ntypes;
    VkDeviceSize heap[4];
    bool heap_dl[4];
    VkMemoryPropertyFlags flags[8];
    uint32_t type_heap[8];
} mem_layout;

static VkPhysicalDeviceMemoryProperties mem_props(const mem_layout *l) {
    VkPhysicalDeviceMemoryProperties mp;
    memset(&mp, 0, sizeof mp);
    mp.memoryHeapCount = (uint32_t)l->nheaps;
    for (int i = 0; i < l->nheaps; i++) {
        mp.memoryHeaps[i].size = l->heap[i];
        mp.memoryHeaps[i].flags = l->heap_dl[i] ? VK_MEMORY_HEAP_DEVICE_LOCAL_BIT : 0;
    }
    mp.memoryTypeCount = (uint32_t)l->ntypes;
    for (int i = 0; i < l->ntypes; i++) {
        mp.memoryTypes[i].propertyFlags = l->flags[i];
        mp.memoryTypes[i].heapIndex = l->type_heap[i];
    }
    return mp;
}
#endif

/* The memory types chosen for the layouts of real devices (no device needed): a discrete GPU
 * without resizable BAR keeps its tensors in VRAM behind staging, never in its 256 MiB
 * host-visible window (the first version put them there: every type with device-local,
 * host-visible and coherent memory looked like unified memory); with resizable BAR, on
 * unified memory and on lavapipe they are mapped; EMBER_VULKAN_STAGING's flag stages; staging
 * buffers prefer cached system memory. */
static void test_memory_choice(void **state) {
    (void)state;
#ifdef EMBER_TEST_HAVE_VULKAN
    const VkMemoryPropertyFlags DL = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT,
                                HV = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT,
                                HC = VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                                CA = VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
    const VkDeviceSize G = (VkDeviceSize)1 << 30, M = (VkDeviceSize)1 << 20;
    /* a discrete GPU as its driver lists it without resizable BAR: VRAM, system memory, and a
     * 256 MiB device-local host-visible window */
    const mem_layout dgpu = {3, 4, {24 * G, 64 * G, 256 * M}, {true, false, true},
                             {DL, HV | HC, HV | HC | CA, DL | HV | HC}, {0, 1, 1, 2}};
    /* the same with resizable BAR: all of VRAM host-visible too */
    const mem_layout rebar = {2, 4, {24 * G, 64 * G}, {true, false},
                              {DL, HV | HC, HV | HC | CA, DL | HV | HC}, {0, 1, 1, 0}};
    /* lavapipe / unified memory: one heap, one type with everything */
    const mem_layout uma = {1, 1, {16 * G}, {true}, {DL | HV | HC | CA}, {0}};
    /* no device-local type at all */
    const mem_layout host_only = {1, 2, {8 * G}, {false}, {HV | HC, HV | HC | CA}, {0, 0}};
    const mem_layout none = {1, 1, {8 * G}, {true}, {DL}, {0}};
    struct {
        const mem_layout *l;
        bool force;
        bool ok;
        uint32_t dev, host;
        bool staging;
    } cases[] = {
        {&dgpu, false, true, 0, 2, true},       {&dgpu, true, true, 0, 2, true},
        {&rebar, false, true, 3, 2, false},     {&rebar, true, true, 0, 2, true},
        {&uma, false, true, 0, 0, false},       {&uma, true, true, 0, 0, true},
        {&host_only, false, true, 0, 1, false}, {&host_only, true, true, 0, 1, true},
        {&none, false, false, 0, 0, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        VkPhysicalDeviceMemoryProperties mp = mem_props(cases[i].l);
        uint32_t dev = 99, host = 99;
        bool staging = false;
        bool ok = vk_choose_memory(&mp, cases[i].force, &dev, &host, &staging);
        if (ok != cases[i].ok ||
            (ok && (dev != cases[i].dev || host != cases[i].host || staging != cases[i].staging))) {
            print_error("case %zu: ok %d dev %u host %u staging %d; wanted ok %d dev %u host %u "
                        "staging %d\n", i, ok, dev, host, staging, cases[i].ok, cases[i].dev,
                        cases[i].host, cases[i].staging);
            fail();
        }
    }
#else
    skip();
#endif
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--child") == 0) return child_main();
    /* a private pipeline cache folder for this run (before any device is opened) */
    snprintf(cache_dir, sizeof cache_dir, "/tmp/ember-test-vulkan-%ld", (long)getpid());
    mkdir(cache_dir, 0700);
    setenv("EMBER_CACHE_DIR", cache_dir, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_listing),       cmocka_unit_test(test_round_trips),
        cmocka_unit_test(test_async_chain),   cmocka_unit_test(test_large_grid),
        cmocka_unit_test(test_too_large),     cmocka_unit_test(test_missing_feature),
        cmocka_unit_test(test_staging),       cmocka_unit_test(test_disk_cache),
        cmocka_unit_test(test_long_lines),    cmocka_unit_test(test_memory_choice),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", cache_dir);
    if (system(cmd) != 0) fprintf(stderr, "test_vulkan: could not remove %s\n", cache_dir);
    return rc;
}
