/* nn_internal.h — what the files of src/nn share. Public API only. */
#ifndef EMBER_NN_INTERNAL_H
#define EMBER_NN_INTERNAL_H

#include "ember/backend.h"
#include "ember/ember.h"
#include "ember/nn.h"

#define NN_TRY(expr)                                                                         \
    do {                                                                                     \
        em_status nn_s_ = (expr);                                                            \
        if (nn_s_ != EM_OK) return nn_s_;                                                    \
    } while (0)

/** Intermediates of a composed function, released together (nn_tmps_free). */
typedef struct nn_tmps {
    em_tensor *t[32];
    int n;
} nn_tmps;

static inline void nn_tmps_free(nn_tmps *a) {
    for (int i = 0; i < a->n; i++) em_tensor_release(a->t[i]);
    a->n = 0;
}

/* With `em_status s` and `nn_tmps tm` in scope: s = call (which writes var) while s is still
 * EM_OK; a result joins tm. */
#define NN_STEP(call, var)                                                                   \
    do {                                                                                     \
        if (s == EM_OK) {                                                                    \
            var = NULL;                                                                      \
            s = (call);                                                                      \
            if (s == EM_OK) tm.t[tm.n++] = var;                                              \
        }                                                                                    \
    } while (0)

/** "<fn>: <what> is NULL" as EM_ERR_ARG. */
static inline em_status nn_null(const char *fn, const char *what) {
    return em_backend_set_error(EM_ERR_ARG, "%s: %s is NULL", fn, what);
}

/** s with the message "<prefix, printf-style>: <the last error>" (the last error copied
 *  first: it is the buffer being written). */
em_status nn_context(em_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/** The class m was made with (module.c). */
const em_module_class *nn_module_class(const em_module *m);

/* layers.c: what every layer's constructor uses */
/** A seed for the k-th tensor of a module (splitmix64 of seed and k). */
uint64_t nn_derive(uint64_t seed, uint64_t k);
/** A parameter: U(-bound, bound) (or `fill` when bound < 0) on o's device, a leaf requiring
 *  grad on an autodiff device. */
em_status nn_param(const char *fn, const em_module_opts *o, const int64_t *shape, int rank,
                   double bound, double fill, uint64_t seed, em_tensor **out);
/** A module of class cls with data_size zeroed bytes of data (freed by the class's release;
 *  none when 0), its data into *data (may be NULL). */
em_status nn_new(const char *fn, const em_module_class *cls, size_t data_size, em_module **out,
                 void **data);
/** *o = opts or the default options, checked (a float dtype, a known init). */
em_status nn_check_opts(const char *fn, const em_module_opts *opts, em_module_opts *o);

#endif /* EMBER_NN_INTERNAL_H */
