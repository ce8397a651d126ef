/*
 * program.c — programs and launches of the OpenCL backend: building a program (common.cl +
 * one .cl file, with options) at first use or loading its binary from the disk cache, keeping
 * it and its kernels per device, enqueueing kernels (ocl_launch), and turning OpenCL error
 * codes into ember errors (ocl_fail).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ocl_internal.h"
#include "ocl_sources.h"

/* A kernel object of a program, made at first use. */
typedef struct ocl_kern {
    char name[64];
    cl_kernel k;
    struct ocl_kern *next;
} ocl_kern;

struct ocl_prog {
    char *prog;    /* .cl base name */
    char *options; /* as the caller gave them ("" for NULL) */
    cl_program p;
    ocl_kern *kernels;
    struct ocl_prog *next;
};

atomic_int ocl_stat_built, ocl_stat_loaded;

/* ---- errors ---- */

/* The name of an OpenCL error code. */
static const char *ocl_err_name(cl_int e) {
    switch (e) {
#define E(x) case x: return #x;
        E(CL_DEVICE_NOT_FOUND) E(CL_DEVICE_NOT_AVAILABLE) E(CL_COMPILER_NOT_AVAILABLE)
        E(CL_MEM_OBJECT_ALLOCATION_FAILURE) E(CL_OUT_OF_RESOURCES) E(CL_OUT_OF_HOST_MEMORY)
        E(CL_PROFILING_INFO_NOT_AVAILABLE) E(CL_MEM_COPY_OVERLAP) E(CL_IMAGE_FORMAT_MISMATCH)
        E(CL_IMAGE_FORMAT_NOT_SUPPORTED) E(CL_BUILD_PROGRAM_FAILURE) E(CL_MAP_FAILURE)
        E(CL_MISALIGNED_SUB_BUFFER_OFFSET) E(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
        E(CL_COMPILE_PROGRAM_FAILURE) E(CL_LINKER_NOT_AVAILABLE) E(CL_LINK_PROGRAM_FAILURE)
        E(CL_INVALID_VALUE) E(CL_INVALID_DEVICE_TYPE) E(CL_INVALID_PLATFORM) E(CL_INVALID_DEVICE)
        E(CL_INVALID_CONTEXT) E(CL_INVALID_QUEUE_PROPERTIES) E(CL_INVALID_COMMAND_QUEUE)
        E(CL_INVALID_HOST_PTR) E(CL_INVALID_MEM_OBJECT) E(CL_INVALID_BINARY)
        E(CL_INVALID_BUILD_OPTIONS) E(CL_INVALID_PROGRAM) E(CL_INVALID_PROGRAM_EXECUTABLE)
        E(CL_INVALID_KERNEL_NAME) E(CL_INVALID_KERNEL_DEFINITION) E(CL_INVALID_KERNEL)
        E(CL_INVALID_ARG_INDEX) E(CL_INVALID_ARG_VALUE) E(CL_INVALID_ARG_SIZE)
        E(CL_INVALID_KERNEL_ARGS) E(CL_INVALID_WORK_DIMENSION) E(CL_INVALID_WORK_GROUP_SIZE)
        E(CL_INVALID_WORK_ITEM_SIZE) E(CL_INVALID_GLOBAL_OFFSET) E(CL_INVALID_EVENT_WAIT_LIST)
        E(CL_INVALID_EVENT) E(CL_INVALID_OPERATION) E(CL_INVALID_BUFFER_SIZE)
        E(CL_INVALID_GLOBAL_WORK_SIZE) E(CL_INVALID_PROPERTY) E(CL_INVALID_COMPILER_OPTIONS)
        E(CL_INVALID_LINKER_OPTIONS) E(CL_INVALID_DEVICE_PARTITION_COUNT)
#undef E
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: return "unknown OpenCL error";
    }
}

em_status ocl_fail(cl_int err, const char *what) {
    em_status s = err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_HOST_MEMORY
                      ? EM_ERR_NOMEM
                      : EM_ERR_BACKEND;
    return em_backend_set_error(s, "opencl: %s failed: %s (%d)", what, ocl_err_name(err),
                                (int)err);
}

/* ---- sources ---- */

const char *ocl_source_text(const char *name) {
    for (const ocl_source_entry *e = ocl_sources; e->name; e++)
        if (strcmp(e->name, name) == 0) return e->text;
    return NULL;
}

/* common.cl + the program's file, with #line marks so that build logs name the right file. */
static char *ocl_full_text(const char *prog) {
    const char *common = ocl_source_text("common"), *body = ocl_source_text(prog);
    if (!common || !body) return NULL;
    size_t n = strlen(common) + strlen(body) + strlen(prog) + 96;
    char *t = malloc(n);
    if (t) snprintf(t, n, "#line 1 \"common.cl\"\n%s\n#line 1 \"%s.cl\"\n%s\n", common, prog, body);
    return t;
}

/* ---- building ---- */

/* The build log of p on d (malloc'ed, possibly empty), or NULL. */
static char *ocl_build_log(ocl_dev *d, cl_program p) {
    size_t n = 0;
    if (clGetProgramBuildInfo(p, d->id, CL_PROGRAM_BUILD_LOG, 0, NULL, &n) != CL_SUCCESS) return NULL;
    char *log = malloc(n + 1);
    if (!log) return NULL;
    if (clGetProgramBuildInfo(p, d->id, CL_PROGRAM_BUILD_LOG, n, log, NULL) != CL_SUCCESS) n = 0;
    log[n] = 0;
    return log;
}

/* Tries the disk cache for key: a built program, or NULL (then build from source). */
static cl_program ocl_try_cached(ocl_dev *d, const char *key, const char *opts) {
    size_t len = 0;
    unsigned char *bin = ocl_cache_load(key, &len);
    if (!bin) return NULL;
    cl_int err, bst;
    const unsigned char *bins[1] = {bin};
    cl_program p = clCreateProgramWithBinary(d->ctx, 1, &d->id, &len, bins, &bst, &err);
    free(bin);
    if (!p) return NULL;
    if (err != CL_SUCCESS || bst != CL_SUCCESS ||
        clBuildProgram(p, 1, &d->id, opts, NULL, NULL) != CL_SUCCESS) {
        clReleaseProgram(p);
        return NULL;
    }
    atomic_fetch_add(&ocl_stat_loaded, 1);
    return p;
}

/* Stores the binary of built program p under key. */
static void ocl_save_binary(ocl_dev *d, cl_program p, const char *key) {
    size_t len = 0;
    if (clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof len, &len, NULL) != CL_SUCCESS || !len)
        return;
    unsigned char *bin = malloc(len);
    if (!bin) return;
    unsigned char *bins[1] = {bin};
    if (clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL) == CL_SUCCESS)
        ocl_cache_store(key, bin, len);
    free(bin);
    (void)d;
}

/* Builds program prog with options (the device's own options appended) into *out. */
static em_status ocl_build(ocl_dev *d, const char *prog, const char *options, cl_program *out) {
    char *text = ocl_full_text(prog);
    if (!text)
        return em_backend_set_error(EM_ERR_BACKEND, "opencl: no kernel source %s.cl (or common.cl)",
                                    prog);
    size_t on = strlen(options) + 64;
    char *opts = malloc(on);
    if (!opts) {
        free(text);
        return em_backend_set_error(EM_ERR_NOMEM, "opencl: out of host memory");
    }
    snprintf(opts, on, "%s%s", options, d->fp64 ? " -DOCL_FP64" : "");
    char key[33];
    ocl_cache_key(d, text, opts, key);
    cl_program p = ocl_try_cached(d, key, opts);
    em_status st = EM_OK;
    if (!p) {
        cl_int err;
        const char *srcs[1] = {text};
        p = clCreateProgramWithSource(d->ctx, 1, srcs, NULL, &err);
        if (!p) {
            st = ocl_fail(err, "clCreateProgramWithSource");
        } else if ((err = clBuildProgram(p, 1, &d->id, opts, NULL, NULL)) != CL_SUCCESS) {
            char *log = ocl_build_log(d, p);
            st = em_backend_set_error(EM_ERR_BACKEND,
                                      "opencl: building %s.cl with \"%s\" on %s failed: %s (%d)\n%s",
                                      prog, opts, d->name, ocl_err_name(err), (int)err,
                                      log ? log : "(no build log)");
            free(log);
            clReleaseProgram(p);
            p = NULL;
        } else {
            atomic_fetch_add(&ocl_stat_built, 1);
            ocl_save_binary(d, p, key);
        }
    }
    free(opts);
    free(text);
    *out = p;
    return st;
}

/* The program (prog, options) of d, built at first use. Called with d->lock held. */
static em_status ocl_get_prog(ocl_dev *d, const char *prog, const char *options, ocl_prog **out) {
    for (ocl_prog *q = d->progs; q; q = q->next)
        if (strcmp(q->prog, prog) == 0 && strcmp(q->options, options) == 0) {
            *out = q;
            return EM_OK;
        }
    ocl_prog *q = calloc(1, sizeof *q);
    if (q) q->prog = strdup(prog), q->options = strdup(options);
    if (!q || !q->prog || !q->options) {
        if (q) free(q->prog), free(q->options);
        free(q);
        return em_backend_set_error(EM_ERR_NOMEM, "opencl: out of host memory");
    }
    em_status st = ocl_build(d, prog, options, &q->p);
    if (st != EM_OK) {
        free(q->prog), free(q->options), free(q);
        return st;
    }
    q->next = d->progs;
    d->progs = q;
    *out = q;
    return EM_OK;
}

/* The kernel `name` of program q, created at first use (*created is then true). Called
 * with d->lock held. */
static em_status ocl_get_kernel(ocl_prog *q, const char *name, cl_kernel *out, bool *created) {
    *created = false;
    for (ocl_kern *k = q->kernels; k; k = k->next)
        if (strcmp(k->name, name) == 0) {
            *out = k->k;
            return EM_OK;
        }
    if (strlen(name) >= sizeof ((ocl_kern *)0)->name)
        return em_backend_set_error(EM_ERR_BACKEND, "opencl: kernel name %s too long", name);
    ocl_kern *k = calloc(1, sizeof *k);
    if (!k) return em_backend_set_error(EM_ERR_NOMEM, "opencl: out of host memory");
    cl_int err;
    k->k = clCreateKernel(q->p, name, &err);
    if (!k->k) {
        free(k);
        char what[160];
        snprintf(what, sizeof what, "clCreateKernel(%s of %s.cl)", name, q->prog);
        return ocl_fail(err, what);
    }
    strcpy(k->name, name);
    k->next = q->kernels;
    q->kernels = k;
    *out = k->k;
    *created = true;
    return EM_OK;
}

em_status ocl_launch(ocl_dev *d, const char *prog, const char *options, const char *kernel,
                     int work_dim, const size_t *global, const size_t *local, int nargs,
                     const ocl_arg *args) {
    for (int i = 0; i < work_dim; i++)
        if (global[i] == 0) return EM_OK;
    if (!options) options = "";
    pthread_mutex_lock(&d->lock);
    ocl_prog *q = NULL;
    cl_kernel k = NULL;
    bool first = false;
    em_status st = ocl_get_prog(d, prog, options, &q);
    if (st == EM_OK) st = ocl_get_kernel(q, kernel, &k, &first);
    for (int i = 0; st == EM_OK && i < nargs; i++) {
        cl_int err = clSetKernelArg(k, (cl_uint)i, args[i].size, args[i].ptr);
        if (err != CL_SUCCESS) {
            char what[160];
            snprintf(what, sizeof what, "clSetKernelArg(%s arg %d, %zu bytes)", kernel, i,
                     args[i].size);
            st = ocl_fail(err, what);
        }
    }
    if (st == EM_OK) {
        cl_int err = clEnqueueNDRangeKernel(d->queue, k, (cl_uint)work_dim, NULL, global, local, 0,
                                            NULL, NULL);
        if (err != CL_SUCCESS) {
            char what[160];
            snprintf(what, sizeof what, "clEnqueueNDRangeKernel(%s of %s.cl)", kernel, prog);
            st = ocl_fail(err, what);
        } else if (first) {
            /* the driver compiles it now: wait, then make sure exit waits first (opencl.c) */
            clFinish(d->queue);
            ocl_exit_guard();
        }
    }
    pthread_mutex_unlock(&d->lock);
    return st;
}

void ocl_drop_programs(ocl_dev *d) {
    pthread_mutex_lock(&d->lock);
    clFinish(d->queue);
    for (ocl_prog *q = d->progs, *qn; q; q = qn) {
        qn = q->next;
        for (ocl_kern *k = q->kernels, *kn; k; k = kn) {
            kn = k->next;
            clReleaseKernel(k->k);
            free(k);
        }
        clReleaseProgram(q->p);
        free(q->prog), free(q->options), free(q);
    }
    d->progs = NULL;
    pthread_mutex_unlock(&d->lock);
}
