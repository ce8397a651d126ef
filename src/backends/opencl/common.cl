/*
 * common.cl — the prelude of every ember OpenCL program (see ocl.h).
 *
 * Dtype tags f32 f64 f16 bf16 i64 i32 i16 i8 u8 b8. For a tag D:
 *   TY_D        storage type (f16 and bf16 are ushort)
 *   CT_D        computation type (float, double, long or int)
 *   LD_D(p, i)  element i of a `__global TY_D *p`, as CT_D
 *   ST_D(p,i,v) stores the CT_D v (f16/bf16 round to nearest even; b8 stores v != 0)
 *   ISF_D       1 for float tags, 0 for int and bool tags (usable in #if)
 *   FROMF_D(x)  a float or double x as CT_D the way ember converts: floats round, ints
 *               truncate toward zero saturating at the int64 range (NaN -> 0) and wrap to the
 *               width on store, bool is x != 0
 *   FROMI_D(x)  a long x as CT_D (ints wrap on store, bool is x != 0)
 *   CVT(S, D, x) a CT_S value x as CT_D (FROMF or FROMI by S's kind)
 * CAT(a, b) pastes after expansion: CAT(LD_, A)(p, i) with -DA=f16.
 *
 * view_t is ocl_view_arg of ocl.h; vidx(v, i) is the buffer element offset of row-major
 * linear index i of v.
 */
#ifdef OCL_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)

/* ---- f32 ---- */
#define TY_f32 float
#define CT_f32 float
#define ISF_f32 1
#define LD_f32(p, i) ((p)[i])
#define ST_f32(p, i, v) ((p)[i] = (v))
#define FROMF_f32(x) ((float)(x))
#define FROMI_f32(x) ((float)(x))

/* ---- f64 (only usable with OCL_FP64) ---- */
#define TY_f64 double
#define CT_f64 double
#define ISF_f64 1
#define LD_f64(p, i) ((p)[i])
#define ST_f64(p, i, v) ((p)[i] = (v))
#define FROMF_f64(x) ((double)(x))
#define FROMI_f64(x) ((double)(x))

/* ---- f16: ushort storage, float arithmetic ---- */
/* Stores v as f16, rounding to nearest even; a NaN keeps its sign and top payload bits and
 * is quiet (as ember's em_f32_to_f16, whatever the driver's conversion does with NaNs). */
static inline void ocl_st_f16(__global ushort *p, long i, float v) {
    if (isnan(v)) {
        uint x = as_uint(v);
        p[i] = (ushort)(((x >> 16) & 0x8000u) | 0x7e00u | ((x & 0x7fffffu) >> 13));
    } else {
        vstore_half_rte(v, i, (__global half *)p);
    }
}
#define TY_f16 ushort
#define CT_f16 float
#define ISF_f16 1
#define LD_f16(p, i) vload_half((i), (__global const half *)(p))
#define ST_f16(p, i, v) ocl_st_f16((p), (i), (v))
#define FROMF_f16(x) ((float)(x))
#define FROMI_f16(x) ((float)(x))

/* ---- bf16: the top 16 bits of a float ---- */
/* float -> bf16 bits, round to nearest even; NaN stays a quiet NaN. */
static inline ushort ocl_f2bf(float f) {
    uint x = as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (ushort)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (ushort)(x >> 16);
}
#define TY_bf16 ushort
#define CT_bf16 float
#define ISF_bf16 1
#define LD_bf16(p, i) as_float((uint)(p)[i] << 16)
#define ST_bf16(p, i, v) ((p)[i] = ocl_f2bf(v))
#define FROMF_bf16(x) ((float)(x))
#define FROMI_bf16(x) ((float)(x))

/* ---- ints ---- */
/* A float or double as long: truncation toward zero, saturating, NaN -> 0. */
#define OCL_F2L(x) convert_long_sat(x)

#define TY_i64 long
#define CT_i64 long
#define ISF_i64 0
#define LD_i64(p, i) ((p)[i])
#define ST_i64(p, i, v) ((p)[i] = (v))
#define FROMF_i64(x) OCL_F2L(x)
#define FROMI_i64(x) ((long)(x))

#define TY_i32 int
#define CT_i32 int
#define ISF_i32 0
#define LD_i32(p, i) ((int)(p)[i])
#define ST_i32(p, i, v) ((p)[i] = (int)(v))
#define FROMF_i32(x) ((int)OCL_F2L(x))
#define FROMI_i32(x) ((int)(x))

#define TY_i16 short
#define CT_i16 int
#define ISF_i16 0
#define LD_i16(p, i) ((int)(p)[i])
#define ST_i16(p, i, v) ((p)[i] = (short)(v))
#define FROMF_i16(x) ((int)OCL_F2L(x))
#define FROMI_i16(x) ((int)(x))

#define TY_i8 char
#define CT_i8 int
#define ISF_i8 0
#define LD_i8(p, i) ((int)(p)[i])
#define ST_i8(p, i, v) ((p)[i] = (char)(v))
#define FROMF_i8(x) ((int)OCL_F2L(x))
#define FROMI_i8(x) ((int)(x))

#define TY_u8 uchar
#define CT_u8 int
#define ISF_u8 0
#define LD_u8(p, i) ((int)(p)[i])
#define ST_u8(p, i, v) ((p)[i] = (uchar)(v))
#define FROMF_u8(x) ((int)OCL_F2L(x))
#define FROMI_u8(x) ((int)(x))

/* ---- bool: uchar 0/1 ---- */
#define TY_b8 uchar
#define CT_b8 int
#define ISF_b8 0
#define LD_b8(p, i) ((int)((p)[i] != 0))
#define ST_b8(p, i, v) ((p)[i] = (uchar)((v) != 0))
#define FROMF_b8(x) ((int)((x) != 0))
#define FROMI_b8(x) ((int)((x) != 0))

/* Kind-dispatched conversion of a CT_S value to CT_D. */
#define OCL_KIND_1 FROMF_
#define OCL_KIND_0 FROMI_
#define CVT(S, D, x) CAT(CAT(OCL_KIND_, CAT(ISF_, S)), D)(x)

/* ---- views ---- */
typedef struct view_t {
    long shape[8];
    long strides[8];
    long offset;
    int rank;
    int pad;
} view_t;

/* The buffer element offset of row-major linear index i of view v. */
static inline long vidx(view_t v, long i) {
    long off = v.offset;
    for (int d = v.rank - 1; d >= 0; d--) {
        long s = v.shape[d];
        long q = i / s;
        off += (i - q * s) * v.strides[d];
        i = q;
    }
    return off;
}
