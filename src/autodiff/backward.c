/* backward.c — the engine: em_backward walks the graph from the loss, runs each node's rule
 * in reverse topological order, sums gradients where a tensor is used twice, recomputes the
 * values that BALANCED did not keep, and frees the tape. */
#include <stdlib.h>
#include <string.h>

#include "autodiff/rules/rules.h"
#include "autodiff/tape_impl.h"

struct em_grads {
    size_t n, cap;
    emi_ad_node **leaf; /* retained */
    em_tensor **grad;
};

/* ---- values during backward ---- */

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
    em_tensor **in = n->nin <= 8 ? stack_in : calloc((size_t)n->nin, sizeof *in);
    if (!in) return emi_fail(EM_ERR_NOMEM, "em_backward: out of memory");
    em_status s = EM_OK;
    for (int i = 0; i < n->nin && s == EM_OK; i++) {
        in[i] = NULL;
        if (n->in[i].value) in[i] = n->in[i].value;
        else if (n->in[i].node) s = emi_ad_value(n->in[i].node, &in[i]);
    }
    if (s == EM_OK) s = n->rule->forward(n->params, in, n->nin, &n->cache);
    if (in != stack_in) free(in);
    if (s == EM_OK) *out = n->cache;
    return s;
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
    em_tensor *sum;
    em_status s = em_add(p->grad, g, &sum);
    em_tensor_release(g);
    if (s != EM_OK) return s;
    em_tensor_release(p->grad);
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

static em_status emi_backward(const em_tensor *loss, em_grads **out) {
    static const char fn[] = "em_backward";
    EMI_TRY(emi_check_tensor(fn, "loss", loss));
    EMI_TRY(emi_check_out(fn, out));
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
        s = emi_flush_pieces(n);
        if (s != EM_OK) break;
        if (n->need && n->grad) {
            if (!n->rule) {
                if (n->requires_grad) {
                    s = emi_grads_add(grads, n, n->grad);
                    if (s == EM_OK) n->grad = NULL;
                }
            } else {
                s = emi_run_rule(n);
            }
        }
        /* every consumer of n's value ran before n: what n holds for backward can go now,
         * not at the end, so that saved values die as the walk passes them (the parents
         * stay alive: `order` holds a reference to each node) */
        em_tensor_release(n->grad);
        em_tensor_release(n->cache);
        n->grad = n->cache = NULL;
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
        em_tensor_release(n->cache);
        n->grad = n->cache = NULL;
        if (n->rule) {
            n->done = true;
            emi_ad_node_spend(n);
        }
    }
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

/* Backward keeps what it makes (the gradients em_grads holds, the tape's scratch): nothing it
 * creates joins an open tensor scope (src/core/scope.c). */
em_status em_backward(const em_tensor *loss, em_grads **out) {
    emi_scope_suspend();
    em_status s = emi_backward(loss, out);
    emi_scope_resume();
    return s;
}

em_status em_grads_add(em_grads *acc, const em_grads *g) {
    emi_scope_suspend();
    em_status s = emi_grads_add_all(acc, g);
    emi_scope_resume();
    return s;
}
