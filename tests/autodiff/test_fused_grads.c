/*
 * test_fused_grads.c — the fused kernel slots of backend.h (ABI 3) against the composed paths
 * they replace, on every device em_devices() lists:
 *
 *   - unary_backward: for every fused op, every float dtype the device runs (f32, f64, f16,
 *     bf16) and inputs that are contiguous (odd sizes, one above the pool's grain), transposed,
 *     sliced with an offset and a step, broadcast (stride 0) and empty, the gradient that
 *     em_backward gives on D+autodiff (DISABLED and BALANCED) with the fused kernels on and
 *     with them off (the composed rule) must both match the composed rule on ref in f64 run on
 *     the same values, within the dtype's tolerance; the output gradient is a dense tensor
 *     (loss sum(y * w)) and a broadcast one (loss sum(y));
 *   - adam_step: three Adam / AdamW steps (weight decay 0 and not, grad_scale 1 and not) with
 *     the kernel and composed: the same bits for f32 and f64 on ref and cpu, close elsewhere;
 *     a strided gradient gives what its contiguous copy gives;
 *   - the entry points' checks: bad ops, shapes, dtypes, tracked inputs, NULLs.
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

#include "ember/ember.h"
#include "ember/nn.h"
#include "ops/fused.h"

#define MAXDEV 16
static em_device g_dev[MAXDEV];
static int g_ndev;

static const em_dtype DTYPES[] = {EM_F32, EM_F64, EM_F16, EM_BF16};

typedef struct opcase {
    em_unary_op op;
    const char *name;
    double lo, hi; /* the inputs' range */
} opcase;

static const opcase OPS[] = {
    {EM_UN_ABS, "abs", -2, 2},        {EM_UN_EXP, "exp", -2, 2},
    {EM_UN_LOG, "log", 0.5, 3},       {EM_UN_LOG1P, "log1p", -0.5, 3},
    {EM_UN_SQRT, "sqrt", 0.5, 3},     {EM_UN_RSQRT, "rsqrt", 0.5, 3},
    {EM_UN_SIN, "sin", -3, 3},        {EM_UN_COS, "cos", -3, 3},
    {EM_UN_TANH, "tanh", -3, 3},      {EM_UN_SIGMOID, "sigmoid", -4, 4},
    {EM_UN_RELU, "relu", -2, 2},      {EM_UN_GELU, "gelu", -7, 4},
    {EM_UN_SILU, "silu", -6, 6},      {EM_UN_ERF, "erf", -3, 3},
    {EM_UN_RECIP, "recip", 0.5, 3},   {EM_UN_CLAMP, "clamp", -2, 2},
};
#define CLAMP_LO -0.5
#define CLAMP_HI 0.75 /* bounds that every dtype holds exactly (see test_clamp_bounds) */

static em_status apply(em_unary_op op, const em_tensor *x, em_tensor **y) {
    switch (op) {
    case EM_UN_ABS: return em_abs(x, y);
    case EM_UN_EXP: return em_exp(x, y);
    case EM_UN_LOG: return em_log(x, y);
    case EM_UN_LOG1P: return em_log1p(x, y);
    case EM_UN_SQRT: return em_sqrt(x, y);
    case EM_UN_RSQRT: return em_rsqrt(x, y);
    case EM_UN_SIN: return em_sin(x, y);
    case EM_UN_COS: return em_cos(x, y);
    case EM_UN_TANH: return em_tanh(x, y);
    case EM_UN_SIGMOID: return em_sigmoid(x, y);
    case EM_UN_RELU: return em_relu(x, y);
    case EM_UN_GELU: return em_gelu(x, y);
    case EM_UN_SILU: return em_silu(x, y);
    case EM_UN_ERF: return em_erf(x, y);
    case EM_UN_RECIP: return em_recip(x, y);
    case EM_UN_CLAMP: return em_clamp(x, CLAMP_LO, CLAMP_HI, y);
    default: return EM_ERR_ARG;
    }
}

/* ---- helpers ---- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static double urand(double lo, double hi) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return lo + (hi - lo) * (double)(g_rng >> 11) / 9007199254740992.0;
}

/* n values as dtype dt in host memory (vals rounded to dt in place, so that the f64 oracle
 * sees the same inputs). */
static void *host_data(em_dtype dt, double *vals, size_t n) {
    void *p = malloc(n * 8 + 8);
    for (size_t i = 0; i < n; i++) {
        switch (dt) {
        case EM_F32: ((float *)p)[i] = (float)vals[i]; vals[i] = ((float *)p)[i]; break;
        case EM_F64: ((double *)p)[i] = vals[i]; break;
        case EM_F16:
            ((uint16_t *)p)[i] = em_f32_to_f16((float)vals[i]);
            vals[i] = em_f16_to_f32(((uint16_t *)p)[i]);
            break;
        default:
            ((uint16_t *)p)[i] = em_f32_to_bf16((float)vals[i]);
            vals[i] = em_bf16_to_f32(((uint16_t *)p)[i]);
            break;
        }
    }
    return p;
}

/* The tensor's values as f64 (n of them). */
static void read_f64(const em_tensor *t, double *out, size_t n) {
    em_tensor *c = NULL;
    assert_int_equal(em_cast(t, EM_F64, &c), EM_OK);
    assert_int_equal((size_t)em_tensor_numel(c), n);
    if (n) assert_int_equal(em_tensor_to_data(c, out, n * sizeof *out), EM_OK);
    em_tensor_release(c);
}

static bool dtype_runs(em_device dev, em_dtype dt) {
    double v[2] = {1, 2};
    void *d = host_data(dt, v, 2);
    int64_t sh[1] = {2};
    em_tensor *t = NULL, *e = NULL;
    bool ok = em_tensor_from_data(d, dt, sh, 1, dev, &t) == EM_OK && em_exp(t, &e) == EM_OK;
    em_tensor_release(t);
    em_tensor_release(e);
    free(d);
    return ok;
}

static void tol_of(em_dtype dt, double *rtol, double *atol) {
    switch (dt) {
    case EM_F64: *rtol = 1e-10, *atol = 1e-12; break;
    case EM_F32: *rtol = 2e-5, *atol = 2e-6; break;
    case EM_F16: *rtol = 1.5e-2, *atol = 8e-3; break;
    default: *rtol = 5e-2, *atol = 4e-2; break;
    }
}

/* ---- unary_backward ---- */

typedef enum layout { L_DENSE, L_BIG, L_TRANSPOSED, L_SLICED, L_BROADCAST, L_EMPTY, L_COUNT } layout;
static const char *const LNAME[L_COUNT] = {"dense", "big", "transposed", "sliced", "broadcast",
                                            "empty"};

/* The leaf's shape for a layout. */
static int leaf_shape(layout l, int64_t *sh) {
    switch (l) {
    case L_DENSE: sh[0] = 1037; return 1;
    case L_BIG: sh[0] = 3; sh[1] = 23001; return 2; /* above the cpu pool's grain */
    case L_TRANSPOSED: sh[0] = 7; sh[1] = 9; return 2;
    case L_SLICED: sh[0] = 4; sh[1] = 21; return 2;
    case L_BROADCAST: sh[0] = 5; sh[1] = 1; return 2;
    default: sh[0] = 0; sh[1] = 5; return 2;
    }
}

/* The op's input x made from the leaf (a view or the leaf itself, retained). */
static em_tensor *layout_view(layout l, em_tensor *leaf) {
    em_tensor *x = NULL;
    switch (l) {
    case L_TRANSPOSED: assert_int_equal(em_transpose(leaf, 0, 1, &x), EM_OK); break;
    case L_SLICED: assert_int_equal(em_slice(leaf, 1, 1, 20, 3, &x), EM_OK); break;
    case L_BROADCAST: {
        const int64_t sh[3] = {2, 5, 6};
        assert_int_equal(em_expand(leaf, sh, 3, &x), EM_OK);
        break;
    }
    default: em_tensor_retain(leaf); x = leaf; break;
    }
    return x;
}

/* The gradient of sum(op(view(leaf)) * w) (w NULL: sum(op(view(leaf)))) with respect to the
 * leaf, on dev (an autodiff device), into g (f64, leafn values). */
static void grad_of(em_device dev, em_dtype dt, const opcase *oc, layout l, const double *xv,
                    const double *wv, double *g, size_t leafn) {
    int64_t sh[2];
    int r = leaf_shape(l, sh);
    double *tmp = malloc((leafn + 1) * sizeof *tmp);
    memcpy(tmp, xv, leafn * sizeof *tmp);
    void *d = host_data(dt, tmp, leafn);
    em_tensor *leaf = NULL, *x, *y = NULL, *prod = NULL, *loss = NULL, *w = NULL, *gr = NULL;
    assert_int_equal(em_tensor_from_data(d, dt, sh, r, dev, &leaf), EM_OK);
    assert_int_equal(em_tensor_require_grad(leaf), EM_OK);
    x = layout_view(l, leaf);
    assert_int_equal(apply(oc->op, x, &y), EM_OK);
    if (wv) {
        size_t yn = (size_t)em_tensor_numel(y);
        double *wt = malloc((yn + 1) * sizeof *wt);
        memcpy(wt, wv, yn * sizeof *wt);
        void *wd = host_data(dt, wt, yn);
        em_device inner = dev;
        inner.autodiff = false;
        inner.checkpointing = EM_CKPT_NONE;
        assert_int_equal(em_tensor_from_data(wd, dt, em_tensor_shape(y), em_tensor_rank(y),
                                             inner, &w),
                         EM_OK);
        assert_int_equal(em_mul(y, w, &prod), EM_OK);
        free(wd);
        free(wt);
    } else {
        em_tensor_retain(y);
        prod = y;
    }
    assert_int_equal(em_sum(prod, &loss), EM_OK);
    em_tensor_release(x);
    em_tensor_release(y);
    em_tensor_release(prod);
    em_tensor_release(w);
    em_grads *grads = NULL;
    assert_int_equal(em_backward(loss, &grads), EM_OK);
    assert_int_equal(em_grads_get(grads, leaf, &gr), EM_OK);
    assert_non_null(gr);
    assert_int_equal(em_tensor_dtype(gr), dt);
    read_f64(gr, g, leafn);
    em_tensor_release(gr);
    em_grads_release(grads);
    em_tensor_release(loss);
    em_tensor_release(leaf);
    free(d);
    free(tmp);
}

static int compare(const char *what, const double *got, const double *want, size_t n,
                   em_dtype dt) {
    double rtol, atol, mx = 0;
    tol_of(dt, &rtol, &atol);
    for (size_t i = 0; i < n; i++)
        if (fabs(want[i]) > mx) mx = fabs(want[i]);
    for (size_t i = 0; i < n; i++) {
        double e = fabs(got[i] - want[i]);
        if (!(e <= atol * (mx > 1 ? mx : 1) + rtol * fabs(want[i]))) {
            fprintf(stderr, "%s: element %zu: %.9g, expected %.9g (%s)\n", what, i, got[i], want[i],
                        em_dtype_name(dt));
            return 1;
        }
    }
    return 0;
}

static void test_unary_backward(void **state) {
    (void)state;
    int fails = 0, fused_runs = 0;
    em_device ref = {0};
    assert_int_equal(em_device_parse("ref+autodiff", &ref), EM_OK);
    for (size_t o = 0; o < sizeof OPS / sizeof OPS[0]; o++) {
        const opcase *oc = &OPS[o];
        for (int l = 0; l < L_COUNT; l++) {
            int64_t sh[2];
            int r = leaf_shape((layout)l, sh);
            size_t leafn = (size_t)(r == 1 ? sh[0] : sh[0] * sh[1]);
            size_t yn = l == L_BROADCAST ? 60 : l == L_TRANSPOSED ? 63 : l == L_SLICED ? 28
                                                                                     : leafn;
            double *xv = malloc((leafn + 1) * sizeof *xv), *wv = malloc((yn + 1) * sizeof *wv);
            double *want = malloc((leafn + 1) * sizeof *want), *got = malloc((leafn + 1) * 8);
            for (int wmode = 0; wmode < 2; wmode++) {
                for (size_t dti = 0; dti < 4; dti++) {
                    em_dtype dt = DTYPES[dti];
                    if (l == L_BIG && dt != EM_F32 && dt != EM_BF16) continue;
                    for (size_t i = 0; i < leafn; i++) xv[i] = urand(oc->lo, oc->hi);
                    for (size_t i = 0; i < yn; i++) wv[i] = urand(-2, 2);
                    /* the same values as dt holds them, for the oracle */
                    free(host_data(dt, xv, leafn));
                    free(host_data(dt, wv, yn));
                    bool was = emi_fused_set(false);
                    grad_of(ref, EM_F64, oc, (layout)l, xv, wmode ? wv : NULL, want, leafn);
                    emi_fused_set(was);
                    for (int d = 0; d < g_ndev; d++) {
                        if (!dtype_runs(g_dev[d], dt)) continue;
                        for (int st = 0; st < 2; st++) {
                            em_device ad;
                            assert_int_equal(em_device_autodiff(g_dev[d], st ? EM_CKPT_BALANCED
                                                                             : EM_CKPT_DISABLED,
                                                                &ad),
                                             EM_OK);
                            for (int fused = 1; fused >= 0; fused--) {
                                emi_fused_set(fused);
                                grad_of(ad, dt, oc, (layout)l, xv, wmode ? wv : NULL, got, leafn);
                                char what[160], dn[48];
                                em_device_name(ad, dn, sizeof dn);
                                snprintf(what, sizeof what, "%s %s %s %s loss %s", oc->name,
                                         fused ? "fused" : "composed", dn, LNAME[l],
                                         wmode ? "sum(y*w)" : "sum(y)");
                                fails += compare(what, got, want, leafn, dt);
                                fused_runs += fused;
                            }
                            emi_fused_set(true);
                        }
                    }
                }
            }
            free(xv);
            free(wv);
            free(want);
            free(got);
        }
    }
    assert_true(fused_runs > 0);
    assert_int_equal(fails, 0);
}

/* The slot is there on ref and cpu (and is used: the entry point answers). */
static void test_slots_present(void **state) {
    (void)state;
    for (int d = 0; d < g_ndev; d++) {
        em_backend b = g_dev[d].backend;
        if (b != EM_BACKEND_REF && b != EM_BACKEND_CPU && b != EM_BACKEND_OPENCL) continue;
        const int64_t sh[1] = {3};
        const float v[3] = {0.5f, 1.0f, 2.0f};
        em_tensor *x = NULL, *gx = NULL;
        assert_int_equal(em_tensor_from_data(v, EM_F32, sh, 1, g_dev[d], &x), EM_OK);
        assert_true(emi_has_unary_backward(x));
        assert_true(emi_has_adam_step(x));
        assert_int_equal(emi_unary_backward(EM_UN_LOG, x, NULL, x, NULL, &gx), EM_OK);
        float out[3];
        assert_int_equal(em_tensor_to_data(gx, out, sizeof out), EM_OK);
        for (int i = 0; i < 3; i++) assert_true(out[i] == 1.0f); /* x / x */
        em_tensor_release(gx);
        /* switched off: the caller composes */
        bool was = emi_fused_set(false);
        assert_false(emi_has_unary_backward(x));
        assert_int_equal(emi_unary_backward(EM_UN_LOG, x, NULL, x, NULL, &gx), EM_ERR_UNSUPPORTED);
        emi_fused_set(was);
        em_tensor_release(x);
    }
}

static void test_entry_checks(void **state) {
    (void)state;
    const int64_t sh[1] = {3}, sh2[1] = {4};
    const float v[4] = {0.5f, 1.0f, 2.0f, 3.0f};
    const double dv[3] = {1, 2, 3};
    em_device cpu = g_dev[0];
    em_tensor *x = NULL, *x4 = NULL, *xd = NULL, *gx = NULL, *leaf = NULL;
    assert_int_equal(em_tensor_from_data(v, EM_F32, sh, 1, cpu, &x), EM_OK);
    assert_int_equal(em_tensor_from_data(v, EM_F32, sh2, 1, cpu, &x4), EM_OK);
    assert_int_equal(em_tensor_from_data(dv, EM_F64, sh, 1, cpu, &xd), EM_OK);
    assert_int_equal(emi_unary_backward(EM_UN_NEG, x, NULL, x, NULL, &gx), EM_ERR_ARG);
    assert_int_equal(emi_unary_backward(EM_UN_FLOOR, x, NULL, x, NULL, &gx), EM_ERR_ARG);
    assert_int_equal(emi_unary_backward(EM_UN_COUNT, x, NULL, x, NULL, &gx), EM_ERR_ARG);
    assert_int_equal(emi_unary_backward(EM_UN_LOG, NULL, NULL, x, NULL, &gx), EM_ERR_ARG);
    assert_int_equal(emi_unary_backward(EM_UN_LOG, x, x, x, NULL, &gx), EM_ERR_ARG);
    assert_int_equal(emi_unary_backward(EM_UN_EXP, x, NULL, x, NULL, &gx), EM_ERR_ARG);
    assert_int_equal(emi_unary_backward(EM_UN_LOG, x, NULL, NULL, NULL, &gx), EM_ERR_ARG);
    assert_int_equal(emi_unary_backward(EM_UN_LOG, x, NULL, x, NULL, NULL), EM_ERR_ARG);
    assert_int_equal(emi_unary_backward(EM_UN_LOG, x4, NULL, x, NULL, &gx), EM_ERR_SHAPE);
    assert_int_equal(emi_unary_backward(EM_UN_LOG, xd, NULL, x, NULL, &gx), EM_ERR_DTYPE);
    assert_int_equal(emi_unary_backward(EM_UN_CLAMP, x, NULL, x, NULL, &gx), EM_ERR_ARG);
    assert_null(gx);
    /* tracked: no second derivatives */
    em_device ad;
    assert_int_equal(em_device_autodiff(cpu, EM_CKPT_DISABLED, &ad), EM_OK);
    assert_int_equal(em_tensor_from_data(v, EM_F32, sh, 1, ad, &leaf), EM_OK);
    assert_int_equal(em_tensor_require_grad(leaf), EM_OK);
    assert_int_equal(emi_unary_backward(EM_UN_LOG, leaf, NULL, x, NULL, &gx), EM_ERR_UNSUPPORTED);
    assert_int_equal(emi_unary_backward(EM_UN_LOG, x, NULL, leaf, NULL, &gx), EM_ERR_UNSUPPORTED);
    /* adam */
    em_adam_args a = {1, 0, 0.9, 0.1, 0.999, 0.001, 1, 1e-8, 1, 1};
    em_tensor *m = NULL, *s2 = NULL;
    assert_int_equal(em_zeros(sh, 1, EM_F32, cpu, &m), EM_OK);
    assert_int_equal(em_zeros(sh, 1, EM_F32, cpu, &s2), EM_OK);
    assert_int_equal(emi_adam_step(NULL, m, s2, x, &a), EM_ERR_ARG);
    assert_int_equal(emi_adam_step(x, m, s2, x, NULL), EM_ERR_ARG);
    assert_int_equal(emi_adam_step(x, m, s2, x4, &a), EM_ERR_SHAPE);
    assert_int_equal(emi_adam_step(x, m, s2, xd, &a), EM_ERR_DTYPE);
    assert_int_equal(emi_adam_step(leaf, m, s2, x, &a), EM_ERR_UNSUPPORTED);
    /* the same buffer twice: declined (composed) */
    assert_int_equal(emi_adam_step(x, m, m, x4, &a), EM_ERR_SHAPE);
    assert_int_equal(emi_adam_step(x, m, m, xd, &a), EM_ERR_DTYPE);
    em_tensor *g = NULL;
    assert_int_equal(em_zeros(sh, 1, EM_F32, cpu, &g), EM_OK);
    assert_int_equal(emi_adam_step(x, m, m, g, &a), EM_ERR_UNSUPPORTED);
    assert_int_equal(emi_adam_step(x, m, s2, x, &a), EM_ERR_UNSUPPORTED);
    assert_int_equal(emi_adam_step(x, m, s2, g, &a), EM_OK);
    em_tensor_release(g);
    em_tensor_release(m);
    em_tensor_release(s2);
    em_tensor_release(leaf);
    em_tensor_release(x);
    em_tensor_release(x4);
    em_tensor_release(xd);
}

/* clamp's gradient compares x with the bounds as values of x's dtype (a bug found: the
 * kernels compared with the double bounds, so an f16 x of 0.7002, which is 0.7 in f16, lost
 * its gradient under clamp(x, -0.3, 0.7) where the composed rule passes it, as PyTorch). */
static void test_clamp_bounds(void **state) {
    (void)state;
    for (int d = 0; d < g_ndev; d++) {
        for (size_t dti = 0; dti < 4; dti++) {
            em_dtype dt = DTYPES[dti];
            if (!dtype_runs(g_dev[d], dt)) continue;
            em_device ad;
            assert_int_equal(em_device_autodiff(g_dev[d], EM_CKPT_DISABLED, &ad), EM_OK);
            for (int fused = 0; fused < 2; fused++) {
                emi_fused_set(fused);
                double v[4] = {0.7, -0.3, 0.7001, -0.30001};
                void *data = host_data(dt, v, 4);
                const int64_t sh[1] = {4};
                em_tensor *x = NULL, *y = NULL, *loss = NULL, *gr = NULL;
                assert_int_equal(em_tensor_from_data(data, dt, sh, 1, ad, &x), EM_OK);
                assert_int_equal(em_tensor_require_grad(x), EM_OK);
                assert_int_equal(em_clamp(x, -0.3, 0.7, &y), EM_OK);
                assert_int_equal(em_sum(y, &loss), EM_OK);
                em_grads *g = NULL;
                assert_int_equal(em_backward(loss, &g), EM_OK);
                assert_int_equal(em_grads_get(g, x, &gr), EM_OK);
                double got[4];
                read_f64(gr, got, 4);
                /* the last two are past the bounds in f32 and f64, equal to them in f16/bf16 */
                const bool half = dt == EM_F16 || dt == EM_BF16;
                assert_true(got[0] == 1 && got[1] == 1);
                assert_true(got[2] == (half ? 1 : 0) && got[3] == (half ? 1 : 0));
                em_tensor_release(gr);
                em_grads_release(g);
                em_tensor_release(loss);
                em_tensor_release(y);
                em_tensor_release(x);
                free(data);
            }
            emi_fused_set(true);
        }
    }
}

/* ---- adam_step ---- */

/* Three steps of the optimizer on w (n values) with loss sum(w * w * c + w); the final w as
 * f64 in out. */
static void run_adam(em_device dev, em_dtype dt, bool adamw, double wd, double gscale,
                     const double *w0, const double *c0, size_t n, double *out) {
    em_device ad;
    assert_int_equal(em_device_autodiff(dev, EM_CKPT_DISABLED, &ad), EM_OK);
    const int64_t sh[2] = {(int64_t)n / 11, 11};
    double *tw = malloc(n * 8), *tc = malloc(n * 8);
    memcpy(tw, w0, n * 8);
    memcpy(tc, c0, n * 8);
    void *dw = host_data(dt, tw, n), *dc = host_data(dt, tc, n);
    em_tensor *w = NULL, *c = NULL;
    assert_int_equal(em_tensor_from_data(dw, dt, sh, 2, ad, &w), EM_OK);
    assert_int_equal(em_tensor_from_data(dc, dt, sh, 2, dev, &c), EM_OK);
    assert_int_equal(em_tensor_require_grad(w), EM_OK);
    em_params *ps = NULL;
    assert_int_equal(em_params_create(&ps), EM_OK);
    assert_int_equal(em_params_add(ps, "w", &w), EM_OK);
    em_optimizer *opt = NULL;
    if (adamw) assert_int_equal(em_optimizer_adamw(ps, 0.01, 0.9, 0.999, 1e-8, wd, &opt), EM_OK);
    else assert_int_equal(em_optimizer_adam(ps, 0.01, 0.9, 0.999, 1e-8, wd, &opt), EM_OK);
    for (int step = 0; step < 3; step++) {
        em_tensor *ww = NULL, *wwc = NULL, *t = NULL, *loss = NULL;
        assert_int_equal(em_mul(w, w, &ww), EM_OK);
        assert_int_equal(em_mul(ww, c, &wwc), EM_OK);
        assert_int_equal(em_add(wwc, w, &t), EM_OK);
        assert_int_equal(em_sum(t, &loss), EM_OK);
        em_tensor_release(ww);
        em_tensor_release(wwc);
        em_tensor_release(t);
        em_grads *g = NULL;
        assert_int_equal(em_backward(loss, &g), EM_OK);
        em_status st = em_optimizer_step(opt, g, gscale);
        if (st != EM_OK)
            fprintf(stderr, "em_optimizer_step (%s, fused %d, backend %d, step %d): %s %s\n",
                    em_dtype_name(dt), (int)emi_fused_on(), (int)dev.backend, step,
                    em_status_name(st), em_last_error());
        assert_int_equal(st, EM_OK);
        em_grads_release(g);
        em_tensor_release(loss);
    }
    read_f64(w, out, n);
    em_optimizer_release(opt);
    em_params_release(ps);
    em_tensor_release(w);
    em_tensor_release(c);
    free(dw);
    free(dc);
    free(tw);
    free(tc);
}

/* Fused against composed on each device (the same bits for f32 / f64 on ref and cpu) and
 * against the composed step on ref in f64 from the same values. Not the composed f16 step
 * against the oracle: it rounds every operation to f16, where (d * d) * (1 - beta2)
 * underflows for small gradients and the folded eps (1e-7) then makes steps of thousands;
 * the kernel computes in f32 and rounds once. */
static void test_adam(void **state) {
    (void)state;
    const size_t n = 11 * 97;
    double *w0 = malloc(n * 8), *c0 = malloc(n * 8), *a = malloc(n * 8), *b = malloc(n * 8);
    double *want = malloc(n * 8), *wr = malloc(n * 8), *cr = malloc(n * 8);
    for (size_t i = 0; i < n; i++) {
        w0[i] = urand(-2, 2);
        c0[i] = urand(-1, 1);
    }
    em_device ref;
    assert_int_equal(em_device_parse("ref", &ref), EM_OK);
    int fails = 0;
    for (size_t dti = 0; dti < 4; dti++) {
        em_dtype dt = DTYPES[dti];
        memcpy(wr, w0, n * 8);
        memcpy(cr, c0, n * 8);
        free(host_data(dt, wr, n));
        free(host_data(dt, cr, n));
        for (int k = 0; k < 8; k++) {
            bool adamw = k & 1;
            double wd = k & 2 ? 0.05 : 0.0, gs = k & 4 ? 0.5 : 1.0;
            emi_fused_set(false);
            run_adam(ref, EM_F64, adamw, wd, gs, wr, cr, n, want);
            for (int d = 0; d < g_ndev; d++) {
                if (!dtype_runs(g_dev[d], dt)) continue;
                emi_fused_set(true);
                run_adam(g_dev[d], dt, adamw, wd, gs, w0, c0, n, a);
                emi_fused_set(false);
                run_adam(g_dev[d], dt, adamw, wd, gs, w0, c0, n, b);
                emi_fused_set(true);
                char dn[48];
                em_device_name(g_dev[d], dn, sizeof dn);
                bool exact = (dt == EM_F32 || dt == EM_F64) &&
                             (g_dev[d].backend == EM_BACKEND_REF ||
                              g_dev[d].backend == EM_BACKEND_CPU);
                /* bf16: a gradient near 0 can take the other sign (8-bit significands), and
                 * Adam then steps by about lr the other way: up to 6 lr in three steps */
                double tol = dt == EM_F64 ? 1e-12 : dt == EM_F32 ? 2e-5
                           : dt == EM_F16 ? 4e-3 : 8e-2;
                for (size_t i = 0; i < n; i++) {
                    bool same = exact ? a[i] == b[i]
                                      : dt == EM_F32 || dt == EM_F64
                                            ? fabs(a[i] - b[i]) <= tol * (1 + fabs(b[i]))
                                            : true;
                    bool near = fabs(a[i] - want[i]) <= tol * (1 + fabs(want[i]));
                    if (!same || !near) {
                        fprintf(stderr, "adam%s wd %g scale %g on %s (%s): element %zu: fused "
                                "%.17g, composed %.17g, f64 %.17g\n", adamw ? "w" : "", wd, gs,
                                dn, em_dtype_name(dt), i, a[i], b[i], want[i]);
                        fails++;
                        break;
                    }
                }
            }
        }
    }
    emi_fused_set(true);
    free(w0);
    free(c0);
    free(a);
    free(b);
    free(want);
    free(wr);
    free(cr);
    assert_int_equal(fails, 0);
}

/* A transposed (strided) gradient gives what its contiguous copy gives. */
static void test_adam_strided_grad(void **state) {
    (void)state;
    for (int d = 0; d < g_ndev; d++) {
        for (size_t dti = 0; dti < 4; dti++) {
            em_dtype dt = DTYPES[dti];
            if (!dtype_runs(g_dev[d], dt)) continue;
            const int64_t sh[2] = {13, 7}, tsh[2] = {7, 13};
            const size_t n = 91;
            double pv[91], gv[91], r1[91], r2[91];
            for (size_t i = 0; i < n; i++) pv[i] = urand(-1, 1), gv[i] = urand(-1, 1);
            void *pd = host_data(dt, pv, n), *gd = host_data(dt, gv, n);
            em_adam_args a = {0.5, 0.01, 0.9, 0.1, 0.999, 1.0 - 0.999, 3.0, 1e-3, 0.7, 0.999};
            for (int pass = 0; pass < 2; pass++) {
                em_tensor *p = NULL, *m = NULL, *v = NULL, *g0 = NULL, *g = NULL;
                assert_int_equal(em_tensor_from_data(pd, dt, sh, 2, g_dev[d], &p), EM_OK);
                assert_int_equal(em_full(sh, 2, 0.25, dt, g_dev[d], &m), EM_OK);
                assert_int_equal(em_full(sh, 2, 0.5, dt, g_dev[d], &v), EM_OK);
                assert_int_equal(em_tensor_from_data(gd, dt, tsh, 2, g_dev[d], &g0), EM_OK);
                assert_int_equal(em_transpose(g0, 0, 1, &g), EM_OK);
                if (pass) {
                    em_tensor *c = NULL;
                    assert_int_equal(em_contiguous(g, &c), EM_OK);
                    em_tensor_release(g);
                    g = c;
                }
                em_status s = emi_adam_step(p, m, v, g, &a);
                if (s == EM_ERR_UNSUPPORTED) { /* no slot: nothing to compare */
                    memcpy(pass ? r2 : r1, pv, sizeof r1);
                } else {
                    assert_int_equal(s, EM_OK);
                    read_f64(p, pass ? r2 : r1, n);
                }
                em_tensor_release(p);
                em_tensor_release(m);
                em_tensor_release(v);
                em_tensor_release(g0);
                em_tensor_release(g);
            }
            for (size_t i = 0; i < n; i++) assert_true(r1[i] == r2[i]);
            free(pd);
            free(gd);
        }
    }
}

int main(void) {
    size_t n = 0;
    em_device all[MAXDEV];
    if (em_devices(all, MAXDEV, &n) != EM_OK) return 1;
    for (size_t i = 0; i < n && i < MAXDEV; i++)
        if (!all[i].autodiff) g_dev[g_ndev++] = all[i];
    for (int i = 0; i < g_ndev; i++) { /* cpu first: test_entry_checks uses g_dev[0] */
        if (g_dev[i].backend == EM_BACKEND_CPU) {
            em_device t = g_dev[0];
            g_dev[0] = g_dev[i];
            g_dev[i] = t;
        }
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slots_present),  cmocka_unit_test(test_entry_checks),
        cmocka_unit_test(test_clamp_bounds),   cmocka_unit_test(test_unary_backward),
        cmocka_unit_test(test_adam),
        cmocka_unit_test(test_adam_strided_grad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
