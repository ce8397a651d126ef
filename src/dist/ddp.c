/* ddp.c — data-parallel training over dist.c's collectives (include/ember/dist.h).
 *
 * Buckets. At creation the trained parameters (em_module_params order, those that require
 * grad and are float) are laid out, in the REVERSE of that order (backward completes the last
 * layers first), into buckets of about bucket_bytes, one open bucket per dtype: a parameter
 * joins the open bucket of its dtype, which closes once it holds bucket_bytes or more (a
 * parameter larger than bucket_bytes has a bucket of its own). Buckets are numbered in the
 * order they were opened; every rank builds the same ones from the same module.
 *
 * A bucket is a host tensor of its dtype (made once on the cpu device, or ref, and written
 * through em_tensor_host_data, so that MPI reduces it in place with no copy; where the
 * device does not lend its memory, a private buffer copied in and out around each reduction): its parameters' gradients end to end, then one flag
 * per parameter (1 when this rank's loss reached it), then one "failed" element (1 when this
 * rank failed before the bucket started). The whole buffer is all-reduced with EM_DIST_MEAN:
 * a gradient becomes the average with zeros for the ranks that gave none, a flag above 0 says
 * some rank reached the parameter (else it gets no gradient), and a failed element above 0
 * says some rank failed (every rank then returns an error instead of training on partial
 * sums). This costs no collective beyond the buckets.
 *
 * Overlap. em_backward_hooked calls ddp_hook as soon as a parameter's gradient is complete;
 * the hook copies it into its bucket's buffer (em_tensor_to_data: any device) and, when the
 * bucket's last parameter has come, starts the all-reduce of that bucket and of every later
 * bucket already full — buckets start strictly in their numbered order on every rank (MPI
 * needs the same order of collectives everywhere), whatever order this rank's walk completes
 * them in. Meanwhile the hook drives MPI's progress on the works started (em_dist_test).
 * After the walk, the buckets not yet started (a parameter not reached here, or the walk's
 * order not the buckets') are started, all are waited for in order, and each parameter's
 * gradient in the em_grads is replaced by the average (em_grads_set, a new tensor on the
 * parameter's inner device).
 *
 * EMBER_DDP_REPORT=1 prints, to stderr, for every em_ddp_backward on rank 0, when each bucket
 * was started relative to the start and the end of the walk (the overlap, measured).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist_internal.h"
#include "ember/backend.h" /* em_backend_set_error */

#define DDP_DEFAULT_BUCKET ((size_t)25 << 20)

typedef struct ddp_bucket {
    em_dtype dt;
    size_t es;        /* element size */
    size_t *params;   /* indices into em_ddp.p (the trained parameters), in bucket order */
    size_t np;
    size_t numel;     /* gradient elements (the flags and the failed element follow) */
    size_t total;     /* numel + np + 1 */
    unsigned char *host; /* b->t's own memory when mapped, else a malloc'd buffer */
    bool mapped;      /* host is t's buffer (em_tensor_host_data): no copies around MPI */
    size_t ready;     /* parameters whose gradient arrived this backward */
    em_tensor *t;     /* the tensor reduced (mapped: made once; else while started) */
    em_dist_work *work;
    bool started, closed;
    double t_start;   /* seconds since the backward began (EMBER_DDP_REPORT) */
} ddp_bucket;

typedef struct ddp_param {
    size_t slot;      /* index in em_ddp.params (the module's em_module_params) */
    size_t bucket, off; /* its bucket and its element offset there */
    size_t flag;      /* its flag's element index in the bucket */
    em_dtype dt;
    int64_t numel;
    bool reached;     /* this backward, on this rank */
} ddp_param;

struct em_ddp {
    em_dist *d;
    em_module *m;
    em_params *params; /* the module's parameters (slots: em_module_set stays visible) */
    ddp_param *p;      /* the trained ones */
    size_t np;
    ddp_bucket *b;
    size_t nb;
    size_t next_start; /* the first bucket not started */
    em_device host;    /* where bucket tensors are made */
    bool failed;       /* this rank failed during the current backward */
    em_status fail_status;
    double t0;
    bool report;
};

static const char fn_create[] = "em_ddp_create";
static const char fn_backward[] = "em_ddp_backward";

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Writes the value v (0 or 1) as element i of a buffer of dtype dt. */
static void put_flag(unsigned char *buf, em_dtype dt, size_t i, int v) {
    switch (dt) {
    case EM_F64: {
        double x = v;
        memcpy(buf + i * 8, &x, 8);
        break;
    }
    case EM_F16: {
        uint16_t x = v ? 0x3C00u : 0;
        memcpy(buf + i * 2, &x, 2);
        break;
    }
    case EM_BF16: {
        uint16_t x = v ? 0x3F80u : 0;
        memcpy(buf + i * 2, &x, 2);
        break;
    }
    default: {
        float x = (float)v;
        memcpy(buf + i * 4, &x, 4);
        break;
    }
    }
}

/* Whether element i of a buffer of dtype dt is above 0 (any bits of a positive value). */
static bool flag_set(const unsigned char *buf, em_dtype dt, size_t i) {
    switch (dt) {
    case EM_F64: {
        double x;
        memcpy(&x, buf + i * 8, 8);
        return x > 0;
    }
    case EM_F16:
    case EM_BF16: {
        uint16_t x;
        memcpy(&x, buf + i * 2, 2);
        /* positive: sign clear, not zero, not NaN (infinity is the largest) */
        return x != 0 && x <= (dt == EM_F16 ? 0x7C00u : 0x7F80u);
    }
    default: {
        float x;
        memcpy(&x, buf + i * 4, 4);
        return x > 0;
    }
    }
}

void em_ddp_free(em_ddp *ddp) {
    if (ddp == NULL) return;
    for (size_t k = 0; k < ddp->nb; k++) {
        ddp_bucket *b = &ddp->b[k];
        if (b->work) (void)em_dist_wait(b->work);
        em_tensor_release(b->t);
        free(b->params);
        if (!b->mapped) free(b->host);
    }
    free(ddp->b);
    free(ddp->p);
    em_params_release(ddp->params);
    free(ddp);
}

/* Broadcasts every tensor of set from rank 0, in order; quantized ones (constants, not
 * trained, and not a dtype MPI carries) are left alone. */
static em_status broadcast_set(em_dist *d, const em_params *set) {
    for (size_t i = 0; i < em_params_count(set); i++) {
        em_tensor *t = em_params_get(set, i);
        if (t == NULL || em_tensor_kind(t) == EM_KIND_QUANTIZED) continue;
        em_status s = em_broadcast(d, t, 0);
        if (s != EM_OK) return s;
    }
    return EM_OK;
}

static em_status host_device(em_device *out) {
    if (em_device_parse("cpu", out) == EM_OK) return EM_OK;
    return em_device_parse("ref", out);
}

em_status em_ddp_create(em_dist *d, em_module *m, size_t bucket_bytes, em_ddp **out) {
    if (d == NULL || m == NULL || out == NULL)
        return em_backend_set_error(EM_ERR_ARG, "%s: NULL %s", fn_create,
                                    d == NULL ? "communicator" : m == NULL ? "module" : "out");
    if (bucket_bytes == 0) bucket_bytes = DDP_DEFAULT_BUCKET;
    em_ddp *ddp = calloc(1, sizeof *ddp);
    em_params *bufs = NULL;
    em_status s = ddp ? EM_OK : em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn_create);
    if (s == EM_OK) {
        ddp->d = d, ddp->m = m;
        const char *r = getenv("EMBER_DDP_REPORT");
        ddp->report = r != NULL && r[0] != '\0' && r[0] != '0' && em_dist_rank(d) == 0;
        s = host_device(&ddp->host);
    }
    if (s == EM_OK) s = em_params_create(&ddp->params);
    if (s == EM_OK) s = em_module_params(m, NULL, ddp->params);
    if (s == EM_OK) s = em_params_create(&bufs);
    if (s == EM_OK) s = em_module_buffers(m, NULL, bufs);
    /* every replica starts as rank 0's */
    if (s == EM_OK) s = broadcast_set(d, ddp->params);
    if (s == EM_OK) s = broadcast_set(d, bufs);
    em_params_release(bufs);
    /* the trained parameters, last first */
    size_t n = s == EM_OK ? em_params_count(ddp->params) : 0;
    if (s == EM_OK && n > 0) {
        ddp->p = calloc(n, sizeof *ddp->p);
        ddp->b = calloc(n, sizeof *ddp->b); /* at most one bucket per parameter */
        if (!ddp->p || !ddp->b) s = em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn_create);
    }
    for (size_t j = n; s == EM_OK && j-- > 0;) {
        const em_tensor *t = em_params_get(ddp->params, j);
        if (t == NULL || !em_tensor_requires_grad(t) || em_tensor_kind(t) != EM_KIND_FLOAT)
            continue;
        ddp_param *pp = &ddp->p[ddp->np];
        pp->slot = j;
        pp->dt = em_tensor_dtype(t);
        pp->numel = em_tensor_numel(t);
        /* the open bucket of its dtype, or a new one */
        size_t k = ddp->nb;
        for (size_t q = 0; q < ddp->nb; q++)
            if (!ddp->b[q].closed && ddp->b[q].dt == pp->dt) k = q;
        if (k == ddp->nb) {
            ddp->b[k].dt = pp->dt;
            ddp->b[k].es = em_dtype_size(pp->dt);
            ddp->b[k].params = calloc(n, sizeof(size_t));
            if (!ddp->b[k].params) {
                s = em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn_create);
                break;
            }
            ddp->nb++;
        }
        ddp_bucket *b = &ddp->b[k];
        pp->bucket = k;
        pp->off = b->numel;
        b->params[b->np++] = ddp->np;
        b->numel += (size_t)pp->numel;
        if (b->numel * b->es >= bucket_bytes) b->closed = true;
        ddp->np++;
    }
    for (size_t k = 0; s == EM_OK && k < ddp->nb; k++) {
        ddp_bucket *b = &ddp->b[k];
        b->total = b->numel + b->np + 1;
        /* a host tensor whose memory the hook writes and MPI reduces in place; a private
         * buffer and copies where the host device does not lend its memory */
        const int64_t shape[1] = {(int64_t)b->total};
        void *mem = NULL;
        if (em_zeros(shape, 1, b->dt, ddp->host, &b->t) == EM_OK) {
            (void)em_scope_escape(b->t);
            unsigned char *tmp = malloc(b->total * b->es);
            /* em_tensor_to_data waits for pending work: the zeros are in before we write */
            if (tmp && em_tensor_to_data(b->t, tmp, b->total * b->es) == EM_OK &&
                em_tensor_host_data(b->t, &mem) == EM_OK) {
                b->host = mem;
                b->mapped = true;
            }
            free(tmp);
        }
        if (!b->mapped) {
            em_tensor_release(b->t);
            b->t = NULL;
            b->host = malloc(b->total * b->es);
        }
        if (!b->host) s = em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn_create);
        for (size_t q = 0; q < b->np; q++) ddp->p[b->params[q]].flag = b->numel + q;
    }
    if (s != EM_OK) {
        em_ddp_free(ddp);
        return s;
    }
    *out = ddp;
    return EM_OK;
}

/* Starts bucket k's all-reduce (the buffer as it is now). */
static em_status start_bucket(em_ddp *ddp, size_t k) {
    ddp_bucket *b = &ddp->b[k];
    const int64_t shape[1] = {(int64_t)b->total};
    if (ddp->failed) put_flag(b->host, b->dt, b->total - 1, 1);
    em_status s = EM_OK;
    if (!b->mapped) {
        s = em_tensor_from_data(b->host, b->dt, shape, 1, ddp->host, &b->t);
        if (s == EM_OK) (void)em_scope_escape(b->t); /* ours, whatever scope is open */
    }
    if (s == EM_OK) s = em_all_reduce_start(ddp->d, b->t, EM_DIST_MEAN, &b->work);
    b->started = true; /* even on failure: never started twice */
    b->t_start = now_s() - ddp->t0;
    return s;
}

/* Starts every bucket from next_start on that is full (all = true: every one left). */
static em_status start_ready(em_ddp *ddp, bool all) {
    while (ddp->next_start < ddp->nb) {
        ddp_bucket *b = &ddp->b[ddp->next_start];
        if (!all && b->ready < b->np) break;
        em_status s = start_bucket(ddp, ddp->next_start);
        ddp->next_start++;
        if (s != EM_OK) return s;
    }
    return EM_OK;
}

static em_status ddp_hook(void *ctx, size_t index, const em_tensor *grad) {
    em_ddp *ddp = ctx;
    if (index >= ddp->np) return EM_OK;
    ddp_param *pp = &ddp->p[index];
    ddp_bucket *b = &ddp->b[pp->bucket];
    if (pp->reached || b->started) return EM_OK; /* never twice */
    if (em_tensor_numel(grad) != pp->numel || em_tensor_dtype(grad) != pp->dt)
        return em_backend_set_error(EM_ERR_STATE, "%s: parameter '%s' changed shape or dtype "
                                    "since em_ddp_create", fn_backward,
                                    em_params_name(ddp->params, pp->slot));
    em_status s = em_tensor_to_data(grad, b->host + pp->off * b->es, (size_t)pp->numel * b->es);
    if (s != EM_OK) return s;
    put_flag(b->host, b->dt, pp->flag, 1);
    pp->reached = true;
    b->ready++;
    /* MPI progresses only when called: give the started reductions a turn */
    for (size_t k = 0; k < ddp->next_start; k++)
        if (ddp->b[k].work) (void)em_dist_test(ddp->b[k].work);
    if (b->ready == b->np) return start_ready(ddp, false);
    return EM_OK;
}

em_status em_ddp_backward(em_ddp *ddp, const em_tensor *loss, em_grads **grads) {
    if (ddp == NULL || loss == NULL || grads == NULL)
        return em_backend_set_error(EM_ERR_ARG, "%s: NULL %s", fn_backward,
                                    ddp == NULL ? "trainer" : loss == NULL ? "loss" : "grads");
    const em_tensor **plist = NULL;
    if (ddp->np > 0) {
        plist = malloc(ddp->np * sizeof *plist);
        if (!plist) return em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn_backward);
    }
    for (size_t i = 0; i < ddp->np; i++) {
        plist[i] = em_params_get(ddp->params, ddp->p[i].slot);
        ddp->p[i].reached = false;
    }
    for (size_t k = 0; k < ddp->nb; k++) {
        ddp_bucket *b = &ddp->b[k];
        memset(b->host, 0, b->total * b->es);
        b->ready = 0;
        b->started = false;
        b->work = NULL;
        if (!b->mapped) b->t = NULL;
    }
    ddp->next_start = 0;
    ddp->failed = false;
    ddp->t0 = now_s();

    em_grads *g = NULL;
    em_status s = em_backward_hooked(loss, plist, ddp->np, ddp_hook, ddp, &g);
    double t_walk = now_s() - ddp->t0;
    free(plist);
    char msg[512] = "";
    if (s != EM_OK) {
        /* finish the protocol all the same (the others wait for every bucket), marked failed */
        snprintf(msg, sizeof msg, "%s", em_last_error());
        ddp->failed = true;
    }
    em_status fs = start_ready(ddp, true);
    if (s == EM_OK && fs != EM_OK) {
        s = fs;
        snprintf(msg, sizeof msg, "%s", em_last_error());
    }
    bool others_failed = false;
    for (size_t k = 0; k < ddp->nb; k++) {
        ddp_bucket *b = &ddp->b[k];
        if (b->work) {
            em_status ws = em_dist_wait(b->work);
            b->work = NULL;
            if (ws != EM_OK && s == EM_OK) {
                s = ws;
                snprintf(msg, sizeof msg, "%s", em_last_error());
            }
        } else if (s == EM_OK) {
            s = em_backend_set_error(EM_ERR_STATE, "%s: bucket %zu was not started", fn_backward, k);
            snprintf(msg, sizeof msg, "%s", em_last_error());
        }
        if (s == EM_OK && !b->mapped) {
            s = em_tensor_to_data(b->t, b->host, b->total * b->es);
            if (s != EM_OK) snprintf(msg, sizeof msg, "%s", em_last_error());
        }
        if (s == EM_OK && flag_set(b->host, b->dt, b->total - 1)) others_failed = true;
    }
    double t_end = now_s() - ddp->t0;
    if (s == EM_OK && others_failed)
        s = em_backend_set_error(EM_ERR_BACKEND, "%s: another rank failed during its backward "
                                 "(no gradients this step)", fn_backward);
    /* the averages into the gradient set */
    for (size_t i = 0; s == EM_OK && i < ddp->np; i++) {
        ddp_param *pp = &ddp->p[i];
        ddp_bucket *b = &ddp->b[pp->bucket];
        if (!flag_set(b->host, b->dt, pp->flag)) continue; /* no rank reached it */
        const em_tensor *param = em_params_get(ddp->params, pp->slot);
        em_tensor *avg = NULL;
        s = em_tensor_from_data(b->host + pp->off * b->es, pp->dt, em_tensor_shape(param),
                                em_tensor_rank(param), em_device_inner(em_tensor_device(param)),
                                &avg);
        if (s == EM_OK) {
            (void)em_scope_escape(avg);
            s = em_grads_set(g, param, avg);
            em_tensor_release(avg);
        }
        if (s != EM_OK) snprintf(msg, sizeof msg, "%s", em_last_error());
    }
    if (ddp->report) {
        fprintf(stderr, "ddp: backward walk %.3f ms, all reduced %.3f ms;", t_walk * 1e3,
                t_end * 1e3);
        for (size_t k = 0; k < ddp->nb; k++)
            fprintf(stderr, " bucket %zu (%zu params, %zu B) started %.3f ms%s", k,
                    ddp->b[k].np, ddp->b[k].numel * ddp->b[k].es, ddp->b[k].t_start * 1e3,
                    ddp->b[k].t_start < t_walk ? " (during the walk)" : "");
        fprintf(stderr, "\n");
    }
    for (size_t k = 0; k < ddp->nb; k++) {
        if (ddp->b[k].mapped) continue;
        em_tensor_release(ddp->b[k].t);
        ddp->b[k].t = NULL;
    }
    if (s != EM_OK) {
        em_grads_release(g);
        if (msg[0] != '\0') return em_backend_set_error(s, "%s", msg);
        return s;
    }
    *grads = g;
    return EM_OK;
}
