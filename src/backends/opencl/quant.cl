/*
 * quant.cl — quantized tensors: quantize, dequantize and the quantized matrix products
 * (backend.h's quantize, dequantize and qmatmul slots; host side in quant.c). Built with
 * -cl-fp32-correctly-rounded-divide-sqrt, so that the scales' divisions and 1 / d are IEEE
 * divisions, as ref's C ones are; contraction is off, so that d * q + m rounds twice as in C.
 *
 * Schemes come as arguments, not build options (one program for all of them):
 *   form  the block layout: QF_Q8 (d, 32 int8), QF_Q4 (d, 16 bytes of nibbles, q - 8) or
 *         QF_Q4MIN (d, m, 16 bytes of nibbles, d * q + m)
 *   sb    bytes of one scale: 4 (f32) or 2 (f16), little-endian, read and written bytewise
 *         (blocks are 34, 18 or 20 bytes long, so scales are not aligned)
 *   bb    bytes of one block (em_quant_block_bytes)
 * A block view's strides and offset count logical elements (backend.h): the element at
 * buffer offset e (>= 0) is element e % 32 of the block that starts at byte (e / 32) * bb.
 * Per-tensor kinds are int8 views, one integer per byte.
 */
#pragma OPENCL FP_CONTRACT OFF

#define QF_Q8 0
#define QF_Q4 1
#define QF_Q4MIN 2

#ifndef QT
#define QT 16 /* qmatmul work-groups: QT x QT items, one output each */
#endif
#define QB 32 /* EM_QBLOCK */

/* ---- f16 scales, by hand (no cl_khr_fp16, and ember's own rounding) ---- */

/* f32 -> f16 bits, round to nearest even; as em_f32_to_f16 (src/core/dtype.c), bit for bit. */
static inline ushort q_f32_to_f16(float f) {
    uint x = as_uint(f);
    uint sign = (x >> 16) & 0x8000u;
    uint ex = (x >> 23) & 0xffu;
    uint man = x & 0x7fffffu;
    if (ex == 0xffu) return (ushort)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0u));
    int e = (int)ex - 127 + 15;
    if (e >= 31) return (ushort)(sign | 0x7c00u); /* overflow: inf */
    if (e <= 0) {                                  /* subnormal or zero */
        if (e < -10) return (ushort)sign;
        man |= 0x800000u;
        uint shift = (uint)(14 - e);
        uint hv = man >> shift;
        uint rem = man & ((1u << shift) - 1u);
        uint mid = 1u << (shift - 1u);
        if (rem > mid || (rem == mid && (hv & 1u))) hv++;
        return (ushort)(sign | hv);
    }
    uint hv = sign | ((uint)e << 10) | (man >> 13);
    uint rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (hv & 1u))) hv++; /* may carry into inf */
    return (ushort)hv;
}

/* f16 bits -> f32 (exact), as em_f16_to_f32. */
static inline float q_f16_to_f32(ushort h) {
    uint sign = (uint)(h & 0x8000u) << 16;
    uint ex = (h >> 10) & 0x1fu;
    uint man = h & 0x3ffu;
    if (ex == 0) {
        if (man == 0) return as_float(sign);
        int e = -1; /* subnormal: normalize */
        do {
            man <<= 1;
            e++;
        } while (!(man & 0x400u));
        man &= 0x3ffu;
        return as_float(sign | ((uint)(127 - 15 - e) << 23) | (man << 13));
    }
    if (ex == 31) return as_float(sign | 0x7f800000u | (man << 13));
    return as_float(sign | ((ex - 15 + 127) << 23) | (man << 13));
}

/* The scale stored at p (sb bytes, little-endian), as f32. */
static inline float q_ld_scale(__global const uchar *p, int sb) {
    if (sb == 2) return q_f16_to_f32((ushort)((uint)p[0] | ((uint)p[1] << 8)));
    return as_float((uint)p[0] | ((uint)p[1] << 8) | ((uint)p[2] << 16) | ((uint)p[3] << 24));
}

/* Stores v at p as a scale of sb bytes; returns the stored value (v rounded to f16 for 2). */
static inline float q_st_scale(__global uchar *p, int sb, float v) {
    if (sb == 2) {
        ushort h = q_f32_to_f16(v);
        p[0] = (uchar)(h & 0xffu);
        p[1] = (uchar)(h >> 8);
        return q_f16_to_f32(h);
    }
    uint u = as_uint(v);
    p[0] = (uchar)(u & 0xffu);
    p[1] = (uchar)((u >> 8) & 0xffu);
    p[2] = (uchar)((u >> 16) & 0xffu);
    p[3] = (uchar)(u >> 24);
    return v;
}

/* The integer of element j (< 32) of the block at p: int8 for QF_Q8, the nibble in [0, 15]
 * for the q4 forms (byte j % 16, low nibble for j < 16). */
static inline int q_ld_q(__global const uchar *p, int form, int sb, int j) {
    if (form == QF_Q8) return (int)(char)p[sb + j];
    uchar by = p[(form == QF_Q4MIN ? 2 * sb : sb) + (j & 15)];
    return j < 16 ? (int)(by & 15u) : (int)(by >> 4);
}

/* The real value of the element at logical offset e of a block buffer. */
static inline float q_deq(__global const uchar *q, long e, int form, int sb, long bb) {
    __global const uchar *p = q + (e >> 5) * bb;
    const int j = (int)(e & 31);
    const float d = q_ld_scale(p, sb);
    const int v = q_ld_q(p, form, sb, j);
    if (form == QF_Q8) return d * (float)v;
    if (form == QF_Q4) return d * (float)(v - 8);
    return d * (float)v + q_ld_scale(p + sb, sb);
}

/* ---- quantize ---- */

/** 1 / d, or 0 where d is 0, below FLT_MIN (1 / d would overflow) or not finite (an
 *  activation block holding a NaN or an infinity): q is then 0 (Q4_0: 8), as ref's. */
float q_inv(float d) { return isfinite(d) && fabs(d) >= FLT_MIN ? 1.0f / d : 0.0f; }

/** Per-tensor kinds: out[i] (int8, contiguous from element ooff) = clamp(rint(x * inv) + zp,
 *  qmin, qmax) in f32 for row-major index i of x (any strides); inv = 1 / scale (host). */
__kernel void quant_tensor(__global const float *x, view_t xv, __global char *out, long ooff,
                           long n, float inv, float zp, float qmin, float qmax) {
    const long i = get_global_id(0);
    if (i >= n) return;
    const float r = rint(x[vidx(xv, i)] * inv) + zp;
    out[ooff + i] = (char)(int)clamp(r, qmin, qmax);
}

/** Block kinds: one item a block. Block b holds x's row-major elements 32b .. 32b + 31 (the
 *  last dim's, at stride sl from the first) and goes to out + obase + b * bb. */
__kernel void quant_block(__global const float *x, view_t xv, long sl, __global uchar *out,
                          long obase, long nblk, int form, int sb, long bb) {
    const long b = get_global_id(0);
    if (b >= nblk) return;
    const long base = vidx(xv, b * QB);
    float v[QB];
    for (int j = 0; j < QB; j++) v[j] = x[base + j * sl];
    __global uchar *p = out + obase + b * bb;
    if (form == QF_Q8) {
        float amax = 0.0f;
        for (int j = 0; j < QB; j++) amax = fmax(amax, fabs(v[j]));
        const float d = q_st_scale(p, sb, amax / 127.0f);
        const float id = q_inv(d);
        for (int j = 0; j < QB; j++)
            p[sb + j] = (uchar)(char)(int)clamp(rint(v[j] * id), -127.0f, 127.0f);
    } else if (form == QF_Q4) {
        float amax = 0.0f, vmax = 0.0f; /* the first value of largest magnitude */
        for (int j = 0; j < QB; j++)
            if (fabs(v[j]) > amax) {
                amax = fabs(v[j]);
                vmax = v[j];
            }
        const float d = q_st_scale(p, sb, vmax / -8.0f);
        const float id = q_inv(d);
        for (int j = 0; j < QB / 2; j++) {
            const int q0 = (int)clamp(rint(v[j] * id) + 8.0f, 0.0f, 15.0f);
            const int q1 = (int)clamp(rint(v[j + 16] * id) + 8.0f, 0.0f, 15.0f);
            p[sb + j] = (uchar)(q0 | (q1 << 4));
        }
    } else {
        float mn = v[0], mx = v[0];
        for (int j = 1; j < QB; j++) {
            if (v[j] < mn) mn = v[j];
            if (v[j] > mx) mx = v[j];
        }
        const float m = q_st_scale(p + sb, sb, mn); /* the stored minimum */
        const float d = q_st_scale(p, sb, (mx - mn) / 15.0f);
        const float id = q_inv(d);
        for (int j = 0; j < QB / 2; j++) {
            const int q0 = (int)clamp(rint((v[j] - m) * id), 0.0f, 15.0f);
            const int q1 = (int)clamp(rint((v[j + 16] - m) * id), 0.0f, 15.0f);
            p[2 * sb + j] = (uchar)(q0 | (q1 << 4));
        }
    }
}

/* ---- dequantize ---- */

/** Per-tensor kinds: out[ooff + i] = scale * (q - zp) for row-major index i of q. */
__kernel void dequant_tensor(__global const char *q, view_t qv, __global float *out, long ooff,
                             long n, float scale, int zp) {
    const long i = get_global_id(0);
    if (i >= n) return;
    out[ooff + i] = scale * (float)((int)q[vidx(qv, i)] - zp);
}

/** Block kinds: out[ooff + i] = the real value of row-major element i of the view qv. */
__kernel void dequant_block(__global const uchar *q, view_t qv, __global float *out, long ooff,
                            long n, int form, int sb, long bb) {
    const long i = get_global_id(0);
    if (i >= n) return;
    out[ooff + i] = q_deq(q, vidx(qv, i), form, sb, bb);
}

/* ---- qmatmul, case (1): the int8 product ---- */

#define QA_F32 0    /* a is f32: quantized here, q8 blocks with an f32 scale */
#define QA_TENSOR 1 /* a is a per-tensor int8 view: d_a = 1 (scale_a applied at the end) */
#define QA_BLOCK 2  /* a is a q8 block view along K (its axis 1) */

/** One item per (row r, block kb of 32 along K): a's row r, k in [32 kb, 32 kb + 32), as
 *  int8 into qa[(r nkb + kb) 32 + j] (zeros past K), its scale into da and sum q into sa.
 *  a is [M, K] (strides as0, as1 from element aoff; for QA_BLOCK as1 is 1). */
__kernel void qmm_prep_a(__global const uchar *a, long aoff, long as0, long as1, int amode,
                         int sb, long bb, __global char *qa, __global float *da,
                         __global int *sa, long M, long K, long nkb) {
    const long g = get_global_id(0);
    if (g >= M * nkb) return;
    const long r = g / nkb, k0 = (g - r * nkb) * QB;
    const int len = (int)min((long)QB, K - k0);
    __global char *dst = qa + g * QB;
    int sum = 0;
    float d = 1.0f;
    if (amode == QA_F32) {
        __global const float *af = (__global const float *)a;
        float v[QB];
        float amax = 0.0f;
        for (int j = 0; j < len; j++) {
            v[j] = af[aoff + r * as0 + (k0 + j) * as1];
            /* a NaN stays (fmax would drop it): the block's d is NaN, its outputs too */
            amax = isnan(v[j]) || fabs(v[j]) > amax ? fabs(v[j]) : amax;
        }
        d = amax / 127.0f;
        const float id = q_inv(d);
        for (int j = 0; j < len; j++) {
            const int q = id != 0.0f ? (int)clamp(rint(v[j] * id), -127.0f, 127.0f) : 0;
            dst[j] = (char)q;
            sum += q;
        }
    } else if (amode == QA_TENSOR) {
        __global const char *ac = (__global const char *)a;
        for (int j = 0; j < len; j++) {
            const int q = (int)ac[aoff + r * as0 + (k0 + j) * as1];
            dst[j] = (char)q;
            sum += q;
        }
    } else {
        __global const uchar *p = a + ((aoff + r * as0 + k0) >> 5) * bb;
        d = q_ld_scale(p, sb);
        for (int j = 0; j < len; j++) {
            const int q = (int)(char)p[sb + j];
            dst[j] = (char)q;
            sum += q;
        }
    }
    for (int j = len; j < QB; j++) dst[j] = 0;
    da[g] = d;
    sa[g] = sum;
}

#define QB_TENSOR (-1) /* b per tensor (an int8 view, any strides); else b's form, blocks on K */

#ifndef QY
#define QY QT /* qmm_dot: rows of out a group computes (1, 4 or QT, by M: see quant.c) */
#endif
#define RN 4          /* qmm_dot: columns of out an item computes, QT apart */
#define QN (QT * RN)  /* qmm_dot: columns of out a group computes */
#define KS 4          /* qmm_dot: blocks along K staged a step */

/** out[m, n] (contiguous from ooff) = sum over the blocks kb of 32 along K of the block's
 *  f32 term (backend.h's qmatmul), times ascale. A QT x QY group computes a QY x QN tile of
 *  out, item (tx, ty) the elements (ty, tx + c QT), c < RN; per step of KS blocks it stages
 *  the tile's rows of qa, its columns of b's integers (q4: the nibbles, [0, 15]) and their
 *  scales in local memory, and each item sums its 32 products a block and column in int, the
 *  blocks in order. b is [K, N] from
 *  element boff with strides bs0, bs1 (for the block forms bs0 is 1: the block of (kb, n)
 *  starts at element boff + 32 kb + n bs1). */
__kernel __attribute__((reqd_work_group_size(QT, QY, 1)))
void qmm_dot(__global const char *qa, __global const float *da, __global const int *sa,
             long nkb, __global const uchar *b, long boff, long bs0, long bs1, int bmode,
             int sb, long bb, float bscale, int bzp, __global float *out, long ooff, long M,
             long N, long K, float ascale) {
    __local char As[KS][QY][QB];
    __local char Bs[KS][QB][QN]; /* [j][column]: the items of a row read it in runs */
    __local float Da[KS][QY], Db[KS][QN], Mb[KS][QN];
    __local int Sa[KS][QY];
    const int tx = get_local_id(0), ty = get_local_id(1), lid = ty * QT + tx;
    const long n0 = get_group_id(0) * QN, m0 = get_group_id(1) * QY;
    float acc[RN];
    for (int c = 0; c < RN; c++) acc[c] = 0.0f;
    for (long kb0 = 0; kb0 < nkb; kb0 += KS) {
        const int ks = (int)min((long)KS, nkb - kb0); /* blocks this step */
        for (int e = lid; e < ks * QY * QB; e += QT * QY) {
            const int t = e / (QY * QB), r = e / QB % QY, j = e % QB;
            const long row = m0 + r;
            As[t][r][j] = row < M ? qa[(row * nkb + kb0 + t) * QB + j] : (char)0;
        }
        if (bmode == QB_TENSOR) {
            for (int e = lid; e < ks * QN * QB; e += QT * QY) { /* consecutive items walk k */
                const int t = e / (QN * QB), c = e / QB % QN, j = e % QB;
                const long col = n0 + c, k = (kb0 + t) * QB + j;
                Bs[t][j][c] = col < N && k < K
                                  ? ((__global const char *)b)[boff + k * bs0 + col * bs1]
                                  : (char)0;
            }
        } else if (bmode == QF_Q8) { /* blocks: K is a multiple of 32 */
            for (int e = lid; e < ks * QN * QB; e += QT * QY) { /* items walk a block */
                const int t = e / (QN * QB), c = e / QB % QN, j = e % QB;
                const long col = n0 + c;
                Bs[t][j][c] =
                    col < N ? (char)b[((boff + (kb0 + t) * QB + col * bs1) >> 5) * bb + sb + j]
                            : (char)0;
            }
        } else { /* a byte: the nibbles of j and j + 16 */
            const int qo = bmode == QF_Q4MIN ? 2 * sb : sb, H = QB / 2;
            for (int e = lid; e < ks * QN * H; e += QT * QY) {
                const int t = e / (QN * H), c = e / H % QN, j = e % H;
                const long col = n0 + c;
                const uchar by =
                    col < N ? b[((boff + (kb0 + t) * QB + col * bs1) >> 5) * bb + qo + j] : 0;
                Bs[t][j][c] = (char)(by & 15u);
                Bs[t][j + H][c] = (char)(by >> 4);
            }
        }
        for (int e = lid; e < ks * QY; e += QT * QY) {
            const int t = e / QY, r = e % QY;
            const long row = m0 + r;
            Da[t][r] = row < M ? da[row * nkb + kb0 + t] : 0.0f;
            Sa[t][r] = row < M ? sa[row * nkb + kb0 + t] : 0;
        }
        if (bmode != QB_TENSOR)
            for (int e = lid; e < ks * QN; e += QT * QY) {
                const int t = e / QN, c = e % QN;
                const long col = n0 + c;
                float db = 0.0f, mb = 0.0f;
                if (col < N) {
                    __global const uchar *p = b + ((boff + (kb0 + t) * QB + col * bs1) >> 5) * bb;
                    db = q_ld_scale(p, sb);
                    if (bmode == QF_Q4MIN) mb = q_ld_scale(p + sb, sb);
                }
                Db[t][c] = db;
                Mb[t][c] = mb;
            }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int t = 0; t < ks; t++) { /* the blocks in order, each summed in int */
            int S[RN];
            for (int c = 0; c < RN; c++) S[c] = 0;
            for (int j = 0; j < QB; j++) {
                const int av = (int)As[t][ty][j];
                for (int c = 0; c < RN; c++) S[c] += av * (int)Bs[t][j][tx + c * QT];
            }
            const float d_a = Da[t][ty];
            const int s_a = Sa[t][ty];
            for (int c = 0; c < RN; c++) {
                const int cc = tx + c * QT;
                if (bmode == QB_TENSOR)
                    acc[c] += d_a * bscale * (float)(S[c] - bzp * s_a);
                else if (bmode == QF_Q8)
                    acc[c] += d_a * Db[t][cc] * (float)S[c];
                else if (bmode == QF_Q4)
                    acc[c] += d_a * Db[t][cc] * (float)(S[c] - 8 * s_a);
                else
                    acc[c] += d_a * Db[t][cc] * (float)S[c] + d_a * Mb[t][cc] * (float)s_a;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const long m = m0 + ty;
    if (m >= M) return;
    for (int c = 0; c < RN; c++) {
        const long n = n0 + tx + c * QT;
        if (n < N) out[ooff + m * N + n] = acc[c] * ascale;
    }
}

/* ---- qmatmul, case (2): b blocked along N, a f32 ---- */

/** out[m, n] (contiguous from ooff) = sum_k a[m, k] real(b[k, n]) in f32: a [M, K] any
 *  strides; b [K, N] a block view along N (element offsets boff + k bs0 + n bs1, bs1 = 1).
 *  A QT x QT group stages a QT x 32 slice of a and a 32 x QT slice of b, decoded from its
 *  blocks, in local memory per step of 32 along K. */
__kernel __attribute__((reqd_work_group_size(QT, QT, 1)))
void qmm_bn(__global const float *a, long aoff, long as0, long as1, __global const uchar *b,
            long boff, long bs0, long bs1, int form, int sb, long bb, __global float *out,
            long ooff, long M, long N, long K) {
    __local float As[QT][QB];
    __local float Bs[QB][QT];
    const int tx = get_local_id(0), ty = get_local_id(1), lid = ty * QT + tx;
    const long n0 = get_group_id(0) * QT, m0 = get_group_id(1) * QT;
    float acc = 0.0f;
    for (long k0 = 0; k0 < K; k0 += QB) {
        for (int e = lid; e < QT * QB; e += QT * QT) {
            const int r = e / QB, q = e % QB; /* a: consecutive items walk k */
            const long row = m0 + r, k = k0 + q;
            As[r][q] = (row < M && k < K) ? a[aoff + row * as0 + k * as1] : 0.0f;
            const int qk = e / QT, c = e % QT; /* b: consecutive items walk n */
            const long kk = k0 + qk, col = n0 + c;
            Bs[qk][c] = (kk < K && col < N) ? q_deq(b, boff + kk * bs0 + col * bs1, form, sb, bb)
                                            : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int q = 0; q < QB; q++) acc += As[ty][q] * Bs[q][tx];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const long m = m0 + ty, n = n0 + tx;
    if (m < M && n < N) out[ooff + m * N + n] = acc;
}
