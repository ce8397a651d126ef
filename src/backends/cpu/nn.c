/* STUB: delegates to ref until the real kernels land. */
#include "cpu.h"

em_status cpu_max_pool2d(void *ctx, const em_view *out, const em_view *indices,
                         const em_view *x, const em_pool_args *a) {
    return cpu_ref()->max_pool2d(ctx, out, indices, x, a);
}

em_status cpu_avg_pool2d(void *ctx, const em_view *out, const em_view *x,
                         const em_pool_args *a) {
    return cpu_ref()->avg_pool2d(ctx, out, x, a);
}

em_status cpu_avg_pool2d_backward(void *ctx, const em_view *gx, const em_view *gy,
                                  const em_pool_args *a) {
    return cpu_ref()->avg_pool2d_backward(ctx, gx, gy, a);
}

em_status cpu_layer_norm(void *ctx, const em_view *out, const em_view *x, const em_view *weight,
                         const em_view *bias, int64_t norm_numel, double eps) {
    return cpu_ref()->layer_norm(ctx, out, x, weight, bias, norm_numel, eps);
}
