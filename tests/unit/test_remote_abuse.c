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
    /* the ops appended for issue 14 end below the counts: one past each is still refused */
    uint8_t bop[] = {0, 0, 0, 0, RW_KERNEL, RW_K_BINARY, EM_BIN_COUNT, 7};
    rw_store_le32(bop, 4);
    expect_closed_after(bop, sizeof bop);
    uint8_t top[] = {0, 0, 0, 0, RW_KERNEL, RW_K_UNARY, 255, 3};
    rw_store_le32(top, 4);
    expect_closed_after(top, sizeof top);
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


/* ---- the kernel checks, in-process: rs_exec_kernel on the cpu backend, with buffers that are
 * exact-size heap blocks (cpu buffers are host pointers), so that ASan sees any access outside
 * them. Each case is what a hostile client sent; each must be refused before a kernel runs. */

typedef struct xbufs {
    void *p[4];
    size_t n[4];
} xbufs;

static bool x_lookup(void *conn, uint64_t id, void **buf, size_t *bytes) {
    xbufs *b = conn;
    if (id < 1 || id > 4 || !b->p[id - 1]) return false;
    *buf = b->p[id - 1];
    *bytes = b->n[id - 1];
    return true;
}

static xbufs xb;

static void *x_buf(int id, size_t n, const void *init) {
    xb.p[id - 1] = malloc(n ? n : 1);
    xb.n[id - 1] = n;
    if (init) memcpy(xb.p[id - 1], init, n);
    else memset(xb.p[id - 1], 0, n);
    return xb.p[id - 1];
}

static void x_free(void) {
    for (int i = 0; i < 4; i++) free(xb.p[i]);
    memset(&xb, 0, sizeof xb);
}

/* A contiguous view of buffer id. */
static rw_view xv(uint64_t id, em_dtype dt, int rank, const int64_t *shape, int64_t offset) {
    rw_view v = {0};
    v.id = id;
    v.dtype = dt;
    v.rank = rank;
    v.offset = offset;
    int64_t st = 1;
    for (int d = rank - 1; d >= 0; d--) {
        v.shape[d] = shape[d];
        v.strides[d] = st;
        st *= shape[d];
    }
    return v;
}

static em_status x_exec(const rw_kernel *k, char *msg, size_t cap) {
    const em_backend_ops *ops = em_backend_get(EM_BACKEND_CPU);
    rs_host h = {ops, NULL, false, NULL};
    assert_int_equal(ops->open(0, &h.ctx), EM_OK);
    msg[0] = 0;
    return rs_exec_kernel(&h, x_lookup, &xb, k, msg, cap);
}

/* Runs k, expects status want (any failure when want is -1) and, on failure, `has` in the
 * message. */
static void x_expect(const rw_kernel *k, int want, const char *has) {
    char msg[600];
    em_status s = x_exec(k, msg, sizeof msg);
    if (want < 0 ? s == EM_OK : (int)s != want)
        fail_msg("slot %s: status %s, wanted %s (%s)", rw_slots[k->slot].name, em_status_name(s),
                 want < 0 ? "a failure" : em_status_name((em_status)want), msg);
    if (s != EM_OK && has && !strstr(msg, has)) fail_msg("message \"%s\" lacks \"%s\"", msg, has);
}

static rw_kernel x_kernel(rw_slot slot, int sub, int nviews) {
    rw_kernel k;
    memset(&k, 0, sizeof k);
    k.slot = slot;
    k.sub = sub;
    k.mask = (uint8_t)((1u << nviews) - 1);
    return k;
}

/* scatter_add with out = index = buffer 1 [1, 0], src [4096, 7]: the first add turns index[1]
 * into 4096 + ..., and the second lands 32 KiB past the 16-byte buffer. */
static void test_alias_scatter_add(void **state) {
    (void)state;
    const int64_t ix[2] = {1, 0}, src[2] = {4096, 7}, two = 2;
    x_buf(1, 16, ix);
    x_buf(2, 16, src);
    rw_kernel k = x_kernel(RW_K_SCATTER_ADD, 0, 3);
    k.views[0] = xv(1, EM_I64, 1, &two, 0); /* out */
    k.views[1] = xv(1, EM_I64, 1, &two, 0); /* index: the same bytes */
    k.views[2] = xv(2, EM_I64, 1, &two, 0);
    x_expect(&k, EM_ERR_ARG, "overlaps");
    /* out overlapping the index by one element only */
    x_free();
    const int64_t ix3[3] = {0, 0, 0};
    x_buf(1, 24, ix3);
    x_buf(2, 16, src);
    k.views[0] = xv(1, EM_I64, 1, &two, 1);
    k.views[1] = xv(1, EM_I64, 1, &two, 0);
    x_expect(&k, EM_ERR_ARG, "overlaps");
    /* out overlapping src */
    k.views[0] = xv(2, EM_I64, 1, &two, 0);
    k.views[1] = xv(1, EM_I64, 1, &two, 0);
    k.views[2] = xv(2, EM_I64, 1, &two, 0);
    x_expect(&k, EM_ERR_ARG, "overlaps");
    x_free();
}

/* gather whose contiguous out is written over a flipped index: out[0] lands on index[1], which
 * the kernel reads next. */
static void test_alias_gather(void **state) {
    (void)state;
    const int64_t ix[2] = {0, 0}, in[2] = {1 << 20, 1 << 20}, two = 2;
    x_buf(1, 16, ix);
    x_buf(2, 16, in);
    rw_kernel k = x_kernel(RW_K_GATHER, 0, 3);
    k.views[0] = xv(1, EM_I64, 1, &two, 0);
    k.views[1] = xv(2, EM_I64, 1, &two, 0);
    k.views[2] = xv(1, EM_I64, 1, &two, 1);
    k.views[2].strides[0] = -1;
    x_expect(&k, EM_ERR_ARG, "overlaps");
    /* index_select the same way */
    k = x_kernel(RW_K_INDEX_SELECT, 0, 3);
    k.views[0] = xv(1, EM_I64, 1, &two, 0);
    k.views[1] = xv(2, EM_I64, 1, &two, 0);
    k.views[2] = xv(1, EM_I64, 1, &two, 1);
    k.views[2].strides[0] = -1;
    x_expect(&k, EM_ERR_ARG, "overlaps");
    /* sort's two outputs in one place, and an output over its input */
    const int64_t four = 4;
    x_free();
    x_buf(1, 64, NULL);
    x_buf(2, 32, NULL);
    k = x_kernel(RW_K_SORT, 0, 3);
    k.views[0] = xv(1, EM_I64, 1, &four, 0);
    k.views[1] = xv(1, EM_I64, 1, &four, 2);
    k.views[2] = xv(2, EM_I64, 1, &four, 0);
    x_expect(&k, EM_ERR_ARG, "overlaps");
    k.views[1] = xv(2, EM_I64, 1, &four, 0);
    x_expect(&k, EM_ERR_ARG, "overlaps");
    /* matmul writing over an input */
    const int64_t sq[2] = {2, 2};
    k = x_kernel(RW_K_MATMUL, 0, 3);
    k.views[0] = xv(1, EM_F32, 2, sq, 0);
    k.views[1] = xv(1, EM_F32, 2, sq, 0);
    k.views[2] = xv(2, EM_F32, 2, sq, 0);
    x_expect(&k, EM_ERR_ARG, "overlaps");
    /* elementwise in place (out exactly an input) is how the core writes `_` ops: allowed */
    k = x_kernel(RW_K_BINARY, EM_BIN_ADD, 3);
    k.views[0] = xv(1, EM_F32, 1, &four, 0);
    k.views[1] = xv(1, EM_F32, 1, &four, 0);
    k.views[2] = xv(2, EM_F32, 1, &four, 0);
    x_expect(&k, EM_OK, NULL);
    /* ... but not shifted by one element */
    k.views[1] = xv(1, EM_F32, 1, &four, 1);
    x_expect(&k, EM_ERR_ARG, "overlaps");
    x_free();
}

/* Output dtypes and kinds against the inputs, for every slot that has a relation. */
/* the cumulative slot (cumprod / cummax / cummin): the indices exactly for max / min, i64, of
 * in's shape; values of in's dtype (cumprod of ints: i64); a dim in range; an output that
 * overlaps the input; then a good cummax runs with PyTorch's tie rule */
static void test_cumulative(void **state) {
    (void)state;
    const int64_t four = 4, two[2] = {2, 2};
    const float xin[4] = {1, 3, 3, 2};
    x_buf(1, 16, NULL);
    x_buf(2, 32, NULL);
    x_buf(3, 16, xin);
    x_buf(4, 32, NULL);
    rw_kernel k = x_kernel(RW_K_CUMULATIVE, EM_CUM_MAX, 3);
    k.views[0] = xv(1, EM_F32, 1, &four, 0);
    k.views[1] = xv(2, EM_I64, 1, &four, 0);
    k.views[2] = xv(3, EM_F32, 1, &four, 0);
    x_expect(&k, EM_OK, NULL);
    const int64_t *ix = xb.p[1];
    const float *vals = xb.p[0];
    assert_true(ix[0] == 0 && ix[1] == 1 && ix[2] == 2 && ix[3] == 2);
    assert_true(vals[3] == 3.0f);
    k.mask = 5; /* no indices */
    x_expect(&k, EM_ERR_ARG, "indices");
    k.mask = 7;
    k.sub = EM_CUM_PROD; /* indices given */
    x_expect(&k, EM_ERR_ARG, "indices");
    k.mask = 5;
    x_expect(&k, EM_OK, NULL);
    k.sub = EM_CUM_COUNT; /* no such op */
    x_expect(&k, -1, NULL);
    k.sub = EM_CUM_MIN;
    k.mask = 7;
    k.views[1].dtype = EM_I32;
    x_expect(&k, EM_ERR_DTYPE, NULL);
    k.views[1] = xv(2, EM_I64, 2, two, 0);
    x_expect(&k, EM_ERR_SHAPE, NULL);
    k.views[1] = xv(2, EM_I64, 1, &four, 0);
    k.views[0].dtype = EM_F64; /* 32 bytes would fit buffer 2, not 1 */
    x_expect(&k, -1, NULL);
    k.views[0] = xv(1, EM_F32, 1, &four, 0);
    k.ints[0] = 1;
    x_expect(&k, EM_ERR_ARG, "dim");
    k.ints[0] = -1;
    x_expect(&k, EM_ERR_ARG, "dim");
    k.ints[0] = 0;
    k.views[0] = xv(3, EM_F32, 1, &four, 0); /* values over the input */
    x_expect(&k, -1, NULL);
    /* cumprod of i32 writes i64 values; i32 values are refused */
    k = x_kernel(RW_K_CUMULATIVE, EM_CUM_PROD, 3);
    k.mask = 5;
    k.views[0] = xv(4, EM_I32, 1, &four, 0);
    k.views[2] = xv(3, EM_I32, 1, &four, 0);
    x_expect(&k, EM_ERR_DTYPE, NULL);
    k.views[0].dtype = EM_I64;
    x_expect(&k, EM_OK, NULL);
    k.views[2].dtype = EM_BOOL;
    x_expect(&k, EM_ERR_DTYPE, NULL);
    x_free();
}

static void test_dtypes(void **state) {
    (void)state;
    const int64_t sq[2] = {2, 2}, four = 4;
    x_buf(1, 256, NULL);
    x_buf(2, 256, NULL);
    x_buf(3, 256, NULL);
    x_buf(4, 256, NULL);
    /* matmul of u8 inputs into an f64 output (OpenBLAS read 8 bytes an element) */
    x_free();
    x_buf(1, 32, NULL);
    x_buf(2, 4, NULL);
    x_buf(3, 4, NULL);
    rw_kernel k = x_kernel(RW_K_MATMUL, 0, 3);
    k.views[0] = xv(1, EM_F64, 2, sq, 0);
    k.views[1] = xv(2, EM_U8, 2, sq, 0);
    k.views[2] = xv(3, EM_U8, 2, sq, 0);
    x_expect(&k, EM_ERR_DTYPE, NULL);
    /* conv2d of an i8 x into an f32 output */
    x_free();
    const int64_t xs[4] = {1, 1, 4, 4}, ws[4] = {1, 1, 3, 3}, os[4] = {1, 1, 2, 2};
    x_buf(1, 16, NULL);
    x_buf(2, 16, NULL);
    x_buf(3, 36, NULL);
    k = x_kernel(RW_K_CONV2D, 0, 3);
    k.views[0] = xv(1, EM_F32, 4, os, 0);
    k.views[1] = xv(2, EM_I8, 4, xs, 0);
    k.views[2] = xv(3, EM_F32, 4, ws, 0);
    const int64_t conv[9] = {1, 1, 0, 0, 1, 1, 0, 0, 1};
    memcpy(k.ints, conv, sizeof conv);
    x_expect(&k, EM_ERR_DTYPE, NULL);
    /* float-only ops on ints: pow, exp, softmax, mean; logical ops on non-bool */
    x_free();
    for (int i = 1; i <= 4; i++) x_buf(i, 64, NULL);
    k = x_kernel(RW_K_BINARY, EM_BIN_POW, 3);
    for (int i = 0; i < 3; i++) k.views[i] = xv((uint64_t)i + 1, EM_I64, 1, &four, 0);
    x_expect(&k, EM_ERR_DTYPE, "float");
    k = x_kernel(RW_K_BINARY_SCALAR, EM_BIN_POW, 2);
    for (int i = 0; i < 2; i++) k.views[i] = xv((uint64_t)i + 1, EM_I32, 1, &four, 0);
    k.doubles[0] = 1e300;
    x_expect(&k, EM_ERR_DTYPE, "float");
    k = x_kernel(RW_K_UNARY, EM_UN_EXP, 2);
    for (int i = 0; i < 2; i++) k.views[i] = xv((uint64_t)i + 1, EM_I64, 1, &four, 0);
    x_expect(&k, EM_ERR_DTYPE, "float");
    k = x_kernel(RW_K_SOFTMAX, 0, 2);
    for (int i = 0; i < 2; i++) k.views[i] = xv((uint64_t)i + 1, EM_I64, 1, &four, 0);
    x_expect(&k, EM_ERR_DTYPE, "float");
    k = x_kernel(RW_K_REDUCE, EM_RED_MEAN, 2);
    k.views[0] = xv(1, EM_I64, 0, NULL, 0);
    k.views[1] = xv(2, EM_I64, 1, &four, 0);
    k.ints[0] = -1;
    x_expect(&k, EM_ERR_DTYPE, "float");
    k = x_kernel(RW_K_BINARY, EM_BIN_AND, 3);
    for (int i = 0; i < 3; i++) k.views[i] = xv((uint64_t)i + 1, EM_F32, 1, &four, 0);
    x_expect(&k, EM_ERR_DTYPE, "bool");
    /* issue 14's ops: atan2 and softplus float-only, xor bool-only, isnan's output bool */
    k = x_kernel(RW_K_BINARY, EM_BIN_ATAN2, 3);
    for (int i = 0; i < 3; i++) k.views[i] = xv((uint64_t)i + 1, EM_I64, 1, &four, 0);
    x_expect(&k, EM_ERR_DTYPE, "float");
    k = x_kernel(RW_K_BINARY, EM_BIN_XOR, 3);
    for (int i = 0; i < 3; i++) k.views[i] = xv((uint64_t)i + 1, EM_BOOL, 1, &four, 0);
    k.views[1].dtype = EM_I32;
    x_expect(&k, EM_ERR_DTYPE, "bool");
    k = x_kernel(RW_K_UNARY, EM_UN_SOFTPLUS, 2);
    for (int i = 0; i < 2; i++) k.views[i] = xv((uint64_t)i + 1, EM_I32, 1, &four, 0);
    x_expect(&k, EM_ERR_DTYPE, "float");
    k = x_kernel(RW_K_UNARY, EM_UN_ISNAN, 2);
    for (int i = 0; i < 2; i++) k.views[i] = xv((uint64_t)i + 1, EM_F32, 1, &four, 0);
    x_expect(&k, EM_ERR_DTYPE, "bool"); /* a float output */
    k.views[0].dtype = EM_BOOL;
    x_expect(&k, EM_OK, NULL);
    k = x_kernel(RW_K_UNARY, EM_UN_NAN_TO_NUM, 2);
    for (int i = 0; i < 2; i++) k.views[i] = xv((uint64_t)i + 1, EM_F64, 1, &four, 0);
    k.doubles[0] = 1.0, k.doubles[1] = 2.0, k.doubles[2] = 3.0;
    x_expect(&k, EM_OK, NULL);
    /* outputs of the wrong dtype: unary f32 -> f64, comparison into f32, argmax into f32,
     * int sum into i32, where's cond not bool, sort's indices i32, gather into another dtype */
    k = x_kernel(RW_K_UNARY, EM_UN_NEG, 2);
    k.views[0] = xv(1, EM_F64, 1, &four, 0);
    k.views[1] = xv(2, EM_F32, 1, &four, 0);
    x_expect(&k, EM_ERR_DTYPE, NULL);
    k = x_kernel(RW_K_BINARY, EM_BIN_LT, 3);
    for (int i = 0; i < 3; i++) k.views[i] = xv((uint64_t)i + 1, EM_F32, 1, &four, 0);
    x_expect(&k, EM_ERR_DTYPE, "bool");
    k.views[0].dtype = EM_BOOL;
    x_expect(&k, EM_OK, NULL);
    k = x_kernel(RW_K_REDUCE, EM_RED_ARGMAX, 2);
    k.views[0] = xv(1, EM_F32, 0, NULL, 0);
    k.views[1] = xv(2, EM_F32, 1, &four, 0);
    k.ints[0] = -1;
    x_expect(&k, EM_ERR_DTYPE, "i64");
    k = x_kernel(RW_K_REDUCE, EM_RED_SUM, 2);
    k.views[0] = xv(1, EM_I32, 0, NULL, 0);
    k.views[1] = xv(2, EM_I32, 1, &four, 0);
    k.ints[0] = -1;
    x_expect(&k, EM_ERR_DTYPE, "i64");
    k = x_kernel(RW_K_WHERE, 0, 4);
    for (int i = 0; i < 4; i++) k.views[i] = xv((uint64_t)i + 1, EM_F32, 1, &four, 0);
    x_expect(&k, EM_ERR_DTYPE, "bool");
    k = x_kernel(RW_K_SORT, 0, 3);
    k.views[0] = xv(1, EM_F32, 1, &four, 0);
    k.views[1] = xv(2, EM_I32, 1, &four, 0);
    k.views[2] = xv(3, EM_F32, 1, &four, 0);
    x_expect(&k, EM_ERR_DTYPE, "i64");
    k = x_kernel(RW_K_GATHER, 0, 3);
    k.views[0] = xv(1, EM_F64, 1, &four, 0);
    k.views[1] = xv(2, EM_F32, 1, &four, 0);
    k.views[2] = xv(3, EM_I64, 1, &four, 0);
    x_expect(&k, EM_ERR_DTYPE, NULL);
    k = x_kernel(RW_K_RANDOM, EM_RAND_NORMAL, 1);
    k.views[0] = xv(1, EM_I32, 1, &four, 0);
    x_expect(&k, EM_ERR_DTYPE, "float");
    k = x_kernel(RW_K_ARANGE, 0, 1);
    k.views[0] = xv(1, EM_BOOL, 1, &four, 0);
    x_expect(&k, EM_ERR_DTYPE, NULL);
    x_free();
}

/* Views, empty ones too, inside their buffers with no overflow; outputs contiguous. */
static void test_views(void **state) {
    (void)state;
    const int64_t four = 4, zero = 0, sq[2] = {2, 2};
    x_buf(1, 16, NULL);
    x_buf(2, 16, NULL);
    x_buf(3, 16, NULL);
    /* an empty input far past its buffer, with an offset near 2^62 */
    rw_kernel k = x_kernel(RW_K_MATMUL, 0, 3);
    const int64_t a0[2] = {2, 0};
    k.views[0] = xv(1, EM_F32, 2, sq, 0);
    k.views[1] = xv(2, EM_F32, 2, a0, (int64_t)1 << 62);
    k.views[2] = xv(3, EM_F32, 2, (const int64_t[]){0, 2}, 0);
    x_expect(&k, EM_ERR_ARG, "outside");
    /* an empty view whose strides overflow */
    k = x_kernel(RW_K_UNARY, EM_UN_NEG, 2);
    k.views[0] = xv(1, EM_F32, 2, (const int64_t[]){0, 3}, 0);
    k.views[1] = xv(2, EM_F32, 2, (const int64_t[]){0, 3}, 0);
    k.views[1].strides[1] = INT64_MAX / 2;
    x_expect(&k, EM_ERR_ARG, NULL);
    /* an empty output at the buffer's end is fine (nothing runs), one past it is not */
    k.views[0] = xv(1, EM_F32, 1, &zero, 4);
    k.views[1] = xv(2, EM_F32, 1, &zero, 4);
    x_expect(&k, EM_OK, NULL);
    k.views[0].offset = 5;
    x_expect(&k, EM_ERR_ARG, "outside");
    /* a negative offset, an offset whose byte position overflows */
    k.views[0] = xv(1, EM_F32, 1, &four, -1);
    k.views[1] = xv(2, EM_F32, 1, &four, 0);
    x_expect(&k, EM_ERR_ARG, "outside");
    k.views[0].offset = INT64_MAX / 2;
    x_expect(&k, EM_ERR_ARG, "outside");
    /* a non-contiguous output (stride 0: four results into one element) */
    k.views[0] = xv(1, EM_F32, 1, &four, 0);
    k.views[0].strides[0] = 0;
    x_expect(&k, EM_ERR_ARG, "contiguous");
    k.views[0].strides[0] = -1;
    k.views[0].offset = 3;
    x_expect(&k, EM_ERR_ARG, "contiguous");
    /* ... except copy's, which may be any view */
    k = x_kernel(RW_K_COPY, 0, 2);
    k.views[0] = xv(1, EM_F32, 1, &four, 3);
    k.views[0].strides[0] = -1;
    k.views[1] = xv(2, EM_F32, 1, &four, 0);
    x_expect(&k, EM_OK, NULL);
    /* 0-d views where the core passes 1-d ones (softmax, cumsum, gather, sort) */
    k = x_kernel(RW_K_SOFTMAX, 0, 2);
    k.views[0] = xv(1, EM_F32, 0, NULL, 0);
    k.views[1] = xv(2, EM_F32, 0, NULL, 0);
    x_expect(&k, EM_ERR_ARG, "dim");
    k.slot = RW_K_CUMSUM;
    x_expect(&k, EM_ERR_ARG, "dim");
    k = x_kernel(RW_K_GATHER, 0, 3);
    k.views[0] = xv(1, EM_F32, 0, NULL, 0);
    k.views[1] = xv(2, EM_F32, 0, NULL, 0);
    k.views[2] = xv(3, EM_I64, 0, NULL, 0);
    x_expect(&k, EM_ERR_SHAPE, "dim");
    /* max over an empty dim has no identity */
    k = x_kernel(RW_K_REDUCE, EM_RED_MAX, 2);
    k.views[0] = xv(1, EM_F32, 2, (const int64_t[]){2, 1}, 0);
    k.views[1] = xv(2, EM_F32, 2, (const int64_t[]){2, 0}, 0);
    k.ints[0] = 1;
    x_expect(&k, EM_ERR_SHAPE, NULL);
    x_free();
    /* conv2d whose output is larger than the input and kernel allow (im2col past x) */
    const int64_t xs[4] = {1, 1, 4, 4}, ws[4] = {1, 1, 3, 3}, os[4] = {1, 1, 8, 8};
    x_buf(1, 256, NULL);
    x_buf(2, 64, NULL);
    x_buf(3, 36, NULL);
    k = x_kernel(RW_K_CONV2D, 0, 3);
    k.views[0] = xv(1, EM_F32, 4, os, 0);
    k.views[1] = xv(2, EM_F32, 4, xs, 0);
    k.views[2] = xv(3, EM_F32, 4, ws, 0);
    const int64_t conv[9] = {1, 1, 0, 0, 1, 1, 0, 0, 1};
    memcpy(k.ints, conv, sizeof conv);
    x_expect(&k, EM_ERR_SHAPE, NULL);
    k.views[0].shape[2] = k.views[0].shape[3] = 2;
    k.views[0].strides[0] = k.views[0].strides[1] = 4;
    k.views[0].strides[2] = 2;
    x_expect(&k, EM_OK, NULL);
    /* max_pool2d's output larger than the windows allow */
    k = x_kernel(RW_K_MAX_POOL2D, 0, 3);
    k.mask = 5; /* no indices */
    k.views[0] = xv(1, EM_F32, 4, (const int64_t[]){1, 1, 4, 4}, 0);
    k.views[2] = xv(2, EM_F32, 4, xs, 0);
    const int64_t pool[9] = {2, 2, 2, 2, 0, 0, 1, 1, 0};
    memcpy(k.ints, pool, sizeof pool);
    x_expect(&k, EM_ERR_SHAPE, NULL);
    x_free();
}

/* ---- buffers, budgets and the handshake queue (with the server's sockets) ---- */

static void raw_u64s(int fd, uint8_t type, int n, const uint64_t *v) {
    uint8_t b[24];
    for (int i = 0; i < n; i++) rw_store_le64(b + 8 * i, v[i]);
    assert_int_equal(raw_frame(fd, type, b, (size_t)n * 8), 0);
}

/* Sends SYNC; returns the status the server answers with (EM_OK for OK). */
static int raw_sync(int fd) {
    assert_int_equal(raw_frame(fd, RW_SYNC, NULL, 0), 0);
    rn_frame f = {0};
    int rc = rn_recv_frame(fd, &f, RW_MIN_MAX_MSG);
    int st = rc != 1 ? -1 : f.p[0] == RW_OK ? EM_OK : f.p[0] == RW_ERROR && f.len > 1 ? f.p[1] : -1;
    rn_frame_free(&f);
    return st;
}

/* Waits (up to 5 s) until only the good client is left (earlier tests' sockets are closed
 * asynchronously). */
static void only_good_left(void) {
    rw_stats st;
    for (int i = 0; i < 500; i++) {
        rs_stats(srv, &st);
        if (st.server_clients == 1) return;
        usleep(10000);
    }
    fail_msg("%llu clients left", (unsigned long long)st.server_clients);
}

/* A buffer fresh from the server reads as zeros, never as a previous client's bytes. */
static void test_fresh_buffers_zeroed(void **state) {
    (void)state;
    only_good_left();
    enum { N = 8192 };
    static uint8_t pat[N], got[N];
    memset(pat, 0xAB, sizeof pat);
    for (int round = 0; round < 4; round++) {
        int fd = raw_auth(port, TOKEN, RW_VERSION);
        assert_true(fd >= 0);
        raw_u64s(fd, RW_ALLOC, 2, (const uint64_t[]){1, N});
        uint8_t hdr[16];
        rw_store_le64(hdr, 1);
        rw_store_le64(hdr + 8, 0);
        uint8_t lenb[5];
        rw_store_le32(lenb, 1 + 16 + N);
        lenb[4] = RW_WRITE;
        assert_int_equal(rn_send2(fd, lenb, 5, hdr, 16), 0);
        assert_int_equal(rn_send_all(fd, pat, N), 0);
        raw_u64s(fd, RW_FREE, 1, (const uint64_t[]){1});
        assert_int_equal(raw_sync(fd), EM_OK);
        close(fd);
        fd = raw_auth(port, TOKEN, RW_VERSION);
        assert_true(fd >= 0);
        raw_u64s(fd, RW_ALLOC, 2, (const uint64_t[]){7, N});
        raw_u64s(fd, RW_READ, 3, (const uint64_t[]){7, 0, N});
        rn_frame f = {0};
        assert_int_equal(rn_recv_frame(fd, &f, RW_MIN_MAX_MSG), 1);
        assert_int_equal(f.p[0], RW_DATA);
        assert_int_equal(f.len, N + 1);
        memcpy(got, f.p + 1, N);
        rn_frame_free(&f);
        for (int i = 0; i < N; i++)
            if (got[i]) fail_msg("byte %d of a fresh buffer is 0x%02x", i, got[i]);
        close(fd);
    }
    good_still_works();
}

static rs_server *start_cfg(rs_config cfg, int *p) {
    rs_server *s = NULL;
    assert_int_equal(rs_start(&cfg, &s), EM_OK);
    *p = rs_port(s);
    return s;
}

/* --max-total-bytes: a cap over all clients beside each one's --max-bytes. */
static void test_total_bytes(void **state) {
    (void)state;
    int p;
    rs_config cfg = {.listen = "127.0.0.1:0", .token = TOKEN, .max_bytes = 1u << 20,
                     .max_total_bytes = 3u << 19, .max_clients = 4};
    cfg.device = (em_device){EM_BACKEND_CPU, 0, false, EM_CKPT_NONE};
    rs_server *s = start_cfg(cfg, &p);
    int a = raw_auth(p, TOKEN, RW_VERSION), b = raw_auth(p, TOKEN, RW_VERSION);
    assert_true(a >= 0 && b >= 0);
    raw_u64s(a, RW_ALLOC, 2, (const uint64_t[]){1, 1u << 20});
    assert_int_equal(raw_sync(a), EM_OK);
    raw_u64s(b, RW_ALLOC, 2, (const uint64_t[]){1, 1u << 20}); /* 2 MiB in all: refused */
    assert_int_equal(raw_sync(b), EM_ERR_NOMEM);
    raw_u64s(b, RW_ALLOC, 2, (const uint64_t[]){2, 1u << 19}); /* 1.5 MiB: fits */
    assert_int_equal(raw_sync(b), EM_OK);
    raw_u64s(a, RW_FREE, 1, (const uint64_t[]){1});
    assert_int_equal(raw_sync(a), EM_OK); /* a's thread has freed it */
    raw_u64s(b, RW_ALLOC, 2, (const uint64_t[]){1, 1u << 19});
    assert_int_equal(raw_sync(b), EM_OK);
    close(a);
    close(b);
    assert_true(raw_wait_idle(s));
    rs_stop(s);
}

/* Connections that never authenticate cannot keep an authenticated client out: they have
 * their own small budget (the oldest gives way to a new one) and a short timeout, and do not
 * count against max_clients. */
static void test_preauth_budget(void **state) {
    (void)state;
    int p;
    rs_config cfg = {.listen = "127.0.0.1:0", .token = TOKEN, .max_clients = 2, .max_pending = 4,
                     .handshake_timeout_s = 5};
    cfg.device = (em_device){EM_BACKEND_CPU, 0, false, EM_CKPT_NONE};
    rs_server *s = start_cfg(cfg, &p);
    char a[64];
    snprintf(a, sizeof a, "127.0.0.1:%d", p);
    int silent[24];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 24; i++) silent[i] = raw_open(p); /* hold the handshake queue */
        usleep(50000);
        em_device d;
        assert_int_equal(em_remote_connect(a, TOKEN, &d), EM_OK);
        em_tensor *t;
        const int64_t n = 4;
        assert_int_equal(em_zeros(&n, 1, EM_F32, d, &t), EM_OK);
        float got[4] = {1, 1, 1, 1};
        assert_int_equal(em_tensor_to_data(t, got, sizeof got), EM_OK);
        assert_true(got[0] == 0);
        em_tensor_release(t);
        assert_int_equal(em_remote_disconnect(d), EM_OK);
        for (int i = 0; i < 24; i++) close(silent[i]);
    }
    /* max_clients still bounds the authenticated ones (once the last client is gone) */
    rw_stats st;
    for (int i = 0; i < 500; i++) {
        rs_stats(s, &st);
        if (st.server_clients == 0) break;
        usleep(10000);
    }
    int c1 = raw_auth(p, TOKEN, RW_VERSION), c2 = raw_auth(p, TOKEN, RW_VERSION);
    assert_true(c1 >= 0 && c2 >= 0);
    em_device d;
    assert_int_equal(em_remote_connect(a, TOKEN, &d), EM_ERR_STATE);
    assert_non_null(strstr(em_last_error(), "full"));
    close(c1);
    close(c2);
    assert_true(raw_wait_idle(s));
    rs_stop(s);
}

/* The reproductions over the wire, against the shared server, while the good client works:
 * each is refused (an error at the next SYNC), the connection goes on, and everything the
 * hostile client held is given back when it leaves. */
static void test_hostile_kernels_over_wire(void **state) {
    (void)state;
    rw_stats base;
    only_good_left();
    good_still_works();
    assert_int_equal(em_remote_sync(good), EM_OK);
    rs_stats(srv, &base);
    int fd = raw_auth(port, TOKEN, RW_VERSION);
    assert_true(fd >= 0);
    raw_u64s(fd, RW_ALLOC, 2, (const uint64_t[]){1, 16});
    raw_u64s(fd, RW_ALLOC, 2, (const uint64_t[]){2, 16});
    raw_u64s(fd, RW_ALLOC, 2, (const uint64_t[]){3, 32});
    const int64_t ix[2] = {1, 0}, src[2] = {4096, 7}, two = 2, sq[2] = {2, 2};
    uint8_t hdr[16];
    uint8_t lenb[5];
    for (int b = 0; b < 2; b++) {
        rw_store_le64(hdr, (uint64_t)b + 1);
        rw_store_le64(hdr + 8, 0);
        rw_store_le32(lenb, 1 + 16 + 16);
        lenb[4] = RW_WRITE;
        assert_int_equal(rn_send2(fd, lenb, 5, hdr, 16), 0);
        assert_int_equal(rn_send_all(fd, b ? (const void *)src : (const void *)ix, 16), 0);
    }
    assert_int_equal(raw_sync(fd), EM_OK);
    rw_kernel ks[4];
    ks[0] = x_kernel(RW_K_SCATTER_ADD, 0, 3);
    ks[0].views[0] = xv(1, EM_I64, 1, &two, 0);
    ks[0].views[1] = xv(1, EM_I64, 1, &two, 0);
    ks[0].views[2] = xv(2, EM_I64, 1, &two, 0);
    ks[1] = x_kernel(RW_K_GATHER, 0, 3);
    ks[1].views[0] = xv(1, EM_I64, 1, &two, 0);
    ks[1].views[1] = xv(2, EM_I64, 1, &two, 0);
    ks[1].views[2] = xv(1, EM_I64, 1, &two, 1);
    ks[1].views[2].strides[0] = -1;
    ks[2] = x_kernel(RW_K_MATMUL, 0, 3);
    ks[2].views[0] = xv(3, EM_F64, 2, sq, 0);
    ks[2].views[1] = xv(1, EM_U8, 2, sq, 0);
    ks[2].views[2] = xv(2, EM_U8, 2, sq, 0);
    ks[3] = x_kernel(RW_K_BINARY, EM_BIN_POW, 3);
    for (int i = 0; i < 3; i++) ks[3].views[i] = xv((uint64_t)i + 1, EM_I64, 1, &two, 0);
    for (int round = 0; round < 50; round++) {
        rw_writer w = {0};
        rw_encode_kernel(&w, &ks[round % 4]);
        assert_false(w.failed);
        assert_int_equal(rn_send_all(fd, w.p, w.len), 0);
        rw_writer_free(&w);
        assert_int_not_equal(raw_sync(fd), EM_OK);
        if (round % 10 == 0) good_still_works();
    }
    /* the buffers are untouched: the index still reads [1, 0] */
    raw_u64s(fd, RW_READ, 3, (const uint64_t[]){1, 0, 16});
    rn_frame f = {0};
    assert_int_equal(rn_recv_frame(fd, &f, RW_MIN_MAX_MSG), 1);
    assert_int_equal(f.p[0], RW_DATA);
    assert_memory_equal(f.p + 1, ix, 16);
    rn_frame_free(&f);
    close(fd);
    good_still_works();
    assert_int_equal(em_remote_sync(good), EM_OK);
    rw_stats st;
    for (int i = 0; i < 500; i++) {
        rs_stats(srv, &st);
        if (st.server_bytes == base.server_bytes && st.server_clients == base.server_clients) break;
        usleep(10000);
    }
    assert_int_equal(st.server_bytes, base.server_bytes);
    assert_int_equal(st.device_in_use, base.device_in_use);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_before_auth),
        cmocka_unit_test(test_malformed_after_auth),
        cmocka_unit_test(test_gone_mid_write),
        cmocka_unit_test(test_random_frames),
        cmocka_unit_test(test_client_limit),
        cmocka_unit_test(test_alias_scatter_add),
        cmocka_unit_test(test_alias_gather),
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_cumulative),
        cmocka_unit_test(test_views),
        cmocka_unit_test(test_fresh_buffers_zeroed),
        cmocka_unit_test(test_total_bytes),
        cmocka_unit_test(test_preauth_budget),
        cmocka_unit_test(test_hostile_kernels_over_wire),
    };
    const char *only = getenv("EMBER_TEST_FILTER"); /* e.g. "test_alias*" */
    if (only) cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, setup, teardown);
}
#else
#include <stdio.h>
int main(void) {
    puts("skipped: this build has no remote backend");
    return 77;
}
#endif
