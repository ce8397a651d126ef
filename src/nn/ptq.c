/* ptq.c — post-training quantization of a parameter set: each linear weight's slot gets the
 * weight quantized with a scheme (em_quantize_as; for a block scheme its blocks run along `in`,
 * or along `out` where only that is a multiple of 32), in place in the modules, so that the layers
 * run their products on the quantized weight (em_matmul's float @ quantized form) with nothing
 * else changed. The rest of src/nn treats a quantized parameter as a constant: it has no
 * gradient, so optimizers never update it, the set initializers skip it, and the state of a
 * module saves and loads it with its scheme (em_params_save / em_params_load). */
#include <stdlib.h>
#include <string.h>

#include "nn/nn_internal.h"

/* The last component of a dotted name is "weight": "weight", "0.weight", "fc.weight". */
static bool ptq_is_weight(const char *name) {
    size_t n = strlen(name);
    return n >= 6 && strcmp(name + n - 6, "weight") == 0 && (n == 6 || name[n - 7] == '.');
}

static bool ptq_skipped(const char *name, const char *const *skip) {
    for (size_t i = 0; skip && skip[i]; i++)
        if (strcmp(skip[i], name) == 0) return true;
    return false;
}

static bool ptq_block_kind(em_quant_kind k) { return k == EM_QK_BLOCK || k == EM_QK_BLOCK_MIN; }

em_status em_params_quantize(em_params *p, const em_quant_scheme *scheme,
                             const char *const *skip, size_t *n_quantized) {
    static const char fn[] = "em_params_quantize";
    if (!p) return nn_null(fn, "params");
    if (!scheme) return nn_null(fn, "scheme");
    if (em_quant_block_bytes(scheme) == 0)
        return em_backend_set_error(EM_ERR_DTYPE, "%s: the scheme (storage %s, kind %d) is not "
                                    "one of em_quant_kind's", fn, em_dtype_name(scheme->storage),
                                    (int)scheme->kind);
    size_t n = em_params_count(p), done = 0;
    /* the quantized weights are made first, every slot replaced after: a failure (an invalid
     * scheme pair, a non-finite weight) leaves the set as it was */
    em_tensor **q = calloc(n ? n : 1, sizeof *q);
    if (!q) return em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
    bool was = em_set_grad_enabled(false);
    em_status s = EM_OK;
    for (size_t i = 0; i < n && s == EM_OK; i++) {
        const char *name = em_params_name(p, i);
        const em_tensor *t = em_params_get(p, i);
        if (!ptq_is_weight(name) || ptq_skipped(name, skip) || em_tensor_rank(t) != 2 ||
            em_tensor_kind(t) != EM_KIND_FLOAT)
            continue;
        const int64_t out = em_tensor_shape(t)[0], in = em_tensor_shape(t)[1];
        if (ptq_block_kind(scheme->kind) && in % EM_QBLOCK != 0) {
            /* blocks along out instead: W^T [in, out] quantized by rows, W its transpose */
            if (out % EM_QBLOCK != 0) continue;
            em_tensor *wt = NULL, *c = NULL, *qt = NULL;
            s = em_transpose(t, 0, 1, &wt);
            if (s == EM_OK) s = em_contiguous(wt, &c);
            if (s == EM_OK) s = em_quantize_as(c, scheme, &qt);
            if (s == EM_OK) s = em_transpose(qt, 0, 1, &q[i]);
            em_tensor_release(wt), em_tensor_release(c), em_tensor_release(qt);
        } else {
            s = em_quantize_as(t, scheme, &q[i]);
        }
        if (s != EM_OK) s = nn_context(s, "%s: '%s'", fn, name);
    }
    em_set_grad_enabled(was);
    for (size_t i = 0; i < n; i++) {
        if (!q[i]) continue;
        if (s == EM_OK) {
            em_tensor **slot = em_params_slot(p, i);
            em_tensor_release(*slot);
            *slot = q[i];
            em_scope_escape(q[i]); /* the module's now, not an open tensor scope's */
            done++;
        } else {
            em_tensor_release(q[i]);
        }
    }
    free(q);
    if (s == EM_OK && n_quantized) *n_quantized = done;
    return s;
}
