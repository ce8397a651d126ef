/* bench.h — what the subcommands of ember-bench share. */
#ifndef EMBER_BENCH_H
#define EMBER_BENCH_H

#include <stdint.h>

/** Monotonic clock, in ns. */
double bench_now_ns(void);
/** The median of n values (sorts them). */
double bench_median(double *v, int n);
/** Times two jobs (run(a), run(b)) in `rounds` interleaved rounds after one warm-up run each,
 *  the order alternating; *ta and *tb get the medians in seconds (at most 64 rounds). */
void bench_time_two(void (*run)(const void *job), const void *a, const void *b, int rounds,
                    double *ta, double *tb);

/* loops.c: hand-written baselines, compiled -O3 -march=native */
void bench_loop_add(float *restrict z, const float *restrict x, const float *restrict y,
                    int64_t n);
void bench_loop_fma_relu(float *restrict z, const float *restrict a, const float *restrict b,
                         const float *restrict c, int64_t n);

/* the subcommands */
int bench_cpu(int argc, char **argv);
int bench_opencl(int argc, char **argv); /* gpu.c */
int bench_vulkan(int argc, char **argv); /* gpu.c */
int bench_remote(int argc, char **argv); /* remote.c (issue 7), with EMBER_WITH_REMOTE */
int bench_graph(int argc, char **argv);  /* graph.c: captured graphs */
int bench_quant(int argc, char **argv);  /* quant.c: quantized matmul vs sgemm (issue 17) */
int bench_torch(int argc, char **argv);  /* torch.c: the torch plugin vs at::add and cpu */
int bench_dist(int argc, char **argv);   /* dist.c: collectives and em_ddp, with EMBER_WITH_MPI */

#endif
