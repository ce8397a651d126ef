/* unary.c — the cpu backend's unary kernels for f32 and f64 (contiguous operands, one flat
 * loop split over the thread pool). The file is compiled once per instruction-set level
 * (isa.h); other dtypes and layouts go to the ref kernels. */
#include <math.h>

#include "cpu.h"
#include "vmath.h"

#define CPU_GRAIN (1 << 15)

/* ---- unary ---- */

#define UNARY_LOOP(T, EXPF, SUFFIX)                                                            \
    static void unary_##SUFFIX(em_unary_op op, T *restrict o, const T *restrict x,             \
                               int64_t n, T lo, T hi) {                                        \
        switch (op) {                                                                          \
        case EM_UN_NEG: for (int64_t i = 0; i < n; i++) o[i] = -x[i]; break;                   \
        case EM_UN_ABS: for (int64_t i = 0; i < n; i++) o[i] = x[i] < 0 ? -x[i] : x[i]; break; \
        case EM_UN_EXP: for (int64_t i = 0; i < n; i++) o[i] = EXPF(x[i]); break;              \
        case EM_UN_LOG: for (int64_t i = 0; i < n; i++) o[i] = log(x[i]); break;               \
        case EM_UN_LOG1P: for (int64_t i = 0; i < n; i++) o[i] = log1p(x[i]); break;           \
        case EM_UN_SQRT: for (int64_t i = 0; i < n; i++) o[i] = sqrt(x[i]); break;             \
        case EM_UN_RSQRT: for (int64_t i = 0; i < n; i++) o[i] = (T)1 / sqrt(x[i]); break;     \
        case EM_UN_SIN: for (int64_t i = 0; i < n; i++) o[i] = sin(x[i]); break;               \
        case EM_UN_COS: for (int64_t i = 0; i < n; i++) o[i] = cos(x[i]); break;               \
        case EM_UN_TANH: for (int64_t i = 0; i < n; i++) o[i] = tanh(x[i]); break;             \
        case EM_UN_SIGMOID:                                                                    \
            for (int64_t i = 0; i < n; i++) o[i] = (T)1 / ((T)1 + EXPF(-x[i]));                \
            break;                                                                             \
        case EM_UN_RELU: for (int64_t i = 0; i < n; i++) o[i] = x[i] > 0 ? x[i] : (x[i] != x[i] ? x[i] : 0); break; \
        case EM_UN_GELU:                                                                       \
            for (int64_t i = 0; i < n; i++)                                                    \
                o[i] = (T)(0.5 * x[i] * (1.0 + erf(x[i] * 0.70710678118654752440)));           \
            break;                                                                             \
        case EM_UN_SILU:                                                                       \
            for (int64_t i = 0; i < n; i++) o[i] = x[i] / ((T)1 + EXPF(-x[i]));                \
            break;                                                                             \
        case EM_UN_ERF: for (int64_t i = 0; i < n; i++) o[i] = erf(x[i]); break;               \
        case EM_UN_FLOOR: for (int64_t i = 0; i < n; i++) o[i] = floor(x[i]); break;           \
        case EM_UN_CEIL: for (int64_t i = 0; i < n; i++) o[i] = ceil(x[i]); break;             \
        case EM_UN_ROUND: for (int64_t i = 0; i < n; i++) o[i] = nearbyint(x[i]); break;       \
        case EM_UN_RECIP: for (int64_t i = 0; i < n; i++) o[i] = (T)1 / x[i]; break;           \
        case EM_UN_SIGN:                                                                       \
            for (int64_t i = 0; i < n; i++)                                                    \
                o[i] = x[i] > 0 ? (T)1 : x[i] < 0 ? (T)-1 : x[i];                              \
            break;                                                                             \
        case EM_UN_CLAMP:                                                                      \
            for (int64_t i = 0; i < n; i++) {                                                  \
                T v = x[i] < lo ? lo : x[i];                                                   \
                o[i] = v > hi ? hi : v;                                                        \
            }                                                                                  \
            break;                                                                             \
        default: break;                                                                        \
        }                                                                                      \
    }

static inline double cpu_exp_d(double x) { return exp(x); }
UNARY_LOOP(float, cpu_expf, f32)
UNARY_LOOP(double, cpu_exp_d, f64)

typedef struct unary_job {
    em_unary_op op;
    void *o;
    const void *x;
    em_dtype dt;
    double lo, hi;
} unary_job;

static void unary_range(int64_t lo, int64_t hi, void *arg) {
    unary_job *j = arg;
    if (j->dt == EM_F32)
        unary_f32(j->op, (float *)j->o + lo, (const float *)j->x + lo, hi - lo, (float)j->lo,
                  (float)j->hi);
    else
        unary_f64(j->op, (double *)j->o + lo, (const double *)j->x + lo, hi - lo, j->lo, j->hi);
}

em_status CPU_K(cpu_unary)(void *ctx, em_unary_op op, const em_view *out, const em_view *in,
                           const double *params) {
    bool fast = (in->dtype == EM_F32 || in->dtype == EM_F64) && out->dtype == in->dtype &&
                op != EM_UN_LOGICAL_NOT && cpu_contiguous(in) && cpu_contiguous(out);
    if (!fast) return CPU_FALLBACK(CPU_FB_UNARY, out->dtype, unary, ctx, op, out, in, params);
    unary_job j = {op, cpu_ptr(out), cpu_ptr(in), in->dtype, params ? params[0] : 0,
                   params ? params[1] : 0};
    /* NaN clamps through: lo/hi compare false, like the ref kernel */
    cpu_parallel_for(cpu_numel(out), CPU_GRAIN, unary_range, &j);
    return EM_OK;
}

