/*
 * test_cpu_conv_gemm.c — the cpu convolutions' im2col + GEMM method (EMBER_CPU_CONV=gemm, set
 * here before the first convolution) against ref's kernels on the same operands, at every
 * level this build and CPU have, f32 and f64, with and without bias:
 *   - batches of several images a GEMM (small planes: every image in one chunk; larger: chunks
 *     of several images and a shorter last chunk), one image a GEMM (wide planes);
 *   - the weight gradient summed over chunks (an f32 reduction of about 10^4 terms a weight),
 *     each chunk's GEMMs taking blocks of about 256 columns (whole images: 4 of 8x8, with a
 *     shorter last block; one image where planes are larger), summed into the chunk's sums;
 *   - im2col's long-copy path (unit strides, output rows as wide as x's: 'same' padding, with
 *     dilation) and its general path (strides 2, no padding, asymmetric kernels);
 *   - conv_transpose2d with unit strides as a conv of the flipped kernel (also with negative
 *     equivalent padding) and with strides 2 (GEMM + col2im);
 *   - groups, pointwise (1x1) kernels, odd sizes;
 *   - no fallback to ref.
 */
#include "conv_check.h"

static void conv_gemm_cases(void **state) {
    (void)state;
    const cc cases[] = {
        {{16, 8, 8, 8}, {16, 8, 3, 3}, 1, 1, 1, 1, 0},    /* every image in one chunk, 'same' */
        {{11, 4, 8, 8}, {6, 4, 3, 3}, 1, 1, 1, 1, 0},     /* wgrad blocks of 4, 4 and 3 images */
        {{12, 3, 30, 30}, {5, 3, 3, 3}, 1, 1, 1, 1, 0},   /* chunks of 5, 5, 2; wgrad: 2 chunks */
        {{9, 4, 7, 5}, {6, 2, 3, 3}, 2, 1, 1, 1, 0},      /* groups, odd sizes */
        {{7, 3, 9, 11}, {4, 3, 3, 3}, 1, 1, 2, 2, 0},     /* dilation, 'same' */
        {{6, 4, 9, 8}, {6, 4, 3, 2}, 1, 2, 1, 1, 0},      /* strides 2, asymmetric kernel */
        /* strided im2col through the flat layout (row phases, dilation across them), and
           stride 3 (no shuffle split) */
        {{3, 5, 13, 12}, {4, 5, 3, 3}, 1, 2, 2, 3, 0},
        {{2, 6, 17, 16}, {8, 3, 3, 3}, 2, 3, 1, 1, 0},
        {{5, 3, 10, 9}, {4, 3, 3, 3}, 1, 1, 0, 1, 0},     /* no padding: general im2col */
        {{8, 6, 9, 9}, {8, 6, 1, 1}, 1, 2, 0, 1, 0},      /* 1x1 stride 2 (a shortcut) */
        {{10, 6, 5, 7}, {4, 6, 1, 1}, 1, 1, 0, 1, 0},     /* pointwise, batched */
        {{2, 3, 70, 70}, {4, 3, 1, 1}, 1, 1, 0, 1, 0},    /* pointwise, one image a GEMM */
        {{3, 2, 9, 9}, {3, 2, 3, 3}, 1, 1, 3, 1, 0},      /* convt: equivalent padding -1 */
        {{1, 5, 6, 6}, {3, 5, 3, 3}, 1, 1, 1, 1, 0},      /* one image */
        /* the weight gradient's GEMM as col @ gy^T (288 taps a row, 32 channels a column;
           the cases above with few taps keep gy @ col^T: wgrad_transposed) */
        {{4, 32, 8, 8}, {32, 32, 3, 3}, 1, 1, 1, 1, 0},
    };
    run_conv_cases(cases, (int)(sizeof cases / sizeof cases[0]));
}

int main(void) {
    setenv("EMBER_CPU_CONV", "gemm", 1); /* read once, at the first convolution */
    const struct CMUnitTest tests[] = {cmocka_unit_test(conv_gemm_cases)};
    return cmocka_run_group_tests(tests, setup, NULL);
}
