/* torch.cpp — the torch backend's plugin entry, its table, its memory, the view mapping, and
 * its copy / fill / arange kernels (torch_internal.h says how the backend is put together).
 *
 * Memory: host buffers from a caching allocator (size classes, a free list each, kept up to a
 * bound), so that a training loop reuses pages instead of faulting fresh ones for every tensor.
 * The buffers are plain host pointers (EM_CAP_HOST_MEMORY): em_to_device between this backend
 * and cpu or ref copies nothing, and the slots the backend leaves NULL (random: ember's Philox,
 * identical on every backend; the quantized slots) run ref's kernels on them. */
#include <ATen/Parallel.h>
#include <c10/core/CPUAllocator.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>
#include <vector>

#include <dlfcn.h>
#include <sched.h>
#include <unistd.h>

#include "torch_internal.h"

namespace emt {

const em_plugin_host *host = nullptr;

em_status fail(em_status s, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return host ? host->set_error(s, msg) : s;
}

at::ScalarType scalar_type(em_dtype dt) {
    switch (dt) {
    case EM_F32: return at::kFloat;
    case EM_F64: return at::kDouble;
    case EM_F16: return at::kHalf;
    case EM_BF16: return at::kBFloat16;
    case EM_I64: return at::kLong;
    case EM_I32: return at::kInt;
    case EM_I16: return at::kShort;
    case EM_I8: return at::kChar;
    case EM_U8: return at::kByte;
    case EM_BOOL: return at::kBool;
    default: break;
    }
    throw std::invalid_argument("ember dtype " + std::to_string((int)dt) +
                                " has no torch scalar type");
}

at::ScalarType compute_type(em_dtype dt) { return is_half(dt) ? at::kFloat : scalar_type(dt); }

static size_t dtype_bytes(em_dtype dt) {
    switch (dt) {
    case EM_F64: case EM_I64: return 8;
    case EM_F32: case EM_I32: return 4;
    case EM_F16: case EM_BF16: case EM_I16: return 2;
    default: return 1;
    }
}

at::Tensor wrap(const em_view *v) {
    char *p = (char *)v->buf + v->offset * (int64_t)dtype_bytes(v->dtype);
    return at::from_blob(p, at::IntArrayRef(v->shape, (size_t)v->rank),
                         at::IntArrayRef(v->strides, (size_t)v->rank),
                         at::TensorOptions().dtype(scalar_type(v->dtype)));
}

/* The positive-stride view of the same memory as v, and the dims that were negative. */
em_view positive(const em_view *v, std::vector<int64_t> *flipped) {
    em_view p = *v;
    for (int d = 0; d < v->rank; d++) {
        if (v->strides[d] < 0 && v->shape[d] > 0) {
            p.offset += (v->shape[d] - 1) * v->strides[d];
            p.strides[d] = -v->strides[d];
            flipped->push_back(d);
        } else if (v->strides[d] < 0) {
            p.strides[d] = 0; /* an empty dim: no element is addressed */
        }
    }
    return p;
}

at::Tensor in(const em_view *v) {
    std::vector<int64_t> flipped;
    em_view p = positive(v, &flipped);
    at::Tensor t = wrap(&p);
    return flipped.empty() ? t : t.flip(flipped);
}

at::Tensor in_c(const em_view *v) {
    at::Tensor t = in(v);
    return is_half(v->dtype) ? t.to(at::kFloat) : t;
}

void store(const em_view *out, const at::Tensor &r) { wrap(out).copy_(r); }

int threads() {
    const char *env = getenv("EMBER_NUM_THREADS");
    long n = env && *env ? strtol(env, nullptr, 10) : 0;
    if (n <= 0) {
        cpu_set_t set;
        if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
    }
    if (n <= 0) n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n <= 0) n = 1;
    return n > 256 ? 256 : (int)n;
}

namespace {
typedef void (*blas_set_fn)(int);
typedef int (*blas_get_fn)(void);
blas_set_fn blas_set;
blas_get_fn blas_get;
std::once_flag blas_once;

void blas_find() {
    /* libtorch_cpu links libopenblas.so.0 (Debian): already loaded, found without loading */
    void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_NOLOAD);
    if (!h) return;
    void *s = dlsym(h, "openblas_set_num_threads"), *g = dlsym(h, "openblas_get_num_threads");
    if (s && g) {
        memcpy(&blas_set, &s, sizeof blas_set);
        memcpy(&blas_get, &g, sizeof blas_get);
    }
    dlclose(h); /* the reference NOLOAD took; the library stays */
}
} // namespace

blas_single::blas_single() : prev_(0) {
    std::call_once(blas_once, blas_find);
    if (!blas_set) return;
    prev_ = blas_get();
    if (prev_ != 1) blas_set(1);
    else prev_ = 0;
}

blas_single::~blas_single() {
    if (prev_ > 0) blas_set(prev_);
}

void bmm_into(const at::Tensor &out, const at::Tensor &a, const at::Tensor &b) {
    const int64_t nb = a.size(0), m = a.size(1), k = a.size(2), n = b.size(2);
    const int64_t rows = nb * m;
    /* a part is at least ~2^21 multiply-adds (tens of microseconds: a split below that
     * costs more in the threads' handoff than it gains) */
    const double work = (double)rows * (double)n * (double)k;
#ifdef _OPENMP
    int64_t parts = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), rows));
    parts = std::min<int64_t>(parts, (int64_t)(work / (1 << 21)) + 1);
#else
    /* at::parallel_for would run serially: the plugin was not compiled with ATen's OpenMP
     * (CMakeLists.txt says when) */
    const int64_t parts = 1;
    (void)work;
#endif
    auto part = [&](int64_t p) {
        const int64_t r0 = rows * p / parts, r1 = rows * (p + 1) / parts;
        for (int64_t r = r0; r < r1;) {
            const int64_t i = r / m, lo = r % m, hi = std::min(m, lo + (r1 - r));
            at::Tensor o = out.select(0, i).narrow(0, lo, hi - lo);
            at::mm_out(o, a.select(0, i).narrow(0, lo, hi - lo), b.select(0, i));
            r += hi - lo;
        }
    };
    if (parts <= 1) {
        part(0);
        return;
    }
    at::parallel_for(0, parts, 1, [&](int64_t p0, int64_t p1) {
        c10::InferenceMode guard; /* thread-local: the workers do not inherit the caller's */
        for (int64_t p = p0; p < p1; p++) part(p);
    });
}

at::Tensor bmm(const at::Tensor &a, const at::Tensor &b) {
    at::Tensor o = at::empty({a.size(0), a.size(1), b.size(2)}, a.options());
    bmm_into(o, a, b);
    return o;
}

em_status from_exception(const char *what, std::exception_ptr e) {
    try {
        std::rethrow_exception(e);
    } catch (const c10::Error &err) {
        std::string msg = err.what_without_backtrace();
        /* torch's messages can run long (a list of overloads): the first line says it */
        size_t nl = msg.find('\n');
        if (nl != std::string::npos) msg.resize(nl);
        return fail(EM_ERR_BACKEND, "torch: %s: %s", what, msg.c_str());
    } catch (const std::bad_alloc &) {
        return fail(EM_ERR_NOMEM, "torch: %s: out of memory", what);
    } catch (const std::exception &err) {
        return fail(EM_ERR_BACKEND, "torch: %s: %s", what, err.what());
    } catch (...) {
        return fail(EM_ERR_BACKEND, "torch: %s: an unknown C++ exception", what);
    }
}

} // namespace emt

/* ---- memory: a caching allocator ------------------------------------------------------------
 * Sizes are rounded up to a class (multiples of 64 bytes up to 1 KiB, then four classes per
 * power of two); a freed buffer goes on its class's list while the cache holds under
 * TB_CACHE_MAX bytes, else back to the system. A header before each buffer records its class
 * size and keeps the data 64-byte aligned. */
namespace {

constexpr size_t TB_HDR = 64;
constexpr size_t TB_CACHE_MAX = (size_t)1 << 30;
constexpr int TB_CLASSES = 256;

struct tb_ctx {
    std::mutex lock;
    std::vector<void *> free_lists[TB_CLASSES];
    size_t in_use = 0, peak = 0, cached = 0;
};

tb_ctx *tb_device0;

/* The class of a request of `bytes`, and its size in *cap; -1 when too large to cache. */
int tb_class(size_t bytes, size_t *cap) {
    if (bytes <= 1024) {
        size_t c = (bytes + 63) / 64;
        if (c == 0) c = 1;
        *cap = c * 64;
        return (int)c - 1; /* 0..15 */
    }
    int lg = 63 - __builtin_clzll((unsigned long long)(bytes - 1)); /* 2^lg < bytes <= 2^(lg+1) */
    size_t base = (size_t)1 << lg, quarter = base / 4;
    size_t k = (bytes - base + quarter - 1) / quarter; /* 1..4 */
    *cap = base + k * quarter;
    int cls = 16 + (lg - 10) * 4 + (int)(k - 1);
    return cls < TB_CLASSES ? cls : -1;
}

int tb_device_count(void) { return 1; }

em_status tb_alloc(void *ctx, size_t bytes, void **buf);
void tb_free(void *ctx, void *buf);

/* ATen's own temporaries (a kernel's f32 copy of an f16 input, a double accumulator, the
 * results of the ops a kernel composes) come from the same caching allocator: with glibc's
 * malloc each large one is fresh pages from mmap, faulted in at ~12 us a 4 KiB page, which
 * made a softmax over [1024, 4096] 100x slower than the arithmetic. They count in the device's
 * bytes in use while a kernel runs (its scratch), as the backend.h contract says. */
void tb_aten_free(void *p) {
    if (p) tb_free(tb_device0, p);
}

struct tb_aten_allocator final : public c10::Allocator {
    c10::DataPtr allocate(size_t n) const override {
        void *p = nullptr;
        if (tb_alloc(tb_device0, n, &p) != EM_OK) throw std::bad_alloc();
        return {p, p, &tb_aten_free, c10::Device(c10::DeviceType::CPU)};
    }
    c10::DeleterFnPtr raw_deleter() const override { return &tb_aten_free; }
};

tb_aten_allocator tb_aten_alloc;

em_status tb_open(int index, void **ctx) {
    if (index != 0) return emt::fail(EM_ERR_DEVICE, "torch: no device %d", index);
    if (!tb_device0) {
        try {
            tb_device0 = new tb_ctx();
            at::set_num_threads(emt::threads());
            /* above the default CPU allocator's priority (0): ours from now on; memory the
             * default one gave keeps its own deleter */
            c10::SetCPUAllocator(&tb_aten_alloc, 1);
        } catch (...) {
            return emt::from_exception("open", std::current_exception());
        }
    }
    *ctx = tb_device0;
    return EM_OK;
}

em_status tb_alloc(void *ctx, size_t bytes, void **buf) {
    tb_ctx *c = (tb_ctx *)ctx;
    size_t cap;
    int cls = tb_class(bytes, &cap);
    if (cls < 0) cap = bytes;
    if (cap > SIZE_MAX - TB_HDR)
        return emt::fail(EM_ERR_NOMEM, "torch: cannot allocate %zu bytes", bytes);
    char *p = nullptr;
    {
        std::lock_guard<std::mutex> g(c->lock);
        if (cls >= 0 && !c->free_lists[cls].empty()) {
            p = (char *)c->free_lists[cls].back();
            c->free_lists[cls].pop_back();
            c->cached -= cap;
        }
        c->in_use += cap;
        if (c->in_use > c->peak) c->peak = c->in_use;
    }
    if (!p) {
        p = (char *)aligned_alloc(TB_HDR, (TB_HDR + cap + TB_HDR - 1) / TB_HDR * TB_HDR);
        if (!p) {
            std::lock_guard<std::mutex> g(c->lock);
            c->in_use -= cap;
            return emt::fail(EM_ERR_NOMEM, "torch: out of memory (%zu bytes)", bytes);
        }
        memcpy(p, &cap, sizeof cap);
    }
    *buf = p + TB_HDR;
    return EM_OK;
}

void tb_free(void *ctx, void *buf) {
    if (!buf) return;
    tb_ctx *c = (tb_ctx *)ctx;
    char *p = (char *)buf - TB_HDR;
    size_t cap;
    memcpy(&cap, p, sizeof cap);
    size_t cap2;
    int cls = tb_class(cap, &cap2);
    {
        std::lock_guard<std::mutex> g(c->lock);
        c->in_use -= cap;
        if (cls >= 0 && cap2 == cap && c->cached + cap <= TB_CACHE_MAX) {
            try {
                c->free_lists[cls].push_back(p);
                c->cached += cap;
                return;
            } catch (...) {
            }
        }
    }
    free(p);
}

void tb_memory_release(void *ctx) {
    tb_ctx *c = (tb_ctx *)ctx;
    std::lock_guard<std::mutex> g(c->lock);
    for (auto &l : c->free_lists) {
        for (void *p : l) free(p);
        l.clear();
        l.shrink_to_fit();
    }
    c->cached = 0;
}

void tb_memory(void *ctx, size_t *in_use, size_t *peak) {
    tb_ctx *c = (tb_ctx *)ctx;
    std::lock_guard<std::mutex> g(c->lock);
    if (in_use) *in_use = c->in_use;
    if (peak) *peak = c->peak;
}

void tb_memory_reset_peak(void *ctx) {
    tb_ctx *c = (tb_ctx *)ctx;
    std::lock_guard<std::mutex> g(c->lock);
    c->peak = c->in_use;
}

size_t tb_memory_cached(void *ctx) {
    tb_ctx *c = (tb_ctx *)ctx;
    std::lock_guard<std::mutex> g(c->lock);
    return c->cached;
}

em_status tb_write(void *, void *buf, size_t offset, const void *src, size_t bytes) {
    memcpy((char *)buf + offset, src, bytes);
    return EM_OK;
}

em_status tb_read(void *, const void *buf, size_t offset, void *dst, size_t bytes) {
    memcpy(dst, (const char *)buf + offset, bytes);
    return EM_OK;
}

/* ---- creation and copy ---- */

bool is_float(em_dtype dt) { return dt == EM_F32 || dt == EM_F64 || emt::is_half(dt); }

/* Values of `in` converted as ember converts (ref's rules): floats round to the dtype (f64 to
 * f16 / bf16 through f32), floats to ints truncate toward zero, NaN to 0, saturating at the
 * int64 range, then wrap to the int's width; bool is v != 0. */
at::Tensor convert(const at::Tensor &x, em_dtype from, em_dtype to) {
    at::ScalarType st = emt::scalar_type(to);
    if (is_float(from) && !is_float(to) && to != EM_BOOL) {
        at::Tensor d = x.to(at::kDouble);
        const double lim = 9.2233720368547758e18;
        at::Tensor safe = at::where(d.isnan(), at::zeros({}, d.options()), d).clamp(-lim, lim);
        at::Tensor big = d.ge(lim), small = d.le(-lim);
        /* inside the range the double converts exactly after truncation; the ends are
         * int64's limits */
        at::Tensor i = safe.clamp(-9.2233720368547748e18, 9.2233720368547748e18).to(at::kLong);
        i = at::where(big, at::full({}, INT64_MAX, i.options()), i);
        i = at::where(small, at::full({}, INT64_MIN, i.options()), i);
        return st == at::kLong ? i : i.to(st);
    }
    if (from == EM_F64 && emt::is_half(to)) return x.to(at::kFloat).to(st);
    return x.to(st);
}

em_status tb_copy(void *, const em_view *out, const em_view *in) {
    EMT_BEGIN
    std::vector<int64_t> flipped;
    em_view po = emt::positive(out, &flipped);
    at::Tensor src = emt::in(in);
    if (in->dtype != out->dtype) src = convert(src, in->dtype, out->dtype);
    /* an output with negative strides: write the positive view of its memory with the
     * values in reverse along those dims */
    if (!flipped.empty()) src = src.flip(flipped);
    emt::wrap(&po).copy_(src);
    EMT_END("copy")
}

em_status tb_fill(void *, const em_view *out, double value) {
    EMT_BEGIN
    at::Tensor v = at::full({}, value, at::TensorOptions().dtype(at::kDouble));
    emt::wrap(out).copy_(convert(v, EM_F64, out->dtype));
    EMT_END("fill")
}

em_status tb_arange(void *, const em_view *out, double start, double step) {
    EMT_BEGIN
    /* start + i * step in double, as ref computes it */
    int64_t n = out->shape[0];
    at::Tensor i = at::arange(n, at::TensorOptions().dtype(at::kDouble));
    at::Tensor v = i.mul(step).add(start);
    emt::wrap(out).copy_(convert(v, EM_F64, out->dtype));
    EMT_END("arange")
}

em_backend_ops tb_ops;

} // namespace

/* ---- the plugin's entry points ---- */

EM_PLUGIN_DEFINE_ABI();

extern "C" EM_PLUGIN_EXPORT em_status ember_plugin_init(const em_plugin_host *h) {
    if (!h || h->abi_version != EM_BACKEND_ABI_VERSION) return EM_ERR_UNSUPPORTED;
    emt::host = h;
    /* EMBER_TORCH_TEST_INIT_FAIL: the tests' way to see a plugin whose initialization fails */
    const char *test_fail = getenv("EMBER_TORCH_TEST_INIT_FAIL");
    if (test_fail && *test_fail)
        return emt::fail(EM_ERR_BACKEND, "torch: initialization refused (%s)", test_fail);
    em_backend_ops &o = tb_ops;
    memset(&o, 0, sizeof o);
    o.abi_version = EM_BACKEND_ABI_VERSION;
    o.name = "torch";
    o.id = EM_BACKEND_TORCH;
    o.caps = EM_CAP_STRIDED_INPUTS | EM_CAP_HOST_MEMORY;
    o.device_count = tb_device_count;
    o.open = tb_open;
    o.alloc = tb_alloc;
    o.free = tb_free;
    o.write = tb_write;
    o.read = tb_read;
    o.memory = tb_memory;
    o.memory_reset_peak = tb_memory_reset_peak;
    o.memory_cached = tb_memory_cached;
    o.memory_release = tb_memory_release;
    o.fill = tb_fill;
    o.arange = tb_arange;
    o.copy = tb_copy;
    /* random: left NULL, so ember's Philox (ref's kernel) fills torch's buffers: ATen's
     * generator gives other numbers than every other backend. */
    try {
        emt_fill_elementwise(&o);
        emt_fill_reduce(&o);
        emt_fill_nn(&o);
    } catch (...) {
        return emt::from_exception("init", std::current_exception());
    }
    return h->backend_register(&o);
}

/* ---- a baseline for `ember-bench torch` ----
 * ns per at::add of two 1-element f32 tensors called straight from C++ (out_form 0: at::add,
 * which allocates its result; 1: at::add_out into a preallocated one), in c10::InferenceMode as
 * the backend's kernels run, over `iters` calls. What the benchmark compares em_add on torch
 * against: the cost of ember's dispatch on top of ATen's. */
extern "C" EM_PLUGIN_EXPORT double ember_torch_bench_add_ns(int64_t iters, int out_form) {
    try {
        c10::InferenceMode guard;
        at::Tensor a = at::ones({1}, at::kFloat), b = at::ones({1}, at::kFloat);
        at::Tensor out = at::empty({1}, at::kFloat);
        for (int i = 0; i < 100; i++) at::add_out(out, a, b); /* warm-up */
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (out_form) {
            for (int64_t i = 0; i < iters; i++) at::add_out(out, a, b);
        } else {
            for (int64_t i = 0; i < iters; i++) {
                at::Tensor r = at::add(a, b);
                (void)r;
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
        return iters > 0 ? ns / (double)iters : 0.0;
    } catch (...) {
        return -1.0;
    }
}
