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
#define RB 4
#define BT (TS * RB)
layout(local_size_x = TS, local_size_y = TS) in;

BUF(1, A, o_);
BUF(2, A, a_);
BUF(3, A, b_);

#define ACC CAT(CT_, A)
#define LDA(x) CAT(LD_, A)(x)

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
                int ar[RB], bc[RB];
                for (int r = 0; r < RB; r++) ar[r] = ao + min(i0 + r * TS, m - 1) * asm_;
                for (int c = 0; c < RB; c++) bc[c] = bo + min(j0 + c * TS, n - 1) * bsn;
                ACC acc[RB][RB];
                for (int r = 0; r < RB; r++)
                    for (int c = 0; c < RB; c++) acc[r][c] = ACC(0);
                for (int p = 0; p < k; p++) {
                    ACC av[RB], bv[RB];
                    for (int r = 0; r < RB; r++) av[r] = LDA(a_[ar[r] + p * ask]);
                    for (int c = 0; c < RB; c++) bv[c] = LDA(b_[bc[c] + p * bsk]);
                    for (int r = 0; r < RB; r++)
                        for (int c = 0; c < RB; c++) acc[r][c] += av[r] * bv[c];
                }
                for (int r = 0; r < RB; r++) {
                    const int i = i0 + r * TS;
                    if (i >= m) break;
                    for (int c = 0; c < RB; c++) {
                        const int j = j0 + c * TS;
                        if (j < n) o_[oo + i * osm + j * osn] = CAT(ST_, A)(acc[r][c]);
                    }
                }
            }
        }
    }
}
