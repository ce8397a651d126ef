"""Conformance cases of the normalization ops: batch_norm (training and eval, with and without
weight / bias and running statistics, ranks 2 to 5, views, every float dtype; the running
statistics after the call are outputs too), group_norm and rms_norm.

The references are NumPy in float64, written from the definitions; where PyTorch has the op
(torch.nn.functional.batch_norm and group_norm; 1.13 has no rms_norm) each float64 case is
also run through torch when this script runs, and must agree to 1e-7 (outputs and running
statistics), so the data is PyTorch's semantics without depending on its machine-specific
kernels.
"""
import numpy as np

from common import T, case, rnd, rndi

CASES = []
_names = set()

HALF_TOL = {"f16": (1e-2, 1e-2), "bf16": (5e-2, 5e-2)}

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the data does not need torch; the cross-check does
    torch = None


def _add(op, inputs, name, ref=None, params=None, out=None, error=None, tol=None):
    full = "norm/%s/%s" % (op, name)
    assert full not in _names, full
    _names.add(full)
    CASES.append(case(op, inputs, ref, params=params, out_dtypes=out, error=error, tol=tol,
                      name=full))


def _split(args, weight, bias, running):
    args = list(args)
    x = args.pop(0)
    w = args.pop(0) if weight else None
    b = args.pop(0) if bias else None
    rm, rv = (args.pop(0), args.pop(0)) if running else (None, None)
    return x, w, b, rm, rv


def r_batch_norm(*args, training=True, momentum=0.1, eps=1e-5, weight=False, bias=False,
                 running=False, **_):
    x, w, b, rm, rv = _split(args, weight, bias, running)
    c = x.shape[1]
    axes = (0,) + tuple(range(2, x.ndim))
    bshape = (1, c) + (1,) * (x.ndim - 2)
    if training:
        mean = x.mean(axis=axes)
        var = ((x - mean.reshape(bshape)) ** 2).mean(axis=axes)
        m = x.size // c
        if running:
            rm2 = (1 - momentum) * rm + momentum * mean
            rv2 = (1 - momentum) * rv + momentum * var * m / (m - 1)
    else:
        mean, var = rm, rv
    y = (x - mean.reshape(bshape)) / np.sqrt(var.reshape(bshape) + eps)
    if weight:
        y = y * w.reshape(bshape)
    if bias:
        y = y + b.reshape(bshape)
    if training and running:
        _check_torch_bn(args, training, momentum, eps, weight, bias, running, y, rm2, rv2)
        return [y, rm2, rv2]
    _check_torch_bn(args, training, momentum, eps, weight, bias, running, y, None, None)
    return y if not running else [y, rm, rv]


def _close(a, b):
    # loose enough for torch's own float64 rounding (1e-9 at |mean| = 1e6), tight enough for
    # any difference of semantics
    assert np.allclose(a, b, rtol=1e-7, atol=1e-7), (a, b)


def _check_torch_bn(args, training, momentum, eps, weight, bias, running, y, rm2, rv2):
    if torch is None:
        return
    t = [torch.tensor(np.array(a, dtype=np.float64)) for a in args]
    x, w, b, rm, rv = _split(t, weight, bias, running)
    ty = F.batch_norm(x, rm, rv, w, b, training=training, momentum=momentum, eps=eps)
    _close(ty.numpy(), y)
    if rm2 is not None:
        _close(rm.numpy(), rm2)
        _close(rv.numpy(), rv2)


def r_group_norm(*args, groups=1, eps=1e-5, weight=False, bias=False, **_):
    x, w, b, _rm, _rv = _split(args, weight, bias, False)
    n, c = x.shape[0], x.shape[1]
    xg = x.reshape(n, groups, (c // groups) * int(np.prod(x.shape[2:], dtype=np.int64)))
    mean = xg.mean(axis=2, keepdims=True)
    var = ((xg - mean) ** 2).mean(axis=2, keepdims=True)
    y = ((xg - mean) / np.sqrt(var + eps)).reshape(x.shape)
    bshape = (1, c) + (1,) * (x.ndim - 2)
    if weight:
        y = y * w.reshape(bshape)
    if bias:
        y = y + b.reshape(bshape)
    if torch is not None:
        t = [torch.tensor(np.array(a, dtype=np.float64)) for a in args]
        tx, tw, tb, _a, _b = _split(t, weight, bias, False)
        _close(F.group_norm(tx, groups, tw, tb, eps).numpy(), y)
    return y


def r_rms_norm(*args, ndim=1, eps=1e-5, weight=False, **_):
    x = args[0]
    axes = tuple(range(x.ndim - ndim, x.ndim))
    y = x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps)
    if weight:
        y = y * args[1]
    return y


DTS = ("f32", "f64")
SHAPES = {2: (6, 3), 3: (2, 3, 5), 4: (2, 3, 4, 5), 5: (2, 2, 3, 2, 3)}


def batch_norm_cases():
    for dt in DTS:
        for rank, shape in SHAPES.items():
            c = shape[1]
            x = rnd(shape)
            rm, rv = rnd((c,)), rnd((c,), 0.5, 2.0)
            w, b = rnd((c,)), rnd((c,))
            full = {"weight": True, "bias": True, "running": True}
            _add("batch_norm", [T(dt, x), T(dt, w), T(dt, b), T(dt, rm), T(dt, rv)],
                 "%s/r%d/train_affine_running" % (dt, rank), r_batch_norm,
                 params=dict(full, training=True, momentum=0.1))
            _add("batch_norm", [T(dt, x)], "%s/r%d/train_plain" % (dt, rank), r_batch_norm,
                 params={"training": True})
            _add("batch_norm", [T(dt, x), T(dt, w), T(dt, b), T(dt, rm), T(dt, rv)],
                 "%s/r%d/eval_affine" % (dt, rank), r_batch_norm,
                 params=dict(full, training=False))
            _add("batch_norm", [T(dt, x), T(dt, rm), T(dt, rv)],
                 "%s/r%d/eval_plain" % (dt, rank), r_batch_norm,
                 params={"training": False, "running": True})
        c = 4
        x = rnd((3, c, 7))
        _add("batch_norm", [T(dt, x), T(dt, rnd((c,)))], "%s/train_weight_only" % dt,
             r_batch_norm, params={"training": True, "weight": True, "eps": 1e-3})
        _add("batch_norm", [T(dt, x), T(dt, rnd((c,))), T(dt, rnd((c,))),
                            T(dt, rnd((c,), 0.5, 2))],
             "%s/train_bias_running_m0.3" % dt, r_batch_norm,
             params={"training": True, "bias": True, "running": True, "momentum": 0.3})
    # large mean, small spread: the statistics must not cancel catastrophically
    c = 3
    x = 1000.0 + rnd((8, c, 33), -1, 1)
    _add("batch_norm", [T("f32", x), T("f32", rnd((c,))), T("f32", rnd((c,), 0.5, 2))],
         "f32/offset_1000_running", r_batch_norm,
         params={"training": True, "running": True})
    _add("batch_norm", [T("f64", 1e3 + rnd((4, 2, 50), -1, 1))], "f64/offset_1000",
         r_batch_norm, params={"training": True})
    # long channels (several blocks and lanes) and odd sizes
    x = rnd((3, 2, 1111))
    _add("batch_norm", [T("f32", x), T("f32", rnd((2,))), T("f32", rnd((2,)))],
         "f32/long_channels", r_batch_norm,
         params={"training": True, "weight": True, "bias": True})
    # views: x transposed (channels strided), weight flipped, running stats strided
    c = 4
    _add("batch_norm", [T("f32", rnd((c, 3, 5)), view=("transpose", 0, 1)),
                        T("f32", rnd((c,)), view=("flip", [0])), T("f32", rnd((c,))),
                        T("f32", rnd((2 * c,)), view=("slice", 0, 0, 2 * c, 2)),
                        T("f32", rnd((2 * c,), 0.5, 2), view=("slice", 0, 1, 2 * c, 2))],
         "f32/views_running_strided", r_batch_norm,
         params={"training": True, "weight": True, "bias": True, "running": True})
    _add("batch_norm", [T("f64", rnd((c, 2, 3, 3)), view=("transpose", 0, 1)),
                        T("f64", rnd((c,))), T("f64", rnd((c,), 0.5, 2), view=("flip", [0]))],
         "f64/eval_views", r_batch_norm, params={"training": False, "running": True})
    # half dtypes
    for dt in ("f16", "bf16"):
        c = 3
        x, rm, rv = rnd((4, c, 6)), rnd((c,)), rnd((c,), 0.5, 2)
        w, b = rnd((c,)), rnd((c,))
        _add("batch_norm", [T(dt, x), T(dt, w), T(dt, b), T(dt, rm), T(dt, rv)],
             "%s/train_affine_running" % dt, r_batch_norm,
             params={"training": True, "weight": True, "bias": True, "running": True},
             tol=HALF_TOL[dt])
        _add("batch_norm", [T(dt, x), T(dt, rm), T(dt, rv)], "%s/eval" % dt, r_batch_norm,
             params={"training": False, "running": True}, tol=HALF_TOL[dt])
        _add("batch_norm", [T(dt, rnd((2, c, 3, 3)), view=("transpose", 2, 3))],
             "%s/train_view" % dt, r_batch_norm, params={"training": True}, tol=HALF_TOL[dt])
    # empty batch: an empty result, the running statistics unchanged
    _add("batch_norm", [T("f32", rnd((0, 3))), T("f32", rnd((3,))), T("f32", rnd((3,), 0.5, 2))],
         "f32/empty_batch", lambda x, rm, rv, **k: [x, rm, rv],
         params={"training": True, "running": True})
    # errors
    x = rnd((2, 3, 4))
    _add("batch_norm", [T("f32", x), T("f32", rnd((4,)))], "err/weight_shape",
         params={"weight": True}, error="EM_ERR_SHAPE")
    _add("batch_norm", [T("f32", x), T("f32", rnd((3,))), T("f32", rnd((2,)))],
         "err/running_shape", params={"running": True}, error="EM_ERR_SHAPE")
    _add("batch_norm", [T("f32", x)], "err/eval_without_running", params={"training": False},
         error="EM_ERR_ARG")
    _add("batch_norm", [T("f32", rnd((3,)))], "err/rank1", error="EM_ERR_SHAPE")
    _add("batch_norm", [T("f32", rnd((1, 3)))], "err/one_value_per_channel",
         error="EM_ERR_SHAPE")
    _add("batch_norm", [T("f32", x)], "err/eps_negative", params={"eps": -1e-5},
         error="EM_ERR_ARG")
    _add("batch_norm", [T("i32", rndi((2, 3, 4)))], "err/int", error="EM_ERR_DTYPE")
    _add("batch_norm", [T("f32", x), T("f64", rnd((3,))), T("f64", rnd((3,)))],
         "err/running_dtype", params={"running": True}, error="EM_ERR_DTYPE")
    _add("batch_norm", [T("f32", x), T("f32", rnd((3,)))], "err/running_mean_only",
         params={"running_mean_only": True}, error="EM_ERR_ARG")


def group_norm_cases():
    for dt in DTS:
        x = rnd((2, 6, 5))
        _add("group_norm", [T(dt, x), T(dt, rnd((6,))), T(dt, rnd((6,)))],
             "%s/r3_g3_affine" % dt, r_group_norm,
             params={"groups": 3, "weight": True, "bias": True})
        _add("group_norm", [T(dt, rnd((2, 4, 3, 3)))], "%s/r4_g2_plain" % dt, r_group_norm,
             params={"groups": 2})
        _add("group_norm", [T(dt, rnd((3, 6)))], "%s/r2_g6" % dt, r_group_norm,
             params={"groups": 6, "eps": 1e-3})
        _add("group_norm", [T(dt, rnd((2, 4, 2, 2, 3))), T(dt, rnd((4,)))],
             "%s/r5_g1_weight" % dt, r_group_norm, params={"groups": 1, "weight": True})
    _add("group_norm", [T("f32", rnd((2, 8, 300))), T("f32", rnd((8,))), T("f32", rnd((8,)))],
         "f32/long_groups", r_group_norm, params={"groups": 4, "weight": True, "bias": True})
    _add("group_norm", [T("f32", 500.0 + rnd((2, 4, 40), -1, 1))], "f32/offset_500",
         r_group_norm, params={"groups": 2})
    _add("group_norm", [T("f32", rnd((6, 2, 5)), view=("transpose", 0, 1)),
                        T("f32", rnd((6,)), view=("flip", [0])),
                        T("f32", rnd((12,)), view=("slice", 0, 0, 12, 2))],
         "f32/views", r_group_norm, params={"groups": 3, "weight": True, "bias": True})
    for dt in ("f16", "bf16"):
        _add("group_norm", [T(dt, rnd((2, 4, 6))), T(dt, rnd((4,))), T(dt, rnd((4,)))],
             "%s/affine" % dt, r_group_norm,
             params={"groups": 2, "weight": True, "bias": True}, tol=HALF_TOL[dt])
    _add("group_norm", [T("f32", rnd((0, 4, 3)))], "f32/empty", r_group_norm,
         params={"groups": 2})
    _add("group_norm", [T("f32", rnd((2, 6, 3)))], "err/groups_not_dividing",
         params={"groups": 4}, error="EM_ERR_ARG")
    _add("group_norm", [T("f32", rnd((2, 6, 3)))], "err/groups_zero", params={"groups": 0},
         error="EM_ERR_ARG")
    _add("group_norm", [T("f32", rnd((2, 6, 3))), T("f32", rnd((3,)))], "err/weight_shape",
         params={"groups": 3, "weight": True}, error="EM_ERR_SHAPE")
    _add("group_norm", [T("f32", rnd((2, 6, 3)))], "err/eps_negative",
         params={"groups": 3, "eps": -1.0}, error="EM_ERR_ARG")
    _add("group_norm", [T("f32", rnd((6,)))], "err/rank1", params={"groups": 3},
         error="EM_ERR_SHAPE")
    _add("group_norm", [T("i64", rndi((2, 6, 3)))], "err/int", params={"groups": 3},
         error="EM_ERR_DTYPE")


def rms_norm_cases():
    for dt in DTS:
        x = rnd((3, 4, 5))
        _add("rms_norm", [T(dt, x), T(dt, rnd((5,)))], "%s/weight" % dt, r_rms_norm,
             params={"ndim": 1, "weight": True})
        _add("rms_norm", [T(dt, x)], "%s/plain" % dt, r_rms_norm, params={"ndim": 1})
        _add("rms_norm", [T(dt, x), T(dt, rnd((4, 5)))], "%s/ndim2" % dt, r_rms_norm,
             params={"ndim": 2, "weight": True, "eps": 1e-3})
        _add("rms_norm", [T(dt, x)], "%s/all_dims" % dt, r_rms_norm, params={"ndim": 3})
    _add("rms_norm", [T("f32", rnd((3, 1000))), T("f32", rnd((1000,)))], "f32/long_rows",
         r_rms_norm, params={"ndim": 1, "weight": True})
    _add("rms_norm", [T("f32", np.zeros((2, 7)))], "f32/zero_rows", r_rms_norm,
         params={"ndim": 1, "eps": 1e-6})
    _add("rms_norm", [T("f32", rnd((6, 3)), view=("transpose", 0, 1)),
                      T("f32", rnd((12,)), view=("slice", 0, 0, 12, 2))],
         "f32/views", r_rms_norm, params={"ndim": 1, "weight": True})
    for dt in ("f16", "bf16"):
        _add("rms_norm", [T(dt, rnd((3, 16))), T(dt, rnd((16,)))], "%s/weight" % dt,
             r_rms_norm, params={"ndim": 1, "weight": True}, tol=HALF_TOL[dt])
        _add("rms_norm", [T(dt, rnd((5, 3)), view=("transpose", 0, 1))], "%s/view" % dt,
             r_rms_norm, params={"ndim": 1}, tol=HALF_TOL[dt])
    _add("rms_norm", [T("f32", rnd((0, 5)))], "f32/empty", r_rms_norm, params={"ndim": 1})
    _add("rms_norm", [T("f32", rnd((3, 4)))], "err/ndim0", params={"ndim": 0},
         error="EM_ERR_ARG")
    _add("rms_norm", [T("f32", rnd((3, 4))), T("f32", rnd((3,)))], "err/weight_shape",
         params={"ndim": 1, "weight": True}, error="EM_ERR_SHAPE")
    _add("rms_norm", [T("f32", rnd((3, 4)))], "err/eps_negative",
         params={"ndim": 1, "eps": -1e-6}, error="EM_ERR_ARG")
    _add("rms_norm", [T("i32", rndi((3, 4)))], "err/int", params={"ndim": 1},
         error="EM_ERR_DTYPE")


batch_norm_cases()
group_norm_cases()
rms_norm_cases()
