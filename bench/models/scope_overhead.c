/*
 * scope_overhead.c — what a tensor scope (em_scope_begin / em_scope_end) costs on the tiny-op
 * path: N em_add calls on [4] f32 tensors, as
 *   plain       add, release                       (the baseline: no scope)
 *   in_scope    add, release, inside one open scope (a push at creation, a clear at release)
 *   arena_1000  add, the result kept in an array released every 1000 adds (what a program
 *               without scopes does to drop its intermediates at the end of a step)
 *   scope_1000  add only; a scope every 1000 adds releases them (compare with arena_1000)
 *   scope_each  begin, add, end for every add       (the worst case)
 * Rounds interleave the five; each prints its median ns per add and the ratio to plain
 * measured in the same run.
 *
 * Usage: ember-scope-bench [--n N] [--rounds R] [--device D]
 * Output: "scope mode=in_scope n=N ns_per_add=X ratio_vs_plain=Y"
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ember/ember.h>

#define CK(call)                                                                              \
    do {                                                                                      \
        if ((call) != EM_OK) {                                                                \
            fprintf(stderr, "%s: %s\n", #call, em_last_error());                              \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

enum { PLAIN, IN_SCOPE, ARENA_1000, SCOPE_1000, SCOPE_EACH, NMODES };
static const char *const names[NMODES] = {"plain", "in_scope", "arena_1000", "scope_1000",
                                          "scope_each"};

static double run(int mode, long n, const em_tensor *a, const em_tensor *b) {
    double t0 = now_s();
    em_tensor *c;
    switch (mode) {
    case PLAIN:
        for (long i = 0; i < n; i++) {
            CK(em_add(a, b, &c));
            em_tensor_release(c);
        }
        break;
    case IN_SCOPE:
        CK(em_scope_begin());
        for (long i = 0; i < n; i++) {
            CK(em_add(a, b, &c));
            em_tensor_release(c);
        }
        CK(em_scope_end());
        break;
    case ARENA_1000: {
        em_tensor *kept[1000];
        for (long i = 0; i < n; i += 1000) {
            int k = 0;
            for (long j = i; j < i + 1000 && j < n; j++) CK(em_add(a, b, &kept[k++]));
            while (k > 0) em_tensor_release(kept[--k]);
        }
        break;
    }
    case SCOPE_1000:
        for (long i = 0; i < n; i += 1000) {
            CK(em_scope_begin());
            for (long j = i; j < i + 1000 && j < n; j++) CK(em_add(a, b, &c));
            CK(em_scope_end());
        }
        break;
    case SCOPE_EACH:
        for (long i = 0; i < n; i++) {
            CK(em_scope_begin());
            CK(em_add(a, b, &c));
            CK(em_scope_end());
        }
        break;
    }
    return (now_s() - t0) / (double)n * 1e9;
}

static int cmp(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int main(int argc, char **argv) {
    long n = 1000000;
    int rounds = 7;
    const char *devname = "cpu";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--n")) n = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--device")) devname = argv[i + 1];
    }
    if (rounds < 1 || rounds > 99 || n < 1) return 2;
    em_device dev;
    CK(em_device_parse(devname, &dev));
    const float va[4] = {1, 2, 3, 4}, vb[4] = {4, 3, 2, 1};
    const int64_t shape[1] = {4};
    em_tensor *a, *b;
    CK(em_tensor_from_data(va, EM_F32, shape, 1, dev, &a));
    CK(em_tensor_from_data(vb, EM_F32, shape, 1, dev, &b));
    double t[NMODES][99];
    for (int m = 0; m < NMODES; m++) run(m, n / 10 + 1, a, b); /* warm up */
    for (int r = 0; r < rounds; r++)
        for (int m = 0; m < NMODES; m++) t[m][r] = run(m, n, a, b);
    double med[NMODES];
    for (int m = 0; m < NMODES; m++) {
        qsort(t[m], (size_t)rounds, sizeof(double), cmp);
        med[m] = t[m][rounds / 2];
    }
    for (int m = 0; m < NMODES; m++)
        printf("scope mode=%s device=%s n=%ld rounds=%d ns_per_add=%.1f ratio_vs_plain=%.3f%s\n",
               names[m], devname, n, rounds, med[m], med[m] / med[PLAIN],
               "");
    printf("scope scope_1000/arena_1000=%.3f\n", med[SCOPE_1000] / med[ARENA_1000]);
    em_tensor_release(a);
    em_tensor_release(b);
    return 0;
}
