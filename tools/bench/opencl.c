/*
 * opencl.c — `ember-bench opencl`: the opencl backend (opencl:0, or --device opencl:N)
 * against the cpu backend, in one run with the two sides interleaved in rounds (medians):
 *   - matmul f32, n = 256 .. 1024 (GFLOP/s);
 *   - elementwise on 4M f32: add, exp, relu(a*b+c) as three ops, a cast to f16 (GB/s);
 * The ratio printed is cpu time / opencl time (above 1: opencl is faster). OpenCL work is
 * queued, so each timed job ends with the device's sync. Program builds happen in the
 * warm-up, outside the timings.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "ember/backend.h"
#include "ember/ember.h"

#define TRY(x)                                                                                \
    do {                                                                                      \
        em_status s_ = (x);                                                                   \
        if (s_ != EM_OK) {                                                                    \
            fprintf(stderr, "ember-bench opencl: %s: %s\n", #x, em_last_error());             \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

typedef enum { J_MATMUL, J_ADD, J_EXP, J_CHAIN, J_CAST } job_kind;

typedef struct ocl_job {
    job_kind kind;
    em_device dev;
    em_tensor *a, *b, *c;
    int reps;
} ocl_job;

/* Waits for the work queued on dev (a no-op for synchronous backends). */
static void dev_sync(em_device dev) {
    const em_backend_ops *o = em_backend_get(dev.backend);
    void *ctx = NULL;
    if (o && o->sync && o->open(dev.index, &ctx) == EM_OK) TRY(o->sync(ctx));
}

/* Runs the job's op reps times (outputs released at once), then waits for the device. */
static void run_job(const ocl_job *j) {
    for (int r = 0; r < j->reps; r++) {
        em_tensor *y = NULL, *t = NULL, *u = NULL;
        switch (j->kind) {
        case J_MATMUL: TRY(em_matmul(j->a, j->b, &y)); break;
        case J_ADD: TRY(em_add(j->a, j->b, &y)); break;
        case J_EXP: TRY(em_exp(j->a, &y)); break;
        case J_CHAIN:
            TRY(em_mul(j->a, j->b, &t));
            TRY(em_add(t, j->c, &u));
            TRY(em_relu(u, &y));
            break;
        case J_CAST: TRY(em_cast(j->a, EM_F16, &y)); break;
        }
        em_tensor_release(t), em_tensor_release(u), em_tensor_release(y);
    }
    dev_sync(j->dev);
}

static void run_any(const void *j) { run_job((const ocl_job *)j); }

/* The two jobs' medians over `rounds` interleaved rounds (bench_time_two). */
static void time_two(const ocl_job *x, const ocl_job *y, int rounds, double *tx, double *ty) {
    bench_time_two(run_any, x, y, rounds, tx, ty);
}

static em_tensor *rand_on(const int64_t *shape, int rank, em_device dev, uint64_t seed) {
    em_tensor *t;
    TRY(em_rand_uniform(shape, rank, EM_F32, -1.0, 1.0, seed, dev, &t));
    return t;
}

int bench_opencl(int argc, char **argv) {
    int rounds = 5;
    em_device gpu, cpu = {EM_BACKEND_CPU, 0, false, EM_CKPT_NONE};
    const char *dname = "opencl:0";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
            rounds = atoi(argv[++i]);
            if (rounds < 1) rounds = 1;
        } else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
            dname = argv[++i];
        } else {
            fprintf(stderr, "ember-bench opencl: unknown or incomplete option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (em_device_parse(dname, &gpu) != EM_OK || gpu.backend != EM_BACKEND_OPENCL) {
        fprintf(stderr, "ember-bench opencl: no device %s: %s\n", dname, em_last_error());
        return 1;
    }
    if (em_device_parse("cpu", &cpu) != EM_OK) cpu = (em_device){EM_BACKEND_REF, 0, false, 0};
    char cname[32];
    em_device_name(cpu, cname, sizeof cname);
    printf("ember-bench opencl: %s vs %s, medians of %d rounds; ratio = %s time / %s time\n",
           dname, cname, rounds, cname, dname);

    printf("\nmatmul f32 [n x n] @ [n x n]            %s GFLOP/s   %s GFLOP/s   ratio\n", dname,
           cname);
    const int64_t ns[] = {256, 512, 1024};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        const int64_t n = ns[k], shape[2] = {n, n};
        ocl_job g = {J_MATMUL, gpu, rand_on(shape, 2, gpu, 1), rand_on(shape, 2, gpu, 2), NULL,
                     n <= 256 ? 8 : n <= 512 ? 2 : 1};
        ocl_job c = g;
        c.dev = cpu;
        TRY(em_to_device(g.a, cpu, &c.a));
        TRY(em_to_device(g.b, cpu, &c.b));
        double tg, tc;
        time_two(&g, &c, rounds, &tg, &tc);
        double flop = 2.0 * (double)n * (double)n * (double)n * g.reps;
        printf("  n = %-5lld                              %10.2f   %10.2f   %6.2f\n",
               (long long)n, flop / tg * 1e-9, flop / tc * 1e-9, tc / tg);
        em_tensor_release(g.a), em_tensor_release(g.b), em_tensor_release(c.a),
            em_tensor_release(c.b);
    }

    const int64_t N = (int64_t)1 << 22, shape[1] = {N};
    printf("\nelementwise f32, %lld elements             %s GB/s      %s GB/s      ratio\n",
           (long long)N, dname, cname);
    struct {
        job_kind kind;
        const char *name;
        double bytes; /* per element moved, all ops of the job */
    } ews[] = {{J_ADD, "add", 12}, {J_EXP, "exp", 8}, {J_CHAIN, "relu(a*b+c), 3 ops", 36},
               {J_CAST, "cast to f16", 6}};
    em_tensor *ga = rand_on(shape, 1, gpu, 3), *gb = rand_on(shape, 1, gpu, 4),
              *gc = rand_on(shape, 1, gpu, 5), *ca, *cb, *cc;
    TRY(em_to_device(ga, cpu, &ca));
    TRY(em_to_device(gb, cpu, &cb));
    TRY(em_to_device(gc, cpu, &cc));
    for (size_t k = 0; k < sizeof ews / sizeof ews[0]; k++) {
        ocl_job g = {ews[k].kind, gpu, ga, gb, gc, 4}, c = {ews[k].kind, cpu, ca, cb, cc, 4};
        double tg, tc;
        time_two(&g, &c, rounds, &tg, &tc);
        double bytes = ews[k].bytes * (double)N * g.reps;
        printf("  %-38s %10.2f   %10.2f   %6.2f\n", ews[k].name, bytes / tg * 1e-9,
               bytes / tc * 1e-9, tc / tg);
    }
    em_tensor_release(ga), em_tensor_release(gb), em_tensor_release(gc);
    em_tensor_release(ca), em_tensor_release(cb), em_tensor_release(cc);
    return 0;
}
