/*
 * vk_internal.h — what vulkan.c, stream.c and alloc.c share beyond vk.h: the device record,
 * the batches of recorded work, the embedded SPIR-V table.
 */
#ifndef EMBER_VK_INTERNAL_H
#define EMBER_VK_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "vk.h"

/** One embedded shader variant (the generated vk_spirv.c). */
typedef struct vk_spirv {
    const char *name;
    const uint32_t *code;
    size_t bytes;
} vk_spirv;
extern const vk_spirv vk_spirv_table[];
extern const size_t vk_spirv_count;

/** A command buffer being recorded or in flight, with what its dispatches need until it
 *  completes: their descriptor sets, their parameters (the arena) and the buffers freed
 *  while it was pending (released when it completes). */
typedef struct vk_batch {
    VkCommandPool pool;
    VkCommandBuffer cb;
    VkFence fence;
    VkDescriptorPool dpool;
    vk_buf *arena;      /* host-visible parameters of the batch's dispatches */
    size_t arena_used;  /* bytes of arena used */
    int ndisp;          /* dispatches recorded (descriptor sets used) */
    vk_buf *deferred;   /* buffers to release when the batch completes */
    struct vk_batch *next;
} vk_batch;

#define VK_BATCH_DISPATCHES 512 /* descriptor sets (dispatches) a batch holds */
#define VK_PARAM_STRIDE 768     /* arena bytes per dispatch (sizeof(vk_params) rounded up) */

typedef struct vk_pipe vk_pipe; /* a created pipeline (stream.c) */

struct vk_dev {
    int index; /* N of vulkan:N */
    VkPhysicalDevice phys;
    VkDevice dev;
    VkQueue queue;
    uint32_t qfamily;
    char name[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE];
    uint32_t vendor, device_id, driver_version, api_version;
    uint8_t cache_uuid[VK_UUID_SIZE];
    bool f64, i64, s8, s16;     /* features enabled: shaderFloat64, shaderInt64, 8/16-bit */
    bool staging;               /* buffers are not host-mapped: transfers go through staging */
    uint32_t dev_type;          /* memory type of tensor buffers */
    uint32_t host_type;         /* host-visible, coherent memory type (staging, parameters) */
    VkDeviceSize max_range;     /* maxStorageBufferRange */
    VkDeviceSize max_alloc;     /* maxMemoryAllocationSize (0: unknown) */
    VkDeviceSize offset_align;  /* minStorageBufferOffsetAlignment */
    uint32_t max_groups[3];     /* maxComputeWorkGroupCount */
    uint32_t groups_1d;         /* the most groups a 1-d grid-stride launch uses (fewer on a
                                   CPU device: each group is a job with its own overhead) */
    pthread_mutex_t lock;       /* pipelines, batches, recording, submission */
    VkDescriptorSetLayout dsl;
    VkPipelineLayout layout;
    VkPipelineCache pcache;
    vk_pipe **pipes;            /* hash table of created pipelines */
    size_t npipes_cap;
    vk_batch *cur;              /* being recorded, or NULL */
    vk_batch *pend_head, *pend_tail; /* submitted, oldest first */
    vk_batch *idle;             /* free batches */
    vk_buf *dummy;              /* bound where a dispatch has fewer buffers */
    /* the allocator (alloc.c) */
    pthread_mutex_t mlock;
    vk_buf *cache[64];          /* free buffers by size class */
    size_t cached, cache_cap;
    vk_buf *scache[64];         /* free staging buffers by size class */
    size_t scached;             /* their bytes (at most VK_STAGING_CACHE) */
    vk_buf *live;               /* tensor buffers handed out (destroyed at exit with the rest:
                                   the core may still cache some then) */
    atomic_size_t in_use, peak;
};

/* alloc.c: the table's memory slots and raw buffers */
em_status vk_alloc(void *ctx, size_t bytes, void **buf);
void vk_free(void *ctx, void *buf);
void vk_memory(void *ctx, size_t *in_use, size_t *peak);
void vk_memory_reset_peak(void *ctx);
size_t vk_memory_cached(void *ctx);
void vk_memory_release(void *ctx);
/** Destroys every tensor buffer still handed out (at exit, the device idle). */
void vk_destroy_live(vk_dev *d);
/** A buffer of `bytes` of memory type `type` (mapped when host_visible), not cached. */
em_status vk_buf_create(vk_dev *d, size_t bytes, uint32_t type, bool map, vk_buf **out);
void vk_buf_destroy(vk_dev *d, vk_buf *b);
/** Returns a buffer to its cache (tensor or staging buffers; or destroys it); the caller knows
 *  no work uses it. */
void vk_buf_recycle(vk_dev *d, vk_buf *b);
/** A mapped host-visible staging buffer of at least `bytes`, from the staging cache. Give it
 *  back with vk_release_after (or vk_buf_recycle once no work uses it). */
em_status vk_staging_get(vk_dev *d, size_t bytes, vk_buf **out);
#define VK_STAGING_CACHE ((size_t)256 << 20)

/** True once the backend was torn down at exit (vulkan.c): frees then do nothing. */
bool vk_shut_down(void);
/** Registers the exit teardown again, so that it runs before what the driver registered
 *  since (vulkan.c). */
void vk_exit_guard(void);

/** The memory types a device uses, from its memory properties: *dev_type for tensors and
 *  *host_type (host-visible, coherent; cached and in system memory preferred) for staging and
 *  parameters; *staging true when tensors are not host-mapped. Tensors live on the largest
 *  device-local heap; they are mapped directly only when a host-visible coherent type lives on
 *  that heap (unified memory, lavapipe, a GPU with resizable BAR) and force_staging is false —
 *  a discrete GPU's small host-visible window (256 MiB without resizable BAR) is never used for
 *  tensors. false when there is no usable type. */
bool vk_choose_memory(const VkPhysicalDeviceMemoryProperties *mp, bool force_staging,
                      uint32_t *dev_type, uint32_t *host_type, bool *staging);

/* stream.c: batches (all with d->lock held) */
/** The batch being recorded, begun when none is. */
em_status vk_batch_current(vk_dev *d, vk_batch **out);
/** Submits the batch being recorded, if any. */
em_status vk_flush(vk_dev *d);
/** Submits and waits for all work; releases what completed batches held. */
em_status vk_wait_idle(vk_dev *d);
/** True when nothing is recorded or in flight (after retiring what has completed). */
bool vk_idle(vk_dev *d);
/** Records a barrier ordering the next command after everything before it. */
void vk_barrier(vk_dev *d, VkCommandBuffer cb);
/** Releases b when the work recorded so far has completed (now when there is none). */
void vk_release_after(vk_dev *d, vk_buf *b);
/** Creates the descriptor layout, pipeline layout and pipeline cache of a new device. */
em_status vk_stream_init(vk_dev *d);
/** Destroys everything stream.c made for d (at exit, the device idle). */
void vk_stream_fini(vk_dev *d);
/** Counters for tests: pipelines created, and batches submitted, since start. */
extern atomic_int vk_stat_pipelines, vk_stat_submits;

#endif /* EMBER_VK_INTERNAL_H */
