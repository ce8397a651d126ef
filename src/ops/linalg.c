/*
 * linalg.c — the matrix product, with numpy.matmul rules.
 *
 * A 1-d a is promoted to [1, k] and a 1-d b to [k, 1]; the added dims are left out of the
 * result. Batch dims (all but the last two) broadcast. The backend's matmul slot gets out as
 * [batch..., m, n] and a, b with out's rank, their batch dims broadcast by stride-0 views.
 * A float result records emi_rule_matmul (src/autodiff/rules/linalg.c).
 */
#include "autodiff/rules/rules.h"

/** The kernel view of operand v: promoted when 1-d (as a row for a, a column for b), then
 *  given out's batch dims `ks[0..krank-2)` with stride 0 where it broadcasts. */
static em_view mm_operand(const em_view *v, bool is_a, const int64_t *ks, int krank) {
    int64_t ps[EM_MAX_RANK], pst[EM_MAX_RANK];
    int pr = v->rank;
    if (pr == 1) {
        pr = 2;
        if (is_a) {
            ps[0] = 1, pst[0] = 0, ps[1] = v->shape[0], pst[1] = v->strides[0];
        } else {
            ps[0] = v->shape[0], pst[0] = v->strides[0], ps[1] = 1, pst[1] = 0;
        }
    } else {
        for (int i = 0; i < pr; i++) ps[i] = v->shape[i], pst[i] = v->strides[i];
    }
    em_view r = *v;
    r.rank = krank;
    for (int i = 0; i < krank; i++) {
        int j = i - (krank - pr);
        if (i >= krank - 2) {
            r.shape[i] = ps[j];
            r.strides[i] = pst[j];
        } else {
            r.shape[i] = ks[i];
            r.strides[i] = (j >= 0 && ps[j] == ks[i]) ? pst[j] : 0;
        }
    }
    return r;
}

/** Matrix product of a and b (numpy.matmul rules; same float or int dtype). */
em_status em_matmul(const em_tensor *a, const em_tensor *b, em_tensor **out) {
    const char *fn = "em_matmul";
    EMI_TRY(emi_check_tensor(fn, "a", a));
    EMI_TRY(emi_check_tensor(fn, "b", b));
    EMI_TRY(emi_check_out(fn, out));
    if (emi_kind(a->dtype) == EM_KIND_QUANTIZED || emi_kind(b->dtype) == EM_KIND_QUANTIZED)
        return emi_qmatmul(fn, a, b, out);
    EMI_TRY(emi_check_same_device(fn, a, b));
    EMI_TRY(emi_check_numeric(fn, a));
    EMI_TRY(emi_check_numeric(fn, b));
    EMI_TRY(emi_check_same_dtype(fn, a, b));

    int ra = a->v.rank, rb = b->v.rank;
    char sa[160], sb[160];
    /* The two shapes as text, for the error messages only. */
#define MM_SHAPES (emi_shape_str(a->v.shape, ra, sa, sizeof sa), \
                   emi_shape_str(b->v.shape, rb, sb, sizeof sb))
    if (ra == 0 || rb == 0)
        return emi_fail(EM_ERR_SHAPE, "em_matmul: shapes %s and %s: a 0-d operand has no "
                        "matrix dims (use em_mul)", (MM_SHAPES, sa), sb);
    /* promoted shapes */
    int64_t as[EM_MAX_RANK] = {0}, bs[EM_MAX_RANK] = {0};
    int pa = ra == 1 ? 2 : ra, pb = rb == 1 ? 2 : rb;
    if (ra == 1) as[0] = 1, as[1] = a->v.shape[0];
    else for (int i = 0; i < ra; i++) as[i] = a->v.shape[i];
    if (rb == 1) bs[0] = b->v.shape[0], bs[1] = 1;
    else for (int i = 0; i < rb; i++) bs[i] = b->v.shape[i];
    int64_t m = as[pa - 2], k = as[pa - 1], n = bs[pb - 1];
    if (bs[pb - 2] != k)
        return emi_fail(EM_ERR_SHAPE, "em_matmul: shapes %s and %s do not match for a matrix "
                        "product (%lld != %lld)", (MM_SHAPES, sa), sb, (long long)k, (long long)bs[pb - 2]);
    /* batch dims broadcast like NumPy (checked here to name the whole shapes) */
    int64_t ks[EM_MAX_RANK];
    int kb = (pa > pb ? pa : pb) - 2;
    for (int i = 0; i < kb; i++) {
        int ia = i - (kb - (pa - 2)), ib = i - (kb - (pb - 2));
        int64_t da = ia >= 0 ? as[ia] : 1, db = ib >= 0 ? bs[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return emi_fail(EM_ERR_SHAPE, "em_matmul: shapes %s and %s: batch dims cannot be "
                            "broadcast (%lld and %lld)", (MM_SHAPES, sa), sb, (long long)da, (long long)db);
        ks[i] = da == 1 ? db : da;
    }
    int krank = kb + 2;
    ks[kb] = m;
    ks[kb + 1] = n;
    /* the result's shape leaves out the dims that 1-d operands added */
    int64_t fs[EM_MAX_RANK];
    int fr = kb;
    for (int i = 0; i < kb; i++) fs[i] = ks[i];
    if (ra > 1) fs[fr++] = m;
    if (rb > 1) fs[fr++] = n;

    const em_backend_ops *ops = a->st->ops;
    EMI_TRY(emi_need(fn, ops, ops->matmul != NULL, "matmul"));
    const em_tensor *ins[2] = {a, b};
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, ins, 2, &ad));
    em_tensor *o = NULL;
    EMI_TRY(emi_empty(fn, emi_result_device(ins, 2), a->dtype, fs, fr, &o));
    if (emi_numel(ks, krank) > 0) {
        em_view av, bv, ov = o->v;
        em_tensor *ta = NULL, *tb = NULL;
        ov.rank = krank;
        for (int i = 0; i < krank; i++) ov.shape[i] = ks[i];
        emi_contiguous_strides(ks, krank, ov.strides);
        em_status s = emi_input_view(fn, a, &av, &ta);
        if (s == EM_OK) s = emi_input_view(fn, b, &bv, &tb);
        if (s == EM_OK) {
            em_view ak = mm_operand(&av, true, ks, krank), bk = mm_operand(&bv, false, ks, krank);
            s = ops->matmul(a->st->ctx, &ov, &ak, &bk);
        }
        em_tensor_release(ta);
        em_tensor_release(tb);
        if (s != EM_OK) {
            em_tensor_release(o);
            return s;
        }
    }
    em_status s = emi_ad_end(&ad, &emi_rule_matmul, ins, 2, o, NULL, 0);
    if (s != EM_OK) {
        em_tensor_release(o);
        return s;
    }
    *out = o;
    return EM_OK;
}
