/* module.c — the module object: a class (a small vtable: forward, describe, release), the
 * class's data, and the module's named parameters, buffers and children. Forward with the
 * module's name and configuration in its errors; the module's state (parameters and buffers)
 * by name, saved to and loaded from a safetensors file. ember's own layers (layers.c) are
 * written against this interface exactly as a user's module is. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn_internal.h"

/* A named tensor, allocated on its own so that &e->t (a slot of an em_params set) stays put
 * when the module's list grows. */
typedef struct nn_entry {
    char *name;
    em_tensor *t;
} nn_entry;

typedef struct nn_child {
    char *name;
    em_module *m;
} nn_child;

struct em_module {
    const em_module_class *cls;
    void *data;
    nn_entry **params, **buffers;
    size_t nparams, nbuffers, capparams, capbuffers;
    nn_child *children;
    size_t nchildren, capchildren;
};

em_status em_module_create(const em_module_class *cls, void *data, em_module **out) {
    static const char fn[] = "em_module_create";
    if (!out) return nn_null(fn, "out");
    if (!cls) return nn_null(fn, "cls");
    if (!cls->name || !cls->name[0])
        return em_backend_set_error(EM_ERR_ARG, "%s: the class has no name", fn);
    if (!cls->forward)
        return em_backend_set_error(EM_ERR_ARG, "%s: class '%s' has no forward", fn, cls->name);
    em_module *m = calloc(1, sizeof *m);
    if (!m) return em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
    m->cls = cls;
    m->data = data;
    *out = m;
    return EM_OK;
}

void *em_module_data(const em_module *m) { return m ? m->data : NULL; }

const char *em_module_type(const em_module *m) { return m ? m->cls->name : NULL; }

const em_module_class *nn_module_class(const em_module *m) { return m ? m->cls : NULL; }

void em_module_describe(const em_module *m, char *buf, size_t cap) {
    if (!buf || cap == 0) return;
    buf[0] = '\0';
    if (!m) return;
    char conf[200] = "";
    if (m->cls->describe) m->cls->describe(m, conf, sizeof conf);
    conf[sizeof conf - 1] = '\0';
    if (conf[0]) snprintf(buf, cap, "%s(%s)", m->cls->name, conf);
    else snprintf(buf, cap, "%s", m->cls->name);
}

/* A name of this module's own: not empty, no '.', unique among its parameters, buffers and
 * children. */
static em_status nn_check_name(const char *fn, const em_module *m, const char *name) {
    if (!name[0]) return em_backend_set_error(EM_ERR_ARG, "%s: the name is empty", fn);
    if (strchr(name, '.'))
        return em_backend_set_error(EM_ERR_ARG, "%s: name '%s' contains '.' (it separates a "
                                    "child's name from its entries')", fn, name);
    if (strlen(name) > 100)
        return em_backend_set_error(EM_ERR_ARG, "%s: name '%.32s...' is longer than 100 bytes",
                                    fn, name);
    for (size_t i = 0; i < m->nparams; i++)
        if (strcmp(m->params[i]->name, name) == 0)
            return em_backend_set_error(EM_ERR_ARG, "%s: %s already has a parameter named '%s'",
                                        fn, m->cls->name, name);
    for (size_t i = 0; i < m->nbuffers; i++)
        if (strcmp(m->buffers[i]->name, name) == 0)
            return em_backend_set_error(EM_ERR_ARG, "%s: %s already has a buffer named '%s'", fn,
                                        m->cls->name, name);
    for (size_t i = 0; i < m->nchildren; i++)
        if (strcmp(m->children[i].name, name) == 0)
            return em_backend_set_error(EM_ERR_ARG, "%s: %s already has a child named '%s'", fn,
                                        m->cls->name, name);
    return EM_OK;
}

static char *nn_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *c = malloc(n);
    if (c) memcpy(c, s, n);
    return c;
}

static em_status nn_add_entry(const char *fn, em_module *m, nn_entry ***list, size_t *n,
                              size_t *cap, const char *name, em_tensor *t) {
    em_status s = EM_OK;
    if (!m) s = nn_null(fn, "module");
    else if (!name) s = nn_null(fn, "name");
    else if (!t) s = nn_null(fn, "tensor");
    else s = nn_check_name(fn, m, name);
    if (s == EM_OK && *n == *cap) {
        size_t nc = *cap ? 2 * *cap : 4;
        nn_entry **l = realloc(*list, nc * sizeof *l);
        if (!l) s = em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
        else {
            *list = l;
            *cap = nc;
        }
    }
    nn_entry *e = NULL;
    if (s == EM_OK) {
        e = malloc(sizeof *e);
        char *c = e ? nn_strdup(name) : NULL;
        if (!c) {
            free(e);
            s = em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
        } else {
            e->name = c;
            e->t = t;
            (*list)[(*n)++] = e;
            em_scope_escape(t); /* the module's now, not an open tensor scope's */
        }
    }
    if (s != EM_OK) em_tensor_release(t);
    return s;
}

em_status em_module_add_param(em_module *m, const char *name, em_tensor *t) {
    return m ? nn_add_entry("em_module_add_param", m, &m->params, &m->nparams, &m->capparams,
                            name, t)
             : nn_add_entry("em_module_add_param", NULL, NULL, NULL, NULL, name, t);
}

em_status em_module_add_buffer(em_module *m, const char *name, em_tensor *t) {
    return m ? nn_add_entry("em_module_add_buffer", m, &m->buffers, &m->nbuffers,
                            &m->capbuffers, name, t)
             : nn_add_entry("em_module_add_buffer", NULL, NULL, NULL, NULL, name, t);
}

/* Whether `child` is m or one of m's descendants (adding it would make a cycle). */
static bool nn_contains(const em_module *m, const em_module *child) {
    if (m == child) return true;
    for (size_t i = 0; i < m->nchildren; i++)
        if (nn_contains(m->children[i].m, child)) return true;
    return false;
}

em_status em_module_add_child(em_module *m, const char *name, em_module *child) {
    static const char fn[] = "em_module_add_child";
    em_status s = EM_OK;
    if (!m) s = nn_null(fn, "module");
    else if (!name) s = nn_null(fn, "name");
    else if (!child) s = nn_null(fn, "child");
    else if (nn_contains(child, m))
        return em_backend_set_error(EM_ERR_ARG, "%s: '%s' would contain itself", fn, name);
    else s = nn_check_name(fn, m, name);
    if (s == EM_OK && m->nchildren == m->capchildren) {
        size_t nc = m->capchildren ? 2 * m->capchildren : 4;
        nn_child *l = realloc(m->children, nc * sizeof *l);
        if (!l) s = em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
        else {
            m->children = l;
            m->capchildren = nc;
        }
    }
    char *c = NULL;
    if (s == EM_OK && !(c = nn_strdup(name)))
        s = em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
    if (s != EM_OK) {
        em_module_release(child);
        return s;
    }
    m->children[m->nchildren].name = c;
    m->children[m->nchildren].m = child;
    m->nchildren++;
    return EM_OK;
}

size_t em_module_child_count(const em_module *m) { return m ? m->nchildren : 0; }

em_module *em_module_child_at(const em_module *m, size_t i) {
    return m && i < m->nchildren ? m->children[i].m : NULL;
}

const char *em_module_child_name(const em_module *m, size_t i) {
    return m && i < m->nchildren ? m->children[i].name : NULL;
}

/* The module that holds the last part of a dotted path, and that part (*leaf). */
static const em_module *nn_walk(const em_module *m, const char *path, const char **leaf) {
    for (;;) {
        const char *dot = strchr(path, '.');
        if (!dot) {
            *leaf = path;
            return m;
        }
        size_t len = (size_t)(dot - path);
        const em_module *next = NULL;
        for (size_t i = 0; i < m->nchildren && !next; i++)
            if (strlen(m->children[i].name) == len && memcmp(m->children[i].name, path, len) == 0)
                next = m->children[i].m;
        if (!next) return NULL;
        m = next;
        path = dot + 1;
    }
}

em_module *em_module_child(const em_module *m, const char *path) {
    if (!m || !path) return NULL;
    const char *leaf;
    const em_module *h = nn_walk(m, path, &leaf);
    if (!h) return NULL;
    for (size_t i = 0; i < h->nchildren; i++)
        if (strcmp(h->children[i].name, leaf) == 0) return h->children[i].m;
    return NULL;
}

static em_tensor **nn_find_slot(const em_module *m, const char *path, bool params, bool buffers) {
    if (!m || !path) return NULL;
    const char *leaf;
    const em_module *h = nn_walk(m, path, &leaf);
    if (!h) return NULL;
    if (params)
        for (size_t i = 0; i < h->nparams; i++)
            if (strcmp(h->params[i]->name, leaf) == 0) return &h->params[i]->t;
    if (buffers)
        for (size_t i = 0; i < h->nbuffers; i++)
            if (strcmp(h->buffers[i]->name, leaf) == 0) return &h->buffers[i]->t;
    return NULL;
}

em_tensor *em_module_get(const em_module *m, const char *path) {
    em_tensor **slot = nn_find_slot(m, path, true, true);
    return slot ? *slot : NULL;
}

bool em_module_is_param(const em_module *m, const char *path) {
    return nn_find_slot(m, path, true, false) != NULL;
}

em_status em_module_set(em_module *m, const char *path, em_tensor *t) {
    static const char fn[] = "em_module_set";
    em_status s = EM_OK;
    em_tensor **slot = NULL;
    if (!m) s = nn_null(fn, "module");
    else if (!path) s = nn_null(fn, "path");
    else if (!t) s = nn_null(fn, "tensor");
    else if (!(slot = nn_find_slot(m, path, true, true)))
        s = em_backend_set_error(EM_ERR_ARG, "%s: %s has no parameter or buffer '%s'", fn,
                                 m->cls->name, path);
    if (s != EM_OK) {
        em_tensor_release(t);
        return s;
    }
    em_tensor_release(*slot);
    *slot = t;
    em_scope_escape(t); /* the module's now, not an open tensor scope's */
    return EM_OK;
}

void em_module_release(em_module *m) {
    if (!m) return;
    for (size_t i = 0; i < m->nchildren; i++) {
        em_module_release(m->children[i].m);
        free(m->children[i].name);
    }
    free(m->children);
    for (size_t i = 0; i < m->nparams; i++) {
        em_tensor_release(m->params[i]->t);
        free(m->params[i]->name);
        free(m->params[i]);
    }
    free(m->params);
    for (size_t i = 0; i < m->nbuffers; i++) {
        em_tensor_release(m->buffers[i]->t);
        free(m->buffers[i]->name);
        free(m->buffers[i]);
    }
    free(m->buffers);
    if (m->cls->release) m->cls->release(m->data);
    free(m);
}

/* ---- forward, with the module in its errors ---- */

/* Errors name every module from the outermost one that failed to the innermost:
 * "Sequential(2 modules) > Linear(in 5, out 4, bias): em_matmul: ...". The innermost failing
 * module writes "desc: message"; each module around it prepends "desc > ". */
static _Thread_local int nn_depth;
static _Thread_local bool nn_named;

em_status em_module_forward(em_module *m, const em_tensor *x, bool training, em_tensor **y) {
    static const char fn[] = "em_module_forward";
    if (!m) return nn_null(fn, "module");
    if (!x) return nn_null(fn, "x");
    if (!y) return nn_null(fn, "y");
    if (nn_depth == 0) nn_named = false;
    nn_depth++;
    em_tensor *out = NULL;
    em_status s = m->cls->forward(m, x, training, &out);
    nn_depth--;
    if (s == EM_OK && !out)
        s = em_backend_set_error(EM_ERR_STATE, "%s: %s's forward returned no tensor", fn,
                                 m->cls->name);
    if (s != EM_OK) {
        em_tensor_release(out);
        char desc[256], msg[512];
        em_module_describe(m, desc, sizeof desc);
        snprintf(msg, sizeof msg, "%s", em_last_error());
        em_backend_set_error(s, "%s%s%s", desc, nn_named ? " > " : ": ", msg);
        nn_named = true;
        return s;
    }
    *y = out;
    return EM_OK;
}

/* ---- named parameters, buffers and state ---- */

static em_status nn_join(char *buf, size_t cap, const char *prefix, const char *name) {
    int n = prefix && prefix[0] ? snprintf(buf, cap, "%s.%s", prefix, name)
                                : snprintf(buf, cap, "%s", name);
    if (n < 0 || (size_t)n >= cap)
        return em_backend_set_error(EM_ERR_ARG, "em_module_params: name '%.40s...%s' is too long",
                                    prefix ? prefix : "", name);
    return EM_OK;
}

/* Appends m's entries to out under prefix: its own parameters (when params), then its buffers
 * (when buffers), then each child's, in the order they were added (as torch's state_dict). */
static em_status nn_collect(em_module *m, const char *prefix, em_params *out, bool params,
                            bool buffers, size_t start) {
    char buf[1024];
    if (params)
        for (size_t i = 0; i < m->nparams; i++) {
            bool tied = false; /* listed once when only parameters are asked for */
            for (size_t j = start; !buffers && j < em_params_count(out) && !tied; j++)
                tied = em_params_get(out, j) == m->params[i]->t;
            if (tied) continue;
            NN_TRY(nn_join(buf, sizeof buf, prefix, m->params[i]->name));
            NN_TRY(em_params_add(out, buf, &m->params[i]->t));
        }
    if (buffers)
        for (size_t i = 0; i < m->nbuffers; i++) {
            NN_TRY(nn_join(buf, sizeof buf, prefix, m->buffers[i]->name));
            NN_TRY(em_params_add(out, buf, &m->buffers[i]->t));
        }
    for (size_t i = 0; i < m->nchildren; i++) {
        NN_TRY(nn_join(buf, sizeof buf, prefix, m->children[i].name));
        NN_TRY(nn_collect(m->children[i].m, buf, out, params, buffers, start));
    }
    return EM_OK;
}

em_status em_module_params(em_module *m, const char *prefix, em_params *params) {
    static const char fn[] = "em_module_params";
    if (!m) return nn_null(fn, "module");
    if (!params) return nn_null(fn, "params");
    return nn_collect(m, prefix, params, true, false, em_params_count(params));
}

em_status em_module_buffers(em_module *m, const char *prefix, em_params *buffers) {
    static const char fn[] = "em_module_buffers";
    if (!m) return nn_null(fn, "module");
    if (!buffers) return nn_null(fn, "buffers");
    return nn_collect(m, prefix, buffers, false, true, em_params_count(buffers));
}

em_status em_module_state(em_module *m, const char *prefix, em_params *state) {
    static const char fn[] = "em_module_state";
    if (!m) return nn_null(fn, "module");
    if (!state) return nn_null(fn, "state");
    return nn_collect(m, prefix, state, true, true, em_params_count(state));
}

em_status em_module_save(em_module *m, const char *path) {
    static const char fn[] = "em_module_save";
    if (!m) return nn_null(fn, "module");
    if (!path) return nn_null(fn, "path");
    em_params *st = NULL;
    NN_TRY(em_params_create(&st));
    em_status s = em_module_state(m, NULL, st);
    if (s == EM_OK) s = em_params_save(st, path);
    em_params_release(st);
    return s;
}

em_status em_module_load(em_module *m, const char *path) {
    static const char fn[] = "em_module_load";
    if (!m) return nn_null(fn, "module");
    if (!path) return nn_null(fn, "path");
    em_params *st = NULL;
    NN_TRY(em_params_create(&st));
    em_status s = em_module_state(m, NULL, st);
    if (s == EM_OK) s = em_params_load(st, path);
    em_params_release(st);
    return s;
}

em_status nn_context(em_status s, const char *fmt, ...) {
    char prev[512], head[256];
    snprintf(prev, sizeof prev, "%s", em_last_error());
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    return em_backend_set_error(s, "%s: %s", head, prev);
}
