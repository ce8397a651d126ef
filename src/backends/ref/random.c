/*
 * random.c — the reference backend's random numbers: Philox-4x32-10, counter-based, so that
 * element i of a tensor depends only on (seed, i) and every backend reproduces it exactly.
 *
 * THE MAPPING (every backend implements exactly this):
 *
 *   Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11):
 *     multipliers M0 = 0xD2511F53, M1 = 0xCD9E8D57; Weyl increments W0 = 0x9E3779B9,
 *     W1 = 0xBB67AE85; 10 rounds. One round on counter c and key k:
 *       p0 = M0 * c0, p1 = M1 * c2                          (32x32 -> 64-bit products)
 *       c  = (hi(p1) ^ c1 ^ k0, lo(p1), hi(p0) ^ c3 ^ k1, lo(p0))
 *       k  = (k0 + W0, k1 + W1)                              (mod 2^32, after each round)
 *     Known answer: counter 0, key 0 -> 6627e8d5 e169c58d bc57ac4c 9b00dbd8.
 *   Key = (seed & 0xffffffff, seed >> 32). Elements are numbered i = 0, 1, ... in row-major
 *   order of the output's shape.
 *
 *   uniform(lo, hi), element i: counter = (lo32(i/4), hi32(i/4), 0, 0); word = output[i % 4];
 *     u = (word >> 8) * 2^-24 in [0, 1); value = lo + (hi - lo) * u, computed in double and
 *     rounded to the dtype on store.
 *   normal(mean, std), element i: counter = (lo32(i), hi32(i), 1, 0); words w0, w1 (the first
 *     two outputs); u1 = ((w0 >> 8) + 1) * 2^-24 in (0, 1]; u2 = (w1 >> 8) * 2^-24;
 *     value = mean + std * sqrt(-2 ln u1) * cos(2 pi u2), in double, rounded on store.
 *   bernoulli(p), element i: counter = (lo32(i/4), hi32(i/4), 2, 0); word = output[i % 4];
 *     u as for uniform; value = 1 if u < p else 0, stored in the output dtype (any
 *     non-quantized dtype).
 *   dropout(p) keeps element i exactly when bernoulli(1 - p) gives 1 at i.
 */
#include "ref.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

/** Philox-4x32-10: encrypts counter c (4 words) with key k (2 words) into out. */
static void philox4x32_10(const uint32_t c_in[4], const uint32_t k_in[2], uint32_t out[4]) {
    uint32_t c0 = c_in[0], c1 = c_in[1], c2 = c_in[2], c3 = c_in[3];
    uint32_t k0 = k_in[0], k1 = k_in[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

/** The 24-bit fraction of a word: (w >> 8) * 2^-24, in [0, 1). */
static inline double u24(uint32_t w) { return (double)(w >> 8) * (1.0 / 16777216.0); }

/** Fills out (any view; element i in row-major order) with the numbers of op. */
em_status ref_random(void *ctx, em_random_op op, const em_view *out, uint64_t seed,
                     const double *params) {
    (void)ctx;
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    const int64_t n = ref_numel(out);
    uint32_t ctr[4], w[4];
    uint64_t block = UINT64_MAX; /* the counter block whose outputs are in w */
    const double pi = 3.14159265358979323846;
    ref_iter it;
    ref_iter_init(&it, 1, out, out);
    for (int64_t i = 0; i < n; i++, ref_iter_next(&it)) {
        double v = 0;
        if (op == EM_RAND_NORMAL) {
            ctr[0] = (uint32_t)(uint64_t)i, ctr[1] = (uint32_t)((uint64_t)i >> 32);
            ctr[2] = 1, ctr[3] = 0;
            philox4x32_10(ctr, key, w);
            double u1 = ((double)(w[0] >> 8) + 1.0) * (1.0 / 16777216.0);
            double u2 = u24(w[1]);
            v = params[0] + params[1] * sqrt(-2.0 * log(u1)) * cos(2.0 * pi * u2);
        } else {
            uint64_t b = (uint64_t)i / 4;
            if (b != block) {
                ctr[0] = (uint32_t)b, ctr[1] = (uint32_t)(b >> 32);
                ctr[2] = op == EM_RAND_UNIFORM ? 0u : 2u, ctr[3] = 0;
                philox4x32_10(ctr, key, w);
                block = b;
            }
            double u = u24(w[i % 4]);
            if (op == EM_RAND_UNIFORM)
                v = params[0] + (params[1] - params[0]) * u;
            else
                v = u < params[0] ? 1.0 : 0.0;
        }
        ref_st(out->buf, out->dtype, it.off[0], v);
    }
    return EM_OK;
}
