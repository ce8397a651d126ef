/*
 * ember-bench — micro-benchmarks that print a ratio against a baseline measured in the same
 * run, interleaved in rounds (machines are noisy; only the ratio is meant to be compared).
 *
 * Usage: ember-bench <subcommand> [options]
 * Subcommands live in the table COMMANDS below; add an entry (cpu, checkpoint, opencl,
 * remote, ...) to add one.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ember/backend.h"
#include "ember/ember.h"

typedef struct bench_cmd {
    const char *name;
    const char *args;    /* options, for the usage text */
    const char *summary; /* one line */
    int (*run)(int argc, char **argv); /* argv[0] is the subcommand; returns the exit code */
} bench_cmd;

static int cmd_dispatch(int argc, char **argv);

static const bench_cmd COMMANDS[] = {
    {"dispatch", "[--iters N] [--rounds R]",
     "ns per em_add of two 1-element f32 tensors: public API vs the ref kernel called directly",
     cmd_dispatch},
};
#define N_COMMANDS (sizeof COMMANDS / sizeof COMMANDS[0])

static void usage(FILE *f) {
    fprintf(f, "usage: ember-bench <subcommand> [options]\n\nsubcommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-10s %s\n  %-10s   %s\n", COMMANDS[i].name, COMMANDS[i].args, "",
                COMMANDS[i].summary);
}

/* ---- helpers shared by subcommands ---- */

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/** The median of n values (sorts them). */
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/** Parses "--name value" options into *iters / *rounds. Returns 0, or 2 on a bad option. */
static int parse_counts(int argc, char **argv, long *iters, long *rounds) {
    for (int i = 1; i < argc; i++) {
        long *dst = NULL;
        if (strcmp(argv[i], "--iters") == 0) dst = iters;
        else if (strcmp(argv[i], "--rounds") == 0) dst = rounds;
        if (!dst || i + 1 >= argc) {
            fprintf(stderr, "ember-bench %s: unknown or incomplete option '%s'\n", argv[0], argv[i]);
            return 2;
        }
        char *end;
        errno = 0;
        long v = strtol(argv[++i], &end, 10);
        if (errno || *end || v <= 0) {
            fprintf(stderr, "ember-bench %s: '%s' is not a positive count\n", argv[0], argv[i]);
            return 2;
        }
        *dst = v;
    }
    return 0;
}

/* ---- dispatch: public API vs direct kernel call ---- */

typedef struct dispatch_state {
    em_tensor *a, *b;              /* public path inputs */
    const em_backend_ops *ops;     /* direct path: the ref table */
    void *ctx;
    em_view va, vb;                /* direct path inputs */
    int failures;
} dispatch_state;

/** A 1-element f32 view of buf. */
static em_view scalar_view(void *buf) {
    em_view v;
    memset(&v, 0, sizeof v);
    v.buf = buf;
    v.dtype = EM_F32;
    v.rank = 1;
    v.shape[0] = 1;
    v.strides[0] = 1;
    return v;
}

/** iters x (em_add + em_tensor_release); returns ns per op. */
static double run_public(dispatch_state *s, long iters) {
    double t0 = now_ns();
    for (long i = 0; i < iters; i++) {
        em_tensor *c = NULL;
        if (em_add(s->a, s->b, &c) != EM_OK) s->failures++;
        em_tensor_release(c);
    }
    return (now_ns() - t0) / (double)iters;
}

/** iters x (alloc + binary kernel + free) through the ref table; returns ns per op. */
static double run_direct(dispatch_state *s, long iters) {
    double t0 = now_ns();
    for (long i = 0; i < iters; i++) {
        void *buf = NULL;
        if (s->ops->alloc(s->ctx, sizeof(float), &buf) != EM_OK) {
            s->failures++;
            continue;
        }
        em_view out = scalar_view(buf);
        if (s->ops->binary(s->ctx, EM_BIN_ADD, &out, &s->va, &s->vb) != EM_OK) s->failures++;
        s->ops->free(s->ctx, buf);
    }
    return (now_ns() - t0) / (double)iters;
}

/** iters x the binary kernel alone, into one preallocated output; returns ns per op. This is
 *  the floor: no output is allocated at all. */
static double run_kernel(dispatch_state *s, long iters, void *buf) {
    em_view out = scalar_view(buf);
    double t0 = now_ns();
    for (long i = 0; i < iters; i++)
        if (s->ops->binary(s->ctx, EM_BIN_ADD, &out, &s->va, &s->vb) != EM_OK) s->failures++;
    return (now_ns() - t0) / (double)iters;
}

/** Checks that both paths compute 1 + 2 = 3. */
static int check_results(dispatch_state *s) {
    em_tensor *c = NULL;
    float pub = 0, dir = 0;
    if (em_add(s->a, s->b, &c) != EM_OK || em_tensor_to_data(c, &pub, sizeof pub) != EM_OK) {
        fprintf(stderr, "ember-bench dispatch: em_add: %s\n", em_last_error());
        em_tensor_release(c);
        return 1;
    }
    em_tensor_release(c);
    void *buf = NULL;
    if (s->ops->alloc(s->ctx, sizeof(float), &buf) != EM_OK) return 1;
    em_view out = scalar_view(buf);
    em_status st = s->ops->binary(s->ctx, EM_BIN_ADD, &out, &s->va, &s->vb);
    if (st == EM_OK) st = s->ops->read(s->ctx, buf, 0, &dir, sizeof dir);
    s->ops->free(s->ctx, buf);
    if (st != EM_OK || pub != 3.0f || dir != 3.0f) {
        fprintf(stderr, "ember-bench dispatch: wrong results (public %g, direct %g): %s\n",
                (double)pub, (double)dir, em_last_error());
        return 1;
    }
    return 0;
}

static int cmd_dispatch(int argc, char **argv) {
    long iters = 200000, rounds = 7;
    if (parse_counts(argc, argv, &iters, &rounds)) return 2;
    const em_device ref = {EM_BACKEND_REF, 0, false, EM_CKPT_NONE};
    dispatch_state s;
    memset(&s, 0, sizeof s);
    const float one = 1.0f, two = 2.0f;
    const int64_t shape[1] = {1};
    s.ops = em_backend_get(EM_BACKEND_REF);
    void *ba = NULL, *bb = NULL, *bo = NULL;
    int rc = 1;
    if (!s.ops || !s.ops->binary) {
        fprintf(stderr, "ember-bench dispatch: the ref backend has no binary kernel\n");
        return 1;
    }
    if (em_tensor_from_data(&one, EM_F32, shape, 1, ref, &s.a) != EM_OK ||
        em_tensor_from_data(&two, EM_F32, shape, 1, ref, &s.b) != EM_OK ||
        s.ops->open(0, &s.ctx) != EM_OK || s.ops->alloc(s.ctx, sizeof one, &ba) != EM_OK ||
        s.ops->alloc(s.ctx, sizeof two, &bb) != EM_OK ||
        s.ops->alloc(s.ctx, sizeof two, &bo) != EM_OK ||
        s.ops->write(s.ctx, ba, 0, &one, sizeof one) != EM_OK ||
        s.ops->write(s.ctx, bb, 0, &two, sizeof two) != EM_OK) {
        fprintf(stderr, "ember-bench dispatch: setup failed: %s\n", em_last_error());
        goto done;
    }
    s.va = scalar_view(ba);
    s.vb = scalar_view(bb);
    if (check_results(&s)) goto done;

    double *pub = calloc((size_t)rounds, sizeof *pub), *dir = calloc((size_t)rounds, sizeof *dir);
    double *ker = calloc((size_t)rounds, sizeof *ker);
    if (!pub || !dir || !ker) {
        free(pub);
        free(dir);
        free(ker);
        fprintf(stderr, "ember-bench dispatch: out of memory\n");
        goto done;
    }
    /* a warm-up of each, then rounds alternating which path runs first */
    run_public(&s, iters / 10 + 1);
    run_direct(&s, iters / 10 + 1);
    for (long r = 0; r < rounds; r++) {
        if (r % 2 == 0) {
            pub[r] = run_public(&s, iters);
            dir[r] = run_direct(&s, iters);
        } else {
            dir[r] = run_direct(&s, iters);
            pub[r] = run_public(&s, iters);
        }
        ker[r] = run_kernel(&s, iters, bo);
    }
    double mp = median(pub, (int)rounds), md = median(dir, (int)rounds);
    double mk = median(ker, (int)rounds);
    free(pub);
    free(dir);
    free(ker);
    if (s.failures) {
        fprintf(stderr, "ember-bench dispatch: %d calls failed: %s\n", s.failures, em_last_error());
        goto done;
    }
    printf("ember-bench dispatch: em_add of two 1-element f32 tensors on ref\n");
    printf("  %ld iterations per round, %ld rounds, paths interleaved\n", iters, rounds);
    printf("  public API  (em_add + em_tensor_release)       %10.1f ns/op (median)\n", mp);
    printf("  direct      (ops->alloc + ops->binary + free)  %10.1f ns/op (median)\n", md);
    printf("  kernel only (ops->binary, output preallocated) %10.1f ns/op (median)\n", mk);
    printf("  ratio public / direct                          %10.2f\n", md > 0 ? mp / md : 0.0);
    printf("  (the public path allocates nothing for a tiny tensor: the core keeps tiny buffers\n"
           "   with its cached tensor handles; the direct path pays ops->alloc and ops->free)\n");
    rc = 0;
done:
    if (ba) s.ops->free(s.ctx, ba);
    if (bb) s.ops->free(s.ctx, bb);
    if (bo) s.ops->free(s.ctx, bo);
    em_tensor_release(s.a);
    em_tensor_release(s.b);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(argv[1], COMMANDS[i].name) == 0) return COMMANDS[i].run(argc - 1, argv + 1);
    fprintf(stderr, "ember-bench: unknown subcommand '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
