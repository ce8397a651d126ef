/*
 * graph_check.h — what the captured-graph tests (test_graph.c, test_graph_replay.c) share: the
 * devices a replay is checked on, f32 tensors from data, and a bitwise comparison. Include after
 * <cmocka.h> and ember's headers.
 */
#ifndef EMBER_TESTS_GRAPH_CHECK_H
#define EMBER_TESTS_GRAPH_CHECK_H

#include <string.h>

#include "ember/ember.h"

#ifndef OK
#define OK(x) assert_int_equal((x), EM_OK)
#endif

static inline em_device dev_of(const char *name) {
    em_device d;
    OK(em_device_parse(name, &d));
    return d;
}

/* The devices a replay is checked on. */
static inline int replay_devices(em_device *out) {
    int n = 0;
    out[n++] = dev_of("ref");
    em_device d;
    if (em_device_parse("cpu", &d) == EM_OK) out[n++] = d;
    return n;
}

static inline em_tensor *from(const void *data, em_dtype dt, const int64_t *shape, int rank,
                              em_device d) {
    em_tensor *t = NULL;
    OK(em_tensor_from_data(data, dt, shape, rank, d, &t));
    return t;
}

/* Asserts a and b (f32, at most 256 elements) hold the same bits. */
static inline void same_bits(const em_tensor *a, const em_tensor *b) {
    assert_int_equal(em_tensor_numel(a), em_tensor_numel(b));
    size_t n = (size_t)em_tensor_numel(a);
    float x[256], y[256];
    assert_true(n <= 256);
    OK(em_tensor_to_data(a, x, sizeof x));
    OK(em_tensor_to_data(b, y, sizeof y));
    for (size_t i = 0; i < n; i++)
        if (memcmp(&x[i], &y[i], sizeof(float)) != 0)
            fail_msg("element %zu: %.9g and %.9g differ", i, (double)x[i], (double)y[i]);
}

#endif
