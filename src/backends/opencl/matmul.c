/*
 * matmul.c — the OpenCL backend's batched matrix product (kernel in matmul.cl, one program
 * per dtype): out [..., m, n] = a [..., m, k] @ b [..., k, n] with batch dims already
 * broadcast (stride 0) by the core. Inputs may have any strides.
 */
#include <string.h>

#include "backends/opencl/ocl_kern.h"

/** The batch dims (all but the last two) of v as a view, with out's batch shape. */
static ocl_view_arg batch_view(const em_view *v, const em_view *out) {
    em_view b = *v;
    b.rank = out->rank - 2;
    for (int d = 0; d < b.rank; d++) b.shape[d] = out->shape[d];
    return ocl_view(&b);
}

/** out = a @ b, batched over out's leading dims. */
em_status ocl_matmul(void *ctx, const em_view *out, const em_view *a, const em_view *b) {
    ocl_dev *d = ctx;
    em_status s = ocl_check_dtype(d, "matmul", a->dtype);
    if (s != EM_OK) return s;
    const int r = out->rank;
    cl_long m = out->shape[r - 2], n = out->shape[r - 1], k = a->shape[r - 1];
    int64_t batches = 1;
    for (int i = 0; i < r - 2; i++) batches *= out->shape[i];
    if (m == 0 || n == 0 || batches == 0) return EM_OK;
    ocl_view_arg ab = batch_view(a, out), bb = batch_view(b, out), ob = batch_view(out, out);
    cl_long asm_ = a->strides[r - 2], ask = a->strides[r - 1];
    cl_long bsk = b->strides[r - 2], bsn = b->strides[r - 1];
    cl_long osm = out->strides[r - 2], osn = out->strides[r - 1];
    cl_mem am = ocl_mem(a), bm = ocl_mem(b), om = ocl_mem(out);
    /* TS x TS groups: 16 x 16, or 8 x 8 where the device's groups are smaller */
    const size_t ts = ocl_group_size(d) >= 256 ? 16 : 8;
    char opt[48];
    okern_opts(opt, sizeof opt, a->dtype);
    if (ts != 16) snprintf(opt + strlen(opt), sizeof opt - strlen(opt), " -DMM_TS=%zu", ts);
    size_t global[3] = {ocl_round_up((size_t)n, ts * 4) / 4, ocl_round_up((size_t)m, ts * 4) / 4,
                        (size_t)batches};
    size_t local[3] = {ts, ts, 1};
    ocl_arg args[] = {OCL_ARG(am),  OCL_ARG(ab),  OCL_ARG(asm_), OCL_ARG(ask), OCL_ARG(bm),
                      OCL_ARG(bb),  OCL_ARG(bsk), OCL_ARG(bsn),  OCL_ARG(om),  OCL_ARG(ob),
                      OCL_ARG(osm), OCL_ARG(osn), OCL_ARG(m),    OCL_ARG(n),   OCL_ARG(k)};
    return ocl_launch(d, "matmul", opt, "matmul_tiled", 3, global, local,
                      (int)(sizeof args / sizeof args[0]), args);
}
