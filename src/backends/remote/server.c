/*
 * server.c — ember-server's engine: accepts connections, authenticates them, and serves each
 * one on its own thread: a table of the client's buffers (ids the client chose), its limits,
 * the first error it has not been told about yet. A malformed message, a vanished client or
 * a failed handshake ends that connection only; its buffers are freed.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "backends/remote/net.h"
#include "backends/remote/server.h"


#define RS_RBUF (64u << 10)

typedef struct rs_entry {
    uint64_t id;
    void *buf;
    size_t bytes;
    uint8_t state; /* 0 empty, 1 used, 2 deleted */
} rs_entry;

typedef struct rs_conn {
    struct rs_server *srv;
    struct rs_conn *next, *prev;
    int fd;
    unsigned serial;
    bool authed;   /* past the handshake (counts against max_clients, not max_pending) */
    bool evicted;  /* a pending connection told to give way to a newer one */
    rs_entry *tab;
    size_t tcap, tused, tdead;
    uint64_t bytes, tensors;
    bool has_err;
    em_status err;
    char errmsg[600];
    rn_frame in;
    uint8_t *tmp; /* read staging for device-memory backends */
    size_t tmp_cap;
    rn_rbuf rb;             /* received, not yet consumed (over rbuf) */
    uint8_t rbuf[RS_RBUF];
} rs_conn;

struct rs_server {
    rs_config cfg;
    char *token;
    int lfd, port;
    pthread_t acceptor;
    atomic_bool stopping;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    rs_conn *conns;
    int nconns;    /* all connections (threads) */
    int nauthed;   /* of which authenticated */
    unsigned serial;
    rs_host host;
    pthread_mutex_t host_lock;
    atomic_uint_least64_t bytes;
    atomic_int clients;
    rw_welcome wl; /* the template (mac filled per client) */
};

#define RS_LOG(srv, ...)                                                                      \
    do {                                                                                      \
        if ((srv)->cfg.verbose) {                                                             \
            fprintf(stderr, "ember-server: " __VA_ARGS__);                                    \
            fputc('\n', stderr);                                                              \
        }                                                                                     \
    } while (0)

/* ---- the buffer table (open addressing on the client's ids) ---- */

static size_t rs_hash(uint64_t id, size_t cap) {
    return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 17) & (cap - 1);
}

static rs_entry *rs_find(rs_conn *c, uint64_t id) {
    if (!c->tcap) return NULL;
    for (size_t i = rs_hash(id, c->tcap), n = 0; n < c->tcap; i = (i + 1) & (c->tcap - 1), n++) {
        rs_entry *e = &c->tab[i];
        if (e->state == 0) return NULL;
        if (e->state == 1 && e->id == id) return e;
    }
    return NULL;
}

static bool rs_grow(rs_conn *c) {
    size_t cap = c->tcap ? c->tcap : 64;
    while ((c->tused + 1) * 2 > cap) cap *= 2;
    rs_entry *t = calloc(cap, sizeof *t);
    if (!t) return false;
    for (size_t i = 0; i < c->tcap; i++) {
        if (c->tab[i].state != 1) continue;
        size_t j = rs_hash(c->tab[i].id, cap);
        while (t[j].state) j = (j + 1) & (cap - 1);
        t[j] = c->tab[i];
    }
    free(c->tab);
    c->tab = t;
    c->tcap = cap;
    c->tdead = 0;
    return true;
}

static bool rs_insert(rs_conn *c, uint64_t id, void *buf, size_t bytes) {
    if ((c->tused + c->tdead + 1) * 2 > c->tcap && !rs_grow(c)) return false;
    size_t i = rs_hash(id, c->tcap);
    while (c->tab[i].state == 1) i = (i + 1) & (c->tcap - 1);
    if (c->tab[i].state == 2) c->tdead--;
    c->tab[i] = (rs_entry){id, buf, bytes, 1};
    c->tused++;
    return true;
}

static bool rs_lookup(void *conn, uint64_t id, void **buf, size_t *bytes) {
    rs_entry *e = rs_find(conn, id);
    if (!e) return false;
    *buf = e->buf;
    *bytes = e->bytes;
    return true;
}

/* ---- buffered receiving: many small messages a recv; large payloads straight through ---- */

/* Receives exactly n bytes into dst (NULL: discards them). 1, 0 on EOF, -1 on error. */
static int rs_recv(rs_conn *c, void *dst, size_t n) {
    return rn_recv_buffered(c->fd, &c->rb, dst, n, RS_RBUF / 4);
}

/* ---- replies and errors ---- */

static void rs_record(rs_conn *c, em_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void rs_record(rs_conn *c, em_status s, const char *fmt, ...) {
    if (c->has_err) return; /* the first failure is the one reported */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
    va_end(ap);
    c->err = s;
    c->has_err = true;
}

static int rs_send_error(int fd, em_status s, const char *msg) {
    rw_writer w = {0};
    size_t n = strlen(msg);
    if (n > 1000) n = 1000;
    size_t start = rw_begin(&w, RW_ERROR);
    rw_put_u8(&w, (uint8_t)s);
    rw_put_u16(&w, (uint16_t)n);
    rw_put_bytes(&w, msg, n);
    rw_end(&w, start);
    int rc = w.failed ? -1 : rn_send_all(fd, w.p, w.len);
    rw_writer_free(&w);
    return rc;
}

/* Sends the pending error (and clears it). */
static int rs_send_pending(rs_conn *c) {
    c->has_err = false;
    return rs_send_error(c->fd, c->err, c->errmsg);
}

static void rs_host_lock(rs_conn *c) {
    if (c->srv->host.serialize) pthread_mutex_lock(&c->srv->host_lock);
}
static void rs_host_unlock(rs_conn *c) {
    if (c->srv->host.serialize) pthread_mutex_unlock(&c->srv->host_lock);
}

/* Counts `bytes` against the server-wide cap (max_total_bytes); false when they do not fit. */
static bool rs_reserve(rs_server *srv, uint64_t bytes) {
    uint64_t cap = srv->cfg.max_total_bytes, cur = atomic_load(&srv->bytes);
    do {
        if (cap && (bytes > cap || cur > cap - bytes)) return false;
    } while (!atomic_compare_exchange_weak(&srv->bytes, &cur, cur + bytes));
    return true;
}

/* A fresh buffer holds zeros, never what the device's allocator last gave someone else. */
static em_status rs_zero(const rs_host *h, void *buf, size_t bytes) {
    if (!bytes) return EM_OK;
    if (h->ops->caps & EM_CAP_HOST_MEMORY) {
        memset(buf, 0, bytes);
        return EM_OK;
    }
    if (h->ops->fill) { /* the buffer as a u8 vector */
        em_view v = {0};
        v.buf = buf;
        v.dtype = EM_U8;
        v.rank = 1;
        v.shape[0] = (int64_t)bytes;
        v.strides[0] = 1;
        return h->ops->fill(h->ctx, &v, 0.0);
    }
    static const uint8_t zeros[4096];
    em_status s = EM_OK;
    for (size_t off = 0; off < bytes && s == EM_OK; off += sizeof zeros)
        s = h->ops->write(h->ctx, buf, off, zeros,
                          bytes - off < sizeof zeros ? bytes - off : sizeof zeros);
    return s;
}

/* ---- messages; each returns false to close the connection ---- */

static bool rs_on_alloc(rs_conn *c, rw_reader *r) {
    uint64_t id = rw_get_u64(r), bytes = rw_get_u64(r);
    if (!rw_done(r) || id == 0) return false;
    const rs_config *cfg = &c->srv->cfg;
    if (rs_find(c, id)) {
        rs_record(c, EM_ERR_ARG, "alloc: buffer %llu exists", (unsigned long long)id);
    } else if (cfg->max_bytes && bytes > cfg->max_bytes - c->bytes) {
        rs_record(c, EM_ERR_NOMEM, "alloc: %llu bytes would pass the limit of %llu bytes a client",
                  (unsigned long long)bytes, (unsigned long long)cfg->max_bytes);
    } else if (cfg->max_tensors && c->tensors >= cfg->max_tensors) {
        rs_record(c, EM_ERR_NOMEM, "alloc: the limit of %llu buffers a client is reached",
                  (unsigned long long)cfg->max_tensors);
    } else if (bytes > SIZE_MAX / 2) {
        rs_record(c, EM_ERR_NOMEM, "alloc: %llu bytes", (unsigned long long)bytes);
    } else if (!rs_reserve(c->srv, bytes)) {
        rs_record(c, EM_ERR_NOMEM,
                  "alloc: %llu bytes would pass the server's limit of %llu bytes for all clients",
                  (unsigned long long)bytes, (unsigned long long)cfg->max_total_bytes);
    } else {
        void *buf = NULL;
        rs_host_lock(c);
        em_status s = c->srv->host.ops->alloc(c->srv->host.ctx, bytes ? (size_t)bytes : 1, &buf);
        if (s == EM_OK) s = rs_zero(&c->srv->host, buf, (size_t)bytes);
        rs_host_unlock(c);
        if (s != EM_OK) {
            if (buf) c->srv->host.ops->free(c->srv->host.ctx, buf);
            atomic_fetch_sub(&c->srv->bytes, bytes);
            rs_record(c, s, "alloc: %s", em_last_error());
        } else if (!rs_insert(c, id, buf, (size_t)bytes)) {
            c->srv->host.ops->free(c->srv->host.ctx, buf);
            atomic_fetch_sub(&c->srv->bytes, bytes);
            rs_record(c, EM_ERR_NOMEM, "alloc: out of memory for the buffer table");
        } else {
            c->bytes += bytes;
            c->tensors++;
        }
    }
    return true;
}

static void rs_release(rs_conn *c, rs_entry *e) {
    rs_host_lock(c);
    c->srv->host.ops->free(c->srv->host.ctx, e->buf);
    rs_host_unlock(c);
    c->bytes -= e->bytes;
    c->tensors--;
    atomic_fetch_sub(&c->srv->bytes, (uint64_t)e->bytes);
    e->state = 2;
    c->tused--;
    c->tdead++;
}

static bool rs_on_free(rs_conn *c, rw_reader *r) {
    uint64_t id = rw_get_u64(r);
    if (!rw_done(r)) return false;
    rs_entry *e = rs_find(c, id);
    if (e) rs_release(c, e);
    else rs_record(c, EM_ERR_ARG, "free: buffer %llu does not exist", (unsigned long long)id);
    return true;
}

static bool rs_on_write(rs_conn *c, uint64_t id, uint64_t off, uint64_t n) {
    rs_entry *e = rs_find(c, id);
    const rs_host *h = &c->srv->host;
    if (!e || off > e->bytes || n > e->bytes - off) {
        rs_record(c, EM_ERR_ARG, "write: %llu bytes at %llu do not fit buffer %llu",
                  (unsigned long long)n, (unsigned long long)off, (unsigned long long)id);
        return rs_recv(c, NULL, (size_t)n) == 1;
    }
    if (h->ops->caps & EM_CAP_HOST_MEMORY) /* straight into the buffer */
        return rs_recv(c, (char *)e->buf + off, (size_t)n) == 1;
    if (n > c->in.cap) {
        uint8_t *p = realloc(c->in.p, (size_t)n);
        if (!p) return false;
        c->in.p = p;
        c->in.cap = (size_t)n;
    }
    if (rs_recv(c, c->in.p, (size_t)n) != 1) return false;
    rs_host_lock(c);
    em_status s = h->ops->write(h->ctx, e->buf, (size_t)off, c->in.p, (size_t)n);
    rs_host_unlock(c);
    if (s != EM_OK) rs_record(c, s, "write: %s", em_last_error());
    return true;
}

static bool rs_on_read(rs_conn *c, rw_reader *r) {
    uint64_t id = rw_get_u64(r), off = rw_get_u64(r), n = rw_get_u64(r);
    if (!rw_done(r)) return false;
    if (c->has_err) return rs_send_pending(c) == 0;
    rs_entry *e = rs_find(c, id);
    const rs_host *h = &c->srv->host;
    if (!e || off > e->bytes || n > e->bytes - off || n + 1 > c->srv->cfg.max_msg) {
        char m[200];
        snprintf(m, sizeof m, "read: %llu bytes at %llu do not fit buffer %llu",
                 (unsigned long long)n, (unsigned long long)off, (unsigned long long)id);
        return rs_send_error(c->fd, EM_ERR_ARG, m) == 0;
    }
    uint8_t hdr[5];
    rw_store_le32(hdr, (uint32_t)(n + 1));
    hdr[4] = RW_DATA;
    if (h->ops->caps & EM_CAP_HOST_MEMORY)
        return rn_send2(c->fd, hdr, 5, (const char *)e->buf + off, (size_t)n) == 0;
    if (n > c->tmp_cap) {
        uint8_t *p = realloc(c->tmp, (size_t)n);
        if (!p) return false;
        c->tmp = p;
        c->tmp_cap = (size_t)n;
    }
    rs_host_lock(c);
    em_status s = n ? h->ops->read(h->ctx, e->buf, (size_t)off, c->tmp, (size_t)n) : EM_OK;
    rs_host_unlock(c);
    if (s != EM_OK) {
        char m[600];
        snprintf(m, sizeof m, "read: %s", em_last_error());
        return rs_send_error(c->fd, s, m) == 0;
    }
    return rn_send2(c->fd, hdr, 5, c->tmp, (size_t)n) == 0;
}

static bool rs_on_stats(rs_conn *c) {
    const rs_host *h = &c->srv->host;
    size_t in_use = 0, peak = 0;
    if (h->ops->memory) h->ops->memory(h->ctx, &in_use, &peak);
    rw_writer w = {0};
    size_t start = rw_begin(&w, RW_STATS_R);
    rw_put_u64(&w, c->bytes);
    rw_put_u64(&w, c->tensors);
    rw_put_u64(&w, atomic_load(&c->srv->bytes));
    rw_put_u64(&w, (uint64_t)atomic_load(&c->srv->clients));
    rw_put_u64(&w, in_use);
    rw_put_u64(&w, peak);
    rw_end(&w, start);
    int rc = w.failed ? -1 : rn_send_all(c->fd, w.p, w.len);
    rw_writer_free(&w);
    return rc == 0;
}

static bool rs_on_kernel(rs_conn *c, const uint8_t *body, size_t n) {
    rw_kernel k;
    char why[160];
    if (!rw_decode_kernel(body, n, &k, why, sizeof why) ||
        (k.slot >= RW_K_REMOTE_COUNT &&
         snprintf(why, sizeof why, "slot %s is not on the protocol", rw_slots[k.slot].name))) {
        RS_LOG(c->srv, "client %u: malformed kernel message (%s): closing", c->serial, why);
        return false;
    }
    char msg[600];
    em_status s = rs_exec_kernel(&c->srv->host, rs_lookup, c, &k, msg, sizeof msg);
    if (s != EM_OK) rs_record(c, s, "%s", msg);
    return true;
}

/* Serves an authenticated connection until it ends. */
static void rs_serve(rs_conn *c) {
    const uint32_t max = c->srv->cfg.max_msg;
    for (;;) {
        uint8_t hdr[5];
        int rc = rs_recv(c, hdr, 4);
        if (rc != 1) {
            RS_LOG(c->srv, "client %u: gone", c->serial);
            return;
        }
        uint32_t len = rw_le32(hdr);
        if (len == 0 || len > max) {
            RS_LOG(c->srv, "client %u: frame of %u bytes (limit %u): closing", c->serial, len, max);
            return;
        }
        if (rs_recv(c, hdr + 4, 1) != 1) return;
        uint8_t type = hdr[4];
        size_t n = len - 1;
        if (type == RW_WRITE) {
            uint8_t f[16];
            if (n < 16 || rs_recv(c, f, 16) != 1) return;
            if (!rs_on_write(c, rw_le64(f), rw_le64(f + 8), n - 16)) return;
            continue;
        }
        if (n > c->in.cap) {
            uint8_t *p = realloc(c->in.p, n);
            if (!p) return;
            c->in.p = p;
            c->in.cap = n;
        }
        if (n && rs_recv(c, c->in.p, n) != 1) return;
        rw_reader r = rw_reader_of(c->in.p, n);
        bool ok;
        switch (type) {
        case RW_ALLOC: ok = rs_on_alloc(c, &r); break;
        case RW_FREE: ok = rs_on_free(c, &r); break;
        case RW_READ: ok = rs_on_read(c, &r); break;
        case RW_SYNC:
            ok = n == 0;
            if (ok) {
                if (c->has_err) ok = rs_send_pending(c) == 0;
                else {
                    uint8_t m[5];
                    rw_store_le32(m, 1);
                    m[4] = RW_OK;
                    ok = rn_send_all(c->fd, m, 5) == 0;
                }
            }
            break;
        case RW_STATS: ok = n == 0 && rs_on_stats(c); break;
        case RW_KERNEL: ok = rs_on_kernel(c, c->in.p, n); break;
        case RW_BYE:
            RS_LOG(c->srv, "client %u: bye", c->serial);
            return;
        default:
            RS_LOG(c->srv, "client %u: unknown message type %u: closing", c->serial, type);
            return;
        }
        if (!ok) {
            RS_LOG(c->srv, "client %u: malformed or failed message (type %u): closing", c->serial, type);
            return;
        }
    }
}

/* The handshake; true when the client proved it knows the token. */
static bool rs_handshake(rs_conn *c) {
    rs_server *srv = c->srv;
    uint8_t ch[RW_NONCE_BYTES];
    if (!rn_random(ch, sizeof ch)) return false;
    rw_writer w = {0};
    size_t start = rw_begin(&w, RW_HELLO);
    rw_put_bytes(&w, RW_MAGIC, 4);
    rw_put_u16(&w, RW_VERSION);
    rw_put_u16(&w, 0);
    rw_put_bytes(&w, ch, sizeof ch);
    rw_end(&w, start);
    bool ok = !w.failed && rn_send_all(c->fd, w.p, w.len) == 0;
    w.len = 0;
    if (!ok || rn_recv_frame_within(c->fd, &c->in, RW_MAX_PREAUTH, srv->cfg.handshake_timeout_s) != 1) {
        rw_writer_free(&w);
        RS_LOG(srv, "client %u: no authentication: closing", c->serial);
        return false;
    }
    rw_reader r = rw_reader_of(c->in.p, c->in.len);
    const uint8_t *magic = NULL, *nonce = NULL, *mac = NULL;
    unsigned type = rw_get_u8(&r);
    ok = type == RW_AUTH && rw_get_bytes(&r, 4, &magic) && memcmp(magic, RW_MAGIC, 4) == 0;
    unsigned version = rw_get_u16(&r);
    rw_get_u16(&r);
    ok = ok && rw_get_bytes(&r, RW_NONCE_BYTES, &nonce) && rw_get_bytes(&r, RW_MAC_BYTES, &mac) &&
         rw_done(&r);
    if (ok && version != RW_VERSION) {
        char m[120];
        snprintf(m, sizeof m, "protocol version %u is not supported (this server speaks %u)",
                 version, RW_VERSION);
        rs_send_error(c->fd, EM_ERR_PROTOCOL, m);
        rw_writer_free(&w);
        RS_LOG(srv, "client %u: %s", c->serial, m);
        return false;
    }
    uint8_t want[RW_MAC_BYTES];
    if (ok) {
        rn_mac(want, srv->token, strlen(srv->token), "ember-client-v1", ch, nonce);
        ok = rn_mac_equal(want, mac);
    }
    if (!ok) {
        rs_send_error(c->fd, EM_ERR_AUTH, "authentication failed");
        rw_writer_free(&w);
        RS_LOG(srv, "client %u: authentication failed: closing", c->serial);
        return false;
    }
    pthread_mutex_lock(&srv->mu);
    bool full = srv->nauthed >= srv->cfg.max_clients;
    if (!full) {
        srv->nauthed++;
        c->authed = true;
    }
    pthread_mutex_unlock(&srv->mu);
    if (full) {
        rs_send_error(c->fd, EM_ERR_STATE, "the server is full");
        rw_writer_free(&w);
        RS_LOG(srv, "client %u: authenticated, but the server is full: closing", c->serial);
        return false;
    }
    rw_welcome wl = srv->wl;
    rn_mac(wl.mac, srv->token, strlen(srv->token), "ember-server-v1", nonce, ch);
    rw_encode_welcome(&w, &wl);
    ok = !w.failed && rn_send_all(c->fd, w.p, w.len) == 0;
    rw_writer_free(&w);
    return ok;
}

/* ---- connections and the acceptor ---- */

static void *rs_conn_main(void *arg) {
    rs_conn *c = arg;
    rs_server *srv = c->srv;
    if (rs_handshake(c)) { /* within handshake_timeout_s, in total */
        atomic_fetch_add(&srv->clients, 1);
        RS_LOG(srv, "client %u: authenticated", c->serial);
        rs_serve(c);
        atomic_fetch_sub(&srv->clients, 1);
    }
    /* everything the client left is freed */
    for (size_t i = 0; i < c->tcap; i++)
        if (c->tab[i].state == 1) rs_release(c, &c->tab[i]);
    /* and when no client is left, so is what the device's allocator kept for reuse: the
     * server's memory returns to where it started, not to the last client's high water */
    if (c->authed && atomic_load(&srv->clients) == 0 && srv->host.ops->memory_release) {
        rs_host_lock(c);
        srv->host.ops->memory_release(srv->host.ctx);
        rs_host_unlock(c);
    }
    free(c->tab);
    rn_frame_free(&c->in);
    free(c->tmp);
    pthread_mutex_lock(&srv->mu);
    if (c->prev) c->prev->next = c->next;
    else srv->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    close(c->fd);
    srv->nconns--;
    if (c->authed) srv->nauthed--;
    pthread_cond_broadcast(&srv->cv);
    pthread_mutex_unlock(&srv->mu);
    free(c);
    return NULL;
}

static void *rs_accept_main(void *arg) {
    rs_server *srv = arg;
    while (!atomic_load(&srv->stopping)) {
        struct pollfd p = {srv->lfd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        int fd = accept4(srv->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        pthread_mutex_lock(&srv->mu);
        int pending = srv->nconns - srv->nauthed;
        /* connections told to give way end within moments: wait for them a little */
        for (int i = 0; i < 20 && pending >= 2 * srv->cfg.max_pending; i++) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 10 * 1000 * 1000;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&srv->cv, &srv->mu, &ts);
            pending = srv->nconns - srv->nauthed;
        }
        if (srv->nauthed >= srv->cfg.max_clients || pending >= 2 * srv->cfg.max_pending) {
            int nauthed = srv->nauthed;
            bool full = nauthed >= srv->cfg.max_clients;
            pthread_mutex_unlock(&srv->mu);
            rs_send_error(fd, EM_ERR_STATE, full ? "the server is full" : "the server is busy");
            close(fd);
            RS_LOG(srv, "refused a connection: %d clients, %d in the handshake", nauthed, pending);
            continue;
        }
        if (pending >= srv->cfg.max_pending) {
            /* the handshake queue is full: its oldest connection gives way (its thread sees
             * the socket shut and ends), so that silent sockets cannot keep clients out */
            rs_conn *old = NULL;
            for (rs_conn *o = srv->conns; o; o = o->next)
                if (!o->authed && !o->evicted) old = o; /* the list is newest first */
            if (old) {
                old->evicted = true;
                shutdown(old->fd, SHUT_RDWR);
                RS_LOG(srv, "client %u: still in the handshake, gives way to a new one",
                       old->serial);
            }
        }
        rs_conn *c = calloc(1, sizeof *c);
        pthread_t th;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (c) {
            c->rb = (rn_rbuf){c->rbuf, RS_RBUF, 0, 0};
            c->srv = srv;
            c->fd = fd;
            c->serial = ++srv->serial;
            c->next = srv->conns;
            if (srv->conns) srv->conns->prev = c;
            srv->conns = c;
            srv->nconns++;
            if (pthread_create(&th, &attr, rs_conn_main, c) != 0) {
                srv->conns = c->next;
                if (c->next) c->next->prev = NULL;
                srv->nconns--;
                free(c);
                c = NULL;
            }
        }
        pthread_attr_destroy(&attr);
        pthread_mutex_unlock(&srv->mu);
        if (!c) close(fd);
    }
    return NULL;
}

em_status rs_start(const rs_config *cfg, rs_server **out) {
    if (!cfg || !out || !cfg->token || !cfg->token[0])
        return em_backend_set_error(EM_ERR_ARG, "ember-server: an empty token");
    if (cfg->max_msg && cfg->max_msg < RW_MIN_MAX_MSG)
        return em_backend_set_error(EM_ERR_ARG, "ember-server: max message below %u bytes",
                                    RW_MIN_MAX_MSG);
    const em_backend_ops *ops = em_backend_get(cfg->device.backend);
    if (!ops || cfg->device.index < 0 || cfg->device.index >= ops->device_count())
        return em_backend_set_error(EM_ERR_DEVICE, "ember-server: the device is not present");
    void *ctx = NULL;
    em_status s = ops->open(cfg->device.index, &ctx);
    if (s != EM_OK) return s;
    rs_server *srv = calloc(1, sizeof *srv);
    if (!srv) return em_backend_set_error(EM_ERR_NOMEM, "ember-server: out of memory");
    srv->cfg = *cfg;
    if (!srv->cfg.max_msg) srv->cfg.max_msg = RW_DEFAULT_MAX_MSG;
    if (srv->cfg.max_clients <= 0) srv->cfg.max_clients = 64;
    if (srv->cfg.max_pending <= 0) srv->cfg.max_pending = 16;
    if (srv->cfg.handshake_timeout_s <= 0) srv->cfg.handshake_timeout_s = 5;
    srv->token = strdup(cfg->token);
    srv->cfg.token = srv->token;
    srv->cfg.listen = NULL;
    srv->host = (rs_host){ops, ctx, !(ops->caps & EM_CAP_HOST_MEMORY), &srv->host_lock};
    pthread_mutex_init(&srv->mu, NULL);
    pthread_cond_init(&srv->cv, NULL);
    pthread_mutex_init(&srv->host_lock, NULL);
    srv->wl.autodiff = cfg->device.autodiff ? 1 : 0;
    srv->wl.checkpointing = cfg->device.autodiff ? (uint8_t)cfg->device.checkpointing : 0;
    srv->wl.caps = ops->caps;
    srv->wl.slots = rs_slot_mask(ops);
    srv->wl.max_msg = srv->cfg.max_msg;
    srv->wl.max_bytes = cfg->max_bytes;
    srv->wl.max_tensors = cfg->max_tensors;
    if (em_device_name(cfg->device, srv->wl.name, sizeof srv->wl.name) != EM_OK)
        snprintf(srv->wl.name, sizeof srv->wl.name, "%s", ops->name);
    char err[300];
    srv->lfd = rn_listen(cfg->listen ? cfg->listen : "127.0.0.1:7070", &srv->port, err, sizeof err);
    if (srv->lfd < 0 || !srv->token || pthread_create(&srv->acceptor, NULL, rs_accept_main, srv) != 0) {
        if (srv->lfd >= 0) close(srv->lfd);
        else s = em_backend_set_error(EM_ERR_IO, "ember-server: listen on %s", err);
        if (srv->lfd >= 0) s = em_backend_set_error(EM_ERR_NOMEM, "ember-server: cannot start");
        free(srv->token);
        free(srv);
        return s;
    }
    *out = srv;
    return EM_OK;
}

int rs_port(const rs_server *s) { return s->port; }

void rs_stats(rs_server *s, rw_stats *out) {
    memset(out, 0, sizeof *out);
    out->server_bytes = atomic_load(&s->bytes);
    out->server_clients = (uint64_t)atomic_load(&s->clients);
    if (s->host.ops->memory) {
        size_t in_use = 0, peak = 0;
        s->host.ops->memory(s->host.ctx, &in_use, &peak);
        out->device_in_use = in_use;
        out->device_peak = peak;
    }
}

void rs_stop(rs_server *s) {
    if (!s) return;
    atomic_store(&s->stopping, true);
    pthread_join(s->acceptor, NULL);
    close(s->lfd);
    pthread_mutex_lock(&s->mu);
    for (rs_conn *c = s->conns; c; c = c->next) shutdown(c->fd, SHUT_RDWR);
    while (s->nconns > 0) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->host_lock);
    free(s->token);
    free(s);
}
