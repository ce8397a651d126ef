/* assign.c — em_tensor_assign: writes a tensor's values into another's own buffer, in place,
 * recording nothing (how an optimizer updates a parameter while keeping its identity). */
#include "autodiff/tape_impl.h"
#include "core/internal.h"

em_status em_tensor_assign(em_tensor *dst, const em_tensor *src) {
    static const char fn[] = "em_tensor_assign";
    EMI_TRY(emi_check_tensor(fn, "dst", dst));
    EMI_TRY(emi_check_tensor(fn, "src", src));
    if (dst->ad && dst->ad->rule)
        return emi_fail(EM_ERR_STATE,
                        "%s: dst is the result of '%s', not a leaf: only leaves and untracked "
                        "tensors can be assigned", fn, dst->ad->rule->name);
    if (dst->dtype != src->dtype) return emi_fail_dtypes(fn, dst, src);
    if (emi_kind(dst->dtype) == EM_KIND_QUANTIZED)
        return emi_fail(EM_ERR_DTYPE, "%s: quantized tensors (%s) cannot be assigned", fn,
                        em_dtype_name(dst->dtype));
    if (!emi_same_shape(dst->v.shape, dst->v.rank, src->v.shape, src->v.rank)) {
        char a[96], b[96];
        return emi_fail(EM_ERR_SHAPE, "%s: shapes differ: %s and %s", fn,
                        emi_shape_str(dst->v.shape, dst->v.rank, a, sizeof a),
                        emi_shape_str(src->v.shape, src->v.rank, b, sizeof b));
    }
    EMI_TRY(emi_check_same_device(fn, dst, src));
    if (src->st == dst->st) {
        /* src reads the buffer being written (a view of dst): copy it aside first */
        em_tensor *tmp = NULL;
        EMI_TRY(em_clone(src, &tmp));
        em_status s = emi_copy_into(fn, dst, tmp);
        em_tensor_release(tmp);
        return s;
    }
    return emi_copy_into(fn, dst, src);
}
