/*
 * compare.c — comparisons (bool results), the logical ops, em_where and em_masked_fill.
 */
#include "ops/elementwise.h"

/* Defines em_<name>(a, b, out) as the bool-valued binary op `op` over kind k. */
#define EW_COMPARE(name, op, k)                                                              \
    em_status em_##name(const em_tensor *a, const em_tensor *b, em_tensor **out) {           \
        return ew_binary("em_" #name, op, k, a, b, out);                                     \
    }

/* Defines em_<name>_scalar(a, s, out): a op s with s converted to a's dtype. */
#define EW_COMPARE_SCALAR(name, op, k)                                                       \
    em_status em_##name##_scalar(const em_tensor *a, double s, em_tensor **out) {            \
        return ew_scalar("em_" #name "_scalar", op, k, a, s, out);                           \
    }

/* eq and ne take bool tensors as well; the orderings take float or int. */
EW_COMPARE(eq, EM_BIN_EQ, EW_ANY)
EW_COMPARE(ne, EM_BIN_NE, EW_ANY)
EW_COMPARE(lt, EM_BIN_LT, EW_NUMERIC)
EW_COMPARE(le, EM_BIN_LE, EW_NUMERIC)
EW_COMPARE(gt, EM_BIN_GT, EW_NUMERIC)
EW_COMPARE(ge, EM_BIN_GE, EW_NUMERIC)
EW_COMPARE_SCALAR(eq, EM_BIN_EQ, EW_ANY)
EW_COMPARE_SCALAR(lt, EM_BIN_LT, EW_NUMERIC)
EW_COMPARE_SCALAR(gt, EM_BIN_GT, EW_NUMERIC)

/* Logical and / or of bool tensors. */
EW_COMPARE(logical_and, EM_BIN_AND, EW_BOOL)
EW_COMPARE(logical_or, EM_BIN_OR, EW_BOOL)

/* cond ? a : b, broadcast over all three. */
em_status em_where(const em_tensor *cond, const em_tensor *a, const em_tensor *b,
                   em_tensor **out) {
    return ew_where("em_where", cond, a, b, out);
}

/* x with `value` (converted to x's dtype) where mask is true; mask must broadcast to x's shape
 * without growing it. Composed as where(mask, full(value), x). */
em_status em_masked_fill(const em_tensor *x, const em_tensor *mask, double value,
                         em_tensor **out) {
    static const char fn[] = "em_masked_fill";
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_tensor(fn, "mask", mask));
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_same_device(fn, x, mask));
    EMI_TRY(emi_check_bool(fn, mask));
    EMI_TRY(emi_check_not_quantized(fn, x));
    int64_t shape[EM_MAX_RANK];
    int rank = 0;
    EMI_TRY(emi_broadcast_shapes(fn, x->v.shape, x->v.rank, mask->v.shape, mask->v.rank, shape,
                                 &rank));
    bool same = rank == x->v.rank;
    for (int i = 0; same && i < rank; i++) same = shape[i] == x->v.shape[i];
    if (!same) {
        char xs[128], ms[128];
        return emi_fail(EM_ERR_SHAPE, "%s: mask of shape %s does not broadcast to x's shape %s",
                        fn, emi_shape_str(mask->v.shape, mask->v.rank, ms, sizeof ms),
                        emi_shape_str(x->v.shape, x->v.rank, xs, sizeof xs));
    }
    /* The fill value is a constant: made on the inner device, it is no leaf of a graph.
     * Only the where below records (masked_fill has no rule of its own). */
    em_device inner = x->dev;
    inner.autodiff = false;
    inner.checkpointing = EM_CKPT_NONE;
    em_tensor *v = NULL;
    EMI_TRY(em_full(NULL, 0, value, x->dtype, inner, &v));
    em_status s = ew_where(fn, mask, v, x, out);
    em_tensor_release(v);
    return s;
}

/* Logical xor of any two non-quantized tensors (nonzero is true; NaN is nonzero), as
 * torch.logical_xor: other dtypes are tested against zero first (a cast to bool), so a and b
 * may differ in dtype. */
em_status em_logical_xor(const em_tensor *a, const em_tensor *b, em_tensor **out) {
    static const char fn[] = "em_logical_xor";
    EMI_TRY(emi_check_tensor(fn, "a", a));
    EMI_TRY(emi_check_tensor(fn, "b", b));
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(emi_check_not_quantized(fn, a));
    EMI_TRY(emi_check_not_quantized(fn, b));
    EMI_TRY(emi_check_same_device(fn, a, b));
    em_tensor *ba = NULL, *bb = NULL;
    em_status s = EM_OK;
    if (a->dtype != EM_BOOL) s = em_cast(a, EM_BOOL, &ba);
    if (s == EM_OK && b->dtype != EM_BOOL) s = em_cast(b, EM_BOOL, &bb);
    if (s == EM_OK) s = ew_binary(fn, EM_BIN_XOR, EW_BOOL, ba ? ba : a, bb ? bb : b, out);
    em_tensor_release(ba);
    em_tensor_release(bb);
    return s;
}
