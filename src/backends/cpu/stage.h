/*
 * stage.h — stand-ins for the operands a kernel cannot take as they are: a strided or f16 /
 * bf16 input becomes a contiguous copy of the dtype the kernel computes in (cpu_copy packs
 * and converts it, once), an output of another layout or dtype gets a contiguous scratch
 * buffer that cpu_stage_out_finish copies (and rounds) into it. The kernels that run f16/bf16
 * through their f32 loops round once, from the f32 result, as ref does (ref_st: a double to
 * float, then float to half).
 */
#ifndef EMBER_CPU_STAGE_H
#define EMBER_CPU_STAGE_H

#include <string.h>

#include "cpu.h"

typedef struct cpu_stage {
    em_view v;  /* what the kernel uses */
    void *tmp;  /* scratch behind v (NULL: v is the caller's view) */
} cpu_stage;

/** The compute dtype of dt: f32 for f16/bf16, else dt. */
static inline em_dtype cpu_stage_dtype(em_dtype dt) {
    return dt == EM_F16 || dt == EM_BF16 ? EM_F32 : dt;
}

static inline void cpu_stage_free(cpu_stage *s) {
    if (s->tmp) cpu_scratch_free(s->tmp);
    s->tmp = NULL;
}

/* A contiguous view of v's shape and dtype dt in fresh scratch (s->tmp). */
static inline em_status cpu_stage_alloc(const em_view *v, em_dtype dt, cpu_stage *s) {
    s->v = *v;
    s->v.dtype = dt;
    s->v.offset = 0;
    int64_t n = 1;
    for (int d = v->rank - 1; d >= 0; d--) {
        s->v.strides[d] = n;
        n *= v->shape[d];
    }
    size_t bytes = (size_t)(n > 0 ? n : 1) * em_dtype_size(dt);
    s->tmp = cpu_scratch(bytes);
    if (!s->tmp) return em_backend_set_error(EM_ERR_NOMEM, "cpu: out of memory (%zu bytes)", bytes);
    s->v.buf = s->tmp;
    return EM_OK;
}

/** in as a contiguous view of dtype dt (in itself when it already is one). NULL in: nothing
 *  (s->v zeroed, s->tmp NULL). */
static inline em_status cpu_stage_in(const em_view *in, em_dtype dt, cpu_stage *s) {
    s->tmp = NULL;
    if (!in) {
        memset(&s->v, 0, sizeof s->v);
        return EM_OK;
    }
    s->v = *in;
    if (in->dtype == dt && cpu_contiguous(in)) return EM_OK;
    em_status st = cpu_stage_alloc(in, dt, s);
    if (st == EM_OK && cpu_numel(in) > 0) st = cpu_copy(NULL, &s->v, in);
    if (st != EM_OK) cpu_stage_free(s);
    return st;
}

/** Where a kernel writing dtype dt contiguously can put out's elements: out itself when it is
 *  contiguous of dtype dt, else scratch (copy_in: first filled from out, for kernels that
 *  accumulate into their output). */
static inline em_status cpu_stage_out(const em_view *out, em_dtype dt, bool copy_in,
                                      cpu_stage *s) {
    s->tmp = NULL;
    s->v = *out;
    if (out->dtype == dt && cpu_contiguous(out)) return EM_OK;
    em_status st = cpu_stage_alloc(out, dt, s);
    if (st == EM_OK && copy_in && cpu_numel(out) > 0) st = cpu_copy(NULL, &s->v, out);
    if (st != EM_OK) cpu_stage_free(s);
    return st;
}

/** After the kernel (status st): the scratch copied (and rounded) into out, then freed. */
static inline em_status cpu_stage_out_finish(const em_view *out, cpu_stage *s, em_status st) {
    if (s->tmp && st == EM_OK && cpu_numel(out) > 0) st = cpu_copy(NULL, out, &s->v);
    cpu_stage_free(s);
    return st;
}

#endif /* EMBER_CPU_STAGE_H */
