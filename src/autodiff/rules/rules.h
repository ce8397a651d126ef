/*
 * rules.h — the backward rules, one per differentiable op, declared for the ops that record
 * them. Each rule lives in src/autodiff/rules/<family>.c next to nothing but other rules.
 */
#ifndef EMBER_RULES_H
#define EMBER_RULES_H

#include "autodiff/autodiff.h"

/* convert.c */
extern const emi_ad_rule emi_rule_cast;      /* params: em_dtype (the target) */
extern const emi_ad_rule emi_rule_clone;     /* params: em_dtype (ignored) */
extern const emi_ad_rule emi_rule_to_device; /* params: em_device (the source, inner) */

/* elementwise_unary.c: indexed by em_unary_op (NULL for ops with no float result). */
typedef struct emi_rule_unary_params {
    em_unary_op op;
    double p[3]; /* EM_UN_CLAMP: lo, hi; EM_UN_SOFTPLUS: beta, threshold; EM_UN_NAN_TO_NUM:
                    the values for NaN, +inf, -inf */
} emi_rule_unary_params;
extern const emi_ad_rule *const emi_rules_unary[EM_UN_COUNT];

/* elementwise_binary.c: indexed by em_binary_op (NULL for comparisons and logical ops);
 * params: the em_binary_op. */
extern const emi_ad_rule *const emi_rules_binary[EM_BIN_COUNT];

/* elementwise_scalar.c: a op s, indexed by em_binary_op; params: emi_rule_scalar_params. */
typedef struct emi_rule_scalar_params {
    em_binary_op op;
    double s; /* already in a's dtype */
} emi_rule_scalar_params;
extern const emi_ad_rule *const emi_rules_scalar[EM_BIN_COUNT];

/* The consuming recomputes of the three families (emi_rule_forward_own, elementwise_scalar.c,
 * picks one): relu, add / sub / mul / div and a * s, a + s in the consumed input's buffer,
 * the other ops as their forward, the consumed inputs released after. */
em_status emi_unary_forward_own(const void *params, em_tensor **in, const bool *own, int nin,
                                em_tensor **out);
em_status emi_binary_forward_own(const void *params, em_tensor **in, const bool *own, int nin,
                                 em_tensor **out);
em_status emi_scalar_forward_own(const void *params, em_tensor **in, const bool *own, int nin,
                                 em_tensor **out);

/* elementwise_binary.c: where(cond, a, b) with inputs (a, b, cond); no params. */
extern const emi_ad_rule emi_rule_where;

/* elementwise_binary.c: clamp_tensor with inputs (x, lo or NULL, hi or NULL). */
typedef struct emi_rule_clamp_tensor_params {
    bool has_lo, has_hi;
} emi_rule_clamp_tensor_params;
extern const emi_ad_rule emi_rule_clamp_tensor;

/* ==== reductions and linear algebra (adred) ==== */

/* reduce.c: sum mean prod max min var logsumexp, whole and _dim forms, indexed by
 * em_reduce_op (NULL for argmax/argmin); params: emi_rule_reduce_params. */
typedef struct emi_rule_reduce_params {
    em_reduce_op op;
    int dim;        /* the normalized dim, or -1: reduced as a whole (0-d result) */
    bool keepdim;   /* the _dim form kept the reduced dim */
    int correction; /* var */
} emi_rule_reduce_params;
extern const emi_ad_rule *const emi_rules_reduce[EM_RED_COUNT];

/* reduce.c: cumsum, softmax, log_softmax; params: int, the normalized dim (0 for 0-d). */
extern const emi_ad_rule emi_rule_cumsum;
extern const emi_ad_rule emi_rule_softmax;
extern const emi_ad_rule emi_rule_log_softmax;
/* reduce.c: cumprod; params: int, the normalized dim (0 for 0-d); needs x and the output. */
extern const emi_ad_rule emi_rule_cumprod;
/* index.c: the values of cummax / cummin, a gather of x by the indices found: inputs
 * (x, indices), params int dim (as sort's values). */
extern const emi_ad_rule emi_rule_cummax;
extern const emi_ad_rule emi_rule_cummin;

/* linalg.c: matmul (numpy.matmul rules, compute-bound); no params. */
extern const emi_ad_rule emi_rule_matmul;

/* ==== end reductions and linear algebra ==== */

/* ==== neural and random (adnn): rules in nn.c; internal entry points in src/ops ==== */

/* conv.c: conv1d, conv2d, conv_transpose2d (compute-bound); inputs (x, w, bias or NULL). */
typedef struct emi_rule_conv_params {
    em_conv_params p; /* the public params as resolved (recompute) */
    em_conv_args a;   /* the 4-d kernel args (conv1d: H axis is the identity) */
} emi_rule_conv_params;
extern const emi_ad_rule emi_rule_conv1d;
extern const emi_ad_rule emi_rule_conv2d;
extern const emi_ad_rule emi_rule_conv_transpose2d;

/* pool.c: max_pool2d with inputs (x, indices [EM_I64]); avg_pool2d with input x; params:
 * emi_rule_pool_params. adaptive_avg_pool2d: input x, params int64_t[2] (oh, ow). */
typedef struct emi_rule_pool_params {
    em_pool_params p; /* the public params (recompute and backward) */
} emi_rule_pool_params;
extern const emi_ad_rule emi_rule_max_pool2d;
extern const emi_ad_rule emi_rule_avg_pool2d;
extern const emi_ad_rule emi_rule_adaptive_avg_pool2d;

/* nn.c: layer_norm with inputs (x, weight or NULL, bias or NULL). */
typedef struct emi_rule_layer_norm_params {
    int normalized_ndim;
    double eps;
} emi_rule_layer_norm_params;
extern const emi_ad_rule emi_rule_layer_norm;

/* Internal entry points (src/ops/conv.c, pool.c) of the backward kernels: checked, routed to
 * the backend slot, untracked inputs only (EM_ERR_UNSUPPORTED for tracked ones). */
/** gw [gy.C, x.C/groups, kernel[0], kernel[1]]: the weight gradient of the 4-d conv2d(x, w)
 *  with args a, whose output gradient is gy (its shape must be that conv's output shape). */
em_status emi_conv2d_weight_grad(const em_tensor *x, const em_tensor *gy, const int64_t kernel[2],
                                 const em_conv_args *a, em_tensor **out);
/** gx of shape xshape [N, C, H, W]: the input gradient of avg_pool2d(x, p) given gy. */
em_status emi_avg_pool2d_backward(const em_tensor *gy, const int64_t xshape[4],
                                  const em_pool_params *p, em_tensor **out);
/** gx of shape xshape: the input gradient of adaptive_avg_pool2d(x, gy's H, gy's W). */
em_status emi_adaptive_avg_pool2d_backward(const em_tensor *gy, const int64_t xshape[4],
                                           em_tensor **out);

/** zeros of `shape` (src's dtype and device) with src added at index along dim: what
 *  em_scatter_add makes of fresh zeros, without copying them (src/ops/index.c; the checks of
 *  em_scatter_add, untracked inputs only). */
em_status emi_scatter_add_zeros(const int64_t *shape, int rank, int dim, const em_tensor *index,
                                const em_tensor *src, em_tensor **out);

/* ==== normalization: rules in norm.c, entry points in src/ops/norm.c ==== */
/* batch_norm with inputs (x, weight?, bias?, save_mean, save_invstd): the saved statistics
 * are untracked [C] tensors the forward made (the running ones are buffers, not inputs).
 * Training: emi_rule_batch_norm (recomputable); eval: emi_rule_batch_norm_eval (not). */
typedef struct emi_rule_batch_norm_params {
    bool training;
    double eps;
} emi_rule_batch_norm_params;
extern const emi_ad_rule emi_rule_batch_norm;
extern const emi_ad_rule emi_rule_batch_norm_eval;
/* group_norm with inputs (x, weight?, bias?, save_mean [N, G], save_invstd [N, G]). */
typedef struct emi_rule_group_norm_params {
    int64_t groups;
    double eps;
} emi_rule_group_norm_params;
extern const emi_ad_rule emi_rule_group_norm;
/* rms_norm with inputs (x, weight?, save_invrms [rows]). */
typedef struct emi_rule_rms_norm_params {
    int normalized_ndim;
    double eps;
} emi_rule_rms_norm_params;
extern const emi_ad_rule emi_rule_rms_norm;
/** The gradients of batch_norm, untracked inputs: gy and x [N, C, ...] (one shape), mean and
 *  invstd [C] (what the forward saved), weight [C] or NULL (1); each of gx (x's shape), gw
 *  and gb ([C]) is written when not NULL. Routed to the batch_norm_backward slot, composed
 *  from public ops when the backend leaves it NULL. */
em_status emi_batch_norm_backward(const em_tensor *gy, const em_tensor *x, const em_tensor *mean,
                                  const em_tensor *invstd, const em_tensor *weight, bool training,
                                  em_tensor **gx, em_tensor **gw, em_tensor **gb);

/* ==== attention: the rule in attention.c, the entry points in src/ops/composite.c ==== */
/* scaled_dot_product_attention through the sdpa slots, with inputs (q, k, v, mask?, lse):
 * lse [B..., L] is the untracked per-row logsumexp the forward saved; the mask gets no
 * gradient (a float mask in the graph takes the composed path). scale is resolved (> 0). */
typedef struct emi_rule_sdpa_params {
    bool causal;
    double scale, dropout_p;
    uint64_t seed;
} emi_rule_sdpa_params;
extern const emi_ad_rule emi_rule_sdpa;
/** dq, dk, dv with the full broadcast batch dims (untracked inputs; the caller sums
 *  broadcast dims), through the backend's sdpa_backward slot. */
em_status emi_sdpa_backward(const em_tensor *q, const em_tensor *k, const em_tensor *v,
                            const em_tensor *mask, const em_tensor *out, const em_tensor *dout,
                            const em_tensor *lse, const emi_rule_sdpa_params *p, em_tensor **dq,
                            em_tensor **dk, em_tensor **dv);

/* ==== end neural and random ==== */

/* ==== layout and indexing (adlay): rules in layout.c and index.c ==== */

/* layout.c: reshape, flatten, squeeze (and squeeze_all), unsqueeze, expand; params: the
 * output's shape. */
typedef struct emi_rule_shape_params {
    int rank;
    int64_t shape[EM_MAX_RANK];
} emi_rule_shape_params;
extern const emi_ad_rule emi_rule_reshape;
extern const emi_ad_rule emi_rule_flatten;
extern const emi_ad_rule emi_rule_squeeze;
extern const emi_ad_rule emi_rule_unsqueeze;
extern const emi_ad_rule emi_rule_expand;

/* layout.c: permute, transpose; params: the normalized permutation (out dim i is in dim
 * perm[i]). */
typedef struct emi_rule_perm_params {
    int rank;
    int perm[EM_MAX_RANK];
} emi_rule_perm_params;
extern const emi_ad_rule emi_rule_permute;
extern const emi_ad_rule emi_rule_transpose;

/* layout.c: slice, each piece of split, slice_assign (inputs x, value); params: the slice. */
typedef struct emi_rule_slice_params {
    int dim; /* normalized */
    int64_t start, stop, step;
} emi_rule_slice_params;
extern const emi_ad_rule emi_rule_slice;
extern const emi_ad_rule emi_rule_split;
extern const emi_ad_rule emi_rule_slice_assign;

/* layout.c: flip; params: the normalized flipped dims, without repeats. */
typedef struct emi_rule_flip_params {
    int ndims;
    int dims[EM_MAX_RANK];
} emi_rule_flip_params;
extern const emi_ad_rule emi_rule_flip;

/* layout.c: cat and stack (inputs: the pieces); params: int, the normalized dim. */
extern const emi_ad_rule emi_rule_cat;
extern const emi_ad_rule emi_rule_stack;

/* layout.c: repeat; params: the reps. */
typedef struct emi_rule_repeat_params {
    int nreps;
    int64_t reps[EM_MAX_RANK];
} emi_rule_repeat_params;
extern const emi_ad_rule emi_rule_repeat;

/* index.c: inputs (x, index [int]); params: int, the normalized dim. sort and topk record
 * their values output as a gather of x by the indices they found (inputs x, indices). */
extern const emi_ad_rule emi_rule_gather;
extern const emi_ad_rule emi_rule_sort;
extern const emi_ad_rule emi_rule_topk;
extern const emi_ad_rule emi_rule_index_select;
/* index.c: scatter_add with inputs (x, index [int], src); params: int, the normalized dim. */
extern const emi_ad_rule emi_rule_scatter_add;

/* ==== end layout and indexing ==== */

#endif
