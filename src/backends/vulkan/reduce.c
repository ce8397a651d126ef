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
 * Known limit (to fix): lavapipe's llvmpipe caps the iterations of a shader's loop nest
 * (its loop limiter, 65,535) and then leaves the loop silently. Measured here: a workgroup's
 * line of about 8.39M elements or more (32,767 iterations an invocation inside the line loop;
 * fewer for the multi-pass ops: var, logsumexp, softmax) and a cumprod / cummax / cummin line
 * over 65,535 elements (one invocation a line) come out wrong there. The fix is to split long
 * lines over several workgroups (partials in vk_scratch, then a combining dispatch).
 */
#include <stdio.h>
#include <string.h>

#include "vk_internal.h"

/* The most workgroups of one dispatch dimension. */
#define RD_MAX_GROUPS 65535

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

/* Records the dispatch of `name` over `lines` lines in the mode p->i[5] says. */
static em_status rd_launch(vk_dev *d, const char *name, int64_t lines, vk_params *p, int nbufs,
                           vk_buf *const *bufs) {
    if (p->i[5]) {
        uint32_t groups[3] = {(uint32_t)(lines < RD_MAX_GROUPS ? lines : RD_MAX_GROUPS), 1, 1};
        return vk_launch(d, name, groups, p, nbufs, bufs);
    }
    return vk_launch_1d(d, name, lines, p, nbufs, bufs);
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
    p.i[5] = rd_group_mode(n, lines);
    p.f[0] = (float)corr;
    vk_set_f64(&p, 0, corr);
    char name[48];
    rd_name(name, sizeof name, d, "reduce", in->dtype, vk_dtype_tag(out->dtype));
    vk_buf *bufs[2] = {vk_vbuf(out), vk_vbuf(in)};
    return rd_launch(d, name, lines, &p, 2, bufs);
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
    p.i[5] = rd_group_mode(in->shape[dim], lines);
    char name[48];
    rd_name(name, sizeof name, d, "cumsum", in->dtype, NULL);
    vk_buf *bufs[2] = {vk_vbuf(out), vk_vbuf(in)};
    return rd_launch(d, name, lines, &p, 2, bufs);
}

/** cumprod (ints: wrapping int64 into an i64 out), cummax / cummin with i64 indices, along
 *  dim: one invocation a line. */
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
        vk_buf *bufs[2] = {vk_vbuf(values), vk_vbuf(in)};
        return vk_launch_1d(d, name, lines, &p, 2, bufs);
    }
    p.i[0] = op == EM_CUM_MAX ? 1 : 2;
    p.v[3] = rd_heads(indices, dim);
    p.i[7] = (int32_t)indices->strides[dim];
    snprintf(name, sizeof name, "cumext.%s", vk_dtype_tag(in->dtype));
    vk_buf *bufs[3] = {vk_vbuf(values), vk_vbuf(in), vk_vbuf(indices)};
    return vk_launch_1d(d, name, lines, &p, 3, bufs);
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
    p.i[5] = rd_group_mode(in->shape[dim], lines);
    p.i[8] = log ? 1 : 0;
    char name[48];
    rd_name(name, sizeof name, d, "softmax", in->dtype, NULL);
    vk_buf *bufs[2] = {vk_vbuf(out), vk_vbuf(in)};
    return rd_launch(d, name, lines, &p, 2, bufs);
}
