/* device.c — device values, their text form, the list of present devices, the default. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

static const char *const emi_builtin_names[] = {
    [EM_BACKEND_REF] = "ref",       [EM_BACKEND_CPU] = "cpu",     [EM_BACKEND_OPENCL] = "opencl",
    [EM_BACKEND_VULKAN] = "vulkan", [EM_BACKEND_CUDA] = "cuda",   [EM_BACKEND_TORCH] = "torch",
    [EM_BACKEND_REMOTE] = "remote", [EM_BACKEND_CAPTURE] = "capture",
};

const char *emi_builtin_backend_name(em_backend b) {
    if ((int)b >= 0 && (int)b <= EM_BACKEND_CAPTURE) return emi_builtin_names[b];
    return NULL;
}

const char *em_backend_name(em_backend b) {
    const em_backend_ops *o = em_backend_get(b);
    if (o) return o->name;
    if ((int)b >= 0 && (int)b <= EM_BACKEND_CAPTURE) return emi_builtin_names[b];
    return "?";
}

em_status emi_fail_device_value(const char *fn, em_device dev) {
    if ((unsigned)dev.backend >= EM_BACKEND_MAX)
        return emi_fail(EM_ERR_ARG, "%s: invalid device: backend %d is outside 0..%d", fn,
                        (int)dev.backend, EM_BACKEND_MAX - 1);
    if (dev.index < 0)
        return emi_fail(EM_ERR_ARG, "%s: invalid device: index %d is negative", fn, dev.index);
    if ((unsigned)dev.checkpointing > EM_CKPT_BALANCED)
        return emi_fail(EM_ERR_ARG,
                        "%s: invalid device: checkpointing %d is not an em_checkpointing value",
                        fn, (int)dev.checkpointing);
    return emi_fail(EM_ERR_ARG,
                    "%s: invalid device: checkpointing of an autodiff device must be "
                    "EM_CKPT_DISABLED or EM_CKPT_BALANCED, not EM_CKPT_NONE",
                    fn);
}

em_status emi_check_device(const char *fn, em_device dev) {
    EMI_TRY(emi_check_device_value(fn, dev));
    const em_backend_ops *ops;
    void *ctx;
    em_status s = emi_backend(dev, &ops, &ctx);
    return s == EM_OK ? EM_OK : emi_fail_prefixed(s, fn);
}

bool em_device_equal(em_device a, em_device b) {
    if (a.backend != b.backend || a.index != b.index || a.autodiff != b.autodiff) return false;
    return !a.autodiff || a.checkpointing == b.checkpointing;
}

em_status em_device_autodiff(em_device inner, em_checkpointing strategy, em_device *out) {
    static const char fn[] = "em_device_autodiff";
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_device_value(fn, inner));
    if (strategy != EM_CKPT_DISABLED && strategy != EM_CKPT_BALANCED)
        return emi_fail(EM_ERR_ARG, "%s: strategy must be EM_CKPT_DISABLED or EM_CKPT_BALANCED",
                        fn);
    if (inner.autodiff)
        return emi_fail(EM_ERR_STATE, "%s: the device is already an autodiff device", fn);
    inner.autodiff = true;
    inner.checkpointing = strategy;
    *out = inner;
    return EM_OK;
}

em_status em_device_name(em_device dev, char *buf, size_t cap) {
    static const char fn[] = "em_device_name";
    if (!buf) return emi_fail(EM_ERR_ARG, "%s: buf is NULL", fn);
    EMI_TRY(emi_check_device_value(fn, dev));
    const char *name = em_backend_name(dev.backend);
    if (strcmp(name, "?") == 0 || dev.index < 0)
        return emi_fail(EM_ERR_ARG, "%s: not a device (backend %d, index %d)", fn,
                        (int)dev.backend, dev.index);
    char tmp[96];
    int n;
    /* Index 0 of a backend is written without its index ("ref", "cpu"), others with it. */
    if (dev.index == 0) n = snprintf(tmp, sizeof tmp, "%s", name);
    else n = snprintf(tmp, sizeof tmp, "%s:%d", name, dev.index);
    if (dev.autodiff)
        n += snprintf(tmp + n, sizeof tmp - (size_t)n, "+autodiff%s",
                      dev.checkpointing == EM_CKPT_BALANCED ? ":balanced" : "");
    if ((size_t)n + 1 > cap)
        return emi_fail(EM_ERR_ARG, "%s: buffer of %zu bytes is too small (need %d)", fn, cap,
                        n + 1);
    memcpy(buf, tmp, (size_t)n + 1);
    return EM_OK;
}

/* The backend (registered or built-in) named by the n bytes at name, or -1. */
static int emi_backend_by_name(const char *name, size_t n) {
    for (int b = 0; b < EM_BACKEND_MAX; b++) {
        const char *nm = em_backend_name((em_backend)b);
        if (strcmp(nm, "?") != 0 && strlen(nm) == n && strncmp(nm, name, n) == 0) return b;
    }
    return -1;
}

em_status em_device_parse(const char *text, em_device *out) {
    static const char fn[] = "em_device_parse";
    if (!text) return emi_fail(EM_ERR_ARG, "%s: text is NULL", fn);
    EMI_TRY(emi_check_out(fn, out));
    em_device d = {EM_BACKEND_REF, 0, false, EM_CKPT_NONE};
    size_t len = strlen(text);
    if (len == 0 || len > 64) return emi_fail(EM_ERR_ARG, "%s: '%.64s' is not a device", fn, text);
    const char *p = text;
    size_t nlen = 0;
    while (p[nlen] && (isalnum((unsigned char)p[nlen]) || p[nlen] == '_')) nlen++;
    if (nlen == 0) return emi_fail(EM_ERR_ARG, "%s: '%s' is not a device", fn, text);
    int found = emi_backend_by_name(p, nlen);
    if (found < 0) {
        /* Not registered: an out-of-tree backend's plugin (libember-NAME.so) may have it. */
        bool absent;
        em_status ps = emi_plugin_autoload(p, nlen, &absent);
        if (ps == EM_OK) found = emi_backend_by_name(p, nlen);
        else if (absent)
            return emi_fail(EM_ERR_ARG, "%s: '%s': unknown backend '%.*s'", fn, text, (int)nlen, p);
        else {
            char why[1280];
            snprintf(why, sizeof why, "%s", em_last_error());
            return emi_fail(EM_ERR_DEVICE, "%s: '%s': %s", fn, text, why);
        }
        if (found < 0)
            return emi_fail(EM_ERR_DEVICE, "%s: '%s': its plugin registered no backend '%.*s'",
                            fn, text, (int)nlen, p);
    }
    d.backend = (em_backend)found;
    p += nlen;
    if (*p == ':') {
        p++;
        if (!isdigit((unsigned char)*p))
            return emi_fail(EM_ERR_ARG, "%s: '%s': expected a device index after ':'", fn, text);
        long idx = 0;
        while (isdigit((unsigned char)*p)) {
            idx = idx * 10 + (*p - '0');
            if (idx > 1000000) return emi_fail(EM_ERR_ARG, "%s: '%s': index too large", fn, text);
            p++;
        }
        d.index = (int)idx;
    }
    if (*p == '+') {
        if (strncmp(p, "+autodiff", 9) != 0)
            return emi_fail(EM_ERR_ARG, "%s: '%s': expected '+autodiff'", fn, text);
        p += 9;
        d.autodiff = true;
        d.checkpointing = EM_CKPT_DISABLED;
        if (*p == ':') {
            p++;
            if (strcmp(p, "balanced") == 0) d.checkpointing = EM_CKPT_BALANCED;
            else if (strcmp(p, "disabled") == 0) d.checkpointing = EM_CKPT_DISABLED;
            else return emi_fail(EM_ERR_ARG, "%s: '%s': unknown checkpointing '%s'", fn, text, p);
            p += strlen(p);
        }
    }
    if (*p) return emi_fail(EM_ERR_ARG, "%s: '%s': unexpected '%s'", fn, text, p);
    const em_backend_ops *o = em_backend_get(d.backend);
    if (!o) {
        /* A built-in backend this build left out may come as a plugin. */
        const char *nm = em_backend_name(d.backend);
        bool absent;
        if (emi_plugin_autoload(nm, strlen(nm), &absent) == EM_OK) {
            o = em_backend_get(d.backend);
        } else {
            char why[1280];
            snprintf(why, sizeof why, "%s", em_last_error());
            return emi_fail(EM_ERR_DEVICE, "%s: '%s': the %s backend is not in this build%s%s%s",
                            fn, text, nm, absent ? " (" : ", and ", why, absent ? ")" : "");
        }
    }
    if (!o)
        return emi_fail(EM_ERR_DEVICE, "%s: '%s': the %s backend is not in this build", fn, text,
                        em_backend_name(d.backend));
    int count = o->device_count();
    if (d.index >= count)
        return emi_fail(EM_ERR_DEVICE, "%s: '%s': this machine has %d %s device%s", fn, text,
                        count, o->name, count == 1 ? "" : "s");
    *out = d;
    return EM_OK;
}

em_status em_devices(em_device *list, size_t cap, size_t *count) {
    static const char fn[] = "em_devices";
    if (!count) return emi_fail(EM_ERR_ARG, "%s: count is NULL", fn);
    if (cap > 0 && !list) return emi_fail(EM_ERR_ARG, "%s: list is NULL with cap %zu", fn, cap);
    emi_plugin_load_all();
    size_t n = 0;
    for (int b = 0; b < EM_BACKEND_MAX; b++) {
        const em_backend_ops *o = em_backend_get((em_backend)b);
        if (!o || b == EM_BACKEND_CAPTURE) continue; /* records, computes nothing */
        int c = o->device_count();
        for (int i = 0; i < c; i++, n++)
            if (n < cap) list[n] = (em_device){(em_backend)b, i, false, EM_CKPT_NONE};
    }
    *count = n;
    return EM_OK;
}

em_device em_device_default(void) {
    const char *env = getenv("EMBER_DEVICE");
    em_device d;
    if (env && *env) {
        char saved[512];
        snprintf(saved, sizeof saved, "%s", em_last_error());
        em_status s = em_device_parse(env, &d);
        emi_fail(EM_OK, "%s", saved); /* the default is not a failing call: keep the message */
        if (s == EM_OK) return d;
    }
    /* Preference: the fastest backend present. */
    static const em_backend order[] = {EM_BACKEND_CUDA, EM_BACKEND_CPU, EM_BACKEND_REF};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        const em_backend_ops *o = em_backend_get(order[i]);
        if (o && o->device_count() > 0) return (em_device){order[i], 0, false, EM_CKPT_NONE};
    }
    return (em_device){EM_BACKEND_REF, 0, false, EM_CKPT_NONE};
}

em_device em_device_inner(em_device dev) {
    dev.autodiff = false;
    dev.checkpointing = EM_CKPT_NONE;
    return dev;
}
