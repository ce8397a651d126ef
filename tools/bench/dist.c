/*
 * dist.c — `ember-bench dist`, run under mpirun (mpirun -np 2 ember-bench dist):
 *   - all_reduce bandwidth: em_all_reduce (sum) of a contiguous f32 cpu tensor, 1 KB .. 64 MB,
 *     against MPI_Allreduce of the same bytes in a plain buffer, in the same run, interleaved
 *     in rounds (medians). GB/s is bytes / time (the algorithm's bandwidth); ratio is ember's
 *     GB/s over raw MPI's (goal >= 0.95 for large sizes).
 *   - training throughput: an MLP 784-256-128-10 (ReLU, cross-entropy, Adam) on random data,
 *     every rank on its share of a global batch with em_ddp (EMBER_NUM_THREADS=1 each unless
 *     set), against one process on the whole batch with the ranks' threads together
 *     (EMBER_NUM_THREADS = ranks x threads, the same cores): rank 0 runs that process itself
 *     (ember-bench dist --single) while the other ranks sleep.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* popen, setenv */
#endif
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "ember/dist.h"
#include "ember/nn.h"

#define TRY(x)                                                                                \
    do {                                                                                      \
        em_status s_ = (x);                                                                   \
        if (s_ != EM_OK) {                                                                    \
            fprintf(stderr, "ember-bench dist: %s: %s\n", #x, em_last_error());               \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                     \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

static const em_device CPU = {EM_BACKEND_CPU, 0, false, EM_CKPT_NONE};

/* ---- all_reduce bandwidth ---- */

static void bench_allreduce(em_dist *d, int rounds) {
    int rank = em_dist_rank(d), size = em_dist_size(d);
    if (rank == 0) {
        printf("all_reduce f32 sum, %d ranks, %d rounds (medians): ember = em_all_reduce of a cpu "
               "tensor, raw = MPI_Allreduce\n", size, rounds);
        printf("%10s %12s %12s %10s %10s %8s\n", "bytes", "ember us", "raw us", "ember GB/s",
               "raw GB/s", "ratio");
    }
    for (int64_t bytes = 1024; bytes <= ((int64_t)64 << 20); bytes *= 4) {
        int64_t n = bytes / 4;
        em_tensor *t = NULL;
        TRY(em_full(&n, 1, 1.0, EM_F32, CPU, &t));
        float *raw = malloc((size_t)bytes);
        for (int64_t i = 0; i < n; i++) raw[i] = 1.0f;
        /* enough repetitions per timing for ~20 ms at a few GB/s */
        int reps = bytes >= (4 << 20) ? 1 : (int)((4 << 20) / bytes);
        if (reps > 200) reps = 200;
        double te[64], tr[64];
        int nr = rounds > 64 ? 64 : rounds;
        for (int r = -1; r < nr; r++) { /* round -1 warms up */
            for (int k = 0; k < 2; k++) {
                bool ember = (k == 0) == (r % 2 == 0); /* alternate the order */
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = bench_now_ns();
                for (int i = 0; i < reps; i++) {
                    if (ember) TRY(em_all_reduce(d, t, EM_DIST_SUM));
                    else MPI_Allreduce(MPI_IN_PLACE, raw, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
                }
                double dt = (bench_now_ns() - t0) / reps * 1e-9, slowest = 0;
                /* the slowest rank's time is the collective's */
                MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                if (r >= 0) (ember ? te : tr)[r] = slowest;
            }
        }
        double me = bench_median(te, nr), mr = bench_median(tr, nr);
        if (rank == 0)
            printf("%10lld %12.1f %12.1f %10.2f %10.2f %8.3f\n", (long long)bytes, me * 1e6,
                   mr * 1e6, (double)bytes / me * 1e-9, (double)bytes / mr * 1e-9, mr / me);
        fflush(stdout);
        free(raw);
        em_tensor_release(t);
    }
}

/* ---- training throughput ---- */

typedef struct train_cfg {
    int64_t batch; /* global */
    int steps, warmup;
} train_cfg;

/* samples per second of `steps` training steps on batch rows per rank (d NULL: one process) */
static double train(em_dist *d, const train_cfg *c) {
    int size = d ? em_dist_size(d) : 1, rank = d ? em_dist_rank(d) : 0;
    int64_t b = c->batch / size;
    em_device dev;
    TRY(em_device_autodiff(CPU, EM_CKPT_DISABLED, &dev));
    em_module_opts o = em_module_opts_default(dev, 7);
    em_module *m[5];
    TRY(em_nn_linear(784, 256, true, &o, &m[0]));
    TRY(em_nn_relu(&m[1]));
    TRY(em_nn_linear(256, 128, true, &o, &m[2]));
    TRY(em_nn_relu(&m[3]));
    TRY(em_nn_linear(128, 10, true, &o, &m[4]));
    em_module *model = NULL;
    TRY(em_nn_sequential(m, 5, &model));
    em_params *params = NULL;
    TRY(em_params_create(&params));
    TRY(em_module_params(model, NULL, params));
    em_optimizer *opt = NULL;
    TRY(em_optimizer_adam(params, 1e-3, 0.9, 0.999, 1e-8, 0, &opt));
    em_ddp *ddp = NULL;
    if (d) TRY(em_ddp_create(d, model, 0, &ddp));
    const int64_t xs[2] = {b, 784};
    em_tensor *x = NULL, *y = NULL, *yf = NULL;
    TRY(em_rand_normal(xs, 2, EM_F32, 0, 1, 100 + (uint64_t)rank, CPU, &x));
    TRY(em_rand_uniform(xs, 1, EM_F32, 0, 10, 200 + (uint64_t)rank, CPU, &yf));
    TRY(em_cast(yf, EM_I64, &y));
    em_tensor_release(yf);
    double t0 = 0;
    for (int s = 0; s < c->warmup + c->steps; s++) {
        if (s == c->warmup) {
            if (d) TRY(em_barrier(d));
            t0 = bench_now_ns();
        }
        em_tensor *logits = NULL, *loss = NULL;
        em_grads *g = NULL;
        TRY(em_module_forward(model, x, true, &logits));
        TRY(em_loss_cross_entropy(logits, y, &loss));
        if (ddp) TRY(em_ddp_backward(ddp, loss, &g));
        else TRY(em_backward(loss, &g));
        TRY(em_optimizer_step(opt, g, 1.0));
        em_grads_release(g);
        em_tensor_release(loss);
        em_tensor_release(logits);
    }
    if (d) TRY(em_barrier(d));
    double el = (bench_now_ns() - t0) * 1e-9;
    em_tensor_release(x);
    em_tensor_release(y);
    em_ddp_free(ddp);
    em_optimizer_release(opt);
    em_params_release(params);
    em_module_release(model);
    return (double)(b * size) * c->steps / el;
}

/* rank 0 runs `ember-bench dist --single` with threads threads while the others sleep */
static double train_single(em_dist *d, const train_cfg *c, int threads) {
    double sps = 0;
    if (em_dist_rank(d) == 0) {
        char cmd[512];
        snprintf(cmd, sizeof cmd,
                 "EMBER_NUM_THREADS=%d /proc/%d/exe dist --single --batch %lld --steps %d "
                 "--warmup %d",
                 threads, (int)getpid(), (long long)c->batch, c->steps, c->warmup);
        FILE *f = popen(cmd, "r");
        char line[256];
        while (f && fgets(line, sizeof line, f))
            if (sscanf(line, "single: %lf", &sps) == 1) break;
        if (f) pclose(f);
    }
    /* the others wait without taking a core: a sleeping poll of a non-blocking barrier */
    MPI_Request q;
    MPI_Ibarrier(MPI_COMM_WORLD, &q);
    for (int done = 0;;) {
        MPI_Test(&q, &done, MPI_STATUS_IGNORE);
        if (done) break;
        struct timespec nap = {0, 2000000};
        nanosleep(&nap, NULL);
    }
    MPI_Bcast(&sps, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    return sps;
}

int bench_dist(int argc, char **argv) {
    int rounds = 7;
    bool single = false, no_train = false, no_bw = false;
    train_cfg c = {256, 30, 3};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) c.batch = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) c.steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) c.warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--single")) single = true;
        else if (!strcmp(argv[i], "--no-train")) no_train = true;
        else if (!strcmp(argv[i], "--no-bandwidth")) no_bw = true;
        else {
            fprintf(stderr, "ember-bench dist: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (rounds < 1 || c.batch < 1 || c.steps < 1 || c.warmup < 0) {
        fprintf(stderr, "ember-bench dist: bad --rounds, --batch, --steps or --warmup\n");
        return 2;
    }
    if (single) { /* the one-process baseline: no MPI */
        printf("single: %.1f\n", train(NULL, &c));
        return 0;
    }
    /* each rank's threads: EMBER_NUM_THREADS, else 1 (before the cpu backend starts) */
    int threads = 1;
    const char *env = getenv("EMBER_NUM_THREADS");
    if (env && atoi(env) > 0) threads = atoi(env);
    else setenv("EMBER_NUM_THREADS", "1", 1);
    em_dist *d = NULL;
    TRY(em_dist_init(&argc, &argv, &d));
    int rank = em_dist_rank(d), size = em_dist_size(d);
    if (!no_bw) bench_allreduce(d, rounds);
    if (!no_train) {
        if (c.batch % size) c.batch -= c.batch % size;
        double multi = train(d, &c);
        double one = train_single(d, &c, threads * size);
        if (rank == 0) {
            printf("\ntraining: MLP 784-256-128-10, ReLU, cross-entropy, Adam; global batch %lld, "
                   "%d steps after %d warm-up\n", (long long)c.batch, c.steps, c.warmup);
            printf("  %d ranks x %d thread%s (em_ddp, batch %lld each): %10.1f samples/s\n", size,
                   threads, threads > 1 ? "s" : "", (long long)(c.batch / size), multi);
            if (one > 0)
                printf("  1 process x %d threads (whole batch):      %10.1f samples/s\n"
                       "  speed-up %d ranks / 1 process: %.2f\n", threads * size, one, size,
                       multi / one);
            else
                printf("  1 process: the baseline run failed\n");
        }
    }
    em_dist_free(d);
    return 0;
}
