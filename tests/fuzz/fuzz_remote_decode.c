/*
 * fuzz_remote_decode.c — libFuzzer target for the remote protocol's decoders and the server's
 * checks. Input: one mode byte, four buffer-size bytes, then a message body.
 *   mode & 3 == 0: rw_decode_kernel alone (a RW_KERNEL body after its type byte);
 *   mode & 3 == 1: rw_decode_welcome;
 *   otherwise:     rw_decode_kernel, and when it accepts, rs_exec_kernel on the ref backend
 *                  with buffers 1..4 of (size byte * 8) bytes, allocated exactly (ASan sees
 *                  any access outside them): whatever the checks let through must stay inside
 *                  the buffers. Views of more than 2^16 elements are skipped (time, not safety).
 * A decoded kernel must re-encode to the same bytes. Nothing may crash or leak.
 * The quantized calls (seeds quantize, dequantize, qmatmul) are the only ones whose views may
 * be q8 / q4 block views; their schemes and block bounds are checked before ref's kernels run.
 *
 * Build: cmake -DEMBER_BUILD_FUZZ=ON -DCMAKE_C_COMPILER=clang; run:
 *   fuzz_remote_decode -max_total_time=30 NEW_CORPUS_DIR tests/fuzz/corpus/remote_decode
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/remote/server.h"
#include "wire/wire.h"
#include "ember/backend.h"

typedef struct fake_conn {
    void *bufs[4];
    size_t sizes[4];
} fake_conn;

static bool fake_lookup(void *conn, uint64_t id, void **buf, size_t *bytes) {
    fake_conn *c = conn;
    if (id < 1 || id > 4) return false;
    *buf = c->bufs[id - 1];
    *bytes = c->sizes[id - 1];
    return true;
}

static bool small(const rw_kernel *k) {
    for (int i = 0; i < RW_MAX_VIEWS; i++) {
        if (!(k->mask & (1u << i))) continue;
        int64_t n = 1;
        for (int d = 0; d < k->views[i].rank; d++) {
            if (k->views[i].shape[d] > (1 << 16)) return false;
            n *= k->views[i].shape[d];
            if (n > (1 << 16)) return false;
        }
    }
    /* conv / pool windows and layer_norm rows bound the work too */
    if (k->slot >= RW_K_CONV2D && k->slot <= RW_K_AVG_POOL2D_BACKWARD && k->slot != RW_K_ADAPTIVE_AVG_POOL2D)
        for (int i = 0; i < 8; i++)
            if (k->ints[i] > 64) return false;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 5) return 0;
    int mode = data[0] & 3;
    const uint8_t *body = data + 5;
    size_t n = size - 5;
    if (mode == 1) {
        rw_welcome wl;
        (void)rw_decode_welcome(body, n, &wl);
        return 0;
    }
    rw_kernel k;
    char why[160];
    if (!rw_decode_kernel(body, n, &k, why, sizeof why)) {
        if (!why[0]) abort(); /* a refusal says why */
        return 0;
    }
    rw_writer w = {0};
    rw_encode_kernel(&w, &k);
    if (w.failed || w.len != n + 5 || memcmp(w.p + 5, body, n) != 0) abort();
    rw_writer_free(&w);
    if (mode == 0 || !small(&k)) return 0;
    const em_backend_ops *ops = em_backend_get(EM_BACKEND_REF);
    rs_host h = {ops, NULL, false, NULL};
    if (ops->open(0, &h.ctx) != EM_OK) abort();
    fake_conn c;
    for (int i = 0; i < 4; i++) {
        c.sizes[i] = (size_t)data[1 + i] * 8;
        c.bufs[i] = malloc(c.sizes[i] ? c.sizes[i] : 1);
        if (!c.bufs[i]) abort();
        memset(c.bufs[i], 0, c.sizes[i]);
    }
    char msg[600];
    (void)rs_exec_kernel(&h, fake_lookup, &c, &k, msg, sizeof msg);
    for (int i = 0; i < 4; i++) free(c.bufs[i]);
    return 0;
}
