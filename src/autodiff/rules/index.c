/* index.c — backward rules of the indexing ops: gather (and the values of sort and topk,
 * which are a gather of x by the indices the op found), scatter_add, index_select. The index
 * tensors are inputs of the node (untracked constants, saved because the rules need them). */
#include "autodiff/rules/rules.h"

/* The index tensor as the rules use it: on its inner device, so that the float results it
 * takes part in are not leaves of an autodiff device. A new reference. */
static em_status inner_index(const em_tensor *idx, em_tensor **out) {
    em_device dev = em_tensor_device(idx);
    dev.autodiff = false;
    dev.checkpointing = EM_CKPT_NONE;
    return em_to_device(idx, dev, out);
}

/* zeros shaped like input 0 with the gradient added at index (input 1) along dim: the
 * gradient of every op that reads x at index positions. */
static em_status scatter_grad(emi_ad_bw *bw, int dim, const em_tensor *index, em_tensor **out) {
    int rank;
    const int64_t *shape = emi_bw_in_shape(bw, 0, &rank);
    return emi_scatter_add_zeros(shape, rank, dim, index, bw->grad, out);
}

/* ---- gather(x, index), sort values, topk values: inputs (x, index), params int dim ---- */

static em_status gather_forward(const void *p, em_tensor *const *in, int nin, em_tensor **out) {
    (void)nin;
    em_tensor *idx = NULL;
    em_status s = inner_index(in[1], &idx);
    if (s == EM_OK) s = em_gather(in[0], *(const int *)p, idx, out);
    em_tensor_release(idx);
    return s;
}

static em_status gather_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    em_tensor *index, *idx = NULL;
    em_status s = emi_bw_input(bw, 1, &index);
    if (s == EM_OK) s = inner_index(index, &idx);
    if (s == EM_OK) s = scatter_grad(bw, *(const int *)bw->params, idx, &bw->gin[0]);
    em_tensor_release(idx);
    return s;
}

const emi_ad_rule emi_rule_gather = {"gather", false, EMI_NEED_IN(1), gather_forward,
                                     gather_backward};
const emi_ad_rule emi_rule_sort = {"sort", false, EMI_NEED_IN(1), gather_forward,
                                   gather_backward};
const emi_ad_rule emi_rule_topk = {"topk", false, EMI_NEED_IN(1), gather_forward,
                                   gather_backward};
const emi_ad_rule emi_rule_cummax = {"cummax", false, EMI_NEED_IN(1), gather_forward,
                                     gather_backward};
const emi_ad_rule emi_rule_cummin = {"cummin", false, EMI_NEED_IN(1), gather_forward,
                                     gather_backward};

/* ---- scatter_add(x, index, src): inputs (x, index, src), params int dim ---- */

static em_status scatter_add_forward(const void *p, em_tensor *const *in, int nin,
                                     em_tensor **out) {
    (void)nin;
    em_tensor *idx = NULL;
    em_status s = inner_index(in[1], &idx);
    if (s == EM_OK) s = em_scatter_add(in[0], *(const int *)p, idx, in[2], out);
    em_tensor_release(idx);
    return s;
}

/* x gets the gradient; src gets it gathered at index over index's extent, and zeros where
 * src reaches past index (the op did not read those). */
static em_status scatter_add_backward(emi_ad_bw *bw) {
    em_status s = EM_OK;
    if (bw->need[0]) {
        em_tensor_retain(bw->grad);
        bw->gin[0] = bw->grad;
    }
    if (!bw->need[2]) return EM_OK;
    int d = *(const int *)bw->params;
    em_tensor *index, *idx = NULL, *g = NULL;
    s = emi_bw_input(bw, 1, &index);
    if (s == EM_OK) s = inner_index(index, &idx);
    if (s == EM_OK) s = em_gather(bw->grad, d, idx, &g);
    em_tensor_release(idx);
    int rank;
    const int64_t *shape = emi_bw_in_shape(bw, 2, &rank);
    /* pad with zeros, dim by dim, up to src's shape */
    for (int k = 0; k < rank && s == EM_OK; k++) {
        const int64_t *gs = em_tensor_shape(g);
        if (gs[k] == shape[k]) continue;
        int64_t zs[EM_MAX_RANK];
        for (int j = 0; j < rank; j++) zs[j] = gs[j];
        zs[k] = shape[k] - gs[k];
        em_tensor *z = NULL, *next = NULL;
        s = em_zeros(zs, rank, g->dtype, em_tensor_device(g), &z);
        const em_tensor *parts[2] = {g, z};
        if (s == EM_OK) s = em_cat(parts, 2, k, &next);
        em_tensor_release(z);
        em_tensor_release(g);
        g = next;
    }
    if (s == EM_OK) {
        bw->gin[2] = g;
        g = NULL;
    }
    em_tensor_release(g);
    return s;
}

const emi_ad_rule emi_rule_scatter_add = {"scatter_add", false, EMI_NEED_IN(1),
                                          scatter_add_forward, scatter_add_backward};

/* ---- index_select(x, index): inputs (x, index), params int dim ---- */

static em_status index_select_forward(const void *p, em_tensor *const *in, int nin,
                                      em_tensor **out) {
    (void)nin;
    em_tensor *idx = NULL;
    em_status s = inner_index(in[1], &idx);
    if (s == EM_OK) s = em_index_select(in[0], *(const int *)p, idx, out);
    em_tensor_release(idx);
    return s;
}

/* zeros with the gradient added back at the selected positions along dim: scatter_add with
 * the index laid along dim and expanded over the other dims, so that repeated indices sum. */
static em_status index_select_backward(emi_ad_bw *bw) {
    if (!bw->need[0]) return EM_OK;
    int d = *(const int *)bw->params;
    int rank;
    emi_bw_in_shape(bw, 0, &rank);
    if (rank == 0) { /* one element, selected once */
        em_tensor_retain(bw->grad);
        bw->gin[0] = bw->grad;
        return EM_OK;
    }
    int orank;
    const int64_t *oshape = emi_bw_out_shape(bw, &orank);
    int64_t ishape[EM_MAX_RANK];
    for (int k = 0; k < rank; k++) ishape[k] = k == d ? oshape[d] : 1;
    em_tensor *index, *idx = NULL, *r = NULL, *e = NULL;
    em_status s = emi_bw_input(bw, 1, &index);
    if (s == EM_OK) s = inner_index(index, &idx);
    if (s == EM_OK) s = em_reshape(idx, ishape, rank, &r);
    if (s == EM_OK) s = em_expand(r, oshape, orank, &e);
    if (s == EM_OK) s = scatter_grad(bw, d, e, &bw->gin[0]);
    em_tensor_release(idx);
    em_tensor_release(r);
    em_tensor_release(e);
    return s;
}

const emi_ad_rule emi_rule_index_select = {"index_select", false, EMI_NEED_IN(1),
                                           index_select_forward, index_select_backward};
