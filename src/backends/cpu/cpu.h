/*
 * cpu.h — private interface of the optimized CPU backend.
 *
 * Buffers are host memory, so views follow the ref conventions (view.buf is the data
 * pointer, strides and offsets in elements) and every kernel slot this backend leaves NULL is
 * served by the ref kernel (see em_backend_get). What is here is what is worth making fast:
 * a caching allocator, a thread pool, matmul through OpenBLAS, vectorized elementwise ops,
 * reductions, softmax, convolution by im2col + GEMM, pooling and layer_norm.
 *
 * Kernels accept any strided inputs. Their fast paths need contiguous (or, for binary ops,
 * broadcast) layouts; other layouts are first copied into a contiguous scratch buffer.
 */
#ifndef EMBER_CPU_H
#define EMBER_CPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/backend.h"

/* ---- instruction sets ----
 * A hot loop marked CPU_CLONES is compiled three times, for AVX-512, for x86-64-v3 (AVX2 with
 * FMA: cpu_expf needs fmaf inline) and portably; the loader picks the best at run time.
 * Sanitizer builds and clang get one portable version; CPU_NO_CLONES forces that too. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&                             \
    !defined(__SANITIZE_ADDRESS__) && !defined(CPU_NO_CLONES)
#define CPU_CLONES __attribute__((target_clones("avx512f", "arch=x86-64-v3", "default")))
#else
#define CPU_CLONES
#endif

/** True when the CPU runs AVX-512F (the hand-written kernels of conv.c and pool_avx512.c);
 *  false off x86-64. */
static inline bool cpu_has_avx512(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
#else
    return false;
#endif
}

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

/* ---- the kernels ---- */
em_status cpu_copy(void *ctx, const em_view *out, const em_view *in);
em_status cpu_fill(void *ctx, const em_view *out, double value);
em_status cpu_unary(void *ctx, em_unary_op op, const em_view *out, const em_view *in,
                    const double *params);
em_status cpu_binary(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                     const em_view *b);
em_status cpu_binary_scalar(void *ctx, em_binary_op op, const em_view *out, const em_view *a,
                            double s);
/* compare.c: dense f32/f64 comparisons (false: not handled, the caller falls back) */
bool cpu_compare(em_binary_op op, const em_view *out, const em_view *a, const em_view *b);
bool cpu_compare_scalar(em_binary_op op, const em_view *out, const em_view *a, double s);
/* pool_avx512.c: 2x2 / stride 2 max pooling with indices of f32 planes (contiguous, no
 * padding, 2*OH <= H, 2*OW <= W); false when the machine has no AVX-512 (nothing written) */
bool cpu_maxpool2x2_f32(float *out, int64_t *idx, const float *x, int64_t planes, int64_t H,
                        int64_t W, int64_t OH, int64_t OW);
/* index.c */
em_status cpu_gather(void *ctx, const em_view *out, const em_view *in, int dim,
                     const em_view *index);
em_status cpu_scatter_add(void *ctx, const em_view *out, int dim, const em_view *index,
                          const em_view *src);
em_status cpu_where(void *ctx, const em_view *out, const em_view *cond, const em_view *a,
                    const em_view *b);
/* reduce.c */
em_status cpu_reduce(void *ctx, em_reduce_op op, const em_view *out, const em_view *in,
                     int dim, const double *params);
em_status cpu_softmax(void *ctx, const em_view *out, const em_view *in, int dim, bool log);
/* matmul.c */
#include <cblas.h>
/** C = A B + beta C with CBLAS conventions (row-major), f32 or f64, split over the pool. */
void cpu_gemm(em_dtype dt, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n,
              int64_t k, const void *a, int64_t lda, const void *b, int64_t ldb, double beta,
              void *c, int64_t ldc);
em_status cpu_matmul(void *ctx, const em_view *out, const em_view *a, const em_view *b);
/* conv.c */
em_status cpu_conv2d(void *ctx, const em_view *out, const em_view *x, const em_view *w,
                     const em_view *bias, const em_conv_args *a);
em_status cpu_conv2d_weight_grad(void *ctx, const em_view *gw, const em_view *x,
                                 const em_view *gy, const em_conv_args *a);
em_status cpu_conv_transpose2d(void *ctx, const em_view *out, const em_view *x,
                               const em_view *w, const em_view *bias, const em_conv_args *a);
/* nn.c */
em_status cpu_max_pool2d(void *ctx, const em_view *out, const em_view *indices,
                         const em_view *x, const em_pool_args *a);
em_status cpu_avg_pool2d(void *ctx, const em_view *out, const em_view *x,
                         const em_pool_args *a);
em_status cpu_avg_pool2d_backward(void *ctx, const em_view *gx, const em_view *gy,
                                  const em_pool_args *a);
em_status cpu_layer_norm(void *ctx, const em_view *out, const em_view *x, const em_view *weight,
                         const em_view *bias, int64_t norm_numel, double eps);

#endif /* EMBER_CPU_H */
