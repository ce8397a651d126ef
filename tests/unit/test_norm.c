/*
 * test_norm.c — em_batch_norm, em_group_norm and em_rms_norm beyond the conformance table:
 *   - bad input: each check's status, a message naming the function, outputs untouched;
 *   - the composition from public ops (what a backend that leaves the slots NULL gets, the
 *     remote one): "bare", the ref table registered without the normalization slots and
 *     without EM_CAP_HOST_MEMORY, must give ref's outputs, running statistics and gradients;
 *   - autodiff: under both strategies a training forward updates the running statistics once
 *     (backward does not run the forward again), and an eval node keeps the statistics it
 *     used: its gradient does not change when the running statistics move afterwards.
 */
#include "errcheck.h"

#define BARE_ID (EM_BACKEND_EXTERNAL0 + 3)
static em_backend_ops bare_ops;

static em_device bare_dev(void) {
    static bool done;
    if (!done) {
        bare_ops = *em_backend_get_native(EM_BACKEND_REF);
        bare_ops.name = "bare";
        bare_ops.id = BARE_ID;
        bare_ops.caps &= ~(uint32_t)EM_CAP_HOST_MEMORY;
        bare_ops.batch_norm = NULL;
        bare_ops.batch_norm_backward = NULL;
        bare_ops.group_norm = NULL;
        bare_ops.rms_norm = NULL;
        assert_int_equal(em_backend_register(&bare_ops), EM_OK);
        done = true;
    }
    em_device d = {BARE_ID, 0, false, EM_CKPT_NONE};
    return d;
}

static em_device dev_of(const char *name) {
    em_device d;
    assert_int_equal(em_device_parse(name, &d), EM_OK);
    return d;
}

static uint64_t seed = 88172645463325252ull;
static double rnd(double lo, double hi) {
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
    return lo + (hi - lo) * (double)(seed >> 11) / 9007199254740992.0;
}

/* A tensor of the values v (rounded to dt: f64 or f32) on dev, a leaf on autodiff devices. */
static em_tensor *mkt(const double *v, const int64_t *shape, int rank, em_dtype dt,
                      em_device dev) {
    em_tensor *t = NULL;
    if (dt == EM_F64) {
        assert_int_equal(em_tensor_from_data(v, EM_F64, shape, rank, dev, &t), EM_OK);
        return t;
    }
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= shape[i];
    float *f = malloc((size_t)(n ? n : 1) * sizeof(float));
    assert_non_null(f);
    for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
    assert_int_equal(em_tensor_from_data(f, EM_F32, shape, rank, dev, &t), EM_OK);
    free(f);
    return t;
}

static void fill(double *v, int64_t n, double lo, double hi) {
    for (int64_t i = 0; i < n; i++) v[i] = rnd(lo, hi);
}

/* t's values as f64 into v (n of them). */
static void get(const em_tensor *t, double *v, int64_t n) {
    em_tensor *c = NULL;
    assert_int_equal(em_cast(t, EM_F64, &c), EM_OK);
    assert_int_equal(em_tensor_numel(c), n);
    assert_int_equal(em_tensor_to_data(c, v, (size_t)n * sizeof(double)), EM_OK);
    em_tensor_release(c);
}

static void same(const char *what, const em_tensor *a, const em_tensor *b, double tol) {
    const int64_t n = em_tensor_numel(a);
    assert_int_equal(em_tensor_numel(b), n);
    double *x = calloc((size_t)(n ? n : 1), sizeof(double)),
           *y = calloc((size_t)(n ? n : 1), sizeof(double));
    assert_non_null(x);
    assert_non_null(y);
    get(a, x, n);
    get(b, y, n);
    for (int64_t i = 0; i < n; i++)
        if (!(fabs(x[i] - y[i]) <= tol * (1 + fabs(y[i]))))
            fail_msg("%s: element %lld: %.12g vs %.12g", what, (long long)i, x[i], y[i]);
    free(x);
    free(y);
}

/* ---- bad input ---- */

static void test_errors(void **state) {
    (void)state;
    em_device ref = dev_of("ref"), fake = fake_dev();
    double v[64] = {0};
    fill(v, 64, -1, 1);
    const int64_t s3[3] = {2, 4, 3}, s1[1] = {4}, s3b[1] = {3}, s2[2] = {1, 4}, s11[1] = {6};
    em_tensor *x = mkt(v, s3, 3, EM_F32, ref), *c4 = mkt(v, s1, 1, EM_F32, ref),
              *c3 = mkt(v, s3b, 1, EM_F32, ref), *c4d = mkt(v, s1, 1, EM_F64, ref),
              *x1 = mkt(v, s2, 2, EM_F32, ref), *r1 = mkt(v, s11, 1, EM_F32, ref),
              *xi = NULL, *cf = mkt(v, s1, 1, EM_F32, fake);
    assert_int_equal(em_cast(x, EM_I32, &xi), EM_OK);
    const char *fn = "em_batch_norm";
    EXPECT_ERR(EM_ERR_ARG, fn, em_batch_norm(NULL, NULL, NULL, NULL, NULL, true, 0.1, 1e-5, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_batch_norm(x, NULL, NULL, NULL, NULL, true, 0.1, 1e-5, NULL));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_batch_norm(xi, NULL, NULL, NULL, NULL, true, 0.1, 1e-5, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_batch_norm(r1, NULL, NULL, NULL, NULL, true, 0.1, 1e-5, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_batch_norm(x, NULL, NULL, c3, NULL, true, 0.1, 1e-5, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_batch_norm(x, NULL, NULL, NULL, c3, true, 0.1, 1e-5, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_batch_norm(x, c3, c3, NULL, NULL, true, 0.1, 1e-5, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_batch_norm(x, c4d, c4d, NULL, NULL, true, 0.1, 1e-5, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_batch_norm(x, c4, NULL, NULL, NULL, true, 0.1, 1e-5, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_batch_norm(x, NULL, c4, NULL, NULL, true, 0.1, 1e-5, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_batch_norm(x, NULL, NULL, NULL, NULL, false, 0.1, 1e-5, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_batch_norm(x, NULL, NULL, NULL, NULL, true, 0.1, -1e-5, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_batch_norm(x, NULL, NULL, NULL, NULL, true, NAN, 1e-5, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_batch_norm(x, NULL, NULL, NULL, NULL, true, 0.1, INFINITY, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_batch_norm(x1, NULL, NULL, NULL, NULL, true, 0.1, 1e-5, &o));
    EXPECT_ERR_MSG(EM_ERR_DEVICE, fn, "fake",
                   em_batch_norm(x, NULL, NULL, cf, NULL, true, 0.1, 1e-5, &o));
    /* eval with one value per channel is fine */
    em_tensor *y = NULL;
    assert_int_equal(em_batch_norm(x1, c4, c4, NULL, NULL, false, 0.1, 1e-5, &y), EM_OK);
    em_tensor_release(y);

    fn = "em_group_norm";
    EXPECT_ERR(EM_ERR_ARG, fn, em_group_norm(NULL, 2, NULL, NULL, 1e-5, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_group_norm(x, 2, NULL, NULL, 1e-5, NULL));
    EXPECT_ERR(EM_ERR_ARG, fn, em_group_norm(x, 3, NULL, NULL, 1e-5, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_group_norm(x, 0, NULL, NULL, 1e-5, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_group_norm(x, -2, NULL, NULL, 1e-5, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_group_norm(x, 2, c3, NULL, 1e-5, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_group_norm(x, 2, NULL, c3, 1e-5, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_group_norm(x, 2, c4d, NULL, 1e-5, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_group_norm(x, 2, NULL, NULL, -1.0, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_group_norm(r1, 2, NULL, NULL, 1e-5, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_group_norm(xi, 2, NULL, NULL, 1e-5, &o));

    fn = "em_rms_norm";
    EXPECT_ERR(EM_ERR_ARG, fn, em_rms_norm(NULL, 1, NULL, 1e-5, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_rms_norm(x, 1, NULL, 1e-5, NULL));
    EXPECT_ERR(EM_ERR_ARG, fn, em_rms_norm(x, 0, NULL, 1e-5, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_rms_norm(x, 4, NULL, 1e-5, &o));
    EXPECT_ERR(EM_ERR_SHAPE, fn, em_rms_norm(x, 1, c4, 1e-5, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_rms_norm(x1, 1, c4d, 1e-5, &o));
    EXPECT_ERR(EM_ERR_ARG, fn, em_rms_norm(x, 1, c3, -1e-5, &o));
    EXPECT_ERR(EM_ERR_DTYPE, fn, em_rms_norm(xi, 1, NULL, 1e-5, &o));
    EXPECT_ERR_MSG(EM_ERR_DEVICE, fn, "fake", em_rms_norm(x1, 1, cf, 1e-5, &o));
    CHECKS_DONE();
    em_tensor_release(x), em_tensor_release(c4), em_tensor_release(c3), em_tensor_release(c4d);
    em_tensor_release(x1), em_tensor_release(r1), em_tensor_release(xi), em_tensor_release(cf);
}

/* ---- the composition against the slots ---- */

/* loss = sum(y * g) for fixed g; its gradients with respect to the tracked ins */
static void grads_of(const em_tensor *y, const double *gv, em_tensor *const *ins, int n,
                     em_tensor **out) {
    em_tensor *g = NULL, *p = NULL, *l = NULL, *g64 = NULL;
    em_grads *gr = NULL;
    assert_int_equal(em_tensor_from_data(gv, EM_F64, em_tensor_shape(y), em_tensor_rank(y),
                                         em_tensor_device(y), &g64),
                     EM_OK);
    assert_int_equal(em_cast(g64, em_tensor_dtype(y), &g), EM_OK);
    assert_int_equal(em_mul(y, g, &p), EM_OK);
    assert_int_equal(em_sum(p, &l), EM_OK);
    assert_int_equal(em_backward(l, &gr), EM_OK);
    for (int i = 0; i < n; i++) {
        out[i] = NULL;
        if (ins[i]) assert_int_equal(em_grads_get(gr, ins[i], &out[i]), EM_OK);
    }
    em_grads_release(gr);
    em_tensor_release(g64), em_tensor_release(g), em_tensor_release(p), em_tensor_release(l);
}

typedef struct run {
    em_tensor *y, *rm, *rv, *g[3];
} run;

/* op 0 batch_norm (training / eval), 1 group_norm, 2 rms_norm on dev, with the autodiff
 * wrapping when ad; same values for every device. */
static run run_op(int op, bool training, bool affine, em_dtype dt, em_device dev, bool ad) {
    static double xv[2 * 6 * 5], wv[6], bv[6], rmv[6], rvv[6], gv[2 * 6 * 5];
    static bool init;
    if (!init) {
        fill(xv, 60, 2, 5), fill(wv, 6, -2, 2), fill(bv, 6, -1, 1), fill(rmv, 6, -1, 1);
        fill(rvv, 6, 0.5, 2), fill(gv, 60, -1, 1);
        init = true;
    }
    em_device d = dev;
    if (ad) assert_int_equal(em_device_autodiff(dev, EM_CKPT_DISABLED, &d), EM_OK);
    const int64_t xs[3] = {2, 6, 5}, cs[1] = {6}, rs[1] = {5};
    run r = {0};
    em_tensor *x = mkt(xv, xs, 3, dt, d);
    em_tensor *w = affine ? mkt(wv, op == 2 ? rs : cs, 1, dt, d) : NULL;
    em_tensor *b = affine && op < 2 ? mkt(bv, cs, 1, dt, d) : NULL;
    if (ad) {
        if (em_tensor_require_grad(x) != EM_OK) fail_msg("%s", em_last_error());
        if (w) assert_int_equal(em_tensor_require_grad(w), EM_OK);
        if (b) assert_int_equal(em_tensor_require_grad(b), EM_OK);
    }
    if (op == 0) {
        r.rm = mkt(rmv, cs, 1, dt, dev);
        r.rv = mkt(rvv, cs, 1, dt, dev);
        em_status st = em_batch_norm(x, r.rm, r.rv, w, b, training, 0.3, 1e-4, &r.y);
        if (st != EM_OK) fail_msg("%s", em_last_error());
    } else if (op == 1) {
        assert_int_equal(em_group_norm(x, 3, w, b, 1e-4, &r.y), EM_OK);
    } else {
        assert_int_equal(em_rms_norm(x, 1, w, 1e-4, &r.y), EM_OK);
    }
    if (ad) {
        em_tensor *ins[3] = {x, w, b};
        grads_of(r.y, gv, ins, 3, r.g);
    }
    em_tensor_release(x), em_tensor_release(w), em_tensor_release(b);
    return r;
}

static void free_run(run *r) {
    em_tensor_release(r->y), em_tensor_release(r->rm), em_tensor_release(r->rv);
    for (int i = 0; i < 3; i++) em_tensor_release(r->g[i]);
}

static void test_composition(void **state) {
    (void)state;
    const em_device ref = dev_of("ref"), bare = bare_dev();
    const em_dtype dts[2] = {EM_F64, EM_F32};
    for (int t = 0; t < 2; t++)
        for (int op = 0; op < 3; op++)
            for (int mode = 0; mode < 4; mode++) {
                const bool training = mode < 2, affine = mode % 2 == 0;
                if (op > 0 && !training) continue;
                for (int ad = 0; ad < 2; ad++) {
                    const double tol = dts[t] == EM_F64 ? 1e-12 : 2e-5;
                    run a = run_op(op, training, affine, dts[t], ref, ad);
                    run b = run_op(op, training, affine, dts[t], bare, ad);
                    same("y", b.y, a.y, tol);
                    if (op == 0) {
                        same("running_mean", b.rm, a.rm, tol);
                        same("running_var", b.rv, a.rv, tol);
                    }
                    for (int i = 0; i < 3; i++) {
                        assert_true((a.g[i] == NULL) == (b.g[i] == NULL));
                        if (a.g[i]) same("gradient", b.g[i], a.g[i], tol * 10);
                    }
                    free_run(&a);
                    free_run(&b);
                }
            }
}

/* ---- autodiff and the running statistics ---- */

static void test_running_once(void **state) {
    (void)state;
    const em_checkpointing strat[2] = {EM_CKPT_DISABLED, EM_CKPT_BALANCED};
    const char *inner[2] = {"cpu", "ref"};
    double xv[4 * 3 * 2], rm0[3] = {0.5, -1, 2}, rv0[3] = {1, 2, 0.5};
    fill(xv, 24, -2, 2);
    const int64_t xs[3] = {4, 3, 2}, cs[1] = {3};
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 2; k++) {
            em_device dev;
            if (em_device_parse(inner[i], &dev) != EM_OK) continue;
            em_device d;
            assert_int_equal(em_device_autodiff(dev, strat[k], &d), EM_OK);
            /* the expected update: one plain call on ref */
            em_tensor *px = mkt(xv, xs, 3, EM_F64, dev_of("ref")), *prm = mkt(rm0, cs, 1, EM_F64,
                                                                         dev_of("ref")),
                      *prv = mkt(rv0, cs, 1, EM_F64, dev_of("ref")), *py = NULL;
            assert_int_equal(em_batch_norm(px, prm, prv, NULL, NULL, true, 0.5, 1e-5, &py), EM_OK);
            em_tensor *x = mkt(xv, xs, 3, EM_F64, d), *rm = mkt(rm0, cs, 1, EM_F64, d),
                      *rv = mkt(rv0, cs, 1, EM_F64, d), *y = NULL, *y2 = NULL, *g[1];
            assert_int_equal(em_tensor_require_grad(x), EM_OK);
            assert_int_equal(em_batch_norm(x, rm, rv, NULL, NULL, true, 0.5, 1e-5, &y), EM_OK);
            assert_true(em_tensor_is_tracked(y));
            /* a memory-bound consumer, so that BALANCED recomputes what it can */
            assert_int_equal(em_mul(y, y, &y2), EM_OK);
            em_tensor *ins[1] = {x};
            double gv[24];
            fill(gv, 24, -1, 1);
            grads_of(y2, gv, ins, 1, g);
            assert_non_null(g[0]);
            same("running_mean after backward", rm, prm, 1e-14);
            same("running_var after backward", rv, prv, 1e-14);
            em_tensor_release(px), em_tensor_release(prm), em_tensor_release(prv);
            em_tensor_release(py), em_tensor_release(x), em_tensor_release(rm);
            em_tensor_release(rv), em_tensor_release(y), em_tensor_release(y2);
            em_tensor_release(g[0]);
        }
}

/* An eval node's gradient uses the statistics of its forward, even after a training call
 * has updated the running ones in place. */
static void test_eval_snapshot(void **state) {
    (void)state;
    em_device d;
    em_device cpu;
    if (em_device_parse("cpu", &cpu) != EM_OK) cpu = dev_of("ref"); /* a build without cpu */
    assert_int_equal(em_device_autodiff(cpu, EM_CKPT_DISABLED, &d), EM_OK);
    double xv[2 * 2 * 3], w0[2] = {1.5, -0.5}, rm0[2] = {0.25, -0.5}, rv0[2] = {2, 0.5},
                          gv[12], gx[12];
    fill(xv, 12, -1, 1), fill(gv, 12, -1, 1);
    const int64_t xs[3] = {2, 2, 3}, cs[1] = {2};
    em_tensor *x = mkt(xv, xs, 3, EM_F64, d), *w = mkt(w0, cs, 1, EM_F64, d),
              *rm = mkt(rm0, cs, 1, EM_F64, d), *rv = mkt(rv0, cs, 1, EM_F64, d), *y = NULL,
              *y2 = NULL, *g[1];
    assert_int_equal(em_tensor_require_grad(x), EM_OK);
    assert_int_equal(em_batch_norm(x, rm, rv, w, NULL, false, 0.1, 1e-5, &y), EM_OK);
    assert_int_equal(em_batch_norm(x, rm, rv, w, NULL, true, 0.9, 1e-5, &y2), EM_OK);
    em_tensor *ins[1] = {x};
    grads_of(y, gv, ins, 1, g);
    get(g[0], gx, 12);
    for (int i = 0; i < 12; i++) {
        const int c = (i / 3) % 2;
        const double want = gv[i] * w0[c] / sqrt(rv0[c] + 1e-5);
        if (fabs(gx[i] - want) > 1e-12) fail_msg("gx[%d] = %.15g, want %.15g", i, gx[i], want);
    }
    em_tensor_release(x), em_tensor_release(w), em_tensor_release(rm), em_tensor_release(rv);
    em_tensor_release(y), em_tensor_release(y2), em_tensor_release(g[0]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_composition),
        cmocka_unit_test(test_running_once),
        cmocka_unit_test(test_eval_snapshot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
