/*
 * server.h — the remote protocol's server: hosts one device of this machine for many clients.
 * tools/ember-server.c is its command line; tests start it in-process. Private to ember (not
 * exported from the shared library); see docs/remote-protocol.md.
 */
#ifndef EMBER_REMOTE_SERVER_H
#define EMBER_REMOTE_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire/exec.h"

typedef struct rs_config {
    const char *listen;    /* "HOST:PORT" or "PORT" (host 127.0.0.1); port 0: any free one */
    em_device device;      /* the hosted device (autodiff flags are passed on to clients) */
    const char *token;     /* the shared secret (non-empty) */
    uint64_t max_bytes;    /* bytes of buffers a client may hold (0: no limit) */
    uint64_t max_tensors;  /* buffers a client may hold (0: no limit) */
    uint64_t max_total_bytes; /* bytes of buffers all clients together may hold (0: no limit) */
    uint32_t max_msg;      /* largest frame body (0: RW_DEFAULT_MAX_MSG) */
    int max_clients;       /* authenticated connections at once (0: 64) */
    int max_pending;       /* connections still in the handshake (0: 16); when they are all
                            * taken, a new connection takes the oldest one's place */
    int handshake_timeout_s; /* the whole handshake (0: 5) */
    bool verbose;          /* one line on stderr per connection event */
} rs_config;

typedef struct rs_server rs_server;

/** Opens the hosted device, binds and starts accepting (a thread). *out is the server.
 *  Errors: EM_ERR_ARG (bad config), EM_ERR_DEVICE (device absent), EM_ERR_IO (bind). */
em_status rs_start(const rs_config *cfg, rs_server **out);
/** The port the server listens on. */
int rs_port(const rs_server *s);
/** Totals over all connections (client fields are 0). */
void rs_stats(rs_server *s, rw_stats *out);
/** Stops accepting, closes every connection (their buffers are freed), joins, frees s. */
void rs_stop(rs_server *s);

/* rs_host, rs_lookup_fn and rs_exec_kernel: src/wire/exec.h */

#endif /* EMBER_REMOTE_SERVER_H */
