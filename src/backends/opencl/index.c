/*
 * index.c — the OpenCL backend's indexing kernels (index.cl, one program per data dtype):
 * gather and index_select (one item per output element), scatter_add (one item per index
 * line, or per output element scanning its index line: deterministic, no atomics) and a
 * stable sort (bottom-up merge passes on scratch keys and positions, one item per element
 * a pass).
 */
#include "backends/opencl/ocl_kern.h"

/** gather: out[c] = in[c with dim replaced by index[c]]. */
em_status ocl_gather(void *ctx, const em_view *out, const em_view *in, int dim,
                     const em_view *index) {
    ocl_dev *d = ctx;
    em_status s = ocl_check_dtype(d, "gather", in->dtype);
    if (s != EM_OK) return s;
    size_t n = (size_t)ocl_numel(out);
    if (n == 0) return EM_OK;
    ocl_view_arg ov = ocl_view(out), iv = ocl_view(in), xv = ocl_view(index);
    cl_mem om = ocl_mem(out), im = ocl_mem(in), xm = ocl_mem(index);
    cl_int idx64 = index->dtype == EM_I64, dm = dim;
    char opt[32];
    okern_opts(opt, sizeof opt, in->dtype);
    ocl_arg args[] = {OCL_ARG(om), OCL_ARG(ov), OCL_ARG(im),    OCL_ARG(iv),
                      OCL_ARG(xm), OCL_ARG(xv), OCL_ARG(idx64), OCL_ARG(dm)};
    return ocl_launch(d, "index", opt, "gather_elems", 1, &n, NULL, 8, args);
}

/** index_select: a gather whose index view repeats the 1-d index along every other dim. */
em_status ocl_index_select(void *ctx, const em_view *out, const em_view *in, int dim,
                           const em_view *index) {
    em_view x = *out; /* out's shape, strides 0 except along dim */
    x.buf = index->buf;
    x.dtype = index->dtype;
    x.offset = index->offset;
    for (int k = 0; k < x.rank; k++) x.strides[k] = k == dim ? index->strides[0] : 0;
    if (index->rank == 0) x.strides[dim] = 0;
    return ocl_gather(ctx, out, in, dim, &x);
}

/** scatter_add: out[c with dim replaced by index[c]] += src[c] over index's shape. With
 *  enough index lines, one item a line adds its elements in order (work: index's size);
 *  else one item per out element scans its index line (more work, more parallelism). */
em_status ocl_scatter_add(void *ctx, const em_view *out, int dim, const em_view *index,
                          const em_view *src) {
    ocl_dev *d = ctx;
    em_status s = ocl_check_dtype(d, "scatter_add", out->dtype);
    if (s != EM_OK) return s;
    int64_t nidx = ocl_numel(index);
    size_t n = (size_t)ocl_numel(out);
    if (n == 0 || nidx == 0) return EM_OK;
    size_t lines = (size_t)(nidx / index->shape[dim]);
    ocl_view_arg ov = ocl_view(out), xv = ocl_view(index), sv = ocl_view(src);
    ocl_view_arg heads = okern_heads(index, dim);
    cl_mem om = ocl_mem(out), xm = ocl_mem(index), sm = ocl_mem(src);
    cl_int idx64 = index->dtype == EM_I64, dm = dim;
    char opt[32];
    okern_opts(opt, sizeof opt, out->dtype);
    if (lines >= 64 || lines * 4 >= n) {
        ocl_arg args[] = {OCL_ARG(om), OCL_ARG(ov), OCL_ARG(xm),    OCL_ARG(xv), OCL_ARG(idx64),
                          OCL_ARG(sm), OCL_ARG(sv), OCL_ARG(heads), OCL_ARG(dm)};
        return ocl_launch(d, "index", opt, "scatter_add_lines", 1, &lines, NULL, 9, args);
    }
    ocl_arg args[] = {OCL_ARG(om),    OCL_ARG(ov), OCL_ARG(xm), OCL_ARG(xv),
                      OCL_ARG(idx64), OCL_ARG(sm), OCL_ARG(sv), OCL_ARG(dm)};
    return ocl_launch(d, "index", opt, "scatter_add_elems", 1, &n, NULL, 8, args);
}

/** Stable sort of every line of `in` along dim into values and / or indices (i64). */
em_status ocl_sort(void *ctx, const em_view *values, const em_view *indices, const em_view *in,
                   int dim, bool descending) {
    ocl_dev *d = ctx;
    em_status s = ocl_check_dtype(d, "sort", in->dtype);
    if (s != EM_OK) return s;
    cl_long n = in->shape[dim], stride = in->strides[dim];
    int64_t total = ocl_numel(in);
    if (n == 0 || total == 0 || (!values && !indices)) return EM_OK;
    size_t bytes = (size_t)total * 8; /* keys (acc_t, at most 8 bytes) and positions (long) */
    cl_mem k0 = NULL, k1 = NULL, p0 = NULL, p1 = NULL;
    s = ocl_scratch(d, bytes, &k0);
    if (s == EM_OK) s = ocl_scratch(d, bytes, &k1);
    if (s == EM_OK) s = ocl_scratch(d, bytes, &p0);
    if (s == EM_OK) s = ocl_scratch(d, bytes, &p1);
    char opt[32];
    okern_opts(opt, sizeof opt, in->dtype);
    size_t g = (size_t)total;
    ocl_view_arg heads = okern_heads(in, dim);
    cl_mem im = ocl_mem(in);
    if (s == EM_OK) {
        ocl_arg args[] = {OCL_ARG(im), OCL_ARG(heads), OCL_ARG(stride), OCL_ARG(n),
                          OCL_ARG(k0), OCL_ARG(p0)};
        s = ocl_launch(d, "index", opt, "sort_init", 1, &g, NULL, 6, args);
    }
    cl_int desc = descending;
    for (cl_long w = 1; s == EM_OK && w < n; w *= 2) {
        ocl_arg args[] = {OCL_ARG(k0), OCL_ARG(p0), OCL_ARG(k1),  OCL_ARG(p1),
                          OCL_ARG(n),  OCL_ARG(w),  OCL_ARG(desc)};
        s = ocl_launch(d, "index", opt, "sort_merge", 1, &g, NULL, 7, args);
        cl_mem t = k0;
        k0 = k1;
        k1 = t;
        t = p0;
        p0 = p1;
        p1 = t;
    }
    if (s == EM_OK) {
        const em_view *vv = values ? values : in, *iv = indices ? indices : in;
        ocl_view_arg vh = okern_heads(vv, dim), ih = okern_heads(iv, dim);
        cl_long vs = vv->strides[dim], is = iv->strides[dim];
        cl_mem vm = ocl_mem(vv), xm = ocl_mem(iv);
        cl_int has_v = values != NULL, has_i = indices != NULL;
        ocl_arg args[] = {OCL_ARG(im),    OCL_ARG(heads), OCL_ARG(stride), OCL_ARG(n),
                          OCL_ARG(p0),    OCL_ARG(vm),    OCL_ARG(vh),     OCL_ARG(vs),
                          OCL_ARG(has_v), OCL_ARG(xm),    OCL_ARG(ih),     OCL_ARG(is),
                          OCL_ARG(has_i)};
        s = ocl_launch(d, "index", opt, "sort_out", 1, &g, NULL, 13, args);
    }
    cl_mem all[4] = {k0, k1, p0, p1};
    for (int i = 0; i < 4; i++)
        if (all[i]) ocl_scratch_free(d, all[i]);
    return s;
}
