/*
 * reduce.c — the Vulkan backend's reductions, cumulative sum, cumprod / cummax / cummin and
 * softmax / log-softmax (shaders/reduce.comp; one variant per dtype pair, the op a parameter).
 *
 * Each kernel takes "lines": a reduction along dim has one line per element of `in` with
 * dim's extent set to 1 (its head), the elements at head + j * strides[dim]; a whole-tensor
 * reduction is one line, strided when the view chains into one stride, else walked with vidx.
 * Short lines are scanned one per invocation (serial mode), long ones by a workgroup each
 * (group mode). Float dtypes accumulate in double where the device has shaderFloat64 (the
 * *64 variants: ref's arithmetic), else in float with compensated sums.
 *
 * Long lines: lavapipe's llvmpipe caps the iterations of a shader invocation's loop nest (its
 * loop limiter, about 65,535) and then leaves the loop silently: a workgroup's line of about
 * 8.39M elements, or a cumprod / cummax / cummin line over 65,535 elements, came out wrong
 * there. So no invocation walks more than about 4,096 elements a pass in group mode (a line
 * of up to RD_GROUP_CHUNK elements) or RD_SERIAL_CHUNK in one invocation a line (cumprod,
 * cummax / cummin): longer lines are walked in chunks by ordered dispatches, each continuing
 * from the lines' state (running sum, max, argmax, scan carry, ...) the previous one left in
 * vk_scratch (rd_chunked; the shader's CH_* parameters). Short lines keep the single
 * dispatch. (A chunked line is walked by one workgroup at a time: correct, not fast.)
 */
#include <stdio.h>
#include <string.h>

#include "vk_internal.h"

/* The most workgroups of one dispatch dimension. */
#define RD_MAX_GROUPS 65535
/* The longest line one dispatch walks in group mode (4,096 elements an invocation a pass:
 * softmax's three passes stay near 12K loop iterations), and one invocation a line. */
#define RD_GROUP_CHUNK ((int64_t)VK_WG * 4096)
#define RD_SERIAL_CHUNK ((int64_t)16384)

/* True when every element of v is at v->offset + j * (*stride) for row-major j: the dims of
 * extent > 1 chain into one stride (contiguous views, flipped 1-d views, ...). */
static bool rd_single_stride(const em_view *v, int64_t *stride) {
    int64_t s = 1, inner = 1;
    bool any = false;
    for (int d = v->rank - 1; d >= 0; d--) {
        if (v->shape[d] == 1) continue;
        if (!any) {
            s = v->strides[d];
            any = true;
        } else if (v->strides[d] != s * inner) {
            return false;
        }
        inner *= v->shape[d];
    }
    *stride = s;
    return true;
}

/* v with dim's extent set to 1: its element g is the head of line g along dim. */
static vk_view_arg rd_heads(const em_view *v, int dim) {
    em_view h = *v;
    h.shape[dim] = 1;
    return vk_view(&h);
}

/* The shader's prefix for float dtype dt: base "64" (double accumulation) when the device
 * has shaderFloat64, else base. */
static void rd_name(char *name, size_t size, vk_dev *d, const char *base, em_dtype in,
                    const char *out_tag) {
    bool acc64 = d->f64 && (in == EM_F32 || in == EM_F16 || in == EM_BF16);
    if (out_tag)
        snprintf(name, size, "%s%s.%s.%s", base, acc64 ? "64" : "", vk_dtype_tag(in), out_tag);
    else
        snprintf(name, size, "%s%s.%s", base, acc64 ? "64" : "", vk_dtype_tag(in));
}

/* EM_OK when the device runs the dtypes of the nv views (NULL entries skipped). */
static em_status rd_check(vk_dev *d, const char *op, const em_view *const *vs, int nv) {
    for (int i = 0; i < nv; i++) {
        if (!vs[i]) continue;
        em_status s = vk_check_dtype(d, op, vs[i]->dtype);
        if (s != EM_OK) return s;
    }
    return EM_OK;
}

/* Group mode (a workgroup a line) for lines of n elements, lines of them. */
static bool rd_group_mode(int64_t n, int64_t lines) {
    return n >= 4 * VK_WG || (n > 16 && lines < 64);
}

/* Records one dispatch of `name` over `lines` lines in the mode p->i[5] says, the pipeline
 * specialized on the op (p->i[0], reduce.comp's OP: its branches fold away). */
static em_status rd_launch1(vk_dev *d, const char *name, int64_t lines, const vk_params *p,
                            int nbufs, vk_buf *const *bufs) {
    if (p->i[5]) {
        uint32_t groups[3] = {(uint32_t)(lines < RD_MAX_GROUPS ? lines : RD_MAX_GROUPS), 1, 1};
        return vk_launch_op(d, name, p->i[0], groups, p, nbufs, bufs);
    }
    return vk_launch_1d_op(d, name, p->i[0], lines, p, nbufs, bufs);
}

/* Records the walk of `lines` lines of n elements (p->i[1]): one dispatch over [0, n) when n
 * is at most `chunk`, else `passes` passes each of ordered dispatches over chunks of `chunk`
 * elements, the lines' state in scratch (bindings 4 and 5: two ACC slots (8 bytes at most)
 * and an int a line). bufs has room for 5 entries; nbufs (at most 3) are the kernel's. */
static em_status rd_chunked(vk_dev *d, const char *name, int64_t lines, vk_params *p,
                            int64_t chunk, int passes, int nbufs, vk_buf **bufs) {
    const int64_t n = p->i[1];
    p->i[9] = 0;
    p->i[10] = (int32_t)n;
    p->i[11] = 0;
    if (n <= chunk) return rd_launch1(d, name, lines, p, nbufs, bufs);
    vk_buf *st = NULL, *sti = NULL;
    em_status s = vk_scratch(d, (size_t)lines * 16, &st);
    if (s == EM_OK) s = vk_scratch(d, (size_t)lines * 4, &sti);
    for (int k = nbufs; k < 3; k++) bufs[k] = NULL;
    bufs[3] = st;
    bufs[4] = sti;
    for (int pass = 0; pass < passes && s == EM_OK; pass++) {
        for (int64_t j0 = 0; j0 < n && s == EM_OK; j0 += chunk) {
            int64_t j1 = j0 + chunk < n ? j0 + chunk : n;
            p->i[9] = (int32_t)j0;
            p->i[10] = (int32_t)j1;
            p->i[11] = 1 | (j0 == 0 ? 2 : 0) | (pass == passes - 1 && j1 == n ? 4 : 0);
            p->i[12] = pass;
            s = rd_launch1(d, name, lines, p, 5, bufs);
        }
    }
    if (st) vk_scratch_free(d, st);
    if (sti) vk_scratch_free(d, sti);
    return s;
}

em_status vk_reduce(void *ctx, em_reduce_op op, const em_view *out, const em_view *in, int dim,
                    const double *params) {
    vk_dev *d = ctx;
    const em_view *vs[2] = {out, in};
    em_status s = rd_check(d, "reduce", vs, 2);
    if (s != EM_OK) return s;
    if ((int)op < 0 || op >= EM_RED_COUNT)
        return em_backend_set_error(EM_ERR_ARG, "vulkan: reduce: unknown op %d", (int)op);
    vk_params p;
    memset(&p, 0, sizeof p);
    p.v[0] = vk_view(out);
    int64_t n, stride = 1, lines;
    int whole = 0;
    if (dim < 0) {
        n = vk_numel(in);
        lines = 1;
        if (!rd_single_stride(in, &stride)) {
            whole = 1;
            p.v[2] = vk_view(in);
        }
        em_view h = *in;
        h.rank = 0; /* one head: the view's offset */
        p.v[1] = vk_view(&h);
    } else {
        n = in->shape[dim];
        stride = in->strides[dim];
        p.v[1] = rd_heads(in, dim);
        lines = vk_numel(out);
    }
    if (lines == 0) return EM_OK;
    double corr = params ? params[0] : 1.0;
    p.i[0] = (int32_t)op;
    p.i[1] = (int32_t)n;
    p.i[2] = (int32_t)stride;
    p.i[3] = (int32_t)lines;
    p.i[4] = whole;
    /* chunked lines run in group mode */
    p.i[5] = rd_group_mode(n, lines) || n > RD_GROUP_CHUNK;
    p.f[0] = (float)corr;
    vk_set_f64(&p, 0, corr);
    char name[48];
    rd_name(name, sizeof name, d, "reduce", in->dtype, vk_dtype_tag(out->dtype));
    vk_buf *bufs[5] = {vk_vbuf(out), vk_vbuf(in)};
    int passes = op == EM_RED_VAR || op == EM_RED_LOGSUMEXP ? 2 : 1;
    return rd_chunked(d, name, lines, &p, RD_GROUP_CHUNK, passes, 2, bufs);
}

/* The shared setup of the along-dim kernels: views 0 (out heads), 1 (in heads) and the line
 * geometry. Returns the number of lines. */
static int64_t rd_along(vk_params *p, const em_view *out, const em_view *in, int dim) {
    memset(p, 0, sizeof *p);
    int64_t n = in->shape[dim];
    int64_t lines = n ? vk_numel(in) / n : 0;
    p->v[0] = rd_heads(out, dim);
    p->v[1] = rd_heads(in, dim);
    p->i[1] = (int32_t)n;
    p->i[2] = (int32_t)in->strides[dim];
    p->i[3] = (int32_t)lines;
    p->i[6] = (int32_t)out->strides[dim];
    return lines;
}

/** Running sum along dim (floats keep the dtype; ints accumulate in wrapping int64 into an
 *  i64 out). */
em_status vk_cumsum(void *ctx, const em_view *out, const em_view *in, int dim) {
    vk_dev *d = ctx;
    const em_view *vs[2] = {out, in};
    em_status s = rd_check(d, "cumsum", vs, 2);
    if (s != EM_OK) return s;
    vk_params p;
    int64_t lines = rd_along(&p, out, in, dim);
    if (lines == 0) return EM_OK;
    p.i[5] = rd_group_mode(in->shape[dim], lines) || in->shape[dim] > RD_GROUP_CHUNK;
    char name[48];
    rd_name(name, sizeof name, d, "cumsum", in->dtype, NULL);
    vk_buf *bufs[5] = {vk_vbuf(out), vk_vbuf(in)};
    return rd_chunked(d, name, lines, &p, RD_GROUP_CHUNK, 1, 2, bufs);
}

/** cumprod (ints: wrapping int64 into an i64 out), cummax / cummin with i64 indices, along
 *  dim: one invocation a line (lines past RD_SERIAL_CHUNK in chunks). */
em_status vk_cumulative(void *ctx, em_cum_op op, const em_view *values, const em_view *indices,
                        const em_view *in, int dim) {
    vk_dev *d = ctx;
    const em_view *vs[3] = {values, in, indices};
    em_status s = rd_check(d, "cumulative", vs, 3);
    if (s != EM_OK) return s;
    if (op != EM_CUM_PROD && !indices)
        return em_backend_set_error(EM_ERR_ARG, "vulkan: cumulative: cummax / cummin need "
                                                "an indices view");
    vk_params p;
    int64_t lines = rd_along(&p, values, in, dim);
    if (lines == 0) return EM_OK;
    char name[48];
    if (op == EM_CUM_PROD) {
        rd_name(name, sizeof name, d, "cumprod", in->dtype, NULL);
        vk_buf *bufs[5] = {vk_vbuf(values), vk_vbuf(in)};
        return rd_chunked(d, name, lines, &p, RD_SERIAL_CHUNK, 1, 2, bufs);
    }
    p.i[0] = op == EM_CUM_MAX ? 1 : 2;
    p.v[3] = rd_heads(indices, dim);
    p.i[7] = (int32_t)indices->strides[dim];
    snprintf(name, sizeof name, "cumext.%s", vk_dtype_tag(in->dtype));
    vk_buf *bufs[5] = {vk_vbuf(values), vk_vbuf(in), vk_vbuf(indices)};
    return rd_chunked(d, name, lines, &p, RD_SERIAL_CHUNK, 1, 3, bufs);
}

/** Softmax or log-softmax along dim (float dtypes). */
em_status vk_softmax(void *ctx, const em_view *out, const em_view *in, int dim, bool log) {
    vk_dev *d = ctx;
    const em_view *vs[2] = {out, in};
    em_status s = rd_check(d, "softmax", vs, 2);
    if (s != EM_OK) return s;
    if (em_dtype_kind(in->dtype) != EM_KIND_FLOAT)
        return em_backend_set_error(EM_ERR_DTYPE, "vulkan: softmax: dtype %s is not a float",
                                    em_dtype_name(in->dtype));
    vk_params p;
    int64_t lines = rd_along(&p, out, in, dim);
    if (lines == 0) return EM_OK;
    p.i[5] = rd_group_mode(in->shape[dim], lines) || in->shape[dim] > RD_GROUP_CHUNK;
    p.i[8] = log ? 1 : 0;
    char name[48];
    rd_name(name, sizeof name, d, "softmax", in->dtype, NULL);
    vk_buf *bufs[5] = {vk_vbuf(out), vk_vbuf(in)};
    /* passes: the max, the sum of exp, the writes */
    return rd_chunked(d, name, lines, &p, RD_GROUP_CHUNK, 3, 2, bufs);
}
