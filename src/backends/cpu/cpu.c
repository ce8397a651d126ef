/* cpu.c — the cpu backend's table, its device, and its copy and fill kernels. */
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif

#include "blocks.h"
#include "cpu.h"
#include "quant.h"

static int cpu_ctx_token; /* the one cpu device needs no state of its own */

static int cpu_device_count(void) { return 1; }

static em_status cpu_open(int index, void **ctx) {
    if (index != 0) return em_backend_set_error(EM_ERR_DEVICE, "cpu: no device %d", index);
    cpu_isa();     /* choose the kernels' instruction set once (isa.c) */
    cpu_threads(); /* start the pool (and size OpenBLAS) once */
    cpu_fallback_init(); /* EMBER_REPORT_FALLBACKS */
    *ctx = &cpu_ctx_token;
    return EM_OK;
}

static em_status cpu_write(void *ctx, void *buf, size_t offset, const void *src, size_t bytes) {
    (void)ctx;
    memcpy((char *)buf + offset, src, bytes);
    return EM_OK;
}

static em_status cpu_read(void *ctx, const void *buf, size_t offset, void *dst, size_t bytes) {
    (void)ctx;
    memcpy(dst, (const char *)buf + offset, bytes);
    return EM_OK;
}

const em_backend_ops *cpu_ref(void) { return em_backend_get(EM_BACKEND_REF); }

/* ---- copy ----
 * Every layout and every pair of dtypes, natively:
 *   - both views contiguous: memcpy, or the float casts of cast_range, split over the pool;
 *   - else the N-d iteration of iter.h over (out, in), ordered by out's strides: rows that
 *     are contiguous in both are memcpy'd (a permute(0,2,1,3) of [B,T,H,D] is rows of D);
 *   - when out's inner dim is strided in `in` and another dim is contiguous in `in` (a 2-d
 *     transpose, NCHW <-> NHWC, any permute that moves the innermost dim), a transpose in
 *     tiles of CP_TILE x CP_TILE that stay in L1;
 *   - other strides (negative ones included, and strided outputs: cat, stack, slice_assign
 *     write through views) an element-size loop along the row;
 *   - casts a block at a time through double (a float dtype on either side) or int64, which
 *     is what ref does: its element conversions (iter.h) bit for bit. */

typedef struct copy_job {
    char *dst;
    const char *src;
    size_t sz;
} copy_job;

static void copy_range(int64_t lo, int64_t hi, void *arg) {
    copy_job *j = arg;
    memcpy(j->dst + lo * (int64_t)j->sz, j->src + lo * (int64_t)j->sz, (size_t)(hi - lo) * j->sz);
}

/* Casts between the float dtypes, contiguous to contiguous: f32 <-> f16, bf16, f64 (the
 * conversions ref makes, element for element: a float dtype widened to double is exact, so
 * going through float gives the same bits). */
static void cast_float(void *dst, const void *src, em_dtype to, em_dtype from, int64_t n) {
    if (from == EM_F32) {
        const float *x = src;
        if (to == EM_F16) {
            uint16_t *o = dst;
            for (int64_t i = 0; i < n; i++) o[i] = em_f32_to_f16(x[i]);
        } else if (to == EM_BF16) {
            uint16_t *o = dst;
            for (int64_t i = 0; i < n; i++) o[i] = em_f32_to_bf16(x[i]);
        } else {
            double *o = dst;
            for (int64_t i = 0; i < n; i++) o[i] = x[i];
        }
        return;
    }
    float *o = dst;
    if (from == EM_F16) {
        const uint16_t *x = src;
        for (int64_t i = 0; i < n; i++) o[i] = em_f16_to_f32(x[i]);
    } else if (from == EM_BF16) {
        const uint16_t *x = src;
        for (int64_t i = 0; i < n; i++) o[i] = em_bf16_to_f32(x[i]);
    } else {
        const double *x = src;
        for (int64_t i = 0; i < n; i++) o[i] = (float)x[i];
    }
}

/* True for the casts cast_float makes: f32 to or from f16, bf16 or f64. */
static bool float_cast(em_dtype to, em_dtype from) {
    em_dtype other = to == EM_F32 ? from : from == EM_F32 ? to : EM_F32;
    return other == EM_F16 || other == EM_BF16 || other == EM_F64;
}

typedef struct cast_job {
    void *dst;
    const void *src;
    em_dtype to, from;
} cast_job;

static void cast_range(int64_t lo, int64_t hi, void *arg) {
    const cast_job *j = arg;
    size_t eo = em_dtype_size(j->to), ei = em_dtype_size(j->from);
    cast_float((char *)j->dst + lo * (int64_t)eo, (const char *)j->src + lo * (int64_t)ei, j->to,
               j->from, hi - lo);
}

/* n elements at p (stride s, dtype dt) as double, as ref_ld. */
static void ld_f64_blk(em_dtype dt, const char *p, int64_t s, int64_t n, double *restrict o) {
#define LD(T, E)                                                                               \
    do {                                                                                       \
        const T *x = (const T *)p;                                                             \
        for (int64_t i = 0; i < n; i++) o[i] = E;                                              \
    } while (0)
    switch (dt) {
    case EM_F32: LD(float, x[i * s]); break;
    case EM_F64: LD(double, x[i * s]); break;
    case EM_F16: LD(uint16_t, em_f16_to_f32(x[i * s])); break;
    case EM_BF16: LD(uint16_t, em_bf16_to_f32(x[i * s])); break;
    case EM_I64: LD(int64_t, (double)x[i * s]); break;
    case EM_I32: LD(int32_t, x[i * s]); break;
    case EM_I16: LD(int16_t, x[i * s]); break;
    case EM_I8: case EM_Q8: case EM_Q4: LD(int8_t, x[i * s]); break;
    case EM_U8: LD(uint8_t, x[i * s]); break;
    case EM_BOOL: LD(uint8_t, x[i * s] != 0); break;
    }
#undef LD
}

/* n doubles to p (stride s, dtype dt), as ref_st. */
static void st_f64_blk(em_dtype dt, char *p, int64_t s, const double *restrict v, int64_t n) {
#define ST(T, E)                                                                               \
    do {                                                                                       \
        T *o = (T *)p;                                                                         \
        for (int64_t i = 0; i < n; i++) o[i * s] = E;                                          \
    } while (0)
    switch (dt) {
    case EM_F32: ST(float, (float)v[i]); break;
    case EM_F64: ST(double, v[i]); break;
    case EM_F16: ST(uint16_t, em_f32_to_f16((float)v[i])); break;
    case EM_BF16: ST(uint16_t, em_f32_to_bf16((float)v[i])); break;
    case EM_BOOL: ST(uint8_t, v[i] != 0); break;
    default: {
        int64_t buf[CPU_BLK];
        for (int64_t i = 0; i < n; i++) buf[i] = cpu_f64_to_i64(v[i]);
        cpu_blk_st_i64(dt, p, s, buf, n);
    }
    }
#undef ST
}

typedef struct copy_ctx {
    em_dtype to, from;
    int64_t es; /* element size (same dtype) */
} copy_ctx;

/* one row, same dtype: p/s are out, in */
static void copy_row(void *ctx, char *const *p, const int64_t *s, int64_t n) {
    const copy_ctx *c = ctx;
#define STRIDED(T)                                                                             \
    do {                                                                                       \
        T *o = (T *)p[0];                                                                      \
        const T *x = (const T *)p[1];                                                          \
        int64_t so = s[0], si = s[1];                                                          \
        if (so == 1 && si == 0) {                                                              \
            T v = x[0];                                                                        \
            for (int64_t i = 0; i < n; i++) o[i] = v;                                          \
        } else if (so == 1 && si == -1) {                                                      \
            for (int64_t i = 0; i < n; i++) o[i] = x[-i];                                      \
        } else if (so == 1) {                                                                  \
            for (int64_t i = 0; i < n; i++) o[i] = x[i * si];                                  \
        } else {                                                                               \
            for (int64_t i = 0; i < n; i++) o[i * so] = x[i * si];                             \
        }                                                                                      \
    } while (0)
    if (s[0] == 1 && s[1] == 1) {
        memcpy(p[0], p[1], (size_t)(n * c->es));
        return;
    }
    switch (c->es) {
    case 1: STRIDED(uint8_t); break;
    case 2: STRIDED(uint16_t); break;
    case 4: STRIDED(uint32_t); break;
    default: STRIDED(uint64_t); break;
    }
#undef STRIDED
}

/* m rows of one dtype (p/s: out, in) */
static void copy_rows(void *ctx, char *const *p, const int64_t *s, int64_t n, const int64_t *s2,
                      int64_t m) {
    const copy_ctx *c = ctx;
    const int64_t es = c->es;
    if (s[0] == 1 && s[1] == 1) { /* rows contiguous in both: a permute that keeps the inner dim */
#define ROWS(T)                                                                                \
    do {                                                                                       \
        for (int64_t r = 0; r < m; r++) {                                                      \
            T *restrict o = (T *)(p[0] + r * s2[0] * es);                                      \
            const T *restrict x = (const T *)(p[1] + r * s2[1] * es);                          \
            for (int64_t i = 0; i < n; i++) o[i] = x[i];                                       \
        }                                                                                      \
    } while (0)
        if (n * es >= 128) { /* glibc's memcpy beats a baseline-ISA loop from 128 bytes */
            for (int64_t r = 0; r < m; r++)
                memcpy(p[0] + r * s2[0] * es, p[1] + r * s2[1] * es, (size_t)(n * es));
            return;
        }
        switch (es) {
        case 1: ROWS(uint8_t); break;
        case 2: ROWS(uint16_t); break;
        case 4: ROWS(uint32_t); break;
        default: ROWS(uint64_t); break;
        }
#undef ROWS
        return;
    }
    for (int64_t r = 0; r < m; r++) {
        char *q[2] = {p[0] + r * s2[0] * es, p[1] + r * s2[1] * es};
        copy_row(ctx, q, s, n);
    }
}

/* one row with a cast */
static void cast_row(void *ctx, char *const *p, const int64_t *s, int64_t n) {
    const copy_ctx *c = ctx;
    const int64_t eo = (int64_t)em_dtype_size(c->to), ei = (int64_t)em_dtype_size(c->from);
    if (s[0] == 1 && s[1] == 1 && float_cast(c->to, c->from)) {
        cast_float(p[0], p[1], c->to, c->from, n);
        return;
    }
    bool fl = cpu_is_float_dt(c->to) || cpu_is_float_dt(c->from);
    for (int64_t i = 0; i < n; i += CPU_BLK) {
        int64_t m = n - i < CPU_BLK ? n - i : CPU_BLK;
        char *po = p[0] + i * s[0] * eo;
        const char *pi = p[1] + i * s[1] * ei;
        if (fl) {
            double buf[CPU_BLK];
            ld_f64_blk(c->from, pi, s[1], m, buf);
            st_f64_blk(c->to, po, s[0], buf, m);
        } else {
            int64_t buf[CPU_BLK];
            if (s[1] == 0) {
                const int64_t *v = cpu_blk_i64(c->from, pi, 0, 1, buf);
                int64_t x = v[0];
                for (int64_t k = 0; k < m; k++) buf[k] = x;
                cpu_blk_st_i64(c->to, po, s[0], buf, m);
            } else {
                cpu_blk_st_i64(c->to, po, s[0], cpu_blk_i64(c->from, pi, s[1], m, buf), m);
            }
        }
    }
}

/* ---- the tiled transpose: dims k (out's inner, strided in in) and jd (in's unit stride) --- */

#define CP_TILE 64

typedef struct tr_job {
    const cpu_iter *it;
    int jd;       /* the dim contiguous in `in` */
    int64_t es;
    int64_t tiles_j; /* tiles along jd */
    int odims[EM_MAX_RANK], nodims; /* the other dims */
} tr_job;

/* One tile through a staging buffer: the tile's rows of `in` (contiguous along jd) are read
 * into buf, then written out along out's inner dim. Reading or writing the tile directly
 * touches CP_TILE lines one large stride apart, which share a cache set when the stride is a
 * power of two (a [2048, 2048] transpose): 32 lines in an 8-way set miss on every element. */
#define TR_TILE(T)                                                                             \
    do {                                                                                       \
        T buf[CP_TILE * CP_TILE];                                                              \
        T *o = (T *)po;                                                                        \
        const T *x = (const T *)pi;                                                            \
        for (int64_t kk = 0; kk < nk; kk++) {                                                  \
            const T *row = x + kk * isk;                                                       \
            for (int64_t jj = 0; jj < nj; jj++) buf[kk * CP_TILE + jj] = row[jj];              \
        }                                                                                      \
        if (osk == 1)                                                                          \
            for (int64_t jj = 0; jj < nj; jj++) {                                              \
                T *orow = o + jj * osj;                                                        \
                for (int64_t kk = 0; kk < nk; kk++) orow[kk] = buf[kk * CP_TILE + jj];         \
            }                                                                                  \
        else                                                                                   \
            for (int64_t jj = 0; jj < nj; jj++) {                                              \
                T *orow = o + jj * osj;                                                        \
                for (int64_t kk = 0; kk < nk; kk++) orow[kk * osk] = buf[kk * CP_TILE + jj];   \
            }                                                                                  \
    } while (0)

#if defined(__SSE2__)
/* TR_TILE for 4-byte elements and osk == 1, with 4x4 transposes in SSE registers (the x86-64
 * baseline) from the staging buffer to out. */
static void tr_tile_sse(char *po, const char *pi, int64_t nj, int64_t nk, int64_t osj,
                        int64_t isk) {
    float buf[CP_TILE * CP_TILE];
    float *o = (float *)po;
    const float *x = (const float *)pi;
    for (int64_t kk = 0; kk < nk; kk++) memcpy(buf + kk * CP_TILE, x + kk * isk, (size_t)nj * 4);
    int64_t j4 = nj & ~(int64_t)3, k4 = nk & ~(int64_t)3;
    for (int64_t jj = 0; jj < j4; jj += 4) {
        for (int64_t kk = 0; kk < k4; kk += 4) {
            __m128 r0 = _mm_loadu_ps(buf + (kk + 0) * CP_TILE + jj);
            __m128 r1 = _mm_loadu_ps(buf + (kk + 1) * CP_TILE + jj);
            __m128 r2 = _mm_loadu_ps(buf + (kk + 2) * CP_TILE + jj);
            __m128 r3 = _mm_loadu_ps(buf + (kk + 3) * CP_TILE + jj);
            _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
            _mm_storeu_ps(o + (jj + 0) * osj + kk, r0);
            _mm_storeu_ps(o + (jj + 1) * osj + kk, r1);
            _mm_storeu_ps(o + (jj + 2) * osj + kk, r2);
            _mm_storeu_ps(o + (jj + 3) * osj + kk, r3);
        }
        for (int64_t q = jj; q < jj + 4; q++)
            for (int64_t kk = k4; kk < nk; kk++) o[q * osj + kk] = buf[kk * CP_TILE + q];
    }
    for (int64_t jj = j4; jj < nj; jj++)
        for (int64_t kk = 0; kk < nk; kk++) o[jj * osj + kk] = buf[kk * CP_TILE + jj];
}
#endif

static void tr_range(int64_t lo, int64_t hi, void *arg) {
    const tr_job *j = arg;
    const cpu_iter *it = j->it;
    const int r = it->rank, kd = r - 1, jd = j->jd;
    const int64_t K = it->shape[kd], J = it->shape[jd];
    const int64_t osk = it->strides[0][kd], osj = it->strides[0][jd], isk = it->strides[1][kd];
    for (int64_t u = lo; u < hi; u++) {
        int64_t tj = u % j->tiles_j, rest = u / j->tiles_j, oo = 0, oi = 0;
        for (int q = j->nodims - 1; q >= 0; q--) {
            int d = j->odims[q];
            int64_t idx = rest % it->shape[d];
            rest /= it->shape[d];
            oo += idx * it->strides[0][d];
            oi += idx * it->strides[1][d];
        }
        int64_t j0 = tj * CP_TILE, nj = J - j0 < CP_TILE ? J - j0 : CP_TILE;
        for (int64_t k0 = 0; k0 < K; k0 += CP_TILE) {
            int64_t nk = K - k0 < CP_TILE ? K - k0 : CP_TILE;
            char *po = it->base[0] + (oo + j0 * osj + k0 * osk) * j->es;
            const char *pi = it->base[1] + (oi + j0 + k0 * isk) * j->es;
            switch (j->es) {
            case 1: TR_TILE(uint8_t); break;
            case 2: TR_TILE(uint16_t); break;
            case 4:
#if defined(__SSE2__)
                if (osk == 1) {
                    tr_tile_sse(po, pi, nj, nk, osj, isk);
                    break;
                }
#endif
                TR_TILE(uint32_t);
                break;
            default: TR_TILE(uint64_t); break;
            }
        }
    }
}

/* The tiled transpose when it applies (same dtype, out's inner dim long enough and strided in
 * `in`, another dim of unit stride in `in`); false otherwise. */
static bool copy_transpose(const cpu_iter *it, int64_t es) {
    const int r = it->rank, kd = r - 1;
    if (r < 2 || it->shape[kd] < 4) return false;
    int64_t isk = it->strides[1][kd];
    if (isk == 0 || isk == 1 || isk == -1) return false;
    int jd = -1;
    for (int d = kd - 1; d >= 0; d--)
        if (it->strides[1][d] == 1 && it->shape[d] >= 4) {
            jd = d;
            break;
        }
    if (jd < 0) return false;
    tr_job j = {.it = it, .jd = jd, .es = es, .tiles_j = (it->shape[jd] + CP_TILE - 1) / CP_TILE};
    int64_t units = j.tiles_j;
    for (int d = 0; d < kd; d++)
        if (d != jd) {
            j.odims[j.nodims++] = d;
            units *= it->shape[d];
        }
    int64_t per = CP_TILE * it->shape[kd];
    cpu_parallel_for(units, (1 << 16) / per + 1, tr_range, &j);
    return true;
}

em_status cpu_copy(void *ctx, const em_view *out, const em_view *in) {
    (void)ctx;
    int64_t n = cpu_numel(out);
    if (n == 0) return EM_OK;
    if (cpu_contiguous(out) && cpu_contiguous(in)) {
        if (out->dtype == in->dtype) {
            copy_job j = {cpu_ptr(out), cpu_ptr(in), em_dtype_size(in->dtype)};
            cpu_parallel_for(n, 1 << 18, copy_range, &j);
            return EM_OK;
        }
        if (float_cast(out->dtype, in->dtype)) {
            cast_job j = {cpu_ptr(out), cpu_ptr(in), out->dtype, in->dtype};
            cpu_parallel_for(n, 1 << 15, cast_range, &j);
            return EM_OK;
        }
    }
    copy_ctx c = {out->dtype, in->dtype, (int64_t)em_dtype_size(in->dtype)};
    cpu_iter_job j = {.ctx = &c};
    cpu_iter_init2(&j.it, out, in);
    if (out->dtype == in->dtype) {
        if (copy_transpose(&j.it, c.es)) return EM_OK;
        int64_t rows = cpu_iter_rows_count(&j.it), inner = j.it.shape[j.it.rank - 1];
        if (rows >= 4 * (int64_t)cpu_threads()) { /* whole rows a task, runs of them a call */
            cpu_rows_job rj = {j.it, copy_rows, &c};
            cpu_parallel_for(rows, (1 << 15) / inner + 1, cpu_rows_job_range, &rj);
            return EM_OK;
        }
        j.row = copy_row; /* a few long rows: split inside them */
    } else {
        j.row = cast_row;
    }
    cpu_parallel_for(n, 1 << 15, cpu_iter_job_range, &j);
    return EM_OK;
}

em_status cpu_contig_input(const em_view *in, em_view *out, void **tmp) {
    *tmp = NULL;
    *out = *in;
    if (cpu_contiguous(in)) return EM_OK;
    size_t bytes = (size_t)cpu_numel(in) * em_dtype_size(in->dtype);
    void *p = cpu_scratch(bytes);
    if (!p) return em_backend_set_error(EM_ERR_NOMEM, "cpu: out of memory (%zu bytes)", bytes);
    out->buf = p;
    out->offset = 0;
    int64_t s = 1;
    for (int d = in->rank - 1; d >= 0; d--) {
        out->strides[d] = s;
        s *= in->shape[d];
    }
    em_status st = cpu_copy(NULL, out, in);
    if (st != EM_OK) {
        cpu_scratch_free(p);
        return st;
    }
    *tmp = p;
    return EM_OK;
}

/* ---- fill: every dtype (the value converted as ref_st does) and any output layout ---- */

typedef struct fill_ctx {
    _Alignas(8) unsigned char elem[8];
    int64_t es;
} fill_ctx;

static void fill_row(void *ctx, char *const *p, const int64_t *s, int64_t n) {
    const fill_ctx *c = ctx;
#define FILL(T)                                                                                \
    do {                                                                                       \
        T v, *o = (T *)p[0];                                                                   \
        memcpy(&v, c->elem, sizeof v);                                                         \
        if (s[0] == 1)                                                                         \
            for (int64_t i = 0; i < n; i++) o[i] = v;                                          \
        else                                                                                   \
            for (int64_t i = 0; i < n; i++) o[i * s[0]] = v;                                   \
    } while (0)
    switch (c->es) {
    case 1: memset(p[0], c->elem[0], s[0] == 1 ? (size_t)n : 0);
        if (s[0] != 1) FILL(uint8_t);
        break;
    case 2: FILL(uint16_t); break;
    case 4: FILL(uint32_t); break;
    default: FILL(uint64_t); break;
    }
#undef FILL
}

em_status cpu_fill(void *ctx, const em_view *out, double value) {
    fill_ctx c = {.es = (int64_t)em_dtype_size(out->dtype)};
    if (c.es != 1 && c.es != 2 && c.es != 4 && c.es != 8)
        return CPU_FALLBACK(CPU_FB_FILL, out->dtype, fill, ctx, out, value);
    cpu_st_f64(c.elem, out->dtype, value);
    cpu_iter_job j = {.row = fill_row, .ctx = &c};
    const em_view *vs[1] = {out};
    cpu_iter_init(&j.it, 1, vs);
    if (j.it.numel) cpu_parallel_for(j.it.numel, 1 << 16, cpu_iter_job_range, &j);
    return EM_OK;
}

const em_backend_ops em_cpu_backend_ops = {
    .abi_version = EM_BACKEND_ABI_VERSION,
    .name = "cpu",
    .id = EM_BACKEND_CPU,
    .caps = EM_CAP_STRIDED_INPUTS | EM_CAP_HOST_MEMORY,
    .device_count = cpu_device_count,
    .open = cpu_open,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .write = cpu_write,
    .read = cpu_read,
    .memory = cpu_memory,
    .memory_reset_peak = cpu_memory_reset_peak,
    .memory_cached = cpu_memory_cached,
    .memory_release = cpu_memory_release,
    .fill = cpu_fill,
    .copy = cpu_copy,
    .unary = cpu_unary,
    .binary = cpu_binary,
    .binary_scalar = cpu_binary_scalar,
    .where = cpu_where,
    .gather = cpu_gather,
    .scatter_add = cpu_scatter_add,
    .matmul = cpu_matmul,
    .reduce = cpu_reduce,
    .softmax = cpu_softmax,
    .conv2d = cpu_conv2d,
    .conv2d_weight_grad = cpu_conv2d_weight_grad,
    .conv_transpose2d = cpu_conv_transpose2d,
    .max_pool2d = cpu_max_pool2d,
    .avg_pool2d = cpu_avg_pool2d,
    .avg_pool2d_backward = cpu_avg_pool2d_backward,
    .layer_norm = cpu_layer_norm,
    .batch_norm = cpu_batch_norm,
    .batch_norm_backward = cpu_batch_norm_backward,
    .group_norm = cpu_group_norm,
    .rms_norm = cpu_rms_norm,
    .cumulative = cpu_cumulative,
    .sdpa = cpu_sdpa,
    .sdpa_backward = cpu_sdpa_backward,
    /* fallback.c: ref's kernels, counted (fallback.h) */
    .arange = cpu_arange,
    .random = cpu_random,
    .cumsum = cpu_cumsum,
    .index_select = cpu_index_select,
    .sort = cpu_sort,
    .adaptive_avg_pool2d = cpu_adaptive_avg_pool2d,
    .adaptive_avg_pool2d_backward = cpu_adaptive_avg_pool2d_backward,
    /* fused.c (ABI 3) */
    .unary_backward = cpu_unary_backward,
    .adam_step = cpu_adam_step,
    /* quant.c (ABI 5) */
    .quantize = cpu_quantize,
    .dequantize = cpu_dequantize,
    .qmatmul = cpu_qmatmul,
};
