/* exec.c — replaying a graph on a device: em_graph_prepare runs the setup once and keeps the
 * state; em_exec_run binds the inputs, runs the step's calls through rs_exec_kernel (each
 * checked as hostile input: the graph may come from a file) and copies the outputs out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "graph/graph_internal.h"
#include "wire/exec.h"

struct em_exec {
    em_graph *g;
    em_device dev;
    const em_backend_ops *ops;
    void *ctx;
    rs_host host;
    void **mem;       /* per buffer: its memory on the device, or NULL */
    uint8_t *own;     /* per buffer: the exec allocated mem (else: an input's own buffer) */
    uint8_t *persist; /* per buffer: state (made by the setup, alive after it) */
};

static bool ex_lookup(void *conn, uint64_t id, void **buf, size_t *bytes) {
    const em_exec *e = conn;
    if (id == 0 || id > e->g->nbufs || !e->mem[id - 1]) return false;
    *buf = e->mem[id - 1];
    *bytes = (size_t)e->g->bufs[id - 1].bytes;
    return true;
}

static void ex_drop(em_exec *e, uint32_t b) {
    if (e->mem[b] && e->own[b]) e->ops->free(e->ctx, e->mem[b]);
    e->mem[b] = NULL;
    e->own[b] = 0;
}

static em_status ex_alloc(em_exec *e, uint32_t b) {
    ex_drop(e, b);
    const uint64_t n = e->g->bufs[b].bytes;
    em_status s = e->ops->alloc(e->ctx, n ? (size_t)n : 1, &e->mem[b]);
    if (s != EM_OK) {
        e->mem[b] = NULL;
        return s == EM_ERR_NOMEM ? emi_fail(s, "em_exec_run: out of memory allocating %llu "
                                               "bytes on %s", (unsigned long long)n,
                                            e->ops->name)
                                 : s;
    }
    e->own[b] = 1;
    return EM_OK;
}

/* Runs steps [from, to). */
static em_status ex_steps(em_exec *e, uint64_t from, uint64_t to) {
    const em_graph *g = e->g;
    char msg[512];
    for (uint64_t i = from; i < to; i++) {
        const gr_step *st = &g->steps[i];
        em_status s = EM_OK;
        switch (st->type) {
        case GR_ALLOC:
            if (g->bufs[st->buf].input < 0 && !e->persist[st->buf]) s = ex_alloc(e, st->buf);
            break;
        case GR_FREE:
            if (!e->persist[st->buf]) ex_drop(e, st->buf);
            break;
        case GR_WRITE: {
            const gr_blob *bl = &g->blobs[st->blob];
            if (!e->mem[st->buf] || st->offset > g->bufs[st->buf].bytes ||
                bl->len > g->bufs[st->buf].bytes - st->offset)
                return emi_fail(EM_ERR_STATE, "em_exec_run: step %llu writes outside buffer %u",
                                (unsigned long long)i, st->buf);
            if (bl->len)
                s = e->ops->write(e->ctx, e->mem[st->buf], (size_t)st->offset, bl->data,
                                  (size_t)bl->len);
            break;
        }
        case GR_KERNEL:
            s = rs_exec_kernel(&e->host, ex_lookup, e, &st->k, msg, sizeof msg);
            if (s != EM_OK)
                return emi_fail(s, "em_exec_run: step %llu: %s", (unsigned long long)i, msg);
            break;
        default:
            return emi_fail(EM_ERR_STATE, "em_exec_run: step %llu has an unknown type %d",
                            (unsigned long long)i, st->type);
        }
        if (s != EM_OK) return s;
    }
    return EM_OK;
}

/* Frees what a run made (every buffer but the state). */
static void ex_clear(em_exec *e) {
    for (uint32_t b = 0; b < e->g->nbufs; b++)
        if (!e->persist[b]) ex_drop(e, b);
}

void em_exec_release(em_exec *e) {
    if (!e) return;
    if (e->mem) {
        for (uint32_t b = 0; b < e->g->nbufs; b++) ex_drop(e, b);
    }
    free(e->mem);
    free(e->own);
    free(e->persist);
    gr_release(e->g);
    free(e);
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
    size_t n = g->nbufs ? g->nbufs : 1;
    e->mem = calloc(n, sizeof *e->mem);
    e->own = calloc(n, 1);
    e->persist = calloc(n, 1);
    if (!e->mem || !e->own || !e->persist) {
        em_exec_release(e);
        return emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
    }
    em_status s = emi_backend(dev, &e->ops, &e->ctx);
    if (s != EM_OK) {
        em_exec_release(e);
        return emi_fail_prefixed(s, fn);
    }
    e->host = (rs_host){e->ops, e->ctx, false, NULL};
    s = ex_steps(e, 0, g->setup_end);
    if (s == EM_OK && e->ops->sync) s = e->ops->sync(e->ctx);
    if (s != EM_OK) {
        em_exec_release(e);
        return s;
    }
    /* what the setup left alive is the state; the rest of its buffers go */
    for (uint32_t b = 0; b < g->nbufs; b++)
        if (e->mem[b] && g->bufs[b].input < 0) e->persist[b] = 1;
    *out = e;
    return EM_OK;
}

/* Binds input i to t: its own buffer when the graph reads it whole and never writes it, else
 * a copy. */
static em_status ex_bind(em_exec *e, int i, const em_tensor *t) {
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
    ex_drop(e, b);
    if (emi_view_is_contiguous(&t->v) && t->v.offset == 0 && !e->g->bufs[b].written &&
        t->st->bytes >= e->g->bufs[b].bytes) {
        e->mem[b] = t->v.buf;
        e->own[b] = 0;
        return EM_OK;
    }
    EMI_TRY(ex_alloc(e, b));
    em_view dst = t->v;
    dst.buf = e->mem[b];
    dst.offset = 0;
    emi_contiguous_strides(dst.shape, dst.rank, dst.strides);
    if (emi_numel(dst.shape, dst.rank) == 0) return EM_OK;
    return e->ops->copy(e->ctx, &dst, &t->v);
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
    for (int i = 0; i < g->ninputs && s == EM_OK; i++) s = ex_bind(e, i, inputs[i]);
    if (s == EM_OK) s = ex_steps(e, g->setup_end, g->nsteps);
    int made = 0;
    for (; made < n_outputs && s == EM_OK; made++)
        s = ex_copy_out(e, fn, &g->outputs[made], &outputs[made]);
    if (s != EM_OK) {
        for (int j = 0; j < made; j++) {
            em_tensor_release(outputs[j]);
            outputs[j] = NULL;
        }
    }
    ex_clear(e);
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
