/* read_many.c — em_read_many: many tensors to host memory, one round trip a remote device. */
#include <stdlib.h>

#include "core/internal.h"
#include "ember/remote.h"

/* Reads the tensors ts[idx[0..m-1]] (all on one device whose backend has read_many). */
static em_status emi_read_group(const char *fn, em_tensor *const *ts, const int *idx, int m,
                                void *const *dsts) {
    const void **bufs = calloc((size_t)m, sizeof *bufs);
    size_t *offs = calloc((size_t)m, sizeof *offs), *lens = calloc((size_t)m, sizeof *lens);
    void **outs = calloc((size_t)m, sizeof *outs);
    em_tensor **tmps = calloc((size_t)m, sizeof *tmps);
    em_status s = EM_OK;
    if (!bufs || !offs || !lens || !outs || !tmps) s = emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
    const em_backend_ops *ops = ts[idx[0]]->st->ops;
    void *ctx = ts[idx[0]]->st->ctx;
    for (int j = 0; j < m && s == EM_OK; j++) {
        const em_tensor *t = ts[idx[j]];
        const em_tensor *src = t;
        if (!emi_view_is_contiguous(&t->v)) {
            /* a contiguous copy first: pipelined on the device like any kernel */
            s = emi_empty(fn, t->dev, t->v.dtype, t->v.shape, t->v.rank, &tmps[j]);
            if (s == EM_OK) s = ops->copy(ctx, &tmps[j]->v, &t->v);
            src = tmps[j];
        }
        size_t es = em_dtype_size(t->v.dtype);
        bufs[j] = src->st->buf;
        offs[j] = (size_t)src->v.offset * es;
        lens[j] = (size_t)emi_numel(t->v.shape, t->v.rank) * es;
        outs[j] = dsts[idx[j]];
    }
    if (s == EM_OK) s = ops->read_many(ctx, m, bufs, offs, outs, lens);
    if (s != EM_OK && s != EM_ERR_NOMEM) s = emi_fail_prefixed(s, fn);
    for (int j = 0; j < m && tmps; j++) em_tensor_release(tmps[j]);
    free(bufs);
    free(offs);
    free(lens);
    free(outs);
    free(tmps);
    return s;
}

em_status em_read_many(em_tensor *const *ts, int n, void *const *dsts, const size_t *dst_bytes) {
    static const char fn[] = "em_read_many";
    if (n < 0) return emi_fail(EM_ERR_ARG, "%s: n is %d", fn, n);
    if (n == 0) return EM_OK;
    if (!ts || !dsts || !dst_bytes) return emi_fail(EM_ERR_ARG, "%s: an array is NULL", fn);
    for (int i = 0; i < n; i++) {
        if (!ts[i]) return emi_fail(EM_ERR_ARG, "%s: tensor %d is NULL", fn, i);
        size_t need = (size_t)emi_numel(ts[i]->v.shape, ts[i]->v.rank) * em_dtype_size(ts[i]->v.dtype);
        if (need && !dsts[i]) return emi_fail(EM_ERR_ARG, "%s: dst %d is NULL", fn, i);
        if (dst_bytes[i] < need)
            return emi_fail(EM_ERR_ARG, "%s: dst %d holds %zu bytes, tensor %d needs %zu", fn, i,
                            dst_bytes[i], i, need);
    }
    int *idx = malloc(sizeof(int) * (size_t)n);
    char *done = calloc((size_t)n, 1);
    if (!idx || !done) {
        free(idx);
        free(done);
        return emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
    }
    em_status s = EM_OK;
    for (int i = 0; i < n && s == EM_OK; i++) {
        if (done[i]) continue;
        const em_tensor *t = ts[i];
        if (!t->st->ops->read_many) {
            size_t need = (size_t)emi_numel(t->v.shape, t->v.rank) * em_dtype_size(t->v.dtype);
            s = em_tensor_to_data(t, dsts[i], need);
            if (s != EM_OK) s = emi_fail_prefixed(s, fn);
            done[i] = 1;
            continue;
        }
        /* every tensor of this device, in one call */
        int m = 0;
        for (int j = i; j < n; j++)
            if (!done[j] && ts[j]->st->ops == t->st->ops && ts[j]->st->ctx == t->st->ctx) {
                idx[m++] = j;
                done[j] = 1;
            }
        s = emi_read_group(fn, ts, idx, m, dsts);
    }
    free(idx);
    free(done);
    return s;
}

#ifndef EMBER_WITH_REMOTE
/* Without the remote backend its calls exist and say so. */
static em_status emi_no_remote(const char *fn) {
    return emi_fail(EM_ERR_UNSUPPORTED, "%s: this build has no remote backend (EMBER_WITH_REMOTE)", fn);
}
em_status em_remote_connect(const char *addr, const char *token, em_device *out) {
    (void)addr;
    (void)token;
    (void)out;
    return emi_no_remote("em_remote_connect");
}
em_status em_remote_disconnect(em_device dev) {
    (void)dev;
    return emi_no_remote("em_remote_disconnect");
}
em_status em_remote_sync(em_device dev) {
    (void)dev;
    return emi_no_remote("em_remote_sync");
}
em_status em_remote_server_stats(em_device dev, em_remote_stats *out) {
    (void)dev;
    (void)out;
    return emi_no_remote("em_remote_server_stats");
}
#endif
