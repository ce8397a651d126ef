/*
 * ocl.h — private interface of the OpenCL backend.
 *
 * One ember device per OpenCL device found (all platforms, in the loader's order): `opencl:0`,
 * `opencl:1`, ... Each device has one context and one in-order command queue. Buffers live in
 * device memory; the `void *buf` the core holds is an `ocl_buf *`. Kernels are enqueued
 * without waiting; the backend waits only where the host needs data (read, sync).
 *
 * Kernel sources are the `.cl` files of this folder, embedded at build time (CMake turns each
 * into a C string, see ocl_sources.c). A program is (one .cl file, build options); it is built
 * at first use, its binary cached on disk per device and driver version, and kept in memory.
 * Every program is prefixed with common.cl, which provides to kernels:
 *
 *   - dtype tags, one per ember dtype: f32 f64 f16 bf16 i64 i32 i16 i8 u8 b8 (bool). For a tag
 *     D: TY_D is its storage type (half and bfloat16 are stored as ushort), CT_D the type
 *     arithmetic uses (float for f16/bf16/f32, double for f64, long for i64, int for the smaller
 *     ints and bool), LD_D(p, i) loads element i of a `__global TY_D *p` as CT_D, ST_D(p, i, v)
 *     stores a CT_D (rounding to nearest even for f16/bf16; bool stores v != 0).
 *     Programs are built with options such as "-DA=f16 -DO=f32"; kernels then write
 *     CAT(TY_, A), CAT(LD_, A)(p, i), ... (CAT pastes after expansion).
 *   - view_t: { long shape[8]; long strides[8]; long offset; int rank; int pad; } — the same
 *     layout as ocl_view_arg below, passed by value; vidx(v, i) is the element offset in the
 *     buffer of row-major linear index i of view v (offset included).
 *   - f64 kernels are built only when the device has cl_khr_fp64 (common.cl enables it when
 *     the option -DOCL_FP64 is given); without it ops on f64 are EM_ERR_UNSUPPORTED.
 *
 * Errors of the runtime (a build failure, an out-of-memory device, a lost device) come back as
 * EM_ERR_BACKEND (EM_ERR_NOMEM for allocation failures) with the driver's message and the
 * program's build log; nothing aborts.
 */
#ifndef EMBER_OCL_H
#define EMBER_OCL_H

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/backend.h"

#define OCL_MAX_RANK 8

/** A buffer: what em_view.buf points to for this backend. */
typedef struct ocl_buf {
    cl_mem mem;
    size_t bytes;
} ocl_buf;

/** A view as kernels receive it (the layout of view_t in common.cl). */
typedef struct ocl_view_arg {
    cl_long shape[OCL_MAX_RANK];
    cl_long strides[OCL_MAX_RANK];
    cl_long offset;
    cl_int rank;
    cl_int pad;
} ocl_view_arg;

/** A device: the context the core keeps for `opencl:N` (from `open`). */
typedef struct ocl_dev ocl_dev;

/** One kernel argument: `size` bytes at `ptr` (for a buffer: sizeof(cl_mem), &mem). */
typedef struct ocl_arg {
    size_t size;
    const void *ptr;
} ocl_arg;

/* Argument helpers for ocl_launch's list. */
#define OCL_ARG(x) ((ocl_arg){sizeof(x), &(x)})
#define OCL_LOCAL(bytes) ((ocl_arg){(bytes), NULL}) /* a __local buffer of that size */

/** Enqueues kernel `kernel` of program `prog` (a .cl file's base name, e.g. "elementwise")
 *  built with `options` (may be "" or NULL), with `work_dim` global sizes and optional local
 *  sizes (NULL: the driver picks). The program is built (or loaded from the disk cache) at
 *  first use. Thread-safe (a device lock covers argument setting and the enqueue). A global
 *  size of 0 in any dimension enqueues nothing and returns EM_OK. */
em_status ocl_launch(ocl_dev *d, const char *prog, const char *options, const char *kernel,
                     int work_dim, const size_t *global, const size_t *local, int nargs,
                     const ocl_arg *args);

/** The dtype tag common.cl knows ("f32", "f16", ..., "b8"), or NULL for a quantized dtype. */
const char *ocl_dtype_tag(em_dtype dt);
/** The kernel form of a view (shape, strides, offset, rank; unused dims 1 and 0). */
ocl_view_arg ocl_view(const em_view *v);
/** The cl_mem of a view's buffer. */
static inline cl_mem ocl_mem(const em_view *v) { return ((ocl_buf *)v->buf)->mem; }
/** Elements of a view. */
static inline int64_t ocl_numel(const em_view *v) {
    int64_t n = 1;
    for (int d = 0; d < v->rank; d++) n *= v->shape[d];
    return n;
}
/** EM_OK when the device can run kernels on dtype dt (f64 needs cl_khr_fp64), else
 *  EM_ERR_UNSUPPORTED with a message naming `op` and the device. */
em_status ocl_check_dtype(ocl_dev *d, const char *op, em_dtype dt);
/** The device's preferred work-group size for simple 1-d kernels (a power of two <= 256). */
size_t ocl_group_size(ocl_dev *d);
/** Rounds n up to a multiple of m. */
static inline size_t ocl_round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }
/** Scratch device memory for a kernel; freed with ocl_scratch_free once the kernels that use
 *  it are enqueued (the in-order queue keeps it alive for them: release happens after). */
em_status ocl_scratch(ocl_dev *d, size_t bytes, cl_mem *out);
void ocl_scratch_free(ocl_dev *d, cl_mem m);
/** Sets this thread's error from a failed OpenCL call and returns EM_ERR_BACKEND
 *  (EM_ERR_NOMEM for CL_MEM_OBJECT_ALLOCATION_FAILURE / CL_OUT_OF_RESOURCES on allocation). */
em_status ocl_fail(cl_int err, const char *what);

/* ---- kernel slots, one file a family ---- */
/* elementwise.c (helper A): fill, arange, copy, unary, binary, binary_scalar, where;
 * random.c (helper A): random;
 * reduce.c, matmul.c, index.c, nn.c (helper B): the rest of the table. */
em_status ocl_fill(void *ctx, const em_view *out, double value);
em_status ocl_arange(void *ctx, const em_view *out, double start, double step);
em_status ocl_random(void *ctx, em_random_op op, const em_view *out, uint64_t seed,
                     const double *params);
em_status ocl_copy(void *ctx, const em_view *out, const em_view *in);
em_status ocl_unary(void *ctx, em_unary_op op, const em_view *out, const em_view *in,
                    const double *params);
em_status ocl_binary(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                     const em_view *b);
em_status ocl_binary_scalar(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                            double s);
em_status ocl_where(void *ctx, const em_view *out, const em_view *cond, const em_view *a,
                    const em_view *b);
/* fused.c (ABI 3) */
em_status ocl_unary_backward(void *ctx, em_unary_op op, const em_view *gx, const em_view *x,
                             const em_view *y, const em_view *gy, const double *params);
em_status ocl_adam_step(void *ctx, const em_view *param, const em_view *exp_avg,
                        const em_view *exp_avg_sq, const em_view *grad, const em_adam_args *a);
em_status ocl_reduce(void *ctx, em_reduce_op op, const em_view *out, const em_view *in, int dim,
                     const double *params);
em_status ocl_cumsum(void *ctx, const em_view *out, const em_view *in, int dim);
em_status ocl_cumulative(void *ctx, em_cum_op op, const em_view *values, const em_view *indices,
                         const em_view *in, int dim);
em_status ocl_softmax(void *ctx, const em_view *out, const em_view *in, int dim, bool log);
em_status ocl_matmul(void *ctx, const em_view *out, const em_view *a, const em_view *b);
em_status ocl_gather(void *ctx, const em_view *out, const em_view *in, int dim,
                     const em_view *index);
em_status ocl_scatter_add(void *ctx, const em_view *out, int dim, const em_view *index,
                          const em_view *src);
em_status ocl_index_select(void *ctx, const em_view *out, const em_view *in, int dim,
                           const em_view *index);
em_status ocl_sort(void *ctx, const em_view *values, const em_view *indices, const em_view *in,
                   int dim, bool descending);
em_status ocl_conv2d(void *ctx, const em_view *out, const em_view *x, const em_view *w,
                     const em_view *bias, const em_conv_args *a);
em_status ocl_conv_transpose2d(void *ctx, const em_view *out, const em_view *x, const em_view *w,
                               const em_view *bias, const em_conv_args *a);
em_status ocl_max_pool2d(void *ctx, const em_view *out, const em_view *indices, const em_view *x,
                         const em_pool_args *a);
em_status ocl_avg_pool2d(void *ctx, const em_view *out, const em_view *x, const em_pool_args *a);
em_status ocl_adaptive_avg_pool2d(void *ctx, const em_view *out, const em_view *x);
em_status ocl_conv2d_weight_grad(void *ctx, const em_view *gw, const em_view *x,
                                 const em_view *gy, const em_conv_args *a);
em_status ocl_avg_pool2d_backward(void *ctx, const em_view *gx, const em_view *gy,
                                  const em_pool_args *a);
em_status ocl_adaptive_avg_pool2d_backward(void *ctx, const em_view *gx, const em_view *gy);
em_status ocl_layer_norm(void *ctx, const em_view *out, const em_view *x, const em_view *weight,
                         const em_view *bias, int64_t norm_numel, double eps);
/* norm.c */
em_status ocl_batch_norm(void *ctx, const em_view *out, const em_view *save_mean,
                         const em_view *save_invstd, const em_view *x, const em_view *weight,
                         const em_view *bias, const em_view *running_mean,
                         const em_view *running_var, bool training, double momentum,
                         double eps);
em_status ocl_batch_norm_backward(void *ctx, const em_view *gx, const em_view *gweight,
                                  const em_view *gbias, const em_view *gy, const em_view *x,
                                  const em_view *mean, const em_view *invstd,
                                  const em_view *weight, bool training);
em_status ocl_group_norm(void *ctx, const em_view *out, const em_view *save_mean,
                         const em_view *save_invstd, const em_view *x, const em_view *weight,
                         const em_view *bias, int64_t groups, double eps);
em_status ocl_rms_norm(void *ctx, const em_view *out, const em_view *save_invrms,
                       const em_view *x, const em_view *weight, int64_t norm_numel,
                       double eps);
/* quant.c (ABI 5) */
em_status ocl_quantize(void *ctx, const em_view *out, const em_view *x,
                       const em_quant_scheme *s);
em_status ocl_dequantize(void *ctx, const em_view *out, const em_view *q,
                         const em_quant_scheme *s);
em_status ocl_qmatmul(void *ctx, const em_view *out, const em_view *a, const em_quant_scheme *as,
                      const em_view *b, const em_quant_scheme *bs);

#endif /* EMBER_OCL_H */
