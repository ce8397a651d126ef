/*
 * blocks.h — blocks of strided operands as contiguous arrays, for the per-level row functions
 * of elementwise.c and compare.c (see iter.h): a row of up to CPU_HALF_BLOCK elements of an
 * operand with stride s is read as float (f32, f16, bf16), double (f64) or int64 (every
 * integer dtype and bool), straight from the tensor when it already is one, else converted or
 * gathered into a buffer; and written back the same way. Stride 0 reads one element.
 * Conversions are ref's (iter.h, half.h).
 */
#ifndef EMBER_CPU_BLOCKS_H
#define EMBER_CPU_BLOCKS_H

#include "half.h"
#include "iter.h"

#define CPU_BLK CPU_HALF_BLOCK

/** n elements (one when s == 0) of dtype dt (f32, f16 or bf16) at p as float. */
static inline const float *cpu_blk_f32(em_dtype dt, const char *p, int64_t s, int64_t n,
                                       float *restrict buf) {
    if (dt == EM_F32) {
        const float *x = (const float *)p;
        if (s == 1 || s == 0) return x;
        for (int64_t i = 0; i < n; i++) buf[i] = x[i * s];
        return buf;
    }
    const uint16_t *x = (const uint16_t *)p;
    if (s == 0) {
        buf[0] = dt == EM_F16 ? em_f16_to_f32(x[0]) : em_bf16_to_f32(x[0]);
        return buf;
    }
    if (s == 1) {
        cpu_half_to_f32_n(dt, buf, x, n);
        return buf;
    }
    uint16_t tmp[CPU_BLK];
    for (int64_t i = 0; i < n; i++) tmp[i] = x[i * s];
    cpu_half_to_f32_n(dt, buf, tmp, n);
    return buf;
}

/** Writes n floats v to p (dtype dt: f32, f16 or bf16, stride s). */
static inline void cpu_blk_st_f32(em_dtype dt, char *p, int64_t s, const float *restrict v,
                                  int64_t n) {
    if (dt == EM_F32) {
        float *o = (float *)p;
        if (s == 1) memcpy(o, v, (size_t)n * sizeof *o);
        else for (int64_t i = 0; i < n; i++) o[i * s] = v[i];
        return;
    }
    uint16_t *o = (uint16_t *)p;
    if (s == 1) {
        cpu_f32_to_half_n(dt, o, v, n);
        return;
    }
    uint16_t tmp[CPU_BLK];
    cpu_f32_to_half_n(dt, tmp, v, n);
    for (int64_t i = 0; i < n; i++) o[i * s] = tmp[i];
}

/** n f64 elements (one when s == 0) at p, contiguous. */
static inline const double *cpu_blk_f64(const char *p, int64_t s, int64_t n,
                                        double *restrict buf) {
    const double *x = (const double *)p;
    if (s == 1 || s == 0) return x;
    for (int64_t i = 0; i < n; i++) buf[i] = x[i * s];
    return buf;
}

static inline void cpu_blk_st_f64(char *p, int64_t s, const double *restrict v, int64_t n) {
    double *o = (double *)p;
    if (s == 1) memcpy(o, v, (size_t)n * sizeof *o);
    else for (int64_t i = 0; i < n; i++) o[i * s] = v[i];
}

#define CPU_BLK_LD_INT(T, CONV)                                                                \
    do {                                                                                       \
        const T *x = (const T *)p;                                                             \
        for (int64_t i = 0; i < n; i++) buf[i] = CONV(x[i * s]);                               \
    } while (0)
#define CPU_BLK_ID(x) (int64_t)(x)
#define CPU_BLK_NZ(x) (int64_t)((x) != 0)

/** n elements (one when s == 0) of an integer or bool dtype at p as int64. */
static inline const int64_t *cpu_blk_i64(em_dtype dt, const char *p, int64_t s, int64_t n,
                                         int64_t *restrict buf) {
    if (s == 0) n = 1;
    switch (dt) {
    case EM_I64:
        if (s == 1 || n == 1) return (const int64_t *)p;
        CPU_BLK_LD_INT(int64_t, CPU_BLK_ID);
        break;
    case EM_I32: CPU_BLK_LD_INT(int32_t, CPU_BLK_ID); break;
    case EM_I16: CPU_BLK_LD_INT(int16_t, CPU_BLK_ID); break;
    case EM_I8: case EM_Q8: case EM_Q4: CPU_BLK_LD_INT(int8_t, CPU_BLK_ID); break;
    case EM_U8: CPU_BLK_LD_INT(uint8_t, CPU_BLK_ID); break;
    case EM_BOOL: CPU_BLK_LD_INT(uint8_t, CPU_BLK_NZ); break;
    default:
        for (int64_t i = 0; i < n; i++) buf[i] = cpu_ld_i64(p + i * s * (int64_t)em_dtype_size(dt), dt);
        break;
    }
    return buf;
}

#define CPU_BLK_ST_INT(T, CONV)                                                                \
    do {                                                                                       \
        T *o = (T *)p;                                                                         \
        for (int64_t i = 0; i < n; i++) o[i * s] = CONV(v[i]);                                 \
    } while (0)
#define CPU_BLK_W32(x) (int32_t)(uint32_t)(uint64_t)(x)
#define CPU_BLK_W16(x) (int16_t)(uint16_t)(uint64_t)(x)
#define CPU_BLK_W8(x) (int8_t)(uint8_t)(uint64_t)(x)
#define CPU_BLK_WU8(x) (uint8_t)(uint64_t)(x)
#define CPU_BLK_B(x) (uint8_t)((x) != 0)

/** Writes n int64 values to p (an integer or bool dtype, stride s), wrapping to the width. */
static inline void cpu_blk_st_i64(em_dtype dt, char *p, int64_t s, const int64_t *restrict v,
                                  int64_t n) {
    switch (dt) {
    case EM_I64: CPU_BLK_ST_INT(int64_t, CPU_BLK_ID); break;
    case EM_I32: CPU_BLK_ST_INT(int32_t, CPU_BLK_W32); break;
    case EM_I16: CPU_BLK_ST_INT(int16_t, CPU_BLK_W16); break;
    case EM_I8: case EM_Q8: case EM_Q4: CPU_BLK_ST_INT(int8_t, CPU_BLK_W8); break;
    case EM_U8: CPU_BLK_ST_INT(uint8_t, CPU_BLK_WU8); break;
    case EM_BOOL: CPU_BLK_ST_INT(uint8_t, CPU_BLK_B); break;
    default:
        for (int64_t i = 0; i < n; i++) cpu_st_i64(p + i * s * (int64_t)em_dtype_size(dt), dt, v[i]);
        break;
    }
}

#endif /* EMBER_CPU_BLOCKS_H */
