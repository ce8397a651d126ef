/* gpt_scope.c — a one-block GPT trained for a few steps on cpu+autodiff, its forward written
 * with plain ember calls and no release of any intermediate: each step runs in a tensor scope
 * (em_scope_begin / em_scope_end), which releases every tensor the step made. The parameters
 * (modules) and Adam's state are kept by their owners. Then a few tokens sampled greedily in a
 * no-grad scope, again without a release.
 *
 * Run: gpt_scope [steps]   (prints the loss of each step; it falls) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <ember/ember.h>
#include <ember/nn.h>

#define CK(call)                                                                              \
    do {                                                                                      \
        if ((call) != EM_OK) {                                                                \
            fprintf(stderr, "%s: %s\n", #call, em_last_error());                              \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

enum { V = 16, T = 8, B = 2, C = 16, H = 2, D = C / H };

typedef struct gpt {
    em_module *wte, *wpe, *ln1, *attn, *proj, *ln2, *fc, *fc_proj, *lnf, *head;
    em_tensor *pos; /* [T] 0..T-1 */
} gpt;

/* logits [B*T, V] of idx [B, T]: no release needed inside a scope */
static em_tensor *forward(gpt *g, const em_tensor *idx, bool training) {
    em_tensor *te, *pe, *x, *h, *qkv, *parts[3], *q4[3], *qh[3], *y, *yt, *yc, *p, *x2;
    size_t n;
    CK(em_module_forward(g->wte, idx, training, &te));
    CK(em_module_forward(g->wpe, g->pos, training, &pe));
    CK(em_add(te, pe, &x)); /* [B, T, C] */
    CK(em_module_forward(g->ln1, x, training, &h));
    CK(em_module_forward(g->attn, h, training, &qkv)); /* [B, T, 3C] */
    CK(em_split(qkv, C, 2, parts, 3, &n));
    for (int i = 0; i < 3; i++) {
        CK(em_reshape(parts[i], (const int64_t[]){B, T, H, D}, 4, &q4[i]));
        CK(em_transpose(q4[i], 1, 2, &qh[i])); /* [B, H, T, D] */
    }
    CK(em_scaled_dot_product_attention(qh[0], qh[1], qh[2], NULL, 0.0, true, 1.0 / sqrt(D), 0,
                                       &y));
    CK(em_transpose(y, 1, 2, &yt));
    CK(em_reshape(yt, (const int64_t[]){B, T, C}, 3, &yc));
    CK(em_module_forward(g->proj, yc, training, &p));
    CK(em_add(x, p, &x2));
    em_tensor *m1, *m2, *m3, *m4, *x3, *hf, *logits, *flat;
    CK(em_module_forward(g->ln2, x2, training, &m1));
    CK(em_module_forward(g->fc, m1, training, &m2));
    CK(em_gelu(m2, &m3));
    CK(em_module_forward(g->fc_proj, m3, training, &m4));
    CK(em_add(x2, m4, &x3));
    CK(em_module_forward(g->lnf, x3, training, &hf));
    CK(em_module_forward(g->head, hf, training, &logits));
    CK(em_reshape(logits, (const int64_t[]){B * T, V}, 2, &flat));
    return flat;
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 30;
    em_device dev, in;
    CK(em_device_parse("cpu+autodiff", &dev));
    CK(em_device_parse("cpu", &in));
    em_module_opts o = em_module_opts_default(dev, 1);
    gpt g;
    CK(em_nn_embedding(V, C, &o, &g.wte));
    CK(em_nn_embedding(T, C, &o, &g.wpe));
    CK(em_nn_layer_norm(C, &o, &g.ln1));
    CK(em_nn_linear(C, 3 * C, true, &o, &g.attn));
    CK(em_nn_linear(C, C, true, &o, &g.proj));
    CK(em_nn_layer_norm(C, &o, &g.ln2));
    CK(em_nn_linear(C, 4 * C, true, &o, &g.fc));
    CK(em_nn_linear(4 * C, C, true, &o, &g.fc_proj));
    CK(em_nn_layer_norm(C, &o, &g.lnf));
    CK(em_nn_linear(C, V, false, &o, &g.head));
    em_module *all[] = {g.wte, g.wpe, g.ln1, g.attn, g.proj, g.ln2, g.fc, g.fc_proj, g.lnf, g.head};
    const char *names[] = {"wte", "wpe", "ln1", "attn", "proj", "ln2", "fc", "fc_proj", "lnf",
                           "head"};
    em_params *ps;
    CK(em_params_create(&ps));
    for (int i = 0; i < 10; i++) CK(em_module_params(all[i], names[i], ps));
    em_optimizer *opt;
    CK(em_optimizer_adamw(ps, 1e-2, 0.9, 0.999, 1e-8, 0.01, &opt));

    /* data: the sequence 0, 1, 2, ... mod V, shifted by one for the targets */
    int64_t idx[B * T], tgt[B * T], pos[T];
    for (int i = 0; i < B * T; i++) idx[i] = (i * 3) % V, tgt[i] = (i * 3 + 3) % V;
    for (int i = 0; i < T; i++) pos[i] = i;
    em_tensor *x, *y;
    CK(em_tensor_from_data(idx, EM_I64, (const int64_t[]){B, T}, 2, in, &x));
    CK(em_tensor_from_data(tgt, EM_I64, (const int64_t[]){B * T}, 1, in, &y));
    CK(em_tensor_from_data(pos, EM_I64, (const int64_t[]){T}, 1, in, &g.pos));

    for (int s = 0; s < steps; s++) {
        CK(em_scope_begin());
        em_tensor *loss;
        em_grads *gr;
        CK(em_loss_cross_entropy(forward(&g, x, true), y, &loss));
        CK(em_backward(loss, &gr));
        CK(em_optimizer_step(opt, gr, 1.0));
        double l;
        CK(em_tensor_item(loss, &l));
        em_grads_release(gr);
        CK(em_scope_end());
        em_memory_stats st;
        CK(em_device_memory(in, &st)); /* the same after every step */
        printf("step %2d loss %.4f bytes in use %zu\n", s, l, st.bytes_in_use);
    }

    /* greedy next tokens of the first row, without recording */
    bool was = em_set_grad_enabled(false);
    CK(em_scope_begin());
    em_tensor *am;
    CK(em_argmax_dim(forward(&g, x, false), -1, false, &am));
    int64_t pred[B * T];
    CK(em_tensor_to_data(am, pred, sizeof pred));
    printf("next tokens:");
    for (int i = 0; i < T; i++) printf(" %lld", (long long)pred[i]);
    printf("  (want");
    for (int i = 0; i < T; i++) printf(" %lld", (long long)tgt[i]);
    printf(")\n");
    CK(em_scope_end());
    em_set_grad_enabled(was);

    em_tensor_release(x), em_tensor_release(y), em_tensor_release(g.pos);
    em_optimizer_release(opt);
    em_params_release(ps);
    for (int i = 0; i < 10; i++) em_module_release(all[i]);
    return 0;
}
