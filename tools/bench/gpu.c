/*
 * gpu.c — `ember-bench opencl` and `ember-bench vulkan`: a device backend (opencl:0 or
 * vulkan:0, or --device) against the cpu backend and, for vulkan, against opencl:0 when the
 * machine has one, in one run with the sides interleaved in rounds (medians):
 *   - matmul f32, n = 256 .. 1024 (GFLOP/s);
 *   - elementwise on 4M f32: add, exp, relu(a*b+c) as three ops, a cast to f16 (GB/s);
 * Each ratio printed is a baseline's time / the device's time (above 1: the device is
 * faster). Device work is queued, so each timed job ends with the device's sync. Program and
 * pipeline builds happen in the warm-up, outside the timings.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
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
            fprintf(stderr, "ember-bench: %s: %s\n", #x, em_last_error());             \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

typedef enum { J_MATMUL, J_ADD, J_EXP, J_CHAIN, J_CAST } job_kind;

typedef struct dev_job {
    job_kind kind;
    em_device dev;
    em_tensor *a, *b, *c;
    int reps;
} dev_job;

/* Waits for the work queued on dev (a no-op for synchronous backends). */
static void dev_sync(em_device dev) {
    const em_backend_ops *o = em_backend_get(dev.backend);
    void *ctx = NULL;
    if (o && o->sync && o->open(dev.index, &ctx) == EM_OK) TRY(o->sync(ctx));
}

/* Runs the job's op reps times (outputs released at once), then waits for the device. */
static void run_job(const dev_job *j) {
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

static void run_any(const void *j) { run_job((const dev_job *)j); }

/* The two jobs' medians over `rounds` interleaved rounds (bench_time_two). */
static void time_two(const dev_job *x, const dev_job *y, int rounds, double *tx, double *ty) {
    bench_time_two(run_any, x, y, rounds, tx, ty);
}

/* Uniform numbers in [-1, 1) on dev (made on ref and moved: the same on every device). */
static em_tensor *rand_on(const int64_t *shape, int rank, em_device dev, uint64_t seed) {
    em_tensor *h, *t;
    em_device ref = {EM_BACKEND_REF, 0, false, EM_CKPT_NONE};
    TRY(em_rand_uniform(shape, rank, EM_F32, -1.0, 1.0, seed, ref, &h));
    TRY(em_to_device(h, dev, &t));
    em_tensor_release(h);
    return t;
}

/* The bench of device `dname` (of backend `want`) against cpu and the optional `other`. */
static int bench_device(const char *cmd, em_backend want, const char *dname, const char *other,
                        int argc, char **argv) {
    int rounds = 5;
    em_device gpu, cpu = {EM_BACKEND_CPU, 0, false, EM_CKPT_NONE}, oth;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
            rounds = atoi(argv[++i]);
            if (rounds < 1) rounds = 1;
        } else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
            dname = argv[++i];
        } else {
            fprintf(stderr, "ember-bench %s: unknown or incomplete option '%s'\n", cmd, argv[i]);
            return 2;
        }
    }
    if (em_device_parse(dname, &gpu) != EM_OK || gpu.backend != want) {
        fprintf(stderr, "ember-bench %s: no device %s: %s\n", cmd, dname, em_last_error());
        return 1;
    }
    if (em_device_parse("cpu", &cpu) != EM_OK) cpu = (em_device){EM_BACKEND_REF, 0, false, 0};
    bool has_other = other && em_device_parse(other, &oth) == EM_OK;
    char cname[32], oname[32] = "";
    em_device_name(cpu, cname, sizeof cname);
    if (has_other) em_device_name(oth, oname, sizeof oname);
    printf("ember-bench %s: %s vs %s%s%s, medians of %d rounds; ratio = baseline time / %s "
           "time\n",
           cmd, dname, cname, has_other ? " and " : "", oname, rounds, dname);
    if (other && !has_other) printf("(no %s here: that column is left out)\n", other);

    printf("\nmatmul f32 [n x n] @ [n x n]  %10s %10s %6s", dname, cname, "ratio");
    if (has_other) printf(" %10s %6s", oname, "ratio");
    printf("   (GFLOP/s)\n");
    const int64_t ns[] = {256, 512, 1024};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        const int64_t n = ns[k], shape[2] = {n, n};
        dev_job g = {J_MATMUL, gpu, rand_on(shape, 2, gpu, 1), rand_on(shape, 2, gpu, 2), NULL,
                     n <= 256 ? 8 : n <= 512 ? 2 : 1};
        dev_job c = g, o = g;
        c.dev = cpu;
        TRY(em_to_device(g.a, cpu, &c.a));
        TRY(em_to_device(g.b, cpu, &c.b));
        double tg, tc, tg2 = 0, to = 0;
        time_two(&g, &c, rounds, &tg, &tc);
        double flop = 2.0 * (double)n * (double)n * (double)n * g.reps;
        printf("  n = %-25lld %10.2f %10.2f %6.2f", (long long)n, flop / tg * 1e-9,
               flop / tc * 1e-9, tc / tg);
        if (has_other) {
            o.dev = oth;
            TRY(em_to_device(g.a, oth, &o.a));
            TRY(em_to_device(g.b, oth, &o.b));
            time_two(&g, &o, rounds, &tg2, &to);
            printf(" %10.2f %6.2f", flop / to * 1e-9, to / tg2);
            em_tensor_release(o.a), em_tensor_release(o.b);
        }
        printf("\n");
        em_tensor_release(g.a), em_tensor_release(g.b), em_tensor_release(c.a),
            em_tensor_release(c.b);
    }

    const int64_t N = (int64_t)1 << 22, shape[1] = {N};
    printf("\nelementwise f32, %lld elts %10s %10s %6s", (long long)N, dname, cname, "ratio");
    if (has_other) printf(" %10s %6s", oname, "ratio");
    printf("   (GB/s)\n");
    struct {
        job_kind kind;
        const char *name;
        double bytes; /* per element moved, all ops of the job */
    } ews[] = {{J_ADD, "add", 12}, {J_EXP, "exp", 8}, {J_CHAIN, "relu(a*b+c), 3 ops", 36},
               {J_CAST, "cast to f16", 6}};
    em_tensor *ga = rand_on(shape, 1, gpu, 3), *gb = rand_on(shape, 1, gpu, 4),
              *gc = rand_on(shape, 1, gpu, 5), *ca, *cb, *cc, *oa = NULL, *ob = NULL, *oc = NULL;
    TRY(em_to_device(ga, cpu, &ca));
    TRY(em_to_device(gb, cpu, &cb));
    TRY(em_to_device(gc, cpu, &cc));
    if (has_other) {
        TRY(em_to_device(ga, oth, &oa));
        TRY(em_to_device(gb, oth, &ob));
        TRY(em_to_device(gc, oth, &oc));
    }
    for (size_t k = 0; k < sizeof ews / sizeof ews[0]; k++) {
        dev_job g = {ews[k].kind, gpu, ga, gb, gc, 4}, c = {ews[k].kind, cpu, ca, cb, cc, 4};
        double tg, tc;
        time_two(&g, &c, rounds, &tg, &tc);
        double bytes = ews[k].bytes * (double)N * g.reps;
        printf("  %-29s %10.2f %10.2f %6.2f", ews[k].name, bytes / tg * 1e-9, bytes / tc * 1e-9,
               tc / tg);
        if (has_other) {
            dev_job o = {ews[k].kind, oth, oa, ob, oc, 4};
            double tg2, to;
            time_two(&g, &o, rounds, &tg2, &to);
            printf(" %10.2f %6.2f", bytes / to * 1e-9, to / tg2);
        }
        printf("\n");
    }
    em_tensor_release(ga), em_tensor_release(gb), em_tensor_release(gc);
    em_tensor_release(ca), em_tensor_release(cb), em_tensor_release(cc);
    em_tensor_release(oa), em_tensor_release(ob), em_tensor_release(oc);
    return 0;
}

int bench_opencl(int argc, char **argv) {
    return bench_device("opencl", EM_BACKEND_OPENCL, "opencl:0", NULL, argc, argv);
}

int bench_vulkan(int argc, char **argv) {
    return bench_device("vulkan", EM_BACKEND_VULKAN, "vulkan:0", "opencl:0", argc, argv);
}
