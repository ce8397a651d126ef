/* optim.c — SGD (momentum, weight decay), Adam, AdamW; the step schedule; clipping by norm.
 * Updates are computed with untracked ops on the inner device (the parameter's detached value
 * and its gradient) and written back with em_tensor_assign_ (the parameter takes the new
 * value's buffer when nothing else holds either). Adam and AdamW run the backend's fused
 * adam_step kernel instead where it has one (one pass over the parameter, its gradient and
 * both moments, in place; src/ops/fused.h), with the scalars of the composed update, so that
 * both give the same f32 / f64 results. */
#include <math.h>
#include <stdlib.h>

#include "nn/nn_internal.h"
#include "ops/fused.h"

typedef enum nn_opt_kind { NN_SGD, NN_ADAM, NN_ADAMW } nn_opt_kind;

struct em_optimizer {
    nn_opt_kind kind;
    double lr, momentum, wd, beta1, beta2, eps;
    size_t n;
    em_tensor ***slots;
    em_tensor **s1, **s2; /* momentum buffer / exp_avg; exp_avg_sq */
    int64_t *steps;       /* per parameter */
};

static em_status nn_opt_new(const char *fn, nn_opt_kind kind, const em_params *params,
                            double lr, double wd, em_optimizer **out) {
    if (!params) return nn_null(fn, "params");
    if (!out) return nn_null(fn, "out");
    if (!(lr >= 0) || !isfinite(lr))
        return em_backend_set_error(EM_ERR_ARG, "%s: lr must be >= 0, got %g", fn, lr);
    if (!(wd >= 0) || !isfinite(wd))
        return em_backend_set_error(EM_ERR_ARG, "%s: weight_decay must be >= 0, got %g", fn, wd);
    em_optimizer *o = calloc(1, sizeof *o);
    size_t n = em_params_count(params);
    if (o) {
        o->n = n;
        o->slots = calloc(n ? n : 1, sizeof *o->slots);
        o->s1 = calloc(n ? n : 1, sizeof *o->s1);
        o->s2 = calloc(n ? n : 1, sizeof *o->s2);
        o->steps = calloc(n ? n : 1, sizeof *o->steps);
    }
    if (!o || !o->slots || !o->s1 || !o->s2 || !o->steps) {
        em_optimizer_release(o);
        return em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
    }
    for (size_t i = 0; i < n; i++) o->slots[i] = em_params_slot(params, i);
    o->kind = kind;
    o->lr = lr;
    o->wd = wd;
    *out = o;
    return EM_OK;
}

em_status em_optimizer_sgd(const em_params *params, double lr, double momentum,
                           double weight_decay, em_optimizer **out) {
    static const char fn[] = "em_optimizer_sgd";
    if (!(momentum >= 0) || !isfinite(momentum))
        return em_backend_set_error(EM_ERR_ARG, "%s: momentum must be >= 0, got %g", fn, momentum);
    em_optimizer *o;
    NN_TRY(nn_opt_new(fn, NN_SGD, params, lr, weight_decay, &o));
    o->momentum = momentum;
    *out = o;
    return EM_OK;
}

static em_status nn_adam(const char *fn, nn_opt_kind kind, const em_params *params, double lr,
                         double beta1, double beta2, double eps, double weight_decay,
                         em_optimizer **out) {
    if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
        return em_backend_set_error(EM_ERR_ARG, "%s: betas must be in [0, 1), got %g, %g", fn,
                                    beta1, beta2);
    if (!(eps >= 0) || !isfinite(eps))
        return em_backend_set_error(EM_ERR_ARG, "%s: eps must be >= 0, got %g", fn, eps);
    em_optimizer *o;
    NN_TRY(nn_opt_new(fn, kind, params, lr, weight_decay, &o));
    o->beta1 = beta1;
    o->beta2 = beta2;
    o->eps = eps;
    *out = o;
    return EM_OK;
}

em_status em_optimizer_adam(const em_params *params, double lr, double beta1, double beta2,
                            double eps, double weight_decay, em_optimizer **out) {
    return nn_adam("em_optimizer_adam", NN_ADAM, params, lr, beta1, beta2, eps, weight_decay,
                   out);
}

em_status em_optimizer_adamw(const em_params *params, double lr, double beta1, double beta2,
                             double eps, double weight_decay, em_optimizer **out) {
    return nn_adam("em_optimizer_adamw", NN_ADAMW, params, lr, beta1, beta2, eps, weight_decay,
                   out);
}

void em_optimizer_release(em_optimizer *opt) {
    if (!opt) return;
    for (size_t i = 0; i < opt->n; i++) {
        if (opt->s1) em_tensor_release(opt->s1[i]);
        if (opt->s2) em_tensor_release(opt->s2[i]);
    }
    free(opt->slots);
    free(opt->s1);
    free(opt->s2);
    free(opt->steps);
    free(opt);
}

em_status em_optimizer_set_lr(em_optimizer *opt, double lr) {
    if (!opt) return nn_null("em_optimizer_set_lr", "opt");
    if (!(lr >= 0) || !isfinite(lr))
        return em_backend_set_error(EM_ERR_ARG, "em_optimizer_set_lr: lr must be >= 0, got %g",
                                    lr);
    opt->lr = lr;
    return EM_OK;
}

double em_optimizer_lr(const em_optimizer *opt) { return opt ? opt->lr : 0.0; }

/* *acc = *acc * a + b * c (b may be NULL: *acc * a); consumes the old *acc. */
static em_status nn_axpby(em_tensor **acc, double a, const em_tensor *b, double c) {
    em_tensor *t = NULL, *bc = NULL;
    em_status s = EM_OK;
    if (a == 1.0) t = *acc; /* no pass for a product by 1 */
    else s = em_mul_scalar_(*acc, a, &t);
    *acc = NULL;
    if (s != EM_OK || !b) {
        *acc = t;
        return s;
    }
    if (c == 1.0) {
        s = em_add_(t, b, acc);
        return s;
    }
    s = em_mul_scalar(b, c, &bc);
    if (s == EM_OK) s = em_add_(t, bc, acc);
    else em_tensor_release(t);
    em_tensor_release(bc);
    return s;
}

/* The new value of parameter i given its value p and gradient g (both untracked). */
static em_status nn_update(em_optimizer *o, size_t i, const em_tensor *p, em_tensor *g,
                           em_tensor **newp) {
    em_status s = EM_OK;
    em_tensor *d = g; /* the direction; owned */
    em_tensor_retain(d);
    if (o->wd != 0 && o->kind != NN_ADAMW) s = nn_axpby(&d, 1.0, p, o->wd);
    if (s != EM_OK) return s;
    if (o->kind == NN_SGD) {
        if (o->momentum != 0) {
            if (!o->s1[i]) {
                s = em_clone(d, &o->s1[i]);
            } else {
                s = nn_axpby(&o->s1[i], o->momentum, d, 1.0);
            }
            em_tensor_release(d);
            d = o->s1[i];
            em_tensor_retain(d);
            if (s != EM_OK) {
                em_tensor_release(d);
                return s;
            }
        }
        em_tensor *step = NULL;
        s = em_mul_scalar(d, o->lr, &step);
        em_tensor_release(d);
        if (s == EM_OK) s = em_sub(p, step, newp);
        em_tensor_release(step);
        return s;
    }
    /* Adam / AdamW */
    const int64_t *shape = em_tensor_shape(p);
    int rank = em_tensor_rank(p);
    if (!o->s1[i]) s = em_zeros(shape, rank, em_tensor_dtype(p), em_tensor_device(g), &o->s1[i]);
    if (s == EM_OK && !o->s2[i])
        s = em_zeros(shape, rank, em_tensor_dtype(p), em_tensor_device(g), &o->s2[i]);
    em_tensor *d2 = NULL, *t2 = NULL;
    if (s == EM_OK) s = nn_axpby(&o->s1[i], o->beta1, d, 1.0 - o->beta1);
    /* (d * d) * (1 - beta2) in one buffer, as nn_axpby would make it in two */
    if (s == EM_OK) s = em_mul(d, d, &d2);
    em_tensor_release(d);
    if (s == EM_OK) s = em_mul_scalar_(d2, 1.0 - o->beta2, &t2);
    if (s == EM_OK) s = nn_axpby(&o->s2[i], o->beta2, t2, 1.0);
    em_tensor_release(t2);
    if (s != EM_OK) return s;
    int64_t t = ++o->steps[i];
    double bc1 = 1.0 - pow(o->beta1, (double)t), bc2 = 1.0 - pow(o->beta2, (double)t);
    double step_size = o->lr / bc1;
    em_tensor *den = NULL, *q = NULL, *base = NULL;
    /* step_size * s1 / (sqrt(s2) / sqrt(bc2) + eps), with step_size folded into the
     * denominator's two scalars (one pass less) when that is exact enough */
    const bool fold = step_size >= 1e-12 && step_size <= 1e12;
    const double k = fold ? 1.0 / (sqrt(bc2) * step_size) : 1.0 / sqrt(bc2);
    s = em_sqrt(o->s2[i], &den);
    if (s == EM_OK) s = em_mul_scalar_(den, k, &q);
    den = NULL;
    if (s == EM_OK) s = em_add_scalar_(q, fold ? o->eps / step_size : o->eps, &den);
    q = NULL;
    if (s == EM_OK) s = em_div(o->s1[i], den, &q);
    em_tensor_release(den);
    den = NULL;
    if (s == EM_OK && o->kind == NN_ADAMW && o->wd != 0)
        s = em_mul_scalar(p, 1.0 - o->lr * o->wd, &base);
    else if (s == EM_OK) {
        base = (em_tensor *)p;
        em_tensor_retain(base);
    }
    if (s == EM_OK && !fold) {
        s = em_mul_scalar_(q, step_size, &den);
        q = NULL;
    } else if (s == EM_OK) {
        den = q;
        q = NULL;
    } else {
        em_tensor_release(q);
        q = NULL;
    }
    /* base is a fresh buffer for AdamW's decay: the result goes into it */
    if (s == EM_OK && base != p) {
        s = em_sub_(base, den, newp);
        base = NULL;
    } else if (s == EM_OK) {
        s = em_sub(base, den, newp);
    }
    em_tensor_release(den);
    em_tensor_release(base);
    return s;
}

/* The composed update's scalars for step t (nn_update below: the same fold). */
static em_adam_args nn_adam_args(const em_optimizer *o, int64_t t, double grad_scale) {
    em_adam_args a;
    double bc1 = 1.0 - pow(o->beta1, (double)t), bc2 = 1.0 - pow(o->beta2, (double)t);
    double step_size = o->lr / bc1;
    const bool fold = step_size >= 1e-12 && step_size <= 1e12;
    a.grad_scale = grad_scale;
    a.weight_decay = o->kind == NN_ADAMW ? 0.0 : o->wd;
    a.beta1 = o->beta1;
    a.c1 = 1.0 - o->beta1;
    a.beta2 = o->beta2;
    a.c2 = 1.0 - o->beta2;
    a.denom_scale = fold ? 1.0 / (sqrt(bc2) * step_size) : 1.0 / sqrt(bc2);
    a.denom_eps = fold ? o->eps / step_size : o->eps;
    a.step_scale = fold ? 1.0 : step_size;
    a.decay = o->kind == NN_ADAMW && o->wd != 0 ? 1.0 - o->lr * o->wd : 1.0;
    return a;
}

/* Adam / AdamW's step of parameter i with the fused kernel: EM_OK (done), EM_ERR_UNSUPPORTED
 * (no kernel for this case: nothing changed, the caller composes), or a failure. */
static em_status nn_adam_fused(em_optimizer *o, size_t i, em_tensor *param, em_tensor *gr,
                               double grad_scale) {
    if (!emi_has_adam_step(gr)) return EM_ERR_UNSUPPORTED;
    em_tensor *p = NULL;
    em_status s = em_tensor_detach(param, &p);
    const int64_t *shape = em_tensor_shape(gr);
    int rank = em_tensor_rank(gr);
    if (s == EM_OK && !o->s1[i])
        s = em_zeros(shape, rank, em_tensor_dtype(gr), em_tensor_device(gr), &o->s1[i]);
    if (s == EM_OK && !o->s2[i])
        s = em_zeros(shape, rank, em_tensor_dtype(gr), em_tensor_device(gr), &o->s2[i]);
    if (s == EM_OK) {
        em_adam_args a = nn_adam_args(o, o->steps[i] + 1, grad_scale);
        s = emi_adam_step(p, o->s1[i], o->s2[i], gr, &a);
        if (s == EM_OK) o->steps[i]++;
    }
    em_tensor_release(p);
    return s;
}

em_status em_optimizer_step(em_optimizer *opt, const em_grads *g, double grad_scale) {
    static const char fn[] = "em_optimizer_step";
    if (!opt) return nn_null(fn, "opt");
    if (!g) return nn_null(fn, "grads");
    if (!isfinite(grad_scale))
        return em_backend_set_error(EM_ERR_ARG, "%s: grad_scale must be finite, got %g", fn,
                                    grad_scale);
    for (size_t i = 0; i < opt->n; i++) {
        em_tensor *param = *opt->slots[i];
        if (!param) continue;
        em_tensor *gr = NULL, *p = NULL, *np = NULL;
        em_status s = em_grads_get(g, param, &gr);
        if (s != EM_OK) return s;
        if (!gr) continue;
        if (opt->kind != NN_SGD) {
            s = nn_adam_fused(opt, i, param, gr, grad_scale);
            if (s != EM_ERR_UNSUPPORTED) {
                em_tensor_release(gr);
                if (s != EM_OK) return s;
                continue;
            }
            s = EM_OK; /* no kernel for this case: composed below */
        }
        if (grad_scale != 1.0) {
            em_tensor *sc = NULL;
            s = em_mul_scalar_(gr, grad_scale, &sc);
            gr = sc;
        }
        if (s == EM_OK) s = em_tensor_detach(param, &p);
        if (s == EM_OK) s = nn_update(opt, i, p, gr, &np);
        /* p (a view of param's buffer) goes first, so that param can take np's buffer
         * instead of copying it */
        em_tensor_release(p);
        if (s == EM_OK) {
            s = em_tensor_assign_(param, np);
            np = NULL;
        }
        em_tensor_release(np);
        em_tensor_release(gr);
        if (s != EM_OK) return s;
    }
    return EM_OK;
}

double em_lr_step(double base_lr, int epoch, int step_size, double gamma) {
    if (step_size < 1 || epoch < 0) return base_lr;
    return base_lr * pow(gamma, (double)(epoch / step_size));
}

em_status em_clip_grad_norm(const em_params *p, const em_grads *g, double max_norm,
                            double *total_norm, double *scale) {
    static const char fn[] = "em_clip_grad_norm";
    if (!p) return nn_null(fn, "params");
    if (!g) return nn_null(fn, "grads");
    if (!scale) return nn_null(fn, "scale");
    if (!(max_norm > 0))
        return em_backend_set_error(EM_ERR_ARG, "%s: max_norm must be > 0, got %g", fn, max_norm);
    double total = 0;
    size_t n = em_params_count(p);
    for (size_t i = 0; i < n; i++) {
        em_tensor *gr = NULL, *sq = NULL, *sum = NULL, *gd = NULL;
        NN_TRY(em_grads_get(g, em_params_get(p, i), &gr));
        if (!gr) continue;
        em_status s = em_cast(gr, EM_F64, &gd);
        em_tensor_release(gr);
        if (s == EM_OK) s = em_mul(gd, gd, &sq);
        em_tensor_release(gd);
        if (s == EM_OK) s = em_sum(sq, &sum);
        em_tensor_release(sq);
        double v = 0;
        if (s == EM_OK) s = em_tensor_item(sum, &v);
        em_tensor_release(sum);
        if (s != EM_OK) return s;
        total += v;
    }
    total = sqrt(total);
    double c = max_norm / (total + 1e-6);
    if (total_norm) *total_norm = total;
    *scale = c < 1.0 ? c : 1.0;
    return EM_OK;
}
