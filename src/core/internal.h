/*
 * internal.h — what src/ops and src/core share: the tensor handle's layout, error helpers,
 * argument checks, and the calls that allocate outputs and route to a backend.
 * Not installed; backends never include it.
 */
#ifndef EMBER_INTERNAL_H
#define EMBER_INTERNAL_H

#include <stdatomic.h>
#include <stdarg.h>

#include "ember/backend.h"
#include "ember/ember.h"

/* ---- storage and tensor ---- */

/** A backend buffer shared by a tensor and its views. */
typedef struct emi_storage {
    atomic_int refs;
    const em_backend_ops *ops;
    void *ctx;
    void *buf;
    size_t bytes;
} emi_storage;

struct em_tensor {
    atomic_int refs;
    emi_storage *st;
    em_view v;          /* v.buf == st->buf; for quantized tensors v.dtype is the storage dtype */
    em_dtype dtype;     /* the public dtype (EM_Q8 / EM_Q4 for quantized tensors) */
    em_quant_scheme scheme;
    em_device dev;
    em_checkpointing ckpt; /* EM_CKPT_NONE: untracked */
    void *ad;              /* the autodiff node, when tracked (issue 3) */
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

/** t != NULL ("<fn>: <what> is NULL"). */
em_status emi_check_tensor(const char *fn, const char *what, const em_tensor *t);
/** out != NULL. */
em_status emi_check_out(const char *fn, const void *out);
/** t's kind is float: "<fn>: expected a float tensor, got int (i64)". */
em_status emi_check_float(const char *fn, const em_tensor *t);
/** t's kind is float or int. */
em_status emi_check_numeric(const char *fn, const em_tensor *t);
/** t's kind is bool. */
em_status emi_check_bool(const char *fn, const em_tensor *t);
/** t's kind is int (EM_I64/I32/I16/I8/U8). */
em_status emi_check_int(const char *fn, const em_tensor *t);
/** t's dtype is EM_I64 or EM_I32 (index tensors). */
em_status emi_check_index(const char *fn, const em_tensor *t);
/** t is not quantized ("<fn>: quantized tensors (q8) are not supported; dequantize first"). */
em_status emi_check_not_quantized(const char *fn, const em_tensor *t);
/** a and b are on one device ("<fn>: tensors are on different devices: ref and cpu:0"). */
em_status emi_check_same_device(const char *fn, const em_tensor *a, const em_tensor *b);
/** a and b have one dtype ("<fn>: dtypes differ: f32 and f64"). */
em_status emi_check_same_dtype(const char *fn, const em_tensor *a, const em_tensor *b);
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
int64_t emi_numel(const int64_t *shape, int rank);
/** Row-major strides of a shape. */
void emi_contiguous_strides(const int64_t *shape, int rank, int64_t *strides);
/** True when v is row-major without gaps (size-1 dims may have any stride). */
bool emi_view_is_contiguous(const em_view *v);
/** Formats a shape as "[2, 3]" into buf. Returns buf. */
const char *emi_shape_str(const int64_t *shape, int rank, char *buf, size_t cap);

/* ---- routing ---- */

/** The ops table and context of a device (EM_ERR_DEVICE if it is absent). The autodiff flag
 *  is ignored: an autodiff device routes to its inner backend. */
em_status emi_backend(em_device dev, const em_backend_ops **ops, void **ctx);

/** Fails with EM_ERR_UNSUPPORTED "<fn>: the <backend> backend does not implement <slot>"
 *  when slot is NULL. Use: EMI_TRY(emi_need(fn, t->st->ops, t->st->ops->unary != NULL,
 *  "unary")). */
em_status emi_need(const char *fn, const em_backend_ops *ops, bool present, const char *slot);

/** A new contiguous tensor of the given dtype/shape on dev, with uninitialized contents.
 *  The tensor is untracked (ckpt NONE); ops set tracking through emi_finish. */
em_status emi_empty(const char *fn, em_device dev, em_dtype dt, const int64_t *shape, int rank,
                    em_tensor **out);

/** A new tensor sharing base's storage with the given view geometry (shape/strides/offset in
 *  elements). Inherits dtype, device and tracking of base. */
em_status emi_view_tensor(const em_tensor *base, const int64_t *shape, const int64_t *strides,
                          int rank, int64_t offset, em_tensor **out);

/** base's view broadcast to `shape` (stride 0 on added or size-1 dims). Assumes the shapes
 *  broadcast. */
em_view emi_broadcast_view(const em_tensor *t, const int64_t *shape, int rank);

/** A view of t the backend can read: t's own view if the backend takes strided inputs or t is
 *  contiguous; otherwise a contiguous copy is made into *tmp (release it after the kernel).
 *  *tmp is NULL when no copy was needed. */
em_status emi_input_view(const char *fn, const em_tensor *t, em_view *v, em_tensor **tmp);

/** The device an op's output lives on given its inputs: the first input's device; the
 *  autodiff layer (issue 3) extends this to strategy promotion. */
em_device emi_result_device(const em_tensor *const *ins, int n);

/** Reads t's whole contents into a malloc'd row-major host buffer (caller frees). */
em_status emi_read_all(const em_tensor *t, void **data, size_t *bytes);

/** A strided copy of src's elements into dst (same shape), converting dtype. */
em_status emi_copy_into(const char *fn, em_tensor *dst, const em_tensor *src);

/** Thread-safe retain / release of storage. */
void emi_storage_release(emi_storage *st);

#endif /* EMBER_INTERNAL_H */
