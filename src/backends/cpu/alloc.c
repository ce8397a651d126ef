/* alloc.c — the cpu backend's caching allocator.
 *
 * A freshly mapped page costs about 12 µs per 4 KiB on first touch on machines like the ones
 * ember runs on, so handing back fresh memory for every tensor makes a training step many
 * times slower. Freed buffers are kept, by size class, and handed to the next allocation of
 * that class. Classes: powers of two up to 1 MiB, then multiples of 1 MiB. The cache is
 * bounded (a quarter of the machine's memory, at most 8 GiB); past that, and when an
 * allocation fails, cached buffers are given back to the system. em_device_memory counts the
 * bytes handed to tensors (in use) and those kept (cached). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu.h"

#define CPU_ALIGN 64
#define CPU_MIB (1u << 20)

typedef struct cpu_block {
    size_t cls;             /* usable bytes */
    struct cpu_block *next; /* in a free list */
    char pad[CPU_ALIGN - sizeof(size_t) - sizeof(void *)];
} cpu_block;

_Static_assert(sizeof(cpu_block) == CPU_ALIGN, "the header keeps data 64-byte aligned");

#define CPU_SMALL_CLASSES 15 /* 64 B .. 1 MiB */
#define CPU_BIG_SLOTS 64

static struct {
    pthread_mutex_t lock;
    cpu_block *small[CPU_SMALL_CLASSES];
    struct {
        size_t cls;
        cpu_block *head;
    } big[CPU_BIG_SLOTS];
    size_t in_use, peak, cached, cache_cap;
} A = {.lock = PTHREAD_MUTEX_INITIALIZER};

static size_t class_of(size_t bytes, int *small) {
    if (bytes <= 64) {
        *small = 0;
        return 64;
    }
    if (bytes <= CPU_MIB) {
        size_t c = 128;
        int i = 1;
        while (c < bytes) {
            c <<= 1;
            i++;
        }
        *small = i;
        return c;
    }
    *small = -1;
    return (bytes + CPU_MIB - 1) / CPU_MIB * CPU_MIB;
}

static size_t cache_cap(void) {
    if (!A.cache_cap) {
        long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
        size_t total = pages > 0 && psize > 0 ? (size_t)pages * (size_t)psize : (size_t)1 << 32;
        size_t cap = total / 4;
        if (cap > ((size_t)8 << 30)) cap = (size_t)8 << 30;
        A.cache_cap = cap;
    }
    return A.cache_cap;
}

/* Frees every cached block (under the lock). */
static void drain_locked(void) {
    for (int i = 0; i < CPU_SMALL_CLASSES; i++) {
        while (A.small[i]) {
            cpu_block *b = A.small[i];
            A.small[i] = b->next;
            free(b);
        }
    }
    for (int i = 0; i < CPU_BIG_SLOTS; i++) {
        while (A.big[i].head) {
            cpu_block *b = A.big[i].head;
            A.big[i].head = b->next;
            free(b);
        }
        A.big[i].cls = 0;
    }
    A.cached = 0;
}

static cpu_block *take_locked(size_t cls, int small) {
    cpu_block *b = NULL;
    if (small >= 0) {
        b = A.small[small];
        if (b) A.small[small] = b->next;
    } else {
        for (int i = 0; i < CPU_BIG_SLOTS && !b; i++) {
            if (A.big[i].cls == cls && A.big[i].head) {
                b = A.big[i].head;
                A.big[i].head = b->next;
            }
        }
    }
    if (b) A.cached -= cls;
    return b;
}

/* Keeps b in the cache; false when it does not fit (the caller frees it). */
static bool keep_locked(cpu_block *b) {
    int small;
    class_of(b->cls, &small);
    if (A.cached + b->cls > cache_cap()) return false;
    if (small >= 0) {
        b->next = A.small[small];
        A.small[small] = b;
    } else {
        int slot = -1;
        for (int i = 0; i < CPU_BIG_SLOTS; i++) {
            if (A.big[i].cls == b->cls) {
                slot = i;
                break;
            }
            if (slot < 0 && !A.big[i].head) slot = i;
        }
        if (slot < 0) return false;
        A.big[slot].cls = b->cls;
        b->next = A.big[slot].head;
        A.big[slot].head = b;
    }
    A.cached += b->cls;
    return true;
}

static void *alloc_block(size_t bytes) {
    int small;
    size_t cls = class_of(bytes, &small);
    pthread_mutex_lock(&A.lock);
    cpu_block *b = take_locked(cls, small);
    if (!b) {
        b = aligned_alloc(CPU_ALIGN, sizeof(cpu_block) + cls);
        if (!b && A.cached) { /* memory pressure: give the cache back and try again */
            drain_locked();
            b = aligned_alloc(CPU_ALIGN, sizeof(cpu_block) + cls);
        }
        if (b) b->cls = cls;
    }
    if (b) {
        A.in_use += cls;
        if (A.in_use > A.peak) A.peak = A.in_use;
    }
    pthread_mutex_unlock(&A.lock);
    return b ? (char *)b + sizeof(cpu_block) : NULL;
}

static void free_block(void *p) {
    if (!p) return;
    cpu_block *b = (cpu_block *)((char *)p - sizeof(cpu_block));
    pthread_mutex_lock(&A.lock);
    A.in_use -= b->cls;
    bool kept = keep_locked(b);
    pthread_mutex_unlock(&A.lock);
    if (!kept) free(b);
}

em_status cpu_alloc(void *ctx, size_t bytes, void **buf) {
    (void)ctx;
    if (bytes > ((size_t)1 << 46))
        return em_backend_set_error(EM_ERR_NOMEM, "cpu: cannot allocate %zu bytes", bytes);
    void *p = alloc_block(bytes);
    if (!p) return em_backend_set_error(EM_ERR_NOMEM, "cpu: out of memory (%zu bytes)", bytes);
    *buf = p;
    return EM_OK;
}

void cpu_free(void *ctx, void *buf) {
    (void)ctx;
    free_block(buf);
}

void *cpu_scratch(size_t bytes) { return alloc_block(bytes ? bytes : 1); }

void cpu_scratch_free(void *p) { free_block(p); }

void cpu_memory(void *ctx, size_t *in_use, size_t *peak) {
    (void)ctx;
    pthread_mutex_lock(&A.lock);
    if (in_use) *in_use = A.in_use;
    if (peak) *peak = A.peak;
    pthread_mutex_unlock(&A.lock);
}

void cpu_memory_reset_peak(void *ctx) {
    (void)ctx;
    pthread_mutex_lock(&A.lock);
    A.peak = A.in_use;
    pthread_mutex_unlock(&A.lock);
}

size_t cpu_memory_cached(void *ctx) {
    (void)ctx;
    pthread_mutex_lock(&A.lock);
    size_t c = A.cached;
    pthread_mutex_unlock(&A.lock);
    return c;
}

void cpu_memory_release(void *ctx) {
    (void)ctx;
    pthread_mutex_lock(&A.lock);
    drain_locked();
    pthread_mutex_unlock(&A.lock);
}
