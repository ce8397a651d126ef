/*
 * file.c — a graph's file (docs/graph-format.md): one safetensors file whose tensors are the
 * graph's blobs (the data written from the host: parameters' initial values, constants) and
 * whose __metadata__ holds the graph as JSON under "ember.graph", its format version under
 * "ember.graph.version".
 *
 * Saving names a blob after the named state it fills whole (its dtype and shape), so that any
 * safetensors reader sees the parameters by name; other blobs are "blob.<i>", u8 [len].
 *
 * Loading treats the file as hostile. The safetensors layer (io/safetensors.c) checks the
 * container; here every field of the JSON is checked for what the replay (exec.c) and the
 * views of a graph rely on: counts within the limits of graph_internal.h, buffer indices,
 * each buffer allocated once and freed at most once after that, every buffer a step touches
 * alive there (so that exec.c's plan, which gives a freed buffer's place to the next, never
 * aliases two live buffers), alt steps closed by their alt_end in the same section and never
 * nested, blobs that exist and fit where they are written, kernel calls of the wire's shape
 * (built into an rw_kernel, then encoded and decoded by the remote protocol's codec, so that
 * its structural checks hold), named tensors inside their buffers, inputs that are whole
 * buffers. The buffers' flags (setup, freed, written) are recomputed from the steps, not
 * taken from the file (written decides whether a run may use an input's own memory). What a
 * kernel does with its views (bounds, dtypes, shapes, index values) is checked again when the
 * graph is prepared and run, by rs_resolve_kernel / rs_exec_kernel. Any failure is EM_ERR_IO
 * "em_graph_load: <path or buffer>: <reason>".
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/internal.h"
#include "graph/graph_internal.h"
#include "io/safetensors_internal.h"

/** The most bytes a buffer (and a named tensor's elements) may have in a file. */
#define GF_MAX_BYTES ((uint64_t)1 << 46)
/** Integers a JSON number holds exactly (larger ones are written as strings). */
#define GF_MAX_EXACT ((int64_t)1 << 53)
/** The canonical quiet NaN, written "nan" (other NaNs are written by their bits). */
#define GF_NAN_BITS 0x7ff8000000000000ull

static const char gf_meta_graph[] = "ember.graph";
static const char gf_meta_version[] = "ember.graph.version";

static bool gf_little_endian(void) {
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* A view whose elements lie one after another from its offset (dims of size 1 may have any
 * stride; an empty view is contiguous), as emi_view_is_contiguous. */
static bool gf_contiguous(const rw_view *v) {
    int64_t s = 1;
    for (int d = v->rank - 1; d >= 0; d--) {
        if (v->shape[d] == 0) return true;
        if (v->shape[d] != 1 && v->strides[d] != s) return false;
        s *= v->shape[d];
    }
    return true;
}

/* numel x dtype size of a view; false when it overflows or exceeds GF_MAX_BYTES. */
static bool gf_view_bytes(const rw_view *v, uint64_t *out) {
    uint64_t n = em_dtype_size(v->dtype);
    for (int d = 0; d < v->rank; d++)
        if (v->shape[d] == 0) n = 0;
    for (int d = 0; d < v->rank && n > 0; d++) {
        if (__builtin_mul_overflow(n, (uint64_t)v->shape[d], &n) || n > GF_MAX_BYTES)
            return false;
    }
    if (n > GF_MAX_BYTES) return false;
    *out = n;
    return true;
}

/* ==== saving ================================================================================ */

/* JSON numbers are written by hand (cJSON_CreateRaw): cJSON prints a double with 15
 * significant digits when that is close enough, which loses integers above 2^50 and the
 * last bits of doubles. */

/* An integer: a number when JSON holds it exactly, else a decimal string. */
static cJSON *gf_int(int64_t v) {
    char b[32];
    snprintf(b, sizeof b, "%lld", (long long)v);
    return (v >= -GF_MAX_EXACT && v <= GF_MAX_EXACT) ? cJSON_CreateRaw(b) : cJSON_CreateString(b);
}

/* A double that reads back to the same bits: "%.17g" for a finite value; "inf", "-inf",
 * "nan" (the canonical quiet NaN) or "0x" and its 16 hex digits of bits (any other NaN) as a
 * string. */
static cJSON *gf_double(double v) {
    char b[48];
    if (isfinite(v)) {
        snprintf(b, sizeof b, "%.17g", v);
        for (char *p = b; *p; p++) /* a locale's decimal comma */
            if (!((*p >= '0' && *p <= '9') || *p == '-' || *p == '+' || *p == 'e' || *p == 'E'))
                *p = '.';
        return cJSON_CreateRaw(b);
    }
    if (isinf(v)) return cJSON_CreateString(v > 0 ? "inf" : "-inf");
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    if (u == GF_NAN_BITS) return cJSON_CreateString("nan");
    snprintf(b, sizeof b, "0x%016llx", (unsigned long long)u);
    return cJSON_CreateString(b);
}

/* The JSON being built; ok turns false (and stays) when an allocation fails. */
typedef struct gf_out {
    bool ok;
} gf_out;

/* Adds item to parent (an object when key is set, else an array); returns item. */
static cJSON *gf_add(gf_out *o, cJSON *parent, const char *key, cJSON *item) {
    if (!item || !parent) {
        o->ok = false;
        cJSON_Delete(item);
        return NULL;
    }
    bool added = key ? cJSON_AddItemToObject(parent, key, item) : cJSON_AddItemToArray(parent, item);
    if (!added) {
        o->ok = false;
        cJSON_Delete(item);
        return NULL;
    }
    return item;
}

/* [buffer, dtype, [shape], [strides], offset] */
static cJSON *gf_view_json(gf_out *o, const rw_view *v) {
    cJSON *a = cJSON_CreateArray();
    if (!a) {
        o->ok = false;
        return NULL;
    }
    gf_add(o, a, NULL, gf_int((int64_t)v->id - 1));
    gf_add(o, a, NULL, cJSON_CreateString(em_dtype_name(v->dtype)));
    cJSON *sh = gf_add(o, a, NULL, cJSON_CreateArray());
    cJSON *st = gf_add(o, a, NULL, cJSON_CreateArray());
    for (int d = 0; d < v->rank && sh && st; d++) {
        gf_add(o, sh, NULL, gf_int(v->shape[d]));
        gf_add(o, st, NULL, gf_int(v->strides[d]));
    }
    gf_add(o, a, NULL, gf_int(v->offset));
    return a;
}

static cJSON *gf_step_json(gf_out *o, const gr_step *s, char *const *blob_names) {
    cJSON *j = cJSON_CreateObject();
    if (!j) {
        o->ok = false;
        return NULL;
    }
    switch (s->type) {
    case GR_ALLOC:
    case GR_FREE:
        gf_add(o, j, "type", cJSON_CreateString(s->type == GR_ALLOC ? "alloc" : "free"));
        gf_add(o, j, "buf", gf_int(s->buf));
        break;
    case GR_WRITE:
        gf_add(o, j, "type", cJSON_CreateString("write"));
        gf_add(o, j, "buf", gf_int(s->buf));
        gf_add(o, j, "offset", gf_int((int64_t)s->offset));
        gf_add(o, j, "blob", cJSON_CreateString(blob_names[s->blob]));
        break;
    case GR_ALT_END:
        gf_add(o, j, "type", cJSON_CreateString("alt_end"));
        break;
    case GR_KERNEL:
    case GR_ALT: {
        const rw_slot_info *si = &rw_slots[s->k.slot];
        gf_add(o, j, "type", cJSON_CreateString(s->type == GR_ALT ? "alt" : "kernel"));
        gf_add(o, j, "slot", cJSON_CreateString(si->name));
        if (si->nsub) gf_add(o, j, "sub", gf_int(s->k.sub));
        cJSON *vs = gf_add(o, j, "views", cJSON_CreateArray());
        for (int i = 0; i < si->nviews && vs; i++)
            gf_add(o, vs, NULL, (s->k.mask >> i & 1u) ? gf_view_json(o, &s->k.views[i])
                                                      : cJSON_CreateNull());
        if (si->nints) {
            cJSON *a = gf_add(o, j, "ints", cJSON_CreateArray());
            for (int i = 0; i < si->nints && a; i++) gf_add(o, a, NULL, gf_int(s->k.ints[i]));
        }
        if (si->ndoubles) {
            cJSON *a = gf_add(o, j, "doubles", cJSON_CreateArray());
            for (int i = 0; i < si->ndoubles && a; i++)
                gf_add(o, a, NULL, gf_double(s->k.doubles[i]));
        }
        break;
    }
    default: /* a graph in memory has no other step */
        break;
    }
    return j;
}

static cJSON *gf_named_json(gf_out *o, const gr_named *l, int n) {
    cJSON *a = cJSON_CreateArray();
    if (!a) o->ok = false;
    for (int i = 0; i < n && a; i++) {
        cJSON *e = gf_add(o, a, NULL, cJSON_CreateObject());
        if (!e) break;
        gf_add(o, e, "name", cJSON_CreateString(l[i].name));
        gf_add(o, e, "dtype", cJSON_CreateString(em_dtype_name(l[i].dtype)));
        gf_add(o, e, "view", gf_view_json(o, &l[i].view));
    }
    return a;
}

/* The graph's JSON (docs/graph-format.md), or NULL when out of memory. */
static char *gf_graph_json(const em_graph *g, char *const *blob_names) {
    gf_out o = {true};
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    gf_add(&o, root, "version", gf_int(EM_GRAPH_FORMAT_VERSION));
    cJSON *bufs = gf_add(&o, root, "buffers", cJSON_CreateArray());
    for (uint32_t b = 0; b < g->nbufs && bufs; b++) {
        cJSON *e = gf_add(&o, bufs, NULL, cJSON_CreateObject());
        if (!e) break;
        gf_add(&o, e, "bytes", gf_int((int64_t)g->bufs[b].bytes));
        gf_add(&o, e, "setup", cJSON_CreateBool(g->bufs[b].setup));
        if (g->bufs[b].input >= 0) gf_add(&o, e, "input", gf_int(g->bufs[b].input));
    }
    cJSON *setup = gf_add(&o, root, "setup", cJSON_CreateArray());
    cJSON *step = gf_add(&o, root, "step", cJSON_CreateArray());
    for (uint64_t i = 0; i < g->nsteps && o.ok; i++)
        gf_add(&o, i < g->setup_end ? setup : step, NULL,
               gf_step_json(&o, &g->steps[i], blob_names));
    gf_add(&o, root, "inputs", gf_named_json(&o, g->inputs, g->ninputs));
    gf_add(&o, root, "outputs", gf_named_json(&o, g->outputs, g->noutputs));
    gf_add(&o, root, "states", gf_named_json(&o, g->states, g->nstates));
    char *text = o.ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return text;
}

/* The name a state gives its buffer's blob when it views the whole of it (see the top):
 * true with *blob set when state st qualifies. */
static bool gf_state_blob(const em_graph *g, const gr_named *st, const uint32_t *writes,
                          const uint64_t *last_write, uint32_t *blob) {
    const rw_view *v = &st->view;
    const uint32_t b = (uint32_t)(v->id - 1);
    if (writes[b] != 1 || strcmp(st->name, "__metadata__") == 0 ||
        strncmp(st->name, "blob.", 5) == 0)
        return false;
    const gr_step *w = &g->steps[last_write[b]];
    uint64_t bytes = 0;
    if (w->offset != 0 || g->blobs[w->blob].len != g->bufs[b].bytes || v->offset != 0 ||
        v->dtype != st->dtype || !gf_contiguous(v) || !gf_view_bytes(v, &bytes) ||
        bytes != g->bufs[b].bytes || bytes == 0)
        return false;
    *blob = w->blob;
    return true;
}

em_status em_graph_save(const em_graph *g, const char *path) {
    static const char fn[] = "em_graph_save";
    if (!g) return emi_fail_null(fn, "g");
    if (!path) return emi_fail_null(fn, "path");
    if (g->open)
        return emi_fail(EM_ERR_STATE, "%s: the graph is still recording (em_graph_end first)",
                        fn);
    if (g->failed != EM_OK)
        return emi_fail(EM_ERR_STATE, "%s: the recording failed (%s): the graph is incomplete",
                        fn, em_status_name(g->failed));
    if (!gf_little_endian())
        return emi_fail(EM_ERR_IO, "%s: %s: graph files hold little-endian data; this host is "
                                   "big-endian", fn, path);
    em_status s = EM_OK;
    const size_t nb = g->nblobs ? g->nblobs : 1, nbuf = g->nbufs ? g->nbufs : 1;
    char **names = calloc(nb, sizeof *names);
    emi_st_tensor *ts = calloc(nb, sizeof *ts);
    uint32_t *writes = calloc(nbuf, sizeof *writes);
    uint64_t *last_write = calloc(nbuf, sizeof *last_write);
    bool *named = calloc(nb, sizeof *named);
    char *json = NULL;
    if (!names || !ts || !writes || !last_write || !named) goto nomem;
    for (uint64_t i = 0; i < g->nsteps; i++)
        if (g->steps[i].type == GR_WRITE) {
            writes[g->steps[i].buf]++;
            last_write[g->steps[i].buf] = i;
        }
    /* blobs that a state fills whole: under the state's name, dtype and shape */
    for (int j = 0; j < g->nstates; j++) {
        const gr_named *st = &g->states[j];
        uint32_t bl = 0;
        if (!gf_state_blob(g, st, writes, last_write, &bl) || named[bl]) continue;
        named[bl] = true;
        if (!(names[bl] = strdup(st->name))) goto nomem;
        ts[bl].dtype = st->dtype;
        ts[bl].rank = st->view.rank;
        memcpy(ts[bl].shape, st->view.shape, sizeof ts[bl].shape);
    }
    /* the others: blob.<i>, u8 [len] */
    for (uint32_t i = 0; i < g->nblobs; i++) {
        if (!named[i]) {
            char b[32];
            snprintf(b, sizeof b, "blob.%u", i);
            if (!(names[i] = strdup(b))) goto nomem;
            ts[i].dtype = EM_U8;
            ts[i].rank = 1;
            ts[i].shape[0] = (int64_t)g->blobs[i].len;
        }
        ts[i].name = names[i];
        ts[i].data = g->blobs[i].data;
        ts[i].bytes = g->blobs[i].len;
    }
    json = gf_graph_json(g, names);
    if (!json) goto nomem;
    char version[16];
    snprintf(version, sizeof version, "%d", EM_GRAPH_FORMAT_VERSION);
    const char *meta[4] = {gf_meta_version, version, gf_meta_graph, json};
    s = emi_st_save(fn, path, ts, g->nblobs, meta, 2);
    goto done;
nomem:
    s = emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
done:
    for (size_t i = 0; names && i < g->nblobs; i++) free(names[i]);
    free(names);
    free(ts);
    free(writes);
    free(last_write);
    free(named);
    cJSON_free(json);
    return s;
}

/* ==== loading =============================================================================== */

/* What a load is working on. */
typedef struct gf_in {
    const char *fn, *what; /* "em_graph_load", the path or "buffer" */
    const emi_st_file *f;
    em_graph *g;
    uint8_t *life;        /* per buffer: 0 not allocated yet, 1 alive, 2 freed */
    uint8_t *claimed_setup;
    int32_t *claimed_input;
    uint32_t *blob_of;    /* per file tensor: its blob, or UINT32_MAX */
    bool in_alt;          /* between an alt step and its alt_end */
} gf_in;

static em_status gf_fail(const gf_in *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static em_status gf_fail(const gf_in *c, const char *fmt, ...) {
    char why[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return emi_fail(EM_ERR_IO, "%s: %s: %s", c->fn, c->what, why);
}

/* An integer: a JSON number that is an integer within +-2^53, or a string of decimal digits
 * (optionally '-') within int64. */
static bool gf_get_int(const cJSON *j, int64_t *out) {
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (!isfinite(d) || d != floor(d) || d < -(double)GF_MAX_EXACT ||
            d > (double)GF_MAX_EXACT)
            return false;
        *out = (int64_t)d;
        return true;
    }
    if (!cJSON_IsString(j) || !j->valuestring) return false;
    const char *p = j->valuestring;
    bool neg = *p == '-';
    if (neg) p++;
    if (!*p || strlen(p) > 19) return false;
    uint64_t v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9') return false;
        v = v * 10 + (uint64_t)(*p - '0'); /* 19 digits cannot overflow u64 */
    }
    if (neg ? v > (uint64_t)INT64_MAX + 1 : v > (uint64_t)INT64_MAX) return false;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

/* An integer in [lo, hi]. */
static bool gf_get_range(const cJSON *j, int64_t lo, int64_t hi, int64_t *out) {
    int64_t v;
    if (!gf_get_int(j, &v) || v < lo || v > hi) return false;
    *out = v;
    return true;
}

/* A double as gf_double writes it (and any JSON number). */
static bool gf_get_double(const cJSON *j, double *out) {
    if (cJSON_IsNumber(j)) {
        *out = j->valuedouble;
        return true;
    }
    if (!cJSON_IsString(j) || !j->valuestring) return false;
    const char *p = j->valuestring;
    if (strcmp(p, "inf") == 0) *out = INFINITY;
    else if (strcmp(p, "-inf") == 0) *out = -INFINITY;
    else if (strcmp(p, "nan") == 0) {
        uint64_t u = GF_NAN_BITS;
        memcpy(out, &u, sizeof u);
    } else if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X') && strlen(p) == 18) {
        uint64_t u = 0;
        for (p += 2; *p; p++) {
            unsigned d = (*p >= '0' && *p <= '9')   ? (unsigned)(*p - '0')
                         : (*p >= 'a' && *p <= 'f') ? (unsigned)(*p - 'a' + 10)
                         : (*p >= 'A' && *p <= 'F') ? (unsigned)(*p - 'A' + 10)
                                                    : 16u;
            if (d == 16u) return false;
            u = u << 4 | d;
        }
        memcpy(out, &u, sizeof u);
    } else {
        return false;
    }
    return true;
}

/* The number of items of a JSON array (counted along its list). */
static size_t gf_count(const cJSON *a) {
    size_t n = 0;
    for (const cJSON *e = a ? a->child : NULL; e; e = e->next) n++;
    return n;
}

/* A dtype by name; quantized ones are refused (false). */
static bool gf_get_dtype(const cJSON *j, em_dtype *out) {
    if (!cJSON_IsString(j) || !j->valuestring) return false;
    for (int d = 0; d < EM_DTYPE_COUNT; d++)
        if (d != EM_Q8 && d != EM_Q4 && strcmp(j->valuestring, em_dtype_name((em_dtype)d)) == 0) {
            *out = (em_dtype)d;
            return true;
        }
    return false;
}

/* A JSON string for a message: up to 40 bytes of it, or a description of what it is. */
static const char *gf_show(const cJSON *j) {
    if (cJSON_IsString(j) && j->valuestring) return j->valuestring;
    return j ? "(not a string)" : "(missing)";
}

/* A view: [buffer, dtype, [shape], [strides], offset] with buffer < nbufs, a dtype that is
 * not quantized, rank <= 8, dims >= 0, as many strides as dims, offset >= 0. */
static em_status gf_get_view(const gf_in *c, const cJSON *j, const char *where, rw_view *v) {
    memset(v, 0, sizeof *v);
    if (!cJSON_IsArray(j) || gf_count(j) != 5)
        return gf_fail(c, "%s: a view is [buffer, dtype, [shape], [strides], offset]", where);
    const cJSON *jb = j->child, *jd = jb->next, *jsh = jd->next, *jst = jsh->next,
                *jo = jst->next;
    int64_t b = 0, off = 0;
    if (!gf_get_range(jb, 0, (int64_t)c->g->nbufs - 1, &b))
        return gf_fail(c, "%s: buffer is not an index below the %u buffers", where,
                       c->g->nbufs);
    if (!gf_get_dtype(jd, &v->dtype))
        return gf_fail(c, "%s: dtype \"%.40s\" is not a dtype of a graph (quantized ones are not)",
                       where, gf_show(jd));
    if (!cJSON_IsArray(jsh) || !cJSON_IsArray(jst))
        return gf_fail(c, "%s: shape and strides are not arrays", where);
    size_t rank = gf_count(jsh);
    if (rank > RW_MAX_RANK) return gf_fail(c, "%s: rank %zu exceeds %d", where, rank, RW_MAX_RANK);
    if (gf_count(jst) != rank)
        return gf_fail(c, "%s: %zu strides for %zu dims", where, gf_count(jst), rank);
    v->rank = (int)rank;
    int d = 0;
    for (const cJSON *e = jsh->child, *s = jst->child; e; e = e->next, s = s->next, d++) {
        if (!gf_get_range(e, 0, INT64_MAX, &v->shape[d]))
            return gf_fail(c, "%s: shape[%d] is not a non-negative integer", where, d);
        if (!gf_get_int(s, &v->strides[d]))
            return gf_fail(c, "%s: strides[%d] is not an integer", where, d);
    }
    if (!gf_get_range(jo, 0, INT64_MAX, &off))
        return gf_fail(c, "%s: offset is not a non-negative integer", where);
    v->offset = off;
    v->id = (uint64_t)b + 1;
    return EM_OK;
}

/* A buffer index field of a step: "buf" < nbufs. */
static em_status gf_get_buf(const gf_in *c, const cJSON *j, const char *where, uint32_t *out) {
    int64_t b = 0;
    if (!gf_get_range(cJSON_GetObjectItemCaseSensitive(j, "buf"), 0, (int64_t)c->g->nbufs - 1,
                      &b))
        return gf_fail(c, "%s: \"buf\" is not an index below the %u buffers", where,
                       c->g->nbufs);
    *out = (uint32_t)b;
    return EM_OK;
}

/* A kernel step's call into s->k: its slot, op, views, ints and doubles as rw_slots says;
 * then through the wire codec (encoded, decoded: rw_decode_kernel's checks). */
static em_status gf_get_kernel(const gf_in *c, const cJSON *j, const char *where, gr_step *s) {
    const cJSON *jslot = cJSON_GetObjectItemCaseSensitive(j, "slot");
    int slot = -1;
    if (cJSON_IsString(jslot) && jslot->valuestring)
        for (int i = 0; i < RW_K_COUNT; i++)
            if (strcmp(jslot->valuestring, rw_slots[i].name) == 0) slot = i;
    if (slot < 0) return gf_fail(c, "%s: unknown kernel slot \"%.40s\"", where, gf_show(jslot));
    const rw_slot_info *si = &rw_slots[slot];
    rw_kernel k;
    memset(&k, 0, sizeof k);
    k.slot = (rw_slot)slot;
    const cJSON *jsub = cJSON_GetObjectItemCaseSensitive(j, "sub");
    int64_t sub = 0;
    if (si->nsub ? !gf_get_range(jsub, 0, si->nsub - 1, &sub)
                 : (jsub && !gf_get_range(jsub, 0, 0, &sub)))
        return gf_fail(c, "%s: \"sub\" of %s is not an op below %d", where, si->name,
                       si->nsub ? si->nsub : 1);
    k.sub = (int)sub;
    const cJSON *jv = cJSON_GetObjectItemCaseSensitive(j, "views");
    if (!cJSON_IsArray(jv) || gf_count(jv) != si->nviews)
        return gf_fail(c, "%s: %s takes \"views\": an array of %d views (null for an absent "
                          "optional one)", where, si->name, si->nviews);
    int i = 0;
    for (const cJSON *e = jv->child; e; e = e->next, i++) {
        char w[96];
        snprintf(w, sizeof w, "%s.views[%d]", where, i);
        if (cJSON_IsNull(e)) {
            if (!(si->optional >> i & 1u))
                return gf_fail(c, "%s: is null, but %s needs view %d", w, si->name, i);
            continue;
        }
        EMI_TRY(gf_get_view(c, e, w, &k.views[i]));
        k.mask |= (uint8_t)(1u << i);
    }
    const char *keys[2] = {"ints", "doubles"};
    const int counts[2] = {si->nints, si->ndoubles};
    for (int a = 0; a < 2; a++) {
        const cJSON *ja = cJSON_GetObjectItemCaseSensitive(j, keys[a]);
        size_t n = ja ? gf_count(ja) : 0;
        if ((ja && !cJSON_IsArray(ja)) || n != (size_t)counts[a])
            return gf_fail(c, "%s: %s takes %d %s", where, si->name, counts[a], keys[a]);
        int x = 0;
        for (const cJSON *e = ja ? ja->child : NULL; e; e = e->next, x++)
            if (a == 0 ? !gf_get_int(e, &k.ints[x]) : !gf_get_double(e, &k.doubles[x]))
                return gf_fail(c, "%s: %s[%d] is not %s", where, keys[a], x,
                               a == 0 ? "an integer" : "a number, \"inf\", \"-inf\", \"nan\" "
                                                       "or \"0x\" and 16 hex digits");
    }
    /* the wire codec's structural checks, on the call as encoded */
    rw_writer w = {0};
    rw_encode_kernel(&w, &k);
    if (w.failed) {
        rw_writer_free(&w);
        return emi_fail(EM_ERR_NOMEM, "%s: out of memory", c->fn);
    }
    char why[160];
    bool ok = w.len >= 5 && rw_decode_kernel(w.p + 5, w.len - 5, &s->k, why, sizeof why);
    rw_writer_free(&w);
    if (!ok) return gf_fail(c, "%s: %s: %s", where, si->name, why);
    return EM_OK;
}

/* The blob a write step names: the file's tensor of that name, made a blob once. */
static em_status gf_get_blob(gf_in *c, const cJSON *j, const char *where, uint32_t *out) {
    const cJSON *jn = cJSON_GetObjectItemCaseSensitive(j, "blob");
    const emi_st_tensor *t =
        cJSON_IsString(jn) && jn->valuestring ? emi_st_find(c->f, jn->valuestring) : NULL;
    if (!t) return gf_fail(c, "%s: the file has no tensor \"%.60s\"", where, gf_show(jn));
    const size_t ix = (size_t)(t - emi_st_at(c->f, 0));
    if (c->blob_of[ix] == UINT32_MAX) {
        uint8_t *data = malloc(t->bytes ? (size_t)t->bytes : 1);
        if (!data) return emi_fail(EM_ERR_NOMEM, "%s: out of memory", c->fn);
        if (t->bytes) memcpy(data, t->data, (size_t)t->bytes);
        if (!gr_push_blob(c->g, data, t->bytes, &c->blob_of[ix])) {
            free(data);
            return emi_fail(EM_ERR_NOMEM, "%s: out of memory", c->fn);
        }
    }
    *out = c->blob_of[ix];
    return EM_OK;
}

/* One step: index i overall, in the setup when setup. */
static em_status gf_get_step(gf_in *c, const cJSON *j, uint64_t i, bool setup) {
    char where[48];
    snprintf(where, sizeof where, "%s[%llu]", setup ? "setup" : "step",
             (unsigned long long)(setup ? i : i - c->g->setup_end));
    em_graph *g = c->g;
    if (!cJSON_IsObject(j)) return gf_fail(c, "%s: a step is an object", where);
    const cJSON *jt = cJSON_GetObjectItemCaseSensitive(j, "type");
    const char *type = cJSON_IsString(jt) && jt->valuestring ? jt->valuestring : "";
    gr_step s;
    memset(&s, 0, sizeof s);
    if (strcmp(type, "alloc") == 0) {
        s.type = GR_ALLOC;
        EMI_TRY(gf_get_buf(c, j, where, &s.buf));
        if (c->life[s.buf] != 0)
            return gf_fail(c, "%s: buffer %u is allocated a second time", where, s.buf);
        c->life[s.buf] = 1;
        g->bufs[s.buf].setup = setup;
    } else if (strcmp(type, "free") == 0) {
        s.type = GR_FREE;
        EMI_TRY(gf_get_buf(c, j, where, &s.buf));
        if (c->life[s.buf] != 1)
            return gf_fail(c, "%s: buffer %u is freed %s", where, s.buf,
                           c->life[s.buf] ? "a second time" : "before it is allocated");
        c->life[s.buf] = 2;
        g->bufs[s.buf].freed = true;
    } else if (strcmp(type, "write") == 0) {
        s.type = GR_WRITE;
        EMI_TRY(gf_get_buf(c, j, where, &s.buf));
        int64_t off = 0;
        if (!gf_get_range(cJSON_GetObjectItemCaseSensitive(j, "offset"), 0, INT64_MAX, &off))
            return gf_fail(c, "%s: \"offset\" is not a non-negative integer", where);
        s.offset = (uint64_t)off;
        EMI_TRY(gf_get_blob(c, j, where, &s.blob));
        const uint64_t bytes = g->bufs[s.buf].bytes, len = g->blobs[s.blob].len;
        if (s.offset > bytes || len > bytes - s.offset)
            return gf_fail(c, "%s: %llu bytes at offset %llu do not fit in buffer %u of %llu "
                              "bytes", where, (unsigned long long)len,
                           (unsigned long long)s.offset, s.buf, (unsigned long long)bytes);
        if (c->life[s.buf] != 1)
            return gf_fail(c, "%s: buffer %u is not alive there", where, s.buf);
        if (!setup) g->bufs[s.buf].written = true;
    } else if (strcmp(type, "kernel") == 0 || strcmp(type, "alt") == 0) {
        s.type = type[0] == 'k' ? GR_KERNEL : GR_ALT;
        if (s.type == GR_ALT && c->in_alt)
            return gf_fail(c, "%s: an alt inside the composition of another (no alt_end "
                              "before it)", where);
        EMI_TRY(gf_get_kernel(c, j, where, &s));
        c->in_alt |= s.type == GR_ALT;
        const unsigned outs = gr_outputs_of(s.k.slot);
        for (int v = 0; v < RW_MAX_VIEWS; v++) {
            if (!(s.k.mask >> v & 1u)) continue;
            const uint32_t b = (uint32_t)(s.k.views[v].id - 1);
            if (c->life[b] != 1)
                return gf_fail(c, "%s: views[%d]: buffer %u is not alive there", where, v, b);
            if (!setup && (outs >> v & 1u)) g->bufs[b].written = true;
        }
    } else if (strcmp(type, "alt_end") == 0) {
        s.type = GR_ALT_END;
        if (!c->in_alt) return gf_fail(c, "%s: an alt_end without its alt", where);
        c->in_alt = false;
    } else {
        return gf_fail(c, "%s: unknown step type \"%.40s\" (alloc, free, write, kernel, alt "
                          "or alt_end)", where, gf_show(jt));
    }
    if (!gr_push_step(g, &s)) return emi_fail(EM_ERR_NOMEM, "%s: out of memory", c->fn);
    return EM_OK;
}

static int gf_cmp_name(const void *a, const void *b) {
    return strcmp(((const gr_named *)a)->name, ((const gr_named *)b)->name);
}

/* A list of named tensors: "inputs", "outputs" or "states". */
static em_status gf_get_named(gf_in *c, const cJSON *root, const char *key, gr_named **list,
                              int *n) {
    em_graph *g = c->g;
    const cJSON *ja = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!cJSON_IsArray(ja)) return gf_fail(c, "\"%s\" is not an array", key);
    size_t count = gf_count(ja);
    if (count > GR_MAX_IO)
        return gf_fail(c, "%zu %s, more than the limit of %d", count, key, GR_MAX_IO);
    const bool inputs = strcmp(key, "inputs") == 0, states = strcmp(key, "states") == 0;
    int i = 0;
    for (const cJSON *e = ja->child; e; e = e->next, i++) {
        char where[48];
        snprintf(where, sizeof where, "%s[%d]", key, i);
        if (!cJSON_IsObject(e)) return gf_fail(c, "%s: not an object", where);
        const cJSON *jn = cJSON_GetObjectItemCaseSensitive(e, "name");
        const char *name = cJSON_IsString(jn) ? jn->valuestring : NULL;
        if (!gr_name_ok(name))
            return gf_fail(c, "%s: name is not 1..%d bytes of [A-Za-z0-9_.:/-]", where,
                           GR_NAME_MAX);
        em_dtype dt;
        if (!gf_get_dtype(cJSON_GetObjectItemCaseSensitive(e, "dtype"), &dt))
            return gf_fail(c, "%s ('%s'): dtype is not a dtype of a graph", where, name);
        char w[64];
        snprintf(w, sizeof w, "%s.view", where);
        rw_view v;
        EMI_TRY(gf_get_view(c, cJSON_GetObjectItemCaseSensitive(e, "view"), w, &v));
        const uint32_t b = (uint32_t)(v.id - 1);
        const uint64_t bytes = g->bufs[b].bytes;
        const int64_t end = gr_view_end(&v);
        uint64_t vbytes = 0;
        if (v.dtype != dt)
            return gf_fail(c, "%s ('%s'): dtype %s, but its view is %s", where, name,
                           em_dtype_name(dt), em_dtype_name(v.dtype));
        if (end < 0 || (uint64_t)end > bytes)
            return gf_fail(c, "%s ('%s'): its view does not lie inside buffer %u (%llu bytes)",
                           where, name, b, (unsigned long long)bytes);
        if (!gf_view_bytes(&v, &vbytes))
            return gf_fail(c, "%s ('%s'): its elements take more than 2^46 bytes", where, name);
        if (inputs) {
            /* a whole buffer of the step's own, as em_graph_input makes it (an empty one
             * holds one byte) */
            if (v.offset != 0 || !gf_contiguous(&v) ||
                (bytes != vbytes && !(vbytes == 0 && bytes == 1)))
                return gf_fail(c, "%s ('%s'): an input is the whole of its buffer, contiguous",
                               where, name);
            if (g->bufs[b].input >= 0)
                return gf_fail(c, "%s ('%s'): buffer %u already holds input %d", where, name,
                               b, g->bufs[b].input);
            if (g->bufs[b].setup)
                return gf_fail(c, "%s ('%s'): buffer %u is made in the setup, not in the step",
                               where, name, b);
            g->bufs[b].input = i;
        }
        if (states && !g->bufs[b].setup)
            return gf_fail(c, "%s ('%s'): buffer %u is not made in the setup: no state", where,
                           name, b);
        if (!gr_push_named(list, n, name, dt, &v))
            return emi_fail(EM_ERR_NOMEM, "%s: out of memory", c->fn);
    }
    /* unique names: neighbours once sorted (a copy: the list keeps its order) */
    if (*n > 1) {
        gr_named *sorted = malloc((size_t)*n * sizeof *sorted);
        if (!sorted) return emi_fail(EM_ERR_NOMEM, "%s: out of memory", c->fn);
        memcpy(sorted, *list, (size_t)*n * sizeof *sorted);
        qsort(sorted, (size_t)*n, sizeof *sorted, gf_cmp_name);
        for (int k = 1; k < *n; k++)
            if (strcmp(sorted[k - 1].name, sorted[k].name) == 0) {
                em_status s = gf_fail(c, "two %s are named '%s'", key, sorted[k].name);
                free(sorted);
                return s;
            }
        free(sorted);
    }
    return EM_OK;
}

/* A decimal version string ("1"); -1 when it is not one. */
static long gf_version(const char *v) {
    long n = 0;
    if (!v || !*v || strlen(v) > 9) return -1;
    for (; *v; v++) {
        if (*v < '0' || *v > '9') return -1;
        n = n * 10 + (*v - '0');
    }
    return n;
}

/* The graph of a parsed file. */
static em_status gf_load(gf_in *c, em_graph **out) {
    const char *ver = emi_st_meta(c->f, gf_meta_version);
    const char *text = emi_st_meta(c->f, gf_meta_graph);
    const long version = gf_version(ver);
    if (ver && version > EM_GRAPH_FORMAT_VERSION)
        return gf_fail(c, "format version %ld is newer than this library's %d: a newer ember "
                          "wrote it", version, EM_GRAPH_FORMAT_VERSION);
    if (!text)
        return gf_fail(c, "not a graph file: its __metadata__ has no \"%s\" (a plain "
                          "safetensors file? em_safetensors_load reads those)", gf_meta_graph);
    if (!ver) return gf_fail(c, "its __metadata__ has no \"%s\"", gf_meta_version);
    if (version < 1)
        return gf_fail(c, "\"%s\" is \"%.20s\", not a format version (1..%d)", gf_meta_version,
                       ver, EM_GRAPH_FORMAT_VERSION);
    if (!gf_little_endian())
        return gf_fail(c, "graph files hold little-endian data; this host is big-endian");

    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, true);
    if (!root) {
        size_t at = end && end >= text ? (size_t)(end - text) : 0;
        return gf_fail(c, "\"%s\" is not valid JSON (error near byte %zu)", gf_meta_graph, at);
    }
    em_status s = EM_OK;
    em_graph *g = gr_new();
    if (!g) {
        cJSON_Delete(root);
        return emi_fail(EM_ERR_NOMEM, "%s: out of memory", c->fn);
    }
    c->g = g;
    const cJSON *jbufs = cJSON_GetObjectItemCaseSensitive(root, "buffers");
    const cJSON *jsetup = cJSON_GetObjectItemCaseSensitive(root, "setup");
    const cJSON *jstep = cJSON_GetObjectItemCaseSensitive(root, "step");
    int64_t jver = 0;
    if (!cJSON_IsObject(root)) {
        s = gf_fail(c, "\"%s\" is not a JSON object", gf_meta_graph);
        goto done;
    }
    if (!gf_get_int(cJSON_GetObjectItemCaseSensitive(root, "version"), &jver) ||
        jver != version) {
        s = gf_fail(c, "the graph's \"version\" is not %ld, the metadata's", version);
        goto done;
    }
    if (!cJSON_IsArray(jbufs) || !cJSON_IsArray(jsetup) || !cJSON_IsArray(jstep)) {
        s = gf_fail(c, "\"buffers\", \"setup\" and \"step\" are not all arrays");
        goto done;
    }
    /* the buffers */
    const size_t nbufs = gf_count(jbufs);
    if (nbufs > GR_MAX_BUFFERS) {
        s = gf_fail(c, "%zu buffers, more than the limit of %u", nbufs, GR_MAX_BUFFERS);
        goto done;
    }
    c->life = calloc(nbufs ? nbufs : 1, 1);
    c->claimed_setup = calloc(nbufs ? nbufs : 1, 1);
    c->claimed_input = calloc(nbufs ? nbufs : 1, sizeof *c->claimed_input);
    c->blob_of = malloc((emi_st_count(c->f) ? emi_st_count(c->f) : 1) * sizeof *c->blob_of);
    if (!c->life || !c->claimed_setup || !c->claimed_input || !c->blob_of) {
        s = emi_fail(EM_ERR_NOMEM, "%s: out of memory", c->fn);
        goto done;
    }
    for (size_t i = 0; i < emi_st_count(c->f); i++) c->blob_of[i] = UINT32_MAX;
    size_t b = 0;
    for (const cJSON *e = jbufs->child; e; e = e->next, b++) {
        int64_t bytes = 0, input = -1;
        const cJSON *jsu = cJSON_GetObjectItemCaseSensitive(e, "setup");
        const cJSON *jin = cJSON_GetObjectItemCaseSensitive(e, "input");
        if (!cJSON_IsObject(e) ||
            !gf_get_range(cJSON_GetObjectItemCaseSensitive(e, "bytes"), 0,
                          (int64_t)GF_MAX_BYTES, &bytes)) {
            s = gf_fail(c, "buffers[%zu]: \"bytes\" is not an integer in [0, 2^46]", b);
            goto done;
        }
        if (!cJSON_IsBool(jsu) || (jin && !gf_get_range(jin, 0, GR_MAX_IO - 1, &input))) {
            s = gf_fail(c, "buffers[%zu]: \"setup\" is not true or false, or \"input\" not an "
                           "input's index", b);
            goto done;
        }
        uint32_t ix = 0;
        if (!gr_push_buffer(g, (uint64_t)bytes, &ix)) {
            s = emi_fail(EM_ERR_NOMEM, "%s: out of memory", c->fn);
            goto done;
        }
        c->claimed_setup[ix] = cJSON_IsTrue(jsu);
        c->claimed_input[ix] = (int32_t)input;
    }
    /* the steps: the setup's, then the step's */
    const size_t nsetup = gf_count(jsetup), nstep = gf_count(jstep);
    if (nsetup > GR_MAX_STEPS || nstep > GR_MAX_STEPS - nsetup) {
        s = gf_fail(c, "%zu steps, more than the limit of %u", nsetup + nstep, GR_MAX_STEPS);
        goto done;
    }
    g->setup_end = nsetup;
    uint64_t i = 0;
    for (const cJSON *e = jsetup->child; e && s == EM_OK; e = e->next, i++)
        s = gf_get_step(c, e, i, true);
    if (s == EM_OK && c->in_alt) s = gf_fail(c, "setup: an alt without its alt_end");
    for (const cJSON *e = jstep->child; e && s == EM_OK; e = e->next, i++)
        s = gf_get_step(c, e, i, false);
    if (s == EM_OK && c->in_alt) s = gf_fail(c, "step: an alt without its alt_end");
    if (s != EM_OK) goto done;
    for (uint32_t k = 0; k < g->nbufs; k++)
        if (c->life[k] == 0) {
            s = gf_fail(c, "buffer %u is never allocated", k);
            goto done;
        }
    /* the named tensors */
    if ((s = gf_get_named(c, root, "inputs", &g->inputs, &g->ninputs)) != EM_OK ||
        (s = gf_get_named(c, root, "outputs", &g->outputs, &g->noutputs)) != EM_OK ||
        (s = gf_get_named(c, root, "states", &g->states, &g->nstates)) != EM_OK)
        goto done;
    /* what the file says of its buffers must be what its steps and inputs make of them */
    for (uint32_t k = 0; k < g->nbufs; k++) {
        if (c->claimed_setup[k] != g->bufs[k].setup) {
            s = gf_fail(c, "buffers[%u]: \"setup\" is %s, but its alloc is %s", k,
                        c->claimed_setup[k] ? "true" : "false",
                        g->bufs[k].setup ? "in the setup" : "in the step");
            goto done;
        }
        if (c->claimed_input[k] != g->bufs[k].input) {
            s = gf_fail(c, "buffers[%u]: \"input\" does not match the inputs' views", k);
            goto done;
        }
    }
    g->in_step = g->ninputs > 0;
done:
    cJSON_Delete(root);
    if (s != EM_OK) {
        gr_release(g);
        c->g = NULL;
        return s;
    }
    *out = g;
    return EM_OK;
}

static em_status gf_load_file(gf_in *c, emi_st_file *f, em_graph **out) {
    c->f = f;
    em_status s = gf_load(c, out);
    free(c->life);
    free(c->claimed_setup);
    free(c->claimed_input);
    free(c->blob_of);
    emi_st_close(f);
    return s;
}

em_status em_graph_load(const char *path, em_graph **out) {
    static const char fn[] = "em_graph_load";
    EMI_TRY(emi_check_out(fn, out));
    if (!path) return emi_fail_null(fn, "path");
    emi_st_file *f = NULL;
    EMI_TRY(emi_st_open_file(fn, path, &f));
    gf_in c = {fn, path, NULL, NULL, NULL, NULL, NULL, NULL, false};
    return gf_load_file(&c, f, out);
}

em_status em_graph_load_buffer(const void *data, size_t len, em_graph **out) {
    static const char fn[] = "em_graph_load";
    EMI_TRY(emi_check_out("em_graph_load_buffer", out));
    if (!data && len > 0) return emi_fail_null("em_graph_load_buffer", "data");
    emi_st_file *f = NULL;
    EMI_TRY(emi_st_open_buffer(fn, "buffer", data, len, &f));
    gf_in c = {fn, "buffer", NULL, NULL, NULL, NULL, NULL, NULL, false};
    return gf_load_file(&c, f, out);
}
