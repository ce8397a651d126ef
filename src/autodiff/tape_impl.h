/*
 * tape_impl.h — the node layout shared by tape.c (recording) and backward.c (the engine).
 * Private to src/autodiff.
 */
#ifndef EMBER_TAPE_IMPL_H
#define EMBER_TAPE_IMPL_H

#include "autodiff/autodiff.h"

typedef struct emi_ad_input {
    emi_ad_node *node; /* the parent that produced this input (retained), NULL: a constant */
    em_tensor *value;  /* the saved value (an untracked view), or NULL */
    em_dtype dtype;
    int rank;
    int64_t shape[EM_MAX_RANK];
} emi_ad_input;

/* The gradient of one split piece (x's dims [start, stop) along dim), held until every
 * piece of x is back, then summed into x's gradient as one cat (backward.c). */
typedef struct emi_ad_piece {
    em_tensor *grad;
    int dim;
    int64_t start, stop;
} emi_ad_piece;

struct emi_ad_node {
    atomic_int refs;
    const emi_ad_rule *rule;  /* NULL: a leaf */
    em_checkpointing strategy;
    bool requires_grad;       /* leaf: backward collects its gradient */
    bool done;                /* consumed by a backward: the tape is freed */
    em_device dev;            /* the output's device, autodiff flag included */
    em_dtype dtype;
    int rank;
    int64_t shape[EM_MAX_RANK];
    em_tensor *value;         /* the kept output (an untracked view), or NULL */
    bool claimed;             /* BALANCED: a rule will read this value in backward, and it
                                 will be there (kept, or recomputable from claimed values) */
    bool recompute;           /* BALANCED: a compute-bound op claimed as recomputed from its
                                 inputs (emi_expanding), not kept: its output goes with its
                                 last handle */
    bool dropped;             /* BALANCED: what a recompute needs was let go: not
                                 recomputable (emi_ad_release) */
    uint64_t region;          /* the checkpoint region it was recorded in (0: none): its
                                 value is kept only while a handle holds it, and recomputed
                                 otherwise */
    /* backward scratch */
    em_tensor *grad;          /* accumulated gradient of the output */
    em_tensor *cache;         /* a recomputed output value */
    emi_ad_piece *pieces;     /* split pieces' gradients not yet in grad */
    int npieces, cap_pieces;
    bool need;                /* some leaf below wants a gradient through this node */
    int pinned;               /* held by the rule now running or a recompute under way */
    int uses;                 /* rules still to run that read this node's value directly */
    uint64_t done_in;         /* the running rule's inputs it said it is done with
                                 (emi_bw_input_done; the first 64) */
    int recomputes;           /* times the walk recomputed the value (the account) */
    long made_at, freed_at;   /* walk steps of the last recompute and of its release */
    size_t cache_bytes;       /* bytes of the last recomputed value */
    int redo;                 /* memory-bound ops from kept values to this one's (0: kept
                                 or a leaf, EMI_REDO_FAR: more than EMI_REDO_NEAR or through
                                 a compute-bound op), -1 until counted (emi_redo_depth) */
    emi_ad_node *view_of;     /* the input whose recomputed value this one's is a view of */
    int viewers;              /* recomputed values that are views of this one's: it stays
                                 while they live (their storage is its own), so that it is
                                 not recomputed again beside them */
    int mark;                 /* traversal state */
    emi_ad_node *next;        /* release list link */
    size_t psize;
    unsigned char params[EMI_AD_PARAMS];
    int nin;
    emi_ad_input in[];        /* nin entries */
};

/** True when rule reads input i's value in backward (EMI_NEED_ALL_IN covers inputs past 30). */
static inline bool emi_rule_reads_in(const emi_ad_rule *rule, int i) {
    return (rule->needs & (i < 31 ? EMI_NEED_IN(i) : EMI_NEED_ALL_IN)) != 0;
}

/** Drops a reference to a node (iteratively, so long chains don't recurse). */
void emi_ad_node_release(emi_ad_node *n);
/** Frees what the tape keeps for a node (saved values, kept output, parent edges). */
void emi_ad_node_spend(emi_ad_node *n);
/** An untracked view of t sharing its storage (dev: t's inner device, mark kept). */
em_status emi_ad_untracked_view(const em_tensor *t, em_tensor **out);

#endif /* EMBER_TAPE_IMPL_H */
