/* assign.c — em_tensor_assign: writes a tensor's values into another's own buffer, in place,
 * recording nothing (how an optimizer updates a parameter while keeping its identity);
 * em_tensor_assign_, which may instead hand the consumed source's buffer to the destination. */
#include "autodiff/tape_impl.h"
#include "core/internal.h"

/* The arguments' checks, shared by both forms (fn names the caller). */
static em_status assign_check(const char *fn, const em_tensor *dst, const em_tensor *src) {
    EMI_TRY(emi_check_tensor(fn, "dst", dst));
    EMI_TRY(emi_check_tensor(fn, "src", src));
    if (dst->ad && dst->ad->rule)
        return emi_fail(EM_ERR_STATE,
                        "%s: dst is the result of '%s', not a leaf: only leaves and untracked "
                        "tensors can be assigned", fn, dst->ad->rule->name);
    if (dst->dtype != src->dtype) return emi_fail_dtypes(fn, dst, src);
    if (emi_kind(dst->dtype) == EM_KIND_QUANTIZED)
        return emi_fail(EM_ERR_DTYPE, "%s: quantized tensors (%s) cannot be assigned", fn,
                        em_dtype_name(dst->dtype));
    if (!emi_same_shape(dst->v.shape, dst->v.rank, src->v.shape, src->v.rank)) {
        char a[96], b[96];
        return emi_fail(EM_ERR_SHAPE, "%s: shapes differ: %s and %s", fn,
                        emi_shape_str(dst->v.shape, dst->v.rank, a, sizeof a),
                        emi_shape_str(src->v.shape, src->v.rank, b, sizeof b));
    }
    return emi_check_same_device(fn, dst, src);
}

/* The copy of checked arguments into dst's buffer. */
static em_status assign_copy(const char *fn, em_tensor *dst, const em_tensor *src) {
    if (src->st == dst->st) {
        /* src reads the buffer being written (a view of dst): copy it aside first */
        em_tensor *tmp = NULL;
        EMI_TRY(em_clone(src, &tmp));
        em_status s = emi_copy_into(fn, dst, tmp);
        em_tensor_release(tmp);
        return s;
    }
    return emi_copy_into(fn, dst, src);
}

em_status em_tensor_assign(em_tensor *dst, const em_tensor *src) {
    static const char fn[] = "em_tensor_assign";
    EMI_TRY(assign_check(fn, dst, src));
    return assign_copy(fn, dst, src);
}

/* True when dst can take src's buffer instead of copying it: both dense over their whole
 * buffers of one size on one backend context, and nobody else holds either buffer or src. */
static bool assign_can_take(const em_tensor *dst, const em_tensor *src) {
    const emi_storage *a = dst->st, *b = src->st;
    /* a captured graph keeps each state in the buffer it started in (its runs read it there
     * next time): the values are copied */
    return a != b && !a->base && !b->base && a->ops == b->ops && a->ops->id != EM_BACKEND_CAPTURE && a->ctx == b->ctx && a->bytes == b->bytes &&
           atomic_load_explicit(&src->refs, memory_order_acquire) == 1 &&
           atomic_load_explicit(&b->refs, memory_order_acquire) == 1 &&
           atomic_load_explicit(&a->refs, memory_order_acquire) == 1 && dst->v.offset == 0 &&
           src->v.offset == 0 && dst->v.buf == a->buf && src->v.buf == b->buf &&
           emi_view_is_contiguous(&dst->v) && emi_view_is_contiguous(&src->v) &&
           emi_numel(dst->v.shape, dst->v.rank) * (int64_t)em_dtype_size(dst->dtype) ==
               (int64_t)a->bytes;
}

em_status em_tensor_assign_(em_tensor *dst, em_tensor *src) {
    static const char fn[] = "em_tensor_assign_";
    em_status s = assign_check(fn, dst, src);
    if (s == EM_OK && assign_can_take(dst, src)) {
        /* the buffers change hands (the storage records stay with their handles, which
         * are allocated together): dst gets src's values, src (released below) dst's old
         * buffer, which goes back to the backend's allocator */
        void *t = dst->st->buf;
        dst->st->buf = src->st->buf;
        src->st->buf = t;
        dst->v.buf = dst->st->buf;
        src->v.buf = src->st->buf;
    } else if (s == EM_OK) {
        s = assign_copy(fn, dst, src);
    }
    em_tensor_release(src);
    return s;
}
