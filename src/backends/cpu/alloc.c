/* alloc.c — the cpu backend's caching allocator.
 *
 * A freshly mapped page costs about 12 µs per 4 KiB on first touch on machines like the ones
 * ember runs on, so handing back fresh memory for every tensor makes a training step many
 * times slower. Freed buffers are kept, by size class, and handed to the next allocation of
 * that class (class_of). The cache is
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

/* Classes: 64 B, powers of two to 4 KiB, then four a doubling (2^k times 5/4, 6/4, 7/4, 2)
 * to 1 MiB, then steps of an eighth of the doubling (at least 256 KiB). A buffer then holds at
 * most a quarter more than it was asked for (an eighth past 2 MiB), not up to twice as much:
 * a [16, 32, 16, 16] layer's 288 KiB of im2col columns took 512 KiB, a GPT's 2.25 MiB
 * [8, 128, 576] activation 3 MiB. */
#define CPU_SMALL_CLASSES 39 /* 64 B .. 4 KiB: 7, then 8 doublings to 1 MiB of 4 */
#define CPU_BIG_SLOTS 256

static struct {
    pthread_mutex_t lock;
    cpu_block *small[CPU_SMALL_CLASSES];
    struct {
        size_t cls;
        cpu_block *head;
    } big[CPU_BIG_SLOTS];
    size_t in_use, peak, cached, cache_cap;
} A = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* log2 of the largest power of two below bytes (bytes > 1). */
static int log2_below(size_t bytes) {
    return 63 - __builtin_clzll((unsigned long long)(bytes - 1));
}

static size_t class_of(size_t bytes, int *small) {
    if (bytes <= 64) {
        *small = 0;
        return 64;
    }
    if (bytes <= 4096) {
        size_t c = 128;
        int i = 1;
        while (c < bytes) {
            c <<= 1;
            i++;
        }
        *small = i;
        return c;
    }
    const int lb = log2_below(bytes);
    const size_t base = (size_t)1 << lb; /* bytes in (base, 2 * base] */
    if (bytes <= CPU_MIB) {
        const size_t step = base / 4, q = (bytes + step - 1) / step; /* 5 .. 8 */
        *small = 7 + 4 * (lb - 12) + (int)(q - 5);
        return q * step;
    }
    size_t step = base / 8;
    if (step < CPU_MIB / 4) step = CPU_MIB / 4;
    *small = -1;
    return (bytes + step - 1) / step * step;
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
