/*
 * runner.c — runs the conformance table.
 *
 *   conformance GOLDEN [--filter TEXT] [--device NAME] [--verbose] [--no-fallbacks]
 *
 * Reads every case of GOLDEN (made by gen_golden.py), runs it on `ref` and checks the outputs
 * against the golden ones that NumPy computed, then runs it on every other device that
 * em_devices() lists and checks that device against ref's outputs, with per-dtype tolerances.
 * Cases that expect an error must fail with that status on every device. Prints one line per
 * failure and ends with "N passed, N failed".
 *
 * --no-fallbacks (builds with the cpu backend): a case run on a cpu device (plain or wrapped
 * for autodiff) also fails when one of the cpu kernels it called handed an f32, f64, f16 or
 * bf16 tensor to ref's loop in a case that is not on the backend's expected list
 * (src/backends/cpu/fallback.c); the failure names the slot and the case.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "golden.h"
#include "ember/graph.h"  /* --capture */
#include "ember/remote.h" /* remote (issue 7): --remote */
#ifdef EMBER_TEST_HAVE_CPU
#include "backends/cpu/fallback.h" /* --no-fallbacks */
#endif

/* ---- building inputs ---- */

/* The input's base tensor on dev (the case's view not applied). */
static em_status make_base(const golden_tensor *t, em_device dev, em_tensor **out) {
    size_t sz = em_dtype_size(t->dt);
    void *data = malloc((size_t)(t->n ? t->n : 1) * sz);
    if (!data) return EM_ERR_NOMEM;
    for (int64_t i = 0; i < t->n; i++) {
        double v = t->vals[i];
        int64_t iv = t->ivals[i];
        switch (t->dt) {
        case EM_F32: ((float *)data)[i] = (float)v; break;
        case EM_F64: ((double *)data)[i] = v; break;
        case EM_F16: ((uint16_t *)data)[i] = em_f32_to_f16((float)v); break;
        case EM_BF16: ((uint16_t *)data)[i] = em_f32_to_bf16((float)v); break;
        case EM_I64: ((int64_t *)data)[i] = iv; break;
        case EM_I32: ((int32_t *)data)[i] = (int32_t)iv; break;
        case EM_I16: ((int16_t *)data)[i] = (int16_t)iv; break;
        case EM_I8: ((int8_t *)data)[i] = (int8_t)iv; break;
        case EM_U8: case EM_BOOL: ((uint8_t *)data)[i] = (uint8_t)iv; break;
        default: break;
        }
    }
    em_status s = em_tensor_from_data(data, t->dt, t->shape, t->rank, dev, out);
    free(data);
    return s;
}

/* The input on dev: its base with the case's view applied. */
static em_status make_input(const golden_tensor *t, em_device dev, em_tensor **out) {
    em_tensor *base = NULL;
    em_status s = make_base(t, dev, &base);
    if (s != EM_OK || !t->view_kind[0]) {
        if (s == EM_OK) *out = base;
        return s;
    }
    em_tensor *v = NULL;
    s = golden_view(t, base, &v);
    em_tensor_release(base);
    if (s == EM_OK) *out = v;
    return s;
}

/* ---- comparing ---- */

static void default_tol(em_dtype dt, double *rtol, double *atol) {
    switch (dt) {
    case EM_F64: *rtol = 1e-9; *atol = 1e-12; break;
    case EM_F32: *rtol = 1e-5; *atol = 1e-6; break;
    case EM_F16: *rtol = 4e-3; *atol = 1e-3; break;
    case EM_BF16: *rtol = 2e-2; *atol = 1e-2; break;
    default: *rtol = 0; *atol = 0; break;
    }
}

/* Reads a tensor back as doubles / exact ints. */
static em_status read_back(const em_tensor *t, golden_tensor *d) {
    d->dt = em_tensor_dtype(t);
    d->rank = em_tensor_rank(t);
    memcpy(d->shape, em_tensor_shape(t), sizeof(int64_t) * (size_t)d->rank);
    d->n = em_tensor_numel(t);
    size_t sz = em_dtype_size(d->dt);
    void *raw = malloc((size_t)(d->n ? d->n : 1) * sz);
    d->vals = calloc((size_t)(d->n ? d->n : 1), sizeof(double));
    d->ivals = calloc((size_t)(d->n ? d->n : 1), sizeof(int64_t));
    if (!raw || !d->vals || !d->ivals) {
        free(raw);
        return EM_ERR_NOMEM;
    }
    em_status s = em_tensor_to_data(t, raw, (size_t)d->n * sz);
    for (int64_t i = 0; s == EM_OK && i < d->n; i++) {
        int64_t iv = 0;
        double v = 0;
        switch (d->dt) {
        case EM_F32: v = ((float *)raw)[i]; break;
        case EM_F64: v = ((double *)raw)[i]; break;
        case EM_F16: v = em_f16_to_f32(((uint16_t *)raw)[i]); break;
        case EM_BF16: v = em_bf16_to_f32(((uint16_t *)raw)[i]); break;
        case EM_I64: iv = ((int64_t *)raw)[i]; break;
        case EM_I32: iv = ((int32_t *)raw)[i]; break;
        case EM_I16: iv = ((int16_t *)raw)[i]; break;
        case EM_I8: case EM_Q8: case EM_Q4: iv = ((int8_t *)raw)[i]; break;
        case EM_U8: case EM_BOOL: iv = ((uint8_t *)raw)[i]; break;
        }
        if (!golden_is_float(d->dt)) v = (double)iv;
        d->vals[i] = v;
        d->ivals[i] = iv;
    }
    free(raw);
    return s;
}

/* Compares got against want; on mismatch writes a reason into msg and returns false. */
static bool compare(const golden_tensor *got, const golden_tensor *want, const golden_case *c,
                    char *msg, size_t cap) {
    if (got->dt != want->dt) {
        snprintf(msg, cap, "dtype %s, want %s", em_dtype_name(got->dt), em_dtype_name(want->dt));
        return false;
    }
    if (got->rank != want->rank || memcmp(got->shape, want->shape,
                                          sizeof(int64_t) * (size_t)got->rank) != 0) {
        snprintf(msg, cap, "shape mismatch (rank %d vs %d, numel %lld vs %lld)", got->rank,
                 want->rank, (long long)got->n, (long long)want->n);
        return false;
    }
    double rtol, atol;
    default_tol(want->dt, &rtol, &atol);
    if (c->has_tol) {
        rtol = c->rtol;
        atol = c->atol;
    }
    for (int64_t i = 0; i < got->n; i++) {
        if (!golden_is_float(want->dt)) {
            if (got->ivals[i] != want->ivals[i]) {
                snprintf(msg, cap, "element %lld: got %lld, want %lld", (long long)i,
                         (long long)got->ivals[i], (long long)want->ivals[i]);
                return false;
            }
            continue;
        }
        double g = got->vals[i], w = want->vals[i];
        bool ok;
        if (isnan(w)) ok = isnan(g);
        else if (isinf(w)) ok = g == w;
        else ok = !isnan(g) && fabs(g - w) <= atol + rtol * fabs(w);
        if (!ok) {
            snprintf(msg, cap, "element %lld: got %.9g, want %.9g (rtol %g, atol %g)",
                     (long long)i, g, w, rtol, atol);
            return false;
        }
    }
    return true;
}

/* ---- running ---- */

typedef struct run_result {
    em_status status;
    char error[256];
    int nout;
    golden_tensor out[CONF_MAX_IO];
} run_result;

static void free_result(run_result *r) {
    for (int i = 0; i < r->nout; i++) {
        free(r->out[i].vals);
        free(r->out[i].ivals);
    }
    r->nout = 0;
}

/* Runs case c on dev; fills r. Returns false when the harness itself failed (msg set). */
static bool run_on(const golden_case *c, conf_fn fn, em_device dev, run_result *r, char *msg,
                   size_t cap) {
    em_tensor *ins[CONF_MAX_IO] = {0};
    memset(r, 0, sizeof *r);
    bool ok = true;
    for (int i = 0; i < c->nin; i++) {
        em_status s = make_input(&c->in[i], dev, &ins[i]);
        if (s != EM_OK) {
            snprintf(msg, cap, "building input %d failed: %s: %s", i, em_status_name(s),
                     em_last_error());
            ok = false;
            break;
        }
    }
    if (ok) {
        conf_params p = c->params;
        p.dev = dev;
        em_tensor *outs[CONF_MAX_IO] = {0};
        int nout = 0;
        em_clear_error();
        r->status = fn(ins, c->nin, &p, outs, &nout);
        snprintf(r->error, sizeof r->error, "%s", em_last_error());
        for (int i = 0; i < nout && i < CONF_MAX_IO; i++) {
            if (r->status == EM_OK && ok) {
                em_status s = read_back(outs[i], &r->out[i]);
                r->nout = i + 1;
                if (s != EM_OK) {
                    snprintf(msg, cap, "reading output %d failed: %s", i, em_last_error());
                    ok = false;
                }
            }
            em_tensor_release(outs[i]);
        }
    }
    for (int i = 0; i < c->nin; i++) em_tensor_release(ins[i]);
    return ok;
}

/* Checks r (a run on a device) against the expected outputs. */
static bool check(const golden_case *c, const run_result *r, const golden_tensor *want, int nwant,
                  char *msg, size_t cap) {
    if (c->error[0]) {
        if (r->status == EM_OK) {
            snprintf(msg, cap, "expected %s, got EM_OK", c->error);
            return false;
        }
        if (strcmp(em_status_name(r->status), c->error) != 0) {
            snprintf(msg, cap, "expected %s, got %s: %s", c->error, em_status_name(r->status),
                     r->error);
            return false;
        }
        if (!r->error[0]) {
            snprintf(msg, cap, "%s without a message", c->error);
            return false;
        }
        return true;
    }
    if (r->status != EM_OK) {
        snprintf(msg, cap, "failed: %s: %s", em_status_name(r->status), r->error);
        return false;
    }
    if (r->nout != nwant) {
        snprintf(msg, cap, "%d outputs, want %d", r->nout, nwant);
        return false;
    }
    for (int i = 0; i < nwant; i++) {
        char m[200];
        if (!compare(&r->out[i], &want[i], c, m, sizeof m)) {
            snprintf(msg, cap, "output %d: %s", i, m);
            return false;
        }
    }
    return true;
}

/* ---- --capture: every case captured, saved, loaded and replayed ----
 *
 * The case runs once on the capture device with its inputs' bases as graph inputs (their
 * views are recorded too) and its outputs as graph outputs; the graph goes through a file
 * (em_graph_save, em_graph_load) and is replayed on every device, where it must give the bits
 * that running the case eagerly there gives. A case that expects an error must fail on the
 * capture device with that status and ref's message. */

typedef struct cap_result {
    em_status status; /* what the case gave on the capture device */
    char error[256];
    em_graph *g;      /* the loaded graph when status is EM_OK */
} cap_result;

/* Captures c into r. Returns false when the harness failed (msg set). */
static bool capture_case(const golden_case *c, conf_fn fn, const char *file, cap_result *r,
                         char *msg, size_t cap) {
    em_device capd = {EM_BACKEND_CAPTURE, 0, false, EM_CKPT_NONE};
    em_tensor *bases[CONF_MAX_IO] = {0}, *ins[CONF_MAX_IO] = {0}, *outs[CONF_MAX_IO] = {0};
    em_graph *g = NULL;
    int nout = 0;
    bool ok = true;
    memset(r, 0, sizeof *r);
    if (em_graph_begin(&g) != EM_OK) {
        snprintf(msg, cap, "em_graph_begin: %s", em_last_error());
        return false;
    }
    for (int i = 0; i < c->nin && ok; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "in%d", i);
        em_status s = em_graph_input(g, nm, c->in[i].dt, c->in[i].shape, c->in[i].rank, capd,
                                     &bases[i]);
        if (s == EM_OK) s = golden_view(&c->in[i], bases[i], &ins[i]);
        if (s != EM_OK) {
            snprintf(msg, cap, "capturing input %d: %s: %s", i, em_status_name(s), em_last_error());
            ok = false;
        }
    }
    if (ok) {
        conf_params p = c->params;
        p.dev = capd;
        em_clear_error();
        r->status = fn(ins, c->nin, &p, outs, &nout);
        snprintf(r->error, sizeof r->error, "%s", em_last_error());
        for (int i = 0; i < nout && ok && r->status == EM_OK; i++) {
            char nm[16];
            snprintf(nm, sizeof nm, "out%d", i);
            if (em_graph_output(g, nm, outs[i]) != EM_OK) {
                snprintf(msg, cap, "em_graph_output %d: %s", i, em_last_error());
                ok = false;
            }
        }
    }
    for (int i = 0; i < nout && i < CONF_MAX_IO; i++) em_tensor_release(outs[i]);
    for (int i = 0; i < c->nin; i++) {
        em_tensor_release(ins[i]);
        em_tensor_release(bases[i]);
    }
    if (ok && em_graph_end(g) != EM_OK) {
        snprintf(msg, cap, "em_graph_end: %s", em_last_error());
        ok = false;
    }
    if (ok && r->status == EM_OK) {
        if (em_graph_save(g, file) != EM_OK || em_graph_load(file, &r->g) != EM_OK) {
            snprintf(msg, cap, "save and load: %s", em_last_error());
            ok = false;
        }
    }
    em_graph_release(g);
    return ok;
}

/* Replays the captured case on dev into r (as run_on). */
static bool replay_on(const golden_case *c, const em_graph *g, em_device dev, run_result *r,
                      char *msg, size_t cap) {
    em_tensor *ins[CONF_MAX_IO] = {0}, *outs[CONF_MAX_IO] = {0};
    memset(r, 0, sizeof *r);
    bool ok = true;
    for (int i = 0; i < c->nin && ok; i++) {
        em_status s = make_base(&c->in[i], dev, &ins[i]);
        if (s != EM_OK) {
            snprintf(msg, cap, "building input %d failed: %s", i, em_last_error());
            ok = false;
        }
    }
    const int nout = em_graph_output_count(g);
    if (ok) {
        em_clear_error();
        r->status = em_graph_run(g, dev, (const em_tensor *const *)ins, c->nin, outs, nout);
        snprintf(r->error, sizeof r->error, "%s", em_last_error());
        for (int i = 0; r->status == EM_OK && ok && i < nout && i < CONF_MAX_IO; i++) {
            r->nout = i + 1;
            if (read_back(outs[i], &r->out[i]) != EM_OK) {
                snprintf(msg, cap, "reading output %d failed: %s", i, em_last_error());
                ok = false;
            }
        }
    }
    for (int i = 0; i < nout && i < CONF_MAX_IO; i++) em_tensor_release(outs[i]);
    for (int i = 0; i < c->nin; i++) em_tensor_release(ins[i]);
    return ok;
}

/* The ops that a device may have a fused kernel for and that a graph records composed of
 * basic kernel calls (include/ember/graph.h). */
static bool recorded_composed(const char *op) {
    static const char *const ops[] = {"batch_norm", "group_norm", "rms_norm", "sdpa"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (strncmp(op, ops[i], strlen(ops[i])) == 0) return true;
    return false;
}

/* The quantized family (cases/quant.py) is not captured: the capture backend has no
 * quantize slot (a per-tensor scheme's scale comes from the data, which a graph does not hold
 * while it is recorded) and the family's wrappers read values on the host (bytes in and out).
 * Under --capture, a case of these ops that the capture device refuses with
 * EM_ERR_UNSUPPORTED or EM_ERR_STATE, where the case wants success or another error (another
 * status, or this one with another message than ref's), is skipped and counted apart; error
 * rows caught before the refusal (shapes, dtypes) are checked as any other. */
static bool not_captured(const char *op) {
    return strncmp(op, "quant_", 6) == 0;
}

/* The same dtypes, shapes and bits (NaNs of any payload match). */
static bool same_bits(const run_result *a, const run_result *b, char *msg, size_t cap) {
    if (a->nout != b->nout) {
        snprintf(msg, cap, "%d outputs, eager %d", a->nout, b->nout);
        return false;
    }
    for (int i = 0; i < a->nout; i++) {
        const golden_tensor *x = &a->out[i], *y = &b->out[i];
        if (x->dt != y->dt || x->n != y->n) {
            snprintf(msg, cap, "output %d: dtype or size differs from eager", i);
            return false;
        }
        for (int64_t k = 0; k < x->n; k++) {
            const bool same = golden_is_float(x->dt)
                                  ? (isnan(x->vals[k]) && isnan(y->vals[k])) ||
                                        memcmp(&x->vals[k], &y->vals[k], sizeof(double)) == 0
                                  : x->ivals[k] == y->ivals[k];
            if (!same) {
                snprintf(msg, cap, "output %d element %lld: replay %.17g, eager %.17g", i,
                         (long long)k, x->vals[k], y->vals[k]);
                return false;
            }
        }
    }
    return true;
}

/* ---- --no-fallbacks: the cpu backend's fallback counters around one run ---- */

#ifdef EMBER_TEST_HAVE_CPU
static bool is_float_dtype(em_dtype dt) {
    return dt == EM_F32 || dt == EM_F64 || dt == EM_F16 || dt == EM_BF16;
}

typedef struct fb_snap {
    uint64_t n[CPU_FB_COUNT][EM_DTYPE_COUNT];
} fb_snap;

static void fb_take(fb_snap *s) {
    for (int c = 0; c < CPU_FB_COUNT; c++)
        for (int d = 0; d < EM_DTYPE_COUNT; d++) s->n[c][d] = cpu_fallback_count(c, (em_dtype)d);
}

/* Writes the unexpected float fallbacks since `before` into msg; false when there were any. */
static bool fb_clean(const fb_snap *before, char *msg, size_t cap) {
    fb_snap now;
    fb_take(&now);
    size_t used = 0;
    msg[0] = '\0';
    for (int c = 0; c < CPU_FB_COUNT; c++) {
        const cpu_fb_case *fc = cpu_fallback_case(c);
        if (!fc || fc->expected) continue;
        for (int d = 0; d < EM_DTYPE_COUNT; d++) {
            if (!is_float_dtype((em_dtype)d) || now.n[c][d] == before->n[c][d]) continue;
            int w = snprintf(msg + used, cap - used, "%sran ref's %s (%s): %s", used ? "; " : "",
                             fc->slot, em_dtype_name((em_dtype)d), fc->when);
            if (w > 0) used += (size_t)w < cap - used ? (size_t)w : cap - used - 1;
        }
    }
    return used == 0;
}
#endif

int main(int argc, char **argv) {
    const char *path = NULL, *filter = NULL, *only_dev = NULL;
    bool verbose = false, no_fallbacks = false, capture = false;
    const char *remote_addr = NULL, *remote_token_file = NULL; /* remote (issue 7) */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--filter") == 0 && i + 1 < argc) filter = argv[++i];
        /* ---- remote (issue 7): --remote ADDR --token-file F ---- */
        else if (strcmp(argv[i], "--remote") == 0 && i + 1 < argc) remote_addr = argv[++i];
        else if (strcmp(argv[i], "--token-file") == 0 && i + 1 < argc) remote_token_file = argv[++i];
        /* ---- end remote ---- */
        else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) only_dev = argv[++i];
        else if (strcmp(argv[i], "--verbose") == 0) verbose = true;
        else if (strcmp(argv[i], "--no-fallbacks") == 0) no_fallbacks = true;
        else if (strcmp(argv[i], "--capture") == 0) capture = true;
        else path = argv[i];
    }
    if (!path) {
        fprintf(stderr, "usage: conformance GOLDEN [--filter TEXT] [--device NAME] [--verbose] "
                        "[--no-fallbacks] [--capture]\n");
        return 2;
    }
#ifndef EMBER_TEST_HAVE_CPU
    if (no_fallbacks) {
        fprintf(stderr, "conformance: --no-fallbacks needs a build with the cpu backend\n");
        return 2;
    }
#endif
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "conformance: cannot open %s\n", path);
        return 2;
    }
    /* ---- remote (issue 7): connect to an ember-server first: it becomes remote:N ---- */
    if (remote_addr) {
        char token[4097] = "";
        FILE *tf = remote_token_file ? fopen(remote_token_file, "rb") : NULL;
        size_t tn = tf ? fread(token, 1, sizeof token - 1, tf) : 0;
        if (tf) fclose(tf);
        token[tn] = '\0';
        if (tn && token[tn - 1] == '\n') token[--tn] = '\0';
        if (tn && token[tn - 1] == '\r') token[--tn] = '\0';
        em_device rdev;
        if (em_remote_connect(remote_addr, token, &rdev) != EM_OK) {
            fprintf(stderr, "conformance: %s\n", em_last_error());
            fclose(f);
            return 2;
        }
    }
    /* ---- end remote ---- */
    /* every device present, and each of them wrapped for autodiff with both strategies: the
     * table's forward results must not change when the ops are recorded */
    em_device found[64], devs[64 * 3];
    size_t nfound = 0, ndev = 0;
    if (em_devices(found, 64, &nfound) != EM_OK) return 2;
    if (nfound > 64) nfound = 64;
    for (size_t d = 0; d < nfound; d++) {
        devs[ndev++] = found[d];
        if (em_device_autodiff(found[d], EM_CKPT_DISABLED, &devs[ndev]) == EM_OK) ndev++;
        if (em_device_autodiff(found[d], EM_CKPT_BALANCED, &devs[ndev]) == EM_OK) ndev++;
    }
    printf("conformance: devices:");
    bool only_found = !only_dev;
    for (size_t d = 0; d < ndev; d++) {
        char nm[64];
        em_device_name(devs[d], nm, sizeof nm);
        printf(" %s", nm);
        if (only_dev && strcmp(only_dev, nm) == 0) only_found = true;
    }
    printf("\n");
    if (!only_found) {
        /* a run that checks nothing must not pass */
        em_device probe;
        fprintf(stderr, "conformance: --device %s: no such device here%s%s\n", only_dev,
                em_device_parse(only_dev, &probe) != EM_OK ? ": " : "",
                em_device_parse(only_dev, &probe) != EM_OK ? em_last_error() : "");
        fclose(f);
        return 2;
    }
    em_device ref = {EM_BACKEND_REF, 0, false, EM_CKPT_NONE};

    /* --capture: where each case's graph goes through a file */
    char cap_file[512] = "";
    if (capture) {
        const char *tmp = getenv("TMPDIR");
        snprintf(cap_file, sizeof cap_file, "%s/ember-conformance-%ld.graph",
                 tmp && *tmp ? tmp : "/tmp", (long)getpid());
    }
    long passed = 0, failed = 0, cases = 0, skipped = 0; /* skipped: not_captured */
    golden_case *c = calloc(1, sizeof *c);
    if (!c) return 2;
    int lineno = 0, rc;
    while ((rc = golden_next(f, path, &lineno, c)) == 1) {
        if (filter && !strstr(c->name, filter)) continue;
        cases++;
        conf_fn fn = golden_find_op(c->op);
        run_result ref_r;
        char msg[512];
        if (!fn) {
            printf("FAIL %s [all]: no wrapper for op '%s'\n", c->name, c->op);
            failed++;
            continue;
        }
        /* 1. ref against the golden outputs */
        bool ok = run_on(c, fn, ref, &ref_r, msg, sizeof msg) &&
                  check(c, &ref_r, c->out, c->nout, msg, sizeof msg);
        if (!only_dev || strcmp(only_dev, "ref") == 0) {
            if (ok) {
                passed++;
                if (verbose) printf("ok   %s [ref]\n", c->name);
            } else {
                printf("FAIL %s [ref vs golden]: %s\n", c->name, msg);
                failed++;
            }
        }
        /* --capture: the case captured, saved, loaded, replayed on every device */
        if (capture) {
            cap_result cr;
            bool cok = capture_case(c, fn, cap_file, &cr, msg, sizeof msg);
            if (cok && not_captured(c->op) &&
                (cr.status == EM_ERR_UNSUPPORTED || cr.status == EM_ERR_STATE) &&
                (strcmp(em_status_name(cr.status), c->error) != 0 ||
                 strcmp(cr.error, ref_r.error) != 0)) {
                skipped++;
                if (verbose) printf("skip %s [capture]: %s\n", c->name, cr.error);
                em_graph_release(cr.g);
                free_result(&ref_r);
                continue;
            }
            /* indices are range-checked when the graph runs: the replays must fail */
            const bool at_run = cok && c->error[0] && cr.status == EM_OK &&
                                strcmp(c->error, "EM_ERR_ARG") == 0;
            if (at_run) {
                for (size_t d = 0; d < ndev && cok; d++) {
                    run_result rr;
                    cok = replay_on(c, cr.g, devs[d], &rr, msg, sizeof msg) &&
                          check(c, &rr, NULL, 0, msg, sizeof msg);
                    free_result(&rr);
                }
            } else if (cok && c->error[0]) {
                if (strcmp(em_status_name(cr.status), c->error) != 0)
                    snprintf(msg, sizeof msg, "expected %s, got %s: %s", c->error,
                             em_status_name(cr.status), cr.error), cok = false;
                else if (strcmp(cr.error, ref_r.error) != 0)
                    snprintf(msg, sizeof msg, "message '%.200s', on ref '%.200s'", cr.error,
                             ref_r.error), cok = false;
            } else if (cok && cr.status != EM_OK) {
                snprintf(msg, sizeof msg, "%s: %s", em_status_name(cr.status), cr.error);
                cok = false;
            }
            if (!cok) {
                printf("FAIL %s [capture]: %s\n", c->name, msg);
                failed++;
            } else if (!c->error[0]) {
                for (size_t d = 0; d < ndev; d++) {
                    char nm[64];
                    em_device_name(devs[d], nm, sizeof nm);
                    if (only_dev && strcmp(only_dev, nm) != 0) continue;
                    run_result er, rr;
                    bool dok = run_on(c, fn, devs[d], &er, msg, sizeof msg) &&
                               replay_on(c, cr.g, devs[d], &rr, msg, sizeof msg);
                    if (dok && rr.status != EM_OK)
                        snprintf(msg, sizeof msg, "replay failed: %s: %s",
                                 em_status_name(rr.status), rr.error), dok = false;
                    /* ops a device may fuse are recorded composed: within the table's
                     * tolerances of the eager run there (include/ember/graph.h) */
                    if (dok && !same_bits(&rr, &er, msg, sizeof msg))
                        dok = recorded_composed(c->op) &&
                              check(c, &rr, er.out, er.nout, msg, sizeof msg);
                    if (dok) {
                        passed++;
                    } else {
                        printf("FAIL %s [replay on %s]: %s\n", c->name, nm, msg);
                        failed++;
                    }
                    free_result(&er);
                    free_result(&rr);
                }
            } else {
                passed++;
            }
            em_graph_release(cr.g);
            free_result(&ref_r);
            continue;
        }
        /* 2. every other device against ref */
        for (size_t d = 0; d < ndev; d++) {
            if (em_device_equal(devs[d], ref)) continue;
            char nm[64];
            em_device_name(devs[d], nm, sizeof nm);
            if (only_dev && strcmp(only_dev, nm) != 0) continue;
            run_result r;
#ifdef EMBER_TEST_HAVE_CPU
            bool watch = no_fallbacks && devs[d].backend == EM_BACKEND_CPU;
            fb_snap before;
            if (watch) fb_take(&before);
#endif
            bool dok = run_on(c, fn, devs[d], &r, msg, sizeof msg) &&
                       check(c, &r, ref_r.out, ref_r.nout, msg, sizeof msg);
#ifdef EMBER_TEST_HAVE_CPU
            if (dok && watch) dok = fb_clean(&before, msg, sizeof msg);
#endif
            if (dok) {
                passed++;
            } else {
                printf("FAIL %s [%s vs ref]: %s\n", c->name, nm, msg);
                failed++;
            }
            free_result(&r);
        }
        free_result(&ref_r);
    }
    golden_free(c);
    free(c);
    fclose(f);
    if (capture) remove(cap_file);
    if (rc < 0) return 2;
    printf("conformance: %ld cases on %zu device(s)\n", cases, ndev);
    if (skipped) printf("conformance: %ld cases not captured (not_captured)\n", skipped);
    printf("%ld passed, %ld failed\n", passed, failed);
    return failed == 0 && cases > 0 ? 0 : 1;
}
