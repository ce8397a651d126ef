/* wire.c — the remote protocol's field encoding, kernel messages and the welcome. */
#include "wire/wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* view bits:        0        1        2        3 */
const rw_slot_info rw_slots[RW_K_COUNT] = {
    [RW_K_FILL] = {"fill", 1, 0, 0, 1, 0},                          /* out */
    [RW_K_ARANGE] = {"arange", 1, 0, 0, 2, 0},                      /* out */
    [RW_K_RANDOM] = {"random", 1, 0, 1, 2, EM_RAND_COUNT},          /* out; seed */
    [RW_K_COPY] = {"copy", 2, 0, 0, 0, 0},                          /* out in */
    [RW_K_UNARY] = {"unary", 2, 0, 0, 3, EM_UN_COUNT},              /* out in; params */
    [RW_K_BINARY] = {"binary", 3, 0, 0, 0, EM_BIN_COUNT},           /* out a b */
    [RW_K_BINARY_SCALAR] = {"binary_scalar", 2, 0, 0, 1, EM_BIN_COUNT}, /* out a */
    [RW_K_WHERE] = {"where", 4, 0, 0, 0, 0},                        /* out cond a b */
    [RW_K_REDUCE] = {"reduce", 2, 0, 1, 1, EM_RED_COUNT},           /* out in; dim */
    [RW_K_CUMSUM] = {"cumsum", 2, 0, 1, 0, 0},                      /* out in; dim */
    [RW_K_SOFTMAX] = {"softmax", 2, 0, 2, 0, 0},                    /* out in; dim log */
    [RW_K_MATMUL] = {"matmul", 3, 0, 0, 0, 0},                      /* out a b */
    [RW_K_GATHER] = {"gather", 3, 0, 1, 0, 0},                      /* out in index; dim */
    [RW_K_SCATTER_ADD] = {"scatter_add", 3, 0, 1, 0, 0},            /* out index src; dim */
    [RW_K_INDEX_SELECT] = {"index_select", 3, 0, 1, 0, 0},          /* out in index; dim */
    [RW_K_SORT] = {"sort", 3, 0x3, 2, 0, 0},                        /* values? indices? in */
    [RW_K_CONV2D] = {"conv2d", 4, 0x8, 9, 0, 0},                    /* out x w bias?; conv */
    [RW_K_CONV_TRANSPOSE2D] = {"conv_transpose2d", 4, 0x8, 9, 0, 0},
    [RW_K_MAX_POOL2D] = {"max_pool2d", 3, 0x2, 9, 0, 0},            /* out indices? x; pool */
    [RW_K_AVG_POOL2D] = {"avg_pool2d", 2, 0, 9, 0, 0},              /* out x; pool */
    [RW_K_ADAPTIVE_AVG_POOL2D] = {"adaptive_avg_pool2d", 2, 0, 0, 0, 0},
    [RW_K_CONV2D_WEIGHT_GRAD] = {"conv2d_weight_grad", 3, 0, 9, 0, 0}, /* gw x gy; conv */
    [RW_K_AVG_POOL2D_BACKWARD] = {"avg_pool2d_backward", 2, 0, 9, 0, 0}, /* gx gy; pool */
    [RW_K_ADAPTIVE_AVG_POOL2D_BACKWARD] = {"adaptive_avg_pool2d_backward", 2, 0, 0, 0, 0},
    [RW_K_LAYER_NORM] = {"layer_norm", 4, 0xC, 1, 1, 0}, /* out x weight? bias?; n; eps */
    [RW_K_CUMULATIVE] = {"cumulative", 3, 0x2, 1, 0, EM_CUM_COUNT}, /* values indices? in; dim */
    /* the schemes (rw_scheme_put): 6 ints and a double each */
    [RW_K_QUANTIZE] = {"quantize", 2, 0, 6, 1, 0},     /* out x; s */
    [RW_K_DEQUANTIZE] = {"dequantize", 2, 0, 6, 1, 0}, /* out q; s */
    [RW_K_QMATMUL] = {"qmatmul", 3, 0, 12, 2, 0},      /* out a b; as bs; as's scale, bs's */
    /* out save_mean? save_invstd? x weight? bias? running_mean? running_var?; training;
     * momentum eps */
    [RW_K_BATCH_NORM] = {"batch_norm", 8, 0xF6, 1, 2, 0},
    /* gx? gweight? gbias? gy x mean invstd weight?; training */
    [RW_K_BATCH_NORM_BACKWARD] = {"batch_norm_backward", 8, 0x87, 1, 0, 0},
    /* out save_mean? save_invstd? x weight? bias?; groups; eps */
    [RW_K_GROUP_NORM] = {"group_norm", 6, 0x36, 1, 1, 0},
    /* out save_invrms? x weight?; norm_numel; eps */
    [RW_K_RMS_NORM] = {"rms_norm", 4, 0xA, 1, 1, 0},
    /* param exp_avg exp_avg_sq grad step; sub: 0 Adam, 1 AdamW; lr beta1 beta2 eps
     * weight_decay grad_scale */
    [RW_K_ADAM_STEP] = {"adam_step", 5, 0, 0, 6, 2},
    /* gx x? y? gy; sub: the unary op; clamp's lo hi */
    [RW_K_UNARY_BACKWARD] = {"unary_backward", 4, 0x6, 0, 2, EM_UN_COUNT},
};

_Static_assert(RW_K_REMOTE_COUNT <= 32, "the welcome's slot mask is a u32");

/* ---- writer ---- */

static bool rw_reserve(rw_writer *w, size_t n) {
    if (w->failed) return false;
    if (w->len + n <= w->cap) return true;
    size_t cap = w->cap ? w->cap : 256;
    while (cap < w->len + n) cap *= 2;
    uint8_t *p = realloc(w->p, cap);
    if (!p) {
        w->failed = true;
        return false;
    }
    w->p = p;
    w->cap = cap;
    return true;
}

void rw_put_u8(rw_writer *w, uint8_t v) {
    if (rw_reserve(w, 1)) w->p[w->len++] = v;
}
void rw_put_u16(rw_writer *w, uint16_t v) {
    if (!rw_reserve(w, 2)) return;
    w->p[w->len] = (uint8_t)v;
    w->p[w->len + 1] = (uint8_t)(v >> 8);
    w->len += 2;
}
void rw_put_u32(rw_writer *w, uint32_t v) {
    if (!rw_reserve(w, 4)) return;
    rw_store_le32(w->p + w->len, v);
    w->len += 4;
}
void rw_put_u64(rw_writer *w, uint64_t v) {
    if (!rw_reserve(w, 8)) return;
    rw_store_le64(w->p + w->len, v);
    w->len += 8;
}
void rw_put_f64(rw_writer *w, double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u); /* IEEE-754 binary64 bits, then little-endian */
    rw_put_u64(w, u);
}
void rw_put_bytes(rw_writer *w, const void *src, size_t n) {
    if (n && rw_reserve(w, n)) {
        memcpy(w->p + w->len, src, n);
        w->len += n;
    }
}
size_t rw_begin(rw_writer *w, uint8_t type) {
    size_t start = w->len;
    rw_put_u32(w, 0);
    rw_put_u8(w, type);
    return start;
}
void rw_end(rw_writer *w, size_t start) {
    if (!w->failed) rw_store_le32(w->p + start, (uint32_t)(w->len - start - 4));
}
void rw_writer_free(rw_writer *w) {
    free(w->p);
    w->p = NULL;
    w->len = w->cap = 0;
}

static void rw_put_view(rw_writer *w, const rw_view *v) {
    rw_put_u64(w, v->id);
    rw_put_u8(w, (uint8_t)v->dtype);
    rw_put_u8(w, (uint8_t)v->rank);
    rw_put_u64(w, (uint64_t)v->offset);
    for (int d = 0; d < v->rank; d++) rw_put_u64(w, (uint64_t)v->shape[d]);
    for (int d = 0; d < v->rank; d++) rw_put_u64(w, (uint64_t)v->strides[d]);
}

void rw_encode_kernel(rw_writer *w, const rw_kernel *k) {
    const rw_slot_info *si = &rw_slots[k->slot];
    size_t start = rw_begin(w, RW_KERNEL);
    rw_put_u8(w, (uint8_t)k->slot);
    rw_put_u8(w, (uint8_t)k->sub);
    rw_put_u8(w, k->mask);
    for (int i = 0; i < si->nviews; i++)
        if (k->mask & (1u << i)) rw_put_view(w, &k->views[i]);
    for (int i = 0; i < si->nints; i++) rw_put_u64(w, (uint64_t)k->ints[i]);
    for (int i = 0; i < si->ndoubles; i++) rw_put_f64(w, k->doubles[i]);
    rw_end(w, start);
}

void rw_view_from(rw_view *out, const em_view *v, uint64_t id) {
    memset(out, 0, sizeof *out);
    out->id = id;
    out->dtype = v->dtype;
    out->rank = v->rank;
    out->offset = v->offset;
    for (int d = 0; d < v->rank && d < RW_MAX_RANK; d++) {
        out->shape[d] = v->shape[d];
        out->strides[d] = v->strides[d];
    }
}

/* ---- reader ---- */

static const uint8_t *rw_take(rw_reader *r, size_t n) {
    if (r->bad || r->len - r->pos < n) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *p = r->p + r->pos;
    r->pos += n;
    return p;
}
uint8_t rw_get_u8(rw_reader *r) {
    const uint8_t *p = rw_take(r, 1);
    return p ? p[0] : 0;
}
uint16_t rw_get_u16(rw_reader *r) {
    const uint8_t *p = rw_take(r, 2);
    return p ? (uint16_t)(p[0] | p[1] << 8) : 0;
}
uint32_t rw_get_u32(rw_reader *r) {
    const uint8_t *p = rw_take(r, 4);
    return p ? rw_le32(p) : 0;
}
uint64_t rw_get_u64(rw_reader *r) {
    const uint8_t *p = rw_take(r, 8);
    return p ? rw_le64(p) : 0;
}
double rw_get_f64(rw_reader *r) {
    uint64_t u = rw_get_u64(r);
    double v;
    memcpy(&v, &u, sizeof v);
    return v;
}
bool rw_get_bytes(rw_reader *r, size_t n, const uint8_t **out) {
    const uint8_t *p = rw_take(r, n);
    *out = p;
    return p != NULL;
}

static bool rw_fail(char *why, size_t cap, const char *msg, long a) {
    if (why && cap) snprintf(why, cap, msg, a);
    return false;
}

void rw_scheme_put(const em_quant_scheme *s, int64_t ints[RW_SCHEME_INTS], double *scale) {
    if (!s) {
        for (int i = 0; i < RW_SCHEME_INTS; i++) ints[i] = 0;
        *scale = 0;
        return;
    }
    const bool blocks = s->kind == EM_QK_BLOCK || s->kind == EM_QK_BLOCK_MIN;
    ints[0] = (int64_t)s->storage;
    ints[1] = (int64_t)s->kind;
    ints[2] = s->zero_point;
    ints[3] = (int64_t)s->scale_dtype;
    ints[4] = blocks && s->block == 0 ? EM_QBLOCK : s->block; /* 0 when asked for means 32 */
    ints[5] = s->axis;
    *scale = s->scale;
}

static bool rw_get_view(rw_reader *r, rw_view *v, bool quant, char *why, size_t cap) {
    memset(v, 0, sizeof *v);
    v->id = rw_get_u64(r);
    unsigned dt = rw_get_u8(r);
    unsigned rank = rw_get_u8(r);
    uint64_t off = rw_get_u64(r);
    if (r->bad) return rw_fail(why, cap, "truncated view%ld", 0);
    if (v->id == 0) return rw_fail(why, cap, "buffer id 0%ld", 0);
    /* q8 / q4 block views only in the quantized slots (per-tensor kinds travel as i8) */
    if (dt >= (unsigned)(quant ? EM_DTYPE_COUNT : EM_Q8))
        return rw_fail(why, cap, "bad dtype %ld", (long)dt);
    if (rank > RW_MAX_RANK) return rw_fail(why, cap, "rank %ld exceeds 8", (long)rank);
    if (off > (uint64_t)INT64_MAX) return rw_fail(why, cap, "negative offset%ld", 0);
    v->dtype = (em_dtype)dt;
    v->rank = (int)rank;
    v->offset = (int64_t)off;
    for (unsigned d = 0; d < rank; d++) {
        uint64_t s = rw_get_u64(r);
        if (s > (uint64_t)INT64_MAX) return rw_fail(why, cap, "negative dim %ld", (long)d);
        v->shape[d] = (int64_t)s;
    }
    for (unsigned d = 0; d < rank; d++) v->strides[d] = (int64_t)rw_get_u64(r);
    if (r->bad) return rw_fail(why, cap, "truncated view%ld", 0);
    return true;
}

bool rw_decode_kernel(const uint8_t *body, size_t len, rw_kernel *k, char *why, size_t cap) {
    rw_reader r = rw_reader_of(body, len);
    memset(k, 0, sizeof *k);
    unsigned slot = rw_get_u8(&r), sub = rw_get_u8(&r), mask = rw_get_u8(&r);
    if (r.bad) return rw_fail(why, cap, "truncated kernel header%ld", 0);
    if (slot >= RW_K_COUNT) return rw_fail(why, cap, "unknown kernel slot %ld", (long)slot);
    const rw_slot_info *si = &rw_slots[slot];
    if (si->nsub ? sub >= si->nsub : sub != 0)
        return rw_fail(why, cap, "bad op %ld", (long)sub);
    unsigned all = (1u << si->nviews) - 1;
    if ((mask & ~all) || ((all & ~si->optional) & ~mask))
        return rw_fail(why, cap, "bad view mask 0x%lx", (long)mask);
    k->slot = (rw_slot)slot;
    k->sub = (int)sub;
    k->mask = (uint8_t)mask;
    for (int i = 0; i < si->nviews; i++)
        if ((mask & (1u << i)) && !rw_get_view(&r, &k->views[i], rw_slot_is_quant((int)slot), why, cap))
            return false;
    for (int i = 0; i < si->nints; i++) k->ints[i] = (int64_t)rw_get_u64(&r);
    for (int i = 0; i < si->ndoubles; i++) k->doubles[i] = rw_get_f64(&r);
    if (r.bad) return rw_fail(why, cap, "truncated kernel arguments%ld", 0);
    if (!rw_done(&r)) return rw_fail(why, cap, "%ld trailing bytes", (long)(r.len - r.pos));
    return true;
}

/* ---- welcome ---- */

void rw_encode_welcome(rw_writer *w, const rw_welcome *wl) {
    size_t start = rw_begin(w, RW_WELCOME);
    rw_put_bytes(w, wl->mac, RW_MAC_BYTES);
    rw_put_u8(w, wl->autodiff);
    rw_put_u8(w, wl->checkpointing);
    rw_put_u32(w, wl->caps);
    rw_put_u32(w, wl->slots);
    rw_put_u64(w, wl->max_msg);
    rw_put_u64(w, wl->max_bytes);
    rw_put_u64(w, wl->max_tensors);
    size_t n = strnlen(wl->name, RW_NAME_MAX);
    rw_put_u8(w, (uint8_t)n);
    rw_put_bytes(w, wl->name, n);
    rw_end(w, start);
}

bool rw_decode_welcome(const uint8_t *body, size_t len, rw_welcome *wl) {
    rw_reader r = rw_reader_of(body, len);
    memset(wl, 0, sizeof *wl);
    const uint8_t *mac;
    if (!rw_get_bytes(&r, RW_MAC_BYTES, &mac)) return false;
    memcpy(wl->mac, mac, RW_MAC_BYTES);
    wl->autodiff = rw_get_u8(&r);
    wl->checkpointing = rw_get_u8(&r);
    wl->caps = rw_get_u32(&r);
    wl->slots = rw_get_u32(&r);
    wl->max_msg = rw_get_u64(&r);
    wl->max_bytes = rw_get_u64(&r);
    wl->max_tensors = rw_get_u64(&r);
    unsigned n = rw_get_u8(&r);
    const uint8_t *name;
    if (n > RW_NAME_MAX || !rw_get_bytes(&r, n, &name)) return false;
    memcpy(wl->name, name, n);
    wl->name[n] = '\0';
    return rw_done(&r) && wl->autodiff <= 1 && wl->max_msg >= RW_MIN_MAX_MSG &&
           wl->max_msg <= UINT32_MAX;
}
