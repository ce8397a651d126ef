/*
 * test_graph_replay.c — the prepared replay's run list (src/graph/exec.c): the calls checked
 * once at em_graph_prepare run from a list of entries over a pool of views, where only the
 * views over inputs get each run's buffers. Checked against the same program run eagerly (the
 * same bits), run after run with other input tensors: an input read whole by several calls
 * and through a slice, one given as its own buffer and one that must be copied (a transposed
 * view), values written by the step itself (a constant made after the inputs), a many-call
 * chain whose views repeat, and an input a call writes into: bound to the caller's buffer
 * (updated in place, as eagerly) unless another input of the run shares its storage (then
 * copied, so that the other input reads the values the step was recorded with).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "ember/ember.h"
#include "ember/graph.h"

#define OK(x) assert_int_equal((x), EM_OK)

#include "graph_check.h"

static em_tensor *f32(const float *data, const int64_t *shape, int rank, em_device d) {
    return from(data, EM_F32, shape, rank, d);
}

static const int64_t XS[2] = {3, 4}, TS[2] = {4, 3};
static const float K[12] = {0.5f, -1.0f, 0.25f, 2.0f, -0.75f, 1.5f,
                            0.125f, -0.5f, 3.0f, -2.0f, 0.0625f, 1.0f};

/* y = tanh(x * 0.5 + k) + x - sum(x[:, 1:3], -1, keepdim) * c, with c = from_data(x's
 * device) made inside the program: returns y (new reference). */
static em_tensor *program(const em_tensor *x, const em_tensor *k) {
    em_device dev = em_tensor_device(x);
    static const float cv[1] = {0.375f};
    const int64_t one[1] = {1};
    em_tensor *c = f32(cv, one, 1, dev);
    em_tensor *a = NULL, *b = NULL, *t = NULL, *u = NULL, *sl = NULL, *s = NULL, *sc = NULL,
              *y = NULL;
    OK(em_mul_scalar(x, 0.5, &a));
    OK(em_add(a, k, &b));
    OK(em_tanh(b, &t));
    OK(em_add(t, x, &u));
    OK(em_slice(x, 1, 1, 3, 1, &sl));
    OK(em_sum_dim(sl, -1, true, &s));
    OK(em_mul(s, c, &sc));
    OK(em_sub(u, sc, &y));
    em_tensor *all[] = {c, a, b, t, u, sl, s, sc};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) em_tensor_release(all[i]);
    return y;
}

static void values(int r, float *v) {
    for (int i = 0; i < 12; i++) v[i] = sinf(0.7f * (float)(i + 5 * r)) * 2.0f;
}

/* Each run binds another tensor for x: its own buffer (contiguous) or, every other run, a
 * transposed view that must be copied; the results are eager's, run after run. */
static void test_inputs_bound_each_run(void **state) {
    (void)state;
    em_device cap = dev_of("capture");
    em_graph *g = NULL;
    OK(em_graph_begin(&g));
    em_tensor *k = f32(K, XS, 2, cap), *x = NULL;
    OK(em_graph_input(g, "x", EM_F32, XS, 2, cap, &x));
    em_tensor *y = program(x, k);
    OK(em_graph_output(g, "y", y));
    OK(em_graph_end(g));
    em_device devs[2];
    int nd = replay_devices(devs);
    for (int d = 0; d < nd; d++) {
        em_tensor *ke = f32(K, XS, 2, devs[d]);
        em_exec *e = NULL;
        OK(em_graph_prepare(g, devs[d], &e));
        for (int r = 0; r < 6; r++) {
            float v[12];
            values(r, v);
            em_tensor *xe = NULL;
            if (r % 2 == 0) {
                xe = f32(v, XS, 2, devs[d]);
            } else { /* the same values, as the transpose of a [4, 3] tensor */
                float tv[12];
                for (int i = 0; i < 3; i++)
                    for (int j = 0; j < 4; j++) tv[j * 3 + i] = v[i * 4 + j];
                em_tensor *tt = f32(tv, TS, 2, devs[d]);
                OK(em_transpose(tt, 0, 1, &xe));
                em_tensor_release(tt);
            }
            em_tensor *ye = program(xe, ke), *out[1] = {NULL};
            const em_tensor *in[1] = {xe};
            OK(em_exec_run(e, in, 1, out, 1));
            same_bits(ye, out[0]);
            em_tensor_release(out[0]);
            em_tensor_release(ye);
            em_tensor_release(xe);
        }
        em_exec_release(e);
        em_tensor_release(ke);
    }
    em_tensor_release(y);
    em_tensor_release(x);
    em_tensor_release(k);
    em_graph_release(g);
}

/* Two inputs, each read by many calls whose views repeat (the pool keeps one of each): the
 * runs swap which tensor goes where, so a view over one input that took the other's buffer
 * shows in the results. */
static void test_two_inputs_swapped(void **state) {
    (void)state;
    em_device cap = dev_of("capture");
    em_graph *g = NULL;
    OK(em_graph_begin(&g));
    const int64_t s8[1] = {8};
    em_tensor *p = NULL, *q = NULL;
    OK(em_graph_input(g, "p", EM_F32, s8, 1, cap, &p));
    OK(em_graph_input(g, "q", EM_F32, s8, 1, cap, &q));
    em_tensor *y = NULL;
    OK(em_sub(p, q, &y));
    for (int i = 0; i < 40; i++) {
        em_tensor *n = NULL, *m = NULL;
        OK(em_mul_scalar(y, 0.5, &n));
        OK(em_add(n, i % 2 ? p : q, &m));
        em_tensor_release(n);
        em_tensor_release(y);
        y = m;
    }
    OK(em_graph_output(g, "y", y));
    OK(em_graph_end(g));
    em_device devs[2];
    int nd = replay_devices(devs);
    for (int d = 0; d < nd; d++) {
        em_exec *e = NULL;
        OK(em_graph_prepare(g, devs[d], &e));
        float a[8], b[8];
        for (int i = 0; i < 8; i++) {
            a[i] = (float)i * 0.25f - 1.0f;
            b[i] = 3.0f - (float)i * 0.5f;
        }
        em_tensor *ta = f32(a, s8, 1, devs[d]), *tb = f32(b, s8, 1, devs[d]);
        for (int r = 0; r < 4; r++) {
            const em_tensor *pe = r % 2 ? tb : ta, *qe = r % 2 ? ta : tb;
            em_tensor *ye = NULL;
            OK(em_sub(pe, qe, &ye));
            for (int i = 0; i < 40; i++) {
                em_tensor *n = NULL, *m = NULL;
                OK(em_mul_scalar(ye, 0.5, &n));
                OK(em_add(n, i % 2 ? pe : qe, &m));
                em_tensor_release(n);
                em_tensor_release(ye);
                ye = m;
            }
            em_tensor *out[1] = {NULL};
            const em_tensor *in[2] = {pe, qe};
            OK(em_exec_run(e, in, 2, out, 1));
            same_bits(ye, out[0]);
            em_tensor_release(out[0]);
            em_tensor_release(ye);
        }
        /* the inputs were read, never written */
        float ra[8], rb[8];
        OK(em_tensor_to_data(ta, ra, sizeof ra));
        OK(em_tensor_to_data(tb, rb, sizeof rb));
        assert_memory_equal(ra, a, sizeof a);
        assert_memory_equal(rb, b, sizeof b);
        em_tensor_release(ta);
        em_tensor_release(tb);
        em_exec_release(e);
    }
    em_tensor_release(y);
    em_tensor_release(p);
    em_tensor_release(q);
    em_graph_release(g);
}

/* An input the step writes into (an in-place op on it): it gets the step's values, as eagerly,
 * and the next run starts from the caller's new values. */
static void test_input_written(void **state) {
    (void)state;
    em_device cap = dev_of("capture");
    em_graph *g = NULL;
    OK(em_graph_begin(&g));
    const int64_t s4[1] = {4};
    em_tensor *x = NULL, *y = NULL;
    OK(em_graph_input(g, "x", EM_F32, s4, 1, cap, &x));
    OK(em_mul_scalar_(x, 2.0, &y)); /* its last reference: x's buffer, in place */
    OK(em_graph_output(g, "y", y));
    OK(em_graph_end(g));
    em_device devs[2];
    int nd = replay_devices(devs);
    for (int d = 0; d < nd; d++) {
        em_exec *e = NULL;
        OK(em_graph_prepare(g, devs[d], &e));
        for (int r = 0; r < 3; r++) {
            float v[4] = {1.0f + (float)r, -2.0f, 0.5f, 3.0f}, got[4], back[4];
            em_tensor *xe = f32(v, s4, 1, devs[d]), *out[1] = {NULL};
            const em_tensor *in[1] = {xe};
            OK(em_exec_run(e, in, 1, out, 1));
            OK(em_tensor_to_data(out[0], got, sizeof got));
            for (int i = 0; i < 4; i++) assert_true(got[i] == 2.0f * v[i]);
            OK(em_tensor_to_data(xe, back, sizeof back)); /* as eagerly: written in place */
            for (int i = 0; i < 4; i++) assert_true(back[i] == 2.0f * v[i]);
            em_tensor_release(out[0]);
            em_tensor_release(xe);
        }
        em_exec_release(e);
    }
    em_tensor_release(y);
    em_graph_release(g);
}


/* A written input given the same tensor as another input of the run: the step was recorded
 * with two tensors, so b must read the caller's values, not the ones the step wrote into a
 * (a copy of a is written and then copied back); and a written input given as a transposed
 * view (not whole: copied, written back through the view). */
static void test_written_input_shared(void **state) {
    (void)state;
    em_device cap = dev_of("capture");
    em_graph *g = NULL;
    OK(em_graph_begin(&g));
    const int64_t s4[1] = {4};
    em_tensor *a = NULL, *b = NULL, *y = NULL, *z = NULL;
    OK(em_graph_input(g, "a", EM_F32, s4, 1, cap, &a));
    OK(em_graph_input(g, "b", EM_F32, s4, 1, cap, &b));
    OK(em_mul_scalar_(a, 2.0, &y)); /* a's buffer, in place */
    OK(em_add(b, y, &z));           /* b read after a was written */
    OK(em_graph_output(g, "z", z));
    OK(em_graph_end(g));
    em_device devs[2];
    int nd = replay_devices(devs);
    for (int d = 0; d < nd; d++) {
        em_exec *e = NULL;
        OK(em_graph_prepare(g, devs[d], &e));
        for (int r = 0; r < 2; r++) {
            float v[4] = {1.0f + (float)r, -2.0f, 0.5f, 3.0f}, w[4] = {10, 20, 30, 40};
            float got[4], back[4];
            /* distinct tensors: a updated in place, z = b + 2a */
            em_tensor *t = f32(v, s4, 1, devs[d]), *u = f32(w, s4, 1, devs[d]);
            em_tensor *out[1] = {NULL};
            const em_tensor *in2[2] = {t, u};
            OK(em_exec_run(e, in2, 2, out, 1));
            OK(em_tensor_to_data(out[0], got, sizeof got));
            for (int i = 0; i < 4; i++) assert_true(got[i] == w[i] + 2.0f * v[i]);
            OK(em_tensor_to_data(t, back, sizeof back));
            for (int i = 0; i < 4; i++) assert_true(back[i] == 2.0f * v[i]);
            em_tensor_release(out[0]);
            /* one tensor as both: z = t + 2t, t becomes 2t */
            em_tensor *x = f32(v, s4, 1, devs[d]);
            const em_tensor *same[2] = {x, x};
            OK(em_exec_run(e, same, 2, out, 1));
            OK(em_tensor_to_data(out[0], got, sizeof got));
            for (int i = 0; i < 4; i++) assert_true(got[i] == v[i] + 2.0f * v[i]);
            OK(em_tensor_to_data(x, back, sizeof back));
            for (int i = 0; i < 4; i++) assert_true(back[i] == 2.0f * v[i]);
            em_tensor_release(out[0]);
            em_tensor_release(x);
            em_tensor_release(t);
            em_tensor_release(u);
        }
        /* a written input given as a view that is not whole (every other element) */
        const int64_t s8[1] = {8};
        float v8[8] = {1, 100, 2, 100, 3, 100, 4, 100}, w[4] = {0, 0, 0, 0}, got[4], back[8];
        em_tensor *big = f32(v8, s8, 1, devs[d]), *u = f32(w, s4, 1, devs[d]), *sl = NULL;
        OK(em_slice(big, 0, 0, 8, 2, &sl));
        em_tensor *out[1] = {NULL};
        const em_tensor *in2[2] = {sl, u};
        OK(em_exec_run(e, in2, 2, out, 1));
        OK(em_tensor_to_data(out[0], got, sizeof got));
        for (int i = 0; i < 4; i++) assert_true(got[i] == 2.0f * (float)(i + 1));
        OK(em_tensor_to_data(big, back, sizeof back));
        for (int i = 0; i < 8; i++)
            assert_true(back[i] == (i % 2 ? 100.0f : 2.0f * (float)(i / 2 + 1)));
        em_tensor_release(out[0]);
        em_tensor_release(sl);
        em_tensor_release(big);
        em_tensor_release(u);
        em_exec_release(e);
    }
    em_tensor_release(z);
    em_tensor_release(y);
    em_tensor_release(b);
    em_graph_release(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inputs_bound_each_run),
        cmocka_unit_test(test_two_inputs_swapped),
        cmocka_unit_test(test_input_written),
        cmocka_unit_test(test_written_input_shared),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
