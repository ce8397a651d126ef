/* ref.c — the reference backend's table, its memory, and its copy/fill/arange kernels.
 * Buffers are plain host memory with a small header that records their size, so that
 * the backend can report bytes in use and the peak. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ref.h"

typedef struct ref_ctx {
    atomic_size_t in_use;
    atomic_size_t peak;
} ref_ctx;

static ref_ctx ref_device0;

/* The table is exported under this name for the core's registry. */
extern const em_backend_ops em_ref_backend_ops;

/* 16-byte header keeps the data aligned for any element type. */
#define REF_HDR 16

static int ref_device_count(void) { return 1; }

static em_status ref_open(int index, void **ctx) {
    if (index != 0) return em_backend_set_error(EM_ERR_DEVICE, "ref: no device %d", index);
    *ctx = &ref_device0;
    return EM_OK;
}

static em_status ref_alloc(void *ctx, size_t bytes, void **buf) {
    ref_ctx *c = ctx;
    if (bytes > SIZE_MAX - REF_HDR)
        return em_backend_set_error(EM_ERR_NOMEM, "ref: cannot allocate %zu bytes", bytes);
    char *p = malloc(REF_HDR + bytes);
    if (!p) return em_backend_set_error(EM_ERR_NOMEM, "ref: out of memory (%zu bytes)", bytes);
    memcpy(p, &bytes, sizeof bytes);
    size_t now = atomic_fetch_add_explicit(&c->in_use, bytes, memory_order_relaxed) + bytes;
    size_t pk = atomic_load_explicit(&c->peak, memory_order_relaxed);
    while (now > pk &&
           !atomic_compare_exchange_weak_explicit(&c->peak, &pk, now, memory_order_relaxed,
                                                  memory_order_relaxed)) {
    }
    *buf = p + REF_HDR;
    return EM_OK;
}

static void ref_free(void *ctx, void *buf) {
    ref_ctx *c = ctx;
    if (!buf) return;
    char *p = (char *)buf - REF_HDR;
    size_t bytes;
    memcpy(&bytes, p, sizeof bytes);
    atomic_fetch_sub_explicit(&c->in_use, bytes, memory_order_relaxed);
    free(p);
}

static em_status ref_write(void *ctx, void *buf, size_t offset, const void *src, size_t bytes) {
    memcpy((char *)buf + offset, src, bytes);
    return EM_OK;
}

static em_status ref_read(void *ctx, const void *buf, size_t offset, void *dst, size_t bytes) {
    memcpy(dst, (const char *)buf + offset, bytes);
    return EM_OK;
}

static void ref_memory(void *ctx, size_t *in_use, size_t *peak) {
    ref_ctx *c = ctx;
    if (in_use) *in_use = atomic_load(&c->in_use);
    if (peak) *peak = atomic_load(&c->peak);
}

static void ref_memory_reset_peak(void *ctx) {
    ref_ctx *c = ctx;
    atomic_store(&c->peak, atomic_load(&c->in_use));
}

em_status ref_copy(void *ctx, const em_view *out, const em_view *in) {
    ref_iter it;
    ref_iter_init(&it, 2, out, in);
    int fl = ref_is_float(out->dtype) || ref_is_float(in->dtype);
    if (out->dtype == in->dtype) {
        size_t sz = em_dtype_size(out->dtype);
        for (int64_t i = 0; i < it.numel; i++, ref_iter_next(&it))
            memcpy((char *)out->buf + it.off[0] * (int64_t)sz,
                   (const char *)in->buf + it.off[1] * (int64_t)sz, sz);
    } else if (fl) {
        for (int64_t i = 0; i < it.numel; i++, ref_iter_next(&it))
            ref_st(out->buf, out->dtype, it.off[0], ref_ld(in->buf, in->dtype, it.off[1]));
    } else {
        for (int64_t i = 0; i < it.numel; i++, ref_iter_next(&it))
            ref_sti(out->buf, out->dtype, it.off[0], ref_ldi(in->buf, in->dtype, it.off[1]));
    }
    return EM_OK;
}

em_status ref_fill(void *ctx, const em_view *out, double value) {
    int64_t n = ref_numel(out);
    for (int64_t i = 0; i < n; i++) ref_st(out->buf, out->dtype, ref_offset(out, i), value);
    return EM_OK;
}

em_status ref_arange(void *ctx, const em_view *out, double start, double step) {
    int64_t n = ref_numel(out);
    for (int64_t i = 0; i < n; i++)
        ref_st(out->buf, out->dtype, out->offset + i * out->strides[0], start + (double)i * step);
    return EM_OK;
}

const em_backend_ops em_ref_backend_ops = {
    .abi_version = EM_BACKEND_ABI_VERSION,
    .name = "ref",
    .id = EM_BACKEND_REF,
    .caps = EM_CAP_STRIDED_INPUTS | EM_CAP_HOST_MEMORY,
    .device_count = ref_device_count,
    .open = ref_open,
    .alloc = ref_alloc,
    .free = ref_free,
    .write = ref_write,
    .read = ref_read,
    .sync = NULL,
    .memory = ref_memory,
    .memory_reset_peak = ref_memory_reset_peak,
    .fill = ref_fill,
    .arange = ref_arange,
    .random = ref_random,
    .copy = ref_copy,
    .unary = ref_unary,
    .binary = ref_binary,
    .binary_scalar = ref_binary_scalar,
    .where = ref_where,
    .reduce = ref_reduce,
    .cumsum = ref_cumsum,
    .softmax = ref_softmax,
    .matmul = ref_matmul,
    .gather = ref_gather,
    .scatter_add = ref_scatter_add,
    .index_select = ref_index_select,
    .sort = ref_sort,
    .conv2d = ref_conv2d,
    .conv_transpose2d = ref_conv_transpose2d,
    .max_pool2d = ref_max_pool2d,
    .avg_pool2d = ref_avg_pool2d,
    .adaptive_avg_pool2d = ref_adaptive_avg_pool2d,
    .layer_norm = ref_layer_norm,
    .conv2d_weight_grad = ref_conv2d_weight_grad,
    .avg_pool2d_backward = ref_avg_pool2d_backward,
    .adaptive_avg_pool2d_backward = ref_adaptive_avg_pool2d_backward,
    .unary_backward = ref_unary_backward,
    .adam_step = ref_adam_step,
    .batch_norm = ref_batch_norm,
    .batch_norm_backward = ref_batch_norm_backward,
    .group_norm = ref_group_norm,
    .rms_norm = ref_rms_norm,
    .cumulative = ref_cumulative,
    .sdpa = ref_sdpa,
    .sdpa_backward = ref_sdpa_backward,
    .quantize = ref_quantize,
    .dequantize = ref_dequantize,
    .qmatmul = ref_qmatmul,
};
