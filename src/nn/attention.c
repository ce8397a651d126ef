/* attention.c — MultiheadAttention (self-attention, batch first, causal flag, key padding
 * mask) and a pre-LN transformer block, composed from public ops; parameter names follow
 * torch.nn.MultiheadAttention's (in_proj_weight, in_proj_bias, out_proj.weight, ...). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "nn/nn_internal.h"

typedef struct mha_data {
    int64_t embed, heads;
    double dropout;
    bool causal;
    uint64_t seed; /* dropout's, advanced by each training forward */
} mha_data;

em_status em_nn_mha_forward(em_module *m, const em_tensor *x, const em_tensor *key_padding_mask,
                            bool training, em_tensor **y) {
    static const char fn[] = "em_nn_mha_forward";
    if (!m) return nn_null(fn, "module");
    if (!x) return nn_null(fn, "x");
    if (!y) return nn_null(fn, "y");
    mha_data *d = em_module_data(m);
    if (!d || em_module_get(m, "in_proj_weight") == NULL || !em_module_child(m, "out_proj"))
        return em_backend_set_error(EM_ERR_ARG, "%s: the module is a %s, not a "
                                    "MultiheadAttention", fn, em_module_type(m));
    const int64_t E = d->embed, H = d->heads, D = E / H;
    if (em_tensor_rank(x) != 3 || em_tensor_shape(x)[2] != E)
        return em_backend_set_error(EM_ERR_SHAPE, "%s: x must be [B, T, %lld], got rank %d", fn,
                                    (long long)E, em_tensor_rank(x));
    const int64_t B = em_tensor_shape(x)[0], T = em_tensor_shape(x)[1];
    if (key_padding_mask &&
        (em_tensor_dtype(key_padding_mask) != EM_BOOL || em_tensor_rank(key_padding_mask) != 2 ||
         em_tensor_shape(key_padding_mask)[0] != B || em_tensor_shape(key_padding_mask)[1] != T))
        return em_backend_set_error(EM_ERR_SHAPE, "%s: key_padding_mask must be bool [%lld, "
                                    "%lld] (true: a padded key)", fn, (long long)B,
                                    (long long)T);
    nn_tmps tm = {{0}, 0};
    em_status s = EM_OK;
    em_tensor *wt = NULL, *qkv = NULL, *qkvb = NULL, *parts[3] = {NULL, NULL, NULL};
    NN_STEP(em_transpose(em_module_get(m, "in_proj_weight"), 0, 1, &wt), wt);
    NN_STEP(em_matmul(x, wt, &qkv), qkv);
    em_tensor *b = em_module_get(m, "in_proj_bias");
    if (b) NN_STEP(em_add(qkv, b, &qkvb), qkvb);
    size_t count = 0;
    if (s == EM_OK) {
        s = em_split(qkvb ? qkvb : qkv, E, 2, parts, 3, &count);
        for (size_t i = 0; i < count; i++) tm.t[tm.n++] = parts[i];
    }
    /* [B, T, E] -> [B, H, T, D] */
    em_tensor *heads[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3 && s == EM_OK; i++) {
        em_tensor *r = NULL;
        NN_STEP(em_reshape(parts[i], (const int64_t[]){B, T, H, D}, 4, &r), r);
        NN_STEP(em_transpose(r, 1, 2, &heads[i]), heads[i]);
    }
    /* key padding (true: padded) as scaled_dot_product_attention's mask (true: attend) */
    em_tensor *km = NULL, *keep = NULL, *ctx = NULL, *ctxt = NULL, *ctxc = NULL, *merged = NULL;
    if (key_padding_mask) {
        NN_STEP(em_reshape(key_padding_mask, (const int64_t[]){B, 1, 1, T}, 4, &km), km);
        NN_STEP(em_logical_not(km, &keep), keep);
    }
    const double p = training ? d->dropout : 0;
    NN_STEP(em_scaled_dot_product_attention(heads[0], heads[1], heads[2], keep, p, d->causal,
                                            0, d->seed, &ctx),
            ctx);
    if (s == EM_OK && p > 0) d->seed++;
    NN_STEP(em_transpose(ctx, 1, 2, &ctxt), ctxt);
    NN_STEP(em_contiguous(ctxt, &ctxc), ctxc);
    NN_STEP(em_reshape(ctxc, (const int64_t[]){B, T, E}, 3, &merged), merged);
    if (s == EM_OK) s = em_module_forward(em_module_child(m, "out_proj"), merged, training, y);
    nn_tmps_free(&tm);
    return s;
}

static em_status mha_forward(em_module *self, const em_tensor *x, bool training, em_tensor **y) {
    return em_nn_mha_forward(self, x, NULL, training, y);
}

static void mha_describe(const em_module *self, char *buf, size_t cap) {
    const mha_data *d = em_module_data(self);
    snprintf(buf, cap, "embed %lld, heads %lld%s%s", (long long)d->embed, (long long)d->heads,
             d->causal ? ", causal" : "", d->dropout > 0 ? ", dropout" : "");
}

static const em_module_class mha_class = {"MultiheadAttention", mha_forward, mha_describe,
                                          free};

em_status em_nn_multihead_attention(int64_t embed_dim, int64_t num_heads, bool bias,
                                    double dropout, bool causal, em_module_opts *opts,
                                    em_module **out) {
    static const char fn[] = "em_nn_multihead_attention";
    if (!out) return nn_null(fn, "out");
    if (embed_dim < 1 || num_heads < 1 || embed_dim % num_heads != 0)
        return em_backend_set_error(EM_ERR_ARG, "%s: num_heads (%lld) must be >= 1 and divide "
                                    "embed_dim (%lld)", fn, (long long)num_heads,
                                    (long long)embed_dim);
    if (!(dropout >= 0 && dropout < 1))
        return em_backend_set_error(EM_ERR_ARG, "%s: dropout must be in [0, 1), got %g", fn,
                                    dropout);
    em_module_opts o;
    NN_TRY(nn_check_opts(fn, opts, &o));
    em_module *m = NULL;
    mha_data *d = NULL;
    NN_TRY(nn_new(fn, &mha_class, sizeof *d, &m, (void **)&d));
    *d = (mha_data){embed_dim, num_heads, dropout, causal, nn_derive(o.seed, 7)};
    /* torch: in_proj_weight xavier_uniform, in_proj_bias and out_proj.bias zeros, out_proj's
     * weight Linear's default */
    int64_t ws[2] = {3 * embed_dim, embed_dim};
    double a = sqrt(6.0 / (double)(embed_dim + 3 * embed_dim));
    em_tensor *w = NULL, *bb = NULL;
    em_status s = nn_param(fn, &o, ws, 2, a, 0, nn_derive(o.seed, 0), &w);
    if (s == EM_OK) s = em_module_add_param(m, "in_proj_weight", w);
    if (s == EM_OK && bias) s = nn_param(fn, &o, &ws[0], 1, -1, 0.0, 0, &bb);
    if (s == EM_OK && bias) s = em_module_add_param(m, "in_proj_bias", bb);
    em_module *proj = NULL;
    em_module_opts po = o;
    po.seed = nn_derive(o.seed, 1);
    if (s == EM_OK) s = em_nn_linear(embed_dim, embed_dim, bias, &po, &proj);
    if (s == EM_OK && bias) {
        em_tensor *z = NULL;
        s = em_zeros((const int64_t[]){embed_dim}, 1, o.dtype, o.device, &z);
        if (s == EM_OK && o.device.autodiff) s = em_tensor_require_grad(z);
        if (s == EM_OK) s = em_module_set(proj, "bias", z);
        else em_tensor_release(z);
    }
    if (s == EM_OK) s = em_module_add_child(m, "out_proj", proj);
    else em_module_release(proj);
    if (s != EM_OK) {
        em_module_release(m);
        return s;
    }
    if (opts) opts->seed = nn_derive(opts->seed, 0x5eedull);
    *out = m;
    return EM_OK;
}

/* ---- a pre-LN transformer block: x + attn(ln1(x)), then + mlp(ln2(x)) ---- */

static em_status block_forward(em_module *self, const em_tensor *x, bool training,
                               em_tensor **y) {
    em_status s = EM_OK;
    nn_tmps tm = {{0}, 0};
    em_tensor *h1 = NULL, *a = NULL, *x1 = NULL, *h2 = NULL, *f = NULL;
    NN_STEP(em_module_forward(em_module_child(self, "ln1"), x, training, &h1), h1);
    NN_STEP(em_module_forward(em_module_child(self, "attn"), h1, training, &a), a);
    NN_STEP(em_add(x, a, &x1), x1);
    NN_STEP(em_module_forward(em_module_child(self, "ln2"), x1, training, &h2), h2);
    NN_STEP(em_module_forward(em_module_child(self, "mlp"), h2, training, &f), f);
    if (s == EM_OK) s = em_add(x1, f, y);
    nn_tmps_free(&tm);
    return s;
}

static const em_module_class block_class = {"TransformerBlock", block_forward, NULL, NULL};

em_status em_nn_transformer_block(int64_t embed_dim, int64_t num_heads, int64_t hidden,
                                  double dropout, bool causal, em_module_opts *opts,
                                  em_module **out) {
    static const char fn[] = "em_nn_transformer_block";
    if (!out) return nn_null(fn, "out");
    if (hidden < 1)
        return em_backend_set_error(EM_ERR_ARG, "%s: hidden must be >= 1, got %lld", fn,
                                    (long long)hidden);
    em_module_opts o;
    NN_TRY(nn_check_opts(fn, opts, &o));
    em_module *m = NULL, *ln1 = NULL, *attn = NULL, *ln2 = NULL, *mlp = NULL, *parts[4] = {0};
    em_status s = em_module_create(&block_class, NULL, &m);
    if (s == EM_OK) s = em_nn_layer_norm(embed_dim, &o, &ln1);
    if (s == EM_OK) s = em_module_add_child(m, "ln1", ln1);
    if (s == EM_OK) s = em_nn_multihead_attention(embed_dim, num_heads, true, dropout, causal,
                                                  &o, &attn);
    if (s == EM_OK) s = em_module_add_child(m, "attn", attn);
    if (s == EM_OK) s = em_nn_layer_norm(embed_dim, &o, &ln2);
    if (s == EM_OK) s = em_module_add_child(m, "ln2", ln2);
    size_t n = 0;
    if (s == EM_OK && (s = em_nn_linear(embed_dim, hidden, true, &o, &parts[n])) == EM_OK) n++;
    if (s == EM_OK && (s = em_nn_gelu(&parts[n])) == EM_OK) n++;
    if (s == EM_OK && (s = em_nn_linear(hidden, embed_dim, true, &o, &parts[n])) == EM_OK) n++;
    if (s == EM_OK && dropout > 0 && (s = em_nn_dropout(dropout, o.seed, &parts[n])) == EM_OK)
        n++;
    if (s == EM_OK) s = em_nn_sequential(parts, n, &mlp);
    else
        for (size_t i = 0; i < n; i++) em_module_release(parts[i]);
    if (s == EM_OK) s = em_module_add_child(m, "mlp", mlp);
    if (s != EM_OK) {
        em_module_release(m);
        return s;
    }
    if (opts) *opts = o;
    *out = m;
    return EM_OK;
}
