/* tensor.c — the reference-counted tensor handle: allocation, views, lifetime, metadata. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

/* A fresh tensor and its storage are one allocation (a block); a view is a tensor alone that
 * shares another's storage. The block is freed when both its tensor and its storage are gone:
 * `live` counts which of the two still stand.
 *
 * Freed blocks go to a small per-thread cache, so that the tiny-op path (one tensor created
 * and released per op) costs no malloc. A block whose tensor owned a tiny buffer (at most
 * EMI_TINY_BYTES) keeps that buffer, still allocated from its backend, and the next tensor of
 * the same device and a size that fits takes both: a tiny op then allocates nothing at all.
 * The cache is emptied (buffers handed back to their backends) when its thread exits, and
 * by em_device_memory and em_device_memory_release on the calling thread, so that a buffer
 * no tensor holds is never reported in use (emi_tensor_cache_drain). */
typedef struct emi_block {
    struct em_tensor t;
    emi_storage st;
    atomic_int live; /* 2 while both tensor and storage live, then 1, then free */
    struct emi_block *next_free;
    size_t cap; /* in the cache: bytes of the retained buffer st.buf (NULL: none) */
} emi_block;

/* In ASan builds (EMI_ASAN) nothing is cached: a released handle's block is freed at once,
 * so that ASan, whose allocator keeps freed memory out of reuse for a while, reports any use
 * of the stale handle (heap-use-after-free) instead of it silently reading whichever tensor
 * the cache gave the block to next. */
#define EMI_BLOCK_CACHE (EMI_ASAN ? 0 : 32)
#define EMI_TINY_BYTES 256

typedef struct emi_block_cache {
    emi_block *head;
    int n;
    bool registered; /* the thread-exit drain is set up */
} emi_block_cache;

/* initial-exec: every tiny op touches the cache twice, and in the shared library the default
 * (dynamic) TLS model makes each touch a __tls_get_addr call. 24 bytes fit in the static TLS
 * space that glibc reserves even for a library that is dlopen'ed. */
#if defined(__GNUC__) && defined(__ELF__)
#define EMI_TLS_IE __attribute__((tls_model("initial-exec")))
#else
#define EMI_TLS_IE
#endif
static _Thread_local emi_block_cache emi_cache EMI_TLS_IE;
static pthread_key_t emi_cache_key;
static pthread_once_t emi_cache_once = PTHREAD_ONCE_INIT;

static void emi_block_destroy(emi_block *b) {
    if (b->st.buf) b->st.ops->free(b->st.ctx, b->st.buf);
    free(b);
}

/* Hands a storage's buffer back: to its backend, or, when borrowed, to the storage it came
 * from. */
static void emi_storage_free_buf(emi_storage *st) {
    if (st->base) {
        emi_storage *base = st->base;
        st->base = NULL;
        st->buf = NULL;
        emi_storage_release(base);
    } else if (st->buf) {
        st->ops->free(st->ctx, st->buf);
    }
}

static void emi_cache_drain(void *unused) {
    (void)unused;
    while (emi_cache.head) {
        emi_block *b = emi_cache.head;
        emi_cache.head = b->next_free;
        emi_block_destroy(b);
    }
    emi_cache.n = 0;
}

void emi_tensor_cache_drain(void) { emi_cache_drain(NULL); }

static void emi_cache_key_init(void) { pthread_key_create(&emi_cache_key, emi_cache_drain); }

/* First use of the cache on this thread: make sure it is drained at thread exit. */
static __attribute__((noinline)) void emi_cache_register(emi_block_cache *c) {
    pthread_once(&emi_cache_once, emi_cache_key_init);
    pthread_setspecific(emi_cache_key, c);
    c->registered = true;
}

/* A block for a new tensor of `bytes` on (ops, ctx); *buf gets a retained buffer that fits,
 * or NULL. */
static inline emi_block *emi_block_alloc(const em_backend_ops *ops, void *ctx, size_t bytes,
                                         void **buf) {
    *buf = NULL;
    emi_block_cache *c = &emi_cache;
    emi_block *b = c->head;
    if (!b) return malloc(sizeof(emi_block));
    c->head = b->next_free;
    c->n--;
    if (b->st.buf) {
        if (b->st.ops == ops && b->st.ctx == ctx && bytes <= b->cap) *buf = b->st.buf;
        else b->st.ops->free(b->st.ctx, b->st.buf);
    }
    return b;
}

/* Puts a block in this thread's cache (keeping buf, a buffer of cap bytes of the block's
 * storage, or NULL), or frees it when the cache is full. */
static inline void emi_block_cache_put(emi_block *b, void *buf, size_t cap) {
    b->st.buf = buf;
    b->cap = cap;
    emi_block_cache *c = &emi_cache;
    if (c->n < EMI_BLOCK_CACHE) {
        if (!c->registered) emi_cache_register(c);
        b->next_free = c->head;
        c->head = b;
        c->n++;
        return;
    }
    emi_block_destroy(b);
}

static void emi_block_free(emi_block *b) { emi_block_cache_put(b, NULL, 0); }

/* Decrements an atomic count and says whether it reached zero. A holder of the only
 * reference can skip the locked instruction: nobody else can be changing the count. */
static inline bool emi_dec_is_last(atomic_int *c) {
    if (atomic_load_explicit(c, memory_order_acquire) == 1) return true;
    return atomic_fetch_sub_explicit(c, 1, memory_order_acq_rel) == 1;
}

static void emi_block_drop(emi_block *b) {
    if (emi_dec_is_last(&b->live)) emi_block_free(b);
}

void emi_storage_release(emi_storage *st) {
    if (!st) return;
    if (!emi_dec_is_last(&st->refs)) return;
    emi_storage_free_buf(st);
    emi_block_drop((emi_block *)((char *)st - offsetof(emi_block, st)));
}

void em_tensor_retain(em_tensor *t) {
    if (!t) return;
    if (t->magic != EMI_TENSOR_LIVE) {
        emi_fail_released("em_tensor_retain", "t");
        return;
    }
    atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
}

/* The release of a handle whose last reference is gone (rarer cases: tracked, a view, or
 * storage shared with views, or a buffer too big to keep). */
static __attribute__((noinline)) void emi_tensor_free_slow(em_tensor *t) {
    if (t->ad) emi_ad_release(t);
    emi_storage *st = t->st;
    emi_block *own = (emi_block *)((char *)st - offsetof(emi_block, st));
    if (&own->t == t) {
        if (atomic_load_explicit(&st->refs, memory_order_acquire) == 1) {
            /* No view shares the storage: tensor, storage and block go together. */
            if (st->bytes <= EMI_TINY_BYTES && st->ops->id != EM_BACKEND_CAPTURE && !st->base) {
                emi_block_cache_put(own, st->buf, st->bytes ? st->bytes : 1);
                return;
            }
            emi_storage_free_buf(st);
            emi_block_free(own);
            return;
        }
        emi_storage_release(st);
        emi_block_drop(own);
    } else {
        emi_storage_release(st);
        free(t);
    }
}

void em_tensor_release(em_tensor *t) {
    if (!t) return;
    if (t->magic != EMI_TENSOR_LIVE) {
        /* A second release of a handle still in the cache would put it there twice. */
        emi_fail_released("em_tensor_release", "t");
        return;
    }
    if (!emi_dec_is_last(&t->refs)) return;
    t->magic = EMI_TENSOR_DEAD;
    if (t->scope_ix) emi_scope_forget(t); /* released inside its scope: not again at its end */
    emi_storage *st = t->st;
    emi_block *own = (emi_block *)((char *)st - offsetof(emi_block, st));
    /* The tiny-op case: an untracked tensor alone on its block's tiny buffer. */
    if (!t->ad && &own->t == t && st->bytes <= EMI_TINY_BYTES && !st->base &&
        st->ops->id != EM_BACKEND_CAPTURE && atomic_load_explicit(&st->refs, memory_order_acquire) == 1) {
        emi_block_cache_put(own, st->buf, st->bytes ? st->bytes : 1);
        return;
    }
    emi_tensor_free_slow(t);
}

/* Prefixes this thread's message with "fn: " and returns s. */
__attribute__((noinline)) em_status emi_fail_prefixed(em_status s, const char *fn) {
    char msg[512];
    strncpy(msg, em_last_error(), sizeof msg - 1);
    msg[sizeof msg - 1] = '\0';
    return emi_fail(s, "%s: %s", fn, msg);
}

em_status emi_empty(const char *fn, em_device dev, em_dtype dt, const int64_t *shape, int rank,
                    em_tensor **out) {
    /* The shape was checked by the caller or derives from checked ones: a cheap re-check,
     * with the full one (and its message) only when something is off. */
    int64_t numel = 1, bound = 1;
    bool ok = (unsigned)rank <= EM_MAX_RANK && (rank == 0 || shape);
    for (int i = 0; ok && i < rank; i++) {
        int64_t d = shape[i];
        ok = d >= 0 && !__builtin_mul_overflow(bound, d ? d : 1, &bound);
        numel *= d;
    }
    if (!ok || bound > INT64_MAX / 16) EMI_TRY(emi_check_shape(fn, shape, rank, &numel));
    const em_backend_ops *ops;
    void *ctx;
    em_status s = emi_backend(dev, &ops, &ctx);
    if (s != EM_OK) return emi_fail_prefixed(s, fn);
    size_t bytes = (size_t)numel * emi_dtype_size(dt);
    void *buf;
    emi_block *b = emi_block_alloc(ops, ctx, bytes ? bytes : 1, &buf);
    if (!b) return emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
    /* Every tensor gets a buffer, even an empty one, so backends never see NULL. */
    if (!buf) s = ops->alloc(ctx, bytes ? bytes : 1, &buf);
    if (s != EM_OK) {
        emi_block_free(b);
        return s == EM_ERR_NOMEM
                   ? emi_fail(s, "%s: out of memory allocating %zu bytes on %s", fn, bytes, ops->name)
                   : s;
    }
    atomic_init(&b->live, 2);
    atomic_init(&b->st.refs, 1);
    b->st.ops = ops;
    b->st.ctx = ctx;
    b->st.buf = buf;
    b->st.bytes = bytes;
    b->st.base = NULL;
    em_tensor *t = &b->t;
    atomic_init(&t->refs, 1);
    t->magic = EMI_TENSOR_LIVE;
    t->st = &b->st;
    t->v.buf = buf;
    t->v.dtype = dt;
    t->v.rank = rank;
    int64_t stride = 1;
    for (int i = rank - 1; i >= 0; i--) {
        int64_t d = shape[i];
        t->v.shape[i] = d;
        t->v.strides[i] = stride;
        stride *= d > 1 ? d : 1;
    }
    t->v.offset = 0;
    t->dtype = dt;
    memset(&t->scheme, 0, sizeof t->scheme);
    t->dev = dev;
    t->ckpt = EM_CKPT_NONE;
    t->ad = NULL;
    t->scope_ix = 0;
    if (emi_scope_on) emi_scope_register(t);
    *out = t;
    return EM_OK;
}

em_status emi_view_tensor(const em_tensor *base, const int64_t *shape, const int64_t *strides,
                          int rank, int64_t offset, em_tensor **out) {
    em_tensor *t = malloc(sizeof *t);
    if (!t) return emi_fail(EM_ERR_NOMEM, "out of memory");
    *t = *base;
    atomic_init(&t->refs, 1);
    t->magic = EMI_TENSOR_LIVE;
    atomic_fetch_add_explicit(&base->st->refs, 1, memory_order_relaxed);
    t->v.rank = rank;
    for (int i = 0; i < rank; i++) {
        t->v.shape[i] = shape[i];
        t->v.strides[i] = strides[i];
    }
    t->v.offset = offset;
    t->ad = NULL;
    t->scope_ix = 0;
    if (emi_scope_on) emi_scope_register(t);
    if (emi_qblocked(base)) {
        em_status s = emi_qview_check(t);
        if (s != EM_OK) {
            em_tensor_release(t);
            return s;
        }
    }
    *out = t;
    return EM_OK;
}

em_view emi_broadcast_view(const em_tensor *t, const int64_t *shape, int rank) {
    em_view v = t->v;
    v.rank = rank;
    for (int i = 0; i < rank; i++) {
        int j = t->v.rank - rank + i;
        v.shape[i] = shape[i];
        v.strides[i] = (j >= 0 && t->v.shape[j] == shape[i]) ? t->v.strides[j] : 0;
    }
    return v;
}

em_status emi_operand_slow(const char *fn, const em_tensor *t, const int64_t *shape, int rank,
                      em_view *scratch, const em_view **v, em_tensor **tmp) {
    *tmp = NULL;
    const em_tensor *src = t;
    if (!(t->st->ops->caps & EM_CAP_STRIDED_INPUTS) && !emi_view_is_contiguous(&t->v)) {
        em_view unused;
        EMI_TRY(emi_input_view(fn, t, &unused, tmp));
        src = *tmp;
    }
    bool same = src->v.rank == rank;
    for (int i = 0; same && i < rank; i++) same = src->v.shape[i] == shape[i];
    if (same) {
        *v = &src->v;
        return EM_OK;
    }
    scratch->buf = src->v.buf;
    scratch->dtype = src->v.dtype;
    scratch->offset = src->v.offset;
    scratch->rank = rank;
    for (int i = 0; i < rank; i++) {
        int j = src->v.rank - rank + i;
        scratch->shape[i] = shape[i];
        scratch->strides[i] = (j >= 0 && src->v.shape[j] == shape[i]) ? src->v.strides[j] : 0;
    }
    *v = scratch;
    return EM_OK;
}

em_status emi_input_view(const char *fn, const em_tensor *t, em_view *v, em_tensor **tmp) {
    *tmp = NULL;
    if ((t->st->ops->caps & EM_CAP_STRIDED_INPUTS) || emi_view_is_contiguous(&t->v)) {
        *v = t->v;
        return EM_OK;
    }
    em_tensor *c;
    EMI_TRY(emi_empty(fn, t->dev, t->v.dtype, t->v.shape, t->v.rank, &c));
    em_status s = emi_numel(t->v.shape, t->v.rank) ? t->st->ops->copy(t->st->ctx, &c->v, &t->v)
                                                   : EM_OK;
    if (s != EM_OK) {
        em_tensor_release(c);
        return s;
    }
    *v = c->v;
    *tmp = c;
    return EM_OK;
}

em_status emi_copy_into(const char *fn, em_tensor *dst, const em_tensor *src) {
    const em_backend_ops *ops = dst->st->ops;
    if (emi_numel(dst->v.shape, dst->v.rank) == 0) return EM_OK;
    em_view in;
    em_tensor *tmp;
    EMI_TRY(emi_input_view(fn, src, &in, &tmp));
    em_view srcv = in;
    srcv.dtype = src->v.dtype;
    em_status s = ops->copy(dst->st->ctx, &dst->v, &srcv);
    em_tensor_release(tmp);
    return s;
}

em_status emi_read_all(const em_tensor *t, void **data, size_t *bytes) {
    if (emi_qblocked(t)) return emi_qread_all(t, data, bytes);
    size_t n = (size_t)emi_numel(t->v.shape, t->v.rank) * em_dtype_size(t->v.dtype);
    void *buf = malloc(n ? n : 1);
    if (!buf) return emi_fail(EM_ERR_NOMEM, "out of memory reading %zu bytes", n);
    em_status s = EM_OK;
    if (n) {
        const em_tensor *src = t;
        em_tensor *tmp = NULL;
        if (!emi_view_is_contiguous(&t->v)) {
            s = emi_empty("em_tensor_to_data", t->dev, t->v.dtype, t->v.shape, t->v.rank, &tmp);
            if (s == EM_OK) s = t->st->ops->copy(t->st->ctx, &tmp->v, &t->v);
            src = tmp;
        }
        if (s == EM_OK)
            s = src->st->ops->read(src->st->ctx, src->st->buf,
                                   (size_t)src->v.offset * em_dtype_size(src->v.dtype), buf, n);
        em_tensor_release(tmp);
    }
    if (s != EM_OK) {
        free(buf);
        return s;
    }
    *data = buf;
    *bytes = n;
    return EM_OK;
}

/* ---- metadata ---- */

#define EMI_META(fn, t, zero)                                                                 \
    do {                                                                                      \
        if (!(t)) {                                                                           \
            emi_fail(EM_ERR_ARG, "%s: tensor is NULL", fn);                                   \
            return zero;                                                                      \
        }                                                                                     \
        if ((t)->magic != EMI_TENSOR_LIVE) {                                                  \
            emi_fail_released(fn, "tensor");                                                  \
            return zero;                                                                      \
        }                                                                                     \
    } while (0)

em_dtype em_tensor_dtype(const em_tensor *t) {
    EMI_META("em_tensor_dtype", t, EM_F32);
    return t->dtype;
}

int em_tensor_rank(const em_tensor *t) {
    EMI_META("em_tensor_rank", t, 0);
    return t->v.rank;
}

const int64_t *em_tensor_shape(const em_tensor *t) {
    EMI_META("em_tensor_shape", t, NULL);
    return t->v.shape;
}

int64_t em_tensor_dim(const em_tensor *t, int dim) {
    EMI_META("em_tensor_dim", t, -1);
    if (dim < -t->v.rank || dim >= t->v.rank) {
        emi_fail(EM_ERR_ARG, "em_tensor_dim: dim %d out of range for rank %d", dim, t->v.rank);
        return -1;
    }
    return t->v.shape[dim < 0 ? dim + t->v.rank : dim];
}

int64_t em_tensor_numel(const em_tensor *t) {
    EMI_META("em_tensor_numel", t, 0);
    return emi_numel(t->v.shape, t->v.rank);
}

em_device em_tensor_device(const em_tensor *t) {
    EMI_META("em_tensor_device", t, ((em_device){EM_BACKEND_REF, 0, false, EM_CKPT_NONE}));
    return t->dev;
}

em_kind em_tensor_kind(const em_tensor *t) {
    EMI_META("em_tensor_kind", t, EM_KIND_FLOAT);
    return em_dtype_kind(t->dtype);
}

bool em_tensor_can_mut(const em_tensor *t) {
    EMI_META("em_tensor_can_mut", t, false);
    /* A borrowed buffer is this handle's alone once the storage it came from has no other
     * holder. */
    return atomic_load_explicit(&t->refs, memory_order_acquire) == 1 &&
           atomic_load_explicit(&t->st->refs, memory_order_acquire) == 1 &&
           (!t->st->base || atomic_load_explicit(&t->st->base->refs, memory_order_acquire) == 1);
}

em_status em_tensor_host_data(const em_tensor *t, void **out) {
    static const char fn[] = "em_tensor_host_data";
    EMI_TRY(emi_check_tensor(fn, "t", t));
    EMI_TRY(emi_check_out(fn, out));
    if (em_dtype_kind(t->dtype) == EM_KIND_QUANTIZED)
        return emi_fail(EM_ERR_DTYPE, "%s: a quantized tensor (its bytes: em_tensor_to_data)", fn);
    if (!(t->st->ops->caps & EM_CAP_HOST_MEMORY))
        return emi_fail(EM_ERR_UNSUPPORTED, "%s: the %s backend's memory is not host memory "
                        "(copy with em_tensor_to_data)", fn, t->st->ops->name);
    if (!emi_view_is_contiguous(&t->v))
        return emi_fail(EM_ERR_UNSUPPORTED, "%s: the view is not contiguous (em_contiguous "
                        "first)", fn);
    *out = (char *)t->v.buf + t->v.offset * (int64_t)emi_dtype_size(t->v.dtype);
    return EM_OK;
}

em_status emi_borrow_tensor(const char *fn, const em_tensor *t, em_device dev, em_tensor **out) {
    const em_backend_ops *ops;
    void *ctx;
    em_status s = emi_backend(dev, &ops, &ctx);
    if (s != EM_OK) return emi_fail_prefixed(s, fn);
    emi_block *b = malloc(sizeof *b);
    if (!b) return emi_fail(EM_ERR_NOMEM, "%s: out of memory", fn);
    emi_storage *src = t->st->base ? t->st->base : t->st; /* never a chain */
    atomic_fetch_add_explicit(&src->refs, 1, memory_order_relaxed);
    atomic_init(&b->live, 2);
    atomic_init(&b->st.refs, 1);
    b->st.ops = ops;
    b->st.ctx = ctx;
    b->st.buf = src->buf;
    b->st.bytes = src->bytes;
    b->st.base = src;
    b->cap = 0;
    b->next_free = NULL;
    em_tensor *o = &b->t;
    *o = *t;
    atomic_init(&o->refs, 1);
    o->magic = EMI_TENSOR_LIVE;
    o->st = &b->st;
    o->dev = dev;
    o->ckpt = EM_CKPT_NONE;
    o->ad = NULL;
    o->scope_ix = 0;
    if (emi_scope_on) emi_scope_register(o);
    *out = o;
    return EM_OK;
}

bool em_tensor_is_contiguous(const em_tensor *t) {
    EMI_META("em_tensor_is_contiguous", t, false);
    return emi_view_is_contiguous(&t->v);
}

em_checkpointing em_tensor_checkpointing(const em_tensor *t) {
    EMI_META("em_tensor_checkpointing", t, EM_CKPT_NONE);
    return t->ckpt;
}

em_status em_tensor_scheme(const em_tensor *t, em_quant_scheme *out) {
    static const char fn[] = "em_tensor_scheme";
    EMI_TRY(emi_check_tensor(fn, "t", t));
    EMI_TRY(emi_check_out(fn, out));
    if (em_dtype_kind(t->dtype) != EM_KIND_QUANTIZED)
        return emi_fail(EM_ERR_DTYPE, "%s: expected a quantized tensor, got %s (%s)", fn,
                        em_kind_name(em_dtype_kind(t->dtype)), em_dtype_name(t->dtype));
    *out = t->scheme;
    return EM_OK;
}
