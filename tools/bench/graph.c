/*
 * graph.c — `ember-bench graph`: replaying a prepared graph of tiny ops against running the same
 * ops eagerly, in one run.
 *
 *   ember-bench graph [--ops 1000] [--size 8] [--rounds 7] [--device cpu]
 *
 * The program: --ops elementwise ops (a product by a scalar, a sum with a constant tensor,
 * tanh, a sum with a scalar, in turn) on an f32 vector of --size elements. Eagerly, each op
 * pays the public call: argument checks, output allocation, dispatch. Captured once and
 * prepared on the device (em_graph_prepare), a run (em_exec_run) pays the kernels and what the
 * exec does between them. Prints ns per op of each, the median of --rounds rounds, and the
 * ratio replay / eager (the goal: <= 0.5), and checks that both give the same bits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "ember/ember.h"
#include "ember/graph.h"

#define GB_CK(x)                                                                               \
    do {                                                                                       \
        em_status s_ = (x);                                                                    \
        if (s_ != EM_OK) {                                                                     \
            fprintf(stderr, "ember-bench graph: %s: %s\n", #x, em_last_error());               \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

/* The program: y = ops(x) with the constant c; returns y (new reference). */
static em_tensor *gb_program(const em_tensor *x, const em_tensor *c, int ops) {
    em_tensor *y = NULL;
    GB_CK(em_mul_scalar(x, 1.0, &y));
    for (int i = 1; i < ops; i++) {
        em_tensor *n = NULL;
        switch (i % 4) {
        case 0: GB_CK(em_mul_scalar(y, 0.75, &n)); break;
        case 1: GB_CK(em_add(y, c, &n)); break;
        case 2: GB_CK(em_tanh(y, &n)); break;
        default: GB_CK(em_add_scalar(y, -0.125, &n)); break;
        }
        em_tensor_release(y);
        y = n;
    }
    return y;
}

int bench_graph(int argc, char **argv) {
    int ops = 1000, rounds = 7;
    int64_t size = 8;
    const char *devname = "cpu";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ops") == 0 && i + 1 < argc) ops = atoi(argv[++i]);
        else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) size = atoll(argv[++i]);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) devname = argv[++i];
        else {
            fprintf(stderr, "ember-bench graph: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (ops < 1 || size < 1 || rounds < 1 || rounds > 1000) {
        fprintf(stderr, "ember-bench graph: --ops, --size and --rounds must be positive\n");
        return 2;
    }
    em_device dev, cap;
    GB_CK(em_device_parse(devname, &dev));
    GB_CK(em_device_parse("capture", &cap));
    float *xv = malloc((size_t)size * sizeof *xv), *cv = malloc((size_t)size * sizeof *cv);
    float *a = malloc((size_t)size * sizeof *a), *b = malloc((size_t)size * sizeof *b);
    double *te = calloc((size_t)rounds, sizeof *te), *tr = calloc((size_t)rounds, sizeof *tr);
    if (!xv || !cv || !a || !b || !te || !tr) return 1;
    for (int64_t i = 0; i < size; i++) {
        xv[i] = (float)(i % 7) * 0.25f - 0.5f;
        cv[i] = (float)(i % 3) * 0.125f;
    }
    /* capture */
    em_graph *g = NULL;
    GB_CK(em_graph_begin(&g));
    em_tensor *cc = NULL, *xc = NULL;
    GB_CK(em_tensor_from_data(cv, EM_F32, &size, 1, cap, &cc));
    GB_CK(em_graph_input(g, "x", EM_F32, &size, 1, cap, &xc));
    em_tensor *yc = gb_program(xc, cc, ops);
    GB_CK(em_graph_output(g, "y", yc));
    GB_CK(em_graph_end(g));
    em_tensor_release(yc);
    em_tensor_release(xc);
    em_tensor_release(cc);
    em_exec *e = NULL;
    GB_CK(em_graph_prepare(g, dev, &e));
    /* eager */
    em_tensor *x = NULL, *c = NULL;
    GB_CK(em_tensor_from_data(xv, EM_F32, &size, 1, dev, &x));
    GB_CK(em_tensor_from_data(cv, EM_F32, &size, 1, dev, &c));
    const em_tensor *in[1] = {x};
    /* warm up both, and check they agree */
    em_tensor *ye = gb_program(x, c, ops), *yr = NULL;
    GB_CK(em_exec_run(e, in, 1, &yr, 1));
    GB_CK(em_tensor_to_data(ye, a, (size_t)size * sizeof *a));
    GB_CK(em_tensor_to_data(yr, b, (size_t)size * sizeof *b));
    const int same = memcmp(a, b, (size_t)size * sizeof *a) == 0;
    em_tensor_release(ye);
    em_tensor_release(yr);
    const int reps = ops >= 1000 ? 20 : 20000 / ops + 1;
    for (int r = 0; r < rounds; r++) {
        double t0 = bench_now_ns();
        for (int k = 0; k < reps; k++) {
            em_tensor *y = gb_program(x, c, ops);
            GB_CK(em_tensor_to_data(y, a, (size_t)size * sizeof *a));
            em_tensor_release(y);
        }
        double t1 = bench_now_ns();
        for (int k = 0; k < reps; k++) {
            em_tensor *y = NULL;
            GB_CK(em_exec_run(e, in, 1, &y, 1));
            GB_CK(em_tensor_to_data(y, b, (size_t)size * sizeof *b));
            em_tensor_release(y);
        }
        double t2 = bench_now_ns();
        te[r] = (t1 - t0) / ((double)reps * ops);
        tr[r] = (t2 - t1) / ((double)reps * ops);
    }
    const double me = bench_median(te, rounds), mr = bench_median(tr, rounds);
    char dn[64];
    em_device_name(dev, dn, sizeof dn);
    printf("graph replay vs eager on %s: %d tiny ops on f32[%lld], %d kernel calls recorded\n",
           dn, ops, (long long)size, (int)em_graph_kernel_count(g));
    printf("  eager    %8.1f ns/op\n", me);
    printf("  replay   %8.1f ns/op   ratio replay/eager %.2f (goal <= 0.5)   same bits: %s\n", mr,
           mr / me, same ? "yes" : "NO");
    em_exec_release(e);
    em_graph_release(g);
    em_tensor_release(x);
    em_tensor_release(c);
    free(xv);
    free(cv);
    free(a);
    free(b);
    free(te);
    free(tr);
    return same ? 0 : 1;
}
