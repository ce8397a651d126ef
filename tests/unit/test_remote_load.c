/*
 * test_remote_load.c — 16 clients at once on one in-process server (hosting `ref`), each on
 * its own thread and connection with a bounded loop of ops and reads checked against values
 * computed here; then a client process killed (SIGKILL) in the middle of a transfer. After
 * the clients leave, the server holds no buffers and the hosted device's memory is back to
 * where it was.
 */
#ifdef EMBER_WITH_REMOTE
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "ember/ember.h"
#include "ember/remote.h"
#include "remote_raw.h"

#define TOKEN "load-token"
#define CLIENTS 16
#define ITERS 25
#define N 16

static rs_server *srv;
static char addr[64];

typedef struct worker {
    int id, errors;
    char first[300];
} worker;

static void note(worker *w, const char *what) {
    if (w->errors++ == 0) snprintf(w->first, sizeof w->first, "client %d: %s (%s)", w->id, what, em_last_error());
}

static void *client_main(void *arg) {
    worker *w = arg;
    em_device dev;
    if (em_remote_connect(addr, TOKEN, &dev) != EM_OK) {
        note(w, "connect");
        return NULL;
    }
    const int64_t shape[2] = {N, N};
    float a[N * N], b[N * N], want[N * N], got[N * N], sum = 0, want_sum;
    for (int it = 0; it < ITERS; it++) {
        for (int i = 0; i < N * N; i++) {
            a[i] = (float)((i * 7 + it + w->id) % 5) - 2;
            b[i] = (float)((i * 3 + w->id) % 4) - 1;
        }
        /* want = relu(a @ b), want_sum = sum(want), in exact small integers */
        want_sum = 0;
        for (int i = 0; i < N; i++)
            for (int j = 0; j < N; j++) {
                float acc = 0;
                for (int k = 0; k < N; k++) acc += a[i * N + k] * b[k * N + j];
                want[i * N + j] = acc > 0 ? acc : 0;
                want_sum += want[i * N + j];
            }
        em_tensor *ta = NULL, *tb = NULL, *m = NULL, *r = NULL, *s = NULL;
        if (em_tensor_from_data(a, EM_F32, shape, 2, dev, &ta) != EM_OK ||
            em_tensor_from_data(b, EM_F32, shape, 2, dev, &tb) != EM_OK ||
            em_matmul(ta, tb, &m) != EM_OK || em_relu(m, &r) != EM_OK || em_sum(r, &s) != EM_OK) {
            note(w, "ops");
        } else {
            em_tensor *const ts[2] = {r, s};
            void *const dsts[2] = {got, &sum};
            const size_t sizes[2] = {sizeof got, sizeof sum};
            if (em_read_many(ts, 2, dsts, sizes) != EM_OK) note(w, "read");
            else if (memcmp(got, want, sizeof got) != 0 || sum != want_sum) note(w, "wrong values");
        }
        em_tensor_release(ta);
        em_tensor_release(tb);
        em_tensor_release(m);
        em_tensor_release(r);
        em_tensor_release(s);
    }
    if (em_remote_disconnect(dev) != EM_OK) note(w, "disconnect");
    return NULL;
}

static void test_sixteen_clients(void **state) {
    (void)state;
    rw_stats before, after;
    rs_stats(srv, &before);
    pthread_t th[CLIENTS];
    worker ws[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        ws[i] = (worker){.id = i};
        assert_int_equal(pthread_create(&th[i], NULL, client_main, &ws[i]), 0);
    }
    for (int i = 0; i < CLIENTS; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < CLIENTS; i++)
        if (ws[i].errors) fail_msg("%d errors, first: %s", ws[i].errors, ws[i].first);
    assert_true(raw_wait_idle(srv));
    rs_stats(srv, &after);
    assert_int_equal(after.device_in_use, before.device_in_use);
}

static void test_client_killed_mid_transfer(void **state) {
    (void)state;
    rw_stats before, after;
    assert_true(raw_wait_idle(srv));
    rs_stats(srv, &before);
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* the child: allocates 8 MiB on the server, starts writing it, then waits to die */
        int fd = raw_auth(rs_port(srv), TOKEN, RW_VERSION);
        if (fd < 0) _exit(1);
        uint8_t a[16];
        rw_store_le64(a, 1);
        rw_store_le64(a + 8, 8u << 20);
        raw_frame(fd, RW_ALLOC, a, 16);
        uint8_t hdr[21];
        rw_store_le32(hdr, RW_WRITE_HEADER + (8u << 20));
        hdr[4] = RW_WRITE;
        rw_store_le64(hdr + 5, 1);
        rw_store_le64(hdr + 13, 0);
        static uint8_t part[1u << 20];
        rn_send2(fd, hdr, sizeof hdr, part, sizeof part);
        if (write(pipefd[1], "r", 1) != 1) _exit(1);
        for (;;) pause();
    }
    char c;
    assert_int_equal(read(pipefd[0], &c, 1), 1);
    rw_stats mid;
    for (int i = 0; i < 500; i++) {
        rs_stats(srv, &mid);
        if (mid.server_bytes >= (8u << 20)) break;
        usleep(10000);
    }
    assert_true(mid.server_bytes >= (8u << 20));
    assert_int_equal(mid.server_clients, 1);
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
    close(pipefd[0]);
    close(pipefd[1]);
    assert_true(raw_wait_idle(srv));
    rs_stats(srv, &after);
    assert_int_equal(after.device_in_use, before.device_in_use);
}

static int setup(void **state) {
    (void)state;
    rs_config cfg = {.listen = "127.0.0.1:0", .token = TOKEN, .max_bytes = 1u << 30};
    cfg.device = (em_device){EM_BACKEND_REF, 0, false, EM_CKPT_NONE};
    if (rs_start(&cfg, &srv) != EM_OK) return -1;
    snprintf(addr, sizeof addr, "127.0.0.1:%d", rs_port(srv));
    return 0;
}

static int teardown(void **state) {
    (void)state;
    rs_stop(srv);
    return 0;
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sixteen_clients),
        cmocka_unit_test(test_client_killed_mid_transfer),
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
