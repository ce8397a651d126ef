/*
 * test_cpu_nnidx.c — the cpu backend's indexing, pooling, normalization, convolution and
 * matmul-shape cases against ref's kernels, run in the same test on the same views:
 *   - gather, scatter_add (collisions, the expanded index of embedding's backward) and
 *     index_select: every dtype class, i64 and i32 indices, contiguous, transposed, offset and
 *     padded (strided) operands, broadcast (stride-0) indices and sources, odd sizes, empty;
 *   - max/avg pooling and avg's backward, adaptive average pooling and its backward,
 *     layer_norm (parameters strided or absent), conv2d / its weight gradient /
 *     conv_transpose2d: f32, f64, f16, bf16, strided inputs and outputs, empty tensors; the
 *     per-level kernels at every level this build and CPU have (portable, avx2, avx512);
 *   - matmul: a strided output, bool, views of rank 1 (a clear status);
 *   - none of these counts a fallback to ref (fallback.h).
 * Outputs are compared over their whole buffers (gaps of strided outputs must stay as they
 * were), exactly where ref moves values (gather, max pooling, scatter_add's ordered sums) and
 * within the conformance table's tolerances elsewhere.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ember/backend.h"
#include "ember/ember.h"

#ifndef EMBER_TEST_HAVE_CPU
int main(void) {
    printf("test_cpu_nnidx: no cpu backend in this build: skipped\n");
    return 77;
}
#else
#include "backends/cpu/fallback.h"
#include "backends/cpu/isa.h"
#include "cpu_test_util.h"

/* the cpu backend's slots compiled once (cpu.h, which needs cblas.h) */
em_status cpu_gather(void *ctx, const em_view *out, const em_view *in, int dim,
                     const em_view *index);
em_status cpu_scatter_add(void *ctx, const em_view *out, int dim, const em_view *index,
                          const em_view *src);
em_status cpu_index_select(void *ctx, const em_view *out, const em_view *in, int dim,
                           const em_view *index);
em_status cpu_matmul(void *ctx, const em_view *out, const em_view *a, const em_view *b);

static const em_backend_ops *REF;
static void *CTX;

#include "cpu_test_views.h"


/* ---- gather, scatter_add, index_select ---- */

static void index_select_cases(void **state) {
    (void)state;
    const em_dtype dts[] = {EM_F32, EM_F64, EM_F16, EM_BF16, EM_I64, EM_I32, EM_I8, EM_BOOL};
    const int64_t shapes[][3] = {{37, 19, 1}, {5, 6, 7}, {300, 1, 1}};
    const int ranks[] = {2, 3, 1};
    for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++)
        for (int sh = 0; sh < 3; sh++)
            for (int dim = 0; dim < ranks[sh]; dim++)
                for (int lin = 0; lin < L_COUNT; lin++)
                    for (int lout = 0; lout < L_COUNT; lout += 2)
                        for (int ix = 0; ix < 4; ix++) {
                            const int rank = ranks[sh];
                            const int64_t n = ix == 3 ? 0 : 23; /* with repeats; or empty */
                            buf bin, bidx, bo;
                            em_view in = mkview(&bin, dts[t], rank, shapes[sh], lin, -50, 50);
                            const int64_t ish[1] = {n};
                            em_view idx = mkview(&bidx, ix == 1 ? EM_I32 : EM_I64, 1, ish,
                                                 ix == 2 ? L_PADDED : L_CONTIG, 0,
                                                 (double)shapes[sh][dim]);
                            int64_t osh[3];
                            memcpy(osh, shapes[sh], sizeof osh);
                            osh[dim] = n;
                            em_view out = mkview(&bo, dts[t], rank, osh, lout, -9, 9);
                            buf want = clone(&bo);
                            em_view wv = out;
                            wv.buf = want.p;
                            assert_int_equal(REF->index_select(NULL, &wv, &in, dim, &idx), EM_OK);
                            assert_int_equal(cpu_index_select(CTX, &out, &in, dim, &idx), EM_OK);
                            check_same("index_select", &bo, &want, 0);
                            free_buf(&bin), free_buf(&bidx), free_buf(&bo), free_buf(&want);
                        }
    no_fallbacks();
}

static void gather_cases(void **state) {
    (void)state;
    const em_dtype dts[] = {EM_F32, EM_F64, EM_F16, EM_I64, EM_U8};
    const int64_t ins[3] = {7, 9, 5};
    for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++)
        for (int dim = 0; dim < 3; dim++)
            for (int lin = 0; lin < L_COUNT; lin++)
                for (int lix = 0; lix < L_COUNT; lix++)
                    for (int small = 0; small < 3; small++) {
                        /* index: in's shape, smaller outside dim, or empty */
                        int64_t ish[3] = {7, 9, 5};
                        ish[dim] = 4;
                        if (small == 1)
                            for (int d = 0; d < 3; d++)
                                if (d != dim) ish[d] -= 2;
                        if (small == 2) ish[(dim + 1) % 3] = 0;
                        buf bin, bidx, bo;
                        em_view in = mkview(&bin, dts[t], 3, ins, lin, -50, 50);
                        em_view idx = mkview(&bidx, lix == 1 ? EM_I32 : EM_I64, 3, ish, lix, 0,
                                             (double)ins[dim]);
                        em_view out = mkview(&bo, dts[t], 3, ish, (lin + lix) % L_COUNT, -9, 9);
                        buf want = clone(&bo);
                        em_view wv = out;
                        wv.buf = want.p;
                        assert_int_equal(REF->gather(NULL, &wv, &in, dim, &idx), EM_OK);
                        assert_int_equal(cpu_gather(CTX, &out, &in, dim, &idx), EM_OK);
                        check_same("gather", &bo, &want, 0);
                        free_buf(&bin), free_buf(&bidx), free_buf(&bo), free_buf(&want);
                    }
    no_fallbacks();
}

static void scatter_add_cases(void **state) {
    (void)state;
    const em_dtype dts[] = {EM_F32, EM_F64, EM_F16, EM_BF16, EM_I64, EM_I32, EM_I16, EM_U8};
    const int64_t osh[3] = {7, 9, 5};
    for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++)
        for (int dim = 0; dim < 3; dim++)
            for (int lo = 0; lo < L_COUNT; lo++)
                for (int kind = 0; kind < 4; kind++) {
                    /* index [.., 11 along dim, ..] (collisions), smaller outside dim; kind 1:
                     * the index expanded (stride 0) outside dim, as embedding's backward;
                     * kind 2: src broadcast (stride 0) and transposed index; kind 3: empty */
                    int64_t ish[3] = {6, 8, 4};
                    ish[dim] = 11;
                    if (kind == 3) ish[(dim + 2) % 3] = 0;
                    buf bo, bidx, bsrc;
                    em_view out = mkview(&bo, dts[t], 3, osh, lo, -20, 20);
                    em_view idx = mkview(&bidx, kind == 2 ? EM_I32 : EM_I64, 3, ish,
                                         kind == 2 ? L_REVERSED : L_CONTIG, 0, (double)osh[dim]);
                    if (kind == 1) {
                        for (int d = 0; d < 3; d++)
                            if (d != dim) idx.strides[d] = 0;
                    }
                    const int64_t ssh[3] = {ish[0] + 1, ish[1] + 2, ish[2]}; /* src larger */
                    em_view src = mkview(&bsrc, dts[t], 3, ssh, (lo + 1) % L_COUNT, -20, 20);
                    for (int d = 0; d < 3; d++) src.shape[d] = ish[d];
                    if (kind == 2) src.strides[dim] = 0;
                    buf want = clone(&bo);
                    em_view wv = out;
                    wv.buf = want.p;
                    assert_int_equal(REF->scatter_add(NULL, &wv, dim, &idx, &src), EM_OK);
                    assert_int_equal(cpu_scatter_add(CTX, &out, dim, &idx, &src), EM_OK);
                    check_same("scatter_add", &bo, &want, 0); /* ref's order: exact */
                    free_buf(&bo), free_buf(&bidx), free_buf(&bsrc), free_buf(&want);
                }
    no_fallbacks();
}

/* an embedding's backward, large enough to split over the pool: [V, D] += rows of src at
 * the expanded index, many repeats */
static void scatter_add_embedding(void **state) {
    (void)state;
    for (int t = 0; t < NFLOATS; t++) {
        const int64_t V = 50, D = 300, N = 700;
        const int64_t osh[2] = {V, D}, ish[2] = {N, D};
        buf bo, bidx, bsrc;
        em_view out = mkview(&bo, FLOATS[t], 2, osh, L_CONTIG, 0, 0);
        em_view idx = mkview(&bidx, EM_I64, 2, (int64_t[]){N, 1}, L_CONTIG, 0, (double)V);
        idx.shape[1] = D;
        idx.strides[1] = 0;
        em_view src = mkview(&bsrc, FLOATS[t], 2, ish, L_CONTIG, -1, 1);
        buf want = clone(&bo);
        em_view wv = out;
        wv.buf = want.p;
        assert_int_equal(REF->scatter_add(NULL, &wv, 0, &idx, &src), EM_OK);
        assert_int_equal(cpu_scatter_add(CTX, &out, 0, &idx, &src), EM_OK);
        check_same("scatter_add (embedding)", &bo, &want, 0);
        free_buf(&bo), free_buf(&bidx), free_buf(&bsrc), free_buf(&want);
    }
    no_fallbacks();
}

/* ---- per-level kernels: pooling, adaptive pooling, layer_norm, convolution ---- */


static void pooling_cases(void **state) {
    (void)state;
    lv L[CPU_ISA_COUNT];
    const int nl = levels(L);
    const em_pool_args args[] = {
        {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true},  {{2, 2}, {2, 2}, {0, 0}, {1, 1}, false},
        {{3, 2}, {1, 2}, {1, 0}, {2, 1}, false}, {{3, 3}, {2, 1}, {1, 1}, {1, 1}, false}};
    const int64_t xs[][4] = {{2, 3, 9, 11}, {1, 2, 8, 8}, {0, 3, 9, 11}};
    for (int l = 0; l < nl; l++)
        for (int t = 0; t < NFLOATS; t++)
            for (int s = 0; s < 3; s++)
                for (size_t ai = 0; ai < sizeof args / sizeof args[0]; ai++)
                    for (int lx = 0; lx < L_COUNT; lx++)
                        for (int lo = 0; lo < L_COUNT; lo += 2) {
                            const em_pool_args *a = &args[ai];
                            const em_dtype dt = FLOATS[t];
                            int64_t osh[4] = {xs[s][0], xs[s][1], 0, 0};
                            for (int d = 0; d < 2; d++)
                                osh[2 + d] = (xs[s][2 + d] + 2 * a->padding[d] -
                                              a->dilation[d] * (a->kernel[d] - 1) - 1) /
                                                 a->stride[d] + 1;
                            buf bx, bo, bi, bgy, bgx;
                            em_view x = mkview(&bx, dt, 4, xs[s], lx, -3, 3);
                            if (bx.n > 40) ct_store(bx.p, dt, 40, NAN); /* NaN wins */
                            em_view out = mkview(&bo, dt, 4, osh, lo, -9, 9);
                            em_view idx = mkview(&bi, EM_I64, 4, osh, (lo + lx) % L_COUNT, 0, 0);
                            buf wo = clone(&bo), wi = clone(&bi);
                            em_view wov = out, wiv = idx;
                            wov.buf = wo.p, wiv.buf = wi.p;
                            /* max with and without indices */
                            assert_int_equal(REF->max_pool2d(NULL, &wov, &wiv, &x, a), EM_OK);
                            assert_int_equal(L[l].k->max_pool2d(CTX, &out, &idx, &x, a), EM_OK);
                            check_same("max_pool2d", &bo, &wo, 0);
                            check_same("max_pool2d indices", &bi, &wi, 0);
                            assert_int_equal(L[l].k->max_pool2d(CTX, &out, NULL, &x, a), EM_OK);
                            check_same("max_pool2d (no indices)", &bo, &wo, 0);
                            /* average */
                            if (a->dilation[0] == 1 && a->dilation[1] == 1) {
                                assert_int_equal(REF->avg_pool2d(NULL, &wov, &x, a), EM_OK);
                                assert_int_equal(L[l].k->avg_pool2d(CTX, &out, &x, a), EM_OK);
                                check_same("avg_pool2d", &bo, &wo, 1);
                                /* its backward: gy of out's shape, gx of x's */
                                em_view gy = mkview(&bgy, dt, 4, osh, lx, -3, 3);
                                em_view gx = mkview(&bgx, dt, 4, xs[s], lo, -9, 9);
                                buf wgx = clone(&bgx);
                                em_view wgxv = gx;
                                wgxv.buf = wgx.p;
                                assert_int_equal(REF->avg_pool2d_backward(NULL, &wgxv, &gy, a),
                                                 EM_OK);
                                assert_int_equal(L[l].k->avg_pool2d_backward(CTX, &gx, &gy, a),
                                                 EM_OK);
                                check_same("avg_pool2d_backward", &bgx, &wgx, 1);
                                free_buf(&bgy), free_buf(&bgx), free_buf(&wgx);
                            }
                            free_buf(&bx), free_buf(&bo), free_buf(&bi), free_buf(&wo),
                                free_buf(&wi);
                        }
    no_fallbacks();
}

static void adaptive_cases(void **state) {
    (void)state;
    lv L[CPU_ISA_COUNT];
    const int nl = levels(L);
    const int64_t xs[][4] = {{2, 3, 7, 7}, {3, 2, 10, 9}, {1, 70, 5, 6}, {0, 3, 7, 7}};
    const int64_t os[][2] = {{1, 1}, {3, 3}, {7, 7}, {4, 3}, {5, 4}, {2, 5}};
    for (int l = 0; l < nl; l++)
        for (int t = 0; t < NFLOATS; t++)
            for (int s = 0; s < 4; s++)
                for (int o = 0; o < 6; o++)
                    for (int lx = 0; lx < L_COUNT; lx++)
                        for (int lo = 0; lo < L_COUNT; lo += 2) {
                            const em_dtype dt = FLOATS[t];
                            const int64_t osh[4] = {xs[s][0], xs[s][1], os[o][0], os[o][1]};
                            buf bx, bo, bgy, bgx;
                            em_view x = mkview(&bx, dt, 4, xs[s], lx, -3, 3);
                            em_view out = mkview(&bo, dt, 4, osh, lo, -9, 9);
                            buf wo = clone(&bo);
                            em_view wov = out;
                            wov.buf = wo.p;
                            assert_int_equal(REF->adaptive_avg_pool2d(NULL, &wov, &x), EM_OK);
                            assert_int_equal(L[l].k->adaptive_avg_pool2d(CTX, &out, &x), EM_OK);
                            check_same("adaptive_avg_pool2d", &bo, &wo, 1);
                            em_view gy = mkview(&bgy, dt, 4, osh, lo, -3, 3);
                            em_view gx = mkview(&bgx, dt, 4, xs[s], lx, -9, 9);
                            buf wgx = clone(&bgx);
                            em_view wgxv = gx;
                            wgxv.buf = wgx.p;
                            assert_int_equal(REF->adaptive_avg_pool2d_backward(NULL, &wgxv, &gy),
                                             EM_OK);
                            assert_int_equal(L[l].k->adaptive_avg_pool2d_backward(CTX, &gx, &gy),
                                             EM_OK);
                            check_same("adaptive_avg_pool2d_backward", &bgx, &wgx, 1);
                            free_buf(&bx), free_buf(&bo), free_buf(&wo), free_buf(&bgy),
                                free_buf(&bgx), free_buf(&wgx);
                        }
    no_fallbacks();
}

static void layer_norm_cases(void **state) {
    (void)state;
    lv L[CPU_ISA_COUNT];
    const int nl = levels(L);
    const int64_t shapes[][2] = {{5, 37}, {3, 64}, {1, 1}, {0, 8}, {70, 33}};
    for (int l = 0; l < nl; l++)
        for (int t = 0; t < NFLOATS; t++)
            for (int s = 0; s < 5; s++)
                for (int lx = 0; lx < L_COUNT; lx++)
                    for (int lp = 0; lp < 4; lp++) { /* params: contiguous, padded, none, w only */
                        const em_dtype dt = FLOATS[t];
                        const int64_t n = shapes[s][1];
                        buf bx, bo, bw, bb;
                        em_view x = mkview(&bx, dt, 2, shapes[s], lx, -3, 3);
                        em_view out = mkview(&bo, dt, 2, shapes[s], (lx + lp) % L_COUNT, -9, 9);
                        const int64_t ps[1] = {n};
                        em_view w = mkview(&bw, dt, 1, ps, lp == 1 ? L_PADDED : L_CONTIG, -2, 2);
                        em_view b = mkview(&bb, dt, 1, ps, lp == 1 ? L_PADDED : L_CONTIG, -2, 2);
                        const em_view *pw = lp == 2 ? NULL : &w, *pb = lp >= 2 ? NULL : &b;
                        buf wo = clone(&bo);
                        em_view wov = out;
                        wov.buf = wo.p;
                        assert_int_equal(REF->layer_norm(NULL, &wov, &x, pw, pb, n, 1e-5), EM_OK);
                        assert_int_equal(L[l].k->layer_norm(CTX, &out, &x, pw, pb, n, 1e-5),
                                         EM_OK);
                        check_same("layer_norm", &bo, &wo, 1);
                        free_buf(&bx), free_buf(&bo), free_buf(&bw), free_buf(&bb),
                            free_buf(&wo);
                    }
    no_fallbacks();
}

static void conv_cases(void **state) {
    (void)state;
    lv L[CPU_ISA_COUNT];
    const int nl = levels(L);
    /* x [N, C, H, W], w [O, C/G, KH, KW], groups, stride, padding, dilation */
    typedef struct cc {
        int64_t x[4], w[4], g, s, p, d;
    } cc;
    const cc cases[] = {
        {{2, 4, 7, 6}, {6, 2, 3, 3}, 2, 1, 1, 1}, {{1, 3, 9, 8}, {5, 3, 3, 2}, 1, 2, 1, 1},
        {{2, 2, 6, 7}, {4, 2, 1, 1}, 1, 1, 0, 1}, {{0, 3, 5, 5}, {4, 3, 3, 3}, 1, 1, 1, 1},
        {{2, 0, 5, 5}, {4, 0, 3, 3}, 1, 1, 1, 1}, {{1, 2, 8, 8}, {3, 2, 3, 3}, 1, 1, 2, 2}};
    for (int l = 0; l < nl; l++)
        for (int t = 0; t < NFLOATS; t++)
            for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
                for (int lay = 0; lay < L_COUNT; lay++)
                    for (int withb = 0; withb < 2; withb++) {
                        const cc *q = &cases[c];
                        const em_dtype dt = FLOATS[t];
                        em_conv_args a = {{q->s, q->s}, {q->p, q->p}, {q->d, q->d}, {0, 0}, q->g};
                        int64_t osh[4] = {q->x[0], q->w[0], 0, 0};
                        for (int d = 0; d < 2; d++)
                            osh[2 + d] = (q->x[2 + d] + 2 * q->p - q->d * (q->w[2 + d] - 1) - 1) /
                                             q->s + 1;
                        buf bx, bw, bb, bo, bgw;
                        em_view x = mkview(&bx, dt, 4, q->x, lay, -1, 1);
                        em_view w = mkview(&bw, dt, 4, q->w, (lay + 1) % L_COUNT, -1, 1);
                        const int64_t bs[1] = {q->w[0]};
                        em_view b = mkview(&bb, dt, 1, bs, L_PADDED, -1, 1);
                        em_view out = mkview(&bo, dt, 4, osh, (lay + 2) % L_COUNT, -9, 9);
                        const em_view *pb = withb ? &b : NULL;
                        buf wo = clone(&bo);
                        em_view wov = out;
                        wov.buf = wo.p;
                        assert_int_equal(REF->conv2d(NULL, &wov, &x, &w, pb, &a), EM_OK);
                        assert_int_equal(L[l].k->conv2d(CTX, &out, &x, &w, pb, &a), EM_OK);
                        check_same("conv2d", &bo, &wo, 1);
                        /* the weight gradient of x and a gy of out's shape */
                        em_view gw = mkview(&bgw, dt, 4, q->w, lay, -9, 9);
                        buf wgw = clone(&bgw);
                        em_view wgwv = gw;
                        wgwv.buf = wgw.p;
                        assert_int_equal(REF->conv2d_weight_grad(NULL, &wgwv, &x, &out, &a), EM_OK);
                        assert_int_equal(L[l].k->conv2d_weight_grad(CTX, &gw, &x, &out, &a),
                                         EM_OK);
                        check_same("conv2d_weight_grad", &bgw, &wgw, 1);
                        /* conv_transpose2d: out (as x) and w back to x's shape */
                        {
                            em_view tb = b;
                            tb.shape[0] = q->w[1] * q->g;
                            const em_view *ptb = withb && tb.shape[0] <= q->w[0] ? &tb : NULL;
                            int64_t tsh[4] = {q->x[0], q->w[1] * q->g, 0, 0};
                            for (int d = 0; d < 2; d++)
                                tsh[2 + d] = (osh[2 + d] - 1) * q->s - 2 * q->p +
                                             q->d * (q->w[2 + d] - 1) + 1;
                            buf bt;
                            em_view tout = mkview(&bt, dt, 4, tsh, lay, -9, 9);
                            buf wt = clone(&bt);
                            em_view wtv = tout;
                            wtv.buf = wt.p;
                            em_view win = out, wwt = w;
                            win.buf = wo.p; /* ref's output as the input of both */
                            (void)wwt;
                            assert_int_equal(REF->conv_transpose2d(NULL, &wtv, &win, &w, ptb, &a),
                                             EM_OK);
                            assert_int_equal(
                                L[l].k->conv_transpose2d(CTX, &tout, &win, &w, ptb, &a), EM_OK);
                            check_same("conv_transpose2d", &bt, &wt, 1);
                            free_buf(&bt), free_buf(&wt);
                        }
                        free_buf(&bx), free_buf(&bw), free_buf(&bb), free_buf(&bo),
                            free_buf(&wo), free_buf(&bgw), free_buf(&wgw);
                    }
    no_fallbacks();
}

/* ---- matmul: strided outputs, bool, bad ranks ---- */

static void matmul_cases(void **state) {
    (void)state;
    const em_dtype dts[] = {EM_F32, EM_F64, EM_F16, EM_BF16, EM_BOOL, EM_I32};
    const int64_t M = 9, K = 13, N = 11;
    for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++)
        for (int la = 0; la < L_COUNT; la++)
            for (int lo = 0; lo < L_COUNT; lo++)
                for (int batch = 0; batch < 2; batch++) {
                    const em_dtype dt = dts[t];
                    const int r = batch ? 3 : 2;
                    const int64_t as[3] = {3, M, K}, bs[3] = {3, K, N}, os[3] = {3, M, N};
                    const int64_t *pa = batch ? as : as + 1, *pb = batch ? bs : bs + 1,
                                  *po = batch ? os : os + 1;
                    buf ba, bb, bo;
                    const double hi = dt == EM_BOOL ? 1.15 : 3; /* bool: mostly false */
                    em_view a = mkview(&ba, dt, r, pa, la, dt == EM_BOOL ? 0 : -3, hi);
                    em_view b = mkview(&bb, dt, r, pb, (la + 1) % L_COUNT,
                                       dt == EM_BOOL ? 0 : -3, hi);
                    if (batch && la == 2) a.strides[0] = 0; /* a broadcast batch */
                    em_view out = mkview(&bo, dt, r, po, lo, -9, 9);
                    buf wo = clone(&bo);
                    em_view wov = out;
                    wov.buf = wo.p;
                    assert_int_equal(REF->matmul(NULL, &wov, &a, &b), EM_OK);
                    assert_int_equal(cpu_matmul(CTX, &out, &a, &b), EM_OK);
                    check_same("matmul", &bo, &wo, 1);
                    free_buf(&ba), free_buf(&bb), free_buf(&bo), free_buf(&wo);
                }
    no_fallbacks();
    /* rank 1 (not a shape the contract allows): a clear status */
    float v[4] = {1, 2, 3, 4}, o[1] = {0};
    em_view a;
    memset(&a, 0, sizeof a);
    a.buf = v, a.dtype = EM_F32, a.rank = 1, a.shape[0] = 4, a.strides[0] = 1;
    em_view out = a;
    out.buf = o, out.rank = 0;
    assert_int_equal(cpu_matmul(CTX, &out, &a, &a), EM_ERR_SHAPE);
    out.rank = 1, out.shape[0] = 1;
    assert_int_equal(cpu_matmul(CTX, &out, &a, &a), EM_ERR_SHAPE);
    assert_int_equal(fb_count(CPU_FB_MATMUL), 0);
}

static int setup(void **state) {
    (void)state;
    REF = em_backend_get(EM_BACKEND_REF);
    const em_backend_ops *cpu = em_backend_get_native(EM_BACKEND_CPU);
    if (!REF || !cpu || cpu->open(0, &CTX) != EM_OK) return -1;
    cpu_fallback_reset();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(index_select_cases), cmocka_unit_test(gather_cases),
        cmocka_unit_test(scatter_add_cases),  cmocka_unit_test(scatter_add_embedding),
        cmocka_unit_test(pooling_cases),      cmocka_unit_test(adaptive_cases),
        cmocka_unit_test(layer_norm_cases),   cmocka_unit_test(conv_cases),
        cmocka_unit_test(matmul_cases),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
#endif
