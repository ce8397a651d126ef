/* test_graph_show.c — looking at captured graphs: em_graph_stats_of (kernel counts, a
 * matmul's exact FLOPs, state and peak bytes), em_graph_write_summary (names, op families,
 * fused alternatives) and em_graph_write_dot (a digraph naming every input and output, with
 * balanced braces, a node per call and edges between declared nodes only, the edges of a
 * buffer written in pieces, a fused call standing for its composition, and, when Graphviz's
 * `dot` is installed, one that it renders); a step of thousands of calls; bad arguments and
 * failed writes. */
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
#include "graph/graph_internal.h" /* the steps: how many call nodes the picture has */

#define OK(call) assert_int_equal((call), EM_OK)

static em_device dev_of(const char *name) {
    em_device d;
    OK(em_device_parse(name, &d));
    return d;
}

/* A tensor of the given shape on the capture device dev, filled with 0.01 * i. */
static em_tensor *param(em_device dev, const int64_t *shape, int rank) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++) n *= shape[d];
    float *v = malloc((size_t)n * sizeof *v);
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++) v[i] = 0.01f * (float)i;
    em_tensor *t = NULL;
    OK(em_tensor_from_data(v, EM_F32, shape, rank, dev, &t));
    free(v);
    return t;
}

/* The whole of a file (NUL-terminated, caller frees). */
static char *slurp(FILE *f) {
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    const long n = ftell(f);
    assert_true(n >= 0);
    rewind(f);
    char *s = malloc((size_t)n + 1);
    assert_non_null(s);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    return s;
}

static char *slurp_path(const char *path) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *s = slurp(f);
    fclose(f);
    return s;
}

/* A fresh temporary path (the file exists, empty). */
static void temp_path(char *out, size_t cap, const char *tag) {
    const char *dir = getenv("TMPDIR");
    snprintf(out, cap, "%s/ember_%s_XXXXXX", dir && *dir ? dir : "/tmp", tag);
    const int fd = mkstemp(out);
    assert_true(fd >= 0);
    close(fd);
}

/* Braces outside quoted strings never close more than they opened, and all close. */
static void assert_balanced(const char *s) {
    long depth = 0;
    bool quoted = false;
    for (; *s; s++) {
        if (quoted) {
            if (*s == '\\' && s[1]) s++;
            else if (*s == '"') quoted = false;
        } else if (*s == '"') {
            quoted = true;
        } else if (*s == '{') {
            depth++;
        } else if (*s == '}') {
            assert_true(--depth >= 0);
        }
    }
    assert_false(quoted);
    assert_int_equal(depth, 0);
}

/* The call nodes of g's picture: one per call of the step, a fused call (GR_ALT) standing
 * for its composition's. */
static int64_t call_nodes(const em_graph *g) {
    int64_t n = 0;
    bool in_alt = false;
    for (uint64_t i = g->setup_end; i < g->nsteps; i++) {
        const uint8_t t = g->steps[i].type;
        if (t == GR_ALT || t == GR_ALT_END) in_alt = t == GR_ALT;
        n += t == GR_ALT || (t == GR_KERNEL && !in_alt);
    }
    return n;
}

/* Every edge's ends are nodes declared with a label (ids are [a-z0-9]+ here), and there is
 * a node per call of the step. */
static void assert_edges_declared(const char *dot, int64_t step_calls) {
    size_t n = 0, cap = 64;
    char **ids = malloc(cap * sizeof *ids);
    assert_non_null(ids);
    int64_t calls = 0;
    for (const char *l = dot; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
        char a[32], b[32];
        if (sscanf(l, "  %31[a-z0-9] -> %31[a-z0-9]", a, b) == 2) {
            for (int e = 0; e < 2; e++) {
                const char *id = e ? b : a;
                bool found = false;
                for (size_t i = 0; i < n && !found; i++) found = strcmp(ids[i], id) == 0;
                if (!found) fail_msg("edge end '%s' is not a declared node", id);
            }
        } else if (sscanf(l, "  %31[a-z0-9] [label=", a) == 1 && strncmp(l + 2, "graph", 5) != 0 &&
                   strncmp(l + 2, "node", 4) != 0 && strncmp(l + 2, "edge", 4) != 0) {
            if (n == cap) assert_non_null(ids = realloc(ids, (cap *= 2) * sizeof *ids));
            assert_non_null(ids[n++] = strdup(a));
            calls += a[0] == 'k';
        }
    }
    assert_int_equal(calls, step_calls);
    for (size_t i = 0; i < n; i++) free(ids[i]);
    free(ids);
}

/* Checks the dot file of g: a digraph naming every input and output, its edges between
 * declared nodes; rendered by Graphviz when it is installed and `render`. */
static void check_dot(const em_graph *g, bool render) {
    char path[512];
    temp_path(path, sizeof path, "dot");
    OK(em_graph_write_dot(g, path));
    char *dot = slurp_path(path);
    assert_true(strncmp(dot, "digraph", 7) == 0);
    assert_balanced(dot);
    for (int i = 0; i < em_graph_input_count(g) + em_graph_output_count(g); i++) {
        const char *name = NULL;
        if (i < em_graph_input_count(g)) OK(em_graph_input_info(g, i, &name, NULL, NULL, NULL));
        else OK(em_graph_output_info(g, i - em_graph_input_count(g), &name, NULL, NULL, NULL));
        char want[160];
        snprintf(want, sizeof want, "label=\"%s\\n", name);
        if (!strstr(dot, want)) fail_msg("the dot file has no node labelled '%s'", name);
    }
    assert_edges_declared(dot, call_nodes(g));
    free(dot);
    if (!render) {
        /* dot's layout takes minutes on thousands of nodes */
    } else if (system("command -v dot >/dev/null 2>&1") == 0) {
        char cmd[1200], svg[520];
        snprintf(svg, sizeof svg, "%s.svg", path);
        snprintf(cmd, sizeof cmd, "dot -Tsvg '%s' -o '%s'", path, svg);
        assert_int_equal(system(cmd), 0);
        char *out = slurp_path(svg);
        assert_non_null(strstr(out, "<svg"));
        free(out);
        remove(svg);
    } else {
        print_message("test_graph_show: Graphviz's dot is not installed: rendering skipped\n");
    }
    remove(path);
}

static char *summary_of(const em_graph *g) {
    FILE *f = tmpfile();
    assert_non_null(f);
    OK(em_graph_write_summary(g, f));
    char *s = slurp(f);
    fclose(f);
    return s;
}

/* A graph of one matmul: its FLOPs are exactly 2 M N K (times the batch), and a step's peak
 * is its two inputs and its output. */
static void test_matmul_flops(void **state) {
    (void)state;
    const em_device cap = dev_of("capture");
    const int64_t B = 3, M = 5, K = 7, N = 11;
    for (int batched = 0; batched < 2; batched++) {
        em_graph *g = NULL;
        em_tensor *a = NULL, *b = NULL, *c = NULL;
        OK(em_graph_begin(&g));
        const int64_t as[3] = {B, M, K}, bs[3] = {B, K, N};
        OK(em_graph_input(g, "a", EM_F32, batched ? as : as + 1, batched ? 3 : 2, cap, &a));
        OK(em_graph_input(g, "b", EM_F32, batched ? bs : bs + 1, batched ? 3 : 2, cap, &b));
        OK(em_matmul(a, b, &c));
        OK(em_graph_output(g, "c", c));
        OK(em_graph_end(g));
        em_graph_stats st;
        OK(em_graph_stats_of(g, &st));
        const int64_t batch = batched ? B : 1;
        assert_int_equal(st.kernels, 1);
        assert_int_equal(st.setup_kernels, 0);
        assert_int_equal(st.flops, 2 * M * N * K * batch);
        assert_int_equal(st.state_bytes, 0);
        assert_int_equal(st.init_bytes, 0);
        assert_int_equal(st.peak_bytes, (M * K + K * N + M * N) * batch * 4);
        char *sum = summary_of(g);
        assert_non_null(strstr(sum, "matmul"));
        free(sum);
        check_dot(g, true);
        em_tensor_release(a), em_tensor_release(b), em_tensor_release(c);
        em_graph_release(g);
    }
}

/* An MLP's forward step: two linear layers with a ReLU, parameters made in the setup. */
static void test_mlp_step(void **state) {
    (void)state;
    const em_device cap = dev_of("capture");
    em_graph *g = NULL;
    OK(em_graph_begin(&g));
    em_tensor *w1 = param(cap, (const int64_t[]){4, 8}, 2);
    em_tensor *b1 = param(cap, (const int64_t[]){8}, 1);
    em_tensor *w2 = param(cap, (const int64_t[]){8, 3}, 2);
    em_tensor *b2 = param(cap, (const int64_t[]){3}, 1);
    OK(em_graph_name(g, "fc1.weight", w1));
    OK(em_graph_name(g, "fc1.bias", b1));
    OK(em_graph_name(g, "fc2.weight", w2));
    OK(em_graph_name(g, "fc2.bias", b2));
    em_tensor *x = NULL, *h = NULL, *hb = NULL, *r = NULL, *y = NULL, *yb = NULL, *loss = NULL;
    OK(em_graph_input(g, "x", EM_F32, (const int64_t[]){5, 4}, 2, cap, &x));
    OK(em_matmul(x, w1, &h));
    OK(em_add(h, b1, &hb));
    OK(em_relu(hb, &r));
    OK(em_matmul(r, w2, &y));
    OK(em_add(y, b2, &yb));
    OK(em_sum(yb, &loss));
    OK(em_graph_output(g, "logits", yb));
    OK(em_graph_output(g, "loss", loss));
    OK(em_graph_end(g));

    em_graph_stats st;
    OK(em_graph_stats_of(g, &st));
    const int64_t param_bytes = (4 * 8 + 8 + 8 * 3 + 3) * 4;
    assert_true(st.kernels > 0);
    assert_int_equal(st.kernels, em_graph_kernel_count(g));
    assert_int_equal(st.state_bytes, param_bytes);
    assert_true(st.init_bytes >= param_bytes);
    assert_true(st.buffers >= 4 + 1 + 6);
    /* the matmuls' 2 M N K, and something for the add, relu and sum */
    assert_true(st.flops > 2 * 5 * 8 * 4 + 2 * 5 * 3 * 8);
    /* the state, the input and at least the last outputs alive at once */
    assert_true(st.peak_bytes >= param_bytes + 5 * 4 * 4 + 5 * 3 * 4);

    char *sum = summary_of(g);
    for (const char *const *w = (const char *const[]){"x", "logits", "loss", "fc1.weight",
                                                      "matmul", "binary:add", "unary:relu",
                                                      "reduce:sum", "total", NULL};
         *w; w++)
        if (!strstr(sum, *w)) fail_msg("the summary has no '%s':\n%s", *w, sum);
    free(sum);
    check_dot(g, true);
    em_tensor *all[] = {w1, b1, w2, b2, x, h, hb, r, y, yb, loss};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) em_tensor_release(all[i]);
    em_graph_release(g);
}

/* A training step on capture+autodiff (forward, cross-entropy, backward, SGD written with
 * ops): the backward's calls are in the step, the parameters stay the state, and the picture
 * is a valid digraph. */
static void test_training_step(void **state) {
    (void)state;
    const em_device cap = dev_of("capture+autodiff");
    em_graph *g = NULL;
    OK(em_graph_begin(&g));
    em_tensor *w = param(cap, (const int64_t[]){6, 4}, 2), *b = param(cap, (const int64_t[]){4}, 1);
    OK(em_tensor_require_grad(w));
    OK(em_tensor_require_grad(b));
    OK(em_graph_name(g, "weight", w));
    em_tensor *x = NULL, *t = NULL, *y = NULL, *yb = NULL, *loss = NULL;
    OK(em_graph_input(g, "x", EM_F32, (const int64_t[]){8, 6}, 2, cap, &x));
    OK(em_graph_input(g, "labels", EM_I64, (const int64_t[]){8}, 1, cap, &t));
    OK(em_matmul(x, w, &y));
    OK(em_add(y, b, &yb));
    OK(em_cross_entropy(yb, t, &loss));
    em_grads *gr = NULL;
    OK(em_backward(loss, &gr));
    em_tensor *ps[2] = {w, b};
    for (int i = 0; i < 2; i++) {
        em_tensor *gp = NULL, *step = NULL, *next = NULL;
        OK(em_grads_get(gr, ps[i], &gp));
        OK(em_mul_scalar(gp, 0.1, &step));
        OK(em_sub(ps[i], step, &next));
        OK(em_tensor_assign(ps[i], next));
        em_tensor_release(gp), em_tensor_release(step), em_tensor_release(next);
    }
    em_grads_release(gr);
    OK(em_graph_output(g, "loss", loss));
    OK(em_graph_end(g));
    em_graph_stats st;
    OK(em_graph_stats_of(g, &st));
    assert_int_equal(st.state_bytes, (6 * 4 + 4) * 4);
    /* forward and backward: at least three matmuls (x w, and w's gradient; x's is not
     * needed) */
    assert_true(st.flops >= 2 * 8 * 4 * 6 * 2);
    char *sum = summary_of(g);
    assert_non_null(strstr(sum, "labels"));
    assert_non_null(strstr(sum, "weight"));
    free(sum);
    check_dot(g, true);
    em_tensor *all[] = {w, b, x, t, y, yb, loss};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) em_tensor_release(all[i]);
    em_graph_release(g);
}

/* A graph without inputs is all setup: no step calls, and an empty (valid) picture. */
static void test_setup_only(void **state) {
    (void)state;
    const em_device cap = dev_of("capture");
    em_graph *g = NULL;
    OK(em_graph_begin(&g));
    em_tensor *w = param(cap, (const int64_t[]){3, 3}, 2), *w2 = NULL;
    OK(em_mul_scalar(w, 2.0, &w2));
    OK(em_graph_end(g));
    em_graph_stats st;
    OK(em_graph_stats_of(g, &st));
    assert_int_equal(st.kernels, st.setup_kernels);
    assert_true(st.kernels >= 1);
    assert_int_equal(st.flops, 0);
    assert_int_equal(st.state_bytes, 2 * 9 * 4);
    assert_int_equal(st.peak_bytes, 2 * 9 * 4);
    char *sum = summary_of(g);
    assert_non_null(strstr(sum, "binary_scalar:mul"));
    free(sum);
    check_dot(g, true);
    em_tensor_release(w), em_tensor_release(w2);
    em_graph_release(g);
}

/* A step of thousands of calls: a valid digraph and summary, written quickly. */
static void test_big_step(void **state) {
    (void)state;
    const em_device cap = dev_of("capture");
    em_graph *g = NULL;
    OK(em_graph_begin(&g));
    em_tensor *w = param(cap, (const int64_t[]){4, 4}, 2), *x = NULL;
    OK(em_graph_input(g, "x", EM_F32, (const int64_t[]){4, 4}, 2, cap, &x));
    em_tensor *cur = x, *parts[3];
    em_tensor_retain(cur);
    for (int i = 0; i < 3000; i++) {
        em_tensor *next = NULL;
        if (i % 3 == 0) OK(em_relu(cur, &next));
        else if (i % 3 == 1) OK(em_add(cur, x, &next));
        else OK(em_matmul(cur, w, &next));
        em_tensor_release(cur);
        cur = next;
    }
    /* a buffer written in pieces (cat): its reader depends on each */
    parts[0] = cur, parts[1] = x, parts[2] = w;
    em_tensor *c = NULL, *s = NULL;
    OK(em_cat((const em_tensor *const *)parts, 3, 0, &c));
    OK(em_sum(c, &s));
    OK(em_graph_output(g, "total", s));
    OK(em_graph_output(g, "last", cur));
    OK(em_graph_end(g));
    em_graph_stats st;
    OK(em_graph_stats_of(g, &st));
    assert_true(st.kernels >= 3000 + 3 + 1);
    assert_int_equal(st.flops, 1000 * 2 * 4 * 4 * 4 + 2000 * 16 + 3 * 16);
    char *sum = summary_of(g);
    assert_non_null(strstr(sum, "copy"));
    free(sum);
    check_dot(g, false);
    em_tensor_release(w), em_tensor_release(x), em_tensor_release(cur);
    em_tensor_release(c), em_tensor_release(s);
    em_graph_release(g);
}

/* How many edges of the dot text end at the node labelled `label` (its first line). */
static int edges_into(const char *dot, const char *label) {
    char want[128], id[32], tail[48];
    snprintf(want, sizeof want, " [label=\"%s", label);
    const char *at = strstr(dot, want);
    assert_non_null(at);
    const char *line = at;
    while (line > dot && line[-1] != '\n') line--;
    assert_int_equal(sscanf(line, "  %31[a-z0-9]", id), 1);
    snprintf(tail, sizeof tail, " -> %s;", id);
    int n = 0;
    for (const char *p = strstr(dot, tail); p; p = strstr(p + 1, tail)) n++;
    return n;
}

/* A buffer written in pieces (cat): its reader has an edge from each piece's copy, and each
 * copy one from what it copies. */
static void test_edges(void **state) {
    (void)state;
    const em_device cap = dev_of("capture");
    em_graph *g = NULL;
    OK(em_graph_begin(&g));
    em_tensor *x = NULL, *y = NULL, *c = NULL, *s = NULL;
    OK(em_graph_input(g, "x", EM_F32, (const int64_t[]){2, 3}, 2, cap, &x));
    OK(em_exp(x, &y));
    OK(em_cat((const em_tensor *const[]){y, x}, 2, 0, &c));
    OK(em_sum(c, &s));
    OK(em_graph_output(g, "s", s));
    OK(em_graph_end(g));
    char path[512];
    temp_path(path, sizeof path, "edges");
    OK(em_graph_write_dot(g, path));
    char *dot = slurp_path(path);
    assert_int_equal(edges_into(dot, "reduce:sum f32 []"), 2);
    assert_int_equal(edges_into(dot, "unary:exp f32 [2, 3]"), 1);
    assert_int_equal(edges_into(dot, "s\\n"), 1);
    assert_int_equal(edges_into(dot, "x\\n"), 0);
    free(dot);
    remove(path);
    em_tensor_release(x), em_tensor_release(y), em_tensor_release(c), em_tensor_release(s);
    em_graph_release(g);
}

/* Batch norm is recorded as its fused call and its composition: the picture has one node
 * for both, the FLOPs are the composition's, the summary names the fused alternative. */
static void test_fused_alternative(void **state) {
    (void)state;
    const em_device cap = dev_of("capture");
    em_graph *g = NULL;
    OK(em_graph_begin(&g));
    em_tensor *rm = param(cap, (const int64_t[]){3}, 1), *rv = param(cap, (const int64_t[]){3}, 1);
    em_tensor *w = param(cap, (const int64_t[]){3}, 1), *b = param(cap, (const int64_t[]){3}, 1);
    em_tensor *x = NULL, *y = NULL;
    OK(em_graph_input(g, "x", EM_F32, (const int64_t[]){4, 3, 2, 2}, 4, cap, &x));
    OK(em_batch_norm(x, rm, rv, w, b, true, 0.1, 1e-5, &y));
    OK(em_graph_output(g, "y", y));
    OK(em_graph_end(g));
    int64_t alts = 0;
    for (uint64_t i = g->setup_end; i < g->nsteps; i++) alts += g->steps[i].type == GR_ALT;
    assert_int_equal(alts, 1);
    em_graph_stats st;
    OK(em_graph_stats_of(g, &st));
    assert_true(st.kernels - st.setup_kernels > 1); /* the composition */
    assert_true(st.flops >= 48);
    char *sum = summary_of(g);
    assert_non_null(strstr(sum, "fused alternatives: batch_norm 1"));
    free(sum);
    char path[512];
    temp_path(path, sizeof path, "bn");
    OK(em_graph_write_dot(g, path));
    char *dot = slurp_path(path);
    /* the slot's view of x: [N, C, H * W] */
    assert_non_null(strstr(dot, "[label=\"batch_norm f32 [4, 3, 4]\", peripheries=2]"));
    free(dot);
    remove(path);
    check_dot(g, true);
    em_tensor *all[] = {rm, rv, w, b, x, y};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) em_tensor_release(all[i]);
    em_graph_release(g);
}

static void test_bad_arguments(void **state) {
    (void)state;
    em_graph *g = NULL;
    OK(em_graph_begin(&g));
    OK(em_graph_end(g));
    em_graph_stats st;
    assert_int_equal(em_graph_stats_of(NULL, &st), EM_ERR_ARG);
    assert_int_equal(em_graph_stats_of(g, NULL), EM_ERR_ARG);
    assert_int_equal(em_graph_write_summary(NULL, stdout), EM_ERR_ARG);
    assert_int_equal(em_graph_write_summary(g, NULL), EM_ERR_ARG);
    assert_int_equal(em_graph_write_dot(NULL, "x.dot"), EM_ERR_ARG);
    assert_int_equal(em_graph_write_dot(g, NULL), EM_ERR_ARG);
    assert_int_equal(em_graph_write_dot(g, "/nonexistent-dir/ember/g.dot"), EM_ERR_IO);
    assert_non_null(strstr(em_last_error(), "em_graph_write_dot"));
    /* a device that takes nothing: the write fails when flushed */
    if (access("/dev/full", W_OK) == 0) {
        assert_int_equal(em_graph_write_dot(g, "/dev/full"), EM_ERR_IO);
        FILE *full = fopen("/dev/full", "w");
        assert_non_null(full);
        assert_int_equal(em_graph_write_summary(g, full), EM_ERR_IO);
        fclose(full);
    }
    /* an empty graph: zeros, and still a digraph */
    OK(em_graph_stats_of(g, &st));
    assert_int_equal(st.kernels, 0);
    assert_int_equal(st.peak_bytes, 0);
    check_dot(g, true);
    em_graph_release(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_flops),  cmocka_unit_test(test_mlp_step),
        cmocka_unit_test(test_training_step), cmocka_unit_test(test_setup_only),
        cmocka_unit_test(test_big_step),      cmocka_unit_test(test_edges),
        cmocka_unit_test(test_fused_alternative), cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
