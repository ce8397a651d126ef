/*
 * quant.comp — quantized tensors: quantize, dequantize and the quantized matrix products
 * (backend.h's quantize, dequantize and qmatmul slots; host side in quant.c, variants in
 * quant.list). A port of the OpenCL backend's quant.cl, with ref's arithmetic (bytes equal to
 * ref's): products that feed a sum are `precise` (no fused multiply-add), NaN compares as C's.
 *
 * One kernel per variant, chosen by a define: K_QUANT_TENSOR, K_QUANT_BLOCK,
 * K_DEQUANT_TENSOR, K_DEQUANT_BLOCK, K_PREP (with QA_F32, QA_TENSOR or QA_BLOCK), K_DOT,
 * K_BN. Schemes come as parameters (P.i), not defines:
 *   form  the block layout: QF_Q8 (d, 32 int8), QF_Q4 (d, 16 bytes of nibbles, q - 8) or
 *         QF_Q4MIN (d, m, 16 bytes of nibbles, d * q + m)
 *   sb    bytes of one scale: 4 (f32) or 2 (f16), little-endian, read and written bytewise
 *         (blocks are 34, 18 or 20 bytes long: scales are not aligned)
 *   bb    bytes of one block (em_quant_block_bytes)
 * Quantized bytes are the uint8_t buffer qb at binding 1 in every kernel. A block view's
 * strides and offset count logical elements: the element at offset e (>= 0) is element
 * e % 32 of the block that starts at byte (e / 32) * bb. Per-tensor kinds are int8 views,
 * one integer per byte.
 */
#version 450
#include "common.glsl"

#define QF_Q8 0
#define QF_Q4 1
#define QF_Q4MIN 2
#define QB 32 /* EM_QBLOCK */
#define QT 16 /* the qmatmul kernels' groups: QT x QT */
#define FLT_MIN_ 1.17549435e-38

#if defined(K_DOT) || defined(K_BN)
layout(local_size_x = QT, local_size_y = QT) in;
#else
layout(local_size_x = WG) in;
#endif

BUF(1, u8, qb);

/* ---- bytes, scales and integers ---- */

uint ldb(int i) { return uint(qb[i]); }
void stb(int i, uint v) { qb[i] = uint8_t(v & 0xffu); }

/* The scale stored at byte p (sb bytes, little-endian), as f32. */
float ld_scale(int p, int sb) {
    if (sb == 2) return f16_to_f32(ldb(p) | (ldb(p + 1) << 8));
    return uintBitsToFloat(ldb(p) | (ldb(p + 1) << 8) | (ldb(p + 2) << 16) | (ldb(p + 3) << 24));
}

/* Stores v at byte p as a scale of sb bytes; returns the stored value (v rounded to f16 for
 * sb 2). */
float st_scale(int p, int sb, float v) {
    if (sb == 2) {
        uint h = f32_to_f16(v);
        stb(p, h);
        stb(p + 1, h >> 8);
        return f16_to_f32(h);
    }
    uint u = floatBitsToUint(v);
    stb(p, u);
    stb(p + 1, u >> 8);
    stb(p + 2, u >> 16);
    stb(p + 3, u >> 24);
    return v;
}

/* The integer of element j (< 32) of the block at byte p: int8 for QF_Q8, the nibble in
 * [0, 15] for the q4 forms (byte j % 16, low nibble for j < 16). */
int ld_q(int p, int form, int sb, int j) {
    if (form == QF_Q8) return int(ldb(p + sb + j) << 24) >> 24;
    uint by = ldb(p + (form == QF_Q4MIN ? 2 * sb : sb) + (j & 15));
    return j < 16 ? int(by & 15u) : int(by >> 4);
}

/* The real value of the element at logical offset e of a block buffer. */
float deq(int e, int form, int sb, int bb) {
    int p = (e >> 5) * bb;
    int j = e & 31;
    float d = ld_scale(p, sb);
    int v = ld_q(p, form, sb, j);
    if (form == QF_Q8) return d * float(v);
    if (form == QF_Q4) return d * float(v - 8);
    precise float r = d * float(v) + ld_scale(p + sb, sb);
    return r;
}

/* a / b correctly rounded (to nearest even), as C's: drivers may compute a shader's
 * division as a * (1 / b), off by an ulp, and the scales' bytes must be ref's. Long division
 * of the significands in 32-bit ints; denormal operands and results are handled on the bits
 * (nothing here depends on the device's denormal mode). */
float div_rn(float a, float b) {
    uint ua = floatBitsToUint(a), ub = floatBitsToUint(b);
    uint sign = (ua ^ ub) & 0x80000000u;
    uint ea = (ua >> 23) & 0xffu, eb = (ub >> 23) & 0xffu;
    uint ma = ua & 0x7fffffu, mb = ub & 0x7fffffu;
    if ((ea == 0xffu && ma != 0u) || (eb == 0xffu && mb != 0u)) return a + b; /* NaN */
    bool za = ea == 0u && ma == 0u, zb = eb == 0u && mb == 0u;
    if (ea == 0xffu) return eb == 0xffu ? uintBitsToFloat(0x7fc00000u) : uintBitsToFloat(sign | 0x7f800000u);
    if (eb == 0xffu) return uintBitsToFloat(sign);
    if (zb) return za ? uintBitsToFloat(0x7fc00000u) : uintBitsToFloat(sign | 0x7f800000u);
    if (za) return uintBitsToFloat(sign);
    /* significands in [2^23, 2^24), exponents unbiased */
    int xa = int(ea) - 127, xb = int(eb) - 127;
    if (ea == 0u) { xa = -126; while (ma < 0x800000u) { ma <<= 1; xa--; } } else ma |= 0x800000u;
    if (eb == 0u) { xb = -126; while (mb < 0x800000u) { mb <<= 1; xb--; } } else mb |= 0x800000u;
    int e = xa - xb;
    if (ma < mb) { ma <<= 1; e--; } /* ma / mb in [1, 2) */
    /* q = floor(ma / mb * 2^25): 26 bits, rem: the remainder */
    uint q = 0u, rem = ma;
    for (int i = 0; i < 26; i++) {
        q <<= 1;
        if (rem >= mb) { rem -= mb; q |= 1u; }
        rem <<= 1;
    }
    int biased = e + 127;
    int s = biased >= 1 ? 2 : 3 - biased; /* bits of q below the result's last bit */
    if (s > 26) return uintBitsToFloat(sign);
    uint mant = q >> uint(s);
    uint rbit = (q >> uint(s - 1)) & 1u;
    bool sticky = (q & ((1u << uint(s - 1)) - 1u)) != 0u || rem != 0u;
    if (rbit != 0u && (sticky || (mant & 1u) != 0u)) mant++;
    if (biased < 1) return uintBitsToFloat(sign | mant); /* denormal (or carried to FLT_MIN) */
    if (mant == 0x1000000u) { mant >>= 1; biased++; }
    if (biased >= 255) return uintBitsToFloat(sign | 0x7f800000u);
    return uintBitsToFloat(sign | (uint(biased) << 23) | (mant & 0x7fffffu));
}

/* 1 / d, or 0 where d is 0, below FLT_MIN (1 / d would overflow) or not finite: q is then 0
 * (Q4_0: 8), as ref's. */
float q_inv(float d) {
    return !isnan(d) && !isinf(d) && abs(d) >= FLT_MIN_ ? div_rn(1.0, d) : 0.0;
}

/* clamp(v, lo, hi) as ref's rq_clampf (a NaN stays), then to int as x86 C converts: NaN (and
 * nothing else here) gives 0 in the low bytes. */
int q_int(float v, float lo, float hi) {
    if (isnan(v)) return 0;
    return int(v < lo ? lo : v > hi ? hi : v);
}

#if defined(K_QUANT_TENSOR)
/* out (int8, P.v[1]) = clamp(rint(x * inv) + zp, qmin, qmax) for row-major index i of x
 * (P.v[0], f32, any strides); P.f: inv = 1 / scale (host), zp, qmin, qmax. */
BUF(2, f32, x_);
void main() {
    GRID_LOOP(i, P.v[0].numel) {
        float r = roundEven(x_[vidx(0, i)] * P.f[0]) + P.f[1];
        stb(vidx(1, i), uint(q_int(r, P.f[2], P.f[3])));
    }
}

#elif defined(K_QUANT_BLOCK)
/* One item a block: block b holds x's (P.v[0]) row-major elements 32b .. 32b + 31 (the last
 * dim's, at stride sl from the first) and goes to byte obase + b bb. P.i: nblk, form, sb, bb,
 * obase, sl. */
BUF(2, f32, x_);
void main() {
    const int nblk = P.i[0], form = P.i[1], sb = P.i[2], bb = P.i[3], obase = P.i[4];
    const int sl = P.i[5];
    GRID_LOOP(b, nblk) {
        const int base = vidx(0, b * QB);
        float v[QB];
        for (int j = 0; j < QB; j++) v[j] = x_[base + j * sl];
        const int p = obase + b * bb;
        if (form == QF_Q8) {
            float amax = 0.0;
            for (int j = 0; j < QB; j++) amax = abs(v[j]) > amax ? abs(v[j]) : amax;
            const float d = st_scale(p, sb, div_rn(amax, 127.0));
            const float id = q_inv(d);
            for (int j = 0; j < QB; j++)
                stb(p + sb + j, uint(q_int(roundEven(v[j] * id), -127.0, 127.0)));
        } else if (form == QF_Q4) {
            float amax = 0.0, vmax = 0.0; /* the first value of largest magnitude */
            for (int j = 0; j < QB; j++)
                if (abs(v[j]) > amax) {
                    amax = abs(v[j]);
                    vmax = v[j];
                }
            const float d = st_scale(p, sb, div_rn(vmax, -8.0));
            const float id = q_inv(d);
            for (int j = 0; j < QB / 2; j++) {
                const int q0 = q_int(roundEven(v[j] * id) + 8.0, 0.0, 15.0);
                const int q1 = q_int(roundEven(v[j + 16] * id) + 8.0, 0.0, 15.0);
                stb(p + sb + j, uint(q0 | (q1 << 4)));
            }
        } else {
            float mn = v[0], mx = v[0];
            for (int j = 1; j < QB; j++) {
                mn = v[j] < mn ? v[j] : mn;
                mx = v[j] > mx ? v[j] : mx;
            }
            const float m = st_scale(p + sb, sb, mn); /* the stored minimum */
            const float d = st_scale(p, sb, div_rn(mx - mn, 15.0));
            const float id = q_inv(d);
            for (int j = 0; j < QB / 2; j++) {
                const int q0 = q_int(roundEven((v[j] - m) * id), 0.0, 15.0);
                const int q1 = q_int(roundEven((v[j + 16] - m) * id), 0.0, 15.0);
                stb(p + 2 * sb + j, uint(q0 | (q1 << 4)));
            }
        }
    }
}

#elif defined(K_DEQUANT_TENSOR)
/* out (P.v[1], f32) = scale * (q - zp) for row-major index i of q (P.v[0], int8); P.f[0]
 * scale, P.i[0] zp. */
BUF(2, f32, o_);
void main() {
    GRID_LOOP(i, P.v[0].numel) {
        int q = int(ldb(vidx(0, i)) << 24) >> 24;
        o_[vidx(1, i)] = P.f[0] * float(q - P.i[0]);
    }
}

#elif defined(K_DEQUANT_BLOCK)
/* out (P.v[1], f32) = the real value of row-major element i of the block view P.v[0];
 * P.i: -, form, sb, bb. */
BUF(2, f32, o_);
void main() {
    GRID_LOOP(i, P.v[0].numel) o_[vidx(1, i)] = deq(vidx(0, i), P.i[1], P.i[2], P.i[3]);
}

#elif defined(K_PREP)
/* qmatmul case (1), a's rows as q8 blocks along K. One item per (row r, block kb of 32 along
 * K): a's row r, k in [32 kb, 32 kb + 32), as int8 into qa[(r nkb + kb) 32 + j] (zeros past
 * K), its scale into da and sum q into sa. a is [M, K] (strides as0, as1 from element aoff;
 * for QA_BLOCK as1 is 1): f32 (QA_F32: quantized here), int8 (QA_TENSOR) or q8 blocks
 * (QA_BLOCK, at qb). P.i: M, K, nkb, aoff, as0, as1, sb, bb. */
#ifdef QA_F32
layout(std430, binding = 5) readonly buffer BA { float af[]; };
#endif
BUF(2, i8, qa);
BUF(3, f32, da);
BUF(4, i32, sa);
void main() {
    const int M = P.i[0], K = P.i[1], nkb = P.i[2], aoff = P.i[3], as0 = P.i[4], as1 = P.i[5];
    const int sb = P.i[6], bb = P.i[7];
    GRID_LOOP(g, M * nkb) {
        const int r = g / nkb, k0 = (g - r * nkb) * QB;
        const int len = min(QB, K - k0);
        const int dst = g * QB;
        int sum = 0;
        float d = 1.0;
#if defined(QA_F32)
        float v[QB];
        float amax = 0.0;
        for (int j = 0; j < len; j++) {
            v[j] = af[aoff + r * as0 + (k0 + j) * as1];
            /* a NaN stays: the block's d is NaN, its outputs too */
            amax = isnan(v[j]) || abs(v[j]) > amax ? abs(v[j]) : amax;
        }
        d = div_rn(amax, 127.0);
        const float id = q_inv(d);
        for (int j = 0; j < len; j++) {
            const int q = id != 0.0 ? q_int(roundEven(v[j] * id), -127.0, 127.0) : 0;
            qa[dst + j] = int8_t(q);
            sum += q;
        }
#elif defined(QA_TENSOR)
        for (int j = 0; j < len; j++) {
            const int q = int(ldb(aoff + r * as0 + (k0 + j) * as1) << 24) >> 24;
            qa[dst + j] = int8_t(q);
            sum += q;
        }
#else
        const int p = ((aoff + r * as0 + k0) >> 5) * bb;
        d = ld_scale(p, sb);
        for (int j = 0; j < len; j++) {
            const int q = int(ldb(p + sb + j) << 24) >> 24;
            qa[dst + j] = int8_t(q);
            sum += q;
        }
#endif
        for (int j = len; j < QB; j++) qa[dst + j] = int8_t(0);
        da[g] = d;
        sa[g] = sum;
    }
}

#elif defined(K_DOT)
/* qmatmul case (1): out[m, n] (f32, contiguous from ooff) = sum over the blocks kb of 32
 * along K of the block's f32 term (backend.h's qmatmul), in order, times ascale. A QT x QT
 * group computes a QT x QT tile of out, item (tx, ty) element (m0 + ty, n0 + tx); per block
 * it stages the tile's rows of qa, its columns of b's integers (q4: the nibbles, [0, 15]) and
 * their scales in shared memory, and each item sums its 32 products in int. b is [K, N] from
 * element boff with strides bs0, bs1: per tensor (bmode -1: int8, any strides), or blocks
 * along K (bmode the form; bs0 is 1: the block of (kb, n) starts at element
 * boff + 32 kb + n bs1). P.i: M, N, K, nkb, boff, bs0, bs1, bmode, sb, bb, bzp, ooff;
 * P.f: bscale, ascale. */
BUF(2, i8, qa);
BUF(3, f32, da);
BUF(4, i32, sa);
BUF(5, f32, o_);
shared int As[QT][QB];
shared int Bs[QB][QT];
shared float Da[QT], Db[QT], Mb[QT];
shared int Sa[QT];
void main() {
    const int M = P.i[0], N = P.i[1], K = P.i[2], nkb = P.i[3], boff = P.i[4], bs0 = P.i[5];
    const int bs1 = P.i[6], bmode = P.i[7], sb = P.i[8], bb = P.i[9], bzp = P.i[10];
    const int ooff = P.i[11];
    const float bscale = P.f[0], ascale = P.f[1];
    const int tx = int(gl_LocalInvocationID.x), ty = int(gl_LocalInvocationID.y);
    const int lid = ty * QT + tx;
    for (int m0 = int(gl_WorkGroupID.y) * QT; m0 < M; m0 += int(gl_NumWorkGroups.y) * QT)
        for (int n0 = int(gl_WorkGroupID.x) * QT; n0 < N; n0 += int(gl_NumWorkGroups.x) * QT) {
            precise float acc = 0.0;
            for (int kb = 0; kb < nkb; kb++) {
                for (int e = lid; e < QT * QB; e += QT * QT) {
                    const int r = e / QB, j = e % QB, row = m0 + r;
                    As[r][j] = row < M ? int(qa[(row * nkb + kb) * QB + j]) : 0;
                }
                if (bmode < 0) {
                    for (int e = lid; e < QT * QB; e += QT * QT) {
                        const int c = e / QB, j = e % QB, col = n0 + c, k = kb * QB + j;
                        Bs[j][c] = col < N && k < K
                                       ? int(ldb(boff + k * bs0 + col * bs1) << 24) >> 24
                                       : 0;
                    }
                } else {
                    for (int e = lid; e < QT * QB; e += QT * QT) {
                        const int c = e / QB, j = e % QB, col = n0 + c;
                        Bs[j][c] = col < N ? ld_q(((boff + kb * QB + col * bs1) >> 5) * bb, bmode,
                                                  sb, j)
                                           : 0;
                    }
                }
                if (lid < QT) {
                    const int row = m0 + lid;
                    Da[lid] = row < M ? da[row * nkb + kb] : 0.0;
                    Sa[lid] = row < M ? sa[row * nkb + kb] : 0;
                } else if (lid < 2 * QT && bmode >= 0) {
                    const int c = lid - QT, col = n0 + c;
                    float db = 0.0, mb = 0.0;
                    if (col < N) {
                        const int p = ((boff + kb * QB + col * bs1) >> 5) * bb;
                        db = ld_scale(p, sb);
                        if (bmode == QF_Q4MIN) mb = ld_scale(p + sb, sb);
                    }
                    Db[c] = db;
                    Mb[c] = mb;
                }
                barrier();
                int S = 0;
                for (int j = 0; j < QB; j++) S += As[ty][j] * Bs[j][tx];
                const float d_a = Da[ty];
                const int s_a = Sa[ty];
                if (bmode < 0) {
                    precise float t = d_a * bscale * float(S - bzp * s_a);
                    acc += t;
                } else if (bmode == QF_Q8) {
                    precise float t = d_a * Db[tx] * float(S);
                    acc += t;
                } else if (bmode == QF_Q4) {
                    precise float t = d_a * Db[tx] * float(S - 8 * s_a);
                    acc += t;
                } else {
                    precise float t = d_a * Db[tx] * float(S) + d_a * Mb[tx] * float(s_a);
                    acc += t;
                }
                barrier();
            }
            const int m = m0 + ty, n = n0 + tx;
            if (m < M && n < N) {
                precise float r = acc * ascale;
                o_[ooff + m * N + n] = r;
            }
        }
}

#elif defined(K_BN)
/* qmatmul case (2): out[m, n] (f32, contiguous from ooff) = sum_k a[m, k] real(b[k, n]) in
 * f32: a [M, K] any strides; b [K, N] a block view along N (element offsets
 * boff + k bs0 + n bs1, bs1 = 1). A QT x QT group stages a QT x 32 slice of a and a 32 x QT
 * slice of b, decoded from its blocks, in shared memory per step of 32 along K.
 * P.i: M, N, K, aoff, as0, as1, boff, bs0, bs1, form, sb, bb, ooff. */
BUF(2, f32, a_);
BUF(3, f32, o_);
shared float As[QT][QB];
shared float Bs[QB][QT];
void main() {
    const int M = P.i[0], N = P.i[1], K = P.i[2], aoff = P.i[3], as0 = P.i[4], as1 = P.i[5];
    const int boff = P.i[6], bs0 = P.i[7], bs1 = P.i[8], form = P.i[9], sb = P.i[10];
    const int bb = P.i[11], ooff = P.i[12];
    const int tx = int(gl_LocalInvocationID.x), ty = int(gl_LocalInvocationID.y);
    const int lid = ty * QT + tx;
    for (int m0 = int(gl_WorkGroupID.y) * QT; m0 < M; m0 += int(gl_NumWorkGroups.y) * QT)
        for (int n0 = int(gl_WorkGroupID.x) * QT; n0 < N; n0 += int(gl_NumWorkGroups.x) * QT) {
            float acc = 0.0;
            for (int k0 = 0; k0 < K; k0 += QB) {
                for (int e = lid; e < QT * QB; e += QT * QT) {
                    const int r = e / QB, q = e % QB; /* a: consecutive items walk k */
                    const int row = m0 + r, k = k0 + q;
                    As[r][q] = (row < M && k < K) ? a_[aoff + row * as0 + k * as1] : 0.0;
                    const int qk = e / QT, c = e % QT; /* b: consecutive items walk n */
                    const int kk = k0 + qk, col = n0 + c;
                    Bs[qk][c] = (kk < K && col < N) ? deq(boff + kk * bs0 + col * bs1, form, sb, bb)
                                                    : 0.0;
                }
                barrier();
                for (int q = 0; q < QB; q++) acc += As[ty][q] * Bs[q][tx];
                barrier();
            }
            const int m = m0 + ty, n = n0 + tx;
            if (m < M && n < N) o_[ooff + m * N + n] = acc;
        }
}
#endif
