/*
 * remote_raw.h — a hand-made client of the remote protocol for the remote tests: it speaks
 * the wire directly (src/wire/wire.h, net.h) to send what the library never would.
 */
#ifndef EMBER_TEST_REMOTE_RAW_H
#define EMBER_TEST_REMOTE_RAW_H

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "backends/remote/net.h"
#include "backends/remote/server.h"

/** A plain TCP connection to the server on port. */
static inline int raw_open(int port) {
    char a[64], err[200];
    snprintf(a, sizeof a, "127.0.0.1:%d", port);
    return rn_connect(a, err, sizeof err);
}

/** Connects and runs the handshake with token and protocol version; returns the fd once
 *  welcomed, or -1 (the socket closed). */
static inline int raw_auth(int port, const char *token, uint16_t version) {
    int fd = raw_open(port);
    if (fd < 0) return -1;
    rn_frame f = {0};
    if (rn_recv_frame(fd, &f, RW_MAX_PREAUTH) != 1 || f.p[0] != RW_HELLO || f.len != 41) {
        rn_frame_free(&f);
        close(fd);
        return -1;
    }
    uint8_t ch[RW_NONCE_BYTES], nonce[RW_NONCE_BYTES], mac[RW_MAC_BYTES];
    memcpy(ch, f.p + 9, sizeof ch);
    rn_random(nonce, sizeof nonce);
    rn_mac(mac, token, strlen(token), "ember-client-v1", ch, nonce);
    rw_writer w = {0};
    size_t start = rw_begin(&w, RW_AUTH);
    rw_put_bytes(&w, RW_MAGIC, 4);
    rw_put_u16(&w, version);
    rw_put_u16(&w, 0);
    rw_put_bytes(&w, nonce, sizeof nonce);
    rw_put_bytes(&w, mac, sizeof mac);
    rw_end(&w, start);
    int ok = rn_send_all(fd, w.p, w.len) == 0 && rn_recv_frame(fd, &f, RW_MAX_PREAUTH) == 1 &&
             f.p[0] == RW_WELCOME;
    rw_writer_free(&w);
    rn_frame_free(&f);
    if (!ok) {
        close(fd);
        return -1;
    }
    return fd;
}

/** True when the server closes fd within 5 s (frames it sends first are skipped). */
static inline bool raw_closed(int fd) {
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[4096];
    for (;;) {
        ssize_t k = recv(fd, buf, sizeof buf, 0);
        if (k == 0) return true;
        if (k < 0) return errno == ECONNRESET;
    }
}

/** Sends one frame: type and body. */
static inline int raw_frame(int fd, uint8_t type, const void *body, size_t n) {
    uint8_t hdr[5];
    rw_store_le32(hdr, (uint32_t)(n + 1));
    hdr[4] = type;
    return rn_send2(fd, hdr, 5, body, n);
}

/** Waits (up to 5 s) until the server has no clients and holds no buffers. */
static inline bool raw_wait_idle(rs_server *s) {
    rw_stats st;
    for (int i = 0; i < 500; i++) {
        rs_stats(s, &st);
        if (st.server_clients == 0 && st.server_bytes == 0) return true;
        usleep(10000);
    }
    fprintf(stderr, "server not idle: %llu clients, %llu bytes\n",
            (unsigned long long)st.server_clients, (unsigned long long)st.server_bytes);
    return false;
}

#endif
