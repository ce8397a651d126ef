/*
 * vmath_more.h — vectorizable f32 functions of the ops issue 14 added, in vmath.h's style
 * (arithmetic, selects and sqrt / rint only, so that GCC vectorizes loops over them at every
 * ISA level): tan, asin, acos, atan, atan2, sinh, cosh, expm1, log2, log10, softplus.
 * Included by unary_more.h (unary.c) and elementwise.c (atan2).
 *
 * Accuracy: tests/cpu/test_cpu_unary.c and test_cpu_layout.c check them against ref (libm in
 * double) over the ops' domains, far values and special values, at the portable and avx2
 * levels (failing above 8 ulps, resp. 1e-6 relative). Measured against libm in double over
 * every 97th f32 bit pattern (atan2: y an odd multiple of x's bits), in ulps of the result
 * (subnormal results: in units of 2^-149), no FMA / FMA: tan 2.66 / 2.65 (|x| < 65536),
 * asin 1.87 / 1.85, acos 1.24, atan 2.23, atan2 2.53 / 2.41, sinh 1.63, cosh 1.46 / 1.5,
 * expm1 1.7 / 1.75, log2 1.7, log10 2.0, softplus (beta 0.75) 2.19 / 2.22. The pieces:
 *   cpu_atanf / cpu_atan2f  Cephes' atanf polynomial on [-tan(pi/8), tan(pi/8)] after the
 *                           reductions 1/x and (t - 1)/(t + 1), pi/2 and pi/4 added in two
 *                           parts; atan2 by the octant of (|y|, |x|), C99's special cases
 *   cpu_asinf / cpu_acosf   Cephes' asinf polynomial on [0, 1/2], sqrt((1 - |x|)/2) above
 *   cpu_tanf                x - n pi/2 in double (two-part pi/2: exact for |x| < 2^20),
 *                           Cephes' tanf polynomial, -1/t for odd n; |x| >= 65536 (rare) is
 *                           left to the caller (libm), see cpu_tanf_far
 *   cpu_sinhf / cpu_coshf   Taylor's series below 1 (sinh), e^(|x| - ln 2) -+ e^-(|x| - ln 2)/4
 *                           with the reduction exact (cpu_expf_2)
 *   cpu_expm1f              Taylor's series to x^11 below 0.7, e^x - 1 above
 *   cpu_log2f / cpu_log10f  cpu_logf times the constant
 *   cpu_softplusf           PyTorch's: x above the threshold, log1p(e^(beta x)) / beta with the
 *                           exp of the exact product beta x
 */
#ifndef EMBER_CPU_VMATH_MORE_H
#define EMBER_CPU_VMATH_MORE_H

#include "vmath.h"

#define CPU_PIO2_HI 1.57079637e+00f   /* pi/2 = HI + LO */
#define CPU_PIO2_LO -4.37113883e-08f
#define CPU_PIO4_HI 7.85398185e-01f
#define CPU_PIO4_LO -2.18556941e-08f
#define CPU_PI_HI 3.14159274e+00f
#define CPU_PI_LO -8.74227766e-08f

/* atan(t) for t in [0, 1] (or NaN): Cephes' polynomial, after t -> (t - 1)/(t + 1) above
 * tan(pi/8). */
static inline float cpu_atan01(float t) {
    int32_t big = t > 0.414213562f;
    float u = big ? (t - 1.0f) / (t + 1.0f) : t;
    float z = u * u;
    float p = 8.05374449538e-2f;
    p = CPU_FMAF(p, z, -1.38776856032e-1f);
    p = CPU_FMAF(p, z, 1.99777106478e-1f);
    p = CPU_FMAF(p, z, -3.33329491539e-1f);
    float r = CPU_FMAF(p * z, u, u);
    return big ? CPU_PIO4_HI + (r + CPU_PIO4_LO) : r;
}

static inline float cpu_atanf(float x) {
    float a = cpu_fabsf(x);
    int32_t inv = a > 1.0f;
    float r = cpu_atan01(inv ? 1.0f / a : a); /* inf: 1/inf = 0 */
    r = inv ? (CPU_PIO2_HI - r) + CPU_PIO2_LO : r;
    return cpu_u2f(cpu_f2u(r) | (cpu_f2u(x) & 0x80000000u)); /* NaN, ±0 go through */
}

/* atan2(y, x) as C99: the angle of (x, y) from the octant of (|x|, |y|). */
static inline float cpu_atan2f(float y, float x) {
    float ay = cpu_fabsf(y), ax = cpu_fabsf(x);
    int32_t swap = ay > ax;
    float t = swap ? ax / ay : ay / ax;
    int32_t both0 = (ay == 0) & (ax == 0), bothinf = (ay == INFINITY) & (ax == INFINITY);
    t = both0 ? 0.0f : t;
    t = bothinf ? 1.0f : t;
    float r = cpu_atan01(t);
    r = swap ? (CPU_PIO2_HI - r) + CPU_PIO2_LO : r;
    r = (cpu_f2u(x) >> 31) ? (CPU_PI_HI - r) + CPU_PI_LO : r; /* x < 0 or -0 */
    r = cpu_u2f(cpu_f2u(r) | (cpu_f2u(y) & 0x80000000u));
    return ((x != x) | (y != y)) ? x + y : r;
}

/* asin(s) for s in [0, 1/2] given z = s^2 (z = (1 - |x|)/2, s = sqrt(z) above 1/2). */
static inline float cpu_asin_core(float s, float z) {
    float p = 4.2163199048e-2f;
    p = CPU_FMAF(p, z, 2.4181311049e-2f);
    p = CPU_FMAF(p, z, 4.5470025998e-2f);
    p = CPU_FMAF(p, z, 7.4953002686e-2f);
    p = CPU_FMAF(p, z, 1.6666752422e-1f);
    return CPU_FMAF(p * z, s, s);
}

static inline float cpu_asinf(float x) {
    float a = cpu_fabsf(x);
    int32_t hi = a > 0.5f;
    float z = hi ? 0.5f * (1.0f - a) : a * a; /* beyond 1: z < 0, sqrt NaN */
    float s = hi ? sqrtf(z) : a;
    float c = cpu_asin_core(s, z);
    float r = hi ? (CPU_PIO2_HI - 2.0f * c) + CPU_PIO2_LO : c;
    return cpu_u2f(cpu_f2u(r) | (cpu_f2u(x) & 0x80000000u));
}

static inline float cpu_acosf(float x) {
    float a = cpu_fabsf(x);
    int32_t hi = a > 0.5f;
    float z = hi ? 0.5f * (1.0f - a) : x * x;
    float s = hi ? sqrtf(z) : x;
    float c = cpu_asin_core(s, z);
    float r = (CPU_PIO2_HI - c) + CPU_PIO2_LO;          /* |x| <= 1/2 */
    r = (hi & (x > 0)) ? 2.0f * c : r;                  /* acos(x) = 2 asin(sqrt((1-x)/2)) */
    r = (hi & (x < 0)) ? (CPU_PI_HI - 2.0f * c) + CPU_PI_LO : r;
    return x != x ? x : r;
}

/* tan(x) for |x| < 65536 (the caller answers larger ones and inf: cpu_tanf_far). */
static inline float cpu_tanf(float x) {
    double xd = x;
    double n = CPU_RINT(xd * 0.63661977236758134308);
    double rd = (xd - n * 1.57079632673412561417) - n * 6.07710050650619224932e-11;
    float r = (float)rd, z = r * r;
    float p = 9.38540185543e-3f;
    p = CPU_FMAF(p, z, 3.11992232697e-3f);
    p = CPU_FMAF(p, z, 2.44301354525e-2f);
    p = CPU_FMAF(p, z, 5.34112807005e-2f);
    p = CPU_FMAF(p, z, 1.33387994085e-1f);
    p = CPU_FMAF(p, z, 3.33331568548e-1f);
    float t = CPU_FMAF(p * z, r, r);
    double h = n * 0.5;
    return h != CPU_RINT(h) ? -1.0f / t : t; /* n odd */
}
static inline int cpu_tanf_far(float x) { return !(cpu_fabsf(x) < 65536.0f) && x == x; }

/* e^x - 1: Taylor's series to x^11 for |x| < 0.7 (no cancellation), e^x - 1 above. */
static inline float cpu_expm1f(float x) {
    float p = 2.505210839e-8f; /* 1/11! */
    p = CPU_FMAF(p, x, 2.755731922e-7f);
    p = CPU_FMAF(p, x, 2.755731922e-6f);
    p = CPU_FMAF(p, x, 2.480158730e-5f);
    p = CPU_FMAF(p, x, 1.984126984e-4f);
    p = CPU_FMAF(p, x, 1.388888889e-3f);
    p = CPU_FMAF(p, x, 8.333333333e-3f);
    p = CPU_FMAF(p, x, 4.166666667e-2f);
    p = CPU_FMAF(p, x, 1.666666667e-1f);
    p = CPU_FMAF(p, x, 0.5f);
    float small = CPU_FMAF(p * x, x, x);
    float big = cpu_expf(x) - 1.0f; /* NaN, ±inf go through: -inf gives -1 */
    return cpu_fabsf(x) < 0.7f ? small : big;
}

/* e^|x| / 2 (|x| clamped to 90, where it is inf): e^(|x| - ln 2) with the reduction exact. */
static inline float cpu_exph_abs(float x) {
    float a = cpu_fabsf(x);
    a = a < 90.0f ? a : 90.0f; /* NaN to 90 too: answered by the callers */
    float s2, hi = cpu_expf_2(a, -0.693147182f, &s2);
    return hi * s2;
}

/* sinh: x + x^3/3! + ... + x^11/11! below 1, e^|x|/2 - e^-|x|/2 (signed) above. */
static inline float cpu_sinhf(float x) {
    float z = x * x;
    float p = 2.505210839e-8f; /* 1/11! */
    p = CPU_FMAF(p, z, 2.755731922e-6f);
    p = CPU_FMAF(p, z, 1.984126984e-4f);
    p = CPU_FMAF(p, z, 8.333333333e-3f);
    p = CPU_FMAF(p, z, 1.666666667e-1f);
    float small = CPU_FMAF(p * z, x, x);
    float e = cpu_exph_abs(x);
    float big = e - 0.25f / e;
    big = x < 0 ? -big : big;
    float y = cpu_fabsf(x) < 1.0f ? small : big;
    return x != x ? x : y;
}

/* cosh = e^|x|/2 + e^-|x|/2. */
static inline float cpu_coshf(float x) {
    float e = cpu_exph_abs(x);
    float y = e + 0.25f / e;
    return x != x ? x : y;
}

static inline float cpu_log2f(float x) { return cpu_logf(x) * 1.44269504088896341f; }
static inline float cpu_log10f(float x) { return cpu_logf(x) * 0.434294481903251828f; }

/* The rounding error of a*b: a*b = h + cpu_prod_lo(a, b, h) exactly (no overflow in the
 * split: |a|, |b| < 2^100 or the caller ignores the result). */
static inline float cpu_prod_lo(float a, float b, float h) {
#if CPU_HAVE_FMA
    return fmaf(a, b, -h);
#else
    float ca = 4097.0f * a, cb = 4097.0f * b; /* Veltkamp's split, as cpu_sqr_lo */
    float ah = ca - (ca - a), al = a - ah, bh = cb - (cb - b), bl = b - bh;
    return ((ah * bh - h) + ah * bl + al * bh) + al * bl;
#endif
}

/* PyTorch's softplus: x where beta x > threshold, log1p(e^(beta x)) / beta else. e^(beta x)
 * is taken of the exact product (its rounding error passed to the exp's reduction), so that
 * the far negative tail, where softplus = e^(beta x) / beta, keeps its relative accuracy
 * whatever beta (PyTorch's float kernel rounds beta x first: ~|beta x| ulps there). */
static inline float cpu_softplusf(float x, float beta, float thr) {
    float bx = x * beta;
    float bc = bx > -104.0f ? bx : -104.0f; /* NaN to -104 too: answered last */
    bc = bc < 89.0f ? bc : 89.0f;
    float lo = bc == bx ? cpu_prod_lo(x, beta, bx) : 0.0f;
    float s2, hi = cpu_expf_2(bc, lo, &s2);
    float y = cpu_log1pf(hi * s2) / beta;
    y = bx != bx ? bx : y;
    return bx > thr ? x : y;
}

#endif /* EMBER_CPU_VMATH_MORE_H */
