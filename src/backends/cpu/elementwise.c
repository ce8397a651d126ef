/* elementwise.c — the cpu backend's binary and scalar kernels (unary.c has the unary ones).
 *
 * Every layout runs here: the operands go through one N-d iteration (iter.h) that merges the
 * dims all views walk contiguously and leaves one inner row per step, with each operand's
 * stride along it (1, 0 for a broadcast, anything for a transposed or sliced view). f32/f64
 * rows with strides 0 and 1 run the vector loops below on the tensors themselves; other
 * strides are gathered, and f16/bf16 converted, a block at a time (blocks.h), so a channel
 * broadcast [N,C,H,W] x [1,C,1,1] is N*C rows of H*W against one value. f16/bf16 compute in
 * f32 and round once on store, as ref does (its double result rounded to float, then to the
 * dtype, is the float result for + - * / max min). Integer dtypes and bool compute in int64
 * with ref's wrapping, floor division and remainder. Comparisons go to compare.c. The file is
 * compiled once per instruction-set level (isa.h); rows are split over the thread pool. */
#include <math.h>

#include "blocks.h"
#include "cpu.h"

#define CPU_GRAIN (1 << 15)

/* ---- binary: a op b, with a and b each either a vector or a scalar per row ---- */

/* Python-style remainder (the divisor's sign), as np.remainder. */
#define REM(T, a, b) ({ T r_ = fmod((a), (b)); (r_ != 0 && ((r_ < 0) != ((b) < 0))) ? r_ + (b) : r_; })

#define BIN_BODY(T, A, B)                                                                      \
    switch (op) {                                                                              \
    case EM_BIN_ADD: for (int64_t i = 0; i < n; i++) o[i] = A + B; break;                      \
    case EM_BIN_SUB: for (int64_t i = 0; i < n; i++) o[i] = A - B; break;                      \
    case EM_BIN_MUL: for (int64_t i = 0; i < n; i++) o[i] = A * B; break;                      \
    case EM_BIN_DIV: for (int64_t i = 0; i < n; i++) o[i] = A / B; break;                      \
    case EM_BIN_POW: for (int64_t i = 0; i < n; i++) o[i] = pow(A, B); break;                  \
    case EM_BIN_REM: for (int64_t i = 0; i < n; i++) o[i] = REM(T, A, B); break;               \
    case EM_BIN_MAX:                                                                           \
        for (int64_t i = 0; i < n; i++) {                                                      \
            T a_ = A, b_ = B;                                                                  \
            o[i] = a_ != a_ ? a_ : (b_ != b_ ? b_ : (a_ >= b_ ? a_ : b_));                      \
        }                                                                                      \
        break;                                                                                 \
    case EM_BIN_MIN:                                                                           \
        for (int64_t i = 0; i < n; i++) {                                                      \
            T a_ = A, b_ = B;                                                                  \
            o[i] = a_ != a_ ? a_ : (b_ != b_ ? b_ : (a_ <= b_ ? a_ : b_));                      \
        }                                                                                      \
        break;                                                                                 \
    default: break;                                                                            \
    }

#define BINARY_LOOPS(T, SUFFIX)                                                                \
    static void bin_vv_##SUFFIX(em_binary_op op, T *restrict o, const T *restrict a,            \
                                const T *restrict b, int64_t n) {                              \
        BIN_BODY(T, a[i], b[i])                                                                \
    }                                                                                          \
    static void bin_vs_##SUFFIX(em_binary_op op, T *restrict o, const T *restrict a,            \
                                T s, int64_t n) {                                              \
        BIN_BODY(T, a[i], s)                                                                   \
    }                                                                                          \
    static void bin_sv_##SUFFIX(em_binary_op op, T *restrict o, T s,                           \
                                const T *restrict b, int64_t n) {                              \
        BIN_BODY(T, s, b[i])                                                                   \
    }

BINARY_LOOPS(float, f32)
BINARY_LOOPS(double, f64)

/* o = a op b over n elements, a and b each a vector (va/vb) or one value. */
#define BIN_ANY(T, SUFFIX)                                                                     \
    static void bin_any_##SUFFIX(em_binary_op op, T *restrict o, const T *a, bool va,         \
                                 const T *b, bool vb, int64_t n) {                             \
        if (va && vb) bin_vv_##SUFFIX(op, o, a, b, n);                                         \
        else if (va) bin_vs_##SUFFIX(op, o, a, b[0], n);                                       \
        else if (vb) bin_sv_##SUFFIX(op, o, a[0], b, n);                                       \
        else {                                                                                 \
            T s = b[0];                                                                        \
            bin_sv_##SUFFIX(op, o, a[0], &s, 1);                                               \
            for (int64_t i = 1; i < n; i++) o[i] = o[0];                                       \
        }                                                                                      \
    }
BIN_ANY(float, f32)
BIN_ANY(double, f64)

typedef struct bin_ctx {
    em_binary_op op;
    em_dtype dt; /* the operands' (and out's) dtype */
} bin_ctx;

static bool unit_or_zero(int64_t s) { return s == 0 || s == 1; }

/* One row of a float op (f32, f16, bf16 through f32). p/s: out, a, b. */
static void bin_row_f32(void *ctx, char *const *p, const int64_t *s, int64_t n) {
    const bin_ctx *c = ctx;
    if (c->dt == EM_F32 && s[0] == 1 && unit_or_zero(s[1]) && unit_or_zero(s[2])) {
        bin_any_f32(c->op, (float *)p[0], (const float *)p[1], s[1] != 0, (const float *)p[2],
                    s[2] != 0, n);
        return;
    }
    const int64_t es = (int64_t)em_dtype_size(c->dt);
    const bool direct = c->dt == EM_F32 && s[0] == 1;
    float ba[CPU_BLK], bb[CPU_BLK], bo[CPU_BLK];
    for (int64_t i = 0; i < n; i += CPU_BLK) {
        int64_t m = n - i < CPU_BLK ? n - i : CPU_BLK;
        const float *a = cpu_blk_f32(c->dt, p[1] + i * s[1] * es, s[1], m, ba);
        const float *b = cpu_blk_f32(c->dt, p[2] + i * s[2] * es, s[2], m, bb);
        float *o = direct ? (float *)p[0] + i : bo;
        bin_any_f32(c->op, o, a, s[1] != 0, b, s[2] != 0, m);
        if (!direct) cpu_blk_st_f32(c->dt, p[0] + i * s[0] * es, s[0], bo, m);
    }
}

static void bin_row_f64(void *ctx, char *const *p, const int64_t *s, int64_t n) {
    const bin_ctx *c = ctx;
    if (s[0] == 1 && unit_or_zero(s[1]) && unit_or_zero(s[2])) {
        bin_any_f64(c->op, (double *)p[0], (const double *)p[1], s[1] != 0,
                    (const double *)p[2], s[2] != 0, n);
        return;
    }
    double ba[CPU_BLK], bb[CPU_BLK], bo[CPU_BLK];
    for (int64_t i = 0; i < n; i += CPU_BLK) {
        int64_t m = n - i < CPU_BLK ? n - i : CPU_BLK;
        const double *a = cpu_blk_f64(p[1] + i * s[1] * 8, s[1], m, ba);
        const double *b = cpu_blk_f64(p[2] + i * s[2] * 8, s[2], m, bb);
        double *o = s[0] == 1 ? (double *)p[0] + i : bo;
        bin_any_f64(c->op, o, a, s[1] != 0, b, s[2] != 0, m);
        if (s[0] != 1) cpu_blk_st_f64(p[0] + i * s[0] * 8, s[0], bo, m);
    }
}

/* ---- integers and bool: int64 arithmetic wrapping like ref's ---- */

static inline int64_t neg_wrap(int64_t x) { return (int64_t)(0u - (uint64_t)x); }

/* Floor division (Python //); 0 for a zero divisor; INT64_MIN // -1 wraps. */
static inline int64_t div_int(int64_t a, int64_t b) {
    if (b == 0) return 0;
    if (b == -1) return neg_wrap(a);
    int64_t q = a / b;
    if (a % b != 0 && ((a < 0) != (b < 0))) q--;
    return q;
}

/* Python's % on ints: the divisor's sign; 0 for a zero divisor. */
static inline int64_t rem_int(int64_t a, int64_t b) {
    if (b == 0 || b == -1) return 0;
    int64_t r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}

#define INT_BODY(A, B)                                                                         \
    switch (op) {                                                                              \
    case EM_BIN_ADD: for (int64_t i = 0; i < n; i++) o[i] = (int64_t)((uint64_t)(A) + (uint64_t)(B)); break; \
    case EM_BIN_SUB: for (int64_t i = 0; i < n; i++) o[i] = (int64_t)((uint64_t)(A) - (uint64_t)(B)); break; \
    case EM_BIN_MUL: for (int64_t i = 0; i < n; i++) o[i] = (int64_t)((uint64_t)(A) * (uint64_t)(B)); break; \
    case EM_BIN_DIV: for (int64_t i = 0; i < n; i++) o[i] = div_int(A, B); break;              \
    case EM_BIN_POW: for (int64_t i = 0; i < n; i++) o[i] = (int64_t)pow((double)(A), (double)(B)); break; \
    case EM_BIN_REM: for (int64_t i = 0; i < n; i++) o[i] = rem_int(A, B); break;              \
    case EM_BIN_MAX: for (int64_t i = 0; i < n; i++) o[i] = (A) >= (B) ? (A) : (B); break;     \
    case EM_BIN_MIN: for (int64_t i = 0; i < n; i++) o[i] = (A) <= (B) ? (A) : (B); break;     \
    case EM_BIN_AND: for (int64_t i = 0; i < n; i++) o[i] = (A) != 0 && (B) != 0; break;       \
    case EM_BIN_OR: for (int64_t i = 0; i < n; i++) o[i] = (A) != 0 || (B) != 0; break;        \
    default: break;                                                                            \
    }

static void int_vv(em_binary_op op, int64_t *restrict o, const int64_t *restrict a,
                   const int64_t *restrict b, int64_t n) {
    INT_BODY(a[i], b[i])
}
static void int_vs(em_binary_op op, int64_t *restrict o, const int64_t *restrict a, int64_t s,
                   int64_t n) {
    INT_BODY(a[i], s)
}
static void int_sv(em_binary_op op, int64_t *restrict o, int64_t s, const int64_t *restrict b,
                   int64_t n) {
    INT_BODY(s, b[i])
}

static void bin_row_int(void *ctx, char *const *p, const int64_t *s, int64_t n) {
    const bin_ctx *c = ctx;
    const int64_t es = (int64_t)em_dtype_size(c->dt);
    int64_t ba[CPU_BLK], bb[CPU_BLK], bo[CPU_BLK];
    for (int64_t i = 0; i < n; i += CPU_BLK) {
        int64_t m = n - i < CPU_BLK ? n - i : CPU_BLK;
        const int64_t *a = cpu_blk_i64(c->dt, p[1] + i * s[1] * es, s[1], m, ba);
        const int64_t *b = cpu_blk_i64(c->dt, p[2] + i * s[2] * es, s[2], m, bb);
        if (s[1] && s[2]) int_vv(c->op, bo, a, b, m);
        else if (s[1]) int_vs(c->op, bo, a, b[0], m);
        else if (s[2]) int_sv(c->op, bo, a[0], b, m);
        else {
            int_sv(c->op, bo, a[0], b, 1);
            for (int64_t k = 1; k < m; k++) bo[k] = bo[0];
        }
        cpu_blk_st_i64(c->dt, p[0] + i * s[0] * es, s[0], bo, m);
    }
}

typedef struct bin_job {
    cpu_iter it;
    cpu_row_fn row;
    bin_ctx c;
} bin_job;

static void bin_range(int64_t lo, int64_t hi, void *arg) {
    bin_job *j = arg;
    cpu_iter_range(&j->it, lo, hi, j->row, &j->c);
}

/* ---- short rows: blocks of whole rows as one vector ----
 * When the inner rows are short (a channel broadcast [N,C,H,W] x [1,C,1,1] with small H*W, a
 * row broadcast of 64 columns), the cost per row (the odometer, the op's switch, a vector
 * loop's head and tail) outweighs the work. Then the iteration takes blocks of up to SB_MAX
 * elements (16 KiB of f64 a buffer on the stack): mm consecutive rows of dim rank-2 of a dense output, each operand either dense
 * over the block, one value, or gathered into a buffer, and the broadcast operands (stride 0
 * over the outer dims) gathered once per thread and reused; each block is one vector op. */

#define SB_MAX 2048
#define SB_ROW 256 /* rows up to this long take blocks */

typedef struct sb_job {
    const cpu_iter *it;
    em_binary_op op;
    em_dtype dt;
    int64_t n, M, mchunk, chunks;
    bool inv[3]; /* operand k's block is the same for every unit */
} sb_job;

/* unit u's element offsets of each view, and its rows */
static void sb_unit(const sb_job *j, int64_t u, int64_t *off, int64_t *mm) {
    const cpu_iter *it = j->it;
    const int r = it->rank;
    int64_t c = u % j->chunks, rest = u / j->chunks, j0 = c * j->mchunk;
    for (int k = 0; k < 3; k++) off[k] = j0 * it->strides[k][r - 2];
    for (int d = r - 3; d >= 0; d--) {
        int64_t idx = rest % it->shape[d];
        rest /= it->shape[d];
        for (int k = 0; k < 3; k++) off[k] += idx * it->strides[k][d];
    }
    *mm = j->M - j0 < j->mchunk ? j->M - j0 : j->mchunk;
}

#define SB_RANGE(T, SUFFIX, GATHER_ROW, DENSE)                                                  \
    static void sb_range_##SUFFIX(int64_t lo, int64_t hi, void *arg) {                         \
        const sb_job *j = arg;                                                                 \
        const cpu_iter *it = j->it;                                                            \
        const int r = it->rank;                                                                \
        const int64_t n = j->n, es = (int64_t)em_dtype_size(j->dt);                            \
        T g[3][SB_MAX], one[3];                                                                \
        bool have[3] = {false, false, false};                                                  \
        for (int64_t u = lo; u < hi; u++) {                                                    \
            int64_t off[3], mm;                                                                \
            sb_unit(j, u, off, &mm);                                                           \
            const int64_t P = mm * n;                                                          \
            const T *x[3];                                                                     \
            bool vec[3];                                                                       \
            for (int k = 1; k < 3; k++) {                                                      \
                const int64_t s = it->strides[k][r - 1], s2 = it->strides[k][r - 2];           \
                const char *p = it->base[k] + off[k] * es;                                     \
                vec[k] = true;                                                                 \
                if (s == 1 && s2 == n) {                                                       \
                    x[k] = DENSE(k, p, P);                                                     \
                } else if (s == 0 && s2 == 0) {                                                \
                    GATHER_ROW(&one[k], p, 0, 1);                                              \
                    x[k] = &one[k];                                                            \
                    vec[k] = false;                                                            \
                } else {                                                                       \
                    x[k] = g[k];                                                               \
                    if (have[k]) continue;                                                     \
                    int64_t rows = j->inv[k] ? j->mchunk : mm;                                 \
                    for (int64_t q = 0; q < rows; q++)                                         \
                        GATHER_ROW(g[k] + q * n, p + q * s2 * es, s, n);                       \
                    have[k] = j->inv[k];                                                       \
                }                                                                              \
            }                                                                                  \
            char *po = it->base[0] + off[0] * es;                                              \
            SB_COMPUTE_##SUFFIX                                                                \
        }                                                                                      \
    }

/* f32 and half: compute in float; a dense half operand is converted into its buffer */
static inline void sb_row_f32(em_dtype dt, float *d, const char *p, int64_t s, int64_t n) {
    if (s == 0) {
        float v = *cpu_blk_f32(dt, p, 0, 1, d);
        for (int64_t i = 0; i < n; i++) d[i] = v;
        return;
    }
    const float *x = cpu_blk_f32(dt, p, s, n, d);
    if (x != d) memcpy(d, x, (size_t)n * sizeof *d);
}
#define SB_GATHER_F32(d, p, s, n) sb_row_f32(j->dt, (d), (p), (s), (n))
#define SB_DENSE_F32(k, p, P)                                                                  \
    (j->dt == EM_F32 ? (const float *)(p)                                                      \
                     : (cpu_half_to_f32_n(j->dt, g[k], (const uint16_t *)(p), (P)), g[k]))
#define SB_COMPUTE_f32                                                                         \
    if (j->dt == EM_F32) {                                                                     \
        bin_any_f32(j->op, (float *)po, x[1], vec[1], x[2], vec[2], P);                        \
    } else {                                                                                   \
        bin_any_f32(j->op, g[0], x[1], vec[1], x[2], vec[2], P);                               \
        cpu_f32_to_half_n(j->dt, (uint16_t *)po, g[0], P);                                     \
    }

static inline void sb_row_f64(double *d, const char *p, int64_t s, int64_t n) {
    const double *x = (const double *)p;
    for (int64_t i = 0; i < n; i++) d[i] = x[i * s];
}
#define SB_GATHER_F64(d, p, s, n) sb_row_f64((d), (p), (s), (n))
#define SB_DENSE_F64(k, p, P) ((const double *)(p))
#define SB_COMPUTE_f64 bin_any_f64(j->op, (double *)po, x[1], vec[1], x[2], vec[2], P);

SB_RANGE(float, f32, SB_GATHER_F32, SB_DENSE_F32)
SB_RANGE(double, f64, SB_GATHER_F64, SB_DENSE_F64)

/* The short-row plan when it applies: float dtypes, rank >= 2, rows of at most SB_ROW
 * elements, out dense over its two inner dims. */
static bool binary_short_rows(const cpu_iter *it, em_binary_op op, em_dtype dt) {
    const int r = it->rank;
    if (r < 2 || !cpu_is_float_dt(dt)) return false;
    const int64_t n = it->shape[r - 1], M = it->shape[r - 2];
    if (n > SB_ROW || it->strides[0][r - 1] != 1 || it->strides[0][r - 2] != n) return false;
    sb_job j = {.it = it, .op = op, .dt = dt, .n = n, .M = M};
    j.mchunk = SB_MAX / n < M ? SB_MAX / n : M;
    j.chunks = (M + j.mchunk - 1) / j.mchunk;
    for (int k = 1; k < 3; k++) {
        bool inv = it->strides[k][r - 2] == 0 || j.chunks == 1;
        for (int d = 0; d < r - 2; d++) inv = inv && it->strides[k][d] == 0;
        j.inv[k] = inv;
    }
    int64_t units = it->numel / (n * M) * j.chunks;
    int64_t grain = CPU_GRAIN / (j.mchunk * n) + 1;
    cpu_parallel_for(units, grain, dt == EM_F64 ? sb_range_f64 : sb_range_f32, &j);
    return true;
}

/* out = a op b for the arithmetic and logical ops, any layout; false when the dtypes are
 * not ones the core makes (out's differs from the operands'). */
static bool binary_native(em_binary_op op, const em_view *out, const em_view *a,
                          const em_view *b) {
    em_dtype dt = a->dtype;
    if (b->dtype != dt || out->dtype != dt || op >= EM_BIN_COUNT) return false;
    if ((op >= EM_BIN_EQ && op <= EM_BIN_GE)) return false;
    bin_job j;
    const em_view *vs[3] = {out, a, b};
    cpu_iter_init(&j.it, 3, vs);
    if (j.it.numel == 0) return true;
    j.c.op = op;
    j.c.dt = dt;
    if (dt == EM_F32 || cpu_is_half(dt)) j.row = bin_row_f32;
    else if (dt == EM_F64) j.row = bin_row_f64;
    else {
        if (op == EM_BIN_POW) return false; /* float-only: the core never asks */
        j.row = bin_row_int;
    }
    if (cpu_is_float_dt(dt) && (op == EM_BIN_AND || op == EM_BIN_OR)) return false;
    if (binary_short_rows(&j.it, op, dt)) return true;
    cpu_parallel_for(j.it.numel, CPU_GRAIN, bin_range, &j);
    return true;
}

em_status CPU_K(cpu_binary)(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                            const em_view *b) {
    if (binary_native(op, out, a, b)) return EM_OK;
    if (CPU_K(cpu_compare)(op, out, a, b)) return EM_OK;
    return CPU_FALLBACK(CPU_FB_BINARY, out->dtype, binary, ctx, op, out, a, b);
}

/* a op s is a op (s broadcast): one element of a's dtype with stride 0 everywhere. s is
 * already a value of a's dtype, so storing it is exact. */
static em_view scalar_view(const em_view *a, double s, void *elem) {
    em_view v = *a;
    v.buf = elem;
    v.offset = 0;
    for (int d = 0; d < v.rank; d++) v.strides[d] = 0;
    cpu_st_f64(elem, a->dtype, s);
    return v;
}

em_status CPU_K(cpu_binary_scalar)(void *ctx, em_binary_op op, const em_view *out,
                                   const em_view *a, double s) {
    _Alignas(8) unsigned char elem[8] = {0};
    em_view b = scalar_view(a, s, elem);
    if (binary_native(op, out, a, &b)) return EM_OK;
    if (CPU_K(cpu_compare)(op, out, a, &b)) return EM_OK;
    return CPU_FALLBACK(CPU_FB_BINARY_SCALAR, out->dtype, binary_scalar, ctx, op, out, a, s);
}
