/*
 * client.c — the remote backend: connections (em_remote_connect / _disconnect), the
 * handshake, buffers, transfers and the backend table. Kernel slots are in client_kernels.c.
 *
 * One connection a device. Messages are appended to the connection's send buffer and sent
 * when it fills or when a reply is needed (read, sync, stats): kernels, allocs, frees and
 * small writes never wait. The server answers only reads, syncs and stats, in order.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "backends/remote/client.h"
#include "backends/remote/net.h"
#include "ember/remote.h"

#define RC_MAX_CONN 64
#define RC_FLUSH_AT (32u << 10)   /* send the buffer once it holds this much */
#define RC_INLINE_WRITE (32u << 10) /* larger write payloads go straight to the socket */
#define RC_READ_GROUP 128          /* read requests sent before their replies are taken */
#define RC_HANDSHAKE_TIMEOUT_S 15
#define RC_RBUF (16u << 10)       /* replies are received through this buffer... */
#define RC_RBUF_DIRECT (RC_RBUF / 4) /* ...but payloads this large go straight to their place */

enum { RC_UNUSED = 0, RC_LIVE, RC_BROKEN, RC_CLOSED };

typedef struct rc_conn {
    rw_sink sink; /* rc_kernel: first, as wire/calls.h asks */
    pthread_mutex_t mu;
    int index;
    int state;
    int fd;
    uint64_t next_id;
    rw_writer out;
    rn_frame in;
    rn_rbuf rb;    /* replies received, not yet consumed */
    rw_welcome wl;
    uint64_t in_use, peak, ntensors;
    char why[160]; /* why the connection broke */
} rc_conn;

static rc_conn rc_conns[RC_MAX_CONN];
static atomic_int rc_nconns;
static pthread_mutex_t rc_global = PTHREAD_MUTEX_INITIALIZER;

/* ---- connection state (callers hold c->mu) ---- */

static em_status rc_broke(rc_conn *c, const char *what, int err) {
    if (c->state == RC_LIVE) {
        snprintf(c->why, sizeof c->why, "%s%s%s", what, err ? ": " : "", err ? strerror(err) : "");
        if (c->fd >= 0) close(c->fd);
        c->fd = -1;
        c->state = RC_BROKEN;
        c->out.len = 0;
        c->rb.pos = c->rb.len = 0;
    }
    return em_backend_set_error(EM_ERR_IO, "remote:%d: connection lost (%s)", c->index, c->why);
}

static em_status rc_usable(rc_conn *c) {
    if (c->state == RC_LIVE) return EM_OK;
    if (c->state == RC_BROKEN)
        return em_backend_set_error(EM_ERR_IO, "remote:%d: connection lost (%s)", c->index,
                                    c->why);
    return em_backend_set_error(EM_ERR_STATE, "remote:%d: disconnected", c->index);
}

static em_status rc_flush(rc_conn *c) {
    if (c->out.failed) {
        c->out.failed = false;
        c->out.len = 0;
        return rc_broke(c, "out of memory buffering a message", 0);
    }
    if (c->out.len == 0) return EM_OK;
    if (rn_send_all(c->fd, c->out.p, c->out.len) != 0) return rc_broke(c, "send", errno);
    c->out.len = 0;
    return EM_OK;
}

/* After appending a message: sends the buffer when it is full. */
static em_status rc_appended(rc_conn *c) {
    if (c->out.failed || c->out.len >= RC_FLUSH_AT) return rc_flush(c);
    return EM_OK;
}

/* Reads an RW_ERROR body (after its type byte) into the thread's message. */
static em_status rc_server_error(rc_conn *c, const uint8_t *body, size_t len) {
    rw_reader r = rw_reader_of(body, len);
    unsigned st = rw_get_u8(&r);
    unsigned n = rw_get_u16(&r);
    const uint8_t *msg = NULL;
    if (!rw_get_bytes(&r, n, &msg) || !rw_done(&r)) return rc_broke(c, "malformed error reply", 0);
    (void)st;
    return em_backend_set_error(EM_ERR_BACKEND, "remote: %.*s", (int)n, (const char *)msg);
}

/* Receives exactly n bytes of replies into dst: 1, 0 on EOF, -1 on an error (errno). A reply's
 * header and body, and replies that arrive together, cost one recv between them. */
static int rc_recv(rc_conn *c, void *dst, size_t n) {
    return rn_recv_buffered(c->fd, &c->rb, dst, n, RC_RBUF_DIRECT);
}

/* Receives one reply frame into c->in. */
static em_status rc_reply(rc_conn *c) {
    uint8_t hdr[4];
    int rc = rc_recv(c, hdr, 4);
    uint32_t len = rc == 1 ? rw_le32(hdr) : 0;
    if (rc == 1 && (len == 0 || len > c->wl.max_msg)) return rc_broke(c, "malformed reply", 0);
    if (rc == 1 && len > c->in.cap) {
        uint8_t *p = realloc(c->in.p, len);
        if (!p) return rc_broke(c, "out of memory receiving a reply", 0);
        c->in.p = p;
        c->in.cap = len;
    }
    if (rc == 1) rc = rc_recv(c, c->in.p, len);
    if (rc == 0) return rc_broke(c, "the server closed the connection", 0);
    if (rc < 0) return rc_broke(c, "recv", errno);
    c->in.len = len;
    return EM_OK;
}

/* ---- the table's device and memory slots ---- */

static int rc_device_count(void) { return atomic_load(&rc_nconns); }

static em_status rc_open(int index, void **ctx) {
    if (index < 0 || index >= atomic_load(&rc_nconns))
        return em_backend_set_error(EM_ERR_DEVICE, "remote: no connection %d", index);
    *ctx = &rc_conns[index];
    return EM_OK;
}

static em_status rc_alloc(void *ctx, size_t bytes, void **buf) {
    rc_conn *c = ctx;
    rc_buf *b = malloc(sizeof *b);
    if (!b) return em_backend_set_error(EM_ERR_NOMEM, "remote: out of memory");
    pthread_mutex_lock(&c->mu);
    em_status s = rc_usable(c);
    if (s == EM_OK && c->wl.max_bytes && (uint64_t)bytes > c->wl.max_bytes - c->in_use)
        s = em_backend_set_error(EM_ERR_NOMEM,
                                 "remote:%d: %zu more bytes would pass the server's limit of "
                                 "%llu bytes a client (%llu in use)",
                                 c->index, bytes, (unsigned long long)c->wl.max_bytes,
                                 (unsigned long long)c->in_use);
    if (s == EM_OK && c->wl.max_tensors && c->ntensors >= c->wl.max_tensors)
        s = em_backend_set_error(EM_ERR_NOMEM, "remote:%d: the server's limit of %llu buffers a "
                                 "client is reached", c->index,
                                 (unsigned long long)c->wl.max_tensors);
    if (s == EM_OK) {
        b->id = ++c->next_id;
        b->bytes = bytes;
        size_t start = rw_begin(&c->out, RW_ALLOC);
        rw_put_u64(&c->out, b->id);
        rw_put_u64(&c->out, (uint64_t)bytes);
        rw_end(&c->out, start);
        c->in_use += bytes;
        c->ntensors++;
        if (c->in_use > c->peak) c->peak = c->in_use;
        s = rc_appended(c);
    }
    pthread_mutex_unlock(&c->mu);
    if (s != EM_OK) {
        free(b);
        return s;
    }
    *buf = b;
    return EM_OK;
}

static void rc_free(void *ctx, void *buf) {
    rc_conn *c = ctx;
    rc_buf *b = buf;
    if (!b) return;
    pthread_mutex_lock(&c->mu);
    if (c->state == RC_LIVE) {
        size_t start = rw_begin(&c->out, RW_FREE);
        rw_put_u64(&c->out, b->id);
        rw_end(&c->out, start);
        c->in_use -= b->bytes;
        c->ntensors--;
        (void)rc_appended(c); /* a failure marks the connection broken; free has no status */
    }
    pthread_mutex_unlock(&c->mu);
    free(b);
}

static em_status rc_write(void *ctx, void *buf, size_t offset, const void *src, size_t bytes) {
    rc_conn *c = ctx;
    const rc_buf *b = buf;
    pthread_mutex_lock(&c->mu);
    em_status s = rc_usable(c);
    size_t chunk = (size_t)c->wl.max_msg - RW_WRITE_HEADER;
    const char *p = src;
    while (s == EM_OK && bytes > 0) {
        size_t n = bytes < chunk ? bytes : chunk;
        size_t start = rw_begin(&c->out, RW_WRITE);
        rw_put_u64(&c->out, b->id);
        rw_put_u64(&c->out, (uint64_t)offset);
        if (n <= RC_INLINE_WRITE) {
            rw_put_bytes(&c->out, p, n);
            rw_end(&c->out, start);
            s = rc_appended(c);
        } else {
            /* the header goes out with what is buffered, the payload straight from src */
            if (!c->out.failed) rw_store_le32(c->out.p + start, (uint32_t)(RW_WRITE_HEADER + n));
            if (c->out.failed) s = rc_flush(c);
            else if (rn_send2(c->fd, c->out.p, c->out.len, p, n) != 0) s = rc_broke(c, "send", errno);
            else c->out.len = 0;
        }
        p += n;
        offset += n;
        bytes -= n;
    }
    pthread_mutex_unlock(&c->mu);
    return s;
}

/* Reads n ranges in one round trip per RW_READ_GROUP chunks (caller holds c->mu). */
static em_status rc_read_locked(rc_conn *c, int n, const void *const *bufs, const size_t *offsets,
                                void *const *dsts, const size_t *bytes) {
    em_status first = rc_usable(c);
    if (first != EM_OK) return first;
    size_t chunk = (size_t)c->wl.max_msg - 1;
    int i = 0;
    size_t done = 0; /* bytes of range i requested so far */
    while (i < n) {
        /* requests: up to RC_READ_GROUP chunks */
        int ri = i, nreq = 0;
        size_t rdone = done;
        while (ri < n && nreq < RC_READ_GROUP) {
            if (bytes[ri] == rdone) {
                ri++;
                rdone = 0;
                continue;
            }
            size_t k = bytes[ri] - rdone < chunk ? bytes[ri] - rdone : chunk;
            size_t start = rw_begin(&c->out, RW_READ);
            rw_put_u64(&c->out, ((const rc_buf *)bufs[ri])->id);
            rw_put_u64(&c->out, (uint64_t)(offsets[ri] + rdone));
            rw_put_u64(&c->out, (uint64_t)k);
            rw_end(&c->out, start);
            rdone += k;
            nreq++;
        }
        em_status s = rc_flush(c);
        if (s != EM_OK) return s;
        /* replies, in order, straight into the destinations */
        for (int q = 0; q < nreq; q++) {
            while (bytes[i] == done) {
                i++;
                done = 0;
            }
            size_t k = bytes[i] - done < chunk ? bytes[i] - done : chunk;
            uint8_t hdr[5];
            int rc = rc_recv(c, hdr, 5);
            if (rc <= 0) return rc_broke(c, rc ? "recv" : "the server closed the connection", rc ? errno : 0);
            uint32_t len = rw_le32(hdr);
            if (hdr[4] == RW_DATA && len == k + 1) {
                rc = rc_recv(c, (char *)dsts[i] + done, k);
                if (rc <= 0) return rc_broke(c, rc ? "recv" : "the server closed the connection", rc ? errno : 0);
            } else if (hdr[4] == RW_ERROR && len >= 4 && len <= 4096) {
                uint8_t body[4096];
                rc = rc_recv(c, body, len - 1);
                if (rc <= 0) return rc_broke(c, rc ? "recv" : "the server closed the connection", rc ? errno : 0);
                if (first == EM_OK) first = rc_server_error(c, body, len - 1);
                if (c->state != RC_LIVE) return first;
            } else {
                return rc_broke(c, "unexpected reply to a read", 0);
            }
            done += k;
        }
        while (i < n && bytes[i] == done) {
            i++;
            done = 0;
        }
    }
    return first;
}

static em_status rc_read_many(void *ctx, int n, const void *const *bufs, const size_t *offsets,
                              void *const *dsts, const size_t *bytes) {
    rc_conn *c = ctx;
    pthread_mutex_lock(&c->mu);
    em_status s = rc_read_locked(c, n, bufs, offsets, dsts, bytes);
    pthread_mutex_unlock(&c->mu);
    return s;
}

static em_status rc_read(void *ctx, const void *buf, size_t offset, void *dst, size_t bytes) {
    return rc_read_many(ctx, 1, &buf, &offset, &dst, &bytes);
}

/* Sends a request that has a one-frame reply (sync, stats) and receives it into c->in. */
static em_status rc_round_trip(rc_conn *c, uint8_t type) {
    em_status s = rc_usable(c);
    if (s != EM_OK) return s;
    size_t start = rw_begin(&c->out, type);
    rw_end(&c->out, start);
    if ((s = rc_flush(c)) != EM_OK) return s;
    return rc_reply(c);
}

static em_status rc_sync(void *ctx) {
    rc_conn *c = ctx;
    pthread_mutex_lock(&c->mu);
    em_status s = rc_round_trip(c, RW_SYNC);
    if (s == EM_OK) {
        if (c->in.p[0] == RW_ERROR) s = rc_server_error(c, c->in.p + 1, c->in.len - 1);
        else if (c->in.p[0] != RW_OK || c->in.len != 1) s = rc_broke(c, "unexpected reply to sync", 0);
    }
    pthread_mutex_unlock(&c->mu);
    return s;
}

static void rc_memory(void *ctx, size_t *in_use, size_t *peak) {
    rc_conn *c = ctx;
    pthread_mutex_lock(&c->mu);
    *in_use = (size_t)c->in_use;
    *peak = (size_t)c->peak;
    pthread_mutex_unlock(&c->mu);
}

static void rc_memory_reset_peak(void *ctx) {
    rc_conn *c = ctx;
    pthread_mutex_lock(&c->mu);
    c->peak = c->in_use;
    pthread_mutex_unlock(&c->mu);
}

/* ---- kernels ---- */

em_status rc_kernel(void *ctx, rw_slot slot, int sub, const em_view *const views[RW_MAX_VIEWS],
                    const int64_t *ints, const double *doubles) {
    rc_conn *c = ctx;
    const rw_slot_info *si = &rw_slots[slot];
    rw_kernel k;
    k.slot = slot;
    k.sub = sub;
    k.mask = 0;
    for (int i = 0; i < si->nviews; i++)
        if (views[i]) {
            k.mask |= (uint8_t)(1u << i);
            rw_view_from(&k.views[i], views[i], rc_id(views[i]));
        }
    for (int i = 0; i < si->nints; i++) k.ints[i] = ints[i];
    for (int i = 0; i < si->ndoubles; i++) k.doubles[i] = doubles[i];
    pthread_mutex_lock(&c->mu);
    em_status s = rc_usable(c);
    if (s == EM_OK && !(c->wl.slots & (1u << slot)))
        s = em_backend_set_error(EM_ERR_UNSUPPORTED,
                                 "remote:%d: the server's device %s does not implement %s",
                                 c->index, c->wl.name, si->name);
    if (s == EM_OK) {
        rw_encode_kernel(&c->out, &k);
        s = rc_appended(c);
    }
    pthread_mutex_unlock(&c->mu);
    return s;
}

const em_backend_ops em_remote_backend_ops = {
    .abi_version = EM_BACKEND_ABI_VERSION,
    .name = "remote",
    .id = EM_BACKEND_REMOTE,
    .caps = EM_CAP_STRIDED_INPUTS | EM_CAP_ASYNC,
    .device_count = rc_device_count,
    .open = rc_open,
    .alloc = rc_alloc,
    .free = rc_free,
    .write = rc_write,
    .read = rc_read,
    .sync = rc_sync,
    .memory = rc_memory,
    .memory_reset_peak = rc_memory_reset_peak,
    RW_CALL_SLOTS,
    RW_QUANT_SLOTS,
    .read_many = rc_read_many,
};

/* ---- the public calls ---- */

/* The handshake on a connected socket; fills *wl. */
static em_status rc_handshake(int fd, const char *addr, const char *token, rw_welcome *wl) {
    static const char fn[] = "em_remote_connect";
    rn_frame f = {0};
    em_status s = EM_OK;
    int rc = rn_recv_frame(fd, &f, RW_MAX_PREAUTH);
    if (rc <= 0) {
        s = rc == 0 || rc == -1
                ? em_backend_set_error(EM_ERR_IO, "%s: %s: no greeting from the server (%s)", fn,
                                       addr, rc == 0 ? "connection closed" : strerror(errno))
                : em_backend_set_error(EM_ERR_PROTOCOL, "%s: %s: not an ember-server", fn, addr);
        goto done;
    }
    if (f.p[0] == RW_ERROR) {
        rw_reader r = rw_reader_of(f.p + 1, f.len - 1);
        rw_get_u8(&r);
        unsigned n = rw_get_u16(&r);
        const uint8_t *m = NULL;
        if (!rw_get_bytes(&r, n, &m)) n = 0;
        s = em_backend_set_error(EM_ERR_STATE, "%s: %s: the server refused: %.*s", fn, addr,
                                 (int)n, m ? (const char *)m : "");
        goto done;
    }
    rw_reader r = rw_reader_of(f.p, f.len);
    const uint8_t *magic, *challenge;
    rw_get_u8(&r);
    bool ok = rw_get_bytes(&r, 4, &magic) && memcmp(magic, RW_MAGIC, 4) == 0 && f.p[0] == RW_HELLO;
    unsigned version = rw_get_u16(&r);
    rw_get_u16(&r);
    ok = ok && rw_get_bytes(&r, RW_NONCE_BYTES, &challenge) && rw_done(&r);
    if (!ok) {
        s = em_backend_set_error(EM_ERR_PROTOCOL, "%s: %s: not an ember-server", fn, addr);
        goto done;
    }
    if (version != RW_VERSION) {
        s = em_backend_set_error(EM_ERR_PROTOCOL, "%s: %s: the server speaks protocol version %u, "
                                 "this client %u", fn, addr, version, RW_VERSION);
        goto done;
    }
    uint8_t ch[RW_NONCE_BYTES], nonce[RW_NONCE_BYTES], mac[RW_MAC_BYTES];
    memcpy(ch, challenge, sizeof ch);
    if (!rn_random(nonce, sizeof nonce)) {
        s = em_backend_set_error(EM_ERR_BACKEND, "%s: libsodium failed to start", fn);
        goto done;
    }
    rn_mac(mac, token, strlen(token), "ember-client-v1", ch, nonce);
    rw_writer w = {0};
    size_t start = rw_begin(&w, RW_AUTH);
    rw_put_bytes(&w, RW_MAGIC, 4);
    rw_put_u16(&w, RW_VERSION);
    rw_put_u16(&w, 0);
    rw_put_bytes(&w, nonce, sizeof nonce);
    rw_put_bytes(&w, mac, sizeof mac);
    rw_end(&w, start);
    rc = w.failed ? -1 : rn_send_all(fd, w.p, w.len);
    rw_writer_free(&w);
    if (rc != 0) {
        s = em_backend_set_error(EM_ERR_IO, "%s: %s: send: %s", fn, addr, strerror(errno));
        goto done;
    }
    rc = rn_recv_frame(fd, &f, RW_MAX_PREAUTH);
    if (rc == 1 && f.p[0] == RW_ERROR && f.len >= 4 && f.p[1] != EM_ERR_AUTH) {
        /* refused for another reason than the token (a version the server does not speak) */
        size_t want = (size_t)f.p[2] | (size_t)f.p[3] << 8;
        size_t n = f.len - 4 < want ? f.len - 4 : want;
        s = em_backend_set_error(EM_ERR_PROTOCOL, "%s: %s: the server refused: %.*s", fn, addr,
                                 (int)n, (const char *)f.p + 4);
        goto done;
    }
    if (rc == 0 || (rc == 1 && f.p[0] == RW_ERROR)) {
        s = em_backend_set_error(EM_ERR_AUTH, "%s: %s: the server refused the token", fn, addr);
        goto done;
    }
    if (rc < 0 || f.p[0] != RW_WELCOME || !rw_decode_welcome(f.p + 1, f.len - 1, wl)) {
        s = rc == -1 ? em_backend_set_error(EM_ERR_IO, "%s: %s: recv: %s", fn, addr, strerror(errno))
                     : em_backend_set_error(EM_ERR_PROTOCOL, "%s: %s: malformed welcome", fn, addr);
        goto done;
    }
    rn_mac(mac, token, strlen(token), "ember-server-v1", nonce, ch);
    if (!rn_mac_equal(mac, wl->mac))
        s = em_backend_set_error(EM_ERR_AUTH, "%s: %s: the server could not prove it knows the "
                                 "token", fn, addr);
done:
    rn_frame_free(&f);
    return s;
}

em_status em_remote_connect(const char *addr, const char *token, em_device *out) {
    static const char fn[] = "em_remote_connect";
    if (!addr || !*addr) return em_backend_set_error(EM_ERR_ARG, "%s: addr is NULL or empty", fn);
    if (!token || !*token) return em_backend_set_error(EM_ERR_ARG, "%s: token is NULL or empty", fn);
    if (!out) return em_backend_set_error(EM_ERR_ARG, "%s: out is NULL", fn);
    if (!em_backend_get(EM_BACKEND_REMOTE))
        return em_backend_set_error(EM_ERR_UNSUPPORTED, "%s: the remote backend is not registered", fn);
    if (atomic_load(&rc_nconns) >= RC_MAX_CONN)
        return em_backend_set_error(EM_ERR_STATE, "%s: this process made %d connections already",
                                    fn, RC_MAX_CONN);
    char err[300];
    int fd = rn_connect(addr, err, sizeof err);
    if (fd < 0) {
        char host[256], port[8], e2[64];
        bool syntax = !rn_split_addr(addr, NULL, host, sizeof host, port, sizeof port, e2, sizeof e2);
        return em_backend_set_error(syntax ? EM_ERR_ARG : EM_ERR_IO, "%s: %s", fn, err);
    }
    struct timeval tv = {RC_HANDSHAKE_TIMEOUT_S, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    rw_welcome wl;
    em_status s = rc_handshake(fd, addr, token, &wl);
    if (s != EM_OK) {
        close(fd);
        return s;
    }
    struct timeval none = {0, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
    uint8_t *rbuf = malloc(RC_RBUF);
    if (!rbuf) {
        close(fd);
        return em_backend_set_error(EM_ERR_NOMEM, "%s: out of memory", fn);
    }
    pthread_mutex_lock(&rc_global);
    int idx = atomic_load(&rc_nconns);
    if (idx >= RC_MAX_CONN) {
        pthread_mutex_unlock(&rc_global);
        close(fd);
        free(rbuf);
        return em_backend_set_error(EM_ERR_STATE, "%s: this process made %d connections already",
                                    fn, RC_MAX_CONN);
    }
    rc_conn *c = &rc_conns[idx];
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    c->index = idx;
    c->sink = rc_kernel;
    c->fd = fd;
    c->state = RC_LIVE;
    c->rb = (rn_rbuf){rbuf, RC_RBUF, 0, 0};
    c->wl = wl;
    atomic_store(&rc_nconns, idx + 1); /* publishes the slot: remote:idx is present */
    pthread_mutex_unlock(&rc_global);
    *out = (em_device){EM_BACKEND_REMOTE, idx, wl.autodiff != 0,
                       wl.autodiff ? (em_checkpointing)wl.checkpointing : EM_CKPT_NONE};
    return EM_OK;
}

/* The connection of a remote device, or NULL with an error naming fn. */
static rc_conn *rc_conn_of(const char *fn, em_device dev) {
    if (dev.backend != EM_BACKEND_REMOTE || dev.index < 0 || dev.index >= atomic_load(&rc_nconns)) {
        em_backend_set_error(EM_ERR_DEVICE, "%s: not a remote device of this process", fn);
        return NULL;
    }
    return &rc_conns[dev.index];
}

em_status em_remote_disconnect(em_device dev) {
    static const char fn[] = "em_remote_disconnect";
    rc_conn *c = rc_conn_of(fn, dev);
    if (!c) return EM_ERR_DEVICE;
    pthread_mutex_lock(&c->mu);
    em_status s = EM_OK;
    if (c->state == RC_CLOSED) {
        s = em_backend_set_error(EM_ERR_STATE, "%s: remote:%d is already disconnected", fn, c->index);
    } else {
        if (c->state == RC_LIVE) {
            size_t start = rw_begin(&c->out, RW_BYE);
            rw_end(&c->out, start);
            (void)rc_flush(c);
        }
        if (c->fd >= 0) close(c->fd);
        c->fd = -1;
        c->state = RC_CLOSED;
    }
    rw_writer_free(&c->out);
    rn_frame_free(&c->in);
    free(c->rb.buf);
    c->rb = (rn_rbuf){0};
    pthread_mutex_unlock(&c->mu);
    return s;
}

em_status em_remote_sync(em_device dev) {
    rc_conn *c = rc_conn_of("em_remote_sync", dev);
    return c ? rc_sync(c) : EM_ERR_DEVICE;
}

em_status em_remote_server_stats(em_device dev, em_remote_stats *out) {
    static const char fn[] = "em_remote_server_stats";
    if (!out) return em_backend_set_error(EM_ERR_ARG, "%s: out is NULL", fn);
    rc_conn *c = rc_conn_of(fn, dev);
    if (!c) return EM_ERR_DEVICE;
    pthread_mutex_lock(&c->mu);
    em_status s = rc_round_trip(c, RW_STATS);
    if (s == EM_OK) {
        rw_reader r = rw_reader_of(c->in.p, c->in.len);
        uint64_t v[RW_NSTATS];
        bool ok = rw_get_u8(&r) == RW_STATS_R;
        for (int i = 0; i < RW_NSTATS; i++) v[i] = rw_get_u64(&r);
        if (ok && rw_done(&r))
            *out = (em_remote_stats){v[0], v[1], v[2], v[3], v[4], v[5]};
        else
            s = rc_broke(c, "unexpected reply to stats", 0);
    }
    pthread_mutex_unlock(&c->mu);
    return s;
}
