/*
 * test_cpu_unary.c — the cpu backend's unary kernel (src/backends/cpu/unary.c) against ref's,
 * called on the same host views: every float op in f32, f64, f16 and bf16, and logical_not
 * on bool, over the layouts the kernel claims: contiguous runs of odd sizes (below and above
 * the vector width, the f16 block and the thread grain, empty), 0-d, transposed, sliced with
 * a step and an offset, flipped (negative strides), expanded (stride 0), permuted rank 3,
 * strided outputs, and in place. Values cover each op's domain plus its far range and the
 * special values. Tolerances: f64 1e-15 relative (ref's libm, the same calls); f32 8 ulps
 * (vmath.h's bounds, 6 at most, plus ref's rounding of its double); f16/bf16 one unit of
 * the half type. And no case may reach ref's loop (the fallback counter stays 0 for floats).
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/fallback.h"
#include "ember/ember.h"

static int failures;

static double ld(const void *buf, em_dtype dt, int64_t i) {
    switch (dt) {
    case EM_F32: return ((const float *)buf)[i];
    case EM_F64: return ((const double *)buf)[i];
    case EM_F16: return em_f16_to_f32(((const uint16_t *)buf)[i]);
    case EM_BF16: return em_bf16_to_f32(((const uint16_t *)buf)[i]);
    case EM_BOOL: return ((const uint8_t *)buf)[i];
    case EM_I32: return ((const int32_t *)buf)[i];
    default: return 0;
    }
}

static void st(void *buf, em_dtype dt, int64_t i, double v) {
    switch (dt) {
    case EM_F32: ((float *)buf)[i] = (float)v; break;
    case EM_F64: ((double *)buf)[i] = v; break;
    case EM_F16: ((uint16_t *)buf)[i] = em_f32_to_f16((float)v); break;
    case EM_BF16: ((uint16_t *)buf)[i] = em_f32_to_bf16((float)v); break;
    case EM_BOOL: ((uint8_t *)buf)[i] = v != 0; break;
    case EM_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    default: break;
    }
}

/* Distance in units of the last place, for same-signed finite values of dt (bit patterns). */
static double units(double g, double w, em_dtype dt) {
    if (isnan(w)) return isnan(g) ? 0 : INFINITY;
    if (isnan(g)) return INFINITY;
    if (g == w) return 0;
    if ((g < 0) != (w < 0)) {
        /* across zero: both must be tiny */
        return fabs(g - w) < (dt == EM_F64 ? 1e-300 : 1e-37) ? 0 : INFINITY;
    }
    switch (dt) {
    case EM_F64: return fabs(g - w) / (fabs(w) * DBL_EPSILON);
    case EM_F32: {
        float gf = (float)g, wf = (float)w;
        uint32_t a, b;
        memcpy(&a, &gf, 4);
        memcpy(&b, &wf, 4);
        return a > b ? a - b : b - a;
    }
    case EM_F16: {
        int a = em_f32_to_f16((float)g) & 0x7fff, b = em_f32_to_f16((float)w) & 0x7fff;
        return abs(a - b);
    }
    case EM_BF16: {
        int a = em_f32_to_bf16((float)g) & 0x7fff, b = em_f32_to_bf16((float)w) & 0x7fff;
        return abs(a - b);
    }
    default: return g == w ? 0 : INFINITY;
    }
}

static double tol(em_dtype dt) {
    switch (dt) {
    case EM_F64: return 4; /* same libm calls: equal but for the odd double rounding */
    case EM_F32: return 8;
    case EM_F16: case EM_BF16: return 1;
    default: return 0;
    }
}

static const char *op_name(em_unary_op op) {
    static const char *n[] = {"neg", "abs", "exp", "log", "log1p", "sqrt", "rsqrt", "sin",
                              "cos", "tanh", "sigmoid", "relu", "gelu", "silu", "erf", "floor",
                              "ceil", "round", "recip", "sign", "clamp", "logical_not",
                              "softplus", "tan", "asin", "acos", "atan", "sinh", "cosh",
                              "expm1", "log2", "log10", "isnan", "isinf", "isfinite",
                              "nan_to_num"};
    _Static_assert(sizeof n / sizeof n[0] == EM_UN_COUNT, "a name per op");
    return op < EM_UN_COUNT ? n[op] : "?";
}

static uint64_t rng = 0x243f6a8885a308d3ull;
static double urand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* A value for element i: mostly the op's usual range, some far out, some special. */
static double value(em_unary_op op, int64_t i) {
    static const double sp[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e-40, -1e-40, 1.0, -1.0,
                                88.5, -88.5, 100.0, -100.0, 1e30, -1e30, 0.5, -0.5};
    if (i % 23 == 5) return sp[(i / 23) % (int64_t)(sizeof sp / sizeof sp[0])];
    double u = urand();
    if (i % 7 == 3) return (u - 0.5) * 60.0; /* far: tanh/erf/gelu/sigmoid saturate */
    switch (op) {
    case EM_UN_LOG: case EM_UN_SQRT: case EM_UN_RSQRT: case EM_UN_LOG2: case EM_UN_LOG10:
        return (i & 1) ? u * 10 : u * 1e-3;
    case EM_UN_ASIN: case EM_UN_ACOS: return (u - 0.5) * 2.1;
    case EM_UN_TAN: return (u - 0.5) * 3.2;
    case EM_UN_EXPM1: return (i & 1) ? (u - 0.5) * 3 : (u - 0.5) * 1e-4;
    case EM_UN_LOG1P: return (i & 1) ? u * 10 - 0.99 : (u - 0.5) * 1e-5;
    default: return (u - 0.5) * 12.0;
    }
}

typedef struct layout {
    const char *name;
    int rank;
    int64_t shape[4];
    int64_t in_strides[4], in_off; /* of the input view, into a buffer of in_n elements */
    int64_t out_strides[4], out_off;
    int64_t in_n, out_n;
    int inplace; /* out is the input's view */
} layout;

static void set_contig(int64_t *strides, const int64_t *shape, int rank) {
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        strides[d] = s;
        s *= shape[d];
    }
}

static void run_case(em_unary_op op, em_dtype dt, const layout *l) {
    /* isnan / isinf / isfinite write bool: not in place */
    const em_dtype odt = em_unary_op_is_bool(op) ? EM_BOOL : dt;
    if (l->inplace && odt != dt) return;
    size_t es = em_dtype_size(dt), eso = em_dtype_size(odt);
    int64_t nin = l->in_n ? l->in_n : 1, nout = l->out_n ? l->out_n : 1;
    void *in = malloc((size_t)nin * es), *in2 = malloc((size_t)nin * es);
    void *oc = malloc((size_t)nout * eso), *orf = malloc((size_t)nout * eso);
    for (int64_t i = 0; i < nin; i++) st(in, dt, i, dt == EM_BOOL ? (urand() < 0.5) : value(op, i));
    memcpy(in2, in, (size_t)nin * es);
    for (int64_t i = 0; i < nout; i++) {
        st(oc, odt, i, -7.0);
        st(orf, odt, i, -7.0);
    }
    em_view vi = {in, dt, l->rank, {0}, {0}, l->in_off};
    em_view vi2 = vi;
    vi2.buf = in2;
    memcpy(vi.shape, l->shape, sizeof l->shape);
    memcpy(vi.strides, l->in_strides, sizeof l->in_strides);
    memcpy(vi2.shape, l->shape, sizeof l->shape);
    memcpy(vi2.strides, l->in_strides, sizeof l->in_strides);
    em_view vc = vi, vr = vi2;
    if (!l->inplace) {
        vc.buf = oc;
        vr.buf = orf;
        vc.dtype = vr.dtype = odt;
        vc.offset = vr.offset = l->out_off;
        memcpy(vc.strides, l->out_strides, sizeof l->out_strides);
        memcpy(vr.strides, l->out_strides, sizeof l->out_strides);
    }
    double params[3] = {-1.25, 2.5, 0};
    if (op == EM_UN_SOFTPLUS) params[0] = 0.75, params[1] = 12.0; /* beta, threshold */
    if (op == EM_UN_NAN_TO_NUM) params[0] = 0.5, params[1] = 1e4, params[2] = -2e4;
    const bool takes = op == EM_UN_CLAMP || op == EM_UN_SOFTPLUS || op == EM_UN_NAN_TO_NUM;
    em_status s1 = cpu_unary(NULL, op, &vc, &vi, takes ? params : NULL);
    em_status s2 = cpu_ref()->unary(NULL, op, &vr, &vi2, takes ? params : NULL);
    if (s1 != EM_OK || s2 != EM_OK) {
        printf("FAIL %s %s %s: status %d / %d\n", op_name(op), em_dtype_name(dt), l->name, s1, s2);
        failures++;
    }
    /* every element of the output buffers (untouched ones included) */
    const void *gc = l->inplace ? in : oc, *gr = l->inplace ? in2 : orf;
    int64_t nb = l->inplace ? nin : nout;
    double worst = 0;
    int64_t wi = -1;
    for (int64_t i = 0; i < nb; i++) {
        const em_dtype bdt = l->inplace ? dt : odt;
        double g = ld(gc, bdt, i), w = ld(gr, bdt, i);
        double u = units(g, w, bdt);
        /* ref's gelu, 0.5 x (1 + erf(x/√2)) in double, cancels to 0 below x = -8.3, where
         * cpu's (through erfc) keeps the tail: an absolute error of x 2^-53 on ref's side */
        if (op == EM_UN_GELU && fabs(g - w) < 1e-14) u = 0;
        if (u > worst) {
            worst = u;
            wi = i;
        }
    }
    if (worst > tol(dt)) {
        printf("FAIL %s %s %s: element %lld: cpu %.9g, ref %.9g (%.3g units)\n", op_name(op),
               em_dtype_name(dt), l->name, (long long)wi, ld(gc, l->inplace ? dt : odt, wi),
               ld(gr, l->inplace ? dt : odt, wi), worst);
        failures++;
    }
    free(in);
    free(in2);
    free(oc);
    free(orf);
}

static int nlayouts;
static layout layouts[64];

static void add_contig(const char *name, int64_t n) {
    layout *l = &layouts[nlayouts++];
    memset(l, 0, sizeof *l);
    l->name = name;
    l->rank = 1;
    l->shape[0] = n;
    l->in_strides[0] = l->out_strides[0] = 1;
    l->in_n = l->out_n = n;
}

static void make_layouts(void) {
    add_contig("n=0", 0);
    add_contig("n=1", 1);
    add_contig("n=7", 7);
    add_contig("n=8", 8);
    add_contig("n=17", 17);
    add_contig("n=1023", 1023);
    add_contig("n=1025", 1025);
    add_contig("n=70001", 70001); /* above the thread grain */
    layout *l;
    /* 0-d */
    l = &layouts[nlayouts++];
    memset(l, 0, sizeof *l);
    l->name = "0-d";
    l->in_n = l->out_n = 1;
    /* transposed input [37, 29] of a [29, 37] buffer, contiguous output */
    l = &layouts[nlayouts++];
    memset(l, 0, sizeof *l);
    l->name = "transposed-in";
    l->rank = 2;
    l->shape[0] = 37;
    l->shape[1] = 29;
    l->in_strides[0] = 1;
    l->in_strides[1] = 37;
    set_contig(l->out_strides, l->shape, 2);
    l->in_n = l->out_n = 37 * 29;
    /* the same with a transposed (strided) output too */
    layouts[nlayouts] = *l;
    l = &layouts[nlayouts++];
    l->name = "transposed-in-out";
    l->out_strides[0] = 1;
    l->out_strides[1] = 37;
    /* sliced with step 3 and an offset (1-d, 2500 of 7600) into a strided output (step 2) */
    l = &layouts[nlayouts++];
    memset(l, 0, sizeof *l);
    l->name = "slice-step3-offset";
    l->rank = 1;
    l->shape[0] = 2500;
    l->in_strides[0] = 3;
    l->in_off = 5;
    l->in_n = 7600;
    l->out_strides[0] = 2;
    l->out_off = 1;
    l->out_n = 5002;
    /* flipped: negative strides, [40, 31] */
    l = &layouts[nlayouts++];
    memset(l, 0, sizeof *l);
    l->name = "flipped";
    l->rank = 2;
    l->shape[0] = 40;
    l->shape[1] = 31;
    l->in_strides[0] = -31;
    l->in_strides[1] = -1;
    l->in_off = 40 * 31 - 1;
    set_contig(l->out_strides, l->shape, 2);
    l->in_n = l->out_n = 40 * 31;
    /* expanded: [1, 13] broadcast to [50, 13] (stride 0) */
    l = &layouts[nlayouts++];
    memset(l, 0, sizeof *l);
    l->name = "expanded";
    l->rank = 2;
    l->shape[0] = 50;
    l->shape[1] = 13;
    l->in_strides[0] = 0;
    l->in_strides[1] = 1;
    l->in_n = 13;
    set_contig(l->out_strides, l->shape, 2);
    l->out_n = 50 * 13;
    /* permuted rank 3: [7, 5, 6] of a [5, 6, 7] buffer, offset 3; rows of 6 (short runs) */
    l = &layouts[nlayouts++];
    memset(l, 0, sizeof *l);
    l->name = "permuted-3d";
    l->rank = 3;
    l->shape[0] = 7;
    l->shape[1] = 5;
    l->shape[2] = 6;
    l->in_strides[0] = 1;
    l->in_strides[1] = 42;
    l->in_strides[2] = 7;
    l->in_off = 3;
    l->in_n = 3 + 210;
    set_contig(l->out_strides, l->shape, 3);
    l->out_n = 210;
    /* large strided, above the grain: [300, 301] transposed */
    l = &layouts[nlayouts++];
    memset(l, 0, sizeof *l);
    l->name = "transposed-large";
    l->rank = 2;
    l->shape[0] = 300;
    l->shape[1] = 301;
    l->in_strides[0] = 1;
    l->in_strides[1] = 300;
    set_contig(l->out_strides, l->shape, 2);
    l->in_n = l->out_n = 300 * 301;
    /* in place: contiguous, and a strided view written through its strides */
    add_contig("inplace-contig", 4099);
    layouts[nlayouts - 1].inplace = 1;
    l = &layouts[nlayouts++];
    memset(l, 0, sizeof *l);
    l->name = "inplace-strided";
    l->rank = 2;
    l->shape[0] = 33;
    l->shape[1] = 20;
    l->in_strides[0] = 1;
    l->in_strides[1] = 40; /* every other column of a [20, 40]-ish buffer, transposed */
    l->in_n = 40 * 20;
    l->inplace = 1;
}

int main(void) {
    make_layouts();
    cpu_fallback_reset();
    const em_dtype dts[] = {EM_F32, EM_F64, EM_F16, EM_BF16};
    for (size_t d = 0; d < 4; d++)
        for (int op = 0; op < EM_UN_COUNT; op++) {
            if (op == EM_UN_LOGICAL_NOT) continue;
            for (int k = 0; k < nlayouts; k++) run_case((em_unary_op)op, dts[d], &layouts[k]);
        }
    for (int k = 0; k < nlayouts; k++) run_case(EM_UN_LOGICAL_NOT, EM_BOOL, &layouts[k]);
    for (size_t d = 0; d < 4; d++)
        if (cpu_fallback_count(CPU_FB_UNARY, dts[d])) {
            printf("FAIL: %llu unary cases of %s ran ref's loop\n",
                   (unsigned long long)cpu_fallback_count(CPU_FB_UNARY, dts[d]),
                   em_dtype_name(dts[d]));
            failures++;
        }
    if (cpu_fallback_count(CPU_FB_UNARY, EM_BOOL)) {
        printf("FAIL: logical_not on bool ran ref's loop\n");
        failures++;
    }
    /* integers stay on ref (counted) and give its answers */
    run_case(EM_UN_NEG, EM_I32, &layouts[5]);
    run_case(EM_UN_ABS, EM_I32, &layouts[9]);
    if (!cpu_fallback_count(CPU_FB_UNARY, EM_I32)) {
        printf("FAIL: integer unary did not count a fallback\n");
        failures++;
    }
    printf("test_cpu_unary: %d layouts, %s\n", nlayouts, failures ? "FAIL" : "ok");
    return failures ? 1 : 0;
}
