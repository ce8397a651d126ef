/* show.c — looking at a graph (include/ember/graph.h): its counts (em_graph_stats_of), a
 * readable summary (em_graph_write_summary) and a Graphviz picture of its step
 * (em_graph_write_dot). A loaded graph is hostile input: nothing here trusts an index, a rank
 * or a size it reads, and every count saturates instead of overflowing. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "graph/graph_internal.h"

/* ---- saturating counts ---- */

static int64_t sh_add(int64_t a, int64_t b) {
    int64_t r;
    return __builtin_add_overflow(a, b, &r) ? (b < 0 ? INT64_MIN : INT64_MAX) : r;
}

static int64_t sh_mul(int64_t a, int64_t b) {
    int64_t r;
    return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

static int64_t sh_bytes(uint64_t b) { return b > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)b; }

/* ---- views ---- */

static int sh_rank(const rw_view *v) {
    return v->rank < 0 ? 0 : v->rank > RW_MAX_RANK ? RW_MAX_RANK : v->rank;
}

static int64_t sh_numel(const rw_view *v) {
    int64_t n = 1;
    for (int d = 0; d < sh_rank(v); d++) n = sh_mul(n, v->shape[d] < 0 ? 0 : v->shape[d]);
    return n;
}

/* Dim d of v counted from the end (1: the last), or 1 when v has fewer dims. */
static int64_t sh_dim_from_end(const rw_view *v, int d) {
    const int r = sh_rank(v);
    if (r < d) return 1;
    return v->shape[r - d] > 0 ? v->shape[r - d] : 0;
}

static bool sh_present(const rw_kernel *k, int i) { return (k->mask >> i & 1u) != 0; }

static bool sh_float(em_dtype dt) {
    return (unsigned)dt < EM_DTYPE_COUNT && emi_kind(dt) == EM_KIND_FLOAT;
}

/* The buffer a view names, or UINT32_MAX when its id is out of range. */
static uint32_t sh_buf_of(const em_graph *g, const rw_view *v) {
    return v->id >= 1 && v->id <= g->nbufs ? (uint32_t)(v->id - 1) : UINT32_MAX;
}

/* Bit i: view i of a call of the slot is read by it: every view but its outputs
 * (gr_outputs_of), and also what scatter_add adds into and the running statistics that
 * batch_norm updates. */
static unsigned sh_reads_of(rw_slot slot) {
    const unsigned all = (1u << RW_MAX_VIEWS) - 1u;
    if (slot == RW_K_SCATTER_ADD || slot == RW_K_ADAM_STEP) return all; /* updated in place */
    if (slot == RW_K_BATCH_NORM) return all & ~0x7u;
    return all & ~gr_outputs_of(slot);
}

/* ---- op families ---- */

static const char *const sh_unary_names[] = {
    "neg", "abs", "exp", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid",
    "relu", "gelu", "silu", "erf", "floor", "ceil", "round", "recip", "sign", "clamp",
    "logical_not", "softplus", "tan", "asin", "acos", "atan", "sinh", "cosh", "expm1", "log2",
    "log10", "isnan", "isinf", "isfinite", "nan_to_num"};
static const char *const sh_binary_names[] = {
    "add", "sub", "mul", "div", "pow", "rem", "max", "min", "eq", "ne", "lt", "le", "gt", "ge",
    "and", "or", "atan2", "xor"};
static const char *const sh_reduce_names[] = {
    "sum", "mean", "prod", "max", "min", "argmax", "argmin", "var", "logsumexp"};
static const char *const sh_random_names[] = {"uniform", "normal", "bernoulli"};
static const char *const sh_cum_names[] = {"cumprod", "cummax", "cummin"};
#define SH_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))
_Static_assert(SH_COUNT(sh_unary_names) == EM_UN_COUNT, "a unary op without a name");
_Static_assert(SH_COUNT(sh_binary_names) == EM_BIN_COUNT, "a binary op without a name");
_Static_assert(SH_COUNT(sh_reduce_names) == EM_RED_COUNT, "a reduce op without a name");
_Static_assert(SH_COUNT(sh_random_names) == EM_RAND_COUNT, "a random op without a name");
_Static_assert(SH_COUNT(sh_cum_names) == EM_CUM_COUNT, "a cumulative op without a name");

/* Families per slot: the slot's op enum (softmax: plain and log), at most this many. */
#define SH_SUBS 64
_Static_assert(EM_UN_COUNT <= SH_SUBS && EM_BIN_COUNT <= SH_SUBS, "SH_SUBS too small");

/* The family of a call within its slot: the op (0 for slots without one; softmax: 1 for log). */
static int sh_family_sub(const rw_kernel *k) {
    if (k->slot == RW_K_SOFTMAX) return k->ints[1] != 0;
    return k->sub >= 0 && k->sub < SH_SUBS ? k->sub : 0;
}

/* Writes the family's name ("matmul", "unary:relu", "reduce:sum", "log_softmax", ...). */
static void sh_family_name(rw_slot slot, int sub, char *out, size_t cap) {
    if ((unsigned)slot >= RW_K_COUNT) {
        snprintf(out, cap, "?");
        return;
    }
    const char *const *names = NULL;
    int n = 0;
    switch (slot) {
    case RW_K_UNARY: case RW_K_UNARY_BACKWARD:
        names = sh_unary_names, n = SH_COUNT(sh_unary_names);
        break;
    case RW_K_BINARY: case RW_K_BINARY_SCALAR:
        names = sh_binary_names, n = SH_COUNT(sh_binary_names);
        break;
    case RW_K_REDUCE: names = sh_reduce_names, n = SH_COUNT(sh_reduce_names); break;
    case RW_K_RANDOM: names = sh_random_names, n = SH_COUNT(sh_random_names); break;
    case RW_K_CUMULATIVE: /* cumprod, cummax, cummin: their own names */
        snprintf(out, cap, "%s", sub >= 0 && sub < SH_COUNT(sh_cum_names) ? sh_cum_names[sub]
                                                                            : "cumulative:?");
        return;
    case RW_K_SOFTMAX: snprintf(out, cap, "%s", sub ? "log_softmax" : "softmax"); return;
    case RW_K_ADAM_STEP: snprintf(out, cap, "%s", sub ? "adamw_step" : "adam_step"); return;
    default: snprintf(out, cap, "%s", rw_slots[slot].name); return;
    }
    snprintf(out, cap, "%s:%s", rw_slots[slot].name, sub >= 0 && sub < n ? names[sub] : "?");
}

/* The floating-point operations of one kernel call: the one place that estimates them.
 * Multiply-adds count 2 (matmul 2*M*N*K per batch, the convolutions 2 per weight tap per
 * output element); elementwise ops and every transcendental function count 1 per element;
 * reductions and cumulative ops 1 per element read (var and logsumexp 3), softmax 5 and
 * layer_norm 5 per element (+1 each for weight and bias), pooling 1 per window tap, an Adam
 * step 14 per parameter (its composition's operations). Ops
 * that only move, select or make values (fill, arange, random, copy, where, gather,
 * index_select, sort) and ops on integer or bool data count 0. The fused normalization calls
 * (GR_ALT steps) count nothing either: the composition recorded after each is what is
 * counted. */
static int64_t sh_flops(const rw_kernel *k) {
    const rw_view *v = k->views;
    switch (k->slot) {
    case RW_K_UNARY: case RW_K_BINARY: case RW_K_BINARY_SCALAR:
        return sh_float(v[1].dtype) ? sh_numel(&v[0]) : 0;
    case RW_K_REDUCE: {
        if (!sh_float(v[1].dtype)) return 0;
        const int per = k->sub == EM_RED_VAR || k->sub == EM_RED_LOGSUMEXP ? 3 : 1;
        return sh_mul(sh_numel(&v[1]), per);
    }
    case RW_K_CUMSUM: return sh_float(v[1].dtype) ? sh_numel(&v[1]) : 0;
    case RW_K_CUMULATIVE: return sh_float(v[2].dtype) ? sh_numel(&v[2]) : 0;
    case RW_K_SOFTMAX: return sh_mul(sh_numel(&v[1]), 5);
    case RW_K_LAYER_NORM:
        return sh_mul(sh_numel(&v[1]), 5 + sh_present(k, 2) + sh_present(k, 3));
    case RW_K_SCATTER_ADD: return sh_float(v[0].dtype) ? sh_numel(&v[2]) : 0;
    case RW_K_MATMUL: {
        /* out [..., M, N] = a [..., M, K] @ b [..., K, N]: out's elements times 2K */
        if (!sh_float(v[0].dtype)) return 0;
        return sh_mul(sh_mul(sh_numel(&v[0]), sh_dim_from_end(&v[1], 1)), 2);
    }
    case RW_K_CONV2D: case RW_K_CONV_TRANSPOSE2D: case RW_K_CONV2D_WEIGHT_GRAD: {
        /* conv2d: out [N, O, OH, OW], w [O, C/groups, KH, KW]: 2 N O OH OW (C/groups) KH KW.
         * conv_transpose2d: x [N, C, H, W], w [C, O/groups, KH, KW]: 2 N C H W (O/groups) KH KW.
         * conv2d_weight_grad: gw [O, C/groups, KH, KW], gy [N, O, OH, OW]: as conv2d. */
        const rw_view *w = k->slot == RW_K_CONV2D_WEIGHT_GRAD ? &v[0] : &v[2];
        const rw_view *each = k->slot == RW_K_CONV2D ? &v[0]
                            : k->slot == RW_K_CONV_TRANSPOSE2D ? &v[1] : &v[2];
        if (!sh_float(v[0].dtype) || sh_rank(w) != 4) return 0;
        int64_t f = sh_mul(sh_mul(sh_numel(each), sh_numel(w) / (w->shape[0] ? w->shape[0] : 1)),
                           2);
        if (k->slot != RW_K_CONV2D_WEIGHT_GRAD && sh_present(k, 3)) f = sh_add(f, sh_numel(&v[0]));
        return f;
    }
    case RW_K_MAX_POOL2D: case RW_K_AVG_POOL2D: case RW_K_AVG_POOL2D_BACKWARD: {
        /* kernel[2] are ints 0 and 1; per window tap of each output (backward: of gy) */
        const rw_view *x = k->slot == RW_K_MAX_POOL2D ? &v[2] : &v[1];
        const rw_view *each = k->slot == RW_K_AVG_POOL2D_BACKWARD ? &v[1] : &v[0];
        if (!sh_float(x->dtype)) return 0;
        const int64_t kh = k->ints[0] > 0 ? k->ints[0] : 0, kw = k->ints[1] > 0 ? k->ints[1] : 0;
        return sh_mul(sh_numel(each), sh_mul(kh, kw));
    }
    case RW_K_ADAPTIVE_AVG_POOL2D: return sh_float(v[1].dtype) ? sh_numel(&v[1]) : 0;
    case RW_K_ADAPTIVE_AVG_POOL2D_BACKWARD: return sh_float(v[0].dtype) ? sh_numel(&v[0]) : 0;
    case RW_K_ADAM_STEP: return sh_float(v[0].dtype) ? sh_mul(sh_numel(&v[0]), 14) : 0;
    default: return 0;
    }
}

/* ---- the stats ---- */

/* Per buffer: alive when the setup ends (the exec keeps it for every run). */
static uint8_t *sh_alive_after_setup(const em_graph *g) {
    uint8_t *alive = calloc(g->nbufs ? g->nbufs : 1, 1);
    if (!alive) return NULL;
    const uint64_t end = g->setup_end < g->nsteps ? g->setup_end : g->nsteps;
    for (uint64_t i = 0; i < end; i++) {
        const gr_step *st = &g->steps[i];
        if (st->buf >= g->nbufs) continue;
        if (st->type == GR_ALLOC) alive[st->buf] = 1;
        else if (st->type == GR_FREE) alive[st->buf] = 0;
    }
    return alive;
}

static bool sh_is_state(const gr_buffer *b) { return b->setup && !b->freed && b->input < 0; }

static em_status sh_stats(const char *fn, const em_graph *g, em_graph_stats *out) {
    memset(out, 0, sizeof *out);
    uint8_t *alive = sh_alive_after_setup(g), *output = calloc(g->nbufs ? g->nbufs : 1, 1);
    if (!alive || !output) {
        free(alive);
        free(output);
        return emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
    }
    for (int i = 0; i < g->noutputs; i++) {
        const uint32_t b = sh_buf_of(g, &g->outputs[i].view);
        if (b != UINT32_MAX) output[b] = 1;
    }
    out->buffers = g->nbufs;
    int64_t live = 0; /* when a run starts: what the setup left, and the inputs */
    for (uint32_t b = 0; b < g->nbufs; b++) {
        const gr_buffer *gb = &g->bufs[b];
        if (sh_is_state(gb)) out->state_bytes = sh_add(out->state_bytes, sh_bytes(gb->bytes));
        if (gb->input >= 0 || (gb->setup && alive[b])) live = sh_add(live, sh_bytes(gb->bytes));
    }
    for (uint32_t i = 0; i < g->nblobs; i++)
        out->init_bytes = sh_add(out->init_bytes, sh_bytes(g->blobs[i].len));
    out->peak_bytes = live;
    for (uint64_t i = 0; i < g->nsteps; i++) {
        const gr_step *st = &g->steps[i];
        const bool setup = i < g->setup_end;
        if (st->type == GR_KERNEL) {
            out->kernels++;
            if (setup) out->setup_kernels++;
            else out->flops = sh_add(out->flops, sh_flops(&st->k));
        } else if (!setup && (st->type == GR_ALLOC || st->type == GR_FREE) &&
                   st->buf < g->nbufs) {
            /* a run's own buffers: the state and the inputs are counted from the start, and
             * an output's buffer is kept to the end of the run even when its handle was
             * dropped in the capture */
            const gr_buffer *gb = &g->bufs[st->buf];
            if (gb->setup || gb->input >= 0 || (st->type == GR_FREE && output[st->buf])) continue;
            const int64_t n = sh_bytes(gb->bytes);
            live = sh_add(live, st->type == GR_ALLOC ? n : -n);
            if (live > out->peak_bytes) out->peak_bytes = live;
        }
    }
    free(alive);
    free(output);
    return EM_OK;
}

em_status em_graph_stats_of(const em_graph *g, em_graph_stats *out) {
    static const char fn[] = "em_graph_stats_of";
    if (!g) return emi_fail_null(fn, "g");
    if (!out) return emi_fail_null(fn, "out");
    em_graph_stats s;
    EMI_TRY(sh_stats(fn, g, &s));
    *out = s;
    return EM_OK;
}

/* ---- text helpers ---- */

/* "[2, 3]" ("[]" for 0-d). */
static void sh_shape(const rw_view *v, char *out, size_t cap) {
    size_t n = (size_t)snprintf(out, cap, "[");
    for (int d = 0; d < sh_rank(v) && n < cap; d++)
        n += (size_t)snprintf(out + n, cap - n, "%s%lld", d ? ", " : "", (long long)v->shape[d]);
    if (n < cap) snprintf(out + n, cap - n, "]");
}

static const char *sh_dtype_name(em_dtype dt) {
    return (unsigned)dt < EM_DTYPE_COUNT ? em_dtype_name(dt) : "?";
}

/* 1234567 -> "1,234,567". */
static void sh_grouped(int64_t v, char *out, size_t cap) {
    char digits[32];
    const bool neg = v < 0;
    const unsigned long long u = neg ? 0ull - (unsigned long long)v : (unsigned long long)v;
    const int nd = snprintf(digits, sizeof digits, "%llu", u);
    size_t n = 0;
    if (neg && n + 1 < cap) out[n++] = '-';
    for (int i = 0; i < nd && n + 1 < cap; i++) {
        if (i && (nd - i) % 3 == 0 && n + 2 < cap) out[n++] = ',';
        out[n++] = digits[i];
    }
    out[n < cap ? n : cap - 1] = '\0';
}

/* FLOPs with an SI prefix: "0", "512", "1.50 k", "23.1 M", "4.20 G". */
static void sh_si(int64_t v, char *out, size_t cap) {
    static const char *const pre[] = {"k", "M", "G", "T", "P", "E"};
    if (v < 1000) {
        snprintf(out, cap, "%lld", (long long)v);
        return;
    }
    double x = (double)v;
    int p = -1;
    while (x >= 999.5 && p < 5) x /= 1000, p++;
    snprintf(out, cap, x >= 99.95 ? "%.0f %s" : x >= 9.995 ? "%.1f %s" : "%.2f %s", x, pre[p]);
}

/* Bytes: "1,234,567 B (1.18 MiB)", or "512 B". */
static void sh_size(int64_t v, char *out, size_t cap) {
    static const char *const pre[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    char g[32];
    sh_grouped(v, g, sizeof g);
    if (v < 1024) {
        snprintf(out, cap, "%s B", g);
        return;
    }
    double x = (double)v;
    int p = -1;
    while (x >= 1024 && p < 5) x /= 1024, p++;
    snprintf(out, cap, "%s B (%.*f %s)", g, x >= 100 ? 0 : x >= 10 ? 1 : 2, x, pre[p]);
}

/* ---- the summary ---- */

typedef struct sh_family {
    int64_t calls[2], flops[2]; /* [0]: setup, [1]: step */
    int slot, sub;
} sh_family;

/* Step FLOPs, then step calls, then setup calls, descending; then slot and op order. */
static int sh_family_cmp(const void *pa, const void *pb) {
    const sh_family *a = pa, *b = pb;
    if (a->flops[1] != b->flops[1]) return a->flops[1] < b->flops[1] ? 1 : -1;
    if (a->calls[1] != b->calls[1]) return a->calls[1] < b->calls[1] ? 1 : -1;
    if (a->calls[0] != b->calls[0]) return a->calls[0] < b->calls[0] ? 1 : -1;
    if (a->slot != b->slot) return a->slot - b->slot;
    return a->sub - b->sub;
}

/* The widest name of a list (at least `least`, at most 48). */
static int sh_name_width(const gr_named *l, int n, int least) {
    int w = least;
    for (int i = 0; i < n; i++) {
        const int len = (int)strlen(l[i].name);
        if (len > w) w = len;
    }
    return w > 48 ? 48 : w;
}

static void sh_write_named(FILE *f, const char *title, const gr_named *l, int n, int width) {
    fprintf(f, "%s (%d)\n", title, n);
    if (n == 0) fprintf(f, "  (none)\n");
    for (int i = 0; i < n; i++) {
        char shape[256];
        sh_shape(&l[i].view, shape, sizeof shape);
        fprintf(f, "  %-*s  %-4s  %s\n", width, l[i].name, sh_dtype_name(l[i].dtype), shape);
    }
}

/* The dtype of each buffer: that of the first view of it met (kernel calls, named tensors),
 * or -1 when nothing views it. */
static int8_t *sh_buffer_dtypes(const em_graph *g) {
    int8_t *dt = malloc(g->nbufs ? g->nbufs : 1);
    if (!dt) return NULL;
    memset(dt, -1, g->nbufs ? g->nbufs : 1);
    const gr_named *lists[3] = {g->inputs, g->outputs, g->states};
    const int counts[3] = {g->ninputs, g->noutputs, g->nstates};
    for (int l = 0; l < 3; l++)
        for (int i = 0; i < counts[l]; i++) {
            const uint32_t b = sh_buf_of(g, &lists[l][i].view);
            if (b != UINT32_MAX && dt[b] < 0 && (unsigned)lists[l][i].view.dtype < EM_DTYPE_COUNT)
                dt[b] = (int8_t)lists[l][i].view.dtype;
        }
    for (uint64_t s = 0; s < g->nsteps; s++) {
        const gr_step *st = &g->steps[s];
        if (st->type != GR_KERNEL) continue;
        for (int i = 0; i < RW_MAX_VIEWS; i++) {
            if (!sh_present(&st->k, i)) continue;
            const uint32_t b = sh_buf_of(g, &st->k.views[i]);
            if (b != UINT32_MAX && dt[b] < 0 && (unsigned)st->k.views[i].dtype < EM_DTYPE_COUNT)
                dt[b] = (int8_t)st->k.views[i].dtype;
        }
    }
    return dt;
}

em_status em_graph_write_summary(const em_graph *g, FILE *f) {
    static const char fn[] = "em_graph_write_summary";
    if (!g) return emi_fail_null(fn, "g");
    if (!f) return emi_fail_null(fn, "f");
    em_graph_stats st;
    EMI_TRY(sh_stats(fn, g, &st));
    sh_family *fam = calloc((size_t)RW_K_COUNT * SH_SUBS, sizeof *fam);
    int8_t *dts = sh_buffer_dtypes(g);
    if (!fam || !dts) {
        free(fam);
        free(dts);
        return emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
    }
    int64_t flops[2] = {0, 0}, calls[2] = {0, 0}, alts[RW_K_COUNT] = {0}, nalts = 0;
    for (uint64_t i = 0; i < g->nsteps; i++) {
        const gr_step *s = &g->steps[i];
        if ((unsigned)s->k.slot >= RW_K_COUNT) continue;
        if (s->type == GR_ALT) alts[s->k.slot]++, nalts++;
        if (s->type != GR_KERNEL) continue;
        const int part = i >= g->setup_end, sub = sh_family_sub(&s->k);
        sh_family *fm = &fam[(size_t)s->k.slot * SH_SUBS + (size_t)sub];
        const int64_t fl = sh_flops(&s->k);
        fm->slot = (int)s->k.slot, fm->sub = sub;
        fm->calls[part]++, calls[part]++;
        fm->flops[part] = sh_add(fm->flops[part], fl);
        flops[part] = sh_add(flops[part], fl);
    }
    /* the families met, packed to the front and sorted */
    size_t nf = 0;
    for (size_t i = 0; i < (size_t)RW_K_COUNT * SH_SUBS; i++)
        if (fam[i].calls[0] || fam[i].calls[1]) fam[nf++] = fam[i];
    qsort(fam, nf, sizeof *fam, sh_family_cmp);

    /* the header and the named tensors */
    fprintf(f, "graph: %d input%s, %d output%s, %d named state tensor%s, %lld kernel call%s, "
               "%lld buffer%s\n\n",
            g->ninputs, g->ninputs == 1 ? "" : "s", g->noutputs, g->noutputs == 1 ? "" : "s",
            g->nstates, g->nstates == 1 ? "" : "s", (long long)st.kernels,
            st.kernels == 1 ? "" : "s", (long long)st.buffers, st.buffers == 1 ? "" : "s");
    int width = sh_name_width(g->inputs, g->ninputs, 4);
    width = sh_name_width(g->outputs, g->noutputs, width);
    width = sh_name_width(g->states, g->nstates, width);
    sh_write_named(f, "inputs", g->inputs, g->ninputs, width);
    sh_write_named(f, "outputs", g->outputs, g->noutputs, width);
    sh_write_named(f, "named state", g->states, g->nstates, width);

    /* the kernel calls per family */
    int fw = 6; /* "family" */
    for (size_t i = 0; i < nf; i++) {
        char name[64];
        sh_family_name((rw_slot)fam[i].slot, fam[i].sub, name, sizeof name);
        if ((int)strlen(name) > fw) fw = (int)strlen(name);
    }
    fprintf(f, "\nkernel calls\n  %-*s  %10s  %10s  %10s  %10s\n", fw, "op", "setup", "FLOPs",
            "step", "FLOPs");
    for (size_t i = 0; i <= nf; i++) {
        char name[64], c0[32], c1[32], f0[32], f1[32];
        const int64_t *cl = i < nf ? fam[i].calls : calls, *fl = i < nf ? fam[i].flops : flops;
        if (i < nf) sh_family_name((rw_slot)fam[i].slot, fam[i].sub, name, sizeof name);
        else snprintf(name, sizeof name, "total");
        sh_grouped(cl[0], c0, sizeof c0);
        sh_grouped(cl[1], c1, sizeof c1);
        sh_si(fl[0], f0, sizeof f0);
        sh_si(fl[1], f1, sizeof f1);
        if (i == nf) fprintf(f, "  %.*s\n", fw + 48, "----------------------------------------"
                                                     "----------------------------------------"
                                                     "----------------------------------------");
        fprintf(f, "  %-*s  %10s  %10s  %10s  %10s\n", fw, name, c0, f0, c1, f1);
    }
    if (nalts) {
        /* the fused calls recorded beside their compositions (counted above) */
        fprintf(f, "  fused alternatives:");
        for (int sl = 0, n = 0; sl < RW_K_COUNT; sl++)
            if (alts[sl])
                fprintf(f, "%s %s %lld", n++ ? "," : "", rw_slots[sl].name, (long long)alts[sl]);
        fprintf(f, "\n  (a device with the kernel runs each in place of its composition)\n");
    }

    /* the totals */
    int64_t elems = 0, nstate = 0;
    for (uint32_t b = 0; b < g->nbufs; b++) {
        if (!sh_is_state(&g->bufs[b])) continue;
        nstate++;
        if (dts[b] >= 0)
            elems = sh_add(elems, sh_bytes(g->bufs[b].bytes) /
                                      (int64_t)emi_dtype_size((em_dtype)dts[b]));
    }
    char e[32], sb[64], ib[64], pb[64], kc[32], sk[32], fl[32], fls[32];
    sh_grouped(elems, e, sizeof e);
    sh_size(st.state_bytes, sb, sizeof sb);
    sh_size(st.init_bytes, ib, sizeof ib);
    sh_size(st.peak_bytes, pb, sizeof pb);
    sh_grouped(st.kernels, kc, sizeof kc);
    sh_grouped(st.setup_kernels, sk, sizeof sk);
    sh_si(st.flops, fl, sizeof fl);
    sh_grouped(st.flops, fls, sizeof fls);
    fprintf(f, "\ntotals\n");
    fprintf(f, "  %-22s %s elements in %lld buffer%s, %s\n", "parameters (state)", e,
            (long long)nstate, nstate == 1 ? "" : "s", sb);
    fprintf(f, "  %-22s %s\n", "initial values", ib);
    fprintf(f, "  %-22s %s\n", "peak bytes of a step", pb);
    fprintf(f, "  %-22s %s (%s in the setup)\n", "kernel calls", kc, sk);
    fprintf(f, "  %-22s %s (%s)\n", "FLOPs of a step", fl, fls);
    free(fam);
    free(dts);
    if (fflush(f) != 0 || ferror(f))
        return emi_fail(EM_ERR_IO, "%s: writing the summary failed: %s", fn, strerror(errno));
    return EM_OK;
}

/* ---- the dot picture ---- */

/* A node of the picture: kind and number. Kernel calls are numbered by their step. */
enum { SH_KERNEL = 'k', SH_INPUT = 'i', SH_STATE = 's', SH_DATA = 'd' };
typedef struct sh_node {
    char kind;
    uint64_t n;
} sh_node;

static bool sh_node_eq(sh_node a, sh_node b) { return a.kind == b.kind && a.n == b.n; }

static void sh_node_id(sh_node x, char *out, size_t cap) {
    snprintf(out, cap, "%c%llu", x.kind, (unsigned long long)x.n);
}

/* Who wrote what a buffer holds: the last call that wrote all of it, and the calls that
 * wrote parts of it since (cat, slice assignment: several). At most SH_MAX_WRITERS are kept,
 * the first ones, so that a buffer written in many pieces costs a bounded number of edges. */
#define SH_MAX_WRITERS 64
typedef struct sh_writers {
    sh_node *w;
    uint32_t n, cap;
} sh_writers;

typedef struct sh_dot {
    const em_graph *g;
    FILE *f;
    sh_writers *wr;    /* per buffer */
    uint8_t *shown;    /* per buffer: its state or data node was written */
    uint8_t *alive;    /* per buffer: alive when the setup ends */
    bool nomem;
} sh_dot;

static void sh_set_writer(sh_dot *d, uint32_t b, sh_node x, bool whole) {
    sh_writers *w = &d->wr[b];
    if (whole) w->n = 0;
    for (uint32_t i = 0; i < w->n; i++)
        if (sh_node_eq(w->w[i], x)) return;
    if (w->n >= SH_MAX_WRITERS) return;
    if (w->n == w->cap) {
        const uint32_t cap = w->cap ? 2 * w->cap : 1;
        sh_node *m = realloc(w->w, cap * sizeof *m);
        if (!m) {
            d->nomem = true;
            return;
        }
        w->w = m, w->cap = cap;
    }
    w->w[w->n++] = x;
}

/* Writes s as a dot string's contents: quotes and backslashes escaped, control bytes and
 * anything outside printable ASCII as '?'. */
static void sh_escape(FILE *f, const char *s) {
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fputc('\\', f), fputc(c, f);
        else fputc(c >= 0x20 && c < 0x7f ? c : '?', f);
    }
}

/* Writes the node of state buffer b: `s<b>` as the setup left it, or (updated) `u<b>` as the
 * step leaves it. Labelled by the named state that views it, else "param <b>" (not freed by
 * the end: a parameter, optimizer state) or "setup <b>" (a setup value the step lets go). */
static void sh_state_node(sh_dot *d, uint32_t b, bool updated) {
    const em_graph *g = d->g;
    const gr_named *named = NULL;
    for (int i = 0; i < g->nstates && !named; i++)
        if (sh_buf_of(g, &g->states[i].view) == b) named = &g->states[i];
    fprintf(d->f, "  %c%u [label=\"", updated ? 'u' : 's', b);
    if (named) sh_escape(d->f, named->name);
    else fprintf(d->f, "%s %u", sh_is_state(&g->bufs[b]) ? "param" : "setup", b);
    fprintf(d->f, "%s\\n", updated ? " (updated)" : "");
    if (named) {
        char shape[256];
        sh_shape(&named->view, shape, sizeof shape);
        fprintf(d->f, "%s %s", sh_dtype_name(named->dtype), shape);
    } else {
        fprintf(d->f, "%llu B", (unsigned long long)g->bufs[b].bytes);
    }
    fprintf(d->f, "\", shape=cylinder, fillcolor=\"#fff3bf\"%s];\n",
            updated ? ", style=\"filled,dashed\"" : "");
}

/* Writes the node of a setup buffer or of data written in the step, once. */
static void sh_show_source(sh_dot *d, sh_node x) {
    const uint32_t b = (uint32_t)x.n;
    if ((x.kind != SH_STATE && x.kind != SH_DATA) || d->shown[b]) return;
    d->shown[b] = 1;
    if (x.kind == SH_STATE) sh_state_node(d, b, false);
    else
        fprintf(d->f, "  d%u [label=\"data\\n%llu B\", shape=note, fillcolor=\"#eeeeee\"];\n",
                b, (unsigned long long)d->g->bufs[b].bytes);
}

/* Edges from what buffer b holds to node `to` (unless already drawn from there: `seen`,
 * `nseen`, a list of at most cap). */
static void sh_edges_from(sh_dot *d, uint32_t b, const char *to, sh_node *seen, int *nseen,
                          int cap, const char *attrs) {
    const sh_writers *w = &d->wr[b];
    for (uint32_t i = 0; i < w->n; i++) {
        bool dup = false;
        for (int j = 0; j < *nseen && !dup; j++) dup = sh_node_eq(seen[j], w->w[i]);
        if (dup) continue;
        if (*nseen < cap) seen[(*nseen)++] = w->w[i];
        char id[32];
        sh_node_id(w->w[i], id, sizeof id);
        sh_show_source(d, w->w[i]);
        fprintf(d->f, "  %s -> %s%s;\n", id, to, attrs);
    }
}

/* Writes the node of the call at `step` (a GR_KERNEL, or a GR_ALT: drawn double, standing for
 * its composition), its edges from what it reads, and makes it what its outputs hold. */
static void sh_dot_kernel(sh_dot *d, uint64_t step) {
    const em_graph *g = d->g;
    const rw_kernel *k = &g->steps[step].k;
    if ((unsigned)k->slot >= RW_K_COUNT) return;
    const unsigned outs = gr_outputs_of(k->slot), ins = sh_reads_of(k->slot);
    const int nviews = rw_slots[k->slot].nviews;
    /* the node: its family, and the dtype and shape of its first output */
    int first = -1;
    for (int i = 0; i < nviews && first < 0; i++)
        if ((outs >> i & 1u) && sh_present(k, i)) first = i;
    char name[64], shape[256] = "";
    sh_family_name(k->slot, sh_family_sub(k), name, sizeof name);
    const bool heavy = k->slot == RW_K_MATMUL || k->slot == RW_K_CONV2D ||
                       k->slot == RW_K_CONV_TRANSPOSE2D || k->slot == RW_K_CONV2D_WEIGHT_GRAD;
    fprintf(d->f, "  k%llu [label=\"%s", (unsigned long long)step, name);
    if (first >= 0) {
        sh_shape(&k->views[first], shape, sizeof shape);
        fprintf(d->f, " %s %s", sh_dtype_name(k->views[first].dtype), shape);
    }
    fprintf(d->f, "\"%s%s];\n", heavy ? ", penwidth=2" : "",
            g->steps[step].type == GR_ALT ? ", peripheries=2" : "");
    /* edges from what it reads */
    char me[32];
    snprintf(me, sizeof me, "k%llu", (unsigned long long)step);
    sh_node seen[RW_MAX_VIEWS * SH_MAX_WRITERS];
    int nseen = 0;
    for (int i = 0; i < nviews; i++) {
        if (!(ins >> i & 1u) || !sh_present(k, i)) continue;
        const uint32_t b = sh_buf_of(g, &k->views[i]);
        if (b != UINT32_MAX)
            sh_edges_from(d, b, me, seen, &nseen, (int)(sizeof seen / sizeof seen[0]), "");
    }
    /* then it is what its outputs hold */
    for (int i = 0; i < nviews; i++) {
        if (!(outs >> i & 1u) || !sh_present(k, i)) continue;
        const rw_view *v = &k->views[i];
        const uint32_t b = sh_buf_of(g, v);
        if (b == UINT32_MAX) continue;
        const bool whole = (unsigned)v->dtype < EM_DTYPE_COUNT &&
                           (uint64_t)sh_mul(sh_numel(v), (int64_t)emi_dtype_size(v->dtype)) >=
                               g->bufs[b].bytes;
        sh_set_writer(d, b, (sh_node){SH_KERNEL, step}, whole);
    }
}

#define SH_BIG_STEP 300

static em_status sh_dot_write(sh_dot *d) {
    const em_graph *g = d->g;
    FILE *f = d->f;
    em_graph_stats st;
    EMI_TRY(sh_stats("em_graph_write_dot", g, &st));
    char fl[32];
    sh_si(st.flops, fl, sizeof fl);
    fprintf(f, "digraph ember_step {\n"
               "  graph [rankdir=TB, fontname=\"Helvetica\", fontsize=11, labelloc=t, "
               "label=\"step: %lld kernel calls, %s FLOPs\"];\n"
               "  node [shape=box, style=\"rounded,filled\", fillcolor=\"#ffffff\", "
               "fontname=\"Helvetica\", fontsize=9, height=0.3];\n"
               "  edge [arrowsize=0.6, color=\"#555555\"];\n",
            (long long)(st.kernels - st.setup_kernels), fl);
    /* a big step: fewer of dot's layout passes (its defaults take many minutes on a training
     * step of a thousand calls, whose activations' edges reach from the forward to the
     * backward) */
    if (st.kernels - st.setup_kernels > SH_BIG_STEP)
        fprintf(f, "  graph [nslimit=2, nslimit1=2, mclimit=0.2];\n");
    /* the setup, collapsed: what it left alive holds its state node */
    for (uint32_t b = 0; b < g->nbufs; b++)
        if (g->bufs[b].setup && d->alive[b]) sh_set_writer(d, b, (sh_node){SH_STATE, b}, true);
    /* the inputs */
    for (int i = 0; i < g->ninputs; i++) {
        char shape[256];
        sh_shape(&g->inputs[i].view, shape, sizeof shape);
        fprintf(f, "  i%d [label=\"", i);
        sh_escape(f, g->inputs[i].name);
        fprintf(f, "\\n%s %s\", shape=invhouse, fillcolor=\"#d0e4ff\"];\n",
                sh_dtype_name(g->inputs[i].dtype), shape);
        const uint32_t b = sh_buf_of(g, &g->inputs[i].view);
        if (b != UINT32_MAX) sh_set_writer(d, b, (sh_node){SH_INPUT, (uint64_t)i}, true);
    }
    /* the step; a fused call (GR_ALT) stands for its composition, whose calls are skipped
     * (the buffers it makes for itself are alive only within it) */
    bool in_alt = false;
    for (uint64_t i = g->setup_end; i < g->nsteps && !d->nomem; i++) {
        const gr_step *s = &g->steps[i];
        if (s->type == GR_ALT || s->type == GR_ALT_END) in_alt = s->type == GR_ALT;
        if (s->type == GR_ALT) sh_dot_kernel(d, i);
        if (in_alt && (s->type == GR_KERNEL || s->type == GR_WRITE)) continue;
        if (s->buf >= g->nbufs && s->type != GR_KERNEL) continue;
        switch (s->type) {
        case GR_ALLOC:
            if (g->bufs[s->buf].input < 0) d->wr[s->buf].n = 0;
            break;
        case GR_FREE: d->wr[s->buf].n = 0; break;
        case GR_WRITE: {
            const bool whole = s->blob < g->nblobs && s->offset == 0 &&
                               g->blobs[s->blob].len >= g->bufs[s->buf].bytes;
            sh_set_writer(d, s->buf, (sh_node){SH_DATA, s->buf}, whole);
            break;
        }
        case GR_KERNEL: sh_dot_kernel(d, i); break;
        default: break;
        }
    }
    /* the outputs */
    for (int i = 0; i < g->noutputs; i++) {
        fprintf(f, "  o%d [label=\"", i);
        sh_escape(f, g->outputs[i].name);
        char shape[256];
        sh_shape(&g->outputs[i].view, shape, sizeof shape);
        fprintf(f, "\\n%s %s\", shape=house, fillcolor=\"#d3f9d8\"];\n",
                sh_dtype_name(g->outputs[i].dtype), shape);
        const uint32_t b = sh_buf_of(g, &g->outputs[i].view);
        char id[32];
        snprintf(id, sizeof id, "o%d", i);
        sh_node seen[SH_MAX_WRITERS];
        int nseen = 0;
        if (b != UINT32_MAX) sh_edges_from(d, b, id, seen, &nseen, SH_MAX_WRITERS, "");
    }
    /* the state the step updated: its value for the next run, from the calls that wrote it
     * last (a node of its own, not an edge back up: long edges cost dot dearly) */
    for (uint32_t b = 0; b < g->nbufs; b++) {
        if (!g->bufs[b].setup || !d->alive[b] || !g->bufs[b].written) continue;
        const sh_writers *w = &d->wr[b];
        bool updated = false;
        for (uint32_t i = 0; i < w->n; i++) updated = updated || w->w[i].kind != SH_STATE;
        if (!updated) continue;
        sh_state_node(d, b, true);
        char id[32];
        snprintf(id, sizeof id, "u%u", b);
        sh_node seen[SH_MAX_WRITERS];
        int nseen = 0;
        sh_edges_from(d, b, id, seen, &nseen, SH_MAX_WRITERS, "");
    }
    fprintf(f, "}\n");
    return d->nomem ? emi_fail(EM_ERR_NOMEM, "em_graph_write_dot: out of memory") : EM_OK;
}

em_status em_graph_write_dot(const em_graph *g, const char *path) {
    static const char fn[] = "em_graph_write_dot";
    if (!g) return emi_fail_null(fn, "g");
    if (!path) return emi_fail_null(fn, "path");
    sh_dot d = {.g = g};
    const size_t n = g->nbufs ? g->nbufs : 1;
    d.wr = calloc(n, sizeof *d.wr);
    d.shown = calloc(n, 1);
    d.alive = sh_alive_after_setup(g);
    em_status s = EM_OK;
    if (!d.wr || !d.shown || !d.alive) s = emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
    if (s == EM_OK && !(d.f = fopen(path, "w")))
        s = emi_fail(EM_ERR_IO, "%s: cannot open '%s' for writing: %s", fn, path,
                     strerror(errno));
    if (s == EM_OK) {
        s = sh_dot_write(&d);
        const bool bad = ferror(d.f) != 0;
        const int err = errno;
        if (fclose(d.f) != 0 || bad) {
            if (s == EM_OK)
                s = emi_fail(EM_ERR_IO, "%s: writing '%s' failed: %s", fn, path,
                             strerror(bad ? err : errno));
        }
    }
    for (size_t b = 0; d.wr && b < n; b++) free(d.wr[b].w);
    free(d.wr);
    free(d.shown);
    free(d.alive);
    return s;
}
