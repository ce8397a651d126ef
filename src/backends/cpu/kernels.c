/* kernels.c — the table of one instruction-set level's kernels (compiled once per level with
 * the per-level files, see isa.h): cpu_kernels_portable, cpu_kernels_avx2, ... */
#include "cpu.h"

#define CONV_K(name) CPU_K(name)

const cpu_kernels CPU_K(cpu_kernels) = {
    .isa = CPU_ISA_LEVEL,
    .unary = CPU_K(cpu_unary),
    .binary = CPU_K(cpu_binary),
    .binary_scalar = CPU_K(cpu_binary_scalar),
    .where = CPU_K(cpu_where),
    .reduce = CPU_K(cpu_reduce),
    .softmax = CPU_K(cpu_softmax),
    .conv2d = CONV_K(cpu_conv2d),
    .conv2d_weight_grad = CONV_K(cpu_conv2d_weight_grad),
    .conv_transpose2d = CONV_K(cpu_conv_transpose2d),
    .max_pool2d = CPU_K(cpu_max_pool2d),
    .avg_pool2d = CPU_K(cpu_avg_pool2d),
    .avg_pool2d_backward = CPU_K(cpu_avg_pool2d_backward),
    .layer_norm = CPU_K(cpu_layer_norm),
    .adaptive_avg_pool2d = CPU_K(cpu_adaptive_avg_pool2d),
    .adaptive_avg_pool2d_backward = CPU_K(cpu_adaptive_avg_pool2d_backward),
    .gemm = CPU_K(cpu_gemm_kernel),
    .gemm_mr = CPU_GEMM_MR,
    .gemm_nr = CPU_GEMM_NV * CPU_GEMM_VB / 4,
    .cumsum = CPU_K(cpu_cumsum),
    .unary_backward = CPU_K(cpu_unary_backward),
    .adam_step = CPU_K(cpu_adam_step),
    .batch_norm = CPU_K(cpu_batch_norm),
    .batch_norm_backward = CPU_K(cpu_batch_norm_backward),
    .group_norm = CPU_K(cpu_group_norm),
    .rms_norm = CPU_K(cpu_rms_norm),
    .cumulative = CPU_K(cpu_cumulative),
    .sdpa = CPU_K(cpu_sdpa),
    .sdpa_backward = CPU_K(cpu_sdpa_backward),
};
