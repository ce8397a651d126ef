/*
 * gradcheck.c — checks the backward rule of every differentiable op of the conformance table
 * against central finite differences, on every device wrapped for autodiff.
 *
 *   gradcheck GOLDEN [--filter TEXT] [--device NAME] [--skip-backend NAME] [--verbose] [--capture]
 * (--skip-backend: leave that backend's devices out, e.g. vulkan, whose own runs check it:
 * on lavapipe the whole check costs more than every other device's together, and the
 * all-device runs timed out beside it)
 *
 * It reads the cases of GOLDEN (tests/conformance/golden.txt) and calls the table's own
 * wrappers (tests/conformance/ops_*.c); there is no second table. For each case that succeeds
 * in the table, has a float input and an op that is differentiable (see no_grad_ops below):
 *
 *   - every float input becomes f64 (int and bool inputs stay as they are; views are rebuilt
 *     on top of the f64 leaf, so the gradient is taken with respect to the leaf);
 *   - for every device D of em_devices(): the op runs untracked on D, and
 *         L(inputs) = sum_k sum(out_k * w_k)
 *     over every float output k, with fixed pseudo-random weights w_k, is differentiated
 *     numerically, element by element, with central differences (step 1e-6, relative beyond
 *     |x| = 1);
 *   - then on D+autodiff and D+autodiff:balanced the inputs are leaves with
 *     em_tensor_require_grad, the same loss is built with em_mul / em_sum / em_add, and
 *     em_backward's gradients must match the numeric ones (relative + absolute tolerance
 *     1e-5, plus the rounding noise of the loss itself), be untracked f64 tensors of the
 *     leaf's shape on D, and be equal for both strategies.
 *
 * With --capture (as ctest runs it), each strategy once more with the forward, the loss and
 * the backward recorded on capture+autodiff (inputs as graph inputs, gradients as outputs) and
 * replayed on D: the replayed gradients must pass the same check.
 *
 * Skipped: cases that expect an error, cases with a NaN or infinite input or output, and,
 * element by element, inputs that sit within a step of a kink (relu at 0, ties of max or
 * sort, clamp bounds, jumps of remainder): such an element is recognized by its second
 * difference, which for a smooth function scales as h^2 and for a kink as h.
 *
 * Prints one line per failure ("FAIL case [device] (op): why"), a list of the failing ops,
 * and "N passed, N failed"; exits 1 on any failure.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/graph.h"
#include "golden.h"

/* --capture: the backward of each case also captured and replayed (run_backward_captured) */
static bool g_capture;

/* ---- what is not checked ---- */

/* Ops whose outputs carry no gradient. Ops with no float input (int-only cases, the random
 * ops, one_hot) and ops with only int/bool outputs are skipped anyway; they are listed for
 * the reader. Non-smooth ops (relu, abs, max, clamp, remainder, sort, max_pool2d, ...) are
 * checked: only their elements near a kink are skipped. */
static const char *const no_grad_ops[] = {
    /* comparisons and logic: bool outputs */
    "eq", "ne", "lt", "le", "gt", "ge", "eq_scalar", "lt_scalar", "gt_scalar",
    "logical_and", "logical_or", "logical_not", "logical_xor", "isnan", "isinf", "isfinite",
    /* indices: int outputs */
    "argmax", "argmin", "argsort", "one_hot",
    /* piecewise constant: zero gradient almost everywhere (emi_rule_no_grad), and their
     * conformance inputs include the jumps on purpose (halves for round) */
    "floor", "ceil", "round", "sign",
    /* creation from a seed: no inputs */
    "rand_uniform", "rand_normal", "rand_bernoulli",
    /* quantized tensors are constants (untracked); a float @ quantized product quantizes its
     * activations on the fly (piecewise constant in them) while its gradient is that of
     * a @ dequantize(b) (ember.h's em_matmul), which finite differences cannot see:
     * test_quant's test_matmul_grad checks that gradient */
    "quant_bytes", "quant_roundtrip", "quant_matmul", "quant_layout", "quant_from_bytes",
    "quant_nbytes", "quant_op",
};

/* Cases too large for element-by-element finite differences on every device (each element
 * costs two runs of the whole op): sdpa's L = S = 300 rows, whose gradients are checked against
 * ref's kernel in tests/cpu/test_cpu_attention.c instead. */
static const char *const heavy_cases[] = {"nn/sdpa/long"};

static bool heavy_case(const char *name) {
    for (size_t i = 0; i < sizeof heavy_cases / sizeof heavy_cases[0]; i++)
        if (strncmp(name, heavy_cases[i], strlen(heavy_cases[i])) == 0) return true;
    return false;
}

/* The check runs in f64 (float inputs are made f64), so a cast to another float dtype is
 * checked as a cast to f64: its rule (the gradient cast back to the input's dtype) runs, and
 * the finite differences keep f64's precision. Casts to ints and bool carry no gradient. */
static void cast_in_f64(golden_case *c) {
    if (strcmp(c->op, "cast") != 0) return;
    for (int i = 0; i < c->params.n; i++) {
        conf_param *q = &c->params.p[i];
        if (strcmp(q->key, "dtype") == 0 && q->n == 1 &&
            golden_is_float((em_dtype)(int64_t)q->values[0]))
            q->values[0] = (double)EM_F64;
    }
}

/* Ops whose tolerance is looser, with why. (Central differences in f64 with h = 1e-6 are
 * accurate to ~1e-12 times the third derivative, so only ops with steep curvature in the
 * table's ranges need more.) */
typedef struct op_tol {
    const char *op;
    double scale;
} op_tol;
static const op_tol loose_ops[] = {
    {"pow", 10.0},        /* large exponents and bases near 0: steep third derivatives */
    {"pow_scalar", 10.0}, /* idem */
    {"recip", 10.0},      /* 1/x near 0 */
    {"rsqrt", 10.0},      /* x^-1/2 near 0 */
    {"log", 10.0},        /* near 0 */
    {"div", 10.0},        /* divisors near 0 */
    {"div_", 10.0},
    {"div_scalar", 10.0},
};

/* Buffers: inputs an op reads (and may update in place) but that carry no gradient, and the
 * outputs that return them. batch_norm's running_mean and running_var (its last two inputs
 * with "running"; outputs 1 and 2) are buffers, as in PyTorch (native_batch_norm declares
 * them non-differentiable): in eval the output depends on them, but no gradient reaches them,
 * and in training their updated values are returned for the table, not differentiated. Their
 * outputs get weight 0 in the loss and their inputs are not compared. */
static bool buffer_input(const golden_case *c, int i) {
    return strcmp(c->op, "batch_norm") == 0 && conf_bool(&c->params, "running", false) &&
           i >= c->nin - 2;
}
static bool buffer_output(const golden_case *c, int k) {
    return strcmp(c->op, "batch_norm") == 0 && k >= 1;
}

#define GC_EPS 1e-6   /* the finite-difference step (relative beyond |x| = 1) */
#define GC_RTOL 1e-5
#define GC_ATOL 1e-5

/* ---- building inputs ---- */

/* The leaf of input t on dev: float inputs as f64 with the values `vals`, others as given.
 * With grad, float leaves get em_tensor_require_grad. */
static em_status make_leaf(const golden_tensor *t, const double *vals, em_device dev, bool grad,
                           em_tensor **out) {
    bool fl = golden_is_float(t->dt);
    em_dtype dt = fl ? EM_F64 : t->dt;
    size_t sz = em_dtype_size(dt);
    void *data = malloc((size_t)(t->n ? t->n : 1) * sz);
    if (!data) return EM_ERR_NOMEM;
    for (int64_t i = 0; i < t->n; i++) {
        int64_t iv = t->ivals[i];
        switch (dt) {
        case EM_F64: ((double *)data)[i] = vals[i]; break;
        case EM_I64: ((int64_t *)data)[i] = iv; break;
        case EM_I32: ((int32_t *)data)[i] = (int32_t)iv; break;
        case EM_I16: ((int16_t *)data)[i] = (int16_t)iv; break;
        case EM_I8: ((int8_t *)data)[i] = (int8_t)iv; break;
        case EM_U8: case EM_BOOL: ((uint8_t *)data)[i] = (uint8_t)iv; break;
        default: break;
        }
    }
    em_tensor *base = NULL;
    em_status s = em_tensor_from_data(data, dt, t->shape, t->rank, dev, &base);
    free(data);
    if (s == EM_OK && grad && fl) s = em_tensor_require_grad(base);
    if (s != EM_OK) {
        em_tensor_release(base);
        return s;
    }
    *out = base;
    return EM_OK;
}

/* Reads a float tensor back as doubles into a fresh array (*n elements). */
static em_status read_f64(const em_tensor *t, double **out, int64_t *n) {
    em_tensor *d = NULL;
    em_status s = em_cast(t, EM_F64, &d);
    if (s != EM_OK) return s;
    int64_t k = em_tensor_numel(d);
    double *v = calloc((size_t)(k ? k : 1), sizeof(double));
    if (!v) {
        em_tensor_release(d);
        return EM_ERR_NOMEM;
    }
    s = em_tensor_to_data(d, v, (size_t)k * sizeof(double));
    em_tensor_release(d);
    if (s != EM_OK) {
        free(v);
        return s;
    }
    *out = v;
    *n = k;
    return EM_OK;
}

/* ---- one run of a case ---- */

typedef struct run_out {
    int n;                       /* outputs */
    bool isfloat[CONF_MAX_IO];
    int rank[CONF_MAX_IO];
    int64_t shape[CONF_MAX_IO][EM_MAX_RANK];
    int64_t numel[CONF_MAX_IO];
    double *vals[CONF_MAX_IO];   /* float outputs only */
} run_out;

static void free_run_out(run_out *r) {
    for (int i = 0; i < r->n; i++) free(r->vals[i]);
    memset(r, 0, sizeof *r);
}

/* Builds the inputs of c on dev (float ones from vals[i]); leaves[i] and views[i] get new
 * references (NULL on failure). */
static em_status build_inputs(const golden_case *c, double *const *vals, em_device dev, bool grad,
                              em_tensor **leaves, em_tensor **views, char *msg, size_t cap) {
    for (int i = 0; i < c->nin; i++) leaves[i] = views[i] = NULL;
    for (int i = 0; i < c->nin; i++) {
        em_status s = make_leaf(&c->in[i], vals[i], dev, grad, &leaves[i]);
        if (s == EM_OK) s = golden_view(&c->in[i], leaves[i], &views[i]);
        if (s != EM_OK) {
            snprintf(msg, cap, "building input %d failed: %s: %s", i, em_status_name(s),
                     em_last_error());
            return s;
        }
    }
    return EM_OK;
}

static void release_all(em_tensor **ts, int n) {
    for (int i = 0; i < n; i++) {
        em_tensor_release(ts[i]);
        ts[i] = NULL;
    }
}

/* Runs c untracked on dev with float inputs vals; reads every output back. */
static bool run_plain(const golden_case *c, conf_fn fn, em_device dev, double *const *vals,
                      run_out *r, char *msg, size_t cap) {
    em_tensor *leaves[CONF_MAX_IO], *views[CONF_MAX_IO];
    memset(r, 0, sizeof *r);
    bool ok = build_inputs(c, vals, dev, false, leaves, views, msg, cap) == EM_OK;
    em_tensor *outs[CONF_MAX_IO] = {0};
    int nout = 0;
    if (ok) {
        conf_params p = c->params;
        p.dev = dev;
        em_clear_error();
        em_status s = fn(views, c->nin, &p, outs, &nout);
        if (nout > CONF_MAX_IO) nout = CONF_MAX_IO;
        if (s != EM_OK) {
            snprintf(msg, cap, "the op failed on f64 inputs: %s: %s", em_status_name(s),
                     em_last_error());
            ok = false;
            nout = 0;
        }
    }
    for (int k = 0; ok && k < nout; k++) {
        const em_tensor *o = outs[k];
        r->n = k + 1;
        r->isfloat[k] = golden_is_float(em_tensor_dtype(o));
        r->rank[k] = em_tensor_rank(o);
        memcpy(r->shape[k], em_tensor_shape(o), sizeof(int64_t) * (size_t)r->rank[k]);
        r->numel[k] = em_tensor_numel(o);
        if (!r->isfloat[k]) continue;
        int64_t n;
        em_status s = read_f64(o, &r->vals[k], &n);
        if (s != EM_OK) {
            snprintf(msg, cap, "reading output %d failed: %s", k, em_last_error());
            ok = false;
        }
    }
    release_all(outs, nout);
    release_all(views, c->nin);
    release_all(leaves, c->nin);
    return ok;
}

/* The loss sum_k sum(out_k * w_k) of a run, and the sum of the magnitudes of its terms. */
static void loss_of(const run_out *r, double *const *w, double *loss, double *scale) {
    double l = 0, a = 0;
    for (int k = 0; k < r->n; k++) {
        if (!r->isfloat[k]) continue;
        for (int64_t j = 0; j < r->numel[k]; j++) {
            double t = r->vals[k][j] * w[k][j];
            l += t;
            a += fabs(t);
        }
    }
    *loss = l;
    *scale = a;
}

/* The loss of c on dev with float inputs vals (NAN when the run fails). */
static double eval_loss(const golden_case *c, conf_fn fn, em_device dev, double *const *vals,
                        double *const *w) {
    run_out r;
    char msg[256];
    double l = NAN, a;
    if (run_plain(c, fn, dev, vals, &r, msg, sizeof msg)) loss_of(&r, w, &l, &a);
    free_run_out(&r);
    return l;
}

/* Runs c on the autodiff device ad, builds the loss with public ops, and reads the gradient
 * of every float leaf into ga[i] (zeros when it got none; *none[i] set). */
/* L = sum_k sum(out_k * w_k) over the float outputs, on dev (outs tracked there); *loss gets
 * a new reference. */
static bool build_loss(em_tensor *const *outs, int nout, const run_out *r0, double *const *w,
                       em_device dev, em_tensor **loss, char *msg, size_t cap) {
    *loss = NULL;
    for (int k = 0; k < nout; k++) {
        if (!r0->isfloat[k]) continue;
        if (!em_tensor_is_tracked(outs[k])) {
            snprintf(msg, cap, "float output %d is not tracked (the op records nothing)", k);
            return false;
        }
        em_tensor *wt = NULL, *prod = NULL, *sum = NULL, *acc = NULL;
        em_status s = em_tensor_from_data(w[k], EM_F64, r0->shape[k], r0->rank[k], dev, &wt);
        const char *what = "weights";
        if (s == EM_OK) what = "mul", s = em_mul(outs[k], wt, &prod);
        if (s == EM_OK) what = "sum", s = em_sum(prod, &sum);
        if (s == EM_OK && *loss) what = "add", s = em_add(*loss, sum, &acc);
        else if (s == EM_OK) acc = sum, sum = NULL;
        em_tensor_release(wt);
        em_tensor_release(prod);
        em_tensor_release(sum);
        if (s != EM_OK) {
            snprintf(msg, cap, "building the loss (%s of output %d) failed: %s: %s", what, k,
                     em_status_name(s), em_last_error());
            return false;
        }
        em_tensor_release(*loss);
        *loss = acc;
    }
    if (!*loss) {
        snprintf(msg, cap, "no float output");
        return false;
    }
    return true;
}

/* Reads gradient g of input i (NULL: none reached it) into ga[i], checking that it is an
 * untracked f64 tensor of the input's shape on the inner device. */
static bool take_grad(const golden_case *c, int i, const em_tensor *g, em_device inner,
                      double **ga, bool *none, char *msg, size_t cap) {
    const int64_t n = c->in[i].n;
    none[i] = g == NULL;
    if (!g) {
        for (int64_t j = 0; j < n; j++) ga[i][j] = 0.0;
        return true;
    }
    em_device gd = em_tensor_device(g);
    if (em_tensor_dtype(g) != EM_F64 || em_tensor_rank(g) != c->in[i].rank ||
        memcmp(em_tensor_shape(g), c->in[i].shape, sizeof(int64_t) * (size_t)c->in[i].rank)) {
        snprintf(msg, cap, "the gradient of input %d has dtype %s, rank %d: not the input's", i,
                 em_dtype_name(em_tensor_dtype(g)), em_tensor_rank(g));
        return false;
    }
    if (em_tensor_is_tracked(g) || gd.autodiff || gd.backend != inner.backend ||
        gd.index != inner.index) {
        char nm[64];
        em_device_name(gd, nm, sizeof nm);
        snprintf(msg, cap, "the gradient of input %d is %s on %s, not untracked on the inner "
                 "device", i, em_tensor_is_tracked(g) ? "tracked" : "untracked", nm);
        return false;
    }
    double *v = NULL;
    int64_t k = 0;
    em_status s = read_f64(g, &v, &k);
    if (s != EM_OK) {
        snprintf(msg, cap, "reading the gradient of input %d failed: %s", i, em_last_error());
        return false;
    }
    memcpy(ga[i], v, sizeof(double) * (size_t)k);
    free(v);
    return true;
}

/* The forward on ad (leaves and views built), the loss and em_backward: *grads. */
static bool forward_backward(const golden_case *c, conf_fn fn, em_device ad, em_tensor **views,
                             double *const *w, const run_out *r0, em_tensor **outs, int *nout,
                             em_tensor **loss, em_grads **grads, char *msg, size_t cap) {
    conf_params p = c->params;
    p.dev = ad;
    em_clear_error();
    em_status s = fn(views, c->nin, &p, outs, nout);
    if (*nout > CONF_MAX_IO) *nout = CONF_MAX_IO;
    if (s != EM_OK) {
        snprintf(msg, cap, "forward failed: %s: %s", em_status_name(s), em_last_error());
        *nout = 0;
        return false;
    }
    if (*nout != r0->n) {
        snprintf(msg, cap, "forward gave %d outputs, %d untracked", *nout, r0->n);
        return false;
    }
    if (!build_loss(outs, *nout, r0, w, ad, loss, msg, cap)) return false;
    em_clear_error();
    s = em_backward(*loss, grads);
    if (s != EM_OK) {
        snprintf(msg, cap, "em_backward failed: %s: %s", em_status_name(s), em_last_error());
        return false;
    }
    return true;
}

static bool run_backward(const golden_case *c, conf_fn fn, em_device ad, em_device inner,
                         double *const *vals, double *const *w, const run_out *r0,
                         double **ga, bool *none, char *msg, size_t cap) {
    em_tensor *leaves[CONF_MAX_IO], *views[CONF_MAX_IO];
    em_tensor *outs[CONF_MAX_IO] = {0};
    em_tensor *loss = NULL;
    em_grads *grads = NULL;
    int nout = 0;
    bool ok = build_inputs(c, vals, ad, true, leaves, views, msg, cap) == EM_OK &&
              forward_backward(c, fn, ad, views, w, r0, outs, &nout, &loss, &grads, msg, cap);
    for (int i = 0; ok && i < c->nin; i++) {
        if (!golden_is_float(c->in[i].dt)) continue;
        em_tensor *g = NULL;
        if (em_grads_get(grads, leaves[i], &g) != EM_OK) {
            snprintf(msg, cap, "em_grads_get of input %d failed: %s", i, em_last_error());
            ok = false;
            break;
        }
        ok = take_grad(c, i, g, inner, ga, none, msg, cap);
        em_tensor_release(g);
    }
    em_grads_release(grads);
    em_tensor_release(loss);
    release_all(outs, nout);
    release_all(views, c->nin);
    release_all(leaves, c->nin);
    return ok;
}

/* --capture: the same forward, loss and backward recorded on capture+autodiff (ad's
 * checkpointing), the inputs graph inputs and the gradients graph outputs, then replayed on
 * inner from the values vals. */
static bool run_backward_captured(const golden_case *c, conf_fn fn, em_device ad,
                                  em_device inner, double *const *vals, double *const *w,
                                  const run_out *r0, double **ga, bool *none, char *msg,
                                  size_t cap) {
    em_device capd = {EM_BACKEND_CAPTURE, 0, false, EM_CKPT_NONE};
    em_tensor *leaves[CONF_MAX_IO] = {0}, *views[CONF_MAX_IO] = {0}, *outs[CONF_MAX_IO] = {0};
    em_tensor *loss = NULL, *ins[CONF_MAX_IO] = {0}, *gouts[CONF_MAX_IO] = {0};
    em_grads *grads = NULL;
    em_graph *g = NULL;
    int nout = 0, ng = 0, of[CONF_MAX_IO]; /* of[i]: input i's gradient output, or -1 */
    bool ok = em_device_autodiff(capd, ad.checkpointing, &capd) == EM_OK &&
              em_graph_begin(&g) == EM_OK;
    if (!ok) snprintf(msg, cap, "opening the capture: %s", em_last_error());
    for (int i = 0; ok && i < c->nin; i++) {
        const bool fl = golden_is_float(c->in[i].dt);
        char nm[16];
        snprintf(nm, sizeof nm, "in%d", i);
        em_status s = em_graph_input(g, nm, fl ? EM_F64 : c->in[i].dt, c->in[i].shape,
                                     c->in[i].rank, capd, &leaves[i]);
        if (s == EM_OK && fl) s = em_tensor_require_grad(leaves[i]);
        if (s == EM_OK) s = golden_view(&c->in[i], leaves[i], &views[i]);
        if (s != EM_OK) {
            snprintf(msg, cap, "capturing input %d: %s", i, em_last_error());
            ok = false;
        }
    }
    ok = ok && forward_backward(c, fn, capd, views, w, r0, outs, &nout, &loss, &grads, msg, cap);
    for (int i = 0; ok && i < c->nin; i++) {
        of[i] = -1;
        if (!golden_is_float(c->in[i].dt)) continue;
        em_tensor *gr = NULL;
        char nm[16];
        snprintf(nm, sizeof nm, "grad%d", i);
        ok = em_grads_get(grads, leaves[i], &gr) == EM_OK &&
             (!gr || em_graph_output(g, nm, gr) == EM_OK);
        if (!ok) snprintf(msg, cap, "the gradient of input %d: %s", i, em_last_error());
        if (gr) of[i] = ng++;
        em_tensor_release(gr);
    }
    em_grads_release(grads);
    em_tensor_release(loss);
    release_all(outs, nout);
    release_all(views, c->nin);
    release_all(leaves, c->nin);
    if (g && em_graph_end(g) != EM_OK && ok) {
        snprintf(msg, cap, "em_graph_end: %s", em_last_error());
        ok = false;
    }
    for (int i = 0; ok && i < c->nin; i++)
        if (make_leaf(&c->in[i], vals[i], inner, false, &ins[i]) != EM_OK) {
            snprintf(msg, cap, "building input %d failed: %s", i, em_last_error());
            ok = false;
        }
    if (ok && em_graph_run(g, inner, (const em_tensor *const *)ins, c->nin, gouts, ng) != EM_OK) {
        snprintf(msg, cap, "replay failed: %s", em_last_error());
        ok = false;
    }
    for (int i = 0; ok && i < c->nin; i++)
        if (golden_is_float(c->in[i].dt))
            ok = take_grad(c, i, of[i] >= 0 ? gouts[of[i]] : NULL, inner, ga, none, msg, cap);
    release_all(gouts, ng);
    release_all(ins, c->nin);
    em_graph_release(g);
    return ok;
}

/* ---- the numeric side ---- */

/* Deterministic weights in [-1, -0.25] U [0.25, 1] (never near 0, so that every output
 * counts). */
static double next_weight(uint64_t *state) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    double u = (double)(*state >> 11) / 9007199254740992.0; /* [0, 1) */
    double m = 0.25 + 0.75 * u;
    return ((*state >> 7) & 1) ? m : -m;
}

/* Per float input: the numeric gradient, and which elements sit on a kink. */
typedef struct numeric {
    double *g[CONF_MAX_IO];
    bool *kink[CONF_MAX_IO];
    double noise; /* the rounding noise of one numeric derivative (absolute) */
} numeric;

static double tol_of(double a, double b, double noise, double scale) {
    return scale * (GC_ATOL + GC_RTOL * fmax(fabs(a), fabs(b))) + noise;
}

/* Central differences of the loss with respect to every element of every float input. An
 * element whose second difference is too large for the comparison to be trusted is checked
 * for smoothness at 2h and 3h (a smooth function's second difference grows as h^2, a kink's
 * as h): if it is not smooth, it is marked as a kink and skipped. */
static bool numeric_grad(const golden_case *c, conf_fn fn, em_device dev, double **vals,
                         double *const *w, double l0, double lscale, double tscale,
                         numeric *nm, char *msg, size_t cap) {
    /* each loss is a sum of terms: its rounding error is a few ulps of the sum of their
     * magnitudes (the op's own rounding included) */
    double lnoise = 64.0 * DBL_EPSILON * (lscale + fabs(l0));
    for (int i = 0; i < c->nin; i++) {
        if (!golden_is_float(c->in[i].dt)) continue;
        for (int64_t j = 0; j < c->in[i].n; j++) {
            double x = vals[i][j];
            double h = GC_EPS * fmax(1.0, fabs(x));
            double lp[3], lm[3], step = 0;
            int have = 0;
            for (int m = 1; m <= 3; m++) {
                if (m > 1) {
                    /* only when the plain difference is in doubt */
                    double d2 = lp[0] - 2 * l0 + lm[0];
                    double gn = (lp[0] - lm[0]) / step;
                    double noise = 2 * lnoise / step;
                    if (fabs(d2) / h <= 0.5 * tol_of(gn, gn, noise, tscale)) break;
                }
                double xp = x + m * h, xm = x - m * h;
                vals[i][j] = xp;
                lp[m - 1] = eval_loss(c, fn, dev, vals, w);
                vals[i][j] = xm;
                lm[m - 1] = eval_loss(c, fn, dev, vals, w);
                vals[i][j] = x;
                if (m == 1) step = xp - xm;
                have = m;
                if (isnan(lp[m - 1]) || isnan(lm[m - 1])) {
                    snprintf(msg, cap, "the op failed with input %d element %lld moved by %g", i,
                             (long long)j, m * h);
                    return false;
                }
            }
            nm->g[i][j] = (lp[0] - lm[0]) / step;
            nm->kink[i][j] = false;
            if (!isfinite(nm->g[i][j])) {
                nm->kink[i][j] = true; /* a pole or overflow within a step */
            } else if (have == 3) {
                double d1 = lp[0] - 2 * l0 + lm[0];
                double d2 = lp[1] - 2 * l0 + lm[1];
                double d3 = lp[2] - 2 * l0 + lm[2];
                double tn = 8 * lnoise;
                bool smooth = fabs(d2 - 4 * d1) <= 0.05 * fabs(4 * d1) + tn &&
                              fabs(d3 - 9 * d1) <= 0.05 * fabs(9 * d1) + tn;
                nm->kink[i][j] = !smooth;
            }
        }
    }
    nm->noise = 2 * lnoise / (2 * GC_EPS);
    return true;
}

/* ---- bookkeeping of failures by op ---- */

typedef struct op_fail {
    char op[64];
    int count;
    char first[320];
} op_fail;

static op_fail fails[256];
static int nfails;

static void note_fail(const char *op, const char *what) {
    for (int i = 0; i < nfails; i++)
        if (strcmp(fails[i].op, op) == 0) {
            fails[i].count++;
            return;
        }
    if (nfails == (int)(sizeof fails / sizeof fails[0])) return;
    snprintf(fails[nfails].op, sizeof fails[nfails].op, "%s", op);
    snprintf(fails[nfails].first, sizeof fails[nfails].first, "%s", what);
    fails[nfails].count = 1;
    nfails++;
}

/* ---- the table ---- */

static bool no_grad_op(const char *op) {
    for (size_t i = 0; i < sizeof no_grad_ops / sizeof no_grad_ops[0]; i++)
        if (strcmp(no_grad_ops[i], op) == 0) return true;
    return false;
}

static double op_tol_scale(const char *op) {
    for (size_t i = 0; i < sizeof loose_ops / sizeof loose_ops[0]; i++)
        if (strcmp(loose_ops[i].op, op) == 0) return loose_ops[i].scale;
    return 1.0;
}

typedef struct stats {
    long passed, failed, skipped, kinks, elements;
} stats;

static void fail_line(stats *st, const golden_case *c, const char *dev, const char *msg) {
    printf("FAIL %s [%s] (op %s): %s\n", c->name, dev, c->op, msg);
    fflush(stdout);
    note_fail(c->op, msg);
    st->failed++;
}

/* Checks case c on the inner device dev and its two autodiff wrappings. */
static void check_case(const golden_case *c, conf_fn fn, em_device dev, const char *only_dev,
                       uint64_t seed, bool verbose, stats *st) {
    char inner_name[64], msg[512];
    em_device_name(dev, inner_name, sizeof inner_name);
    em_device ads[2];
    char ad_names[2][64];
    int nad = 0;
    const em_checkpointing strategies[2] = {EM_CKPT_DISABLED, EM_CKPT_BALANCED};
    for (int k = 0; k < 2; k++) {
        if (em_device_autodiff(dev, strategies[k], &ads[nad]) != EM_OK) continue;
        em_device_name(ads[nad], ad_names[nad], sizeof ad_names[nad]);
        if (only_dev && strcmp(only_dev, ad_names[nad]) != 0 && strcmp(only_dev, inner_name) != 0)
            continue;
        nad++;
    }
    if (!nad) return;

    double *vals[CONF_MAX_IO] = {0}, *w[CONF_MAX_IO] = {0};
    double *ga[2][CONF_MAX_IO] = {{0}};
    bool none[2][CONF_MAX_IO] = {{0}};
    numeric nm = {{0}, {0}, 0};
    run_out r0;
    memset(&r0, 0, sizeof r0);
    bool ok = true;
    for (int i = 0; i < c->nin && ok; i++) {
        size_t n = (size_t)(c->in[i].n ? c->in[i].n : 1);
        vals[i] = malloc(n * sizeof(double));
        ok = vals[i] != NULL;
        if (ok) memcpy(vals[i], c->in[i].vals, (size_t)c->in[i].n * sizeof(double));
        if (ok && golden_is_float(c->in[i].dt)) {
            nm.g[i] = calloc(n, sizeof(double));
            nm.kink[i] = calloc(n, sizeof(bool));
            ga[0][i] = calloc(n, sizeof(double));
            ga[1][i] = calloc(n, sizeof(double));
            ok = nm.g[i] && nm.kink[i] && ga[0][i] && ga[1][i];
        }
    }
    if (!ok) {
        for (int a = 0; a < nad; a++) fail_line(st, c, ad_names[a], "out of memory in the harness");
        goto done;
    }

    /* 1. the untracked run: outputs, weights, and the numeric gradient */
    if (!run_plain(c, fn, dev, vals, &r0, msg, sizeof msg)) {
        for (int a = 0; a < nad; a++) fail_line(st, c, ad_names[a], msg);
        goto done;
    }
    bool any_float = false, finite = true;
    for (int k = 0; k < r0.n; k++) {
        if (!r0.isfloat[k]) continue;
        any_float = true;
        w[k] = malloc((size_t)(r0.numel[k] ? r0.numel[k] : 1) * sizeof(double));
        if (!w[k]) {
            ok = false;
            break;
        }
        for (int64_t j = 0; j < r0.numel[k]; j++) {
            w[k][j] = buffer_output(c, k) ? 0.0 : next_weight(&seed);
            if (!isfinite(r0.vals[k][j])) finite = false;
        }
    }
    if (!ok) {
        for (int a = 0; a < nad; a++) fail_line(st, c, ad_names[a], "out of memory in the harness");
        goto done;
    }
    if (!any_float || !finite) {
        st->skipped += nad;
        if (verbose)
            printf("skip %s: %s\n", c->name, any_float ? "non-finite output" : "no float output");
        goto done;
    }
    double l0, lscale;
    loss_of(&r0, w, &l0, &lscale);
    double tscale = op_tol_scale(c->op);
    if (!numeric_grad(c, fn, dev, vals, w, l0, lscale, tscale, &nm, msg, sizeof msg)) {
        for (int a = 0; a < nad; a++) fail_line(st, c, ad_names[a], msg);
        goto done;
    }

    /* 2. backward on each autodiff wrapping */
    bool first_ok = false; /* the first strategy's gradients, to compare the second's with */
    /* with --capture, each strategy once more: its backward captured and replayed */
    for (int vi = 0; vi < nad * (g_capture ? 2 : 1); vi++) {
        const int a = vi % nad;
        const bool captured = vi >= nad;
        char vname[80];
        snprintf(vname, sizeof vname, "%s%s", ad_names[a], captured ? ", captured" : "");
        if (captured ? !run_backward_captured(c, fn, ads[a], dev, vals, w, &r0, ga[a], none[a],
                                              msg, sizeof msg)
                     : !run_backward(c, fn, ads[a], dev, vals, w, &r0, ga[a], none[a], msg,
                                     sizeof msg)) {
            fail_line(st, c, vname, msg);
            continue;
        }
        if (a == 0 && !captured) first_ok = true;
        bool cmp = a == 1 && first_ok && !captured;
        long checked = 0, kinks = 0, bad = 0;
        char first[320] = "";
        for (int i = 0; i < c->nin; i++) {
            if (!golden_is_float(c->in[i].dt) || buffer_input(c, i)) continue;
            for (int64_t j = 0; j < c->in[i].n; j++) {
                if (nm.kink[i][j]) {
                    kinks++;
                    continue;
                }
                checked++;
                double an = ga[a][i][j], nu = nm.g[i][j];
                double tol = tol_of(an, nu, nm.noise, tscale);
                bool good = fabs(an - nu) <= tol;
                /* both strategies run the same backward code on values the same kernels
                 * made: their gradients are the same bits */
                if (good && cmp)
                    good = memcmp(&an, &ga[0][i][j], sizeof an) == 0 ||
                           (isnan(an) && isnan(ga[0][i][j]));
                if (!good && bad++ == 0) {
                    if (cmp && fabs(an - nu) <= tol)
                        snprintf(first, sizeof first, "input %d element %lld: %.10g here, "
                                 "%.10g with %s", i, (long long)j, an, ga[0][i][j], ad_names[0]);
                    else
                        snprintf(first, sizeof first, "input %d element %lld: analytic %.10g, "
                                 "numeric %.10g (tol %.2g)%s", i, (long long)j, an, nu, tol,
                                 none[a][i] ? "; no gradient reached this input" : "");
                }
            }
        }
        st->kinks += kinks;
        st->elements += checked;
        if (bad) {
            snprintf(msg, sizeof msg, "%s (%ld of %ld elements differ)", first, bad, checked);
            fail_line(st, c, vname, msg);
        } else if (checked == 0 && kinks > 0) {
            st->skipped++;
            if (verbose)
                printf("skip %s [%s]: every element sits on a kink\n", c->name, vname);
        } else {
            st->passed++;
            if (verbose)
                printf("ok   %s [%s] (%ld elements, %ld on kinks)\n", c->name, vname,
                       checked, kinks);
        }
    }

done:
    for (int i = 0; i < CONF_MAX_IO; i++) {
        free(vals[i]);
        free(w[i]);
        free(nm.g[i]);
        free(nm.kink[i]);
        free(ga[0][i]);
        free(ga[1][i]);
    }
    free_run_out(&r0);
}

/* The loss machinery itself (mul, sum, add, backward, grads) on each autodiff device: the
 * gradient of sum(x * w) + sum(x * w) is 2w. Without it nothing else can be checked. */
static bool self_test(em_device dev) {
    char name[64];
    em_device_name(dev, name, sizeof name);
    const double xv[3] = {0.5, -1.25, 2.0}, wv[3] = {0.75, -0.5, 0.25};
    const int64_t shape[1] = {3};
    em_tensor *x = NULL, *wt = NULL, *p = NULL, *s = NULL, *l = NULL;
    em_grads *g = NULL;
    em_tensor *gx = NULL;
    double got[3] = {0};
    em_status st = em_tensor_from_data(xv, EM_F64, shape, 1, dev, &x);
    if (st == EM_OK) st = em_tensor_require_grad(x);
    if (st == EM_OK) st = em_tensor_from_data(wv, EM_F64, shape, 1, dev, &wt);
    if (st == EM_OK) st = em_mul(x, wt, &p);
    if (st == EM_OK) st = em_sum(p, &s);
    if (st == EM_OK) st = em_add(s, s, &l);
    if (st == EM_OK) st = em_backward(l, &g);
    if (st == EM_OK) st = em_grads_get(g, x, &gx);
    if (st == EM_OK && gx) st = em_tensor_to_data(gx, got, sizeof got);
    bool ok = st == EM_OK && gx;
    for (int i = 0; ok && i < 3; i++) ok = fabs(got[i] - 2 * wv[i]) < 1e-12;
    if (!ok)
        printf("gradcheck: the loss itself does not differentiate on %s (sum(x*w) with em_mul, "
               "em_sum, em_add, em_backward): %s: %s; got [%g %g %g], want [%g %g %g]\n",
               name, em_status_name(st), st == EM_OK ? (gx ? "wrong values" : "no gradient")
                                                     : em_last_error(),
               got[0], got[1], got[2], 2 * wv[0], 2 * wv[1], 2 * wv[2]);
    em_tensor_release(gx);
    em_grads_release(g);
    em_tensor_release(l);
    em_tensor_release(s);
    em_tensor_release(p);
    em_tensor_release(wt);
    em_tensor_release(x);
    return ok;
}

int main(int argc, char **argv) {
    const char *path = NULL, *filter = NULL, *only_dev = NULL, *skip_backend = NULL;
    bool verbose = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--filter") == 0 && i + 1 < argc) filter = argv[++i];
        else if (strcmp(argv[i], "--skip-backend") == 0 && i + 1 < argc) skip_backend = argv[++i];
        else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) only_dev = argv[++i];
        else if (strcmp(argv[i], "--verbose") == 0) verbose = true;
        else if (strcmp(argv[i], "--capture") == 0) g_capture = true;
        else path = argv[i];
    }
    if (!path) {
        fprintf(stderr, "usage: gradcheck GOLDEN [--filter TEXT] [--device NAME] "
                        "[--skip-backend NAME] [--verbose] [--capture]\n");
        return 2;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "gradcheck: cannot open %s\n", path);
        return 2;
    }
    em_device devs[64];
    size_t ndev = 0;
    if (em_devices(devs, 64, &ndev) != EM_OK) {
        fclose(f);
        return 2;
    }
    if (ndev > 64) ndev = 64;
    if (skip_backend) {
        size_t k = 0;
        for (size_t d = 0; d < ndev; d++)
            if (strcmp(em_backend_name(devs[d].backend), skip_backend) != 0) devs[k++] = devs[d];
        ndev = k;
    }
    printf("gradcheck: devices:");
    bool self_ok = true;
    for (size_t d = 0; d < ndev; d++) {
        for (int k = 0; k < 2; k++) {
            em_device ad;
            char nm[64];
            if (em_device_autodiff(devs[d], k ? EM_CKPT_BALANCED : EM_CKPT_DISABLED, &ad) != EM_OK)
                continue;
            em_device_name(ad, nm, sizeof nm);
            printf(" %s", nm);
        }
    }
    printf("\n");
    for (size_t d = 0; d < ndev; d++) {
        for (int k = 0; k < 2; k++) {
            em_device ad;
            if (em_device_autodiff(devs[d], k ? EM_CKPT_BALANCED : EM_CKPT_DISABLED, &ad) != EM_OK)
                continue;
            if (!self_test(ad)) self_ok = false;
        }
    }
    if (!self_ok) {
        fclose(f);
        printf("0 passed, 1 failed\n");
        return 1;
    }

    stats st = {0};
    long cases = 0;
    golden_case *c = calloc(1, sizeof *c);
    if (!c) {
        fclose(f);
        return 2;
    }
    int lineno = 0, rc;
    uint64_t case_index = 0;
    while ((rc = golden_next(f, path, &lineno, c)) == 1) {
        case_index++;
        bool skip = (filter && !strstr(c->name, filter)) || c->error[0] || no_grad_op(c->op) ||
                    heavy_case(c->name);
        bool any_float = false, finite = true;
        for (int i = 0; i < c->nin; i++) {
            if (!golden_is_float(c->in[i].dt)) continue;
            any_float = true;
            for (int64_t j = 0; j < c->in[i].n; j++)
                if (!isfinite(c->in[i].vals[j])) finite = false;
        }
        if (!skip && any_float && !finite) {
            if (verbose) printf("skip %s: non-finite input\n", c->name);
            st.skipped++;
        }
        if (!skip && any_float && finite) {
            conf_fn fn = golden_find_op(c->op);
            cast_in_f64(c);
            cases++;
            if (!fn) {
                fail_line(&st, c, "all", "no wrapper for this op");
            } else {
                for (size_t d = 0; d < ndev; d++)
                    check_case(c, fn, devs[d], only_dev, 0x9e3779b97f4a7c15ull * case_index,
                               verbose, &st);
            }
        }
    }
    golden_free(c);
    free(c);
    fclose(f);
    if (rc < 0) return 2;
    printf("gradcheck: %ld cases checked, %ld runs skipped (non-finite values or every element "
           "on a kink), %ld elements compared, %ld skipped on kinks\n",
           cases, st.skipped, st.elements, st.kinks);
    if (nfails) {
        printf("gradcheck: failing ops:\n");
        for (int i = 0; i < nfails; i++)
            printf("  %-20s %3d failure(s), first: %s\n", fails[i].op, fails[i].count,
                   fails[i].first);
    }
    printf("%ld passed, %ld failed\n", st.passed, st.failed);
    return st.failed == 0 && cases > 0 ? 0 : 1;
}
