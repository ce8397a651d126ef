/*
 * test_composite_grads.c — gradients of composite functions against PyTorch.
 *
 * Usage: test_composite_grads [golden_grads.txt]
 *
 * golden_grads.txt (written by gen_grads.py, whose functions the builders below mirror one for
 * one) holds, per composite, its inputs, the loss and the gradient of every float input that
 * torch.autograd computed in float64. Each composite is built here with ember's public API on
 * every device of em_devices() wrapped for autodiff with EM_CKPT_DISABLED and with
 * EM_CKPT_BALANCED; every float input requires grad, the intermediates are released before
 * em_backward (the tape alone must keep what backward needs), and the loss and gradients must
 * match the golden ones to ~1e-9. On each device the BALANCED gradients must equal the
 * DISABLED ones bit for bit (the two strategies run the same backward code), and so must
 * those of each strategy with the whole forward in a checkpoint region (two nested ones, the
 * inner one around the builder alone), where every value is recomputed from the inputs.
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

#define MAX_INPUTS 16
#ifndef RTOL
#define RTOL 1e-9 /* relative to the value plus the tensor's largest */
#endif

/* ---- the golden data ---- */

typedef struct ginput {
    char name[32];
    em_dtype dt; /* EM_F64 or EM_I64 */
    int rank;
    int64_t shape[EM_MAX_RANK];
    size_t n;
    double *vals;   /* f64 inputs */
    int64_t *ivals; /* i64 inputs */
    double *grad;   /* the expected gradient (f64 inputs) */
} ginput;

typedef struct gcase {
    char name[64];
    int nin;
    ginput in[MAX_INPUTS];
    double loss;
    bool has_loss;
} gcase;

static gcase *g_cases;
static int g_ncases;
static const char *g_path = "tests/autodiff/golden_grads.txt";

/* Parses n numbers from text into vals (double) or ivals (int64). Returns 0 on success. */
static int parse_values(const char *text, size_t n, double *vals, int64_t *ivals) {
    const char *p = text;
    for (size_t i = 0; i < n; i++) {
        char *end;
        if (vals) vals[i] = strtod(p, &end);
        else ivals[i] = strtoll(p, &end, 10);
        if (end == p) return 1;
        p = end;
    }
    while (*p == ' ' || *p == '\n' || *p == '\r') p++;
    return *p != '\0';
}

static ginput *find_input(gcase *c, const char *name) {
    for (int i = 0; i < c->nin; i++)
        if (strcmp(c->in[i].name, name) == 0) return &c->in[i];
    return NULL;
}

/* One "input NAME DT RANK DIMS... : VALUES" line into c. Returns 0 on success. */
static int parse_input(gcase *c, const char *line) {
    if (c->nin >= MAX_INPUTS) return 1;
    ginput *in = &c->in[c->nin];
    char dt[8];
    int used = 0;
    if (sscanf(line, "input %31s %7s %d%n", in->name, dt, &in->rank, &used) != 3) return 1;
    if (in->rank < 0 || in->rank > EM_MAX_RANK) return 1;
    if (strcmp(dt, "f64") == 0) in->dt = EM_F64;
    else if (strcmp(dt, "i64") == 0) in->dt = EM_I64;
    else return 1;
    const char *p = line + used;
    in->n = 1;
    for (int d = 0; d < in->rank; d++) {
        char *end;
        in->shape[d] = strtoll(p, &end, 10);
        if (end == p || in->shape[d] < 0) return 1;
        in->n *= (size_t)in->shape[d];
        p = end;
    }
    p = strchr(p, ':');
    if (!p) return 1;
    if (in->dt == EM_F64) in->vals = calloc(in->n + 1, sizeof *in->vals);
    else in->ivals = calloc(in->n + 1, sizeof *in->ivals);
    c->nin++;
    if (!in->vals && !in->ivals) return 1;
    return parse_values(p + 1, in->n, in->vals, in->ivals);
}

/* One "grad NAME : VALUES" line into c. Returns 0 on success. */
static int parse_grad(gcase *c, const char *line) {
    char name[32];
    if (sscanf(line, "grad %31s", name) != 1) return 1;
    ginput *in = find_input(c, name);
    const char *p = strchr(line, ':');
    if (!in || in->dt != EM_F64 || in->grad || !p) return 1;
    in->grad = calloc(in->n + 1, sizeof *in->grad);
    return !in->grad || parse_values(p + 1, in->n, in->grad, NULL);
}

static void free_cases(void) {
    for (int k = 0; k < g_ncases; k++)
        for (int i = 0; i < g_cases[k].nin; i++) {
            free(g_cases[k].in[i].vals);
            free(g_cases[k].in[i].ivals);
            free(g_cases[k].in[i].grad);
        }
    free(g_cases);
    g_cases = NULL;
    g_ncases = 0;
}

/* Reads the golden file. Returns 0 on success, printing what is wrong otherwise. */
static int load_cases(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "test_composite_grads: cannot open %s\n", path);
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0;
    int bad = 0, cap_cases = 0;
    gcase *cur = NULL;
    while (!bad && getline(&line, &cap, f) >= 0) {
        lineno++;
        if (line[0] == '#' || line[0] == '\n') continue;
        if (strncmp(line, "composite ", 10) == 0) {
            if (cur) bad = 1;
            else if (g_ncases == cap_cases) {
                cap_cases = cap_cases ? 2 * cap_cases : 16;
                gcase *nc = realloc(g_cases, (size_t)cap_cases * sizeof *nc);
                if (!nc) bad = 1;
                else g_cases = nc;
            }
            if (!bad) {
                cur = &g_cases[g_ncases++];
                memset(cur, 0, sizeof *cur);
                bad = sscanf(line, "composite %63s", cur->name) != 1;
            }
        } else if (!cur) {
            bad = 1;
        } else if (strncmp(line, "input ", 6) == 0) {
            bad = parse_input(cur, line);
        } else if (strncmp(line, "loss ", 5) == 0) {
            bad = sscanf(line, "loss %lf", &cur->loss) != 1;
            cur->has_loss = true;
        } else if (strncmp(line, "grad ", 5) == 0) {
            bad = parse_grad(cur, line);
        } else if (strncmp(line, "end", 3) == 0) {
            bad = !cur->has_loss;
            for (int i = 0; !bad && i < cur->nin; i++)
                bad = cur->in[i].dt == EM_F64 && !cur->in[i].grad;
            cur = NULL;
        } else {
            bad = 1;
        }
    }
    if (!bad && cur) bad = 1;
    free(line);
    fclose(f);
    if (bad) fprintf(stderr, "test_composite_grads: %s:%ld: malformed\n", path, lineno);
    return bad;
}

static const gcase *find_case(const char *name) {
    for (int k = 0; k < g_ncases; k++)
        if (strcmp(g_cases[k].name, name) == 0) return &g_cases[k];
    return NULL;
}

/* ---- building composites: an arena keeps every intermediate; the first failing call stops
 *      the build and is remembered with its message ---- */

#define ARENA_CAP 128

typedef struct arena {
    em_tensor *t[ARENA_CAP];
    int n;
    em_tensor *spare; /* the output slot once the arena is full */
    bool failed;
    char what[512];
    const gcase *gc;
    em_tensor *const *in; /* the inputs, parallel to gc->in */
} arena;

/* Where the next op writes its result. */
static em_tensor **slot(arena *a) { return a->n < ARENA_CAP ? &a->t[a->n] : &a->spare; }

/* Keeps the result of a call (status s, source text) or records the failure. */
static em_tensor *take(arena *a, em_status s, const char *text) {
    if (s != EM_OK) {
        a->failed = true;
        snprintf(a->what, sizeof a->what, "%s: %s: %s", text, em_status_name(s), em_last_error());
        return NULL;
    }
    if (a->n >= ARENA_CAP) {
        em_tensor_release(a->spare);
        a->spare = NULL;
        a->failed = true;
        snprintf(a->what, sizeof a->what, "%s: the test's arena is full", text);
        return NULL;
    }
    return a->t[a->n++];
}

static void arena_clear(arena *a) {
    for (int i = 0; i < a->n; i++) em_tensor_release(a->t[i]);
    a->n = 0;
}

/* The input named `name`. */
static em_tensor *input(arena *a, const char *name) {
    for (int i = 0; i < a->gc->nin; i++)
        if (strcmp(a->gc->in[i].name, name) == 0) return a->in[i];
    if (!a->failed) snprintf(a->what, sizeof a->what, "no input '%s' in the golden data", name);
    a->failed = true;
    return NULL;
}

/* R(call): runs an ember call that writes OUT, unless the build already failed. */
#define R(call) ((a)->failed ? NULL : take((a), (call), #call))
#define OUT slot(a)
#define IN(name) input(a, name)

typedef em_tensor *(*builder)(arena *a);

/* x @ w^T + b (torch.nn.functional.linear). */
static em_tensor *linear(arena *a, em_tensor *x, em_tensor *w, em_tensor *b) {
    em_tensor *wt = R(em_transpose(w, 0, 1, OUT));
    em_tensor *h = R(em_matmul(x, wt, OUT));
    return R(em_add(h, b, OUT));
}

static em_tensor *build_mlp_relu(arena *a) {
    em_tensor *h = linear(a, IN("x"), IN("w1"), IN("b1"));
    h = R(em_relu(h, OUT));
    em_tensor *o = linear(a, h, IN("w2"), IN("b2"));
    return R(em_cross_entropy(o, IN("target"), OUT));
}

static em_tensor *build_mlp_gelu_ln(arena *a) {
    em_tensor *h = linear(a, IN("x"), IN("w1"), IN("b1"));
    h = R(em_layer_norm(h, 1, IN("ln_w"), IN("ln_b"), 1e-5, OUT));
    h = R(em_gelu(h, OUT));
    em_tensor *o = linear(a, h, IN("w2"), IN("b2"));
    return R(em_cross_entropy(o, IN("target"), OUT));
}

static em_tensor *build_convnet(arena *a) {
    em_conv_params p1 = em_conv_params_default(), p2 = em_conv_params_default();
    p1.stride[0] = p1.stride[1] = 2;
    p1.padding[0] = p1.padding[1] = 1;
    p2.padding[0] = p2.padding[1] = 1;
    p2.groups = 2;
    em_pool_params mp = {{2, 2}, {1, 1}, {0, 0}, {1, 1}, false, false};
    em_pool_params ap = {{2, 2}, {0, 0}, {0, 0}, {0, 0}, false, true};
    em_tensor *h = R(em_conv2d(IN("x"), IN("w1"), IN("b1"), &p1, OUT));
    h = R(em_relu(h, OUT));
    h = R(em_max_pool2d(h, &mp, OUT, NULL));
    h = R(em_conv2d(h, IN("w2"), IN("b2"), &p2, OUT));
    h = R(em_avg_pool2d(h, &ap, OUT));
    h = R(em_flatten(h, 1, -1, OUT));
    em_tensor *o = linear(a, h, IN("w3"), IN("b3"));
    return R(em_cross_entropy(o, IN("target"), OUT));
}

static em_tensor *build_attention(arena *a) {
    em_tensor *kt = R(em_transpose(IN("k"), -2, -1, OUT));
    em_tensor *s = R(em_matmul(IN("q"), kt, OUT));
    s = R(em_div_scalar(s, sqrt(8.0), OUT));
    s = R(em_softmax(s, -1, OUT));
    em_tensor *o = R(em_matmul(s, IN("v"), OUT));
    o = R(em_mul(o, IN("w"), OUT));
    return R(em_sum(o, OUT));
}

static em_tensor *build_layer_norm(arena *a) {
    em_tensor *y = R(em_layer_norm(IN("x"), 2, IN("weight"), IN("bias"), 1e-5, OUT));
    y = R(em_mul(y, IN("w"), OUT));
    return R(em_sum(y, OUT));
}

static em_tensor *build_broadcast(arena *a) {
    em_tensor *h = R(em_mul(IN("x"), IN("y"), OUT));
    h = R(em_add(h, IN("z"), OUT));
    h = R(em_exp(h, OUT));
    h = R(em_sum_dim(h, 1, false, OUT));
    return R(em_mean(h, OUT));
}

static em_tensor *build_residual(arena *a) {
    em_tensor *h = R(em_matmul(IN("x"), IN("w1"), OUT));
    h = R(em_relu(h, OUT));
    h = R(em_matmul(h, IN("w2"), OUT));
    em_tensor *o = R(em_add(IN("x"), h, OUT));
    o = R(em_mul(o, o, OUT));
    return R(em_mean(o, OUT));
}

static em_tensor *build_logsumexp(arena *a) {
    em_tensor *l = R(em_log_softmax(IN("x"), 1, OUT));
    l = R(em_mul(l, IN("w"), OUT));
    l = R(em_sum(l, OUT));
    em_tensor *m = R(em_logsumexp_dim(IN("x"), 0, false, OUT));
    m = R(em_logsumexp(m, OUT));
    return R(em_add(l, m, OUT));
}

static em_tensor *build_conv_transpose(arena *a) {
    em_conv_params p = em_conv_params_default();
    p.stride[0] = p.stride[1] = 2;
    p.padding[0] = p.padding[1] = 1;
    p.output_padding[0] = p.output_padding[1] = 1;
    em_tensor *h = R(em_conv_transpose2d(IN("x"), IN("w"), IN("b"), &p, OUT));
    h = R(em_tanh(h, OUT));
    return R(em_mean(h, OUT));
}

static em_tensor *build_embedding(arena *a) {
    em_tensor *e = R(em_embedding(IN("weight"), IN("idx"), OUT));
    e = R(em_mean_dim(e, 1, false, OUT));
    em_tensor *p = linear(a, e, IN("w"), IN("b"));
    p = R(em_sub(p, IN("y"), OUT));
    p = R(em_mul(p, p, OUT));
    return R(em_mean(p, OUT));
}

static em_tensor *build_gather_scatter(arena *a) {
    em_tensor *s = R(em_index_select(IN("x"), 0, IN("sel"), OUT));
    em_tensor *g = R(em_gather(s, 1, IN("gidx"), OUT));
    g = R(em_mul(g, g, OUT));
    em_tensor *o = R(em_scatter_add(IN("base"), 1, IN("sidx"), g, OUT));
    o = R(em_mul(o, o, OUT));
    return R(em_sum(o, OUT));
}

static em_tensor *build_slice_cat(arena *a) {
    em_tensor *parts[2];
    parts[0] = R(em_slice(IN("x"), 1, 0, INT64_MAX, 2, OUT));
    parts[1] = R(em_slice(IN("x"), 1, 1, INT64_MAX, 2, OUT));
    em_tensor *y = R(em_cat((const em_tensor *const *)parts, 2, 1, OUT));
    em_tensor *v = R(em_var_dim(y, 1, 1, false, OUT));
    v = R(em_sum(v, OUT));
    em_tensor *m = R(em_max_dim(y, 0, false, OUT));
    m = R(em_mul(m, m, OUT));
    m = R(em_sum(m, OUT));
    em_tensor *mx = R(em_max(y, OUT));
    em_tensor *vr = R(em_var(y, 0, OUT));
    em_tensor *l = R(em_add(v, m, OUT));
    l = R(em_add(l, mx, OUT));
    return R(em_add(l, vr, OUT));
}

/* ---- running a composite ---- */

/* Appends a formatted line to a growing report. */
static void report(char **buf, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    size_t old = *buf ? strlen(*buf) : 0, add = strlen(line);
    char *nb = realloc(*buf, old + add + 2);
    if (!nb) return;
    memcpy(nb + old, line, add);
    nb[old + add] = '\n';
    nb[old + add + 1] = '\0';
    *buf = nb;
}

/* Compares n values with the expected ones to RTOL (relative to each value and to the
 * tensor's largest). Returns 0 when they match, else reports the worst. */
static int compare(char **rep, const char *where, const char *what, const double *got,
                   const double *want, size_t n) {
    double scale = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    size_t worst = 0, bad = 0;
    double worst_err = -1;
    for (size_t i = 0; i < n; i++) {
        double err = fabs(got[i] - want[i]);
        if (!(err <= RTOL * (fabs(want[i]) + scale + 1e-300))) {
            if (isnan(err)) err = INFINITY;
            bad++;
            if (err > worst_err) {
                worst_err = err;
                worst = i;
            }
        }
    }
    if (!bad) return 0;
    report(rep, "  %s: %s: %zu of %zu values differ from torch; worst [%zu] %.17g vs %.17g", where,
           what, bad, n, worst, got[worst], want[worst]);
    return 1;
}

/* Runs composite gc on dev: the loss and the gradients of its f64 inputs (into grads[i],
 * malloc'd, NULL for other inputs) against the golden data; with `region`, the inputs are
 * made outside a checkpoint region and the forward runs in two nested ones. Returns the
 * number of problems, reported into *rep. */
static int run_on(const gcase *gc, builder build, em_device dev, bool region, double **grads,
                  char **rep) {
    char where[160], devname[64];
    if (em_device_name(dev, devname, sizeof devname) != EM_OK) strcpy(devname, "?");
    snprintf(where, sizeof where, "%s on %s%s", gc->name, devname, region ? " in a region" : "");
    em_tensor *in[MAX_INPUTS] = {0};
    int problems = 0;
    for (int i = 0; i < gc->nin; i++) {
        const ginput *gi = &gc->in[i];
        grads[i] = NULL;
        const void *data = gi->dt == EM_F64 ? (const void *)gi->vals : (const void *)gi->ivals;
        em_status s = em_tensor_from_data(data, gi->dt, gi->shape, gi->rank, dev, &in[i]);
        if (s == EM_OK && gi->dt == EM_F64) s = em_tensor_require_grad(in[i]);
        if (s != EM_OK) {
            report(rep, "  %s: input %s: %s: %s", where, gi->name, em_status_name(s),
                   em_last_error());
            problems++;
        }
    }
    arena *a = calloc(1, sizeof *a);
    em_tensor *loss = NULL;
    em_grads *g = NULL;
    if (!a) {
        report(rep, "  %s: out of memory", where);
        problems++;
    }
    if (!problems) {
        a->gc = gc;
        a->in = in;
        if (region) {
            assert_int_equal(em_checkpoint_begin(), EM_OK);
            assert_int_equal(em_checkpoint_begin(), EM_OK);
        }
        loss = build(a);
        if (region) {
            assert_int_equal(em_checkpoint_end(), EM_OK);
            assert_int_equal(em_checkpoint_end(), EM_OK);
        }
        if (a->failed) {
            report(rep, "  %s: forward: %s", where, a->what);
            problems++;
            loss = NULL;
        }
    }
    if (loss) {
        double v = NAN;
        em_tensor_retain(loss);
        if (!em_tensor_is_tracked(loss) || em_tensor_checkpointing(loss) != dev.checkpointing) {
            report(rep, "  %s: the loss is not tracked with the device's strategy", where);
            problems++;
        }
        if (em_tensor_item(loss, &v) != EM_OK) {
            report(rep, "  %s: em_tensor_item(loss): %s", where, em_last_error());
            problems++;
        } else {
            problems += compare(rep, where, "loss", &v, &gc->loss, 1);
        }
    }
    /* only the tape keeps intermediates alive from here on */
    if (a) arena_clear(a);
    if (loss && !problems) {
        em_status s = em_backward(loss, &g);
        if (s != EM_OK) {
            report(rep, "  %s: em_backward: %s: %s", where, em_status_name(s), em_last_error());
            problems++;
            g = NULL;
        }
    }
    em_tensor_release(loss);
    for (int i = 0; g && i < gc->nin; i++) {
        const ginput *gi = &gc->in[i];
        if (gi->dt != EM_F64) continue;
        em_tensor *gt = NULL;
        char what[64];
        snprintf(what, sizeof what, "grad of %s", gi->name);
        if (em_grads_get(g, in[i], &gt) != EM_OK || !gt) {
            report(rep, "  %s: %s: none (%s)", where, what, gt ? "" : em_last_error());
            problems++;
            continue;
        }
        em_device gd = em_tensor_device(gt);
        int rank = em_tensor_rank(gt);
        if (em_tensor_dtype(gt) != EM_F64 || rank != gi->rank ||
            memcmp(em_tensor_shape(gt), gi->shape, sizeof(int64_t) * (size_t)rank) != 0 ||
            gd.autodiff || em_tensor_is_tracked(gt) || gd.backend != dev.backend) {
            report(rep, "  %s: %s: wrong dtype, shape or device (want the inner device, "
                   "untracked)", where, what);
            problems++;
        } else {
            grads[i] = malloc((gi->n + 1) * sizeof **grads);
            if (!grads[i] ||
                em_tensor_to_data(gt, grads[i], gi->n * sizeof **grads) != EM_OK) {
                report(rep, "  %s: %s: cannot read it: %s", where, what, em_last_error());
                problems++;
            } else {
                problems += compare(rep, where, what, grads[i], gi->grad, gi->n);
            }
        }
        em_tensor_release(gt);
    }
    em_grads_release(g);
    if (a) arena_clear(a);
    free(a);
    for (int i = 0; i < gc->nin; i++) em_tensor_release(in[i]);
    return problems;
}

/* DISABLED and BALANCED gradients on one device must be the same bits: BALANCED and regions
 * recompute values with the same kernels, and all run the same backward code. */
static int compare_strategies(const gcase *gc, const char *devname, const char *what,
                              double **dis, double **bal, char **rep) {
    int problems = 0;
    for (int i = 0; i < gc->nin; i++) {
        if (!dis[i] || !bal[i]) continue;
        size_t bad = 0, first = 0;
        for (size_t j = 0; j < gc->in[i].n; j++) {
            double x = dis[i][j], y = bal[i][j];
            bool same = memcmp(&x, &y, sizeof x) == 0 || (isnan(x) && isnan(y));
            if (!same && !bad++) first = j;
        }
        if (bad) {
            report(rep, "  %s on %s: grad of %s: %s differs from DISABLED at %zu of %zu "
                   "values; first [%zu] %.17g vs %.17g", gc->name, devname, gc->in[i].name, what,
                   bad, gc->in[i].n, first, bal[i][first], dis[i][first]);
            problems++;
        }
    }
    return problems;
}

static void free_grads(double **g, int n) {
    for (int i = 0; i < n; i++) {
        free(g[i]);
        g[i] = NULL;
    }
}

/* Runs one composite on every device with both strategies. */
static void run_composite(const char *name, builder build) {
    const gcase *gc = find_case(name);
    if (!gc) fail_msg("composite '%s' is missing from %s", name, g_path);
    em_device devs[64];
    size_t ndev = 0;
    assert_int_equal(em_devices(devs, 64, &ndev), EM_OK);
    if (ndev > 64) ndev = 64;
    char *rep = NULL;
    int problems = 0;
    for (size_t d = 0; d < ndev; d++) {
        double *dis[MAX_INPUTS] = {0}, *bal[MAX_INPUTS] = {0}, *reg[MAX_INPUTS] = {0};
        em_device ad_dis, ad_bal;
        char devname[64];
        if (em_device_name(devs[d], devname, sizeof devname) != EM_OK) strcpy(devname, "?");
        if (em_device_autodiff(devs[d], EM_CKPT_DISABLED, &ad_dis) != EM_OK ||
            em_device_autodiff(devs[d], EM_CKPT_BALANCED, &ad_bal) != EM_OK) {
            report(&rep, "  %s: cannot wrap %s for autodiff: %s", name, devname, em_last_error());
            problems++;
            continue;
        }
        problems += run_on(gc, build, ad_dis, false, dis, &rep);
        problems += run_on(gc, build, ad_bal, false, bal, &rep);
        problems += compare_strategies(gc, devname, "BALANCED", dis, bal, &rep);
        problems += run_on(gc, build, ad_dis, true, reg, &rep);
        problems += compare_strategies(gc, devname, "DISABLED in a region", dis, reg, &rep);
        free_grads(reg, gc->nin);
        problems += run_on(gc, build, ad_bal, true, reg, &rep);
        problems += compare_strategies(gc, devname, "BALANCED in a region", dis, reg, &rep);
        free_grads(reg, gc->nin);
        free_grads(dis, gc->nin);
        free_grads(bal, gc->nin);
    }
    if (problems) {
        print_error("%s", rep ? rep : "");
        free(rep);
        fail_msg("%s: %d problem(s)", name, problems);
    }
    free(rep);
}

#define COMPOSITE_TEST(n)                                                                   \
    static void test_##n(void **state) {                                                   \
        (void)state;                                                                       \
        run_composite(#n, build_##n);                                                      \
    }
COMPOSITE_TEST(mlp_relu)
COMPOSITE_TEST(mlp_gelu_ln)
COMPOSITE_TEST(convnet)
COMPOSITE_TEST(attention)
COMPOSITE_TEST(layer_norm)
COMPOSITE_TEST(broadcast)
COMPOSITE_TEST(residual)
COMPOSITE_TEST(logsumexp)
COMPOSITE_TEST(conv_transpose)
COMPOSITE_TEST(embedding)
COMPOSITE_TEST(gather_scatter)
COMPOSITE_TEST(slice_cat)

/* Every composite in the golden file has a builder here, and the other way round. */
static void test_golden_complete(void **state) {
    (void)state;
    static const char *const names[] = {
        "mlp_relu", "mlp_gelu_ln", "convnet",        "attention", "layer_norm",     "broadcast",
        "residual", "logsumexp",   "conv_transpose", "embedding", "gather_scatter", "slice_cat"};
    const int n = (int)(sizeof names / sizeof names[0]);
    assert_int_equal(g_ncases, n);
    for (int i = 0; i < n; i++)
        if (!find_case(names[i])) fail_msg("composite '%s' missing from %s", names[i], g_path);
}

int main(int argc, char **argv) {
    if (argc > 1) g_path = argv[1];
    if (load_cases(g_path)) {
        free_cases();
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_complete), cmocka_unit_test(test_mlp_relu),
        cmocka_unit_test(test_mlp_gelu_ln),     cmocka_unit_test(test_convnet),
        cmocka_unit_test(test_attention),       cmocka_unit_test(test_layer_norm),
        cmocka_unit_test(test_broadcast),       cmocka_unit_test(test_residual),
        cmocka_unit_test(test_logsumexp),       cmocka_unit_test(test_conv_transpose),
        cmocka_unit_test(test_embedding),       cmocka_unit_test(test_gather_scatter),
        cmocka_unit_test(test_slice_cat),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    free_cases();
    return failed;
}
