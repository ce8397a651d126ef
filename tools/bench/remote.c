/*
 * remote.c — `ember-bench remote`: the remote backend on loopback against raw TCP, in one run.
 *
 *   ember-bench remote [--mb 64] [--rounds 5] [--ops 20000] [--device cpu]
 *
 * Starts an ember-server engine in this process (hosting --device) on 127.0.0.1 and reports:
 *   - round trip: em_remote_sync on an idle connection, and a 1-element add + read, against a
 *     raw TCP ping-pong of one byte (the floor any request-reply pays on this machine);
 *   - pipelined ops: 1-element adds sent back to back and waited for once, against the same
 *     adds each followed by a sync (what an unpipelined protocol would cost);
 *   - bulk transfer: --mb MiB written (em_tensor_from_data + sync) and read (em_read_many),
 *     in MB/s, against a raw TCP copy of the same bytes over loopback (goal: ratio >= 0.8).
 * Figures are medians over --rounds.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backends/remote/net.h"
#include "backends/remote/server.h"
#include "bench/bench.h"
#include "ember/ember.h"
#include "ember/remote.h"

#define TOKEN "ember-bench-remote"

/* ---- the raw TCP baseline: a peer thread that echoes, swallows or produces bytes ---- */

typedef struct raw_peer {
    int lfd, fd;
    size_t bytes;
    char *buf;
    pthread_t th;
} raw_peer;

/* Commands from the client: 'p' ping (echo 1 byte), 'u' upload (recv bytes, ack 1 byte),
 * 'd' download (send bytes), 'q' quit. */
static void *raw_main(void *arg) {
    raw_peer *p = arg;
    p->fd = accept(p->lfd, NULL, NULL);
    int one = 1;
    setsockopt(p->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char c;
    while (rn_recv_all(p->fd, &c, 1) == 1 && c != 'q') {
        if (c == 'p') rn_send_all(p->fd, &c, 1);
        else if (c == 'u') {
            if (rn_recv_all(p->fd, p->buf, p->bytes) != 1) break;
            rn_send_all(p->fd, &c, 1);
        } else if (c == 'd') rn_send_all(p->fd, p->buf, p->bytes);
    }
    close(p->fd);
    return NULL;
}

static double now_s(void) { return bench_now_ns() * 1e-9; }

int bench_remote(int argc, char **argv) {
    long mb = 64, rounds = 5, ops = 20000;
    const char *device = "cpu";
    for (int i = 1; i < argc; i++) {
        long *dst = NULL;
        if (strcmp(argv[i], "--mb") == 0) dst = &mb;
        else if (strcmp(argv[i], "--rounds") == 0) dst = &rounds;
        else if (strcmp(argv[i], "--ops") == 0) dst = &ops;
        else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
            device = argv[++i];
            continue;
        }
        if (!dst || i + 1 >= argc || (*dst = atol(argv[++i])) < 1 || *dst > 100000000) {
            fprintf(stderr, "usage: ember-bench remote [--mb 64] [--rounds 5] [--ops 20000] "
                            "[--device cpu]\n");
            return 2;
        }
    }
    if (rounds > 64) rounds = 64;
    rs_config cfg = {.listen = "127.0.0.1:0", .token = TOKEN};
    if (em_device_parse(device, &cfg.device) != EM_OK) {
        fprintf(stderr, "ember-bench remote: %s\n", em_last_error());
        return 2;
    }
    rs_server *srv;
    if (rs_start(&cfg, &srv) != EM_OK) {
        fprintf(stderr, "ember-bench remote: %s\n", em_last_error());
        return 1;
    }
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", rs_port(srv));
    em_device dev;
    if (em_remote_connect(addr, TOKEN, &dev) != EM_OK) {
        fprintf(stderr, "ember-bench remote: %s\n", em_last_error());
        rs_stop(srv);
        return 1;
    }
    size_t bytes = (size_t)mb << 20;
    raw_peer peer = {.bytes = bytes, .buf = malloc(bytes)};
    char *src = malloc(bytes), *dst = malloc(bytes);
    char err[200];
    int port = 0;
    peer.lfd = rn_listen("127.0.0.1:0", &port, err, sizeof err);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    int rfd = peer.lfd >= 0 ? rn_connect(addr, err, sizeof err) : -1;
    if (!peer.buf || !src || !dst || rfd < 0 || pthread_create(&peer.th, NULL, raw_main, &peer)) {
        fprintf(stderr, "ember-bench remote: setup failed (%s)\n", err);
        return 1;
    }
    memset(src, 1, bytes);
    memset(dst, 2, bytes);
    memset(peer.buf, 3, bytes);
    printf("ember-bench remote: server hosting %s on loopback, %ld MiB transfers, %ld rounds\n",
           device, mb, rounds);

    /* ---- round trips ---- */
    enum { PINGS = 2000 };
    double t_raw[64], t_sync[64], t_op[64], t_pipe[64], t_unpipe[64];
    const int64_t one = 1;
    const float v = 1;
    em_tensor *a, *b;
    em_tensor_from_data(&v, EM_F32, &one, 1, dev, &a);
    em_tensor_from_data(&v, EM_F32, &one, 1, dev, &b);
    for (long r = 0; r < rounds; r++) {
        double t0 = now_s();
        for (int i = 0; i < PINGS; i++) {
            char c = 'p';
            rn_send_all(rfd, &c, 1);
            rn_recv_all(rfd, &c, 1);
        }
        t_raw[r] = (now_s() - t0) / PINGS;
        t0 = now_s();
        for (int i = 0; i < PINGS; i++) em_remote_sync(dev);
        t_sync[r] = (now_s() - t0) / PINGS;
        t0 = now_s();
        for (int i = 0; i < PINGS; i++) {
            em_tensor *c;
            float out;
            em_add(a, b, &c);
            em_tensor_to_data(c, &out, sizeof out);
            em_tensor_release(c);
        }
        t_op[r] = (now_s() - t0) / PINGS;
        /* pipelined: ops adds, one wait */
        t0 = now_s();
        for (long i = 0; i < ops; i++) {
            em_tensor *c;
            em_add(a, b, &c);
            em_tensor_release(c);
        }
        em_remote_sync(dev);
        t_pipe[r] = (now_s() - t0) / (double)ops;
        long few = ops / 10 ? ops / 10 : 1;
        t0 = now_s();
        for (long i = 0; i < few; i++) {
            em_tensor *c;
            em_add(a, b, &c);
            em_remote_sync(dev);
            em_tensor_release(c);
        }
        t_unpipe[r] = (now_s() - t0) / (double)few;
    }
    double raw = bench_median(t_raw, (int)rounds), sync = bench_median(t_sync, (int)rounds);
    double op = bench_median(t_op, (int)rounds), pipe = bench_median(t_pipe, (int)rounds);
    double unpipe = bench_median(t_unpipe, (int)rounds);
    printf("round trip, raw TCP 1-byte ping-pong : %8.1f us\n", raw * 1e6);
    printf("round trip, em_remote_sync          : %8.1f us  (ratio to raw %.2f)\n", sync * 1e6,
           sync / raw);
    printf("round trip, add + read of 1 element : %8.1f us  (ratio to raw %.2f)\n", op * 1e6,
           op / raw);
    printf("pipelined adds                      : %8.0f ops/s (%.2f us/op)\n", 1 / pipe, pipe * 1e6);
    printf("adds each followed by a sync        : %8.0f ops/s; pipelining speedup %.1fx\n",
           1 / unpipe, unpipe / pipe);
    em_tensor_release(a);
    em_tensor_release(b);

    /* ---- bulk transfers ---- */
    double t_rup[64], t_rdown[64], t_up[64], t_down[64];
    const int64_t n = (int64_t)(bytes / sizeof(float));
    int bad = 0;
    for (long r = 0; r < rounds; r++) {
        char c = 'u';
        double t0 = now_s();
        rn_send_all(rfd, &c, 1);
        rn_send_all(rfd, src, bytes);
        rn_recv_all(rfd, &c, 1);
        t_rup[r] = now_s() - t0;
        c = 'd';
        t0 = now_s();
        rn_send_all(rfd, &c, 1);
        rn_recv_all(rfd, dst, bytes);
        t_rdown[r] = now_s() - t0;
        em_tensor *t = NULL;
        t0 = now_s();
        if (em_tensor_from_data(src, EM_F32, &n, 1, dev, &t) != EM_OK || em_remote_sync(dev) != EM_OK) bad++;
        t_up[r] = now_s() - t0;
        em_tensor *const ts[1] = {t};
        void *const ds[1] = {dst};
        const size_t sz[1] = {bytes};
        t0 = now_s();
        if (!t || em_read_many(ts, 1, ds, sz) != EM_OK) bad++;
        t_down[r] = now_s() - t0;
        if (memcmp(src, dst, bytes) != 0) bad++;
        memset(dst, 2, bytes);
        em_tensor_release(t);
    }
    double mbs = (double)bytes / 1e6;
    double rup = mbs / bench_median(t_rup, (int)rounds), rdown = mbs / bench_median(t_rdown, (int)rounds);
    double up = mbs / bench_median(t_up, (int)rounds), down = mbs / bench_median(t_down, (int)rounds);
    printf("bulk write: remote %8.0f MB/s, raw TCP %8.0f MB/s, ratio %.2f%s\n", up, rup, up / rup,
           up / rup >= 0.8 ? "" : "  (below the 0.8 goal)");
    printf("bulk read : remote %8.0f MB/s, raw TCP %8.0f MB/s, ratio %.2f%s\n", down, rdown,
           down / rdown, down / rdown >= 0.8 ? "" : "  (below the 0.8 goal)");
    if (bad) printf("ERROR: %d transfers failed or read back wrong data: %s\n", bad, em_last_error());

    char q = 'q';
    rn_send_all(rfd, &q, 1);
    pthread_join(peer.th, NULL);
    close(rfd);
    close(peer.lfd);
    free(peer.buf);
    free(src);
    free(dst);
    em_remote_disconnect(dev);
    rs_stop(srv);
    return bad ? 1 : 0;
}
