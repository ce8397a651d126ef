/* capture_mlp.c — one SGD training step of a small MLP captured as a graph: recorded once on
 * capture+autodiff (forward, cross-entropy, backward, and the update p = p - lr * g written
 * with ops), saved to one file with its initial parameters, drawn as a Graphviz picture of the
 * step, then replayed a few times on the default device, where the captured update trains the
 * parameters from run to run and the loss falls.
 *
 * Run: capture_mlp [GRAPH.safetensors [STEP.dot]]
 *      (defaults capture_mlp.safetensors and capture_mlp.dot; then e.g.
 *       dot -Tsvg capture_mlp.dot -o capture_mlp.svg, or ember-graph capture_mlp.safetensors) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <ember/ember.h>
#include <ember/graph.h>

#define CK(call)                                                                              \
    do {                                                                                      \
        if ((call) != EM_OK) {                                                                \
            fprintf(stderr, "%s: %s\n", #call, em_last_error());                              \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

enum { N = 16, IN = 8, HID = 16, OUT = 4 }; /* batch, features, hidden units, classes */
static const double lr = 0.5;

/* Uniform numbers in [-scale, scale) from a fixed LCG: the same program on every machine. */
static void fill(float *v, int n, float scale, uint32_t *seed) {
    for (int i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        v[i] = scale * ((float)(*seed >> 8) / (float)(1u << 23) - 1.0f);
    }
}

int main(int argc, char **argv) {
    const char *graph_path = argc > 1 ? argv[1] : "capture_mlp.safetensors";
    const char *dot_path = argc > 2 ? argv[2] : "capture_mlp.dot";
    em_device cap;
    CK(em_device_parse("capture+autodiff", &cap));
    uint32_t seed = 1;

    /* ---- the setup: the parameters, made from data (they are the graph's state) ---- */
    em_graph *g = NULL;
    CK(em_graph_begin(&g));
    static const char *const names[4] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
    const int64_t shapes[4][2] = {{IN, HID}, {HID, 0}, {HID, OUT}, {OUT, 0}};
    em_tensor *p[4];
    for (int i = 0; i < 4; i++) {
        float v[IN * HID > HID * OUT ? IN * HID : HID * OUT];
        const int rank = shapes[i][1] ? 2 : 1;
        fill(v, (int)(shapes[i][0] * (rank == 2 ? shapes[i][1] : 1)), 0.5f, &seed);
        CK(em_tensor_from_data(v, EM_F32, shapes[i], rank, cap, &p[i]));
        CK(em_tensor_require_grad(p[i]));
        CK(em_graph_name(g, names[i], p[i]));
    }

    /* ---- the step: the batch in, forward, backward, the update, the loss out ---- */
    em_tensor *x, *labels, *h, *hb, *r, *y, *logits, *loss;
    CK(em_graph_input(g, "x", EM_F32, (const int64_t[]){N, IN}, 2, cap, &x));
    CK(em_graph_input(g, "labels", EM_I64, (const int64_t[]){N}, 1, cap, &labels));
    CK(em_matmul(x, p[0], &h));
    CK(em_add(h, p[1], &hb));
    CK(em_relu(hb, &r));
    CK(em_matmul(r, p[2], &y));
    CK(em_add(y, p[3], &logits));
    CK(em_cross_entropy(logits, labels, &loss));
    em_grads *grads;
    CK(em_backward(loss, &grads));
    for (int i = 0; i < 4; i++) { /* SGD: p = p - lr * g, in place */
        em_tensor *gp, *step, *next;
        CK(em_grads_get(grads, p[i], &gp));
        CK(em_mul_scalar(gp, lr, &step));
        CK(em_sub(p[i], step, &next));
        CK(em_tensor_assign_(p[i], next)); /* consumes next */
        em_tensor_release(gp), em_tensor_release(step);
    }
    em_grads_release(grads);
    CK(em_graph_output(g, "loss", loss));
    CK(em_graph_end(g));
    em_tensor *made[] = {x, labels, h, hb, r, y, logits, loss, p[0], p[1], p[2], p[3]};
    for (size_t i = 0; i < sizeof made / sizeof made[0]; i++) em_tensor_release(made[i]);

    /* ---- look at it, save it ---- */
    CK(em_graph_write_summary(g, stdout));
    CK(em_graph_save(g, graph_path));
    CK(em_graph_write_dot(g, dot_path));
    printf("\nsaved %s, drew the step in %s\n\n", graph_path, dot_path);

    /* ---- replay it: one batch, five steps, on the default device ---- */
    const em_device dev = em_device_default();
    float xv[N * IN];
    int64_t lv[N];
    fill(xv, N * IN, 1.0f, &seed);
    for (int i = 0; i < N; i++) lv[i] = (xv[i * IN] > 0) + 2 * (xv[i * IN + 1] > 0);
    em_tensor *in[2];
    CK(em_tensor_from_data(xv, EM_F32, (const int64_t[]){N, IN}, 2, dev, &in[0]));
    CK(em_tensor_from_data(lv, EM_I64, (const int64_t[]){N}, 1, dev, &in[1]));
    em_exec *e;
    CK(em_graph_prepare(g, dev, &e));
    for (int step = 0; step < 5; step++) {
        em_tensor *out;
        double l;
        CK(em_exec_run(e, (const em_tensor *const *)in, 2, &out, 1));
        CK(em_tensor_item(out, &l));
        printf("run %d: loss %.4f\n", step + 1, l);
        em_tensor_release(out);
    }
    em_exec_release(e);
    em_tensor_release(in[0]), em_tensor_release(in[1]);
    em_graph_release(g);
    return 0;
}
