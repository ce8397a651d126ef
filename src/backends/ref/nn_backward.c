/* STUB: replaced by the real kernels. */
#include "ref.h"

em_status ref_conv2d_weight_grad(void *ctx, const em_view *gw, const em_view *x,
                                 const em_view *gy, const em_conv_args *a) {
    return em_backend_set_error(EM_ERR_UNSUPPORTED, "ref: conv2d_weight_grad not implemented yet");
}

em_status ref_avg_pool2d_backward(void *ctx, const em_view *gx, const em_view *gy,
                                  const em_pool_args *a) {
    return em_backend_set_error(EM_ERR_UNSUPPORTED, "ref: avg_pool2d_backward not implemented yet");
}

em_status ref_adaptive_avg_pool2d_backward(void *ctx, const em_view *gx, const em_view *gy) {
    return em_backend_set_error(EM_ERR_UNSUPPORTED,
                                "ref: adaptive_avg_pool2d_backward not implemented yet");
}
