/*
 * test_remote_quant.c — quantized tensors on remote devices (protocol version 3: the
 * quantize, dequantize and qmatmul calls). Through the public API on servers hosting `ref`
 * and `cpu`, against the hosted device run locally: every scheme quantized, read back and
 * dequantized with its bytes, em_matmul
 * with quantized weights (x @ W and x @ W^T, int8 @ int8), block views (slices, flips,
 * transposes), and block tensors moved cpu -> remote -> cpu byte for byte. Then hostile
 * quantized calls in raw frames: bad schemes, views that cut blocks or reach outside their
 * buffer, non-finite values for the int8 kernels, bad operand pairs; each is refused with
 * its status and message, the connection goes on, and nothing the hostile client held is
 * left behind. Last, a capture device given quantized ops fails cleanly.
 */
#ifdef EMBER_WITH_REMOTE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ember/ember.h"
#include "ember/graph.h"
#include "ember/remote.h"
#include "../unit/remote_raw.h"

#define TOKEN "q8 and q4 over the wire"

static rs_server *srv_ref, *srv_cpu;
static int port_ref;
static em_device dev_ref, dev_cpu; /* remote devices hosted by ref and by cpu */
static const em_device REF = {EM_BACKEND_REF, 0, false, EM_CKPT_NONE};
static const em_device CPU = {EM_BACKEND_CPU, 0, false, EM_CKPT_NONE};

static int setup(void **state) {
    (void)state;
    rs_config cfg = {.listen = "127.0.0.1:0", .token = TOKEN, .max_bytes = 64u << 20,
                     .max_msg = RW_MIN_MAX_MSG, .max_clients = 8, .handshake_timeout_s = 2};
    cfg.device = REF;
    if (rs_start(&cfg, &srv_ref) != EM_OK) return -1;
    cfg.device = (em_device){EM_BACKEND_CPU, 0, false, EM_CKPT_NONE};
    if (rs_start(&cfg, &srv_cpu) != EM_OK) return -1;
    port_ref = rs_port(srv_ref);
    char a[64];
    snprintf(a, sizeof a, "127.0.0.1:%d", port_ref);
    if (em_remote_connect(a, TOKEN, &dev_ref) != EM_OK) return -1;
    snprintf(a, sizeof a, "127.0.0.1:%d", rs_port(srv_cpu));
    return em_remote_connect(a, TOKEN, &dev_cpu) == EM_OK ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    em_remote_disconnect(dev_ref);
    em_remote_disconnect(dev_cpu);
    bool idle = raw_wait_idle(srv_ref) && raw_wait_idle(srv_cpu);
    rs_stop(srv_ref);
    rs_stop(srv_cpu);
    return idle ? 0 : -1;
}

#define OK(call)                                                                              \
    do {                                                                                      \
        em_status s_ = (call);                                                                \
        if (s_ != EM_OK) fail_msg("%s: %s (%s)", #call, em_status_name(s_), em_last_error()); \
    } while (0)

/* ---- through the public API, against ref ---- */

static const em_quant_scheme SCHEMES[] = {
    {.storage = EM_Q8, .kind = EM_QK_AFFINE},
    {.storage = EM_Q4, .kind = EM_QK_AFFINE},
    {.storage = EM_Q8, .kind = EM_QK_SYMMETRIC},
    {.storage = EM_Q8, .kind = EM_QK_BLOCK, .scale_dtype = EM_F32},
    {.storage = EM_Q8, .kind = EM_QK_BLOCK, .scale_dtype = EM_F16},
    {.storage = EM_Q4, .kind = EM_QK_BLOCK, .scale_dtype = EM_F32},
    {.storage = EM_Q4, .kind = EM_QK_BLOCK, .scale_dtype = EM_F16},
    {.storage = EM_Q4, .kind = EM_QK_BLOCK_MIN, .scale_dtype = EM_F32},
    {.storage = EM_Q4, .kind = EM_QK_BLOCK_MIN, .scale_dtype = EM_F16},
};
#define NSCHEMES (sizeof SCHEMES / sizeof SCHEMES[0])

static void fill_data(float *x, int n, int seed) {
    for (int i = 0; i < n; i++)
        x[i] = (float)(sin(0.37 * i + seed) * 3.0 + (i % 7 == 0 ? 0.5 * seed : 0.0));
}

/* A float tensor of shape on dev from deterministic data. */
static em_tensor *floats(const int64_t *shape, int rank, int seed, em_device dev) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++) n *= shape[d];
    float *x = malloc((size_t)n * sizeof *x);
    assert_non_null(x);
    fill_data(x, (int)n, seed);
    em_tensor *t;
    OK(em_tensor_from_data(x, EM_F32, shape, rank, dev, &t));
    free(x);
    return t;
}

/* The bytes em_tensor_to_data gives (the contiguous form of any view); caller frees. */
static uint8_t *bytes_of(const em_tensor *t, size_t *n) {
    if (em_tensor_kind(t) == EM_KIND_QUANTIZED) {
        em_quant_scheme s;
        OK(em_tensor_scheme(t, &s));
        OK(em_quant_nbytes(&s, em_tensor_shape(t), em_tensor_rank(t), n));
    } else {
        *n = (size_t)em_tensor_numel(t) * em_dtype_size(em_tensor_dtype(t));
    }
    uint8_t *p = malloc(*n ? *n : 1);
    assert_non_null(p);
    OK(em_tensor_to_data(t, p, *n));
    return p;
}

/* t (remote) holds exactly r's bytes (ref), with the same dtype, shape and scheme. */
static void same_bytes(const em_tensor *t, const em_tensor *r, const char *what) {
    assert_int_equal(em_tensor_dtype(t), em_tensor_dtype(r));
    assert_int_equal(em_tensor_rank(t), em_tensor_rank(r));
    assert_memory_equal(em_tensor_shape(t), em_tensor_shape(r),
                        (size_t)em_tensor_rank(t) * sizeof(int64_t));
    if (em_tensor_kind(r) == EM_KIND_QUANTIZED) {
        em_quant_scheme a, b;
        OK(em_tensor_scheme(t, &a));
        OK(em_tensor_scheme(r, &b));
        assert_true(a.storage == b.storage && a.kind == b.kind && a.scale == b.scale &&
                    a.zero_point == b.zero_point && a.scale_dtype == b.scale_dtype &&
                    a.axis == b.axis);
    }
    size_t n, m;
    uint8_t *p = bytes_of(t, &n), *q = bytes_of(r, &m);
    assert_int_equal(n, m);
    if (memcmp(p, q, n) != 0) fail_msg("%s: the remote bytes differ from ref's", what);
    free(p);
    free(q);
}

/* Quantizes x (on dev, a remote device, and on host, the device its server hosts) with
 * scheme i; dequantizes; the products with the weights it makes; views of them. The server
 * runs host's kernels: every result has host's bytes. */
static void quant_case(em_device dev, em_device host, size_t i) {
    char what[96];
    const em_quant_scheme *sc = &SCHEMES[i];
    const bool blocks = sc->kind == EM_QK_BLOCK || sc->kind == EM_QK_BLOCK_MIN;
    const int64_t ws[2] = {6, 64}, xs[2] = {3, 64}, x2s[2] = {3, 6};
    em_tensor *w_r = floats(ws, 2, (int)i, host), *w_d = floats(ws, 2, (int)i, dev);
    em_tensor *q_r, *q_d;
    OK(em_quantize_as(w_r, sc, &q_r));
    OK(em_quantize_as(w_d, sc, &q_d));
    snprintf(what, sizeof what, "scheme %zu: quantize", i);
    same_bytes(q_d, q_r, what); /* the contract's quantization is exact */
    em_tensor *f_r, *f_d;
    OK(em_dequantize(q_r, &f_r));
    OK(em_dequantize(q_d, &f_d));
    snprintf(what, sizeof what, "scheme %zu: dequantize", i);
    same_bytes(f_d, f_r, what);
    /* x @ W^T: W [6, 64] quantized by rows, blocks along the reduction (the int8 product) */
    em_tensor *x_r = floats(xs, 2, 7, host), *x_d = floats(xs, 2, 7, dev);
    em_tensor *qt_r, *qt_d, *y_r, *y_d;
    OK(em_transpose(q_r, 0, 1, &qt_r));
    OK(em_transpose(q_d, 0, 1, &qt_d));
    OK(em_matmul(x_r, qt_r, &y_r));
    OK(em_matmul(x_d, qt_d, &y_d));
    snprintf(what, sizeof what, "scheme %zu: x @ W^T", i);
    same_bytes(y_d, y_r, what);
    em_tensor_release(y_r);
    em_tensor_release(y_d);
    /* x2 @ W: blocks along N (a @ real(b) in f32) */
    em_tensor *x2_r = floats(x2s, 2, 9, host), *x2_d = floats(x2s, 2, 9, dev);
    OK(em_matmul(x2_r, q_r, &y_r));
    OK(em_matmul(x2_d, q_d, &y_d));
    snprintf(what, sizeof what, "scheme %zu: x @ W", i);
    same_bytes(y_d, y_r, what);
    em_tensor_release(y_r);
    em_tensor_release(y_d);
    /* block-preserving views: rows 1..4 flipped, then dequantized */
    em_tensor *s_r, *s_d, *v_r, *v_d;
    const int fdim = 0;
    OK(em_slice(q_r, 0, 1, 5, 1, &s_r));
    OK(em_slice(q_d, 0, 1, 5, 1, &s_d));
    OK(em_flip(s_r, &fdim, 1, &v_r));
    OK(em_flip(s_d, &fdim, 1, &v_d));
    em_tensor_release(f_r);
    em_tensor_release(f_d);
    OK(em_dequantize(v_r, &f_r));
    OK(em_dequantize(v_d, &f_d));
    snprintf(what, sizeof what, "scheme %zu: dequantize a flipped slice", i);
    same_bytes(f_d, f_r, what);
    same_bytes(v_d, v_r, what); /* the view's contiguous bytes */
    /* int8 @ int8: q8 symmetric and q8 blocks, both operands quantized */
    if (sc->storage == EM_Q8 && (sc->kind != EM_QK_AFFINE)) {
        em_tensor *qa_r, *qa_d;
        OK(em_quantize_as(x_r, sc, &qa_r));
        OK(em_quantize_as(x_d, sc, &qa_d));
        OK(em_matmul(qa_r, qt_r, &y_r));
        OK(em_matmul(qa_d, qt_d, &y_d));
        snprintf(what, sizeof what, "scheme %zu: int8 @ int8", i);
        same_bytes(y_d, y_r, what);
        em_tensor_release(y_r);
        em_tensor_release(y_d);
        em_tensor_release(qa_r);
        em_tensor_release(qa_d);
    }
    (void)blocks;
    em_tensor *ts[] = {w_r, w_d, q_r, q_d, f_r, f_d, x_r, x_d, qt_r, qt_d, x2_r, x2_d,
                       s_r, s_d, v_r, v_d};
    for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) em_tensor_release(ts[k]);
}

static void test_schemes_match_ref(void **state) {
    (void)state;
    for (size_t i = 0; i < NSCHEMES; i++) {
        quant_case(dev_ref, REF, i);
        quant_case(dev_cpu, CPU, i);
    }
}

/* A block tensor moves cpu -> remote -> cpu byte for byte; from its bytes too. */
static void test_to_device_round_trip(void **state) {
    (void)state;
    const em_device cpu = CPU;
    const int64_t shape[3] = {2, 3, 64};
    for (size_t i = 0; i < NSCHEMES; i++) {
        em_tensor *x = floats(shape, 3, (int)i + 3, cpu), *q, *r, *back, *t;
        OK(em_quantize_as(x, &SCHEMES[i], &q));
        OK(em_to_device(q, dev_ref, &r));
        assert_true(em_device_equal(em_tensor_device(r), dev_ref));
        OK(em_to_device(r, cpu, &back));
        same_bytes(r, q, "cpu -> remote");
        same_bytes(back, q, "cpu -> remote -> cpu");
        em_tensor *r2, *v, *v2;
        OK(em_to_device(r, dev_cpu, &r2)); /* from one server to another */
        same_bytes(r2, q, "remote -> remote");
        em_tensor_release(r2);
        const int fdim = 1; /* a flipped view moves as its contiguous bytes */
        OK(em_flip(r, &fdim, 1, &v));
        OK(em_to_device(v, cpu, &v2));
        same_bytes(v2, v, "a flipped remote view -> cpu");
        em_tensor_release(v);
        em_tensor_release(v2);
        /* and from its bytes, on the remote device */
        size_t n;
        uint8_t *b = bytes_of(q, &n);
        em_quant_scheme s;
        OK(em_tensor_scheme(q, &s));
        OK(em_tensor_from_quantized(b, n, &s, shape, 3, dev_cpu, &t));
        same_bytes(t, q, "from its bytes");
        free(b);
        em_tensor *ts[] = {x, q, r, back, t};
        for (size_t k = 0; k < 5; k++) em_tensor_release(ts[k]);
    }
    OK(em_remote_sync(dev_ref));
    OK(em_remote_sync(dev_cpu));
}

/* On a server hosting ref+autodiff: the gradient of sum(x @ W^T) flows to x through the
 * quantized weight (qmatmul's blocks-along-N form, over the wire), as on ref+autodiff. */
static void test_autodiff_through_quantized_weight(void **state) {
    (void)state;
    rs_server *s;
    rs_config cfg = {.listen = "127.0.0.1:0", .token = TOKEN, .max_bytes = 64u << 20};
    cfg.device = (em_device){EM_BACKEND_REF, 0, true, EM_CKPT_DISABLED};
    OK(rs_start(&cfg, &s));
    char a[64];
    snprintf(a, sizeof a, "127.0.0.1:%d", rs_port(s));
    em_device rdev;
    OK(em_remote_connect(a, TOKEN, &rdev));
    assert_true(rdev.autodiff);
    const em_device devs[2] = {cfg.device, rdev};
    const int64_t ws[2] = {5, 64}, xs[2] = {3, 64};
    em_tensor *g[2];
    for (int d = 0; d < 2; d++) {
        em_tensor *w = floats(ws, 2, 4, devs[d]), *x = floats(xs, 2, 5, devs[d]), *q, *qt, *y, *l;
        OK(em_tensor_require_grad(x));
        OK(em_quantize_as(w, &SCHEMES[5], &q)); /* q4 blocks */
        OK(em_transpose(q, 0, 1, &qt));
        OK(em_matmul(x, qt, &y));
        OK(em_sum(y, &l));
        em_grads *gr;
        OK(em_backward(l, &gr));
        OK(em_grads_get(gr, x, &g[d]));
        em_grads_release(gr);
        em_tensor *ts[] = {w, x, q, qt, y, l};
        for (size_t k = 0; k < 6; k++) em_tensor_release(ts[k]);
    }
    same_bytes(g[1], g[0], "the gradient through a quantized weight");
    em_tensor_release(g[0]);
    em_tensor_release(g[1]);
    OK(em_remote_disconnect(rdev));
    assert_true(raw_wait_idle(s));
    rs_stop(s);
}

/* ---- hostile quantized calls in raw frames ---- */

static void raw_u64s(int fd, uint8_t type, int n, const uint64_t *v) {
    rw_writer w = {0};
    size_t start = rw_begin(&w, type);
    for (int i = 0; i < n; i++) rw_put_u64(&w, v[i]);
    rw_end(&w, start);
    assert_int_equal(rn_send_all(fd, w.p, w.len), 0);
    rw_writer_free(&w);
}

static void raw_write(int fd, uint64_t id, uint64_t off, const void *p, size_t n) {
    uint8_t hdr[16], lenb[5];
    rw_store_le64(hdr, id);
    rw_store_le64(hdr + 8, off);
    rw_store_le32(lenb, (uint32_t)(1 + 16 + n));
    lenb[4] = RW_WRITE;
    assert_int_equal(rn_send2(fd, lenb, 5, hdr, 16), 0);
    assert_int_equal(rn_send_all(fd, p, n), 0);
}

/* SYNC: the status of the first failure since the last one (EM_OK: none), its message in
 * msg; -1 when the connection ends. */
static int raw_sync_msg(int fd, char *msg, size_t cap) {
    rw_writer w = {0};
    size_t start = rw_begin(&w, RW_SYNC);
    rw_end(&w, start);
    int rc = rn_send_all(fd, w.p, w.len);
    rw_writer_free(&w);
    if (rc != 0) return -1;
    rn_frame f = {0};
    rc = rn_recv_frame(fd, &f, RW_MIN_MAX_MSG);
    msg[0] = 0;
    int st = -1;
    if (rc == 1 && f.p[0] == RW_OK) st = EM_OK;
    if (rc == 1 && f.p[0] == RW_ERROR && f.len >= 4) {
        size_t n = (size_t)f.p[2] | (size_t)f.p[3] << 8;
        n = n < f.len - 4 ? n : f.len - 4;
        n = n < cap - 1 ? n : cap - 1;
        memcpy(msg, f.p + 4, n);
        msg[n] = 0;
        st = f.p[1];
    }
    rn_frame_free(&f);
    return st;
}

static rw_view rv(uint64_t id, em_dtype dt, int rank, const int64_t *shape, int64_t offset) {
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

static rw_kernel rk(rw_slot slot, int nviews) {
    rw_kernel k;
    memset(&k, 0, sizeof k);
    k.slot = slot;
    k.mask = (uint8_t)((1u << nviews) - 1);
    return k;
}

/* A scheme's wire fields into k's ints / doubles at scheme `which`. */
static void put_scheme(rw_kernel *k, int which, const em_quant_scheme *s) {
    rw_scheme_put(s, k->ints + which * RW_SCHEME_INTS, &k->doubles[which]);
}

/* Sends k, then a SYNC: the status must be want and the message hold `has`. */
static void expect_refused(int fd, const rw_kernel *k, int want, const char *has, int line) {
    rw_writer w = {0};
    rw_encode_kernel(&w, k);
    assert_false(w.failed);
    assert_int_equal(rn_send_all(fd, w.p, w.len), 0);
    rw_writer_free(&w);
    char msg[1100];
    int st = raw_sync_msg(fd, msg, sizeof msg);
    if (st != want)
        fail_msg("line %d: status %d (%s), wanted %s", line, st, msg,
                 em_status_name((em_status)want));
    if (want != EM_OK && has && !strstr(msg, has))
        fail_msg("line %d: message \"%s\" lacks \"%s\"", line, msg, has);
    if (want != EM_OK && strncmp(msg, rw_slots[k->slot].name, strlen(rw_slots[k->slot].name)) != 0)
        fail_msg("line %d: message \"%s\" does not name %s", line, msg, rw_slots[k->slot].name);
}
#define REFUSED(k, st, has) expect_refused(fd, &(k), (st), (has), __LINE__)

static void test_hostile_quant_calls(void **state) {
    (void)state;
    rw_stats base;
    OK(em_remote_sync(dev_ref));
    rs_stats(srv_ref, &base);
    int fd = raw_auth(port_ref, TOKEN, RW_VERSION);
    assert_true(fd >= 0);
    /* 1: 1 KiB of f32 x; 2: four q8 blocks with f32 scales (144 bytes); 3: 256 bytes;
     * 4: 64 bytes */
    raw_u64s(fd, RW_ALLOC, 2, (const uint64_t[]){1, 1024});
    raw_u64s(fd, RW_ALLOC, 2, (const uint64_t[]){2, 144});
    raw_u64s(fd, RW_ALLOC, 2, (const uint64_t[]){3, 256});
    raw_u64s(fd, RW_ALLOC, 2, (const uint64_t[]){4, 64});
    float x[256];
    fill_data(x, 256, 1);
    raw_write(fd, 1, 0, x, sizeof x);
    char msg[1100];
    assert_int_equal(raw_sync_msg(fd, msg, sizeof msg), EM_OK);

    const em_quant_scheme q8b = {.storage = EM_Q8, .kind = EM_QK_BLOCK, .scale_dtype = EM_F32,
                                 .block = 32, .axis = 1};
    const em_quant_scheme q8s = {.storage = EM_Q8, .scale = 0.5f, .kind = EM_QK_SYMMETRIC};
    const int64_t s2x32[2] = {2, 32}, s4x32[2] = {4, 32}, s128 = 128, s2x64[2] = {2, 64};

    /* a good quantize to 4 q8 blocks, and its dequantize: they run */
    rw_kernel qz = rk(RW_K_QUANTIZE, 2);
    qz.views[0] = rv(2, EM_Q8, 2, s4x32, 0);
    qz.views[1] = rv(1, EM_F32, 2, s4x32, 0);
    put_scheme(&qz, 0, &q8b);
    REFUSED(qz, EM_OK, NULL);
    rw_kernel dq = rk(RW_K_DEQUANTIZE, 2);
    dq.views[0] = rv(3, EM_F32, 1, (const int64_t[]){64}, 0);
    dq.views[1] = rv(2, EM_Q8, 2, s2x32, 64); /* blocks 2 and 3 */
    put_scheme(&dq, 0, &q8b);
    REFUSED(dq, EM_ERR_SHAPE, "shapes differ"); /* [64] from [2, 32] */

    /* ---- schemes ---- */
    rw_kernel k = qz;
    k.ints[0] = 7; /* storage */
    REFUSED(k, EM_ERR_ARG, "storage 7 is not q8 or q4");
    k = qz;
    k.ints[1] = 9;
    REFUSED(k, EM_ERR_ARG, "unknown kind 9");
    k = qz;
    k.ints[0] = EM_Q4, k.ints[1] = EM_QK_SYMMETRIC;
    REFUSED(k, EM_ERR_ARG, "symmetric is not a scheme of q4");
    k = qz;
    k.ints[1] = EM_QK_BLOCK_MIN;
    REFUSED(k, EM_ERR_ARG, "block_min is not a scheme of q8");
    k = qz;
    k.ints[3] = EM_I32;
    REFUSED(k, EM_ERR_ARG, "f32 or f16");
    k = qz;
    k.ints[4] = 16;
    REFUSED(k, EM_ERR_ARG, "blocks of 16");
    k = qz;
    k.ints[5] = 8;
    REFUSED(k, EM_ERR_ARG, "axis 8 out of range");
    k = qz;
    k.ints[5] = 2; /* of a 2-d view */
    REFUSED(k, EM_ERR_ARG, "block axis 2 of a 2-d view");
    k = qz;
    k.ints[5] = 0; /* quantize blocks run along the last dim */
    k.views[0] = rv(2, EM_Q8, 2, (const int64_t[]){32, 4}, 0);
    k.views[0].strides[0] = 1, k.views[0].strides[1] = 32;
    k.views[1] = rv(1, EM_F32, 2, (const int64_t[]){32, 4}, 0);
    REFUSED(k, EM_ERR_ARG, "last dim");
    /* per-tensor scales and zero points */
    rw_kernel pq = rk(RW_K_QUANTIZE, 2);
    pq.views[0] = rv(3, EM_I8, 1, &s128, 0);
    pq.views[1] = rv(1, EM_F32, 1, &s128, 0);
    put_scheme(&pq, 0, &q8s);
    REFUSED(pq, EM_OK, NULL);
    const double bad_scales[] = {0.0, -1.0, NAN, INFINITY, 1e-45, 0.1, 1e300};
    for (size_t i = 0; i < sizeof bad_scales / sizeof bad_scales[0]; i++) {
        k = pq;
        k.doubles[0] = bad_scales[i];
        REFUSED(k, EM_ERR_ARG, "the scale must be a finite f32 > 0 with a finite reciprocal");
    }
    /* dequantize only multiplies by the scale: a subnormal one is fine there */
    rw_kernel pd = rk(RW_K_DEQUANTIZE, 2);
    pd.views[0] = rv(1, EM_F32, 1, &s128, 0);
    pd.views[1] = rv(3, EM_I8, 1, &s128, 0);
    put_scheme(&pd, 0, &q8s);
    pd.doubles[0] = (double)1e-40f;
    REFUSED(pd, EM_OK, NULL);
    pd.doubles[0] = 0;
    REFUSED(pd, EM_ERR_ARG, "the scheme: the scale must be a finite f32 > 0, got 0");
    raw_write(fd, 1, 0, x, sizeof x); /* x again */
    k = pq;
    k.ints[2] = 1; /* symmetric: zero point 0 */
    REFUSED(k, EM_ERR_ARG, "zero point 1 outside [0, 0]");
    k = pq;
    k.ints[1] = EM_QK_AFFINE, k.ints[2] = 128;
    REFUSED(k, EM_ERR_ARG, "zero point 128 outside [-128, 127]");
    k.ints[0] = EM_Q4, k.ints[2] = -9;
    REFUSED(k, EM_ERR_ARG, "zero point -9 outside [-8, 7]");
    k.ints[2] = INT64_MIN;
    REFUSED(k, EM_ERR_ARG, "outside [-8, 7]");

    /* ---- block views ---- */
    k = dq;
    k.views[0] = rv(3, EM_F32, 2, s2x32, 0);
    REFUSED(k, EM_OK, NULL);
    rw_kernel good_dq = k;
    k.views[1].strides[1] = 2; /* the block axis' stride */
    REFUSED(k, EM_ERR_ARG, "must have stride 1");
    k = good_dq;
    k.views[0] = rv(3, EM_F32, 2, (const int64_t[]){1, 48}, 0);
    k.views[1] = rv(2, EM_Q8, 2, (const int64_t[]){1, 48}, 0);
    REFUSED(k, EM_ERR_ARG, "multiple of 32 (stride 1, size 48)");
    k = good_dq;
    k.views[1].offset = 16;
    REFUSED(k, EM_ERR_ARG, "offset 16 cuts a block");
    k = good_dq;
    k.views[1].strides[0] = 48;
    REFUSED(k, EM_ERR_ARG, "dim 0's stride 48 cuts a block");
    /* bounds: 4 blocks in buffer 2 */
    k = good_dq;
    k.views[1].offset = 96; /* blocks 3 and 4: block 4 is past the end */
    REFUSED(k, EM_ERR_ARG, "reaches outside buffer 2 (144 bytes, blocks of 36 bytes)");
    k = good_dq;
    k.views[1].offset = 0, k.views[1].strides[0] = -32; /* block -1 */
    REFUSED(k, EM_ERR_ARG, "reaches outside buffer 2");
    k = good_dq;
    k.views[1].strides[0] = (int64_t)1 << 62; /* the extent overflows */
    REFUSED(k, EM_ERR_ARG, "reaches outside buffer 2");
    k = good_dq;
    k.views[1].shape[0] = (int64_t)1 << 58, k.views[1].strides[0] = 32; /* bytes overflow */
    k.views[0].shape[0] = (int64_t)1 << 58;
    REFUSED(k, EM_ERR_ARG, "reaches outside buffer");
    k = good_dq;
    k.views[1].shape[0] = 0, k.views[0].shape[0] = 0, k.views[1].offset = (int64_t)1 << 62;
    REFUSED(k, EM_ERR_ARG, "reaches outside buffer 2"); /* empty, but its offset is past the end */
    k = good_dq;
    k.views[1].dtype = EM_Q4; /* a q4 view of a q8 scheme */
    REFUSED(k, EM_ERR_DTYPE, "view 1 is q4, its scheme q8 block");
    k = good_dq;
    k.ints[1] = EM_QK_SYMMETRIC, k.doubles[0] = 1.0; /* a q8 view of a per-tensor scheme */
    REFUSED(k, EM_ERR_DTYPE, "view 1 is q8, its scheme q8 symmetric");
    k = good_dq;
    k.views[0].dtype = EM_F16;
    REFUSED(k, EM_ERR_DTYPE, "out must be f32, got f16");
    k = good_dq;
    k.views[0] = rv(1, EM_F32, 2, s2x32, 0);
    k.views[0].strides[0] = 1, k.views[0].strides[1] = 2;
    REFUSED(k, EM_ERR_ARG, "not contiguous");
    k = good_dq;
    k.views[0] = rv(2, EM_F32, 2, (const int64_t[]){1, 32}, 0); /* out over the block it reads */
    k.views[1].shape[0] = 1;
    REFUSED(k, EM_ERR_ARG, "overlaps");

    /* ---- quantize's values and dtypes ---- */
    const float nan = NAN;
    raw_write(fd, 1, 4 * 40, &nan, 4);
    k = qz;
    REFUSED(k, EM_ERR_ARG, "x holds a non-finite value (nan, element 40)");
    k = pq;
    REFUSED(k, EM_ERR_ARG, "non-finite");
    const float inf = INFINITY;
    raw_write(fd, 1, 4 * 40, &inf, 4);
    REFUSED(k, EM_ERR_ARG, "non-finite");
    raw_write(fd, 1, 4 * 40, &x[40], 4);
    REFUSED(k, EM_OK, NULL);
    k = qz;
    k.views[1].dtype = EM_F64;
    REFUSED(k, EM_ERR_DTYPE, "x must be f32");
    k = qz;
    k.views[0].dtype = EM_Q4;
    REFUSED(k, EM_ERR_DTYPE, "view 0 is q4");
    k = pq;
    k.views[0].dtype = EM_U8;
    REFUSED(k, EM_ERR_DTYPE, "expected a quantized");
    k = qz;
    k.views[0] = rv(1, EM_Q8, 2, s4x32, 0); /* out in x's own bytes */
    REFUSED(k, EM_ERR_ARG, "overlaps");

    /* ---- qmatmul ---- */
    const int64_t a3x64[2] = {3, 64}, o3x2[2] = {3, 2};
    const em_quant_scheme bK = {.storage = EM_Q8, .kind = EM_QK_BLOCK, .scale_dtype = EM_F32,
                                .block = 32, .axis = 0};
    rw_kernel mm = rk(RW_K_QMATMUL, 3);
    mm.views[0] = rv(4, EM_F32, 2, o3x2, 0);
    mm.views[1] = rv(1, EM_F32, 2, a3x64, 0);
    mm.views[2] = rv(2, EM_Q8, 2, s2x64, 0); /* [64, 2] blocks along K: transposed */
    mm.views[2].shape[0] = 64, mm.views[2].shape[1] = 2;
    mm.views[2].strides[0] = 1, mm.views[2].strides[1] = 64;
    put_scheme(&mm, 1, &bK);
    REFUSED(mm, EM_OK, NULL);
    k = mm;
    k.ints[1] = 1; /* as absent, but a field set */
    REFUSED(k, EM_ERR_ARG, "storage 0 (none: a is f32) and other fields set");
    k = mm;
    k.views[1].shape[1] = 32, k.views[1].strides[0] = 32;
    REFUSED(k, EM_ERR_SHAPE, "matrix dims do not fit");
    k = mm;
    k.views[0].shape[1] = 3;
    REFUSED(k, EM_ERR_SHAPE, "matrix dims do not fit");
    k = mm;
    k.views[0].dtype = EM_I32;
    REFUSED(k, EM_ERR_DTYPE, "expected a float");
    k = mm;
    k.views[1].dtype = EM_I8; /* a quantized a without a scheme */
    REFUSED(k, EM_ERR_DTYPE, "a is i8 where f32 is needed");
    k = mm;
    k.views[2].dtype = EM_I8; /* b an i8 view of a block scheme */
    REFUSED(k, EM_ERR_DTYPE, "b is i8 where its q8 block scheme needs q8");
    k = mm;
    k.views[2].strides[0] = 2; /* b's block axis strided */
    REFUSED(k, EM_ERR_ARG, "must have stride 1");
    k = mm; /* an int8 product with a q4 affine a and a q4 b */
    {
        const em_quant_scheme a4 = {.storage = EM_Q4, .scale = 0.25f, .kind = EM_QK_AFFINE};
        put_scheme(&k, 0, &a4);
        k.views[1].dtype = EM_I8;
        const em_quant_scheme b4 = {.storage = EM_Q4, .kind = EM_QK_BLOCK, .scale_dtype = EM_F32,
                                    .block = 32, .axis = 0};
        put_scheme(&k, 1, &b4);
        k.views[2].dtype = EM_Q4;
        k.views[2].id = 3; /* 2 q4 blocks of 20 bytes along K for each of 2 columns */
        REFUSED(k, EM_ERR_ARG, "a quantized a needs");
        const em_quant_scheme az = {.storage = EM_Q8, .scale = 0.25f, .zero_point = 3,
                                    .kind = EM_QK_AFFINE};
        put_scheme(&k, 0, &az);
        put_scheme(&k, 1, &bK);
        k.views[2].dtype = EM_Q8;
        k.views[2].id = 2;
        REFUSED(k, EM_ERR_ARG, "a quantized a needs"); /* a zero point in the int8 product */
        put_scheme(&k, 0, &q8s);
        REFUSED(k, EM_OK, NULL);
    }
    k = mm; /* b's blocks along N with a quantized a */
    {
        const em_quant_scheme bN = {.storage = EM_Q8, .kind = EM_QK_BLOCK, .scale_dtype = EM_F32,
                                    .block = 32, .axis = 1};
        put_scheme(&k, 0, &q8s);
        put_scheme(&k, 1, &bN);
        k.views[1].dtype = EM_I8;
        k.views[0] = rv(1, EM_F32, 2, (const int64_t[]){3, 32}, 128);
        k.views[2] = rv(2, EM_Q8, 2, (const int64_t[]){64, 32}, 0); /* 64 blocks: outside */
        REFUSED(k, EM_ERR_ARG, "reaches outside buffer 2");
        k.views[2].shape[0] = 4, k.views[1].shape[1] = 4, k.views[1].strides[0] = 4;
        REFUSED(k, EM_ERR_ARG, "a quantized a needs");
    }
    /* an f32 a quantized on the fly may hold anything: its block gives NaN (backend.h) */
    raw_write(fd, 1, 4 * 100, &inf, 4);
    REFUSED(mm, EM_OK, NULL);
    float row[2];
    raw_u64s(fd, RW_READ, 3, (const uint64_t[]){4, 8, sizeof row}); /* out's row 1 */
    rn_frame f = {0};
    assert_int_equal(rn_recv_frame(fd, &f, RW_MIN_MAX_MSG), 1);
    assert_int_equal(f.p[0], RW_DATA);
    memcpy(row, f.p + 1, sizeof row);
    rn_frame_free(&f);
    assert_true(isnan(row[0]) && isnan(row[1]));
    raw_write(fd, 1, 4 * 100, &x[100], 4);
    REFUSED(mm, EM_OK, NULL);

    /* q8 / q4 views in other slots do not decode: the connection ends */
    rw_kernel cp = rk(RW_K_COPY, 2);
    cp.views[0] = rv(3, EM_U8, 2, s2x32, 0);
    cp.views[1] = rv(2, EM_Q8, 2, s2x32, 0);
    rw_writer w = {0};
    rw_encode_kernel(&w, &cp);
    assert_int_equal(rn_send_all(fd, w.p, w.len), 0);
    rw_writer_free(&w);
    assert_true(raw_closed(fd));
    close(fd);

    /* the hostile client's buffers are all given back; the library client still works */
    rw_stats st;
    for (int i = 0; i < 500; i++) {
        rs_stats(srv_ref, &st);
        if (st.server_bytes == base.server_bytes && st.server_clients == base.server_clients) break;
        usleep(10000);
    }
    assert_int_equal(st.server_bytes, base.server_bytes);
    quant_case(dev_ref, REF, 3);
}

/* ---- capture: no quantized slots, a clean refusal ---- */

static void test_capture_refuses(void **state) {
    (void)state;
    em_device cap;
    OK(em_device_parse("capture", &cap));
    em_graph *g;
    OK(em_graph_begin(&g));
    const int64_t shape[2] = {2, 64};
    em_tensor *x, *q = NULL, *y = NULL;
    OK(em_graph_input(g, "x", EM_F32, shape, 2, cap, &x));
    for (size_t i = 0; i < NSCHEMES; i++) {
        em_status s = em_quantize_as(x, &SCHEMES[i], &q);
        assert_int_not_equal(s, EM_OK);
        assert_null(q);
        assert_non_null(strstr(em_last_error(), "capture"));
    }
    /* a quantized tensor made from bytes on the capture device: its ops are refused too */
    em_tensor *r;
    em_quant_scheme sc = SCHEMES[3];
    size_t n;
    OK(em_quant_nbytes(&sc, shape, 2, &n));
    uint8_t *b = calloc(1, n);
    assert_non_null(b);
    if (em_tensor_from_quantized(b, n, &sc, shape, 2, cap, &r) == EM_OK) {
        assert_int_not_equal(em_dequantize(r, &y), EM_OK);
        em_tensor *rt;
        OK(em_transpose(r, 0, 1, &rt));
        assert_int_not_equal(em_matmul(x, rt, &y), EM_OK);
        assert_null(y);
        em_tensor_release(rt);
        em_tensor_release(r);
    }
    free(b);
    em_tensor_release(x);
    OK(em_graph_end(g));
    em_graph_release(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schemes_match_ref),
        cmocka_unit_test(test_to_device_round_trip),
        cmocka_unit_test(test_autodiff_through_quantized_weight),
        cmocka_unit_test(test_hostile_quant_calls),
        cmocka_unit_test(test_capture_refuses),
    };
    const char *only = getenv("EMBER_TEST_FILTER");
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
