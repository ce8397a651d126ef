/*
 * autodiff.h — the autodiff layer's internal interface: how ops record themselves, how backward
 * rules are written, and what the engine keeps.
 *
 * The layer sits in the dispatch path, never in a backend. An op in src/ops:
 *
 *     emi_ad_op ad;
 *     EMI_TRY(emi_ad_begin(fn, ins, n, &ad));     // strategy rules, result device
 *     ... compute `o` with the backend, exactly as without autodiff ...
 *     s = emi_ad_end(&ad, &emi_rule_exp, ins, n, o, &params, sizeof params);
 *
 * emi_ad_end makes `o` tracked (a node in the graph with `rule`) when any input is tracked,
 * gives it the result device, and saves what the rule's backward needs. Ops with no gradient
 * (comparisons, argmax, integer outputs) pass rule NULL: the output then only gets its device
 * and checkpointing mark.
 *
 * Checkpointing. Every rule declares which values its backward needs (inputs, output) and
 * whether the op is compute-bound. Under EM_CKPT_DISABLED those values are saved at record
 * time. Under EM_CKPT_BALANCED, compute-bound nodes keep their output; a needed value that a
 * memory-bound node produced is not saved but recomputed during backward with the rule's
 * `forward` from its own inputs (recursively, down to kept values, leaves and constants).
 * Both strategies run the same backward code, so their gradients are equal.
 *
 * Checkpoint regions (em_checkpoint_begin) reuse that recompute: a node recorded in one is
 * marked with the region's number and treated as a memory-bound node whatever its rule (its
 * output is held only while a handle holds it); it saves the values it reads from outside
 * the region (from an earlier region always), so that backward can recompute any of its
 * values from them, one region at a time.
 */
#ifndef EMBER_AUTODIFF_H
#define EMBER_AUTODIFF_H

#include "core/internal.h"

typedef struct emi_ad_bw emi_ad_bw;

#define EMI_NEED_IN(i) (1u << (i))      /* backward reads input i's value (i < 31) */
#define EMI_NEED_ALL_IN 0x7fffffffu     /* every input's value */
#define EMI_NEED_OUT (1u << 31)         /* backward reads the output's value */

/** Parameters an op records with its node (copied, at most this many bytes). */
#define EMI_AD_PARAMS 256

typedef struct emi_ad_rule {
    const char *name;     /* the op, e.g. "exp": named in errors */
    bool compute_bound;   /* its output is kept under EM_CKPT_BALANCED (matmul, conv) */
    unsigned needs;       /* EMI_NEED_* */
    /** Recomputes the output from untracked input values (BALANCED). Calls the public op,
     *  which records nothing since its inputs are untracked. params is the node's copy.
     *  NULL: the op cannot be recomputed, so its output is saved where a later op needs it. */
    em_status (*forward)(const void *params, em_tensor *const *in, int nin, em_tensor **out);
    /** Writes bw->gin[i] (a new reference of input i's shape and dtype, or NULL for no
     *  gradient) for every i with bw->need[i]. Uses untracked public ops only. */
    em_status (*backward)(emi_ad_bw *bw);
} emi_ad_rule;

/** forward, given inputs it may consume: own[i] says that in[i] is a recomputed value no one
 *  reads after this (released by the call, also on failure; written in place where the op
 *  allows it: the same bits as forward's). */
typedef em_status (*emi_ad_forward_own)(const void *params, em_tensor **in, const bool *own,
                                        int nin, em_tensor **out);
/** Rule r's consuming forward, or NULL where it has none (the elementwise rules have one). */
emi_ad_forward_own emi_rule_forward_own(const emi_ad_rule *r);

/** What an op learned from its inputs before computing. */
typedef struct emi_ad_op {
    bool tracked;                /* some input is tracked: the output joins the graph */
    em_checkpointing strategy;   /* the graph's strategy when tracked, else the inputs' mark */
    em_device dev;               /* the result's device (autodiff flag included) */
} emi_ad_op;

/** Applies the strategy rules to an op's inputs (NULL entries skipped): two tracked inputs with
 *  different strategies are EM_ERR_STATE naming both; tracked mixed with untracked promotes the
 *  untracked to the tracked strategy. Fills *op. */
em_status emi_ad_begin(const char *fn, const em_tensor *const *ins, int n, emi_ad_op *op);

/** Finishes an op whose (untracked, freshly computed) output is `out`: sets its device and
 *  mark; when op->tracked and out is float and rule is not NULL, records a node. A float
 *  output on an autodiff device with no tracked input becomes a leaf (a constant of the
 *  graph). On failure out is left untracked and the caller releases it. */
em_status emi_ad_end(const emi_ad_op *op, const emi_ad_rule *rule, const em_tensor *const *ins,
                     int n, em_tensor *out, const void *params, size_t psize);

/** Makes a freshly created tensor on dev a leaf of the graph when dev is an autodiff device
 *  and the dtype is float; for other dtypes it only gets the device's mark. */
em_status emi_ad_created(em_tensor *t, em_device dev);

/** The checkpoint region open on this thread (em_checkpoint_begin): a number of its own,
 *  shared by the regions nested in it; 0 when none is open. */
uint64_t emi_ad_region(void);

/** True when t is part of a graph. */
static inline bool emi_ad_tracked(const em_tensor *t) { return t->ad != NULL; }
/** True when gradients may flow through t: the result of a recorded op, or a leaf that
 *  requires grad (a constant of the graph is tracked but is neither). The name of its op, or
 *  "a leaf that requires grad", into *what. */
bool emi_ad_in_graph(const em_tensor *t, const char **what);

/* ---- writing backward rules ---- */

struct emi_ad_bw {
    const void *params;  /* the op's recorded params */
    int nin;
    em_tensor *grad;     /* the gradient of the output (untracked, output shape and dtype) */
    const bool *need;    /* need[i]: write gin[i] */
    em_tensor **gin;     /* results, one per input */
    emi_ad_node *node;   /* private to the engine */
};

/** The value of input i (untracked, borrowed: valid during the rule). */
em_status emi_bw_input(emi_ad_bw *bw, int i, em_tensor **value);
/** The value of the op's output (untracked, borrowed). */
em_status emi_bw_output(emi_ad_bw *bw, em_tensor **value);
/** The value of the op's output, owned by the rule (it releases or consumes it): a node's
 *  rule is the last reader of its output (its consumers' rules ran before it, and no later
 *  recompute reads it), so the tape lets go of its own reference, and a consuming op
 *  (em_exp_, em_mul_, ...) writes into the buffer when nothing else holds it. */
em_status emi_bw_output_take(emi_ad_bw *bw, em_tensor **value);
/** Says that the rule will not read input i's value again: a recomputed value no later rule
 *  reads, or a value the node saved, goes now, before the rule makes its larger results
 *  (the rule must have released its own references to it). */
void emi_bw_input_done(emi_ad_bw *bw, int i);
/** Input i's shape and rank as the op saw it. */
const int64_t *emi_bw_in_shape(const emi_ad_bw *bw, int i, int *rank);
/** Input i's dtype. */
em_dtype emi_bw_in_dtype(const emi_ad_bw *bw, int i);
/** True when inputs i and j are the same tracked tensor (x * x). */
bool emi_bw_same_input(const emi_ad_bw *bw, int i, int j);
/** The output's shape and rank. */
const int64_t *emi_bw_out_shape(const emi_ad_bw *bw, int *rank);

/** Sums g over the dims that broadcasting added or stretched, so the result has `shape`
 *  (a new reference; g itself, retained, when the shapes already match). */
em_status emi_ad_unbroadcast(const em_tensor *g, const int64_t *shape, int rank,
                             em_tensor **out);

/** Releases the node of a tensor being freed (the hook em_tensor_release calls). */
void emi_ad_release(em_tensor *t);

/** A rule for ops whose gradient is zero everywhere (floor, sign, round, ...): the output is
 *  tracked but no gradient flows back through it. */
extern const emi_ad_rule emi_rule_no_grad;

#endif /* EMBER_AUTODIFF_H */
