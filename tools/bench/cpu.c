/*
 * cpu.c — `ember-bench cpu`: the cpu backend against its baselines, each ratio measured in one
 * run with the two sides interleaved in rounds (medians):
 *   - matmul f32, n = 256 .. 2048: ember (cpu) vs a direct cblas_sgemm call (same OpenBLAS);
 *   - add and relu(a*b+c) on 16M f32: ember vs a plain C loop compiled -O3 -march=native;
 *   - the speedup of cpu over ref on each case (softmax, sum, conv2d, layer_norm, pooling);
 *   - tiny-op latency: em_add of two 1-element tensors on cpu.
 * The comparisons with PyTorch (softmax, sum, conv2d, at::add) are in bench/cpu_vs_torch.py,
 * which runs ember through its shared library beside torch in one process.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "ember/backend.h"
#include "ember/ember.h"

#ifdef EMBER_HAVE_OPENBLAS
#include <cblas.h>
#include <unistd.h>
char *openblas_get_corename(void);
void openblas_set_num_threads(int n);
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
    bool tiny_only = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--tiny") == 0) tiny_only = true;
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
    section_matmul(cpu);
    section_elementwise(cpu);
    section_speedups(cpu, ref);
    section_tiny(cpu);
    return 0;
}
