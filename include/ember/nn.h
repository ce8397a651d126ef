/*
 * nn.h — neural-network building blocks on top of ember.h: named parameter sets, modules
 * (layers), initialization, losses, optimizers (parameter groups, state saved and loaded),
 * learning-rate schedules and gradient clipping.
 *
 *   1. parameter sets            4. losses
 *   2. module options and init   5. optimizers, schedule, clipping
 *   3. modules
 *
 * Everything here is built on the public API only. The rules of ember.h hold: every fallible
 * call returns an em_status and writes its results through out-parameters only on success;
 * messages start with the function's name ("em_nn_linear: ...").
 *
 * A typical training step:
 *
 *     em_tensor *logits, *loss;  em_grads *g;  double scale;
 *     em_module_forward(model, x, true, &logits);
 *     em_loss_cross_entropy(logits, y, &loss);
 *     em_backward(loss, &g);
 *     em_clip_grad_norm(params, g, 1.0, NULL, &scale);   // or scale = 1
 *     em_optimizer_step(opt, g, scale);
 *     em_grads_release(g); em_tensor_release(loss); em_tensor_release(logits);
 */
#ifndef EMBER_NN_H
#define EMBER_NN_H

#include "ember/ember.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================================
 * 1. Parameter sets: named references to the tensors a module owns
 * ====================================================================================== */

/** An ordered set of named parameters. Each entry refers to a slot (an `em_tensor *` held by
 *  a module), not to a tensor: the set reads the slot's current tensor, and an optimizer
 *  updates that tensor in place with em_tensor_assign. The set owns its names, not the
 *  tensors; it must not outlive the modules whose slots it refers to. */
typedef struct em_params em_params;

/** A new, empty set (release with em_params_release). EM_ERR_ARG for NULL out, EM_ERR_NOMEM. */
em_status em_params_create(em_params **out);
/** Frees the set (not the tensors). NULL is a no-op. */
void em_params_release(em_params *p);
/** Appends an entry named `name` (copied) that refers to *slot. EM_ERR_ARG when p, name or
 *  slot is NULL, *slot is NULL, or the name is already in the set; EM_ERR_NOMEM. */
em_status em_params_add(em_params *p, const char *name, em_tensor **slot);
/** The number of entries (0 for NULL). */
size_t em_params_count(const em_params *p);
/** The name of entry i (owned by the set), or NULL when p is NULL or i is out of range. */
const char *em_params_name(const em_params *p, size_t i);
/** The tensor entry i refers to now (borrowed), or NULL when out of range. */
em_tensor *em_params_get(const em_params *p, size_t i);
/** The slot of entry i, or NULL when out of range. */
em_tensor **em_params_slot(const em_params *p, size_t i);
/** The tensor of the entry named `name` (borrowed), or NULL when there is none. */
em_tensor *em_params_find(const em_params *p, const char *name);
/** Writes the set's tensors under their names to a safetensors file (em_safetensors_save). */
em_status em_params_save(const em_params *p, const char *path);
/** Reads a file em_params_save wrote into the set's tensors, in place (em_tensor_assign;
 *  tracked leaves stay the same leaves). Strict: the file must hold exactly the set's names,
 *  each with its tensor's shape and dtype; EM_ERR_IO (a missing or extra tensor, an unreadable
 *  file), EM_ERR_SHAPE, EM_ERR_DTYPE; on error nothing is assigned unless moving a tensor to
 *  its device fails midway. Quantized tensors (em_params_quantize): a quantized tensor of the
 *  file replaces the slot's tensor (moved to its device) when the shapes match, whether the
 *  slot holds a float tensor (a freshly built model loads a quantized file) or a quantized one
 *  of any scheme; a float tensor of the file for a slot that holds a quantized one is
 *  EM_ERR_DTYPE. */
em_status em_params_load(const em_params *p, const char *path);

/** Post-training quantization, in place: each entry that is a linear weight gets, in its slot,
 *  its tensor quantized with scheme (em_quantize_as; the scales come from the weight), and the
 *  float tensor is released. A linear weight is an entry whose name is "weight" or ends in
 *  ".weight" and whose tensor is a 2-d float tensor ([out, in], as em_nn_linear's). With a
 *  block kind the blocks run along `in` when it is a multiple of EM_QBLOCK (the form em_matmul's
 *  x @ W^T runs as an int8 product); otherwise, when `out` is, along `out`: the slot then holds
 *  the transpose (a view, em_tensor_scheme's axis 0) of W^T [in, out] quantized by rows, which
 *  em_matmul multiplies in f32 without a dequantized copy (a 784-input layer, as the first of an
 *  MNIST MLP, is quantized so); a weight with neither a multiple of 32 stays float. Other entries
 *  (biases, norms, convolutions' 4-d weights) stay as they are, and so do the names in skip
 *  (NULL, or a NULL-terminated list of entry names: an Embedding's weight, which is 2-d too
 *  but is looked up, not multiplied, belongs there; MultiheadAttention's "in_proj_weight" does
 *  not end in ".weight" and stays float, its out_proj is a Linear). Entries already quantized
 *  are left as they are. *n_quantized (may be NULL) gets the number of entries quantized.
 *  The modules holding the slots see the quantized weight (em_nn_linear's forward multiplies
 *  by it: y = x W^T + b with W dequantized in effect, x's rows quantized to int8 on the fly
 *  for the int8 product, see em_matmul); it is a constant from then on: no gradient reaches
 *  it (gradients still flow to x and to the float parameters), optimizers skip it, the set
 *  initializers (em_init_*) leave it alone, em_params_save / em_module_save write it with its
 *  scheme (io.h) and em_params_load / em_module_load read it back. A tensor shared with a
 *  slot outside the set (weight tying) stays float there. Quantize after training; an
 *  optimizer made before keeps working on the remaining float parameters.
 *  Errors: EM_ERR_ARG (NULL p or scheme), EM_ERR_DTYPE (a scheme that is not one of
 *  em_quant_kind's storage / kind pairs), the errors of em_quantize_as with the entry named
 *  (EM_ERR_ARG for a non-finite weight); on error no slot is changed. */
em_status em_params_quantize(em_params *p, const em_quant_scheme *scheme,
                             const char *const *skip, size_t *n_quantized);

/* ======================================================================================
 * 2. Module options and initialization
 * ====================================================================================== */

typedef enum em_init {
    /** PyTorch's default for Linear and Conv2d: weight and bias U(-1/sqrt(fan_in),
     *  1/sqrt(fan_in)) (kaiming_uniform with a = sqrt 5). */
    EM_INIT_KAIMING_UNIFORM = 0,
    /** weight U(-a, a), a = sqrt(6 / (fan_in + fan_out)) (xavier_uniform, gain 1); bias 0. */
    EM_INIT_XAVIER_UNIFORM
} em_init;

/** Where and how a module creates its parameters. On an autodiff device each parameter is a
 *  leaf marked with em_tensor_require_grad. */
typedef struct em_module_opts {
    em_device device;
    em_dtype dtype; /* a float dtype */
    em_init init;
    uint64_t seed;  /* the parameters' random numbers; each tensor of a layer gets its own
                       derived seed, and every constructor that draws numbers advances it
                       (seed = a hash of seed), so that successive layers built from one opts
                       differ, as successive torch layers do; a copy of the struct taken
                       before builds the same layer again */
} em_module_opts;

/** EM_F32, EM_INIT_KAIMING_UNIFORM on dev with seed. */
em_module_opts em_module_opts_default(em_device dev, uint64_t seed);

/* ======================================================================================
 * 3. Modules
 *
 * A module is a layer or a block of layers: a class (a small vtable: what it computes), the
 * class's data (its configuration), and named parameters (trained tensors), buffers (state
 * that is saved but not trained: batch norm's running statistics) and children (modules it
 * owns and calls). ember's layers below are written this way, and so are a user's: a custom
 * block is an em_module_class and a constructor, it sits in a Sequential, its parameters are
 * found by name ("blocks.0.attn.weight") and it saves and loads like the built-in ones.
 *
 * Constructors write a new module to *out (release with em_module_release). opts may be NULL
 * for layers without parameters and means em_module_opts_default(em_device_default(), 0)
 * otherwise; a constructor that draws random numbers advances opts->seed on success. Train or eval behaviour (dropout, batch norm) is chosen per call by
 * em_module_forward's `training`, which a module passes on to its children: there is no
 * second copy of a model for evaluation.
 *
 * Writing a module:
 *
 *     typedef struct { double scale; } scaled_data;
 *     static em_status scaled_forward(em_module *self, const em_tensor *x, bool training,
 *                                     em_tensor **y) {
 *         const scaled_data *d = em_module_data(self);
 *         em_tensor *h = NULL;
 *         em_status s = em_module_forward(em_module_child(self, "inner"), x, training, &h);
 *         if (s == EM_OK) s = em_mul_scalar_(h, d->scale, y);   // consumes h
 *         return s;
 *     }
 *     static const em_module_class scaled_class = {"Scaled", scaled_forward, NULL, free};
 *
 *     scaled_data *d = malloc(sizeof *d);  d->scale = 0.5;
 *     em_module *m;  em_module_create(&scaled_class, d, &m);      // m owns d now
 *     em_module_add_child(m, "inner", linear);                    // m owns linear now
 * ====================================================================================== */

typedef struct em_module em_module;

/** What a kind of module does. The class outlives its modules (a static const). */
typedef struct em_module_class {
    /** The type's name ("Linear", "MyBlock"): in em_module_describe and in errors. */
    const char *name;
    /** *y = the module applied to x (borrowed; *y a new reference). Required. training:
     *  train or eval behaviour, to pass on to children. Called through em_module_forward,
     *  which checks the arguments and puts the module's name in errors. */
    em_status (*forward)(em_module *self, const em_tensor *x, bool training, em_tensor **y);
    /** Optional: the configuration in words ("in 3, out 4, bias") into buf (cap bytes). */
    void (*describe)(const em_module *self, char *buf, size_t cap);
    /** Optional: frees the data (em_module_release calls it last, after the tensors and the
     *  children; e.g. `free`). */
    void (*release)(void *data);
} em_module_class;

/** A new module of class cls holding data (the class's, may be NULL; on success the module
 *  owns it and frees it with cls->release). EM_ERR_ARG for NULL cls or out, a class without
 *  name or forward. */
em_status em_module_create(const em_module_class *cls, void *data, em_module **out);
/** The data given to em_module_create (NULL for NULL m). */
void *em_module_data(const em_module *m);
/** The class's name (NULL for NULL m). */
const char *em_module_type(const em_module *m);
/** "Type(configuration)" or "Type" into buf (cap bytes, always NUL-terminated). */
void em_module_describe(const em_module *m, char *buf, size_t cap);

/** Adds a parameter named `name` (copied; not empty, no '.', at most 100 bytes, unique among
 *  the module's parameters, buffers and children) holding t. Consumes the caller's reference
 *  to t on every path (it is released on failure). A parameter to be trained is a leaf
 *  (em_tensor_require_grad on an autodiff device). One tensor may be a parameter of two
 *  modules (weight tying: em_tensor_retain it first); em_module_params lists it once. */
em_status em_module_add_param(em_module *m, const char *name, em_tensor *t);
/** Adds a buffer: as a parameter, but never trained, listed by em_module_buffers and
 *  em_module_state, not by em_module_params. A module updates its buffers in place with
 *  em_tensor_assign (from untracked values). */
em_status em_module_add_buffer(em_module *m, const char *name, em_tensor *t);
/** Adds a child module named `name` (rules of em_module_add_param). Consumes child on every
 *  path but one: EM_ERR_ARG when child is m or contains m, and then it is left as it was. */
em_status em_module_add_child(em_module *m, const char *name, em_module *child);

/** The parameter or buffer at a dotted path ("weight", "0.bias", "blocks.1.ln.weight"),
 *  borrowed, or NULL when there is none. */
em_tensor *em_module_get(const em_module *m, const char *path);
/** Replaces the tensor of the parameter or buffer at path with t (consumed on every path): a
 *  slot's new tensor, e.g. to tie an output layer's weight to an embedding's. em_params sets
 *  made before refer to the slot and so see t. EM_ERR_ARG when there is no such entry. */
em_status em_module_set(em_module *m, const char *path, em_tensor *t);
/** Whether the path names a parameter (not a buffer). */
bool em_module_is_param(const em_module *m, const char *path);
/** The child module at a dotted path ("0", "blocks.1"), borrowed, or NULL. */
em_module *em_module_child(const em_module *m, const char *path);
/** The number of direct children, the i-th (borrowed) and its name (NULL out of range). */
size_t em_module_child_count(const em_module *m);
em_module *em_module_child_at(const em_module *m, size_t i);
const char *em_module_child_name(const em_module *m, size_t i);

/** Runs the module on x (borrowed); *y is a new reference. training selects train or eval
 *  behaviour. Errors are those of the module's ops, with the modules that failed named from
 *  the outermost in: "Sequential(2 modules) > Linear(in 5, out 4, bias): the input's dim 1
 *  must be 5 ([..., in_features]), got [2, 3]". */
em_status em_module_forward(em_module *m, const em_tensor *x, bool training, em_tensor **y);
/** Appends the module's parameters to params, each named prefix + "." + its path ("weight",
 *  "0.weight", ...; no prefix and dot when prefix is NULL or ""): the module's own in the
 *  order added, then each child's. A tensor that is a parameter twice (tied) is listed once,
 *  under its first name. */
em_status em_module_params(em_module *m, const char *prefix, em_params *params);
/** The same for the module's buffers. */
em_status em_module_buffers(em_module *m, const char *prefix, em_params *buffers);
/** Parameters and buffers, per module (its parameters, its buffers, then its children), every
 *  name listed: what em_module_save writes (torch's state_dict). */
em_status em_module_state(em_module *m, const char *prefix, em_params *state);
/** Writes em_module_state to a safetensors file (em_params_save). */
em_status em_module_save(em_module *m, const char *path);
/** Reads a file em_module_save wrote into the module's parameters and buffers, in place
 *  (em_params_load on em_module_state: strict, nothing changed on error). */
em_status em_module_load(em_module *m, const char *path);
/** Frees the module, its children, its references to its tensors and its data. NULL is a
 *  no-op. */
void em_module_release(em_module *m);

/* ---- ember's layers ---- */

/** y = x W^T + b: weight [out, in], bias [out] (when bias). x [..., in]. EM_ERR_ARG for
 *  sizes < 1, a non-float dtype or NULL out. The weight may be replaced by a quantized
 *  [out, in] tensor (em_params_quantize, or em_module_set; block kinds with their blocks along
 *  `in`, the fast form): the forward then runs em_matmul's float @ quantized product, y has
 *  x's dtype, gradients flow to x and the bias, and the weight is a constant. */
em_status em_nn_linear(int64_t in_features, int64_t out_features, bool bias,
                       em_module_opts *opts, em_module **out);
/** A square-kernel convolution: weight [out_ch, in_ch, k, k], bias [out_ch]; x [N, in_ch, H, W]. */
em_status em_nn_conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride,
                       int64_t padding, bool bias, em_module_opts *opts, em_module **out);
/** A 1-d convolution: weight [out_ch, in_ch, k], bias [out_ch]; x [N, in_ch, L]. */
em_status em_nn_conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride,
                       int64_t padding, bool bias, em_module_opts *opts, em_module **out);
/** Max pooling with a square kernel; stride 0 means equal to kernel. */
em_status em_nn_max_pool2d(int64_t kernel, int64_t stride, em_module **out);
/** Average pooling with a square kernel (torch.nn.AvgPool2d: padding counted in the average);
 *  stride 0 means equal to kernel; padding at most kernel / 2. */
em_status em_nn_avg_pool2d(int64_t kernel, int64_t stride, int64_t padding, em_module **out);
/** Averages [N, C, H, W] into [N, C, oh, ow] bins (torch.nn.AdaptiveAvgPool2d). */
em_status em_nn_adaptive_avg_pool2d(int64_t oh, int64_t ow, em_module **out);
/** Flattens every dim after the first: [N, ...] -> [N, prod(...)]. */
em_status em_nn_flatten(em_module **out);
/** Dropout with probability p in [0, 1). Each training forward uses the current seed and then
 *  advances it, so successive masks differ; in eval (training false) the identity. */
em_status em_nn_dropout(double p, uint64_t seed, em_module **out);
/** Layer normalization over the last dim of size `size` (eps 1e-5), with weight (ones) and
 *  bias (zeros) parameters. */
em_status em_nn_layer_norm(int64_t size, em_module_opts *opts, em_module **out);
/** A lookup table: weight [num_embeddings, dim] drawn from N(0, 1) (torch.nn.Embedding); x
 *  an integer tensor of indices, y x's shape + [dim]. Tie it to an output layer by making the
 *  same tensor that layer's weight (em_module_get, em_tensor_retain, em_module_add_param). */
em_status em_nn_embedding(int64_t num_embeddings, int64_t dim, em_module_opts *opts,
                          em_module **out);
/** The options of BatchNorm1d / BatchNorm2d (torch's defaults: eps 1e-5, momentum 0.1,
 *  affine, tracking running statistics). */
typedef struct em_nn_batch_norm_opts {
    double eps;
    double momentum; /* in [0, 1]: running = (1 - momentum) running + momentum batch */
    bool affine;     /* weight (ones) and bias (zeros) parameters */
    bool track_running_stats; /* buffers running_mean (zeros), running_var (ones) and
                                 num_batches_tracked (i64, 0-d); without them eval normalizes
                                 with the batch's statistics */
} em_nn_batch_norm_opts;
em_nn_batch_norm_opts em_nn_batch_norm_opts_default(void);
/** Batch normalization over [N, C] or [N, C, L] (1d) or [N, C, H, W] (2d), as torch's
 *  BatchNorm1d/2d: training forwards normalize with the batch's statistics (one fused pass)
 *  and update the running ones in place; eval forwards use the running statistics. bn NULL:
 *  em_nn_batch_norm_opts_default(). The buffers live on the inner device of opts' device. */
em_status em_nn_batch_norm1d(int64_t num_features, const em_nn_batch_norm_opts *bn,
                             em_module_opts *opts, em_module **out);
em_status em_nn_batch_norm2d(int64_t num_features, const em_nn_batch_norm_opts *bn,
                             em_module_opts *opts, em_module **out);
/** Group normalization of [N, C, ...] (torch.nn.GroupNorm): num_groups divides num_channels;
 *  weight (ones) and bias (zeros) [C] when affine. */
em_status em_nn_group_norm(int64_t num_groups, int64_t num_channels, double eps, bool affine,
                           em_module_opts *opts, em_module **out);
/** RMS normalization over the last dim of size `size` (torch.nn.RMSNorm): weight (ones) when
 *  affine. torch's default eps is the dtype's machine epsilon: pass it. */
em_status em_nn_rms_norm(int64_t size, double eps, bool affine, em_module_opts *opts,
                         em_module **out);
/** Self-attention as torch.nn.MultiheadAttention(embed_dim, num_heads, bias=bias,
 *  dropout=dropout, batch_first=True) called as mha(x, x, x): x [B, T, E] -> [B, T, E].
 *  Parameters in_proj_weight [3E, E] (xavier uniform), in_proj_bias [3E] (zeros) and the
 *  child Linear out_proj (bias zeros). causal: query t sees keys <= t. Dropout on the
 *  attention weights in training forwards. num_heads must divide embed_dim. */
em_status em_nn_multihead_attention(int64_t embed_dim, int64_t num_heads, bool bias,
                                    double dropout, bool causal, em_module_opts *opts,
                                    em_module **out);
/** A MultiheadAttention's forward with a key padding mask: bool [B, T], true where a key is
 *  padding (not attended to). NULL: em_module_forward's behaviour. */
em_status em_nn_mha_forward(em_module *m, const em_tensor *x, const em_tensor *key_padding_mask,
                            bool training, em_tensor **y);
/** A pre-LN transformer block: x + attn(ln1(x)), then + mlp(ln2(x)), mlp = Linear(E,
 *  hidden), GELU, Linear(hidden, E) (and Dropout when dropout > 0); children ln1, attn, ln2,
 *  mlp. */
em_status em_nn_transformer_block(int64_t embed_dim, int64_t num_heads, int64_t hidden,
                                  double dropout, bool causal, em_module_opts *opts,
                                  em_module **out);
em_status em_nn_relu(em_module **out);
/** The exact (erf) GELU. */
em_status em_nn_gelu(em_module **out);
/** y = x. */
em_status em_nn_identity(em_module **out);
/** Runs n modules in order. Takes ownership of mods[0..n-1] on success AND on failure (they
 *  are released if the sequential cannot be made). Children are named "0", "1", ..., so
 *  parameter names are "<i>.<name>", as in torch.nn.Sequential. EM_ERR_ARG when mods or an
 *  entry is NULL, a module is listed twice, or n is 0. */
em_status em_nn_sequential(em_module *const *mods, size_t n, em_module **out);
/** Makes seq's forward run each run of `every` consecutive children (0-1, 2-3, ... for 2; the
 *  last run may be shorter) in one checkpoint region (em_checkpoint_begin in ember.h), as
 *  torch.utils.checkpoint.checkpoint_sequential: until backward, seq keeps about the input of
 *  each run, and each run's values are recomputed during backward (one forward of seq more).
 *  Gradients are the same bits as without. 0 turns it off (the default). EM_ERR_ARG for NULL
 *  seq, a module that is not a Sequential (named), or a negative every. */
em_status em_sequential_set_checkpoint(em_module *seq, int every);
/** y = x + body(x) (the output of body must have x's shape, or broadcast to it); body is the
 *  child "body". Consumes body on every path. */
em_status em_nn_residual(em_module *body, em_module **out);

/** Re-initializes every weight of params (entries whose name ends in "weight" and that have
 *  rank >= 2) with xavier_uniform from seed, and every "bias" with zeros. Quantized entries
 *  (em_params_quantize) are left as they are. */
em_status em_init_xavier_uniform(const em_params *params, uint64_t seed);

/** Initialization in place (em_tensor_assign: a tracked parameter stays the same leaf), from
 *  ember's Philox (em_rand_*): one seed gives the same values on every device. The set
 *  versions initialize every entry but the quantized ones (em_params_quantize: constants),
 *  entry i with a seed derived from seed and i, and name the entry in errors. EM_ERR_ARG for
 *  NULL or a bad number (named), EM_ERR_DTYPE for a tensor that is not float. */
/** t ~ N(mean, std^2) (torch.nn.init.normal_); std >= 0. */
em_status em_init_tensor_normal(em_tensor *t, double mean, double std, uint64_t seed);
/** torch.nn.init.trunc_normal_: N(mean, std^2) restricted to [a, b] (std > 0, a < b), drawn
 *  as torch does (uniform in [2 cdf(a') - 1, 2 cdf(b') - 1) through erfinv, then clamped to
 *  [a, b]; a', b' the standardized bounds), computed in f64. Not torch's bits. */
em_status em_init_tensor_trunc_normal(em_tensor *t, double mean, double std, double a,
                                      double b, uint64_t seed);
/** Every element = value (zeros_, ones_, constant_). */
em_status em_init_tensor_constant(em_tensor *t, double value);
em_status em_init_normal(const em_params *params, double mean, double std, uint64_t seed);
em_status em_init_trunc_normal(const em_params *params, double mean, double std, double a,
                               double b, uint64_t seed);
em_status em_init_constant(const em_params *params, double value);
em_status em_init_zeros(const em_params *params);
em_status em_init_ones(const em_params *params);

/* ======================================================================================
 * 4. Losses (0-d results; tracked when the inputs are)
 * ====================================================================================== */

/** What a loss returns: per-element losses, their mean or their sum. */
typedef enum em_reduction {
    EM_REDUCTION_MEAN = 0,
    EM_REDUCTION_SUM,
    EM_REDUCTION_NONE
} em_reduction;

/** Options of the cross-entropy and NLL losses (torch.nn.functional.cross_entropy's). */
typedef struct em_ce_opts {
    em_reduction reduction;
    /** Targets equal to it count for nothing (and not in the mean's denominator). -100. */
    int64_t ignore_index;
    /** In [0, 1]: the target becomes (1 - s) one-hot + s / C. 0. */
    double label_smoothing;
    /** Per-class weights [C] of the input's dtype (borrowed), or NULL. The mean of index
     *  targets divides by the sum of the weights of the kept targets, as torch's. */
    const em_tensor *weight;
} em_ce_opts;

/** reduction mean, ignore_index -100, no smoothing, no weights. */
em_ce_opts em_ce_opts_default(void);

/** Mean cross-entropy of logits [N, C] against class indices [N] (EM_I64/EM_I32) or
 *  probabilities [N, C]: em_cross_entropy. */
em_status em_loss_cross_entropy(const em_tensor *logits, const em_tensor *target,
                                em_tensor **loss);
/** Cross-entropy as torch.nn.functional.cross_entropy: logits [N, C, d1, ...] or [C] (classes
 *  at dim 1, or 0), targets either class indices (i64/i32) of the logits' shape without the
 *  class dim, or class probabilities of the logits' shape and dtype; opts NULL means
 *  em_ce_opts_default(). A 0-d result, or the per-element losses (reduction none).
 *  EM_ERR_SHAPE / EM_ERR_DTYPE for mismatched targets or weights, EM_ERR_ARG for a bad
 *  option or an index target outside [0, C) that is not ignore_index. */
em_status em_loss_cross_entropy_ex(const em_tensor *logits, const em_tensor *target,
                                   const em_ce_opts *opts, em_tensor **loss);
/** Negative log-likelihood (torch's nll_loss) of log-probabilities [N, C, ...] or [C] against
 *  class indices, with the options of em_loss_cross_entropy_ex (label_smoothing must be 0). */
em_status em_loss_nll(const em_tensor *log_probs, const em_tensor *target,
                      const em_ce_opts *opts, em_tensor **loss);
/** Binary cross-entropy of logits against targets in [0, 1] (one shape and float dtype), in
 *  torch's numerically stable form; pos_weight (may be NULL) weighs the positive term and
 *  broadcasts to the logits (e.g. [C] for [N, C]). */
em_status em_loss_bce_with_logits(const em_tensor *logits, const em_tensor *target,
                                  const em_tensor *pos_weight, em_reduction r, em_tensor **loss);
/** mean((pred - target)^2); pred and target of one shape and dtype (EM_ERR_SHAPE,
 *  EM_ERR_DTYPE otherwise). */
em_status em_loss_mse(const em_tensor *pred, const em_tensor *target, em_tensor **loss);
/** (pred - target)^2 with a reduction. */
em_status em_loss_mse_ex(const em_tensor *pred, const em_tensor *target, em_reduction r,
                         em_tensor **loss);
/** |pred - target| with a reduction. */
em_status em_loss_l1(const em_tensor *pred, const em_tensor *target, em_reduction r,
                     em_tensor **loss);
/** torch's smooth_l1_loss: 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (beta 0: L1).
 *  EM_ERR_ARG for beta < 0 or not finite. */
em_status em_loss_smooth_l1(const em_tensor *pred, const em_tensor *target, double beta,
                            em_reduction r, em_tensor **loss);
/** torch's huber_loss: 0.5 d^2 where |d| <= delta, else delta (|d| - 0.5 delta). EM_ERR_ARG
 *  for delta <= 0 or not finite. */
em_status em_loss_huber(const em_tensor *pred, const em_tensor *target, double delta,
                        em_reduction r, em_tensor **loss);

/* ======================================================================================
 * 5. Optimizers, learning-rate schedules, gradient clipping
 *
 * An optimizer keeps the slots of a parameter set (copied at creation: entries added to the
 * set later are not seen) and per-parameter state (untracked tensors on each parameter's
 * inner device). The modules owning the slots must outlive it.
 * ====================================================================================== */

typedef struct em_optimizer em_optimizer;

/** SGD as torch.optim.SGD (dampening 0, no Nesterov): g += wd p; with momentum, buf = g on
 *  the first step, then buf = momentum buf + g, and g = buf; p -= lr g. EM_ERR_ARG for NULL,
 *  lr < 0, momentum < 0 or weight_decay < 0. */
em_status em_optimizer_sgd(const em_params *params, double lr, double momentum,
                           double weight_decay, em_optimizer **out);
/** Adam as torch.optim.Adam (weight decay added to the gradient). EM_ERR_ARG for NULL,
 *  lr < 0, betas outside [0, 1), eps < 0, weight_decay < 0. */
em_status em_optimizer_adam(const em_params *params, double lr, double beta1, double beta2,
                            double eps, double weight_decay, em_optimizer **out);
/** AdamW as torch.optim.AdamW (decoupled: p *= 1 - lr wd before the Adam update). */
em_status em_optimizer_adamw(const em_params *params, double lr, double beta1, double beta2,
                             double eps, double weight_decay, em_optimizer **out);
/** Updates every parameter that has a gradient in g (others are skipped: among them the
 *  quantized ones, constants after em_params_quantize) in place with
 *  em_tensor_assign, each gradient multiplied by grad_scale first (1 for none; the scale
 *  em_clip_grad_norm gives). EM_ERR_ARG for NULL opt or g or a non-finite grad_scale; the
 *  errors of the ops otherwise.
 *  On the capture device (include/ember/graph.h) the step is recorded: Adam / AdamW as one
 *  call per parameter that reads the parameter's step count from the graph at each run (the
 *  optimizer makes its moments and counts when it is made, in the graph's setup: make it
 *  before the first em_graph_input; EM_ERR_STATE when they were made in the step). The
 *  optimizer counts the recorded step as taken. */
em_status em_optimizer_step(em_optimizer *opt, const em_grads *g, double grad_scale);
/** Sets the learning rate used by the next steps. EM_ERR_ARG for NULL or lr < 0. */
em_status em_optimizer_set_lr(em_optimizer *opt, double lr);
/** The current learning rate (0 for NULL). */
double em_optimizer_lr(const em_optimizer *opt);
/** Frees the optimizer and its state. NULL is a no-op. */
void em_optimizer_release(em_optimizer *opt);

/* ---- parameter groups (torch's param_groups) ----
 * The parameters given at creation are group 0, with the creation's lr and weight decay;
 * each em_optimizer_add_group appends a group with its own. em_optimizer_set_lr sets every
 * group's lr; em_optimizer_lr reads group 0's. */

/** Appends the parameters of `params` (slots copied, as at creation) as a new group with its
 *  own lr and weight_decay (the other hyperparameters are the optimizer's). EM_ERR_ARG for
 *  NULL opt or params, lr < 0, weight_decay < 0, or a parameter (slot) or name already in
 *  the optimizer; nothing changes on error. */
em_status em_optimizer_add_group(em_optimizer *opt, const em_params *params, double lr,
                                 double weight_decay);
/** The number of groups (0 for NULL). */
size_t em_optimizer_group_count(const em_optimizer *opt);
/** Sets one group's lr. EM_ERR_ARG for NULL opt, a group out of range or lr < 0. */
em_status em_optimizer_set_group_lr(em_optimizer *opt, size_t group, double lr);
/** A group's lr and weight decay (0 for NULL or a group out of range). */
double em_optimizer_group_lr(const em_optimizer *opt, size_t group);
double em_optimizer_group_weight_decay(const em_optimizer *opt, size_t group);

/* ---- state: resuming training exactly ---- */

/** Appends the optimizer's state to out (a parameter set: entries refer to the optimizer's
 *  own slots, valid until its next step, load or release), per parameter in order, named
 *  after the parameter's name in the optimizer:
 *    "<name>.step"             0-d i64, the updates the parameter received (always listed);
 *    "<name>.momentum_buffer"  SGD with momentum;
 *    "<name>.exp_avg", "<name>.exp_avg_sq"   Adam and AdamW,
 *  each of the parameter's shape and dtype, on its inner device, and listed once it exists
 *  (after the parameter's first update). Hyperparameters (lr, groups) are not state: the
 *  program that resumes sets them. EM_ERR_ARG for NULL; EM_ERR_STATE when a parameter's
 *  slot is empty; the errors of em_params_add.
 *  Adam / AdamW over parameters on the capture device: the moments are listed from the
 *  optimizer's creation, and "<name>.step" is the graph's own step count (a capture tensor
 *  of the setup, whose value when the graph is prepared is the count the optimizer had when
 *  it was made or loaded; each run of a captured step advances it): em_graph_name it to read
 *  the count with em_exec_state, or replace the listed tensors with graph inputs to keep the
 *  state outside the graph (ember-train --capture). */
em_status em_optimizer_state(em_optimizer *opt, em_params *out);
/** Writes em_optimizer_state to a safetensors file (em_params_save). With em_module_save
 *  of the model, what resuming needs. */
em_status em_optimizer_save(em_optimizer *opt, const char *path);
/** Reads a file em_optimizer_save wrote, for an optimizer of the same kind over parameters
 *  of the same names, shapes and dtypes (e.g. a fresh one over a freshly loaded model): the
 *  next steps are those the saved optimizer would have taken. Strict: every "<name>.step"
 *  must be there, the moments of each parameter whose step is > 0 too, and nothing else;
 *  EM_ERR_IO (a missing or extra tensor, a negative step, an unreadable file), EM_ERR_SHAPE,
 *  EM_ERR_DTYPE (step is i64, the moments the parameter's dtype). Nothing changes on error. */
em_status em_optimizer_load(em_optimizer *opt, const char *path);

/** The step schedule (torch StepLR): base_lr * gamma^floor(epoch / step_size); base_lr when
 *  step_size < 1. */
double em_lr_step(double base_lr, int epoch, int step_size, double gamma);

/* Schedules as pure functions of the step (0 first), torch's closed forms; set the result
 * with em_optimizer_set_lr (or per group) before each step. Arguments out of range give NaN,
 * which em_optimizer_set_lr refuses (EM_ERR_ARG). */

/** torch's LinearLR (a linear warmup when end_factor is 1): base_lr * (start_factor +
 *  (end_factor - start_factor) * min(step, total_iters) / total_iters). NaN unless step >= 0,
 *  total_iters >= 1, start_factor in (0, 1], end_factor in [0, 1]. */
double em_lr_linear(double base_lr, int step, double start_factor, double end_factor,
                    int total_iters);
/** torch's CosineAnnealingLR: eta_min + (base_lr - eta_min) (1 + cos(pi step / t_max)) / 2.
 *  NaN unless step >= 0 and t_max >= 1. */
double em_lr_cosine(double base_lr, int step, int t_max, double eta_min);
/** torch's OneCycleLR (two phases, cosine annealing, the lr only): from max_lr / div_factor up
 *  to max_lr over the first pct_start * total_steps - 1 steps, then down to max_lr /
 *  (div_factor * final_div_factor) at step total_steps - 1. torch's defaults: pct_start 0.3,
 *  div_factor 25, final_div_factor 1e4. NaN unless 0 <= step <= total_steps, total_steps >= 1,
 *  pct_start in [0, 1], both factors > 0. */
double em_lr_one_cycle(double max_lr, int step, int total_steps, double pct_start,
                       double div_factor, double final_div_factor);
/** The momentum torch's OneCycleLR (cycle_momentum, the default) gives step `step` of the
 *  cycle em_lr_one_cycle describes, inversely to the lr: from max_momentum down to
 *  base_momentum over the first phase, then back up to max_momentum at step total_steps - 1
 *  (cosine annealing). Set it as SGD's momentum or Adam's beta1 (torch's defaults: base 0.85,
 *  max 0.95). NaN unless 0 <= step <= total_steps, total_steps >= 1, pct_start in [0, 1],
 *  both momenta in [0, 1]. */
double em_momentum_one_cycle(int step, int total_steps, double pct_start, double base_momentum,
                             double max_momentum);

/** The global L2 norm of the gradients in g of the parameters of p, into *total_norm (may be
 *  NULL), and the factor min(1, max_norm / (total + 1e-6)) into *scale, to pass to
 *  em_optimizer_step (as torch.nn.utils.clip_grad_norm_). Parameters without a gradient
 *  count as zero. EM_ERR_ARG for NULL p, g or scale, or max_norm <= 0. */
em_status em_clip_grad_norm(const em_params *p, const em_grads *g, double max_norm,
                            double *total_norm, double *scale);

#ifdef __cplusplus
}
#endif
#endif /* EMBER_NN_H */
