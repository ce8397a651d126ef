/* index.c — the cpu backend's gather, scatter_add and index_select: every dtype, every layout
 * (any strides: broadcast, transposed, offset views), i64 or i32 indices.
 *
 * All three are one loop nest over the index's shape, seen as [rows, L, K]: L is the size along
 * `dim`, K the size along the innermost other dim (`dk`), rows the product of the rest. Each
 * view keeps its own strides; the indexed view (gather's input, scatter's output) reads its
 * position along dim from the index. The innermost loop runs over K, specialized for an index
 * that is constant along K (index_select's index, the expanded index of embedding's backward):
 * then it moves or adds a run of elements, a memcpy when both runs are dense.
 *   - gather / index_select: elements are moved bit for bit (NaN payloads, f16/bf16 bits, any
 *     dtype) as ref's memcpy; the work splits over (row, position along dim, K block).
 *   - scatter_add: positions that differ outside dim never write the same output element, so
 *     the work splits over (row, K block) and every task runs dim serially in ascending order:
 *     each output receives its terms in ref's order (thread-safe, deterministic, the same
 *     roundings: f32 and f64 add in their own type, as ref's double sum rounded to the type;
 *     f16/bf16 through f32 and rounded back each step, as ref; integers wrap; bool ORs).
 * index_select is gather with the 1-d index laid along dim (strides 0 elsewhere). */
#include <string.h>

#include "cpu.h"

enum { IX_OUT = 0, IX_SRC = 1, IX_IDX = 2 }; /* views: gather (out, in, idx), scatter (out, src, idx) */

typedef struct ix_job {
    bool scatter, idx64;
    em_dtype dt;
    size_t es;
    int rank, dim, dk;               /* dk: innermost dim other than dim, -1 for rank 1 */
    int64_t shape[EM_MAX_RANK];      /* the iteration space: index's shape */
    int64_t L, K, rows, kblk, nkb;   /* sizes: along dim, along dk, the rest; K blocks */
    char *p[3];                      /* element 0 of out, in/src, index */
    int64_t st[3][EM_MAX_RANK];      /* strides; the indexed view's stride along dim is 0 ... */
    int64_t xs;                      /* ... and this instead, times the index */
    int xv;                          /* the indexed view: IX_SRC (gather) or IX_OUT (scatter) */
} ix_job;

static inline int64_t ix_ld(const ix_job *j, int64_t off) {
    return j->idx64 ? ((const int64_t *)j->p[IX_IDX])[off]
                    : (int64_t)((const int32_t *)j->p[IX_IDX])[off];
}

/* Offsets (elements) of row r's first element in the three views. */
static void ix_row(const ix_job *j, int64_t r, int64_t off[3]) {
    off[0] = off[1] = off[2] = 0;
    for (int d = j->rank - 1; d >= 0; d--) {
        if (d == j->dim || d == j->dk) continue;
        const int64_t c = r % j->shape[d];
        r /= j->shape[d];
        for (int v = 0; v < 3; v++) off[v] += c * j->st[v][d];
    }
}

/* ---- gather: out[.., k] = in[.., idx[.., k] at dim, k] over k in [k0, k1) ---- */

#define GATHER_RUN(T)                                                                              \
    static void gather_run_##T(const ix_job *j, const int64_t off[3], int64_t k0, int64_t k1) {   \
        T *restrict o = (T *)j->p[IX_OUT] + off[IX_OUT];                                           \
        const T *restrict x = (const T *)j->p[IX_SRC] + off[IX_SRC];                               \
        const int64_t so = j->dk >= 0 ? j->st[IX_OUT][j->dk] : 0,                                  \
                      sx = j->dk >= 0 ? j->st[IX_SRC][j->dk] : 0,                                  \
                      si = j->dk >= 0 ? j->st[IX_IDX][j->dk] : 0;                                  \
        if (si == 0) { /* one index for the run */                                                 \
            const T *restrict xr = x + ix_ld(j, off[IX_IDX]) * j->xs;                              \
            if (so == 1 && sx == 1) {                                                              \
                memcpy(o + k0, xr + k0, (size_t)(k1 - k0) * sizeof(T));                            \
            } else {                                                                               \
                for (int64_t k = k0; k < k1; k++) o[k * so] = xr[k * sx];                          \
            }                                                                                      \
        } else if (j->idx64) {                                                                     \
            const int64_t *restrict ip = (const int64_t *)j->p[IX_IDX] + off[IX_IDX];              \
            for (int64_t k = k0; k < k1; k++) o[k * so] = x[ip[k * si] * j->xs + k * sx];          \
        } else {                                                                                   \
            const int32_t *restrict ip = (const int32_t *)j->p[IX_IDX] + off[IX_IDX];              \
            for (int64_t k = k0; k < k1; k++)                                                      \
                o[k * so] = x[(int64_t)ip[k * si] * j->xs + k * sx];                               \
        }                                                                                          \
    }

GATHER_RUN(uint8_t)
GATHER_RUN(uint16_t)
GATHER_RUN(uint32_t)
GATHER_RUN(uint64_t)

static void gather_range(int64_t lo, int64_t hi, void *arg) {
    const ix_job *j = arg;
    int64_t row = -1, roff[3] = {0, 0, 0};
    for (int64_t w = lo; w < hi; w++) {
        const int64_t r = w / (j->L * j->nkb), rem = w % (j->L * j->nkb);
        const int64_t i = rem / j->nkb, kb = rem % j->nkb;
        if (r != row) ix_row(j, r, roff), row = r;
        int64_t off[3];
        for (int v = 0; v < 3; v++) off[v] = roff[v] + i * j->st[v][j->dim];
        const int64_t k0 = kb * j->kblk, k1 = k0 + j->kblk < j->K ? k0 + j->kblk : j->K;
        switch (j->es) {
        case 1: gather_run_uint8_t(j, off, k0, k1); break;
        case 2: gather_run_uint16_t(j, off, k0, k1); break;
        case 4: gather_run_uint32_t(j, off, k0, k1); break;
        default: gather_run_uint64_t(j, off, k0, k1); break;
        }
    }
}

/* ---- scatter_add: out[.., idx[.., k] at dim, k] += src[.., k] ---- */

static inline float h2f(em_dtype dt, uint16_t h) {
    return dt == EM_F16 ? em_f16_to_f32(h) : em_bf16_to_f32(h);
}
static inline uint16_t f2h(em_dtype dt, float f) {
    return dt == EM_F16 ? em_f32_to_f16(f) : em_f32_to_bf16(f);
}

/* ADD(a, b): the new value of an output holding a after adding b; T the storage type */
#define SCATTER_RUN(name, T, ADD)                                                                  \
    static void scatter_run_##name(const ix_job *j, const int64_t off[3], int64_t k0,              \
                                   int64_t k1) {                                                   \
        const em_dtype dt = j->dt;                                                                 \
        (void)dt;                                                                                  \
        T *restrict o = (T *)j->p[IX_OUT] + off[IX_OUT];                                           \
        const T *restrict s = (const T *)j->p[IX_SRC] + off[IX_SRC];                               \
        const int64_t so = j->dk >= 0 ? j->st[IX_OUT][j->dk] : 0,                                  \
                      ss = j->dk >= 0 ? j->st[IX_SRC][j->dk] : 0,                                  \
                      si = j->dk >= 0 ? j->st[IX_IDX][j->dk] : 0;                                  \
        if (si == 0) {                                                                             \
            T *restrict orow = o + ix_ld(j, off[IX_IDX]) * j->xs;                                  \
            if (so == 1 && ss == 1) {                                                              \
                for (int64_t k = k0; k < k1; k++) orow[k] = ADD(orow[k], s[k]);                    \
            } else {                                                                               \
                for (int64_t k = k0; k < k1; k++) orow[k * so] = ADD(orow[k * so], s[k * ss]);     \
            }                                                                                      \
        } else {                                                                                   \
            for (int64_t k = k0; k < k1; k++) {                                                    \
                T *restrict d = o + ix_ld(j, off[IX_IDX] + k * si) * j->xs + k * so;               \
                *d = ADD(*d, s[k * ss]);                                                           \
            }                                                                                      \
        }                                                                                          \
    }

#define ADD_PLAIN(a, b) ((a) + (b))
#define ADD_WRAP(T, a, b) ((T)((uint64_t)(a) + (uint64_t)(b)))
#define ADD_I64(a, b) ADD_WRAP(int64_t, a, b)
#define ADD_I32(a, b) ADD_WRAP(int32_t, a, b)
#define ADD_I16(a, b) ADD_WRAP(int16_t, a, b)
#define ADD_I8(a, b) ADD_WRAP(int8_t, a, b)
#define ADD_U8(a, b) ((uint8_t)((a) + (b)))
#define ADD_BOOL(a, b) ((uint8_t)(((a) | (b)) != 0))
#define ADD_HALF(a, b) f2h(dt, h2f(dt, a) + h2f(dt, b))

SCATTER_RUN(f32, float, ADD_PLAIN)
SCATTER_RUN(f64, double, ADD_PLAIN)
SCATTER_RUN(half, uint16_t, ADD_HALF)
SCATTER_RUN(i64, int64_t, ADD_I64)
SCATTER_RUN(i32, int32_t, ADD_I32)
SCATTER_RUN(i16, int16_t, ADD_I16)
SCATTER_RUN(i8, int8_t, ADD_I8)
SCATTER_RUN(u8, uint8_t, ADD_U8)
SCATTER_RUN(bool, uint8_t, ADD_BOOL)

typedef void (*scatter_run_fn)(const ix_job *, const int64_t *, int64_t, int64_t);

static scatter_run_fn scatter_run_of(em_dtype dt) {
    switch (dt) {
    case EM_F32: return scatter_run_f32;
    case EM_F64: return scatter_run_f64;
    case EM_F16:
    case EM_BF16: return scatter_run_half;
    case EM_I64: return scatter_run_i64;
    case EM_I32: return scatter_run_i32;
    case EM_I16: return scatter_run_i16;
    case EM_I8: return scatter_run_i8;
    case EM_U8: return scatter_run_u8;
    case EM_BOOL: return scatter_run_bool;
    default: return NULL;
    }
}

static void scatter_range(int64_t lo, int64_t hi, void *arg) {
    const ix_job *j = arg;
    const scatter_run_fn run = scatter_run_of(j->dt);
    for (int64_t w = lo; w < hi; w++) {
        const int64_t r = w / j->nkb, kb = w % j->nkb;
        int64_t roff[3];
        ix_row(j, r, roff);
        const int64_t k0 = kb * j->kblk, k1 = k0 + j->kblk < j->K ? k0 + j->kblk : j->K;
        for (int64_t i = 0; i < j->L; i++) { /* ascending along dim: ref's order */
            int64_t off[3];
            for (int v = 0; v < 3; v++) off[v] = roff[v] + i * j->st[v][j->dim];
            run(j, off, k0, k1);
        }
    }
}

/* ---- setup ---- */

/* The job over index's shape; xv: the view indexed along dim. */
static void ix_setup(ix_job *j, bool scatter, const em_view *out, const em_view *src,
                     const em_view *index, int dim) {
    memset(j, 0, sizeof *j);
    j->scatter = scatter;
    j->dt = out->dtype;
    j->es = em_dtype_size(out->dtype);
    j->idx64 = index->dtype == EM_I64;
    j->rank = index->rank;
    j->dim = dim;
    j->dk = -1;
    for (int d = index->rank - 1; d >= 0; d--)
        if (d != dim) {
            j->dk = d;
            break;
        }
    const em_view *vs[3] = {out, src, index};
    for (int v = 0; v < 3; v++) {
        j->p[v] = cpu_ptr(vs[v]);
        for (int d = 0; d < index->rank; d++) j->st[v][d] = vs[v]->strides[d];
    }
    j->xv = scatter ? IX_OUT : IX_SRC;
    j->xs = j->st[j->xv][dim];
    j->st[j->xv][dim] = 0;
    j->rows = 1;
    for (int d = 0; d < index->rank; d++) {
        j->shape[d] = index->shape[d];
        if (d != dim && d != j->dk) j->rows *= index->shape[d];
    }
    j->L = index->shape[dim];
    j->K = j->dk >= 0 ? index->shape[j->dk] : 1;
}

/* K blocks: runs of at most `cap` elements, and at least `want` tasks in all when K allows. */
static void ix_blocks(ix_job *j, int64_t tasks_per_block, int64_t cap) {
    const int64_t want = 4 * (int64_t)cpu_threads();
    int64_t nkb = (j->K + cap - 1) / cap;
    const int64_t have = j->rows * tasks_per_block;
    if (have * nkb < want && have > 0) {
        int64_t need = (want + have - 1) / have, most = (j->K + 15) / 16;
        nkb = need < most ? need : most;
    }
    if (nkb < 1) nkb = 1;
    j->kblk = (j->K + nkb - 1) / nkb;
    if (j->kblk > 16) j->kblk = (j->kblk + 15) / 16 * 16;
    if (j->kblk < 1) j->kblk = 1;
    j->nkb = (j->K + j->kblk - 1) / j->kblk;
}

static em_status ix_gather(const em_view *out, const em_view *in, int dim, const em_view *index) {
    if (cpu_numel(index) == 0) return EM_OK;
    ix_job j;
    ix_setup(&j, false, out, in, index, dim);
    ix_blocks(&j, j.L, 4096);
    const int64_t tasks = j.rows * j.L * j.nkb;
    cpu_parallel_for(tasks, (1 << 14) / (j.kblk + 8) + 1, gather_range, &j);
    return EM_OK;
}

static bool ix_same_rank(const em_view *a, const em_view *b, const em_view *c, int dim) {
    return a->rank == b->rank && b->rank == c->rank && a->rank >= 1 && dim >= 0 && dim < a->rank;
}

em_status cpu_gather(void *ctx, const em_view *out, const em_view *in, int dim,
                     const em_view *index) {
    if (!ix_same_rank(out, in, index, dim) || in->dtype != out->dtype ||
        (index->dtype != EM_I64 && index->dtype != EM_I32))
        return CPU_FALLBACK(CPU_FB_GATHER, out->dtype, gather, ctx, out, in, dim, index);
    return ix_gather(out, in, dim, index);
}

em_status cpu_scatter_add(void *ctx, const em_view *out, int dim, const em_view *index,
                          const em_view *src) {
    if (!ix_same_rank(out, src, index, dim) || src->dtype != out->dtype ||
        (index->dtype != EM_I64 && index->dtype != EM_I32) || !scatter_run_of(out->dtype))
        return CPU_FALLBACK(CPU_FB_SCATTER_ADD, out->dtype, scatter_add, ctx, out, dim, index,
                            src);
    if (cpu_numel(index) == 0) return EM_OK;
    ix_job j;
    ix_setup(&j, true, out, src, index, dim);
    ix_blocks(&j, 1, 1024);
    const int64_t tasks = j.rows * j.nkb;
    cpu_parallel_for(tasks, (1 << 14) / (j.L * j.kblk + 8) + 1, scatter_range, &j);
    return EM_OK;
}

em_status cpu_index_select(void *ctx, const em_view *out, const em_view *in, int dim,
                           const em_view *index) {
    if (out->rank < 1 || in->rank != out->rank || dim < 0 || dim >= out->rank ||
        in->dtype != out->dtype || index->rank != 1 ||
        (index->dtype != EM_I64 && index->dtype != EM_I32))
        return CPU_FALLBACK(CPU_FB_INDEX_SELECT, out->dtype, index_select, ctx, out, in, dim,
                            index);
    /* the index laid along dim, broadcast over out's other dims */
    em_view iv = *index;
    iv.rank = out->rank;
    for (int d = 0; d < out->rank; d++) {
        iv.shape[d] = out->shape[d];
        iv.strides[d] = d == dim ? index->strides[0] : 0;
    }
    return ix_gather(out, in, dim, &iv);
}
