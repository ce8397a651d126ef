/*
 * matmul.c — the Vulkan backend's batched matrix product (shaders/matmul.comp, one variant
 * per numeric dtype): out [..., m, n] = a [..., m, k] @ b [..., k, n] with the batch dims
 * already broadcast (stride 0) by the core. Inputs may have any strides.
 */
#include <stdio.h>
#include <string.h>

#include "vk_internal.h"

#define MM_BT 32 /* the block of out a workgroup computes: matmul.comp's BT x BT */
#define MM_MAX_GROUPS 65535

/* The batch dims (all but the last two) of v as a view with out's batch shape. */
static vk_view_arg batch_view(const em_view *v, const em_view *out) {
    em_view b = *v;
    b.rank = out->rank - 2;
    for (int d = 0; d < b.rank; d++) b.shape[d] = out->shape[d];
    return vk_view(&b);
}

static uint32_t groups_of(int64_t n) {
    return n > MM_MAX_GROUPS ? MM_MAX_GROUPS : (uint32_t)n;
}

em_status vk_matmul(void *ctx, const em_view *out, const em_view *a, const em_view *b) {
    vk_dev *d = ctx;
    em_status s = vk_check_dtype(d, "matmul", a->dtype);
    if (s == EM_OK) s = vk_check_dtype(d, "matmul", b->dtype);
    if (s == EM_OK) s = vk_check_dtype(d, "matmul", out->dtype);
    if (s != EM_OK) return s;
    if (a->dtype == EM_BOOL || b->dtype != a->dtype || out->dtype != a->dtype)
        return em_backend_set_error(EM_ERR_UNSUPPORTED, "vulkan matmul: dtypes %s @ %s -> %s",
                                    em_dtype_name(a->dtype), em_dtype_name(b->dtype),
                                    em_dtype_name(out->dtype));
    const int r = out->rank;
    const int64_t m = out->shape[r - 2], n = out->shape[r - 1], k = a->shape[r - 1];
    int64_t batches = 1;
    for (int i = 0; i < r - 2; i++) batches *= out->shape[i];
    if (m == 0 || n == 0 || batches == 0) return EM_OK;
    vk_params p;
    memset(&p, 0, sizeof p);
    p.v[0] = batch_view(out, out);
    p.v[1] = batch_view(a, out);
    p.v[2] = batch_view(b, out);
    p.i[0] = (int32_t)m;
    p.i[1] = (int32_t)n;
    p.i[2] = (int32_t)k;
    p.i[3] = (int32_t)a->strides[r - 2];
    p.i[4] = (int32_t)a->strides[r - 1];
    p.i[5] = (int32_t)b->strides[r - 2];
    p.i[6] = (int32_t)b->strides[r - 1];
    p.i[7] = (int32_t)out->strides[r - 2];
    p.i[8] = (int32_t)out->strides[r - 1];
    p.i[9] = (int32_t)batches;
    const uint32_t groups[3] = {groups_of((n + MM_BT - 1) / MM_BT),
                                groups_of((m + MM_BT - 1) / MM_BT), groups_of(batches)};
    char name[32];
    snprintf(name, sizeof name, "matmul.%s", vk_dtype_tag(a->dtype));
    vk_buf *bufs[3] = {vk_vbuf(out), vk_vbuf(a), vk_vbuf(b)};
    return vk_launch(d, name, groups, &p, 3, bufs);
}
