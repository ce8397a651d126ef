/*
 * cpu.c — `ember-bench cpu`: the cpu backend against its baselines, each ratio measured in one
 * run with the two sides interleaved in rounds (medians):
 *   - matmul f32, n = 256 .. 2048: ember (cpu) vs a direct cblas_sgemm call (same OpenBLAS);
 *   - the models' GEMM shapes (bench/models) at one thread: ember's GEMM vs OpenBLAS, ratio;
 *   - add and relu(a*b+c) on 16M f32: ember vs a plain C loop compiled -O3 -march=native;
 *   - the speedup of cpu over ref on each case (softmax, sum, conv2d, layer_norm, pooling);
 *   - tiny-op latency: em_add of two 1-element tensors on cpu.
 * The comparisons with PyTorch (softmax, sum, conv2d, at::add) are in bench/cpu_vs_torch.py,
 * which runs ember through its shared library beside torch in one process.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "ember/backend.h"
#include "ember/ember.h"

#ifdef EMBER_HAVE_OPENBLAS
#include <cblas.h>
#include <time.h>
#include <unistd.h>

#include "backends/cpu/isa.h"
char *openblas_get_corename(void);
void openblas_set_num_threads(int n);
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#endif

#define TRY(x)                                                                                \
    do {                                                                                      \
        em_status s_ = (x);                                                                   \
        if (s_ != EM_OK) {                                                                    \
            fprintf(stderr, "ember-bench cpu: %s: %s\n", #x, em_last_error());                \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

static int rounds = 5;

static em_tensor *rand_on(const int64_t *shape, int rank, em_device dev, uint64_t seed) {
    em_tensor *t;
    TRY(em_rand_uniform(shape, rank, EM_F32, -1.0, 1.0, seed, dev, &t));
    return t;
}

/* ---- one timed job: run(arg) once, returns seconds ---- */

typedef void (*job_fn)(void *arg);

static double time_once(job_fn fn, void *arg) {
    double t0 = bench_now_ns();
    fn(arg);
    return (bench_now_ns() - t0) * 1e-9;
}

/* Medians of two jobs interleaved over `rounds` rounds (after one warm-up each). */
static void time_pair(job_fn a, void *aa, job_fn b, void *ba, double *ta, double *tb) {
    double va[64], vb[64];
    int r = rounds > 64 ? 64 : rounds;
    a(aa);
    b(ba);
    for (int i = 0; i < r; i++) {
        if (i % 2) {
            vb[i] = time_once(b, ba);
            va[i] = time_once(a, aa);
        } else {
            va[i] = time_once(a, aa);
            vb[i] = time_once(b, ba);
        }
    }
    *ta = bench_median(va, r);
    *tb = bench_median(vb, r);
}

/* ---- ember ops as jobs ---- */

typedef enum { OP_MATMUL, OP_ADD, OP_CHAIN, OP_SOFTMAX, OP_SUM, OP_CONV, OP_LN, OP_POOL } op_kind;

typedef struct ember_job {
    op_kind op;
    em_tensor *a, *b, *c; /* inputs (b, c may be NULL) */
    int reps;
} ember_job;

static void ember_run(void *arg) {
    ember_job *j = arg;
    for (int r = 0; r < j->reps; r++) {
        em_tensor *o = NULL, *t1 = NULL, *t2 = NULL;
        switch (j->op) {
        case OP_MATMUL: TRY(em_matmul(j->a, j->b, &o)); break;
        case OP_ADD: TRY(em_add(j->a, j->b, &o)); break;
        case OP_CHAIN:
            TRY(em_mul(j->a, j->b, &t1));
            TRY(em_add_(t1, j->c, &t2)); /* consumes t1: in place when it can */
            TRY(em_relu_(t2, &o));
            break;
        case OP_SOFTMAX: TRY(em_softmax(j->a, -1, &o)); break;
        case OP_SUM: TRY(em_sum_dim(j->a, 1, false, &o)); break;
        case OP_CONV: {
            em_conv_params p = em_conv_params_default();
            p.padding[0] = p.padding[1] = 1;
            TRY(em_conv2d(j->a, j->b, NULL, &p, &o));
            break;
        }
        case OP_LN: TRY(em_layer_norm(j->a, 1, NULL, NULL, 1e-5, &o)); break;
        case OP_POOL: {
            em_pool_params p;
            memset(&p, 0, sizeof p);
            p.kernel[0] = p.kernel[1] = 2;
            TRY(em_max_pool2d(j->a, &p, &o, NULL));
            break;
        }
        }
        em_tensor_release(o);
    }
}

#ifdef EMBER_HAVE_OPENBLAS
typedef struct blas_job {
    int n, reps;
    float *a, *b, *c;
} blas_job;

/* The threads ember's pool has (and the baseline gets): EMBER_NUM_THREADS, else the cores. */
static int pool_threads(void) {
    const char *e = getenv("EMBER_NUM_THREADS");
    long n = e && *e ? strtol(e, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* The baseline is OpenBLAS at its best: threaded with as many threads as ember's pool (ember
 * itself keeps OpenBLAS on one thread and splits GEMMs over its pool). */
static void blas_run(void *arg) {
    blas_job *j = arg;
    for (int r = 0; r < j->reps; r++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, j->n, j->n, j->n, 1.0f, j->a, j->n,
                    j->b, j->n, 0.0f, j->c, j->n);
}

/* OpenBLAS's own threads spin for about 0.1 s after a threaded call: let them settle before
 * ember's pool runs, so neither side is timed against the other's idle threads. The wait is
 * busy: a core that sleeps comes back slow for a while on virtual machines. */
static void blas_threads(int n) {
    openblas_set_num_threads(n);
    double t0 = bench_now_ns();
    while (bench_now_ns() - t0 < 3e8) {
    }
}
#endif

typedef struct loop_job {
    op_kind op;
    float *z, *a, *b, *c;
    int64_t n;
} loop_job;

static void loop_run(void *arg) {
    loop_job *j = arg;
    if (j->op == OP_ADD) bench_loop_add(j->z, j->a, j->b, j->n);
    else bench_loop_fma_relu(j->z, j->a, j->b, j->c, j->n);
}

static float *host_copy(const em_tensor *t) {
    size_t bytes = (size_t)em_tensor_numel(t) * sizeof(float);
    float *p = malloc(bytes);
    if (!p) {
        fprintf(stderr, "ember-bench cpu: out of memory\n");
        exit(1);
    }
    TRY(em_tensor_to_data(t, p, bytes));
    return p;
}


#ifdef EMBER_HAVE_OPENBLAS
/* ---- one core against its FMA peak ---- */

static double thread_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* The peak loop: N independent chains a = a * x + y (x just below 1, y small: the values stay
 * near 1, never denormal), enough of them to cover FMA latency x throughput (Zen 3: 4 cycles
 * x 2 a cycle = 8; Intel's AVX-512 cores: 4 x 2), fewer than the registers (16 ymm / 32 zmm)
 * so that nothing spills. Returns GFLOP/s (2 flops a lane an FMA), one thread's CPU time. */
#define PK_X(a) a = PK_FMA(a, x, y);
#define PK_12(X) X(a0) X(a1) X(a2) X(a3) X(a4) X(a5) X(a6) X(a7) X(a8) X(a9) X(a10) X(a11)
#define PK_24(X) PK_12(X) X(b0) X(b1) X(b2) X(b3) X(b4) X(b5) X(b6) X(b7) X(b8) X(b9) X(b10) X(b11)
#define PK_BODY(VT, SET1, CHAINS, NCH, LANES)                                                 \
    const VT x = SET1(0.9999999), y = SET1(1e-7);                                             \
    VT a0 = SET1(1.00), a1 = SET1(1.01), a2 = SET1(1.02), a3 = SET1(1.03), a4 = SET1(1.04),   \
       a5 = SET1(1.05), a6 = SET1(1.06), a7 = SET1(1.07), a8 = SET1(1.08), a9 = SET1(1.09),   \
       a10 = SET1(1.10), a11 = SET1(1.11);                                                    \
    PK_MORE(VT, SET1)                                                                         \
    double t0 = thread_ns();                                                                  \
    for (long i = 0; i < iters; i++) {                                                        \
        CHAINS(PK_X)                                                                          \
    }                                                                                         \
    double t = thread_ns() - t0;                                                              \
    VT s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11 PK_SUM;                \
    volatile double sink = (double)s[0];                                                      \
    (void)sink;                                                                               \
    return (double)iters * (NCH) * (LANES) * 2.0 / t;

#if defined(__x86_64__) || defined(__i386__)
#define PK_MORE(VT, SET1)
#define PK_SUM
#define PK_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
__attribute__((target("avx2,fma"))) static double peak_avx2_f32(long iters) {
    PK_BODY(__m256, _mm256_set1_ps, PK_12, 12, 8)
}
#undef PK_FMA
#define PK_FMA(a, b, c) _mm256_fmadd_pd(a, b, c)
__attribute__((target("avx2,fma"))) static double peak_avx2_f64(long iters) {
    PK_BODY(__m256d, _mm256_set1_pd, PK_12, 12, 4)
}
#undef PK_FMA
#define PK_FMA(a, b, c) _mm_add_ps(_mm_mul_ps(a, b), c)
static double peak_sse2_f32(long iters) { PK_BODY(__m128, _mm_set1_ps, PK_12, 12, 4) }
#undef PK_FMA
#define PK_FMA(a, b, c) _mm_add_pd(_mm_mul_pd(a, b), c)
static double peak_sse2_f64(long iters) { PK_BODY(__m128d, _mm_set1_pd, PK_12, 12, 2) }
#undef PK_FMA
#undef PK_MORE
#undef PK_SUM
#define PK_MORE(VT, SET1)                                                                     \
    VT b0 = SET1(1.12), b1 = SET1(1.13), b2 = SET1(1.14), b3 = SET1(1.15), b4 = SET1(1.16),   \
       b5 = SET1(1.17), b6 = SET1(1.18), b7 = SET1(1.19), b8 = SET1(1.20), b9 = SET1(1.21),   \
       b10 = SET1(1.22), b11 = SET1(1.23);
#define PK_SUM +b0 + b1 + b2 + b3 + b4 + b5 + b6 + b7 + b8 + b9 + b10 + b11
#define PK_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
__attribute__((target("avx512f"))) static double peak_avx512_f32(long iters) {
    PK_BODY(__m512, _mm512_set1_ps, PK_24, 24, 16)
}
#undef PK_FMA
#define PK_FMA(a, b, c) _mm512_fmadd_pd(a, b, c)
__attribute__((target("avx512f"))) static double peak_avx512_f64(long iters) {
    PK_BODY(__m512d, _mm512_set1_pd, PK_24, 24, 8)
}
#undef PK_FMA
#undef PK_MORE
#undef PK_SUM
#endif

/* The peak of the chosen level in GFLOP/s, f32 or f64, over about `ms` milliseconds. */
static double peak_gflops(int level, bool f64, double ms) {
#if defined(__x86_64__) || defined(__i386__)
    double (*fn)(long) = level >= CPU_ISA_AVX512 ? (f64 ? peak_avx512_f64 : peak_avx512_f32)
                         : level == CPU_ISA_AVX2 ? (f64 ? peak_avx2_f64 : peak_avx2_f32)
                                                 : (f64 ? peak_sse2_f64 : peak_sse2_f32);
    const double per_iter = (level >= CPU_ISA_AVX512 ? 24.0 * 64 : 12.0 * (level == CPU_ISA_AVX2
                                                                              ? 32 : 16)) /
                            (f64 ? 8 : 4) * 2.0; /* flops an iteration */
    double rate = fn(20000);                     /* flop/ns */
    long iters = (long)(ms * 1e6 * rate / per_iter) + 1000;
    return fn(iters);
#else
    (void)level;
    (void)f64;
    (void)ms;
    return 0;
#endif
}

typedef struct gemm1_job {
    int n, reps, which; /* 0: ember's GEMM, 1: OpenBLAS, 2: em_matmul */
    bool f64;
    void *a, *b, *c;
    em_tensor *ta, *tb;
    const cpu_kernels *k;
} gemm1_job;

static void gemm1_run(gemm1_job *j) {
    const int n = j->n;
    for (int r = 0; r < j->reps; r++) {
        if (j->which == 0) {
            j->k->gemm(j->f64 ? EM_F64 : EM_F32, false, false, n, n, n, j->a, n, j->b, n, 0.0,
                       j->c, n);
        } else if (j->which == 1) {
            if (j->f64)
                cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, j->a, n,
                            j->b, n, 0.0, j->c, n);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, j->a, n,
                            j->b, n, 0.0f, j->c, n);
        } else {
            em_tensor *o;
            TRY(em_matmul(j->ta, j->tb, &o));
            em_tensor_release(o);
        }
    }
}

static void section_peak(em_device cpu) {
    const int level = cpu_isa();
    const cpu_kernels *k = cpu_kernels_of(level);
    const bool pool1 = pool_threads() == 1;
    char line[320];
    cpu_gemm_describe(line, sizeof line);
    printf("\none core vs its FMA peak (%s vectors; thread CPU time, medians of per-round "
           "fractions)\n", cpu_isa_name(level));
    printf("  em_matmul runs: %s\n", line);
    if (!pool1)
        printf("  (em_matmul's one-thread column needs EMBER_NUM_THREADS=1; the matmul section\n"
               "   below times it with the pool)\n");
    openblas_set_num_threads(1);
    for (int d = 0; d < 2; d++) {
        const bool f64 = d == 1;
        const size_t sz = f64 ? sizeof(double) : sizeof(float);
        double pk_med[64];
        int r = rounds > 64 ? 64 : rounds;
        printf("  %s  %6s %10s %16s %16s", f64 ? "f64" : "f32", "n", "peak GF/s",
               "ember GF/s (fr)", "OpenBLAS (fr)");
        if (pool1) printf(" %16s", "em_matmul (fr)");
        printf("\n");
        for (int n = 512; n <= 2048; n *= 2) {
            int64_t shape[2] = {n, n};
            em_tensor *ta, *tb, *a32 = rand_on(shape, 2, cpu, 11),
                                *b32 = rand_on(shape, 2, cpu, 12);
            if (f64) {
                TRY(em_cast(a32, EM_F64, &ta));
                TRY(em_cast(b32, EM_F64, &tb));
                em_tensor_release(a32);
                em_tensor_release(b32);
            } else {
                ta = a32;
                tb = b32;
            }
            size_t bytes = sz * (size_t)n * (size_t)n;
            void *ha = malloc(bytes), *hb = malloc(bytes), *hc = malloc(bytes);
            if (!ha || !hb || !hc) {
                fprintf(stderr, "ember-bench cpu: out of memory\n");
                exit(1);
            }
            TRY(em_tensor_to_data(ta, ha, bytes));
            TRY(em_tensor_to_data(tb, hb, bytes));
            memset(hc, 0, bytes);
            const int reps = n <= 512 ? 8 : 1, nj = pool1 ? 3 : 2;
            gemm1_job jobs[3];
            for (int w = 0; w < 3; w++)
                jobs[w] = (gemm1_job){n, reps, w, f64, ha, hb, hc, ta, tb, k};
            double gf[3][64], fr[3][64];
            const double flop = 2.0 * n * n * (double)n * reps;
            for (int w = 0; w < nj; w++) gemm1_run(&jobs[w]); /* warm-up */
            for (int i = 0; i < r; i++) {
                double pk = peak_gflops(level, f64, 30);
                pk_med[i] = pk;
                for (int q = 0; q < nj; q++) {
                    int w = (q + i) % nj; /* the order rotates from round to round */
                    double t0 = thread_ns();
                    gemm1_run(&jobs[w]);
                    double t = thread_ns() - t0;
                    gf[w][i] = flop / t;
                    fr[w][i] = gf[w][i] / pk;
                }
            }
            printf("       %6d %10.1f", n, bench_median(pk_med, r));
            for (int w = 0; w < nj; w++) {
                double g = bench_median(gf[w], r), f = bench_median(fr[w], r);
                printf("  %8.1f (%.2f)", g, f);
            }
            printf("\n");
            free(ha);
            free(hb);
            free(hc);
            em_tensor_release(ta);
            em_tensor_release(tb);
        }
    }
    printf("  (fr: fraction of the one-core peak above; ember's GEMM is the %s copy, %dx%d f32 "
           "tiles)\n", cpu_isa_name(level), k->gemm_mr, k->gemm_nr);
    openblas_set_num_threads(1);
}
#endif

#ifdef EMBER_HAVE_OPENBLAS
/* ---- the models' GEMMs: ember's GEMM vs OpenBLAS on the shapes of bench/models ---- */

typedef struct shape_job {
    int which; /* 0: ember's GEMM, 1: OpenBLAS, 2: em_matmul */
    int64_t batch, m, k, n, reps;
    bool ta, tb;
    float *a, *b, *c;     /* batch items one after another */
    em_tensor *xa, *xb;   /* em_matmul's operands: views with op() applied */
    const cpu_kernels *kern;
} shape_job;

static void shape_run(shape_job *j) {
    const int64_t lda = j->ta ? j->m : j->k, ldb = j->tb ? j->k : j->n;
    for (int64_t r = 0; r < j->reps; r++) {
        if (j->which == 2) {
            em_tensor *o;
            TRY(em_matmul(j->xa, j->xb, &o));
            em_tensor_release(o);
            continue;
        }
        for (int64_t bi = 0; bi < j->batch; bi++) {
            const float *a = j->a + bi * j->m * j->k, *b = j->b + bi * j->k * j->n;
            float *c = j->c + bi * j->m * j->n;
            if (j->which == 0)
                j->kern->gemm(EM_F32, j->ta, j->tb, j->m, j->n, j->k, a, lda, b, ldb, 0.0, c,
                              j->n);
            else
                cblas_sgemm(CblasRowMajor, j->ta ? CblasTrans : CblasNoTrans,
                            j->tb ? CblasTrans : CblasNoTrans, (int)j->m, (int)j->n, (int)j->k,
                            1.0f, a, (int)lda, b, (int)ldb, 0.0f, c, (int)j->n);
        }
    }
}

/* op(x) of a stored [batch, rows, cols] (batch 1: 2-d) as a tensor: the transpose a view */
static em_tensor *stored(em_device cpu, int64_t batch, int64_t rows, int64_t cols, bool t,
                         uint64_t seed) {
    int64_t sh[3] = {batch, rows, cols};
    em_tensor *x = batch > 1 ? rand_on(sh, 3, cpu, seed) : rand_on(sh + 1, 2, cpu, seed), *v;
    if (!t) return x;
    TRY(em_transpose(x, -1, -2, &v));
    em_tensor_release(x);
    return v;
}

static void section_models(em_device cpu) {
    static const struct {
        int64_t batch, m, k, n;
        bool ta, tb;
        const char *what;
    } S[] = {
        {1, 1024, 192, 576, false, true, "gpt qkv x W^T"},
        {1, 1024, 576, 192, false, false, "gpt qkv grad x"},
        {1, 576, 1024, 192, true, false, "gpt qkv grad W"},
        {1, 1024, 192, 768, false, true, "gpt fc1"},
        {1, 1024, 768, 192, false, true, "gpt fc2"},
        {1, 768, 1024, 192, true, false, "gpt fc1 grad W"},
        {1, 1024, 192, 1024, false, true, "gpt head"},
        {1, 1024, 1024, 192, false, false, "gpt head grad x"},
        {48, 128, 32, 128, false, false, "attention q k^T"},
        {48, 128, 128, 32, false, false, "attention p v"},
        {1, 128, 784, 1024, false, true, "mlp fc1"},
        {1, 128, 1024, 1024, false, true, "mlp fc2"},
        {1, 1024, 128, 1024, true, false, "mlp fc2 grad W"},
        {1, 128, 1024, 784, false, false, "mlp fc1 grad x"},
        {1, 128, 64, 128, false, true, "small"},
        {1, 512, 512, 512, false, false, "square"},
        /* skinny products (few rows of C; OpenBLAS keeps them where its kernel's width is
         * the level's): the ResNet's im2col convolutions (w [O, C*9] @ col [C*9, 16 images'
         * positions]) and their weight gradients (gy [O, cols] @ col^T), and the MLP's */
        {1, 16, 144, 4096, false, false, "conv 16x16 3x3"},
        {1, 32, 288, 4096, false, false, "conv 32x32 3x3"},
        {1, 64, 576, 1024, false, false, "conv 64x64 3x3"},
        {1, 32, 1024, 288, false, true, "conv 32 wgrad"},
        {1, 64, 1024, 576, false, true, "conv 64 wgrad"},
        {1, 288, 1024, 32, false, true, "conv 32 wgrad^T"},
        {1, 576, 1024, 64, false, true, "conv 64 wgrad^T"},
        {1, 144, 4096, 32, false, true, "conv 16>32 wgrad^T"},
        {1, 32, 4096, 144, false, true, "conv 16>32 wgrad"},
        {1, 64, 1024, 1024, false, false, "skinny 64"},
        /* batch < 0: em_matmul of x [-batch, m, k] by a shared W^T [k, n], which cpu_matmul
         * folds into one GEMM of -batch * m rows; the direct calls run that GEMM */
        {-8, 128, 192, 576, false, true, "linear [8,128,192]"},
    };
    const int nshape = (int)(sizeof S / sizeof S[0]);
    const bool pool1 = pool_threads() == 1;
    const cpu_kernels *kern = cpu_kernels_of(cpu_isa());
    char line[320];
    cpu_gemm_describe(line, sizeof line);
    printf("\nthe models' GEMMs (bench/models), f32, one thread: ember's GEMM (%s) vs OpenBLAS "
           "(%s), interleaved, thread CPU time, medians\n", cpu_isa_name(kern->isa),
           openblas_get_corename());
    printf("  em_matmul runs: %s\n", line);
    printf("  %-18s %5s %5s %5s %5s %3s %10s %10s %7s", "", "batch", "m", "k", "n", "op",
           "ember GF/s", "OpenBLAS", "ratio");
    if (pool1) printf(" %10s", "em_matmul");
    printf("\n");
    openblas_set_num_threads(1);
    double logsum = 0;
    for (int s = 0; s < nshape; s++) {
        const bool shared = S[s].batch < 0; /* S[s].ta is false there */
        const int64_t B = shared ? 1 : S[s].batch, m = shared ? -S[s].batch * S[s].m : S[s].m,
                      k = S[s].k, n = S[s].n;
        const double flop = 2.0 * (double)(B * m) * (double)n * (double)k;
        const int64_t reps = (int64_t)(2e8 / flop) + 1;
        em_tensor *xa = shared ? stored(cpu, -S[s].batch, S[s].m, k, false, 21 + s)
                               : stored(cpu, B, S[s].ta ? k : m, S[s].ta ? m : k, S[s].ta, 21 + s),
                  *xb = stored(cpu, B, S[s].tb ? n : k, S[s].tb ? k : n, S[s].tb, 51 + s);
        /* the same values, as stored (the transposed views' own buffers, contiguous) */
        em_tensor *ca, *cb;
        TRY(em_transpose(xa, -1, -2, &ca)); /* (unused when not transposed) */
        TRY(em_transpose(xb, -1, -2, &cb));
        em_tensor *sa, *sb;
        TRY(em_contiguous(S[s].ta ? ca : xa, &sa));
        TRY(em_contiguous(S[s].tb ? cb : xb, &sb));
        float *ha = host_copy(sa), *hb = host_copy(sb);
        float *hc = calloc((size_t)(B * m * n), sizeof(float));
        if (!hc) {
            fprintf(stderr, "ember-bench cpu: out of memory\n");
            exit(1);
        }
        shape_job jobs[3];
        for (int w = 0; w < 3; w++)
            jobs[w] = (shape_job){w, B, m, k, n, reps, S[s].ta, S[s].tb, ha, hb, hc, xa, xb,
                                  kern};
        const int nj = pool1 ? 3 : 2, r = rounds > 64 ? 64 : rounds;
        double gf[3][64], ratio[64];
        for (int w = 0; w < nj; w++) shape_run(&jobs[w]); /* warm-up */
        for (int i = 0; i < r; i++) {
            for (int q = 0; q < nj; q++) {
                const int w = (q + i) % nj; /* the order rotates from round to round */
                const double t0 = thread_ns();
                shape_run(&jobs[w]);
                gf[w][i] = flop * (double)reps / (thread_ns() - t0);
            }
            ratio[i] = gf[0][i] / gf[1][i];
        }
        const double rt = bench_median(ratio, r);
        logsum += log(rt);
        printf("  %-18s %5lld %5lld %5lld %5lld  %c%c %10.1f %10.1f %7.2f", S[s].what,
               (long long)S[s].batch, (long long)m, (long long)k, (long long)n,
               S[s].ta ? 't' : 'n',
               S[s].tb ? 't' : 'n', bench_median(gf[0], r), bench_median(gf[1], r), rt);
        if (pool1) printf(" %10.1f", bench_median(gf[2], r));
        printf("\n");
        free(ha);
        free(hb);
        free(hc);
        em_tensor_release(xa);
        em_tensor_release(xb);
        em_tensor_release(ca);
        em_tensor_release(cb);
        em_tensor_release(sa);
        em_tensor_release(sb);
    }
    printf("  (ratio: ember's GEMM / OpenBLAS, the median of per-round ratios; geometric mean "
           "%.2f; batch -8: em_matmul of [8, m/8, k] by a shared W^T, one GEMM of m rows)\n",
           exp(logsum / nshape));
    if (!pool1) printf("  (em_matmul's column needs EMBER_NUM_THREADS=1)\n");
}
#endif

/* ---- the sections ---- */

static void section_matmul(em_device cpu) {
#ifdef EMBER_HAVE_OPENBLAS
    printf("\nmatmul f32 (n x n @ n x n): ember cpu vs cblas_sgemm called directly\n");
    printf("  %6s %14s %14s %8s\n", "n", "ember GFLOP/s", "BLAS GFLOP/s", "ratio");
    for (int n = 256; n <= 2048; n *= 2) {
        int64_t shape[2] = {n, n};
        em_tensor *a = rand_on(shape, 2, cpu, 1), *b = rand_on(shape, 2, cpu, 2);
        int reps = n <= 256 ? 40 : n <= 512 ? 10 : n <= 1024 ? 2 : 1;
        blas_job bj = {n, reps, host_copy(a), host_copy(b), malloc(sizeof(float) * (size_t)n * n)};
        ember_job ej = {OP_MATMUL, a, b, NULL, reps};
        double te, tb, ve[64], vb[64];
        int r = rounds > 64 ? 64 : rounds;
        ember_run(&ej);
        for (int i = 0; i < r; i++) {
            ve[i] = time_once(ember_run, &ej);
            blas_threads(pool_threads());
            blas_run(&bj);
            vb[i] = time_once(blas_run, &bj);
            blas_threads(1);
        }
        te = bench_median(ve, r);
        tb = bench_median(vb, r);
        double flop = 2.0 * n * n * (double)n * reps;
        printf("  %6d %14.1f %14.1f %8.2f\n", n, flop / te * 1e-9, flop / tb * 1e-9, tb / te);
        free(bj.a);
        free(bj.b);
        free(bj.c);
        em_tensor_release(a);
        em_tensor_release(b);
    }
#else
    (void)cpu;
    printf("\nmatmul: this build has no OpenBLAS\n");
#endif
}

static void section_elementwise(em_device cpu) {
    const int64_t n = (int64_t)1 << 24;
    int64_t shape[1] = {n};
    em_tensor *a = rand_on(shape, 1, cpu, 3), *b = rand_on(shape, 1, cpu, 4),
              *c = rand_on(shape, 1, cpu, 5);
    loop_job lj = {OP_ADD, malloc(sizeof(float) * (size_t)n), host_copy(a), host_copy(b),
                   host_copy(c), n};
    memset(lj.z, 0, sizeof(float) * (size_t)n); /* the loop's output pages are touched once */
    printf("\nelementwise on 16M f32: ember cpu vs a plain C loop (-O3 -march=native)\n");
    ember_job ej = {OP_ADD, a, b, c, 1};
    double te, tl;
    time_pair(ember_run, &ej, loop_run, &lj, &te, &tl);
    double bytes = 12.0 * (double)n;
    printf("  add            ember %7.1f GB/s   loop %7.1f GB/s   ratio %.2f\n", bytes / te * 1e-9,
           bytes / tl * 1e-9, tl / te);
    ej.op = lj.op = OP_CHAIN;
    time_pair(ember_run, &ej, loop_run, &lj, &te, &tl);
    bytes = 16.0 * (double)n; /* what the chain must move at the least: 3 reads, 1 write */
    printf("  relu(a*b+c)    ember %7.1f GB/s   loop %7.1f GB/s   ratio %.2f\n", bytes / te * 1e-9,
           bytes / tl * 1e-9, tl / te);
    printf("  (GB/s of the chain count the 16 bytes per element a fused loop moves; ember runs it\n"
           "   as three ops, mul then add_ and relu_ in place, so it moves 32)\n");
    free(lj.z);
    free(lj.a);
    free(lj.b);
    free(lj.c);
    em_tensor_release(a);
    em_tensor_release(b);
    em_tensor_release(c);
}

/* One ref-vs-cpu line: the same op and inputs (data copied) on both devices. */
static void speedup(const char *name, op_kind op, const int64_t *sa, int ra, const int64_t *sb,
                    int rb, em_device cpu, em_device ref, int reps_cpu) {
    em_tensor *a = rand_on(sa, ra, cpu, 7), *b = sb ? rand_on(sb, rb, cpu, 8) : NULL;
    em_tensor *ar, *br = NULL;
    TRY(em_to_device(a, ref, &ar));
    if (b) TRY(em_to_device(b, ref, &br));
    ember_job jc = {op, a, b, b, reps_cpu}, jr = {op, ar, br, br, 1};
    double tc, tr;
    int saved = rounds;
    rounds = 3;
    time_pair(ember_run, &jc, ember_run, &jr, &tc, &tr);
    rounds = saved;
    tc /= reps_cpu;
    printf("  %-34s ref %10.3f ms   cpu %9.3f ms   speedup %7.1fx\n", name, tr * 1e3, tc * 1e3,
           tr / tc);
    em_tensor_release(a);
    em_tensor_release(b);
    em_tensor_release(ar);
    em_tensor_release(br);
}

static void section_speedups(em_device cpu, em_device ref) {
    printf("\nref vs cpu (the optimized path is taken):\n");
    int64_t m512[2] = {512, 512}, v16m[1] = {(int64_t)1 << 24}, sm[2] = {4096, 1024};
    int64_t sq[2] = {4096, 4096}, x[4] = {64, 3, 56, 56}, w[4] = {64, 3, 3, 3};
    int64_t pool[4] = {64, 64, 56, 56};
    speedup("matmul f32 512", OP_MATMUL, m512, 2, m512, 2, cpu, ref, 20);
    speedup("add 16M f32", OP_ADD, v16m, 1, v16m, 1, cpu, ref, 5);
    speedup("softmax rows [4096, 1024]", OP_SOFTMAX, sm, 2, NULL, 0, cpu, ref, 5);
    speedup("sum dim 1 [4096, 4096]", OP_SUM, sq, 2, NULL, 0, cpu, ref, 5);
    speedup("conv2d 64x3x56x56, 64 3x3 pad 1", OP_CONV, x, 4, w, 4, cpu, ref, 3);
    speedup("layer_norm [4096, 1024]", OP_LN, sm, 2, NULL, 0, cpu, ref, 5);
    speedup("max_pool2d 2x2 [64, 64, 56, 56]", OP_POOL, pool, 4, NULL, 0, cpu, ref, 3);
}

static void section_tiny(em_device cpu) {
    int64_t one[1] = {1};
    em_tensor *a = rand_on(one, 1, cpu, 9), *b = rand_on(one, 1, cpu, 10);
    const int iters = 200000;
    double v[16];
    int r = rounds > 16 ? 16 : rounds;
    for (int k = 0; k < r; k++) {
        double t0 = bench_now_ns();
        for (int i = 0; i < iters; i++) {
            em_tensor *o;
            TRY(em_add(a, b, &o));
            em_tensor_release(o);
        }
        v[k] = (bench_now_ns() - t0) / iters;
    }
    printf("\ntiny-op latency: em_add of two 1-element f32 tensors on cpu: %.1f ns/op (median)\n",
           bench_median(v, r));
    printf("  (PyTorch's C++ at::add on the same tensors: bench/cpu_vs_torch.py builds and runs\n"
           "   bench/tiny_add_torch.cpp and prints the ratio)\n");
    em_tensor_release(a);
    em_tensor_release(b);
}

int bench_cpu(int argc, char **argv) {
    bool tiny_only = false, gemm_only = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--tiny") == 0) tiny_only = true;
        else if (strcmp(argv[i], "--gemm") == 0) gemm_only = true; /* the two GEMM sections */
        else {
            fprintf(stderr, "ember-bench cpu: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (rounds < 1) rounds = 1;
    em_device cpu, ref = {EM_BACKEND_REF, 0, false, EM_CKPT_NONE};
    if (em_device_parse("cpu", &cpu) != EM_OK) {
        fprintf(stderr, "ember-bench cpu: %s\n", em_last_error());
        return 1;
    }
    if (tiny_only) {
        section_tiny(cpu);
        return 0;
    }
    const char *ct = getenv("OPENBLAS_CORETYPE"), *nt = getenv("EMBER_NUM_THREADS");
    printf("ember-bench cpu: %d interleaved rounds, medians; EMBER_NUM_THREADS=%s, "
           "OPENBLAS_CORETYPE=%s\n",
           rounds, nt ? nt : "(unset)", ct ? ct : "(unset)");
#ifdef EMBER_HAVE_OPENBLAS
    printf("OpenBLAS kernel: %s; ember's pool and the BLAS baseline: %d thread(s)\n",
           openblas_get_corename(), pool_threads());
#endif
#ifdef EMBER_HAVE_OPENBLAS
    section_peak(cpu);
    section_models(cpu);
#endif
    if (gemm_only) return 0;
    section_matmul(cpu);
    section_elementwise(cpu);
    section_speedups(cpu, ref);
    section_tiny(cpu);
    return 0;
}
