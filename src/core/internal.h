/*
 * internal.h — what src/ops and src/core share: the tensor handle's layout, error helpers,
 * argument checks, and the calls that allocate outputs and route to a backend.
 * Not installed; backends never include it.
 */
#ifndef EMBER_INTERNAL_H
#define EMBER_INTERNAL_H

#include <stdatomic.h>
#include <stdarg.h>
#include <string.h>

#include "ember/backend.h"
#include "ember/ember.h"

/* ---- storage and tensor ---- */

typedef struct emi_ad_node emi_ad_node; /* src/autodiff */

/** A backend buffer shared by a tensor and its views. */
typedef struct emi_storage {
    atomic_int refs;
    const em_backend_ops *ops;
    void *ctx;
    void *buf;
    size_t bytes;
    /* Set for a buffer borrowed from another host-memory backend's storage (em_to_device
     * between two such backends copies nothing): buf is base->buf, freeing drops base. */
    struct emi_storage *base;
} emi_storage;

/* In sanitizer builds released handles are not recycled (see src/core/tensor.c), so that
 * AddressSanitizer reports a use after release. */
#if defined(__SANITIZE_ADDRESS__)
#define EMI_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMI_ASAN 1
#endif
#endif
#ifndef EMI_ASAN
#define EMI_ASAN 0
#endif

/* em_tensor.magic: EMI_TENSOR_LIVE from creation until the last release, then
 * EMI_TENSOR_DEAD, so that a released handle passed back in (while its memory is still
 * ember's, e.g. in the handle cache) is refused with EM_ERR_ARG "released tensor" instead of
 * being read. A handle that was already recycled for a new tensor cannot be told apart in a
 * plain build; ASan builds catch that case. */
#define EMI_TENSOR_LIVE 0x454d7431u /* "EMt1" */
#define EMI_TENSOR_DEAD 0x64656164u /* "dead" */

struct em_tensor {
    atomic_int refs;
    uint32_t magic; /* EMI_TENSOR_LIVE while the handle is live (fills the padding) */
    emi_storage *st;
    em_view v;          /* v.buf == st->buf; for quantized tensors v.dtype is the storage dtype */
    em_dtype dtype;     /* the public dtype (EM_Q8 / EM_Q4 for quantized tensors) */
    em_quant_scheme scheme;
    em_device dev;
    em_checkpointing ckpt; /* EM_CKPT_NONE: untracked */
    uint32_t scope_ix;     /* 1 + its entry in this thread's open scopes (scope.c), 0: none */
    emi_ad_node *ad;       /* the graph node when tracked by autodiff, else NULL */
};

/* ---- errors ---- */

/** Sets this thread's message (printf-style) and returns s. */
em_status emi_fail(em_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
em_status emi_vfail(em_status s, const char *fmt, va_list ap);

/** Evaluates a status expression and returns it from the caller when not EM_OK. */
#define EMI_TRY(expr)                                                                        \
    do {                                                                                     \
        em_status emi_s_ = (expr);                                                           \
        if (emi_s_ != EM_OK) return emi_s_;                                                  \
    } while (0)

/* ---- argument checks: each returns EM_OK or fails with "<fn>: ..." ---- */

/* The checks on an op's hot path are inline; their failure paths are not. */
em_status emi_fail_null(const char *fn, const char *what);
em_status emi_fail_kind(const char *fn, const char *want, const em_tensor *t);
em_status emi_fail_devices(const char *fn, const em_tensor *a, const em_tensor *b);
em_status emi_fail_dtypes(const char *fn, const em_tensor *a, const em_tensor *b);
em_status emi_fail_released(const char *fn, const char *what);

/** The kind of a valid dtype (table lookup). */
static inline em_kind emi_kind(em_dtype dt) {
    static const em_kind k[EM_DTYPE_COUNT] = {
        EM_KIND_FLOAT, EM_KIND_FLOAT, EM_KIND_FLOAT, EM_KIND_FLOAT, EM_KIND_INT,       EM_KIND_INT,
        EM_KIND_INT,   EM_KIND_INT,   EM_KIND_INT,   EM_KIND_BOOL,  EM_KIND_QUANTIZED, EM_KIND_QUANTIZED};
    return k[dt];
}

/** t != NULL ("<fn>: <what> is NULL") and t is not a released handle ("<fn>: <what> is a
 *  released tensor", EM_ERR_ARG). */
static inline em_status emi_check_tensor(const char *fn, const char *what, const em_tensor *t) {
    if (!t) return emi_fail_null(fn, what);
    return t->magic == EMI_TENSOR_LIVE ? EM_OK : emi_fail_released(fn, what);
}

/** The size in bytes of an element of dt (0 for an invalid dtype): em_dtype_size, inline. */
extern const uint8_t emi_dtype_sizes[EM_DTYPE_COUNT];
static inline size_t emi_dtype_size(em_dtype dt) {
    return (unsigned)dt < EM_DTYPE_COUNT ? emi_dtype_sizes[dt] : 0;
}

/** True when t is outside autodiff altogether: untracked, on a plain device, unmarked. An op
 *  whose inputs are all plain records nothing and its result is a plain tensor on the first
 *  input's device, which is what emi_empty makes: such an op may skip emi_ad_begin /
 *  emi_ad_end (the tiny-op fast path). */
static inline bool emi_plain(const em_tensor *t) {
    return !t->ad && !t->dev.autodiff && t->ckpt == EM_CKPT_NONE;
}

/** Checks a device value passed to a public call: backend id in 0..EM_BACKEND_MAX-1, index
 *  >= 0, checkpointing an em_checkpointing value (DISABLED or BALANCED on an autodiff
 *  device). EM_ERR_ARG "<fn>: invalid device: <field> ..." otherwise. Whether the device is
 *  present is emi_backend's question (EM_ERR_DEVICE). */
em_status emi_fail_device_value(const char *fn, em_device dev);
static inline em_status emi_check_device_value(const char *fn, em_device dev) {
    if ((unsigned)dev.backend < EM_BACKEND_MAX && dev.index >= 0 &&
        (dev.autodiff ? (dev.checkpointing == EM_CKPT_DISABLED ||
                         dev.checkpointing == EM_CKPT_BALANCED)
                      : (unsigned)dev.checkpointing <= EM_CKPT_BALANCED))
        return EM_OK;
    return emi_fail_device_value(fn, dev);
}
/** emi_check_device_value, then the device's presence (EM_ERR_DEVICE "<fn>: ..."). */
em_status emi_check_device(const char *fn, em_device dev);
/** out != NULL. */
static inline em_status emi_check_out(const char *fn, const void *out) {
    return out ? EM_OK : emi_fail_null(fn, "out");
}
/** t's kind is float: "<fn>: expected a float tensor, got int (i64)". */
static inline em_status emi_check_float(const char *fn, const em_tensor *t) {
    return emi_kind(t->dtype) == EM_KIND_FLOAT ? EM_OK : emi_fail_kind(fn, "a float", t);
}
/** t's kind is float or int. */
static inline em_status emi_check_numeric(const char *fn, const em_tensor *t) {
    em_kind k = emi_kind(t->dtype);
    return (k == EM_KIND_FLOAT || k == EM_KIND_INT) ? EM_OK
                                                    : emi_fail_kind(fn, "a float or int", t);
}
/** t's kind is bool. */
static inline em_status emi_check_bool(const char *fn, const em_tensor *t) {
    return emi_kind(t->dtype) == EM_KIND_BOOL ? EM_OK : emi_fail_kind(fn, "a bool", t);
}
/** t's kind is int (EM_I64/I32/I16/I8/U8). */
static inline em_status emi_check_int(const char *fn, const em_tensor *t) {
    return emi_kind(t->dtype) == EM_KIND_INT ? EM_OK : emi_fail_kind(fn, "an int", t);
}
/** a and b are on one inner device ("<fn>: tensors are on different devices: ref and cpu:0"). */
static inline em_status emi_check_same_device(const char *fn, const em_tensor *a,
                                              const em_tensor *b) {
    /* One inner device; the autodiff flag may differ (an untracked input is a constant). */
    if (a->dev.backend == b->dev.backend && a->dev.index == b->dev.index) return EM_OK;
    return emi_fail_devices(fn, a, b);
}
/** a and b have one dtype ("<fn>: dtypes differ: f32 and f64"). */
static inline em_status emi_check_same_dtype(const char *fn, const em_tensor *a,
                                             const em_tensor *b) {
    return a->dtype == b->dtype ? EM_OK : emi_fail_dtypes(fn, a, b);
}
/** t's dtype is EM_I64 or EM_I32 (index tensors). */
em_status emi_check_index(const char *fn, const em_tensor *t);
/** t is not quantized ("<fn>: quantized tensors (q8) are not supported; dequantize first"). */
em_status emi_check_not_quantized(const char *fn, const em_tensor *t);
/** Normalizes dim for a tensor of `rank` (rank 0 accepts dims 0 and -1 only when allow0d).
 *  "<fn>: dim 5 out of range for rank 2". */
em_status emi_norm_dim(const char *fn, int dim, int rank, int *out);
/** Validates a shape (rank 0..8, dims >= 0, numel fits) and computes numel. */
em_status emi_check_shape(const char *fn, const int64_t *shape, int rank, int64_t *numel);

/* ---- shapes ---- */

/** NumPy broadcast of two shapes ("<fn>: shapes [2, 3] and [4] cannot be broadcast"). */
em_status emi_broadcast_shapes(const char *fn, const int64_t *a, int ra, const int64_t *b,
                               int rb, int64_t *out, int *rout);
/** The product of dims (0-d: 1). Assumes a checked shape. */
static inline int64_t emi_numel(const int64_t *shape, int rank) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= shape[i];
    return n;
}
/** Row-major strides of a shape. */
void emi_contiguous_strides(const int64_t *shape, int rank, int64_t *strides);
/** True when v is row-major without gaps (size-1 dims may have any stride). */
bool emi_view_is_contiguous(const em_view *v);
/** Formats a shape as "[2, 3]" into buf. Returns buf. */
const char *emi_shape_str(const int64_t *shape, int rank, char *buf, size_t cap);

/* ---- routing ---- */

/** The ops table and context of a device (EM_ERR_DEVICE if it is absent). The autodiff flag
 *  is ignored: an autodiff device routes to its inner backend. */
#define EMI_MAX_DEVICES 64
extern _Atomic(const em_backend_ops *) emi_backends[EM_BACKEND_MAX];
extern _Atomic(void *) emi_ctxs[EM_BACKEND_MAX][EMI_MAX_DEVICES];
em_status emi_backend_slow(em_device dev, const em_backend_ops **ops, void **ctx);
static inline em_status emi_backend(em_device dev, const em_backend_ops **ops, void **ctx) {
    if ((unsigned)dev.backend < EM_BACKEND_MAX && (unsigned)dev.index < EMI_MAX_DEVICES) {
        void *c = atomic_load_explicit(&emi_ctxs[dev.backend][dev.index], memory_order_acquire);
        if (c) { /* open, hence present */
            *ops = atomic_load_explicit(&emi_backends[dev.backend], memory_order_relaxed);
            *ctx = c;
            return EM_OK;
        }
    }
    return emi_backend_slow(dev, ops, ctx);
}

/** Fails with EM_ERR_UNSUPPORTED "<fn>: the <backend> backend does not implement <slot>"
 *  when slot is NULL. Use: EMI_TRY(emi_need(fn, t->st->ops, t->st->ops->unary != NULL,
 *  "unary")). */
em_status emi_fail_need(const char *fn, const em_backend_ops *ops, const char *slot);
static inline em_status emi_need(const char *fn, const em_backend_ops *ops, bool present,
                                 const char *slot) {
    return present ? EM_OK : emi_fail_need(fn, ops, slot);
}

/** A new contiguous tensor of the given dtype/shape on dev, with uninitialized contents.
 *  The tensor is untracked (ckpt NONE); ops set tracking through emi_finish. */
em_status emi_empty(const char *fn, em_device dev, em_dtype dt, const int64_t *shape, int rank,
                    em_tensor **out);

/** A new tensor sharing base's storage with the given view geometry (shape/strides/offset in
 *  elements). Inherits dtype, device and tracking of base. */
/** A tensor on dev (a host-memory backend) over t's buffer, with t's view: no copy. The
 *  source storage stays alive while the new one does; neither can be mutated in place while
 *  the other stands. t's backend must have EM_CAP_HOST_MEMORY too. */
em_status emi_borrow_tensor(const char *fn, const em_tensor *t, em_device dev, em_tensor **out);
em_status emi_view_tensor(const em_tensor *base, const int64_t *shape, const int64_t *strides,
                          int rank, int64_t offset, em_tensor **out);

/** base's view broadcast to `shape` (stride 0 on added or size-1 dims). Assumes the shapes
 *  broadcast. */
em_view emi_broadcast_view(const em_tensor *t, const int64_t *shape, int rank);

/** The view through which a kernel reads t as an operand of an op whose output has `shape`:
 *  t's own view when it needs neither broadcasting nor a copy (no struct copied), otherwise
 *  one built in *scratch (broadcast with stride 0), from a contiguous copy in *tmp when the
 *  backend does not take strided inputs. *tmp is NULL when no copy was made; release it after
 *  the kernel. */
/** True when two shapes are equal. */
static inline bool emi_same_shape(const int64_t *a, int ra, const int64_t *b, int rb) {
    if (ra != rb) return false;
    if (a == b) return true;
    for (int i = 0; i < ra; i++)
        if (a[i] != b[i]) return false;
    return true;
}
em_status emi_operand_slow(const char *fn, const em_tensor *t, const int64_t *shape, int rank,
                           em_view *scratch, const em_view **v, em_tensor **tmp);
bool emi_view_is_contiguous(const em_view *v);
static inline em_status emi_operand(const char *fn, const em_tensor *t, const int64_t *shape,
                                    int rank, em_view *scratch, const em_view **v,
                                    em_tensor **tmp) {
    if (emi_same_shape(t->v.shape, t->v.rank, shape, rank) &&
        ((t->st->ops->caps & EM_CAP_STRIDED_INPUTS) || emi_view_is_contiguous(&t->v))) {
        *tmp = NULL;
        *v = &t->v;
        return EM_OK;
    }
    return emi_operand_slow(fn, t, shape, rank, scratch, v, tmp);
}

/** A view of t the backend can read: t's own view if the backend takes strided inputs or t is
 *  contiguous; otherwise a contiguous copy is made into *tmp (release it after the kernel).
 *  *tmp is NULL when no copy was needed. */
em_status emi_input_view(const char *fn, const em_tensor *t, em_view *v, em_tensor **tmp);

/** The device an op's output lives on given its inputs: the first input's device; the
 *  autodiff layer (issue 3) extends this to strategy promotion. */
static inline em_device emi_result_device(const em_tensor *const *ins, int n) {
    (void)n;
    return ins[0]->dev;
}

/** Reads t's whole contents into a malloc'd row-major host buffer (caller frees); a block
 *  quantized tensor gives its blocks' bytes (emi_qbytes_view of its axis-last form). */
em_status emi_read_all(const em_tensor *t, void **data, size_t *bytes);

/* ---- quantized tensors (src/ops/quant.c) ---- */

/** True for a tensor of a block scheme (its view addresses blocks of 32, see backend.h). */
static inline bool emi_qblocked(const em_tensor *t) {
    return emi_kind(t->dtype) == EM_KIND_QUANTIZED &&
           (t->scheme.kind == EM_QK_BLOCK || t->scheme.kind == EM_QK_BLOCK_MIN);
}
/** Checks that t's view (just made from a block tensor's) keeps every block whole and sets
 *  t->scheme.axis; EM_ERR_UNSUPPORTED saying what would be cut otherwise. */
em_status emi_qview_check(em_tensor *t);
/** The bytes the contiguous form of t holds (numel * dtype size; blocks for block tensors). */
size_t emi_data_bytes(const em_tensor *t);
/** A fresh copy of block tensor t on dev (its own device for a clone), same shape and
 *  scheme, its blocks laid out with the block axis last (t's layout when t is contiguous). */
em_status emi_qclone(const char *fn, const em_tensor *t, em_device dev, em_tensor **out);
/** emi_read_all of a block tensor: its blocks' bytes, block axis last. */
em_status emi_qread_all(const em_tensor *t, void **data, size_t *bytes);
/** em_matmul where a or b is quantized (both checked as live handles). */
em_status emi_qmatmul(const char *fn, const em_tensor *a, const em_tensor *b, em_tensor **out);

/** A strided copy of src's elements into dst (same shape), converting dtype. */
em_status emi_copy_into(const char *fn, em_tensor *dst, const em_tensor *src);

/** Prefixes this thread's message with "fn: " and returns s. */
em_status emi_fail_prefixed(em_status s, const char *fn);

/** Drops a tracked tensor's graph node (src/autodiff). */
void emi_ad_release(em_tensor *t);

/* ---- tensor scopes (src/core/scope.c) ---- */

/** Nonzero while a scope is open on this thread and registration is not suspended: a new
 *  handle then joins the innermost scope (emi_scope_register). */
extern _Thread_local int emi_scope_on
#if defined(__GNUC__) && defined(__ELF__)
    __attribute__((tls_model("initial-exec")))
#endif
    ;
void emi_scope_register(em_tensor *t);
/** Moves t (a consumed input reused as an op's result) into the innermost scope. */
void emi_scope_adopt(em_tensor *t);
/** Takes t out of its scope, if it is in one (an owner stores it). */
void emi_scope_forget(em_tensor *t);
/** While suspended (nestable), nothing registers: code that keeps what it makes (em_backward)
 *  runs suspended. */
int emi_scope_suspend(void);
void emi_scope_resume(void);
/** A new reference to t for a caller: t retained outside a scope; inside one, a new handle of
 *  the same tensor (storage and graph node shared) that the scope owns. What an op that
 *  returns its input uses. */
em_status emi_share(const em_tensor *t, em_tensor **out);
/** Makes v (a fresh view of t) the same value of t's graph (src/autodiff). */
void emi_ad_share(em_tensor *v, const em_tensor *t);
/** Thread-safe retain / release of storage. */
void emi_storage_release(emi_storage *st);

/* ---- plugins (src/core/plugin.c) ---- */
/** The name a built-in backend id has ("torch" for EM_BACKEND_TORCH), or NULL. */
const char *emi_builtin_backend_name(em_backend b);
/** Loads the plugin of backend `name` (n bytes) when one was found and is not loaded yet.
 *  EM_OK once it is registered; else its status and message (*absent set when there is no
 *  such plugin: EM_ERR_DEVICE, naming the directories searched). */
em_status emi_plugin_autoload(const char *name, size_t n, bool *absent);
/** Loads every plugin found and not loaded yet (failures are recorded, not returned). */
void emi_plugin_load_all(void);
/** Hands the tiny buffers this thread's block cache keeps back to their backends (tensor.c):
 *  em_device_memory then counts only what tensors hold. */
void emi_tensor_cache_drain(void);

#endif /* EMBER_INTERNAL_H */
