/*
 * cpu.h — private interface of the optimized CPU backend.
 *
 * Buffers are host memory, so views follow the ref conventions (view.buf is the data
 * pointer, strides and offsets in elements), and a kernel may hand a case it has no loop for
 * to the ref kernel: always through CPU_FALLBACK, so that the case is a row of fallback.c's
 * table and is counted (fallback.h); the backend fills every slot. What is here: a caching
 * allocator, a thread pool, GEMM through OpenBLAS or ember's own (gemm.c), vectorized math
 * (vmath.h), elementwise ops, copies, comparisons and where over any layout (iter.h),
 * reductions, softmax, cumsum, indexing, convolution, pooling and layer_norm, f16/bf16
 * through f32 blocks (half.h).
 */
#ifndef EMBER_CPU_H
#define EMBER_CPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/backend.h"

/* ---- instruction sets (isa.h, isa.c) ----
 * The files with hot loops are compiled once per level (CMakeLists.txt: portable, avx2 and
 * avx512 on x86-64, portable elsewhere) with CPU_ISA_LEVEL set to the level and CPU_ISA_SUFFIX
 * to its name; CPU_K(name) is name_<suffix>, the name of an entry point in that copy. Each
 * copy's entry points make one cpu_kernels table (kernels.c); isa.c picks one table when the
 * backend is first used, and the backend's slots (cpu_unary, ...) call through it: one
 * indirect call per kernel call, nothing per element. */
#include "isa.h"
#include "fallback.h"
#include "vmath.h" /* vectorizable f32 math (elementwise.c's pow, unary.c) */

#ifdef CPU_ISA_LEVEL
#define CPU_K(name) CPU_K_(name, CPU_ISA_SUFFIX)
#define CPU_K_(name, suffix) CPU_K__(name, suffix)
#define CPU_K__(name, suffix) name##_##suffix
#endif

/* ---- thread pool (threads.c) ---- */

/** fn(lo, hi, arg) over [0, n) split in at most cpu_threads() chunks of at least `grain`. */
typedef void (*cpu_range_fn)(int64_t lo, int64_t hi, void *arg);
void cpu_parallel_for(int64_t n, int64_t grain, cpu_range_fn fn, void *arg);
/** Threads the pool uses (EMBER_NUM_THREADS, else the machine's cores). */
int cpu_threads(void);

/* ---- memory (alloc.c) ---- */

em_status cpu_alloc(void *ctx, size_t bytes, void **buf);
void cpu_free(void *ctx, void *buf);
void cpu_memory(void *ctx, size_t *in_use, size_t *peak);
void cpu_memory_reset_peak(void *ctx);
/** Scratch memory for a kernel (from the same cache; cpu_scratch_free gives it back). */
void *cpu_scratch(size_t bytes);
void cpu_scratch_free(void *p);

size_t cpu_memory_cached(void *ctx);
void cpu_memory_release(void *ctx);

/** The ref backend's table, for the cases a kernel does not specialize (other dtypes,
 *  unusual layouts): same host-view conventions, so its kernels run on our buffers. */
const em_backend_ops *cpu_ref(void);

/* ---- helpers ---- */

static inline int64_t cpu_numel(const em_view *v) {
    int64_t n = 1;
    for (int d = 0; d < v->rank; d++) n *= v->shape[d];
    return n;
}

/** True when v is row-major without gaps. */
static inline bool cpu_contiguous(const em_view *v) {
    int64_t s = 1;
    for (int i = v->rank - 1; i >= 0; i--) {
        if (v->shape[i] == 0) return true;
        if (v->shape[i] != 1 && v->strides[i] != s) return false;
        s *= v->shape[i];
    }
    return true;
}

/** Pointer to element 0 of a view. */
static inline void *cpu_ptr(const em_view *v) {
    return (char *)v->buf + v->offset * (int64_t)em_dtype_size(v->dtype);
}

/** A contiguous version of `in`: `in` itself when already contiguous, else a copy into
 *  scratch memory (*tmp is then non-NULL and freed with cpu_scratch_free). */
em_status cpu_contig_input(const em_view *in, em_view *out, void **tmp);

/* ---- the kernels ----
 * Compiled once: copy and fill (cpu.c), gather and scatter_add (index.c), matmul (matmul.c,
 * OpenBLAS), the AVX-512 pooling (pool_avx512.c), and the forwarders of isa.c, which run the
 * chosen level's kernels. */
em_status cpu_copy(void *ctx, const em_view *out, const em_view *in);
em_status cpu_fill(void *ctx, const em_view *out, double value);
em_status cpu_unary(void *ctx, em_unary_op op, const em_view *out, const em_view *in,
                    const double *params);
em_status cpu_binary(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                     const em_view *b);
em_status cpu_binary_scalar(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                            double s);
em_status cpu_where(void *ctx, const em_view *out, const em_view *cond, const em_view *a,
                    const em_view *b);
em_status cpu_reduce(void *ctx, em_reduce_op op, const em_view *out, const em_view *in,
                     int dim, const double *params);
em_status cpu_softmax(void *ctx, const em_view *out, const em_view *in, int dim, bool log);
em_status cpu_cumsum(void *ctx, const em_view *out, const em_view *in, int dim);
em_status cpu_cumulative(void *ctx, em_cum_op op, const em_view *values, const em_view *indices,
                         const em_view *in, int dim);
em_status cpu_conv2d(void *ctx, const em_view *out, const em_view *x, const em_view *w,
                     const em_view *bias, const em_conv_args *a);
em_status cpu_conv2d_weight_grad(void *ctx, const em_view *gw, const em_view *x,
                                 const em_view *gy, const em_conv_args *a);
em_status cpu_conv_transpose2d(void *ctx, const em_view *out, const em_view *x,
                               const em_view *w, const em_view *bias, const em_conv_args *a);
em_status cpu_max_pool2d(void *ctx, const em_view *out, const em_view *indices,
                         const em_view *x, const em_pool_args *a);
em_status cpu_avg_pool2d(void *ctx, const em_view *out, const em_view *x,
                         const em_pool_args *a);
em_status cpu_avg_pool2d_backward(void *ctx, const em_view *gx, const em_view *gy,
                                  const em_pool_args *a);
em_status cpu_layer_norm(void *ctx, const em_view *out, const em_view *x, const em_view *weight,
                         const em_view *bias, int64_t norm_numel, double eps);
/* fused.c (the chosen level's, through isa.c) */
em_status cpu_unary_backward(void *ctx, em_unary_op op, const em_view *gx, const em_view *x,
                             const em_view *y, const em_view *gy, const double *params);
em_status cpu_adam_step(void *ctx, const em_view *param, const em_view *exp_avg,
                        const em_view *exp_avg_sq, const em_view *grad, const em_adam_args *a);
/* norm.c (the chosen level's, through isa.c) */
em_status cpu_batch_norm(void *ctx, const em_view *out, const em_view *save_mean,
                         const em_view *save_invstd, const em_view *x, const em_view *weight,
                         const em_view *bias, const em_view *running_mean,
                         const em_view *running_var, bool training, double momentum,
                         double eps);
em_status cpu_batch_norm_backward(void *ctx, const em_view *gx, const em_view *gweight,
                                  const em_view *gbias, const em_view *gy, const em_view *x,
                                  const em_view *mean, const em_view *invstd,
                                  const em_view *weight, bool training);
em_status cpu_group_norm(void *ctx, const em_view *out, const em_view *save_mean,
                         const em_view *save_invstd, const em_view *x, const em_view *weight,
                         const em_view *bias, int64_t groups, double eps);
em_status cpu_rms_norm(void *ctx, const em_view *out, const em_view *save_invrms,
                       const em_view *x, const em_view *weight, int64_t norm_numel,
                       double eps);
em_status cpu_sdpa(void *ctx, const em_view *out, const em_view *lse, const em_view *q,
                      const em_view *k, const em_view *v, const em_view *mask, bool causal,
                      double scale, double dropout_p, uint64_t seed);
em_status cpu_sdpa_backward(void *ctx, const em_view *dq, const em_view *dk,
                               const em_view *dv, const em_view *q, const em_view *k,
                               const em_view *v, const em_view *mask, const em_view *out,
                               const em_view *dout, const em_view *lse, bool causal,
                               double scale, double dropout_p, uint64_t seed);
/* fallback.c: the slots left to ref (counted, see fallback.h) */
em_status cpu_arange(void *ctx, const em_view *out, double start, double step);
em_status cpu_random(void *ctx, em_random_op op, const em_view *out, uint64_t seed,
                     const double *params);
em_status cpu_sort(void *ctx, const em_view *values, const em_view *indices, const em_view *in,
                   int dim, bool descending);
/* nn.c (the chosen level's, through isa.c) */
em_status cpu_adaptive_avg_pool2d(void *ctx, const em_view *out, const em_view *x);
em_status cpu_adaptive_avg_pool2d_backward(void *ctx, const em_view *gx, const em_view *gy);
/* index.c */
em_status cpu_index_select(void *ctx, const em_view *out, const em_view *in, int dim,
                           const em_view *index);
em_status cpu_gather(void *ctx, const em_view *out, const em_view *in, int dim,
                     const em_view *index);
em_status cpu_scatter_add(void *ctx, const em_view *out, int dim, const em_view *index,
                          const em_view *src);
/* pool_avx512.c: 2x2 / stride 2 max pooling with indices of f32 planes (contiguous, no
 * padding, 2*OH <= H, 2*OW <= W); false when the chosen level is below avx512 (nothing
 * written) */
bool cpu_maxpool2x2_f32(float *out, int64_t *idx, const float *x, int64_t planes, int64_t H,
                        int64_t W, int64_t OH, int64_t OW);
/* matmul.c */
#include <cblas.h>
/** C = A B + beta C with CBLAS conventions (row-major), f32 or f64, split over the pool. */
/** False when OpenBLAS's kernel cannot run on this CPU (cpu_blas_core_unrunnable): cpu_gemm
 *  then runs ember's GEMM (gemm.c) whatever EMBER_CPU_GEMM says. Decided once. */
bool cpu_blas_usable(void);
void cpu_gemm(em_dtype dt, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n,
              int64_t k, const void *a, int64_t lda, const void *b, int64_t ldb, double beta,
              void *c, int64_t ldc);
em_status cpu_matmul(void *ctx, const em_view *out, const em_view *a, const em_view *b);

#ifdef CPU_ISA_LEVEL
/* The per-level entry points of this copy (the slots above, then compare.c's helpers). */
em_status CPU_K(cpu_unary)(void *ctx, em_unary_op op, const em_view *out, const em_view *in,
                           const double *params);
em_status CPU_K(cpu_binary)(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                            const em_view *b);
em_status CPU_K(cpu_binary_scalar)(void *ctx, em_binary_op op, const em_view *out,
                                   const em_view *a, double s);
em_status CPU_K(cpu_where)(void *ctx, const em_view *out, const em_view *cond,
                           const em_view *a, const em_view *b);
em_status CPU_K(cpu_reduce)(void *ctx, em_reduce_op op, const em_view *out, const em_view *in,
                            int dim, const double *params);
em_status CPU_K(cpu_softmax)(void *ctx, const em_view *out, const em_view *in, int dim,
                             bool log);
em_status CPU_K(cpu_cumsum)(void *ctx, const em_view *out, const em_view *in, int dim);
em_status CPU_K(cpu_cumulative)(void *ctx, em_cum_op op, const em_view *values,
                                const em_view *indices, const em_view *in, int dim);
em_status CPU_K(cpu_conv2d)(void *ctx, const em_view *out, const em_view *x, const em_view *w,
                            const em_view *bias, const em_conv_args *a);
em_status CPU_K(cpu_conv2d_weight_grad)(void *ctx, const em_view *gw, const em_view *x,
                                        const em_view *gy, const em_conv_args *a);
em_status CPU_K(cpu_conv_transpose2d)(void *ctx, const em_view *out, const em_view *x,
                                      const em_view *w, const em_view *bias,
                                      const em_conv_args *a);
em_status CPU_K(cpu_max_pool2d)(void *ctx, const em_view *out, const em_view *indices,
                                const em_view *x, const em_pool_args *a);
em_status CPU_K(cpu_avg_pool2d)(void *ctx, const em_view *out, const em_view *x,
                                const em_pool_args *a);
em_status CPU_K(cpu_avg_pool2d_backward)(void *ctx, const em_view *gx, const em_view *gy,
                                         const em_pool_args *a);
em_status CPU_K(cpu_layer_norm)(void *ctx, const em_view *out, const em_view *x,
                                const em_view *weight, const em_view *bias, int64_t norm_numel,
                                double eps);
em_status CPU_K(cpu_adaptive_avg_pool2d)(void *ctx, const em_view *out, const em_view *x);
em_status CPU_K(cpu_batch_norm)(void *ctx, const em_view *out, const em_view *save_mean,
                                const em_view *save_invstd, const em_view *x,
                                const em_view *weight, const em_view *bias,
                                const em_view *running_mean, const em_view *running_var,
                                bool training, double momentum, double eps);
em_status CPU_K(cpu_batch_norm_backward)(void *ctx, const em_view *gx, const em_view *gweight,
                                         const em_view *gbias, const em_view *gy,
                                         const em_view *x, const em_view *mean,
                                         const em_view *invstd, const em_view *weight,
                                         bool training);
em_status CPU_K(cpu_group_norm)(void *ctx, const em_view *out, const em_view *save_mean,
                                const em_view *save_invstd, const em_view *x,
                                const em_view *weight, const em_view *bias, int64_t groups,
                                double eps);
em_status CPU_K(cpu_rms_norm)(void *ctx, const em_view *out, const em_view *save_invrms,
                              const em_view *x, const em_view *weight, int64_t norm_numel,
                              double eps);
em_status CPU_K(cpu_sdpa)(void *ctx, const em_view *out, const em_view *lse, const em_view *q,
                      const em_view *k, const em_view *v, const em_view *mask, bool causal,
                      double scale, double dropout_p, uint64_t seed);
em_status CPU_K(cpu_sdpa_backward)(void *ctx, const em_view *dq, const em_view *dk,
                               const em_view *dv, const em_view *q, const em_view *k,
                               const em_view *v, const em_view *mask, const em_view *out,
                               const em_view *dout, const em_view *lse, bool causal,
                               double scale, double dropout_p, uint64_t seed);
em_status CPU_K(cpu_adaptive_avg_pool2d_backward)(void *ctx, const em_view *gx,
                                                  const em_view *gy);
/* gemm.c: ember's GEMM (see isa.h's cpu_kernels.gemm); its tile at this level is CPU_GEMM_MR
 * rows by CPU_GEMM_NV vectors of CPU_GEMM_VB bytes (the level's vector width) */
void CPU_K(cpu_gemm_kernel)(em_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                            const void *a, int64_t lda, const void *b, int64_t ldb, double beta,
                            void *c, int64_t ldc);
#if CPU_ISA_LEVEL >= CPU_ISA_AVX512
#define CPU_GEMM_VB 64
#define CPU_GEMM_MR 12
#elif CPU_ISA_LEVEL == CPU_ISA_AVX2
#define CPU_GEMM_VB 32
#define CPU_GEMM_MR 6
#else
#define CPU_GEMM_VB 16
#define CPU_GEMM_MR 4
#endif
#define CPU_GEMM_NV 2
/* fused.c */
em_status CPU_K(cpu_unary_backward)(void *ctx, em_unary_op op, const em_view *gx,
                                    const em_view *x, const em_view *y, const em_view *gy,
                                    const double *params);
em_status CPU_K(cpu_adam_step)(void *ctx, const em_view *param, const em_view *exp_avg,
                               const em_view *exp_avg_sq, const em_view *grad,
                               const em_adam_args *a);
/* kernels.c: this copy's table */
extern const cpu_kernels CPU_K(cpu_kernels);
/* compare.c: comparisons of any layout and dtype (a scalar is a stride-0 view; false: not
 * handled, the caller falls back) */
bool CPU_K(cpu_compare)(em_binary_op op, const em_view *out, const em_view *a,
                        const em_view *b);
#endif

#endif /* EMBER_CPU_H */
