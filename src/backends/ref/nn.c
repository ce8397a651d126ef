/*
 * nn.c — the reference backend's neural kernels: convolution (direct and transposed),
 * pooling (max with indices, average, adaptive average) and layer normalization.
 * Plain loops over NCHW views of any strides, accumulating in double.
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

/** Element i of an optional 1-d view (0 when the view is NULL). */
static inline double ld1(const em_view *v, int64_t i) {
    return v ? ref_ld(v->buf, v->dtype, v->offset + i * v->strides[0]) : 0.0;
}

/** out[n, o, y, x] = bias[o] + sum over the group's channels and the kernel taps of
 *  x[n, c, y*s - p + kh*d, x*s - p + kw*d] * w[o, c - g*Cg, kh, kw]; taps outside x add 0. */
em_status ref_conv2d(void *ctx, const em_view *out, const em_view *x, const em_view *w,
                     const em_view *bias, const em_conv_args *a) {
    (void)ctx;
    const int64_t N = out->shape[0], O = out->shape[1], OH = out->shape[2], OW = out->shape[3];
    const int64_t H = x->shape[2], W = x->shape[3];
    const int64_t Cg = w->shape[1], KH = w->shape[2], KW = w->shape[3];
    const int64_t Og = O / a->groups;
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < O; o++) {
            const int64_t c0 = (o / Og) * Cg;
            const double b = ld1(bias, o);
            for (int64_t oy = 0; oy < OH; oy++)
                for (int64_t ox = 0; ox < OW; ox++) {
                    double acc = b;
                    for (int64_t c = 0; c < Cg; c++)
                        for (int64_t kh = 0; kh < KH; kh++) {
                            int64_t iy = oy * a->stride[0] - a->padding[0] +
                                         kh * a->dilation[0];
                            if (iy < 0 || iy >= H) continue;
                            for (int64_t kw = 0; kw < KW; kw++) {
                                int64_t ix = ox * a->stride[1] - a->padding[1] +
                                             kw * a->dilation[1];
                                if (ix < 0 || ix >= W) continue;
                                acc += ld4(x, n, c0 + c, iy, ix) * ld4(w, o, c, kh, kw);
                            }
                        }
                    ref_st(out->buf, out->dtype, off4(out, n, o, oy, ox), acc);
                }
        }
    return EM_OK;
}

/** The adjoint of conv2d: out[n, o, y, x] = bias[o] + sum of x[n, c, i, j] * w[c, o', kh, kw]
 *  over the group's input channels c and taps with i*s - p + kh*d == y (likewise for x),
 *  where o' = o mod (O / groups). Computed as a gather per output element. */
em_status ref_conv_transpose2d(void *ctx, const em_view *out, const em_view *x,
                               const em_view *w, const em_view *bias, const em_conv_args *a) {
    (void)ctx;
    const int64_t N = out->shape[0], O = out->shape[1], OH = out->shape[2], OW = out->shape[3];
    const int64_t C = x->shape[1], H = x->shape[2], W = x->shape[3];
    const int64_t Og = w->shape[1], KH = w->shape[2], KW = w->shape[3];
    const int64_t Cg = C / a->groups;
    const int64_t sy = a->stride[0], sx = a->stride[1];
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < O; o++) {
            const int64_t c0 = (o / Og) * Cg, oo = o % Og;
            const double b = ld1(bias, o);
            for (int64_t oy = 0; oy < OH; oy++)
                for (int64_t ox = 0; ox < OW; ox++) {
                    double acc = b;
                    for (int64_t c = 0; c < Cg; c++)
                        for (int64_t kh = 0; kh < KH; kh++) {
                            int64_t ty = oy + a->padding[0] - kh * a->dilation[0];
                            if (ty < 0 || ty % sy != 0 || ty / sy >= H) continue;
                            for (int64_t kw = 0; kw < KW; kw++) {
                                int64_t tx = ox + a->padding[1] - kw * a->dilation[1];
                                if (tx < 0 || tx % sx != 0 || tx / sx >= W) continue;
                                acc += ld4(x, n, c0 + c, ty / sy, tx / sx) *
                                       ld4(w, c0 + c, oo, kh, kw);
                            }
                        }
                    ref_st(out->buf, out->dtype, off4(out, n, o, oy, ox), acc);
                }
        }
    return EM_OK;
}

/** Max over each (dilated) window, padding counting as -inf, as PyTorch's CPU kernel: a NaN
 *  always wins, ties keep the first; the index (flat y*W + x in the input plane) starts at the
 *  window's first in-bounds tap. */
em_status ref_max_pool2d(void *ctx, const em_view *out, const em_view *indices,
                         const em_view *x, const em_pool_args *a) {
    (void)ctx;
    const int64_t N = out->shape[0], C = out->shape[1], OH = out->shape[2], OW = out->shape[3];
    const int64_t H = x->shape[2], W = x->shape[3];
    const int64_t dy = a->dilation[0], dx = a->dilation[1];
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t oy = 0; oy < OH; oy++)
                for (int64_t ox = 0; ox < OW; ox++) {
                    int64_t y0 = oy * a->stride[0] - a->padding[0];
                    int64_t x0 = ox * a->stride[1] - a->padding[1];
                    int64_t y1 = y0 + (a->kernel[0] - 1) * dy + 1;
                    int64_t x1 = x0 + (a->kernel[1] - 1) * dx + 1;
                    if (y1 > H) y1 = H;
                    if (x1 > W) x1 = W;
                    while (y0 < 0) y0 += dy;
                    while (x0 < 0) x0 += dx;
                    int64_t best_i = y0 * W + x0;
                    double best = -INFINITY;
                    for (int64_t iy = y0; iy < y1; iy += dy)
                        for (int64_t ix = x0; ix < x1; ix += dx) {
                            double v = ld4(x, n, c, iy, ix);
                            if (v > best || v != v) {
                                best = v;
                                best_i = iy * W + ix;
                            }
                        }
                    ref_st(out->buf, out->dtype, off4(out, n, c, oy, ox), best);
                    if (indices)
                        ref_sti(indices->buf, indices->dtype, off4(indices, n, c, oy, ox), best_i);
                }
    return EM_OK;
}

/** Mean over each window, as PyTorch: the divisor is the window clipped to the padded input
 *  when count_include_pad, else the window clipped to the input itself; a window with no
 *  input element gives 0 (it cannot occur with PyTorch's output sizes). */
em_status ref_avg_pool2d(void *ctx, const em_view *out, const em_view *x,
                         const em_pool_args *a) {
    (void)ctx;
    const int64_t N = out->shape[0], C = out->shape[1], OH = out->shape[2], OW = out->shape[3];
    const int64_t H = x->shape[2], W = x->shape[3];
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t oy = 0; oy < OH; oy++)
                for (int64_t ox = 0; ox < OW; ox++) {
                    int64_t y0 = oy * a->stride[0] - a->padding[0];
                    int64_t x0 = ox * a->stride[1] - a->padding[1];
                    int64_t y1 = y0 + a->kernel[0], x1 = x0 + a->kernel[1];
                    if (y1 > H + a->padding[0]) y1 = H + a->padding[0];
                    if (x1 > W + a->padding[1]) x1 = W + a->padding[1];
                    const int64_t padded = (y1 - y0) * (x1 - x0);
                    if (y0 < 0) y0 = 0;
                    if (x0 < 0) x0 = 0;
                    if (y1 > H) y1 = H;
                    if (x1 > W) x1 = W;
                    double sum = 0;
                    for (int64_t iy = y0; iy < y1; iy++)
                        for (int64_t ix = x0; ix < x1; ix++)
                            sum += ld4(x, n, c, iy, ix);
                    int64_t count = a->count_include_pad ? padded : (y1 - y0) * (x1 - x0);
                    ref_st(out->buf, out->dtype, off4(out, n, c, oy, ox),
                           y0 < y1 && x0 < x1 ? sum / (double)count : 0.0);
                }
    return EM_OK;
}

/** Mean over PyTorch's adaptive bins: bin i of n over a length L spans
 *  [floor(i*L/n), ceil((i+1)*L/n)). */
em_status ref_adaptive_avg_pool2d(void *ctx, const em_view *out, const em_view *x) {
    (void)ctx;
    const int64_t N = out->shape[0], C = out->shape[1], OH = out->shape[2], OW = out->shape[3];
    const int64_t H = x->shape[2], W = x->shape[3];
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t oy = 0; oy < OH; oy++) {
                const int64_t y0 = oy * H / OH, y1 = ((oy + 1) * H + OH - 1) / OH;
                for (int64_t ox = 0; ox < OW; ox++) {
                    const int64_t x0 = ox * W / OW, x1 = ((ox + 1) * W + OW - 1) / OW;
                    double sum = 0;
                    for (int64_t iy = y0; iy < y1; iy++)
                        for (int64_t ix = x0; ix < x1; ix++)
                            sum += ld4(x, n, c, iy, ix);
                    ref_st(out->buf, out->dtype, off4(out, n, c, oy, ox),
                           sum / (double)((y1 - y0) * (x1 - x0)));
                }
            }
    return EM_OK;
}

/** Each row of x ([rows, norm_numel], 2-d) normalized to zero mean and unit (biased)
 *  variance, (x - mean) / sqrt(var + eps), then scaled by weight and shifted by bias (1-d). */
em_status ref_layer_norm(void *ctx, const em_view *out, const em_view *x, const em_view *weight,
                         const em_view *bias, int64_t norm_numel, double eps) {
    (void)ctx;
    const int64_t rows = norm_numel > 0 ? ref_numel(x) / norm_numel : 0;
    const int64_t xs0 = x->strides[0], xs1 = x->strides[1];
    const int64_t os0 = out->strides[0], os1 = out->strides[1];
    for (int64_t r = 0; r < rows; r++) {
        const int64_t xb = x->offset + r * xs0, ob = out->offset + r * os0;
        double mean = 0, var = 0;
        for (int64_t j = 0; j < norm_numel; j++) mean += ref_ld(x->buf, x->dtype, xb + j * xs1);
        mean /= (double)norm_numel;
        for (int64_t j = 0; j < norm_numel; j++) {
            double d = ref_ld(x->buf, x->dtype, xb + j * xs1) - mean;
            var += d * d;
        }
        var /= (double)norm_numel;
        const double inv = 1.0 / sqrt(var + eps);
        for (int64_t j = 0; j < norm_numel; j++) {
            double v = (ref_ld(x->buf, x->dtype, xb + j * xs1) - mean) * inv;
            if (weight)
                v *= ref_ld(weight->buf, weight->dtype, weight->offset + j * weight->strides[0]);
            if (bias) v += ref_ld(bias->buf, bias->dtype, bias->offset + j * bias->strides[0]);
            ref_st(out->buf, out->dtype, ob + j * os1, v);
        }
    }
    return EM_OK;
}
