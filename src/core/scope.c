/* scope.c — tensor scopes (em_scope_begin / em_scope_end): every handle that a public call
 * gives the user while a scope is open on this thread is released when the scope ends, unless
 * it was kept (em_scope_keep) or taken by an owner (em_scope_escape).
 *
 * How a handle joins a scope. A new handle is registered where it is made: emi_empty and
 * emi_view_tensor (src/core/tensor.c), the two places every tensor handle comes from, push it
 * on this thread's stack of entries when a scope is open, and the handle remembers its entry
 * (em_tensor.scope_ix). The last release of a handle clears its entry, so that a handle the
 * user (or an op, for its temporaries) released inside the scope is never released again,
 * whatever later allocation reuses its memory. What survives a public call without being
 * given to the user is made by an owner that takes it out of the scope where it stores it:
 *   - the autodiff tape's saved values (emi_ad_end's views) leave the scope as they are saved;
 *   - em_backward and em_grads_add register nothing (emi_scope_suspend around them): the
 *     gradients that em_grads holds are its own, and em_grads_get gives the user a handle of
 *     its own (emi_share);
 *   - src/nn, which is written on the public API like a user's code, calls em_scope_escape
 *     where it stores a tensor: a module's parameters and buffers (em_module_add_param /
 *     _add_buffer / _set), an optimizer's state after each em_optimizer_step and load, a
 *     loaded tensor map's entries.
 * This was chosen over an API-depth counter at every public entry point (hundreds of them,
 * and a user's module forward, called from em_module_forward, would then register nothing) and
 * over registering only at depth 0 (the tape saves views inside every op): the stores of
 * long-lived handles are a few funnels, found by looking for every field that holds a tensor.
 * A public call that used to return its input retained (em_cast to the same dtype, dropout
 * with p = 0, an Identity module, em_to_device to the same device) returns, inside a scope, a
 * new handle of the same tensor (emi_share), so that the reference the user got is one the
 * scope can release; outside a scope it is the input retained, as before.
 *
 * One stack of entries serves every nesting level: scope k owns entries [mark[k], n). An
 * entry is a handle, with its low bit set once kept. Trailing cleared entries are reused by
 * the next registration, so that a loop that releases each result before the next stays
 * small. Entries are this thread's: a handle registered in an open scope must have its last
 * release on this thread (or be kept or escaped first). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/internal.h"

#if defined(__GNUC__) && defined(__ELF__)
#define EMI_TLS_IE __attribute__((tls_model("initial-exec")))
#else
#define EMI_TLS_IE
#endif

_Thread_local int emi_scope_on EMI_TLS_IE;

typedef struct emi_scope_state {
    uintptr_t *e;       /* entries: a handle, | 1 when kept; 0 when cleared */
    uint32_t n, cap;    /* entries in use, allocated */
    uint32_t *mark;     /* mark[k]: the first entry of scope k */
    uint32_t lo;        /* mark[depth - 1]: the innermost scope's first entry (0: none) */
    int depth, capmark; /* open scopes */
    int suspend;        /* > 0: nothing registers (emi_scope_suspend) */
    bool registered;    /* the thread-exit hook is set */
} emi_scope_state;

/* initial-exec, as the block cache (tensor.c): every op in a scope touches this state twice,
 * and the default TLS model of a shared library makes each touch a __tls_get_addr call. */
static _Thread_local emi_scope_state emi_sc EMI_TLS_IE;
static pthread_key_t emi_scope_key;
static pthread_once_t emi_scope_once = PTHREAD_ONCE_INIT;

static inline void emi_scope_update(emi_scope_state *s) {
    emi_scope_on = s->depth > 0 && s->suspend == 0;
}

/* A scope left open when its thread exits is ended there: its tensors are released (so that
 * nothing leaks), then the thread's block cache, which may have been drained already, is
 * drained again. The main thread's scopes are not ended at exit(): LeakSanitizer reports
 * their tensors, as it would any unreleased ones. */
static void emi_scope_thread_exit(void *unused) {
    (void)unused;
    emi_scope_state *s = &emi_sc;
    bool any = s->depth > 0;
    while (s->depth > 0) em_scope_end();
    free(s->e);
    free(s->mark);
    s->e = NULL;
    s->mark = NULL;
    s->n = s->cap = 0;
    s->capmark = 0;
    if (any) emi_tensor_cache_drain();
}

static void emi_scope_key_init(void) { pthread_key_create(&emi_scope_key, emi_scope_thread_exit); }

em_status em_scope_begin(void) {
    emi_scope_state *s = &emi_sc;
    if (s->depth >= EM_SCOPE_MAX_DEPTH)
        return emi_fail(EM_ERR_STATE, "em_scope_begin: %d scopes are open on this thread (at "
                        "most %d): is an em_scope_end missing?", s->depth, EM_SCOPE_MAX_DEPTH);
    if (s->depth == s->capmark) {
        int cap = s->capmark ? 2 * s->capmark : 16;
        uint32_t *m = realloc(s->mark, (size_t)cap * sizeof *m);
        if (!m) return emi_fail(EM_ERR_NOMEM, "em_scope_begin: out of memory");
        s->mark = m;
        s->capmark = cap;
    }
    if (!s->registered) {
        pthread_once(&emi_scope_once, emi_scope_key_init);
        pthread_setspecific(emi_scope_key, s);
        s->registered = true;
    }
    s->mark[s->depth++] = s->n;
    s->lo = s->n;
    emi_scope_update(s);
    return EM_OK;
}

int em_scope_depth(void) { return emi_sc.depth; }

/* Out of memory for an entry: the handle is left unregistered (the caller's to release, as
 * outside a scope) and the scope's end reports EM_ERR_NOMEM. */
static _Thread_local bool emi_scope_nomem;

static __attribute__((noinline)) bool emi_scope_grow(emi_scope_state *s) {
    if (s->cap >= UINT32_MAX / 2) return false;
    uint32_t cap = s->cap ? 2 * s->cap : 256;
    uintptr_t *e = realloc(s->e, (size_t)cap * sizeof *e);
    if (!e) return false;
    s->e = e;
    s->cap = cap;
    return true;
}

void emi_scope_register(em_tensor *t) {
    emi_scope_state *s = &emi_sc;
    uint32_t n = s->n;
    while (n > s->lo && s->e[n - 1] == 0) n--;
    if (__builtin_expect(n == s->cap, 0) && !emi_scope_grow(s)) {
        s->n = n;
        emi_scope_nomem = true;
        return;
    }
    s->e[n] = (uintptr_t)t;
    s->n = n + 1;
    t->scope_ix = n + 1;
}

void emi_scope_adopt(em_tensor *t) {
    emi_scope_state *s = &emi_sc;
    if (s->depth == 0) return;
    if (t->scope_ix && t->scope_ix - 1 >= s->mark[s->depth - 1]) return; /* innermost already */
    emi_scope_forget(t);
    emi_scope_register(t);
}

void emi_scope_forget(em_tensor *t) {
    uint32_t ix = t->scope_ix;
    if (!ix) return;
    emi_scope_state *s = &emi_sc;
    t->scope_ix = 0;
    if (ix > s->n || (s->e[ix - 1] & ~(uintptr_t)1) != (uintptr_t)t) return;
    /* the innermost scope's last entry (a loop that releases each result): popped */
    s->e[ix - 1] = 0;
    if (ix == s->n && ix > s->lo) s->n = ix - 1;
}

em_status em_scope_end(void) {
    emi_scope_state *s = &emi_sc;
    if (s->depth == 0)
        return emi_fail(EM_ERR_STATE, "em_scope_end: no scope is open on this thread");
    uint32_t lo = s->mark[s->depth - 1];
    /* nothing registers while the scope's handles go (a release allocates nothing, but a
     * backend's free hook might call back in) */
    s->suspend++;
    emi_scope_update(s);
    uint32_t nkept = 0, top = s->n;
    for (uint32_t i = top; i-- > lo;) {
        uintptr_t v = s->e[i];
        if (!v) continue;
        em_tensor *t = (em_tensor *)(v & ~(uintptr_t)1);
        if (v & 1) {
            /* kept: gathered at the bottom of the range, in their order, below */
            nkept++;
            continue;
        }
        s->e[i] = 0;
        t->scope_ix = 0;
        em_tensor_release(t);
    }
    /* The kept ones move to the enclosing scope (their entries slide down to lo), or, from
     * the outermost scope, become the caller's. */
    uint32_t w = lo;
    if (nkept) {
        for (uint32_t i = lo; i < top; i++) {
            uintptr_t v = s->e[i];
            if (!v) continue;
            em_tensor *t = (em_tensor *)(v & ~(uintptr_t)1);
            s->e[i] = 0;
            if (s->depth > 1) {
                s->e[w] = (uintptr_t)t;
                t->scope_ix = ++w;
            } else {
                t->scope_ix = 0;
            }
        }
    }
    s->n = w;
    s->depth--;
    s->lo = s->depth ? s->mark[s->depth - 1] : 0;
    s->suspend--;
    emi_scope_update(s);
    if (s->depth == 0 && s->cap > 4096) { /* a long scope's stack is not kept for ever */
        free(s->e);
        s->e = NULL;
        s->n = s->cap = 0;
    }
    if (emi_scope_nomem) {
        emi_scope_nomem = false;
        return emi_fail(EM_ERR_NOMEM, "em_scope_end: out of memory registering a tensor in "
                        "the scope; it was left for its caller to release");
    }
    return EM_OK;
}

em_status em_scope_keep(em_tensor *t) {
    static const char fn[] = "em_scope_keep";
    EMI_TRY(emi_check_tensor(fn, "t", t));
    emi_scope_state *s = &emi_sc;
    uint32_t ix = t->scope_ix;
    /* not in a scope (made before it, or already kept from the outermost one), or in an
     * enclosing scope: it survives the innermost already */
    if (!ix || s->depth == 0 || ix - 1 < s->mark[s->depth - 1]) return EM_OK;
    s->e[ix - 1] |= 1;
    return EM_OK;
}

em_status em_scope_escape(em_tensor *t) {
    EMI_TRY(emi_check_tensor("em_scope_escape", "t", t));
    emi_scope_forget(t);
    return EM_OK;
}

em_status em_scope_run(em_status (*fn)(void *user), void *user) {
    if (!fn) return emi_fail(EM_ERR_ARG, "em_scope_run: fn is NULL");
    EMI_TRY(em_scope_begin());
    int depth = emi_sc.depth;
    em_status s = fn(user);
    if (emi_sc.depth != depth) {
        /* fn left scopes open (or closed ours): close down to ours, then report it */
        while (emi_sc.depth > depth) em_scope_end();
        if (emi_sc.depth == depth) em_scope_end();
        return emi_fail(EM_ERR_STATE, "em_scope_run: fn left its scopes unbalanced (begin "
                        "without end, or an end too many)");
    }
    if (s != EM_OK) {
        /* keep fn's message: the scope's end cannot fail here but for NOMEM */
        em_scope_end();
        return s;
    }
    return em_scope_end();
}

int emi_scope_suspend(void) {
    emi_scope_state *s = &emi_sc;
    s->suspend++;
    emi_scope_update(s);
    return s->suspend;
}

void emi_scope_resume(void) {
    emi_scope_state *s = &emi_sc;
    if (s->suspend > 0) s->suspend--;
    emi_scope_update(s);
}

em_status emi_share(const em_tensor *t, em_tensor **out) {
    if (!emi_scope_on) {
        em_tensor_retain((em_tensor *)t);
        *out = (em_tensor *)t;
        return EM_OK;
    }
    em_tensor *v;
    EMI_TRY(emi_view_tensor(t, t->v.shape, t->v.strides, t->v.rank, t->v.offset, &v));
    if (t->ad) {
        /* the same value of the graph: one more reference to its node */
        emi_ad_share(v, t);
    }
    *out = v;
    return EM_OK;
}

em_status em_tensor_alias(const em_tensor *t, em_tensor **out) {
    static const char fn[] = "em_tensor_alias";
    EMI_TRY(emi_check_tensor(fn, "t", t));
    EMI_TRY(emi_check_out(fn, out));
    return emi_share(t, out);
}
