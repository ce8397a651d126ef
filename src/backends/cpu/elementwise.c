/* elementwise.c — the cpu backend's binary and scalar kernels for f32 and f64 (unary.c has
 * the unary ones).
 *
 * Fast paths: every operand contiguous (one flat loop), or binary operands that broadcast
 * along whole rows (the last dim has stride 1 or 0 in each operand). The file is compiled
 * once per instruction-set level (isa.h: portable, AVX2, AVX-512, one chosen at run time);
 * loops are split over the thread pool. Other dtypes and layouts go to the ref kernels. */
#include <math.h>

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
    case EM_BIN_POW: for (int64_t i = 0; i < n; i++) o[i] = _Generic(o[i], float: cpu_powf, default: pow)(A, B); break; \
    case EM_BIN_REM: for (int64_t i = 0; i < n; i++) o[i] = REM(T, A, B); break;               \
    case EM_BIN_MAX:                                                                           \
        for (int64_t i = 0; i < n; i++) {                                                      \
            T a_ = A, b_ = B;                                                                  \
            o[i] = a_ != a_ ? a_ : (b_ != b_ ? b_ : (a_ > b_ ? a_ : b_));                      \
        }                                                                                      \
        break;                                                                                 \
    case EM_BIN_MIN:                                                                           \
        for (int64_t i = 0; i < n; i++) {                                                      \
            T a_ = A, b_ = B;                                                                  \
            o[i] = a_ != a_ ? a_ : (b_ != b_ ? b_ : (a_ < b_ ? a_ : b_));                      \
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

/* One row of a op b: sa / sb are the operands' strides along it (0 or 1). */
static void bin_row(em_binary_op op, em_dtype dt, void *o, const void *a, int64_t sa,
                    const void *b, int64_t sb, int64_t n) {
    if (dt == EM_F32) {
        if (sa && sb) bin_vv_f32(op, o, a, b, n);
        else if (sa) bin_vs_f32(op, o, a, *(const float *)b, n);
        else if (sb) bin_sv_f32(op, o, *(const float *)a, b, n);
        else {
            float s = *(const float *)b;
            bin_sv_f32(op, o, *(const float *)a, &s, 1);
            for (int64_t i = 1; i < n; i++) ((float *)o)[i] = ((float *)o)[0];
        }
    } else {
        if (sa && sb) bin_vv_f64(op, o, a, b, n);
        else if (sa) bin_vs_f64(op, o, a, *(const double *)b, n);
        else if (sb) bin_sv_f64(op, o, *(const double *)a, b, n);
        else {
            double s = *(const double *)b;
            bin_sv_f64(op, o, *(const double *)a, &s, 1);
            for (int64_t i = 1; i < n; i++) ((double *)o)[i] = ((double *)o)[0];
        }
    }
}

typedef struct binary_job {
    em_binary_op op;
    const em_view *out, *a, *b;
    int64_t row; /* elements per row (the last dim, or everything when flat) */
    bool flat;
} binary_job;

static void binary_range(int64_t lo, int64_t hi, void *arg) {
    binary_job *j = arg;
    size_t sz = em_dtype_size(j->out->dtype);
    char *o = cpu_ptr(j->out);
    const char *a = cpu_ptr(j->a), *b = cpu_ptr(j->b);
    if (j->flat) { /* lo..hi are elements */
        bin_row(j->op, j->out->dtype, o + lo * (int64_t)sz, a + lo * (int64_t)sz, 1,
                b + lo * (int64_t)sz, 1, hi - lo);
        return;
    }
    /* lo..hi are rows: the multi-index of the row gives each operand's offset */
    int r = j->out->rank;
    int64_t sa = r ? j->a->strides[r - 1] : 0, sb = r ? j->b->strides[r - 1] : 0;
    for (int64_t row = lo; row < hi; row++) {
        int64_t rem = row, oa = 0, ob = 0;
        for (int d = r - 2; d >= 0; d--) {
            int64_t idx = rem % j->out->shape[d];
            rem /= j->out->shape[d];
            oa += idx * j->a->strides[d];
            ob += idx * j->b->strides[d];
        }
        bin_row(j->op, j->out->dtype, o + row * j->row * (int64_t)sz, a + oa * (int64_t)sz, sa,
                b + ob * (int64_t)sz, sb, j->row);
    }
}

static bool unit_or_zero(int64_t s) { return s == 0 || s == 1; }

em_status CPU_K(cpu_binary)(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                            const em_view *b) {
    bool fast = (a->dtype == EM_F32 || a->dtype == EM_F64) && out->dtype == a->dtype &&
                op <= EM_BIN_MIN && cpu_contiguous(out);
    int r = out->rank;
    if (fast && cpu_contiguous(a) && cpu_contiguous(b) && cpu_numel(a) == cpu_numel(out) &&
        cpu_numel(b) == cpu_numel(out)) {
        binary_job j = {op, out, a, b, 0, true};
        cpu_parallel_for(cpu_numel(out), CPU_GRAIN, binary_range, &j);
        return EM_OK;
    }
    if (fast && r >= 1 && unit_or_zero(a->strides[r - 1]) && unit_or_zero(b->strides[r - 1]) &&
        out->shape[r - 1] >= 8) {
        int64_t row = out->shape[r - 1], rows = row ? cpu_numel(out) / row : 0;
        binary_job j = {op, out, a, b, row, false};
        int64_t grain = CPU_GRAIN / row + 1;
        cpu_parallel_for(rows, grain, binary_range, &j);
        return EM_OK;
    }
    if (CPU_K(cpu_compare)(op, out, a, b)) return EM_OK;
    return CPU_FALLBACK(CPU_FB_BINARY, out->dtype, binary, ctx, op, out, a, b);
}

typedef struct scalar_job {
    em_binary_op op;
    void *o;
    const void *a;
    em_dtype dt;
    double s;
} scalar_job;

static void scalar_range(int64_t lo, int64_t hi, void *arg) {
    scalar_job *j = arg;
    if (j->dt == EM_F32)
        bin_vs_f32(j->op, (float *)j->o + lo, (const float *)j->a + lo, (float)j->s, hi - lo);
    else
        bin_vs_f64(j->op, (double *)j->o + lo, (const double *)j->a + lo, j->s, hi - lo);
}

em_status CPU_K(cpu_binary_scalar)(void *ctx, em_binary_op op, const em_view *out,
                                   const em_view *a, double s) {
    bool fast = (a->dtype == EM_F32 || a->dtype == EM_F64) && out->dtype == a->dtype &&
                op <= EM_BIN_MIN && cpu_contiguous(out) && cpu_contiguous(a);
    if (!fast && CPU_K(cpu_compare_scalar)(op, out, a, s)) return EM_OK;
    if (!fast) return CPU_FALLBACK(CPU_FB_BINARY_SCALAR, out->dtype, binary_scalar, ctx, op, out, a, s);
    scalar_job j = {op, cpu_ptr(out), cpu_ptr(a), a->dtype, s};
    cpu_parallel_for(cpu_numel(out), CPU_GRAIN, scalar_range, &j);
    return EM_OK;
}
