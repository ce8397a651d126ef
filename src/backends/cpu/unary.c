/* unary.c — the cpu backend's unary kernels for f32, f64, f16, bf16 (and logical_not on
 * bool), any layout. The file is compiled once per instruction-set level (isa.h).
 *   - f32: one loop per op over vmath.h's vectorizable functions (exp, log, log1p, tanh,
 *     sigmoid, silu, erf, gelu); sqrt / rsqrt / floor / ceil / round are instructions; sin and
 *     cos stay libm (in double, as before);
 *   - f64: libm per element where an op needs a function (ref's accuracy kept), plain loops
 *     for the rest;
 *   - f16 / bf16: blocks of CPU_HALF_BLOCK converted to f32 (half.h), the f32 loop, converted
 *     back: one rounding to the half type of a result within a few f32 ulps, where ref rounds
 *     its double result once (they differ by at most one half ulp, and only rarely);
 *   - strided operands (transposed, sliced, flipped, expanded inputs, strided outputs): blocks
 *     gathered through the strides onto the stack, the contiguous loop, scattered back.
 * The ops of issue 14 (softplus ... nan_to_num) run in unary_more.h. Integer dtypes go to
 * ref's loop (fallback.c's unary row). */
#include <math.h>
#include <string.h>

#include "cpu.h"
#include "fallback.h"
#include "half.h"
#include "unary_more.h"
#include "vmath.h"

#define CPU_GRAIN (1 << 15)

/* ---- the contiguous loops ---- */

static void unary_f32(em_unary_op op, float *restrict o, const float *restrict x, int64_t n,
                      float lo, float hi) {
    switch (op) {
    case EM_UN_NEG: for (int64_t i = 0; i < n; i++) o[i] = -x[i]; break;
    case EM_UN_ABS: for (int64_t i = 0; i < n; i++) o[i] = x[i] < 0 ? -x[i] : x[i]; break;
    case EM_UN_EXP: for (int64_t i = 0; i < n; i++) o[i] = cpu_expf(x[i]); break;
    case EM_UN_LOG: for (int64_t i = 0; i < n; i++) o[i] = cpu_logf(x[i]); break;
    case EM_UN_LOG1P: for (int64_t i = 0; i < n; i++) o[i] = cpu_log1pf(x[i]); break;
    case EM_UN_SQRT: for (int64_t i = 0; i < n; i++) o[i] = sqrtf(x[i]); break;
    case EM_UN_RSQRT: for (int64_t i = 0; i < n; i++) o[i] = 1.0f / sqrtf(x[i]); break;
    case EM_UN_SIN: for (int64_t i = 0; i < n; i++) o[i] = (float)sin(x[i]); break;
    case EM_UN_COS: for (int64_t i = 0; i < n; i++) o[i] = (float)cos(x[i]); break;
    case EM_UN_TANH: for (int64_t i = 0; i < n; i++) o[i] = cpu_tanhf(x[i]); break;
    case EM_UN_SIGMOID: for (int64_t i = 0; i < n; i++) o[i] = cpu_sigmoidf(x[i]); break;
    case EM_UN_RELU:
        for (int64_t i = 0; i < n; i++) o[i] = x[i] > 0 ? x[i] : (x[i] != x[i] ? x[i] : 0);
        break;
    case EM_UN_GELU: for (int64_t i = 0; i < n; i++) o[i] = cpu_geluf(x[i]); break;
    case EM_UN_SILU: for (int64_t i = 0; i < n; i++) o[i] = cpu_siluf(x[i]); break;
    case EM_UN_ERF: for (int64_t i = 0; i < n; i++) o[i] = cpu_erff(x[i]); break;
    case EM_UN_FLOOR: for (int64_t i = 0; i < n; i++) o[i] = floorf(x[i]); break;
    case EM_UN_CEIL: for (int64_t i = 0; i < n; i++) o[i] = ceilf(x[i]); break;
    case EM_UN_ROUND: for (int64_t i = 0; i < n; i++) o[i] = nearbyintf(x[i]); break;
    case EM_UN_RECIP: for (int64_t i = 0; i < n; i++) o[i] = 1.0f / x[i]; break;
    case EM_UN_SIGN:
        for (int64_t i = 0; i < n; i++) o[i] = x[i] > 0 ? 1.0f : x[i] < 0 ? -1.0f : x[i];
        break;
    case EM_UN_CLAMP: /* NaN clamps through: lo/hi compare false, like the ref kernel */
        for (int64_t i = 0; i < n; i++) {
            float v = x[i] < lo ? lo : x[i];
            o[i] = v > hi ? hi : v;
        }
        break;
    default: break;
    }
}

static void unary_f64(em_unary_op op, double *restrict o, const double *restrict x, int64_t n,
                      double lo, double hi) {
    switch (op) {
    case EM_UN_NEG: for (int64_t i = 0; i < n; i++) o[i] = -x[i]; break;
    case EM_UN_ABS: for (int64_t i = 0; i < n; i++) o[i] = x[i] < 0 ? -x[i] : x[i]; break;
    case EM_UN_EXP: for (int64_t i = 0; i < n; i++) o[i] = exp(x[i]); break;
    case EM_UN_LOG: for (int64_t i = 0; i < n; i++) o[i] = log(x[i]); break;
    case EM_UN_LOG1P: for (int64_t i = 0; i < n; i++) o[i] = log1p(x[i]); break;
    case EM_UN_SQRT: for (int64_t i = 0; i < n; i++) o[i] = sqrt(x[i]); break;
    case EM_UN_RSQRT: for (int64_t i = 0; i < n; i++) o[i] = 1.0 / sqrt(x[i]); break;
    case EM_UN_SIN: for (int64_t i = 0; i < n; i++) o[i] = sin(x[i]); break;
    case EM_UN_COS: for (int64_t i = 0; i < n; i++) o[i] = cos(x[i]); break;
    case EM_UN_TANH: for (int64_t i = 0; i < n; i++) o[i] = tanh(x[i]); break;
    case EM_UN_SIGMOID: for (int64_t i = 0; i < n; i++) o[i] = 1.0 / (1.0 + exp(-x[i])); break;
    case EM_UN_RELU:
        for (int64_t i = 0; i < n; i++) o[i] = x[i] > 0 ? x[i] : (x[i] != x[i] ? x[i] : 0);
        break;
    case EM_UN_GELU:
        for (int64_t i = 0; i < n; i++)
            o[i] = 0.5 * x[i] * (1.0 + erf(x[i] * 0.70710678118654752440));
        break;
    case EM_UN_SILU: for (int64_t i = 0; i < n; i++) o[i] = x[i] / (1.0 + exp(-x[i])); break;
    case EM_UN_ERF: for (int64_t i = 0; i < n; i++) o[i] = erf(x[i]); break;
    case EM_UN_FLOOR: for (int64_t i = 0; i < n; i++) o[i] = floor(x[i]); break;
    case EM_UN_CEIL: for (int64_t i = 0; i < n; i++) o[i] = ceil(x[i]); break;
    case EM_UN_ROUND: for (int64_t i = 0; i < n; i++) o[i] = nearbyint(x[i]); break;
    case EM_UN_RECIP: for (int64_t i = 0; i < n; i++) o[i] = 1.0 / x[i]; break;
    case EM_UN_SIGN:
        for (int64_t i = 0; i < n; i++) o[i] = x[i] > 0 ? 1.0 : x[i] < 0 ? -1.0 : x[i];
        break;
    case EM_UN_CLAMP:
        for (int64_t i = 0; i < n; i++) {
            double v = x[i] < lo ? lo : x[i];
            o[i] = v > hi ? hi : v;
        }
        break;
    default: break;
    }
}

/* f16 / bf16 through the f32 loop, a block at a time (o may be x: each block is read whole
 * before it is written). */
static void unary_half(em_unary_op op, em_dtype dt, uint16_t *o, const uint16_t *x, int64_t n,
                       float lo, float hi) {
    float a[CPU_HALF_BLOCK], b[CPU_HALF_BLOCK];
    for (int64_t i = 0; i < n; i += CPU_HALF_BLOCK) {
        int64_t m = n - i < CPU_HALF_BLOCK ? n - i : CPU_HALF_BLOCK;
        cpu_half_to_f32_n(dt, a, x + i, m);
        unary_f32(op, b, a, m, lo, hi);
        cpu_f32_to_half_n(dt, o + i, b, m);
    }
}

typedef struct unary_job {
    em_unary_op op;
    const em_view *out, *in;
    em_dtype dt;
    double lo, hi;
} unary_job;

/* n contiguous elements of j's dtype, x to o. */
static void unary_dense(const unary_job *j, void *o, const void *x, int64_t n) {
    switch (j->dt) {
    case EM_F32: unary_f32(j->op, o, x, n, (float)j->lo, (float)j->hi); break;
    case EM_F64: unary_f64(j->op, o, x, n, j->lo, j->hi); break;
    case EM_F16: case EM_BF16: unary_half(j->op, j->dt, o, x, n, (float)j->lo, (float)j->hi); break;
    case EM_BOOL: { /* logical_not */
        uint8_t *ob = o;
        const uint8_t *xb = x;
        for (int64_t i = 0; i < n; i++) ob[i] = xb[i] == 0;
        break;
    }
    default: break;
    }
}

static void unary_range(int64_t lo, int64_t hi, void *arg) {
    unary_job *j = arg;
    size_t es = em_dtype_size(j->dt);
    unary_dense(j, (char *)cpu_ptr(j->out) + lo * (int64_t)es,
                (const char *)cpu_ptr(j->in) + lo * (int64_t)es, hi - lo);
}

/* Strided: elements lo..hi (row-major order of out's shape) gathered a block at a time. */
#define UN_BLOCK 512
static void unary_strided_range(int64_t lo, int64_t hi, void *arg) {
    unary_job *j = arg;
    const em_view *out = j->out, *in = j->in;
    const int r = out->rank;
    const size_t es = em_dtype_size(j->dt);
    int64_t idx[EM_MAX_RANK];
    int64_t oo = out->offset, oi = in->offset, rem = lo;
    for (int d = r - 1; d >= 0; d--) {
        idx[d] = rem % out->shape[d];
        rem /= out->shape[d];
        oo += idx[d] * out->strides[d];
        oi += idx[d] * in->strides[d];
    }
    const int64_t last = r ? out->shape[r - 1] : 1;
    const int64_t so = r ? out->strides[r - 1] : 0, si = r ? in->strides[r - 1] : 0;
    _Alignas(64) unsigned char bx[UN_BLOCK * 8], bo[UN_BLOCK * 8];
    int64_t offs[UN_BLOCK];
    char *ob = out->buf;
    const char *ib = in->buf;
    while (lo < hi) {
        int64_t n = hi - lo < UN_BLOCK ? hi - lo : UN_BLOCK;
        for (int64_t k = 0; k < n;) {
            int64_t cur = r ? idx[r - 1] : 0;
            int64_t run = last - cur < n - k ? last - cur : n - k;
            switch (es) {
            case 1:
                for (int64_t t = 0; t < run; t++) bx[k + t] = (unsigned char)ib[oi + t * si];
                break;
            case 2:
                for (int64_t t = 0; t < run; t++)
                    memcpy(bx + (k + t) * 2, ib + (oi + t * si) * 2, 2);
                break;
            case 4:
                for (int64_t t = 0; t < run; t++)
                    memcpy(bx + (k + t) * 4, ib + (oi + t * si) * 4, 4);
                break;
            default:
                for (int64_t t = 0; t < run; t++)
                    memcpy(bx + (k + t) * 8, ib + (oi + t * si) * 8, 8);
                break;
            }
            for (int64_t t = 0; t < run; t++) offs[k + t] = oo + t * so;
            k += run;
            oi += run * si;
            oo += run * so;
            if (r == 0) break;
            idx[r - 1] += run;
            for (int d = r - 1; d > 0 && idx[d] == out->shape[d]; d--) { /* carry */
                oi -= idx[d] * in->strides[d];
                oo -= idx[d] * out->strides[d];
                idx[d] = 0;
                idx[d - 1]++;
                oi += in->strides[d - 1];
                oo += out->strides[d - 1];
            }
        }
        unary_dense(j, bo, bx, n);
        switch (es) {
        case 1: for (int64_t k = 0; k < n; k++) ob[offs[k]] = (char)bo[k]; break;
        case 2: for (int64_t k = 0; k < n; k++) memcpy(ob + offs[k] * 2, bo + k * 2, 2); break;
        case 4: for (int64_t k = 0; k < n; k++) memcpy(ob + offs[k] * 4, bo + k * 4, 4); break;
        default: for (int64_t k = 0; k < n; k++) memcpy(ob + offs[k] * 8, bo + k * 8, 8); break;
        }
        lo += n;
    }
}

em_status CPU_K(cpu_unary)(void *ctx, em_unary_op op, const em_view *out, const em_view *in,
                           const double *params) {
    if (op >= EM_UN_SOFTPLUS && unary_more(op, out, in, params)) return EM_OK; /* unary_more.h */
    const em_dtype dt = in->dtype;
    bool native = out->dtype == dt &&
                  (op == EM_UN_LOGICAL_NOT ? dt == EM_BOOL
                                           : (dt == EM_F32 || dt == EM_F64 || cpu_is_half(dt)));
    if (!native) return CPU_FALLBACK(CPU_FB_UNARY, out->dtype, unary, ctx, op, out, in, params);
    unary_job j = {op, out, in, dt, params ? params[0] : 0, params ? params[1] : 0};
    int64_t n = cpu_numel(out);
    if (n == 0) return EM_OK;
    if (cpu_contiguous(in) && cpu_contiguous(out))
        cpu_parallel_for(n, CPU_GRAIN, unary_range, &j);
    else
        cpu_parallel_for(n, CPU_GRAIN / 4, unary_strided_range, &j);
    return EM_OK;
}
