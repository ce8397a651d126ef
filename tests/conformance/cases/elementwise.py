"""Conformance cases of the elementwise family: unary math and activations, binary arithmetic
(with broadcasting and the *_scalar forms), the consuming `_` variants, comparisons, logical
ops, clamp, where and masked_fill. References are written with NumPy (math.erf for erf)."""
import math

import numpy as np

from common import FLOATS, T, case, rnd, rndb, rndi

CASES = []
_names = set()


def add(op, inputs, ref=None, tag=None, **kw):
    """Appends a case; `tag` makes the name elementwise/<op>/<tag> (checked unique here)."""
    if tag is not None:
        name = "elementwise/%s/%s" % (op, tag)
        assert name not in _names, name
        _names.add(name)
        kw["name"] = name
    CASES.append(case(op, inputs, ref, **kw))


_erf = np.vectorize(math.erf, otypes=[np.float64])

NAN, INF = float("nan"), float("inf")
NUM_INTS = ("i64", "i32", "i8", "u8")

# ---- unary, float only: op -> (reference, input generator in the op's domain) ----
FLOAT_UNARY = {
    "exp": (np.exp, lambda s: rnd(s, -3, 3)),
    "log": (np.log, lambda s: rnd(s, 0.05, 5)),
    "log1p": (np.log1p, lambda s: rnd(s, -0.9, 3)),
    "sqrt": (np.sqrt, lambda s: rnd(s, 0, 5)),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), lambda s: rnd(s, 0.1, 5)),
    "sin": (np.sin, lambda s: rnd(s, -4, 4)),
    "cos": (np.cos, lambda s: rnd(s, -4, 4)),
    "tanh": (np.tanh, lambda s: rnd(s, -3, 3)),
    "sigmoid": (lambda x: 1.0 / (1.0 + np.exp(-x)), lambda s: rnd(s, -6, 6)),
    "gelu": (lambda x: 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0))), lambda s: rnd(s, -3, 3)),
    "silu": (lambda x: x / (1.0 + np.exp(-x)), lambda s: rnd(s, -5, 5)),
    "erf": (_erf, lambda s: rnd(s, -2.5, 2.5)),
    "recip": (lambda x: 1.0 / x, lambda s: rnd(s, 0.2, 4) * np.where(rndb(s), 1, -1)),
}

for op, (ref, gen) in FLOAT_UNARY.items():
    for dt in FLOATS:
        add(op, [T(dt, gen((3, 4)))], ref)
    # a strided view, a 0-d tensor, an empty one
    add(op, [T("f32", gen((4, 3)), view=("transpose", 0, 1))], ref, tag="f32-transpose")
    add(op, [T("f64", gen(()))], ref, tag="f64-0d")
    add(op, [T("f32", gen((0, 3)))], ref, tag="f32-empty")
    # ints are refused
    add(op, [T("i32", rndi((2, 2)))], error="EM_ERR_DTYPE", tag="i32-err")

# special values
add("exp", [T("f32", [NAN, INF, -INF, 0.0, 100.0])], np.exp, tag="f32-special")
add("exp", [T("f16", [12.0, -20.0, 0.5])], np.exp, tag="f16-overflow")
add("log", [T("f64", [0.0, -1.0, INF, NAN, 1.0])], np.log, tag="f64-special")
add("sqrt", [T("f32", [-1.0, 0.0, INF, NAN])], np.sqrt, tag="f32-special")
add("tanh", [T("f32", [INF, -INF, NAN, 30.0])], np.tanh, tag="f32-special")
add("sigmoid", [T("f64", [INF, -INF, NAN, -800.0, 800.0])],
    lambda x: 1.0 / (1.0 + np.exp(-x)), tag="f64-special")
add("recip", [T("f32", [0.0, INF, -INF, NAN])], lambda x: 1.0 / x, tag="f32-special")
add("erf", [T("f64", [INF, -INF, NAN, 0.0])], _erf, tag="f64-special")
add("gelu", [T("f32", rnd((8,), -3, 3), view=("slice", 0, 1, 8, 2))],
    FLOAT_UNARY["gelu"][0], tag="f32-slice2")
add("log", [T("f32", rnd((2, 3), 0.1, 3), view=("flip", [0, 1]))], np.log, tag="f32-flip")
add("sin", [T("bf16", rnd((1, 4), -3, 3), view=("expand", [3, 4]))], np.sin,
    tag="bf16-expand")
add("exp", [T("bool", [True, False])], error="EM_ERR_DTYPE", tag="bool-err")

# ---- unary, numeric (float or int) ----
NUM_UNARY = {
    "neg": lambda x: -x,
    "abs": np.abs,
    "relu": lambda x: np.maximum(x, 0),
    "sign": np.sign,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.round,
}

for op, ref in NUM_UNARY.items():
    for dt in FLOATS:
        add(op, [T(dt, rnd((2, 5), -4, 4))], ref)
    for dt in ("i64", "i32", "i8"):
        add(op, [T(dt, rndi((2, 5), -9, 9))], ref)
    add(op, [T("u8", rndi((6,), 0, 250))], ref)
    add(op, [T("f32", rnd((3, 4)), view=("slice", 1, 0, 4, 2))], ref, tag="f32-slice2")
    add(op, [T("i64", 7)], ref, tag="i64-0d")
    add(op, [T("f32", np.zeros((2, 0)))], ref, tag="f32-empty")
    add(op, [T("bool", [True, False])], error="EM_ERR_DTYPE", tag="bool-err")

add("round", [T("f32", [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.49, -3.51])], np.round,
    tag="f32-half-even")
add("round", [T("f64", [0.5, 1.5, 2.5, 1e300, -0.0, NAN, INF])], np.round,
    tag="f64-half-even")
add("sign", [T("f32", [NAN, -0.0, 0.0, -INF, INF])], np.sign, tag="f32-special")
add("relu", [T("f64", [NAN, -INF, INF, -0.5])], lambda x: np.maximum(x, 0),
    tag="f64-special")
add("abs", [T("i8", [-128, -1, 127])], np.abs, tag="i8-wrap")
add("neg", [T("u8", [0, 1, 255])], lambda x: -x, tag="u8-wrap")
add("neg", [T("i16", [-32768, 5, 0])], lambda x: -x, tag="i16-wrap")
add("floor", [T("f64", [-INF, INF, NAN, -2.5, 2.5])], np.floor, tag="f64-special")

# ---- clamp ----
clamp_ref = lambda x, lo=-INF, hi=INF: np.minimum(np.maximum(x, lo), hi)
for dt in FLOATS:
    add("clamp", [T(dt, rnd((3, 4), -3, 3))], clamp_ref, params={"lo": -1.0, "hi": 1.5})
for dt in NUM_INTS:
    lo = 0 if dt == "u8" else -3
    add("clamp", [T(dt, rndi((3, 4), 0 if dt == "u8" else -9, 9))], clamp_ref,
        params={"lo": lo, "hi": 4})
add("clamp", [T("f32", rnd((5,), -3, 3))], lambda x, lo: np.maximum(x, lo),
    params={"lo": 0.25}, tag="f32-lo-only")
add("clamp", [T("f64", rnd((5,), -3, 3))], lambda x, hi: np.minimum(x, hi),
    params={"hi": -0.5}, tag="f64-hi-only")
add("clamp", [T("f32", [NAN, -5.0, 5.0, 0.5])], clamp_ref, params={"lo": -1.0, "hi": 1.0},
    tag="f32-nan")
add("clamp", [T("i32", [-10, -3, 0, 3, 10])],
    lambda x, lo, hi: np.minimum(np.maximum(x, math.ceil(lo)), math.floor(hi)),
    params={"lo": -2.5, "hi": 2.5}, tag="i32-fractional-bounds")
add("clamp", [T("f32", rnd((4, 3)), view=("transpose", 0, 1))], clamp_ref,
    params={"lo": -0.5, "hi": 0.5}, tag="f32-transpose")
add("clamp", [T("f32", 2.0)], clamp_ref, params={"lo": -1.0, "hi": 1.0}, tag="f32-0d")
add("clamp", [T("f32", rnd((3,)))], params={"lo": 1.0, "hi": -1.0}, error="EM_ERR_ARG",
    tag="lo-gt-hi-err")
add("clamp", [T("bool", [True])], params={"lo": 0.0, "hi": 1.0}, error="EM_ERR_DTYPE",
    tag="bool-err")

# ---- binary arithmetic ----
def int_div(a, b):
    return np.floor_divide(a, b)


def int_rem(a, b):
    return np.remainder(a, b)


ARITH = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
}

for op, ref in ARITH.items():
    for dt in FLOATS:
        add(op, [T(dt, rnd((2, 3))), T(dt, rnd((2, 3)))], ref)
    for dt in NUM_INTS:
        lo, hi = (0, 15) if dt == "u8" else (-20, 20)
        add(op, [T(dt, rndi((2, 3), lo, hi)), T(dt, rndi((2, 3), lo, hi))], ref)
    add(op, [T("f32", rnd((2, 3))), T("f32", rnd((3,)))], ref, tag="f32-bcast-row")
    add(op, [T("f64", rnd((4, 1))), T("f64", rnd((1, 3)))], ref, tag="f64-bcast-outer")
    add(op, [T("i32", rndi((2, 3, 4))), T("i32", 3)], ref, tag="i32-bcast-0d")
    add(op, [T("f32", rnd((3, 2)), view=("transpose", 0, 1)),
             T("f32", rnd((2, 6)), view=("slice", 1, 0, 6, 2))], ref, tag="f32-views")
    add(op, [T("f32", rnd((0, 3))), T("f32", rnd((1, 3)))], ref, tag="f32-empty")
    add(op, [T("f32", rnd((2, 3))), T("f32", rnd((4,)))], error="EM_ERR_SHAPE",
        tag="shape-err")
    add(op, [T("f32", rnd((3,))), T("f64", rnd((3,)))], error="EM_ERR_DTYPE", tag="dtype-err")
    add(op, [T("bool", [True]), T("bool", [False])], error="EM_ERR_DTYPE", tag="bool-err")

add("add", [T("i8", [100, -100, 127, -128]), T("i8", [100, -100, 1, -1])],
    ARITH["add"], tag="i8-wrap")
add("sub", [T("u8", [3, 0, 255]), T("u8", [5, 1, 0])], ARITH["sub"], tag="u8-wrap")
add("mul", [T("i32", [70000, -70000, 46341]), T("i32", [70000, 3, 46341])], ARITH["mul"],
    tag="i32-wrap")
add("add", [T("f32", [INF, -INF, NAN, 1.0]), T("f32", [-INF, -INF, 1.0, INF])],
    ARITH["add"], tag="f32-special")
add("mul", [T("f64", [0.0, INF, NAN]), T("f64", [INF, -2.0, 0.0])], ARITH["mul"],
    tag="f64-special")
add("add", [T("f32", rnd((3,)), view=("flip", [0])), T("f32", rnd((1,)), view=("expand", [3]))],
    ARITH["add"], tag="f32-flip-expand")
add("mul", [T("f16", 1.5), T("f16", 2.25)], ARITH["mul"], tag="f16-0d")

# division: true division for floats, floor division for ints (0 for a zero divisor)
for dt in FLOATS:
    add("div", [T(dt, rnd((2, 3))), T(dt, rnd((2, 3), 0.5, 2) * np.where(rndb((2, 3)), 1, -1))],
        lambda a, b: a / b)
for dt in NUM_INTS:
    lo = 0 if dt == "u8" else -20
    add("div", [T(dt, rndi((3, 4), lo, 20)), T(dt, rndi((3, 4), 1, 6))], int_div)
add("div", [T("i64", [7, -7, 7, -7, 5, 0, -3]), T("i64", [2, 2, -2, -2, 0, 0, 5])], int_div,
    tag="i64-floor-zero")
add("div", [T("i8", [-128, 9]), T("i8", [-1, -4])], int_div, tag="i8-wrap")
add("div", [T("f64", [1.0, -1.0, 0.0, NAN]), T("f64", [0.0, 0.0, 0.0, 1.0])],
    lambda a, b: a / b, tag="f64-by-zero")
add("div", [T("f32", rnd((2, 3))), T("f32", rnd((2, 1), 1, 2))], lambda a, b: a / b,
    tag="f32-bcast")
add("div", [T("i32", [1]), T("i64", [1])], error="EM_ERR_DTYPE", tag="dtype-err")
add("div", [T("f32", rnd((2,))), T("f32", rnd((3,)))], error="EM_ERR_SHAPE", tag="shape-err")

# pow (float only)
for dt in FLOATS:
    add("pow", [T(dt, rnd((2, 3), 0.1, 3)), T(dt, rnd((2, 3), -2, 2))], np.power)
add("pow", [T("f64", [-2.0, -2.0, 0.0, 0.0, NAN, 1.0, 4.0]),
            T("f64", [3.0, 0.5, 0.0, -1.0, 0.0, NAN, 0.5])], np.power, tag="f64-special")
add("pow", [T("f32", rnd((3, 1), 0.5, 2)), T("f32", rnd((4,), -1, 2))], np.power,
    tag="f32-bcast")
add("pow", [T("i32", [2]), T("i32", [3])], error="EM_ERR_DTYPE", tag="i32-err")

# remainder: the divisor's sign (np.remainder); ints give 0 for a zero divisor
for dt in FLOATS:
    add("remainder", [T(dt, rnd((2, 4), -6, 6)),
                      T(dt, rnd((2, 4), 0.5, 3) * np.where(rndb((2, 4)), 1, -1))], np.remainder)
for dt in NUM_INTS:
    lo = 0 if dt == "u8" else -20
    add("remainder", [T(dt, rndi((3, 4), lo, 20)), T(dt, rndi((3, 4), 1, 7))], int_rem)
add("remainder", [T("i64", [7, -7, 7, -7, 5, 0]), T("i64", [3, 3, -3, -3, 0, 4])], int_rem,
    tag="i64-signs-zero")
add("remainder", [T("f64", [5.5, -5.5, 5.5, -5.5, 6.0, 1.0, INF, 1.0]),
                  T("f64", [2.0, 2.0, -2.0, -2.0, 3.0, 0.0, 2.0, INF])], np.remainder,
    tag="f64-signs-special")

# maximum / minimum (NaN propagates)
for op, ref in (("maximum", np.maximum), ("minimum", np.minimum)):
    for dt in FLOATS:
        add(op, [T(dt, rnd((2, 3))), T(dt, rnd((2, 3)))], ref)
    for dt in NUM_INTS:
        lo = 0 if dt == "u8" else -9
        add(op, [T(dt, rndi((2, 3), lo, 9)), T(dt, rndi((2, 3), lo, 9))], ref)
    add(op, [T("f32", [NAN, 1.0, NAN, -INF]), T("f32", [1.0, NAN, NAN, INF])], ref,
        tag="f32-nan")
    add(op, [T("f32", rnd((2, 3))), T("f32", rnd((2, 1)))], ref, tag="f32-bcast")
    add(op, [T("bool", [True]), T("bool", [True])], error="EM_ERR_DTYPE", tag="bool-err")

# ---- with a scalar ----
SCALAR = {
    "add_scalar": lambda a, s: a + s,
    "sub_scalar": lambda a, s: a - s,
    "mul_scalar": lambda a, s: a * s,
    "maximum_scalar": lambda a, s: np.maximum(a, s),
    "minimum_scalar": lambda a, s: np.minimum(a, s),
}
for op, ref in SCALAR.items():
    for dt in ("f32", "f64", "f16", "bf16"):
        add(op, [T(dt, rnd((2, 3)))], ref, params={"s": 0.75})
    add(op, [T("i32", rndi((2, 3)))], ref, params={"s": 3})
    add(op, [T("i64", rndi((4,)))], lambda a, s, ref=ref: ref(a, math.trunc(s)),
        params={"s": -2.7},
        tag="i64-trunc")
    add(op, [T("f32", rnd((3, 2)), view=("transpose", 0, 1))], ref, params={"s": -1.25},
        tag="f32-transpose")
    add(op, [T("bool", [True])], params={"s": 1.0}, error="EM_ERR_DTYPE", tag="bool-err")
add("add_scalar", [T("i8", [120, -120])], lambda a, s: a + s, params={"s": 10},
    tag="i8-wrap")
add("mul_scalar", [T("f32", [INF, NAN, 0.0])], lambda a, s: a * s, params={"s": 0.0},
    tag="f32-special")
add("add_scalar", [T("f32", 1.0)], lambda a, s: a + s, params={"s": 2.5}, tag="f32-0d")
add("add_scalar", [T("f32", np.zeros((0,)))], lambda a, s: a + s, params={"s": 2.5},
    tag="f32-empty")

for dt in ("f32", "f64", "f16"):
    add("div_scalar", [T(dt, rnd((2, 3)))], lambda a, s: a / s, params={"s": -0.5})
add("div_scalar", [T("i32", [7, -7, 6, 0])], lambda a, s: np.floor_divide(a, s),
    params={"s": 2}, tag="i32-floor")
add("div_scalar", [T("i64", [7, -7])], lambda a, s: np.zeros_like(a), params={"s": 0},
    tag="i64-by-zero")
add("div_scalar", [T("f32", [1.0, -1.0, 0.0])], lambda a, s: a / s, params={"s": 0.0},
    tag="f32-by-zero")
for dt in ("f32", "f64", "bf16"):
    add("pow_scalar", [T(dt, rnd((2, 3), 0.1, 3))], lambda a, s: np.power(a, s),
        params={"s": 2.5})
add("pow_scalar", [T("f32", rnd((4,), -3, 3))], lambda a, s: np.power(a, s), params={"s": 2.0},
    tag="f32-square")
add("pow_scalar", [T("i64", [2])], params={"s": 2.0}, error="EM_ERR_DTYPE", tag="i64-err")
for dt in ("f32", "f64"):
    add("remainder_scalar", [T(dt, rnd((2, 3), -6, 6))], lambda a, s: np.remainder(a, s),
        params={"s": -1.5})
add("remainder_scalar", [T("i32", [7, -7, 0, 5])], lambda a, s: np.remainder(a, s),
    params={"s": 3}, tag="i32-pos")
add("remainder_scalar", [T("i8", [7, -7, 0, 5])], lambda a, s: np.remainder(a, s),
    params={"s": -3}, tag="i8-neg")

# ---- consuming variants (run on a clone, so they take the in-place path) ----
for op, ref in (("add_", ARITH["add"]), ("sub_", ARITH["sub"]), ("mul_", ARITH["mul"])):
    add(op, [T("f32", rnd((2, 3))), T("f32", rnd((2, 3)))], ref, tag="f32")
    add(op, [T("i32", rndi((2, 3))), T("i32", rndi((3,)))], ref, tag="i32-bcast-b")
    add(op, [T("f64", rnd((3,))), T("f64", rnd((2, 3)))], ref, tag="f64-grows")
add("div_", [T("f32", rnd((2, 3))), T("f32", rnd((2, 3), 0.5, 2))], lambda a, b: a / b,
    tag="f32")
add("div_", [T("i64", [7, -7, 3]), T("i64", [2, 2, 0])], int_div, tag="i64-floor")
add("add_", [T("f32", rnd((2,))), T("f64", rnd((2,)))], error="EM_ERR_DTYPE", tag="dtype-err")
add("add_", [T("f32", rnd((2,))), T("f32", rnd((3,)))], error="EM_ERR_SHAPE", tag="shape-err")
add("mul_scalar_", [T("f32", rnd((2, 3)))], lambda a, s: a * s, params={"s": 3.0}, tag="f32")
add("mul_scalar_", [T("i8", [50, -3])], lambda a, s: a * s, params={"s": 3}, tag="i8-wrap")
add("add_scalar_", [T("f64", rnd((4,)))], lambda a, s: a + s, params={"s": -1.5}, tag="f64")
add("add_scalar_", [T("bool", [True])], params={"s": 1.0}, error="EM_ERR_DTYPE",
    tag="bool-err")
add("relu_", [T("f32", rnd((3, 3)))], lambda x: np.maximum(x, 0), tag="f32")
add("relu_", [T("i32", rndi((5,)))], lambda x: np.maximum(x, 0), tag="i32")
add("relu_", [T("f32", rnd((3, 2)), view=("transpose", 0, 1))], lambda x: np.maximum(x, 0),
    tag="f32-transpose")

# ---- comparisons ----
CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
       "gt": np.greater, "ge": np.greater_equal}
for op, ref in CMP.items():
    a = rndi((3, 4), -2, 2)
    b = rndi((3, 4), -2, 2)
    for dt in ("f32", "f16", "i64", "i8"):
        add(op, [T(dt, a), T(dt, b)], ref, out_dtypes="bool")
    add(op, [T("f64", [NAN, NAN, 1.0, INF, -INF]), T("f64", [NAN, 1.0, NAN, INF, 0.0])], ref,
        out_dtypes="bool", tag="f64-nan")
    add(op, [T("u8", rndi((2, 3), 0, 3)), T("u8", rndi((3,), 0, 3))], ref, out_dtypes="bool",
        tag="u8-bcast")
    add(op, [T("f32", rnd((3, 2)), view=("transpose", 0, 1)), T("f32", 0.0)], ref,
        out_dtypes="bool", tag="f32-transpose-0d")
    add(op, [T("f32", [1.0]), T("i32", [1])], error="EM_ERR_DTYPE", tag="dtype-err")
for op in ("eq", "ne"):
    add(op, [T("bool", rndb((2, 3))), T("bool", rndb((2, 3)))], CMP[op], out_dtypes="bool",
        tag="bool")
for op in ("lt", "ge"):
    add(op, [T("bool", [True]), T("bool", [False])], error="EM_ERR_DTYPE", tag="bool-err")
add("eq", [T("i64", [2**62, 2**62 + 1]), T("i64", [2**62 + 1, 2**62 + 1])], CMP["eq"],
    out_dtypes="bool", tag="i64-large")
add("lt", [T("f32", rnd((2, 3))), T("f32", rnd((4, 3)))], error="EM_ERR_SHAPE",
    tag="shape-err")
add("gt", [T("f32", np.zeros((0, 2))), T("f32", rnd((2,)))], CMP["gt"], out_dtypes="bool",
    tag="f32-empty")

for op, ref in (("eq_scalar", np.equal), ("lt_scalar", np.less), ("gt_scalar", np.greater)):
    add(op, [T("f32", [0.5, 1.0, 1.5, NAN])], lambda a, s, ref=ref: ref(a, s),
        params={"s": 1.0}, out_dtypes="bool", tag="f32")
    add(op, [T("i32", [-1, 0, 1, 2])], lambda a, s, ref=ref: ref(a, s), params={"s": 1},
        out_dtypes="bool", tag="i32")
    add(op, [T("i64", [-1, 0, 1, 2])], lambda a, s, ref=ref: ref(a, math.trunc(s)),
        params={"s": 1.9}, out_dtypes="bool", tag="i64-trunc")
    add(op, [T("f16", rnd((2, 3)), view=("slice", 1, 0, 3, 2))],
        lambda a, s, ref=ref: ref(a, s), params={"s": 0.0}, out_dtypes="bool",
        tag="f16-slice2")
add("eq_scalar", [T("bool", [True, False])], lambda a, s: a == bool(s), params={"s": 1.0},
    out_dtypes="bool", tag="bool")
add("lt_scalar", [T("bool", [True])], params={"s": 1.0}, error="EM_ERR_DTYPE", tag="bool-err")

# ---- logical ----
for op, ref in (("logical_and", np.logical_and), ("logical_or", np.logical_or)):
    add(op, [T("bool", [True, True, False, False]), T("bool", [True, False, True, False])], ref,
        tag="table")
    add(op, [T("bool", rndb((2, 3))), T("bool", rndb((3,)))], ref, tag="bcast")
    add(op, [T("bool", rndb((3, 2)), view=("transpose", 0, 1)), T("bool", True)], ref,
        tag="transpose-0d")
    add(op, [T("f32", [1.0]), T("f32", [0.0])], error="EM_ERR_DTYPE", tag="f32-err")
    add(op, [T("bool", rndb((2,))), T("bool", rndb((3,)))], error="EM_ERR_SHAPE",
        tag="shape-err")
add("logical_not", [T("bool", rndb((2, 3)))], np.logical_not, tag="bool")
add("logical_not", [T("bool", rndb((4,)), view=("flip", [0]))], np.logical_not, tag="flip")
add("logical_not", [T("bool", np.zeros((0,), dtype=bool))], np.logical_not, tag="empty")
add("logical_not", [T("i32", [1])], error="EM_ERR_DTYPE", tag="i32-err")

# ---- where ----
where_ref = lambda c, a, b: np.where(c, a, b)
add("where", [T("bool", rndb((2, 3))), T("f32", rnd((2, 3))), T("f32", rnd((2, 3)))],
    where_ref, out_dtypes="f32", tag="f32")
add("where", [T("bool", rndb((2, 1))), T("f64", rnd((3,))), T("f64", 0.5)], where_ref,
    out_dtypes="f64", tag="f64-bcast3")
add("where", [T("bool", rndb((4,))), T("i64", rndi((4,))), T("i64", rndi((4,)))], where_ref,
    out_dtypes="i64", tag="i64")
add("where", [T("bool", rndb((3,))), T("u8", rndi((3,), 0, 200)), T("u8", rndi((3,), 0, 200))],
    where_ref, out_dtypes="u8", tag="u8")
add("where", [T("bool", rndb((2, 2))), T("bool", rndb((2, 2))), T("bool", rndb((2, 2)))],
    where_ref, out_dtypes="bool", tag="bool")
add("where", [T("bool", rndb((3,))), T("f16", [NAN, INF, 1.0]), T("f16", [1.0, 2.0, -INF])],
    where_ref, out_dtypes="f16", tag="f16-special")
add("where", [T("bool", rndb((3, 2)), view=("transpose", 0, 1)),
              T("bf16", rnd((2, 6)), view=("slice", 1, 0, 6, 2)), T("bf16", rnd((2, 3)))],
    where_ref, out_dtypes="bf16", tag="bf16-views")
add("where", [T("bool", np.zeros((0, 2), dtype=bool)), T("f32", rnd((2,))), T("f32", 1.0)],
    where_ref, out_dtypes="f32", tag="f32-empty")
add("where", [T("f32", [1.0]), T("f32", [1.0]), T("f32", [2.0])], error="EM_ERR_DTYPE",
    tag="cond-err")
add("where", [T("bool", [True]), T("f32", [1.0]), T("f64", [2.0])], error="EM_ERR_DTYPE",
    tag="dtype-err")
add("where", [T("bool", rndb((3,))), T("f32", rnd((2,))), T("f32", 0.0)],
    error="EM_ERR_SHAPE", tag="shape-err")

# ---- masked_fill ----
mf_ref = lambda x, m, value: np.where(m, value, x)
add("masked_fill", [T("f32", rnd((2, 3))), T("bool", rndb((2, 3)))], mf_ref,
    params={"value": -1.5}, tag="f32")
add("masked_fill", [T("f64", rnd((2, 3))), T("bool", rndb((3,)))], mf_ref,
    params={"value": INF}, tag="f64-bcast-inf")
add("masked_fill", [T("i32", rndi((2, 3))), T("bool", rndb((2, 1)))],
    lambda x, m, value: np.where(m, math.trunc(value), x), params={"value": 7.9},
    tag="i32-trunc")
add("masked_fill", [T("f16", rnd((3, 2)), view=("transpose", 0, 1)), T("bool", True)], mf_ref,
    params={"value": 0.0}, tag="f16-transpose-0dmask")
add("masked_fill", [T("bool", rndb((4,))), T("bool", rndb((4,)))], mf_ref,
    params={"value": 1.0}, tag="bool")
add("masked_fill", [T("f32", rnd((3,))), T("bool", rndb((2, 3)))], params={"value": 0.0},
    error="EM_ERR_SHAPE", tag="mask-grows-err")
add("masked_fill", [T("f32", rnd((3,))), T("i32", [1, 0, 1])], params={"value": 0.0},
    error="EM_ERR_DTYPE", tag="mask-dtype-err")

# ---- cast: every pair of float dtypes, floats <-> ints and bool, special values, views ----
# ember's rule (backend.h, ref's ref_st): floats round to nearest even, ints truncate toward
# zero, bool is x != 0 (NaN included). The reference is the identity: gen_golden stores the
# result in the target dtype, rounding as NumPy does (float16: nearest even; bf16: round_bf16).


def _same(x, dtype):
    return x


def cast(src, values, dst, tag, view=None):
    add("cast", [T(src, values, view=view)], _same, params={"dtype": dst}, out_dtypes=dst,
        tag=tag)


for src in FLOATS:
    for dst in FLOATS:
        cast(src, rnd((3, 4), -3, 3), dst, "%s-%s" % (src, dst))
# f16 and bf16 from f32: overflow to inf, subnormals, ties to even, signed zero, NaN
cast("f32", [NAN, INF, -INF, 65504.0, 65520.0, -70000.0, 1e-8, 6e-5, -0.0,
             1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 2049.0], "f16", "f32-f16-special")
cast("f32", [NAN, -INF, 3.0e38, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 1e-40, -0.0, 257.0],
     "bf16", "f32-bf16-special")
cast("f16", [NAN, INF, 65504.0, 6e-8, -0.0, 1.5], "f32", "f16-f32-special")
cast("f64", [1e300, -1e300, 1e-300, NAN, 1.0 / 3.0], "f32", "f64-f32-special")
# floats to ints (truncation toward zero, in range) and to bool
for dst in ("i64", "i32", "i16", "i8"):
    cast("f32", [-3.7, -0.5, 0.0, 2.9, 100.2, -100.9], dst, "f32-%s" % dst)
cast("f64", [0.2, 1.9, 200.7, 255.0], "u8", "f64-u8")
cast("f16", [-2.5, 0.0, 7.75], "i32", "f16-i32")
cast("f32", [0.0, -0.0, 1.5, NAN, -INF], "bool", "f32-bool")
# ints and bool to floats (2^24 + 1 rounds in f32, 2049 in f16)
cast("i64", [1, -5, 2 ** 24 + 1, -(2 ** 40)], "f32", "i64-f32")
cast("i32", [2049, -7, 0], "f16", "i32-f16")
cast("u8", [0, 255, 128], "f64", "u8-f64")
cast("bool", [True, False, True], "f32", "bool-f32")
cast("i64", [-1, 300, 70000], "i8", "i64-i8")
# layouts: a transposed view, a broadcast one, 0-d, empty, the same dtype
cast("f32", rnd((4, 3)), "f16", "f32-f16-transpose", view=("transpose", 0, 1))
cast("f16", rnd((2, 3)), "f32", "f16-f32-expand", view=("expand", [4, 2, 3]))
cast("bf16", rnd((5, 4)), "f32", "bf16-f32-slice", view=("slice", 0, 0, 5, 2))
cast("f64", rnd(()), "f16", "f64-f16-0d")
cast("f32", rnd((0, 3)), "f16", "f32-f16-empty")
cast("i32", rndi((2, 2)), "i32", "i32-i32")

# ---- creation: full (the fill slot), full_like, arange, on the case's device ----
_ALL = FLOATS + ("i64", "i32", "i16", "i8", "u8", "bool")


def _full(shape, value, dtype):
    return np.full(shape, value, dtype=np.float64)


for dt in _ALL:
    add("full", [], _full, params={"shape": [3, 4], "value": -1.5 if dt != "u8" else 7.75,
                                   "dtype": dt}, tag=dt)
for dt, v in (("f32", NAN), ("f16", INF), ("bf16", -INF), ("f16", 70000.0), ("f64", 1e-300)):
    add("full", [], _full, params={"shape": [2], "value": v, "dtype": dt},
        tag="%s-%r" % (dt, v))
add("full", [], _full, params={"shape": [], "value": 3.0, "dtype": "i32"}, tag="i32-0d")
add("full", [], _full, params={"shape": [0, 5], "value": 3.0, "dtype": "f32"}, tag="f32-empty")
add("full", [], params={"shape": [2, -1], "value": 1.0, "dtype": "f32"}, error="EM_ERR_ARG",
    tag="negative-dim")
add("full_like", [T("f32", rnd((4, 3)), view=("transpose", 0, 1))],
    lambda x, value: np.full(x.shape, value), params={"value": 0.25}, tag="f32-transpose")
add("full_like", [T("i8", rndi((2, 2)))], lambda x, value: np.full(x.shape, value),
    params={"value": -3.0}, tag="i8")


def _arange(start, stop, step, dtype):
    return np.arange(start, stop, step, dtype=np.float64)


for dt, (a, b, st) in (("f32", (0.0, 5.0, 0.5)), ("f64", (-1.0, 1.0, 0.25)),
                       ("f16", (0.0, 2.0, 0.1)), ("bf16", (-3.0, 3.0, 0.7)),
                       ("i64", (0.0, 10.0, 3.0)), ("i32", (10.0, 0.0, -2.0)),
                       ("u8", (250.0, 256.0, 1.0)), ("i8", (-5.0, 5.0, 2.5))):
    add("arange", [], _arange, params={"start": a, "stop": b, "step": st, "dtype": dt}, tag=dt)
add("arange", [], _arange, params={"start": 5.0, "stop": 0.0, "step": 1.0, "dtype": "f32"},
    tag="f32-empty")
add("arange", [], params={"start": 0.0, "stop": 1.0, "step": 0.0, "dtype": "f32"},
    error="EM_ERR_ARG", tag="zero-step")
add("arange", [], params={"start": 0.0, "stop": 3.0, "step": 1.0, "dtype": "bool"},
    error="EM_ERR_DTYPE", tag="bool-err")

# ---- the layouts of the models (issue 13) ----
# batch norm's scale and shift: [N,C,H,W] op [1,C,1,1], W = 1..7 (rows shorter than a vector)
for w in range(1, 8):
    for op in ("add", "mul"):
        add(op, [T("f32", rnd((2, 3, 2, w))), T("f32", rnd((1, 3, 1, 1)))], ARITH[op],
            tag="f32-chan-bcast-w%d" % w)
    add("sub", [T("f32", rnd((1, 3, 1, 1))), T("f32", rnd((2, 3, 1 + w % 3, w)))], ARITH["sub"],
        tag="f32-chan-bcast-first-w%d" % w)
for dt in ("f64", "f16", "bf16", "i32"):
    x = rndi((2, 3, 3, 5), -9, 9) if dt == "i32" else rnd((2, 3, 3, 5))
    c = rndi((1, 3, 1, 1), -9, 9) if dt == "i32" else rnd((1, 3, 1, 1))
    add("mul", [T(dt, x), T(dt, c)], ARITH["mul"], tag="%s-chan-bcast" % dt)
add("add", [T("f32", rnd((4, 6)), view=("transpose", 0, 1)), T("f32", rnd((6, 4)))],
    ARITH["add"], tag="f32-transposed-first")
add("gt", [T("f16", rnd((2, 3, 1, 4))), T("f16", rnd((1, 3, 1, 1)))], lambda a, b: a > b,
    out_dtypes="bool", tag="f16-chan-bcast")
# attention's causal mask: a [T,T] condition over [B,H,T,T]
T_ = 5
causal = np.triu(np.ones((T_, T_), dtype=bool), 1)
for dt in ("f32", "f64", "f16", "bf16", "i64"):
    x = rndi((2, 2, T_, T_)) if dt == "i64" else rnd((2, 2, T_, T_))
    y = rndi((2, 2, T_, T_)) if dt == "i64" else rnd((2, 2, T_, T_))
    add("where", [T("bool", causal), T(dt, x), T(dt, y)], where_ref, out_dtypes=dt,
        tag="%s-causal-mask" % dt)
add("masked_fill", [T("f32", rnd((2, 2, T_, T_))), T("bool", causal)], mf_ref,
    params={"value": -INF}, tag="f32-causal-mask")
add("masked_fill", [T("bf16", rnd((2, 2, T_, T_))), T("bool", causal)], mf_ref,
    params={"value": -INF}, tag="bf16-causal-mask")
add("masked_fill", [T("f32", rnd((2, T_, 3, T_)), view=("permute", [0, 2, 1, 3])),
                    T("bool", causal)], mf_ref, params={"value": 0.0},
    tag="f32-causal-mask-permuted")

# wide ranges (the cpu backend's vectorized f32 math, also under f16/bf16): saturation of
# tanh / erf / gelu / sigmoid / silu, exp's overflow and subnormal edges, log / log1p of tiny,
# negative and huge inputs, pow of negative bases with integer exponents
WIDE = [-100.0, -30.0, -20.0, -12.0, -9.0, -6.5, -5.0, -3.5, -2.0, -1.5, -1.0, -0.7, -0.3,
        -1e-3, -0.0, 0.0, 1e-3, 0.3, 0.7, 1.0, 1.5, 2.0, 3.5, 5.0, 6.5, 9.0, 12.0, 20.0, 30.0,
        100.0, INF, NAN]
for op in ("tanh", "erf", "gelu", "sigmoid", "silu"):
    for dt in FLOATS:
        add(op, [T(dt, WIDE)], FLOAT_UNARY[op][0], tag=dt + "-wide")
        add(op, [T(dt, rnd((6, 9), -12, 12))], FLOAT_UNARY[op][0], tag=dt + "-wide-rnd")
EXP_WIDE = {"f32": [-110.0, -104.0, -100.0, -95.0, -90.0, -87.5, -80.0, -20.0, -1e-3, 0.0, 1.0,
                    20.0, 80.0, 88.0, 88.5, 88.8, 100.0, INF, -INF, NAN],
            "f64": [-800.0, -745.0, -700.0, -100.0, -1e-3, 0.0, 1.0, 100.0, 700.0, 709.0, 710.0,
                    INF, -INF, NAN],
            "f16": [-20.0, -17.0, -15.0, -10.0, -1e-3, 0.0, 1.0, 5.0, 10.0, 11.0, 11.5, 12.0,
                    INF, -INF, NAN],
            "bf16": [-110.0, -100.0, -90.0, -80.0, -20.0, 0.0, 1.0, 20.0, 80.0, 88.0, 89.0,
                     100.0, INF, -INF, NAN]}
for dt, vals in EXP_WIDE.items():
    add("exp", [T(dt, vals)], np.exp, tag=dt + "-wide")
LOG_WIDE = {"f32": [1e-45, 1e-40, 1e-38, 1e-30, 1e-10, 1e-3, 0.5, 0.999, 1.0, 1.001, 2.0, 1e10,
                    1e30, 3e38, 0.0, -0.0, -1e-30, -1.0, INF, -INF, NAN],
            "f64": [5e-324, 1e-310, 1e-300, 1e-30, 0.5, 1.0, 1.5, 1e300, 0.0, -0.0, -1.0, INF,
                    NAN],
            "f16": [6e-8, 1e-5, 1e-3, 0.5, 1.0, 2.0, 1000.0, 65504.0, 0.0, -0.0, -1.0, INF, NAN],
            "bf16": [1e-40, 1e-38, 1e-30, 1e-3, 0.5, 1.0, 2.0, 1e30, 3e38, 0.0, -1.0, INF, NAN]}
for dt, vals in LOG_WIDE.items():
    add("log", [T(dt, vals)], np.log, tag=dt + "-wide")
LOG1P_WIDE = [-1.0, -0.999, -0.9, -0.5, -0.3, -1e-3, -1e-6, -1e-9, -0.0, 0.0, 1e-9, 1e-6, 1e-3,
              0.3, 0.5, 1.0, 10.0, 1e4, -1.5, -2.0, INF, NAN]
for dt in FLOATS:
    add("log1p", [T(dt, LOG1P_WIDE)], np.log1p, tag=dt + "-wide")
    add("log1p", [T(dt, rnd((4, 8), 0.0, 1.0) ** 8 * np.where(rndb((4, 8)), 1, -0.9))],
        np.log1p, tag=dt + "-small")
POW_A = [-2.0, -2.0, -3.0, -0.5, -1.5, -4.0, -2.0, 2.0, 0.0, -0.0, -0.0, -INF, -INF, INF, -1.0,
         -1.0, 1.0, NAN, -2.0, 1.5, -1.25, 10.0, 0.5, -7.0, 3.0, 0.0, 2.0]
POW_B = [3.0, -3.0, 2.0, -2.0, 5.0, 0.5, 0.0, -1.0, -1.0, -3.0, 3.0, 3.0, -2.0, -2.0, INF, 2.5,
         NAN, 0.0, 10.0, 20.0, -11.0, 4.0, 30.0, 7.0, -4.0, 0.5, 100.0]
for dt in FLOATS:
    add("pow", [T(dt, POW_A), T(dt, POW_B)], np.power, tag=dt + "-neg-int")
    add("pow", [T(dt, rnd((4, 6), 0.2, 3)), T(dt, rndi((4, 6), -6, 6))], np.power,
        tag=dt + "-int-exp")
    # negative bases: d/db is undefined there (log of a negative), so the last element is a
    # NaN, which makes gradcheck skip the case
    add("pow", [T(dt, np.append(rnd((23,), -3, -0.2), NAN)), T(dt, rndi((24,), -6, 6))],
        np.power, tag=dt + "-neg-base-int-exp")
for dt in ("f32", "f64"):
    for sv in (3.0, -1.0, -2.0, 0.5):
        add("pow_scalar", [T(dt, [-2.0, -1.5, -0.0, 0.0, 0.5, 1.0, 3.0, INF, -INF, NAN])],
            lambda a, s: np.power(a, s), params={"s": sv}, tag="%s-neg-%g" % (dt, sv))

# ---- issue 14: tan asin acos atan sinh cosh expm1 log2 log10 (float only) ----
MORE_UNARY = {
    "tan": (np.tan, lambda s: rnd(s, -1.4, 1.4)),
    "asin": (np.arcsin, lambda s: rnd(s, -1, 1)),
    "acos": (np.arccos, lambda s: rnd(s, -1, 1)),
    "atan": (np.arctan, lambda s: rnd(s, -6, 6)),
    "sinh": (np.sinh, lambda s: rnd(s, -5, 5)),
    "cosh": (np.cosh, lambda s: rnd(s, -5, 5)),
    "expm1": (np.expm1, lambda s: rnd(s, -3, 3)),
    "log2": (np.log2, lambda s: rnd(s, 0.05, 50)),
    "log10": (np.log10, lambda s: rnd(s, 0.05, 50)),
}
for op, (ref, gen) in MORE_UNARY.items():
    for dt in FLOATS:
        add(op, [T(dt, gen((3, 4)))], ref)
    add(op, [T("f32", gen((4, 3)), view=("transpose", 0, 1))], ref, tag="f32-transpose")
    add(op, [T("f16", gen((2, 6)), view=("slice", 1, 1, 6, 2))], ref, tag="f16-slice2")
    add(op, [T("bf16", gen((1, 5)), view=("expand", [3, 5]))], ref, tag="bf16-expand")
    add(op, [T("f32", gen((2, 3)), view=("flip", [0, 1]))], ref, tag="f32-flip")
    add(op, [T("f32", gen((37,)))], ref, tag="f32-odd")
    add(op, [T("f64", gen(()))], ref, tag="f64-0d")
    add(op, [T("f32", gen((0, 3)))], ref, tag="f32-empty")
    add(op, [T("i32", rndi((2, 2)))], error="EM_ERR_DTYPE", tag="i32-err")
    add(op, [T("bool", [True])], error="EM_ERR_DTYPE", tag="bool-err")
    for dt in ("f32", "f64"):
        add(op, [T(dt, [0.0, -0.0, INF, -INF, NAN])], ref, tag=dt + "-special")

# domain edges and far values
add("asin", [T("f32", [1.0, -1.0, 1.0000001, -1.5, 0.5, 1e-30])], np.arcsin, tag="f32-edges")
add("acos", [T("f64", [1.0, -1.0, 1.0000000001, -2.0, 0.0])], np.arccos, tag="f64-edges")
add("acos", [T("f16", [1.0, -1.0, 0.999, -0.999, 1.5])], np.arccos, tag="f16-edges")
add("tan", [T("f32", [1.5707963, -1.5707963, 10.0, -100.0, 1e-20])], np.tan, tag="f32-far")
for dt in ("f32", "f64", "f16", "bf16"):
    add("sinh", [T(dt, [20.0, -20.0, 88.0, -88.0, 89.0, 89.5, -90.0, 200.0, 1e-10, 0.75, -1.0,
                        1.0, 0.99999])], np.sinh, tag=dt + "-far")
    add("cosh", [T(dt, [20.0, -20.0, 88.0, -88.0, 89.0, 89.5, -90.0, 200.0, 1e-10, 11.0, 12.0])],
        np.cosh, tag=dt + "-far")
add("expm1", [T("f32", [1e-8, -1e-8, 1e-30, 0.69, -0.69, 0.71, -0.71, 88.0, 89.0, -100.0])],
    np.expm1, tag="f32-near0-far")
add("expm1", [T("f64", [1e-17, -1e-300, 709.0, 710.0, -800.0])], np.expm1, tag="f64-far")
add("log2", [T("f32", [1.0, 2.0, 0.5, 1024.0, 1e-40, 3e38, -1.0, 1.0000001])], np.log2,
    tag="f32-edges")
add("log10", [T("f64", [1.0, 10.0, 1e-300, 1e300, 5e-324, -0.5])], np.log10, tag="f64-edges")
add("log10", [T("bf16", [1.0, 10.0, 100.0, 0.001, 0.0, -1.0])], np.log10, tag="bf16-edges")

# ---- softplus (PyTorch's: x itself where beta x > threshold) ----
def softplus_ref(x, beta=1.0, threshold=20.0):
    bx = x * beta
    with np.errstate(over="ignore"):
        soft = np.log1p(np.exp(bx)) / beta
    return np.where(bx > threshold, x, soft)


for dt in FLOATS:
    add("softplus", [T(dt, rnd((3, 4), -6, 6))], softplus_ref, tag=dt)
    add("softplus", [T(dt, [-100.0, -30.0, -20.0, 19.9, 20.0, 20.1, 30.0, 100.0, 0.0, -0.0, INF,
                            -INF, NAN])], softplus_ref, tag=dt + "-far")
add("softplus", [T("f32", rnd((3, 4), -6, 6))], softplus_ref, params={"beta": 2.0, "threshold": 5.0},
    tag="f32-beta2-thr5")
add("softplus", [T("f64", rnd((3, 4), -6, 6))], softplus_ref, params={"beta": 0.5, "threshold": 1.0},
    tag="f64-beta-half")
add("softplus", [T("f32", rnd((6,), -6, 6))], softplus_ref, params={"beta": -1.5, "threshold": 3.0},
    tag="f32-beta-neg")
add("softplus", [T("f32", rnd((4, 3), -6, 6), view=("transpose", 0, 1))], softplus_ref,
    tag="f32-transpose")
add("softplus", [T("bf16", rnd((2, 8), -6, 6), view=("slice", 1, 0, 8, 3))], softplus_ref,
    tag="bf16-slice3")
add("softplus", [T("f32", rnd((1, 4), -6, 6), view=("expand", [3, 4]))], softplus_ref,
    tag="f32-expand")
add("softplus", [T("f32", rnd((1000,), -40, 40))], softplus_ref, tag="f32-long")
add("softplus", [T("f32", np.zeros((0, 2)))], softplus_ref, tag="f32-empty")
add("softplus", [T("i32", [1])], error="EM_ERR_DTYPE", tag="i32-err")
add("softplus", [T("f32", [1.0])], params={"beta": 0.0}, error="EM_ERR_ARG", tag="beta0-err")
add("softplus", [T("f32", [1.0])], params={"threshold": NAN}, error="EM_ERR_ARG",
    tag="thr-nan-err")

# ---- isnan / isinf / isfinite (bool results; ints and bool: constants) ----
CLASS = {"isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite}
SPECIAL = [0.0, -0.0, 1.5, -2.0, INF, -INF, NAN, 1e-40, 3e38]
for op, ref in CLASS.items():
    for dt in FLOATS:  # f16: its largest finite value in place of 3e38
        add(op, [T(dt, SPECIAL[:-1] + [65504.0 if dt == "f16" else SPECIAL[-1]])], ref,
            out_dtypes="bool", tag=dt)
    add(op, [T("f32", np.array(SPECIAL * 4).reshape(6, 6), view=("transpose", 0, 1))], ref,
        out_dtypes="bool", tag="f32-transpose")
    add(op, [T("f16", np.array(SPECIAL[:-1] * 2), view=("slice", 0, 1, 16, 2))], ref,
        out_dtypes="bool", tag="f16-slice2")
    add(op, [T("f64", [NAN, 1.0], view=("expand", [3, 2]))], ref, out_dtypes="bool",
        tag="f64-expand")
    add(op, [T("bf16", np.array(SPECIAL * 8), view=("flip", [0]))], ref, out_dtypes="bool",
        tag="bf16-flip-long")
    add(op, [T("f32", np.where(rndb((300,)), NAN, rnd((300,))))], ref, out_dtypes="bool",
        tag="f32-long")
    for dt in ("i64", "i32", "u8"):
        add(op, [T(dt, rndi((2, 3), 0, 5))], lambda x, ref=ref: ref(x.astype(np.float64)),
            out_dtypes="bool", tag=dt)
    add(op, [T("bool", [True, False])], lambda x, ref=ref: ref(x.astype(np.float64)),
        out_dtypes="bool", tag="bool")
    add(op, [T("f32", np.zeros((0,)))], ref, out_dtypes="bool", tag="f32-empty")
    add(op, [T("f64", NAN)], ref, out_dtypes="bool", tag="f64-0d")

# ---- nan_to_num (PyTorch's defaults: 0, the dtype's largest and lowest finite values) ----
FMAX = {"f32": 3.4028234663852886e38, "f64": 1.7976931348623157e308, "f16": 65504.0,
        "bf16": 3.3895313892515355e38}


def nan_to_num_ref(dt):
    def ref(x, nan=0.0, posinf=None, neginf=None):
        pi = FMAX[dt] if posinf is None else posinf
        ni = -FMAX[dt] if neginf is None else neginf
        return np.where(np.isnan(x), nan, np.where(x == INF, pi, np.where(x == -INF, ni, x)))
    return ref


for dt in FLOATS:
    add("nan_to_num", [T(dt, [NAN, INF, -INF, 1.5, -0.0, -2.0])], nan_to_num_ref(dt),
        tag=dt + "-defaults")
    add("nan_to_num", [T(dt, [NAN, INF, -INF, 1.5, 0.0])], nan_to_num_ref(dt),
        params={"nan": -1.0, "posinf": 100.0, "neginf": -50.0}, tag=dt + "-values")
add("nan_to_num", [T("f32", [NAN, INF, -INF, 2.0])], nan_to_num_ref("f32"),
    params={"nan": 7.0, "posinf": 1e300}, tag="f32-overflowing-posinf")
add("nan_to_num", [T("f16", [NAN, INF, -INF])], nan_to_num_ref("f16"),
    params={"neginf": -1e5}, tag="f16-overflowing-neginf")
add("nan_to_num", [T("f32", np.array([NAN, INF, -INF, 3.0] * 6).reshape(4, 6),
                     view=("transpose", 0, 1))], nan_to_num_ref("f32"),
    params={"nan": 0.5}, tag="f32-transpose")
add("nan_to_num", [T("bf16", [NAN, -INF, 1.0], view=("expand", [2, 3]))],
    nan_to_num_ref("bf16"), tag="bf16-expand")
add("nan_to_num", [T("f64", np.where(rndb((500,)), INF, rnd((500,))), view=("slice", 0, 1, 500, 3))],
    nan_to_num_ref("f64"), tag="f64-slice3")
add("nan_to_num", [T("i32", [1, -2, 3])], lambda x, **kw: x, params={"nan": 9.0}, tag="i32-copy")
add("nan_to_num", [T("bool", [True, False])], lambda x, **kw: x, tag="bool-copy")
add("nan_to_num", [T("f32", np.zeros((0, 4)))], nan_to_num_ref("f32"), tag="f32-empty")
add("nan_to_num", [T("f64", rnd((3, 4)))], nan_to_num_ref("f64"), tag="f64-finite")

# ---- atan2 (float only, broadcast) ----
for dt in FLOATS:
    add("atan2", [T(dt, rnd((2, 3), -3, 3)), T(dt, rnd((2, 3), -3, 3))], np.arctan2)
add("atan2", [T("f64", [0.0, -0.0, 0.0, -0.0, 1.0, -1.0, INF, -INF, INF, NAN, 1.0, 0.0]),
              T("f64", [0.0, 0.0, -0.0, -0.0, 0.0, 0.0, INF, INF, -INF, 1.0, NAN, -1.0])],
    np.arctan2, tag="f64-special")
add("atan2", [T("f32", [0.0, -0.0, 1.0, -1.0, INF, -INF, 2.0]),
              T("f32", [-1.0, -1.0, -INF, INF, 3.0, -INF, 0.0])], np.arctan2, tag="f32-special")
add("atan2", [T("f32", rnd((3, 1))), T("f32", rnd((4,)))], np.arctan2, tag="f32-bcast")
add("atan2", [T("f32", rnd((3, 2)), view=("transpose", 0, 1)),
              T("f32", rnd((2, 6)), view=("slice", 1, 0, 6, 2))], np.arctan2, tag="f32-views")
add("atan2", [T("bf16", rnd((2, 3))), T("bf16", 0.5)], np.arctan2, tag="bf16-0d")
add("atan2", [T("f32", rnd((0, 3))), T("f32", rnd((3,)))], np.arctan2, tag="f32-empty")
add("atan2", [T("i32", [1]), T("i32", [2])], error="EM_ERR_DTYPE", tag="i32-err")
add("atan2", [T("f32", [1.0]), T("f64", [2.0])], error="EM_ERR_DTYPE", tag="dtype-err")
add("atan2", [T("f32", rnd((2,))), T("f32", rnd((3,)))], error="EM_ERR_SHAPE", tag="shape-err")

# ---- logical_xor (any dtypes: nonzero is true, NaN too) ----
xor_ref = lambda a, b: np.logical_xor(a != 0, b != 0)
add("logical_xor", [T("bool", [True, True, False, False]), T("bool", [True, False, True, False])],
    xor_ref, out_dtypes="bool", tag="table")
add("logical_xor", [T("bool", rndb((2, 3))), T("bool", rndb((3,)))], xor_ref, out_dtypes="bool",
    tag="bcast")
add("logical_xor", [T("bool", rndb((3, 2)), view=("transpose", 0, 1)), T("bool", True)],
    xor_ref, out_dtypes="bool", tag="transpose-0d")
add("logical_xor", [T("f32", [0.0, -0.0, NAN, 2.0, 0.0]), T("f32", [0.0, 1.0, 0.0, INF, NAN])],
    xor_ref, out_dtypes="bool", tag="f32")
add("logical_xor", [T("i32", [0, 3, -1, 0]), T("f64", [0.0, 0.0, 2.5, NAN])], xor_ref,
    out_dtypes="bool", tag="i32-f64-mixed")
add("logical_xor", [T("u8", rndi((2, 3), 0, 3)), T("bool", rndb((2, 1)))], xor_ref,
    out_dtypes="bool", tag="u8-bool-bcast")
add("logical_xor", [T("f16", rnd((4, 6)).round(), view=("slice", 1, 0, 6, 2)),
                    T("bf16", rnd((4, 3)).round())], xor_ref, out_dtypes="bool", tag="f16-bf16-views")
add("logical_xor", [T("bool", rndb((2,))), T("bool", rndb((3,)))], error="EM_ERR_SHAPE",
    tag="shape-err")

# ---- clamp with tensor bounds (torch.clamp(x, min=lo, max=hi)) ----
def clamp_t_ref(x, lo=None, hi=None, which=None):
    if which == 1:
        lo, hi = None, lo
    r = x
    if lo is not None:
        r = np.where(np.isnan(lo), lo, np.where(np.isnan(r), r, np.maximum(r, lo)))
    if hi is not None:
        r = np.where(np.isnan(hi), hi, np.where(np.isnan(r), r, np.minimum(r, hi)))
    return r


for dt in FLOATS:
    add("clamp_tensor", [T(dt, rnd((3, 4), -3, 3)), T(dt, rnd((3, 4), -2, 0)),
                         T(dt, rnd((3, 4), 0, 2))], clamp_t_ref, tag=dt)
for dt in NUM_INTS:
    lo = 0 if dt == "u8" else -9
    add("clamp_tensor", [T(dt, rndi((3, 4), lo, 9)), T(dt, rndi((4,), lo, 2)),
                         T(dt, rndi((3, 1), 3, 9))], clamp_t_ref, tag=dt + "-bcast")
add("clamp_tensor", [T("f32", rnd((2, 3, 4), -3, 3)), T("f32", rnd((4,), -1, 0)),
                     T("f32", rnd((2, 1, 1), 0, 1))], clamp_t_ref, tag="f32-bcast3")
add("clamp_tensor", [T("f32", rnd((4,), -3, 3)), T("f32", rnd((3, 1), -1, 0)),
                     T("f32", rnd((1,), 0, 1))], clamp_t_ref, tag="f32-bounds-grow")
add("clamp_tensor", [T("f32", [NAN, 0.5, 0.5, 0.5, 5.0, -5.0, 0.5]),
                     T("f32", [0.0, NAN, 0.0, 2.0, 0.0, 0.0, -INF]),
                     T("f32", [1.0, 1.0, NAN, 1.0, 1.0, INF, INF])], clamp_t_ref, tag="f32-nan-lo-gt-hi")
add("clamp_tensor", [T("f64", rnd((3, 4), -3, 3)), T("f64", rnd((1, 4), -1, 0))], clamp_t_ref,
    tag="f64-lo-only")
add("clamp_tensor", [T("f16", rnd((3, 4), -3, 3)), T("f16", rnd((3, 1), 0, 1))], clamp_t_ref,
    params={"which": 1}, tag="f16-hi-only")
add("clamp_tensor", [T("f32", rnd((4, 3), -3, 3), view=("transpose", 0, 1)),
                     T("f32", rnd((3, 8), -2, 0), view=("slice", 1, 0, 8, 2)),
                     T("f32", rnd((1, 4), 0, 2), view=("expand", [3, 4]))], clamp_t_ref,
    tag="f32-views")
add("clamp_tensor", [T("bf16", rnd((2, 3), -3, 3), view=("flip", [1])), T("bf16", -0.5),
                     T("bf16", 0.75)], clamp_t_ref, tag="bf16-flip-0d")
add("clamp_tensor", [T("f32", rnd((0, 3))), T("f32", rnd((3,))), T("f32", rnd((1,)))],
    clamp_t_ref, tag="f32-empty")
add("clamp_tensor", [T("f32", [1.0]), T("f64", [0.0]), T("f32", [2.0])], error="EM_ERR_DTYPE",
    tag="dtype-err")
add("clamp_tensor", [T("f32", rnd((2,))), T("f32", rnd((3,)))], error="EM_ERR_SHAPE",
    tag="shape-err")
add("clamp_tensor", [T("bool", [True]), T("bool", [False])], error="EM_ERR_DTYPE", tag="bool-err")

# ---- eye and linspace (issue 14; composed in the core) ----
for dt in ("f32", "f64", "i64", "bool", "bf16"):
    add("eye", [], lambda n, m, dtype: np.eye(n, m), params={"n": 3, "m": 5, "dtype": dt}, tag=dt)
add("eye", [], lambda n, m, dtype: np.eye(n), params={"n": 4, "m": -1, "dtype": "f32"},
    tag="square")
add("eye", [], params={"n": -1, "m": 2, "dtype": "f32"}, error="EM_ERR_ARG", tag="neg-err")


def _linspace(start, end, steps, dtype):
    # torch.linspace: the first half from start, the second from end, in float64
    if steps == 1:
        return np.array([start])
    step = (end - start) / (steps - 1)
    i = np.arange(steps, dtype=np.float64)
    return np.where(i < steps // 2, start + step * i, end - step * (steps - 1 - i))


for dt, (a, b, n) in (("f32", (0.0, 1.0, 11)), ("f64", (-3.0, 7.5, 6)), ("f16", (2.0, -2.0, 5)),
                      ("bf16", (0.0, 10.0, 4)), ("f32", (1.0, 1.0, 1)), ("f32", (0.0, 1.0, 0))):
    add("linspace", [], _linspace, params={"start": a, "end": b, "steps": n, "dtype": dt},
        tag="%s-%d" % (dt, n))
add("linspace", [], params={"start": 0.0, "end": 1.0, "steps": 3, "dtype": "i64"},
    error="EM_ERR_DTYPE", tag="int-err")

# the consuming exp (appended: rows above keep their random data)
add("exp_", [T("f32", rnd((3, 3)))], np.exp, tag="f32")
add("exp_", [T("f64", rnd((3, 2)), view=("transpose", 0, 1))], np.exp, tag="f64-transpose")
add("exp_", [T("i32", rndi((5,)))], error="EM_ERR_DTYPE", tag="int-err")
