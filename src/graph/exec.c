/* exec.c — replaying a graph on a device.
 *
 * em_graph_prepare runs the setup once (its buffers still alive are the state), then plans the
 * step: every buffer the step makes gets a place in one of a few allocations made now (a buffer
 * takes the place of one that is already freed when it fits, so the step needs about its peak
 * memory, and a run allocates nothing), and every kernel call is checked once by
 * rs_resolve_kernel (src/wire/exec.c: the graph may come from a file, so each call is hostile
 * input) into views over those places. The checked calls then become the run list (ex_compile):
 * one small entry a call, the slot's function with pointers to its views, which are kept once
 * each in a pool (a run touches only the list and the few distinct views). em_exec_run binds the
 * inputs (their own buffers when the step only reads them whole: only the pooled views over an
 * input get its address), calls down the list and copies the outputs out. Calls that read index
 * values are checked again at every run (rs_exec_kernel). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "graph/graph_internal.h"
#include "wire/exec.h"

enum {
    XB_NONE = 0,   /* not alive (a setup temporary, or not made yet) */
    XB_STATE,      /* made by the setup and alive after it: kept from run to run */
    XB_PLANNED,    /* made by the step: a place in one of the planned allocations */
    XB_INPUT,      /* an input, bound to the caller's buffer (or a copy) at each run */
    XB_INPUT_COPY, /* an input the step writes into: the caller's buffer when it is whole and
                    * no other input shares it, else copied into its own allocation (home) */
};

typedef struct ex_kernel {
    uint8_t mode;   /* rs_mode */
    uint8_t inmask; /* views over XB_INPUT buffers: their bufs are set at each run */
    bool fused;     /* a GR_ALT whose fused call the device runs (then its composition not) */
    uint64_t end;   /* a GR_ALT's GR_ALT_END (or the last step) */
    em_view v[RW_MAX_VIEWS];
} ex_kernel;

typedef struct ex_op ex_op;
typedef em_status (*ex_fn)(em_exec *e, const ex_op *op, char *msg, size_t cap);

/* One entry of the run list: a call of the step (or a write of it). A call checked once at
 * prepare (RS_DIRECT) runs as fn with v[], pointers into the exec's pool of views; any other
 * step runs as the generic entry of its kind, from the step itself. */
struct ex_op {
    ex_fn fn;
    const em_view *v[RW_MAX_VIEWS]; /* NULL: absent */
    const rw_kernel *k;             /* the recorded call (NULL for a write) */
    int sub;
    bool alt;                       /* a fused call: success skips its composition */
    uint32_t ok_next;               /* the entry to run after this one succeeds */
    uint64_t step;                  /* its step, for messages */
    int64_t ints[2];
    double d[RW_MAX_DOUBLES];
};

/* A pooled view that refers to an input bound at each run: its buf is that input's buffer. */
typedef struct ex_patch {
    uint32_t view;
    uint32_t buf;
} ex_patch;

/* The GR_ALT_END of the GR_ALT at step i, or the last step when it has none. */
static uint64_t ex_alt_end(const em_graph *g, uint64_t i) {
    for (uint64_t j = i + 1; j < g->nsteps; j++)
        if (g->steps[j].type == GR_ALT_END || g->steps[j].type == GR_ALT) return j;
    return g->nsteps - 1;
}

struct em_exec {
    em_graph *g;
    em_device dev;
    const em_backend_ops *ops;
    void *ctx;
    rs_host host;
    void **mem;      /* per buffer: its memory on the device, or NULL */
    uint8_t *kind;   /* per buffer: XB_* */
    void **owned;    /* the allocations the exec holds */
    uint32_t nowned;
    ex_kernel *kern; /* per step of the step section (prepare only: freed once compiled) */
    void **scratch;  /* per input: a copy made by this run, or NULL */
    void **home;     /* per buffer: an XB_INPUT_COPY buffer's own allocation */
    bool *inplace;   /* per input: this run binds the written input to the caller's buffer */
    ex_op *run;      /* the run list */
    uint32_t nrun;
    em_view *pool;   /* the distinct views of the run list's calls */
    uint32_t npool;
    ex_patch *patch; /* the pooled views over inputs bound at each run */
    uint32_t npatch;
};

static bool ex_lookup(void *conn, uint64_t id, void **buf, size_t *bytes) {
    const em_exec *e = conn;
    if (id == 0 || id > e->g->nbufs || !e->mem[id - 1]) return false;
    *buf = e->mem[id - 1];
    *bytes = (size_t)e->g->bufs[id - 1].bytes;
    return true;
}

static em_status ex_nomem(const char *fn, const em_exec *e, uint64_t bytes, em_status s) {
    return s == EM_ERR_NOMEM ? emi_fail(s, "%s: out of memory allocating %llu bytes on %s", fn,
                                        (unsigned long long)bytes, e->ops->name)
                             : s;
}

static em_status ex_alloc_raw(em_exec *e, const char *fn, uint64_t bytes, void **out) {
    em_status s = e->ops->alloc(e->ctx, bytes ? (size_t)bytes : 1, out);
    if (s != EM_OK) {
        *out = NULL;
        return ex_nomem(fn, e, bytes, s);
    }
    return EM_OK;
}

/* Keeps an allocation for the exec's life. */
static em_status ex_own(em_exec *e, const char *fn, uint64_t bytes, void **out) {
    EMI_TRY(ex_alloc_raw(e, fn, bytes, out));
    e->owned[e->nowned++] = *out;
    return EM_OK;
}

void em_exec_release(em_exec *e) {
    if (!e) return;
    for (uint32_t i = 0; i < e->nowned; i++) e->ops->free(e->ctx, e->owned[i]);
    for (int i = 0; e->scratch && i < e->g->ninputs; i++)
        if (e->scratch[i]) e->ops->free(e->ctx, e->scratch[i]);
    free(e->owned);
    free(e->mem);
    free(e->kind);
    free(e->kern);
    free(e->scratch);
    free(e->home);
    free(e->inplace);
    free(e->run);
    free(e->pool);
    free(e->patch);
    gr_release(e->g);
    free(e);
}

/* True when buffer b holds an output. */
static bool ex_is_output(const em_graph *g, uint32_t b) {
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i].view.id - 1 == b) return true;
    return false;
}

/* The setup, run once with the allocations it asks for; what it leaves alive is the state. */
static em_status ex_setup(em_exec *e) {
    static const char fn[] = "em_graph_prepare";
    const em_graph *g = e->g;
    char msg[512];
    em_status s = EM_OK;
    bool skip = false; /* inside a composition whose fused call ran */
    for (uint64_t i = 0; i < g->setup_end && s == EM_OK; i++) {
        const gr_step *st = &g->steps[i];
        if (skip && (st->type == GR_KERNEL || st->type == GR_WRITE)) continue;
        switch (st->type) {
        case GR_ALT:
            if (!rs_implements(e->ops, st->k.slot)) break; /* the composition runs */
            s = rs_exec_kernel(&e->host, ex_lookup, e, &st->k, msg, sizeof msg);
            if (s == EM_OK) skip = true;
            else if (s == EM_ERR_UNSUPPORTED) s = EM_OK; /* not this case: the composition */
            else s = emi_fail(s, "%s: setup step %llu: %s", fn, (unsigned long long)i, msg);
            break;
        case GR_ALT_END:
            skip = false;
            break;
        case GR_ALLOC:
            if (e->mem[st->buf]) e->ops->free(e->ctx, e->mem[st->buf]);
            s = ex_alloc_raw(e, fn, g->bufs[st->buf].bytes, &e->mem[st->buf]);
            break;
        case GR_FREE:
            if (ex_is_output(g, st->buf)) break; /* dropped before the capture ended: kept */
            if (e->mem[st->buf]) e->ops->free(e->ctx, e->mem[st->buf]);
            e->mem[st->buf] = NULL;
            break;
        case GR_WRITE: {
            const gr_blob *bl = &g->blobs[st->blob];
            if (!e->mem[st->buf] || st->offset > g->bufs[st->buf].bytes ||
                bl->len > g->bufs[st->buf].bytes - st->offset)
                s = emi_fail(EM_ERR_STATE, "%s: step %llu writes outside buffer %u", fn,
                             (unsigned long long)i, st->buf);
            else if (bl->len)
                s = e->ops->write(e->ctx, e->mem[st->buf], (size_t)st->offset, bl->data,
                                  (size_t)bl->len);
            break;
        }
        case GR_KERNEL:
            s = rs_exec_kernel(&e->host, ex_lookup, e, &st->k, msg, sizeof msg);
            if (s != EM_OK) s = emi_fail(s, "%s: setup step %llu: %s", fn, (unsigned long long)i, msg);
            break;
        default:
            s = emi_fail(EM_ERR_STATE, "%s: step %llu has an unknown type %d", fn,
                         (unsigned long long)i, st->type);
        }
    }
    for (uint32_t b = 0; b < g->nbufs; b++) {
        if (!e->mem[b]) continue;
        if (s == EM_OK) {
            e->kind[b] = XB_STATE;
            e->owned[e->nowned++] = e->mem[b];
        } else {
            e->ops->free(e->ctx, e->mem[b]);
            e->mem[b] = NULL;
        }
    }
    return s;
}

typedef struct ex_place {
    uint64_t bytes;
    bool busy;
    void *p;
} ex_place;

/* Plans the step's buffers into places (best fit among the freed ones), then makes them. */
static em_status ex_plan(em_exec *e) {
    static const char fn[] = "em_graph_prepare";
    const em_graph *g = e->g;
    uint8_t *keep = calloc(g->nbufs ? g->nbufs : 1, 1);
    uint32_t *place_of = calloc(g->nbufs ? g->nbufs : 1, sizeof *place_of);
    ex_place *pl = NULL;
    uint32_t npl = 0, cappl = 0;
    em_status s = keep && place_of ? EM_OK : emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
    /* a program may drop an output's handle before the capture ends: its buffer stays */
    for (int i = 0; s == EM_OK && i < g->noutputs; i++) keep[g->outputs[i].view.id - 1] = 1;
    for (uint64_t i = g->setup_end; i < g->nsteps && s == EM_OK; i++) {
        const gr_step *st = &g->steps[i];
        const uint32_t b = st->buf;
        if (st->type == GR_ALLOC) {
            if (e->kind[b] != XB_NONE) continue; /* state, or an input bound already */
            if (g->bufs[b].input >= 0) {
                if (!g->bufs[b].written) {
                    e->kind[b] = XB_INPUT;
                } else {
                    e->kind[b] = XB_INPUT_COPY;
                    s = ex_own(e, fn, g->bufs[b].bytes, &e->mem[b]);
                    e->home[b] = e->mem[b];
                }
                continue;
            }
            const uint64_t need = g->bufs[b].bytes ? g->bufs[b].bytes : 1;
            uint32_t best = UINT32_MAX;
            for (uint32_t k = 0; k < npl; k++)
                if (!pl[k].busy && pl[k].bytes >= need &&
                    (best == UINT32_MAX || pl[k].bytes < pl[best].bytes))
                    best = k;
            if (best == UINT32_MAX) {
                if (npl == cappl) {
                    uint32_t nc = cappl ? 2 * cappl : 64;
                    ex_place *q = realloc(pl, nc * sizeof *q);
                    if (!q) {
                        s = emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
                        break;
                    }
                    pl = q;
                    cappl = nc;
                }
                pl[npl] = (ex_place){need, false, NULL};
                best = npl++;
            }
            pl[best].busy = true;
            place_of[b] = best;
            e->kind[b] = XB_PLANNED;
        } else if (st->type == GR_FREE) {
            if (e->kind[b] == XB_PLANNED && !keep[b]) pl[place_of[b]].busy = false;
        }
    }
    if (s == EM_OK) {
        void **o = realloc(e->owned, (e->nowned + npl + 1) * sizeof *o);
        if (!o) s = emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
        else e->owned = o;
    }
    for (uint32_t k = 0; k < npl && s == EM_OK; k++) s = ex_own(e, fn, pl[k].bytes, &pl[k].p);
    for (uint32_t b = 0; b < g->nbufs && s == EM_OK; b++)
        if (e->kind[b] == XB_PLANNED) e->mem[b] = pl[place_of[b]].p;
    free(pl);
    free(keep);
    free(place_of);
    return s;
}

/* Checks every kernel call of the step once and resolves its views. */
static em_status ex_resolve(em_exec *e) {
    static const char fn[] = "em_graph_prepare";
    const em_graph *g = e->g;
    char msg[512];
    /* inputs bound at each run: stand-in addresses, one per buffer, while checking */
    for (uint32_t b = 0; b < g->nbufs; b++)
        if (e->kind[b] == XB_INPUT) e->mem[b] = (char *)e->kind + b;
    em_status s = EM_OK;
    for (uint64_t i = g->setup_end; i < g->nsteps && s == EM_OK; i++) {
        const gr_step *st = &g->steps[i];
        if (st->type != GR_KERNEL && st->type != GR_ALT) continue;
        ex_kernel *x = &e->kern[i - g->setup_end];
        if (st->type == GR_ALT) {
            x->end = ex_alt_end(g, i);
            x->fused = rs_implements(e->ops, st->k.slot);
            x->mode = RS_SKIP;
            if (!x->fused) continue; /* the composition runs */
        }
        rs_mode mode = RS_CHECKED;
        s = rs_resolve_kernel(&e->host, ex_lookup, e, &st->k, x->v, &mode, msg, sizeof msg);
        if (s != EM_OK) {
            s = emi_fail(s, "%s: step %llu: %s", fn, (unsigned long long)i, msg);
            break;
        }
        x->mode = (uint8_t)mode;
        for (int v = 0; v < RW_MAX_VIEWS; v++)
            if ((st->k.mask >> v & 1u) && (e->kind[st->k.views[v].id - 1] == XB_INPUT ||
                                           e->kind[st->k.views[v].id - 1] == XB_INPUT_COPY))
                x->inmask |= (uint8_t)(1u << v);
    }
    for (uint32_t b = 0; b < g->nbufs; b++)
        if (e->kind[b] == XB_INPUT) e->mem[b] = NULL;
    return s;
}

/* ---- the run list ---- */

/* The slots a run calls straight from its entry (as rs_call does); any other checked call goes
 * through rs_run_resolved. */
static em_status ex_op_fill(em_exec *e, const ex_op *op, char *msg, size_t cap) {
    (void)msg, (void)cap;
    return e->ops->fill(e->ctx, op->v[0], op->d[0]);
}
static em_status ex_op_copy(em_exec *e, const ex_op *op, char *msg, size_t cap) {
    (void)msg, (void)cap;
    return e->ops->copy(e->ctx, op->v[0], op->v[1]);
}
static em_status ex_op_unary(em_exec *e, const ex_op *op, char *msg, size_t cap) {
    (void)msg, (void)cap;
    return e->ops->unary(e->ctx, (em_unary_op)op->sub, op->v[0], op->v[1], op->d);
}
static em_status ex_op_binary(em_exec *e, const ex_op *op, char *msg, size_t cap) {
    (void)msg, (void)cap;
    return e->ops->binary(e->ctx, (em_binary_op)op->sub, op->v[0], op->v[1], op->v[2]);
}
static em_status ex_op_binary_scalar(em_exec *e, const ex_op *op, char *msg, size_t cap) {
    (void)msg, (void)cap;
    return e->ops->binary_scalar(e->ctx, (em_binary_op)op->sub, op->v[0], op->v[1], op->d[0]);
}
static em_status ex_op_where(em_exec *e, const ex_op *op, char *msg, size_t cap) {
    (void)msg, (void)cap;
    return e->ops->where(e->ctx, op->v[0], op->v[1], op->v[2], op->v[3]);
}
static em_status ex_op_reduce(em_exec *e, const ex_op *op, char *msg, size_t cap) {
    (void)msg, (void)cap; /* every dim was range-checked; any negative one means "all" */
    return e->ops->reduce(e->ctx, (em_reduce_op)op->sub, op->v[0], op->v[1],
                          op->ints[0] < 0 ? -1 : (int)op->ints[0], op->d);
}
static em_status ex_op_softmax(em_exec *e, const ex_op *op, char *msg, size_t cap) {
    (void)msg, (void)cap;
    return e->ops->softmax(e->ctx, op->v[0], op->v[1], (int)op->ints[0], op->ints[1] != 0);
}
static em_status ex_op_matmul(em_exec *e, const ex_op *op, char *msg, size_t cap) {
    (void)msg, (void)cap;
    return e->ops->matmul(e->ctx, op->v[0], op->v[1], op->v[2]);
}

/* Any other call checked once: its views copied out of the pool for rs_run_resolved (which
 * writes msg itself). */
static em_status ex_op_resolved(em_exec *e, const ex_op *op, char *msg, size_t cap) {
    em_view views[RW_MAX_VIEWS];
    for (int i = 0; i < RW_MAX_VIEWS; i++)
        if (op->v[i]) views[i] = *op->v[i];
    return rs_run_resolved(&e->host, op->k, views, msg, cap);
}

/* A call checked at every run (it reads index values, or its inputs are copied first). */
static em_status ex_op_checked(em_exec *e, const ex_op *op, char *msg, size_t cap) {
    return rs_exec_kernel(&e->host, ex_lookup, e, op->k, msg, cap);
}

/* A write of the step section: its bounds checked here, as the setup's. Sets the error itself
 * (no k: ex_step passes it on). */
static em_status ex_op_write(em_exec *e, const ex_op *op, char *msg, size_t cap) {
    (void)msg, (void)cap;
    const em_graph *g = e->g;
    const gr_step *st = &g->steps[op->step];
    const gr_blob *bl = &g->blobs[st->blob];
    if (!e->mem[st->buf] || st->offset > g->bufs[st->buf].bytes ||
        bl->len > g->bufs[st->buf].bytes - st->offset)
        return emi_fail(EM_ERR_STATE, "em_exec_run: step %llu writes outside buffer %u",
                        (unsigned long long)op->step, st->buf);
    if (!bl->len) return EM_OK;
    return e->ops->write(e->ctx, e->mem[st->buf], (size_t)st->offset, bl->data,
                         (size_t)bl->len);
}

static ex_fn ex_fn_of(rw_slot slot) {
    switch (slot) {
    case RW_K_FILL: return ex_op_fill;
    case RW_K_COPY: return ex_op_copy;
    case RW_K_UNARY: return ex_op_unary;
    case RW_K_BINARY: return ex_op_binary;
    case RW_K_BINARY_SCALAR: return ex_op_binary_scalar;
    case RW_K_WHERE: return ex_op_where;
    case RW_K_REDUCE: return ex_op_reduce;
    case RW_K_SOFTMAX: return ex_op_softmax;
    case RW_K_MATMUL: return ex_op_matmul;
    default: return ex_op_resolved;
    }
}

/* The pool's hash table while compiling: slot + 1 of each pooled view, 0 when free. */
typedef struct ex_pooler {
    uint32_t *slot;
    uint32_t cap; /* a power of two */
    uint32_t poolcap;
} ex_pooler;

static uint64_t ex_view_hash(const em_view *v) {
    const unsigned char *p = (const unsigned char *)v;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof *v; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* The pool index of view v (rs_resolve_kernel zeroes a view before filling it, so views compare
 * as bytes), added when new; UINT32_MAX when out of memory. *added: it was new. */
static uint32_t ex_pool_add(em_exec *e, ex_pooler *pl, const em_view *v, bool *added) {
    *added = false;
    if (2 * ((uint64_t)e->npool + 1) > pl->cap) { /* grow the table, rehash */
        uint32_t nc = pl->cap ? 2 * pl->cap : 256;
        uint32_t *t = calloc(nc, sizeof *t);
        if (!t) return UINT32_MAX;
        for (uint32_t i = 0; i < e->npool; i++) {
            uint64_t h = ex_view_hash(&e->pool[i]) & (nc - 1);
            while (t[h]) h = (h + 1) & (nc - 1);
            t[h] = i + 1;
        }
        free(pl->slot);
        pl->slot = t;
        pl->cap = nc;
    }
    uint64_t h = ex_view_hash(v) & (pl->cap - 1);
    for (; pl->slot[h]; h = (h + 1) & (pl->cap - 1))
        if (memcmp(&e->pool[pl->slot[h] - 1], v, sizeof *v) == 0) return pl->slot[h] - 1;
    if (e->npool == pl->poolcap) {
        uint32_t nc = pl->poolcap ? 2 * pl->poolcap : 64;
        em_view *q = realloc(e->pool, nc * sizeof *q);
        if (!q) return UINT32_MAX;
        e->pool = q;
        pl->poolcap = nc;
    }
    e->pool[e->npool] = *v;
    pl->slot[h] = e->npool + 1;
    *added = true;
    return e->npool++;
}

/* Builds the run list from the checked calls (ex_resolve), then frees them. */
static em_status ex_compile(em_exec *e) {
    static const char fn[] = "em_graph_prepare";
    const em_graph *g = e->g;
    const uint64_t nk = g->nsteps - g->setup_end;
    e->run = calloc(nk ? nk : 1, sizeof *e->run);
    e->patch = NULL;
    ex_pooler pl = {0};
    /* a view's pool index while compiling, in v[] as an integer + 1 */
    em_status s = e->run ? EM_OK : emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
    uint32_t cappatch = 0;
    for (uint64_t i = g->setup_end; i < g->nsteps && s == EM_OK; i++) {
        const gr_step *st = &g->steps[i];
        if (st->type == GR_WRITE) {
            e->run[e->nrun++] = (ex_op){.fn = ex_op_write, .step = i};
            continue;
        }
        if (st->type != GR_KERNEL && st->type != GR_ALT) continue;
        const ex_kernel *x = &e->kern[i - g->setup_end];
        if (x->mode == RS_SKIP) {
            if (st->type == GR_ALT && x->fused) i = x->end; /* neither form runs */
            continue;
        }
        ex_op *op = &e->run[e->nrun++];
        *op = (ex_op){.k = &st->k, .sub = st->k.sub, .step = i, .alt = st->type == GR_ALT};
        op->ok_next = op->alt ? (uint32_t)(x->end + 1 - g->setup_end) : 0; /* a step: fixed below */
        op->ints[0] = st->k.ints[0];
        op->ints[1] = st->k.ints[1];
        for (int d = 0; d < RW_MAX_DOUBLES; d++) op->d[d] = st->k.doubles[d];
        if (x->mode == RS_CHECKED) {
            op->fn = ex_op_checked;
            continue;
        }
        op->fn = ex_fn_of(st->k.slot);
        for (int v = 0; v < RW_MAX_VIEWS && s == EM_OK; v++) {
            if (!(st->k.mask >> v & 1u)) continue;
            bool added;
            uint32_t pi = ex_pool_add(e, &pl, &x->v[v], &added);
            if (pi == UINT32_MAX) {
                s = emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
                break;
            }
            op->v[v] = (const em_view *)(uintptr_t)(pi + 1);
            if (added && (x->inmask >> v & 1u)) { /* a view over an input: bound at each run */
                if (e->npatch == cappatch) {
                    uint32_t nc = cappatch ? 2 * cappatch : 16;
                    ex_patch *q = realloc(e->patch, nc * sizeof *q);
                    if (!q) {
                        s = emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
                        break;
                    }
                    e->patch = q;
                    cappatch = nc;
                }
                e->patch[e->npatch++] = (ex_patch){pi, (uint32_t)(st->k.views[v].id - 1)};
            }
        }
    }
    free(pl.slot);
    if (s != EM_OK) return s;
    /* pool indices to pointers (the pool is final now); steps to entries */
    uint32_t j = 0;
    for (uint32_t r = 0; r < e->nrun; r++) {
        ex_op *op = &e->run[r];
        for (int v = 0; v < RW_MAX_VIEWS; v++)
            if (op->v[v]) op->v[v] = &e->pool[(uintptr_t)op->v[v] - 1];
        if (!op->alt) {
            op->ok_next = r + 1;
            continue;
        }
        /* the first entry at or after the step that follows the composition */
        const uint64_t target = g->setup_end + op->ok_next;
        for (j = r + 1; j < e->nrun && e->run[j].step < target; j++) {}
        op->ok_next = j;
    }
    free(e->kern);
    e->kern = NULL;
    return EM_OK;
}

em_status em_graph_prepare(const em_graph *gc, em_device dev, em_exec **out) {
    static const char fn[] = "em_graph_prepare";
    EMI_TRY(emi_check_out(fn, out));
    if (!gc) return emi_fail_null(fn, "g");
    if (gc->open) return emi_fail(EM_ERR_STATE, "%s: the graph is still recording (em_graph_end)", fn);
    EMI_TRY(emi_check_device(fn, dev));
    if (dev.backend == EM_BACKEND_CAPTURE)
        return emi_fail(EM_ERR_DEVICE, "%s: a graph runs on a device that computes, not on capture", fn);
    em_graph *g = (em_graph *)gc;
    em_exec *e = calloc(1, sizeof *e);
    if (!e) return emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
    atomic_fetch_add(&g->refs, 1);
    e->g = g;
    e->dev = dev;
    em_status s = emi_backend(dev, &e->ops, &e->ctx);
    if (s != EM_OK) {
        free(e);
        gr_release(g);
        return emi_fail_prefixed(s, fn);
    }
    const size_t n = g->nbufs ? g->nbufs : 1;
    const uint64_t nk = g->nsteps - g->setup_end;
    e->mem = calloc(n, sizeof *e->mem);
    e->kind = calloc(n, 1);
    e->owned = calloc(n + 1, sizeof *e->owned);
    e->kern = calloc(nk ? nk : 1, sizeof *e->kern);
    e->scratch = calloc(g->ninputs ? (size_t)g->ninputs : 1, sizeof *e->scratch);
    e->home = calloc(n, sizeof *e->home);
    e->inplace = calloc(g->ninputs ? (size_t)g->ninputs : 1, sizeof *e->inplace);
    if (!e->mem || !e->kind || !e->owned || !e->kern || !e->scratch || !e->home || !e->inplace) {
        em_exec_release(e);
        return emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
    }
    e->host = (rs_host){e->ops, e->ctx, false, NULL};
    s = ex_setup(e);
    if (s == EM_OK) s = ex_plan(e);
    if (s == EM_OK) s = ex_resolve(e);
    if (s == EM_OK) s = ex_compile(e);
    if (s == EM_OK && e->ops->sync) s = e->ops->sync(e->ctx);
    if (s != EM_OK) {
        em_exec_release(e);
        return s;
    }
    *out = e;
    return EM_OK;
}

/* Whether input i's tensor shares its storage with another input of this run. */
static bool ex_shared(const em_exec *e, const em_tensor *const *inputs, int i) {
    for (int j = 0; j < e->g->ninputs; j++)
        if (j != i && inputs[j] && inputs[j]->st == inputs[i]->st) return true;
    return false;
}

/* Binds input i to t (inputs: this run's, all of them): its own buffer when it is whole
 * (contiguous from its start) and, for an input the step writes into, no other input shares
 * its storage (the step then updates it in place, as the program run eagerly did); else a
 * copy (written back after the step). */
static em_status ex_bind(em_exec *e, int i, const em_tensor *const *inputs) {
    const em_tensor *t = inputs[i];
    static const char fn[] = "em_exec_run";
    const gr_named *in = &e->g->inputs[i];
    if (!t) return emi_fail(EM_ERR_ARG, "%s: input '%s' is NULL", fn, in->name);
    EMI_TRY(emi_check_tensor(fn, in->name, t));
    if (t->dev.backend != e->dev.backend || t->dev.index != e->dev.index) {
        char a[64], b[64];
        em_device_name(t->dev, a, sizeof a);
        em_device_name(e->dev, b, sizeof b);
        return emi_fail(EM_ERR_DEVICE, "%s: input '%s' is on %s, the graph runs on %s", fn,
                        in->name, a, b);
    }
    if (t->dtype != in->dtype)
        return emi_fail(EM_ERR_DTYPE, "%s: input '%s' is %s, the graph takes %s", fn, in->name,
                        em_dtype_name(t->dtype), em_dtype_name(in->dtype));
    if (!emi_same_shape(t->v.shape, t->v.rank, in->view.shape, in->view.rank)) {
        char a[128], b[128];
        return emi_fail(EM_ERR_SHAPE, "%s: input '%s' has shape %s, the graph takes %s", fn,
                        in->name, emi_shape_str(t->v.shape, t->v.rank, a, sizeof a),
                        emi_shape_str(in->view.shape, in->view.rank, b, sizeof b));
    }
    const uint32_t b = (uint32_t)(in->view.id - 1);
    const uint64_t bytes = e->g->bufs[b].bytes;
    if (e->kind[b] == XB_NONE) return EM_OK; /* the step never uses it */
    const bool whole = emi_view_is_contiguous(&t->v) && t->v.offset == 0 && t->st->bytes >= bytes;
    if (e->kind[b] == XB_INPUT && whole) {
        e->mem[b] = t->v.buf;
        return EM_OK;
    }
    if (e->kind[b] == XB_INPUT_COPY && whole && !ex_shared(e, inputs, i)) {
        e->mem[b] = t->v.buf;
        e->inplace[i] = true;
        return EM_OK;
    }
    if (e->kind[b] == XB_INPUT) {
        EMI_TRY(ex_alloc_raw(e, fn, bytes, &e->scratch[i]));
        e->mem[b] = e->scratch[i];
    }
    em_view dst = t->v;
    dst.buf = e->mem[b];
    dst.offset = 0;
    emi_contiguous_strides(dst.shape, dst.rank, dst.strides);
    if (emi_numel(dst.shape, dst.rank) == 0) return EM_OK;
    return e->ops->copy(e->ctx, &dst, &t->v);
}

/* The step: the run list, with the pooled views over inputs pointed at this run's buffers. */
static em_status ex_step(em_exec *e) {
    static const char fn[] = "em_exec_run";
    char msg[512];
    for (uint32_t p = 0; p < e->npatch; p++) e->pool[e->patch[p].view].buf = e->mem[e->patch[p].buf];
    const ex_op *run = e->run;
    for (uint32_t r = 0; r < e->nrun;) {
        const ex_op *op = &run[r];
        em_status s = op->fn(e, op, msg, sizeof msg);
        if (s == EM_OK) {
            r = op->ok_next; /* after a fused call: past its composition */
            continue;
        }
        if (op->alt && s == EM_ERR_UNSUPPORTED) { /* not this case: the composition runs */
            r++;
            continue;
        }
        if (!op->k) return s; /* a write: its message is set */
        if (op->fn != ex_op_resolved && op->fn != ex_op_checked) /* as rs_run_resolved's */
            snprintf(msg, sizeof msg, "%s: %s", rw_slots[op->k->slot].name, em_last_error());
        return emi_fail(s, "%s: step %llu: %s", fn, (unsigned long long)op->step, msg);
    }
    return EM_OK;
}

/* A new tensor on the exec's device with the values of named view nv. */
static em_status ex_copy_out(em_exec *e, const char *fn, const gr_named *nv, em_tensor **out) {
    const rw_view *w = &nv->view;
    const uint32_t b = (uint32_t)(w->id - 1);
    if (!e->mem[b])
        return emi_fail(EM_ERR_STATE, "%s: '%s' is in a buffer that is not alive", fn, nv->name);
    em_tensor *t = NULL;
    EMI_TRY(emi_empty(fn, e->dev, w->dtype, w->shape, w->rank, &t));
    t->dtype = nv->dtype;
    em_view src = {0};
    src.buf = e->mem[b];
    src.dtype = w->dtype;
    src.rank = w->rank;
    for (int d = 0; d < w->rank; d++) {
        src.shape[d] = w->shape[d];
        src.strides[d] = w->strides[d];
    }
    src.offset = w->offset;
    em_status s = EM_OK;
    if (emi_numel(src.shape, src.rank) > 0) s = e->ops->copy(e->ctx, &t->v, &src);
    if (s != EM_OK) {
        em_tensor_release(t);
        return s;
    }
    *out = t;
    return EM_OK;
}

em_status em_exec_run(em_exec *e, const em_tensor *const *inputs, int n_inputs,
                      em_tensor **outputs, int n_outputs) {
    static const char fn[] = "em_exec_run";
    if (!e) return emi_fail_null(fn, "e");
    const em_graph *g = e->g;
    if (n_inputs != g->ninputs)
        return emi_fail(EM_ERR_ARG, "%s: the graph takes %d inputs, got %d", fn, g->ninputs,
                        n_inputs);
    if (n_inputs > 0 && !inputs) return emi_fail_null(fn, "inputs");
    if (n_outputs != 0 && n_outputs != g->noutputs)
        return emi_fail(EM_ERR_ARG, "%s: the graph has %d outputs, got room for %d", fn,
                        g->noutputs, n_outputs);
    if (n_outputs > 0 && !outputs) return emi_fail_null(fn, "outputs");
    em_status s = EM_OK;
    for (int i = 0; i < g->ninputs && s == EM_OK; i++) s = ex_bind(e, i, inputs);
    if (s == EM_OK) s = ex_step(e);
    /* an input the step wrote into (a module's buffer updated in place, as batch norm's
     * running statistics) gets the values, as the step run eagerly would have left it */
    for (int i = 0; i < g->ninputs && s == EM_OK; i++) {
        const uint32_t b = (uint32_t)(g->inputs[i].view.id - 1);
        if (e->kind[b] != XB_INPUT_COPY || e->inplace[i]) continue;
        const em_tensor *t = inputs[i];
        em_view src = t->v;
        src.buf = e->mem[b];
        src.offset = 0;
        emi_contiguous_strides(src.shape, src.rank, src.strides);
        if (emi_numel(src.shape, src.rank) > 0) s = e->ops->copy(e->ctx, &t->v, &src);
    }
    int made = 0;
    for (; made < n_outputs && s == EM_OK; made++)
        s = ex_copy_out(e, fn, &g->outputs[made], &outputs[made]);
    if (s != EM_OK) {
        for (int j = 0; j < made; j++) {
            em_tensor_release(outputs[j]);
            outputs[j] = NULL;
        }
    }
    /* the inputs' buffers are the caller's again */
    for (int i = 0; i < g->ninputs; i++) {
        const uint32_t b = (uint32_t)(g->inputs[i].view.id - 1);
        if (e->kind[b] == XB_INPUT) e->mem[b] = NULL;
        if (e->kind[b] == XB_INPUT_COPY) e->mem[b] = e->home[b];
        e->inplace[i] = false;
        if (e->scratch[i]) e->ops->free(e->ctx, e->scratch[i]);
        e->scratch[i] = NULL;
    }
    return s;
}

em_status em_exec_state(em_exec *e, const char *name, em_tensor **out) {
    static const char fn[] = "em_exec_state";
    if (!e) return emi_fail_null(fn, "e");
    if (!name) return emi_fail_null(fn, "name");
    EMI_TRY(emi_check_out(fn, out));
    for (int i = 0; i < e->g->nstates; i++)
        if (strcmp(e->g->states[i].name, name) == 0)
            return ex_copy_out(e, fn, &e->g->states[i], out);
    return emi_fail(EM_ERR_ARG, "%s: the graph has no state named '%.140s'", fn, name);
}

em_status em_graph_run(const em_graph *g, em_device dev, const em_tensor *const *inputs,
                       int n_inputs, em_tensor **outputs, int n_outputs) {
    em_exec *e = NULL;
    EMI_TRY(em_graph_prepare(g, dev, &e));
    em_status s = em_exec_run(e, inputs, n_inputs, outputs, n_outputs);
    em_exec_release(e);
    return s;
}
