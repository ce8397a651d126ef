/*
 * shortrows.h — short rows as blocks, for the per-level kernels of elementwise.c (binary) and
 * compare.c (comparisons) over the iteration of iter.h.
 *
 * When the inner rows are short (a channel broadcast [N,C,H,W] x [1,C,1,1] with small H*W, a
 * row broadcast of 64 columns), the cost per row (the odometer, the op's switch, a vector
 * loop's head and tail) outweighs the work. Then the iteration takes blocks of up to
 * CPU_SB_MAX elements (16 KiB of f64 a buffer on the stack): mm consecutive rows of dim
 * rank-2 of an output that is dense over its two inner dims, each of the two operands either
 * dense over the block, one value, or gathered into a buffer (f16/bf16 converted to float),
 * and the broadcast operands (stride 0 over the outer dims) gathered once per thread and
 * reused; each block is one vector op.
 *
 * A file instantiates CPU_SB_RANGE(name, T, GATHER_ROW, DENSE, COMPUTE) for its compute type
 * T and runs cpu_sb_run(it, op, dt, name, grain) (false: the plan does not apply).
 */
#ifndef EMBER_CPU_SHORTROWS_H
#define EMBER_CPU_SHORTROWS_H

#include "blocks.h"

#define CPU_SB_MAX 2048
#define CPU_SB_ROW 256 /* rows up to this long take blocks */

typedef struct cpu_sb_job {
    const cpu_iter *it;
    em_binary_op op;
    em_dtype dt; /* the operands' */
    int64_t n, M, mchunk, chunks;
    bool inv[3]; /* operand k's block is the same for every unit */
} cpu_sb_job;

/* unit u's element offsets of each view, and its rows */
static inline void cpu_sb_unit(const cpu_sb_job *j, int64_t u, int64_t *off, int64_t *mm) {
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

/* COMPUTE(j, po, x, vec, P, g): out's block at po (dense), operands x[1], x[2] (vectors when
 * vec[k], else one value), P elements, g[0] a free buffer of T. */
#define CPU_SB_RANGE(NAME, T, GATHER_ROW, DENSE, COMPUTE)                                       \
    static void NAME(int64_t lo, int64_t hi, void *arg) {                                      \
        const cpu_sb_job *j = arg;                                                             \
        const cpu_iter *it = j->it;                                                            \
        const int r = it->rank;                                                                \
        const int64_t n = j->n;                                                                \
        T g[3][CPU_SB_MAX], one[3];                                                            \
        bool have[3] = {false, false, false};                                                  \
        for (int64_t u = lo; u < hi; u++) {                                                    \
            int64_t off[3], mm;                                                                \
            cpu_sb_unit(j, u, off, &mm);                                                       \
            const int64_t P = mm * n;                                                          \
            const T *x[3] = {NULL, NULL, NULL};                                                \
            bool vec[3] = {true, true, true};                                                  \
            for (int k = 1; k < 3; k++) {                                                      \
                const int64_t s = it->strides[k][r - 1], s2 = it->strides[k][r - 2];           \
                const int64_t es = it->esz[k];                                                 \
                const char *p = it->base[k] + off[k] * es;                                     \
                if (s == 1 && s2 == n) {                                                       \
                    x[k] = DENSE(g[k], p, P);                                                  \
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
            char *po = it->base[0] + off[0] * it->esz[0];                                      \
            COMPUTE(j, po, x, vec, P, g[0]);                                                   \
        }                                                                                      \
    }

/* float compute type: f32 read in place, f16/bf16 converted */
static inline void cpu_sb_row_f32(em_dtype dt, float *d, const char *p, int64_t s, int64_t n) {
    if (s == 0) {
        float v = *cpu_blk_f32(dt, p, 0, 1, d);
        for (int64_t i = 0; i < n; i++) d[i] = v;
        return;
    }
    const float *x = cpu_blk_f32(dt, p, s, n, d);
    if (x != d) memcpy(d, x, (size_t)n * sizeof *d);
}
#define CPU_SB_GATHER_F32(d, p, s, n) cpu_sb_row_f32(j->dt, (d), (p), (s), (n))
#define CPU_SB_DENSE_F32(buf, p, P)                                                            \
    (j->dt == EM_F32 ? (const float *)(p)                                                      \
                     : (cpu_half_to_f32_n(j->dt, (buf), (const uint16_t *)(p), (P)), (buf)))

static inline void cpu_sb_row_f64(double *d, const char *p, int64_t s, int64_t n) {
    const double *x = (const double *)p;
    for (int64_t i = 0; i < n; i++) d[i] = x[i * s];
}
#define CPU_SB_GATHER_F64(d, p, s, n) cpu_sb_row_f64((d), (p), (s), (n))
#define CPU_SB_DENSE_F64(buf, p, P) ((const double *)(p))

/** Runs range over the short-row plan of it (3 views: out, a, b) when it applies: float
 *  operands, rank >= 2, rows of at most CPU_SB_ROW elements, out dense over its two inner
 *  dims. `pfor` is cpu_parallel_for. */
static inline bool cpu_sb_run(const cpu_iter *it, em_binary_op op, em_dtype dt,
                              void (*range)(int64_t, int64_t, void *), int64_t grain_elems,
                              void (*pfor)(int64_t, int64_t, void (*)(int64_t, int64_t, void *),
                                           void *)) {
    const int r = it->rank;
    if (r < 2 || !cpu_is_float_dt(dt)) return false;
    const int64_t n = it->shape[r - 1], M = it->shape[r - 2];
    if (n > CPU_SB_ROW || it->strides[0][r - 1] != 1 || it->strides[0][r - 2] != n) return false;
    cpu_sb_job j = {.it = it, .op = op, .dt = dt, .n = n, .M = M};
    j.mchunk = CPU_SB_MAX / n < M ? CPU_SB_MAX / n : M;
    j.chunks = (M + j.mchunk - 1) / j.mchunk;
    for (int k = 1; k < 3; k++) {
        bool inv = it->strides[k][r - 2] == 0 || j.chunks == 1;
        for (int d = 0; d < r - 2; d++) inv = inv && it->strides[k][d] == 0;
        j.inv[k] = inv;
    }
    int64_t units = it->numel / (n * M) * j.chunks;
    pfor(units, grain_elems / (j.mchunk * n) + 1, range, &j);
    return true;
}

#endif /* EMBER_CPU_SHORTROWS_H */
