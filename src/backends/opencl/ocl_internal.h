/*
 * ocl_internal.h — what opencl.c, program.c and cache.c share beyond ocl.h: the device
 * record, the program cache and the disk cache.
 */
#ifndef EMBER_OCL_INTERNAL_H
#define EMBER_OCL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "ocl.h"

typedef struct ocl_prog ocl_prog; /* a built program and its kernels (program.c) */

struct ocl_dev {
    int index; /* N of opencl:N */
    cl_device_id id;
    cl_platform_id platform;
    cl_context ctx;
    cl_command_queue queue;
    char name[256], driver[128], platform_version[256];
    bool fp64;
    size_t max_alloc; /* CL_DEVICE_MAX_MEM_ALLOC_SIZE (0: unknown) */
    size_t group;     /* preferred 1-d work-group size */
    pthread_mutex_t lock; /* programs, kernel arguments and enqueues */
    ocl_prog *progs;      /* built programs, newest first */
    atomic_size_t in_use, peak;
    pthread_mutex_t mlock;          /* the buffer cache (alloc.c) */
    struct ocl_free_blk *free_list; /* cached buffers */
    size_t cached, cache_cap;       /* bytes cached, and the most to cache */
};

/* alloc.c: the table's memory slots */
em_status ocl_alloc(void *ctx, size_t bytes, void **buf);
void ocl_free(void *ctx, void *buf);
void ocl_memory(void *ctx, size_t *in_use, size_t *peak);
void ocl_memory_reset_peak(void *ctx);
size_t ocl_memory_cached(void *ctx);
void ocl_memory_release(void *ctx);

/** True when v is row-major contiguous (size-1 dims may have any stride). */
bool ocl_contiguous(const em_view *v);

/** The embedded text of `name`.cl, or NULL. */
const char *ocl_source_text(const char *name);

/** Disk cache (cache.c): the program binary for key, malloc'ed, or NULL when absent or not
 *  valid. */
unsigned char *ocl_cache_load(const char *key, size_t *len);
/** Stores a program binary under key (atomically; failures are ignored). */
void ocl_cache_store(const char *key, const unsigned char *bin, size_t len);
/** The cache key (32 hex digits + NUL) of a program text and options on device d. */
void ocl_cache_key(const ocl_dev *d, const char *text, const char *options, char key[33]);
/** Releases every program and kernel d has built (tests use it to make the next launch go
 *  through the disk cache). */
void ocl_drop_programs(ocl_dev *d);
/** Registers (again) the exit handler that waits for every opened device's queue; see
 *  ocl_finish_all in opencl.c. Called after the first launch of each kernel has finished. */
void ocl_exit_guard(void);
/** Counters for tests: programs built from source and loaded from disk since start. */
extern atomic_int ocl_stat_built, ocl_stat_loaded;

#endif /* EMBER_OCL_INTERNAL_H */
