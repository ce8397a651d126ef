/* attention.c — the backward rule of scaled_dot_product_attention when the backend computes
 * it through its sdpa slots (src/ops/composite.c): the saved q, k, v, out and per-row
 * logsumexp go to the sdpa_backward slot, which recomputes the attention weights block by
 * block; the gradients of broadcast batch dims are summed back to each input's shape. */
#include "autodiff/rules/rules.h"

static em_status sdpa_forward(const void *p, em_tensor *const *in, int nin, em_tensor **out) {
    (void)nin;
    const emi_rule_sdpa_params *r = p;
    return em_scaled_dot_product_attention(in[0], in[1], in[2], in[3], r->dropout_p, r->causal,
                                           r->scale, r->seed, out);
}

static em_status sdpa_backward(emi_ad_bw *bw) {
    const emi_rule_sdpa_params *p = bw->params;
    em_tensor *in[5] = {NULL}, *o = NULL, *g[3] = {NULL};
    em_status s = EM_OK;
    int mr = -1;
    (void)emi_bw_in_shape(bw, 3, &mr); /* rank -1: no mask */
    for (int i = 0; i < 5 && s == EM_OK; i++)
        if (i != 3 || mr >= 0) s = emi_bw_input(bw, i, &in[i]);
    if (s == EM_OK) s = emi_bw_output(bw, &o);
    if (s == EM_OK)
        s = emi_sdpa_backward(in[0], in[1], in[2], in[3], o, bw->grad, in[4], p, &g[0], &g[1],
                              &g[2]);
    for (int i = 0; i < 3 && s == EM_OK; i++) {
        if (!bw->need[i]) continue;
        int r = 0;
        const int64_t *sh = emi_bw_in_shape(bw, i, &r);
        s = emi_ad_unbroadcast(g[i], sh, r, &bw->gin[i]);
    }
    for (int i = 0; i < 3; i++) em_tensor_release(g[i]);
    return s;
}

const emi_ad_rule emi_rule_sdpa = {"scaled_dot_product_attention", true,
                                   EMI_NEED_ALL_IN | EMI_NEED_OUT, sdpa_forward, sdpa_backward};
