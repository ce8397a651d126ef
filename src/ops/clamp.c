/*
 * clamp.c — em_clamp_tensor: clamp with tensor bounds (torch.clamp(x, min=lo, max=hi)).
 * Computed as minimum(maximum(x, lo), hi) with the backend's binary slot (max and min
 * propagate NaN, so a NaN in x or in a bound gives NaN, as PyTorch's), and recorded as one op
 * whose rule routes the gradient as PyTorch's clamp_backward does.
 */
#include "ops/elementwise.h"

#include "autodiff/rules/rules.h"

em_status em_clamp_tensor(const em_tensor *x, const em_tensor *lo, const em_tensor *hi,
                          em_tensor **out) {
    static const char fn[] = "em_clamp_tensor";
    EMI_TRY(emi_check_tensor(fn, "x", x));
    if (lo) EMI_TRY(emi_check_tensor(fn, "lo", lo));
    if (hi) EMI_TRY(emi_check_tensor(fn, "hi", hi));
    EMI_TRY(emi_check_out(fn, out));
    if (!lo && !hi) return emi_fail(EM_ERR_ARG, "%s: lo and hi are both NULL (give at least one)", fn);
    EMI_TRY(emi_check_numeric(fn, x));
    const em_tensor *bounds[2] = {lo, hi};
    int64_t shape[EM_MAX_RANK], tmp[EM_MAX_RANK];
    int rank = x->v.rank;
    memcpy(shape, x->v.shape, sizeof(int64_t) * (size_t)rank);
    for (int i = 0; i < 2; i++) {
        const em_tensor *b = bounds[i];
        if (!b) continue;
        EMI_TRY(emi_check_same_device(fn, x, b));
        EMI_TRY(emi_check_same_dtype(fn, x, b));
        int r = 0;
        EMI_TRY(emi_broadcast_shapes(fn, shape, rank, b->v.shape, b->v.rank, tmp, &r));
        memcpy(shape, tmp, sizeof(int64_t) * (size_t)r);
        rank = r;
    }
    const em_backend_ops *ops = x->st->ops;
    EMI_TRY(emi_need(fn, ops, ops->binary != NULL, "binary"));
    const em_tensor *ins[3] = {x, lo, hi};
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, ins, 3, &ad));
    em_tensor *o = NULL, *tx = NULL, *tb = NULL;
    em_status s = emi_empty(fn, emi_result_device(ins, 3), x->dtype, shape, rank, &o);
    if (s == EM_OK && emi_numel(shape, rank) > 0) {
        em_view sx, sb;
        const em_view *vx, *vb;
        s = emi_operand(fn, x, shape, rank, &sx, &vx, &tx);
        for (int i = 0; i < 2 && s == EM_OK; i++) {
            if (!bounds[i]) continue;
            s = emi_operand(fn, bounds[i], shape, rank, &sb, &vb, &tb);
            /* the first bound reads x, the second the first's result (o, element for element) */
            const em_view *a = (i == 1 && lo) ? &o->v : vx;
            if (s == EM_OK) s = ops->binary(x->st->ctx, i == 0 ? EM_BIN_MAX : EM_BIN_MIN, &o->v, a, vb);
            em_tensor_release(tb);
            tb = NULL;
        }
    }
    em_tensor_release(tx);
    emi_rule_clamp_tensor_params cp = {lo != NULL, hi != NULL};
    if (s == EM_OK) s = emi_ad_end(&ad, &emi_rule_clamp_tensor, ins, 3, o, &cp, sizeof cp);
    if (s != EM_OK) {
        em_tensor_release(o);
        return s;
    }
    *out = o;
    return EM_OK;
}
