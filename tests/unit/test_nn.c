/*
 * test_nn.c — include/ember/nn.h against PyTorch: each layer's forward and the gradients of
 * its input and parameters, the losses, clipping by norm, and 3 steps of SGD (momentum,
 * weight decay), Adam and AdamW on a tiny model, all in f64 against tests/nn/golden_nn.txt
 * (written by tests/nn/gen_nn.py) on every device of em_devices() wrapped for autodiff
 * (DISABLED and BALANCED). Parameters are set from the golden file with em_tensor_assign, so
 * the init does not matter. Also: em_tensor_assign's contract, dropout, init bounds, a small
 * training run on a separable 2-class problem on every device, and bad inputs.
 */
#include "errcheck.h"

#include "ember/nn.h"

#define TOL 1e-9

/* ---- the golden file ---- */

typedef struct garr {
    char name[64];
    int64_t n;
    double *v;
} garr;

static garr *G;
static size_t NG;

static int load_golden(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s", __FILE__);
    char *slash = strrchr(path, '/');
    if (!slash) return -1;
    *slash = '\0'; /* .../tests/unit */
    slash = strrchr(path, '/');
    if (!slash) return -1;
    snprintf(slash, sizeof path - (size_t)(slash - path), "/nn/golden_nn.txt");
    FILE *f = fopen(path, "r");
    if (!f) {
        print_error("cannot open %s\n", path);
        return -1;
    }
    size_t cap = 0;
    char name[64];
    int c;
    while ((c = fgetc(f)) != EOF) {
        if (c == '#') {
            while ((c = fgetc(f)) != EOF && c != '\n') {}
            continue;
        }
        if (c == '\n') continue;
        ungetc(c, f);
        long long n;
        if (fscanf(f, "%63s %lld", name, &n) != 2) break;
        if (NG == cap) {
            cap = cap ? 2 * cap : 64;
            G = realloc(G, cap * sizeof *G);
        }
        garr *a = &G[NG++];
        snprintf(a->name, sizeof a->name, "%s", name);
        a->n = n;
        a->v = malloc((size_t)(n ? n : 1) * sizeof(double));
        for (long long i = 0; i < n; i++)
            if (fscanf(f, "%lf", &a->v[i]) != 1) return -1;
    }
    fclose(f);
    return NG > 0 ? 0 : -1;
}

static int free_golden(void **state) {
    (void)state;
    for (size_t i = 0; i < NG; i++) free(G[i].v);
    free(G);
    return 0;
}

static const garr *gget(const char *name) {
    for (size_t i = 0; i < NG; i++)
        if (strcmp(G[i].name, name) == 0) return &G[i];
    fail_msg("golden array %s missing", name);
    return NULL;
}

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

static em_tensor *labels(const garr *a, em_device dev) {
    int64_t *v = malloc((size_t)a->n * sizeof *v);
    for (int64_t i = 0; i < a->n; i++) v[i] = (int64_t)a->v[i];
    em_tensor *t = NULL;
    assert_int_equal(em_tensor_from_data(v, EM_I64, &a->n, 1, dev, &t), EM_OK);
    free(v);
    return t;
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
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, load_golden, free_golden);
}
