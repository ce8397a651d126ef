/*
 * fuzz_graph_load.c — libFuzzer target: em_graph_load_buffer on arbitrary bytes (a graph file,
 * docs/graph-format.md: safetensors with the graph's JSON in its metadata). Any input must
 * give EM_OK or EM_ERR_IO with a message "em_graph_load: buffer: ..."; never a crash, a leak or
 * undefined behaviour. A graph that loads is prepared on ref and run once on zero-filled inputs
 * of its declared dtypes and shapes, and its states are read back: whatever the loader lets
 * through, the replay's checks (rs_exec_kernel) must refuse cleanly or run inside the buffers.
 *
 * Bounded work (a limit, not a memory-safety question; a file may ask for any amount of memory
 * and compute, as an eager program may): a graph is run only when its buffers hold at most
 * 16 MiB in all, its inputs at most 1 MiB, it has at most 4096 steps, every kernel's views and
 * every output and state at most 2^16 elements, pool windows and conv strides / dilations at
 * most 64.
 *
 * Mutations: a byte that a mutation inserts into or deletes from the header breaks its length,
 * and the file is refused before the graph is read; so three mutations in four are made to the
 * graph's JSON itself (the "ember.graph" string of __metadata__), and the file is written again
 * around it with the header's new length. The fourth mutates the file's bytes as they are.
 *
 * Seeds: tests/fuzz/corpus/graph_load, written by em_graph_save from the graphs of
 * tests/unit/test_graph_file.c (EMBER_GRAPH_SEEDS=DIR test_graph_file writes them to DIR).
 *
 * Build: cmake -DEMBER_BUILD_FUZZ=ON -DCMAKE_C_COMPILER=clang; run:
 *   fuzz_graph_load -max_total_time=20 NEW_CORPUS_DIR tests/fuzz/corpus/graph_load
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "ember/ember.h"
#include "ember/graph.h"
#include "graph/graph_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);

#define FZ_MAX_ELEMS (1 << 16)

static bool fz_small(const rw_view *v) {
    int64_t n = 1;
    for (int d = 0; d < v->rank; d++) {
        if (v->shape[d] > FZ_MAX_ELEMS) return false;
        n *= v->shape[d];
        if (n > FZ_MAX_ELEMS) return false;
    }
    return true;
}

/* Whether running g stays within the bounds above. */
static bool fz_bounded(const em_graph *g) {
    uint64_t bytes = 0;
    for (uint32_t b = 0; b < g->nbufs; b++) {
        bytes += g->bufs[b].bytes;
        if (bytes > ((uint64_t)16 << 20)) return false;
    }
    if (g->nsteps > 4096) return false;
    for (uint64_t i = 0; i < g->nsteps; i++) {
        const rw_kernel *k = &g->steps[i].k;
        if (g->steps[i].type != GR_KERNEL && g->steps[i].type != GR_ALT) continue;
        for (int v = 0; v < RW_MAX_VIEWS; v++)
            if ((k->mask >> v & 1u) && !fz_small(&k->views[v])) return false;
        if (k->slot >= RW_K_CONV2D && k->slot <= RW_K_AVG_POOL2D_BACKWARD &&
            k->slot != RW_K_ADAPTIVE_AVG_POOL2D)
            for (int j = 0; j < 8; j++)
                if (k->ints[j] > 64) return false;
    }
    for (int i = 0; i < g->noutputs; i++)
        if (!fz_small(&g->outputs[i].view)) return false;
    for (int i = 0; i < g->nstates; i++)
        if (!fz_small(&g->states[i].view)) return false;
    return true;
}

/* Prepares g on ref, runs it once on zero-filled inputs, reads its states back. */
static void fz_run(const em_graph *g) {
    const em_device ref = {EM_BACKEND_REF, 0, false, EM_CKPT_NONE};
    const int ni = em_graph_input_count(g), no = em_graph_output_count(g);
    em_tensor **in = calloc((size_t)ni + 1, sizeof *in);
    em_tensor **out = calloc((size_t)no + 1, sizeof *out);
    if (!in || !out) abort();
    size_t total = 0;
    bool ok = true;
    for (int i = 0; i < ni && ok; i++) {
        em_dtype dt;
        int64_t shape[EM_MAX_RANK];
        int rank = 0;
        if (em_graph_input_info(g, i, NULL, &dt, shape, &rank) != EM_OK) abort();
        int64_t n = 1;
        for (int d = 0; d < rank; d++) n *= shape[d]; /* bounded: the buffer holds them */
        total += (size_t)n * em_dtype_size(dt);
        ok = total <= ((size_t)1 << 20) &&
             em_zeros(shape, rank, dt, ref, &in[i]) == EM_OK;
    }
    em_exec *e = NULL;
    if (ok && em_graph_prepare(g, ref, &e) == EM_OK) {
        em_status s = em_exec_run(e, (const em_tensor *const *)in, ni, out, no);
        if (s != EM_OK && em_last_error()[0] == '\0') abort(); /* a refusal says why */
        for (int i = 0; s == EM_OK && i < no; i++)
            if (!out[i]) abort();
        for (int i = 0; i < g->nstates; i++) {
            em_tensor *t = NULL;
            if (em_exec_state(e, g->states[i].name, &t) == EM_OK) em_tensor_release(t);
        }
        em_exec_release(e);
    }
    for (int i = 0; i < ni; i++) em_tensor_release(in[i]);
    for (int i = 0; i < no; i++) em_tensor_release(out[i]);
    free(in);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    em_graph *g = NULL;
    em_clear_error();
    em_status s = em_graph_load_buffer(data, size, &g);
    if (s != EM_OK) {
        if (g != NULL || s != EM_ERR_IO ||
            strncmp(em_last_error(), "em_graph_load: buffer: ", 23) != 0)
            abort();
        return 0;
    }
    if (g == NULL) abort();
    if (fz_bounded(g)) fz_run(g);
    /* what ember-graph shows of a loaded file: the counts, the summary, the digraph */
    em_graph_stats st;
    if (em_graph_stats_of(g, &st) != EM_OK) abort();
    FILE *sink = fopen("/dev/null", "w");
    if (sink) {
        (void)em_graph_write_summary(g, sink);
        fclose(sink);
    }
    (void)em_graph_write_dot(g, "/dev/null");
    em_graph_release(g);
    return 0;
}

/* The graph's JSON of a file that has one, mutated; the file is written again around it (see
 * the top). Anything else: the bytes as they are. */
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
    if (seed % 4 == 0 || size < 8) return LLVMFuzzerMutate(data, size, max_size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | data[i];
    if (hlen > size - 8) return LLVMFuzzerMutate(data, size, max_size);
    char *text = malloc((size_t)hlen + 1);
    if (!text) abort();
    memcpy(text, data + 8, (size_t)hlen);
    text[hlen] = '\0';
    cJSON *root = cJSON_Parse(text);
    free(text);
    cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
    cJSON *graph = cJSON_GetObjectItemCaseSensitive(meta, "ember.graph");
    if (!cJSON_IsString(graph) || !graph->valuestring) {
        cJSON_Delete(root);
        return LLVMFuzzerMutate(data, size, max_size);
    }
    const size_t glen = strlen(graph->valuestring), cap = glen + 64;
    char *g = malloc(cap + 1);
    if (!g) abort();
    memcpy(g, graph->valuestring, glen);
    g[LLVMFuzzerMutate((uint8_t *)g, glen, cap)] = '\0'; /* cut at a NUL it may insert */
    cJSON *ng = cJSON_CreateString(g);
    free(g);
    if (!ng || !cJSON_ReplaceItemInObjectCaseSensitive(meta, "ember.graph", ng)) abort();
    char *h = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!h) abort();
    const size_t nh = strlen(h), nd = size - 8 - (size_t)hlen;
    if (8 + nh + nd > max_size) {
        cJSON_free(h);
        return size; /* unchanged: the next mutation tries again */
    }
    uint8_t *tail = malloc(nd ? nd : 1);
    if (!tail) abort();
    memcpy(tail, data + 8 + hlen, nd);
    for (int i = 0; i < 8; i++) data[i] = (uint8_t)((uint64_t)nh >> (8 * i));
    memcpy(data + 8, h, nh);
    memcpy(data + 8 + nh, tail, nd);
    free(tail);
    cJSON_free(h);
    return 8 + nh + nd;
}
