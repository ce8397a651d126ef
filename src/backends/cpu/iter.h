/*
 * iter.h — the cpu backend's N-d iteration over up to 4 views of one shape, and element
 * conversions with ref's semantics.
 *
 * cpu_iter_init reads the views (the first one's shape; the others are broadcast to it with
 * stride-0 dims), drops size-1 dims, orders the dims by the first view's |stride| (largest
 * outside: a contiguous first view keeps its order) and merges adjacent dims that are
 * contiguous in every view. What is left is an outer odometer and one inner dim, the longest
 * run all views can walk with fixed strides; cpu_iter_range calls a row function on the rows
 * of a range of linear element indices [lo, hi) (a range may start and end inside a row, so
 * the pool can split a single long row):
 *
 *     row(ctx, p, s, n): p[k] is view k's pointer to the row's first element, s[k] its stride
 *     along the row in elements (0 for a broadcast, 1 when dense, negative when flipped).
 *
 * The row functions specialize the strides 1 and 0 (vector loops) and handle any other.
 *
 * Conversions: cpu_ld_f64 / cpu_ld_i64 read an element as ref's ref_ld / ref_ldi do, and
 * cpu_st_f64 / cpu_st_i64 store one as ref_st / ref_sti (floats round to the dtype, f16 and
 * bf16 through float; float to int truncates toward zero, saturating at the int64 range, NaN
 * to 0, then wraps to the width; bool is v != 0). Q8 and Q4 are int8 storage, as in ref.
 */
#ifndef EMBER_CPU_ITER_H
#define EMBER_CPU_ITER_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "ember/backend.h"

#define CPU_ITER_MAX 4

typedef struct cpu_iter {
    int n;         /* views */
    int rank;      /* merged dims, >= 1 (shape[rank-1] is the inner one) */
    int64_t numel; /* 0: nothing to do */
    int64_t shape[EM_MAX_RANK];
    int64_t strides[CPU_ITER_MAX][EM_MAX_RANK];
    char *base[CPU_ITER_MAX];
    int64_t esz[CPU_ITER_MAX];
} cpu_iter;

static inline int64_t cpu_iabs(int64_t x) { return x < 0 ? -x : x; }

/** Builds the iteration over vs[0..n) (shape of vs[0]). */
static inline void cpu_iter_init(cpu_iter *it, int n, const em_view *const *vs) {
    int dims[EM_MAX_RANK], r = 0;
    const em_view *v0 = vs[0];
    it->n = n;
    it->numel = 1;
    for (int d = 0; d < v0->rank; d++) {
        it->numel *= v0->shape[d];
        if (v0->shape[d] != 1) dims[r++] = d;
    }
    for (int k = 0; k < n; k++) {
        it->esz[k] = (int64_t)em_dtype_size(vs[k]->dtype);
        it->base[k] = (char *)vs[k]->buf + vs[k]->offset * it->esz[k];
    }
    if (it->numel == 0) {
        it->rank = 1;
        it->shape[0] = 0;
        for (int k = 0; k < n; k++) it->strides[k][0] = 0;
        return;
    }
    /* stable insertion sort by |stride of view 0|, descending */
    for (int i = 1; i < r; i++) {
        int d = dims[i], j = i;
        while (j > 0 && cpu_iabs(v0->strides[dims[j - 1]]) < cpu_iabs(v0->strides[d])) {
            dims[j] = dims[j - 1];
            j--;
        }
        dims[j] = d;
    }
    /* merge from the inside out */
    int m = 0; /* merged dims, built innermost first into position EM_MAX_RANK-1-m */
    int64_t sh[EM_MAX_RANK], st[CPU_ITER_MAX][EM_MAX_RANK];
    for (int i = r - 1; i >= 0; i--) {
        int d = dims[i];
        if (m > 0) {
            bool ok = true;
            for (int k = 0; k < n && ok; k++)
                ok = vs[k]->strides[d] == st[k][m - 1] * sh[m - 1];
            if (ok) {
                sh[m - 1] *= v0->shape[d];
                continue;
            }
        }
        sh[m] = v0->shape[d];
        for (int k = 0; k < n; k++) st[k][m] = vs[k]->strides[d];
        m++;
    }
    if (m == 0) {
        sh[0] = 1;
        for (int k = 0; k < n; k++) st[k][0] = 0;
        m = 1;
    }
    it->rank = m;
    for (int i = 0; i < m; i++) { /* sh/st are innermost first: reverse */
        it->shape[i] = sh[m - 1 - i];
        for (int k = 0; k < n; k++) it->strides[k][i] = st[k][m - 1 - i];
    }
}

static inline void cpu_iter_init2(cpu_iter *it, const em_view *a, const em_view *b) {
    const em_view *vs[2] = {a, b};
    cpu_iter_init(it, 2, vs);
}

typedef void (*cpu_row_fn)(void *ctx, char *const *p, const int64_t *s, int64_t n);

/* cpu_iter_range for n views (a constant after inlining: the loops over views unroll) */
static inline __attribute__((always_inline)) void
cpu_iter_range_n(const cpu_iter *it, const int n, int64_t lo, int64_t hi, cpu_row_fn row,
                 void *ctx) {
    const int r = it->rank;
    const int64_t inner = it->shape[r - 1];
    int64_t idx[EM_MAX_RANK], off[CPU_ITER_MAX], s[CPU_ITER_MAX];
    char *p[CPU_ITER_MAX];
    if (lo >= hi) return;
    int64_t col = lo % inner, rest = lo / inner;
    for (int k = 0; k < n; k++) {
        off[k] = col * it->strides[k][r - 1];
        s[k] = it->strides[k][r - 1];
    }
    for (int d = r - 2; d >= 0; d--) {
        idx[d] = rest % it->shape[d];
        rest /= it->shape[d];
        for (int k = 0; k < n; k++) off[k] += idx[d] * it->strides[k][d];
    }
    for (;;) {
        int64_t len = inner - col;
        if (len > hi - lo) len = hi - lo;
        for (int k = 0; k < n; k++) p[k] = it->base[k] + off[k] * it->esz[k];
        row(ctx, p, s, len);
        lo += len;
        if (lo >= hi) return;
        for (int k = 0; k < n; k++) off[k] -= col * s[k]; /* back to the row's start */
        col = 0;
        for (int d = r - 2; d >= 0; d--) {
            for (int k = 0; k < n; k++) off[k] += it->strides[k][d];
            if (++idx[d] < it->shape[d]) break;
            for (int k = 0; k < n; k++) off[k] -= it->strides[k][d] * it->shape[d];
            idx[d] = 0;
        }
    }
}

/** Calls row() on the rows of linear elements [lo, hi). */
static inline void cpu_iter_range(const cpu_iter *it, int64_t lo, int64_t hi, cpu_row_fn row,
                                  void *ctx) {
    switch (it->n) {
    case 1: cpu_iter_range_n(it, 1, lo, hi, row, ctx); break;
    case 2: cpu_iter_range_n(it, 2, lo, hi, row, ctx); break;
    case 3: cpu_iter_range_n(it, 3, lo, hi, row, ctx); break;
    default: cpu_iter_range_n(it, 4, lo, hi, row, ctx); break;
    }
}

/** Rows of rows: rows(ctx, p, s, n, s2, m) gets m rows of n elements, row k + 1 starting
 *  s2[v] elements after row k in view v (dim rank-2 of the iteration; m = 1 and s2 = 0 at
 *  rank 1). */
typedef void (*cpu_rows_fn)(void *ctx, char *const *p, const int64_t *s, int64_t n,
                            const int64_t *s2, int64_t m);

static inline int64_t cpu_iter_rows_count(const cpu_iter *it) {
    return it->numel ? it->numel / it->shape[it->rank - 1] : 0;
}

/** Calls rows() on the rows [lo, hi) (whole rows of the inner dim), a run along dim rank-2
 *  at a time. */
static inline void cpu_iter_rows(const cpu_iter *it, int64_t lo, int64_t hi, cpu_rows_fn rows,
                                 void *ctx) {
    const int r = it->rank, n = it->n;
    int64_t s[CPU_ITER_MAX], s2[CPU_ITER_MAX], off[CPU_ITER_MAX], idx[EM_MAX_RANK];
    char *p[CPU_ITER_MAX];
    for (int k = 0; k < n; k++) {
        s[k] = it->strides[k][r - 1];
        s2[k] = r >= 2 ? it->strides[k][r - 2] : 0;
        off[k] = 0;
    }
    if (lo >= hi) return;
    if (r == 1) {
        for (int k = 0; k < n; k++) p[k] = it->base[k];
        rows(ctx, p, s, it->shape[0], s2, 1);
        return;
    }
    const int64_t M = it->shape[r - 2];
    int64_t j = lo % M, rest = lo / M;
    for (int d = r - 3; d >= 0; d--) {
        idx[d] = rest % it->shape[d];
        rest /= it->shape[d];
        for (int k = 0; k < n; k++) off[k] += idx[d] * it->strides[k][d];
    }
    for (;;) {
        int64_t m = M - j;
        if (m > hi - lo) m = hi - lo;
        for (int k = 0; k < n; k++) p[k] = it->base[k] + (off[k] + j * s2[k]) * it->esz[k];
        rows(ctx, p, s, it->shape[r - 1], s2, m);
        lo += m;
        if (lo >= hi) return;
        j = 0;
        for (int d = r - 3; d >= 0; d--) {
            for (int k = 0; k < n; k++) off[k] += it->strides[k][d];
            if (++idx[d] < it->shape[d]) break;
            for (int k = 0; k < n; k++) off[k] -= it->strides[k][d] * it->shape[d];
            idx[d] = 0;
        }
    }
}

/** A job for cpu_parallel_for over the linear elements of an iteration:
 *  cpu_parallel_for(j.it.numel, grain, cpu_iter_job_range, &j) calls j.row(j.ctx, ...) on the
 *  rows of each range (cpu_iter_range). */
typedef struct cpu_iter_job {
    cpu_iter it;
    cpu_row_fn row;
    void *ctx;
} cpu_iter_job;

static inline void cpu_iter_job_range(int64_t lo, int64_t hi, void *arg) {
    cpu_iter_job *j = arg;
    cpu_iter_range(&j->it, lo, hi, j->row, j->ctx);
}

/** The same over whole rows: cpu_parallel_for(cpu_iter_rows_count(&j.it), grain,
 *  cpu_rows_job_range, &j) calls j.rows(j.ctx, ...) (cpu_iter_rows). */
typedef struct cpu_rows_job {
    cpu_iter it;
    cpu_rows_fn rows;
    void *ctx;
} cpu_rows_job;

static inline void cpu_rows_job_range(int64_t lo, int64_t hi, void *arg) {
    cpu_rows_job *j = arg;
    cpu_iter_rows(&j->it, lo, hi, j->rows, j->ctx);
}

/* ---- element conversions with ref's semantics ---- */

static inline bool cpu_is_float_dt(em_dtype dt) {
    return dt == EM_F32 || dt == EM_F64 || dt == EM_F16 || dt == EM_BF16;
}

static inline double cpu_ld_f64(const void *p, em_dtype dt) {
    switch (dt) {
    case EM_F32: return *(const float *)p;
    case EM_F64: return *(const double *)p;
    case EM_F16: return em_f16_to_f32(*(const uint16_t *)p);
    case EM_BF16: return em_bf16_to_f32(*(const uint16_t *)p);
    case EM_I64: return (double)*(const int64_t *)p;
    case EM_I32: return *(const int32_t *)p;
    case EM_I16: return *(const int16_t *)p;
    case EM_I8: case EM_Q8: case EM_Q4: return *(const int8_t *)p;
    case EM_U8: return *(const uint8_t *)p;
    case EM_BOOL: return *(const uint8_t *)p != 0;
    }
    return 0;
}

static inline int64_t cpu_f64_to_i64(double d) {
    if (d != d) return 0;
    if (d >= 9.2233720368547758e18) return INT64_MAX;
    if (d <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)d;
}

static inline int64_t cpu_ld_i64(const void *p, em_dtype dt) {
    switch (dt) {
    case EM_I64: return *(const int64_t *)p;
    case EM_I32: return *(const int32_t *)p;
    case EM_I16: return *(const int16_t *)p;
    case EM_I8: case EM_Q8: case EM_Q4: return *(const int8_t *)p;
    case EM_U8: return *(const uint8_t *)p;
    case EM_BOOL: return *(const uint8_t *)p != 0;
    default: return cpu_f64_to_i64(cpu_ld_f64(p, dt));
    }
}

static inline void cpu_st_i64(void *p, em_dtype dt, int64_t v) {
    switch (dt) {
    case EM_I64: *(int64_t *)p = v; break;
    case EM_I32: *(int32_t *)p = (int32_t)(uint32_t)(uint64_t)v; break;
    case EM_I16: *(int16_t *)p = (int16_t)(uint16_t)(uint64_t)v; break;
    case EM_I8: case EM_Q8: case EM_Q4: *(int8_t *)p = (int8_t)(uint8_t)(uint64_t)v; break;
    case EM_U8: *(uint8_t *)p = (uint8_t)(uint64_t)v; break;
    case EM_BOOL: *(uint8_t *)p = v != 0; break;
    case EM_F32: *(float *)p = (float)v; break;
    case EM_F64: *(double *)p = (double)v; break;
    case EM_F16: *(uint16_t *)p = em_f32_to_f16((float)v); break;
    case EM_BF16: *(uint16_t *)p = em_f32_to_bf16((float)v); break;
    }
}

static inline void cpu_st_f64(void *p, em_dtype dt, double v) {
    switch (dt) {
    case EM_F32: *(float *)p = (float)v; break;
    case EM_F64: *(double *)p = v; break;
    case EM_F16: *(uint16_t *)p = em_f32_to_f16((float)v); break;
    case EM_BF16: *(uint16_t *)p = em_f32_to_bf16((float)v); break;
    case EM_BOOL: *(uint8_t *)p = v != 0; break;
    default: cpu_st_i64(p, dt, cpu_f64_to_i64(v)); break;
    }
}

#endif /* EMBER_CPU_ITER_H */
