/* isa.c — which instruction-set level the cpu backend runs (see isa.h), chosen once from the
 * CPU (cpuid, and the OS's saving of the vector registers: xgetbv) and EMBER_CPU_ISA, and the
 * backend's kernel slots, which forward to that level's table. */
#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cpu.h"

extern const cpu_kernels cpu_kernels_portable;
#ifdef EMBER_CPU_X86_LEVELS /* CMakeLists.txt: the avx2 and avx512 copies are built */
extern const cpu_kernels cpu_kernels_avx2, cpu_kernels_avx512;
#endif

static const char *const isa_names[CPU_ISA_COUNT] = {"portable", "avx2", "avx512"};

const char *cpu_isa_name(int level) {
    return level >= 0 && level < CPU_ISA_COUNT ? isa_names[level] : "?";
}

const cpu_kernels *cpu_kernels_of(int level) {
    switch (level) {
    case CPU_ISA_PORTABLE: return &cpu_kernels_portable;
#ifdef EMBER_CPU_X86_LEVELS
    case CPU_ISA_AVX2: return &cpu_kernels_avx2;
    case CPU_ISA_AVX512: return &cpu_kernels_avx512;
#endif
    default: return NULL;
    }
}

/* ---- what the CPU runs ---- */

#if defined(EMBER_CPU_X86_LEVELS) && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>

static uint64_t xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* The best level whose every instruction this CPU runs and whose registers the OS saves. */
static int detect_best(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return CPU_ISA_PORTABLE;
    const bool fma = c & (1u << 12), movbe = c & (1u << 22), osxsave = c & (1u << 27),
               avx = c & (1u << 28), f16c = c & (1u << 29);
    if (!osxsave || !avx) return CPU_ISA_PORTABLE;
    const uint64_t x = xcr0();
    if ((x & 0x6) != 0x6) return CPU_ISA_PORTABLE; /* SSE and AVX state */
    if (__get_cpuid_max(0, NULL) < 7) return CPU_ISA_PORTABLE;
    __cpuid_count(7, 0, a, b, c, d);
    const bool bmi1 = b & (1u << 3), avx2 = b & (1u << 5), bmi2 = b & (1u << 8),
               avx512f = b & (1u << 16);
    bool lzcnt = false;
    if ((unsigned)__get_cpuid_max(0x80000000u, NULL) >= 0x80000001u) {
        __cpuid(0x80000001u, a, b, c, d);
        lzcnt = c & (1u << 5);
    }
    if (!(avx2 && fma && bmi1 && bmi2 && f16c && lzcnt && movbe)) return CPU_ISA_PORTABLE;
    if (avx512f && (x & 0xe6) == 0xe6) return CPU_ISA_AVX512; /* opmask, ZMM0-15, ZMM16-31 */
    return CPU_ISA_AVX2;
}
#else
static int detect_best(void) { return CPU_ISA_PORTABLE; }
#endif

/* ---- the choice ---- */

/* What a level needs, for the notes. */
static const char *const isa_needs[CPU_ISA_COUNT] = {"", "x86-64-v3 (AVX2, FMA, BMI2)",
                                                      "AVX-512F"};

int cpu_isa_choose(const char *env, int best, char *note, size_t cap) {
    if (note && cap) note[0] = 0;
    if (best < 0 || best >= CPU_ISA_COUNT) best = CPU_ISA_PORTABLE;
    if (!env || !*env) return best;
    char v[16];
    size_t n = 0;
    for (; env[n] && n + 1 < sizeof v; n++) v[n] = (char)tolower((unsigned char)env[n]);
    v[n] = 0;
    if (env[n] == 0 && strcmp(v, "auto") == 0) return best;
    for (int l = 0; env[n] == 0 && l < CPU_ISA_COUNT; l++) {
        if (strcmp(v, isa_names[l]) != 0) continue;
        if (l <= best) return l;
        if (note && cap)
            snprintf(note, cap, "EMBER_CPU_ISA=%s, but this CPU lacks %s: using %s, the best "
                     "it supports", isa_names[l], isa_needs[l], isa_names[best]);
        return best;
    }
    if (note && cap)
        snprintf(note, cap, "EMBER_CPU_ISA=%.40s is not auto, portable, avx2 or avx512: using "
                 "auto (%s)", env, isa_names[best]);
    return best;
}

static struct {
    pthread_once_t once;
    int best, level;
    char env[48];   /* EMBER_CPU_ISA as read (truncated), "" when unset */
    char note[200]; /* cpu_isa_choose's note */
} isa_state = {.once = PTHREAD_ONCE_INIT};

static _Atomic(const cpu_kernels *) isa_active; /* the chosen table, once chosen */

static void isa_init(void) {
    int best = detect_best();
    while (best > CPU_ISA_PORTABLE && !cpu_kernels_of(best)) best--; /* not in this build */
    const char *env = getenv("EMBER_CPU_ISA");
    isa_state.best = best;
    isa_state.level = cpu_isa_choose(env, best, isa_state.note, sizeof isa_state.note);
    if (env) snprintf(isa_state.env, sizeof isa_state.env, "%s", env);
    atomic_store_explicit(&isa_active, cpu_kernels_of(isa_state.level), memory_order_release);
}

/* The chosen table: an acquire load (a plain load on x86), the choice made on first use. */
static inline const cpu_kernels *K(void) {
    const cpu_kernels *k = atomic_load_explicit(&isa_active, memory_order_acquire);
    if (k) return k;
    pthread_once(&isa_state.once, isa_init);
    return atomic_load_explicit(&isa_active, memory_order_acquire);
}

int cpu_isa(void) { return K()->isa; }

int cpu_isa_best(void) {
    K();
    return isa_state.best;
}

void cpu_isa_describe(char *buf, size_t cap) {
    const int level = cpu_isa();
    if (isa_state.note[0])
        snprintf(buf, cap, "%s (%s)", isa_names[level], isa_state.note);
    else if (isa_state.env[0] && strcasecmp(isa_state.env, "auto") != 0)
        snprintf(buf, cap, "%s (EMBER_CPU_ISA=%s; the best this CPU supports: %s)",
                 isa_names[level], isa_state.env, isa_names[isa_state.best]);
    else
        snprintf(buf, cap, "%s (auto%s; the best this CPU supports: %s)", isa_names[level],
                 isa_state.env[0] ? ": EMBER_CPU_ISA=auto" : "", isa_names[isa_state.best]);
}

/* ---- OpenBLAS's kernel ---- */

bool cpu_blas_core_warning(const char *core, int best, char *buf, size_t cap) {
    /* OpenBLAS's x86 kernels without AVX2 (0.3.21's names, compared without case) */
    static const char *const old[] = {
        "prescott", "katmai",   "coppermine", "northwood", "banias",     "atom",
        "core2",    "penryn",   "dunnington", "nehalem",   "sandybridge", "opteron",
        "opteron_sse3", "barcelona", "bobcat", "bulldozer", "piledriver", "steamroller",
        "nano",     "athlon",   "generic",    "unknown"};
    if (buf && cap) buf[0] = 0;
    if (!core || best < CPU_ISA_AVX2) return false;
    bool is_old = false;
    for (size_t i = 0; i < sizeof old / sizeof old[0] && !is_old; i++)
        is_old = strcasecmp(core, old[i]) == 0;
    if (!is_old) return false;
    if (buf && cap)
        snprintf(buf, cap, "OpenBLAS runs its %s kernel (no AVX2) on a CPU with %s: matmul and "
                 "convolutions run several times slower than they could; set "
                 "OPENBLAS_CORETYPE=%s", core, best >= CPU_ISA_AVX512 ? "AVX-512" : "AVX2",
                 best >= CPU_ISA_AVX512 ? "SkylakeX" : "Haswell");
    return true;
}

bool cpu_blas_core_unrunnable(const char *core, int best, char *buf, size_t cap) {
    /* OpenBLAS 0.3.21's x86 kernels that need AVX-512, then those that need AVX2 */
    static const char *const avx512[] = {"skylakex", "cooperlake", "sapphirerapids"};
    static const char *const avx2[] = {"haswell", "zen", "excavator", "skylake"};
    if (buf && cap) buf[0] = 0;
    if (!core) return false;
    const char *needs = NULL;
    for (size_t i = 0; i < sizeof avx512 / sizeof avx512[0] && !needs; i++)
        if (strcasecmp(core, avx512[i]) == 0 && best < CPU_ISA_AVX512) needs = "AVX-512";
    for (size_t i = 0; i < sizeof avx2 / sizeof avx2[0] && !needs; i++)
        if (strcasecmp(core, avx2[i]) == 0 && best < CPU_ISA_AVX2) needs = "AVX2";
    if (!needs) return false;
    if (buf && cap)
        snprintf(buf, cap, "OpenBLAS was told to run its %s kernel (OPENBLAS_CORETYPE), which "
                 "needs %s, and this CPU lacks it: ember's matmul and convolutions use their "
                 "own GEMM instead of crashing; unset OPENBLAS_CORETYPE or set it to %s",
                 core, needs, best >= CPU_ISA_AVX2 ? "Haswell" : "Prescott");
    return true;
}

/* ---- the backend's slots: the chosen level's kernels ---- */

em_status cpu_unary(void *ctx, em_unary_op op, const em_view *out, const em_view *in,
                    const double *params) {
    return K()->unary(ctx, op, out, in, params);
}
em_status cpu_binary(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                     const em_view *b) {
    return K()->binary(ctx, op, out, a, b);
}
em_status cpu_binary_scalar(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                            double s) {
    return K()->binary_scalar(ctx, op, out, a, s);
}
em_status cpu_where(void *ctx, const em_view *out, const em_view *cond, const em_view *a,
                    const em_view *b) {
    return K()->where(ctx, out, cond, a, b);
}
em_status cpu_reduce(void *ctx, em_reduce_op op, const em_view *out, const em_view *in,
                     int dim, const double *params) {
    return K()->reduce(ctx, op, out, in, dim, params);
}
em_status cpu_softmax(void *ctx, const em_view *out, const em_view *in, int dim, bool log) {
    return K()->softmax(ctx, out, in, dim, log);
}
em_status cpu_cumsum(void *ctx, const em_view *out, const em_view *in, int dim) {
    return K()->cumsum(ctx, out, in, dim);
}
em_status cpu_cumulative(void *ctx, em_cum_op op, const em_view *values, const em_view *indices,
                         const em_view *in, int dim) {
    return K()->cumulative(ctx, op, values, indices, in, dim);
}
em_status cpu_conv2d(void *ctx, const em_view *out, const em_view *x, const em_view *w,
                     const em_view *bias, const em_conv_args *a) {
    return K()->conv2d(ctx, out, x, w, bias, a);
}
em_status cpu_conv2d_weight_grad(void *ctx, const em_view *gw, const em_view *x,
                                 const em_view *gy, const em_conv_args *a) {
    return K()->conv2d_weight_grad(ctx, gw, x, gy, a);
}
em_status cpu_conv_transpose2d(void *ctx, const em_view *out, const em_view *x,
                               const em_view *w, const em_view *bias, const em_conv_args *a) {
    return K()->conv_transpose2d(ctx, out, x, w, bias, a);
}
em_status cpu_max_pool2d(void *ctx, const em_view *out, const em_view *indices,
                         const em_view *x, const em_pool_args *a) {
    return K()->max_pool2d(ctx, out, indices, x, a);
}
em_status cpu_avg_pool2d(void *ctx, const em_view *out, const em_view *x,
                         const em_pool_args *a) {
    return K()->avg_pool2d(ctx, out, x, a);
}
em_status cpu_avg_pool2d_backward(void *ctx, const em_view *gx, const em_view *gy,
                                  const em_pool_args *a) {
    return K()->avg_pool2d_backward(ctx, gx, gy, a);
}
em_status cpu_layer_norm(void *ctx, const em_view *out, const em_view *x, const em_view *weight,
                         const em_view *bias, int64_t norm_numel, double eps) {
    return K()->layer_norm(ctx, out, x, weight, bias, norm_numel, eps);
}
em_status cpu_batch_norm(void *ctx, const em_view *out, const em_view *save_mean,
                         const em_view *save_invstd, const em_view *x, const em_view *weight,
                         const em_view *bias, const em_view *running_mean,
                         const em_view *running_var, bool training, double momentum,
                         double eps) {
    return K()->batch_norm(ctx, out, save_mean, save_invstd, x, weight, bias, running_mean,
                           running_var, training, momentum, eps);
}
em_status cpu_batch_norm_backward(void *ctx, const em_view *gx, const em_view *gweight,
                                  const em_view *gbias, const em_view *gy, const em_view *x,
                                  const em_view *mean, const em_view *invstd,
                                  const em_view *weight, bool training) {
    return K()->batch_norm_backward(ctx, gx, gweight, gbias, gy, x, mean, invstd, weight,
                                    training);
}
em_status cpu_group_norm(void *ctx, const em_view *out, const em_view *save_mean,
                         const em_view *save_invstd, const em_view *x, const em_view *weight,
                         const em_view *bias, int64_t groups, double eps) {
    return K()->group_norm(ctx, out, save_mean, save_invstd, x, weight, bias, groups, eps);
}
em_status cpu_rms_norm(void *ctx, const em_view *out, const em_view *save_invrms,
                       const em_view *x, const em_view *weight, int64_t norm_numel,
                       double eps) {
    return K()->rms_norm(ctx, out, save_invrms, x, weight, norm_numel, eps);
}
em_status cpu_sdpa(void *ctx, const em_view *out, const em_view *lse, const em_view *q,
                      const em_view *k, const em_view *v, const em_view *mask, bool causal,
                      double scale, double dropout_p, uint64_t seed) {
    return K()->sdpa(ctx, out, lse, q, k, v, mask, causal, scale, dropout_p, seed);
}
em_status cpu_sdpa_backward(void *ctx, const em_view *dq, const em_view *dk,
                               const em_view *dv, const em_view *q, const em_view *k,
                               const em_view *v, const em_view *mask, const em_view *out,
                               const em_view *dout, const em_view *lse, bool causal,
                               double scale, double dropout_p, uint64_t seed) {
    return K()->sdpa_backward(ctx, dq, dk, dv, q, k, v, mask, out, dout, lse, causal, scale,
                              dropout_p, seed);
}
em_status cpu_adaptive_avg_pool2d(void *ctx, const em_view *out, const em_view *x) {
    return K()->adaptive_avg_pool2d(ctx, out, x);
}
em_status cpu_adaptive_avg_pool2d_backward(void *ctx, const em_view *gx, const em_view *gy) {
    return K()->adaptive_avg_pool2d_backward(ctx, gx, gy);
}
em_status cpu_unary_backward(void *ctx, em_unary_op op, const em_view *gx, const em_view *x,
                             const em_view *y, const em_view *gy, const double *params) {
    return K()->unary_backward(ctx, op, gx, x, y, gy, params);
}
em_status cpu_adam_step(void *ctx, const em_view *param, const em_view *exp_avg,
                        const em_view *exp_avg_sq, const em_view *grad, const em_adam_args *a) {
    return K()->adam_step(ctx, param, exp_avg, exp_avg_sq, grad, a);
}
