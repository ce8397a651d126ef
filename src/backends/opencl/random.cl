/*
 * random.cl — Philox-4x32-10 random numbers, the mapping of src/backends/ref/random.c
 * exactly (counters, key, 24-bit fractions; uniform/bernoulli use the 4 words of counter
 * block i/4, normal the first two words of counter i with c2 = 1). Values are computed in
 * double on fp64 devices (as ref does), else in float. Built with -DO=<output tag>.
 */
typedef CAT(TY_, O) to;

#ifdef OCL_FP64
typedef double real;
#else
typedef float real;
#endif

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

/* Philox-4x32-10 of counter c under key k. */
static inline uint4 philox(uint4 c, uint2 k) {
    for (int r = 0; r < 10; r++) {
        uint hi0 = mul_hi(PHILOX_M0, c.x), lo0 = PHILOX_M0 * c.x;
        uint hi1 = mul_hi(PHILOX_M1, c.z), lo1 = PHILOX_M1 * c.z;
        c = (uint4)(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
        k += (uint2)(PHILOX_W0, PHILOX_W1);
    }
    return c;
}

/* (w >> 8) * 2^-24, in [0, 1). */
static inline real u24(uint w) { return (real)(w >> 8) * (real)(1.0 / 16777216.0); }

/* The output offset of element i. */
#define OIDX(i) (contig ? ov.offset + (i) : vidx(ov, (i)))

/* op 0 (uniform: p0 = lo, p1 = hi) or 2 (bernoulli: p0 = p): work item b makes elements
 * 4b .. 4b+3 from counter block b. */
__kernel void rnd_block(__global to *o, view_t ov, long n, int contig, int op, uint2 key, real p0,
                        real p1) {
    long b = get_global_id(0);
    if (b * 4 >= n) return;
    uint4 w = philox((uint4)((uint)b, (uint)((ulong)b >> 32), op == 0 ? 0u : 2u, 0u), key);
    uint ws[4] = {w.x, w.y, w.z, w.w};
    for (int j = 0; j < 4; j++) {
        long i = b * 4 + j;
        if (i >= n) break;
        real u = u24(ws[j]);
        real v = op == 0 ? p0 + (p1 - p0) * u : (u < p0 ? (real)1 : (real)0);
        CAT(ST_, O)(o, OIDX(i), CAT(FROMF_, O)(v));
    }
}

/* normal(mean p0, std p1): element i from counter (i, 1). */
__kernel void rnd_normal(__global to *o, view_t ov, long n, int contig, uint2 key, real p0,
                         real p1) {
    long i = get_global_id(0);
    if (i >= n) return;
    uint4 w = philox((uint4)((uint)i, (uint)((ulong)i >> 32), 1u, 0u), key);
    real u1 = ((real)(w.x >> 8) + (real)1) * (real)(1.0 / 16777216.0);
    real u2 = u24(w.y);
    real v = p0 + p1 * sqrt((real)-2 * log(u1)) * cos((real)2 * (real)M_PI * u2);
    CAT(ST_, O)(o, OIDX(i), CAT(FROMF_, O)(v));
}
