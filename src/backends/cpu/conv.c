/* conv.c — the cpu backend's convolutions for f32 and f64: conv2d, its weight gradient and
 * conv_transpose2d, with any stride, padding, dilation and groups (NCHW).
 *
 * Two methods (EMBER_CPU_CONV=direct|gemm forces one where both apply, for tests and
 * benchmarks; unset or auto: the shape rules of use_direct / use_direct_wgrad):
 *   - direct, at the avx2 and avx512 levels (the portable copy has them too, for tests): each
 *     task copies the input rows it needs into zero-padded scratch rows (split into stride
 *     phases, so that any stride reads consecutive elements), then register-tiled kernels on
 *     GCC vector types of the level's width (the same source at every level: the avx2 copy
 *     runs and tests the logic of the avx512 one). conv2d: the output positions of a block of
 *     rows as slots of one vector each (running across rows, so 8x8 planes fill the tiles),
 *     tiles of OBMAX output channels x NV slots (avx2: 4 x 3 of 8 floats, avx512: 8 x 2 of
 *     16), the bias as the accumulators' start, 3-wide kernels with their taps unrolled, every
 *     channel block over a chunk of slots at a time (its rows stay in L1), threaded over
 *     (image, group, output row). Rows that would leave a fifth of the lanes idle (8x8 planes
 *     of 16 lanes) take x in a flat layout instead (flat_rows: KW copies of the rows, exactly
 *     OW wide, so a vector runs across rows): a ResNet's 64->64 3x3 conv on 8x8 planes went
 *     from 94 to 161 GF/s, its 32->64 /2 one from 60 to 108 (one Zen 5 core). At the avx512
 *     level, f32 planes of up to 256 outputs with unit strides and rows as wide as x's (3x3
 *     'same'), and 1x1 convs of any stride (x subsampled), read x in place with masked loads
 *     instead (conv_masked: no padded copy). conv2d_weight_grad (planes of 1024 outputs or more): tiles of
 *     WO output channels x WT taps summed over every output position of an image, the lane
 *     sums at the end, each batch slice summed in double and the slices added in order.
 *     conv_transpose2d with unit strides is the conv2d of x with the flipped kernel and padding
 *     (K-1)*d - p; with strides (EMBER_CPU_CONV=direct only), one unit-stride conv per
 *     output phase (the taps that reach it, as a smaller kernel: convt_phases), scattered.
 *   - im2col + GEMM (cpu_gemm) for the rest, one GEMM per group and chunk of images (their
 *     columns side by side, up to 4096 columns and 16 MiB of scratch), the batch split over
 *     the pool by images (each thread's GEMMs run alone; one image or too few: the GEMM
 *     threads inside): conv2d = w_g @ col(x) (no im2col for one-image chunks of 1x1 kernels),
 *     the products copied to [N, O, OH, OW]; conv2d_weight_grad = gy_g @ col(x)^T over slices
 *     of images (f32: at most 8192 terms a slice in f32, as PyTorch sums them all), each slice
 *     a GEMM per block of about 256 columns summed into the slice's sums (the columns in
 *     scratch are a block's, not a slice's 9x x), the slices summed in double in order; conv_transpose2d with unit strides = the conv2d of x with the
 *     flipped kernel (im2col, no scatter), else col2im(w_g^T @ x_g), the scatter-add threaded
 *     over (image, output channel). im2col copies a 'same' unit-stride row (output rows as wide
 *     as x's) as one shifted block.
 * f16 and bf16 run through f32 (operands converted once, the result rounded once), outputs
 * of another layout are computed in scratch and copied (stage.h), empty tensors and zero
 * channel counts give the bias or zeros; integer dtypes go to ref. Like PyTorch's
 * kernels (and unlike ref, which skips them), padded taps multiply zeros: a non-finite
 * weight there gives NaN. */
#include <cblas.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "stage.h"

/* The avx512 copy (CPU_ISA_LEVEL, isa.h) pins loads and broadcasts to registers (below). */
#if CPU_ISA_LEVEL >= CPU_ISA_AVX512 && defined(__x86_64__) && defined(__GNUC__)
#define CONV_512 1
#endif

#if defined(__GNUC__) && !defined(__clang__)
/* FMA contraction for the kernels (-std=c11 turns it off) */
#define CONV_FMA_BEGIN _Pragma("GCC push_options") _Pragma("GCC optimize(\"fp-contract=fast\")")
#define CONV_FMA_END _Pragma("GCC pop_options")
#else
#define CONV_FMA_BEGIN
#define CONV_FMA_END
#endif

#if defined(CONV_512) && !defined(__clang__)
/* the avx512 copy's lane sums: GCC's two-vector shuffle, a tree (tables below) */
#define CONV_GCC_SHUFFLE 1
#define LANESUM(T, V, VI, VL)                                                                      \
    do {                                                                                           \
        int cnt = WO * WT;                                                                         \
        for (int lv = 0; (VL >> lv) > 1 && cnt > 1; lv++) {                                        \
            const VI P = *(const VI *)shuf_lo_##VL[lv], Q = *(const VI *)shuf_hi_##VL[lv];         \
            for (int m = 0; m < cnt / 2; m++)                                                      \
                red[m] = __builtin_shuffle(red[2 * m], red[2 * m + 1], P) +                        \
                         __builtin_shuffle(red[2 * m], red[2 * m + 1], Q);                         \
            cnt /= 2;                                                                              \
        }                                                                                          \
    } while (0)
#else
#define LANESUM(T, V, VI, VL)                                                                      \
    do {                                                                                           \
        T sums[WO * WT];                                                                           \
        for (int i = 0; i < WO * WT; i++) {                                                        \
            sums[i] = 0;                                                                           \
            for (int l = 0; l < VL; l++) sums[i] += red[i][l];                                     \
        }                                                                                          \
        for (int i = 0; i < WO * WT; i++) red[i / VL][i % VL] = sums[i];                           \
    } while (0)
#endif

#define UNROLL _Pragma("GCC unroll 16") /* the small loops over tiles' registers */


static em_status oom(void) { return em_backend_set_error(EM_ERR_NOMEM, "cpu: out of memory"); }

/* ceil(a / b) for b > 0 and any a. */
static inline int64_t ceil_div(int64_t a, int64_t b) {
    return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}
static inline int64_t clampi(int64_t v, int64_t lo, int64_t hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* The geometry of a forward convolution: x [N, C, H, W] -> out [N, O, OH, OW], weights
 * [O, Cg, KH, KW] in G groups. Padding may be negative (a transposed conv as a conv). */
typedef struct geom {
    int64_t N, C, H, W, O, OH, OW, KH, KW, G, Cg, Og;
    int64_t sy, sx, py, px, dy, dx;
} geom;

/* The direct kernels read x from zero-padded rows split into sx phases: phase ph holds the
 * padded columns ph, ph + sx, ph + 2*sx, ... (padded column j is input column j - px), so
 * that output column ox at tap kw reads element ox + (kw*dx)/sx of phase (kw*dx) % sx, and
 * consecutive outputs read consecutive elements whatever the stride. */
#define MAX_KW 64
typedef struct padded {
    int64_t WPh;         /* elements per phase */
    int64_t WP;          /* a padded row: sx * WPh */
    int64_t tap[MAX_KW]; /* offset in a row of tap kw for output column 0 */
} padded;

/* The layout for output columns [0, width) (width >= OW: tiles may compute past OW). */
static padded padded_layout(const geom *q, int64_t width) {
    padded p;
    p.WPh = width + ((q->KW - 1) * q->dx) / q->sx;
    p.WP = q->sx * p.WPh;
    for (int64_t kw = 0; kw < q->KW && kw < MAX_KW; kw++)
        p.tap[kw] = ((kw * q->dx) % q->sx) * p.WPh + (kw * q->dx) / q->sx;
    return p;
}

/* ---- typed helpers (im2col, col2im, padding) ---- */

#define TYPED_HELPERS(T, SUF)                                                                      \
    /* col[k*ld + oy*OW + ox] = x[c, iy, ix] for rows k in [k0, k1) (k = (c*KH + kh)*KW + kw). */  \
    static void im2col_##SUF(const T *src, T *col, int64_t ld, const geom *q, int64_t k0,          \
                             int64_t k1) {                                                         \
        const int64_t KK = q->KH * q->KW;                                                          \
        const int64_t TR = q->OH + (q->KH - 1) * q->dy; /* rows of a shifted plane */            \
        if (q->sx == 1 && q->sy == 1 && q->OW == q->W && q->KW <= 8 && q->KW * TR * q->W <= 4096 && \
            k0 % KK == 0 && (k1 - k0) % KK == 0) {                                                 \
            /* unit strides, rows as wide as x's, whole channels: for each tap column kw, x's     \
             * plane shifted by kw columns with zero rows above and below (TR rows, T row r being \
             * input row r - py); the KH rows of col with that kw are then one contiguous copy    \
             * each (row kh from T row kh*dy on) */                                                \
            const int64_t W = q->W, OHW = q->OH * W;                                               \
            T t[4096];                                                                             \
            for (int64_t c = k0 / KK; c < k1 / KK; c++) {                                          \
                const T *sc = src + c * q->H * W;                                                  \
                for (int64_t kw = 0; kw < q->KW; kw++) {                                           \
                    T *tk = t + kw * TR * W;                                                       \
                    const int64_t off = q->px - kw * q->dx; /* ix = ox - off */                    \
                    const int64_t lo = clampi(off, 0, W), hi = clampi(W + off, lo, W);             \
                    for (int64_t r = 0; r < TR; r++) {                                             \
                        T *d = tk + r * W;                                                         \
                        const int64_t iy = r - q->py;                                              \
                        if (iy < 0 || iy >= q->H) {                                                \
                            for (int64_t ox = 0; ox < W; ox++) d[ox] = 0;                          \
                            continue;                                                              \
                        }                                                                          \
                        const T *sr = sc + iy * W - off;                                           \
                        for (int64_t ox = 0; ox < lo; ox++) d[ox] = 0;                             \
                        for (int64_t ox = lo; ox < hi; ox++) d[ox] = sr[ox];                       \
                        for (int64_t ox = hi; ox < W; ox++) d[ox] = 0;                             \
                    }                                                                              \
                }                                                                                  \
                for (int64_t kh = 0; kh < q->KH; kh++)                                             \
                    for (int64_t kw = 0; kw < q->KW; kw++) {                                       \
                        const T *ts = t + kw * TR * W + kh * q->dy * W;                            \
                        T *d = col + ((c * q->KH + kh) * q->KW + kw) * ld;                         \
                        for (int64_t i = 0; i < OHW; i++) d[i] = ts[i];                            \
                    }                                                                              \
            }                                                                                      \
            return;                                                                                \
        }                                                                                          \
        if (q->sx == 1 && q->sy == 1 && q->OW == q->W) {                                           \
            /* unit strides, rows as wide as x's: a row of col is x's plane shifted by s columns   \
             * and some rows, one long copy, then the columns that wrapped zeroed */               \
            const int64_t W = q->W, OHW = q->OH * W;                                               \
            for (int64_t k = k0; k < k1; k++) {                                                    \
                const int64_t c = k / KK, kh = (k / q->KW) % q->KH, kw = k % q->KW;                \
                const int64_t sh = kw * q->dx - q->px, dr = kh * q->dy - q->py; /* iy = oy + dr */ \
                T *d = col + k * ld;                                                               \
                const int64_t oy0 = clampi(-dr, 0, q->OH);                                         \
                int64_t oy1 = clampi(q->H - dr, oy0, q->OH);                                       \
                if (sh >= W || sh <= -W) oy1 = oy0; /* every column out of x */                    \
                for (int64_t i = 0; i < oy0 * W; i++) d[i] = 0;                                    \
                for (int64_t i = oy1 * W; i < OHW; i++) d[i] = 0;                                  \
                if (oy1 == oy0) continue;                                                          \
                const T *sp = src + c * q->H * W + (oy0 + dr) * W + sh;                            \
                T *dp = d + oy0 * W;                                                               \
                const int64_t L = (oy1 - oy0) * W, j0 = sh < 0 ? -sh : 0, j1 = sh > 0 ? L - sh : L; \
                for (int64_t j = j0; j < j1; j++) dp[j] = sp[j];                                   \
                if (sh > 0)                                                                        \
                    for (int64_t r = 0; r < oy1 - oy0; r++)                                        \
                        for (int64_t ox = W - sh; ox < W; ox++) dp[r * W + ox] = 0;                \
                else if (sh < 0)                                                                   \
                    for (int64_t r = 0; r < oy1 - oy0; r++)                                        \
                        for (int64_t ox = 0; ox < -sh; ox++) dp[r * W + ox] = 0;                   \
            }                                                                                      \
            return;                                                                                \
        }                                                                                          \
        for (int64_t k = k0; k < k1; k++) {                                                        \
            const int64_t c = k / KK, kh = (k / q->KW) % q->KH, kw = k % q->KW;                    \
            const T *sc = src + c * q->H * q->W;                                                   \
            T *d = col + k * ld;                                                                   \
            const int64_t off = q->px - kw * q->dx; /* ix = ox*sx - off */                         \
            const int64_t lo = clampi(ceil_div(off, q->sx), 0, q->OW);                             \
            const int64_t hi = clampi(ceil_div(q->W + off, q->sx), lo, q->OW);                     \
            for (int64_t oy = 0; oy < q->OH; oy++, d += q->OW) {                                   \
                const int64_t iy = oy * q->sy - q->py + kh * q->dy;                                \
                if (iy < 0 || iy >= q->H) {                                                        \
                    memset(d, 0, (size_t)q->OW * sizeof(T));                                       \
                    continue;                                                                      \
                }                                                                                  \
                const T *s = sc + iy * q->W - off;                                                 \
                for (int64_t ox = 0; ox < lo; ox++) d[ox] = 0;                                     \
                if (q->sx == 1) /* short rows: a loop beats memcpy's call */                       \
                    for (int64_t ox = lo; ox < hi; ox++) d[ox] = s[ox];                            \
                else                                                                               \
                    for (int64_t ox = lo; ox < hi; ox++) d[ox] = s[ox * q->sx];                    \
                for (int64_t ox = hi; ox < q->OW; ox++) d[ox] = 0;                                 \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    /* The transposed conv's scatter for output planes [p0, p1) of one image and group: q is       \
     * the transposed conv's geometry seen from its forward conv (x = the transposed conv's        \
     * output, H x W; col rows (p*KH + kh)*KW + kw, ld apart, over the OH x OW input             \
     * positions). */                                                                              \
    static void col2im_##SUF(const T *col, int64_t ld, T *out, const T *bias, const geom *q,       \
                             int64_t p0, int64_t p1) {                                             \
        const int64_t KK = q->KH * q->KW, HW = q->H * q->W;                                        \
        for (int64_t p = p0; p < p1; p++) {                                                        \
            T *o = out + p * HW;                                                                   \
            const T b = bias ? bias[p] : (T)0;                                                     \
            for (int64_t i = 0; i < HW; i++) o[i] = b;                                             \
            for (int64_t kh = 0; kh < q->KH; kh++)                                                 \
                for (int64_t kw = 0; kw < q->KW; kw++) {                                           \
                    const T *cr = col + (p * KK + kh * q->KW + kw) * ld;                           \
                    const int64_t off = q->px - kw * q->dx;                                        \
                    const int64_t lo = clampi(ceil_div(off, q->sx), 0, q->OW);                     \
                    const int64_t hi = clampi(ceil_div(q->W + off, q->sx), lo, q->OW);             \
                    for (int64_t oy = 0; oy < q->OH; oy++) {                                       \
                        const int64_t iy = oy * q->sy - q->py + kh * q->dy;                        \
                        if (iy < 0 || iy >= q->H) continue;                                        \
                        T *orow = o + iy * q->W - off;                                             \
                        const T *c = cr + oy * q->OW;                                              \
                        if (q->sx == 1)                                                            \
                            for (int64_t ox = lo; ox < hi; ox++) orow[ox] += c[ox];                \
                        else                                                                       \
                            for (int64_t ox = lo; ox < hi; ox++) orow[ox * q->sx] += c[ox];        \
                    }                                                                              \
                }                                                                                  \
        }                                                                                          \
    }                                                                                              \
    /* Rows [r0, r0 + R) of the zero-padded planes of channels [0, Cg) of src (padded row r        \
     * is input row r - py) in the phase layout of p: R rows of p->WP per channel. */              \
    static void pad_rows_##SUF(const T *src, T *dst, const geom *q, int64_t r0, int64_t R,         \
                               const padded *p) {                                                  \
        const int64_t sx = q->sx, WPh = p->WPh;                                                    \
        for (int64_t c = 0; c < q->Cg; c++) {                                                      \
            const T *sc = src + c * q->H * q->W;                                                   \
            for (int64_t r = 0; r < R; r++) {                                                      \
                T *d = dst + (c * R + r) * p->WP;                                                  \
                const int64_t iy = r0 + r - q->py;                                                 \
                if (iy < 0 || iy >= q->H) {                                                        \
                    memset(d, 0, (size_t)p->WP * sizeof(T));                                       \
                    continue;                                                                      \
                }                                                                                  \
                const T *srow = sc + iy * q->W;                                                    \
                for (int64_t ph = 0; ph < sx; ph++, d += WPh) {                                    \
                    /* element m is input column m*sx + ph - px */                                 \
                    const int64_t lo = clampi(ceil_div(q->px - ph, sx), 0, WPh);                   \
                    const int64_t hi = clampi(ceil_div(q->W + q->px - ph, sx), lo, WPh);           \
                    for (int64_t m = 0; m < lo; m++) d[m] = 0;                                     \
                    if (sx == 1 && hi - lo < 64) { /* short rows: a loop beats memcpy's call */    \
                        const T *s1 = srow - q->px;                                                \
                        for (int64_t m = lo; m < hi; m++) d[m] = s1[m];                            \
                    } else if (sx == 1) {                                                          \
                        if (hi > lo)                                                               \
                            memcpy(d + lo, srow + lo - q->px, (size_t)(hi - lo) * sizeof(T));      \
                    } else if (sx == 2) { /* a constant stride: vectorized */                      \
                        const T *s2 = srow + ph - q->px;                                           \
                        for (int64_t m = lo; m < hi; m++) d[m] = s2[2 * m];                        \
                    } else {                                                                       \
                        for (int64_t m = lo; m < hi; m++) d[m] = srow[m * sx + ph - q->px];        \
                    }                                                                              \
                    for (int64_t m = hi; m < WPh; m++) d[m] = 0;                                   \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

TYPED_HELPERS(float, f32)
TYPED_HELPERS(double, f64)

/* ---- the direct kernels ---- */

/* The vector width and register tiles of this level (the same source at every level; the
 * avx2 copy tests the logic of the avx512 one): VB bytes a vector; conv2d tiles of up to OBMAX
 * output channels x NV vectors of output positions; weight-gradient tiles of WO output
 * channels x WT taps. AVX-512 has 32 vector registers, AVX2 and SSE2 16. */
#if CPU_ISA_LEVEL >= CPU_ISA_AVX512
#define VB 64
#define VLF 16 /* f32 lanes (literals: the lane sums name their tables by them) */
#define VLD 8  /* f64 lanes */
#define OBMAX 8
#define NV 2
#define WO 4
#define WT 4
#elif CPU_ISA_LEVEL >= CPU_ISA_AVX2
#define VB 32
#define VLF 8
#define VLD 4
#define OBMAX 4
#define NV 3
#define WO 4
#define WT 2
#else
#define VB 16
#define VLF 4
#define VLD 2
#define OBMAX 4
#define NV 3
#define WO 4
#define WT 2
#endif

typedef float vf __attribute__((vector_size(VB)));
typedef float vfu __attribute__((vector_size(VB), aligned(4), may_alias));
typedef double vd __attribute__((vector_size(VB)));
typedef double vdu __attribute__((vector_size(VB), aligned(8), may_alias));
typedef int32_t vfi __attribute__((vector_size(VB)));
typedef int64_t vdi __attribute__((vector_size(VB)));

/* Output channels per block for `rem` channels left. */
static inline int64_t block_of(int64_t rem) { return rem >= OBMAX ? OBMAX : rem; }

/* The output positions of a block of output rows, as slots of one vector each: slot s covers
 * VL consecutive columns of one output row, at offset xo[s] in the padded rows (tap (0, 0)
 * of channel 0) and oo[s] in an output plane; a row's last slot is shifted left to end at OW
 * when OW >= VL, else it is partial (pw[s] < VL columns stored, through a buffer). Slots run
 * across rows, so that narrow rows (8x8 planes) fill the tiles. */
typedef struct slots {
    int64_t n;
    int64_t *xo, *oo;
    int32_t *pw;
} slots;

/* Slots of output rows [a, b) (padded rows start at padded row a*sy, WP elements apart). */
static void slots_of(slots *s, const geom *q, int64_t WP, int64_t VL, int64_t a, int64_t b) {
    s->n = 0;
    for (int64_t oy = a; oy < b; oy++)
        for (int64_t ox = 0; ox < q->OW; ox += VL) {
            int64_t ox0 = ox, w = VL;
            if (ox0 + VL > q->OW) {
                if (q->OW >= VL) ox0 = q->OW - VL;
                else w = q->OW;
            }
            s->xo[s->n] = (oy - a) * q->sy * WP + ox0;
            s->oo[s->n] = oy * q->OW + ox0;
            s->pw[s->n] = (int32_t)w;
            s->n++;
        }
}

typedef struct direct_job {
    geom q;
    const void *x;      /* [N, C, H, W] contiguous */
    void *out;          /* [N, O, OH, OW] */
    const void *wpk;    /* packed weights: channels [o0, o0 + ob) as [K][ob] at (g*Og + o0)*K */
    const void *bias;   /* [O] or NULL */
    padded pl;          /* the layout of the padded rows */
    bool flat;          /* x in the flat layout (flat_rows), slots over flattened positions */
    int64_t elem;       /* sizeof(T) */
    atomic_bool failed; /* a task's scratch allocation failed */
} direct_job;

/* Where the kernels find tap (c, kh, kw) of a slot: c*plane + rowoff[kh] + tap[kw] past the
 * slot's offset xo in the scratch copy of x. */
typedef struct xlayout {
    int64_t plane;
    int64_t rowoff[MAX_KW];
    int64_t tap[MAX_KW];
} xlayout;

/* The tiles of one block of OB output channels over the slots: NV slots a tile (the last tile
 * repeats its last slot, stored once). xp: the padded rows of channel 0; o: the block's first
 * output plane (planes OHW apart); wb: the block's packed weights [K][OB]; b: its bias or
 * NULL. */
#define DIRECT_BLOCK(T, V, VU, VL, LOADV, BCAST, OB, KW)                                           \
    for (int64_t s0 = 0; s0 < sl->n; s0 += NV) {                                                   \
        const T *xr[NV];                                                                           \
        UNROLL for (int v = 0; v < NV; v++)                                                        \
            xr[v] = xp + sl->xo[s0 + v < sl->n ? s0 + v : sl->n - 1];                              \
        V acc[OB][NV];                                                                             \
        UNROLL for (int ob = 0; ob < OB; ob++)                                                     \
            UNROLL for (int v = 0; v < NV; v++) acc[ob][v] = (V){0} + (b ? b[ob] : (T)0);          \
        const T *wk = wb;                                                                          \
        for (int64_t c = 0; c < Cg; c++)                                                           \
            for (int64_t kh = 0; kh < KH; kh++) {                                                  \
                const int64_t off = c * plane + rowoff[kh];                                        \
                for (int64_t kw = 0; kw < KW; kw++, wk += OB) {                                    \
                    const int64_t ok = off + tap[kw];                                              \
                    V xv[NV];                                                                      \
                    UNROLL for (int v = 0; v < NV; v++) LOADV(xv[v], xr[v] + ok);                  \
                    UNROLL for (int ob = 0; ob < OB; ob++) {                                       \
                        V wv;                                                                      \
                        BCAST(wv, wk + ob);                                                        \
                        UNROLL for (int v = 0; v < NV; v++) acc[ob][v] += wv * xv[v];              \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
        UNROLL for (int v = 0; v < NV; v++) {                                                      \
            if (s0 + v >= sl->n) break;                                                            \
            T *os = o + sl->oo[s0 + v];                                                            \
            const int pw = sl->pw[s0 + v];                                                         \
            if (pw == VL) {                                                                        \
                UNROLL for (int ob = 0; ob < OB; ob++) *(VU *)(os + ob * OHW) = acc[ob][v];        \
            } else {                                                                               \
                /* through a buffer, by an inline loop (the cpu sources are built with             \
                   -fno-tree-loop-distribute-patterns: a memcpy call per row cost more) */         \
                UNROLL for (int ob = 0; ob < OB; ob++) {                                           \
                    T tmp[VL];                                                                     \
                    *(VU *)tmp = acc[ob][v];                                                       \
                    for (int e_ = 0; e_ < pw; e_++) os[ob * OHW + e_] = tmp[e_];                   \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

/* One kernel a block size OB (1 .. OBMAX) and dtype. */
#define BLOCK_FN(T, V, VU, VL, SUF, LOADV, BCAST, OB)                                              \
    static void dblock_##SUF##_##OB(const T *xp, const slots *sl, const T *wb, const T *b, T *o,   \
                                    int64_t OHW, int64_t Cg, int64_t KH, int64_t KW,               \
                                    int64_t plane, const int64_t *rowoff, const int64_t *tap) {    \
        if (KW == 3) /* 3x3 kernels: the taps of a row unrolled */                                 \
            DIRECT_BLOCK(T, V, VU, VL, LOADV, BCAST, OB, 3)                                        \
        else                                                                                       \
            DIRECT_BLOCK(T, V, VU, VL, LOADV, BCAST, OB, KW)                                       \
    }

#ifdef CONV_GCC_SHUFFLE
/* Shuffle masks of the avx512 copy's lane-sum tree (level lv: lanes per accumulator VL >> lv,
 * halved). */
_Alignas(64) static const int32_t shuf_lo_16[4][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
    {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27},
    {0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29},
    {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30}};
_Alignas(64) static const int32_t shuf_hi_16[4][16] = {
    {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31},
    {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31},
    {2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31},
    {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31}};
_Alignas(64) static const int64_t shuf_lo_8[3][8] = {
    {0, 1, 2, 3, 8, 9, 10, 11}, {0, 1, 4, 5, 8, 9, 12, 13}, {0, 2, 4, 6, 8, 10, 12, 14}};
_Alignas(64) static const int64_t shuf_hi_8[3][8] = {
    {4, 5, 6, 7, 12, 13, 14, 15}, {2, 3, 6, 7, 10, 11, 14, 15}, {1, 3, 5, 7, 9, 11, 13, 15}};
#endif

/* The kernels of one dtype and level:
 *   direct_rows: output rows [a, b) of image n, group g; xp holds the padded rows a*sy .. of
 *     the group's channels (R rows each, WP columns), sl their slots. Blocks of OBMAX
 *     channels (the rest in one smaller block), NV slots a tile.
 *   wgrad_block: dst[i*K + k] += sum over (oy, ox) of gp[i][oy][ox] * x(tap k at oy, ox) for
 *     the ob <= WO channels of gp ([WO][OH][OWp], zero past OW and past ob); xp holds all
 *     padded rows of the group's channels (plane elements apart). */
#define KERNELS(T, V, VU, VI, VL, SUF, LOADV, BCAST)                                               \
    CONV_FMA_BEGIN                                                                                 \
    /* Lane sums of the WO*WT vectors red[]: red[i / VL][i % VL] ends up holding the sum of        \
     * vector i (by a shuffle tree in the avx512 copy). */                                         \
    __attribute__((noinline)) static void lanesum_##SUF(V *red) { LANESUM(T, V, VI, VL); }        \
    BLOCK_FN(T, V, VU, VL, SUF, LOADV, BCAST, 1)                                                   \
    BLOCK_FN(T, V, VU, VL, SUF, LOADV, BCAST, 2)                                                   \
    BLOCK_FN(T, V, VU, VL, SUF, LOADV, BCAST, 3)                                                   \
    BLOCK_FN(T, V, VU, VL, SUF, LOADV, BCAST, 4)                                                   \
    BLOCK_FNS_WIDE(T, V, VU, VL, SUF, LOADV, BCAST)                                                \
    static void direct_rows_##SUF(const direct_job *j, const void *xpv, const slots *sl,          \
                                  const xlayout *L, int64_t n, int64_t g) {                        \
        const geom *q = &j->q;                                                                     \
        const T *xp = xpv;                                                                         \
        const int64_t Cg = q->Cg, KH = q->KH, KW = q->KW;                                          \
        const int64_t OHW = q->OH * q->OW, K = Cg * KH * KW;                                       \
        const int64_t plane = L->plane, *rowoff = L->rowoff, *tap = L->tap;                        \
        const T *wg = (const T *)j->wpk + g * q->Og * K;                                           \
        const T *bg = j->bias ? (const T *)j->bias + g * q->Og : NULL;                             \
        T *og = (T *)j->out + (n * q->O + g * q->Og) * OHW;                                        \
        /* chunks of slots, every channel block over a chunk: its rows of x stay in L1 */          \
        for (int64_t c0 = 0; c0 < sl->n; c0 += SLOT_CHUNK) {                                       \
            const slots part = {.n = sl->n - c0 < SLOT_CHUNK ? sl->n - c0 : SLOT_CHUNK,            \
                                .xo = sl->xo + c0, .oo = sl->oo + c0, .pw = sl->pw + c0};          \
            for (int64_t o0 = 0; o0 < q->Og;) {                                                    \
                const int64_t nb = block_of(q->Og - o0);                                           \
                const T *wb = wg + o0 * K, *b = bg ? bg + o0 : NULL;                               \
                T *o = og + o0 * OHW;                                                              \
                switch (nb) {                                                                      \
                    DB_CASE(SUF, 1)                                                                \
                    DB_CASE(SUF, 2)                                                                \
                    DB_CASE(SUF, 3)                                                                \
                    BLOCK_CASES_WIDE(SUF)                                                          \
                default: DB_CALL(SUF, OBMAX_TOKEN); break;                                         \
                }                                                                                  \
                o0 += nb;                                                                          \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void wgrad_block_##SUF(const geom *q, const void *xpv, int64_t plane,                   \
                                  const padded *pl, const int64_t *koff, const void *gpv,          \
                                  int64_t OWp, void *vaccv) {                                      \
        const int64_t WP = pl->WP;                                                                 \
        const T *xp = xpv, *gp = gpv;                                                              \
        T *vacc = vaccv;                                                                           \
        const int64_t K = q->Cg * q->KH * q->KW, GS = q->OH * OWp;                                 \
        (void)plane;                                                                               \
        for (int64_t k0 = 0; k0 < K; k0 += WT, vacc += WO * WT * VL) {                             \
            int64_t xoff[WT];                                                                      \
            UNROLL for (int t = 0; t < WT; t++) xoff[t] = koff[k0 + t < K ? k0 + t : K - 1];       \
            V acc[WO][WT];                                                                         \
            UNROLL for (int i = 0; i < WO; i++)                                                    \
                UNROLL for (int t = 0; t < WT; t++) acc[i][t] = *(VU *)(vacc + (i * WT + t) * VL); \
            for (int64_t oy = 0; oy < q->OH; oy++) {                                               \
                const T *xr = xp + oy * q->sy * WP, *gr = gp + oy * OWp;                           \
                for (int64_t ox = 0; ox < OWp; ox += VL) {                                         \
                    V gv[WO], xv[WT];                                                              \
                    UNROLL for (int i = 0; i < WO; i++) LOADV(gv[i], gr + i * GS + ox);            \
                    UNROLL for (int t = 0; t < WT; t++) LOADV(xv[t], xr + xoff[t] + ox);           \
                    UNROLL for (int i = 0; i < WO; i++)                                            \
                        UNROLL for (int t = 0; t < WT; t++) acc[i][t] += gv[i] * xv[t];            \
                }                                                                                  \
            }                                                                                      \
            UNROLL for (int i = 0; i < WO; i++)                                                    \
                UNROLL for (int t = 0; t < WT; t++) *(VU *)(vacc + (i * WT + t) * VL) = acc[i][t]; \
        }                                                                                          \
    }                                                                                              \
    /* dst[i*K + k] += the lane sums of vacc (wgrad_block's accumulators) for ob channels */       \
    static void wgrad_finish_##SUF(int64_t K, const void *vaccv, int64_t ob, double *dst) {        \
        const T *vacc = vaccv;                                                                     \
        for (int64_t k0 = 0; k0 < K; k0 += WT, vacc += WO * WT * VL) {                             \
            V red[WO * WT];                                                                        \
            UNROLL for (int i = 0; i < WO * WT; i++) red[i] = *(const VU *)(vacc + i * VL);        \
            lanesum_##SUF(red);                                                                    \
            for (int64_t i = 0; i < ob; i++)                                                       \
                for (int t = 0; t < WT && k0 + t < K; t++)                                         \
                    dst[i * K + k0 + t] += (double)red[(i * WT + t) / VL][(i * WT + t) % VL];      \
        }                                                                                          \
    }                                                                                              \
    CONV_FMA_END

/* a call of the kernel of OB channels (in direct_rows) */
#define DB_CALL2(SUF, OB)                                                                          \
    dblock_##SUF##_##OB(xp, &part, wb, b, o, OHW, Cg, KH, KW, plane, rowoff, tap)
#define DB_CALL(SUF, OB) DB_CALL2(SUF, OB)
#define DB_CASE(SUF, OB)                                                                           \
    case OB: DB_CALL(SUF, OB); break;
/* slots a chunk */
#define SLOT_CHUNK (4 * NV)
#if OBMAX > 4
#define OBMAX_TOKEN 8
#define BLOCK_FNS_WIDE(T, V, VU, VL, SUF, LOADV, BCAST)                                            \
    BLOCK_FN(T, V, VU, VL, SUF, LOADV, BCAST, 5)                                                   \
    BLOCK_FN(T, V, VU, VL, SUF, LOADV, BCAST, 6)                                                   \
    BLOCK_FN(T, V, VU, VL, SUF, LOADV, BCAST, 7)                                                   \
    BLOCK_FN(T, V, VU, VL, SUF, LOADV, BCAST, 8)
#define BLOCK_CASES_WIDE(SUF) DB_CASE(SUF, 4) DB_CASE(SUF, 5) DB_CASE(SUF, 6) DB_CASE(SUF, 7)
#else
#define OBMAX_TOKEN 4
#define BLOCK_FNS_WIDE(T, V, VU, VL, SUF, LOADV, BCAST)
#define BLOCK_CASES_WIDE(SUF)
#endif

/* Vector loads (unaligned) and broadcasts: plain C for the portable and AVX2 copies; for
 * AVX-512 pinned to registers, so that each loaded vector and broadcast weight is read once
 * per tap rather than folded into every FMA that uses it (which makes the loop load-bound). */
#ifndef CONV_512
#define LD_F32(d, p) ((d) = *(const vfu *)(p))
#define LD_F64(d, p) ((d) = *(const vdu *)(p))
/* x - 0 is x for every x (x + 0 is not, for -0), so this is a plain broadcast from memory */
#define BC_F32(d, p) ((d) = *(p) - (vf){0})
#define BC_F64(d, p) ((d) = *(p) - (vd){0})
#else
#define LD_F32(d, p)                                                                               \
    do {                                                                                           \
        (d) = *(const vfu *)(p);                                                                   \
        __asm__("" : "+v"(d));                                                                     \
    } while (0)
#define LD_F64(d, p)                                                                               \
    do {                                                                                           \
        (d) = *(const vdu *)(p);                                                                   \
        __asm__("" : "+v"(d));                                                                     \
    } while (0)
#define BC_F32(d, p) __asm__("vbroadcastss %1, %0" : "=v"(d) : "m"(*(p)))
#define BC_F64(d, p) __asm__("vbroadcastsd %1, %0" : "=v"(d) : "m"(*(p)))
#endif

KERNELS(float, vf, vfu, vfi, VLF, f32, LD_F32, BC_F32)
KERNELS(double, vd, vdu, vdi, VLD, f64, LD_F64, BC_F64)

/* The flat layout of x for output rows whose slots would leave lanes idle, made from the
 * padded rows P (pad_rows: R rows of WP a channel, zero borders): for each channel c, tap
 * column kw and row phase ph, Rph rows of exactly OW elements, row i being padded row
 * i*sy + ph from element tap[kw] on, then VL elements of slack (S elements in all). Output
 * position p = oy*OW + ox of the block reads tap (kh, kw) at p + ((kh*dy)/sy)*OW in the rows
 * of phase (kh*dy) % sy: consecutive positions across rows are consecutive elements, so 8x8
 * planes fill 16-lane vectors. Rows are copied a whole vector at a time: a row narrower than
 * a vector spills into the next one, which is written after it, or into the slack; a wider
 * one ends with a vector shifted left. */
#define FLAT_FROM_PADDED(T, VU, VL, SUF)                                                           \
    static void flat_rows_##SUF(const T *P, int64_t R, const padded *pl, const geom *q,          \
                                int64_t Rph, int64_t S, T *dst) {                                  \
        const int64_t OW = q->OW, sy = q->sy, WP = pl->WP;                                         \
        for (int64_t c = 0; c < q->Cg; c++)                                                        \
            for (int64_t kw = 0; kw < q->KW; kw++)                                                 \
                for (int64_t ph = 0; ph < sy; ph++) {                                              \
                    T *d = dst + ((c * q->KW + kw) * sy + ph) * S;                                 \
                    *(VU *)(d + Rph * OW) = (VU){0};                                               \
                    const T *src = P + c * R * WP + ph * WP + pl->tap[kw];                         \
                    for (int64_t i = 0; i < Rph; i++, d += OW, src += sy * WP) {                   \
                        if (i * sy + ph >= R) { /* a row no output of the block reads */          \
                            *(VU *)d = (VU){0};                                                    \
                            continue;                                                              \
                        }                                                                          \
                        if (OW <= VL) {                                                            \
                            *(VU *)d = *(const VU *)src;                                           \
                            continue;                                                              \
                        }                                                                          \
                        int64_t ox = 0;                                                            \
                        for (; ox + VL <= OW; ox += VL) *(VU *)(d + ox) = *(const VU *)(src + ox); \
                        if (ox < OW)                                                               \
                            *(VU *)(d + OW - VL) = *(const VU *)(src + OW - VL);                   \
                    }                                                                              \
                }                                                                                  \
    }
FLAT_FROM_PADDED(float, vfu, VLF, f32)
FLAT_FROM_PADDED(double, vdu, VLD, f64)

/* pad_rows for stride-2 columns, whose two phases are x's even and odd padded columns: padded
 * column j = s + px of source column s is element j >> 1 of phase j & 1, so each pair of
 * vectors of a row (2*VL source columns from an even one) splits by two shuffles into VL
 * consecutive elements of each phase (the scalar split, one element a cycle, cost a ResNet's
 * stride-2 convs a third of their time; splitting a zero-padded copy of the row instead cost
 * a copy more). The rest of a row, and pairs that would reach past a phase, go one by one. */
#if defined(__GNUC__) && !defined(__clang__)
/* d[me, me + VL) = the even elements of sr[s0, s0 + 2*VL), d[mo, mo + VL) the odd ones */
#define SPLIT2(T, V, VU, VL)                                                                       \
    do {                                                                                           \
        const V a = *(const VU *)(sr + s0), b = *(const VU *)(sr + s0 + VL);                       \
        *(VU *)(d + me) = __builtin_shuffle(a, b, ev);                                             \
        *(VU *)(d + mo) = __builtin_shuffle(a, b, od);                                             \
    } while (0)
#else /* clang: its shuffle builtin takes the lanes as constants; it vectorizes the loop */
#define SPLIT2(T, V, VU, VL)                                                                       \
    do {                                                                                           \
        (void)ev, (void)od;                                                                        \
        for (int i = 0; i < VL; i++) {                                                             \
            d[me + i] = sr[s0 + 2 * i];                                                            \
            d[mo + i] = sr[s0 + 2 * i + 1];                                                        \
        }                                                                                          \
    } while (0)
#endif
#define PAD_ROWS_S2(T, V, VU, VI, VL, SUF)                                                         \
    static void pad_rows_s2_##SUF(const T *src, T *dst, const geom *q, int64_t r0, int64_t R,    \
                                  const padded *p) {                                               \
        const int64_t WPh = p->WPh, WP = p->WP, W = q->W, px = q->px;                             \
        VI ev, od;                                                                                 \
        for (int i = 0; i < VL; i++) {                                                             \
            ev[i] = 2 * i;                                                                         \
            od[i] = 2 * i + 1;                                                                     \
        }                                                                                          \
        /* pairs of vectors from source column 0 while they stay inside the phases (the same  \
           for every row), then the rest: phase ph's elements [lo[ph], hi[ph]) are source     \
           columns 2*m + ph - px past them */                                                     \
        int64_t sv = 0;                                                                            \
        while (sv + 2 * VL <= W && sv + px >= 0 && sv + px + 2 * VL <= 2 * WPh) sv += 2 * VL;      \
        int64_t lo[2], hi[2];                                                                      \
        for (int ph = 0; ph < 2; ph++) {                                                           \
            lo[ph] = clampi(ceil_div(sv + px - ph, 2), 0, WPh);                                    \
            hi[ph] = clampi(ceil_div(W + px - ph, 2), lo[ph], WPh);                                \
        }                                                                                          \
        for (int64_t c = 0; c < q->Cg; c++) {                                                      \
            const T *sc = src + c * q->H * W;                                                      \
            for (int64_t r = 0; r < R; r++) {                                                      \
                T *d = dst + (c * R + r) * WP;                                                     \
                int64_t m = 0;                                                                     \
                for (; m + VL <= WP; m += VL) *(VU *)(d + m) = (VU){0};                            \
                for (; m < WP; m++) d[m] = 0;                                                      \
                const int64_t iy = r0 + r - q->py;                                                 \
                if (iy < 0 || iy >= q->H) continue;                                                \
                const T *sr = sc + iy * W;                                                         \
                for (int64_t s0 = 0; s0 < sv; s0 += 2 * VL) {                                      \
                    const int64_t j0 = s0 + px;                                                    \
                    const int64_t me = (j0 & 1) * WPh + (j0 >> 1);                                 \
                    const int64_t mo = ((j0 + 1) & 1) * WPh + ((j0 + 1) >> 1);                     \
                    SPLIT2(T, V, VU, VL);                                                          \
                }                                                                                  \
                for (m = lo[0]; m < hi[0]; m++) d[m] = sr[2 * m - px];                             \
                for (m = lo[1]; m < hi[1]; m++) d[WPh + m] = sr[2 * m + 1 - px];                   \
            }                                                                                      \
        }                                                                                          \
    }
PAD_ROWS_S2(float, vf, vfu, vfi, VLF, f32)
PAD_ROWS_S2(double, vd, vdu, vdi, VLD, f64)

/* pad_rows for unit-stride columns, the bounds hoisted out of the rows: a row of a vector or
 * more copied a whole vector at a time (the last one shifted left to end at the row's end;
 * the compiler's loop for 32-element rows cost a ResNet's 3x3 convs a sixth of their time),
 * a narrower one 4 elements at a time (the generic pad_rows' per-row bounds cost a 64-channel
 * 8x8 conv a sixth of its time); the borders zeroed. Padded columns [lo, hi) of each in-range
 * row come from x. */
#define PAD_ROWS_S1(T, VU, VL, SUF)                                                                \
    static void pad_rows_s1_##SUF(const T *src, T *dst, const geom *q, int64_t r0, int64_t R,    \
                                  const padded *p) {                                               \
        typedef T v4 __attribute__((vector_size(4 * sizeof(T)), aligned(sizeof(T)), may_alias));  \
        const int64_t WP = p->WP, W = q->W, px = q->px;                                            \
        const int64_t lo = clampi(px, 0, WP), hi = clampi(W + px, lo, WP);                         \
        const bool wide = hi - lo >= VL;                                                           \
        for (int64_t c = 0; c < q->Cg; c++) {                                                      \
            const T *sc = src + c * q->H * W;                                                      \
            for (int64_t r = 0; r < R; r++) {                                                      \
                T *d = dst + (c * R + r) * WP;                                                     \
                const int64_t iy = r0 + r - q->py;                                                 \
                if (iy < 0 || iy >= q->H) {                                                        \
                    int64_t m = 0;                                                                 \
                    for (; m + VL <= WP; m += VL) *(VU *)(d + m) = (VU){0};                        \
                    for (; m < WP; m++) d[m] = 0;                                                  \
                    continue;                                                                      \
                }                                                                                  \
                const T *sr = sc + iy * W - px; /* padded column m is sr[m] */                     \
                for (int64_t m = 0; m < lo; m++) d[m] = 0;                                         \
                int64_t m = lo;                                                                    \
                if (wide) {                                                                        \
                    for (; m + VL <= hi; m += VL) *(VU *)(d + m) = *(const VU *)(sr + m);          \
                    if (m < hi) *(VU *)(d + hi - VL) = *(const VU *)(sr + hi - VL);                \
                } else {                                                                           \
                    for (; m + 4 <= hi; m += 4) *(v4 *)(d + m) = *(const v4 *)(sr + m);           \
                    for (; m < hi; m++) d[m] = sr[m];                                              \
                }                                                                                  \
                for (m = hi; m < WP; m++) d[m] = 0;                                                \
            }                                                                                      \
        }                                                                                          \
    }
PAD_ROWS_S1(float, vfu, VLF, f32)
PAD_ROWS_S1(double, vdu, VLD, f64)

/* im2col of whole channels of a strided conv (not 1x1): the channels' padded rows (pad_rows,
 * stride-2 columns split by shuffles), their flat layout (flat_rows: per tap column and row
 * phase, rows of exactly OW), then each row of col, tap (c, kh, kw), is one contiguous run of
 * OH*OW elements of it. The per-row strided gathers this replaces were half of a ResNet's
 * stride-2 weight gradients. false: no scratch (the caller takes the row-by-row path). */
#define IM2COL_FLAT(T, VL, SUF)                                                                    \
    static bool im2col_flat_##SUF(const T *src, T *col, int64_t ld, const geom *qg, int64_t c0,   \
                                  int64_t c1) {                                                    \
        geom q = *qg;                                                                              \
        q.Cg = c1 - c0;                                                                            \
        const padded pl = padded_layout(&q, q.OW);                                                 \
        const int64_t R = (q.OH - 1) * q.sy + (q.KH - 1) * q.dy + 1;                               \
        const int64_t Rph = (R + q.sy - 1) / q.sy, S = Rph * q.OW + VL, OHW = q.OH * q.OW;         \
        const int64_t np = q.Cg * R * pl.WP + VL, nf = q.Cg * q.KW * q.sy * S;                     \
        T *pad = cpu_scratch((size_t)(np + nf) * sizeof(T));                                       \
        if (!pad) return false;                                                                    \
        T *flat = pad + np;                                                                        \
        const T *s0 = src + c0 * q.H * q.W;                                                        \
        (q.sx == 2 ? pad_rows_s2_##SUF : pad_rows_##SUF)(s0, pad, &q, 0, R, &pl);                  \
        flat_rows_##SUF(pad, R, &pl, &q, Rph, S, flat);                                            \
        for (int64_t c = 0; c < q.Cg; c++)                                                         \
            for (int64_t kh = 0; kh < q.KH; kh++)                                                  \
                for (int64_t kw = 0; kw < q.KW; kw++) {                                            \
                    const T *f = flat + ((c * q.KW + kw) * q.sy + (kh * q.dy) % q.sy) * S +        \
                                 (kh * q.dy) / q.sy * q.OW;                                        \
                    T *d = col + (((c0 + c) * q.KH + kh) * q.KW + kw) * ld;                        \
                    for (int64_t i = 0; i < OHW; i++) d[i] = f[i];                                 \
                }                                                                                  \
        cpu_scratch_free(pad);                                                                     \
        return true;                                                                               \
    }
IM2COL_FLAT(float, VLF, f32)
IM2COL_FLAT(double, VLD, f64)

/* col2im of a strided transposed conv (q as in col2im: x its output, H x W) for output planes
 * [p0, p1): each plane's sums gather in padded rows in the phase layout of padded_layout (so
 * that the OW inputs of one col row at one tap land on OW consecutive elements: contiguous
 * adds, not strided ones), then each output row is read out of them phase by phase, with the
 * bias. The strided scatter-adds this replaces were half of a ResNet's stride-2 input
 * gradients. false: no scratch (the caller takes col2im). */
#define COL2IM_FLAT(T, SUF)                                                                        \
    static bool col2im_flat_##SUF(const T *col, int64_t ld, T *out, const T *bias,              \
                                  const geom *q, int64_t p0, int64_t p1) {                         \
        const padded pl = padded_layout(q, q->OW);                                                 \
        const int64_t R = (q->OH - 1) * q->sy + (q->KH - 1) * q->dy + 1, WP = pl.WP;               \
        const int64_t WPh = pl.WPh, sx = q->sx, OW = q->OW, KK = q->KH * q->KW;                    \
        T *P = cpu_scratch((size_t)(R * WP + WP) * sizeof(T));                                     \
        if (!P) return false;                                                                      \
        T *row = P + R * WP; /* a padded row in column order */                                    \
        for (int64_t p = p0; p < p1; p++) {                                                        \
            for (int64_t i = 0; i < R * WP; i++) P[i] = 0;                                         \
            for (int64_t kh = 0; kh < q->KH; kh++)                                                 \
                for (int64_t kw = 0; kw < q->KW; kw++) {                                           \
                    const T *cr = col + (p * KK + kh * q->KW + kw) * ld;                           \
                    T *pr = P + kh * q->dy * WP + pl.tap[kw];                                      \
                    for (int64_t oy = 0; oy < q->OH; oy++, cr += OW, pr += q->sy * WP)             \
                        for (int64_t ox = 0; ox < OW; ox++) pr[ox] += cr[ox];                      \
                }                                                                                  \
            T *o = out + p * q->H * q->W;                                                          \
            const T b = bias ? bias[p] : (T)0;                                                     \
            /* output columns [0, ixe) have a padded column (ix + px < WP) */                    \
            const int64_t ixe = clampi(WP - q->px, 0, q->W);                                       \
            for (int64_t iy = 0; iy < q->H; iy++, o += q->W) {                                     \
                const int64_t r = iy + q->py;                                                      \
                if (r < 0 || r >= R) { /* rows no tap reaches */                                   \
                    for (int64_t ix = 0; ix < q->W; ix++) o[ix] = b;                               \
                    continue;                                                                      \
                }                                                                                  \
                /* element m of phase ph is padded column m*sx + ph */                             \
                const T *pp = P + r * WP;                                                          \
                if (sx == 2)                                                                       \
                    for (int64_t m = 0; m < WPh; m++) {                                            \
                        row[2 * m] = pp[m];                                                        \
                        row[2 * m + 1] = pp[WPh + m];                                              \
                    }                                                                              \
                else                                                                               \
                    for (int64_t ph = 0; ph < sx; ph++)                                            \
                        for (int64_t m = 0; m < WPh; m++) row[m * sx + ph] = pp[ph * WPh + m];     \
                const T *rp = row + q->px;                                                         \
                for (int64_t ix = 0; ix < ixe; ix++) o[ix] = b + rp[ix];                           \
                for (int64_t ix = ixe; ix < q->W; ix++) o[ix] = b;                                 \
            }                                                                                      \
        }                                                                                          \
        cpu_scratch_free(P);                                                                       \
        return true;                                                                               \
    }
COL2IM_FLAT(float, f32)
COL2IM_FLAT(double, f64)

typedef void (*rows_fn)(const direct_job *j, const void *xp, const slots *sl,
                        const xlayout *L, int64_t n, int64_t g);
typedef void (*wgrad_fn)(const geom *q, const void *xp, int64_t plane, const padded *pl,
                         const int64_t *koff, const void *gp, int64_t OWp, void *vacc);
typedef void (*wfinish_fn)(int64_t K, const void *vacc, int64_t ob, double *dst);

static rows_fn rows_kernel(em_dtype dt) {
    return dt == EM_F32 ? direct_rows_f32 : direct_rows_f64;
}

static wgrad_fn wgrad_kernel(em_dtype dt) {
    return dt == EM_F32 ? wgrad_block_f32 : wgrad_block_f64;
}

static wfinish_fn wgrad_finisher(em_dtype dt) {
    return dt == EM_F32 ? wgrad_finish_f32 : wgrad_finish_f64;
}

/* EMBER_CPU_CONV=direct|gemm forces a method where both apply (benchmarks, tests);
 * direct-rows and direct-flat force the direct kernels with one padded layout of x (the row
 * layout, or the flat one that direct picks for rows that would leave lanes idle), and
 * direct-padded the padded copy with the layout the shape rule picks (no masked kernels:
 * what auto ran before them, for benchmarks); unset or auto: the shape rules (use_direct,
 * masked_applies). Read once. */
enum { CONV_AUTO, CONV_DIRECT, CONV_GEMM, CONV_DIRECT_ROWS, CONV_DIRECT_FLAT, CONV_DIRECT_PADDED };
static int conv_mode(void) {
    static _Atomic int mode = -1;
    int m = atomic_load_explicit(&mode, memory_order_relaxed);
    if (m < 0) {
        const char *e = getenv("EMBER_CPU_CONV");
        m = !e                               ? CONV_AUTO
            : strcmp(e, "direct") == 0      ? CONV_DIRECT
            : strcmp(e, "gemm") == 0        ? CONV_GEMM
            : strcmp(e, "direct-rows") == 0 ? CONV_DIRECT_ROWS
            : strcmp(e, "direct-flat") == 0 ? CONV_DIRECT_FLAT
            : strcmp(e, "direct-padded") == 0 ? CONV_DIRECT_PADDED
                                            : CONV_AUTO;
        atomic_store_explicit(&mode, m, memory_order_relaxed);
    }
    return m;
}
/* the direct kernels forced, in either layout */
static bool conv_forced_direct(void) {
    const int m = conv_mode();
    return m == CONV_DIRECT || m == CONV_DIRECT_ROWS || m == CONV_DIRECT_FLAT ||
           m == CONV_DIRECT_PADDED;
}

/* Padded scratch per task is kept near this size (rows are padded in blocks). */
#define PAD_BUDGET (512 * 1024)

/* Slots of the flat layout: output rows [a, b) as (b - a)*OW consecutive positions, VL a
 * slot (the last one partial), at the same offsets in the flat rows and past row a's first
 * output. */
static void flat_slots_of(slots *s, const geom *q, int64_t VL, int64_t a, int64_t b) {
    const int64_t P = (b - a) * q->OW;
    s->n = 0;
    for (int64_t p = 0; p < P; p += VL, s->n++) {
        s->xo[s->n] = p;
        s->oo[s->n] = a * q->OW + p;
        s->pw[s->n] = (int32_t)(P - p < VL ? P - p : VL);
    }
}

/* Work units: (n, g, oy) flattened. Each range pads the rows it needs, a block of output
 * rows at a time, and runs every channel block over them. */
static void direct_range(int64_t lo, int64_t hi, void *arg) {
    direct_job *j = arg;
    const geom *q = &j->q;
    const rows_fn rows = rows_kernel(j->elem == 4 ? EM_F32 : EM_F64);
    const int64_t VL = VB / j->elem;
    const int64_t span = (q->KH - 1) * q->dy + 1; /* padded rows one output row reads */
    /* bytes a padded row takes: WP elements a channel, and KW rows of OW in the flat layout */
    const int64_t row_bytes = q->Cg * (j->pl.WP + (j->flat ? q->KW * q->OW : 0)) * j->elem;
    int64_t rb = (PAD_BUDGET / row_bytes - span) / q->sy + 1; /* output rows per block */
    if (rb < 1) rb = 1;
    if (rb > hi - lo) rb = hi - lo;
    if (rb > q->OH) rb = q->OH;
    const int64_t Rmax = (rb - 1) * q->sy + span;
    const int64_t nslots = rb * ((q->OW + VL - 1) / VL);
    /* the flat layout's rows a phase (the most a block needs) and elements per (c, kw, ph) */
    const int64_t Rph = (Rmax + q->sy - 1) / q->sy, S = Rph * q->OW + VL;
    xlayout L;
    if (j->flat) {
        L.plane = q->KW * q->sy * S;
        for (int64_t k = 0; k < q->KH; k++)
            L.rowoff[k] = ((k * q->dy) % q->sy) * S + ((k * q->dy) / q->sy) * q->OW;
        for (int64_t k = 0; k < q->KW; k++) L.tap[k] = k * q->sy * S;
    } else {
        for (int64_t k = 0; k < q->KH; k++) L.rowoff[k] = k * q->dy * j->pl.WP;
        memcpy(L.tap, j->pl.tap, sizeof L.tap);
    }
    /* the padded rows, then (flat) the flat rows made from them */
    const size_t pad_bytes = (size_t)((Rmax * q->Cg * j->pl.WP + (j->flat ? VL : 0)) * j->elem);
    char *pad = cpu_scratch(pad_bytes + (j->flat ? (size_t)(q->Cg * L.plane * j->elem) : 0));
    void *xp = j->flat && pad ? pad + pad_bytes : pad;
    int64_t *sbuf = cpu_scratch((size_t)nslots * (2 * sizeof(int64_t) + sizeof(int32_t)));
    if (!pad || !sbuf) {
        atomic_store_explicit(&j->failed, true, memory_order_relaxed);
        if (pad) cpu_scratch_free(pad);
        if (sbuf) cpu_scratch_free(sbuf);
        return;
    }
    slots sl = {.xo = sbuf, .oo = sbuf + nslots, .pw = (int32_t *)(void *)(sbuf + 2 * nslots)};
    int64_t sa = -1, sb = -1; /* the rows sl holds */
    for (int64_t u = lo; u < hi;) {
        const int64_t ng = u / q->OH, a = u % q->OH;
        int64_t b = a + (hi - u) < q->OH ? a + (hi - u) : q->OH;
        if (b - a > rb) b = a + rb;
        const int64_t n = ng / q->G, g = ng % q->G;
        const int64_t R = (b - 1 - a) * q->sy + span;
        const size_t src_off = (size_t)((n * q->C + g * q->Cg) * q->H * q->W);
        if (j->elem == 4)
            (q->sx == 2   ? pad_rows_s2_f32
             : q->sx == 1 ? pad_rows_s1_f32
                          : pad_rows_f32)((const float *)j->x + src_off, (float *)(void *)pad, q,
                                          a * q->sy, R, &j->pl);
        else
            (q->sx == 2   ? pad_rows_s2_f64
             : q->sx == 1 ? pad_rows_s1_f64
                          : pad_rows_f64)((const double *)j->x + src_off, (double *)(void *)pad,
                                          q, a * q->sy, R, &j->pl);
        if (j->flat) {
            const int64_t rph = (R + q->sy - 1) / q->sy;
            if (j->elem == 4)
                flat_rows_f32((const float *)(void *)pad, R, &j->pl, q, rph, S, xp);
            else
                flat_rows_f64((const double *)(void *)pad, R, &j->pl, q, rph, S, xp);
        }
        if (a != sa || b != sb) {
            if (j->flat) flat_slots_of(&sl, q, VL, a, b);
            else slots_of(&sl, q, j->pl.WP, VL, a, b);
            sa = a;
            sb = b;
        }
        L.plane = j->flat ? L.plane : R * j->pl.WP;
        rows(j, xp, &sl, &L, n, g);
        u += b - a;
    }
    cpu_scratch_free(pad);
    cpu_scratch_free(sbuf);
}

/* Packs weights for the direct kernel. w_of(o, c, kh, kw) reads the forward-conv weight:
 * flip = 0: w is [O, Cg, KH, KW]; flip = 1: w is the transposed conv's [C_in, Og, KH, KW]
 * and the forward weight is w[g*Cg + c, o mod Og, KH-1-kh, KW-1-kw]. */
#define PACK(T, SUF)                                                                               \
    static void pack_##SUF(const T *w, T *wpk, const geom *q, int flip) {                          \
        const int64_t KK = q->KH * q->KW, K = q->Cg * KK;                                          \
        for (int64_t g = 0; g < q->G; g++)                                                         \
            for (int64_t o0 = 0; o0 < q->Og;) {                                                    \
                const int64_t ob = block_of(q->Og - o0);                                           \
                T *dst = wpk + (g * q->Og + o0) * K;                                               \
                if (!flip) /* dst written in order, ob rows of w read side by side */          \
                    for (int64_t k = 0; k < K; k++)                                                \
                        for (int64_t i = 0; i < ob; i++)                                           \
                            dst[k * ob + i] = w[(g * q->Og + o0 + i) * K + k];                     \
                else                                                                               \
                    for (int64_t c = 0; c < q->Cg; c++)                                            \
                        for (int64_t kh = 0; kh < q->KH; kh++)                                     \
                            for (int64_t kw = 0; kw < q->KW; kw++) {                               \
                                const int64_t k = (c * q->KH + kh) * q->KW + kw;                   \
                                const T *wr = w + ((g * q->Cg + c) * q->Og + o0) * KK +            \
                                              (q->KH - 1 - kh) * q->KW + (q->KW - 1 - kw);         \
                                for (int64_t i = 0; i < ob; i++) dst[k * ob + i] = wr[i * KK];     \
                            }                                                                      \
                o0 += ob;                                                                          \
            }                                                                                      \
    }
PACK(float, f32)
PACK(double, f64)

#ifdef CONV_512
/* ---- convolutions read straight from x: masked loads (the avx512 copy, f32) ----
 *
 * When both strides are 1 and the output rows are as wide as x's (OW == W: 3x3 with padding
 * 1, 5x5 with 2, dilated ones with padding d; 1x1 without padding), output position
 * p = oy*OW + ox reads tap (kh, kw) at p + (kh*dy - py)*W + (kw*dx - px) of x's plane:
 * consecutive positions, across rows too, read consecutive elements. Slots of 16 consecutive
 * positions of the plane load each tap with a mask that zeroes the lanes whose tap falls in
 * the padding (a column left or right of x, a row above or below it: what a zero-padded copy
 * would hold) or past the plane's end; masked-off lanes are not read. So x is not copied at
 * all, and 8x8 planes fill the vectors. Strided 1x1 convolutions (a ResNet's shortcuts) run
 * as the 1x1 conv of x subsampled, a chunk of positions at a time, in place of im2col + a
 * GEMM of a 16..32-term reduction.
 * The masks depend only on (slot, kh) and (slot, kw): made once a call (rowm, colm) and ANDed
 * per tap. Tiles of OB output channels x 2 slots (the row layout's registers), the weights
 * packed as the row layout's ([c][kh][kw][ob]); taps outer, channels inner (a tap's masks
 * fixed over the channel loop).
 * Where: planes of up to 256 positions (masked_applies). On larger planes the channel loop's
 * rows alias in L1 (4 KiB planes, each channel's row in the same cache set) and the padded
 * copy won: one Zen 5 core, batch 16, 3x3 convs, ms masked / padded: 64->64 8x8 0.40 / 0.44,
 * 32->32 16x16 0.38 / 0.41, 16->16 32x32 0.48 / 0.42, 3->16 32x32 0.10 / 0.08. */
#include <immintrin.h>

#define MS_NV 2    /* slots a tile */
#define MS_CHUNK 8 /* slots every channel block runs over in turn (their x stays in L1) */
#define MS_TAPS 64 /* taps (KH*KW) at most */
#define MS_PLANE 256 /* output positions of a plane at most */

typedef struct masked_job {
    geom q;                /* the caller's conv */
    const float *x;        /* [N, C, H, W] contiguous */
    float *out;            /* [N, O, OH, OW] */
    const float *wpk;      /* blocks of ob channels at (g*Og + o0)*K: [Cg][KH][KW][ob] */
    const float *bias;     /* [O] or NULL */
    const uint16_t *rowm;  /* [KH][ns]: lanes whose tap row kh is in x */
    const uint16_t *colm;  /* [KW][ns]: lanes whose tap column kw is in x (and p < OHW) */
    int64_t ns, chunks;    /* slots of a plane, chunks of slots */
    bool phases;           /* strided: x split into phase planes first (masked_phases) */
    int64_t pcs;           /* floats a channel's phase planes take (those made, and a cache
                            * line: channels 4 KiB apart would share L1's sets) */
    int8_t slot[16];       /* phase a*sx + b: its place among the planes made, or -1 (no tap
                            * reads it) */
    int64_t toff[MS_TAPS]; /* tap kh*KW + kw of position p at p + toff in a channel */
    atomic_bool failed;    /* a task's scratch allocation failed */
} masked_job;

/* The taps of q in the masked kernels' terms. Output (oy, ox) reads x row oy*sy + kh*dy - py
 * = (oy + da)*sy + a, a in [0, sy): row oy + da of phase row a (x's rows a, a + sy, ...;
 * Hp of them), and likewise columns (b, db, Wp). With unit strides a = b = 0 and the phase
 * is x itself. */
typedef struct ms_axis {
    int64_t ph, d, n; /* phase, offset, phase length */
} ms_axis;
static ms_axis ms_axis_of(int64_t k, int64_t dil, int64_t pad, int64_t s, int64_t size) {
    const int64_t t = k * dil - pad;
    const int64_t d = t >= 0 ? t / s : -((-t + s - 1) / s); /* floor(t / s) */
    const int64_t ph = t - d * s;
    return (ms_axis){ph, d, ph < size ? (size - ph + s - 1) / s : 0};
}

/* Slots [s0, s1) of one image and group for the OB channels at wb (bias b or NULL, output
 * planes at o): position p of channel c at xs + (c*cs + p) floats (xs an address: it may lie
 * before the buffer, which is only read at positions in range). */
#define MBLOCK(OB)                                                                                 \
    static void mblock_##OB(const masked_job *j, uintptr_t xs, int64_t cs, int64_t s0,            \
                            int64_t s1, const float *wb, const float *b, float *o) {               \
        const geom *q = &j->q;                                                                     \
        const int64_t OHW = q->OH * q->OW, Cg = q->Cg, ns = j->ns, KK = q->KH * q->KW;           \
        for (int64_t s = s0; s < s1; s += MS_NV) {                                                 \
            const bool two = s + 1 < s1;                                                           \
            __m512 acc[OB][MS_NV];                                                                 \
            UNROLL for (int i = 0; i < OB; i++) {                                                  \
                acc[i][0] = _mm512_set1_ps(b ? b[i] : 0.0f);                                       \
                acc[i][1] = acc[i][0];                                                             \
            }                                                                                      \
            for (int64_t kh = 0; kh < q->KH; kh++) {                                               \
                const __mmask16 r0 = j->rowm[kh * ns + s];                                         \
                const __mmask16 r1 = two ? j->rowm[kh * ns + s + 1] : 0;                           \
                for (int64_t kw = 0; kw < q->KW; kw++) {                                           \
                    const __mmask16 m0 = r0 & j->colm[kw * ns + s];                                \
                    const __mmask16 m1 = two ? r1 & j->colm[kw * ns + s + 1] : 0;                  \
                    if (!(m0 | m1)) continue; /* every lane in the padding */                      \
                    uintptr_t xa = xs + (uintptr_t)(s * 16 + j->toff[kh * q->KW + kw]) *           \
                                            sizeof(float);                                         \
                    const float *wc = wb + (kh * q->KW + kw) * OB;                                 \
                    for (int64_t c = 0; c < Cg; c++, xa += (uintptr_t)cs * sizeof(float),          \
                                 wc += KK * OB) {                                                  \
                        const __m512 x0 = _mm512_maskz_loadu_ps(m0, (const void *)xa);            \
                        const __m512 x1 = _mm512_maskz_loadu_ps(m1, (const void *)(xa + 64));     \
                        UNROLL for (int i = 0; i < OB; i++) {                                      \
                            __m512 wv;                                                             \
                            BC_F32(wv, wc + i);                                                    \
                            acc[i][0] = _mm512_fmadd_ps(wv, x0, acc[i][0]);                        \
                            acc[i][1] = _mm512_fmadd_ps(wv, x1, acc[i][1]);                        \
                        }                                                                          \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
            UNROLL for (int v = 0; v < MS_NV; v++) {                                               \
                const int64_t p = (s + v) * 16;                                                    \
                if (v == 1 && !two) break;                                                         \
                if (p + 16 <= OHW) {                                                               \
                    UNROLL for (int i = 0; i < OB; i++)                                            \
                        _mm512_storeu_ps(o + i * OHW + p, acc[i][v]);                              \
                } else {                                                                           \
                    const __mmask16 sm = (__mmask16)((1u << (OHW - p)) - 1);                       \
                    UNROLL for (int i = 0; i < OB; i++)                                            \
                        _mm512_mask_storeu_ps(o + i * OHW + p, sm, acc[i][v]);                     \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }
MBLOCK(1)
MBLOCK(2)
MBLOCK(3)
MBLOCK(4)
MBLOCK(5)
MBLOCK(6)
MBLOCK(7)
MBLOCK(8)

/* The phase planes of x's channels of image n, group g (strided convs): channel c's plane
 * (a, b) at dst + c*pcs + slot[a*sx + b]*OHW, rows of OW (Hp x Wp of them hold x; the kernels'
 * masks keep them from reading the rest). */
static void masked_phases(const masked_job *j, const float *xg, float *dst) {
    const geom *q = &j->q;
    const __m512i ms_even =
        _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const int64_t OHW = q->OH * q->OW;
    for (int64_t c = 0; c < q->Cg; c++)
        for (int64_t a = 0; a < q->sy; a++)
            for (int64_t b = 0; b < q->sx; b++) {
                const int k = j->slot[a * q->sx + b];
                if (k < 0) continue;
                const int64_t Hp = a < q->H ? (q->H - a + q->sy - 1) / q->sy : 0;
                const int64_t Wp = b < q->W ? (q->W - b + q->sx - 1) / q->sx : 0;
                float *d = dst + c * j->pcs + k * OHW;
                const float *sc = xg + c * q->H * q->W + a * q->W + b;
                for (int64_t i = 0; i < Hp; i++, d += q->OW) {
                    const float *sr = sc + i * q->sy * q->W;
                    if (q->sx == 2) /* 16 at a time: the even lanes of two masked loads */
                        for (int64_t jx = 0; jx < Wp; jx += 16) {
                            const int64_t n = Wp - jx < 16 ? Wp - jx : 16, m = 2 * n - 1;
                            const __mmask16 lo = (__mmask16)(m >= 16 ? 0xffff : (1u << m) - 1);
                            const __mmask16 hi = (__mmask16)(m > 16 ? (1u << (m - 16)) - 1 : 0);
                            const __m512 v0 = _mm512_maskz_loadu_ps(lo, sr + 2 * jx);
                            const __m512 v1 = _mm512_maskz_loadu_ps(hi, sr + 2 * jx + 16);
                            _mm512_mask_storeu_ps(d + jx, (__mmask16)((1u << n) - 1),
                                                  _mm512_permutex2var_ps(v0, ms_even, v1));
                        }
                    else
                        for (int64_t jx = 0; jx < Wp; jx++) d[jx] = sr[jx * q->sx];
                }
            }
}

/* Units: (n, g, chunk of slots), every channel block over the chunk; strided: (n, g), its
 * phase planes made first. */
static void masked_range(int64_t lo, int64_t hi, void *arg) {
    masked_job *j = arg;
    const geom *q = &j->q;
    const int64_t K = q->Cg * q->KH * q->KW, OHW = q->OH * q->OW;
    float *buf = j->phases ? cpu_scratch((size_t)(q->Cg * j->pcs) * sizeof(float)) : NULL;
    if (j->phases && !buf) {
        atomic_store_explicit(&j->failed, true, memory_order_relaxed);
        return;
    }
    const int64_t per = j->phases ? j->chunks : 1; /* chunks a unit */
    for (int64_t u = lo; u < hi; u++) {
        const int64_t ng = j->phases ? u : u / j->chunks;
        const int64_t n = ng / q->G, g = ng % q->G;
        const float *xg = j->x + (n * q->C + g * q->Cg) * q->H * q->W;
        uintptr_t xs = (uintptr_t)xg;
        int64_t cs = q->H * q->W;
        if (j->phases) {
            masked_phases(j, xg, buf);
            xs = (uintptr_t)buf;
            cs = j->pcs;
        }
        for (int64_t k = 0; k < per; k++) {
            const int64_t ch = j->phases ? k : u % j->chunks;
            const int64_t s0 = ch * MS_CHUNK, s1 = s0 + MS_CHUNK < j->ns ? s0 + MS_CHUNK : j->ns;
            for (int64_t o0 = 0; o0 < q->Og;) {
                const int64_t nb = block_of(q->Og - o0);
                const float *wb = j->wpk + (g * q->Og + o0) * K;
                const float *b = j->bias ? j->bias + g * q->Og + o0 : NULL;
                float *o = j->out + (n * q->O + g * q->Og + o0) * OHW;
                switch (nb) {
                case 1: mblock_1(j, xs, cs, s0, s1, wb, b, o); break;
                case 2: mblock_2(j, xs, cs, s0, s1, wb, b, o); break;
                case 3: mblock_3(j, xs, cs, s0, s1, wb, b, o); break;
                case 4: mblock_4(j, xs, cs, s0, s1, wb, b, o); break;
                case 5: mblock_5(j, xs, cs, s0, s1, wb, b, o); break;
                case 6: mblock_6(j, xs, cs, s0, s1, wb, b, o); break;
                case 7: mblock_7(j, xs, cs, s0, s1, wb, b, o); break;
                default: mblock_8(j, xs, cs, s0, s1, wb, b, o); break;
                }
                o0 += nb;
            }
        }
    }
    if (buf) cpu_scratch_free(buf);
}

/* The phase planes the taps of q read: slot[a*sx + b] their order (-1: none), their count. */
static int64_t ms_slots(const geom *q, int8_t slot[16]) {
    memset(slot, -1, 16);
    int64_t n = 0;
    for (int64_t kh = 0; kh < q->KH; kh++)
        for (int64_t kw = 0; kw < q->KW; kw++) {
            const int64_t a = ms_axis_of(kh, q->dy, q->py, q->sy, q->H).ph;
            const int64_t b = ms_axis_of(kw, q->dx, q->px, q->sx, q->W).ph;
            if (slot[a * q->sx + b] < 0) slot[a * q->sx + b] = (int8_t)n++;
        }
    return n;
}

/* Whether the masked kernels run the forward conv q: f32, planes of up to MS_PLANE outputs,
 * the reduction (Cg*KH*KW) as the direct kernels' (use_direct_of; for 1x1 kernels at most
 * 256 terms: GEMMs win beyond), and either unit strides with rows as wide as x's (x read in
 * place) or strides whose taps all read phase rows oy + d with d <= 0 of phases no longer than
 * the output (3x3 with padding 1 and 1x1 without padding, stride 2; phase planes OH x OW). */
static bool masked_applies(const geom *q, em_dtype dt) {
    const int m = conv_mode();
    if (dt != EM_F32 || (m != CONV_AUTO && m != CONV_DIRECT) || q->OH * q->OW > MS_PLANE ||
        q->KH * q->KW > MS_TAPS || q->sy * q->sx > 16)
        return false;
    const int64_t K = q->Cg * q->KH * q->KW;
    if (!(q->KH * q->KW == 1 ? K <= 256 || q->Og < 8 : K <= 1536 || q->Og < 8)) return false;
    if (q->sy == 1 && q->sx == 1) return q->OW == q->W;
    for (int64_t k = 0; k < q->KH; k++) {
        const ms_axis r = ms_axis_of(k, q->dy, q->py, q->sy, q->H);
        if (r.d > 0 || r.n > q->OH) return false;
    }
    for (int64_t k = 0; k < q->KW; k++) {
        const ms_axis c = ms_axis_of(k, q->dx, q->px, q->sx, q->W);
        if (c.d > 0 || c.n > q->OW) return false;
    }
    /* a task's phase planes stay in L1 (48 KiB on Zen 5; larger ones ran slower than the
     * padded rows: 16->32 /2 on 32x32, 0.32 ms against 0.27) */
    int8_t slot[16];
    return q->Cg * (ms_slots(q, slot) * q->OH * q->OW + 16) * (int64_t)sizeof(float) <= 40 * 1024;
}

/* The forward conv q by the masked kernels; flip as in pack_f32. */
static em_status conv_masked(const geom *q, const float *x, const float *w, const float *bias,
                             float *out, int flip) {
    const int64_t K = q->Cg * q->KH * q->KW, OHW = q->OH * q->OW;
    const int64_t ns = (OHW + 15) / 16;
    const bool phases = q->sy > 1 || q->sx > 1;
    float *wpk = cpu_scratch((size_t)(q->O * K) * sizeof(float));
    uint16_t *masks = cpu_scratch((size_t)((q->KH + q->KW) * ns) * sizeof(uint16_t));
    if (!wpk || !masks) {
        if (wpk) cpu_scratch_free(wpk);
        if (masks) cpu_scratch_free(masks);
        return oom();
    }
    pack_f32(w, wpk, q, flip);
    masked_job j = {.q = *q, .x = x, .out = out, .wpk = wpk, .bias = bias, .ns = ns,
                    .chunks = (ns + MS_CHUNK - 1) / MS_CHUNK, .phases = phases};
    j.pcs = ms_slots(q, j.slot) * OHW + 16;
    /* lane masks: bit l of slot s is position p = s*16 + l; tap offsets in a channel */
    uint16_t *rowm = masks, *colm = masks + q->KH * ns;
    memset(masks, 0, (size_t)((q->KH + q->KW) * ns) * sizeof(uint16_t));
    for (int64_t kh = 0; kh < q->KH; kh++) {
        const ms_axis r = ms_axis_of(kh, q->dy, q->py, q->sy, q->H);
        for (int64_t p = 0; p < OHW; p++) {
            const int64_t i = p / q->OW + r.d;
            if (i >= 0 && i < r.n) rowm[kh * ns + (p >> 4)] |= (uint16_t)(1u << (p & 15));
        }
        for (int64_t kw = 0; kw < q->KW; kw++) {
            const ms_axis c = ms_axis_of(kw, q->dx, q->px, q->sx, q->W);
            /* in place (unit strides): row stride W = OW; phases: planes OH x OW */
            j.toff[kh * q->KW + kw] = j.slot[r.ph * q->sx + c.ph] * OHW + r.d * q->OW + c.d;
        }
    }
    for (int64_t kw = 0; kw < q->KW; kw++) {
        const ms_axis c = ms_axis_of(kw, q->dx, q->px, q->sx, q->W);
        for (int64_t p = 0; p < OHW; p++) {
            const int64_t i = p % q->OW + c.d;
            if (i >= 0 && i < c.n) colm[kw * ns + (p >> 4)] |= (uint16_t)(1u << (p & 15));
        }
    }
    j.rowm = rowm;
    j.colm = colm;
    const int64_t unit_work = q->Og * K * MS_CHUNK * 16 * (phases ? j.chunks : 1);
    const int64_t grain = (1 << 17) / (unit_work > 0 ? unit_work : 1);
    cpu_parallel_for(q->N * q->G * (phases ? 1 : j.chunks), grain < 1 ? 1 : grain, masked_range,
                     &j);
    cpu_scratch_free(masks);
    cpu_scratch_free(wpk);
    return atomic_load(&j.failed) ? oom() : EM_OK;
}
#endif /* CONV_512 */

/* Direct convolution for q; x, w, bias contiguous. */
static em_status conv_direct(const geom *q, em_dtype dt, const void *x, const void *w,
                             const void *bias, void *out, int flip) {
#ifdef CONV_512
    if (masked_applies(q, dt))
        return conv_masked(q, x, w, bias, out, flip);
#endif
    const size_t elem = em_dtype_size(dt);
    const int64_t VL = VB / (int64_t)elem; /* a partial slot reads VL columns */
    direct_job j = {.q = *q, .x = x, .out = out, .bias = bias, .elem = (int64_t)elem};
    /* rows whose slots would leave a fifth or more of the lanes idle (8-wide rows of 16-lane
     * vectors, a stride-2 conv's 8x8 output) run in the flat layout: full vectors across rows
     * for KW copies of x's rows instead of one */
    const int64_t row_lanes = (q->OW + VL - 1) / VL * VL;
    const int m = conv_mode();
    j.flat = m == CONV_DIRECT_FLAT || (m != CONV_DIRECT_ROWS && 5 * q->OW < 4 * row_lanes);
    /* the row layout's slots read whole vectors from each row; the flat layout's copies read
     * OW columns (a narrow row's vector reads on into the next row, or into the slack past
     * the padded rows: direct_range) */
    j.pl = padded_layout(q, j.flat || q->OW > VL ? q->OW : VL);
    void *wpk = cpu_scratch((size_t)(q->O * q->Cg * q->KH * q->KW) * elem);
    if (!wpk) return oom();
    if (dt == EM_F32) pack_f32(w, wpk, q, flip);
    else pack_f64(w, wpk, q, flip);
    j.wpk = wpk;
    const int64_t units = q->N * q->G * q->OH;
    const int64_t row_work = q->Og * q->OW * q->Cg * q->KH * q->KW;
    int64_t grain = (1 << 16) / (row_work > 0 ? row_work : 1);
    cpu_parallel_for(units, grain < 1 ? 1 : grain, direct_range, &j);
    cpu_scratch_free(wpk);
    return atomic_load(&j.failed) ? oom() : EM_OK;
}

/* The direct weight gradient: units (batch slice s, group g, part p of the group's blocks of
 * WO channels); each sums its images into part[s] (doubles), the slices added in order at
 * the end. */
typedef struct wgrad_job {
    geom q;
    const void *x, *gy;  /* contiguous */
    double *part;        /* [S][O*K] */
    int64_t S, P, nblk;  /* slices, parts per group, blocks per group */
    int64_t HP, OWp, elem;
    padded pl;
    atomic_bool failed;
} wgrad_job;

static void wgrad_range(int64_t lo, int64_t hi, void *arg) {
    wgrad_job *j = arg;
    const geom *q = &j->q;
    const wgrad_fn kern = wgrad_kernel(j->elem == 4 ? EM_F32 : EM_F64);
    const wfinish_fn finish = wgrad_finisher(j->elem == 4 ? EM_F32 : EM_F64);
    const int64_t K = q->Cg * q->KH * q->KW, plane = j->HP * j->pl.WP, GS = q->OH * j->OWp;
    const int64_t OHW = q->OH * q->OW;
    /* a block's vector accumulators: [K/WT][WO*WT] vectors, summed over the unit's images */
    const int64_t blk_acc = (K + WT - 1) / WT * WO * WT * VB; /* bytes */
    const int64_t most = (j->nblk + j->P - 1) / j->P + 1;   /* blocks a unit */
    char *xp = cpu_scratch((size_t)(q->Cg * plane * j->elem));
    char *gp = cpu_scratch((size_t)(WO * GS * j->elem));
    char *vacc = cpu_scratch((size_t)(most * blk_acc));
    int64_t *koff = cpu_scratch((size_t)K * sizeof(int64_t));
    if (!xp || !gp || !vacc || !koff) {
        atomic_store_explicit(&j->failed, true, memory_order_relaxed);
        if (xp) cpu_scratch_free(xp);
        if (gp) cpu_scratch_free(gp);
        if (vacc) cpu_scratch_free(vacc);
        if (koff) cpu_scratch_free(koff);
        return;
    }
    /* tap k's offset in the padded rows (k = (c*KH + kh)*KW + kw) */
    for (int64_t k = 0; k < K; k++)
        koff[k] = (k / (q->KH * q->KW)) * plane + ((k / q->KW) % q->KH) * q->dy * j->pl.WP +
                  j->pl.tap[k % q->KW];
    memset(gp, 0, (size_t)(WO * GS * j->elem)); /* row tails stay zero */
    for (int64_t u = lo; u < hi; u++) {
        const int64_t s = u / (q->G * j->P), g = (u / j->P) % q->G, p = u % j->P;
        const int64_t n0 = s * q->N / j->S, n1 = (s + 1) * q->N / j->S;
        const int64_t b0 = p * j->nblk / j->P, b1 = (p + 1) * j->nblk / j->P;
        memset(vacc, 0, (size_t)((b1 - b0) * blk_acc));
        for (int64_t n = n0; n < n1; n++) {
            const size_t xoff = (size_t)((n * q->C + g * q->Cg) * q->H * q->W);
            if (j->elem == 4)
                pad_rows_f32((const float *)j->x + xoff, (float *)(void *)xp, q, 0, j->HP,
                             &j->pl);
            else
                pad_rows_f64((const double *)j->x + xoff, (double *)(void *)xp, q, 0, j->HP,
                             &j->pl);
            for (int64_t blk = b0; blk < b1; blk++) {
                const int64_t o0 = blk * WO, ob = q->Og - o0 < WO ? q->Og - o0 : WO;
                for (int64_t i = 0; i < WO; i++) {
                    char *dp = gp + (size_t)(i * GS * j->elem);
                    if (i >= ob) {
                        memset(dp, 0, (size_t)(GS * j->elem));
                        continue;
                    }
                    const char *sp = (const char *)j->gy +
                                     (size_t)((n * q->O + g * q->Og + o0 + i) * OHW * j->elem);
                    for (int64_t oy = 0; oy < q->OH; oy++)
                        memcpy(dp + (size_t)(oy * j->OWp * j->elem),
                               sp + (size_t)(oy * q->OW * j->elem), (size_t)(q->OW * j->elem));
                }
                kern(q, xp, plane, &j->pl, koff, gp, j->OWp, vacc + (blk - b0) * blk_acc);
            }
        }
        /* the lane sums once a unit: each lane summed its images' terms in T */
        for (int64_t blk = b0; blk < b1; blk++) {
            const int64_t o0 = blk * WO, ob = q->Og - o0 < WO ? q->Og - o0 : WO;
            finish(K, vacc + (blk - b0) * blk_acc, ob,
                   j->part + s * q->O * K + (g * q->Og + o0) * K);
        }
    }
    cpu_scratch_free(xp);
    cpu_scratch_free(gp);
    cpu_scratch_free(vacc);
    cpu_scratch_free(koff);
}

static em_status wgrad_direct(const geom *q, em_dtype dt, const void *x, const void *gy,
                              void *gw) {
    const int64_t elem = (int64_t)em_dtype_size(dt), VL = VB / elem;
    const int64_t K = q->Cg * q->KH * q->KW, OK = q->O * K;
    const int64_t nt = cpu_threads();
    wgrad_job j = {.q = *q, .x = x, .gy = gy, .elem = elem};
    j.OWp = (q->OW + VL - 1) / VL * VL;
    j.pl = padded_layout(q, j.OWp);
    j.HP = (q->OH - 1) * q->sy + (q->KH - 1) * q->dy + 1;
    j.nblk = (q->Og + WO - 1) / WO;
    j.S = q->N < 4 * nt ? q->N : 4 * nt;
    /* f32: a lane sums at most 8192 / VL terms in f32 (a weight 8192, WGRAD_F32_COLS) */
    const int64_t least = dt == EM_F32 ? (q->N * q->OH * q->OW + 8191) / 8192 : 1;
    if (j.S < least) j.S = least < q->N ? least : q->N;
    while (j.S > least && j.S > 1 && j.S * OK * 8 > (64 << 20)) j.S--;
    j.P = (4 * nt + j.S * q->G - 1) / (j.S * q->G);
    if (j.P > j.nblk) j.P = j.nblk;
    if (j.P < 1) j.P = 1;
    j.part = cpu_scratch((size_t)(j.S * OK) * sizeof(double));
    if (!j.part) return oom();
    memset(j.part, 0, (size_t)(j.S * OK) * sizeof(double));
    cpu_parallel_for(j.S * q->G * j.P, 1, wgrad_range, &j);
    if (!atomic_load(&j.failed)) {
        for (int64_t s = 1; s < j.S; s++)
            for (int64_t i = 0; i < OK; i++) j.part[i] += j.part[s * OK + i];
        for (int64_t i = 0; i < OK; i++) {
            if (dt == EM_F32) ((float *)gw)[i] = (float)j.part[i];
            else ((double *)gw)[i] = j.part[i];
        }
    }
    cpu_scratch_free(j.part);
    return atomic_load(&j.failed) ? oom() : EM_OK;
}

/* ---- im2col + GEMM, nb images a GEMM ----
 * One GEMM per group and batch chunk of nb images rather than one per image: col holds the
 * chunk's columns side by side ([K, nb*OHW]), and operands or results laid out [N, C, HW]
 * are copied to and from [C, nb*HW] (plane_copy). The small planes of a ResNet's later layers
 * (8x8, 16x16) then make a GEMM wide enough for its kernel and the pool, and each call wakes
 * the pool a few times instead of a few times per image. */

/* Bytes of scratch a chunk may take, and the columns a forward / transposed GEMM wants. */
#define CHUNK_BYTES (16 << 20)
#define CHUNK_COLS 4096
/* f32 weight gradients: at most this many terms summed in f32 inside one GEMM; the chunks'
 * products are summed in double (ref sums in double; PyTorch sums all N*OH*OW in f32) */
#define WGRAD_F32_COLS 8192
/* ...and each of its GEMMs takes about this many columns (the images of one block): a
 * [16, 32, 16, 16] layer's 3x3 columns in scratch are then 288 KiB, not a slice's 4.5 MiB, at
 * the same speed (a ResNet's step on an AMD EPYC, Zen 5: bench/README.md) */
#define WGRAD_BLOCK_COLS 256
/* A strided transposed conv's GEMM (k = its input channels, often 16-64: little reuse to
 * gain from wide blocks) takes about this many columns a chunk: its im2col columns in scratch
 * are 144 x 1024, not 144 x 4096, for a ResNet's stride-2 input gradients */
#define CONVT_COLS 1024

/* Images per chunk: enough for `cols` GEMM columns, within CHUNK_BYTES of `per_col` bytes a
 * column, at least 1, at most N. */
static int64_t chunk_of(int64_t N, int64_t OHW, size_t per_col, int64_t cols) {
    int64_t by_cols = (cols + OHW - 1) / OHW;
    int64_t by_mem = (int64_t)(CHUNK_BYTES / (per_col * (size_t)OHW + 1));
    int64_t nb = by_cols < by_mem ? by_cols : by_mem;
    return nb < 1 ? 1 : nb > N ? N : nb;
}

typedef struct cols_job {
    const geom *q;
    const void *src; /* im2col: x at (image n0, group g); col2im: unused */
    void *col;
    int64_t ld; /* col's row stride: nb * OHW */
    void *out;  /* col2im: the output at (image n0, group g) */
    const void *bias;
    em_dtype dt;
} cols_job;

/* units u = n*K + k: row k of image n (of the chunk) */
static void im2col_range(int64_t lo, int64_t hi, void *arg) {
    const cols_job *j = arg;
    const geom *q = j->q;
    const int64_t K = q->Cg * q->KH * q->KW, OHW = q->OH * q->OW, img = q->C * q->H * q->W;
    while (lo < hi) {
        const int64_t n = lo / K, k0 = lo % K, k1 = k0 + (hi - lo) < K ? k0 + (hi - lo) : K;
        /* whole channels apart from the partial ones at the ends (im2col's fast path takes
         * whole channels) */
        const int64_t KK = q->KH * q->KW, a = (k0 + KK - 1) / KK * KK, b = k1 / KK * KK;
        const int64_t cut[4] = {k0, a < b ? a : k1, a < b ? b : k1, k1};
        /* strided, not 1x1: whole channels through the flat layout */
        const bool flat = (q->sx > 1 || q->sy > 1) && KK > 1 && q->KW <= MAX_KW;
        for (int p = 0; p < 3; p++) {
            if (cut[p + 1] <= cut[p]) continue;
            if (p == 1 && flat && cut[1] < cut[2]) {
                const bool ok =
                    j->dt == EM_F32
                        ? im2col_flat_f32((const float *)j->src + n * img,
                                          (float *)j->col + n * OHW, j->ld, q, cut[1] / KK,
                                          cut[2] / KK)
                        : im2col_flat_f64((const double *)j->src + n * img,
                                          (double *)j->col + n * OHW, j->ld, q, cut[1] / KK,
                                          cut[2] / KK);
                if (ok) continue;
            }
            if (j->dt == EM_F32)
                im2col_f32((const float *)j->src + n * img, (float *)j->col + n * OHW, j->ld, q,
                           cut[p], cut[p + 1]);
            else
                im2col_f64((const double *)j->src + n * img, (double *)j->col + n * OHW, j->ld,
                           q, cut[p], cut[p + 1]);
        }
        lo += k1 - k0;
    }
}

/* units u = n*Cg + p: output plane p of image n (of the chunk); planes of one image and group
 * read disjoint col rows and write disjoint planes: no races */
static void col2im_range(int64_t lo, int64_t hi, void *arg) {
    const cols_job *j = arg;
    const geom *q = j->q;
    const int64_t OHW = q->OH * q->OW, img = q->C * q->H * q->W;
    while (lo < hi) {
        const int64_t n = lo / q->Cg, p0 = lo % q->Cg;
        const int64_t p1 = p0 + (hi - lo) < q->Cg ? p0 + (hi - lo) : q->Cg;
        /* strided, not 1x1 (a 1x1 kernel's scatter touches each output once: col2im) */
        const bool strided = (q->sx > 1 || q->sy > 1) && q->KH * q->KW > 1;
        if (strided && j->dt == EM_F32 &&
            col2im_flat_f32((const float *)j->col + n * OHW, j->ld, (float *)j->out + n * img,
                            j->bias, q, p0, p1)) {
        } else if (strided && j->dt == EM_F64 &&
                   col2im_flat_f64((const double *)j->col + n * OHW, j->ld,
                                   (double *)j->out + n * img, j->bias, q, p0, p1)) {
        } else if (j->dt == EM_F32)
            col2im_f32((const float *)j->col + n * OHW, j->ld, (float *)j->out + n * img,
                       j->bias, q, p0, p1);
        else
            col2im_f64((const double *)j->col + n * OHW, j->ld, (double *)j->out + n * img,
                       j->bias, q, p0, p1);
        lo += p1 - p0;
    }
}

/* col [K, nb*OHW] = im2col of images [n0, n0 + nb), group g (parallel over rows) */
static void im2col_chunk(const geom *q, em_dtype dt, const void *x, void *col, int64_t n0,
                         int64_t nb, int64_t g) {
    const size_t elem = em_dtype_size(dt);
    const int64_t K = q->Cg * q->KH * q->KW, OHW = q->OH * q->OW;
    cols_job j = {.q = q, .dt = dt, .col = col, .ld = nb * OHW};
    j.src = (const char *)x + (size_t)((n0 * q->C + g * q->Cg) * q->H * q->W) * elem;
    int64_t grain = (1 << 14) / (OHW > 0 ? OHW : 1);
    cpu_parallel_for(nb * K, grain < 1 ? 1 : grain, im2col_range, &j);
}

/* Planes between a tensor t laid out [., ctot, P] (at its first plane) and a matrix m laid out
 * [rows, nb*P]: gather m[r, n*P + i] = t[n, r, i], or scatter t[n, r, i] = m[r, n*P + i]
 * (+ bias[r]). */
typedef struct planes_job {
    char *t, *m;
    const void *bias;
    int64_t ctot, nb, P;
    size_t elem;
    em_dtype dt;
    bool scatter;
} planes_job;

static void planes_range(int64_t lo, int64_t hi, void *arg) {
    const planes_job *j = arg;
    const size_t row = (size_t)j->P * j->elem;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t r = u / j->nb, n = u % j->nb;
        char *t = j->t + (size_t)(n * j->ctot + r) * row, *m = j->m + (size_t)(r * j->nb + n) * row;
        if (!j->scatter) memcpy(m, t, row);
        else if (!j->bias) memcpy(t, m, row);
        else if (j->dt == EM_F32) {
            const float b = ((const float *)j->bias)[r], *s = (const float *)m;
            float *d = (float *)t;
            for (int64_t i = 0; i < j->P; i++) d[i] = s[i] + b;
        } else {
            const double b = ((const double *)j->bias)[r], *s = (const double *)m;
            double *d = (double *)t;
            for (int64_t i = 0; i < j->P; i++) d[i] = s[i] + b;
        }
    }
}

static void plane_copy(em_dtype dt, void *t, int64_t ctot, void *m, int64_t rows, int64_t nb,
                       int64_t P, const void *bias, bool scatter) {
    planes_job j = {t, m, bias, ctot, nb, P, em_dtype_size(dt), dt, scatter};
    int64_t grain = (1 << 14) / (P > 0 ? P : 1);
    cpu_parallel_for(rows * nb, grain < 1 ? 1 : grain, planes_range, &j);
}

/* A 1x1 kernel with unit stride and no padding reads x as it is: no im2col. */
static bool is_pointwise(const geom *q) {
    return q->KH == 1 && q->KW == 1 && q->sy == 1 && q->sx == 1 && q->py == 0 && q->px == 0;
}

static void gemm(em_dtype dt, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n,
                 int64_t k, const void *a, int64_t lda, const void *b, int64_t ldb, double beta,
                 void *c, int64_t ldc) {
    cpu_gemm(dt, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

/* out_g [Og, nb*OHW] = w_g [Og, K] @ col [K, nb*OHW] (+ bias), one GEMM per chunk and group;
 * a chunk of one image writes out in place. */
static bool conv_gemm_images(const geom *q, em_dtype dt, const void *x, const void *w,
                             const void *bias, void *out, int64_t n_lo, int64_t n_hi) {
    const size_t elem = em_dtype_size(dt);
    const int64_t K = q->Cg * q->KH * q->KW, OHW = q->OH * q->OW;
    const bool pw = is_pointwise(q);
    const int64_t nb = chunk_of(n_hi - n_lo, OHW, (size_t)(K + q->Og) * elem, CHUNK_COLS);
    void *col = pw && nb == 1 ? NULL : cpu_scratch((size_t)(K * nb * OHW) * elem);
    void *tmp = nb > 1 ? cpu_scratch((size_t)(q->Og * nb * OHW) * elem) : NULL;
    if ((!col && !(pw && nb == 1)) || (!tmp && nb > 1)) {
        if (col) cpu_scratch_free(col);
        if (tmp) cpu_scratch_free(tmp);
        return false;
    }
    for (int64_t n0 = n_lo; n0 < n_hi; n0 += nb) {
        const int64_t m = n_hi - n0 < nb ? n_hi - n0 : nb, cols = m * OHW;
        for (int64_t g = 0; g < q->G; g++) {
            const void *b;
            if (!col) {
                b = (const char *)x + (size_t)((n0 * q->C + g * q->Cg) * q->H * q->W) * elem;
            } else {
                im2col_chunk(q, dt, x, col, n0, m, g);
                b = col;
            }
            const void *wg = (const char *)w + (size_t)(g * q->Og * K) * elem;
            const void *bg = bias ? (const char *)bias + (size_t)(g * q->Og) * elem : NULL;
            char *c = (char *)out + (size_t)((n0 * q->O + g * q->Og) * OHW) * elem;
            if (m > 1) {
                gemm(dt, CblasNoTrans, CblasNoTrans, q->Og, cols, K, wg, K, b, cols, 0.0, tmp,
                     cols);
                plane_copy(dt, c, q->O, tmp, q->Og, m, OHW, bg, true);
                continue;
            }
            if (bg) {
                for (int64_t o = 0; o < q->Og; o++) {
                    if (dt == EM_F32) {
                        float v = ((const float *)bg)[o], *r = (float *)c + o * OHW;
                        for (int64_t i = 0; i < OHW; i++) r[i] = v;
                    } else {
                        double v = ((const double *)bg)[o], *r = (double *)c + o * OHW;
                        for (int64_t i = 0; i < OHW; i++) r[i] = v;
                    }
                }
            }
            gemm(dt, CblasNoTrans, CblasNoTrans, q->Og, OHW, K, wg, K, b, OHW, bg ? 1.0 : 0.0, c,
                 OHW);
        }
    }
    if (col) cpu_scratch_free(col);
    if (tmp) cpu_scratch_free(tmp);
    return true;
}

/* The batch split over the pool by images, each thread running its images' chunks alone
 * (the calls to the pool inside run inline): one wake-up a call, and col is read by the thread
 * that wrote it. Fewer images than two a thread: one range, threaded inside (cpu_gemm). */
typedef struct images_job {
    const geom *q;
    em_dtype dt;
    const void *x, *w, *bias;
    void *out;
    const em_view *vout, *vx, *vw; /* convt_gemm's views */
    const em_conv_args *a;
    atomic_bool failed;
} images_job;

/* Images a part: about four parts a thread (a thread that starts late finds its share taken
 * by the others), each of at least 512 columns (below, OpenBLAS's GEMMs lose speed), at most
 * a thread's share. */
static int64_t images_grain(int64_t N, int64_t OHW) {
    const int nt = cpu_threads();
    if (nt == 1) return N;
    const int64_t share = (N + nt - 1) / nt, quarter = (N + 4 * nt - 1) / (4 * nt);
    const int64_t least = (512 + OHW - 1) / (OHW > 0 ? OHW : 1);
    int64_t g = quarter > least ? quarter : least;
    return g < share ? g : share;
}

static void conv_images_range(int64_t lo, int64_t hi, void *arg) {
    images_job *j = arg;
    if (!conv_gemm_images(j->q, j->dt, j->x, j->w, j->bias, j->out, lo, hi))
        atomic_store_explicit(&j->failed, true, memory_order_relaxed);
}

static em_status conv_gemm(const geom *q, em_dtype dt, const void *x, const void *w,
                           const void *bias, void *out) {
    images_job j = {.q = q, .dt = dt, .x = x, .w = w, .bias = bias, .out = out};
    cpu_parallel_for(q->N, images_grain(q->N, q->OH * q->OW), conv_images_range, &j);
    return atomic_load(&j.failed) ? oom() : EM_OK;
}

/* ---- entry points ---- */

static geom geom_of(const em_view *x, const em_view *out, int64_t KH, int64_t KW, int64_t Cg,
                    const em_conv_args *a) {
    geom q = {.N = x->shape[0], .C = x->shape[1], .H = x->shape[2], .W = x->shape[3],
              .O = out->shape[1], .OH = out->shape[2], .OW = out->shape[3], .KH = KH, .KW = KW,
              .G = a->groups, .Cg = Cg, .sy = a->stride[0], .sx = a->stride[1],
              .py = a->padding[0], .px = a->padding[1], .dy = a->dilation[0],
              .dx = a->dilation[1]};
    q.Og = q.O / q.G;
    return q;
}

/* Contiguous copies of the inputs that need them (freed by release). */
typedef struct inputs {
    em_view v[3];
    void *tmp[3];
} inputs;

static em_status contig_inputs(inputs *in, const em_view *a, const em_view *b, const em_view *c) {
    const em_view *src[3] = {a, b, c};
    memset(in, 0, sizeof *in);
    for (int i = 0; i < 3; i++) {
        if (!src[i]) continue;
        em_status s = cpu_contig_input(src[i], &in->v[i], &in->tmp[i]);
        if (s != EM_OK) return s;
    }
    return EM_OK;
}

static void release(inputs *in) {
    for (int i = 0; i < 3; i++)
        if (in->tmp[i]) cpu_scratch_free(in->tmp[i]);
}


/* Whether the direct kernels should run q: they beat im2col + GEMM while the reduction per
 * output (K = Cg*KH*KW) is moderate (measured on AVX-512: direct ~120-160 GFLOP/s on one
 * core up to K = 1152, OpenBLAS's Haswell sgemm ~70-85, its SkylakeX sgemm ~140-150 and
 * ahead beyond); a GEMM with few output channels (Og < 8 rows) wastes its tiles. Pointwise
 * convolutions are a plain GEMM. */

/* The direct kernels run at the avx2 and avx512 levels (the portable copy has no FMA and
 * 16-byte vectors: im2col + GEMM there). With the level's own vector width and tiles they
 * ran a ResNet's 3x3 layers (C = 16..64, 32x32 .. 8x8, batch 16) 1.1-1.7x faster than
 * im2col + GEMM on an AMD EPYC (Zen 3, AVX2) (bench/conv_vs_torch.py). */
static bool direct_level(void) {
    int m = conv_mode();
    if (m != CONV_AUTO) return conv_forced_direct();
    return CPU_ISA_LEVEL >= CPU_ISA_AVX2;
}

/* Whether the direct kernels should run q as a conv of its own; a phase of a strided
 * transposed conv (convt_phases) may be 1x1. */
static bool use_direct_of(const geom *q, em_dtype dt, bool phase) {
    /* 1x1 kernels (any stride): a GEMM, im2col a cheap subsample */
    if (q->KW > MAX_KW || q->KH > MAX_KW || (q->KH * q->KW == 1 && !phase) || !direct_level())
        return false;
    /* narrow rows: tiles would mostly compute columns past OW */
    const int64_t VL = VB / (int64_t)em_dtype_size(dt);
    if (2 * q->OW < VL) return false;
    const int64_t K = q->Cg * q->KH * q->KW;
    return K <= 1536 || q->Og < 8;
}

static bool use_direct(const geom *q, em_dtype dt) { return use_direct_of(q, dt, false); }

static bool use_direct_wgrad(const geom *q, em_dtype dt) {
    if (q->KW > MAX_KW || is_pointwise(q) || !direct_level()) return false;
    const int64_t VL = VB / (int64_t)em_dtype_size(dt);
    if (2 * q->OW < (q->OW + VL - 1) / VL * VL) return false;
    /* each image's sums end in lane sums: planes under 1024 outputs ran slower than the GEMM
     * over the batch (AMD EPYC, AVX2: 8x8 3.5x, 16x16 1.2x) */
    if (q->OH * q->OW < 1024 && conv_mode() == CONV_AUTO) return false;
    return q->Cg * q->KH * q->KW <= 1152;
}

/* The f32/f64 kernels below take a contiguous output of their dtype, inputs of that dtype
 * (any layout: packed here), and non-empty operands; the entry points at the end of the file
 * stage everything else (f16/bf16 through f32, strided outputs, empty tensors). */
static em_status conv2d_f(const em_view *out, const em_view *x, const em_view *w,
                          const em_view *bias, const em_conv_args *a) {
    geom q = geom_of(x, out, w->shape[2], w->shape[3], w->shape[1], a);
    inputs in;
    em_status s = contig_inputs(&in, x, w, bias);
    if (s == EM_OK) {
        const void *px = cpu_ptr(&in.v[0]), *pw = cpu_ptr(&in.v[1]);
        const void *pb = bias ? cpu_ptr(&in.v[2]) : NULL;
        if (use_direct(&q, out->dtype))
            s = conv_direct(&q, out->dtype, px, pw, pb, cpu_ptr(out), 0);
#ifdef CONV_512
        else if (masked_applies(&q, out->dtype))
            s = conv_masked(&q, px, pw, pb, cpu_ptr(out), 0);
#endif
        else
            s = conv_gemm(&q, out->dtype, px, pw, pb, cpu_ptr(out));
    }
    release(&in);
    return s;
}

/* The weight gradient's slices [lo, hi) of nb images: slice k's gw (all groups) into
 * part + k*O*K, each group one GEMM (the pool's calls inside run inline when threaded). */
typedef struct wgrad_job2 {
    const geom *q;
    em_dtype dt;
    const void *x, *gy;
    void *part;
    int64_t nb;
    bool trans; /* the GEMM as gw_g^T [K, Og] = col @ gy_g^T (wgrad_transposed) */
    atomic_bool failed;
} wgrad_job2;

/* The tiles' area of ember's GEMM for an m x n product (f32 tiles; f64 has half the columns) */
static int64_t tile_area(int64_t m, int64_t n, em_dtype dt) {
    const int64_t mr = CPU_GEMM_MR, nr = CPU_GEMM_NV * CPU_GEMM_VB / (int64_t)em_dtype_size(dt);
    return (m + mr - 1) / mr * mr * ((n + nr - 1) / nr * nr);
}

/* Whether the weight gradient's GEMM runs as gw_g^T [K, Og] = col [K, cols] @ gy_g^T (rows:
 * the K taps) rather than gw_g [Og, K] = gy_g @ col^T (rows: the few output channels): where
 * its tiles waste less (a ResNet's 32 and 64 channels in 12-row tiles: 36 and 72 rows, but
 * 288 and 576 taps fill them; 32 columns are one 12x32 tile's). One Zen 5 core, ember-bench
 * cpu --gemm: [288, 1024] @ [1024, 32] 131 GF/s against [32, 1024] @ [1024, 288] 106, and
 * 158 against 141 for 64 channels, 120 against 93 for 16 -> 32 on 4096 columns. */
static bool wgrad_transposed(const geom *q, em_dtype dt) {
    const int64_t K = q->Cg * q->KH * q->KW;
    return tile_area(K, q->Og, dt) < tile_area(q->Og, K, dt);
}

static void wgrad_slices_range(int64_t lo, int64_t hi, void *arg) {
    wgrad_job2 *j = arg;
    const geom *q = j->q;
    const size_t elem = em_dtype_size(j->dt);
    const int64_t K = q->Cg * q->KH * q->KW, OHW = q->OH * q->OW, GK = q->O * K;
    const bool pw = is_pointwise(q);
    const int64_t nb = j->nb;
    /* a slice's images go through the GEMM a block of `sub` images at a time (about
     * WGRAD_BLOCK_COLS columns, the products summed into the slice's partial): the im2col
     * columns in scratch are one block's, not the slice's (9x a slice of x for 3x3 kernels) */
    int64_t sub = WGRAD_BLOCK_COLS / (OHW > 0 ? OHW : 1);
    sub = sub < 1 ? 1 : sub > nb ? nb : sub;
    void *col = pw && sub == 1 ? NULL : cpu_scratch((size_t)(K * sub * OHW) * elem);
    void *gyr = sub > 1 ? cpu_scratch((size_t)(q->Og * sub * OHW) * elem) : NULL;
    /* transposed: the group's [K, Og] sums, then copied to [Og, K] */
    void *ct = j->trans ? cpu_scratch((size_t)(K * q->Og) * elem) : NULL;
    if ((!col && !(pw && sub == 1)) || (!gyr && sub > 1) || (!ct && j->trans)) {
        atomic_store_explicit(&j->failed, true, memory_order_relaxed);
    } else {
        for (int64_t k = lo; k < hi; k++) {
            const int64_t n0 = k * nb, m = q->N - n0 < nb ? q->N - n0 : nb;
            for (int64_t g = 0; g < q->G; g++) {
                char *c = (char *)j->part + (size_t)(k * GK + g * q->Og * K) * elem;
                for (int64_t s0 = 0; s0 < m; s0 += sub) {
                    const int64_t ms = m - s0 < sub ? m - s0 : sub, n1 = n0 + s0,
                                  cols = ms * OHW;
                    const void *b;
                    if (!col) {
                        b = (const char *)j->x +
                            (size_t)((n1 * q->C + g * q->Cg) * q->H * q->W) * elem;
                    } else {
                        im2col_chunk(q, j->dt, j->x, col, n1, ms, g);
                        b = col;
                    }
                    char *pa = (char *)j->gy + (size_t)((n1 * q->O + g * q->Og) * OHW) * elem;
                    if (ms > 1) {
                        plane_copy(j->dt, pa, q->O, gyr, q->Og, ms, OHW, NULL, false);
                        pa = gyr;
                    }
                    if (j->trans)
                        gemm(j->dt, CblasNoTrans, CblasTrans, K, q->Og, cols, b, cols, pa, cols,
                             s0 ? 1.0 : 0.0, ct, q->Og);
                    else
                        gemm(j->dt, CblasNoTrans, CblasTrans, q->Og, K, cols, pa, cols, b, cols,
                             s0 ? 1.0 : 0.0, c, K);
                }
                if (j->trans && j->dt == EM_F32)
                    for (int64_t o = 0; o < q->Og; o++)
                        for (int64_t t = 0; t < K; t++)
                            ((float *)(void *)c)[o * K + t] = ((const float *)ct)[t * q->Og + o];
                else if (j->trans)
                    for (int64_t o = 0; o < q->Og; o++)
                        for (int64_t t = 0; t < K; t++)
                            ((double *)(void *)c)[o * K + t] = ((const double *)ct)[t * q->Og + o];
            }
        }
    }
    if (col) cpu_scratch_free(col);
    if (gyr) cpu_scratch_free(gyr);
    if (ct) cpu_scratch_free(ct);
}

static em_status wgrad_f(const em_view *gw, const em_view *x, const em_view *gy,
                         const em_conv_args *a) {
    const em_dtype dt = gw->dtype;
    const size_t elem = em_dtype_size(dt);
    geom q = geom_of(x, gy, gw->shape[2], gw->shape[3], gw->shape[1], a);
    const int64_t K = q.Cg * q.KH * q.KW, OHW = q.OH * q.OW, GK = q.O * K;
    inputs in;
    em_status s = contig_inputs(&in, x, gy, NULL);
    if (s == EM_OK && use_direct_wgrad(&q, dt)) {
        s = wgrad_direct(&q, dt, cpu_ptr(&in.v[0]), cpu_ptr(&in.v[1]), cpu_ptr(gw));
        release(&in);
        return s;
    }
    if (s != EM_OK) {
        release(&in);
        return s;
    }
    /* slices of nb images, each one GEMM a group (gy's planes [Og, nb*OHW] @ col^T): f32
     * sums at most WGRAD_F32_COLS terms in f32; with threads, a slice or more a thread */
    int64_t nb =
        chunk_of(q.N, OHW, (size_t)(K + q.Og) * elem, dt == EM_F32 ? WGRAD_F32_COLS : q.N * OHW);
    const int64_t ig = images_grain(q.N, OHW);
    if (2 * ig <= q.N && nb > ig) nb = ig;
    wgrad_job2 j = {.q = &q, .dt = dt, .x = cpu_ptr(&in.v[0]), .gy = cpu_ptr(&in.v[1]), .nb = nb,
                    .trans = wgrad_transposed(&q, dt)};
    const int64_t S = (q.N + nb - 1) / nb;
    if (S == 1) {
        j.part = cpu_ptr(gw);
        wgrad_slices_range(0, 1, &j);
    } else if (!(j.part = cpu_scratch((size_t)(S * GK) * elem))) {
        s = oom();
    } else {
        cpu_parallel_for(S, 1, wgrad_slices_range, &j);
        /* the slices summed in double, in order, a block of elements at a time (a loop over
         * the slices per element, strided and scalar, was a tenth of a 2-thread weight
         * gradient) */
        for (int64_t i0 = 0; i0 < GK; i0 += 256) {
            const int64_t nbk = GK - i0 < 256 ? GK - i0 : 256;
            double t[256];
            for (int64_t i = 0; i < nbk; i++) t[i] = 0;
            for (int64_t k = 0; k < S; k++) {
                if (dt == EM_F32) {
                    const float *pk = (const float *)j.part + k * GK + i0;
                    for (int64_t i = 0; i < nbk; i++) t[i] += pk[i];
                } else {
                    const double *pk = (const double *)j.part + k * GK + i0;
                    for (int64_t i = 0; i < nbk; i++) t[i] += pk[i];
                }
            }
            if (dt == EM_F32)
                for (int64_t i = 0; i < nbk; i++) ((float *)cpu_ptr(gw))[i0 + i] = (float)t[i];
            else
                for (int64_t i = 0; i < nbk; i++) ((double *)cpu_ptr(gw))[i0 + i] = t[i];
        }
        cpu_scratch_free(j.part);
    }
    if (s == EM_OK && atomic_load(&j.failed)) s = oom();
    release(&in);
    return s;
}

/* conv_transpose2d by GEMM + col2im: q is the forward conv whose input is this op's output
 * (N, O planes of H x W = out's) and whose output is this op's input (OH x OW = x's). Chunks
 * of nb images: col [Cg*KH*KW, nb*IHW] = w_g^T @ x's planes [Og, nb*IHW], then the scatter-add
 * over (image, output plane). */
static bool convt_gemm_images(const em_view *out, const em_view *x, const void *px,
                              const void *pw, const void *pb, const em_view *w,
                              const em_conv_args *a, int64_t n_lo, int64_t n_hi) {
    const em_dtype dt = out->dtype;
    const size_t elem = em_dtype_size(dt);
    geom q = {.N = out->shape[0], .C = out->shape[1], .H = out->shape[2], .W = out->shape[3],
              .O = x->shape[1], .OH = x->shape[2], .OW = x->shape[3], .KH = w->shape[2],
              .KW = w->shape[3], .G = a->groups, .sy = a->stride[0], .sx = a->stride[1],
              .py = a->padding[0], .px = a->padding[1], .dy = a->dilation[0],
              .dx = a->dilation[1]};
    q.Cg = q.C / q.G; /* the transposed conv's output channels per group */
    q.Og = q.O / q.G; /* its input channels per group */
    const int64_t KKo = q.Cg * q.KH * q.KW, IHW = q.OH * q.OW, HW = q.H * q.W;
    const int64_t nb = chunk_of(n_hi - n_lo, IHW, (size_t)(KKo + q.Og) * elem, CONVT_COLS);
    void *col = cpu_scratch((size_t)(KKo * nb * IHW) * elem);
    void *xr = nb > 1 ? cpu_scratch((size_t)(q.Og * nb * IHW) * elem) : NULL;
    if (!col || (nb > 1 && !xr)) {
        if (col) cpu_scratch_free(col);
        if (xr) cpu_scratch_free(xr);
        return false;
    }
    for (int64_t n0 = n_lo; n0 < n_hi; n0 += nb) {
        const int64_t m = n_hi - n0 < nb ? n_hi - n0 : nb, cols = m * IHW;
        for (int64_t g = 0; g < q.G; g++) {
            const void *wa = (const char *)pw + (size_t)(g * q.Og * KKo) * elem;
            void *xb = (char *)px + (size_t)((n0 * q.O + g * q.Og) * IHW) * elem;
            if (m > 1) {
                plane_copy(dt, xb, q.O, xr, q.Og, m, IHW, NULL, false);
                xb = xr;
            }
            gemm(dt, CblasTrans, CblasNoTrans, KKo, cols, q.Og, wa, KKo, xb, cols, 0.0, col, cols);
            cols_job j = {.q = &q, .dt = dt, .col = col, .ld = cols};
            j.out = (char *)cpu_ptr(out) + (size_t)((n0 * q.C + g * q.Cg) * HW) * elem;
            j.bias = pb ? (const char *)pb + (size_t)(g * q.Cg) * elem : NULL;
            int64_t grain = (1 << 14) / (HW * q.KH * q.KW > 0 ? HW * q.KH * q.KW : 1);
            cpu_parallel_for(m * q.Cg, grain < 1 ? 1 : grain, col2im_range, &j);
        }
    }
    cpu_scratch_free(col);
    if (xr) cpu_scratch_free(xr);
    return true;
}

static void convt_images_range(int64_t lo, int64_t hi, void *arg) {
    images_job *j = arg;
    if (!convt_gemm_images(j->vout, j->vx, j->x, j->w, j->bias, j->vw, j->a, lo, hi))
        atomic_store_explicit(&j->failed, true, memory_order_relaxed);
}

static em_status convt_gemm(const em_view *out, const em_view *x, const void *px,
                            const void *pw, const void *pb, const em_view *w,
                            const em_conv_args *a) {
    images_job j = {.dt = out->dtype, .x = px, .w = pw, .bias = pb, .vout = out, .vx = x,
                    .vw = w, .a = a};
    const int64_t N = out->shape[0];
    cpu_parallel_for(N, images_grain(N, x->shape[2] * x->shape[3]), convt_images_range, &j);
    return atomic_load(&j.failed) ? oom() : EM_OK;
}

/* A transposed conv with unit strides as the conv2d q of x with the flipped kernel (padding
 * (K-1)*d - p): im2col + GEMM, no col2im's scatter-add. The weights w [C (in), Og, KH, KW] in
 * G groups become wf [O, Cg, KH, KW]: wf[g*Og + o, c, kh, kw] = w[g*Cg + c, o, KH-1-kh, KW-1-kw]. */
static em_status convt_as_conv(const geom *q, em_dtype dt, const void *x, const void *w,
                               const void *bias, void *out) {
    const int64_t KK = q->KH * q->KW, n = q->O * q->Cg * KK;
    void *wf = cpu_scratch((size_t)n * em_dtype_size(dt));
    if (!wf) return oom();
    for (int64_t g = 0; g < q->G; g++)
        for (int64_t o = 0; o < q->Og; o++)
            for (int64_t c = 0; c < q->Cg; c++) {
                const int64_t dst = ((g * q->Og + o) * q->Cg + c) * KK;
                const int64_t src = ((g * q->Cg + c) * q->Og + o) * KK + KK - 1;
                if (dt == EM_F32)
                    for (int64_t t = 0; t < KK; t++)
                        ((float *)wf)[dst + t] = ((const float *)w)[src - t];
                else
                    for (int64_t t = 0; t < KK; t++)
                        ((double *)wf)[dst + t] = ((const double *)w)[src - t];
            }
    em_status s = conv_gemm(q, dt, x, wf, bias, out);
    cpu_scratch_free(wf);
    return s;
}

/* The taps of one output phase of a strided transposed conv along one axis: output index
 * i = r + s*m (phase r) gets, from kernel taps k with k*d = r + p (mod s), the input at
 * m + (r + p - k*d)/s. Those taps are k0, k0 + step, ... (J of them, step = s/gcd(s, d)), the
 * inputs they read m + e0 - j*dd: a unit-stride conv of the input with the J taps reversed,
 * dilation dd, padding (J-1)*dd - e0. n: the phase's outputs, ceil((size - r)/s). */
typedef struct phase_axis {
    int64_t k0, step, J, dd, pad, n;
} phase_axis;

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        const int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static phase_axis phase_of(int64_t r, int64_t s, int64_t p, int64_t d, int64_t K, int64_t size) {
    phase_axis ph = {.step = s / gcd64(s, d), .n = size > r ? (size - r + s - 1) / s : 0};
    ph.dd = ph.step * d / s;
    ph.k0 = -1;
    for (int64_t k = 0; k < K && k < s; k++)
        if (((k * d - r - p) % s + s) % s == 0) {
            ph.k0 = k;
            break;
        }
    if (ph.k0 < 0) return ph; /* J = 0: no tap reaches this phase */
    ph.J = (K - 1 - ph.k0) / ph.step + 1;
    const int64_t e0 = (r + p - ph.k0 * d) / s; /* exact */
    ph.pad = (ph.J - 1) * ph.dd - e0;
    return ph;
}

/* A transposed conv with strides as sy*sx unit-stride convs (one an output phase), each with
 * the direct kernels into scratch, then scattered into out's phase: no col2im, no products
 * of zeros. EMBER_CPU_CONV=direct only: on a ResNet's stride-2 input gradients (3x3, 16..64
 * channels, 32x32 and 16x16 outputs; AMD EPYC, AVX2) it ran 1.0-1.5x slower than GEMM +
 * col2im (the phases' 1x1 and 1x2 kernels have short sums, and each phase pads and
 * scatters). q0 holds the shapes (x's as the input, out's as the output), w the transposed
 * conv's weights [C_in, Og, KH, KW]. Returns false (nothing written) when a phase's conv is
 * not for the direct kernels. */
static bool convt_phases_apply(const geom *q0, const em_conv_args *a, em_dtype dt) {
    for (int64_t ry = 0; ry < a->stride[0] && ry < q0->OH; ry++)
        for (int64_t rx = 0; rx < a->stride[1] && rx < q0->OW; rx++) {
            const phase_axis py = phase_of(ry, a->stride[0], a->padding[0], a->dilation[0],
                                           q0->KH, q0->OH);
            const phase_axis px = phase_of(rx, a->stride[1], a->padding[1], a->dilation[1],
                                           q0->KW, q0->OW);
            if (py.J == 0 || px.J == 0) continue;
            geom q = *q0;
            q.OH = py.n, q.OW = px.n, q.KH = py.J, q.KW = px.J, q.sy = q.sx = 1;
            q.py = py.pad, q.px = px.pad, q.dy = py.dd, q.dx = px.dd;
            if (!use_direct_of(&q, dt, true)) return false;
        }
    return true;
}

/* planes [lo, hi) of a phase's output (tmp, [N*O][n_h][n_w]) into out's phase (ry, rx) */
typedef struct phase_scatter_job {
    em_dtype dt;
    const void *tmp;
    void *out;
    int64_t H, W, ry, rx, sy, sx, n_h, n_w;
} phase_scatter_job;

static void phase_scatter_range(int64_t lo, int64_t hi, void *arg) {
    const phase_scatter_job *j = arg;
    for (int64_t p = lo; p < hi; p++)
        for (int64_t my = 0; my < j->n_h; my++) {
            const int64_t d0 = (p * j->H + j->ry + my * j->sy) * j->W + j->rx;
            const int64_t s0 = (p * j->n_h + my) * j->n_w;
            if (j->dt == EM_F32) {
                float *d = (float *)j->out + d0;
                const float *t = (const float *)j->tmp + s0;
                for (int64_t mx = 0; mx < j->n_w; mx++) d[mx * j->sx] = t[mx];
            } else {
                double *d = (double *)j->out + d0;
                const double *t = (const double *)j->tmp + s0;
                for (int64_t mx = 0; mx < j->n_w; mx++) d[mx * j->sx] = t[mx];
            }
        }
}

static em_status convt_phases(const geom *q0, const em_conv_args *a, em_dtype dt,
                              const void *x, const void *w, const void *bias, void *out) {
    const size_t elem = em_dtype_size(dt);
    const int64_t N = q0->N, O = q0->O, H = q0->OH, W = q0->OW, KK = q0->KH * q0->KW;
    const int64_t sy = a->stride[0], sx = a->stride[1];
    const int64_t mh = (H + sy - 1) / sy, mw = (W + sx - 1) / sx;
    void *tmp = cpu_scratch((size_t)(N * O * mh * mw) * elem);
    void *wf = cpu_scratch((size_t)(O * q0->Cg * KK) * elem);
    em_status s = EM_OK;
    if (!tmp || !wf) s = oom();
    for (int64_t ry = 0; ry < sy && ry < H && s == EM_OK; ry++)
        for (int64_t rx = 0; rx < sx && rx < W && s == EM_OK; rx++) {
            const phase_axis py = phase_of(ry, sy, a->padding[0], a->dilation[0], q0->KH, H);
            const phase_axis px = phase_of(rx, sx, a->padding[1], a->dilation[1], q0->KW, W);
            const int64_t n_h = py.n, n_w = px.n, P = n_h * n_w;
            if (py.J == 0 || px.J == 0) { /* no taps: the bias (or zeros) */
                for (int64_t n = 0; n < N; n++)
                    for (int64_t o = 0; o < O; o++)
                        for (int64_t my = 0; my < n_h; my++)
                            for (int64_t mx = 0; mx < n_w; mx++) {
                                const int64_t i =
                                    ((n * O + o) * H + ry + my * sy) * W + rx + mx * sx;
                                if (dt == EM_F32)
                                    ((float *)out)[i] = bias ? ((const float *)bias)[o] : 0.0f;
                                else
                                    ((double *)out)[i] = bias ? ((const double *)bias)[o] : 0.0;
                            }
                continue;
            }
            geom q = *q0;
            q.OH = n_h, q.OW = n_w, q.KH = py.J, q.KW = px.J, q.sy = q.sx = 1;
            q.py = py.pad, q.px = px.pad, q.dy = py.dd, q.dx = px.dd;
            /* the phase's forward weights [O, Cg, J_h, J_w]: wf[g*Og + o, c, jh, jw] =
             * w[g*Cg + c, o, k0 + (J-1-jh)*step, ...] */
            const int64_t KKp = q.KH * q.KW;
            for (int64_t g = 0; g < q.G; g++)
                for (int64_t o = 0; o < q.Og; o++)
                    for (int64_t c = 0; c < q.Cg; c++)
                        for (int64_t jh = 0; jh < q.KH; jh++)
                            for (int64_t jw = 0; jw < q.KW; jw++) {
                                const int64_t kh = py.k0 + (q.KH - 1 - jh) * py.step;
                                const int64_t kw = px.k0 + (q.KW - 1 - jw) * px.step;
                                const int64_t src =
                                    ((g * q.Cg + c) * q.Og + o) * KK + kh * q0->KW + kw;
                                const int64_t dst =
                                    ((g * q.Og + o) * q.Cg + c) * KKp + jh * q.KW + jw;
                                if (dt == EM_F32)
                                    ((float *)wf)[dst] = ((const float *)w)[src];
                                else
                                    ((double *)wf)[dst] = ((const double *)w)[src];
                            }
            s = conv_direct(&q, dt, x, wf, bias, tmp, 0);
            if (s != EM_OK) break;
            phase_scatter_job sj = {.dt = dt, .tmp = tmp, .out = out, .H = H, .W = W, .ry = ry,
                                    .rx = rx, .sy = sy, .sx = sx, .n_h = n_h, .n_w = n_w};
            const int64_t grain = (1 << 14) / (P > 0 ? P : 1);
            cpu_parallel_for(N * O, grain < 1 ? 1 : grain, phase_scatter_range, &sj);
        }
    if (tmp) cpu_scratch_free(tmp);
    if (wf) cpu_scratch_free(wf);
    return s;
}

static em_status convt_f(const em_view *out, const em_view *x, const em_view *w,
                         const em_view *bias, const em_conv_args *a) {
    inputs in;
    em_status s = contig_inputs(&in, x, w, bias);
    if (s == EM_OK) {
        const void *px = cpu_ptr(&in.v[0]), *pw = cpu_ptr(&in.v[1]);
        const void *pb = bias ? cpu_ptr(&in.v[2]) : NULL;
        /* with unit strides: a conv2d of x with the flipped kernel, padding (K-1)*d - p */
        geom q = {.N = x->shape[0], .C = x->shape[1], .H = x->shape[2], .W = x->shape[3],
                  .O = out->shape[1], .OH = out->shape[2], .OW = out->shape[3],
                  .KH = w->shape[2], .KW = w->shape[3], .G = a->groups, .sy = 1, .sx = 1,
                  .dy = a->dilation[0], .dx = a->dilation[1]};
        q.Cg = q.C / q.G;
        q.Og = q.O / q.G;
        q.py = (q.KH - 1) * q.dy - a->padding[0];
        q.px = (q.KW - 1) * q.dx - a->padding[1];
        const bool unit = a->stride[0] == 1 && a->stride[1] == 1;
        if (unit && use_direct(&q, out->dtype))
            s = conv_direct(&q, out->dtype, px, pw, pb, cpu_ptr(out), 1);
        else if (unit)
            s = convt_as_conv(&q, out->dtype, px, pw, pb, cpu_ptr(out));
        else if (q.KH * q.KW > 1 && conv_forced_direct() &&
                 convt_phases_apply(&q, a, out->dtype))
            s = convt_phases(&q, a, out->dtype, px, pw, pb, cpu_ptr(out));
        else
            s = convt_gemm(out, x, px, pw, pb, w, a);
    }
    release(&in);
    return s;
}

/* ---- the entry points: f32 and f64 run the kernels above; f16 and bf16 run them in f32 (the
 *      operands converted once, the result rounded once); an output of another layout is
 *      computed in scratch and copied; empty operands give the bias (or zeros) ---- */

static bool conv_dtypes(const em_view *out, const em_view *x, const em_view *w,
                        const em_view *bias) {
    const em_dtype dt = out->dtype;
    return (dt == EM_F32 || dt == EM_F64 || dt == EM_F16 || dt == EM_BF16) && x->dtype == dt &&
           w->dtype == dt && (!bias || bias->dtype == dt) && out->rank == 4 && x->rank == 4 &&
           w->rank == 4;
}

/* out (contiguous, f32/f64) = bias[o] (or 0) on every plane: a convolution without terms */
static void fill_bias(const em_view *out, const em_view *bias) {
    const int64_t N = out->shape[0], O = out->shape[1], HW = out->shape[2] * out->shape[3];
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < O; o++) {
            const int64_t base = (n * O + o) * HW;
            if (out->dtype == EM_F32) {
                float v = bias ? ((const float *)cpu_ptr(bias))[o] : 0.0f, *p = cpu_ptr(out);
                for (int64_t i = 0; i < HW; i++) p[base + i] = v;
            } else {
                double v = bias ? ((const double *)cpu_ptr(bias))[o] : 0.0, *p = cpu_ptr(out);
                for (int64_t i = 0; i < HW; i++) p[base + i] = v;
            }
        }
}

enum { CONV_FWD, CONV_WGRAD, CONV_T };

/* out = op(p, q, bias) with the operands staged as the f32/f64 kernels need them */
static em_status conv_staged(int op, const em_view *out, const em_view *p, const em_view *q,
                             const em_view *bias, const em_conv_args *a) {
    if (cpu_numel(out) == 0) return EM_OK;
    const em_dtype ct = cpu_stage_dtype(out->dtype);
    cpu_stage sp = {0}, sq = {0}, sb = {0}, so = {0};
    em_status s = cpu_stage_in(p, ct, &sp);
    if (s == EM_OK) s = cpu_stage_in(q, ct, &sq);
    if (s == EM_OK) s = cpu_stage_in(bias, ct, &sb);
    if (s == EM_OK) s = cpu_stage_out(out, ct, false, &so);
    if (s == EM_OK) {
        const em_view *b = bias ? &sb.v : NULL;
        if (cpu_numel(p) == 0 || cpu_numel(q) == 0)
            fill_bias(&so.v, op == CONV_WGRAD ? NULL : b); /* no terms */
        else if (op == CONV_FWD) s = conv2d_f(&so.v, &sp.v, &sq.v, b, a);
        else if (op == CONV_WGRAD) s = wgrad_f(&so.v, &sp.v, &sq.v, a);
        else s = convt_f(&so.v, &sp.v, &sq.v, b, a);
        s = cpu_stage_out_finish(out, &so, s);
    }
    cpu_stage_free(&sp);
    cpu_stage_free(&sq);
    cpu_stage_free(&sb);
    return s;
}

em_status CPU_K(cpu_conv2d)(void *ctx, const em_view *out, const em_view *x, const em_view *w,
                            const em_view *bias, const em_conv_args *a) {
    if (!conv_dtypes(out, x, w, bias))
        return CPU_FALLBACK(CPU_FB_CONV2D, out->dtype, conv2d, ctx, out, x, w, bias, a);
    return conv_staged(CONV_FWD, out, x, w, bias, a);
}

em_status CPU_K(cpu_conv2d_weight_grad)(void *ctx, const em_view *gw, const em_view *x,
                                        const em_view *gy, const em_conv_args *a) {
    if (!conv_dtypes(gw, x, gy, NULL))
        return CPU_FALLBACK(CPU_FB_CONV2D_WGRAD, gw->dtype, conv2d_weight_grad, ctx, gw, x, gy,
                            a);
    return conv_staged(CONV_WGRAD, gw, x, gy, NULL, a);
}

em_status CPU_K(cpu_conv_transpose2d)(void *ctx, const em_view *out, const em_view *x,
                                      const em_view *w, const em_view *bias,
                                      const em_conv_args *a) {
    if (!conv_dtypes(out, x, w, bias))
        return CPU_FALLBACK(CPU_FB_CONV_T2D, out->dtype, conv_transpose2d, ctx, out, x, w, bias,
                            a);
    return conv_staged(CONV_T, out, x, w, bias, a);
}
