/*
 * fused.c — the internal entry points of the fused kernel slots (fused.h): checks, the
 * output, routing to the backend's unary_backward / adam_step; Adam's scalars, its composition
 * on a device's views and its captured form (the graph-only adam_step call).
 */
#include <math.h>
#include <stdlib.h>

#include "autodiff/autodiff.h"
#include "graph/graph_internal.h"
#include "ops/elementwise.h"
#include "ops/fused.h"

/* -1: not read yet; 0 off; 1 on. */
static atomic_int fused_state = -1;

bool emi_fused_on(void) {
    int v = atomic_load_explicit(&fused_state, memory_order_relaxed);
    if (v < 0) {
        const char *e = getenv("EMBER_FUSED");
        int want = !(e && e[0] == '0' && e[1] == 0);
        int expect = -1;
        atomic_compare_exchange_strong(&fused_state, &expect, want);
        v = atomic_load(&fused_state);
    }
    return v == 1;
}

bool emi_fused_set(bool on) {
    bool was = emi_fused_on();
    atomic_store(&fused_state, on ? 1 : 0);
    return was;
}

bool emi_has_unary_backward(const em_tensor *t) {
    return t && t->magic == EMI_TENSOR_LIVE && t->st->ops->unary_backward && emi_fused_on();
}

bool emi_has_adam_step(const em_tensor *t) {
    return t && t->magic == EMI_TENSOR_LIVE && t->st->ops->adam_step && emi_fused_on();
}

char emi_unary_backward_reads(em_unary_op op) {
    switch (op) {
    case EM_UN_ABS: case EM_UN_LOG: case EM_UN_LOG1P: case EM_UN_SIN: case EM_UN_COS:
    case EM_UN_GELU: case EM_UN_SILU: case EM_UN_ERF: case EM_UN_CLAMP: return 'x';
    case EM_UN_EXP: case EM_UN_SQRT: case EM_UN_RSQRT: case EM_UN_TANH: case EM_UN_SIGMOID:
    case EM_UN_RECIP: case EM_UN_RELU: return 'y';
    default: return 0;
    }
}

/* t is present, untracked, of gy's dtype, shape and device. */
static em_status fused_check_like(const char *fn, const char *what, const em_tensor *t,
                                  const em_tensor *ref) {
    EMI_TRY(emi_check_tensor(fn, what, t));
    EMI_TRY(emi_check_same_device(fn, t, ref));
    EMI_TRY(emi_check_same_dtype(fn, t, ref));
    if (t->ad) return emi_fail(EM_ERR_UNSUPPORTED, "%s: %s is tracked (no second derivatives)", fn, what);
    if (!emi_same_shape(t->v.shape, t->v.rank, ref->v.shape, ref->v.rank)) {
        char a[96], b[96];
        return emi_fail(EM_ERR_SHAPE, "%s: %s has shape %s, expected %s", fn, what,
                        emi_shape_str(t->v.shape, t->v.rank, a, sizeof a),
                        emi_shape_str(ref->v.shape, ref->v.rank, b, sizeof b));
    }
    return EM_OK;
}

/* The kernel's params for op: clamp's bounds as values of dtype dt in pb (x is compared with
 * them there, as the composed rule's em_ge / em_le compare x with its bounds made tensors of
 * x's dtype: 0.7 is 0.7002 in f16, and an f16 x of 0.7002 passes the gradient); zeros for the
 * other ops. */
static const double *ub_params(em_unary_op op, em_dtype dt, const double *params, double *pb) {
    pb[0] = pb[1] = 0;
    if (op == EM_UN_CLAMP) {
        pb[0] = ew_scalar_cast(dt, params[0]);
        pb[1] = ew_scalar_cast(dt, params[1]);
    }
    return op == EM_UN_CLAMP ? pb : params;
}

em_status emi_unary_backward(em_unary_op op, const em_tensor *x, const em_tensor *y,
                             const em_tensor *gy, const double *params, em_tensor **gx) {
    static const char fn[] = "emi_unary_backward";
    EMI_TRY(emi_check_out(fn, gx));
    EMI_TRY(emi_check_tensor(fn, "gy", gy));
    EMI_TRY(emi_check_float(fn, gy));
    if (gy->ad) return emi_fail(EM_ERR_UNSUPPORTED, "%s: gy is tracked (no second derivatives)", fn);
    const char reads = (unsigned)op < EM_UN_COUNT ? emi_unary_backward_reads(op) : 0;
    if (!reads) return emi_fail(EM_ERR_ARG, "%s: op %d has no fused gradient", fn, (int)op);
    const em_tensor *v = reads == 'x' ? x : y;
    if ((reads == 'x' && y) || (reads == 'y' && x))
        return emi_fail(EM_ERR_ARG, "%s: op %d reads %s only; pass NULL for %s", fn, (int)op,
                        reads == 'x' ? "x" : "y", reads == 'x' ? "y" : "x");
    EMI_TRY(fused_check_like(fn, reads == 'x' ? "x" : "y", v, gy));
    if (op == EM_UN_CLAMP && !params) return emi_fail(EM_ERR_ARG, "%s: clamp needs its bounds", fn);
    double pb[2];
    params = ub_params(op, gy->dtype, params, pb);
    const em_backend_ops *ops = gy->st->ops;
    if (!ops->unary_backward || !emi_fused_on()) return EM_ERR_UNSUPPORTED;
    em_tensor *o = NULL, *tv = NULL, *tg = NULL;
    const em_tensor *ins[2] = {gy, v};
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, ins, 2, &ad));
    em_status s = emi_empty(fn, emi_result_device(ins, 2), gy->dtype, gy->v.shape, gy->v.rank, &o);
    if (s != EM_OK) return s;
    if (emi_numel(gy->v.shape, gy->v.rank) > 0) {
        em_view vv, vg;
        s = emi_input_view(fn, v, &vv, &tv);
        if (s == EM_OK) s = emi_input_view(fn, gy, &vg, &tg);
        if (s == EM_OK)
            s = ops->unary_backward(gy->st->ctx, op, &o->v, reads == 'x' ? &vv : NULL,
                                    reads == 'y' ? &vv : NULL, &vg, params);
    }
    em_tensor_release(tv);
    em_tensor_release(tg);
    /* the device and mark any op on these inputs gives its result */
    if (s == EM_OK) s = emi_ad_end(&ad, NULL, ins, 2, o, NULL, 0);
    if (s != EM_OK) {
        em_tensor_release(o);
        return s;
    }
    *gx = o;
    return EM_OK;
}

em_status emi_unary_backward_captured(em_unary_op op, const em_tensor *x, const em_tensor *y,
                                      const em_tensor *gy, const double *params, em_tensor **gx) {
    static const char fn[] = "emi_unary_backward";
    if (!gy || gy->magic != EMI_TENSOR_LIVE || gy->st->ops->id != EM_BACKEND_CAPTURE ||
        !emi_fused_on())
        return EM_ERR_UNSUPPORTED;
    const char reads = (unsigned)op < EM_UN_COUNT ? emi_unary_backward_reads(op) : 0;
    const em_tensor *v = reads == 'x' ? x : y;
    if (!reads || !v || gy->ad || emi_kind(gy->dtype) != EM_KIND_FLOAT ||
        emi_numel(gy->v.shape, gy->v.rank) == 0 || (op == EM_UN_CLAMP && !params))
        return EM_ERR_UNSUPPORTED; /* not a call the eager path fuses: composed alone */
    EMI_TRY(fused_check_like(fn, reads == 'x' ? "x" : "y", v, gy));
    double pb[2];
    ub_params(op, gy->dtype, params, pb); /* recorded: zeros but for clamp */
    em_tensor *o = NULL, *tv = NULL, *tg = NULL;
    em_status s = emi_empty(fn, gy->dev, gy->dtype, gy->v.shape, gy->v.rank, &o);
    em_view vv, vg;
    if (s == EM_OK) s = emi_input_view(fn, v, &vv, &tv);
    if (s == EM_OK) s = emi_input_view(fn, gy, &vg, &tg);
    if (s == EM_OK) {
        const em_view *const views[RW_MAX_VIEWS] = {&o->v, reads == 'x' ? &vv : NULL,
                                                    reads == 'y' ? &vv : NULL, &vg};
        s = gr_rec_alt_begin(RW_K_UNARY_BACKWARD, (int)op, views, NULL, pb);
    }
    em_tensor_release(tv);
    em_tensor_release(tg);
    if (s != EM_OK) {
        em_tensor_release(o);
        return s;
    }
    *gx = o;
    return EM_OK;
}

em_status emi_unary_backward_captured_end(em_status s, em_tensor *gx, em_tensor **composed) {
    if (s == EM_OK && (!composed || !*composed))
        s = emi_fail(EM_ERR_STATE, "emi_unary_backward: the composition made no gradient");
    if (s == EM_OK) s = emi_copy_into("emi_unary_backward", gx, *composed);
    gr_rec_alt_end();
    if (composed) {
        em_tensor_release(*composed);
        *composed = NULL;
    }
    if (s != EM_OK) {
        em_tensor_release(gx);
        return s;
    }
    *composed = gx;
    return EM_OK;
}

em_status emi_adam_step(em_tensor *param, em_tensor *exp_avg, em_tensor *exp_avg_sq,
                        const em_tensor *grad, const em_adam_args *a) {
    static const char fn[] = "emi_adam_step";
    EMI_TRY(emi_check_tensor(fn, "param", param));
    EMI_TRY(emi_check_float(fn, param));
    if (!a) return emi_fail_null(fn, "args");
    if (param->ad) return emi_fail(EM_ERR_UNSUPPORTED, "%s: param is tracked (pass its detached value)", fn);
    EMI_TRY(fused_check_like(fn, "exp_avg", exp_avg, param));
    EMI_TRY(fused_check_like(fn, "exp_avg_sq", exp_avg_sq, param));
    EMI_TRY(fused_check_like(fn, "grad", grad, param));
    const em_backend_ops *ops = param->st->ops;
    if (!ops->adam_step || !emi_fused_on()) return EM_ERR_UNSUPPORTED;
    /* written in place: contiguous, and no two of the four in one buffer */
    if (!emi_view_is_contiguous(&param->v) || !emi_view_is_contiguous(&exp_avg->v) ||
        !emi_view_is_contiguous(&exp_avg_sq->v) || param->st == exp_avg->st ||
        param->st == exp_avg_sq->st || exp_avg->st == exp_avg_sq->st ||
        grad->st == param->st || grad->st == exp_avg->st || grad->st == exp_avg_sq->st)
        return EM_ERR_UNSUPPORTED;
    if (emi_numel(param->v.shape, param->v.rank) == 0) return EM_OK;
    em_view vg;
    em_tensor *tg = NULL;
    em_status s = emi_input_view(fn, grad, &vg, &tg);
    if (s == EM_OK)
        s = ops->adam_step(param->st->ctx, &param->v, &exp_avg->v, &exp_avg_sq->v, &vg, a);
    em_tensor_release(tg);
    return s;
}

/* ---- Adam's scalars, its composition on raw views, its captured form ---- */

em_adam_args emi_adam_args_of(bool adamw, double lr, double beta1, double beta2, double eps,
                              double weight_decay, int64_t t, double grad_scale) {
    em_adam_args a;
    const double bc1 = 1.0 - pow(beta1, (double)t), bc2 = 1.0 - pow(beta2, (double)t);
    const double step_size = lr / bc1;
    /* step_size folded into the denominator's two scalars (one pass less) when that is exact
     * enough */
    const bool fold = step_size >= 1e-12 && step_size <= 1e12;
    a.grad_scale = grad_scale;
    a.weight_decay = adamw ? 0.0 : weight_decay;
    a.beta1 = beta1;
    a.c1 = 1.0 - beta1;
    a.beta2 = beta2;
    a.c2 = 1.0 - beta2;
    a.denom_scale = fold ? 1.0 / (sqrt(bc2) * step_size) : 1.0 / sqrt(bc2);
    a.denom_eps = fold ? eps / step_size : eps;
    a.step_scale = fold ? 1.0 : step_size;
    a.decay = adamw && weight_decay != 0 ? 1.0 - lr * weight_decay : 1.0;
    return a;
}

/* The temporaries of emi_adam_compose: at most three alive at once. */
typedef struct ad_pool {
    const em_backend_ops *o;
    void *ctx;
    size_t bytes;
    void *buf[4];
    bool busy[4];
    em_view v[4];
} ad_pool;

/* A free temporary (contiguous, like `like`), or NULL with *s set. */
static const em_view *ad_take(ad_pool *p, const em_view *like, em_status *s) {
    for (int i = 0; i < 4; i++) {
        if (p->busy[i]) continue;
        if (!p->buf[i]) {
            *s = p->o->alloc(p->ctx, p->bytes, &p->buf[i]);
            if (*s != EM_OK) {
                p->buf[i] = NULL;
                return NULL;
            }
        }
        p->busy[i] = true;
        p->v[i] = *like;
        p->v[i].buf = p->buf[i];
        p->v[i].offset = 0;
        emi_contiguous_strides(p->v[i].shape, p->v[i].rank, p->v[i].strides);
        return &p->v[i];
    }
    *s = emi_fail(EM_ERR_STATE, "adam_step: out of temporaries");
    return NULL;
}

static void ad_give(ad_pool *p, const em_view *v) {
    for (int i = 0; i < 4; i++)
        if (v == &p->v[i]) p->busy[i] = false;
}

em_status emi_adam_compose(const em_backend_ops *o, void *ctx, const em_view *P,
                           const em_view *M, const em_view *V, const em_view *G,
                           const em_adam_args *a, bool decay) {
    const em_dtype dt = P->dtype;
    const int64_t n = emi_numel(P->shape, P->rank);
    if (n == 0) return EM_OK;
    if (!o->unary || !o->binary || !o->binary_scalar)
        return emi_fail(EM_ERR_UNSUPPORTED, "adam_step: the device has no elementwise kernels");
    ad_pool p = {o, ctx, (size_t)n * emi_dtype_size(dt), {NULL}, {false}, {{0}}};
    em_status s = EM_OK;
    /* the eager composition (src/nn/optim.c: nn_optimizer_step, nn_update, nn_axpby), each
     * scalar made a value of the dtype as the public ops make it (ew_scalar_cast) */
#define AD_SC(out, op, in, x)                                                                  \
    if (s == EM_OK) s = o->binary_scalar(ctx, op, out, in, ew_scalar_cast(dt, x))
#define AD_BIN(out, op, x, y)                                                                  \
    if (s == EM_OK) s = o->binary(ctx, op, out, x, y)
    /* g = grad * grad_scale */
    const em_view *g = G, *d = NULL, *t = NULL;
    if (a->grad_scale != 1.0) {
        g = ad_take(&p, P, &s);
        AD_SC(g, EM_BIN_MUL, G, a->grad_scale);
    }
    /* d = g + param * weight_decay (Adam's L2 term) */
    d = g;
    if (s == EM_OK && a->weight_decay != 0) {
        const em_view *pw = P;
        if (a->weight_decay != 1.0) {
            pw = ad_take(&p, P, &s);
            AD_SC(pw, EM_BIN_MUL, P, a->weight_decay);
        }
        d = g != G ? g : ad_take(&p, P, &s); /* into g's buffer when it is a temporary */
        AD_BIN(d, EM_BIN_ADD, g, pw);
        if (pw != P) ad_give(&p, pw);
    }
    /* m = m * beta1 + d * c1 */
    AD_SC(M, EM_BIN_MUL, M, a->beta1);
    if (s == EM_OK && a->c1 == 1.0) {
        AD_BIN(M, EM_BIN_ADD, M, d);
    } else if (s == EM_OK) {
        t = ad_take(&p, P, &s);
        AD_SC(t, EM_BIN_MUL, d, a->c1);
        AD_BIN(M, EM_BIN_ADD, M, t);
        if (t) ad_give(&p, t);
    }
    /* v = v * beta2 + (d * d) * c2 */
    if (s == EM_OK) t = ad_take(&p, P, &s);
    AD_BIN(t, EM_BIN_MUL, d, d);
    AD_SC(t, EM_BIN_MUL, t, a->c2);
    AD_SC(V, EM_BIN_MUL, V, a->beta2);
    AD_BIN(V, EM_BIN_ADD, V, t);
    /* den = sqrt(v) * denom_scale + denom_eps (into t's buffer); q = m / den */
    if (s == EM_OK) s = o->unary(ctx, EM_UN_SQRT, t, V, NULL);
    AD_SC(t, EM_BIN_MUL, t, a->denom_scale);
    AD_SC(t, EM_BIN_ADD, t, a->denom_eps);
    const em_view *q = NULL;
    if (s == EM_OK) q = d != G ? d : ad_take(&p, P, &s); /* d is read no more */
    AD_BIN(q, EM_BIN_DIV, M, t);
    /* param = param * decay - q * step_scale */
    if (s == EM_OK && a->step_scale != 1.0) AD_SC(q, EM_BIN_MUL, q, a->step_scale);
    if (s == EM_OK && decay) AD_SC(P, EM_BIN_MUL, P, a->decay);
    AD_BIN(P, EM_BIN_SUB, P, q);
#undef AD_SC
#undef AD_BIN
    for (int i = 0; i < 4; i++)
        if (p.buf[i]) o->free(ctx, p.buf[i]);
    return s;
}

em_status emi_adam_step_captured(em_tensor *param, em_tensor *exp_avg, em_tensor *exp_avg_sq,
                                 const em_tensor *grad, em_tensor *step, bool adamw,
                                 const double hyper[6]) {
    static const char fn[] = "em_optimizer_step";
    EMI_TRY(emi_check_tensor(fn, "param", param));
    EMI_TRY(emi_check_float(fn, param));
    if (!hyper) return emi_fail_null(fn, "hyper");
    if (param->ad) return emi_fail(EM_ERR_ARG, "%s: param is tracked (pass its detached value)", fn);
    if (param->dev.backend != EM_BACKEND_CAPTURE)
        return emi_fail(EM_ERR_DEVICE, "%s: a captured Adam step takes capture tensors", fn);
    EMI_TRY(fused_check_like(fn, "exp_avg", exp_avg, param));
    EMI_TRY(fused_check_like(fn, "exp_avg_sq", exp_avg_sq, param));
    EMI_TRY(fused_check_like(fn, "grad", grad, param));
    EMI_TRY(emi_check_tensor(fn, "step", step));
    EMI_TRY(emi_check_same_device(fn, step, param));
    if (step->dtype != EM_I64 || emi_numel(step->v.shape, step->v.rank) != 1)
        return emi_fail(EM_ERR_ARG, "%s: the step count must be one i64", fn);
    if (!emi_view_is_contiguous(&param->v) || !emi_view_is_contiguous(&exp_avg->v) ||
        !emi_view_is_contiguous(&exp_avg_sq->v))
        return emi_fail(EM_ERR_UNSUPPORTED, "%s: a captured Adam step updates contiguous "
                                            "parameters and moments in place", fn);
    const em_view *views[RW_MAX_VIEWS] = {&param->v, &exp_avg->v, &exp_avg_sq->v, &grad->v,
                                          &step->v};
    return gr_rec_adam_step(adamw ? 1 : 0, views, hyper);
}
