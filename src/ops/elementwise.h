/*
 * elementwise.h — the shared machinery of the elementwise ops (src/ops/unary.c, binary.c,
 * compare.c): argument checks, output allocation (in place for the consuming `_` variants)
 * and routing to the backend's unary / binary / binary_scalar / where slots.
 * Private to src/ops.
 */
#ifndef EMBER_OPS_ELEMENTWISE_H
#define EMBER_OPS_ELEMENTWISE_H

#include "core/internal.h"

/** The kinds an elementwise op accepts. */
typedef enum ew_kind {
    EW_FLOAT,   /* float only */
    EW_NUMERIC, /* float or int */
    EW_BOOL,    /* bool only */
    EW_ANY      /* float, int or bool (quantized refused) */
} ew_kind;

/** *out = op(x). params: EM_UN_CLAMP's lo and hi, otherwise NULL. */
em_status ew_unary(const char *fn, em_unary_op op, ew_kind k, const em_tensor *x,
                   const double *params, em_tensor **out);
/** As ew_unary, consuming x (released, also on failure); written in place when possible. */
em_status ew_unary_(const char *fn, em_unary_op op, ew_kind k, em_tensor *x,
                    const double *params, em_tensor **out);

/** *out = a op b, broadcast; comparisons give EM_BOOL. */
em_status ew_binary(const char *fn, em_binary_op op, ew_kind k, const em_tensor *a,
                    const em_tensor *b, em_tensor **out);
/** As ew_binary, consuming a. */
em_status ew_binary_(const char *fn, em_binary_op op, ew_kind k, em_tensor *a,
                     const em_tensor *b, em_tensor **out);

/** *out = a op s, s first converted to a's dtype. */
em_status ew_scalar(const char *fn, em_binary_op op, ew_kind k, const em_tensor *a, double s,
                    em_tensor **out);
/** As ew_scalar, consuming a. */
em_status ew_scalar_(const char *fn, em_binary_op op, ew_kind k, em_tensor *a, double s,
                     em_tensor **out);

/** *out = cond ? a : b, broadcast over all three. */
em_status ew_where(const char *fn, const em_tensor *cond, const em_tensor *a,
                   const em_tensor *b, em_tensor **out);

/** s as a value of dtype dt: rounded to a float dtype, truncated toward zero (then wrapped to
 *  the width) for ints, s != 0 for bool. */
double ew_scalar_cast(em_dtype dt, double s);

#endif /* EMBER_OPS_ELEMENTWISE_H */
