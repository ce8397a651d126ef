/*
 * isa.h — the instruction-set levels of the cpu backend (isa.c), without the rest of cpu.h
 * (ember-info and the tests include it).
 *
 * The hot loops (elementwise.c, unary.c, compare.c, reduce.c, nn.c, conv.c, with kernels.c's
 * table) are compiled once per level, each copy with its level's compiler flags and its level's
 * name as a suffix of its entry points (CPU_K). The backend picks one level when it is first
 * used, from the CPU and the environment variable EMBER_CPU_ISA:
 *   - unset, empty or `auto`: the best level the CPU (and this build) supports;
 *   - `portable`, `avx2`, `avx512` (any case): that level, or, when the CPU lacks it, the best
 *     supported level below it (never an instruction the CPU cannot run);
 *   - anything else: auto.
 * The choice is never an error: ember-info prints the level and, when it differs from what was
 * asked for, why (cpu_isa_describe).
 */
#ifndef EMBER_CPU_ISA_H
#define EMBER_CPU_ISA_H

#include <stdbool.h>
#include <stddef.h>

#include "ember/backend.h"

/* The levels, in order (macros, so that the per-level files can test them with #if). */
#define CPU_ISA_PORTABLE 0 /* the compiler's baseline (x86-64: SSE2) */
#define CPU_ISA_AVX2 1     /* x86-64-v3: AVX2, FMA, BMI1/2, F16C, LZCNT, MOVBE */
#define CPU_ISA_AVX512 2   /* AVX2's set plus AVX-512F (the hand-written kernels of conv.c and
                              pool_avx512.c) */
#define CPU_ISA_COUNT 3

/** The level the cpu backend runs, chosen once (thread-safe; later calls read it). */
int cpu_isa(void);
/** The best level this CPU and this build support. */
int cpu_isa_best(void);
/** "portable", "avx2", "avx512"; "?" for other values. */
const char *cpu_isa_name(int level);
/** One line about the choice, e.g. "avx2 (auto; the best this CPU supports: avx2)" or
 *  "avx2 (EMBER_CPU_ISA=avx512, but this CPU lacks AVX-512F: using avx2)". */
void cpu_isa_describe(char *buf, size_t cap);

/** The rule behind cpu_isa, as a pure function: the level for the value `env` of
 *  EMBER_CPU_ISA (NULL: unset) when `best` is the best supported level. When the result is
 *  not what env asked for (a level above best, an unknown value), a one-line reason is
 *  written to note (if note is non-NULL; else note[0] = 0 when cap > 0). */
int cpu_isa_choose(const char *env, int best, char *note, size_t cap);

/** OpenBLAS's kernel check: true (and a one-line warning in buf) when `core` (what
 *  openblas_get_corename() says) is a pre-AVX2 x86 kernel although the CPU's best level is
 *  `best` (avx2 or avx512), with the OPENBLAS_CORETYPE value to use instead. */
bool cpu_blas_core_warning(const char *core, int best, char *buf, size_t cap);

/** The opposite trap: true (and a one-line message in buf) when `core` is an OpenBLAS kernel
 *  that needs instructions this CPU lacks (an AVX-512 kernel such as SkylakeX when `best` is
 *  below avx512, an AVX2 one such as Haswell or Zen below avx2). OPENBLAS_CORETYPE forces a
 *  kernel without checking the CPU, and its GEMM then dies of SIGILL; cpu_gemm does not call
 *  it then (see cpu_blas_usable). */
bool cpu_blas_core_unrunnable(const char *core, int best, char *buf, size_t cap);

/** One level's kernels (the slots of em_backend_ops that the per-level files fill). */
typedef struct cpu_kernels {
    int isa; /* CPU_ISA_* */
    em_status (*unary)(void *ctx, em_unary_op op, const em_view *out, const em_view *in,
                       const double *params);
    em_status (*binary)(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                        const em_view *b);
    em_status (*binary_scalar)(void *ctx, em_binary_op op, const em_view *out,
                               const em_view *a, double s);
    em_status (*where)(void *ctx, const em_view *out, const em_view *cond, const em_view *a,
                       const em_view *b);
    em_status (*reduce)(void *ctx, em_reduce_op op, const em_view *out, const em_view *in,
                        int dim, const double *params);
    em_status (*softmax)(void *ctx, const em_view *out, const em_view *in, int dim, bool log);
    em_status (*conv2d)(void *ctx, const em_view *out, const em_view *x, const em_view *w,
                        const em_view *bias, const em_conv_args *a);
    em_status (*conv2d_weight_grad)(void *ctx, const em_view *gw, const em_view *x,
                                    const em_view *gy, const em_conv_args *a);
    em_status (*conv_transpose2d)(void *ctx, const em_view *out, const em_view *x,
                                  const em_view *w, const em_view *bias, const em_conv_args *a);
    em_status (*max_pool2d)(void *ctx, const em_view *out, const em_view *indices,
                            const em_view *x, const em_pool_args *a);
    em_status (*avg_pool2d)(void *ctx, const em_view *out, const em_view *x,
                            const em_pool_args *a);
    em_status (*avg_pool2d_backward)(void *ctx, const em_view *gx, const em_view *gy,
                                     const em_pool_args *a);
    em_status (*layer_norm)(void *ctx, const em_view *out, const em_view *x,
                            const em_view *weight, const em_view *bias, int64_t norm_numel,
                            double eps);
    em_status (*adaptive_avg_pool2d)(void *ctx, const em_view *out, const em_view *x);
    em_status (*adaptive_avg_pool2d_backward)(void *ctx, const em_view *gx, const em_view *gy);
    /* gemm.c: ember's GEMM, C = op(A) op(B) + beta C, row-major (CBLAS conventions), f32 or
     * f64, on the calling thread; its tile is gemm_mr x gemm_nr f32 (f64: half the columns) */
    void (*gemm)(em_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a,
                 int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc);
    int gemm_mr, gemm_nr;
    em_status (*cumsum)(void *ctx, const em_view *out, const em_view *in, int dim);
    /* fused.c */
    em_status (*unary_backward)(void *ctx, em_unary_op op, const em_view *gx, const em_view *x,
                                const em_view *y, const em_view *gy, const double *params);
    em_status (*adam_step)(void *ctx, const em_view *param, const em_view *exp_avg,
                           const em_view *exp_avg_sq, const em_view *grad,
                           const em_adam_args *a);
    /* norm.c */
    em_status (*batch_norm)(void *ctx, const em_view *out, const em_view *save_mean,
                            const em_view *save_invstd, const em_view *x,
                            const em_view *weight, const em_view *bias,
                            const em_view *running_mean, const em_view *running_var,
                            bool training, double momentum, double eps);
    em_status (*batch_norm_backward)(void *ctx, const em_view *gx, const em_view *gweight,
                                     const em_view *gbias, const em_view *gy, const em_view *x,
                                     const em_view *mean, const em_view *invstd,
                                     const em_view *weight, bool training);
    em_status (*group_norm)(void *ctx, const em_view *out, const em_view *save_mean,
                            const em_view *save_invstd, const em_view *x,
                            const em_view *weight, const em_view *bias, int64_t groups,
                            double eps);
    em_status (*rms_norm)(void *ctx, const em_view *out, const em_view *save_invrms,
                          const em_view *x, const em_view *weight, int64_t norm_numel,
                          double eps);
    /* cumulative.c */
    em_status (*cumulative)(void *ctx, em_cum_op op, const em_view *values,
                            const em_view *indices, const em_view *in, int dim);
    /* attention.c */
    em_status (*sdpa)(void *ctx, const em_view *out, const em_view *lse, const em_view *q,
                      const em_view *k, const em_view *v, const em_view *mask, bool causal,
                      double scale, double dropout_p, uint64_t seed);
    em_status (*sdpa_backward)(void *ctx, const em_view *dq, const em_view *dk,
                               const em_view *dv, const em_view *q, const em_view *k,
                               const em_view *v, const em_view *mask, const em_view *out,
                               const em_view *dout, const em_view *lse, bool causal,
                               double scale, double dropout_p, uint64_t seed);
} cpu_kernels;

/** Which GEMM cpu_gemm runs (matmul.c), chosen once from EMBER_CPU_GEMM (auto, openblas,
 *  ember; see matmul.c) and OpenBLAS's kernel: true for ember's (the chosen level's table's
 *  gemm), false for OpenBLAS's. cpu_gemm_describe: one line on the choice and why, e.g.
 *  "ember avx2 6x16 (auto: OpenBLAS runs Prescott, below this CPU's avx2)". */
bool cpu_gemm_is_ember(void);
/** Whether cpu_gemm runs ember's GEMM for a product of m x k by k x n (auto sends skinny ones
 *  to OpenBLAS where its kernel fits; see matmul.c); cpu_gemm_is_ember for most shapes. */
bool cpu_gemm_ember_for(int64_t m, int64_t n, int64_t k);
void cpu_gemm_describe(char *buf, size_t cap);

/** The table of a level compiled into this build, else NULL (the unit tests run one op
 *  through every level with it). */
const cpu_kernels *cpu_kernels_of(int level);

#endif /* EMBER_CPU_ISA_H */
