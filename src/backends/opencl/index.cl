/*
 * index.cl — gather / index_select, scatter_add and a stable sort. Built with -DA=<tag> (the
 * data dtype). Index buffers hold i64 or i32 values (idx64 says which), already range-checked.
 * Elements are moved in their storage type, so f16 / bf16 bits and NaN payloads survive.
 */

#define IX_CAT_(a, b) a##b
#define IX_CAT(a, b) IX_CAT_(a, b)
#define TYA IX_CAT(TY_, A)
#define LDA(p, i) IX_CAT(LD_, A)(p, i)
#define STA(p, i, v) IX_CAT(ST_, A)(p, i, v)
#define ISF IX_CAT(ISF_, A)

#if ISF
#ifdef OCL_FP64
#define IX_F64_f64 1
#else
#define IX_F64_f64 0
#endif
#define IX_F64_f32 0
#define IX_F64_f16 0
#define IX_F64_bf16 0
#if IX_CAT(IX_F64_, A)
typedef double acc_t;
#else
typedef float acc_t;
#endif
#else
typedef long acc_t;
#endif

/** Index element at offset o. */
static long ld_index(__global const uchar *idx, int idx64, long o) {
    return idx64 ? ((__global const long *)idx)[o] : (long)((__global const int *)idx)[o];
}

/**
 * gather_elems: out[c] = in[c with dim replaced by index[c]] for every multi-index c of out's
 * shape (index view of out's shape; index_select passes a view whose strides are 0 except
 * along dim, so it reads index[c[dim]]).
 */
__kernel void gather_elems(__global TYA *out, view_t ov, __global const TYA *in, view_t iv,
                           __global const uchar *idx, view_t xv, int idx64, int dim) {
    long i = get_global_id(0);
    long oo = ov.offset, io = iv.offset, xo = xv.offset;
    for (int d = ov.rank - 1; d >= 0; d--) {
        long s = ov.shape[d], q = i / s, c = i - q * s;
        i = q;
        oo += c * ov.strides[d];
        xo += c * xv.strides[d];
        if (d != dim) io += c * iv.strides[d];
    }
    io += ld_index(idx, idx64, xo) * iv.strides[dim];
    out[oo] = in[io];
}

/**
 * scatter_add_elems: one item per element of out (shape ov): adds every src[c'] with
 * index[c'] == c[dim], c' = c with dim replaced by j, in increasing j (index and src views
 * have index's shape; elements of out outside it stay). Floats add in acc_t, ints wrap,
 * bool ORs. Deterministic: no atomics, each out element is owned by one item.
 */
__kernel void scatter_add_elems(__global TYA *out, view_t ov, __global const uchar *idx,
                                view_t xv, int idx64, __global const TYA *src, view_t sv,
                                int dim) {
    long i = get_global_id(0);
    long oo = ov.offset, xo = xv.offset, so = sv.offset, t = 0;
    for (int d = ov.rank - 1; d >= 0; d--) {
        long s = ov.shape[d], q = i / s, c = i - q * s;
        i = q;
        oo += c * ov.strides[d];
        if (d == dim) {
            t = c;
        } else {
            if (c >= xv.shape[d]) return;
            xo += c * xv.strides[d];
            so += c * sv.strides[d];
        }
    }
    const long n = xv.shape[dim], xs = xv.strides[dim], ss = sv.strides[dim];
    int hit = 0;
#if ISF
    acc_t acc = 0;
    for (long j = 0; j < n; j++) {
        if (ld_index(idx, idx64, xo + j * xs) != t) continue;
        acc += (acc_t)LDA(src, so + j * ss);
        hit = 1;
    }
    if (hit) STA(out, oo, (acc_t)LDA(out, oo) + acc);
#else
    ulong acc = 0;
    for (long j = 0; j < n; j++) {
        if (ld_index(idx, idx64, xo + j * xs) != t) continue;
        acc += (ulong)(long)LDA(src, so + j * ss);
        hit = 1;
    }
    if (hit) {
        long r = (long)((ulong)(long)LDA(out, oo) + acc);
        STA(out, oo, r);
    }
#endif
}

/**
 * scatter_add_lines: one item per line of index (its elements along dim, the other coords
 * fixed): adds src[c] to out[c with dim replaced by index[c]] for j = 0, 1, ... in order,
 * rounding to out's dtype after each add as ref does. Lines own disjoint out lines, so no two
 * items touch one element. `heads` is index's view with dim's extent 1.
 */
__kernel void scatter_add_lines(__global TYA *out, view_t ov, __global const uchar *idx,
                                view_t xv, int idx64, __global const TYA *src, view_t sv,
                                view_t heads, int dim) {
    long i = get_global_id(0);
    long oo = ov.offset, xo = xv.offset, so = sv.offset;
    for (int d = heads.rank - 1; d >= 0; d--) {
        long s = heads.shape[d], q = i / s, c = i - q * s;
        i = q;
        oo += c * ov.strides[d];
        xo += c * xv.strides[d];
        so += c * sv.strides[d];
    }
    const long n = xv.shape[dim], xs = xv.strides[dim], ss = sv.strides[dim];
    const long os = ov.strides[dim];
    for (long j = 0; j < n; j++) {
        const long o = oo + ld_index(idx, idx64, xo + j * xs) * os;
#if ISF
        STA(out, o, (acc_t)LDA(out, o) + (acc_t)LDA(src, so + j * ss));
#else
        long r = (long)((ulong)(long)LDA(out, o) + (ulong)(long)LDA(src, so + j * ss));
        STA(out, o, r);
#endif
    }
}

/* ---- stable sort: keys and positions per line, bottom-up merge passes ---- */

/** True when key x must come strictly before key y (NaN is the largest value). */
static int key_before(acc_t x, acc_t y, int desc) {
#if ISF
    int nx = isnan(x), ny = isnan(y);
    if (desc) return (nx && !ny) || x > y;
    return (!nx && ny) || x < y;
#else
    return desc ? x > y : x < y;
#endif
}

/** sort_init: keys[l*n + j] = line l's element j, pos = j (one item per element). */
__kernel void sort_init(__global const TYA *in, view_t heads, long stride, long n,
                        __global acc_t *keys, __global long *pos) {
    const long e = get_global_id(0), l = e / n, j = e - l * n;
    keys[e] = (acc_t)LDA(in, vidx(heads, l) + j * stride);
    pos[e] = j;
}

/**
 * sort_merge: one pass merging runs of width w into runs of 2w, per line. An element's new
 * place is its place in its run plus the count of the partner run's elements that go before
 * it (a binary search): for the left run those strictly before it, for the right run those
 * not after it, which keeps equal keys in order (stable).
 */
__kernel void sort_merge(__global const acc_t *keys, __global const long *pos,
                         __global acc_t *keys2, __global long *pos2, long n, long w, int desc) {
    const long e = get_global_id(0), l = e / n, p = e - l * n;
    const long r = p / w, base = (r & ~1L) * w;
    const long mid = min(base + w, n), end = min(base + 2 * w, n);
    const acc_t k = keys[e];
    __global const acc_t *lk = keys + l * n;
    long lo, hi, dst;
    if ((r & 1) == 0) {
        /* left run: count right-run elements strictly before k */
        lo = mid;
        hi = end;
        while (lo < hi) {
            long m = (lo + hi) / 2;
            if (key_before(lk[m], k, desc)) lo = m + 1;
            else hi = m;
        }
        dst = base + (p - base) + (lo - mid);
    } else {
        /* right run: count left-run elements not after k */
        lo = base;
        hi = mid;
        while (lo < hi) {
            long m = (lo + hi) / 2;
            if (!key_before(k, lk[m], desc)) lo = m + 1;
            else hi = m;
        }
        dst = base + (p - mid) + (lo - base);
    }
    keys2[l * n + dst] = k;
    pos2[l * n + dst] = pos[e];
}

/** sort_out: values (raw elements of in, when has_v) and positions (when has_i) of line l in
 *  sorted order. */
__kernel void sort_out(__global const TYA *in, view_t heads, long stride, long n,
                       __global const long *pos, __global TYA *vals, view_t vheads,
                       long vstride, int has_v, __global long *inds, view_t iheads,
                       long istride, int has_i) {
    const long e = get_global_id(0), l = e / n, j = e - l * n;
    const long p = pos[e];
    if (has_v) vals[vidx(vheads, l) + j * vstride] = in[vidx(heads, l) + p * stride];
    if (has_i) inds[vidx(iheads, l) + j * istride] = p;
}
