/*
 * fuzz_remote_exec.c — libFuzzer target that decodes and executes a hostile client's messages
 * against an in-process cpu server: the server's kernel engine (rs_exec_kernel) with the cpu
 * backend's real kernels (OpenBLAS, im2col, its thread pool), on four buffers that are
 * exact-size heap blocks (cpu buffers are host pointers), so that ASan sees any access outside
 * them. Whatever the server's checks let through must stay inside the buffers, with no UB.
 *
 * Input: four size bytes (buffer i has size * 16 bytes, 0..4080), then up to 48 records
 * `u8 op, u8 len_lo, u8 len_hi, payload[len]`:
 *   op % 4 == 0: a KERNEL body (after the type byte): decoded, then run when it decodes;
 *   op % 4 == 1: a WRITE: u8 id, u16 offset, then the bytes (dropped unless they fit, as the
 *                server drops them);
 *   op % 4 == 2: a FREE and a new ALLOC of the id: u8 id, u8 size (zeroed, as the server does);
 *   op % 4 == 3: every byte of buffer id set to one value: u8 id, u8 value.
 * Kernels run in order on the same buffers, so that one's output is the next one's index.
 * The quantized calls (protocol version 3) run too: their q8 / q4 block views, schemes and
 * values are checked as the server checks them, and the cpu backend's quantized kernels (ref's
 * where it has none) run on what passes (seeds ok_quant*, bound_quant*).
 * Bounded work: views above 2^16 elements and pool windows or conv strides/dilations above 64
 * are skipped (an authenticated client may ask for much compute and memory; that is a limit,
 * not a memory-safety question).
 *
 * EMBER_FUZZ_VERBOSE=1 prints each kernel's outcome (to see what a seed exercises).
 *
 * Build: cmake -DEMBER_BUILD_FUZZ=ON -DCMAKE_C_COMPILER=clang; run:
 *   fuzz_remote_exec -max_total_time=20 NEW_CORPUS_DIR tests/fuzz/corpus/remote_exec
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/remote/server.h"
#include "wire/wire.h"
#include "ember/backend.h"

typedef struct fz_conn {
    void *bufs[4];
    size_t sizes[4];
} fz_conn;

static bool fz_lookup(void *conn, uint64_t id, void **buf, size_t *bytes) {
    fz_conn *c = conn;
    if (id < 1 || id > 4) return false;
    *buf = c->bufs[id - 1];
    *bytes = c->sizes[id - 1];
    return true;
}

static void fz_alloc(fz_conn *c, int i, size_t n) {
    free(c->bufs[i]);
    c->sizes[i] = n;
    c->bufs[i] = malloc(n ? n : 1);
    if (!c->bufs[i]) abort();
    memset(c->bufs[i], 0, n);
}

/* Bounds the work (not the safety: the server checks that): views of at most 2^16 elements
 * (a broadcast view of 2^60 fits any buffer, and a kernel that copies it runs out of memory,
 * as it would on a local device), windows of at most 64. */
static bool fz_bounded(const rw_kernel *k) {
    for (int i = 0; i < RW_MAX_VIEWS; i++) {
        if (!(k->mask & (1u << i))) continue;
        int64_t n = 1;
        for (int d = 0; d < k->views[i].rank; d++) {
            if (k->views[i].shape[d] > (1 << 16)) return false;
            n *= k->views[i].shape[d];
            if (n > (1 << 16)) return false;
        }
    }
    if (k->slot >= RW_K_CONV2D && k->slot <= RW_K_AVG_POOL2D_BACKWARD &&
        k->slot != RW_K_ADAPTIVE_AVG_POOL2D)
        for (int i = 0; i < 8; i++)
            if (k->ints[i] > 64) return false;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const em_backend_ops *ops;
    static rs_host h;
    static bool verbose;
    if (!ops) {
        verbose = getenv("EMBER_FUZZ_VERBOSE") != NULL; /* each kernel's outcome on stderr */
        ops = em_backend_get(EM_BACKEND_CPU);
        if (!ops || ops->open(0, &h.ctx) != EM_OK) abort();
        h.ops = ops;
    }
    if (size < 4) return 0;
    fz_conn c = {{0}, {0}};
    for (int i = 0; i < 4; i++) fz_alloc(&c, i, (size_t)data[i] * 16);
    size_t p = 4;
    for (int rec = 0; rec < 48 && p + 3 <= size; rec++) {
        int op = data[p] & 3;
        size_t len = (size_t)data[p + 1] | (size_t)data[p + 2] << 8;
        p += 3;
        if (len > size - p) len = size - p;
        const uint8_t *b = data + p;
        p += len;
        if (op == 0) {
            rw_kernel k;
            char why[160], msg[600];
            if (!rw_decode_kernel(b, len, &k, why, sizeof why) || !fz_bounded(&k)) continue;
            msg[0] = 0;
            em_status s = rs_exec_kernel(&h, fz_lookup, &c, &k, msg, sizeof msg);
            if (s != EM_OK && !msg[0]) abort(); /* a refusal says why */
            if (verbose) fprintf(stderr, "%s: %s\n", rw_slots[k.slot].name, s == EM_OK ? "ran" : msg);
        } else if (op == 1 && len >= 3) {
            int id = b[0] & 3;
            size_t off = (size_t)b[1] | (size_t)b[2] << 8, n = len - 3;
            if (off <= c.sizes[id] && n <= c.sizes[id] - off) memcpy((char *)c.bufs[id] + off, b + 3, n);
        } else if (op == 2 && len >= 2) {
            fz_alloc(&c, b[0] & 3, (size_t)b[1] * 16);
        } else if (op == 3 && len >= 2) {
            memset(c.bufs[b[0] & 3], b[1], c.sizes[b[0] & 3]);
        }
    }
    for (int i = 0; i < 4; i++) free(c.bufs[i]);
    return 0;
}
