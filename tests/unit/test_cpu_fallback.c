/*
 * test_cpu_fallback.c — the cpu backend's account of the cases it hands to ref's kernels
 * (src/backends/cpu/fallback.h):
 *   - every row of the table names a slot and a case, and an expected one says why; the slots
 *     it leaves to ref altogether are whole-slot rows;
 *   - a kernel call that falls back is counted once, for its case and dtype, from any device
 *     on the backend (plain or wrapped for autodiff), and cpu_fallback_reset clears the counts;
 *   - with EMBER_REPORT_FALLBACKS=1 the counts are printed at exit (ctest runs this test again
 *     with it set and matches the line for the sort below).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "ember/ember.h"

#ifndef EMBER_TEST_HAVE_CPU
int main(void) {
    printf("test_cpu_fallback: no cpu backend in this build: skipped\n");
    return 77;
}
#else
#include "backends/cpu/fallback.h"

static void table_rows(void **state) {
    (void)state;
    int expected = 0;
    for (int c = 0; c < CPU_FB_COUNT; c++) {
        const cpu_fb_case *fc = cpu_fallback_case(c);
        assert_non_null(fc);
        assert_non_null(fc->slot);
        assert_non_null(fc->when);
        assert_true(strlen(fc->slot) > 0 && strlen(fc->when) > 0);
        expected += fc->expected;
        /* an expected fallback says why ref's loop is right for it, in parentheses */
        if (fc->expected && !strchr(fc->when, '('))
            fail_msg("row %d (%s) is expected without a reason: %s", c, fc->slot, fc->when);
    }
    assert_null(cpu_fallback_case(-1));
    assert_null(cpu_fallback_case(CPU_FB_COUNT));
    assert_true(cpu_fallback_case(CPU_FB_SORT)->whole_slot);
    assert_true(expected < CPU_FB_COUNT);
    /* out-of-range arguments are ignored, never a crash */
    cpu_fallback_hit(CPU_FB_COUNT, EM_F32);
    cpu_fallback_hit(CPU_FB_SORT, (em_dtype)EM_DTYPE_COUNT);
    assert_int_equal(cpu_fallback_count(CPU_FB_COUNT, EM_F32), 0);
}

/* sort has no cpu kernel (an expected, whole-slot row): each call is one count. */
static void counts_sort(void **state) {
    (void)state;
    em_device cpu, cpu_ad;
    assert_int_equal(em_device_parse("cpu", &cpu), EM_OK);
    assert_int_equal(em_device_parse("cpu+autodiff", &cpu_ad), EM_OK);
    const float v[5] = {3, 1, 4, 1, 5};
    const int64_t shape[1] = {5};
    cpu_fallback_reset();
    assert_int_equal(cpu_fallback_count(CPU_FB_SORT, EM_F32), 0);
    em_device devs[2] = {cpu, cpu_ad};
    for (int d = 0; d < 2; d++) {
        em_tensor *x = NULL, *vals = NULL, *idx = NULL;
        assert_int_equal(em_tensor_from_data(v, EM_F32, shape, 1, devs[d], &x), EM_OK);
        assert_int_equal(em_sort(x, 0, false, &vals, &idx), EM_OK);
        em_tensor_release(vals);
        em_tensor_release(idx);
        em_tensor_release(x);
        assert_int_equal(cpu_fallback_count(CPU_FB_SORT, EM_F32), (uint64_t)(d + 1));
    }
    assert_int_equal(cpu_fallback_count(CPU_FB_SORT, EM_F64), 0);
    /* the print lists it */
    FILE *f = tmpfile();
    assert_non_null(f);
    assert_true(cpu_fallback_print(f) >= 1);
    rewind(f);
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    assert_non_null(strstr(buf, "sort"));
    assert_non_null(strstr(buf, "[expected]"));
    /* left counted for the print at exit (EMBER_REPORT_FALLBACKS=1) */
}

static void reset_clears(void **state) {
    (void)state;
    cpu_fallback_hit(CPU_FB_ARANGE, EM_I64);
    assert_true(cpu_fallback_count(CPU_FB_ARANGE, EM_I64) >= 1);
    uint64_t sorts = cpu_fallback_count(CPU_FB_SORT, EM_F32);
    cpu_fallback_reset();
    assert_int_equal(cpu_fallback_count(CPU_FB_ARANGE, EM_I64), 0);
    /* the sort count again, for the exit report */
    for (uint64_t i = 0; i < sorts; i++) cpu_fallback_hit(CPU_FB_SORT, EM_F32);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(table_rows),
        cmocka_unit_test(counts_sort),
        cmocka_unit_test(reset_clears),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif
