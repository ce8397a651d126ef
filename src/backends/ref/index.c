/*
 * index.c — the reference indexing kernels: gather, scatter_add, index_select and a stable
 * sort. Index views hold EM_I64 or EM_I32 values that the core has already range-checked.
 * Elements are moved bit for bit (memcpy) when the dtypes match, so NaN payloads and f16 /
 * bf16 bits survive unchanged.
 */
#include <stdlib.h>

#include "ref.h"

/** Copies one element from (src, soff) to (dst, doff), converting when the dtypes differ. */
static void ref_move(const em_view *dst, int64_t doff, const em_view *src, int64_t soff) {
    if (dst->dtype == src->dtype) {
        size_t es = em_dtype_size(dst->dtype);
        memcpy((char *)dst->buf + doff * (int64_t)es, (const char *)src->buf + soff * (int64_t)es,
               es);
    } else if (ref_is_float(dst->dtype)) {
        ref_st(dst->buf, dst->dtype, doff, ref_ld(src->buf, src->dtype, soff));
    } else {
        ref_sti(dst->buf, dst->dtype, doff, ref_ldi(src->buf, src->dtype, soff));
    }
}

/** Element offset in v of the multi-index idx with idx[dim] replaced by ix. */
static int64_t ref_offset_at(const em_view *v, const int64_t *idx, int dim, int64_t ix) {
    int64_t off = v->offset;
    for (int d = 0; d < v->rank; d++) off += (d == dim ? ix : idx[d]) * v->strides[d];
    return off;
}

/* ref_gather: out[i] = in[i with dim replaced by index[i]]; out and index share a shape. */
em_status ref_gather(void *ctx, const em_view *out, const em_view *in, int dim,
                     const em_view *index) {
    (void)ctx;
    ref_iter it;
    ref_iter_init(&it, 2, out, index);
    for (int64_t i = 0; i < it.numel; i++, ref_iter_next(&it)) {
        int64_t ix = ref_ldi(index->buf, index->dtype, it.off[1]);
        ref_move(out, it.off[0], in, ref_offset_at(in, it.idx, dim, ix));
    }
    return EM_OK;
}

/* ref_scatter_add: out[i with dim replaced by index[i]] += src[i] over index's shape (src is
 * read through its own strides at index's multi-indices). */
em_status ref_scatter_add(void *ctx, const em_view *out, int dim, const em_view *index,
                          const em_view *src) {
    (void)ctx;
    ref_iter it;
    ref_iter_init(&it, 2, index, src);
    bool fl = ref_is_float(out->dtype);
    for (int64_t i = 0; i < it.numel; i++, ref_iter_next(&it)) {
        int64_t ix = ref_ldi(index->buf, index->dtype, it.off[0]);
        int64_t o = ref_offset_at(out, it.idx, dim, ix);
        if (fl) {
            double v = ref_ld(out->buf, out->dtype, o) + ref_ld(src->buf, src->dtype, it.off[1]);
            ref_st(out->buf, out->dtype, o, v);
        } else if (out->dtype == EM_BOOL) {
            int64_t v = ref_ldi(out->buf, out->dtype, o) | ref_ldi(src->buf, src->dtype, it.off[1]);
            ref_sti(out->buf, out->dtype, o, v);
        } else {
            uint64_t v = (uint64_t)ref_ldi(out->buf, out->dtype, o) +
                         (uint64_t)ref_ldi(src->buf, src->dtype, it.off[1]);
            ref_sti(out->buf, out->dtype, o, (int64_t)v);
        }
    }
    return EM_OK;
}

/* ref_index_select: out[i] = in[i with dim replaced by index[i[dim]]]; index is 1-d. */
em_status ref_index_select(void *ctx, const em_view *out, const em_view *in, int dim,
                           const em_view *index) {
    (void)ctx;
    ref_iter it;
    ref_iter_init(&it, 1, out, out);
    for (int64_t i = 0; i < it.numel; i++, ref_iter_next(&it)) {
        int64_t ix = ref_ldi(index->buf, index->dtype,
                             index->offset + it.idx[dim] * index->strides[0]);
        ref_move(out, it.off[0], in, ref_offset_at(in, it.idx, dim, ix));
    }
    return EM_OK;
}

/* ---- sort ---- */

/** The keys of one line: doubles for float dtypes, exact int64 for the others. */
typedef struct ref_keys {
    bool fl, desc;
    const double *f;
    const int64_t *i;
} ref_keys;

/** True when position a must come strictly before position b. NaN is the largest value:
 *  last ascending, first descending. */
static bool ref_before(const ref_keys *k, int64_t a, int64_t b) {
    if (k->fl) {
        double x = k->f[a], y = k->f[b];
        bool nx = isnan(x), ny = isnan(y);
        if (k->desc) return (nx && !ny) || x > y;
        return (!nx && ny) || x < y;
    }
    return k->desc ? k->i[a] > k->i[b] : k->i[a] < k->i[b];
}

/** Stable bottom-up merge sort of the positions perm[0..n) by their keys; tmp has n slots.
 *  Returns the buffer (perm or tmp) that holds the sorted order. */
static int64_t *ref_merge_sort(const ref_keys *k, int64_t *perm, int64_t *tmp, int64_t n) {
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int64_t a = lo, b = mid, o = lo;
            while (a < mid && b < hi) tmp[o++] = ref_before(k, perm[b], perm[a]) ? perm[b++] : perm[a++];
            while (a < mid) tmp[o++] = perm[a++];
            while (b < hi) tmp[o++] = perm[b++];
        }
        int64_t *sw = perm;
        perm = tmp;
        tmp = sw;
    }
    return perm;
}

/* ref_sort: a stable sort of every line of `in` along dim into values (in's dtype) and the
 * original positions into indices (EM_I64); either output may be NULL. */
em_status ref_sort(void *ctx, const em_view *values, const em_view *indices, const em_view *in,
                   int dim, bool descending) {
    (void)ctx;
    int64_t n = in->shape[dim];
    if (n == 0 || ref_numel(in) == 0) return EM_OK;
    /* Iterate over lines: every view with dim collapsed to one element. */
    em_view lx = *in, lv = values ? *values : *in, li = indices ? *indices : *in;
    lx.shape[dim] = lv.shape[dim] = li.shape[dim] = 1;
    const em_view *vs[3] = {&lx, &lv, &li};
    ref_iter it;
    ref_iter_init4(&it, 3, vs);
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)n);
    int64_t *tmp = malloc(sizeof(int64_t) * (size_t)n);
    void *keys = malloc(sizeof(double) * (size_t)n); /* double and int64_t are both 8 bytes */
    if (!perm || !tmp || !keys) {
        free(perm);
        free(tmp);
        free(keys);
        return em_backend_set_error(EM_ERR_NOMEM, "ref: sort of %lld elements: out of memory",
                                    (long long)n);
    }
    ref_keys k = {ref_is_float(in->dtype), descending, (const double *)keys,
                  (const int64_t *)keys};
    for (int64_t line = 0; line < it.numel; line++, ref_iter_next(&it)) {
        for (int64_t j = 0; j < n; j++) {
            int64_t off = it.off[0] + j * in->strides[dim];
            if (k.fl) ((double *)keys)[j] = ref_ld(in->buf, in->dtype, off);
            else ((int64_t *)keys)[j] = ref_ldi(in->buf, in->dtype, off);
            perm[j] = j;
        }
        const int64_t *order = ref_merge_sort(&k, perm, tmp, n);
        for (int64_t j = 0; j < n; j++) {
            if (values)
                ref_move(values, it.off[1] + j * values->strides[dim], in,
                         it.off[0] + order[j] * in->strides[dim]);
            if (indices)
                ref_sti(indices->buf, indices->dtype, it.off[2] + j * indices->strides[dim],
                        order[j]);
        }
    }
    free(perm);
    free(tmp);
    free(keys);
    return EM_OK;
}
