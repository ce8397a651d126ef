/*
 * test_autodiff_api.c — the public autodiff API (ember.h section 8): bad inputs, the strategy
 * rules (mixing strategies, promotion of untracked inputs, detach, int tensors on autodiff
 * devices), autodiff devices, gradients across em_to_device, and device memory statistics.
 *
 * The op rules themselves are checked by tests/gradcheck; here the graphs are small and use
 * few ops (mul, add, sum, cast, one_hot, to_device).
 */
#include "errcheck.h"
#include "ember/nn.h"

/* A call that must fail with `want`, naming `fn` (no tensor out-parameter to watch). */
#define EXPECT_FAIL(want, fn, call)                                                          \
    do {                                                                                     \
        em_clear_error();                                                                    \
        em_status s_ = (call);                                                               \
        chk_err(s_, (want), (fn), true, #call, __FILE__, __LINE__);                          \
    } while (0)

/* em_backward(loss, &g) must fail with `want` and leave g alone. */
#define EXPECT_BACKWARD_ERR(want, loss)                                                      \
    do {                                                                                     \
        em_grads *g_ = (em_grads *)SENTINEL;                                                 \
        em_clear_error();                                                                    \
        em_status s_ = em_backward((loss), &g_);                                             \
        chk_err(s_, (want), "em_backward", g_ == (em_grads *)SENTINEL,                       \
                "em_backward(" #loss ")", __FILE__, __LINE__);                               \
        if (s_ == EM_OK) em_grads_release(g_);                                               \
    } while (0)

/* Fails the test with the call and em_last_error() when it does not return EM_OK. */
#define OK(call)                                                                             \
    do {                                                                                     \
        em_status s_ = (call);                                                               \
        if (s_ != EM_OK)                                                                     \
            fail_msg("%s:%d: %s: %s: %s", __FILE__, __LINE__, #call, em_status_name(s_),     \
                     em_last_error());                                                       \
    } while (0)

static em_device ad_dev(em_checkpointing c) {
    em_device d;
    assert_int_equal(em_device_autodiff(ref_dev(), c, &d), EM_OK);
    return d;
}

static em_device disabled_dev(void) { return ad_dev(EM_CKPT_DISABLED); }
static em_device balanced_dev(void) { return ad_dev(EM_CKPT_BALANCED); }

/* An f64 tensor of n values on dev (shape [n], or 0-d when n is 0 with one value). */
static em_tensor *vec(em_device dev, const double *v, int64_t n) {
    em_tensor *t = NULL;
    em_status s = n ? em_tensor_from_data(v, EM_F64, &n, 1, dev, &t)
                    : em_tensor_from_data(v, EM_F64, NULL, 0, dev, &t);
    if (s != EM_OK) fail_msg("vec: %s", em_last_error());
    return t;
}

/* A tracked leaf that requires grad. */
static em_tensor *param(em_device dev, const double *v, int64_t n) {
    em_tensor *t = vec(dev, v, n);
    OK(em_tensor_require_grad(t));
    return t;
}

/* Reads up to cap doubles of an f64 tensor. */
static void read_vals(const em_tensor *t, double *out, size_t cap) {
    assert_non_null(t);
    assert_int_equal(em_tensor_dtype(t), EM_F64);
    size_t n = (size_t)em_tensor_numel(t);
    assert_true(n <= cap);
    OK(em_tensor_to_data(t, out, n * sizeof(double)));
}

/* Checks that t holds want[0..n) (exactly: the graphs here are exact in f64). */
static void expect_vals(const em_tensor *t, const double *want, size_t n, const char *what) {
    double got[64];
    if (!t) {
        chk_report(__FILE__, __LINE__, what, "no gradient");
        return;
    }
    read_vals(t, got, 64);
    if ((size_t)em_tensor_numel(t) != n) {
        chk_report(__FILE__, __LINE__, what, "wrong number of elements");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (fabs(got[i] - want[i]) > 1e-12) {
            char m[200];
            snprintf(m, sizeof m, "element %zu: got %g, want %g", i, got[i], want[i]);
            chk_report(__FILE__, __LINE__, what, m);
            return;
        }
    }
}

/* The gradient of param in g (a new reference or NULL). */
static em_tensor *grad_of(const em_grads *g, const em_tensor *p) {
    em_tensor *out = SENTINEL;
    OK(em_grads_get(g, p, &out));
    assert_true(out != SENTINEL);
    return out;
}

/* ---- em_backward_hooked: a call per parameter as its gradient completes ---- */

typedef struct hook_log {
    size_t order[8];
    const em_tensor *grads[8];
    int n;
    int fail_at; /* the call that returns EM_ERR_BACKEND (-1: none) */
} hook_log;

static em_status log_hook(void *ctx, size_t index, const em_tensor *grad) {
    hook_log *l = ctx;
    if (l->n == l->fail_at) return em_backend_set_error(EM_ERR_BACKEND, "hook refused");
    if (l->n < 8) {
        l->order[l->n] = index;
        l->grads[l->n] = grad;
    }
    l->n++;
    return EM_OK;
}

static void test_backward_hooked(void **state) {
    (void)state;
    const double a[2] = {1, 2}, b[2] = {3, 4}, c[2] = {5, 6};
    em_device ad = disabled_dev();
    em_tensor *w1 = param(ad, a, 2), *w2 = param(ad, b, 2), *unused = param(ad, c, 2);
    /* loss = sum((w1 * w1) * w2): w2's gradient (w1^2) completes before w1's (2 w1 w2) */
    em_tensor *sq, *prod, *loss;
    for (int round = 0; round < 3; round++) {
        OK(em_mul(w1, w1, &sq));
        OK(em_mul(sq, w2, &prod));
        OK(em_sum(prod, &loss));
        const em_tensor *params[3] = {w1, w2, unused};
        hook_log log = {.n = 0, .fail_at = round == 2 ? 1 : -1};
        em_grads *g = (em_grads *)SENTINEL;
        em_status s = em_backward_hooked(loss, params, 3, log_hook, &log, &g);
        if (round < 2) {
            OK(s);
            assert_int_equal(log.n, 2); /* `unused` gets no call */
            assert_int_equal(log.order[0], 1);
            assert_int_equal(log.order[1], 0);
            em_tensor *g1 = grad_of(g, w1), *g2 = grad_of(g, w2);
            assert_ptr_equal(log.grads[0], g2); /* the very tensors em_grads_get gives */
            assert_ptr_equal(log.grads[1], g1);
            const double want1[2] = {2 * 1 * 3, 2 * 2 * 4}, want2[2] = {1, 4};
            expect_vals(g1, want1, 2, "w1's gradient");
            expect_vals(g2, want2, 2, "w2's gradient");
            assert_null(grad_of(g, unused));
            em_tensor_release(g1), em_tensor_release(g2);
            em_grads_release(g);
        } else {
            /* a hook's failure stops the walk: its status, nothing written */
            assert_int_equal(s, EM_ERR_BACKEND);
            assert_true(g == (em_grads *)SENTINEL);
            assert_non_null(strstr(em_last_error(), "hook refused"));
        }
        em_tensor_release(sq), em_tensor_release(prod), em_tensor_release(loss);
    }
    /* bad arguments */
    OK(em_mul(w1, w2, &prod));
    OK(em_sum(prod, &loss));
    const em_tensor *params[2] = {w1, NULL};
    em_grads *g = (em_grads *)SENTINEL;
    EXPECT_FAIL(EM_ERR_ARG, "em_backward_hooked",
                em_backward_hooked(loss, params, 1, NULL, NULL, &g));
    EXPECT_FAIL(EM_ERR_ARG, "em_backward_hooked",
                em_backward_hooked(loss, NULL, 1, log_hook, NULL, &g));
    EXPECT_FAIL(EM_ERR_ARG, "em_backward_hooked",
                em_backward_hooked(loss, params, 2, log_hook, NULL, &g));
    assert_true(g == (em_grads *)SENTINEL);
    /* no parameters: em_backward */
    hook_log log = {.n = 0, .fail_at = -1};
    OK(em_backward_hooked(loss, NULL, 0, log_hook, &log, &g));
    assert_int_equal(log.n, 0);
    em_grads_release(g);
    em_tensor_release(prod), em_tensor_release(loss);
    em_tensor_release(w1), em_tensor_release(w2), em_tensor_release(unused);
}

/* ---- em_tensor_require_grad ---- */

static void test_require_grad(void **state) {
    (void)state;
    const double v[3] = {1, 2, 3};
    em_device ad = disabled_dev();
    EXPECT_FAIL(EM_ERR_ARG, "em_tensor_require_grad", em_tensor_require_grad(NULL));

    em_tensor *plain = vec(ref_dev(), v, 3);
    EXPECT_FAIL(EM_ERR_STATE, "em_tensor_require_grad", em_tensor_require_grad(plain));
    CHECK(!em_tensor_is_tracked(plain), "a ref tensor is untracked");
    CHECK(!em_tensor_requires_grad(plain), "an untracked tensor requires no grad");

    const int64_t iv[3] = {0, 1, 2};
    const int64_t n3 = 3;
    em_tensor *ints = NULL;
    OK(em_tensor_from_data(iv, EM_I64, &n3, 1, ad, &ints));
    EXPECT_FAIL(EM_ERR_STATE, "em_tensor_require_grad", em_tensor_require_grad(ints));

    em_tensor *x = vec(ad, v, 3);
    CHECK(em_tensor_is_tracked(x), "a float tensor created on an autodiff device is tracked");
    CHECK(!em_tensor_requires_grad(x), "no grad before require_grad");
    OK(em_tensor_require_grad(x));
    CHECK(em_tensor_requires_grad(x), "requires grad after require_grad");
    OK(em_tensor_require_grad(x)); /* twice is fine */

    em_tensor *y = NULL;
    OK(em_add(x, x, &y));
    CHECK(em_tensor_is_tracked(y), "an op on a tracked tensor is tracked");
    EXPECT_FAIL(EM_ERR_STATE, "em_tensor_require_grad", em_tensor_require_grad(y));
    CHECK(!em_tensor_requires_grad(y), "a non-leaf requires no grad");
    CHECK(!em_tensor_requires_grad(NULL), "NULL requires no grad");
    CHECK(!em_tensor_is_tracked(NULL), "NULL is untracked");

    em_tensor_release(y);
    em_tensor_release(x);
    em_tensor_release(ints);
    em_tensor_release(plain);
    CHECKS_DONE();
}

/* ---- em_backward ---- */

static void test_backward_errors(void **state) {
    (void)state;
    const double v[2] = {1.5, -2.0};
    em_device ad = disabled_dev();
    em_grads *g = (em_grads *)SENTINEL;

    EXPECT_BACKWARD_ERR(EM_ERR_ARG, NULL);
    em_tensor *x = param(ad, v, 0); /* 0-d */
    em_clear_error();
    chk_err(em_backward(x, NULL), EM_ERR_ARG, "em_backward", true, "em_backward(x, NULL)",
            __FILE__, __LINE__);

    em_tensor *plain = vec(ref_dev(), v, 0);
    EXPECT_BACKWARD_ERR(EM_ERR_STATE, plain);
    const int64_t iv = 3;
    em_tensor *ints = NULL;
    OK(em_tensor_from_data(&iv, EM_I64, NULL, 0, ad, &ints));
    EXPECT_BACKWARD_ERR(EM_ERR_STATE, ints);

    em_tensor *x2 = param(ad, v, 2), *two = NULL;
    OK(em_mul(x2, x2, &two));
    EXPECT_BACKWARD_ERR(EM_ERR_SHAPE, two);

    /* one backward through a graph, then the tape is gone */
    em_tensor *l = NULL;
    OK(em_mul(x, x, &l));
    OK(em_backward(l, &g));
    em_tensor *gx = grad_of(g, x);
    const double want = 2 * v[0];
    expect_vals(gx, &want, 1, "d(x*x)/dx");
    em_tensor_release(gx);
    em_grads_release(g);
    EXPECT_BACKWARD_ERR(EM_ERR_STATE, l);
    /* a new forward from the same leaf works again */
    em_tensor *l2 = NULL;
    OK(em_mul(x, x, &l2));
    OK(em_backward(l2, &g));
    em_grads_release(g);
    /* a leaf as the loss: its gradient is 1 */
    OK(em_backward(x, &g));
    gx = grad_of(g, x);
    const double one = 1.0;
    expect_vals(gx, &one, 1, "dx/dx");
    em_tensor_release(gx);
    em_grads_release(g);
    em_grads_release(NULL);

    em_tensor_release(l2);
    em_tensor_release(l);
    em_tensor_release(two);
    em_tensor_release(x2);
    em_tensor_release(ints);
    em_tensor_release(plain);
    em_tensor_release(x);
    CHECKS_DONE();
}

/* ---- em_grads_get ---- */

static void test_grads_get(void **state) {
    (void)state;
    const double v[1] = {3.0};
    em_device ad = disabled_dev();
    em_tensor *x = param(ad, v, 0), *unused = param(ad, v, 0), *plain = vec(ref_dev(), v, 0);
    em_tensor *l = NULL;
    em_grads *g = NULL;
    OK(em_mul(x, x, &l));
    OK(em_backward(l, &g));

    EXPECT_ERR(EM_ERR_ARG, "em_grads_get", em_grads_get(NULL, x, &o));
    EXPECT_ERR(EM_ERR_ARG, "em_grads_get", em_grads_get(g, NULL, &o));
    EXPECT_FAIL(EM_ERR_ARG, "em_grads_get", em_grads_get(g, x, NULL));

    em_tensor *o = SENTINEL;
    CHECK(em_grads_get(g, unused, &o) == EM_OK && o == NULL,
          "a leaf that got no gradient: EM_OK and NULL");
    o = SENTINEL;
    CHECK(em_grads_get(g, plain, &o) == EM_OK && o == NULL,
          "an untracked tensor: EM_OK and NULL");
    o = SENTINEL;
    CHECK(em_grads_get(g, l, &o) == EM_OK && o == NULL, "a non-leaf: EM_OK and NULL");

    /* the gradient: x's shape and dtype, untracked, on the inner device; a new reference
     * that outlives the set */
    em_tensor *gx = grad_of(g, x);
    assert_non_null(gx);
    em_grads_release(g);
    const double want = 6.0;
    expect_vals(gx, &want, 1, "d(x*x)/dx at 3");
    CHECK(em_tensor_rank(gx) == 0, "0-d gradient of a 0-d leaf");
    CHECK(!em_tensor_is_tracked(gx), "gradients are untracked");
    CHECK(em_device_equal(em_tensor_device(gx), ref_dev()), "gradients live on the inner device");

    em_tensor_release(gx);
    em_tensor_release(l);
    em_tensor_release(plain);
    em_tensor_release(unused);
    em_tensor_release(x);
    CHECKS_DONE();
}

/* em_grads_create / em_grads_set: gradients made elsewhere (a replayed graph's outputs) handed
 * to em_optimizer_step; bad arguments are statuses with messages. */
static void test_grads_set(void **state) {
    (void)state;
    const double v[2] = {1.0, 2.0}, gv[2] = {0.5, -1.0}, g2v[2] = {2.0, 4.0};
    em_device ad = disabled_dev();
    em_tensor *p = param(ad, v, 2), *gr = vec(ref_dev(), gv, 2), *g2 = vec(ref_dev(), g2v, 2);
    em_tensor *other = vec(ad, v, 2), *short_g = vec(ref_dev(), v, 1), *l = NULL;
    em_tensor *f32 = NULL;
    OK(em_cast(gr, EM_F32, &f32));
    OK(em_mul(p, p, &l)); /* tracked: no gradient */
    em_grads *g = NULL;
    EXPECT_FAIL(EM_ERR_ARG, "em_grads_create", em_grads_create(NULL));
    OK(em_grads_create(&g));
    EXPECT_FAIL(EM_ERR_ARG, "em_grads_set", em_grads_set(NULL, p, gr));
    EXPECT_FAIL(EM_ERR_ARG, "em_grads_set", em_grads_set(g, NULL, gr));
    EXPECT_FAIL(EM_ERR_ARG, "em_grads_set", em_grads_set(g, p, NULL));
    EXPECT_FAIL(EM_ERR_STATE, "em_grads_set", em_grads_set(g, other, gr)); /* not a leaf */
    EXPECT_FAIL(EM_ERR_STATE, "em_grads_set", em_grads_set(g, p, l));     /* tracked grad */
    EXPECT_FAIL(EM_ERR_SHAPE, "em_grads_set", em_grads_set(g, p, short_g));
    EXPECT_FAIL(EM_ERR_DTYPE, "em_grads_set", em_grads_set(g, p, f32));
    em_device cpu;
    if (em_device_parse("cpu", &cpu) == EM_OK) {
        em_tensor *gc = vec(cpu, gv, 2);
        EXPECT_FAIL(EM_ERR_DEVICE, "em_grads_set", em_grads_set(g, p, gc));
        em_tensor_release(gc);
    }
    /* set, replaced, read back, and stepped on: p - lr * g */
    OK(em_grads_set(g, p, g2));
    OK(em_grads_set(g, p, gr));
    em_tensor *back = grad_of(g, p);
    expect_vals(back, gv, 2, "the gradient set last");
    em_tensor_release(back);
    em_params *ps = NULL;
    em_optimizer *opt = NULL;
    OK(em_params_create(&ps));
    OK(em_params_add(ps, "p", &p));
    OK(em_optimizer_sgd(ps, 0.5, 0, 0, &opt));
    OK(em_optimizer_step(opt, g, 1.0));
    const double want[2] = {1.0 - 0.25, 2.0 + 0.5};
    expect_vals(p, want, 2, "p - 0.5 * g");
    em_optimizer_release(opt);
    em_params_release(ps);
    em_grads_release(g);
    em_tensor *all[] = {p, gr, g2, other, short_g, l, f32};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) em_tensor_release(all[i]);
    CHECKS_DONE();
}

/* Gradients carry the strategy's mark (ember.h: "Gradients are untracked tensors on the inner
 * device that carry the strategy's mark"). */
static void test_grad_mark(void **state) {
    (void)state;
    const double v[1] = {2.0};
    const em_checkpointing cs[2] = {EM_CKPT_DISABLED, EM_CKPT_BALANCED};
    for (int k = 0; k < 2; k++) {
        em_tensor *x = param(ad_dev(cs[k]), v, 0), *l = NULL;
        em_grads *g = NULL;
        OK(em_mul(x, x, &l));
        OK(em_backward(l, &g));
        em_tensor *gx = grad_of(g, x);
        assert_non_null(gx);
        CHECK(em_tensor_checkpointing(gx) == cs[k], "the gradient carries the strategy's mark");
        CHECK(!em_tensor_is_tracked(gx), "the gradient is untracked");
        em_tensor_release(gx);
        em_grads_release(g);
        em_tensor_release(l);
        em_tensor_release(x);
    }
    CHECKS_DONE();
}

/* ---- strategies ---- */

static void test_mixed_strategies(void **state) {
    (void)state;
    const double v[2] = {1, 2};
    em_tensor *a = param(disabled_dev(), v, 2), *b = param(balanced_dev(), v, 2);
    /* the message names both strategies, whichever comes first */
    EXPECT_ERR_MSG(EM_ERR_STATE, "em_add", "disabled", em_add(a, b, &o));
    CHECK(strstr(em_last_error(), "balanced") != NULL, "the message names both strategies");
    EXPECT_ERR_MSG(EM_ERR_STATE, "em_mul", "balanced", em_mul(b, a, &o));
    CHECK(strstr(em_last_error(), "disabled") != NULL, "the message names both strategies");
    /* also through a three-input op whose first input is untracked */
    const double s3[1] = {2};
    em_tensor *plain = vec(ref_dev(), s3, 0), *c = NULL;
    OK(em_mul(plain, a, &c)); /* tracked, disabled */
    em_tensor *cond = NULL;
    OK(em_gt(a, a, &cond));
    EXPECT_ERR_MSG(EM_ERR_STATE, "em_where", "disabled", em_where(cond, b, c, &o));
    em_tensor_release(cond);
    em_tensor_release(c);
    em_tensor_release(plain);
    em_tensor_release(a);
    em_tensor_release(b);
    CHECKS_DONE();
}

static void test_promotion(void **state) {
    (void)state;
    const double xv[3] = {1, -2, 3}, yv[3] = {0.5, 4, -1};
    em_device bal = balanced_dev();
    em_tensor *x = param(bal, xv, 3), *y = vec(ref_dev(), yv, 3);
    em_tensor *z = NULL, *z2 = NULL, *l = NULL;
    OK(em_mul(y, x, &z)); /* untracked first */
    CHECK(em_tensor_is_tracked(z), "tracked * untracked is tracked");
    CHECK(em_tensor_checkpointing(z) == EM_CKPT_BALANCED, "with the tracked input's strategy");
    CHECK(em_device_equal(em_tensor_device(z), bal), "on the tracked input's device");
    OK(em_add(z, y, &z2));
    CHECK(em_tensor_is_tracked(z2) && em_tensor_checkpointing(z2) == EM_CKPT_BALANCED,
          "tracked + untracked is tracked");
    OK(em_sum(z2, &l));
    em_grads *g = NULL;
    OK(em_backward(l, &g));
    em_tensor *gx = grad_of(g, x), *gy = SENTINEL;
    expect_vals(gx, yv, 3, "the tracked input's gradient is the untracked one's values");
    OK(em_grads_get(g, y, &gy));
    CHECK(gy == NULL, "no gradient for the untracked input");
    CHECK(!em_tensor_is_tracked(y) && em_device_equal(em_tensor_device(y), ref_dev()),
          "the untracked input itself is unchanged");

    em_tensor_release(gx);
    em_grads_release(g);
    em_tensor_release(l);
    em_tensor_release(z2);
    em_tensor_release(z);
    em_tensor_release(y);
    em_tensor_release(x);
    CHECKS_DONE();
}

static void test_detach(void **state) {
    (void)state;
    const double xv[3] = {2, -1, 0.5};
    em_device bal = balanced_dev();
    em_tensor *x = param(bal, xv, 3), *d = NULL;
    EXPECT_ERR(EM_ERR_ARG, "em_tensor_detach", em_tensor_detach(NULL, &o));
    EXPECT_FAIL(EM_ERR_ARG, "em_tensor_detach", em_tensor_detach(x, NULL));
    OK(em_tensor_detach(x, &d));
    CHECK(!em_tensor_is_tracked(d), "detached: untracked");
    CHECK(!em_tensor_requires_grad(d), "detached: requires no grad");
    CHECK(em_tensor_checkpointing(d) == EM_CKPT_BALANCED, "detached: keeps the mark");
    CHECK(em_device_equal(em_tensor_device(d), ref_dev()), "detached: on the inner device");
    double got[3];
    read_vals(d, got, 3);
    CHECK(got[0] == 2 && got[1] == -1 && got[2] == 0.5, "detached: same values");

    /* mixing it back: a constant of the graph */
    em_tensor *z = NULL, *l = NULL;
    OK(em_mul(x, d, &z));
    CHECK(em_tensor_is_tracked(z) && em_tensor_checkpointing(z) == EM_CKPT_BALANCED,
          "tracked * detached is tracked");
    CHECK(em_device_equal(em_tensor_device(z), bal), "on the autodiff device");
    OK(em_sum(z, &l));
    em_grads *g = NULL;
    OK(em_backward(l, &g));
    em_tensor *gx = grad_of(g, x);
    expect_vals(gx, xv, 3, "d(sum(x * detach(x)))/dx = x");
    em_tensor *gd = SENTINEL;
    OK(em_grads_get(g, d, &gd));
    CHECK(gd == NULL, "no gradient for the detached tensor");

    /* an op on detached tensors alone records nothing and keeps the mark */
    em_tensor *dd = NULL;
    OK(em_add(d, d, &dd));
    CHECK(!em_tensor_is_tracked(dd), "detached + detached is untracked");
    CHECK(em_device_equal(em_tensor_device(dd), ref_dev()), "and on the inner device");

    em_tensor_release(dd);
    em_tensor_release(gx);
    em_grads_release(g);
    em_tensor_release(l);
    em_tensor_release(z);
    em_tensor_release(d);
    em_tensor_release(x);
    CHECKS_DONE();
}

/* An untracked tensor that carries a strategy's mark (what a backward rule computes from
 * saved values, an op on detached tensors) and alone owns its buffer is written in place by
 * a consuming op, as an unmarked one: the mark alone made every such op allocate (a rule's
 * in-place steps then held one full-size temporary more at backward's peak). */
static void test_inplace_on_marked(void **state) {
    (void)state;
    enum { N = 4096 };
    double *v = malloc(N * sizeof *v), *got = malloc(N * sizeof *got);
    assert_non_null(v);
    assert_non_null(got);
    for (int i = 0; i < N; i++) v[i] = 0.25 * (i % 17) - 2;
    em_tensor *x = vec(balanced_dev(), v, N), *d = NULL, *m = NULL, *o = NULL;
    OK(em_tensor_require_grad(x));
    OK(em_tensor_detach(x, &d));
    OK(em_mul(d, d, &m));
    CHECK(!em_tensor_is_tracked(m) && em_tensor_checkpointing(m) == EM_CKPT_BALANCED,
          "an op on a detached tensor: untracked, with the mark");
    CHECK(em_tensor_can_mut(m), "and its own buffer");
    em_memory_stats before, after;
    OK(em_device_memory_reset_peak(ref_dev()));
    OK(em_device_memory(ref_dev(), &before));
    OK(em_add_(m, d, &o));
    OK(em_device_memory(ref_dev(), &after));
    /* (the peak may rise by a few bytes of bookkeeping, never by a buffer of N values) */
    CHECK(after.peak_bytes < before.bytes_in_use + N * sizeof(double) / 2 &&
              after.bytes_in_use == before.bytes_in_use,
          "em_add_ wrote into the consumed tensor's buffer (no new buffer)");
    CHECK(!em_tensor_is_tracked(o) && em_tensor_checkpointing(o) == EM_CKPT_BALANCED,
          "the result keeps the mark");
    read_vals(o, got, N);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += got[i] != v[i] * v[i] + v[i];
    CHECK(bad == 0, "d * d + d");
    em_tensor_release(o);
    em_tensor_release(d);
    em_tensor_release(x);
    free(v);
    free(got);
    CHECKS_DONE();
}

static void test_int_on_autodiff(void **state) {
    (void)state;
    em_device ad = disabled_dev();
    const int64_t iv[3] = {2, 0, 1};
    const int64_t n3 = 3;
    em_tensor *idx = NULL, *oh = NULL, *f = NULL;
    OK(em_tensor_from_data(iv, EM_I64, &n3, 1, ad, &idx));
    CHECK(!em_tensor_is_tracked(idx), "an int tensor on an autodiff device is untracked");
    CHECK(em_device_equal(em_tensor_device(idx), ad), "but reports the autodiff device");
    em_tensor *b = NULL;
    OK(em_gt_scalar(idx, 0.5, &b));
    CHECK(!em_tensor_is_tracked(b) && em_device_equal(em_tensor_device(b), ad),
          "a bool result on an autodiff device: untracked, on the autodiff device");

    OK(em_one_hot(idx, 3, EM_I64, &oh));
    CHECK(!em_tensor_is_tracked(oh), "the one-hot of ints is untracked");
    CHECK(em_device_equal(em_tensor_device(oh), ad), "and on the autodiff device");
    OK(em_cast(oh, EM_F64, &f));
    CHECK(em_tensor_is_tracked(f), "cast to float, it joins the graph");
    CHECK(!em_tensor_requires_grad(f), "as a constant");
    CHECK(em_device_equal(em_tensor_device(f), ad), "on the autodiff device");

    /* used with a parameter: the gradient is the one-hot itself */
    const double wv[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    const int64_t s33[2] = {3, 3};
    em_tensor *w = NULL, *z = NULL, *l = NULL;
    OK(em_tensor_from_data(wv, EM_F64, s33, 2, ad, &w));
    OK(em_tensor_require_grad(w));
    OK(em_mul(w, f, &z));
    OK(em_sum(z, &l));
    em_grads *g = NULL;
    OK(em_backward(l, &g));
    em_tensor *gw = grad_of(g, w);
    const double want[9] = {0, 0, 1, 1, 0, 0, 0, 1, 0};
    expect_vals(gw, want, 9, "d(sum(w * onehot))/dw = onehot");

    em_tensor_release(gw);
    em_grads_release(g);
    em_tensor_release(l);
    em_tensor_release(z);
    em_tensor_release(w);
    em_tensor_release(f);
    em_tensor_release(oh);
    em_tensor_release(b);
    em_tensor_release(idx);
    CHECKS_DONE();
}

/* ---- autodiff devices ---- */

static void test_device_autodiff(void **state) {
    (void)state;
    em_device d, sentinel = {(em_backend)9, 9, false, EM_CKPT_NONE};
    OK(em_device_autodiff(ref_dev(), EM_CKPT_DISABLED, &d));
    CHECK(d.autodiff && d.checkpointing == EM_CKPT_DISABLED && d.backend == EM_BACKEND_REF &&
              d.index == 0,
          "ref wrapped with disabled");
    em_device e = sentinel;
    em_clear_error();
    chk_err(em_device_autodiff(d, EM_CKPT_BALANCED, &e), EM_ERR_STATE, "em_device_autodiff",
            e.backend == sentinel.backend, "wrapping twice", __FILE__, __LINE__);
    chk_err(em_device_autodiff(ref_dev(), EM_CKPT_NONE, &e), EM_ERR_ARG, "em_device_autodiff",
            e.backend == sentinel.backend, "strategy none", __FILE__, __LINE__);
    chk_err(em_device_autodiff(ref_dev(), (em_checkpointing)7, &e), EM_ERR_ARG,
            "em_device_autodiff", e.backend == sentinel.backend, "strategy 7", __FILE__,
            __LINE__);
    chk_err(em_device_autodiff(ref_dev(), EM_CKPT_DISABLED, NULL), EM_ERR_ARG,
            "em_device_autodiff", true, "NULL out", __FILE__, __LINE__);

    /* text forms round-trip */
    static const char *const names[] = {"ref+autodiff:balanced", "ref+autodiff"};
    static const em_checkpointing want[] = {EM_CKPT_BALANCED, EM_CKPT_DISABLED};
    for (int i = 0; i < 2; i++) {
        em_device p;
        char buf[64];
        OK(em_device_parse(names[i], &p));
        CHECK(p.backend == EM_BACKEND_REF && p.index == 0 && p.autodiff &&
                  p.checkpointing == want[i],
              names[i]);
        OK(em_device_name(p, buf, sizeof buf));
        CHECK(strcmp(buf, names[i]) == 0, names[i]);
        em_device q;
        OK(em_device_autodiff(ref_dev(), want[i], &q));
        CHECK(em_device_equal(p, q), "parsed == wrapped");
    }
    em_device b;
    OK(em_device_autodiff(ref_dev(), EM_CKPT_BALANCED, &b));
    CHECK(!em_device_equal(b, d), "the two strategies are different devices");
    CHECK(!em_device_equal(b, ref_dev()), "an autodiff device is not its inner device");
    e = sentinel;
    em_clear_error();
    chk_err(em_device_parse("ref+autodiff:fast", &e), EM_ERR_ARG, "em_device_parse",
            e.backend == sentinel.backend, "parse ref+autodiff:fast", __FILE__, __LINE__);
    CHECKS_DONE();
}

/* ---- gradients through em_to_device ---- */

static void test_to_device(void **state) {
    (void)state;
    const double xv[3] = {1.5, -2, 0.25};
    em_device ad = disabled_dev(), fake_ad;
    OK(em_device_autodiff(fake_dev(), EM_CKPT_DISABLED, &fake_ad));
    em_tensor *x = param(ad, xv, 3), *y = NULL, *z = NULL, *l = NULL;
    OK(em_to_device(x, fake_ad, &y));
    CHECK(em_tensor_is_tracked(y), "moved between autodiff devices: still tracked");
    CHECK(em_device_equal(em_tensor_device(y), fake_ad), "on the target device");
    OK(em_mul(y, y, &z));
    CHECK(em_device_equal(em_tensor_device(z), fake_ad), "ops run on the target device");
    OK(em_sum(z, &l));
    em_grads *g = NULL;
    OK(em_backward(l, &g));
    em_tensor *gx = grad_of(g, x);
    const double want[3] = {3, -4, 0.5};
    expect_vals(gx, want, 3, "d(sum(to_device(x)^2))/dx = 2x");
    if (gx) {
        em_device gd = em_tensor_device(gx);
        CHECK(gd.backend == EM_BACKEND_REF && !gd.autodiff,
              "the gradient comes back on the source's inner device");
    }
    em_tensor_release(gx);
    em_grads_release(g);

    /* and back again (a new forward: the first graph is spent): ref+autodiff ->
     * fake+autodiff -> ref+autodiff */
    em_tensor *y2 = NULL, *back = NULL, *l2 = NULL, *z2 = NULL;
    OK(em_to_device(x, fake_ad, &y2));
    OK(em_to_device(y2, ad, &back));
    CHECK(em_tensor_is_tracked(back) && em_device_equal(em_tensor_device(back), ad),
          "moved back: tracked, on the source device");
    OK(em_mul(back, x, &z2));
    OK(em_sum(z2, &l2));
    OK(em_backward(l2, &g));
    gx = grad_of(g, x);
    expect_vals(gx, want, 3, "d(sum(x * round_trip(x)))/dx = 2x");
    em_tensor_release(gx);
    em_grads_release(g);

    /* to a plain device: refused while it would cut the graph silently (issue 14); a
     * detached tensor or a no-grad scope moves it, untracked */
    em_tensor *p = NULL, *xd = NULL;
    EXPECT_FAIL(EM_ERR_STATE, "em_tensor_detach", em_to_device(x, fake_dev(), &p));
    EXPECT_FAIL(EM_ERR_STATE, "the result of mul", em_to_device(z2, fake_dev(), &p));
    OK(em_tensor_detach(x, &xd));
    OK(em_to_device(xd, fake_dev(), &p));
    CHECK(!em_tensor_is_tracked(p), "a detached tensor moved to a plain device: untracked");
    em_tensor_release(p);
    em_tensor_release(xd);
    bool was = em_set_grad_enabled(false);
    OK(em_to_device(x, fake_dev(), &p));
    em_set_grad_enabled(was);
    CHECK(!em_tensor_is_tracked(p), "moved to a device without autodiff: untracked");
    em_tensor *c = NULL, *cp = NULL; /* a constant of the graph moves freely */
    OK(em_zeros((const int64_t[]){2}, 1, EM_F32, ad, &c));
    OK(em_to_device(c, fake_dev(), &cp));
    em_tensor_release(cp);
    em_tensor_release(c);

    em_tensor_release(p);
    em_tensor_release(l2);
    em_tensor_release(z2);
    em_tensor_release(back);
    em_tensor_release(y2);
    em_tensor_release(l);
    em_tensor_release(z);
    em_tensor_release(y);
    em_tensor_release(x);
    CHECKS_DONE();
}

/* ---- memory statistics ---- */

/* What the core's small-tensor cache may hold: 32 blocks of at most 256 bytes. */
#define TINY_SLACK (32 * 256)

static void test_memory(void **state) {
    (void)state;
    em_memory_stats m;
    memset(&m, 0, sizeof m);
    m.bytes_in_use = m.peak_bytes = 7;
    em_clear_error();
    chk_err(em_device_memory(absent_dev(), &m), EM_ERR_DEVICE, "em_device_memory",
            m.bytes_in_use == 7 && m.peak_bytes == 7, "absent device", __FILE__, __LINE__);
    em_device bad = {(em_backend)(EM_BACKEND_EXTERNAL0 + 9), 0, false, EM_CKPT_NONE};
    chk_err(em_device_memory(bad, &m), EM_ERR_DEVICE, "em_device_memory",
            m.bytes_in_use == 7, "unregistered backend", __FILE__, __LINE__);
    chk_err(em_device_memory(ref_dev(), NULL), EM_ERR_ARG, "em_device_memory", true, "NULL out",
            __FILE__, __LINE__);
    EXPECT_FAIL(EM_ERR_DEVICE, "em_device_memory_reset_peak",
                em_device_memory_reset_peak(absent_dev()));
    EXPECT_FAIL(EM_ERR_DEVICE, "em_device_memory_reset_peak", em_device_memory_reset_peak(bad));
    EXPECT_FAIL(EM_ERR_DEVICE, "em_device_memory_release", em_device_memory_release(absent_dev()));
    OK(em_device_memory_release(ref_dev())); /* ref caches nothing: a no-op */

    em_device ad = balanced_dev();
    em_memory_stats m0, m1, m2, m3, ma;
    OK(em_device_memory(ref_dev(), &m0));
    OK(em_device_memory(ad, &ma));
    CHECK(ma.bytes_in_use == m0.bytes_in_use, "an autodiff device reports its inner device");
    CHECK(m0.peak_bytes >= m0.bytes_in_use, "peak >= in use");

    const int64_t n = 1 << 16; /* 512 KiB of f64: far beyond the core's small-tensor cache */
    em_tensor *big = NULL;
    OK(em_zeros(&n, 1, EM_F64, ad, &big));
    OK(em_device_memory(ad, &m1));
    CHECK(m1.bytes_in_use + TINY_SLACK >= m0.bytes_in_use + (size_t)n * 8,
          "a new tensor counts");
    CHECK(m1.peak_bytes >= m1.bytes_in_use, "peak >= in use");
    em_tensor *sq = NULL;
    OK(em_mul(big, big, &sq)); /* tracked: the tape keeps big (a view), sq is new */
    OK(em_device_memory(ad, &m2));
    CHECK(m2.bytes_in_use + TINY_SLACK >= m1.bytes_in_use + (size_t)n * 8,
          "an op's output counts");
    em_tensor_release(sq);
    em_tensor_release(big);
    OK(em_device_memory(ad, &m3));
    /* (the core's per-thread cache may keep or hand back a few tiny buffers meanwhile) */
    CHECK(m3.bytes_in_use <= m0.bytes_in_use + TINY_SLACK &&
              m3.bytes_in_use + TINY_SLACK >= m0.bytes_in_use,
          "released tensors and their tape are uncounted");
    CHECK(m3.peak_bytes >= m2.bytes_in_use, "the peak remembers");
    OK(em_device_memory_reset_peak(ad));
    OK(em_device_memory(ref_dev(), &m3));
    CHECK(m3.peak_bytes == m3.bytes_in_use, "reset: peak == in use");
    CHECKS_DONE();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_require_grad),    cmocka_unit_test(test_backward_errors),
        cmocka_unit_test(test_grads_get),       cmocka_unit_test(test_grad_mark),
        cmocka_unit_test(test_grads_set),       cmocka_unit_test(test_backward_hooked),
        cmocka_unit_test(test_mixed_strategies), cmocka_unit_test(test_promotion),
        cmocka_unit_test(test_detach),          cmocka_unit_test(test_inplace_on_marked),
        cmocka_unit_test(test_int_on_autodiff),
        cmocka_unit_test(test_device_autodiff), cmocka_unit_test(test_to_device),
        cmocka_unit_test(test_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
