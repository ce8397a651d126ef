/* params.c — named parameter sets: an ordered list of (name, slot). */
#include <stdlib.h>
#include <string.h>

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
