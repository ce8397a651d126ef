/* threads.c — the cpu backend's thread pool: persistent workers that split a range.
 *
 * One job runs at a time; a caller that finds the pool busy (another thread of the program
 * is using it) runs its range alone, so concurrent callers never wait on each other. The
 * pool's size is EMBER_NUM_THREADS or the machine's online cores. OpenBLAS is set to one
 * thread: large GEMMs are split over this pool instead (cpu_gemm), so that the program never
 * has two sets of busy threads on the same cores. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "cpu.h"

#ifdef EMBER_HAVE_OPENBLAS
void openblas_set_num_threads(int n);
#endif

/* The job word: bits 63..33 the job's generation, bit 32 set while the job is open to
 * workers, bits 31..0 the workers inside it. A worker joins only an open job of the
 * generation it saw, in one compare-and-swap, so a worker that wakes late (descheduled on a
 * busy machine) never runs a job that is over, and the caller, once it has run the chunks
 * left, closes the job and waits only for the workers that joined: not for one that has not
 * woken yet. */
#define JOB_OPEN (1ull << 32)
#define JOB_ACTIVE 0xffffffffull
#define JOB_GEN(w) ((w) >> 33)

typedef struct cpu_pool {
    pthread_mutex_t lock;        /* guards the sleeps and wake-ups on the conditions */
    pthread_cond_t wake, idle;
    pthread_mutex_t submit;      /* held by the thread whose job runs */
    int nthreads;                /* including the caller */
    atomic_ulong job;            /* the job word above */
    cpu_range_fn fn;
    void *arg;
    int64_t n, chunk;
    /* the chunks not yet taken: [front, back) of chunk numbers, front in the low 32 bits */
    atomic_ullong ends;
} cpu_pool;

static cpu_pool pool = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .idle = PTHREAD_COND_INITIALIZER,
    .submit = PTHREAD_MUTEX_INITIALIZER,
};
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

/* The caller takes chunks from the front of the range, the workers from the back: the caller
 * then runs the first part of every job and the workers the last, so that consecutive ops
 * split their data alike (a conv's first images and the elementwise op after it on the same
 * core), where taking chunks in turn scattered them over both cores' caches. */
static void run_chunks(bool from_back) {
    for (;;) {
        unsigned long long e = atomic_load_explicit(&pool.ends, memory_order_relaxed), t;
        int64_t c;
        do {
            const unsigned long long front = e & 0xffffffffull, back = e >> 32;
            if (front >= back) return;
            c = (int64_t)(from_back ? back - 1 : front);
            t = from_back ? ((back - 1) << 32) | front : (back << 32) | (front + 1);
        } while (!atomic_compare_exchange_weak_explicit(&pool.ends, &e, t, memory_order_relaxed,
                                                        memory_order_relaxed));
        const int64_t lo = c * pool.chunk;
        const int64_t hi = lo + pool.chunk < pool.n ? lo + pool.chunk : pool.n;
        pool.fn(lo, hi, pool.arg);
    }
}

/* Idle workers (and a caller waiting for them) spin this long before they sleep: kernels come
 * in quick succession, and waking a sleeping thread costs far more than a job of a few
 * hundred microseconds takes, above all on virtual machines. */
#define CPU_SPIN_NS 100000

static double mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Spins until done(word) or the spin time is over; true when done. */
static bool spin_until(bool (*done)(unsigned long w, unsigned long arg), unsigned long arg) {
    double t0 = 0;
    for (unsigned i = 1;; i++) {
        if (done(atomic_load_explicit(&pool.job, memory_order_acquire), arg)) return true;
        cpu_relax();
        if ((i & 255) == 0) {
            double t = mono_ns();
            if (t0 == 0) t0 = t;
            else if (t - t0 > CPU_SPIN_NS) return false;
        }
    }
}

static bool new_gen(unsigned long w, unsigned long seen) { return JOB_GEN(w) != seen; }
static bool none_inside(unsigned long w, unsigned long unused) {
    (void)unused;
    return (w & JOB_ACTIVE) == 0;
}

static void *worker(void *unused) {
    (void)unused;
    unsigned long seen = 0;
    for (;;) {
        if (!spin_until(new_gen, seen)) {
            pthread_mutex_lock(&pool.lock);
            while (!new_gen(atomic_load_explicit(&pool.job, memory_order_acquire), seen))
                pthread_cond_wait(&pool.wake, &pool.lock);
            pthread_mutex_unlock(&pool.lock);
        }
        /* join the job if it is still open (else it is over: wait for the next one) */
        unsigned long w = atomic_load_explicit(&pool.job, memory_order_acquire);
        seen = JOB_GEN(w);
        bool joined = false;
        while ((w & JOB_OPEN) && JOB_GEN(w) == seen && !joined)
            joined = atomic_compare_exchange_weak_explicit(&pool.job, &w, w + 1,
                                                           memory_order_acq_rel,
                                                           memory_order_acquire);
        if (!joined) continue;
        run_chunks(true);
        w = atomic_fetch_sub_explicit(&pool.job, 1, memory_order_acq_rel) - 1;
        if ((w & JOB_ACTIVE) == 0 && !(w & JOB_OPEN)) { /* the last one out of a closed job */
            pthread_mutex_lock(&pool.lock);
            pthread_cond_signal(&pool.idle);
            pthread_mutex_unlock(&pool.lock);
        }
    }
    return NULL;
}

static void pool_init(void) {
    long n = 0;
    const char *env = getenv("EMBER_NUM_THREADS");
    if (env && *env) n = strtol(env, NULL, 10);
    if (n <= 0) n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n <= 0) n = 1;
    if (n > 256) n = 256;
    pool.nthreads = 1;
    for (long i = 1; i < n; i++) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, worker, NULL);
        pthread_attr_destroy(&attr);
        if (rc != 0) break; /* fewer threads: still correct */
        pool.nthreads++;
    }
#ifdef EMBER_HAVE_OPENBLAS
    openblas_set_num_threads(1);
#endif
}

int cpu_threads(void) {
    pthread_once(&pool_once, pool_init);
    return pool.nthreads;
}

void cpu_parallel_for(int64_t n, int64_t grain, cpu_range_fn fn, void *arg) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (n < 2 * grain) { /* too small to split: no need to ask the pool */
        fn(0, n, arg);
        return;
    }
    int nt = cpu_threads();
    if (nt == 1 || pthread_mutex_trylock(&pool.submit) != 0) {
        fn(0, n, arg);
        return;
    }
    int64_t parts = n / grain;
    if (parts > 4 * (int64_t)nt) parts = 4 * (int64_t)nt;
    int64_t chunk = (n + parts - 1) / parts;
    pool.fn = fn;
    pool.arg = arg;
    pool.n = n;
    pool.chunk = chunk;
    const unsigned long long nchunks = (unsigned long long)((n + chunk - 1) / chunk);
    atomic_store_explicit(&pool.ends, nchunks << 32, memory_order_relaxed);
    /* no worker is inside a job now (the last caller waited for them): publish this one */
    unsigned long gen = JOB_GEN(atomic_load_explicit(&pool.job, memory_order_relaxed)) + 1;
    pthread_mutex_lock(&pool.lock);
    atomic_store_explicit(&pool.job, (gen << 33) | JOB_OPEN, memory_order_release);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    run_chunks(false);
    /* every chunk is taken: close the job, then wait for the workers that joined it */
    atomic_fetch_and_explicit(&pool.job, ~JOB_OPEN, memory_order_acq_rel);
    if (!spin_until(none_inside, 0)) {
        pthread_mutex_lock(&pool.lock);
        while (!none_inside(atomic_load_explicit(&pool.job, memory_order_acquire), 0))
            pthread_cond_wait(&pool.idle, &pool.lock);
        pthread_mutex_unlock(&pool.lock);
    }
    pthread_mutex_unlock(&pool.submit);
}
