/*
 * alloc.c — the Vulkan backend's buffers: one VkBuffer with its own memory each, kept in a
 * cache by size class when freed (a device allows a few thousand memory objects at most, and
 * creating one costs a driver call and fresh pages).
 *
 * Size classes: powers of two from 256 bytes, and from 1 MiB steps of a quarter of the power
 * of two (so a class wastes at most a quarter). A freed buffer is released once the work
 * recorded before the free has completed (stream.c), then cached while the cache holds less
 * than d->cache_cap bytes, else destroyed. A request above the device's storage-buffer range
 * (a binding cannot hold it) or its largest allocation is refused with EM_ERR_UNSUPPORTED
 * naming the limit; an allocation the driver refuses for lack of memory releases the cache and
 * retries once, then is EM_ERR_NOMEM.
 */
#include <stdlib.h>
#include <string.h>

#include "vk_internal.h"

/* The size class of n bytes, and its index. */
static size_t vk_class(size_t n, int *idx) {
    size_t c = 256;
    int i = 0;
    while (c < n && c < ((size_t)1 << 20)) c <<= 1, i++;
    if (c >= n) {
        *idx = i;
        return c;
    }
    /* from 1 MiB: p, 1.25p, 1.5p, 1.75p, 2p, ... */
    size_t p = (size_t)1 << 20;
    i++; /* past the power-of-two classes' last index */
    for (;;) {
        for (int q = 1; q <= 4; q++, i++) {
            size_t s = p + p / 4 * (size_t)q;
            if (s >= n || i >= 63) {
                *idx = i < 63 ? i : 63;
                return s >= n ? s : n;
            }
        }
        p <<= 1;
    }
}

em_status vk_buf_create(vk_dev *d, size_t bytes, uint32_t type, bool map, vk_buf **out) {
    vk_buf *b = calloc(1, sizeof *b);
    if (!b) return em_backend_set_error(EM_ERR_NOMEM, "vulkan: out of host memory");
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                             .size = bytes ? bytes : 4,
                             .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VkResult r = vkCreateBuffer(d->dev, &bi, NULL, &b->buffer);
    if (r != VK_SUCCESS) {
        free(b);
        return vk_fail(r, "vkCreateBuffer");
    }
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(d->dev, b->buffer, &req);
    if (!(req.memoryTypeBits & (1u << type))) {
        vkDestroyBuffer(d->dev, b->buffer, NULL);
        free(b);
        return em_backend_set_error(EM_ERR_BACKEND,
                                    "vulkan: buffers of %s (vulkan:%d) cannot use memory type %u",
                                    d->name, d->index, type);
    }
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                               .allocationSize = req.size,
                               .memoryTypeIndex = type};
    r = vkAllocateMemory(d->dev, &ai, NULL, &b->memory);
    if (r == VK_SUCCESS) r = vkBindBufferMemory(d->dev, b->buffer, b->memory, 0);
    if (r == VK_SUCCESS && map) r = vkMapMemory(d->dev, b->memory, 0, VK_WHOLE_SIZE, 0, &b->map);
    if (r != VK_SUCCESS) {
        if (b->memory) vkFreeMemory(d->dev, b->memory, NULL);
        vkDestroyBuffer(d->dev, b->buffer, NULL);
        free(b);
        em_status s = vk_fail(r, "vkAllocateMemory");
        return em_backend_set_error(s, "vulkan: allocating %zu bytes on %s (vulkan:%d) failed: "
                                       "%s (%d)",
                                    bytes, d->name, d->index, vk_result_name(r), (int)r);
    }
    b->bytes = bytes;
    *out = b;
    return EM_OK;
}

void vk_buf_destroy(vk_dev *d, vk_buf *b) {
    if (!b) return;
    if (b->map) vkUnmapMemory(d->dev, b->memory);
    vkDestroyBuffer(d->dev, b->buffer, NULL);
    vkFreeMemory(d->dev, b->memory, NULL);
    free(b);
}

em_status vk_alloc(void *ctx, size_t bytes, void **buf) {
    vk_dev *d = ctx;
    if (bytes > d->max_range || (d->max_alloc && bytes > d->max_alloc))
        return em_backend_set_error(EM_ERR_UNSUPPORTED,
                                    "vulkan: a buffer of %zu bytes is above what %s (vulkan:%d) "
                                    "binds to a shader (maxStorageBufferRange %llu bytes, "
                                    "maxMemoryAllocationSize %llu)",
                                    bytes, d->name, d->index, (unsigned long long)d->max_range,
                                    (unsigned long long)d->max_alloc);
    int idx;
    size_t cap = vk_class(bytes ? bytes : 1, &idx);
    if (cap > d->max_range) cap = bytes;
    vk_buf *b = NULL;
    pthread_mutex_lock(&d->mlock);
    for (vk_buf **pp = &d->cache[idx]; *pp; pp = &(*pp)->next)
        if ((*pp)->cap == cap) {
            b = *pp;
            *pp = b->next;
            d->cached -= b->cap;
            break;
        }
    pthread_mutex_unlock(&d->mlock);
    if (!b) {
        bool map = !d->staging;
        em_status s = vk_buf_create(d, cap, d->dev_type, map, &b);
        if (s == EM_ERR_NOMEM) {
            vk_memory_release(d);
            s = vk_buf_create(d, cap, d->dev_type, map, &b);
        }
        if (s != EM_OK) return s;
        b->cap = cap;
    }
    b->bytes = bytes;
    b->next = NULL;
    pthread_mutex_lock(&d->mlock);
    b->lprev = NULL;
    b->lnext = d->live;
    if (d->live) d->live->lprev = b;
    d->live = b;
    pthread_mutex_unlock(&d->mlock);
    size_t now = atomic_fetch_add(&d->in_use, cap) + cap;
    size_t pk = atomic_load(&d->peak);
    while (now > pk && !atomic_compare_exchange_weak(&d->peak, &pk, now)) {
    }
    *buf = b;
    return EM_OK;
}

em_status vk_staging_get(vk_dev *d, size_t bytes, vk_buf **out) {
    int idx;
    size_t cap = vk_class(bytes ? bytes : 1, &idx);
    vk_buf *b = NULL;
    pthread_mutex_lock(&d->mlock);
    for (vk_buf **pp = &d->scache[idx]; *pp; pp = &(*pp)->next)
        if ((*pp)->cap == cap) {
            b = *pp;
            *pp = b->next;
            d->scached -= b->cap;
            break;
        }
    pthread_mutex_unlock(&d->mlock);
    if (!b) {
        em_status s = vk_buf_create(d, cap, d->host_type, true, &b);
        if (s == EM_ERR_NOMEM) {
            vk_memory_release(d);
            s = vk_buf_create(d, cap, d->host_type, true, &b);
        }
        if (s != EM_OK) return s;
        b->cap = cap;
        b->staging = true;
    }
    b->bytes = bytes;
    b->next = NULL;
    *out = b;
    return EM_OK;
}

void vk_buf_recycle(vk_dev *d, vk_buf *b) {
    int idx;
    vk_class(b->cap, &idx);
    pthread_mutex_lock(&d->mlock);
    if (b->staging) {
        if (d->scached + b->cap <= VK_STAGING_CACHE) {
            b->next = d->scache[idx];
            d->scache[idx] = b;
            d->scached += b->cap;
            b = NULL;
        }
    } else if (d->cached + b->cap <= d->cache_cap) {
        b->next = d->cache[idx];
        d->cache[idx] = b;
        d->cached += b->cap;
        b = NULL;
    }
    pthread_mutex_unlock(&d->mlock);
    if (b) vk_buf_destroy(d, b);
}

void vk_free(void *ctx, void *buf) {
    vk_dev *d = ctx;
    vk_buf *b = buf;
    if (!b || vk_shut_down()) return;
    atomic_fetch_sub(&d->in_use, b->cap);
    pthread_mutex_lock(&d->mlock);
    if (b->lprev) b->lprev->lnext = b->lnext;
    else d->live = b->lnext;
    if (b->lnext) b->lnext->lprev = b->lprev;
    b->lprev = b->lnext = NULL;
    pthread_mutex_unlock(&d->mlock);
    pthread_mutex_lock(&d->lock);
    vk_release_after(d, b);
    pthread_mutex_unlock(&d->lock);
}

void vk_memory(void *ctx, size_t *in_use, size_t *peak) {
    vk_dev *d = ctx;
    if (in_use) *in_use = atomic_load(&d->in_use);
    if (peak) *peak = atomic_load(&d->peak);
}

void vk_memory_reset_peak(void *ctx) {
    vk_dev *d = ctx;
    atomic_store(&d->peak, atomic_load(&d->in_use));
}

size_t vk_memory_cached(void *ctx) {
    vk_dev *d = ctx;
    pthread_mutex_lock(&d->mlock);
    size_t n = d->cached;
    pthread_mutex_unlock(&d->mlock);
    return n;
}

void vk_memory_release(void *ctx) {
    vk_dev *d = ctx;
    pthread_mutex_lock(&d->mlock);
    vk_buf *all = NULL;
    for (int i = 0; i < 64; i++) {
        while (d->cache[i]) {
            vk_buf *b = d->cache[i];
            d->cache[i] = b->next;
            b->next = all;
            all = b;
        }
        while (d->scache[i]) {
            vk_buf *b = d->scache[i];
            d->scache[i] = b->next;
            b->next = all;
            all = b;
        }
    }
    d->cached = 0;
    d->scached = 0;
    pthread_mutex_unlock(&d->mlock);
    while (all) {
        vk_buf *b = all;
        all = b->next;
        vk_buf_destroy(d, b);
    }
}

void vk_destroy_live(vk_dev *d) {
    pthread_mutex_lock(&d->mlock);
    vk_buf *all = d->live;
    d->live = NULL;
    pthread_mutex_unlock(&d->mlock);
    while (all) {
        vk_buf *b = all;
        all = b->lnext;
        vk_buf_destroy(d, b);
    }
}
