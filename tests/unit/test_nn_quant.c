/*
 * test_nn_quant.c — quantized weights in nn.h: em_nn_linear with a quantized weight against
 * the same layer with the dequantized weight (forward close, the gradient of x and of the bias
 * close, none for the weight) for every scheme on every device wrapped for autodiff;
 * em_params_quantize on a small model (which entries, skip, counts, errors that change
 * nothing); optimizers, the set initializers and clipping with quantized parameters; the model
 * saved and loaded back into a freshly built float model (the same bytes, the same outputs).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ember/ember.h"
#include "ember/nn.h"

#define OK(call)                                                                             \
    do {                                                                                     \
        em_status s_ = (call);                                                               \
        if (s_ != EM_OK)                                                                     \
            fail_msg("%s:%d: %s: %s: %s", __FILE__, __LINE__, #call, em_status_name(s_),     \
                     em_last_error());                                                       \
    } while (0)

static const em_quant_scheme schemes[] = {
    {.storage = EM_Q8, .kind = EM_QK_BLOCK, .scale_dtype = EM_F32},
    {.storage = EM_Q8, .kind = EM_QK_BLOCK, .scale_dtype = EM_F16},
    {.storage = EM_Q4, .kind = EM_QK_BLOCK, .scale_dtype = EM_F16},
    {.storage = EM_Q4, .kind = EM_QK_BLOCK_MIN, .scale_dtype = EM_F16},
    {.storage = EM_Q4, .kind = EM_QK_BLOCK_MIN, .scale_dtype = EM_F32},
    {.storage = EM_Q8, .kind = EM_QK_AFFINE},
    {.storage = EM_Q8, .kind = EM_QK_SYMMETRIC},
    {.storage = EM_Q4, .kind = EM_QK_AFFINE},
};
#define NSCHEMES (sizeof schemes / sizeof schemes[0])

/* The devices of em_devices() but capture, each wrapped for autodiff. */
static size_t ad_devices(em_device *list, size_t cap) {
    em_device all[16];
    size_t n = 0, k = 0;
    OK(em_devices(all, 16, &n));
    for (size_t i = 0; i < n && k < cap; i++) {
        if (all[i].autodiff || all[i].backend == EM_BACKEND_CAPTURE) continue;
        OK(em_device_autodiff(all[i], EM_CKPT_DISABLED, &list[k]));
        k++;
    }
    return k;
}

/* max |a - b| and max |b| of two f32 tensors of one shape */
static void diff(const em_tensor *a, const em_tensor *b, double *d, double *mag) {
    int64_t n = em_tensor_numel(a);
    assert_int_equal(n, em_tensor_numel(b));
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    assert_non_null(x);
    assert_non_null(y);
    OK(em_tensor_to_data(a, x, (size_t)n * sizeof *x));
    OK(em_tensor_to_data(b, y, (size_t)n * sizeof *y));
    *d = 0, *mag = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)x[i] - (double)y[i]);
        if (!(e <= *d)) *d = e; /* NaN counts */
        if (fabs((double)y[i]) > *mag) *mag = fabs((double)y[i]);
    }
    free(x), free(y);
}

/* sum(linear(x) * r): the loss whose gradient of x is r W */
static em_status loss_of(em_module *lin, const em_tensor *x, const em_tensor *r, em_tensor **y,
                         em_tensor **loss) {
    em_tensor *p = NULL;
    em_status s = em_module_forward(lin, x, true, y);
    if (s == EM_OK) s = em_mul(*y, r, &p);
    if (s == EM_OK) s = em_sum(p, loss);
    em_tensor_release(p);
    return s;
}

/* A linear layer with a quantized weight against the same layer with the weight dequantized:
 * the forward within the int8 product's error (x's rows are quantized to int8 blocks on the
 * fly), the gradients of x and of the bias as through x dequantize(W)^T, no gradient for W. */
static void test_linear_quantized_weight(void **state) {
    (void)state;
    em_device devs[8];
    size_t nd = ad_devices(devs, 8);
    int failures = 0; /* every device and scheme is tried, then the test fails */
    for (size_t di = 0; di < nd; di++) {
        char dn[64];
        em_device_name(devs[di], dn, sizeof dn);
        for (size_t k = 0; k < NSCHEMES; k++) {
            em_module_opts o = em_module_opts_default(devs[di], 11), o2 = o;
            em_module *lq = NULL, *lf = NULL;
            OK(em_nn_linear(96, 7, true, &o, &lq));
            OK(em_nn_linear(96, 7, true, &o2, &lf)); /* the same initial values */
            em_params *pq = NULL;
            OK(em_params_create(&pq));
            OK(em_module_params(lq, NULL, pq));
            size_t nq = 0;
            OK(em_params_quantize(pq, &schemes[k], NULL, &nq));
            assert_int_equal(nq, 1);
            em_tensor *w = em_module_get(lq, "weight"), *dq = NULL;
            assert_int_equal(em_tensor_kind(w), EM_KIND_QUANTIZED);
            assert_false(em_tensor_requires_grad(w));
            OK(em_dequantize(w, &dq));
            OK(em_module_set(lf, "weight", dq));
            /* x [2, 3, 96] (a batch of sequences), r of y's shape */
            const int64_t xs[3] = {2, 3, 96}, ys[3] = {2, 3, 7};
            em_tensor *x = NULL, *r = NULL, *yq = NULL, *yf = NULL, *lossq = NULL, *lossf = NULL;
            OK(em_rand_uniform(xs, 3, EM_F32, -1, 1, 5, devs[di], &x));
            OK(em_tensor_require_grad(x));
            OK(em_rand_uniform(ys, 3, EM_F32, -1, 1, 6, devs[di], &r));
            OK(loss_of(lq, x, r, &yq, &lossq));
            OK(loss_of(lf, x, r, &yf, &lossf));
            assert_int_equal(em_tensor_dtype(yq), EM_F32);
            assert_int_equal(em_tensor_rank(yq), 3);
            double d = 0, mag = 0;
            diff(yq, yf, &d, &mag);
            if (!(d <= 0.01 * (mag + 1))) {
                print_error("%s scheme %zu: forward differs by %g (|y| up to %g)\n", dn, k, d,
                            mag);
                failures++;
            }
            em_grads *gq = NULL, *gf = NULL;
            OK(em_backward(lossq, &gq));
            OK(em_backward(lossf, &gf));
            em_tensor *gxq = NULL, *gxf = NULL, *gbq = NULL, *gbf = NULL, *gw = NULL;
            OK(em_grads_get(gq, x, &gxq));
            OK(em_grads_get(gf, x, &gxf));
            assert_non_null(gxq);
            assert_non_null(gxf);
            /* g W is itself a product with the quantized weight (em_matmul's rule): with the
             * blocks along in, not W^T's reduction, it is g @ dequantize(W) in f32; a
             * per-tensor W runs the int8 product again, g's rows quantized on the fly */
            const bool block = schemes[k].kind == EM_QK_BLOCK ||
                               schemes[k].kind == EM_QK_BLOCK_MIN;
            diff(gxq, gxf, &d, &mag);
            if (!(d <= (block ? 1e-5 : 1e-2) * (mag + 1))) {
                print_error("%s scheme %zu: grad of x differs by %g (|g| up to %g)\n", dn, k,
                            d, mag);
                failures++;
            }
            OK(em_grads_get(gq, em_module_get(lq, "bias"), &gbq));
            OK(em_grads_get(gf, em_module_get(lf, "bias"), &gbf));
            assert_non_null(gbq);
            diff(gbq, gbf, &d, &mag);
            assert_true(d <= 1e-5 * (mag + 1));
            OK(em_grads_get(gq, w, &gw));
            assert_null(gw);
            em_tensor_release(gxq), em_tensor_release(gxf), em_tensor_release(gbq),
                em_tensor_release(gbf);
            em_grads_release(gq), em_grads_release(gf);
            em_tensor_release(x), em_tensor_release(r), em_tensor_release(yq),
                em_tensor_release(yf), em_tensor_release(lossq), em_tensor_release(lossf);
            em_params_release(pq);
            em_module_release(lq), em_module_release(lf);
        }
    }
    if (failures) fail_msg("%d device / scheme pairs differ", failures);
}

/* A small model: 0 Linear(64, 32), 1 ReLU, 2 Linear(32, 40), 3 LayerNorm(40), 4 Linear(40, 32),
 * 5 ReLU, 6 Linear(32, 5), 7 ReLU, 8 Linear(5, 3). For block kinds: 0, 2 and 6 along in; 4
 * (in 40, out 32) along out; 8 (in 5, out 3) stays float. */
static em_module *small_model(em_device dev, uint64_t seed) {
    em_module_opts o = em_module_opts_default(dev, seed);
    em_module *m[9] = {NULL}, *seq = NULL;
    OK(em_nn_linear(64, 32, true, &o, &m[0]));
    OK(em_nn_relu(&m[1]));
    OK(em_nn_linear(32, 40, true, &o, &m[2]));
    OK(em_nn_layer_norm(40, &o, &m[3]));
    OK(em_nn_linear(40, 32, false, &o, &m[4]));
    OK(em_nn_relu(&m[5]));
    OK(em_nn_linear(32, 5, true, &o, &m[6]));
    OK(em_nn_relu(&m[7]));
    OK(em_nn_linear(5, 3, true, &o, &m[8]));
    OK(em_nn_sequential(m, 9, &seq));
    return seq;
}

static bool is_q(const em_module *m, const char *path) {
    return em_tensor_kind(em_module_get(m, path)) == EM_KIND_QUANTIZED;
}

/* The layout's bytes of the quantized tensor at path (malloc'd), their count in *n. */
static uint8_t *qbytes(const em_module *m, const char *path, size_t *n) {
    const em_tensor *t = em_module_get(m, path);
    em_quant_scheme sc;
    OK(em_tensor_scheme(t, &sc));
    OK(em_quant_nbytes(&sc, em_tensor_shape(t), em_tensor_rank(t), n));
    uint8_t *b = malloc(*n);
    assert_non_null(b);
    OK(em_tensor_to_data(t, b, *n));
    return b;
}

static void f32_of(const em_tensor *t, float *v, size_t n) {
    OK(em_tensor_to_data(t, v, n * sizeof *v));
}

/* em_params_quantize: the 2-d weights whose in is a multiple of 32 for block kinds (every 2-d
 * weight for per-tensor kinds), skip honoured, nothing changed on error; what follows works:
 * forward, training steps of the float parameters (an optimizer made before and one made
 * after), the set initializers, clipping, optimizer state; the state saved and loaded into a
 * freshly built float model; a float file refused by a quantized model. */
static void test_params_quantize(void **state) {
    (void)state;
    em_device ref = {EM_BACKEND_REF, 0, false, EM_CKPT_NONE}, dev;
    OK(em_device_autodiff(ref, EM_CKPT_DISABLED, &dev));
    em_module *m = small_model(dev, 3);
    em_params *p = NULL;
    OK(em_params_create(&p));
    OK(em_module_params(m, NULL, p));
    em_optimizer *opt = NULL; /* made before the quantization: keeps working */
    OK(em_optimizer_adam(p, 1e-2, 0.9, 0.999, 1e-8, 0, &opt));
    /* errors: nothing changes */
    em_quant_scheme bad = {.storage = EM_Q4, .kind = EM_QK_SYMMETRIC};
    size_t n = 99;
    assert_int_equal(em_params_quantize(NULL, &schemes[0], NULL, &n), EM_ERR_ARG);
    assert_int_equal(em_params_quantize(p, NULL, NULL, &n), EM_ERR_ARG);
    assert_int_equal(em_params_quantize(p, &bad, NULL, &n), EM_ERR_DTYPE);
    assert_int_equal(n, 99);
    em_tensor *w0 = em_module_get(m, "0.weight"), *w2 = em_module_get(m, "2.weight");
    em_tensor *saved = NULL, *nanw = NULL;
    OK(em_clone(em_module_get(m, "6.weight"), &saved));
    const int64_t s4[2] = {5, 32};
    float *v = calloc(160, sizeof *v);
    assert_non_null(v);
    v[3] = NAN;
    OK(em_tensor_from_data(v, EM_F32, s4, 2, ref, &nanw));
    free(v);
    OK(em_tensor_assign(em_module_get(m, "6.weight"), nanw));
    em_quant_scheme pt = {.storage = EM_Q8, .kind = EM_QK_SYMMETRIC};
    assert_int_equal(em_params_quantize(p, &pt, NULL, &n), EM_ERR_ARG);
    assert_non_null(strstr(em_last_error(), "6.weight"));
    assert_ptr_equal(em_module_get(m, "0.weight"), w0);
    assert_ptr_equal(em_module_get(m, "2.weight"), w2);
    OK(em_tensor_assign(em_module_get(m, "6.weight"), saved));
    /* skip; block kinds: 0, 2, 6 (in 64, 32, 32) along in, 4 (in 40, out 32) along out, not
     * 8 (in 5, out 3) */
    const char *skip[] = {"0.weight", NULL};
    OK(em_params_quantize(p, &schemes[1], skip, &n));
    assert_int_equal(n, 3);
    assert_false(is_q(m, "0.weight"));
    assert_true(is_q(m, "2.weight"));
    assert_true(is_q(m, "6.weight"));
    OK(em_params_quantize(p, &schemes[1], NULL, &n));
    assert_int_equal(n, 1); /* the others are quantized already */
    assert_true(is_q(m, "0.weight"));
    assert_false(is_q(m, "8.weight"));
    em_quant_scheme sc4;
    OK(em_tensor_scheme(em_module_get(m, "4.weight"), &sc4));
    assert_int_equal(sc4.axis, 0); /* blocks along out */
    assert_int_equal(em_tensor_shape(em_module_get(m, "4.weight"))[0], 32);
    OK(em_tensor_scheme(em_module_get(m, "2.weight"), &sc4));
    assert_int_equal(sc4.axis, 1);
    assert_false(is_q(m, "0.bias"));
    assert_false(is_q(m, "3.weight"));
    assert_int_equal(em_tensor_dtype(em_params_find(p, "0.weight")), EM_Q8);
    /* training steps: the float parameters move, the quantized ones keep their bytes */
    size_t nb0 = 0, nb0b = 0;
    uint8_t *b0 = qbytes(m, "0.weight", &nb0);
    float bias_before[32], bias_after[32];
    f32_of(em_module_get(m, "0.bias"), bias_before, 32);
    em_optimizer *opt2 = NULL; /* made after */
    OK(em_optimizer_sgd(p, 0.1, 0.9, 0, &opt2));
    const int64_t xs[2] = {8, 64};
    em_tensor *x = NULL;
    OK(em_rand_uniform(xs, 2, EM_F32, -1, 1, 9, ref, &x));
    for (int step = 0; step < 2; step++) {
        em_tensor *y = NULL, *loss = NULL, *sq = NULL;
        em_grads *g = NULL;
        double scale = 1;
        OK(em_module_forward(m, x, true, &y));
        OK(em_mul(y, y, &sq));
        OK(em_mean(sq, &loss));
        OK(em_backward(loss, &g));
        OK(em_clip_grad_norm(p, g, 1.0, NULL, &scale));
        OK(em_optimizer_step(opt, g, scale));
        OK(em_optimizer_step(opt2, g, scale));
        em_grads_release(g);
        em_tensor_release(y), em_tensor_release(sq), em_tensor_release(loss);
    }
    f32_of(em_module_get(m, "0.bias"), bias_after, 32);
    assert_true(memcmp(bias_before, bias_after, sizeof bias_before) != 0);
    uint8_t *b0b = qbytes(m, "0.weight", &nb0b);
    assert_int_equal(nb0, nb0b);
    assert_memory_equal(b0, b0b, nb0);
    free(b0b);
    /* the set initializers and the optimizer's state leave the quantized entries alone */
    char path[128], fpath[128], opath[128];
    snprintf(path, sizeof path, "/tmp/ember-test-nn-quant-%d.safetensors", (int)getpid());
    snprintf(fpath, sizeof fpath, "/tmp/ember-test-nn-quant-%d-f.safetensors", (int)getpid());
    snprintf(opath, sizeof opath, "/tmp/ember-test-nn-quant-%d-o.safetensors", (int)getpid());
    OK(em_optimizer_save(opt, opath));
    OK(em_optimizer_load(opt, opath));
    OK(em_init_xavier_uniform(p, 4));
    OK(em_init_normal(p, 0, 0.1, 4));
    b0b = qbytes(m, "0.weight", &nb0b);
    assert_memory_equal(b0, b0b, nb0);
    free(b0b);
    /* saved, and loaded into a freshly built float model: the same bytes, the same outputs */
    OK(em_module_save(m, path));
    em_module *m2 = small_model(dev, 77);
    OK(em_module_load(m2, path));
    assert_true(is_q(m2, "0.weight"));
    assert_true(is_q(m2, "2.weight"));
    assert_true(is_q(m2, "4.weight"));
    assert_true(is_q(m2, "6.weight"));
    assert_false(is_q(m2, "8.weight"));
    OK(em_tensor_scheme(em_module_get(m2, "4.weight"), &sc4));
    assert_int_equal(sc4.axis, 0);
    b0b = qbytes(m2, "0.weight", &nb0b);
    assert_memory_equal(b0, b0b, nb0);
    free(b0b);
    em_tensor *y1 = NULL, *y2 = NULL;
    bool was = em_set_grad_enabled(false);
    OK(em_module_forward(m, x, false, &y1));
    OK(em_module_forward(m2, x, false, &y2));
    em_set_grad_enabled(was);
    float o1[24], o2[24];
    f32_of(y1, o1, 24), f32_of(y2, o2, 24);
    assert_memory_equal(o1, o2, sizeof o1);
    /* loading it again into the quantized model works too; a float file is refused */
    OK(em_module_load(m2, path));
    em_module *m3 = small_model(dev, 5);
    OK(em_module_save(m3, fpath));
    em_status s = em_module_load(m2, fpath);
    assert_int_equal(s, EM_ERR_DTYPE);
    assert_non_null(strstr(em_last_error(), "quantized"));
    remove(path), remove(fpath), remove(opath);
    free(b0);
    em_tensor_release(y1), em_tensor_release(y2), em_tensor_release(x);
    em_optimizer_release(opt), em_optimizer_release(opt2);
    em_params_release(p);
    em_tensor_release(saved), em_tensor_release(nanw);
    em_module_release(m), em_module_release(m2), em_module_release(m3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear_quantized_weight),
        cmocka_unit_test(test_params_quantize),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
