"""Conformance cases of the nn family: conv1d conv2d conv_transpose2d (stride, padding,
dilation, groups, output_padding, bias), max_pool2d (with indices) avg_pool2d
adaptive_avg_pool2d, embedding, layer_norm, dropout, cross_entropy, and the random ops
(rand_uniform, rand_normal, rand_bernoulli).

The references are written the NumPy way: convolution as a sum over kernel taps of strided
slices of the zero-padded input contracted with np.einsum, transposed convolution as the
scatter of those taps into a larger output that is then cropped, pooling by explicit windows,
and the random numbers from a Philox-4x32-10 written here with NumPy integers (checked against
the published known-answer vectors of Random123).
"""
import math

import numpy as np

from common import T, case, matmul, rnd, rndb, rndi

CASES = []
_names = set()

HALF_TOL = {"f16": (1e-2, 1e-2), "bf16": (5e-2, 5e-2)}


def _add(op, inputs, name, ref=None, params=None, out=None, error=None, tol=None):
    full = "nn/%s/%s" % (op, name)
    assert full not in _names, full
    _names.add(full)
    CASES.append(case(op, inputs, ref, params=params, out_dtypes=out, error=error, tol=tol,
                      name=full))


def _pair(v, default):
    if v is None:
        return (default, default)
    if isinstance(v, (list, tuple)):
        return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])
    return (v, v)


# ---- convolution references ----

def r_conv2d(x, w, b=None, stride=None, padding=None, dilation=None, groups=1, **_):
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride, 1), _pair(padding, 0), _pair(dilation, 1)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    og = o // groups
    out = np.zeros((n, o, oh, ow))
    for g in range(groups):
        xg = xp[:, g * cg:(g + 1) * cg]
        wg = w[g * og:(g + 1) * og]
        for i in range(kh):
            for j in range(kw):
                tap = xg[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                         j * dw:j * dw + sw * (ow - 1) + 1:sw]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", tap, wg[:, :, i, j])
    if b is not None:
        out += b[None, :, None, None]
    return out


def r_conv1d(x, w, b=None, stride=None, padding=None, dilation=None, groups=1, **_):
    s, p, d = _pair(stride, 1)[0], _pair(padding, 0)[0], _pair(dilation, 1)[0]
    out = r_conv2d(x[:, :, None, :], w[:, :, None, :], b, stride=[1, s], padding=[0, p],
                   dilation=[1, d], groups=groups)
    return out[:, :, 0, :]


def r_conv_transpose2d(x, w, b=None, stride=None, padding=None, dilation=None,
                       output_padding=None, groups=1, **_):
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride, 1), _pair(padding, 0), _pair(dilation, 1)
    oph, opw = _pair(output_padding, 0)
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    cg = c // groups
    fh = (h - 1) * sh + dh * (kh - 1) + 1 + oph
    fw = (wd - 1) * sw + dw * (kw - 1) + 1 + opw
    full = np.zeros((n, og * groups, fh, fw))
    for g in range(groups):
        xg = x[:, g * cg:(g + 1) * cg]
        wg = w[g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                full[:, g * og:(g + 1) * og, i * dh:i * dh + sh * (h - 1) + 1:sh,
                     j * dw:j * dw + sw * (wd - 1) + 1:sw] += \
                    np.einsum("nchw,co->nohw", xg, wg[:, :, i, j])
    oh = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
    ow = (wd - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    out = full[:, :, ph:ph + oh, pw:pw + ow]
    if b is not None:
        out = out + b[None, :, None, None]
    return out


# ---- pooling references ----

def _pool_len(n, k, s, p, d, ceil):
    """PyTorch's pooling output length (the last window starts inside input or left pad)."""
    eff = d * (k - 1) + 1
    if ceil:
        o = -(-(n + 2 * p - eff) // s) + 1
        if (o - 1) * s >= n + p:
            o -= 1
    else:
        o = (n + 2 * p - eff) // s + 1
    return o


def _pool_geom(x, kernel, stride, padding, dilation, ceil_mode):
    k = _pair(kernel, 1)
    s = _pair(stride, 0)
    s = (s[0] or k[0], s[1] or k[1])
    p = _pair(padding, 0)
    d = _pair(dilation, 0)
    d = (d[0] or 1, d[1] or 1)
    h, w = x.shape[2], x.shape[3]
    oh = _pool_len(h, k[0], s[0], p[0], d[0], ceil_mode)
    ow = _pool_len(w, k[1], s[1], p[1], d[1], ceil_mode)
    return k, s, p, d, oh, ow


def r_max_pool2d(x, kernel=None, stride=None, padding=None, dilation=None, ceil_mode=False,
                 indices=False, **_):
    k, s, p, d, oh, ow = _pool_geom(x, kernel, stride, padding, dilation, ceil_mode)
    n, c, h, w = x.shape
    out = np.zeros((n, c, oh, ow))
    idx = np.zeros((n, c, oh, ow), dtype=np.int64)
    for y in range(oh):
        ys = [y * s[0] - p[0] + i * d[0] for i in range(k[0])]
        ys = [v for v in ys if 0 <= v < h]
        for z in range(ow):
            xs = [z * s[1] - p[1] + j * d[1] for j in range(k[1])]
            xs = [v for v in xs if 0 <= v < w]
            win = x[:, :, ys][:, :, :, xs].reshape(n, c, len(ys) * len(xs))
            out[:, :, y, z] = np.max(win, axis=2)
            a = np.argmax(win, axis=2)
            idx[:, :, y, z] = np.array(ys)[a // len(xs)] * w + np.array(xs)[a % len(xs)]
    return (out, idx) if indices else out


def r_avg_pool2d(x, kernel=None, stride=None, padding=None, ceil_mode=False,
                 count_include_pad=True, **_):
    k, s, p, _d, oh, ow = _pool_geom(x, kernel, stride, padding, None, ceil_mode)
    n, c, h, w = x.shape
    out = np.zeros((n, c, oh, ow))
    for y in range(oh):
        y0 = y * s[0] - p[0]
        ys = [v for v in range(y0, y0 + k[0]) if 0 <= v < h]
        py = len([v for v in range(y0, y0 + k[0]) if -p[0] <= v < h + p[0]])
        for z in range(ow):
            x0 = z * s[1] - p[1]
            xs = [v for v in range(x0, x0 + k[1]) if 0 <= v < w]
            px = len([v for v in range(x0, x0 + k[1]) if -p[1] <= v < w + p[1]])
            tot = x[:, :, ys][:, :, :, xs].sum(axis=(2, 3))
            div = py * px if count_include_pad else len(ys) * len(xs)
            out[:, :, y, z] = tot / div
    return out


def r_adaptive_avg_pool2d(x, output=None, **_):
    oh, ow = _pair(output, 1)
    n, c, h, w = x.shape
    out = np.zeros((n, c, oh, ow))
    for y in range(oh):
        y0, y1 = (y * h) // oh, -(-((y + 1) * h) // oh)
        for z in range(ow):
            x0, x1 = (z * w) // ow, -(-((z + 1) * w) // ow)
            out[:, :, y, z] = x[:, :, y0:y1, x0:x1].mean(axis=(2, 3))
    return out


# ---- other references ----

def r_layer_norm(x, *wb, ndim=1, eps=1e-5, weight=None, bias=None, **_):
    axes = tuple(range(x.ndim - ndim, x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    hw = weight if weight is not None else len(wb) >= 1
    hb = bias if bias is not None else len(wb) >= 2
    rest = list(wb)
    if hw:
        y = y * rest.pop(0)
    if hb:
        y = y + rest.pop(0)
    return y


def _log_softmax(z):
    m = z.max(axis=1, keepdims=True) if z.shape[1] else np.zeros((z.shape[0], 1))
    return z - m - np.log(np.exp(z - m).sum(axis=1, keepdims=True))


def r_ce_index(z, t, **_):
    if z.shape[0] == 0:
        return np.float64(np.nan)
    return -np.mean(_log_softmax(z)[np.arange(z.shape[0]), t])


def r_ce_probs(z, t, **_):
    return -np.sum(t * _log_softmax(z)) / z.shape[0]


# ---- Philox-4x32-10, the NumPy way ----

_M0, _M1, _W0, _W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
_MASK = np.uint64(0xFFFFFFFF)


def philox(c0, c1, c2, c3, seed):
    """Philox-4x32-10 of the counter arrays (uint64 holding 32-bit words) under seed."""
    c = [np.asarray(v, dtype=np.uint64) & _MASK for v in (c0, c1, c2, c3)]
    c = [np.broadcast_to(v, np.broadcast(*c).shape).copy() for v in c]
    k0, k1 = seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF
    for _ in range(10):
        p0 = np.uint64(_M0) * c[0]
        p1 = np.uint64(_M1) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ np.uint64(k0), p1 & _MASK,
             (p0 >> np.uint64(32)) ^ c[3] ^ np.uint64(k1), p0 & _MASK]
        k0 = (k0 + _W0) & 0xFFFFFFFF
        k1 = (k1 + _W1) & 0xFFFFFFFF
    return c


# The published known answers (Random123 kat_vectors, philox4x32 10 rounds).
assert [int(v) for v in philox(0, 0, 0, 0, 0)] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
assert [int(v) for v in philox(0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344,
                               0x299F31D0 << 32 | 0xA4093822)] == \
    [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]


def _u24(words):
    return (words >> np.uint64(8)).astype(np.float64) * 2.0 ** -24


def _blocked_u(n, seed, stream):
    """u of elements 0..n-1 for the 4-per-counter streams (0: uniform, 2: bernoulli)."""
    b = np.arange((n + 3) // 4, dtype=np.uint64)
    w = philox(b & _MASK, b >> np.uint64(32), stream, 0, seed)
    return _u24(np.stack(w, axis=1).reshape(-1)[:n])


def p_uniform(shape, seed, lo, hi):
    n = int(np.prod(shape))
    return (lo + (hi - lo) * _blocked_u(n, seed, 0)).reshape(shape)


def p_bernoulli(shape, seed, p):
    n = int(np.prod(shape))
    return (_blocked_u(n, seed, 2) < p).astype(np.float64).reshape(shape)


def p_normal(shape, seed, mean, std):
    n = int(np.prod(shape))
    i = np.arange(n, dtype=np.uint64)
    w0, w1, _, _ = philox(i & _MASK, i >> np.uint64(32), 1, 0, seed)
    u1 = ((w0 >> np.uint64(8)).astype(np.float64) + 1.0) * 2.0 ** -24
    u2 = _u24(w1)
    # math.log / math.cos per element: the platform libm, like the C side.
    v = [mean + std * math.sqrt(-2.0 * math.log(a)) * math.cos(2.0 * math.pi * b)
         for a, b in zip(u1.tolist(), u2.tolist())]
    return np.array(v, dtype=np.float64).reshape(shape)


def r_dropout(x, p=0.5, training=True, seed=0, **_):
    if not training or p == 0:
        return x
    if p == 1:
        return np.zeros_like(x)
    return x * p_bernoulli(x.shape, seed, 1.0 - p) / (1.0 - p)


# ====================================================================================
# conv2d
# ====================================================================================

def conv2d_cases():
    for dt in ("f32", "f64"):
        x, w, b = rnd((2, 3, 5, 6)), rnd((4, 3, 3, 3)), rnd((4,))
        _add("conv2d", [T(dt, x), T(dt, w), T(dt, b)], "%s/basic" % dt, r_conv2d)
        _add("conv2d", [T(dt, x), T(dt, w)], "%s/nobias" % dt, r_conv2d)
        _add("conv2d", [T(dt, x), T(dt, w), T(dt, b)], "%s/stride2_pad1" % dt, r_conv2d,
             params={"stride": [2, 2], "padding": [1, 1]})
        _add("conv2d", [T(dt, rnd((1, 2, 7, 8))), T(dt, rnd((3, 2, 3, 2)))],
             "%s/dilation" % dt, r_conv2d, params={"dilation": [2, 3], "padding": [2, 1]})
        _add("conv2d", [T(dt, rnd((2, 4, 5, 5))), T(dt, rnd((6, 2, 3, 3))), T(dt, rnd((6,)))],
             "%s/groups2" % dt, r_conv2d, params={"groups": 2, "padding": [1, 1]})
        _add("conv2d", [T(dt, rnd((1, 4, 6, 5))), T(dt, rnd((4, 1, 3, 3)))],
             "%s/depthwise" % dt, r_conv2d, params={"groups": 4, "stride": [1, 2]})
        _add("conv2d", [T(dt, rnd((2, 3, 6, 7))), T(dt, rnd((2, 3, 2, 4))), T(dt, rnd((2,)))],
             "%s/asym" % dt, r_conv2d,
             params={"stride": [3, 2], "padding": [0, 2], "dilation": [1, 2]})
    _add("conv2d", [T("f32", rnd((1, 2, 4, 4))), T("f32", rnd((3, 2, 1, 1)))], "f32/1x1",
         r_conv2d)
    _add("conv2d", [T("f32", rnd((1, 1, 3, 3))), T("f32", rnd((1, 1, 3, 3)))], "f32/full",
         r_conv2d)
    # Non-contiguous x and w.
    _add("conv2d", [T("f32", rnd((2, 3, 6, 5)), view=("transpose", 2, 3)),
                    T("f32", rnd((4, 3, 3, 3))), T("f32", rnd((4,)))],
         "f32/x_transposed", r_conv2d, params={"padding": [1, 0]})
    _add("conv2d", [T("f32", rnd((1, 2, 5, 10)), view=("slice", 3, 0, 10, 2)),
                    T("f32", rnd((2, 2, 3, 3)), view=("flip", [2, 3]))],
         "f32/x_sliced_w_flipped", r_conv2d)
    _add("conv2d", [T("f32", rnd((0, 3, 5, 5))), T("f32", rnd((2, 3, 3, 3))),
                    T("f32", rnd((2,)))], "f32/empty_batch", r_conv2d)
    for dt in ("f16", "bf16"):
        _add("conv2d", [T(dt, rnd((1, 2, 5, 5))), T(dt, rnd((3, 2, 3, 3))), T(dt, rnd((3,)))],
             "%s/basic" % dt, r_conv2d, params={"padding": [1, 1]}, tol=HALF_TOL[dt])
    _add("conv2d", [T("f16", rnd((2, 6, 5, 4)), view=("permute", [0, 3, 1, 2])),
                    T("f16", rnd((6, 2, 3, 3))), T("f16", rnd((6,)))], "f16/groups2_nhwc",
         r_conv2d, params={"groups": 2, "padding": [1, 1], "stride": [2, 1]},
         tol=HALF_TOL["f16"])
    _add("conv2d", [T("bf16", rnd((0, 3, 5, 5))), T("bf16", rnd((2, 3, 3, 3)))],
         "bf16/empty_batch", r_conv2d)
    # Errors.
    x, w = rnd((1, 3, 5, 5)), rnd((4, 3, 3, 3))
    _add("conv2d", [T("f32", rnd((3, 5, 5))), T("f32", w)], "err/rank", error="EM_ERR_SHAPE")
    _add("conv2d", [T("f32", rnd((1, 2, 5, 5))), T("f32", w)], "err/channels",
         error="EM_ERR_SHAPE")
    _add("conv2d", [T("f32", x), T("f32", w)], "err/groups_divide", params={"groups": 3},
         error="EM_ERR_SHAPE")
    _add("conv2d", [T("f32", rnd((1, 3, 2, 2))), T("f32", w)], "err/too_small",
         error="EM_ERR_SHAPE")
    _add("conv2d", [T("f32", x), T("f32", w), T("f32", rnd((3,)))], "err/bias_size",
         error="EM_ERR_SHAPE")
    _add("conv2d", [T("f32", x), T("f32", w)], "err/stride0", params={"stride": [0, 1]},
         error="EM_ERR_ARG")
    _add("conv2d", [T("f32", x), T("f32", w)], "err/pad_neg", params={"padding": [-1, 0]},
         error="EM_ERR_ARG")
    _add("conv2d", [T("f32", x), T("f32", w)], "err/dilation0", params={"dilation": [1, 0]},
         error="EM_ERR_ARG")
    _add("conv2d", [T("f32", x), T("f32", w)], "err/groups0", params={"groups": 0},
         error="EM_ERR_ARG")
    _add("conv2d", [T("i32", rndi((1, 3, 5, 5))), T("i32", rndi((4, 3, 3, 3)))], "err/int",
         error="EM_ERR_DTYPE")
    _add("conv2d", [T("f32", x), T("f64", w)], "err/mixed", error="EM_ERR_DTYPE")


def conv1d_cases():
    for dt in ("f32", "f64"):
        _add("conv1d", [T(dt, rnd((2, 3, 10))), T(dt, rnd((4, 3, 3))), T(dt, rnd((4,)))],
             "%s/basic" % dt, r_conv1d)
        _add("conv1d", [T(dt, rnd((1, 4, 11))), T(dt, rnd((6, 2, 3)))], "%s/all_params" % dt,
             r_conv1d, params={"stride": [2], "padding": [2], "dilation": [2], "groups": 2})
    _add("conv1d", [T("f32", rnd((2, 8, 3)), view=("transpose", 1, 2)), T("f32", rnd((2, 3, 2)))],
         "f32/x_transposed", r_conv1d)
    _add("conv1d", [T("f32", rnd((0, 2, 6))), T("f32", rnd((3, 2, 2)))], "f32/empty_batch",
         r_conv1d)
    _add("conv1d", [T("f16", rnd((1, 2, 9))), T("f16", rnd((2, 2, 3))), T("f16", rnd((2,)))],
         "f16/basic", r_conv1d, params={"padding": [1]}, tol=HALF_TOL["f16"])
    _add("conv1d", [T("f32", rnd((1, 2, 5, 5))), T("f32", rnd((3, 2, 3)))], "err/rank",
         error="EM_ERR_SHAPE")
    _add("conv1d", [T("f32", rnd((1, 2, 2))), T("f32", rnd((3, 2, 3)))], "err/too_small",
         error="EM_ERR_SHAPE")


def conv_transpose2d_cases():
    for dt in ("f32", "f64"):
        x = rnd((2, 3, 4, 5))
        _add("conv_transpose2d", [T(dt, x), T(dt, rnd((3, 2, 3, 3))), T(dt, rnd((2,)))],
             "%s/basic" % dt, r_conv_transpose2d)
        _add("conv_transpose2d", [T(dt, x), T(dt, rnd((3, 4, 3, 2)))], "%s/stride2" % dt,
             r_conv_transpose2d, params={"stride": [2, 2], "padding": [1, 0]})
        _add("conv_transpose2d", [T(dt, x), T(dt, rnd((3, 2, 3, 3))), T(dt, rnd((2,)))],
             "%s/output_padding" % dt, r_conv_transpose2d,
             params={"stride": [2, 3], "padding": [1, 1], "output_padding": [1, 2]})
        _add("conv_transpose2d", [T(dt, rnd((1, 4, 3, 3))), T(dt, rnd((4, 3, 2, 2))),
                                  T(dt, rnd((6,)))], "%s/groups2" % dt, r_conv_transpose2d,
             params={"groups": 2, "stride": [2, 1]})
        _add("conv_transpose2d", [T(dt, rnd((1, 2, 3, 4))), T(dt, rnd((2, 2, 3, 2)))],
             "%s/dilation" % dt, r_conv_transpose2d,
             params={"dilation": [2, 3], "padding": [1, 2], "output_padding": [1, 0],
                     "stride": [1, 1]})
    _add("conv_transpose2d", [T("f32", rnd((1, 2, 4, 3)), view=("transpose", 2, 3)),
                              T("f32", rnd((2, 3, 2, 2)))], "f32/x_transposed",
         r_conv_transpose2d, params={"stride": [2, 2]})
    _add("conv_transpose2d", [T("f32", rnd((0, 2, 3, 3))), T("f32", rnd((2, 3, 2, 2)))],
         "f32/empty_batch", r_conv_transpose2d)
    _add("conv_transpose2d", [T("f16", rnd((1, 4, 3, 3)), view=("transpose", 2, 3)),
                              T("f16", rnd((4, 3, 2, 2))), T("f16", rnd((6,)))],
         "f16/groups2_transposed", r_conv_transpose2d, params={"groups": 2, "stride": [2, 1]},
         tol=HALF_TOL["f16"])
    _add("conv_transpose2d", [T("bf16", rnd((1, 2, 3, 3))), T("bf16", rnd((2, 2, 2, 2))),
                              T("bf16", rnd((2,)))], "bf16/basic", r_conv_transpose2d,
         params={"stride": [2, 2]}, tol=HALF_TOL["bf16"])
    x, w = rnd((1, 3, 4, 4)), rnd((3, 2, 3, 3))
    _add("conv_transpose2d", [T("f32", x), T("f32", w)], "err/output_padding",
         params={"stride": [2, 2], "output_padding": [2, 0]}, error="EM_ERR_ARG")
    _add("conv_transpose2d", [T("f32", rnd((1, 2, 4, 4))), T("f32", w)], "err/channels",
         error="EM_ERR_SHAPE")
    _add("conv_transpose2d", [T("f32", x), T("f32", w)], "err/groups_divide",
         params={"groups": 2}, error="EM_ERR_SHAPE")
    _add("conv_transpose2d", [T("f32", rnd((1, 3, 1, 1))), T("f32", w)], "err/nonpositive",
         params={"padding": [2, 2]}, error="EM_ERR_SHAPE")


# ====================================================================================
# pooling
# ====================================================================================

def pool_cases():
    for dt in ("f32", "f64"):
        x = rnd((2, 3, 6, 7))
        _add("max_pool2d", [T(dt, x)], "%s/k2" % dt, r_max_pool2d,
             params={"kernel": [2, 2], "indices": True}, out=[dt, "i64"])
        _add("max_pool2d", [T(dt, x)], "%s/k3s2p1" % dt, r_max_pool2d,
             params={"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1], "indices": True},
             out=[dt, "i64"])
        _add("max_pool2d", [T(dt, x)], "%s/ceil" % dt, r_max_pool2d,
             params={"kernel": [3, 2], "stride": [2, 3], "ceil_mode": True, "indices": True},
             out=[dt, "i64"])
        _add("max_pool2d", [T(dt, rnd((1, 2, 9, 8)))], "%s/dilation" % dt, r_max_pool2d,
             params={"kernel": [3, 2], "dilation": [2, 3], "padding": [1, 1], "stride": [1, 2],
                     "indices": True}, out=[dt, "i64"])
        _add("avg_pool2d", [T(dt, x)], "%s/k2" % dt, r_avg_pool2d, params={"kernel": [2, 2]})
        _add("avg_pool2d", [T(dt, x)], "%s/pad_include" % dt, r_avg_pool2d,
             params={"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1]})
        _add("avg_pool2d", [T(dt, x)], "%s/pad_exclude" % dt, r_avg_pool2d,
             params={"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1],
                     "count_include_pad": False})
        _add("avg_pool2d", [T(dt, x)], "%s/ceil_include" % dt, r_avg_pool2d,
             params={"kernel": [4, 3], "stride": [3, 2], "padding": [1, 1], "ceil_mode": True})
        _add("avg_pool2d", [T(dt, x)], "%s/ceil_exclude" % dt, r_avg_pool2d,
             params={"kernel": [4, 3], "stride": [3, 2], "padding": [2, 1], "ceil_mode": True,
                     "count_include_pad": False})
        _add("adaptive_avg_pool2d", [T(dt, rnd((2, 3, 7, 5)))], "%s/nondivisible" % dt,
             r_adaptive_avg_pool2d, params={"output": [3, 2]})
        _add("adaptive_avg_pool2d", [T(dt, rnd((1, 2, 4, 6)))], "%s/divisible" % dt,
             r_adaptive_avg_pool2d, params={"output": [2, 3]})
    _add("max_pool2d", [T("f32", rnd((1, 1, 5, 5)))], "f32/ceil_last_window",
         r_max_pool2d, params={"kernel": [2, 2], "stride": [2, 2], "padding": [1, 1],
                               "ceil_mode": True, "indices": True}, out=["f32", "i64"])
    _add("max_pool2d", [T("f32", rnd((1, 2, 6, 6)))], "f32/no_indices", r_max_pool2d,
         params={"kernel": [2, 3], "stride": [0, 0]})
    # Ties: the first maximum in the window keeps the index.
    _add("max_pool2d", [T("f32", np.ones((1, 1, 4, 4)))], "f32/ties", r_max_pool2d,
         params={"kernel": [2, 2], "indices": True}, out=["f32", "i64"])
    xn = rnd((1, 1, 4, 4))
    xn[0, 0, 1, 2] = np.nan
    xn[0, 0, 3, 0] = np.inf
    _add("max_pool2d", [T("f32", xn)], "f32/nan_inf", r_max_pool2d, params={"kernel": [2, 2]})
    # 2x2 windows over rows long enough for whole vectors and a tail (40 and 37 columns), with
    # NaN (one per window: with several, ember keeps the last as PyTorch does, NumPy's argmax
    # the first), -inf, inf and ties, indices kept
    xw = rnd((2, 3, 8, 40))
    xw[0, 0, 0, 0:4] = [np.nan, 1.0, 7.0, np.nan]
    xw[0, 0, 1, 0:4] = [2.0, 0.5, 5.0, 5.0]
    xw[0, 1, 2:4, 6:8] = -np.inf
    xw[1, 2, 4:6, 38:40] = 3.0
    xw[1, 0, 7, 39] = np.inf
    _add("max_pool2d", [T("f32", xw)], "f32/k2_wide_special", r_max_pool2d,
         params={"kernel": [2, 2], "indices": True}, out=["f32", "i64"])
    _add("max_pool2d", [T("f32", rnd((1, 2, 7, 37)))], "f32/k2_odd_wide", r_max_pool2d,
         params={"kernel": [2, 2], "indices": True}, out=["f32", "i64"])
    _add("max_pool2d", [T("f32", rnd((2, 6, 3, 4)), view=("permute", [0, 2, 1, 3]))],
         "f32/x_permuted", r_max_pool2d, params={"kernel": [2, 2], "indices": True},
         out=["f32", "i64"])
    _add("max_pool2d", [T("f32", rnd((0, 2, 4, 4)))], "f32/empty_batch", r_max_pool2d,
         params={"kernel": [2, 2], "indices": True}, out=["f32", "i64"])
    _add("max_pool2d", [T("f16", rnd((1, 2, 4, 4)))], "f16/k2", r_max_pool2d,
         params={"kernel": [2, 2]})
    _add("avg_pool2d", [T("bf16", rnd((1, 2, 4, 4)))], "bf16/k2", r_avg_pool2d,
         params={"kernel": [2, 2]}, tol=HALF_TOL["bf16"])
    _add("avg_pool2d", [T("f32", rnd((2, 5, 4, 3)), view=("transpose", 1, 3))],
         "f32/x_transposed", r_avg_pool2d, params={"kernel": [2, 2], "stride": [1, 1]})
    _add("avg_pool2d", [T("f32", rnd((0, 2, 4, 4)))], "f32/empty_batch", r_avg_pool2d,
         params={"kernel": [2, 2]})
    _add("adaptive_avg_pool2d", [T("f32", rnd((1, 2, 5, 3)))], "f32/upsample",
         r_adaptive_avg_pool2d, params={"output": [7, 4]})
    _add("adaptive_avg_pool2d", [T("f32", rnd((2, 3, 6, 5)))], "f32/global",
         r_adaptive_avg_pool2d, params={"output": [1, 1]})
    _add("adaptive_avg_pool2d", [T("f32", rnd((1, 4, 6, 5)), view=("slice", 1, 0, 4, 2))],
         "f32/x_sliced", r_adaptive_avg_pool2d, params={"output": [4, 3]})
    # f16 / bf16 (through f32) with strided inputs: channels-last and sliced views
    for dt in ("f16", "bf16"):
        tol = HALF_TOL[dt]
        xc = rnd((2, 5, 6, 3))  # NHWC storage, an NCHW view
        _add("max_pool2d", [T(dt, xc, view=("permute", [0, 3, 1, 2]))], "%s/k3s2p1_nhwc" % dt,
             r_max_pool2d, params={"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1],
                                   "indices": True}, out=[dt, "i64"])
        _add("avg_pool2d", [T(dt, xc, view=("permute", [0, 3, 1, 2]))], "%s/pad_exclude_nhwc" % dt,
             r_avg_pool2d, params={"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1],
                                   "count_include_pad": False}, tol=tol)
        _add("adaptive_avg_pool2d", [T(dt, rnd((2, 3, 7, 7)))], "%s/global" % dt,
             r_adaptive_avg_pool2d, params={"output": [1, 1]}, tol=tol)
        _add("adaptive_avg_pool2d", [T(dt, rnd((1, 4, 7, 5)), view=("slice", 1, 0, 4, 2))],
             "%s/nondivisible_sliced" % dt, r_adaptive_avg_pool2d, params={"output": [3, 2]},
             tol=tol)
    _add("adaptive_avg_pool2d", [T("f32", rnd((2, 6, 7, 3)), view=("permute", [0, 3, 1, 2]))],
         "f32/global_nhwc", r_adaptive_avg_pool2d, params={"output": [1, 1]})
    # Errors.
    x = rnd((1, 2, 4, 4))
    _add("max_pool2d", [T("f32", x)], "err/pad_gt_half", params={"kernel": [2, 2],
                                                                 "padding": [2, 0]},
         error="EM_ERR_ARG")
    _add("max_pool2d", [T("f32", x)], "err/kernel0", params={"kernel": [0, 2]},
         error="EM_ERR_ARG")
    _add("max_pool2d", [T("f32", x)], "err/stride_neg", params={"kernel": [2, 2],
                                                                "stride": [-1, 1]},
         error="EM_ERR_ARG")
    _add("max_pool2d", [T("f32", x)], "err/too_small", params={"kernel": [5, 2]},
         error="EM_ERR_SHAPE")
    _add("max_pool2d", [T("f32", rnd((2, 4, 4)))], "err/rank", params={"kernel": [2, 2]},
         error="EM_ERR_SHAPE")
    _add("max_pool2d", [T("i64", rndi((1, 1, 4, 4)))], "err/int", params={"kernel": [2, 2]},
         error="EM_ERR_DTYPE")
    _add("avg_pool2d", [T("f32", x)], "err/pad_gt_half", params={"kernel": [3, 3],
                                                                 "padding": [0, 2]},
         error="EM_ERR_ARG")
    _add("avg_pool2d", [T("f32", x)], "err/too_small", params={"kernel": [2, 6]},
         error="EM_ERR_SHAPE")
    _add("adaptive_avg_pool2d", [T("f32", x)], "err/negative", params={"output": [-1, 2]},
         error="EM_ERR_ARG")
    _add("adaptive_avg_pool2d", [T("f32", rnd((2, 4)))], "err/rank",
         params={"output": [1, 1]}, error="EM_ERR_SHAPE")


# ====================================================================================
# embedding, layer_norm, cross_entropy, dropout
# ====================================================================================

def misc_cases():
    wt = rnd((6, 4))
    for dt in ("f32", "f64"):
        _add("embedding", [T(dt, wt), T("i64", [[0, 5, 2], [2, 2, 1]])], "%s/i64_2d" % dt,
             lambda w, i: w[i])
    _add("embedding", [T("f32", wt), T("i32", [3, 0, 3, 5])], "f32/i32_1d", lambda w, i: w[i])
    _add("embedding", [T("f32", wt), T("i64", 4)], "f32/0d", lambda w, i: w[i])
    _add("embedding", [T("f32", wt), T("i64", np.zeros((2, 0), dtype=np.int64))], "f32/empty",
         lambda w, i: w[i])
    _add("embedding", [T("bf16", wt), T("i64", [1, 2])], "bf16/1d", lambda w, i: w[i])
    _add("embedding", [T("f32", wt, view=("transpose", 0, 1)), T("i64", [3, 1])],
         "f32/w_transposed", lambda w, i: w[i])
    _add("embedding", [T("f32", wt), T("i64", [0, 6])], "err/range", error="EM_ERR_ARG")
    _add("embedding", [T("f32", wt), T("i64", [-1])], "err/negative", error="EM_ERR_ARG")
    _add("embedding", [T("f32", wt), T("f32", [1.0])], "err/float_idx", error="EM_ERR_DTYPE")
    _add("embedding", [T("f32", rnd((6,))), T("i64", [1])], "err/rank", error="EM_ERR_SHAPE")

    for dt in ("f32", "f64"):
        x = rnd((3, 4, 5))
        _add("layer_norm", [T(dt, x)], "%s/plain" % dt, r_layer_norm, params={"ndim": 1})
        _add("layer_norm", [T(dt, x), T(dt, rnd((5,))), T(dt, rnd((5,)))], "%s/affine" % dt,
             r_layer_norm, params={"ndim": 1})
        _add("layer_norm", [T(dt, x), T(dt, rnd((4, 5)))], "%s/weight_2d" % dt, r_layer_norm,
             params={"ndim": 2, "eps": 1e-3})
        _add("layer_norm", [T(dt, x), T(dt, rnd((4, 5)))], "%s/bias_only" % dt,
             lambda a, b, **k: r_layer_norm(a, ndim=2) + b,
             params={"ndim": 2, "weight": False, "bias": True})
    _add("layer_norm", [T("f32", rnd((2, 3, 4)))], "f32/all_dims", r_layer_norm,
         params={"ndim": 3})
    _add("layer_norm", [T("f32", rnd((4, 3)), view=("transpose", 0, 1)),
                        T("f32", rnd((4,)), view=("flip", [0])), T("f32", rnd((4,)))],
         "f32/views", r_layer_norm, params={"ndim": 1})
    _add("layer_norm", [T("f32", rnd((0, 5)))], "f32/empty", r_layer_norm, params={"ndim": 1})
    _add("layer_norm", [T("f32", np.full((2, 3), 7.0))], "f32/constant_rows", r_layer_norm,
         params={"ndim": 1})
    _add("layer_norm", [T("f16", rnd((2, 8))), T("f16", rnd((8,))), T("f16", rnd((8,)))],
         "f16/affine", r_layer_norm, params={"ndim": 1}, tol=HALF_TOL["f16"])
    _add("layer_norm", [T("bf16", rnd((3, 16))), T("bf16", rnd((16,))), T("bf16", rnd((16,)))],
         "bf16/affine", r_layer_norm, params={"ndim": 1}, tol=HALF_TOL["bf16"])
    _add("layer_norm", [T("f16", rnd((5, 3)), view=("transpose", 0, 1)),
                        T("f16", rnd((10,)), view=("slice", 0, 0, 10, 2)),
                        T("f16", rnd((5,)), view=("flip", [0]))],
         "f16/views", r_layer_norm, params={"ndim": 1}, tol=HALF_TOL["f16"])
    _add("layer_norm", [T("f64", rnd((2, 6))), T("f64", rnd((12,)), view=("slice", 0, 1, 12, 2))],
         "f64/weight_strided", r_layer_norm, params={"ndim": 1})
    _add("layer_norm", [T("f32", rnd((3, 4))), T("f32", rnd((3,)))], "err/weight_shape",
         params={"ndim": 1}, error="EM_ERR_SHAPE")
    _add("layer_norm", [T("f32", rnd((3, 4)))], "err/ndim0", params={"ndim": 0},
         error="EM_ERR_ARG")
    _add("layer_norm", [T("f32", rnd((3, 4)))], "err/ndim_big", params={"ndim": 3},
         error="EM_ERR_ARG")
    _add("layer_norm", [T("i32", rndi((3, 4)))], "err/int", params={"ndim": 1},
         error="EM_ERR_DTYPE")

    for dt in ("f32", "f64"):
        z = rnd((5, 4), -3, 3)
        _add("cross_entropy", [T(dt, z), T("i64", [0, 3, 1, 1, 2])], "%s/i64" % dt, r_ce_index,
             out=dt)
        p = np.abs(rnd((5, 4))) + 0.1
        _add("cross_entropy", [T(dt, z), T(dt, p / p.sum(axis=1, keepdims=True))],
             "%s/probs" % dt, r_ce_probs)
    _add("cross_entropy", [T("f32", rnd((3, 7))), T("i32", [6, 0, 2])], "f32/i32", r_ce_index,
         out="f32")
    _add("cross_entropy", [T("f32", [[1000.0, 0.0], [-1000.0, 0.0]]), T("i64", [1, 0])],
         "f32/large_logits", r_ce_index, out="f32")
    _add("cross_entropy", [T("f32", rnd((4, 3)), view=("transpose", 0, 1)),
                           T("i64", [0, 3, 2])], "f32/logits_transposed", r_ce_index, out="f32")
    _add("cross_entropy", [T("f32", np.zeros((0, 3))), T("i64", np.zeros((0,), np.int64))],
         "f32/empty_batch", r_ce_index, out="f32")
    _add("cross_entropy", [T("bf16", rnd((3, 4))), T("i64", [1, 2, 3])], "bf16/i64",
         r_ce_index, out="bf16", tol=HALF_TOL["bf16"])
    _add("cross_entropy", [T("f32", rnd((3, 4))), T("i64", [0, 4, 1])], "err/range",
         error="EM_ERR_ARG")
    _add("cross_entropy", [T("f32", rnd((3, 4))), T("i64", [0, -1, 1])], "err/negative",
         error="EM_ERR_ARG")
    _add("cross_entropy", [T("f32", rnd((4,))), T("i64", [0])], "err/rank",
         error="EM_ERR_SHAPE")
    _add("cross_entropy", [T("f32", rnd((3, 4))), T("i64", [0, 1])], "err/target_len",
         error="EM_ERR_SHAPE")
    _add("cross_entropy", [T("f32", rnd((3, 4))), T("f32", rnd((3, 3)))], "err/probs_shape",
         error="EM_ERR_SHAPE")
    _add("cross_entropy", [T("f32", rnd((3, 4))), T("f64", rnd((3, 4)))], "err/probs_dtype",
         error="EM_ERR_DTYPE")
    _add("cross_entropy", [T("f32", rnd((3, 4))), T("bool", [True, False, True])],
         "err/bool_target", error="EM_ERR_DTYPE")

    for dt in ("f32", "f64"):
        x = rnd((4, 5, 6))
        _add("dropout", [T(dt, x)], "%s/p0.5" % dt, r_dropout, params={"p": 0.5, "seed": 7})
        _add("dropout", [T(dt, x)], "%s/p0.25" % dt, r_dropout,
             params={"p": 0.25, "seed": 2 ** 40 + 3})
    _add("dropout", [T("f32", rnd((3, 4)))], "f32/eval", r_dropout,
         params={"p": 0.5, "training": False, "seed": 1})
    _add("dropout", [T("f32", rnd((3, 4)))], "f32/p0", r_dropout, params={"p": 0.0, "seed": 1})
    _add("dropout", [T("f32", rnd((3, 4)))], "f32/p1", r_dropout, params={"p": 1.0, "seed": 1})
    _add("dropout", [T("f32", rnd((6, 4)), view=("transpose", 0, 1))], "f32/x_transposed",
         r_dropout, params={"p": 0.75, "seed": 99})
    _add("dropout", [T("f16", rnd((5, 5)))], "f16/p0.5", r_dropout, params={"p": 0.5, "seed": 3})
    _add("dropout", [T("f32", rnd((2, 3)))], "err/p", params={"p": 1.5}, error="EM_ERR_ARG")
    _add("dropout", [T("i64", rndi((2, 3)))], "err/int", params={"p": 0.5},
         error="EM_ERR_DTYPE")


# ====================================================================================
# random
# ====================================================================================

def random_cases():
    big_seed = 2 ** 52 + 2 ** 33 + 12345  # exercises the key's high word
    for dt in ("f32", "f64"):
        _add("rand_uniform", [], "%s/unit" % dt,
             lambda **k: p_uniform(k["shape"], k["seed"], k["lo"], k["hi"]),
             params={"shape": [7, 9], "dtype": dt, "seed": 42, "lo": 0.0, "hi": 1.0})
        _add("rand_uniform", [], "%s/range_bigseed" % dt,
             lambda **k: p_uniform(k["shape"], k["seed"], k["lo"], k["hi"]),
             params={"shape": [3, 2, 5], "dtype": dt, "seed": big_seed, "lo": -3.5, "hi": 2.0})
        _add("rand_normal", [], "%s/std" % dt,
             lambda **k: p_normal(k["shape"], k["seed"], k["mean"], k["std"]),
             params={"shape": [50], "dtype": dt, "seed": 1, "mean": 0.0, "std": 1.0})
        _add("rand_normal", [], "%s/shifted_bigseed" % dt,
             lambda **k: p_normal(k["shape"], k["seed"], k["mean"], k["std"]),
             params={"shape": [4, 6], "dtype": dt, "seed": big_seed, "mean": 3.0, "std": 0.5})
        _add("rand_bernoulli", [], "%s/p0.3" % dt,
             lambda **k: p_bernoulli(k["shape"], k["seed"], k["p"]),
             params={"shape": [10, 11], "dtype": dt, "seed": 5, "p": 0.3})
    for dt in ("i64", "u8", "bool"):
        _add("rand_bernoulli", [], "%s/p0.6" % dt,
             lambda **k: p_bernoulli(k["shape"], k["seed"], k["p"]),
             params={"shape": [5, 5], "dtype": dt, "seed": 77, "p": 0.6})
    _add("rand_bernoulli", [], "f32/p1",
         lambda **k: np.ones(k["shape"]), params={"shape": [9], "dtype": "f32", "seed": 1,
                                                  "p": 1.0})
    _add("rand_bernoulli", [], "f32/p0",
         lambda **k: np.zeros(k["shape"]), params={"shape": [9], "dtype": "f32", "seed": 1,
                                                   "p": 0.0})
    _add("rand_uniform", [], "f32/0d", lambda **k: p_uniform((), k["seed"], 0.0, 1.0),
         params={"shape": [], "dtype": "f32", "seed": 3})
    _add("rand_uniform", [], "f32/empty", lambda **k: np.zeros((3, 0)),
         params={"shape": [3, 0], "dtype": "f32", "seed": 3})
    _add("rand_uniform", [], "f32/degenerate", lambda **k: np.full((4,), 2.5),
         params={"shape": [4], "dtype": "f32", "seed": 3, "lo": 2.5, "hi": 2.5})
    _add("rand_uniform", [], "err/int_dtype", params={"shape": [3], "dtype": "i32"},
         error="EM_ERR_DTYPE")
    _add("rand_uniform", [], "err/lo_gt_hi", params={"shape": [3], "lo": 1.0, "hi": 0.0},
         error="EM_ERR_ARG")
    _add("rand_uniform", [], "err/neg_shape", params={"shape": [3, -1]}, error="EM_ERR_ARG")
    _add("rand_normal", [], "err/std_neg", params={"shape": [3], "std": -1.0},
         error="EM_ERR_ARG")
    _add("rand_normal", [], "err/bool_dtype", params={"shape": [3], "dtype": "bool"},
         error="EM_ERR_DTYPE")
    _add("rand_bernoulli", [], "err/p", params={"shape": [3], "p": 1.01}, error="EM_ERR_ARG")


conv2d_cases()
conv1d_cases()
conv_transpose2d_cases()
pool_cases()
misc_cases()
random_cases()


# ---- scaled dot-product attention (issue 14; composed in the core) ----
def _sdpa(q, k, v, mask=None, causal=False, scale=0.0, dropout_p=0.0, seed=0):
    sc = scale if scale > 0 else 1.0 / np.sqrt(q.shape[-1])
    s = matmul(q, np.swapaxes(k, -1, -2)) * sc  # no BLAS: the same bits on every machine
    L, S = s.shape[-2], s.shape[-1]
    if causal:
        s = np.where(np.tril(np.ones((L, S), dtype=bool)), s, -np.inf)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    m = np.max(s, axis=-1, keepdims=True)
    e = np.exp(s - m)
    a = e / np.sum(e, axis=-1, keepdims=True)
    if dropout_p > 0:  # em_dropout on the weights: the same Philox stream
        a = a * p_bernoulli(a.shape, seed, 1.0 - dropout_p) / (1.0 - dropout_p)
    return matmul(a, v)


for dt in ("f32", "f64", "f16", "bf16"):
    tol = None if dt in ("f32", "f64") else ((1e-2, 1e-2) if dt == "f16" else (4e-2, 4e-2))
    _add("sdpa", [T(dt, rnd((2, 3, 5, 4))), T(dt, rnd((2, 3, 6, 4))), T(dt, rnd((2, 3, 6, 7)))],
         "plain/" + dt, lambda q, k, v, causal=False, scale=0.0: _sdpa(q, k, v, None, causal,
                                                                        scale), tol=tol)
_add("sdpa", [T("f32", rnd((2, 5, 4))), T("f32", rnd((2, 5, 4))), T("f32", rnd((2, 5, 3)))],
     "causal", lambda q, k, v, causal, scale=0.0: _sdpa(q, k, v, None, causal, scale),
     params={"causal": True})
_bm = np.ones((5, 6), dtype=bool)
_bm[:, 4:] = False
_add("sdpa", [T("f64", rnd((2, 5, 4))), T("f64", rnd((2, 6, 4))), T("f64", rnd((2, 6, 3))),
              T("bool", _bm)],
     "bool_mask", lambda q, k, v, m, causal=False, scale=0.0: _sdpa(q, k, v, m, causal, scale))
_add("sdpa", [T("f32", rnd((5, 4))), T("f32", rnd((6, 4))), T("f32", rnd((6, 3))),
              T("f32", rnd((1, 6)))],
     "float_mask_scale", lambda q, k, v, m, causal=False, scale=0.0: _sdpa(q, k, v, m, causal,
                                                                             scale),
     params={"scale": 0.3})
_add("sdpa", [T("f32", rnd((2, 4, 8)), view=("transpose", 0, 1)), T("f32", rnd((4, 2, 8))),
              T("f32", rnd((4, 2, 8)))],
     "view_transpose", lambda q, k, v, causal=False, scale=0.0: _sdpa(q, k, v, None, causal,
                                                                       scale))
_add("sdpa", [T("f32", rnd((2, 5, 4))), T("f32", rnd((2, 5, 3))), T("f32", rnd((2, 5, 3)))],
     "shape_err", error="EM_ERR_SHAPE")
# The cpu backend's blocked kernel (blocks of 64 queries and keys): sequences of several blocks
# that are not multiples of 64, causal with L != S (top-left aligned, as torch's tril), heads
# split by a permute (strided q, k, v), broadcast batch dims, dropout, a float mask that is not
# in the graph (sdpa_fmask builds it from a bool input: the fused backward runs under autodiff).
_add("sdpa", [T("f32", rnd((1, 300, 3))), T("f32", rnd((1, 300, 3))), T("f32", rnd((1, 300, 2)))],
     "long_causal", lambda q, k, v, causal, scale=0.0: _sdpa(q, k, v, None, causal, scale),
     params={"causal": True})
_add("sdpa", [T("f64", rnd((300, 2))), T("f64", rnd((300, 2))), T("f64", rnd((300, 2)))],
     "long", lambda q, k, v, causal=False, scale=0.0: _sdpa(q, k, v, None, causal, scale))
for _L, _S in ((5, 8), (7, 4)):
    _add("sdpa", [T("f32", rnd((2, _L, 4))), T("f32", rnd((2, _S, 4))),
                  T("f32", rnd((2, _S, 3)))],
         "causal_L%d_S%d" % (_L, _S),
         lambda q, k, v, causal, scale=0.0: _sdpa(q, k, v, None, causal, scale),
         params={"causal": True})
_add("sdpa", [T("f32", rnd((2, 5, 3, 4)), view=("permute", [0, 2, 1, 3])),
              T("f32", rnd((2, 6, 3, 4)), view=("permute", [0, 2, 1, 3])),
              T("f32", rnd((2, 6, 3, 5)), view=("permute", [0, 2, 1, 3]))],
     "strided_heads", lambda q, k, v, causal=False, scale=0.0: _sdpa(q, k, v, None, causal,
                                                                      scale))
_bm2 = rndb((5, 6))
_bm2[:, 0] = True
_add("sdpa", [T("f32", rnd((2, 3, 5, 4))), T("f32", rnd((3, 6, 4))), T("f32", rnd((6, 5))),
              T("bool", _bm2)],
     "broadcast_batch", lambda q, k, v, m, causal=False, scale=0.0: _sdpa(q, k, v, m, causal,
                                                                           scale))
_add("sdpa", [T("f64", rnd((2, 2, 7, 4))), T("f64", rnd((2, 2, 9, 4))), T("f64", rnd((2, 2, 9, 3)))],
     "dropout", lambda q, k, v, causal=False, scale=0.0, dropout_p=0.0, seed=0:
     _sdpa(q, k, v, None, causal, scale, dropout_p, seed),
     params={"dropout_p": 0.3, "seed": 5})
_bm3 = rndb((2, 1, 6))
_bm3[:, :, 0] = True
_add("sdpa_fmask", [T("f32", rnd((2, 5, 4))), T("f32", rnd((2, 6, 4))), T("f32", rnd((2, 6, 3))),
                    T("bool", _bm3)],
     "float_mask_fused", lambda q, k, v, m, causal=False, scale=0.0:
     _sdpa(q, k, v, np.where(m, 0.75, -1.25), causal, scale),
     params={"causal": True})
