/*
 * elementwise.c — the shared machinery of the elementwise ops: checks, output allocation (in
 * place for the consuming `_` variants) and routing to the backend's elementwise slots.
 * The public entry points live in unary.c, binary.c and compare.c.
 */
#include "ops/elementwise.h"

#include "autodiff/rules/rules.h"

/* Evaluates a status expression into `s` and jumps to `done` when it fails. */
#define EW_TRY(expr)                                                                         \
    do {                                                                                     \
        s = (expr);                                                                          \
        if (s != EM_OK) goto done;                                                           \
    } while (0)

/* Checks that t has the kind k accepts. */
static em_status ew_check_kind(const char *fn, const em_tensor *t, ew_kind k) {
    switch (k) {
    case EW_FLOAT: return emi_check_float(fn, t);
    case EW_NUMERIC: return emi_check_numeric(fn, t);
    case EW_BOOL: return emi_check_bool(fn, t);
    case EW_ANY: return emi_check_not_quantized(fn, t);
    }
    return EM_OK;
}

/* True when the consumed tensor t may receive a result of dtype dt and this shape in its own
 * buffer: it alone owns the buffer, is untracked (no node of a graph: a checkpointing mark
 * alone, as on what a backward rule computes from saved values, does not stop it; no tape
 * shares a buffer that it alone owns), contiguous, and of that dtype and shape. */
static bool ew_can_reuse(const em_tensor *t, em_dtype dt, const int64_t *shape, int rank) {
    if (!em_tensor_can_mut(t) || t->ad || t->dtype != dt ||
        t->v.rank != rank || !emi_view_is_contiguous(&t->v))
        return false;
    for (int i = 0; i < rank; i++)
        if (t->v.shape[i] != shape[i]) return false;
    return true;
}

/* The output tensor: the consumed input itself when it may be overwritten, else a fresh
 * contiguous one on dev. */
static em_status ew_output(const char *fn, em_tensor *consumed, const emi_ad_op *ad,
                           em_device dev, em_dtype dt, const int64_t *shape, int rank,
                           em_tensor **o) {
    /* A recorded op may need its inputs' values in backward: never overwrite them. */
    if (consumed && !ad->tracked && ew_can_reuse(consumed, dt, shape, rank)) {
        /* the result of a call: in a scope, the innermost scope's like a fresh one */
        if (emi_scope_on) emi_scope_adopt(consumed);
        *o = consumed;
        return EM_OK;
    }
    return emi_empty(fn, dev, dt, shape, rank, o);
}

/* Ends an op: on success hands o to *out (releasing a consumed input that was not reused),
 * on failure releases o and the consumed input and writes nothing. */
static em_status ew_finish(em_status s, em_tensor *consumed, em_tensor *o, em_tensor **out) {
    if (s != EM_OK) {
        if (o != consumed) em_tensor_release(o);
        em_tensor_release(consumed);
        return s;
    }
    if (consumed && o != consumed) em_tensor_release(consumed);
    *out = o;
    return EM_OK;
}

double ew_scalar_cast(em_dtype dt, double s) {
    switch (dt) {
    case EM_F32: return (float)s;
    case EM_F64: return s;
    case EM_F16: return em_f16_to_f32(em_f32_to_f16((float)s));
    case EM_BF16: return em_bf16_to_f32(em_f32_to_bf16((float)s));
    case EM_BOOL: return s != 0;
    default: break;
    }
    int64_t i;
    if (s != s) i = 0;
    else if (s >= 9.2233720368547758e18) i = INT64_MAX;
    else if (s <= -9.2233720368547758e18) i = INT64_MIN;
    else i = (int64_t)s; /* truncation toward zero */
    switch (dt) {
    case EM_I32: i = (int32_t)(uint32_t)(uint64_t)i; break;
    case EM_I16: i = (int16_t)(uint16_t)(uint64_t)i; break;
    case EM_I8: i = (int8_t)(uint8_t)(uint64_t)i; break;
    case EM_U8: i = (uint8_t)(uint64_t)i; break;
    default: break;
    }
    return (double)i;
}

/* ---- unary ---- */

/* op(x) into a fresh tensor, or into x's buffer when consumed == x allows it. */
static em_status unary_core(const char *fn, em_unary_op op, ew_kind k, const em_tensor *x,
                            const double *params, em_tensor *consumed, em_tensor **out) {
    em_status s;
    em_tensor *o = NULL, *tx = NULL;
    EW_TRY(emi_check_tensor(fn, "x", x));
    EW_TRY(emi_check_out(fn, out));
    EW_TRY(ew_check_kind(fn, x, k));
    const em_backend_ops *ops = x->st->ops;
    EW_TRY(emi_need(fn, ops, ops->unary != NULL, "unary"));
    const em_tensor *ins[1] = {x};
    emi_ad_op ad;
    EW_TRY(emi_ad_begin(fn, ins, 1, &ad));
    EW_TRY(ew_output(fn, consumed, &ad, emi_result_device(ins, 1),
                     em_unary_op_is_bool(op) ? EM_BOOL : x->dtype, x->v.shape, x->v.rank, &o));
    if (emi_numel(x->v.shape, x->v.rank) > 0) {
        em_view vx;
        EW_TRY(emi_input_view(fn, x, &vx, &tx));
        EW_TRY(ops->unary(x->st->ctx, op, &o->v, &vx, params));
    }
    /* Also when x was reused in place (untracked): the result takes the inputs' device and
     * mark like any other result. */
    emi_rule_unary_params up = {op, {params ? params[0] : 0, params ? params[1] : 0,
                                     params && op == EM_UN_NAN_TO_NUM ? params[2] : 0}};
    EW_TRY(emi_ad_end(&ad, emi_rules_unary[op], ins, 1, o, &up, sizeof up));
done:
    em_tensor_release(tx);
    return ew_finish(s, consumed, o, out);
}

em_status ew_unary(const char *fn, em_unary_op op, ew_kind k, const em_tensor *x,
                   const double *params, em_tensor **out) {
    return unary_core(fn, op, k, x, params, NULL, out);
}

em_status ew_unary_(const char *fn, em_unary_op op, ew_kind k, em_tensor *x,
                    const double *params, em_tensor **out) {
    return unary_core(fn, op, k, x, params, x, out);
}

/* ---- binary ---- */

/* The dtype of a binary op's result: bool for comparisons and logical ops. */
static em_dtype binary_out_dtype(em_binary_op op, em_dtype in) {
    return em_binary_op_is_bool(op) ? EM_BOOL : in;
}

/* True when a kernel may read t through its own view (the backend takes strided inputs or t
 * is contiguous). */
static inline bool ew_direct(const em_tensor *t) {
    return (t->st->ops->caps & EM_CAP_STRIDED_INPUTS) || emi_view_is_contiguous(&t->v);
}

/* a op b (broadcast) into a fresh tensor, or into a's buffer when consumed == a allows it. */
static em_status binary_core(const char *fn, em_binary_op op, ew_kind k, const em_tensor *a,
                             const em_tensor *b, em_tensor *consumed, em_tensor **out) {
    em_status s;
    em_tensor *o = NULL, *ta = NULL, *tb = NULL;
    int64_t bshape[EM_MAX_RANK];
    EW_TRY(emi_check_tensor(fn, "a", a));
    EW_TRY(emi_check_tensor(fn, "b", b));
    EW_TRY(emi_check_out(fn, out));
    EW_TRY(emi_check_same_device(fn, a, b));
    EW_TRY(emi_check_same_dtype(fn, a, b));
    EW_TRY(ew_check_kind(fn, a, k));
    /* Equal shapes (the common case) need no broadcasting: the result has a's shape. */
    const bool same = emi_same_shape(a->v.shape, a->v.rank, b->v.shape, b->v.rank);
    const int64_t *shape = a->v.shape;
    int rank = a->v.rank;
    if (!same) {
        EW_TRY(emi_broadcast_shapes(fn, a->v.shape, a->v.rank, b->v.shape, b->v.rank, bshape,
                                    &rank));
        shape = bshape;
    }
    const em_backend_ops *ops = a->st->ops;
    EW_TRY(emi_need(fn, ops, ops->binary != NULL, "binary"));
    const em_tensor *ins[2] = {a, b};
    /* Inputs outside autodiff record nothing: emi_ad_begin / emi_ad_end would only give the
     * result a's device and no mark, which emi_empty already does. */
    const bool plain = emi_plain(a) && emi_plain(b);
    emi_ad_op ad = {false, EM_CKPT_NONE, a->dev};
    if (!plain) EW_TRY(emi_ad_begin(fn, ins, 2, &ad));
    EW_TRY(ew_output(fn, consumed, &ad, emi_result_device(ins, 2),
                     binary_out_dtype(op, a->dtype), shape, rank, &o));
    if (emi_numel(shape, rank) > 0) {
        /* equal shapes the kernel can read as they are need no operand views */
        const em_view *va = &a->v, *vb = &b->v;
        em_view sa, sb;
        if (!same || !ew_direct(a) || !ew_direct(b)) {
            EW_TRY(emi_operand(fn, a, shape, rank, &sa, &va, &ta));
            EW_TRY(emi_operand(fn, b, shape, rank, &sb, &vb, &tb));
        }
        EW_TRY(ops->binary(a->st->ctx, op, &o->v, va, vb));
    }
    if (!plain) EW_TRY(emi_ad_end(&ad, emi_rules_binary[op], ins, 2, o, &op, sizeof op));
done:
    if (ta) em_tensor_release(ta);
    if (tb) em_tensor_release(tb);
    return ew_finish(s, consumed, o, out);
}

em_status ew_binary(const char *fn, em_binary_op op, ew_kind k, const em_tensor *a,
                    const em_tensor *b, em_tensor **out) {
    return binary_core(fn, op, k, a, b, NULL, out);
}

em_status ew_binary_(const char *fn, em_binary_op op, ew_kind k, em_tensor *a,
                     const em_tensor *b, em_tensor **out) {
    return binary_core(fn, op, k, a, b, a, out);
}

/* ---- with a scalar ---- */

/* a op s into a fresh tensor, or into a's buffer when consumed == a allows it. */
static em_status scalar_core(const char *fn, em_binary_op op, ew_kind k, const em_tensor *a,
                             double sv, em_tensor *consumed, em_tensor **out) {
    em_status s;
    em_tensor *o = NULL, *ta = NULL;
    EW_TRY(emi_check_tensor(fn, "a", a));
    EW_TRY(emi_check_out(fn, out));
    EW_TRY(ew_check_kind(fn, a, k));
    const em_backend_ops *ops = a->st->ops;
    EW_TRY(emi_need(fn, ops, ops->binary_scalar != NULL, "binary_scalar"));
    const em_tensor *ins[1] = {a};
    emi_ad_op ad;
    EW_TRY(emi_ad_begin(fn, ins, 1, &ad));
    EW_TRY(ew_output(fn, consumed, &ad, emi_result_device(ins, 1),
                     binary_out_dtype(op, a->dtype), a->v.shape, a->v.rank, &o));
    double cs = ew_scalar_cast(a->dtype, sv);
    if (emi_numel(a->v.shape, a->v.rank) > 0) {
        em_view va;
        EW_TRY(emi_input_view(fn, a, &va, &ta));
        EW_TRY(ops->binary_scalar(a->st->ctx, op, &o->v, &va, cs));
    }
    emi_rule_scalar_params sp = {op, cs};
    EW_TRY(emi_ad_end(&ad, emi_rules_scalar[op], ins, 1, o, &sp, sizeof sp));
done:
    em_tensor_release(ta);
    return ew_finish(s, consumed, o, out);
}

em_status ew_scalar(const char *fn, em_binary_op op, ew_kind k, const em_tensor *a, double s,
                    em_tensor **out) {
    return scalar_core(fn, op, k, a, s, NULL, out);
}

em_status ew_scalar_(const char *fn, em_binary_op op, ew_kind k, em_tensor *a, double s,
                     em_tensor **out) {
    return scalar_core(fn, op, k, a, s, a, out);
}

/* ---- where ---- */

em_status ew_where(const char *fn, const em_tensor *cond, const em_tensor *a,
                   const em_tensor *b, em_tensor **out) {
    em_status s;
    em_tensor *o = NULL, *tc = NULL, *ta = NULL, *tb = NULL;
    int64_t ab[EM_MAX_RANK], shape[EM_MAX_RANK];
    int rab = 0, rank = 0;
    EW_TRY(emi_check_tensor(fn, "cond", cond));
    EW_TRY(emi_check_tensor(fn, "a", a));
    EW_TRY(emi_check_tensor(fn, "b", b));
    EW_TRY(emi_check_out(fn, out));
    EW_TRY(emi_check_same_device(fn, cond, a));
    EW_TRY(emi_check_same_device(fn, a, b));
    EW_TRY(emi_check_bool(fn, cond));
    EW_TRY(emi_check_same_dtype(fn, a, b));
    EW_TRY(emi_check_not_quantized(fn, a));
    EW_TRY(emi_broadcast_shapes(fn, a->v.shape, a->v.rank, b->v.shape, b->v.rank, ab, &rab));
    EW_TRY(emi_broadcast_shapes(fn, cond->v.shape, cond->v.rank, ab, rab, shape, &rank));
    const em_backend_ops *ops = a->st->ops;
    EW_TRY(emi_need(fn, ops, ops->where != NULL, "where"));
    const em_tensor *ins[3] = {a, b, cond};
    emi_ad_op ad;
    EW_TRY(emi_ad_begin(fn, ins, 3, &ad));
    EW_TRY(emi_empty(fn, emi_result_device(ins, 3), a->dtype, shape, rank, &o));
    if (emi_numel(shape, rank) > 0) {
        em_view vc, va, vb;
        EW_TRY(emi_input_view(fn, cond, &vc, &tc));
        EW_TRY(emi_input_view(fn, a, &va, &ta));
        EW_TRY(emi_input_view(fn, b, &vb, &tb));
        vc = emi_broadcast_view(tc ? tc : cond, shape, rank);
        va = emi_broadcast_view(ta ? ta : a, shape, rank);
        vb = emi_broadcast_view(tb ? tb : b, shape, rank);
        EW_TRY(ops->where(a->st->ctx, &o->v, &vc, &va, &vb));
    }
    EW_TRY(emi_ad_end(&ad, &emi_rule_where, ins, 3, o, NULL, 0));
done:
    em_tensor_release(tc);
    em_tensor_release(ta);
    em_tensor_release(tb);
    return ew_finish(s, NULL, o, out);
}
