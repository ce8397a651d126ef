/*
 * vk.h — private interface of the Vulkan backend.
 *
 * One ember device per physical device that has a compute queue (`vulkan:0`, `vulkan:1`, ...,
 * in the loader's order). Each device has one logical device and one queue. Buffers live in
 * device memory; the `void *buf` the core holds is a `vk_buf *`. Kernels are recorded into a
 * command buffer (a "batch") and submitted without waiting; the host waits only where it needs
 * data (read, sync) and the backend submits a batch when it grows large.
 *
 * Shaders are the GLSL files of shaders/, compiled to SPIR-V at build time (glslc) once per
 * variant listed in shaders/<family>.list, and embedded (the generated vk_spirv.c). A variant
 * is named like "unary.f16.f16"; its pipeline is created at first use from the device's
 * pipeline cache (kept on disk per device and driver, see cache in stream.c) and kept.
 *
 * Every shader includes common.glsl, which declares the parameters of a dispatch (binding 0,
 * `P`: up to VK_MAX_VIEWS views, 16 ints, 16 floats and 8 doubles given as 16 uint words) and
 * the dtype macros that kernels use (see that file). Bindings 1..VK_MAX_BUFS are the tensors'
 * buffers, bound whole: a view's offset and strides count elements from the buffer's start.
 * Element indices are 32-bit (a binding holds at most maxStorageBufferRange bytes; alloc
 * refuses larger buffers).
 *
 * Dtypes are gated on the device's features: i8/u8/bool need storageBuffer8BitAccess,
 * f16/bf16/i16 storageBuffer16BitAccess, i64 shaderInt64, f64 shaderFloat64 (and shaderInt64);
 * vk_check_dtype gives EM_ERR_UNSUPPORTED naming the missing feature.
 *
 * Errors of the driver come back as EM_ERR_BACKEND (EM_ERR_NOMEM for out-of-memory results)
 * with the VkResult named; nothing aborts.
 */
#ifndef EMBER_VK_H
#define EMBER_VK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <vulkan/vulkan.h>

#include "ember/backend.h"

#define VK_MAX_RANK 8
#define VK_MAX_VIEWS 6 /* views in a dispatch's parameters */
#define VK_MAX_BUFS 7  /* tensor buffers bound to a dispatch (bindings 1..7) */
#define VK_WG 256      /* the workgroup size of 1-d kernels (common.glsl's WG) */

/** A buffer: what em_view.buf points to for this backend. */
typedef struct vk_buf {
    VkBuffer buffer;
    VkDeviceMemory memory;
    void *map;      /* host pointer of the whole buffer, or NULL (device-only memory) */
    size_t bytes;   /* the size asked for */
    size_t cap;     /* the size allocated (a size class; 0: a buffer outside the caches) */
    bool staging;   /* a host-visible staging buffer (its own cache), not a tensor's */
    struct vk_buf *next; /* in the allocator's lists */
    struct vk_buf *lprev, *lnext; /* in the device's list of live tensor buffers */
} vk_buf;

/** A view as shaders receive it (the layout of view_t in common.glsl, std430). */
typedef struct vk_view_arg {
    int32_t shape[VK_MAX_RANK];
    int32_t strides[VK_MAX_RANK];
    int32_t offset;
    int32_t rank;
    int32_t numel;  /* elements of the view */
    int32_t contig; /* 1: row-major contiguous, element i at offset + i */
} vk_view_arg;

/** A dispatch's parameters (the layout of Params in common.glsl, std430). */
typedef struct vk_params {
    vk_view_arg v[VK_MAX_VIEWS];
    int32_t i[16];
    float f[16];
    uint32_t d[16]; /* 8 doubles (or int64s), low word first: vk_set_f64 / vk_set_i64 */
} vk_params;

/** A device: the context the core keeps for `vulkan:N` (from `open`). */
typedef struct vk_dev vk_dev;

/** Records one dispatch of the shader variant `variant` (e.g. "binary.f32.b8") with
 *  groups[0..2] workgroups (each at most 65,535; a 0 records nothing), the parameters *p
 *  (copied) and the buffers bufs[0..nbufs) at bindings 1..nbufs (NULL entries: a dummy).
 *  The pipeline is created at first use. A barrier orders it after everything recorded
 *  before. Thread-safe. An unknown variant is EM_ERR_UNSUPPORTED naming it. */
em_status vk_launch(vk_dev *d, const char *variant, const uint32_t groups[3],
                    const vk_params *p, int nbufs, vk_buf *const *bufs);
/** vk_launch of a 1-d grid-stride kernel over n items: ceil(n / VK_WG) groups, at most
 *  65,535 (the shader loops: common.glsl's GRID_LOOP). */
em_status vk_launch_1d(vk_dev *d, const char *variant, int64_t n, const vk_params *p,
                       int nbufs, vk_buf *const *bufs);
/** vk_launch / vk_launch_1d with the pipeline specialized on `op` (>= 0): the shader's
 *  specialization constant 0 (common.glsl's SPEC_OP) is op, so that a switch on it folds when
 *  the pipeline is made. A driver that runs invocations as SIMD lanes (lavapipe) otherwise
 *  executes every case of a switch on a value it cannot see is uniform. One pipeline per
 *  (variant, op), made at first use. */
em_status vk_launch_op(vk_dev *d, const char *variant, int op, const uint32_t groups[3],
                       const vk_params *p, int nbufs, vk_buf *const *bufs);
em_status vk_launch_1d_op(vk_dev *d, const char *variant, int op, int64_t n, const vk_params *p,
                          int nbufs, vk_buf *const *bufs);

/** The dtype tag of the shader variants ("f32", "f64", "f16", "bf16", "i64", "i32", "i16",
 *  "i8", "u8", "b8"), or NULL for a quantized dtype. */
const char *vk_dtype_tag(em_dtype dt);
/** EM_OK when the device can run kernels on dtype dt, else EM_ERR_UNSUPPORTED with a message
 *  naming `op`, the dtype, the missing feature and the device. */
em_status vk_check_dtype(vk_dev *d, const char *op, em_dtype dt);
/** The shader form of a view (unused dims 1 and 0; numel and contig filled). */
vk_view_arg vk_view(const em_view *v);
/** The buffer of a view. */
static inline vk_buf *vk_vbuf(const em_view *v) { return (vk_buf *)v->buf; }
/** Elements of a view. */
static inline int64_t vk_numel(const em_view *v) {
    int64_t n = 1;
    for (int d = 0; d < v->rank; d++) n *= v->shape[d];
    return n;
}
/** True when v is row-major contiguous (size-1 dims may have any stride). */
bool vk_contiguous(const em_view *v);
/** Stores a double (as its two words) in p->d[2k], p->d[2k+1] (common.glsl: PF64(k)). */
void vk_set_f64(vk_params *p, int k, double x);
/** Stores an int64 likewise (common.glsl: PI64(k)). */
void vk_set_i64(vk_params *p, int k, int64_t x);

/** Scratch device memory (at least `bytes`) for kernels recorded before the matching
 *  vk_scratch_free; its release waits until that work has completed. */
em_status vk_scratch(vk_dev *d, size_t bytes, vk_buf **out);
void vk_scratch_free(vk_dev *d, vk_buf *b);

/** Sets this thread's error from a failed Vulkan call and returns EM_ERR_BACKEND
 *  (EM_ERR_NOMEM for the out-of-memory results), naming the call and the VkResult. */
em_status vk_fail(VkResult r, const char *what);
/** The name of a VkResult ("VK_ERROR_DEVICE_LOST", ...). */
const char *vk_result_name(VkResult r);

/* ---- kernel slots, one file a family ---- */
/* elementwise.c: fill, arange, copy, unary, binary, binary_scalar, where */
em_status vk_fill(void *ctx, const em_view *out, double value);
em_status vk_arange(void *ctx, const em_view *out, double start, double step);
em_status vk_copy(void *ctx, const em_view *out, const em_view *in);
em_status vk_unary(void *ctx, em_unary_op op, const em_view *out, const em_view *in,
                   const double *params);
em_status vk_binary(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                    const em_view *b);
em_status vk_binary_scalar(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                           double s);
em_status vk_where(void *ctx, const em_view *out, const em_view *cond, const em_view *a,
                   const em_view *b);

/* random.c */
em_status vk_random(void *ctx, em_random_op op, const em_view *out, uint64_t seed,
                    const double *params);
/* fused.c, reduce.c, matmul.c, index.c, nn.c, norm.c, quant.c */
em_status vk_unary_backward(void *ctx, em_unary_op op, const em_view *gx, const em_view *x,
                             const em_view *y, const em_view *gy, const double *params);
em_status vk_adam_step(void *ctx, const em_view *param, const em_view *exp_avg,
                        const em_view *exp_avg_sq, const em_view *grad, const em_adam_args *a);
em_status vk_reduce(void *ctx, em_reduce_op op, const em_view *out, const em_view *in, int dim,
                     const double *params);
em_status vk_cumsum(void *ctx, const em_view *out, const em_view *in, int dim);
em_status vk_cumulative(void *ctx, em_cum_op op, const em_view *values, const em_view *indices,
                         const em_view *in, int dim);
em_status vk_softmax(void *ctx, const em_view *out, const em_view *in, int dim, bool log);
em_status vk_matmul(void *ctx, const em_view *out, const em_view *a, const em_view *b);
em_status vk_gather(void *ctx, const em_view *out, const em_view *in, int dim,
                     const em_view *index);
em_status vk_scatter_add(void *ctx, const em_view *out, int dim, const em_view *index,
                          const em_view *src);
em_status vk_index_select(void *ctx, const em_view *out, const em_view *in, int dim,
                           const em_view *index);
em_status vk_sort(void *ctx, const em_view *values, const em_view *indices, const em_view *in,
                   int dim, bool descending);
em_status vk_conv2d(void *ctx, const em_view *out, const em_view *x, const em_view *w,
                     const em_view *bias, const em_conv_args *a);
em_status vk_conv_transpose2d(void *ctx, const em_view *out, const em_view *x, const em_view *w,
                               const em_view *bias, const em_conv_args *a);
em_status vk_max_pool2d(void *ctx, const em_view *out, const em_view *indices, const em_view *x,
                         const em_pool_args *a);
em_status vk_avg_pool2d(void *ctx, const em_view *out, const em_view *x, const em_pool_args *a);
em_status vk_adaptive_avg_pool2d(void *ctx, const em_view *out, const em_view *x);
em_status vk_conv2d_weight_grad(void *ctx, const em_view *gw, const em_view *x,
                                 const em_view *gy, const em_conv_args *a);
em_status vk_avg_pool2d_backward(void *ctx, const em_view *gx, const em_view *gy,
                                  const em_pool_args *a);
em_status vk_adaptive_avg_pool2d_backward(void *ctx, const em_view *gx, const em_view *gy);
em_status vk_layer_norm(void *ctx, const em_view *out, const em_view *x, const em_view *weight,
                         const em_view *bias, int64_t norm_numel, double eps);
/* norm.c */
em_status vk_batch_norm(void *ctx, const em_view *out, const em_view *save_mean,
                         const em_view *save_invstd, const em_view *x, const em_view *weight,
                         const em_view *bias, const em_view *running_mean,
                         const em_view *running_var, bool training, double momentum,
                         double eps);
em_status vk_batch_norm_backward(void *ctx, const em_view *gx, const em_view *gweight,
                                  const em_view *gbias, const em_view *gy, const em_view *x,
                                  const em_view *mean, const em_view *invstd,
                                  const em_view *weight, bool training);
em_status vk_group_norm(void *ctx, const em_view *out, const em_view *save_mean,
                         const em_view *save_invstd, const em_view *x, const em_view *weight,
                         const em_view *bias, int64_t groups, double eps);
em_status vk_rms_norm(void *ctx, const em_view *out, const em_view *save_invrms,
                       const em_view *x, const em_view *weight, int64_t norm_numel,
                       double eps);
/* quant.c (ABI 5) */
em_status vk_quantize(void *ctx, const em_view *out, const em_view *x,
                       const em_quant_scheme *s);
em_status vk_dequantize(void *ctx, const em_view *out, const em_view *q,
                         const em_quant_scheme *s);
em_status vk_qmatmul(void *ctx, const em_view *out, const em_view *a, const em_quant_scheme *as,
                      const em_view *b, const em_quant_scheme *bs);

#endif /* EMBER_VK_H */
