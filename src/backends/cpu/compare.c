/* compare.c — the cpu backend's comparisons (-> bool) and `where`, for every dtype and layout.
 *
 * Both run on the N-d iteration of iter.h: dims that every view walks contiguously merge,
 * broadcast (stride-0) and strided dims stay, and each step is one inner row with each view's
 * stride along it. Comparisons read f32/f16/bf16 rows as float, f64 as double and the integer
 * dtypes and bool as int64 (blocks.h; f16/bf16 widen exactly, so the results are ref's), NaN
 * compares false except with NE. `where` selects elements bit for bit whatever the dtype (by
 * element size), with vector loops for rows whose strides are 0 or 1: the causal mask of
 * attention, a [T,T] condition over [B,H,T,T] with a broadcast fill value, is B*H rows of
 * T*T. The file is compiled once per instruction-set level (isa.h). */
#include "cpu.h"
#include "shortrows.h"

#define CMP_GRAIN (1 << 15)

/* o[i] = A op B as 0/1 bytes. */
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

/* a op b == b swap(op) a */
static em_binary_op cmp_swap(em_binary_op op) {
    switch (op) {
    case EM_BIN_LT: return EM_BIN_GT;
    case EM_BIN_LE: return EM_BIN_GE;
    case EM_BIN_GT: return EM_BIN_LT;
    case EM_BIN_GE: return EM_BIN_LE;
    default: return op;
    }
}

#define CMP_LOOPS(T, SUFFIX)                                                                   \
    static void cmp_vv_##SUFFIX(em_binary_op op, uint8_t *restrict o,                         \
                                const T *restrict a, const T *restrict b, int64_t n) {         \
        CMP_BODY(a[i], b[i])                                                                   \
    }                                                                                          \
    static void cmp_vs_##SUFFIX(em_binary_op op, uint8_t *restrict o,                         \
                                const T *restrict a, T s, int64_t n) {                         \
        CMP_BODY(a[i], s)                                                                      \
    }                                                                                          \
    /* a, b: vectors (va, vb) or one value each */                                            \
    static void cmp_any_##SUFFIX(em_binary_op op, uint8_t *restrict o, const T *a, bool va,   \
                                 const T *b, bool vb, int64_t n) {                             \
        if (va && vb) cmp_vv_##SUFFIX(op, o, a, b, n);                                         \
        else if (va) cmp_vs_##SUFFIX(op, o, a, b[0], n);                                       \
        else if (vb) cmp_vs_##SUFFIX(cmp_swap(op), o, b, a[0], n);                             \
        else {                                                                                 \
            cmp_vs_##SUFFIX(op, o, a, b[0], 1);                                                \
            memset(o + 1, o[0], (size_t)(n - 1));                                              \
        }                                                                                      \
    }

CMP_LOOPS(float, f32)
CMP_LOOPS(double, f64)
CMP_LOOPS(int64_t, i64)

static bool is_cmp(em_binary_op op) { return op >= EM_BIN_EQ && op <= EM_BIN_GE; }

typedef struct cmp_ctx {
    em_binary_op op;
    em_dtype dt; /* the operands' */
} cmp_ctx;

static bool unit_or_zero(int64_t s) { return s == 0 || s == 1; }

/* p/s: out (bool), a, b; any strides and float dtypes, a block at a time (its buffers kept out
 * of cmp_row's frame) */
static __attribute__((noinline)) void cmp_row_blocked(const cmp_ctx *c, char *const *p,
                                                       const int64_t *s, int64_t n) {
    const int64_t es = (int64_t)em_dtype_size(c->dt);
    uint8_t bo[CPU_BLK];
    for (int64_t i = 0; i < n; i += CPU_BLK) {
        int64_t m = n - i < CPU_BLK ? n - i : CPU_BLK;
        uint8_t *o = s[0] == 1 ? (uint8_t *)p[0] + i : bo;
        const char *pa = p[1] + i * s[1] * es, *pb = p[2] + i * s[2] * es;
        if (c->dt == EM_F64) {
            double ba[CPU_BLK], bb[CPU_BLK];
            cmp_any_f64(c->op, o, cpu_blk_f64(pa, s[1], m, ba), s[1] != 0,
                        cpu_blk_f64(pb, s[2], m, bb), s[2] != 0, m);
        } else if (c->dt == EM_F32 || cpu_is_half(c->dt)) {
            float ba[CPU_BLK], bb[CPU_BLK];
            cmp_any_f32(c->op, o, cpu_blk_f32(c->dt, pa, s[1], m, ba), s[1] != 0,
                        cpu_blk_f32(c->dt, pb, s[2], m, bb), s[2] != 0, m);
        } else {
            int64_t ba[CPU_BLK], bb[CPU_BLK];
            cmp_any_i64(c->op, o, cpu_blk_i64(c->dt, pa, s[1], m, ba), s[1] != 0,
                        cpu_blk_i64(c->dt, pb, s[2], m, bb), s[2] != 0, m);
        }
        if (s[0] != 1) {
            uint8_t *q = (uint8_t *)p[0] + i * s[0];
            for (int64_t k = 0; k < m; k++) q[k * s[0]] = bo[k];
        }
    }
}

static void cmp_row(void *ctx, char *const *p, const int64_t *s, int64_t n) {
    const cmp_ctx *c = ctx;
    if (s[0] == 1 && unit_or_zero(s[1]) && unit_or_zero(s[2])) {
        if (c->dt == EM_F32) {
            cmp_any_f32(c->op, (uint8_t *)p[0], (const float *)p[1], s[1] != 0,
                        (const float *)p[2], s[2] != 0, n);
            return;
        }
        if (c->dt == EM_F64) {
            cmp_any_f64(c->op, (uint8_t *)p[0], (const double *)p[1], s[1] != 0,
                        (const double *)p[2], s[2] != 0, n);
            return;
        }
    }
    cmp_row_blocked(c, p, s, n);
}

/* short rows as blocks (shortrows.h) */
#define CMP_SB_F32(j, po, x, vec, P, g0)                                                       \
    cmp_any_f32((j)->op, (uint8_t *)(po), x[1], vec[1], x[2], vec[2], P)
#define CMP_SB_F64(j, po, x, vec, P, g0)                                                       \
    cmp_any_f64((j)->op, (uint8_t *)(po), x[1], vec[1], x[2], vec[2], P)
CPU_SB_RANGE(cmp_sb_f32, float, CPU_SB_GATHER_F32, CPU_SB_DENSE_F32, CMP_SB_F32)
CPU_SB_RANGE(cmp_sb_f64, double, CPU_SB_GATHER_F64, CPU_SB_DENSE_F64, CMP_SB_F64)

bool CPU_K(cpu_compare)(em_binary_op op, const em_view *out, const em_view *a,
                        const em_view *b) {
    if (!is_cmp(op) || out->dtype != EM_BOOL || a->dtype != b->dtype) return false;
    cmp_ctx c = {op, a->dtype};
    cpu_iter_job j = {.row = cmp_row, .ctx = &c};
    const em_view *vs[3] = {out, a, b};
    cpu_iter_init(&j.it, 3, vs);
    if (!j.it.numel) return true;
    if (cpu_sb_run(&j.it, op, a->dtype, a->dtype == EM_F64 ? cmp_sb_f64 : cmp_sb_f32, CMP_GRAIN,
                   cpu_parallel_for))
        return true;
    cpu_parallel_for(j.it.numel, CMP_GRAIN, cpu_iter_job_range, &j);
    return true;
}

/* ---- where ---- */

/* p/s: out, cond (bool bytes), a, b; elements of type U copied bit for bit. */
#define WHERE_ROW(U, SUFFIX)                                                                   \
    static void where_row_##SUFFIX(void *ctx, char *const *p, const int64_t *s, int64_t n) {  \
        (void)ctx;                                                                             \
        U *restrict o = (U *)p[0];                                                             \
        const uint8_t *restrict c = (const uint8_t *)p[1];                                     \
        const U *a = (const U *)p[2], *b = (const U *)p[3];                                    \
        const int64_t so = s[0], sc = s[1], sa = s[2], sb = s[3];                              \
        if (sc == 0) { /* one choice for the whole row: a copy */                              \
            const U *x = c[0] ? a : b;                                                         \
            int64_t sx = c[0] ? sa : sb;                                                       \
            if (so == 1 && sx == 1) memcpy(o, x, (size_t)n * sizeof(U));                       \
            else if (so == 1 && sx == 0) {                                                     \
                U v = x[0];                                                                    \
                for (int64_t i = 0; i < n; i++) o[i] = v;                                      \
            } else                                                                             \
                for (int64_t i = 0; i < n; i++) o[i * so] = x[i * sx];                         \
            return;                                                                            \
        }                                                                                      \
        if (so == 1 && sc == 1) {                                                              \
            if (sa == 1 && sb == 1)                                                            \
                for (int64_t i = 0; i < n; i++) {                                              \
                    U x = a[i], y = b[i];                                                      \
                    o[i] = c[i] ? x : y;                                                       \
                }                                                                              \
            else if (sa == 0 && sb == 1) {                                                     \
                U x = a[0];                                                                    \
                for (int64_t i = 0; i < n; i++) {                                              \
                    U y = b[i];                                                                \
                    o[i] = c[i] ? x : y;                                                       \
                }                                                                              \
            } else if (sa == 1 && sb == 0) {                                                   \
                U y = b[0];                                                                    \
                for (int64_t i = 0; i < n; i++) {                                              \
                    U x = a[i];                                                                \
                    o[i] = c[i] ? x : y;                                                       \
                }                                                                              \
            } else if (sa == 0 && sb == 0) {                                                   \
                U x = a[0], y = b[0];                                                          \
                for (int64_t i = 0; i < n; i++) o[i] = c[i] ? x : y;                           \
            } else                                                                             \
                for (int64_t i = 0; i < n; i++) {                                              \
                    U x = a[i * sa], y = b[i * sb];                                            \
                    o[i] = c[i] ? x : y;                                                       \
                }                                                                              \
            return;                                                                            \
        }                                                                                      \
        for (int64_t i = 0; i < n; i++) {                                                      \
            U x = a[i * sa], y = b[i * sb];                                                    \
            o[i * so] = c[i * sc] ? x : y;                                                     \
        }                                                                                      \
    }

WHERE_ROW(uint8_t, 1)
WHERE_ROW(uint16_t, 2)
WHERE_ROW(uint32_t, 4)
WHERE_ROW(uint64_t, 8)

/* m rows of `where` (cpu_iter_rows): one row function, no odometer between rows */
typedef struct where_rows_ctx {
    cpu_row_fn row;
    int64_t es;
} where_rows_ctx;

static void where_rows(void *ctx, char *const *p, const int64_t *s, int64_t n, const int64_t *s2,
                       int64_t m) {
    const where_rows_ctx *w = ctx;
    char *q[4];
    for (int64_t r = 0; r < m; r++) {
        q[0] = p[0] + r * s2[0] * w->es;
        q[1] = p[1] + r * s2[1];
        q[2] = p[2] + r * s2[2] * w->es;
        q[3] = p[3] + r * s2[3] * w->es;
        w->row(NULL, q, s, n);
    }
}

em_status CPU_K(cpu_where)(void *ctx, const em_view *out, const em_view *cond,
                           const em_view *a, const em_view *b) {
    size_t es = em_dtype_size(out->dtype);
    bool ok = cond->dtype == EM_BOOL && a->dtype == out->dtype && b->dtype == out->dtype &&
              (es == 1 || es == 2 || es == 4 || es == 8);
    if (!ok) return CPU_FALLBACK(CPU_FB_WHERE, out->dtype, where, ctx, out, cond, a, b);
    cpu_iter_job j = {.row = es == 1   ? where_row_1
                             : es == 2 ? where_row_2
                             : es == 4 ? where_row_4
                                       : where_row_8,
                      .ctx = NULL};
    const em_view *vs[4] = {out, cond, a, b};
    cpu_iter_init(&j.it, 4, vs);
    if (!j.it.numel) return EM_OK;
    int64_t inner = j.it.shape[j.it.rank - 1], rows = cpu_iter_rows_count(&j.it);
    if (inner < 256 && rows >= 4 * (int64_t)cpu_threads()) { /* short rows: runs of rows */
        where_rows_ctx wc = {j.row, (int64_t)es};
        cpu_rows_job rj = {j.it, where_rows, &wc};
        cpu_parallel_for(rows, CMP_GRAIN / inner + 1, cpu_rows_job_range, &rj);
        return EM_OK;
    }
    cpu_parallel_for(j.it.numel, CMP_GRAIN, cpu_iter_job_range, &j);
    return EM_OK;
}
