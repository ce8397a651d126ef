/*
 * math64.glsl — the double overloads of math.glsl's m_NAME (only with USE_F64).
 *
 * GLSL has no double transcendental functions: these are written out with double arithmetic
 * (range reduction, then Taylor polynomials on a small interval, or rational identities), the
 * way C's libm does it, with C's special values (NaN in -> NaN out, +-inf, +-0 kept, overflow
 * to inf, underflow to 0, pow's and atan2's special cases of C99 Annex F).
 * Accuracy, measured on the host against glibc (this code compiled as C, 300,000 random
 * arguments per function and range): exp, log, log1p, log2, sin, cos, atan within 1 ulp;
 * expm1, log10, tan, asin, acos, atan2 within 2; sinh, cosh, tanh within 3; pow within 7
 * (exponents near 700); erf within 2e-15 absolute; fmod exact. sin, cos and tan of arguments
 * beyond 2^50 are not reduced exactly (no Payne-Hanek reduction) and lose accuracy there.
 * Subnormal arguments are read from their bits (the device may flush double denormals in
 * arithmetic). The code keeps to a subset of GLSL that is also C (no `out` parameters, no
 * array constants), so that it can be tested on the host against libm.
 */

/* ---- bits ---- */
uint m64_hi(double x) { return unpackDouble2x32(x).y; }
double m64_make(uint hi, uint lo) { return packDouble2x32(uvec2(lo, hi)); }
double m64_inf() { return m64_make(0x7ff00000u, 0u); }
double m64_nan() { return m64_make(0x7ff80000u, 0u); }
/* |x| < 2^e for a power of two given as the high word of 2^e (exponent bits only): true for
 * zeros and subnormals whatever the device's denormal mode. */
bool m64_below(double x, uint hi_of_pow2) { return (m64_hi(x) & 0x7fffffffu) < hi_of_pow2; }

double m_copysign(double x, double s) {
    uvec2 a = unpackDouble2x32(x), b = unpackDouble2x32(s);
    return packDouble2x32(uvec2(a.x, (a.y & 0x7fffffffu) | (b.y & 0x80000000u)));
}
bool m_signbit(double x) { return (unpackDouble2x32(x).y & 0x80000000u) != 0u; }
bool m_isnan(double x) { return isnan(x); }
bool m_isinf(double x) { return isinf(x); }

/* 2^k for k in [-1022, 1023], exactly. */
double m64_pow2(int k) { return m64_make(uint(k + 1023) << 20, 0u); }

/* x * 2^n for any n (C's scalbn): in steps so that no factor overflows. */
double m64_scalbn(double x, int n) {
    if (n > 1023) {
        x *= m64_pow2(1023);
        n -= 1023;
        if (n > 1023) {
            x *= m64_pow2(1023);
            n -= 1023;
            if (n > 1023) n = 1023;
        }
    } else if (n < -1022) {
        x *= m64_pow2(-969); /* 2^-1022 * 2^53: keeps 53 bits while scaling down */
        n += 969;
        if (n < -1022) {
            x *= m64_pow2(-969);
            n += 969;
            if (n < -1022) n = -1022;
        }
    }
    return x * m64_pow2(n);
}

/* The binary exponent e of a finite nonzero x with |x| = m * 2^e, m in [0.5, 1) (frexp's),
 * read from the bits: a subnormal's mantissa is taken as an exact integer-valued double. */
int m64_exponent(double x) {
    uvec2 w = unpackDouble2x32(x);
    int ex = int((w.y >> 20) & 0x7ffu);
    if (ex != 0) return ex - 1022;
    double m = double(w.y & 0xfffffu) * 4294967296.0LF + double(w.x); /* x = m * 2^-1074 */
    return int((m64_hi(m) >> 20) & 0x7ffu) - 1022 - 1074;
}

/* |x| * 2^-e for e = m64_exponent(x): the mantissa in [0.5, 1), from the bits. */
double m64_mantissa(double x) {
    uvec2 w = unpackDouble2x32(x);
    if (((w.y >> 20) & 0x7ffu) == 0u) {
        double m = double(w.y & 0xfffffu) * 4294967296.0LF + double(w.x);
        w = unpackDouble2x32(m);
    }
    return packDouble2x32(uvec2(w.x, (w.y & 0x000fffffu) | 0x3fe00000u));
}

/* ---- exp family ---- */

const double M64_LN2_HI = 0.6931471805599453LF;   /* ln 2 = HI + LO to 106 bits */
const double M64_LN2_LO = 2.3190468138462996e-17LF;
const double M64_INV_LN2 = 1.4426950408889634LF;

/* expm1(r) for |r| <= 0.35: Taylor series r + r^2 (1/2! + r/3! + ... + r^12/14!), truncation
 * below 1e-18 relative. */
double m64_expm1_poly(double r) {
    double p = 1.0LF / 87178291200.0LF; /* 1/14! */
    p = fma(p, r, 1.0LF / 6227020800.0LF);
    p = fma(p, r, 1.0LF / 479001600.0LF);
    p = fma(p, r, 1.0LF / 39916800.0LF);
    p = fma(p, r, 1.0LF / 3628800.0LF);
    p = fma(p, r, 1.0LF / 362880.0LF);
    p = fma(p, r, 1.0LF / 40320.0LF);
    p = fma(p, r, 1.0LF / 5040.0LF);
    p = fma(p, r, 1.0LF / 720.0LF);
    p = fma(p, r, 1.0LF / 120.0LF);
    p = fma(p, r, 1.0LF / 24.0LF);
    p = fma(p, r, 1.0LF / 6.0LF);
    p = fma(p, r, 0.5LF);
    return fma(r * r, p, r);
}

/* exp(x + xl) for a finite x (xl a small correction, |xl| <= 1e-15 |x|): x = k ln2 + r with
 * |r| <= ln2 / 2 (r from an fma against ln2 to 106 bits: error below 2^-55), exp(r) from the
 * series, times 2^k. Overflows to inf and underflows to 0 through the scaling. */
double m64_exp_dd(double x, double xl) {
    double k = roundEven(x * M64_INV_LN2);
    double r = fma(-k, M64_LN2_HI, x);
    r += fma(-k, M64_LN2_LO, xl);
    return m64_scalbn(1.0LF + m64_expm1_poly(r), int(k));
}

double m_exp(double x) {
    if (isnan(x)) return x;
    if (x > 709.782712893384LF) return m64_inf(); /* ln(DBL_MAX) = 709.78271289338399... */
    if (x < -745.2LF) return 0.0LF;               /* below half the least subnormal */
    if (m64_below(x, 0x3c800000u)) return 1.0LF + x; /* |x| < 2^-55 */
    return m64_exp_dd(x, 0.0LF);
}

/* expm1: the series for |x| <= 0.35; else x = k ln2 + r and 2^k (1 + expm1(r)) - 1 arranged
 * so that the subtraction of 1 is exact. */
double m_expm1(double x) {
    if (isnan(x)) return x;
    if (x > 709.782712893384LF) return m64_inf();
    if (x < -40.0LF) return -1.0LF; /* exp(-40) is below half an ulp of 1 */
    if (m64_below(x, 0x3c800000u)) return x; /* |x| < 2^-55, also subnormals */
    if (abs(x) <= 0.34LF) return m64_expm1_poly(x);
    double k = roundEven(x * M64_INV_LN2);
    double r = fma(-k, M64_LN2_HI, x);
    r = fma(-k, M64_LN2_LO, r);
    double e = m64_expm1_poly(r);
    int ki = int(k);
    if (ki == 0) return e;
    if (ki < 0) { /* 2^k e + (2^k - 1), 2^k - 1 exact for k >= -53 */
        double t = m64_pow2(ki);
        return fma(t, e, t - 1.0LF);
    }
    if (ki <= 52) return (e + (1.0LF - m64_pow2(-ki))) * m64_pow2(ki); /* 1 - 2^-k exact */
    return m64_scalbn(1.0LF + e, ki) - 1.0LF;
}

/* ---- log family ---- */

/* log(1 + f) for f in [sqrt(1/2) - 1, sqrt(2) - 1]: with s = f / (2 + f), log(1 + f) =
 * 2 atanh(s) = 2s + 2s^3/3 + 2s^5/5 + ...; since 2s = f - s f this is f - s (f - R) with
 * R = s^2 (2/3 + 2s^2/5 + ...) (|s| <= 0.1716: 11 terms, truncation below 1e-18). f is exact,
 * s's rounding only touches the O(f^2) part: within 1 ulp. Returns (value, rounding error of
 * the last subtraction) so that pow can carry 2 more digits. */
dvec2 m64_log1p_core(double f) {
    double s = f / (2.0LF + f);
    double z = s * s;
    double p = 2.0LF / 23.0LF;
    p = fma(p, z, 2.0LF / 21.0LF);
    p = fma(p, z, 2.0LF / 19.0LF);
    p = fma(p, z, 2.0LF / 17.0LF);
    p = fma(p, z, 2.0LF / 15.0LF);
    p = fma(p, z, 2.0LF / 13.0LF);
    p = fma(p, z, 2.0LF / 11.0LF);
    p = fma(p, z, 2.0LF / 9.0LF);
    p = fma(p, z, 2.0LF / 7.0LF);
    p = fma(p, z, 2.0LF / 5.0LF);
    p = fma(p, z, 2.0LF / 3.0LF);
    double h = s * (f - z * p);
    double v = f - h;
    return dvec2(v, (f - v) - h);
}

/* log(x) for finite x > 0 as k ln2 + log(1 + f): x = 2^k (1 + f), 1 + f in [sqrt(1/2),
 * sqrt(2)). Returns dvec2(k, f). */
dvec2 m64_log_split(double x) {
    int k = m64_exponent(x);
    double m = m64_mantissa(x);
    if (m < 0.7071067811865476LF) {
        m *= 2.0LF;
        k -= 1;
    }
    return dvec2(double(k), m - 1.0LF);
}

/* log's special arguments: NaN, +-0 (read from the bits: a subnormal is not 0), negatives,
 * +inf. Returns the answer for those, 0 (never such an answer) for the ordinary x > 0. */
double m64_log_special(double x) {
    if (isnan(x)) return x;
    if ((m64_hi(x) & 0x7fffffffu) == 0u && unpackDouble2x32(x).x == 0u) return -m64_inf();
    if (m_signbit(x)) return m64_nan();
    if (isinf(x)) return x;
    return 0.0LF;
}

double m_log(double x) {
    double sp = m64_log_special(x);
    if (sp != 0.0LF) return sp;
    dvec2 kf = m64_log_split(x);
    dvec2 l = m64_log1p_core(kf.y);
    return fma(kf.x, M64_LN2_HI, l.x + fma(kf.x, M64_LN2_LO, l.y));
}

double m_log2(double x) {
    double sp = m64_log_special(x);
    if (sp != 0.0LF) return sp;
    dvec2 kf = m64_log_split(x);
    dvec2 l = m64_log1p_core(kf.y);
    /* log(1 + f) / ln 2 with 1/ln2 = 1.4426950408889634 + 2.0355273740931033e-17 */
    return kf.x + fma(l.x, 1.4426950408889634LF, fma(l.x, 2.0355273740931033e-17LF,
                                                     l.y * 1.4426950408889634LF));
}

double m_log10(double x) {
    double sp = m64_log_special(x);
    if (sp != 0.0LF) return sp;
    dvec2 kf = m64_log_split(x);
    dvec2 l = m64_log1p_core(kf.y);
    /* k log10(2) + log(1 + f) / ln 10, both constants to 106 bits */
    double lo = fma(l.x, 1.098319650216765e-17LF, l.y * 0.4342944819032518LF) +
                kf.x * -2.8037281277851704e-18LF;
    return fma(kf.x, 0.3010299956639812LF, fma(l.x, 0.4342944819032518LF, lo));
}

/* log1p: the core directly for 1 + x in [sqrt(1/2), sqrt(2)); else u = 1 + x rounded, c the
 * rounding error (1 + x = u + c exactly) and log(1 + x) = log(u) + c / u. */
double m_log1p(double x) {
    if (isnan(x)) return x;
    if (x == -1.0LF) return -m64_inf();
    if (x < -1.0LF) return m64_nan();
    if (isinf(x)) return x;
    if (m64_below(x, 0x3c900000u)) return x; /* |x| < 2^-54: x - x^2/2 rounds to x */
    if (x > -0.2928932188134524LF && x < 0.4142135623730950LF) return m64_log1p_core(x).x;
    double u = 1.0LF + x;
    double c = u > 2.0LF ? 1.0LF - (u - x) : x - (u - 1.0LF);
    dvec2 kf = m64_log_split(u);
    dvec2 l = m64_log1p_core(kf.y);
    return fma(kf.x, M64_LN2_HI, l.x + (fma(kf.x, M64_LN2_LO, l.y) + c / u));
}

/* ---- trigonometric ---- */

/* x = n pi/2 + (r + rl) for finite x with |x| < 2^50: n = nearest integer to x 2/pi, then
 * x - n pi/2 with pi/2 = C1 + C2 + C3 (159 bits): n C1 is split exactly into p + pe by an fma,
 * x - p is exact (p within a factor 2 of x), and the small rest pe + n C2 + n C3 is summed with
 * errors of order n 2^-106. Returns dvec3(r, rl, n). */
dvec3 m64_rem_pio2(double x) {
    double n = roundEven(x * 0.6366197723675814LF);
    double p = n * 1.5707963267948966LF;
    double pe = fma(n, 1.5707963267948966LF, -p);
    double t = x - p;
    double w = fma(n, -1.4973849048591698e-33LF, fma(n, 6.123233995736766e-17LF, pe));
    double r = t - w;
    return dvec3(r, (t - r) - w, n);
}

/* sin(r + rl) for |r| <= 0.8: Taylor series to r^21 (truncation below 1e-19). */
double m64_sin_kernel(double r, double rl) {
    double z = r * r;
    double p = -1.0LF / 51090942171709440000.0LF; /* -1/21! */
    p = fma(p, z, 1.0LF / 121645100408832000.0LF);
    p = fma(p, z, -1.0LF / 355687428096000.0LF);
    p = fma(p, z, 1.0LF / 1307674368000.0LF);
    p = fma(p, z, -1.0LF / 6227020800.0LF);
    p = fma(p, z, 1.0LF / 39916800.0LF);
    p = fma(p, z, -1.0LF / 362880.0LF);
    p = fma(p, z, 1.0LF / 5040.0LF);
    p = fma(p, z, -1.0LF / 120.0LF);
    p = fma(p, z, 1.0LF / 6.0LF);
    /* r - r^3 p' + rl (1 - r^2/2), p' = 1/3! - r^2/5! + ... */
    return r - (r * z * p - rl * (1.0LF - 0.5LF * z));
}

/* cos(r + rl) for |r| <= 0.8: Taylor series to r^22; 1 - r^2/2 summed as (1 - h) + (rest)
 * with the rounding of 1 - h carried. */
double m64_cos_kernel(double r, double rl) {
    double z = r * r;
    double p = -1.0LF / 1124000727777607680000.0LF; /* -1/22! */
    p = fma(p, z, 1.0LF / 2432902008176640000.0LF);
    p = fma(p, z, -1.0LF / 6402373705728000.0LF);
    p = fma(p, z, 1.0LF / 20922789888000.0LF);
    p = fma(p, z, -1.0LF / 87178291200.0LF);
    p = fma(p, z, 1.0LF / 479001600.0LF);
    p = fma(p, z, -1.0LF / 3628800.0LF);
    p = fma(p, z, 1.0LF / 40320.0LF);
    p = fma(p, z, -1.0LF / 720.0LF);
    p = fma(p, z, 1.0LF / 24.0LF);
    double h = 0.5LF * z;
    double w = 1.0LF - h;
    double e = ((1.0LF - w) - h); /* rounding of w */
    return w + (e + (z * z * p - r * rl));
}

/* The quadrant (n mod 4) of a reduction. */
int m64_quadrant(double n) { return int(n - 4.0LF * floor(n * 0.25LF)); }

/* Arguments beyond 2^50 would need the bits of 2/pi (Payne and Hanek's reduction), which is
 * not done: their results lose accuracy (C's libm's stay exact there). */
dvec3 m64_reduce(double x) { return m64_rem_pio2(x); }

double m_sin(double x) {
    if (isnan(x) || isinf(x)) return m64_nan(); /* not x - x: compilers fold it to 0 */
    if (m64_below(x, 0x3e400000u)) return x; /* |x| < 2^-27: sin x = x within half an ulp */
    dvec3 red = m64_reduce(x);
    int q = m64_quadrant(red.z);
    double v = (q & 1) == 0 ? m64_sin_kernel(red.x, red.y) : m64_cos_kernel(red.x, red.y);
    return q >= 2 ? -v : v;
}

double m_cos(double x) {
    if (isnan(x) || isinf(x)) return m64_nan(); /* not x - x: compilers fold it to 0 */
    if (m64_below(x, 0x3e400000u)) return 1.0LF;
    dvec3 red = m64_reduce(x);
    int q = m64_quadrant(red.z);
    double v = (q & 1) == 0 ? m64_cos_kernel(red.x, red.y) : m64_sin_kernel(red.x, red.y);
    return (q == 1 || q == 2) ? -v : v;
}

double m_tan(double x) {
    if (isnan(x) || isinf(x)) return m64_nan(); /* not x - x: compilers fold it to 0 */
    if (m64_below(x, 0x3e400000u)) return x;
    dvec3 red = m64_reduce(x);
    double s = m64_sin_kernel(red.x, red.y), c = m64_cos_kernel(red.x, red.y);
    return (m64_quadrant(red.z) & 1) == 0 ? s / c : -c / s;
}

/* ---- inverse trigonometric ---- */

/* atan(j/8), j = 0..8 */
double m64_atan_tab(int j) {
    switch (j) {
    case 1: return 0.12435499454676144LF;
    case 2: return 0.24497866312686414LF;
    case 3: return 0.35877067027057225LF;
    case 4: return 0.4636476090008061LF;
    case 5: return 0.5585993153435624LF;
    case 6: return 0.6435011087932844LF;
    case 7: return 0.7188299996216245LF;
    case 8: return 0.7853981633974483LF;
    }
    return 0.0LF;
}

/* atan(a) for a >= 0 (inf included): a > 1 as pi/2 - atan(1/a); then y in [0, 1] as
 * atan(c) + atan((y - c) / (1 + c y)) with c = j/8 the nearest eighth, |t| <= 1/16 and atan(t)
 * by its Taylor series to t^17 (truncation below 1e-22). */
double m64_atan_pos(double a) {
    bool inv = a > 1.0LF;
    double y = inv ? 1.0LF / a : a;
    double c = roundEven(y * 8.0LF);
    int j = int(c);
    c *= 0.125LF;
    double t = (y - c) / fma(c, y, 1.0LF);
    double z = t * t;
    double p = 1.0LF / 17.0LF;
    p = fma(p, -z, 1.0LF / 15.0LF);
    p = fma(p, -z, 1.0LF / 13.0LF);
    p = fma(p, -z, 1.0LF / 11.0LF);
    p = fma(p, -z, 1.0LF / 9.0LF);
    p = fma(p, -z, 1.0LF / 7.0LF);
    p = fma(p, -z, 1.0LF / 5.0LF);
    p = fma(p, -z, 1.0LF / 3.0LF);
    double r = m64_atan_tab(j) + (t - t * z * p);
    if (inv) r = (1.5707963267948966LF - r) + 6.123233995736766e-17LF;
    return r;
}

double m_atan(double x) {
    if (isnan(x)) return x;
    if (m64_below(x, 0x3e300000u)) return x; /* |x| < 2^-28 */
    return m_copysign(m64_atan_pos(abs(x)), x);
}

/* asin x = atan(x / sqrt(1 - x^2)), 1 - x^2 = (1 - |x|)(1 + |x|) with 1 - |x| exact near 1;
 * the relative errors of the quotient shrink through atan. */
double m_asin(double x) {
    if (isnan(x)) return x;
    double a = abs(x);
    if (a > 1.0LF) return m64_nan();
    if (m64_below(x, 0x3e300000u)) return x;
    return m_copysign(m64_atan_pos(a / sqrt((1.0LF - a) * (1.0LF + a))), x);
}

/* acos x = 2 atan(sqrt((1 - x) / (1 + x))): 1 - x exact near 1, 1 + x exact near -1;
 * x = -1 gives 2 atan(inf) = pi. */
double m_acos(double x) {
    if (isnan(x)) return x;
    if (abs(x) > 1.0LF) return m64_nan();
    return 2.0LF * m64_atan_pos(sqrt((1.0LF - x) / (1.0LF + x)));
}

double m_atan2(double y, double x) {
    if (isnan(x) || isnan(y)) return x + y;
    const double PI = 3.141592653589793LF, PI_LO = 1.2246467991473532e-16LF;
    bool yz = m64_below(y, 0x00100000u) && (unpackDouble2x32(y).x | (m64_hi(y) & 0xfffffu)) == 0u;
    bool xz = m64_below(x, 0x00100000u) && (unpackDouble2x32(x).x | (m64_hi(x) & 0xfffffu)) == 0u;
    if (yz) return m_signbit(x) ? m_copysign(PI, y) : y;
    if (isinf(x) && isinf(y)) return m_copysign(x > 0.0LF ? 0.25LF * PI : 0.75LF * PI, y);
    if (isinf(x)) return x > 0.0LF ? m_copysign(0.0LF, y) : m_copysign(PI, y);
    if (isinf(y) || xz) return m_copysign(0.5LF * PI, y);
    /* |y/x| may overflow (atan = pi/2) or underflow (the quotient is the answer) */
    double a = m64_atan_pos(abs(y) / abs(x));
    if (m_signbit(x)) a = (PI - a) + PI_LO;
    return m_copysign(a, y);
}

/* ---- hyperbolic ---- */

/* sinh = (e + e / (e + 1)) / 2 with e = expm1(|x|) (no cancellation); exp(|x|) / 2 above 22,
 * and exp(|x| / 2)^2 / 2 near overflow. */
double m_sinh(double x) {
    if (isnan(x) || isinf(x)) return x;
    double a = abs(x);
    if (m64_below(x, 0x3e300000u)) return x;
    double r;
    if (a < 22.0LF) {
        double e = m_expm1(a);
        r = 0.5LF * (e + e / (e + 1.0LF));
    } else if (a < 709.0LF) {
        r = 0.5LF * m_exp(a);
    } else {
        double h = m_exp(0.5LF * a);
        r = (0.5LF * h) * h;
    }
    return m_copysign(r, x);
}

double m_cosh(double x) {
    if (isnan(x)) return x;
    double a = abs(x);
    if (a < 22.0LF) {
        double e = m_exp(a);
        return 0.5LF * e + 0.5LF / e;
    }
    if (a < 709.0LF) return 0.5LF * m_exp(a);
    double h = m_exp(0.5LF * a);
    return (0.5LF * h) * h;
}

/* tanh = e / (e + 2) with e = expm1(2|x|); +-1 above 22 (1 - tanh < 2^-63 there). */
double m_tanh(double x) {
    if (isnan(x)) return x;
    double a = abs(x);
    if (m64_below(x, 0x3e300000u)) return x;
    if (a > 22.0LF) return m_copysign(1.0LF, x);
    double e = m_expm1(2.0LF * a);
    return m_copysign(e / (e + 2.0LF), x);
}

/* ---- pow, fmod ---- */

/* C's fmod, exact: long division on the binary exponents, subtracting |b| 2^k from high k to
 * low (each subtraction is exact: the remainder stays within [t, 2t) of the term t). */
double m_fmod(double a, double b) {
    if (isnan(a) || isnan(b) || isinf(a)) return m64_nan();
    if ((m64_hi(b) & 0x7fffffffu) == 0u && unpackDouble2x32(b).x == 0u) return m64_nan();
    if (isinf(b)) return a;
    double x = abs(a), y = abs(b);
    if (x < y) return a;
    int d = m64_exponent(x) - m64_exponent(y);
    double t = m64_scalbn(y, d);
    for (int k = d; k >= 0; k--) {
        if (x >= t) x -= t;
        t *= 0.5LF;
    }
    return m_copysign(x, a);
}

/* Is b (finite) an odd integer? Integers at or above 2^53 are all even. */
bool m64_is_odd(double b) {
    if (abs(b) >= 9007199254740992.0LF || trunc(b) != b) return false;
    double h = 0.5LF * b;
    return trunc(h) != h;
}

/* pow(a, b) = exp(b log|a|) with log|a| to about 70 bits (k ln2 + log1p(f) as a double pair)
 * and the product b log|a| kept as a pair: the exponent's error stays below 2^-62 |b log a|;
 * C99's special cases first. */
double m_pow(double a, double b) {
    if (b == 0.0LF || a == 1.0LF) return 1.0LF;
    if (isnan(a) || isnan(b)) return a + b;
    bool odd = !isinf(b) && m64_is_odd(b);
    bool az = (m64_hi(a) & 0x7fffffffu) == 0u && unpackDouble2x32(a).x == 0u;
    if (az) {
        if (b < 0.0LF) return odd ? m_copysign(m64_inf(), a) : m64_inf();
        return odd ? a : 0.0LF;
    }
    if (isinf(b)) {
        double m = abs(a);
        if (m == 1.0LF) return 1.0LF;
        return (m > 1.0LF) == (b > 0.0LF) ? m64_inf() : 0.0LF;
    }
    if (isinf(a)) {
        double r = b > 0.0LF ? m64_inf() : 0.0LF;
        return (a < 0.0LF && odd) ? -r : r;
    }
    bool neg = false;
    if (m_signbit(a)) {
        if (trunc(b) != b) return m64_nan();
        neg = odd;
    }
    dvec2 kf = m64_log_split(abs(a));
    dvec2 l = m64_log1p_core(kf.y);
    /* log|a| = k ln2 + l: k ln2 (k <= 1075 in size) with ln2's high part of 32 bits exact */
    double kh = kf.x * 0.6931471803691238LF, kl = kf.x * 1.9082149292705877e-10LF;
    double lh = kh + l.x;
    double ll = ((kh - lh) + l.x) + (l.y + kl); /* |kh| >= |l.x| when k != 0 */
    if (kf.x == 0.0LF) {
        lh = l.x;
        ll = l.y;
    }
    double yh = b * lh;
    double yl = fma(b, lh, -yh) + b * ll;
    double r;
    if (yh > 709.8LF) r = m64_inf();
    else if (yh < -745.2LF) r = 0.0LF;
    else r = m64_exp_dd(yh, yl);
    return neg ? -r : r;
}

/* ---- erf ---- */

/* erf x: for |x| < 3, erf x = 2/sqrt(pi) exp(-x^2) sum_n 2^n x^(2n+1) / (1 3 5 ... (2n+1))
 * (positive terms: no cancellation; up to 90 terms); for 3 <= |x| < 6, erf = 1 - erfc with
 * erfc x = exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...)))) (a continued fraction
 * evaluated from 60 levels down); 1 beyond 6. exp(-x^2) takes x^2 as an exact pair. */
double m_erf(double x) {
    if (isnan(x)) return x;
    double a = abs(x);
    if (a >= 6.0LF) return m_copysign(1.0LF, x);
    if (m64_below(x, 0x3e300000u)) return x * 1.1283791670955126LF; /* |x| < 2^-28 */
    double z = a * a, zl = fma(a, a, -z);
    double ex = m_exp(-z) * (1.0LF - zl); /* exp(-(z + zl)) */
    double r;
    if (a < 3.0LF) {
        double term = a, sum = a;
        for (int n = 0; n < 90; n++) {
            term *= 2.0LF * z / double(2 * n + 3);
            sum += term;
            if (term < sum * 1e-17LF) break;
        }
        r = 1.1283791670955126LF * ex * sum;
    } else {
        double f = a;
        for (int n = 60; n >= 1; n--) f = a + (0.5LF * double(n)) / f;
        r = 1.0LF - 0.5641895835477563LF * ex / f;
    }
    return m_copysign(r, x);
}

double m_sqrt(double x) { return sqrt(x); }
double m_floor(double x) { return floor(x); }
double m_ceil(double x) { return ceil(x); }
double m_rint(double x) { return roundEven(x); }
