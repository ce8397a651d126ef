/*
 * test_scope.c — tensor scopes (em_scope_begin / em_scope_end / em_scope_keep /
 * em_scope_escape / em_scope_run): what a scope releases and what it must never touch.
 *
 *  - a training loop of a small MLP (nn modules, BatchNorm1d, Identity, AdamW) on
 *    cpu+autodiff and cpu+autodiff:balanced, 50 steps each inside a scope with no release of
 *    any intermediate: the device's bytes in use come back to one value after every step, and
 *    losses and parameters equal, bit for bit, those of the same loop with every release
 *    written out;
 *  - a handle released inside the scope (and its memory reused) is not released again; a
 *    retained one keeps its extra reference; tensors made before the scope are untouched;
 *  - nesting and em_scope_keep, em_scope_escape, em_scope_run, the tape's saved values
 *    surviving the scope of the forward (backward after the scope), gradients from
 *    em_grads_get, in-place results, calls that return their input (em_cast to the same
 *    dtype), a scope left open at thread exit;
 *  - the errors: end without begin, too deep, keep of NULL or of a released handle, a
 *    scope_run whose fn leaves a scope open.
 * Under ASan/LSan (the sanitizer build) a double release or a leak fails the test.
 */
#include "errcheck.h"

#include <pthread.h>

#include "ember/nn.h"

#define OK(call)                                                                             \
    do {                                                                                     \
        em_status s_ = (call);                                                               \
        if (s_ != EM_OK)                                                                     \
            fail_msg("%s:%d: %s: %s: %s", __FILE__, __LINE__, #call, em_status_name(s_),     \
                     em_last_error());                                                       \
    } while (0)

static em_device dev_of(const char *name) {
    em_device d;
    OK(em_device_parse(name, &d));
    return d;
}

static void flush_cache(em_device d);

/* The bytes in use on d's backend, with this thread's block cache emptied of tiny buffers
 * first (flush_cache). */
static size_t in_use(em_device d) {
    flush_cache(d);
    em_memory_stats st;
    OK(em_device_memory(d, &st));
    return st.bytes_in_use;
}

/* Tensors above 256 bytes: a tiny one's buffer may stay allocated in the core's per-thread
 * block cache after its release, which would blur the bytes-in-use checks. */
#define BIG 100

static em_tensor *vec(em_device d, int64_t n, float base) {
    float v[256];
    assert_true(n <= 256);
    for (int64_t i = 0; i < n; i++) v[i] = base + (float)i;
    em_tensor *t = NULL;
    OK(em_tensor_from_data(v, EM_F32, &n, 1, d, &t));
    return t;
}

static float first(const em_tensor *t) {
    float v[256];
    int64_t n = em_tensor_numel(t);
    assert_true(n >= 1 && n <= 256);
    OK(em_tensor_to_data(t, v, (size_t)n * sizeof(float)));
    return v[0];
}

/* Leaves this thread's block cache without tiny buffers (40 big tensors at once take every
 * cached block; their release puts back blocks that keep none), so that bytes in use count
 * live tensors only from here on as long as only big tensors come and go. */
static void flush_cache(em_device d) {
    em_tensor *t[40];
    for (int i = 0; i < 40; i++) t[i] = vec(d, BIG, 0.0f);
    for (int i = 0; i < 40; i++) em_tensor_release(t[i]);
}

/* A failed test may leave its scopes open: the next starts with none. */
static int close_scopes(void **state) {
    (void)state;
    while (em_scope_depth() > 0) em_scope_end();
    return 0;
}

/* ---- the basics ---- */

static void test_releases_results(void **state) {
    (void)state;
    em_device cpu = dev_of("cpu");
    em_tensor *a = vec(cpu, BIG, 1.0f), *b = vec(cpu, BIG, 2.0f); /* before: untouched */
    size_t before = in_use(cpu);
    assert_int_equal(em_scope_depth(), 0);
    OK(em_scope_begin());
    assert_int_equal(em_scope_depth(), 1);
    for (int i = 0; i < 100; i++) {
        em_tensor *c = NULL, *d = NULL, *e = NULL;
        OK(em_add(a, b, &c));
        OK(em_mul(c, a, &d));
        OK(em_exp(d, &e));
        OK(em_zeros((const int64_t[]){3, 50}, 2, EM_F64, cpu, &c));
    }
    assert_true(in_use(cpu) > before);
    OK(em_scope_end());
    assert_int_equal(em_scope_depth(), 0);
    assert_int_equal(in_use(cpu), before);
    assert_float_equal(first(a), 1.0f, 0);
    assert_float_equal(first(b), 2.0f, 0);
    em_tensor_release(a);
    em_tensor_release(b);
}

/* Released inside the scope: never again at its end, even when the handle was reused by a
 * later tensor (tiny tensors recycle their handles: the block cache). Without the entry
 * cleared at the release, the scope's end would release keep_me's handle once for every
 * earlier tensor that had it. */
static void test_release_inside(void **state) {
    (void)state;
    em_device cpu = dev_of("cpu");
    em_tensor *a = vec(cpu, 4, 1.0f), *keep_me = NULL;
    OK(em_scope_begin());
    for (int i = 0; i < 10000; i++) {
        em_tensor *c = NULL;
        OK(em_add(a, a, &c));
        if (i == 5000) keep_me = c; /* the scope's */
        else em_tensor_release(c);  /* its handle is reused by the next em_add */
    }
    em_tensor_retain(keep_me);
    OK(em_scope_end());
    assert_true(em_tensor_can_mut(keep_me)); /* released once by the scope, not more */
    assert_float_equal(first(keep_me), 2.0f, 0);
    em_tensor_release(keep_me);
    /* and with big tensors, the bytes */
    em_tensor *b = vec(cpu, BIG, 1.0f);
    size_t before = in_use(cpu);
    OK(em_scope_begin());
    for (int i = 0; i < 1000; i++) {
        em_tensor *c = NULL, *d = NULL;
        OK(em_add(b, b, &c));
        OK(em_neg(c, &d));
        if (i % 2) em_tensor_release(c);
    }
    OK(em_scope_end());
    assert_int_equal(in_use(cpu), before);
    em_tensor_release(a);
    em_tensor_release(b);
}

static void test_retain_survives(void **state) {
    (void)state;
    em_device cpu = dev_of("cpu");
    em_tensor *a = vec(cpu, BIG, 1.0f), *kept = NULL;
    OK(em_scope_begin());
    OK(em_mul_scalar(a, 3.0, &kept));
    em_tensor_retain(kept); /* one reference the scope does not own */
    OK(em_scope_end());
    assert_true(em_tensor_can_mut(kept)); /* exactly one reference left */
    assert_float_equal(first(kept), 3.0f, 0);
    em_tensor_release(kept);
    em_tensor_release(a);
}

static void test_keep_nested(void **state) {
    (void)state;
    em_device cpu = dev_of("cpu");
    em_tensor *a = vec(cpu, BIG, 1.0f);
    size_t before = in_use(cpu);
    em_tensor *outer_t = NULL, *inner_kept = NULL, *to_caller = NULL;
    OK(em_scope_begin());
    OK(em_add_scalar(a, 1.0, &outer_t));
    OK(em_scope_begin());
    assert_int_equal(em_scope_depth(), 2);
    OK(em_add_scalar(a, 2.0, &inner_kept));
    OK(em_scope_keep(inner_kept));
    OK(em_scope_keep(inner_kept)); /* twice: the same */
    OK(em_scope_keep(outer_t));    /* of the enclosing scope: left there */
    OK(em_scope_keep(a));          /* of no scope: left as it is */
    em_tensor *gone = NULL;
    OK(em_add_scalar(a, 3.0, &gone));
    OK(em_scope_end());
    /* inner_kept now belongs to the outer scope; outer_t is still live */
    assert_float_equal(first(inner_kept), 3.0f, 0);
    assert_float_equal(first(outer_t), 2.0f, 0);
    OK(em_add_scalar(inner_kept, 10.0, &to_caller));
    OK(em_scope_keep(to_caller)); /* from the outermost: the caller's */
    OK(em_scope_end());
    assert_float_equal(first(to_caller), 13.0f, 0);
    assert_true(em_tensor_can_mut(to_caller));
    em_tensor_release(to_caller);
    assert_int_equal(in_use(cpu), before);
    em_tensor_release(a);
}

static void test_escape(void **state) {
    (void)state;
    em_device cpu = dev_of("cpu");
    em_tensor *a = vec(cpu, BIG, 1.0f), *esc = NULL;
    OK(em_scope_begin());
    OK(em_scope_begin());
    OK(em_neg(a, &esc));
    OK(em_scope_escape(esc)); /* leaves both scopes */
    OK(em_scope_end());
    OK(em_scope_end());
    assert_float_equal(first(esc), -1.0f, 0);
    em_tensor_release(esc);
    em_tensor_release(a);
}

/* A call that returns its input returns, inside a scope, a handle of the caller's own; a
 * consumed input reused for the result is the scope's too. */
static void test_returned_inputs(void **state) {
    (void)state;
    em_device cpu = dev_of("cpu");
    em_tensor *a = vec(cpu, BIG, 1.0f), *same = NULL;
    OK(em_cast(a, EM_F32, &same)); /* outside a scope: a itself */
    assert_ptr_equal(same, a);
    em_tensor_release(same);
    size_t before = in_use(cpu);
    em_tensor *b = vec(cpu, BIG, 5.0f); /* made before the scope, consumed inside */
    OK(em_scope_begin());
    OK(em_cast(a, EM_F32, &same));
    assert_ptr_not_equal(same, a);
    assert_float_equal(first(same), 1.0f, 0);
    em_tensor *c = NULL, *d = NULL;
    OK(em_contiguous(a, &c));
    OK(em_to_device(a, cpu, &d));
    em_tensor *r = NULL;
    OK(em_add_scalar_(b, 1.0, &r)); /* in place: r is b's handle, now the scope's */
    assert_float_equal(first(r), 6.0f, 0);
    OK(em_scope_end());
    assert_int_equal(in_use(cpu), before);
    assert_true(em_tensor_can_mut(a)); /* the aliases went, a is whole */
    em_tensor_release(a);
}

/* The forward in a scope, its loss kept, backward after: the tape's saved values were never
 * the scope's. Gradients from em_grads_get in a scope are the scope's; the em_grads set keeps
 * its own. */
static void test_autodiff(void **state) {
    (void)state;
    const char *devs[] = {"cpu+autodiff", "cpu+autodiff:balanced"};
    for (int k = 0; k < 2; k++) {
        em_device ad = dev_of(devs[k]), in = ad;
        in.autodiff = false;
        in.checkpointing = EM_CKPT_NONE;
        em_tensor *w = vec(ad, BIG, 0.25f), *x = vec(in, BIG, -2.0f);
        OK(em_tensor_require_grad(w));
        size_t before = 0;
        /* twice: the first run brings the block cache (the 0-d loss) to its steady state */
        for (int rep = 0; rep < 2; rep++) {
            if (rep) before = in_use(in);
            em_tensor *loss = NULL;
            OK(em_scope_begin());
            {
                em_tensor *h = NULL, *t = NULL, *u = NULL, *v = NULL;
                OK(em_mul(w, x, &h));
                OK(em_tanh(h, &t));
                OK(em_exp(t, &u));
                OK(em_matmul(u, w, &v));
                OK(em_mul(v, v, &loss));
                OK(em_scope_keep(loss));
            }
            OK(em_scope_end());
            em_grads *g = NULL;
            OK(em_backward(loss, &g));
            em_tensor *gw = NULL;
            OK(em_grads_get(g, w, &gw));
            float want = first(gw);
            em_tensor_release(gw);
            OK(em_scope_begin());
            OK(em_grads_get(g, w, &gw));
            OK(em_grads_get(g, w, &gw)); /* twice: two handles, both the scope's */
            assert_float_equal(first(gw), want, 0);
            OK(em_scope_end());
            OK(em_grads_get(g, w, &gw)); /* the set's gradient is still whole */
            assert_float_equal(first(gw), want, 0);
            em_tensor_release(gw);
            em_grads_release(g);
            em_tensor_release(loss);
            /* backward inside a scope: the gradients outlive it in the set */
            OK(em_scope_begin());
            em_tensor *h = NULL, *l2 = NULL;
            OK(em_mul(w, x, &h));
            OK(em_sum(h, &l2));
            OK(em_backward(l2, &g));
            OK(em_scope_end());
            OK(em_grads_get(g, w, &gw));
            assert_float_equal(first(gw), -2.0f, 0);
            em_tensor_release(gw);
            em_grads_release(g);
            if (rep) assert_int_equal(in_use(in), before);
        }
        em_tensor_release(w);
        em_tensor_release(x);
    }
}

/* ---- em_scope_run ---- */

typedef struct run_args {
    const em_tensor *a;
    em_tensor *out;
    bool fail;
} run_args;

static em_status run_fn(void *user) {
    run_args *r = user;
    em_tensor *t = NULL, *u = NULL;
    em_status s = em_exp(r->a, &t);
    if (s == EM_OK) s = em_add(t, r->a, &u);
    if (s == EM_OK) s = em_scope_keep(u);
    if (s == EM_OK) r->out = u;
    if (r->fail) return em_backend_set_error(EM_ERR_ARG, "run_fn: asked to fail");
    return s;
}

static em_status run_unbalanced(void *user) {
    (void)user;
    return em_scope_begin();
}

static void test_scope_run(void **state) {
    (void)state;
    em_device cpu = dev_of("cpu");
    em_tensor *a = vec(cpu, BIG, 0.0f);
    size_t before = in_use(cpu);
    run_args r = {a, NULL, false};
    OK(em_scope_run(run_fn, &r));
    assert_float_equal(first(r.out), 1.0f, 1e-6);
    em_tensor_release(r.out);
    assert_int_equal(in_use(cpu), before);
    r.fail = true;
    r.out = NULL;
    assert_int_equal(em_scope_run(run_fn, &r), EM_ERR_ARG);
    assert_non_null(strstr(em_last_error(), "asked to fail"));
    em_tensor_release(r.out); /* kept before the failure: the caller's */
    assert_int_equal(in_use(cpu), before);
    assert_int_equal(em_scope_run(run_unbalanced, NULL), EM_ERR_STATE);
    assert_non_null(strstr(em_last_error(), "em_scope_run"));
    assert_int_equal(em_scope_depth(), 0);
    assert_int_equal(em_scope_run(NULL, NULL), EM_ERR_ARG);
    em_tensor_release(a);
}

/* ---- errors ---- */

static void test_errors(void **state) {
    (void)state;
    assert_int_equal(em_scope_end(), EM_ERR_STATE);
    assert_non_null(strstr(em_last_error(), "em_scope_end: no scope is open"));
    assert_int_equal(em_scope_keep(NULL), EM_ERR_ARG);
    assert_non_null(strstr(em_last_error(), "em_scope_keep"));
    assert_int_equal(em_scope_escape(NULL), EM_ERR_ARG);
    assert_int_equal(em_tensor_alias(NULL, NULL), EM_ERR_ARG);
    em_device cpu = dev_of("cpu");
#if !defined(__SANITIZE_ADDRESS__) /* under ASan a released handle is freed at once */
    em_tensor *a = vec(cpu, 4, 0.0f);
    em_tensor_release(a);
    assert_int_equal(em_scope_keep(a), EM_ERR_ARG); /* released (still in the cache) */
    assert_non_null(strstr(em_last_error(), "released"));
#else
    (void)cpu;
#endif
    for (int i = 0; i < EM_SCOPE_MAX_DEPTH; i++) OK(em_scope_begin());
    assert_int_equal(em_scope_begin(), EM_ERR_STATE);
    assert_non_null(strstr(em_last_error(), "em_scope_end missing"));
    for (int i = 0; i < EM_SCOPE_MAX_DEPTH; i++) OK(em_scope_end());
    assert_int_equal(em_scope_depth(), 0);
    assert_int_equal(em_scope_end(), EM_ERR_STATE);
}

/* ---- a scope left open when its thread exits ---- */

static void *thread_leaves_open(void *arg) {
    const em_tensor *a = arg;
    if (em_scope_begin() != EM_OK) return (void *)1;
    em_tensor *t = NULL;
    for (int i = 0; i < 50; i++)
        if (em_mul_scalar(a, 2.0, &t) != EM_OK) return (void *)1;
    if (em_scope_begin() != EM_OK) return (void *)1;
    if (em_mul_scalar(a, 2.0, &t) != EM_OK) return (void *)1;
    return NULL; /* two scopes open */
}

static void test_thread_exit(void **state) {
    (void)state;
    em_device cpu = dev_of("cpu");
    em_tensor *a = vec(cpu, 64, 0.0f);
    size_t before = in_use(cpu);
    pthread_t th;
    void *ret = (void *)2;
    assert_int_equal(pthread_create(&th, NULL, thread_leaves_open, a), 0);
    assert_int_equal(pthread_join(th, &ret), 0);
    assert_null(ret);
    assert_int_equal(in_use(cpu), before);
    em_tensor_release(a);
}

/* ---- a training loop: Linear, BatchNorm1d, ReLU, Identity, Linear; AdamW ---- */

#define MLP_N 16
#define MLP_IN 6
#define MLP_HID 12
#define MLP_OUT 3
#define MLP_STEPS 50

typedef struct trainer {
    em_module *model;
    em_params *ps;
    em_optimizer *opt;
    em_tensor *x, *labels;
} trainer;

static void trainer_init(trainer *tr, em_device ad) {
    em_device in = ad;
    in.autodiff = false;
    in.checkpointing = EM_CKPT_NONE;
    em_module_opts o = em_module_opts_default(ad, 7);
    o.dtype = EM_F32;
    em_module *parts[5];
    OK(em_nn_linear(MLP_IN, MLP_HID, true, &o, &parts[0]));
    OK(em_nn_batch_norm1d(MLP_HID, NULL, &o, &parts[1]));
    OK(em_nn_relu(&parts[2]));
    OK(em_nn_identity(&parts[3]));
    OK(em_nn_linear(MLP_HID, MLP_OUT, true, &o, &parts[4]));
    OK(em_nn_sequential(parts, 5, &tr->model));
    OK(em_params_create(&tr->ps));
    OK(em_module_params(tr->model, NULL, tr->ps));
    OK(em_optimizer_adamw(tr->ps, 1e-2, 0.9, 0.999, 1e-8, 0.01, &tr->opt));
    float xv[MLP_N * MLP_IN];
    int64_t lv[MLP_N];
    for (int i = 0; i < MLP_N * MLP_IN; i++) xv[i] = (float)((i * 37 % 17) - 8) / 8.0f;
    for (int i = 0; i < MLP_N; i++) lv[i] = (i * 7) % MLP_OUT;
    OK(em_tensor_from_data(xv, EM_F32, (const int64_t[]){MLP_N, MLP_IN}, 2, in, &tr->x));
    OK(em_tensor_from_data(lv, EM_I64, (const int64_t[]){MLP_N}, 1, in, &tr->labels));
}

static void trainer_free(trainer *tr) {
    em_optimizer_release(tr->opt);
    em_params_release(tr->ps);
    em_module_release(tr->model);
    em_tensor_release(tr->x);
    em_tensor_release(tr->labels);
}

/* One step, every release written out. */
static float step_manual(trainer *tr) {
    em_tensor *y = NULL, *loss = NULL;
    em_grads *g = NULL;
    OK(em_module_forward(tr->model, tr->x, true, &y));
    OK(em_cross_entropy(y, tr->labels, &loss));
    OK(em_backward(loss, &g));
    OK(em_optimizer_step(tr->opt, g, 1.0));
    float l = first(loss);
    em_grads_release(g);
    em_tensor_release(loss);
    em_tensor_release(y);
    return l;
}

/* One step in a scope: no tensor released by hand. */
static float step_scoped(trainer *tr) {
    OK(em_scope_begin());
    em_tensor *y = NULL, *loss = NULL;
    em_grads *g = NULL;
    OK(em_module_forward(tr->model, tr->x, true, &y));
    OK(em_cross_entropy(y, tr->labels, &loss));
    OK(em_backward(loss, &g));
    OK(em_optimizer_step(tr->opt, g, 1.0));
    float l = first(loss);
    em_grads_release(g);
    OK(em_scope_end());
    return l;
}

static void test_train_loop(void **state) {
    (void)state;
    const char *devs[] = {"cpu+autodiff", "cpu+autodiff:balanced"};
    for (int k = 0; k < 2; k++) {
        em_device ad = dev_of(devs[k]), in = ad;
        in.autodiff = false;
        in.checkpointing = EM_CKPT_NONE;
        trainer man, sc;
        trainer_init(&man, ad);
        trainer_init(&sc, ad);
        size_t mem[MLP_STEPS];
        for (int s = 0; s < MLP_STEPS; s++) {
            float lm = step_manual(&man);
            float ls = step_scoped(&sc);
            assert_memory_equal(&lm, &ls, sizeof lm); /* bit for bit */
            mem[s] = in_use(in);
        }
        /* from the second step on (the first makes Adam's moments), memory stands still */
        for (int s = 2; s < MLP_STEPS; s++)
            if (mem[s] != mem[1])
                fail_msg("%s: step %d: %zu bytes in use, step 1: %zu", devs[k], s, mem[s],
                         mem[1]);
        /* the same parameters and running statistics, bit for bit */
        em_params *a = NULL, *b = NULL;
        OK(em_params_create(&a));
        OK(em_params_create(&b));
        OK(em_module_state(man.model, NULL, a));
        OK(em_module_state(sc.model, NULL, b));
        assert_int_equal(em_params_count(a), em_params_count(b));
        for (size_t i = 0; i < em_params_count(a); i++) {
            const em_tensor *ta = em_params_get(a, i), *tb = em_params_get(b, i);
            size_t bytes = (size_t)em_tensor_numel(ta) * em_dtype_size(em_tensor_dtype(ta));
            void *va = malloc(bytes ? bytes : 1), *vb = malloc(bytes ? bytes : 1);
            OK(em_tensor_to_data(ta, va, bytes));
            OK(em_tensor_to_data(tb, vb, bytes));
            assert_memory_equal(va, vb, bytes);
            free(va);
            free(vb);
        }
        em_params_release(a);
        em_params_release(b);
        trainer_free(&man);
        trainer_free(&sc);
    }
}

/* A whole training run in one outer scope, a scope per step inside it: the model and the
 * optimizer made inside the outer scope keep their tensors across both. */
static void test_model_made_in_scope(void **state) {
    (void)state;
    em_device ad = dev_of("cpu+autodiff"), in = ad;
    in.autodiff = false;
    in.checkpointing = EM_CKPT_NONE;
    size_t before = in_use(in);
    trainer ref, tr;
    trainer_init(&ref, ad);
    OK(em_scope_begin());
    trainer_init(&tr, ad); /* x and labels are this scope's, the parameters the model's */
    for (int s = 0; s < 10; s++) {
        float lr_ = step_manual(&ref);
        float ls = step_scoped(&tr);
        assert_memory_equal(&lr_, &ls, sizeof ls);
    }
    OK(em_scope_end());
    /* x and labels are gone with the scope; the model and its state are whole */
    em_tensor *w = em_module_get(tr.model, "0.weight");
    assert_non_null(w);
    assert_true(em_tensor_numel(w) == MLP_IN * MLP_HID);
    em_optimizer_release(tr.opt);
    em_params_release(tr.ps);
    em_module_release(tr.model);
    trainer_free(&ref);
    assert_int_equal(in_use(in), before);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_releases_results, close_scopes),
        cmocka_unit_test_teardown(test_release_inside, close_scopes),
        cmocka_unit_test_teardown(test_retain_survives, close_scopes),
        cmocka_unit_test_teardown(test_keep_nested, close_scopes),
        cmocka_unit_test_teardown(test_escape, close_scopes),
        cmocka_unit_test_teardown(test_returned_inputs, close_scopes),
        cmocka_unit_test_teardown(test_autodiff, close_scopes),
        cmocka_unit_test_teardown(test_scope_run, close_scopes),
        cmocka_unit_test_teardown(test_errors, close_scopes),
        cmocka_unit_test_teardown(test_thread_exit, close_scopes),
        cmocka_unit_test_teardown(test_train_loop, close_scopes),
        cmocka_unit_test_teardown(test_model_made_in_scope, close_scopes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
