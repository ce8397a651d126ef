/*
 * test_nn.c — include/ember/nn.h against PyTorch: each layer's forward and the gradients of
 * its input and parameters, the losses, clipping by norm, and 3 steps of SGD (momentum,
 * weight decay), Adam and AdamW on a tiny model, all in f64 against tests/nn/golden_nn.txt
 * (written by tests/nn/gen_nn.py) on every device of em_devices() wrapped for autodiff
 * (DISABLED and BALANCED). Parameters are set from the golden file with em_tensor_assign, so
 * the init does not matter. Also: em_tensor_assign's contract, dropout, init bounds, a small
 * training run on a separable 2-class problem on every device, and bad inputs; optimizer
 * state saved and loaded (resuming bit for bit), parameter groups and the schedules against
 * torch, gradient accumulation (em_grads_add), normal / truncated normal / constant init.
 */
#include "errcheck.h"

#include <unistd.h>

#include "ember/nn.h"

#define TOL 1e-9

/* fails unless the last error message contains `part` */
#define expect_error_contains(part)                                                          \
    do {                                                                                     \
        if (!strstr(em_last_error(), (part)))                                                \
            fail_msg("message \"%s\" lacks \"%s\"", em_last_error(), (part));             \
    } while (0)

/* ---- the golden file ---- */

#define NN_GOLDEN_FILE "golden_nn.txt"
#include "nn_golden.h"

static const garr *ggetf(const char *fmt, const char *a, const char *b) {
    char name[128];
    snprintf(name, sizeof name, fmt, a, b);
    return gget(name);
}

/* ---- devices ---- */

static size_t all_devices(em_device *list, size_t cap) {
    size_t n = 0;
    assert_int_equal(em_devices(list, cap, &n), EM_OK);
    return n < cap ? n : cap;
}

static em_device ad_of(em_device inner, em_checkpointing c) {
    em_device d;
    assert_int_equal(em_device_autodiff(inner, c, &d), EM_OK);
    return d;
}

static em_device inner_of(em_device d) {
    d.autodiff = false;
    d.checkpointing = EM_CKPT_NONE;
    return d;
}

/* ---- helpers ---- */

static em_tensor *from(const garr *a, const int64_t *shape, int rank, em_device dev) {
    em_tensor *t = NULL;
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= shape[i];
    assert_int_equal(n, a->n);
    assert_int_equal(em_tensor_from_data(a->v, EM_F64, shape, rank, dev, &t), EM_OK);
    return t;
}

static void expect_close(const em_tensor *t, const garr *a, double tol, const char *what) {
    assert_non_null(t);
    assert_int_equal(em_tensor_numel(t), a->n);
    em_tensor *d = NULL;
    assert_int_equal(em_cast(t, EM_F64, &d), EM_OK);
    double *v = malloc((size_t)a->n * sizeof(double) + 1);
    assert_int_equal(em_tensor_to_data(d, v, (size_t)a->n * sizeof(double)), EM_OK);
    em_tensor_release(d);
    for (int64_t i = 0; i < a->n; i++) {
        double err = fabs(v[i] - a->v[i]);
        if (!(err <= tol * (1 + fabs(a->v[i])))) {
            print_error("%s (%s)[%lld]: got %.17g, want %.17g\n", what, a->name, (long long)i,
                        v[i], a->v[i]);
            free(v);
            fail();
        }
    }
    free(v);
}

/* Sets the module's parameter `pname` from golden `<case>.<pname>`. */
static void set_param(em_params *ps, const char *cname, const char *pname) {
    em_tensor *p = em_params_find(ps, pname);
    assert_non_null(p);
    const garr *a = ggetf("%s.%s", cname, pname);
    em_tensor *v = from(a, em_tensor_shape(p), em_tensor_rank(p), inner_of(em_tensor_device(p)));
    assert_int_equal(em_tensor_assign(p, v), EM_OK);
    em_tensor_release(v);
    assert_true(em_tensor_requires_grad(p));
}

static em_module_opts f64_opts(em_device dev) {
    em_module_opts o = em_module_opts_default(dev, 7);
    o.dtype = EM_F64;
    return o;
}

/* One layer case on dev: loss = sum(m(x) * r), y, dx and the parameters' gradients. */
static void run_layer(const char *cname, em_module *m, const int64_t *xs, int xr,
                      const char *const *pnames, int np, em_device dev) {
    em_params *ps = NULL;
    assert_int_equal(em_params_create(&ps), EM_OK);
    assert_int_equal(em_module_params(m, NULL, ps), EM_OK);
    assert_int_equal(em_params_count(ps), (size_t)np);
    for (int i = 0; i < np; i++) set_param(ps, cname, pnames[i]);
    em_tensor *x = from(ggetf("%s.%s", cname, "x"), xs, xr, dev);
    assert_int_equal(em_tensor_require_grad(x), EM_OK);
    em_tensor *y = NULL, *r = NULL, *yr = NULL, *loss = NULL;
    assert_int_equal(em_module_forward(m, x, true, &y), EM_OK);
    expect_close(y, ggetf("%s.%s", cname, "y"), TOL, cname);
    r = from(ggetf("%s.%s", cname, "r"), em_tensor_shape(y), em_tensor_rank(y), inner_of(dev));
    assert_int_equal(em_mul(y, r, &yr), EM_OK);
    assert_int_equal(em_sum(yr, &loss), EM_OK);
    em_grads *g = NULL;
    assert_int_equal(em_backward(loss, &g), EM_OK);
    em_tensor *gx = NULL;
    assert_int_equal(em_grads_get(g, x, &gx), EM_OK);
    expect_close(gx, ggetf("%s.%s", cname, "dx"), TOL, cname);
    em_tensor_release(gx);
    for (int i = 0; i < np; i++) {
        em_tensor *gp = NULL;
        assert_int_equal(em_grads_get(g, em_params_find(ps, pnames[i]), &gp), EM_OK);
        expect_close(gp, ggetf("%s.d%s", cname, pnames[i]), TOL, cname);
        /* a parameter's gradient is dense (as PyTorch's): the optimizer's ops run on it */
        if (!em_tensor_is_contiguous(gp))
            fail_msg("%s: the gradient of %s is not contiguous", cname, pnames[i]);
        em_tensor_release(gp);
    }
    em_grads_release(g);
    em_tensor_release(loss);
    em_tensor_release(yr);
    em_tensor_release(r);
    em_tensor_release(y);
    em_tensor_release(x);
    em_params_release(ps);
}

static void test_layers(void **state) {
    (void)state;
    em_device list[16];
    size_t nd = all_devices(list, 16);
    static const char *const wb[2] = {"weight", "bias"};
    for (size_t di = 0; di < nd; di++)
        for (int c = 0; c < 2; c++) {
            em_device dev = ad_of(list[di], c ? EM_CKPT_BALANCED : EM_CKPT_DISABLED);
            em_module_opts o = f64_opts(dev);
            em_module *m;
            assert_int_equal(em_nn_linear(4, 5, true, &o, &m), EM_OK);
            run_layer("linear", m, (const int64_t[]){3, 4}, 2, wb, 2, dev);
            em_module_release(m);
            assert_int_equal(em_nn_linear(4, 5, false, &o, &m), EM_OK);
            run_layer("linear_nobias", m, (const int64_t[]){2, 3, 4}, 3, wb, 1, dev);
            em_module_release(m);
            assert_int_equal(em_nn_conv2d(3, 4, 3, 2, 1, true, &o, &m), EM_OK);
            run_layer("conv", m, (const int64_t[]){2, 3, 7, 7}, 4, wb, 2, dev);
            em_module_release(m);
            assert_int_equal(em_nn_max_pool2d(2, 2, &m), EM_OK);
            run_layer("pool", m, (const int64_t[]){2, 3, 6, 6}, 4, NULL, 0, dev);
            em_module_release(m);
            assert_int_equal(em_nn_flatten(&m), EM_OK);
            run_layer("flatten", m, (const int64_t[]){2, 3, 2, 2}, 4, NULL, 0, dev);
            em_module_release(m);
            assert_int_equal(em_nn_layer_norm(6, &o, &m), EM_OK);
            run_layer("ln", m, (const int64_t[]){4, 6}, 2, wb, 2, dev);
            em_module_release(m);
            assert_int_equal(em_nn_relu(&m), EM_OK);
            run_layer("relu", m, (const int64_t[]){3, 5}, 2, NULL, 0, dev);
            em_module_release(m);
            assert_int_equal(em_nn_gelu(&m), EM_OK);
            run_layer("gelu", m, (const int64_t[]){3, 5}, 2, NULL, 0, dev);
            em_module_release(m);
        }
}

/* The layers written on the module interface: Conv1d, AvgPool2d (padding counted),
 * AdaptiveAvgPool2d, a Residual around a Sequential (parameters named through two levels),
 * Embedding (its weight's gradient). */
static void test_more_layers(void **state) {
    (void)state;
    em_device list[16];
    size_t nd = all_devices(list, 16);
    static const char *const wb[2] = {"weight", "bias"};
    static const char *const body[2] = {"body.0.weight", "body.0.bias"};
    for (size_t di = 0; di < nd; di++)
        for (int c = 0; c < 2; c++) {
            em_device dev = ad_of(list[di], c ? EM_CKPT_BALANCED : EM_CKPT_DISABLED);
            em_module_opts o = f64_opts(dev);
            em_module *m, *parts[2];
            assert_int_equal(em_nn_conv1d(3, 4, 3, 2, 1, true, &o, &m), EM_OK);
            run_layer("conv1d", m, (const int64_t[]){2, 3, 9}, 3, wb, 2, dev);
            em_module_release(m);
            assert_int_equal(em_nn_avg_pool2d(3, 2, 1, &m), EM_OK);
            run_layer("avgpool", m, (const int64_t[]){2, 3, 7, 7}, 4, NULL, 0, dev);
            em_module_release(m);
            assert_int_equal(em_nn_adaptive_avg_pool2d(2, 3, &m), EM_OK);
            run_layer("adaptive", m, (const int64_t[]){2, 3, 5, 7}, 4, NULL, 0, dev);
            em_module_release(m);
            assert_int_equal(em_nn_linear(4, 4, true, &o, &parts[0]), EM_OK);
            assert_int_equal(em_nn_gelu(&parts[1]), EM_OK);
            em_module *seq = NULL;
            assert_int_equal(em_nn_sequential(parts, 2, &seq), EM_OK);
            assert_int_equal(em_nn_residual(seq, &m), EM_OK);
            run_layer("residual", m, (const int64_t[]){3, 4}, 2, body, 2, dev);
            em_module_release(m);

            assert_int_equal(em_nn_embedding(7, 3, &o, &m), EM_OK);
            em_params *ps = NULL;
            assert_int_equal(em_params_create(&ps), EM_OK);
            assert_int_equal(em_module_params(m, NULL, ps), EM_OK);
            assert_int_equal(em_params_count(ps), 1);
            set_param(ps, "emb", "weight");
            const garr *ia = gget("emb.idx");
            int64_t iv[6];
            for (int i = 0; i < 6; i++) iv[i] = (int64_t)ia->v[i];
            em_tensor *idx = NULL, *y = NULL, *r = NULL, *yr = NULL, *loss = NULL, *gw = NULL;
            assert_int_equal(em_tensor_from_data(iv, EM_I64, (const int64_t[]){2, 3}, 2,
                                                 inner_of(dev), &idx), EM_OK);
            assert_int_equal(em_module_forward(m, idx, true, &y), EM_OK);
            expect_close(y, gget("emb.y"), TOL, "emb");
            r = from(gget("emb.r"), em_tensor_shape(y), 3, inner_of(dev));
            assert_int_equal(em_mul(y, r, &yr), EM_OK);
            assert_int_equal(em_sum(yr, &loss), EM_OK);
            em_grads *g = NULL;
            assert_int_equal(em_backward(loss, &g), EM_OK);
            assert_int_equal(em_grads_get(g, em_params_get(ps, 0), &gw), EM_OK);
            expect_close(gw, gget("emb.dweight"), TOL, "emb");
            em_tensor_release(gw);
            em_grads_release(g);
            em_tensor_release(loss);
            em_tensor_release(yr);
            em_tensor_release(r);
            em_tensor_release(y);
            em_tensor_release(idx);
            em_params_release(ps);
            em_module_release(m);
        }
}

static void expect_names(em_params *ps, const char *const *names, size_t n);

/* BatchNorm1d/2d (the running statistics after a training forward, then an eval forward
 * with them), GroupNorm, RMSNorm against PyTorch. */
static void test_norm_layers(void **state) {
    (void)state;
    em_device list[16];
    size_t nd = all_devices(list, 16);
    static const char *const wb[2] = {"weight", "bias"};
    for (size_t di = 0; di < nd; di++)
        for (int c = 0; c < 2; c++) {
            em_device dev = ad_of(list[di], c ? EM_CKPT_BALANCED : EM_CKPT_DISABLED);
            em_module_opts o = f64_opts(dev);
            static const struct {
                const char *name;
                int dims, rank;
                int64_t shape[4];
                double momentum;
            } bns[3] = {{"bn2", 2, 4, {4, 3, 5, 5}, 0.2},
                        {"bn1", 1, 2, {6, 4, 0, 0}, 0.1},
                        {"bn1l", 1, 3, {3, 4, 5, 0}, 0.1}};
            for (int k = 0; k < 3; k++) {
                em_nn_batch_norm_opts bo = em_nn_batch_norm_opts_default();
                bo.momentum = bns[k].momentum;
                em_module *m = NULL;
                int64_t C = bns[k].shape[1];
                assert_int_equal(bns[k].dims == 2 ? em_nn_batch_norm2d(C, &bo, &o, &m)
                                                  : em_nn_batch_norm1d(C, &bo, &o, &m),
                                 EM_OK);
                run_layer(bns[k].name, m, bns[k].shape, bns[k].rank, wb, 2, dev);
                expect_close(em_module_get(m, "running_mean"), ggetf("%s.%s", bns[k].name, "rm"),
                             TOL, bns[k].name);
                expect_close(em_module_get(m, "running_var"), ggetf("%s.%s", bns[k].name, "rv"),
                             TOL, bns[k].name);
                double nbt = 0;
                assert_int_equal(em_tensor_item(em_module_get(m, "num_batches_tracked"), &nbt),
                                 EM_OK);
                assert_true(nbt == 1);
                em_tensor *x2 = from(ggetf("%s.%s", bns[k].name, "x2"), bns[k].shape,
                                     bns[k].rank, dev), *y2 = NULL;
                assert_int_equal(em_module_forward(m, x2, false, &y2), EM_OK);
                expect_close(y2, ggetf("%s.%s", bns[k].name, "y2"), TOL, bns[k].name);
                em_params *bs = NULL;
                assert_int_equal(em_params_create(&bs), EM_OK);
                assert_int_equal(em_module_buffers(m, NULL, bs), EM_OK);
                expect_names(bs, (const char *const[]){"running_mean", "running_var",
                                                       "num_batches_tracked"}, 3);
                em_params_release(bs);
                em_tensor_release(y2);
                em_tensor_release(x2);
                em_module_release(m);
            }
            em_module *m = NULL;
            assert_int_equal(em_nn_group_norm(2, 6, 1e-5, true, &o, &m), EM_OK);
            run_layer("gn", m, (const int64_t[]){3, 6, 4, 2}, 4, wb, 2, dev);
            em_module_release(m);
            assert_int_equal(em_nn_rms_norm(5, 1e-6, true, &o, &m), EM_OK);
            run_layer("rms", m, (const int64_t[]){3, 2, 5}, 3, wb, 1, dev);
            em_module_release(m);
        }
    /* errors name the layer and its configuration */
    em_device ref;
    assert_int_equal(em_device_parse("ref", &ref), EM_OK);
    em_module_opts o = em_module_opts_default(ref, 1);
    em_module *m = NULL;
    assert_int_equal(em_nn_batch_norm2d(3, NULL, &o, &m), EM_OK);
    em_tensor *x = NULL, *y = NULL;
    assert_int_equal(em_zeros((const int64_t[]){2, 4, 3, 3}, 4, EM_F32, ref, &x), EM_OK);
    assert_int_equal(em_module_forward(m, x, true, &y), EM_ERR_SHAPE);
    expect_error_contains("BatchNorm2d(3, eps 1e-05, momentum 0.1): the input must be");
    em_tensor_release(x);
    em_module_release(m);
    assert_int_equal(em_nn_group_norm(4, 6, 1e-5, true, &o, &m), EM_ERR_ARG);
    em_nn_batch_norm_opts bad = em_nn_batch_norm_opts_default();
    bad.momentum = 2;
    assert_int_equal(em_nn_batch_norm1d(3, &bad, &o, &m), EM_ERR_ARG);
    assert_int_equal(em_nn_rms_norm(0, 1e-6, true, &o, &m), EM_ERR_ARG);
}

/* MultiheadAttention against torch's: plain, and causal with a key padding mask; the
 * transformer block's structure and names. */
static void test_attention_layers(void **state) {
    (void)state;
    em_device list[16];
    size_t nd = all_devices(list, 16);
    static const char *const pn[4] = {"in_proj_weight", "in_proj_bias", "out_proj.weight",
                                      "out_proj.bias"};
    for (size_t di = 0; di < nd; di++)
        for (int c = 0; c < 2; c++) {
            em_device dev = ad_of(list[di], c ? EM_CKPT_BALANCED : EM_CKPT_DISABLED);
            em_module_opts o = f64_opts(dev);
            em_module *m = NULL;
            assert_int_equal(em_nn_multihead_attention(8, 2, true, 0.0, false, &o, &m), EM_OK);
            run_layer("mha", m, (const int64_t[]){2, 5, 8}, 3, pn, 4, dev);
            em_module_release(m);
            /* causal, with padding: through em_nn_mha_forward */
            assert_int_equal(em_nn_multihead_attention(8, 2, true, 0.0, true, &o, &m), EM_OK);
            em_params *ps = NULL;
            assert_int_equal(em_params_create(&ps), EM_OK);
            assert_int_equal(em_module_params(m, NULL, ps), EM_OK);
            for (int i = 0; i < 4; i++) set_param(ps, "mhac", pn[i]);
            em_tensor *x = from(gget("mhac.x"), (const int64_t[]){2, 5, 8}, 3, dev), *kp = NULL;
            assert_int_equal(em_tensor_require_grad(x), EM_OK);
            bool pad[10] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1};
            assert_int_equal(em_tensor_from_data(pad, EM_BOOL, (const int64_t[]){2, 5}, 2,
                                                 inner_of(dev), &kp), EM_OK);
            em_tensor *y = NULL, *r = NULL, *yr = NULL, *loss = NULL;
            assert_int_equal(em_nn_mha_forward(m, x, kp, true, &y), EM_OK);
            expect_close(y, gget("mhac.y"), TOL, "mhac");
            r = from(gget("mhac.r"), em_tensor_shape(y), 3, inner_of(dev));
            assert_int_equal(em_mul(y, r, &yr), EM_OK);
            assert_int_equal(em_sum(yr, &loss), EM_OK);
            em_grads *g = NULL;
            assert_int_equal(em_backward(loss, &g), EM_OK);
            em_tensor *gx = NULL;
            assert_int_equal(em_grads_get(g, x, &gx), EM_OK);
            expect_close(gx, gget("mhac.dx"), TOL, "mhac");
            em_tensor_release(gx);
            for (int i = 0; i < 4; i++) {
                em_tensor *gp = NULL;
                assert_int_equal(em_grads_get(g, em_params_find(ps, pn[i]), &gp), EM_OK);
                expect_close(gp, ggetf("%s.d%s", "mhac", pn[i]), TOL, "mhac");
                em_tensor_release(gp);
            }
            em_grads_release(g);
            em_tensor_release(loss), em_tensor_release(yr), em_tensor_release(r);
            em_tensor_release(y), em_tensor_release(kp), em_tensor_release(x);
            em_params_release(ps);
            em_module_release(m);
        }
    em_device ref;
    assert_int_equal(em_device_parse("ref+autodiff", &ref), EM_OK);
    em_module_opts o = em_module_opts_default(ref, 3);
    em_module *blk = NULL;
    assert_int_equal(em_nn_transformer_block(8, 2, 32, 0.0, true, &o, &blk), EM_OK);
    em_params *ps = NULL;
    assert_int_equal(em_params_create(&ps), EM_OK);
    assert_int_equal(em_module_params(blk, NULL, ps), EM_OK);
    expect_names(ps, (const char *const[]){"ln1.weight", "ln1.bias", "attn.in_proj_weight",
                                           "attn.in_proj_bias", "attn.out_proj.weight",
                                           "attn.out_proj.bias", "ln2.weight", "ln2.bias",
                                           "mlp.0.weight", "mlp.0.bias", "mlp.2.weight",
                                           "mlp.2.bias"}, 12);
    em_tensor *x = NULL, *y = NULL;
    assert_int_equal(em_rand_normal((const int64_t[]){2, 5, 8}, 3, EM_F32, 0, 1, 5, ref, &x),
                     EM_OK);
    assert_int_equal(em_module_forward(blk, x, true, &y), EM_OK);
    assert_int_equal(em_tensor_rank(y), 3);
    em_tensor *bad = NULL;
    assert_int_equal(em_rand_normal((const int64_t[]){2, 5, 6}, 3, EM_F32, 0, 1, 5, ref, &bad),
                     EM_OK);
    em_tensor_release(y);
    y = NULL;
    assert_int_equal(em_module_forward(blk, bad, true, &y), EM_ERR_SHAPE);
    expect_error_contains("TransformerBlock > LayerNorm(8, eps 1e-05)");
    em_module *mm = NULL;
    assert_int_equal(em_nn_multihead_attention(8, 3, true, 0, false, &o, &mm), EM_ERR_ARG);
    em_tensor_release(bad), em_tensor_release(x);
    em_params_release(ps);
    em_module_release(blk);
}

/* ---- a user's module: y = scale * inner(x) + offset, offset a buffer ---- */

typedef struct scaled_data {
    double scale;
    int *released; /* counts calls of the class's release */
} scaled_data;

static em_status scaled_forward(em_module *self, const em_tensor *x, bool training,
                                em_tensor **y) {
    const scaled_data *d = em_module_data(self);
    em_tensor *h = NULL, *k = NULL;
    em_status s = em_module_forward(em_module_child(self, "inner"), x, training, &h);
    if (s == EM_OK) s = em_mul_scalar_(h, d->scale, &k);
    if (s == EM_OK) s = em_add_(k, em_module_get(self, "offset"), y);
    return s;
}

static void scaled_describe(const em_module *self, char *buf, size_t cap) {
    snprintf(buf, cap, "scale %g", ((const scaled_data *)em_module_data(self))->scale);
}

static void scaled_release(void *data) {
    scaled_data *d = data;
    ++*d->released;
    free(d);
}

static const em_module_class scaled_class = {"Scaled", scaled_forward, scaled_describe,
                                             scaled_release};

static em_module *make_scaled(em_device dev, uint64_t seed, int64_t in_features, double scale,
                              int *released) {
    em_module_opts o = em_module_opts_default(dev, seed);
    em_module *inner = NULL, *m = NULL;
    assert_int_equal(em_nn_linear(in_features, 2, true, &o, &inner), EM_OK);
    scaled_data *d = malloc(sizeof *d);
    d->scale = scale;
    d->released = released;
    assert_int_equal(em_module_create(&scaled_class, d, &m), EM_OK);
    assert_int_equal(em_module_add_child(m, "inner", inner), EM_OK);
    em_tensor *off = NULL;
    em_device in = inner_of(dev);
    assert_int_equal(em_full((const int64_t[]){2}, 1, 0.25 * (double)seed, EM_F32, in, &off),
                     EM_OK);
    assert_int_equal(em_module_add_buffer(m, "offset", off), EM_OK);
    return m;
}

static void expect_names(em_params *ps, const char *const *names, size_t n) {
    assert_int_equal(em_params_count(ps), n);
    for (size_t i = 0; i < n; i++) assert_string_equal(em_params_name(ps, i), names[i]);
}

static void test_module_interface(void **state) {
    (void)state;
    em_device dev;
    assert_int_equal(em_device_parse("cpu+autodiff", &dev), EM_OK);
    int released = 0;
    em_module *parts[3];
    parts[0] = make_scaled(dev, 1, 3, 2.0, &released);
    assert_int_equal(em_nn_relu(&parts[1]), EM_OK);
    parts[2] = make_scaled(dev, 2, 2, -1.0, &released);
    em_module *model = NULL;
    assert_int_equal(em_nn_sequential(parts, 3, &model), EM_OK);
    assert_string_equal(em_module_type(model), "Sequential");
    char desc[128];
    em_module_describe(em_module_child(model, "0"), desc, sizeof desc);
    assert_string_equal(desc, "Scaled(scale 2)");
    em_module_describe(em_module_child(model, "0.inner"), desc, sizeof desc);
    assert_string_equal(desc, "Linear(in 3, out 2, bias)");

    /* names: parameters, buffers, state */
    em_params *ps = NULL, *bs = NULL, *st = NULL;
    assert_int_equal(em_params_create(&ps), EM_OK);
    assert_int_equal(em_params_create(&bs), EM_OK);
    assert_int_equal(em_params_create(&st), EM_OK);
    assert_int_equal(em_module_params(model, "net", ps), EM_OK);
    assert_int_equal(em_module_buffers(model, NULL, bs), EM_OK);
    assert_int_equal(em_module_state(model, NULL, st), EM_OK);
    expect_names(ps, (const char *const[]){"net.0.inner.weight", "net.0.inner.bias",
                                           "net.2.inner.weight", "net.2.inner.bias"}, 4);
    expect_names(bs, (const char *const[]){"0.offset", "2.offset"}, 2);
    expect_names(st, (const char *const[]){"0.offset", "0.inner.weight", "0.inner.bias",
                                           "2.offset", "2.inner.weight", "2.inner.bias"}, 6);
    assert_ptr_equal(em_module_get(model, "2.inner.bias"), em_params_get(ps, 3));
    assert_true(em_module_is_param(model, "0.inner.weight"));
    assert_false(em_module_is_param(model, "0.offset"));
    assert_non_null(em_module_get(model, "0.offset"));
    assert_null(em_module_get(model, "0.inner.nothing"));
    assert_null(em_module_get(model, "5.inner.weight"));
    assert_null(em_module_child(model, "0.inner.weight"));
    assert_true(em_tensor_requires_grad(em_params_get(ps, 0)));

    /* forward = the same ops by hand; gradients reach the user's module's parameters */
    float xv[6] = {0.5f, -1, 2, 0.25f, 1.5f, -0.75f};
    em_device in = inner_of(dev);
    em_tensor *x = NULL, *y = NULL, *want = NULL, *loss = NULL;
    assert_int_equal(em_tensor_from_data(xv, EM_F32, (const int64_t[]){2, 3}, 2, in, &x), EM_OK);
    assert_int_equal(em_module_forward(model, x, true, &y), EM_OK);
    {
        em_tensor *h = x, *t = NULL;
        em_tensor_retain(h);
        for (int k = 0; k < 2; k++) {
            const char *wn = k ? "2.inner.weight" : "0.inner.weight";
            const char *bn = k ? "2.inner.bias" : "0.inner.bias";
            em_tensor *w = NULL, *b = NULL, *wt = NULL;
            assert_int_equal(em_tensor_detach(em_module_get(model, wn), &w), EM_OK);
            assert_int_equal(em_tensor_detach(em_module_get(model, bn), &b), EM_OK);
            assert_int_equal(em_transpose(w, 0, 1, &wt), EM_OK);
            assert_int_equal(em_matmul(h, wt, &t), EM_OK);
            em_tensor_release(h);
            assert_int_equal(em_add_(t, b, &h), EM_OK);
            assert_int_equal(em_mul_scalar_(h, k ? -1.0 : 2.0, &t), EM_OK);
            assert_int_equal(em_add_scalar_(t, k ? 0.5 : 0.25, &h), EM_OK);
            if (!k) {
                assert_int_equal(em_relu(h, &t), EM_OK);
                em_tensor_release(h);
                h = t;
            }
            em_tensor_release(w), em_tensor_release(b), em_tensor_release(wt);
        }
        want = h;
    }
    float got[4], exp_[4];
    assert_int_equal(em_tensor_to_data(y, got, sizeof got), EM_OK);
    assert_int_equal(em_tensor_to_data(want, exp_, sizeof exp_), EM_OK);
    for (int i = 0; i < 4; i++) assert_float_equal(got[i], exp_[i], 1e-6);
    assert_int_equal(em_sum(y, &loss), EM_OK);
    em_grads *g = NULL;
    assert_int_equal(em_backward(loss, &g), EM_OK);
    for (size_t i = 0; i < 4; i++) {
        em_tensor *gp = NULL;
        assert_int_equal(em_grads_get(g, em_params_get(ps, i), &gp), EM_OK);
        em_tensor_release(gp);
    }
    em_grads_release(g);
    em_tensor_release(loss);

    /* save, load into a model drawn from other seeds: the same outputs */
    char path[512];
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/ember_test_module_XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(em_module_save(model, path), EM_OK);
    em_module *p2[3];
    p2[0] = make_scaled(dev, 5, 3, 2.0, &released);
    assert_int_equal(em_nn_relu(&p2[1]), EM_OK);
    p2[2] = make_scaled(dev, 6, 2, -1.0, &released);
    em_module *model2 = NULL;
    assert_int_equal(em_nn_sequential(p2, 3, &model2), EM_OK);
    em_tensor *y2 = NULL;
    assert_int_equal(em_module_forward(model2, x, false, &y2), EM_OK);
    assert_int_equal(em_tensor_to_data(y2, got, sizeof got), EM_OK);
    assert_true(fabsf(got[0] - exp_[0]) > 1e-4f || fabsf(got[1] - exp_[1]) > 1e-4f);
    em_tensor_release(y2);
    em_tensor *w2 = em_module_get(model2, "0.inner.weight");
    assert_int_equal(em_module_load(model2, path), EM_OK);
    assert_ptr_equal(em_module_get(model2, "0.inner.weight"), w2); /* in place */
    assert_true(em_tensor_requires_grad(w2));
    assert_int_equal(em_module_forward(model2, x, false, &y2), EM_OK);
    assert_int_equal(em_tensor_to_data(y2, got, sizeof got), EM_OK);
    for (int i = 0; i < 4; i++) assert_float_equal(got[i], exp_[i], 0);
    em_tensor_release(y2);

    /* a file that does not fit: errors, and nothing changes */
    em_module *lin = NULL;
    em_module_opts o = em_module_opts_default(dev, 9);
    assert_int_equal(em_nn_linear(3, 2, true, &o, &lin), EM_OK);
    assert_int_equal(em_module_load(lin, path), EM_ERR_IO); /* 6 tensors, not 2 */
    expect_error_contains("holds 6 tensors");
    em_module *lin4 = NULL;
    assert_int_equal(em_nn_linear(3, 4, true, &o, &lin4), EM_OK);
    assert_int_equal(em_module_save(lin4, path), EM_OK);
    float before[6], after[6];
    assert_int_equal(em_tensor_to_data(em_module_get(lin, "weight"), before, sizeof before),
                     EM_OK);
    assert_int_equal(em_module_load(lin, path), EM_ERR_SHAPE);
    expect_error_contains("'weight'");
    assert_int_equal(em_tensor_to_data(em_module_get(lin, "weight"), after, sizeof after), EM_OK);
    assert_memory_equal(before, after, sizeof before);
    assert_int_equal(em_module_load(lin, "/nonexistent/dir/file.safetensors"), EM_ERR_IO);
    em_module_release(lin4);
    unlink(path);

    /* errors name the modules, outermost first */
    em_module *two[2];
    assert_int_equal(em_nn_linear(3, 4, true, &o, &two[0]), EM_OK);
    assert_int_equal(em_nn_linear(5, 2, true, &o, &two[1]), EM_OK);
    em_module *bad = NULL;
    assert_int_equal(em_nn_sequential(two, 2, &bad), EM_OK);
    em_tensor *yb = NULL;
    assert_int_equal(em_module_forward(bad, x, true, &yb), EM_ERR_SHAPE);
    assert_null(yb);
    expect_error_contains("Sequential(2 modules) > Linear(in 5, out 2, bias): the input's dim 1 "
                          "must be 5");
    expect_error_contains("got [2, 4]");
    em_module_release(bad);

    /* the rules of names and ownership (ASan: nothing leaks, nothing is freed twice) */
    em_tensor *t = NULL;
    assert_int_equal(em_zeros((const int64_t[]){2}, 1, EM_F32, in, &t), EM_OK);
    assert_int_equal(em_module_add_param(lin, "a.b", t), EM_ERR_ARG); /* consumed */
    expect_error_contains("'.'");
    assert_int_equal(em_zeros((const int64_t[]){2}, 1, EM_F32, in, &t), EM_OK);
    assert_int_equal(em_module_add_buffer(lin, "weight", t), EM_ERR_ARG);
    expect_error_contains("already has a parameter named 'weight'");
    assert_int_equal(em_zeros((const int64_t[]){2}, 1, EM_F32, in, &t), EM_OK);
    assert_int_equal(em_module_add_param(lin, "", t), EM_ERR_ARG);
    assert_int_equal(em_module_add_param(lin, "x", NULL), EM_ERR_ARG);
    assert_int_equal(em_module_add_child(lin, "self", lin), EM_ERR_ARG); /* not consumed */
    expect_error_contains("contain itself");
    em_module *relu = NULL;
    assert_int_equal(em_nn_relu(&relu), EM_OK);
    assert_int_equal(em_module_add_child(lin, "bias", relu), EM_ERR_ARG); /* consumed */
    em_module *noop = NULL;
    static const em_module_class nameless = {NULL, scaled_forward, NULL, NULL};
    static const em_module_class noforward = {"X", NULL, NULL, NULL};
    assert_int_equal(em_module_create(&nameless, NULL, &noop), EM_ERR_ARG);
    assert_int_equal(em_module_create(&noforward, NULL, &noop), EM_ERR_ARG);
    assert_null(noop);
    assert_null(em_module_data(NULL));
    assert_null(em_module_type(NULL));
    em_module_describe(NULL, desc, sizeof desc);
    assert_string_equal(desc, "");
    em_module_release(lin);

    /* a module listed twice in a Sequential: an error, and it is released once */
    em_module *twice[2];
    assert_int_equal(em_nn_relu(&twice[0]), EM_OK);
    twice[1] = twice[0];
    em_module *seq2 = NULL;
    assert_int_equal(em_nn_sequential(twice, 2, &seq2), EM_ERR_ARG);

    /* weight tying: a parameter of two modules is listed once, saved under both names */
    em_module *tied = NULL, *emb = NULL, *head = NULL;
    static const em_module_class holder = {"Holder", scaled_forward, NULL, NULL};
    assert_int_equal(em_module_create(&holder, NULL, &tied), EM_OK);
    assert_int_equal(em_nn_embedding(5, 3, &o, &emb), EM_OK);
    assert_int_equal(em_nn_linear(3, 5, false, &o, &head), EM_OK);
    em_tensor *ew = em_module_get(emb, "weight");
    em_tensor_retain(ew);
    assert_int_equal(em_module_set(head, "weight", ew), EM_OK);
    assert_ptr_equal(em_module_get(head, "weight"), ew);
    assert_int_equal(em_module_add_child(tied, "emb", emb), EM_OK);
    assert_int_equal(em_module_add_child(tied, "head", head), EM_OK);
    em_params *tp = NULL, *ts = NULL;
    assert_int_equal(em_params_create(&tp), EM_OK);
    assert_int_equal(em_params_create(&ts), EM_OK);
    assert_int_equal(em_module_params(tied, NULL, tp), EM_OK);
    assert_int_equal(em_module_state(tied, NULL, ts), EM_OK);
    expect_names(tp, (const char *const[]){"emb.weight"}, 1);
    expect_names(ts, (const char *const[]){"emb.weight", "head.weight"}, 2);
    assert_int_equal(em_zeros((const int64_t[]){2}, 1, EM_F32, in, &t), EM_OK);
    assert_int_equal(em_module_set(tied, "head.nothing", t), EM_ERR_ARG);
    em_params_release(tp);
    em_params_release(ts);
    em_module_release(tied);
    em_module_release(model2);
    assert_int_equal(released, 2); /* model2's two Scaled */

    /* two layers from one opts differ; a copy of the opts taken before rebuilds the first */
    em_module_opts so = em_module_opts_default(in, 42), copy = so;
    em_module *l[3];
    assert_int_equal(em_nn_linear(4, 4, true, &so, &l[0]), EM_OK);
    assert_true(so.seed != copy.seed);
    assert_int_equal(em_nn_linear(4, 4, true, &so, &l[1]), EM_OK);
    assert_int_equal(em_nn_linear(4, 4, true, &copy, &l[2]), EM_OK);
    float w0[16], w1[16], w3[16];
    assert_int_equal(em_tensor_to_data(em_module_get(l[0], "weight"), w0, sizeof w0), EM_OK);
    assert_int_equal(em_tensor_to_data(em_module_get(l[1], "weight"), w1, sizeof w1), EM_OK);
    assert_int_equal(em_tensor_to_data(em_module_get(l[2], "weight"), w3, sizeof w3), EM_OK);
    assert_true(memcmp(w0, w1, sizeof w0) != 0);
    assert_memory_equal(w0, w3, sizeof w0);
    for (int i = 0; i < 3; i++) em_module_release(l[i]);

    em_tensor_release(want);
    em_tensor_release(y);
    em_tensor_release(x);
    em_params_release(ps);
    em_params_release(bs);
    em_params_release(st);
    em_module_release(model);
    assert_int_equal(released, 4);
}

/* A no-grad scope on every autodiff device: an eval pass records nothing (the bytes in use
 * grow by the output's alone, where a recorded pass keeps its saved activations), its result
 * is untracked, and it equals the inner device's output bit for bit. */
static void test_no_grad(void **state) {
    (void)state;
    em_device list[16];
    size_t nd = all_devices(list, 16);
    assert_true(em_is_grad_enabled());
    for (size_t di = 0; di < nd; di++) {
        em_device inner = list[di];
        em_device dev = ad_of(inner, EM_CKPT_DISABLED);
        assert_int_equal(em_device_inner(dev).backend, inner.backend);
        assert_false(em_device_inner(dev).autodiff);
        em_module *m[4], *model = NULL, *plain = NULL;
        for (int k = 0; k < 2; k++) {
            em_module_opts o = em_module_opts_default(k ? inner : dev, 3);
            em_module *mm[4];
            assert_int_equal(em_nn_linear(64, 256, true, &o, &mm[0]), EM_OK);
            assert_int_equal(em_nn_gelu(&mm[1]), EM_OK);
            assert_int_equal(em_nn_layer_norm(256, &o, &mm[2]), EM_OK);
            o.seed = 4;
            assert_int_equal(em_nn_linear(256, 32, true, &o, &mm[3]), EM_OK);
            assert_int_equal(em_nn_sequential(mm, 4, k ? &plain : &model), EM_OK);
            if (!k) memcpy(m, mm, sizeof m);
        }
        em_tensor *x = NULL, *y = NULL, *yp = NULL;
        assert_int_equal(em_rand_normal((const int64_t[]){128, 64}, 2, EM_F32, 0, 1, 11, inner,
                                        &x), EM_OK);
        em_memory_stats before, after;
        assert_int_equal(em_device_memory(dev, &before), EM_OK);
        assert_true(em_set_grad_enabled(false)); /* was on */
        assert_false(em_is_grad_enabled());
        assert_int_equal(em_module_forward(model, x, false, &y), EM_OK);
        assert_false(em_set_grad_enabled(true));
        assert_int_equal(em_device_memory(dev, &after), EM_OK);
        assert_false(em_tensor_is_tracked(y));
        assert_true(em_tensor_device(y).autodiff);
        size_t ybytes = 128 * 32 * sizeof(float);
        /* em_device_memory counts what tensors hold (the tiny-buffer cache handed back) */
        if (after.bytes_in_use - before.bytes_in_use != ybytes)
            fail_msg("%s: a no-grad forward kept %zu bytes, its output is %zu",
                     em_backend_name(inner.backend), after.bytes_in_use - before.bytes_in_use,
                     ybytes);
        /* recording keeps more: the check above can fail */
        em_tensor *yr = NULL;
        assert_int_equal(em_module_forward(model, x, false, &yr), EM_OK);
        assert_true(em_tensor_is_tracked(yr));
        em_memory_stats rec;
        assert_int_equal(em_device_memory(dev, &rec), EM_OK);
        assert_true(rec.bytes_in_use - after.bytes_in_use > 2 * ybytes + 4096);
        em_tensor_release(yr);
        /* the same as the inner device's, bit for bit */
        assert_int_equal(em_module_forward(plain, x, false, &yp), EM_OK);
        em_params *a = NULL, *b = NULL;
        assert_int_equal(em_params_create(&a), EM_OK);
        assert_int_equal(em_params_create(&b), EM_OK);
        assert_int_equal(em_module_params(model, NULL, a), EM_OK);
        assert_int_equal(em_module_params(plain, NULL, b), EM_OK);
        for (size_t i = 0; i < em_params_count(a); i++)
            assert_int_equal(em_tensor_assign(em_params_get(b, i), em_params_get(a, i)), EM_OK);
        em_tensor_release(yp);
        assert_int_equal(em_module_forward(plain, x, false, &yp), EM_OK);
        float *u = malloc(ybytes), *v = malloc(ybytes);
        assert_int_equal(em_tensor_to_data(y, u, ybytes), EM_OK);
        assert_int_equal(em_tensor_to_data(yp, v, ybytes), EM_OK);
        assert_memory_equal(u, v, ybytes);
        free(u), free(v);
        /* made in the scope: untracked; require_grad makes it a leaf */
        em_tensor *c = NULL;
        em_set_grad_enabled(false);
        assert_int_equal(em_zeros((const int64_t[]){3}, 1, EM_F32, dev, &c), EM_OK);
        em_set_grad_enabled(true);
        assert_false(em_tensor_is_tracked(c));
        assert_int_equal(em_tensor_require_grad(c), EM_OK);
        assert_true(em_tensor_requires_grad(c));
        em_tensor_release(c);
        /* a loss made from a no-grad result reaches no parameter */
        em_tensor *s = NULL;
        em_grads *g = NULL;
        assert_int_equal(em_sum(y, &s), EM_OK); /* recording again, but y is a constant */
        em_status bs = em_backward(s, &g);
        if (bs == EM_OK) {
            em_tensor *gw = NULL;
            assert_int_equal(em_grads_get(g, em_params_get(a, 0), &gw), EM_OK);
            assert_null(gw);
            em_grads_release(g);
        }
        em_tensor_release(s);
        em_params_release(a), em_params_release(b);
        em_tensor_release(y), em_tensor_release(yp), em_tensor_release(x);
        em_module_release(model), em_module_release(plain);
        (void)m;
    }
}

static em_tensor *labels(const garr *a, em_device dev) {
    int64_t *v = malloc((size_t)a->n * sizeof *v);
    for (int64_t i = 0; i < a->n; i++) v[i] = (int64_t)a->v[i];
    em_tensor *t = NULL;
    assert_int_equal(em_tensor_from_data(v, EM_I64, &a->n, 1, dev, &t), EM_OK);
    free(v);
    return t;
}

typedef enum { L_CE, L_NLL, L_BCE, L_L1, L_SL1, L_HUBER, L_MSE } lkind;

/* One loss case: x from the golden file on dev (tracked), the loss and dx. */
static void run_loss(const char *cname, lkind kind, const em_tensor *target,
                     const em_ce_opts *co, const em_tensor *pw, em_reduction red,
                     const int64_t *xs, int xr, em_device dev) {
    em_tensor *x = from(ggetf("%s.%s", cname, "x"), xs, xr, dev), *loss = NULL;
    assert_int_equal(em_tensor_require_grad(x), EM_OK);
    em_status s = EM_ERR_STATE;
    switch (kind) {
    case L_CE: s = em_loss_cross_entropy_ex(x, target, co, &loss); break;
    case L_NLL: s = em_loss_nll(x, target, co, &loss); break;
    case L_BCE: s = em_loss_bce_with_logits(x, target, pw, red, &loss); break;
    case L_L1: s = em_loss_l1(x, target, red, &loss); break;
    case L_SL1: s = em_loss_smooth_l1(x, target, 0.5, red, &loss); break;
    case L_HUBER: s = em_loss_huber(x, target, 0.7, red, &loss); break;
    case L_MSE: s = em_loss_mse_ex(x, target, red, &loss); break;
    }
    if (s != EM_OK) fail_msg("%s: %s", cname, em_last_error());
    expect_close(loss, ggetf("%s.%s", cname, "loss"), TOL, cname);
    em_tensor *l = loss, *lr = NULL;
    if (em_tensor_rank(loss) > 0) {
        em_tensor *r = from(ggetf("%s.%s", cname, "r"), em_tensor_shape(loss),
                            em_tensor_rank(loss), inner_of(dev)), *p = NULL;
        assert_int_equal(em_mul(loss, r, &p), EM_OK);
        assert_int_equal(em_sum(p, &lr), EM_OK);
        em_tensor_release(p), em_tensor_release(r);
        l = lr;
    }
    em_grads *g = NULL;
    assert_int_equal(em_backward(l, &g), EM_OK);
    em_tensor *gx = NULL;
    assert_int_equal(em_grads_get(g, x, &gx), EM_OK);
    expect_close(gx, ggetf("%s.%s", cname, "dx"), TOL, cname);
    em_tensor_release(gx);
    em_grads_release(g);
    em_tensor_release(lr);
    em_tensor_release(loss);
    em_tensor_release(x);
}

static void test_losses_ex(void **state) {
    (void)state;
    em_device list[16];
    size_t nd = all_devices(list, 16);
    static const char *const reds[3] = {"mean", "sum", "none"};
    for (size_t di = 0; di < nd; di++)
        for (int c = 0; c < 2; c++) {
            em_device dev = ad_of(list[di], c ? EM_CKPT_BALANCED : EM_CKPT_DISABLED);
            em_device in = inner_of(dev);
            const garr *ta = gget("ce4.t");
            int64_t tv[12];
            for (int i = 0; i < 12; i++) tv[i] = (int64_t)ta->v[i];
            em_tensor *t = NULL, *w = from(gget("ce4.w"), (const int64_t[]){4}, 1, in);
            assert_int_equal(em_tensor_from_data(tv, EM_I64, (const int64_t[]){2, 3, 2}, 3, in,
                                                 &t), EM_OK);
            for (int r = 0; r < 3; r++) {
                char name[64];
                em_ce_opts o = em_ce_opts_default();
                o.reduction = (em_reduction)r;
                snprintf(name, sizeof name, "ce4plain.%s", reds[r]);
                run_loss(name, L_CE, t, &o, NULL, o.reduction, (const int64_t[]){2, 4, 3, 2}, 4,
                         dev);
                o.weight = w;
                o.label_smoothing = 0.1;
                snprintf(name, sizeof name, "ce4.%s", reds[r]);
                run_loss(name, L_CE, t, &o, NULL, o.reduction, (const int64_t[]){2, 4, 3, 2}, 4,
                         dev);
            }
            em_tensor_release(t);
            em_tensor_release(w);
            /* probability targets, smoothing and weights */
            em_tensor *pt = from(gget("cep.t"), (const int64_t[]){3, 5}, 2, in);
            em_tensor *pw5 = from(gget("cep.w"), (const int64_t[]){5}, 1, in);
            em_ce_opts o = em_ce_opts_default();
            o.weight = pw5;
            o.label_smoothing = 0.2;
            run_loss("cep", L_CE, pt, &o, NULL, o.reduction, (const int64_t[]){3, 5}, 2, dev);
            em_tensor_release(pt);
            em_tensor_release(pw5);
            /* NLL with an ignore_index of its own */
            int64_t nv[3] = {1, 2, 4};
            em_tensor *nt = NULL;
            assert_int_equal(em_tensor_from_data(nv, EM_I64, (const int64_t[]){3}, 1, in, &nt),
                             EM_OK);
            o = em_ce_opts_default();
            o.ignore_index = 2;
            run_loss("nll", L_NLL, nt, &o, NULL, o.reduction, (const int64_t[]){3, 5}, 2, dev);
            em_tensor_release(nt);
            /* binary and regression losses */
            em_tensor *bt = from(gget("bce.t"), (const int64_t[]){3, 4}, 2, in);
            em_tensor *bpw = from(gget("bce.pw"), (const int64_t[]){4}, 1, in);
            run_loss("bce.mean", L_BCE, bt, NULL, bpw, EM_REDUCTION_MEAN,
                     (const int64_t[]){3, 4}, 2, dev);
            run_loss("bce.none", L_BCE, bt, NULL, NULL, EM_REDUCTION_NONE,
                     (const int64_t[]){3, 4}, 2, dev);
            em_tensor_release(bt);
            em_tensor_release(bpw);
            em_tensor *rt = from(gget("reg.t"), (const int64_t[]){3, 4}, 2, in);
            run_loss("l1", L_L1, rt, NULL, NULL, EM_REDUCTION_MEAN, (const int64_t[]){3, 4}, 2,
                     dev);
            run_loss("sl1", L_SL1, rt, NULL, NULL, EM_REDUCTION_SUM, (const int64_t[]){3, 4}, 2,
                     dev);
            run_loss("huber", L_HUBER, rt, NULL, NULL, EM_REDUCTION_MEAN,
                     (const int64_t[]){3, 4}, 2, dev);
            run_loss("mse.none", L_MSE, rt, NULL, NULL, EM_REDUCTION_NONE,
                     (const int64_t[]){3, 4}, 2, dev);
            em_tensor_release(rt);
        }
    /* bad input */
    em_device ref;
    assert_int_equal(em_device_parse("ref", &ref), EM_OK);
    em_tensor *x = NULL, *t = NULL, *out = NULL;
    assert_int_equal(em_zeros((const int64_t[]){2, 3}, 2, EM_F32, ref, &x), EM_OK);
    int64_t bad[2] = {1, 3};
    assert_int_equal(em_tensor_from_data(bad, EM_I64, (const int64_t[]){2}, 1, ref, &t), EM_OK);
    assert_int_equal(em_loss_cross_entropy_ex(x, t, NULL, &out), EM_ERR_ARG);
    expect_error_contains("outside [0, 3)");
    em_ce_opts o = em_ce_opts_default();
    o.ignore_index = 3;
    assert_int_equal(em_loss_cross_entropy_ex(x, t, &o, &out), EM_OK);
    em_tensor_release(out);
    out = NULL;
    o.label_smoothing = 1.5;
    assert_int_equal(em_loss_cross_entropy_ex(x, t, &o, &out), EM_ERR_ARG);
    o = em_ce_opts_default();
    o.reduction = (em_reduction)7;
    assert_int_equal(em_loss_cross_entropy_ex(x, t, &o, &out), EM_ERR_ARG);
    o = em_ce_opts_default();
    o.label_smoothing = 0.1;
    assert_int_equal(em_loss_nll(x, t, &o, &out), EM_ERR_ARG);
    em_tensor *t3 = NULL;
    assert_int_equal(em_zeros((const int64_t[]){3}, 1, EM_I64, ref, &t3), EM_OK);
    assert_int_equal(em_loss_cross_entropy_ex(x, t3, NULL, &out), EM_ERR_SHAPE);
    assert_int_equal(em_loss_huber(x, x, 0, EM_REDUCTION_MEAN, &out), EM_ERR_ARG);
    assert_int_equal(em_loss_smooth_l1(x, x, -1, EM_REDUCTION_MEAN, &out), EM_ERR_ARG);
    assert_int_equal(em_loss_l1(x, t3, EM_REDUCTION_MEAN, &out), EM_ERR_SHAPE);
    assert_null(out);
    em_tensor_release(t3);
    em_tensor_release(t);
    em_tensor_release(x);
}

static void test_losses(void **state) {
    (void)state;
    em_device list[16];
    size_t nd = all_devices(list, 16);
    for (size_t di = 0; di < nd; di++) {
        em_device dev = ad_of(list[di], EM_CKPT_DISABLED);
        em_tensor *lg = from(gget("ce.logits"), (const int64_t[]){5, 4}, 2, dev);
        em_tensor *tg = labels(gget("ce.target"), dev);
        em_tensor *loss = NULL, *gl = NULL;
        em_grads *g = NULL;
        assert_int_equal(em_tensor_require_grad(lg), EM_OK);
        assert_int_equal(em_loss_cross_entropy(lg, tg, &loss), EM_OK);
        expect_close(loss, gget("ce.loss"), TOL, "ce");
        assert_int_equal(em_backward(loss, &g), EM_OK);
        assert_int_equal(em_grads_get(g, lg, &gl), EM_OK);
        expect_close(gl, gget("ce.dlogits"), TOL, "ce");
        em_tensor_release(gl);
        em_grads_release(g);
        em_tensor_release(loss);
        em_tensor_release(lg);
        em_tensor_release(tg);

        em_tensor *p = from(gget("mse.pred"), (const int64_t[]){3, 4}, 2, dev);
        em_tensor *t = from(gget("mse.target"), (const int64_t[]){3, 4}, 2, inner_of(dev));
        assert_int_equal(em_tensor_require_grad(p), EM_OK);
        assert_int_equal(em_loss_mse(p, t, &loss), EM_OK);
        expect_close(loss, gget("mse.loss"), TOL, "mse");
        assert_int_equal(em_backward(loss, &g), EM_OK);
        assert_int_equal(em_grads_get(g, p, &gl), EM_OK);
        expect_close(gl, gget("mse.dpred"), TOL, "mse");
        em_tensor_release(gl);
        em_grads_release(g);
        em_tensor_release(loss);
        em_tensor_release(p);
        em_tensor_release(t);
    }
}

/* The tiny model of gen_nn.py: Linear(3, 4) -> ReLU -> Linear(4, 2), set from opt.init.*. */
static em_module *tiny_model(em_device dev, em_params **ps) {
    em_module_opts o = f64_opts(dev);
    em_module *mods[3], *m = NULL;
    assert_int_equal(em_nn_linear(3, 4, true, &o, &mods[0]), EM_OK);
    assert_int_equal(em_nn_relu(&mods[1]), EM_OK);
    assert_int_equal(em_nn_linear(4, 2, true, &o, &mods[2]), EM_OK);
    assert_int_equal(em_nn_sequential(mods, 3, &m), EM_OK);
    assert_int_equal(em_params_create(ps), EM_OK);
    assert_int_equal(em_module_params(m, NULL, *ps), EM_OK);
    assert_int_equal(em_params_count(*ps), 4);
    assert_string_equal(em_params_name(*ps, 0), "0.weight");
    assert_string_equal(em_params_name(*ps, 3), "2.bias");
    for (size_t i = 0; i < 4; i++) set_param(*ps, "opt.init", em_params_name(*ps, i));
    return m;
}

static em_grads *tiny_grads(em_module *m, em_device dev) {
    em_tensor *x = from(gget("opt.x"), (const int64_t[]){6, 3}, 2, inner_of(dev));
    em_tensor *y = labels(gget("opt.y"), dev);
    em_tensor *lg = NULL, *loss = NULL;
    em_grads *g = NULL;
    assert_int_equal(em_module_forward(m, x, true, &lg), EM_OK);
    assert_int_equal(em_loss_cross_entropy(lg, y, &loss), EM_OK);
    assert_int_equal(em_backward(loss, &g), EM_OK);
    em_tensor_release(loss);
    em_tensor_release(lg);
    em_tensor_release(x);
    em_tensor_release(y);
    return g;
}

static void test_optimizers(void **state) {
    (void)state;
    em_device list[16];
    size_t nd = all_devices(list, 16);
    static const char *const names[4] = {"sgd", "sgdplain", "adam", "adamw"};
    for (size_t di = 0; di < nd; di++)
        for (int c = 0; c < 2; c++) {
            em_device dev = ad_of(list[di], c ? EM_CKPT_BALANCED : EM_CKPT_DISABLED);
            /* clipping */
            em_params *ps = NULL;
            em_module *m = tiny_model(dev, &ps);
            em_grads *g = tiny_grads(m, dev);
            double total = 0, scale = 0;
            assert_int_equal(em_clip_grad_norm(ps, g, 0.5, &total, &scale), EM_OK);
            assert_true(fabs(total - gget("clip.total")->v[0]) < 1e-12);
            assert_true(fabs(scale - gget("clip.scale")->v[0]) < 1e-12);
            em_grads_release(g);
            em_module_release(m);
            em_params_release(ps);
            for (int k = 0; k < 4; k++) {
                m = tiny_model(dev, &ps);
                em_optimizer *opt = NULL;
                if (k == 0) assert_int_equal(em_optimizer_sgd(ps, 0.1, 0.9, 0.01, &opt), EM_OK);
                if (k == 1) assert_int_equal(em_optimizer_sgd(ps, 0.1, 0, 0, &opt), EM_OK);
                if (k == 2)
                    assert_int_equal(em_optimizer_adam(ps, 0.01, 0.9, 0.999, 1e-8, 0.01, &opt),
                                     EM_OK);
                if (k == 3)
                    assert_int_equal(em_optimizer_adamw(ps, 0.01, 0.9, 0.999, 1e-8, 0.1, &opt),
                                     EM_OK);
                for (int step = 0; step < 3; step++) {
                    g = tiny_grads(m, dev);
                    assert_int_equal(em_optimizer_step(opt, g, 1.0), EM_OK);
                    em_grads_release(g);
                    for (size_t i = 0; i < 4; i++) {
                        char nm[96];
                        snprintf(nm, sizeof nm, "%s.%d.%s", names[k], step,
                                 em_params_name(ps, i));
                        em_tensor *p = em_params_get(ps, i);
                        assert_true(em_tensor_requires_grad(p));
                        expect_close(p, gget(nm), TOL, names[k]);
                    }
                }
                em_optimizer_release(opt);
                em_module_release(m);
                em_params_release(ps);
            }
        }
}

/* ---- optimizer state: resume exactly ---- */

static em_optimizer *make_opt(int k, em_params *ps) {
    em_optimizer *opt = NULL;
    if (k == 0) assert_int_equal(em_optimizer_sgd(ps, 0.1, 0.9, 0.01, &opt), EM_OK);
    if (k == 1) assert_int_equal(em_optimizer_adamw(ps, 0.01, 0.9, 0.999, 1e-8, 0.1, &opt), EM_OK);
    if (k == 2) assert_int_equal(em_optimizer_adam(ps, 0.01, 0.9, 0.999, 1e-8, 0.01, &opt), EM_OK);
    if (k == 3) assert_int_equal(em_optimizer_sgd(ps, 0.1, 0, 0, &opt), EM_OK);
    return opt;
}

static void train_steps(em_module *m, em_optimizer *opt, em_device dev, int n) {
    for (int i = 0; i < n; i++) {
        em_grads *g = tiny_grads(m, dev);
        assert_int_equal(em_optimizer_step(opt, g, 1.0), EM_OK);
        em_grads_release(g);
    }
}

/* the parameters of a and b are equal bit for bit */
static void expect_same_bits(em_params *a, em_params *b) {
    assert_int_equal(em_params_count(a), em_params_count(b));
    for (size_t i = 0; i < em_params_count(a); i++) {
        double x[64], y[64];
        em_tensor *ta = em_params_get(a, i), *tb = em_params_get(b, i);
        size_t bytes = (size_t)em_tensor_numel(ta) * sizeof(double);
        assert_true(bytes <= sizeof x);
        assert_int_equal(em_tensor_to_data(ta, x, sizeof x), EM_OK);
        assert_int_equal(em_tensor_to_data(tb, y, sizeof y), EM_OK);
        if (memcmp(x, y, bytes) != 0) fail_msg("parameter %s differs", em_params_name(a, i));
    }
}

static void temp_path(char *path, size_t cap, const char *what) {
    const char *tmp = getenv("TMPDIR");
    snprintf(path, cap, "%s/ember_test_%s_XXXXXX", tmp && tmp[0] ? tmp : "/tmp", what);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
}

/* An AdamW over four tensors named as the tiny model's, of the given shapes and dtype. */
static em_optimizer *fake_opt(em_device dev, em_dtype dt, int64_t out1, em_tensor **ts,
                              em_params **ps) {
    const int64_t sh[4][2] = {{4, 3}, {out1, 0}, {2, 4}, {2, 0}};
    const int rk[4] = {2, 1, 2, 1};
    static const char *const nm[4] = {"0.weight", "0.bias", "2.weight", "2.bias"};
    assert_int_equal(em_params_create(ps), EM_OK);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(em_zeros(sh[i], rk[i], dt, dev, &ts[i]), EM_OK);
        assert_int_equal(em_params_add(*ps, nm[i], &ts[i]), EM_OK);
    }
    em_optimizer *o = NULL;
    assert_int_equal(em_optimizer_adamw(*ps, 0.01, 0.9, 0.999, 1e-8, 0.1, &o), EM_OK);
    return o;
}

/* path holds AdamW's state after 3 steps of the tiny model: loads that do not fit fail and
 * change nothing */
static void expect_strict_load(const char *path, em_device dev) {
    em_tensor *ts[4];
    em_params *ps = NULL;
    for (int c = 0; c < 3; c++) {
        em_optimizer *o = fake_opt(dev, c == 1 ? EM_F32 : EM_F64, c == 0 ? 5 : 4, ts, &ps);
        em_status want = c == 0 ? EM_ERR_SHAPE : c == 1 ? EM_ERR_DTYPE : EM_OK;
        assert_int_equal(em_optimizer_load(o, path), want);
        em_params *st = NULL;
        assert_int_equal(em_params_create(&st), EM_OK);
        assert_int_equal(em_optimizer_state(o, st), EM_OK);
        assert_int_equal(em_params_count(st), c == 2 ? 12 : 4); /* nothing loaded on error */
        double v = -1;
        assert_int_equal(em_tensor_item(em_params_get(st, 0), &v), EM_OK);
        assert_true(v == (c == 2 ? 3 : 0));
        em_params_release(st);
        em_optimizer_release(o);
        for (int i = 0; i < 4; i++) em_tensor_release(ts[i]);
        em_params_release(ps);
    }
    /* a missing file, NULL arguments */
    em_optimizer *o = fake_opt(dev, EM_F64, 4, ts, &ps);
    assert_int_equal(em_optimizer_load(o, "/nonexistent/ember_optim"), EM_ERR_IO);
    assert_int_equal(em_optimizer_load(o, NULL), EM_ERR_ARG);
    expect_error_contains("path");
    assert_int_equal(em_optimizer_load(NULL, path), EM_ERR_ARG);
    assert_int_equal(em_optimizer_save(o, NULL), EM_ERR_ARG);
    assert_int_equal(em_optimizer_state(o, NULL), EM_ERR_ARG);
    expect_error_contains("out");
    em_optimizer_release(o);
    for (int i = 0; i < 4; i++) em_tensor_release(ts[i]);
    em_params_release(ps);
}

static void test_optimizer_resume(void **state) {
    (void)state;
    em_device list[16];
    size_t nd = all_devices(list, 16);
    char mpath[1024], opath[1024];
    temp_path(mpath, sizeof mpath, "model");
    temp_path(opath, sizeof opath, "optim");
    for (size_t di = 0; di < nd; di++)
        for (int k = 0; k < 4; k++)
            for (int ni = 0; ni < 3; ni++) {
                /* n = 0: saved before the first step; 100 + 100 = 200 straight steps */
                const int n = ni == 0 ? 0 : ni == 1 ? 3 : 100, more = n ? n : 3;
                em_device dev = ad_of(list[di], EM_CKPT_DISABLED);
                em_params *ps = NULL, *ps2 = NULL, *ps3 = NULL;
                em_module *m = tiny_model(dev, &ps);
                em_optimizer *opt = make_opt(k, ps);
                train_steps(m, opt, dev, n);
                assert_int_equal(em_module_save(m, mpath), EM_OK);
                assert_int_equal(em_optimizer_save(opt, opath), EM_OK);
                em_params *st = NULL;
                assert_int_equal(em_params_create(&st), EM_OK);
                assert_int_equal(em_optimizer_state(opt, st), EM_OK);
                size_t per = k == 3 ? 1 : (k == 0 ? 2 : 3);
                assert_int_equal(em_params_count(st), n ? 4 * per : 4);
                assert_string_equal(em_params_name(st, 0), "0.weight.step");
                if (n && k == 0) assert_string_equal(em_params_name(st, 1), "0.weight.momentum_buffer");
                if (n && k == 1) assert_string_equal(em_params_name(st, 2), "0.weight.exp_avg_sq");
                double v = 0;
                assert_int_equal(em_tensor_item(em_params_get(st, 0), &v), EM_OK);
                assert_true(v == n);
                em_params_release(st);
                train_steps(m, opt, dev, more); /* n + more straight steps */
                /* fresh objects: another model's numbers, loaded */
                em_module *m2 = tiny_model(dev, &ps2);
                em_optimizer *o2 = make_opt(k, ps2);
                assert_int_equal(em_module_load(m2, mpath), EM_OK);
                assert_int_equal(em_optimizer_load(o2, opath), EM_OK);
                train_steps(m2, o2, dev, more);
                expect_same_bits(ps, ps2);
                /* another kind: SGD's file for AdamW, Adam's for plain SGD, plain SGD's
                 * for momentum SGD fail; AdamW's state is Adam's (as torch's) */
                em_module *m3 = tiny_model(dev, &ps3);
                em_optimizer *o3 = make_opt((k + 1) % 4, ps3);
                if (n) {
                    assert_int_equal(em_optimizer_load(o3, opath), k == 1 ? EM_OK : EM_ERR_IO);
                } else {
                    (void)em_optimizer_load(o3, opath); /* only steps: fits any kind */
                }
                if (n == 3 && k == 1) expect_strict_load(opath, dev);
                em_optimizer_release(o3);
                em_optimizer_release(o2);
                em_optimizer_release(opt);
                em_module_release(m3);
                em_module_release(m2);
                em_module_release(m);
                em_params_release(ps3);
                em_params_release(ps2);
                em_params_release(ps);
            }
    unlink(mpath);
    unlink(opath);
}

/* ---- parameter groups, against torch's param_groups ---- */

static void test_optimizer_groups(void **state) {
    (void)state;
    em_device list[16];
    size_t nd = all_devices(list, 16);
    static const char *const names[2] = {"gsgd", "gadamw"};
    for (size_t di = 0; di < nd; di++)
        for (int k = 0; k < 2; k++) {
            em_device dev = ad_of(list[di], EM_CKPT_DISABLED);
            em_params *ps = NULL, *g0 = NULL, *g1 = NULL;
            em_module *m = tiny_model(dev, &ps);
            assert_int_equal(em_params_create(&g0), EM_OK);
            assert_int_equal(em_params_create(&g1), EM_OK);
            for (size_t i = 0; i < 4; i++)
                assert_int_equal(em_params_add(i < 2 ? g0 : g1, em_params_name(ps, i),
                                               em_params_slot(ps, i)),
                                 EM_OK);
            em_optimizer *opt = NULL;
            if (k == 0) {
                assert_int_equal(em_optimizer_sgd(g0, 0.1, 0.9, 0.01, &opt), EM_OK);
                assert_int_equal(em_optimizer_add_group(opt, g1, 0.03, 0.2), EM_OK);
            } else {
                assert_int_equal(em_optimizer_adamw(g0, 0.01, 0.9, 0.999, 1e-8, 0.01, &opt),
                                 EM_OK);
                assert_int_equal(em_optimizer_add_group(opt, g1, 0.002, 0.2), EM_OK);
            }
            assert_int_equal(em_optimizer_group_count(opt), 2);
            assert_true(em_optimizer_group_weight_decay(opt, 1) == 0.2);
            /* a parameter twice, bad numbers: nothing changes */
            assert_int_equal(em_optimizer_add_group(opt, g1, 0.1, 0), EM_ERR_ARG);
            expect_error_contains("already");
            assert_int_equal(em_optimizer_add_group(opt, g1, -1, 0), EM_ERR_ARG);
            expect_error_contains("lr");
            assert_int_equal(em_optimizer_add_group(opt, NULL, 0.1, 0), EM_ERR_ARG);
            expect_error_contains("params");
            assert_int_equal(em_optimizer_set_group_lr(opt, 2, 0.1), EM_ERR_ARG);
            expect_error_contains("group");
            assert_int_equal(em_optimizer_group_count(opt), 2);
            for (int step = 0; step < 3; step++) {
                em_grads *g = tiny_grads(m, dev);
                assert_int_equal(em_optimizer_step(opt, g, 1.0), EM_OK);
                em_grads_release(g);
                for (size_t i = 0; i < 4; i++) {
                    char nm[96];
                    snprintf(nm, sizeof nm, "%s.%d.%s", names[k], step, em_params_name(ps, i));
                    expect_close(em_params_get(ps, i), gget(nm), TOL, names[k]);
                }
            }
            assert_int_equal(em_optimizer_set_lr(opt, 0.5), EM_OK);
            assert_true(em_optimizer_group_lr(opt, 0) == 0.5 && em_optimizer_group_lr(opt, 1) == 0.5);
            assert_int_equal(em_optimizer_set_group_lr(opt, 1, 0.25), EM_OK);
            assert_true(em_optimizer_group_lr(opt, 1) == 0.25 && em_optimizer_lr(opt) == 0.5);
            em_optimizer_release(opt);
            em_module_release(m);
            em_params_release(g0);
            em_params_release(g1);
            em_params_release(ps);
        }
}

/* ---- schedules, against torch's schedulers ---- */

static void expect_sched(const char *name, const double *v, int n) {
    const garr *a = gget(name);
    assert_int_equal(a->n, n);
    for (int i = 0; i < n; i++)
        if (!(fabs(v[i] - a->v[i]) <= 1e-12 * fabs(a->v[i])))
            fail_msg("%s[%d]: %.17g, torch %.17g", name, i, v[i], a->v[i]);
}

static void test_schedules(void **state) {
    (void)state;
    double v[32];
    for (int i = 0; i < 9; i++) v[i] = em_lr_linear(0.1, i, 0.1, 1.0, 5);
    expect_sched("sched.linear", v, 9);
    for (int i = 0; i < 13; i++) v[i] = em_lr_cosine(0.1, i, 10, 0.001);
    expect_sched("sched.cosine", v, 13);
    for (int i = 0; i < 20; i++) v[i] = em_lr_one_cycle(0.1, i, 20, 0.3, 25, 1e4);
    expect_sched("sched.onecycle", v, 20);
    for (int i = 0; i < 17; i++) v[i] = em_lr_one_cycle(0.5, i, 17, 0.25, 10, 100);
    expect_sched("sched.onecycle2", v, 17);
    /* out of range: NaN, which set_lr refuses */
    assert_true(isnan(em_lr_linear(0.1, -1, 0.1, 1, 5)));
    assert_true(isnan(em_lr_linear(0.1, 0, 0, 1, 5)));
    assert_true(isnan(em_lr_linear(0.1, 0, 0.1, 1, 0)));
    assert_true(isnan(em_lr_cosine(0.1, 0, 0, 0)));
    assert_true(isnan(em_lr_one_cycle(0.1, 21, 20, 0.3, 25, 1e4)));
    assert_true(isnan(em_lr_one_cycle(0.1, 0, 20, 1.5, 25, 1e4)));
    assert_true(isnan(em_lr_one_cycle(0.1, 0, 20, 0.3, 0, 1e4)));
    em_params *ps = NULL;
    em_module *m = tiny_model(ad_of(ref_dev(), EM_CKPT_DISABLED), &ps);
    em_optimizer *opt = NULL;
    assert_int_equal(em_optimizer_sgd(ps, 0.1, 0, 0, &opt), EM_OK);
    assert_int_equal(em_optimizer_set_lr(opt, em_lr_cosine(0.1, 0, 0, 0)), EM_ERR_ARG);
    expect_error_contains("lr");
    em_optimizer_release(opt);
    em_module_release(m);
    em_params_release(ps);
}

/* ---- gradient accumulation ---- */

/* the mean cross-entropy of the tiny model on rows [r0, r0 + n) of an 8-row batch, times
 * scale: its gradients */
static em_grads *batch_grads(em_module *m, em_device dev, int r0, int n, double scale) {
    double xs[24];
    int64_t ys[8];
    for (int i = 0; i < 24; i++) xs[i] = sin(0.7 * i + 0.3);
    for (int i = 0; i < 8; i++) ys[i] = (i * 5 + 1) % 2;
    em_tensor *x = NULL, *y = NULL, *lg = NULL, *loss = NULL, *ls = NULL;
    assert_int_equal(em_tensor_from_data(xs + 3 * r0, EM_F64, (const int64_t[]){n, 3}, 2,
                                         inner_of(dev), &x),
                     EM_OK);
    assert_int_equal(em_tensor_from_data(ys + r0, EM_I64, (const int64_t[]){n}, 1,
                                         inner_of(dev), &y),
                     EM_OK);
    em_grads *g = NULL;
    assert_int_equal(em_module_forward(m, x, true, &lg), EM_OK);
    assert_int_equal(em_loss_cross_entropy(lg, y, &loss), EM_OK);
    assert_int_equal(em_mul_scalar(loss, scale, &ls), EM_OK);
    assert_int_equal(em_backward(ls, &g), EM_OK);
    em_tensor_release(ls);
    em_tensor_release(loss);
    em_tensor_release(lg);
    em_tensor_release(x);
    em_tensor_release(y);
    return g;
}

static void test_grads_add(void **state) {
    (void)state;
    em_device list[16];
    size_t nd = all_devices(list, 16);
    for (size_t di = 0; di < nd; di++) {
        em_device dev = ad_of(list[di], EM_CKPT_DISABLED);
        em_params *ps = NULL;
        em_module *m = tiny_model(dev, &ps);
        em_grads *full = batch_grads(m, dev, 0, 8, 1.0);
        em_grads *acc = batch_grads(m, dev, 0, 4, 0.5);
        em_grads *g2 = batch_grads(m, dev, 4, 4, 0.5);
        em_tensor *before = NULL, *g2w = NULL;
        assert_int_equal(em_grads_get(acc, em_params_get(ps, 0), &before), EM_OK);
        assert_int_equal(em_grads_get(g2, em_params_get(ps, 0), &g2w), EM_OK);
        double b0[12], b1[12], c0[12], c1[12];
        assert_int_equal(em_tensor_to_data(before, b0, sizeof b0), EM_OK);
        assert_int_equal(em_tensor_to_data(g2w, c0, sizeof c0), EM_OK);
        assert_int_equal(em_grads_add(acc, g2), EM_OK);
        /* taken before: unchanged; g: unchanged */
        assert_int_equal(em_tensor_to_data(before, b1, sizeof b1), EM_OK);
        assert_int_equal(em_tensor_to_data(g2w, c1, sizeof c1), EM_OK);
        assert_memory_equal(b0, b1, sizeof b0);
        assert_memory_equal(c0, c1, sizeof c0);
        for (size_t i = 0; i < 4; i++) {
            em_tensor *a = NULL, *f = NULL;
            assert_int_equal(em_grads_get(acc, em_params_get(ps, i), &a), EM_OK);
            assert_int_equal(em_grads_get(full, em_params_get(ps, i), &f), EM_OK);
            assert_non_null(a);
            double va[12], vf[12];
            int64_t n = em_tensor_numel(a);
            assert_int_equal(em_tensor_to_data(a, va, sizeof va), EM_OK);
            assert_int_equal(em_tensor_to_data(f, vf, sizeof vf), EM_OK);
            for (int64_t j = 0; j < n; j++)
                if (!(fabs(va[j] - vf[j]) <= 1e-12))
                    fail_msg("%s[%lld]: %.17g vs %.17g", em_params_name(ps, i), (long long)j,
                             va[j], vf[j]);
            em_tensor_release(a);
            em_tensor_release(f);
        }
        /* into an empty-handed set: a leaf only g has is added */
        em_params *q = NULL;
        em_module *lin = NULL;
        em_module_opts o = f64_opts(dev);
        assert_int_equal(em_nn_linear(3, 1, false, &o, &lin), EM_OK);
        em_tensor *x = NULL, *y = NULL, *s = NULL;
        assert_int_equal(em_ones((const int64_t[]){2, 3}, 2, EM_F64, inner_of(dev), &x), EM_OK);
        assert_int_equal(em_module_forward(lin, x, true, &y), EM_OK);
        assert_int_equal(em_sum(y, &s), EM_OK);
        em_grads *gl = NULL;
        assert_int_equal(em_backward(s, &gl), EM_OK);
        assert_int_equal(em_grads_add(acc, gl), EM_OK);
        em_tensor *w = NULL;
        assert_int_equal(em_grads_get(acc, em_module_get(lin, "weight"), &w), EM_OK);
        assert_non_null(w);
        double v = 0;
        em_tensor *ws = NULL;
        assert_int_equal(em_sum(w, &ws), EM_OK);
        assert_int_equal(em_tensor_item(ws, &v), EM_OK);
        assert_true(v == 6.0);
        em_tensor_release(ws);
        em_tensor_release(w);
        /* bad arguments */
        assert_int_equal(em_grads_add(NULL, g2), EM_ERR_ARG);
        expect_error_contains("acc");
        assert_int_equal(em_grads_add(acc, NULL), EM_ERR_ARG);
        expect_error_contains("g is NULL");
        assert_int_equal(em_grads_add(acc, acc), EM_ERR_ARG);
        em_grads_release(gl);
        em_tensor_release(s);
        em_tensor_release(y);
        em_tensor_release(x);
        em_module_release(lin);
        em_params_release(q);
        em_tensor_release(before);
        em_tensor_release(g2w);
        em_grads_release(g2);
        em_grads_release(acc);
        em_grads_release(full);
        em_module_release(m);
        em_params_release(ps);
    }
}

/* ---- init: normal, truncated normal, constants ---- */

static void moments(const em_tensor *t, double *mean, double *var, double *lo, double *hi) {
    int64_t n = em_tensor_numel(t);
    double *v = malloc((size_t)n * sizeof *v);
    em_tensor *d = NULL;
    assert_int_equal(em_cast(t, EM_F64, &d), EM_OK);
    assert_int_equal(em_tensor_to_data(d, v, (size_t)n * sizeof *v), EM_OK);
    em_tensor_release(d);
    double s = 0, s2 = 0;
    *lo = INFINITY;
    *hi = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        s += v[i];
        *lo = v[i] < *lo ? v[i] : *lo;
        *hi = v[i] > *hi ? v[i] : *hi;
    }
    *mean = s / n;
    for (int64_t i = 0; i < n; i++) s2 += (v[i] - *mean) * (v[i] - *mean);
    *var = s2 / n;
    free(v);
}

static double phi(double x) { return exp(-0.5 * x * x) / sqrt(2 * M_PI); }
static double Phi(double x) { return 0.5 * (1 + erf(x / sqrt(2.0))); }

static void test_init(void **state) {
    (void)state;
    em_device list[16];
    size_t nd = all_devices(list, 16);
    const int64_t n = 200000;
    for (size_t di = 0; di < nd; di++)
        for (int f = 0; f < 2; f++) {
            em_device dev = ad_of(list[di], EM_CKPT_DISABLED);
            em_dtype dt = f ? EM_F32 : EM_F64;
            em_tensor *t = NULL, *u = NULL;
            assert_int_equal(em_zeros((const int64_t[]){n}, 1, dt, dev, &t), EM_OK);
            assert_int_equal(em_tensor_require_grad(t), EM_OK);
            double m, v, lo, hi;
            /* truncated normal: bounds, then the moments of the truncated distribution */
            const double mu = 0.5, sd = 2.0, a = -1.0, b = 4.0;
            assert_int_equal(em_init_tensor_trunc_normal(t, mu, sd, a, b, 7), EM_OK);
            assert_true(em_tensor_requires_grad(t));
            moments(t, &m, &v, &lo, &hi);
            double al = (a - mu) / sd, be = (b - mu) / sd, Z = Phi(be) - Phi(al);
            double em = mu + sd * (phi(al) - phi(be)) / Z;
            double ev = sd * sd * (1 + (al * phi(al) - be * phi(be)) / Z -
                                   pow((phi(al) - phi(be)) / Z, 2));
            assert_true(lo >= a && hi <= b);
            assert_true(lo < a + 0.01 && hi > b - 0.05);
            if (!(fabs(m - em) < 5 * sqrt(ev / n))) fail_msg("trunc mean %g, want %g", m, em);
            if (!(fabs(v - ev) < 0.02 * ev)) fail_msg("trunc var %g, want %g", v, ev);
            /* deterministic from the seed, another seed differs */
            assert_int_equal(em_zeros((const int64_t[]){n}, 1, dt, inner_of(dev), &u), EM_OK);
            assert_int_equal(em_init_tensor_trunc_normal(u, mu, sd, a, b, 7), EM_OK);
            em_tensor *eq = NULL, *all = NULL;
            double same = 0;
            assert_int_equal(em_eq(t, u, &eq), EM_OK);
            assert_int_equal(em_cast(eq, EM_F64, &all), EM_OK);
            em_tensor_release(eq);
            assert_int_equal(em_sum(all, &eq), EM_OK);
            assert_int_equal(em_tensor_item(eq, &same), EM_OK);
            assert_true(same == (double)n);
            em_tensor_release(eq);
            em_tensor_release(all);
            assert_int_equal(em_init_tensor_trunc_normal(u, mu, sd, a, b, 8), EM_OK);
            double m8, v8, l8, h8;
            moments(u, &m8, &v8, &l8, &h8);
            assert_true(m8 != m);
            /* torch's default: a standard normal in [-2, 2] */
            assert_int_equal(em_init_tensor_trunc_normal(u, 0, 1, -2, 2, 1), EM_OK);
            moments(u, &m, &v, &lo, &hi);
            assert_true(lo >= -2 && hi <= 2 && fabs(m) < 0.01);
            /* normal */
            assert_int_equal(em_init_tensor_normal(t, -1.0, 0.5, 3), EM_OK);
            moments(t, &m, &v, &lo, &hi);
            assert_true(fabs(m + 1.0) < 5 * 0.5 / sqrt((double)n));
            assert_true(fabs(v - 0.25) < 0.01);
            /* constants */
            assert_int_equal(em_init_tensor_constant(t, 1.0), EM_OK);
            moments(t, &m, &v, &lo, &hi);
            assert_true(lo == 1 && hi == 1);
            /* bad arguments */
            assert_int_equal(em_init_tensor_trunc_normal(t, 0, 1, 2, -2, 1), EM_ERR_ARG);
            expect_error_contains("a must be < b");
            assert_int_equal(em_init_tensor_trunc_normal(t, 0, 0, -2, 2, 1), EM_ERR_ARG);
            expect_error_contains("std");
            assert_int_equal(em_init_tensor_normal(t, 0, -1, 1), EM_ERR_ARG);
            expect_error_contains("std");
            assert_int_equal(em_init_tensor_normal(NULL, 0, 1, 1), EM_ERR_ARG);
            em_tensor_release(u);
            em_tensor_release(t);
        }
    /* on a set: each entry its own numbers; zeros and ones */
    em_device dev = ad_of(list[0], EM_CKPT_DISABLED);
    em_params *ps = NULL;
    em_module *m = tiny_model(dev, &ps);
    assert_int_equal(em_init_trunc_normal(ps, 0, 0.02, -0.04, 0.04, 5), EM_OK);
    double m0, v0, l0, h0, m2, v2, l2, h2;
    moments(em_params_get(ps, 0), &m0, &v0, &l0, &h0);
    moments(em_params_get(ps, 2), &m2, &v2, &l2, &h2);
    assert_true(l0 >= -0.04 && h0 <= 0.04 && l2 >= -0.04 && h2 <= 0.04 && m0 != m2);
    assert_true(em_tensor_requires_grad(em_params_get(ps, 0)));
    assert_int_equal(em_init_normal(ps, 0, 1, 5), EM_OK);
    assert_int_equal(em_init_ones(ps), EM_OK);
    moments(em_params_get(ps, 3), &m0, &v0, &l0, &h0);
    assert_true(l0 == 1 && h0 == 1);
    assert_int_equal(em_init_zeros(ps), EM_OK);
    moments(em_params_get(ps, 1), &m0, &v0, &l0, &h0);
    assert_true(l0 == 0 && h0 == 0);
    assert_int_equal(em_init_normal(ps, 0, -1, 5), EM_ERR_ARG);
    expect_error_contains("'0.weight'");
    assert_int_equal(em_init_zeros(NULL), EM_ERR_ARG);
    expect_error_contains("params");
    em_module_release(m);
    em_params_release(ps);
}

/* ---- em_tensor_assign ---- */

static void test_assign(void **state) {
    (void)state;
    em_device ref = ref_dev();
    em_device ad = ad_of(ref, EM_CKPT_DISABLED);
    int64_t sh[2] = {2, 3};
    em_tensor *p = NULL, *v = NULL, *q = NULL, *view = NULL;
    assert_int_equal(em_zeros(sh, 2, EM_F32, ad, &p), EM_OK);
    assert_int_equal(em_tensor_require_grad(p), EM_OK);
    assert_int_equal(em_arange(0, 6, 1, EM_F32, ref, &v), EM_OK);
    assert_int_equal(em_reshape(v, sh, 2, &q), EM_OK);
    assert_int_equal(em_tensor_assign(p, q), EM_OK);
    float buf[6];
    assert_int_equal(em_tensor_to_data(p, buf, sizeof buf), EM_OK);
    for (int i = 0; i < 6; i++) assert_true(buf[i] == (float)i);
    assert_true(em_tensor_requires_grad(p));
    /* self-overlapping source: p = flip(p) */
    assert_int_equal(em_flip(p, (const int[]){1}, 1, &view), EM_OK);
    assert_int_equal(em_tensor_assign(p, view), EM_OK);
    assert_int_equal(em_tensor_to_data(p, buf, sizeof buf), EM_OK);
    assert_true(buf[0] == 2.0f && buf[2] == 0.0f && buf[3] == 5.0f);
    em_tensor_release(view);
    /* errors */
    em_tensor *bad = NULL, *nl = NULL;
    EXPECT_ERR(EM_ERR_ARG, "em_tensor_assign", em_tensor_assign(NULL, q));
    EXPECT_ERR(EM_ERR_ARG, "em_tensor_assign", em_tensor_assign(p, NULL));
    EXPECT_ERR(EM_ERR_SHAPE, "em_tensor_assign", em_tensor_assign(p, v));
    assert_int_equal(em_zeros(sh, 2, EM_F64, ref, &bad), EM_OK);
    EXPECT_ERR(EM_ERR_DTYPE, "em_tensor_assign", em_tensor_assign(p, bad));
    em_tensor_release(bad);
    assert_int_equal(em_mul_scalar(p, 2.0, &nl), EM_OK);
    EXPECT_ERR(EM_ERR_STATE, "em_tensor_assign", em_tensor_assign(nl, q));
    em_tensor_release(nl);
    em_device list[16];
    size_t nd = all_devices(list, 16);
    for (size_t i = 0; i < nd; i++) {
        if (list[i].backend == EM_BACKEND_REF) continue;
        assert_int_equal(em_zeros(sh, 2, EM_F32, list[i], &bad), EM_OK);
        EXPECT_ERR(EM_ERR_DEVICE, "em_tensor_assign", em_tensor_assign(p, bad));
        em_tensor_release(bad);
    }
    em_tensor_release(q);
    em_tensor_release(v);
    em_tensor_release(p);
    CHECKS_DONE();
}

/* ---- dropout, init, schedule ---- */

static void test_dropout_init_schedule(void **state) {
    (void)state;
    em_device ref = ref_dev();
    em_module *d = NULL;
    em_tensor *x = NULL, *y1 = NULL, *y2 = NULL, *ye = NULL;
    int64_t n = 1000;
    assert_int_equal(em_ones(&n, 1, EM_F32, ref, &x), EM_OK);
    assert_int_equal(em_nn_dropout(0.5, 42, &d), EM_OK);
    assert_int_equal(em_module_forward(d, x, false, &ye), EM_OK);
    assert_int_equal(em_module_forward(d, x, true, &y1), EM_OK);
    assert_int_equal(em_module_forward(d, x, true, &y2), EM_OK);
    float *a = malloc(3 * 1000 * sizeof(float));
    assert_int_equal(em_tensor_to_data(ye, a, 1000 * sizeof(float)), EM_OK);
    assert_int_equal(em_tensor_to_data(y1, a + 1000, 1000 * sizeof(float)), EM_OK);
    assert_int_equal(em_tensor_to_data(y2, a + 2000, 1000 * sizeof(float)), EM_OK);
    int zeros = 0, differ = 0;
    for (int i = 0; i < 1000; i++) {
        assert_true(a[i] == 1.0f);
        assert_true(a[1000 + i] == 0.0f || a[1000 + i] == 2.0f);
        zeros += a[1000 + i] == 0.0f;
        differ += a[1000 + i] != a[2000 + i];
    }
    assert_true(zeros > 400 && zeros < 600);
    assert_true(differ > 300);
    free(a);
    em_tensor_release(x);
    em_tensor_release(y1);
    em_tensor_release(y2);
    em_tensor_release(ye);
    em_module_release(d);

    /* Kaiming: |w|, |b| <= 1/sqrt(fan_in); Xavier: |w| <= sqrt(6/(in+out)), b = 0 */
    for (int k = 0; k < 2; k++) {
        em_module_opts o = em_module_opts_default(ref, 3);
        o.init = k ? EM_INIT_XAVIER_UNIFORM : EM_INIT_KAIMING_UNIFORM;
        em_module *m = NULL;
        em_params *ps = NULL;
        assert_int_equal(em_nn_linear(100, 50, true, &o, &m), EM_OK);
        assert_int_equal(em_params_create(&ps), EM_OK);
        assert_int_equal(em_module_params(m, "fc", ps), EM_OK);
        assert_string_equal(em_params_name(ps, 0), "fc.weight");
        float *w = malloc(5000 * sizeof(float)), b[50];
        assert_int_equal(em_tensor_to_data(em_params_find(ps, "fc.weight"), w, 5000 * 4), EM_OK);
        assert_int_equal(em_tensor_to_data(em_params_find(ps, "fc.bias"), b, sizeof b), EM_OK);
        double bound = k ? sqrt(6.0 / 150) : 0.1, mx = 0;
        for (int i = 0; i < 5000; i++) mx = fmax(mx, fabs(w[i]));
        assert_true(mx <= bound && mx > 0.95 * bound);
        for (int i = 0; i < 50; i++) assert_true(k ? b[i] == 0 : fabsf(b[i]) <= 0.1f);
        if (!k) {
            assert_int_equal(em_init_xavier_uniform(ps, 9), EM_OK);
            assert_int_equal(em_tensor_to_data(em_params_find(ps, "fc.bias"), b, sizeof b),
                             EM_OK);
            for (int i = 0; i < 50; i++) assert_true(b[i] == 0);
        }
        free(w);
        em_params_release(ps);
        em_module_release(m);
    }
    assert_true(fabs(em_lr_step(0.1, 0, 2, 0.5) - 0.1) < 1e-15);
    assert_true(fabs(em_lr_step(0.1, 3, 2, 0.5) - 0.05) < 1e-15);
    assert_true(fabs(em_lr_step(0.1, 4, 2, 0.5) - 0.025) < 1e-15);
}

/* ---- training: a tiny MLP on a separable 2-class problem, on every device ---- */

#define TRAIN_N 128
#define TRAIN_STEPS 30
#define TRAIN_BOUND 0.05

static void test_training(void **state) {
    (void)state;
    float xs[TRAIN_N * 2];
    int64_t ys[TRAIN_N];
    uint64_t s = 99;
    for (int i = 0; i < TRAIN_N; i++) {
        for (int j = 0; j < 2; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            xs[2 * i + j] = (float)((double)(s >> 11) / 9007199254740992.0 * 2 - 1);
        }
        ys[i] = xs[2 * i] + 0.5f * xs[2 * i + 1] > 0;
    }
    em_device list[16];
    size_t nd = all_devices(list, 16);
    for (size_t di = 0; di < nd; di++) {
        em_device dev = ad_of(list[di], EM_CKPT_DISABLED);
        em_module_opts o = em_module_opts_default(dev, 5);
        em_module *mods[5], *m = NULL;
        assert_int_equal(em_nn_linear(2, 16, true, &o, &mods[0]), EM_OK);
        assert_int_equal(em_nn_relu(&mods[1]), EM_OK);
        o.seed = 6;
        assert_int_equal(em_nn_linear(16, 16, true, &o, &mods[2]), EM_OK);
        assert_int_equal(em_nn_gelu(&mods[3]), EM_OK);
        o.seed = 8;
        assert_int_equal(em_nn_linear(16, 2, true, &o, &mods[4]), EM_OK);
        assert_int_equal(em_nn_sequential(mods, 5, &m), EM_OK);
        em_params *ps = NULL;
        assert_int_equal(em_params_create(&ps), EM_OK);
        assert_int_equal(em_module_params(m, "mlp", ps), EM_OK);
        em_optimizer *opt = NULL;
        assert_int_equal(em_optimizer_adam(ps, 0.05, 0.9, 0.999, 1e-8, 0, &opt), EM_OK);
        em_tensor *x = NULL, *y = NULL;
        assert_int_equal(em_tensor_from_data(xs, EM_F32, (const int64_t[]){TRAIN_N, 2}, 2,
                                             inner_of(dev), &x), EM_OK);
        assert_int_equal(em_tensor_from_data(ys, EM_I64, (const int64_t[]){TRAIN_N}, 1,
                                             inner_of(dev), &y), EM_OK);
        double first = 0, last = 0;
        for (int step = 0; step < TRAIN_STEPS; step++) {
            em_tensor *lg = NULL, *loss = NULL;
            em_grads *g = NULL;
            double scale = 1;
            assert_int_equal(em_module_forward(m, x, true, &lg), EM_OK);
            assert_int_equal(em_loss_cross_entropy(lg, y, &loss), EM_OK);
            assert_int_equal(em_tensor_item(loss, &last), EM_OK);
            if (step == 0) first = last;
            assert_int_equal(em_backward(loss, &g), EM_OK);
            assert_int_equal(em_clip_grad_norm(ps, g, 5.0, NULL, &scale), EM_OK);
            assert_int_equal(em_optimizer_step(opt, g, scale), EM_OK);
            em_grads_release(g);
            em_tensor_release(loss);
            em_tensor_release(lg);
        }
        char name[64];
        assert_int_equal(em_device_name(dev, name, sizeof name), EM_OK);
        print_message("training on %s: loss %.4g -> %.4g in %d steps\n", name, first, last,
                      TRAIN_STEPS);
        assert_true(last < TRAIN_BOUND);
        em_tensor_release(x);
        em_tensor_release(y);
        em_optimizer_release(opt);
        em_params_release(ps);
        em_module_release(m);
    }
}

/* ---- bad inputs ---- */

static void test_errors(void **state) {
    (void)state;
    em_device ref = ref_dev();
    em_module_opts mo = em_module_opts_default(ref, 1);
    em_module *m = NULL, *lin = NULL;
    em_params *ps = NULL;
    assert_int_equal(em_nn_linear(4, 3, true, &mo, &lin), EM_OK);
    /* constructors */
    assert_int_equal(em_nn_linear(0, 3, true, &mo, &m), EM_ERR_ARG);
    assert_int_equal(em_nn_linear(4, 3, true, &mo, NULL), EM_ERR_ARG);
    mo.dtype = EM_I32;
    assert_int_equal(em_nn_linear(4, 3, true, &mo, &m), EM_ERR_DTYPE);
    mo.dtype = EM_F32;
    assert_int_equal(em_nn_conv2d(1, 2, 0, 1, 0, true, &mo, &m), EM_ERR_ARG);
    assert_int_equal(em_nn_max_pool2d(0, 1, &m), EM_ERR_ARG);
    assert_int_equal(em_nn_dropout(1.0, 1, &m), EM_ERR_ARG);
    assert_int_equal(em_nn_layer_norm(0, &mo, &m), EM_ERR_ARG);
    assert_int_equal(em_nn_sequential(NULL, 1, &m), EM_ERR_ARG);
    em_module *mods[2] = {NULL, NULL};
    assert_int_equal(em_nn_relu(&mods[0]), EM_OK);
    assert_int_equal(em_nn_sequential(mods, 2, &m), EM_ERR_ARG); /* releases mods[0] */
    assert_null(m);
    /* forward */
    em_tensor *x = NULL, *xb = NULL;
    assert_int_equal(em_zeros((const int64_t[]){2, 5}, 2, EM_F32, ref, &xb), EM_OK);
    assert_int_equal(em_zeros((const int64_t[]){2, 4}, 2, EM_F32, ref, &x), EM_OK);
    EXPECT_ERR(EM_ERR_ARG, "em_module_forward", em_module_forward(NULL, x, true, &o));
    EXPECT_ERR(EM_ERR_ARG, "em_module_forward", em_module_forward(lin, NULL, true, &o));
    EXPECT_ERR(EM_ERR_ARG, "em_module_forward", em_module_forward(lin, x, true, NULL));
    EXPECT_ERR(EM_ERR_SHAPE, NULL, em_module_forward(lin, xb, true, &o));
    /* params */
    assert_int_equal(em_params_create(NULL), EM_ERR_ARG);
    assert_int_equal(em_params_create(&ps), EM_OK);
    assert_int_equal(em_module_params(lin, NULL, ps), EM_OK);
    assert_int_equal(em_module_params(lin, NULL, ps), EM_ERR_ARG); /* duplicate names */
    assert_int_equal(em_module_params(NULL, NULL, ps), EM_ERR_ARG);
    assert_int_equal(em_params_add(ps, NULL, &x), EM_ERR_ARG);
    assert_null(em_params_get(ps, 99));
    assert_null(em_params_name(NULL, 0));
    assert_int_equal(em_params_count(NULL), 0);
    /* losses */
    EXPECT_ERR(EM_ERR_ARG, "em_loss_mse", em_loss_mse(NULL, x, &o));
    EXPECT_ERR(EM_ERR_SHAPE, "em_loss_mse", em_loss_mse(x, xb, &o));
    EXPECT_ERR(EM_ERR_ARG, "em_loss_cross_entropy", em_loss_cross_entropy(x, NULL, &o));
    /* optimizers */
    em_optimizer *opt = NULL;
    assert_int_equal(em_optimizer_sgd(NULL, 0.1, 0, 0, &opt), EM_ERR_ARG);
    assert_int_equal(em_optimizer_sgd(ps, -1, 0, 0, &opt), EM_ERR_ARG);
    assert_int_equal(em_optimizer_adam(ps, 0.1, 1.0, 0.9, 1e-8, 0, &opt), EM_ERR_ARG);
    assert_int_equal(em_optimizer_adamw(ps, 0.1, 0.9, 0.9, -1, 0, &opt), EM_ERR_ARG);
    assert_null(opt);
    assert_int_equal(em_optimizer_sgd(ps, 0.1, 0.9, 0, &opt), EM_OK);
    assert_int_equal(em_optimizer_step(opt, NULL, 1.0), EM_ERR_ARG);
    assert_int_equal(em_optimizer_step(NULL, NULL, 1.0), EM_ERR_ARG);
    assert_int_equal(em_optimizer_set_lr(opt, -1), EM_ERR_ARG);
    assert_int_equal(em_optimizer_set_lr(opt, 0.02), EM_OK);
    assert_true(em_optimizer_lr(opt) == 0.02);
    double sc = 0;
    assert_int_equal(em_clip_grad_norm(ps, NULL, 1.0, NULL, &sc), EM_ERR_ARG);
    assert_int_equal(em_clip_grad_norm(NULL, NULL, 1.0, NULL, &sc), EM_ERR_ARG);
    em_optimizer_release(opt);
    em_params_release(ps);
    em_tensor_release(x);
    em_tensor_release(xb);
    em_module_release(lin);
    CHECKS_DONE();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layers),     cmocka_unit_test(test_losses),
        cmocka_unit_test(test_optimizers), cmocka_unit_test(test_assign),
        cmocka_unit_test(test_dropout_init_schedule), cmocka_unit_test(test_training),
        cmocka_unit_test(test_errors),      cmocka_unit_test(test_more_layers),
        cmocka_unit_test(test_module_interface), cmocka_unit_test(test_no_grad),
        cmocka_unit_test(test_losses_ex),   cmocka_unit_test(test_norm_layers),
        cmocka_unit_test(test_attention_layers),
        cmocka_unit_test(test_optimizer_resume), cmocka_unit_test(test_optimizer_groups),
        cmocka_unit_test(test_schedules),        cmocka_unit_test(test_grads_add),
        cmocka_unit_test(test_init),
    };
    return cmocka_run_group_tests(tests, load_golden, free_golden);
}
