/*
 * random.comp — Philox-4x32-10 random numbers with the exact mapping of
 * src/backends/ref/random.c (key = seed's two words; uniform and bernoulli take word i % 4 of
 * counter block (i / 4, 0 | 2); normal the first two words of counter (i, 1); 24-bit
 * fractions). With R64 (random64.O: devices with shaderFloat64) values are computed in double
 * as ref computes them, so uniform and bernoulli match ref bit for bit; else in float.
 * P.v[0] the output (element i in row-major order); P.i[0] op (0 uniform, 1 normal,
 * 2 bernoulli), P.i[1], P.i[2] the key words; params: PF64(0), PF64(1) (R64) or P.f[0], P.f[1].
 */
#version 450
#include "common.glsl"
#include "math.glsl"
layout(local_size_x = WG) in;

BUF(1, O, o_);

#ifdef R64
#define real double
#define PR(k) PF64(k)
#define ST_R(x) CAT(ST_, O)(CAT(FROMD_, O)(x))
#define TWO_PI 6.283185307179586476925LF
#else
#define real float
#define PR(k) P.f[k]
#define ST_R(x) CAT(ST_, O)(CAT(FROMF_, O)(x))
#define TWO_PI 6.283185307179586476925
#endif

#define OIDX(i) (P.v[0].contig != 0 ? P.v[0].offset + (i) : vidx(0, (i)))

/* Philox-4x32-10 of counter c under key k. */
uvec4 philox(uvec4 c, uvec2 k) {
    for (int r = 0; r < 10; r++) {
        uint hi0, lo0, hi1, lo1;
        umulExtended(0xD2511F53u, c.x, hi0, lo0);
        umulExtended(0xCD9E8D57u, c.z, hi1, lo1);
        c = uvec4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
        k += uvec2(0x9E3779B9u, 0xBB67AE85u);
    }
    return c;
}

/* (w >> 8) * 2^-24, in [0, 1) (exact). */
real u24(uint w) { return real(w >> 8) * real(5.9604644775390625e-8); }

void main() {
    int n = P.v[0].numel, op = P.i[0];
    uvec2 key = uvec2(uint(P.i[1]), uint(P.i[2]));
    real p0 = PR(0), p1 = PR(1);
    if (op == 1) {
        GRID_LOOP(i, n) {
            uvec4 w = philox(uvec4(uint(i), 0u, 1u, 0u), key);
            real u1 = (real(w.x >> 8) + real(1)) * real(5.9604644775390625e-8);
            real u2 = u24(w.y);
            precise real v = p0 + p1 * m_sqrt(real(-2) * m_log(u1)) * m_cos(TWO_PI * u2);
            o_[OIDX(i)] = ST_R(v);
        }
    } else {
        int nb = (n + 3) / 4;
        GRID_LOOP(b, nb) {
            uvec4 w = philox(uvec4(uint(b), 0u, op == 0 ? 0u : 2u, 0u), key);
            for (int j = 0; j < 4; j++) {
                int i = b * 4 + j;
                if (i >= n) break;
                real u = u24(w[j]);
                precise real v = op == 0 ? p0 + (p1 - p0) * u : (u < p0 ? real(1) : real(0));
                o_[OIDX(i)] = ST_R(v);
            }
        }
    }
}
