/* gemm.c — ember's own GEMM, compiled once per instruction-set level (see isa.h): C = op(A)
 * op(B) + beta C, row-major (CBLAS conventions), f32 and f64, any lda/ldb/ldc, on one thread
 * (cpu_gemm in matmul.c splits a product over the pool and picks this or OpenBLAS).
 *
 * BLIS's scheme: B is packed in KC x NC panels (micro-panels of NR columns, NR values a row),
 * A in MC x KC blocks (micro-panels of MR rows, MR values a column); a register-blocked
 * microkernel multiplies one A micro-panel by one B micro-panel into an MR x NR tile of C held
 * in registers: each step loads NV vectors of B and broadcasts MR values of A, MR x NV FMAs.
 * Packing pads the edges with zeros, so the microkernel always runs a whole tile (a second
 * copy of MR/2 rows takes a last tile that has no more); an edge tile is written back element
 * by element. The packs that transpose (A not transposed, B transposed) go through registers
 * (pack_t_*); blocks along k, m and n are cut to equal sizes (gemm_balance).
 *
 * One source for every level: GCC vector types whose width is the level's (16 bytes at
 * portable/SSE2, 32 at avx2, 64 at avx512), and the tile sized to the level's registers:
 *   portable  4 x 2 vectors (f32 4x8,   f64 4x4):  8 accumulators of 16 xmm (no FMA: a*b+c)
 *   avx2      6 x 2 vectors (f32 6x16,  f64 6x8):  12 accumulators of 16 ymm
 *   avx512   12 x 2 vectors (f32 12x32, f64 12x16): 24 accumulators of 32 zmm
 * KC = 256 keeps a B micro-panel in L1 (16 KB at avx2, 32 KB at avx512), MC an A block in L2.
 * Accumulation is in the element type over runs of KC products, as OpenBLAS does. */
#include <string.h>

#include "cpu.h"

#if CPU_ISA_LEVEL >= CPU_ISA_AVX2
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

#define GEMM_VB CPU_GEMM_VB /* bytes of a vector (cpu.h) */
#define GEMM_MR CPU_GEMM_MR /* rows of a tile */
#define GEMM_NV CPU_GEMM_NV /* vectors of B a row of the tile */
#define GEMM_KC 256 /* depth of a packed panel */

typedef float gemm_vf __attribute__((vector_size(GEMM_VB)));
typedef double gemm_vd __attribute__((vector_size(GEMM_VB)));

/* c + a * b, fused where the level has FMA */
static inline gemm_vf fma_f(gemm_vf a, gemm_vf b, gemm_vf c) {
#if CPU_ISA_LEVEL >= CPU_ISA_AVX512
    return (gemm_vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif CPU_ISA_LEVEL == CPU_ISA_AVX2
    return (gemm_vf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
    return a * b + c;
#endif
}

static inline gemm_vd fma_d(gemm_vd a, gemm_vd b, gemm_vd c) {
#if CPU_ISA_LEVEL >= CPU_ISA_AVX512
    return (gemm_vd)_mm512_fmadd_pd((__m512d)a, (__m512d)b, (__m512d)c);
#elif CPU_ISA_LEVEL == CPU_ISA_AVX2
    return (gemm_vd)_mm256_fmadd_pd((__m256d)a, (__m256d)b, (__m256d)c);
#else
    return a * b + c;
#endif
}

static inline int64_t gemm_min(int64_t a, int64_t b) { return a < b ? a : b; }

/* The block size that cuts `total` into as few blocks of at most `max` (a multiple of `unit`)
 * as it can, all of about the same size: a multiple of unit. */
static inline int64_t gemm_balance(int64_t total, int64_t max, int64_t unit) {
    const int64_t nb = (total + max - 1) / max, size = (total + nb - 1) / nb;
    return gemm_min((size + unit - 1) / unit * unit, max);
}

/* Transposing packers: dst[p * width + r] = r < rows ? src[r * ld + p] : 0, p < kc, r < width
 * (rows <= width): op(A)'s rows into an A micro-panel when A is not transposed, op(B)'s
 * columns into a B micro-panel when B is. At avx2 and avx512 in 8 x 8 (f32) and 4 x 4 (f64)
 * blocks of 256-bit registers, the same code at both levels (what avx2 runs tests avx512's):
 * each block of `width` values of dst is stored group by group, and a last group narrower than
 * the register overruns by up to 7 values into the next row of dst, which the next store
 * rewrites; after the last row, the caller leaves GEMM_SLACK values of room. */
#define GEMM_SLACK 16
#if CPU_ISA_LEVEL >= CPU_ISA_AVX2
static void pack_t_f32(const float *src, int64_t ld, int64_t rows, int64_t width, int64_t kc,
                       float *restrict dst) {
    enum { G = 8, GMAX = 64 / G }; /* width: up to 64 (MR, NR at every level) */
    const int ng = (int)((width + G - 1) / G);
    int64_t p = 0;
    for (; p + G <= kc; p += G) {
        __m256 c[GMAX][G];
        for (int g = 0; g < ng; g++) {
            __m256 r[G];
            for (int q = 0; q < G; q++)
                r[q] = g * G + q < rows ? _mm256_loadu_ps(src + (g * G + q) * ld + p)
                                        : _mm256_setzero_ps();
            const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]),
                         t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]),
                         t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]),
                         t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
            const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee),
                         s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee),
                         s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee),
                         s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
            c[g][0] = _mm256_permute2f128_ps(s0, s4, 0x20);
            c[g][1] = _mm256_permute2f128_ps(s1, s5, 0x20);
            c[g][2] = _mm256_permute2f128_ps(s2, s6, 0x20);
            c[g][3] = _mm256_permute2f128_ps(s3, s7, 0x20);
            c[g][4] = _mm256_permute2f128_ps(s0, s4, 0x31);
            c[g][5] = _mm256_permute2f128_ps(s1, s5, 0x31);
            c[g][6] = _mm256_permute2f128_ps(s2, s6, 0x31);
            c[g][7] = _mm256_permute2f128_ps(s3, s7, 0x31);
        }
        for (int q = 0; q < G; q++)
            for (int g = 0; g < ng; g++) _mm256_storeu_ps(dst + (p + q) * width + g * G, c[g][q]);
    }
    for (; p < kc; p++)
        for (int64_t r = 0; r < width; r++) dst[p * width + r] = r < rows ? src[r * ld + p] : 0;
}

static void pack_t_f64(const double *src, int64_t ld, int64_t rows, int64_t width, int64_t kc,
                       double *restrict dst) {
    enum { G = 4, GMAX = 64 / G };
    const int ng = (int)((width + G - 1) / G);
    int64_t p = 0;
    for (; p + G <= kc; p += G) {
        __m256d c[GMAX][G];
        for (int g = 0; g < ng; g++) {
            __m256d r[G];
            for (int q = 0; q < G; q++)
                r[q] = g * G + q < rows ? _mm256_loadu_pd(src + (g * G + q) * ld + p)
                                        : _mm256_setzero_pd();
            const __m256d t0 = _mm256_unpacklo_pd(r[0], r[1]), t1 = _mm256_unpackhi_pd(r[0], r[1]),
                          t2 = _mm256_unpacklo_pd(r[2], r[3]), t3 = _mm256_unpackhi_pd(r[2], r[3]);
            c[g][0] = _mm256_permute2f128_pd(t0, t2, 0x20);
            c[g][1] = _mm256_permute2f128_pd(t1, t3, 0x20);
            c[g][2] = _mm256_permute2f128_pd(t0, t2, 0x31);
            c[g][3] = _mm256_permute2f128_pd(t1, t3, 0x31);
        }
        for (int q = 0; q < G; q++)
            for (int g = 0; g < ng; g++) _mm256_storeu_pd(dst + (p + q) * width + g * G, c[g][q]);
    }
    for (; p < kc; p++)
        for (int64_t r = 0; r < width; r++) dst[p * width + r] = r < rows ? src[r * ld + p] : 0;
}
#else
#define PACK_T(T, name)                                                                       \
    static void name(const T *src, int64_t ld, int64_t rows, int64_t width, int64_t kc,       \
                     T *restrict dst) {                                                       \
        for (int64_t r = 0; r < width; r++)                                                   \
            for (int64_t p = 0; p < kc; p++) dst[p * width + r] = r < rows ? src[r * ld + p] : 0; \
    }
PACK_T(float, pack_t_f32)
PACK_T(double, pack_t_f64)
#undef PACK_T
#endif

/* The type-generic part, instantiated for float and double. */
#define T float
#define V gemm_vf
#define FMA fma_f
#define GEMM_MC (GEMM_MR * 24)
#define GEMM_NC 4096
#define G(name) name##_f32
#include "gemm_body.h"
#undef T
#undef V
#undef FMA
#undef GEMM_MC
#undef GEMM_NC
#undef G

#define T double
#define V gemm_vd
#define FMA fma_d
#define GEMM_MC (GEMM_MR * 12)
#define GEMM_NC 2048
#define G(name) name##_f64
#include "gemm_body.h"
#undef T
#undef V
#undef FMA
#undef GEMM_MC
#undef GEMM_NC
#undef G

void CPU_K(cpu_gemm_kernel)(em_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                            const void *a, int64_t lda, const void *b, int64_t ldb, double beta,
                            void *c, int64_t ldc) {
    if (dt == EM_F32)
        gemm_f32(ta, tb, m, n, k, a, lda, b, ldb, (float)beta, c, ldc);
    else if (dt == EM_F64)
        gemm_f64(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}
