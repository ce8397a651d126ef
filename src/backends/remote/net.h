/*
 * net.h — sockets and authentication for the remote backend and ember-server: address
 * parsing, connect / listen, whole-buffer send and receive, frames, and the handshake MACs
 * (HMAC-SHA256 from libsodium).
 */
#ifndef EMBER_REMOTE_NET_H
#define EMBER_REMOTE_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire/wire.h"

/** Splits "HOST:PORT" or "[V6]:PORT" (or a bare "PORT" when default_host is given) into
 *  host and port. False with a reason in err when malformed. */
bool rn_split_addr(const char *addr, const char *default_host, char *host, size_t hcap,
                   char *port, size_t pcap, char *err, size_t ecap);

/** Connects a TCP socket to addr ("HOST:PORT") with TCP_NODELAY. Returns the fd or -1 with a
 *  reason in err. */
int rn_connect(const char *addr, char *err, size_t ecap);

/** A listening TCP socket on addr ("HOST:PORT" or "PORT": 127.0.0.1); port 0 picks a free
 *  one. *bound_port gets the port. Returns the fd or -1 with a reason in err. */
int rn_listen(const char *addr, int *bound_port, char *err, size_t ecap);

/** Sends all n bytes (MSG_NOSIGNAL, EINTR retried). 0, or -1 with errno set. */
int rn_send_all(int fd, const void *p, size_t n);
/** Sends a then b as one stream write where possible. 0 or -1. */
int rn_send2(int fd, const void *a, size_t an, const void *b, size_t bn);
/** Receives exactly n bytes: 1, 0 on EOF (before or within), -1 on error (errno). */
int rn_recv_all(int fd, void *p, size_t n);
/** A receive buffer over a stream: bytes received and not yet consumed are buf[pos..len). */
typedef struct rn_rbuf {
    uint8_t *buf;
    size_t cap, pos, len;
} rn_rbuf;
/** Receives exactly n bytes into dst through rb (dst NULL: consumes and drops them), so that
 *  small messages that arrive together cost one recv; once what rb holds is used up, a rest
 *  of at least `direct` bytes for a non-NULL dst is received straight into it. 1, 0 on EOF,
 *  -1 on error (errno). */
int rn_recv_buffered(int fd, rn_rbuf *rb, void *dst, size_t n, size_t direct);
/** Reads and discards n bytes: 1, 0 on EOF, -1 on error. */
int rn_discard(int fd, uint64_t n);

/** A receive buffer for whole frames. */
typedef struct rn_frame {
    uint8_t *p;
    size_t cap;
    size_t len; /* the body's length; p[0] is the type */
} rn_frame;
/** Receives one frame of at most max body bytes into f. 1, 0 on EOF, -1 on an I/O error,
 *  -2 when the length is 0 or above max, -3 when out of memory. */
int rn_recv_frame(int fd, rn_frame *f, size_t max);
/** rn_recv_frame with a total time limit: -1 (errno ETIMEDOUT) when the whole frame has not
 *  come within `seconds` (however slowly its bytes trickle in). */
int rn_recv_frame_within(int fd, rn_frame *f, size_t max, int seconds);
void rn_frame_free(rn_frame *f);

/** mac = HMAC-SHA256(key = token, label || a || b), a and b RW_NONCE_BYTES each. */
void rn_mac(uint8_t mac[RW_MAC_BYTES], const char *token, size_t token_len, const char *label,
            const uint8_t *a, const uint8_t *b);
/** Constant-time comparison of two MACs. */
bool rn_mac_equal(const uint8_t *a, const uint8_t *b);
/** Fills p with n random bytes (libsodium's CSPRNG). False when libsodium fails to start. */
bool rn_random(uint8_t *p, size_t n);

#endif /* EMBER_REMOTE_NET_H */
