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

/** How a kernel that rs_resolve_kernel checked runs from then on. */
typedef enum rs_mode {
    RS_SKIP,    /* its primary output is empty: nothing runs */
    RS_DIRECT,  /* rs_run_resolved, with no further check */
    RS_CHECKED, /* rs_exec_kernel at every run (it reads index values, or an input of a device
                 * without EM_CAP_STRIDED_INPUTS must be copied contiguous first) */
} rs_mode;

/** Checks k as rs_exec_kernel does, except index values, and resolves its views into views[]
 *  (their bufs from lookup) without running it: for a caller that runs one call many times
 *  over buffers whose sizes do not change (a prepared graph). The buffers' contents may
 *  change between runs, and a view's buf may be replaced by another buffer of the same size. */
em_status rs_resolve_kernel(const rs_host *h, rs_lookup_fn lookup, void *conn,
                            const rw_kernel *k, em_view views[RW_MAX_VIEWS], rs_mode *mode,
                            char *msg, size_t cap);
/** Runs a kernel that rs_resolve_kernel made RS_DIRECT, on views[]. */
em_status rs_run_resolved(const rs_host *h, const rw_kernel *k, em_view views[RW_MAX_VIEWS],
                          char *msg, size_t cap);

/** True when the device implements slot s. */
bool rs_implements(const em_backend_ops *o, rw_slot s);
/** Bit i set: the device implements kernel slot i (the remote protocol's slots). */
uint32_t rs_slot_mask(const em_backend_ops *o);

#endif /* EMBER_WIRE_EXEC_H */
