/*
 * vmath.h — a vectorizable expf for the cpu backend's loops: plain arithmetic and bit
 * operations only, so GCC turns loops over it into AVX2 / AVX-512 code (libm's expf is a
 * call per element). Cephes' polynomial: about 1 ulp on the finite range; inf above
 * 88.72, 0 below -103.9, NaN stays NaN.
 */
#ifndef EMBER_CPU_VMATH_H
#define EMBER_CPU_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* a*b + c: one FMA instruction where the target has one; on x86-64 without FMA (the portable
 * level) fmaf is a slow library call, so there the product is rounded first (the Cody-Waite
 * split below keeps n * 0.693359375 exact either way). */
#if defined(__x86_64__) && !defined(__FMA__)
#define CPU_FMAF(a, b, c) ((a) * (b) + (c))
#else
#define CPU_FMAF(a, b, c) fmaf((a), (b), (c))
#endif

/* rintf(v) for |v| <= 2^22 in the default rounding mode: an instruction from SSE4.1 on, a
 * library call on baseline x86-64, where adding and removing 1.5 * 2^23 rounds the same way. */
#if defined(__x86_64__) && !defined(__SSE4_1__)
#define CPU_RINTF(v) (((v) + 12582912.0f) - 12582912.0f)
#else
#define CPU_RINTF(v) rintf(v)
#endif

static inline float cpu_expf(float x) {
    float xc = x < -87.33654f ? -87.33654f : x;
    xc = xc > 88.37626f ? 88.37626f : xc;
    xc = x != x ? 0.0f : xc; /* NaN: computed on 0, answered below */
    float n = CPU_RINTF(xc * 1.44269504088896341f);
    float r = CPU_FMAF(n, -0.693359375f, xc);
    r = CPU_FMAF(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = CPU_FMAF(p, r, 1.3981999507e-3f);
    p = CPU_FMAF(p, r, 8.3334519073e-3f);
    p = CPU_FMAF(p, r, 4.1665795894e-2f);
    p = CPU_FMAF(p, r, 1.6666665459e-1f);
    p = CPU_FMAF(p, r, 5.0000001201e-1f);
    p = CPU_FMAF(p * r, r, r) + 1.0f;
    uint32_t e = (uint32_t)((int32_t)n + 127) << 23; /* n + 127 is in 1..254 */
    float scale;
    memcpy(&scale, &e, sizeof scale);
    float y = p * scale;
    y = x > 88.72283f ? INFINITY : y;
    y = x < -103.972f ? 0.0f : y;
    return x != x ? x : y;
}

#endif
