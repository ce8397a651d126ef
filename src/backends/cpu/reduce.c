/* reduce.c — the cpu backend's reductions and softmax for f32 and f64.
 *
 * The input (made contiguous first when it is not) is viewed as [outer, len, inner] around the
 * reduced dim (the whole tensor is one row). Rows (inner == 1) are reduced with blocked,
 * vectorized accumulators and split over the thread pool by rows, or, when there are few long
 * rows, each row is split into chunks whose partial results are combined. Columns (inner > 1)
 * are reduced a block of columns at a time, vectorized across the block, threaded over the
 * (outer, block) pairs. Sums accumulate in double, as the ref kernels do; max and min work in
 * the input's type (exact). NaN: max/min/logsumexp give NaN, argmax/argmin give the first NaN's
 * index, softmax rows with a NaN are all NaN — the ref kernels' semantics. Other dtypes and
 * empty extents go to the ref kernels. */
#include <math.h>

#include "cpu.h"
#include "vmath.h"

#define RED_GRAIN (1 << 15) /* elements per task, about */
#define RED_BLOCK 512       /* columns per block (inner > 1) */
#define RED_LANES 32        /* accumulators of a row reduction */
#define RED_PARTS 64        /* most chunks a long row is split in */

#if defined(__GNUC__)
#define CPU_INLINE inline __attribute__((always_inline))
#else
#define CPU_INLINE inline
#endif

/* NaN-propagating max / min step: a NaN replaces the accumulator and then stays. */
#define MAXSTEP(m, v) ((((v) > (m)) | ((v) != (v))) ? (v) : (m))
#define MINSTEP(m, v) ((((v) < (m)) | ((v) != (v))) ? (v) : (m))

/* ---- primitives over contiguous data, stamped for float and double ---- */

#define RED_PRIMS(T, S)                                                                            \
    /* sum in double */                                                                            \
    static double seg_sum_##S(const T *restrict x, int64_t n) {                                    \
        double a[RED_LANES] = {0};                                                                 \
        int64_t i = 0;                                                                             \
        for (; i + RED_LANES <= n; i += RED_LANES)                                                 \
            for (int k = 0; k < RED_LANES; k++) a[k] += (double)x[i + k];                          \
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
        for (; i < n; i++) a[0] = MAXSTEP(a[0], x[i]);                                             \
        for (int k = 1; k < RED_LANES; k++) a[0] = MAXSTEP(a[0], a[k]);                            \
        return a[0];                                                                               \
    }                                                                                              \
    static T seg_min_##S(const T *restrict x, int64_t n) {                                         \
        T a[RED_LANES];                                                                            \
        for (int k = 0; k < RED_LANES; k++) a[k] = x[0];                                           \
        int64_t i = 0;                                                                             \
        for (; i + RED_LANES <= n; i += RED_LANES)                                                 \
 for (int k = 0; k < RED_LANES; k++) a[k] = MINSTEP(a[k], x[i + k]);                               \
        for (; i < n; i++) a[0] = MINSTEP(a[0], x[i]);                                             \
        for (int k = 1; k < RED_LANES; k++) a[0] = MINSTEP(a[0], a[k]);                            \
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
    static void col_sum_##S(const T *restrict x, int64_t len, int64_t inner,                       \
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

/* sum of exp(x - m) in double: f32 through the vectorized cpu_expf, a block at a time */
static double seg_sumexp_f32(const float *restrict x, int64_t n, float m) {
    float e[RED_BLOCK];
    double a[RED_LANES] = {0}, s = 0;
    for (int64_t i0 = 0; i0 < n; i0 += RED_BLOCK) {
        int64_t c = n - i0 < RED_BLOCK ? n - i0 : RED_BLOCK;
        for (int64_t j = 0; j < c; j++) e[j] = cpu_expf(x[i0 + j] - m);
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
    if (!guard) return cpu_expf(d);
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

/* ---- dtype-generic wrappers (dt is EM_F32 or EM_F64; x points at element 0) ---- */

static inline const void *at(const void *x, em_dtype dt, int64_t i) {
    return dt == EM_F32 ? (const void *)((const float *)x + i)
                        : (const void *)((const double *)x + i);
}

static double g_sum(em_dtype dt, const void *x, int64_t n) {
    return dt == EM_F32 ? seg_sum_f32(x, n) : seg_sum_f64(x, n);
}
static double g_sqdev(em_dtype dt, const void *x, int64_t n, double mean) {
    return dt == EM_F32 ? seg_sqdev_f32(x, n, mean) : seg_sqdev_f64(x, n, mean);
}
static double g_max(em_dtype dt, const void *x, int64_t n, int is_max) {
    if (dt == EM_F32) return is_max ? seg_max_f32(x, n) : seg_min_f32(x, n);
    return is_max ? seg_max_f64(x, n) : seg_min_f64(x, n);
}
static int64_t g_find(em_dtype dt, const void *x, int64_t n, double m) {
    return dt == EM_F32 ? seg_find_f32(x, n, (float)m) : seg_find_f64(x, n, m);
}
static double g_sumexp(em_dtype dt, const void *x, int64_t n, double m) {
    return dt == EM_F32 ? seg_sumexp_f32(x, n, (float)m) : seg_sumexp_f64(x, n, m);
}
static double g_prod(em_dtype dt, const void *x, int64_t n) {
    return dt == EM_F32 ? seg_prod_f32(x, n) : seg_prod_f64(x, n);
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

static inline void store(void *out, em_dtype dt, int64_t i, double v) {
    if (dt == EM_F32)
        ((float *)out)[i] = (float)v;
    else
        ((double *)out)[i] = v;
}

/* ---- rows: one task reduces whole rows ---- */

typedef struct red_job {
    em_reduce_op op;
    em_dtype dt;
    const void *x;
    void *out;
    int64_t outer, len, inner, nblk;
    double corr;
} red_job;

static void rows_range(int64_t lo, int64_t hi, void *arg) {
    const red_job *j = arg;
    for (int64_t r = lo; r < hi; r++) {
        const void *p = at(j->x, j->dt, r * j->len);
        if (is_arg(j->op))
            ((int64_t *)j->out)[r] = row_arg(j->op, j->dt, p, j->len);
        else
            store(j->out, j->dt, r, row_value(j->op, j->dt, p, j->len, j->corr));
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

/* ---- columns (inner > 1): a block of columns of one outer index per task ---- */

static void cols_range(int64_t lo, int64_t hi, void *arg) {
    const red_job *j = arg;
    double acc[RED_BLOCK], aux[RED_BLOCK];
    union {
        float f[RED_BLOCK];
        double d[RED_BLOCK];
    } m;
    const em_dtype dt = j->dt;
    const bool f32 = dt == EM_F32;
    for (int64_t it = lo; it < hi; it++) {
        const int64_t o = it / j->nblk, j0 = (it % j->nblk) * RED_BLOCK;
        const int64_t b = j->inner - j0 < RED_BLOCK ? j->inner - j0 : RED_BLOCK;
        const int64_t len = j->len, inner = j->inner;
        const void *x = at(j->x, dt, o * len * inner + j0);
        const int64_t oi = o * inner + j0;
        switch (j->op) {
        case EM_RED_SUM:
        case EM_RED_MEAN:
            if (f32) col_sum_f32(x, len, inner, b, acc);
            else col_sum_f64(x, len, inner, b, acc);
            for (int64_t k = 0; k < b; k++)
                store(j->out, dt, oi + k, j->op == EM_RED_MEAN ? acc[k] / (double)len : acc[k]);
            break;
        case EM_RED_PROD:
            if (f32) col_prod_f32(x, len, inner, b, acc);
            else col_prod_f64(x, len, inner, b, acc);
            for (int64_t k = 0; k < b; k++) store(j->out, dt, oi + k, acc[k]);
            break;
        case EM_RED_VAR:
            if (f32) col_sum_f32(x, len, inner, b, aux);
            else col_sum_f64(x, len, inner, b, aux);
            for (int64_t k = 0; k < b; k++) aux[k] /= (double)len;
            if (f32) col_sqdev_f32(x, len, inner, b, aux, acc);
            else col_sqdev_f64(x, len, inner, b, aux, acc);
            for (int64_t k = 0; k < b; k++) store(j->out, dt, oi + k, var_of(acc[k], len, j->corr));
            break;
        case EM_RED_MAX:
        case EM_RED_MIN:
            if (f32) {
                if (j->op == EM_RED_MAX) col_max_f32(x, len, inner, b, (float *)j->out + oi);
                else col_min_f32(x, len, inner, b, (float *)j->out + oi);
            } else {
                if (j->op == EM_RED_MAX) col_max_f64(x, len, inner, b, (double *)j->out + oi);
                else col_min_f64(x, len, inner, b, (double *)j->out + oi);
            }
            break;
        case EM_RED_ARGMAX:
        case EM_RED_ARGMIN:
            if (f32)
                col_arg_f32(x, len, inner, b, j->op == EM_RED_ARGMAX, m.f, (int64_t *)j->out + oi);
            else
                col_arg_f64(x, len, inner, b, j->op == EM_RED_ARGMAX, m.d, (int64_t *)j->out + oi);
            break;
        case EM_RED_LOGSUMEXP:
            if (f32) {
                col_max_f32(x, len, inner, b, m.f);
                col_sumexp_f32(x, len, inner, b, m.f, acc);
                for (int64_t k = 0; k < b; k++) {
                    double mk = m.f[k];
                    store(j->out, dt, oi + k, (mk != mk || isinf(mk)) ? mk : mk + log(acc[k]));
                }
            } else {
                col_max_f64(x, len, inner, b, m.d);
                col_sumexp_f64(x, len, inner, b, m.d, acc);
                for (int64_t k = 0; k < b; k++) {
                    double mk = m.d[k];
                    store(j->out, dt, oi + k, (mk != mk || isinf(mk)) ? mk : mk + log(acc[k]));
                }
            }
            break;
        default: break;
        }
    }
}

em_status CPU_K(cpu_reduce)(void *ctx, em_reduce_op op, const em_view *out, const em_view *in,
                            int dim, const double *params) {
    const em_dtype dt = in->dtype;
    bool fast = (dt == EM_F32 || dt == EM_F64) && op >= 0 && op < EM_RED_COUNT &&
                out->dtype == (is_arg(op) ? EM_I64 : dt) && cpu_contiguous(out);
    int64_t outer = 1, len = cpu_numel(in), inner = 1;
    if (dim >= 0 && dim < in->rank) {
        outer = 1;
        for (int d = 0; d < dim; d++) outer *= in->shape[d];
        len = in->shape[dim];
        for (int d = dim + 1; d < in->rank; d++) inner *= in->shape[d];
    }
    if (!fast || len == 0)
        return CPU_FALLBACK(CPU_FB_REDUCE, in->dtype, reduce, ctx, op, out, in, dim, params);
    if (outer == 0 || inner == 0) return EM_OK;

    em_view cv;
    void *tmp;
    em_status st = cpu_contig_input(in, &cv, &tmp);
    if (st != EM_OK) return st;
    red_job j = {op, dt, cpu_ptr(&cv), cpu_ptr(out), outer, len, inner, 0,
                 params ? params[0] : 1.0};
    if (inner == 1) {
        if (outer == 1 || (outer < cpu_threads() && len >= 4 * RED_GRAIN)) {
            for (int64_t r = 0; r < outer; r++)
                long_row(op, dt, at(j.x, dt, r * len), len, j.corr, j.out, r);
        } else {
            int64_t grain = RED_GRAIN / len;
            cpu_parallel_for(outer, grain < 1 ? 1 : grain, rows_range, &j);
        }
    } else {
        j.nblk = (inner + RED_BLOCK - 1) / RED_BLOCK;
        int64_t per = len * (inner < RED_BLOCK ? inner : RED_BLOCK);
        int64_t grain = RED_GRAIN / per;
        cpu_parallel_for(outer * j.nblk, grain < 1 ? 1 : grain, cols_range, &j);
    }
    if (tmp) cpu_scratch_free(tmp);
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
    for (int64_t i = 0; i < n; i++) o[i] = cpu_expf(x[i] - m);
    const float inv = (float)(1.0 / seg_sum_f32(o, n));
    for (int64_t i = 0; i < n; i++) o[i] *= inv;
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

em_status CPU_K(cpu_softmax)(void *ctx, const em_view *out, const em_view *in, int dim,
                             bool log) {
    const em_dtype dt = in->dtype;
    bool fast = (dt == EM_F32 || dt == EM_F64) && out->dtype == dt && cpu_contiguous(out) &&
                dim >= 0 && dim < in->rank;
    if (!fast) return CPU_FALLBACK(CPU_FB_SOFTMAX, out->dtype, softmax, ctx, out, in, dim, log);
    int64_t outer = 1, len = in->shape[dim], inner = 1;
    for (int d = 0; d < dim; d++) outer *= in->shape[d];
    for (int d = dim + 1; d < in->rank; d++) inner *= in->shape[d];
    if (outer == 0 || len == 0 || inner == 0) return EM_OK;

    em_view cv;
    void *tmp;
    em_status st = cpu_contig_input(in, &cv, &tmp);
    if (st != EM_OK) return st;
    sm_job j = {dt, cpu_ptr(&cv), cpu_ptr(out), len, inner, 0, 0, log};
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
    if (tmp) cpu_scratch_free(tmp);
    return EM_OK;
}
