/*
 * nn_golden.h — the golden arrays of the nn tests (test_nn.c, test_nn_models.c): a text file
 * under tests/nn written by its generator (gen_nn.py, gen_models.py) with PyTorch, each array
 * a line "name n v1 ... vn" ('#' starts a comment line). Define NN_GOLDEN_FILE (the file's
 * name in tests/nn) before including; load_golden / free_golden are the group's setup and
 * teardown, gget(name) finds an array (failing the test when it is missing).
 */
#ifndef EMBER_NN_GOLDEN_H
#define EMBER_NN_GOLDEN_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct garr {
    char name[64];
    int64_t n;
    double *v;
} garr;

static garr *G;
static size_t NG;

static inline int load_golden(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s", __FILE__);
    char *slash = strrchr(path, '/');
    if (!slash) return -1;
    *slash = '\0'; /* .../tests/unit */
    slash = strrchr(path, '/');
    if (!slash) return -1;
    snprintf(slash, sizeof path - (size_t)(slash - path), "/nn/%s", NN_GOLDEN_FILE);
    FILE *f = fopen(path, "r");
    if (!f) {
        print_error("cannot open %s\n", path);
        return -1;
    }
    size_t cap = 0;
    char name[64];
    int c;
    while ((c = fgetc(f)) != EOF) {
        if (c == '#') {
            while ((c = fgetc(f)) != EOF && c != '\n') {}
            continue;
        }
        if (c == '\n') continue;
        ungetc(c, f);
        long long n;
        if (fscanf(f, "%63s %lld", name, &n) != 2) break;
        if (NG == cap) {
            cap = cap ? 2 * cap : 64;
            G = realloc(G, cap * sizeof *G);
        }
        garr *a = &G[NG++];
        snprintf(a->name, sizeof a->name, "%s", name);
        a->n = n;
        a->v = malloc((size_t)(n ? n : 1) * sizeof(double));
        for (long long i = 0; i < n; i++)
            if (fscanf(f, "%lf", &a->v[i]) != 1) {
                fclose(f);
                return -1;
            }
    }
    fclose(f);
    return NG > 0 ? 0 : -1;
}

static inline int free_golden(void **state) {
    (void)state;
    for (size_t i = 0; i < NG; i++) free(G[i].v);
    free(G);
    return 0;
}

static inline const garr *gget(const char *name) {
    for (size_t i = 0; i < NG; i++)
        if (strcmp(G[i].name, name) == 0) return &G[i];
    fail_msg("golden array %s missing", name);
    return NULL;
}

#endif
