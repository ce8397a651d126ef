/*
 * common.glsl — the prelude of every ember Vulkan shader (see vk.h).
 *
 * A variant is compiled with its dtype tags as defines (-DA=f16 -DO=f32 ...); the build adds
 * -DUSE_F64 when a tag is f64 and -DUSE_I64 when one is i64 (only those variants use 64-bit
 * types, so only they need shaderFloat64 / shaderInt64).
 *
 * Dtype tags f32 f64 f16 bf16 i64 i32 i16 i8 u8 b8. For a tag D:
 *   TY_D        storage type of a buffer element (f16 and bf16 are uint16_t, bool uint8_t)
 *   CT_D        computation type: float (f16, bf16, f32), double (f64), int64_t (i64), int
 *               (smaller ints and bool)
 *   LD_D(x)     a stored element x as CT_D
 *   ST_D(v)     a CT_D value v as a storage element (f16/bf16 round to nearest even as ember's
 *               em_f32_to_f16 / em_f32_to_bf16; bool stores v != 0; ints wrap to the width)
 *   ISF_D       1 for float tags, 0 for int and bool tags; the build also defines K_ISF for
 *               each define K=D with a float tag D (for #ifdef: glslang's #if does not paste)
 *   FROMF_D(x)  a float x (FROMD_D: a double) as CT_D the way ember converts (ref_st): floats
 *               round; ints truncate toward zero saturating at the int64 range (NaN -> 0) and
 *               wrap to the width; bool is x != 0
 *   FROMI_D(x)  an int x (FROML_D: an int64_t) as CT_D
 * CAT(a, b) pastes after expansion: CAT(LD_, A)(x) with -DA=f16.
 *
 * BUF(binding, tag, name) declares the storage buffer at `binding` holding TY_tag elements as
 * the array `name`. P is the dispatch's parameters: P.v[k] the views (vk_view_arg), P.i[],
 * P.f[], and PF64(k) / PI64(k) the doubles and int64s of vk_set_f64 / vk_set_i64.
 * vidx(k, i) is the element offset in its buffer of row-major linear index i of view k.
 * GRID_LOOP(i, n) runs i over [0, n) across every invocation of a 1-d dispatch of WG-wide
 * groups (grid-stride: the groups may be fewer than n / WG).
 */
#extension GL_EXT_shader_8bit_storage : enable
#extension GL_EXT_shader_16bit_storage : enable
#ifdef USE_I64
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : enable
#endif
#ifdef USE_F64
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : enable
#endif

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)

#ifndef WG
#define WG 256
#endif

struct view_t {
    int shape[8];
    int strides[8];
    int offset;
    int rank;
    int numel;
    int contig;
};

layout(std430, binding = 0) readonly buffer Params {
    view_t v[6];
    int i[16];
    float f[16];
    uint d[16];
} P;

#ifdef USE_F64
#define PF64(k) packDouble2x32(uvec2(P.d[2 * (k)], P.d[2 * (k) + 1]))
#endif
#if defined(USE_I64) || defined(USE_F64)
#define PI64(k) int64_t(pack64(uvec2(P.d[2 * (k)], P.d[2 * (k) + 1])))
#endif

/* The op a pipeline was specialized on (vk_launch_op), -1 when none: OP_OR(x) is it, else x
 * (e.g. OP_OR(P.i[0])), a constant the driver folds when it makes the pipeline. */
layout(constant_id = 0) const int SPEC_OP = -1;
#define OP_OR(x) (SPEC_OP >= 0 ? SPEC_OP : (x))
/* 1 when every view of the dispatch (P.v[k] with numel > 0) is contiguous (set by vk_launch):
 * vidx then folds to offset + i. */
layout(constant_id = 1) const int SPEC_CONTIG = 0;

#define BUF(b, tag, name) layout(std430, binding = b) buffer B##b { CAT(TY_, tag) name[]; }

/* The buffer offset of row-major linear index i of view k. */
int vidx(int k, int i) {
    if (SPEC_CONTIG == 1 || P.v[k].contig != 0) return P.v[k].offset + i;
    int off = P.v[k].offset;
    for (int d = P.v[k].rank - 1; d >= 0; d--) {
        int s = P.v[k].shape[d];
        int q = i / s;
        off += (i - q * s) * P.v[k].strides[d];
        i = q;
    }
    return off;
}

#define GRID_LOOP(i, n)                                                                        \
    for (int i = int(gl_GlobalInvocationID.x); i < (n); i += int(gl_NumWorkGroups.x) * WG)

/* ---- f16 and bf16 as 16-bit patterns ---- */
float f16_to_f32(uint h) {
    uint s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0u) {
        float f = float(m) * 5.9604644775390625e-8; /* m * 2^-24, exact */
        return s != 0u ? -f : f;
    }
    if (e == 31u) return uintBitsToFloat(s | 0x7f800000u | (m << 13));
    return uintBitsToFloat(s | ((e + 112u) << 23) | (m << 13));
}

/* em_f32_to_f16: round to nearest even; NaN quiet with its sign and top payload bits. */
uint f32_to_f16(float f) {
    uint x = floatBitsToUint(f);
    uint sign = (x >> 16) & 0x8000u, ex = (x >> 23) & 0xffu, man = x & 0x7fffffu;
    if (ex == 0xffu) return sign | 0x7c00u | (man != 0u ? 0x200u | (man >> 13) : 0u);
    int e = int(ex) - 127 + 15;
    if (e >= 31) return sign | 0x7c00u;
    if (e <= 0) {
        if (e < -10) return sign;
        man |= 0x800000u;
        uint shift = uint(14 - e);
        uint half_ = man >> shift, rem = man & ((1u << shift) - 1u), mid = 1u << (shift - 1u);
        if (rem > mid || (rem == mid && (half_ & 1u) != 0u)) half_++;
        return sign | half_;
    }
    uint h = sign | (uint(e) << 10) | (man >> 13), rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u)) h++;
    return h;
}

float bf16_to_f32(uint h) { return uintBitsToFloat(h << 16); }

uint f32_to_bf16(float f) {
    uint x = floatBitsToUint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return ((x >> 16) | 0x40u) & 0xffffu;
    x += 0x7fffu + ((x >> 16) & 1u);
    return x >> 16;
}

/* ---- float -> int the way ember converts (ref_st) ---- */
/* The low 32 bits of trunc(x) saturated to the int64 range (NaN -> 0), as an int. */
int f2i_wrap(float x) {
    if (isnan(x) || x <= -9.2233720368547758e18) return 0; /* INT64_MIN: low bits 0 */
    if (x >= 9.2233720368547758e18) return -1;              /* INT64_MAX: low bits all 1 */
    float t = trunc(x);
    if (abs(t) < 2147483648.0) return int(t);
    float r = t - 4294967296.0 * floor(t / 4294967296.0); /* t mod 2^32, exact */
    return int(uint(r));
}
#ifdef USE_F64
int d2i_wrap(double x) {
    if (isnan(x) || x <= -9.2233720368547758e18LF) return 0;
    if (x >= 9.2233720368547758e18LF) return -1;
    double t = trunc(x);
    if (abs(t) < 2147483648.0LF) return int(t);
    double r = t - 4294967296.0LF * floor(t / 4294967296.0LF);
    return int(uint(r));
}
int64_t d2l(double x) {
    if (isnan(x)) return int64_t(0);
    if (x >= 9.2233720368547758e18LF) return int64_t(0x7fffffffffffffffl);
    if (x <= -9.2233720368547758e18LF) return int64_t(0x8000000000000000l);
    return int64_t(x);
}
#endif
#ifdef USE_I64
int64_t f2l(float x) {
    if (isnan(x)) return int64_t(0);
    if (x >= 9.2233720368547758e18) return int64_t(0x7fffffffffffffffl);
    if (x <= -9.2233720368547758e18) return int64_t(0x8000000000000000l);
    return int64_t(x);
}
#endif

/* ---- f32 ---- */
#define TY_f32 float
#define CT_f32 float
#define ISF_f32 1
#define LD_f32(x) (x)
#define ST_f32(v) (v)
#define FROMF_f32(x) float(x)
#define FROMD_f32(x) float(x)
#define FROMI_f32(x) float(x)
#define FROML_f32(x) float(x)

/* ---- f64 ---- */
#define TY_f64 double
#define CT_f64 double
#define ISF_f64 1
#define LD_f64(x) (x)
#define ST_f64(v) (v)
#define FROMF_f64(x) double(x)
#define FROMD_f64(x) double(x)
#define FROMI_f64(x) double(x)
#define FROML_f64(x) double(x)

/* ---- f16, bf16: float arithmetic ---- */
#define TY_f16 uint16_t
#define CT_f16 float
#define ISF_f16 1
#define LD_f16(x) f16_to_f32(uint(x))
#define ST_f16(v) uint16_t(f32_to_f16(v))
#define FROMF_f16(x) float(x)
#define FROMD_f16(x) float(x)
#define FROMI_f16(x) float(x)
#define FROML_f16(x) float(float(x))

#define TY_bf16 uint16_t
#define CT_bf16 float
#define ISF_bf16 1
#define LD_bf16(x) bf16_to_f32(uint(x))
#define ST_bf16(v) uint16_t(f32_to_bf16(v))
#define FROMF_bf16(x) float(x)
#define FROMD_bf16(x) float(x)
#define FROMI_bf16(x) float(x)
#define FROML_bf16(x) float(float(x))

/* ---- ints ---- */
#define TY_i64 int64_t
#define CT_i64 int64_t
#define ISF_i64 0
#define LD_i64(x) (x)
#define ST_i64(v) (v)
#define FROMF_i64(x) f2l(x)
#define FROMD_i64(x) d2l(x)
#define FROMI_i64(x) int64_t(x)
#define FROML_i64(x) (x)

#define TY_i32 int
#define CT_i32 int
#define ISF_i32 0
#define LD_i32(x) (x)
#define ST_i32(v) (v)
#define FROMF_i32(x) f2i_wrap(x)
#define FROMD_i32(x) d2i_wrap(x)
#define FROMI_i32(x) (x)
#define FROML_i32(x) int(x)

#define TY_i16 int16_t
#define CT_i16 int
#define ISF_i16 0
#define LD_i16(x) int(x)
#define ST_i16(v) int16_t(v)
#define FROMF_i16(x) f2i_wrap(x)
#define FROMD_i16(x) d2i_wrap(x)
#define FROMI_i16(x) (x)
#define FROML_i16(x) int(x)

#define TY_i8 int8_t
#define CT_i8 int
#define ISF_i8 0
#define LD_i8(x) int(x)
#define ST_i8(v) int8_t(v)
#define FROMF_i8(x) f2i_wrap(x)
#define FROMD_i8(x) d2i_wrap(x)
#define FROMI_i8(x) (x)
#define FROML_i8(x) int(x)

#define TY_u8 uint8_t
#define CT_u8 int
#define ISF_u8 0
#define LD_u8(x) int(x)
#define ST_u8(v) uint8_t(v)
#define FROMF_u8(x) f2i_wrap(x)
#define FROMD_u8(x) d2i_wrap(x)
#define FROMI_u8(x) (x)
#define FROML_u8(x) int(x)

/* ---- bool: uint8_t 0/1 ---- */
#define TY_b8 uint8_t
#define CT_b8 int
#define ISF_b8 0
#define LD_b8(x) int(uint(x) != 0u)
#define ST_b8(v) uint8_t((v) != 0 ? 1u : 0u)
#define FROMF_b8(x) int((x) != 0.0)
#define FROMD_b8(x) int((x) != 0.0LF)
#define FROMI_b8(x) int((x) != 0)
#define FROML_b8(x) int((x) != int64_t(0))

/* Kind-dispatched conversion of a CT_S value x to CT_D. */
#define KIND_f32 F
#define KIND_f16 F
#define KIND_bf16 F
#define KIND_f64 D
#define KIND_i64 L
#define KIND_i32 I
#define KIND_i16 I
#define KIND_i8 I
#define KIND_u8 I
#define KIND_b8 I
#define CVT(S, D, x) CAT(CAT(CAT(FROM, CAT(KIND_, S)), _), D)(x)

/* Raw element words, for bit-for-bit moves (copy within a dtype, where, fill): w8 w16 w32 w64
 * by element size (w64 as uvec2, needing no 64-bit type). */
#define TY_w8 uint8_t
#define TY_w16 uint16_t
#define TY_w32 uint
#define TY_w64 uvec2
