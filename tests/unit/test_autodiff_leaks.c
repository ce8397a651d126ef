/*
 * test_autodiff_leaks.c — 10,000 training steps of a small MLP on ref+autodiff and
 * ref+autodiff:balanced: the device's bytes in use come back to the same value after every
 * step (nothing the tape, the gradients or the update made survives the step), and, in the
 * sanitizer build, LeakSanitizer finds nothing at exit.
 *
 * One step: loss = sum((relu(x @ w1 + b1) @ w2 - t)^2) / N; em_backward; then SGD through
 * untracked ops (p - lr * g on detached values), the new parameters re-created as leaves on
 * the autodiff device, alternately with em_to_device and from host data.
 */
#include "errcheck.h"

#define STEPS 10000
#define SETTLED 100 /* the core's small-tensor cache is in its steady state by then */
#define N 8         /* batch */
#define D_IN 4
#define D_HID 16

#define OK(call)                                                                             \
    do {                                                                                     \
        em_status s_ = (call);                                                               \
        if (s_ != EM_OK)                                                                     \
            fail_msg("%s:%d: %s: %s: %s", __FILE__, __LINE__, #call, em_status_name(s_),     \
                     em_last_error());                                                       \
    } while (0)

typedef struct mlp {
    em_tensor *w1, *b1, *w2;
} mlp;

/* Deterministic values in [-scale, scale]. */
static void fill(double *v, int n, uint64_t seed, double scale) {
    for (int i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = scale * (2.0 * (double)(seed >> 11) / 9007199254740992.0 - 1.0);
    }
}

static em_tensor *leaf(em_device ad, const double *v, const int64_t *shape, int rank) {
    em_tensor *t = NULL;
    OK(em_tensor_from_data(v, EM_F64, shape, rank, ad, &t));
    OK(em_tensor_require_grad(t));
    return t;
}

/* p - lr * g as a new leaf on ad (from_data: through host memory, else em_to_device). The
 * old p is released. */
static em_tensor *sgd(em_tensor *p, const em_tensor *g, double lr, em_device ad, bool from_data) {
    assert_non_null(g);
    em_tensor *pd = NULL, *step = NULL, *next = NULL, *out = NULL;
    OK(em_tensor_detach(p, &pd));
    OK(em_mul_scalar(g, lr, &step));
    OK(em_sub(pd, step, &next));
    assert_false(em_tensor_is_tracked(next));
    if (from_data) {
        double buf[D_IN * D_HID];
        int64_t n = em_tensor_numel(next);
        assert_true(n <= (int64_t)(sizeof buf / sizeof buf[0]));
        OK(em_tensor_to_data(next, buf, (size_t)n * sizeof(double)));
        OK(em_tensor_from_data(buf, EM_F64, em_tensor_shape(next), em_tensor_rank(next), ad,
                               &out));
    } else {
        OK(em_to_device(next, ad, &out));
    }
    assert_true(em_tensor_is_tracked(out));
    OK(em_tensor_require_grad(out));
    em_tensor_release(next);
    em_tensor_release(step);
    em_tensor_release(pd);
    em_tensor_release(p);
    return out;
}

/* One training step; returns the loss. */
static double train_step(mlp *m, const em_tensor *x, const em_tensor *t, em_device ad,
                         bool from_data) {
    em_tensor *h0 = NULL, *h1 = NULL, *h = NULL, *y = NULL, *d = NULL, *d2 = NULL, *s = NULL,
              *loss = NULL;
    OK(em_matmul(x, m->w1, &h0));
    OK(em_add(h0, m->b1, &h1));
    OK(em_relu(h1, &h));
    OK(em_matmul(h, m->w2, &y));
    OK(em_sub(y, t, &d));
    OK(em_mul(d, d, &d2));
    OK(em_sum(d2, &s));
    OK(em_mul_scalar(s, 1.0 / N, &loss));
    double l = 0;
    OK(em_tensor_item(loss, &l));
    em_grads *g = NULL;
    OK(em_backward(loss, &g));
    em_tensor *g1 = NULL, *gb = NULL, *g2 = NULL;
    OK(em_grads_get(g, m->w1, &g1));
    OK(em_grads_get(g, m->b1, &gb));
    OK(em_grads_get(g, m->w2, &g2));
    em_grads_release(g);
    em_tensor *tmp[] = {h0, h1, h, y, d, d2, s, loss};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) em_tensor_release(tmp[i]);
    const double lr = 0.05;
    m->w1 = sgd(m->w1, g1, lr, ad, from_data);
    m->b1 = sgd(m->b1, gb, lr, ad, from_data);
    m->w2 = sgd(m->w2, g2, lr, ad, from_data);
    em_tensor_release(g1);
    em_tensor_release(gb);
    em_tensor_release(g2);
    return l;
}

static void train(em_checkpointing strategy) {
    em_device ad;
    OK(em_device_autodiff(ref_dev(), strategy, &ad));
    em_memory_stats before, after;
    OK(em_device_memory(ad, &before));

    double xv[N * D_IN], tv[N], w1v[D_IN * D_HID], b1v[D_HID], w2v[D_HID];
    fill(xv, N * D_IN, 1, 1.0);
    fill(tv, N, 2, 1.0);
    fill(w1v, D_IN * D_HID, 3, 0.5);
    fill(b1v, D_HID, 4, 0.1);
    fill(w2v, D_HID, 5, 0.5);
    const int64_t sx[2] = {N, D_IN}, st[2] = {N, 1}, s1[2] = {D_IN, D_HID}, sb[1] = {D_HID},
                  s2[2] = {D_HID, 1};
    em_tensor *x = NULL, *t = NULL;
    OK(em_tensor_from_data(xv, EM_F64, sx, 2, ad, &x));        /* a constant of the graph */
    OK(em_tensor_from_data(tv, EM_F64, st, 2, ref_dev(), &t)); /* untracked: promoted */
    mlp m = {leaf(ad, w1v, s1, 2), leaf(ad, b1v, sb, 1), leaf(ad, w2v, s2, 2)};

    size_t settled[2] = {0, 0};
    int bad = 0;
    double first = 0, last = 0;
    for (int k = 1; k <= STEPS; k++) {
        double l = train_step(&m, x, t, ad, k % 2 == 1);
        if (k == 1) first = l;
        last = l;
        em_memory_stats ms;
        OK(em_device_memory(ad, &ms));
        /* odd and even steps re-create the parameters differently: one baseline each */
        if (k == SETTLED || k == SETTLED + 1) settled[k % 2] = ms.bytes_in_use;
        if (k > SETTLED + 1 && ms.bytes_in_use != settled[k % 2] && bad++ < 5)
            print_error("step %d: %zu bytes in use, %zu after step %d (%+lld)\n", k,
                        ms.bytes_in_use, settled[k % 2], k % 2 ? SETTLED + 1 : SETTLED,
                        (long long)ms.bytes_in_use - (long long)settled[k % 2]);
    }
    if (bad) fail_msg("the bytes in use drifted at %d step(s) after step %d", bad, SETTLED);
    if (!(last < first)) fail_msg("training did not lower the loss: %g -> %g", first, last);

    em_tensor_release(m.w1);
    em_tensor_release(m.b1);
    em_tensor_release(m.w2);
    em_tensor_release(t);
    em_tensor_release(x);
    OK(em_device_memory(ad, &after));
    /* everything is released (em_device_memory does not count the core's cache of tiny
     * buffers) */
    if (after.bytes_in_use != before.bytes_in_use)
        fail_msg("%zu bytes in use after the run, %zu before", after.bytes_in_use,
                 before.bytes_in_use);
}

static void test_train_disabled(void **state) {
    (void)state;
    train(EM_CKPT_DISABLED);
}

static void test_train_balanced(void **state) {
    (void)state;
    train(EM_CKPT_BALANCED);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_disabled),
        cmocka_unit_test(test_train_balanced),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
