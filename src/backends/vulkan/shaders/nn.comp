/*
 * nn.comp — convolutions, pooling, their backward kernels and layer normalization, on NCHW
 * views of any strides. Built with -DA=<float tag> and one K_* define (nn.list). Ported from
 * the OpenCL backend's nn.cl / reduce.cl; the semantics are ref's (src/backends/ref/nn.c,
 * nn_backward.c).
 *
 * One invocation per output element (a gather: deterministic, no atomics) over a grid-stride
 * loop, except K_WGRAD (one workgroup per weight element, its terms split over the
 * invocations and summed in a tree) and K_LAYERNORM (one workgroup per row). Floats
 * accumulate in CT_A: float (f16, bf16, f32) or double (f64).
 *
 * Views: P.v[0] the output (gw, gx), P.v[1] x (gy for the pooling backward kernels), P.v[2]
 * w (K_WGRAD: gy), P.v[3] bias or the max-pool indices. P.i: conv: 0 SY, 1 SX, 2 PY, 3 PX,
 * 4 DY, 5 DX, 6 groups, 9 has bias / has indices; pool: 0..5 as conv, 6 KH, 7 KW,
 * 8 count_include_pad. K_LAYERNORM's parameters are listed there.
 */
#version 450
#include "common.glsl"
#include "math.glsl"

#define ACC CAT(CT_, A)
#define LDA(x) CAT(LD_, A)(x)
#define STA(v) CAT(ST_, A)(v)

#define SY P.i[0]
#define SX P.i[1]
#define PY P.i[2]
#define PX P.i[3]
#define DY P.i[4]
#define DX P.i[5]
#define GROUPS P.i[6]
#define KH P.i[6]
#define KW P.i[7]
#define CIP P.i[8]
#define HAS P.i[9]

/* The multi-index of row-major linear index i over view k's (4-d) shape. */
ivec4 coords4(int k, int i) {
    ivec4 c;
    for (int d = 3; d >= 0; d--) {
        int s = P.v[k].shape[d];
        int q = i / s;
        c[d] = i - q * s;
        i = q;
    }
    return c;
}

/* Element offset of [a, b, y, x] in 4-d view k. */
int off4(int k, int a, int b, int y, int x) {
    return P.v[k].offset + a * P.v[k].strides[0] + b * P.v[k].strides[1] +
           y * P.v[k].strides[2] + x * P.v[k].strides[3];
}

/* The divisor of the average window starting at (y0, x0), or 0 when it holds no input
 * element; w gets the clipped window (y0, y1, x0, x1), as ref. */
int avg_window(int y0, int x0, int H, int W, out ivec4 w) {
    int y1 = min(y0 + KH, H + PY), x1 = min(x0 + KW, W + PX);
    const int padded = (y1 - y0) * (x1 - x0);
    y0 = max(y0, 0);
    x0 = max(x0, 0);
    y1 = min(y1, H);
    x1 = min(x1, W);
    w = ivec4(y0, y1, x0, x1);
    if (y0 >= y1 || x0 >= x1) return 0;
    return CIP != 0 ? padded : (y1 - y0) * (x1 - x0);
}

#if defined(K_WGRAD)
#define LWG 64
layout(local_size_x = LWG) in;
#elif defined(K_LAYERNORM)
#define LWG 128
layout(local_size_x = LWG) in;
#else
layout(local_size_x = WG) in;
#endif

#define N (P.v[0].numel)

#if defined(K_CONV)
BUF(1, A, o_);
BUF(2, A, x_);
BUF(3, A, w_);
BUF(4, A, b_);
/* out[n, o, oy, ox] = bias[o] + sum over the group's channels and taps. */
void main() {
    GRID_LOOP(e, N) {
        const ivec4 c = coords4(0, e);
        const int n = c[0], o = c[1], oy = c[2], ox = c[3];
        const int H = P.v[1].shape[2], W = P.v[1].shape[3];
        const int Cg = P.v[2].shape[1], kH = P.v[2].shape[2], kW = P.v[2].shape[3];
        const int Og = P.v[0].shape[1] / GROUPS, c0 = (o / Og) * Cg;
        ACC acc = HAS != 0 ? LDA(b_[P.v[3].offset + o * P.v[3].strides[0]]) : ACC(0);
        /* the taps kw whose ix = ox*SX - PX + kw*DX lies in [0, W) */
        const int x0 = ox * SX - PX;
        const int kw0 = x0 >= 0 ? 0 : (-x0 + DX - 1) / DX;
        const int kw1 = W - x0 <= 0 ? 0 : min(kW, (W - x0 + DX - 1) / DX);
        const int xs3 = P.v[1].strides[3] * DX, ws3 = P.v[2].strides[3];
        for (int ci = 0; ci < Cg; ci++)
            for (int kh = 0; kh < kH; kh++) {
                const int iy = oy * SY - PY + kh * DY;
                if (iy < 0 || iy >= H) continue;
                const int xb = off4(1, n, c0 + ci, iy, x0), wb = off4(2, o, ci, kh, 0);
                for (int kw = kw0; kw < kw1; kw++)
                    acc += LDA(x_[xb + kw * xs3]) * LDA(w_[wb + kw * ws3]);
            }
        o_[off4(0, n, o, oy, ox)] = STA(acc);
    }
}

#elif defined(K_CONVT)
BUF(1, A, o_);
BUF(2, A, x_);
BUF(3, A, w_);
BUF(4, A, b_);
/* conv_transpose2d: the adjoint of conv2d, gathered per output element. */
void main() {
    GRID_LOOP(e, N) {
        const ivec4 c = coords4(0, e);
        const int n = c[0], o = c[1], oy = c[2], ox = c[3];
        const int C = P.v[1].shape[1], H = P.v[1].shape[2], W = P.v[1].shape[3];
        const int Og = P.v[2].shape[1], kH = P.v[2].shape[2], kW = P.v[2].shape[3];
        const int Cg = C / GROUPS, c0 = (o / Og) * Cg, oo = o % Og;
        const int xs3 = P.v[1].strides[3], ws3 = P.v[2].strides[3];
        ACC acc = HAS != 0 ? LDA(b_[P.v[3].offset + o * P.v[3].strides[0]]) : ACC(0);
        for (int ci = 0; ci < Cg; ci++)
            for (int kh = 0; kh < kH; kh++) {
                const int ty = oy + PY - kh * DY;
                if (ty < 0 || ty % SY != 0 || ty / SY >= H) continue;
                const int xb = off4(1, n, c0 + ci, ty / SY, 0), wb = off4(2, c0 + ci, oo, kh, 0);
                for (int kw = 0; kw < kW; kw++) {
                    const int tx = ox + PX - kw * DX;
                    if (tx < 0 || tx % SX != 0 || tx / SX >= W) continue;
                    acc += LDA(x_[xb + (tx / SX) * xs3]) * LDA(w_[wb + kw * ws3]);
                }
            }
        o_[off4(0, n, o, oy, ox)] = STA(acc);
    }
}

#elif defined(K_WGRAD)
BUF(1, A, gw_);
BUF(2, A, x_);
BUF(3, A, gy_);
shared ACC lv[LWG];
/* gw[o, c, kh, kw] = sum over n, oy, ox of gy * x at the tap: one workgroup per gw element
 * (looping past the grid), invocations take every LWG-th (n, oy) row (row sums Kahan-added),
 * partials summed in a tree. Views: 0 gw, 1 x, 2 gy. */
void main() {
    const int lid = int(gl_LocalInvocationID.x);
    const int NB = P.v[2].shape[0], OH = P.v[2].shape[2], OW = P.v[2].shape[3];
    const int H = P.v[1].shape[2], W = P.v[1].shape[3];
    const int Cg = P.v[0].shape[1], Og = P.v[0].shape[0] / GROUPS;
    const int rows = NB * OH;
    for (int e = int(gl_WorkGroupID.x); e < N; e += int(gl_NumWorkGroups.x)) {
        const ivec4 c = coords4(0, e);
        const int o = c[0], ci = c[1], kh = c[2], kw = c[3];
        const int c0 = (o / Og) * Cg;
        /* the ox whose tap ix = ox*SX - PX + kw*DX lies in [0, W) */
        const int xo = kw * DX - PX;
        const int ox0 = xo >= 0 ? 0 : (-xo + SX - 1) / SX;
        const int ox1 = W - xo <= 0 ? 0 : min(OW, (W - xo + SX - 1) / SX);
        precise ACC s = ACC(0), comp = ACC(0);
        for (int r = lid; r < rows; r += LWG) {
            const int n = r / OH, oy = r - n * OH;
            const int iy = oy * SY - PY + kh * DY;
            if (iy < 0 || iy >= H) continue;
            const int gb = off4(2, n, o, oy, 0), gs = P.v[2].strides[3];
            const int xb = off4(1, n, c0 + ci, iy, xo), xs = P.v[1].strides[3] * SX;
            ACC row = ACC(0);
            for (int ox = ox0; ox < ox1; ox++)
                row += LDA(gy_[gb + ox * gs]) * LDA(x_[xb + ox * xs]);
            precise ACC y = row - comp, u = s + y;
            comp = !isinf(u) && !isnan(u) ? (u - s) - y : ACC(0);
            s = u;
        }
        lv[lid] = s;
        barrier();
        for (int h = LWG / 2; h > 0; h /= 2) {
            if (lid < h) lv[lid] += lv[lid + h];
            barrier();
        }
        if (lid == 0) gw_[off4(0, o, ci, kh, kw)] = STA(lv[0]);
        barrier();
    }
}

#elif defined(K_MAXPOOL)
BUF(1, A, o_);
BUF(2, A, x_);
BUF(4, w64, ind_); /* the i64 indices as two words each (no 64-bit type needed) */
/* The max over each dilated window (padding is -inf), a NaN wins (the last one, as ref), ties
 * keep the first; the index is y * W + x in the input plane. */
void main() {
    GRID_LOOP(e, N) {
        const ivec4 c = coords4(0, e);
        const int n = c[0], ch = c[1], oy = c[2], ox = c[3];
        const int H = P.v[1].shape[2], W = P.v[1].shape[3];
        int y0 = oy * SY - PY, x0 = ox * SX - PX;
        const int y1 = min(y0 + (KH - 1) * DY + 1, H), x1 = min(x0 + (KW - 1) * DX + 1, W);
        if (y0 < 0) y0 += ((-y0 + DY - 1) / DY) * DY;
        if (x0 < 0) x0 += ((-x0 + DX - 1) / DX) * DX;
        int best_i = y0 * W + x0;
        ACC best = ACC(uintBitsToFloat(0xff800000u)); /* -inf */
        for (int iy = y0; iy < y1; iy += DY)
            for (int ix = x0; ix < x1; ix += DX) {
                const ACC v = LDA(x_[off4(1, n, ch, iy, ix)]);
                if (v > best || isnan(v)) {
                    best = v;
                    best_i = iy * W + ix;
                }
            }
        o_[off4(0, n, ch, oy, ox)] = STA(best);
        if (HAS != 0) ind_[off4(3, n, ch, oy, ox)] = uvec2(uint(best_i), best_i < 0 ? ~0u : 0u);
    }
}

#elif defined(K_AVGPOOL)
BUF(1, A, o_);
BUF(2, A, x_);
/* The mean over each window, the divisor as PyTorch's (count_include_pad). */
void main() {
    GRID_LOOP(e, N) {
        const ivec4 c = coords4(0, e);
        const int n = c[0], ch = c[1], oy = c[2], ox = c[3];
        ivec4 w;
        const int div = avg_window(oy * SY - PY, ox * SX - PX, P.v[1].shape[2], P.v[1].shape[3], w);
        ACC sum = ACC(0);
        for (int iy = w[0]; iy < w[1]; iy++)
            for (int ix = w[2]; ix < w[3]; ix++) sum += LDA(x_[off4(1, n, ch, iy, ix)]);
        o_[off4(0, n, ch, oy, ox)] = STA(div > 0 ? sum / ACC(div) : ACC(0));
    }
}

#elif defined(K_AVGBWD)
BUF(1, A, gx_);
BUF(2, A, gy_);
/* gx[n, c, iy, ix] = sum over the windows holding (iy, ix) of gy / divisor. Views: 0 gx,
 * 1 gy. */
void main() {
    GRID_LOOP(e, N) {
        const ivec4 c = coords4(0, e);
        const int n = c[0], ch = c[1], iy = c[2], ix = c[3];
        const int H = P.v[0].shape[2], W = P.v[0].shape[3];
        const int OH = P.v[1].shape[2], OW = P.v[1].shape[3];
        /* windows o with o*s - p <= i < o*s - p + k */
        int t = iy + PY - KH + 1;
        const int oy0 = t <= 0 ? 0 : (t + SY - 1) / SY;
        const int oy1 = max(oy0, min((iy + PY) / SY + 1, OH));
        t = ix + PX - KW + 1;
        const int ox0 = t <= 0 ? 0 : (t + SX - 1) / SX;
        const int ox1 = max(ox0, min((ix + PX) / SX + 1, OW));
        ACC acc = ACC(0);
        for (int oy = oy0; oy < oy1; oy++)
            for (int ox = ox0; ox < ox1; ox++) {
                ivec4 w;
                const int d = avg_window(oy * SY - PY, ox * SX - PX, H, W, w);
                if (d > 0) acc += LDA(gy_[off4(1, n, ch, oy, ox)]) / ACC(d);
            }
        gx_[off4(0, n, ch, iy, ix)] = STA(acc);
    }
}

#elif defined(K_ADAPT)
BUF(1, A, o_);
BUF(2, A, x_);
/* Bin i of n over a length L spans [floor(i*L/n), ceil((i+1)*L/n)). */
void main() {
    GRID_LOOP(e, N) {
        const ivec4 c = coords4(0, e);
        const int n = c[0], ch = c[1], oy = c[2], ox = c[3];
        const int H = P.v[1].shape[2], W = P.v[1].shape[3];
        const int OH = P.v[0].shape[2], OW = P.v[0].shape[3];
        const int y0 = oy * H / OH, y1 = ((oy + 1) * H + OH - 1) / OH;
        const int x0 = ox * W / OW, x1 = ((ox + 1) * W + OW - 1) / OW;
        ACC sum = ACC(0);
        for (int iy = y0; iy < y1; iy++)
            for (int ix = x0; ix < x1; ix++) sum += LDA(x_[off4(1, n, ch, iy, ix)]);
        o_[off4(0, n, ch, oy, ox)] = STA(sum / ACC((y1 - y0) * (x1 - x0)));
    }
}

#elif defined(K_ADAPTBWD)
BUF(1, A, gx_);
BUF(2, A, gy_);
/* gx = sum over the bins holding (iy, ix) of gy / the bin's size. Views: 0 gx, 1 gy. */
void main() {
    GRID_LOOP(e, N) {
        const ivec4 c = coords4(0, e);
        const int n = c[0], ch = c[1], iy = c[2], ix = c[3];
        const int H = P.v[0].shape[2], W = P.v[0].shape[3];
        const int OH = P.v[1].shape[2], OW = P.v[1].shape[3];
        ACC acc = ACC(0);
        for (int oy = 0; oy < OH; oy++) {
            const int y0 = oy * H / OH, y1 = ((oy + 1) * H + OH - 1) / OH;
            if (y0 > iy) break;
            if (iy >= y1) continue;
            for (int ox = 0; ox < OW; ox++) {
                const int x0 = ox * W / OW, x1 = ((ox + 1) * W + OW - 1) / OW;
                if (x0 > ix) break;
                if (ix >= x1) continue;
                acc += LDA(gy_[off4(1, n, ch, oy, ox)]) / ACC((y1 - y0) * (x1 - x0));
            }
        }
        gx_[off4(0, n, ch, iy, ix)] = STA(acc);
    }
}

#elif defined(K_LAYERNORM)
BUF(1, A, o_);
BUF(2, A, x_);
BUF(3, A, w_);
BUF(4, A, b_);
shared ACC lv[LWG];
/* P.i: 0 n (the row length), 1 rows, 2 x offset, 3 x row stride, 4 x element stride, 5..7 the
 * same for out, 8 w offset, 9 w stride, 10 has w, 11 b offset, 12 b stride, 13 has b; eps in
 * P.f[0] (PF64(0) for f64). */

/* The sum of x over the workgroup; every invocation gets it. */
ACC grp_sum(ACC x) {
    const int lid = int(gl_LocalInvocationID.x);
    lv[lid] = x;
    barrier();
    for (int h = LWG / 2; h > 0; h /= 2) {
        if (lid < h) lv[lid] += lv[lid + h];
        barrier();
    }
    const ACC r = lv[0];
    barrier();
    return r;
}

/* A Kahan-compensated sum over this invocation's elements of the row at base (step st) of x
 * (mode 0) or (x - c)^2 (mode 1). */
ACC item_sum(int base, int st, int n, int mode, ACC c) {
    precise ACC s = ACC(0), comp = ACC(0);
    for (int j = int(gl_LocalInvocationID.x); j < n; j += LWG) {
        ACC x = LDA(x_[base + j * st]);
        if (mode == 1) x = (x - c) * (x - c);
        precise ACC y = x - comp, t = s + y;
        comp = !isinf(t) && !isnan(t) ? (t - s) - y : ACC(0);
        s = t;
    }
    return s;
}

/* Each row normalized to zero mean and unit biased variance, then times w[j] and plus b[j]. */
void main() {
    const int n = P.i[0], rows = P.i[1];
#ifdef USE_F64
    const ACC eps = PF64(0);
#else
    const ACC eps = P.f[0];
#endif
    for (int g = int(gl_WorkGroupID.x); g < rows; g += int(gl_NumWorkGroups.x)) {
        const int base = P.i[2] + g * P.i[3], st = P.i[4], obase = P.i[5] + g * P.i[6];
        const ACC mean = grp_sum(item_sum(base, st, n, 0, ACC(0))) / ACC(n);
        const ACC var = grp_sum(item_sum(base, st, n, 1, mean)) / ACC(n);
        const ACC inv_sd = ACC(1) / m_sqrt(var + eps);
        for (int j = int(gl_LocalInvocationID.x); j < n; j += LWG) {
            ACC v = (LDA(x_[base + j * st]) - mean) * inv_sd;
            if (P.i[10] != 0) v *= LDA(w_[P.i[8] + j * P.i[9]]);
            if (P.i[13] != 0) v += LDA(b_[P.i[11] + j * P.i[12]]);
            o_[obase + j * P.i[7]] = STA(v);
        }
    }
}
#endif
