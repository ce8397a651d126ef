/*
 * test_threads.c — four threads at once, each creating tensors, running a few ops, reading
 * the results back and releasing them, while all of them share one read-only tensor that
 * every thread retains and releases. Also checks that error messages are per thread.
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "ember/ember.h"

#define N_THREADS 4
#define ITERS 2000
#define N 8

typedef struct worker {
    int id;
    em_tensor *shared; /* [N] f32: 0, 1, ..., N-1; read by every thread */
    int errors;        /* wrong values or failed calls seen by this thread */
    char first[256];   /* the first problem, for the report */
} worker;

static void note(worker *w, const char *what) {
    if (w->errors++ == 0)
        snprintf(w->first, sizeof w->first, "thread %d: %s (%s)", w->id, what, em_last_error());
}

/** One iteration: y = relu(x + shared) * 2; s = sum(y); checks y and s; also a failing call
 *  whose message must stay on this thread. */
static void iteration(worker *w, int it) {
    const em_device dev = {EM_BACKEND_REF, 0, false, EM_CKPT_NONE};
    float xs[N];
    const int64_t shape[1] = {N};
    float base = (float)(w->id * 1000 + it % 97);
    for (int i = 0; i < N; i++) xs[i] = base - (float)(2 * i);

    em_tensor_retain(w->shared);
    em_tensor *x = NULL, *t = NULL, *r = NULL, *y = NULL, *s = NULL;
    if (em_tensor_from_data(xs, EM_F32, shape, 1, dev, &x) != EM_OK) note(w, "from_data");
    else if (em_add(x, w->shared, &t) != EM_OK) note(w, "em_add");
    else if (em_relu(t, &r) != EM_OK) note(w, "em_relu");
    else if (em_mul_scalar(r, 2.0, &y) != EM_OK) note(w, "em_mul_scalar");
    else if (em_sum(y, &s) != EM_OK) note(w, "em_sum");
    else {
        float ys[N];
        double total = 0, got = 0;
        if (em_tensor_to_data(y, ys, sizeof ys) != EM_OK) note(w, "to_data");
        for (int i = 0; i < N; i++) {
            float want = fmaxf(xs[i] + (float)i, 0.0f) * 2.0f;
            total += want;
            if (ys[i] != want) note(w, "wrong value in y");
        }
        if (em_tensor_item(s, &got) != EM_OK) note(w, "em_tensor_item");
        else if (fabs(got - total) > 1e-3 * (1 + fabs(total))) note(w, "wrong sum");
    }
    /* errors are per thread: this thread's message names its own failing call */
    em_tensor *bad = NULL;
    const char *fn = (w->id % 2) ? "em_exp" : "em_log";
    em_status st = (w->id % 2) ? em_exp(NULL, &bad) : em_log(NULL, &bad);
    if (st != EM_ERR_ARG || strncmp(em_last_error(), fn, strlen(fn)) != 0)
        note(w, "error message crossed threads");
    em_tensor_release(s);
    em_tensor_release(y);
    em_tensor_release(r);
    em_tensor_release(t);
    em_tensor_release(x);
    em_tensor_release(w->shared);
}

static void *run(void *arg) {
    worker *w = arg;
    for (int it = 0; it < ITERS; it++) iteration(w, it);
    return NULL;
}

static void test_four_threads(void **state) {
    (void)state;
    const em_device dev = {EM_BACKEND_REF, 0, false, EM_CKPT_NONE};
    em_tensor *shared = NULL;
    assert_int_equal(em_arange(0, N, 1, EM_F32, dev, &shared), EM_OK);
    worker ws[N_THREADS];
    pthread_t th[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        ws[i] = (worker){.id = i, .shared = shared};
        assert_int_equal(pthread_create(&th[i], NULL, run, &ws[i]), 0);
    }
    for (int i = 0; i < N_THREADS; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    int errors = 0;
    for (int i = 0; i < N_THREADS; i++) {
        if (ws[i].errors) print_error("%s; %d problem(s)\n", ws[i].first, ws[i].errors);
        errors += ws[i].errors;
    }
    assert_int_equal(errors, 0);
    /* every retain was matched: the test holds the only reference again */
    assert_true(em_tensor_can_mut(shared));
    float v[N];
    assert_int_equal(em_tensor_to_data(shared, v, sizeof v), EM_OK);
    for (int i = 0; i < N; i++) assert_true(v[i] == (float)i);
    em_tensor_release(shared);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_four_threads)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
