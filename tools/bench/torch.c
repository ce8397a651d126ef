/*
 * torch.c — `ember-bench torch`: the torch backend (the LibTorch plugin) in one run:
 *   - latency: ns per em_add of two 1-element f32 tensors on torch, against at::add (and
 *     at::add_out) called straight from C++ in the plugin (ember_torch_bench_add_ns), and
 *     em_add on cpu beside them: what ember's dispatch costs on top of ATen's;
 *   - throughput, torch against cpu, interleaved in rounds (medians): matmul f32 n = 256 ..
 *     1024, conv2d (a ResNet-like 3x3 layer, an MNIST-like 5x5 one), softmax over rows.
 * The ratio printed is cpu time / torch time (above 1: torch is faster). Both backends run
 * with the same threads (EMBER_NUM_THREADS, else the machine's CPUs).
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "ember/ember.h"

#define TRY(x)                                                                                \
    do {                                                                                      \
        em_status s_ = (x);                                                                   \
        if (s_ != EM_OK) {                                                                    \
            fprintf(stderr, "ember-bench torch: %s: %s\n", #x, em_last_error());              \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

typedef enum { J_ADD1, J_MATMUL, J_CONV, J_SOFTMAX } job_kind;

typedef struct tjob {
    job_kind kind;
    em_tensor *a, *b;
    int64_t pad;
    int reps;
} tjob;

static void run_job(const tjob *j) {
    for (int r = 0; r < j->reps; r++) {
        em_tensor *y = NULL;
        switch (j->kind) {
        case J_ADD1: TRY(em_add(j->a, j->b, &y)); break;
        case J_MATMUL: TRY(em_matmul(j->a, j->b, &y)); break;
        case J_CONV: {
            em_conv_params p = em_conv_params_default();
            p.padding[0] = p.padding[1] = j->pad;
            TRY(em_conv2d(j->a, j->b, NULL, &p, &y));
            break;
        }
        case J_SOFTMAX: TRY(em_softmax(j->a, -1, &y)); break;
        }
        em_tensor_release(y);
    }
}

static void run_any(const void *j) { run_job((const tjob *)j); }

/* The two jobs' medians over `rounds` interleaved rounds (bench_time_two). */
static void time_two(const tjob *x, const tjob *y, int rounds, double *tx, double *ty) {
    bench_time_two(run_any, x, y, rounds, tx, ty);
}

static em_tensor *rand_on(const int64_t *shape, int rank, em_device dev, uint64_t seed) {
    em_tensor *t;
    TRY(em_rand_uniform(shape, rank, EM_F32, -1.0, 1.0, seed, dev, &t));
    return t;
}

/* The plugin's at::add baseline, found in the loaded module. */
typedef double (*add_ns_fn)(int64_t iters, int out_form);

static add_ns_fn find_baseline(void) {
    em_plugin_info list[32];
    size_t n = 0;
    if (em_plugins(list, 32, &n) != EM_OK) return NULL;
    for (size_t i = 0; i < n && i < 32; i++) {
        if (strcmp(list[i].name, "torch") != 0 || !list[i].loaded || list[i].status != EM_OK)
            continue;
        void *h = dlopen(list[i].path, RTLD_NOW | RTLD_NOLOAD);
        if (!h) return NULL;
        void *sym = dlsym(h, "ember_torch_bench_add_ns");
        add_ns_fn f;
        memcpy(&f, &sym, sizeof f);
        dlclose(h); /* drops the reference RTLD_NOLOAD took; the module stays loaded */
        return sym ? f : NULL;
    }
    return NULL;
}

int bench_torch(int argc, char **argv) {
    int rounds = 5;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
            rounds = atoi(argv[++i]);
            if (rounds < 1) rounds = 1;
        } else {
            fprintf(stderr, "ember-bench torch: unknown or incomplete option '%s'\n", argv[i]);
            return 2;
        }
    }
    em_device tdev, cpu;
    if (em_device_parse("torch", &tdev) != EM_OK) {
        fprintf(stderr, "ember-bench torch: %s\n", em_last_error());
        return 1;
    }
    TRY(em_device_parse("cpu", &cpu));
    const char *thr = getenv("EMBER_NUM_THREADS");
    printf("ember-bench torch: torch (LibTorch's ATen kernels) vs cpu, medians of %d rounds; "
           "threads %s\n", rounds, thr && *thr ? thr : "(the machine's CPUs)");

    /* ---- latency of one tiny op ---- */
    add_ns_fn base = find_baseline();
    const int64_t iters = 200000, one[1] = {1};
    double v_t[64], v_c[64], v_a[64], v_o[64];
    int lr = rounds > 64 ? 64 : rounds;
    tjob ta = {J_ADD1, rand_on(one, 1, tdev, 1), rand_on(one, 1, tdev, 2), 0, (int)iters};
    tjob ca = {J_ADD1, rand_on(one, 1, cpu, 1), rand_on(one, 1, cpu, 2), 0, (int)iters};
    run_job(&ta);
    for (int r = 0; r < lr; r++) {
        double t0 = bench_now_ns();
        run_job(&ta);
        double t1 = bench_now_ns();
        run_job(&ca);
        double t2 = bench_now_ns();
        v_t[r] = (t1 - t0) / (double)iters;
        v_c[r] = (t2 - t1) / (double)iters;
        v_a[r] = base ? base(iters, 0) : -1;
        v_o[r] = base ? base(iters, 1) : -1;
    }
    double em_t = bench_median(v_t, lr), em_c = bench_median(v_c, lr);
    printf("\nlatency: ns per add of two 1-element f32 tensors\n");
    printf("  em_add on torch                  %8.1f\n", em_t);
    if (base) {
        double at_add = bench_median(v_a, lr), at_out = bench_median(v_o, lr);
        printf("  at::add, called directly          %8.1f   (em_add on torch / at::add: %.2fx)\n",
               at_add, em_t / at_add);
        printf("  at::add_out, called directly      %8.1f   (em_add on torch / at::add_out: "
               "%.2fx)\n", at_out, em_t / at_out);
    } else {
        printf("  at::add: the plugin has no ember_torch_bench_add_ns (not measured)\n");
    }
    printf("  em_add on cpu                    %8.1f\n", em_c);
    em_tensor_release(ta.a), em_tensor_release(ta.b), em_tensor_release(ca.a),
        em_tensor_release(ca.b);

    /* ---- throughput ---- */
    printf("\nmatmul f32 [n x n] @ [n x n]       torch GFLOP/s   cpu GFLOP/s   cpu/torch time\n");
    const int64_t ns[] = {256, 512, 1024};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        const int64_t n = ns[k], shape[2] = {n, n};
        int reps = n <= 256 ? 8 : n <= 512 ? 2 : 1;
        tjob t = {J_MATMUL, rand_on(shape, 2, tdev, 1), rand_on(shape, 2, tdev, 2), 0, reps};
        tjob c = {J_MATMUL, rand_on(shape, 2, cpu, 1), rand_on(shape, 2, cpu, 2), 0, reps};
        double tt, tc;
        time_two(&t, &c, rounds, &tt, &tc);
        double flop = 2.0 * (double)n * (double)n * (double)n * reps;
        printf("  n = %-5lld                        %10.2f   %10.2f   %8.2f\n", (long long)n,
               flop / tt * 1e-9, flop / tc * 1e-9, tc / tt);
        em_tensor_release(t.a), em_tensor_release(t.b), em_tensor_release(c.a),
            em_tensor_release(c.b);
    }
    printf("\nconv2d f32 (stride 1, same padding)  torch GFLOP/s   cpu GFLOP/s   cpu/torch time\n");
    const struct {
        const char *name;
        int64_t n, c, h, o, k;
    } convs[] = {{"[8,64,32,32] * [64,64,3,3]", 8, 64, 32, 64, 3},
                 {"[32,1,28,28] * [32,1,5,5]", 32, 1, 28, 32, 5}};
    for (size_t k = 0; k < sizeof convs / sizeof convs[0]; k++) {
        const int64_t xs[4] = {convs[k].n, convs[k].c, convs[k].h, convs[k].h},
                      ws[4] = {convs[k].o, convs[k].c, convs[k].k, convs[k].k};
        tjob t = {J_CONV, rand_on(xs, 4, tdev, 3), rand_on(ws, 4, tdev, 4), convs[k].k / 2, 2};
        tjob c = {J_CONV, rand_on(xs, 4, cpu, 3), rand_on(ws, 4, cpu, 4), convs[k].k / 2, 2};
        double tt, tc;
        time_two(&t, &c, rounds, &tt, &tc);
        double flop = 2.0 * convs[k].n * convs[k].o * convs[k].h * convs[k].h * convs[k].c *
                      convs[k].k * convs[k].k * t.reps;
        printf("  %-34s %10.2f   %10.2f   %8.2f\n", convs[k].name, flop / tt * 1e-9,
               flop / tc * 1e-9, tc / tt);
        em_tensor_release(t.a), em_tensor_release(t.b), em_tensor_release(c.a),
            em_tensor_release(c.b);
    }
    printf("\nsoftmax f32 over the last dim        torch GB/s      cpu GB/s      cpu/torch time\n");
    const int64_t sm[2][2] = {{1024, 4096}, {65536, 64}};
    for (size_t k = 0; k < 2; k++) {
        tjob t = {J_SOFTMAX, rand_on(sm[k], 2, tdev, 5), NULL, 0, 4};
        tjob c = {J_SOFTMAX, rand_on(sm[k], 2, cpu, 5), NULL, 0, 4};
        double tt, tc;
        time_two(&t, &c, rounds, &tt, &tc);
        double bytes = 8.0 * (double)sm[k][0] * (double)sm[k][1] * t.reps;
        char nm[64];
        snprintf(nm, sizeof nm, "[%lld, %lld]", (long long)sm[k][0], (long long)sm[k][1]);
        printf("  %-34s %10.2f   %10.2f   %8.2f\n", nm, bytes / tt * 1e-9, bytes / tc * 1e-9,
               tc / tt);
        em_tensor_release(t.a), em_tensor_release(c.a);
    }
    return 0;
}
