/*
 * stream.c — the Vulkan backend's work stream: batches of recorded dispatches, pipelines and
 * their disk cache, launches (see vk.h, vk_internal.h).
 *
 * A batch is a command buffer with its fence, a descriptor pool for its dispatches' sets and
 * an arena of host-visible memory for their parameters. Dispatches are recorded into the
 * current batch, each after a global barrier (so every command sees the writes of all earlier
 * ones, in this batch or an earlier one: a barrier's scope is everything before it in
 * submission order). A batch is submitted when it is full, or when the host needs results
 * (vk_wait_idle); submitted batches complete in order and are reused once their fence has
 * signalled. Buffers freed while work is pending are released when the work recorded so far
 * has completed.
 *
 * Pipelines: one per shader variant, created at first use from the embedded SPIR-V through
 * the device's VkPipelineCache. The cache is loaded from and saved to disk: $EMBER_CACHE_DIR,
 * else $XDG_CACHE_HOME/ember/vulkan, else ~/.cache/ember/vulkan, one file per device and
 * driver (named by vendor, device id, driver version and the pipeline cache UUID); the driver
 * checks the header of what it is given and ignores a cache that is not its own.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vk_internal.h"

atomic_int vk_stat_pipelines, vk_stat_submits;

struct vk_pipe {
    char *name;
    VkPipeline pipe;
    struct vk_pipe *next; /* in its hash bucket */
};

/* ---- the disk cache of pipelines ---- */

static int vk_mkdirs(char *path) {
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        int r = mkdir(path, 0755);
        *p = '/';
        if (r != 0 && errno != EEXIST) return -1;
    }
    if (mkdir(path, 0755) != 0 && errno != EEXIST) return -1;
    return 0;
}

/* The cache file of device d into path (false when no folder is usable). */
static bool vk_cache_path(const vk_dev *d, char *path, size_t cap) {
    char dir[3072];
    const char *e = getenv("EMBER_CACHE_DIR"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (e && *e) snprintf(dir, sizeof dir, "%s", e);
    else if (x && *x) snprintf(dir, sizeof dir, "%s/ember/vulkan", x);
    else if (h && *h) snprintf(dir, sizeof dir, "%s/.cache/ember/vulkan", h);
    else return false;
    if (vk_mkdirs(dir) != 0) return false;
    char uuid[2 * VK_UUID_SIZE + 1];
    for (unsigned i = 0; i < VK_UUID_SIZE; i++) snprintf(uuid + 2 * i, 3, "%02x", d->cache_uuid[i]);
    int n = snprintf(path, cap, "%s/pipelines-%04x-%04x-%08x-%s.bin", dir, d->vendor,
                     d->device_id, d->driver_version, uuid);
    return n > 0 && (size_t)n < cap;
}

static void *vk_cache_load(const vk_dev *d, size_t *len) {
    char path[4096];
    *len = 0;
    if (!vk_cache_path(d, path, sizeof path)) return NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    void *data = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n > 0 && n < (64L << 20) && fseek(f, 0, SEEK_SET) == 0) {
            data = malloc((size_t)n);
            if (data && fread(data, 1, (size_t)n, f) == (size_t)n) *len = (size_t)n;
            else free(data), data = NULL;
        }
    }
    fclose(f);
    return data;
}

/* Saves the device's pipeline cache (atomically: a temporary file renamed; failures are
 * ignored). */
static void vk_cache_save(vk_dev *d) {
    size_t n = 0;
    if (vkGetPipelineCacheData(d->dev, d->pcache, &n, NULL) != VK_SUCCESS || !n) return;
    void *data = malloc(n);
    char path[4096], tmp[4200];
    if (data && vkGetPipelineCacheData(d->dev, d->pcache, &n, data) == VK_SUCCESS &&
        vk_cache_path(d, path, sizeof path)) {
        snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
        FILE *f = fopen(tmp, "wb");
        if (f) {
            bool ok = fwrite(data, 1, n, f) == n;
            ok &= fclose(f) == 0;
            if (!ok || rename(tmp, path) != 0) remove(tmp);
        }
    }
    free(data);
}

/* ---- set-up ---- */

em_status vk_stream_init(vk_dev *d) {
    VkDescriptorSetLayoutBinding b[1 + VK_MAX_BUFS];
    for (int i = 0; i <= VK_MAX_BUFS; i++)
        b[i] = (VkDescriptorSetLayoutBinding){.binding = (uint32_t)i,
                                              .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              .descriptorCount = 1,
                                              .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo li = {.sType =
                                              VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                          .bindingCount = 1 + VK_MAX_BUFS,
                                          .pBindings = b};
    VkResult r = vkCreateDescriptorSetLayout(d->dev, &li, NULL, &d->dsl);
    if (r != VK_SUCCESS) return vk_fail(r, "vkCreateDescriptorSetLayout");
    VkPipelineLayoutCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                     .setLayoutCount = 1,
                                     .pSetLayouts = &d->dsl};
    r = vkCreatePipelineLayout(d->dev, &pi, NULL, &d->layout);
    if (r != VK_SUCCESS) return vk_fail(r, "vkCreatePipelineLayout");
    size_t len = 0;
    void *data = vk_cache_load(d, &len);
    VkPipelineCacheCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO,
                                    .initialDataSize = len,
                                    .pInitialData = data};
    r = vkCreatePipelineCache(d->dev, &ci, NULL, &d->pcache);
    if (r != VK_SUCCESS && data) { /* a cache the driver refuses: start empty */
        ci.initialDataSize = 0;
        ci.pInitialData = NULL;
        r = vkCreatePipelineCache(d->dev, &ci, NULL, &d->pcache);
    }
    free(data);
    if (r != VK_SUCCESS) return vk_fail(r, "vkCreatePipelineCache");
    d->npipes_cap = 256;
    d->pipes = calloc(d->npipes_cap, sizeof *d->pipes);
    if (!d->pipes) return em_backend_set_error(EM_ERR_NOMEM, "vulkan: out of host memory");
    return EM_OK;
}

static void vk_batch_destroy(vk_dev *d, vk_batch *b) {
    if (!b) return;
    while (b->deferred) {
        vk_buf *x = b->deferred;
        b->deferred = x->next;
        vk_buf_destroy(d, x);
    }
    if (b->arena) vk_buf_destroy(d, b->arena);
    if (b->dpool) vkDestroyDescriptorPool(d->dev, b->dpool, NULL);
    if (b->fence) vkDestroyFence(d->dev, b->fence, NULL);
    if (b->pool) vkDestroyCommandPool(d->dev, b->pool, NULL); /* frees its command buffer */
    free(b);
}

void vk_stream_fini(vk_dev *d) {
    if (d->pcache) {
        if (atomic_load(&vk_stat_pipelines) > 0) vk_cache_save(d);
        vkDestroyPipelineCache(d->dev, d->pcache, NULL);
        d->pcache = VK_NULL_HANDLE;
    }
    if (d->pipes) {
        for (size_t i = 0; i < d->npipes_cap; i++)
            for (vk_pipe *p = d->pipes[i], *n; p; p = n) {
                n = p->next;
                vkDestroyPipeline(d->dev, p->pipe, NULL);
                free(p->name);
                free(p);
            }
        free(d->pipes);
        d->pipes = NULL;
    }
    vk_batch_destroy(d, d->cur);
    d->cur = NULL;
    for (vk_batch *b = d->pend_head, *n; b; b = n) n = b->next, vk_batch_destroy(d, b);
    for (vk_batch *b = d->idle, *n; b; b = n) n = b->next, vk_batch_destroy(d, b);
    d->pend_head = d->pend_tail = d->idle = NULL;
    if (d->layout) vkDestroyPipelineLayout(d->dev, d->layout, NULL);
    if (d->dsl) vkDestroyDescriptorSetLayout(d->dev, d->dsl, NULL);
    d->layout = VK_NULL_HANDLE;
    d->dsl = VK_NULL_HANDLE;
}

/* ---- batches ---- */

static em_status vk_batch_new(vk_dev *d, vk_batch **out) {
    vk_batch *b = calloc(1, sizeof *b);
    if (!b) return em_backend_set_error(EM_ERR_NOMEM, "vulkan: out of host memory");
    VkCommandPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                  .flags = VK_COMMAND_POOL_CREATE_TRANSIENT_BIT,
                                  .queueFamilyIndex = d->qfamily};
    VkResult r = vkCreateCommandPool(d->dev, &pi, NULL, &b->pool);
    const char *what = "vkCreateCommandPool";
    if (r == VK_SUCCESS) {
        VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                          .commandPool = b->pool,
                                          .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                          .commandBufferCount = 1};
        r = vkAllocateCommandBuffers(d->dev, &ai, &b->cb);
        what = "vkAllocateCommandBuffers";
    }
    if (r == VK_SUCCESS) {
        VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
        r = vkCreateFence(d->dev, &fi, NULL, &b->fence);
        what = "vkCreateFence";
    }
    if (r == VK_SUCCESS) {
        VkDescriptorPoolSize ps = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                   .descriptorCount = VK_BATCH_DISPATCHES * (1 + VK_MAX_BUFS)};
        VkDescriptorPoolCreateInfo di = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                         .maxSets = VK_BATCH_DISPATCHES,
                                         .poolSizeCount = 1,
                                         .pPoolSizes = &ps};
        r = vkCreateDescriptorPool(d->dev, &di, NULL, &b->dpool);
        what = "vkCreateDescriptorPool";
    }
    if (r != VK_SUCCESS) {
        vk_batch_destroy(d, b);
        return vk_fail(r, what);
    }
    em_status s = vk_buf_create(d, (size_t)VK_BATCH_DISPATCHES * VK_PARAM_STRIDE, d->host_type,
                                true, &b->arena);
    if (s != EM_OK) {
        vk_batch_destroy(d, b);
        return s;
    }
    *out = b;
    return EM_OK;
}

/* Releases what a completed batch held and puts it on the idle list. */
static void vk_batch_retire(vk_dev *d, vk_batch *b) {
    while (b->deferred) {
        vk_buf *x = b->deferred;
        b->deferred = x->next;
        if (x->cap) vk_buf_recycle(d, x); /* a tensor or staging buffer: to its cache */
        else vk_buf_destroy(d, x);        /* one outside the caches */
    }
    vkResetFences(d->dev, 1, &b->fence);
    b->next = d->idle;
    d->idle = b;
}

/* Retires the submitted batches that have completed (wait: all of them, waiting). */
static em_status vk_retire(vk_dev *d, bool wait) {
    if (wait && d->pend_tail) {
        VkResult r = vkWaitForFences(d->dev, 1, &d->pend_tail->fence, VK_TRUE, UINT64_MAX);
        if (r != VK_SUCCESS) return vk_fail(r, "vkWaitForFences");
    }
    while (d->pend_head) {
        vk_batch *b = d->pend_head;
        VkResult r = vkGetFenceStatus(d->dev, b->fence);
        if (r == VK_NOT_READY) break;
        if (r != VK_SUCCESS) return vk_fail(r, "vkGetFenceStatus");
        d->pend_head = b->next;
        if (!d->pend_head) d->pend_tail = NULL;
        vk_batch_retire(d, b);
    }
    return EM_OK;
}

em_status vk_batch_current(vk_dev *d, vk_batch **out) {
    if (d->cur) {
        *out = d->cur;
        return EM_OK;
    }
    em_status s = vk_retire(d, false);
    if (s != EM_OK) return s;
    vk_batch *b = d->idle;
    if (b) {
        d->idle = b->next;
    } else {
        s = vk_batch_new(d, &b);
        if (s != EM_OK) return s;
    }
    b->next = NULL;
    b->ndisp = 0;
    b->arena_used = 0;
    VkResult r = vkResetCommandPool(d->dev, b->pool, 0);
    if (r == VK_SUCCESS) r = vkResetDescriptorPool(d->dev, b->dpool, 0);
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    if (r == VK_SUCCESS) r = vkBeginCommandBuffer(b->cb, &bi);
    if (r != VK_SUCCESS) {
        b->next = d->idle;
        d->idle = b;
        return vk_fail(r, "vkBeginCommandBuffer");
    }
    d->cur = b;
    *out = b;
    return EM_OK;
}

em_status vk_flush(vk_dev *d) {
    vk_batch *b = d->cur;
    if (!b) return EM_OK;
    d->cur = NULL;
    VkResult r = vkEndCommandBuffer(b->cb);
    const char *what = "vkEndCommandBuffer";
    if (r == VK_SUCCESS) {
        VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                           .commandBufferCount = 1,
                           .pCommandBuffers = &b->cb};
        r = vkQueueSubmit(d->queue, 1, &si, b->fence);
        what = "vkQueueSubmit";
    }
    if (r != VK_SUCCESS) {
        /* nothing of it runs: release what it held now */
        vk_batch_retire(d, b);
        return vk_fail(r, what);
    }
    atomic_fetch_add(&vk_stat_submits, 1);
    if (d->pend_tail) d->pend_tail->next = b;
    else d->pend_head = b;
    d->pend_tail = b;
    b->next = NULL;
    return EM_OK;
}

em_status vk_wait_idle(vk_dev *d) {
    em_status s = vk_flush(d);
    em_status w = vk_retire(d, true);
    return s != EM_OK ? s : w;
}

bool vk_idle(vk_dev *d) {
    if (d->cur) return false;
    if (vk_retire(d, false) != EM_OK) return false;
    return d->pend_head == NULL;
}

void vk_barrier(vk_dev *d, VkCommandBuffer cb) {
    (void)d;
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                           VK_ACCESS_TRANSFER_READ_BIT |
                                           VK_ACCESS_TRANSFER_WRITE_BIT};
    VkPipelineStageFlags st = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    vkCmdPipelineBarrier(cb, st, st, 0, 1, &mb, 0, NULL, 0, NULL);
}

void vk_release_after(vk_dev *d, vk_buf *b) {
    vk_batch *last = d->cur ? d->cur : d->pend_tail;
    if (last && !d->cur && vk_retire(d, false) == EM_OK && !d->pend_head) last = NULL;
    if (!last) {
        vk_buf_recycle(d, b);
        return;
    }
    b->next = last->deferred;
    last->deferred = b;
}

/* ---- pipelines ---- */

static size_t vk_hash(const char *s) {
    size_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static const vk_spirv *vk_find_spirv(const char *name) {
    for (size_t i = 0; i < vk_spirv_count; i++)
        if (strcmp(vk_spirv_table[i].name, name) == 0) return &vk_spirv_table[i];
    return NULL;
}

/* The pipeline of a variant, specialized with op as constant 0 (-1: none) and contig as
 * constant 1 (1: every view of the dispatch is contiguous), created at first use. With
 * d->lock held. */
static em_status vk_pipeline(vk_dev *d, const char *variant, int op, int contig,
                             VkPipeline *out) {
    char key[160];
    snprintf(key, sizeof key, "%s#%d#%d", variant, op, contig);
    size_t h = vk_hash(key) % d->npipes_cap;
    for (vk_pipe *p = d->pipes[h]; p; p = p->next)
        if (strcmp(p->name, key) == 0) {
            *out = p->pipe;
            return EM_OK;
        }
    const vk_spirv *sp = vk_find_spirv(variant);
    if (!sp)
        return em_backend_set_error(EM_ERR_UNSUPPORTED,
                                    "vulkan: no shader variant '%s' in this build", variant);
    VkShaderModuleCreateInfo mi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                   .codeSize = sp->bytes,
                                   .pCode = sp->code};
    VkShaderModule mod;
    VkResult r = vkCreateShaderModule(d->dev, &mi, NULL, &mod);
    if (r != VK_SUCCESS) return vk_fail(r, "vkCreateShaderModule");
    int32_t sv[2] = {op, contig};
    VkSpecializationMapEntry me[2] = {{.constantID = 0, .offset = 0, .size = sizeof sv[0]},
                                      {.constantID = 1, .offset = sizeof sv[0], .size = sizeof sv[1]}};
    VkSpecializationInfo si = {.mapEntryCount = 2, .pMapEntries = me, .dataSize = sizeof sv,
                               .pData = sv};
    VkComputePipelineCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = mod,
                  .pName = "main",
                  .pSpecializationInfo = &si},
        .layout = d->layout};
    VkPipeline pipe;
    r = vkCreateComputePipelines(d->dev, d->pcache, 1, &ci, NULL, &pipe);
    vkDestroyShaderModule(d->dev, mod, NULL);
    if (r != VK_SUCCESS) {
        em_status s = vk_fail(r, "vkCreateComputePipelines");
        return em_backend_set_error(s, "vulkan: creating the pipeline of '%s' failed: %s (%d)",
                                    variant, vk_result_name(r), (int)r);
    }
    vk_pipe *p = calloc(1, sizeof *p);
    char *name = p ? strdup(key) : NULL;
    if (!name) {
        free(p);
        vkDestroyPipeline(d->dev, pipe, NULL);
        return em_backend_set_error(EM_ERR_NOMEM, "vulkan: out of host memory");
    }
    p->name = name;
    p->pipe = pipe;
    p->next = d->pipes[h];
    d->pipes[h] = p;
    atomic_fetch_add(&vk_stat_pipelines, 1);
    vk_exit_guard();
    *out = pipe;
    return EM_OK;
}

/* ---- launches ---- */

em_status vk_launch(vk_dev *d, const char *variant, const uint32_t groups[3],
                    const vk_params *p, int nbufs, vk_buf *const *bufs) {
    return vk_launch_op(d, variant, -1, groups, p, nbufs, bufs);
}

em_status vk_launch_op(vk_dev *d, const char *variant, int op, const uint32_t groups[3],
                       const vk_params *p, int nbufs, vk_buf *const *bufs) {
    if (!groups[0] || !groups[1] || !groups[2]) return EM_OK;
    if (nbufs < 0 || nbufs > VK_MAX_BUFS)
        return em_backend_set_error(EM_ERR_ARG, "vulkan: %d buffers for '%s' (at most %d)",
                                    nbufs, variant, VK_MAX_BUFS);
    for (int k = 0; k < 3; k++)
        if (groups[k] > d->max_groups[k])
            return em_backend_set_error(EM_ERR_UNSUPPORTED,
                                        "vulkan: '%s': %u workgroups in dimension %d, above the "
                                        "device's %u",
                                        variant, groups[k], k, d->max_groups[k]);
    /* all the views contiguous: vidx folds to offset + i (a driver running invocations as
     * SIMD lanes otherwise walks the strided path's divisions in every lane) */
    int contig = 0;
    for (int k = 0; k < VK_MAX_VIEWS; k++) {
        if (p->v[k].numel > 0 && !p->v[k].contig) {
            contig = 0;
            break;
        }
        if (p->v[k].numel > 0) contig = 1;
    }
    pthread_mutex_lock(&d->lock);
    VkPipeline pipe = VK_NULL_HANDLE;
    em_status s = vk_pipeline(d, variant, op, contig, &pipe);
    vk_batch *b = NULL;
    if (s == EM_OK && d->cur && d->cur->ndisp >= VK_BATCH_DISPATCHES) s = vk_flush(d);
    if (s == EM_OK) s = vk_batch_current(d, &b);
    if (s != EM_OK) {
        pthread_mutex_unlock(&d->lock);
        return s;
    }
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                      .descriptorPool = b->dpool,
                                      .descriptorSetCount = 1,
                                      .pSetLayouts = &d->dsl};
    VkDescriptorSet set;
    VkResult r = vkAllocateDescriptorSets(d->dev, &ai, &set);
    if (r != VK_SUCCESS) {
        pthread_mutex_unlock(&d->lock);
        return vk_fail(r, "vkAllocateDescriptorSets");
    }
    size_t off = b->arena_used;
    memcpy((char *)b->arena->map + off, p, sizeof *p);
    b->arena_used += VK_PARAM_STRIDE;
    b->ndisp++;
    VkDescriptorBufferInfo bi[1 + VK_MAX_BUFS];
    VkWriteDescriptorSet w[1 + VK_MAX_BUFS];
    bi[0] = (VkDescriptorBufferInfo){.buffer = b->arena->buffer,
                                     .offset = off,
                                     .range = sizeof(vk_params)};
    for (int k = 1; k <= VK_MAX_BUFS; k++) {
        vk_buf *x = k <= nbufs && bufs[k - 1] ? bufs[k - 1] : d->dummy;
        bi[k] = (VkDescriptorBufferInfo){.buffer = x->buffer, .offset = 0, .range = VK_WHOLE_SIZE};
    }
    for (int k = 0; k <= VK_MAX_BUFS; k++)
        w[k] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                      .dstSet = set,
                                      .dstBinding = (uint32_t)k,
                                      .descriptorCount = 1,
                                      .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      .pBufferInfo = &bi[k]};
    vkUpdateDescriptorSets(d->dev, 1 + VK_MAX_BUFS, w, 0, NULL);
    vk_barrier(d, b->cb);
    vkCmdBindPipeline(b->cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
    vkCmdBindDescriptorSets(b->cb, VK_PIPELINE_BIND_POINT_COMPUTE, d->layout, 0, 1, &set, 0, NULL);
    vkCmdDispatch(b->cb, groups[0], groups[1], groups[2]);
    pthread_mutex_unlock(&d->lock);
    return EM_OK;
}

em_status vk_launch_1d(vk_dev *d, const char *variant, int64_t n, const vk_params *p,
                       int nbufs, vk_buf *const *bufs) {
    return vk_launch_1d_op(d, variant, -1, n, p, nbufs, bufs);
}

em_status vk_launch_1d_op(vk_dev *d, const char *variant, int op, int64_t n, const vk_params *p,
                          int nbufs, vk_buf *const *bufs) {
    if (n <= 0) return EM_OK;
    int64_t g = (n + VK_WG - 1) / VK_WG;
    if (g > (int64_t)d->groups_1d) g = d->groups_1d;
    uint32_t groups[3] = {(uint32_t)g, 1, 1};
    return vk_launch_op(d, variant, op, groups, p, nbufs, bufs);
}

em_status vk_scratch(vk_dev *d, size_t bytes, vk_buf **out) {
    void *b;
    em_status s = vk_alloc(d, bytes ? bytes : 4, &b);
    if (s == EM_OK) *out = b;
    return s;
}

void vk_scratch_free(vk_dev *d, vk_buf *b) { vk_free(d, b); }
