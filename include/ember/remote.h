/*
 * remote.h — tensors on another machine: the `remote` backend's public calls.
 *
 * A server (`ember-server --listen ADDR:PORT --device D --token-file F`) hosts one device D of
 * its machine. em_remote_connect() authenticates to it with the shared token and returns a
 * device `remote:N`: every op on tensors of that device runs on the server's device D, and
 * em_to_device() moves tensors in and out. Ops are pipelined: they are sent without waiting
 * for a reply, and an op that fails on the server is reported, with its name, by the next call
 * that waits for the server (a read such as em_tensor_to_data, em_read_many, em_remote_sync),
 * as EM_ERR_BACKEND "remote: <op>: <server's message>".
 *
 * Devices are numbered in connect order from 0 for the life of the process and never reused:
 * `remote:N` names the N-th connection. em_devices() lists them all (a disconnected one stays
 * listed; its calls fail with EM_ERR_STATE). If the hosted device is an autodiff one
 * (`cpu+autodiff`), the returned device carries the same autodiff flag and checkpointing: the
 * client records the graph, the server runs the inner device's kernels.
 *
 * The wire protocol is specified in docs/remote-protocol.md. All calls here are thread-safe;
 * calls on one connection are serialized.
 */
#ifndef EMBER_REMOTE_H
#define EMBER_REMOTE_H

#include "ember.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Connects to an ember-server at addr ("HOST:PORT", "[IPV6]:PORT") and authenticates with
 *  token (a non-empty string, the content of the server's --token-file without its trailing
 *  newline; it never travels on the wire: both sides prove they know it by HMAC-SHA256 over
 *  fresh random challenges). On success *out is the new device `remote:N`.
 *  Errors: EM_ERR_ARG (NULL or empty arguments, a malformed address), EM_ERR_IO (the server
 *  cannot be reached or hung up), EM_ERR_AUTH (wrong token, or a server that cannot prove it
 *  knows the token), EM_ERR_PROTOCOL (not an ember-server, or another protocol version),
 *  EM_ERR_STATE (64 connections were made by this process already), EM_ERR_UNSUPPORTED (this
 *  build has no remote backend). */
em_status em_remote_connect(const char *addr, const char *token, em_device *out);

/** Closes the connection of a remote device. The server frees every tensor of the
 *  connection; tensors still alive on the client fail cleanly afterwards (EM_ERR_STATE on use;
 *  releasing them is fine). The device keeps its index (it is never reused).
 *  Errors: EM_ERR_DEVICE (not a remote device of this process), EM_ERR_STATE (already
 *  disconnected). */
em_status em_remote_disconnect(em_device dev);

/** What a server reports about itself and this connection (em_remote_server_stats). */
typedef struct em_remote_stats {
    uint64_t client_bytes;   /* bytes of this connection's buffers on the server */
    uint64_t client_tensors; /* this connection's buffers on the server */
    uint64_t server_bytes;   /* bytes of all connections' buffers */
    uint64_t server_clients; /* authenticated connections */
    uint64_t device_in_use;  /* the hosted device's allocator: bytes in use (0: no count) */
    uint64_t device_peak;    /* and its peak */
} em_remote_stats;

/** Asks the server of a remote device for its statistics (one round trip; it also waits for
 *  every op sent before). Errors: EM_ERR_DEVICE (not a remote device), EM_ERR_STATE
 *  (disconnected), EM_ERR_IO (the connection broke), EM_ERR_ARG (out is NULL). */
em_status em_remote_server_stats(em_device dev, em_remote_stats *out);

/** Waits until every op sent on a remote device has run, and reports the first one that
 *  failed since the last wait (EM_ERR_BACKEND "remote: <op>: <message>").
 *  Errors as em_remote_server_stats, plus that one. */
em_status em_remote_sync(em_device dev);

/** Reads n tensors into n host buffers: ts[i]'s elements, row-major, into dsts[i], which
 *  holds dst_bytes[i] bytes (at least numel * dtype size; quantized tensors give their
 *  storage integers). Tensors may live on any devices; the tensors of one remote device are
 *  read in a single round trip, those of other devices one by one. Nothing is written when
 *  an argument is wrong; when a read fails, the buffers read so far may hold data.
 *  Errors: EM_ERR_ARG (NULL arrays or tensors, n < 0, a buffer too small), the device's read
 *  errors (a remote device also reports a failed op sent earlier, as a read does). */
em_status em_read_many(em_tensor *const *ts, int n, void *const *dsts, const size_t *dst_bytes);

#ifdef __cplusplus
}
#endif
#endif /* EMBER_REMOTE_H */
