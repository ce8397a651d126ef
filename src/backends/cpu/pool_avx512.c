/* pool_avx512.c — 2x2 / stride 2 max pooling with indices for f32, 16 outputs a step with
 * AVX-512 (the pooling of small CNNs: rows of 7 or 14 outputs, which the compiler's loops
 * leave mostly to scalar tails). Masked loads and stores handle any row length. The rule is
 * nn.c's (and ref's): taps in row-major order, a tap wins when it is greater or NaN, ties
 * keep the first. Used when the cpu backend runs its avx512 level (isa.c); elsewhere (a lower
 * level, not x86-64) the caller's loops run instead. */
#include "cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

typedef struct mp2_job {
    float *out;
    int64_t *idx;
    const float *x;
    int64_t H, W, OH, OW;
} mp2_job;

/* One output row: r0, r1 the two input rows, rb the plane index of r0[0]. */
__attribute__((target("avx512f"))) static void mp2_row(float *o, int64_t *oi, const float *r0,
                                                       const float *r1, int64_t OW, int64_t rb,
                                                       int64_t W) {
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28,
                                         30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29,
                                         31);
    const __m512i lane_lo = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14);
    const __m512i lane_hi = _mm512_setr_epi64(16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i one = _mm512_set1_epi32(1), two64 = _mm512_set1_epi64(2);
    for (int64_t ox = 0; ox < OW; ox += 16) {
        const int64_t n = OW - ox < 16 ? OW - ox : 16, m = 2 * n;
        const __mmask16 mlo = (__mmask16)(m >= 16 ? 0xffffu : (1u << m) - 1u);
        const __mmask16 mhi = (__mmask16)(m <= 16 ? 0u : m >= 32 ? 0xffffu : (1u << (m - 16)) - 1u);
        const __mmask16 mo = (__mmask16)(n >= 16 ? 0xffffu : (1u << n) - 1u);
        const float *p0 = r0 + 2 * ox, *p1 = r1 + 2 * ox;
        __m512 l0 = _mm512_maskz_loadu_ps(mlo, p0), h0 = _mm512_maskz_loadu_ps(mhi, p0 + 16);
        __m512 l1 = _mm512_maskz_loadu_ps(mlo, p1), h1 = _mm512_maskz_loadu_ps(mhi, p1 + 16);
        __m512 b = _mm512_permutex2var_ps(l0, ev, h0); /* tap 0 wins over -inf unless -inf */
        __m512 taps[3] = {_mm512_permutex2var_ps(l0, od, h0), _mm512_permutex2var_ps(l1, ev, h1),
                          _mm512_permutex2var_ps(l1, od, h1)};
        __m512i k = _mm512_setzero_si512();
        for (int t = 0; t < 3; t++) {
            const __m512 v = taps[t];
            const __mmask16 take =
                _mm512_cmp_ps_mask(v, b, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
            b = _mm512_mask_mov_ps(b, take, v);
            k = _mm512_mask_mov_epi32(k, take, _mm512_set1_epi32(t + 1));
        }
        _mm512_mask_storeu_ps(o + ox, mo, b);
        /* index = rb + 2 (ox + lane) + (k & 1) + (k >= 2 ? W : 0), in 64 bits */
        const __m512i kc = _mm512_and_si512(k, one);
        const __m512i base = _mm512_set1_epi64(rb + 2 * ox);
        __m512i klo = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(k));
        __m512i khi = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(k, 1));
        __m512i ilo = _mm512_add_epi64(_mm512_add_epi64(base, lane_lo),
                                       _mm512_cvtepi32_epi64(_mm512_castsi512_si256(kc)));
        __m512i ihi = _mm512_add_epi64(_mm512_add_epi64(base, lane_hi),
                                       _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(kc, 1)));
        const __m512i w = _mm512_set1_epi64(W);
        ilo = _mm512_mask_add_epi64(ilo, _mm512_cmp_epi64_mask(klo, two64, _MM_CMPINT_NLT), ilo, w);
        ihi = _mm512_mask_add_epi64(ihi, _mm512_cmp_epi64_mask(khi, two64, _MM_CMPINT_NLT), ihi, w);
        _mm512_mask_storeu_epi64(oi + ox, (__mmask8)(mo & 0xffu), ilo);
        _mm512_mask_storeu_epi64(oi + ox + 8, (__mmask8)(mo >> 8), ihi);
    }
}

static void mp2_range(int64_t lo, int64_t hi, void *arg) {
    const mp2_job *j = arg;
    const int64_t in = j->H * j->W, on = j->OH * j->OW;
    for (int64_t p = lo; p < hi; p++)
        for (int64_t oy = 0; oy < j->OH; oy++) {
            const float *r0 = j->x + p * in + 2 * oy * j->W;
            mp2_row(j->out + p * on + oy * j->OW, j->idx + p * on + oy * j->OW, r0, r0 + j->W,
                    j->OW, 2 * oy * j->W, j->W);
        }
}

bool cpu_maxpool2x2_f32(float *out, int64_t *idx, const float *x, int64_t planes, int64_t H,
                        int64_t W, int64_t OH, int64_t OW) {
    if (cpu_isa() < CPU_ISA_AVX512) return false;
    mp2_job j = {out, idx, x, H, W, OH, OW};
    int64_t grain = (1 << 15) / (H * W > 0 ? H * W : 1) + 1;
    cpu_parallel_for(planes, grain, mp2_range, &j);
    return true;
}
#else
bool cpu_maxpool2x2_f32(float *out, int64_t *idx, const float *x, int64_t planes, int64_t H,
                        int64_t W, int64_t OH, int64_t OW) {
    (void)out, (void)idx, (void)x, (void)planes, (void)H, (void)W, (void)OH, (void)OW;
    return false;
}
#endif
