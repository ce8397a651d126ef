/*
 * quant.c — `ember-bench quant`: the cpu backend's quantized matmul (issue 17) against
 * OpenBLAS's f32 GEMM of the same shape, measured in one run:
 *   - y = x @ W^T, x f32 [m, k], W [n, k] (k = n = 4096), m = 1, 8, 64, 512: ember's em_matmul
 *     on cpu with W quantized by rows (q8 blocks of 32 and q4 blocks of 32, f16 scales: the
 *     layouts of ggml's Q8_0 and Q4_0; x is quantized to q8 blocks inside the call), against
 *     cblas_sgemm with W in f32. Ratio = time of sgemm / time of ember (> 1: ember faster),
 *     each side the best of its repetitions (interleaved in rounds);
 *   - the int8 peak of this machine, measured in the same run: a loop of independent
 *     vpdpbusd (512-bit where the CPU has AVX512_VNNI, else AVX-VNNI's 256) on registers only,
 *     on as many threads as ember's pool; and the fraction of it that m = 512 reaches.
 * OpenBLAS runs threaded with as many threads as ember's pool (ember keeps it on one thread
 * otherwise); each side waits for the other's threads to settle before its round.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "ember/backend.h"
#include "ember/ember.h"

#ifdef EMBER_HAVE_OPENBLAS
#include <cblas.h>
#include <unistd.h>

#include "backends/cpu/isa.h"
#include "backends/cpu/quant.h"
char *openblas_get_corename(void);
void openblas_set_num_threads(int n);
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#define TRY(x)                                                                                \
    do {                                                                                      \
        em_status s_ = (x);                                                                   \
        if (s_ != EM_OK) {                                                                    \
            fprintf(stderr, "ember-bench quant: %s: %s\n", #x, em_last_error());              \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

static int pool_threads(void) {
    const char *e = getenv("EMBER_NUM_THREADS");
    long n = e && *e ? strtol(e, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* OpenBLAS's threads spin for a while after a threaded call (and ember's pool after its
 * jobs): a busy wait lets them settle before the other side is timed. */
static void settle(int blas_threads) {
    openblas_set_num_threads(blas_threads);
    const double t0 = bench_now_ns();
    while (bench_now_ns() - t0 < 2e8) {
    }
}

static void cpu_model(char *buf, size_t cap) {
    snprintf(buf, cap, "?");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *p = strchr(line, ':');
        if (!p) break;
        p++;
        while (*p == ' ') p++;
        snprintf(buf, cap, "%s", p);
        buf[strcspn(buf, "\n")] = 0;
        break;
    }
    fclose(f);
}

/* ---- the int8 peak: independent vpdpbusd chains on registers ---- */

typedef struct peak_job {
    int level;
    long iters;
    int sink;
} peak_job;

#if defined(__x86_64__) && defined(__GNUC__)
/* Independent chains of vpdpbusd (enough to cover its latency), each in a named variable: an
 * array of vectors would live on the stack and time loads and stores instead. */
#define DP8(F, a0, a1, a2, a3, a4, a5, a6, a7)                                               \
    a0 = F(a0, u, s), a1 = F(a1, u, s), a2 = F(a2, u, s), a3 = F(a3, u, s), a4 = F(a4, u, s), \
    a5 = F(a5, u, s), a6 = F(a6, u, s), a7 = F(a7, u, s)
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static int peak512(long iters) {
    const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-5);
    __m512i a0 = _mm512_set1_epi32(0), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
            a7 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0, b4 = a0, b5 = a0, b6 = a0, b7 = a0;
    for (long it = 0; it < iters; it++) {
        DP8(_mm512_dpbusd_epi32, a0, a1, a2, a3, a4, a5, a6, a7);
        DP8(_mm512_dpbusd_epi32, b0, b1, b2, b3, b4, b5, b6, b7);
    }
    a0 = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                          _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
    b0 = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(b0, b1), _mm512_add_epi32(b2, b3)),
                          _mm512_add_epi32(_mm512_add_epi32(b4, b5), _mm512_add_epi32(b6, b7)));
    return _mm512_reduce_add_epi32(_mm512_add_epi32(a0, b0));
}

__attribute__((target("avx2,avxvnni"))) static int peak256(long iters) {
    const __m256i u = _mm256_set1_epi8(3), s = _mm256_set1_epi8(-5);
    __m256i a0 = _mm256_set1_epi32(0), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
            a7 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0, b4 = a0, b5 = a0, b6 = a0, b7 = a0;
    for (long it = 0; it < iters; it++) {
        DP8(_mm256_dpbusd_avx_epi32, a0, a1, a2, a3, a4, a5, a6, a7);
        DP8(_mm256_dpbusd_avx_epi32, b0, b1, b2, b3, b4, b5, b6, b7);
    }
    a0 = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)),
                          _mm256_add_epi32(_mm256_add_epi32(a4, a5), _mm256_add_epi32(a6, a7)));
    b0 = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(b0, b1), _mm256_add_epi32(b2, b3)),
                          _mm256_add_epi32(_mm256_add_epi32(b4, b5), _mm256_add_epi32(b6, b7)));
    return _mm256_extract_epi32(_mm256_add_epi32(a0, b0), 0);
}
#endif

static void *peak_thread(void *arg) {
    peak_job *j = arg;
#if defined(__x86_64__) && defined(__GNUC__)
    j->sink = j->level == CPU_QL_AVX512VNNI ? peak512(j->iters) : peak256(j->iters);
#endif
    return NULL;
}

/* Multiply-adds per second of the loop on `threads` threads (0 when the CPU has no VNNI). */
static double int8_peak(int threads, int *level) {
    *level = cpu_quant_level_supported(CPU_QL_AVX512VNNI) ? CPU_QL_AVX512VNNI
             : cpu_quant_level_supported(CPU_QL_AVXVNNI)  ? CPU_QL_AVXVNNI
                                                          : -1;
    if (*level < 0) return 0;
    const double per_iter = *level == CPU_QL_AVX512VNNI ? 16.0 * 64 : 16.0 * 32;
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        pthread_t th[64];
        peak_job jobs[64];
        const int nt = threads < 64 ? threads : 64;
        const long iters = 20000000;
        const double t0 = bench_now_ns();
        for (int i = 0; i < nt; i++) {
            jobs[i] = (peak_job){*level, iters, 0};
            pthread_create(&th[i], NULL, peak_thread, &jobs[i]);
        }
        for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
        const double rate = nt * (double)iters * per_iter / ((bench_now_ns() - t0) * 1e-9);
        if (rate > best) best = rate;
    }
    return best;
}

/* ---- the matmuls ---- */

typedef struct shape_result {
    double sgemm, q8, q4; /* best seconds a call */
} shape_result;

/* Calls a side `reps` times; returns the best seconds a call. */
static double time_sgemm(int64_t m, int64_t n, int64_t k, const float *x, const float *w,
                         float *y, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        const double t0 = bench_now_ns();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k, 1.0f, x,
                    (int)k, w, (int)k, 0.0f, y, (int)n);
        const double t = (bench_now_ns() - t0) * 1e-9;
        if (t < best) best = t;
    }
    return best;
}

static double time_ember(const em_tensor *x, const em_tensor *wt, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        em_tensor *y;
        const double t0 = bench_now_ns();
        TRY(em_matmul(x, wt, &y));
        const double t = (bench_now_ns() - t0) * 1e-9;
        em_tensor_release(y);
        if (t < best) best = t;
    }
    return best;
}

int bench_quant(int argc, char **argv) {
    int rounds = 3;
    int64_t k = 4096, n = 4096;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--k") == 0 && i + 1 < argc) k = atol(argv[++i]);
        else if (strcmp(argv[i], "--n") == 0 && i + 1 < argc) n = atol(argv[++i]);
        else {
            fprintf(stderr, "usage: ember-bench quant [--rounds 3] [--k 4096] [--n 4096]\n");
            return 2;
        }
    }
    if (rounds < 1) rounds = 1;
    if (k < 32 || k % 32 || n < 1) {
        fprintf(stderr, "ember-bench quant: k must be a positive multiple of 32\n");
        return 2;
    }
    em_device cpu;
    TRY(em_device_parse("cpu", &cpu));
    const int threads = pool_threads();
    char model[160], isa[256];
    cpu_model(model, sizeof model);
    em_tensor *w;
    TRY(em_rand_uniform((int64_t[]){n, k}, 2, EM_F32, -1.0, 1.0, 7, cpu, &w)); /* opens cpu */
    cpu_isa_describe(isa, sizeof isa);
    const char *ct = getenv("OPENBLAS_CORETYPE");
    printf("ember-bench quant: y = x @ W^T, x f32 [m, %lld], W [%lld, %lld]; best of each side's "
           "repetitions over %d interleaved rounds\n",
           (long long)k, (long long)n, (long long)k, rounds);
    printf("CPU: %s; %d thread(s) (ember's pool and OpenBLAS)\n", model, threads);
    printf("cpu backend ISA: %s; qmatmul level: %s\n", isa,
           cpu_quant_level_name(cpu_quant_level()));
    printf("OPENBLAS_CORETYPE=%s; OpenBLAS kernel: %s\n", ct ? ct : "(unset)",
           openblas_get_corename());

    const em_quant_scheme q8 = {.storage = EM_Q8, .kind = EM_QK_BLOCK, .scale_dtype = EM_F16};
    const em_quant_scheme q4 = {.storage = EM_Q4, .kind = EM_QK_BLOCK, .scale_dtype = EM_F16};
    em_tensor *w8, *w4, *w8t, *w4t;
    TRY(em_quantize_as(w, &q8, &w8));
    TRY(em_quantize_as(w, &q4, &w4));
    TRY(em_transpose(w8, 0, 1, &w8t));
    TRY(em_transpose(w4, 0, 1, &w4t));
    float *wf = malloc((size_t)(n * k) * sizeof *wf);
    TRY(em_tensor_to_data(w, wf, (size_t)(n * k) * sizeof *wf));

    const int64_t ms[] = {1, 8, 64, 512};
    shape_result res[4];
    for (int mi = 0; mi < 4; mi++) {
        const int64_t m = ms[mi];
        em_tensor *x;
        TRY(em_rand_uniform((int64_t[]){m, k}, 2, EM_F32, -1.0, 1.0, 11 + (uint64_t)m, cpu, &x));
        float *xf = malloc((size_t)(m * k) * sizeof *xf), *yf = malloc((size_t)(m * n) * sizeof *yf);
        TRY(em_tensor_to_data(x, xf, (size_t)(m * k) * sizeof *xf));
        /* repetitions: about 0.3 s of sgemm a round at 100 GFLOP/s, at least 3 */
        int reps = (int)(3e10 / (2.0 * (double)(m * n * k)));
        if (reps < 3) reps = 3;
        if (reps > 200) reps = 200;
        res[mi] = (shape_result){1e30, 1e30, 1e30};
        for (int r = 0; r < rounds; r++) {
            settle(threads);
            double t = time_sgemm(m, n, k, xf, wf, yf, reps);
            if (t < res[mi].sgemm) res[mi].sgemm = t;
            settle(1);
            t = time_ember(x, w8t, reps);
            if (t < res[mi].q8) res[mi].q8 = t;
            t = time_ember(x, w4t, reps);
            if (t < res[mi].q4) res[mi].q4 = t;
        }
        free(xf), free(yf);
        em_tensor_release(x);
    }
    int plevel;
    const double peak = int8_peak(threads, &plevel);

    printf("\n%6s %12s %12s %12s %10s %10s %14s\n", "m", "sgemm ms", "q8 ms", "q4 ms",
           "q8 ratio", "q4 ratio", "q8 GMAC/s");
    for (int mi = 0; mi < 4; mi++) {
        const double macs = (double)ms[mi] * (double)n * (double)k;
        printf("%6lld %12.3f %12.3f %12.3f %9.2fx %9.2fx %14.1f\n", (long long)ms[mi],
               res[mi].sgemm * 1e3, res[mi].q8 * 1e3, res[mi].q4 * 1e3,
               res[mi].sgemm / res[mi].q8, res[mi].sgemm / res[mi].q4, macs / res[mi].q8 * 1e-9);
    }
    printf("(ratio = sgemm time / ember time: > 1 means ember faster; sgemm at m = 512: %.1f "
           "GFLOP/s)\n", 2.0 * 512 * (double)n * (double)k / res[3].sgemm * 1e-9);
    if (peak > 0) {
        const double macs = 512.0 * (double)n * (double)k;
        printf("int8 peak (measured: a register-only %s vpdpbusd loop on %d thread(s)): %.1f "
               "GMAC/s; m = 512 reaches %.1f%% of it with q8 (%.1f%% with q4)\n",
               plevel == CPU_QL_AVX512VNNI ? "512-bit" : "256-bit", threads, peak * 1e-9,
               100.0 * macs / res[3].q8 / peak, 100.0 * macs / res[3].q4 / peak);
    } else {
        printf("int8 peak: this CPU has no VNNI (not measured)\n");
    }
    printf("goals (int8): >= 3x at m = 1 (%s), >= 1.5x at m = 512 (%s)\n",
           res[0].sgemm / res[0].q8 >= 3 ? "met" : "missed",
           res[3].sgemm / res[3].q8 >= 1.5 ? "met" : "missed");
    free(wf);
    em_tensor_release(w), em_tensor_release(w8), em_tensor_release(w4), em_tensor_release(w8t),
        em_tensor_release(w4t);
    return 0;
}
#else
int bench_quant(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "ember-bench quant: this build has no OpenBLAS (the baseline)\n");
    return 1;
}
#endif
