/* quant_x86.c — qmatmul's int8 tiles for x86 (quant.h): avx512vnni, avxvnni and avx2.
 *
 * Compiled once with the baseline flags; each tile carries its instruction set as a target
 * attribute (as pool_avx512.c does), and quant.c calls it only when the CPU has it.
 *
 * The product of u8 by s8 (vpdpbusd, vpmaddubsw) needs one unsigned operand:
 *   - q4 weights are unsigned already (nibbles in [0, 15]): they are the u8 side, a's q8 the
 *     s8 side, and Q4_0's - 8 is a correction (backend.h's S - 8 * sum(q_a));
 *   - q8 weights, with VNNI: b xor 0x80 = b + 128 is the u8 side, and the correction is
 *     - 128 * sum(q_a): exact for every byte (a per-tensor b's zero point joins it);
 *   - q8 weights, avx2 (vpmaddubsw saturates its 16-bit pair sums): |a| as u8 and b with a's
 *     sign as s8, as ggml does; exact while b has no -128 (q8 blocks and symmetric stop at
 *     -127; a per-tensor affine q8 b goes to the portable tile instead).
 * A correction is applied lane by lane (each int32 lane holds the sum of 4 products, and
 * gets - off times the sum of its 4 q_a, one vpdpbusd of ones by a per row and block, shared
 * by the columns), so that every lane holds its exact share of S: the f32 sum of the scaled
 * lanes then rounds like a sum of the true terms (a correction in one lane would leave the
 * others inflated by off * q_a, and a zero weight column would no longer give exactly 0).
 *
 * avx512vnni: 4 rows x 8 columns, a zmm holding one block of two columns (lanes 0-7 and
 * 8-15) against a's block broadcast to both halves; per block and row, the int32 sums are
 * converted and scaled into f32 accumulators (d_a * d_b per lane), summed across lanes once at
 * the end. avx2 / avxvnni: 4 rows x 2 columns, a ymm per block. */
#include <string.h>

#include "quant.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define T256V __attribute__((target("avxvnni,avx2,fma,f16c")))
#define T256 __attribute__((target("avx2,fma,f16c")))
/* avx512vnni's tile: 4 rows by T512_NP pairs of columns (4: 1.1x the speed of 2, in L1, one
 * thread; 24 accumulators and weight registers of the 32) */
#define T512_NP 4
#define INL inline __attribute__((always_inline))
/* the tiles' loops over rows and columns, unrolled whole: their accumulators then live in
 * registers (an array of vectors indexed in a loop stays on the stack) */
#define UNROLL _Pragma("GCC unroll 16")

/* ---- avx512vnni ---- */

static INL T512 float sc512(const uint8_t *p, bool f16) {
    if (f16) {
        uint16_t h;
        memcpy(&h, p, 2);
        return _cvtsh_ss(h);
    }
    float f;
    memcpy(&f, p, 4);
    return f;
}

static INL T512 float hsum256_512(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));
    return _mm_cvtss_f32(x);
}

static INL T512 void t512(const cpu_qa *A, int64_t r0, int nr, const cpu_qb *B, int64_t c0,
                          int nc, float *out, int64_t ldo, const int fmt, const bool f16,
                          const int MR) {
    enum { NP = T512_NP };
    const int64_t nb = A->nb, bs = B->bstride;
    const int qofs = B->qofs, sb = f16 ? 2 : 4;
    /* missing rows and columns repeat the last one: computed, never stored */
    const int8_t *qa[4];
    const float *da[4];
    const int32_t *sa[4];
    UNROLL
    for (int r = 0; r < MR; r++) {
        const int64_t rr = r0 + (r < nr ? r : nr - 1);
        qa[r] = A->q + rr * nb * 32;
        da[r] = A->d + rr * nb;
        sa[r] = A->s + rr * nb;
    }
    const uint8_t *col[2 * NP];
    UNROLL
    for (int c = 0; c < 2 * NP; c++) col[c] = B->base + (c0 + (c < nc ? c : nc - 1)) * B->cstride;
    const int32_t off = fmt == CPU_QB_Q8 ? 128 : fmt == CPU_QB_PT ? 128 + B->zp
                        : fmt == CPU_QB_Q4 ? 8 : 0;
    const __m512i x80 = _mm512_set1_epi8((char)0x80), m0f = _mm512_set1_epi8(0x0f);
    const __m512i ones = _mm512_set1_epi8(1), noff = _mm512_set1_epi32(-off);
    const __m512 pts = _mm512_set1_ps(B->scale);
    __m512 acc[4][NP];
    UNROLL
    for (int r = 0; r < MR; r++)
        UNROLL
        for (int p = 0; p < NP; p++) acc[r][p] = _mm512_setzero_ps();
    for (int64_t j = 0; j < nb; j++) {
        __m512i bq[NP];
        __m512 bd[NP], bm[NP];
        UNROLL
        for (int p = 0; p < NP; p++) {
            const uint8_t *p0 = col[2 * p] + j * bs, *p1 = col[2 * p + 1] + j * bs;
            if (fmt == CPU_QB_Q8 || fmt == CPU_QB_PT) {
                const __m512i z = _mm512_inserti64x4(
                    _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(p0 + qofs))),
                    _mm256_loadu_si256((const __m256i *)(p1 + qofs)), 1);
                bq[p] = _mm512_xor_si512(z, x80);
            } else {
                /* [c0's 16 bytes | c1's]: low nibbles are elements 0-15, high ones 16-31 */
                const __m256i v = _mm256_inserti128_si256(
                    _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p0 + qofs))),
                    _mm_loadu_si128((const __m128i *)(p1 + qofs)), 1);
                const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(v),
                                                     _mm256_srli_epi16(v, 4), 1);
                /* lanes c0 lo, c1 lo, c0 hi, c1 hi -> c0 lo, c0 hi, c1 lo, c1 hi */
                bq[p] = _mm512_and_si512(_mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0)), m0f);
            }
            if (fmt == CPU_QB_PT) bd[p] = pts;
            else
                bd[p] = _mm512_insertf32x8(_mm512_set1_ps(sc512(p0, f16)),
                                           _mm256_set1_ps(sc512(p1, f16)), 1);
            if (fmt == CPU_QB_Q4M) /* m's term once a column: lanes 0 and 8 */
                bm[p] = _mm512_maskz_mov_ps(0x0101, _mm512_insertf32x8(
                    _mm512_set1_ps(sc512(p0 + sb, f16)), _mm256_set1_ps(sc512(p1 + sb, f16)), 1));
            else
                bm[p] = _mm512_setzero_ps();
        }
        UNROLL
        for (int r = 0; r < MR; r++) {
            const __m512i av =
                _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qa[r] + 32 * j)));
            const __m512 dav = _mm512_set1_ps(da[r][j]);
            __m512i ci = _mm512_setzero_si512();
            if (off) {
                const __m512i ls = _mm512_dpbusd_epi32(ci, ones, av); /* 4 q_a a lane */
                ci = fmt == CPU_QB_Q8   ? _mm512_sub_epi32(ci, _mm512_slli_epi32(ls, 7))
                     : fmt == CPU_QB_Q4 ? _mm512_sub_epi32(ci, _mm512_slli_epi32(ls, 3))
                                        : _mm512_mullo_epi32(ls, noff);
            }
            UNROLL
            for (int p = 0; p < NP; p++) {
                const __m512i s = _mm512_dpbusd_epi32(ci, bq[p], av);
                acc[r][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dav, bd[p]),
                                            acc[r][p]);
                if (fmt == CPU_QB_Q4M)
                    acc[r][p] = _mm512_fmadd_ps(_mm512_set1_ps(da[r][j] * (float)sa[r][j]),
                                                bm[p], acc[r][p]);
            }
        }
    }
    UNROLL
    for (int r = 0; r < nr; r++)
        UNROLL
        for (int p = 0; p < NP; p++) {
            const int c = 2 * p;
            if (c < nc) out[r * ldo + c] = hsum256_512(_mm512_castps512_ps256(acc[r][p]));
            if (c + 1 < nc) out[r * ldo + c + 1] = hsum256_512(_mm512_extractf32x8_ps(acc[r][p], 1));
        }
}

/* The rows of a call: 1 or 2 as they are (m = 1 computes one row, not four), else 4. */
#define T512_ROWS(FMT, F16)                                                                     \
    (nr == 1   ? t512(A, r0, nr, B, c0, nc, out, ldo, FMT, F16, 1)                                \
     : nr == 2 ? t512(A, r0, nr, B, c0, nc, out, ldo, FMT, F16, 2)                                \
               : t512(A, r0, nr, B, c0, nc, out, ldo, FMT, F16, 4))

static T512 void tile512(const cpu_qa *A, int64_t r0, int nr, const cpu_qb *B, int64_t c0,
                         int nc, float *out, int64_t ldo) {
    switch (B->fmt * 2 + B->f16) {
    case CPU_QB_Q8 * 2: T512_ROWS(CPU_QB_Q8, false); break;
    case CPU_QB_Q8 * 2 + 1: T512_ROWS(CPU_QB_Q8, true); break;
    case CPU_QB_Q4 * 2: T512_ROWS(CPU_QB_Q4, false); break;
    case CPU_QB_Q4 * 2 + 1: T512_ROWS(CPU_QB_Q4, true); break;
    case CPU_QB_Q4M * 2: T512_ROWS(CPU_QB_Q4M, false); break;
    case CPU_QB_Q4M * 2 + 1: T512_ROWS(CPU_QB_Q4M, true); break;
    default: T512_ROWS(CPU_QB_PT, false); break;
    }
}

/* ---- avxvnni and avx2: one body, the dot product chosen by `vnni` ---- */

#define T256_BODY(TGT, NAME, VNNI_DOT)                                                          \
    static INL TGT float NAME##_sc(const uint8_t *p, bool f16) {                                \
        if (f16) {                                                                              \
            uint16_t h;                                                                         \
            memcpy(&h, p, 2);                                                                   \
            return _cvtsh_ss(h);                                                                \
        }                                                                                       \
        float f;                                                                                \
        memcpy(&f, p, 4);                                                                       \
        return f;                                                                               \
    }                                                                                           \
    static INL TGT void NAME##_body(const cpu_qa *A, int64_t r0, int nr, const cpu_qb *B,       \
                                    int64_t c0, int nc, float *out, int64_t ldo, const int fmt, \
                                    const bool f16, const int MR) {                             \
        enum { NC = 2 };                                                                        \
        const bool vnni = VNNI_DOT;                                                             \
        const int64_t nb = A->nb, bs = B->bstride;                                              \
        const int qofs = B->qofs, sb = f16 ? 2 : 4;                                             \
        const int8_t *qa[4];                                                                    \
        const float *da[4];                                                                     \
        const int32_t *sa[4];                                                                   \
        for (int r = 0; r < MR; r++) {                                                          \
            const int64_t rr = r0 + (r < nr ? r : nr - 1);                                      \
            qa[r] = A->q + rr * nb * 32;                                                        \
            da[r] = A->d + rr * nb;                                                             \
            sa[r] = A->s + rr * nb;                                                             \
        }                                                                                       \
        const uint8_t *col[NC];                                                                 \
        for (int c = 0; c < NC; c++) col[c] = B->base + (c0 + (c < nc ? c : nc - 1)) * B->cstride; \
        const bool q8 = fmt == CPU_QB_Q8 || fmt == CPU_QB_PT;                                   \
        const int32_t off = fmt == CPU_QB_Q4 ? 8 : fmt == CPU_QB_Q4M ? 0                        \
                            : (vnni ? 128 : 0) + (fmt == CPU_QB_PT ? B->zp : 0);                \
        const __m256i x80 = _mm256_set1_epi8((char)0x80), m0f = _mm256_set1_epi8(0x0f);         \
        const __m256i one16 = _mm256_set1_epi16(1), ones = _mm256_set1_epi8(1);                 \
        const __m256i noff = _mm256_set1_epi32(-off);                                           \
        __m256 acc[4][NC];                                                                      \
        float ext[4][NC];                                                                       \
        for (int r = 0; r < MR; r++)                                                            \
            for (int c = 0; c < NC; c++) acc[r][c] = _mm256_setzero_ps(), ext[r][c] = 0;        \
        for (int64_t j = 0; j < nb; j++) {                                                      \
            __m256i bq[NC];                                                                     \
            float bd[NC], bm[NC];                                                               \
            for (int c = 0; c < NC; c++) {                                                      \
                const uint8_t *p = col[c] + j * bs;                                             \
                if (q8) {                                                                       \
                    const __m256i x = _mm256_loadu_si256((const __m256i *)(p + qofs));          \
                    bq[c] = vnni ? _mm256_xor_si256(x, x80) : x;                                \
                } else {                                                                        \
                    const __m128i h = _mm_loadu_si128((const __m128i *)(p + qofs));             \
                    bq[c] = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(h, 4), h), m0f);   \
                }                                                                               \
                bd[c] = fmt == CPU_QB_PT ? B->scale : NAME##_sc(p, f16);                        \
                bm[c] = fmt == CPU_QB_Q4M ? NAME##_sc(p + sb, f16) : 0.0f;                      \
            }                                                                                   \
            for (int r = 0; r < MR; r++) {                                                      \
                const __m256i av = _mm256_loadu_si256((const __m256i *)(qa[r] + 32 * j));       \
                const __m256i ua = _mm256_abs_epi8(av);                                         \
                const float d = da[r][j];                                                       \
                __m256i ci = _mm256_setzero_si256();                                            \
                if (off) { /* - off times each lane's 4 q_a (see the top) */                    \
                    const __m256i ls = vnni ? NAME##_dot(ci, ones, av)                          \
                        : _mm256_madd_epi16(_mm256_maddubs_epi16(ones, av), one16);             \
                    ci = _mm256_mullo_epi32(ls, noff);                                          \
                }                                                                               \
                for (int c = 0; c < NC; c++) {                                                  \
                    __m256i s;                                                                  \
                    if (vnni) s = NAME##_dot(ci, bq[c], av);                                    \
                    else if (q8)                                                                \
                        s = _mm256_add_epi32(ci, _mm256_madd_epi16(                             \
                            _mm256_maddubs_epi16(ua, _mm256_sign_epi8(bq[c], av)), one16));     \
                    else                                                                        \
                        s = _mm256_add_epi32(                                                   \
                            ci, _mm256_madd_epi16(_mm256_maddubs_epi16(bq[c], av), one16));     \
                    acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * bd[c]), \
                                                acc[r][c]);                                     \
                    if (fmt == CPU_QB_Q4M) ext[r][c] += d * bm[c] * (float)sa[r][j];            \
                }                                                                               \
            }                                                                                   \
        }                                                                                       \
        for (int r = 0; r < nr; r++)                                                            \
            for (int c = 0; c < nc; c++) {                                                      \
                __m128 x = _mm_add_ps(_mm256_castps256_ps128(acc[r][c]),                        \
                                      _mm256_extractf128_ps(acc[r][c], 1));                     \
                x = _mm_add_ps(x, _mm_movehl_ps(x, x));                                         \
                x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));                                     \
                out[r * ldo + c] = _mm_cvtss_f32(x) + ext[r][c];                                \
            }                                                                                   \
    }                                                                                           \
    /* as T512_ROWS */                                                                          \
    static TGT void NAME(const cpu_qa *A, int64_t r0, int nr, const cpu_qb *B, int64_t c0,     \
                         int nc, float *out, int64_t ldo) {                                     \
        switch (B->fmt * 2 + B->f16) {                                                          \
        case CPU_QB_Q8 * 2: NAME##_rows(CPU_QB_Q8, false); break;                                  \
        case CPU_QB_Q8 * 2 + 1: NAME##_rows(CPU_QB_Q8, true); break;                               \
        case CPU_QB_Q4 * 2: NAME##_rows(CPU_QB_Q4, false); break;                                  \
        case CPU_QB_Q4 * 2 + 1: NAME##_rows(CPU_QB_Q4, true); break;                               \
        case CPU_QB_Q4M * 2: NAME##_rows(CPU_QB_Q4M, false); break;                                \
        case CPU_QB_Q4M * 2 + 1: NAME##_rows(CPU_QB_Q4M, true); break;                             \
        default: NAME##_rows(CPU_QB_PT, false); break;                                             \
        }                                                                                       \
    }

static INL T256V __m256i tile_vnni256_dot(__m256i acc, __m256i u, __m256i s) {
    return _mm256_dpbusd_avx_epi32(acc, u, s);
}
static INL T256 __m256i tile_avx2_dot(__m256i acc, __m256i u, __m256i s) {
    (void)u;
    (void)s;
    return acc; /* not used: the avx2 tile has no VNNI */
}

#define NAME_ROWS_(NAME, FMT, F16)                                                              \
    (nr == 1   ? NAME##_body(A, r0, nr, B, c0, nc, out, ldo, FMT, F16, 1)                         \
     : nr == 2 ? NAME##_body(A, r0, nr, B, c0, nc, out, ldo, FMT, F16, 2)                         \
               : NAME##_body(A, r0, nr, B, c0, nc, out, ldo, FMT, F16, 4))
#define tile_vnni256_rows(FMT, F16) NAME_ROWS_(tile_vnni256, FMT, F16)
#define tile_avx2_rows(FMT, F16) NAME_ROWS_(tile_avx2, FMT, F16)

T256_BODY(T256V, tile_vnni256, true)
T256_BODY(T256, tile_avx2, false)

bool cpu_qtile_x86(int level, cpu_qtile *t) {
    switch (level) {
    case CPU_QL_AVX512VNNI: *t = (cpu_qtile){tile512, 4, 2 * T512_NP}; return true;
    case CPU_QL_AVXVNNI: *t = (cpu_qtile){tile_vnni256, 4, 2}; return true;
    case CPU_QL_AVX2: *t = (cpu_qtile){tile_avx2, 4, 2}; return true;
    default: return false;
    }
}

#else
bool cpu_qtile_x86(int level, cpu_qtile *t) {
    (void)level;
    (void)t;
    return false;
}
#endif
