/*
 * nn_backward.c — the reference backend's backward kernels for the autodiff layer: the weight
 * gradient of conv2d and the input gradients of average and adaptive average pooling.
 * Plain loops over NCHW views of any strides, each output element gathered in double.
 */
#include "ref.h"

/** Element offset of [i0, i1, i2, i3] in a 4-d view. */
static inline int64_t off4(const em_view *v, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return v->offset + i0 * v->strides[0] + i1 * v->strides[1] + i2 * v->strides[2] +
           i3 * v->strides[3];
}

/** Element [i0, i1, i2, i3] of a 4-d view as a double. */
static inline double ld4(const em_view *v, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return ref_ld(v->buf, v->dtype, off4(v, i0, i1, i2, i3));
}

/** gw[o, c, kh, kw] = sum over n, oy, ox of gy[n, o, oy, ox] *
 *  x[n, g*Cg + c, oy*s - p + kh*d, ox*s - p + kw*d] (g = o's group; taps outside x add 0):
 *  the adjoint of ref_conv2d with respect to w. */
em_status ref_conv2d_weight_grad(void *ctx, const em_view *gw, const em_view *x,
                                 const em_view *gy, const em_conv_args *a) {
    (void)ctx;
    const int64_t O = gw->shape[0], Cg = gw->shape[1], KH = gw->shape[2], KW = gw->shape[3];
    const int64_t N = gy->shape[0], OH = gy->shape[2], OW = gy->shape[3];
    const int64_t H = x->shape[2], W = x->shape[3];
    const int64_t Og = O / a->groups;
    for (int64_t o = 0; o < O; o++) {
        const int64_t c0 = (o / Og) * Cg;
        for (int64_t c = 0; c < Cg; c++)
            for (int64_t kh = 0; kh < KH; kh++)
                for (int64_t kw = 0; kw < KW; kw++) {
                    double acc = 0;
                    for (int64_t n = 0; n < N; n++)
                        for (int64_t oy = 0; oy < OH; oy++) {
                            const int64_t iy =
                                oy * a->stride[0] - a->padding[0] + kh * a->dilation[0];
                            if (iy < 0 || iy >= H) continue;
                            for (int64_t ox = 0; ox < OW; ox++) {
                                const int64_t ix =
                                    ox * a->stride[1] - a->padding[1] + kw * a->dilation[1];
                                if (ix < 0 || ix >= W) continue;
                                acc += ld4(gy, n, o, oy, ox) * ld4(x, n, c0 + c, iy, ix);
                            }
                        }
                    ref_st(gw->buf, gw->dtype, off4(gw, o, c, kh, kw), acc);
                }
    }
    return EM_OK;
}

/** The divisor ref_avg_pool2d uses for the window starting at (y0, x0) (padded coordinates
 *  already shifted: y0 = oy*s - p), or 0 when the window holds no input element. */
static int64_t avg_divisor(int64_t y0, int64_t x0, int64_t H, int64_t W, const em_pool_args *a) {
    int64_t y1 = y0 + a->kernel[0], x1 = x0 + a->kernel[1];
    if (y1 > H + a->padding[0]) y1 = H + a->padding[0];
    if (x1 > W + a->padding[1]) x1 = W + a->padding[1];
    const int64_t padded = (y1 - y0) * (x1 - x0);
    if (y0 < 0) y0 = 0;
    if (x0 < 0) x0 = 0;
    if (y1 > H) y1 = H;
    if (x1 > W) x1 = W;
    if (y0 >= y1 || x0 >= x1) return 0;
    return a->count_include_pad ? padded : (y1 - y0) * (x1 - x0);
}

/** The range [*lo, *hi) of output positions whose window (start o*s - p, length k) covers
 *  input position i, clipped to [0, n). */
static void covering(int64_t i, int64_t k, int64_t s, int64_t p, int64_t n, int64_t *lo,
                     int64_t *hi) {
    /* o*s - p <= i  and  i < o*s - p + k  <=>  (i + p - k) / s < o <= (i + p) / s */
    const int64_t t = i + p - k + 1; /* o >= ceil(t / s) */
    int64_t a = t <= 0 ? 0 : (t + s - 1) / s;
    int64_t b = (i + p) / s + 1; /* i + p >= 0 */
    if (b > n) b = n;
    *lo = a;
    *hi = a < b ? b : a;
}

/** gx[n, c, iy, ix] = sum over the windows (oy, ox) that hold (iy, ix) of
 *  gy[n, c, oy, ox] / divisor(oy, ox): the adjoint of ref_avg_pool2d. */
em_status ref_avg_pool2d_backward(void *ctx, const em_view *gx, const em_view *gy,
                                  const em_pool_args *a) {
    (void)ctx;
    const int64_t N = gx->shape[0], C = gx->shape[1], H = gx->shape[2], W = gx->shape[3];
    const int64_t OH = gy->shape[2], OW = gy->shape[3];
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t iy = 0; iy < H; iy++) {
                int64_t oy0, oy1;
                covering(iy, a->kernel[0], a->stride[0], a->padding[0], OH, &oy0, &oy1);
                for (int64_t ix = 0; ix < W; ix++) {
                    int64_t ox0, ox1;
                    covering(ix, a->kernel[1], a->stride[1], a->padding[1], OW, &ox0, &ox1);
                    double acc = 0;
                    for (int64_t oy = oy0; oy < oy1; oy++)
                        for (int64_t ox = ox0; ox < ox1; ox++) {
                            const int64_t d = avg_divisor(oy * a->stride[0] - a->padding[0],
                                                          ox * a->stride[1] - a->padding[1], H,
                                                          W, a);
                            if (d > 0) acc += ld4(gy, n, c, oy, ox) / (double)d;
                        }
                    ref_st(gx->buf, gx->dtype, off4(gx, n, c, iy, ix), acc);
                }
            }
    return EM_OK;
}

/** gx[n, c, iy, ix] = sum over the adaptive bins (oy, ox) that hold (iy, ix) of
 *  gy[n, c, oy, ox] / the bin's size; bin i of n over a length L spans
 *  [floor(i*L/n), ceil((i+1)*L/n)), as ref_adaptive_avg_pool2d. */
em_status ref_adaptive_avg_pool2d_backward(void *ctx, const em_view *gx, const em_view *gy) {
    (void)ctx;
    const int64_t N = gx->shape[0], C = gx->shape[1], H = gx->shape[2], W = gx->shape[3];
    const int64_t OH = gy->shape[2], OW = gy->shape[3];
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t iy = 0; iy < H; iy++)
                for (int64_t ix = 0; ix < W; ix++) {
                    double acc = 0;
                    for (int64_t oy = 0; oy < OH; oy++) {
                        const int64_t y0 = oy * H / OH, y1 = ((oy + 1) * H + OH - 1) / OH;
                        if (y0 > iy) break; /* bin starts only grow */
                        if (iy >= y1) continue;
                        for (int64_t ox = 0; ox < OW; ox++) {
                            const int64_t x0 = ox * W / OW, x1 = ((ox + 1) * W + OW - 1) / OW;
                            if (x0 > ix) break;
                            if (ix >= x1) continue;
                            acc += ld4(gy, n, c, oy, ox) / (double)((y1 - y0) * (x1 - x0));
                        }
                    }
                    ref_st(gx->buf, gx->dtype, off4(gx, n, c, iy, ix), acc);
                }
    return EM_OK;
}
