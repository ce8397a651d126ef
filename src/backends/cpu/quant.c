/* quant.c — the cpu backend's quantized tensors (backend.h, ABI 5): quantize, dequantize and
 * qmatmul (see quant.h). Compiled once; the int8 product's inner tiles are per ISA level
 * (quant_x86.c), with the portable tile here.
 *
 * qmatmul case (1), the int8 product, in three steps:
 *   - a's rows become q8 blocks of 32 (cpu_qa): quantized from f32 exactly as backend.h
 *     says (the same q and d as ref's kernel), or copied from a quantized a;
 *   - b is read where it lies (cpu_qb: a column's blocks run along K, at a stride per column);
 *     only a per-tensor b whose columns are not contiguous runs of whole blocks is first
 *     copied as int8 columns (never dequantized);
 *   - tiles of rows x columns, split over the pool by blocks of rows and groups of columns:
 *     a block of a's rows (64, 256 KiB at K = 4096) stays in L2 while the weight streams by,
 *     each group of columns being reused from L1 by every row of the block.
 * The per-block terms are backend.h's; each tile sums them in its own order (f32), so results
 * match ref's within f32 rounding, not bit for bit. quantize and dequantize are ref's
 * arithmetic, bit for bit. */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cpu.h"
#include "quant.h"

/* ---- the level ---- */

static const char *const ql_names[CPU_QL_COUNT] = {"portable", "avx2", "avxvnni", "avx512vnni"};

const char *cpu_quant_level_name(int level) {
    return level >= 0 && level < CPU_QL_COUNT ? ql_names[level] : "?";
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
/* The VNNI flags (the OS's saving of the registers is isa.c's check, through cpu_isa_best). */
static void vnni_flags(bool *v512, bool *v256) {
    unsigned a, b, c, d;
    *v512 = *v256 = false;
    if (__get_cpuid_max(0, NULL) < 7) return;
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned max_sub = a;
    *v512 = (c & (1u << 11)) && (b & (1u << 30)) && (b & (1u << 31)) && (b & (1u << 17));
    if (max_sub >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        *v256 = a & (1u << 4);
    }
}
#else
static void vnni_flags(bool *v512, bool *v256) { *v512 = *v256 = false; }
#endif

bool cpu_quant_level_supported(int level) {
    cpu_qtile t;
    if (level == CPU_QL_PORTABLE) return true;
    if (level < 0 || level >= CPU_QL_COUNT || !cpu_qtile_x86(level, &t)) return false;
    bool v512, v256;
    vnni_flags(&v512, &v256);
    const int best = cpu_isa_best();
    switch (level) {
    case CPU_QL_AVX2: return best >= CPU_ISA_AVX2;
    case CPU_QL_AVXVNNI: return best >= CPU_ISA_AVX2 && v256;
    default: return best >= CPU_ISA_AVX512 && v512;
    }
}

static pthread_once_t ql_once = PTHREAD_ONCE_INIT;
static int ql_level;

/* The best level allowed by the backend's level (EMBER_CPU_ISA) and the CPU, capped by
 * EMBER_CPU_QUANT. */
static void ql_init(void) {
    const int isa = cpu_isa();
    int cap = CPU_QL_COUNT - 1;
    const char *env = getenv("EMBER_CPU_QUANT");
    if (env && *env)
        for (int l = 0; l < CPU_QL_COUNT; l++)
            if (strcasecmp(env, ql_names[l]) == 0) cap = l;
    int level = CPU_QL_PORTABLE;
    for (int l = cap; l > CPU_QL_PORTABLE; l--) {
        const int needs = l == CPU_QL_AVX512VNNI ? CPU_ISA_AVX512 : CPU_ISA_AVX2;
        if (isa >= needs && cpu_quant_level_supported(l)) {
            level = l;
            break;
        }
    }
    ql_level = level;
}

int cpu_quant_level(void) {
    pthread_once(&ql_once, ql_init);
    return ql_level;
}

/* ---- scalar pieces: ref's arithmetic ---- */

/* nearbyint (half to even, the default rounding mode) of v, clamped to [lo, hi]: clamping
 * in f32 first keeps lrintf's conversion in range (and gives the clamp's result). */
static inline int32_t round_clamp(float v, int32_t lo, int32_t hi) {
    if (!(v >= (float)lo)) return v != v ? 0 : lo; /* NaN: 0 (ref's (int)nearbyint path) */
    if (v > (float)hi) return hi;
    return (int32_t)lrintf(v);
}

/* 1 / d, or 0 where d is 0, below FLT_MIN (1 / d would overflow) or not finite (an
 * activation block holding a NaN or an infinity): q is then 0 (Q4_0: 8), as ref's. */
static inline float inv_scale(float d) {
    return isfinite(d) && fabsf(d) >= FLT_MIN ? 1.0f / d : 0.0f;
}

static inline float ld_scale(const uint8_t *p, bool f16) {
    if (f16) {
        uint16_t h;
        memcpy(&h, p, 2);
        return em_f16_to_f32(h);
    }
    float f;
    memcpy(&f, p, 4);
    return f;
}

/* The stored value of d (rounded to the scale dtype first), written at p. */
static inline float st_scale(uint8_t *p, float d, bool f16) {
    if (f16) {
        const uint16_t h = em_f32_to_f16(d);
        memcpy(p, &h, 2);
        return em_f16_to_f32(h);
    }
    memcpy(p, &d, 4);
    return d;
}

static size_t block_bytes(const em_quant_scheme *s) {
    const size_t sb = s->scale_dtype == EM_F16 ? 2 : 4;
    if (s->kind == EM_QK_BLOCK) return sb + (s->storage == EM_Q8 ? 32 : 16);
    return 2 * sb + 16; /* EM_QK_BLOCK_MIN */
}

/* One block of 32 f32 values into its bytes at p (ref's quantize, block kinds). */
static void quant_block(uint8_t *p, const float *x, const em_quant_scheme *s) {
    const bool f16 = s->scale_dtype == EM_F16;
    const int sb = f16 ? 2 : 4;
    if (s->kind == EM_QK_BLOCK && s->storage == EM_Q8) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
        const float d = st_scale(p, amax / 127.0f, f16), id = inv_scale(d);
        int8_t *q = (int8_t *)(p + sb);
        for (int i = 0; i < 32; i++) q[i] = (int8_t)round_clamp(x[i] * id, -127, 127);
    } else if (s->kind == EM_QK_BLOCK) { /* q4, Q4_0 */
        float v = 0, amax = 0;
        for (int i = 0; i < 32; i++)
            if (fabsf(x[i]) > amax) amax = fabsf(x[i]), v = x[i];
        const float d = st_scale(p, v / -8.0f, f16), id = inv_scale(d);
        uint8_t *q = p + sb;
        for (int i = 0; i < 16; i++) {
            /* d = 0: id = 0, q = 8 (ref's nearbyint(0) + 8) */
            const int32_t lo = round_clamp(x[i] * id, -8, 7) + 8,
                          hi = round_clamp(x[i + 16] * id, -8, 7) + 8;
            q[i] = (uint8_t)(lo | hi << 4);
        }
    } else { /* Q4_1 */
        float mn = x[0], mx = x[0];
        for (int i = 1; i < 32; i++) mn = fminf(mn, x[i]), mx = fmaxf(mx, x[i]);
        const float d = st_scale(p, (mx - mn) / 15.0f, f16), id = inv_scale(d);
        const float m = st_scale(p + sb, mn, f16);
        uint8_t *q = p + 2 * sb;
        for (int i = 0; i < 16; i++) {
            const int32_t lo = round_clamp((x[i] - m) * id, 0, 15),
                          hi = round_clamp((x[i + 16] - m) * id, 0, 15);
            q[i] = (uint8_t)(lo | hi << 4);
        }
    }
}

/* One block's 32 real values (ref's dequantize, block kinds). */
static void deq_block(float *o, const uint8_t *p, const em_quant_scheme *s) {
    const bool f16 = s->scale_dtype == EM_F16;
    const int sb = f16 ? 2 : 4;
    const float d = ld_scale(p, f16);
    if (s->kind == EM_QK_BLOCK && s->storage == EM_Q8) {
        const int8_t *q = (const int8_t *)(p + sb);
        for (int i = 0; i < 32; i++) o[i] = d * (float)q[i];
    } else if (s->kind == EM_QK_BLOCK) {
        const uint8_t *q = p + sb;
        for (int i = 0; i < 16; i++) {
            o[i] = d * (float)((q[i] & 15) - 8);
            o[i + 16] = d * (float)((q[i] >> 4) - 8);
        }
    } else {
        const float m = ld_scale(p + sb, f16);
        const uint8_t *q = p + 2 * sb;
        for (int i = 0; i < 16; i++) {
            o[i] = d * (float)(q[i] & 15) + m;
            o[i + 16] = d * (float)(q[i] >> 4) + m;
        }
    }
}

/* ---- quantize ---- */

typedef struct quant_job {
    const float *x;
    void *out;
    const em_quant_scheme *s;
    size_t bb;
    float inv;
    int32_t lo, hi;
} quant_job;

static void quant_pt_range(int64_t lo, int64_t hi, void *arg) {
    const quant_job *j = arg;
    int8_t *q = j->out;
    const int32_t zp = j->s->zero_point;
    for (int64_t i = lo; i < hi; i++) {
        /* nearbyint(x / scale) + zero_point, then the clamp: the sum stays exact in int32 */
        const float v = j->x[i] * j->inv;
        int32_t r;
        if (v != v) r = 0;
        else if (v < -300.0f) r = -300;
        else if (v > 300.0f) r = 300;
        else r = (int32_t)lrintf(v);
        r += zp;
        q[i] = (int8_t)(r < j->lo ? j->lo : r > j->hi ? j->hi : r);
    }
}

static void quant_blk_range(int64_t lo, int64_t hi, void *arg) {
    const quant_job *j = arg;
    for (int64_t b = lo; b < hi; b++)
        quant_block((uint8_t *)j->out + b * (int64_t)j->bb, j->x + 32 * b, j->s);
}

em_status cpu_quantize(void *ctx, const em_view *out, const em_view *x, const em_quant_scheme *s) {
    (void)ctx;
    if (x->dtype != EM_F32)
        return em_backend_set_error(EM_ERR_DTYPE, "cpu quantize: expected an f32 input");
    em_view xc;
    void *tmp = NULL;
    em_status st = cpu_contig_input(x, &xc, &tmp);
    if (st != EM_OK) return st;
    const int64_t n = cpu_numel(x);
    quant_job j = {.x = cpu_ptr(&xc), .out = cpu_ptr(out), .s = s};
    if (s->kind == EM_QK_AFFINE || s->kind == EM_QK_SYMMETRIC) {
        j.inv = 1.0f / s->scale;
        j.lo = s->storage == EM_Q4 ? -8 : s->kind == EM_QK_SYMMETRIC ? -127 : -128;
        j.hi = s->storage == EM_Q4 ? 7 : 127;
        cpu_parallel_for(n, 1 << 16, quant_pt_range, &j);
    } else {
        /* a block view's offset counts logical elements: its first block is offset / 32 */
        j.bb = block_bytes(s);
        j.out = (uint8_t *)out->buf + (out->offset / 32) * (int64_t)j.bb;
        cpu_parallel_for(n / 32, 1 << 11, quant_blk_range, &j);
    }
    if (tmp) cpu_scratch_free(tmp);
    return EM_OK;
}

/* ---- dequantize ---- */

typedef struct deq_job {
    const em_view *q, *out;
    const em_quant_scheme *s;
    size_t bb;
    int axis;
    int64_t rows;           /* per tensor: elements; blocks: runs along the axis */
    int64_t ostride[EM_MAX_RANK];
} deq_job;

/* Element offset (in q's view) and out index of row `i` of the dims other than `skip`. */
static void row_at(const deq_job *j, int64_t i, int skip, int64_t *qe, int64_t *oi) {
    int64_t e = j->q->offset, o = 0;
    for (int d = j->q->rank - 1; d >= 0; d--) {
        if (d == skip) continue;
        const int64_t n = j->q->shape[d], k = i % n;
        i /= n;
        e += k * j->q->strides[d];
        o += k * j->ostride[d];
    }
    *qe = e;
    *oi = o;
}

static void deq_pt_range(int64_t lo, int64_t hi, void *arg) {
    const deq_job *j = arg;
    const int8_t *q = j->q->buf;
    float *o = cpu_ptr(j->out);
    const float sc = j->s->scale;
    const int32_t zp = j->s->zero_point;
    for (int64_t i = lo; i < hi; i++) {
        int64_t e, oi;
        row_at(j, i, -1, &e, &oi);
        o[oi] = sc * (float)((int32_t)q[e] - zp);
    }
}

static void deq_blk_range(int64_t lo, int64_t hi, void *arg) {
    const deq_job *j = arg;
    const int64_t len = j->q->shape[j->axis], os = j->ostride[j->axis];
    float *o = cpu_ptr(j->out);
    float tmp[32];
    for (int64_t r = lo; r < hi; r++) {
        int64_t e, oi;
        row_at(j, r, j->axis, &e, &oi);
        const uint8_t *p = (const uint8_t *)j->q->buf + (e / 32) * (int64_t)j->bb;
        for (int64_t b = 0; b < len / 32; b++) {
            float *dst = os == 1 ? o + oi + 32 * b : tmp;
            deq_block(dst, p + b * (int64_t)j->bb, j->s);
            if (os != 1)
                for (int i = 0; i < 32; i++) o[oi + (32 * b + i) * os] = tmp[i];
        }
    }
}

em_status cpu_dequantize(void *ctx, const em_view *out, const em_view *q,
                         const em_quant_scheme *s) {
    (void)ctx;
    deq_job j = {.q = q, .out = out, .s = s};
    int64_t st = 1;
    for (int d = q->rank - 1; d >= 0; d--) j.ostride[d] = st, st *= q->shape[d];
    const int64_t n = cpu_numel(q);
    if (n == 0) return EM_OK;
    if (s->kind == EM_QK_AFFINE || s->kind == EM_QK_SYMMETRIC) {
        cpu_parallel_for(n, 1 << 15, deq_pt_range, &j);
        return EM_OK;
    }
    j.bb = block_bytes(s);
    j.axis = s->axis >= 0 && s->axis < q->rank ? s->axis : q->rank - 1;
    const int64_t rows = n / q->shape[j.axis];
    cpu_parallel_for(rows, (1 << 13) / q->shape[j.axis] + 1, deq_blk_range, &j);
    return EM_OK;
}

/* ---- qmatmul: a's rows as q8 blocks ---- */

typedef struct pack_a_job {
    const em_view *a;
    const em_quant_scheme *as;
    int64_t K, nb;
    int8_t *q;
    float *d;
    int32_t *s;
} pack_a_job;

static void pack_a_range(int64_t lo, int64_t hi, void *arg) {
    const pack_a_job *j = arg;
    const em_view *a = j->a;
    const int64_t K = j->K, nb = j->nb, sm = a->strides[0], sk = a->strides[1];
    for (int64_t r = lo; r < hi; r++) {
        int8_t *q = j->q + r * nb * 32;
        float *d = j->d + r * nb;
        int32_t *s = j->s + r * nb;
        memset(q, 0, (size_t)(nb * 32));
        if (!j->as) { /* f32: backend.h's dynamic quantization, ref's q and d */
            const float *x = (const float *)a->buf + a->offset + r * sm;
            for (int64_t b = 0; b < nb; b++) {
                const int64_t n = K - 32 * b < 32 ? K - 32 * b : 32;
                float v[32];
                for (int64_t i = 0; i < n; i++) v[i] = x[(32 * b + i) * sk];
                /* a NaN stays (d NaN), as an infinity does (d inf): q = 0 then, and the
                 * block's terms make the row's outputs NaN, as ref's */
                float amax = 0;
                for (int64_t i = 0; i < n; i++)
                    amax = isnan(v[i]) || fabsf(v[i]) > amax ? fabsf(v[i]) : amax;
                const float db = amax / 127.0f, id = inv_scale(db);
                int32_t sum = 0;
                if (id != 0)
                    for (int64_t i = 0; i < n; i++) {
                        const int32_t t = round_clamp(v[i] * id, -127, 127);
                        q[32 * b + i] = (int8_t)t;
                        sum += t;
                    }
                d[b] = db;
                s[b] = sum;
            }
        } else if (j->as->kind == EM_QK_BLOCK) { /* q8 blocks along K: copy them */
            const size_t bb = block_bytes(j->as);
            const int sb = j->as->scale_dtype == EM_F16 ? 2 : 4;
            const uint8_t *p = (const uint8_t *)a->buf + ((a->offset + r * sm) / 32) * (int64_t)bb;
            for (int64_t b = 0; b < nb; b++, p += bb) {
                d[b] = ld_scale(p, sb == 2);
                memcpy(q + 32 * b, p + sb, 32);
                int32_t sum = 0;
                for (int i = 0; i < 32; i++) sum += q[32 * b + i];
                s[b] = sum;
            }
        } else { /* per tensor int8: d = 1, the scale is applied to the whole sum */
            const int8_t *x = (const int8_t *)a->buf + a->offset + r * sm;
            for (int64_t b = 0; b < nb; b++) {
                const int64_t n = K - 32 * b < 32 ? K - 32 * b : 32;
                int32_t sum = 0;
                for (int64_t i = 0; i < n; i++) sum += q[32 * b + i] = x[(32 * b + i) * sk];
                d[b] = 1.0f;
                s[b] = sum;
            }
        }
    }
}

/* ---- qmatmul: the portable tile (4 x 4), and the driver ---- */

static inline int32_t dot8(const int8_t *a, const int8_t *b) {
    int32_t s = 0;
    for (int i = 0; i < 32; i++) s += (int32_t)a[i] * b[i];
    return s;
}

static inline int32_t dot4(const int8_t *a, const uint8_t *b) {
    int32_t s = 0;
    for (int i = 0; i < 16; i++) s += (int32_t)a[i] * (b[i] & 15) + (int32_t)a[i + 16] * (b[i] >> 4);
    return s;
}

static void tile_portable(const cpu_qa *A, int64_t r0, int nr, const cpu_qb *B, int64_t c0,
                          int nc, float *out, int64_t ldo) {
    const int64_t nb = A->nb;
    for (int r = 0; r < nr; r++) {
        const int8_t *qa = A->q + (r0 + r) * nb * 32;
        const float *da = A->d + (r0 + r) * nb;
        const int32_t *sa = A->s + (r0 + r) * nb;
        for (int c = 0; c < nc; c++) {
            const uint8_t *col = B->base + (c0 + c) * B->cstride;
            float acc = 0;
            switch (B->fmt) {
            case CPU_QB_Q8:
                for (int64_t j = 0; j < nb; j++) {
                    const uint8_t *p = col + j * B->bstride;
                    const float db = ld_scale(p, B->f16);
                    acc += da[j] * db * (float)dot8(qa + 32 * j, (const int8_t *)(p + B->qofs));
                }
                break;
            case CPU_QB_PT:
                for (int64_t j = 0; j < nb; j++) {
                    const int32_t S = dot8(qa + 32 * j, (const int8_t *)(col + j * B->bstride));
                    acc += da[j] * B->scale * (float)(S - B->zp * sa[j]);
                }
                break;
            case CPU_QB_Q4:
                for (int64_t j = 0; j < nb; j++) {
                    const uint8_t *p = col + j * B->bstride;
                    const float db = ld_scale(p, B->f16);
                    acc += da[j] * db * (float)(dot4(qa + 32 * j, p + B->qofs) - 8 * sa[j]);
                }
                break;
            default: /* CPU_QB_Q4M */
                for (int64_t j = 0; j < nb; j++) {
                    const uint8_t *p = col + j * B->bstride;
                    const float db = ld_scale(p, B->f16), mb = ld_scale(p + (B->f16 ? 2 : 4), B->f16);
                    acc += da[j] * db * (float)dot4(qa + 32 * j, p + B->qofs) + da[j] * mb * (float)sa[j];
                }
                break;
            }
            out[r * ldo + c] = acc;
        }
    }
}

typedef struct qmm_job {
    const cpu_qa *A;
    const cpu_qb *B;
    cpu_qtile t;
    float *out;
    int64_t M, N, mb, nct;
    float post;
} qmm_job;

static void qmm_range(int64_t lo, int64_t hi, void *arg) {
    const qmm_job *j = arg;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t rb = u / j->nct, ct = u % j->nct;
        const int64_t r1 = (rb + 1) * j->mb < j->M ? (rb + 1) * j->mb : j->M;
        const int64_t c0 = ct * j->t.nc;
        const int nc = (int)(j->N - c0 < j->t.nc ? j->N - c0 : j->t.nc);
        for (int64_t r = rb * j->mb; r < r1; r += j->t.mr) {
            const int nr = (int)(r1 - r < j->t.mr ? r1 - r : j->t.mr);
            float *o = j->out + r * j->N + c0;
            j->t.fn(j->A, r, nr, j->B, c0, nc, o, j->N);
            if (j->post != 1.0f)
                for (int i = 0; i < nr; i++)
                    for (int c = 0; c < nc; c++) o[i * j->N + c] *= j->post;
        }
    }
}

typedef struct repack_job {
    const em_view *b;
    int64_t K, kp;
    int8_t *dst;
} repack_job;

static void repack_range(int64_t lo, int64_t hi, void *arg) {
    const repack_job *j = arg;
    const int8_t *src = (const int8_t *)j->b->buf + j->b->offset;
    for (int64_t n = lo; n < hi; n++) {
        int8_t *d = j->dst + n * j->kp;
        const int8_t *s = src + n * j->b->strides[1];
        for (int64_t k = 0; k < j->K; k++) d[k] = s[k * j->b->strides[0]];
        memset(d + j->K, 0, (size_t)(j->kp - j->K));
    }
}

/* Case (2): b's blocks run along N. Rows of b are dequantized a panel at a time (never all
 * of b) and multiplied in f32 by cpu_gemm, accumulating into out. */
typedef struct deq_rows_job {
    const em_view *b;
    const em_quant_scheme *bs;
    size_t bb;
    int64_t k0, N;
    float *dst;
} deq_rows_job;

static void deq_rows_range(int64_t lo, int64_t hi, void *arg) {
    const deq_rows_job *j = arg;
    for (int64_t k = lo; k < hi; k++) {
        const int64_t e = j->b->offset + (j->k0 + k) * j->b->strides[0];
        const uint8_t *p = (const uint8_t *)j->b->buf + (e / 32) * (int64_t)j->bb;
        for (int64_t c = 0; c < j->N / 32; c++)
            deq_block(j->dst + k * j->N + 32 * c, p + c * (int64_t)j->bb, j->bs);
    }
}

static em_status qmatmul_along_n(const em_view *out, const em_view *a, const em_view *b,
                                 const em_quant_scheme *bs) {
    const int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1];
    em_view ac;
    void *atmp = NULL;
    em_status st = cpu_contig_input(a, &ac, &atmp);
    if (st != EM_OK) return st;
    int64_t kc = (1 << 18) / N; /* a panel of about 1 MiB of f32 */
    if (kc < 8) kc = 8;
    if (kc > K) kc = K;
    float *panel = cpu_scratch((size_t)(kc * N) * sizeof(float));
    if (!panel) {
        if (atmp) cpu_scratch_free(atmp);
        return em_backend_set_error(EM_ERR_NOMEM, "cpu qmatmul: out of memory");
    }
    const float *ap = cpu_ptr(&ac);
    for (int64_t k0 = 0; k0 < K; k0 += kc) {
        const int64_t n = K - k0 < kc ? K - k0 : kc;
        deq_rows_job dj = {.b = b, .bs = bs, .bb = block_bytes(bs), .k0 = k0, .N = N, .dst = panel};
        cpu_parallel_for(n, 1, deq_rows_range, &dj);
        cpu_gemm(EM_F32, CblasNoTrans, CblasNoTrans, M, N, n, ap + k0, K, panel, N,
                 k0 == 0 ? 0.0 : 1.0, cpu_ptr(out), N);
    }
    cpu_scratch_free(panel);
    if (atmp) cpu_scratch_free(atmp);
    return EM_OK;
}

em_status cpu_qmatmul(void *ctx, const em_view *out, const em_view *a, const em_quant_scheme *as,
                      const em_view *b, const em_quant_scheme *bs) {
    (void)ctx;
    const bool bblock = bs->kind == EM_QK_BLOCK || bs->kind == EM_QK_BLOCK_MIN;
    if (bblock && bs->axis == 1) {
        if (as) return em_backend_set_error(EM_ERR_UNSUPPORTED, "cpu qmatmul: a quantized a "
                                            "with b's blocks along N");
        return qmatmul_along_n(out, a, b, bs);
    }
    const int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1], nb = (K + 31) / 32;
    const int64_t kp = nb * 32;
    /* scratch: a's q, d and s, and a per-tensor b's int8 columns when they need a copy */
    cpu_qb B = {.scale = bs->scale, .zp = bs->zero_point};
    bool repack = false;
    if (bblock) {
        const size_t bb = block_bytes(bs);
        B.fmt = bs->storage == EM_Q8 ? CPU_QB_Q8 : bs->kind == EM_QK_BLOCK ? CPU_QB_Q4 : CPU_QB_Q4M;
        B.f16 = bs->scale_dtype == EM_F16;
        B.base = (const uint8_t *)b->buf + (b->offset / 32) * (int64_t)bb;
        B.cstride = N > 1 ? (b->strides[1] / 32) * (int64_t)bb : 0;
        B.bstride = (int64_t)bb;
        B.qofs = (B.f16 ? 2 : 4) * (B.fmt == CPU_QB_Q4M ? 2 : 1);
    } else {
        B.fmt = CPU_QB_PT;
        B.has_m128 = bs->kind == EM_QK_AFFINE && bs->storage == EM_Q8;
        B.bstride = 32;
        repack = !(b->strides[0] == 1 && K % 32 == 0);
        if (!repack) {
            B.base = (const uint8_t *)b->buf + b->offset;
            B.cstride = N > 1 ? b->strides[1] : 0;
        } else {
            B.cstride = kp;
        }
    }
    const size_t qbytes = (size_t)(M * kp), dbytes = (size_t)(M * nb) * sizeof(float);
    const size_t rbytes = repack ? (size_t)(N * kp) : 0;
    uint8_t *scr = cpu_scratch(qbytes + 2 * dbytes + rbytes + 64);
    if (!scr) return em_backend_set_error(EM_ERR_NOMEM, "cpu qmatmul: out of memory");
    pack_a_job pj = {.a = a, .as = as, .K = K, .nb = nb, .q = (int8_t *)scr,
                     .d = (float *)(scr + qbytes), .s = (int32_t *)(scr + qbytes + dbytes)};
    cpu_parallel_for(M, 16, pack_a_range, &pj);
    if (repack) {
        repack_job rj = {.b = b, .K = K, .kp = kp, .dst = (int8_t *)(scr + qbytes + 2 * dbytes)};
        cpu_parallel_for(N, 64, repack_range, &rj);
        B.base = (const uint8_t *)rj.dst;
    }
    const cpu_qa A = {.nb = nb, .q = pj.q, .d = pj.d, .s = pj.s};
    qmm_job j = {.A = &A, .B = &B, .out = cpu_ptr(out), .M = M, .N = N,
                 .post = as && as->kind != EM_QK_BLOCK ? as->scale : 1.0f};
    const int level = cpu_quant_level();
    if (level == CPU_QL_PORTABLE || !cpu_qtile_x86(level, &j.t) ||
        (level == CPU_QL_AVX2 && B.has_m128))
        j.t = (cpu_qtile){tile_portable, 4, 4};
    /* rows in blocks that stay in L2 (about 256 KiB of a's bytes) while the columns stream */
    j.mb = (1 << 18) / kp;
    if (j.mb < j.t.mr) j.mb = j.t.mr;
    j.mb -= j.mb % j.t.mr;
    if (j.mb > M) j.mb = M;
    j.nct = (N + j.t.nc - 1) / j.t.nc;
    const int64_t units = ((M + j.mb - 1) / j.mb) * j.nct;
    cpu_parallel_for(units, 1, qmm_range, &j);
    cpu_scratch_free(scr);
    return EM_OK;
}
