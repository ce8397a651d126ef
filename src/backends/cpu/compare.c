/* compare.c — the cpu backend's comparisons (f32/f64 -> bool) and `where`.
 *
 * Fast paths for dense operands: comparisons of a contiguous tensor with a scalar or with
 * another contiguous tensor of its shape, and `where` whose operands are each either
 * contiguous with out's shape or a single broadcast value (all strides 0) — the layouts the
 * autodiff rules produce (relu's mask, a gradient or 0). Everything else goes to ref. */
#include "cpu.h"

#define CMP_GRAIN (1 << 15)

/* o[i] = A op B as 0/1 bytes, NaN compares false except with NE. */
#define CMP_BODY(A, B)                                                                         \
    switch (op) {                                                                              \
    case EM_BIN_EQ: for (int64_t i = 0; i < n; i++) o[i] = (A) == (B); break;                  \
    case EM_BIN_NE: for (int64_t i = 0; i < n; i++) o[i] = (A) != (B); break;                  \
    case EM_BIN_LT: for (int64_t i = 0; i < n; i++) o[i] = (A) < (B); break;                   \
    case EM_BIN_LE: for (int64_t i = 0; i < n; i++) o[i] = (A) <= (B); break;                  \
    case EM_BIN_GT: for (int64_t i = 0; i < n; i++) o[i] = (A) > (B); break;                   \
    case EM_BIN_GE: for (int64_t i = 0; i < n; i++) o[i] = (A) >= (B); break;                  \
    default: break;                                                                            \
    }

#define CMP_LOOPS(T, SUFFIX)                                                                   \
    static void cmp_vv_##SUFFIX(em_binary_op op, uint8_t *restrict o,                         \
                                const T *restrict a, const T *restrict b,                      \
                                int64_t n) {                                                   \
        CMP_BODY(a[i], b[i])                                                                   \
    }                                                                                          \
    static void cmp_vs_##SUFFIX(em_binary_op op, uint8_t *restrict o,                         \
                                const T *restrict a, T s, int64_t n) {                         \
        CMP_BODY(a[i], s)                                                                      \
    }

CMP_LOOPS(float, f32)
CMP_LOOPS(double, f64)

static bool is_cmp(em_binary_op op) { return op >= EM_BIN_EQ && op <= EM_BIN_GE; }

typedef struct cmp_job {
    em_binary_op op;
    uint8_t *o;
    const void *a, *b; /* b NULL: against s */
    em_dtype dt;
    double s;
} cmp_job;

static void cmp_range(int64_t lo, int64_t hi, void *arg) {
    cmp_job *j = arg;
    if (j->dt == EM_F32) {
        const float *a = (const float *)j->a + lo;
        if (j->b) cmp_vv_f32(j->op, j->o + lo, a, (const float *)j->b + lo, hi - lo);
        else cmp_vs_f32(j->op, j->o + lo, a, (float)j->s, hi - lo);
    } else {
        const double *a = (const double *)j->a + lo;
        if (j->b) cmp_vv_f64(j->op, j->o + lo, a, (const double *)j->b + lo, hi - lo);
        else cmp_vs_f64(j->op, j->o + lo, a, j->s, hi - lo);
    }
}

static bool cmp_fast(em_binary_op op, const em_view *out, const em_view *a) {
    return is_cmp(op) && (a->dtype == EM_F32 || a->dtype == EM_F64) && out->dtype == EM_BOOL &&
           cpu_contiguous(out) && cpu_contiguous(a) && cpu_numel(a) == cpu_numel(out);
}

bool CPU_K(cpu_compare)(em_binary_op op, const em_view *out, const em_view *a,
                        const em_view *b) {
    if (!cmp_fast(op, out, a) || b->dtype != a->dtype || !cpu_contiguous(b) ||
        cpu_numel(b) != cpu_numel(out))
        return false;
    cmp_job j = {op, cpu_ptr(out), cpu_ptr(a), cpu_ptr(b), a->dtype, 0};
    cpu_parallel_for(cpu_numel(out), CMP_GRAIN, cmp_range, &j);
    return true;
}

bool CPU_K(cpu_compare_scalar)(em_binary_op op, const em_view *out, const em_view *a,
                               double s) {
    if (!cmp_fast(op, out, a)) return false;
    cmp_job j = {op, cpu_ptr(out), cpu_ptr(a), NULL, a->dtype, s};
    cpu_parallel_for(cpu_numel(out), CMP_GRAIN, cmp_range, &j);
    return true;
}

/* ---- where ---- */

/* True when every stride of v is 0 (one value broadcast everywhere). */
static bool all_broadcast(const em_view *v) {
    for (int d = 0; d < v->rank; d++)
        if (v->shape[d] != 1 && v->strides[d] != 0) return false;
    return true;
}

/* 1: dense with out's shape; 0: one broadcast value; -1: neither. */
static int where_kind(const em_view *v, int64_t n) {
    if (cpu_contiguous(v) && cpu_numel(v) == n) return 1;
    return all_broadcast(v) ? 0 : -1;
}

#define WHERE_LOOP(T, SUFFIX)                                                                  \
    static void where_##SUFFIX(T *restrict o, const uint8_t *restrict c,                       \
                               const T *restrict a, int64_t sa,                                \
                               const T *restrict b, int64_t sb, int64_t n) {                   \
        if (sa && sb)                                                                          \
            for (int64_t i = 0; i < n; i++) o[i] = c[i] ? a[i] : b[i];                         \
        else if (sa) {                                                                         \
            T bv = b[0];                                                                       \
            for (int64_t i = 0; i < n; i++) o[i] = c[i] ? a[i] : bv;                           \
        } else if (sb) {                                                                       \
            T av = a[0];                                                                       \
            for (int64_t i = 0; i < n; i++) o[i] = c[i] ? av : b[i];                           \
        } else {                                                                               \
            T av = a[0], bv = b[0];                                                            \
            for (int64_t i = 0; i < n; i++) o[i] = c[i] ? av : bv;                             \
        }                                                                                      \
    }

WHERE_LOOP(float, f32)
WHERE_LOOP(double, f64)

typedef struct where_job {
    void *o;
    const uint8_t *c;
    const void *a, *b;
    int sa, sb; /* 1: dense, 0: broadcast value */
    em_dtype dt;
} where_job;

static void where_range(int64_t lo, int64_t hi, void *arg) {
    where_job *j = arg;
    if (j->dt == EM_F32) {
        const float *a = (const float *)j->a + (j->sa ? lo : 0);
        const float *b = (const float *)j->b + (j->sb ? lo : 0);
        where_f32((float *)j->o + lo, j->c + lo, a, j->sa, b, j->sb, hi - lo);
    } else {
        const double *a = (const double *)j->a + (j->sa ? lo : 0);
        const double *b = (const double *)j->b + (j->sb ? lo : 0);
        where_f64((double *)j->o + lo, j->c + lo, a, j->sa, b, j->sb, hi - lo);
    }
}

em_status CPU_K(cpu_where)(void *ctx, const em_view *out, const em_view *cond,
                           const em_view *a, const em_view *b) {
    int64_t n = cpu_numel(out);
    int ka = where_kind(a, n), kb = where_kind(b, n);
    bool fast = (out->dtype == EM_F32 || out->dtype == EM_F64) && a->dtype == out->dtype &&
                b->dtype == out->dtype && cond->dtype == EM_BOOL && cpu_contiguous(out) &&
                cpu_contiguous(cond) && cpu_numel(cond) == n && ka >= 0 && kb >= 0;
    if (!fast) return CPU_FALLBACK(CPU_FB_WHERE, out->dtype, where, ctx, out, cond, a, b);
    where_job j = {cpu_ptr(out), cpu_ptr(cond), cpu_ptr(a), cpu_ptr(b), ka, kb, out->dtype};
    cpu_parallel_for(n, CMP_GRAIN, where_range, &j);
    return EM_OK;
}
