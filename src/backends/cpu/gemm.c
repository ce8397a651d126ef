/* gemm.c — ember's own GEMM, compiled once per instruction-set level (see isa.h): C = op(A)
 * op(B) + beta C, row-major (CBLAS conventions), f32 and f64, any lda/ldb/ldc, on one thread
 * (cpu_gemm in matmul.c splits a product over the pool and picks this or OpenBLAS).
 *
 * BLIS's scheme: B is packed in KC x NC panels (micro-panels of NR columns, NR values a row),
 * A in MC x KC blocks (micro-panels of MR rows, MR values a column); a register-blocked
 * microkernel multiplies one A micro-panel by one B micro-panel into an MR x NR tile of C held
 * in registers: each step loads NV vectors of B and broadcasts MR values of A, MR x NV FMAs.
 * Packing pads the edges with zeros, so the microkernel always runs a whole tile; an edge
 * tile is written back element by element.
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
