/*
 * test_vmath.c — the accuracy of src/backends/cpu/vmath.h against libm in double: every
 * STRIDE-th f32 bit pattern (both signs, every exponent), every pattern in windows around the
 * edges of each function's pieces, special values (±0, ±inf, NaN, subnormals, the
 * overflow / underflow edges), and pow on a grid of bases and exponents, integer exponents
 * with negative bases included. Prints the max ulp error of each function and fails above
 * the bound vmath.h states. Built twice: with the compiler's default flags and (x86-64) with
 * the avx2 level's (FMA, where it skips itself when the CPU lacks AVX2/FMA).
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/vmath.h"

#define STRIDE 257u

typedef float (*f1)(float);
typedef double (*d1)(double);

static double r_exp(double x) { return exp(x); }
static double r_log(double x) { return log(x); }
static double r_log1p(double x) { return log1p(x); }
static double r_tanh(double x) { return tanh(x); }
static double r_erf(double x) { return erf(x); }
static double r_sigmoid(double x) { return x < 0 ? exp(x) / (1 + exp(x)) : 1 / (1 + exp(-x)); }
static double r_silu(double x) { return x * r_sigmoid(x); }
static double r_gelu(double x) {
    return x < 0 ? 0.5 * x * erfc(-x * 0.70710678118654752440)
                 : 0.5 * x * (1 + erf(x * 0.70710678118654752440));
}

/* cpu_*f wrappers, not inlined into one another's loops (the loops below are the test). */
static float v_exp(float x) { return cpu_expf(x); }
static float v_log(float x) { return cpu_logf(x); }
static float v_log1p(float x) { return cpu_log1pf(x); }
static float v_tanh(float x) { return cpu_tanhf(x); }
static float v_erf(float x) { return cpu_erff(x); }
static float v_sigmoid(float x) { return cpu_sigmoidf(x); }
static float v_silu(float x) { return cpu_siluf(x); }
static float v_gelu(float x) { return cpu_geluf(x); }

typedef struct fn {
    const char *name;
    f1 v;
    d1 r;
    double bound; /* ulps, as vmath.h states */
    float edges[8];
    int nedges;
    double max_ulp;
    float worst;
    long checked;
} fn;

static int failures;

/* The error of g against r in ulps of r (0 when g is r rounded to f32); -1 for a mismatch of
 * kind (NaN, inf, zero sign handled by the caller). Subnormal results: |g - r| <= 2^-140. */
static double ulp_err(float g, double r) {
    if (isnan(r)) return isnan(g) ? 0 : INFINITY;
    if (isnan(g)) return INFINITY;
    float rf = (float)r;
    if (g == rf) return 0;
    if (isinf(g)) return INFINITY;
    double a = fabs(r);
    if (a < FLT_MIN) return fabs((double)g - r) <= ldexp(1, -140) ? 0 : INFINITY;
    int e;
    frexp(a, &e); /* a in [2^(e-1), 2^e) */
    return fabs((double)g - r) / ldexp(1, e - 1 - 23);
}

static void check_one(fn *f, float x) {
    float g = f->v(x);
    double r = f->r((double)x);
    double u = ulp_err(g, r);
    f->checked++;
    if (u > f->max_ulp || (isinf(u) && !isinf(f->max_ulp))) {
        f->max_ulp = u;
        f->worst = x;
    }
}

static void sweep(fn *f) {
    for (uint64_t b = 0; b < (1ull << 32); b += STRIDE) check_one(f, cpu_u2f((uint32_t)b));
    for (int i = 0; i < f->nedges; i++) {
        uint32_t c = cpu_f2u(f->edges[i]);
        for (uint32_t d = 0; d < 65536; d++) {
            check_one(f, cpu_u2f(c + d - 32768));
            check_one(f, -cpu_u2f(c + d - 32768));
        }
    }
    /* around 0: the smallest magnitudes, subnormals included */
    for (uint32_t b = 0; b < (1u << 20); b++) {
        check_one(f, cpu_u2f(b));
        check_one(f, cpu_u2f(b | 0x80000000u));
    }
    int ok = f->max_ulp <= f->bound;
    printf("%-8s max %.3f ulp (bound %.1f) at x = %.9g (%a), %ld points%s\n", f->name, f->max_ulp,
           f->bound, (double)f->worst, (double)f->worst, f->checked, ok ? "" : "  FAIL");
    if (!ok) failures++;
}

/* Special values: exactly r rounded to f32, NaN for NaN, and the sign of a zero result. */
static void special(fn *f) {
    static const float xs[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, FLT_MIN, -FLT_MIN,
                               1e-45f, -1e-45f, FLT_MAX, -FLT_MAX, 1.0f, -1.0f, 88.72283f,
                               88.72284f, 88.7229f, -87.33654f, -87.34f, -103.97f, -103.98f,
                               -104.5f, 89.5f, 9.0f, -9.0f, 10.0f, 3.9f, 1.0f, 0.625f, -0.625f,
                               1.41421356f, -1.41421356f, -14.0f, -20.0f, 20.0f, -0.999999f,
                               -1.000001f, 16777216.0f, 1e30f, -14.5f, 14.5f, -14.499999f,
                               -14.500001f, -13.0f, -13.3f};
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
        float x = xs[i], g = f->v(x);
        double r = f->r((double)x);
        double u = ulp_err(g, r);
        int bad = u > f->bound;
        if (r == 0 && !(g == 0 && !!signbit(g) == !!signbit(r))) bad = 1;
        if (isinf(r) && g != (float)r) bad = 1;
        if (bad) {
            printf("%-8s special x = %a: got %a, want %a  FAIL\n", f->name, (double)x, (double)g,
                   r);
            failures++;
        }
    }
}

/* ---- pow ---- */

static int pow_bad(float a, float b, double *max_ulp, float *wa, float *wb) {
    float g = cpu_powf(a, b);
    double r = pow((double)a, (double)b);
    double u = ulp_err(g, r);
    if (r == 0 && !(g == 0 && !!signbit(g) == !!signbit(r))) u = INFINITY;
    /* exact where the result is a float (integer powers of small integers, ...) */
    if (!isnan(r) && !isinf(r) && (double)(float)r == r && g != (float)r) u = INFINITY;
    if (u > *max_ulp) {
        *max_ulp = u;
        *wa = a;
        *wb = b;
    }
    return u > 1.0;
}

static void test_pow(void) {
    double mu = 0;
    float wa = 0, wb = 0;
    long n = 0;
    /* a pseudo-random grid: bases over every exponent, exponents in [-40, 40] and integers */
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 4000000; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t ab = (uint32_t)(s >> 32) & 0x7fffffffu;
        float a = cpu_u2f(ab);
        if (!(a < INFINITY)) continue;
        float b = (float)((double)(int32_t)(s & 0xffffffu) / 16777216.0 * 80.0 - 40.0);
        if (i & 1) b = rintf(b);
        if (i & 2) a = -a;
        pow_bad(a, b, &mu, &wa, &wb);
        n++;
    }
    /* bases near 1 with large exponents (where log's error is magnified) */
    for (int i = 0; i < 200000; i++) {
        float a = cpu_u2f(0x3f800000u + (uint32_t)(i - 100000) * 7u);
        for (int j = 0; j < 5; j++) {
            float b = (float)(j * 2e5 - 4e5) + 0.37f;
            pow_bad(a, b, &mu, &wa, &wb);
            n++;
        }
    }
    /* integer exponents of integer and negative bases: exact when the result is a float */
    for (int ai = -40; ai <= 40; ai++)
        for (int bi = -30; bi <= 30; bi++) {
            pow_bad((float)ai, (float)bi, &mu, &wa, &wb);
            pow_bad((float)ai * 0.5f, (float)bi, &mu, &wa, &wb);
            n += 2;
        }
    int ok = mu <= 1.0;
    printf("%-8s max %.3f ulp (bound 1.0) at a = %a, b = %a, %ld points%s\n", "pow", mu,
           (double)wa, (double)wb, n, ok ? "" : "  FAIL");
    if (!ok) failures++;
    /* C99 Annex F special cases */
    static const float sv[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.5f, 2.0f, -2.0f, 3.0f, -3.0f,
                               2.5f, -2.5f, INFINITY, -INFINITY, NAN, 1e-45f, -1e-45f, FLT_MAX,
                               -FLT_MAX, 16777216.0f, 16777217.0f, -16777215.0f, 8388609.0f,
                               4194304.5f, 1e30f, -1e30f, 0.75f, 127.0f, -149.0f, 128.0f};
    int nsv = (int)(sizeof sv / sizeof sv[0]);
    for (int i = 0; i < nsv; i++)
        for (int j = 0; j < nsv; j++) {
            float a = sv[i], b = sv[j];
            float g = cpu_powf(a, b);
            double r = pow((double)a, (double)b);
            double u = ulp_err(g, r);
            int bad = u > 1.0 || (r == 0 && !(g == 0 && !!signbit(g) == !!signbit(r))) ||
                      (isinf(r) && g != (float)r) ||
                      ((double)(float)r == r && !isnan(r) && g != (float)r);
            if (bad) {
                printf("pow      special a = %a, b = %a: got %a, want %a  FAIL\n", (double)a,
                       (double)b, (double)g, r);
                failures++;
            }
        }
}

static int cpu_ok(void) {
#if defined(__x86_64__) && defined(__AVX2__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 1;
#endif
}

int main(void) {
    if (!cpu_ok()) {
        printf("test_vmath: this CPU lacks AVX2/FMA: skipped\n");
        return 77;
    }
    printf("test_vmath: %s FMA\n", CPU_HAVE_FMA ? "with" : "without");
    fn fns[] = {
        {"exp", v_exp, r_exp, 1.5, {88.72283f, -87.33654f, -103.97f, 1.0f}, 4, 0, 0, 0},
        {"log", v_log, r_log, 1.0, {1.0f, 0.70710678f, 1.41421356f, FLT_MIN}, 4, 0, 0, 0},
        {"log1p", v_log1p, r_log1p, 1.5, {1.0f, 5.9604645e-8f, 0.41421356f, 0.29289322f},
         4, 0, 0, 0},
        {"tanh", v_tanh, r_tanh, 2.0, {0.625f, 9.0f, 1e-4f}, 3, 0, 0, 0},
        {"sigmoid", v_sigmoid, r_sigmoid, 2.5, {88.0f, 16.0f, 1.0f}, 3, 0, 0, 0},
        {"silu", v_silu, r_silu, 3.5, {88.0f, 16.0f, 1.0f}, 3, 0, 0, 0},
        {"erf", v_erf, r_erf, 2.0, {1.0f, 2.5f, 3.9f, 1e-4f}, 4, 0, 0, 0},
        {"gelu", v_gelu, r_gelu, 7.5, {1.41421356f, 3.5355339f, 5.0f, 13.0f, 13.3f, 14.5f, 1e-3f},
         7, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
        sweep(&fns[i]);
        special(&fns[i]);
    }
    test_pow();
    printf("test_vmath: %s\n", failures ? "FAIL" : "ok");
    return failures ? 1 : 0;
}
