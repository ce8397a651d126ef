/*
 * vulkan.c — the Vulkan backend's table, its instance and devices, transfers and small
 * helpers (see vk.h). The allocator is alloc.c; batches, pipelines and launches stream.c.
 *
 * The instance is created at the first device query. No loader driver (VK_ERROR_INCOMPATIBLE_
 * DRIVER), or no device with a compute queue: zero devices, not an error. A device's logical
 * device is created at its first `open` and kept until exit, when every opened device is
 * waited for and destroyed in order (then the instance).
 *
 * Environment:
 *   EMBER_VULKAN_STAGING=1     never map tensor buffers: every transfer goes through a staging
 *                              buffer and a copy command (the path of devices whose memory the
 *                              host cannot map; lavapipe's can, so tests force it).
 *   EMBER_VULKAN_VALIDATION=1  enable VK_LAYER_KHRONOS_validation (when installed) and print
 *                              each message it reports to stderr as "ember: vulkan validation:".
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vk_internal.h"

extern const em_backend_ops em_vulkan_backend_ops;

_Static_assert(EM_MAX_RANK <= VK_MAX_RANK, "views must fit view_t");
_Static_assert(sizeof(vk_view_arg) == 80, "vk_view_arg must match common.glsl's view_t");
_Static_assert(sizeof(vk_params) <= VK_PARAM_STRIDE, "vk_params must fit the arena stride");

/* ---- errors ---- */

const char *vk_result_name(VkResult r) {
    switch (r) {
#define N(x) case x: return #x;
    N(VK_SUCCESS) N(VK_NOT_READY) N(VK_TIMEOUT) N(VK_EVENT_SET) N(VK_EVENT_RESET)
    N(VK_INCOMPLETE) N(VK_ERROR_OUT_OF_HOST_MEMORY) N(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    N(VK_ERROR_INITIALIZATION_FAILED) N(VK_ERROR_DEVICE_LOST) N(VK_ERROR_MEMORY_MAP_FAILED)
    N(VK_ERROR_LAYER_NOT_PRESENT) N(VK_ERROR_EXTENSION_NOT_PRESENT)
    N(VK_ERROR_FEATURE_NOT_PRESENT) N(VK_ERROR_INCOMPATIBLE_DRIVER) N(VK_ERROR_TOO_MANY_OBJECTS)
    N(VK_ERROR_FORMAT_NOT_SUPPORTED) N(VK_ERROR_FRAGMENTED_POOL) N(VK_ERROR_UNKNOWN)
    N(VK_ERROR_OUT_OF_POOL_MEMORY) N(VK_ERROR_INVALID_EXTERNAL_HANDLE) N(VK_ERROR_FRAGMENTATION)
    N(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS) N(VK_PIPELINE_COMPILE_REQUIRED)
#undef N
    default: return "VK_ERROR_(unnamed)";
    }
}

em_status vk_fail(VkResult r, const char *what) {
    em_status s = (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY ||
                   r == VK_ERROR_OUT_OF_POOL_MEMORY || r == VK_ERROR_FRAGMENTED_POOL)
                      ? EM_ERR_NOMEM
                      : EM_ERR_BACKEND;
    return em_backend_set_error(s, "vulkan: %s failed: %s (%d)", what, vk_result_name(r), (int)r);
}

/* ---- the instance and the device list ---- */

static pthread_once_t vk_list_once = PTHREAD_ONCE_INIT;
static VkInstance vk_instance;
static VkDebugUtilsMessengerEXT vk_messenger;
static VkPhysicalDevice *vk_phys;
static uint32_t *vk_qfam; /* the compute queue family of each listed device */
static int vk_ndev;
static vk_dev **vk_devs; /* opened devices, by index */
static pthread_mutex_t vk_open_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool vk_gone; /* torn down at exit: later frees do nothing */

static VKAPI_ATTR VkBool32 VKAPI_CALL vk_debug_cb(VkDebugUtilsMessageSeverityFlagBitsEXT sev,
                                                  VkDebugUtilsMessageTypeFlagsEXT type,
                                                  const VkDebugUtilsMessengerCallbackDataEXT *cb,
                                                  void *user) {
    (void)type, (void)user;
    if (sev >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT)
        fprintf(stderr, "ember: vulkan validation: %s\n", cb && cb->pMessage ? cb->pMessage : "?");
    return VK_FALSE;
}

static bool vk_env_on(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

/* True when the instance layer `name` is installed. */
static bool vk_has_layer(const char *name) {
    uint32_t n = 0;
    if (vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || !n) return false;
    VkLayerProperties *p = calloc(n, sizeof *p);
    bool yes = false;
    if (p && vkEnumerateInstanceLayerProperties(&n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n; i++) yes |= strcmp(p[i].layerName, name) == 0;
    free(p);
    return yes;
}

static bool vk_has_instance_ext(const char *name) {
    uint32_t n = 0;
    if (vkEnumerateInstanceExtensionProperties(NULL, &n, NULL) != VK_SUCCESS || !n) return false;
    VkExtensionProperties *p = calloc(n, sizeof *p);
    bool yes = false;
    if (p && vkEnumerateInstanceExtensionProperties(NULL, &n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n; i++) yes |= strcmp(p[i].extensionName, name) == 0;
    free(p);
    return yes;
}

static void vk_teardown(void);

static void vk_list(void) {
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                             .pApplicationName = "ember",
                             .pEngineName = "ember",
                             .apiVersion = VK_API_VERSION_1_2};
    const char *layers[1], *exts[1];
    uint32_t nl = 0, ne = 0;
    bool debug = false;
    if (vk_env_on("EMBER_VULKAN_VALIDATION")) {
        if (vk_has_layer("VK_LAYER_KHRONOS_validation"))
            layers[nl++] = "VK_LAYER_KHRONOS_validation";
        else
            fprintf(stderr, "ember: vulkan validation: VK_LAYER_KHRONOS_validation is not "
                            "installed (Debian: vulkan-validationlayers)\n");
        if (vk_has_instance_ext(VK_EXT_DEBUG_UTILS_EXTENSION_NAME)) {
            exts[ne++] = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
            debug = true;
        }
    }
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                               .pApplicationInfo = &app,
                               .enabledLayerCount = nl,
                               .ppEnabledLayerNames = layers,
                               .enabledExtensionCount = ne,
                               .ppEnabledExtensionNames = exts};
    /* No loader driver (VK_ERROR_INCOMPATIBLE_DRIVER) or no instance: zero devices. */
    if (vkCreateInstance(&ci, NULL, &vk_instance) != VK_SUCCESS) {
        vk_instance = VK_NULL_HANDLE;
        return;
    }
    if (debug) {
        PFN_vkCreateDebugUtilsMessengerEXT mk = (PFN_vkCreateDebugUtilsMessengerEXT)
            vkGetInstanceProcAddr(vk_instance, "vkCreateDebugUtilsMessengerEXT");
        VkDebugUtilsMessengerCreateInfoEXT mi = {
            .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
            .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                               VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
            .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                           VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                           VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
            .pfnUserCallback = vk_debug_cb};
        if (mk) mk(vk_instance, &mi, NULL, &vk_messenger);
    }
    atexit(vk_teardown);
    uint32_t n = 0;
    if (vkEnumeratePhysicalDevices(vk_instance, &n, NULL) != VK_SUCCESS || !n) return;
    VkPhysicalDevice *all = calloc(n, sizeof *all);
    vk_phys = calloc(n, sizeof *vk_phys);
    vk_qfam = calloc(n, sizeof *vk_qfam);
    vk_devs = calloc(n, sizeof *vk_devs);
    if (!all || !vk_phys || !vk_qfam || !vk_devs ||
        vkEnumeratePhysicalDevices(vk_instance, &n, all) != VK_SUCCESS) {
        free(all);
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        VkPhysicalDeviceProperties pr;
        vkGetPhysicalDeviceProperties(all[i], &pr);
        if (pr.apiVersion < VK_API_VERSION_1_2) continue; /* ember needs Vulkan 1.2 */
        uint32_t nq = 0;
        vkGetPhysicalDeviceQueueFamilyProperties(all[i], &nq, NULL);
        VkQueueFamilyProperties *q = calloc(nq ? nq : 1, sizeof *q);
        if (!q) continue;
        vkGetPhysicalDeviceQueueFamilyProperties(all[i], &nq, q);
        for (uint32_t f = 0; f < nq; f++)
            if (q[f].queueFlags & VK_QUEUE_COMPUTE_BIT) {
                vk_phys[vk_ndev] = all[i];
                vk_qfam[vk_ndev] = f;
                vk_ndev++;
                break;
            }
        free(q);
    }
    free(all);
}

static int vk_device_count(void) {
    pthread_once(&vk_list_once, vk_list);
    return vk_ndev;
}

/* vk_internal.h says what it chooses. */
bool vk_choose_memory(const VkPhysicalDeviceMemoryProperties *mp, bool force_staging,
                      uint32_t *dev_type, uint32_t *host_type, bool *staging) {
    const VkMemoryPropertyFlags dl = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT,
                                hv = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                     VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    uint32_t n = mp->memoryTypeCount < VK_MAX_MEMORY_TYPES ? mp->memoryTypeCount
                                                           : VK_MAX_MEMORY_TYPES;
    /* the largest heap that holds a device-local type */
    VkDeviceSize big = 0;
    for (uint32_t i = 0; i < n; i++) {
        const VkMemoryType *t = &mp->memoryTypes[i];
        if ((t->propertyFlags & dl) && t->heapIndex < mp->memoryHeapCount &&
            mp->memoryHeaps[t->heapIndex].size > big)
            big = mp->memoryHeaps[t->heapIndex].size;
    }
    uint32_t direct = UINT32_MAX, plain = UINT32_MAX, mapped = UINT32_MAX, host = UINT32_MAX;
    int host_score = -1;
    for (uint32_t i = 0; i < n; i++) {
        const VkMemoryType *t = &mp->memoryTypes[i];
        const VkMemoryPropertyFlags f = t->propertyFlags;
        if (t->heapIndex >= mp->memoryHeapCount) continue;
        const bool on_big = mp->memoryHeaps[t->heapIndex].size >= big;
        if ((f & dl) && on_big) {
            if (plain == UINT32_MAX) plain = i;
            if ((f & hv) == hv && direct == UINT32_MAX) direct = i;
        }
        if ((f & hv) == hv) {
            if (mapped == UINT32_MAX) mapped = i;
            /* staging: cached reads back fast; system memory keeps a small window free */
            int score = ((f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) ? 2 : 0) + (!(f & dl) ? 1 : 0);
            if (score > host_score) host_score = score, host = i;
        }
    }
    if (host == UINT32_MAX) return false;
    *host_type = host;
    if (!force_staging && direct != UINT32_MAX) {
        *dev_type = direct, *staging = false;
    } else if (plain != UINT32_MAX) {
        *dev_type = plain, *staging = true;
    } else { /* no device-local type: host memory, mapped unless staging is forced */
        *dev_type = mapped, *staging = force_staging;
    }
    return true;
}

static em_status vk_create(int index, vk_dev **out) {
    vk_dev *d = calloc(1, sizeof *d);
    if (!d) return em_backend_set_error(EM_ERR_NOMEM, "vulkan: out of host memory");
    d->index = index;
    d->phys = vk_phys[index];
    d->qfamily = vk_qfam[index];
    VkPhysicalDeviceProperties pr;
    vkGetPhysicalDeviceProperties(d->phys, &pr);
    snprintf(d->name, sizeof d->name, "%s", pr.deviceName);
    d->vendor = pr.vendorID;
    d->device_id = pr.deviceID;
    d->driver_version = pr.driverVersion;
    d->api_version = pr.apiVersion;
    memcpy(d->cache_uuid, pr.pipelineCacheUUID, VK_UUID_SIZE);
    d->max_range = pr.limits.maxStorageBufferRange;
    d->offset_align = pr.limits.minStorageBufferOffsetAlignment;
    for (int k = 0; k < 3; k++) d->max_groups[k] = pr.limits.maxComputeWorkGroupCount[k];
    /* a device that runs on the CPU (lavapipe) runs each workgroup as a job of its thread
     * pool, at a cost per group: grid-stride launches use few groups there (256 x 256 lanes
     * still split any tensor into enough work for its threads) */
    d->groups_1d = pr.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ? 256 : 65535;
    if (d->groups_1d > d->max_groups[0]) d->groups_1d = d->max_groups[0];
    const char *g1 = getenv("EMBER_VULKAN_GROUPS_1D");
    if (g1 && atoi(g1) > 0) d->groups_1d = (uint32_t)atoi(g1);
    VkPhysicalDeviceMaintenance3Properties m3 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    VkPhysicalDeviceProperties2 pr2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                       .pNext = &m3};
    vkGetPhysicalDeviceProperties2(d->phys, &pr2);
    d->max_alloc = m3.maxMemoryAllocationSize;

    /* features: take what ember's dtypes can use */
    VkPhysicalDeviceVulkan11Features f11 = {.sType =
                                                VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    VkPhysicalDeviceVulkan12Features f12 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, .pNext = &f11};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                    .pNext = &f12};
    vkGetPhysicalDeviceFeatures2(d->phys, &f2);
    d->i64 = f2.features.shaderInt64;
    d->f64 = f2.features.shaderFloat64 && d->i64;
    d->s8 = f12.storageBuffer8BitAccess;
    d->s16 = f11.storageBuffer16BitAccess;
    VkPhysicalDeviceVulkan11Features e11 = {.sType =
                                                VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
                                            .storageBuffer16BitAccess = d->s16};
    VkPhysicalDeviceVulkan12Features e12 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
        .pNext = &e11,
        .storageBuffer8BitAccess = d->s8};
    VkPhysicalDeviceFeatures2 e2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                    .pNext = &e12};
    e2.features.shaderInt64 = d->i64;
    e2.features.shaderFloat64 = d->f64;
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                  .queueFamilyIndex = d->qfamily,
                                  .queueCount = 1,
                                  .pQueuePriorities = &prio};
    VkDeviceCreateInfo di = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                             .pNext = &e2,
                             .queueCreateInfoCount = 1,
                             .pQueueCreateInfos = &qi};
    VkResult r = vkCreateDevice(d->phys, &di, NULL, &d->dev);
    if (r != VK_SUCCESS) {
        free(d);
        return vk_fail(r, "vkCreateDevice");
    }
    vkGetDeviceQueue(d->dev, d->qfamily, 0, &d->queue);

    /* memory types: tensors in device-local memory (host-visible too, when the device has
     * such memory and staging is not forced), staging and parameters in host-visible memory */
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(d->phys, &mp);
    if (!vk_choose_memory(&mp, vk_env_on("EMBER_VULKAN_STAGING"), &d->dev_type, &d->host_type,
                          &d->staging)) {
        vkDestroyDevice(d->dev, NULL);
        free(d);
        return em_backend_set_error(EM_ERR_BACKEND,
                                    "vulkan: %s (vulkan:%d) has no host-visible coherent memory",
                                    pr.deviceName, index);
    }
    VkDeviceSize heap = mp.memoryHeaps[mp.memoryTypes[d->dev_type].heapIndex].size;
    d->cache_cap = (size_t)(heap / 4);
    if (d->cache_cap > ((size_t)4 << 30)) d->cache_cap = (size_t)4 << 30;
    pthread_mutex_init(&d->lock, NULL);
    pthread_mutex_init(&d->mlock, NULL);
    em_status s = vk_stream_init(d);
    if (s == EM_OK) s = vk_buf_create(d, 256, d->dev_type, false, &d->dummy);
    if (s != EM_OK) {
        vk_stream_fini(d);
        vkDestroyDevice(d->dev, NULL);
        pthread_mutex_destroy(&d->lock);
        pthread_mutex_destroy(&d->mlock);
        free(d);
        return s;
    }
    *out = d;
    return EM_OK;
}

static em_status vk_open(int index, void **ctx) {
    if (index < 0 || index >= vk_device_count())
        return em_backend_set_error(EM_ERR_DEVICE, "vulkan: no device %d (%d found)", index,
                                    vk_ndev);
    pthread_mutex_lock(&vk_open_lock);
    em_status s = EM_OK;
    if (atomic_load(&vk_gone))
        s = em_backend_set_error(EM_ERR_STATE, "vulkan: the backend was shut down at exit");
    else if (!vk_devs[index])
        s = vk_create(index, &vk_devs[index]);
    if (s == EM_OK) *ctx = vk_devs[index];
    pthread_mutex_unlock(&vk_open_lock);
    return s;
}

/* At exit: waits for every opened device, destroys what it holds, then the instance. Tensors
 * the program still holds are not freed one by one (their memory goes with the device);
 * later frees do nothing. */
static void vk_teardown(void) {
    pthread_mutex_lock(&vk_open_lock);
    if (atomic_load(&vk_gone)) { /* registered again after pipelines were made: once only */
        pthread_mutex_unlock(&vk_open_lock);
        return;
    }
    atomic_store(&vk_gone, true);
    for (int i = 0; i < vk_ndev; i++) {
        vk_dev *d = vk_devs ? vk_devs[i] : NULL;
        if (!d) continue;
        pthread_mutex_lock(&d->lock);
        vk_wait_idle(d);
        vk_stream_fini(d);
        pthread_mutex_unlock(&d->lock);
        vk_memory_release(d);
        vk_destroy_live(d);
        vk_buf_destroy(d, d->dummy);
        vkDestroyDevice(d->dev, NULL);
        vk_devs[i] = NULL;
        /* the device record stays allocated: a tensor freed after exit still reads it */
    }
    if (vk_messenger) {
        PFN_vkDestroyDebugUtilsMessengerEXT rm = (PFN_vkDestroyDebugUtilsMessengerEXT)
            vkGetInstanceProcAddr(vk_instance, "vkDestroyDebugUtilsMessengerEXT");
        if (rm) rm(vk_instance, vk_messenger, NULL);
    }
    if (vk_instance) vkDestroyInstance(vk_instance, NULL);
    vk_instance = VK_NULL_HANDLE;
    pthread_mutex_unlock(&vk_open_lock);
}

bool vk_shut_down(void) { return atomic_load(&vk_gone); }

/* Exit handlers run last registered first. A driver that compiles with LLVM (lavapipe)
 * registers destructors of its own during its first compiles (function-local statics), after
 * the registration in vk_list; the teardown must run before them (it destroys pipelines and
 * the device through that driver), so stream.c registers it again after each pipeline it
 * creates (the first run does the work, the others return). */
void vk_exit_guard(void) { atexit(vk_teardown); }

/* ---- small helpers of vk.h ---- */

const char *vk_dtype_tag(em_dtype dt) {
    switch (dt) {
    case EM_F32: return "f32";
    case EM_F64: return "f64";
    case EM_F16: return "f16";
    case EM_BF16: return "bf16";
    case EM_I64: return "i64";
    case EM_I32: return "i32";
    case EM_I16: return "i16";
    case EM_I8: return "i8";
    case EM_U8: return "u8";
    case EM_BOOL: return "b8";
    default: return NULL;
    }
}

em_status vk_check_dtype(vk_dev *d, const char *op, em_dtype dt) {
    const char *missing = NULL;
    if (!vk_dtype_tag(dt))
        return em_backend_set_error(EM_ERR_UNSUPPORTED, "vulkan: %s: dtype %s is not supported",
                                    op, em_dtype_name(dt));
    if (dt == EM_F64 && !d->f64) missing = "shaderFloat64";
    else if (dt == EM_I64 && !d->i64) missing = "shaderInt64";
    else if ((dt == EM_F16 || dt == EM_BF16 || dt == EM_I16) && !d->s16)
        missing = "storageBuffer16BitAccess";
    else if ((dt == EM_I8 || dt == EM_U8 || dt == EM_BOOL) && !d->s8)
        missing = "storageBuffer8BitAccess";
    if (missing)
        return em_backend_set_error(EM_ERR_UNSUPPORTED,
                                    "vulkan: %s: dtype %s needs the device feature %s, which %s "
                                    "(vulkan:%d) lacks",
                                    op, em_dtype_name(dt), missing, d->name, d->index);
    return EM_OK;
}

bool vk_contiguous(const em_view *v) {
    int64_t s = 1;
    for (int k = v->rank - 1; k >= 0; k--) {
        if (v->shape[k] != 1 && v->strides[k] != s) return false;
        s *= v->shape[k];
    }
    return true;
}

vk_view_arg vk_view(const em_view *v) {
    vk_view_arg a;
    memset(&a, 0, sizeof a);
    for (int k = 0; k < VK_MAX_RANK; k++) {
        a.shape[k] = k < v->rank ? (int32_t)v->shape[k] : 1;
        a.strides[k] = k < v->rank ? (int32_t)v->strides[k] : 0;
    }
    a.offset = (int32_t)v->offset;
    a.rank = v->rank;
    a.numel = (int32_t)vk_numel(v);
    a.contig = vk_contiguous(v);
    return a;
}

void vk_set_f64(vk_params *p, int k, double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    p->d[2 * k] = (uint32_t)u;
    p->d[2 * k + 1] = (uint32_t)(u >> 32);
}

void vk_set_i64(vk_params *p, int k, int64_t x) {
    uint64_t u = (uint64_t)x;
    p->d[2 * k] = (uint32_t)u;
    p->d[2 * k + 1] = (uint32_t)(u >> 32);
}

/* ---- transfers ---- */

/* Copies bytes between a buffer and the host through a staging buffer and a copy command.
 * to_dev: host -> buffer, recorded in order (the device need not be idle); else buffer ->
 * host, which waits. With d->lock held. */
static em_status vk_staged(vk_dev *d, vk_buf *b, size_t offset, void *host, size_t bytes,
                           bool to_dev) {
    vk_buf *st;
    em_status s = vk_staging_get(d, bytes, &st);
    if (s != EM_OK) return s;
    vk_batch *bt;
    if (to_dev) memcpy(st->map, host, bytes);
    s = vk_batch_current(d, &bt);
    if (s != EM_OK) {
        vk_buf_recycle(d, st);
        return s;
    }
    vk_barrier(d, bt->cb);
    VkBufferCopy reg = {.srcOffset = to_dev ? 0 : offset,
                        .dstOffset = to_dev ? offset : 0,
                        .size = bytes};
    vkCmdCopyBuffer(bt->cb, to_dev ? st->buffer : b->buffer, to_dev ? b->buffer : st->buffer, 1,
                    &reg);
    if (to_dev) {
        vk_release_after(d, st); /* back to the staging cache when the copy has run */
        return EM_OK;
    }
    s = vk_wait_idle(d);
    if (s == EM_OK) memcpy(host, st->map, bytes);
    vk_buf_recycle(d, st);
    return s;
}

static em_status vk_write(void *ctx, void *buf, size_t offset, const void *src, size_t bytes) {
    vk_dev *d = ctx;
    vk_buf *b = buf;
    if (!bytes) return EM_OK;
    pthread_mutex_lock(&d->lock);
    em_status s;
    if (b->map && vk_idle(d)) {
        memcpy((char *)b->map + offset, src, bytes);
        s = EM_OK;
    } else {
        s = vk_staged(d, b, offset, (void *)src, bytes, true);
    }
    pthread_mutex_unlock(&d->lock);
    return s;
}

static em_status vk_read(void *ctx, const void *buf, size_t offset, void *dst, size_t bytes) {
    vk_dev *d = ctx;
    const vk_buf *b = buf;
    if (!bytes) return EM_OK;
    pthread_mutex_lock(&d->lock);
    em_status s;
    if (b->map) {
        s = vk_wait_idle(d);
        if (s == EM_OK) memcpy(dst, (const char *)b->map + offset, bytes);
    } else {
        s = vk_staged(d, (vk_buf *)b, offset, dst, bytes, false);
    }
    pthread_mutex_unlock(&d->lock);
    return s;
}

static em_status vk_sync(void *ctx) {
    vk_dev *d = ctx;
    pthread_mutex_lock(&d->lock);
    em_status s = vk_wait_idle(d);
    pthread_mutex_unlock(&d->lock);
    return s;
}

/* The kernel slots of the other families: declared here until their files exist. */
#include "vk_slots.h"

const em_backend_ops em_vulkan_backend_ops = {
    .abi_version = EM_BACKEND_ABI_VERSION,
    .name = "vulkan",
    .id = EM_BACKEND_VULKAN,
    .caps = EM_CAP_STRIDED_INPUTS | EM_CAP_ASYNC,
    .device_count = vk_device_count,
    .open = vk_open,
    .alloc = vk_alloc,
    .free = vk_free,
    .write = vk_write,
    .read = vk_read,
    .sync = vk_sync,
    .memory = vk_memory,
    .memory_reset_peak = vk_memory_reset_peak,
    .memory_cached = vk_memory_cached,
    .memory_release = vk_memory_release,
    .fill = vk_fill,
    .arange = vk_arange,
    .copy = vk_copy,
    .unary = vk_unary,
    .binary = vk_binary,
    .binary_scalar = vk_binary_scalar,
    .where = vk_where,
    VK_SLOTS
};
