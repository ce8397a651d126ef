/*
 * random.c — the OpenCL backend's random kernel: Philox-4x32-10 with ref's mapping
 * (src/backends/ref/random.c), so opencl and ref give the same numbers for a seed (to the last
 * bit for uniform and bernoulli on fp64 devices; normal up to the device's log/cos rounding).
 */
#include <stdio.h>

#include "ocl_internal.h"

em_status ocl_random(void *ctx, em_random_op op, const em_view *out, uint64_t seed,
                     const double *params) {
    ocl_dev *d = ctx;
    em_status s = ocl_check_dtype(d, "random", out->dtype);
    if (s != EM_OK) return s;
    int64_t n = ocl_numel(out);
    if (n == 0) return EM_OK;
    char opts[32];
    snprintf(opts, sizeof opts, "-DO=%s", ocl_dtype_tag(out->dtype));
    cl_mem m = ocl_mem(out);
    ocl_view_arg ov = ocl_view(out);
    cl_long nn = n;
    cl_int contig = ocl_contiguous(out), cop = op == EM_RAND_UNIFORM ? 0 : 2;
    cl_uint2 key = {{(cl_uint)seed, (cl_uint)(seed >> 32)}};
    double p0 = params[0], p1 = op == EM_RAND_BERNOULLI ? 0 : params[1];
    float f0 = (float)p0, f1 = (float)p1;
    ocl_arg a0 = d->fp64 ? OCL_ARG(p0) : OCL_ARG(f0), a1 = d->fp64 ? OCL_ARG(p1) : OCL_ARG(f1);
    size_t local = ocl_group_size(d);
    if (op == EM_RAND_NORMAL) {
        size_t global = ocl_round_up((size_t)n, local);
        ocl_arg args[] = {OCL_ARG(m), OCL_ARG(ov), OCL_ARG(nn), OCL_ARG(contig), OCL_ARG(key),
                          a0, a1};
        return ocl_launch(d, "random", opts, "rnd_normal", 1, &global, &local, 7, args);
    }
    size_t global = ocl_round_up(((size_t)n + 3) / 4, local);
    ocl_arg args[] = {OCL_ARG(m), OCL_ARG(ov),  OCL_ARG(nn), OCL_ARG(contig),
                      OCL_ARG(cop), OCL_ARG(key), a0,         a1};
    return ocl_launch(d, "random", opts, "rnd_block", 1, &global, &local, 8, args);
}
