/*
 * quant.h — the cpu backend's quantized kernels (quant.c, quant_x86.c): the quantize,
 * dequantize and qmatmul slots of backend.h (ABI 5), and what the per-ISA matmul tiles share.
 *
 * qmatmul's int8 product runs one of four levels, chosen once when first used: the cpu
 * backend's level (isa.h, EMBER_CPU_ISA) caps it, and the CPU's VNNI flags pick within it:
 *   - avx512vnni: the avx512 level and AVX512_VNNI (+BW, VL, DQ): vpdpbusd on 512 bits, two
 *                 weight columns a register;
 *   - avxvnni:    the avx2 level (or avx512 without AVX512_VNNI) and AVX-VNNI: vpdpbusd on 256;
 *   - avx2:       the avx2 level without VNNI: vpmaddubsw + vpmaddwd;
 *   - portable:   plain C (any CPU).
 * EMBER_CPU_QUANT (portable, avx2, avxvnni, avx512vnni; any case) asks for a level below that,
 * so that each one can be tested on one machine; a level the CPU or EMBER_CPU_ISA does not
 * allow gives the best one below it.
 */
#ifndef EMBER_CPU_QUANT_H
#define EMBER_CPU_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "ember/backend.h"

em_status cpu_quantize(void *ctx, const em_view *out, const em_view *x, const em_quant_scheme *s);
em_status cpu_dequantize(void *ctx, const em_view *out, const em_view *q,
                         const em_quant_scheme *s);
em_status cpu_qmatmul(void *ctx, const em_view *out, const em_view *a, const em_quant_scheme *as,
                      const em_view *b, const em_quant_scheme *bs);

#define CPU_QL_PORTABLE 0
#define CPU_QL_AVX2 1
#define CPU_QL_AVXVNNI 2
#define CPU_QL_AVX512VNNI 3
#define CPU_QL_COUNT 4

/** The level qmatmul runs (chosen once; thread-safe). */
int cpu_quant_level(void);
/** "portable", "avx2", "avxvnni", "avx512vnni"; "?" otherwise. */
const char *cpu_quant_level_name(int level);
/** Whether this CPU and build can run `level` (whatever EMBER_CPU_QUANT / EMBER_CPU_ISA say). */
bool cpu_quant_level_supported(int level);

/* ---- what the tiles share (quant.c packs, quant_x86.c and quant.c compute) ---- */

/** a's rows as q8 blocks of 32: row r's nb blocks are q[r*nb*32 ...] (zero past K), their
 *  scales d[r*nb + j] (1 for a per-tensor a) and their integer sums s[r*nb + j]. */
typedef struct cpu_qa {
    int64_t nb;
    const int8_t *q;
    const float *d;
    const int32_t *s;
} cpu_qa;

/* The weight's formats, as the tiles read them. */
enum {
    CPU_QB_Q8,  /* q8 blocks: d, 32 int8 */
    CPU_QB_PT,  /* per tensor: 32 int8 a block, no header; d = scale, zero point zp */
    CPU_QB_Q4,  /* q4 blocks (Q4_0): d, 16 bytes of nibbles in [0, 15] */
    CPU_QB_Q4M, /* q4 blocks with minimums (Q4_1): d, m, 16 bytes */
};

/** b [K, N] as columns of blocks along K: column n's block j starts at
 *  base + n * cstride + j * bstride; its scale (f32, or f16 when f16) at that address, Q4_1's
 *  minimum after it, its integers at qofs. */
typedef struct cpu_qb {
    int fmt;
    bool f16;
    const uint8_t *base;
    int64_t cstride, bstride;
    int qofs;
    float scale;  /* CPU_QB_PT */
    int32_t zp;   /* CPU_QB_PT */
    bool has_m128; /* CPU_QB_PT at q8 affine: a byte may be -128 (the avx2 tile cannot) */
} cpu_qb;

/** out[r * ldo + c] = the sum over blocks of backend.h's per-block terms, for the rows
 *  r0 .. r0 + nr - 1 and columns c0 .. c0 + nc - 1 (nr <= mr, nc <= nc of the level). */
typedef void (*cpu_qtile_fn)(const cpu_qa *A, int64_t r0, int nr, const cpu_qb *B, int64_t c0,
                             int nc, float *out, int64_t ldo);

typedef struct cpu_qtile {
    cpu_qtile_fn fn;
    int mr, nc;
} cpu_qtile;

/** quant_x86.c: the tile of an x86 level (false when this build has none). */
bool cpu_qtile_x86(int level, cpu_qtile *t);

#endif /* EMBER_CPU_QUANT_H */
