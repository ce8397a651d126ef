/* test_plugin.c — backends as plugins (ember.h's em_plugin_load / em_plugins, backend.h's
 * em_plugin_host; docs/plugins.md).
 *
 * ctest runs it with EMBER_PLUGIN_PATH=<build>/tests/plugins:<build>/ember, where the test
 * plugins (tests/plugins: a working out-of-tree backend, one of another ABI, one whose
 * initialization fails, a module that is not a plugin) and the torch plugin (when built) lie.
 * The tests run in order in one process: the first checks that nothing loads libtorch before a
 * torch device is asked for. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ember/backend.h"
#include "ember/ember.h"

#ifndef EMBER_TEST_PLUGIN_DIR
#error "EMBER_TEST_PLUGIN_DIR: the folder of the test plugins"
#endif

/* True when /proc/self/maps names a file containing `what`. */
static bool mapped(const char *what) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, what) != NULL;
    fclose(f);
    return found;
}

static const em_plugin_info *find_plugin(const char *name, em_plugin_info *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(list[i].name, name) == 0) return &list[i];
    return NULL;
}

/* The entry ember keeps for plugin `name` (copied into *out); false when none was found. */
static bool plugin_entry(const char *name, em_plugin_info *out) {
    em_plugin_info list[32];
    size_t n = 0;
    assert_int_equal(em_plugins(list, 32, &n), EM_OK);
    const em_plugin_info *p = find_plugin(name, list, n < 32 ? n : 32);
    if (p) *out = *p;
    return p != NULL;
}

static void check_add(em_device dev) {
    float a[4] = {1, 2, 3, 4}, b[4] = {10, 20, 30, 40}, r[4];
    int64_t shape[1] = {4};
    em_tensor *ta, *tb, *tc;
    assert_int_equal(em_tensor_from_data(a, EM_F32, shape, 1, dev, &ta), EM_OK);
    assert_int_equal(em_tensor_from_data(b, EM_F32, shape, 1, dev, &tb), EM_OK);
    assert_int_equal(em_add(ta, tb, &tc), EM_OK);
    assert_int_equal(em_tensor_to_data(tc, r, sizeof r), EM_OK);
    for (int i = 0; i < 4; i++) assert_true(r[i] == a[i] + b[i]);
    em_tensor_release(ta);
    em_tensor_release(tb);
    em_tensor_release(tc);
}

/* A program that never asks for torch does not load libtorch: cpu and ref work, device
 * parsing of other backends, the default device, moves between host backends, and another
 * plugin loaded on demand. */
static void test_torch_not_loaded_unasked(void **state) {
    (void)state;
    em_device cpu, ref, dflt = em_device_default();
    assert_int_equal(em_device_parse("cpu", &cpu), EM_OK);
    assert_int_equal(em_device_parse("ref+autodiff", &ref), EM_OK);
    check_add(cpu);
    check_add(dflt);
    em_device hm;
    assert_int_equal(em_device_parse("hostmem", &hm), EM_OK);
    check_add(hm);
    em_plugin_info info;
    assert_true(plugin_entry("hostmem", &info));
    assert_true(info.loaded);
    assert_false(mapped("libtorch"));
    assert_false(mapped("libember-torch"));
    if (plugin_entry("torch", &info)) {
        assert_false(info.loaded); /* found, not loaded */
    } else {
        printf("test_plugin: the torch plugin is not built: its checks are skipped\n");
    }
}

/* An out-of-tree backend found through EMBER_PLUGIN_PATH: registered under its name, on an
 * external id, working with ref's kernels, listed by em_devices and em_plugins. */
static void test_hostmem_plugin(void **state) {
    (void)state;
    em_device hm, cpu;
    assert_int_equal(em_device_parse("hostmem+autodiff", &hm), EM_OK);
    assert_true((int)hm.backend >= EM_BACKEND_EXTERNAL0);
    assert_string_equal(em_backend_name(hm.backend), "hostmem");
    char name[64];
    assert_int_equal(em_device_name(hm, name, sizeof name), EM_OK);
    assert_string_equal(name, "hostmem+autodiff");
    assert_int_equal(em_device_parse("cpu", &cpu), EM_OK);
    /* to and from another backend, and autodiff across */
    float v[3] = {1, -2, 3}, g[3];
    int64_t shape[1] = {3};
    em_tensor *x, *xh, *y, *s;
    assert_int_equal(em_tensor_from_data(v, EM_F32, shape, 1, cpu, &x), EM_OK);
    assert_int_equal(em_to_device(x, em_device_inner(hm), &xh), EM_OK);
    em_tensor *xt;
    assert_int_equal(em_to_device(xh, hm, &xt), EM_OK);
    assert_int_equal(em_tensor_require_grad(xt), EM_OK);
    assert_int_equal(em_mul(xt, xt, &y), EM_OK);
    assert_int_equal(em_sum(y, &s), EM_OK);
    em_grads *gr;
    assert_int_equal(em_backward(s, &gr), EM_OK);
    em_tensor *gx;
    assert_int_equal(em_grads_get(gr, xt, &gx), EM_OK);
    assert_int_equal(em_tensor_to_data(gx, g, sizeof g), EM_OK);
    for (int i = 0; i < 3; i++) assert_true(g[i] == 2 * v[i]);
    em_tensor_release(gx);
    em_grads_release(gr);
    em_tensor_release(s);
    em_tensor_release(y);
    em_tensor_release(xt);
    em_tensor_release(xh);
    em_tensor_release(x);
    /* loading it again by path is a no-op */
    assert_int_equal(em_plugin_load(EMBER_TEST_PLUGIN_DIR "/libember-hostmem.so"), EM_OK);
    em_device list[64];
    size_t n = 0;
    bool listed = false;
    assert_int_equal(em_devices(list, 64, &n), EM_OK);
    for (size_t i = 0; i < n && i < 64; i++) listed |= list[i].backend == hm.backend;
    assert_true(listed);
    em_plugin_info info;
    assert_true(plugin_entry("hostmem", &info));
    assert_int_equal(info.status, EM_OK);
    assert_string_equal(info.message, "");
    assert_non_null(strstr(info.path, "libember-hostmem.so"));
}

/* Parsing a device whose plugin is broken: EM_ERR_DEVICE carrying why, the same each time. */
static void expect_parse_fails(const char *text, const char *why) {
    em_device d;
    for (int k = 0; k < 2; k++) {
        em_clear_error();
        assert_int_equal(em_device_parse(text, &d), EM_ERR_DEVICE);
        if (!strstr(em_last_error(), why)) fail_msg("parse %s: '%s' lacks '%s'", text, em_last_error(), why);
    }
}

static void expect_load_fails(const char *path, em_status want, const char *why) {
    em_clear_error();
    em_status s = em_plugin_load(path);
    if (s != want || !strstr(em_last_error(), why))
        fail_msg("em_plugin_load(%s): %s '%s', wanted %s with '%s'", path ? path : "NULL",
                 em_status_name(s), em_last_error(), em_status_name(want), why);
}

/* Broken plugins: a status and a message each, never a crash; nothing of them registered. */
static void test_bad_plugins(void **state) {
    (void)state;
    expect_parse_fails("badabi", "ABI 1005");
    expect_parse_fails("badabi", "rebuild it");
    expect_parse_fails("notplugin", "not an ember plugin");
    expect_parse_fails("failinit:0", "the driver found no device");
    expect_parse_fails("failinit", "initialization failed");
    expect_load_fails(EMBER_TEST_PLUGIN_DIR "/libember-badabi.so", EM_ERR_UNSUPPORTED, "ABI");
    expect_load_fails(EMBER_TEST_PLUGIN_DIR "/libember-notplugin.so", EM_ERR_UNSUPPORTED,
                      "ember_plugin_abi");
    expect_load_fails(EMBER_TEST_PLUGIN_DIR "/libember-failinit.so", EM_ERR_BACKEND,
                      "the driver found no device");
    expect_load_fails("/nonexistent/libember-x.so", EM_ERR_IO, "no such file");
    expect_load_fails(NULL, EM_ERR_ARG, "path");
    expect_load_fails("", EM_ERR_ARG, "path");
    /* a file that is not a shared object at all */
    char junk[] = "/tmp/ember-test-plugin-XXXXXX";
    int fd = mkstemp(junk);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "not an ELF file\n", 16), 16);
    close(fd);
    expect_load_fails(junk, EM_ERR_IO, "cannot be loaded");
    unlink(junk);
    /* a name no plugin has: an unknown backend */
    em_device d;
    assert_int_equal(em_device_parse("nosuchbackend", &d), EM_ERR_ARG);
    assert_non_null(strstr(em_last_error(), "unknown backend"));
    /* what em_plugins says of them */
    em_plugin_info info;
    assert_true(plugin_entry("badabi", &info));
    assert_true(info.loaded);
    assert_int_equal(info.status, EM_ERR_UNSUPPORTED);
    assert_non_null(strstr(info.message, "ABI"));
    assert_true(plugin_entry("failinit", &info));
    assert_int_equal(info.status, EM_ERR_BACKEND);
    assert_non_null(strstr(info.message, "the driver found no device"));
    /* nothing registered under their names */
    for (int b = 0; b < EM_BACKEND_MAX; b++) {
        const char *nm = em_backend_name((em_backend)b);
        assert_true(strcmp(nm, "badabi") && strcmp(nm, "failinit") && strcmp(nm, "notplugin"));
    }
    /* bad arguments */
    size_t n;
    assert_int_equal(em_plugins(NULL, 0, NULL), EM_ERR_ARG);
    assert_int_equal(em_plugins(NULL, 3, &n), EM_ERR_ARG);
    assert_int_equal(em_plugins(NULL, 0, &n), EM_OK);
    assert_true(n >= 5);
}

/* The torch plugin: loaded when its device is asked for, not before. */
static void test_torch_on_demand(void **state) {
    (void)state;
    em_plugin_info info;
    if (!plugin_entry("torch", &info)) {
        printf("test_plugin: SKIP torch: libember-torch.so is not built (no LibTorch)\n");
        return;
    }
    em_device t;
    const char *refuse = getenv("EMBER_TORCH_TEST_INIT_FAIL");
    if (refuse && *refuse) {
        /* the torch plugin's own initialization made to fail (ctest test_plugin_torch_fails):
         * its status and message come back, and the device stays absent */
        assert_int_equal(em_device_parse("torch", &t), EM_ERR_DEVICE);
        assert_non_null(strstr(em_last_error(), "initialization refused"));
        assert_int_equal(em_device_parse("torch+autodiff", &t), EM_ERR_DEVICE);
        assert_true(plugin_entry("torch", &info));
        assert_int_equal(info.status, EM_ERR_BACKEND);
        assert_null(em_backend_get(EM_BACKEND_TORCH));
        return;
    }
    assert_int_equal(em_device_parse("torch", &t), EM_OK);
    assert_int_equal((int)t.backend, (int)EM_BACKEND_TORCH);
    assert_true(mapped("libember-torch.so"));
    assert_true(mapped("libtorch_cpu"));
    check_add(t);
    assert_true(plugin_entry("torch", &info));
    assert_true(info.loaded);
    assert_int_equal(info.status, EM_OK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_torch_not_loaded_unasked),
        cmocka_unit_test(test_hostmem_plugin),
        cmocka_unit_test(test_bad_plugins),
        cmocka_unit_test(test_torch_on_demand),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
