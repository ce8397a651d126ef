/*
 * vk_slots.h — the kernel slots of em_vulkan_backend_ops beyond elementwise.c's, one macro a
 * family (vulkan.c puts VK_SLOTS in the table). A family's macro lists the slots its file
 * implements; a slot left out is NULL, and the core composes it where it can.
 */
#ifndef EMBER_VK_SLOTS_H
#define EMBER_VK_SLOTS_H

/* random.c */
#define VK_SLOTS_RANDOM .random = vk_random,
/* reduce.c: reduce, cumsum, cumulative, softmax */
#define VK_SLOTS_REDUCE .reduce = vk_reduce, .cumsum = vk_cumsum, .cumulative = vk_cumulative, .softmax = vk_softmax,
/* matmul.c */
#define VK_SLOTS_MATMUL .matmul = vk_matmul,
/* index.c: gather, scatter_add, index_select, sort */
#define VK_SLOTS_INDEX                                                                        \
    .gather = vk_gather, .scatter_add = vk_scatter_add, .index_select = vk_index_select,      \
        .sort = vk_sort,
/* nn.c: convolutions, pooling and their backward kernels, layer_norm */
#define VK_SLOTS_NN                                                                           \
    .conv2d = vk_conv2d, .conv_transpose2d = vk_conv_transpose2d, .max_pool2d = vk_max_pool2d, \
        .avg_pool2d = vk_avg_pool2d, .adaptive_avg_pool2d = vk_adaptive_avg_pool2d,            \
        .conv2d_weight_grad = vk_conv2d_weight_grad,                                           \
        .avg_pool2d_backward = vk_avg_pool2d_backward,                                         \
        .adaptive_avg_pool2d_backward = vk_adaptive_avg_pool2d_backward,                       \
        .layer_norm = vk_layer_norm,
/* norm.c: batch_norm (+ backward), group_norm, rms_norm */
#define VK_SLOTS_NORM                                                                         \
    .batch_norm = vk_batch_norm, .batch_norm_backward = vk_batch_norm_backward,               \
        .group_norm = vk_group_norm, .rms_norm = vk_rms_norm,
/* fused.c: unary_backward, adam_step */
#define VK_SLOTS_FUSED .unary_backward = vk_unary_backward, .adam_step = vk_adam_step,
/* quant.c: quantize, dequantize, qmatmul */
#define VK_SLOTS_QUANT .quantize = vk_quantize, .dequantize = vk_dequantize, .qmatmul = vk_qmatmul,

#define VK_SLOTS                                                                              \
    VK_SLOTS_RANDOM VK_SLOTS_REDUCE VK_SLOTS_MATMUL VK_SLOTS_INDEX VK_SLOTS_NN VK_SLOTS_NORM \
        VK_SLOTS_FUSED VK_SLOTS_QUANT

#endif /* EMBER_VK_SLOTS_H */
