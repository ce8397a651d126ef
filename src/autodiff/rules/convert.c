/* convert.c — backward rules of cast, clone and to_device. */
#include "autodiff/rules/rules.h"

/* cast: params: the target em_dtype. The gradient goes back in the input's dtype. */
static em_status cast_forward(const void *p, em_tensor *const *in, int nin, em_tensor **out) {
    (void)nin;
    return em_cast(in[0], *(const em_dtype *)p, out);
}

static em_status cast_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    return em_cast(bw->grad, emi_bw_in_dtype(bw, 0), &bw->gin[0]);
}

const emi_ad_rule emi_rule_cast = {"cast", false, 0, cast_forward, cast_backward};

static em_status clone_forward(const void *p, em_tensor *const *in, int nin, em_tensor **out) {
    (void)p;
    (void)nin;
    return em_clone(in[0], out);
}

static em_status clone_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor_retain(bw->grad);
    bw->gin[0] = bw->grad;
    return EM_OK;
}

const emi_ad_rule emi_rule_clone = {"clone", false, 0, clone_forward, clone_backward};

/* to_device: the gradient moves back to the source device. */
static em_status to_device_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    const em_device *src = bw->params;
    return em_to_device(bw->grad, *src, &bw->gin[0]);
}

const emi_ad_rule emi_rule_to_device = {"to_device", false, 0, NULL, to_device_backward};
