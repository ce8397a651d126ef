/* tape.c — recording: the strategy rules at an op's start, nodes at its end, leaves at
 * creation, and the lifetime of nodes. */
#include <stdlib.h>
#include <string.h>

#include "autodiff/rules/rules.h"
#include "autodiff/tape_impl.h"

static const char *emi_ckpt_name(em_checkpointing c) {
    switch (c) {
    case EM_CKPT_NONE: return "none";
    case EM_CKPT_DISABLED: return "disabled";
    case EM_CKPT_BALANCED: return "balanced";
    }
    return "?";
}

em_status emi_ad_begin(const char *fn, const em_tensor *const *ins, int n, emi_ad_op *op) {
    const em_tensor *tracked = NULL, *first = NULL, *on_ad = NULL, *marked = NULL;
    const bool recording = em_is_grad_enabled();
    for (int i = 0; i < n; i++) {
        const em_tensor *t = ins[i];
        if (!t) continue;
        if (!first) first = t;
        if (!on_ad && t->dev.autodiff) on_ad = t;
        if (!marked && t->ckpt != EM_CKPT_NONE) marked = t;
        if (!t->ad || !recording) continue;
        if (!tracked) tracked = t;
        else if (t->ckpt != tracked->ckpt)
            return emi_fail(EM_ERR_STATE,
                            "%s: tensors use different checkpointing strategies: %s and %s", fn,
                            emi_ckpt_name(tracked->ckpt), emi_ckpt_name(t->ckpt));
    }
    op->tracked = tracked != NULL;
    if (tracked) {
        op->strategy = tracked->ckpt;
        op->dev = tracked->dev;
        op->dev.autodiff = true;
        op->dev.checkpointing = tracked->ckpt;
    } else if (on_ad) {
        op->dev = on_ad->dev;
        op->strategy = on_ad->dev.checkpointing;
    } else {
        op->dev = first ? first->dev : em_device_default();
        op->strategy = marked ? marked->ckpt : EM_CKPT_NONE;
    }
    return EM_OK;
}

bool emi_ad_in_graph(const em_tensor *t, const char **what) {
    if (!t->ad) return false;
    if (t->ad->rule) {
        *what = t->ad->rule->name;
        return true;
    }
    *what = "a leaf that requires grad";
    return t->ad->requires_grad;
}

em_status emi_ad_untracked_view(const em_tensor *t, em_tensor **out) {
    em_tensor *v;
    EMI_TRY(emi_view_tensor(t, t->v.shape, t->v.strides, t->v.rank, t->v.offset, &v));
    v->ad = NULL;
    /* every saved value (int and bool ones too) is a plain tensor of the inner device, so
     * that what backward computes from it is never recorded */
    v->dev.autodiff = false;
    v->dev.checkpointing = EM_CKPT_NONE;
    *out = v;
    return EM_OK;
}

/* A new node with room for n inputs, describing output t. */
static emi_ad_node *emi_node_new(const emi_ad_rule *rule, em_checkpointing strategy,
                                 const em_tensor *t, int n) {
    emi_ad_node *node = calloc(1, sizeof *node + (size_t)n * sizeof(emi_ad_input));
    if (!node) return NULL;
    atomic_init(&node->refs, 1);
    node->rule = rule;
    node->strategy = strategy;
    node->dev = t->dev;
    node->dtype = t->dtype;
    node->rank = t->v.rank;
    memcpy(node->shape, t->v.shape, sizeof(int64_t) * (size_t)t->v.rank);
    node->nin = n;
    return node;
}

em_status emi_ad_created(em_tensor *t, em_device dev) {
    if (!dev.autodiff) return EM_OK;
    t->dev = dev;
    t->ckpt = dev.checkpointing;
    /* a no-grad scope records no leaf either */
    if (emi_kind(t->dtype) != EM_KIND_FLOAT || !em_is_grad_enabled()) return EM_OK;
    emi_ad_node *leaf = emi_node_new(NULL, dev.checkpointing, t, 0);
    if (!leaf) return emi_fail(EM_ERR_NOMEM, "out of memory recording a leaf");
    t->ad = leaf;
    return EM_OK;
}

/* Saves an untracked view of t into *slot: the tape's own, never a scope's. */
static em_status emi_save(const em_tensor *t, em_tensor **slot) {
    if (*slot) return EM_OK;
    EMI_TRY(emi_ad_untracked_view(t, slot));
    emi_scope_forget(*slot);
    return EM_OK;
}

void emi_ad_share(em_tensor *v, const em_tensor *t) {
    v->ad = t->ad;
    if (v->ad) atomic_fetch_add_explicit(&v->ad->refs, 1, memory_order_relaxed);
}

/* A node recorded in a checkpoint region that has a forward can always be recomputed: what
 * it reads from outside the region was saved or claimed when it was recorded (emi_ad_end),
 * and what it reads from inside is recomputable in turn. */
static bool emi_region_recomputable(const emi_ad_node *p) {
    return p && p->region != 0 && p->rule && p->rule->forward;
}

/* The bytes of a value of the given dtype and shape. */
static size_t emi_value_bytes(em_dtype dt, int rank, const int64_t *shape) {
    size_t n = em_dtype_size(dt);
    for (int d = 0; d < rank; d++) n *= (size_t)shape[d];
    return n;
}

/* BALANCED recomputes a product whose output is larger than its inputs together and cheap
 * to make again, at most EMI_REDO_FLOPS_PER_BYTE FLOPs for each byte it would hold beyond
 * them (attention scores q @ k^T, [T, T] from two [T, d], where d is small beside T: heads
 * of 32 on 128 positions, not of 64), instead of keeping it: its own rule reads those inputs, so they are held (or
 * recomputable) anyway, and recomputing costs one product in backward and no memory. Wider
 * products (a Linear from C to 4C: 2C FLOPs an element) and convolutions keep their
 * output. */
#define EMI_REDO_FLOPS_PER_BYTE 64
static bool emi_expanding(const emi_ad_node *p) {
    if (p->rule != &emi_rule_matmul || p->strategy != EM_CKPT_BALANCED || p->nin != 2 ||
        p->in[0].rank < 1 || p->in[1].rank < 1)
        return false;
    const size_t in = emi_value_bytes(p->in[0].dtype, p->in[0].rank, p->in[0].shape) +
                      emi_value_bytes(p->in[1].dtype, p->in[1].rank, p->in[1].shape);
    const size_t out = emi_value_bytes(p->dtype, p->rank, p->shape);
    if (out <= in) return false;
    /* 2k FLOPs an output element, k the contracted extent (a's last dim) */
    const double k = (double)p->in[0].shape[p->in[0].rank - 1];
    const double flops = 2.0 * k * (double)(out / em_dtype_size(p->dtype));
    return flops <= (double)EMI_REDO_FLOPS_PER_BYTE * (double)(out - in);
}

/* BALANCED: says that a backward rule will read node p's value. True when the value will be
 * there: kept, or recomputable by p's forward from values that will be there (those are then
 * claimed too, so that a kept one is not dropped). False when the caller must save the value
 * itself: p's forward is NULL, or the recompute would need a kept output already dropped. */
static bool emi_claim(emi_ad_node *p) {
    if (p->claimed || emi_region_recomputable(p)) return true;
    const bool redo = emi_expanding(p);
    if (p->value && !redo) {
        p->claimed = true;
        return true;
    }
    bool ok = p->rule && p->rule->forward && (!p->rule->compute_bound || redo) && !p->dropped;
    for (int i = 0; ok && i < p->nin; i++) {
        const emi_ad_input *in = &p->in[i];
        if (in->rank < 0 || in->value) continue;
        ok = in->node && emi_claim(in->node);
    }
    if (!ok && !p->value) return false;
    p->claimed = true;
    p->recompute = ok && p->rule->compute_bound; /* else kept after all */
    return true;
}

/* The bytes of t's storage. */
static size_t emi_bytes_of(const em_tensor *t) { return t->st ? t->st->bytes : 0; }

/* Bytes that p holds only to recompute its output t: saved outputs of other ops that p's own
 * rule does not read (views of leaves and constants cost nothing: their owners hold them). */
static size_t emi_recompute_only_bytes(const emi_ad_node *p, const em_tensor *t) {
    size_t b = 0;
    for (int i = 0; i < p->nin; i++) {
        const emi_ad_input *in = &p->in[i];
        if (in->value && in->node && in->node->rule && !emi_rule_reads_in(p->rule, i) &&
            in->value->st != t->st)
            b += emi_bytes_of(in->value);
    }
    return b;
}

/* emi_claim for the value t (a handle of p's output) that an op being recorded needs, with
 * the choice of the cheaper way to have it: when recomputing t would keep at least t's bytes
 * of values that p saved for nothing else, false, so that the caller saves t itself (p then
 * lets those go when its last handle does, emi_ad_release). */
static bool emi_claim_input(emi_ad_node *p, const em_tensor *t) {
    if (emi_region_recomputable(p)) return true; /* what it saved, the region needs anyway */
    if (!p->claimed && !p->value && p->rule && p->rule->forward && !p->rule->compute_bound &&
        !p->dropped) {
        size_t cost = emi_recompute_only_bytes(p, t);
        if (cost > 0 && cost >= emi_bytes_of(t)) return false;
    }
    return emi_claim(p);
}

/* Lets go of the outputs of other ops that a memory-bound node saved only to recompute its
 * own (views of leaves and constants stay: they cost nothing while their owners live, and
 * keep the node recomputable when it saved nothing else). */
static void emi_drop_recompute_inputs(emi_ad_node *n) {
    for (int i = 0; i < n->nin; i++) {
        emi_ad_input *in = &n->in[i];
        if (!in->value || !in->node || !in->node->rule || emi_rule_reads_in(n->rule, i))
            continue;
        em_tensor_release(in->value);
        in->value = NULL;
        n->dropped = true;
    }
}

em_status emi_ad_end(const emi_ad_op *op, const emi_ad_rule *rule, const em_tensor *const *ins,
                     int n, em_tensor *out, const void *params, size_t psize) {
    out->dev = op->dev;
    bool isfloat = emi_kind(out->dtype) == EM_KIND_FLOAT;
    if (!isfloat || (!op->tracked && !op->dev.autodiff)) {
        out->ckpt = op->dev.autodiff ? op->dev.checkpointing : op->strategy;
        return EM_OK;
    }
    if (!op->tracked) return emi_ad_created(out, op->dev); /* a constant of the graph */
    if (!rule) rule = &emi_rule_no_grad;
    if (psize > EMI_AD_PARAMS)
        return emi_fail(EM_ERR_STATE, "%s: %zu bytes of parameters to record (at most %d)",
                        rule->name, psize, EMI_AD_PARAMS);
    emi_ad_node *node = emi_node_new(rule, op->strategy, out, n);
    if (!node) return emi_fail(EM_ERR_NOMEM, "%s: out of memory recording the op", rule->name);
    if (psize) memcpy(node->params, params, psize);
    node->psize = psize;
    bool balanced = op->strategy == EM_CKPT_BALANCED;
    node->region = emi_ad_region();
    em_status s = EM_OK;
    for (int i = 0; i < n && s == EM_OK; i++) {
        const em_tensor *t = ins[i];
        emi_ad_input *in = &node->in[i];
        if (!t) {
            in->rank = -1;
            continue;
        }
        in->dtype = t->dtype;
        in->rank = t->v.rank;
        memcpy(in->shape, t->v.shape, sizeof(int64_t) * (size_t)t->v.rank);
        emi_ad_node *parent = t->ad;
        if (parent) {
            atomic_fetch_add_explicit(&parent->refs, 1, memory_order_relaxed);
            in->node = parent;
        }
        bool needed = (rule->needs & (i < 31 ? EMI_NEED_IN(i) : EMI_NEED_ALL_IN)) != 0;
        /* A value that cannot be recomputed is saved when a rule may need it (a memory-bound
         * op may be recomputed: it keeps such inputs even when its own rule reads none). */
        bool fixed = !parent || !parent->rule || !parent->rule->forward;
        if (node->region) {
            /* In a checkpoint region, a node with a forward may be recomputed, so it keeps
             * every input it cannot recompute: the region's inputs (values made outside it:
             * saved; under BALANCED, claimed where that keeps them, but an earlier region's
             * value is always saved, so that the two are recomputed apart) and values with
             * no recompute; one made inside is recomputed. A node with no forward is never
             * recomputed: it keeps only what its rule reads. */
            bool inside = emi_region_recomputable(parent) && parent->region == node->region;
            if ((needed || rule->forward) && !inside &&
                (fixed || !balanced || parent->region != 0 || !emi_claim_input(parent, t)))
                s = emi_save(t, &in->value);
        } else if (!balanced) {
            if (needed) s = emi_save(t, &in->value);
        } else if (fixed && (needed || !rule->compute_bound)) {
            s = emi_save(t, &in->value);
        } else if (needed && !emi_claim_input(parent, t)) {
            /* not recomputable any more (a kept output it needs was dropped): saved */
            s = emi_save(t, &in->value);
        }
    }
    /* BALANCED keeps a compute-bound op's output until its last handle goes unclaimed
     * (emi_ad_release); a memory-bound op whose rule reads its own output keeps it only
     * when it cannot be recomputed */
    if (node->region) {
        /* a region's output is held while a handle holds it (that memory is the handle's
         * anyway), so that a backward run meanwhile reads it, and let go with the handle
         * (emi_ad_release): it is recomputed after that. An op with no forward keeps what its
         * rule reads, as DISABLED does. */
        if (s == EM_OK && (rule->forward || (rule->needs & EMI_NEED_OUT)))
            s = emi_save(out, &node->value);
    } else if (s == EM_OK && ((!balanced && (rule->needs & EMI_NEED_OUT)) ||
                              (balanced && rule->compute_bound))) {
        s = emi_save(out, &node->value);
    }
    if (s == EM_OK && !node->region && balanced && !rule->compute_bound &&
        (rule->needs & EMI_NEED_OUT)) {
        bool recomputable = rule->forward != NULL;
        for (int i = 0; i < n && recomputable; i++) {
            emi_ad_input *in = &node->in[i];
            if (in->rank < 0 || in->value) continue;
            recomputable = in->node && emi_claim_input(in->node, ins[i]);
        }
        if (recomputable) {
            node->claimed = true;
        } else {
            /* saved as DISABLED does; what it saved to recompute itself goes now */
            s = emi_save(out, &node->value);
            emi_drop_recompute_inputs(node);
        }
    }
    if (s != EM_OK) {
        emi_ad_node_release(node);
        return s;
    }
    out->ad = node;
    out->ckpt = op->strategy;
    return EM_OK;
}

void emi_ad_node_spend(emi_ad_node *n) {
    for (int i = 0; i < n->nin; i++) {
        em_tensor_release(n->in[i].value);
        n->in[i].value = NULL;
        if (n->in[i].node) emi_ad_node_release(n->in[i].node);
        n->in[i].node = NULL;
    }
    em_tensor_release(n->value);
    em_tensor_release(n->cache);
    em_tensor_release(n->grad);
    n->value = n->cache = n->grad = NULL;
    for (int i = 0; i < n->npieces; i++) em_tensor_release(n->pieces[i].grad);
    free(n->pieces);
    n->pieces = NULL;
    n->npieces = n->cap_pieces = 0;
}

void emi_ad_node_release(emi_ad_node *n) {
    /* Nodes whose last reference goes are chained through `next`, so that freeing a long
     * chain of parents needs no recursion. */
    emi_ad_node *list = NULL;
    if (n && atomic_fetch_sub_explicit(&n->refs, 1, memory_order_acq_rel) == 1) {
        n->next = NULL;
        list = n;
    }
    while (list) {
        emi_ad_node *x = list;
        list = x->next;
        for (int i = 0; i < x->nin; i++) {
            emi_ad_node *p = x->in[i].node;
            x->in[i].node = NULL;
            if (p && atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) == 1) {
                p->next = list;
                list = p;
            }
        }
        emi_ad_node_spend(x);
        free(x);
    }
}

void emi_ad_release(em_tensor *t) {
    emi_ad_node *n = t->ad;
    t->ad = NULL;
    /* a checkpoint region's value goes with its handle: it is recomputed where a rule reads
     * it, and it keeps what it saved (the region needs that to recompute) */
    if (n && n->region && !n->done && n->rule && n->rule->forward) {
        em_tensor_release(n->value);
        n->value = NULL;
        emi_ad_node_release(n);
        return;
    }
    /* BALANCED: the output of a compute-bound op whose handle goes before any rule claimed
     * it is not kept: what a later op needs from it is then saved by that op (emi_claim), and
     * an output nobody reads (the last matmul's, before a loss) costs nothing */
    if (n && n->value && (!n->claimed || n->recompute) && !n->done && n->rule &&
        n->rule->compute_bound && n->strategy == EM_CKPT_BALANCED) {
        em_tensor_release(n->value);
        n->value = NULL;
    }
    /* ...and a memory-bound op's inputs saved only to recompute it go too when no rule
     * claimed it (an op that needed it saved the value itself, emi_claim_input) */
    if (n && !n->claimed && !n->done && n->rule && !n->rule->compute_bound &&
        n->strategy == EM_CKPT_BALANCED)
        emi_drop_recompute_inputs(n);
    emi_ad_node_release(n);
}

/* ---- the rule of ops whose gradient is zero ---- */

static em_status emi_no_grad_backward(emi_ad_bw *bw) {
    for (int i = 0; i < bw->nin; i++) bw->gin[i] = NULL;
    return EM_OK;
}

const emi_ad_rule emi_rule_no_grad = {
    .name = "no_grad",
    .compute_bound = false,
    .needs = 0,
    .forward = NULL,
    .backward = emi_no_grad_backward,
};
