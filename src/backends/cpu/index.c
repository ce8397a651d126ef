/* index.c — the cpu backend's gather and scatter_add for f32/f64 with i64/i32 indices.
 *
 * Fast path: out, index and src (or in) contiguous, with equal sizes outside `dim` (the
 * layouts of cross_entropy's gather and max_pool2d's backward scatter). Each is then
 * [outer, L, inner] around dim and the work splits over `outer` (slices never collide). Other
 * layouts, dtypes and index shapes go to ref. */
#include "cpu.h"

typedef struct idx_job {
    char *out;
    const char *in; /* gather: the input; scatter: src */
    const void *idx;
    bool idx64, f64;
    int64_t inner, lout, lin, lidx; /* sizes along dim of out, of in/src, of index */
} idx_job;

static inline int64_t idx_at(const idx_job *j, int64_t i) {
    return j->idx64 ? ((const int64_t *)j->idx)[i] : (int64_t)((const int32_t *)j->idx)[i];
}

/* out[o, i, k] = in[o, idx[o, i, k], k] */
static void gather_range(int64_t lo, int64_t hi, void *arg) {
    const idx_job *j = arg;
    for (int64_t o = lo; o < hi; o++) {
        for (int64_t i = 0; i < j->lidx; i++) {
            int64_t base = (o * j->lidx + i) * j->inner;
            for (int64_t k = 0; k < j->inner; k++) {
                int64_t src = (o * j->lin + idx_at(j, base + k)) * j->inner + k;
                if (j->f64) ((double *)j->out)[base + k] = ((const double *)j->in)[src];
                else ((float *)j->out)[base + k] = ((const float *)j->in)[src];
            }
        }
    }
}

/* out[o, idx[o, i, k], k] += src[o, i, k] */
static void scatter_range(int64_t lo, int64_t hi, void *arg) {
    const idx_job *j = arg;
    for (int64_t o = lo; o < hi; o++) {
        for (int64_t i = 0; i < j->lidx; i++) {
            int64_t base = (o * j->lidx + i) * j->inner;
            int64_t sbase = (o * j->lin + i) * j->inner;
            for (int64_t k = 0; k < j->inner; k++) {
                int64_t dst = (o * j->lout + idx_at(j, base + k)) * j->inner + k;
                if (j->f64) ((double *)j->out)[dst] += ((const double *)j->in)[sbase + k];
                else ((float *)j->out)[dst] += ((const float *)j->in)[sbase + k];
            }
        }
    }
}

/* Fills the job when out/in/index fit the fast path: same rank, contiguous, equal sizes
 * outside dim. `in` may be longer than index along dim (src of scatter, in of gather). */
static bool idx_fast(const em_view *out, const em_view *in, const em_view *index, int dim,
                     idx_job *j) {
    if ((out->dtype != EM_F32 && out->dtype != EM_F64) || in->dtype != out->dtype ||
        (index->dtype != EM_I64 && index->dtype != EM_I32))
        return false;
    if (in->rank != out->rank || index->rank != out->rank || out->rank < 1)
        return false;
    if (!cpu_contiguous(out) || !cpu_contiguous(in) || !cpu_contiguous(index)) return false;
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < out->rank; d++) {
        if (d == dim) continue;
        if (in->shape[d] != out->shape[d] || index->shape[d] != out->shape[d]) return false;
        if (d < dim) outer *= out->shape[d];
        else inner *= out->shape[d];
    }
    (void)outer;
    j->out = cpu_ptr(out);
    j->in = cpu_ptr(in);
    j->idx = cpu_ptr(index);
    j->idx64 = index->dtype == EM_I64;
    j->f64 = out->dtype == EM_F64;
    j->inner = inner;
    j->lout = out->shape[dim];
    j->lin = in->shape[dim];
    j->lidx = index->shape[dim];
    return true;
}

static int64_t idx_outer(const em_view *v, int dim) {
    int64_t n = 1;
    for (int d = 0; d < dim; d++) n *= v->shape[d];
    return n;
}

em_status cpu_gather(void *ctx, const em_view *out, const em_view *in, int dim,
                     const em_view *index) {
    idx_job j;
    if (!idx_fast(out, in, index, dim, &j) || index->shape[dim] != out->shape[dim])
        return CPU_FALLBACK(CPU_FB_GATHER, out->dtype, gather, ctx, out, in, dim, index);
    int64_t outer = idx_outer(out, dim);
    int64_t grain = (1 << 14) / (j.lidx * j.inner + 1) + 1;
    cpu_parallel_for(outer, grain, gather_range, &j);
    return EM_OK;
}

em_status cpu_scatter_add(void *ctx, const em_view *out, int dim, const em_view *index,
                          const em_view *src) {
    idx_job j;
    if (!idx_fast(out, src, index, dim, &j) || src->shape[dim] < index->shape[dim])
        return CPU_FALLBACK(CPU_FB_SCATTER_ADD, out->dtype, scatter_add, ctx, out, dim, index, src);
    int64_t outer = idx_outer(out, dim);
    int64_t grain = (1 << 14) / (j.lidx * j.inner + 1) + 1;
    cpu_parallel_for(outer, grain, scatter_range, &j);
    return EM_OK;
}
