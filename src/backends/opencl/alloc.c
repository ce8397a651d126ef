/*
 * alloc.c — the OpenCL backend's caching allocator.
 *
 * Creating a buffer is slow on some drivers (PoCL maps and first-touches fresh host memory:
 * ~15 ms per 16 MiB here, longer than the kernel that fills it), so freed buffers are kept by
 * size class and handed to the next allocation of that class. Reuse is safe without waiting:
 * the device's one in-order queue runs a kernel that writes a reused buffer only after every
 * earlier command that used it. Classes: powers of two from 256 B up to 1 MiB, then multiples
 * of 1 MiB. The cache holds at most a quarter of the device's memory (at most 4 GiB); past that,
 * and when creating a buffer fails, cached buffers are released. em_device_memory counts the
 * bytes handed to tensors (in use) and those kept (cached). Scratch buffers (ocl_scratch) come
 * from the same cache.
 */
#include <stdio.h>
#include <stdlib.h>

#include "ocl_internal.h"

#define OCL_MIB ((size_t)1 << 20)

/* A cached buffer. */
typedef struct ocl_free_blk {
    size_t cls;
    cl_mem mem;
    struct ocl_free_blk *next;
} ocl_free_blk;

/* The size class of a request: what the buffer really holds. */
static size_t size_class(size_t bytes) {
    if (bytes <= 256) return 256;
    if (bytes <= OCL_MIB) {
        size_t c = 512;
        while (c < bytes) c <<= 1;
        return c;
    }
    return (bytes + OCL_MIB - 1) / OCL_MIB * OCL_MIB;
}

/* Releases every cached buffer (d->mlock held). */
static void drop_cache_locked(ocl_dev *d) {
    for (ocl_free_blk *b = d->free_list, *n; b; b = n) {
        n = b->next;
        clReleaseMemObject(b->mem);
        free(b);
    }
    d->free_list = NULL;
    d->cached = 0;
}

/* A cached buffer of class cls, or NULL. */
static cl_mem take_cached(ocl_dev *d, size_t cls) {
    cl_mem m = NULL;
    pthread_mutex_lock(&d->mlock);
    for (ocl_free_blk **p = &d->free_list; *p; p = &(*p)->next)
        if ((*p)->cls == cls) {
            ocl_free_blk *b = *p;
            *p = b->next;
            d->cached -= cls;
            m = b->mem;
            free(b);
            break;
        }
    pthread_mutex_unlock(&d->mlock);
    return m;
}

/* Keeps m (of class cls) for reuse, or releases it when the cache is full. */
static void give_back(ocl_dev *d, cl_mem m, size_t cls) {
    ocl_free_blk *b = malloc(sizeof *b);
    pthread_mutex_lock(&d->mlock);
    if (b && d->cached + cls <= d->cache_cap) {
        b->cls = cls, b->mem = m, b->next = d->free_list;
        d->free_list = b;
        d->cached += cls;
        m = NULL;
        b = NULL;
    }
    pthread_mutex_unlock(&d->mlock);
    free(b);
    if (m) clReleaseMemObject(m); /* the queue keeps it alive for enqueued commands */
}

/* A buffer of class size_class(bytes): from the cache, else created (after emptying the
 * cache if creating fails). NULL with the error set (status in *st). */
static cl_mem get_buffer(ocl_dev *d, size_t bytes, em_status *st) {
    if (d->max_alloc && bytes > d->max_alloc) {
        *st = em_backend_set_error(EM_ERR_NOMEM,
                                   "opencl: cannot allocate %zu bytes on %s (opencl:%d): the "
                                   "device's largest allocation (CL_DEVICE_MAX_MEM_ALLOC_SIZE) "
                                   "is %zu bytes",
                                   bytes, d->name, d->index, d->max_alloc);
        return NULL;
    }
    size_t cls = size_class(bytes);
    if (d->max_alloc && cls > d->max_alloc) cls = bytes ? bytes : 1;
    cl_mem m = take_cached(d, cls);
    if (m) {
        *st = EM_OK;
        return m;
    }
    cl_int err = CL_SUCCESS;
    for (int attempt = 0; attempt < 2 && !m; attempt++) {
        m = clCreateBuffer(d->ctx, CL_MEM_READ_WRITE, cls, NULL, &err);
        if (!m && attempt == 0) {
            pthread_mutex_lock(&d->mlock);
            drop_cache_locked(d);
            pthread_mutex_unlock(&d->mlock);
        }
    }
    if (!m) {
        char what[96];
        snprintf(what, sizeof what, "clCreateBuffer(%zu bytes)", bytes);
        *st = ocl_fail(err, what);
        if (err == CL_OUT_OF_RESOURCES || err == CL_INVALID_BUFFER_SIZE) *st = EM_ERR_NOMEM;
        return NULL;
    }
    *st = EM_OK;
    return m;
}

/* Adds bytes to the in-use count and raises the peak. */
static void count_in(ocl_dev *d, size_t bytes) {
    size_t now = atomic_fetch_add_explicit(&d->in_use, bytes, memory_order_relaxed) + bytes;
    size_t pk = atomic_load_explicit(&d->peak, memory_order_relaxed);
    while (now > pk && !atomic_compare_exchange_weak_explicit(&d->peak, &pk, now,
                                                              memory_order_relaxed,
                                                              memory_order_relaxed)) {
    }
}

em_status ocl_alloc(void *ctx, size_t bytes, void **buf) {
    ocl_dev *d = ctx;
    ocl_buf *b = malloc(sizeof *b);
    if (!b) return em_backend_set_error(EM_ERR_NOMEM, "opencl: out of host memory");
    em_status st;
    b->mem = get_buffer(d, bytes, &st);
    if (!b->mem) {
        free(b);
        return st;
    }
    b->bytes = bytes;
    count_in(d, bytes);
    *buf = b;
    return EM_OK;
}

void ocl_free(void *ctx, void *buf) {
    ocl_dev *d = ctx;
    ocl_buf *b = buf;
    if (!b) return;
    atomic_fetch_sub_explicit(&d->in_use, b->bytes, memory_order_relaxed);
    size_t cls = size_class(b->bytes);
    if (d->max_alloc && cls > d->max_alloc) cls = b->bytes ? b->bytes : 1;
    give_back(d, b->mem, cls);
    free(b);
}

void ocl_memory(void *ctx, size_t *in_use, size_t *peak) {
    ocl_dev *d = ctx;
    if (in_use) *in_use = atomic_load(&d->in_use);
    if (peak) *peak = atomic_load(&d->peak);
}

void ocl_memory_reset_peak(void *ctx) {
    ocl_dev *d = ctx;
    atomic_store(&d->peak, atomic_load(&d->in_use));
}

size_t ocl_memory_cached(void *ctx) {
    ocl_dev *d = ctx;
    pthread_mutex_lock(&d->mlock);
    size_t c = d->cached;
    pthread_mutex_unlock(&d->mlock);
    return c;
}

void ocl_memory_release(void *ctx) {
    ocl_dev *d = ctx;
    pthread_mutex_lock(&d->mlock);
    drop_cache_locked(d);
    pthread_mutex_unlock(&d->mlock);
}

em_status ocl_scratch(ocl_dev *d, size_t bytes, cl_mem *out) {
    em_status st;
    *out = get_buffer(d, bytes, &st);
    return st;
}

void ocl_scratch_free(ocl_dev *d, cl_mem m) {
    if (!m) return;
    size_t sz = 0;
    if (clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof sz, &sz, NULL) != CL_SUCCESS || !sz) {
        clReleaseMemObject(m);
        return;
    }
    give_back(d, m, sz);
}
