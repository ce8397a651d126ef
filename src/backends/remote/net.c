/* net.c — TCP sockets, frames and the handshake MACs of the remote protocol. */
#include "backends/remote/net.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <time.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

bool rn_split_addr(const char *addr, const char *default_host, char *host, size_t hcap,
                   char *port, size_t pcap, char *err, size_t ecap) {
    if (!addr || !*addr) {
        snprintf(err, ecap, "empty address");
        return false;
    }
    const char *colon;
    size_t hlen;
    const char *h = addr;
    if (addr[0] == '[') {
        const char *close = strchr(addr, ']');
        if (!close || close[1] != ':') {
            snprintf(err, ecap, "'%s': expected [IPV6]:PORT", addr);
            return false;
        }
        h = addr + 1;
        hlen = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(addr, ':');
        if (!colon) {
            if (!default_host) {
                snprintf(err, ecap, "'%s': expected HOST:PORT", addr);
                return false;
            }
            h = default_host;
            hlen = strlen(default_host);
            colon = addr - 1; /* the whole text is the port */
        } else {
            hlen = (size_t)(colon - addr);
        }
    }
    const char *p = colon + 1;
    size_t plen = strlen(p);
    bool digits = plen > 0 && plen <= 5;
    for (size_t i = 0; digits && i < plen; i++) digits = p[i] >= '0' && p[i] <= '9';
    if (!digits || atoi(p) > 65535) {
        snprintf(err, ecap, "'%s': bad port", addr);
        return false;
    }
    if (hlen == 0 || hlen + 1 > hcap || plen + 1 > pcap) {
        snprintf(err, ecap, "'%s': bad host", addr);
        return false;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    memcpy(port, p, plen + 1);
    return true;
}

static void rn_nodelay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int rn_connect(const char *addr, char *err, size_t ecap) {
    char host[256], port[8];
    if (!rn_split_addr(addr, NULL, host, sizeof host, port, sizeof port, err, ecap)) return -1;
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0) {
        snprintf(err, ecap, "%s: %s", addr, gai_strerror(rc));
        return -1;
    }
    int fd = -1, last = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            last = errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
        last = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(err, ecap, "%s: %s", addr, strerror(last));
        return -1;
    }
    rn_nodelay(fd);
    return fd;
}

int rn_listen(const char *addr, int *bound_port, char *err, size_t ecap) {
    char host[256], port[8];
    if (!rn_split_addr(addr, "127.0.0.1", host, sizeof host, port, sizeof port, err, ecap))
        return -1;
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0) {
        snprintf(err, ecap, "%s: %s", addr, gai_strerror(rc));
        return -1;
    }
    int fd = -1, last = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            last = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 64) == 0) break;
        last = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(err, ecap, "%s: %s", addr, strerror(last));
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    *bound_port = 0;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) *bound_port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        else if (ss.ss_family == AF_INET6)
            *bound_port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    return fd;
}

int rn_send_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

int rn_send2(int fd, const void *a, size_t an, const void *b, size_t bn) {
    struct iovec iov[2] = {{(void *)a, an}, {(void *)b, bn}};
    int i = 0;
    while (i < 2) {
        struct msghdr m;
        memset(&m, 0, sizeof m);
        m.msg_iov = iov + i;
        m.msg_iovlen = (size_t)(2 - i);
        ssize_t k = sendmsg(fd, &m, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        size_t left = (size_t)k;
        while (i < 2 && left >= iov[i].iov_len) {
            left -= iov[i].iov_len;
            i++;
        }
        if (i < 2) {
            iov[i].iov_base = (char *)iov[i].iov_base + left;
            iov[i].iov_len -= left;
        }
    }
    return 0;
}

int rn_recv_all(int fd, void *p, size_t n) {
    char *c = p;
    while (n) {
        ssize_t k = recv(fd, c, n, 0);
        if (k == 0) return 0;
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        c += k;
        n -= (size_t)k;
    }
    return 1;
}

int rn_recv_buffered(int fd, rn_rbuf *rb, void *dst, size_t n, size_t direct) {
    char *d = dst;
    while (n) {
        if (rb->pos < rb->len) {
            size_t k = rb->len - rb->pos < n ? rb->len - rb->pos : n;
            if (d) {
                memcpy(d, rb->buf + rb->pos, k);
                d += k;
            }
            rb->pos += k;
            n -= k;
            continue;
        }
        if (d && n >= direct) return rn_recv_all(fd, d, n);
        ssize_t k = recv(fd, rb->buf, rb->cap, 0);
        if (k == 0) return 0;
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        rb->pos = 0;
        rb->len = (size_t)k;
    }
    return 1;
}

int rn_discard(int fd, uint64_t n) {
    char tmp[16384];
    while (n) {
        size_t k = n < sizeof tmp ? (size_t)n : sizeof tmp;
        int rc = rn_recv_all(fd, tmp, k);
        if (rc <= 0) return rc;
        n -= k;
    }
    return 1;
}

int rn_recv_frame(int fd, rn_frame *f, size_t max) {
    uint8_t hdr[4];
    int rc = rn_recv_all(fd, hdr, 4);
    if (rc <= 0) return rc;
    uint32_t len = rw_le32(hdr);
    if (len == 0 || len > max) return -2;
    if (len > f->cap) {
        size_t cap = f->cap ? f->cap : 4096;
        while (cap < len) cap *= 2;
        uint8_t *p = realloc(f->p, cap);
        if (!p) return -3;
        f->p = p;
        f->cap = cap;
    }
    rc = rn_recv_all(fd, f->p, len);
    if (rc <= 0) return rc;
    f->len = len;
    return 1;
}

/* Receives exactly n bytes before the monotonic deadline (seconds). */
static int rn_recv_by(int fd, void *p, size_t n, double deadline) {
    char *c = p;
    while (n) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        double left = deadline - ((double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
        if (left <= 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        struct pollfd pf = {fd, POLLIN, 0};
        int r = poll(&pf, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) continue; /* the deadline check above ends it */
        ssize_t k = recv(fd, c, n, MSG_DONTWAIT);
        if (k == 0) return 0;
        if (k < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
            return -1;
        }
        c += k;
        n -= (size_t)k;
    }
    return 1;
}

int rn_recv_frame_within(int fd, rn_frame *f, size_t max, int seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double deadline = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + seconds;
    uint8_t hdr[4];
    int rc = rn_recv_by(fd, hdr, 4, deadline);
    if (rc <= 0) return rc;
    uint32_t len = rw_le32(hdr);
    if (len == 0 || len > max) return -2;
    if (len > f->cap) {
        uint8_t *p = realloc(f->p, len);
        if (!p) return -3;
        f->p = p;
        f->cap = len;
    }
    rc = rn_recv_by(fd, f->p, len, deadline);
    if (rc <= 0) return rc;
    f->len = len;
    return 1;
}

void rn_frame_free(rn_frame *f) {
    free(f->p);
    f->p = NULL;
    f->cap = f->len = 0;
}

static pthread_once_t rn_sodium_once = PTHREAD_ONCE_INIT;
static int rn_sodium_rc = -1;
static void rn_sodium_init(void) { rn_sodium_rc = sodium_init(); }

void rn_mac(uint8_t mac[RW_MAC_BYTES], const char *token, size_t token_len, const char *label,
            const uint8_t *a, const uint8_t *b) {
    pthread_once(&rn_sodium_once, rn_sodium_init);
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, (const unsigned char *)token, token_len);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)label, strlen(label));
    crypto_auth_hmacsha256_update(&st, a, RW_NONCE_BYTES);
    crypto_auth_hmacsha256_update(&st, b, RW_NONCE_BYTES);
    crypto_auth_hmacsha256_final(&st, mac);
    sodium_memzero(&st, sizeof st);
}

bool rn_mac_equal(const uint8_t *a, const uint8_t *b) {
    return sodium_memcmp(a, b, RW_MAC_BYTES) == 0;
}

bool rn_random(uint8_t *p, size_t n) {
    pthread_once(&rn_sodium_once, rn_sodium_init);
    if (rn_sodium_rc < 0) return false;
    randombytes_buf(p, n);
    return true;
}
