/*
 * matmul.cl — batched matrix product with local-memory tiles. Built with -DA=<tag>.
 *
 * out[b, i, j] = sum_p a[b, i, p] * b[b, p, j] over any strides (batch offsets come from the
 * batch-dims views ab / bb / ob through vidx; broadcast batch dims have stride 0). A TS x TS
 * work-group computes a (4 TS) x (4 TS) block of out, each item a 4 x 4 register block of it,
 * with k-slices of a and b staged in local memory (see matmul_tiled).
 * Floats accumulate in float (double for f64), ints in wrapping 64-bit arithmetic.
 */

#define MM_CAT_(a, b) a##b
#define MM_CAT(a, b) MM_CAT_(a, b)
#define TYA MM_CAT(TY_, A)
#define LDA(p, i) MM_CAT(LD_, A)(p, i)
#define STA(p, i, v) MM_CAT(ST_, A)(p, i, v)

#if MM_CAT(ISF_, A)
#ifdef OCL_FP64
#define MM_IS_F64 MM_CAT(MM_F64_, A)
#else
#define MM_IS_F64 0
#endif
#else
#define MM_IS_F64 0
#endif
#define MM_F64_f64 1
#define MM_F64_f32 0
#define MM_F64_f16 0
#define MM_F64_bf16 0

#if MM_CAT(ISF_, A)
#if MM_IS_F64
typedef double acc_t;
#else
typedef float acc_t;
#endif
#define MAC(acc, x, y) ((acc) + (x) * (y))
#else
typedef long acc_t;
#define MAC(acc, x, y) ((long)((ulong)(acc) + (ulong)(x) * (ulong)(y)))
#endif

#ifdef MM_TS
#define TS MM_TS /* work-group TS x TS (8 on devices whose groups hold fewer than 256 items) */
#else
#define TS 16
#endif
#define RB 4  /* each item: RB rows x RB cols of out, spaced TS apart */
#define BT (TS * RB) /* the block of out a group computes: BT x BT */
#define TK 16        /* the k-slice staged in local memory per step */

/** Each work-group computes a BT x BT block of out; item (tx, ty) the elements
 *  (i0 + ty + r*TS, j0 + tx + c*TS), r, c < RB, accumulating in registers. Per step the
 *  group stages a BT x TK slice of a and a TK x BT slice of b in local memory (any strides:
 *  each item loads RB elements of each, zero past the edges). */
__kernel __attribute__((reqd_work_group_size(TS, TS, 1)))
void matmul_tiled(__global const TYA *a, view_t ab, long asm_, long ask,
                  __global const TYA *b, view_t bb, long bsk, long bsn,
                  __global TYA *out, view_t ob, long osm, long osn, long m, long n, long k) {
    __local acc_t As[TK][BT];
    __local acc_t Bs[TK][BT];
    const int tx = get_local_id(0), ty = get_local_id(1);
    const long gi = get_group_id(1) * BT, gj = get_group_id(0) * BT;
    const long bi = get_global_id(2);
    const long ao = vidx(ab, bi), bo = vidx(bb, bi), oo = vidx(ob, bi);
    const int lid = ty * TS + tx;
    acc_t acc[RB][RB];
    for (int r = 0; r < RB; r++)
        for (int c = 0; c < RB; c++) acc[r][c] = 0;
    for (long p0 = 0; p0 < k; p0 += TK) {
        /* TK * BT elements of each slice, TS * TS items: RB each */
        for (int e = lid; e < TK * BT; e += TS * TS) {
            const int q = e % TK, row = e / TK; /* a: consecutive items walk k */
            const long i = gi + row, p = p0 + q;
            As[q][row] = (i < m && p < k) ? (acc_t)LDA(a, ao + i * asm_ + p * ask) : (acc_t)0;
            const int col = e % BT, qb = e / BT; /* b: consecutive items walk n */
            const long j = gj + col, pb = p0 + qb;
            Bs[qb][col] = (j < n && pb < k) ? (acc_t)LDA(b, bo + pb * bsk + j * bsn) : (acc_t)0;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int q = 0; q < TK; q++) {
            acc_t av[RB], bv[RB];
            for (int r = 0; r < RB; r++) av[r] = As[q][ty + r * TS];
            for (int c = 0; c < RB; c++) bv[c] = Bs[q][tx + c * TS];
            for (int r = 0; r < RB; r++)
                for (int c = 0; c < RB; c++) acc[r][c] = MAC(acc[r][c], av[r], bv[c]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int r = 0; r < RB; r++) {
        const long i = gi + ty + r * TS;
        if (i >= m) break;
        for (int c = 0; c < RB; c++) {
            const long j = gj + tx + c * TS;
            if (j < n) STA(out, oo + i * osm + j * osn, acc[r][c]);
        }
    }
}
