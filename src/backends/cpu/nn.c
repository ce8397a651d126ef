/* nn.c — the cpu backend's pooling (max with indices, average and its input gradient,
 * adaptive average and its input gradient) and layer_norm on NCHW data: the loops run f32 and
 * f64 on contiguous planes; the entry points stage f16/bf16 (through f32, rounded once from
 * the f32 result as ref rounds from its double one) and strided operands and outputs (packed
 * once, see stage.h). Integer dtypes (which the core never passes) go to ref.
 *
 * Pooling runs one output row at a time, tap by tap: for each (kernel row, kernel column) the
 * loop over the row's outputs reads the input with the pooling stride (vectorized, strides 1
 * and 2 specialized), so every output sees its window's taps in the ref kernel's order
 * (row-major), which keeps the ref's tie, NaN and summation-order semantics. Threaded over
 * the N*C planes; layer_norm over rows. Sums accumulate in double, as the ref kernels do. */
#include <math.h>
#include <stdatomic.h>

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "cpu.h"
#include "stage.h"

#if defined(__GNUC__)
#define CPU_INLINE inline __attribute__((always_inline))
#else
#define CPU_INLINE inline
#endif

#define NN_GRAIN (1 << 15) /* elements per task, about */
#define NN_BLOCK 512       /* outputs per block of a row (double accumulators on the stack) */

static inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

/** ceil(a / b) for b > 0 and any a. */
static inline int64_t ceildiv(int64_t a, int64_t b) {
    return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}
/** floor(a / b) for b > 0 and any a. */
static inline int64_t floordiv(int64_t a, int64_t b) {
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}

/** The outputs [*lo, *hi) within [0, n) whose tap at input column ox*s + off lies in [0, W). */
static inline void tap_range(int64_t off, int64_t s, int64_t W, int64_t n, int64_t *lo,
                             int64_t *hi) {
    *lo = imax(0, ceildiv(-off, s));
    *hi = imin(n, floordiv(W - 1 - off, s) + 1);
    if (*hi < *lo) *hi = *lo;
}

/** The tap ranges of the kernel columns kw (tap offset kw*d - p), computed once per plane
 *  (they do not depend on the output row); kernels wider than NN_TAPS compute them as used. */
#define NN_TAPS 32
typedef struct tap_ranges {
    int64_t lo[NN_TAPS], hi[NN_TAPS];
    int64_t n, d, p, s, W, OW;
} tap_ranges;

static void taps_init(tap_ranges *t, int64_t KW, int64_t d, int64_t p, int64_t s, int64_t W,
                      int64_t OW) {
    *t = (tap_ranges){.n = imin(KW, NN_TAPS), .d = d, .p = p, .s = s, .W = W, .OW = OW};
    for (int64_t kw = 0; kw < t->n; kw++) tap_range(kw * d - p, s, W, OW, &t->lo[kw], &t->hi[kw]);
}

static inline void taps_get(const tap_ranges *t, int64_t kw, int64_t *lo, int64_t *hi) {
    if (kw < t->n) {
        *lo = t->lo[kw];
        *hi = t->hi[kw];
    } else {
        tap_range(kw * t->d - t->p, t->s, t->W, t->OW, lo, hi);
    }
}

/** Smallest v >= a with v == a (mod d), v >= 0 — the first in-bounds dilated tap. */
static inline int64_t first_tap(int64_t a, int64_t d) {
    return a >= 0 ? a : a + ceildiv(-a, d) * d;
}

/* ---- max_pool2d ---- */

/* b, bi: the running max and its index; v at index i: a NaN always wins, ties keep the first */
#define MAXPOOL_STEP(T, b, bi, v_, i)                                                              \
    do {                                                                                           \
        const T v = (v_);                                                                          \
        const int take = (v > (b)) | (v != v);                                                     \
        (b) = take ? v : (b);                                                                      \
        (bi) = take ? (i) : (bi);                                                                  \
    } while (0)

/* One tap over outputs [lo, hi): the NaN-wins, ties-keep-first update of the ref kernel. */
#define MAXTAP_LOOPS(T, S)                                                                         \
    static CPU_INLINE void maxtap_##S(T *restrict best, int64_t *restrict bi,                      \
                                      const T *restrict row, int64_t lo, int64_t hi, int64_t s,    \
                                      int64_t off, int64_t rowbase) {                              \
        if (bi) {                                                                                  \
            for (int64_t ox = lo; ox < hi; ox++) {                                                 \
                T v = row[ox * s + off];                                                           \
                int take = (v > best[ox]) | (v != v);                                              \
                best[ox] = take ? v : best[ox];                                                    \
                bi[ox] = take ? rowbase + ox * s + off : bi[ox];                                   \
            }                                                                                      \
        } else {                                                                                   \
            for (int64_t ox = lo; ox < hi; ox++) {                                                 \
                T v = row[ox * s + off];                                                           \
                best[ox] = ((v > best[ox]) | (v != v)) ? v : best[ox];                             \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void maxpool_plane_##S(T *restrict out, int64_t *restrict idx,                          \
                                  const T *restrict x, int64_t H, int64_t W,                       \
                                  int64_t OH, int64_t OW, const em_pool_args *a) {                 \
        const int64_t KH = a->kernel[0], KW = a->kernel[1], sy = a->stride[0],                     \
                      sx = a->stride[1], py = a->padding[0], px = a->padding[1],                   \
                      dy = a->dilation[0], dx = a->dilation[1];                                    \
        tap_ranges tr;                                                                             \
        taps_init(&tr, KW, dx, px, sx, W, OW);                                                     \
        if (KH == 2 && KW == 2 && sy == 2 && sx == 2 && py == 0 && px == 0 && dy == 1 &&           \
            dx == 1 && 2 * OH <= H && 2 * OW <= W) { /* 2x2 / 2, no clipping: fused taps */        \
            for (int64_t oy = 0; oy < OH; oy++) {                                                  \
                const T *restrict r0 = x + 2 * oy * W, *restrict r1 = r0 + W;                      \
                T *restrict o = out + oy * OW;                                                     \
                if (idx) {                                                                         \
                    int64_t *restrict oi = idx + oy * OW;                                          \
                    for (int64_t ox = 0; ox < OW; ox++) {                                          \
                        const int64_t i0 = 2 * oy * W + 2 * ox;                                    \
                        T b = -INFINITY;                                                           \
                        int64_t bi = i0;                                                           \
                        MAXPOOL_STEP(T, b, bi, r0[2 * ox], i0);                                    \
                        MAXPOOL_STEP(T, b, bi, r0[2 * ox + 1], i0 + 1);                            \
                        MAXPOOL_STEP(T, b, bi, r1[2 * ox], i0 + W);                                \
                        MAXPOOL_STEP(T, b, bi, r1[2 * ox + 1], i0 + W + 1);                        \
                        o[ox] = b;                                                                 \
                        oi[ox] = bi;                                                               \
                    }                                                                              \
                } else {                                                                           \
                    for (int64_t ox = 0; ox < OW; ox++) {                                          \
                        T b = -INFINITY, v;                                                        \
                        v = r0[2 * ox];                                                            \
                        b = ((v > b) | (v != v)) ? v : b;                                          \
                        v = r0[2 * ox + 1];                                                        \
                        b = ((v > b) | (v != v)) ? v : b;                                          \
                        v = r1[2 * ox];                                                            \
                        b = ((v > b) | (v != v)) ? v : b;                                          \
                        v = r1[2 * ox + 1];                                                        \
                        b = ((v > b) | (v != v)) ? v : b;                                          \
                        o[ox] = b;                                                                 \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
            return;                                                                                \
        }                                                                                          \
        for (int64_t oy = 0; oy < OH; oy++) {                                                      \
            T *restrict best = out + oy * OW;                                                      \
            int64_t *restrict bi = idx ? idx + oy * OW : NULL;                                     \
            const int64_t y0 = oy * sy - py;                                                       \
            const int64_t y1 = imin(y0 + (KH - 1) * dy + 1, H), ys = first_tap(y0, dy);            \
            for (int64_t ox = 0; ox < OW; ox++) best[ox] = -INFINITY;                              \
            if (bi) { /* the first in-bounds tap; x0 < 0 only for the first outputs */             \
                int64_t ox = 0;                                                                    \
                for (; ox < OW && ox * sx - px < 0; ox++)                                          \
                    bi[ox] = ys * W + first_tap(ox * sx - px, dx);                                 \
                for (; ox < OW; ox++) bi[ox] = ys * W + ox * sx - px;                              \
            }                                                                                      \
            for (int64_t iy = ys; iy < y1; iy += dy) {                                             \
                const T *restrict row = x + iy * W;                                                \
                for (int64_t kw = 0; kw < KW; kw++) {                                              \
                    const int64_t off = kw * dx - px;                                              \
                    int64_t lo, hi;                                                                \
                    taps_get(&tr, kw, &lo, &hi);                                                   \
                    if (sx == 1)                                                                   \
                        maxtap_##S(best, bi, row, lo, hi, 1, off, iy * W);                         \
                    else if (sx == 2)                                                              \
                        maxtap_##S(best, bi, row, lo, hi, 2, off, iy * W);                         \
                    else                                                                           \
                        maxtap_##S(best, bi, row, lo, hi, sx, off, iy * W);                        \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

MAXTAP_LOOPS(float, f32)
MAXTAP_LOOPS(double, f64)

typedef struct pool_job {
    const em_pool_args *a;
    em_dtype dt;
    const void *x; /* input planes (gy for the backward) */
    void *out;     /* output planes (gx for the backward) */
    int64_t *idx;
    int64_t H, W, OH, OW;
    atomic_int nomem;
} pool_job;

static void maxpool_range(int64_t lo, int64_t hi, void *arg) {
    pool_job *j = arg;
    const int64_t in = j->H * j->W, on = j->OH * j->OW;
    for (int64_t p = lo; p < hi; p++) {
        int64_t *ip = j->idx ? j->idx + p * on : NULL;
        if (j->dt == EM_F32)
            maxpool_plane_f32((float *)j->out + p * on, ip, (const float *)j->x + p * in, j->H,
                              j->W, j->OH, j->OW, j->a);
        else
            maxpool_plane_f64((double *)j->out + p * on, ip, (const double *)j->x + p * in,
                              j->H, j->W, j->OH, j->OW, j->a);
    }
}

/** The pooling kernels' operands: f32/f64/f16/bf16 4-d, out of x's dtype (the kernels below
 *  run f32/f64 on contiguous planes; the entry points stage the rest, see stage.h). */
static bool pool_ok(const em_view *out, const em_view *x) {
    const em_dtype dt = x->dtype;
    return (dt == EM_F32 || dt == EM_F64 || dt == EM_F16 || dt == EM_BF16) && out->dtype == dt &&
           x->rank == 4 && out->rank == 4;
}

/* out, idx (may be NULL): contiguous, of x's dtype and i64; x contiguous f32/f64 */
static void maxpool_f(const em_view *out, const em_view *indices, const em_view *x,
                      const em_pool_args *a) {
    pool_job j = {.a = a, .dt = x->dtype, .x = cpu_ptr(x), .out = cpu_ptr(out),
                  .idx = indices ? (int64_t *)cpu_ptr(indices) : NULL, .H = x->shape[2],
                  .W = x->shape[3], .OH = out->shape[2], .OW = out->shape[3]};
    const int64_t planes = out->shape[0] * out->shape[1];
    const bool two_by_two = a->kernel[0] == 2 && a->kernel[1] == 2 && a->stride[0] == 2 &&
                            a->stride[1] == 2 && a->padding[0] == 0 && a->padding[1] == 0 &&
                            a->dilation[0] == 1 && a->dilation[1] == 1 && 2 * j.OH <= j.H &&
                            2 * j.OW <= j.W;
    /* the AVX-512 kernel (pool_avx512.c) in the avx512 copy only */
    const bool avx512 = CPU_ISA_LEVEL >= CPU_ISA_AVX512;
    if (!(avx512 && two_by_two && j.idx && j.dt == EM_F32 &&
          cpu_maxpool2x2_f32((float *)j.out, j.idx, (const float *)j.x, planes, j.H, j.W, j.OH,
                             j.OW))) {
        const int64_t grain = NN_GRAIN / imax(1, j.H * j.W);
        cpu_parallel_for(planes, imax(1, grain), maxpool_range, &j);
    }
}

em_status CPU_K(cpu_max_pool2d)(void *ctx, const em_view *out, const em_view *indices,
                                const em_view *x, const em_pool_args *a) {
    if (!pool_ok(out, x) || (indices && (indices->dtype != EM_I64 || indices->rank != 4)))
        return CPU_FALLBACK(CPU_FB_MAX_POOL2D, out->dtype, max_pool2d, ctx, out, indices, x, a);
    if (cpu_numel(out) == 0) return EM_OK;
    const em_dtype ct = cpu_stage_dtype(x->dtype);
    cpu_stage sx = {0}, so = {0}, si = {0};
    em_status st = cpu_stage_in(x, ct, &sx);
    if (st == EM_OK) st = cpu_stage_out(out, ct, false, &so);
    if (st == EM_OK && indices) st = cpu_stage_out(indices, EM_I64, false, &si);
    if (st == EM_OK) maxpool_f(&so.v, indices ? &si.v : NULL, &sx.v, a);
    if (indices) st = cpu_stage_out_finish(indices, &si, st);
    st = cpu_stage_out_finish(out, &so, st);
    cpu_stage_free(&sx);
    return st;
}

/* ---- avg_pool2d ---- */

/** The ref kernel's window extent along one axis for output o: the padded count and the
 *  clipped range [*c0, *c1). */
static inline int64_t avg_extent(int64_t o, int64_t k, int64_t s, int64_t p, int64_t n,
                                 int64_t *c0, int64_t *c1) {
    const int64_t w0 = o * s - p, w1 = imin(w0 + k, n + p);
    *c0 = imax(w0, 0);
    *c1 = imin(w1, n);
    return w1 - w0;
}

#define AVG_LOOPS(T, S)                                                                            \
    /* acc[k] accumulates output base + k */                                                       \
    static CPU_INLINE void sumtap_##S(double *restrict acc, int64_t base,                          \
                                      const T *restrict row, int64_t lo, int64_t hi, int64_t s,    \
                                      int64_t off) {                                               \
        for (int64_t ox = lo; ox < hi; ox++) acc[ox - base] += (double)row[ox * s + off];          \
    }                                                                                              \
    static void avgpool_plane_##S(T *restrict out, const T *restrict x, int64_t H,                 \
                                  int64_t W, int64_t OH, int64_t OW,                               \
                                  const em_pool_args *a) {                                         \
        const int64_t KH = a->kernel[0], KW = a->kernel[1], sy = a->stride[0],                     \
                      sx = a->stride[1], py = a->padding[0], px = a->padding[1];                   \
        tap_ranges tr;                                                                             \
        taps_init(&tr, KW, 1, px, sx, W, OW);                                                      \
        double acc[NN_BLOCK], cpad[NN_BLOCK], cclip[NN_BLOCK], valid[NN_BLOCK];                    \
        for (int64_t b0 = 0; b0 < OW; b0 += NN_BLOCK) {                                            \
            const int64_t b1 = imin(b0 + NN_BLOCK, OW), nb = b1 - b0;                              \
            for (int64_t k = 0; k < nb; k++) { /* the block's column extents */                    \
                int64_t xc0, xc1;                                                                  \
                const int64_t pw = avg_extent(b0 + k, KW, sx, px, W, &xc0, &xc1);                 \
                valid[k] = xc0 < xc1 ? 1.0 : 0.0; /* then pw > 0 too */                            \
                cpad[k] = xc0 < xc1 ? (double)pw : 1.0;                                            \
                cclip[k] = xc0 < xc1 ? (double)(xc1 - xc0) : 1.0;                                  \
            }                                                                                      \
            for (int64_t oy = 0; oy < OH; oy++) {                                                  \
                int64_t yc0, yc1;                                                                  \
                const double ph = (double)avg_extent(oy, KH, sy, py, H, &yc0, &yc1);               \
                T *restrict o = out + oy * OW + b0;                                                \
                if (yc0 >= yc1) {                                                                  \
                    for (int64_t k = 0; k < nb; k++) o[k] = 0;                                     \
                    continue;                                                                      \
                }                                                                                  \
                for (int64_t k = 0; k < nb; k++) acc[k] = 0;                                       \
                for (int64_t iy = yc0; iy < yc1; iy++) {                                           \
                    const T *restrict row = x + iy * W;                                            \
                    for (int64_t kw = 0; kw < KW; kw++) {                                          \
                        const int64_t off = kw - px;                                               \
                        int64_t lo, hi;                                                            \
                        taps_get(&tr, kw, &lo, &hi);                                               \
                        lo = imax(lo, b0);                                                         \
                        hi = imin(hi, b1);                                                         \
                        if (sx == 1) sumtap_##S(acc, b0, row, lo, hi, 1, off);                     \
                        else if (sx == 2) sumtap_##S(acc, b0, row, lo, hi, 2, off);                \
                        else sumtap_##S(acc, b0, row, lo, hi, sx, off);                            \
                    }                                                                              \
                }                                                                                  \
                /* the ref's divisor (the padded or the clipped window) as a double; valid[k]      \
                 * is 1, or 0 for a window without inputs (acc 0): arithmetic only, so that        \
                 * the loop vectorizes */                                                          \
                const double rows = (double)(yc1 - yc0);                                           \
                const double *restrict div = a->count_include_pad ? cpad : cclip;                  \
                const double f = a->count_include_pad ? ph : rows;                                 \
                for (int64_t k = 0; k < nb; k++) o[k] = (T)(acc[k] / (f * div[k]) * valid[k]);     \
            }                                                                                      \
        }                                                                                          \
    }

AVG_LOOPS(float, f32)
AVG_LOOPS(double, f64)

static void avgpool_range(int64_t lo, int64_t hi, void *arg) {
    pool_job *j = arg;
    const int64_t in = j->H * j->W, on = j->OH * j->OW;
    for (int64_t p = lo; p < hi; p++) {
        if (j->dt == EM_F32)
            avgpool_plane_f32((float *)j->out + p * on, (const float *)j->x + p * in, j->H, j->W,
                              j->OH, j->OW, j->a);
        else
            avgpool_plane_f64((double *)j->out + p * on, (const double *)j->x + p * in, j->H,
                              j->W, j->OH, j->OW, j->a);
    }
}

static em_status avgpool_f(const em_view *out, const em_view *x, const em_pool_args *a) {
    pool_job j = {.a = a, .dt = x->dtype, .x = cpu_ptr(x), .out = cpu_ptr(out),
                  .H = x->shape[2], .W = x->shape[3], .OH = out->shape[2], .OW = out->shape[3]};
    const int64_t planes = out->shape[0] * out->shape[1];
    const int64_t grain = NN_GRAIN / imax(1, j.H * j.W);
    cpu_parallel_for(planes, imax(1, grain), avgpool_range, &j);
    return EM_OK;
}

/* y = f(x) for a pooling kernel f of contiguous f32/f64 planes: x and y staged (stage.h) */
typedef em_status (*pool_fn)(const em_view *y, const em_view *x, const em_pool_args *a);

static em_status pool_staged(pool_fn f, const em_view *y, const em_view *x,
                             const em_pool_args *a) {
    if (cpu_numel(y) == 0) return EM_OK;
    const em_dtype ct = cpu_stage_dtype(x->dtype);
    cpu_stage sx = {0}, sy = {0};
    em_status st = cpu_stage_in(x, ct, &sx);
    if (st == EM_OK) st = cpu_stage_out(y, ct, false, &sy);
    if (st == EM_OK) st = cpu_stage_out_finish(y, &sy, f(&sy.v, &sx.v, a));
    cpu_stage_free(&sx);
    return st;
}

em_status CPU_K(cpu_avg_pool2d)(void *ctx, const em_view *out, const em_view *x,
                                const em_pool_args *a) {
    if (!pool_ok(out, x))
        return CPU_FALLBACK(CPU_FB_AVG_POOL2D, out->dtype, avg_pool2d, ctx, out, x, a);
    return pool_staged(avgpool_f, out, x, a);
}

/* ---- avg_pool2d_backward: each gy element, divided by its window's divisor, is added to
 *      the window's inputs; kernel columns run backwards so every input receives its terms
 *      in the ref kernel's (oy, ox) order ---- */

static inline void addtap(double *restrict g, const double *restrict t, int64_t lo, int64_t hi,
                          int64_t s, int64_t off) {
    for (int64_t ox = lo; ox < hi; ox++) g[ox * s + off] += t[ox];
}

/* g: the plane's H*W double accumulators; t: OW doubles of scratch */
#define AVGB_LOOPS(T, S)                                                                           \
    static void avgpool_bwd_plane_##S(double *restrict g, double *restrict t,                      \
                                      const T *restrict gy, int64_t H, int64_t W,                  \
                                      int64_t OH, int64_t OW,                                      \
                                      const em_pool_args *a) {                                     \
        const int64_t KH = a->kernel[0], KW = a->kernel[1], sy = a->stride[0],                     \
                      sx = a->stride[1], py = a->padding[0], px = a->padding[1];                   \
        tap_ranges tr;                                                                             \
        taps_init(&tr, KW, 1, px, sx, W, OW);                                                      \
        for (int64_t i = 0; i < H * W; i++) g[i] = 0;                                              \
        for (int64_t oy = 0; oy < OH; oy++) {                                                      \
            int64_t yc0, yc1;                                                                      \
            const int64_t ph = avg_extent(oy, KH, sy, py, H, &yc0, &yc1);                          \
            if (yc0 >= yc1) continue;                                                              \
            for (int64_t ox = 0; ox < OW; ox++) {                                                  \
                int64_t xc0, xc1;                                                                  \
                const int64_t pw = avg_extent(ox, KW, sx, px, W, &xc0, &xc1);                      \
                const int64_t cnt = a->count_include_pad ? ph * pw : (yc1 - yc0) * (xc1 - xc0);    \
                t[ox] = xc0 < xc1 ? (double)gy[oy * OW + ox] / (double)cnt : 0.0;                  \
            }                                                                                      \
            for (int64_t iy = yc0; iy < yc1; iy++) {                                               \
                double *restrict grow = g + iy * W;                                                \
                for (int64_t kw = KW - 1; kw >= 0; kw--) {                                         \
                    const int64_t off = kw - px;                                                   \
                    int64_t lo, hi;                                                                \
                    taps_get(&tr, kw, &lo, &hi);                                                   \
                    if (sx == 1) addtap(grow, t, lo, hi, 1, off);                                  \
                    else if (sx == 2) addtap(grow, t, lo, hi, 2, off);                             \
                    else addtap(grow, t, lo, hi, sx, off);                                         \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

AVGB_LOOPS(float, f32)
AVGB_LOOPS(double, f64)

static void avgpool_bwd_range(int64_t lo, int64_t hi, void *arg) {
    pool_job *j = arg;
    const int64_t in = j->H * j->W, on = j->OH * j->OW;
    const bool f32 = j->dt == EM_F32;
    /* f64 accumulates straight into gx; f32 in a double plane, rounded at the end */
    double *buf = cpu_scratch((size_t)((f32 ? in : 0) + j->OW + 1) * sizeof(double));
    if (!buf) {
        atomic_store(&j->nomem, 1);
        return;
    }
    double *t = buf, *g = buf + j->OW;
    for (int64_t p = lo; p < hi; p++) {
        if (f32) {
            avgpool_bwd_plane_f32(g, t, (const float *)j->x + p * on, j->H, j->W, j->OH, j->OW,
                                  j->a);
            float *gx = (float *)j->out + p * in;
            for (int64_t i = 0; i < in; i++) gx[i] = (float)g[i];
        } else {
            avgpool_bwd_plane_f64((double *)j->out + p * in, t, (const double *)j->x + p * on,
                                  j->H, j->W, j->OH, j->OW, j->a);
        }
    }
    cpu_scratch_free(buf);
}

static em_status avgpool_bwd_f(const em_view *gx, const em_view *gy, const em_pool_args *a) {
    pool_job j = {.a = a, .dt = gy->dtype, .x = cpu_ptr(gy), .out = cpu_ptr(gx),
                  .H = gx->shape[2], .W = gx->shape[3], .OH = gy->shape[2], .OW = gy->shape[3]};
    atomic_init(&j.nomem, 0);
    const int64_t planes = gx->shape[0] * gx->shape[1];
    const int64_t grain = NN_GRAIN / imax(1, j.H * j.W);
    cpu_parallel_for(planes, imax(1, grain), avgpool_bwd_range, &j);
    if (atomic_load(&j.nomem))
        return em_backend_set_error(EM_ERR_NOMEM, "cpu: out of memory (avg_pool2d_backward)");
    return EM_OK;
}

em_status CPU_K(cpu_avg_pool2d_backward)(void *ctx, const em_view *gx, const em_view *gy,
                                         const em_pool_args *a) {
    if (!pool_ok(gx, gy))
        return CPU_FALLBACK(CPU_FB_AVG_POOL2D_BWD, gx->dtype, avg_pool2d_backward, ctx, gx, gy, a);
    return pool_staged(avgpool_bwd_f, gx, gy, a);
}

/* ---- adaptive_avg_pool2d and its backward: PyTorch's bins, bin i of n over a length L
 *      spanning [floor(i*L/n), ceil((i+1)*L/n)); sums in double, divided by the bin's size
 *      in double and rounded once, as ref ---- */

/* b[2i], b[2i + 1]: the bounds of bin i of n over L (computed once per call: the plane loops
 * would otherwise spend most of their time in integer divisions) */
static void bins_init(int64_t *b, int64_t L, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        b[2 * i] = i * L / n;
        b[2 * i + 1] = ((i + 1) * L + n - 1) / n;
    }
}

/* the sum of x[0, n) in double: 8 partial sums in two vectors of 4 (GCC / Clang vector
 * extensions, one source at every level), reduced as a tree */
typedef float aap_v4f __attribute__((vector_size(16), aligned(4), may_alias));
typedef double aap_v4d __attribute__((vector_size(32)));
typedef double aap_v4du __attribute__((vector_size(32), aligned(8), may_alias));

/* (by pointer: a 32-byte vector passed by value draws GCC's ABI note at the portable level) */
static inline double aap_reduce(const aap_v4d *a, const aap_v4d *b, double s) {
    const aap_v4d c = *a + *b;
    return s + ((c[0] + c[2]) + (c[1] + c[3]));
}
static inline double aap_sum_f32(const float *restrict x, int64_t n) {
    aap_v4d a = {0, 0, 0, 0}, b = {0, 0, 0, 0};
    int64_t i = 0;
#if defined(__AVX__)
    /* GCC 12 lowers the generic conversion below to pairs of 2-lane ones (1.6x slower) */
    for (; i + 8 <= n; i += 8) {
        a += (aap_v4d)_mm256_cvtps_pd(_mm_loadu_ps(x + i));
        b += (aap_v4d)_mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
    }
#endif
    for (; i + 8 <= n; i += 8) {
        a += __builtin_convertvector(*(const aap_v4f *)(x + i), aap_v4d);
        b += __builtin_convertvector(*(const aap_v4f *)(x + i + 4), aap_v4d);
    }
    double s = 0;
    for (; i < n; i++) s += (double)x[i];
    return aap_reduce(&a, &b, s);
}
static inline double aap_sum_f64(const double *restrict x, int64_t n) {
    aap_v4d a = {0, 0, 0, 0}, b = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        a += *(const aap_v4du *)(x + i);
        b += *(const aap_v4du *)(x + i + 4);
    }
    double s = 0;
    for (; i < n; i++) s += x[i];
    return aap_reduce(&a, &b, s);
}

#define AAP_LOOPS(T, S)                                                                            \
    /* col: W doubles of scratch */                                                                \
    static void aap_plane_##S(T *restrict out, const T *restrict x, double *restrict col,          \
                              const int64_t *yb, const int64_t *xb, int64_t H, int64_t W,          \
                              int64_t OH, int64_t OW) {                                            \
        if (OH == 1 && OW == 1) { /* global pooling: one contiguous sum */                         \
            out[0] = (T)(aap_sum_##S(x, H * W) / (double)(H * W));                                 \
            return;                                                                                \
        }                                                                                          \
        for (int64_t oy = 0; oy < OH; oy++) {                                                      \
            const int64_t y0 = yb[2 * oy], y1 = yb[2 * oy + 1];                          \
            for (int64_t ix = 0; ix < W; ix++) col[ix] = 0;                                        \
            for (int64_t iy = y0; iy < y1; iy++) {                                                 \
                const T *restrict r = x + iy * W;                                                  \
                for (int64_t ix = 0; ix < W; ix++) col[ix] += (double)r[ix];                       \
            }                                                                                      \
            for (int64_t ox = 0; ox < OW; ox++) {                                                  \
                const int64_t x0 = xb[2 * ox], x1 = xb[2 * ox + 1];                      \
                double s = 0;                                                                      \
                for (int64_t ix = x0; ix < x1; ix++) s += col[ix];                                 \
                out[oy * OW + ox] = (T)(s / (double)((y1 - y0) * (x1 - x0)));                      \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    /* g: H*W doubles of scratch when bins overlap (NULL when they do not: each input then gets \
     * one term, written straight) */                                                              \
    static void aap_bwd_plane_##S(T *restrict gx, const T *restrict gy, double *restrict g,        \
                                  const int64_t *yb, const int64_t *xb, int64_t H, int64_t W,      \
                                  int64_t OH, int64_t OW) {                                        \
        if (!g) {                                                                                  \
            for (int64_t oy = 0; oy < OH; oy++) {                                                  \
                const int64_t y0 = yb[2 * oy], y1 = yb[2 * oy + 1];                      \
                for (int64_t ox = 0; ox < OW; ox++) {                                              \
                    const int64_t x0 = xb[2 * ox], x1 = xb[2 * ox + 1];                  \
                    const T v = (T)((double)gy[oy * OW + ox] / (double)((y1 - y0) * (x1 - x0)));   \
                    for (int64_t iy = y0; iy < y1; iy++)                                           \
                        for (int64_t ix = x0; ix < x1; ix++) gx[iy * W + ix] = v;                  \
                }                                                                                  \
            }                                                                                      \
            return;                                                                                \
        }                                                                                          \
        for (int64_t i = 0; i < H * W; i++) g[i] = 0;                                              \
        for (int64_t oy = 0; oy < OH; oy++) { /* (oy, ox) ascending: ref's order per input */      \
            const int64_t y0 = yb[2 * oy], y1 = yb[2 * oy + 1];                          \
            for (int64_t ox = 0; ox < OW; ox++) {                                                  \
                const int64_t x0 = xb[2 * ox], x1 = xb[2 * ox + 1];                      \
                const double v = (double)gy[oy * OW + ox] / (double)((y1 - y0) * (x1 - x0));       \
                for (int64_t iy = y0; iy < y1; iy++)                                               \
                    for (int64_t ix = x0; ix < x1; ix++) g[iy * W + ix] += v;                      \
            }                                                                                      \
        }                                                                                          \
        for (int64_t i = 0; i < H * W; i++) gx[i] = (T)g[i];                                       \
    }

AAP_LOOPS(float, f32)
AAP_LOOPS(double, f64)

typedef struct aap_job {
    em_dtype dt;
    const void *in; /* x (forward) or gy (backward) planes */
    void *out;      /* out or gx planes */
    int64_t H, W, OH, OW;
    const int64_t *yb, *xb; /* bins_init's bounds */
    bool bwd, overlap;
    atomic_int nomem;
} aap_job;

static void aap_range(int64_t lo, int64_t hi, void *arg) {
    aap_job *j = arg;
    const int64_t xn = j->H * j->W, yn = j->OH * j->OW;
    const int64_t need = j->bwd ? (j->overlap ? xn : 0) : j->W;
    double *buf = NULL;
    if (need > 0 && !(buf = cpu_scratch((size_t)need * sizeof(double)))) {
        atomic_store(&j->nomem, 1);
        return;
    }
    if (!j->bwd && j->OH == 1 && j->OW == 1) { /* global pooling: a tight loop of plane sums */
        const double cnt = (double)xn;
        if (j->dt == EM_F32) {
            const float *x = j->in;
            float *o = j->out;
            for (int64_t p = lo; p < hi; p++) o[p] = (float)(aap_sum_f32(x + p * xn, xn) / cnt);
        } else {
            const double *x = j->in;
            double *o = j->out;
            for (int64_t p = lo; p < hi; p++) o[p] = aap_sum_f64(x + p * xn, xn) / cnt;
        }
        lo = hi;
    }
    if (j->bwd && j->OH == 1 && j->OW == 1) { /* its gradient: each plane filled with gy / HW */
        const double cnt = (double)xn;
        if (j->dt == EM_F32) {
            const float *gy = j->in;
            float *gx = j->out;
            for (int64_t p = lo; p < hi; p++) {
                const float v = (float)((double)gy[p] / cnt);
                for (int64_t i = 0; i < xn; i++) gx[p * xn + i] = v;
            }
        } else {
            const double *gy = j->in;
            double *gx = j->out;
            for (int64_t p = lo; p < hi; p++) {
                const double v = gy[p] / cnt;
                for (int64_t i = 0; i < xn; i++) gx[p * xn + i] = v;
            }
        }
        lo = hi;
    }
    for (int64_t p = lo; p < hi; p++) {
        if (!j->bwd && j->dt == EM_F32)
            aap_plane_f32((float *)j->out + p * yn, (const float *)j->in + p * xn, buf, j->yb,
                          j->xb, j->H, j->W, j->OH, j->OW);
        else if (!j->bwd)
            aap_plane_f64((double *)j->out + p * yn, (const double *)j->in + p * xn, buf, j->yb,
                          j->xb, j->H, j->W, j->OH, j->OW);
        else if (j->dt == EM_F32)
            aap_bwd_plane_f32((float *)j->out + p * xn, (const float *)j->in + p * yn, buf, j->yb,
                              j->xb, j->H, j->W, j->OH, j->OW);
        else
            aap_bwd_plane_f64((double *)j->out + p * xn, (const double *)j->in + p * yn, buf,
                              j->yb, j->xb, j->H, j->W, j->OH, j->OW);
    }
    if (buf) cpu_scratch_free(buf);
}

/* x: [N, C, H, W], y: [N, C, OH, OW], contiguous f32/f64; bwd: y -> x */
static em_status aap_run(const em_view *x, const em_view *y, bool bwd) {
    aap_job j = {.dt = x->dtype, .H = x->shape[2], .W = x->shape[3], .OH = y->shape[2],
                 .OW = y->shape[3], .bwd = bwd};
    j.in = cpu_ptr(bwd ? y : x);
    j.out = cpu_ptr(bwd ? x : y);
    j.overlap = (j.OH > 0 && j.H % j.OH != 0) || (j.OW > 0 && j.W % j.OW != 0);
    atomic_init(&j.nomem, 0);
    const int64_t planes = x->shape[0] * x->shape[1];
    if (bwd && (j.OH == 0 || j.OW == 0)) { /* no bins: zeros */
        j.overlap = true;
    }
    int64_t *b = cpu_scratch((size_t)(2 * (j.OH + j.OW) + 1) * sizeof(int64_t));
    if (!b) return em_backend_set_error(EM_ERR_NOMEM, "cpu: out of memory (adaptive_avg_pool2d)");
    bins_init(b, j.H, j.OH);
    bins_init(b + 2 * j.OH, j.W, j.OW);
    j.yb = b;
    j.xb = b + 2 * j.OH;
    cpu_parallel_for(planes, imax(1, NN_GRAIN / imax(1, j.H * j.W)), aap_range, &j);
    cpu_scratch_free(b);
    if (atomic_load(&j.nomem))
        return em_backend_set_error(EM_ERR_NOMEM, "cpu: out of memory (adaptive_avg_pool2d)");
    return EM_OK;
}

static em_status aap_fwd_f(const em_view *y, const em_view *x, const em_pool_args *a) {
    (void)a;
    return aap_run(x, y, false);
}
static em_status aap_bwd_f(const em_view *gx, const em_view *gy, const em_pool_args *a) {
    (void)a;
    return aap_run(gx, gy, true);
}

em_status CPU_K(cpu_adaptive_avg_pool2d)(void *ctx, const em_view *out, const em_view *x) {
    if (!pool_ok(out, x))
        return CPU_FALLBACK(CPU_FB_ADAPTIVE_AVG_POOL2D, out->dtype, adaptive_avg_pool2d, ctx, out,
                            x);
    return pool_staged(aap_fwd_f, out, x, NULL);
}

em_status CPU_K(cpu_adaptive_avg_pool2d_backward)(void *ctx, const em_view *gx,
                                                  const em_view *gy) {
    if (!pool_ok(gx, gy))
        return CPU_FALLBACK(CPU_FB_ADAPTIVE_AVG_POOL2D_BWD, gx->dtype,
                            adaptive_avg_pool2d_backward, ctx, gx, gy);
    return pool_staged(aap_bwd_f, gx, gy, NULL);
}

/* ---- layer_norm ---- */

#define LN_LANES 32

#define LN_LOOPS(T, S)                                                                             \
    static void ln_row_##S(T *restrict o, const T *restrict x, const T *restrict w,                \
                           const T *restrict b, int64_t n, double eps) {                           \
        double a[LN_LANES] = {0}, s = 0;                                                           \
        int64_t i = 0;                                                                             \
        for (; i + LN_LANES <= n; i += LN_LANES)                                                   \
            for (int k = 0; k < LN_LANES; k++) a[k] += (double)x[i + k];                           \
        for (; i < n; i++) s += (double)x[i];                                                      \
        for (int k = 0; k < LN_LANES; k++) s += a[k];                                              \
        const double mean = s / (double)n;                                                         \
        for (int k = 0; k < LN_LANES; k++) a[k] = 0;                                               \
        s = 0;                                                                                     \
        for (i = 0; i + LN_LANES <= n; i += LN_LANES)                                              \
            for (int k = 0; k < LN_LANES; k++) {                                                   \
                double d = (double)x[i + k] - mean;                                                \
                a[k] += d * d;                                                                     \
            }                                                                                      \
        for (; i < n; i++) {                                                                       \
            double d = (double)x[i] - mean;                                                        \
            s += d * d;                                                                            \
        }                                                                                          \
        for (int k = 0; k < LN_LANES; k++) s += a[k];                                              \
        const double inv = 1.0 / sqrt(s / (double)n + eps);                                        \
        if (w && b)                                                                                \
            for (i = 0; i < n; i++)                                                                \
                o[i] = (T)((((double)x[i] - mean) * inv) * (double)w[i] + (double)b[i]);           \
        else if (w)                                                                                \
            for (i = 0; i < n; i++) o[i] = (T)((((double)x[i] - mean) * inv) * (double)w[i]);      \
        else if (b)                                                                                \
            for (i = 0; i < n; i++) o[i] = (T)(((double)x[i] - mean) * inv + (double)b[i]);        \
        else                                                                                       \
            for (i = 0; i < n; i++) o[i] = (T)(((double)x[i] - mean) * inv);                       \
    }

LN_LOOPS(float, f32)
LN_LOOPS(double, f64)

typedef struct ln_job {
    em_dtype dt;
    const void *x, *w, *b;
    void *o;
    int64_t n;
    double eps;
} ln_job;

static void ln_range(int64_t lo, int64_t hi, void *arg) {
    const ln_job *j = arg;
    for (int64_t r = lo; r < hi; r++) {
        if (j->dt == EM_F32)
            ln_row_f32((float *)j->o + r * j->n, (const float *)j->x + r * j->n, j->w, j->b,
                       j->n, j->eps);
        else
            ln_row_f64((double *)j->o + r * j->n, (const double *)j->x + r * j->n, j->w, j->b,
                       j->n, j->eps);
    }
}

em_status CPU_K(cpu_layer_norm)(void *ctx, const em_view *out, const em_view *x,
                                const em_view *weight, const em_view *bias, int64_t norm_numel,
                                double eps) {
    const em_dtype dt = x->dtype;
    const bool ok = (dt == EM_F32 || dt == EM_F64 || dt == EM_F16 || dt == EM_BF16) &&
                    out->dtype == dt && cpu_numel(out) == cpu_numel(x) && norm_numel >= 0 &&
                    (!weight || (weight->dtype == dt && cpu_numel(weight) == norm_numel)) &&
                    (!bias || (bias->dtype == dt && cpu_numel(bias) == norm_numel));
    if (!ok)
        return CPU_FALLBACK(CPU_FB_LAYER_NORM, out->dtype, layer_norm, ctx, out, x, weight, bias,
                            norm_numel, eps);
    const int64_t rows = norm_numel > 0 ? cpu_numel(x) / norm_numel : 0;
    if (rows == 0) return EM_OK;
    /* f16/bf16 through f32, x and the parameters packed when strided (stage.h) */
    const em_dtype ct = cpu_stage_dtype(dt);
    cpu_stage sx = {0}, sw = {0}, sb = {0}, so = {0};
    em_status st = cpu_stage_in(x, ct, &sx);
    if (st == EM_OK) st = cpu_stage_in(weight, ct, &sw);
    if (st == EM_OK) st = cpu_stage_in(bias, ct, &sb);
    if (st == EM_OK) st = cpu_stage_out(out, ct, false, &so);
    if (st == EM_OK) {
        ln_job j = {ct, cpu_ptr(&sx.v), weight ? cpu_ptr(&sw.v) : NULL,
                    bias ? cpu_ptr(&sb.v) : NULL, cpu_ptr(&so.v), norm_numel, eps};
        cpu_parallel_for(rows, imax(1, NN_GRAIN / norm_numel), ln_range, &j);
        st = cpu_stage_out_finish(out, &so, EM_OK);
    }
    cpu_stage_free(&sx);
    cpu_stage_free(&sw);
    cpu_stage_free(&sb);
    return st;
}
