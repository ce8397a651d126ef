/*
 * graph_internal.h — the in-memory form of a captured graph (include/ember/graph.h), shared
 * by the recorder (record.c, fed by the capture backend), the replay (exec.c), the file
 * format (file.c) and the views of it (show.c). Not installed.
 *
 * A graph is a list of steps over numbered buffers. Buffer b (0-based) is named by id b + 1
 * in the recorded kernel calls (rw_kernel views, as on the remote protocol's wire), so that a
 * call is checked and run by rs_exec_kernel (src/wire/exec.c) exactly as a remote client's
 * message: a loaded file is hostile input.
 */
#ifndef EMBER_GRAPH_INTERNAL_H
#define EMBER_GRAPH_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "ember/graph.h"
#include "wire/wire.h"

#define GR_NAME_MAX 127
/** Limits a loaded graph is held to (a file may claim anything). */
#define GR_MAX_BUFFERS (1u << 24)
#define GR_MAX_STEPS (1u << 26)
#define GR_MAX_IO 65536

typedef enum gr_step_type {
    GR_ALLOC = 1, /* buffer `buf` (bufs[buf].bytes) comes to life */
    GR_FREE,      /* buffer `buf` is freed */
    GR_WRITE,     /* blob `blob` (len bytes) is written into buffer `buf` at `offset` */
    GR_KERNEL,    /* the kernel call k */
    GR_ALT,       /* a fused kernel call k (a normalization slot) and, up to the next GR_ALT_END,
                   * its composition from basic calls: a device with the slot runs k and skips
                   * the composition's calls, another runs them (never nested) */
    GR_ALT_END,   /* the end of the composition that the last GR_ALT began */
} gr_step_type;

typedef struct gr_step {
    uint8_t type;
    uint32_t buf;
    uint32_t blob;
    uint64_t offset;
    rw_kernel k;
} gr_step;

typedef struct gr_buffer {
    uint64_t bytes;
    bool setup;    /* allocated in the setup: state when it is not freed by the end */
    bool freed;    /* a GR_FREE of it was recorded */
    bool written;  /* a step kernel or write of the step section targets it */
    int32_t input; /* the input it holds, or -1 */
} gr_buffer;

typedef struct gr_blob {
    uint8_t *data;
    uint64_t len;
} gr_blob;

/** A named tensor: an input (view: the whole buffer, contiguous), an output or a state. */
typedef struct gr_named {
    char *name;
    em_dtype dtype;  /* the public dtype */
    rw_view view;    /* view.id = buffer + 1 */
} gr_named;

struct em_graph {
    atomic_int refs;       /* the owner's, and one per exec */
    bool open;             /* recording */
    em_status failed;      /* a recording failure, reported by em_graph_end */
    char why[256];
    uint64_t gen;          /* the capture's number (the capture backend's buffers carry it) */
    gr_buffer *bufs;
    uint32_t nbufs, capbufs;
    gr_step *steps;
    uint64_t nsteps, capsteps;
    uint64_t setup_end;    /* steps [0, setup_end) are the setup */
    bool in_step;          /* an input was declared: recording the step */
    bool in_alt;           /* between a GR_ALT and its GR_ALT_END */
    gr_blob *blobs;
    uint32_t nblobs, capblobs;
    gr_named *inputs, *outputs, *states;
    int ninputs, noutputs, nstates;
};

/* ---- record.c: what the capture backend calls (each takes the recorder's lock) ---- */

/** The capture backend's buffer handle (em_view.buf). */
typedef struct gr_cbuf {
    uint64_t gen; /* the capture it was made in */
    uint64_t id;  /* its buffer's id in that graph */
    size_t bytes;
} gr_cbuf;

em_status gr_rec_alloc(size_t bytes, gr_cbuf **out);
void gr_rec_free(gr_cbuf *b);
em_status gr_rec_write(gr_cbuf *b, size_t offset, const void *src, size_t bytes);
em_status gr_rec_kernel(rw_slot slot, int sub, const em_view *const views[RW_MAX_VIEWS],
                        const int64_t *ints, const double *doubles);
/** Records the call a device with a fused slot makes (a GR_ALT step) before the core records
 *  its composition from basic slots, which gr_rec_alt_end closes (src/ops/norm.c). */
em_status gr_rec_alt_begin(rw_slot slot, int sub, const em_view *const views[RW_MAX_VIEWS],
                           const int64_t *ints, const double *doubles);
void gr_rec_alt_end(void);
/** Records a graph-only adam_step call (src/ops/fused.c: emi_adam_step_captured) after
 *  checking that its moments and step count (views 1, 2 and 4) are state of the graph (made
 *  in the setup) or inputs, which keep their values from run to run: EM_ERR_STATE
 *  otherwise. */
em_status gr_rec_adam_step(int sub, const em_view *const views[RW_MAX_VIEWS],
                           const double *doubles);
/** Bit i: view i of a call of this slot is written by it. */
unsigned gr_outputs_of(rw_slot slot);
/** In use and peak bytes of the open capture's buffers (0 when none). */
void gr_rec_memory(size_t *in_use, size_t *peak);

/* ---- shared helpers (record.c) ---- */

/** A new empty graph (refs 1, closed). NULL when out of memory. */
em_graph *gr_new(void);
/** Appends a step / buffer / blob (the blob takes ownership of data); false when out of
 *  memory. */
bool gr_push_step(em_graph *g, const gr_step *s);
bool gr_push_buffer(em_graph *g, uint64_t bytes, uint32_t *index);
bool gr_push_blob(em_graph *g, uint8_t *data, uint64_t len, uint32_t *index);
/** Appends a named tensor to one of the lists (the name is copied); false when out of
 *  memory. */
bool gr_push_named(gr_named **list, int *n, const char *name, em_dtype dt, const rw_view *v);
/** True when name is 1..GR_NAME_MAX bytes of [A-Za-z0-9_.:/-]. */
bool gr_name_ok(const char *name);
/** Drops a reference; the last frees the graph. */
void gr_release(em_graph *g);
/** Bytes a view reaches from its buffer's start (offset + extent), or -1 when it has
 *  negative strides reaching before 0 or overflows. */
int64_t gr_view_end(const rw_view *v);

#endif /* EMBER_GRAPH_INTERNAL_H */
