/* loss.c — cross-entropy from logits and mean squared error. */
#include "nn/nn_internal.h"

em_status em_loss_cross_entropy(const em_tensor *logits, const em_tensor *target,
                                em_tensor **loss) {
    static const char fn[] = "em_loss_cross_entropy";
    if (!logits) return nn_null(fn, "logits");
    if (!target) return nn_null(fn, "target");
    if (!loss) return nn_null(fn, "loss");
    return em_cross_entropy(logits, target, loss);
}

em_status em_loss_mse(const em_tensor *pred, const em_tensor *target, em_tensor **loss) {
    static const char fn[] = "em_loss_mse";
    if (!pred) return nn_null(fn, "pred");
    if (!target) return nn_null(fn, "target");
    if (!loss) return nn_null(fn, "loss");
    int r = em_tensor_rank(pred);
    bool same = r == em_tensor_rank(target);
    for (int i = 0; same && i < r; i++) same = em_tensor_dim(pred, i) == em_tensor_dim(target, i);
    if (!same)
        return em_backend_set_error(EM_ERR_SHAPE, "%s: pred and target shapes differ", fn);
    if (em_tensor_dtype(pred) != em_tensor_dtype(target))
        return em_backend_set_error(EM_ERR_DTYPE, "%s: dtypes differ: %s and %s", fn,
                                    em_dtype_name(em_tensor_dtype(pred)),
                                    em_dtype_name(em_tensor_dtype(target)));
    if (em_tensor_kind(pred) != EM_KIND_FLOAT)
        return em_backend_set_error(EM_ERR_DTYPE, "%s: expected float tensors, got %s", fn,
                                    em_dtype_name(em_tensor_dtype(pred)));
    em_tensor *d = NULL, *sq = NULL;
    em_status s = em_sub(pred, target, &d);
    if (s == EM_OK) s = em_mul(d, d, &sq);
    em_tensor_release(d);
    if (s == EM_OK) s = em_mean(sq, loss);
    em_tensor_release(sq);
    return s;
}
