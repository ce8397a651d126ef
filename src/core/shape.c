/* shape.c — shape validation, broadcasting, strides, and the common argument checks. */
#include <stdio.h>
#include <string.h>

#include "core/internal.h"

const char *emi_shape_str(const int64_t *shape, int rank, char *buf, size_t cap) {
    size_t n = 0;
    if (cap == 0) return buf;
    n += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < rank && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
    return buf;
}

void emi_contiguous_strides(const int64_t *shape, int rank, int64_t *strides) {
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i] > 1 ? shape[i] : 1;
    }
}

bool emi_view_is_contiguous(const em_view *v) {
    int64_t s = 1;
    for (int i = v->rank - 1; i >= 0; i--) {
        if (v->shape[i] == 0) return true;
        if (v->shape[i] != 1 && v->strides[i] != s) return false;
        s *= v->shape[i];
    }
    return true;
}

em_status emi_check_shape(const char *fn, const int64_t *shape, int rank, int64_t *numel) {
    if (rank < 0 || rank > EM_MAX_RANK)
        return emi_fail(EM_ERR_SHAPE, "%s: rank %d is outside 0..%d", fn, rank, EM_MAX_RANK);
    if (rank > 0 && !shape) return emi_fail(EM_ERR_ARG, "%s: shape is NULL with rank %d", fn, rank);
    int64_t n = 1;
    bool zero = false;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 0)
            return emi_fail(EM_ERR_ARG, "%s: dim %d is negative (%lld)", fn, i,
                            (long long)shape[i]);
        if (shape[i] == 0) zero = true;
    }
    /* Overflow is checked on the non-zero dims so that [0, 2^62, 2^62] is still refused:
     * such a shape cannot be strided without overflow either. */
    for (int i = 0; i < rank; i++) {
        int64_t d = shape[i] ? shape[i] : 1;
        if (__builtin_mul_overflow(n, d, &n) || n > INT64_MAX / 16)
            return emi_fail(EM_ERR_SHAPE, "%s: shape overflows (too many elements)", fn);
    }
    if (numel) *numel = zero ? 0 : n;
    return EM_OK;
}

em_status emi_broadcast_shapes(const char *fn, const int64_t *a, int ra, const int64_t *b,
                               int rb, int64_t *out, int *rout) {
    if (emi_same_shape(a, ra, b, rb)) {
        for (int i = 0; i < ra; i++) out[i] = a[i];
        *rout = ra;
        return EM_OK;
    }
    int r = ra > rb ? ra : rb;
    int64_t tmp[EM_MAX_RANK];
    for (int i = 0; i < r; i++) {
        int ia = ra - r + i, ib = rb - r + i;
        int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
        if (da == db || db == 1) tmp[i] = da;
        else if (da == 1) tmp[i] = db;
        else {
            char sa[128], sb[128];
            return emi_fail(EM_ERR_SHAPE, "%s: shapes %s and %s cannot be broadcast", fn,
                            emi_shape_str(a, ra, sa, sizeof sa), emi_shape_str(b, rb, sb, sizeof sb));
        }
    }
    memcpy(out, tmp, sizeof(int64_t) * (size_t)r);
    *rout = r;
    return EM_OK;
}

em_status emi_norm_dim(const char *fn, int dim, int rank, int *out) {
    int r = rank > 0 ? rank : 1; /* a 0-d tensor accepts dim 0 and -1, like PyTorch */
    if (dim < -r || dim >= r)
        return emi_fail(EM_ERR_ARG, "%s: dim %d out of range for rank %d", fn, dim, rank);
    *out = dim < 0 ? dim + r : dim;
    return EM_OK;
}

/* ---- checks: the failure paths of the inline checks in internal.h ---- */

em_status emi_fail_null(const char *fn, const char *what) {
    return emi_fail(EM_ERR_ARG, "%s: %s is NULL", fn, what);
}

em_status emi_fail_released(const char *fn, const char *what) {
    return emi_fail(EM_ERR_ARG, "%s: %s is a released tensor", fn, what);
}

em_status emi_fail_kind(const char *fn, const char *want, const em_tensor *t) {
    return emi_fail(EM_ERR_DTYPE, "%s: expected %s tensor, got %s (%s)", fn, want,
                    em_kind_name(em_dtype_kind(t->dtype)), em_dtype_name(t->dtype));
}

em_status emi_fail_devices(const char *fn, const em_tensor *a, const em_tensor *b) {
    char na[64] = "?", nb[64] = "?";
    em_device_name(a->dev, na, sizeof na);
    em_device_name(b->dev, nb, sizeof nb);
    return emi_fail(EM_ERR_DEVICE, "%s: tensors are on different devices: %s and %s", fn, na, nb);
}

em_status emi_fail_dtypes(const char *fn, const em_tensor *a, const em_tensor *b) {
    return emi_fail(EM_ERR_DTYPE, "%s: dtypes differ: %s and %s", fn, em_dtype_name(a->dtype),
                    em_dtype_name(b->dtype));
}

em_status emi_check_index(const char *fn, const em_tensor *t) {
    if (t->dtype == EM_I64 || t->dtype == EM_I32) return EM_OK;
    return emi_fail(EM_ERR_DTYPE, "%s: expected an index tensor (i64 or i32), got %s (%s)", fn,
                    em_kind_name(em_dtype_kind(t->dtype)), em_dtype_name(t->dtype));
}

em_status emi_check_not_quantized(const char *fn, const em_tensor *t) {
    if (em_dtype_kind(t->dtype) != EM_KIND_QUANTIZED) return EM_OK;
    return emi_fail(EM_ERR_DTYPE, "%s: quantized tensors (%s) are not supported; dequantize first",
                    fn, em_dtype_name(t->dtype));
}

