/*
 * test_remote.c — the remote backend against an in-process server (hosting `ref`) on
 * loopback: ops and transfers, em_read_many, pipelined errors reported at sync with the op's
 * name, disconnect, wrong tokens, limits, and memory back to baseline after clients leave.
 * test_remote_abuse.c sends malformed traffic; test_remote_load.c runs many clients.
 */
#ifdef EMBER_WITH_REMOTE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "backends/remote/net.h"
#include "backends/remote/server.h"
#include "ember/backend.h"
#include "ember/ember.h"
#include "ember/remote.h"

#define TOKEN "correct horse battery staple"

static rs_server *srv, *small_srv;
static char addr[64], small_addr[64];

static int setup(void **state) {
    (void)state;
    rs_config cfg = {.listen = "127.0.0.1:0", .token = TOKEN, .max_bytes = 1u << 30};
    cfg.device = (em_device){EM_BACKEND_REF, 0, false, EM_CKPT_NONE};
    if (rs_start(&cfg, &srv) != EM_OK) return -1;
    snprintf(addr, sizeof addr, "127.0.0.1:%d", rs_port(srv));
    /* a second server: cpu+autodiff, 4 KiB and 8 buffers a client */
    rs_config small = cfg;
    small.device = (em_device){EM_BACKEND_CPU, 0, true, EM_CKPT_BALANCED};
    small.max_bytes = 4096;
    small.max_tensors = 8;
    if (rs_start(&small, &small_srv) != EM_OK) return -1;
    snprintf(small_addr, sizeof small_addr, "127.0.0.1:%d", rs_port(small_srv));
    return 0;
}

static int teardown(void **state) {
    (void)state;
    rs_stop(srv);
    rs_stop(small_srv);
    return 0;
}

/* Waits (up to 5 s) until the server has no clients and holds no buffers. */
static void wait_idle(rs_server *s) {
    rw_stats st;
    for (int i = 0; i < 500; i++) {
        rs_stats(s, &st);
        if (st.server_clients == 0 && st.server_bytes == 0) return;
        usleep(10000);
    }
    fail_msg("server not idle: %llu clients, %llu bytes", (unsigned long long)st.server_clients,
             (unsigned long long)st.server_bytes);
}

static void test_ops_and_transfers(void **state) {
    (void)state;
    rw_stats before;
    wait_idle(srv);
    rs_stats(srv, &before);
    em_device dev;
    assert_int_equal(em_remote_connect(addr, TOKEN, &dev), EM_OK);
    assert_int_equal(dev.backend, EM_BACKEND_REMOTE);
    assert_false(dev.autodiff);
    char name[64];
    assert_int_equal(em_device_name(dev, name, sizeof name), EM_OK);
    em_device parsed;
    assert_int_equal(em_device_parse(name, &parsed), EM_OK);
    assert_true(em_device_equal(parsed, dev));

    const float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {10, 20, 30, 40, 50, 60};
    const int64_t shape[2] = {2, 3};
    em_tensor *ta, *tb, *tc, *tt, *ts;
    assert_int_equal(em_tensor_from_data(a, EM_F32, shape, 2, dev, &ta), EM_OK);
    assert_int_equal(em_tensor_from_data(b, EM_F32, shape, 2, dev, &tb), EM_OK);
    assert_int_equal(em_add(ta, tb, &tc), EM_OK);
    assert_int_equal(em_transpose(tc, 0, 1, &tt), EM_OK); /* a strided view */
    assert_int_equal(em_sum(tc, &ts), EM_OK);
    float c[6], t[6], s = 0, local[3];
    /* a cpu tensor among them: read on its own */
    em_tensor *tl;
    em_device cpu = {EM_BACKEND_CPU, 0, false, EM_CKPT_NONE};
    const int64_t three = 3;
    assert_int_equal(em_tensor_from_data(a, EM_F32, &three, 1, cpu, &tl), EM_OK);
    em_tensor *const ts4[4] = {tc, tt, ts, tl};
    void *const dsts[4] = {c, t, &s, local};
    const size_t sizes[4] = {sizeof c, sizeof t, sizeof s, sizeof local};
    assert_int_equal(em_read_many(ts4, 4, dsts, sizes), EM_OK);
    for (int i = 0; i < 6; i++) assert_float_equal(c[i], a[i] + b[i], 0);
    const float want_t[6] = {11, 44, 22, 55, 33, 66};
    for (int i = 0; i < 6; i++) assert_float_equal(t[i], want_t[i], 0);
    assert_float_equal(s, 231, 0);
    assert_float_equal(local[2], 3, 0);
    /* a buffer too small: nothing read */
    const size_t small[4] = {sizeof c, sizeof t - 1, sizeof s, sizeof local};
    assert_int_equal(em_read_many(ts4, 4, dsts, small), EM_ERR_ARG);
    assert_non_null(strstr(em_last_error(), "em_read_many"));

    /* a large transfer, in chunks both ways */
    const int64_t big = 3 << 20; /* 12 MiB of f32 */
    float *x = malloc((size_t)big * sizeof *x), *y = malloc((size_t)big * sizeof *y);
    assert_non_null(x);
    assert_non_null(y);
    for (int64_t i = 0; i < big; i++) x[i] = (float)(i % 1000);
    em_tensor *tx, *tx2;
    assert_int_equal(em_tensor_from_data(x, EM_F32, &big, 1, dev, &tx), EM_OK);
    assert_int_equal(em_mul_scalar(tx, 2.0, &tx2), EM_OK);
    assert_int_equal(em_tensor_to_data(tx2, y, (size_t)big * sizeof *y), EM_OK);
    for (int64_t i = 0; i < big; i += 4099) assert_float_equal(y[i], 2 * x[i], 0);
    em_memory_stats ms;
    assert_int_equal(em_device_memory(dev, &ms), EM_OK);
    assert_true(ms.bytes_in_use >= 2 * (size_t)big * sizeof(float));
    em_remote_stats rst;
    assert_int_equal(em_remote_server_stats(dev, &rst), EM_OK);
    assert_int_equal(rst.client_bytes, ms.bytes_in_use);
    assert_int_equal(rst.server_clients, 1);
    free(x);
    free(y);

    /* to and from another device */
    em_tensor *back, *there;
    assert_int_equal(em_to_device(tc, cpu, &back), EM_OK);
    assert_int_equal(em_to_device(back, dev, &there), EM_OK);
    assert_int_equal(em_remote_sync(dev), EM_OK);

    /* disconnect: tensors fail cleanly, releasing them is fine */
    assert_int_equal(em_remote_disconnect(dev), EM_OK);
    assert_int_equal(em_remote_disconnect(dev), EM_ERR_STATE);
    em_tensor *bad = NULL;
    assert_int_equal(em_add(ta, tb, &bad), EM_ERR_STATE);
    assert_null(bad);
    assert_non_null(strstr(em_last_error(), "disconnected"));
    assert_int_equal(em_tensor_to_data(tc, c, sizeof c), EM_ERR_STATE);
    assert_int_equal(em_remote_sync(dev), EM_ERR_STATE);
    em_tensor *all[] = {ta, tb, tc, tt, ts, tl, tx, tx2, back, there};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) em_tensor_release(all[i]);
    /* the server freed everything of the connection */
    wait_idle(srv);
    rw_stats after;
    rs_stats(srv, &after);
    assert_int_equal(after.device_in_use, before.device_in_use);
}

static void test_pipelined_error(void **state) {
    (void)state;
    em_device dev;
    assert_int_equal(em_remote_connect(addr, TOKEN, &dev), EM_OK);
    const em_backend_ops *ops = em_backend_get(EM_BACKEND_REMOTE);
    void *ctx;
    assert_int_equal(ops->open(dev.index, &ctx), EM_OK);
    void *b1, *b2;
    assert_int_equal(ops->alloc(ctx, 16, &b1), EM_OK);
    assert_int_equal(ops->alloc(ctx, 16, &b2), EM_OK);
    /* a view reaching past its 16-byte buffer: accepted here, refused by the server */
    em_view out = {b1, EM_F32, 1, {4}, {1}, 0}, in = {b2, EM_F32, 1, {4}, {2}, 0};
    assert_int_equal(ops->unary(ctx, EM_UN_NEG, &out, &in, NULL), EM_OK);
    /* a second failure is not the one reported */
    em_view in2 = {b2, EM_F32, 1, {5}, {1}, 0};
    assert_int_equal(ops->copy(ctx, &out, &in2), EM_OK);
    assert_int_equal(em_remote_sync(dev), EM_ERR_BACKEND);
    assert_non_null(strstr(em_last_error(), "remote: unary: "));
    assert_non_null(strstr(em_last_error(), "outside buffer"));
    /* reported once; the connection goes on */
    assert_int_equal(em_remote_sync(dev), EM_OK);
    /* a failure is also reported by the next read */
    em_view mm = {b1, EM_F32, 2, {2, 2}, {2, 1}, 0}, bad = {b2, EM_F32, 2, {3, 1}, {1, 1}, 0};
    assert_int_equal(ops->matmul(ctx, &mm, &mm, &bad), EM_OK);
    float got[4];
    assert_int_equal(ops->read(ctx, b1, 0, got, sizeof got), EM_ERR_BACKEND);
    assert_non_null(strstr(em_last_error(), "remote: matmul: "));
    assert_int_equal(ops->read(ctx, b1, 0, got, sizeof got), EM_OK);
    /* an unknown buffer and indices out of range */
    em_view idx = {b2, EM_I64, 1, {2}, {1}, 0}, src = {b1, EM_F32, 1, {4}, {1}, 0};
    em_view dst = {b1, EM_F32, 1, {2}, {1}, 0};
    float nine[4] = {9, 9, 9, 9};
    assert_int_equal(ops->write(ctx, b2, 0, nine, sizeof nine), EM_OK); /* bits of 9.0f */
    assert_int_equal(ops->index_select(ctx, &dst, &src, 0, &idx), EM_OK);
    assert_int_equal(em_remote_sync(dev), EM_ERR_BACKEND);
    assert_non_null(strstr(em_last_error(), "index_select: index"));
    ops->free(ctx, b1);
    ops->free(ctx, b2);
    assert_int_equal(em_remote_sync(dev), EM_OK);
    assert_int_equal(em_remote_disconnect(dev), EM_OK);
    wait_idle(srv);
}

static void test_wrong_token_and_bad_args(void **state) {
    (void)state;
    em_device dev = {EM_BACKEND_REF, 0, false, EM_CKPT_NONE};
    const em_device untouched = dev;
    assert_int_equal(em_remote_connect(addr, "wrong token", &dev), EM_ERR_AUTH);
    assert_true(em_device_equal(dev, untouched));
    assert_non_null(strstr(em_last_error(), "refused the token"));
    assert_int_equal(em_remote_connect(addr, TOKEN " ", &dev), EM_ERR_AUTH);
    assert_int_equal(em_remote_connect(addr, "", &dev), EM_ERR_ARG);
    assert_int_equal(em_remote_connect(addr, NULL, &dev), EM_ERR_ARG);
    assert_int_equal(em_remote_connect(NULL, TOKEN, &dev), EM_ERR_ARG);
    assert_int_equal(em_remote_connect(addr, TOKEN, NULL), EM_ERR_ARG);
    assert_int_equal(em_remote_connect("no-port", TOKEN, &dev), EM_ERR_ARG);
    assert_int_equal(em_remote_connect("127.0.0.1:99999", TOKEN, &dev), EM_ERR_ARG);
    assert_int_equal(em_remote_connect("127.0.0.1:1", TOKEN, &dev), EM_ERR_IO);
    em_device notremote = {EM_BACKEND_CPU, 0, false, EM_CKPT_NONE};
    assert_int_equal(em_remote_disconnect(notremote), EM_ERR_DEVICE);
    em_remote_stats st;
    assert_int_equal(em_remote_server_stats(notremote, &st), EM_ERR_DEVICE);
    assert_true(em_device_equal(dev, untouched));
    wait_idle(srv);
}

static void test_limits_and_autodiff(void **state) {
    (void)state;
    em_device dev;
    assert_int_equal(em_remote_connect(small_addr, TOKEN, &dev), EM_OK);
    /* the hosted device is cpu+autodiff:balanced: so is the remote one */
    assert_true(dev.autodiff);
    assert_int_equal(dev.checkpointing, EM_CKPT_BALANCED);
    const int64_t n = 2048; /* 8 KiB of f32 > 4 KiB */
    em_tensor *t = NULL;
    assert_int_equal(em_zeros(&n, 1, EM_F32, dev, &t), EM_ERR_NOMEM);
    assert_null(t);
    assert_non_null(strstr(em_last_error(), "remote"));
    /* gradients on the remote device */
    const float xv[3] = {1, 2, 3};
    const int64_t three = 3;
    em_tensor *x, *y, *loss;
    em_grads *g;
    assert_int_equal(em_tensor_from_data(xv, EM_F32, &three, 1, dev, &x), EM_OK);
    assert_int_equal(em_tensor_require_grad(x), EM_OK);
    assert_int_equal(em_mul(x, x, &y), EM_OK);
    assert_int_equal(em_sum(y, &loss), EM_OK);
    assert_int_equal(em_backward(loss, &g), EM_OK);
    em_tensor *gx;
    assert_int_equal(em_grads_get(g, x, &gx), EM_OK);
    float gv[3];
    assert_int_equal(em_tensor_to_data(gx, gv, sizeof gv), EM_OK);
    for (int i = 0; i < 3; i++) assert_float_equal(gv[i], 2 * xv[i], 0);
    em_tensor_release(gx);
    em_grads_release(g);
    em_tensor_release(loss);
    em_tensor_release(y);
    em_tensor_release(x);
    /* eight buffers at most: the ninth alloc fails synchronously */
    em_tensor *many[9] = {0};
    const int64_t one = 1;
    int made = 0;
    em_status s = EM_OK;
    for (; made < 9 && s == EM_OK; made++) s = em_zeros(&one, 1, EM_F32, dev, &many[made]);
    assert_int_equal(s, EM_ERR_NOMEM);
    assert_true(made <= 9);
    for (int i = 0; i < 9; i++) em_tensor_release(many[i]);
    assert_int_equal(em_remote_disconnect(dev), EM_OK);
    wait_idle(small_srv);
}

/* ---- fake servers: the client must not trust what is not an ember-server ---- */

typedef struct fake {
    int lfd, mode; /* 0: garbage greeting, 1: a welcome with a wrong MAC, 2: other version */
    pthread_t th;
} fake;

static void *fake_main(void *arg) {
    fake *f = arg;
    int fd = accept(f->lfd, NULL, NULL);
    if (fd < 0) return NULL;
    rw_writer w = {0};
    if (f->mode == 0) {
        size_t start = rw_begin(&w, RW_HELLO);
        rw_put_bytes(&w, "HTTP/1.1 200 OK\r\n", 17);
        rw_end(&w, start);
    } else {
        uint8_t ch[RW_NONCE_BYTES] = {1, 2, 3};
        size_t start = rw_begin(&w, RW_HELLO);
        rw_put_bytes(&w, RW_MAGIC, 4);
        rw_put_u16(&w, f->mode == 2 ? RW_VERSION + 1 : RW_VERSION);
        rw_put_u16(&w, 0);
        rw_put_bytes(&w, ch, sizeof ch);
        rw_end(&w, start);
    }
    rn_send_all(fd, w.p, w.len);
    rn_frame fr = {0};
    if (f->mode == 1 && rn_recv_frame(fd, &fr, RW_MAX_PREAUTH) == 1) {
        /* accept anything, and "prove" the token with zeros */
        rw_welcome wl = {.max_msg = RW_DEFAULT_MAX_MSG, .slots = ~0u};
        snprintf(wl.name, sizeof wl.name, "cpu");
        w.len = 0;
        rw_encode_welcome(&w, &wl);
        rn_send_all(fd, w.p, w.len);
    }
    rn_frame_free(&fr);
    rw_writer_free(&w);
    char c;
    rn_recv_all(fd, &c, 1); /* until the client hangs up */
    close(fd);
    return NULL;
}

static void test_fake_servers(void **state) {
    (void)state;
    const em_status want[3] = {EM_ERR_PROTOCOL, EM_ERR_AUTH, EM_ERR_PROTOCOL};
    const char *msg[3] = {"not an ember-server", "could not prove", "version"};
    for (int mode = 0; mode < 3; mode++) {
        fake f = {.mode = mode};
        int port = 0;
        char err[100], a[64];
        f.lfd = rn_listen("127.0.0.1:0", &port, err, sizeof err);
        assert_true(f.lfd >= 0);
        assert_int_equal(pthread_create(&f.th, NULL, fake_main, &f), 0);
        snprintf(a, sizeof a, "127.0.0.1:%d", port);
        em_device dev;
        assert_int_equal(em_remote_connect(a, TOKEN, &dev), want[mode]);
        assert_non_null(strstr(em_last_error(), msg[mode]));
        pthread_join(f.th, NULL);
        close(f.lfd);
    }
}

/* ---- a scripted server: how replies are cut into TCP segments is not the client's business:
 * a reply that trickles in byte by byte, and several replies (a small one and one larger than
 * the client's receive buffer) in one segment, are taken apart exactly ---- */

static void fill_pattern(uint8_t *p, size_t n, uint64_t id, uint64_t off) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(id * 31 + off + i * 7);
}

static void *scripted_main(void *arg) {
    fake *f = arg;
    int fd = accept(f->lfd, NULL, NULL);
    if (fd < 0) return NULL;
    rw_writer w = {0};
    uint8_t ch[RW_NONCE_BYTES] = {9, 8, 7};
    size_t start = rw_begin(&w, RW_HELLO);
    rw_put_bytes(&w, RW_MAGIC, 4);
    rw_put_u16(&w, RW_VERSION);
    rw_put_u16(&w, 0);
    rw_put_bytes(&w, ch, sizeof ch);
    rw_end(&w, start);
    rn_send_all(fd, w.p, w.len);
    rn_frame fr = {0};
    if (rn_recv_frame(fd, &fr, RW_MAX_PREAUTH) == 1 && fr.len == 73) {
        rw_welcome wl = {.max_msg = RW_DEFAULT_MAX_MSG, .slots = ~0u};
        snprintf(wl.name, sizeof wl.name, "cpu");
        rn_mac(wl.mac, TOKEN, strlen(TOKEN), "ember-server-v1", fr.p + 9, ch);
        w.len = 0;
        rw_encode_welcome(&w, &wl);
        rn_send_all(fd, w.p, w.len);
        w.len = 0; /* replies to READs, sent together once three are pending */
        int syncs = 0, reads = 0;
        while (rn_recv_frame(fd, &fr, RW_DEFAULT_MAX_MSG) == 1 && fr.p[0] != RW_BYE) {
            if (fr.p[0] == RW_READ && fr.len == 25) {
                uint64_t id = rw_le64(fr.p + 1), off = rw_le64(fr.p + 9), n = rw_le64(fr.p + 17);
                start = rw_begin(&w, RW_DATA);
                uint8_t *tmp = malloc(n ? n : 1);
                fill_pattern(tmp, n, id, off);
                rw_put_bytes(&w, tmp, n);
                free(tmp);
                rw_end(&w, start);
                if (++reads == 3) { /* the em_read_many group: three replies, one send */
                    rn_send_all(fd, w.p, w.len);
                    w.len = 0;
                    reads = 0;
                }
            } else if (fr.p[0] == RW_SYNC) {
                const uint8_t ok[5] = {1, 0, 0, 0, RW_OK};
                if (syncs++ == 0) { /* the first one byte by byte */
                    for (int i = 0; i < 5; i++) {
                        rn_send_all(fd, ok + i, 1);
                        usleep(2000);
                    }
                } else {
                    rn_send_all(fd, ok, 5);
                }
            }
        }
    }
    rn_frame_free(&fr);
    rw_writer_free(&w);
    close(fd);
    return NULL;
}

static void test_replies_cut_anyhow(void **state) {
    (void)state;
    fake f = {0};
    int port = 0;
    char err[100], a[64];
    f.lfd = rn_listen("127.0.0.1:0", &port, err, sizeof err);
    assert_true(f.lfd >= 0);
    assert_int_equal(pthread_create(&f.th, NULL, scripted_main, &f), 0);
    snprintf(a, sizeof a, "127.0.0.1:%d", port);
    em_device dev;
    assert_int_equal(em_remote_connect(a, TOKEN, &dev), EM_OK);
    assert_int_equal(em_remote_sync(dev), EM_OK); /* OK in 5 segments */
    const int64_t small_n = 3, big_n = 24 << 10; /* 12 bytes and 96 KiB */
    em_tensor *t1, *t2, *t3;
    assert_int_equal(em_zeros(&small_n, 1, EM_F32, dev, &t1), EM_OK);
    assert_int_equal(em_zeros(&big_n, 1, EM_F32, dev, &t2), EM_OK);
    assert_int_equal(em_zeros(&small_n, 1, EM_F32, dev, &t3), EM_OK);
    /* three reads, their replies in one send */
    em_tensor *const ts[3] = {t1, t2, t3};
    uint8_t *got[3], *want[3];
    size_t sz[3] = {12, 96u << 10, 12};
    for (int i = 0; i < 3; i++) {
        got[i] = calloc(1, sz[i]);
        want[i] = malloc(sz[i]);
        assert_non_null(got[i]);
        assert_non_null(want[i]);
    }
    assert_int_equal(em_read_many(ts, 3, (void *const *)got, sz), EM_OK);
    /* ids: 1, 2, 3 in the order of the allocs */
    for (int i = 0; i < 3; i++) {
        fill_pattern(want[i], sz[i], (uint64_t)i + 1, 0);
        assert_memory_equal(got[i], want[i], sz[i]);
    }
    assert_int_equal(em_remote_sync(dev), EM_OK);
    for (int i = 0; i < 3; i++) {
        free(got[i]);
        free(want[i]);
        em_tensor_release(ts[i]);
    }
    assert_int_equal(em_remote_disconnect(dev), EM_OK);
    pthread_join(f.th, NULL);
    close(f.lfd);
}

/* A server hosting cpu gives the memory its caching allocator kept for a client back when
 * the last client leaves: its memory returns to where it was, not to a high-water mark. */
static void test_cache_drained_when_clients_leave(void **state) {
    (void)state;
    em_device cpu = {EM_BACKEND_CPU, 0, false, EM_CKPT_NONE};
    rs_config cfg = {.listen = "127.0.0.1:0", .token = TOKEN, .max_bytes = 1u << 30};
    cfg.device = cpu;
    rs_server *s = NULL;
    assert_int_equal(rs_start(&cfg, &s), EM_OK);
    char a[64];
    snprintf(a, sizeof a, "127.0.0.1:%d", rs_port(s));
    for (int round = 0; round < 2; round++) {
        em_device dev;
        assert_int_equal(em_remote_connect(a, TOKEN, &dev), EM_OK);
        const int64_t shape[2] = {1024, 1024}; /* 4 MiB a tensor */
        em_tensor *x = NULL, *y = NULL;
        assert_int_equal(em_rand_uniform(shape, 2, EM_F32, 0, 1, 1, dev, &x), EM_OK);
        assert_int_equal(em_exp(x, &y), EM_OK);
        assert_int_equal(em_remote_sync(dev), EM_OK);
        em_tensor_release(x);
        em_tensor_release(y);
        assert_int_equal(em_remote_disconnect(dev), EM_OK);
        wait_idle(s);
        em_memory_stats ms = {0};
        for (int i = 0; i < 500; i++) { /* the connection's thread drains after it frees */
            assert_int_equal(em_device_memory(cpu, &ms), EM_OK);
            if (ms.bytes_cached == 0) break;
            usleep(10000);
        }
        assert_int_equal(ms.bytes_cached, 0);
    }
    rs_stop(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fake_servers),
        cmocka_unit_test(test_replies_cut_anyhow),
        cmocka_unit_test(test_ops_and_transfers),
        cmocka_unit_test(test_pipelined_error),
        cmocka_unit_test(test_wrong_token_and_bad_args),
        cmocka_unit_test(test_limits_and_autodiff),
        cmocka_unit_test(test_cache_drained_when_clients_leave),
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
