/*
 * nn.cl — convolutions, pooling and their backward kernels on NCHW views of any strides.
 * Built with -DA=<tag>. One work item per output element (a gather: deterministic, no
 * atomics), except the conv weight gradient: one work-group per weight element, its terms
 * split over the items and summed in a tree. Floats accumulate in float (double for f64).
 * The semantics are ref's (src/backends/ref/nn.c, nn_backward.c), line for line.
 */

#define NN_CAT_(a, b) a##b
#define NN_CAT(a, b) NN_CAT_(a, b)
#define TYA NN_CAT(TY_, A)
#define LDA(p, i) NN_CAT(LD_, A)(p, i)
#define STA(p, i, v) NN_CAT(ST_, A)(p, i, v)

#ifdef OCL_FP64
#define NN_F64_f64 1
#else
#define NN_F64_f64 0
#endif
#define NN_F64_f32 0
#define NN_F64_f16 0
#define NN_F64_bf16 0
#if NN_CAT(ISF_, A) && NN_CAT(NN_F64_, A)
typedef double acc_t;
#else
typedef float acc_t;
#endif

/** Parameters: conv (stride, padding, dilation, groups) or pool (kernel, stride, padding,
 *  dilation, count_include_pad), as longs. */
typedef struct nnp_t {
    long v[10];
} nnp_t;
#define SY p.v[0]
#define SX p.v[1]
#define PY p.v[2]
#define PX p.v[3]
#define DY p.v[4]
#define DX p.v[5]
#define GROUPS p.v[6] /* conv */
#define KH p.v[6]     /* pool */
#define KW p.v[7]
#define CIP p.v[8]

/** The multi-index of row-major linear index i over a 4-d view's shape. */
static void coords4(const view_t *v, long i, long *c) {
    for (int d = 3; d >= 0; d--) {
        long q = i / v->shape[d];
        c[d] = i - q * v->shape[d];
        i = q;
    }
}

/** Element offset of [a, b, y, x] in a 4-d view. */
static long off4(const view_t *v, long a, long b, long y, long x) {
    return v->offset + a * v->strides[0] + b * v->strides[1] + y * v->strides[2] +
           x * v->strides[3];
}

#define LD4(buf, v, a, b, y, x) ((acc_t)LDA(buf, off4(&(v), a, b, y, x)))

/** conv2d: out[n, o, oy, ox] = bias[o] + sum over the group's channels and taps. */
__kernel void conv2d_fwd(__global TYA *out, view_t ov, __global const TYA *x, view_t xv,
                         __global const TYA *w, view_t wv, __global const TYA *bias, view_t bv,
                         int has_b, nnp_t p) {
    long c[4];
    coords4(&ov, get_global_id(0), c);
    const long n = c[0], o = c[1], oy = c[2], ox = c[3];
    const long H = xv.shape[2], W = xv.shape[3];
    const long Cg = wv.shape[1], kH = wv.shape[2], kW = wv.shape[3];
    const long Og = ov.shape[1] / GROUPS, c0 = (o / Og) * Cg;
    acc_t acc = has_b ? (acc_t)LDA(bias, bv.offset + o * bv.strides[0]) : (acc_t)0;
    /* the taps kw whose ix = ox*SX - PX + kw*DX lies in [0, W) */
    const long x0 = ox * SX - PX;
    const long kw0 = x0 >= 0 ? 0 : (-x0 + DX - 1) / DX;
    const long kw1 = W - x0 <= 0 ? 0 : min(kW, (W - x0 + DX - 1) / DX);
    const long xs3 = xv.strides[3] * DX, ws3 = wv.strides[3];
    for (long ci = 0; ci < Cg; ci++)
        for (long kh = 0; kh < kH; kh++) {
            const long iy = oy * SY - PY + kh * DY;
            if (iy < 0 || iy >= H) continue;
            const long xb = off4(&xv, n, c0 + ci, iy, x0), wb = off4(&wv, o, ci, kh, 0);
            for (long kw = kw0; kw < kw1; kw++)
                acc += (acc_t)LDA(x, xb + kw * xs3) * (acc_t)LDA(w, wb + kw * ws3);
        }
    STA(out, off4(&ov, n, o, oy, ox), acc);
}

/** conv_transpose2d: the adjoint of conv2d, gathered per output element. */
__kernel void conv_t2d_fwd(__global TYA *out, view_t ov, __global const TYA *x, view_t xv,
                           __global const TYA *w, view_t wv, __global const TYA *bias,
                           view_t bv, int has_b, nnp_t p) {
    long c[4];
    coords4(&ov, get_global_id(0), c);
    const long n = c[0], o = c[1], oy = c[2], ox = c[3];
    const long C = xv.shape[1], H = xv.shape[2], W = xv.shape[3];
    const long Og = wv.shape[1], kH = wv.shape[2], kW = wv.shape[3];
    const long Cg = C / GROUPS, c0 = (o / Og) * Cg, oo = o % Og;
    const long xs3 = xv.strides[3], ws3 = wv.strides[3];
    acc_t acc = has_b ? (acc_t)LDA(bias, bv.offset + o * bv.strides[0]) : (acc_t)0;
    for (long ci = 0; ci < Cg; ci++)
        for (long kh = 0; kh < kH; kh++) {
            const long ty = oy + PY - kh * DY;
            if (ty < 0 || ty % SY != 0 || ty / SY >= H) continue;
            const long xb = off4(&xv, n, c0 + ci, ty / SY, 0), wb = off4(&wv, c0 + ci, oo, kh, 0);
            for (long kw = 0; kw < kW; kw++) {
                const long tx = ox + PX - kw * DX;
                if (tx < 0 || tx % SX != 0 || tx / SX >= W) continue;
                acc += (acc_t)LDA(x, xb + (tx / SX) * xs3) * (acc_t)LDA(w, wb + kw * ws3);
            }
        }
    STA(out, off4(&ov, n, o, oy, ox), acc);
}

/** conv2d_wgrad: gw[o, c, kh, kw] = sum over n, oy, ox of gy * x at the tap; one group per
 *  gw element, items take every L-th (n, oy) row (row sums Kahan-added), partials summed
 *  in a tree. */
__kernel void conv2d_wgrad(__global TYA *gw, view_t gwv, __global const TYA *x, view_t xv,
                           __global const TYA *gy, view_t gyv, nnp_t p, __local acc_t *lv) {
    long c[4];
    coords4(&gwv, get_group_id(0), c);
    const long o = c[0], ci = c[1], kh = c[2], kw = c[3];
    const int lid = get_local_id(0), L = get_local_size(0);
    const long N = gyv.shape[0], OH = gyv.shape[2], OW = gyv.shape[3];
    const long H = xv.shape[2], W = xv.shape[3];
    const long Cg = gwv.shape[1], Og = gwv.shape[0] / GROUPS, c0 = (o / Og) * Cg;
    const long rows = N * OH; /* items take every L-th (n, oy) row of gy */
    /* the ox whose tap ix = ox*SX - PX + kw*DX lies in [0, W) */
    const long xo = kw * DX - PX;
    const long ox0 = xo >= 0 ? 0 : (-xo + SX - 1) / SX;
    const long ox1 = W - xo <= 0 ? 0 : min(OW, (W - xo + SX - 1) / SX);
    acc_t s = 0, comp = 0;
    for (long r = lid; r < rows; r += L) {
        const long n = r / OH, oy = r - n * OH;
        const long iy = oy * SY - PY + kh * DY;
        if (iy < 0 || iy >= H) continue;
        const long gb = off4(&gyv, n, o, oy, 0), gs = gyv.strides[3];
        const long xb = off4(&xv, n, c0 + ci, iy, xo), xs = xv.strides[3] * SX;
        acc_t row = 0; /* a plain sum along the row, Kahan-added to the item's total */
        for (long ox = ox0; ox < ox1; ox++)
            row += (acc_t)LDA(gy, gb + ox * gs) * (acc_t)LDA(x, xb + ox * xs);
        const acc_t y = row - comp, u = s + y;
        comp = isfinite(u) ? (u - s) - y : (acc_t)0;
        s = u;
    }
    lv[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = L / 2; h > 0; h /= 2) {
        if (lid < h) lv[lid] += lv[lid + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) STA(gw, off4(&gwv, o, ci, kh, kw), lv[0]);
}

/** max_pool2d: the max over each dilated window (padding is -inf), a NaN wins (the last
 *  one, as ref), ties keep the first; the index is y * W + x in the input plane. */
__kernel void max_pool2d_fwd(__global TYA *out, view_t ov, __global long *ind, view_t iv,
                             int has_i, __global const TYA *x, view_t xv, nnp_t p) {
    long c[4];
    coords4(&ov, get_global_id(0), c);
    const long n = c[0], ch = c[1], oy = c[2], ox = c[3];
    const long H = xv.shape[2], W = xv.shape[3];
    long y0 = oy * SY - PY, x0 = ox * SX - PX;
    long y1 = min(y0 + (KH - 1) * DY + 1, H), x1 = min(x0 + (KW - 1) * DX + 1, W);
    while (y0 < 0) y0 += DY;
    while (x0 < 0) x0 += DX;
    long best_i = y0 * W + x0;
    acc_t best = -INFINITY;
    for (long iy = y0; iy < y1; iy += DY)
        for (long ix = x0; ix < x1; ix += DX) {
            acc_t v = LD4(x, xv, n, ch, iy, ix);
            if (v > best || isnan(v)) {
                best = v;
                best_i = iy * W + ix;
            }
        }
    STA(out, off4(&ov, n, ch, oy, ox), best);
    if (has_i) ind[off4(&iv, n, ch, oy, ox)] = best_i;
}

/** The divisor of the average window starting at (y0, x0) = (oy*s - p, ox*s - p), or 0 when
 *  it holds no input element; the clipped window goes to *cy0.. (as ref). */
static long avg_window(long y0, long x0, long H, long W, nnp_t p, long *cy0, long *cy1,
                       long *cx0, long *cx1) {
    long y1 = min(y0 + KH, H + PY), x1 = min(x0 + KW, W + PX);
    const long padded = (y1 - y0) * (x1 - x0);
    y0 = max(y0, 0L);
    x0 = max(x0, 0L);
    y1 = min(y1, H);
    x1 = min(x1, W);
    *cy0 = y0, *cy1 = y1, *cx0 = x0, *cx1 = x1;
    if (y0 >= y1 || x0 >= x1) return 0;
    return CIP ? padded : (y1 - y0) * (x1 - x0);
}

/** avg_pool2d: the mean over each window, divisor as PyTorch's (count_include_pad). */
__kernel void avg_pool2d_fwd(__global TYA *out, view_t ov, __global const TYA *x, view_t xv,
                             nnp_t p) {
    long c[4];
    coords4(&ov, get_global_id(0), c);
    const long n = c[0], ch = c[1], oy = c[2], ox = c[3];
    long y0, y1, x0, x1;
    const long div = avg_window(oy * SY - PY, ox * SX - PX, xv.shape[2], xv.shape[3], p, &y0,
                                &y1, &x0, &x1);
    acc_t sum = 0;
    for (long iy = y0; iy < y1; iy++)
        for (long ix = x0; ix < x1; ix++) sum += LD4(x, xv, n, ch, iy, ix);
    STA(out, off4(&ov, n, ch, oy, ox), div > 0 ? sum / (acc_t)div : (acc_t)0);
}

/** avg_pool2d_bwd: gx[n, c, iy, ix] = sum over the windows holding (iy, ix) of gy / divisor. */
__kernel void avg_pool2d_bwd(__global TYA *gx, view_t gxv, __global const TYA *gy, view_t gyv,
                             nnp_t p) {
    long c[4];
    coords4(&gxv, get_global_id(0), c);
    const long n = c[0], ch = c[1], iy = c[2], ix = c[3];
    const long H = gxv.shape[2], W = gxv.shape[3], OH = gyv.shape[2], OW = gyv.shape[3];
    /* windows o with o*s - p <= i < o*s - p + k */
    long t = iy + PY - KH + 1;
    const long oy0 = t <= 0 ? 0 : (t + SY - 1) / SY, oy1 = max(oy0, min((iy + PY) / SY + 1, OH));
    t = ix + PX - KW + 1;
    const long ox0 = t <= 0 ? 0 : (t + SX - 1) / SX, ox1 = max(ox0, min((ix + PX) / SX + 1, OW));
    acc_t acc = 0;
    for (long oy = oy0; oy < oy1; oy++)
        for (long ox = ox0; ox < ox1; ox++) {
            long a0, a1, b0, b1;
            const long d = avg_window(oy * SY - PY, ox * SX - PX, H, W, p, &a0, &a1, &b0, &b1);
            if (d > 0) acc += LD4(gy, gyv, n, ch, oy, ox) / (acc_t)d;
        }
    STA(gx, off4(&gxv, n, ch, iy, ix), acc);
}

/** adaptive_avg_pool2d: bin i of n over a length L spans [floor(i*L/n), ceil((i+1)*L/n)). */
__kernel void adaptive_avg_fwd(__global TYA *out, view_t ov, __global const TYA *x,
                               view_t xv) {
    long c[4];
    coords4(&ov, get_global_id(0), c);
    const long n = c[0], ch = c[1], oy = c[2], ox = c[3];
    const long H = xv.shape[2], W = xv.shape[3], OH = ov.shape[2], OW = ov.shape[3];
    const long y0 = oy * H / OH, y1 = ((oy + 1) * H + OH - 1) / OH;
    const long x0 = ox * W / OW, x1 = ((ox + 1) * W + OW - 1) / OW;
    acc_t sum = 0;
    for (long iy = y0; iy < y1; iy++)
        for (long ix = x0; ix < x1; ix++) sum += LD4(x, xv, n, ch, iy, ix);
    STA(out, off4(&ov, n, ch, oy, ox), sum / (acc_t)((y1 - y0) * (x1 - x0)));
}

/** adaptive_avg_bwd: gx = sum over the bins holding (iy, ix) of gy / the bin's size. */
__kernel void adaptive_avg_bwd(__global TYA *gx, view_t gxv, __global const TYA *gy,
                               view_t gyv) {
    long c[4];
    coords4(&gxv, get_global_id(0), c);
    const long n = c[0], ch = c[1], iy = c[2], ix = c[3];
    const long H = gxv.shape[2], W = gxv.shape[3], OH = gyv.shape[2], OW = gyv.shape[3];
    acc_t acc = 0;
    for (long oy = 0; oy < OH; oy++) {
        const long y0 = oy * H / OH, y1 = ((oy + 1) * H + OH - 1) / OH;
        if (y0 > iy) break;
        if (iy >= y1) continue;
        for (long ox = 0; ox < OW; ox++) {
            const long x0 = ox * W / OW, x1 = ((ox + 1) * W + OW - 1) / OW;
            if (x0 > ix) break;
            if (ix >= x1) continue;
            acc += LD4(gy, gyv, n, ch, oy, ox) / (acc_t)((y1 - y0) * (x1 - x0));
        }
    }
    STA(gx, off4(&gxv, n, ch, iy, ix), acc);
}
