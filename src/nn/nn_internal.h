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

/** "<fn>: <what> is NULL" as EM_ERR_ARG. */
static inline em_status nn_null(const char *fn, const char *what) {
    return em_backend_set_error(EM_ERR_ARG, "%s: %s is NULL", fn, what);
}

#endif /* EMBER_NN_INTERNAL_H */
