/*
 * exec.h — runs one decoded kernel call (rw_kernel) on a device after checking it as hostile
 * input: the remote server runs its clients' messages through it, and a captured graph
 * (src/graph) its recorded calls, which may come from a file. Private to ember.
 */
#ifndef EMBER_WIRE_EXEC_H
#define EMBER_WIRE_EXEC_H

#include "wire/wire.h"

/** The device a kernel call runs on. */
typedef struct rs_host {
    const em_backend_ops *ops;
    void *ctx;
    bool serialize;  /* kernels take `lock` (backends that are not thread-safe) */
    void *lock;      /* pthread_mutex_t *; may be NULL when serialize is false */
} rs_host;

/** Looks a buffer up by id: its handle and size, or false. */
typedef bool (*rs_lookup_fn)(void *conn, uint64_t id, void **buf, size_t *bytes);

/** Checks a decoded kernel against the caller's buffers (ids, view bounds, shapes and dtypes
 *  the kernel relies on, index values) and runs it on the device. On failure returns a
 *  status and writes "<slot>: <reason>" into msg. */
em_status rs_exec_kernel(const rs_host *h, rs_lookup_fn lookup, void *conn, const rw_kernel *k,
                         char *msg, size_t cap);

/** Bit i set: the device implements kernel slot i. */
uint32_t rs_slot_mask(const em_backend_ops *o);

#endif /* EMBER_WIRE_EXEC_H */
