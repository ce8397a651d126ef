/*
 * cpu_test_util.h — small helpers the cpu tests share (tests/cpu, tests/unit/test_cpu_isa.c):
 * one element of any dtype written or read as a double (ref's conversions: f16 and bf16 by
 * way of float, integers truncated), and a dense row-major view of a buffer.
 */
#ifndef EMBER_CPU_TEST_UTIL_H
#define EMBER_CPU_TEST_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "ember/backend.h"
#include "ember/ember.h"

static inline bool ct_is_float(em_dtype dt) {
    return dt == EM_F32 || dt == EM_F64 || dt == EM_F16 || dt == EM_BF16;
}

/** Element i of p (dtype dt) = v. */
static inline void ct_store(void *p, em_dtype dt, int64_t i, double v) {
    switch (dt) {
    case EM_F32: ((float *)p)[i] = (float)v; break;
    case EM_F64: ((double *)p)[i] = v; break;
    case EM_F16: ((uint16_t *)p)[i] = em_f32_to_f16((float)v); break;
    case EM_BF16: ((uint16_t *)p)[i] = em_f32_to_bf16((float)v); break;
    case EM_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    case EM_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case EM_I16: ((int16_t *)p)[i] = (int16_t)v; break;
    case EM_I8: ((int8_t *)p)[i] = (int8_t)v; break;
    case EM_U8: ((uint8_t *)p)[i] = (uint8_t)(int64_t)v; break;
    case EM_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: break;
    }
}

/** Element i of p (dtype dt) as a double. */
static inline double ct_load(const void *p, em_dtype dt, int64_t i) {
    switch (dt) {
    case EM_F32: return ((const float *)p)[i];
    case EM_F64: return ((const double *)p)[i];
    case EM_F16: return em_f16_to_f32(((const uint16_t *)p)[i]);
    case EM_BF16: return em_bf16_to_f32(((const uint16_t *)p)[i]);
    case EM_I64: return (double)((const int64_t *)p)[i];
    case EM_I32: return ((const int32_t *)p)[i];
    case EM_I16: return ((const int16_t *)p)[i];
    case EM_I8: return ((const int8_t *)p)[i];
    default: return ((const uint8_t *)p)[i];
    }
}

/** A contiguous row-major view of buf, offset 0. */
static inline em_view ct_dense(void *buf, em_dtype dt, int rank, const int64_t *shape) {
    em_view v;
    memset(&v, 0, sizeof v);
    v.buf = buf;
    v.dtype = dt;
    v.rank = rank;
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        v.shape[d] = shape[d];
        v.strides[d] = s;
        s *= shape[d];
    }
    return v;
}

#endif
