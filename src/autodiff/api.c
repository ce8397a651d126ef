/* api.c — the public autodiff calls on tensors. */
#include <limits.h>

#include "autodiff/tape_impl.h"

static _Thread_local bool emi_no_grad; /* false: recording, the default of every thread */

bool em_set_grad_enabled(bool enabled) {
    bool was = !emi_no_grad;
    emi_no_grad = !enabled;
    return was;
}

bool em_is_grad_enabled(void) { return !emi_no_grad; }

em_status em_tensor_require_grad(em_tensor *t) {
    static const char fn[] = "em_tensor_require_grad";
    EMI_TRY(emi_check_tensor(fn, "t", t));
    /* made in a no-grad scope: a leaf from now on */
    if (!t->ad && t->dev.autodiff && emi_kind(t->dtype) == EM_KIND_FLOAT) {
        em_device dev = t->dev;
        bool was = em_set_grad_enabled(true);
        em_status s = emi_ad_created(t, dev);
        em_set_grad_enabled(was);
        EMI_TRY(s);
    }
    if (!t->ad)
        return emi_fail(EM_ERR_STATE, "%s: the tensor is not tracked (create a float tensor on "
                        "an autodiff device, e.g. ref+autodiff)", fn);
    if (t->ad->rule)
        return emi_fail(EM_ERR_STATE, "%s: the tensor is the result of '%s', not a leaf", fn,
                        t->ad->rule->name);
    t->ad->requires_grad = true;
    return EM_OK;
}

bool em_tensor_requires_grad(const em_tensor *t) {
    return t && t->ad && !t->ad->rule && t->ad->requires_grad;
}

bool em_tensor_is_tracked(const em_tensor *t) { return t && t->ad; }

em_status em_tensor_detach(const em_tensor *t, em_tensor **out) {
    static const char fn[] = "em_tensor_detach";
    EMI_TRY(emi_check_tensor(fn, "t", t));
    EMI_TRY(emi_check_out(fn, out));
    return emi_ad_untracked_view(t, out);
}


/* ---- checkpoint regions ---- */

static _Thread_local int emi_region_depth;    /* regions open on this thread (they nest) */
static _Thread_local uint64_t emi_region_id;  /* the outermost open one's, 0: none */
static _Thread_local uint64_t emi_region_last; /* the last number given */

uint64_t emi_ad_region(void) { return emi_region_depth > 0 ? emi_region_id : 0; }

em_status em_checkpoint_begin(void) {
    if (emi_region_depth == INT_MAX)
        return emi_fail(EM_ERR_STATE, "em_checkpoint_begin: %d checkpoint regions are already "
                        "open on this thread", INT_MAX);
    /* a new outermost region is a new one: what it reads from an earlier one is its input */
    if (emi_region_depth++ == 0) emi_region_id = ++emi_region_last;
    return EM_OK;
}

em_status em_checkpoint_end(void) {
    if (emi_region_depth == 0)
        return emi_fail(EM_ERR_STATE, "em_checkpoint_end: no checkpoint region is open on this "
                        "thread (every em_checkpoint_begin was already ended)");
    emi_region_depth--;
    return EM_OK;
}

em_status em_checkpoint_run(em_status (*fn)(void *ctx), void *ctx) {
    if (!fn) return emi_fail(EM_ERR_ARG, "em_checkpoint_run: fn is NULL");
    EMI_TRY(em_checkpoint_begin());
    em_status s = fn(ctx);
    /* the region ends on every path; fn's error (and its message) wins */
    em_status e = em_checkpoint_end();
    return s != EM_OK ? s : e;
}
