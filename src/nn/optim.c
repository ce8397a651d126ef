/* optim.c — SGD (momentum, weight decay), Adam, AdamW; the step schedule; clipping by norm.
 * Updates are computed with untracked ops on the inner device (the parameter's detached value
 * and its gradient) and written back with em_tensor_assign_ (the parameter takes the new
 * value's buffer when nothing else holds either). Adam and AdamW run the backend's fused
 * adam_step kernel instead where it has one (one pass over the parameter, its gradient and
 * both moments, in place; src/ops/fused.h), with the scalars of the composed update, so that
 * both give the same f32 / f64 results. On the capture device an Adam / AdamW step is recorded
 * as one graph-only call whose step count is a tensor of the graph (stept[i], made with the
 * optimizer in the graph's setup), so that each replay takes the next step (src/wire/adam.c
 * computes its scalars with emi_adam_args_of, as the eager step does). */
#include <math.h>
#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/io.h"
#include "nn/nn_internal.h"
#include "ops/fused.h"

typedef enum nn_opt_kind { NN_SGD, NN_ADAM, NN_ADAMW } nn_opt_kind;

typedef struct nn_group {
    double lr, wd;
} nn_group;

struct em_optimizer {
    nn_opt_kind kind;
    double momentum, beta1, beta2, eps;
    size_t n, cap;
    em_tensor ***slots;
    char **names;         /* the parameters' names (owned) */
    size_t *gid;          /* each parameter's group */
    em_tensor **s1, **s2; /* momentum buffer / exp_avg; exp_avg_sq */
    int64_t *steps;       /* per parameter: the updates it received */
    em_tensor **stept;    /* 0-d i64 copies of steps, listed by em_optimizer_state */
    size_t ngroups, gcap;
    nn_group *groups;
};

#define NN_LR(o, i) ((o)->groups[(o)->gid[i]].lr)
#define NN_WD(o, i) ((o)->groups[(o)->gid[i]].wd)

static char *nn_strdup(const char *s) {
    size_t l = strlen(s) + 1;
    char *d = malloc(l);
    if (d) memcpy(d, s, l);
    return d;
}

static em_status nn_check_lr_wd(const char *fn, double lr, double wd) {
    if (!(lr >= 0) || !isfinite(lr))
        return em_backend_set_error(EM_ERR_ARG, "%s: lr must be >= 0, got %g", fn, lr);
    if (!(wd >= 0) || !isfinite(wd))
        return em_backend_set_error(EM_ERR_ARG, "%s: weight_decay must be >= 0, got %g", fn, wd);
    return EM_OK;
}

/* Grows every per-parameter array to hold cap entries (new entries zeroed). */
static bool nn_opt_reserve(em_optimizer *o, size_t cap) {
    if (cap <= o->cap) return true;
#define NN_GROW(field)                                                                       \
    do {                                                                                     \
        void *p_ = realloc(o->field, cap * sizeof *o->field);                                \
        if (!p_) return false;                                                               \
        o->field = p_;                                                                       \
        memset(o->field + o->cap, 0, (cap - o->cap) * sizeof *o->field);                     \
    } while (0)
    NN_GROW(slots);
    NN_GROW(names);
    NN_GROW(gid);
    NN_GROW(s1);
    NN_GROW(s2);
    NN_GROW(steps);
    NN_GROW(stept);
#undef NN_GROW
    o->cap = cap;
    return true;
}

/* Appends params as a new group (lr, wd checked by the caller). Nothing changes on failure. */
static em_status nn_opt_append(const char *fn, em_optimizer *o, const em_params *params,
                               double lr, double wd) {
    size_t k = em_params_count(params);
    for (size_t j = 0; j < k; j++) {
        const char *nm = em_params_name(params, j);
        em_tensor **sl = em_params_slot(params, j);
        for (size_t i = 0; i < o->n; i++) {
            if (strcmp(o->names[i], nm) == 0)
                return em_backend_set_error(EM_ERR_ARG, "%s: params: the name '%s' is already "
                                            "in the optimizer", fn, nm);
            if (o->slots[i] == sl)
                return em_backend_set_error(EM_ERR_ARG, "%s: params: '%s' is already in the "
                                            "optimizer (as '%s')", fn, nm, o->names[i]);
        }
    }
    if (o->ngroups == o->gcap) {
        size_t gc = o->gcap ? 2 * o->gcap : 2;
        nn_group *g = realloc(o->groups, gc * sizeof *g);
        if (!g) return em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
        o->groups = g;
        o->gcap = gc;
    }
    if (!nn_opt_reserve(o, o->n + k + 1))
        return em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
    for (size_t j = 0; j < k; j++) {
        o->names[o->n + j] = nn_strdup(em_params_name(params, j));
        if (!o->names[o->n + j]) {
            for (size_t q = 0; q < j; q++) {
                free(o->names[o->n + q]);
                o->names[o->n + q] = NULL;
            }
            return em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
        }
    }
    for (size_t j = 0; j < k; j++) {
        o->slots[o->n + j] = em_params_slot(params, j);
        o->gid[o->n + j] = o->ngroups;
    }
    o->groups[o->ngroups].lr = lr;
    o->groups[o->ngroups].wd = wd;
    o->ngroups++;
    o->n += k;
    return EM_OK;
}

static em_status nn_opt_new(const char *fn, nn_opt_kind kind, const em_params *params,
                            double lr, double wd, em_optimizer **out) {
    if (!params) return nn_null(fn, "params");
    if (!out) return nn_null(fn, "out");
    NN_TRY(nn_check_lr_wd(fn, lr, wd));
    em_optimizer *o = calloc(1, sizeof *o);
    if (!o) return em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
    o->kind = kind;
    em_status s = nn_opt_append(fn, o, params, lr, wd);
    if (s != EM_OK) {
        em_optimizer_release(o);
        return s;
    }
    *out = o;
    return EM_OK;
}

static em_status nn_adam_capture_state(em_optimizer *o, size_t i);

em_status em_optimizer_add_group(em_optimizer *opt, const em_params *params, double lr,
                                 double weight_decay) {
    static const char fn[] = "em_optimizer_add_group";
    if (!opt) return nn_null(fn, "opt");
    if (!params) return nn_null(fn, "params");
    NN_TRY(nn_check_lr_wd(fn, lr, weight_decay));
    size_t first = opt->n;
    NN_TRY(nn_opt_append(fn, opt, params, lr, weight_decay));
    for (size_t i = first; i < opt->n; i++) NN_TRY(nn_adam_capture_state(opt, i));
    return EM_OK;
}

size_t em_optimizer_group_count(const em_optimizer *opt) { return opt ? opt->ngroups : 0; }

em_status em_optimizer_set_group_lr(em_optimizer *opt, size_t group, double lr) {
    static const char fn[] = "em_optimizer_set_group_lr";
    if (!opt) return nn_null(fn, "opt");
    if (group >= opt->ngroups)
        return em_backend_set_error(EM_ERR_ARG, "%s: group %zu out of range (%zu groups)", fn,
                                    group, opt->ngroups);
    NN_TRY(nn_check_lr_wd(fn, lr, 0));
    opt->groups[group].lr = lr;
    return EM_OK;
}

double em_optimizer_group_lr(const em_optimizer *opt, size_t group) {
    return opt && group < opt->ngroups ? opt->groups[group].lr : 0.0;
}

double em_optimizer_group_weight_decay(const em_optimizer *opt, size_t group) {
    return opt && group < opt->ngroups ? opt->groups[group].wd : 0.0;
}

em_status em_optimizer_sgd(const em_params *params, double lr, double momentum,
                           double weight_decay, em_optimizer **out) {
    static const char fn[] = "em_optimizer_sgd";
    if (!(momentum >= 0) || !isfinite(momentum))
        return em_backend_set_error(EM_ERR_ARG, "%s: momentum must be >= 0, got %g", fn, momentum);
    em_optimizer *o = NULL;
    NN_TRY(nn_opt_new(fn, NN_SGD, params, lr, weight_decay, &o));
    o->momentum = momentum;
    /* On the capture device the momentum buffers are made now, in the graph's setup, so that
     * they are state that each run of the captured step carries to the next (made by the
     * first step, they would be made again, and zeroed, by every run). momentum * 0 + d is
     * the d that a first step takes. */
    for (size_t i = 0; i < o->n && momentum != 0; i++) {
        const em_tensor *p = *o->slots[i];
        if (!p || em_tensor_device(p).backend != EM_BACKEND_CAPTURE ||
            em_tensor_kind(p) == EM_KIND_QUANTIZED)
            continue;
        em_device d = em_tensor_device(p);
        d.autodiff = false;
        d.checkpointing = EM_CKPT_NONE;
        em_status s = em_zeros(em_tensor_shape(p), em_tensor_rank(p), em_tensor_dtype(p), d,
                               &o->s1[i]);
        if (s != EM_OK) {
            em_optimizer_release(o);
            return s;
        }
    }
    *out = o;
    return EM_OK;
}

/* The inner device of parameter i (untracked). */
static em_device nn_inner(const em_tensor *p) {
    em_device d = em_tensor_device(p);
    d.autodiff = false;
    d.checkpointing = EM_CKPT_NONE;
    return d;
}

/* Adam / AdamW on the capture device: the moments (zeros) and the step count (0-d i64, the
 * count as it stands) of parameter i are made now, in the graph's setup, so that they are
 * state that each run of the captured step carries to the next (made by the first step, they
 * would be made anew, and zeroed, by every run). A captured step reads its count from that
 * tensor at each run and advances it (src/wire/adam.c). Nothing for other devices. */
static em_status nn_adam_capture_state(em_optimizer *o, size_t i) {
    const em_tensor *p = *o->slots[i];
    if (o->kind == NN_SGD || !p || em_tensor_device(p).backend != EM_BACKEND_CAPTURE ||
        em_tensor_kind(p) == EM_KIND_QUANTIZED)
        return EM_OK;
    const em_device d = nn_inner(p);
    em_status s = EM_OK;
    for (int k = 0; k < 2 && s == EM_OK; k++) {
        em_tensor **m = k == 0 ? &o->s1[i] : &o->s2[i];
        if (!*m) s = em_zeros(em_tensor_shape(p), em_tensor_rank(p), em_tensor_dtype(p), d, m);
    }
    if (s == EM_OK && !o->stept[i])
        s = em_tensor_from_data(&o->steps[i], EM_I64, NULL, 0, d, &o->stept[i]);
    return s;
}

static em_status nn_adam(const char *fn, nn_opt_kind kind, const em_params *params, double lr,
                         double beta1, double beta2, double eps, double weight_decay,
                         em_optimizer **out) {
    if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
        return em_backend_set_error(EM_ERR_ARG, "%s: betas must be in [0, 1), got %g, %g", fn,
                                    beta1, beta2);
    if (!(eps >= 0) || !isfinite(eps))
        return em_backend_set_error(EM_ERR_ARG, "%s: eps must be >= 0, got %g", fn, eps);
    em_optimizer *o = NULL;
    NN_TRY(nn_opt_new(fn, kind, params, lr, weight_decay, &o));
    o->beta1 = beta1;
    o->beta2 = beta2;
    o->eps = eps;
    for (size_t i = 0; i < o->n; i++) {
        em_status s = nn_adam_capture_state(o, i);
        if (s != EM_OK) {
            em_optimizer_release(o);
            return s;
        }
    }
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
        em_tensor_release(opt->s1[i]);
        em_tensor_release(opt->s2[i]);
        em_tensor_release(opt->stept[i]);
        free(opt->names[i]);
    }
    free(opt->slots);
    free(opt->names);
    free(opt->gid);
    free(opt->s1);
    free(opt->s2);
    free(opt->steps);
    free(opt->stept);
    free(opt->groups);
    free(opt);
}

em_status em_optimizer_set_lr(em_optimizer *opt, double lr) {
    if (!opt) return nn_null("em_optimizer_set_lr", "opt");
    if (!(lr >= 0) || !isfinite(lr))
        return em_backend_set_error(EM_ERR_ARG, "em_optimizer_set_lr: lr must be >= 0, got %g",
                                    lr);
    for (size_t j = 0; j < opt->ngroups; j++) opt->groups[j].lr = lr;
    return EM_OK;
}

double em_optimizer_lr(const em_optimizer *opt) {
    return opt && opt->ngroups ? opt->groups[0].lr : 0.0;
}

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
    const double lr = NN_LR(o, i), wd = NN_WD(o, i);
    em_status s = EM_OK;
    em_tensor *d = g; /* the direction; owned */
    em_tensor_retain(d);
    if (wd != 0 && o->kind != NN_ADAMW) s = nn_axpby(&d, 1.0, p, wd);
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
        s = em_mul_scalar(d, lr, &step);
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
    em_tensor *den = NULL, *q = NULL, *base = NULL;
    /* step_size * s1 / (sqrt(s2) / sqrt(bc2) + eps), with step_size folded into the
     * denominator's two scalars (one pass less) when that is exact enough: the scalars of
     * the fused kernel (emi_adam_args_of), whose step_scale is 1 when folded */
    const em_adam_args a = emi_adam_args_of(o->kind == NN_ADAMW, lr, o->beta1, o->beta2, o->eps,
                                            wd, t, 1.0);
    const bool fold = a.step_scale == 1.0;
    s = em_sqrt(o->s2[i], &den);
    if (s == EM_OK) s = em_mul_scalar_(den, a.denom_scale, &q);
    den = NULL;
    if (s == EM_OK) s = em_add_scalar_(q, a.denom_eps, &den);
    q = NULL;
    if (s == EM_OK) s = em_div(o->s1[i], den, &q);
    em_tensor_release(den);
    den = NULL;
    if (s == EM_OK && o->kind == NN_ADAMW && wd != 0)
        s = em_mul_scalar(p, a.decay, &base);
    else if (s == EM_OK) {
        base = (em_tensor *)p;
        em_tensor_retain(base);
    }
    if (s == EM_OK && !fold) {
        s = em_mul_scalar_(q, a.step_scale, &den);
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
static em_adam_args nn_adam_args(const em_optimizer *o, size_t i, int64_t t, double grad_scale) {
    return emi_adam_args_of(o->kind == NN_ADAMW, NN_LR(o, i), o->beta1, o->beta2, o->eps,
                            NN_WD(o, i), t, grad_scale);
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
        em_adam_args a = nn_adam_args(o, i, o->steps[i] + 1, grad_scale);
        s = emi_adam_step(p, o->s1[i], o->s2[i], gr, &a);
        if (s == EM_OK) o->steps[i]++;
    }
    em_tensor_release(p);
    return s;
}

/* Adam / AdamW's step of parameter i on the capture device: one graph-only adam_step call
 * (src/ops/fused.h) that reads the step count from the graph's tensor stept[i] at each run,
 * so that every run takes the next step's bias correction, as the eager steps do. steps[i]
 * counts the step recorded (what one run leaves in the graph's count). */
static em_status nn_adam_captured(em_optimizer *o, size_t i, em_tensor *param, em_tensor *gr,
                                  double grad_scale) {
    em_tensor *p = NULL;
    em_status s = nn_adam_capture_state(o, i); /* made in the step, the recorder refuses it */
    if (s == EM_OK) s = em_tensor_detach(param, &p);
    const double h[6] = {NN_LR(o, i), o->beta1, o->beta2, o->eps, NN_WD(o, i), grad_scale};
    if (s == EM_OK)
        s = emi_adam_step_captured(p, o->s1[i], o->s2[i], gr, o->stept[i], o->kind == NN_ADAMW,
                                   h);
    if (s == EM_OK) o->steps[i]++;
    em_tensor_release(p);
    return s;
}

/* The state tensors the optimizer made (moments, step counts) are its own: none stays in an
 * open tensor scope (em_scope_begin), whichever call made or replaced them. */
static void nn_state_escape(em_optimizer *o) {
    if (!o || em_scope_depth() == 0) return;
    for (size_t i = 0; i < o->n; i++) {
        if (o->s1[i]) em_scope_escape(o->s1[i]);
        if (o->s2[i]) em_scope_escape(o->s2[i]);
        if (o->stept[i]) em_scope_escape(o->stept[i]);
    }
}

static em_status nn_optimizer_step(em_optimizer *opt, const em_grads *g, double grad_scale) {
    static const char fn[] = "em_optimizer_step";
    if (!opt) return nn_null(fn, "opt");
    if (!g) return nn_null(fn, "grads");
    if (!isfinite(grad_scale))
        return em_backend_set_error(EM_ERR_ARG, "%s: grad_scale must be finite, got %g", fn,
                                    grad_scale);
    for (size_t i = 0; i < opt->n; i++) {
        em_tensor *param = *opt->slots[i];
        /* a quantized parameter (em_params_quantize) is a constant: it has no gradient */
        if (!param || em_tensor_kind(param) == EM_KIND_QUANTIZED) continue;
        em_tensor *gr = NULL, *p = NULL, *np = NULL;
        em_status s = em_grads_get(g, param, &gr);
        if (s != EM_OK) return s;
        if (!gr) continue;
        if (opt->kind != NN_SGD && em_tensor_device(param).backend == EM_BACKEND_CAPTURE) {
            s = nn_adam_captured(opt, i, param, gr, grad_scale);
            em_tensor_release(gr);
            if (s != EM_OK) return s;
            continue;
        }
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
            if (s == EM_OK && opt->kind == NN_SGD) opt->steps[i]++; /* Adam counts its own */
        }
        em_tensor_release(np);
        em_tensor_release(gr);
        if (s != EM_OK) return s;
    }
    return EM_OK;
}

/* ---- state: listing, saving, loading ---- */

/* The state tensors a parameter has under this optimizer: "momentum_buffer" for SGD with
 * momentum, "exp_avg" and "exp_avg_sq" for Adam / AdamW. */
static size_t nn_state_kinds(const em_optimizer *o, const char **k) {
    if (o->kind == NN_SGD) {
        if (o->momentum == 0) return 0;
        k[0] = "momentum_buffer";
        return 1;
    }
    k[0] = "exp_avg";
    k[1] = "exp_avg_sq";
    return 2;
}

static em_tensor **nn_state_slot(em_optimizer *o, size_t i, size_t kind) {
    return kind == 0 ? &o->s1[i] : &o->s2[i];
}

/* Whether parameter i's step count is a captured graph's tensor (Adam on capture). */
static bool nn_graph_count(const em_optimizer *o, size_t i) {
    const em_tensor *p = *o->slots[i];
    return o->kind != NN_SGD && o->stept[i] && p &&
           em_tensor_device(p).backend == EM_BACKEND_CAPTURE;
}

static em_status nn_optimizer_state(em_optimizer *opt, em_params *out) {
    static const char fn[] = "em_optimizer_state";
    if (!opt) return nn_null(fn, "opt");
    if (!out) return nn_null(fn, "out");
    /* fresh step tensors first: a failure leaves out as it was */
    em_tensor **st = calloc(opt->n ? opt->n : 1, sizeof *st);
    if (!st) return em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
    em_status s = EM_OK;
    for (size_t i = 0; i < opt->n && s == EM_OK; i++) {
        em_tensor *p = *opt->slots[i];
        if (!p) {
            s = em_backend_set_error(EM_ERR_STATE, "%s: parameter '%s' has no tensor", fn,
                                     opt->names[i]);
            break;
        }
        /* Adam's count on the capture device is the graph's own tensor: listed as it is */
        if (nn_graph_count(opt, i)) continue;
        s = em_tensor_from_data(&opt->steps[i], EM_I64, NULL, 0, nn_inner(p), &st[i]);
    }
    if (s != EM_OK) {
        for (size_t i = 0; i < opt->n; i++) em_tensor_release(st[i]);
        free(st);
        return s;
    }
    for (size_t i = 0; i < opt->n; i++) {
        if (nn_graph_count(opt, i)) continue;
        em_tensor_release(opt->stept[i]);
        opt->stept[i] = st[i];
    }
    free(st);
    const char *kinds[2];
    size_t nk = nn_state_kinds(opt, kinds);
    for (size_t i = 0; i < opt->n && s == EM_OK; i++) {
        char name[512];
        snprintf(name, sizeof name, "%s.step", opt->names[i]);
        s = em_params_add(out, name, &opt->stept[i]);
        for (size_t k = 0; k < nk && s == EM_OK; k++) {
            em_tensor **sl = nn_state_slot(opt, i, k);
            if (!*sl) continue;
            snprintf(name, sizeof name, "%s.%s", opt->names[i], kinds[k]);
            s = em_params_add(out, name, sl);
        }
    }
    return s;
}

em_status em_optimizer_save(em_optimizer *opt, const char *path) {
    static const char fn[] = "em_optimizer_save";
    if (!opt) return nn_null(fn, "opt");
    if (!path) return nn_null(fn, "path");
    em_params *st = NULL;
    NN_TRY(em_params_create(&st));
    em_status s = em_optimizer_state(opt, st);
    if (s == EM_OK) s = em_params_save(st, path);
    em_params_release(st);
    return s;
}

/* src (from the file) checked against a shape and dtype; on success *out = a writable copy
 * on dev. */
static em_status nn_load_one(const char *fn, const char *path, const char *name,
                             const em_tensor *src, const int64_t *shape, int rank, em_dtype dt,
                             em_device dev, em_tensor **out) {
    bool same = em_tensor_rank(src) == rank &&
                (rank == 0 ||
                 memcmp(em_tensor_shape(src), shape, (size_t)rank * sizeof(int64_t)) == 0);
    if (!same)
        return em_backend_set_error(EM_ERR_SHAPE, "%s: '%s' in %s has another shape than the "
                                    "optimizer's", fn, name, path);
    if (em_tensor_dtype(src) != dt)
        return em_backend_set_error(EM_ERR_DTYPE, "%s: '%s' in %s is %s, the optimizer's is %s",
                                    fn, name, path, em_dtype_name(em_tensor_dtype(src)),
                                    em_dtype_name(dt));
    em_device sd = em_tensor_device(src);
    if (sd.backend != dev.backend || sd.index != dev.index) return em_to_device(src, dev, out);
    return em_clone(src, out); /* the file's tensors may be read-only mappings */
}

static em_status nn_optimizer_load(em_optimizer *opt, const char *path) {
    static const char fn[] = "em_optimizer_load";
    if (!opt) return nn_null(fn, "opt");
    if (!path) return nn_null(fn, "path");
    for (size_t i = 0; i < opt->n; i++)
        if (!*opt->slots[i])
            return em_backend_set_error(EM_ERR_STATE, "%s: parameter '%s' has no tensor", fn,
                                        opt->names[i]);
    em_device dev = opt->n ? nn_inner(*opt->slots[0]) : em_device_default();
    dev.autodiff = false;
    dev.checkpointing = EM_CKPT_NONE;
    /* a capture tensor has no values to read the step counts from: the file is read on ref,
     * and its tensors recorded onto the capture device (nn_load_one: em_to_device) */
    if (dev.backend == EM_BACKEND_CAPTURE) dev = (em_device){.backend = EM_BACKEND_REF};
    em_tensor_map *map = NULL;
    NN_TRY(em_safetensors_load(path, dev, &map));
    const char *kinds[2];
    size_t nk = nn_state_kinds(opt, kinds);
    size_t n = opt->n, found = 0;
    int64_t *steps = calloc(n ? n : 1, sizeof *steps);
    em_tensor **ns = calloc(2 * (n ? n : 1), sizeof *ns); /* new s1 at 2i, s2 at 2i + 1 */
    em_status s = steps && ns ? EM_OK : em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory",
                                                             fn);
    for (size_t i = 0; i < n && s == EM_OK; i++) {
        const em_tensor *p = *opt->slots[i];
        char name[512];
        em_tensor *src = NULL, *t = NULL;
        snprintf(name, sizeof name, "%s.step", opt->names[i]);
        if (em_tensor_map_get(map, name, &src) != EM_OK) {
            s = em_backend_set_error(EM_ERR_IO, "%s: %s has no tensor '%s'", fn, path, name);
            break;
        }
        found++;
        s = nn_load_one(fn, path, name, src, NULL, 0, EM_I64,
                        nn_inner(p).backend == EM_BACKEND_CAPTURE ? dev : nn_inner(p), &t);
        if (s == EM_OK) s = em_tensor_to_data(t, &steps[i], sizeof steps[i]);
        em_tensor_release(t);
        em_tensor_release(src);
        if (s == EM_OK && steps[i] < 0)
            s = em_backend_set_error(EM_ERR_IO, "%s: '%s' in %s is negative", fn, name, path);
        for (size_t k = 0; k < nk && s == EM_OK; k++) {
            snprintf(name, sizeof name, "%s.%s", opt->names[i], kinds[k]);
            src = NULL;
            if (em_tensor_map_get(map, name, &src) != EM_OK) {
                if (steps[i] > 0)
                    s = em_backend_set_error(EM_ERR_IO, "%s: %s has no tensor '%s' (step %lld)",
                                             fn, path, name, (long long)steps[i]);
                continue; /* not created yet */
            }
            found++;
            s = nn_load_one(fn, path, name, src, em_tensor_shape(p), em_tensor_rank(p),
                            em_tensor_dtype(p), nn_inner(p), &ns[2 * i + k]);
            em_tensor_release(src);
        }
    }
    if (s == EM_OK && found != em_tensor_map_size(map))
        s = em_backend_set_error(EM_ERR_IO, "%s: %s holds %zu tensors, the optimizer's state "
                                 "%zu (a tensor of another name)", fn, path,
                                 em_tensor_map_size(map), found);
    /* Adam on the capture device: the graph's step counts start at the loaded ones */
    em_tensor **nc = s == EM_OK ? calloc(n ? n : 1, sizeof *nc) : NULL;
    if (s == EM_OK && !nc) s = em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
    for (size_t i = 0; i < n && s == EM_OK; i++)
        if (nn_graph_count(opt, i))
            s = em_tensor_from_data(&steps[i], EM_I64, NULL, 0, nn_inner(*opt->slots[i]),
                                    &nc[i]);
    if (s == EM_OK)
        for (size_t i = 0; i < n; i++) {
            if (nc[i]) {
                em_tensor_release(opt->stept[i]);
                opt->stept[i] = nc[i];
                nc[i] = NULL;
            }
            opt->steps[i] = steps[i];
            em_tensor_release(opt->s1[i]);
            em_tensor_release(opt->s2[i]);
            opt->s1[i] = ns[2 * i];
            opt->s2[i] = ns[2 * i + 1];
            ns[2 * i] = ns[2 * i + 1] = NULL;
        }
    for (size_t i = 0; ns && i < 2 * n; i++) em_tensor_release(ns[i]);
    for (size_t i = 0; nc && i < n; i++) em_tensor_release(nc[i]);
    free(nc);
    free(ns);
    free(steps);
    em_tensor_map_release(map);
    return s;
}

double em_lr_step(double base_lr, int epoch, int step_size, double gamma) {
    if (step_size < 1 || epoch < 0) return base_lr;
    return base_lr * pow(gamma, (double)(epoch / step_size));
}

double em_lr_linear(double base_lr, int step, double start_factor, double end_factor,
                    int total_iters) {
    if (step < 0 || total_iters < 1 || !(start_factor > 0 && start_factor <= 1) ||
        !(end_factor >= 0 && end_factor <= 1))
        return NAN;
    int t = step < total_iters ? step : total_iters;
    return base_lr * (start_factor + (end_factor - start_factor) * t / (double)total_iters);
}

double em_lr_cosine(double base_lr, int step, int t_max, double eta_min) {
    if (step < 0 || t_max < 1 || !isfinite(eta_min)) return NAN;
    return eta_min + (base_lr - eta_min) * (1 + cos(M_PI * step / (double)t_max)) / 2;
}

/* torch's _annealing_cos */
static double nn_anneal_cos(double start, double end, double pct) {
    return end + (start - end) / 2.0 * (cos(M_PI * pct) + 1);
}

double em_lr_one_cycle(double max_lr, int step, int total_steps, double pct_start,
                       double div_factor, double final_div_factor) {
    if (step < 0 || total_steps < 1 || step > total_steps || !(pct_start >= 0 && pct_start <= 1) ||
        !(div_factor > 0) || !(final_div_factor > 0))
        return NAN;
    double initial = max_lr / div_factor, min_lr = initial / final_div_factor;
    double end1 = (double)(pct_start * total_steps) - 1, end2 = (double)total_steps - 1;
    if ((double)step <= end1) return nn_anneal_cos(initial, max_lr, step / end1);
    return nn_anneal_cos(max_lr, min_lr, (step - end1) / (end2 - end1));
}

double em_momentum_one_cycle(int step, int total_steps, double pct_start, double base_momentum,
                             double max_momentum) {
    if (step < 0 || total_steps < 1 || step > total_steps || !(pct_start >= 0 && pct_start <= 1) ||
        !(base_momentum >= 0 && base_momentum <= 1) || !(max_momentum >= 0 && max_momentum <= 1))
        return NAN;
    double end1 = (double)(pct_start * total_steps) - 1, end2 = (double)total_steps - 1;
    if ((double)step <= end1) return nn_anneal_cos(max_momentum, base_momentum, step / end1);
    return nn_anneal_cos(base_momentum, max_momentum, (step - end1) / (end2 - end1));
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

em_status em_optimizer_step(em_optimizer *opt, const em_grads *g, double grad_scale) {
    em_status s = nn_optimizer_step(opt, g, grad_scale);
    nn_state_escape(opt);
    return s;
}

em_status em_optimizer_state(em_optimizer *opt, em_params *out) {
    em_status s = nn_optimizer_state(opt, out);
    nn_state_escape(opt);
    return s;
}

em_status em_optimizer_load(em_optimizer *opt, const char *path) {
    em_status s = nn_optimizer_load(opt, path);
    nn_state_escape(opt);
    return s;
}
