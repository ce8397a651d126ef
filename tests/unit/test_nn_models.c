/*
 * test_nn_models.c — a small transformer and a small ResNet written only with nn.h (the
 * module interface, built-in layers, Sequential, Residual, AdamW, SGD with momentum) train 20
 * steps from the same weights and the same batches as PyTorch, and their losses match
 * PyTorch's (tests/nn/golden_models.txt, written by tests/nn/gen_models.py) every step: within
 * 1e-5 in f32, 1e-11 in f64; then an eval-mode loss under the no-grad scope, and (ResNet) the
 * first BatchNorm's running mean. Parameter names and order are torch's (checked by hash).
 * Weights and batches come from an integer hash both sides compute (see gen_models.py).
 * Devices: ref and cpu (where built), each wrapped for autodiff; the cpu f32 run also with
 * BALANCED checkpointing. Also em_momentum_one_cycle against torch's OneCycleLR.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ember/backend.h" /* em_backend_set_error, for the model class */
#include "ember/ember.h"
#include "ember/nn.h"

/* ---- the golden file ---- */

#define NN_GOLDEN_FILE "golden_models.txt"
#include "nn_golden.h"

#define OK(call) assert_int_equal((call), EM_OK)

/* ---- the shared numbers: gen_models.py's fnv1a, mix, unit, init_value ---- */

static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double unit(uint64_t key, uint64_t j) {
    return (double)(mix(key + j) >> 11) * 0x1p-52 - 1.0;
}

/* sets every parameter of model to gen_models.py's values; checks names and order */
static void set_params(em_module *model, const char *tag, em_dtype dt) {
    em_params *p = NULL;
    OK(em_params_create(&p));
    OK(em_module_params(model, NULL, p));
    char key[64];
    snprintf(key, sizeof key, "%s.names", tag);
    const garr *names = gget(key);
    snprintf(key, sizeof key, "%s.numel", tag);
    const garr *numel = gget(key);
    assert_int_equal(em_params_count(p), names->n);
    for (size_t i = 0; i < em_params_count(p); i++) {
        const char *name = em_params_name(p, i);
        em_tensor *t = em_params_get(p, i);
        if ((double)(fnv1a(name) & 0xffffffffu) != names->v[i])
            fail_msg("%s: parameter %zu is '%s', not torch's name there", tag, i, name);
        int64_t n = em_tensor_numel(t);
        assert_int_equal(n, (int64_t)numel->v[i]);
        int rank = em_tensor_rank(t);
        const int64_t *shape = em_tensor_shape(t);
        int64_t fan = 1;
        for (int d = 1; d < rank; d++) fan *= shape[d];
        size_t len = strlen(name);
        bool weight = len >= 6 && strcmp(name + len - 6, "weight") == 0;
        double *v = malloc((size_t)n * sizeof *v);
        uint64_t h = fnv1a(name);
        for (int64_t j = 0; j < n; j++) {
            double u = unit(h, (uint64_t)j);
            v[j] = rank >= 2 ? u / sqrt((double)fan) : weight ? 1.0 + 0.1 * u : 0.1 * u;
        }
        em_tensor *src = NULL, *cast = NULL;
        OK(em_tensor_from_data(v, EM_F64, shape, rank, em_device_inner(em_tensor_device(t)),
                               &src));
        OK(em_cast(src, dt, &cast)); /* one rounding, as torch's .to(float32) */
        OK(em_tensor_assign(t, cast));
        em_tensor_release(src), em_tensor_release(cast);
        free(v);
    }
    em_params_release(p);
}

/* ---- the transformer: vocab 20, d 32, 4 heads, 2 pre-LN blocks (MLP 64), T 16, batch 4 ---- */

enum { V = 20, D = 32, H = 4, HID = 64, T = 16, B = 4 };

/* a user's module: logits [B, T, V] of tokens [B, T]: tok(x) + pos(0..T-1), the blocks,
 * ln_f, head (torch's GPT of gen_models.py) */
static em_status gpt_forward(em_module *self, const em_tensor *x, bool training,
                             em_tensor **y) {
    if (em_tensor_rank(x) != 2 || em_tensor_shape(x)[1] > T)
        return em_backend_set_error(EM_ERR_SHAPE, "x must be [B, T <= %d]", T);
    em_tensor *e = NULL, *pos = NULL, *pe = NULL, *h = NULL, *h2 = NULL, *h3 = NULL;
    em_status s = em_module_forward(em_module_child(self, "tok"), x, training, &e);
    if (s == EM_OK)
        s = em_arange(0, (double)em_tensor_shape(x)[1], 1, EM_I64, em_tensor_device(x), &pos);
    if (s == EM_OK) s = em_module_forward(em_module_child(self, "pos"), pos, training, &pe);
    if (s == EM_OK) s = em_add(e, pe, &h);
    if (s == EM_OK) s = em_module_forward(em_module_child(self, "blocks"), h, training, &h2);
    if (s == EM_OK) s = em_module_forward(em_module_child(self, "ln_f"), h2, training, &h3);
    if (s == EM_OK) s = em_module_forward(em_module_child(self, "head"), h3, training, y);
    em_tensor_release(e), em_tensor_release(pos), em_tensor_release(pe);
    em_tensor_release(h), em_tensor_release(h2), em_tensor_release(h3);
    return s;
}

static const em_module_class gpt_class = {"TinyGPT", gpt_forward, NULL, NULL};

static em_module *build_gpt(em_device dev, em_dtype dt) {
    em_module_opts o = em_module_opts_default(dev, 7);
    o.dtype = dt;
    em_module *m = NULL, *c = NULL, *blocks[2] = {NULL};
    OK(em_module_create(&gpt_class, NULL, &m));
    OK(em_nn_embedding(V, D, &o, &c));
    OK(em_module_add_child(m, "tok", c));
    OK(em_nn_embedding(T, D, &o, &c));
    OK(em_module_add_child(m, "pos", c));
    for (int i = 0; i < 2; i++) OK(em_nn_transformer_block(D, H, HID, 0, true, &o, &blocks[i]));
    OK(em_nn_sequential(blocks, 2, &c));
    OK(em_module_add_child(m, "blocks", c));
    OK(em_nn_layer_norm(D, &o, &c));
    OK(em_module_add_child(m, "ln_f", c));
    OK(em_nn_linear(D, V, true, &o, &c));
    OK(em_module_add_child(m, "head", c));
    return m;
}

static void gpt_batch(int step, em_device dev, em_tensor **x, em_tensor **y) {
    int64_t xs[B * T], ys[B * T];
    for (int b = 0; b < B; b++)
        for (int t = 0; t <= T; t++) {
            int64_t v = (int64_t)(mix((uint64_t)step * 1000003u + (uint64_t)b * 1009u +
                                      (uint64_t)t) % V);
            if (t < T) xs[b * T + t] = v;
            if (t > 0) ys[b * T + t - 1] = v;
        }
    int64_t xshape[2] = {B, T}, yshape[1] = {B * T};
    OK(em_tensor_from_data(xs, EM_I64, xshape, 2, dev, x));
    OK(em_tensor_from_data(ys, EM_I64, yshape, 1, dev, y));
}

static em_status gpt_loss(em_module *m, const em_tensor *x, const em_tensor *y, bool training,
                          em_tensor **loss) {
    em_tensor *logits = NULL, *flat = NULL;
    int64_t shape[2] = {B * T, V};
    em_status s = em_module_forward(m, x, training, &logits);
    if (s == EM_OK) s = em_reshape(logits, shape, 2, &flat);
    if (s == EM_OK) s = em_loss_cross_entropy(flat, y, loss);
    em_tensor_release(logits), em_tensor_release(flat);
    return s;
}

/* ---- the ResNet: 12x12 inputs, 8 then 16 channels, 10 classes, batch 8 ---- */

enum { NB = 8, HW = 12, C1 = 8, C2 = 16 };

static em_module *res_block(int64_t ch, em_module_opts *o) {
    em_module *p[5] = {NULL}, *body = NULL, *r = NULL;
    OK(em_nn_conv2d(ch, ch, 3, 1, 1, false, o, &p[0]));
    OK(em_nn_batch_norm2d(ch, NULL, o, &p[1]));
    OK(em_nn_relu(&p[2]));
    OK(em_nn_conv2d(ch, ch, 3, 1, 1, false, o, &p[3]));
    OK(em_nn_batch_norm2d(ch, NULL, o, &p[4]));
    OK(em_nn_sequential(p, 5, &body));
    OK(em_nn_residual(body, &r));
    return r;
}

static em_module *build_resnet(em_device dev, em_dtype dt) {
    em_module_opts o = em_module_opts_default(dev, 7);
    o.dtype = dt;
    em_module *m[13] = {NULL}, *seq = NULL;
    OK(em_nn_conv2d(1, C1, 3, 1, 1, false, &o, &m[0]));
    OK(em_nn_batch_norm2d(C1, NULL, &o, &m[1]));
    OK(em_nn_relu(&m[2]));
    m[3] = res_block(C1, &o);
    OK(em_nn_relu(&m[4]));
    OK(em_nn_conv2d(C1, C2, 3, 2, 1, false, &o, &m[5]));
    OK(em_nn_batch_norm2d(C2, NULL, &o, &m[6]));
    OK(em_nn_relu(&m[7]));
    m[8] = res_block(C2, &o);
    OK(em_nn_relu(&m[9]));
    OK(em_nn_adaptive_avg_pool2d(1, 1, &m[10]));
    OK(em_nn_flatten(&m[11]));
    OK(em_nn_linear(C2, 10, true, &o, &m[12]));
    OK(em_nn_sequential(m, 13, &seq));
    return seq;
}

static void res_batch(int step, em_device dev, em_dtype dt, em_tensor **x, em_tensor **y) {
    double xs[NB * HW * HW];
    int64_t ys[NB];
    uint64_t key = mix(0x5e5u + (uint64_t)step);
    for (int j = 0; j < NB * HW * HW; j++) xs[j] = unit(key, (uint64_t)j);
    for (int n = 0; n < NB; n++) ys[n] = (int64_t)(mix((uint64_t)step * 7919u + (uint64_t)n) % 10);
    int64_t xshape[4] = {NB, 1, HW, HW}, yshape[1] = {NB};
    em_tensor *x64 = NULL;
    OK(em_tensor_from_data(xs, EM_F64, xshape, 4, dev, &x64));
    OK(em_cast(x64, dt, x));
    em_tensor_release(x64);
    OK(em_tensor_from_data(ys, EM_I64, yshape, 1, dev, y));
}

static em_status res_loss(em_module *m, const em_tensor *x, const em_tensor *y, bool training,
                          em_tensor **loss) {
    em_tensor *logits = NULL;
    em_status s = em_module_forward(m, x, training, &logits);
    if (s == EM_OK) s = em_loss_cross_entropy(logits, y, loss);
    em_tensor_release(logits);
    return s;
}

/* ---- 20 steps against torch ---- */

static void check(const char *what, double got, double want, double tol) {
    if (!(fabs(got - want) <= tol))
        fail_msg("%s: %.12g, torch %.12g (|diff| %.3g > %.3g)", what, got, want,
                 fabs(got - want), tol);
}

static void train20(bool gpt, em_device inner, em_checkpointing ck, em_dtype dt) {
    em_device dev;
    OK(em_device_autodiff(inner, ck, &dev));
    const char *tag = gpt ? "gpt" : "resnet", *dts = dt == EM_F32 ? "f32" : "f64";
    double tol = dt == EM_F32 ? 1e-5 : 1e-11;
    em_module *m = gpt ? build_gpt(dev, dt) : build_resnet(dev, dt);
    set_params(m, tag, dt);
    em_params *p = NULL;
    OK(em_params_create(&p));
    OK(em_module_params(m, NULL, p));
    em_optimizer *opt = NULL;
    if (gpt) OK(em_optimizer_adamw(p, 1e-2, 0.9, 0.999, 1e-8, 0.01, &opt));
    else OK(em_optimizer_sgd(p, 0.05, 0.9, 0, &opt));
    char key[64], what[96];
    snprintf(key, sizeof key, "%s.%s.loss", tag, dts);
    const garr *want = gget(key);
    assert_int_equal(want->n, 20);
    double maxdiff = 0;
    for (int step = 0; step <= 20; step++) {
        em_tensor *x = NULL, *y = NULL, *loss = NULL;
        if (gpt) gpt_batch(step, inner, &x, &y);
        else res_batch(step, inner, dt, &x, &y);
        double lv = 0;
        if (step < 20) {
            OK(gpt ? gpt_loss(m, x, y, true, &loss) : res_loss(m, x, y, true, &loss));
            OK(em_tensor_item(loss, &lv));
            em_grads *g = NULL;
            OK(em_backward(loss, &g));
            OK(em_optimizer_step(opt, g, 1.0));
            em_grads_release(g);
            snprintf(what, sizeof what, "%s step %d", key, step);
            check(what, lv, want->v[step], tol);
            if (fabs(lv - want->v[step]) > maxdiff) maxdiff = fabs(lv - want->v[step]);
        } else { /* eval on batch 20 in the no-grad scope: nothing recorded */
            bool was = em_set_grad_enabled(false);
            em_status s = gpt ? gpt_loss(m, x, y, false, &loss) : res_loss(m, x, y, false, &loss);
            em_set_grad_enabled(was);
            OK(s);
            assert_false(em_tensor_is_tracked(loss));
            OK(em_tensor_item(loss, &lv));
            snprintf(key, sizeof key, "%s.%s.eval", tag, dts);
            check(key, lv, gget(key)->v[0], tol);
        }
        em_tensor_release(x), em_tensor_release(y), em_tensor_release(loss);
    }
    if (!gpt) { /* the first BatchNorm's running mean */
        snprintf(key, sizeof key, "resnet.%s.running_mean", dts);
        const garr *rm = gget(key);
        em_tensor *t = em_module_get(m, "1.running_mean"), *t64 = NULL;
        assert_non_null(t);
        double v[C1];
        assert_int_equal(rm->n, C1);
        OK(em_cast(t, EM_F64, &t64));
        OK(em_tensor_to_data(t64, v, sizeof v));
        em_tensor_release(t64);
        for (int i = 0; i < C1; i++) check(key, v[i], rm->v[i], tol * 1e-2);
    }
    char name[64];
    em_device_name(dev, name, sizeof name);
    print_message("%s %s on %s: 20 losses within %.2g of torch's\n", tag, dts, name, maxdiff);
    em_optimizer_release(opt);
    em_params_release(p);
    em_module_release(m);
}

static bool have(const char *name, em_device *d) { return em_device_parse(name, d) == EM_OK; }

static void run_all(bool gpt) {
    em_device d;
    const char *devs[] = {"ref", "cpu"};
    for (size_t i = 0; i < 2; i++) {
        if (!have(devs[i], &d)) continue;
        train20(gpt, d, EM_CKPT_DISABLED, EM_F32);
        train20(gpt, d, EM_CKPT_DISABLED, EM_F64);
    }
    if (have("cpu", &d)) train20(gpt, d, EM_CKPT_BALANCED, EM_F32);
}

static void test_transformer_20_steps(void **state) {
    (void)state;
    run_all(true);
}

static void test_resnet_20_steps(void **state) {
    (void)state;
    run_all(false);
}

/* em_momentum_one_cycle against torch's OneCycleLR (SGD's momentum, Adam's beta1) */
static void test_momentum_one_cycle(void **state) {
    (void)state;
    const garr *a = gget("momentum.onecycle"), *b = gget("momentum.onecycle2");
    assert_int_equal(a->n, 20);
    assert_int_equal(b->n, 17);
    for (int i = 0; i < 20; i++)
        check("momentum.onecycle", em_momentum_one_cycle(i, 20, 0.3, 0.85, 0.95), a->v[i],
              1e-12);
    for (int i = 0; i < 17; i++)
        check("momentum.onecycle2", em_momentum_one_cycle(i, 17, 0.25, 0.8, 0.9), b->v[i],
              1e-12);
    /* out of range: NaN */
    assert_true(isnan(em_momentum_one_cycle(21, 20, 0.3, 0.85, 0.95)));
    assert_true(isnan(em_momentum_one_cycle(-1, 20, 0.3, 0.85, 0.95)));
    assert_true(isnan(em_momentum_one_cycle(0, 0, 0.3, 0.85, 0.95)));
    assert_true(isnan(em_momentum_one_cycle(0, 20, 1.5, 0.85, 0.95)));
    assert_true(isnan(em_momentum_one_cycle(0, 20, 0.3, -0.1, 0.95)));
    assert_true(isnan(em_momentum_one_cycle(0, 20, 0.3, 0.85, 1.5)));
    assert_true(isnan(em_momentum_one_cycle(0, 20, 0.3, NAN, 0.95)));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_momentum_one_cycle),
        cmocka_unit_test(test_transformer_20_steps),
        cmocka_unit_test(test_resnet_20_steps),
    };
    return cmocka_run_group_tests(tests, load_golden, free_golden);
}
