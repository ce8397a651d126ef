/*
 * test_graph_file.c — a captured graph's file (em_graph_save, em_graph_load,
 * em_graph_load_buffer; docs/graph-format.md): a graph with parameters, a view output,
 * non-finite and inexact doubles and a 64-bit seed saved, loaded and replayed on ref (and cpu)
 * bit for bit against the same program run eagerly; the parameters visible by name to a plain
 * safetensors reader; a loaded graph saved again byte for byte; a graph file written by hand;
 * and the refusals: every truncation of a file, tampered JSON (ids out of range, huge sizes,
 * unknown slots, broken step order, misplaced inputs), a newer format version (named in the
 * message), missing metadata, a plain safetensors file, saving an open capture.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ember/ember.h"
#include "ember/graph.h"
#include "ember/io.h"
#include "ember/nn.h"

#define OK(call)                                                                             \
    do {                                                                                     \
        em_status s_ = (call);                                                               \
        if (s_ != EM_OK)                                                                     \
            fail_msg("%s:%d: %s: %s: %s", __FILE__, __LINE__, #call, em_status_name(s_),     \
                     em_last_error());                                                       \
    } while (0)

/* A call that must fail with `want` and a message containing `part`. */
#define FAILS(want, part, call)                                                              \
    do {                                                                                     \
        em_clear_error();                                                                    \
        em_status s_ = (call);                                                               \
        if (s_ != (want) || strstr(em_last_error(), (part)) == NULL)                         \
            fail_msg("%s:%d: %s: expected %s with \"%s\", got %s: \"%s\"", __FILE__,         \
                     __LINE__, #call, em_status_name(want), (part), em_status_name(s_),      \
                     em_last_error());                                                       \
    } while (0)

static char tmpdir[64];

static int setup_dir(void **state) {
    (void)state;
    strcpy(tmpdir, "/tmp/ember-test-graph-file-XXXXXX");
    return mkdtemp(tmpdir) == NULL ? -1 : 0;
}

static int remove_dir(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *tmp_path(const char *name) {
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static em_device dev_of(const char *name) {
    em_device d;
    OK(em_device_parse(name, &d));
    return d;
}

static uint8_t *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n >= 0);
    rewind(f);
    uint8_t *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static em_tensor *from(const void *data, em_dtype dt, const int64_t *shape, int rank,
                       em_device d) {
    em_tensor *t = NULL;
    OK(em_tensor_from_data(data, dt, shape, rank, d, &t));
    return t;
}

/* With EMBER_GRAPH_SEEDS=DIR in the environment, the graphs the tests save are also written
 * to DIR/<name>: the seeds of tests/fuzz/corpus/graph_load. */
static void seed(const em_graph *g, const char *name) {
    const char *dir = getenv("EMBER_GRAPH_SEEDS");
    if (!dir) return;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    OK(em_graph_save(g, p));
}

static void seed_bytes(const void *data, size_t len, const char *name) {
    const char *dir = getenv("EMBER_GRAPH_SEEDS");
    if (!dir) return;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    write_file(p, data, len);
}

/* Asserts that a and b have the same shape and the same bits (f32). */
static void same_bits(const em_tensor *a, const em_tensor *b) {
    assert_int_equal(em_tensor_rank(a), em_tensor_rank(b));
    for (int d = 0; d < em_tensor_rank(a); d++)
        assert_int_equal(em_tensor_shape(a)[d], em_tensor_shape(b)[d]);
    size_t n = (size_t)em_tensor_numel(a);
    float x[64], y[64];
    assert_true(n <= 64);
    OK(em_tensor_to_data(a, x, n * sizeof(float)));
    OK(em_tensor_to_data(b, y, n * sizeof(float)));
    for (size_t i = 0; i < n; i++)
        if (memcmp(&x[i], &y[i], sizeof(float)) != 0)
            fail_msg("element %zu: %.9g and %.9g differ", i, (double)x[i], (double)y[i]);
}

/* ---- the graph: y = relu(dropout(clamp(x @ w + b, -inf, 0.3)))^T, and h = x @ w ---------- */

static const float W[12] = {0.5f, -0.25f, 0.125f, 1.0f, -0.5f, 0.75f,
                            0.3f, 0.2f,   -0.1f,  0.6f, -0.7f, 0.05f};
static const float B[3] = {0.1f, -0.2f, 0.05f};
static const int64_t WS[2] = {4, 3}, BS[1] = {3}, XS[2] = {5, 4};
static const uint64_t SEED = 0xDEADBEEFCAFEF00Dull; /* above 2^53: written as a string */

/* The forward on x, w, b: *y (a transposed view) and *h, new references. */
static void forward(const em_tensor *x, const em_tensor *w, const em_tensor *b, em_tensor **y,
                    em_tensor **h) {
    em_tensor *hb = NULL, *c = NULL, *d = NULL, *r = NULL;
    OK(em_matmul(x, w, h));
    OK(em_add(*h, b, &hb));
    OK(em_clamp(hb, -INFINITY, 0.3, &c));
    OK(em_dropout(c, 0.25, true, SEED, &d));
    OK(em_relu(d, &r));
    OK(em_transpose(r, 0, 1, y));
    em_tensor_release(hb);
    em_tensor_release(c);
    em_tensor_release(d);
    em_tensor_release(r);
}

/* Records the graph (inputs "x", outputs "y" and "h", states "w" and "b"). */
static em_graph *record(void) {
    em_device cap = dev_of("capture");
    em_graph *g = NULL;
    OK(em_graph_begin(&g));
    em_tensor *w = from(W, EM_F32, WS, 2, cap), *b = from(B, EM_F32, BS, 1, cap), *x = NULL;
    em_tensor *y = NULL, *h = NULL;
    OK(em_graph_input(g, "x", EM_F32, XS, 2, cap, &x));
    forward(x, w, b, &y, &h);
    OK(em_graph_output(g, "y", y));
    OK(em_graph_output(g, "h", h));
    OK(em_graph_name(g, "w", w));
    OK(em_graph_name(g, "b", b));
    OK(em_graph_end(g));
    em_tensor *all[] = {w, b, x, y, h};
    for (size_t i = 0; i < 5; i++) em_tensor_release(all[i]);
    return g;
}

static void input_values(float *x) {
    for (int i = 0; i < 20; i++) x[i] = sinf(0.37f * (float)(i + 3)) * 1.5f;
}

/* Replays g on dev and checks it against the eager forward there, and the states. */
static void check_replay(const em_graph *g, em_device dev) {
    float xv[20];
    input_values(xv);
    em_tensor *x = from(xv, EM_F32, XS, 2, dev), *w = from(W, EM_F32, WS, 2, dev);
    em_tensor *b = from(B, EM_F32, BS, 1, dev), *y = NULL, *h = NULL;
    forward(x, w, b, &y, &h);
    em_exec *e = NULL;
    OK(em_graph_prepare(g, dev, &e));
    for (int run = 0; run < 2; run++) {
        em_tensor *out[2] = {NULL, NULL};
        const em_tensor *in[1] = {x};
        OK(em_exec_run(e, in, 1, out, 2));
        same_bits(y, out[0]);
        same_bits(h, out[1]);
        em_tensor_release(out[0]);
        em_tensor_release(out[1]);
    }
    em_tensor *ws = NULL;
    OK(em_exec_state(e, "w", &ws));
    same_bits(ws, w);
    em_tensor_release(ws);
    em_exec_release(e);
    em_tensor *all[] = {x, w, b, y, h};
    for (size_t i = 0; i < 5; i++) em_tensor_release(all[i]);
}

static void test_round_trip(void **state) {
    (void)state;
    em_graph *g = record();
    const char *path = tmp_path("g.safetensors");
    OK(em_graph_save(g, path));
    seed(g, "forward");
    assert_int_equal(access(tmp_path("g.safetensors.tmp"), F_OK), -1); /* renamed */
    em_graph *l = NULL;
    OK(em_graph_load(path, &l));
    /* what it declares */
    assert_int_equal(em_graph_input_count(l), 1);
    assert_int_equal(em_graph_output_count(l), 2);
    assert_int_equal(em_graph_state_count(l), 2);
    assert_int_equal(em_graph_kernel_count(l), em_graph_kernel_count(g));
    const char *name = NULL;
    em_dtype dt;
    int64_t shape[EM_MAX_RANK];
    int rank = 0;
    OK(em_graph_output_info(l, 0, &name, &dt, shape, &rank));
    assert_string_equal(name, "y");
    assert_int_equal(dt, EM_F32);
    assert_int_equal(rank, 2);
    assert_int_equal(shape[0], 3);
    assert_int_equal(shape[1], 5);
    OK(em_graph_state_info(l, 1, &name, NULL, NULL, NULL));
    assert_string_equal(name, "b");
    /* the replay is the eager program, bit for bit */
    check_replay(l, dev_of("ref"));
    em_device cpu;
    if (em_device_parse("cpu", &cpu) == EM_OK) check_replay(l, cpu);
    /* saved again, the same bytes */
    const char *again = tmp_path("again.safetensors");
    OK(em_graph_save(l, again));
    size_t n1 = 0, n2 = 0;
    uint8_t *a = read_file(path, &n1), *b = read_file(again, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, n1);
    /* the same bytes from memory */
    em_graph *m = NULL;
    OK(em_graph_load_buffer(a, n1, &m));
    check_replay(m, dev_of("ref"));
    free(a);
    free(b);
    em_graph_release(m);
    em_graph_release(l);
    em_graph_release(g);
}

/* The parameters are tensors of the file under their state names, for any safetensors
 * reader; the graph is in the metadata. */
static void test_parameters_by_name(void **state) {
    (void)state;
    em_graph *g = record();
    const char *path = tmp_path("p.safetensors");
    OK(em_graph_save(g, path));
    em_tensor_map *map = NULL;
    OK(em_safetensors_load(path, dev_of("ref"), &map));
    assert_int_equal(em_tensor_map_size(map), 2);
    em_tensor *w = NULL, *b = NULL;
    OK(em_tensor_map_get(map, "w", &w));
    OK(em_tensor_map_get(map, "b", &b));
    assert_int_equal(em_tensor_dtype(w), EM_F32);
    assert_int_equal(em_tensor_rank(w), 2);
    assert_int_equal(em_tensor_shape(w)[0], 4);
    assert_int_equal(em_tensor_shape(w)[1], 3);
    float v[12];
    OK(em_tensor_to_data(w, v, sizeof v));
    assert_memory_equal(v, W, sizeof W);
    OK(em_tensor_to_data(b, v, sizeof B));
    assert_memory_equal(v, B, sizeof B);
    em_tensor_release(w);
    em_tensor_release(b);
    em_tensor_map_release(map);
    /* the metadata, as a reader sees it */
    size_t n = 0;
    uint8_t *f = read_file(path, &n);
    f[n - 1] = 0;
    assert_non_null(strstr((const char *)f + 8, "\"ember.graph.version\":\"1\""));
    assert_non_null(strstr((const char *)f + 8, "\"ember.graph\":\"{"));
    free(f);
    em_graph_release(g);
}

/* ---- files written by hand ------------------------------------------------------------------- */

/* A graph file in memory: json (the graph) under "ember.graph", version under
 * "ember.graph.version" (NULL: none), and one u8 tensor "blob.0" of nblob bytes (0: none). */
static uint8_t *make_file(const char *json, const char *version, const uint8_t *blob,
                          size_t nblob, size_t *len) {
    size_t cap = strlen(json) * 2 + 512 + nblob;
    char *h = malloc(cap);
    assert_non_null(h);
    size_t k = 0;
    k += (size_t)snprintf(h + k, cap - k, "{\"__metadata__\":{");
    if (version) k += (size_t)snprintf(h + k, cap - k, "\"ember.graph.version\":\"%s\",", version);
    k += (size_t)snprintf(h + k, cap - k, "\"ember.graph\":\"");
    for (const char *p = json; *p; p++) {
        if (*p == '"' || *p == '\\') h[k++] = '\\';
        h[k++] = *p;
    }
    k += (size_t)snprintf(h + k, cap - k, "\"}");
    if (nblob)
        k += (size_t)snprintf(h + k, cap - k,
                              ",\"blob.0\":{\"dtype\":\"U8\",\"shape\":[%zu],\"data_offsets\":[0,%zu]}",
                              nblob, nblob);
    k += (size_t)snprintf(h + k, cap - k, "}");
    uint8_t *f = malloc(8 + k + nblob);
    assert_non_null(f);
    for (int i = 0; i < 8; i++) f[i] = (uint8_t)((uint64_t)k >> (8 * i));
    memcpy(f + 8, h, k);
    if (nblob) memcpy(f + 8 + k, blob, nblob);
    free(h);
    *len = 8 + k + nblob;
    return f;
}

/* y = x + c + 1.5 on f32 [2], where c is a constant the setup writes (blob.0, 8 bytes): the
 * binary and binary_scalar kernels' "sub" 0 is EM_BIN_ADD. */
static const char HAND[] =
    "{\"version\":1,"
    "\"buffers\":[{\"bytes\":8,\"setup\":true},{\"bytes\":8,\"setup\":false,\"input\":0},"
    "{\"bytes\":8,\"setup\":false},{\"bytes\":8,\"setup\":false}],"
    "\"setup\":[{\"type\":\"alloc\",\"buf\":0},"
    "{\"type\":\"write\",\"buf\":0,\"offset\":0,\"blob\":\"blob.0\"}],"
    "\"step\":[{\"type\":\"alloc\",\"buf\":1},{\"type\":\"alloc\",\"buf\":2},"
    "{\"type\":\"kernel\",\"slot\":\"binary\",\"sub\":0,"
    "\"views\":[[2,\"f32\",[2],[1],0],[1,\"f32\",[2],[1],0],[0,\"f32\",[2],[1],0]]},"
    "{\"type\":\"alloc\",\"buf\":3},"
    "{\"type\":\"kernel\",\"slot\":\"binary_scalar\",\"sub\":0,"
    "\"views\":[[3,\"f32\",[2],[1],0],[2,\"f32\",[2],[1],0]],\"doubles\":[1.5]},"
    "{\"type\":\"free\",\"buf\":2}],"
    "\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"view\":[1,\"f32\",[2],[1],0]}],"
    "\"outputs\":[{\"name\":\"y\",\"dtype\":\"f32\",\"view\":[3,\"f32\",[2],[1],0]}],"
    "\"states\":[{\"name\":\"c\",\"dtype\":\"f32\",\"view\":[0,\"f32\",[2],[1],0]}]}";

static const float HAND_C[2] = {10.0f, 20.0f};

/* src with the first `from` replaced by `to` (which must be there). */
static char *replaced(const char *src, const char *from, const char *to) {
    const char *at = strstr(src, from);
    if (!at) fail_msg("'%s' is not in the hand-written graph", from);
    size_t n = strlen(src) - strlen(from) + strlen(to) + 1;
    char *s = malloc(n);
    assert_non_null(s);
    size_t pre = (size_t)(at - src);
    memcpy(s, src, pre);
    strcpy(s + pre, to);
    strcat(s, at + strlen(from));
    return s;
}

static char *edited(const char *from, const char *to) { return replaced(HAND, from, to); }

/* Runs graph g on x = {1, 2} on ref; returns y. */
static void run_hand(const em_graph *g, float *y) {
    em_device ref = dev_of("ref");
    const float xv[2] = {1.0f, 2.0f};
    const int64_t s[1] = {2};
    em_tensor *x = from(xv, EM_F32, s, 1, ref), *out[1] = {NULL};
    const em_tensor *in[1] = {x};
    OK(em_graph_run(g, ref, in, 1, out, 1));
    OK(em_tensor_to_data(out[0], y, 2 * sizeof(float)));
    em_tensor_release(out[0]);
    em_tensor_release(x);
}

static em_status load_json(const char *json, const char *version, em_graph **g) {
    size_t len = 0;
    uint8_t *f = make_file(json, version, (const uint8_t *)HAND_C, sizeof HAND_C, &len);
    em_status s = em_graph_load_buffer(f, len, g);
    free(f);
    return s;
}

static void test_hand_written(void **state) {
    (void)state;
    em_graph *g = NULL;
    OK(load_json(HAND, "1", &g));
    size_t len = 0;
    uint8_t *f = make_file(HAND, "1", (const uint8_t *)HAND_C, sizeof HAND_C, &len);
    seed_bytes(f, len, "hand");
    free(f);
    float y[2];
    run_hand(g, y);
    assert_true(y[0] == 12.5f && y[1] == 23.5f);
    em_graph_release(g);
    /* doubles and ints in every form the format allows */
    static const struct {
        const char *to;
        float y0;
    } forms[] = {
        {"\"doubles\":[\"0x3ff0000000000000\"]", 12.0f}, /* 1.0 by its bits */
        {"\"doubles\":[\"-inf\"]", -INFINITY},
        {"\"doubles\":[\"nan\"]", NAN},
        {"\"doubles\":[2.5e0]", 13.5f},
    };
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        char *j = edited("\"doubles\":[1.5]", forms[i].to);
        OK(load_json(j, "1", &g));
        run_hand(g, y);
        if (isnan(forms[i].y0)) assert_true(isnan(y[0]));
        else assert_true(y[0] == forms[i].y0);
        em_graph_release(g);
        free(j);
    }
    char *j = edited("\"setup\":[{\"type\":\"alloc\",\"buf\":0}",
                     "\"setup\":[{\"type\":\"alloc\",\"buf\":\"0\",\"note\":\"ignored\"}");
    OK(load_json(j, "1", &g)); /* an integer as a string; a key it does not know */
    em_graph_release(g);
    free(j);
}

/* Each edit of HAND must be refused with EM_ERR_IO and a message containing `why`. */
static void test_hand_written_refused(void **state) {
    (void)state;
    static const struct {
        const char *from, *to, *why;
    } cases[] = {
        /* the JSON's shape */
        {"{\"version\":1,", "{\"version\":2,", "\"version\" is not 1"},
        {"\"buffers\":[", "\"buffers\":{\"a\":", "not valid JSON"},
        {"\"buffers\":[{", "\"bufers\":[{", "are not all arrays"},
        {"\"inputs\":[", "\"inputz\":[", "\"inputs\" is not an array"},
        {"\"step\":[{\"type\":\"alloc\",\"buf\":1}", "\"step\":[7", "step[0]: a step is an object"},
        {"\"type\":\"free\"", "\"type\":\"frees\"", "unknown step type \"frees\""},
        {"\"step\":[", "\"step\":[{\"type\":\"alt_end\"},", "step[0]: an alt_end without its alt"},
        {"\"setup\":[", "\"setup\":[{\"type\":\"alt\",\"slot\":\"fill\",\"views\":[[0,\"f32\",[2],[1],0]],"
                      "\"doubles\":[0]},", "setup[0]: views[0]: buffer 0 is not alive there"},
        {"{\"type\":\"write\"", "{\"type\":\"alt\",\"slot\":\"fill\",\"views\":[[0,\"f32\",[2],[1],0]],"
                                 "\"doubles\":[0]},{\"type\":\"write\"", "setup: an alt without its alt_end"},
        /* buffers */
        {"{\"bytes\":8,\"setup\":true}", "{\"bytes\":70368744177665,\"setup\":true}",
         "buffers[0]: \"bytes\" is not an integer in [0, 2^46]"},
        {"{\"bytes\":8,\"setup\":true}", "{\"bytes\":-8,\"setup\":true}", "buffers[0]: \"bytes\""},
        {"{\"bytes\":8,\"setup\":true}", "{\"bytes\":8.5,\"setup\":true}", "buffers[0]: \"bytes\""},
        {"{\"bytes\":8,\"setup\":true}", "{\"bytes\":\"1e3\",\"setup\":true}", "buffers[0]: \"bytes\""},
        {"{\"bytes\":8,\"setup\":true}", "{\"bytes\":8,\"setup\":1}", "\"setup\" is not true or false"},
        {"{\"bytes\":8,\"setup\":true}", "{\"bytes\":8,\"setup\":false}",
         "buffers[0]: \"setup\" is false, but its alloc is in the setup"},
        {"\"setup\":false,\"input\":0}", "\"setup\":false}", "buffers[1]: \"input\" does not match"},
        {"{\"bytes\":8,\"setup\":false}]", "{\"bytes\":8,\"setup\":false},{\"bytes\":8,\"setup\":false}]",
         "buffer 4 is never allocated"},
        /* step order */
        {"{\"type\":\"alloc\",\"buf\":2}", "{\"type\":\"alloc\",\"buf\":1}",
         "step[1]: buffer 1 is allocated a second time"},
        {"{\"type\":\"free\",\"buf\":2}", "{\"type\":\"free\",\"buf\":0},{\"type\":\"free\",\"buf\":0}",
         "buffer 0 is freed a second time"},
        {"\"step\":[{\"type\":\"alloc\",\"buf\":1},", "\"step\":[{\"type\":\"free\",\"buf\":1},",
         "buffer 1 is freed before it is allocated"},
        {"{\"type\":\"free\",\"buf\":2}", "{\"type\":\"free\",\"buf\":4}", "\"buf\" is not an index below the 4"},
        {"{\"type\":\"alloc\",\"buf\":3},", "{\"type\":\"free\",\"buf\":2},{\"type\":\"alloc\",\"buf\":3},",
         "step[5]: views[1]: buffer 2 is not alive there"},
        /* writes */
        {"\"blob\":\"blob.0\"", "\"blob\":\"blob.1\"", "the file has no tensor \"blob.1\""},
        {"\"offset\":0,\"blob\"", "\"offset\":1,\"blob\"", "8 bytes at offset 1 do not fit in buffer 0"},
        {"\"offset\":0,\"blob\"", "\"offset\":\"18446744073709551615\",\"blob\"", "\"offset\" is not"},
        {"\"offset\":0,\"blob\"", "\"offset\":-1,\"blob\"", "\"offset\" is not"},
        /* kernels */
        {"\"slot\":\"binary\"", "\"slot\":\"binary_x\"", "unknown kernel slot \"binary_x\""},
        {"\"slot\":\"binary\"", "\"slot\":7", "unknown kernel slot \"(not a string)\""},
        {"\"slot\":\"binary\",\"sub\":0", "\"slot\":\"binary\",\"sub\":99", "\"sub\" of binary"},
        {"\"slot\":\"binary\",\"sub\":0", "\"slot\":\"binary\"", "\"sub\" of binary"},
        {"\"slot\":\"binary\",\"sub\":0", "\"slot\":\"matmul\",\"sub\":1", "\"sub\" of matmul"},
        {"\"views\":[[2,", "\"views\":[null,[2,", "binary takes \"views\": an array of 3"},
        {"\"views\":[[2,\"f32\",[2],[1],0],[1,\"f32\",[2],[1],0],[0,\"f32\",[2],[1],0]]",
         "\"views\":\"none\"", "binary takes \"views\": an array of 3"},
        {"[2,\"f32\",[2],[1],0],[1,", "null,[1,", "step[2].views[0]: is null, but binary needs view 0"},
        {"[2,\"f32\",[2],[1],0],[1,", "[4,\"f32\",[2],[1],0],[1,", "step[2].views[0]: buffer is not an index below the 4"},
        {"[2,\"f32\",[2],[1],0],[1,", "[-1,\"f32\",[2],[1],0],[1,", "buffer is not an index"},
        {"[2,\"f32\",[2],[1],0],[1,", "[2,\"q8\",[2],[1],0],[1,", "dtype \"q8\" is not a dtype of a graph"},
        {"[2,\"f32\",[2],[1],0],[1,", "[2,\"f31\",[2],[1],0],[1,", "dtype \"f31\""},
        {"[2,\"f32\",[2],[1],0],[1,", "[2,\"f32\",[1,1,1,1,1,1,1,1,2],[1,1,1,1,1,1,1,1,1],0],[1,",
         "rank 9 exceeds 8"},
        {"[2,\"f32\",[2],[1],0],[1,", "[2,\"f32\",[2],[1,1],0],[1,", "2 strides for 1 dims"},
        {"[2,\"f32\",[2],[1],0],[1,", "[2,\"f32\",[-2],[1],0],[1,", "shape[0] is not a non-negative"},
        {"[2,\"f32\",[2],[1],0],[1,", "[2,\"f32\",[2],[1],-1],[1,", "offset is not a non-negative"},
        {"[2,\"f32\",[2],[1],0],[1,", "[2,\"f32\",[2],[1]],[1,", "a view is [buffer, dtype"},
        {"\"doubles\":[1.5]", "\"doubles\":[]", "binary_scalar takes 1 doubles"},
        {"\"doubles\":[1.5]", "\"doubles\":[1.5,2]", "binary_scalar takes 1 doubles"},
        {"\"doubles\":[1.5]", "\"doubles\":[\"1.5\"]", "doubles[0] is not a number"},
        {"\"doubles\":[1.5]", "\"doubles\":[\"0x3ff00000000000\"]", "doubles[0] is not a number"},
        {"\"doubles\":[1.5]", "\"doubles\":[1.5],\"ints\":[3]", "binary_scalar takes 0 ints"},
        /* named tensors */
        {"{\"name\":\"x\"", "{\"name\":\"x y\"", "inputs[0]: name is not 1..127 bytes"},
        {"{\"name\":\"y\"", "{\"name\":\"\"", "outputs[0]: name is not"},
        {"\"outputs\":[{\"name\":\"y\",\"dtype\":\"f32\",\"view\":[3,\"f32\",[2],[1],0]}]",
         "\"outputs\":[{\"name\":\"y\",\"dtype\":\"f32\",\"view\":[3,\"f32\",[2],[1],0]},"
         "{\"name\":\"y\",\"dtype\":\"f32\",\"view\":[2,\"f32\",[2],[1],0]}]",
         "two outputs are named 'y'"},
        {"{\"name\":\"y\",\"dtype\":\"f32\"", "{\"name\":\"y\",\"dtype\":\"i32\"",
         "outputs[0] ('y'): dtype i32, but its view is f32"},
        {"{\"name\":\"y\",\"dtype\":\"f32\"", "{\"name\":\"y\",\"dtype\":\"q4\"",
         "outputs[0] ('y'): dtype is not a dtype of a graph"},
        {"\"view\":[3,\"f32\",[2],[1],0]", "\"view\":[3,\"f32\",[2],[1],1]",
         "outputs[0] ('y'): its view does not lie inside buffer 3"},
        {"\"view\":[3,\"f32\",[2],[1],0]", "\"view\":[3,\"f32\",[2],[-1],0]",
         "its view does not lie inside"},
        {"\"view\":[3,\"f32\",[2],[1],0]", "\"view\":[3,\"f32\",[\"4611686018427387904\",2],[0,1],0]",
         "outputs[0] ('y'): its elements take more than 2^46 bytes"}, /* a broadcast */
        {"\"view\":[1,\"f32\",[2],[1],0]", "\"view\":[1,\"f32\",[1],[1],0]",
         "inputs[0] ('x'): an input is the whole of its buffer"},
        {"\"view\":[1,\"f32\",[2],[1],0]", "\"view\":[1,\"f32\",[2],[2],0]",
         "inputs[0] ('x'): its view does not lie inside"},
        {"\"view\":[1,\"f32\",[2],[1],0]", "\"view\":[1,\"f32\",[1],[1],1]", "an input is the whole"},
        {"\"view\":[1,\"f32\",[2],[1],0]", "\"view\":[0,\"f32\",[2],[1],0]",
         "inputs[0] ('x'): buffer 0 is made in the setup"},
        {"\"states\":[{\"name\":\"c\",\"dtype\":\"f32\",\"view\":[0,",
         "\"states\":[{\"name\":\"c\",\"dtype\":\"f32\",\"view\":[2,",
         "states[0] ('c'): buffer 2 is not made in the setup"},
    };
    /* alt steps: closed in their section, not nested */
    char *nested = edited("\"type\":\"kernel\",\"slot\":\"binary\",",
                          "\"type\":\"alt\",\"slot\":\"binary\",");
    char *nested2 = replaced(nested, "\"type\":\"kernel\",\"slot\":\"binary_scalar\",",
                             "\"type\":\"alt\",\"slot\":\"binary_scalar\",");
    em_graph *ng = NULL;
    FAILS(EM_ERR_IO, "step[4]: an alt inside the composition of another", load_json(nested2, "1", &ng));
    FAILS(EM_ERR_IO, "step: an alt without its alt_end", load_json(nested, "1", &ng));
    free(nested);
    free(nested2);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *j = edited(cases[i].from, cases[i].to);
        em_graph *g = NULL;
        em_clear_error();
        em_status s = load_json(j, "1", &g);
        if (s != EM_ERR_IO || !strstr(em_last_error(), cases[i].why) ||
            strncmp(em_last_error(), "em_graph_load: buffer: ", 23) != 0)
            fail_msg("case %zu (%s -> %s): expected EM_ERR_IO with \"%s\", got %s: \"%s\"", i,
                     cases[i].from, cases[i].to, cases[i].why, em_status_name(s),
                     em_last_error());
        assert_null(g);
        free(j);
    }
}

/* The metadata: versions, missing keys, a plain safetensors file. */
static void test_metadata(void **state) {
    (void)state;
    em_graph *g = NULL;
    FAILS(EM_ERR_IO, "em_graph_load: buffer: format version 2 is newer than this library's 1",
          load_json(HAND, "2", &g));
    FAILS(EM_ERR_IO, "format version 123456789 is newer", load_json("{}", "123456789", &g));
    FAILS(EM_ERR_IO, "has no \"ember.graph.version\"", load_json(HAND, NULL, &g));
    FAILS(EM_ERR_IO, "\"ember.graph.version\" is \"0\", not a format version",
          load_json(HAND, "0", &g));
    FAILS(EM_ERR_IO, "\"ember.graph.version\" is \"1.0\"", load_json(HAND, "1.0", &g));
    FAILS(EM_ERR_IO, "\"ember.graph\" is not valid JSON", load_json("{\"version\":", "1", &g));
    FAILS(EM_ERR_IO, "\"ember.graph\" is not valid JSON", load_json("{} {}", "1", &g));
    FAILS(EM_ERR_IO, "\"ember.graph\" is not a JSON object", load_json("[1]", "1", &g));
    /* no "ember.graph" key at all: a plain safetensors file */
    const char *plain = tmp_path("plain.safetensors");
    em_tensor *t = from(W, EM_F32, WS, 2, dev_of("ref"));
    const char *names[1] = {"w"};
    const em_tensor *ts[1] = {t};
    OK(em_safetensors_save(plain, names, ts, 1));
    em_tensor_release(t);
    FAILS(EM_ERR_IO, "not a graph file", em_graph_load(plain, &g));
    char want[300];
    snprintf(want, sizeof want, "em_graph_load: %s: not a graph file", plain);
    FAILS(EM_ERR_IO, want, em_graph_load(plain, &g));
    /* and what cannot be read */
    FAILS(EM_ERR_IO, "cannot open", em_graph_load(tmp_path("none.safetensors"), &g));
    FAILS(EM_ERR_IO, "is a directory", em_graph_load(tmpdir, &g));
    FAILS(EM_ERR_IO, "em_graph_load: buffer: truncated", em_graph_load_buffer("", 0, &g));
    FAILS(EM_ERR_ARG, "out", em_graph_load(plain, NULL));
    FAILS(EM_ERR_ARG, "path", em_graph_load(NULL, &g));
    FAILS(EM_ERR_ARG, "data", em_graph_load_buffer(NULL, 8, &g));
    assert_null(g);
}

/* Every prefix of a saved file is refused, never a crash; so is every file with one byte
 * of its header changed to an ASCII digit, quote or bracket (when the change is caught;
 * some give another valid graph). */
static void test_truncated_and_tampered(void **state) {
    (void)state;
    em_graph *g = record();
    const char *path = tmp_path("t.safetensors");
    OK(em_graph_save(g, path));
    em_graph_release(g);
    size_t n = 0;
    uint8_t *f = read_file(path, &n);
    for (size_t len = 0; len < n; len++) {
        em_graph *l = NULL;
        em_clear_error();
        em_status s = em_graph_load_buffer(f, len, &l);
        if (s != EM_ERR_IO || strncmp(em_last_error(), "em_graph_load: buffer: ", 23) != 0)
            fail_msg("prefix of %zu of %zu bytes: %s: %s", len, n, em_status_name(s),
                     em_last_error());
        assert_null(l);
    }
    /* a truncated file by its path */
    const char *cut = tmp_path("cut.safetensors");
    write_file(cut, f, n / 2);
    em_graph *l = NULL;
    char want[300];
    snprintf(want, sizeof want, "em_graph_load: %s: ", cut);
    FAILS(EM_ERR_IO, want, em_graph_load(cut, &l));
    /* single-byte changes of the header: a refusal or a graph that runs or fails cleanly */
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | f[i];
    static const char subs[] = "9\"[]-";
    int refused = 0, loaded = 0;
    for (size_t at = 8; at < 8 + hlen; at += 3) {
        for (size_t k = 0; k < sizeof subs - 1; k++) {
            uint8_t old = f[at];
            f[at] = (uint8_t)subs[k];
            em_status s = em_graph_load_buffer(f, n, &l);
            f[at] = old;
            if (s == EM_OK) {
                loaded++;
                float xv[20];
                input_values(xv);
                em_device ref = dev_of("ref");
                int64_t shape[EM_MAX_RANK];
                int rank = 0;
                em_dtype dt;
                if (em_graph_input_count(l) == 1 &&
                    em_graph_input_info(l, 0, NULL, &dt, shape, &rank) == EM_OK &&
                    dt == EM_F32 && rank == 2 && shape[0] == 5 && shape[1] == 4) {
                    em_tensor *x = from(xv, EM_F32, XS, 2, ref);
                    const em_tensor *in[1] = {x};
                    (void)em_graph_run(l, ref, in, 1, NULL, 0); /* may fail, must not crash */
                    em_tensor_release(x);
                }
                em_graph_release(l);
                l = NULL;
            } else {
                assert_int_equal(s, EM_ERR_IO);
                refused++;
            }
        }
    }
    assert_true(refused > 0);
    print_message("single-byte edits: %d refused, %d loaded\n", refused, loaded);
    free(f);
}

/* Small graphs: y = x * 2 + 1 (f64); a graph without inputs (all setup, its output a
 * constant); an int graph with a reduction and a gather. */
static void test_small_graphs(void **state) {
    (void)state;
    em_device cap = dev_of("capture"), ref = dev_of("ref");
    /* x * 2 + 1 */
    em_graph *g = NULL, *l = NULL;
    OK(em_graph_begin(&g));
    const int64_t s3[1] = {3};
    em_tensor *x = NULL, *a = NULL, *y = NULL;
    OK(em_graph_input(g, "x", EM_F64, s3, 1, cap, &x));
    OK(em_mul_scalar(x, 2.0, &a));
    OK(em_add_scalar(a, 1.0, &y));
    OK(em_graph_output(g, "y", y));
    OK(em_graph_end(g));
    em_tensor_release(x);
    em_tensor_release(a);
    em_tensor_release(y);
    const char *path = tmp_path("scale.safetensors");
    OK(em_graph_save(g, path));
    seed(g, "scale");
    OK(em_graph_load(path, &l));
    const double xv[3] = {1.0, -0.5, 0.1};
    em_tensor *xe = from(xv, EM_F64, s3, 1, ref), *out[1] = {NULL};
    const em_tensor *in[1] = {xe};
    OK(em_graph_run(l, ref, in, 1, out, 1));
    double yv[3];
    OK(em_tensor_to_data(out[0], yv, sizeof yv));
    for (int i = 0; i < 3; i++) assert_true(yv[i] == xv[i] * 2.0 + 1.0);
    em_tensor_release(out[0]);
    em_tensor_release(xe);
    em_graph_release(l);
    em_graph_release(g);

    /* no inputs: everything is setup */
    OK(em_graph_begin(&g));
    const int64_t s23[2] = {2, 3};
    em_tensor *c = NULL, *c1 = NULL;
    OK(em_full(s23, 2, 0.1, EM_F32, cap, &c));
    OK(em_add_scalar(c, 1.0, &c1));
    OK(em_graph_output(g, "c", c1));
    OK(em_graph_end(g));
    em_tensor_release(c);
    em_tensor_release(c1);
    path = tmp_path("const.safetensors");
    OK(em_graph_save(g, path));
    seed(g, "const");
    OK(em_graph_load(path, &l));
    assert_int_equal(em_graph_input_count(l), 0);
    OK(em_graph_run(l, ref, NULL, 0, out, 1));
    float cv[6];
    OK(em_tensor_to_data(out[0], cv, sizeof cv));
    for (int i = 0; i < 6; i++) assert_true(cv[i] == 0.1f + 1.0f);
    em_tensor_release(out[0]);
    em_graph_release(l);
    em_graph_release(g);

    /* ints: a row sum and a gather by an index input */
    OK(em_graph_begin(&g));
    const int64_t s4[1] = {4}, s2[1] = {2};
    const int32_t tv[4] = {3, -7, 11, 100};
    em_tensor *t = from(tv, EM_I32, s4, 1, cap), *ix = NULL, *gth = NULL, *sum = NULL;
    OK(em_graph_input(g, "ix", EM_I64, s2, 1, cap, &ix));
    OK(em_index_select(t, 0, ix, &gth));
    OK(em_sum(gth, &sum));
    OK(em_graph_output(g, "picked", gth));
    OK(em_graph_output(g, "sum", sum));
    OK(em_graph_name(g, "table", t));
    OK(em_graph_end(g));
    em_tensor *all[] = {t, ix, gth, sum};
    for (size_t i = 0; i < 4; i++) em_tensor_release(all[i]);
    path = tmp_path("ints.safetensors");
    OK(em_graph_save(g, path));
    seed(g, "ints");
    OK(em_graph_load(path, &l));
    const int64_t iv[2] = {2, 0};
    em_tensor *ie = from(iv, EM_I64, s2, 1, ref), *outs[2] = {NULL, NULL};
    const em_tensor *ins[1] = {ie};
    OK(em_graph_run(l, ref, ins, 1, outs, 2));
    int32_t pv[2];
    OK(em_tensor_to_data(outs[0], pv, sizeof pv));
    assert_true(pv[0] == 11 && pv[1] == 3);
    em_tensor_release(outs[0]);
    em_tensor_release(outs[1]);
    /* an index out of range is found when the graph runs, as with the recorded graph */
    const int64_t bad[2] = {4, 0};
    em_tensor *be = from(bad, EM_I64, s2, 1, ref);
    ins[0] = be;
    FAILS(EM_ERR_ARG, "em_exec_run", em_graph_run(l, ref, ins, 1, outs, 2));
    em_tensor_release(be);
    em_tensor_release(ie);
    em_graph_release(l);
    em_graph_release(g);
}

/* A whole SGD training step (capture+autodiff) saved and loaded: the loaded graph's runs
 * (loss, parameters carried over) are the recorded graph's, bit for bit. */
static void test_training_step(void **state) {
    (void)state;
    static const float W2[6] = {0.2f, -0.3f, 0.5f, 0.1f, -0.4f, 0.25f};
    static const int64_t W2S[2] = {3, 2}, LS[1] = {5};
    em_device cap = dev_of("capture+autodiff"), ref = dev_of("ref");
    em_graph *g = NULL, *l = NULL;
    OK(em_graph_begin(&g));
    em_tensor *w1 = from(W, EM_F32, WS, 2, cap), *w2 = from(W2, EM_F32, W2S, 2, cap);
    OK(em_tensor_require_grad(w1));
    OK(em_tensor_require_grad(w2));
    em_params *p = NULL;
    em_optimizer *opt = NULL;
    OK(em_params_create(&p));
    OK(em_params_add(p, "w1", &w1));
    OK(em_params_add(p, "w2", &w2));
    OK(em_optimizer_sgd(p, 0.1, 0.9, 0, &opt));
    em_tensor *x = NULL, *labels = NULL, *h = NULL, *r = NULL, *logits = NULL, *loss = NULL;
    OK(em_graph_input(g, "x", EM_F32, XS, 2, cap, &x));
    OK(em_graph_input(g, "labels", EM_I64, LS, 1, cap, &labels));
    OK(em_matmul(x, w1, &h));
    OK(em_relu(h, &r));
    OK(em_matmul(r, w2, &logits));
    OK(em_cross_entropy(logits, labels, &loss));
    em_grads *gr = NULL;
    OK(em_backward(loss, &gr));
    OK(em_optimizer_step(opt, gr, 1.0));
    em_grads_release(gr);
    OK(em_graph_output(g, "loss", loss));
    OK(em_graph_name(g, "w1", w1));
    OK(em_graph_name(g, "w2", w2));
    OK(em_graph_end(g));
    em_tensor *all[] = {x, labels, h, r, logits, loss};
    for (size_t i = 0; i < 6; i++) em_tensor_release(all[i]);
    em_optimizer_release(opt);
    em_params_release(p);
    em_tensor_release(w1);
    em_tensor_release(w2);

    const char *path = tmp_path("train.safetensors");
    OK(em_graph_save(g, path));
    seed(g, "train");
    OK(em_graph_load(path, &l));
    em_exec *e1 = NULL, *e2 = NULL;
    OK(em_graph_prepare(g, ref, &e1));
    OK(em_graph_prepare(l, ref, &e2));
    for (int k = 0; k < 3; k++) {
        float xv[20];
        int64_t lv[5];
        for (int i = 0; i < 20; i++) xv[i] = sinf(0.37f * (float)(i + 7 * k)) * 1.5f;
        for (int i = 0; i < 5; i++) lv[i] = (i + k) % 2;
        em_tensor *xe = from(xv, EM_F32, XS, 2, ref), *le = from(lv, EM_I64, LS, 1, ref);
        const em_tensor *in[2] = {xe, le};
        em_tensor *o1[1] = {NULL}, *o2[1] = {NULL};
        OK(em_exec_run(e1, in, 2, o1, 1));
        OK(em_exec_run(e2, in, 2, o2, 1));
        same_bits(o1[0], o2[0]);
        em_tensor *s1 = NULL, *s2 = NULL;
        OK(em_exec_state(e1, "w2", &s1));
        OK(em_exec_state(e2, "w2", &s2));
        same_bits(s1, s2);
        em_tensor *rel[] = {xe, le, o1[0], o2[0], s1, s2};
        for (size_t i = 0; i < 6; i++) em_tensor_release(rel[i]);
    }
    em_exec_release(e1);
    em_exec_release(e2);
    em_graph_release(l);
    em_graph_release(g);
}

/* A hand-written graph-only adam_step call (docs/graph-format.md): a parameter (the blob),
 * its moments and its step count made in the setup (fill), the gradient an input. */
static const char ADAM[] =
    "{\"version\":1,"
    "\"buffers\":[{\"bytes\":8,\"setup\":true},{\"bytes\":8,\"setup\":true},"
    "{\"bytes\":8,\"setup\":true},{\"bytes\":8,\"setup\":true},"
    "{\"bytes\":8,\"setup\":false,\"input\":0}],"
    "\"setup\":[{\"type\":\"alloc\",\"buf\":0},"
    "{\"type\":\"write\",\"buf\":0,\"offset\":0,\"blob\":\"blob.0\"},"
    "{\"type\":\"alloc\",\"buf\":1},"
    "{\"type\":\"kernel\",\"slot\":\"fill\",\"views\":[[1,\"f32\",[2],[1],0]],\"doubles\":[0]},"
    "{\"type\":\"alloc\",\"buf\":2},"
    "{\"type\":\"kernel\",\"slot\":\"fill\",\"views\":[[2,\"f32\",[2],[1],0]],\"doubles\":[0]},"
    "{\"type\":\"alloc\",\"buf\":3},"
    "{\"type\":\"kernel\",\"slot\":\"fill\",\"views\":[[3,\"i64\",[],[],0]],\"doubles\":[0]}],"
    "\"step\":[{\"type\":\"alloc\",\"buf\":4},"
    "{\"type\":\"kernel\",\"slot\":\"adam_step\",\"sub\":1,"
    "\"views\":[[0,\"f32\",[2],[1],0],[1,\"f32\",[2],[1],0],[2,\"f32\",[2],[1],0],"
    "[4,\"f32\",[2],[1],0],[3,\"i64\",[],[],0]],"
    "\"doubles\":[0.1,0.9,0.999,1e-8,0.25,2]}],"
    "\"inputs\":[{\"name\":\"g\",\"dtype\":\"f32\",\"view\":[4,\"f32\",[2],[1],0]}],"
    "\"outputs\":[{\"name\":\"p\",\"dtype\":\"f32\",\"view\":[0,\"f32\",[2],[1],0]}],"
    "\"states\":[{\"name\":\"m\",\"dtype\":\"f32\",\"view\":[1,\"f32\",[2],[1],0]},"
    "{\"name\":\"v\",\"dtype\":\"f32\",\"view\":[2,\"f32\",[2],[1],0]},"
    "{\"name\":\"step\",\"dtype\":\"i64\",\"view\":[3,\"i64\",[],[],0]}]}";

static em_status load_adam(const char *json, em_graph **g) {
    size_t len = 0;
    uint8_t *f = make_file(json, "1", (const uint8_t *)HAND_C, sizeof HAND_C, &len);
    em_status s = em_graph_load_buffer(f, len, g);
    free(f);
    return s;
}

/* The hand-written AdamW step: 3 runs on ref and cpu are 3 eager AdamW steps (weight decay
 * 0.25, gradients scaled by 2), the count in the graph 3; then each hostile edit is refused,
 * by the loader (EM_ERR_IO) or when the call is checked or run. */
static void test_adam_step_call(void **state) {
    (void)state;
    static const int64_t S2[1] = {2};
    static const float G[2] = {0.5f, -1.25f};
    em_graph *g = NULL;
    OK(load_adam(ADAM, &g));
    size_t len = 0;
    uint8_t *f = make_file(ADAM, "1", (const uint8_t *)HAND_C, sizeof HAND_C, &len);
    seed_bytes(f, len, "adam");
    free(f);
    const char *devs[2] = {"ref", "cpu"};
    for (int d = 0; d < 2; d++) {
        em_device dev;
        if (em_device_parse(devs[d], &dev) != EM_OK) continue;
        em_device ad;
        OK(em_device_autodiff(dev, EM_CKPT_DISABLED, &ad));
        em_tensor *p = from(HAND_C, EM_F32, S2, 1, ad), *gr = from(G, EM_F32, S2, 1, dev);
        OK(em_tensor_require_grad(p));
        em_params *ps = NULL;
        em_optimizer *opt = NULL;
        OK(em_params_create(&ps));
        OK(em_params_add(ps, "p", &p));
        OK(em_optimizer_adamw(ps, 0.1, 0.9, 0.999, 1e-8, 0.25, &opt));
        em_exec *e = NULL;
        OK(em_graph_prepare(g, dev, &e));
        for (int k = 0; k < 3; k++) {
            em_grads *gs = NULL;
            OK(em_grads_create(&gs));
            OK(em_grads_set(gs, p, gr));
            OK(em_optimizer_step(opt, gs, 2.0));
            em_grads_release(gs);
            const em_tensor *in[1] = {gr};
            em_tensor *out[1] = {NULL};
            OK(em_exec_run(e, in, 1, out, 1));
            same_bits(p, out[0]);
            em_tensor_release(out[0]);
        }
        em_tensor *t = NULL;
        int64_t count = 0;
        OK(em_exec_state(e, "step", &t));
        OK(em_tensor_to_data(t, &count, sizeof count));
        assert_int_equal(count, 3);
        em_tensor_release(t);
        em_exec_release(e);
        em_optimizer_release(opt);
        em_params_release(ps);
        em_tensor_release(p);
        em_tensor_release(gr);
    }
    em_graph_release(g);
    /* refused by the loader */
    static const struct {
        const char *from, *to;
    } io[] = {
        {"\"sub\":1", "\"sub\":2"},                                   /* Adam or AdamW */
        {"1e-8,0.25,2]", "1e-8,0.25]"},                               /* 6 doubles */
        {",[3,\"i64\",[],[],0]]", "]"},                               /* 5 views */
        {",[3,\"i64\",[],[],0]]", ",null]"},                          /* none optional */
    };
    for (size_t i = 0; i < sizeof io / sizeof io[0]; i++) {
        char *j = replaced(ADAM, io[i].from, io[i].to);
        g = NULL;
        assert_int_equal(load_adam(j, &g), EM_ERR_IO);
        assert_null(g);
        free(j);
    }
    /* loaded, refused when the call is checked (em_graph_prepare) or run */
    static const struct {
        const char *from, *to, *why;
        em_status s;
        bool at_run;
    } bad[] = {
        {"0.1,0.9,", "0.1,1.5,", "betas", EM_ERR_ARG, false},
        {"0.1,0.9,", "-0.1,0.9,", "lr", EM_ERR_ARG, false},
        {"0.25,2]", "0.25,\"inf\"]", "grad_scale", EM_ERR_ARG, false},
        {"1e-8,0.25", "\"nan\",0.25", "eps", EM_ERR_ARG, false},
        {",[3,\"i64\",[],[],0]]", ",[3,\"f32\",[],[],0]]", "view 4", EM_ERR_DTYPE, false},
        {",[3,\"i64\",[],[],0]]", ",[1,\"i64\",[],[],0]]", "overlaps", EM_ERR_ARG, false},
        /* an empty count: nothing runs, as for any call whose primary view is empty */
        {",[3,\"i64\",[],[],0]]", ",[3,\"i64\",[0],[1],0]]", "", EM_OK, false},
        {"[4,\"f32\",[2],[1],0],[3", "[4,\"f32\",[1],[1],0],[3", "differs", EM_ERR_SHAPE, false},
        {"[[3,\"i64\",[],[],0]],\"doubles\":[0]", "[[3,\"i64\",[],[],0]],\"doubles\":[-1]",
         "out of range", EM_ERR_ARG, true},
    };
    em_device ref = dev_of("ref");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *j = replaced(ADAM, bad[i].from, bad[i].to);
        g = NULL;
        OK(load_adam(j, &g));
        em_exec *e = NULL;
        em_status s = em_graph_prepare(g, ref, &e);
        if (bad[i].at_run) {
            OK(s);
            em_tensor *gr = from(G, EM_F32, S2, 1, ref);
            const em_tensor *in[1] = {gr};
            s = em_exec_run(e, in, 1, NULL, 0);
            em_tensor_release(gr);
        }
        if (s != bad[i].s || (s != EM_OK && !strstr(em_last_error(), bad[i].why)))
            fail_msg("edit %zu: %s (%s), expected %s about '%s'", i, em_status_name(s),
                     em_last_error(), em_status_name(bad[i].s), bad[i].why);
        em_exec_release(e);
        em_graph_release(g);
        free(j);
    }
}

/* A hand-written graph-only unary_backward call (docs/graph-format.md): sin's fused gradient,
 * gx = gy * cos(x), reading x (view 1; view 2, y, is null); both operands are inputs. */
static const char UNARY_BW[] =
    "{\"version\":1,"
    "\"buffers\":[{\"bytes\":8,\"setup\":false,\"input\":0},"
    "{\"bytes\":8,\"setup\":false,\"input\":1},{\"bytes\":8,\"setup\":false}],"
    "\"setup\":[],"
    "\"step\":[{\"type\":\"alloc\",\"buf\":0},{\"type\":\"alloc\",\"buf\":1},"
    "{\"type\":\"alloc\",\"buf\":2},"
    "{\"type\":\"kernel\",\"slot\":\"unary_backward\",\"sub\":7,"
    "\"views\":[[2,\"f32\",[2],[1],0],[0,\"f32\",[2],[1],0],null,[1,\"f32\",[2],[1],0]],"
    "\"doubles\":[0,0]}],"
    "\"inputs\":[{\"name\":\"x\",\"dtype\":\"f32\",\"view\":[0,\"f32\",[2],[1],0]},"
    "{\"name\":\"gy\",\"dtype\":\"f32\",\"view\":[1,\"f32\",[2],[1],0]}],"
    "\"outputs\":[{\"name\":\"gx\",\"dtype\":\"f32\",\"view\":[2,\"f32\",[2],[1],0]}],"
    "\"states\":[]}";

/* The hand-written sin gradient runs on ref and cpu (gy * cos x); then each hostile edit (an
 * op without a fused gradient, x and y given the wrong way, shapes that differ, NaN clamp
 * bounds) is refused when the call is checked, with a message saying why. */
static void test_unary_backward_call(void **state) {
    (void)state;
    static const int64_t S2[1] = {2};
    static const float X[2] = {0.5f, -2.0f}, GY[2] = {3.0f, 0.25f};
    em_graph *g = NULL;
    OK(load_json(UNARY_BW, "1", &g));
    size_t len = 0;
    uint8_t *f = make_file(UNARY_BW, "1", (const uint8_t *)HAND_C, sizeof HAND_C, &len);
    seed_bytes(f, len, "unary_backward");
    free(f);
    const char *devs[2] = {"ref", "cpu"};
    for (int d = 0; d < 2; d++) {
        em_device dev;
        if (em_device_parse(devs[d], &dev) != EM_OK) continue;
        em_tensor *x = from(X, EM_F32, S2, 1, dev), *gy = from(GY, EM_F32, S2, 1, dev);
        const em_tensor *in[2] = {x, gy};
        em_tensor *out[1] = {NULL};
        OK(em_graph_run(g, dev, in, 2, out, 1));
        float gx[2];
        OK(em_tensor_to_data(out[0], gx, sizeof gx));
        for (int i = 0; i < 2; i++)
            if (fabs((double)gx[i] - (double)GY[i] * cos((double)X[i])) > 1e-6)
                fail_msg("%s: gx[%d] = %g, want %g", devs[d], i, (double)gx[i],
                         (double)GY[i] * cos((double)X[i]));
        em_tensor_release(out[0]);
        em_tensor_release(x);
        em_tensor_release(gy);
    }
    em_graph_release(g);
    static const struct {
        const char *from, *to, *why;
        em_status s;
    } bad[] = {
        /* neg: no fused gradient */
        {"\"sub\":7", "\"sub\":0", "no fused gradient", EM_ERR_ARG},
        /* sin reads x: given as y instead */
        {"[0,\"f32\",[2],[1],0],null,", "null,[0,\"f32\",[2],[1],0],", "reads x only",
         EM_ERR_ARG},
        /* tanh reads y: given x */
        {"\"sub\":7", "\"sub\":9", "reads y only", EM_ERR_ARG},
        /* both */
        {"[0,\"f32\",[2],[1],0],null,", "[0,\"f32\",[2],[1],0],[0,\"f32\",[2],[1],0],",
         "reads x only", EM_ERR_ARG},
        {"[[2,\"f32\",[2],[1],0],[0,\"f32\",[2],[1],0]", "[[2,\"f32\",[1],[1],0],[0,\"f32\",[2],[1],0]",
         "shapes differ", EM_ERR_SHAPE},
        /* clamp (reads x) with NaN bounds */
        {"\"sub\":7,\"views\"", "\"sub\":20,\"views\"", "", EM_OK},
    };
    em_device ref = dev_of("ref");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *j = replaced(UNARY_BW, bad[i].from, bad[i].to);
        g = NULL;
        OK(load_json(j, "1", &g));
        em_exec *e = NULL;
        em_status s = em_graph_prepare(g, ref, &e);
        if (s != bad[i].s || (s != EM_OK && !strstr(em_last_error(), bad[i].why)))
            fail_msg("edit %zu: %s (%s), expected %s about '%s'", i, em_status_name(s),
                     em_last_error(), em_status_name(bad[i].s), bad[i].why);
        em_exec_release(e);
        em_graph_release(g);
        free(j);
    }
    /* clamp's bounds: NaN is refused, infinite ones are bounds like any */
    char *c = replaced(UNARY_BW, "\"sub\":7,\"views\"", "\"sub\":20,\"views\"");
    static const char *const nan_bounds[] = {"[\"nan\",0]", "[0,\"nan\"]"};
    for (int i = 0; i < 2; i++) {
        char *j = replaced(c, "[0,0]", nan_bounds[i]);
        g = NULL;
        OK(load_json(j, "1", &g));
        em_exec *e = NULL;
        em_status s = em_graph_prepare(g, ref, &e);
        if (s != EM_ERR_ARG || !strstr(em_last_error(), "NaN"))
            fail_msg("clamp bounds %s: %s (%s)", nan_bounds[i], em_status_name(s), em_last_error());
        em_exec_release(e);
        em_graph_release(g);
        free(j);
    }
    char *j = replaced(c, "[0,0]", "[\"-inf\",\"inf\"]");
    OK(load_json(j, "1", &g));
    em_exec *e = NULL;
    OK(em_graph_prepare(g, ref, &e));
    em_exec_release(e);
    em_graph_release(g);
    free(j);
    free(c);
}

/* batch_norm (training, running statistics as state) and rms_norm: fused calls and their
 * compositions (alt steps); the loaded graph's runs are the recorded graph's, bit for bit, on
 * ref and cpu. */
static void test_norms(void **state) {
    (void)state;
    em_device cap = dev_of("capture");
    em_graph *g = NULL, *l = NULL;
    OK(em_graph_begin(&g));
    static const float RM[4] = {0.0f, 0.5f, -0.5f, 1.0f}, RV[4] = {1.0f, 2.0f, 0.5f, 1.0f};
    static const float GW[4] = {1.0f, 0.5f, 2.0f, -1.0f};
    const int64_t cs[1] = {4}, xs[2] = {5, 4};
    em_tensor *rm = from(RM, EM_F32, cs, 1, cap), *rv = from(RV, EM_F32, cs, 1, cap);
    em_tensor *w = from(GW, EM_F32, cs, 1, cap), *x = NULL, *bn = NULL, *y = NULL;
    OK(em_graph_input(g, "x", EM_F32, xs, 2, cap, &x));
    OK(em_batch_norm(x, rm, rv, w, NULL, true, 0.1, 1e-5, &bn));
    OK(em_rms_norm(bn, 1, w, 1e-6, &y));
    OK(em_graph_output(g, "y", y));
    OK(em_graph_name(g, "running_mean", rm));
    OK(em_graph_name(g, "running_var", rv));
    OK(em_graph_end(g));
    em_tensor *all[] = {rm, rv, w, x, bn, y};
    for (size_t i = 0; i < 6; i++) em_tensor_release(all[i]);
    const char *path = tmp_path("norms.safetensors");
    OK(em_graph_save(g, path));
    seed(g, "norms");
    OK(em_graph_load(path, &l));
    size_t n = 0;
    uint8_t *f = read_file(path, &n);
    static const char alt[] = "\\\"type\\\":\\\"alt\\\""; /* escaped in the header */
    assert_non_null(memmem(f, n, alt, sizeof alt - 1));
    free(f);
    em_device devs[2] = {dev_of("ref"), dev_of("ref")};
    int nd = em_device_parse("cpu", &devs[1]) == EM_OK ? 2 : 1;
    for (int d = 0; d < nd; d++) {
        em_exec *e1 = NULL, *e2 = NULL;
        OK(em_graph_prepare(g, devs[d], &e1));
        OK(em_graph_prepare(l, devs[d], &e2));
        for (int k = 0; k < 2; k++) {
            float xv[20];
            for (int i = 0; i < 20; i++) xv[i] = cosf(0.41f * (float)(i + 5 * k)) * 2.0f;
            em_tensor *xe = from(xv, EM_F32, xs, 2, devs[d]), *o1[1] = {NULL}, *o2[1] = {NULL};
            const em_tensor *in[1] = {xe};
            OK(em_exec_run(e1, in, 1, o1, 1));
            OK(em_exec_run(e2, in, 1, o2, 1));
            same_bits(o1[0], o2[0]);
            em_tensor *s1 = NULL, *s2 = NULL;
            OK(em_exec_state(e1, "running_var", &s1));
            OK(em_exec_state(e2, "running_var", &s2));
            same_bits(s1, s2);
            em_tensor *rel[] = {xe, o1[0], o2[0], s1, s2};
            for (size_t i = 0; i < 5; i++) em_tensor_release(rel[i]);
        }
        em_exec_release(e1);
        em_exec_release(e2);
    }
    em_graph_release(l);
    em_graph_release(g);
}

static void test_save_errors(void **state) {
    (void)state;
    em_graph *g = NULL;
    OK(em_graph_begin(&g));
    FAILS(EM_ERR_STATE, "em_graph_save: the graph is still recording",
          em_graph_save(g, tmp_path("open.safetensors")));
    OK(em_graph_end(g));
    FAILS(EM_ERR_ARG, "path", em_graph_save(g, NULL));
    FAILS(EM_ERR_ARG, "g", em_graph_save(NULL, tmp_path("x.safetensors")));
    FAILS(EM_ERR_IO, "cannot open for writing", em_graph_save(g, tmp_path("no/such/dir/g")));
    /* an empty graph saves and loads */
    const char *path = tmp_path("empty.safetensors");
    OK(em_graph_save(g, path));
    em_graph *l = NULL;
    OK(em_graph_load(path, &l));
    assert_int_equal(em_graph_kernel_count(l), 0);
    OK(em_graph_run(l, dev_of("ref"), NULL, 0, NULL, 0));
    em_graph_release(l);
    em_graph_release(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_parameters_by_name),
        cmocka_unit_test(test_hand_written),
        cmocka_unit_test(test_hand_written_refused),
        cmocka_unit_test(test_metadata),
        cmocka_unit_test(test_truncated_and_tampered),
        cmocka_unit_test(test_small_graphs),
        cmocka_unit_test(test_training_step),
        cmocka_unit_test(test_adam_step_call),
        cmocka_unit_test(test_unary_backward_call),
        cmocka_unit_test(test_norms),
        cmocka_unit_test(test_save_errors),
    };
    return cmocka_run_group_tests(tests, setup_dir, remove_dir);
}
