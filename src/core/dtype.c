/* dtype.c — dtype names, kinds, sizes, and the f16 / bf16 conversions. */
#include <string.h>

#include "core/internal.h"

typedef struct emi_dtype_info {
    const char *name;
    em_kind kind;
} emi_dtype_info;

static const emi_dtype_info emi_dtypes[EM_DTYPE_COUNT] = {
    [EM_F32] = {"f32", EM_KIND_FLOAT},  [EM_F64] = {"f64", EM_KIND_FLOAT},
    [EM_F16] = {"f16", EM_KIND_FLOAT},  [EM_BF16] = {"bf16", EM_KIND_FLOAT},
    [EM_I64] = {"i64", EM_KIND_INT},    [EM_I32] = {"i32", EM_KIND_INT},
    [EM_I16] = {"i16", EM_KIND_INT},    [EM_I8] = {"i8", EM_KIND_INT},
    [EM_U8] = {"u8", EM_KIND_INT},      [EM_BOOL] = {"bool", EM_KIND_BOOL},
    [EM_Q8] = {"q8", EM_KIND_QUANTIZED}, [EM_Q4] = {"q4", EM_KIND_QUANTIZED},
};

const uint8_t emi_dtype_sizes[EM_DTYPE_COUNT] = {
    [EM_F32] = 4, [EM_F64] = 8, [EM_F16] = 2, [EM_BF16] = 2, [EM_I64] = 8, [EM_I32] = 4,
    [EM_I16] = 2, [EM_I8] = 1,  [EM_U8] = 1,  [EM_BOOL] = 1, [EM_Q8] = 1,  [EM_Q4] = 1,
};

static bool emi_dtype_valid(em_dtype dt) { return (int)dt >= 0 && (int)dt < EM_DTYPE_COUNT; }

em_kind em_dtype_kind(em_dtype dt) {
    return emi_dtype_valid(dt) ? emi_dtypes[dt].kind : EM_KIND_FLOAT;
}

const char *em_dtype_name(em_dtype dt) { return emi_dtype_valid(dt) ? emi_dtypes[dt].name : "?"; }

size_t em_dtype_size(em_dtype dt) { return emi_dtype_size(dt); }

const char *em_kind_name(em_kind k) {
    switch (k) {
    case EM_KIND_FLOAT: return "float";
    case EM_KIND_INT: return "int";
    case EM_KIND_BOOL: return "bool";
    case EM_KIND_QUANTIZED: return "quantized";
    }
    return "?";
}

em_status em_dtype_parse(const char *name, em_dtype *out) {
    if (!name) return emi_fail(EM_ERR_ARG, "em_dtype_parse: name is NULL");
    if (!out) return emi_fail(EM_ERR_ARG, "em_dtype_parse: out is NULL");
    for (int i = 0; i < EM_DTYPE_COUNT; i++) {
        if (strcmp(name, emi_dtypes[i].name) == 0) {
            *out = (em_dtype)i;
            return EM_OK;
        }
    }
    return emi_fail(EM_ERR_ARG, "em_dtype_parse: unknown dtype '%.32s'", name);
}

static uint32_t emi_f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float emi_u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t em_f32_to_f16(float f) {
    uint32_t x = emi_f2u(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
    int32_t e = (int32_t)exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u); /* overflow: inf */
    if (e <= 0) {                                    /* subnormal or zero */
        if (e < -10) return (uint16_t)sign;
        man |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) half++; /* may carry into inf */
    return (uint16_t)half;
}

float em_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0) {
        if (man == 0) return emi_u2f(sign);
        /* subnormal: normalize */
        int e = -1;
        do {
            man <<= 1;
            e++;
        } while (!(man & 0x400u));
        man &= 0x3ffu;
        return emi_u2f(sign | ((uint32_t)(127 - 15 - e) << 23) | (man << 13));
    }
    if (exp == 31) return emi_u2f(sign | 0x7f800000u | (man << 13));
    return emi_u2f(sign | ((exp - 15 + 127) << 23) | (man << 13));
}

uint16_t em_f32_to_bf16(float f) {
    uint32_t x = emi_f2u(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float em_bf16_to_f32(uint16_t h) { return emi_u2f((uint32_t)h << 16); }
