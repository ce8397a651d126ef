/*
 * test_remote_abuse.c — ember-server's engine against hostile traffic on loopback: garbage
 * and oversize frames before authentication, a wrong protocol version, unauthenticated
 * requests, oversize, empty, truncated and malformed messages after it, a client gone in the
 * middle of a write, random frames, the client limit and the handshake timeout. Each must
 * close that connection only: a well-behaved client connected throughout keeps working, and
 * the server ends with no clients and no buffers.
 */
#ifdef EMBER_WITH_REMOTE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "ember/ember.h"
#include "ember/remote.h"
#include "remote_raw.h"

#define TOKEN "s3cret"

static rs_server *srv;
static int port;
static em_device good; /* a library client connected for the whole run */
static em_tensor *good_t;

static int setup(void **state) {
    (void)state;
    rs_config cfg = {.listen = "127.0.0.1:0", .token = TOKEN, .max_bytes = 64u << 20,
                     .max_msg = RW_MIN_MAX_MSG, .max_clients = 8, .handshake_timeout_s = 1};
    cfg.device = (em_device){EM_BACKEND_REF, 0, false, EM_CKPT_NONE};
    if (rs_start(&cfg, &srv) != EM_OK) return -1;
    port = rs_port(srv);
    char a[64];
    snprintf(a, sizeof a, "127.0.0.1:%d", port);
    if (em_remote_connect(a, TOKEN, &good) != EM_OK) return -1;
    const float v[4] = {1, 2, 3, 4};
    const int64_t n = 4;
    return em_tensor_from_data(v, EM_F32, &n, 1, good, &good_t) == EM_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    em_tensor_release(good_t);
    em_remote_disconnect(good);
    bool idle = raw_wait_idle(srv);
    rs_stop(srv);
    return idle ? 0 : -1;
}

/* The good client still computes. */
static void good_still_works(void) {
    em_tensor *d;
    assert_int_equal(em_mul_scalar(good_t, 2, &d), EM_OK);
    float got[4];
    assert_int_equal(em_tensor_to_data(d, got, sizeof got), EM_OK);
    assert_float_equal(got[3], 8, 0);
    em_tensor_release(d);
    em_remote_stats st;
    assert_int_equal(em_remote_server_stats(good, &st), EM_OK);
}

static void test_before_auth(void **state) {
    (void)state;
    /* garbage instead of the AUTH frame */
    int fd = raw_open(port);
    assert_true(fd >= 0);
    uint8_t junk[300];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)(i * 37 + 11);
    rn_send_all(fd, junk, sizeof junk);
    assert_true(raw_closed(fd));
    close(fd);
    /* an oversize first frame */
    fd = raw_open(port);
    uint8_t big[4];
    rw_store_le32(big, 100000);
    rn_send_all(fd, big, 4);
    assert_true(raw_closed(fd));
    close(fd);
    /* requests without authenticating: no reply, closed */
    fd = raw_open(port);
    raw_frame(fd, RW_STATS, NULL, 0);
    raw_frame(fd, RW_SYNC, NULL, 0);
    rn_frame f = {0};
    assert_int_equal(rn_recv_frame(fd, &f, RW_MAX_PREAUTH), 1); /* the HELLO */
    assert_int_equal(f.p[0], RW_HELLO);
    assert_true(raw_closed(fd));
    rn_frame_free(&f);
    close(fd);
    /* a wrong token and a wrong version */
    assert_int_equal(raw_auth(port, "s3cre", RW_VERSION), -1);
    assert_int_equal(raw_auth(port, TOKEN, 99), -1);
    /* the right ones */
    fd = raw_auth(port, TOKEN, RW_VERSION);
    assert_true(fd >= 0);
    close(fd);
    /* silence: the handshake times out (1 s here) */
    fd = raw_open(port);
    assert_true(raw_closed(fd));
    close(fd);
    /* a trickle, one byte every 100 ms: the limit is on the whole handshake, not a byte */
    fd = raw_open(port);
    assert_int_equal(rn_recv_frame(fd, &f, RW_MAX_PREAUTH), 1);
    rn_frame_free(&f);
    uint8_t len[4];
    rw_store_le32(len, 81);
    rn_send_all(fd, len, 4);
    bool closed = false;
    for (int i = 0; i < 40 && !closed; i++) { /* 4 s */
        usleep(100000);
        uint8_t one = 0;
        char tmp[8];
        closed = send(fd, &one, 1, MSG_NOSIGNAL) < 0 || recv(fd, tmp, sizeof tmp, MSG_DONTWAIT) == 0;
    }
    assert_true(closed);
    close(fd);
    good_still_works();
}

/* Sends the frame bytes after authenticating, expects the server to hang up. */
static void expect_closed_after(const void *bytes, size_t n) {
    int fd = raw_auth(port, TOKEN, RW_VERSION);
    assert_true(fd >= 0);
    rn_send_all(fd, bytes, n);
    assert_true(raw_closed(fd));
    close(fd);
}

static void test_malformed_after_auth(void **state) {
    (void)state;
    uint8_t b[64];
    /* oversize: the length is above the limit (64 KiB here) */
    rw_store_le32(b, RW_MIN_MAX_MSG + 1);
    b[4] = RW_WRITE;
    expect_closed_after(b, 5);
    /* empty frame */
    rw_store_le32(b, 0);
    expect_closed_after(b, 4);
    /* unknown type */
    rw_store_le32(b, 1);
    b[4] = 0x7f;
    expect_closed_after(b, 5);
    /* ALLOC of the wrong size */
    rw_store_le32(b, 9);
    b[4] = RW_ALLOC;
    memset(b + 5, 1, 8);
    expect_closed_after(b, 13);
    /* a truncated kernel: binary with one view of three */
    rw_writer w = {0};
    size_t start = rw_begin(&w, RW_KERNEL);
    rw_put_u8(&w, RW_K_BINARY);
    rw_put_u8(&w, EM_BIN_ADD);
    rw_put_u8(&w, 7);
    rw_put_u64(&w, 1);
    rw_put_u8(&w, EM_F32);
    rw_put_u8(&w, 0);
    rw_put_u64(&w, 0);
    rw_end(&w, start);
    expect_closed_after(w.p, w.len);
    /* rank 9 */
    w.len = 0;
    start = rw_begin(&w, RW_KERNEL);
    rw_put_u8(&w, RW_K_FILL);
    rw_put_u8(&w, 0);
    rw_put_u8(&w, 1);
    rw_put_u64(&w, 1);
    rw_put_u8(&w, EM_F32);
    rw_put_u8(&w, 9);
    rw_put_u64(&w, 0);
    for (int i = 0; i < 18; i++) rw_put_u64(&w, 1);
    rw_put_f64(&w, 0);
    rw_end(&w, start);
    expect_closed_after(w.p, w.len);
    /* a quantized dtype in a view, an unknown slot, an op out of range */
    uint8_t k[] = {RW_K_FILL, 0, 1};
    w.len = 0;
    start = rw_begin(&w, RW_KERNEL);
    rw_put_bytes(&w, k, 3);
    rw_put_u64(&w, 1);
    rw_put_u8(&w, EM_Q8);
    rw_put_u8(&w, 0);
    rw_put_u64(&w, 0);
    rw_put_f64(&w, 0);
    rw_end(&w, start);
    expect_closed_after(w.p, w.len);
    uint8_t slot[] = {0, 0, 0, 0, RW_KERNEL, RW_K_COUNT, 0, 0};
    rw_store_le32(slot, 4);
    expect_closed_after(slot, sizeof slot);
    uint8_t op[] = {0, 0, 0, 0, RW_KERNEL, RW_K_UNARY, EM_UN_COUNT, 3};
    rw_store_le32(op, 4);
    expect_closed_after(op, sizeof op);
    rw_writer_free(&w);
    good_still_works();
}

static void test_gone_mid_write(void **state) {
    (void)state;
    int fd = raw_auth(port, TOKEN, RW_VERSION);
    assert_true(fd >= 0);
    uint8_t a[16];
    rw_store_le64(a, 5);
    rw_store_le64(a + 8, 32768);
    assert_int_equal(raw_frame(fd, RW_ALLOC, a, 16), 0);
    /* a write frame announcing 32 KiB, of which 1000 bytes come */
    uint8_t hdr[21];
    rw_store_le32(hdr, RW_WRITE_HEADER + 32768);
    hdr[4] = RW_WRITE;
    rw_store_le64(hdr + 5, 5);
    rw_store_le64(hdr + 13, 0);
    uint8_t part[1000] = {0};
    rn_send2(fd, hdr, sizeof hdr, part, sizeof part);
    /* the server holds the buffer until we go */
    rw_stats st;
    for (int i = 0; i < 200; i++) {
        rs_stats(srv, &st);
        if (st.server_bytes >= 32768) break;
        usleep(10000);
    }
    assert_true(st.server_bytes >= 32768);
    close(fd);
    good_still_works();
    /* the good client's 16 bytes (plus tiny cached ones) remain */
    for (int i = 0; i < 200; i++) {
        rs_stats(srv, &st);
        if (st.server_bytes < 32768 && st.server_clients == 1) break;
        usleep(10000);
    }
    assert_true(st.server_bytes < 32768);
    assert_int_equal(st.server_clients, 1);
}

static void test_random_frames(void **state) {
    (void)state;
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int round = 0; round < 200; round++) {
        int fd = raw_auth(port, TOKEN, RW_VERSION);
        assert_true(fd >= 0);
        uint8_t body[256];
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t n = 1 + x % 200;
        for (size_t i = 0; i < n; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            body[i] = (uint8_t)x;
        }
        /* mostly kernels, with plausible slots, then a sync */
        if (round % 2 == 0) {
            body[0] = (uint8_t)(x % RW_K_COUNT);
            body[1] = 0;
            body[2] = 1;
        }
        raw_frame(fd, round % 4 == 3 ? (uint8_t)(x >> 8) : RW_KERNEL, body, n);
        raw_frame(fd, RW_SYNC, NULL, 0);
        close(fd);
    }
    good_still_works();
}

static void test_client_limit(void **state) {
    (void)state;
    int fds[7];
    for (int i = 0; i < 7; i++) { /* 7 + the good one = the limit of 8 */
        fds[i] = raw_auth(port, TOKEN, RW_VERSION);
        assert_true(fds[i] >= 0);
    }
    char a[64];
    snprintf(a, sizeof a, "127.0.0.1:%d", port);
    em_device d;
    assert_int_equal(em_remote_connect(a, TOKEN, &d), EM_ERR_STATE);
    assert_non_null(strstr(em_last_error(), "full"));
    for (int i = 0; i < 7; i++) close(fds[i]);
    good_still_works();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_before_auth),
        cmocka_unit_test(test_malformed_after_auth),
        cmocka_unit_test(test_gone_mid_write),
        cmocka_unit_test(test_random_frames),
        cmocka_unit_test(test_client_limit),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
#else
#include <stdio.h>
int main(void) {
    puts("skipped: this build has no remote backend");
    return 77;
}
#endif
