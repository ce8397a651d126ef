/* conv_shim.c — bench/conv_vs_torch.py's door to the cpu backend's three convolution kernels
 * (conv2d, conv2d_weight_grad, conv_transpose2d), which the public API reaches only through
 * autodiff: built by the script into a small shared library linked with libember.so. The
 * buffers are the caller's (the cpu backend's buffers are host pointers); every tensor is f32
 * and contiguous. */
#include <ember/backend.h>
#include <string.h>

static em_view view_of(float *p, const int64_t s[4]) {
    em_view v;
    memset(&v, 0, sizeof v);
    v.buf = p;
    v.dtype = EM_F32;
    v.rank = 4;
    int64_t st = 1;
    for (int i = 3; i >= 0; i--) {
        v.shape[i] = s[i];
        v.strides[i] = st;
        st *= s[i];
    }
    return v;
}

/* op 0: out = conv2d(a, b); 1: out = conv2d_weight_grad(x = a, gy = b); 2: out =
 * conv_transpose2d(a, b) (the input gradient of a conv2d with weights b, given gy = a). */
int shim_conv(int op, const char *backend, float *out, const int64_t *os, float *a,
              const int64_t *as, float *b, const int64_t *bs, const int64_t *stride,
              const int64_t *pad, const int64_t *dil, int64_t groups) {
    const em_backend_ops *ops =
        em_backend_get(strcmp(backend, "ref") == 0 ? EM_BACKEND_REF : EM_BACKEND_CPU);
    void *ctx = NULL;
    if (!ops || ops->open(0, &ctx) != EM_OK) return -1;
    em_conv_args ca;
    memset(&ca, 0, sizeof ca);
    for (int i = 0; i < 2; i++) {
        ca.stride[i] = stride[i];
        ca.padding[i] = pad[i];
        ca.dilation[i] = dil[i];
    }
    ca.groups = groups;
    if (op == 2) /* what restores the output's size */
        for (int i = 0; i < 2; i++)
            ca.output_padding[i] = os[2 + i] - ((as[2 + i] - 1) * stride[i] - 2 * pad[i] +
                                                dil[i] * (bs[2 + i] - 1) + 1);
    em_view vo = view_of(out, os), va = view_of(a, as), vb = view_of(b, bs);
    if (op == 0) return (int)ops->conv2d(ctx, &vo, &va, &vb, NULL, &ca);
    if (op == 1) return (int)ops->conv2d_weight_grad(ctx, &vo, &va, &vb, &ca);
    return (int)ops->conv_transpose2d(ctx, &vo, &va, &vb, NULL, &ca);
}
