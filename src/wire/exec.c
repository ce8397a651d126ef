/*
 * exec.c — one kernel call (a remote client's message, a captured graph's step) checked and
 * run on a device.
 *
 * A client is authenticated but its messages are not trusted: before a kernel runs, every view
 * must name a buffer of the connection and lie inside it, and the shapes, dtypes and index
 * values the kernels rely on for memory safety must hold (the checks the client's core made,
 * made again). A failure is reported to the client at its next read or sync.
 */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/fused.h"
#include "wire/adam.h"
#include "wire/exec.h"

typedef struct rs_ctx {
    const rs_host *h;
    rs_lookup_fn lookup;
    void *conn;
    char *msg;
    size_t cap;
    const char *slot;
} rs_ctx;

static em_status rs_bad(rs_ctx *c, em_status s, const char *fmt, ...) {
    char tmp[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    snprintf(c->msg, c->cap, "%s: %s", c->slot, tmp);
    return s;
}

/* The lowest and highest element a non-empty view touches; false on overflow. */
static bool rs_extent(const rw_view *v, int64_t *lo, int64_t *hi) {
    int64_t a = v->offset, b = v->offset;
    for (int d = 0; d < v->rank; d++) {
        int64_t e;
        if (__builtin_mul_overflow(v->shape[d] - 1, v->strides[d], &e)) return false;
        if (e < 0 ? __builtin_add_overflow(a, e, &a) : __builtin_add_overflow(b, e, &b))
            return false;
    }
    *lo = a;
    *hi = b;
    return true;
}

/* ---- the rules: one row a slot (docs/remote-protocol.md, "What the server checks") ----
 *
 * The core guarantees a local backend's kernels a set of invariants (include/ember/backend.h:
 * "a kernel is only ever called with valid arguments"); a client's core is not trusted to
 * have kept them, so the server re-checks each one here, in this order:
 *   1. every view names a buffer of the connection; every element a non-empty view reaches,
 *      and the offset of an empty one, lies inside the buffer; no offset or extent overflows;
 *   2. kinds and dtypes: the kind each view needs (float-only ops refuse ints), and each
 *      view's dtype against the slot's reference input (outputs included);
 *   3. outputs are contiguous (copy's may be any view), lie apart from each other and from
 *      every input and index, except an elementwise slot's output that is exactly one of its
 *      inputs (the core's in-place `_` ops);
 *   4. the shapes and arguments the kernel indexes by (rs_check below);
 *   5. index values in range (read after 3, so that no output of the kernel can change them);
 *   6. when the slot's primary output (or scatter_add's index) is empty, nothing runs, as the
 *      core never calls a kernel there; inputs that must be contiguous are copied first.
 * The quantized slots check their schemes before 1 (a q8 / q4 block view's bytes depend on
 * them: rs_block_view), and the values that the int8 kernels convert to integers at 5. */

enum { V_NONE, V_OUT, V_INOUT, V_IN, V_INDEX }; /* a view's role */
enum { K_ANY, K_FLOAT, K_NUMERIC, K_BOOL, K_IDX, K_QUANT, K_FQ }; /* the kind a view needs */
enum { D_ANY, D_REF, D_I64, D_BOOL, D_WIDE };           /* its dtype against the reference */

typedef struct rs_rule {
    uint8_t role[RW_MAX_VIEWS];
    uint8_t kind[RW_MAX_VIEWS];
    uint8_t dt[RW_MAX_VIEWS];
    int8_t ref;        /* the view whose dtype D_REF / D_WIDE views follow */
    int8_t primary;    /* nothing runs when this view is empty */
    bool in_place;     /* elementwise: an output may be exactly one of the inputs */
    bool strided_out;  /* copy: the output may be any view */
    bool contig_in;    /* inputs contiguous whatever the backend's caps (layer_norm) */
} rs_rule;
/* The quantized slots' inputs go to the kernel as they are, whatever the caps: the slots take
 * any valid view, and a block view cannot be copied element by element. */

#define O V_OUT
#define I V_IN
#define X V_INDEX
static const rs_rule rs_rules[RW_K_COUNT] = {
    [RW_K_FILL] = {{O}, {K_ANY}, {D_ANY}, 0, 0, false, false, false},
    [RW_K_ARANGE] = {{O}, {K_NUMERIC}, {D_ANY}, 0, 0, false, false, false},
    [RW_K_RANDOM] = {{O}, {K_ANY}, {D_ANY}, 0, 0, false, false, false}, /* float: by op */
    [RW_K_COPY] = {{O, I}, {K_ANY, K_ANY}, {D_ANY, D_ANY}, 1, 0, true, true, false},
    [RW_K_UNARY] = {{O, I}, {K_ANY, K_ANY}, {D_REF, D_REF}, 1, 0, true, false, false},
    [RW_K_BINARY] = {{O, I, I}, {K_ANY, K_ANY, K_ANY}, {D_REF, D_REF, D_REF}, 1, 0, true, false, false},
    [RW_K_BINARY_SCALAR] = {{O, I}, {K_ANY, K_ANY}, {D_REF, D_REF}, 1, 0, true, false, false},
    [RW_K_WHERE] = {{O, I, I, I}, {K_ANY, K_BOOL, K_ANY, K_ANY}, {D_REF, D_BOOL, D_REF, D_REF}, 2, 0,
                    true, false, false},
    [RW_K_REDUCE] = {{O, I}, {K_ANY, K_NUMERIC}, {D_REF, D_REF}, 1, 0, false, false, false},
    [RW_K_CUMSUM] = {{O, I}, {K_ANY, K_NUMERIC}, {D_WIDE, D_REF}, 1, 0, false, false, false},
    [RW_K_SOFTMAX] = {{O, I}, {K_ANY, K_FLOAT}, {D_REF, D_REF}, 1, 0, false, false, false},
    [RW_K_MATMUL] = {{O, I, I}, {K_ANY, K_NUMERIC, K_NUMERIC}, {D_REF, D_REF, D_REF}, 1, 0, false,
                     false, false},
    [RW_K_GATHER] = {{O, I, X}, {K_ANY, K_ANY, K_IDX}, {D_REF, D_REF, D_ANY}, 1, 0, false, false, false},
    [RW_K_SCATTER_ADD] = {{V_INOUT, X, I}, {K_NUMERIC, K_IDX, K_NUMERIC}, {D_REF, D_ANY, D_REF}, 0, 1,
                          false, false, false},
    [RW_K_INDEX_SELECT] = {{O, I, X}, {K_ANY, K_ANY, K_IDX}, {D_REF, D_REF, D_ANY}, 1, 0, false, false,
                           false},
    [RW_K_SORT] = {{O, O, I}, {K_ANY, K_ANY, K_ANY}, {D_REF, D_I64, D_REF}, 2, 2, false, false, false},
    [RW_K_CONV2D] = {{O, I, I, I}, {K_FLOAT, K_FLOAT, K_FLOAT, K_FLOAT}, {D_REF, D_REF, D_REF, D_REF},
                     1, 0, false, false, false},
    [RW_K_CONV_TRANSPOSE2D] = {{O, I, I, I}, {K_FLOAT, K_FLOAT, K_FLOAT, K_FLOAT},
                               {D_REF, D_REF, D_REF, D_REF}, 1, 0, false, false, false},
    [RW_K_MAX_POOL2D] = {{O, O, I}, {K_FLOAT, K_ANY, K_FLOAT}, {D_REF, D_I64, D_REF}, 2, 0, false,
                         false, false},
    [RW_K_AVG_POOL2D] = {{O, I}, {K_FLOAT, K_FLOAT}, {D_REF, D_REF}, 1, 0, false, false, false},
    [RW_K_ADAPTIVE_AVG_POOL2D] = {{O, I}, {K_FLOAT, K_FLOAT}, {D_REF, D_REF}, 1, 0, false, false,
                                  false},
    [RW_K_CONV2D_WEIGHT_GRAD] = {{O, I, I}, {K_FLOAT, K_FLOAT, K_FLOAT}, {D_REF, D_REF, D_REF}, 1, 0,
                                 false, false, false},
    [RW_K_AVG_POOL2D_BACKWARD] = {{O, I}, {K_FLOAT, K_FLOAT}, {D_REF, D_REF}, 1, 0, false, false,
                                  false},
    [RW_K_ADAPTIVE_AVG_POOL2D_BACKWARD] = {{O, I}, {K_FLOAT, K_FLOAT}, {D_REF, D_REF}, 1, 0, false,
                                           false, false},
    [RW_K_LAYER_NORM] = {{O, I, I, I}, {K_FLOAT, K_FLOAT, K_FLOAT, K_FLOAT},
                         {D_REF, D_REF, D_REF, D_REF}, 1, 0, false, false, true},
    [RW_K_CUMULATIVE] = {{O, O, I}, {K_ANY, K_ANY, K_ANY}, {D_REF, D_I64, D_REF}, 2, 2, false,
                         false, false},
    /* the exact dtypes depend on the schemes: rs_check_quant */
    [RW_K_QUANTIZE] = {{O, I}, {K_QUANT, K_FLOAT}, {D_ANY, D_ANY}, 1, 0, false, false, false},
    [RW_K_DEQUANTIZE] = {{O, I}, {K_FLOAT, K_QUANT}, {D_ANY, D_ANY}, 1, 0, false, false, false},
    [RW_K_QMATMUL] = {{O, I, I}, {K_FLOAT, K_FQ, K_QUANT}, {D_ANY, D_ANY, D_ANY}, 2, 0, false,
                      false, false},
#define F8 {K_FLOAT, K_FLOAT, K_FLOAT, K_FLOAT, K_FLOAT, K_FLOAT, K_FLOAT, K_FLOAT}
#define R8 {D_REF, D_REF, D_REF, D_REF, D_REF, D_REF, D_REF, D_REF}
    [RW_K_BATCH_NORM] = {{O, O, O, I, I, I, V_INOUT, V_INOUT}, F8, R8, 3, 0, false, false, true},
    [RW_K_BATCH_NORM_BACKWARD] = {{O, O, O, I, I, I, I, I}, F8, R8, 4, 3, false, false, true},
    [RW_K_GROUP_NORM] = {{O, O, O, I, I, I}, F8, R8, 3, 0, false, false, true},
    [RW_K_RMS_NORM] = {{O, O, I, I}, F8, R8, 2, 0, false, false, true},
    /* param exp_avg exp_avg_sq (updated) grad step (one i64, advanced): it always runs */
    [RW_K_ADAM_STEP] = {{V_INOUT, V_INOUT, V_INOUT, I, V_INOUT}, {K_FLOAT, K_FLOAT, K_FLOAT, K_FLOAT, K_IDX},
                        {D_REF, D_REF, D_REF, D_REF, D_I64}, 0, 4, false, false, false},
    /* gx x? y? gy: the reference is gy */
    [RW_K_UNARY_BACKWARD] = {{O, I, I, I}, {K_FLOAT, K_FLOAT, K_FLOAT, K_FLOAT},
                             {D_REF, D_REF, D_REF, D_REF}, 3, 0, false, false, false},
#undef F8
#undef R8
};
#undef O
#undef I
#undef X

/* The kinds the op-carrying slots need, by op (src/ops/unary.c, binary.c, compare.c). */
static uint8_t rs_unary_kind(int op) {
    switch (op) {
    case EM_UN_NEG: case EM_UN_ABS: case EM_UN_RELU: case EM_UN_SIGN: case EM_UN_FLOOR:
    case EM_UN_CEIL: case EM_UN_ROUND: case EM_UN_CLAMP: return K_NUMERIC;
    case EM_UN_LOGICAL_NOT: return K_BOOL;
    default: return K_FLOAT;
    }
}

static uint8_t rs_binary_kind(int op) {
    switch (op) {
    case EM_BIN_POW: return K_FLOAT;
    case EM_BIN_EQ: case EM_BIN_NE: return K_ANY;
    case EM_BIN_AND: case EM_BIN_OR: case EM_BIN_XOR: return K_BOOL;
    case EM_BIN_ATAN2: return K_FLOAT;
    default: return K_NUMERIC;
    }
}

/* The slot's row with its op's kinds and output dtype filled in. */
static rs_rule rs_rule_of(const rw_kernel *k) {
    rs_rule r = rs_rules[k->slot];
    switch (k->slot) {
    case RW_K_RANDOM: /* uniform and normal make floats; bernoulli any dtype */
        r.kind[0] = k->sub == EM_RAND_BERNOULLI ? K_ANY : K_FLOAT;
        break;
    case RW_K_UNARY:
        r.kind[1] = rs_unary_kind(k->sub);
        if (em_unary_op_is_bool((em_unary_op)k->sub)) r.dt[0] = D_BOOL; /* isnan ... */
        break;
    case RW_K_BINARY: case RW_K_BINARY_SCALAR:
        r.kind[1] = rs_binary_kind(k->sub);
        if (k->slot == RW_K_BINARY) r.kind[2] = r.kind[1];
        if (em_binary_op_is_bool((em_binary_op)k->sub)) r.dt[0] = D_BOOL; /* comparisons, logical */
        break;
    case RW_K_REDUCE:
        if (k->sub == EM_RED_MEAN || k->sub == EM_RED_VAR || k->sub == EM_RED_LOGSUMEXP)
            r.kind[1] = K_FLOAT;
        if (k->sub == EM_RED_ARGMAX || k->sub == EM_RED_ARGMIN) r.dt[0] = D_I64;
        if (k->sub == EM_RED_SUM || k->sub == EM_RED_PROD) r.dt[0] = D_WIDE;
        break;
    case RW_K_CUMULATIVE: /* cumprod: numeric in, wide values; cummax / cummin: any */
        if (k->sub == EM_CUM_PROD) {
            r.kind[2] = K_NUMERIC;
            r.dt[0] = D_WIDE;
        }
        break;
    default: break;
    }
    return r;
}

static bool rs_kind_ok(uint8_t kind, em_dtype dt) {
    em_kind k = em_dtype_kind(dt);
    switch (kind) {
    case K_FLOAT: return k == EM_KIND_FLOAT;
    case K_NUMERIC: return k == EM_KIND_FLOAT || k == EM_KIND_INT;
    case K_BOOL: return k == EM_KIND_BOOL;
    case K_IDX: return dt == EM_I64 || dt == EM_I32;
    case K_QUANT: return dt == EM_I8 || k == EM_KIND_QUANTIZED;
    case K_FQ: return k == EM_KIND_FLOAT || dt == EM_I8 || k == EM_KIND_QUANTIZED;
    default: return k != EM_KIND_QUANTIZED;
    }
}

static const char *rs_kind_name(uint8_t kind) {
    static const char *n[] = {"non-quantized", "float", "float or int", "bool", "i64 or i32",
                              "quantized (i8, q8 or q4)", "float or quantized"};
    return n[kind];
}

/* The lowest and highest element of a view's hull (its dims of size 0 taken as 1) and its
 * element count; false when any of them, or their byte positions, overflow. */
static bool rs_hull(const rw_view *v, int64_t *lo, int64_t *hi, int64_t *numel) {
    int64_t a = v->offset, b = v->offset, n = 1, e;
    size_t es = em_dtype_size(v->dtype);
    for (int d = 0; d < v->rank; d++) {
        if (v->shape[d] == 0) n = 0;
        if (v->shape[d] <= 1) continue;
        if (n && __builtin_mul_overflow(n, v->shape[d], &n)) return false;
        if (__builtin_mul_overflow(v->shape[d] - 1, v->strides[d], &e)) return false;
        if (e < 0 ? __builtin_add_overflow(a, e, &a) : __builtin_add_overflow(b, e, &b))
            return false;
    }
    if (__builtin_mul_overflow(a, (int64_t)es, &e) || __builtin_add_overflow(b, 1, &e) ||
        __builtin_mul_overflow(e, (int64_t)es, &e))
        return false;
    *lo = a;
    *hi = b;
    *numel = n;
    return true;
}

/* The kernel view of wire view w (checked) over buffer buf. */
static void rs_fill_view(em_view *out, const rw_view *w, void *buf) {
    memset(out, 0, sizeof *out);
    out->buf = buf;
    out->dtype = w->dtype;
    out->rank = w->rank;
    out->offset = w->offset;
    for (int d = 0; d < w->rank; d++) {
        out->shape[d] = w->shape[d];
        out->strides[d] = w->strides[d];
    }
}

/* Resolves view i of k into an em_view on the hosted device, checking its bounds: a non-empty
 * view's every element inside the buffer, an empty one's offset at most the buffer's end.
 * *blo / *bhi: the bytes the view may touch ([0, 0) when empty). */
static em_status rs_view(rs_ctx *c, const rw_view *w, int i, em_view *out, int64_t *blo,
                         int64_t *bhi) {
    void *buf;
    size_t bytes;
    if (!c->lookup(c->conn, w->id, &buf, &bytes))
        return rs_bad(c, EM_ERR_ARG, "view %d names buffer %llu, which does not exist", i,
                      (unsigned long long)w->id);
    int64_t lo, hi, n, es = (int64_t)em_dtype_size(w->dtype);
    if (!rs_hull(w, &lo, &hi, &n))
        return rs_bad(c, EM_ERR_ARG, "view %d reaches outside buffer %llu (its extent overflows)",
                      i, (unsigned long long)w->id);
    bool inside = n > 0 ? lo >= 0 && (uint64_t)((hi + 1) * es) <= bytes
                        : w->offset >= 0 && w->offset <= (int64_t)(bytes / (size_t)es);
    if (!inside)
        return rs_bad(c, EM_ERR_ARG, "view %d reaches outside buffer %llu (%zu bytes)", i,
                      (unsigned long long)w->id, bytes);
    rs_fill_view(out, w, buf);
    *blo = n > 0 ? lo * es : 0;
    *bhi = n > 0 ? (hi + 1) * es : 0;
    return EM_OK;
}

/* ---- the quantized slots' schemes and block views ---- */

static bool rs_qblocks(const em_quant_scheme *s) {
    return s->kind == EM_QK_BLOCK || s->kind == EM_QK_BLOCK_MIN;
}

/* The dtype of a view of scheme s: its storage for the block kinds, i8 for the per-tensor
 * ones (backend.h). */
static em_dtype rs_qdtype(const em_quant_scheme *s) { return rs_qblocks(s) ? s->storage : EM_I8; }

static const char *rs_qkind_name(em_quant_kind k) {
    static const char *n[] = {"affine", "symmetric", "block", "block_min"};
    return (unsigned)k <= EM_QK_BLOCK_MIN ? n[k] : "?";
}

static bool rs_why(char *why, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool rs_why(char *why, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return false;
}

/* Scheme `which` of a quantized slot's call (quantize, dequantize: 0; qmatmul: 0 for a, 1 for
 * b) from its ints and doubles (wire.h: rw_scheme_put), checked as hostile input: a known
 * storage / kind pair; block kinds: f32 or f16 scales, blocks of 32, an axis below 8 (the
 * view's rank is checked with the view); per-tensor kinds: a scale that is a finite f32 > 0
 * (quantize's with a finite reciprocal: its kernel multiplies by 1 / scale, and the core
 * gives it one of at least FLT_MIN), a zero point in the storage's range (0 for symmetric). *s gets the fields its kind uses, the others 0. qmatmul's `as` may be
 * absent (all zeros: *present false). False with a reason in why. */
static bool rs_scheme_get(const rw_kernel *k, int which, em_quant_scheme *s, bool *present,
                          char *why, size_t cap) {
    const int64_t *I = k->ints + which * RW_SCHEME_INTS;
    const double scale = k->doubles[which];
    const char *name = k->slot != RW_K_QMATMUL ? "the scheme" : which ? "b's scheme" : "a's scheme";
    memset(s, 0, sizeof *s);
    *present = true;
    if (k->slot == RW_K_QMATMUL && which == 0 && I[0] == 0) { /* no scheme: a is f32 */
        *present = false;
        bool zero = scale == 0;
        for (int i = 1; i < RW_SCHEME_INTS; i++) zero = zero && I[i] == 0;
        return zero || rs_why(why, cap, "%s has storage 0 (none: a is f32) and other fields set", name);
    }
    if (I[0] != EM_Q8 && I[0] != EM_Q4)
        return rs_why(why, cap, "%s: storage %lld is not q8 or q4", name, (long long)I[0]);
    if (I[1] < EM_QK_AFFINE || I[1] > EM_QK_BLOCK_MIN)
        return rs_why(why, cap, "%s: unknown kind %lld", name, (long long)I[1]);
    s->storage = (em_dtype)I[0];
    s->kind = (em_quant_kind)I[1];
    if ((s->kind == EM_QK_SYMMETRIC && s->storage != EM_Q8) ||
        (s->kind == EM_QK_BLOCK_MIN && s->storage != EM_Q4))
        return rs_why(why, cap, "%s: %s is not a scheme of %s storage", name,
                      rs_qkind_name(s->kind), em_dtype_name(s->storage));
    if (rs_qblocks(s)) {
        if (I[3] != EM_F32 && I[3] != EM_F16)
            return rs_why(why, cap, "%s: block scales are f32 or f16, got dtype %lld", name,
                          (long long)I[3]);
        if (I[4] != EM_QBLOCK)
            return rs_why(why, cap, "%s: blocks of %lld elements, not %d", name, (long long)I[4],
                          EM_QBLOCK);
        if (I[5] < 0 || I[5] >= RW_MAX_RANK)
            return rs_why(why, cap, "%s: block axis %lld out of range", name, (long long)I[5]);
        s->scale_dtype = (em_dtype)I[3];
        s->block = EM_QBLOCK;
        s->axis = (int32_t)I[5];
        return true;
    }
    const bool inverted = k->slot == RW_K_QUANTIZE;
    if (!(scale > 0 && scale <= FLT_MAX) || (double)(float)scale != scale ||
        (inverted && !isfinite(1.0f / (float)scale)))
        return rs_why(why, cap, "%s: the scale must be a finite f32 > 0%s, got %g", name,
                      inverted ? " with a finite reciprocal" : "", scale);
    const int64_t lo = s->kind == EM_QK_SYMMETRIC ? 0 : s->storage == EM_Q8 ? -128 : -8;
    const int64_t hi = s->kind == EM_QK_SYMMETRIC ? 0 : s->storage == EM_Q8 ? 127 : 7;
    if (I[2] < lo || I[2] > hi)
        return rs_why(why, cap, "%s: zero point %lld outside [%lld, %lld]", name, (long long)I[2],
                      (long long)lo, (long long)hi);
    s->scale = (float)scale;
    s->zero_point = (int32_t)I[2];
    return true;
}

/* Which scheme of a quantized slot's call view i is quantized with (as rs_scheme_get's
 * which), or -1 for a float view. */
static int rs_scheme_index(rw_slot slot, int i) {
    switch (slot) {
    case RW_K_QUANTIZE: return i == 0 ? 0 : -1;
    case RW_K_DEQUANTIZE: return i == 1 ? 0 : -1;
    case RW_K_QMATMUL: return i == 1 ? 0 : i == 2 ? 1 : -1;
    default: return -1;
    }
}

/* Resolves view i, a q8 / q4 block view of scheme s, as rs_view does an element view:
 * backend.h's rule (the block axis has stride 1 and a size that is a multiple of 32; every
 * other dim of size > 1 has a stride that is a multiple of 32, and so is the offset), then
 * every byte of every block it reaches inside the buffer: the block of element offset e
 * starts at byte (e / 32) * em_quant_block_bytes(s), so a non-empty view touches bytes
 * [(lo / 32) * bb, (hi / 32 + 1) * bb) where lo and hi are its least and greatest element
 * offsets (overflow-checked), and an empty one's offset must be at most the buffer's end. */
static em_status rs_block_view(rs_ctx *c, const rw_view *w, int i, const em_quant_scheme *s,
                               em_view *out, int64_t *blo, int64_t *bhi) {
    void *buf;
    size_t bytes;
    if (!c->lookup(c->conn, w->id, &buf, &bytes))
        return rs_bad(c, EM_ERR_ARG, "view %d names buffer %llu, which does not exist", i,
                      (unsigned long long)w->id);
    if (!rs_qblocks(s) || w->dtype != s->storage)
        return rs_bad(c, EM_ERR_DTYPE, "view %d is %s, its scheme %s %s", i,
                      em_dtype_name(w->dtype), em_dtype_name(s->storage), rs_qkind_name(s->kind));
    const int ax = s->axis;
    if (ax >= w->rank)
        return rs_bad(c, EM_ERR_ARG, "view %d: block axis %d of a %d-d view", i, ax, w->rank);
    if (w->strides[ax] != 1 || w->shape[ax] % EM_QBLOCK != 0)
        return rs_bad(c, EM_ERR_ARG, "view %d: its block axis %d must have stride 1 and a size "
                      "that is a multiple of 32 (stride %lld, size %lld)", i, ax,
                      (long long)w->strides[ax], (long long)w->shape[ax]);
    if (w->offset % EM_QBLOCK != 0)
        return rs_bad(c, EM_ERR_ARG, "view %d: offset %lld cuts a block (not a multiple of 32)",
                      i, (long long)w->offset);
    for (int d = 0; d < w->rank; d++)
        if (d != ax && w->shape[d] > 1 && w->strides[d] % EM_QBLOCK != 0)
            return rs_bad(c, EM_ERR_ARG, "view %d: dim %d's stride %lld cuts a block (not a "
                          "multiple of 32)", i, d, (long long)w->strides[d]);
    const int64_t bb = (int64_t)em_quant_block_bytes(s);
    int64_t lo, hi, n, first = 0, end = 0;
    bool ok = bb > 0 && rs_hull(w, &lo, &hi, &n);
    if (ok && n > 0)
        ok = lo >= 0 && !__builtin_mul_overflow(lo / EM_QBLOCK, bb, &first) &&
             !__builtin_mul_overflow(hi / EM_QBLOCK + 1, bb, &end) && (uint64_t)end <= bytes;
    else if (ok)
        ok = !__builtin_mul_overflow(w->offset / EM_QBLOCK, bb, &first) && (uint64_t)first <= bytes;
    if (!ok)
        return rs_bad(c, EM_ERR_ARG, "view %d reaches outside buffer %llu (%zu bytes, blocks of "
                      "%lld bytes)", i, (unsigned long long)w->id, bytes, (long long)bb);
    rs_fill_view(out, w, buf);
    *blo = n > 0 ? first : 0;
    *bhi = n > 0 ? end : 0;
    return EM_OK;
}

static bool rs_same_view(const em_view *a, const em_view *b) {
    if (a->buf != b->buf || a->dtype != b->dtype || a->rank != b->rank || a->offset != b->offset)
        return false;
    for (int d = 0; d < a->rank; d++)
        if (a->shape[d] != b->shape[d] || (a->shape[d] > 1 && a->strides[d] != b->strides[d]))
            return false;
    return true;
}


static bool rs_contiguous(const em_view *v);
static int64_t rs_numel_v(const em_view *v);

/* Rule 2 of the table for kernel k's views v (NULL: absent). */
static em_status rs_check_dtypes(rs_ctx *c, const rs_rule *r, em_view *v[RW_MAX_VIEWS]) {
    const em_view *ref = v[r->ref];
    for (int i = 0; i < RW_MAX_VIEWS; i++) {
        if (!v[i]) continue;
        em_dtype dt = v[i]->dtype;
        if (!rs_kind_ok(r->kind[i], dt))
            return rs_bad(c, EM_ERR_DTYPE, "view %d: expected a %s tensor, got %s", i,
                          rs_kind_name(r->kind[i]), em_dtype_name(dt));
        em_dtype want = dt;
        switch (r->dt[i]) {
        case D_REF: want = ref->dtype; break;
        case D_I64: want = EM_I64; break;
        case D_BOOL: want = EM_BOOL; break;
        case D_WIDE: want = em_dtype_kind(ref->dtype) == EM_KIND_INT ? EM_I64 : ref->dtype; break;
        default: break;
        }
        if (dt != want)
            return rs_bad(c, EM_ERR_DTYPE, "view %d is %s where %s is expected (view %d is %s)", i,
                          em_dtype_name(dt), em_dtype_name(want), r->ref, em_dtype_name(ref->dtype));
    }
    return EM_OK;
}

/* Rule 3: outputs contiguous and apart from every other view. */
static em_status rs_check_outputs(rs_ctx *c, const rs_rule *r, em_view *v[RW_MAX_VIEWS],
                                  const int64_t blo[RW_MAX_VIEWS], const int64_t bhi[RW_MAX_VIEWS]) {
    for (int i = 0; i < RW_MAX_VIEWS; i++) {
        if (!v[i] || (r->role[i] != V_OUT && r->role[i] != V_INOUT)) continue;
        if (!r->strided_out && rs_numel_v(v[i]) > 0 && !rs_contiguous(v[i]))
            return rs_bad(c, EM_ERR_ARG, "output view %d is not contiguous", i);
        for (int j = 0; j < RW_MAX_VIEWS; j++) {
            if (j == i || !v[j] || v[j]->buf != v[i]->buf) continue;
            if (bhi[i] <= blo[j] || bhi[j] <= blo[i]) continue; /* apart (or one is empty) */
            if (r->in_place && r->role[j] == V_IN && rs_same_view(v[i], v[j])) continue;
            return rs_bad(c, EM_ERR_ARG, "output view %d overlaps view %d in buffer", i, j);
        }
    }
    return EM_OK;
}

static bool rs_same_shape(const em_view *a, const em_view *b) {
    if (a->rank != b->rank) return false;
    for (int d = 0; d < a->rank; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

static bool rs_contiguous(const em_view *v) {
    int64_t s = 1;
    for (int d = v->rank - 1; d >= 0; d--) {
        if (v->shape[d] != 1 && v->strides[d] != s) return false;
        s *= v->shape[d];
    }
    return true;
}

static int64_t rs_numel_v(const em_view *v) {
    int64_t n = 1;
    for (int d = 0; d < v->rank; d++) n *= v->shape[d]; /* checked by rs_view */
    return n;
}

/* Every index of `ix` (an I64 or I32 view) is in [0, limit). Reads the view's elements
 * through the hosted backend when its memory is not host memory. */
static em_status rs_check_indices(rs_ctx *c, const em_view *ix, int64_t limit) {
    if (ix->dtype != EM_I64 && ix->dtype != EM_I32)
        return rs_bad(c, EM_ERR_DTYPE, "index view is %s, not i64 or i32", em_dtype_name(ix->dtype));
    int64_t n = rs_numel_v(ix);
    if (n == 0) return EM_OK;
    rw_view w = {0};
    w.rank = ix->rank;
    w.offset = ix->offset;
    memcpy(w.shape, ix->shape, sizeof w.shape);
    memcpy(w.strides, ix->strides, sizeof w.strides);
    int64_t lo = 0, hi = 0;
    if (!rs_extent(&w, &lo, &hi)) return rs_bad(c, EM_ERR_SHAPE, "index view overflows");
    size_t es = em_dtype_size(ix->dtype);
    const char *base;
    char *tmp = NULL;
    if (c->h->ops->caps & EM_CAP_HOST_MEMORY) {
        base = (const char *)ix->buf + (size_t)lo * es;
    } else {
        size_t len = (size_t)(hi - lo + 1) * es;
        tmp = malloc(len);
        if (!tmp) return rs_bad(c, EM_ERR_NOMEM, "out of memory checking indices");
        em_status s = c->h->ops->read(c->h->ctx, ix->buf, (size_t)lo * es, tmp, len);
        if (s != EM_OK) {
            free(tmp);
            return rs_bad(c, s, "reading indices: %s", em_last_error());
        }
        base = tmp;
    }
    /* dense indices (the common case): their least and greatest in one vectorized pass; the
     * element by element walk below only finds the bad one to name */
    if (rs_contiguous(ix)) {
        const char *p = base + (size_t)(ix->offset - lo) * es;
        int64_t mn = INT64_MAX, mx = INT64_MIN;
        if (es == 8)
            for (int64_t i = 0; i < n; i++) {
                int64_t v;
                memcpy(&v, p + (size_t)i * 8, 8);
                mn = v < mn ? v : mn;
                mx = v > mx ? v : mx;
            }
        else
            for (int64_t i = 0; i < n; i++) {
                int32_t v;
                memcpy(&v, p + (size_t)i * 4, 4);
                mn = v < mn ? v : mn;
                mx = v > mx ? v : mx;
            }
        if (mn >= 0 && mx < limit) {
            free(tmp);
            return EM_OK;
        }
    }
    int64_t idx[RW_MAX_RANK] = {0};
    em_status s = EM_OK;
    for (int64_t i = 0; i < n && s == EM_OK; i++) {
        int64_t off = ix->offset - lo;
        for (int d = 0; d < ix->rank; d++) off += idx[d] * ix->strides[d];
        int64_t v;
        if (es == 8) {
            memcpy(&v, base + (size_t)off * 8, 8);
        } else {
            int32_t v32;
            memcpy(&v32, base + (size_t)off * 4, 4);
            v = v32;
        }
        if (v < 0 || v >= limit)
            s = rs_bad(c, EM_ERR_ARG, "index %lld out of range [0, %lld)", (long long)v,
                       (long long)limit);
        for (int d = ix->rank - 1; d >= 0; d--) {
            if (++idx[d] < ix->shape[d]) break;
            idx[d] = 0;
        }
    }
    free(tmp);
    return s;
}

/* conv / pool argument sanity (the 9 wire ints). */
static em_status rs_conv_args(rs_ctx *c, const int64_t *i, em_conv_args *a) {
    for (int k = 0; k < 2; k++) {
        a->stride[k] = i[k];
        a->padding[k] = i[2 + k];
        a->dilation[k] = i[4 + k];
        a->output_padding[k] = i[6 + k];
        if (a->stride[k] < 1 || a->dilation[k] < 1 || a->padding[k] < 0 ||
            a->output_padding[k] < 0 || a->stride[k] > (1 << 24) || a->dilation[k] > (1 << 24) ||
            a->padding[k] > (1 << 24) || a->output_padding[k] > (1 << 24))
            return rs_bad(c, EM_ERR_ARG, "bad stride, padding, dilation or output padding");
    }
    a->groups = i[8];
    if (a->groups < 1) return rs_bad(c, EM_ERR_ARG, "groups %lld", (long long)a->groups);
    return EM_OK;
}

static em_status rs_pool_args(rs_ctx *c, const int64_t *i, em_pool_args *a) {
    for (int k = 0; k < 2; k++) {
        a->kernel[k] = i[k];
        a->stride[k] = i[2 + k];
        a->padding[k] = i[4 + k];
        a->dilation[k] = i[6 + k];
        if (a->kernel[k] < 1 || a->stride[k] < 1 || a->dilation[k] < 1 || a->padding[k] < 0 ||
            a->kernel[k] > (1 << 24) || a->stride[k] > (1 << 24) || a->dilation[k] > (1 << 24) ||
            a->padding[k] > (1 << 24))
            return rs_bad(c, EM_ERR_ARG, "bad kernel, stride, padding or dilation");
    }
    a->count_include_pad = i[8] != 0;
    return EM_OK;
}

static bool rs_float(em_dtype dt) {
    return dt == EM_F32 || dt == EM_F64 || dt == EM_F16 || dt == EM_BF16;
}

static bool rs_rank4(const em_view *v) { return v && v->rank == 4; }

/* Conv layouts: x [N, C, H, W]; for conv2d (and its weight gradient) w [O, C/g, KH, KW] and
 * y [N, O, OH, OW]; for conv_transpose2d w [C, O/g, KH, KW]. The output's spatial size must be
 * the one the core computes (src/ops/conv.c: conv_shape), and x and w have no empty non-batch
 * dims; every step is overflow-checked. */
static em_status rs_conv_shapes(rs_ctx *c, const em_view *y, const em_view *x, const em_view *w,
                                const em_view *bias, const em_conv_args *a, bool transpose) {
    if (!rs_rank4(y) || !rs_rank4(x) || !rs_rank4(w)) return rs_bad(c, EM_ERR_SHAPE, "views must be 4-d");
    int64_t C = x->shape[1], O = y->shape[1], g = a->groups, t;
    bool ok = y->shape[0] == x->shape[0] && C % g == 0 && O % g == 0;
    if (transpose) ok = ok && w->shape[0] == C && !__builtin_mul_overflow(w->shape[1], g, &t) && t == O;
    else ok = ok && w->shape[0] == O && !__builtin_mul_overflow(w->shape[1], g, &t) && t == C;
    if (bias) ok = ok && bias->rank == 1 && bias->shape[0] == O;
    for (int d = 1; d < 4; d++) ok = ok && x->shape[d] > 0;
    for (int i = 0; ok && i < 2; i++) {
        int64_t in = x->shape[2 + i], kk = w->shape[2 + i], ek, o;
        if (kk < 1 || __builtin_mul_overflow(kk - 1, a->dilation[i], &ek) || ek > INT64_MAX / 4)
            return rs_bad(c, EM_ERR_SHAPE, "bad kernel size");
        ek += 1;
        if (!transpose) {
            int64_t padded = in + 2 * a->padding[i]; /* in < 2^62, padding <= 2^24 */
            if (padded < ek) return rs_bad(c, EM_ERR_SHAPE, "the padded input is smaller than the kernel");
            o = (padded - ek) / a->stride[i] + 1;
        } else {
            if (__builtin_mul_overflow(in - 1, a->stride[i], &o) ||
                __builtin_add_overflow(o, ek + a->output_padding[i] - 2 * a->padding[i], &o))
                return rs_bad(c, EM_ERR_SHAPE, "the output size overflows");
        }
        ok = o >= 1 && o == y->shape[2 + i];
    }
    return ok ? EM_OK : rs_bad(c, EM_ERR_SHAPE, "inconsistent conv shapes");
}

/* src/ops/pool.c's output size along one axis (ceil: PyTorch's ceil_mode). */
static int64_t rs_pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil) {
    int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil ? s - 1 : 0);
    int64_t q = num >= 0 ? num / s : -((-num + s - 1) / s);
    int64_t o = q + 1;
    if (ceil && o > 0 && (o - 1) * s >= in + p) o--;
    return o;
}

/* x [N, C, H, W] (no empty non-batch dim) pooled into y [N, C, OH, OW]: OH and OW are what the
 * core computes with ceil_mode off or on; padding at most half the kernel; avg pools have
 * dilation 1. */
static em_status rs_pool_shapes(rs_ctx *c, const em_view *y, const em_view *x,
                                const em_pool_args *a, bool max) {
    if (!rs_rank4(y) || !rs_rank4(x) || y->shape[0] != x->shape[0] || y->shape[1] != x->shape[1])
        return rs_bad(c, EM_ERR_SHAPE, "inconsistent pool shapes");
    for (int d = 1; d < 4; d++)
        if (x->shape[d] < 1) return rs_bad(c, EM_ERR_SHAPE, "an empty non-batch dim");
    for (int i = 0; i < 2; i++) {
        if (a->padding[i] > a->kernel[i] / 2 || (!max && a->dilation[i] != 1))
            return rs_bad(c, EM_ERR_ARG, "bad padding or dilation");
        int64_t o = y->shape[2 + i], in = x->shape[2 + i];
        if (o < 1 || (o != rs_pool_out(in, a->kernel[i], a->stride[i], a->padding[i], a->dilation[i], false) &&
                      o != rs_pool_out(in, a->kernel[i], a->stride[i], a->padding[i], a->dilation[i], true)))
            return rs_bad(c, EM_ERR_SHAPE, "the pooled size does not match");
    }
    return EM_OK;
}

/* The shape and dtype relations the kernels rely on. v[i] NULL when absent. */
/* The normalization slots (include/ember/backend.h's contracts): x as [N, C, S] (batch and
 * group norm) or [rows, n] (rms norm), outputs of its shape, per-channel and per-row views of
 * theirs, finite scalars. */
static bool rs_is_vec(const em_view *v, int64_t n) {
    return !v || (v->rank == 1 && v->shape[0] == n);
}

static em_status rs_check_norm(rs_ctx *c, const rw_kernel *k, em_view *v[RW_MAX_VIEWS]) {
    const int64_t *I = k->ints;
    const double *D = k->doubles;
    for (int i = 0; i < rw_slots[k->slot].ndoubles; i++)
        if (!isfinite(D[i]) || D[i] < 0)
            return rs_bad(c, EM_ERR_ARG, "its scalars must be finite and >= 0");
    switch (k->slot) {
    case RW_K_BATCH_NORM: case RW_K_BATCH_NORM_BACKWARD: case RW_K_GROUP_NORM: {
        const int xi = k->slot == RW_K_BATCH_NORM_BACKWARD ? 4 : 3;
        const em_view *x = v[xi];
        if (x->rank != 3) return rs_bad(c, EM_ERR_SHAPE, "x must be [N, C, S]");
        const int64_t N = x->shape[0], C = x->shape[1], S = x->shape[2];
        if (k->slot == RW_K_BATCH_NORM_BACKWARD) {
            if (!rs_same_shape(v[3], x) || (v[0] && !rs_same_shape(v[0], x)))
                return rs_bad(c, EM_ERR_SHAPE, "gy and gx must have x's shape");
            for (int i = 1; i < 8; i++)
                if (i != 3 && i != 4 && !rs_is_vec(v[i], C))
                    return rs_bad(c, EM_ERR_SHAPE, "view %d must be [%lld]", i, (long long)C);
            return EM_OK;
        }
        if (!rs_same_shape(v[0], x)) return rs_bad(c, EM_ERR_SHAPE, "out must have x's shape");
        for (int i = 4; i < rw_slots[k->slot].nviews; i++)
            if (!rs_is_vec(v[i], C))
                return rs_bad(c, EM_ERR_SHAPE, "view %d must be [%lld]", i, (long long)C);
        if (k->slot == RW_K_GROUP_NORM) {
            const int64_t G = I[0];
            if (G < 1 || C % G != 0)
                return rs_bad(c, EM_ERR_ARG, "%lld groups do not divide %lld channels",
                              (long long)G, (long long)C);
            for (int i = 1; i < 3; i++)
                if (v[i] && (v[i]->rank != 2 || v[i]->shape[0] != N || v[i]->shape[1] != G))
                    return rs_bad(c, EM_ERR_SHAPE, "view %d must be [N, groups]", i);
            return EM_OK;
        }
        for (int i = 1; i < 3; i++)
            if (!rs_is_vec(v[i], C))
                return rs_bad(c, EM_ERR_SHAPE, "view %d must be [%lld]", i, (long long)C);
        if (!v[6] != !v[7])
            return rs_bad(c, EM_ERR_ARG, "running_mean and running_var: both or neither");
        if (I[0] == 0 && !v[6]) return rs_bad(c, EM_ERR_ARG, "eval needs the running statistics");
        if (I[0] != 0 && N * S < 2) return rs_bad(c, EM_ERR_ARG, "training needs N * S >= 2");
        return EM_OK;
    }
    case RW_K_RMS_NORM: {
        const em_view *x = v[2];
        if (x->rank != 2 || x->shape[1] != I[0] || I[0] < 1 || !rs_same_shape(v[0], x))
            return rs_bad(c, EM_ERR_SHAPE, "x and out must be [rows, %lld]", (long long)I[0]);
        if (!rs_is_vec(v[1], x->shape[0]) || !rs_is_vec(v[3], I[0]))
            return rs_bad(c, EM_ERR_SHAPE, "save_invrms must be [rows], weight [%lld]",
                          (long long)I[0]);
        return EM_OK;
    }
    default: return rs_bad(c, EM_ERR_ARG, "unknown slot");
    }
}

/* Every value of x (an f32 view) is finite: quantize converts x * (1 / d) to an integer,
 * which has no value for NaN or an infinity (the core refuses them before the call; a
 * client's core is not trusted to have). Read through the backend when its memory is not
 * host memory. */
static em_status rs_check_finite(rs_ctx *c, const em_view *x, const char *name) {
    const int64_t n = rs_numel_v(x);
    if (n == 0) return EM_OK;
    rw_view w = {0};
    w.rank = x->rank;
    w.offset = x->offset;
    memcpy(w.shape, x->shape, sizeof w.shape);
    memcpy(w.strides, x->strides, sizeof w.strides);
    int64_t lo = 0, hi = 0;
    if (!rs_extent(&w, &lo, &hi)) return rs_bad(c, EM_ERR_SHAPE, "%s overflows", name);
    const char *base;
    char *tmp = NULL;
    if (c->h->ops->caps & EM_CAP_HOST_MEMORY) {
        base = (const char *)x->buf + (size_t)lo * 4;
    } else {
        size_t len = (size_t)(hi - lo + 1) * 4;
        tmp = malloc(len);
        if (!tmp) return rs_bad(c, EM_ERR_NOMEM, "out of memory checking %s", name);
        em_status s = c->h->ops->read(c->h->ctx, x->buf, (size_t)lo * 4, tmp, len);
        if (s != EM_OK) {
            free(tmp);
            return rs_bad(c, s, "reading %s: %s", name, em_last_error());
        }
        base = tmp;
    }
    int64_t idx[RW_MAX_RANK] = {0};
    em_status s = EM_OK;
    for (int64_t i = 0; i < n && s == EM_OK; i++) {
        int64_t off = x->offset - lo;
        for (int d = 0; d < x->rank; d++) off += idx[d] * x->strides[d];
        float f;
        memcpy(&f, base + (size_t)off * 4, 4);
        if (!isfinite(f))
            s = rs_bad(c, EM_ERR_ARG, "%s holds a non-finite value (%g, element %lld), which has "
                       "no int8 quantization", name, (double)f, (long long)i);
        for (int d = x->rank - 1; d >= 0; d--) {
            if (++idx[d] < x->shape[d]) break;
            idx[d] = 0;
        }
    }
    free(tmp);
    return s;
}

/* The quantized slots' schemes, dtypes and shapes (backend.h), and the values quantize
 * converts (qmatmul's f32 a may hold anything: a block with a NaN or an infinity makes its
 * row's outputs NaN, as backend.h says). */
static em_status rs_check_quant(rs_ctx *c, const rw_kernel *k, em_view *v[RW_MAX_VIEWS]) {
    em_quant_scheme s[2];
    bool p[2] = {false, false};
    char why[200];
    for (int w = 0; w < (k->slot == RW_K_QMATMUL ? 2 : 1); w++)
        if (!rs_scheme_get(k, w, &s[w], &p[w], why, sizeof why))
            return rs_bad(c, EM_ERR_ARG, "%s", why);
    switch (k->slot) {
    case RW_K_QUANTIZE: /* out x */
        if (v[1]->dtype != EM_F32)
            return rs_bad(c, EM_ERR_DTYPE, "x must be f32, got %s", em_dtype_name(v[1]->dtype));
        if (v[0]->dtype != rs_qdtype(&s[0]))
            return rs_bad(c, EM_ERR_DTYPE, "out is %s where a %s %s scheme needs %s",
                          em_dtype_name(v[0]->dtype), em_dtype_name(s[0].storage),
                          rs_qkind_name(s[0].kind), em_dtype_name(rs_qdtype(&s[0])));
        if (!rs_same_shape(v[0], v[1])) return rs_bad(c, EM_ERR_SHAPE, "shapes differ");
        if (rs_qblocks(&s[0]) && s[0].axis != v[0]->rank - 1)
            return rs_bad(c, EM_ERR_ARG, "blocks run along the last dim (axis %d of a %d-d "
                          "tensor)", (int)s[0].axis, v[0]->rank);
        return rs_check_finite(c, v[1], "x");
    case RW_K_DEQUANTIZE: /* out q */
        if (v[0]->dtype != EM_F32)
            return rs_bad(c, EM_ERR_DTYPE, "out must be f32, got %s", em_dtype_name(v[0]->dtype));
        if (v[1]->dtype != rs_qdtype(&s[0]))
            return rs_bad(c, EM_ERR_DTYPE, "q is %s where a %s %s scheme needs %s",
                          em_dtype_name(v[1]->dtype), em_dtype_name(s[0].storage),
                          rs_qkind_name(s[0].kind), em_dtype_name(rs_qdtype(&s[0])));
        return rs_same_shape(v[0], v[1]) ? EM_OK : rs_bad(c, EM_ERR_SHAPE, "shapes differ");
    case RW_K_QMATMUL: { /* out a b */
        const em_view *o = v[0], *a = v[1], *b = v[2];
        if (o->rank != 2 || a->rank != 2 || b->rank != 2)
            return rs_bad(c, EM_ERR_SHAPE, "out, a and b must be 2-d");
        const int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1];
        if (b->shape[0] != K || o->shape[0] != M || o->shape[1] != N)
            return rs_bad(c, EM_ERR_SHAPE, "matrix dims do not fit");
        if (K < 1) return rs_bad(c, EM_ERR_SHAPE, "K must be at least 1");
        if (o->dtype != EM_F32)
            return rs_bad(c, EM_ERR_DTYPE, "out must be f32, got %s", em_dtype_name(o->dtype));
        if (b->dtype != rs_qdtype(&s[1]))
            return rs_bad(c, EM_ERR_DTYPE, "b is %s where its %s %s scheme needs %s",
                          em_dtype_name(b->dtype), em_dtype_name(s[1].storage),
                          rs_qkind_name(s[1].kind), em_dtype_name(rs_qdtype(&s[1])));
        if (a->dtype != (p[0] ? rs_qdtype(&s[0]) : EM_F32))
            return rs_bad(c, EM_ERR_DTYPE, "a is %s where %s is needed", em_dtype_name(a->dtype),
                          em_dtype_name(p[0] ? rs_qdtype(&s[0]) : EM_F32));
        if (p[0]) { /* the int8 product of two quantized operands */
            const bool ok_a = s[0].kind == EM_QK_SYMMETRIC ||
                              (s[0].kind == EM_QK_AFFINE && s[0].zero_point == 0) ||
                              (s[0].kind == EM_QK_BLOCK && s[0].storage == EM_Q8 && s[0].axis == 1);
            const bool ok_b = s[1].storage == EM_Q8 &&
                              (s[1].kind == EM_QK_SYMMETRIC ||
                               (s[1].kind == EM_QK_AFFINE && s[1].zero_point == 0) ||
                               (s[1].kind == EM_QK_BLOCK && s[1].axis == 0));
            if (!ok_a || !ok_b)
                return rs_bad(c, EM_ERR_ARG, "a quantized a needs a symmetric, zero-point-0 "
                              "affine or q8 block (along K) scheme, and b then a q8 one of those "
                              "(blocks along K)");
        }
        return EM_OK;
    }
    default: return rs_bad(c, EM_ERR_ARG, "unknown slot");
    }
}

static em_status rs_check(rs_ctx *c, const rw_kernel *k, em_view *v[RW_MAX_VIEWS]) {
    const int64_t *I = k->ints;
    switch (k->slot) {
    case RW_K_FILL: case RW_K_RANDOM: return EM_OK;
    case RW_K_ARANGE:
        return v[0]->rank == 1 ? EM_OK : rs_bad(c, EM_ERR_SHAPE, "out must be 1-d");
    case RW_K_COPY: case RW_K_UNARY: case RW_K_BINARY_SCALAR:
        if (!rs_same_shape(v[0], v[1])) return rs_bad(c, EM_ERR_SHAPE, "shapes differ");
        /* integer clamp bounds are converted to int64: they must be numbers */
        if (k->slot == RW_K_UNARY && k->sub == EM_UN_CLAMP && !rs_float(v[1]->dtype) &&
            (k->doubles[0] != k->doubles[0] || k->doubles[1] != k->doubles[1]))
            return rs_bad(c, EM_ERR_ARG, "NaN clamp bound for an integer tensor");
        return EM_OK;
    case RW_K_BINARY:
        if (!rs_same_shape(v[0], v[1]) || !rs_same_shape(v[0], v[2]))
            return rs_bad(c, EM_ERR_SHAPE, "shapes differ");
        return v[1]->dtype == v[2]->dtype ? EM_OK : rs_bad(c, EM_ERR_DTYPE, "input dtypes differ");
    case RW_K_WHERE:
        for (int i = 1; i < 4; i++)
            if (!rs_same_shape(v[0], v[i])) return rs_bad(c, EM_ERR_SHAPE, "shapes differ");
        return v[0]->dtype == v[2]->dtype && v[0]->dtype == v[3]->dtype
                   ? EM_OK : rs_bad(c, EM_ERR_DTYPE, "dtypes differ");
    case RW_K_REDUCE: {
        bool needs = k->sub == EM_RED_MAX || k->sub == EM_RED_MIN || k->sub == EM_RED_ARGMAX ||
                     k->sub == EM_RED_ARGMIN;
        if (needs && (I[0] < 0 ? rs_numel_v(v[1]) == 0 : I[0] < v[1]->rank && v[1]->shape[I[0]] == 0))
            return rs_bad(c, EM_ERR_SHAPE, "an empty extent (the reduction has no identity)");
        if (I[0] < 0) return rs_numel_v(v[0]) == 1 ? EM_OK : rs_bad(c, EM_ERR_SHAPE, "out must have 1 element");
        if (I[0] >= v[1]->rank || v[0]->rank != v[1]->rank) return rs_bad(c, EM_ERR_SHAPE, "bad dim or rank");
        for (int d = 0; d < v[1]->rank; d++)
            if (v[0]->shape[d] != (d == I[0] ? 1 : v[1]->shape[d]))
                return rs_bad(c, EM_ERR_SHAPE, "out's shape does not match");
        return EM_OK;
    }
    case RW_K_CUMSUM: case RW_K_SOFTMAX:
        if (!rs_same_shape(v[0], v[1])) return rs_bad(c, EM_ERR_SHAPE, "shapes differ");
        /* the core passes 0-d tensors as 1-d views */
        return I[0] >= 0 && I[0] < v[1]->rank ? EM_OK : rs_bad(c, EM_ERR_ARG, "bad dim");
    case RW_K_MATMUL: {
        int r = v[0]->rank;
        if (r < 2 || v[1]->rank != r || v[2]->rank != r) return rs_bad(c, EM_ERR_SHAPE, "ranks differ or < 2");
        for (int d = 0; d < r - 2; d++)
            if (v[1]->shape[d] != v[0]->shape[d] || v[2]->shape[d] != v[0]->shape[d])
                return rs_bad(c, EM_ERR_SHAPE, "batch dims differ");
        if (v[1]->shape[r - 2] != v[0]->shape[r - 2] || v[2]->shape[r - 1] != v[0]->shape[r - 1] ||
            v[1]->shape[r - 1] != v[2]->shape[r - 2])
            return rs_bad(c, EM_ERR_SHAPE, "matrix dims do not fit");
        return v[1]->dtype == v[2]->dtype ? EM_OK : rs_bad(c, EM_ERR_DTYPE, "input dtypes differ");
    }
    case RW_K_GATHER: case RW_K_INDEX_SELECT: case RW_K_SCATTER_ADD: {
        /* gather: out in index; index_select: out in index; scatter_add: out index src */
        const em_view *out = v[0], *in = k->slot == RW_K_SCATTER_ADD ? v[2] : v[1];
        const em_view *ix = k->slot == RW_K_SCATTER_ADD ? v[1] : v[2];
        int r = out->rank;
        if (in->rank != r || I[0] < 0 || I[0] >= r) return rs_bad(c, EM_ERR_SHAPE, "bad rank or dim");
        int dim = (int)I[0];
        if (k->slot == RW_K_INDEX_SELECT) {
            if (ix->rank != 1 || (r && out->shape[dim] != ix->shape[0])) return rs_bad(c, EM_ERR_SHAPE, "bad index");
            for (int d = 0; d < r; d++)
                if (d != dim && out->shape[d] > in->shape[d]) return rs_bad(c, EM_ERR_SHAPE, "shapes do not fit");
            return rs_check_indices(c, ix, r ? in->shape[dim] : 1);
        }
        if (ix->rank != r) return rs_bad(c, EM_ERR_SHAPE, "index rank differs");
        if (k->slot == RW_K_GATHER) {
            if (!rs_same_shape(out, ix)) return rs_bad(c, EM_ERR_SHAPE, "index shape differs from out");
            for (int d = 0; d < r; d++)
                if (d != dim && out->shape[d] > in->shape[d]) return rs_bad(c, EM_ERR_SHAPE, "shapes do not fit");
            return rs_check_indices(c, ix, r ? in->shape[dim] : 1);
        }
        for (int d = 0; d < r; d++)
            if (ix->shape[d] > in->shape[d] || (d != dim && ix->shape[d] > out->shape[d]))
                return rs_bad(c, EM_ERR_SHAPE, "shapes do not fit");
        return rs_check_indices(c, ix, r ? out->shape[dim] : 1);
    }
    case RW_K_SORT:
        if (!v[0] && !v[1]) return rs_bad(c, EM_ERR_ARG, "neither values nor indices");
        if ((v[0] && !rs_same_shape(v[0], v[2])) || (v[1] && !rs_same_shape(v[1], v[2])))
            return rs_bad(c, EM_ERR_SHAPE, "shapes differ");
        if (v[1] && v[1]->dtype != EM_I64) return rs_bad(c, EM_ERR_DTYPE, "indices must be i64");
        return I[0] >= 0 && I[0] < v[2]->rank ? EM_OK : rs_bad(c, EM_ERR_ARG, "bad dim");
    case RW_K_CONV2D: case RW_K_CONV_TRANSPOSE2D: case RW_K_CONV2D_WEIGHT_GRAD: {
        em_conv_args a = {0};
        em_status s = rs_conv_args(c, I, &a);
        if (s != EM_OK) return s;
        bool tr = k->slot == RW_K_CONV_TRANSPOSE2D;
        for (int i = 0; i < 2; i++)
            if (tr ? a.output_padding[i] >= a.stride[i] && a.output_padding[i] >= a.dilation[i]
                   : a.output_padding[i] != 0)
                return rs_bad(c, EM_ERR_ARG, "bad output padding");
        if (k->slot == RW_K_CONV2D_WEIGHT_GRAD) /* gw x gy */
            return rs_conv_shapes(c, v[2], v[1], v[0], NULL, &a, false);
        return rs_conv_shapes(c, v[0], v[1], v[2], v[3], &a, tr);
    }
    case RW_K_MAX_POOL2D: case RW_K_AVG_POOL2D: case RW_K_AVG_POOL2D_BACKWARD: {
        em_pool_args a = {0};
        em_status s = rs_pool_args(c, I, &a);
        if (s != EM_OK) return s;
        /* avg_pool2d_backward: gx (x's shape) from gy (the pooled shape) */
        s = k->slot == RW_K_AVG_POOL2D_BACKWARD
                ? rs_pool_shapes(c, v[1], v[0], &a, false)
                : rs_pool_shapes(c, v[0], k->slot == RW_K_MAX_POOL2D ? v[2] : v[1], &a,
                                 k->slot == RW_K_MAX_POOL2D);
        if (s != EM_OK) return s;
        if (k->slot == RW_K_MAX_POOL2D && v[1] && (!rs_same_shape(v[0], v[1]) || v[1]->dtype != EM_I64))
            return rs_bad(c, EM_ERR_SHAPE, "indices must be i64 of out's shape");
        return EM_OK;
    }
    case RW_K_ADAPTIVE_AVG_POOL2D: case RW_K_ADAPTIVE_AVG_POOL2D_BACKWARD:
        if (!rs_rank4(v[0]) || !rs_rank4(v[1]) || v[0]->shape[0] != v[1]->shape[0] ||
            v[0]->shape[1] != v[1]->shape[1])
            return rs_bad(c, EM_ERR_SHAPE, "inconsistent pool shapes");
        for (int d = 2; d < 4; d++)
            if (v[0]->shape[d] < 1 || v[1]->shape[d] < 1)
                return rs_bad(c, EM_ERR_SHAPE, "an empty spatial dim");
        return EM_OK;
    case RW_K_CUMULATIVE:
        if ((k->sub == EM_CUM_PROD) != (v[1] == NULL))
            return rs_bad(c, EM_ERR_ARG, "indices must be given for cummax / cummin only");
        if (!rs_same_shape(v[0], v[2]) || (v[1] && !rs_same_shape(v[1], v[2])))
            return rs_bad(c, EM_ERR_SHAPE, "shapes differ");
        /* the core passes 0-d tensors as 1-d views */
        return I[0] >= 0 && I[0] < v[2]->rank ? EM_OK : rs_bad(c, EM_ERR_ARG, "bad dim");
    case RW_K_LAYER_NORM: {
        int64_t n = I[0];
        if (v[1]->rank != 2 || !rs_same_shape(v[0], v[1]) || v[1]->shape[1] != n || n < 1)
            return rs_bad(c, EM_ERR_SHAPE, "x must be [rows, %lld] like out", (long long)n);
        for (int i = 2; i < 4; i++)
            if (v[i] && (v[i]->rank != 1 || v[i]->shape[0] != n))
                return rs_bad(c, EM_ERR_SHAPE, "weight and bias must be [%lld]", (long long)n);
        return EM_OK;
    }
    case RW_K_BATCH_NORM: case RW_K_BATCH_NORM_BACKWARD: case RW_K_GROUP_NORM:
    case RW_K_RMS_NORM:
        return rs_check_norm(c, k, v);
    case RW_K_ADAM_STEP: {
        const double *D = k->doubles; /* lr beta1 beta2 eps weight_decay grad_scale */
        if (!(D[0] >= 0) || !isfinite(D[0]) || !(D[3] >= 0) || !isfinite(D[3]) ||
            !(D[4] >= 0) || !isfinite(D[4]) || !isfinite(D[5]))
            return rs_bad(c, EM_ERR_ARG, "lr, eps and weight_decay must be finite and >= 0, "
                                         "grad_scale finite");
        if (!(D[1] >= 0 && D[1] < 1) || !(D[2] >= 0 && D[2] < 1))
            return rs_bad(c, EM_ERR_ARG, "betas must be in [0, 1)");
        for (int i = 1; i < 4; i++)
            if (!rs_same_shape(v[i], v[0])) return rs_bad(c, EM_ERR_SHAPE, "view %d differs from param", i);
        return rs_numel_v(v[4]) == 1 ? EM_OK : rs_bad(c, EM_ERR_SHAPE, "the step count is one i64");
    }
    case RW_K_UNARY_BACKWARD: {
        const char r = emi_unary_backward_reads((em_unary_op)k->sub);
        if (!r) return rs_bad(c, EM_ERR_ARG, "unary op %d has no fused gradient", k->sub);
        if ((r == 'x') != (v[1] != NULL) || (r == 'y') != (v[2] != NULL))
            return rs_bad(c, EM_ERR_ARG, "the gradient of unary op %d reads %s only", k->sub,
                          r == 'x' ? "x" : "y");
        for (int i = 1; i < 4; i++)
            if (v[i] && !rs_same_shape(v[i], v[0])) return rs_bad(c, EM_ERR_SHAPE, "shapes differ");
        if (k->sub == EM_UN_CLAMP && (isnan(k->doubles[0]) || isnan(k->doubles[1])))
            return rs_bad(c, EM_ERR_ARG, "clamp's bounds are NaN");
        return EM_OK;
    }
    case RW_K_QUANTIZE: case RW_K_DEQUANTIZE: case RW_K_QMATMUL:
        return rs_check_quant(c, k, v);
    case RW_K_COUNT: break;
    }
    return rs_bad(c, EM_ERR_ARG, "unknown slot");
}

/* Calls a quantized slot (its schemes were checked). */
static em_status rs_call_quant(const em_backend_ops *o, void *x, const rw_kernel *k,
                               em_view *v[RW_MAX_VIEWS]) {
    em_quant_scheme s[2];
    bool p[2] = {false, false};
    char why[200];
    for (int w = 0; w < (k->slot == RW_K_QMATMUL ? 2 : 1); w++)
        if (!rs_scheme_get(k, w, &s[w], &p[w], why, sizeof why))
            return em_backend_set_error(EM_ERR_ARG, "%s", why);
    switch (k->slot) {
    case RW_K_QUANTIZE: return o->quantize(x, v[0], v[1], &s[0]);
    case RW_K_DEQUANTIZE: return o->dequantize(x, v[0], v[1], &s[0]);
    default: return o->qmatmul(x, v[0], v[1], p[0] ? &s[0] : NULL, v[2], &s[1]);
    }
}

/* Calls the slot. */
static em_status rs_call(const rs_host *h, const rw_kernel *k, em_view *v[RW_MAX_VIEWS]) {
    const em_backend_ops *o = h->ops;
    void *x = h->ctx;
    const int64_t *I = k->ints;
    const double *D = k->doubles;
    em_conv_args ca;
    em_pool_args pa;
    for (int i = 0; i < 2; i++) {
        ca.stride[i] = I[i]; ca.padding[i] = I[2 + i]; ca.dilation[i] = I[4 + i];
        ca.output_padding[i] = I[6 + i];
        pa.kernel[i] = I[i]; pa.stride[i] = I[2 + i]; pa.padding[i] = I[4 + i];
        pa.dilation[i] = I[6 + i];
    }
    ca.groups = I[8];
    pa.count_include_pad = I[8] != 0;
    switch (k->slot) {
    case RW_K_FILL: return o->fill(x, v[0], D[0]);
    case RW_K_ARANGE: return o->arange(x, v[0], D[0], D[1]);
    case RW_K_RANDOM: return o->random(x, (em_random_op)k->sub, v[0], (uint64_t)I[0], D);
    case RW_K_COPY: return o->copy(x, v[0], v[1]);
    case RW_K_UNARY: return o->unary(x, (em_unary_op)k->sub, v[0], v[1], D);
    case RW_K_BINARY: return o->binary(x, (em_binary_op)k->sub, v[0], v[1], v[2]);
    case RW_K_BINARY_SCALAR: return o->binary_scalar(x, (em_binary_op)k->sub, v[0], v[1], D[0]);
    case RW_K_WHERE: return o->where(x, v[0], v[1], v[2], v[3]);
    case RW_K_REDUCE: /* every dim was range-checked; any negative one means "all" */
        return o->reduce(x, (em_reduce_op)k->sub, v[0], v[1], I[0] < 0 ? -1 : (int)I[0], D);
    case RW_K_CUMSUM: return o->cumsum(x, v[0], v[1], (int)I[0]);
    case RW_K_SOFTMAX: return o->softmax(x, v[0], v[1], (int)I[0], I[1] != 0);
    case RW_K_MATMUL: return o->matmul(x, v[0], v[1], v[2]);
    case RW_K_GATHER: return o->gather(x, v[0], v[1], (int)I[0], v[2]);
    case RW_K_SCATTER_ADD: return o->scatter_add(x, v[0], (int)I[0], v[1], v[2]);
    case RW_K_INDEX_SELECT: return o->index_select(x, v[0], v[1], (int)I[0], v[2]);
    case RW_K_SORT: return o->sort(x, v[0], v[1], v[2], (int)I[0], I[1] != 0);
    case RW_K_CONV2D: return o->conv2d(x, v[0], v[1], v[2], v[3], &ca);
    case RW_K_CONV_TRANSPOSE2D: return o->conv_transpose2d(x, v[0], v[1], v[2], v[3], &ca);
    case RW_K_MAX_POOL2D: return o->max_pool2d(x, v[0], v[1], v[2], &pa);
    case RW_K_AVG_POOL2D: return o->avg_pool2d(x, v[0], v[1], &pa);
    case RW_K_ADAPTIVE_AVG_POOL2D: return o->adaptive_avg_pool2d(x, v[0], v[1]);
    case RW_K_CONV2D_WEIGHT_GRAD: return o->conv2d_weight_grad(x, v[0], v[1], v[2], &ca);
    case RW_K_AVG_POOL2D_BACKWARD: return o->avg_pool2d_backward(x, v[0], v[1], &pa);
    case RW_K_ADAPTIVE_AVG_POOL2D_BACKWARD: return o->adaptive_avg_pool2d_backward(x, v[0], v[1]);
    case RW_K_LAYER_NORM: return o->layer_norm(x, v[0], v[1], v[2], v[3], I[0], D[0]);
    case RW_K_BATCH_NORM:
        return o->batch_norm(x, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], I[0] != 0, D[0],
                             D[1]);
    case RW_K_BATCH_NORM_BACKWARD:
        return o->batch_norm_backward(x, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7],
                                      I[0] != 0);
    case RW_K_GROUP_NORM: return o->group_norm(x, v[0], v[1], v[2], v[3], v[4], v[5], I[0], D[0]);
    case RW_K_RMS_NORM: return o->rms_norm(x, v[0], v[1], v[2], v[3], I[0], D[0]);
    case RW_K_CUMULATIVE:
        return o->cumulative(x, (em_cum_op)k->sub, v[0], v[1], v[2], (int)I[0]);
    case RW_K_ADAM_STEP: return rs_adam_step(o, x, k, v);
    case RW_K_UNARY_BACKWARD:
        return o->unary_backward(x, (em_unary_op)k->sub, v[0], v[1], v[2], v[3], D);
    case RW_K_QUANTIZE: case RW_K_DEQUANTIZE: case RW_K_QMATMUL: return rs_call_quant(o, x, k, v);
    case RW_K_COUNT: break;
    }
    return em_backend_set_error(EM_ERR_ARG, "unknown slot");
}

/* Whether the hosted table has the slot. */
static bool rs_has(const em_backend_ops *o, rw_slot s) {
    if (s == RW_K_ADAM_STEP) /* the device's kernel, or its composition (src/wire/adam.c) */
        return o->adam_step || (o->unary && o->binary && o->binary_scalar);
    if (s == RW_K_UNARY_BACKWARD) /* as eagerly: the fused kernel only while fusing is on */
        return o->unary_backward && emi_fused_on();
#define P(slot) (const void *)o->slot
    const void *p[RW_K_COUNT] = {
        [RW_K_FILL] = P(fill), [RW_K_ARANGE] = P(arange), [RW_K_RANDOM] = P(random),
        [RW_K_COPY] = P(copy), [RW_K_UNARY] = P(unary), [RW_K_BINARY] = P(binary),
        [RW_K_BINARY_SCALAR] = P(binary_scalar), [RW_K_WHERE] = P(where),
        [RW_K_REDUCE] = P(reduce), [RW_K_CUMSUM] = P(cumsum), [RW_K_SOFTMAX] = P(softmax),
        [RW_K_MATMUL] = P(matmul), [RW_K_GATHER] = P(gather),
        [RW_K_SCATTER_ADD] = P(scatter_add), [RW_K_INDEX_SELECT] = P(index_select),
        [RW_K_SORT] = P(sort), [RW_K_CONV2D] = P(conv2d),
        [RW_K_CONV_TRANSPOSE2D] = P(conv_transpose2d), [RW_K_MAX_POOL2D] = P(max_pool2d),
        [RW_K_AVG_POOL2D] = P(avg_pool2d), [RW_K_ADAPTIVE_AVG_POOL2D] = P(adaptive_avg_pool2d),
        [RW_K_CONV2D_WEIGHT_GRAD] = P(conv2d_weight_grad),
        [RW_K_AVG_POOL2D_BACKWARD] = P(avg_pool2d_backward),
        [RW_K_ADAPTIVE_AVG_POOL2D_BACKWARD] = P(adaptive_avg_pool2d_backward),
        [RW_K_LAYER_NORM] = P(layer_norm), [RW_K_CUMULATIVE] = P(cumulative),
        [RW_K_QUANTIZE] = P(quantize), [RW_K_DEQUANTIZE] = P(dequantize),
        [RW_K_QMATMUL] = P(qmatmul), [RW_K_BATCH_NORM] = P(batch_norm),
        [RW_K_BATCH_NORM_BACKWARD] = P(batch_norm_backward), [RW_K_GROUP_NORM] = P(group_norm),
        [RW_K_RMS_NORM] = P(rms_norm)};
#undef P
    return p[s] != NULL;
}

bool rs_implements(const em_backend_ops *o, rw_slot s) { return (unsigned)s < RW_K_COUNT && rs_has(o, s); }

uint32_t rs_slot_mask(const em_backend_ops *o) {
    uint32_t m = 0;
    for (int s = 0; s < RW_K_REMOTE_COUNT; s++)
        if (rs_has(o, (rw_slot)s)) m |= 1u << s;
    return m;
}

/* Rules 1 and 2 for k: the slot implemented, its views resolved into views[] (v[i] points at
 * the present ones) and their dtypes checked; *r its rule; *empty when its primary output has
 * no element (then nothing runs). */
static em_status rs_prologue(rs_ctx *c, const rw_kernel *k, rs_rule *r,
                             em_view views[RW_MAX_VIEWS], em_view *v[RW_MAX_VIEWS],
                             int64_t blo[RW_MAX_VIEWS], int64_t bhi[RW_MAX_VIEWS], bool *empty) {
    em_status s = EM_OK;
    if (!rs_has(c->h->ops, k->slot))
        return rs_bad(c, EM_ERR_UNSUPPORTED, "the device does not implement it");
    *r = rs_rule_of(k);
    /* the quantized slots' schemes first: a block view's bytes depend on its scheme */
    em_quant_scheme qs[2];
    bool qp[2] = {false, false};
    const bool quant = rw_slot_is_quant(k->slot);
    char why[200];
    for (int w = 0; quant && w < (k->slot == RW_K_QMATMUL ? 2 : 1); w++)
        if (!rs_scheme_get(k, w, &qs[w], &qp[w], why, sizeof why))
            return rs_bad(c, EM_ERR_ARG, "%s", why);
    for (int i = 0; i < rw_slots[k->slot].nviews && s == EM_OK; i++)
        if (k->mask & (1u << i)) {
            const rw_view *w = &k->views[i];
            const int qi = quant ? rs_scheme_index(k->slot, i) : -1;
            if (w->dtype != EM_Q8 && w->dtype != EM_Q4)
                s = rs_view(c, w, i, &views[i], &blo[i], &bhi[i]);
            else if (qi < 0 || !qp[qi]) /* the decoder lets q8 / q4 in the quantized slots only */
                s = rs_bad(c, EM_ERR_DTYPE, "view %d is %s without a scheme", i,
                           em_dtype_name(w->dtype));
            else
                s = rs_block_view(c, w, i, &qs[qi], &views[i], &blo[i], &bhi[i]);
            v[i] = &views[i];
        }
    if (s == EM_OK && k->slot == RW_K_SORT && !v[0] && !v[1])
        return rs_bad(c, EM_ERR_ARG, "neither values nor indices");
    if (s == EM_OK) s = rs_check_dtypes(c, r, v);
    if (s == EM_OK) *empty = rs_numel_v(v[r->primary]) == 0;
    return s;
}

em_status rs_resolve_kernel(const rs_host *h, rs_lookup_fn lookup, void *conn,
                            const rw_kernel *k, em_view views[RW_MAX_VIEWS], rs_mode *mode,
                            char *msg, size_t cap) {
    rs_ctx c = {h, lookup, conn, msg, cap, rw_slots[k->slot].name};
    em_view *v[RW_MAX_VIEWS] = {0};
    int64_t blo[RW_MAX_VIEWS] = {0}, bhi[RW_MAX_VIEWS] = {0};
    rs_rule r;
    bool empty = false;
    em_status s = rs_prologue(&c, k, &r, views, v, blo, bhi, &empty);
    if (s != EM_OK) return s;
    if (empty) {
        *mode = RS_SKIP;
        return EM_OK;
    }
    /* index values (and the values quantize converts) change from run to run: those slots
     * are checked at each one */
    if (k->slot == RW_K_GATHER || k->slot == RW_K_INDEX_SELECT || k->slot == RW_K_SCATTER_ADD ||
        k->slot == RW_K_QUANTIZE) {
        *mode = RS_CHECKED;
        return EM_OK;
    }
    s = rs_check(&c, k, v);
    if (s == EM_OK) s = rs_check_outputs(&c, &r, v, blo, bhi);
    if (s != EM_OK) return s;
    *mode = RS_DIRECT;
    const bool strided = ((h->ops->caps & EM_CAP_STRIDED_INPUTS) && !r.contig_in) || rw_slot_is_quant(k->slot);
    for (int i = 0; i < RW_MAX_VIEWS && !strided && k->slot != RW_K_COPY; i++)
        if (v[i] && (r.role[i] == V_IN || r.role[i] == V_INDEX) && !rs_contiguous(v[i]))
            *mode = RS_CHECKED; /* its inputs are copied contiguous at each run */
    return EM_OK;
}

em_status rs_run_resolved(const rs_host *h, const rw_kernel *k, em_view views[RW_MAX_VIEWS],
                          char *msg, size_t cap) {
    em_view *v[RW_MAX_VIEWS] = {0};
    for (int i = 0; i < RW_MAX_VIEWS; i++)
        if (k->mask & (1u << i)) v[i] = &views[i];
    if (h->serialize) pthread_mutex_lock((pthread_mutex_t *)h->lock);
    em_status s = rs_call(h, k, v);
    if (h->serialize) pthread_mutex_unlock((pthread_mutex_t *)h->lock);
    if (s != EM_OK) snprintf(msg, cap, "%s: %s", rw_slots[k->slot].name, em_last_error());
    return s;
}

em_status rs_exec_kernel(const rs_host *h, rs_lookup_fn lookup, void *conn, const rw_kernel *k,
                         char *msg, size_t cap) {
    rs_ctx c = {h, lookup, conn, msg, cap, rw_slots[k->slot].name};
    em_view views[RW_MAX_VIEWS], *v[RW_MAX_VIEWS] = {0};
    int64_t blo[RW_MAX_VIEWS] = {0}, bhi[RW_MAX_VIEWS] = {0};
    rs_rule r;
    bool empty = false;
    em_status s = rs_prologue(&c, k, &r, views, v, blo, bhi, &empty);
    if (s != EM_OK || empty) return s; /* the core runs nothing on an empty output */
    if (h->serialize) pthread_mutex_lock((pthread_mutex_t *)h->lock);
    /* shapes and index values, then the outputs: no kernel runs between these checks and the
     * slot's call, and no output the call writes can reach an index */
    s = rs_check(&c, k, v);
    if (s == EM_OK) s = rs_check_outputs(&c, &r, v, blo, bhi);
    if (s != EM_OK) {
        if (h->serialize) pthread_mutex_unlock((pthread_mutex_t *)h->lock);
        return s;
    }
    /* inputs the kernel needs contiguous (a backend without EM_CAP_STRIDED_INPUTS, or a slot
     * that always does): copies; copy's own input may be any view */
    void *tmp[RW_MAX_VIEWS] = {0};
    bool strided = ((h->ops->caps & EM_CAP_STRIDED_INPUTS) && !r.contig_in) || rw_slot_is_quant(k->slot);
    for (int i = 0; i < RW_MAX_VIEWS && s == EM_OK && !strided && k->slot != RW_K_COPY; i++) {
        if (!v[i] || (r.role[i] != V_IN && r.role[i] != V_INDEX) || rs_contiguous(v[i])) continue;
        size_t n = (size_t)rs_numel_v(v[i]) * em_dtype_size(v[i]->dtype);
        s = h->ops->alloc(h->ctx, n ? n : 1, &tmp[i]);
        if (s != EM_OK) break;
        em_view cv = *v[i];
        cv.buf = tmp[i];
        cv.offset = 0;
        int64_t st = 1;
        for (int d = cv.rank - 1; d >= 0; d--) {
            cv.strides[d] = st;
            st *= cv.shape[d];
        }
        if (n) s = h->ops->copy(h->ctx, &cv, v[i]);
        views[i] = cv;
    }
    if (s == EM_OK) s = rs_call(h, k, v);
    if (s != EM_OK) snprintf(msg, cap, "%s: %s", c.slot, em_last_error());
    for (int i = 0; i < RW_MAX_VIEWS; i++)
        if (tmp[i]) h->ops->free(h->ctx, tmp[i]);
    if (h->serialize) pthread_mutex_unlock((pthread_mutex_t *)h->lock);
    return s;
}
