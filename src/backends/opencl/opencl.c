/*
 * opencl.c — the OpenCL backend's table, its devices, transfers and small helpers (see
 * ocl.h). The allocator is alloc.c, programs and launches program.c, the disk cache cache.c.
 *
 * Devices are every OpenCL device of every platform, in the loader's order, listed once.
 * A device's context and in-order queue are created at its first `open` and kept until exit.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ocl_internal.h"

extern const em_backend_ops em_opencl_backend_ops;

_Static_assert(EM_MAX_RANK <= OCL_MAX_RANK, "views must fit view_t");
_Static_assert(sizeof(ocl_view_arg) == 144, "ocl_view_arg must match common.cl's view_t");

/* ---- the device list ---- */

static pthread_once_t ocl_list_once = PTHREAD_ONCE_INIT;
static cl_device_id *ocl_ids;
static cl_platform_id *ocl_plats; /* the platform of each device */
static int ocl_ndev;
static ocl_dev **ocl_devs; /* opened devices, by index */
static pthread_mutex_t ocl_open_lock = PTHREAD_MUTEX_INITIALIZER;

/* At exit, waits for the work still queued on every opened device. A driver may compile or
 * run it on threads of its own (PoCL does, with LLVM), and exit runs the destructors that
 * LLVM registered while those threads still use what they destroy. Exit handlers run last
 * registered first, and LLVM registers some of its destructors during its first compiles
 * (function-local statics), so one registration at start is not enough: ocl_launch waits
 * for the first launch of every kernel and registers this handler again after it, so that
 * it runs before whatever that compile registered. At most once per kernel. */
static void ocl_finish_all(void) {
    for (int i = 0; i < ocl_ndev; i++)
        if (ocl_devs && ocl_devs[i]) clFinish(ocl_devs[i]->queue);
}

void ocl_exit_guard(void) { atexit(ocl_finish_all); }

/* Lists every device of every platform (no platform, or no loader driver: 0 devices). */
static void ocl_list(void) {
    cl_uint np = 0;
    if (clGetPlatformIDs(0, NULL, &np) != CL_SUCCESS || np == 0) return;
    ocl_exit_guard();
    cl_platform_id *ps = calloc(np, sizeof *ps);
    if (!ps || clGetPlatformIDs(np, ps, NULL) != CL_SUCCESS) {
        free(ps);
        return;
    }
    int total = 0;
    for (cl_uint p = 0; p < np; p++) {
        cl_uint nd = 0;
        if (clGetDeviceIDs(ps[p], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) == CL_SUCCESS) total += (int)nd;
    }
    if (total > 0) {
        ocl_ids = calloc((size_t)total, sizeof *ocl_ids);
        ocl_plats = calloc((size_t)total, sizeof *ocl_plats);
        ocl_devs = calloc((size_t)total, sizeof *ocl_devs);
        if (!ocl_ids || !ocl_plats || !ocl_devs) {
            free(ocl_ids), free(ocl_plats), free(ocl_devs);
            ocl_ids = NULL, ocl_plats = NULL, ocl_devs = NULL;
            free(ps);
            return;
        }
        int k = 0;
        for (cl_uint p = 0; p < np && k < total; p++) {
            cl_uint nd = 0;
            if (clGetDeviceIDs(ps[p], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) != CL_SUCCESS || !nd) continue;
            if (nd > (cl_uint)(total - k)) nd = (cl_uint)(total - k);
            if (clGetDeviceIDs(ps[p], CL_DEVICE_TYPE_ALL, nd, ocl_ids + k, NULL) != CL_SUCCESS)
                continue;
            for (cl_uint j = 0; j < nd; j++) ocl_plats[k + (int)j] = ps[p];
            k += (int)nd;
        }
        ocl_ndev = k;
    }
    free(ps);
}

static int ocl_device_count(void) {
    pthread_once(&ocl_list_once, ocl_list);
    return ocl_ndev;
}

/* A device info string into buf (empty on failure). */
static void ocl_dev_str(cl_device_id id, cl_device_info what, char *buf, size_t cap) {
    buf[0] = 0;
    if (clGetDeviceInfo(id, what, cap - 1, buf, NULL) != CL_SUCCESS) buf[0] = 0;
    buf[cap - 1] = 0;
}

/* True when the device does double precision (cl_khr_fp64). */
static bool ocl_has_fp64(cl_device_id id) {
    cl_device_fp_config fp = 0;
    if (clGetDeviceInfo(id, CL_DEVICE_DOUBLE_FP_CONFIG, sizeof fp, &fp, NULL) == CL_SUCCESS && fp)
        return true;
    size_t n = 0;
    if (clGetDeviceInfo(id, CL_DEVICE_EXTENSIONS, 0, NULL, &n) != CL_SUCCESS || !n) return false;
    char *ext = malloc(n + 1);
    bool yes = false;
    if (ext && clGetDeviceInfo(id, CL_DEVICE_EXTENSIONS, n, ext, NULL) == CL_SUCCESS) {
        ext[n] = 0;
        yes = strstr(ext, "cl_khr_fp64") != NULL;
    }
    free(ext);
    return yes;
}

/* Creates device index's context and queue. */
static em_status ocl_create(int index, ocl_dev **out) {
    ocl_dev *d = calloc(1, sizeof *d);
    if (!d) return em_backend_set_error(EM_ERR_NOMEM, "opencl: out of host memory");
    d->index = index;
    d->id = ocl_ids[index];
    d->platform = ocl_plats[index];
    pthread_mutex_init(&d->lock, NULL);
    pthread_mutex_init(&d->mlock, NULL);
    ocl_dev_str(d->id, CL_DEVICE_NAME, d->name, sizeof d->name);
    ocl_dev_str(d->id, CL_DRIVER_VERSION, d->driver, sizeof d->driver);
    d->platform_version[0] = 0;
    if (clGetPlatformInfo(d->platform, CL_PLATFORM_VERSION, sizeof d->platform_version - 1,
                          d->platform_version, NULL) != CL_SUCCESS)
        d->platform_version[0] = 0;
    d->platform_version[sizeof d->platform_version - 1] = 0;
    d->fp64 = ocl_has_fp64(d->id);
    cl_ulong maxalloc = 0;
    if (clGetDeviceInfo(d->id, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof maxalloc, &maxalloc, NULL) !=
        CL_SUCCESS)
        maxalloc = 0;
    d->max_alloc = (size_t)maxalloc;
    cl_ulong global = 0;
    if (clGetDeviceInfo(d->id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global, &global, NULL) !=
        CL_SUCCESS)
        global = 0;
    d->cache_cap = (size_t)(global / 4);
    if (d->cache_cap > ((size_t)4 << 30)) d->cache_cap = (size_t)4 << 30;
    size_t wg = 0;
    if (clGetDeviceInfo(d->id, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof wg, &wg, NULL) != CL_SUCCESS)
        wg = 64;
    size_t g = 1;
    while (g * 2 <= wg && g * 2 <= 256) g *= 2;
    d->group = g;
    cl_int err;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)d->platform, 0};
    d->ctx = clCreateContext(props, 1, &d->id, NULL, NULL, &err);
    if (!d->ctx) {
        pthread_mutex_destroy(&d->lock);
        pthread_mutex_destroy(&d->mlock);
        free(d);
        return ocl_fail(err, "clCreateContext");
    }
    d->queue = clCreateCommandQueue(d->ctx, d->id, 0, &err);
    if (!d->queue) {
        clReleaseContext(d->ctx);
        pthread_mutex_destroy(&d->lock);
        pthread_mutex_destroy(&d->mlock);
        free(d);
        return ocl_fail(err, "clCreateCommandQueue");
    }
    *out = d;
    return EM_OK;
}

static em_status ocl_open(int index, void **ctx) {
    if (index < 0 || index >= ocl_device_count())
        return em_backend_set_error(EM_ERR_DEVICE, "opencl: no device %d (%d found)", index,
                                    ocl_ndev);
    pthread_mutex_lock(&ocl_open_lock);
    em_status s = EM_OK;
    if (!ocl_devs[index]) s = ocl_create(index, &ocl_devs[index]);
    if (s == EM_OK) *ctx = ocl_devs[index];
    pthread_mutex_unlock(&ocl_open_lock);
    return s;
}

/* ---- small helpers of ocl.h ---- */

const char *ocl_dtype_tag(em_dtype dt) {
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

ocl_view_arg ocl_view(const em_view *v) {
    ocl_view_arg a;
    memset(&a, 0, sizeof a);
    for (int d = 0; d < OCL_MAX_RANK; d++) {
        a.shape[d] = d < v->rank ? v->shape[d] : 1;
        a.strides[d] = d < v->rank ? v->strides[d] : 0;
    }
    a.offset = v->offset;
    a.rank = v->rank;
    return a;
}

em_status ocl_check_dtype(ocl_dev *d, const char *op, em_dtype dt) {
    if (!ocl_dtype_tag(dt))
        return em_backend_set_error(EM_ERR_UNSUPPORTED, "opencl: %s: dtype %s is not supported",
                                    op, em_dtype_name(dt));
    if (dt == EM_F64 && !d->fp64)
        return em_backend_set_error(EM_ERR_UNSUPPORTED,
                                    "opencl: %s: f64 needs cl_khr_fp64, which %s (opencl:%d) "
                                    "lacks",
                                    op, d->name, d->index);
    return EM_OK;
}

size_t ocl_group_size(ocl_dev *d) { return d->group; }

bool ocl_contiguous(const em_view *v) {
    int64_t s = 1;
    for (int d = v->rank - 1; d >= 0; d--) {
        if (v->shape[d] != 1 && v->strides[d] != s) return false;
        s *= v->shape[d];
    }
    return true;
}

/* ---- transfers (alloc.c has the allocator) ---- */

static em_status ocl_write(void *ctx, void *buf, size_t offset, const void *src, size_t bytes) {
    ocl_dev *d = ctx;
    if (!bytes) return EM_OK;
    cl_int err = clEnqueueWriteBuffer(d->queue, ((ocl_buf *)buf)->mem, CL_TRUE, offset, bytes, src,
                                      0, NULL, NULL);
    return err == CL_SUCCESS ? EM_OK : ocl_fail(err, "clEnqueueWriteBuffer");
}

static em_status ocl_read(void *ctx, const void *buf, size_t offset, void *dst, size_t bytes) {
    ocl_dev *d = ctx;
    if (!bytes) return EM_OK;
    cl_int err = clEnqueueReadBuffer(d->queue, ((const ocl_buf *)buf)->mem, CL_TRUE, offset, bytes,
                                     dst, 0, NULL, NULL);
    return err == CL_SUCCESS ? EM_OK : ocl_fail(err, "clEnqueueReadBuffer");
}

static em_status ocl_sync(void *ctx) {
    ocl_dev *d = ctx;
    cl_int err = clFinish(d->queue);
    return err == CL_SUCCESS ? EM_OK : ocl_fail(err, "clFinish");
}

const em_backend_ops em_opencl_backend_ops = {
    .abi_version = EM_BACKEND_ABI_VERSION,
    .name = "opencl",
    .id = EM_BACKEND_OPENCL,
    .caps = EM_CAP_STRIDED_INPUTS | EM_CAP_ASYNC,
    .device_count = ocl_device_count,
    .open = ocl_open,
    .alloc = ocl_alloc,
    .free = ocl_free,
    .write = ocl_write,
    .read = ocl_read,
    .sync = ocl_sync,
    .memory = ocl_memory,
    .memory_reset_peak = ocl_memory_reset_peak,
    .memory_cached = ocl_memory_cached,
    .memory_release = ocl_memory_release,
    .fill = ocl_fill,
    .arange = ocl_arange,
    .random = ocl_random,
    .copy = ocl_copy,
    .unary = ocl_unary,
    .binary = ocl_binary,
    .binary_scalar = ocl_binary_scalar,
    .where = ocl_where,
    .reduce = ocl_reduce,
    .cumsum = ocl_cumsum,
    .softmax = ocl_softmax,
    .matmul = ocl_matmul,
    .gather = ocl_gather,
    .scatter_add = ocl_scatter_add,
    .index_select = ocl_index_select,
    .sort = ocl_sort,
    .conv2d = ocl_conv2d,
    .conv_transpose2d = ocl_conv_transpose2d,
    .max_pool2d = ocl_max_pool2d,
    .avg_pool2d = ocl_avg_pool2d,
    .adaptive_avg_pool2d = ocl_adaptive_avg_pool2d,
    .conv2d_weight_grad = ocl_conv2d_weight_grad,
    .avg_pool2d_backward = ocl_avg_pool2d_backward,
    .adaptive_avg_pool2d_backward = ocl_adaptive_avg_pool2d_backward,
    .layer_norm = ocl_layer_norm,
    .unary_backward = ocl_unary_backward,
    .adam_step = ocl_adam_step,
    .batch_norm = ocl_batch_norm,
    .batch_norm_backward = ocl_batch_norm_backward,
    .group_norm = ocl_group_norm,
    .rms_norm = ocl_rms_norm,
    .cumulative = ocl_cumulative,
    .quantize = ocl_quantize,
    .dequantize = ocl_dequantize,
    .qmatmul = ocl_qmatmul,
};
