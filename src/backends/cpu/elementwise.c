/* elementwise.c — the cpu backend's binary and scalar kernels (unary.c has the unary ones).
 *
 * Every layout runs here: the operands go through one N-d iteration (iter.h) that merges the
 * dims all views walk contiguously and leaves one inner row per step, with each operand's
 * stride along it (1, 0 for a broadcast, anything for a transposed or sliced view). f32/f64
 * rows with strides 0 and 1 run the vector loops below on the tensors themselves; other
 * strides are gathered, and f16/bf16 converted, a block at a time (blocks.h). A channel
 * broadcast [N,C,H,W] x [1,C,1,1] is N*C rows of H*W against one value; rows of at most 256
 * elements are taken as blocks of rows, one vector op a block (shortrows.h). f16/bf16
 * compute in f32 and round once on store, as ref does (its double result rounded to float,
 * then to the dtype, is the float result for + - * / max min). Integer dtypes compute in
 * int64 with ref's wrapping, floor division and remainder; bool and / or / xor as bytes.
 * atan2 is vmath_more.h's (f32, f16, bf16) or libm's (f64). Comparisons go to
 * compare.c. The file is compiled once per instruction-set level (isa.h); rows are split
 * over the thread pool. */
#include <math.h>

#include "cpu.h"
#include "shortrows.h"
#include "vmath_more.h"

#define CPU_GRAIN (1 << 15)

/* atan2: vmath_more.h's for floats (f16 / bf16 through them), libm for f64 */
#define CPU_ATAN2(A, B) _Generic((A), float: cpu_atan2f, default: atan2)((A), (B))

/* ---- binary: a op b, with a and b each either a vector or a scalar per row ---- */

/* Python-style remainder (the divisor's sign), as np.remainder. */
#define REM(T, a, b) ({ T r_ = fmod((a), (b)); (r_ != 0 && ((r_ < 0) != ((b) < 0))) ? r_ + (b) : r_; })

#define BIN_BODY(T, A, B)                                                                      \
    switch (op) {                                                                              \
    case EM_BIN_ADD: for (int64_t i = 0; i < n; i++) o[i] = A + B; break;                      \
    case EM_BIN_SUB: for (int64_t i = 0; i < n; i++) o[i] = A - B; break;                      \
    case EM_BIN_MUL: for (int64_t i = 0; i < n; i++) o[i] = A * B; break;                      \
    case EM_BIN_DIV: for (int64_t i = 0; i < n; i++) o[i] = A / B; break;                      \
    case EM_BIN_POW: for (int64_t i = 0; i < n; i++) o[i] = _Generic(o[i], float: cpu_powf, default: pow)(A, B); break; \
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
    case EM_BIN_ATAN2: for (int64_t i = 0; i < n; i++) o[i] = CPU_ATAN2(A, B); break;         \
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

/* One row of a float op (f32, f16, bf16 through f32), a block at a time (its buffers kept out
 * of bin_row_f32's frame). p/s: out, a, b. */
static __attribute__((noinline)) void bin_row_f32_blocked(const bin_ctx *c, char *const *p,
                                                          const int64_t *s, int64_t n) {
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

static void bin_row_f32(void *ctx, char *const *p, const int64_t *s, int64_t n) {
    const bin_ctx *c = ctx;
    if (c->dt == EM_F32 && s[0] == 1 && unit_or_zero(s[1]) && unit_or_zero(s[2])) {
        bin_any_f32(c->op, (float *)p[0], (const float *)p[1], s[1] != 0, (const float *)p[2],
                    s[2] != 0, n);
        return;
    }
    bin_row_f32_blocked(c, p, s, n);
}

static __attribute__((noinline)) void bin_row_f64_blocked(const bin_ctx *c, char *const *p,
                                                          const int64_t *s, int64_t n) {
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

static void bin_row_f64(void *ctx, char *const *p, const int64_t *s, int64_t n) {
    const bin_ctx *c = ctx;
    if (s[0] == 1 && unit_or_zero(s[1]) && unit_or_zero(s[2])) {
        bin_any_f64(c->op, (double *)p[0], (const double *)p[1], s[1] != 0,
                    (const double *)p[2], s[2] != 0, n);
        return;
    }
    bin_row_f64_blocked(c, p, s, n);
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
    case EM_BIN_XOR: for (int64_t i = 0; i < n; i++) o[i] = ((A) != 0) != ((B) != 0); break;   \
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

/* ---- bool and / or / xor: bytes (nonzero is true), no int64 staging ---- */

#define BOOL_BODY(A, B)                                                                        \
    switch (op) {                                                                              \
    case EM_BIN_AND: for (int64_t i = 0; i < n; i++) o[i * so] = ((A) != 0) & ((B) != 0); break; \
    case EM_BIN_OR: for (int64_t i = 0; i < n; i++) o[i * so] = ((A) != 0) | ((B) != 0); break; \
    default: for (int64_t i = 0; i < n; i++) o[i * so] = ((A) != 0) ^ ((B) != 0); break;       \
    }

/* o = a op b over n bools with strides so (1 in the fast cases), sa, sb (0 or 1 there). */
static void bool_loop(em_binary_op op, uint8_t *restrict o, int64_t so, const uint8_t *a,
                      int64_t sa, const uint8_t *b, int64_t sb, int64_t n) {
    if (so == 1 && sa == 1 && sb == 1) {
        so = 1;
        BOOL_BODY(a[i], b[i])
    } else if (so == 1 && sa == 1 && sb == 0) {
        so = 1;
        const uint8_t y = b[0];
        BOOL_BODY(a[i], y)
    } else if (so == 1 && sa == 0 && sb == 1) {
        so = 1;
        const uint8_t x = a[0];
        BOOL_BODY(x, b[i])
    } else {
        BOOL_BODY(a[i * sa], b[i * sb])
    }
}

static void bin_row_bool(void *ctx, char *const *p, const int64_t *s, int64_t n) {
    const bin_ctx *c = ctx;
    bool_loop(c->op, (uint8_t *)p[0], s[0], (const uint8_t *)p[1], s[1], (const uint8_t *)p[2],
              s[2], n);
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

/* ---- short rows as blocks (shortrows.h) ---- */

#define BIN_SB_F32(j, po, x, vec, P, g0)                                                       \
    do {                                                                                       \
        if ((j)->dt == EM_F32) {                                                               \
            bin_any_f32((j)->op, (float *)(po), x[1], vec[1], x[2], vec[2], P);                \
        } else {                                                                               \
            bin_any_f32((j)->op, g0, x[1], vec[1], x[2], vec[2], P);                           \
            cpu_f32_to_half_n((j)->dt, (uint16_t *)(po), g0, P);                               \
        }                                                                                      \
    } while (0)
#define BIN_SB_F64(j, po, x, vec, P, g0)                                                       \
    bin_any_f64((j)->op, (double *)(po), x[1], vec[1], x[2], vec[2], P)

CPU_SB_RANGE(bin_sb_f32, float, CPU_SB_GATHER_F32, CPU_SB_DENSE_F32, BIN_SB_F32)
CPU_SB_RANGE(bin_sb_f64, double, CPU_SB_GATHER_F64, CPU_SB_DENSE_F64, BIN_SB_F64)

/* ---- tiny calls: the one row the iteration would make, without building it ---- */

/* How operand v of an elementwise call into out is laid out: 1 dense (out's shape, row-major
 * without gaps), 0 one value (out's shape, stride 0 along every dim longer than 1), -1 any
 * other way. */
static int ew_layout(const em_view *out, const em_view *v) {
    if (v->rank != out->rank) return -1;
    bool dense = true, one = true;
    int64_t st = 1;
    for (int d = v->rank - 1; d >= 0; d--) {
        if (v->shape[d] != out->shape[d]) return -1;
        if (v->shape[d] == 1) continue;
        dense = dense && v->strides[d] == st;
        one = one && v->strides[d] == 0;
        st *= v->shape[d];
    }
    return dense ? 1 : one ? 0 : -1;
}

/* out = a op b (b NULL: the value at *bval) for an f32 or f64 arithmetic op when out is dense,
 * each operand dense or one value, and the call too small for the pool to split: then
 * cpu_iter_init merges every dim into one row of numel elements with strides 1 (dense) or 0
 * (one value), and bin_row_f32 / bin_row_f64 run it as bin_any_* does here, so the bits are
 * the same. False (nothing done) for any other call. */
static bool bin_tiny(em_binary_op op, const em_view *out, const em_view *a, const em_view *b,
                     const void *bval) {
    const em_dtype dt = out->dtype;
    if ((dt != EM_F32 && dt != EM_F64) || a->dtype != dt || (b && b->dtype != dt)) return false;
    if (op > EM_BIN_MIN && op != EM_BIN_ATAN2) return false; /* comparisons, logical ops */
    const int64_t n = cpu_numel(out);
    if (n < 2 || n >= 2 * CPU_GRAIN || ew_layout(out, out) != 1) return false;
    const int la = ew_layout(out, a), lb = b ? ew_layout(out, b) : 0;
    if (la < 0 || lb < 0) return false;
    if (dt == EM_F32) {
        float *o = (float *)out->buf + out->offset;
        const float *pa = (const float *)a->buf + a->offset;
        const float *pb = b ? (const float *)b->buf + b->offset : (const float *)bval;
        bin_any_f32(op, o, pa, la, pb, lb, n);
    } else {
        double *o = (double *)out->buf + out->offset;
        const double *pa = (const double *)a->buf + a->offset;
        const double *pb = b ? (const double *)b->buf + b->offset : (const double *)bval;
        bin_any_f64(op, o, pa, la, pb, lb, n);
    }
    return true;
}

/* out = a op b for the arithmetic and logical ops, any layout; false when the dtypes are
 * not ones the core makes (out's differs from the operands'). */
static bool binary_native(em_binary_op op, const em_view *out, const em_view *a,
                          const em_view *b) {
    em_dtype dt = a->dtype;
    if (b->dtype != dt || out->dtype != dt || op >= EM_BIN_COUNT) return false;
    if ((op >= EM_BIN_EQ && op <= EM_BIN_GE)) return false;
    if (bin_tiny(op, out, a, b, NULL)) return true;
    bin_job j;
    const em_view *vs[3] = {out, a, b};
    cpu_iter_init(&j.it, 3, vs);
    if (j.it.numel == 0) return true;
    j.c.op = op;
    j.c.dt = dt;
    if (dt == EM_F32 || cpu_is_half(dt)) j.row = bin_row_f32;
    else if (dt == EM_F64) j.row = bin_row_f64;
    else if (dt == EM_BOOL && (op == EM_BIN_AND || op == EM_BIN_OR || op == EM_BIN_XOR))
        j.row = bin_row_bool;
    else {
        if (op == EM_BIN_POW || op == EM_BIN_ATAN2) return false; /* float-only: never asked */
        j.row = bin_row_int;
    }
    if (cpu_is_float_dt(dt) && (op == EM_BIN_AND || op == EM_BIN_OR || op == EM_BIN_XOR))
        return false;
    if (cpu_sb_run(&j.it, op, dt, dt == EM_F64 ? bin_sb_f64 : bin_sb_f32, CPU_GRAIN,
                   cpu_parallel_for))
        return true;
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
    /* the value as scalar_view stores it (rounded to a's dtype) */
    const float sf = (float)s;
    if (bin_tiny(op, out, a, NULL, a->dtype == EM_F32 ? (const void *)&sf : (const void *)&s))
        return EM_OK;
    _Alignas(8) unsigned char elem[8] = {0};
    em_view b = scalar_view(a, s, elem);
    if (binary_native(op, out, a, &b)) return EM_OK;
    if (CPU_K(cpu_compare)(op, out, a, &b)) return EM_OK;
    return CPU_FALLBACK(CPU_FB_BINARY_SCALAR, out->dtype, binary_scalar, ctx, op, out, a, s);
}
