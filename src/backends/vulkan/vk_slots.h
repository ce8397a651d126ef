/*
 * vk_slots.h — the kernel slots of em_vulkan_backend_ops beyond elementwise.c's, one macro a
 * family (vulkan.c puts VK_SLOTS in the table). A family's macro lists the slots its file
 * implements; a slot left out is NULL, and the core composes it where it can.
 */
#ifndef EMBER_VK_SLOTS_H
#define EMBER_VK_SLOTS_H

/* random.c */
#define VK_SLOTS_RANDOM
/* reduce.c: reduce, cumsum, cumulative, softmax */
#define VK_SLOTS_REDUCE
/* matmul.c */
#define VK_SLOTS_MATMUL
/* index.c: gather, scatter_add, index_select, sort */
#define VK_SLOTS_INDEX
/* nn.c: convolutions, pooling and their backward kernels, layer_norm */
#define VK_SLOTS_NN
/* norm.c: batch_norm (+ backward), group_norm, rms_norm */
#define VK_SLOTS_NORM
/* fused.c: unary_backward, adam_step */
#define VK_SLOTS_FUSED
/* quant.c: quantize, dequantize, qmatmul */
#define VK_SLOTS_QUANT

#define VK_SLOTS                                                                              \
    VK_SLOTS_RANDOM VK_SLOTS_REDUCE VK_SLOTS_MATMUL VK_SLOTS_INDEX VK_SLOTS_NN VK_SLOTS_NORM \
        VK_SLOTS_FUSED VK_SLOTS_QUANT

#endif /* EMBER_VK_SLOTS_H */
