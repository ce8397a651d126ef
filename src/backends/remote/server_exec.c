/*
 * server_exec.c — the server runs a client's kernel message on the hosted device.
 *
 * A client is authenticated but its messages are not trusted: before a kernel runs, every view
 * must name a buffer of the connection and lie inside it, and the shapes, dtypes and index
 * values the kernels rely on for memory safety must hold (the checks the client's core made,
 * made again). A failure is reported to the client at its next read or sync.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/remote/server.h"

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

static int64_t rs_numel(const rw_view *v) {
    int64_t n = 1;
    for (int d = 0; d < v->rank; d++) {
        if (v->shape[d] == 0) return 0;
        if (__builtin_mul_overflow(n, v->shape[d], &n)) return -1;
    }
    return n;
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

/* Resolves view i of k into an em_view on the hosted device, checking its bounds. */
static em_status rs_view(rs_ctx *c, const rw_view *w, int i, em_view *out, size_t *buf_bytes) {
    void *buf;
    size_t bytes;
    if (!c->lookup(c->conn, w->id, &buf, &bytes))
        return rs_bad(c, EM_ERR_ARG, "view %d names buffer %llu, which does not exist", i,
                      (unsigned long long)w->id);
    int64_t n = rs_numel(w), lo, hi;
    if (n < 0) return rs_bad(c, EM_ERR_SHAPE, "view %d: shape overflows", i);
    if (n > 0) {
        size_t es = em_dtype_size(w->dtype);
        int64_t end;
        if (!rs_extent(w, &lo, &hi) || lo < 0 || __builtin_add_overflow(hi, 1, &end) ||
            __builtin_mul_overflow(end, (int64_t)es, &end) || (uint64_t)end > bytes)
            return rs_bad(c, EM_ERR_ARG, "view %d reaches outside buffer %llu (%zu bytes)", i,
                          (unsigned long long)w->id, bytes);
    }
    memset(out, 0, sizeof *out);
    out->buf = buf;
    out->dtype = w->dtype;
    out->rank = w->rank;
    out->offset = w->offset;
    for (int d = 0; d < w->rank; d++) {
        out->shape[d] = w->shape[d];
        out->strides[d] = w->strides[d];
    }
    if (buf_bytes) *buf_bytes = bytes;
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
static em_status rs_check_indices(rs_ctx *c, const em_view *ix, int64_t limit, size_t bytes) {
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
    (void)bytes;
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
 * y [N, O, ...]; for conv_transpose2d w [C, O/g, KH, KW]. */
static em_status rs_conv_shapes(rs_ctx *c, const em_view *y, const em_view *x, const em_view *w,
                                const em_view *bias, int64_t g, bool transpose) {
    if (!rs_rank4(y) || !rs_rank4(x) || !rs_rank4(w)) return rs_bad(c, EM_ERR_SHAPE, "views must be 4-d");
    int64_t C = x->shape[1], O = y->shape[1];
    bool ok = y->shape[0] == x->shape[0] && C % g == 0 && O % g == 0;
    if (transpose) ok = ok && w->shape[0] == C && w->shape[1] * g == O;
    else ok = ok && w->shape[0] == O && w->shape[1] * g == C;
    if (bias) ok = ok && bias->rank == 1 && bias->shape[0] == O;
    return ok ? EM_OK : rs_bad(c, EM_ERR_SHAPE, "inconsistent conv shapes");
}

/* The shape and dtype relations the kernels rely on. v[i] NULL when absent. */
static em_status rs_check(rs_ctx *c, const rw_kernel *k, em_view *v[RW_MAX_VIEWS],
                          const size_t bytes[RW_MAX_VIEWS]) {
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
        if (I[0] < 0) return rs_numel_v(v[0]) == 1 ? EM_OK : rs_bad(c, EM_ERR_SHAPE, "out must have 1 element");
        if (I[0] >= v[1]->rank || v[0]->rank != v[1]->rank) return rs_bad(c, EM_ERR_SHAPE, "bad dim or rank");
        for (int d = 0; d < v[1]->rank; d++)
            if (v[0]->shape[d] != (d == I[0] ? 1 : v[1]->shape[d]))
                return rs_bad(c, EM_ERR_SHAPE, "out's shape does not match");
        return EM_OK;
    }
    case RW_K_CUMSUM: case RW_K_SOFTMAX:
        if (!rs_same_shape(v[0], v[1])) return rs_bad(c, EM_ERR_SHAPE, "shapes differ");
        return I[0] >= 0 && I[0] < (v[1]->rank ? v[1]->rank : 1) ? EM_OK : rs_bad(c, EM_ERR_ARG, "bad dim");
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
        if (in->rank != r || I[0] < 0 || I[0] >= (r ? r : 1)) return rs_bad(c, EM_ERR_SHAPE, "bad rank or dim");
        int dim = (int)I[0];
        if (k->slot == RW_K_INDEX_SELECT) {
            if (ix->rank != 1 || (r && out->shape[dim] != ix->shape[0])) return rs_bad(c, EM_ERR_SHAPE, "bad index");
            for (int d = 0; d < r; d++)
                if (d != dim && out->shape[d] > in->shape[d]) return rs_bad(c, EM_ERR_SHAPE, "shapes do not fit");
            return rs_check_indices(c, ix, r ? in->shape[dim] : 1, bytes[2]);
        }
        if (ix->rank != r) return rs_bad(c, EM_ERR_SHAPE, "index rank differs");
        if (k->slot == RW_K_GATHER) {
            if (!rs_same_shape(out, ix)) return rs_bad(c, EM_ERR_SHAPE, "index shape differs from out");
            for (int d = 0; d < r; d++)
                if (d != dim && out->shape[d] > in->shape[d]) return rs_bad(c, EM_ERR_SHAPE, "shapes do not fit");
            return rs_check_indices(c, ix, r ? in->shape[dim] : 1, bytes[2]);
        }
        for (int d = 0; d < r; d++)
            if (ix->shape[d] > in->shape[d] || (d != dim && ix->shape[d] > out->shape[d]))
                return rs_bad(c, EM_ERR_SHAPE, "shapes do not fit");
        return rs_check_indices(c, ix, r ? out->shape[dim] : 1, bytes[1]);
    }
    case RW_K_SORT:
        if (!v[0] && !v[1]) return rs_bad(c, EM_ERR_ARG, "neither values nor indices");
        if ((v[0] && !rs_same_shape(v[0], v[2])) || (v[1] && !rs_same_shape(v[1], v[2])))
            return rs_bad(c, EM_ERR_SHAPE, "shapes differ");
        if (v[1] && v[1]->dtype != EM_I64) return rs_bad(c, EM_ERR_DTYPE, "indices must be i64");
        return I[0] >= 0 && I[0] < (v[2]->rank ? v[2]->rank : 1) ? EM_OK : rs_bad(c, EM_ERR_ARG, "bad dim");
    case RW_K_CONV2D: case RW_K_CONV_TRANSPOSE2D: case RW_K_CONV2D_WEIGHT_GRAD: {
        em_conv_args a = {0};
        em_status s = rs_conv_args(c, I, &a);
        if (s != EM_OK) return s;
        if (k->slot == RW_K_CONV2D_WEIGHT_GRAD) /* gw x gy */
            return rs_conv_shapes(c, v[2], v[1], v[0], NULL, a.groups, false);
        return rs_conv_shapes(c, v[0], v[1], v[2], v[3], a.groups, k->slot == RW_K_CONV_TRANSPOSE2D);
    }
    case RW_K_MAX_POOL2D: case RW_K_AVG_POOL2D: case RW_K_AVG_POOL2D_BACKWARD: {
        em_pool_args a = {0};
        em_status s = rs_pool_args(c, I, &a);
        if (s != EM_OK) return s;
        const em_view *x = k->slot == RW_K_MAX_POOL2D ? v[2] : v[1];
        if (!rs_rank4(v[0]) || !rs_rank4(x) || v[0]->shape[0] != x->shape[0] ||
            v[0]->shape[1] != x->shape[1])
            return rs_bad(c, EM_ERR_SHAPE, "inconsistent pool shapes");
        if (k->slot == RW_K_MAX_POOL2D && v[1] && (!rs_same_shape(v[0], v[1]) || v[1]->dtype != EM_I64))
            return rs_bad(c, EM_ERR_SHAPE, "indices must be i64 of out's shape");
        return EM_OK;
    }
    case RW_K_ADAPTIVE_AVG_POOL2D: case RW_K_ADAPTIVE_AVG_POOL2D_BACKWARD:
        if (!rs_rank4(v[0]) || !rs_rank4(v[1]) || v[0]->shape[0] != v[1]->shape[0] ||
            v[0]->shape[1] != v[1]->shape[1])
            return rs_bad(c, EM_ERR_SHAPE, "inconsistent pool shapes");
        return EM_OK;
    case RW_K_LAYER_NORM: {
        int64_t n = I[0];
        if (v[1]->rank != 2 || !rs_same_shape(v[0], v[1]) || v[1]->shape[1] != n || n < 1)
            return rs_bad(c, EM_ERR_SHAPE, "x must be [rows, %lld] like out", (long long)n);
        for (int i = 2; i < 4; i++)
            if (v[i] && (v[i]->rank != 1 || v[i]->shape[0] != n))
                return rs_bad(c, EM_ERR_SHAPE, "weight and bias must be [%lld]", (long long)n);
        return EM_OK;
    }
    case RW_K_COUNT: break;
    }
    return rs_bad(c, EM_ERR_ARG, "unknown slot");
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
    case RW_K_COUNT: break;
    }
    return em_backend_set_error(EM_ERR_ARG, "unknown slot");
}

/* Whether the hosted table has the slot. */
static bool rs_has(const em_backend_ops *o, rw_slot s) {
    const void *p[RW_K_COUNT] = {
        (const void *)o->fill, (const void *)o->arange, (const void *)o->random,
        (const void *)o->copy, (const void *)o->unary, (const void *)o->binary,
        (const void *)o->binary_scalar, (const void *)o->where, (const void *)o->reduce,
        (const void *)o->cumsum, (const void *)o->softmax, (const void *)o->matmul,
        (const void *)o->gather, (const void *)o->scatter_add, (const void *)o->index_select,
        (const void *)o->sort, (const void *)o->conv2d, (const void *)o->conv_transpose2d,
        (const void *)o->max_pool2d, (const void *)o->avg_pool2d,
        (const void *)o->adaptive_avg_pool2d, (const void *)o->conv2d_weight_grad,
        (const void *)o->avg_pool2d_backward, (const void *)o->adaptive_avg_pool2d_backward,
        (const void *)o->layer_norm};
    return p[s] != NULL;
}

uint32_t rs_slot_mask(const em_backend_ops *o);
uint32_t rs_slot_mask(const em_backend_ops *o) {
    uint32_t m = 0;
    for (int s = 0; s < RW_K_COUNT; s++)
        if (rs_has(o, (rw_slot)s)) m |= 1u << s;
    return m;
}

em_status rs_exec_kernel(const rs_host *h, rs_lookup_fn lookup, void *conn, const rw_kernel *k,
                         char *msg, size_t cap) {
    rs_ctx c = {h, lookup, conn, msg, cap, rw_slots[k->slot].name};
    em_view views[RW_MAX_VIEWS], *v[RW_MAX_VIEWS] = {0};
    size_t bytes[RW_MAX_VIEWS] = {0};
    em_status s = EM_OK;
    if (!rs_has(h->ops, k->slot))
        return rs_bad(&c, EM_ERR_UNSUPPORTED, "the hosted device does not implement it");
    for (int i = 0; i < rw_slots[k->slot].nviews && s == EM_OK; i++)
        if (k->mask & (1u << i)) {
            s = rs_view(&c, &k->views[i], i, &views[i], &bytes[i]);
            v[i] = &views[i];
        }
    if (s != EM_OK) return s;
    if (h->serialize) pthread_mutex_lock((pthread_mutex_t *)h->lock);
    s = rs_check(&c, k, v, bytes);
    if (s != EM_OK) {
        if (h->serialize) pthread_mutex_unlock((pthread_mutex_t *)h->lock);
        return s;
    }
    /* inputs of a backend that wants them contiguous: copies (outputs are views 0, and 1 for
     * sort and max_pool2d) */
    void *tmp[RW_MAX_VIEWS] = {0};
    if (!(h->ops->caps & EM_CAP_STRIDED_INPUTS) && k->slot != RW_K_COPY) {
        int first_in = (k->slot == RW_K_SORT || k->slot == RW_K_MAX_POOL2D) ? 2 : 1;
        if (k->slot == RW_K_SCATTER_ADD) first_in = 1;
        for (int i = first_in; i < RW_MAX_VIEWS && s == EM_OK; i++) {
            if (!v[i] || rs_contiguous(v[i])) continue;
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
    }
    if (s == EM_OK) s = rs_call(h, k, v);
    if (s != EM_OK) snprintf(msg, cap, "%s: %s", c.slot, em_last_error());
    for (int i = 0; i < RW_MAX_VIEWS; i++)
        if (tmp[i]) h->ops->free(h->ctx, tmp[i]);
    if (h->serialize) pthread_mutex_unlock((pthread_mutex_t *)h->lock);
    return s;
}
