/* reduce.c — the cpu backend's reductions, softmax / log_softmax and cumsum, for f32, f64,
 * f16 and bf16 inputs of any layout (strided, transposed, broadcast, offset views; any output
 * strides).
 *
 * A reduction along a dim keeps the other dims (size-1 dims dropped, neighbours merged where
 * the input's and the output's strides allow) and picks one of:
 *   - rows: the reduced dim has unit stride. Each row is reduced in place with blocked,
 *     vectorized accumulators (f16/bf16 converted a block at a time with half.h), rows split
 *     over the thread pool, or, when there are few long rows, each row split into chunks whose
 *     partial results are combined;
 *   - columns: a block of up to RED_BLOCK elements of one kept dim (the one of smallest input
 *     stride) is reduced at once, vectorized across the block: in place for f32/f64 with a
 *     unit column stride, else streamed through a small f32/f64 tile gathered (and converted)
 *     a few rows at a time, the chunks' results combined;
 *   - lines: a strided reduced dim with nothing to vectorize across is gathered line by line.
 * The whole-tensor form reduces one long row (a strided input is packed in order first).
 * Sums accumulate in double (f32 rows: 8 terms in float per lane first), as the ref kernels
 * do; max and min are exact. NaN: max/min/logsumexp give NaN, argmax/argmin give the first
 * NaN's index, softmax rows with a NaN are all NaN — the ref kernels' semantics. Empty lines
 * give ref's values (sum 0, prod 1, logsumexp -inf, mean/var/max/min NaN, arg 0).
 *
 * softmax and cumsum: contiguous f32/f64 run in place; other layouts and the half types go
 * through work tiles of len rows by up to RED_BLOCK columns (or one line), gathered into
 * f32/f64, computed there, scattered to the output. cumsum adds in double in order, as ref.
 * Integer dtypes go to the ref kernels (fallback rows CPU_FB_REDUCE, CPU_FB_CUMSUM). */
#include <math.h>

#include "cpu.h"
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "vmath.h"

#define RED_GRAIN (1 << 15) /* elements per task, about */
#define RED_BLOCK 512       /* columns per block (inner > 1) */
#define RED_LANES 32        /* accumulators of a row reduction */
#define RED_PARTS 64        /* most chunks a long row is split in */

#if defined(__GNUC__)
#define CPU_INLINE inline __attribute__((always_inline))
#define RED_UNUSED __attribute__((unused))
#else
#define RED_UNUSED
#define CPU_INLINE inline
#endif

/* NaN-propagating max / min step: a NaN replaces the accumulator and then stays. */
#define MAXSTEP(m, v) ((((v) > (m)) | ((v) != (v))) ? (v) : (m))
#define MINSTEP(m, v) ((((v) < (m)) | ((v) != (v))) ? (v) : (m))

/* ---- primitives over contiguous data, stamped for float and double ---- */

#define RED_PRIMS(T, S)                                                                            \
    /* sum in double */                                                                            \
    static RED_UNUSED double seg_sum_##S(const T *restrict x, int64_t n) {                         \
        double a[RED_LANES] = {0};                                                                 \
        int64_t i = 0;                                                                             \
        for (; i + RED_LANES <= n; i += RED_LANES)                                                 \
            for (int k = 0; k < RED_LANES; k++) a[k] += (double)x[i + k];                          \
        for (; i + 8 <= n; i += 8)                                                                 \
            for (int k = 0; k < 8; k++) a[k] += (double)x[i + k];                                  \
        double s = 0;                                                                              \
        for (; i < n; i++) s += (double)x[i];                                                      \
        for (int w = RED_LANES / 2; w > 0; w /= 2)                                                 \
            for (int k = 0; k < w; k++) a[k] += a[k + w];                                          \
        return a[0] + s;                                                                           \
    }                                                                                              \
    /* sum of squared deviations from mean, in double */                                           \
    static double seg_sqdev_##S(const T *restrict x, int64_t n, double mean) {                     \
        double a[RED_LANES] = {0};                                                                 \
        int64_t i = 0;                                                                             \
        for (; i + RED_LANES <= n; i += RED_LANES)                                                 \
 for (int k = 0; k < RED_LANES; k++) {                                                             \
                double d = (double)x[i + k] - mean;                                                \
                a[k] += d * d;                                                                     \
            }                                                                                      \
        for (; i + 8 <= n; i += 8)                                                                 \
            for (int k = 0; k < 8; k++) {                                                          \
                double d = (double)x[i + k] - mean;                                                \
                a[k] += d * d;                                                                     \
            }                                                                                      \
        double s = 0;                                                                              \
        for (; i < n; i++) {                                                                       \
            double d = (double)x[i] - mean;                                                        \
            s += d * d;                                                                            \
        }                                                                                          \
        for (int w = RED_LANES / 2; w > 0; w /= 2)                                                 \
            for (int k = 0; k < w; k++) a[k] += a[k + w];                                          \
        return a[0] + s;                                                                           \
    }                                                                                              \
    /* max / min, NaN if any element is NaN (n >= 1) */                                            \
    static T seg_max_##S(const T *restrict x, int64_t n) {                                         \
        T a[RED_LANES];                                                                            \
        for (int k = 0; k < RED_LANES; k++) a[k] = x[0];                                           \
        int64_t i = 0;                                                                             \
        for (; i + RED_LANES <= n; i += RED_LANES)                                                 \
 for (int k = 0; k < RED_LANES; k++) a[k] = MAXSTEP(a[k], x[i + k]);                               \
        for (; i + 8 <= n; i += 8)                                                                 \
            for (int k = 0; k < 8; k++) a[k] = MAXSTEP(a[k], x[i + k]);                             \
        for (; i < n; i++) a[0] = MAXSTEP(a[0], x[i]);                                             \
        for (int w = RED_LANES / 2; w > 0; w /= 2) /* a tree: NaN anywhere gives NaN */          \
            for (int k = 0; k < w; k++) a[k] = MAXSTEP(a[k], a[k + w]);                             \
        return a[0];                                                                               \
    }                                                                                              \
    static T seg_min_##S(const T *restrict x, int64_t n) {                                         \
        T a[RED_LANES];                                                                            \
        for (int k = 0; k < RED_LANES; k++) a[k] = x[0];                                           \
        int64_t i = 0;                                                                             \
        for (; i + RED_LANES <= n; i += RED_LANES)                                                 \
 for (int k = 0; k < RED_LANES; k++) a[k] = MINSTEP(a[k], x[i + k]);                               \
        for (; i + 8 <= n; i += 8)                                                                 \
            for (int k = 0; k < 8; k++) a[k] = MINSTEP(a[k], x[i + k]);                             \
        for (; i < n; i++) a[0] = MINSTEP(a[0], x[i]);                                             \
        for (int w = RED_LANES / 2; w > 0; w /= 2) /* a tree: NaN anywhere gives NaN */          \
            for (int k = 0; k < w; k++) a[k] = MINSTEP(a[k], a[k + w]);                             \
        return a[0];                                                                               \
    }                                                                                              \
    /* index of the first element equal to m (the first NaN when m is NaN), else n */              \
    static int64_t seg_find_##S(const T *restrict x, int64_t n, T m) {                             \
        int64_t i = 0;                                                                             \
        if (m != m) {                                                                              \
            for (; i + RED_LANES <= n; i += RED_LANES) {                                           \
                int hit = 0;                                                                       \
                for (int k = 0; k < RED_LANES; k++) hit |= x[i + k] != x[i + k];                   \
                if (hit) break;                                                                    \
            }                                                                                      \
            for (; i < n; i++)                                                                     \
                if (x[i] != x[i]) return i;                                                        \
        } else {                                                                                   \
            for (; i + RED_LANES <= n; i += RED_LANES) {                                           \
                int hit = 0;                                                                       \
                for (int k = 0; k < RED_LANES; k++) hit |= x[i + k] == m;                          \
                if (hit) break;                                                                    \
            }                                                                                      \
            for (; i < n; i++)                                                                     \
                if (x[i] == m) return i;                                                           \
        }                                                                                          \
        return n;                                                                                  \
    }                                                                                              \
    /* product in double, in order (as the ref kernel) */                                          \
    static double seg_prod_##S(const T *restrict x, int64_t n) {                                   \
        double p = 1;                                                                              \
        for (int64_t i = 0; i < n; i++) p *= (double)x[i];                                         \
        return p;                                                                                  \
    }                                                                                              \
    /* columns: b columns of len rows, row stride `inner` */                                       \
    static RED_UNUSED void col_sum_##S(const T *restrict x, int64_t len, int64_t inner,            \
                            int64_t b, double *restrict acc) {                                     \
        for (int64_t j = 0; j < b; j++) acc[j] = 0;                                                \
        int64_t r = 0;                                                                             \
        for (; r + 4 <= len; r += 4) { /* four rows per pass over acc, added in order */           \
            const T *restrict r0 = x + r * inner, *restrict r1 = r0 + inner,                       \
                              *restrict r2 = r1 + inner, *restrict r3 = r2 + inner;                \
            for (int64_t j = 0; j < b; j++)                                                        \
                acc[j] = (((acc[j] + (double)r0[j]) + (double)r1[j]) + (double)r2[j]) +            \
                         (double)r3[j];                                                            \
        }                                                                                          \
        for (; r < len; r++) {                                                                     \
            const T *restrict row = x + r * inner;                                                 \
            for (int64_t j = 0; j < b; j++) acc[j] += (double)row[j];                              \
        }                                                                                          \
    }                                                                                              \
    static void col_sqdev_##S(const T *restrict x, int64_t len, int64_t inner,                     \
                              int64_t b, const double *restrict mean,                              \
                              double *restrict acc) {                                              \
        for (int64_t j = 0; j < b; j++) acc[j] = 0;                                                \
        for (int64_t r = 0; r < len; r++) {                                                        \
            const T *restrict row = x + r * inner;                                                 \
            for (int64_t j = 0; j < b; j++) {                                                      \
                double d = (double)row[j] - mean[j];                                               \
                acc[j] += d * d;                                                                   \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void col_prod_##S(const T *restrict x, int64_t len, int64_t inner,                      \
                             int64_t b, double *restrict acc) {                                    \
        for (int64_t j = 0; j < b; j++) acc[j] = 1;                                                \
        for (int64_t r = 0; r < len; r++) {                                                        \
            const T *restrict row = x + r * inner;                                                 \
            for (int64_t j = 0; j < b; j++) acc[j] *= (double)row[j];                              \
        }                                                                                          \
    }                                                                                              \
    static void col_max_##S(const T *restrict x, int64_t len, int64_t inner,                       \
                            int64_t b, T *restrict m) {                                            \
        for (int64_t j = 0; j < b; j++) m[j] = x[j];                                               \
        for (int64_t r = 1; r < len; r++) {                                                        \
            const T *restrict row = x + r * inner;                                                 \
            for (int64_t j = 0; j < b; j++) m[j] = MAXSTEP(m[j], row[j]);                          \
        }                                                                                          \
    }                                                                                              \
    static void col_min_##S(const T *restrict x, int64_t len, int64_t inner,                       \
                            int64_t b, T *restrict m) {                                            \
        for (int64_t j = 0; j < b; j++) m[j] = x[j];                                               \
        for (int64_t r = 1; r < len; r++) {                                                        \
            const T *restrict row = x + r * inner;                                                 \
            for (int64_t j = 0; j < b; j++) m[j] = MINSTEP(m[j], row[j]);                          \
        }                                                                                          \
    }                                                                                              \
    /* first index of the max (min); the first NaN wins */                                         \
    static void col_arg_##S(const T *restrict x, int64_t len, int64_t inner,                       \
                            int64_t b, int is_max, T *restrict m,                                  \
                            int64_t *restrict idx) {                                               \
        for (int64_t j = 0; j < b; j++) {                                                          \
            m[j] = x[j];                                                                           \
            idx[j] = 0;                                                                            \
        }                                                                                          \
        for (int64_t r = 1; r < len; r++) {                                                        \
            const T *restrict row = x + r * inner;                                                 \
            if (is_max)                                                                            \
                for (int64_t j = 0; j < b; j++) {                                                  \
                    T v = row[j];                                                                  \
                    int take = (v > m[j]) | ((v != v) & (m[j] == m[j]));                           \
                    m[j] = take ? v : m[j];                                                        \
                    idx[j] = take ? r : idx[j];                                                    \
                }                                                                                  \
            else                                                                                   \
                for (int64_t j = 0; j < b; j++) {                                                  \
                    T v = row[j];                                                                  \
                    int take = (v < m[j]) | ((v != v) & (m[j] == m[j]));                           \
                    m[j] = take ? v : m[j];                                                        \
                    idx[j] = take ? r : idx[j];                                                    \
                }                                                                                  \
        }                                                                                          \
    }

RED_PRIMS(float, f32)
RED_PRIMS(double, f64)

/* cpu_expf (vmath.h) for the arguments of softmax and logsumexp, x - max: d <= 0 or -inf,
 * never NaN (a NaN or infinite max is answered before). The same operations as cpu_expf on
 * that range, so the same results bit for bit, without its upper clamp and NaN selects. */
static CPU_INLINE float sm_expf(float d) {
    float xc = d < -87.33654f ? -87.33654f : d;
    float n = CPU_RINTF(xc * 1.44269504088896341f);
    float r = CPU_FMAF(n, -0.693359375f, xc);
    r = CPU_FMAF(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = CPU_FMAF(p, r, 1.3981999507e-3f);
    p = CPU_FMAF(p, r, 8.3334519073e-3f);
    p = CPU_FMAF(p, r, 4.1665795894e-2f);
    p = CPU_FMAF(p, r, 1.6666665459e-1f);
    p = CPU_FMAF(p, r, 5.0000001201e-1f);
    p = CPU_FMAF(p * r, r, r) + 1.0f;
    uint32_t e = (uint32_t)((int32_t)n + 127) << 23; /* n + 127 is in 1..127 */
    float scale;
    memcpy(&scale, &e, sizeof scale);
    float y = p * scale;
    return d < -103.972f ? 0.0f : y;
}

/* sum of exp(x - m) in double (m the finite max of x): f32 through sm_expf, a block at a
 * time */
static double seg_sumexp_f32(const float *restrict x, int64_t n, float m) {
    float e[RED_BLOCK];
    double a[RED_LANES] = {0}, s = 0;
    for (int64_t i0 = 0; i0 < n; i0 += RED_BLOCK) {
        int64_t c = n - i0 < RED_BLOCK ? n - i0 : RED_BLOCK;
        for (int64_t j = 0; j < c; j++) e[j] = sm_expf(x[i0 + j] - m);
        int64_t j = 0;
        for (; j + RED_LANES <= c; j += RED_LANES)
            for (int k = 0; k < RED_LANES; k++) a[k] += (double)e[j + k];
        for (; j < c; j++) s += (double)e[j];
    }
    for (int w = RED_LANES / 2; w > 0; w /= 2)
        for (int k = 0; k < w; k++) a[k] += a[k + w];
    return a[0] + s;
}

static double seg_sumexp_f64(const double *restrict x, int64_t n, double m) {
    double a[4] = {0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++) a[k] += exp(x[i + k] - m);
    for (; i < n; i++) a[0] += exp(x[i] - m);
    return (a[0] + a[2]) + (a[1] + a[3]);
}

/* cpu_expf keeping a NaN argument away from its float -> int conversion (guard), for blocks
 * where a column's max is not finite (x - m can then be NaN) */
static CPU_INLINE float expf_g(float d, bool guard) {
    if (!guard) return sm_expf(d); /* finite maxes: d <= 0 */
    float r = cpu_expf(d == d ? d : 0.0f);
    return d == d ? r : d;
}

static CPU_INLINE void col_sumexp_body(const float *restrict x, int64_t len, int64_t inner,
                                       int64_t b, const float *restrict m,
                                       double *restrict acc, bool guard) {
    for (int64_t j = 0; j < b; j++) acc[j] = 0;
    for (int64_t r = 0; r < len; r++) {
        const float *restrict row = x + r * inner;
        for (int64_t j = 0; j < b; j++) acc[j] += (double)expf_g(row[j] - m[j], guard);
    }
}

/** true when every m[0, b) is finite */
static bool all_finite_f32(const float *m, int64_t b) {
    int ok = 1;
    for (int64_t j = 0; j < b; j++) ok &= isfinite(m[j]) != 0;
    return ok;
}

static void col_sumexp_f32(const float *restrict x, int64_t len, int64_t inner,
                           int64_t b, const float *restrict m,
                           double *restrict acc) {
    if (all_finite_f32(m, b))
        col_sumexp_body(x, len, inner, b, m, acc, false);
    else
        col_sumexp_body(x, len, inner, b, m, acc, true);
}

static void col_sumexp_f64(const double *restrict x, int64_t len, int64_t inner, int64_t b,
                           const double *restrict m, double *restrict acc) {
    for (int64_t j = 0; j < b; j++) acc[j] = 0;
    for (int64_t r = 0; r < len; r++) {
        const double *restrict row = x + r * inner;
        for (int64_t j = 0; j < b; j++) acc[j] += exp(row[j] - m[j]);
    }
}

/* f32 sums: 8 rows of 32 lanes added in float (pairwise), then each lane into double — one
 * conversion per 8 elements instead of one per element (memory-bound rows stream at
 * bandwidth); a lane's float error is that of a sum of 8 terms, then everything is in double:
 * more accurate than PyTorch's float cascade, and within the table's f32 tolerance of ref's
 * double sums. */
static CPU_INLINE double seg_sum_f32_fast(const float *restrict x, int64_t n) {
    int64_t i = 0;
    double s = 0;
    if (n >= 8 * RED_LANES) {
        double a[RED_LANES]; /* set by the first block (no memset: short rows are many) */
#define SUM8_BLOCK(OP)                                                                             \
    do {                                                                                           \
        float f[RED_LANES];                                                                        \
        const float *restrict p = x + i;                                                           \
        for (int k = 0; k < RED_LANES; k++)                                                        \
            f[k] = ((p[k] + p[k + RED_LANES]) + (p[k + 2 * RED_LANES] + p[k + 3 * RED_LANES])) +   \
                   ((p[k + 4 * RED_LANES] + p[k + 5 * RED_LANES]) +                                \
                    (p[k + 6 * RED_LANES] + p[k + 7 * RED_LANES]));                                \
        for (int k = 0; k < RED_LANES; k++) a[k] OP(double) f[k];                                  \
    } while (0)
        SUM8_BLOCK(=);
        for (i = 8 * RED_LANES; i + 8 * RED_LANES <= n; i += 8 * RED_LANES) SUM8_BLOCK(+=);
#undef SUM8_BLOCK
        for (; i + RED_LANES <= n; i += RED_LANES)
            for (int k = 0; k < RED_LANES; k++) a[k] += (double)x[i + k];
        for (int w = RED_LANES / 2; w > 0; w /= 2)
            for (int k = 0; k < w; k++) a[k] += a[k + w];
        s = a[0];
    }
    double b[8] = {0}; /* short rows (and the rest of long ones): 8 lanes */
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) b[k] += (double)x[i + k];
    for (; i < n; i++) s += (double)x[i];
    return s + (((b[0] + b[4]) + (b[2] + b[6])) + ((b[1] + b[5]) + (b[3] + b[7])));
}

/* f32 column sums: groups of 8 rows added in float (pairwise) per column, then into the
 * double accumulator */
static void col_sum_f32_fast(const float *restrict x, int64_t len, int64_t rs, int64_t b,
                             double *restrict acc) {
    for (int64_t j = 0; j < b; j++) acc[j] = 0;
    int64_t r = 0;
    for (; r + 8 <= len; r += 8) {
        const float *restrict p = x + r * rs;
        const float *restrict q0 = p, *restrict q1 = p + rs, *restrict q2 = p + 2 * rs,
                              *restrict q3 = p + 3 * rs, *restrict q4 = p + 4 * rs,
                              *restrict q5 = p + 5 * rs, *restrict q6 = p + 6 * rs,
                              *restrict q7 = p + 7 * rs;
        for (int64_t j = 0; j < b; j++)
            acc[j] += (double)(((q0[j] + q1[j]) + (q2[j] + q3[j])) +
                               ((q4[j] + q5[j]) + (q6[j] + q7[j])));
    }
    for (; r < len; r++) {
        const float *restrict row = x + r * rs;
        for (int64_t j = 0; j < b; j++) acc[j] += (double)row[j];
    }
}

/* ---- dtype-generic wrappers: dt is f32, f64, f16 or bf16 (x points at element 0); the
 * half types are converted a block at a time (half.h) and computed with the f32 primitives,
 * their partial results combined in double ---- */

static inline int64_t esz(em_dtype dt) { return dt == EM_F64 ? 8 : dt == EM_F32 ? 4 : 2; }

static inline const void *at(const void *x, em_dtype dt, int64_t i) {
    return (const char *)x + i * esz(dt);
}

#define HALF_BLOCKS(dt, x, n, BODY)                                                                \
    do {                                                                                           \
        float hb_[CPU_HALF_BLOCK];                                                                 \
        for (int64_t i0_ = 0; i0_ < (n); i0_ += CPU_HALF_BLOCK) {                                  \
            const int64_t c_ = (n) - i0_ < CPU_HALF_BLOCK ? (n) - i0_ : CPU_HALF_BLOCK;            \
            cpu_half_to_f32_n((dt), hb_, (const uint16_t *)(x) + i0_, c_);                         \
            BODY                                                                                   \
        }                                                                                          \
    } while (0)

static double g_sum(em_dtype dt, const void *x, int64_t n) {
    if (dt == EM_F32) return seg_sum_f32_fast(x, n);
    if (dt == EM_F64) return seg_sum_f64(x, n);
    double s = 0;
    HALF_BLOCKS(dt, x, n, { s += seg_sum_f32_fast(hb_, c_); });
    return s;
}
static double g_sqdev(em_dtype dt, const void *x, int64_t n, double mean) {
    if (dt == EM_F32) return seg_sqdev_f32(x, n, mean);
    if (dt == EM_F64) return seg_sqdev_f64(x, n, mean);
    double s = 0;
    HALF_BLOCKS(dt, x, n, { s += seg_sqdev_f32(hb_, c_, mean); });
    return s;
}
static double g_max(em_dtype dt, const void *x, int64_t n, int is_max) {
    if (dt == EM_F32) return is_max ? seg_max_f32(x, n) : seg_min_f32(x, n);
    if (dt == EM_F64) return is_max ? seg_max_f64(x, n) : seg_min_f64(x, n);
    float m = 0;
    HALF_BLOCKS(dt, x, n, {
        float v = is_max ? seg_max_f32(hb_, c_) : seg_min_f32(hb_, c_);
        m = i0_ == 0 ? v : is_max ? MAXSTEP(m, v) : MINSTEP(m, v);
    });
    return m;
}
static int64_t g_find(em_dtype dt, const void *x, int64_t n, double m) {
    if (dt == EM_F32) return seg_find_f32(x, n, (float)m);
    if (dt == EM_F64) return seg_find_f64(x, n, m);
    HALF_BLOCKS(dt, x, n, {
        int64_t k = seg_find_f32(hb_, c_, (float)m);
        if (k < c_) return i0_ + k;
    });
    return n;
}
static double g_sumexp(em_dtype dt, const void *x, int64_t n, double m) {
    if (dt == EM_F32) return seg_sumexp_f32(x, n, (float)m);
    if (dt == EM_F64) return seg_sumexp_f64(x, n, m);
    double s = 0;
    HALF_BLOCKS(dt, x, n, { s += seg_sumexp_f32(hb_, c_, (float)m); });
    return s;
}
static double g_prod(em_dtype dt, const void *x, int64_t n) {
    if (dt == EM_F32) return seg_prod_f32(x, n);
    if (dt == EM_F64) return seg_prod_f64(x, n);
    double p = 1;
    HALF_BLOCKS(dt, x, n, {
        for (int64_t k = 0; k < c_; k++) p *= (double)hb_[k];
    });
    return p;
}

/** The ref kernel's variance from the sum of squared deviations. */
static double var_of(double m2, int64_t n, double corr) {
    double div = (double)n - corr;
    return m2 / (div > 0 ? div : 0.0);
}

/** A value reduction of one contiguous row (n >= 1). */
static double row_value(em_reduce_op op, em_dtype dt, const void *x, int64_t n, double corr) {
    switch (op) {
    case EM_RED_SUM: return g_sum(dt, x, n);
    case EM_RED_MEAN: return g_sum(dt, x, n) / (double)n;
    case EM_RED_PROD: return g_prod(dt, x, n);
    case EM_RED_MAX: return g_max(dt, x, n, 1);
    case EM_RED_MIN: return g_max(dt, x, n, 0);
    case EM_RED_VAR: {
        double mean = g_sum(dt, x, n) / (double)n;
        return var_of(g_sqdev(dt, x, n, mean), n, corr);
    }
    case EM_RED_LOGSUMEXP: {
        double m = g_max(dt, x, n, 1);
        if (m != m || isinf(m)) return m;
        return m + log(g_sumexp(dt, x, n, m));
    }
    default: return NAN;
    }
}

/** argmax / argmin of one contiguous row (n >= 1): the first extreme, or the first NaN. */
static int64_t row_arg(em_reduce_op op, em_dtype dt, const void *x, int64_t n) {
    double m = g_max(dt, x, n, op == EM_RED_ARGMAX);
    int64_t i = g_find(dt, x, n, m);
    return i < n ? i : 0;
}

static inline bool is_arg(em_reduce_op op) {
    return op == EM_RED_ARGMAX || op == EM_RED_ARGMIN;
}

/** Stores v at element i of out (dtype dt), rounded as ref_st does. */
static inline void store(void *out, em_dtype dt, int64_t i, double v) {
    switch (dt) {
    case EM_F32: ((float *)out)[i] = (float)v; break;
    case EM_F64: ((double *)out)[i] = v; break;
    case EM_F16: ((uint16_t *)out)[i] = em_f32_to_f16((float)v); break;
    default: ((uint16_t *)out)[i] = em_f32_to_bf16((float)v); break;
    }
}

/* ---- strided lines: gathered into (scattered from) contiguous f32 / f64 work rows ---- */

/** The work dtype of dt: f64 for f64, else f32. */
static inline em_dtype work_dt(em_dtype dt) { return dt == EM_F64 ? EM_F64 : EM_F32; }

/** dst[0, n) (work dtype of dt) = the n elements of x (dtype dt) at element offsets
 *  off + i * st. */
static void gather_line(void *restrict dst, const void *x, em_dtype dt, int64_t off, int64_t n,
                        int64_t st) {
    if (dt == EM_F64) {
        const double *p = (const double *)x + off;
        double *o = dst;
        if (st == 1) memcpy(o, p, (size_t)n * 8);
        else
            for (int64_t i = 0; i < n; i++) o[i] = p[i * st];
    } else if (dt == EM_F32) {
        const float *p = (const float *)x + off;
        float *o = dst;
        if (st == 1) memcpy(o, p, (size_t)n * 4);
        else
            for (int64_t i = 0; i < n; i++) o[i] = p[i * st];
    } else {
        const uint16_t *p = (const uint16_t *)x + off;
        float *o = dst;
        if (st == 1) {
            cpu_half_to_f32_n(dt, o, p, n);
            return;
        }
        uint16_t h[256];
        for (int64_t i0 = 0; i0 < n; i0 += 256) {
            int64_t c = n - i0 < 256 ? n - i0 : 256;
            for (int64_t i = 0; i < c; i++) h[i] = p[(i0 + i) * st];
            cpu_half_to_f32_n(dt, o + i0, h, c);
        }
    }
}

/** The n elements of out (dtype dt) at element offsets off + i * st = src[0, n) (work
 *  dtype), rounded to dt. */
static void scatter_line(void *out, em_dtype dt, int64_t off, int64_t n, int64_t st,
                         const void *restrict src) {
    if (dt == EM_F64) {
        double *p = (double *)out + off;
        const double *s = src;
        if (st == 1) memcpy(p, s, (size_t)n * 8);
        else
            for (int64_t i = 0; i < n; i++) p[i * st] = s[i];
    } else if (dt == EM_F32) {
        float *p = (float *)out + off;
        const float *s = src;
        if (st == 1) memcpy(p, s, (size_t)n * 4);
        else
            for (int64_t i = 0; i < n; i++) p[i * st] = s[i];
    } else {
        uint16_t *p = (uint16_t *)out + off;
        const float *s = src;
        if (st == 1) {
            cpu_f32_to_half_n(dt, p, s, n);
            return;
        }
        uint16_t h[256];
        for (int64_t i0 = 0; i0 < n; i0 += 256) {
            int64_t c = n - i0 < 256 ? n - i0 : 256;
            cpu_f32_to_half_n(dt, h, s + i0, c);
            for (int64_t i = 0; i < c; i++) p[(i0 + i) * st] = h[i];
        }
    }
}

/* ---- the dims kept by a reduction (or iterated by softmax / cumsum) ----
 * The dims other than the reduced one, size-1 dims dropped and neighbours merged where both
 * the input's and the output's strides allow; walked with an odometer. */

typedef struct kdims {
    int n;
    int64_t size[EM_MAX_RANK], is[EM_MAX_RANK], os[EM_MAX_RANK];
} kdims;

/** The dims of in (and out, same rank) but `skip` (-1: none), merged. */
static void kd_build(kdims *k, const em_view *in, const em_view *out, int skip) {
    k->n = 0;
    for (int d = 0; d < in->rank; d++) {
        if (d == skip || in->shape[d] == 1) continue;
        int64_t sz = in->shape[d], is = in->strides[d], os = out->strides[d];
        if (k->n > 0 && k->is[k->n - 1] == sz * is && k->os[k->n - 1] == sz * os) {
            k->size[k->n - 1] *= sz;
            k->is[k->n - 1] = is;
            k->os[k->n - 1] = os;
            continue;
        }
        k->size[k->n] = sz;
        k->is[k->n] = is;
        k->os[k->n] = os;
        k->n++;
    }
}

/** Removes dim c of k into *size, *is, *os. */
static void kd_take(kdims *k, int c, int64_t *size, int64_t *is, int64_t *os) {
    *size = k->size[c];
    *is = k->is[c];
    *os = k->os[c];
    for (int d = c; d + 1 < k->n; d++) {
        k->size[d] = k->size[d + 1];
        k->is[d] = k->is[d + 1];
        k->os[d] = k->os[d + 1];
    }
    k->n--;
}

/** The kept dim whose input stride is smallest in magnitude (the last one of ties), -1 when
 *  none. A stride-0 (broadcast) dim is never preferred to a strided one. */
static int kd_column(const kdims *k) {
    int best = -1;
    int64_t bs = 0;
    for (int d = 0; d < k->n; d++) {
        int64_t s = k->is[d] < 0 ? -k->is[d] : k->is[d];
        if (s == 0) s = INT64_MAX;
        if (best < 0 || s <= bs) {
            best = d;
            bs = s;
        }
    }
    return best;
}

static int64_t kd_numel(const kdims *k) {
    int64_t m = 1;
    for (int d = 0; d < k->n; d++) m *= k->size[d];
    return m;
}

typedef struct kd_pos {
    int64_t idx[EM_MAX_RANK], io, oo;
} kd_pos;

static void kd_seek(const kdims *k, int64_t i, kd_pos *p) {
    p->io = p->oo = 0;
    for (int d = k->n - 1; d >= 0; d--) {
        p->idx[d] = i % k->size[d];
        i /= k->size[d];
        p->io += p->idx[d] * k->is[d];
        p->oo += p->idx[d] * k->os[d];
    }
}

static void kd_next(const kdims *k, kd_pos *p) {
    for (int d = k->n - 1; d >= 0; d--) {
        p->idx[d]++;
        p->io += k->is[d];
        p->oo += k->os[d];
        if (p->idx[d] < k->size[d]) return;
        p->io -= p->idx[d] * k->is[d];
        p->oo -= p->idx[d] * k->os[d];
        p->idx[d] = 0;
    }
}

/* ---- rows: one task reduces whole rows (contiguous along the reduced dim) ---- */

typedef struct red_job {
    em_reduce_op op;
    em_dtype dt; /* the input's dtype; values are stored in it, arg results as i64 */
    const void *x;
    void *out;
    int64_t len, ls; /* the reduced dim: extent and input stride */
    kdims k;         /* rows: every kept dim; columns: the kept dims but the column dim */
    int64_t cn, cis, cos, bw, nblk; /* columns: the column dim, block width, blocks */
    bool direct;                    /* columns read in place (f32/f64, unit column stride) */
    double corr;
    _Atomic int nomem;
} red_job;

static void rows_range(int64_t lo, int64_t hi, void *arg) {
    red_job *j = arg;
    kd_pos p;
    kd_seek(&j->k, lo, &p);
    if (j->dt == EM_F32 && (j->op == EM_RED_SUM || j->op == EM_RED_MEAN)) {
        /* the common case without the per-row dispatch (short rows are many) */
        const float *x = j->x;
        float *o = j->out;
        const int64_t len = j->len;
        const bool mean = j->op == EM_RED_MEAN;
        for (int64_t r = lo; r < hi; r++, kd_next(&j->k, &p)) {
            double v = seg_sum_f32_fast(x + p.io, len);
            o[p.oo] = (float)(mean ? v / (double)len : v);
        }
        return;
    }
    for (int64_t r = lo; r < hi; r++, kd_next(&j->k, &p)) {
        const void *x = at(j->x, j->dt, p.io);
        if (is_arg(j->op))
            ((int64_t *)j->out)[p.oo] = row_arg(j->op, j->dt, x, j->len);
        else
            store(j->out, j->dt, p.oo, row_value(j->op, j->dt, x, j->len, j->corr));
    }
}

/* ---- one long row split in chunks whose partial results are combined ---- */

typedef enum { P_SUM, P_SQDEV, P_MAX, P_MIN, P_ARGMAX, P_ARGMIN, P_SUMEXP } part_kind;

typedef struct part_job {
    part_kind kind;
    em_dtype dt;
    const void *x;
    int64_t n, cs;
    double param; /* the mean (P_SQDEV) or the max (P_SUMEXP) */
    double val[RED_PARTS];
    int64_t idx[RED_PARTS];
} part_job;

static void part_range(int64_t lo, int64_t hi, void *arg) {
    part_job *j = arg;
    for (int64_t c = lo; c < hi; c++) {
        int64_t b = c * j->cs, n = j->n - b < j->cs ? j->n - b : j->cs;
        const void *p = at(j->x, j->dt, b);
        switch (j->kind) {
        case P_SUM: j->val[c] = g_sum(j->dt, p, n); break;
        case P_SQDEV: j->val[c] = g_sqdev(j->dt, p, n, j->param); break;
        case P_MAX: j->val[c] = g_max(j->dt, p, n, 1); break;
        case P_MIN: j->val[c] = g_max(j->dt, p, n, 0); break;
        case P_SUMEXP: j->val[c] = g_sumexp(j->dt, p, n, j->param); break;
        case P_ARGMAX:
        case P_ARGMIN: {
            double m = g_max(j->dt, p, n, j->kind == P_ARGMAX);
            int64_t i = g_find(j->dt, p, n, m);
            j->val[c] = m;
            j->idx[c] = b + (i < n ? i : 0);
            break;
        }
        }
    }
}

/** Runs one kind of partial over the row; returns the number of chunks. */
static int64_t parts_run(part_job *j, part_kind kind, double param) {
    int64_t np = j->n / RED_GRAIN;
    if (np > RED_PARTS) np = RED_PARTS;
    if (np < 1) np = 1;
    j->cs = (j->n + np - 1) / np;
    np = (j->n + j->cs - 1) / j->cs;
    j->kind = kind;
    j->param = param;
    cpu_parallel_for(np, 1, part_range, j);
    return np;
}

static double parts_sum(part_job *j, part_kind kind, double param) {
    int64_t np = parts_run(j, kind, param);
    double s = 0;
    for (int64_t c = 0; c < np; c++) s += j->val[c];
    return s;
}

static double parts_max(part_job *j, int is_max) {
    int64_t np = parts_run(j, is_max ? P_MAX : P_MIN, 0);
    double m = j->val[0];
    for (int64_t c = 1; c < np; c++) m = is_max ? MAXSTEP(m, j->val[c]) : MINSTEP(m, j->val[c]);
    return m;
}

/** Reduces the long row x[0, n) (n >= 1) with every thread; stores out[oi]. */
static void long_row(em_reduce_op op, em_dtype dt, const void *x, int64_t n, double corr,
                     void *out, int64_t oi) {
    part_job j = {.dt = dt, .x = x, .n = n};
    double r;
    switch (op) {
    case EM_RED_SUM: r = parts_sum(&j, P_SUM, 0); break;
    case EM_RED_MEAN: r = parts_sum(&j, P_SUM, 0) / (double)n; break;
    case EM_RED_PROD: r = g_prod(dt, x, n); break; /* in order, as ref */
    case EM_RED_MAX: r = parts_max(&j, 1); break;
    case EM_RED_MIN: r = parts_max(&j, 0); break;
    case EM_RED_VAR: {
        double mean = parts_sum(&j, P_SUM, 0) / (double)n;
        r = var_of(parts_sum(&j, P_SQDEV, mean), n, corr);
        break;
    }
    case EM_RED_LOGSUMEXP: {
        double m = parts_max(&j, 1);
        r = (m != m || isinf(m)) ? m : m + log(parts_sum(&j, P_SUMEXP, m));
        break;
    }
    case EM_RED_ARGMAX:
    case EM_RED_ARGMIN: {
        int is_max = op == EM_RED_ARGMAX;
        int64_t np = parts_run(&j, is_max ? P_ARGMAX : P_ARGMIN, 0), best_i = 0;
        double best = 0;
        for (int64_t c = 0; c < np; c++) {
            double v = j.val[c];
            if (v != v) {
                best_i = j.idx[c];
                break;
            }
            if (c == 0 || (is_max ? v > best : v < best)) {
                best = v;
                best_i = j.idx[c];
            }
        }
        ((int64_t *)out)[oi] = best_i;
        return;
    }
    default: r = NAN; break;
    }
    store(out, dt, oi, r);
}

/* ---- columns: a block of columns (elements of one kept dim, the column dim) per task ----
 * In place (`direct`) when the input is f32/f64 with a unit column stride: the col_*
 * primitives read the block with the reduced dim's stride. Otherwise the block is streamed
 * through a tile of RED_TROWS rows (gathered and converted to f32/f64), and each chunk's
 * results are combined with the running ones (two passes over the chunks for var and
 * logsumexp). */

#define RED_TROWS 64 /* rows of a column tile */

/** One chunk's values of b columns (rows x[0, n) with row stride rs, work dtype f32 or f64)
 *  for pass `pass` of op: res[k] (and idx[k] for arg ops, ex[k] the running extremes). */
static void col_chunk(em_reduce_op op, int pass, em_dtype wdt, const void *x, int64_t n,
                      int64_t rs, int64_t b, const double *mean, const double *mx,
                      double *restrict res, int64_t *restrict idx) {
    union {
        float f[RED_BLOCK];
        double d[RED_BLOCK];
    } m;
    const bool f32 = wdt == EM_F32;
    switch (op) {
    case EM_RED_SUM:
    case EM_RED_MEAN:
        if (f32) col_sum_f32_fast(x, n, rs, b, res);
        else col_sum_f64(x, n, rs, b, res);
        break;
    case EM_RED_VAR:
        if (pass == 0) {
            if (f32) col_sum_f32_fast(x, n, rs, b, res);
            else col_sum_f64(x, n, rs, b, res);
        } else if (f32) col_sqdev_f32(x, n, rs, b, mean, res);
        else col_sqdev_f64(x, n, rs, b, mean, res);
        break;
    case EM_RED_PROD:
        if (f32) col_prod_f32(x, n, rs, b, res);
        else col_prod_f64(x, n, rs, b, res);
        break;
    case EM_RED_MAX:
    case EM_RED_MIN:
    case EM_RED_LOGSUMEXP:
        if (op == EM_RED_LOGSUMEXP && pass == 1) {
            if (f32) {
                for (int64_t k = 0; k < b; k++) m.f[k] = (float)mx[k];
                col_sumexp_f32(x, n, rs, b, m.f, res);
            } else {
                col_sumexp_f64(x, n, rs, b, mx, res);
            }
            break;
        }
        if (f32) {
            if (op == EM_RED_MIN) col_min_f32(x, n, rs, b, m.f);
            else col_max_f32(x, n, rs, b, m.f);
            for (int64_t k = 0; k < b; k++) res[k] = m.f[k];
        } else {
            if (op == EM_RED_MIN) col_min_f64(x, n, rs, b, res);
            else col_max_f64(x, n, rs, b, res);
        }
        break;
    case EM_RED_ARGMAX:
    case EM_RED_ARGMIN:
        if (f32) {
            col_arg_f32(x, n, rs, b, op == EM_RED_ARGMAX, m.f, idx);
            for (int64_t k = 0; k < b; k++) res[k] = m.f[k];
        } else {
            col_arg_f64(x, n, rs, b, op == EM_RED_ARGMAX, res, idx);
        }
        break;
    default: break;
    }
}

/** Combines a chunk's results (res, idx; rows from r0) into the running ones (acc, aix). */
static void col_combine(em_reduce_op op, int pass, bool first, int64_t r0, int64_t b,
                        double *restrict acc, int64_t *restrict aix, const double *restrict res,
                        const int64_t *restrict idx) {
    if (first) {
        for (int64_t k = 0; k < b; k++) {
            acc[k] = res[k];
            aix[k] = r0 + idx[k];
        }
        return;
    }
    switch (op) {
    case EM_RED_PROD:
        for (int64_t k = 0; k < b; k++) acc[k] *= res[k];
        break;
    case EM_RED_MAX:
        for (int64_t k = 0; k < b; k++) acc[k] = MAXSTEP(acc[k], res[k]);
        break;
    case EM_RED_MIN:
        for (int64_t k = 0; k < b; k++) acc[k] = MINSTEP(acc[k], res[k]);
        break;
    case EM_RED_LOGSUMEXP:
        if (pass == 0)
            for (int64_t k = 0; k < b; k++) acc[k] = MAXSTEP(acc[k], res[k]);
        else
            for (int64_t k = 0; k < b; k++) acc[k] += res[k];
        break;
    case EM_RED_ARGMAX:
    case EM_RED_ARGMIN: {
        const bool mx = op == EM_RED_ARGMAX;
        for (int64_t k = 0; k < b; k++) {
            double v = res[k], a = acc[k];
            bool take = (mx ? v > a : v < a) || (v != v && a == a);
            if (take) {
                acc[k] = v;
                aix[k] = r0 + idx[k];
            }
        }
        break;
    }
    default: /* sums */
        for (int64_t k = 0; k < b; k++) acc[k] += res[k];
        break;
    }
}

static void cols_range(int64_t lo, int64_t hi, void *arg) {
    red_job *j = arg;
    const em_dtype dt = j->dt, wdt = work_dt(dt);
    const em_reduce_op op = j->op;
    const int64_t len = j->len;
    const int npass = op == EM_RED_VAR || op == EM_RED_LOGSUMEXP ? 2 : 1;
    double acc[RED_BLOCK], res[RED_BLOCK], keep[RED_BLOCK];
    int64_t aix[RED_BLOCK], idx[RED_BLOCK];
    void *tile = NULL;
    if (!j->direct) {
        tile = malloc((size_t)(RED_TROWS * j->bw * esz(wdt)));
        if (!tile) {
            j->nomem = 1;
            return;
        }
    }
    for (int64_t it = lo; it < hi; it++) {
        const int64_t o = it / j->nblk, j0 = (it % j->nblk) * j->bw;
        const int64_t b = j->cn - j0 < j->bw ? j->cn - j0 : j->bw;
        kd_pos p;
        kd_seek(&j->k, o, &p);
        const int64_t io = p.io + j0 * j->cis, oo = p.oo + j0 * j->cos;
        for (int64_t k = 0; k < b; k++) idx[k] = 0;
        for (int pass = 0; pass < npass; pass++) {
            const double *mean = keep, *mx = keep;
            if (j->direct) {
                col_chunk(op, pass, dt, at(j->x, dt, io), len, j->ls, b, mean, mx, acc, aix);
            } else {
                for (int64_t r0 = 0; r0 < len; r0 += RED_TROWS) {
                    const int64_t n = len - r0 < RED_TROWS ? len - r0 : RED_TROWS;
                    for (int64_t r = 0; r < n; r++)
                        gather_line((char *)tile + r * b * esz(wdt), j->x, dt,
                                    io + (r0 + r) * j->ls, b, j->cis);
                    col_chunk(op, pass, wdt, tile, n, b, b, mean, mx, res, idx);
                    col_combine(op, pass, r0 == 0, r0, b, acc, aix, res, idx);
                }
            }
            if (pass + 1 < npass) { /* var: the mean; logsumexp: the max */
                for (int64_t k = 0; k < b; k++)
                    keep[k] = op == EM_RED_VAR ? acc[k] / (double)len : acc[k];
            }
        }
        for (int64_t k = 0; k < b; k++) {
            const int64_t ok = oo + k * j->cos;
            double v = acc[k];
            switch (op) {
            case EM_RED_ARGMAX:
            case EM_RED_ARGMIN: ((int64_t *)j->out)[ok] = aix[k]; continue;
            case EM_RED_MEAN: v /= (double)len; break;
            case EM_RED_VAR: v = var_of(v, len, j->corr); break;
            case EM_RED_LOGSUMEXP: {
                double mk = keep[k];
                v = (mk != mk || isinf(mk)) ? mk : mk + log(v);
                break;
            }
            default: break;
            }
            store(j->out, dt, ok, v);
        }
    }
    free(tile);
}

/* ---- lines gathered from a strided reduced dim, when there is no column dim to vectorize
 * across (every other dim has extent 1) ---- */

static void glines_range(int64_t lo, int64_t hi, void *arg) {
    red_job *j = arg;
    const em_dtype wdt = work_dt(j->dt);
    void *row = malloc((size_t)(j->len * esz(wdt)));
    if (!row) {
        j->nomem = 1;
        return;
    }
    kd_pos p;
    kd_seek(&j->k, lo, &p);
    for (int64_t r = lo; r < hi; r++, kd_next(&j->k, &p)) {
        gather_line(row, j->x, j->dt, p.io, j->len, j->ls);
        if (is_arg(j->op))
            ((int64_t *)j->out)[p.oo] = row_arg(j->op, wdt, row, j->len);
        else
            store(j->out, j->dt, p.oo, row_value(j->op, wdt, row, j->len, j->corr));
    }
    free(row);
}

/* ---- a whole (dim < 0) reduction of a strided input: packed in order first ---- */

typedef struct pack_job {
    kdims k; /* the input's dims, merged; the last one is a line */
    const void *x;
    void *dst;
    int64_t es, line;
} pack_job;

static void pack_range(int64_t lo, int64_t hi, void *arg) {
    const pack_job *j = arg;
    kdims k = j->k;
    const int64_t ln = k.size[k.n - 1], ls = k.is[k.n - 1];
    k.n--; /* walk the lines */
    kd_pos p;
    kd_seek(&k, lo, &p);
    for (int64_t r = lo; r < hi; r++, kd_next(&k, &p)) {
        char *d = (char *)j->dst + r * ln * j->es;
        const char *s = (const char *)j->x + p.io * j->es;
        if (j->es == 8)
            for (int64_t i = 0; i < ln; i++) ((double *)d)[i] = ((const double *)s)[i * ls];
        else if (j->es == 4)
            for (int64_t i = 0; i < ln; i++) ((float *)d)[i] = ((const float *)s)[i * ls];
        else
            for (int64_t i = 0; i < ln; i++) ((uint16_t *)d)[i] = ((const uint16_t *)s)[i * ls];
    }
}

/** The result of op over an empty line, as the ref kernel gives it. */
static double empty_value(em_reduce_op op) {
    switch (op) {
    case EM_RED_SUM: return 0;
    case EM_RED_PROD: return 1;
    case EM_RED_LOGSUMEXP: return -INFINITY;
    default: return NAN; /* mean, var: 0/0; max, min: NaN */
    }
}

static bool red_float(em_dtype dt) {
    return dt == EM_F32 || dt == EM_F64 || dt == EM_F16 || dt == EM_BF16;
}

em_status CPU_K(cpu_reduce)(void *ctx, em_reduce_op op, const em_view *out, const em_view *in,
                            int dim, const double *params) {
    const em_dtype dt = in->dtype;
    em_view kv;
    if (dim >= 0 && dim < in->rank && out->rank != in->rank && cpu_contiguous(out) &&
        cpu_numel(out) * in->shape[dim] == cpu_numel(in)) {
        /* a dense output without the kept dim of extent 1: its keepdim form */
        kv = *out;
        kv.rank = in->rank;
        int64_t st = 1;
        for (int d = in->rank - 1; d >= 0; d--) {
            kv.shape[d] = d == dim ? 1 : in->shape[d];
            kv.strides[d] = st;
            st *= kv.shape[d];
        }
        out = &kv;
    }
    if (!red_float(dt) || op < 0 || op >= EM_RED_COUNT ||
        out->dtype != (is_arg(op) ? EM_I64 : dt) || (dim >= 0 && out->rank != in->rank))
        return CPU_FALLBACK(CPU_FB_REDUCE, in->dtype, reduce, ctx, op, out, in, dim, params);
    const double corr = params ? params[0] : 1.0;
    const char *x = cpu_ptr(in);
    char *o = cpu_ptr(out);

    if (dim < 0 || dim >= in->rank) { /* the whole tensor: one 0-d result */
        const int64_t n = cpu_numel(in);
        if (n == 0) {
            if (is_arg(op)) ((int64_t *)o)[0] = 0;
            else store(o, dt, 0, empty_value(op));
            return EM_OK;
        }
        void *tmp = NULL;
        if (!cpu_contiguous(in)) {
            pack_job pj = {.x = x, .es = esz(dt)};
            kd_build(&pj.k, in, in, -1);
            tmp = cpu_scratch((size_t)(n * pj.es));
            if (!tmp) return em_backend_set_error(EM_ERR_NOMEM, "cpu: out of memory");
            pj.dst = tmp;
            const int64_t lines = n / pj.k.size[pj.k.n - 1];
            int64_t grain = RED_GRAIN / pj.k.size[pj.k.n - 1];
            cpu_parallel_for(lines, grain < 1 ? 1 : grain, pack_range, &pj);
            x = tmp;
        }
        long_row(op, dt, x, n, corr, o, 0);
        if (tmp) cpu_scratch_free(tmp);
        return EM_OK;
    }

    red_job j = {.op = op, .dt = dt, .x = x, .out = o, .len = in->shape[dim],
                 .ls = in->strides[dim], .corr = corr};
    kd_build(&j.k, in, out, dim);
    const int64_t m = kd_numel(&j.k);
    if (m == 0) return EM_OK;
    if (j.len == 0) { /* every output is the empty line's value */
        kd_pos p;
        kd_seek(&j.k, 0, &p);
        for (int64_t r = 0; r < m; r++, kd_next(&j.k, &p)) {
            if (is_arg(op)) ((int64_t *)o)[p.oo] = 0;
            else store(o, dt, p.oo, empty_value(op));
        }
        return EM_OK;
    }
    if (j.len == 1) j.ls = 1; /* a one-element line is contiguous whatever its stride */
    int c = j.ls == 1 ? -1 : kd_column(&j.k);
    if (c >= 0 && llabs(j.ls) < llabs(j.k.is[c]) && j.ls != 0)
        c = -1; /* the line is denser than the columns: gather lines */
    if (j.ls == 1) { /* rows */
        if (m == 1 || (m < cpu_threads() && j.len >= 4 * RED_GRAIN)) {
            kd_pos p;
            kd_seek(&j.k, 0, &p);
            for (int64_t r = 0; r < m; r++, kd_next(&j.k, &p))
                long_row(op, dt, x + p.io * esz(dt), j.len, corr, o, p.oo);
        } else {
            int64_t grain = RED_GRAIN / j.len;
            cpu_parallel_for(m, grain < 1 ? 1 : grain, rows_range, &j);
        }
    } else if (c < 0) { /* strided lines gathered one at a time */
        int64_t grain = RED_GRAIN / j.len;
        cpu_parallel_for(m, grain < 1 ? 1 : grain, glines_range, &j);
    } else { /* columns */
        kd_take(&j.k, c, &j.cn, &j.cis, &j.cos);
        j.direct = (dt == EM_F32 || dt == EM_F64) && j.cis == 1;
        j.bw = RED_BLOCK;
        j.nblk = (j.cn + j.bw - 1) / j.bw;
        const int64_t per = j.len * (j.cn < j.bw ? j.cn : j.bw);
        const int64_t grain = RED_GRAIN / per;
        cpu_parallel_for(kd_numel(&j.k) * j.nblk, grain < 1 ? 1 : grain, cols_range, &j);
    }
    if (j.nomem) return em_backend_set_error(EM_ERR_NOMEM, "cpu: out of memory (reduce)");
    return EM_OK;
}

/* ---- softmax ---- */

/* one contiguous row: o = softmax(x) or log_softmax(x) (n >= 1) */
static void softmax_row_f32(float *restrict o, const float *restrict x, int64_t n,
                            bool log_) {
    const float m = seg_max_f32(x, n);
    if (!isfinite(m)) { /* a NaN, or an infinite max: x - m or the sum is NaN, as in ref */
        for (int64_t i = 0; i < n; i++) o[i] = NAN;
        return;
    }
    if (log_) {
        const float ls = (float)log(seg_sumexp_f32(x, n, m));
        for (int64_t i = 0; i < n; i++) o[i] = (x[i] - m) - ls;
        return;
    }
    /* exp and sum in one pass: 8 rows of 32 lanes summed in float, then in double */
    double sum = 0;
    int64_t i = 0;
    for (; i + 8 * RED_LANES <= n; i += 8 * RED_LANES) {
        float f[RED_LANES];
        for (int k = 0; k < RED_LANES; k++) {
            const float e = sm_expf(x[i + k] - m);
            o[i + k] = e;
            f[k] = e;
        }
        for (int r = 1; r < 8; r++)
            for (int k = 0; k < RED_LANES; k++) {
                const float e = sm_expf(x[i + r * RED_LANES + k] - m);
                o[i + r * RED_LANES + k] = e;
                f[k] += e;
            }
        double d[RED_LANES];
        for (int k = 0; k < RED_LANES; k++) d[k] = f[k];
        for (int w = RED_LANES / 2; w > 0; w /= 2)
            for (int k = 0; k < w; k++) d[k] += d[k + w];
        sum += d[0];
    }
    for (int64_t t = i; t < n; t++) o[t] = sm_expf(x[t] - m);
    sum += seg_sum_f32_fast(o + i, n - i);
    const float inv = (float)(1.0 / sum);
    for (int64_t t = 0; t < n; t++) o[t] *= inv;
}

static void softmax_row_f64(double *restrict o, const double *restrict x, int64_t n,
                            bool log_) {
    const double m = seg_max_f64(x, n);
    if (log_) {
        const double ls = log(seg_sumexp_f64(x, n, m));
        for (int64_t i = 0; i < n; i++) o[i] = (x[i] - m) - ls;
        return;
    }
    for (int64_t i = 0; i < n; i++) o[i] = exp(x[i] - m);
    const double s = seg_sum_f64(o, n);
    for (int64_t i = 0; i < n; i++) o[i] /= s;
}

static CPU_INLINE void softmax_exp_body(float *restrict o, const float *restrict x, int64_t len,
                                        int64_t inner, int64_t b, const float *restrict m,
                                        double *restrict s, bool guard) {
    for (int64_t j = 0; j < b; j++) s[j] = 0;
    for (int64_t r = 0; r < len; r++) {
        float *restrict orow = o + r * inner;
        const float *restrict xrow = x + r * inner;
        for (int64_t j = 0; j < b; j++) {
            float e = expf_g(xrow[j] - m[j], guard);
            orow[j] = e;
            s[j] += (double)e;
        }
    }
}

/* a block of b columns over len rows (row stride inner) */
static void softmax_cols_f32(float *restrict o, const float *restrict x, int64_t len,
                             int64_t inner, int64_t b, bool log_) {
    float m[RED_BLOCK] = {0}, f[RED_BLOCK];
    double s[RED_BLOCK];
    col_max_f32(x, len, inner, b, m);
    if (log_) {
        col_sumexp_f32(x, len, inner, b, m, s);
        for (int64_t j = 0; j < b; j++) f[j] = (float)log(s[j]);
        for (int64_t r = 0; r < len; r++)
            for (int64_t j = 0; j < b; j++)
                o[r * inner + j] = (x[r * inner + j] - m[j]) - f[j];
        return;
    }
    if (all_finite_f32(m, b))
        softmax_exp_body(o, x, len, inner, b, m, s, false);
    else
        softmax_exp_body(o, x, len, inner, b, m, s, true);
    for (int64_t j = 0; j < b; j++) f[j] = (float)(1.0 / s[j]);
    for (int64_t r = 0; r < len; r++)
        for (int64_t j = 0; j < b; j++) o[r * inner + j] *= f[j];
}

static void softmax_cols_f64(double *restrict o, const double *restrict x, int64_t len,
                             int64_t inner, int64_t b, bool log_) {
    double m[RED_BLOCK] = {0}, s[RED_BLOCK];
    col_max_f64(x, len, inner, b, m);
    if (log_) {
        col_sumexp_f64(x, len, inner, b, m, s);
        for (int64_t j = 0; j < b; j++) s[j] = log(s[j]);
        for (int64_t r = 0; r < len; r++)
            for (int64_t j = 0; j < b; j++)
                o[r * inner + j] = (x[r * inner + j] - m[j]) - s[j];
        return;
    }
    for (int64_t j = 0; j < b; j++) s[j] = 0;
    for (int64_t r = 0; r < len; r++)
        for (int64_t j = 0; j < b; j++) {
            double e = exp(x[r * inner + j] - m[j]);
            o[r * inner + j] = e;
            s[j] += e;
        }
    for (int64_t r = 0; r < len; r++)
        for (int64_t j = 0; j < b; j++) o[r * inner + j] /= s[j];
}

typedef struct sm_job {
    em_dtype dt;
    const void *x;
    void *o;
    int64_t len, inner, nblk, bw; /* bw: columns per block */
    bool log_;
} sm_job;

static void sm_rows(int64_t lo, int64_t hi, void *arg) {
    const sm_job *j = arg;
    for (int64_t r = lo; r < hi; r++) {
        if (j->dt == EM_F32)
            softmax_row_f32((float *)j->o + r * j->len, (const float *)j->x + r * j->len, j->len,
                            j->log_);
        else
            softmax_row_f64((double *)j->o + r * j->len, (const double *)j->x + r * j->len,
                            j->len, j->log_);
    }
}

static void sm_cols(int64_t lo, int64_t hi, void *arg) {
    const sm_job *j = arg;
    for (int64_t it = lo; it < hi; it++) {
        const int64_t o = it / j->nblk, j0 = (it % j->nblk) * j->bw;
        const int64_t b = j->inner - j0 < j->bw ? j->inner - j0 : j->bw;
        const int64_t base = o * j->len * j->inner + j0;
        if (j->dt == EM_F32)
            softmax_cols_f32((float *)j->o + base, (const float *)j->x + base, j->len, j->inner,
                             b, j->log_);
        else
            softmax_cols_f64((double *)j->o + base, (const double *)j->x + base, j->len,
                             j->inner, b, j->log_);
    }
}

/* ---- lines of softmax and cumsum through work tiles ----
 * Any layout and the half types: a tile of len rows by b columns (b elements of the column
 * dim, or one line when b is 1) is gathered from the input into f32/f64, computed there and
 * scattered to the output. */

#define LINE_TILE (1 << 15) /* elements of a work tile, about */

typedef enum { LK_SOFTMAX, LK_LOG_SOFTMAX, LK_CUMSUM } line_kind;

typedef struct line_job {
    line_kind kind;
    em_dtype dt;
    const char *x;
    char *o;
    int64_t len, is, os; /* the dim: extent, input and output strides */
    kdims k;             /* the kept dims (but the column dim when bw > 1) */
    int64_t cn, cis, cos, bw, nblk;
    _Atomic int nomem;
} line_job;

/* cumsum of b columns of n rows, row strides xs and os (column stride 1), in double as ref */
static void cumsum_cols_f32(float *o, const float *x, int64_t n, int64_t xs, int64_t os,
                            int64_t b) {
    double acc[RED_BLOCK];
    for (int64_t j = 0; j < b; j++) acc[j] = 0;
    for (int64_t r = 0; r < n; r++)
        for (int64_t j = 0; j < b; j++) {
            acc[j] += (double)x[r * xs + j];
            o[r * os + j] = (float)acc[j];
        }
}

static void cumsum_cols_f64(double *o, const double *x, int64_t n, int64_t xs, int64_t os,
                            int64_t b) {
    double acc[RED_BLOCK];
    for (int64_t j = 0; j < b; j++) acc[j] = 0;
    for (int64_t r = 0; r < n; r++)
        for (int64_t j = 0; j < b; j++) {
            acc[j] += x[r * xs + j];
            o[r * os + j] = acc[j];
        }
}

/* cumsum of one contiguous line (four independent lines at a time go through the columns
 * kernel's rows instead, see lines_rows) */
static void cumsum_line_f32(float *restrict o, const float *restrict x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
        s += (double)x[i];
        o[i] = (float)s;
    }
}

static void cumsum_line_f64(double *restrict o, const double *restrict x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
        s += x[i];
        o[i] = s;
    }
}

/* cumsum of four contiguous lines at once (four independent dependency chains) */
static void cumsum_4lines_f32(float *const o[4], const float *const x[4], int64_t n) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int64_t i = 0; i < n; i++) {
        s0 += (double)x[0][i];
        s1 += (double)x[1][i];
        s2 += (double)x[2][i];
        s3 += (double)x[3][i];
        o[0][i] = (float)s0;
        o[1][i] = (float)s1;
        o[2][i] = (float)s2;
        o[3][i] = (float)s3;
    }
}

static void cumsum_4lines_f64(double *const o[4], const double *const x[4], int64_t n) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int64_t i = 0; i < n; i++) {
        s0 += x[0][i];
        s1 += x[1][i];
        s2 += x[2][i];
        s3 += x[3][i];
        o[0][i] = s0;
        o[1][i] = s1;
        o[2][i] = s2;
        o[3][i] = s3;
    }
}

/** The kind's computation on a contiguous work tile: o, x [n rows][b] (b = 1: one line). */
static void line_compute(line_kind kind, em_dtype wdt, void *o, const void *x, int64_t n,
                         int64_t b) {
    const bool f32 = wdt == EM_F32;
    if (kind == LK_CUMSUM) {
        if (b == 1) {
            if (f32) cumsum_line_f32(o, x, n);
            else cumsum_line_f64(o, x, n);
        } else if (f32) cumsum_cols_f32(o, x, n, b, b, b);
        else cumsum_cols_f64(o, x, n, b, b, b);
        return;
    }
    const bool lg = kind == LK_LOG_SOFTMAX;
    if (b == 1) {
        if (f32) softmax_row_f32(o, x, n, lg);
        else softmax_row_f64(o, x, n, lg);
    } else if (f32) softmax_cols_f32(o, x, n, b, b, lg);
    else softmax_cols_f64(o, x, n, b, b, lg);
}

/* tiles of bw columns (bw > 1) */
static void lines_cols(int64_t lo, int64_t hi, void *arg) {
    line_job *j = arg;
    const em_dtype wdt = work_dt(j->dt);
    const int64_t es = esz(wdt), len = j->len;
    const bool direct = (j->dt == EM_F32 || j->dt == EM_F64) && j->cis == 1 && j->cos == 1 &&
                        j->kind == LK_CUMSUM;
    char *ti = NULL, *to = NULL;
    if (!direct) {
        ti = malloc((size_t)(2 * len * j->bw * es));
        if (!ti) {
            j->nomem = 1;
            return;
        }
        to = ti + len * j->bw * es;
    }
    for (int64_t it = lo; it < hi; it++) {
        const int64_t o = it / j->nblk, j0 = (it % j->nblk) * j->bw;
        const int64_t b = j->cn - j0 < j->bw ? j->cn - j0 : j->bw;
        kd_pos p;
        kd_seek(&j->k, o, &p);
        const int64_t io = p.io + j0 * j->cis, oo = p.oo + j0 * j->cos;
        if (direct) { /* cumsum reads and writes in place */
            if (j->dt == EM_F32)
                cumsum_cols_f32((float *)j->o + oo, (const float *)j->x + io, len, j->is, j->os,
                                b);
            else
                cumsum_cols_f64((double *)j->o + oo, (const double *)j->x + io, len, j->is,
                                j->os, b);
            continue;
        }
        for (int64_t r = 0; r < len; r++)
            gather_line(ti + r * b * es, j->x, j->dt, io + r * j->is, b, j->cis);
        line_compute(j->kind, wdt, to, ti, len, b);
        for (int64_t r = 0; r < len; r++)
            scatter_line(j->o, j->dt, oo + r * j->os, b, j->cos, to + r * b * es);
    }
    free(ti);
}

/* one line per output line (bw == 1) */
static void lines_rows(int64_t lo, int64_t hi, void *arg) {
    line_job *j = arg;
    const em_dtype wdt = work_dt(j->dt), dt = j->dt;
    const int64_t es = esz(wdt), len = j->len;
    const bool direct = (dt == EM_F32 || dt == EM_F64) && j->is == 1 && j->os == 1;
    char *ti = NULL, *to = NULL;
    if (!direct) {
        ti = malloc((size_t)(2 * len * es));
        if (!ti) {
            j->nomem = 1;
            return;
        }
        to = ti + len * es;
    }
    kd_pos p;
    kd_seek(&j->k, lo, &p);
    int64_t r = lo;
    if (direct && j->kind == LK_CUMSUM)
        for (; r + 4 <= hi; r += 4) {
            const void *xs[4];
            void *os[4];
            for (int q = 0; q < 4; q++, kd_next(&j->k, &p)) {
                xs[q] = j->x + p.io * es;
                os[q] = j->o + p.oo * es;
            }
            if (dt == EM_F32)
                cumsum_4lines_f32((float *const *)os, (const float *const *)xs, len);
            else
                cumsum_4lines_f64((double *const *)os, (const double *const *)xs, len);
        }
    for (; r < hi; r++, kd_next(&j->k, &p)) {
        if (direct) {
            line_compute(j->kind, wdt, j->o + p.oo * es, j->x + p.io * es, len, 1);
            continue;
        }
        gather_line(ti, j->x, dt, p.io, len, j->is);
        line_compute(j->kind, wdt, to, ti, len, 1);
        scatter_line(j->o, dt, p.oo, len, j->os, to);
    }
    free(ti);
}

/** softmax / log_softmax / cumsum along dim of any layout and float dtype. */
static em_status lines_run(line_kind kind, const em_view *out, const em_view *in, int dim) {
    line_job j = {.kind = kind, .dt = in->dtype, .x = cpu_ptr(in), .o = cpu_ptr(out)};
    if (in->rank == 0) { /* one line of one element */
        j.len = 1;
        j.k.n = 0;
    } else {
        j.len = in->shape[dim];
        j.is = in->strides[dim];
        j.os = out->strides[dim];
        kd_build(&j.k, in, out, dim);
    }
    const int64_t m = kd_numel(&j.k);
    if (m == 0 || j.len == 0) return EM_OK;
    if (j.len == 1) j.is = j.os = 1;
    int c = j.is == 1 || j.os == 1 ? -1 : kd_column(&j.k);
    int64_t bw = 1;
    if (c >= 0) {
        bw = LINE_TILE / j.len;
        if (bw > RED_BLOCK) bw = RED_BLOCK;
        if (bw < 8) c = -1, bw = 1; /* long lines: one at a time */
    }
    if (c < 0 && kind == LK_CUMSUM && (j.dt == EM_F32 || j.dt == EM_F64) && j.k.n > 0 &&
        j.is != 1) {
        /* a strided cumsum whose columns are dense in place: direct column tiles */
        int cc = kd_column(&j.k);
        if (j.k.is[cc] == 1 && j.k.os[cc] == 1) c = cc, bw = RED_BLOCK;
    }
    if (c >= 0) {
        kd_take(&j.k, c, &j.cn, &j.cis, &j.cos);
        j.bw = bw;
        j.nblk = (j.cn + bw - 1) / bw;
        const int64_t per = j.len * (j.cn < bw ? j.cn : bw);
        const int64_t grain = RED_GRAIN / per;
        cpu_parallel_for(kd_numel(&j.k) * j.nblk, grain < 1 ? 1 : grain, lines_cols, &j);
    } else {
        const int64_t grain = RED_GRAIN / j.len;
        cpu_parallel_for(m, grain < 1 ? 1 : grain, lines_rows, &j);
    }
    if (j.nomem) return em_backend_set_error(EM_ERR_NOMEM, "cpu: out of memory");
    return EM_OK;
}

em_status CPU_K(cpu_softmax)(void *ctx, const em_view *out, const em_view *in, int dim,
                             bool log) {
    const em_dtype dt = in->dtype;
    if (!red_float(dt) || out->dtype != dt || out->rank != in->rank ||
        (in->rank > 0 && (dim < 0 || dim >= in->rank)))
        return CPU_FALLBACK(CPU_FB_SOFTMAX, out->dtype, softmax, ctx, out, in, dim, log);
    if ((dt != EM_F32 && dt != EM_F64) || !cpu_contiguous(in) || !cpu_contiguous(out) ||
        in->rank == 0)
        return lines_run(log ? LK_LOG_SOFTMAX : LK_SOFTMAX, out, in, dim);
    int64_t outer = 1, len = in->shape[dim], inner = 1;
    for (int d = 0; d < dim; d++) outer *= in->shape[d];
    for (int d = dim + 1; d < in->rank; d++) inner *= in->shape[d];
    if (outer == 0 || len == 0 || inner == 0) return EM_OK;

    sm_job j = {dt, cpu_ptr(in), cpu_ptr(out), len, inner, 0, 0, log};
    if (inner == 1) {
        int64_t grain = RED_GRAIN / len;
        cpu_parallel_for(outer, grain < 1 ? 1 : grain, sm_rows, &j);
    } else {
        /* wide blocks: rows of the block stream better than a cache-sized narrow block */
        const int64_t bw = RED_BLOCK;
        j.bw = bw;
        j.nblk = (inner + bw - 1) / bw;
        int64_t grain = RED_GRAIN / (len * (inner < bw ? inner : bw));
        cpu_parallel_for(outer * j.nblk, grain < 1 ? 1 : grain, sm_cols, &j);
    }
    return EM_OK;
}

em_status CPU_K(cpu_cumsum)(void *ctx, const em_view *out, const em_view *in, int dim) {
    const em_dtype dt = in->dtype;
    if (!red_float(dt) || out->dtype != dt || out->rank != in->rank ||
        (in->rank > 0 && (dim < 0 || dim >= in->rank)))
        return CPU_FALLBACK(CPU_FB_CUMSUM, out->dtype, cumsum, ctx, out, in, dim);
    return lines_run(LK_CUMSUM, out, in, dim);
}
