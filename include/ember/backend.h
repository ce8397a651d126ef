/*
 * backend.h — the contract a backend implements.
 *
 * A backend is a table of function pointers (em_backend_ops) plus a per-device context. It owns
 * its memory (alloc/free/read/write) and its kernels. The core never touches a backend's
 * memory except through this table.
 *
 * Division of labour:
 *   - The core checks every argument (dtypes, shapes, dims, devices), computes output shapes,
 *     allocates the output buffer through `alloc`, and builds the views the kernel reads.
 *     A kernel is only ever called with valid arguments, so kernels do no checking beyond
 *     what their runtime can fail at (an out-of-memory device, a driver error).
 *   - Views (em_view) describe a tensor inside a buffer: shape, strides in elements (0 for a
 *     broadcast dim, negative for a flipped one) and an element offset. Outputs are
 *     fresh, contiguous, row-major views unless an op is written in place (then the output
 *     view is the input's, also contiguous), except for `copy`, whose output may be any view. Inputs may be any strided view unless the
 *     backend clears EM_CAP_STRIDED_INPUTS, in which case the core passes contiguous
 *     inputs (it copies with `copy` first, and `copy` must accept strided inputs).
 *   - Binary kernels get both inputs already broadcast to the output's shape (stride-0
 *     dims), so they never broadcast themselves.
 *   - A NULL slot means "not implemented natively"; the core then returns
 *     EM_ERR_UNSUPPORTED naming the op and backend, or composes it from other slots.
 *   - Every kernel returns EM_OK or a status; on failure it sets a message with
 *     em_backend_set_error().
 *
 * Out-of-tree backends fill an em_backend_ops with abi_version = EM_BACKEND_ABI_VERSION and
 * call em_backend_register().
 */
#ifndef EMBER_BACKEND_H
#define EMBER_BACKEND_H

#include "ember.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 2: read_many appended; 3: unary_backward, adam_step, batch_norm, batch_norm_backward,
 * group_norm and rms_norm appended; 4: cumulative, sdpa and sdpa_backward appended;
 * 5: quantize, dequantize, qmatmul appended (and em_quant_scheme grew) */
#define EM_BACKEND_ABI_VERSION 5u

/** A tensor's placement inside a backend buffer. */
typedef struct em_view {
    void *buf;                      /* the backend's buffer handle */
    em_dtype dtype;
    int rank;
    int64_t shape[EM_MAX_RANK];
    int64_t strides[EM_MAX_RANK];   /* in elements */
    int64_t offset;                 /* in elements, from the start of buf */
} em_view;

typedef enum em_unary_op {
    EM_UN_NEG = 0, EM_UN_ABS, EM_UN_EXP, EM_UN_LOG, EM_UN_LOG1P, EM_UN_SQRT, EM_UN_RSQRT,
    EM_UN_SIN, EM_UN_COS, EM_UN_TANH, EM_UN_SIGMOID, EM_UN_RELU, EM_UN_GELU, EM_UN_SILU,
    EM_UN_ERF, EM_UN_FLOOR, EM_UN_CEIL, EM_UN_ROUND, EM_UN_RECIP, EM_UN_SIGN,
    EM_UN_CLAMP,       /* params[0] = lo, params[1] = hi */
    EM_UN_LOGICAL_NOT, /* bool -> bool */
    EM_UN_SOFTPLUS,    /* params[0] = beta, params[1] = threshold (PyTorch's softplus) */
    EM_UN_TAN, EM_UN_ASIN, EM_UN_ACOS, EM_UN_ATAN, EM_UN_SINH, EM_UN_COSH, EM_UN_EXPM1,
    EM_UN_LOG2, EM_UN_LOG10,
    EM_UN_ISNAN, EM_UN_ISINF, EM_UN_ISFINITE, /* float -> bool output */
    EM_UN_NAN_TO_NUM,  /* params[0] = for NaN, params[1] = for +inf, params[2] = for -inf */
    EM_UN_COUNT
} em_unary_op;

typedef enum em_binary_op {
    EM_BIN_ADD = 0, EM_BIN_SUB, EM_BIN_MUL, EM_BIN_DIV, EM_BIN_POW, EM_BIN_REM,
    EM_BIN_MAX, EM_BIN_MIN,
    EM_BIN_EQ, EM_BIN_NE, EM_BIN_LT, EM_BIN_LE, EM_BIN_GT, EM_BIN_GE, /* -> bool output */
    EM_BIN_AND, EM_BIN_OR,                                             /* bool -> bool */
    EM_BIN_ATAN2,                                                      /* atan2(a, b), float */
    EM_BIN_XOR,                                                        /* bool -> bool */
    EM_BIN_COUNT
} em_binary_op;

/** True for the unary ops whose output is EM_BOOL whatever the input (isnan isinf isfinite;
 *  logical_not is bool -> bool). */
static inline bool em_unary_op_is_bool(em_unary_op op) {
    return op == EM_UN_LOGICAL_NOT || op == EM_UN_ISNAN || op == EM_UN_ISINF ||
           op == EM_UN_ISFINITE;
}

/** True for the binary ops whose output is EM_BOOL (comparisons and logical ops). */
static inline bool em_binary_op_is_bool(em_binary_op op) {
    return (op >= EM_BIN_EQ && op <= EM_BIN_OR) || op == EM_BIN_XOR;
}

typedef enum em_reduce_op {
    EM_RED_SUM = 0, EM_RED_MEAN, EM_RED_PROD, EM_RED_MAX, EM_RED_MIN,
    EM_RED_ARGMAX, EM_RED_ARGMIN, /* -> EM_I64 output */
    EM_RED_VAR,                   /* params[0] = correction */
    EM_RED_LOGSUMEXP,
    EM_RED_COUNT
} em_reduce_op;

/** The cumulative ops along a dim besides cumsum (the cumulative slot). */
typedef enum em_cum_op {
    EM_CUM_PROD = 0, /* running product */
    EM_CUM_MAX,      /* running maximum, with the index it came from */
    EM_CUM_MIN,      /* running minimum, likewise */
    EM_CUM_COUNT
} em_cum_op;

typedef enum em_random_op {
    EM_RAND_UNIFORM = 0, /* params: lo, hi */
    EM_RAND_NORMAL,      /* params: mean, std */
    EM_RAND_BERNOULLI,   /* params: p */
    EM_RAND_COUNT
} em_random_op;

/** Neural op parameters, resolved by the core (no zeros meaning "default"). */
typedef struct em_conv_args {
    int64_t stride[2], padding[2], dilation[2], output_padding[2];
    int64_t groups;
} em_conv_args;

typedef struct em_pool_args {
    int64_t kernel[2], stride[2], padding[2], dilation[2];
    bool count_include_pad;
} em_pool_args;

/** One Adam / AdamW step's scalars, derived by the core from the optimizer's settings and the
 *  step count (src/nn/optim.c), so that every backend computes the same thing. See the
 *  adam_step slot for the arithmetic. */
typedef struct em_adam_args {
    double grad_scale;   /* g = grad * grad_scale */
    double weight_decay; /* Adam's L2 term: d = g + param * weight_decay; 0: d = g */
    double beta1, c1;    /* m = m * beta1 + d * c1 (c1 = 1 - beta1) */
    double beta2, c2;    /* v = v * beta2 + (d * d) * c2 (c2 = 1 - beta2) */
    double denom_scale;  /* den = sqrt(v) * denom_scale + denom_eps */
    double denom_eps;
    double step_scale;   /* q = (m / den) * step_scale */
    double decay;        /* param = param * decay - q (AdamW's decoupled decay: 1 - lr * wd) */
} em_adam_args;

/* Capabilities */
#define EM_CAP_STRIDED_INPUTS (1u << 0) /* kernels accept any strided input view */
#define EM_CAP_HOST_MEMORY    (1u << 1) /* buffers are host pointers (void* data) */
#define EM_CAP_ASYNC          (1u << 2) /* work may still run after a kernel returns */

typedef struct em_backend_ops {
    uint32_t abi_version; /* EM_BACKEND_ABI_VERSION */
    const char *name;     /* "ref", "cpu", ... : the text form of its devices */
    em_backend id;
    uint32_t caps;

    /* ---- devices ---- */
    /** How many devices of this backend the machine has (0: none, the backend is listed as
     *  compiled in but no device of it is present). */
    int (*device_count)(void);
    /** The context of device `index` (created at first use, kept until exit). */
    em_status (*open)(int index, void **ctx);

    /* ---- memory ---- */
    em_status (*alloc)(void *ctx, size_t bytes, void **buf);
    void (*free)(void *ctx, void *buf);
    em_status (*write)(void *ctx, void *buf, size_t offset, const void *src, size_t bytes);
    em_status (*read)(void *ctx, const void *buf, size_t offset, void *dst, size_t bytes);
    /** Waits for all work enqueued on the device. May be NULL for synchronous backends. */
    em_status (*sync)(void *ctx);
    /** Bytes in use and peak bytes of this device's allocator. May be NULL. */
    void (*memory)(void *ctx, size_t *in_use, size_t *peak);
    /** Sets the peak to the bytes in use now. May be NULL (then so is memory). */
    void (*memory_reset_peak)(void *ctx);
    /** Bytes a caching allocator keeps for reuse (not in use). May be NULL: none. */
    size_t (*memory_cached)(void *ctx);
    /** Gives cached memory back to the system. May be NULL. */
    void (*memory_release)(void *ctx);

    /* ---- creation ---- */
    /** out[...] = value (converted to out's dtype). */
    em_status (*fill)(void *ctx, const em_view *out, double value);
    /** out[i] = start + i * step (1-d out). */
    em_status (*arange)(void *ctx, const em_view *out, double start, double step);
    /** Philox-4x32-10 random numbers keyed by seed; see src/backends/ref/random.c for the
     *  exact mapping from counters to values, which every backend reproduces. */
    em_status (*random)(void *ctx, em_random_op op, const em_view *out, uint64_t seed,
                        const double *params);

    /* ---- elementwise ---- */
    /** Strided copy with dtype conversion (out and in have one shape). Also the cast. `out`
     *  may be a strided view too (any strides, negative ones included): cat, stack,
     *  slice_assign and repeat write through views of a fresh output. */
    em_status (*copy)(void *ctx, const em_view *out, const em_view *in);
    em_status (*unary)(void *ctx, em_unary_op op, const em_view *out, const em_view *in,
                       const double *params);
    /** a and b are broadcast to out's shape. Comparisons write bool outputs. */
    em_status (*binary)(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                        const em_view *b);
    /** out = a op s, where s is already representable in a's dtype. */
    em_status (*binary_scalar)(void *ctx, em_binary_op op, const em_view *out,
                               const em_view *a, double s);
    /** out = cond ? a : b, all three broadcast to out's shape. */
    em_status (*where)(void *ctx, const em_view *out, const em_view *cond, const em_view *a,
                       const em_view *b);

    /* ---- reductions ---- */
    /** Reduces `in` along dim (or over everything when dim < 0). out has in's shape with dim
     *  set to 1 (keepdim form), or is 0-d when dim < 0. */
    em_status (*reduce)(void *ctx, em_reduce_op op, const em_view *out, const em_view *in,
                        int dim, const double *params);
    /** Cumulative sum along dim. */
    em_status (*cumsum)(void *ctx, const em_view *out, const em_view *in, int dim);
    /** Softmax or log-softmax along dim. */
    em_status (*softmax)(void *ctx, const em_view *out, const em_view *in, int dim, bool log);

    /* ---- linear algebra ---- */
    /** out [..., m, n] = a [..., m, k] @ b [..., k, n]; a and b have out's rank, with batch
     *  dims already broadcast (stride 0) to out's. */
    em_status (*matmul)(void *ctx, const em_view *out, const em_view *a, const em_view *b);

    /* ---- indexing (index views are EM_I64 or EM_I32, already range-checked) ---- */
    em_status (*gather)(void *ctx, const em_view *out, const em_view *in, int dim,
                        const em_view *index);
    /** out already holds a copy of the base tensor; adds src at index along dim. */
    em_status (*scatter_add)(void *ctx, const em_view *out, int dim, const em_view *index,
                             const em_view *src);
    /** index is 1-d. */
    em_status (*index_select)(void *ctx, const em_view *out, const em_view *in, int dim,
                              const em_view *index);
    /** Stable sort along dim; values and/or indices (EM_I64) may be NULL. */
    em_status (*sort)(void *ctx, const em_view *values, const em_view *indices,
                      const em_view *in, int dim, bool descending);

    /* ---- neural (NCHW; 1-d ops come as 2-d with H = 1) ---- */
    /** bias may be NULL. */
    em_status (*conv2d)(void *ctx, const em_view *out, const em_view *x, const em_view *w,
                        const em_view *bias, const em_conv_args *a);
    em_status (*conv_transpose2d)(void *ctx, const em_view *out, const em_view *x,
                                  const em_view *w, const em_view *bias,
                                  const em_conv_args *a);
    /** indices (EM_I64) may be NULL. */
    em_status (*max_pool2d)(void *ctx, const em_view *out, const em_view *indices,
                            const em_view *x, const em_pool_args *a);
    em_status (*avg_pool2d)(void *ctx, const em_view *out, const em_view *x,
                            const em_pool_args *a);
    em_status (*adaptive_avg_pool2d)(void *ctx, const em_view *out, const em_view *x);
    /* ---- backward kernels the autodiff layer uses (the input gradient of conv2d is a
     *      conv_transpose2d, that of max_pool2d a scatter_add) ---- */
    /** gw [O, C/groups, KH, KW] = the weight gradient of conv2d(x, w) given gy (the output
     *  gradient), for the same args. */
    em_status (*conv2d_weight_grad)(void *ctx, const em_view *gw, const em_view *x,
                                    const em_view *gy, const em_conv_args *a);
    /** gx (x's shape) = the input gradient of avg_pool2d given gy. */
    em_status (*avg_pool2d_backward)(void *ctx, const em_view *gx, const em_view *gy,
                                     const em_pool_args *a);
    /** gx (x's shape) = the input gradient of adaptive_avg_pool2d given gy. */
    em_status (*adaptive_avg_pool2d_backward)(void *ctx, const em_view *gx, const em_view *gy);

    /** Normalizes over the trailing `norm_numel` elements of each row (x viewed as
     *  [rows, norm_numel], contiguous); weight/bias (contiguous, norm_numel) may be NULL. */
    em_status (*layer_norm)(void *ctx, const em_view *out, const em_view *x,
                            const em_view *weight, const em_view *bias, int64_t norm_numel,
                            double eps);

    /* ---- batched transfers (ABI 2) ---- */
    /** Reads n buffers' byte ranges at once (the remote backend: in one round trip): bytes[i]
     *  bytes from offset offsets[i] of bufs[i] into dsts[i]. May be NULL: the core then calls
     *  `read` n times. Used by em_read_many. */
    em_status (*read_many)(void *ctx, int n, const void *const *bufs, const size_t *offsets,
                           void *const *dsts, const size_t *bytes);

    /* ---- fused kernels (ABI 3) ----
     * Each may be NULL, and each may return EM_ERR_UNSUPPORTED for a case it does not handle
     * (an op, a dtype): the core then composes the same result from the slots above, as it
     * does for a NULL slot. Registering does not fill them from ref. Float dtypes only (f32,
     * f64, f16, bf16); all views of one dtype and shape. */
    /** gx = gy * f'(x), the input gradient of the unary op `op`, elementwise. gx is a fresh
     *  contiguous view; gy and the value given are any strided views (stride 0 included).
     *  Each op reads one value, the other pointer is NULL:
     *    x (the op's input):  ABS sign(x) (0 at 0), LOG 1/x (as gy / x), LOG1P 1/(1 + x)
     *                         (as gy / (1 + x)), SIN cos x, COS -sin x, GELU Phi(x) + x phi(x)
     *                         (the normal cdf and density), SILU s (1 + x (1 - s)) with
     *                         s = sigmoid(x), ERF 2/sqrt(pi) exp(-x^2), CLAMP gx = gy where
     *                         params[0] <= x <= params[1], else 0 (NaN x: 0; the bounds come
     *                         rounded to the dtype);
     *    y (the op's output): EXP y, SQRT 1/(2y) (as gy / (2y)), RSQRT -y^3/2, TANH 1 - y^2,
     *                         SIGMOID y (1 - y), RECIP -y^2, RELU gx = gy where y > 0, else 0.
     *  Any other op (NEG, the ops with no gradient, ops added later): EM_ERR_UNSUPPORTED.
     *  Computed in the dtype's arithmetic type or wider, rounded once on store (f16 / bf16
     *  through f32). */
    em_status (*unary_backward)(void *ctx, em_unary_op op, const em_view *gx, const em_view *x,
                                const em_view *y, const em_view *gy, const double *params);
    /** One Adam / AdamW step on one parameter, in place: param, exp_avg (m) and exp_avg_sq
     *  (v) are contiguous views of one shape, grad any strided view of it. Per element, in
     *  this order, each operation rounded to the arithmetic type (f64: double; f32, f16,
     *  bf16: float, the stored values rounded to the dtype at the end), every scalar of `a`
     *  first rounded to that type:
     *      g = grad * grad_scale;  d = weight_decay != 0 ? g + param * weight_decay : g;
     *      m = m * beta1 + d * c1;  v = v * beta2 + (d * d) * c2;
     *      den = sqrt(v) * denom_scale + denom_eps;  q = (m / den) * step_scale;
     *      param = param * decay - q
     *  (the arithmetic of the composed step, operation for operation: f32 and f64 results
     *  are the same bits). */
    em_status (*adam_step)(void *ctx, const em_view *param, const em_view *exp_avg,
                           const em_view *exp_avg_sq, const em_view *grad,
                           const em_adam_args *a);
    /* ---- normalization (ABI 3) ---- */
    /* Each of these may be NULL: the core then composes the op from the slots above (the
     * remote backend leaves them NULL). The core passes contiguous views, all of x's dtype,
     * and never an x without elements (a kernel given one writes nothing). */
    /** Batch normalization of x viewed as [N, C, S] (rank 3; out likewise). weight, bias
     *  ([C]) may be NULL. training: per channel, the mean and the biased variance over the
     *  N*S elements (N*S >= 2) normalize x; running_mean and running_var ([C], both or
     *  neither) are then updated in place, r = (1 - momentum) r + momentum stat, with the
     *  unbiased variance. Eval (running stats given): they normalize x. save_mean and
     *  save_invstd ([C], may be NULL) get the mean and 1/sqrt(var + eps) that were used. */
    em_status (*batch_norm)(void *ctx, const em_view *out, const em_view *save_mean,
                            const em_view *save_invstd, const em_view *x,
                            const em_view *weight, const em_view *bias,
                            const em_view *running_mean, const em_view *running_var,
                            bool training, double momentum, double eps);
    /** The gradients of batch_norm given gy ([N, C, S]), x and the forward's save_mean and
     *  save_invstd: gx ([N, C, S]), gweight and gbias ([C]), each may be NULL; weight ([C])
     *  NULL means 1. training: gx flows through the batch statistics too. */
    em_status (*batch_norm_backward)(void *ctx, const em_view *gx, const em_view *gweight,
                                     const em_view *gbias, const em_view *gy, const em_view *x,
                                     const em_view *mean, const em_view *invstd,
                                     const em_view *weight, bool training);
    /** Group normalization of x viewed as [N, C, S] in `groups` groups of C/groups channels
     *  (C % groups == 0): the mean and biased variance of each (n, group) over its
     *  (C/groups)*S elements, then weight and bias ([C], may be NULL) per channel.
     *  save_mean and save_invstd ([N, groups], may be NULL) get the statistics used. */
    em_status (*group_norm)(void *ctx, const em_view *out, const em_view *save_mean,
                            const em_view *save_invstd, const em_view *x,
                            const em_view *weight, const em_view *bias, int64_t groups,
                            double eps);
    /** RMS normalization of each row of x viewed as [rows, norm_numel] (rank 2):
     *  out = x / sqrt(mean(x^2) + eps) * weight (weight [norm_numel], may be NULL);
     *  save_invrms ([rows], may be NULL) gets 1/sqrt(mean(x^2) + eps). */
    em_status (*rms_norm)(void *ctx, const em_view *out, const em_view *save_invrms,
                          const em_view *x, const em_view *weight, int64_t norm_numel,
                          double eps);
    /* ---- cumulative ops (ABI 4) ---- */
    /** cumprod, cummax or cummin of `in` along dim (in has rank >= 1; a 0-d input comes as a
     *  one-element 1-d view). values and indices are fresh contiguous views of in's shape.
     *  EM_CUM_PROD: values[j] = in[0] * ... * in[j] (floats: in's dtype, multiplied in
     *  double as ref does; integer inputs: EM_I64 values, wrapping int64 products); indices
     *  is NULL. EM_CUM_MAX / EM_CUM_MIN: values (in's dtype) and indices (EM_I64, never NULL)
     *  as PyTorch's cummax / cummin: walking the line, element j replaces the running value
     *  when it is >= (cummin: <=) it or is NaN, so ties take the last index and a NaN stays
     *  (with its index) until the next NaN. A host-memory backend that leaves it NULL gets
     *  ref's kernel; for any other, the core composes the ops from slices, mul, comparisons,
     *  where and cat (a parallel scan of log2(n) steps). */
    em_status (*cumulative)(void *ctx, em_cum_op op, const em_view *values,
                            const em_view *indices, const em_view *in, int dim);
    /* ---- attention (ABI 4) ---- */
    /* Each may be NULL (or return EM_ERR_UNSUPPORTED): the core then composes
     * em_scaled_dot_product_attention from matmul, masked_fill and softmax as before. Views
     * all have rank R >= 2 and the same batch dims [B...] = shape[0..R-2), already broadcast
     * (stride 0 where an operand is shared); q, k, v, out, dout any strides; q, k, v, out and
     * dout of one float dtype. mask (NULL: none) is a view of [B..., L, S] (stride 0 where it
     * broadcasts), bool (true: attend) or a float dtype (added to the scaled scores).
     * causal: query i sees keys j <= i (top-left aligned, as torch's tril with L != S).
     * scale > 0 multiplies q k^T. dropout_p in [0, 1): each attention weight (b, i, j) is
     * kept when Philox's bernoulli(1 - dropout_p) gives 1 at the element index
     * (b * L + i) * S + j (b: the flat batch index; see src/backends/ref/random.c) and then
     * scaled by 1 / (1 - dropout_p), the numbers of em_dropout on the [B..., L, S] weights.
     * lse [B..., L] (contiguous; f32 for f32/f16/bf16, f64 for f64) gets each row's
     * logsumexp of its scaled, masked scores (-inf for a row that attends to nothing, whose
     * output row is NaN). */
    /** out [B..., L, Ev] = dropout(softmax(q [B..., L, E] k [B..., S, E]^T scale + mask))
     *  v [B..., S, Ev], out and lse contiguous. */
    em_status (*sdpa)(void *ctx, const em_view *out, const em_view *lse, const em_view *q,
                      const em_view *k, const em_view *v, const em_view *mask, bool causal,
                      double scale, double dropout_p, uint64_t seed);
    /** The gradients of sdpa given dout ([B..., L, Ev]) and the forward's out and lse:
     *  dq [B..., L, E], dk [B..., S, E], dv [B..., S, Ev], fresh contiguous views (full
     *  batch dims; the core sums broadcast ones). A row that attends to nothing gives no
     *  gradient to q or k and NaN to v, as the composition does. */
    em_status (*sdpa_backward)(void *ctx, const em_view *dq, const em_view *dk,
                               const em_view *dv, const em_view *q, const em_view *k,
                               const em_view *v, const em_view *mask, const em_view *out,
                               const em_view *dout, const em_view *lse, bool causal,
                               double scale, double dropout_p, uint64_t seed);
    /* ---- quantized tensors (ABI 5) ----
     * A quantized view has dtype EM_I8 for the per-tensor kinds (one integer per byte, at any
     * strides, as an int8 view) and EM_Q8 / EM_Q4 for the block kinds. A block view's strides
     * and offset count logical elements: its block axis (s->axis) has stride 1 and a size
     * that is a multiple of 32, every other dim of size > 1 has a stride that is a multiple
     * of 32 (0 included), and so is the offset. The block holding the 32 elements that start
     * at element offset e (a multiple of 32: offset + the sum of index * stride) starts at
     * byte (e / 32) * em_quant_block_bytes(s) of the buffer, and is laid out as ember.h's
     * em_quant_kind says. The core copies block tensors (clone, to_device) through `copy` on
     * EM_U8 views of their bytes, so a backend needs no other slot for them.
     * Each slot may be NULL: the core then returns EM_ERR_UNSUPPORTED naming the backend
     * (a host-memory backend gets ref's kernels). */
    /** out = x quantized with s. x: f32, any strides; out: a fresh contiguous quantized view
     *  of x's shape. Per-tensor kinds: s->scale and s->zero_point are given (the core chose
     *  them from the data), q = clamp(nearbyint(x * (1 / scale)) + zero_point, qmin, qmax)
     *  in f32 (q8 AFFINE [-128, 127], SYMMETRIC [-127, 127]; q4 AFFINE [-8, 7]). Block kinds
     *  (s->axis = rank - 1): each block's d (and m) from its 32 values, as em_quant_kind
     *  says, in f32 (max|x|, max and min exact; d = amax / 127, v / -8 or (max - m) / 15 with
     *  one f32 division, rounded to s->scale_dtype), q from the stored d and m. */
    em_status (*quantize)(void *ctx, const em_view *out, const em_view *x,
                          const em_quant_scheme *s);
    /** out (f32, fresh contiguous, q's shape) = the real values of q (any valid view):
     *  scale * (q - zero_point) (per tensor), d * q, d * (q - 8), d * q + m (blocks), in f32. */
    em_status (*dequantize)(void *ctx, const em_view *out, const em_view *q,
                            const em_quant_scheme *s);
    /** out [M, N] (f32, fresh contiguous) = a [M, K] @ b [K, N], all rank 2, M, N, K >= 1.
     *  b is quantized with bs, any valid view; a is f32 (as NULL) or quantized int8 (as).
     *  (1) b per-tensor, or b with blocks along K (bs->axis 0): the int8 product. An f32 a
     *      is first quantized row by row in blocks of 32 along K (the last one shorter when
     *      K % 32 != 0), as q8 EM_QK_BLOCK with an f32 scale (d = max|x| / 127,
     *      q = clamp(nearbyint(x * (1 / d)), -127, 127), q = 0 where d is 0, below FLT_MIN or
     *      not finite: a block holding a NaN has d NaN, one holding an infinity d inf, and
     *      its terms make the row's outputs NaN): dynamic activation quantization, as ggml
     *      and PyTorch's dynamic quantized Linear do. A quantized a is SYMMETRIC,
     *      AFFINE with zero point 0, or q8 BLOCK with as->axis 1 (then bs is q8: SYMMETRIC,
     *      AFFINE with zero point 0, or BLOCK with axis 0). Per block of 32 along K, the
     *      integer sum S = sum q_a q_b is exact (int32), and out adds, in f32:
     *        b per tensor:   d_a * scale_b * (S - zero_point_b * sum q_a)
     *        b BLOCK q8:     d_a * d_b * S
     *        b BLOCK q4:     d_a * d_b * (S - 8 * sum q_a)      (q_b in [0, 15])
     *        b BLOCK_MIN q4: d_a * d_b * S + d_a * m_b * sum q_a
     *      where d_a is 1 and the final sum is multiplied by scale_a for a per-tensor a.
     *  (2) b with blocks along N (bs->axis 1), a f32 only (the input gradient of case 1's
     *      x @ W^T is this form): out = a @ real(b) in f32, in any order. */
    em_status (*qmatmul)(void *ctx, const em_view *out, const em_view *a,
                         const em_quant_scheme *as, const em_view *b,
                         const em_quant_scheme *bs);
} em_backend_ops;

/** Registers an out-of-tree backend (or replaces nothing: an id already taken, or a name
 *  already used, is EM_ERR_STATE). The id is one of EM_BACKEND_EXTERNAL0..EM_BACKEND_MAX-1, or
 *  a built-in id that this build left out, registered under its own name (EM_BACKEND_TORCH as
 *  "torch": how the torch plugin comes in). EM_ERR_ARG when abi_version differs from
 *  EM_BACKEND_ABI_VERSION, the id is none of those, or required slots (device_count, open,
 *  alloc, free, read, write; copy too unless caps has EM_CAP_HOST_MEMORY, which takes ref's)
 *  are NULL. The table must outlive the process's use of it. */
em_status em_backend_register(const em_backend_ops *ops);

/* ---- plugins (docs/plugins.md) ----
 * A plugin is a shared module (libember-NAME.so) that exports two C symbols:
 *
 *     const uint32_t ember_plugin_abi = EM_BACKEND_ABI_VERSION;
 *     em_status ember_plugin_init(const em_plugin_host *host);
 *
 * (EM_PLUGIN_DEFINE_ABI writes the first.) ember reads ember_plugin_abi before anything else
 * and refuses a module built for another ABI; then it calls ember_plugin_init once, which
 * registers the module's backend(s) through host->backend_register and returns EM_OK, or
 * sets a message with host->set_error and returns a status (then the module is unloaded: it
 * must not have registered anything it leaves behind, so it registers last). A plugin does not
 * link libember: it reaches ember only through `host`, so that it works with programs linked
 * to either the shared or the static library. Its kernels report errors through
 * host->set_error too (the same thread-local message as em_backend_set_error). */
typedef struct em_plugin_host {
    uint32_t abi_version; /* EM_BACKEND_ABI_VERSION of the library loading the plugin */
    /** em_backend_register. */
    em_status (*backend_register)(const em_backend_ops *ops);
    /** Sets this thread's error message to msg (as is) and returns s. */
    em_status (*set_error)(em_status s, const char *msg);
    /** The first id of EM_BACKEND_EXTERNAL0..EM_BACKEND_MAX-1 no backend holds, or -1. */
    int (*free_backend_id)(void);
    /** em_backend_get: a plugin may call another backend's kernels (ref's, say). */
    const em_backend_ops *(*backend_get)(em_backend b);
} em_plugin_host;

/** The signature of ember_plugin_init. */
typedef em_status (*em_plugin_init_fn)(const em_plugin_host *host);

#if defined(__GNUC__)
#define EM_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define EM_PLUGIN_EXPORT
#endif
/** Defines the module's ABI symbol (write it once, at file scope, in the plugin). */
#ifdef __cplusplus
/* extern "C" without braces makes this a definition with external (C) linkage */
#define EM_PLUGIN_DEFINE_ABI()                                                                \
    extern "C" EM_PLUGIN_EXPORT const uint32_t ember_plugin_abi = EM_BACKEND_ABI_VERSION
#else
#define EM_PLUGIN_DEFINE_ABI()                                                                \
    EM_PLUGIN_EXPORT extern const uint32_t ember_plugin_abi;                                  \
    EM_PLUGIN_EXPORT const uint32_t ember_plugin_abi = EM_BACKEND_ABI_VERSION
#endif

/** The table the core routes a backend's calls through, or NULL when the backend is not
 *  registered. For a backend with EM_CAP_HOST_MEMORY, every kernel slot it left NULL is
 *  filled with the ref backend's kernel (they share the host-view conventions), except the
 *  fused slots (ABI 3) and sdpa / sdpa_backward (ABI 4), which stay NULL: the core composes
 *  them from the backend's own. */
const em_backend_ops *em_backend_get(em_backend b);
/** The backend's own table as registered (NULL slots included), or NULL. */
const em_backend_ops *em_backend_get_native(em_backend b);

/** For backends: sets this thread's error message (printf-style) and returns s. */
em_status em_backend_set_error(em_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#ifdef __cplusplus
}
#endif
#endif /* EMBER_BACKEND_H */
