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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench.h"
#include "ember/backend.h"
#include "ember/ember.h"

typedef struct bench_cmd {
    const char *name;
    const char *args;    /* options, for the usage text */
    const char *summary; /* one line */
    int (*run)(int argc, char **argv); /* argv[0] is the subcommand; returns the exit code */
} bench_cmd;

static int cmd_dispatch(int argc, char **argv);
static int cmd_checkpoint(int argc, char **argv);

static const bench_cmd COMMANDS[] = {
    {"dispatch", "[--iters N] [--rounds R]",
     "ns per em_add of two 1-element f32 tensors: public API vs the ref kernel called directly",
     cmd_dispatch},
    {"checkpoint",
     "[--batch 4096] [--width 1024] [--layers 16] [--act relu|gelu] [--rounds 1] [--device D]\n"
     "             | --model gpt|resnet|mlp [--steps N] [--regions R] [ember-models' sizes]",
     "peak memory and time of an MLP's forward + backward: BALANCED vs DISABLED checkpointing;\n"
     "               --model: a GPT, ResNet or MLP training step (bench/models) under DISABLED,\n"
     "               BALANCED and a checkpoint region every R blocks: peak bytes, RSS, time",
     cmd_checkpoint},
    {"cpu", "[--rounds 5] [--tiny] [--gemm]",
     "the cpu backend vs OpenBLAS, plain C loops and ref (PyTorch: bench/cpu_vs_torch.py)",
     bench_cpu},
    {"opencl", "[--rounds 5] [--device opencl:0]",
     "opencl:0 vs the cpu backend: matmul and elementwise throughput, with ratios",
     bench_opencl},
    {"vulkan", "[--rounds 5] [--device vulkan:0]",
     "vulkan:0 vs the cpu backend and opencl:0: matmul and elementwise throughput, with ratios",
     bench_vulkan},
    {"graph", "[--ops 1000] [--size 8] [--rounds 7] [--device cpu]",
     "a prepared captured graph of tiny ops replayed vs the same ops run eagerly (goal <= 0.5)",
     bench_graph},
    {"quant", "[--rounds 3] [--k 4096] [--n 4096]",
     "cpu: x @ W^T with W in q8 / q4 blocks vs OpenBLAS sgemm (f32 W), m = 1 .. 512; int8 peak",
     bench_quant},
    {"torch", "[--rounds 5]",
     "the torch plugin: em_add latency vs at::add called directly; matmul, conv2d, softmax\n"
     "               throughput of torch vs cpu",
     bench_torch},
#ifdef EMBER_WITH_REMOTE /* remote (issue 7) */
    {"remote", "[--mb 64] [--rounds 5] [--ops 20000] [--device cpu]",
     "remote on loopback: round trips, pipelined ops, bulk MB/s vs raw TCP (goal >= 0.8)",
     bench_remote},
#endif
#ifdef EMBER_WITH_MPI /* dist (issue 19): run it under mpirun */
    {"dist", "[--rounds 7] [--batch 256] [--steps 30] [--no-train] [--no-bandwidth]",
     "under mpirun -np 2: em_all_reduce GB/s vs MPI_Allreduce, 1 KB .. 64 MB (goal >= 0.95);\n"
     "               MLP training samples/s: N ranks (em_ddp) vs 1 process with their threads",
     bench_dist},
#endif
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

double bench_now_ns(void) { return now_ns(); }
double bench_median(double *v, int n) { return median(v, n); }

void bench_time_two(void (*run)(const void *job), const void *a, const void *b, int rounds,
                    double *ta, double *tb) {
    double va[64], vb[64];
    if (rounds > 64) rounds = 64;
    if (rounds < 1) rounds = 1;
    run(a);
    run(b);
    for (int i = 0; i < rounds; i++) {
        const void *first = i % 2 ? b : a, *second = i % 2 ? a : b;
        double *v1 = i % 2 ? vb : va, *v2 = i % 2 ? va : vb;
        double t0 = now_ns();
        run(first);
        double t1 = now_ns();
        run(second);
        double t2 = now_ns();
        v1[i] = (t1 - t0) * 1e-9;
        v2[i] = (t2 - t1) * 1e-9;
    }
    *ta = median(va, rounds);
    *tb = median(vb, rounds);
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

/* ---- checkpoint: an MLP's training step under BALANCED vs DISABLED checkpointing ---- */

/** CPU time of the whole process (all threads), in ns: steadier than wall-clock time on a
 *  shared machine. */
static double cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

typedef struct ckpt_opts {
    long batch, width, layers, rounds;
    bool gelu;     /* the activation: GELU instead of ReLU */
    em_device dev; /* the inner device */
} ckpt_opts;

/* One model on one autodiff device: input x [batch, width], weights w[i] [width, width]
 * (used as x @ w, He-initialised) and biases b[i] [width]; every leaf requires grad. */
typedef struct ckpt_model {
    em_device dev;
    long layers;
    bool gelu;
    em_tensor *x, **w, **b;
} ckpt_model;

/* What one timed step measured. */
typedef struct ckpt_result {
    double secs, cpu_secs; /* wall-clock and process CPU time */
    size_t peak;  /* peak bytes during the step minus the bytes in use before it */
    bool has_mem; /* the backend keeps a memory count */
    double loss;
    float *gw0; /* the gradient of w[0] (for the equality check), malloc'd */
} ckpt_result;

static void ckpt_model_free(ckpt_model *m) {
    em_tensor_release(m->x);
    for (long i = 0; i < m->layers; i++) {
        if (m->w) em_tensor_release(m->w[i]);
        if (m->b) em_tensor_release(m->b[i]);
    }
    free(m->w);
    free(m->b);
    memset(m, 0, sizeof *m);
}

/* Creates the model on o->dev wrapped with `strategy`; the same seeds for both strategies. */
static em_status ckpt_model_init(const ckpt_opts *o, em_checkpointing strategy, ckpt_model *m) {
    memset(m, 0, sizeof *m);
    em_status s = em_device_autodiff(o->dev, strategy, &m->dev);
    if (s != EM_OK) return s;
    m->layers = o->layers;
    m->gelu = o->gelu;
    m->w = calloc((size_t)o->layers, sizeof *m->w);
    m->b = calloc((size_t)o->layers, sizeof *m->b);
    if (!m->w || !m->b) return EM_ERR_NOMEM;
    const int64_t xs[2] = {o->batch, o->width}, ws[2] = {o->width, o->width}, bs[1] = {o->width};
    s = em_rand_normal(xs, 2, EM_F32, 0.0, 1.0, 1, m->dev, &m->x);
    if (s == EM_OK) s = em_tensor_require_grad(m->x);
    for (long i = 0; s == EM_OK && i < o->layers; i++) {
        s = em_rand_normal(ws, 2, EM_F32, 0.0, sqrt(2.0 / (double)o->width), 100 + (uint64_t)i,
                           m->dev, &m->w[i]);
        if (s == EM_OK) s = em_tensor_require_grad(m->w[i]);
        if (s == EM_OK)
            s = em_rand_uniform(bs, 1, EM_F32, -0.1, 0.1, 200 + (uint64_t)i, m->dev, &m->b[i]);
        if (s == EM_OK) s = em_tensor_require_grad(m->b[i]);
    }
    return s;
}

/* The forward pass: act(h @ w[i] + b[i]) for every layer but the last (no act there), then
 * the sum as the loss. Intermediates are released as soon as the next op used them: only the
 * tape keeps what backward needs. */
static em_status ckpt_forward(const ckpt_model *m, em_tensor **loss) {
    em_tensor *h = m->x;
    em_tensor_retain(h);
    em_status s = EM_OK;
    for (long i = 0; s == EM_OK && i < m->layers; i++) {
        em_tensor *mm = NULL, *a = NULL;
        s = em_matmul(h, m->w[i], &mm);
        em_tensor_release(h);
        h = NULL;
        if (s == EM_OK) s = em_add(mm, m->b[i], &a);
        em_tensor_release(mm);
        if (s == EM_OK && i + 1 < m->layers) {
            s = m->gelu ? em_gelu(a, &h) : em_relu(a, &h);
            em_tensor_release(a);
        } else {
            h = a;
        }
    }
    if (s == EM_OK) s = em_sum(h, loss);
    em_tensor_release(h);
    return s;
}

/* One training step (forward, sum, backward), measured when r is not NULL. */
static em_status ckpt_step(const ckpt_model *m, ckpt_result *r) {
    em_memory_stats before = {0}, after = {0};
    bool has_mem = r && em_device_memory(m->dev, &before) == EM_OK &&
                   em_device_memory_reset_peak(m->dev) == EM_OK;
    em_clear_error();
    em_tensor *loss = NULL;
    em_grads *g = NULL;
    double t0 = now_ns(), c0 = cpu_ns();
    em_status s = ckpt_forward(m, &loss);
    if (s == EM_OK) s = em_backward(loss, &g);
    double t1 = now_ns(), c1 = cpu_ns();
    if (r) {
        r->secs = (t1 - t0) / 1e9;
        r->cpu_secs = (c1 - c0) / 1e9;
        r->has_mem = has_mem && em_device_memory(m->dev, &after) == EM_OK;
        r->peak = r->has_mem && after.peak_bytes > before.bytes_in_use
                      ? after.peak_bytes - before.bytes_in_use
                      : 0;
    }
    if (s == EM_OK && r) s = em_tensor_item(loss, &r->loss);
    em_tensor *gw = NULL;
    if (s == EM_OK && r) s = em_grads_get(g, m->w[0], &gw);
    if (s == EM_OK && r && gw) {
        size_t n = (size_t)em_tensor_numel(gw);
        free(r->gw0);
        r->gw0 = malloc(n * sizeof *r->gw0);
        s = r->gw0 ? em_tensor_to_data(gw, r->gw0, n * sizeof *r->gw0) : EM_ERR_NOMEM;
    }
    em_tensor_release(gw);
    em_grads_release(g);
    em_tensor_release(loss);
    return s;
}

/* Parses the checkpoint options. Returns 0, or 2 on a bad option. */
static int ckpt_parse(int argc, char **argv, ckpt_opts *o) {
    for (int i = 1; i < argc; i++) {
        long *dst = NULL;
        if (strcmp(argv[i], "--batch") == 0) dst = &o->batch;
        else if (strcmp(argv[i], "--width") == 0) dst = &o->width;
        else if (strcmp(argv[i], "--layers") == 0) dst = &o->layers;
        else if (strcmp(argv[i], "--rounds") == 0) dst = &o->rounds;
        else if (strcmp(argv[i], "--act") == 0 && i + 1 < argc) {
            const char *act = argv[++i];
            o->gelu = strcmp(act, "gelu") == 0;
            if (!o->gelu && strcmp(act, "relu") != 0) {
                fprintf(stderr, "ember-bench %s: --act takes relu or gelu, not '%s'\n", argv[0],
                        act);
                return 2;
            }
            continue;
        } else if (strcmp(argv[i], "--device") != 0 || i + 1 >= argc) {
            fprintf(stderr, "ember-bench %s: unknown or incomplete option '%s'\n", argv[0], argv[i]);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "ember-bench %s: option '%s' needs a value\n", argv[0], argv[i]);
            return 2;
        }
        if (!dst) {
            if (em_device_parse(argv[++i], &o->dev) != EM_OK) {
                fprintf(stderr, "ember-bench %s: %s\n", argv[0], em_last_error());
                return 2;
            }
            if (o->dev.autodiff) {
                fprintf(stderr, "ember-bench %s: give the device without '+autodiff' (both "
                        "strategies are measured)\n", argv[0]);
                return 2;
            }
            continue;
        }
        char *end;
        errno = 0;
        long v = strtol(argv[++i], &end, 10);
        if (errno || *end || v <= 0 || v > (1L << 24)) {
            fprintf(stderr, "ember-bench %s: '%s' is not a positive count\n", argv[0], argv[i]);
            return 2;
        }
        *dst = v;
    }
    return 0;
}

static double mib(size_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

/* bench/models/models.c, linked in: `ember-models MODEL --ckpt compare ...` */
int ember_models_main(int argc, char **argv);

/* checkpoint --model M [flags]: ember-models' three-way comparison of one model. */
static int ckpt_models(int argc, char **argv, int at) {
    char **args = calloc((size_t)argc + 4, sizeof *args);
    if (!args) return 1;
    int n = 0;
    args[n++] = "ember-bench checkpoint";
    args[n++] = argv[at + 1];
    args[n++] = "--ckpt";
    args[n++] = "compare";
    for (int i = 1; i < argc; i++)
        if (i != at && i != at + 1) args[n++] = argv[i];
    args[n] = NULL;
    int rc = ember_models_main(n, args);
    free(args);
    return rc;
}

static int cmd_checkpoint(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--model") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ember-bench %s: --model needs gpt, resnet or mlp\n", argv[0]);
                return 2;
            }
            return ckpt_models(argc, argv, i);
        }
    ckpt_opts o = {4096, 1024, 16, 1, false, em_device_default()};
    if (ckpt_parse(argc, argv, &o)) return 2;
    char devname[64];
    if (em_device_name(o.dev, devname, sizeof devname) != EM_OK) strcpy(devname, "?");
    static const em_checkpointing strat[2] = {EM_CKPT_DISABLED, EM_CKPT_BALANCED};
    static const char *const sname[2] = {"DISABLED", "BALANCED"};
    ckpt_model m[2];
    memset(m, 0, sizeof m);
    ckpt_result res[2], cur;
    memset(res, 0, sizeof res);
    memset(&cur, 0, sizeof cur);
    double *times[2] = {calloc((size_t)o.rounds, sizeof(double)),
                        calloc((size_t)o.rounds, sizeof(double))};
    double *cpus[2] = {calloc((size_t)o.rounds, sizeof(double)),
                       calloc((size_t)o.rounds, sizeof(double))};
    int rc = 1;
    double start = now_ns();
    em_status s = (times[0] && times[1] && cpus[0] && cpus[1]) ? EM_OK : EM_ERR_NOMEM;
    for (int k = 0; s == EM_OK && k < 2; k++) s = ckpt_model_init(&o, strat[k], &m[k]);
    /* a warm-up step of each, then rounds alternating which strategy runs first */
    for (int k = 0; s == EM_OK && k < 2; k++) s = ckpt_step(&m[k], NULL);
    for (long r = 0; s == EM_OK && r < o.rounds; r++) {
        for (int j = 0; s == EM_OK && j < 2; j++) {
            int k = (int)((r + j) % 2);
            s = ckpt_step(&m[k], &cur);
            if (s != EM_OK) break;
            times[k][r] = cur.secs;
            cpus[k][r] = cur.cpu_secs;
            if (cur.peak > res[k].peak || r == 0) res[k].peak = cur.peak;
            res[k].has_mem = cur.has_mem;
            res[k].loss = cur.loss;
            free(res[k].gw0);
            res[k].gw0 = cur.gw0;
            cur.gw0 = NULL;
        }
    }
    if (s != EM_OK) {
        fprintf(stderr, "ember-bench checkpoint: %s: %s\n", em_status_name(s), em_last_error());
        goto done;
    }
    for (int k = 0; k < 2; k++) {
        res[k].secs = median(times[k], (int)o.rounds);
        res[k].cpu_secs = median(cpus[k], (int)o.rounds);
    }
    double maxdiff = 0, maxabs = 0;
    size_t nw = (size_t)(o.width * o.width);
    for (size_t i = 0; res[0].gw0 && res[1].gw0 && i < nw; i++) {
        maxdiff = fmax(maxdiff, fabs((double)res[0].gw0[i] - (double)res[1].gw0[i]));
        maxabs = fmax(maxabs, fabs((double)res[0].gw0[i]));
    }
    printf("ember-bench checkpoint: MLP of %ld layers (x @ w + b, %s between), width %ld, "
           "batch %ld, f32, on %s\n", o.layers, o.gelu ? "gelu" : "relu", o.width, o.batch,
           devname);
    printf("  a warm-up step per strategy, then %ld timed round(s) of forward + sum + backward\n",
           o.rounds);
    printf("  (memory: the peak during the step minus the bytes in use before it; weights %.1f "
           "MiB, one activation %.1f MiB)\n",
           mib((size_t)(o.layers * o.width * (o.width + 1)) * sizeof(float)),
           mib((size_t)(o.batch * o.width) * sizeof(float)));
    for (int k = 0; k < 2; k++) {
        char peak[32] = "       n/a";
        if (res[k].has_mem) snprintf(peak, sizeof peak, "%10.1f", mib(res[k].peak));
        printf("  %s  peak %s MiB   time %9.3f s   cpu %9.3f s%s\n", sname[k], peak,
               res[k].secs, res[k].cpu_secs, o.rounds > 1 ? " (medians)" : "");
    }
    char ratio[32] = "n/a";
    if (res[0].has_mem && res[1].has_mem && res[0].peak > 0)
        snprintf(ratio, sizeof ratio, "%.3f", (double)res[1].peak / (double)res[0].peak);
    printf("  ratio BALANCED / DISABLED   peak %s   time %.3f   cpu %.3f\n", ratio,
           res[0].secs > 0 ? res[1].secs / res[0].secs : 0.0,
           res[0].cpu_secs > 0 ? res[1].cpu_secs / res[0].cpu_secs : 0.0);
    printf("  check: loss %.6g vs %.6g, max |dW0 BALANCED - DISABLED| = %g\n", res[1].loss,
           res[0].loss, maxdiff);
    printf("  took %.1f s in all\n", (now_ns() - start) / 1e9);
    /* both strategies run the same backward code: their gradients agree (a threaded backend
     * may sum in another order, hence the f32-sized slack) */
    rc = (res[0].gw0 && res[1].gw0 && maxdiff <= 1e-6 * maxabs &&
          fabs(res[0].loss - res[1].loss) <= 1e-6 * fabs(res[0].loss)) ? 0 : 1;
    if (rc) fprintf(stderr, "ember-bench checkpoint: the two strategies disagree\n");
done:
    for (int k = 0; k < 2; k++) {
        ckpt_model_free(&m[k]);
        free(res[k].gw0);
        free(times[k]);
        free(cpus[k]);
    }
    free(cur.gw0);
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
