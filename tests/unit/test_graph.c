/*
 * test_graph.c — captured graphs (include/ember/graph.h): recording on the capture device,
 * replay on ref and cpu against the same program run eagerly there (the same bits), a whole
 * SGD training step as one graph whose parameters and momentum carry over from run to run,
 * Adam and AdamW steps captured (their step count the graph's state), saved, loaded and replayed
 * with the bits of the eager steps (parameters, moments, step counts),
 * and the errors: values read off capture tensors, inputs of the wrong shape, dtype, device or
 * count, indices out of range found when the graph runs, a second capture, tensors of an
 * ended capture.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ember/ember.h"
#include "ember/graph.h"
#include "ember/nn.h"

#define OK(x) assert_int_equal((x), EM_OK)

#include "graph_check.h"

static const float W1[12] = {0.5f, -0.25f, 0.125f, 1.0f, -0.5f, 0.75f,
                             0.3f, 0.2f,   -0.1f,  0.6f, -0.7f, 0.05f};
static const float B1[3] = {0.1f, -0.2f, 0.05f};
static const int64_t W1S[2] = {4, 3}, B1S[1] = {3}, XS[2] = {5, 4};

static void batch(int k, float *x) {
    for (int i = 0; i < 20; i++) x[i] = sinf(0.37f * (float)(i + 7 * k)) * 1.5f;
}

/* y = gelu(x @ w + b) - 0.5 * x[:, :3].sum(-1, keepdim), a forward with a view and a
 * reduction: returns y (new reference). */
static em_tensor *forward(const em_tensor *x, const em_tensor *w, const em_tensor *b) {
    em_tensor *h = NULL, *hb = NULL, *g = NULL, *s = NULL, *sl = NULL, *sm = NULL, *y = NULL;
    OK(em_matmul(x, w, &h));
    OK(em_add(h, b, &hb));
    OK(em_gelu(hb, &g));
    OK(em_slice(x, 1, 0, 3, 1, &sl));
    OK(em_sum_dim(sl, -1, true, &s));
    OK(em_mul_scalar(s, 0.5, &sm));
    OK(em_sub(g, sm, &y));
    em_tensor *all[] = {h, hb, g, s, sl, sm};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) em_tensor_release(all[i]);
    return y;
}

static void test_replay_is_eager(void **state) {
    (void)state;
    em_device cap = dev_of("capture");
    em_graph *g = NULL;
    OK(em_graph_begin(&g));
    em_tensor *w = from(W1, EM_F32, W1S, 2, cap), *b = from(B1, EM_F32, B1S, 1, cap), *x = NULL;
    OK(em_graph_input(g, "x", EM_F32, XS, 2, cap, &x));
    em_tensor *y = forward(x, w, b);
    OK(em_graph_output(g, "y", y));
    OK(em_graph_name(g, "w", w));
    OK(em_graph_end(g));
    assert_true(em_graph_kernel_count(g) >= 5);
    assert_int_equal(em_graph_input_count(g), 1);
    assert_int_equal(em_graph_output_count(g), 1);
    em_device devs[2];
    int nd = replay_devices(devs);
    for (int d = 0; d < nd; d++) {
        em_tensor *we = from(W1, EM_F32, W1S, 2, devs[d]), *be = from(B1, EM_F32, B1S, 1, devs[d]);
        em_exec *e = NULL;
        OK(em_graph_prepare(g, devs[d], &e));
        for (int k = 0; k < 3; k++) {
            float xv[20];
            batch(k, xv);
            em_tensor *xe = from(xv, EM_F32, XS, 2, devs[d]);
            em_tensor *ye = forward(xe, we, be), *out[1] = {NULL};
            const em_tensor *in[1] = {xe};
            OK(em_exec_run(e, in, 1, out, 1));
            same_bits(ye, out[0]);
            em_tensor_release(out[0]);
            em_tensor_release(ye);
            em_tensor_release(xe);
        }
        em_tensor *ws = NULL;
        OK(em_exec_state(e, "w", &ws));
        same_bits(ws, we);
        em_tensor_release(ws);
        assert_int_equal(em_exec_state(e, "nope", &ws), EM_ERR_ARG);
        em_exec_release(e);
        em_tensor_release(we);
        em_tensor_release(be);
    }
    em_tensor_release(y);
    em_tensor_release(x);
    em_tensor_release(w);
    em_tensor_release(b);
    em_graph_release(g);
}

/* One SGD step (momentum 0.9) of a two-layer classifier on dev (an autodiff device); returns
 * the loss (new reference). */
static em_tensor *train_step_scaled(em_optimizer *opt, em_tensor *w1, em_tensor *w2,
                                    const em_tensor *x, const em_tensor *labels,
                                    double grad_scale) {
    em_tensor *h = NULL, *r = NULL, *logits = NULL, *loss = NULL;
    OK(em_matmul(x, w1, &h));
    OK(em_relu(h, &r));
    OK(em_matmul(r, w2, &logits));
    OK(em_cross_entropy(logits, labels, &loss));
    em_grads *gr = NULL;
    OK(em_backward(loss, &gr));
    OK(em_optimizer_step(opt, gr, grad_scale));
    em_grads_release(gr);
    em_tensor_release(h);
    em_tensor_release(r);
    em_tensor_release(logits);
    (void)w1;
    (void)w2;
    return loss;
}

static em_tensor *train_step(em_optimizer *opt, em_tensor *w1, em_tensor *w2,
                             const em_tensor *x, const em_tensor *labels) {
    return train_step_scaled(opt, w1, w2, x, labels, 1.0);
}

static const float W2[6] = {0.2f, -0.3f, 0.5f, 0.1f, -0.4f, 0.25f};
static const int64_t W2S[2] = {3, 2}, LS[1] = {5};

static void labels_of(int k, int64_t *l) {
    for (int i = 0; i < 5; i++) l[i] = (i + k) % 2;
}

/* Parameters w1, w2 on dev, in an em_params, with an SGD optimizer. */
static void make_model(em_device dev, em_tensor **w1, em_tensor **w2, em_params **p,
                       em_optimizer **opt) {
    *w1 = from(W1, EM_F32, W1S, 2, dev);
    *w2 = from(W2, EM_F32, W2S, 2, dev);
    OK(em_tensor_require_grad(*w1));
    OK(em_tensor_require_grad(*w2));
    OK(em_params_create(p));
    OK(em_params_add(*p, "w1", w1));
    OK(em_params_add(*p, "w2", w2));
    OK(em_optimizer_sgd(*p, 0.1, 0.9, 0, opt));
}

static void test_training_step_is_one_graph(void **state) {
    (void)state;
    em_device cap = dev_of("capture+autodiff");
    em_graph *g = NULL;
    OK(em_graph_begin(&g));
    em_tensor *w1, *w2, *x = NULL, *labels = NULL;
    em_params *p;
    em_optimizer *opt;
    make_model(cap, &w1, &w2, &p, &opt);
    OK(em_graph_input(g, "x", EM_F32, XS, 2, cap, &x));
    OK(em_graph_input(g, "labels", EM_I64, LS, 1, cap, &labels));
    em_tensor *loss = train_step(opt, w1, w2, x, labels);
    OK(em_graph_output(g, "loss", loss));
    OK(em_graph_name(g, "w1", w1));
    OK(em_graph_name(g, "w2", w2));
    OK(em_graph_end(g));
    em_tensor_release(loss);
    em_tensor_release(x);
    em_tensor_release(labels);
    em_optimizer_release(opt);
    em_params_release(p);
    em_tensor_release(w1);
    em_tensor_release(w2);

    em_device devs[2];
    int nd = replay_devices(devs);
    for (int d = 0; d < nd; d++) {
        em_device ad;
        OK(em_device_autodiff(devs[d], EM_CKPT_DISABLED, &ad));
        make_model(ad, &w1, &w2, &p, &opt);
        em_exec *e = NULL;
        OK(em_graph_prepare(g, devs[d], &e));
        for (int k = 0; k < 4; k++) {
            float xv[20];
            int64_t lv[5];
            batch(k, xv);
            labels_of(k, lv);
            em_tensor *xe = from(xv, EM_F32, XS, 2, ad), *le = from(lv, EM_I64, LS, 1, ad);
            em_tensor *eager = train_step(opt, w1, w2, xe, le), *out[1] = {NULL};
            em_tensor *xr = from(xv, EM_F32, XS, 2, devs[d]), *lr = from(lv, EM_I64, LS, 1, devs[d]);
            const em_tensor *in[2] = {xr, lr};
            OK(em_exec_run(e, in, 2, out, 1));
            same_bits(eager, out[0]);
            em_tensor *ws = NULL;
            OK(em_exec_state(e, "w1", &ws));
            same_bits(w1, ws);
            em_tensor_release(ws);
            OK(em_exec_state(e, "w2", &ws));
            same_bits(w2, ws);
            em_tensor_release(ws);
            em_tensor *all[] = {xe, le, eager, out[0], xr, lr};
            for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) em_tensor_release(all[i]);
        }
        em_exec_release(e);
        em_optimizer_release(opt);
        em_params_release(p);
        em_tensor_release(w1);
        em_tensor_release(w2);
    }
    em_graph_release(g);
}


/* Asserts a and b (any dtype) hold the same bytes. */
static void same_bytes(const em_tensor *a, const em_tensor *b) {
    assert_int_equal(em_tensor_dtype(a), em_tensor_dtype(b));
    assert_int_equal(em_tensor_numel(a), em_tensor_numel(b));
    size_t n = (size_t)em_tensor_numel(a) * em_dtype_size(em_tensor_dtype(a));
    unsigned char x[1024], y[1024];
    assert_true(n <= sizeof x);
    OK(em_tensor_to_data(a, x, sizeof x));
    OK(em_tensor_to_data(b, y, sizeof y));
    assert_memory_equal(x, y, n);
}

/* The devices an Adam replay is checked on: ref, cpu, and opencl:0 where present. */
static int adam_devices(em_device *out) {
    int n = replay_devices(out);
    em_device d;
    if (em_device_parse("opencl:0", &d) == EM_OK) out[n++] = d;
    return n;
}

static em_status make_adam(bool adamw, const em_params *p, double wd, em_optimizer **opt) {
    return adamw ? em_optimizer_adamw(p, 0.05, 0.9, 0.99, 1e-6, wd, opt)
                 : em_optimizer_adam(p, 0.05, 0.9, 0.99, 1e-6, wd, opt);
}

/* Adam or AdamW (weight decay wd, gradients scaled by gs) as one captured training step: on
 * each device, 2 eager steps, then the graph captured from that state (the parameters' values,
 * the optimizer's state loaded from its file: step counts 2), saved, loaded and replayed 5
 * times against 5 more eager steps: the loss, the parameters, the moments and the step counts
 * have the same bits after every run. */
static void adam_case(bool adamw, double wd, double gs) {
    char dir[] = "/tmp/ember-test-graph-adam-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char opath[96], gpath[96];
    snprintf(opath, sizeof opath, "%s/opt.safetensors", dir);
    snprintf(gpath, sizeof gpath, "%s/g.safetensors", dir);
    em_device devs[3];
    int nd = adam_devices(devs);
    for (int d = 0; d < nd; d++) {
        em_device ad, cap = dev_of("capture+autodiff");
        OK(em_device_autodiff(devs[d], EM_CKPT_DISABLED, &ad));
        em_tensor *w1 = from(W1, EM_F32, W1S, 2, ad), *w2 = from(W2, EM_F32, W2S, 2, ad);
        OK(em_tensor_require_grad(w1));
        OK(em_tensor_require_grad(w2));
        em_params *p = NULL;
        OK(em_params_create(&p));
        OK(em_params_add(p, "w1", &w1));
        OK(em_params_add(p, "w2", &w2));
        em_optimizer *opt = NULL;
        OK(make_adam(adamw, p, wd, &opt));
        float xv[20];
        int64_t lv[5];
        for (int k = 0; k < 2; k++) { /* the state the capture starts from */
            batch(k, xv);
            labels_of(k, lv);
            em_tensor *xe = from(xv, EM_F32, XS, 2, ad), *le = from(lv, EM_I64, LS, 1, ad);
            em_tensor_release(train_step_scaled(opt, w1, w2, xe, le, gs));
            em_tensor_release(xe);
            em_tensor_release(le);
        }
        OK(em_optimizer_save(opt, opath));
        float v1[12], v2[6];
        OK(em_tensor_to_data(w1, v1, sizeof v1));
        OK(em_tensor_to_data(w2, v2, sizeof v2));

        /* the capture: the same parameters and optimizer state, in the setup */
        em_graph *g = NULL;
        OK(em_graph_begin(&g));
        em_tensor *c1 = from(v1, EM_F32, W1S, 2, cap), *c2 = from(v2, EM_F32, W2S, 2, cap);
        OK(em_tensor_require_grad(c1));
        OK(em_tensor_require_grad(c2));
        em_params *cp = NULL, *cst = NULL;
        OK(em_params_create(&cp));
        OK(em_params_add(cp, "w1", &c1));
        OK(em_params_add(cp, "w2", &c2));
        em_optimizer *copt = NULL;
        OK(make_adam(adamw, cp, wd, &copt));
        OK(em_optimizer_load(copt, opath));
        em_tensor *x = NULL, *labels = NULL;
        OK(em_graph_input(g, "x", EM_F32, XS, 2, cap, &x));
        OK(em_graph_input(g, "labels", EM_I64, LS, 1, cap, &labels));
        em_tensor *loss = train_step_scaled(copt, c1, c2, x, labels, gs);
        OK(em_graph_output(g, "loss", loss));
        OK(em_graph_name(g, "w1", c1));
        OK(em_graph_name(g, "w2", c2));
        /* the optimizer's state after a captured step: the graph's moments and step counts */
        OK(em_params_create(&cst));
        OK(em_optimizer_state(copt, cst));
        assert_int_equal(em_params_count(cst), 6);
        for (size_t i = 0; i < em_params_count(cst); i++)
            OK(em_graph_name(g, em_params_name(cst, i), em_params_get(cst, i)));
        OK(em_graph_end(g));
        em_params_release(cst);
        em_tensor *all[] = {loss, x, labels, c1, c2};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) em_tensor_release(all[i]);
        em_optimizer_release(copt);
        em_params_release(cp);
        /* saved and loaded between */
        OK(em_graph_save(g, gpath));
        em_graph_release(g);
        g = NULL;
        OK(em_graph_load(gpath, &g));

        em_exec *e = NULL;
        OK(em_graph_prepare(g, devs[d], &e));
        for (int k = 2; k < 7; k++) {
            batch(k, xv);
            labels_of(k, lv);
            em_tensor *xe = from(xv, EM_F32, XS, 2, ad), *le = from(lv, EM_I64, LS, 1, ad);
            em_tensor *eager = train_step_scaled(opt, w1, w2, xe, le, gs), *out[1] = {NULL};
            em_tensor *xr = from(xv, EM_F32, XS, 2, devs[d]), *lr = from(lv, EM_I64, LS, 1, devs[d]);
            const em_tensor *in[2] = {xr, lr};
            OK(em_exec_run(e, in, 2, out, 1));
            same_bits(eager, out[0]);
            em_tensor *ws = NULL;
            OK(em_exec_state(e, "w1", &ws));
            same_bits(w1, ws);
            em_tensor_release(ws);
            OK(em_exec_state(e, "w2", &ws));
            same_bits(w2, ws);
            em_tensor_release(ws);
            em_tensor *rel[] = {xe, le, eager, out[0], xr, lr};
            for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) em_tensor_release(rel[i]);
        }
        /* the moments and the step counts (7 = 2 + 5) */
        em_params *st = NULL;
        OK(em_params_create(&st));
        OK(em_optimizer_state(opt, st));
        assert_int_equal(em_params_count(st), 6);
        for (size_t i = 0; i < em_params_count(st); i++) {
            em_tensor *rs = NULL;
            OK(em_exec_state(e, em_params_name(st, i), &rs));
            same_bytes(em_params_get(st, i), rs);
            if (strstr(em_params_name(st, i), ".step")) {
                int64_t t = 0;
                OK(em_tensor_to_data(rs, &t, sizeof t));
                assert_int_equal(t, 7);
            }
            em_tensor_release(rs);
        }
        em_params_release(st);
        em_exec_release(e);
        em_graph_release(g);
        em_optimizer_release(opt);
        em_params_release(p);
        em_tensor_release(w1);
        em_tensor_release(w2);
    }
    remove(opath);
    remove(gpath);
    rmdir(dir);
}

static void test_adam_step_is_one_graph(void **state) {
    (void)state;
    adam_case(false, 0.01, 1.0); /* Adam, L2 weight decay */
    adam_case(false, 0.0, 0.5);  /* Adam, gradients scaled */
}

static void test_adamw_step_is_one_graph(void **state) {
    (void)state;
    adam_case(true, 0.1, 0.75); /* AdamW, decoupled decay, gradients scaled */
    adam_case(true, 0.0, 1.0);
}

/* A parameter of dtype dt (on dev, or capture+autodiff) with the values of PV. */
static const float PV[7] = {0.5f, -1.5f, 2.25f, 0.0f, 3.0f, -0.125f, 1e-3f};
static const int64_t PS[1] = {7};

static em_tensor *param_of(em_dtype dt, em_device dev) {
    em_device inner = dev;
    inner.autodiff = false;
    inner.checkpointing = EM_CKPT_NONE;
    em_tensor *f = from(PV, EM_F32, PS, 1, inner), *c = NULL, *p = NULL;
    OK(em_cast(f, dt, &c));
    OK(em_to_device(c, dev, &p));
    OK(em_tensor_require_grad(p));
    em_tensor_release(f);
    em_tensor_release(c);
    return p;
}

/* Each float dtype, Adam and AdamW (weight decay 0.1, gradients scaled by 0.5), gradients
 * given by hand (em_grads_set: a graph input): 4 runs are 4 eager steps on every device, bit
 * for bit (f16 and bf16 too, whose fused and composed steps differ: the replay takes the form
 * the eager step takes). */
static void test_adam_dtypes(void **state) {
    (void)state;
    static const em_dtype dts[4] = {EM_F32, EM_F64, EM_F16, EM_BF16};
    em_device devs[3], cap = dev_of("capture"), capad = dev_of("capture+autodiff");
    int nd = adam_devices(devs);
    for (int t = 0; t < 4; t++)
        for (int w = 0; w < 2; w++) {
            const em_dtype dt = dts[t];
            em_graph *g = NULL;
            OK(em_graph_begin(&g));
            em_tensor *cp = param_of(dt, capad), *gin = NULL;
            em_params *ps = NULL;
            em_optimizer *o = NULL;
            OK(em_params_create(&ps));
            OK(em_params_add(ps, "p", &cp));
            OK(make_adam(w == 1, ps, 0.1, &o));
            OK(em_graph_input(g, "g", dt, PS, 1, cap, &gin));
            em_grads *gs = NULL;
            OK(em_grads_create(&gs));
            OK(em_grads_set(gs, cp, gin));
            OK(em_optimizer_step(o, gs, 0.5));
            em_grads_release(gs);
            OK(em_graph_name(g, "p", cp));
            OK(em_graph_end(g));
            em_optimizer_release(o);
            em_params_release(ps);
            em_tensor_release(gin);
            em_tensor_release(cp);
            for (int d = 0; d < nd; d++) {
                em_device ad;
                OK(em_device_autodiff(devs[d], EM_CKPT_DISABLED, &ad));
                em_tensor *p = param_of(dt, ad);
                OK(em_params_create(&ps));
                OK(em_params_add(ps, "p", &p));
                OK(make_adam(w == 1, ps, 0.1, &o));
                em_exec *e = NULL;
                OK(em_graph_prepare(g, devs[d], &e));
                for (int k = 0; k < 4; k++) {
                    float gv[7];
                    for (int i = 0; i < 7; i++) gv[i] = (float)((i - 3) * 0.37 + k * 0.11);
                    em_tensor *gf = from(gv, EM_F32, PS, 1, devs[d]), *gt = NULL, *r = NULL;
                    OK(em_cast(gf, dt, &gt));
                    OK(em_grads_create(&gs));
                    OK(em_grads_set(gs, p, gt));
                    OK(em_optimizer_step(o, gs, 0.5));
                    em_grads_release(gs);
                    const em_tensor *in[1] = {gt};
                    OK(em_exec_run(e, in, 1, NULL, 0));
                    OK(em_exec_state(e, "p", &r));
                    same_bytes(p, r);
                    em_tensor_release(r);
                    em_tensor_release(gt);
                    em_tensor_release(gf);
                }
                em_exec_release(e);
                em_optimizer_release(o);
                em_params_release(ps);
                em_tensor_release(p);
            }
            em_graph_release(g);
        }
}

/* Adam's state made in the step (the optimizer made after the first input) would be made anew
 * by every run: the captured step refuses it. */
static void test_adam_state_in_the_step(void **state) {
    (void)state;
    em_device cap = dev_of("capture+autodiff");
    em_graph *g = NULL;
    OK(em_graph_begin(&g));
    em_tensor *w1 = from(W1, EM_F32, W1S, 2, cap), *w2 = from(W2, EM_F32, W2S, 2, cap);
    OK(em_tensor_require_grad(w1));
    OK(em_tensor_require_grad(w2));
    em_tensor *x = NULL, *labels = NULL;
    OK(em_graph_input(g, "x", EM_F32, XS, 2, cap, &x));
    OK(em_graph_input(g, "labels", EM_I64, LS, 1, cap, &labels));
    em_params *p = NULL;
    OK(em_params_create(&p));
    OK(em_params_add(p, "w1", &w1));
    OK(em_params_add(p, "w2", &w2));
    em_optimizer *opt = NULL;
    OK(em_optimizer_adam(p, 0.01, 0.9, 0.999, 1e-8, 0, &opt));
    em_tensor *h = NULL, *logits = NULL, *loss = NULL;
    OK(em_matmul(x, w1, &h));
    OK(em_matmul(h, w2, &logits));
    OK(em_cross_entropy(logits, labels, &loss));
    em_grads *gr = NULL;
    OK(em_backward(loss, &gr));
    assert_int_equal(em_optimizer_step(opt, gr, 1.0), EM_ERR_STATE);
    assert_non_null(strstr(em_last_error(), "made in the step"));
    em_grads_release(gr);
    em_tensor *all[] = {h, logits, loss, x, labels, w1, w2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) em_tensor_release(all[i]);
    em_optimizer_release(opt);
    em_params_release(p);
    OK(em_graph_end(g));
    em_graph_release(g);
}

/* The gradient of act(x @ w) summed, w a parameter, for the unary op of index `a` (the ops
 * whose gradient a device may fuse: backend.h's unary_backward); returns the gradient of w
 * (new reference). */
static em_tensor *act_grad(int a, const em_tensor *x, em_tensor *w) {
    em_tensor *h = NULL, *y = NULL, *l = NULL, *gw = NULL;
    OK(em_matmul(x, w, &h));
    switch (a) {
    case 0: OK(em_gelu(h, &y)); break;
    case 1: OK(em_tanh(h, &y)); break;
    case 2: OK(em_sigmoid(h, &y)); break;
    case 3: OK(em_silu(h, &y)); break;
    case 4: OK(em_relu(h, &y)); break;
    case 5: OK(em_clamp(h, -0.3, 0.7, &y)); break;
    default: OK(em_exp(h, &y)); break;
    }
    OK(em_sum(y, &l));
    em_grads *gr = NULL;
    OK(em_backward(l, &gr));
    OK(em_grads_get(gr, w, &gw));
    em_grads_release(gr);
    em_tensor_release(h);
    em_tensor_release(y);
    em_tensor_release(l);
    return gw;
}

/* A captured backward of a unary op whose gradient a device fuses (unary_backward) is recorded
 * as the fused call with its composition as the alternative: each device replays what its
 * eager run computes (the fused kernel on ref, cpu and opencl, the composition with
 * EMBER_FUSED=0 in test_graph_composed), so the gradients have eager's bits. */
static void test_fused_gradients_replay(void **state) {
    (void)state;
    em_device cap = dev_of("capture+autodiff");
    for (int a = 0; a < 7; a++) {
        em_graph *g = NULL;
        OK(em_graph_begin(&g));
        em_tensor *w = from(W1, EM_F32, W1S, 2, cap), *x = NULL;
        OK(em_tensor_require_grad(w));
        OK(em_graph_input(g, "x", EM_F32, XS, 2, cap, &x));
        em_tensor *gw = act_grad(a, x, w);
        OK(em_graph_output(g, "gw", gw));
        OK(em_graph_end(g));
        em_tensor_release(gw);
        em_tensor_release(x);
        em_tensor_release(w);
        em_device devs[3];
        int nd = adam_devices(devs);
        for (int d = 0; d < nd; d++) {
            em_device ad;
            OK(em_device_autodiff(devs[d], EM_CKPT_DISABLED, &ad));
            em_tensor *we = from(W1, EM_F32, W1S, 2, ad);
            OK(em_tensor_require_grad(we));
            em_exec *e = NULL;
            OK(em_graph_prepare(g, devs[d], &e));
            for (int k = 0; k < 2; k++) {
                float xv[20];
                batch(k, xv);
                em_tensor *xe = from(xv, EM_F32, XS, 2, ad), *xr = from(xv, EM_F32, XS, 2, devs[d]);
                em_tensor *eager = act_grad(a, xe, we), *out[1] = {NULL};
                const em_tensor *in[1] = {xr};
                OK(em_exec_run(e, in, 1, out, 1));
                same_bits(eager, out[0]);
                em_tensor_release(out[0]);
                em_tensor_release(eager);
                em_tensor_release(xe);
                em_tensor_release(xr);
            }
            em_exec_release(e);
            em_tensor_release(we);
        }
        em_graph_release(g);
    }
}


static void test_no_values_on_capture(void **state) {
    (void)state;
    em_device cap = dev_of("capture");
    em_graph *g = NULL;
    OK(em_graph_begin(&g));
    em_tensor *w = from(W1, EM_F32, W1S, 2, cap), *s = NULL, *c = NULL;
    OK(em_sum(w, &s));
    float v[12];
    double item = 0;
    assert_int_equal(em_tensor_to_data(w, v, sizeof v), EM_ERR_STATE);
    assert_non_null(strstr(em_last_error(), "no values"));
    assert_int_equal(em_tensor_item(s, &item), EM_ERR_STATE);
    assert_int_equal(em_to_device(w, dev_of("ref"), &c), EM_ERR_STATE);
    assert_null(c);
    /* one capture at a time */
    em_graph *g2 = NULL;
    assert_int_equal(em_graph_begin(&g2), EM_ERR_STATE);
    assert_null(g2);
    /* shapes and dtypes are checked as on any device */
    em_tensor *bad = NULL;
    assert_int_equal(em_matmul(w, w, &bad), EM_ERR_SHAPE);
    assert_non_null(strstr(em_last_error(), "em_matmul"));
    /* inputs live on the capture device; outputs are its tensors */
    em_tensor *x = NULL, *r = from(W1, EM_F32, W1S, 2, dev_of("ref"));
    assert_int_equal(em_graph_input(g, "x", EM_F32, XS, 2, dev_of("ref"), &x), EM_ERR_DEVICE);
    assert_int_equal(em_graph_input(g, "bad name", EM_F32, XS, 2, cap, &x), EM_ERR_ARG);
    assert_int_equal(em_graph_output(g, "r", r), EM_ERR_DEVICE);
    OK(em_graph_input(g, "x", EM_F32, XS, 2, cap, &x));
    assert_int_equal(em_graph_input(g, "x", EM_F32, XS, 2, cap, &bad), EM_ERR_ARG);
    /* a tensor made in the step is no state; one of the setup is */
    em_tensor *sx = NULL;
    OK(em_sum(x, &sx));
    assert_int_equal(em_graph_name(g, "sx", sx), EM_ERR_ARG);
    OK(em_graph_name(g, "s", s));
    OK(em_graph_output(g, "sx", sx));
    em_tensor_release(sx);
    assert_int_equal(em_graph_prepare(g, dev_of("ref"), &(em_exec *){NULL}), EM_ERR_STATE);
    OK(em_graph_end(g));
    assert_int_equal(em_graph_end(g), EM_ERR_STATE);
    /* the capture is over: its tensors take no more ops */
    em_tensor *t = NULL;
    assert_int_equal(em_add(w, w, &t), EM_ERR_STATE);
    assert_null(t);
    /* a new capture does not take them either */
    OK(em_graph_begin(&g2));
    assert_int_equal(em_add(w, w, &t), EM_ERR_STATE);
    assert_int_equal(em_graph_output(g2, "w", w), EM_ERR_STATE);
    em_graph_release(g2); /* releasing an open capture closes it */
    OK(em_graph_begin(&g2));
    em_graph_release(g2);
    em_tensor_release(x);
    em_tensor_release(r);
    em_tensor_release(s);
    em_tensor_release(w);
    em_graph_release(g);
}

static void test_run_checks_inputs(void **state) {
    (void)state;
    em_device cap = dev_of("capture"), ref = dev_of("ref");
    em_graph *g = NULL;
    OK(em_graph_begin(&g));
    float tab[12] = {0};
    em_tensor *table = from(tab, EM_F32, W1S, 2, cap), *ix = NULL, *y = NULL;
    int64_t is[1] = {3};
    OK(em_graph_input(g, "ix", EM_I64, is, 1, cap, &ix));
    OK(em_index_select(table, 0, ix, &y)); /* not range-checked now: no values */
    OK(em_graph_output(g, "y", y));
    OK(em_graph_end(g));
    em_exec *e = NULL;
    OK(em_graph_prepare(g, ref, &e));
    int64_t good[3] = {0, 3, 1}, bad[3] = {0, 4, 1}, two[2] = {0, 1};
    em_tensor *tg = from(good, EM_I64, is, 1, ref), *tb = from(bad, EM_I64, is, 1, ref);
    int64_t s2[1] = {2};
    em_tensor *t2 = from(two, EM_I64, s2, 1, ref), *out[1] = {NULL};
    float fv[3] = {0};
    em_tensor *tf = from(fv, EM_F32, is, 1, ref);
    const em_tensor *in[1] = {tg};
    OK(em_exec_run(e, in, 1, out, 1));
    assert_int_equal(em_tensor_rank(out[0]), 2);
    em_tensor_release(out[0]);
    in[0] = tb;
    assert_int_equal(em_exec_run(e, in, 1, out, 1), EM_ERR_ARG);
    assert_non_null(strstr(em_last_error(), "out of range"));
    in[0] = t2;
    assert_int_equal(em_exec_run(e, in, 1, out, 1), EM_ERR_SHAPE);
    assert_non_null(strstr(em_last_error(), "'ix'"));
    in[0] = tf;
    assert_int_equal(em_exec_run(e, in, 1, out, 1), EM_ERR_DTYPE);
    assert_non_null(strstr(em_last_error(), "'ix'"));
    assert_int_equal(em_exec_run(e, in, 0, out, 1), EM_ERR_ARG);
    em_device cpu;
    if (em_device_parse("cpu", &cpu) == EM_OK) {
        em_tensor *tc = from(good, EM_I64, is, 1, cpu);
        in[0] = tc;
        assert_int_equal(em_exec_run(e, in, 1, out, 1), EM_ERR_DEVICE);
        em_tensor_release(tc);
    }
    /* still good after the failures */
    in[0] = tg;
    OK(em_exec_run(e, in, 1, NULL, 0));
    em_exec_release(e);
    em_tensor *all[] = {table, ix, y, tg, tb, t2, tf};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) em_tensor_release(all[i]);
    em_graph_release(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_is_eager),
        cmocka_unit_test(test_training_step_is_one_graph),
        cmocka_unit_test(test_adam_step_is_one_graph),
        cmocka_unit_test(test_adamw_step_is_one_graph),
        cmocka_unit_test(test_adam_dtypes),
        cmocka_unit_test(test_adam_state_in_the_step),
        cmocka_unit_test(test_fused_gradients_replay),
        cmocka_unit_test(test_no_values_on_capture),
        cmocka_unit_test(test_run_checks_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
