/*
 * vmath.h — vectorizable f32 math for the cpu backend's loops: plain arithmetic, bit
 * operations and branch-free selects only (no libm calls but fmaf / rintf where they are one
 * instruction), so GCC turns loops over these functions into SSE2 / AVX2 / AVX-512 code at
 * every ISA level (libm's expf, erff... are a call per element).
 *
 * Accuracy, in ulps of the f32 result against the exact value (libm in double), measured by
 * tests/cpu/test_vmath.c over every 257th f32 bit pattern (both signs, every exponent), every
 * pattern in windows around the edges of each function's pieces and near 0, at the portable
 * level (no FMA) and with AVX2 + FMA; the test fails above the bound (measured max in
 * brackets, no FMA / FMA). Results in the subnormal range (|y| < 2^-126) are held to an
 * absolute error of 2^-140 instead (they keep few bits whatever one does).
 *   cpu_expf      1.5 ulp [0.97 / 1.01]  Cephes' polynomial; inf above 88.7228, 0 below
 *                                        -103.972, subnormal results in between
 *   cpu_logf      1 ulp   [0.82 / 0.83]  Cephes' polynomial; -inf at ±0, NaN below 0,
 *                                        subnormal inputs scaled first
 *   cpu_log1pf    1.5 ulp [0.88 / 0.89]  log of u = 1 + x, corrected by u's rounding error
 *   cpu_tanhf     2 ulp   [1.31 / 1.31]  Cephes' odd polynomial below 0.625, 1 - 2/(e^2|x|+1)
 *                                        above (±1 from 9.01 on)
 *   cpu_sigmoidf  2.5 ulp [2.33 / 2.33]  e/(1+e) or 1/(1+e), e = exp(-|x|): no overflow
 *   cpu_siluf     3.5 ulp [3.09 / 3.09]  x sigmoid(x), x e^x scaled last near underflow;
 *                                        silu(-inf) is NaN, as ref's x / (1 + exp(-x))
 *   cpu_erff      2 ulp   [1.40 / 1.17]  x + x P(x^2) below 1; 1 - erfc(|x|) above, erfc(u) =
 *                                        e^-u^2 F(1/u), u^2 split exactly (FMA or Veltkamp)
 *   cpu_geluf     7.5 ulp [7.21 / 5.83]  x Φ(x), Φ from one rational fit of erfc(|x|/√2)
 *                                        e^(x^2/2) for every x (no pieces: one exp, one
 *                                        division), the exp's scale applied last, so the far
 *                                        negative tail keeps its relative accuracy down to
 *                                        FLT_MIN; gelu(-inf) is NaN, as ref's formula
 *   cpu_powf      1 ulp   [0.00 / 0.00: correctly rounded on 5M pairs]  log2 and exp2 in
 *                         double (~1e-15), rounded once to f32: exact where the result is a
 *                         float (integer powers...); C99 Annex F's special cases: pow(x, ±0) =
 *                         1, pow(1, y) = 1, pow(-1, ±inf) = 1, negative bases with integer
 *                         exponents signed by parity, NaN for non-integer ones (finite bases),
 *                         the ±0 / ±inf rules
 * The polynomials of erf / F are least-squares fits on relative error (Lawson iterations
 * toward minimax) made with NumPy in double and rounded to f32; gelu's P/D is a linearised
 * (Loeb) least-squares fit with Lawson's weights, its exp polynomial a Remez fit.
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
#define CPU_HAVE_FMA 0
#else
#define CPU_FMAF(a, b, c) fmaf((a), (b), (c))
#define CPU_HAVE_FMA 1
#endif

/* rintf(v) for |v| <= 2^22 in the default rounding mode: an instruction from SSE4.1 on, a
 * library call on baseline x86-64, where adding and removing 1.5 * 2^23 rounds the same way. */
#if defined(__x86_64__) && !defined(__SSE4_1__)
#define CPU_RINTF(v) (((v) + 12582912.0f) - 12582912.0f)
#define CPU_RINT(v) (((v) + 6755399441055744.0) - 6755399441055744.0)
#else
#define CPU_RINTF(v) rintf(v)
#define CPU_RINT(v) rint(v)
#endif

static inline uint32_t cpu_f2u(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}
static inline float cpu_u2f(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}
static inline uint64_t cpu_d2u(double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}
static inline double cpu_u2d(uint64_t u) {
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* |x| as one and-not of the sign bit (x < 0 ? -x : x keeps -0 and costs a blend). */
static inline float cpu_fabsf(float x) { return cpu_u2f(cpu_f2u(x) & 0x7fffffffu); }

/* The rounding error of x*x: x*x = h + cpu_sqr_lo(x, h) exactly (|x| <= 2^60). */
static inline float cpu_sqr_lo(float x, float h) {
#if CPU_HAVE_FMA
    return fmaf(x, x, -h);
#else
    float c = 4097.0f * x; /* Veltkamp's split: x = xh + xl, 12 bits each */
    float xh = c - (c - x), xl = x - xh;
    return ((xh * xh - h) + 2.0f * xh * xl) + xl * xl;
#endif
}

/* e^x = hi * *s2 for x already known to be neither NaN nor out of [-104, 89]: the scale 2^n
 * as two factors, so results near overflow and in the subnormal range are right too, and a
 * caller can apply the second one after its own products. */
/* e^(n ln2 + r) = hi * *s2 for |r| <= ~0.35, n an integer in [-252, 129]. */
static inline float cpu_expf_reduced(float r, float n, float *s2) {
    float r2 = r * r; /* Cephes' polynomial by Estrin's scheme: a shorter chain */
    float p45 = CPU_FMAF(1.9875691500e-4f, r, 1.3981999507e-3f);
    float p23 = CPU_FMAF(8.3334519073e-3f, r, 4.1665795894e-2f);
    float p01 = CPU_FMAF(1.6666665459e-1f, r, 5.0000001201e-1f);
    float p = CPU_FMAF(CPU_FMAF(p45, r2, p23), r2, p01);
    p = CPU_FMAF(p, r2, r) + 1.0f;
    int32_t ni = (int32_t)n, n2 = ni >> 1, n1 = ni - n2; /* n in -252..129: both >= -126 */
    *s2 = cpu_u2f((uint32_t)(n2 + 127) << 23);
    return p * cpu_u2f((uint32_t)(n1 + 127) << 23);
}

static inline float cpu_expf_core2(float xc, float *s2) {
    float n = CPU_RINTF(xc * 1.44269504088896341f);
    float r = CPU_FMAF(n, -0.693359375f, xc);
    r = CPU_FMAF(n, 2.12194440e-4f, r);
    return cpu_expf_reduced(r, n, s2);
}

/* e^(a + b) = hi * *s2 for a exactly known and large (-x^2/2, say: |a| <= 110), b small
 * (|b| <= 2): the reduction a - n ln2 is exact, so b keeps its relative accuracy. */
static inline float cpu_expf_2(float a, float b, float *s2) {
    float n = CPU_RINTF((a + b) * 1.44269504088896341f);
    float r = CPU_FMAF(n, -0.693359375f, a) + b;
    r = CPU_FMAF(n, 2.12194440e-4f, r);
    return cpu_expf_reduced(r, n, s2);
}

static inline float cpu_expf_core(float xc) {
    float s2, hi = cpu_expf_core2(xc, &s2);
    return hi * s2;
}

/* The clamps are written `x > lo ? x : lo`, which is one maxps (minps) and sends NaN to the
 * bound (answered at the end): the core never sees a NaN or an out-of-range value. */
static inline float cpu_expf(float x) {
    float xc = x > -104.0f ? x : -104.0f;
    xc = xc < 89.0f ? xc : 89.0f;
    float y = cpu_expf_core(xc); /* inf from 88.7228 on, 0 below -103.972: the scales do it */
    return x != x ? x : y;
}

/* log(m * 2^e) = e ln2 + log(1 + f): Cephes' polynomial of f in [√½ - 1, √2 - 1], plus a
 * correction c (log1p's: the rounding error of 1 + x over 1 + x; 0 for log). x finite > 0. */
static inline float cpu_log_core(float x, float c) {
    int32_t sub = x < 1.17549435e-38f; /* subnormal: scaled by 2^23 first */
    float xs = sub ? x * 8388608.0f : x;
    uint32_t u = cpu_f2u(xs);
    int32_t k = (int32_t)(u - 0x3f3504f3u) >> 23; /* m = x / 2^k in [√½, √2) */
    float m = cpu_u2f(u - ((uint32_t)k << 23));
    float e = (float)(k - (sub ? 23 : 0));
    float f = m - 1.0f, z = f * f;
    float p = 7.0376836292e-2f;
    p = CPU_FMAF(p, f, -1.1514610310e-1f);
    p = CPU_FMAF(p, f, 1.1676998740e-1f);
    p = CPU_FMAF(p, f, -1.2420140846e-1f);
    p = CPU_FMAF(p, f, 1.4249322787e-1f);
    p = CPU_FMAF(p, f, -1.6668057665e-1f);
    p = CPU_FMAF(p, f, 2.0000714765e-1f);
    p = CPU_FMAF(p, f, -2.4999993993e-1f);
    p = CPU_FMAF(p, f, 3.3333331174e-1f);
    float y = p * f * z;
    y = CPU_FMAF(e, -2.12194440e-4f, y);
    y = CPU_FMAF(z, -0.5f, y) + c;
    return CPU_FMAF(e, 0.693359375f, f + y);
}

static inline float cpu_logf(float x) {
    float xc = x > 0 && x < INFINITY ? x : 1.0f;
    float y = cpu_log_core(xc, 0.0f);
    y = x == 0 ? -INFINITY : y;
    y = x == INFINITY ? x : y;
    y = x < 0 ? NAN : y;
    return x != x ? x : y;
}

static inline float cpu_log1pf(float x) {
    float xc = x > -1.0f && x < INFINITY ? x : 0.0f;
    float u = 1.0f + xc;
    float c = (xc - (u - 1.0f)) / u; /* 1 + x = u (1 + c) to first order; u - 1 is exact */
    float y = cpu_log_core(u, c);
    y = (cpu_f2u(x) & 0x7fffffffu) < 0x33800000u ? x : y; /* |x| < 2^-24 (±0 too): rounds to x */
    y = x == -1.0f ? -INFINITY : y;
    y = x == INFINITY ? x : y;
    y = x < -1.0f ? NAN : y;
    return x != x ? x : y;
}

static inline float cpu_tanhf(float x) {
    float a = cpu_fabsf(x);
    float z = x * x;
    float p = -5.70498872745e-3f;
    p = CPU_FMAF(p, z, 2.06390887954e-2f);
    p = CPU_FMAF(p, z, -5.37397155531e-2f);
    p = CPU_FMAF(p, z, 1.33314422036e-1f);
    p = CPU_FMAF(p, z, -3.33332819422e-1f);
    float small = CPU_FMAF(p * z, x, x);
    float ac = a < 9.1f ? a : 9.1f; /* tanh = 1 in f32 from 9.01 on */
    float big = 1.0f - 2.0f / (cpu_expf_core(ac + ac) + 1.0f);
    big = x < 0 ? -big : big;
    float y = a < 0.625f ? small : big;
    y = x == 0 ? x : y; /* -0 */
    return x != x ? x : y;
}

static inline float cpu_sigmoidf(float x) {
    float a = cpu_fabsf(x);
    float na = -a > -104.0f ? -a : -104.0f;
    float e = cpu_expf_core(na); /* e^-|x| in [0, 1]: 1 + e never overflows */
    float num = x < 0 ? e : 1.0f;
    float y = num / (1.0f + e);
    return x != x ? x : y;
}

static inline float cpu_siluf(float x) {
    float a = cpu_fabsf(x);
    float ac = a < 104.0f ? a : 104.0f;
    float s2, hi = cpu_expf_core2(-ac, &s2); /* e^-|x| = hi * s2 */
    int32_t under = a > 103.97208f;
    float e = under ? 0.0f : hi * s2;
    float num = x < 0 ? (under ? x * 0.0f : (x * hi) * s2) : x; /* x e^x scaled last */
    return x != x ? x : num / (1.0f + e);
}

/* erfc(u) = hi * *s2 for u in [0.5, ~10.25], given u^2 = h + l exactly: e^-h (1 - l) F(1/u),
 * F(t) = erfc(1/t) e^(1/t^2) fitted on t in [1, 2] and [0.4, 1] as polynomials of t, on
 * [0.0975, 0.4] as t G(t^2) (better conditioned there). The scale s2 of e^-h comes apart,
 * for the caller to apply last (results near underflow). */
static inline float cpu_erfc_tail(float u, float h, float l, float *s2) {
    float t = 1.0f / u;
    int32_t far = t < 0.4f, mid = t < 1.0f;
    float s = far ? CPU_FMAF(t, t, -8.495324850e-02f)
                  : t - (mid ? 7.009999752e-01f : 1.500499964e+00f);
    float p = far ? -2.603513060e+01f : mid ? -2.053058647e-02f : -3.400139738e-04f;
    p = CPU_FMAF(p, s, far ? 7.676571577e+00f : mid ? 3.209915594e-02f : -4.794702055e-05f);
    p = CPU_FMAF(p, s, far ? -2.296710598e+00f : mid ? -3.027469368e-02f : 1.959516475e-03f);
    p = CPU_FMAF(p, s, far ? 9.070217753e-01f : mid ? 8.757483980e-03f : -7.696480558e-03f);
    p = CPU_FMAF(p, s, far ? -4.241685328e-01f : mid ? 4.849585316e-02f : 2.423910700e-02f);
    p = CPU_FMAF(p, s, far ? 2.528203189e-01f : mid ? -1.617918150e-01f : -6.862514809e-02f);
    p = CPU_FMAF(p, s, far ? -2.268548565e-01f : mid ? 3.568719400e-01f : 1.818573359e-01f);
    p = CPU_FMAF(p, s, far ? 5.427716973e-01f : mid ? 3.340306742e-01f : 5.393753386e-01f);
    p = far ? p * t : p;
    float hc = h > 104.0f ? 104.0f : h;
    float e = cpu_expf_core2(-hc, s2);
    e = h > 103.97f ? 0.0f : e;
    return e * CPU_FMAF(-l, p, p);
}

static inline float cpu_erff(float x) {
    float a = cpu_fabsf(x);
    float z = x * x;
    float q = 7.780985210e-05f;
    q = CPU_FMAF(q, z, -7.989725721e-04f);
    q = CPU_FMAF(q, z, 5.186185500e-03f);
    q = CPU_FMAF(q, z, -2.685278630e-02f);
    q = CPU_FMAF(q, z, 1.128356316e-01f);
    q = CPU_FMAF(q, z, -3.761262412e-01f);
    q = CPU_FMAF(q, z, 1.283791655e-01f);
    float small = CPU_FMAF(x, q, x);
    float u = a > 1.0f ? a : 1.0f; /* the tail on [1, 10]: erf = 1 from 3.92 */
    u = u < 10.0f ? u : 10.0f;
    float h = u * u;
    float s2, hi = cpu_erfc_tail(u, h, cpu_sqr_lo(u, h), &s2);
    float big = 1.0f - hi * s2;
    big = x < 0 ? -big : big;
    float y = a < 1.0f ? small : big;
    return x != x ? x : y;
}

/* gelu(x) = x Φ(x), Φ(x) = 1 - Q(|x|) above 0 and Q(|x|) below, Q(a) = erfc(a/√2)/2 in one
 * piece for every a: Q(a) = e^(-a^2/2) P(a)/D(a), P/D a rational fit of degree (4, 5) of
 * Q(a) e^(a^2/2) on a in [0, 13.3] (relative error 5e-9; positive coefficients, so Horner's
 * rule in f32 does not cancel). -a^2/2 = -(h + l)/2 is split exactly and its exp reduced
 * exactly (u = 2r, the polynomial's coefficients halved per power), the scale 2^(n+64) set
 * from the rounding constant's bits and 2^-64 applied last, so the negative tail keeps its
 * relative accuracy down to FLT_MIN. One division, no selects of coefficients: a third of
 * the old one-piece form's work (which fitted the exponent in t = 1/(1 + a/2) and divided
 * twice). min(a, 14.5) on a's bits (an integer min: a float compare would be if-converted by
 * GCC into blends of every value derived from a). gelu(-inf) is NaN, as ref's formula. */
static inline float cpu_geluf(float x) {
    float a = cpu_fabsf(x);
    uint32_t ua = cpu_f2u(a);
    float ac = cpu_u2f(ua < 0x41680000u ? ua : 0x41680000u); /* min(a, 14.5); NaN: 14.5 */
    float h = ac * ac, l = cpu_sqr_lo(ac, h);                 /* a^2 = h + l exactly */
    float pn = CPU_FMAF(4.020226023e-03f, ac, 3.998440764e-02f);
    pn = CPU_FMAF(pn, ac, 1.813074479e-01f);
    pn = CPU_FMAF(pn, ac, 4.356872321e-01f);
    pn = CPU_FMAF(pn, ac, 5.000000025e-01f);
    float pd = CPU_FMAF(1.007706901e-02f, ac, 1.002334277e-01f);
    pd = CPU_FMAF(pd, ac, 4.643821536e-01f);
    pd = CPU_FMAF(pd, ac, 1.194487049e+00f);
    pd = CPU_FMAF(pd, ac, 1.669259383e+00f);
    pd = CPU_FMAF(pd, ac, 1.0f);
    /* e^(-(h + l)/2) = pe 2^n: n = rint(-h/(2 ln2)) read from sm's low bits, which also hold
     * n + 127 + 64 for the scale; u = -(h + l) - 2n ln2, exactly up to l's rounding. */
    float sm = CPU_FMAF(h, -0.72134752044448170f, 12583103.0f); /* 1.5 * 2^23 + 127 + 64 */
    float n = sm - 12583103.0f;
    float u = CPU_FMAF(n, -1.38671875f, -h) + CPU_FMAF(n, 4.24388880e-4f, -l); /* 2 ln2 = */
    /* 1.38671875 - 4.2438888e-4: the first product and sum are exact */
    float u2 = u * u; /* e^(u/2) = 1 + u/2 + (u/2)^2 (c2 + c3 u/2 + ...), a minimax fit */
    float pa = CPU_FMAF(1.666641682e-01f / 8, u, 4.999998808e-01f / 4);
    float pb = CPU_FMAF(8.378303610e-03f / 32, u, 4.166841134e-02f / 16);
    pb = CPU_FMAF(1.386072487e-03f / 64, u2, pb);
    float pe = CPU_FMAF(CPU_FMAF(pb, u2, pa), u2, 0.5f * u) + 1.0f;
    float e = pe * cpu_u2f(cpu_f2u(sm) << 23); /* e^(-a^2/2) 2^64 */
    pn = a > 14.5f ? 0.0f : pn; /* gelu(x) = -0 below -14.5 (NaN at -inf) */
    float q = e * (pn / pd);    /* Q(|x|) 2^64; the division meanwhile the exp */
    return x <= 0 ? (x * q) * 5.42101086e-20f : x * CPU_FMAF(-q, 5.42101086e-20f, 1.0f);
}

/* log2(x) in double, to about 1e-15 relative, for a finite f32 x > 0: x = m 2^k with m in
 * [√½, √2) (split on x's f32 bits, subnormals scaled first), log(m) = 2 atanh(s),
 * s = (m - 1)/(m + 1), |s| <= 0.1716, by its series. */
static inline double cpu_log2_fd(float x) {
    int32_t sub = x < 1.17549435e-38f;
    float xs = sub ? x * 8388608.0f : x;
    uint32_t u = cpu_f2u(xs);
    int32_t k = (int32_t)(u - 0x3f3504f3u) >> 23;
    double m = (double)cpu_u2f(u - ((uint32_t)k << 23));
    double s = (m - 1.0) / (m + 1.0), s2 = s * s;
    double p = 1.0 / 19;
    p = p * s2 + 1.0 / 17;
    p = p * s2 + 1.0 / 15;
    p = p * s2 + 1.0 / 13;
    p = p * s2 + 1.0 / 11;
    p = p * s2 + 1.0 / 9;
    p = p * s2 + 1.0 / 7;
    p = p * s2 + 1.0 / 5;
    p = p * s2 + 1.0 / 3;
    p = p * s2 * s + s;
    return (double)(k - (sub ? 23 : 0)) + p * 2.8853900817779268; /* 2 / ln 2 */
}

/* 2^y for y in [-160, 160], to about 1e-15 relative (Taylor series of e^(r ln2), |r| <= ½);
 * n = rint(y) by adding 1.5 * 2^52, whose low bits then hold n for the scale. */
static inline double cpu_exp2_d(double y) {
    double t = y + 6755399441055744.0;
    double n = t - 6755399441055744.0, r = (y - n) * 0.69314718055994531;
    double p = 1.0 / 39916800;
    p = p * r + 1.0 / 3628800;
    p = p * r + 1.0 / 362880;
    p = p * r + 1.0 / 40320;
    p = p * r + 1.0 / 5040;
    p = p * r + 1.0 / 720;
    p = p * r + 1.0 / 120;
    p = p * r + 1.0 / 24;
    p = p * r + 1.0 / 6;
    p = p * r + 0.5;
    p = p * r * r + r + 1.0;
    return p * cpu_u2d((cpu_d2u(t) + 1023u) << 52);
}

static inline float cpu_powf(float a, float b) {
    float aa = a < 0 ? -a : a;
    float ab = b < 0 ? -b : b;
    int32_t afin = (aa > 0) & (aa < INFINITY); /* |a| finite and nonzero */
    double y = (double)b * cpu_log2_fd(afin ? aa : 1.0f);
    y = y > 160.0 ? 160.0 : y;  /* beyond: inf / 0 after rounding */
    y = y < -160.0 ? -160.0 : y;
    y = y != y ? 0.0 : y;       /* b NaN: answered below */
    float r = (float)cpu_exp2_d(y);
    /* |a| = 0 or inf, b = ±inf: the limits */
    int32_t binf = ab == INFINITY, bpos = b > 0, bneg = b < 0;
    int32_t azero = aa == 0, ainf = aa == INFINITY;
    r = binf ? (((aa > 1.0f) == bpos) ? INFINITY : 0.0f) : r;
    r = ((azero & bneg) | (ainf & bpos)) ? INFINITY : r;
    r = ((azero & bpos) | (ainf & bneg)) ? 0.0f : r;
    /* the sign of a negative base: integer exponents by parity, others NaN (finite a). From
     * b's bits: 2^E <= |b| < 2^(E+1), its 24-bit significand shifted right by 23 - E. */
    uint32_t ub = cpu_f2u(b);
    int32_t sh = 150 - (int32_t)((ub >> 23) & 0xffu); /* 23 - E */
    uint32_t sig = (ub & 0x7fffffu) | 0x800000u;
    int32_t shc = sh < 0 ? 0 : sh;
    shc = shc > 24 ? 24 : shc;
    uint32_t frac = sig & ((1u << shc) - 1u), low = (sig >> shc) & 1u; /* shc 24: low 0 */
    int32_t fint = (sh <= 0) | ((sh <= 23) & (frac == 0)) | (b == 0);
    uint32_t odd = (uint32_t)sh <= 23u ? low << 31 : 0u; /* the sign bit where b is odd */
    odd = frac == 0 ? odd : 0u;
    r = cpu_u2f(cpu_f2u(r) ^ (cpu_f2u(a) & odd));
    r = ((a < 0) & afin & !fint) ? NAN : r;
    r = ((a != a) | (b != b)) ? NAN : r;
    r = ((b == 0) | (a == 1.0f) | ((a == -1.0f) & binf)) ? 1.0f : r;
    return r;
}

#endif
