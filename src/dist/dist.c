/* dist.c — collectives on ember tensors over MPI (include/ember/dist.h).
 *
 * Every collective, blocking or not, is one of MPI's non-blocking collectives on a private
 * duplicate of the caller's communicator (MPI_ERRORS_RETURN), completed by a polling wait
 * (MPI_Test, spinning first, then yielding, then short sleeps) bounded by the timeout: a
 * collective never hangs. Host tensors that are contiguous (em_tensor_host_data) are reduced
 * where they lie (MPI_IN_PLACE); others are staged through a host buffer (em_tensor_to_data,
 * then em_tensor_from_data + em_tensor_assign back).
 *
 * Naming the ranks that did not come: a liveness protocol on a second private duplicate.
 * Each rank, on starting its collective number k on d, sends k to every peer (one 8-byte
 * non-blocking send each; at most one in flight per peer, the latest number resent when the
 * previous one completes). Each rank drains what its peers sent (MPI_Iprobe + MPI_Recv) at
 * every collective's start — which keeps MPI's unexpected-message queue short — and every
 * 50 ms while it waits. A wait that times out drains once more and names the peers whose
 * latest number is below its own collective's: they did not reach it (a rank that died, or
 * one that is still computing or blocked elsewhere).
 *
 * After a failed wait (timeout, MPI error) the collective's requests may still be pending
 * with MPI, which may still write the buffers: the work keeps them (and a reference to the
 * tensor) on d's list of abandoned works, and d refuses further collectives (EM_ERR_STATE):
 * the ranks no longer agree on which collective is which. em_dist_free reclaims the
 * abandoned works that have completed by then (it polls them for up to half a second) and
 * leaves the others, deliberately, to the process's end.
 */
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist_internal.h"
#include "ember/backend.h"

#define EMD_TAG_LIVE 0x4c56        /* the liveness messages' tag on d->live */
#define EMD_CHUNK ((int64_t)1 << 30) /* elements per MPI call (counts are ints) */
#define EMD_INLINE_REQ 4
#define EMD_DRAIN_PERIOD 0.05 /* seconds between liveness drains while waiting */

struct em_dist {
    MPI_Comm comm; /* the collectives */
    MPI_Comm live; /* the liveness messages */
    int rank, size;
    double timeout;
    int64_t seq;           /* collectives started on d */
    int64_t *peer_seq;     /* [size] the latest collective number each rank announced */
    int64_t *send_val;     /* [size] the value in flight to each peer */
    MPI_Request *send_req; /* [size] the announcement in flight to each peer */
    bool *send_dirty;      /* [size] a newer number is to be sent to that peer */
    bool broken;
    char broken_msg[384];
    em_dist_work *abandoned;
};

typedef enum emd_kind { EMD_REDUCE, EMD_BCAST, EMD_GATHER, EMD_RSCATTER, EMD_BARRIER } emd_kind;

struct em_dist_work {
    em_dist *d;
    const char *fn;
    emd_kind kind;
    int64_t seq;       /* d's collective number */
    em_tensor *t;      /* retained: written in place (reduce, bcast) or the output (gather, ..) */
    em_tensor *src;    /* retained: the input whose host memory is the send buffer */
    void *stage;       /* malloc'd: the result's host copy when t is not host-contiguous */
    void *stage_send;  /* malloc'd: the input's host copy (gather, rscatter) */
    void *data;        /* where the result is: t's memory or stage */
    int64_t count;     /* elements of the result */
    em_dtype dt;
    em_dist_op op;
    bool write_back;   /* the result is in stage: write it to t */
    int nreq;
    MPI_Request *req;
    MPI_Request req_inline[EMD_INLINE_REQ];
    int mpi_error; /* the first error MPI_Test reported */
    em_dist_work *next;
};

/* ---- process-wide: who initialized MPI, ember's f16 / bf16 operations ---- */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_we_init;    /* em_dist_init called MPI_Init_thread */
static int g_live;        /* em_dist objects alive */
static bool g_ops_made;
static MPI_Op g_half_ops[2][3]; /* [f16, bf16][sum, max, min] */

static em_status fail(em_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static em_status fail(em_status s, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return em_backend_set_error(s, "%s", msg);
}

em_status emd_mpi_error(const char *fn, const char *what, int code) {
    char text[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = snprintf(text, sizeof text, "MPI error %d", code);
    text[len < 0 ? 0 : len > MPI_MAX_ERROR_STRING ? MPI_MAX_ERROR_STRING : len] = '\0';
    return fail(EM_ERR_BACKEND, "%s: %s failed: %s", fn, what, text);
}

MPI_Comm emd_comm(const em_dist *d) { return d ? d->comm : MPI_COMM_NULL; }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* f16 / bf16: each pair widened to f32, combined, rounded once (em_f32_to_f16: nearest even,
 * NaN kept); max and min propagate NaN as ember's maximum / minimum do. */
#define EMD_HALF_OP(NAME, TO, FROM, EXPR)                                                    \
    static void NAME(void *in, void *inout, int *len, MPI_Datatype *dt) {                    \
        (void)dt;                                                                            \
        const uint16_t *x = in;                                                              \
        uint16_t *y = inout;                                                                 \
        for (int i = 0; i < *len; i++) {                                                     \
            float a = FROM(x[i]), b = FROM(y[i]);                                            \
            y[i] = TO(EXPR);                                                                 \
        }                                                                                    \
    }
#define EMD_MAX(a, b) ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) > (b) ? (a) : (b))
#define EMD_MIN(a, b) ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) < (b) ? (a) : (b))
EMD_HALF_OP(emd_f16_sum, em_f32_to_f16, em_f16_to_f32, a + b)
EMD_HALF_OP(emd_f16_max, em_f32_to_f16, em_f16_to_f32, EMD_MAX(a, b))
EMD_HALF_OP(emd_f16_min, em_f32_to_f16, em_f16_to_f32, EMD_MIN(a, b))
EMD_HALF_OP(emd_bf16_sum, em_f32_to_bf16, em_bf16_to_f32, a + b)
EMD_HALF_OP(emd_bf16_max, em_f32_to_bf16, em_bf16_to_f32, EMD_MAX(a, b))
EMD_HALF_OP(emd_bf16_min, em_f32_to_bf16, em_bf16_to_f32, EMD_MIN(a, b))

/* Under g_lock. */
static int make_half_ops(void) {
    if (g_ops_made) return MPI_SUCCESS;
    MPI_User_function *fns[2][3] = {{emd_f16_sum, emd_f16_max, emd_f16_min},
                                    {emd_bf16_sum, emd_bf16_max, emd_bf16_min}};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) {
            int rc = MPI_Op_create(fns[i][j], 1, &g_half_ops[i][j]);
            if (rc != MPI_SUCCESS) {
                while (j-- > 0) MPI_Op_free(&g_half_ops[i][j]);
                while (i-- > 0)
                    for (j = 0; j < 3; j++) MPI_Op_free(&g_half_ops[i][j]);
                return rc;
            }
        }
    g_ops_made = true;
    return MPI_SUCCESS;
}

static void free_half_ops(void) {
    if (!g_ops_made) return;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) MPI_Op_free(&g_half_ops[i][j]);
    g_ops_made = false;
}

/* ---- dtypes and operations ---- */

static MPI_Datatype mpi_type(em_dtype dt) {
    switch (dt) {
    case EM_F32: return MPI_FLOAT;
    case EM_F64: return MPI_DOUBLE;
    case EM_F16:
    case EM_BF16: return MPI_UINT16_T;
    case EM_I64: return MPI_INT64_T;
    case EM_I32: return MPI_INT32_T;
    case EM_I16: return MPI_INT16_T;
    case EM_I8: return MPI_INT8_T;
    case EM_U8:
    case EM_BOOL: return MPI_UINT8_T;
    default: return MPI_DATATYPE_NULL;
    }
}

static MPI_Op mpi_op(em_dtype dt, em_dist_op op) {
    int j = op == EM_DIST_MAX ? 1 : op == EM_DIST_MIN ? 2 : 0; /* sum and mean: sum */
    if (dt == EM_F16) return g_half_ops[0][j];
    if (dt == EM_BF16) return g_half_ops[1][j];
    if (dt == EM_BOOL) return j == 2 ? MPI_LAND : MPI_LOR; /* sum, max: or; min: and */
    return j == 1 ? MPI_MAX : j == 2 ? MPI_MIN : MPI_SUM;
}

static void divide(void *data, em_dtype dt, int64_t n, int size) {
    switch (dt) {
    case EM_F32: {
        float *x = data, s = (float)size;
        for (int64_t i = 0; i < n; i++) x[i] /= s;
        break;
    }
    case EM_F64: {
        double *x = data, s = size;
        for (int64_t i = 0; i < n; i++) x[i] /= s;
        break;
    }
    case EM_F16: {
        uint16_t *x = data;
        for (int64_t i = 0; i < n; i++) x[i] = em_f32_to_f16(em_f16_to_f32(x[i]) / (float)size);
        break;
    }
    case EM_BF16: {
        uint16_t *x = data;
        for (int64_t i = 0; i < n; i++)
            x[i] = em_f32_to_bf16(em_bf16_to_f32(x[i]) / (float)size);
        break;
    }
    default: break;
    }
}

/* ---- setup ---- */

static em_status dist_make(const char *fn, MPI_Comm base, em_dist **out) {
    em_dist *d = calloc(1, sizeof *d);
    if (!d) return fail(EM_ERR_NOMEM, "%s: out of memory", fn);
    d->comm = d->live = MPI_COMM_NULL;
    int rc = MPI_Comm_dup(base, &d->comm);
    if (rc != MPI_SUCCESS) {
        free(d);
        return emd_mpi_error(fn, "MPI_Comm_dup", rc);
    }
    em_status s = EM_OK;
    const char *what = NULL;
    if ((rc = MPI_Comm_set_errhandler(d->comm, MPI_ERRORS_RETURN)) != MPI_SUCCESS)
        what = "MPI_Comm_set_errhandler";
    else if ((rc = MPI_Comm_dup(d->comm, &d->live)) != MPI_SUCCESS)
        what = "MPI_Comm_dup";
    else if ((rc = MPI_Comm_set_errhandler(d->live, MPI_ERRORS_RETURN)) != MPI_SUCCESS)
        what = "MPI_Comm_set_errhandler";
    else if ((rc = MPI_Comm_rank(d->comm, &d->rank)) != MPI_SUCCESS)
        what = "MPI_Comm_rank";
    else if ((rc = MPI_Comm_size(d->comm, &d->size)) != MPI_SUCCESS)
        what = "MPI_Comm_size";
    if (what) s = emd_mpi_error(fn, what, rc);
    if (s == EM_OK) {
        pthread_mutex_lock(&g_lock);
        rc = make_half_ops();
        pthread_mutex_unlock(&g_lock);
        if (rc != MPI_SUCCESS) s = emd_mpi_error(fn, "MPI_Op_create", rc);
    }
    if (s == EM_OK) {
        size_t n = (size_t)d->size;
        d->peer_seq = calloc(n, sizeof *d->peer_seq);
        d->send_val = calloc(n, sizeof *d->send_val);
        d->send_req = malloc(n * sizeof *d->send_req);
        d->send_dirty = calloc(n, sizeof *d->send_dirty);
        if (!d->peer_seq || !d->send_val || !d->send_req || !d->send_dirty)
            s = fail(EM_ERR_NOMEM, "%s: out of memory", fn);
        else
            for (size_t i = 0; i < n; i++) d->send_req[i] = MPI_REQUEST_NULL;
    }
    if (s != EM_OK) {
        if (d->live != MPI_COMM_NULL) MPI_Comm_free(&d->live);
        if (d->comm != MPI_COMM_NULL) MPI_Comm_free(&d->comm);
        free(d->peer_seq);
        free(d->send_val);
        free(d->send_req);
        free(d->send_dirty);
        free(d);
        return s;
    }
    d->timeout = 300.0;
    const char *env = getenv("EMBER_DIST_TIMEOUT");
    if (env && *env) {
        char *end;
        double v = strtod(env, &end);
        if (end != env && *end == '\0' && v > 0) d->timeout = v;
        else fprintf(stderr, "ember: EMBER_DIST_TIMEOUT=\"%s\" is not a number of seconds > 0: "
                             "using %g\n", env, d->timeout);
    }
    pthread_mutex_lock(&g_lock);
    g_live++;
    pthread_mutex_unlock(&g_lock);
    *out = d;
    return EM_OK;
}

em_status em_dist_init(int *argc, char ***argv, em_dist **out) {
    static const char fn[] = "em_dist_init";
    if (!out) return fail(EM_ERR_ARG, "%s: out is NULL", fn);
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized) return fail(EM_ERR_STATE, "%s: MPI was finalized (it cannot start again)", fn);
    if (!inited) {
        pthread_mutex_lock(&g_lock);
        MPI_Initialized(&inited);
        int rc = MPI_SUCCESS, provided = 0;
        if (!inited) {
            /* Open MPI's non-blocking all-reduce (coll/libnbc) picks a binomial tree for few
             * ranks: 0.45 - 0.65 of MPI_Allreduce's bandwidth from 256 KB up on 2 ranks here;
             * its ring matches it (0.95 - 1.1). Chosen unless the user set it (an MCA
             * parameter: read at MPI_Init; other MPIs ignore it). */
            setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0);
            rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
            if (rc == MPI_SUCCESS) g_we_init = true;
        }
        pthread_mutex_unlock(&g_lock);
        if (rc != MPI_SUCCESS) return emd_mpi_error(fn, "MPI_Init_thread", rc);
        if (!inited && provided < MPI_THREAD_FUNNELED) {
            /* MPI runs; ember calls it from one thread at a time, which works with most
             * MPIs' single level in practice: keep going. */
        }
    }
    return dist_make(fn, MPI_COMM_WORLD, out);
}

em_status em_dist_from_comm(const void *comm, em_dist **out) {
    static const char fn[] = "em_dist_from_comm";
    if (!comm) return fail(EM_ERR_ARG, "%s: comm is NULL", fn);
    if (!out) return fail(EM_ERR_ARG, "%s: out is NULL", fn);
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (!inited || finalized)
        return fail(EM_ERR_STATE, "%s: MPI is %s", fn, finalized ? "finalized" : "not initialized");
    MPI_Comm c = *(const MPI_Comm *)comm;
    if (c == MPI_COMM_NULL) return fail(EM_ERR_ARG, "%s: comm is MPI_COMM_NULL", fn);
    return dist_make(fn, c, out);
}

int em_dist_rank(const em_dist *d) { return d ? d->rank : 0; }
int em_dist_size(const em_dist *d) { return d ? d->size : 1; }

em_status em_dist_set_timeout(em_dist *d, double seconds) {
    if (!d) return fail(EM_ERR_ARG, "em_dist_set_timeout: d is NULL");
    if (!(seconds > 0) || seconds > 1e9)
        return fail(EM_ERR_ARG, "em_dist_set_timeout: %g is not a number of seconds > 0", seconds);
    d->timeout = seconds;
    return EM_OK;
}

/* ---- the liveness protocol ---- */

static void live_flush(em_dist *d) {
    for (int p = 0; p < d->size; p++) {
        if (p == d->rank || !d->send_dirty[p]) continue;
        if (d->send_req[p] != MPI_REQUEST_NULL) {
            int done = 0;
            if (MPI_Test(&d->send_req[p], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
                d->send_dirty[p] = false; /* that peer's link is gone: stop telling it */
                continue;
            }
            if (!done) continue; /* sent again when this one completes */
        }
        d->send_val[p] = d->seq;
        d->send_dirty[p] = false;
        if (MPI_Isend(&d->send_val[p], 1, MPI_INT64_T, p, EMD_TAG_LIVE, d->live,
                      &d->send_req[p]) != MPI_SUCCESS)
            d->send_req[p] = MPI_REQUEST_NULL;
    }
}

static void live_drain(em_dist *d) {
    for (int guard = 0; guard < 1 << 20; guard++) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, EMD_TAG_LIVE, d->live, &flag, &st) != MPI_SUCCESS || !flag)
            break;
        int64_t v = 0;
        if (MPI_Recv(&v, 1, MPI_INT64_T, st.MPI_SOURCE, EMD_TAG_LIVE, d->live,
                     MPI_STATUS_IGNORE) != MPI_SUCCESS)
            break;
        if (st.MPI_SOURCE >= 0 && st.MPI_SOURCE < d->size && v > d->peer_seq[st.MPI_SOURCE])
            d->peer_seq[st.MPI_SOURCE] = v;
    }
    live_flush(d);
}

/* The start of collective number d->seq + 1. */
static void live_announce(em_dist *d) {
    live_drain(d);
    d->seq++;
    d->peer_seq[d->rank] = d->seq;
    for (int p = 0; p < d->size; p++) d->send_dirty[p] = p != d->rank;
    live_flush(d);
}

/* ---- works ---- */

static em_status check_d(const char *fn, const em_dist *d) {
    if (!d) return fail(EM_ERR_ARG, "%s: d is NULL", fn);
    if (d->broken)
        return fail(EM_ERR_STATE, "%s: an earlier collective on this communicator failed (%s); "
                                  "its ranks no longer agree on the collectives' order",
                    fn, d->broken_msg);
    return EM_OK;
}

static em_status check_tensor(const char *fn, const char *name, const em_tensor *t) {
    if (!t) return fail(EM_ERR_ARG, "%s: %s is NULL", fn, name);
    em_dtype dt = em_tensor_dtype(t);
    if (em_dtype_kind(dt) == EM_KIND_QUANTIZED)
        return fail(EM_ERR_DTYPE, "%s: %s is quantized (%s): dequantize it first", fn, name,
                    em_dtype_name(dt));
    if (mpi_type(dt) == MPI_DATATYPE_NULL)
        return fail(EM_ERR_DTYPE, "%s: %s has dtype %s, which MPI cannot carry", fn, name,
                    em_dtype_name(dt));
    return EM_OK;
}

static em_status check_op(const char *fn, em_dtype dt, em_dist_op op) {
    if ((int)op < EM_DIST_SUM || (int)op > EM_DIST_MIN)
        return fail(EM_ERR_ARG, "%s: op %d is not an em_dist_op", fn, (int)op);
    if (op == EM_DIST_MEAN && em_dtype_kind(dt) != EM_KIND_FLOAT)
        return fail(EM_ERR_DTYPE, "%s: EM_DIST_MEAN of a %s tensor (%s): floats only", fn,
                    em_kind_name(em_dtype_kind(dt)), em_dtype_name(dt));
    return EM_OK;
}

static em_dist_work *work_new(const char *fn, em_dist *d, emd_kind kind, int nreq) {
    em_dist_work *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->d = d;
    w->fn = fn;
    w->kind = kind;
    w->nreq = nreq;
    w->req = nreq <= EMD_INLINE_REQ ? w->req_inline : malloc((size_t)nreq * sizeof *w->req);
    if (!w->req) {
        free(w);
        return NULL;
    }
    for (int i = 0; i < nreq; i++) w->req[i] = MPI_REQUEST_NULL;
    return w;
}

static void work_free(em_dist_work *w) {
    if (!w) return;
    em_tensor_release(w->t);
    em_tensor_release(w->src);
    free(w->stage);
    free(w->stage_send);
    if (w->req != w->req_inline) free(w->req);
    free(w);
}

static bool work_pending(const em_dist_work *w) {
    for (int i = 0; i < w->nreq; i++)
        if (w->req[i] != MPI_REQUEST_NULL) return true;
    return false;
}

/* Tests every pending request once; true when none is left. Records MPI's first error. */
static bool work_poll(em_dist_work *w) {
    bool left = false;
    for (int i = 0; i < w->nreq; i++) {
        if (w->req[i] == MPI_REQUEST_NULL) continue;
        int done = 0;
        int rc = MPI_Test(&w->req[i], &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS && !w->mpi_error) w->mpi_error = rc;
        if (!done && w->req[i] != MPI_REQUEST_NULL) left = true;
    }
    return !left;
}

/* A work that failed with requests still pending: kept (with its buffers and tensors) on
 * d's list; d refuses further collectives. A work with none pending is freed. */
static void work_abandon(em_dist_work *w, const char *why) {
    em_dist *d = w->d;
    if (!d->broken) {
        d->broken = true;
        snprintf(d->broken_msg, sizeof d->broken_msg, "%s", why);
    }
    if (!work_pending(w)) {
        work_free(w);
        return;
    }
    w->next = d->abandoned;
    d->abandoned = w;
}

static em_status timeout_error(em_dist_work *w, double waited) {
    em_dist *d = w->d;
    live_drain(d);
    char list[192] = "", last[192] = "";
    size_t ll = 0, lt = 0;
    int missing = 0;
    for (int p = 0; p < d->size; p++) {
        if (p == d->rank || d->peer_seq[p] >= w->seq) continue;
        if (missing < 12) {
            int n = snprintf(list + ll, sizeof list - ll, "%s%d", missing ? ", " : "", p);
            if (n > 0 && (size_t)n < sizeof list - ll) ll += (size_t)n;
            n = snprintf(last + lt, sizeof last - lt, "%s%d: #%lld", missing ? ", " : "", p,
                         (long long)d->peer_seq[p]);
            if (n > 0 && (size_t)n < sizeof last - lt) lt += (size_t)n;
        }
        missing++;
    }
    if (missing > 12) {
        snprintf(list + ll, sizeof list - ll, " and %d more", missing - 12);
        snprintf(last + lt, sizeof last - lt, ", ...");
    }
    if (missing)
        return fail(EM_ERR_BACKEND,
                    "%s: timed out after %g s (timeout %g s) in collective #%lld on rank %d of "
                    "%d: rank%s %s did not reach it (dead, or still computing or blocked "
                    "elsewhere; the last collective each started: %s)",
                    w->fn, waited, d->timeout, (long long)w->seq, d->rank, d->size,
                    missing > 1 ? "s" : "", list, last);
    return fail(EM_ERR_BACKEND,
                "%s: timed out after %g s (timeout %g s) in collective #%lld on rank %d of %d: "
                "every rank started it but it did not complete (a rank may have died during "
                "it, or its transfers stalled)",
                w->fn, waited, d->timeout, (long long)w->seq, d->rank, d->size);
}

/* Polls w until it completes, fails or times out; on failure the message is set. */
static em_status work_wait(em_dist_work *w) {
    em_dist *d = w->d;
    if (work_poll(w)) goto done;
    double start = now_s(), t = start, next_drain = start + EMD_DRAIN_PERIOD;
    for (unsigned long it = 1;; it++) {
        if (work_poll(w)) goto done;
        if (w->mpi_error) break;
        double el = t - start;
        /* spin for 20 ms (what MPI's own blocking calls do), then yield the core, then nap */
        if (el < 0.02) {
            if (it % 64) continue;
        } else if (el < 1.0) {
            if (it % 8 == 0) sched_yield();
            if (it % 16) continue;
        } else {
            struct timespec nap = {0, 50000};
            nanosleep(&nap, NULL);
        }
        t = now_s();
        if (t >= next_drain) {
            live_drain(d);
            next_drain = t + EMD_DRAIN_PERIOD;
        }
        if (t - start >= d->timeout) return timeout_error(w, t - start);
    }
done:
    if (w->mpi_error) {
        char what[64];
        snprintf(what, sizeof what, "collective #%lld", (long long)w->seq);
        return emd_mpi_error(w->fn, what, w->mpi_error);
    }
    return EM_OK;
}

/* The result of a completed work, into its tensor. */
static em_status work_finish(em_dist_work *w) {
    if (w->kind == EMD_REDUCE || w->kind == EMD_RSCATTER) {
        if (w->op == EM_DIST_MEAN) divide(w->data, w->dt, w->count, w->d->size);
    }
    if (!w->write_back) return EM_OK;
    em_device dev = em_tensor_device(w->t);
    dev.autodiff = false;
    dev.checkpointing = EM_CKPT_NONE;
    em_tensor *tmp = NULL;
    em_status s = em_tensor_from_data(w->data, w->dt, em_tensor_shape(w->t), em_tensor_rank(w->t),
                                      dev, &tmp);
    /* a tracked tensor (a view made by an op on an autodiff device) takes the values through
     * an untracked view of its buffer: they are values, not a step of its graph */
    em_tensor *dst = w->t, *plain = NULL;
    if (s == EM_OK && em_tensor_is_tracked(w->t)) {
        s = em_tensor_detach(w->t, &plain);
        dst = plain;
    }
    if (s == EM_OK) s = em_tensor_assign(dst, tmp);
    em_tensor_release(plain);
    em_tensor_release(tmp);
    if (s != EM_OK) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s: writing the result back: %s", w->fn, em_last_error());
        return fail(s, "%s", msg);
    }
    return EM_OK;
}

/* Completes w and frees it (or abandons it on failure). */
static em_status work_complete(em_dist_work *w) {
    em_status s = work_wait(w);
    if (s != EM_OK) {
        work_abandon(w, em_last_error());
        return s;
    }
    s = work_finish(w);
    work_free(w);
    return s;
}

/* w->data: t's memory when t is host-contiguous, else a host copy of t's values (read when
 * `values`). */
static em_status work_buffer(em_dist_work *w, em_tensor *t, bool values) {
    void *p = NULL;
    em_status s = em_tensor_host_data(t, &p);
    int64_t n = em_tensor_numel(t);
    size_t bytes = (size_t)n * em_dtype_size(em_tensor_dtype(t));
    w->count = n;
    if (s == EM_OK) {
        w->data = p;
        return EM_OK;
    }
    if (s != EM_ERR_UNSUPPORTED) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s: %s", w->fn, em_last_error());
        return fail(s, "%s", msg);
    }
    em_clear_error();
    w->stage = malloc(bytes ? bytes : 1);
    if (!w->stage) return fail(EM_ERR_NOMEM, "%s: out of memory (%zu bytes)", w->fn, bytes);
    if (values && bytes) {
        s = em_tensor_to_data(t, w->stage, bytes);
        if (s != EM_OK) return s;
    }
    w->data = w->stage;
    w->write_back = true;
    return EM_OK;
}

static int chunks_of(int64_t n) { return n <= 0 ? 1 : (int)((n + EMD_CHUNK - 1) / EMD_CHUNK); }

/* all_reduce and broadcast, in place; root < 0: all_reduce. */
static em_status start_inplace(const char *fn, em_dist *d, em_tensor *t, em_dist_op op, int root,
                               em_dist_work **work) {
    em_status s;
    if ((s = check_d(fn, d)) != EM_OK || (s = check_tensor(fn, "t", t)) != EM_OK) return s;
    if (!work) return fail(EM_ERR_ARG, "%s: work is NULL", fn);
    em_dtype dt = em_tensor_dtype(t);
    if (root < 0 && (s = check_op(fn, dt, op)) != EM_OK) return s;
    if (root >= 0 && root >= d->size)
        return fail(EM_ERR_ARG, "%s: root %d is not a rank (0 .. %d)", fn, root, d->size - 1);
    int64_t n = em_tensor_numel(t);
    int nreq = chunks_of(n);
    em_dist_work *w = work_new(fn, d, root < 0 ? EMD_REDUCE : EMD_BCAST, nreq);
    if (!w) return fail(EM_ERR_NOMEM, "%s: out of memory", fn);
    w->dt = dt;
    w->op = op;
    s = work_buffer(w, t, root < 0 || root == d->rank);
    if (s != EM_OK) {
        work_free(w);
        return s;
    }
    if (root == d->rank) w->write_back = false; /* the root's values do not change */
    em_tensor_retain(t);
    w->t = t;
    live_announce(d);
    w->seq = d->seq;
    MPI_Datatype ty = mpi_type(dt);
    size_t es = em_dtype_size(dt);
    for (int i = 0; i < nreq; i++) {
        int64_t off = (int64_t)i * EMD_CHUNK, cnt = n - off < EMD_CHUNK ? n - off : EMD_CHUNK;
        if (cnt < 0) cnt = 0;
        char *p = (char *)w->data + (size_t)off * es;
        int rc = root < 0 ? MPI_Iallreduce(MPI_IN_PLACE, p, (int)cnt, ty, mpi_op(dt, op), d->comm,
                                           &w->req[i])
                          : MPI_Ibcast(p, (int)cnt, ty, root, d->comm, &w->req[i]);
        if (rc != MPI_SUCCESS) {
            w->req[i] = MPI_REQUEST_NULL;
            s = emd_mpi_error(fn, root < 0 ? "MPI_Iallreduce" : "MPI_Ibcast", rc);
            work_abandon(w, em_last_error());
            return s;
        }
    }
    *work = w;
    return EM_OK;
}

em_status em_all_reduce_start(em_dist *d, em_tensor *t, em_dist_op op, em_dist_work **work) {
    return start_inplace("em_all_reduce_start", d, t, op, -1, work);
}

em_status em_broadcast_start(em_dist *d, em_tensor *t, int root, em_dist_work **work) {
    if (root < 0)
        return fail(EM_ERR_ARG, "em_broadcast_start: root %d is not a rank", root);
    return start_inplace("em_broadcast_start", d, t, EM_DIST_SUM, root, work);
}

em_status em_all_reduce(em_dist *d, em_tensor *t, em_dist_op op) {
    em_dist_work *w = NULL;
    em_status s = start_inplace("em_all_reduce", d, t, op, -1, &w);
    return s != EM_OK ? s : work_complete(w);
}

em_status em_broadcast(em_dist *d, em_tensor *t, int root) {
    if (root < 0) return fail(EM_ERR_ARG, "em_broadcast: root %d is not a rank", root);
    em_dist_work *w = NULL;
    em_status s = start_inplace("em_broadcast", d, t, EM_DIST_SUM, root, &w);
    return s != EM_OK ? s : work_complete(w);
}

em_status em_dist_wait(em_dist_work *work) {
    if (!work) return fail(EM_ERR_ARG, "em_dist_wait: work is NULL");
    return work_complete(work);
}

bool em_dist_test(em_dist_work *work) {
    if (!work) return false;
    return work_poll(work);
}

/* all_gather and reduce_scatter: a new tensor out of t. */
static em_status gather_scatter(const char *fn, em_dist *d, const em_tensor *t, em_dist_op op,
                                bool gather, em_tensor **out) {
    em_status s;
    if ((s = check_d(fn, d)) != EM_OK || (s = check_tensor(fn, "t", t)) != EM_OK) return s;
    if (!out) return fail(EM_ERR_ARG, "%s: out is NULL", fn);
    em_dtype dt = em_tensor_dtype(t);
    if (!gather && (s = check_op(fn, dt, op)) != EM_OK) return s;
    int rank = em_tensor_rank(t);
    const int64_t *shape = em_tensor_shape(t);
    int64_t n = em_tensor_numel(t), oshape[EM_MAX_RANK];
    int orank = rank ? rank : 1;
    for (int i = 0; i < rank; i++) oshape[i] = shape[i];
    int64_t ocount; /* elements of the result */
    int64_t block;  /* elements each rank sends (gather) or gets (scatter) */
    if (gather) {
        if (rank == 0) oshape[0] = 1;
        if (oshape[0] > INT64_MAX / d->size || n > INT64_MAX / d->size)
            return fail(EM_ERR_SHAPE, "%s: the gathered shape overflows", fn);
        oshape[0] *= d->size;
        ocount = n * d->size;
        block = n;
    } else {
        if (rank == 0)
            return fail(EM_ERR_SHAPE, "%s: t is 0-d: its dim 0 must be a multiple of the %d ranks",
                        fn, d->size);
        if (shape[0] % d->size)
            return fail(EM_ERR_SHAPE, "%s: t's dim 0 (%lld) is not a multiple of the %d ranks", fn,
                        (long long)shape[0], d->size);
        oshape[0] = shape[0] / d->size;
        ocount = n / d->size;
        block = ocount;
    }
    if (block > INT_MAX)
        return fail(EM_ERR_UNSUPPORTED, "%s: %lld elements per rank: at most %d", fn,
                    (long long)block, INT_MAX);
    em_dist_work *w = work_new(fn, d, gather ? EMD_GATHER : EMD_RSCATTER, 1);
    if (!w) return fail(EM_ERR_NOMEM, "%s: out of memory", fn);
    w->dt = dt;
    w->op = op;
    size_t es = em_dtype_size(dt);
    /* the send buffer: t's memory, or a copy */
    const void *send = NULL;
    {
        void *p = NULL;
        s = em_tensor_host_data(t, &p);
        if (s == EM_OK) {
            send = p;
            em_tensor_retain((em_tensor *)t);
            w->src = (em_tensor *)t;
        } else if (s == EM_ERR_UNSUPPORTED) {
            em_clear_error();
            size_t bytes = (size_t)n * es;
            w->stage_send = malloc(bytes ? bytes : 1);
            if (!w->stage_send) s = fail(EM_ERR_NOMEM, "%s: out of memory", fn);
            else s = bytes ? em_tensor_to_data(t, w->stage_send, bytes) : EM_OK;
            send = w->stage_send;
        } else {
            char msg[400];
            snprintf(msg, sizeof msg, "%s: %s", fn, em_last_error());
            s = fail(s, "%s", msg);
        }
    }
    /* the result: a new tensor on t's device, its memory received into when it is host */
    em_tensor *res = NULL;
    if (s == EM_OK) s = em_zeros(oshape, orank, dt, em_tensor_device(t), &res);
    if (s == EM_OK) {
        w->t = res;
        s = work_buffer(w, res, false);
    }
    if (s != EM_OK) {
        work_free(w);
        return s;
    }
    w->count = ocount;
    live_announce(d);
    w->seq = d->seq;
    MPI_Datatype ty = mpi_type(dt);
    int rc = gather ? MPI_Iallgather(send, (int)block, ty, w->data, (int)block, ty, d->comm,
                                     &w->req[0])
                    : MPI_Ireduce_scatter_block(send, w->data, (int)block, ty, mpi_op(dt, op),
                                                d->comm, &w->req[0]);
    if (rc != MPI_SUCCESS) {
        w->req[0] = MPI_REQUEST_NULL;
        s = emd_mpi_error(fn, gather ? "MPI_Iallgather" : "MPI_Ireduce_scatter_block", rc);
        work_abandon(w, em_last_error());
        return s;
    }
    em_tensor_retain(res); /* *out's reference; w keeps its own until it is freed */
    s = work_complete(w);
    if (s != EM_OK) {
        em_tensor_release(res);
        return s;
    }
    *out = res;
    return EM_OK;
}

em_status em_all_gather(em_dist *d, const em_tensor *t, em_tensor **out) {
    return gather_scatter("em_all_gather", d, t, EM_DIST_SUM, true, out);
}

em_status em_reduce_scatter(em_dist *d, const em_tensor *t, em_dist_op op, em_tensor **out) {
    return gather_scatter("em_reduce_scatter", d, t, op, false, out);
}

em_status em_barrier(em_dist *d) {
    static const char fn[] = "em_barrier";
    em_status s = check_d(fn, d);
    if (s != EM_OK) return s;
    em_dist_work *w = work_new(fn, d, EMD_BARRIER, 1);
    if (!w) return fail(EM_ERR_NOMEM, "%s: out of memory", fn);
    live_announce(d);
    w->seq = d->seq;
    int rc = MPI_Ibarrier(d->comm, &w->req[0]);
    if (rc != MPI_SUCCESS) {
        w->req[0] = MPI_REQUEST_NULL;
        s = emd_mpi_error(fn, "MPI_Ibarrier", rc);
        work_abandon(w, em_last_error());
        return s;
    }
    return work_complete(w);
}

/* ---- freeing ---- */

void em_dist_free(em_dist *d) {
    if (!d) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
        /* the abandoned works that complete within half a second are reclaimed */
        double until = now_s() + 0.5;
        while (d->abandoned) {
            em_dist_work **pw = &d->abandoned;
            while (*pw) {
                em_dist_work *w = *pw;
                if (work_poll(w)) {
                    *pw = w->next;
                    work_free(w);
                } else {
                    pw = &w->next;
                }
            }
            if (!d->abandoned || now_s() > until) break;
            sched_yield();
        }
        live_drain(d);
        for (int p = 0; p < d->size; p++)
            if (d->send_req[p] != MPI_REQUEST_NULL) MPI_Request_free(&d->send_req[p]);
        MPI_Comm_free(&d->live);
        MPI_Comm_free(&d->comm);
    }
    /* works still pending are left to the process's end: MPI may still write their buffers */
    free(d->peer_seq);
    free(d->send_val);
    free(d->send_req);
    free(d->send_dirty);
    free(d);
    pthread_mutex_lock(&g_lock);
    bool last = --g_live == 0;
    if (last && g_we_init && !finalized) {
        free_half_ops();
        MPI_Finalize();
    }
    pthread_mutex_unlock(&g_lock);
}
