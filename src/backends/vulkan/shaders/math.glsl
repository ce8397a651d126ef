/*
 * math.glsl — the elementwise math of float kinds, as m_NAME(x) overloads for float (f32, f16
 * and bf16 arithmetic) and, with USE_F64, double (math64.glsl). GLSL's built-in functions take
 * floats only, and some lose accuracy where ember's tolerances need it (log1p, expm1 near 0,
 * tanh): these are written out. Accuracy: within a few float ulps (f32 tolerance 1e-5
 * relative); the double ones within 1e-13 relative (f64 tolerance 1e-9).
 */
float m_copysign(float x, float s) {
    return uintBitsToFloat((floatBitsToUint(x) & 0x7fffffffu) | (floatBitsToUint(s) & 0x80000000u));
}
bool m_signbit(float x) { return (floatBitsToUint(x) & 0x80000000u) != 0u; }
float m_exp(float x) { return exp(x); }
/* A subnormal x (biased exponent 0, mantissa m != 0) is m * 2^-149: the device may flush it to 0
 * in arithmetic, so its logs are taken of the integer m (exact as a float) less 149 binades. */
bool m_subnormal(float x) {
    uint b = floatBitsToUint(x);
    return (b & 0x7f800000u) == 0u && (b & 0x007fffffu) != 0u && (b & 0x80000000u) == 0u;
}
float m_subnormal_mantissa(float x) { return float(floatBitsToUint(x) & 0x007fffffu); }
float m_log(float x) {
    if (m_subnormal(x)) return log(m_subnormal_mantissa(x)) - 149.0 * 0.693147180559945;
    return log(x);
}
/* log(1 + x) accurate near 0 (Kahan: log(u) * x / (u - 1) with u = 1 + x). */
float m_log1p(float x) {
    if (isinf(x) && x > 0.0) return x;
    float u = 1.0 + x;
    if (u == 1.0) return x;
    return log(u) * (x / (u - 1.0));
}
/* exp(x) - 1 accurate near 0 (Kahan: (u - 1) * x / log(u) with u = exp(x)). */
float m_expm1(float x) {
    if (abs(x) < 1e-5) return x + 0.5 * x * x;
    float u = exp(x);
    if (u == 1.0) return x;
    if (isinf(u)) return u;
    float um1 = u - 1.0;
    if (um1 == -1.0) return -1.0;
    return um1 * (x / log(u));
}
float m_sqrt(float x) { return sqrt(x); }
float m_sin(float x) { return sin(x); }
float m_cos(float x) { return cos(x); }
float m_tan(float x) { return tan(x); }
/* atan(a) for a >= 0 (inf included; the device's atan, asin and acos are off by 1e-4 and give
 * 0 for NaN): a > 1 as pi/2 - atan(1/a); y in [0, 1] as atan(c) + atan((y - c) / (1 + c y)),
 * c = j/8 the nearest eighth, |t| <= 1/16, atan(t) = t - t^3/3 + t^5/5 - t^7/7 (truncation
 * below 1e-10): within 2 float ulps. */
float m_atan_pos(float a) {
    bool inv = a > 1.0;
    float y = inv ? 1.0 / a : a;
    float c = roundEven(y * 8.0);
    int j = int(c);
    c *= 0.125;
    float t = (y - c) / (1.0 + c * y);
    float z = t * t;
    float tab = j == 0 ? 0.0 : j == 1 ? 0.124354995 : j == 2 ? 0.244978663 : j == 3 ? 0.358770670
              : j == 4 ? 0.463647609 : j == 5 ? 0.558599315 : j == 6 ? 0.643501109
              : j == 7 ? 0.718829999 : 0.785398163;
    float r = tab + (t - t * z * (1.0 / 3.0 - z * (0.2 - z * (1.0 / 7.0))));
    if (inv) r = (1.57079637 - r) - 4.37113883e-8; /* pi/2 = 1.57079637 - 4.37e-8 */
    return r;
}
float m_atan(float x) {
    if (isnan(x)) return x;
    if (abs(x) < 1e-10) return x;
    return m_copysign(m_atan_pos(abs(x)), x);
}
/* asin x = atan(x / sqrt((1 - |x|)(1 + |x|))), 1 - |x| exact near 1 */
float m_asin(float x) {
    if (isnan(x)) return x;
    float a = abs(x);
    if (a > 1.0) return uintBitsToFloat(0x7fc00000u);
    if (a < 1e-10) return x;
    return m_copysign(m_atan_pos(a / sqrt((1.0 - a) * (1.0 + a))), x);
}
/* acos x = 2 atan(sqrt((1 - x) / (1 + x))); x = -1 gives 2 atan(inf) = pi */
float m_acos(float x) {
    if (isnan(x)) return x;
    if (abs(x) > 1.0) return uintBitsToFloat(0x7fc00000u);
    return 2.0 * m_atan_pos(sqrt((1.0 - x) / (1.0 + x)));
}
float m_atan2(float y, float x) {
    /* GLSL's atan(y, x) is undefined at x = 0 = y and for infinities: C's atan2 there */
    if (isnan(x) || isnan(y)) return x + y;
    if (y == 0.0) return m_signbit(x) ? m_copysign(3.14159265358979, y) : y;
    if (isinf(x) && isinf(y))
        return m_copysign(x > 0.0 ? 0.785398163397448 : 2.35619449019234, y);
    if (isinf(x)) return x > 0.0 ? m_copysign(0.0, y) : m_copysign(3.14159265358979, y);
    if (isinf(y) || x == 0.0) return m_copysign(1.5707963267949, y);
    return atan(y, x);
}
/* tanh through expm1 (accurate near 0, saturating for large |x|). */
float m_tanh(float x) {
    float a = abs(x);
    if (a > 9.0) return m_copysign(1.0, x);
    float e = m_expm1(-2.0 * a);
    return m_copysign(-e / (2.0 + e), x);
}
float m_sinh(float x) {
    float a = abs(x);
    if (a < 1.0) {
        float e = m_expm1(a);
        return m_copysign(0.5 * (e + e / (e + 1.0)), x);
    }
    if (a > 88.0) { /* exp(a) overflows before sinh does */
        float e = exp(0.5 * a);
        return m_copysign(0.5 * e * e, x);
    }
    float e = exp(a);
    return m_copysign(0.5 * (e - 1.0 / e), x);
}
float m_cosh(float x) {
    float a = abs(x);
    if (a > 88.0) {
        float e = exp(0.5 * a);
        return 0.5 * e * e;
    }
    float e = exp(a);
    return 0.5 * (e + 1.0 / e);
}
float m_log2(float x) {
    if (m_subnormal(x)) return log2(m_subnormal_mantissa(x)) - 149.0;
    return log2(x);
}
float m_log10(float x) { return m_log2(x) * 0.301029995663981; }
float m_pow(float a, float b) {
    /* C's pow: the special cases GLSL leaves undefined (a < 0, a = 0, b = 0) */
    if (b == 0.0) return 1.0;
    if (a == 1.0) return 1.0;
    if (isnan(a) || isnan(b)) return a + b;
    float bi = trunc(b);
    bool odd = bi == b && abs(b) < 16777216.0 && mod(bi, 2.0) == 1.0;
    if (a == 0.0) {
        if (b < 0.0) return odd ? m_copysign(1.0 / 0.0, a) : 1.0 / 0.0;
        return odd ? a : 0.0;
    }
    if (isinf(b)) {
        float m = abs(a);
        if (m == 1.0) return 1.0;
        return (m > 1.0) == (b > 0.0) ? 1.0 / 0.0 : 0.0;
    }
    if (isinf(a)) {
        if (a > 0.0) return b > 0.0 ? a : 0.0;
        float r = b > 0.0 ? 1.0 / 0.0 : 0.0;
        return odd ? -r : r;
    }
    if (a < 0.0) {
        if (bi != b) return 0.0 / 0.0;
        float r = exp2(b * log2(-a));
        return odd ? -r : r;
    }
    return exp2(b * log2(a));
}
/* C's fmod: exact (a - trunc(a / b) * b computed without rounding). */
float m_fmod(float a, float b) {
    if (isnan(a) || isnan(b) || isinf(a) || b == 0.0) return (a * b) / (a * b);
    if (isinf(b)) return a;
    float x = abs(a), y = abs(b);
    if (x < y) return a;
    /* long division on the binary exponents: subtract y * 2^k for k from high to low */
    int ex, ey;
    frexp(x, ex);
    frexp(y, ey);
    for (int k = ex - ey; k >= 0; k--) {
        float t = ldexp(y, k);
        if (x >= t) x -= t;
    }
    return m_copysign(x, a);
}
/* erf: Taylor series below 0.5, else 1 - erfc with erfc by Numerical Recipes' Chebyshev fit
 * (fractional error below 1.2e-7). */
float m_erf(float x) {
    float a = abs(x);
    if (isnan(x)) return x;
    if (a < 0.5) {
        float x2 = x * x;
        return x * (1.1283791670955126 +
                    x2 * (-0.37612638903183754 +
                          x2 * (0.11283791670955126 +
                                x2 * (-0.026866170645131252 +
                                      x2 * (0.005223977625442188 - x2 * 0.0008548327023450853)))));
    }
    if (a > 4.0) return m_copysign(1.0, x);
    float t = 1.0 / (1.0 + 0.5 * a);
    float r = t * exp(-a * a - 1.26551223 +
                      t * (1.00002368 +
                           t * (0.37409196 +
                                t * (0.09678418 +
                                     t * (-0.18628806 +
                                          t * (0.27886807 +
                                               t * (-1.13520398 +
                                                    t * (1.48851587 +
                                                         t * (-0.82215223 + t * 0.17087277)))))))));
    return m_copysign(1.0 - r, x);
}
float m_floor(float x) { return floor(x); }
float m_ceil(float x) { return ceil(x); }
float m_rint(float x) { return roundEven(x); }
bool m_isnan(float x) { return isnan(x); }
bool m_isinf(float x) { return isinf(x); }

#ifdef USE_F64
#include "math64.glsl"
#endif
