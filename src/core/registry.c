/* registry.c — the table of backends and their per-device contexts. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/internal.h"

extern const em_backend_ops em_ref_backend_ops;
extern const em_backend_ops em_capture_backend_ops;
#ifdef EMBER_WITH_CPU
extern const em_backend_ops em_cpu_backend_ops;
#endif
#ifdef EMBER_WITH_OPENCL
extern const em_backend_ops em_opencl_backend_ops;
#endif
#ifdef EMBER_WITH_VULKAN
extern const em_backend_ops em_vulkan_backend_ops;
#endif
#ifdef EMBER_WITH_REMOTE
extern const em_backend_ops em_remote_backend_ops;
#endif

static pthread_mutex_t emi_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t emi_reg_once = PTHREAD_ONCE_INIT;
/* The tables the core routes through. For a backend whose buffers are host memory
 * (EM_CAP_HOST_MEMORY) this is a copy of its table with every kernel slot it leaves NULL
 * taken from the ref backend, whose kernels read and write host views the same way: such a
 * backend implements natively what it makes faster and inherits the rest. */
_Atomic(const em_backend_ops *) emi_backends[EM_BACKEND_MAX];
/* The backends' own tables, as registered. */
static _Atomic(const em_backend_ops *) emi_native[EM_BACKEND_MAX];
static em_backend_ops emi_merged[EM_BACKEND_MAX];
_Atomic(void *) emi_ctxs[EM_BACKEND_MAX][EMI_MAX_DEVICES];

/* Every kernel slot of em_backend_ops (not the device and memory ones, nor the fused slots of
 * ABI 3, unary_backward and adam_step: left NULL they are composed from the backend's own
 * slots, which beats ref's scalar loop on a backend that made those fast). */
#define EMI_KERNEL_SLOTS(X)                                                                   \
    X(fill) X(arange) X(random) X(unary) X(binary) X(binary_scalar) X(where) X(reduce)       \
    X(cumsum) X(softmax) X(matmul) X(gather) X(scatter_add) X(index_select) X(sort)          \
    X(conv2d) X(conv_transpose2d) X(max_pool2d) X(avg_pool2d) X(adaptive_avg_pool2d)         \
    X(conv2d_weight_grad) X(avg_pool2d_backward) X(adaptive_avg_pool2d_backward)             \
    X(layer_norm) X(batch_norm) X(batch_norm_backward) X(group_norm) X(rms_norm) \
    X(cumulative) X(quantize) X(dequantize) X(qmatmul)

/* Installs a backend's table (under emi_reg_lock or during init). */
static void emi_install(const em_backend_ops *ops) {
    const em_backend_ops *route = ops;
    if ((ops->caps & EM_CAP_HOST_MEMORY) && ops->id != EM_BACKEND_REF) {
        em_backend_ops *m = &emi_merged[ops->id];
        const em_backend_ops *ref = &em_ref_backend_ops;
        *m = *ops;
#define EMI_FILL(slot)                                                                        \
    if (!m->slot) m->slot = ref->slot;
        EMI_KERNEL_SLOTS(EMI_FILL)
        EMI_FILL(copy)
#undef EMI_FILL
        route = m;
    }
    atomic_store_explicit(&emi_native[ops->id], ops, memory_order_release);
    atomic_store_explicit(&emi_backends[ops->id], route, memory_order_release);
}

static void emi_reg_init(void) {
    emi_install(&em_ref_backend_ops);
    emi_install(&em_capture_backend_ops);
#ifdef EMBER_WITH_CPU
    emi_install(&em_cpu_backend_ops);
#endif
#ifdef EMBER_WITH_OPENCL
    emi_install(&em_opencl_backend_ops);
#endif
#ifdef EMBER_WITH_VULKAN
    emi_install(&em_vulkan_backend_ops);
#endif
#ifdef EMBER_WITH_REMOTE
    emi_install(&em_remote_backend_ops);
#endif
}

const em_backend_ops *em_backend_get(em_backend b) {
    if ((int)b < 0 || (int)b >= EM_BACKEND_MAX) return NULL;
    pthread_once(&emi_reg_once, emi_reg_init);
    return atomic_load_explicit(&emi_backends[b], memory_order_acquire);
}

const em_backend_ops *em_backend_get_native(em_backend b) {
    if ((int)b < 0 || (int)b >= EM_BACKEND_MAX) return NULL;
    pthread_once(&emi_reg_once, emi_reg_init);
    return atomic_load_explicit(&emi_native[b], memory_order_acquire);
}

em_status em_backend_register(const em_backend_ops *ops) {
    static const char fn[] = "em_backend_register";
    pthread_once(&emi_reg_once, emi_reg_init);
    if (!ops) return emi_fail(EM_ERR_ARG, "%s: ops is NULL", fn);
    if (ops->abi_version != EM_BACKEND_ABI_VERSION)
        return emi_fail(EM_ERR_ARG, "%s: ABI version %u, this library speaks %u", fn,
                        ops->abi_version, EM_BACKEND_ABI_VERSION);
    if (!ops->name || !ops->name[0] || !ops->device_count || !ops->open || !ops->alloc ||
        !ops->free || !ops->read || !ops->write ||
        (!ops->copy && !(ops->caps & EM_CAP_HOST_MEMORY)))
        return emi_fail(EM_ERR_ARG,
                        "%s: name, device_count, open, alloc, free, read, write and copy are "
                        "required (copy may be NULL with EM_CAP_HOST_MEMORY)",
                        fn);
    /* A built-in id this build left out may be registered under its own name (a plugin). */
    bool builtin = (int)ops->id >= 0 && (int)ops->id < EM_BACKEND_EXTERNAL0 &&
                   emi_builtin_backend_name(ops->id) &&
                   strcmp(emi_builtin_backend_name(ops->id), ops->name) == 0;
    if (!builtin && ((int)ops->id < EM_BACKEND_EXTERNAL0 || (int)ops->id >= EM_BACKEND_MAX))
        return emi_fail(EM_ERR_ARG,
                        "%s: id %d is outside %d..%d and is not a built-in id registered under "
                        "its name",
                        fn, (int)ops->id, EM_BACKEND_EXTERNAL0, EM_BACKEND_MAX - 1);
    pthread_mutex_lock(&emi_reg_lock);
    em_status s = EM_OK;
    for (int i = 0; i < EM_BACKEND_MAX && s == EM_OK; i++) {
        const em_backend_ops *o = atomic_load(&emi_backends[i]);
        if (i == (int)ops->id && o) s = emi_fail(EM_ERR_STATE, "%s: id %d is taken by '%s'", fn, i, o->name);
        else if (o && strcmp(o->name, ops->name) == 0)
            s = emi_fail(EM_ERR_STATE, "%s: a backend named '%s' is registered", fn, ops->name);
    }
    if (s == EM_OK) emi_install(ops);
    pthread_mutex_unlock(&emi_reg_lock);
    return s;
}

em_status emi_backend_slow(em_device dev, const em_backend_ops **ops, void **ctx) {
    pthread_once(&emi_reg_once, emi_reg_init);
    const em_backend_ops *o = em_backend_get(dev.backend);
    if (!o && emi_builtin_backend_name(dev.backend)) {
        /* A built-in backend this build left out may come as a plugin. */
        const char *name = emi_builtin_backend_name(dev.backend);
        bool absent;
        em_status s = emi_plugin_autoload(name, strlen(name), &absent);
        if (s != EM_OK) {
            char why[1280];
            snprintf(why, sizeof why, "%s", em_last_error());
            return emi_fail(EM_ERR_DEVICE, "the %s backend is not in this build: %s", name, why);
        }
        o = em_backend_get(dev.backend);
    }
    if (!o) return emi_fail(EM_ERR_DEVICE, "backend %d is not in this build", (int)dev.backend);
    if (dev.index < 0 || dev.index >= EMI_MAX_DEVICES)
        return emi_fail(EM_ERR_DEVICE, "device %s:%d is not present", o->name, dev.index);
    /* A device whose context is open is present: the fast path. */
    void *c = atomic_load_explicit(&emi_ctxs[dev.backend][dev.index], memory_order_acquire);
    if (!c) {
        if (dev.index >= o->device_count())
            return emi_fail(EM_ERR_DEVICE, "device %s:%d is not present", o->name, dev.index);
        pthread_mutex_lock(&emi_reg_lock);
        c = atomic_load(&emi_ctxs[dev.backend][dev.index]);
        em_status s = EM_OK;
        if (!c) {
            s = o->open(dev.index, &c);
            if (s == EM_OK) atomic_store_explicit(&emi_ctxs[dev.backend][dev.index], c, memory_order_release);
        }
        pthread_mutex_unlock(&emi_reg_lock);
        if (s != EM_OK) return s;
    }
    *ops = o;
    *ctx = c;
    return EM_OK;
}

em_status emi_fail_need(const char *fn, const em_backend_ops *ops, const char *slot) {
    return emi_fail(EM_ERR_UNSUPPORTED, "%s: the %s backend does not implement %s", fn, ops->name,
                    slot);
}
