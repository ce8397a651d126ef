/* record.c — recording a graph: the open capture that the capture backend appends to, and the
 * public calls that open, shape and close it (include/ember/graph.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "graph/graph_internal.h"

static pthread_mutex_t gr_lock = PTHREAD_MUTEX_INITIALIZER;
static em_graph *gr_active;      /* the open capture, or NULL */
static uint64_t gr_next_gen = 1; /* capture numbers, never reused */
static size_t gr_in_use, gr_peak;

/* ---- growing the lists ---- */

static bool gr_grow(void **p, uint64_t *cap, uint64_t need, size_t elem) {
    if (need <= *cap) return true;
    uint64_t n = *cap ? *cap * 2 : 16;
    while (n < need) n *= 2;
    void *q = realloc(*p, (size_t)n * elem);
    if (!q) return false;
    *p = q;
    *cap = n;
    return true;
}

bool gr_push_step(em_graph *g, const gr_step *s) {
    if (g->nsteps >= GR_MAX_STEPS ||
        !gr_grow((void **)&g->steps, &g->capsteps, g->nsteps + 1, sizeof *g->steps))
        return false;
    g->steps[g->nsteps++] = *s;
    return true;
}

bool gr_push_buffer(em_graph *g, uint64_t bytes, uint32_t *index) {
    uint64_t cap = g->capbufs;
    if (g->nbufs >= GR_MAX_BUFFERS ||
        !gr_grow((void **)&g->bufs, &cap, (uint64_t)g->nbufs + 1, sizeof *g->bufs))
        return false;
    g->capbufs = (uint32_t)cap;
    gr_buffer *b = &g->bufs[g->nbufs];
    memset(b, 0, sizeof *b);
    b->bytes = bytes;
    b->input = -1;
    *index = g->nbufs++;
    return true;
}

bool gr_push_blob(em_graph *g, uint8_t *data, uint64_t len, uint32_t *index) {
    uint64_t cap = g->capblobs;
    if (!gr_grow((void **)&g->blobs, &cap, (uint64_t)g->nblobs + 1, sizeof *g->blobs))
        return false;
    g->capblobs = (uint32_t)cap;
    g->blobs[g->nblobs] = (gr_blob){data, len};
    *index = g->nblobs++;
    return true;
}

bool gr_push_named(gr_named **list, int *n, const char *name, em_dtype dt, const rw_view *v) {
    if (*n >= GR_MAX_IO) return false;
    gr_named *l = realloc(*list, (size_t)(*n + 1) * sizeof **list);
    if (!l) return false;
    *list = l;
    char *c = strdup(name);
    if (!c) return false;
    l[*n] = (gr_named){c, dt, *v};
    (*n)++;
    return true;
}

bool gr_name_ok(const char *name) {
    if (!name) return false;
    size_t n = strlen(name);
    if (n == 0 || n > GR_NAME_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == ':' || c == '/' || c == '-'))
            return false;
    }
    return true;
}

int64_t gr_view_end(const rw_view *v) {
    int64_t hi = v->offset, lo = v->offset, bytes;
    const int64_t es = (int64_t)em_dtype_size(v->dtype);
    for (int d = 0; d < v->rank; d++) {
        if (v->shape[d] == 0) /* empty: reaches nothing past its offset */
            return v->offset >= 0 && !__builtin_mul_overflow(v->offset, es, &bytes) ? bytes : -1;
        int64_t e;
        if (__builtin_mul_overflow(v->shape[d] - 1, v->strides[d], &e)) return -1;
        if (e < 0 ? __builtin_add_overflow(lo, e, &lo) : __builtin_add_overflow(hi, e, &hi))
            return -1;
    }
    if (lo < 0) return -1;
    if (__builtin_add_overflow(hi, 1, &hi) || __builtin_mul_overflow(hi, es, &bytes))
        return -1;
    return bytes;
}

em_graph *gr_new(void) {
    em_graph *g = calloc(1, sizeof *g);
    if (g) atomic_init(&g->refs, 1);
    return g;
}

static void gr_free_named(gr_named *l, int n) {
    for (int i = 0; i < n; i++) free(l[i].name);
    free(l);
}

void gr_release(em_graph *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    for (uint32_t i = 0; i < g->nblobs; i++) free(g->blobs[i].data);
    free(g->blobs);
    free(g->bufs);
    free(g->steps);
    gr_free_named(g->inputs, g->ninputs);
    gr_free_named(g->outputs, g->noutputs);
    gr_free_named(g->states, g->nstates);
    free(g);
}

/* ---- what the capture backend calls ---- */

/* Marks the open graph failed (the first failure is kept) and returns s. */
static em_status gr_fail_locked(em_graph *g, em_status s, const char *what) {
    if (g->failed == EM_OK) {
        g->failed = s;
        snprintf(g->why, sizeof g->why, "em_graph_end: recording failed: %s", what);
    }
    return em_backend_set_error(s, "capture: %s", what);
}

static em_status gr_closed(void) {
    return em_backend_set_error(EM_ERR_STATE,
                                "capture: no capture is open: em_graph_begin starts one, and a "
                                "capture tensor lives in the graph it was made in");
}

em_status gr_rec_alloc(size_t bytes, gr_cbuf **out) {
    pthread_mutex_lock(&gr_lock);
    em_graph *g = gr_active;
    em_status s = EM_OK;
    uint32_t ix = 0;
    gr_cbuf *b = NULL;
    if (!g) {
        s = gr_closed();
    } else if (!(b = malloc(sizeof *b)) || !gr_push_buffer(g, bytes, &ix)) {
        s = gr_fail_locked(g, EM_ERR_NOMEM, "out of memory recording a buffer");
    } else {
        g->bufs[ix].setup = !g->in_step;
        gr_step st;
        memset(&st, 0, sizeof st);
        st.type = GR_ALLOC;
        st.buf = ix;
        if (!gr_push_step(g, &st)) {
            g->nbufs--;
            s = gr_fail_locked(g, EM_ERR_NOMEM, "out of memory recording a buffer");
        } else {
            *b = (gr_cbuf){g->gen, (uint64_t)ix + 1, bytes};
            gr_in_use += bytes;
            if (gr_in_use > gr_peak) gr_peak = gr_in_use;
            *out = b;
        }
    }
    if (s != EM_OK) free(b);
    pthread_mutex_unlock(&gr_lock);
    return s;
}

void gr_rec_free(gr_cbuf *b) {
    if (!b) return;
    pthread_mutex_lock(&gr_lock);
    em_graph *g = gr_active;
    if (g && b->gen == g->gen) {
        gr_step st;
        memset(&st, 0, sizeof st);
        st.type = GR_FREE;
        st.buf = (uint32_t)(b->id - 1);
        if (gr_push_step(g, &st)) g->bufs[st.buf].freed = true;
        else gr_fail_locked(g, EM_ERR_NOMEM, "out of memory recording a free");
        gr_in_use -= b->bytes;
    }
    pthread_mutex_unlock(&gr_lock);
    free(b);
}

/* The open graph when b belongs to it, else NULL with the status set (under gr_lock). */
static em_graph *gr_of(const gr_cbuf *b, em_status *s) {
    em_graph *g = gr_active;
    if (!g || b->gen != g->gen) {
        *s = g ? em_backend_set_error(EM_ERR_STATE,
                                      "capture: a tensor of another capture (or of one that "
                                      "ended) cannot be used in this one")
               : gr_closed();
        return NULL;
    }
    return g;
}

em_status gr_rec_write(gr_cbuf *b, size_t offset, const void *src, size_t bytes) {
    pthread_mutex_lock(&gr_lock);
    em_status s = EM_OK;
    em_graph *g = gr_of(b, &s);
    if (g) {
        uint8_t *copy = malloc(bytes ? bytes : 1);
        uint32_t blob = 0;
        if (copy && bytes) memcpy(copy, src, bytes);
        if (!copy || !gr_push_blob(g, copy, bytes, &blob)) {
            free(copy);
            s = gr_fail_locked(g, EM_ERR_NOMEM, "out of memory recording written data");
        } else {
            gr_step st;
            memset(&st, 0, sizeof st);
            st.type = GR_WRITE;
            st.buf = (uint32_t)(b->id - 1);
            st.blob = blob;
            st.offset = offset;
            if (!gr_push_step(g, &st))
                s = gr_fail_locked(g, EM_ERR_NOMEM, "out of memory recording written data");
            else if (g->in_step)
                g->bufs[st.buf].written = true;
        }
    }
    pthread_mutex_unlock(&gr_lock);
    return s;
}

unsigned gr_outputs_of(rw_slot slot) {
    switch (slot) {
    case RW_K_SORT: case RW_K_MAX_POOL2D: case RW_K_CUMULATIVE: case RW_K_RMS_NORM: return 0x3u;
    case RW_K_BATCH_NORM: return 0xC7u; /* out, the saved statistics, the running ones */
    case RW_K_BATCH_NORM_BACKWARD: case RW_K_GROUP_NORM: return 0x7u;
    case RW_K_ADAM_STEP: return 0x17u; /* param, the moments, the step count */
    default: return 0x1u;
    }
}

/* Appends a call (GR_KERNEL or GR_ALT) to the open graph. */
static em_status gr_rec_call(uint8_t type, rw_slot slot, int sub,
                             const em_view *const views[RW_MAX_VIEWS], const int64_t *ints,
                             const double *doubles) {
    const rw_slot_info *si = &rw_slots[slot];
    gr_step st;
    memset(&st, 0, sizeof st);
    st.type = type;
    st.k.slot = slot;
    st.k.sub = sub;
    for (int i = 0; i < si->nints; i++) st.k.ints[i] = ints[i];
    for (int i = 0; i < si->ndoubles; i++) st.k.doubles[i] = doubles[i];
    pthread_mutex_lock(&gr_lock);
    em_status s = EM_OK;
    em_graph *g = gr_active;
    if (!g) s = gr_closed();
    else if (type == GR_ALT && g->in_alt)
        s = gr_fail_locked(g, EM_ERR_STATE, "a fused call inside another's composition");
    for (int i = 0; i < si->nviews && s == EM_OK; i++) {
        if (!views[i]) continue;
        const gr_cbuf *b = views[i]->buf;
        if (!gr_of(b, &s)) break;
        st.k.mask |= (uint8_t)(1u << i);
        rw_view_from(&st.k.views[i], views[i], b->id);
    }
    if (s == EM_OK) {
        if (!gr_push_step(g, &st)) {
            s = gr_fail_locked(g, EM_ERR_NOMEM, "out of memory recording a kernel call");
        } else if (type == GR_ALT) {
            g->in_alt = true;
        }
        if (s == EM_OK && g->in_step) {
            const unsigned outs = gr_outputs_of(slot);
            for (int i = 0; i < si->nviews; i++)
                if ((outs >> i & 1u) && (st.k.mask >> i & 1u))
                    g->bufs[st.k.views[i].id - 1].written = true;
        }
    }
    pthread_mutex_unlock(&gr_lock);
    return s;
}

em_status gr_rec_kernel(rw_slot slot, int sub, const em_view *const views[RW_MAX_VIEWS],
                        const int64_t *ints, const double *doubles) {
    return gr_rec_call(GR_KERNEL, slot, sub, views, ints, doubles);
}

em_status gr_rec_alt_begin(rw_slot slot, int sub, const em_view *const views[RW_MAX_VIEWS],
                           const int64_t *ints, const double *doubles) {
    return gr_rec_call(GR_ALT, slot, sub, views, ints, doubles);
}

em_status gr_rec_adam_step(int sub, const em_view *const views[RW_MAX_VIEWS],
                           const double *doubles) {
    static const char *const what[RW_MAX_VIEWS] = {NULL, "exp_avg", "exp_avg_sq", NULL,
                                                   "step count"};
    pthread_mutex_lock(&gr_lock);
    em_status s = EM_OK;
    const em_graph *g = gr_active;
    for (int i = 0; i < RW_MAX_VIEWS && s == EM_OK; i++) {
        if (!what[i]) continue;
        const gr_cbuf *b = views[i]->buf;
        if (!gr_of(b, &s)) break;
        const gr_buffer *gb = &g->bufs[b->id - 1];
        if (!gb->setup && gb->input < 0)
            s = em_backend_set_error(
                EM_ERR_STATE,
                "capture: Adam's %s was made in the step, where each run would make it anew: "
                "make the optimizer (and load its state) before the graph's first input, so "
                "that its state is the graph's, or make the state an input", what[i]);
    }
    pthread_mutex_unlock(&gr_lock);
    if (s != EM_OK) return s;
    return gr_rec_call(GR_KERNEL, RW_K_ADAM_STEP, sub, views, NULL, doubles);
}

void gr_rec_alt_end(void) {
    pthread_mutex_lock(&gr_lock);
    em_graph *g = gr_active;
    if (g && g->in_alt) {
        gr_step st;
        memset(&st, 0, sizeof st);
        st.type = GR_ALT_END;
        if (!gr_push_step(g, &st)) gr_fail_locked(g, EM_ERR_NOMEM, "out of memory recording a call");
        g->in_alt = false;
    }
    pthread_mutex_unlock(&gr_lock);
}

void gr_rec_memory(size_t *in_use, size_t *peak) {
    pthread_mutex_lock(&gr_lock);
    *in_use = gr_active ? gr_in_use : 0;
    *peak = gr_active ? gr_peak : 0;
    pthread_mutex_unlock(&gr_lock);
}

/* ---- the public calls ---- */

em_status em_graph_begin(em_graph **out) {
    static const char fn[] = "em_graph_begin";
    EMI_TRY(emi_check_out(fn, out));
    em_graph *g = gr_new();
    if (!g) return emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
    pthread_mutex_lock(&gr_lock);
    em_status s = EM_OK;
    if (gr_active) {
        s = emi_fail(EM_ERR_STATE, "%s: another capture is open (one at a time: end it first)",
                     fn);
    } else {
        g->open = true;
        g->gen = gr_next_gen++;
        gr_active = g;
        gr_in_use = gr_peak = 0;
    }
    pthread_mutex_unlock(&gr_lock);
    if (s != EM_OK) {
        gr_release(g);
        return s;
    }
    *out = g;
    return EM_OK;
}

/* Checks that g is the open capture (under gr_lock). */
static em_status gr_check_open(const char *fn, const em_graph *g) {
    if (!g) return emi_fail_null(fn, "g");
    if (!g->open || gr_active != g)
        return emi_fail(EM_ERR_STATE, "%s: the graph is not recording (em_graph_end closed it, "
                                      "or it was loaded)", fn);
    return EM_OK;
}

static bool gr_has_name(const gr_named *l, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(l[i].name, name) == 0) return true;
    return false;
}

static em_status gr_check_name(const char *fn, const char *name, const gr_named *l, int n,
                               const char *what) {
    if (!name) return emi_fail_null(fn, "name");
    if (!gr_name_ok(name))
        return emi_fail(EM_ERR_ARG, "%s: name '%.140s' is not 1..%d bytes of [A-Za-z0-9_.:/-]",
                        fn, name, GR_NAME_MAX);
    if (gr_has_name(l, n, name))
        return emi_fail(EM_ERR_ARG, "%s: the graph already has %s named '%s'", fn, what, name);
    return EM_OK;
}

em_status em_graph_input(em_graph *g, const char *name, em_dtype dt, const int64_t *shape,
                         int rank, em_device dev, em_tensor **out) {
    static const char fn[] = "em_graph_input";
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_device_value(fn, dev));
    if (dev.backend != EM_BACKEND_CAPTURE) {
        char nm[64];
        em_device_name(dev, nm, sizeof nm);
        return emi_fail(EM_ERR_DEVICE, "%s: inputs live on the capture device, not %s", fn, nm);
    }
    if ((unsigned)dt >= EM_DTYPE_COUNT)
        return emi_fail(EM_ERR_DTYPE, "%s: invalid dtype %d", fn, (int)dt);
    if (emi_kind(dt) == EM_KIND_QUANTIZED)
        return emi_fail(EM_ERR_DTYPE, "%s: quantized inputs (%s) are not supported", fn,
                        em_dtype_name(dt));
    int64_t numel = 0;
    EMI_TRY(emi_check_shape(fn, shape, rank, &numel));
    pthread_mutex_lock(&gr_lock);
    em_status s = gr_check_open(fn, g);
    if (s == EM_OK) s = gr_check_name(fn, name, g->inputs, g->ninputs, "an input");
    if (s == EM_OK && !g->in_step) {
        g->in_step = true; /* what follows is the step */
        g->setup_end = g->nsteps;
    }
    pthread_mutex_unlock(&gr_lock);
    EMI_TRY(s);
    em_tensor *t = NULL;
    EMI_TRY(emi_empty(fn, dev, dt, shape, rank, &t));
    const gr_cbuf *b = t->st->buf;
    rw_view v;
    rw_view_from(&v, &t->v, b->id);
    pthread_mutex_lock(&gr_lock);
    s = gr_check_open(fn, g);
    if (s == EM_OK && !gr_push_named(&g->inputs, &g->ninputs, name, dt, &v))
        s = emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
    if (s == EM_OK) g->bufs[b->id - 1].input = g->ninputs - 1;
    pthread_mutex_unlock(&gr_lock);
    if (s != EM_OK) {
        em_tensor_release(t);
        return s;
    }
    *out = t;
    return EM_OK;
}

/* A capture tensor of the open graph g (under gr_lock): its buffer's view. */
static em_status gr_tensor_view(const char *fn, const em_graph *g, const em_tensor *t,
                                rw_view *v) {
    EMI_TRY(emi_check_tensor(fn, "t", t));
    if (t->dev.backend != EM_BACKEND_CAPTURE) {
        char nm[64];
        em_device_name(t->dev, nm, sizeof nm);
        return emi_fail(EM_ERR_DEVICE, "%s: t is on %s, not on the capture device", fn, nm);
    }
    const gr_cbuf *b = t->st->buf;
    if (b->gen != g->gen)
        return emi_fail(EM_ERR_STATE, "%s: t was recorded in another capture", fn);
    if (emi_kind(t->dtype) == EM_KIND_QUANTIZED)
        return emi_fail(EM_ERR_DTYPE, "%s: quantized tensors (%s) are not supported", fn,
                        em_dtype_name(t->dtype));
    rw_view_from(v, &t->v, b->id);
    if (emi_numel(t->v.shape, t->v.rank) == 0) {
        /* no element: where its offset points does not matter (a flip of an empty tensor
         * points before its buffer) */
        v->offset = 0;
        emi_contiguous_strides(v->shape, v->rank, v->strides);
    }
    return EM_OK;
}

em_status em_graph_output(em_graph *g, const char *name, const em_tensor *t) {
    static const char fn[] = "em_graph_output";
    pthread_mutex_lock(&gr_lock);
    rw_view v;
    em_status s = gr_check_open(fn, g);
    if (s == EM_OK) s = gr_check_name(fn, name, g->outputs, g->noutputs, "an output");
    if (s == EM_OK) s = gr_tensor_view(fn, g, t, &v);
    if (s == EM_OK && !gr_push_named(&g->outputs, &g->noutputs, name, t->dtype, &v))
        s = emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
    pthread_mutex_unlock(&gr_lock);
    return s;
}

em_status em_graph_name(em_graph *g, const char *name, const em_tensor *t) {
    static const char fn[] = "em_graph_name";
    pthread_mutex_lock(&gr_lock);
    rw_view v;
    em_status s = gr_check_open(fn, g);
    if (s == EM_OK) s = gr_check_name(fn, name, g->states, g->nstates, "a state");
    if (s == EM_OK) s = gr_tensor_view(fn, g, t, &v);
    if (s == EM_OK && !g->bufs[v.id - 1].setup)
        s = emi_fail(EM_ERR_ARG, "%s: '%s' was made in the step, not in the setup: only the "
                                 "setup's tensors are state", fn, name);
    if (s == EM_OK && !gr_push_named(&g->states, &g->nstates, name, t->dtype, &v))
        s = emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
    pthread_mutex_unlock(&gr_lock);
    return s;
}

em_status em_graph_end(em_graph *g) {
    static const char fn[] = "em_graph_end";
    pthread_mutex_lock(&gr_lock);
    em_status s = gr_check_open(fn, g);
    if (s == EM_OK) {
        g->open = false;
        gr_active = NULL;
        if (!g->in_step) g->setup_end = g->nsteps; /* no inputs: everything is setup */
        if (g->failed != EM_OK) s = emi_fail(g->failed, "%s", g->why);
    }
    pthread_mutex_unlock(&gr_lock);
    return s;
}

void em_graph_release(em_graph *g) {
    if (!g) return;
    pthread_mutex_lock(&gr_lock);
    if (gr_active == g) {
        gr_active = NULL;
        g->open = false;
    }
    pthread_mutex_unlock(&gr_lock);
    gr_release(g);
}

/* ---- looking at it ---- */

int em_graph_input_count(const em_graph *g) { return g ? g->ninputs : 0; }
int em_graph_output_count(const em_graph *g) { return g ? g->noutputs : 0; }
int em_graph_state_count(const em_graph *g) { return g ? g->nstates : 0; }

int64_t em_graph_kernel_count(const em_graph *g) {
    int64_t n = 0;
    for (uint64_t i = 0; g && i < g->nsteps; i++) n += g->steps[i].type == GR_KERNEL;
    return n;
}

static em_status gr_info(const char *fn, const em_graph *g, const gr_named *l, int n, int i,
                         const char **name, em_dtype *dt, int64_t *shape, int *rank) {
    if (!g) return emi_fail_null(fn, "g");
    if (i < 0 || i >= n) return emi_fail(EM_ERR_ARG, "%s: index %d out of range [0, %d)", fn, i, n);
    if (name) *name = l[i].name;
    if (dt) *dt = l[i].dtype;
    if (shape)
        for (int d = 0; d < l[i].view.rank; d++) shape[d] = l[i].view.shape[d];
    if (rank) *rank = l[i].view.rank;
    return EM_OK;
}

em_status em_graph_input_info(const em_graph *g, int i, const char **name, em_dtype *dt,
                              int64_t *shape, int *rank) {
    return gr_info("em_graph_input_info", g, g ? g->inputs : NULL, g ? g->ninputs : 0, i, name,
                   dt, shape, rank);
}

em_status em_graph_output_info(const em_graph *g, int i, const char **name, em_dtype *dt,
                               int64_t *shape, int *rank) {
    return gr_info("em_graph_output_info", g, g ? g->outputs : NULL, g ? g->noutputs : 0, i,
                   name, dt, shape, rank);
}

em_status em_graph_state_info(const em_graph *g, int i, const char **name, em_dtype *dt,
                              int64_t *shape, int *rank) {
    return gr_info("em_graph_state_info", g, g ? g->states : NULL, g ? g->nstates : 0, i, name,
                   dt, shape, rank);
}
