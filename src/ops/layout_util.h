/*
 * layout_util.h — small helpers shared by the layout and indexing entry points (view.c,
 * layout.c, index.c): dim normalization that accepts 0-d tensors, the 0-d to 1-d view trick
 * for kernels, the host-side range check of index tensors, and the autodiff recording steps.
 */
#ifndef EMBER_OPS_LAYOUT_UTIL_H
#define EMBER_OPS_LAYOUT_UTIL_H

#include <stdlib.h>

#include "autodiff/rules/rules.h"
#include "core/internal.h"

/** Normalizes dim like emi_norm_dim, but a 0-d tensor accepts dims 0 and -1 (as PyTorch). */
static inline em_status lay_dim(const char *fn, int dim, int rank, int *out) {
    if (rank == 0) {
        if (dim == 0 || dim == -1) {
            *out = 0;
            return EM_OK;
        }
        return emi_fail(EM_ERR_ARG, "%s: dim %d out of range for rank 0", fn, dim);
    }
    return emi_norm_dim(fn, dim, rank, out);
}

/** A 0-d view becomes the 1-d view [1] of the same element, so kernels see a real dim. */
static inline void lay_view_1d(em_view *v) {
    if (v->rank == 0) {
        v->rank = 1;
        v->shape[0] = 1;
        v->strides[0] = 1;
    }
}

/** Reads the index tensor to the host and checks each value is in [0, limit). The message
 *  names the first bad value: "<fn>: index 7 is out of range for dim 1 of size 3" (dim >= 0,
 *  normalized) or "<fn>: index 7 is out of range for 3 classes" (dim < 0). */
static inline em_status lay_check_indices(const char *fn, const em_tensor *index, int64_t limit,
                                          int dim) {
    if (emi_numel(index->v.shape, index->v.rank) == 0) return EM_OK;
    /* a captured index has no values yet: the graph's run checks them (src/wire/exec.c) */
    if (index->dev.backend == EM_BACKEND_CAPTURE) return EM_OK;
    void *data = NULL;
    size_t bytes = 0;
    EMI_TRY(emi_read_all(index, &data, &bytes));
    size_t n = bytes / em_dtype_size(index->dtype);
    em_status s = EM_OK;
    for (size_t i = 0; i < n; i++) {
        int64_t v = index->dtype == EM_I64 ? ((const int64_t *)data)[i]
                                            : (int64_t)((const int32_t *)data)[i];
        if (v < 0 || v >= limit) {
            if (dim >= 0)
                s = emi_fail(EM_ERR_ARG, "%s: index %lld is out of range for dim %d of size %lld",
                             fn, (long long)v, dim, (long long)limit);
            else
                s = emi_fail(EM_ERR_ARG, "%s: index %lld is out of range for %lld classes", fn,
                             (long long)v, (long long)limit);
            break;
        }
    }
    free(data);
    return s;
}

/* ---- autodiff ---- */

/** The tensor an op computes from when it calls other public ops inside: t itself, or, when
 *  t lives on an autodiff device, an untracked alias on its inner device (*alias, a new
 *  reference to release after computing), so that those inner calls record nothing; the op
 *  records itself once at the end. */
static inline em_status lay_ad_inner(const em_tensor *t, const em_tensor **use,
                                     em_tensor **alias) {
    *alias = NULL;
    *use = t;
    if (!t || !t->dev.autodiff) return EM_OK;
    EMI_TRY(em_tensor_detach(t, alias));
    *use = *alias;
    return EM_OK;
}

/** Ends an op recorded by autodiff (emi_ad_end): hands o to *out, or releases it on failure. */
static inline em_status lay_ad_finish(const emi_ad_op *ad, const emi_ad_rule *rule,
                                      const em_tensor *const *ins, int n, em_tensor *o,
                                      const void *params, size_t psize, em_tensor **out) {
    em_status s = emi_ad_end(ad, rule, ins, n, o, params, psize);
    if (s != EM_OK) {
        em_tensor_release(o);
        return s;
    }
    *out = o;
    return EM_OK;
}

#endif /* EMBER_OPS_LAYOUT_UTIL_H */
