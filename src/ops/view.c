/*
 * view.c — the layout ops that are pure views: reshape (when the strides allow it), flatten,
 * permute, transpose, expand, slice, split, squeeze, unsqueeze, flip. Each computes a new
 * shape / strides / offset over the input's storage and shares its buffer (emi_view_tensor);
 * no data moves, except reshape of a tensor whose strides cannot be regrouped, which copies
 * through em_contiguous first.
 *
 * Autodiff: each view is recorded like any op (the output gets its own node, whose rule
 * redoes the view from the input's value when BALANCED recomputes it); split records each
 * piece as a slice.
 */
#include <stdlib.h>
#include <string.h>

#include "layout_util.h"

/* ---- shared checks ---- */

/** Checks a (shape, rank) argument pair: rank in 0..EM_MAX_RANK, shape non-NULL when rank > 0. */
static em_status lay_check_rank(const char *fn, const void *shape, int rank) {
    if (rank < 0) return emi_fail(EM_ERR_ARG, "%s: negative rank %d", fn, rank);
    if (rank > EM_MAX_RANK)
        return emi_fail(EM_ERR_SHAPE, "%s: rank %d exceeds the maximum of %d", fn, rank,
                        EM_MAX_RANK);
    if (rank > 0 && shape == NULL) return emi_fail(EM_ERR_ARG, "%s: shape is NULL", fn);
    return EM_OK;
}

/* ---- reshape ---- */

/** The strides of a view of (oshape, ostrides) as nshape, following PyTorch's view rule
 *  (ATen computeStride): dims may be split or merged only inside runs that are contiguous
 *  with respect to each other. Returns false when no view exists. Sizes have equal numel. */
static bool lay_view_strides(const int64_t *oshape, const int64_t *ostrides, int orank,
                             const int64_t *nshape, int nrank, int64_t *nstrides) {
    if (orank == 0) {
        for (int d = 0; d < nrank; d++) nstrides[d] = 1;
        return true;
    }
    int64_t numel = emi_numel(oshape, orank);
    if (numel == 0) {
        for (int d = nrank - 1; d >= 0; d--)
            nstrides[d] = d == nrank - 1 ? 1 : (nshape[d + 1] > 1 ? nshape[d + 1] : 1) * nstrides[d + 1];
        return true;
    }
    int view_d = nrank - 1;
    int64_t chunk_base = ostrides[orank - 1];
    int64_t tensor_numel = 1, view_numel = 1;
    for (int td = orank - 1; td >= 0; td--) {
        tensor_numel *= oshape[td];
        if (td == 0 ||
            (oshape[td - 1] != 1 && ostrides[td - 1] != tensor_numel * chunk_base)) {
            while (view_d >= 0 && (view_numel < tensor_numel || nshape[view_d] == 1)) {
                nstrides[view_d] = view_numel * chunk_base;
                view_numel *= nshape[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel) return false;
            if (td > 0) {
                chunk_base = ostrides[td - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    return view_d == -1;
}

/** Records o, a view-like result of x whose recompute is a reshape of x to o's shape. */
static em_status lay_record_shape(const emi_ad_op *ad, const emi_ad_rule *rule,
                                  const em_tensor *x, em_tensor *o, em_tensor **out) {
    emi_rule_shape_params p = {o->v.rank, {0}};
    memcpy(p.shape, o->v.shape, sizeof(int64_t) * (size_t)o->v.rank);
    return lay_ad_finish(ad, rule, &x, 1, o, &p, sizeof p, out);
}

/** Reshape after argument checks: resolves -1, checks the element count, then views or
 *  copies; records the result with `rule`. Shared by em_reshape and em_flatten. */
static em_status lay_reshape(const char *fn, const emi_ad_rule *rule, const em_tensor *x,
                             const int64_t *shape, int rank, em_tensor **out) {
    int64_t dims[EM_MAX_RANK] = {0};
    int infer = -1;
    for (int i = 0; i < rank; i++) {
        if (shape[i] == -1) {
            if (infer >= 0) return emi_fail(EM_ERR_ARG, "%s: only one dim may be -1", fn);
            infer = i;
            dims[i] = 1;
        } else if (shape[i] < 0) {
            return emi_fail(EM_ERR_ARG, "%s: invalid size %lld at dim %d", fn,
                            (long long)shape[i], i);
        } else {
            dims[i] = shape[i];
        }
    }
    int64_t known = 0;
    EMI_TRY(emi_check_shape(fn, dims, rank, &known));
    int64_t n = emi_numel(x->v.shape, x->v.rank);
    char a[128], b[128];
    if (infer >= 0) {
        if (known == 0 || n % known != 0)
            return emi_fail(EM_ERR_SHAPE, "%s: cannot reshape %s (%lld elements) into %s", fn,
                            emi_shape_str(x->v.shape, x->v.rank, a, sizeof a), (long long)n,
                            emi_shape_str(shape, rank, b, sizeof b));
        dims[infer] = n / known;
    } else if (known != n) {
        return emi_fail(EM_ERR_SHAPE, "%s: cannot reshape %s (%lld elements) into %s", fn,
                        emi_shape_str(x->v.shape, x->v.rank, a, sizeof a), (long long)n,
                        emi_shape_str(shape, rank, b, sizeof b));
    }
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, &x, 1, &ad));
    int64_t strides[EM_MAX_RANK];
    em_tensor *o = NULL;
    if (lay_view_strides(x->v.shape, x->v.strides, x->v.rank, dims, rank, strides)) {
        EMI_TRY(emi_view_tensor(x, dims, strides, rank, x->v.offset, &o));
        return lay_record_shape(&ad, rule, x, o, out);
    }
    /* The strides do not allow a view: copy row-major (from the inner alias, so that the
     * copy records nothing), then view the copy. */
    const em_tensor *xs = NULL;
    em_tensor *alias = NULL, *c = NULL;
    EMI_TRY(lay_ad_inner(x, &xs, &alias));
    em_status s = em_contiguous(xs, &c);
    em_tensor_release(alias);
    if (s != EM_OK) return s;
    emi_contiguous_strides(dims, rank, strides);
    s = emi_view_tensor(c, dims, strides, rank, c->v.offset, &o);
    em_tensor_release(c);
    if (s != EM_OK) return s;
    return lay_record_shape(&ad, rule, x, o, out);
}

/* em_reshape: a view of x with a new shape (one -1 inferred), or a copy when x's strides
 * cannot be regrouped. EM_ERR_SHAPE when the element counts differ. */
em_status em_reshape(const em_tensor *x, const int64_t *shape, int rank, em_tensor **out) {
    static const char fn[] = "em_reshape";
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(lay_check_rank(fn, shape, rank));
    return lay_reshape(fn, &emi_rule_reshape, x, shape, rank, out);
}

/* em_flatten: merges dims start_dim..end_dim into one (a 0-d tensor becomes [1]). */
em_status em_flatten(const em_tensor *x, int start_dim, int end_dim, em_tensor **out) {
    static const char fn[] = "em_flatten";
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_out(fn, out));
    int r = x->v.rank, s0 = 0, s1 = 0;
    EMI_TRY(lay_dim(fn, start_dim, r, &s0));
    EMI_TRY(lay_dim(fn, end_dim, r, &s1));
    if (s0 > s1)
        return emi_fail(EM_ERR_ARG, "%s: start_dim %d comes after end_dim %d", fn, start_dim,
                        end_dim);
    int64_t shape[EM_MAX_RANK];
    int n = 0;
    if (r == 0) {
        shape[n++] = 1;
    } else {
        for (int d = 0; d < s0; d++) shape[n++] = x->v.shape[d];
        int64_t m = 1;
        for (int d = s0; d <= s1; d++) m *= x->v.shape[d];
        shape[n++] = m;
        for (int d = s1 + 1; d < r; d++) shape[n++] = x->v.shape[d];
    }
    return lay_reshape(fn, &emi_rule_flatten, x, shape, n, out);
}

/* ---- reordering dims ---- */

/* em_permute: a view with dims reordered: out dim i is x dim perm[i]. */
em_status em_permute(const em_tensor *x, const int *perm, int rank, em_tensor **out) {
    static const char fn[] = "em_permute";
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_out(fn, out));
    if (rank != x->v.rank)
        return emi_fail(EM_ERR_ARG, "%s: perm has %d entries for a tensor of rank %d", fn, rank,
                        x->v.rank);
    if (rank > 0 && perm == NULL) return emi_fail(EM_ERR_ARG, "%s: perm is NULL", fn);
    int64_t shape[EM_MAX_RANK], strides[EM_MAX_RANK];
    bool seen[EM_MAX_RANK] = {false};
    emi_rule_perm_params p = {rank, {0}};
    for (int i = 0; i < rank; i++) {
        int d = 0;
        EMI_TRY(emi_norm_dim(fn, perm[i], rank, &d));
        if (seen[d]) return emi_fail(EM_ERR_ARG, "%s: dim %d repeats in perm", fn, perm[i]);
        seen[d] = true;
        p.perm[i] = d;
        shape[i] = x->v.shape[d];
        strides[i] = x->v.strides[d];
    }
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, &x, 1, &ad));
    em_tensor *o = NULL;
    EMI_TRY(emi_view_tensor(x, shape, strides, rank, x->v.offset, &o));
    return lay_ad_finish(&ad, &emi_rule_permute, &x, 1, o, &p, sizeof p, out);
}

/* em_transpose: a view with dims dim0 and dim1 swapped. */
em_status em_transpose(const em_tensor *x, int dim0, int dim1, em_tensor **out) {
    static const char fn[] = "em_transpose";
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_out(fn, out));
    int r = x->v.rank, a = 0, b = 0;
    EMI_TRY(lay_dim(fn, dim0, r, &a));
    EMI_TRY(lay_dim(fn, dim1, r, &b));
    int64_t shape[EM_MAX_RANK], strides[EM_MAX_RANK];
    emi_rule_perm_params p = {r, {0}};
    for (int d = 0; d < r; d++) {
        int s = d == a ? b : d == b ? a : d;
        p.perm[d] = s;
        shape[d] = x->v.shape[s];
        strides[d] = x->v.strides[s];
    }
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, &x, 1, &ad));
    em_tensor *o = NULL;
    EMI_TRY(emi_view_tensor(x, shape, strides, r, x->v.offset, &o));
    return lay_ad_finish(&ad, &emi_rule_transpose, &x, 1, o, &p, sizeof p, out);
}

/* em_expand: a stride-0 view of x broadcast to shape (new leading dims allowed; -1 keeps an
 * existing dim). EM_ERR_SHAPE when a dim of x that is not 1 differs from the target. */
em_status em_expand(const em_tensor *x, const int64_t *shape, int rank, em_tensor **out) {
    static const char fn[] = "em_expand";
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_out(fn, out));
    EMI_TRY(lay_check_rank(fn, shape, rank));
    int xr = x->v.rank;
    char a[128], b[128];
    if (rank < xr)
        return emi_fail(EM_ERR_SHAPE, "%s: cannot expand %s to the smaller rank %d", fn,
                        emi_shape_str(x->v.shape, xr, a, sizeof a), rank);
    int64_t dims[EM_MAX_RANK], strides[EM_MAX_RANK];
    for (int i = 0; i < rank; i++) {
        int xd = i - (rank - xr);
        int64_t want = shape[i];
        if (want < -1 || (want == -1 && xd < 0))
            return emi_fail(EM_ERR_ARG, "%s: invalid size %lld at dim %d", fn, (long long)want,
                            i);
        if (xd < 0) {
            dims[i] = want;
            strides[i] = 0;
            continue;
        }
        int64_t have = x->v.shape[xd];
        if (want == -1 || want == have) {
            dims[i] = have;
            strides[i] = x->v.strides[xd];
        } else if (have == 1) {
            dims[i] = want;
            strides[i] = 0;
        } else {
            return emi_fail(EM_ERR_SHAPE, "%s: cannot expand %s to %s", fn,
                            emi_shape_str(x->v.shape, xr, a, sizeof a),
                            emi_shape_str(shape, rank, b, sizeof b));
        }
    }
    int64_t numel = 0;
    EMI_TRY(emi_check_shape(fn, dims, rank, &numel));
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, &x, 1, &ad));
    em_tensor *o = NULL;
    EMI_TRY(emi_view_tensor(x, dims, strides, rank, x->v.offset, &o));
    return lay_record_shape(&ad, &emi_rule_expand, x, o, out);
}

/* ---- slicing ---- */

/** Clamps one Python slice bound against a dim of length len. */
static int64_t lay_clamp_bound(int64_t v, int64_t len, int64_t step) {
    if (v < 0) {
        v += len; /* no overflow: len >= 0 */
        if (v < 0) v = step < 0 ? -1 : 0;
    } else if (v >= len) {
        v = step < 0 ? len - 1 : len;
    }
    return v;
}

/** Python's slice.indices: the first index and the element count of start:stop:step over a
 *  dim of length len. step is nonzero. */
static int64_t lay_slice_count(int64_t len, int64_t start, int64_t stop, int64_t step,
                               int64_t *first) {
    int64_t s = lay_clamp_bound(start, len, step), e = lay_clamp_bound(stop, len, step);
    *first = s;
    if (step > 0) return s < e ? (e - s - 1) / step + 1 : 0;
    if (e >= s) return 0;
    if (step == INT64_MIN) return 1; /* s - e - 1 < 2^63 */
    return (s - e - 1) / -step + 1;
}

/* em_slice: a view of x[..., start:stop:step, ...] along dim, with Python's clamping.
 * EM_ERR_ARG for step 0 or a 0-d x. */
em_status em_slice(const em_tensor *x, int dim, int64_t start, int64_t stop, int64_t step,
                   em_tensor **out) {
    static const char fn[] = "em_slice";
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_out(fn, out));
    if (x->v.rank == 0) return emi_fail(EM_ERR_ARG, "%s: cannot slice a 0-d tensor", fn);
    int d = 0;
    EMI_TRY(emi_norm_dim(fn, dim, x->v.rank, &d));
    if (step == 0) return emi_fail(EM_ERR_ARG, "%s: step must not be 0", fn);
    int64_t shape[EM_MAX_RANK], strides[EM_MAX_RANK], first = 0;
    memcpy(shape, x->v.shape, sizeof shape);
    memcpy(strides, x->v.strides, sizeof strides);
    int64_t count = lay_slice_count(x->v.shape[d], start, stop, step, &first);
    int64_t offset = x->v.offset;
    if (count > 0) offset += first * x->v.strides[d];
    if (count > 1) strides[d] = x->v.strides[d] * step; /* |step| < len here: no overflow */
    shape[d] = count;
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, &x, 1, &ad));
    em_tensor *o = NULL;
    EMI_TRY(emi_view_tensor(x, shape, strides, x->v.rank, offset, &o));
    emi_rule_slice_params p = {d, start, stop, step};
    return lay_ad_finish(&ad, &emi_rule_slice, &x, 1, o, &p, sizeof p, out);
}

/* em_split: views of consecutive pieces of `size` along dim (the last may be smaller; an
 * empty dim gives one empty piece). */
em_status em_split(const em_tensor *x, int64_t size, int dim, em_tensor **outs, size_t cap,
                   size_t *count) {
    static const char fn[] = "em_split";
    EMI_TRY(emi_check_tensor(fn, "x", x));
    if (count == NULL) return emi_fail(EM_ERR_ARG, "%s: count is NULL", fn);
    if (outs == NULL && cap > 0) return emi_fail(EM_ERR_ARG, "%s: outs is NULL", fn);
    if (x->v.rank == 0) return emi_fail(EM_ERR_ARG, "%s: cannot split a 0-d tensor", fn);
    int d = 0;
    EMI_TRY(emi_norm_dim(fn, dim, x->v.rank, &d));
    if (size <= 0)
        return emi_fail(EM_ERR_ARG, "%s: size must be positive, got %lld", fn, (long long)size);
    int64_t len = x->v.shape[d];
    size_t n = len == 0 ? 1 : (size_t)((len - 1) / size + 1);
    *count = n;
    if (n > cap)
        return emi_fail(EM_ERR_ARG, "%s: %zu pieces do not fit in cap %zu", fn, n, cap);
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, &x, 1, &ad));
    /* Build every view first, so that a failure leaves outs untouched. Each piece is
     * recorded as the slice it is. */
    em_tensor **tmp = malloc(sizeof(em_tensor *) * n);
    if (!tmp) return emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
    int64_t shape[EM_MAX_RANK];
    memcpy(shape, x->v.shape, sizeof shape);
    for (size_t i = 0; i < n; i++) {
        int64_t at = (int64_t)i * size;
        shape[d] = len - at < size ? len - at : size;
        em_tensor *o = NULL;
        em_status s = emi_view_tensor(x, shape, x->v.strides, x->v.rank,
                                      x->v.offset + (shape[d] > 0 ? at * x->v.strides[d] : 0),
                                      &o);
        emi_rule_slice_params p = {d, at, at + shape[d], 1};
        if (s == EM_OK) s = lay_ad_finish(&ad, &emi_rule_split, &x, 1, o, &p, sizeof p, &tmp[i]);
        if (s != EM_OK) {
            for (size_t j = 0; j < i; j++) em_tensor_release(tmp[j]);
            free(tmp);
            return s;
        }
    }
    memcpy(outs, tmp, sizeof(em_tensor *) * n);
    free(tmp);
    return EM_OK;
}

/* ---- adding and removing size-1 dims ---- */

/* em_squeeze: a view without dim, which must have size 1 (EM_ERR_SHAPE otherwise); a 0-d x
 * accepts dim 0 / -1 and gives a 0-d view. */
em_status em_squeeze(const em_tensor *x, int dim, em_tensor **out) {
    static const char fn[] = "em_squeeze";
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_out(fn, out));
    int r = x->v.rank, d = 0;
    EMI_TRY(lay_dim(fn, dim, r, &d));
    if (r > 0 && x->v.shape[d] != 1)
        return emi_fail(EM_ERR_SHAPE, "%s: dim %d has size %lld, not 1", fn, dim,
                        (long long)x->v.shape[d]);
    int64_t shape[EM_MAX_RANK], strides[EM_MAX_RANK];
    int n = 0;
    for (int i = 0; i < r; i++) {
        if (i == d) continue;
        shape[n] = x->v.shape[i];
        strides[n++] = x->v.strides[i];
    }
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, &x, 1, &ad));
    em_tensor *o = NULL;
    EMI_TRY(emi_view_tensor(x, shape, strides, n, x->v.offset, &o));
    return lay_record_shape(&ad, &emi_rule_squeeze, x, o, out);
}

/* em_squeeze_all: a view without any of x's size-1 dims. */
em_status em_squeeze_all(const em_tensor *x, em_tensor **out) {
    static const char fn[] = "em_squeeze_all";
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_out(fn, out));
    int64_t shape[EM_MAX_RANK], strides[EM_MAX_RANK];
    int n = 0;
    for (int i = 0; i < x->v.rank; i++) {
        if (x->v.shape[i] == 1) continue;
        shape[n] = x->v.shape[i];
        strides[n++] = x->v.strides[i];
    }
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, &x, 1, &ad));
    em_tensor *o = NULL;
    EMI_TRY(emi_view_tensor(x, shape, strides, n, x->v.offset, &o));
    return lay_record_shape(&ad, &emi_rule_squeeze, x, o, out);
}

/* em_unsqueeze: a view with a size-1 dim inserted at position dim (-rank-1 .. rank). */
em_status em_unsqueeze(const em_tensor *x, int dim, em_tensor **out) {
    static const char fn[] = "em_unsqueeze";
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_out(fn, out));
    int r = x->v.rank;
    if (r + 1 > EM_MAX_RANK)
        return emi_fail(EM_ERR_SHAPE, "%s: rank %d exceeds the maximum of %d", fn, r + 1,
                        EM_MAX_RANK);
    int d = dim < 0 ? dim + r + 1 : dim;
    if (d < 0 || d > r)
        return emi_fail(EM_ERR_ARG, "%s: dim %d out of range for rank %d (expected %d..%d)", fn,
                        dim, r, -r - 1, r);
    int64_t shape[EM_MAX_RANK], strides[EM_MAX_RANK];
    int n = 0;
    for (int i = 0; i <= r; i++) {
        if (i == d) {
            shape[n] = 1;
            strides[n++] = i < r ? x->v.shape[i] * x->v.strides[i] : 1;
        }
        if (i < r) {
            shape[n] = x->v.shape[i];
            strides[n++] = x->v.strides[i];
        }
    }
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, &x, 1, &ad));
    em_tensor *o = NULL;
    EMI_TRY(emi_view_tensor(x, shape, strides, n, x->v.offset, &o));
    return lay_record_shape(&ad, &emi_rule_unsqueeze, x, o, out);
}

/* em_flip: a view with the given dims reversed (negated strides, offset moved to the last
 * element of each flipped dim). A repeated dim is EM_ERR_ARG. */
em_status em_flip(const em_tensor *x, const int *dims, int ndims, em_tensor **out) {
    static const char fn[] = "em_flip";
    EMI_TRY(emi_check_tensor(fn, "x", x));
    EMI_TRY(emi_check_out(fn, out));
    if (ndims < 0) return emi_fail(EM_ERR_ARG, "%s: negative ndims %d", fn, ndims);
    if (ndims > 0 && dims == NULL) return emi_fail(EM_ERR_ARG, "%s: dims is NULL", fn);
    int r = x->v.rank;
    bool flip[EM_MAX_RANK] = {false};
    for (int i = 0; i < ndims; i++) {
        int d = 0;
        EMI_TRY(lay_dim(fn, dims[i], r, &d));
        if (r > 0 && flip[d]) return emi_fail(EM_ERR_ARG, "%s: dim %d repeats", fn, dims[i]);
        if (r > 0) flip[d] = true;
    }
    int64_t shape[EM_MAX_RANK], strides[EM_MAX_RANK];
    int64_t offset = x->v.offset;
    emi_rule_flip_params p = {0, {0}};
    for (int d = 0; d < r; d++) {
        shape[d] = x->v.shape[d];
        strides[d] = x->v.strides[d];
        if (flip[d]) p.dims[p.ndims++] = d;
        if (flip[d] && shape[d] > 0) {
            offset += (shape[d] - 1) * strides[d];
            strides[d] = -strides[d];
        }
    }
    emi_ad_op ad;
    EMI_TRY(emi_ad_begin(fn, &x, 1, &ad));
    em_tensor *o = NULL;
    EMI_TRY(emi_view_tensor(x, shape, strides, r, offset, &o));
    return lay_ad_finish(&ad, &emi_rule_flip, &x, 1, o, &p, sizeof p, out);
}
