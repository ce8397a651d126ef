/*
 * ember-train — trains a small classifier on Fashion-MNIST with ember's nn and io libraries:
 * shuffled mini-batches, cross-entropy, autodiff, SGD or Adam; then the test accuracy.
 *
 * Usage: ember-train [--device D] [--model mlp|cnn] [--epochs N] [--batch B] [--lr X]
 *                    [--optimizer sgd|adam] [--momentum M] [--checkpointing balanced]
 *                    [--save F] [--load F] [--eval] [--data DIR] [--seed S] [--limit N]
 *                    [--test-limit N]
 *
 * --limit N trains on the first N images of the shuffled training set; --test-limit N
 * evaluates on the first N test images only (both for quick runs and tests). SGD's learning
 * rate is 0.01 unless --lr is given (Adam's 3e-3). --eval (with --load) only evaluates; its
 * final line reports loss=nan.
 *
 * The last line of the output is machine-readable:
 *   final: loss=<mean loss of the last epoch> accuracy=<test accuracy> epoch_s=<s per epoch>
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

#include "ember/ember.h"
#include "ember/io.h"
#include "ember/nn.h"
#include "ember/remote.h" /* remote (issue 7) */

#define TRY(call)                                                                              \
    do {                                                                                       \
        if ((call) != EM_OK) {                                                                 \
            fprintf(stderr, "ember-train: %s\n", em_last_error());                             \
            goto fail;                                                                         \
        }                                                                                      \
    } while (0)

typedef struct config {
    const char *device, *model, *optimizer, *save, *load, *data;
    long epochs, batch, limit, test_limit;
    double lr, momentum;
    uint64_t seed;
    bool balanced, eval_only, lr_set;
} config;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *f) {
    fprintf(f, "usage: ember-train [--device D] [--model mlp|cnn] [--epochs N] [--batch B] "
               "[--lr X]\n"
               "                   [--optimizer sgd|adam] [--momentum M] "
               "[--checkpointing balanced]\n"
               "                   [--save F] [--load F] [--eval] [--data DIR] [--seed S] "
               "[--limit N]\n"
               "                   [--test-limit N]\n");
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
        static const char *const with_value[] = {
            "--device", "--model", "--epochs", "--batch", "--lr", "--optimizer", "--momentum",
            "--checkpointing", "--save", "--load", "--data", "--seed", "--limit", "--test-limit"};
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
        else if (strcmp(f, "--model") == 0) {
            if (strcmp(v, "mlp") != 0 && strcmp(v, "cnn") != 0)
                return bad("--model: '%s' is not mlp or cnn%s", v, "");
            c->model = v;
        } else if (strcmp(f, "--optimizer") == 0) {
            if (strcmp(v, "sgd") != 0 && strcmp(v, "adam") != 0)
                return bad("--optimizer: '%s' is not sgd or adam%s", v, "");
            c->optimizer = v;
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
    return 0;
}

/** Builds the model on dev: the MLP 784-256-128-10 or the small CNN. */
static em_status build_model(const char *kind, em_device dev, uint64_t seed, em_module **out) {
    em_module_opts o = em_module_opts_default(dev, seed);
    em_module *m[11] = {NULL};
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
    if (strcmp(kind, "cnn") == 0) {
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

/** Copies every parameter of src into the parameter of the same index of dst. */
static em_status copy_params(const em_params *dst, const em_params *src) {
    for (size_t i = 0; i < em_params_count(src); i++) {
        em_status s = em_tensor_assign(em_params_get(dst, i), em_params_get(src, i));
        if (s != EM_OK) return s;
    }
    return EM_OK;
}

/** Test accuracy of model (on an untracked device) over ds, in batches. */
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

int main(int argc, char **argv) {
    config c = {.model = "mlp", .optimizer = "adam", .epochs = 1, .batch = 64, .lr = 3e-3,
                .momentum = 0.9, .seed = 1};
    int rc = parse_args(argc, argv, &c);
    if (rc < 0) {
        usage(stdout);
        return 0;
    }
    if (rc != 0) return rc;
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
    em_module *model = NULL, *eval_model = NULL;
    em_params *params = NULL, *eval_params = NULL;
    em_optimizer *opt = NULL;
    em_tensor_map *loaded = NULL;
    int64_t *perm = NULL;
    rc = 1;
    char devname[64] = "";
    em_device_name(dev, devname, sizeof devname);
    TRY(em_idx_load(ti, tl, &train));
    TRY(em_idx_load(vi, vl, &test));
    TRY(build_model(c.model, dev, c.seed, &model));
    TRY(build_model(c.model, inner, c.seed, &eval_model));
    TRY(em_params_create(&params));
    TRY(em_params_create(&eval_params));
    TRY(em_module_params(model, NULL, params));
    TRY(em_module_params(eval_model, NULL, eval_params));
    if (c.load != NULL) {
        TRY(em_safetensors_load(c.load, inner, &loaded));
        for (size_t i = 0; i < em_params_count(params); i++) {
            em_tensor *t = NULL;
            TRY(em_tensor_map_get(loaded, em_params_name(params, i), &t));
            em_status s = em_tensor_assign(em_params_get(params, i), t);
            em_tensor_release(t);
            TRY(s);
        }
    }
    if (strcmp(c.optimizer, "sgd") == 0) TRY(em_optimizer_sgd(params, c.lr, c.momentum, 0, &opt));
    else TRY(em_optimizer_adam(params, c.lr, 0.9, 0.999, 1e-8, 0, &opt));

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
    double last_loss = NAN, total_time = 0;
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
            em_status s = em_dataset_batch(train, perm + b, m, inner, &x, &y);
            if (s == EM_OK) s = em_module_forward(model, x, true, &logits);
            if (s == EM_OK) s = em_loss_cross_entropy(logits, y, &loss);
            if (s == EM_OK) s = em_tensor_item(loss, &lv);
            if (s == EM_OK) s = em_backward(loss, &g);
            if (s == EM_OK) s = em_optimizer_step(opt, g, 1.0);
            em_grads_release(g), em_tensor_release(loss), em_tensor_release(logits),
                em_tensor_release(x), em_tensor_release(y);
            if (s != EM_OK) {
                if (tty) printf("\n");
                TRY(s);
            }
            sum += lv, steps++;
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
    if (c.save != NULL) {
        size_t np = em_params_count(params);
        const char **names = malloc(np * sizeof *names);
        const em_tensor **ts = malloc(np * sizeof *ts);
        em_status s = names && ts ? EM_OK : EM_ERR_NOMEM;
        for (size_t i = 0; s == EM_OK && i < np; i++)
            names[i] = em_params_name(params, i), ts[i] = em_params_get(params, i);
        if (s == EM_OK) s = em_safetensors_save(c.save, names, ts, np);
        free(names), free(ts);
        TRY(s);
        printf("saved %zu parameters to %s\n", np, c.save);
    }
    double acc = 0;
    TRY(copy_params(eval_params, params));
    int64_t ntest = em_dataset_size(test);
    if (c.test_limit > 0 && c.test_limit < ntest) ntest = c.test_limit;
    TRY(evaluate(eval_model, test, inner, c.batch > 1000 ? c.batch : 1000, c.test_limit, &acc));
    printf("test accuracy: %.4f (%" PRId64 " images)\n", acc, ntest);
    if (!c.eval_only)
        printf("time per epoch: %.2f s\n", total_time / (double)c.epochs);
    printf("final: loss=%.4f accuracy=%.4f epoch_s=%.3f\n", last_loss, acc,
           c.eval_only ? 0.0 : total_time / (double)c.epochs);
    rc = 0;
fail:
    free(perm);
    em_tensor_map_release(loaded);
    em_optimizer_release(opt);
    em_params_release(params), em_params_release(eval_params);
    em_module_release(model), em_module_release(eval_model);
    em_dataset_release(train), em_dataset_release(test);
    return rc;
}
