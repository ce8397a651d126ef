/*
 * ember-models — the training step and the inference forward of three models written against
 * ember's public API the way a user writes them: a small GPT, a small ResNet with batch norm
 * (em_batch_norm, as the PyTorch twin's nn.BatchNorm2d), and an MLP. bench/models_vs_torch.py runs their PyTorch twins beside them.
 *
 * Usage: ember-models gpt|resnet|mlp [--mode train|infer|both] [--device D] [--warmup W]
 *                     [--steps N] [--profile] [--check REF_DEVICE] [--seed S]
 *                     [--batch B] [--ckpt disabled|balanced|compare] [--regions R]
 *                     [model sizes, see --help]
 *
 * Each timed step is one forward + loss + backward + optimizer step (train) on D+autodiff, or
 * one forward to the logits (infer) on D itself (no autodiff). It prints one line per mode:
 *   result model=gpt mode=train device=cpu threads=1 steps=N median_ms=X min_ms=Y loss=L
 * --profile adds, per mode, the time of each ember call of the forward (summed over the timed
 * steps, the cpu backend is synchronous) and of backward and the optimizer step:
 *   prof model=gpt mode=train op=matmul calls=C ms=X pct=P
 * --check R runs two training steps and one inference forward on D and on R (e.g. ref) from
 * the same seed and prints the losses; exit 1 when they differ by more than 1e-4 (relative).
 * --ckpt compare trains the model under DISABLED, BALANCED and DISABLED with a checkpoint
 * region every R blocks (run_compare), in one process, and prints peak memory, what backward
 * starts with, peak RSS and step time of each (`ember-bench checkpoint --model` runs this).
 * Exit status: 0 on success, 2 for a bad flag, 1 for any other failure.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ember/ember.h"
#include "ember/nn.h"

/* ---- plumbing: failure, a per-step list of tensors to release, timing ---------------------- */

static const char *g_where = "";

static void die(const char *call) {
    fprintf(stderr, "ember-models: %s: %s: %s\n", g_where, call, em_last_error());
    exit(1);
}
#define CK(call)                                                                               \
    do {                                                                                       \
        if ((call) != EM_OK) die(#call);                                                       \
    } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Every intermediate of a step is kept here and released at its end. */
static em_tensor **g_keep;
static size_t g_nkeep, g_capkeep;
/* --ckpt compare runs the steps in tensor scopes instead (g_scoped): each block's
 * intermediates are released when the block ends, as a Python user's references die, so that
 * a step's peak is what the tape keeps plus one block's temporaries. */
static bool g_scoped;
static em_tensor *keep(em_tensor *t) {
    if (g_scoped) return t; /* the innermost scope releases it */
    if (g_nkeep == g_capkeep) {
        g_capkeep = g_capkeep ? 2 * g_capkeep : 1024;
        g_keep = realloc(g_keep, g_capkeep * sizeof *g_keep);
        if (!g_keep) die("realloc");
    }
    g_keep[g_nkeep++] = t;
    return t;
}
/* In scopes, a temporary's handle goes where a Python program's reference would die (the
 * expression that used it is done, or the variable is reassigned), so that what outlives an
 * op is what the tape keeps: the tape's own references are not the handle's. Outside scopes
 * every intermediate waits for the step's end (release_kept). */
static void drop(em_tensor *t) {
    if (g_scoped) em_tensor_release(t);
}
static void release_kept(void) {
    for (size_t i = 0; i < g_nkeep; i++) em_tensor_release(g_keep[i]);
    g_nkeep = 0;
}

/* The per-op profile of the forward: each wrapper adds its wall time to its op's row. */
static bool g_profile;
typedef struct prof_row {
    const char *op;
    long calls;
    double s;
} prof_row;
static prof_row g_prof[64];
static int g_nprof;
static void prof_add(const char *op, double s) {
    int i = 0;
    while (i < g_nprof && strcmp(g_prof[i].op, op) != 0) i++;
    if (i == g_nprof) {
        if (g_nprof == 64) return;
        g_prof[g_nprof++] = (prof_row){op, 0, 0};
    }
    g_prof[i].calls++;
    g_prof[i].s += s;
}
#define OP(name, call)                                                                         \
    do {                                                                                       \
        double t0_ = g_profile ? now_s() : 0;                                                  \
        CK(call);                                                                              \
        if (g_profile) prof_add(name, now_s() - t0_);                                          \
    } while (0)

/* ---- the ops a model calls, each returning a kept reference -------------------------------- */

static em_tensor *fwd(em_module *m, const em_tensor *x, const char *name) {
    em_tensor *y;
    OP(name, em_module_forward(m, x, true, &y));
    return keep(y);
}
#define BIN(fn, label)                                                                         \
    static em_tensor *fn(const em_tensor *a, const em_tensor *b) {                             \
        em_tensor *o;                                                                          \
        OP(label, em_##fn(a, b, &o));                                                          \
        return keep(o);                                                                        \
    }
BIN(add, "add")
BIN(matmul, "matmul")
static em_tensor *mul_scalar(const em_tensor *a, double s) {
    em_tensor *o;
    OP("mul_scalar", em_mul_scalar(a, s, &o));
    return keep(o);
}
static em_tensor *relu(const em_tensor *a) {
    em_tensor *o;
    OP("relu", em_relu(a, &o));
    return keep(o);
}
static em_tensor *reshape(const em_tensor *a, const int64_t *shape, int rank) {
    em_tensor *o;
    OP("reshape", em_reshape(a, shape, rank, &o));
    return keep(o);
}
static em_tensor *transpose(const em_tensor *a, int d0, int d1) {
    em_tensor *o;
    OP("transpose", em_transpose(a, d0, d1, &o));
    return keep(o);
}
static em_tensor *contiguous(const em_tensor *a) {
    em_tensor *o;
    OP("contiguous", em_contiguous(a, &o));
    return keep(o);
}
static em_tensor *softmax(const em_tensor *a, int dim) {
    em_tensor *o;
    OP("softmax", em_softmax(a, dim, &o));
    return keep(o);
}
static em_tensor *masked_fill(const em_tensor *a, const em_tensor *mask, double v) {
    em_tensor *o;
    OP("masked_fill", em_masked_fill(a, mask, v, &o));
    return keep(o);
}
static em_tensor *embedding(const em_tensor *w, const em_tensor *idx) {
    em_tensor *o;
    OP("embedding", em_embedding(w, idx, &o));
    return keep(o);
}
static em_tensor *adaptive_avg_pool(const em_tensor *a) {
    em_tensor *o;
    OP("adaptive_avg_pool2d", em_adaptive_avg_pool2d(a, 1, 1, &o));
    return keep(o);
}
static em_tensor *flatten1(const em_tensor *a) {
    em_tensor *o;
    OP("flatten", em_flatten(a, 1, -1, &o));
    return keep(o);
}
static em_tensor *cross_entropy(const em_tensor *logits, const em_tensor *y) {
    em_tensor *o;
    OP("cross_entropy", em_loss_cross_entropy(logits, y, &o));
    return keep(o);
}

/* ---- blocks: tensor scopes and checkpoint regions ------------------------------------------- */

/* --ckpt compare's third run: every g_region_every blocks (GPT's transformer blocks, ResNet's
 * residual blocks, the MLP's Linear + GELU layers) make one checkpoint region, as
 * torch.utils.checkpoint around them: their activations are recomputed in backward. */
static long g_region_every;

static void block_begin(long l) {
    if (g_region_every && l % g_region_every == 0) CK(em_checkpoint_begin());
    if (g_scoped) CK(em_scope_begin());
}

/* x, the block's output, outlives it */
static void block_end(em_tensor *x, long l, long nblocks) {
    if (g_scoped) {
        CK(em_scope_keep(x));
        CK(em_scope_end());
    }
    if (g_region_every && ((l + 1) % g_region_every == 0 || l + 1 == nblocks))
        CK(em_checkpoint_end());
}

/* ---- parameters: a set of named slots, created on the model's device ------------------------ */

typedef struct model_base {
    em_device dev;   /* where the parameters live (autodiff for training) */
    em_device inner; /* the backend device (the device itself for inference) */
    bool training;
    uint64_t seed;   /* advanced for every layer */
    em_params *params;
} model_base;

static em_module_opts opts_of(model_base *b) {
    em_module_opts o = em_module_opts_default(b->dev, ++b->seed);
    return o;
}
static em_module *add_module(model_base *b, em_module *m, const char *name) {
    CK(em_module_params(m, name, b->params));
    return m;
}
static em_module *linear(model_base *b, int64_t in, int64_t out, bool bias, const char *name) {
    em_module *m;
    em_module_opts o = opts_of(b);
    CK(em_nn_linear(in, out, bias, &o, &m));
    return add_module(b, m, name);
}
static em_module *layer_norm(model_base *b, int64_t size, const char *name) {
    em_module *m;
    em_module_opts o = opts_of(b);
    CK(em_nn_layer_norm(size, &o, &m));
    return add_module(b, m, name);
}
static em_module *conv(model_base *b, int64_t in, int64_t out, int64_t k, int64_t stride,
                       const char *name) {
    em_module *m;
    em_module_opts o = opts_of(b);
    CK(em_nn_conv2d(in, out, k, stride, k / 2, false, &o, &m));
    return add_module(b, m, name);
}
/** A raw parameter tensor (embeddings, batch norm's scale and shift). */
static void param(model_base *b, em_tensor **slot, const int64_t *shape, int rank, double std,
                  double fill, const char *name) {
    if (std > 0)
        CK(em_rand_normal(shape, rank, EM_F32, 0.0, std, ++b->seed, b->dev, slot));
    else
        CK(em_full(shape, rank, fill, EM_F32, b->dev, slot));
    if (b->training) CK(em_tensor_require_grad(*slot));
    CK(em_params_add(b->params, name, slot));
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_rand(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}
static em_tensor *random_labels(int64_t n, int64_t classes, em_device dev) {
    int64_t *v = malloc((size_t)n * sizeof *v);
    if (!v) die("malloc");
    for (int64_t i = 0; i < n; i++) v[i] = (int64_t)(next_rand() % (uint64_t)classes);
    em_tensor *t;
    CK(em_tensor_from_data(v, EM_I64, &n, 1, dev, &t));
    free(v);
    return t;
}

/* ---- the GPT ---------------------------------------------------------------------------- */

typedef struct gpt_cfg {
    int64_t vocab, ctx, embd, heads, layers, batch;
} gpt_cfg;

typedef struct gpt_block {
    em_module *ln1, *attn, *proj, *ln2, *fc, *fc_proj, *gelu;
} gpt_block;

typedef struct gpt {
    model_base b;
    gpt_cfg c;
    em_tensor *wte, *wpe;
    gpt_block *h;
    em_module *ln_f, *lm_head;
    em_tensor *mask; /* [T, T] bool, true above the diagonal (masked) */
    em_tensor *pos;  /* arange(T) */
} gpt;

static void gpt_init(gpt *g) {
    model_base *b = &g->b;
    gpt_cfg c = g->c;
    char name[64];
    param(b, &g->wte, (int64_t[]){c.vocab, c.embd}, 2, 0.02, 0, "wte");
    param(b, &g->wpe, (int64_t[]){c.ctx, c.embd}, 2, 0.02, 0, "wpe");
    g->h = calloc((size_t)c.layers, sizeof *g->h);
    if (!g->h) die("calloc");
    for (int64_t l = 0; l < c.layers; l++) {
        gpt_block *k = &g->h[l];
#define NAME(s) (snprintf(name, sizeof name, "h.%d.%s", (int)l, s), name)
        k->ln1 = layer_norm(b, c.embd, NAME("ln_1"));
        k->attn = linear(b, c.embd, 3 * c.embd, true, NAME("attn.c_attn"));
        k->proj = linear(b, c.embd, c.embd, true, NAME("attn.c_proj"));
        k->ln2 = layer_norm(b, c.embd, NAME("ln_2"));
        k->fc = linear(b, c.embd, 4 * c.embd, true, NAME("mlp.c_fc"));
        k->fc_proj = linear(b, 4 * c.embd, c.embd, true, NAME("mlp.c_proj"));
        CK(em_nn_gelu(&k->gelu));
#undef NAME
    }
    g->ln_f = layer_norm(b, c.embd, "ln_f");
    g->lm_head = linear(b, c.embd, c.vocab, false, "lm_head");
    int64_t T = c.ctx;
    unsigned char *m = malloc((size_t)(T * T));
    if (!m) die("malloc");
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < T; j++) m[i * T + j] = j > i;
    CK(em_tensor_from_data(m, EM_BOOL, (int64_t[]){T, T}, 2, b->inner, &g->mask));
    free(m);
    CK(em_arange(0, (double)T, 1, EM_I64, b->inner, &g->pos));
}

static void gpt_free(gpt *g) {
    for (int64_t l = 0; l < g->c.layers; l++) {
        gpt_block *k = &g->h[l];
        em_module_release(k->ln1);
        em_module_release(k->attn);
        em_module_release(k->proj);
        em_module_release(k->ln2);
        em_module_release(k->fc);
        em_module_release(k->fc_proj);
        em_module_release(k->gelu);
    }
    free(g->h);
    em_module_release(g->ln_f);
    em_module_release(g->lm_head);
    em_tensor_release(g->wte);
    em_tensor_release(g->wpe);
    em_tensor_release(g->mask);
    em_tensor_release(g->pos);
}

/** logits [B*T, V] of idx [B, T]. */
static em_tensor *gpt_forward(gpt *g, const em_tensor *idx) {
    gpt_cfg c = g->c;
    int64_t B = c.batch, T = c.ctx, C = c.embd, H = c.heads, D = C / H;
    em_tensor *te = embedding(g->wte, idx), *pe = embedding(g->wpe, g->pos);
    em_tensor *x = add(te, pe); /* [B, T, C] */
    drop(te);
    drop(pe);
    for (int64_t l = 0; l < c.layers; l++) {
        gpt_block *k = &g->h[l];
        block_begin(l);
        /* causal self-attention */
        em_tensor *h = fwd(k->ln1, x, "layer_norm");
        em_tensor *qkv = fwd(k->attn, h, "linear"); /* [B,T,3C] */
        drop(h);
        em_tensor *parts[3];
        size_t n;
        OP("split", em_split(qkv, C, 2, parts, 3, &n));
        drop(qkv);
        const int64_t bthd[4] = {B, T, H, D};
        em_tensor *qkvh[3]; /* q, k, v: [B,H,T,D] */
        for (int i = 0; i < 3; i++) {
            em_tensor *r = reshape(keep(parts[i]), bthd, 4);
            drop(parts[i]);
            qkvh[i] = transpose(r, 1, 2);
            drop(r);
        }
        em_tensor *kt = transpose(qkvh[1], -2, -1);
        em_tensor *sc = matmul(qkvh[0], kt);
        drop(kt);
        em_tensor *att = mul_scalar(sc, 1.0 / sqrt((double)D));
        drop(sc);
        em_tensor *am = masked_fill(att, g->mask, -INFINITY);
        drop(att);
        att = softmax(am, -1);
        drop(am);
        em_tensor *y = matmul(att, qkvh[2]); /* [B,H,T,D] */
        drop(att);
        for (int i = 0; i < 3; i++) drop(qkvh[i]);
        em_tensor *yt = transpose(y, 1, 2);
        drop(y);
        em_tensor *yc = contiguous(yt);
        drop(yt);
        y = reshape(yc, (int64_t[]){B, T, C}, 3);
        drop(yc);
        em_tensor *pr = fwd(k->proj, y, "linear");
        drop(y);
        em_tensor *x1 = add(x, pr);
        drop(pr);
        drop(x);
        x = x1;
        /* MLP */
        h = fwd(k->ln2, x, "layer_norm");
        em_tensor *m = fwd(k->fc, h, "linear");
        drop(h);
        h = fwd(k->gelu, m, "gelu");
        drop(m);
        m = fwd(k->fc_proj, h, "linear");
        drop(h);
        x1 = add(x, m);
        drop(m);
        drop(x);
        x = x1;
        block_end(x, l, c.layers);
    }
    em_tensor *h = fwd(g->ln_f, x, "layer_norm");
    drop(x);
    em_tensor *logits = fwd(g->lm_head, h, "linear");
    drop(h);
    em_tensor *out = reshape(logits, (int64_t[]){B * T, c.vocab}, 2);
    drop(logits);
    return out;
}

/* ---- the ResNet ------------------------------------------------------------------------- */

typedef struct resnet_cfg {
    int64_t batch, size, width, classes;
} resnet_cfg;

typedef struct bnorm {
    em_tensor *gamma, *beta; /* [C] parameters */
    em_tensor *rmean, *rvar; /* [C] running statistics (untracked, inner device) */
} bnorm;

typedef struct res_block {
    em_module *c1, *c2, *down; /* down: the 1x1 strided shortcut, or NULL */
    bnorm b1, b2, bd;
} res_block;

typedef struct resnet {
    model_base b;
    resnet_cfg c;
    em_module *stem;
    bnorm bstem;
    res_block blocks[3];
    em_module *fc;
} resnet;

static void bn_init(model_base *b, bnorm *n, int64_t ch, const char *name) {
    char s[80];
    const int64_t shape[1] = {ch};
    snprintf(s, sizeof s, "%s.weight", name);
    param(b, &n->gamma, shape, 1, 0, 1.0, s);
    snprintf(s, sizeof s, "%s.bias", name);
    param(b, &n->beta, shape, 1, 0, 0.0, s);
    CK(em_zeros(shape, 1, EM_F32, b->inner, &n->rmean));
    CK(em_ones(shape, 1, EM_F32, b->inner, &n->rvar));
}
static void bn_free(bnorm *n) {
    em_tensor_release(n->gamma);
    em_tensor_release(n->beta);
    em_tensor_release(n->rmean);
    em_tensor_release(n->rvar);
}

/** Batch norm as torch.nn.BatchNorm2d (em_batch_norm): batch statistics in training, the
 *  running ones (momentum 0.1, unbiased variance) updated in place; the running ones in eval. */
static em_tensor *bn(bnorm *n, const em_tensor *x, bool training) {
    em_tensor *o;
    OP("batch_norm", em_batch_norm(x, n->rmean, n->rvar, n->gamma, n->beta, training, 0.1, 1e-5,
                                   &o));
    return keep(o);
}

/** relu(bn(conv(x))) (or bn(conv(x))), the temporaries dropped as a Python program's. */
static em_tensor *conv_bn(em_module *c, bnorm *n, const em_tensor *x, bool training,
                          bool with_relu) {
    em_tensor *y = fwd(c, x, "conv2d");
    em_tensor *z = bn(n, y, training);
    drop(y);
    if (!with_relu) return z;
    em_tensor *o = relu(z);
    drop(z);
    return o;
}

static void resnet_init(resnet *r) {
    model_base *b = &r->b;
    int64_t w = r->c.width;
    r->stem = conv(b, 3, w, 3, 1, "conv1");
    bn_init(b, &r->bstem, w, "bn1");
    int64_t in = w;
    for (int s = 0; s < 3; s++) {
        res_block *k = &r->blocks[s];
        int64_t out = w << s, stride = s == 0 ? 1 : 2;
        char name[64];
        snprintf(name, sizeof name, "layer%d.conv1", s + 1);
        k->c1 = conv(b, in, out, 3, stride, name);
        snprintf(name, sizeof name, "layer%d.bn1", s + 1);
        bn_init(b, &k->b1, out, name);
        snprintf(name, sizeof name, "layer%d.conv2", s + 1);
        k->c2 = conv(b, out, out, 3, 1, name);
        snprintf(name, sizeof name, "layer%d.bn2", s + 1);
        bn_init(b, &k->b2, out, name);
        if (stride != 1 || in != out) {
            snprintf(name, sizeof name, "layer%d.downsample.0", s + 1);
            k->down = conv(b, in, out, 1, stride, name);
            snprintf(name, sizeof name, "layer%d.downsample.1", s + 1);
            bn_init(b, &k->bd, out, name);
        }
        in = out;
    }
    r->fc = linear(b, in, r->c.classes, true, "fc");
}

static void resnet_free(resnet *r) {
    em_module_release(r->stem);
    bn_free(&r->bstem);
    for (int s = 0; s < 3; s++) {
        res_block *k = &r->blocks[s];
        em_module_release(k->c1);
        em_module_release(k->c2);
        bn_free(&k->b1);
        bn_free(&k->b2);
        if (k->down) {
            em_module_release(k->down);
            bn_free(&k->bd);
        }
    }
    em_module_release(r->fc);
}

static em_tensor *resnet_forward(resnet *r, const em_tensor *in) {
    bool tr = r->b.training;
    em_tensor *x = conv_bn(r->stem, &r->bstem, in, tr, true);
    for (int s = 0; s < 3; s++) {
        res_block *k = &r->blocks[s];
        block_begin(s);
        em_tensor *o = conv_bn(k->c1, &k->b1, x, tr, true);
        em_tensor *o2 = conv_bn(k->c2, &k->b2, o, tr, false);
        drop(o);
        em_tensor *sc = k->down ? conv_bn(k->down, &k->bd, x, tr, false) : x;
        em_tensor *a = add(o2, sc);
        drop(o2);
        if (sc != x) drop(sc);
        drop(x);
        x = relu(a);
        drop(a);
        block_end(x, s, 3);
    }
    em_tensor *p = adaptive_avg_pool(x);
    drop(x);
    em_tensor *f = flatten1(p);
    drop(p);
    em_tensor *logits = fwd(r->fc, f, "linear");
    drop(f);
    return logits;
}

/* ---- the MLP ---------------------------------------------------------------------------- */

typedef struct mlp_cfg {
    int64_t batch, in, hidden, layers, classes;
} mlp_cfg;

typedef struct mlp {
    model_base b;
    mlp_cfg c;
    em_module *net; /* Sequential(Linear, GELU, ..., Linear) */
} mlp;

static void mlp_init(mlp *m) {
    model_base *b = &m->b;
    mlp_cfg c = m->c;
    size_t n = 0;
    em_module *mods[64];
    int64_t in = c.in;
    for (int64_t l = 0; l < c.layers; l++) {
        em_module_opts o = opts_of(b);
        CK(em_nn_linear(in, c.hidden, true, &o, &mods[n++]));
        CK(em_nn_gelu(&mods[n++]));
        in = c.hidden;
    }
    em_module_opts o = opts_of(b);
    CK(em_nn_linear(in, c.classes, true, &o, &mods[n++]));
    CK(em_nn_sequential(mods, n, &m->net));
    CK(em_module_params(m->net, "net", b->params));
}

/* ---- one binary, three models ------------------------------------------------------------ */

typedef enum model_kind { M_GPT, M_RESNET, M_MLP } model_kind;

typedef struct config {
    model_kind kind;
    const char *kind_name, *mode, *device, *check;
    long warmup, steps;
    long regions; /* --ckpt compare's third run: blocks a checkpoint region */
    uint64_t seed;
    gpt_cfg gpt;
    resnet_cfg res;
    mlp_cfg mlp;
} config;

/** A model instance with its data and (for training) its optimizer. */
typedef struct instance {
    config *cfg;
    model_base *base;
    gpt g;
    resnet r;
    mlp m;
    em_tensor *x, *y; /* inputs and labels */
    em_optimizer *opt;
    long regions; /* blocks a checkpoint region (0: none), see g_region_every */
} instance;

/* the checkpointing strategy of training instances (--ckpt) */
static em_checkpointing g_ckpt = EM_CKPT_DISABLED;
/* --ckpt compare measures what a step holds when backward begins (g_held_before_backward) */
static bool g_measure;
static size_t g_held_before_backward;

static void instance_make(instance *it, config *cfg, em_device inner, bool training) {
    memset(it, 0, sizeof *it);
    it->regions = g_region_every;
    it->cfg = cfg;
    em_device dev = inner;
    if (training) CK(em_device_autodiff(inner, g_ckpt, &dev));
    model_base *b = cfg->kind == M_GPT ? &it->g.b : cfg->kind == M_RESNET ? &it->r.b : &it->m.b;
    it->base = b;
    b->dev = dev;
    b->inner = inner;
    b->training = training;
    b->seed = cfg->seed;
    CK(em_params_create(&b->params));
    g_rng = 0x9E3779B97F4A7C15ull ^ cfg->seed;
    if (cfg->kind == M_GPT) {
        it->g.c = cfg->gpt;
        gpt_init(&it->g);
        gpt_cfg c = cfg->gpt;
        int64_t n = c.batch * c.ctx;
        em_tensor *flat = random_labels(n, c.vocab, dev);
        CK(em_reshape(flat, (int64_t[]){c.batch, c.ctx}, 2, &it->x));
        em_tensor_release(flat);
        it->y = random_labels(n, c.vocab, dev);
        if (training)
            CK(em_optimizer_adamw(b->params, 3e-4, 0.9, 0.95, 1e-8, 0.1, &it->opt));
    } else if (cfg->kind == M_RESNET) {
        it->r.c = cfg->res;
        resnet_init(&it->r);
        resnet_cfg c = cfg->res;
        CK(em_rand_normal((int64_t[]){c.batch, 3, c.size, c.size}, 4, EM_F32, 0, 1,
                          cfg->seed + 1000, dev, &it->x));
        it->y = random_labels(c.batch, c.classes, dev);
        if (training) CK(em_optimizer_sgd(b->params, 0.05, 0.9, 5e-4, &it->opt));
    } else {
        it->m.c = cfg->mlp;
        mlp_init(&it->m);
        /* a region every g_region_every layers: Linear + GELU are two modules */
        if (it->regions) CK(em_sequential_set_checkpoint(it->m.net, 2 * it->regions));
        mlp_cfg c = cfg->mlp;
        CK(em_rand_normal((int64_t[]){c.batch, c.in}, 2, EM_F32, 0, 1, cfg->seed + 1000, dev,
                          &it->x));
        it->y = random_labels(c.batch, c.classes, dev);
        if (training)
            CK(em_optimizer_adamw(b->params, 1e-3, 0.9, 0.999, 1e-8, 0.01, &it->opt));
    }
}

static void instance_free(instance *it) {
    em_optimizer_release(it->opt);
    if (it->cfg->kind == M_GPT) gpt_free(&it->g);
    else if (it->cfg->kind == M_RESNET) resnet_free(&it->r);
    else em_module_release(it->m.net);
    em_params_release(it->base->params);
    em_tensor_release(it->x);
    em_tensor_release(it->y);
}

static em_tensor *instance_forward(instance *it) {
    if (it->cfg->kind == M_GPT) return gpt_forward(&it->g, it->x);
    if (it->cfg->kind == M_RESNET) return resnet_forward(&it->r, it->x);
    return fwd(it->m.net, it->x, "sequential(linear,gelu)");
}

/** One step; returns the loss (train) or the mean of the logits (infer). With
 *  g_measure, *fwd_peak gets the device's peak before backward (the peak is
 *  then reset: the step's peak is the larger of the two). */
static double instance_step_ex(instance *it, size_t *fwd_peak) {
    double out = 0;
    g_region_every = it->regions;
    if (g_scoped) CK(em_scope_begin());
    /* in scopes, the forward's own: what it made (the stem's and the residual stream's
     * tensors) dies when it returns, as a Python program's locals do; the logits outlive it */
    if (g_scoped) CK(em_scope_begin());
    em_tensor *logits = instance_forward(it);
    if (g_scoped) {
        CK(em_scope_keep(logits));
        CK(em_scope_end());
    }
    if (it->base->training) {
        em_tensor *loss = cross_entropy(logits, it->y);
        if (g_measure) {
            em_memory_stats m;
            CK(em_device_memory(it->base->inner, &m));
            g_held_before_backward = m.bytes_in_use;
            if (fwd_peak) *fwd_peak = m.peak_bytes;
            CK(em_device_memory_reset_peak(it->base->inner));
        }
        em_grads *g;
        double t0 = g_profile ? now_s() : 0;
        CK(em_backward(loss, &g));
        double t1 = g_profile ? now_s() : 0;
        CK(em_optimizer_step(it->opt, g, 1.0));
        if (g_profile) {
            double t2 = now_s();
            prof_add("(backward)", t1 - t0);
            prof_add("(optimizer_step)", t2 - t1);
        }
        em_grads_release(g);
        CK(em_tensor_item(loss, &out));
    } else {
        em_tensor *m;
        CK(em_mean(logits, &m));
        CK(em_tensor_item(m, &out));
        em_tensor_release(m);
    }
    if (g_scoped) CK(em_scope_end());
    release_kept();
    g_region_every = 0;
    return out;
}

static double instance_step(instance *it) { return instance_step_ex(it, NULL); }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void run_mode(config *cfg, em_device inner, bool training) {
    instance it;
    g_where = training ? "train" : "infer";
    instance_make(&it, cfg, inner, training);
    double *t = malloc((size_t)cfg->steps * sizeof *t);
    if (!t) die("malloc");
    double loss = 0;
    for (long i = 0; i < cfg->warmup; i++) loss = instance_step(&it);
    g_nprof = 0;
    double total = 0;
    for (long i = 0; i < cfg->steps; i++) {
        double t0 = now_s();
        loss = instance_step(&it);
        t[i] = now_s() - t0;
        total += t[i];
    }
    qsort(t, (size_t)cfg->steps, sizeof *t, cmp_double);
    const char *thr = getenv("EMBER_NUM_THREADS");
    const char *mode = training ? "train" : "infer";
    printf("result model=%s mode=%s device=%s threads=%s steps=%ld median_ms=%.3f min_ms=%.3f "
           "%s=%.6g\n",
           cfg->kind_name, mode, cfg->device, thr ? thr : "default", cfg->steps,
           1e3 * t[cfg->steps / 2], 1e3 * t[0], training ? "loss" : "mean_logit", loss);
    if (g_profile) {
        double covered = 0;
        for (int i = 0; i < g_nprof; i++) covered += g_prof[i].s;
        for (int i = 0; i < g_nprof; i++)
            printf("prof model=%s mode=%s op=%s calls=%ld ms_per_step=%.3f pct=%.1f\n",
                   cfg->kind_name, mode, g_prof[i].op, g_prof[i].calls / cfg->steps,
                   1e3 * g_prof[i].s / (double)cfg->steps, 100.0 * g_prof[i].s / total);
        printf("prof model=%s mode=%s op=(other) calls=0 ms_per_step=%.3f pct=%.1f\n",
               cfg->kind_name, mode, 1e3 * (total - covered) / (double)cfg->steps,
               100.0 * (total - covered) / total);
    }
    fflush(stdout);
    free(t);
    instance_free(&it);
}

/* The process's resident set (VmRSS) or its peak (VmHWM) in bytes from /proc/self/status;
 * 0 where there is none. */
static size_t proc_status_bytes(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0, n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0 && line[n] == ':') {
            kb = (size_t)strtoull(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    return kb * 1024;
}

/* Resets the process's peak resident set to the current one (Linux: clear_refs 5). */
static bool reset_peak_rss(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return false;
    bool ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

/** --ckpt compare: the same model trained three ways — DISABLED, BALANCED, and DISABLED with
 *  a checkpoint region every --regions blocks (torch.utils.checkpoint's use) — with steps
 *  rotating which runs first. Each step runs in tensor scopes, so that a block's intermediates
 *  are released when it ends, as a Python program's: only what the tape keeps outlives them.
 *  Per run (em_device_memory, above the bytes in use before the step): peak, the step's peak
 *  (forward, backward and optimizer); held, what is in use when backward begins (what the tape
 *  keeps, the residual stream, the logits and the loss); backward_peak, the peak from then
 *  on; the median step time; and rss, the growth of the process's peak resident set over one
 *  more step after the allocator's cache went back to the system (so it counts what the step
 *  touched, the cache and the kernels' scratch included). The losses must be equal: the
 *  gradients are the same bits. */
static int run_compare(config *cfg, em_device inner) {
    enum { NRUN = 3 };
    static const char *const name[NRUN] = {"disabled", "balanced", "regions"};
    static const em_checkpointing strat[NRUN] = {EM_CKPT_DISABLED, EM_CKPT_BALANCED,
                                                 EM_CKPT_DISABLED};
    const long regions[NRUN] = {0, 0, cfg->regions};
    instance it[NRUN];
    double *t[NRUN], loss[NRUN] = {0};
    size_t peak[NRUN] = {0}, held[NRUN] = {0}, bwpeak[NRUN] = {0}, rss[NRUN] = {0};
    g_where = "compare";
    g_measure = g_scoped = true;
    for (int k = 0; k < NRUN; k++) {
        g_ckpt = strat[k];
        g_region_every = regions[k];
        instance_make(&it[k], cfg, inner, true);
        g_region_every = 0;
        t[k] = malloc((size_t)cfg->steps * sizeof *t[k]);
        if (!t[k]) die("malloc");
        for (long i = 0; i < cfg->warmup; i++) loss[k] = instance_step(&it[k]);
    }
    for (long i = 0; i < cfg->steps; i++)
        for (int j = 0; j < NRUN; j++) {
            int k = (int)((i + j) % NRUN);
            em_memory_stats before, after;
            CK(em_device_memory(inner, &before));
            CK(em_device_memory_reset_peak(inner));
            size_t fwd_peak = 0;
            double t0 = now_s();
            loss[k] = instance_step_ex(&it[k], &fwd_peak);
            t[k][i] = now_s() - t0;
            CK(em_device_memory(inner, &after));
            size_t b0 = before.bytes_in_use;
            size_t p = fwd_peak > after.peak_bytes ? fwd_peak : after.peak_bytes;
            p = p > b0 ? p - b0 : 0;
            if (p > peak[k]) peak[k] = p;
            size_t h = g_held_before_backward > b0 ? g_held_before_backward - b0 : 0;
            if (h > held[k]) held[k] = h;
            size_t bp = after.peak_bytes > b0 ? after.peak_bytes - b0 : 0;
            if (bp > bwpeak[k]) bwpeak[k] = bp;
        }
    bool has_rss = true;
    for (int k = 0; k < NRUN; k++) {
        CK(em_device_memory_release(inner));
        size_t r0 = proc_status_bytes("VmRSS");
        has_rss = has_rss && r0 && reset_peak_rss();
        loss[k] = instance_step(&it[k]);
        size_t r1 = proc_status_bytes("VmHWM");
        rss[k] = r1 > r0 ? r1 - r0 : 0;
    }
    const char *thr = getenv("EMBER_NUM_THREADS");
    double med[NRUN];
    for (int k = 0; k < NRUN; k++) {
        qsort(t[k], (size_t)cfg->steps, sizeof *t[k], cmp_double);
        med[k] = t[k][cfg->steps / 2];
        char rs[32] = "n/a";
        if (has_rss) snprintf(rs, sizeof rs, "%.2f", (double)rss[k] / 1048576.0);
        printf("ckpt model=%s strategy=%s regions=%ld device=%s threads=%s steps=%ld "
               "median_ms=%.3f peak_mib=%.2f held_mib=%.2f backward_peak_mib=%.2f "
               "rss_mib=%s loss=%.9g\n",
               cfg->kind_name, name[k], regions[k], cfg->device, thr ? thr : "default",
               cfg->steps, 1e3 * med[k], (double)peak[k] / 1048576.0,
               (double)held[k] / 1048576.0, (double)bwpeak[k] / 1048576.0, rs, loss[k]);
    }
    bool same = true;
    for (int k = 1; k < NRUN; k++) {
#define RATIO(a) ((a)[0] ? (double)(a)[k] / (double)(a)[0] : 0.0)
        char rr[32] = "n/a";
        if (has_rss) snprintf(rr, sizeof rr, "%.3f", RATIO(rss));
        printf("ckpt model=%s ratio %s/disabled peak=%.3f held=%.3f backward_peak=%.3f "
               "rss=%s time=%.3f same_loss=%s\n",
               cfg->kind_name, name[k], RATIO(peak), RATIO(held), RATIO(bwpeak), rr,
               med[0] > 0 ? med[k] / med[0] : 0.0, loss[k] == loss[0] ? "yes" : "NO");
#undef RATIO
        same = same && loss[k] == loss[0];
    }
    fflush(stdout);
    for (int k = 0; k < NRUN; k++) {
        free(t[k]);
        instance_free(&it[k]);
    }
    g_ckpt = EM_CKPT_DISABLED;
    g_measure = g_scoped = false;
    return same ? 0 : 1;
}

/** Two training steps and one inference forward on dev and on ref from one seed. */
static int run_check(config *cfg, em_device dev, em_device ref) {
    double got[2][3];
    em_device devs[2] = {dev, ref};
    for (int d = 0; d < 2; d++) {
        instance it;
        g_where = d ? "check (reference)" : "check";
        instance_make(&it, cfg, devs[d], true);
        got[d][0] = instance_step(&it);
        got[d][1] = instance_step(&it);
        instance_free(&it);
        instance_make(&it, cfg, devs[d], false);
        got[d][2] = instance_step(&it);
        instance_free(&it);
    }
    int bad = 0;
    static const char *const what[3] = {"loss_step1", "loss_step2", "infer_mean_logit"};
    for (int k = 0; k < 3; k++) {
        double diff = fabs(got[0][k] - got[1][k]);
        double rel = diff / fmax(fabs(got[1][k]), 1e-3);
        bool ok = rel <= 1e-4 && isfinite(got[0][k]);
        bad |= !ok;
        printf("check model=%s %s %s=%.9g %s=%.9g rel=%.2e %s\n", cfg->kind_name, what[k],
               cfg->device, got[0][k], cfg->check, got[1][k], rel, ok ? "ok" : "MISMATCH");
    }
    return bad;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: ember-models gpt|resnet|mlp [--mode train|infer|both] [--device D]\n"
            "         [--warmup W] [--steps N] [--profile] [--check REF_DEVICE] [--seed S]\n"
            "         [--batch B] [--ckpt disabled|balanced|compare] [--regions R (2)]\n"
            "  gpt:    [--vocab 1024] [--ctx 128] [--embd 192] [--heads 6] [--layers 2]"
            " (batch 8)\n"
            "  resnet: [--size 32] [--width 16] [--classes 10] (batch 16, 3 stages)\n"
            "  mlp:    [--in 784] [--hidden 1024] [--layers 2] [--classes 10] (batch 128)\n");
}

static bool parse_long(const char *s, long lo, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo) return false;
    *out = v;
    return true;
}

/* ember-bench links this file in as `ember-bench checkpoint --model` (EMBER_MODELS_MAIN names
 * the entry point there) */
#ifndef EMBER_MODELS_MAIN
#define EMBER_MODELS_MAIN main
#else
int EMBER_MODELS_MAIN(int argc, char **argv);
#endif
int EMBER_MODELS_MAIN(int argc, char **argv) {
    config c = {.mode = "both", .device = "cpu", .warmup = 3, .steps = 10, .regions = 2,
                .seed = 1};
    c.gpt = (gpt_cfg){1024, 128, 192, 6, 2, 8};
    c.res = (resnet_cfg){16, 32, 16, 10};
    c.mlp = (mlp_cfg){128, 784, 1024, 2, 10};
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    c.kind_name = argv[1];
    if (strcmp(argv[1], "gpt") == 0) c.kind = M_GPT;
    else if (strcmp(argv[1], "resnet") == 0) c.kind = M_RESNET;
    else if (strcmp(argv[1], "mlp") == 0) c.kind = M_MLP;
    else {
        fprintf(stderr, "ember-models: unknown model '%s' (gpt, resnet or mlp)\n", argv[1]);
        return 2;
    }
    long batch = 0;
    bool compare = false;
    for (int i = 2; i < argc; i++) {
        const char *f = argv[i];
        if (strcmp(f, "--profile") == 0) {
            g_profile = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "ember-models: unknown flag or missing value: '%s'\n", f);
            return 2;
        }
        const char *v = argv[++i];
        long n = 0;
        if (strcmp(f, "--mode") == 0) {
            if (strcmp(v, "train") && strcmp(v, "infer") && strcmp(v, "both")) {
                fprintf(stderr, "ember-models: --mode: '%s' is not train, infer or both\n", v);
                return 2;
            }
            c.mode = v;
            continue;
        }
        if (strcmp(f, "--device") == 0) {
            c.device = v;
            continue;
        }
        if (strcmp(f, "--check") == 0) {
            c.check = v;
            continue;
        }
        if (strcmp(f, "--ckpt") == 0) {
            if (strcmp(v, "disabled") == 0) g_ckpt = EM_CKPT_DISABLED;
            else if (strcmp(v, "balanced") == 0) g_ckpt = EM_CKPT_BALANCED;
            else if (strcmp(v, "compare") == 0) compare = true;
            else {
                fprintf(stderr, "ember-models: --ckpt: '%s' is not disabled, balanced or "
                        "compare\n", v);
                return 2;
            }
            continue;
        }
        if (!parse_long(v, strcmp(f, "--warmup") == 0 ? 0 : 1, &n)) {
            fprintf(stderr, "ember-models: %s: '%s' is not a valid integer\n", f, v);
            return 2;
        }
        if (strcmp(f, "--warmup") == 0) c.warmup = n;
        else if (strcmp(f, "--steps") == 0) c.steps = n;
        else if (strcmp(f, "--seed") == 0) c.seed = (uint64_t)n;
        else if (strcmp(f, "--regions") == 0) c.regions = n;
        else if (strcmp(f, "--batch") == 0) batch = n;
        else if (strcmp(f, "--vocab") == 0) c.gpt.vocab = n;
        else if (strcmp(f, "--ctx") == 0) c.gpt.ctx = n;
        else if (strcmp(f, "--embd") == 0) c.gpt.embd = n;
        else if (strcmp(f, "--heads") == 0) c.gpt.heads = n;
        else if (strcmp(f, "--layers") == 0) c.gpt.layers = c.mlp.layers = n;
        else if (strcmp(f, "--size") == 0) c.res.size = n;
        else if (strcmp(f, "--width") == 0) c.res.width = n;
        else if (strcmp(f, "--classes") == 0) c.res.classes = c.mlp.classes = n;
        else if (strcmp(f, "--in") == 0) c.mlp.in = n;
        else if (strcmp(f, "--hidden") == 0) c.mlp.hidden = n;
        else {
            fprintf(stderr, "ember-models: unknown flag '%s' (see --help)\n", f);
            return 2;
        }
    }
    if (batch) c.gpt.batch = c.res.batch = c.mlp.batch = batch;
    if (c.gpt.embd % c.gpt.heads != 0) {
        fprintf(stderr, "ember-models: --embd must be a multiple of --heads\n");
        return 2;
    }
    if (c.mlp.layers > 30) {
        fprintf(stderr, "ember-models: --layers at most 30 for the mlp\n");
        return 2;
    }
    em_device dev;
    if (em_device_parse(c.device, &dev) != EM_OK || dev.autodiff) {
        fprintf(stderr, "ember-models: --device: '%s': %s\n", c.device,
                dev.autodiff ? "give the inner device (autodiff is added for training)"
                             : em_last_error());
        return 2;
    }
    int rc = 0;
    if (c.check) {
        em_device ref;
        if (em_device_parse(c.check, &ref) != EM_OK || ref.autodiff) {
            fprintf(stderr, "ember-models: --check: '%s' is not a plain device\n", c.check);
            return 2;
        }
        rc = run_check(&c, dev, ref);
    } else if (compare) {
        rc = run_compare(&c, dev);
    } else {
        if (strcmp(c.mode, "infer") != 0) run_mode(&c, dev, true);
        if (strcmp(c.mode, "train") != 0) run_mode(&c, dev, false);
    }
    free(g_keep);
    g_keep = NULL;
    g_nkeep = g_capkeep = 0;
    return rc;
}
