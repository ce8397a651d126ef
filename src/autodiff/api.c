/* api.c — the public autodiff calls on tensors. */
#include "autodiff/tape_impl.h"

static _Thread_local bool emi_no_grad; /* false: recording, the default of every thread */

bool em_set_grad_enabled(bool enabled) {
    bool was = !emi_no_grad;
    emi_no_grad = !enabled;
    return was;
}

bool em_is_grad_enabled(void) { return !emi_no_grad; }

em_status em_tensor_require_grad(em_tensor *t) {
    static const char fn[] = "em_tensor_require_grad";
    EMI_TRY(emi_check_tensor(fn, "t", t));
    /* made in a no-grad scope: a leaf from now on */
    if (!t->ad && t->dev.autodiff && emi_kind(t->dtype) == EM_KIND_FLOAT) {
        em_device dev = t->dev;
        bool was = em_set_grad_enabled(true);
        em_status s = emi_ad_created(t, dev);
        em_set_grad_enabled(was);
        EMI_TRY(s);
    }
    if (!t->ad)
        return emi_fail(EM_ERR_STATE, "%s: the tensor is not tracked (create a float tensor on "
                        "an autodiff device, e.g. ref+autodiff)", fn);
    if (t->ad->rule)
        return emi_fail(EM_ERR_STATE, "%s: the tensor is the result of '%s', not a leaf", fn,
                        t->ad->rule->name);
    t->ad->requires_grad = true;
    return EM_OK;
}

bool em_tensor_requires_grad(const em_tensor *t) {
    return t && t->ad && !t->ad->rule && t->ad->requires_grad;
}

bool em_tensor_is_tracked(const em_tensor *t) { return t && t->ad; }

em_status em_tensor_detach(const em_tensor *t, em_tensor **out) {
    static const char fn[] = "em_tensor_detach";
    EMI_TRY(emi_check_tensor(fn, "t", t));
    EMI_TRY(emi_check_out(fn, out));
    return emi_ad_untracked_view(t, out);
}

