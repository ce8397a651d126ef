/*
 * client.h — private interface of the remote backend's client side (client.c: connections and
 * memory; client_kernels.c: the kernel slots, each one pipelined message).
 */
#ifndef EMBER_REMOTE_CLIENT_H
#define EMBER_REMOTE_CLIENT_H

#include "wire/calls.h"

/** What em_view.buf points to on this backend. */
typedef struct rc_buf {
    uint64_t id;
    size_t bytes;
} rc_buf;

/** The buffer id of a view. */
static inline uint64_t rc_id(const em_view *v) { return ((const rc_buf *)v->buf)->id; }

/** Appends one kernel message on connection ctx (views[i] NULL: absent). Returns
 *  EM_ERR_UNSUPPORTED (synchronously) when the hosted device lacks the slot, EM_ERR_STATE
 *  when disconnected, EM_ERR_IO when the connection broke; otherwise EM_OK: the kernel's own
 *  failure is reported at the next read or sync. */
em_status rc_kernel(void *ctx, rw_slot slot, int sub, const em_view *const views[RW_MAX_VIEWS],
                    const int64_t *ints, const double *doubles);

#endif /* EMBER_REMOTE_CLIENT_H */
