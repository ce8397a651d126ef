/*
 * wire.h — the remote protocol's codec, shared by the client backend and the server.
 *
 * Everything on the wire is little-endian with fixed widths, written and read field by field
 * (no struct is copied onto the wire). A frame is a u32 body length followed by the body; the
 * body's first byte is the message type. docs/remote-protocol.md is the specification; this
 * header is its C form. Nothing here does I/O or allocates except the growable writer.
 */
#ifndef EMBER_WIRE_H
#define EMBER_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/backend.h"

#define RW_MAGIC "EMBR"
/* 2: unary kernels carry three doubles (nan_to_num's values); 3: the quantized slots
 * (quantize, dequantize, qmatmul), whose views may be q8 / q4 block views */
#define RW_VERSION 3u
#define RW_NONCE_BYTES 32
#define RW_MAC_BYTES 32
#define RW_MAX_RANK 8
/** The largest frame body either side accepts before authentication. */
#define RW_MAX_PREAUTH 256
/** Default and smallest allowed limit on a frame body after authentication. */
#define RW_DEFAULT_MAX_MSG (64u << 20)
#define RW_MIN_MAX_MSG (64u << 10)
/** Fixed header bytes of each message type that carries a payload: type, id, offset. */
#define RW_WRITE_HEADER 17u

/* Message types: client to server */
enum {
    RW_ALLOC = 1,  /* u64 id, u64 bytes */
    RW_FREE = 2,   /* u64 id */
    RW_WRITE = 3,  /* u64 id, u64 offset, payload (the rest of the body) */
    RW_READ = 4,   /* u64 id, u64 offset, u64 len            -> DATA or ERROR */
    RW_SYNC = 5,   /*                                        -> OK or ERROR */
    RW_STATS = 6,  /*                                        -> STATS */
    RW_KERNEL = 7, /* u8 slot, u8 sub, u8 mask, views, i64 ints, f64 doubles */
    RW_BYE = 8,    /* the client is leaving */
    RW_AUTH = 9,   /* handshake: magic, u16 version, u16 0, nonce[32], mac[32] */
};
/* Message types: server to client */
enum {
    RW_HELLO = 0x80,   /* magic, u16 version, u16 0, challenge[32] */
    RW_DATA = 0x81,    /* payload */
    RW_OK = 0x82,      /* (empty) */
    RW_ERROR = 0x83,   /* u8 status, u16 len, message */
    RW_STATS_R = 0x84, /* RW_NSTATS x u64 */
    RW_WELCOME = 0x85, /* mac[32], device info (see rw_welcome) */
};

/** The kernel slots of em_backend_ops, in wire order. */
typedef enum rw_slot {
    RW_K_FILL = 0, RW_K_ARANGE, RW_K_RANDOM, RW_K_COPY, RW_K_UNARY, RW_K_BINARY,
    RW_K_BINARY_SCALAR, RW_K_WHERE, RW_K_REDUCE, RW_K_CUMSUM, RW_K_SOFTMAX, RW_K_MATMUL,
    RW_K_GATHER, RW_K_SCATTER_ADD, RW_K_INDEX_SELECT, RW_K_SORT, RW_K_CONV2D,
    RW_K_CONV_TRANSPOSE2D, RW_K_MAX_POOL2D, RW_K_AVG_POOL2D, RW_K_ADAPTIVE_AVG_POOL2D,
    RW_K_CONV2D_WEIGHT_GRAD, RW_K_AVG_POOL2D_BACKWARD, RW_K_ADAPTIVE_AVG_POOL2D_BACKWARD,
    RW_K_LAYER_NORM,
    RW_K_CUMULATIVE, /* cumprod / cummax / cummin (em_cum_op) */
    /* quantized tensors (ABI 5): the remote protocol only (the capture backend leaves them
     * NULL); each carries its schemes as ints and doubles (rw_scheme_put) */
    RW_K_QUANTIZE, RW_K_DEQUANTIZE, RW_K_QMATMUL,
    /* the normalization slots (ABI 3): captured graphs only, never on the remote protocol
     * (its client leaves them NULL, so its core composes them; a server refuses them) */
    RW_K_BATCH_NORM, RW_K_BATCH_NORM_BACKWARD, RW_K_GROUP_NORM, RW_K_RMS_NORM,
    /* one Adam / AdamW step whose step count is a tensor of the graph (a captured
     * em_optimizer_step): captured graphs only, as the slots above */
    RW_K_ADAM_STEP,
    /* a unary op's fused gradient (backend.h's unary_backward): captured graphs only, recorded
     * as the fused call followed by its composition (GR_ALT) */
    RW_K_UNARY_BACKWARD,
    RW_K_COUNT
} rw_slot;

/** The slots the remote protocol carries: those before RW_K_BATCH_NORM (at most 32: the
 *  welcome's `slots` is a u32 mask). */
#define RW_K_REMOTE_COUNT RW_K_BATCH_NORM

/** True for the quantized slots, the only ones whose views may have dtype EM_Q8 / EM_Q4. */
static inline bool rw_slot_is_quant(int slot) {
    return slot == RW_K_QUANTIZE || slot == RW_K_DEQUANTIZE || slot == RW_K_QMATMUL;
}

/** A quantization scheme on the wire: RW_SCHEME_INTS ints (storage, kind, zero_point,
 *  scale_dtype, block, axis) and one double (scale, an f32 value). An absent scheme
 *  (qmatmul's `as` for an f32 a) is all zeros: storage 0 is EM_F32, not a storage dtype. */
#define RW_SCHEME_INTS 6
void rw_scheme_put(const em_quant_scheme *s, int64_t ints[RW_SCHEME_INTS], double *scale);

/** The fixed shape of a kernel message for one slot. */
typedef struct rw_slot_info {
    const char *name;  /* the slot's name in em_backend_ops */
    uint8_t nviews;    /* views it takes, in the order of the slot's parameters */
    uint8_t optional;  /* bit i: view i may be absent (a NULL in the slot call) */
    uint8_t nints;     /* i64 arguments */
    uint8_t ndoubles;  /* f64 arguments */
    uint8_t nsub;      /* the op enum's count for slots with one (unary: EM_UN_COUNT), else 0 */
} rw_slot_info;

/** The table of slot shapes (RW_K_COUNT entries). */
extern const rw_slot_info rw_slots[RW_K_COUNT];

#define RW_MAX_VIEWS 8
#define RW_MAX_INTS 12 /* qmatmul: two schemes */
#define RW_MAX_DOUBLES 6 /* adam_step's hyperparameters; a remote slot takes at most 3 */

/** A view on the wire: em_view with a buffer id in place of the pointer. */
typedef struct rw_view {
    uint64_t id;
    em_dtype dtype;
    int rank;
    int64_t shape[RW_MAX_RANK];   /* unused dims are 0 */
    int64_t strides[RW_MAX_RANK]; /* unused dims are 0 */
    int64_t offset;
} rw_view;

/** A decoded kernel message. */
typedef struct rw_kernel {
    rw_slot slot;
    int sub;      /* the op (em_unary_op, ...) or 0 */
    uint8_t mask; /* bit i: view i is present */
    rw_view views[RW_MAX_VIEWS];
    int64_t ints[RW_MAX_INTS];
    double doubles[RW_MAX_DOUBLES];
} rw_kernel;

/* ---- writer ---- */

/** A growable byte buffer. `failed` is set (and further puts ignored) when growing fails. */
typedef struct rw_writer {
    uint8_t *p;
    size_t len, cap;
    bool failed;
} rw_writer;

void rw_put_u8(rw_writer *w, uint8_t v);
void rw_put_u16(rw_writer *w, uint16_t v);
void rw_put_u32(rw_writer *w, uint32_t v);
void rw_put_u64(rw_writer *w, uint64_t v);
void rw_put_f64(rw_writer *w, double v);
void rw_put_bytes(rw_writer *w, const void *src, size_t n);
/** Starts a frame: reserves the length and writes the type. Returns the frame's start. */
size_t rw_begin(rw_writer *w, uint8_t type);
/** Ends the frame started at `start` by filling in its length. */
void rw_end(rw_writer *w, size_t start);
void rw_writer_free(rw_writer *w);

/** Appends one kernel frame (the kernel's views' ids, dtypes, ranks and dims as given). */
void rw_encode_kernel(rw_writer *w, const rw_kernel *k);

/* ---- reader ---- */

/** A cursor over a received body. `bad` is set on any overrun; reads then return 0. */
typedef struct rw_reader {
    const uint8_t *p;
    size_t len, pos;
    bool bad;
} rw_reader;

static inline rw_reader rw_reader_of(const void *p, size_t len) {
    rw_reader r = {(const uint8_t *)p, len, 0, false};
    return r;
}
uint8_t rw_get_u8(rw_reader *r);
uint16_t rw_get_u16(rw_reader *r);
uint32_t rw_get_u32(rw_reader *r);
uint64_t rw_get_u64(rw_reader *r);
double rw_get_f64(rw_reader *r);
/** Points *out at the next n bytes (no copy); false (and bad set) when fewer remain. */
bool rw_get_bytes(rw_reader *r, size_t n, const uint8_t **out);
/** True when every byte was read and nothing overran. */
static inline bool rw_done(const rw_reader *r) { return !r->bad && r->pos == r->len; }

/** Little-endian u32 from 4 bytes (frame lengths). */
static inline uint32_t rw_le32(const uint8_t *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}
static inline void rw_store_le32(uint8_t *b, uint32_t v) {
    b[0] = (uint8_t)v;
    b[1] = (uint8_t)(v >> 8);
    b[2] = (uint8_t)(v >> 16);
    b[3] = (uint8_t)(v >> 24);
}
static inline uint64_t rw_le64(const uint8_t *b) {
    return (uint64_t)rw_le32(b) | (uint64_t)rw_le32(b + 4) << 32;
}
static inline void rw_store_le64(uint8_t *b, uint64_t v) {
    rw_store_le32(b, (uint32_t)v);
    rw_store_le32(b + 4, (uint32_t)(v >> 32));
}

/** Decodes the body of a RW_KERNEL message that follows its type byte. Checks the structure
 *  only: a known slot and op, the slot's required views present and no others, ids non-zero,
 *  known dtypes (q8 / q4 in the quantized slots only), ranks 0..8, dims >= 0, offsets >= 0,
 *  the exact length. On
 *  failure returns false and writes a reason into why (cap bytes). Never reads past len. */
bool rw_decode_kernel(const uint8_t *body, size_t len, rw_kernel *k, char *why, size_t cap);

/** Converts an em_view (whose buf is the client's buffer handle) to its wire form. */
void rw_view_from(rw_view *out, const em_view *v, uint64_t id);

/* ---- the welcome: what the server tells an authenticated client ---- */

#define RW_NAME_MAX 63
typedef struct rw_welcome {
    uint8_t mac[RW_MAC_BYTES];
    uint8_t autodiff, checkpointing; /* the hosted device's flags (em_checkpointing) */
    uint32_t caps;                   /* the hosted backend's caps */
    uint32_t slots;                  /* bit i: kernel slot i is implemented by the host */
    uint64_t max_msg, max_bytes, max_tensors;
    char name[RW_NAME_MAX + 1]; /* the hosted device's name, e.g. "cpu+autodiff" */
} rw_welcome;

void rw_encode_welcome(rw_writer *w, const rw_welcome *wl);
/** Decodes the body of RW_WELCOME after its type byte; false when malformed. */
bool rw_decode_welcome(const uint8_t *body, size_t len, rw_welcome *wl);

/** Server statistics, the body of RW_STATS_R: RW_NSTATS u64 in this order. */
#define RW_NSTATS 6
typedef struct rw_stats {
    uint64_t client_bytes, client_tensors; /* this connection's buffers */
    uint64_t server_bytes, server_clients; /* all connections */
    uint64_t device_in_use, device_peak;   /* the hosted device's allocator (0: no count) */
} rw_stats;

#endif /* EMBER_WIRE_H */
