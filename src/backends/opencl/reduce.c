/*
 * reduce.c — the OpenCL backend's reductions, cumulative sum, softmax and layer norm
 * (kernels in reduce.cl, one program per input dtype).
 *
 * Each kernel takes "lines": a reduction along dim has one line per element of `in` with
 * dim's extent set to 1 (its head), the elements at head + j * strides[dim]; a whole-tensor
 * reduction is one line, strided when the view chains into one stride, else walked with
 * vidx. One work-group reduces one line (see reduce.cl).
 */
#include "backends/opencl/ocl_kern.h"

/** Reduces `in` along dim (or everything when dim < 0) into out (keepdim shape or 0-d). */
em_status ocl_reduce(void *ctx, em_reduce_op op, const em_view *out, const em_view *in, int dim,
                     const double *params) {
    ocl_dev *d = ctx;
    em_status s = ocl_check_dtype(d, "reduce", in->dtype);
    if (s != EM_OK) return s;
    ocl_view_arg inv = ocl_view(in), heads;
    cl_long n, stride = 1, lines;
    cl_int whole = 0;
    if (dim < 0) {
        int64_t st = 1;
        n = ocl_numel(in);
        lines = 1;
        em_view h = *in;
        h.rank = 0; /* one head: the view's offset */
        heads = ocl_view(&h);
        if (okern_single_stride(in, &st)) stride = st;
        else whole = 1;
    } else {
        n = in->shape[dim];
        stride = in->strides[dim];
        heads = okern_heads(in, dim);
        lines = ocl_numel(out);
    }
    if (lines == 0) return EM_OK;
    char opt[32];
    okern_opts(opt, sizeof opt, in->dtype);
    size_t L = okern_line_group(d, n, 8);
    size_t global = (size_t)lines * L;
    cl_mem im = ocl_mem(in), om = ocl_mem(out);
    cl_long out_off = out->offset;
    cl_int opi = (cl_int)op;
    okern_acc corr = okern_acc_of(in->dtype, params ? params[0] : 1.0);
    ocl_arg args[] = {OCL_ARG(im),      OCL_ARG(inv),  OCL_ARG(heads),     OCL_ARG(stride),
                      OCL_ARG(n),       OCL_ARG(whole), OCL_ARG(om),       OCL_ARG(out_off),
                      OCL_ARG(opi),     OKERN_ACC_ARG(corr), OCL_LOCAL(L * 8), OCL_LOCAL(L * 8)};
    return ocl_launch(d, "reduce", opt, "reduce_lines", 1, &global, &L,
                      (int)(sizeof args / sizeof args[0]), args);
}

/** Shared launcher of cumsum and softmax: one group a line along dim. */
static em_status along_dim(ocl_dev *d, const char *kernel, const em_view *out,
                           const em_view *in, int dim, int logm) {
    cl_long n = in->shape[dim], stride = in->strides[dim], ostride = out->strides[dim];
    int64_t lines = n ? ocl_numel(in) / n : 0;
    if (lines == 0) return EM_OK;
    ocl_view_arg heads = okern_heads(in, dim), oheads = okern_heads(out, dim);
    char opt[32];
    okern_opts(opt, sizeof opt, in->dtype);
    size_t L = okern_line_group(d, n, logm < 0 ? 16 : 8);
    size_t global = (size_t)lines * L;
    cl_mem im = ocl_mem(in), om = ocl_mem(out);
    cl_int lg = logm;
    if (logm < 0) {
        ocl_arg args[] = {OCL_ARG(im), OCL_ARG(heads),  OCL_ARG(stride), OCL_ARG(n),
                          OCL_ARG(om), OCL_ARG(oheads), OCL_ARG(ostride), OCL_LOCAL(L * 8)};
        return ocl_launch(d, "reduce", opt, kernel, 1, &global, &L, 8, args);
    }
    ocl_arg args[] = {OCL_ARG(im),     OCL_ARG(heads),   OCL_ARG(stride), OCL_ARG(n),
                      OCL_ARG(om),     OCL_ARG(oheads),  OCL_ARG(ostride), OCL_ARG(lg),
                      OCL_LOCAL(L * 8)};
    return ocl_launch(d, "reduce", opt, kernel, 1, &global, &L, 9, args);
}

/** Running sum along dim (ints accumulate in wrapping int64 into an i64 out). */
em_status ocl_cumsum(void *ctx, const em_view *out, const em_view *in, int dim) {
    ocl_dev *d = ctx;
    em_status s = ocl_check_dtype(d, "cumsum", in->dtype);
    if (s != EM_OK) return s;
    return along_dim(d, "cumsum_lines", out, in, dim, -1);
}

/** cumprod (ints: wrapping int64 into an i64 out), cummax / cummin with i64 indices, along
 *  dim: one work item a line. */
em_status ocl_cumulative(void *ctx, em_cum_op op, const em_view *values, const em_view *indices,
                         const em_view *in, int dim) {
    ocl_dev *d = ctx;
    em_status s = ocl_check_dtype(d, "cumulative", in->dtype);
    if (s != EM_OK) return s;
    cl_long n = in->shape[dim], stride = in->strides[dim], ostride = values->strides[dim];
    cl_long lines = n ? ocl_numel(in) / n : 0;
    if (lines == 0) return EM_OK;
    const em_view *kv = indices ? indices : values; /* op 0: unused, any valid buffer */
    ocl_view_arg heads = okern_heads(in, dim), oheads = okern_heads(values, dim),
                 kheads = okern_heads(kv, dim);
    cl_long kstride = kv->strides[dim];
    char opt[32];
    okern_opts(opt, sizeof opt, in->dtype);
    size_t L = ocl_group_size(d);
    size_t global = ocl_round_up((size_t)lines, L);
    cl_mem im = ocl_mem(in), om = ocl_mem(values), km = ocl_mem(kv);
    cl_int opi = (cl_int)op;
    ocl_arg args[] = {OCL_ARG(im),     OCL_ARG(heads),  OCL_ARG(stride),  OCL_ARG(n),
                      OCL_ARG(om),     OCL_ARG(oheads), OCL_ARG(ostride), OCL_ARG(km),
                      OCL_ARG(kheads), OCL_ARG(kstride), OCL_ARG(opi),    OCL_ARG(lines)};
    return ocl_launch(d, "reduce", opt, "cumulative_lines", 1, &global, &L,
                      (int)(sizeof args / sizeof args[0]), args);
}

/** Softmax or log-softmax along dim (float dtypes). */
em_status ocl_softmax(void *ctx, const em_view *out, const em_view *in, int dim, bool log) {
    ocl_dev *d = ctx;
    em_status s = ocl_check_dtype(d, "softmax", in->dtype);
    if (s != EM_OK) return s;
    return along_dim(d, "softmax_lines", out, in, dim, log ? 1 : 0);
}

/** Layer norm of x [rows, norm_numel] (rank 2) with optional weight / bias [norm_numel]. */
em_status ocl_layer_norm(void *ctx, const em_view *out, const em_view *x, const em_view *weight,
                         const em_view *bias, int64_t norm_numel, double eps) {
    ocl_dev *d = ctx;
    em_status s = ocl_check_dtype(d, "layer_norm", x->dtype);
    if (s != EM_OK) return s;
    cl_long n = norm_numel;
    int64_t rows = n > 0 ? ocl_numel(x) / n : 0;
    if (rows == 0) return EM_OK;
    cl_long x_off = x->offset, xs0 = x->rank == 2 ? x->strides[0] : n, xs1 = x->strides[x->rank - 1];
    cl_long o_off = out->offset, os0 = out->rank == 2 ? out->strides[0] : n,
            os1 = out->strides[out->rank - 1];
    cl_mem xm = ocl_mem(x), om = ocl_mem(out);
    cl_mem wm = weight ? ocl_mem(weight) : xm, bm = bias ? ocl_mem(bias) : xm;
    cl_long w_off = weight ? weight->offset : 0, ws = weight ? weight->strides[0] : 0;
    cl_long b_off = bias ? bias->offset : 0, bs = bias ? bias->strides[0] : 0;
    cl_int has_w = weight != NULL, has_b = bias != NULL;
    okern_acc e = okern_acc_of(x->dtype, eps);
    char opt[32];
    okern_opts(opt, sizeof opt, x->dtype);
    size_t L = okern_line_group(d, n, 8);
    size_t global = (size_t)rows * L;
    ocl_arg args[] = {OCL_ARG(xm),    OCL_ARG(x_off), OCL_ARG(xs0),   OCL_ARG(xs1),
                      OCL_ARG(n),     OCL_ARG(om),    OCL_ARG(o_off), OCL_ARG(os0),
                      OCL_ARG(os1),   OCL_ARG(wm),    OCL_ARG(w_off), OCL_ARG(ws),
                      OCL_ARG(has_w), OCL_ARG(bm),    OCL_ARG(b_off), OCL_ARG(bs),
                      OCL_ARG(has_b), OKERN_ACC_ARG(e), OCL_LOCAL(L * 8)};
    return ocl_launch(d, "reduce", opt, "layer_norm_rows", 1, &global, &L,
                      (int)(sizeof args / sizeof args[0]), args);
}
