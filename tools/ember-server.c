/*
 * ember-server — hosts one device of this machine for remote clients (em_remote_connect).
 *
 * Usage: ember-server --token-file F [--listen [HOST:]PORT] [--device D] [--max-bytes N]
 *                     [--max-total-bytes N] [--max-clients N] [--max-pending N]
 *                     [--handshake-timeout S] [--max-tensors N] [--max-msg N] [--verbose]
 *
 * --listen defaults to 127.0.0.1:7070 (a bare PORT listens on 127.0.0.1; port 0 picks a free
 * one). --device is any device of this machine, autodiff ones included (default: the best
 * present). The token is the file's content without its trailing newline; it must not be
 * empty. Sizes take a K, M or G suffix. Defaults: --max-bytes 4G a client, --max-total-bytes
 * three quarters of this machine's memory for all clients together, --max-clients 64
 * authenticated connections, --max-pending 16 connections still in the handshake (the oldest
 * gives way to a new one), --handshake-timeout 5 s, --max-tensors 1000000 a client,
 * --max-msg 64M.
 *
 * Once listening it prints one line on stdout:
 *   ember-server: listening on HOST:PORT device D
 * and serves until SIGINT or SIGTERM. Exit status: 0 after a signal, 2 for bad flags, an
 * unreadable or empty token file, an absent device, or an address it cannot bind.
 * The protocol is specified in docs/remote-protocol.md.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/remote/server.h"
#include "ember/ember.h"

static void usage(FILE *f) {
    fprintf(f, "usage: ember-server --token-file F [--listen [HOST:]PORT] [--device D]\n"
               "                    [--max-bytes N] [--max-total-bytes N] [--max-clients N]\n"
               "                    [--max-pending N] [--handshake-timeout S] [--max-tensors N]\n"
               "                    [--max-msg N] [--verbose]\n");
}

static int bad(const char *what, const char *v) {
    fprintf(stderr, "ember-server: %s%s%s\n", what, v ? ": " : "", v ? v : "");
    return 2;
}

/* "123", "64K", "4M", "2G" */
static bool parse_size(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || s[0] == '-') return false;
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k') shift = 10;
    else if (*end == 'M' || *end == 'm') shift = 20;
    else if (*end == 'G' || *end == 'g') shift = 30;
    if (shift) end++;
    if (*end || (shift && v > (UINT64_MAX >> shift))) return false;
    *out = (uint64_t)v << shift;
    return true;
}

/* Reads the token: the file without one trailing "\n" or "\r\n". */
static char *read_token(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && (st.st_mode & 077))
        fprintf(stderr, "ember-server: warning: %s is readable by others (chmod 600)\n", path);
    char *buf = calloc(1, 4097);
    size_t n = buf ? fread(buf, 1, 4096, f) : 0;
    fclose(f);
    if (!buf) return NULL;
    buf[n] = '\0';
    if (n && buf[n - 1] == '\n') buf[--n] = '\0';
    if (n && buf[n - 1] == '\r') buf[--n] = '\0';
    if (n == 0 || strlen(buf) != n) { /* empty, or a NUL inside */
        free(buf);
        return NULL;
    }
    return buf;
}

int main(int argc, char **argv) {
    rs_config cfg = {.listen = "127.0.0.1:7070", .max_bytes = 4ull << 30, .max_tensors = 1000000,
                     .max_clients = 64, .max_pending = 16, .handshake_timeout_s = 5};
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) cfg.max_total_bytes = (uint64_t)pages / 4 * 3 * (uint64_t)page;
    const char *token_file = NULL, *device = NULL;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(f, "--verbose") == 0) {
            cfg.verbose = true;
            continue;
        }
        if (i + 1 >= argc) return bad("a flag needs a value", f);
        const char *v = argv[++i];
        uint64_t n = 0;
        if (strcmp(f, "--listen") == 0) cfg.listen = v;
        else if (strcmp(f, "--device") == 0) device = v;
        else if (strcmp(f, "--token-file") == 0) token_file = v;
        else if (strcmp(f, "--max-bytes") == 0) {
            if (!parse_size(v, &n)) return bad("--max-bytes: not a size", v);
            cfg.max_bytes = n;
        } else if (strcmp(f, "--max-total-bytes") == 0) {
            if (!parse_size(v, &n)) return bad("--max-total-bytes: not a size", v);
            cfg.max_total_bytes = n;
        } else if (strcmp(f, "--max-pending") == 0) {
            if (!parse_size(v, &n) || n < 1 || n > 4096) return bad("--max-pending: 1..4096", v);
            cfg.max_pending = (int)n;
        } else if (strcmp(f, "--handshake-timeout") == 0) {
            if (!parse_size(v, &n) || n < 1 || n > 600) return bad("--handshake-timeout: 1..600 s", v);
            cfg.handshake_timeout_s = (int)n;
        } else if (strcmp(f, "--max-tensors") == 0) {
            if (!parse_size(v, &n)) return bad("--max-tensors: not a count", v);
            cfg.max_tensors = n;
        } else if (strcmp(f, "--max-clients") == 0) {
            if (!parse_size(v, &n) || n < 1 || n > 4096) return bad("--max-clients: 1..4096", v);
            cfg.max_clients = (int)n;
        } else if (strcmp(f, "--max-msg") == 0) {
            if (!parse_size(v, &n) || n < RW_MIN_MAX_MSG || n > (1u << 30))
                return bad("--max-msg: 64K..1G", v);
            cfg.max_msg = (uint32_t)n;
        } else {
            usage(stderr);
            return bad("unknown flag", f);
        }
    }
    if (!token_file) {
        usage(stderr);
        return bad("--token-file is required", NULL);
    }
    char *token = read_token(token_file);
    if (!token) return bad("cannot read a non-empty token from", token_file);
    cfg.token = token;
    cfg.device = em_device_default();
    if (device && em_device_parse(device, &cfg.device) != EM_OK) {
        free(token);
        return bad("--device", em_last_error());
    }
    /* the signals are taken by sigwait below; every thread inherits the mask */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    rs_server *srv;
    if (rs_start(&cfg, &srv) != EM_OK) {
        free(token);
        return bad("cannot start", em_last_error());
    }
    char name[64] = "?";
    em_device_name(cfg.device, name, sizeof name);
    char host[256] = "127.0.0.1";
    const char *colon = strrchr(cfg.listen, ':');
    if (colon && (size_t)(colon - cfg.listen) < sizeof host) {
        memcpy(host, cfg.listen, (size_t)(colon - cfg.listen));
        host[colon - cfg.listen] = '\0';
    }
    printf("ember-server: listening on %s:%d device %s\n", host, rs_port(srv), name);
    fflush(stdout);
    int sig = 0;
    sigwait(&set, &sig);
    if (cfg.verbose) fprintf(stderr, "ember-server: signal %d: stopping\n", sig);
    rs_stop(srv);
    free(token);
    return 0;
}
