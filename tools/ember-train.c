/*
 * ember-train — trains a small model with ember's nn and io libraries: a classifier on
 * Fashion-MNIST (shuffled mini-batches, cross-entropy, autodiff, SGD, Adam or AdamW; then the
 * test accuracy), or a character-level transformer on a text file.
 *
 * Usage: ember-train [--device D] [--model mlp|cnn|resnet|transformer] [--epochs N]
 *                    [--batch B] [--lr X] [--optimizer sgd|adam|adamw] [--momentum M]
 *                    [--checkpointing balanced] [--save F] [--load F] [--eval] [--data P]
 *                    [--seed S] [--limit N] [--test-limit N] [--steps N] [--context T]
 *                    [--quantize q8|q4|q4_0|q4_1] [--distributed [--bucket-kb N]]
 *
 * Models (all built from nn.h modules; eval runs the same model under em_set_grad_enabled
 * (false), no second copy):
 *   mlp          784-256-128-10, ReLU
 *   cnn          conv 8, pool, conv 16, pool, linear
 *   resnet       conv 16 + BatchNorm2d + ReLU + max pool (14x14), a residual block of two
 *                3x3 convs with BatchNorm2d (16 ch), a stride-2 conv to 32 ch + BatchNorm2d +
 *                ReLU (7x7), a residual block (32 ch), adaptive average pool, linear 32-10
 *   transformer  a character-level GPT: byte vocabulary of the text (the distinct bytes),
 *                token + positional Embedding (context T, 64 unless --context), 2 pre-LN
 *                transformer blocks (d 64, 4 heads, causal, MLP 256), final LayerNorm, Linear
 *                head; cross-entropy on the next byte, AdamW (weight decay 0.01) with a linear
 *                warmup over the first 10% of the steps and a cosine decay to lr/10 after,
 *                gradient norm clipped to 1.
 *
 * Image models: --data DIR holds Fashion-MNIST; --limit N trains on the first N images of the
 * shuffled training set; --test-limit N evaluates on the first N test images only (both for
 * quick runs and tests). SGD's learning rate is 0.01 unless --lr is given (Adam's and AdamW's
 * 3e-3).
 *
 * transformer: --data FILE is the text (default /usr/share/common-licenses/GPL-3, on every
 * Debian system); of each 10 blocks of 1024 bytes, the first 9 train and the 10th validates
 * (windows are cut from the training blocks put end to end, and the validation ones). An epoch is --steps N batches
 * (default: one pass over the training text, its length / (batch * T) batches), each of
 * --batch windows of T + 1 bytes at random offsets (from --seed); --limit N keeps the first N
 * bytes of the text; --test-limit N evaluates on at most N validation windows (consecutive,
 * not overlapping). Its default batch is 32 and its default optimizer AdamW.
 *
 * --eval (with --load) only evaluates; its final line reports loss=nan. --save/--load write
 * and read the model's state (parameters and buffers, em_module_save/em_module_load).
 *
 * --quantize S: post-training quantization (em_params_quantize) of the linear layers' weights
 * once the model is trained or loaded, before --save and the evaluation: q8 is ggml's Q8_0
 * (int8 blocks of 32, f16 scales), q4_0 ggml's Q4_0 (4-bit blocks of 32, f16 scales), q4_1
 * ggml's Q4_1 (4-bit blocks with a minimum), q4 the better of the two on the MLP (Q4_1,
 * docs/quantization.md). A weight whose input size is not a multiple of 32 (the MLP's
 * 784-input layer) has its blocks along its outputs instead; one with neither a multiple of 32
 * (the CNN's 784-10 layer), convolutions and embeddings stay float. The line "quantized: ..."
 * says how many weights were quantized and the state's bytes before and after. A file saved
 * after --quantize holds the quantized weights (io.h) and --load reads it back into the
 * float-built model: --load F --eval then evaluates the quantized model as it was.
 *
 * The last line of the output is machine-readable:
 *   final: loss=<mean loss of the last epoch> accuracy=<test accuracy> epoch_s=<s per epoch>
 * and for the transformer, after those (accuracy: of the next byte on the validation text):
 *   ... val_loss=<mean validation loss> perplexity=<exp(val_loss)>
 * Before it, a line with the loss of the last step, at full precision (comparing runs):
 *   loss after step <total steps>: <loss of that step's batch>
 *
 * --distributed (a build with MPI: libember-dist, include/ember/dist.h): data-parallel
 * training under mpirun, `mpirun -np N ember-train --distributed ...`. Every rank builds the
 * same model (same --seed), em_ddp_create makes them rank 0's, and every rank reads the same
 * shuffled order: --batch is the GLOBAL batch and must be a multiple of N (exit 2 otherwise);
 * rank r trains on rows [r*B/N, (r+1)*B/N) of each global batch with the mean loss over its
 * rows, em_ddp_backward averages the gradients over the ranks (overlapping backward), and the
 * same optimizer step runs everywhere: the loss curve is that of one process with batch B, up
 * to f32 rounding (a model with batch norm normalizes over each rank's rows, as PyTorch's DDP
 * without SyncBatchNorm; the running statistics saved are rank 0's). A last partial batch of m
 * rows is split the same way, each rank's loss weighted by its share (rows * N / m) so that
 * the average stays the global mean; one of fewer than N rows is dropped. The losses printed
 * are the global batch's (the ranks' mean, one small all-reduce per step). Rank 0 alone
 * prints, saves (--save), quantizes and evaluates; the others print errors only (stderr).
 * The transformer shards its windows the same way. --capture is not supported with it.
 * --bucket-kb N: the gradients are all-reduced in buckets of about N KiB (default 25 MiB, one
 * bucket for these models), each started as soon as backward has completed it;
 * EMBER_DDP_REPORT=1 prints when each bucket started (src/dist/ddp.c).
 *
 * Exit status: 0 on success, 2 for a bad flag or value, an unknown device or a missing data
 * set, 1 for any other failure.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ember/backend.h" /* em_backend_set_error, for the model class */
#include "ember/ember.h"
#include "ember/graph.h"
#include "ember/io.h"
#include "ember/nn.h"
#include "ember/remote.h" /* remote (issue 7) */
#ifdef EMBER_WITH_MPI
#include "ember/dist.h" /* dist (issue 19): --distributed */
#endif

#define TRY(call)                                                                              \
    do {                                                                                       \
        if ((call) != EM_OK) {                                                                 \
            fprintf(stderr, "ember-train: %s\n", em_last_error());                             \
            goto fail;                                                                         \
        }                                                                                      \
    } while (0)

typedef struct config {
    const char *device, *model, *optimizer, *save, *load, *data, *quantize;
    long epochs, batch, limit, test_limit, steps, context, bucket_kb;
    double lr, momentum;
    uint64_t seed;
    bool balanced, eval_only, lr_set, batch_set, optimizer_set, capture, distributed;
} config;

/* ---- dist (issue 19): --distributed, data-parallel training over MPI ---- */
typedef struct dist_run {
#ifdef EMBER_WITH_MPI
    em_dist *d;
    em_ddp *ddp;
#endif
    int rank, size;
    bool on;
} dist_run;
static dist_run g_dist = {.rank = 0, .size = 1};

/** Makes the model rank 0's on every rank and the trainer that averages the gradients in
 *  buckets of bucket_kb KiB (0: em_ddp_create's default, 25 MiB). */
static em_status dist_attach(em_module *model, long bucket_kb) {
#ifdef EMBER_WITH_MPI
    if (g_dist.on)
        return em_ddp_create(g_dist.d, model, (size_t)bucket_kb * 1024u, &g_dist.ddp);
#endif
    (void)model, (void)bucket_kb;
    return EM_OK;
}

/** This rank's rows [lo, hi) of a global batch of m rows. */
static void dist_shard(int64_t m, int64_t *lo, int64_t *hi) {
    *lo = (int64_t)g_dist.rank * m / g_dist.size;
    *hi = ((int64_t)g_dist.rank + 1) * m / g_dist.size;
}

/** em_backward, or em_ddp_backward (the gradients averaged over the ranks). */
static em_status dist_backward(const em_tensor *loss, em_grads **g) {
#ifdef EMBER_WITH_MPI
    if (g_dist.ddp) return em_ddp_backward(g_dist.ddp, loss, g);
#endif
    return em_backward(loss, g);
}

/** *v becomes the mean of the ranks' *v (unchanged in one process). */
static em_status dist_mean(em_device dev, double *v) {
#ifdef EMBER_WITH_MPI
    if (g_dist.on) {
        em_tensor *t = NULL;
        em_status s = em_tensor_from_data(v, EM_F64, NULL, 0, dev, &t);
        if (s == EM_OK) s = em_all_reduce(g_dist.d, t, EM_DIST_MEAN);
        if (s == EM_OK) s = em_tensor_item(t, v);
        em_tensor_release(t);
        return s;
    }
#endif
    (void)dev, (void)v;
    return EM_OK;
}

/** A rank's loss over rows [lo, hi) of a batch of m: weighted by its share ((hi - lo) * N / m)
 *  when the shares are unequal, so that the ranks' mean is the batch's mean. */
static em_status dist_weight(em_tensor **loss, int64_t lo, int64_t hi, int64_t m) {
    if (!g_dist.on || (hi - lo) * g_dist.size == m) return EM_OK;
    em_tensor *w = NULL;
    em_status s = em_mul_scalar(*loss, (double)((hi - lo) * g_dist.size) / (double)m, &w);
    if (s != EM_OK) return s;
    em_tensor_release(*loss);
    *loss = w;
    return EM_OK;
}
/* ---- end dist ---- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *f) {
    fprintf(f, "usage: ember-train [--device D] [--model mlp|cnn|resnet|transformer] "
               "[--epochs N]\n"
               "                   [--batch B] [--lr X] [--optimizer sgd|adam|adamw] "
               "[--momentum M]\n"
               "                   [--checkpointing balanced] [--save F] [--load F] [--eval]\n"
               "                   [--capture] [--distributed [--bucket-kb N]] (under mpirun)\n"
               "                   [--data DIR|FILE] [--seed S] [--limit N] [--test-limit N]\n"
               "                   [--steps N] [--context T] [--quantize q8|q4|q4_0|q4_1]\n"
               "  mlp, cnn, resnet: Fashion-MNIST in --data DIR; transformer: a character "
               "model of the\n"
               "  text --data FILE (default /usr/share/common-licenses/GPL-3), an epoch = "
               "--steps N batches\n"
               "  (default one pass over the text); see the comment at the top of "
               "tools/ember-train.c\n"
               "  --quantize: after training or --load, the linear weights quantized in blocks of "
               "32 (f16 scales):\n"
               "  q8 = ggml's Q8_0, q4_0 = Q4_0, q4_1 = Q4_1 (4 bits with a minimum), q4 = q4_1 "
               "(the better on the MLP)\n");
}

static int bad(const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "ember-train: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    return 2;
}

static bool parse_long(const char *s, long lo, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo) return false;
    *out = v;
    return true;
}

static bool parse_double(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v) || v < 0) return false;
    *out = v;
    return true;
}

/** Parses argv into c; returns 0, or 2 after printing the reason (or -1 for --help). */
static int parse_args(int argc, char **argv, config *c) {
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) return -1;
        if (strcmp(f, "--eval") == 0) {
            c->eval_only = true;
            continue;
        }
        if (strcmp(f, "--capture") == 0) {
            c->capture = true;
            continue;
        }
        if (strcmp(f, "--distributed") == 0) { /* dist (issue 19) */
#ifndef EMBER_WITH_MPI
            return bad("--distributed: this ember-train was built without MPI (libember-dist: "
                       "install Open MPI, e.g. libopenmpi-dev, and rebuild)%s%s", "", "");
#endif
            c->distributed = true;
            continue;
        }
        static const char *const with_value[] = {
            "--device", "--model", "--epochs", "--batch", "--lr", "--optimizer", "--momentum",
            "--checkpointing", "--save", "--load", "--data", "--seed", "--limit", "--test-limit",
            "--steps", "--context", "--quantize", "--bucket-kb"};
        bool known = false;
        for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++)
            known = known || strcmp(f, with_value[k]) == 0;
        if (!known) return bad("unknown flag '%s'%s (see --help)", f, "");
        if (i + 1 >= argc) return bad("%s needs a value%s", f, "");
        const char *v = argv[++i];
        long n = 0;
        if (strcmp(f, "--device") == 0) c->device = v;
        else if (strcmp(f, "--save") == 0) c->save = v;
        else if (strcmp(f, "--load") == 0) c->load = v;
        else if (strcmp(f, "--data") == 0) c->data = v;
        else if (strcmp(f, "--quantize") == 0) {
            if (strcmp(v, "q8") != 0 && strcmp(v, "q4") != 0 && strcmp(v, "q4_0") != 0 &&
                strcmp(v, "q4_1") != 0)
                return bad("--quantize: '%s' is not q8, q4, q4_0 or q4_1%s", v, "");
            c->quantize = v;
        }
        else if (strcmp(f, "--model") == 0) {
            if (strcmp(v, "mlp") != 0 && strcmp(v, "cnn") != 0 && strcmp(v, "resnet") != 0 &&
                strcmp(v, "transformer") != 0)
                return bad("--model: '%s' is not mlp, cnn, resnet or transformer%s", v, "");
            c->model = v;
        } else if (strcmp(f, "--optimizer") == 0) {
            if (strcmp(v, "sgd") != 0 && strcmp(v, "adam") != 0 && strcmp(v, "adamw") != 0)
                return bad("--optimizer: '%s' is not sgd, adam or adamw%s", v, "");
            c->optimizer = v;
            c->optimizer_set = true;
        } else if (strcmp(f, "--checkpointing") == 0) {
            if (strcmp(v, "balanced") != 0)
                return bad("--checkpointing: '%s' is not balanced%s", v, "");
            c->balanced = true;
        } else if (strcmp(f, "--epochs") == 0) {
            if (!parse_long(v, 1, &n)) return bad("--epochs: '%s' is not an integer >= 1%s", v, "");
            c->epochs = n;
        } else if (strcmp(f, "--batch") == 0) {
            if (!parse_long(v, 1, &n)) return bad("--batch: '%s' is not an integer >= 1%s", v, "");
            c->batch = n;
            c->batch_set = true;
        } else if (strcmp(f, "--steps") == 0) {
            if (!parse_long(v, 1, &n)) return bad("--steps: '%s' is not an integer >= 1%s", v, "");
            c->steps = n;
        } else if (strcmp(f, "--bucket-kb") == 0) {
            if (!parse_long(v, 1, &n) || n > 1048576)
                return bad("--bucket-kb: '%s' is not an integer in [1, 1048576]%s", v, "");
            c->bucket_kb = n;
        } else if (strcmp(f, "--context") == 0) {
            if (!parse_long(v, 1, &n) || n > 4096)
                return bad("--context: '%s' is not an integer in [1, 4096]%s", v, "");
            c->context = n;
        } else if (strcmp(f, "--limit") == 0) {
            if (!parse_long(v, 1, &n)) return bad("--limit: '%s' is not an integer >= 1%s", v, "");
            c->limit = n;
        } else if (strcmp(f, "--test-limit") == 0) {
            if (!parse_long(v, 1, &n))
                return bad("--test-limit: '%s' is not an integer >= 1%s", v, "");
            c->test_limit = n;
        } else if (strcmp(f, "--seed") == 0) {
            if (!parse_long(v, 0, &n)) return bad("--seed: '%s' is not an integer >= 0%s", v, "");
            c->seed = (uint64_t)n;
        } else if (strcmp(f, "--lr") == 0) {
            if (!parse_double(v, &c->lr) || c->lr == 0)
                return bad("--lr: '%s' is not a number > 0%s", v, "");
            c->lr_set = true;
        } else if (strcmp(f, "--momentum") == 0) {
            if (!parse_double(v, &c->momentum))
                return bad("--momentum: '%s' is not a number >= 0%s", v, "");
        }
    }
    if (c->eval_only && c->load == NULL) return bad("--eval needs --load F%s%s", "", "");
    if (c->bucket_kb > 0 && !c->distributed)
        return bad("--bucket-kb: only with --distributed%s%s", "", "");
    if (c->distributed && c->capture)
        return bad("--capture: not with --distributed%s%s", "", "");
    return 0;
}

/** A residual block of ch channels: x + BN(conv(ReLU(BN(conv(x))))), 3x3 convs without bias. */
static em_status res_block(int64_t ch, em_module_opts *o, em_module **out) {
    em_module *p[5] = {NULL}, *body = NULL;
    size_t n = 0;
    em_status s = em_nn_conv2d(ch, ch, 3, 1, 1, false, o, &p[n]);
    if (s == EM_OK) n++;
    if (s == EM_OK && (s = em_nn_batch_norm2d(ch, NULL, o, &p[n])) == EM_OK) n++;
    if (s == EM_OK && (s = em_nn_relu(&p[n])) == EM_OK) n++;
    if (s == EM_OK && (s = em_nn_conv2d(ch, ch, 3, 1, 1, false, o, &p[n])) == EM_OK) n++;
    if (s == EM_OK && (s = em_nn_batch_norm2d(ch, NULL, o, &p[n])) == EM_OK) n++;
    if (s != EM_OK) {
        for (size_t i = 0; i < 5; i++) em_module_release(p[i]);
        return s;
    }
    s = em_nn_sequential(p, n, &body);
    if (s == EM_OK) s = em_nn_residual(body, out);
    return s;
}

/** Builds the model on dev: the MLP 784-256-128-10, the small CNN or the small ResNet. */
static em_status build_model(const char *kind, em_device dev, uint64_t seed, em_module **out) {
    em_module_opts o = em_module_opts_default(dev, seed);
    em_module *m[16] = {NULL};
    size_t n = 0;
    em_status s = EM_OK;
    /* each layer draws its own numbers (the same opts would give every layer one stream) */
#define ADD(call)                                                                              \
    do {                                                                                       \
        if (s == EM_OK) {                                                                      \
            o.seed = seed * 1000003u + (uint64_t)n;                                            \
            s = (call);                                                                        \
            if (s == EM_OK) n++;                                                               \
        }                                                                                      \
    } while (0)
    if (strcmp(kind, "resnet") == 0) {
        ADD(em_nn_conv2d(1, 16, 3, 1, 1, false, &o, &m[n]));
        ADD(em_nn_batch_norm2d(16, NULL, &o, &m[n]));
        ADD(em_nn_relu(&m[n]));
        ADD(em_nn_max_pool2d(2, 2, &m[n])); /* 14x14 */
        ADD(res_block(16, &o, &m[n]));
        ADD(em_nn_relu(&m[n]));
        ADD(em_nn_conv2d(16, 32, 3, 2, 1, false, &o, &m[n])); /* 7x7 */
        ADD(em_nn_batch_norm2d(32, NULL, &o, &m[n]));
        ADD(em_nn_relu(&m[n]));
        ADD(res_block(32, &o, &m[n]));
        ADD(em_nn_relu(&m[n]));
        ADD(em_nn_adaptive_avg_pool2d(1, 1, &m[n]));
        ADD(em_nn_flatten(&m[n]));
        ADD(em_nn_linear(32, 10, true, &o, &m[n]));
    } else if (strcmp(kind, "cnn") == 0) {
        ADD(em_nn_conv2d(1, 8, 3, 1, 1, true, &o, &m[n]));
        ADD(em_nn_relu(&m[n]));
        ADD(em_nn_max_pool2d(2, 2, &m[n]));
        ADD(em_nn_conv2d(8, 16, 3, 1, 1, true, &o, &m[n]));
        ADD(em_nn_relu(&m[n]));
        ADD(em_nn_max_pool2d(2, 2, &m[n]));
        ADD(em_nn_flatten(&m[n]));
        ADD(em_nn_linear(16 * 7 * 7, 10, true, &o, &m[n]));
    } else {
        ADD(em_nn_flatten(&m[n]));
        ADD(em_nn_linear(784, 256, true, &o, &m[n]));
        ADD(em_nn_relu(&m[n]));
        ADD(em_nn_linear(256, 128, true, &o, &m[n]));
        ADD(em_nn_relu(&m[n]));
        ADD(em_nn_linear(128, 10, true, &o, &m[n]));
    }
#undef ADD
    if (s != EM_OK) {
        for (size_t i = 0; i < n; i++) em_module_release(m[i]);
        return s;
    }
    return em_nn_sequential(m, n, out);
}

/** Test accuracy of model over ds, in batches (eval mode; the caller turns recording off). */
/* ---- --capture (image models): the whole training step captured once ----
 *
 * The model is built a second time on the capture device (capture+autodiff, with the run's
 * checkpointing) with an optimizer of the run's kind and settings, made in the graph's setup;
 * the model's parameters and buffers and the optimizer's state (its moments or momentum, and
 * each parameter's step count, which Adam's bias correction reads at every run) are replaced by
 * graph inputs, and the images and labels of a batch are inputs too; the loss is the output.
 * The step recorded is the forward pass, the backward pass and the optimizer's step. Prepared
 * on the device, the graph is replayed for every full batch with the real model's tensors and
 * the optimizer state's (made here: zero moments, count 0, as a new optimizer's) as inputs,
 * updated in place as the eager step updates them (batch norm's running statistics too). A
 * last partial batch replays a second graph captured for its size, over the same tensors: any
 * optimizer, the loss curve of eager training. */
typedef struct cap_step {
    em_graph *g;
    em_exec *e;
    int64_t batch;             /* the batch size it was captured for */
    size_t ns, no;             /* the model's state and the optimizer's: the graph's inputs */
    const em_tensor **inputs;  /* the real model's state, the optimizer's, then the batch */
} cap_step;

/* The optimizer state the captured steps share (the eager optimizer is not used). */
typedef struct cap_opt {
    em_tensor **t;
    size_t n;
} cap_opt;

static void cap_opt_release(cap_opt *o) {
    for (size_t i = 0; i < o->n; i++) em_tensor_release(o->t[i]);
    free(o->t);
    memset(o, 0, sizeof *o);
}

static void cap_step_release(cap_step *cs) {
    em_exec_release(cs->e);
    em_graph_release(cs->g);
    free(cs->inputs);
    memset(cs, 0, sizeof *cs);
}

static em_status make_optimizer(const config *c, const em_params *params, em_optimizer **opt);

/* Captures the step of c->model with batches of `batch` images of rows x cols, for the model
 * whose state is `state` (its parameters first: em_module_state lists each module's
 * parameters, then its buffers) on inner; the optimizer's state is ost's tensors (made on
 * inner the first time, as a new optimizer's state). */
static em_status cap_step_make(const config *c, em_device dev, em_device inner,
                               em_params *state, int64_t batch, int64_t rows, int64_t cols,
                               cap_opt *ost, cap_step *cs) {
    em_device cap, plain; /* the model's device; the optimizer state's (untracked) */
    em_status s = em_device_parse("capture", &plain);
    if (s == EM_OK) s = em_device_autodiff(plain, dev.checkpointing, &cap);
    em_module *m = NULL;
    em_params *mp = NULL, *ms = NULL, *os = NULL;
    em_optimizer *opt = NULL;
    em_tensor *x = NULL, *y = NULL, *logits = NULL, *loss = NULL;
    em_grads *g = NULL;
    memset(cs, 0, sizeof *cs);
    cs->batch = batch;
    if (s == EM_OK) s = em_graph_begin(&cs->g);
    if (s == EM_OK) s = build_model(c->model, cap, c->seed, &m);
    if (s == EM_OK) s = em_params_create(&mp);
    if (s == EM_OK) s = em_params_create(&ms);
    if (s == EM_OK) s = em_params_create(&os);
    if (s == EM_OK) s = em_module_params(m, NULL, mp);
    if (s == EM_OK) s = em_module_state(m, NULL, ms);
    /* the optimizer, in the setup: its state is made now */
    if (s == EM_OK) s = make_optimizer(c, mp, &opt);
    if (s == EM_OK) s = em_optimizer_state(opt, os);
    cs->ns = ms ? em_params_count(ms) : 0;
    cs->no = os ? em_params_count(os) : 0;
    if (s == EM_OK && cs->ns != em_params_count(state))
        s = em_backend_set_error(EM_ERR_STATE, "--capture: the captured model differs");
    if (s == EM_OK && ost->t && ost->n != cs->no)
        s = em_backend_set_error(EM_ERR_STATE, "--capture: the captured optimizer differs");
    if (s == EM_OK && !ost->t) { /* a new optimizer's state: zeros, step counts 0 */
        ost->t = calloc(cs->no + 1, sizeof *ost->t);
        if (!ost->t) s = em_backend_set_error(EM_ERR_NOMEM, "out of memory");
        else ost->n = cs->no;
        for (size_t i = 0; s == EM_OK && i < cs->no; i++) {
            const em_tensor *t = em_params_get(os, i);
            s = em_zeros(em_tensor_shape(t), em_tensor_rank(t), em_tensor_dtype(t), inner,
                         &ost->t[i]);
        }
    }
    if (s == EM_OK) {
        cs->inputs = calloc(cs->ns + cs->no + 2, sizeof *cs->inputs);
        if (!cs->inputs) s = em_backend_set_error(EM_ERR_NOMEM, "out of memory");
    }
    /* the model's state, then the optimizer's, become the graph's inputs, named after them */
    for (size_t i = 0; s == EM_OK && i < cs->ns + cs->no; i++) {
        const bool model = i < cs->ns;
        em_params *list = model ? ms : os;
        const size_t j = model ? i : i - cs->ns;
        em_tensor **slot = em_params_slot(list, j), *in = NULL;
        char name[160];
        snprintf(name, sizeof name, "%s.%s", model ? "state" : "opt", em_params_name(list, j));
        s = em_graph_input(cs->g, name, em_tensor_dtype(*slot), em_tensor_shape(*slot),
                           em_tensor_rank(*slot), model ? cap : plain, &in);
        if (s == EM_OK && model && em_tensor_requires_grad(*slot)) s = em_tensor_require_grad(in);
        if (s == EM_OK) {
            em_tensor_release(*slot);
            *slot = in;
            cs->inputs[i] = model ? *em_params_slot(state, j) : ost->t[j];
        } else {
            em_tensor_release(in);
        }
    }
    const int64_t xs[4] = {batch, 1, rows, cols}, ys[1] = {batch};
    if (s == EM_OK) s = em_graph_input(cs->g, "images", EM_F32, xs, 4, cap, &x);
    if (s == EM_OK) s = em_graph_input(cs->g, "labels", EM_I64, ys, 1, cap, &y);
    if (s == EM_OK) s = em_module_forward(m, x, true, &logits);
    if (s == EM_OK) s = em_loss_cross_entropy(logits, y, &loss);
    if (s == EM_OK) s = em_backward(loss, &g);
    if (s == EM_OK) s = em_optimizer_step(opt, g, 1.0);
    if (s == EM_OK) s = em_graph_output(cs->g, "loss", loss);
    em_grads_release(g);
    em_tensor_release(loss), em_tensor_release(logits), em_tensor_release(x), em_tensor_release(y);
    em_optimizer_release(opt);
    em_params_release(os), em_params_release(mp), em_params_release(ms), em_module_release(m);
    if (cs->g) {
        em_status e = em_graph_end(cs->g);
        if (s == EM_OK) s = e;
    }
    if (s == EM_OK) s = em_graph_prepare(cs->g, inner, &cs->e);
    if (s != EM_OK) cap_step_release(cs);
    return s;
}

/* One replayed step on the batch (x, y): the model and the optimizer state updated in place,
 * *loss_value. */
static em_status cap_step_run(cap_step *cs, const em_tensor *x, const em_tensor *y,
                              double *loss_value) {
    const size_t n = cs->ns + cs->no;
    cs->inputs[n] = x;
    cs->inputs[n + 1] = y;
    em_tensor *out[1] = {NULL};
    em_status s = em_exec_run(cs->e, cs->inputs, (int)n + 2, out, 1);
    if (s == EM_OK) s = em_tensor_item(out[0], loss_value);
    em_tensor_release(out[0]);
    return s;
}

static em_status evaluate(em_module *model, const em_dataset *ds, em_device dev, long batch,
                          long limit, double *accuracy) {
    int64_t n = em_dataset_size(ds);
    if (limit > 0 && limit < n) n = limit;
    int64_t *idx = malloc((size_t)n * sizeof *idx);
    int64_t *pred = malloc((size_t)batch * sizeof *pred);
    int64_t *lab = malloc((size_t)batch * sizeof *lab);
    em_status s = (idx && pred && lab) ? EM_OK : EM_ERR_NOMEM;
    int64_t correct = 0;
    for (int64_t i = 0; s == EM_OK && i < n; i++) idx[i] = i;
    for (int64_t b = 0; s == EM_OK && b < n; b += batch) {
        size_t m = (size_t)(n - b < batch ? n - b : batch);
        em_tensor *x = NULL, *y = NULL, *logits = NULL, *am = NULL;
        s = em_dataset_batch(ds, idx + b, m, dev, &x, &y);
        if (s == EM_OK) s = em_module_forward(model, x, false, &logits);
        if (s == EM_OK) s = em_argmax_dim(logits, 1, false, &am);
        if (s == EM_OK) s = em_tensor_to_data(am, pred, m * sizeof *pred);
        if (s == EM_OK) s = em_tensor_to_data(y, lab, m * sizeof *lab);
        for (size_t k = 0; s == EM_OK && k < m; k++) correct += pred[k] == lab[k];
        em_tensor_release(x), em_tensor_release(y), em_tensor_release(logits),
            em_tensor_release(am);
    }
    if (s == EM_OK) *accuracy = n > 0 ? (double)correct / (double)n : 0;
    free(idx), free(pred), free(lab);
    return s;
}

static void progress(bool tty, int epoch, int64_t done, int64_t total, double loss, double t0,
                     int *last_decile) {
    double el = now_s() - t0, rate = el > 0 ? (double)done / el : 0;
    double eta = rate > 0 ? (double)(total - done) / rate : 0;
    if (tty) {
        int w = 30, fill = (int)((double)w * (double)done / (double)total);
        char bar[31];
        for (int i = 0; i < w; i++) bar[i] = i < fill ? '#' : '.';
        bar[w] = '\0';
        printf("\repoch %d [%s] %3d%% loss %.4f  %.0f samples/s  ETA %.0fs ", epoch, bar,
               (int)(100 * done / total), loss, rate, eta);
        fflush(stdout);
    } else {
        int decile = (int)(10 * done / total);
        if (decile > *last_decile) {
            *last_decile = decile;
            printf("epoch %d: %" PRId64 "/%" PRId64 " loss %.4f %.0f samples/s ETA %.0fs\n",
                   epoch, done, total, loss, rate, eta);
            fflush(stdout);
        }
    }
}

/* ---- remote (issue 7): `--device remote:HOST:PORT` connects to an ember-server, with the
 * token read from the file named by $EMBER_REMOTE_TOKEN_FILE (its trailing newline dropped);
 * the device is then remote:N. Returns 0, or 2 after printing the reason. ---- */
static int connect_remote(const char *spec, em_device *out) {
    char addr[256], token[4097] = "";
    snprintf(addr, sizeof addr, "%s", spec + strlen("remote:"));
    addr[strcspn(addr, "+")] = '\0'; /* ember-train does its own autodiff wrapping */
    const char *path = getenv("EMBER_REMOTE_TOKEN_FILE");
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) return bad("%s: set EMBER_REMOTE_TOKEN_FILE to a readable token file%s", spec, "");
    size_t n = fread(token, 1, sizeof token - 1, f);
    fclose(f);
    token[n] = '\0';
    if (n && token[n - 1] == '\n') token[--n] = '\0';
    if (n && token[n - 1] == '\r') token[--n] = '\0';
    if (em_remote_connect(addr, token, out) != EM_OK)
        return bad("device '%s': %s", spec, em_last_error());
    return 0;
}
/* ---- end remote ---- */

/** The optimizer of c over params: SGD (momentum), Adam, or AdamW (weight decay 0.01). */
static em_status make_optimizer(const config *c, const em_params *params, em_optimizer **opt) {
    if (strcmp(c->optimizer, "sgd") == 0) return em_optimizer_sgd(params, c->lr, c->momentum, 0, opt);
    if (strcmp(c->optimizer, "adamw") == 0)
        return em_optimizer_adamw(params, c->lr, 0.9, 0.999, 1e-8, 0.01, opt);
    return em_optimizer_adam(params, c->lr, 0.9, 0.999, 1e-8, 0, opt);
}

/** The scheme of --quantize: q8 ggml's Q8_0, q4_0 Q4_0, q4_1 and q4 Q4_1; f16 scales. */
static em_quant_scheme quant_scheme(const char *name) {
    em_quant_scheme sc = {0};
    sc.storage = strcmp(name, "q8") == 0 ? EM_Q8 : EM_Q4;
    sc.kind = strcmp(name, "q4_0") == 0 || strcmp(name, "q8") == 0 ? EM_QK_BLOCK
                                                                   : EM_QK_BLOCK_MIN;
    sc.scale_dtype = EM_F16;
    return sc;
}

/** Bytes of t as stored: its layout's for a quantized tensor, numel x dtype size otherwise. */
static size_t stored_bytes(const em_tensor *t) {
    em_quant_scheme sc;
    size_t nb = 0;
    if (em_tensor_kind(t) == EM_KIND_QUANTIZED && em_tensor_scheme(t, &sc) == EM_OK &&
        em_quant_nbytes(&sc, em_tensor_shape(t), em_tensor_rank(t), &nb) == EM_OK)
        return nb;
    return (size_t)em_tensor_numel(t) * em_dtype_size(em_tensor_dtype(t));
}

/** --quantize: the linear weights of params quantized in place (skip: names left float, NULL
 *  or NULL-terminated), and a line that says what changed. */
static em_status quantize_model(const char *name, em_params *params, const char *const *skip) {
    size_t before = 0, after = 0, n = 0;
    int64_t weights = 0, total = 0;
    for (size_t i = 0; i < em_params_count(params); i++)
        before += stored_bytes(em_params_get(params, i));
    em_quant_scheme sc = quant_scheme(name);
    em_status s = em_params_quantize(params, &sc, skip, &n);
    if (s != EM_OK) return s;
    for (size_t i = 0; i < em_params_count(params); i++) {
        const em_tensor *t = em_params_get(params, i);
        after += stored_bytes(t);
        total += em_tensor_numel(t);
        if (em_tensor_kind(t) == EM_KIND_QUANTIZED) weights += em_tensor_numel(t);
    }
    printf("quantized: %s (%s), %zu weight tensors, %lld of %lld parameters; parameter bytes "
           "%zu -> %zu\n",
           name, sc.storage == EM_Q8 ? "Q8_0" : sc.kind == EM_QK_BLOCK ? "Q4_0" : "Q4_1", n,
           (long long)weights, (long long)total, before, after);
    return EM_OK;
}

/** Writes the model's state (parameters and buffers) to path and says so. */
static em_status save_model(em_module *model, const em_params *params, const char *path) {
    em_status s = em_module_save(model, path);
    if (s == EM_OK)
        printf("saved %zu parameters (and the buffers) to %s\n", em_params_count(params), path);
    return s;
}

/* ---- transformer: a character-level GPT on a text file ---- */

enum { GPT_DIM = 64, GPT_HEADS = 4, GPT_LAYERS = 2, GPT_HIDDEN = 256 };

typedef struct gpt_data {
    int64_t context, vocab;
} gpt_data;

/** logits [B, T, V] of byte indices x [B, T] (i64, T <= context): tok(x) + pos(0..T-1), the
 *  blocks, ln_f, head. */
static em_status gpt_forward(em_module *self, const em_tensor *x, bool training,
                             em_tensor **y) {
    const gpt_data *d = em_module_data(self);
    if (em_tensor_rank(x) != 2 || em_tensor_shape(x)[1] > d->context)
        return em_backend_set_error(EM_ERR_SHAPE, "x must be [B, T] with T <= %lld",
                                    (long long)d->context);
    int64_t T = em_tensor_shape(x)[1];
    em_tensor *e = NULL, *pos = NULL, *pe = NULL, *h = NULL, *h2 = NULL, *h3 = NULL;
    em_status s = em_module_forward(em_module_child(self, "tok"), x, training, &e);
    if (s == EM_OK) s = em_arange(0, (double)T, 1, EM_I64, em_tensor_device(x), &pos);
    if (s == EM_OK) s = em_module_forward(em_module_child(self, "pos"), pos, training, &pe);
    if (s == EM_OK) s = em_add(e, pe, &h);
    if (s == EM_OK) s = em_module_forward(em_module_child(self, "blocks"), h, training, &h2);
    if (s == EM_OK) s = em_module_forward(em_module_child(self, "ln_f"), h2, training, &h3);
    if (s == EM_OK) s = em_module_forward(em_module_child(self, "head"), h3, training, y);
    em_tensor_release(e), em_tensor_release(pos), em_tensor_release(pe);
    em_tensor_release(h), em_tensor_release(h2), em_tensor_release(h3);
    return s;
}

static void gpt_describe(const em_module *self, char *buf, size_t cap) {
    const gpt_data *d = em_module_data(self);
    snprintf(buf, cap, "vocab %lld, context %lld", (long long)d->vocab, (long long)d->context);
}

static const em_module_class gpt_class = {"CharGPT", gpt_forward, gpt_describe, free};

/** The GPT: children tok, pos, blocks (a Sequential of pre-LN blocks), ln_f, head. */
static em_status build_gpt(int64_t vocab, int64_t context, em_device dev, uint64_t seed,
                           em_module **out) {
    em_module_opts o = em_module_opts_default(dev, seed);
    gpt_data *d = malloc(sizeof *d);
    if (d == NULL) return em_backend_set_error(EM_ERR_NOMEM, "build_gpt: out of memory");
    d->context = context, d->vocab = vocab;
    em_module *m = NULL, *c = NULL, *blocks[GPT_LAYERS] = {NULL};
    em_status s = em_module_create(&gpt_class, d, &m);
    if (s != EM_OK) {
        free(d);
        return s;
    }
    if ((s = em_nn_embedding(vocab, GPT_DIM, &o, &c)) == EM_OK) s = em_module_add_child(m, "tok", c);
    if (s == EM_OK && (s = em_nn_embedding(context, GPT_DIM, &o, &c)) == EM_OK)
        s = em_module_add_child(m, "pos", c);
    size_t n = 0;
    for (; s == EM_OK && n < GPT_LAYERS; n++)
        s = em_nn_transformer_block(GPT_DIM, GPT_HEADS, GPT_HIDDEN, 0, true, &o, &blocks[n]);
    if (s == EM_OK && (s = em_nn_sequential(blocks, n, &c)) == EM_OK)
        s = em_module_add_child(m, "blocks", c);
    else if (s != EM_OK)
        for (size_t i = 0; i < n; i++) em_module_release(blocks[i]);
    if (s == EM_OK && (s = em_nn_layer_norm(GPT_DIM, &o, &c)) == EM_OK)
        s = em_module_add_child(m, "ln_f", c);
    if (s == EM_OK && (s = em_nn_linear(GPT_DIM, vocab, true, &o, &c)) == EM_OK)
        s = em_module_add_child(m, "head", c);
    if (s != EM_OK) {
        em_module_release(m);
        return s;
    }
    *out = m;
    return EM_OK;
}

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/** Loss (mean over the B*T positions) of the windows starting at off[0..b-1]; also counts the
 *  positions whose argmax is the next byte into *correct when not NULL. */
static em_status gpt_batch(em_module *model, const int64_t *tok, const int64_t *off, size_t b,
                           int64_t T, em_device inner, bool training, em_tensor **loss_out,
                           int64_t *correct) {
    size_t nt = b * (size_t)T;
    int64_t *xs = malloc(nt * sizeof *xs), *ys = malloc(nt * sizeof *ys);
    int64_t *pred = correct ? malloc(nt * sizeof *pred) : NULL;
    em_status s = xs && ys && (pred || !correct)
                      ? EM_OK : em_backend_set_error(EM_ERR_NOMEM, "out of memory");
    for (size_t i = 0; s == EM_OK && i < b; i++)
        for (int64_t t = 0; t < T; t++) {
            xs[i * (size_t)T + (size_t)t] = tok[off[i] + t];
            ys[i * (size_t)T + (size_t)t] = tok[off[i] + t + 1];
        }
    int64_t xshape[2] = {(int64_t)b, T}, yshape[1] = {(int64_t)nt}, lshape[2];
    em_tensor *x = NULL, *y = NULL, *logits = NULL, *flat = NULL, *am = NULL;
    if (s == EM_OK) s = em_tensor_from_data(xs, EM_I64, xshape, 2, inner, &x);
    if (s == EM_OK) s = em_tensor_from_data(ys, EM_I64, yshape, 1, inner, &y);
    if (s == EM_OK) s = em_module_forward(model, x, training, &logits);
    if (s == EM_OK) {
        lshape[0] = (int64_t)nt, lshape[1] = em_tensor_shape(logits)[2];
        s = em_reshape(logits, lshape, 2, &flat);
    }
    if (s == EM_OK) s = em_loss_cross_entropy(flat, y, loss_out);
    if (s == EM_OK && correct) {
        s = em_argmax_dim(flat, 1, false, &am);
        if (s == EM_OK) s = em_tensor_to_data(am, pred, nt * sizeof *pred);
        for (size_t i = 0; s == EM_OK && i < nt; i++) *correct += pred[i] == ys[i];
        if (s != EM_OK) em_tensor_release(*loss_out);
    }
    em_tensor_release(x), em_tensor_release(y), em_tensor_release(logits);
    em_tensor_release(flat), em_tensor_release(am);
    free(xs), free(ys), free(pred);
    return s;
}

/** The learning rate of step k of total: linear warmup over the first 10%, then cosine to
 *  lr / 10. */
static double gpt_lr(double lr, long k, long total) {
    long warm = total / 10 > 0 ? total / 10 : 1;
    if (k < warm) return em_lr_linear(lr, (int)k, 1.0 / (double)warm, 1.0, (int)warm);
    if (total - warm < 1) return lr;
    return em_lr_cosine(lr, (int)(k - warm), (int)(total - warm), lr / 10);
}

/** --model transformer; returns the exit status. */
static int run_transformer(const config *c, em_device dev, em_device inner) {
    const char *path = c->data ? c->data : "/usr/share/common-licenses/GPL-3";
    int64_t T = c->context > 0 ? c->context : 64;
    FILE *f = fopen(path, "rb");
    if (f == NULL) return bad("cannot read the text '%s'%s (--data FILE)", path, "");
    unsigned char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            size_t nc = cap ? 2 * cap : 65536;
            unsigned char *nt = realloc(text, nc);
            if (nt == NULL) break;
            text = nt, cap = nc;
        }
        size_t r = fread(text + len, 1, cap - len, f);
        if (r == 0) break;
        len += r;
    }
    bool unreadable = ferror(f) != 0;
    fclose(f);
    if (unreadable) {
        free(text);
        return bad("cannot read the text '%s'%s (--data FILE)", path, "");
    }
    if (c->limit > 0 && (size_t)c->limit < len) len = (size_t)c->limit;
    /* the vocabulary: the text's distinct bytes, in byte order */
    int64_t map[256], vocab = 0;
    bool seen[256] = {false};
    for (size_t i = 0; i < len; i++) seen[text[i]] = true;
    for (int b = 0; b < 256; b++) map[b] = seen[b] ? vocab++ : -1;
    /* the split: of each 10 blocks of 1024 bytes, the 10th validates (a text's end is often
     * unlike the rest: GPL-3's is its all-caps disclaimer) */
    size_t nval = 0;
    for (size_t i = 0; i < len; i++) nval += (i / 1024) % 10 == 9;
    size_t ntrain = len - nval;
    if (ntrain < (size_t)T + 1 || nval < (size_t)T + 1) {
        free(text);
        char need[96];
        snprintf(need, sizeof need, "context %lld (at least %lld bytes)", (long long)T,
                 (long long)(10 * (T + 1)));
        return bad("the text '%s' is too short for %s", path, need);
    }
    int64_t *tok = malloc(len * sizeof *tok);
    int64_t *off = malloc((size_t)c->batch * sizeof *off);
    em_module *model = NULL;
    em_params *params = NULL;
    em_optimizer *opt = NULL;
    int rc = 1;
    if (tok == NULL || off == NULL) {
        fprintf(stderr, "ember-train: out of memory\n");
        goto fail;
    }
    for (size_t i = 0, a = 0, v = ntrain; i < len; i++) /* training bytes, then validation */
        tok[(i / 1024) % 10 == 9 ? v++ : a++] = map[text[i]];
    char devname[64] = "";
    em_device_name(dev, devname, sizeof devname);
    TRY(build_gpt(vocab, T, dev, c->seed, &model));
    TRY(em_params_create(&params));
    TRY(em_module_params(model, NULL, params));
    if (c->load != NULL) TRY(em_module_load(model, c->load));
    if (!c->eval_only) TRY(dist_attach(model, c->bucket_kb));
    TRY(make_optimizer(c, params, &opt));
    long steps = c->steps > 0 ? c->steps
                              : (long)((ntrain - 1) / ((size_t)c->batch * (size_t)T));
    if (steps < 1) steps = 1;
    int64_t nparam = 0;
    for (size_t i = 0; i < em_params_count(params); i++)
        nparam += em_tensor_numel(em_params_get(params, i));
    if (!c->eval_only)
        printf("ember-train: transformer on %s, %s lr %g (warmup + cosine), batch %ld x %lld "
               "bytes, %ld epoch(s) of %ld steps, %zu bytes of %s (vocabulary %lld), %lld "
               "parameters, seed %" PRIu64 "\n",
               devname, c->optimizer, c->lr, c->batch, (long long)T, c->epochs, steps, len,
               path, (long long)vocab, (long long)nparam, c->seed);
    double last_loss = NAN, total_time = 0, step_loss = NAN;
    long total_steps = 0;
    uint64_t rng = c->seed * 1000003u + 17u;
    int64_t lo = 0, hi = c->batch; /* this rank's windows of each batch (--distributed) */
    if (g_dist.on) dist_shard(c->batch, &lo, &hi);
    bool tty = isatty(STDOUT_FILENO) != 0;
    for (long e = 0; !c->eval_only && e < c->epochs; e++) {
        double t0 = now_s(), sum = 0;
        int decile = 0;
        for (long k = 0; k < steps; k++) {
            for (long i = 0; i < c->batch; i++)
                off[i] = (int64_t)(splitmix64(&rng) % (uint64_t)(ntrain - (size_t)T));
            em_tensor *loss = NULL;
            em_grads *g = NULL;
            double lv = 0, scale = 1;
            em_status s = em_optimizer_set_lr(opt, gpt_lr(c->lr, e * steps + k, c->epochs * steps));
            if (s == EM_OK)
                s = gpt_batch(model, tok, off + lo, (size_t)(hi - lo), T, inner, true, &loss,
                              NULL);
            if (s == EM_OK) s = em_tensor_item(loss, &lv);
            if (s == EM_OK) s = dist_mean(inner, &lv);
            if (s == EM_OK) s = dist_backward(loss, &g);
            if (s == EM_OK) s = em_clip_grad_norm(params, g, 1.0, NULL, &scale);
            if (s == EM_OK) s = em_optimizer_step(opt, g, scale);
            em_grads_release(g), em_tensor_release(loss);
            if (s != EM_OK) {
                if (tty) printf("\n");
                TRY(s);
            }
            sum += lv, step_loss = lv, total_steps++;
            progress(tty, (int)e + 1, (k + 1) * c->batch, steps * c->batch, sum / (double)(k + 1),
                     t0, &decile);
        }
        double dt = now_s() - t0;
        total_time += dt;
        last_loss = sum / (double)steps;
        if (tty) printf("\n");
        printf("epoch %ld: %.2f s, mean loss %.4f, %.0f tokens/s\n", e + 1, dt, last_loss,
               (double)(steps * c->batch * T) / dt);
        fflush(stdout);
    }
    if (!c->eval_only) printf("loss after step %ld: %.9g\n", total_steps, step_loss);
    if (g_dist.rank != 0) { /* --distributed: rank 0 alone saves and evaluates */
        rc = 0;
        goto fail;
    }
    if (c->quantize != NULL) {
        static const char *const embeddings[] = {"tok.weight", "pos.weight", NULL};
        TRY(quantize_model(c->quantize, params, embeddings));
    }
    if (c->save != NULL) TRY(save_model(model, params, c->save));
    /* validation: consecutive windows of the validation bytes, the same model with recording off */
    int64_t nwin = (int64_t)((nval - 1) / (size_t)T);
    if (c->test_limit > 0 && c->test_limit < nwin) nwin = c->test_limit;
    double vsum = 0;
    int64_t correct = 0;
    bool was = em_set_grad_enabled(false);
    em_status s = EM_OK;
    for (int64_t w = 0; s == EM_OK && w < nwin; w += c->batch) {
        size_t b = (size_t)(nwin - w < c->batch ? nwin - w : c->batch);
        for (size_t i = 0; i < b; i++) off[i] = (int64_t)ntrain + (w + (int64_t)i) * T;
        em_tensor *loss = NULL;
        double lv = 0;
        s = gpt_batch(model, tok, off, b, T, inner, false, &loss, &correct);
        if (s == EM_OK) s = em_tensor_item(loss, &lv);
        em_tensor_release(loss);
        vsum += lv * (double)b;
    }
    em_set_grad_enabled(was);
    TRY(s);
    double vloss = vsum / (double)nwin, acc = (double)correct / (double)(nwin * T);
    printf("validation: loss %.4f, perplexity %.2f, next-byte accuracy %.4f (%lld windows)\n",
           vloss, exp(vloss), acc, (long long)nwin);
    if (!c->eval_only) printf("time per epoch: %.2f s\n", total_time / (double)c->epochs);
    printf("final: loss=%.4f accuracy=%.4f epoch_s=%.3f val_loss=%.4f perplexity=%.3f\n",
           last_loss, acc, c->eval_only ? 0.0 : total_time / (double)c->epochs, vloss,
           exp(vloss));
    rc = 0;
fail:
    em_optimizer_release(opt);
    em_params_release(params);
    em_module_release(model);
    free(tok), free(off), free(text);
    return rc;
}
/* ---- end transformer ---- */

static int run(config c);

int main(int argc, char **argv) {
    config c = {.model = "mlp", .optimizer = "adam", .epochs = 1, .batch = 64, .lr = 3e-3,
                .momentum = 0.9, .seed = 1};
    int rc = parse_args(argc, argv, &c);
    if (rc < 0) {
        usage(stdout);
        return 0;
    }
    if (rc != 0) return rc;
#ifdef EMBER_WITH_MPI
    /* dist (issue 19): --distributed */
    if (c.distributed) {
        if (em_dist_init(&argc, &argv, &g_dist.d) != EM_OK) {
            fprintf(stderr, "ember-train: --distributed: %s\n", em_last_error());
            return 1;
        }
        g_dist.on = true;
        g_dist.rank = em_dist_rank(g_dist.d);
        g_dist.size = em_dist_size(g_dist.d);
        if (c.batch % g_dist.size != 0) {
            char b[32], n[32];
            snprintf(b, sizeof b, "%ld", c.batch);
            snprintf(n, sizeof n, "%d", g_dist.size);
            rc = bad("--distributed: the global --batch %s must be a multiple of the number of "
                     "ranks (%s): each rank takes an equal share", b, n);
        } else {
            if (g_dist.rank != 0 && freopen("/dev/null", "w", stdout) == NULL) rc = 1;
            if (rc == 0) rc = run(c);
        }
        em_ddp_free(g_dist.ddp);
        if (rc != 1) em_dist_free(g_dist.d); /* a rank that failed alone: mpirun ends the rest */
        return rc;
    }
#endif
    return run(c);
}

static int run(config c) {
    int rc;
    bool transformer = strcmp(c.model, "transformer") == 0;
    if (transformer && !c.optimizer_set) c.optimizer = "adamw";
    if (transformer && !c.batch_set) c.batch = 32;
    if (strcmp(c.optimizer, "sgd") == 0 && !c.lr_set) c.lr = 0.01;

    /* the devices: dev (autodiff) for training, inner (plain) for evaluation */
    em_device base = em_device_default(), dev, inner;
    /* ---- remote (issue 7) ---- */
    if (c.device != NULL && strncmp(c.device, "remote:", 7) == 0 && strchr(c.device + 7, ':')) {
        if ((rc = connect_remote(c.device, &base)) != 0) return rc;
    } else /* ---- end remote ---- */
    if (c.device != NULL && em_device_parse(c.device, &base) != EM_OK)
        return bad("unknown device '%s': %s", c.device, em_last_error());
    inner = base;
    inner.autodiff = false;
    inner.checkpointing = EM_CKPT_NONE;
    if (em_device_autodiff(inner, c.balanced ? EM_CKPT_BALANCED : EM_CKPT_DISABLED, &dev) != EM_OK)
        return bad("device '%s': %s", c.device ? c.device : "default", em_last_error());

    if (transformer && c.capture) return bad("--capture: image models only%s%s", "", "");
    if (transformer) return run_transformer(&c, dev, inner);

    /* the data */
    const char *dir = c.data;
    if (dir == NULL) dir = getenv("EMBER_FASHION_MNIST_DIR");
    if (dir == NULL) dir = "/usr/share/datasets/fashion-mnist";
    char ti[1024], tl[1024], vi[1024], vl[1024];
    snprintf(ti, sizeof ti, "%s/train-images-idx3-ubyte.gz", dir);
    snprintf(tl, sizeof tl, "%s/train-labels-idx1-ubyte.gz", dir);
    snprintf(vi, sizeof vi, "%s/t10k-images-idx3-ubyte.gz", dir);
    snprintf(vl, sizeof vl, "%s/t10k-labels-idx1-ubyte.gz", dir);
    if (access(ti, R_OK) != 0 || access(tl, R_OK) != 0 || access(vi, R_OK) != 0 ||
        access(vl, R_OK) != 0)
        return bad("Fashion-MNIST not found in %s (apt-get install dataset-fashion-mnist, or "
                   "--data DIR)%s", dir, "");

    em_dataset *train = NULL, *test = NULL;
    em_module *model = NULL;
    em_params *params = NULL, *state = NULL;
    em_optimizer *opt = NULL;
    int64_t *perm = NULL;
    cap_step cs[2] = {{0}}; /* full batches; the last partial one */
    cap_opt ost = {0};
    int64_t rows = 0, cols = 0;
    rc = 1;
    char devname[64] = "";
    em_device_name(dev, devname, sizeof devname);
    TRY(em_idx_load(ti, tl, &train));
    TRY(em_idx_load(vi, vl, &test));
    TRY(build_model(c.model, dev, c.seed, &model));
    TRY(em_params_create(&params));
    TRY(em_module_params(model, NULL, params));
    if (c.load != NULL) TRY(em_module_load(model, c.load));
    if (!c.eval_only) TRY(dist_attach(model, c.bucket_kb));
    TRY(make_optimizer(&c, params, &opt));
    if (c.capture && !c.eval_only) {
        TRY(em_params_create(&state));
        TRY(em_module_state(model, NULL, state));
        TRY(em_dataset_shape(train, &rows, &cols));
        double t0 = now_s();
        TRY(cap_step_make(&c, dev, inner, state, c.batch, rows, cols, &ost, &cs[0]));
        printf("ember-train: captured the step (forward, backward, %s): %lld kernel calls, "
               "prepared in %.3f s\n", c.optimizer, (long long)em_graph_kernel_count(cs[0].g),
               now_s() - t0);
    }

    int64_t n = em_dataset_size(train);
    int64_t used = c.limit > 0 && c.limit < n ? c.limit : n;
    perm = malloc((size_t)n * sizeof *perm);
    if (perm == NULL) {
        fprintf(stderr, "ember-train: out of memory\n");
        goto fail;
    }
    bool tty = isatty(STDOUT_FILENO) != 0;
    if (!c.eval_only)
        printf("ember-train: %s on %s, %s lr %g%s, batch %ld, %ld epoch(s), %" PRId64
               " images, seed %" PRIu64 "\n",
               c.model, devname, c.optimizer, c.lr, c.balanced ? ", balanced checkpointing" : "",
               c.batch, c.epochs, used, c.seed);
    double last_loss = NAN, total_time = 0, step_loss = NAN;
    long total_steps = 0;
    for (long e = 0; !c.eval_only && e < c.epochs; e++) {
        /* one shuffle per epoch, each from its own seed derived from --seed; --limit takes the
         * first N of the first epoch's order so the subset stays the same */
        TRY(em_dataset_shuffle(n, c.seed * 1000003u + (uint64_t)e, perm));
        if (used < n && e > 0) {
            TRY(em_dataset_shuffle(n, c.seed * 1000003u, perm));
            int64_t *sub = malloc((size_t)used * sizeof *sub);
            if (sub == NULL) goto fail;
            em_status s = em_dataset_shuffle(used, c.seed * 1000003u + (uint64_t)e, sub);
            if (s == EM_OK) {
                for (int64_t i = 0; i < used; i++) sub[i] = perm[sub[i]];
                memcpy(perm, sub, (size_t)used * sizeof *perm);
            }
            free(sub);
            TRY(s);
        }
        double t0 = now_s(), sum = 0;
        int64_t steps = 0;
        int decile = 0;
        for (int64_t b = 0; b < used; b += c.batch) {
            size_t m = (size_t)(used - b < c.batch ? used - b : c.batch);
            em_tensor *x = NULL, *y = NULL, *logits = NULL, *loss = NULL;
            em_grads *g = NULL;
            double lv = 0;
            int64_t lo = 0, hi = (int64_t)m; /* this rank's rows (--distributed) */
            if (g_dist.on) {
                if ((int64_t)m < g_dist.size) continue; /* a last batch of fewer rows than ranks */
                dist_shard((int64_t)m, &lo, &hi);
            }
            em_status s = em_dataset_batch(train, perm + b + lo, (size_t)(hi - lo), inner, &x, &y);
            if (s == EM_OK && cs[0].e && (long)m != c.batch && cs[1].batch != (int64_t)m) {
                cap_step_release(&cs[1]); /* the last partial batch: its own graph */
                s = cap_step_make(&c, dev, inner, state, (int64_t)m, rows, cols, &ost, &cs[1]);
            }
            if (s == EM_OK && cs[0].e) {
                s = cap_step_run(&cs[(long)m == c.batch ? 0 : 1], x, y, &lv);
                em_tensor_release(x), em_tensor_release(y);
                if (s != EM_OK) {
                    if (tty) printf("\n");
                    TRY(s);
                }
                sum += lv, steps++, step_loss = lv, total_steps++;
                progress(tty, (int)e + 1, b + (int64_t)m, used, sum / (double)steps, t0, &decile);
                continue;
            }
            if (s == EM_OK) s = em_module_forward(model, x, true, &logits);
            if (s == EM_OK) s = em_loss_cross_entropy(logits, y, &loss);
            if (s == EM_OK) s = dist_weight(&loss, lo, hi, (int64_t)m);
            if (s == EM_OK) s = em_tensor_item(loss, &lv);
            if (s == EM_OK) s = dist_mean(inner, &lv);
            if (s == EM_OK) s = dist_backward(loss, &g);
            if (s == EM_OK) s = em_optimizer_step(opt, g, 1.0);
            em_grads_release(g), em_tensor_release(loss), em_tensor_release(logits),
                em_tensor_release(x), em_tensor_release(y);
            if (s != EM_OK) {
                if (tty) printf("\n");
                TRY(s);
            }
            sum += lv, steps++, step_loss = lv, total_steps++;
            progress(tty, (int)e + 1, b + (int64_t)m, used, sum / (double)steps, t0, &decile);
        }
        double dt = now_s() - t0;
        total_time += dt;
        last_loss = sum / (double)steps;
        if (tty) printf("\n");
        printf("epoch %ld: %.2f s, mean loss %.4f, %.0f samples/s\n", e + 1, dt, last_loss,
               (double)used / dt);
        fflush(stdout);
    }
    if (!c.eval_only) printf("loss after step %ld: %.9g\n", total_steps, step_loss);
    if (g_dist.rank != 0) { /* --distributed: rank 0 alone saves and evaluates */
        rc = 0;
        goto fail;
    }
    if (c.quantize != NULL) TRY(quantize_model(c.quantize, params, NULL));
    if (c.save != NULL) TRY(save_model(model, params, c.save));
    double acc = 0;
    int64_t ntest = em_dataset_size(test);
    if (c.test_limit > 0 && c.test_limit < ntest) ntest = c.test_limit;
    /* eval: the same model with recording off (no tape, no copy of the parameters) */
    bool was = em_set_grad_enabled(false);
    em_status es = evaluate(model, test, inner, c.batch > 1000 ? c.batch : 1000, c.test_limit,
                            &acc);
    em_set_grad_enabled(was);
    TRY(es);
    printf("test accuracy: %.4f (%" PRId64 " images)\n", acc, ntest);
    if (!c.eval_only)
        printf("time per epoch: %.2f s\n", total_time / (double)c.epochs);
    printf("final: loss=%.4f accuracy=%.4f epoch_s=%.3f\n", last_loss, acc,
           c.eval_only ? 0.0 : total_time / (double)c.epochs);
    rc = 0;
fail:
    free(perm);
    cap_step_release(&cs[0]);
    cap_step_release(&cs[1]);
    cap_opt_release(&ost);
    em_optimizer_release(opt);
    em_params_release(params);
    em_params_release(state);
    em_module_release(model);
    em_dataset_release(train), em_dataset_release(test);
    return rc;
}
