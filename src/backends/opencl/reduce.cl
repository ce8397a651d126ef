/*
 * reduce.cl — reductions, softmax / log-softmax, cumulative sum and layer normalization.
 *
 * Built with -DA=<tag of the input dtype> (common.cl provides TY_/LD_/ST_, view_t, vidx).
 * Every kernel works on "lines": one reduced row of elements, at base + j * stride, or (whole
 * form, for a non-contiguous whole-tensor reduction) at vidx(in, j). One work-group handles
 * one line: each work item walks the elements lid, lid + L, ... (L = the group's size, a power
 * of two; 1 gives a plain serial loop) and the partial results meet in a tree in local memory.
 *
 * Arithmetic: float for f16 / bf16 / f32 (Kahan-compensated partial sums, then pairwise),
 * double for f64, and wrapping 64-bit integers for the int dtypes (sums and products wrap as
 * in ref). NaN propagates through max / min / logsumexp / softmax; argmax and argmin take the
 * first NaN, else the first extreme value.
 */

#define RK_CAT_(a, b) a##b
#define RK_CAT(a, b) RK_CAT_(a, b)

/* RK_F64_<tag>: 1 for f64 (common.cl's ISF_<tag> tells floats from ints). */
#define RK_F64_f64 1
#define RK_F64_f32 0
#define RK_F64_f16 0
#define RK_F64_bf16 0
#define RK_F64_i64 0
#define RK_F64_i32 0
#define RK_F64_i16 0
#define RK_F64_i8 0
#define RK_F64_u8 0
#define RK_F64_b8 0

#define ISF RK_CAT(ISF_, A)
#define ISF64 RK_CAT(RK_F64_, A)

#define TYA RK_CAT(TY_, A)
#define LDA(p, i) RK_CAT(LD_, A)(p, i)
#define STA(p, i, v) RK_CAT(ST_, A)(p, i, v)

#if ISF
#if ISF64
typedef double acc_t;
#else
typedef float acc_t;
#endif
#else
typedef long acc_t;
#endif

/* em_reduce_op */
#define R_SUM 0
#define R_MEAN 1
#define R_PROD 2
#define R_MAX 3
#define R_MIN 4
#define R_ARGMAX 5
#define R_ARGMIN 6
#define R_VAR 7
#define R_LSE 8

/* ---- group-wide combining (every item of the group calls these: they hold barriers) ---- */

/** The sum of x over the group (wrapping for ints); every item gets it. */
static acc_t grp_sum(acc_t x, __local acc_t *lv) {
    const int lid = get_local_id(0), L = get_local_size(0);
    if (L == 1) return x;
    lv[lid] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = L / 2; h > 0; h /= 2) {
        if (lid < h) {
#if ISF
            lv[lid] = lv[lid] + lv[lid + h];
#else
            lv[lid] = (long)((ulong)lv[lid] + (ulong)lv[lid + h]);
#endif
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    acc_t r = lv[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/** The product of x over the group. */
static acc_t grp_prod(acc_t x, __local acc_t *lv) {
    const int lid = get_local_id(0), L = get_local_size(0);
    if (L == 1) return x;
    lv[lid] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = L / 2; h > 0; h /= 2) {
        if (lid < h) {
#if ISF
            lv[lid] = lv[lid] * lv[lid + h];
#else
            lv[lid] = (long)((ulong)lv[lid] * (ulong)lv[lid + h]);
#endif
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    acc_t r = lv[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/** The larger (is_max) or smaller of a and b; a NaN wins. */
static acc_t pick(acc_t a, acc_t b, int is_max) {
#if ISF
    if (isnan(a)) return a;
    if (isnan(b)) return b;
#endif
    return is_max ? (b > a ? b : a) : (b < a ? b : a);
}

/** The max (is_max) or min of x over the group, NaN propagating. */
static acc_t grp_ext(acc_t x, int is_max, __local acc_t *lv) {
    const int lid = get_local_id(0), L = get_local_size(0);
    if (L == 1) return x;
    lv[lid] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = L / 2; h > 0; h /= 2) {
        if (lid < h) lv[lid] = pick(lv[lid], lv[lid + h], is_max);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    acc_t r = lv[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/** True when candidate (bv, bi) beats (av, ai) for argmax (is_max) / argmin: the first NaN,
 *  else the extreme value, ties to the lower index. bi < 0 is "no candidate". */
static int arg_better(acc_t av, long ai, acc_t bv, long bi, int is_max) {
    if (bi < 0) return 0;
    if (ai < 0) return 1;
#if ISF
    int an = isnan(av), bn = isnan(bv);
    if (an || bn) return bn && (!an || bi < ai);
#endif
    if (bv == av) return bi < ai;
    return is_max ? bv > av : bv < av;
}

/** The winning index of (v, i) over the group. */
static long grp_arg(acc_t v, long i, int is_max, __local acc_t *lv, __local long *li) {
    const int lid = get_local_id(0), L = get_local_size(0);
    if (L == 1) return i;
    lv[lid] = v;
    li[lid] = i;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = L / 2; h > 0; h /= 2) {
        if (lid < h && arg_better(lv[lid], li[lid], lv[lid + h], li[lid + h], is_max)) {
            lv[lid] = lv[lid + h];
            li[lid] = li[lid + h];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    long r = li[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/** Element offset of element j of a line. */
static long line_off(const view_t *inv, int whole, long base, long stride, long j) {
    return whole ? vidx(*inv, j) : base + j * stride;
}

#define LOADJ(j) ((acc_t)LDA(in, line_off(&inv, whole, base, stride, (j))))

/** A Kahan-compensated sum over this item's elements of the line, of f(x) where f is given by
 *  `mode`: 0 x, 1 (x - c)^2, 2 exp(x - c). */
#if ISF
static acc_t item_sum(__global const TYA *in, const view_t *pinv, int whole, long base,
                      long stride, long n, int mode, acc_t c) {
    const view_t inv = *pinv;
    const long lid = get_local_id(0), L = get_local_size(0);
    acc_t s = 0, comp = 0;
    for (long j = lid; j < n; j += L) {
        acc_t x = LOADJ(j);
        if (mode == 1) x = (x - c) * (x - c);
        else if (mode == 2) x = exp(x - c);
        acc_t y = x - comp, t = s + y;
        comp = isfinite(t) ? (t - s) - y : (acc_t)0;
        s = t;
    }
    return s;
}
#endif

/**
 * reduce_lines: out[out_off + g] = op over line g (group g). A line is `n` elements of `in`
 * at heads' element g plus j * stride, or all of inv in row-major order when `whole`.
 * Results: argmax / argmin and int sums / products store i64; the others store in A.
 * corr is var's correction.
 */
__kernel void reduce_lines(__global const TYA *in, view_t inv, view_t heads, long stride, long n,
                           int whole, __global uchar *out, long out_off, int op,
                           acc_t corr, __local acc_t *lv, __local long *li) {
    const long g = get_group_id(0);
    const long lid = get_local_id(0), L = get_local_size(0);
    const long base = whole ? 0 : vidx(heads, g);
    const long o = out_off + g;
    __global TYA *outa = (__global TYA *)out;
    __global long *outl = (__global long *)out;

    if (op == R_ARGMAX || op == R_ARGMIN) {
        const int is_max = op == R_ARGMAX;
        acc_t bv = 0;
        long bi = -1;
        for (long j = lid; j < n; j += L) {
            acc_t x = LOADJ(j);
            if (arg_better(bv, bi, x, j, is_max)) {
                bv = x;
                bi = j;
            }
        }
        long r = grp_arg(bv, bi, is_max, lv, li);
        if (lid == 0) outl[o] = r < 0 ? 0 : r;
        return;
    }
    if (op == R_MAX || op == R_MIN) {
        const int is_max = op == R_MAX;
        acc_t m = 0;
        int any = 0;
        for (long j = lid; j < n; j += L) {
            acc_t x = LOADJ(j);
            m = any ? pick(m, x, is_max) : x;
            any = 1;
        }
        /* items with no element contribute a copy of element 0 (lines are never empty) */
        if (!any) m = LOADJ(0);
        acc_t r = grp_ext(m, is_max, lv);
        if (lid == 0) STA(outa, o, r);
        return;
    }
#if ISF
    if (op == R_PROD) {
        acc_t p = 1;
        for (long j = lid; j < n; j += L) p *= LOADJ(j);
        acc_t r = grp_prod(p, lv);
        if (lid == 0) STA(outa, o, r);
        return;
    }
    if (op == R_LSE) {
        acc_t m = -INFINITY;
        for (long j = lid; j < n; j += L) m = pick(m, LOADJ(j), 1);
        m = grp_ext(m, 1, lv);
        acc_t r;
        if (isnan(m) || isinf(m)) {
            r = m;
        } else {
            acc_t s = grp_sum(item_sum(in, &inv, whole, base, stride, n, 2, m), lv);
            r = m + log(s);
        }
        if (lid == 0) STA(outa, o, r);
        return;
    }
    /* sum, mean, var */
    acc_t s = grp_sum(item_sum(in, &inv, whole, base, stride, n, 0, 0), lv);
    acc_t r = s;
    if (op == R_MEAN) r = s / (acc_t)n;
    if (op == R_VAR) {
        acc_t mean = s / (acc_t)n;
        acc_t m2 = grp_sum(item_sum(in, &inv, whole, base, stride, n, 1, mean), lv);
        acc_t div = (acc_t)n - corr;
        r = m2 / (div > 0 ? div : (acc_t)0);
    }
    if (lid == 0) STA(outa, o, r);
#else
    /* int sum / prod in wrapping 64-bit arithmetic */
    ulong acc = op == R_PROD ? 1 : 0;
    for (long j = lid; j < n; j += L) {
        ulong x = (ulong)(long)LOADJ(j);
        acc = op == R_PROD ? acc * x : acc + x;
    }
    long r = op == R_PROD ? grp_prod((long)acc, lv) : grp_sum((long)acc, lv);
    if (lid == 0) outl[o] = r;
#endif
}

#if ISF
/**
 * softmax_lines: line g of out (at oheads' element g, step ostride) = softmax (or, when
 * `logm`, log-softmax) of line g of in: exp(x - m) / s with m the line's max (NaN
 * propagating) and s the sum of exp(x - m).
 */
__kernel void softmax_lines(__global const TYA *in, view_t heads, long stride, long n,
                            __global TYA *out, view_t oheads, long ostride, int logm,
                            __local acc_t *lv) {
    const long g = get_group_id(0);
    const long lid = get_local_id(0), L = get_local_size(0);
    const long base = vidx(heads, g), obase = vidx(oheads, g);
    const int whole = 0;
    const view_t inv = heads;
    acc_t m = -INFINITY;
    for (long j = lid; j < n; j += L) m = pick(m, LOADJ(j), 1);
    m = grp_ext(m, 1, lv);
    acc_t s = grp_sum(item_sum(in, &inv, whole, base, stride, n, 2, m), lv);
    acc_t ls = log(s);
    for (long j = lid; j < n; j += L) {
        acc_t d = LOADJ(j) - m;
        STA(out, obase + j * ostride, logm ? d - ls : exp(d) / s);
    }
}

/**
 * layer_norm_rows: row g of x (n elements at x_off + g * xs0 + j * xs1) normalized to zero
 * mean and unit biased variance, then times w[j] and plus b[j] when has_w / has_b.
 */
__kernel void layer_norm_rows(__global const TYA *x, long x_off, long xs0, long xs1, long n,
                              __global TYA *out, long o_off, long os0, long os1,
                              __global const TYA *w, long w_off, long ws, int has_w,
                              __global const TYA *b, long b_off, long bs, int has_b, acc_t eps,
                              __local acc_t *lv) {
    const long g = get_group_id(0);
    const long lid = get_local_id(0), L = get_local_size(0);
    const long base = x_off + g * xs0, stride = xs1;
    const int whole = 0;
    view_t inv;
    inv.rank = 0;
    acc_t s = grp_sum(item_sum(x, &inv, whole, base, stride, n, 0, 0), lv);
    acc_t mean = s / (acc_t)n;
    acc_t var = grp_sum(item_sum(x, &inv, whole, base, stride, n, 1, mean), lv) / (acc_t)n;
    acc_t inv_sd = (acc_t)1 / sqrt(var + eps);
    for (long j = lid; j < n; j += L) {
        acc_t v = ((acc_t)LDA(x, base + j * stride) - mean) * inv_sd;
        if (has_w) v *= (acc_t)LDA(w, w_off + j * ws);
        if (has_b) v += (acc_t)LDA(b, b_off + j * bs);
        STA(out, o_off + g * os0 + j * os1, v);
    }
}
#endif

/**
 * cumsum_lines: out line g (at oheads' element g, step ostride) = running sum of in's line g.
 * Item t of the group scans the chunk [t*C, (t+1)*C) (C = ceil(n / L)): chunk totals, an
 * exclusive scan of them in local memory, then a second pass writing the running sums.
 * Floats store in A (Kahan-compensated running sum); ints store i64 (wrapping).
 */
__kernel void cumsum_lines(__global const TYA *in, view_t heads, long stride, long n,
                           __global uchar *out, view_t oheads, long ostride,
                           __local acc_t *lv) {
    const long g = get_group_id(0);
    const int lid = get_local_id(0), L = get_local_size(0);
    const long base = vidx(heads, g), obase = vidx(oheads, g);
    const long C = (n + L - 1) / L;
    const long j0 = lid * C, j1 = min(n, j0 + C);
    const int whole = 0;
    const view_t inv = heads;
    /* chunk total */
#if ISF
    acc_t s = 0, comp = 0;
    for (long j = j0; j < j1; j++) {
        acc_t y = LOADJ(j) - comp, t = s + y;
        comp = isfinite(t) ? (t - s) - y : (acc_t)0;
        s = t;
    }
#else
    ulong s = 0;
    for (long j = j0; j < j1; j++) s += (ulong)(long)LOADJ(j);
#endif
    /* inclusive Hillis-Steele scan of the chunk totals */
    lv[lid] = (acc_t)s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = 1; h < L; h *= 2) {
        acc_t add = lid >= h ? lv[lid - h] : (acc_t)0;
        barrier(CLK_LOCAL_MEM_FENCE);
#if ISF
        lv[lid] = lv[lid] + add;
#else
        lv[lid] = (long)((ulong)lv[lid] + (ulong)add);
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    acc_t pre = lid > 0 ? lv[lid - 1] : (acc_t)0;
#if ISF
    __global TYA *outa = (__global TYA *)out;
    acc_t r = pre;
    comp = 0;
    for (long j = j0; j < j1; j++) {
        acc_t y = LOADJ(j) - comp, t = r + y;
        comp = isfinite(t) ? (t - r) - y : (acc_t)0;
        r = t;
        STA(outa, obase + j * ostride, r);
    }
#else
    __global long *outl = (__global long *)out;
    ulong r = (ulong)pre;
    for (long j = j0; j < j1; j++) {
        r += (ulong)(long)LOADJ(j);
        outl[obase + j * ostride] = (long)r;
    }
#endif
}

/**
 * cumulative_lines: line g (global id; `lines` of them) of in (heads' element g, step stride)
 * scanned serially by one work item. op 0: running product (floats in acc_t, stored in A;
 * ints wrapping int64 into an i64 out). op 1 / 2: running max / min with its index (PyTorch's
 * rule: an element >= (<=) the running value, or NaN, takes over: ties take the last index,
 * a NaN stays until the next one), values in A, indices i64 at kheads' element g, step
 * kstride (op 0: idx is unused).
 */
__kernel void cumulative_lines(__global const TYA *in, view_t heads, long stride, long n,
                               __global uchar *out, view_t oheads, long ostride,
                               __global long *idx, view_t kheads, long kstride, int op,
                               long lines) {
    const long g = get_global_id(0);
    if (g >= lines) return;
    const long base = vidx(heads, g), obase = vidx(oheads, g);
    if (op == 0) {
#if ISF
        __global TYA *outa = (__global TYA *)out;
        acc_t p = 1;
        for (long j = 0; j < n; j++) {
            p *= (acc_t)LDA(in, base + j * stride);
            STA(outa, obase + j * ostride, p);
        }
#else
        __global long *outl = (__global long *)out;
        ulong p = 1;
        for (long j = 0; j < n; j++) {
            p *= (ulong)(long)LDA(in, base + j * stride);
            outl[obase + j * ostride] = (long)p;
        }
#endif
        return;
    }
    __global TYA *outa = (__global TYA *)out;
    const long kbase = vidx(kheads, g);
    acc_t m = 0;
    long mi = 0;
    for (long j = 0; j < n; j++) {
        acc_t v = (acc_t)LDA(in, base + j * stride);
        int take = j == 0 || (op == 1 ? v >= m : v <= m);
#if ISF
        take = take || isnan(v);
#endif
        if (take) {
            m = v;
            mi = j;
        }
        STA(outa, obase + j * ostride, m);
        idx[kbase + j * kstride] = mi;
    }
}
