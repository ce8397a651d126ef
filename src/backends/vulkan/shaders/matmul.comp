/*
 * matmul.comp — batched matrix product, register-blocked. Built with -DA=<tag>.
 *
 * out[b, i, j] = sum_p a[b, i, p] * b[b, p, j] over any strides. P.v[0..2] are the batch
 * dims of out, a, b (out's batch shape, each tensor's batch strides; broadcast dims have
 * stride 0), so vidx(k, batch) is a batch's base offset. P.i: m n k, then the strides
 * a_m a_k b_k b_n o_m o_n, then the batch count.
 *
 * A TS x TS workgroup computes a BT x BT block of out (BT = RB * TS): invocation (tx, ty)
 * the RB x RB elements (i0 + ty + r*TS, j0 + tx + c*TS), accumulating in registers straight
 * from the buffers (no shared memory: on lavapipe this is several times faster than tiles).
 * Rows and columns past the edge load a clamped (valid) element and are not stored. Blocks
 * and batches beyond the grid are looped over (a grid dim holds at most 65,535 groups).
 *
 * Accumulation: CT_A — float for f16 / bf16 / f32, double for f64, wrapping int64 for i64,
 * wrapping int32 for the smaller ints (the low bits, all a store keeps, are those of ref's
 * wrapping int64 sum).
 */
#version 450
#include "common.glsl"

#define TS 8
#define RB 4 /* fixed: the 4-vectors below */
#define BT (TS * RB)
layout(local_size_x = TS, local_size_y = TS) in;

BUF(1, A, o_);
BUF(2, A, a_);
BUF(3, A, b_);

#define ACC CAT(CT_, A)
#define LDA(x) CAT(LD_, A)(x)
/* a 4-vector of ACC: the blocks live in vectors, not arrays (lavapipe's LLVM 15 hit a
 * use-after-free in its coroutine passes on the local arrays of an earlier version) */
#define V4_f32 vec4
#define V4_f16 vec4
#define V4_bf16 vec4
#define V4_f64 dvec4
#define V4_i64 i64vec4
#define V4_i32 ivec4
#define V4_i16 ivec4
#define V4_i8 ivec4
#define V4_u8 ivec4
#define V4 CAT(V4_, A)

#define STORE_ROW(r, accr)                                                                     \
    {                                                                                          \
        const int i = i0 + (r) * TS;                                                           \
        if (i < m) {                                                                           \
            if (j0 < n) o_[oo + i * osm + j0 * osn] = CAT(ST_, A)(accr.x);                     \
            if (j0 + TS < n) o_[oo + i * osm + (j0 + TS) * osn] = CAT(ST_, A)(accr.y);         \
            if (j0 + 2 * TS < n) o_[oo + i * osm + (j0 + 2 * TS) * osn] = CAT(ST_, A)(accr.z); \
            if (j0 + 3 * TS < n) o_[oo + i * osm + (j0 + 3 * TS) * osn] = CAT(ST_, A)(accr.w); \
        }                                                                                      \
    }

void main() {
    const int m = P.i[0], n = P.i[1], k = P.i[2];
    const int asm_ = P.i[3], ask = P.i[4], bsk = P.i[5], bsn = P.i[6];
    const int osm = P.i[7], osn = P.i[8], batches = P.i[9];
    const int nbx = (n + BT - 1) / BT, nby = (m + BT - 1) / BT;
    const int tx = int(gl_LocalInvocationID.x), ty = int(gl_LocalInvocationID.y);
    for (int bz = int(gl_WorkGroupID.z); bz < batches; bz += int(gl_NumWorkGroups.z)) {
        const int oo = vidx(0, bz), ao = vidx(1, bz), bo = vidx(2, bz);
        for (int by = int(gl_WorkGroupID.y); by < nby; by += int(gl_NumWorkGroups.y)) {
            for (int bx = int(gl_WorkGroupID.x); bx < nbx; bx += int(gl_NumWorkGroups.x)) {
                const int i0 = by * BT + ty, j0 = bx * BT + tx;
                /* row / column starts, clamped into the matrix (those past it not stored) */
                const ivec4 ar = ao + min(ivec4(i0, i0 + TS, i0 + 2 * TS, i0 + 3 * TS), m - 1) * asm_;
                const ivec4 bc = bo + min(ivec4(j0, j0 + TS, j0 + 2 * TS, j0 + 3 * TS), n - 1) * bsn;
                V4 acc0 = V4(0), acc1 = V4(0), acc2 = V4(0), acc3 = V4(0);
                for (int p = 0; p < k; p++) {
                    const int pa = p * ask, pb = p * bsk;
                    const V4 bv = V4(LDA(b_[bc.x + pb]), LDA(b_[bc.y + pb]), LDA(b_[bc.z + pb]),
                                     LDA(b_[bc.w + pb]));
                    acc0 += LDA(a_[ar.x + pa]) * bv;
                    acc1 += LDA(a_[ar.y + pa]) * bv;
                    acc2 += LDA(a_[ar.z + pa]) * bv;
                    acc3 += LDA(a_[ar.w + pa]) * bv;
                }
                STORE_ROW(0, acc0)
                STORE_ROW(1, acc1)
                STORE_ROW(2, acc2)
                STORE_ROW(3, acc3)
            }
        }
    }
}
