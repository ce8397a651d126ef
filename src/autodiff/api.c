/* api.c — the public autodiff calls on tensors, and device memory statistics. */
#include "autodiff/tape_impl.h"

em_status em_tensor_require_grad(em_tensor *t) {
    static const char fn[] = "em_tensor_require_grad";
    EMI_TRY(emi_check_tensor(fn, "t", t));
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

/* The backend of dev with a memory count, or a failure naming fn. */
static em_status emi_memory_backend(const char *fn, em_device dev, const em_backend_ops **ops,
                                    void **ctx) {
    em_status s = emi_backend(dev, ops, ctx);
    if (s != EM_OK) return emi_fail_prefixed(s, fn);
    if (!(*ops)->memory || !(*ops)->memory_reset_peak)
        return emi_fail(EM_ERR_UNSUPPORTED, "%s: the %s backend keeps no memory count", fn,
                        (*ops)->name);
    return EM_OK;
}

em_status em_device_memory(em_device dev, em_memory_stats *out) {
    static const char fn[] = "em_device_memory";
    EMI_TRY(emi_check_out(fn, out));
    const em_backend_ops *ops;
    void *ctx;
    EMI_TRY(emi_memory_backend(fn, dev, &ops, &ctx));
    size_t in_use = 0, peak = 0;
    ops->memory(ctx, &in_use, &peak);
    out->bytes_in_use = in_use;
    out->peak_bytes = peak;
    return EM_OK;
}

em_status em_device_memory_reset_peak(em_device dev) {
    static const char fn[] = "em_device_memory_reset_peak";
    const em_backend_ops *ops;
    void *ctx;
    EMI_TRY(emi_memory_backend(fn, dev, &ops, &ctx));
    ops->memory_reset_peak(ctx);
    return EM_OK;
}
