/*
 * ember.h — the whole public API of ember, a tensor library in C11.
 *
 * Read it top to bottom like a manual:
 *   1. statuses and errors         5. moving and converting
 *   2. dtypes and kinds            6. ops, family by family
 *   3. devices                     7. random numbers
 *   4. tensors: creation, data, metadata, lifetime
 *
 * Rules that hold everywhere:
 *   - Every fallible call returns an em_status (EM_OK == 0). Results come back through
 *     out-parameters; on failure nothing is written to them and em_last_error() holds a message
 *     for the calling thread.
 *   - Input tensors are borrowed. A tensor written to *out is a new reference that the caller
 *     owns and releases with em_tensor_release().
 *   - Ops broadcast like NumPy. A negative dim counts from the end (-1 is the last).
 *   - All inputs of an op must live on the same device; otherwise EM_ERR_DEVICE, naming both.
 *     em_to_device() is the only way across.
 *   - Binary ops need both inputs of the same dtype (EM_ERR_DTYPE otherwise; em_cast first).
 *   - Nothing aborts on bad input: NULL handles, negative dims, rank > EM_MAX_RANK, shapes whose
 *     element count overflows, out-of-range dims and indices are statuses with messages.
 */
#ifndef EMBER_EMBER_H
#define EMBER_EMBER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EMBER_VERSION_MAJOR 0
#define EMBER_VERSION_MINOR 1
#define EMBER_VERSION_PATCH 0
#define EMBER_VERSION_STRING "0.1.0"

/** The library's version string, e.g. "0.1.0". Static storage; never NULL. */
const char *em_version(void);

/* ======================================================================================
 * 1. Statuses and errors
 * ====================================================================================== */

typedef enum em_status {
    EM_OK = 0,
    EM_ERR_ARG,         /* a bad argument: NULL, out of range, inconsistent */
    EM_ERR_SHAPE,       /* shapes that do not fit: broadcast, rank, overflow */
    EM_ERR_DTYPE,       /* a dtype or kind the op does not take */
    EM_ERR_DEVICE,      /* unknown or absent device, or inputs on two devices */
    EM_ERR_UNSUPPORTED, /* valid, but this backend or build cannot do it */
    EM_ERR_NOMEM,       /* an allocation failed */
    EM_ERR_BACKEND,     /* the backend's runtime failed (driver message attached) */
    EM_ERR_IO,          /* a file could not be read or written, or is corrupt */
    EM_ERR_PROTOCOL,    /* a wire message was malformed or of the wrong version */
    EM_ERR_AUTH,        /* authentication failed */
    EM_ERR_STATE        /* the call is not valid in the object's current state */
} em_status;

#define EM_STATUS_COUNT 12

/** The name of a status, e.g. "EM_ERR_DTYPE". Static storage; "EM_ERR_UNKNOWN" for others. */
const char *em_status_name(em_status s);

/** The message of the last failed call on this thread ("" if none). Valid until the next
 *  ember call on this thread. */
const char *em_last_error(void);

/** Clears this thread's last error message. */
void em_clear_error(void);

/* ======================================================================================
 * 2. Dtypes and kinds
 * ====================================================================================== */

typedef enum em_dtype {
    EM_F32 = 0,
    EM_F64,
    EM_F16,
    EM_BF16,
    EM_I64,
    EM_I32,
    EM_I16,
    EM_I8,
    EM_U8,
    EM_BOOL, /* stored as one byte, 0 or 1 */
    EM_Q8,   /* quantized storage: int8 values with an em_quant_scheme */
    EM_Q4    /* quantized storage: int4 values (see em_quant_kind for the layouts) */
} em_dtype;

#define EM_DTYPE_COUNT 12

typedef enum em_kind { EM_KIND_FLOAT = 0, EM_KIND_INT, EM_KIND_BOOL, EM_KIND_QUANTIZED } em_kind;

/** The quantization schemes: how a quantized tensor's bytes map to real values.
 *
 *  Per-tensor kinds hold one integer per byte, one element per byte, at the tensor's
 *  strides (row-major when contiguous); one scale (and zero point) for the whole tensor:
 *    EM_QK_AFFINE     q8: int8 in [-128, 127]; q4: int4 in [-8, 7], one per byte.
 *                     real = scale * (q - zero_point); scale = (max - min) / (qmax - qmin)
 *                     over the data with 0 included in the range, zero_point =
 *                     clamp(nearbyint(qmin - min / scale)).
 *    EM_QK_SYMMETRIC  q8 only: int8 in [-127, 127], real = scale * q, scale = max|x| / 127.
 *                     The per-tensor scale and zero point are computed in double from the
 *                     data's exact min and max, the scale rounded once to f32 (1 when it
 *                     would be 0: an all-zero tensor; FLT_MIN when it would be below that),
 *                     the zero point from that f32 scale;
 *                     then q = clamp(nearbyint(x * (1 / scale)) + zero_point) in f32.
 *
 *  Block kinds cut the tensor into blocks of EM_QBLOCK (32) consecutive elements along its
 *  block axis (the last dim when quantized; that dim's size must be a multiple of 32). Each
 *  block has its own scale d (and minimum m), stored as scale_dtype (EM_F32 or EM_F16,
 *  little-endian). A contiguous tensor of N elements is N / 32 blocks, one after another in
 *  row-major order; each block is:
 *    EM_QK_BLOCK      q8 (as ggml's Q8_0): d, then 32 int8 q;  real = d * q.
 *                     d = max|x| / 127;  q = clamp(nearbyint(x / d), -127, 127).
 *                     (4 + 32 = 36 bytes with an f32 scale, 34 with f16)
 *                     q4 (as ggml's Q4_0): d, then 16 bytes: byte j holds element j in its
 *                     low nibble and element j + 16 in its high nibble, each q in [0, 15];
 *                     real = d * (q - 8).  d = v / -8 where v is the block's value of largest
 *                     magnitude (the first such); q = clamp(nearbyint(x / d) + 8, 0, 15).
 *                     (20 bytes, or 18)
 *    EM_QK_BLOCK_MIN  q4 only (as ggml's Q4_1): d, m, then 16 bytes packed as Q4_0's;
 *                     real = d * q + m.  m = the block's minimum, d = (max - min) / 15 (both
 *                     from the block's exact values); q = clamp(nearbyint((x - m) / d), 0, 15)
 *                     with the stored m and d. (24 bytes, or 20)
 *  d and m are computed in f32 and rounded to scale_dtype when stored; q is computed from
 *  the stored d (and m), x / d as x * (1 / d) in f32 with 1 / d taken as 0 where d is 0 or
 *  below FLT_MIN (an all-zero block: q8 q = 0, Q4_0 q = 8, Q4_1 q = 0). nearbyint rounds half to even. With
 *  f16 scales, data whose d or m would overflow f16 is EM_ERR_ARG (use f32 scales).
 *
 *  em_tensor_to_data gives a block tensor's bytes in the layout above for its block-axis-last
 *  form: for a view whose block axis is not its last dim (a transposed weight), the bytes of
 *  that view with the block axis permuted last (the untransposed weight's); em_quant_nbytes
 *  takes that form's shape.
 *
 *  A block tensor's views keep the blocks whole: reshape, permute / transpose, slice,
 *  squeeze, unsqueeze, expand, flip of other dims are views as for any tensor; a view that
 *  would cut a block (a slice of the block axis not at multiples of 32 or with a step, a
 *  reshape that changes the block axis' run) is EM_ERR_UNSUPPORTED saying so. A transpose
 *  moves the block axis (em_tensor_scheme reports it). */
typedef enum em_quant_kind {
    EM_QK_AFFINE = 0,
    EM_QK_SYMMETRIC,
    EM_QK_BLOCK,
    EM_QK_BLOCK_MIN
} em_quant_kind;

#define EM_QBLOCK 32

/** How a quantized tensor maps its integers to reals (see em_quant_kind). The first three
 *  fields are the per-tensor ones; an initializer that gives only them is EM_QK_AFFINE. */
typedef struct em_quant_scheme {
    em_dtype storage;     /* EM_Q8 or EM_Q4 */
    float scale;          /* per-tensor kinds */
    int32_t zero_point;   /* EM_QK_AFFINE (0 otherwise) */
    em_quant_kind kind;
    em_dtype scale_dtype; /* block kinds: EM_F32 (also the zero value) or EM_F16 */
    int32_t block;        /* block kinds: EM_QBLOCK when reported (0 when asked for: 32) */
    int32_t axis;         /* block kinds, reported: the block axis of this tensor (view) */
} em_quant_scheme;

/** Bytes of one block of a block scheme (36, 34, 20, 18, 24 or 20); 1 for the per-tensor
 *  kinds (one element per byte); 0 for a scheme that is not one of em_quant_kind's. */
size_t em_quant_block_bytes(const em_quant_scheme *s);

/** The kind of a dtype. */
em_kind em_dtype_kind(em_dtype dt);
/** Short name: "f32", "f64", "f16", "bf16", "i64", ..., "bool", "q8", "q4"; "?" if invalid. */
const char *em_dtype_name(em_dtype dt);
/** Kind name: "float", "int", "bool", "quantized". */
const char *em_kind_name(em_kind k);
/** Bytes per element; 0 for an invalid dtype. */
size_t em_dtype_size(em_dtype dt);
/** Parses a short dtype name ("f32", ...). EM_ERR_ARG if unknown. */
em_status em_dtype_parse(const char *name, em_dtype *out);

/** IEEE half and bfloat16 conversions (round to nearest even; NaN stays NaN). */
uint16_t em_f32_to_f16(float f);
float em_f16_to_f32(uint16_t h);
uint16_t em_f32_to_bf16(float f);
float em_bf16_to_f32(uint16_t h);

/* ======================================================================================
 * 3. Devices
 * ====================================================================================== */

typedef enum em_backend {
    EM_BACKEND_REF = 0,
    EM_BACKEND_CPU,
    EM_BACKEND_OPENCL,
    EM_BACKEND_VULKAN,
    EM_BACKEND_CUDA,
    EM_BACKEND_TORCH,
    EM_BACKEND_REMOTE,
    EM_BACKEND_CAPTURE,
    EM_BACKEND_EXTERNAL0 = 16, /* first id for out-of-tree backends (em_backend_register) */
    EM_BACKEND_MAX = 32
} em_backend;

typedef enum em_checkpointing {
    EM_CKPT_NONE = 0, /* not tracked by autodiff */
    EM_CKPT_DISABLED, /* tracked; every intermediate kept for backward */
    EM_CKPT_BALANCED  /* tracked; memory-bound intermediates recomputed in backward (the
                         rules: "8. Autodiff" below) */
} em_checkpointing;

/** A device: a small value, compared with em_device_equal. Every call that takes one checks
 *  its fields: a backend id outside em_backend, a negative index, a checkpointing value that
 *  is not an em_checkpointing, or autodiff with EM_CKPT_NONE is EM_ERR_ARG naming the field
 *  (a valid device that this build or machine lacks is EM_ERR_DEVICE). */
typedef struct em_device {
    em_backend backend;
    int index;
    bool autodiff;
    em_checkpointing checkpointing; /* meaningful when autodiff is true */
} em_device;

/** Parses "ref", "cpu", "cpu:0", "opencl:1", "remote:0", "capture", "torch", any of them
 *  followed by "+autodiff" or "+autodiff:balanced". EM_ERR_ARG for bad text, EM_ERR_DEVICE for
 *  a backend or index this build or machine does not have. A backend that is not registered
 *  yet is looked for as a plugin (libember-NAME.so, see em_plugin_load) and loaded; when its
 *  plugin fails, EM_ERR_DEVICE carries the plugin's message. */
em_status em_device_parse(const char *text, em_device *out);

/** Writes the text form of dev (NUL-terminated) into buf. EM_ERR_ARG if buf is NULL or cap is
 *  too small. Round-trips with em_device_parse. */
em_status em_device_name(em_device dev, char *buf, size_t cap);

/** True when a and b name the same device. */
bool em_device_equal(em_device a, em_device b);

/** Writes up to cap devices that this build and machine can run into list; *count gets the
 *  total available (may exceed cap). list may be NULL when cap is 0. Order: best first is not
 *  promised; ref is always listed. Every plugin found and not yet loaded is loaded first (a
 *  plugin that fails is left out; em_plugins says why). */
em_status em_devices(em_device *list, size_t cap, size_t *count);

/** The best available device, or the one named by the environment variable EMBER_DEVICE when
 *  it parses and is present (otherwise the variable is ignored). */
em_device em_device_default(void);

/** The device `inner` wrapped for autodiff with the given strategy (EM_CKPT_DISABLED or
 *  EM_CKPT_BALANCED). EM_ERR_ARG for another strategy, EM_ERR_STATE if inner is already an
 *  autodiff device. */
em_status em_device_autodiff(em_device inner, em_checkpointing strategy, em_device *out);

/** The device an autodiff device wraps (dev itself, with no checkpointing mark, when it is not
 *  an autodiff device): where gradients, detached tensors and optimizer state live. */
em_device em_device_inner(em_device dev);

/** The name of a backend: "ref", "cpu", "opencl", ...; "?" if unknown. */
const char *em_backend_name(em_backend b);

/* ---- plugins: backends in shared modules, loaded at run time (docs/plugins.md) ----
 * A backend with a heavy dependency (the torch backend, on LibTorch) is built as a shared
 * module, libember-NAME.so, that ember loads when a program first asks for its device: parsing
 * "NAME..." (em_device_parse), using a device of its backend id, or listing every device
 * (em_devices). A program that never asks does not load it. The module is looked for, in this
 * order, in the directories of the environment variable EMBER_PLUGIN_PATH (':'-separated, read
 * once, at the first search), in the folder "ember" beside the library (or program) that holds
 * ember's core, and in the install directory (<libdir>/ember). The first file found for a name
 * is the one used. A module that is missing, is not a plugin, speaks another ABI or fails to
 * initialize leaves its backend absent; its status and message are kept (em_plugins) and
 * repeated by the call that asked for the device. */

/** What ember knows of one plugin module. */
typedef struct em_plugin_info {
    char name[32];     /* the backend's name (from the file name libember-NAME.so, or the
                          name of the backend it registered when loaded by path) */
    char path[512];    /* the module's path */
    bool loaded;       /* tried: status says how it went; false: found, not yet needed */
    em_status status;  /* EM_OK: loaded and registered */
    char message[384]; /* why it failed ("" when it did not) */
} em_plugin_info;

/** Loads the plugin module at `path` now and registers the backends it holds. Loading the same
 *  file again is EM_OK (it is loaded once). Errors: EM_ERR_ARG (NULL or empty path),
 *  EM_ERR_IO (no such file, or the dynamic loader refuses it: its message says why, e.g. a
 *  library it needs is missing), EM_ERR_UNSUPPORTED (not an ember plugin: it lacks
 *  ember_plugin_init / ember_plugin_abi; or it was built for another EM_BACKEND_ABI_VERSION,
 *  both numbers named), or the status its initialization returned (with its message). A
 *  module that failed is unloaded; nothing of it stays registered. */
em_status em_plugin_load(const char *path);

/** Writes up to cap entries for the plugin modules found so far (searching the directories
 *  if that was not done yet; nothing is loaded by this call) into list; *count gets how many
 *  there are. list may be NULL when cap is 0. EM_ERR_ARG for a NULL count. */
em_status em_plugins(em_plugin_info *list, size_t cap, size_t *count);

/* ======================================================================================
 * 4. Tensors
 * ====================================================================================== */

#define EM_MAX_RANK 8

/** An opaque, reference-counted tensor handle. Thread-safe counts; the data itself is not
 *  synchronized: don't write a tensor from one thread while another reads it. */
typedef struct em_tensor em_tensor;

/** A new tensor with a copy of `data` (row-major, `dt` elements; bool as bytes 0/1; f16 and
 *  bf16 as uint16_t bit patterns). `shape` may be NULL when rank is 0. Errors: EM_ERR_ARG
 *  (NULL data with elements, NULL out, negative dim), EM_ERR_SHAPE (rank > 8, overflow),
 *  EM_ERR_DTYPE (quantized dtypes: use em_quantize), EM_ERR_DEVICE, EM_ERR_NOMEM. */
em_status em_tensor_from_data(const void *data, em_dtype dt, const int64_t *shape, int rank,
                              em_device dev, em_tensor **out);

/** Copies the tensor's elements, row-major, into dst (waiting for pending work). dst_bytes
 *  must be at least numel * dtype size; EM_ERR_ARG otherwise. A quantized tensor gives its
 *  bytes in its scheme's contiguous layout (em_quant_kind), em_quant_nbytes of them. */
em_status em_tensor_to_data(const em_tensor *t, void *dst, size_t dst_bytes);

/** A tensor of zeros / ones / a constant value (converted to dt; bool: value != 0). */
em_status em_zeros(const int64_t *shape, int rank, em_dtype dt, em_device dev, em_tensor **out);
em_status em_ones(const int64_t *shape, int rank, em_dtype dt, em_device dev, em_tensor **out);
em_status em_full(const int64_t *shape, int rank, double value, em_dtype dt, em_device dev,
                  em_tensor **out);
/** A tensor shaped like x (same dtype and device) filled with value. */
em_status em_full_like(const em_tensor *x, double value, em_tensor **out);

/** 1-d tensor start, start+step, ... up to (excluding) stop, like numpy.arange. EM_ERR_ARG
 *  when step is 0 or not finite; an empty range gives an empty tensor. Int dtypes take the
 *  values truncated toward zero. */
em_status em_arange(double start, double stop, double step, em_dtype dt, em_device dev,
                    em_tensor **out);
/** steps values from start to end, both included, as torch.linspace (computed in f64, the
 *  first half from start and the second from end); a float dtype. */
em_status em_linspace(double start, double end, int64_t steps, em_dtype dt, em_device dev,
                      em_tensor **out);
/** [n, m] with ones on the diagonal (m < 0: m = n), any non-quantized dtype. */
em_status em_eye(int64_t n, int64_t m, em_dtype dt, em_device dev, em_tensor **out);

/** Adds a reference. NULL is a no-op. */
void em_tensor_retain(em_tensor *t);
/** Drops a reference; the last one frees the tensor (and its buffer if no view shares it).
 *  NULL is a no-op. Using a handle after its last release is a bug of the caller: while the
 *  handle is not yet reused, calls refuse it with EM_ERR_ARG ("a released tensor"), and in
 *  AddressSanitizer builds handles are never reused, so ASan reports the use. */
void em_tensor_release(em_tensor *t);

/* Tensor scopes: release what a block of code made, as TF.js's tf.tidy, without a release
 * line per intermediate.
 *
 *     for (int step = 0; step < steps; step++) {
 *         em_scope_begin();
 *         em_tensor *y, *loss;  em_grads *g;
 *         em_module_forward(model, x, true, &y);        // y, loss: released at the end
 *         em_cross_entropy(y, labels, &loss);
 *         em_backward(loss, &g);
 *         em_optimizer_step(opt, g, 1.0);               // Adam's state is the optimizer's
 *         em_grads_release(g);                          // em_grads is not a tensor
 *         em_scope_end();                               // bytes in use: as before the step
 *     }
 *
 * The rules:
 *  - A scope is this thread's; scopes nest. Every tensor handle that a public call gives the
 *    caller while a scope is open (the `out` of an op, of em_tensor_from_data, em_zeros,
 *    em_grads_get, em_tensor_map_get, ...) belongs to the innermost scope: em_scope_end
 *    releases that reference. Results of consuming `_` variants too, even when the op
 *    reused its input's handle.
 *  - What the library keeps is never the scope's: the tape's saved values, gradients held
 *    by em_grads (em_backward and em_grads_add register nothing), a module's parameters and
 *    buffers (em_module_add_param / _add_buffer / _set take the reference you pass), an
 *    optimizer's state (made or replaced in em_optimizer_step or _load), a loaded
 *    em_tensor_map's tensors. Tensors made before the scope are untouched.
 *  - Releasing a handle inside the scope is allowed: when that was its last reference, the
 *    scope forgets it (it is not released again, even if its memory is reused by a later
 *    tensor). em_tensor_retain adds a reference that the scope does not own: it survives the
 *    scope, and is the caller's to release.
 *  - em_scope_keep(t): t survives the innermost scope; it moves to the enclosing one, or from
 *    the outermost it becomes the caller's. em_scope_escape(t): t leaves every scope and is
 *    the caller's (for tensors stored in long-lived structures of your own, such as a cache
 *    in a module you write).
 *  - A call that returns its input (em_cast to the same dtype, em_contiguous of a contiguous
 *    tensor, em_to_device to the same device, dropout in eval) returns, inside a scope, a new
 *    handle of the same tensor (em_tensor_alias), so that the reference you get is the
 *    scope's; outside a scope it is the input itself, retained.
 *  - Your own structures are yours: a tensor you store in one (or in an em_params set, which
 *    holds slots, not references) is still the scope's; em_scope_escape it, or make it
 *    before the scope.
 *  - A handle of an open scope has its last release on the scope's thread (or is kept or
 *    escaped first). em_grads objects, modules and optimizers are not tensors: release them.
 *  - A scope still open when its thread exits is ended then (its tensors released); the main
 *    thread's are not ended at exit(), and leak checkers report their tensors.
 * Cost: registering is a push on a thread-local stack where the handle is made, and a clear
 * at its release. */

/** At most this many scopes open at once on a thread. */
#define EM_SCOPE_MAX_DEPTH 1024
/** Opens a scope on this thread. EM_ERR_STATE when EM_SCOPE_MAX_DEPTH are open (a missing
 *  em_scope_end), EM_ERR_NOMEM. */
em_status em_scope_begin(void);
/** Ends the innermost scope: releases its tensors (one reference each), moves the kept ones
 *  to the enclosing scope. EM_ERR_STATE "no scope is open" without a matching begin;
 *  EM_ERR_NOMEM when a tensor could not be registered (it was left to the caller). */
em_status em_scope_end(void);
/** t survives the innermost scope (see the rules above). A tensor of no scope, or of an
 *  enclosing one, is left as it is. EM_ERR_ARG for NULL or a released handle. */
em_status em_scope_keep(em_tensor *t);
/** t leaves every scope: the caller releases it. EM_ERR_ARG for NULL or a released handle. */
em_status em_scope_escape(em_tensor *t);
/** The number of scopes open on this thread. */
int em_scope_depth(void);
/** em_scope_begin, fn(user), em_scope_end: fn's results survive through em_scope_keep (or
 *  a store that takes them). Returns fn's status when it fails (the scope is ended all the
 *  same), else em_scope_end's; EM_ERR_STATE when fn left scopes open or ended too many. */
em_status em_scope_run(em_status (*fn)(void *user), void *user);
/** A new reference to t: outside a scope, t itself retained; inside one, a new handle of the
 *  same tensor (same storage, same place in an autodiff graph) that belongs to the scope.
 *  For functions that return their input. EM_ERR_ARG for NULL or a released handle. */
em_status em_tensor_alias(const em_tensor *t, em_tensor **out);

/* Metadata. Each takes a possibly NULL tensor: for NULL they return a zero value (0, NULL,
 * EM_F32, a ref device, false, EM_CKPT_NONE) and set em_last_error. */
em_dtype em_tensor_dtype(const em_tensor *t);
int em_tensor_rank(const em_tensor *t);
/** The shape (rank entries; owned by the tensor, valid while it lives). */
const int64_t *em_tensor_shape(const em_tensor *t);
/** One dim (negative counts from the end); -1 if t is NULL or dim is out of range. */
int64_t em_tensor_dim(const em_tensor *t, int dim);
int64_t em_tensor_numel(const em_tensor *t);
em_device em_tensor_device(const em_tensor *t);
em_kind em_tensor_kind(const em_tensor *t);
/** True exactly when this handle alone owns its buffer: one reference to the handle, and no
 *  other tensor (view) shares the buffer. An op given such a tensor through a consuming `_`
 *  variant may write in place. */
bool em_tensor_can_mut(const em_tensor *t);
/** True when the elements are laid out row-major without gaps (a view may not be). */
bool em_tensor_is_contiguous(const em_tensor *t);
/** The tensor's checkpointing strategy: EM_CKPT_NONE when untracked. */
em_checkpointing em_tensor_checkpointing(const em_tensor *t);
/** The quantization scheme of a quantized tensor; EM_ERR_DTYPE for other kinds. */
em_status em_tensor_scheme(const em_tensor *t, em_quant_scheme *out);
/** *out = the address of t's first element, when t's backend keeps its buffers in host memory
 *  (ref, cpu, torch: EM_CAP_HOST_MEMORY) and t is contiguous (row-major, packed): reading and
 *  writing there is reading and writing t's values, and those of every tensor sharing its
 *  buffer (views, em_to_device's shares between host backends) — as torch's data_ptr(). Valid
 *  while t lives; nothing synchronizes it with ops running on t in other threads. What libraries
 *  over ember (MPI collectives, DLPack) reduce or exchange in place. Errors: EM_ERR_ARG (NULL),
 *  EM_ERR_UNSUPPORTED (a device whose memory is not the host's: em_tensor_to_data copies; a
 *  view that is not contiguous: em_contiguous first), EM_ERR_DTYPE (quantized). */
em_status em_tensor_host_data(const em_tensor *t, void **out);
/** t as text, as PyTorch's repr summarises it: the values (one number format for the whole
 *  tensor; above 1000 elements the first and last 3 entries of each long dim around "..."),
 *  then shape, dtype, device and ", requires_grad" for such a leaf:
 *  "tensor([[1.5000, 2.0000]], shape=[1, 2], dtype=f32, device=cpu)". Writes at most cap - 1
 *  bytes and a NUL into buf (buf may be NULL when cap is 0) and the length the whole text
 *  needs into *len (may be NULL), as snprintf does. Quantized tensors show their dequantized
 *  values. Waits for pending work. */
em_status em_tensor_format(const em_tensor *t, char *buf, size_t cap, size_t *len);
/** em_tensor_format's text and a newline on stdout. */
em_status em_tensor_print(const em_tensor *t);
/** Reads the single element of a 1-element tensor as a double (waits for pending work). */
em_status em_tensor_item(const em_tensor *t, double *out);

/* ======================================================================================
 * 5. Moving and converting
 * ====================================================================================== */

/** A copy of t on dev (a new reference to t itself when dev is t's device). Autodiff across
 *  the move:
 *   - tracked t to an autodiff device: the copy is tracked, gradients flow back to t's device,
 *     and the copy follows dev's checkpointing strategy from there on;
 *   - untracked t to an autodiff device: a constant of the graph there;
 *   - t through which gradients flow (the result of a recorded op, or a leaf that requires
 *     grad) to a device without autodiff: EM_ERR_STATE, since the copy would silently leave
 *     the graph; ask for that with em_tensor_detach first (or move it in a no-grad scope).
 *     A constant of the graph moves as a plain value, keeping its checkpointing mark. */
em_status em_to_device(const em_tensor *t, em_device dev, em_tensor **out);
/** t converted to dt (floats to ints truncate toward zero; to bool: != 0). Quantized dtypes
 *  are not cast targets: EM_ERR_DTYPE (use em_quantize). A new reference to t when the dtype
 *  already matches. */
em_status em_cast(const em_tensor *t, em_dtype dt, em_tensor **out);
/** A row-major copy of t, or a new reference to t when it is already contiguous. */
em_status em_contiguous(const em_tensor *t, em_tensor **out);
/** Always a fresh copy that owns its buffer. */
em_status em_clone(const em_tensor *t, em_tensor **out);

/** Quantizes a float tensor with a per-tensor affine scheme chosen from its range
 *  (storage EM_Q8: [-128,127]; EM_Q4: [-8,7]): em_quantize_as with {storage}. */
em_status em_quantize(const em_tensor *x, em_dtype storage, em_tensor **out);
/** Quantizes a float tensor (any float dtype, rank >= 1 for block kinds, on any device; on
 *  that device) with scheme's storage, kind and scale_dtype; the scales (and zero point,
 *  minimums) come from the data, as em_quant_kind says (dynamic quantization). The result
 *  is untracked (a constant for autodiff). Errors: EM_ERR_DTYPE (x not float; a storage /
 *  kind pair that is not a scheme, e.g. q4 symmetric), EM_ERR_SHAPE (block kinds: the last
 *  dim not a multiple of 32, or 0-d), EM_ERR_ARG (a non-finite value in x). */
em_status em_quantize_as(const em_tensor *x, const em_quant_scheme *scheme, em_tensor **out);
/** The f32 values of a quantized tensor (of any scheme, any view). */
em_status em_dequantize(const em_tensor *q, em_tensor **out);
/** A quantized tensor on dev from its bytes in the layout em_quant_kind documents (the
 *  contiguous form): scheme's storage, kind, scale_dtype, and for per-tensor kinds its scale
 *  and zero_point (the scale finite and > 0). nbytes must be exactly the layout's size
 *  (em_quant_nbytes). Block scales are taken as given (NaN included). EM_ERR_ARG,
 *  EM_ERR_SHAPE, EM_ERR_DTYPE on a bad scheme, shape or size. Reading such a tensor's bytes
 *  back: em_tensor_to_data (the contiguous form of any view). */
em_status em_tensor_from_quantized(const void *bytes, size_t nbytes, const em_quant_scheme *scheme,
                                   const int64_t *shape, int rank, em_device dev,
                                   em_tensor **out);
/** The bytes of a tensor of `shape` in scheme's contiguous layout, into *out; EM_ERR_SHAPE /
 *  EM_ERR_DTYPE as em_tensor_from_quantized. */
em_status em_quant_nbytes(const em_quant_scheme *scheme, const int64_t *shape, int rank,
                          size_t *out);

/** Copies src's values into dst's own buffer, in place (`dst[...] = src`),
 *  recording nothing for autodiff: how an optimizer updates a leaf parameter while keeping
 *  its identity (like torch's `p.data.copy_(src)`), so that its leaf node, its require_grad
 *  mark and every pointer to it stay valid. Views sharing dst's buffer see the new values.
 *  src is borrowed and may be tracked or untracked (its graph is not extended). Errors:
 *  EM_ERR_ARG (NULL), EM_ERR_SHAPE (shapes differ), EM_ERR_DTYPE (dtypes differ, or
 *  quantized), EM_ERR_DEVICE (another inner device; the autodiff flag may differ),
 *  EM_ERR_STATE (dst is a tracked non-leaf, the result of an op). */
em_status em_tensor_assign(em_tensor *dst, const em_tensor *src);
/** em_tensor_assign, consuming src (released on every path, success or not): when nothing
 *  else holds src or either buffer (no views of dst, no other reference to src), and both are
 *  dense over buffers of one size, dst takes src's buffer instead of copying it (an
 *  optimizer's update then costs no copy); otherwise it copies as em_tensor_assign does, with
 *  its errors. */
em_status em_tensor_assign_(em_tensor *dst, em_tensor *src);

/* ======================================================================================
 * 6. Ops
 *
 * Kinds accepted (EM_ERR_DTYPE otherwise, with a message such as
 * "em_exp: expected a float tensor, got int (i64)"):
 *   float-only: exp log log1p sqrt rsqrt sin cos tanh sigmoid gelu silu erf recip, tan asin
 *               acos atan sinh cosh expm1 log2 log10 softplus, pow atan2, div of
 *               floats is true division; mean var logsumexp softmax log_softmax, the neural ops.
 *   numeric (float or int): add sub mul div remainder maximum minimum neg abs relu sign clamp
 *               floor ceil round (identity on ints), sum prod max min argmax argmin cumsum,
 *               cumprod, matmul, comparisons (bool also for eq/ne). sum, prod, cumsum and
 *               cumprod of an int tensor give EM_I64, like PyTorch.
 *   bool: logical_and logical_or logical_not; the condition of where and masked_fill.
 *   any (not quantized): isnan isinf isfinite, logical_xor, nan_to_num (a copy for ints),
 *               cummax cummin.
 * Integer division floors (like Python's //) and remainder takes the divisor's sign (like
 * Python's %); an integer division or remainder by zero gives 0.
 * ====================================================================================== */

/* ---- elementwise, unary ---- */
em_status em_neg(const em_tensor *x, em_tensor **out);
em_status em_abs(const em_tensor *x, em_tensor **out);
em_status em_exp(const em_tensor *x, em_tensor **out);
em_status em_log(const em_tensor *x, em_tensor **out);
em_status em_log1p(const em_tensor *x, em_tensor **out);
em_status em_sqrt(const em_tensor *x, em_tensor **out);
em_status em_rsqrt(const em_tensor *x, em_tensor **out);
em_status em_sin(const em_tensor *x, em_tensor **out);
em_status em_cos(const em_tensor *x, em_tensor **out);
em_status em_tanh(const em_tensor *x, em_tensor **out);
em_status em_sigmoid(const em_tensor *x, em_tensor **out);
em_status em_relu(const em_tensor *x, em_tensor **out);
/** The exact GELU: x * (1 + erf(x / sqrt 2)) / 2. */
em_status em_gelu(const em_tensor *x, em_tensor **out);
em_status em_silu(const em_tensor *x, em_tensor **out);
em_status em_erf(const em_tensor *x, em_tensor **out);
em_status em_floor(const em_tensor *x, em_tensor **out);
em_status em_ceil(const em_tensor *x, em_tensor **out);
/** Rounds half to even, like numpy.round and torch.round. */
em_status em_round(const em_tensor *x, em_tensor **out);
em_status em_recip(const em_tensor *x, em_tensor **out);
em_status em_sign(const em_tensor *x, em_tensor **out);
/** Clamps into [lo, hi]; pass -INFINITY / INFINITY for no bound. EM_ERR_ARG if lo > hi. */
em_status em_clamp(const em_tensor *x, double lo, double hi, em_tensor **out);
/* Float only (an int or bool tensor is EM_ERR_DTYPE, as for em_sin); NaN outside the domain
 * (asin, acos beyond ±1; log2, log10 below 0), as C's libm. */
em_status em_tan(const em_tensor *x, em_tensor **out);
em_status em_asin(const em_tensor *x, em_tensor **out);
em_status em_acos(const em_tensor *x, em_tensor **out);
em_status em_atan(const em_tensor *x, em_tensor **out);
em_status em_sinh(const em_tensor *x, em_tensor **out);
em_status em_cosh(const em_tensor *x, em_tensor **out);
/** e^x - 1, accurate near 0. */
em_status em_expm1(const em_tensor *x, em_tensor **out);
em_status em_log2(const em_tensor *x, em_tensor **out);
em_status em_log10(const em_tensor *x, em_tensor **out);
/** torch.nn.functional.softplus: log(1 + e^(beta x)) / beta, and x where beta x > threshold
 *  (PyTorch's defaults: beta 1, threshold 20). Float only. EM_ERR_ARG for a NaN beta or
 *  threshold, or a beta that is 0 or infinite. */
em_status em_softplus(const em_tensor *x, double beta, double threshold, em_tensor **out);
/** EM_BOOL results: x is NaN / ±inf / neither. Any non-quantized dtype: an int or bool tensor
 *  gives all false / all false / all true, as PyTorch. */
em_status em_isnan(const em_tensor *x, em_tensor **out);
em_status em_isinf(const em_tensor *x, em_tensor **out);
em_status em_isfinite(const em_tensor *x, em_tensor **out);
/** torch.nan_to_num: NaN becomes `nan`, +inf *posinf, -inf *neginf (NULL: the dtype's largest
 *  / lowest finite value, PyTorch's defaults); values are rounded to x's dtype. An int or bool
 *  tensor is copied unchanged. */
em_status em_nan_to_num(const em_tensor *x, double nan, const double *posinf,
                        const double *neginf, em_tensor **out);
/** torch.clamp(x, min=lo, max=hi) with tensor bounds: minimum(maximum(x, lo), hi), all three
 *  broadcast together (the result has their broadcast shape), one dtype (float or int), NaN
 *  in any of them giving NaN; lo > hi gives hi. lo or hi may be NULL (no bound), not both
 *  (EM_ERR_ARG). The gradient goes to x where lo <= x <= hi, to a bound where it clamps, as
 *  PyTorch's. */
em_status em_clamp_tensor(const em_tensor *x, const em_tensor *lo, const em_tensor *hi,
                          em_tensor **out);

/* ---- elementwise, binary (same dtype, broadcast) ---- */
em_status em_add(const em_tensor *a, const em_tensor *b, em_tensor **out);
em_status em_sub(const em_tensor *a, const em_tensor *b, em_tensor **out);
em_status em_mul(const em_tensor *a, const em_tensor *b, em_tensor **out);
em_status em_div(const em_tensor *a, const em_tensor *b, em_tensor **out);
em_status em_pow(const em_tensor *a, const em_tensor *b, em_tensor **out);
em_status em_remainder(const em_tensor *a, const em_tensor *b, em_tensor **out);
em_status em_maximum(const em_tensor *a, const em_tensor *b, em_tensor **out);
em_status em_minimum(const em_tensor *a, const em_tensor *b, em_tensor **out);
/** atan2(a, b): the angle of the point (b, a), in [-pi, pi], as C's atan2. Float only. */
em_status em_atan2(const em_tensor *a, const em_tensor *b, em_tensor **out);

/* ---- with a scalar: a op s, s converted to a's dtype (truncated for ints) ---- */
em_status em_add_scalar(const em_tensor *a, double s, em_tensor **out);
em_status em_sub_scalar(const em_tensor *a, double s, em_tensor **out);
em_status em_mul_scalar(const em_tensor *a, double s, em_tensor **out);
em_status em_div_scalar(const em_tensor *a, double s, em_tensor **out);
em_status em_pow_scalar(const em_tensor *a, double s, em_tensor **out);
em_status em_remainder_scalar(const em_tensor *a, double s, em_tensor **out);
em_status em_maximum_scalar(const em_tensor *a, double s, em_tensor **out);
em_status em_minimum_scalar(const em_tensor *a, double s, em_tensor **out);

/* ---- consuming variants: `a` is consumed (released, also on failure); when a is
 *      untracked (a checkpointing mark alone does not matter), em_tensor_can_mut(a) holds
 *      and the result has a's shape and dtype, it is written into a's buffer ---- */
em_status em_add_(em_tensor *a, const em_tensor *b, em_tensor **out);
em_status em_sub_(em_tensor *a, const em_tensor *b, em_tensor **out);
em_status em_mul_(em_tensor *a, const em_tensor *b, em_tensor **out);
em_status em_div_(em_tensor *a, const em_tensor *b, em_tensor **out);
em_status em_mul_scalar_(em_tensor *a, double s, em_tensor **out);
em_status em_add_scalar_(em_tensor *a, double s, em_tensor **out);
em_status em_relu_(em_tensor *x, em_tensor **out);
em_status em_exp_(em_tensor *x, em_tensor **out);

/* ---- comparisons (same dtype, broadcast; result EM_BOOL) ---- */
em_status em_eq(const em_tensor *a, const em_tensor *b, em_tensor **out);
em_status em_ne(const em_tensor *a, const em_tensor *b, em_tensor **out);
em_status em_lt(const em_tensor *a, const em_tensor *b, em_tensor **out);
em_status em_le(const em_tensor *a, const em_tensor *b, em_tensor **out);
em_status em_gt(const em_tensor *a, const em_tensor *b, em_tensor **out);
em_status em_ge(const em_tensor *a, const em_tensor *b, em_tensor **out);
em_status em_eq_scalar(const em_tensor *a, double s, em_tensor **out);
em_status em_lt_scalar(const em_tensor *a, double s, em_tensor **out);
em_status em_gt_scalar(const em_tensor *a, double s, em_tensor **out);

/* ---- logical (bool inputs, bool result) ---- */
em_status em_logical_and(const em_tensor *a, const em_tensor *b, em_tensor **out);
em_status em_logical_or(const em_tensor *a, const em_tensor *b, em_tensor **out);
em_status em_logical_not(const em_tensor *x, em_tensor **out);
/** Logical xor, as torch.logical_xor: any non-quantized dtypes, possibly two different ones
 *  (each element tested against zero; NaN counts as true); broadcast; EM_BOOL result. */
em_status em_logical_xor(const em_tensor *a, const em_tensor *b, em_tensor **out);

/** cond ? a : b, broadcast over all three; cond is bool, a and b share a dtype. */
em_status em_where(const em_tensor *cond, const em_tensor *a, const em_tensor *b,
                   em_tensor **out);
/** x with value written where mask (bool, broadcast to x's shape) is true. */
em_status em_masked_fill(const em_tensor *x, const em_tensor *mask, double value,
                         em_tensor **out);

/* ---- reductions. The whole-tensor forms give a 0-d tensor; the _dim forms reduce one dim,
 *      kept as size 1 when keepdim. Reducing an empty tensor: sum 0, prod 1, mean/var NaN;
 *      max/min/argmax/argmin of an empty extent are EM_ERR_SHAPE. ---- */
em_status em_sum(const em_tensor *x, em_tensor **out);
em_status em_sum_dim(const em_tensor *x, int dim, bool keepdim, em_tensor **out);
em_status em_mean(const em_tensor *x, em_tensor **out);
em_status em_mean_dim(const em_tensor *x, int dim, bool keepdim, em_tensor **out);
em_status em_prod(const em_tensor *x, em_tensor **out);
em_status em_prod_dim(const em_tensor *x, int dim, bool keepdim, em_tensor **out);
em_status em_max(const em_tensor *x, em_tensor **out);
em_status em_max_dim(const em_tensor *x, int dim, bool keepdim, em_tensor **out);
em_status em_min(const em_tensor *x, em_tensor **out);
em_status em_min_dim(const em_tensor *x, int dim, bool keepdim, em_tensor **out);
/** Index (EM_I64) of the first maximum / minimum; whole-tensor forms index the flattened
 *  tensor. NaN counts as the maximum (and the minimum), like PyTorch. */
em_status em_argmax(const em_tensor *x, em_tensor **out);
em_status em_argmax_dim(const em_tensor *x, int dim, bool keepdim, em_tensor **out);
em_status em_argmin(const em_tensor *x, em_tensor **out);
em_status em_argmin_dim(const em_tensor *x, int dim, bool keepdim, em_tensor **out);
/** Variance with `correction` subtracted from the count (1: unbiased, 0: population). */
em_status em_var(const em_tensor *x, int correction, em_tensor **out);
em_status em_var_dim(const em_tensor *x, int dim, int correction, bool keepdim,
                     em_tensor **out);
em_status em_logsumexp(const em_tensor *x, em_tensor **out);
em_status em_logsumexp_dim(const em_tensor *x, int dim, bool keepdim, em_tensor **out);
/** Standard deviation: sqrt of em_var / em_var_dim. */
em_status em_std(const em_tensor *x, int correction, em_tensor **out);
em_status em_std_dim(const em_tensor *x, int dim, int correction, bool keepdim,
                     em_tensor **out);
/** Whether any / every element is nonzero (NaN counts as nonzero), over everything (a 0-d
 *  bool) or along dim; any dtype but quantized. Not tracked. */
em_status em_any(const em_tensor *x, em_tensor **out);
em_status em_all(const em_tensor *x, em_tensor **out);
em_status em_any_dim(const em_tensor *x, int dim, bool keepdim, em_tensor **out);
em_status em_all_dim(const em_tensor *x, int dim, bool keepdim, em_tensor **out);
/** The sum / mean over the n dims listed (any order, negative ones from the end, none twice:
 *  EM_ERR_ARG), keeping them as size 1 when keepdim; n == 0 reduces everything (as torch's
 *  dim=[]). */
em_status em_sum_dims(const em_tensor *x, const int *dims, int n, bool keepdim,
                      em_tensor **out);
em_status em_mean_dims(const em_tensor *x, const int *dims, int n, bool keepdim,
                       em_tensor **out);
/** Running sum along dim (same shape). */
em_status em_cumsum(const em_tensor *x, int dim, em_tensor **out);
/** Running product along dim, as torch.cumprod: same shape; float inputs keep their dtype
 *  (multiplied in double), integer inputs give EM_I64 (wrapping), bool is EM_ERR_DTYPE. A 0-d
 *  x takes dim 0 or -1. The gradient is exact where x has zeros too (PyTorch's rule). *out is
 *  a new reference. Errors: NULL handles EM_ERR_ARG, dim out of range EM_ERR_ARG, quantized or
 *  bool x EM_ERR_DTYPE. (A backend without the cumulative slot gets it composed.) */
em_status em_cumprod(const em_tensor *x, int dim, em_tensor **out);
/** Running maximum along dim and where it came from, as torch.cummax: *values (x's dtype) and
 *  *indices (EM_I64), both x's shape and new references; either may be NULL, not both. An
 *  element replaces the running maximum when it is >= it or NaN, so ties take the last
 *  index and NaN propagates (the index is the latest NaN's). Any dtype but quantized (bool
 *  too). The gradient of the values goes to the elements at indices. Errors: as em_cumprod
 *  (bool allowed), both outputs NULL EM_ERR_ARG. */
em_status em_cummax(const em_tensor *x, int dim, em_tensor **values, em_tensor **indices);
/** Running minimum along dim, as torch.cummin (<= instead of >=); otherwise as em_cummax. */
em_status em_cummin(const em_tensor *x, int dim, em_tensor **values, em_tensor **indices);
em_status em_softmax(const em_tensor *x, int dim, em_tensor **out);
em_status em_log_softmax(const em_tensor *x, int dim, em_tensor **out);

/* ---- linear algebra ---- */
/** Matrix product with numpy.matmul rules: 1-d operands are promoted and the added dim is
 *  removed; batch dims broadcast. Same dtype, float or int (bool is EM_ERR_DTYPE).
 *  Quantized operands (the weight stays quantized; no dequantized copy is made):
 *   - a float (any float dtype, any rank) @ b quantized (1-d or 2-d, any scheme): the result
 *     has a's dtype. With a block scheme the blocks may run along b's first dim (the
 *     reduction: a weight W [out, in] quantized by rows and used as x @ W^T, the fast form)
 *     or along its last dim. Where b is per-tensor or its blocks run along the reduction,
 *     a's rows are quantized dynamically to int8 in blocks of 32 (q8 EM_QK_BLOCK, f32
 *     scales) and the product is an int8 one (as ggml and PyTorch's dynamic quantized Linear
 *     do; backend.h's qmatmul slot gives the arithmetic); otherwise it is a @ dequantize(b)
 *     in f32. Gradients flow to a (b is a constant) as g @ b^T, itself such a product: in
 *     f32, exactly a @ dequantize(b)'s gradient, for a weight whose blocks run along the
 *     reduction (the linear form); an int8 product (g's rows quantized) for per-tensor
 *     weights and blocks along the output.
 *   - a quantized (1-d or 2-d) @ b float: the same through the transposes; the result has
 *     b's dtype.
 *   - a @ b both int8 quantized (q8 symmetric, or affine with zero point 0, or q8 blocks
 *     along the reduction dim; b 1-d or 2-d): products summed in int32 (within a block, or a
 *     whole row), scaled in f32: an f32 result.
 *   Other pairs (q4 @ q4, a batched quantized operand, zero points in an int8 product) are
 *   EM_ERR_UNSUPPORTED, saying to dequantize. */
em_status em_matmul(const em_tensor *a, const em_tensor *b, em_tensor **out);

/* ---- layout. Views share the input's buffer (reshape of a contiguous tensor, permute,
 *      transpose, expand, slice, split, squeeze, unsqueeze, flip); the rest copy. ---- */
/** One entry of `shape` may be -1 (inferred). A copy when x's strides do not allow a view. */
em_status em_reshape(const em_tensor *x, const int64_t *shape, int rank, em_tensor **out);
em_status em_flatten(const em_tensor *x, int start_dim, int end_dim, em_tensor **out);
/** perm is a permutation of 0..rank-1 (negative entries count from the end). */
em_status em_permute(const em_tensor *x, const int *perm, int rank, em_tensor **out);
em_status em_transpose(const em_tensor *x, int dim0, int dim1, em_tensor **out);
/** The lower / upper triangle of the last two dims (torch.tril / triu): elements with col -
 *  row <= diagonal (tril) or >= diagonal (triu) kept, the others 0. Rank >= 2. */
em_status em_tril(const em_tensor *x, int64_t diagonal, em_tensor **out);
em_status em_triu(const em_tensor *x, int64_t diagonal, em_tensor **out);
/** Broadcasts x to `shape` (new leading dims allowed; -1 keeps a dim). Stride-0 view. */
em_status em_expand(const em_tensor *x, const int64_t *shape, int rank, em_tensor **out);
/** Python-style slice of one dim: start/stop are clamped like Python's (negative counts from
 *  the end), step may be negative but not 0. Use INT64_MAX / INT64_MIN for open ends. */
em_status em_slice(const em_tensor *x, int dim, int64_t start, int64_t stop, int64_t step,
                   em_tensor **out);
/** A copy of x with the slice (as em_slice) overwritten by value (broadcast to it). */
em_status em_slice_assign(const em_tensor *x, int dim, int64_t start, int64_t stop,
                          int64_t step, const em_tensor *value, em_tensor **out);
/** Concatenates n tensors (same dtype, device, and shape except along dim). */
em_status em_cat(const em_tensor *const *xs, size_t n, int dim, em_tensor **out);
/** Stacks n tensors of one shape along a new dim. */
em_status em_stack(const em_tensor *const *xs, size_t n, int dim, em_tensor **out);
/** Splits x along dim into pieces of `size` (the last may be smaller). Writes up to cap views
 *  into outs and the number of pieces into *count; EM_ERR_ARG if cap is too small (nothing
 *  written then, *count still set). */
em_status em_split(const em_tensor *x, int64_t size, int dim, em_tensor **outs, size_t cap,
                   size_t *count);
/** Removes dim (which must have size 1); em_squeeze_all removes every size-1 dim. */
em_status em_squeeze(const em_tensor *x, int dim, em_tensor **out);
em_status em_squeeze_all(const em_tensor *x, em_tensor **out);
/** Inserts a size-1 dim at position dim (in -rank-1 .. rank). */
em_status em_unsqueeze(const em_tensor *x, int dim, em_tensor **out);
/** Reverses the given dims (a negative-stride view). */
em_status em_flip(const em_tensor *x, const int *dims, int ndims, em_tensor **out);
/** Tiles x `reps[i]` times along each dim (like torch.Tensor.repeat; reps may have more
 *  entries than x has dims). */
em_status em_repeat(const em_tensor *x, const int64_t *reps, int nreps, em_tensor **out);

/* ---- indexing (indices are EM_I64 or EM_I32; out-of-range indices are EM_ERR_ARG) ---- */
/** out[i][j][k] = x[index[i][j][k]][j][k] for dim 0, and so on (torch.gather). */
em_status em_gather(const em_tensor *x, int dim, const em_tensor *index, em_tensor **out);
/** A copy of x with src added at the positions index names along dim (torch.scatter_add). */
em_status em_scatter_add(const em_tensor *x, int dim, const em_tensor *index,
                         const em_tensor *src, em_tensor **out);
/** Picks the entries of a 1-d index along dim. */
em_status em_index_select(const em_tensor *x, int dim, const em_tensor *index,
                          em_tensor **out);
/** One-hot encoding of an integer tensor: a new last dim of num_classes, of dtype dt. */
em_status em_one_hot(const em_tensor *index, int64_t num_classes, em_dtype dt,
                     em_tensor **out);
/** Stable sort along dim. values or indices (EM_I64) may be NULL when not wanted. NaNs sort
 *  last ascending, first descending. */
em_status em_sort(const em_tensor *x, int dim, bool descending, em_tensor **values,
                  em_tensor **indices);
em_status em_argsort(const em_tensor *x, int dim, bool descending, em_tensor **out);
/** The k largest (or smallest) along dim, sorted; values or indices may be NULL. */
em_status em_topk(const em_tensor *x, int64_t k, int dim, bool largest, em_tensor **values,
                  em_tensor **indices);

/* ---- neural ---- */
/** Convolution parameters. conv1d uses index 0 of each array. */
typedef struct em_conv_params {
    int64_t stride[2];
    int64_t padding[2];
    int64_t dilation[2];
    int64_t output_padding[2]; /* conv_transpose2d only */
    int64_t groups;
} em_conv_params;

/** stride 1, padding 0, dilation 1, output_padding 0, groups 1. */
em_conv_params em_conv_params_default(void);

/** x [N, C, L], w [O, C/groups, K], bias [O] or NULL. For all three convolutions p may be
 *  NULL, meaning em_conv_params_default(). */
em_status em_conv1d(const em_tensor *x, const em_tensor *w, const em_tensor *bias,
                    const em_conv_params *p, em_tensor **out);
/** x [N, C, H, W], w [O, C/groups, KH, KW], bias [O] or NULL. */
em_status em_conv2d(const em_tensor *x, const em_tensor *w, const em_tensor *bias,
                    const em_conv_params *p, em_tensor **out);
/** x [N, C, H, W], w [C, O/groups, KH, KW], bias [O] or NULL (torch.conv_transpose2d). */
em_status em_conv_transpose2d(const em_tensor *x, const em_tensor *w, const em_tensor *bias,
                              const em_conv_params *p, em_tensor **out);

typedef struct em_pool_params {
    int64_t kernel[2];
    int64_t stride[2]; /* 0 means: equal to kernel */
    int64_t padding[2];
    int64_t dilation[2]; /* max pooling only; 0 means 1 */
    bool ceil_mode;
    bool count_include_pad; /* avg pooling only */
} em_pool_params;

/** x [N, C, H, W]. indices (EM_I64, flat h*W+w in the input plane) may be NULL. Padding is
 *  -inf. */
em_status em_max_pool2d(const em_tensor *x, const em_pool_params *p, em_tensor **out,
                        em_tensor **indices);
em_status em_avg_pool2d(const em_tensor *x, const em_pool_params *p, em_tensor **out);
/** x [N, C, H, W] averaged into [N, C, oh, ow] bins as torch.nn.AdaptiveAvgPool2d; oh and ow
 *  must be >= 1 (EM_ERR_ARG otherwise). */
em_status em_adaptive_avg_pool2d(const em_tensor *x, int64_t oh, int64_t ow, em_tensor **out);
/** Rows of weight [V, D] picked by an integer tensor: out shape idx.shape + [D]. */
em_status em_embedding(const em_tensor *weight, const em_tensor *idx, em_tensor **out);
/** Normalizes over the last `normalized_ndim` dims; weight and bias (shape of those dims) may
 *  be NULL. */
em_status em_layer_norm(const em_tensor *x, int normalized_ndim, const em_tensor *weight,
                        const em_tensor *bias, double eps, em_tensor **out);
/** Batch normalization as torch.nn.functional.batch_norm: x [N, C, ...] (rank >= 2) is
 *  normalized per channel c, (x - mean_c) / sqrt(var_c + eps) * weight_c + bias_c. training:
 *  mean and var are the batch's (the mean and biased variance over N and the trailing dims,
 *  which must hold at least 2 values per channel); running_mean and running_var, when given
 *  (both or neither), are updated in place, r = (1 - momentum) r + momentum stat, with the
 *  unbiased variance (they are buffers: not tracked, no gradient). Eval (training false):
 *  mean and var are running_mean and running_var, which must be given. weight, bias,
 *  running_mean, running_var: [C] of x's dtype and device, or NULL. eps >= 0, momentum finite.
 *  Errors: EM_ERR_SHAPE (rank < 2, a [C] tensor of another shape, one value per channel when
 *  training), EM_ERR_ARG (eps, momentum, one running statistic without the other, eval
 *  without them), EM_ERR_DTYPE, EM_ERR_DEVICE. Gradients flow to x, weight and bias. */
em_status em_batch_norm(const em_tensor *x, em_tensor *running_mean, em_tensor *running_var,
                        const em_tensor *weight, const em_tensor *bias, bool training,
                        double momentum, double eps, em_tensor **out);
/** Group normalization as torch.nn.functional.group_norm: x [N, C, ...] (rank >= 2) with its
 *  C channels in num_groups groups (num_groups >= 1 divides C; EM_ERR_ARG otherwise); each
 *  (sample, group) normalized by its own mean and biased variance, then weight and bias ([C]
 *  or NULL) per channel. eps >= 0. */
em_status em_group_norm(const em_tensor *x, int64_t num_groups, const em_tensor *weight,
                        const em_tensor *bias, double eps, em_tensor **out);
/** RMS normalization as torch.nn.RMSNorm over the last `normalized_ndim` dims:
 *  x / sqrt(mean(x^2) + eps) * weight, weight (shape of those dims) may be NULL. eps >= 0
 *  (PyTorch's default is the dtype's machine epsilon; pass it explicitly). */
em_status em_rms_norm(const em_tensor *x, int normalized_ndim, const em_tensor *weight,
                      double eps, em_tensor **out);
/** softmax(q k^T scale + mask) v as torch.nn.functional.scaled_dot_product_attention: q
 *  [..., L, E], k [..., S, E], v [..., S, Ev] -> [..., L, Ev] (batch dims broadcast). mask
 *  (may be NULL) broadcasts to [..., L, S]: bool (true: the query attends to the key) or
 *  float (added to the scores). causal: query i attends to keys j <= i. scale 0 means
 *  1/sqrt(E). dropout_p in [0, 1) drops attention weights from Philox(seed). A row that
 *  attends to nothing is NaN, as torch's. On a backend with the sdpa slots (ref, cpu) one
 *  kernel computes it in blocks (cpu: the [L, S] scores never exist whole; the per-row
 *  logsumexp is saved for backward, which recomputes the blocks), with the same numbers as
 *  the composition, dropout included; elsewhere, and for a float mask that needs its own
 *  gradient, it is composed from matmul, masked_fill and softmax. */
em_status em_scaled_dot_product_attention(const em_tensor *q, const em_tensor *k,
                                          const em_tensor *v, const em_tensor *mask,
                                          double dropout_p, bool causal, double scale,
                                          uint64_t seed, em_tensor **out);
/** Zeroes each element with probability p and scales the rest by 1/(1-p), from Philox(seed).
 *  p in [0, 1]; with training false, or p == 0, a new reference to x. */
em_status em_dropout(const em_tensor *x, double p, bool training, uint64_t seed,
                     em_tensor **out);
/** Mean cross-entropy of logits [N, C] against class indices [N] (EM_I64/EM_I32), or
 *  against class probabilities [N, C] of the logits' dtype. A 0-d result. */
em_status em_cross_entropy(const em_tensor *logits, const em_tensor *target, em_tensor **out);

/* ======================================================================================
 * 7. Random numbers: Philox-4x32-10 keyed by seed, counter = element index, so one seed
 *    gives the same numbers on every backend.
 * ====================================================================================== */
/** Uniform in [lo, hi). Float dtypes only. */
em_status em_rand_uniform(const int64_t *shape, int rank, em_dtype dt, double lo, double hi,
                          uint64_t seed, em_device dev, em_tensor **out);
/** Normal with mean and std (Box–Muller). Float dtypes only. */
em_status em_rand_normal(const int64_t *shape, int rank, em_dtype dt, double mean, double std,
                         uint64_t seed, em_device dev, em_tensor **out);
/** 1 with probability p, else 0, in dtype dt (any non-quantized dtype). */
em_status em_rand_bernoulli(const int64_t *shape, int rank, em_dtype dt, double p,
                            uint64_t seed, em_device dev, em_tensor **out);

/* ======================================================================================
 * 8. Autodiff
 *
 * Wrap any device with em_device_autodiff (or write "cpu+autodiff", "ref+autodiff:balanced").
 * Float tensors created there are tracked: every op on them is recorded, in the dispatch
 * path, and em_backward walks the record back to the leaves. Int, bool and quantized tensors
 * there are untracked values that still report the autodiff device, so that a float derived
 * from them (a one-hot cast to float) joins the graph as a constant.
 *
 *   - A tracked tensor's strategy is em_tensor_checkpointing(t). Two tracked inputs of one op
 *     with different strategies fail with EM_ERR_STATE naming both; an untracked input mixed
 *     with tracked ones is a constant of the graph (it is promoted to the tracked strategy).
 *     Inputs must share the inner device (backend and index); the autodiff flag may differ.
 *   - EM_CKPT_DISABLED saves, when an op is recorded, every value its backward reads (its
 *     inputs, or its output: relu, softmax). EM_CKPT_BALANCED trades compute for memory:
 *       * Compute-bound ops (matmul, conv1d/2d, conv_transpose2d) keep their output, as long
 *         as a backward rule may still need it: when an output's last handle is released
 *         before any recorded op needed it (directly or through memory-bound ops that would
 *         be recomputed from it), it is let go (the last matmul before a loss costs nothing).
 *         One exception: a matmul whose output is larger than its two inputs together and
 *         cheap to make again (2k FLOPs an output element, k the contracted extent, at most
 *         64 FLOPs for each byte the output holds beyond its inputs) is recomputed from its
 *         inputs, which its own backward holds anyway: attention scores q @ k^T of heads of
 *         32 on 128 positions ([T, T] from two [T, d]) are made again in backward, a Linear
 *         from C to 4C (2C FLOPs an element) keeps its output. Recomputing costs that product
 *         once and no memory.
 *       * Memory-bound ops (elementwise, activations, reductions, softmax, layer_norm,
 *         batch_norm, layout, indexing) keep nothing of their own: a value one of them
 *         produced that a rule reads is recomputed during backward from the nearest kept
 *         output, leaf or saved value, with the op's own forward (batch_norm in training:
 *         its training forward without the running statistics, which the forward updated
 *         once; the batch statistics come out of the same kernel, so the same bits).
 *       * A value is saved instead (as DISABLED does) where it cannot be recomputed: the
 *         output of an op with no recompute (batch_norm in eval mode, whose running
 *         statistics may be updated in place before backward; ops without a gradient), a
 *         value whose recompute needs a kept output already let go, and a value whose
 *         recompute would keep at least as many bytes of other ops' outputs as the value
 *         itself (an add of two values that each saved a large input only to be recomputed:
 *         the sum is saved and those inputs are let go).
 *       * Recomputed values are freed as soon as the last rule that reads them has run, and a
 *         value recomputed only to make another is freed right after, also when a later rule
 *         reads it, if recomputing it again costs at most 3 memory-bound ops from kept values
 *         (a residual block's input, relu(bn(conv))): it is made again for that rule. A value
 *         freed right after its use is handed to the op it is recomputed for, which writes its
 *         result into that buffer where it can (add, sub, mul, div, relu, a * s, a + s): a
 *         chain of recomputes holds one value of each size, not two. A recomputed value read
 *         through views (a split's pieces, a reshape) is made once and lives while they do.
 *     Nothing is held twice: saved values are views of the tensors they save, so a value
 *     saved by two ops, or saved by one and kept by its own, is one buffer. Gradients are the
 *     same bits as DISABLED's on one device (the same kernels recompute the same values).
 *     What BALANCED saves: about one activation per compute-bound op instead of one per value
 *     a rule reads, e.g. GELU or layer_norm between matmuls (their inputs are recomputed, not
 *     kept); with ReLU between matmuls DISABLED already keeps one activation a layer (relu's
 *     output, which the next matmul reads too) and BALANCED keeps the same. The price is one
 *     forward of the memory-bound ops during backward.
 *   - EMBER_CKPT_REPORT=1 in the environment makes every em_backward print, to stderr, the
 *     account of its walk: for each node, its kept output, the inputs it saved (views of
 *     leaves and shared storage marked), how often its value was recomputed and at which
 *     steps of the walk that value was made and freed; then the totals, the device's
 *     memory when the walk began and ended, and the rule during which the walk's peak was
 *     reached (with the bytes in use after it and how many of them were recomputed values).
 *   - Gradients are untracked tensors on the inner device that carry the strategy's mark.
 * ====================================================================================== */

typedef struct em_grads em_grads;

/** Marks a tracked leaf (a float tensor created on an autodiff device, not the result of an
 *  op) so that em_backward collects its gradient; an untracked float tensor of an autodiff
 *  device (made in a no-grad scope) becomes such a leaf. EM_ERR_STATE for another untracked
 *  tensor or a non-leaf. */
em_status em_tensor_require_grad(em_tensor *t);
/** True for a leaf marked with em_tensor_require_grad. */
bool em_tensor_requires_grad(const em_tensor *t);
/** True when t is part of a graph (tracked by autodiff). */
bool em_tensor_is_tracked(const em_tensor *t);
/** An untracked view of t sharing its data: float tensors move to the inner device and keep
 *  their checkpointing mark, so that they can be promoted back when mixed with tracked ones.
 *  A new reference. */
em_status em_tensor_detach(const em_tensor *t, em_tensor **out);

/** Turns recording on or off for this thread (torch.set_grad_enabled) and returns the previous
 *  setting; on by default in every thread. While off (a no-grad scope, as torch.no_grad), ops
 *  on autodiff devices record nothing: their results are untracked tensors of the autodiff
 *  device (em_tensor_is_tracked false), computed by the inner device exactly as there, and
 *  tensors created there are untracked too. Parameters are used in place, without copies, so
 *  an evaluation pass or sampling runs on the training model. Backward and the gradients it
 *  returns do not depend on the setting. Scopes nest by restoring the previous value:
 *
 *      bool was = em_set_grad_enabled(false);
 *      em_module_forward(model, x, false, &y);   // nothing recorded
 *      em_set_grad_enabled(was);
 */
bool em_set_grad_enabled(bool enabled);
/** Whether this thread records (see em_set_grad_enabled). */
bool em_is_grad_enabled(void);

/** Opens a checkpoint region on this thread (torch.utils.checkpoint). Regions nest: the
 *  region lasts until the em_checkpoint_end matching the outermost begin, and a region open
 *  while recording is off (em_set_grad_enabled) changes nothing. Ops recorded until then keep
 *  nothing for backward: the values their backward rules read are recomputed during backward
 *  from the region's inputs (tensors made before the region began, leaves, and values kept
 *  outside it), on any device and under either strategy. The rules:
 *    - Every op of the region is recomputed, compute-bound ones (matmul, conv, attention)
 *      included, with its own forward, so gradients are the same bits as without the region.
 *      A recomputed value is freed as soon as the last rule that reads it has run; a value
 *      read through views (q, k and v of one qkv matmul) is recomputed once for all of them.
 *    - The region's inputs are kept as an op outside it would keep them (DISABLED: saved;
 *      BALANCED: kept or recomputable, saved otherwise), except that a value made in an
 *      earlier region is always saved, so that each region is recomputed on its own (one
 *      region's values alive at a time during backward): what a region costs until
 *      backward is its inputs. A nested region is part of the outermost one.
 *    - A value made in the region is held only while a handle of it lives (that memory is the
 *      handle's anyway; a backward run meanwhile reads it) and recomputed after that. An op
 *      recorded after the region that reads it follows its own strategy: DISABLED saves it
 *      (as it saves any input its rule reads), BALANCED recomputes it.
 *    - Random ops replay: em_dropout's mask and the em_rand_* tensors made in a region are
 *      constants of the graph (saved, not drawn again), and scaled_dot_product_attention's
 *      dropout is recomputed from the seed it recorded.
 *    - batch_norm in training is recomputed without touching the running statistics (see
 *      BALANCED above): they move once, in the forward. An op with no recompute (batch_norm
 *      in eval mode) keeps what its rule reads and its output is saved where a later op
 *      reads it, as DISABLED does.
 *  em_backward inside an open region is EM_ERR_STATE. */
em_status em_checkpoint_begin(void);
/** Ends the innermost open checkpoint region of this thread. EM_ERR_STATE when none is open. */
em_status em_checkpoint_end(void);
/** em_checkpoint_begin, fn(ctx), em_checkpoint_end: the region ends even when fn fails, and
 *  fn's status (its message in em_last_error) is returned. EM_ERR_ARG for NULL fn. */
em_status em_checkpoint_run(em_status (*fn)(void *ctx), void *ctx);

/** Computes the gradients of loss (a tracked tensor with one element) with respect to every
 *  leaf that requires grad, into *out (release with em_grads_release). The tape is freed: a
 *  second backward through the same graph is EM_ERR_STATE. EM_ERR_STATE also for an untracked
 *  loss, EM_ERR_SHAPE for a loss of more than one element. */
em_status em_backward(const em_tensor *loss, em_grads **out);
/** Called by em_backward_hooked when the gradient of params[index] is complete: no rule still
 *  to run adds to it. grad is borrowed (the tensor em_grads_get will give, valid while the set
 *  lives); the hook must not write it (it may be shared with another parameter's). A status
 *  other than EM_OK stops the backward, which returns it. */
typedef em_status (*em_grad_ready_fn)(void *ctx, size_t index, const em_tensor *grad);
/** em_backward, calling hook(ctx, i, grad) for each params[i] (leaves that require grad) as
 *  its gradient becomes complete, while the walk goes on: data-parallel training starts
 *  reducing a bucket of gradients while backward still runs (include/ember/dist.h). The order
 *  is the walk's (the last layers first, as a rule). A parameter the loss does not reach gets
 *  no call (em_grads_get then gives NULL). Errors: those of em_backward; EM_ERR_ARG for NULL
 *  hook or params with nparams > 0, or a NULL or released params[i]. */
em_status em_backward_hooked(const em_tensor *loss, const em_tensor *const *params,
                             size_t nparams, em_grad_ready_fn hook, void *ctx, em_grads **out);
/** The gradient of param (a new reference, param's shape and dtype, on its inner device), or
 *  *out = NULL (and EM_OK) when param received none. */
em_status em_grads_get(const em_grads *g, const em_tensor *param, em_tensor **out);
/** Frees a gradient set. NULL is a no-op. */
void em_grads_release(em_grads *g);
/** Gradient accumulation over micro-batches: adds g's gradients into acc (acc's gradient of
 *  each leaf becomes a new tensor, acc_grad + g_grad; a leaf only g has is added to acc with
 *  g's gradient, shared). g is unchanged and still to be released; gradients taken from acc
 *  with em_grads_get before keep their values. Scale each micro-batch's loss (e.g. by 1 / the
 *  number of micro-batches) for a mean:
 *
 *      em_grads *acc = NULL, *g;
 *      for (k = 0; k < K; k++) {            // loss_k = mean over micro-batch k, times 1 / K
 *          em_backward(loss_k, &g);
 *          if (!acc) acc = g; else { em_grads_add(acc, g); em_grads_release(g); }
 *      }
 *      em_optimizer_step(opt, acc, 1.0);  em_grads_release(acc);
 *
 *  EM_ERR_ARG for NULL acc or g, or acc == g; the errors of em_add (a gradient of the same leaf
 *  of another dtype or device); EM_ERR_NOMEM. Nothing changes on error. */
em_status em_grads_add(em_grads *acc, const em_grads *g);
/** An empty set of gradients (release with em_grads_release), for gradients computed
 *  elsewhere (a replayed graph's outputs, include/ember/graph.h) and handed to
 *  em_optimizer_step through em_grads_set. Errors: EM_ERR_ARG, EM_ERR_NOMEM. */
em_status em_grads_create(em_grads **out);
/** Sets param's gradient in g to grad (retained; it replaces one param had in g). param is a
 *  leaf that requires grad; grad an untracked tensor of its dtype and shape on its device
 *  (autodiff flag aside). Errors: EM_ERR_ARG (NULL, released), EM_ERR_STATE (param not such
 *  a leaf, grad tracked), EM_ERR_DEVICE, EM_ERR_DTYPE, EM_ERR_SHAPE, EM_ERR_NOMEM. */
em_status em_grads_set(em_grads *g, const em_tensor *param, em_tensor *grad);

/* ---- memory, from the backends' allocators ---- */

typedef struct em_memory_stats {
    size_t bytes_in_use;  /* handed to tensors by this device's backend now */
    size_t peak_bytes;    /* the most in use since the last reset */
    size_t bytes_cached;  /* kept by a caching allocator for reuse (not in use) */
} em_memory_stats;

/** The memory use of a device (its inner device for autodiff ones). EM_ERR_UNSUPPORTED when
 *  its backend keeps no count. bytes_in_use is what live tensors (and kernels' scratch while
 *  they run) hold: the core's per-thread cache of tiny buffers (at most 32 buffers of at most
 *  256 bytes a thread, kept so that tiny ops allocate nothing) is handed back to the
 *  backends on the calling thread first, so that once every tensor is released the count is
 *  0. Another thread's cache is given back when that thread exits or calls this. */
em_status em_device_memory(em_device dev, em_memory_stats *out);
/** Sets the device's peak to its current use. */
em_status em_device_memory_reset_peak(em_device dev);
/** Gives the memory a device's caching allocator keeps back to the system (a no-op for
 *  backends without one), and the calling thread's cached tiny buffers to their backends. */
em_status em_device_memory_release(em_device dev);

#ifdef __cplusplus
}
#endif
#endif /* EMBER_EMBER_H */
