/* cumulative.c — the cpu backend's cumprod, cummax and cummin (the cumulative slot) for f32,
 * f64, f16 and bf16 inputs of any layout (strided, transposed, broadcast, flipped, offset
 * views; any output strides).
 *
 * The dims other than the scanned one are kept (size-1 dims dropped, neighbours merged where
 * the input's, the values' and the indices' strides allow). Then one of:
 *   - columns: the kept dim of smallest input stride is the column dim; a block of up to
 *     CUM_BLOCK of its elements (CUM_NARROW when the dim is the denser in the input) is scanned
 *     at once through tiles of CUM_TILE elements: a tile is
 *     loaded (and converted) along whichever of the dim and the column is denser in the
 *     input, the running products (in double, as ref) or extremes (in the dtype's work type:
 *     exact) are updated row by row across the block — plain loops the compiler vectorizes
 *     at every level — and the tile is stored along whichever is denser in the output (so a
 *     contiguous dim, a transposed input or output cost no pass at a large stride). Blocks
 *     are split over the thread pool;
 *   - lines: fewer than CUM_MIN_COLS columns (a single line, or a few long ones): each line
 *     is scanned in chunks of CUM_CHUNK elements, one line a task.
 * cummax / cummin follow PyTorch (and ref): an element replaces the running value when it is
 * >= (<=) it or NaN, so ties take the last index and a NaN stays until the next one. Integer
 * and bool inputs go to ref's kernel (fallback row CPU_FB_CUMULATIVE). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "half.h"

#define CUM_BLOCK 64      /* columns scanned at once (the dim not the densest in the input) */
#define CUM_NARROW 16     /* columns scanned at once when the dim is the densest */
#define CUM_TILE 2048     /* elements of a tile: CUM_TILE / (its columns) rows */
#define CUM_MIN_COLS 8    /* fewer columns: scan line by line */
#define CUM_CHUNK 512     /* elements of a line per step (lines mode) */
#define CUM_GRAIN (1 << 15) /* elements per task, about */

/* ---- the kept dims, merged over three views ---- */

typedef struct cum_dims {
    int n;
    int64_t size[EM_MAX_RANK], is[EM_MAX_RANK], os[EM_MAX_RANK], ks[EM_MAX_RANK];
} cum_dims;

static void cd_build(cum_dims *k, const em_view *in, const em_view *out, const em_view *idx,
                     int skip) {
    k->n = 0;
    for (int d = 0; d < in->rank; d++) {
        if (d == skip || in->shape[d] == 1) continue;
        int64_t sz = in->shape[d], is = in->strides[d], os = out->strides[d],
                ks = idx ? idx->strides[d] : 0;
        int m = k->n - 1;
        if (m >= 0 && k->is[m] == sz * is && k->os[m] == sz * os && k->ks[m] == sz * ks) {
            k->size[m] *= sz;
            k->is[m] = is;
            k->os[m] = os;
            k->ks[m] = ks;
            continue;
        }
        k->size[k->n] = sz;
        k->is[k->n] = is;
        k->os[k->n] = os;
        k->ks[k->n] = ks;
        k->n++;
    }
}

/** The kept dim of smallest input stride in magnitude (stride 0 last), -1 when none. */
static int cd_column(const cum_dims *k) {
    int best = -1;
    int64_t bs = 0;
    for (int d = 0; d < k->n; d++) {
        int64_t s = k->is[d] < 0 ? -k->is[d] : k->is[d];
        if (s == 0) s = INT64_MAX;
        if (best < 0 || s <= bs) {
            best = d;
            bs = s;
        }
    }
    return best;
}

static int64_t cd_numel(const cum_dims *k) {
    int64_t m = 1;
    for (int d = 0; d < k->n; d++) m *= k->size[d];
    return m;
}

/** The offsets of kept position i (row-major over k) in the three views. */
static void cd_seek(const cum_dims *k, int64_t i, int64_t *io, int64_t *oo, int64_t *ko) {
    *io = *oo = *ko = 0;
    for (int d = k->n - 1; d >= 0; d--) {
        int64_t p = i % k->size[d];
        i /= k->size[d];
        *io += p * k->is[d];
        *oo += p * k->os[d];
        *ko += p * k->ks[d];
    }
}

/* ---- loads and stores of n elements at stride st, converted ---- */

static void load_f(float *restrict w, const void *x, em_dtype dt, int64_t off, int64_t n,
                   int64_t st) {
    if (dt == EM_F32) {
        const float *p = (const float *)x + off;
        if (st == 1)
            for (int64_t i = 0; i < n; i++) w[i] = p[i];
        else
            for (int64_t i = 0; i < n; i++) w[i] = p[i * st];
        return;
    }
    const uint16_t *p = (const uint16_t *)x + off;
    if (st == 1) {
        cpu_half_to_f32_n(dt, w, p, n);
        return;
    }
    uint16_t h[CUM_CHUNK];
    for (int64_t i0 = 0; i0 < n; i0 += CUM_CHUNK) {
        int64_t c = n - i0 < CUM_CHUNK ? n - i0 : CUM_CHUNK;
        for (int64_t i = 0; i < c; i++) h[i] = p[(i0 + i) * st];
        cpu_half_to_f32_n(dt, w + i0, h, c);
    }
}

static void store_f(void *o, em_dtype dt, int64_t off, int64_t n, int64_t st,
                    const float *restrict w) {
    if (dt == EM_F32) {
        float *p = (float *)o + off;
        if (st == 1)
            for (int64_t i = 0; i < n; i++) p[i] = w[i];
        else
            for (int64_t i = 0; i < n; i++) p[i * st] = w[i];
        return;
    }
    uint16_t *p = (uint16_t *)o + off;
    if (st == 1) {
        cpu_f32_to_half_n(dt, p, w, n);
        return;
    }
    uint16_t h[CUM_CHUNK];
    for (int64_t i0 = 0; i0 < n; i0 += CUM_CHUNK) {
        int64_t c = n - i0 < CUM_CHUNK ? n - i0 : CUM_CHUNK;
        cpu_f32_to_half_n(dt, h, w + i0, c);
        for (int64_t i = 0; i < c; i++) p[(i0 + i) * st] = h[i];
    }
}

static void load_d(double *restrict w, const void *x, em_dtype dt, int64_t off, int64_t n,
                   int64_t st) {
    if (dt == EM_F64) {
        const double *p = (const double *)x + off;
        if (st == 1)
            for (int64_t i = 0; i < n; i++) w[i] = p[i];
        else
            for (int64_t i = 0; i < n; i++) w[i] = p[i * st];
        return;
    }
    float f[CUM_CHUNK];
    for (int64_t i0 = 0; i0 < n; i0 += CUM_CHUNK) {
        int64_t c = n - i0 < CUM_CHUNK ? n - i0 : CUM_CHUNK;
        load_f(f, x, dt, off + i0 * st, c, st);
        for (int64_t i = 0; i < c; i++) w[i0 + i] = (double)f[i];
    }
}

static void store_d(void *o, em_dtype dt, int64_t off, int64_t n, int64_t st,
                    const double *restrict w) {
    if (dt == EM_F64) {
        double *p = (double *)o + off;
        if (st == 1)
            for (int64_t i = 0; i < n; i++) p[i] = w[i];
        else
            for (int64_t i = 0; i < n; i++) p[i * st] = w[i];
        return;
    }
    float f[CUM_CHUNK];
    for (int64_t i0 = 0; i0 < n; i0 += CUM_CHUNK) {
        int64_t c = n - i0 < CUM_CHUNK ? n - i0 : CUM_CHUNK;
        for (int64_t i = 0; i < c; i++) f[i] = (float)w[i0 + i];
        store_f(o, dt, off + i0 * st, c, st, f);
    }
}

static void store_i(int64_t *o, int64_t n, int64_t st, const int64_t *restrict w) {
    if (st == 1)
        for (int64_t i = 0; i < n; i++) o[i] = w[i];
    else
        for (int64_t i = 0; i < n; i++) o[i * st] = w[i];
}

/* ---- the job ---- */

typedef struct cum_job {
    em_cum_op op;
    em_dtype dt;
    const char *x;
    char *o;
    int64_t *ix;                    /* indices (max/min), else NULL */
    int64_t len, is, os, ks;        /* the scanned dim */
    cum_dims k;                     /* kept dims (the column dim taken out in columns mode) */
    int64_t cn, cis, cos, cks, bw, nblk;
    int64_t th; /* rows of a tile: CUM_TILE / the widest block (<= CUM_TILE / CUM_NARROW) */
    bool lines; /* the lines layout of a tile (scan_block_lines) */
    bool direct; /* f32 / f64 with unit strides along the dim: scan_block_direct */
} cum_job;

/* ---- a block: b columns scanned through tiles of j->th rows ----
 * A tile [h][b] is loaded (converted to the work type) along whichever of the dim and the
 * column is denser in the input, updated row by row across the b columns (plain loops the
 * compiler vectorizes), and stored along whichever is denser in the output (the indices
 * likewise): a transposed layout on either side makes no pass over memory at a large
 * stride. */

static inline int64_t cum_abs(int64_t v) { return v < 0 ? -v : v; }

/** tile t [h][b] of indices to ix at offset ko (row stride ks, column stride cks) */
static void tile_store_i(int64_t *ix, int64_t ko, int64_t ks, int64_t cks, const int64_t *t,
                         int64_t h, int64_t b) {
    if (cum_abs(ks) < cum_abs(cks)) {
        for (int64_t c = 0; c < b; c++)
            for (int64_t i = 0; i < h; i++) ix[ko + i * ks + c * cks] = t[i * b + c];
    } else {
        for (int64_t i = 0; i < h; i++) store_i(ix + ko + i * ks, b, cks, t + i * b);
    }
}

/* tile_load_S: t [h][b] from the input at io (row stride j->is, column stride cis);
 * tile_store_S: t to the values at oo (row stride j->os, column stride cos) */
#define CUM_TILE_IO(S, T, LOAD, STORE)                                                          \
    static void tile_load_##S(T *restrict t, const cum_job *j, int64_t io, int64_t h,          \
                              int64_t b, int64_t cis) {                                        \
        if (cum_abs(j->is) < cum_abs(cis)) {                                                   \
            T run[CUM_TILE / CUM_NARROW];                                                      \
            for (int64_t c = 0; c < b; c++) {                                                  \
                LOAD(run, j->x, j->dt, io + c * cis, h, j->is);                                \
                for (int64_t i = 0; i < h; i++) t[i * b + c] = run[i];                         \
            }                                                                                  \
        } else {                                                                               \
            for (int64_t i = 0; i < h; i++)                                                    \
                LOAD(t + i * b, j->x, j->dt, io + i * j->is, b, cis);                          \
        }                                                                                      \
    }                                                                                          \
    static void tile_store_##S(const cum_job *j, int64_t oo, int64_t h, int64_t b,             \
                               int64_t cos, const T *restrict t) {                             \
        if (cum_abs(j->os) < cum_abs(cos)) {                                                   \
            T run[CUM_TILE / CUM_NARROW];                                                      \
            for (int64_t c = 0; c < b; c++) {                                                  \
                for (int64_t i = 0; i < h; i++) run[i] = t[i * b + c];                         \
                STORE(j->o, j->dt, oo + c * cos, h, j->os, run);                               \
            }                                                                                  \
        } else {                                                                               \
            for (int64_t i = 0; i < h; i++)                                                    \
                STORE(j->o, j->dt, oo + i * j->os, b, cos, t + i * b);                         \
        }                                                                                      \
    }
CUM_TILE_IO(f, float, load_f, store_f)
CUM_TILE_IO(d, double, load_d, store_d)
#undef CUM_TILE_IO

/* the running products down the tile's rows (in double, as ref) */
static void prod_tile(double *restrict t, double *restrict acc, int64_t h, int64_t b) {
    for (int64_t i = 0; i < h; i++)
        for (int64_t c = 0; c < b; c++) t[i * b + c] = acc[c] *= t[i * b + c];
}

/* the running extremes: take when v >= m (max) or v <= m (min), or v is NaN; branch-free */
#define CUM_EXT_TILE(S, T, CMP)                                                                 \
    static void ext_tile_##S(T *restrict t, int64_t *restrict it, T *restrict acc,             \
                             int64_t *restrict ai, int64_t h, int64_t b, int64_t r0) {          \
        for (int64_t i = 0; i < h; i++)                                                         \
            for (int64_t c = 0; c < b; c++) {                                                   \
                const T v = t[i * b + c];                                                       \
                const int tk = (v CMP acc[c]) | (v != v);                                       \
                acc[c] = tk ? v : acc[c];                                                       \
                ai[c] = tk ? r0 + i : ai[c];                                                    \
                t[i * b + c] = acc[c];                                                          \
                it[i * b + c] = ai[c];                                                          \
            }                                                                                   \
    }
CUM_EXT_TILE(max_f, float, >=)
CUM_EXT_TILE(min_f, float, <=)
CUM_EXT_TILE(max_d, double, >=)
CUM_EXT_TILE(min_d, double, <=)
#undef CUM_EXT_TILE

/* lines layout: the tile is t [b][h] (b lines of h elements), loaded and stored a line at a
 * time with no transposition, the b independent running values updated together (b chains
 * the CPU overlaps; not vectorized). For a dim that is the densest in the input and in the
 * values, as a contiguous tensor's last dim. */
static void prod_lines(double *restrict t, double *restrict acc, int64_t h, int64_t b,
                       int64_t th) {
    for (int64_t i = 0; i < h; i++)
        for (int64_t c = 0; c < b; c++) t[c * th + i] = acc[c] *= t[c * th + i];
}

#define CUM_EXT_LINES(S, T, CMP)                                                                \
    static void ext_lines_##S(T *restrict t, int64_t *restrict it, T *restrict acc,            \
                              int64_t *restrict ai, int64_t h, int64_t b, int64_t th,           \
                              int64_t r0) {                                                     \
        for (int64_t i = 0; i < h; i++)                                                         \
            for (int64_t c = 0; c < b; c++) {                                                   \
                const T v = t[c * th + i];                                                      \
                const int tk = (v CMP acc[c]) | (v != v);                                       \
                acc[c] = tk ? v : acc[c];                                                       \
                ai[c] = tk ? r0 + i : ai[c];                                                    \
                t[c * th + i] = acc[c];                                                         \
                it[c * th + i] = ai[c];                                                         \
            }                                                                                   \
    }
CUM_EXT_LINES(max_f, float, >=)
CUM_EXT_LINES(min_f, float, <=)
CUM_EXT_LINES(max_d, double, >=)
CUM_EXT_LINES(min_d, double, <=)
#undef CUM_EXT_LINES

/* direct lines: f32 / f64 lines of unit stride in the input, the values and the indices,
 * scanned in place four at a time (four independent chains), no tile */
#define CUM_DIRECT(S, T)                                                                        \
    static void direct_prod_##S(const cum_job *j, int64_t io, int64_t oo, int nl) {            \
        const T *x = (const T *)j->x + io;                                                      \
        T *o = (T *)j->o + oo;                                                                  \
        double p[4] = {1.0, 1.0, 1.0, 1.0};                                                     \
        for (int64_t i = 0; i < j->len; i++)                                                    \
            for (int q = 0; q < nl; q++) {                                                      \
                p[q] *= (double)x[q * j->cis + i];                                              \
                o[q * j->cos + i] = (T)p[q];                                                    \
            }                                                                                   \
    }                                                                                           \
    static void direct_ext_##S(const cum_job *j, int64_t io, int64_t oo, int64_t ko, int nl) {  \
        const T *x = (const T *)j->x + io;                                                      \
        T *o = (T *)j->o + oo;                                                                  \
        int64_t *k = j->ix + ko;                                                                \
        const bool mx = j->op == EM_CUM_MAX;                                                    \
        T m[4];                                                                                 \
        int64_t mi[4] = {0, 0, 0, 0};                                                           \
        for (int q = 0; q < 4; q++) m[q] = mx ? -INFINITY : INFINITY;                           \
        for (int64_t i = 0; i < j->len; i++)                                                    \
            for (int q = 0; q < nl; q++) {                                                      \
                const T v = x[q * j->cis + i];                                                  \
                const int tk = (mx ? v >= m[q] : v <= m[q]) | (v != v);                         \
                m[q] = tk ? v : m[q];                                                           \
                mi[q] = tk ? i : mi[q];                                                         \
                o[q * j->cos + i] = m[q];                                                       \
                k[q * j->cks + i] = mi[q];                                                      \
            }                                                                                   \
    }
CUM_DIRECT(f, float)
CUM_DIRECT(d, double)
#undef CUM_DIRECT

static void scan_block_direct(const cum_job *j, int64_t io, int64_t oo, int64_t ko, int64_t b,
                              int64_t cis, int64_t cos, int64_t cks) {
    for (int64_t c = 0; c < b; c += 4) {
        const int nl = b - c < 4 ? (int)(b - c) : 4;
        const int64_t i0 = io + c * cis, o0 = oo + c * cos, k0 = ko + c * cks;
        if (j->op == EM_CUM_PROD) {
            if (j->dt == EM_F32) direct_prod_f(j, i0, o0, nl);
            else direct_prod_d(j, i0, o0, nl);
        } else if (j->dt == EM_F32) {
            direct_ext_f(j, i0, o0, k0, nl);
        } else {
            direct_ext_d(j, i0, o0, k0, nl);
        }
    }
}

/** scan_block in the lines layout (j->lines). */
static void scan_block_lines(const cum_job *j, int64_t io, int64_t oo, int64_t ko, int64_t b,
                             int64_t cis, int64_t cos, int64_t cks) {
    const bool mx = j->op == EM_CUM_MAX;
    const int64_t th = j->th;
    int64_t ai[CUM_BLOCK], it[CUM_TILE];
    for (int64_t c = 0; c < b; c++) ai[c] = 0;
    if (j->op == EM_CUM_PROD || j->dt == EM_F64) {
        double acc[CUM_BLOCK], t[CUM_TILE];
        for (int64_t c = 0; c < b; c++)
            acc[c] = j->op == EM_CUM_PROD ? 1.0 : mx ? -INFINITY : INFINITY;
        for (int64_t r0 = 0; r0 < j->len; r0 += th) {
            const int64_t h = j->len - r0 < th ? j->len - r0 : th;
            for (int64_t c = 0; c < b; c++)
                load_d(t + c * th, j->x, j->dt, io + r0 * j->is + c * cis, h, j->is);
            if (j->op == EM_CUM_PROD) prod_lines(t, acc, h, b, th);
            else if (mx) ext_lines_max_d(t, it, acc, ai, h, b, th, r0);
            else ext_lines_min_d(t, it, acc, ai, h, b, th, r0);
            for (int64_t c = 0; c < b; c++) {
                store_d(j->o, j->dt, oo + r0 * j->os + c * cos, h, j->os, t + c * th);
                if (j->ix) store_i(j->ix + ko + r0 * j->ks + c * cks, h, j->ks, it + c * th);
            }
        }
        return;
    }
    float acc[CUM_BLOCK], t[CUM_TILE];
    for (int64_t c = 0; c < b; c++) acc[c] = mx ? -INFINITY : INFINITY;
    for (int64_t r0 = 0; r0 < j->len; r0 += th) {
        const int64_t h = j->len - r0 < th ? j->len - r0 : th;
        for (int64_t c = 0; c < b; c++)
            load_f(t + c * th, j->x, j->dt, io + r0 * j->is + c * cis, h, j->is);
        if (mx) ext_lines_max_f(t, it, acc, ai, h, b, th, r0);
        else ext_lines_min_f(t, it, acc, ai, h, b, th, r0);
        for (int64_t c = 0; c < b; c++) {
            store_f(j->o, j->dt, oo + r0 * j->os + c * cos, h, j->os, t + c * th);
            store_i(j->ix + ko + r0 * j->ks + c * cks, h, j->ks, it + c * th);
        }
    }
}

/** Scans b columns (b <= j->bw <= CUM_BLOCK) from offsets io / oo / ko (column strides cis /
 *  cos / cks) over the job's len rows, a tile of j->th rows at a time. */
static void scan_block(const cum_job *j, int64_t io, int64_t oo, int64_t ko, int64_t b,
                       int64_t cis, int64_t cos, int64_t cks) {
    const bool mx = j->op == EM_CUM_MAX;
    int64_t ai[CUM_BLOCK], it[CUM_TILE];
    for (int64_t c = 0; c < b; c++) ai[c] = 0;
    if (j->op == EM_CUM_PROD || j->dt == EM_F64) {
        double acc[CUM_BLOCK], t[CUM_TILE];
        for (int64_t c = 0; c < b; c++)
            acc[c] = j->op == EM_CUM_PROD ? 1.0 : mx ? -INFINITY : INFINITY;
        for (int64_t r0 = 0; r0 < j->len; r0 += j->th) {
            const int64_t h = j->len - r0 < j->th ? j->len - r0 : j->th;
            tile_load_d(t, j, io + r0 * j->is, h, b, cis);
            if (j->op == EM_CUM_PROD) prod_tile(t, acc, h, b);
            else if (mx) ext_tile_max_d(t, it, acc, ai, h, b, r0);
            else ext_tile_min_d(t, it, acc, ai, h, b, r0);
            tile_store_d(j, oo + r0 * j->os, h, b, cos, t);
            if (j->ix) tile_store_i(j->ix, ko + r0 * j->ks, j->ks, cks, it, h, b);
        }
        return;
    }
    float acc[CUM_BLOCK], t[CUM_TILE];
    for (int64_t c = 0; c < b; c++) acc[c] = mx ? -INFINITY : INFINITY;
    for (int64_t r0 = 0; r0 < j->len; r0 += j->th) {
        const int64_t h = j->len - r0 < j->th ? j->len - r0 : j->th;
        tile_load_f(t, j, io + r0 * j->is, h, b, cis);
        if (mx) ext_tile_max_f(t, it, acc, ai, h, b, r0);
        else ext_tile_min_f(t, it, acc, ai, h, b, r0);
        tile_store_f(j, oo + r0 * j->os, h, b, cos, t);
        tile_store_i(j->ix, ko + r0 * j->ks, j->ks, cks, it, h, b);
    }
}

/* a sequential scan of one line's chunk w[0, c) (rows r0...), running state in *m / *mi */
#define CUM_EXT_LINE(S, T, CMP)                                                                   \
    static void ext_line_##S(T *restrict w, int64_t *restrict ai, int64_t c, int64_t r0, T *m, \
                             int64_t *mi) {                                                      \
        T a = *m;                                                                                \
        int64_t k = *mi;                                                                         \
        for (int64_t i = 0; i < c; i++) {                                                        \
            const T v = w[i];                                                                    \
            if ((v CMP a) | (v != v)) {                                                          \
                a = v;                                                                           \
                k = r0 + i;                                                                      \
            }                                                                                    \
            w[i] = a;                                                                            \
            ai[i] = k;                                                                           \
        }                                                                                        \
        *m = a;                                                                                  \
        *mi = k;                                                                                 \
    }
CUM_EXT_LINE(max_f, float, >=)
CUM_EXT_LINE(min_f, float, <=)
CUM_EXT_LINE(max_d, double, >=)
CUM_EXT_LINE(min_d, double, <=)
#undef CUM_EXT_LINE

/** Scans one line from offsets io / oo / ko, CUM_CHUNK elements at a time. */
static void scan_line(const cum_job *j, int64_t io, int64_t oo, int64_t ko) {
    const bool mx = j->op == EM_CUM_MAX;
    int64_t ai[CUM_CHUNK], mi = 0;
    if (j->op == EM_CUM_PROD || j->dt == EM_F64) {
        double w[CUM_CHUNK], m = mx ? -INFINITY : INFINITY, p = 1.0;
        for (int64_t r0 = 0; r0 < j->len; r0 += CUM_CHUNK) {
            const int64_t c = j->len - r0 < CUM_CHUNK ? j->len - r0 : CUM_CHUNK;
            load_d(w, j->x, j->dt, io + r0 * j->is, c, j->is);
            if (j->op == EM_CUM_PROD) {
                for (int64_t i = 0; i < c; i++) w[i] = p *= w[i];
            } else if (mx) {
                ext_line_max_d(w, ai, c, r0, &m, &mi);
            } else {
                ext_line_min_d(w, ai, c, r0, &m, &mi);
            }
            store_d(j->o, j->dt, oo + r0 * j->os, c, j->os, w);
            if (j->ix) store_i(j->ix + ko + r0 * j->ks, c, j->ks, ai);
        }
        return;
    }
    float w[CUM_CHUNK], m = mx ? -INFINITY : INFINITY;
    for (int64_t r0 = 0; r0 < j->len; r0 += CUM_CHUNK) {
        const int64_t c = j->len - r0 < CUM_CHUNK ? j->len - r0 : CUM_CHUNK;
        load_f(w, j->x, j->dt, io + r0 * j->is, c, j->is);
        if (mx) ext_line_max_f(w, ai, c, r0, &m, &mi);
        else ext_line_min_f(w, ai, c, r0, &m, &mi);
        store_f(j->o, j->dt, oo + r0 * j->os, c, j->os, w);
        store_i(j->ix + ko + r0 * j->ks, c, j->ks, ai);
    }
}

static void cum_cols(int64_t lo, int64_t hi, void *arg) {
    const cum_job *j = arg;
    for (int64_t t = lo; t < hi; t++) {
        const int64_t o = t / j->nblk, c0 = (t % j->nblk) * j->bw;
        const int64_t b = j->cn - c0 < j->bw ? j->cn - c0 : j->bw;
        int64_t io, oo, ko;
        cd_seek(&j->k, o, &io, &oo, &ko);
        (j->direct  ? scan_block_direct
         : j->lines ? scan_block_lines
                    : scan_block)(j, io + c0 * j->cis, oo + c0 * j->cos, ko + c0 * j->cks, b,
                                  j->cis, j->cos, j->cks);
    }
}

static void cum_lines(int64_t lo, int64_t hi, void *arg) {
    const cum_job *j = arg;
    for (int64_t t = lo; t < hi; t++) {
        int64_t io, oo, ko;
        cd_seek(&j->k, t, &io, &oo, &ko);
        scan_line(j, io, oo, ko);
    }
}

static bool cum_float(em_dtype dt) {
    return dt == EM_F32 || dt == EM_F64 || dt == EM_F16 || dt == EM_BF16;
}

em_status CPU_K(cpu_cumulative)(void *ctx, em_cum_op op, const em_view *values,
                                const em_view *indices, const em_view *in, int dim) {
    const em_dtype dt = in->dtype;
    const bool ext = op == EM_CUM_MAX || op == EM_CUM_MIN;
    if (!cum_float(dt) || values->dtype != dt || values->rank != in->rank || in->rank < 1 ||
        dim < 0 || dim >= in->rank || (ext && (!indices || indices->dtype != EM_I64 ||
                                               indices->rank != in->rank)) ||
        (int)op < 0 || op >= EM_CUM_COUNT)
        return CPU_FALLBACK(CPU_FB_CUMULATIVE, values->dtype, cumulative, ctx, op, values,
                            indices, in, dim);
    cum_job j = {.op = op, .dt = dt, .x = cpu_ptr(in), .o = cpu_ptr(values),
                 .ix = ext ? (int64_t *)cpu_ptr(indices) : NULL};
    j.len = in->shape[dim];
    j.is = in->strides[dim];
    j.os = values->strides[dim];
    j.ks = ext ? indices->strides[dim] : 0;
    cd_build(&j.k, in, values, ext ? indices : NULL, dim);
    const int64_t m = cd_numel(&j.k);
    if (m == 0 || j.len == 0) return EM_OK;
    int c = cd_column(&j.k);
    if (c >= 0 && j.k.size[c] >= CUM_MIN_COLS) {
        j.cn = j.k.size[c];
        j.cis = j.k.is[c];
        j.cos = j.k.os[c];
        j.cks = j.k.ks[c];
        for (int d = c; d + 1 < j.k.n; d++) {
            j.k.size[d] = j.k.size[d + 1];
            j.k.is[d] = j.k.is[d + 1];
            j.k.os[d] = j.k.os[d + 1];
            j.k.ks[d] = j.k.ks[d + 1];
        }
        j.k.n--;
        /* the dim denser than the column in the input: narrow blocks of taller tiles, so that
         * each tile loads longer runs along the dim */
        const int64_t bmax = cum_abs(j.is) < cum_abs(j.cis) ? CUM_NARROW : CUM_BLOCK;
        j.bw = j.cn < bmax ? j.cn : bmax;
        j.th = CUM_TILE / bmax;
        j.lines = cum_abs(j.is) < cum_abs(j.cis) && cum_abs(j.os) < cum_abs(j.cos) &&
                  (!ext || cum_abs(j.ks) < cum_abs(j.cks));
        j.direct = (dt == EM_F32 || dt == EM_F64) && j.is == 1 && j.os == 1 && (!ext || j.ks == 1);
        j.nblk = (j.cn + j.bw - 1) / j.bw;
        const int64_t grain = CUM_GRAIN / (j.len * j.bw);
        cpu_parallel_for(cd_numel(&j.k) * j.nblk, grain < 1 ? 1 : grain, cum_cols, &j);
    } else {
        const int64_t grain = CUM_GRAIN / j.len;
        cpu_parallel_for(m, grain < 1 ? 1 : grain, cum_lines, &j);
    }
    return EM_OK;
}
