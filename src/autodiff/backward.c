/* backward.c — the engine: em_backward walks the graph from the loss, runs each node's rule
 * in reverse topological order, sums gradients where a tensor is used twice, recomputes the
 * values that BALANCED did not keep, and frees the tape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autodiff/rules/rules.h"
#include "autodiff/tape_impl.h"

struct em_grads {
    size_t n, cap;
    emi_ad_node **leaf; /* retained */
    em_tensor **grad;
};

/* ---- the account (EMBER_CKPT_REPORT=1): what one backward held and recomputed ---- */

typedef struct emi_ckpt_report {
    long step;               /* the walk's position: 0 is the loss's node */
    bool has_mem;            /* the device keeps a memory count */
    em_memory_stats begin;   /* the device's memory when the walk began */
    size_t alive, max_alive; /* bytes of recomputed values alive now, the most at once */
    long recomputes;
    /* where the device's peak during the walk was reached: the step whose rule raised it
     * last, with the recomputed bytes alive after that rule and the bytes in use then */
    size_t peak_seen;
    long peak_step;
    const char *peak_rule;
    size_t peak_alive, peak_in_use;
} emi_ckpt_report;

static _Thread_local emi_ckpt_report *emi_rep; /* NULL: no account is kept */

static size_t emi_held_bytes(const em_tensor *t) { return t && t->st ? t->st->bytes : 0; }

/* True when n's rule will read input i's value from its parent (not from a saved value):
 * the parent's recomputed value must live until then. */
static bool emi_reads_parent(const emi_ad_node *n, int i) {
    return n->rule && n->need && n->in[i].node && !n->in[i].value && emi_rule_reads_in(n->rule, i);
}

/* True when nothing needs n's recomputed value any more: no rule still to run reads it, no
 * running rule or recompute holds it, and no recomputed view of it lives. */
static bool emi_cache_idle(const emi_ad_node *n) {
    return n->uses <= 0 && !n->pinned && n->viewers == 0;
}

/* Releases n's recomputed value; the value it is a view of goes too when that was all that
 * held it (and so on down a chain of views). */
static void emi_cache_drop(emi_ad_node *n) {
    while (n && n->cache) {
        if (emi_rep) {
            emi_rep->alive -= n->cache_bytes;
            n->freed_at = emi_rep->step;
        }
        em_tensor_release(n->cache);
        n->cache = NULL;
        emi_ad_node *p = n->view_of;
        n->view_of = NULL;
        if (!p) break;
        p->viewers--;
        n = p->cache && emi_cache_idle(p) ? p : NULL;
    }
}

/* After node n's rule ran: when the device's peak rose during it, notes where. */
static void emi_report_peak(const emi_ad_node *n, em_device dev) {
    em_memory_stats m;
    if (em_device_memory(dev, &m) != EM_OK) {
        em_clear_error();
        return;
    }
    if (m.peak_bytes <= emi_rep->peak_seen) return;
    emi_rep->peak_seen = m.peak_bytes;
    emi_rep->peak_step = emi_rep->step;
    emi_rep->peak_rule = n->rule ? n->rule->name : "leaf";
    emi_rep->peak_alive = emi_rep->alive;
    emi_rep->peak_in_use = m.bytes_in_use;
}

/* ---- values during backward ---- */

/* A recomputed value that only served to recompute another is let go at once, though later
 * rules read it, when recomputing it again costs at most EMI_REDO_NEAR memory-bound ops from
 * kept values (a ResNet's relu(bn(conv)) block input: 2): what backward holds is then the
 * values the running rules read, not every value on the way to them. A longer chain, or one
 * through a compute-bound op (a matmul in a checkpoint region), stays until its last reader:
 * recomputing it again would cost more than its memory is worth. */
#define EMI_REDO_NEAR 3
#define EMI_REDO_FAR (EMI_REDO_NEAR + 1)

/* Memory-bound ops that recomputing n's value runs from kept and saved values (0: n's is
 * kept or n is a leaf), EMI_REDO_FAR when more or through a compute-bound op (never looking
 * deeper than EMI_REDO_FAR levels; what a call at level 0 finds is exact, so it alone is
 * remembered for the walk). */
static int emi_redo_depth(emi_ad_node *n, int level) {
    if (n->value || !n->rule) return 0;
    if (n->redo >= 0) return n->redo;
    if (n->rule->compute_bound || !n->rule->forward || level >= EMI_REDO_FAR)
        return EMI_REDO_FAR;
    int d = 0;
    for (int i = 0; i < n->nin && d < EMI_REDO_FAR; i++) {
        const emi_ad_input *in = &n->in[i];
        if (in->value || !in->node) continue;
        int e = emi_redo_depth(in->node, level + 1);
        if (e > d) d = e;
    }
    d = d + 1 > EMI_REDO_FAR ? EMI_REDO_FAR : d + 1;
    if (level == 0) n->redo = d;
    return d;
}

/* True when p's recomputed value, made only to recompute another, goes now (see above). */
static bool emi_cache_redo_cheap(emi_ad_node *p) {
    return !p->pinned && p->viewers == 0 && emi_redo_depth(p, 0) <= EMI_REDO_NEAR;
}

/* The output value of node n: kept, cached, or recomputed from its inputs (borrowed). */
static em_status emi_ad_value(emi_ad_node *n, em_tensor **out) {
    if (n->value) {
        *out = n->value;
        return EM_OK;
    }
    if (n->cache) {
        *out = n->cache;
        return EM_OK;
    }
    if (!n->rule || !n->rule->forward)
        return emi_fail(EM_ERR_STATE, "em_backward: a value of '%s' was neither saved nor "
                        "recomputable", n->rule ? n->rule->name : "leaf");
    em_tensor *stack_in[8] = {0};
    bool stack_own[8] = {0};
    em_tensor **in = n->nin <= 8 ? stack_in : calloc((size_t)n->nin, sizeof *in);
    bool *own = n->nin <= 8 ? stack_own : calloc((size_t)n->nin, sizeof *own);
    if (!in || !own) {
        if (in != stack_in) free(in);
        if (own != stack_own) free(own);
        return emi_fail(EM_ERR_NOMEM, "em_backward: out of memory");
    }
    em_status s = EM_OK;
    /* each input's value stays while the next ones are recomputed (one may be made from
     * another) and until the forward ran */
    int got = 0;
    for (int i = 0; i < n->nin && s == EM_OK; i++) {
        in[i] = NULL;
        if (n->in[i].value) in[i] = n->in[i].value;
        else if (n->in[i].node) s = emi_ad_value(n->in[i].node, &in[i]);
        if (s != EM_OK) break;
        if (n->in[i].node) n->in[i].node->pinned++;
        got = i + 1;
    }
    /* a recomputed input that goes once this forward ran is handed to it to consume (its
     * buffer may take the result): a chain of recomputes then holds one value of each
     * step's size, not two */
    bool any_own = false;
    const emi_ad_forward_own fwd_own = s == EM_OK ? emi_rule_forward_own(n->rule) : NULL;
    for (int i = 0; fwd_own && i < n->nin; i++) {
        emi_ad_node *p = n->in[i].node;
        if (!p || n->in[i].value || p->cache != in[i] || p->view_of || p->viewers ||
            p->pinned != 1 || !(p->uses <= 0 || emi_redo_depth(p, 0) <= EMI_REDO_NEAR))
            continue;
        bool twice = false;
        for (int j = 0; j < n->nin; j++) twice |= j != i && n->in[j].node == p;
        if (twice) continue;
        if (emi_rep) {
            emi_rep->alive -= p->cache_bytes;
            p->freed_at = emi_rep->step;
        }
        p->cache = NULL; /* the forward's now */
        own[i] = any_own = true;
    }
    if (s == EM_OK && any_own) s = fwd_own(n->params, in, own, n->nin, &n->cache);
    else if (s == EM_OK) s = n->rule->forward(n->params, in, n->nin, &n->cache);
    /* a view of an input (a reshape, a split's piece) is no memory of its own: the account
     * counts it as none, and a recomputed input it views stays while it lives */
    bool is_view = false;
    for (int i = 0; s == EM_OK && i < got; i++) {
        if (own[i] || !in[i] || in[i]->st != n->cache->st) continue;
        is_view = true;
        emi_ad_node *p = n->in[i].node;
        if (!n->view_of && p && !n->in[i].value && p->cache == in[i]) {
            n->view_of = p;
            p->viewers++;
        }
    }
    if (in != stack_in) free(in);
    if (own != stack_own) free(own);
    for (int i = 0; i < got; i++)
        if (n->in[i].node) n->in[i].node->pinned--;
    if (s != EM_OK) {
        for (int i = 0; i < got; i++) {
            emi_ad_node *p = n->in[i].node;
            if (p && !n->in[i].value && p->cache && emi_cache_idle(p)) emi_cache_drop(p);
        }
        return s;
    }
    n->recomputes++;
    n->cache_bytes = is_view ? 0 : emi_held_bytes(n->cache);
    if (emi_rep) {
        n->made_at = emi_rep->step;
        emi_rep->recomputes++;
        emi_rep->alive += n->cache_bytes;
        if (emi_rep->alive > emi_rep->max_alive) emi_rep->max_alive = emi_rep->alive;
    }
    /* a value recomputed only to recompute this one goes at once (no rule still to run
     * reads it, and the running rule does not hold it): what backward holds beyond the kept
     * values is the few values the rules read, not the chains between them */
    for (int i = 0; i < n->nin; i++) {
        emi_ad_node *p = n->in[i].node;
        if (p && !n->in[i].value && p->cache && (emi_cache_idle(p) || emi_cache_redo_cheap(p)))
            emi_cache_drop(p);
    }
    *out = n->cache;
    return EM_OK;
}

em_status emi_bw_input(emi_ad_bw *bw, int i, em_tensor **value) {
    emi_ad_node *n = bw->node;
    if (i < 0 || i >= n->nin || n->in[i].rank < 0)
        return emi_fail(EM_ERR_STATE, "em_backward: '%s' asked for input %d", n->rule->name, i);
    if (n->in[i].value) {
        *value = n->in[i].value;
        return EM_OK;
    }
    if (n->in[i].node) return emi_ad_value(n->in[i].node, value);
    return emi_fail(EM_ERR_STATE, "em_backward: input %d of '%s' was not saved", i,
                    n->rule->name);
}

em_status emi_bw_output(emi_ad_bw *bw, em_tensor **value) { return emi_ad_value(bw->node, value); }

em_status emi_bw_output_take(emi_ad_bw *bw, em_tensor **value) {
    emi_ad_node *n = bw->node;
    em_tensor *v;
    em_status s = emi_ad_value(n, &v);
    if (s != EM_OK) return s;
    em_tensor_retain(v);
    if (n->value == v) {
        em_tensor_release(n->value);
        n->value = NULL;
    } else if (n->cache == v && n->viewers == 0) {
        emi_cache_drop(n); /* a view of another recomputed value lets that one go too */
    }
    *value = v;
    return EM_OK;
}

void emi_bw_input_done(emi_ad_bw *bw, int i) {
    emi_ad_node *n = bw->node;
    if (i < 0 || i >= n->nin || i >= 64 || (n->done_in & (1ull << i))) return;
    emi_ad_input *in = &n->in[i];
    emi_ad_node *p = in->node;
    /* the same value as another input the rule may still read (x @ x) stays */
    for (int j = 0; j < n->nin; j++)
        if (j != i && ((p && n->in[j].node == p) || (in->value && n->in[j].value &&
                                                   n->in[j].value->st == in->value->st)))
            return;
    const bool from_parent = emi_reads_parent(n, i);
    n->done_in |= 1ull << i;
    if (in->value) {
        em_tensor_release(in->value);
        in->value = NULL;
    }
    if (!p) return;
    p->pinned--;
    if (from_parent) p->uses--;
    if (p->cache && emi_cache_idle(p)) emi_cache_drop(p);
}

const int64_t *emi_bw_in_shape(const emi_ad_bw *bw, int i, int *rank) {
    *rank = bw->node->in[i].rank;
    return bw->node->in[i].shape;
}

em_dtype emi_bw_in_dtype(const emi_ad_bw *bw, int i) { return bw->node->in[i].dtype; }

bool emi_bw_same_input(const emi_ad_bw *bw, int i, int j) {
    const emi_ad_node *n = bw->node;
    return i >= 0 && j >= 0 && i < n->nin && j < n->nin && n->in[i].node != NULL &&
           n->in[i].node == n->in[j].node;
}

const int64_t *emi_bw_out_shape(const emi_ad_bw *bw, int *rank) {
    *rank = bw->node->rank;
    return bw->node->shape;
}

em_status emi_ad_unbroadcast(const em_tensor *g, const int64_t *shape, int rank,
                             em_tensor **out) {
    int gr = g->v.rank;
    if (emi_same_shape(g->v.shape, gr, shape, rank)) {
        em_tensor_retain((em_tensor *)g);
        *out = (em_tensor *)g;
        return EM_OK;
    }
    /* g's dims (extent-1 ones dropped: they hold no data) with whether each is summed;
     * neighbours with the same fate merge where g's strides allow, so that the reshape below
     * is a view and each run of summed dims is one reduction: [N,C,H,W] -> [1,C,1,1] is a row
     * reduction of the [N, C, H*W] view over its last dim, then one over its first (the
     * largest run first, so that the second pass reads a small tensor). */
    int64_t ms[EM_MAX_RANK], mst[EM_MAX_RANK];
    bool mred[EM_MAX_RANK];
    int mr = 0;
    for (int d = 0; d < gr; d++) {
        int64_t ext = g->v.shape[d];
        int td = rank - gr + d;
        bool reduce = td < 0 || (shape[td] == 1 && ext != 1);
        if (ext == 1) continue;
        if (mr > 0 && mred[mr - 1] == reduce && mst[mr - 1] == ext * g->v.strides[d]) {
            ms[mr - 1] *= ext;
            mst[mr - 1] = g->v.strides[d];
            continue;
        }
        ms[mr] = ext;
        mst[mr] = g->v.strides[d];
        mred[mr] = reduce;
        mr++;
    }
    em_tensor *cur;
    em_status s = em_reshape(g, ms, mr, &cur);
    if (s != EM_OK) return s;
    for (;;) {
        int best = -1;
        for (int d = 0; d < mr; d++)
            if (mred[d] && (best < 0 || ms[d] > ms[best])) best = d;
        if (best < 0) break;
        mred[best] = false;
        ms[best] = 1;
        em_tensor *next;
        s = em_sum_dim(cur, best, true, &next);
        em_tensor_release(cur);
        if (s != EM_OK) return s;
        cur = next;
    }
    s = em_reshape(cur, shape, rank, out);
    em_tensor_release(cur);
    return s;
}

/* ---- the walk ---- */

typedef struct emi_order {
    emi_ad_node **v;
    size_t n, cap;
} emi_order;

static em_status emi_order_push(emi_order *o, emi_ad_node *x) {
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        emi_ad_node **v = realloc(o->v, cap * sizeof *v);
        if (!v) return emi_fail(EM_ERR_NOMEM, "em_backward: out of memory");
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = x;
    return EM_OK;
}

/* Post-order DFS from root: parents come before children in `order`. Every node in it is
 * retained and marked. */
static em_status emi_collect(emi_ad_node *root, emi_order *order) {
    typedef struct {
        emi_ad_node *n;
        int next;
    } frame;
    size_t cap = 64, depth = 0;
    frame *st = malloc(cap * sizeof *st);
    if (!st) return emi_fail(EM_ERR_NOMEM, "em_backward: out of memory");
    em_status s = EM_OK;
    root->mark = 1;
    st[depth++] = (frame){root, 0};
    while (depth && s == EM_OK) {
        frame *f = &st[depth - 1];
        if (f->n->rule && f->n->done) {
            s = emi_fail(EM_ERR_STATE, "em_backward: the graph was already used by a backward "
                         "(its tape is freed); run the forward again");
            break;
        }
        if (f->next < f->n->nin) {
            emi_ad_node *p = f->n->in[f->next++].node;
            if (!p || p->mark) continue;
            p->mark = 1;
            if (depth == cap) {
                frame *ns = realloc(st, cap * 2 * sizeof *st);
                if (!ns) {
                    s = emi_fail(EM_ERR_NOMEM, "em_backward: out of memory");
                    break;
                }
                st = ns;
                cap *= 2;
            }
            st[depth++] = (frame){p, 0};
            continue;
        }
        atomic_fetch_add_explicit(&f->n->refs, 1, memory_order_relaxed);
        s = emi_order_push(order, f->n);
        if (s != EM_OK) emi_ad_node_release(f->n);
        depth--;
    }
    /* nodes marked but not pushed (on failure) lose their mark again */
    for (size_t i = 0; i < depth; i++) st[i].n->mark = 0;
    free(st);
    return s;
}

static em_status emi_grads_add(em_grads *g, emi_ad_node *leaf, em_tensor *grad) {
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 16;
        emi_ad_node **l = realloc(g->leaf, cap * sizeof *l);
        if (!l) return emi_fail(EM_ERR_NOMEM, "em_backward: out of memory");
        g->leaf = l;
        em_tensor **t = realloc(g->grad, cap * sizeof *t);
        if (!t) return emi_fail(EM_ERR_NOMEM, "em_backward: out of memory");
        g->grad = t;
        g->cap = cap;
    }
    atomic_fetch_add_explicit(&leaf->refs, 1, memory_order_relaxed);
    g->leaf[g->n] = leaf;
    g->grad[g->n] = grad;
    g->n++;
    return EM_OK;
}

/* Adds gradient g (consumed) into node p's accumulator. */
static em_status emi_accumulate(emi_ad_node *p, em_tensor *g) {
    if (!p->grad) {
        p->grad = g;
        return EM_OK;
    }
    /* in the accumulator's buffer when it alone owns it (no rule handed it on as another
     * input's gradient): a tensor used twice costs no third buffer of its size */
    em_tensor *acc = p->grad, *sum = NULL;
    p->grad = NULL;
    em_status s = em_add_(acc, g, &sum); /* consumes acc, also on failure */
    em_tensor_release(g);
    if (s != EM_OK) return s;
    p->grad = sum;
    return EM_OK;
}

/* ---- split: the pieces' gradients meet in one cat ---- */


/* Holds g (consumed), the gradient of x's dims [start, stop) along dim, in p's list. */
static em_status emi_add_piece(emi_ad_node *p, em_tensor *g, int dim, int64_t start,
                               int64_t stop) {
    if (p->npieces == p->cap_pieces) {
        int cap = p->cap_pieces ? 2 * p->cap_pieces : 4;
        emi_ad_piece *v = realloc(p->pieces, (size_t)cap * sizeof *v);
        if (!v) {
            em_tensor_release(g);
            return emi_fail(EM_ERR_NOMEM, "em_backward: out of memory");
        }
        p->pieces = v;
        p->cap_pieces = cap;
    }
    p->pieces[p->npieces++] = (emi_ad_piece){g, dim, start, stop};
    return EM_OK;
}

/* zeros of node n's shape with size len along dim (a gap between pieces). */
static em_status emi_piece_zeros(const emi_ad_node *n, const em_tensor *like, int dim,
                                 int64_t len, em_tensor **out) {
    int64_t shape[EM_MAX_RANK];
    memcpy(shape, n->shape, sizeof shape);
    shape[dim] = len;
    return em_zeros(shape, n->rank, like->dtype, em_tensor_device(like), out);
}

/* Sums the held pieces into n's gradient: pieces along one dim that do not overlap (a split's,
 * the common case) make one cat with zeros in the gaps; other mixes each go into zeros of x's
 * shape through slice_assign, as the slice rule does. */
static em_status emi_flush_pieces(emi_ad_node *n) {
    int np = n->npieces;
    if (np == 0) return EM_OK;
    emi_ad_piece *v = n->pieces;
    n->pieces = NULL;
    n->npieces = n->cap_pieces = 0;
    for (int i = 1; i < np; i++) { /* insertion sort by (dim, start) */
        emi_ad_piece x = v[i];
        int j = i;
        for (; j > 0 && (v[j - 1].dim > x.dim ||
                         (v[j - 1].dim == x.dim && v[j - 1].start > x.start)); j--)
            v[j] = v[j - 1];
        v[j] = x;
    }
    bool one_cat = v[0].dim == v[np - 1].dim;
    for (int i = 1; i < np && one_cat; i++) one_cat = v[i - 1].stop <= v[i].start;
    em_status s = EM_OK;
    em_tensor *sum = NULL;
    if (one_cat && np == 1 && v[0].start == 0 && v[0].stop == n->shape[v[0].dim]) {
        sum = v[0].grad;
        v[0].grad = NULL;
    } else if (one_cat) {
        int dim = v[0].dim;
        const em_tensor **parts = malloc((size_t)(2 * np + 1) * sizeof *parts);
        em_tensor **zs = calloc((size_t)np + 1, sizeof *zs);
        int nparts = 0, nz = 0;
        int64_t at = 0;
        if (!parts || !zs) s = emi_fail(EM_ERR_NOMEM, "em_backward: out of memory");
        for (int i = 0; i <= np && s == EM_OK; i++) {
            int64_t next = i < np ? v[i].start : n->shape[dim];
            if (next > at) {
                s = emi_piece_zeros(n, v[0].grad, dim, next - at, &zs[nz]);
                if (s == EM_OK) parts[nparts++] = zs[nz++];
            }
            if (i < np) {
                parts[nparts++] = v[i].grad;
                at = v[i].stop;
            }
        }
        if (s == EM_OK) s = em_cat(parts, (size_t)nparts, dim, &sum);
        for (int i = 0; zs && i < nz; i++) em_tensor_release(zs[i]);
        free(zs);
        free((void *)parts);
    } else {
        for (int i = 0; i < np && s == EM_OK; i++) {
            em_tensor *z = NULL, *t = NULL;
            s = emi_piece_zeros(n, v[i].grad, v[i].dim, n->shape[v[i].dim], &z);
            if (s == EM_OK)
                s = em_slice_assign(z, v[i].dim, v[i].start, v[i].stop, 1, v[i].grad, &t);
            em_tensor_release(z);
            if (s == EM_OK) s = emi_accumulate(n, t);
        }
    }
    for (int i = 0; i < np; i++) em_tensor_release(v[i].grad);
    free(v);
    if (s == EM_OK && sum) s = emi_accumulate(n, sum);
    else em_tensor_release(sum);
    return s;
}

/* Runs node n's rule and sends the input gradients to its parents. */
static em_status emi_run_rule(emi_ad_node *n) {
    bool need_stack[8] = {0};
    em_tensor *gin_stack[8] = {0};
    bool *need = n->nin <= 8 ? need_stack : calloc((size_t)n->nin, sizeof *need);
    em_tensor **gin = n->nin <= 8 ? gin_stack : calloc((size_t)n->nin, sizeof *gin);
    em_status s = EM_OK;
    if (!need || !gin) s = emi_fail(EM_ERR_NOMEM, "em_backward: out of memory");
    for (int i = 0; s == EM_OK && i < n->nin; i++) {
        need[i] = n->in[i].node && n->in[i].node->need;
        gin[i] = NULL;
    }
    if (s == EM_OK && n->rule == &emi_rule_split) {
        /* held for the cat that sums all of x's pieces (emi_flush_pieces) */
        const emi_rule_slice_params *sp = (const emi_rule_slice_params *)n->params;
        if (need[0]) {
            em_tensor_retain(n->grad);
            s = emi_add_piece(n->in[0].node, n->grad, sp->dim, sp->start, sp->stop);
        }
    } else if (s == EM_OK) {
        emi_ad_bw bw = {n->params, n->nin, n->grad, need, gin, n};
        s = n->rule->backward(&bw);
    }
    for (int i = 0; gin && i < n->nin; i++) {
        em_tensor *g = gin[i];
        if (!g) continue;
        if (s == EM_OK && !need[i]) {
            em_tensor_release(g);
            continue;
        }
        if (s == EM_OK && (!emi_same_shape(g->v.shape, g->v.rank, n->in[i].shape, n->in[i].rank) ||
                           g->dtype != n->in[i].dtype))
            s = emi_fail(EM_ERR_STATE, "em_backward: the '%s' rule gave input %d a gradient of the "
                         "wrong shape or dtype", n->rule->name, i);
        if (s == EM_OK) s = emi_accumulate(n->in[i].node, g);
        else em_tensor_release(g);
    }
    if (need != need_stack) free(need);
    if (gin != gin_stack) free(gin);
    return s;
}

/* ---- the account's table ---- */

/* What a node held when the walk began (its saved values are spent as the walk passes). */
typedef struct emi_report_row {
    size_t kept;        /* bytes of its kept output */
    size_t saved;       /* bytes of the inputs it saved */
    size_t leaf;        /* of saved: views of leaves (no memory beyond the leaf's own) */
    size_t own;         /* of kept + saved: held by this row alone (not a leaf, not shared) */
    size_t shared;      /* of kept + saved: bytes whose storage an earlier row already holds */
    char ins[96];       /* which inputs it saved */
} emi_report_row;

static bool emi_report_wanted(void) {
    const char *e = getenv("EMBER_CKPT_REPORT");
    return e && *e && strcmp(e, "0") != 0;
}

/* True when storage st is held by a row before (walk position) k or by one of row k's
 * values before slot j (j counts the output as -1). */
static bool emi_storage_seen(const emi_order *o, size_t k, int j, const emi_storage *st) {
    for (size_t m = o->n; m-- > k + 1;) {
        const emi_ad_node *x = o->v[m];
        if (x->value && x->value->st == st) return true;
        for (int i = 0; i < x->nin; i++)
            if (x->in[i].value && x->in[i].value->st == st) return true;
    }
    const emi_ad_node *x = o->v[k];
    if (j >= 0 && x->value && x->value->st == st) return true;
    for (int i = 0; i < j && i < x->nin; i++)
        if (x->in[i].value && x->in[i].value->st == st) return true;
    return false;
}

/* One row per node of the walk (indexed by order position), or NULL when out of memory. */
static emi_report_row *emi_report_begin(const emi_order *o) {
    emi_report_row *rows = calloc(o->n ? o->n : 1, sizeof *rows);
    if (!rows) return NULL;
    for (size_t k = o->n; k-- > 0;) {
        const emi_ad_node *n = o->v[k];
        emi_report_row *r = &rows[k];
        if (n->value) {
            r->kept = emi_held_bytes(n->value);
            if (emi_storage_seen(o, k, -1, n->value->st)) r->shared += r->kept;
            else r->own += r->kept;
        }
        size_t at = 0;
        for (int i = 0; i < n->nin; i++) {
            const em_tensor *v = n->in[i].value;
            if (!v) continue;
            size_t b = emi_held_bytes(v);
            r->saved += b;
            bool seen = emi_storage_seen(o, k, i, v->st);
            if (seen) r->shared += b;
            const char *from = !n->in[i].node ? "const" : !n->in[i].node->rule ? "leaf" : "op";
            bool isleaf = n->in[i].node && !n->in[i].node->rule;
            if (isleaf) r->leaf += b;
            if (!seen && !isleaf) r->own += b;
            int w = snprintf(r->ins + at, sizeof r->ins - at, "%s%d:%s%s", at ? " " : "", i,
                             from, seen ? "(shared)" : "");
            if (w > 0 && (size_t)w < sizeof r->ins - at) at += (size_t)w;
        }
    }
    return rows;
}

/* b as "12.0 MiB", "3.5 KiB" or "40 B" into buf. */
static const char *emi_bytes(char *buf, size_t cap, size_t b) {
    if (b >= ((size_t)1 << 20)) snprintf(buf, cap, "%.2f MiB", (double)b / 1048576.0);
    else if (b >= 1024) snprintf(buf, cap, "%.1f KiB", (double)b / 1024.0);
    else snprintf(buf, cap, "%zu B", b);
    return buf;
}

static void emi_report_print(FILE *f, const emi_order *o, const emi_report_row *rows,
                             const emi_ckpt_report *rep, const em_tensor *loss) {
    static const char *const strat[] = {"none", "disabled", "balanced"};
    int st = (int)loss->ckpt;
    fprintf(f, "ember checkpoint report: one backward, strategy %s, %zu nodes (#0 is the "
            "loss; rules run in this order)\n", st >= 0 && st <= 2 ? strat[st] : "?", o->n);
    fprintf(f, "  %-5s %-16s %-20s %11s %11s  %-26s %s\n", "node", "op", "shape", "kept", "saved",
            "saved inputs", "recomputed");
    size_t kept = 0, saved = 0, shared = 0, leaf = 0, own = 0, nkept = 0;
    char b1[32], b2[32], b3[32], b4[32], b5[32];
    for (size_t k = o->n; k-- > 0;) {
        const emi_ad_node *n = o->v[k];
        const emi_report_row *r = &rows[k];
        long pos = (long)(o->n - 1 - k);
        kept += r->kept;
        saved += r->saved;
        shared += r->shared;
        leaf += r->leaf;
        own += r->own;
        nkept += r->kept > 0;
        if (!n->rule && !r->kept && !r->saved) continue; /* a leaf holds nothing extra */
        char shape[64];
        size_t at = 0;
        shape[0] = '\0';
        for (int d = 0; d < n->rank; d++) {
            int w = snprintf(shape + at, sizeof shape - at, "%s%lld", d ? "," : "[",
                             (long long)n->shape[d]);
            if (w > 0 && (size_t)w < sizeof shape - at) at += (size_t)w;
        }
        snprintf(shape + at, sizeof shape - at, "%s", n->rank ? "]" : "[]");
        char rec[80] = "-";
        if (n->recomputes)
            snprintf(rec, sizeof rec, "%dx %s, made@#%ld freed@#%ld", n->recomputes,
                     emi_bytes(b3, sizeof b3, n->cache_bytes), n->made_at, n->freed_at);
        fprintf(f, "  #%-4ld %-16s %-20s %11s %11s  %-26s %s\n", pos,
                n->rule ? n->rule->name : "leaf", shape, emi_bytes(b1, sizeof b1, r->kept),
                emi_bytes(b2, sizeof b2, r->saved), r->ins[0] ? r->ins : "-", rec);
    }
    fprintf(f, "  held when backward began: kept outputs %s (%zu nodes), saved inputs %s (%s "
            "of them views of leaves), %s of these on storage another held value shares; "
            "beyond the leaves, counted once: %s\n",
            emi_bytes(b1, sizeof b1, kept), nkept, emi_bytes(b2, sizeof b2, saved),
            emi_bytes(b3, sizeof b3, leaf), emi_bytes(b4, sizeof b4, shared),
            emi_bytes(b5, sizeof b5, own));
    fprintf(f, "  recomputed during backward: %ld values, at most %s of them alive at once\n",
            rep->recomputes, emi_bytes(b1, sizeof b1, rep->max_alive));
    em_memory_stats end;
    if (rep->has_mem && em_device_memory(loss->dev, &end) == EM_OK)
        fprintf(f, "  device memory: %s in use when backward began (peak since the last reset "
                "%s), %s at its end (peak %s)\n", emi_bytes(b1, sizeof b1, rep->begin.bytes_in_use),
                emi_bytes(b2, sizeof b2, rep->begin.peak_bytes),
                emi_bytes(b3, sizeof b3, end.bytes_in_use), emi_bytes(b4, sizeof b4, end.peak_bytes));
    if (rep->has_mem && rep->peak_step >= 0)
        fprintf(f, "  the walk's peak (%s) was reached in the rule of #%ld (%s): %s in use after "
                "it, %s of them recomputed values\n", emi_bytes(b1, sizeof b1, rep->peak_seen),
                rep->peak_step, rep->peak_rule, emi_bytes(b2, sizeof b2, rep->peak_in_use),
                emi_bytes(b3, sizeof b3, rep->peak_alive));
    em_clear_error();
}

/* em_backward_hooked's parameters and hook (NULL for em_backward). */
typedef struct emi_bw_hook {
    const em_tensor *const *params;
    size_t n;
    em_grad_ready_fn fn;
    void *ctx;
} emi_bw_hook;

/* Calls the hook for the parameter whose leaf node is `leaf`, if it is one of them. */
static em_status emi_bw_hook_call(const emi_bw_hook *h, const emi_ad_node *leaf,
                                  const em_tensor *grad) {
    if (!h) return EM_OK;
    for (size_t i = 0; i < h->n; i++)
        if (h->params[i]->ad == leaf) return h->fn(h->ctx, i, grad);
    return EM_OK;
}

static em_status emi_backward(const char *fn, const em_tensor *loss, const emi_bw_hook *hook,
                              em_grads **out) {
    EMI_TRY(emi_check_tensor(fn, "loss", loss));
    EMI_TRY(emi_check_out(fn, out));
    /* a region still open here is most likely an em_checkpoint_end that was missed */
    if (emi_ad_region())
        return emi_fail(EM_ERR_STATE, "%s: called inside a checkpoint region (end it first "
                        "with em_checkpoint_end)", fn);
    if (!loss->ad)
        return emi_fail(EM_ERR_STATE, "%s: the loss is not tracked (its inputs must live on an "
                        "autodiff device, e.g. ref+autodiff)", fn);
    if (emi_numel(loss->v.shape, loss->v.rank) != 1)
        return emi_fail(EM_ERR_SHAPE, "%s: the loss must have one element, it has %lld", fn,
                        (long long)emi_numel(loss->v.shape, loss->v.rank));
    em_grads *grads = calloc(1, sizeof *grads);
    if (!grads) return emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
    emi_order order = {0};
    em_status s = emi_collect(loss->ad, &order);
    /* which nodes lead to a leaf that wants a gradient (parents come first in order) */
    for (size_t k = 0; s == EM_OK && k < order.n; k++) {
        emi_ad_node *n = order.v[k];
        n->need = !n->rule && n->requires_grad;
        for (int i = 0; i < n->nin && !n->need; i++) n->need = n->in[i].node && n->in[i].node->need;
    }
    /* the direct reads of each node's value by the rules still to run */
    for (size_t k = 0; s == EM_OK && k < order.n; k++) {
        order.v[k]->uses = 0;
        order.v[k]->redo = -1;
    }
    for (size_t k = 0; s == EM_OK && k < order.n; k++) {
        emi_ad_node *n = order.v[k];
        if (!n->rule || !n->need) continue;
        if (n->rule->needs & EMI_NEED_OUT) n->uses++;
        for (int i = 0; i < n->nin; i++)
            if (emi_reads_parent(n, i)) n->in[i].node->uses++;
    }
    emi_ckpt_report rep = {0};
    emi_report_row *rows = NULL;
    if (s == EM_OK && emi_report_wanted()) {
        emi_rep = &rep;
        rows = emi_report_begin(&order);
        rep.has_mem = em_device_memory(loss->dev, &rep.begin) == EM_OK;
        rep.peak_seen = rep.begin.peak_bytes;
        rep.peak_step = -1;
        em_clear_error();
    }
    if (s == EM_OK) {
        em_device inner = loss->dev;
        inner.autodiff = false;
        inner.checkpointing = EM_CKPT_NONE;
        em_tensor *seed;
        s = em_full(loss->v.shape, loss->v.rank, 1.0, loss->dtype, inner, &seed);
        if (s == EM_OK) loss->ad->grad = seed;
    }
    for (size_t k = order.n; s == EM_OK && k-- > 0;) {
        emi_ad_node *n = order.v[k];
        rep.step = (long)(order.n - 1 - k);
        s = emi_flush_pieces(n);
        if (s != EM_OK) break;
        if (n->need && n->grad) {
            if (!n->rule) {
                if (n->requires_grad) {
                    em_tensor *g = n->grad;
                    s = emi_grads_add(grads, n, g);
                    if (s == EM_OK) {
                        n->grad = NULL;
                        s = emi_bw_hook_call(hook, n, g);
                    }
                }
            } else {
                /* what the rule reads stays while it runs, then goes when no later rule
                 * reads it */
                n->pinned++;
                for (int i = 0; i < n->nin; i++)
                    if (n->in[i].node) n->in[i].node->pinned++;
                n->done_in = 0;
                s = emi_run_rule(n);
                if (emi_rep && emi_rep->has_mem) emi_report_peak(n, loss->dev);
                n->pinned--;
                /* inputs the rule let go itself (emi_bw_input_done) are settled */
                const uint64_t done_in = n->done_in;
                n->done_in = 0;
                for (int i = 0; i < n->nin; i++)
                    if (n->in[i].node && !(i < 64 && (done_in & (1ull << i))))
                        n->in[i].node->pinned--;
                if (n->rule->needs & EMI_NEED_OUT) n->uses--;
                for (int i = 0; i < n->nin; i++) {
                    if (i < 64 && (done_in & (1ull << i))) continue;
                    if (!emi_reads_parent(n, i)) continue;
                    emi_ad_node *p = n->in[i].node;
                    if (--p->uses <= 0 && emi_cache_idle(p)) emi_cache_drop(p);
                }
            }
        }
        /* every consumer of n's value ran before n: what n holds for backward can go now,
         * not at the end, so that saved values die as the walk passes them (the parents
         * stay alive: `order` holds a reference to each node) */
        em_tensor_release(n->grad);
        n->grad = NULL;
        emi_cache_drop(n);
        if (n->rule) {
            n->done = true;
            emi_ad_node_spend(n);
        }
    }
    /* the tape is freed: every node this backward walked is spent, leaves excepted */
    for (size_t k = 0; k < order.n; k++) {
        emi_ad_node *n = order.v[k];
        n->mark = 0;
        em_tensor_release(n->grad);
        n->grad = NULL;
        emi_cache_drop(n);
        if (n->rule) {
            n->done = true;
            emi_ad_node_spend(n);
        }
    }
    if (rows) emi_report_print(stderr, &order, rows, &rep, loss);
    emi_rep = NULL;
    free(rows);
    for (size_t k = 0; k < order.n; k++) emi_ad_node_release(order.v[k]);
    free(order.v);
    if (s != EM_OK) {
        em_grads_release(grads);
        return s;
    }
    *out = grads;
    return EM_OK;
}

em_status em_grads_get(const em_grads *g, const em_tensor *param, em_tensor **out) {
    static const char fn[] = "em_grads_get";
    if (!g) return emi_fail(EM_ERR_ARG, "%s: grads is NULL", fn);
    EMI_TRY(emi_check_tensor(fn, "param", param));
    EMI_TRY(emi_check_out(fn, out));
    for (size_t i = 0; param->ad && i < g->n; i++) {
        if (g->leaf[i] == param->ad) {
            /* in a scope, a handle of the caller's own that the scope releases */
            return emi_share(g->grad[i], out);
        }
    }
    *out = NULL;
    return EM_OK;
}

void em_grads_release(em_grads *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n; i++) {
        emi_ad_node_release(g->leaf[i]);
        em_tensor_release(g->grad[i]);
    }
    free(g->leaf);
    free(g->grad);
    free(g);
}

static em_status emi_grads_add_all(em_grads *acc, const em_grads *g) {
    static const char fn[] = "em_grads_add";
    if (!acc) return emi_fail(EM_ERR_ARG, "%s: acc is NULL", fn);
    if (!g) return emi_fail(EM_ERR_ARG, "%s: g is NULL", fn);
    if (acc == g) return emi_fail(EM_ERR_ARG, "%s: acc and g are the same set", fn);
    /* every sum first, into sum[j] for g's entry j (NULL: a leaf acc lacks): a failure
     * changes nothing */
    em_tensor **sum = calloc(g->n ? g->n : 1, sizeof *sum);
    size_t *at = calloc(g->n ? g->n : 1, sizeof *at);
    em_status s = sum && at ? EM_OK : emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
    size_t extra = 0;
    for (size_t j = 0; j < g->n && s == EM_OK; j++) {
        at[j] = acc->n;
        for (size_t i = 0; i < acc->n; i++)
            if (acc->leaf[i] == g->leaf[j]) {
                at[j] = i;
                break;
            }
        if (at[j] == acc->n) extra++;
        else s = em_add(acc->grad[at[j]], g->grad[j], &sum[j]);
    }
    if (s == EM_OK && acc->n + extra > acc->cap) {
        size_t cap = acc->n + extra;
        emi_ad_node **l = realloc(acc->leaf, cap * sizeof *l);
        if (l) acc->leaf = l;
        em_tensor **t = l ? realloc(acc->grad, cap * sizeof *t) : NULL;
        if (t) {
            acc->grad = t;
            acc->cap = cap;
        } else {
            s = emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
        }
    }
    if (s == EM_OK)
        for (size_t j = 0; j < g->n; j++) {
            if (sum[j]) {
                em_tensor_release(acc->grad[at[j]]);
                acc->grad[at[j]] = sum[j];
                sum[j] = NULL;
            } else {
                /* cannot fail: capacity reserved above */
                atomic_fetch_add_explicit(&g->leaf[j]->refs, 1, memory_order_relaxed);
                em_tensor_retain(g->grad[j]);
                acc->leaf[acc->n] = g->leaf[j];
                acc->grad[acc->n] = g->grad[j];
                acc->n++;
            }
        }
    for (size_t j = 0; sum && j < g->n; j++) em_tensor_release(sum[j]);
    free(sum);
    free(at);
    return s;
}

em_status em_grads_create(em_grads **out) {
    static const char fn[] = "em_grads_create";
    EMI_TRY(emi_check_out(fn, out));
    em_grads *g = calloc(1, sizeof *g);
    if (!g) return emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
    *out = g;
    return EM_OK;
}

em_status em_grads_set(em_grads *g, const em_tensor *param, em_tensor *grad) {
    static const char fn[] = "em_grads_set";
    if (!g) return emi_fail(EM_ERR_ARG, "%s: grads is NULL", fn);
    EMI_TRY(emi_check_tensor(fn, "param", param));
    EMI_TRY(emi_check_tensor(fn, "grad", grad));
    if (!em_tensor_requires_grad(param))
        return emi_fail(EM_ERR_STATE, "%s: param is not a leaf that requires grad "
                                      "(em_tensor_require_grad)", fn);
    if (grad->ad)
        return emi_fail(EM_ERR_STATE, "%s: grad is tracked: em_tensor_detach it first", fn);
    EMI_TRY(emi_check_same_device(fn, param, grad));
    EMI_TRY(emi_check_same_dtype(fn, param, grad));
    if (!emi_same_shape(param->v.shape, param->v.rank, grad->v.shape, grad->v.rank)) {
        char a[128], b[128];
        return emi_fail(EM_ERR_SHAPE, "%s: grad %s and param %s differ in shape", fn,
                        emi_shape_str(grad->v.shape, grad->v.rank, a, sizeof a),
                        emi_shape_str(param->v.shape, param->v.rank, b, sizeof b));
    }
    for (size_t i = 0; i < g->n; i++)
        if (g->leaf[i] == param->ad) {
            em_tensor_retain(grad);
            em_tensor_release(g->grad[i]);
            g->grad[i] = grad;
            return EM_OK;
        }
    if (g->n == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 8;
        emi_ad_node **l = realloc(g->leaf, cap * sizeof *l);
        if (!l) return emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
        g->leaf = l;
        em_tensor **t = realloc(g->grad, cap * sizeof *t);
        if (!t) return emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
        g->grad = t;
        g->cap = cap;
    }
    atomic_fetch_add_explicit(&param->ad->refs, 1, memory_order_relaxed);
    em_tensor_retain(grad);
    g->leaf[g->n] = param->ad;
    g->grad[g->n] = grad;
    g->n++;
    return EM_OK;
}

/* Backward keeps what it makes (the gradients em_grads holds, the tape's scratch): nothing it
 * creates joins an open tensor scope (src/core/scope.c). */
em_status em_backward(const em_tensor *loss, em_grads **out) {
    emi_scope_suspend();
    em_status s = emi_backward("em_backward", loss, NULL, out);
    emi_scope_resume();
    return s;
}

em_status em_backward_hooked(const em_tensor *loss, const em_tensor *const *params,
                             size_t nparams, em_grad_ready_fn hook, void *ctx, em_grads **out) {
    static const char fn[] = "em_backward_hooked";
    if (!hook) return emi_fail(EM_ERR_ARG, "%s: hook is NULL", fn);
    if (nparams > 0 && !params) return emi_fail(EM_ERR_ARG, "%s: params is NULL", fn);
    for (size_t i = 0; i < nparams; i++) {
        char what[32];
        snprintf(what, sizeof what, "params[%zu]", i);
        EMI_TRY(emi_check_tensor(fn, what, params[i]));
    }
    emi_bw_hook h = {params, nparams, hook, ctx};
    emi_scope_suspend();
    em_status s = emi_backward(fn, loss, &h, out);
    emi_scope_resume();
    return s;
}

em_status em_grads_add(em_grads *acc, const em_grads *g) {
    emi_scope_suspend();
    em_status s = emi_grads_add_all(acc, g);
    emi_scope_resume();
    return s;
}
