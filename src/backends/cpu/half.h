/*
 * half.h — f16 and bf16 to and from f32 over blocks of elements, for the per-level kernels
 * that run f16/bf16 tensors through their f32 loops (convert a block to f32, compute, convert
 * back). The results are those of em_f16_to_f32 / em_f32_to_f16 / em_bf16_to_f32 /
 * em_f32_to_bf16 bit for bit (round to nearest even, NaN stays NaN), but for one thing: F16C
 * quiets a signaling f16 NaN (sets its top mantissa bit) where em_f16_to_f32 keeps it:
 *   - f16: F16C's vcvtph2ps / vcvtps2ph where the level has it (avx2 and up), else the
 *     scalar conversions;
 *   - bf16: plain integer arithmetic that GCC vectorizes at every level.
 * CPU_HALF_BLOCK elements is the block size the kernels use for their f32 scratch on the
 * stack (4 KiB of floats: stays in L1).
 */
#ifndef EMBER_CPU_HALF_H
#define EMBER_CPU_HALF_H

#include <stdint.h>
#include <string.h>

#include "ember/ember.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

#define CPU_HALF_BLOCK 1024

static inline void cpu_f16_to_f32_n(float *restrict o, const uint16_t *restrict x, int64_t n) {
    int64_t i = 0;
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(o + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
#endif
    for (; i < n; i++) o[i] = em_f16_to_f32(x[i]);
}

static inline void cpu_f32_to_f16_n(uint16_t *restrict o, const float *restrict x, int64_t n) {
    int64_t i = 0;
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(o + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < n; i++) o[i] = em_f32_to_f16(x[i]);
}

static inline void cpu_bf16_to_f32_n(float *restrict o, const uint16_t *restrict x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)x[i] << 16;
        memcpy(&o[i], &u, sizeof u);
    }
}

static inline void cpu_f32_to_bf16_n(uint16_t *restrict o, const float *restrict x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        uint32_t q = (u >> 16) | 0x40u; /* NaN: quiet, as em_f32_to_bf16 */
        o[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
    }
}

/** x (f16 when dt is EM_F16, else bf16) to f32. */
static inline void cpu_half_to_f32_n(em_dtype dt, float *restrict o, const uint16_t *restrict x,
                                     int64_t n) {
    if (dt == EM_F16) cpu_f16_to_f32_n(o, x, n);
    else cpu_bf16_to_f32_n(o, x, n);
}

/** f32 to f16 (dt EM_F16) or bf16. */
static inline void cpu_f32_to_half_n(em_dtype dt, uint16_t *restrict o, const float *restrict x,
                                     int64_t n) {
    if (dt == EM_F16) cpu_f32_to_f16_n(o, x, n);
    else cpu_f32_to_bf16_n(o, x, n);
}

static inline int cpu_is_half(em_dtype dt) { return dt == EM_F16 || dt == EM_BF16; }

#endif /* EMBER_CPU_HALF_H */
