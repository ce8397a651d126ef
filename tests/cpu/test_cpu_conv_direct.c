/*
 * test_cpu_conv_direct.c — the cpu convolutions' direct kernels (EMBER_CPU_CONV=direct, set
 * here before the first convolution unless the environment sets it: the test is also run with
 * EMBER_CPU_CONV=auto, the shape rules) against ref's kernels on the same operands, at every
 * level this build and CPU have (each level has its own vector width and register tiles),
 * f32 and f64, with and without bias:
 *   - conv2d: output channels not a multiple of the channel block (1..OBMAX-1 left over),
 *     output rows not a multiple of the vector width, rows narrower than a vector (partial
 *     slots) and narrow planes (slots across rows, 8x8), strides 2 and 3, dilation,
 *     padding 0..2, asymmetric and 5x5 kernels, groups, batch 1;
 *   - conv_transpose2d with unit strides (the flipped kernel) and with strides (one direct conv
 *     an output phase, scattered): strides 2 and 3, kernels smaller than the stride (phases
 *     without taps), dilation with stride (gcd > 1), output padding, groups;
 *   - x in the row layout and in the flat layout (rows of exactly OW elements a tap column,
 *     vectors across rows), each chosen by the shape rule under EMBER_CPU_CONV=direct and
 *     forced on every case by ctest's runs with direct-rows and direct-flat;
 *   - the avx512 copy's masked kernels (x read in place, taps in the padding masked off):
 *     planes of up to 256 outputs with a partial last slot or an odd count of slots, rows
 *     fewer than x's, 1x1 kernels with strides 1, 2 and 3 (x subsampled a chunk at a time);
 *   - the weight gradient (direct over the batch);
 *   - no fallback to ref.
 */
#include "conv_check.h"

static void conv_direct_cases(void **state) {
    (void)state;
    const cc cases[] = {
        {{4, 16, 32, 32}, {16, 16, 3, 3}, 1, 1, 1, 1, 0},  /* the ResNet's stage 1 */
        {{3, 16, 32, 32}, {32, 16, 3, 3}, 1, 2, 1, 1, 1},  /* stage 2's first conv, /2 */
        {{2, 32, 8, 8}, {19, 32, 3, 3}, 1, 1, 1, 1, 0},    /* 8x8: slots across rows; 19 = 4*4+3 */
        {{1, 3, 9, 13}, {5, 3, 3, 3}, 1, 1, 1, 1, 0},      /* batch 1, 5 channels, odd rows */
        {{2, 4, 6, 6}, {7, 4, 3, 3}, 1, 1, 1, 1, 0},       /* rows narrower than a vector */
        {{2, 6, 11, 17}, {14, 3, 3, 3}, 2, 1, 2, 2, 0},    /* groups (7 each), dilation, pad 2 */
        {{3, 5, 19, 21}, {6, 5, 3, 2}, 1, 2, 1, 1, 1},     /* stride 2, asymmetric kernel */
        {{2, 4, 20, 23}, {9, 4, 3, 3}, 1, 3, 0, 1, 2},     /* stride 3, no padding */
        {{2, 3, 14, 15}, {4, 3, 2, 2}, 1, 3, 0, 1, 0},     /* convt: phases without taps */
        {{2, 4, 17, 16}, {6, 2, 3, 3}, 2, 2, 2, 2, 1},     /* stride 2 with dilation 2, groups */
        {{2, 3, 12, 12}, {10, 3, 5, 5}, 1, 1, 2, 1, 0},    /* 5x5 */
        {{2, 3, 12, 12}, {3, 3, 5, 5}, 1, 2, 2, 1, 1},     /* 5x5 /2 */
        {{3, 2, 9, 9}, {3, 2, 3, 3}, 1, 1, 3, 1, 0},       /* convt: equivalent padding -1 */
        {{2, 8, 13, 13}, {8, 8, 3, 3}, 1, 2, 3, 1, 1},     /* convt /2: negative phase padding */
        /* the avx512 copy's masked kernels (planes of up to 256 outputs, x read in place) */
        {{2, 8, 16, 16}, {11, 8, 3, 3}, 1, 1, 1, 1, 0},    /* 16x16: 256 outputs, 11 = 8+3 */
        {{2, 5, 7, 7}, {9, 5, 3, 3}, 1, 1, 1, 1, 0},       /* 7x7: a partial slot, 4 slots */
        {{2, 3, 9, 9}, {4, 3, 3, 3}, 1, 1, 2, 2, 0},       /* 9x9: 6 slots, dilation 2 */
        {{2, 4, 10, 12}, {6, 4, 5, 3}, 1, 1, 1, 1, 0},     /* 5x3: OH = 8 < H, OW = W */
        {{1, 8, 4, 4}, {5, 8, 3, 3}, 1, 1, 1, 1, 0},       /* 4x4: one slot, most taps masked */
        {{2, 16, 16, 16}, {24, 16, 1, 1}, 1, 2, 0, 1, 0},  /* 1x1 /2 (a shortcut): subsampled */
        {{2, 6, 13, 11}, {10, 3, 1, 1}, 2, 3, 0, 1, 0},    /* 1x1 /3, groups, 5x4 outputs */
        {{2, 4, 9, 9}, {7, 4, 1, 1}, 1, 1, 0, 1, 0},       /* 1x1, unit stride: x in place */
    };
    run_conv_cases(cases, (int)(sizeof cases / sizeof cases[0]));
}

int main(void) {
    setenv("EMBER_CPU_CONV", "direct", 0); /* read once, at the first convolution */
    const struct CMUnitTest tests[] = {cmocka_unit_test(conv_direct_cases)};
    return cmocka_run_group_tests(tests, setup, NULL);
}
