/* params.c — named parameter sets: an ordered list of (name, slot). */
#include <stdlib.h>
#include <string.h>

#include "ember/io.h"

#include "nn/nn_internal.h"

struct em_params {
    size_t n, cap;
    char **names;
    em_tensor ***slots;
};

em_status em_params_create(em_params **out) {
    if (!out) return nn_null("em_params_create", "out");
    em_params *p = calloc(1, sizeof *p);
    if (!p) return em_backend_set_error(EM_ERR_NOMEM, "em_params_create: out of memory");
    *out = p;
    return EM_OK;
}

void em_params_release(em_params *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n; i++) free(p->names[i]);
    free(p->names);
    free(p->slots);
    free(p);
}

em_status em_params_add(em_params *p, const char *name, em_tensor **slot) {
    static const char fn[] = "em_params_add";
    if (!p) return nn_null(fn, "params");
    if (!name) return nn_null(fn, "name");
    if (!slot) return nn_null(fn, "slot");
    if (!*slot) return em_backend_set_error(EM_ERR_ARG, "%s: slot '%s' holds no tensor", fn, name);
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->names[i], name) == 0)
            return em_backend_set_error(EM_ERR_ARG, "%s: a parameter named '%s' is already in the set",
                                        fn, name);
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 8;
        char **nn = realloc(p->names, cap * sizeof *nn);
        if (!nn) return em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
        p->names = nn;
        em_tensor ***ns = realloc(p->slots, cap * sizeof *ns);
        if (!ns) return em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
        p->slots = ns;
        p->cap = cap;
    }
    size_t len = strlen(name);
    char *copy = malloc(len + 1);
    if (!copy) return em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
    memcpy(copy, name, len + 1);
    p->names[p->n] = copy;
    p->slots[p->n] = slot;
    p->n++;
    return EM_OK;
}

size_t em_params_count(const em_params *p) { return p ? p->n : 0; }

const char *em_params_name(const em_params *p, size_t i) {
    return p && i < p->n ? p->names[i] : NULL;
}

em_tensor *em_params_get(const em_params *p, size_t i) {
    return p && i < p->n ? *p->slots[i] : NULL;
}

em_tensor **em_params_slot(const em_params *p, size_t i) {
    return p && i < p->n ? p->slots[i] : NULL;
}

em_tensor *em_params_find(const em_params *p, const char *name) {
    if (!p || !name) return NULL;
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->names[i], name) == 0) return *p->slots[i];
    return NULL;
}

em_status em_params_save(const em_params *st, const char *path) {
    static const char fn[] = "em_params_save";
    if (!st) return nn_null(fn, "params");
    if (!path) return nn_null(fn, "path");
    em_status s = EM_OK;
    size_t n = em_params_count(st);
    const char **names = s == EM_OK && n ? malloc(n * sizeof *names) : NULL;
    const em_tensor **ts = s == EM_OK && n ? malloc(n * sizeof *ts) : NULL;
    if (s == EM_OK && n && (!names || !ts))
        s = em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
    for (size_t i = 0; s == EM_OK && i < n; i++) {
        names[i] = em_params_name(st, i);
        ts[i] = em_params_get(st, i);
    }
    if (s == EM_OK) s = em_safetensors_save(path, names, ts, n);
    free(names);
    free(ts);
    return s;
}

em_status em_params_load(const em_params *st, const char *path) {
    static const char fn[] = "em_params_load";
    if (!st) return nn_null(fn, "params");
    if (!path) return nn_null(fn, "path");
    em_status s = EM_OK;
    size_t n = em_params_count(st);
    em_tensor_map *map = NULL;
    if (s == EM_OK) {
        em_device dev = n ? em_tensor_device(em_params_get(st, 0)) : em_device_default();
        dev.autodiff = false;
        dev.checkpointing = EM_CKPT_NONE;
        s = em_safetensors_load(path, dev, &map);
    }
    if (s == EM_OK && em_tensor_map_size(map) != n)
        s = em_backend_set_error(EM_ERR_IO, "%s: %s holds %zu tensors, the set %zu", fn, path,
                                 em_tensor_map_size(map), n);
    /* every check before the first assignment: a file that does not fit changes nothing */
    for (size_t pass = 0; pass < 2 && s == EM_OK; pass++)
        for (size_t i = 0; i < n && s == EM_OK; i++) {
            const char *name = em_params_name(st, i);
            em_tensor *dst = em_params_get(st, i), *src = NULL;
            if (em_tensor_map_get(map, name, &src) != EM_OK) {
                s = em_backend_set_error(EM_ERR_IO, "%s: %s has no tensor '%s'", fn, path, name);
                break;
            }
            int r = em_tensor_rank(dst);
            bool same = em_tensor_rank(src) == r &&
                        memcmp(em_tensor_shape(src), em_tensor_shape(dst),
                               (size_t)r * sizeof(int64_t)) == 0;
            if (!same)
                s = em_backend_set_error(EM_ERR_SHAPE, "%s: '%s' in %s has another shape than "
                                         "the set's", fn, name, path);
            else if (em_tensor_kind(src) == EM_KIND_QUANTIZED) {
                /* a quantized weight replaces the slot's tensor: a constant, no leaf to keep */
                em_kind dk = em_tensor_kind(dst);
                if (dk != EM_KIND_FLOAT && dk != EM_KIND_QUANTIZED)
                    s = em_backend_set_error(EM_ERR_DTYPE, "%s: '%s' in %s is %s, the set's is "
                                             "%s (a quantized tensor replaces a float or "
                                             "quantized one only)", fn, name, path,
                                             em_dtype_name(em_tensor_dtype(src)),
                                             em_dtype_name(em_tensor_dtype(dst)));
                else if (pass == 1) {
                    em_tensor *moved = NULL;
                    em_device dd = em_tensor_device(dst);
                    s = em_to_device(src, dd, &moved);
                    if (s == EM_OK) {
                        em_tensor **slot = em_params_slot(st, i);
                        em_tensor_release(*slot);
                        *slot = moved;
                        em_scope_escape(moved); /* the module's, not an open scope's */
                    }
                }
            } else if (em_tensor_dtype(src) != em_tensor_dtype(dst))
                s = em_backend_set_error(EM_ERR_DTYPE, "%s: '%s' in %s is %s, the set's is %s%s",
                                         fn, name, path, em_dtype_name(em_tensor_dtype(src)),
                                         em_dtype_name(em_tensor_dtype(dst)),
                                         em_tensor_kind(dst) == EM_KIND_QUANTIZED
                                             ? " (quantized: load a file with it quantized, "
                                               "or load the float file before "
                                               "em_params_quantize)"
                                             : "");
            else if (pass == 1) {
                em_device dd = em_tensor_device(dst), sd = em_tensor_device(src);
                dd.autodiff = false;
                dd.checkpointing = EM_CKPT_NONE;
                em_tensor *moved = NULL;
                if (dd.backend != sd.backend || dd.index != sd.index)
                    s = em_to_device(src, dd, &moved);
                if (s == EM_OK) s = em_tensor_assign(dst, moved ? moved : src);
                em_tensor_release(moved);
            }
            em_tensor_release(src);
        }
    em_tensor_map_release(map);
    return s;
}

