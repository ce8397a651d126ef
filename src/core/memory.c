/* memory.c — device memory statistics, from the backends' allocators. */
#include "core/internal.h"

/* The backend of dev with a memory count, or a failure naming fn. */
static em_status emi_memory_backend(const char *fn, em_device dev, const em_backend_ops **ops,
                                    void **ctx) {
    EMI_TRY(emi_check_device_value(fn, dev));
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
    /* the tiny buffers this thread's tensor cache keeps are no tensor's: give them back
     * first, so that bytes in use are what tensors hold */
    emi_tensor_cache_drain();
    size_t in_use = 0, peak = 0;
    ops->memory(ctx, &in_use, &peak);
    out->bytes_in_use = in_use;
    out->peak_bytes = peak;
    out->bytes_cached = ops->memory_cached ? ops->memory_cached(ctx) : 0;
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

em_status em_device_memory_release(em_device dev) {
    static const char fn[] = "em_device_memory_release";
    const em_backend_ops *ops;
    void *ctx;
    EMI_TRY(emi_check_device_value(fn, dev));
    em_status s = emi_backend(dev, &ops, &ctx);
    if (s != EM_OK) return emi_fail_prefixed(s, fn);
    emi_tensor_cache_drain();
    if (ops->memory_release) ops->memory_release(ctx);
    return EM_OK;
}
