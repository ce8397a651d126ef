/* conv.c — the cpu backend's convolutions for f32 and f64: conv2d, its weight gradient and
 * conv_transpose2d, with any stride, padding, dilation and groups (NCHW).
 *
 * Two methods:
 *   - direct: for a unit column stride (conv2d, and conv_transpose2d with unit strides, which
 *     is a conv2d with the kernel flipped and the padding (K-1)*d - p). Each task copies the
 *     input rows it needs into a zero-padded scratch block, then a register-tiled kernel
 *     (8, 4, 2 or 1 output channels x two vectors of output columns, vectorized with GCC
 *     vector types, cloned for AVX-512 / AVX2+FMA / portable) sums the taps with the bias as
 *     the accumulators' start. Threaded over (image, group, output row).
 *   - im2col + GEMM (OpenBLAS, which threads inside the GEMM) per image and group, for the
 *     strided cases and the large reductions where BLAS wins: conv2d = w_g @ col(x);
 *     conv2d_weight_grad = sum over images of gy_g @ col(x)^T (f32 batches summed in double);
 *     conv_transpose2d = col2im(w_g^T @ x_g), the scatter-add threaded over output channels.
 * Other dtypes, empty tensors and zero channel counts go to the ref kernels. */
#include <cblas.h>
#include <string.h>

#include "cpu.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define CONV_CLONES __attribute__((target_clones("avx512f", "arch=haswell", "default")))
#else
#define CONV_CLONES
#endif

typedef float v16f __attribute__((vector_size(64)));
typedef float v16fu __attribute__((vector_size(64), aligned(4), may_alias));
typedef double v8d __attribute__((vector_size(64)));
typedef double v8du __attribute__((vector_size(64), aligned(8), may_alias));

#define NV 2 /* vectors of output columns per tile */

static em_status oom(void) { return em_backend_set_error(EM_ERR_NOMEM, "cpu: out of memory"); }

/* ceil(a / b) for b > 0 and any a. */
static inline int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }
static inline int64_t clampi(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The geometry of a forward convolution: x [N, C, H, W] -> out [N, O, OH, OW], weights
 * [O, Cg, KH, KW] in G groups. Padding may be negative (a transposed conv as a conv). */
typedef struct geom {
    int64_t N, C, H, W, O, OH, OW, KH, KW, G, Cg, Og;
    int64_t sy, sx, py, px, dy, dx;
} geom;

/* ---- typed helpers (im2col, col2im, bias, padding, weight packing) ---- */

#define TYPED_HELPERS(T, SUF)                                                                  \
    /* col[k, oy*OW + ox] = x[c, iy, ix] for rows k in [k0, k1) (k = (c*KH + kh)*KW + kw). */ \
    static void im2col_##SUF(const T *src, T *col, const geom *q, int64_t k0, int64_t k1) {   \
        const int64_t KK = q->KH * q->KW, OHW = q->OH * q->OW;                                 \
        for (int64_t k = k0; k < k1; k++) {                                                    \
            const int64_t c = k / KK, kh = (k / q->KW) % q->KH, kw = k % q->KW;                \
            const T *sc = src + c * q->H * q->W;                                               \
            T *d = col + k * OHW;                                                              \
            const int64_t off = q->px - kw * q->dx; /* ix = ox*sx - off */                     \
            const int64_t lo = clampi(ceil_div(off, q->sx), 0, q->OW);                         \
            const int64_t hi = clampi(ceil_div(q->W + off, q->sx), lo, q->OW);                 \
            for (int64_t oy = 0; oy < q->OH; oy++, d += q->OW) {                               \
                const int64_t iy = oy * q->sy - q->py + kh * q->dy;                            \
                if (iy < 0 || iy >= q->H) {                                                    \
                    memset(d, 0, (size_t)q->OW * sizeof(T));                                   \
                    continue;                                                                  \
                }                                                                              \
                const T *s = sc + iy * q->W - off;                                             \
                for (int64_t ox = 0; ox < lo; ox++) d[ox] = 0;                                 \
                if (q->sx == 1) {                                                              \
                    if (hi > lo) memcpy(d + lo, s + lo, (size_t)(hi - lo) * sizeof(T));        \
                } else                                                                         \
                    for (int64_t ox = lo; ox < hi; ox++) d[ox] = s[ox * q->sx];                \
                for (int64_t ox = hi; ox < q->OW; ox++) d[ox] = 0;                             \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    /* The transposed conv's scatter for output planes [p0, p1) of one image and group: q is  \
     * the transposed conv's geometry seen from its forward conv (x = the transposed conv's   \
     * output, H x W; col rows (p*KH + kh)*KW + kw over the OH x OW input positions). */       \
    static void col2im_##SUF(const T *col, T *out, const T *bias, const geom *q, int64_t p0,  \
                             int64_t p1) {                                                     \
        const int64_t KK = q->KH * q->KW, OHW = q->OH * q->OW, HW = q->H * q->W;               \
        for (int64_t p = p0; p < p1; p++) {                                                    \
            T *o = out + p * HW;                                                               \
            const T b = bias ? bias[p] : (T)0;                                                 \
            for (int64_t i = 0; i < HW; i++) o[i] = b;                                         \
            for (int64_t kh = 0; kh < q->KH; kh++)                                             \
                for (int64_t kw = 0; kw < q->KW; kw++) {                                       \
                    const T *cr = col + (p * KK + kh * q->KW + kw) * OHW;                      \
                    const int64_t off = q->px - kw * q->dx;                                    \
                    const int64_t lo = clampi(ceil_div(off, q->sx), 0, q->OW);                 \
                    const int64_t hi = clampi(ceil_div(q->W + off, q->sx), lo, q->OW);         \
                    for (int64_t oy = 0; oy < q->OH; oy++) {                                   \
                        const int64_t iy = oy * q->sy - q->py + kh * q->dy;                    \
                        if (iy < 0 || iy >= q->H) continue;                                    \
                        T *orow = o + iy * q->W - off;                                         \
                        const T *c = cr + oy * q->OW;                                          \
                        if (q->sx == 1)                                                        \
                            for (int64_t ox = lo; ox < hi; ox++) orow[ox] += c[ox];            \
                        else                                                                   \
                            for (int64_t ox = lo; ox < hi; ox++) orow[ox * q->sx] += c[ox];    \
                    }                                                                          \
                }                                                                              \
        }                                                                                      \
    }                                                                                          \
    /* Rows [r0, r0 + R) of the zero-padded planes of channels [0, Cg) of src (padded row r   \
     * is input row r - py, padded column j input column j - px), WP columns each. */         \
    static void pad_rows_##SUF(const T *src, T *dst, const geom *q, int64_t r0, int64_t R,    \
                               int64_t WP) {                                                   \
        const int64_t a = clampi(q->px, 0, WP), b = clampi(q->W + q->px, a, WP);               \
        for (int64_t c = 0; c < q->Cg; c++) {                                                  \
            const T *sc = src + c * q->H * q->W;                                               \
            for (int64_t r = 0; r < R; r++) {                                                  \
                T *d = dst + (c * R + r) * WP;                                                 \
                const int64_t iy = r0 + r - q->py;                                             \
                if (iy < 0 || iy >= q->H || a >= b) {                                          \
                    memset(d, 0, (size_t)WP * sizeof(T));                                      \
                    continue;                                                                  \
                }                                                                              \
                for (int64_t j = 0; j < a; j++) d[j] = 0;                                      \
                memcpy(d + a, sc + iy * q->W + (a - q->px), (size_t)(b - a) * sizeof(T));      \
                for (int64_t j = b; j < WP; j++) d[j] = 0;                                     \
            }                                                                                  \
        }                                                                                      \
    }

TYPED_HELPERS(float, f32)
TYPED_HELPERS(double, f64)

/* ---- the direct kernel ---- */

/* Output channels per block for `rem` channels left. */
static inline int64_t block_of(int64_t rem) { return rem >= 8 ? 8 : rem >= 4 ? 4 : rem >= 2 ? 2 : 1; }

typedef struct direct_job {
    geom q;
    const void *x;     /* [N, C, H, W] contiguous */
    void *out;         /* [N, O, OH, OW] */
    const void *wpk;   /* per group, per block of ob channels starting at o0: [K][ob] at (g*Og + o0)*K */
    const void *bias;  /* [O] or NULL */
    int64_t WP;        /* padded row length */
    int64_t elem;      /* sizeof(T) */
    em_status status;  /* EM_ERR_NOMEM when a task's scratch failed */
} direct_job;

/* One tile: OB output channels x NV vectors of VL columns starting at column ox0 of output
 * row `orow` (planes OHW apart); xr points at the padded row of channel 0, tap (0, 0),
 * column ox0. */
#define DIRECT_TILE(T, V, VU, VL, OB)                                                          \
    do {                                                                                       \
        V acc[OB][NV];                                                                         \
        for (int ob = 0; ob < OB; ob++)                                                        \
            for (int v = 0; v < NV; v++) acc[ob][v] = (V){0} + (bg ? bg[o0 + ob] : (T)0);      \
        const T *wk = wb;                                                                      \
        for (int64_t c = 0; c < Cg; c++)                                                       \
            for (int64_t kh = 0; kh < KH; kh++) {                                              \
                const T *xk = xr + c * plane + kh * rowstep;                                   \
                for (int64_t kw = 0; kw < KW; kw++, xk += dx, wk += OB) {                      \
                    V xv[NV];                                                                  \
                    for (int v = 0; v < NV; v++) xv[v] = *(const VU *)(xk + v * VL);           \
                    for (int ob = 0; ob < OB; ob++) {                                          \
                        const T wv = wk[ob];                                                   \
                        for (int v = 0; v < NV; v++) acc[ob][v] += wv * xv[v];                 \
                    }                                                                          \
                }                                                                              \
            }                                                                                  \
        if (!partial) {                                                                        \
            for (int ob = 0; ob < OB; ob++)                                                    \
                for (int v = 0; v < NV; v++)                                                   \
                    *(VU *)(orow + ob * OHW + ox0 + v * VL) = acc[ob][v];                      \
        } else {                                                                               \
            for (int ob = 0; ob < OB; ob++) {                                                  \
                T tmp[NV * VL];                                                                \
                for (int v = 0; v < NV; v++) *(VU *)(tmp + v * VL) = acc[ob][v];               \
                memcpy(orow + ob * OHW + ox0, tmp, (size_t)(OW - ox0) * sizeof(T));            \
            }                                                                                  \
        }                                                                                      \
    } while (0)

/* Output rows [a, b) of image n, group g; xp holds the padded rows a*sy .. of the group's
 * channels (R rows each, WP columns). */
#define DIRECT_ROWS(T, V, VU, VL, SUF)                                                         \
    _Pragma("GCC push_options") _Pragma("GCC optimize(\"fp-contract=fast\")")                  \
    CONV_CLONES static void direct_rows_##SUF(const direct_job *j, const T *xp, int64_t R,     \
                                              int64_t n, int64_t g, int64_t a, int64_t b) {    \
        const geom *q = &j->q;                                                                 \
        const int64_t Cg = q->Cg, KH = q->KH, KW = q->KW, dx = q->dx, OW = q->OW;              \
        const int64_t OHW = q->OH * OW, K = Cg * KH * KW, WP = j->WP;                          \
        const int64_t plane = R * WP, rowstep = q->dy * WP;                                    \
        const T *wg = (const T *)j->wpk + g * q->Og * K;                                       \
        const T *bg = j->bias ? (const T *)j->bias + g * q->Og : NULL;                         \
        T *og = (T *)j->out + (n * q->O + g * q->Og) * OHW;                                    \
        for (int64_t oy = a; oy < b; oy++) {                                                   \
            const T *xrow = xp + (oy - a) * q->sy * WP;                                        \
            for (int64_t o0 = 0; o0 < q->Og;) {                                                \
                const int64_t nb = block_of(q->Og - o0);                                       \
                const T *wb = wg + o0 * K;                                                     \
                T *orow = og + o0 * OHW + oy * OW;                                             \
                for (int64_t t = 0; t < OW; t += NV * VL) {                                    \
                    int64_t ox0 = t;                                                           \
                    int partial = 0;                                                           \
                    if (ox0 + NV * VL > OW) {                                                  \
                        if (OW >= NV * VL) ox0 = OW - NV * VL;                                 \
                        else partial = 1;                                                      \
                    }                                                                          \
                    const T *xr = xrow + ox0;                                                  \
                    switch (nb) {                                                              \
                    case 8: DIRECT_TILE(T, V, VU, VL, 8); break;                               \
                    case 4: DIRECT_TILE(T, V, VU, VL, 4); break;                               \
                    case 2: DIRECT_TILE(T, V, VU, VL, 2); break;                               \
                    default: DIRECT_TILE(T, V, VU, VL, 1); break;                              \
                    }                                                                          \
                }                                                                              \
                o0 += nb;                                                                      \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    _Pragma("GCC pop_options")

DIRECT_ROWS(float, v16f, v16fu, 16, f32)
DIRECT_ROWS(double, v8d, v8du, 8, f64)

/* Work units: (n, g, oy) flattened. Each range pads the rows it needs per (n, g) segment. */
static void direct_range(int64_t lo, int64_t hi, void *arg) {
    direct_job *j = arg;
    const geom *q = &j->q;
    const int64_t span = (q->KH - 1) * q->dy + 1; /* padded rows one output row reads */
    const int64_t rows = hi - lo < q->OH ? hi - lo : q->OH;
    const int64_t Rmax = (rows - 1) * q->sy + span;
    void *xp = cpu_scratch((size_t)(q->Cg * Rmax * j->WP) * (size_t)j->elem);
    if (!xp) {
        j->status = EM_ERR_NOMEM;
        return;
    }
    for (int64_t u = lo; u < hi;) {
        const int64_t ng = u / q->OH, a = u % q->OH;
        const int64_t b = a + (hi - u) < q->OH ? a + (hi - u) : q->OH;
        const int64_t n = ng / q->G, g = ng % q->G;
        const int64_t R = (b - 1 - a) * q->sy + span;
        const size_t src_off = (size_t)((n * q->C + g * q->Cg) * q->H * q->W);
        if (j->elem == 4) {
            pad_rows_f32((const float *)j->x + src_off, xp, q, a * q->sy, R, j->WP);
            direct_rows_f32(j, xp, R, n, g, a, b);
        } else {
            pad_rows_f64((const double *)j->x + src_off, xp, q, a * q->sy, R, j->WP);
            direct_rows_f64(j, xp, R, n, g, a, b);
        }
        u += b - a;
    }
    cpu_scratch_free(xp);
}

/* Packs weights for the direct kernel. w_of(o, c, kh, kw) reads the forward-conv weight:
 * flip = 0: w is [O, Cg, KH, KW]; flip = 1: w is the transposed conv's [C_in, Og, KH, KW]
 * and the forward weight is w[g*Cg + c, o mod Og, KH-1-kh, KW-1-kw]. */
#define PACK(T, SUF)                                                                           \
    static void pack_##SUF(const T *w, T *wpk, const geom *q, int flip) {                     \
        const int64_t KK = q->KH * q->KW, K = q->Cg * KK;                                      \
        for (int64_t g = 0; g < q->G; g++)                                                     \
            for (int64_t o0 = 0; o0 < q->Og;) {                                                \
                const int64_t ob = block_of(q->Og - o0);                                       \
                T *dst = wpk + (g * q->Og + o0) * K;                                           \
                for (int64_t i = 0; i < ob; i++)                                               \
                    for (int64_t c = 0; c < q->Cg; c++)                                        \
                        for (int64_t kh = 0; kh < q->KH; kh++)                                 \
                            for (int64_t kw = 0; kw < q->KW; kw++) {                           \
                                const int64_t k = (c * q->KH + kh) * q->KW + kw;               \
                                const int64_t o = o0 + i;                                      \
                                T v;                                                           \
                                if (!flip)                                                     \
                                    v = w[(g * q->Og + o) * K + k];                            \
                                else                                                           \
                                    v = w[((g * q->Cg + c) * q->Og + o) * KK +                 \
                                          (q->KH - 1 - kh) * q->KW + (q->KW - 1 - kw)];        \
                                dst[k * ob + i] = v;                                           \
                            }                                                                  \
                o0 += ob;                                                                      \
            }                                                                                  \
    }
PACK(float, f32)
PACK(double, f64)

/* Direct convolution for q (sx == 1); x, w, bias contiguous. */
static em_status conv_direct(const geom *q, em_dtype dt, const void *x, const void *w,
                             const void *bias, void *out, int flip) {
    const size_t elem = em_dtype_size(dt);
    const int64_t VL = dt == EM_F32 ? 16 : 8, PW = NV * VL;
    direct_job j = {.q = *q, .x = x, .out = out, .bias = bias, .elem = (int64_t)elem};
    j.WP = (q->OW > PW ? q->OW : PW) + (q->KW - 1) * q->dx;
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
    return j.status == EM_OK ? EM_OK : oom();
}

/* ---- im2col + GEMM ---- */

typedef struct cols_job {
    const geom *q;
    const void *src;
    void *col;
    void *out;
    const void *bias;
    em_dtype dt;
} cols_job;

static void im2col_range(int64_t lo, int64_t hi, void *arg) {
    const cols_job *j = arg;
    if (j->dt == EM_F32) im2col_f32(j->src, j->col, j->q, lo, hi);
    else im2col_f64(j->src, j->col, j->q, lo, hi);
}

static void col2im_range(int64_t lo, int64_t hi, void *arg) {
    const cols_job *j = arg;
    if (j->dt == EM_F32) col2im_f32(j->col, j->out, j->bias, j->q, lo, hi);
    else col2im_f64(j->col, j->out, j->bias, j->q, lo, hi);
}

/* col = im2col of image n, group g (parallel over the K rows). */
static void im2col_image(const geom *q, em_dtype dt, const void *x, void *col, int64_t n,
                         int64_t g) {
    const size_t elem = em_dtype_size(dt);
    cols_job j = {.q = q, .dt = dt, .col = col};
    j.src = (const char *)x + (size_t)((n * q->C + g * q->Cg) * q->H * q->W) * elem;
    const int64_t K = q->Cg * q->KH * q->KW, OHW = q->OH * q->OW;
    int64_t grain = (1 << 14) / (OHW > 0 ? OHW : 1);
    cpu_parallel_for(K, grain < 1 ? 1 : grain, im2col_range, &j);
}

/* A 1x1 kernel with unit stride and no padding reads x as it is: no im2col. */
static bool is_pointwise(const geom *q) {
    return q->KH == 1 && q->KW == 1 && q->sy == 1 && q->sx == 1 && q->py == 0 && q->px == 0;
}

static void gemm(em_dtype dt, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n,
                 int64_t k, const void *a, int64_t lda, const void *b, int64_t ldb, double beta,
                 void *c, int64_t ldc) {
    if (dt == EM_F32)
        cblas_sgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)k, 1.0f, a,
                    (blasint)lda, b, (blasint)ldb, (float)beta, c, (blasint)ldc);
    else
        cblas_dgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)k, 1.0, a,
                    (blasint)lda, b, (blasint)ldb, beta, c, (blasint)ldc);
}

static em_status conv_gemm(const geom *q, em_dtype dt, const void *x, const void *w,
                           const void *bias, void *out) {
    const size_t elem = em_dtype_size(dt);
    const int64_t K = q->Cg * q->KH * q->KW, OHW = q->OH * q->OW;
    const bool pw = is_pointwise(q);
    void *col = pw ? NULL : cpu_scratch((size_t)(K * OHW) * elem);
    if (!pw && !col) return oom();
    for (int64_t n = 0; n < q->N; n++)
        for (int64_t g = 0; g < q->G; g++) {
            const void *b;
            if (pw) {
                b = (const char *)x + (size_t)((n * q->C + g * q->Cg) * q->H * q->W) * elem;
            } else {
                im2col_image(q, dt, x, col, n, g);
                b = col;
            }
            char *c = (char *)out + (size_t)((n * q->O + g * q->Og) * OHW) * elem;
            if (bias) {
                for (int64_t o = 0; o < q->Og; o++) {
                    if (dt == EM_F32) {
                        float v = ((const float *)bias)[g * q->Og + o], *r = (float *)c + o * OHW;
                        for (int64_t i = 0; i < OHW; i++) r[i] = v;
                    } else {
                        double v = ((const double *)bias)[g * q->Og + o], *r = (double *)c + o * OHW;
                        for (int64_t i = 0; i < OHW; i++) r[i] = v;
                    }
                }
            }
            gemm(dt, CblasNoTrans, CblasNoTrans, q->Og, OHW, K,
                 (const char *)w + (size_t)(g * q->Og * K) * elem, K, b, OHW, bias ? 1.0 : 0.0,
                 c, OHW);
        }
    if (col) cpu_scratch_free(col);
    return EM_OK;
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

static bool fast_dtype(em_dtype dt) { return dt == EM_F32 || dt == EM_F64; }

/* Whether the direct kernel should run q (unit column stride): it wins while the reduction
 * per output (Cg*KH*KW) is small enough that BLAS's packing does not pay. */
#include <stdlib.h> /* TUNING-TEMP */
static bool use_direct(const geom *q) {
    const char *f = getenv("CPUCONV_FORCE"); /* TUNING-TEMP */
    if (f && *f == 'g') return false;          /* TUNING-TEMP */
    if (f && *f == 'd' && q->sx == 1) return true; /* TUNING-TEMP */
    if (q->sx != 1 || is_pointwise(q)) return false;
    const int64_t K = q->Cg * q->KH * q->KW;
    return K <= 256 || q->Og < 8;
}

em_status cpu_conv2d(void *ctx, const em_view *out, const em_view *x, const em_view *w,
                     const em_view *bias, const em_conv_args *a) {
    if (!fast_dtype(out->dtype) || !cpu_contiguous(out) || cpu_numel(out) == 0 ||
        w->shape[1] == 0)
        return cpu_ref()->conv2d(ctx, out, x, w, bias, a);
    geom q = geom_of(x, out, w->shape[2], w->shape[3], w->shape[1], a);
    inputs in;
    em_status s = contig_inputs(&in, x, w, bias);
    if (s == EM_OK) {
        const void *px = cpu_ptr(&in.v[0]), *pw = cpu_ptr(&in.v[1]);
        const void *pb = bias ? cpu_ptr(&in.v[2]) : NULL;
        if (use_direct(&q)) s = conv_direct(&q, out->dtype, px, pw, pb, cpu_ptr(out), 0);
        else s = conv_gemm(&q, out->dtype, px, pw, pb, cpu_ptr(out));
    }
    release(&in);
    return s;
}

em_status cpu_conv2d_weight_grad(void *ctx, const em_view *gw, const em_view *x,
                                 const em_view *gy, const em_conv_args *a) {
    if (!fast_dtype(gw->dtype) || !cpu_contiguous(gw) || cpu_numel(gw) == 0 ||
        cpu_numel(gy) == 0)
        return cpu_ref()->conv2d_weight_grad(ctx, gw, x, gy, a);
    const em_dtype dt = gw->dtype;
    const size_t elem = em_dtype_size(dt);
    geom q = geom_of(x, gy, gw->shape[2], gw->shape[3], gw->shape[1], a);
    const int64_t K = q.Cg * q.KH * q.KW, OHW = q.OH * q.OW, GK = q.O * K;
    inputs in;
    em_status s = contig_inputs(&in, x, gy, NULL);
    const bool pw = is_pointwise(&q);
    void *col = NULL, *part = NULL;
    double *acc = NULL;
    if (s == EM_OK && !pw && !(col = cpu_scratch((size_t)(K * OHW) * elem))) s = oom();
    if (s == EM_OK && dt == EM_F32 && q.N > 1) {
        /* f32: each image's product in f32, the batch summed in double */
        part = cpu_scratch((size_t)GK * sizeof(float));
        acc = cpu_scratch((size_t)GK * sizeof(double));
        if (!part || !acc) s = oom();
        else memset(acc, 0, (size_t)GK * sizeof(double));
    }
    if (s == EM_OK) {
        const char *px = cpu_ptr(&in.v[0]), *pgy = cpu_ptr(&in.v[1]);
        char *pgw = cpu_ptr(gw);
        for (int64_t n = 0; n < q.N; n++) {
            for (int64_t g = 0; g < q.G; g++) {
                const void *b;
                if (pw) {
                    b = px + (size_t)((n * q.C + g * q.Cg) * q.H * q.W) * elem;
                } else {
                    im2col_image(&q, dt, px, col, n, g);
                    b = col;
                }
                const void *pa = pgy + (size_t)((n * q.O + g * q.Og) * OHW) * elem;
                char *c = acc ? (char *)part : pgw;
                c += (size_t)(g * q.Og * K) * elem;
                gemm(dt, CblasNoTrans, CblasTrans, q.Og, K, OHW, pa, OHW, b, OHW,
                     acc || n == 0 ? 0.0 : 1.0, c, K);
            }
            if (acc)
                for (int64_t i = 0; i < GK; i++) acc[i] += ((const float *)part)[i];
        }
        if (acc)
            for (int64_t i = 0; i < GK; i++) ((float *)pgw)[i] = (float)acc[i];
    }
    if (col) cpu_scratch_free(col);
    if (part) cpu_scratch_free(part);
    if (acc) cpu_scratch_free(acc);
    release(&in);
    return s;
}

/* conv_transpose2d by GEMM + col2im: q is the forward conv whose input is this op's output
 * (N, O planes of H x W = out's) and whose output is this op's input (OH x OW = x's). */
static em_status convt_gemm(const em_view *out, const em_view *x, const void *px,
                            const void *pw, const void *pb, const em_view *w,
                            const em_conv_args *a) {
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
    void *col = cpu_scratch((size_t)(KKo * IHW) * elem);
    if (!col) return oom();
    for (int64_t n = 0; n < q.N; n++)
        for (int64_t g = 0; g < q.G; g++) {
            /* col [Cg*KH*KW, IHW] = w_g^T @ x_g, w_g = [Og (in), Cg*KH*KW] */
            const void *wa = (const char *)pw + (size_t)(g * q.Og * KKo) * elem;
            const void *xb = (const char *)px + (size_t)((n * q.O + g * q.Og) * IHW) * elem;
            gemm(dt, CblasTrans, CblasNoTrans, KKo, IHW, q.Og, wa, KKo, xb, IHW, 0.0, col, IHW);
            cols_job j = {.q = &q, .dt = dt, .col = col};
            j.out = (char *)cpu_ptr(out) + (size_t)((n * q.C + g * q.Cg) * HW) * elem;
            j.bias = pb ? (const char *)pb + (size_t)(g * q.Cg) * elem : NULL;
            int64_t grain = (1 << 14) / (HW * q.KH * q.KW > 0 ? HW * q.KH * q.KW : 1);
            cpu_parallel_for(q.Cg, grain < 1 ? 1 : grain, col2im_range, &j);
        }
    cpu_scratch_free(col);
    return EM_OK;
}

em_status cpu_conv_transpose2d(void *ctx, const em_view *out, const em_view *x,
                               const em_view *w, const em_view *bias, const em_conv_args *a) {
    if (!fast_dtype(out->dtype) || !cpu_contiguous(out) || cpu_numel(out) == 0 ||
        cpu_numel(x) == 0 || w->shape[1] == 0)
        return cpu_ref()->conv_transpose2d(ctx, out, x, w, bias, a);
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
        if (a->stride[0] == 1 && a->stride[1] == 1 && use_direct(&q))
            s = conv_direct(&q, out->dtype, px, pw, pb, cpu_ptr(out), 1);
        else
            s = convt_gemm(out, x, px, pw, pb, w, a);
    }
    release(&in);
    return s;
}
