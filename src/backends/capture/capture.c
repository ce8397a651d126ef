/* capture.c — the capture backend: tensors with a dtype, a shape and a place in the open
 * capture's graph, never values. Its kernels append calls to the graph (src/graph/record.c);
 * reading a buffer is EM_ERR_STATE. The fused slots stay NULL, so the core composes those ops
 * from the recorded basic slots, which every device can replay. */
#include "graph/graph_internal.h"
#include "wire/calls.h"

typedef struct cap_ctx {
    rw_sink sink; /* first, as wire/calls.h asks */
} cap_ctx;

static em_status cap_sink(void *ctx, rw_slot slot, int sub,
                          const em_view *const views[RW_MAX_VIEWS], const int64_t *ints,
                          const double *doubles) {
    (void)ctx;
    return gr_rec_kernel(slot, sub, views, ints, doubles);
}

static cap_ctx cap_device = {cap_sink};

static int cap_device_count(void) { return 1; }

static em_status cap_open(int index, void **ctx) {
    if (index != 0)
        return em_backend_set_error(EM_ERR_DEVICE, "device capture:%d is not present", index);
    *ctx = &cap_device;
    return EM_OK;
}

static em_status cap_alloc(void *ctx, size_t bytes, void **buf) {
    (void)ctx;
    gr_cbuf *b = NULL;
    em_status s = gr_rec_alloc(bytes, &b);
    if (s == EM_OK) *buf = b;
    return s;
}

static void cap_free(void *ctx, void *buf) {
    (void)ctx;
    gr_rec_free(buf);
}

static em_status cap_write(void *ctx, void *buf, size_t offset, const void *src, size_t bytes) {
    (void)ctx;
    return gr_rec_write(buf, offset, src, bytes);
}

static em_status cap_read(void *ctx, const void *buf, size_t offset, void *dst, size_t bytes) {
    (void)ctx;
    (void)buf;
    (void)offset;
    (void)dst;
    (void)bytes;
    return em_backend_set_error(EM_ERR_STATE,
                                "capture: a captured tensor holds no values, only its place in "
                                "the graph: declare it an output (em_graph_output) and run the "
                                "graph (em_graph_run) to read them");
}

static void cap_memory(void *ctx, size_t *in_use, size_t *peak) {
    (void)ctx;
    gr_rec_memory(in_use, peak);
}

const em_backend_ops em_capture_backend_ops = {
    .abi_version = EM_BACKEND_ABI_VERSION,
    .name = "capture",
    .id = EM_BACKEND_CAPTURE,
    .caps = EM_CAP_STRIDED_INPUTS,
    .device_count = cap_device_count,
    .open = cap_open,
    .alloc = cap_alloc,
    .free = cap_free,
    .write = cap_write,
    .read = cap_read,
    .memory = cap_memory,
    RW_CALL_SLOTS,
};
