/* cpu.c — the cpu backend's table, its device, and its copy and fill kernels. */
#include <string.h>

#include "cpu.h"

static int cpu_ctx_token; /* the one cpu device needs no state of its own */

static int cpu_device_count(void) { return 1; }

static em_status cpu_open(int index, void **ctx) {
    if (index != 0) return em_backend_set_error(EM_ERR_DEVICE, "cpu: no device %d", index);
    cpu_isa();     /* choose the kernels' instruction set once (isa.c) */
    cpu_threads(); /* start the pool (and size OpenBLAS) once */
    cpu_fallback_init(); /* EMBER_REPORT_FALLBACKS */
    *ctx = &cpu_ctx_token;
    return EM_OK;
}

static em_status cpu_write(void *ctx, void *buf, size_t offset, const void *src, size_t bytes) {
    (void)ctx;
    memcpy((char *)buf + offset, src, bytes);
    return EM_OK;
}

static em_status cpu_read(void *ctx, const void *buf, size_t offset, void *dst, size_t bytes) {
    (void)ctx;
    memcpy(dst, (const char *)buf + offset, bytes);
    return EM_OK;
}

const em_backend_ops *cpu_ref(void) { return em_backend_get(EM_BACKEND_REF); }

/* ---- copy ---- */

typedef struct copy_job {
    char *dst;
    const char *src;
    size_t sz;
} copy_job;

static void copy_range(int64_t lo, int64_t hi, void *arg) {
    copy_job *j = arg;
    memcpy(j->dst + lo * (int64_t)j->sz, j->src + lo * (int64_t)j->sz, (size_t)(hi - lo) * j->sz);
}

/* Casts between the float dtypes, contiguous to contiguous: f32 <-> f16, bf16, f64 (the
 * conversions ref makes, element for element: a float dtype widened to double is exact, so
 * going through float gives the same bits). */
typedef struct cast_job {
    void *dst;
    const void *src;
    em_dtype to, from;
} cast_job;

static void cast_range(int64_t lo, int64_t hi, void *arg) {
    const cast_job *j = arg;
    if (j->from == EM_F32) {
        const float *x = (const float *)j->src + lo;
        if (j->to == EM_F16) {
            uint16_t *o = (uint16_t *)j->dst + lo;
            for (int64_t i = 0; i < hi - lo; i++) o[i] = em_f32_to_f16(x[i]);
        } else if (j->to == EM_BF16) {
            uint16_t *o = (uint16_t *)j->dst + lo;
            for (int64_t i = 0; i < hi - lo; i++) o[i] = em_f32_to_bf16(x[i]);
        } else {
            double *o = (double *)j->dst + lo;
            for (int64_t i = 0; i < hi - lo; i++) o[i] = x[i];
        }
        return;
    }
    float *o = (float *)j->dst + lo;
    if (j->from == EM_F16) {
        const uint16_t *x = (const uint16_t *)j->src + lo;
        for (int64_t i = 0; i < hi - lo; i++) o[i] = em_f16_to_f32(x[i]);
    } else if (j->from == EM_BF16) {
        const uint16_t *x = (const uint16_t *)j->src + lo;
        for (int64_t i = 0; i < hi - lo; i++) o[i] = em_bf16_to_f32(x[i]);
    } else {
        const double *x = (const double *)j->src + lo;
        for (int64_t i = 0; i < hi - lo; i++) o[i] = (float)x[i];
    }
}

/* True for the casts cast_range makes: f32 to or from f16, bf16 or f64. */
static bool float_cast(em_dtype to, em_dtype from) {
    em_dtype other = to == EM_F32 ? from : from == EM_F32 ? to : EM_F32;
    return other == EM_F16 || other == EM_BF16 || other == EM_F64;
}

em_status cpu_copy(void *ctx, const em_view *out, const em_view *in) {
    if (!cpu_contiguous(out) || !cpu_contiguous(in))
        return CPU_FALLBACK(CPU_FB_COPY, out->dtype, copy, ctx, out, in);
    if (out->dtype == in->dtype) {
        copy_job j = {cpu_ptr(out), cpu_ptr(in), em_dtype_size(in->dtype)};
        cpu_parallel_for(cpu_numel(out), 1 << 18, copy_range, &j);
        return EM_OK;
    }
    if (float_cast(out->dtype, in->dtype)) {
        cast_job j = {cpu_ptr(out), cpu_ptr(in), out->dtype, in->dtype};
        cpu_parallel_for(cpu_numel(out), 1 << 15, cast_range, &j);
        return EM_OK;
    }
    return CPU_FALLBACK(CPU_FB_COPY, out->dtype, copy, ctx, out, in);
}

em_status cpu_contig_input(const em_view *in, em_view *out, void **tmp) {
    *tmp = NULL;
    *out = *in;
    if (cpu_contiguous(in)) return EM_OK;
    size_t bytes = (size_t)cpu_numel(in) * em_dtype_size(in->dtype);
    void *p = cpu_scratch(bytes);
    if (!p) return em_backend_set_error(EM_ERR_NOMEM, "cpu: out of memory (%zu bytes)", bytes);
    out->buf = p;
    out->offset = 0;
    int64_t s = 1;
    for (int d = in->rank - 1; d >= 0; d--) {
        out->strides[d] = s;
        s *= in->shape[d];
    }
    em_status st = cpu_copy(NULL, out, in);
    if (st != EM_OK) {
        cpu_scratch_free(p);
        return st;
    }
    *tmp = p;
    return EM_OK;
}

/* ---- fill ---- */

typedef struct fill_job {
    void *dst;
    em_dtype dt;
    float f32;
    double f64;
} fill_job;

static void fill_range(int64_t lo, int64_t hi, void *arg) {
    fill_job *j = arg;
    if (j->dt == EM_F32) {
        float *d = j->dst;
        for (int64_t i = lo; i < hi; i++) d[i] = j->f32;
    } else {
        double *d = j->dst;
        for (int64_t i = lo; i < hi; i++) d[i] = j->f64;
    }
}

em_status cpu_fill(void *ctx, const em_view *out, double value) {
    if ((out->dtype == EM_F32 || out->dtype == EM_F64) && cpu_contiguous(out)) {
        fill_job j = {cpu_ptr(out), out->dtype, (float)value, value};
        cpu_parallel_for(cpu_numel(out), 1 << 16, fill_range, &j);
        return EM_OK;
    }
    return CPU_FALLBACK(CPU_FB_FILL, out->dtype, fill, ctx, out, value);
}

const em_backend_ops em_cpu_backend_ops = {
    .abi_version = EM_BACKEND_ABI_VERSION,
    .name = "cpu",
    .id = EM_BACKEND_CPU,
    .caps = EM_CAP_STRIDED_INPUTS | EM_CAP_HOST_MEMORY,
    .device_count = cpu_device_count,
    .open = cpu_open,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .write = cpu_write,
    .read = cpu_read,
    .memory = cpu_memory,
    .memory_reset_peak = cpu_memory_reset_peak,
    .memory_cached = cpu_memory_cached,
    .memory_release = cpu_memory_release,
    .fill = cpu_fill,
    .copy = cpu_copy,
    .unary = cpu_unary,
    .binary = cpu_binary,
    .binary_scalar = cpu_binary_scalar,
    .where = cpu_where,
    .gather = cpu_gather,
    .scatter_add = cpu_scatter_add,
    .matmul = cpu_matmul,
    .reduce = cpu_reduce,
    .softmax = cpu_softmax,
    .conv2d = cpu_conv2d,
    .conv2d_weight_grad = cpu_conv2d_weight_grad,
    .conv_transpose2d = cpu_conv_transpose2d,
    .max_pool2d = cpu_max_pool2d,
    .avg_pool2d = cpu_avg_pool2d,
    .avg_pool2d_backward = cpu_avg_pool2d_backward,
    .layer_norm = cpu_layer_norm,
    /* fallback.c: ref's kernels, counted (fallback.h) */
    .arange = cpu_arange,
    .random = cpu_random,
    .cumsum = cpu_cumsum,
    .index_select = cpu_index_select,
    .sort = cpu_sort,
    .adaptive_avg_pool2d = cpu_adaptive_avg_pool2d,
    .adaptive_avg_pool2d_backward = cpu_adaptive_avg_pool2d_backward,
};
