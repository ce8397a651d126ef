/*
 * remote.c — `ember-bench remote`: the remote backend on loopback against raw TCP, in one run.
 *
 *   ember-bench remote [--mb 64] [--rounds 5] [--ops 20000] [--device cpu]
 *
 * Starts an ember-server engine in this process (hosting --device) on 127.0.0.1 and reports:
 *   - round trip: em_remote_sync on an idle connection, and a 1-element add + read, against a
 *     raw TCP ping-pong of one byte (the floor any request-reply pays on this machine), with
 *     the ratio of each to raw (goal <= 1.5). A loopback round trip costs what the scheduler
 *     makes of it: a thread woken on the waker's CPU (the waker goes to sleep) costs a context
 *     switch; one woken on another CPU an interrupt to that CPU and, when it is idle or busy
 *     with other work, its wake-up or preemption (6-15x the former on a 2-vCPU VM). Which a
 *     pair of threads gets is chance (load balancer, wake-up heuristics), and the raw peer and
 *     the server's thread of one run often get different ones. So the bench fixes placement:
 *     the server's threads (the hosted device's too; its kernels here are of one element) and
 *     the raw peer run on one CPU S, and the client measures on S ("same CPU") and on another
 *     CPU ("across CPUs", with two CPUs or more). The three are timed in interleaved blocks of
 *     calls; each figure is the median of its blocks' means, so that load that comes and goes
 *     hits all three alike;
 *   - pipelined ops: 1-element adds sent back to back and waited for once, against the same
 *     adds each followed by a sync (what an unpipelined protocol would cost);
 *   - bulk transfer: --mb MiB written (em_tensor_from_data + sync) and read (em_read_many),
 *     in MB/s, against a raw TCP copy of the same bytes over loopback (goal: ratio >= 0.8).
 * The other figures are medians over --rounds.
 */
#include <errno.h>
#include <sched.h>
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

/* Runs the calling thread on cpu only (cpu < 0: on the CPUs of mask). */
static void pin(int cpu, const cpu_set_t *mask) {
    cpu_set_t one;
    CPU_ZERO(&one);
    if (cpu >= 0) CPU_SET(cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, cpu >= 0 ? &one : mask);
}

enum { RT_BLOCK = 50, RT_BLOCKS = 40 }; /* calls a block; blocks a round and kind */

/* One block of n round trips of one kind: 0 raw ping-pong, 1 sync, 2 add + read; the mean. */
static double rt_block(int kind, int n, int rfd, em_device dev, em_tensor *a, em_tensor *b) {
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        if (kind == 0) {
            char c = 'p';
            rn_send_all(rfd, &c, 1);
            rn_recv_all(rfd, &c, 1);
        } else if (kind == 1) {
            em_remote_sync(dev);
        } else {
            em_tensor *c;
            float out;
            em_add(a, b, &c);
            em_tensor_to_data(c, &out, sizeof out);
            em_tensor_release(c);
        }
    }
    return (now_s() - t0) / n;
}

/* The three round trips with the client on its present CPU: medians of block means, in s. */
static void rt_measure(long rounds, int rfd, em_device dev, em_tensor *a, em_tensor *b,
                       double med[3]) {
    int nb = (int)rounds * RT_BLOCKS;
    double *t = malloc(3 * (size_t)nb * sizeof *t);
    if (!t) {
        med[0] = med[1] = med[2] = 0;
        return;
    }
    for (int k = 0; k < 3; k++) rt_block(k, 200, rfd, dev, a, b); /* settle on the CPUs */
    for (int j = 0; j < nb; j++)
        for (int q = 0; q < 3; q++) { /* the order turns, so that none always comes first */
            int k = (j + q) % 3;
            t[k * nb + j] = rt_block(k, RT_BLOCK, rfd, dev, a, b);
        }
    for (int k = 0; k < 3; k++) med[k] = bench_median(t + k * nb, nb);
    free(t);
}

static void rt_report(const char *what, const double med[3]) {
    const char *name[3] = {"raw TCP 1-byte ping-pong", "em_remote_sync", "add + read of 1 element"};
    printf("round trip, %s:\n", what);
    for (int k = 0; k < 3; k++) {
        printf("  %-24s : %8.1f us", name[k], med[k] * 1e6);
        if (k > 0) {
            double r = med[k] / med[0];
            printf("  (ratio to raw %.2f%s)", r, r <= 1.5 ? "" : ", above the 1.5 goal");
        }
        printf("\n");
    }
}

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
    /* the server's threads and the raw peer inherit CPU s from this thread (see above) */
    cpu_set_t mask;
    int cpu_s = -1, cpu_c = -1;
    if (sched_getaffinity(0, sizeof mask, &mask) == 0) {
        for (int i = 0; i < CPU_SETSIZE; i++)
            if (CPU_ISSET(i, &mask)) {
                if (cpu_c < 0) cpu_c = i;
                cpu_s = i;
            }
        if (cpu_c == cpu_s) cpu_c = -1;
        if (cpu_s >= 0) pin(cpu_s, NULL);
    }
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
    double t_pipe[64], t_unpipe[64];
    const int64_t one = 1;
    const float v = 1;
    em_tensor *a, *b;
    em_tensor_from_data(&v, EM_F32, &one, 1, dev, &a);
    em_tensor_from_data(&v, EM_F32, &one, 1, dev, &b);
    double same[3], across[3];
    char what[96];
    rt_measure(rounds, rfd, dev, a, b, same);
    if (cpu_s >= 0) snprintf(what, sizeof what, "same CPU (client and server on cpu %d)", cpu_s);
    else snprintf(what, sizeof what, "threads where the scheduler puts them");
    rt_report(what, same);
    if (cpu_c >= 0) {
        pin(cpu_c, NULL);
        rt_measure(rounds, rfd, dev, a, b, across);
        snprintf(what, sizeof what, "across CPUs (client on cpu %d, server on cpu %d)", cpu_c, cpu_s);
        rt_report(what, across);
    }
    if (cpu_s >= 0) pin(-1, &mask); /* the client runs anywhere again; the server stays */
    for (long r = 0; r < rounds; r++) {
        /* pipelined: ops adds, one wait */
        double t0 = now_s();
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
    double pipe = bench_median(t_pipe, (int)rounds), unpipe = bench_median(t_unpipe, (int)rounds);
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
