/*
 * index.c — the Vulkan backend's indexing kernels (shaders/index.comp, ported from the OpenCL
 * backend's index.cl): gather and index_select (one invocation per output element, elements
 * moved as raw words), scatter_add (one invocation per index line, or per output element
 * scanning its index line: deterministic, no atomics, rounding after each add as ref) and a
 * stable sort (bottom-up merge passes on scratch keys and positions, one invocation per
 * element a pass). Index views (EM_I64 or EM_I32) are read by 32-bit words.
 */
#include <stdio.h>
#include <string.h>

#include "vk_internal.h"

/* The raw-word tag of an element size: bit-for-bit moves. */
static const char *ix_word_tag(em_dtype dt) {
    switch (em_dtype_size(dt)) {
    case 1: return "w8";
    case 2: return "w16";
    case 4: return "w32";
    default: return "w64";
    }
}

/* The view v with dim's extent 1 (its lines' first elements). */
static em_view ix_heads(const em_view *v, int dim) {
    em_view h = *v;
    if (h.rank > 0) h.shape[dim] = 1;
    return h;
}

/* EM_OK when the data dtype dt matches `in`'s and the device runs it. */
static em_status ix_check(vk_dev *d, const char *op, const em_view *a, const em_view *b) {
    em_status s = vk_check_dtype(d, op, a->dtype);
    if (s != EM_OK) return s;
    if (b && b->dtype != a->dtype)
        return em_backend_set_error(EM_ERR_UNSUPPORTED, "vulkan: %s of %s into %s: the dtypes differ",
                                    op, em_dtype_name(b->dtype), em_dtype_name(a->dtype));
    return EM_OK;
}

em_status vk_gather(void *ctx, const em_view *out, const em_view *in, int dim,
                    const em_view *index) {
    vk_dev *d = ctx;
    em_status s = ix_check(d, "gather", out, in);
    if (s != EM_OK) return s;
    int64_t n = vk_numel(out);
    if (n == 0) return EM_OK;
    vk_params p;
    memset(&p, 0, sizeof p);
    p.v[0] = vk_view(out);
    p.v[1] = vk_view(in);
    p.v[2] = vk_view(index);
    p.i[0] = index->dtype == EM_I64;
    p.i[1] = dim;
    char name[32];
    snprintf(name, sizeof name, "gather.%s", ix_word_tag(out->dtype));
    vk_buf *bufs[3] = {vk_vbuf(out), vk_vbuf(in), vk_vbuf(index)};
    return vk_launch_1d(d, name, n, &p, 3, bufs);
}

/* index_select: a gather whose index view repeats the 1-d index along every other dim. */
em_status vk_index_select(void *ctx, const em_view *out, const em_view *in, int dim,
                          const em_view *index) {
    em_view x = *out; /* out's shape, strides 0 except along dim */
    x.buf = index->buf;
    x.dtype = index->dtype;
    x.offset = index->offset;
    for (int k = 0; k < x.rank; k++) x.strides[k] = k == dim && index->rank > 0 ? index->strides[0] : 0;
    return vk_gather(ctx, out, in, dim, &x);
}

/* The index elements along dim that one scatter dispatch walks. */
#define IX_CHUNK 4096

em_status vk_scatter_add(void *ctx, const em_view *out, int dim, const em_view *index,
                         const em_view *src) {
    vk_dev *d = ctx;
    em_status s = ix_check(d, "scatter_add", out, src);
    if (s != EM_OK) return s;
    int64_t nidx = vk_numel(index), n = vk_numel(out);
    if (n == 0 || nidx == 0) return EM_OK;
    int64_t len = index->rank > 0 ? index->shape[dim] : 1;
    int64_t lines = nidx / len;
    em_view heads = ix_heads(index, dim);
    vk_params p;
    memset(&p, 0, sizeof p);
    p.v[0] = vk_view(out);
    p.v[1] = vk_view(index);
    p.v[2] = vk_view(src);
    p.v[3] = vk_view(&heads);
    p.i[0] = index->dtype == EM_I64;
    p.i[1] = dim;
    p.i[2] = (int32_t)lines;
    vk_buf *bufs[3] = {vk_vbuf(out), vk_vbuf(index), vk_vbuf(src)};
    char name[40];
    /* with enough lines, one invocation a line (work: index's size); else one per out
     * element scanning its line (more work, more parallelism) */
    bool by_lines = lines >= 64 || lines * 4 >= n;
    snprintf(name, sizeof name, "%s.%s", by_lines ? "scatter_lines" : "scatter_elems",
             vk_dtype_tag(out->dtype));
    /* a chunk of the line a dispatch (lavapipe's loop limiter: 65,535 iterations a loop
     * nest, GRID_LOOP's included); the dispatches run in order, each continuing from the sums
     * the previous one stored, so the result is ref's sequence of rounded adds */
    for (int64_t j0 = 0; s == EM_OK && j0 < len; j0 += IX_CHUNK) {
        p.i[3] = (int32_t)j0;
        p.i[4] = (int32_t)(j0 + IX_CHUNK < len ? j0 + IX_CHUNK : len);
        s = vk_launch_1d(d, name, by_lines ? lines : n, &p, 3, bufs);
    }
    return s;
}

/* The key tag of sort_merge for a dtype: floats compare as f32 (f64 as f64), ints as i32 or
 * i64. */
static const char *ix_key_tag(em_dtype dt) {
    switch (dt) {
    case EM_F32: case EM_F16: case EM_BF16: return "f32";
    case EM_F64: return "f64";
    case EM_I64: return "i64";
    default: return "i32";
    }
}

em_status vk_sort(void *ctx, const em_view *values, const em_view *indices, const em_view *in,
                  int dim, bool descending) {
    vk_dev *d = ctx;
    em_status s = ix_check(d, "sort", in, NULL);
    if (s == EM_OK && values) s = ix_check(d, "sort", in, values);
    if (s != EM_OK) return s;
    if (indices && indices->dtype != EM_I64)
        return em_backend_set_error(EM_ERR_UNSUPPORTED, "vulkan: sort: indices of %s (want i64)",
                                    em_dtype_name(indices->dtype));
    int64_t total = vk_numel(in);
    int64_t n = in->rank > 0 ? in->shape[dim] : 1;
    if (n == 0 || total == 0 || (!values && !indices)) return EM_OK;
    int32_t stride = in->rank > 0 ? (int32_t)in->strides[dim] : 0;
    size_t kbytes = (size_t)total * (em_dtype_size(in->dtype) == 8 ? 8 : 4);
    size_t pbytes = (size_t)total * 4;
    vk_buf *k0 = NULL, *k1 = NULL, *p0 = NULL, *p1 = NULL;
    s = vk_scratch(d, kbytes, &k0);
    if (s == EM_OK && n > 1) s = vk_scratch(d, kbytes, &k1);
    if (s == EM_OK) s = vk_scratch(d, pbytes, &p0);
    if (s == EM_OK && n > 1) s = vk_scratch(d, pbytes, &p1);
    em_view hin = ix_heads(in, dim);
    char name[40];
    vk_params p;
    memset(&p, 0, sizeof p);
    p.v[0] = vk_view(&hin);
    p.i[0] = stride;
    p.i[1] = (int32_t)n;
    p.i[2] = (int32_t)total;
    if (s == EM_OK) {
        snprintf(name, sizeof name, "sort_init.%s", vk_dtype_tag(in->dtype));
        vk_buf *bufs[3] = {vk_vbuf(in), k0, p0};
        s = vk_launch_1d(d, name, total, &p, 3, bufs);
    }
    snprintf(name, sizeof name, "sort_merge.%s", ix_key_tag(in->dtype));
    for (int64_t w = 1; s == EM_OK && w < n; w *= 2) {
        p.i[3] = (int32_t)w;
        p.i[4] = descending;
        vk_buf *bufs[4] = {k0, p0, k1, p1};
        s = vk_launch_1d(d, name, total, &p, 4, bufs);
        vk_buf *t = k0;
        k0 = k1;
        k1 = t;
        t = p0;
        p0 = p1;
        p1 = t;
    }
    if (s == EM_OK) {
        em_view hv = ix_heads(values ? values : in, dim), hi = ix_heads(indices ? indices : in, dim);
        p.v[1] = vk_view(&hv);
        p.v[2] = vk_view(&hi);
        p.i[3] = values && values->rank > 0 ? (int32_t)values->strides[dim] : 0;
        p.i[4] = indices && indices->rank > 0 ? (int32_t)indices->strides[dim] : 0;
        p.i[5] = values != NULL;
        p.i[6] = indices != NULL;
        snprintf(name, sizeof name, "sort_out.%s", ix_word_tag(in->dtype));
        vk_buf *bufs[4] = {vk_vbuf(in), p0, values ? vk_vbuf(values) : NULL,
                           indices ? vk_vbuf(indices) : NULL};
        s = vk_launch_1d(d, name, total, &p, 4, bufs);
    }
    vk_buf *all[4] = {k0, k1, p0, p1};
    for (int i = 0; i < 4; i++)
        if (all[i]) vk_scratch_free(d, all[i]);
    return s;
}
