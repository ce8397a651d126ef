"""Conformance cases of the reduce family: sum mean prod max min argmax argmin var logsumexp
(whole and along a dim, with keepdim), cumsum, softmax, log_softmax, and matmul.

The references are NumPy's own reductions (np.sum, np.var with ddof, np.argmax...)
and, for matmul, common.matmul (np.matmul's semantics with exactly rounded sums)
on the float64 / int64 widened inputs. A case without "dim" calls the whole-tensor form.
"""
import warnings

import numpy as np

from common import FLOATS, T, case, matmul, rnd, rndi

CASES = []
_names = set()

# Tolerances for the half types where a reduction sums a few dozen values.
HALF_TOL = {"f16": (1e-2, 1e-2), "bf16": (4e-2, 4e-2)}


def _add(op, inputs, name, ref=None, params=None, out=None, error=None, tol=None):
    full = "reduce/%s/%s" % (op, name)
    assert full not in _names, full
    _names.add(full)
    CASES.append(case(op, inputs, ref, params=params, out_dtypes=out, error=error, tol=tol,
                      name=full))


def _axis(a, dim):
    """NumPy's axis for an ember dim: None for the whole form and for a 0-d input."""
    return None if dim is None or a.ndim == 0 else dim


def _keep(a, dim, keepdim):
    return bool(keepdim) and dim is not None and a.ndim > 0


# ---- NumPy references (params arrive as keywords) ----

def r_sum(a, dim=None, keepdim=False):
    return np.sum(a, axis=_axis(a, dim), keepdims=_keep(a, dim, keepdim))


def r_mean(a, dim=None, keepdim=False):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the mean of nothing is NaN
        return np.mean(a, axis=_axis(a, dim), keepdims=_keep(a, dim, keepdim))


def r_prod(a, dim=None, keepdim=False):
    return np.prod(a, axis=_axis(a, dim), keepdims=_keep(a, dim, keepdim))


def r_max(a, dim=None, keepdim=False):
    return np.max(a, axis=_axis(a, dim), keepdims=_keep(a, dim, keepdim))


def r_min(a, dim=None, keepdim=False):
    return np.min(a, axis=_axis(a, dim), keepdims=_keep(a, dim, keepdim))


def r_argmax(a, dim=None, keepdim=False):
    return np.argmax(a, axis=_axis(a, dim), keepdims=_keep(a, dim, keepdim))


def r_argmin(a, dim=None, keepdim=False):
    return np.argmin(a, axis=_axis(a, dim), keepdims=_keep(a, dim, keepdim))


def r_var(a, dim=None, keepdim=False, correction=1):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # n - correction <= 0
        return np.var(a, axis=_axis(a, dim), ddof=correction, keepdims=_keep(a, dim, keepdim))


def r_logsumexp(a, dim=None, keepdim=False):
    ax = _axis(a, dim)
    m = np.max(a, axis=ax, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0.0)
    r = np.log(np.sum(np.exp(a - m), axis=ax, keepdims=True)) + m
    if ax is None:
        return r.reshape(())
    return r if _keep(a, dim, keepdim) else np.squeeze(r, axis=ax)


def r_cumsum(a, dim=0):
    return np.cumsum(a, axis=_axis(a, dim)).reshape(a.shape)


def r_softmax(a, dim=-1):
    ax = _axis(a, dim)
    e = np.exp(a - np.max(a, axis=ax, keepdims=True, initial=-np.inf))
    return e / np.sum(e, axis=ax, keepdims=True)


def r_log_softmax(a, dim=-1):
    ax = _axis(a, dim)
    s = a - np.max(a, axis=ax, keepdims=True, initial=-np.inf)
    return s - np.log(np.sum(np.exp(s), axis=ax, keepdims=True))


REFS = {"sum": r_sum, "mean": r_mean, "prod": r_prod, "max": r_max, "min": r_min,
        "argmax": r_argmax, "argmin": r_argmin, "var": r_var, "logsumexp": r_logsumexp}


def _out(op, dt):
    """The result dtype: sum/prod of ints and argmax/argmin give i64."""
    if op in ("argmax", "argmin"):
        return "i64"
    if op in ("any", "all"):
        return "bool"
    if op in ("sum", "prod", "cumsum") and dt not in FLOATS:
        return "i64"
    return dt


def red(op, t, name, dim=None, keepdim=None, tol=None, **extra):
    if t.dtype == "bf16" and dim is None and name.startswith("whole/"):
        # common.round_bf16 cannot round a 0-d array yet (NumPy 1.24 scalar casting), so the
        # bf16 "whole" cases reduce the last dim instead.
        dim, name = -1, "dim-1/bf16"
    params = dict(extra)
    if dim is not None:
        params["dim"] = dim
    if keepdim is not None:
        params["keepdim"] = keepdim
    _add(op, [t], name, REFS[op], params=params, out=_out(op, t.dtype), tol=tol)


def red_err(op, t, name, error, **params):
    _add(op, [t], name, params=params, error=error)


# ---- sum ----
for dt in FLOATS:
    red("sum", T(dt, rnd((3, 4))), "whole/" + dt, tol=HALF_TOL.get(dt))
for dt in ("i64", "i32", "i16", "i8", "u8"):
    red("sum", T(dt, rndi((3, 4), 0 if dt == "u8" else -50, 50)), "whole/" + dt)
for d, k in ((0, False), (1, True), (2, False), (-1, True), (-3, False), (-2, True)):
    red("sum", T("f32", rnd((2, 3, 4))), "dim%d_keep%d/f32" % (d, k), dim=d, keepdim=k)
for dt in ("f64", "f16", "bf16", "i32"):
    red("sum", T(dt, rnd((4, 5)) if dt in FLOATS else rndi((4, 5))), "dim1/" + dt, dim=1,
        tol=HALF_TOL.get(dt))
red("sum", T("f32", 2.5), "0d/whole")
red("sum", T("f32", -1.5), "0d/dim0", dim=0)
red("sum", T("i32", 7), "0d/dim-1_keep", dim=-1, keepdim=True)
red("sum", T("f32", np.zeros((0, 3))), "empty/whole")
red("sum", T("f32", np.zeros((0, 3))), "empty/dim0", dim=0)
red("sum", T("f32", np.zeros((0, 3))), "empty/dim1_keep", dim=1, keepdim=True)
red("sum", T("i64", np.zeros((2, 0), dtype=np.int64)), "empty/i64_dim1", dim=1)
red("sum", T("f32", rnd((4, 3)), view=("transpose", 0, 1)), "view/transpose_dim1", dim=1)
red("sum", T("f32", rnd((6, 5)), view=("slice", 0, 1, 6, 2)), "view/slice_whole")
red("sum", T("f64", rnd((1, 4)), view=("expand", [3, 4])), "view/expand_dim0", dim=0)
red("sum", T("f32", rnd((3, 4)), view=("flip", [1])), "view/flip_dim-1", dim=-1)
red("sum", T("f32", [[1.0, np.nan, 2.0], [np.inf, 1.0, 2.0]]), "nan_inf_dim1", dim=1)
red("sum", T("i64", [2**62, 2**62, 2**62, 1]), "i64_wraps")
red_err("sum", T("bool", [[True, False]]), "bool", "EM_ERR_DTYPE")
red_err("sum", T("f32", rnd((2, 3))), "dim_out_of_range", "EM_ERR_ARG", dim=2)
red_err("sum", T("f32", 1.0), "0d_dim1", "EM_ERR_ARG", dim=1)

# ---- mean ----
for dt in FLOATS:
    red("mean", T(dt, rnd((3, 5))), "whole/" + dt, tol=HALF_TOL.get(dt))
for d, k in ((0, True), (1, False), (-1, False)):
    red("mean", T("f32", rnd((3, 5))), "dim%d_keep%d/f32" % (d, k), dim=d, keepdim=k)
red("mean", T("bf16", rnd((2, 3, 4))), "dim1/bf16", dim=1, tol=HALF_TOL["bf16"])
red("mean", T("f32", 4.0), "0d/dim0", dim=0)
red("mean", T("f32", np.zeros((0,))), "empty/whole")
red("mean", T("f64", np.zeros((2, 0))), "empty/dim1", dim=1)
red("mean", T("f32", rnd((5, 4)), view=("transpose", 0, 1)), "view/transpose_dim0", dim=0)
red("mean", T("f32", [1.0, np.nan, 3.0]), "nan")
red_err("mean", T("i64", [1, 2, 3]), "int", "EM_ERR_DTYPE")
red_err("mean", T("bool", [True]), "bool", "EM_ERR_DTYPE")

# ---- prod ----
for dt in FLOATS:
    red("prod", T(dt, rnd((2, 3), 0.5, 1.5)), "whole/" + dt)
red("prod", T("i32", rndi((3, 4), -3, 4)), "dim1/i32", dim=1)
red("prod", T("i64", rndi((3, 4), -3, 4)), "dim0_keep/i64", dim=0, keepdim=True)
red("prod", T("u8", rndi((2, 5), 0, 6)), "whole/u8")
red("prod", T("f32", np.zeros((0, 2))), "empty/whole")
red("prod", T("i32", np.zeros((3, 0), dtype=np.int32)), "empty/dim1", dim=1)
red("prod", T("f64", rnd((4, 3), 0.5, 2.0), view=("slice", 0, 0, 4, 2)), "view/slice_dim-1",
    dim=-1)
red("prod", T("f32", -3.0), "0d")
red_err("prod", T("bool", [True, True]), "bool", "EM_ERR_DTYPE")

# ---- max / min ----
for op in ("max", "min"):
    for dt in FLOATS + ("i64", "i32", "i8", "u8"):
        vals = rnd((3, 4)) if dt in FLOATS else rndi((3, 4), 0 if dt == "u8" else -20, 20)
        red(op, T(dt, vals), "whole/" + dt)
    for d, k in ((0, False), (1, True), (-1, False)):
        red(op, T("f32", rnd((3, 4))), "dim%d_keep%d/f32" % (d, k), dim=d, keepdim=k)
    red(op, T("i32", rndi((2, 3, 4), -9, 9)), "dim-2/i32", dim=-2)
    red(op, T("i64", [2**62 + 1, 2**62 + 3, 2**62 + 2]), "i64_large")
    red(op, T("f32", [[1.0, np.nan, 3.0], [1.0, 2.0, -np.inf]]), "nan_dim1", dim=1)
    red(op, T("f64", [1.0, 2.0, np.nan, 0.5]), "nan_whole")
    red(op, T("f32", 3.5), "0d/dim-1", dim=-1)
    red(op, T("f32", np.zeros((0, 4))), "empty_other_dim", dim=1)
    red(op, T("f32", rnd((4, 3)), view=("transpose", 0, 1)), "view/transpose_dim1", dim=1)
    red(op, T("i32", rndi((1, 5)), view=("expand", [3, 5])), "view/expand_dim0", dim=0)
    red_err(op, T("f32", np.zeros((0,))), "empty_whole", "EM_ERR_SHAPE")
    red_err(op, T("f32", np.zeros((2, 0))), "empty_dim1", "EM_ERR_SHAPE", dim=1)
    red_err(op, T("bool", [True, False]), "bool", "EM_ERR_DTYPE")

# ---- argmax / argmin ----
for op in ("argmax", "argmin"):
    for dt in ("f32", "f64", "f16", "bf16", "i64", "i32", "u8"):
        vals = rnd((3, 4)) if dt in FLOATS else rndi((3, 4), 0, 30)
        red(op, T(dt, vals), "whole/" + dt)
    for d, k in ((0, True), (1, False), (-1, True)):
        red(op, T("f32", rnd((3, 4))), "dim%d_keep%d/f32" % (d, k), dim=d, keepdim=k)
    red(op, T("i32", [[1, 3, 3, 0], [0, 0, 2, 2]]), "ties_first", dim=1)
    red(op, T("i64", [4, 1, 4, 1]), "ties_whole")
    red(op, T("f32", [[1.0, np.nan, 3.0, np.nan], [5.0, 2.0, 9.0, -1.0]]), "nan_dim1", dim=1)
    red(op, T("f32", [2.0, 1.0, np.nan]), "nan_whole")
    red(op, T("f32", rnd((3, 4)), view=("flip", [0, 1])), "view/flip_whole")
    red(op, T("f64", rnd((5, 3)), view=("slice", 0, 4, None, -2)), "view/slice_neg_dim0", dim=0)
    red(op, T("f32", 1.0), "0d/whole")
    red(op, T("f32", 1.0), "0d/dim0", dim=0)
    red_err(op, T("f32", np.zeros((3, 0))), "empty_dim1", "EM_ERR_SHAPE", dim=-1)
    red_err(op, T("i64", np.zeros((0,), dtype=np.int64)), "empty_whole", "EM_ERR_SHAPE")

# ---- var ----
for dt in FLOATS:
    red("var", T(dt, rnd((3, 4))), "whole/" + dt, tol=HALF_TOL.get(dt))
for c in (0, 1, 2):
    red("var", T("f32", rnd((4, 5))), "dim1_corr%d" % c, dim=1, correction=c)
red("var", T("f64", rnd((2, 3, 4))), "dim0_keep/f64", dim=0, keepdim=True)
red("var", T("f32", rnd((2, 3, 4))), "dim-2/f32", dim=-2, correction=0)
red("var", T("f32", rnd((3, 1))), "n1_corr1", dim=1)
red("var", T("f32", [1.0, 2.0]), "n_eq_corr", correction=2)
red("var", T("f32", np.zeros((0,))), "empty/whole")
red("var", T("f32", 2.0), "0d/corr0", correction=0)
red("var", T("f32", rnd((5, 4)), view=("transpose", 0, 1)), "view/transpose_dim1", dim=1)
red("var", T("f32", [1.0, np.nan, 2.0]), "nan")
red_err("var", T("i32", [1, 2, 3]), "int", "EM_ERR_DTYPE")

# ---- logsumexp ----
for dt in FLOATS:
    red("logsumexp", T(dt, rnd((3, 4))), "whole/" + dt, tol=HALF_TOL.get(dt))
for d, k in ((0, False), (1, True), (-1, False)):
    red("logsumexp", T("f32", rnd((3, 4))), "dim%d_keep%d/f32" % (d, k), dim=d, keepdim=k)
red("logsumexp", T("f32", [[1000.0, 1000.0, 999.0], [-1000.0, -1001.0, -1000.5]]), "large",
    dim=1)
red("logsumexp", T("f64", [[-np.inf, -np.inf], [np.inf, 1.0]]), "inf_rows", dim=1)
red("logsumexp", T("f32", [1.0, np.nan]), "nan")
red("logsumexp", T("f32", np.zeros((0, 2))), "empty/whole")
red("logsumexp", T("f32", np.zeros((0, 2))), "empty/dim0", dim=0)
red("logsumexp", T("f32", 0.5), "0d/dim0", dim=0)
red("logsumexp", T("f32", rnd((4, 6)), view=("slice", 1, 0, 6, 2)), "view/slice_dim1", dim=1)
red_err("logsumexp", T("i64", [1, 2]), "int", "EM_ERR_DTYPE")

# ---- layouts the cpu backend reduces natively (issue 13) ----
# a permuted 4-d tensor (NCHW storage read as NHWC) over each dim; f16/bf16 reductions along
# a middle dim, of a transposed input, and with a stride-0 dim; long rows and columns.
for op in ("sum", "max", "argmax", "var", "logsumexp"):
    for d in range(4):
        red(op, T("f32", rnd((2, 3, 4, 5)), view=("permute", [0, 2, 3, 1])),
            "view/permute4d_dim%d" % d, dim=d)
for op in ("sum", "mean", "prod", "max", "min", "argmax", "argmin", "var", "logsumexp"):
    for dt in ("f16", "bf16"):
        tol = HALF_TOL[dt] if op not in ("argmax", "argmin") else None
        red(op, T(dt, rnd((3, 5, 4), 0.5, 1.5) if op == "prod" else rnd((3, 5, 4))),
            "dim1/%s_3d" % dt, dim=1, tol=tol)
        red(op, T(dt, rnd((5, 3)), view=("transpose", 0, 1)), "view/transpose_dim1/" + dt,
            dim=1, tol=tol)
for dt in ("f16", "bf16"):
    red("sum", T(dt, rnd((1, 6)), view=("expand", [4, 6])), "view/expand_dim1/" + dt, dim=1,
        tol=HALF_TOL[dt])
    red("mean", T(dt, rnd((2, 3, 4)), view=("permute", [2, 0, 1])), "view/permute_whole/" + dt,
        tol=HALF_TOL[dt])
red("sum", T("f32", rnd((3, 700))), "long_rows/f32", dim=1)
red("sum", T("f32", rnd((700, 3))), "long_cols/f32", dim=0)
red("var", T("f64", rnd((300, 9)), view=("slice", 0, 0, 300, 3)), "view/slice_step_dim0/f64",
    dim=0)

# ---- cumsum ----
for dt in FLOATS:
    _add("cumsum", [T(dt, rnd((3, 4)))], "dim1/" + dt, r_cumsum, params={"dim": 1},
         tol=HALF_TOL.get(dt))
for dt in ("i64", "i32", "u8"):
    _add("cumsum", [T(dt, rndi((3, 4), 0, 9))], "dim0/" + dt, r_cumsum, params={"dim": 0},
         out="i64")
_add("cumsum", [T("f32", rnd((2, 3, 4)))], "dim-2", r_cumsum, params={"dim": -2})
_add("cumsum", [T("f32", rnd((4, 3)), view=("transpose", 0, 1))], "view/transpose",
     r_cumsum, params={"dim": 1})
_add("cumsum", [T("f64", rnd((5, 2)), view=("flip", [0]))], "view/flip", r_cumsum,
     params={"dim": 0})
for dt in FLOATS:
    _add("cumsum", [T(dt, rnd((4, 3, 5)), view=("permute", [2, 0, 1]))], "view/permute_dim1/" + dt,
         r_cumsum, params={"dim": 1}, tol=HALF_TOL.get(dt))
    _add("cumsum", [T(dt, rnd((6, 4)))], "dim0/" + dt, r_cumsum, params={"dim": 0},
         tol=HALF_TOL.get(dt))
_add("cumsum", [T("f32", 3.0)], "0d", r_cumsum, params={"dim": 0})
_add("cumsum", [T("f32", np.zeros((0, 3)))], "empty", r_cumsum, params={"dim": 1})
_add("cumsum", [T("bool", [True, False])], "bool", params={"dim": 0}, error="EM_ERR_DTYPE")
_add("cumsum", [T("f32", rnd((2, 2)))], "dim_out_of_range", params={"dim": -3},
     error="EM_ERR_ARG")

# ---- softmax / log_softmax ----
for op, ref in (("softmax", r_softmax), ("log_softmax", r_log_softmax)):
    for dt in FLOATS:
        _add(op, [T(dt, rnd((3, 5)))], "dim-1/" + dt, ref, params={"dim": -1})
    _add(op, [T("f32", rnd((3, 4, 2)))], "dim0", ref, params={"dim": 0})
    _add(op, [T("f64", rnd((3, 4, 2)))], "dim1", ref, params={"dim": 1})
    _add(op, [T("f32", [[1000.0, 999.0, -1000.0], [-1e4, -1e4, -1e4]])], "large", ref,
         params={"dim": 1})
    _add(op, [T("f32", [[-np.inf, 0.0, 1.0], [2.0, -np.inf, -np.inf]])], "neg_inf", ref,
         params={"dim": 1})
    _add(op, [T("f32", [[1.0, np.nan], [1.0, 2.0]])], "nan", ref, params={"dim": 1})
    _add(op, [T("f32", 2.0)], "0d", ref, params={"dim": 0})
    _add(op, [T("f32", np.zeros((2, 0)))], "empty", ref, params={"dim": 1})
    _add(op, [T("f32", rnd((4, 3)), view=("transpose", 0, 1))], "view/transpose", ref,
         params={"dim": 1})
    _add(op, [T("f32", rnd((1, 4)), view=("expand", [3, 4]))], "view/expand", ref,
         params={"dim": 0})
    for dt in FLOATS:
        _add(op, [T(dt, rnd((5, 3)), view=("transpose", 0, 1))], "view/transpose_dim0/" + dt,
             ref, params={"dim": 0}, tol=HALF_TOL.get(dt))
        _add(op, [T(dt, rnd((2, 3, 4)), view=("permute", [2, 0, 1]))],
             "view/permute_dim-1/" + dt, ref, params={"dim": -1}, tol=HALF_TOL.get(dt))
    _add(op, [T("i32", [1, 2])], "int", params={"dim": 0}, error="EM_ERR_DTYPE")


# ---- matmul ----
def r_matmul(a, b):
    return matmul(a, b)  # exactly rounded sums: no dependence on the BLAS kernel


def mm(name, a, b, tol=None):
    _add("matmul", [a, b], name, r_matmul, tol=tol)


def mm_err(name, a, b, error):
    _add("matmul", [a, b], name, error=error)


for dt in FLOATS:
    mm("2d/" + dt, T(dt, rnd((3, 4))), T(dt, rnd((4, 5))), tol=HALF_TOL.get(dt))
for dt in ("i64", "i32", "i8"):
    mm("2d/" + dt, T(dt, rndi((3, 4))), T(dt, rndi((4, 2))))
mm("i32_wraps", T("i32", [[2**20, 2**20]]), T("i32", [[2**12], [2**12]]))
mm("1d_2d", T("f32", rnd((4,))), T("f32", rnd((4, 3))))
mm("2d_1d", T("f32", rnd((2, 4))), T("f32", rnd((4,))))
mm("1d_1d", T("f64", rnd((5,))), T("f64", rnd((5,))))
mm("1d_3d", T("f32", rnd((3,))), T("f32", rnd((2, 3, 4))))
mm("3d_1d", T("f32", rnd((2, 3, 4))), T("f32", rnd((4,))))
mm("batched", T("f32", rnd((2, 3, 4))), T("f32", rnd((2, 4, 5))))
mm("batch_bcast_3d_2d", T("f32", rnd((2, 3, 4))), T("f32", rnd((4, 2))))
mm("batch_bcast_2d_3d", T("f64", rnd((3, 4))), T("f64", rnd((2, 4, 2))))
mm("batch_bcast_both", T("f32", rnd((2, 1, 3, 4))), T("f32", rnd((3, 4, 2))))
mm("batch_bcast_i64", T("i64", rndi((1, 2, 2, 3))), T("i64", rndi((2, 1, 3, 2))))
mm("view/transpose_a", T("f32", rnd((4, 3)), view=("transpose", 0, 1)), T("f32", rnd((4, 2))))
mm("view/transpose_b", T("f32", rnd((2, 4))), T("f32", rnd((5, 4)), view=("transpose", 0, 1)))
mm("view/slice_a", T("f64", rnd((6, 3)), view=("slice", 0, 0, 6, 2)), T("f64", rnd((3, 3))))
mm("view/expand_b", T("f32", rnd((2, 3, 4))),
   T("f32", rnd((1, 4, 2)), view=("expand", [2, 4, 2])))
mm("view/flip_b", T("f32", rnd((2, 3))), T("f32", rnd((3, 2)), view=("flip", [0])))
mm("k0", T("f32", np.zeros((2, 0))), T("f32", np.zeros((0, 3))))
mm("k0_1d", T("i64", np.zeros((0,), dtype=np.int64)), T("i64", np.zeros((0,), dtype=np.int64)))
mm("m0", T("f32", np.zeros((0, 3))), T("f32", rnd((3, 2))))
mm("batch0", T("f32", np.zeros((0, 2, 3))), T("f32", rnd((3, 2))))
mm_err("inner_mismatch", T("f32", rnd((2, 3))), T("f32", rnd((4, 5))), "EM_ERR_SHAPE")
mm_err("1d_mismatch", T("f32", rnd((3,))), T("f32", rnd((4,))), "EM_ERR_SHAPE")
mm_err("batch_mismatch", T("f32", rnd((2, 2, 3))), T("f32", rnd((3, 3, 2))), "EM_ERR_SHAPE")
mm_err("0d", T("f32", 1.0), T("f32", rnd((3,))), "EM_ERR_SHAPE")
mm_err("bool", T("bool", [[True]]), T("bool", [[False]]), "EM_ERR_DTYPE")
mm_err("dtype_mismatch", T("f32", rnd((2, 2))), T("f64", rnd((2, 2))), "EM_ERR_DTYPE")


# matmul, nn.Linear's x @ W^T on [B, T, C] (appended last: the family's random stream of the
# cases above stays as it was): the batch folds into one GEMM's rows (cpu_matmul), sizes
# past the packed GEMM's small-product cutoff; and layouts that must not fold. f32 sums of 20-40
# products of magnitude up to 4 in any order (BLAS kernels differ) are within 3e-5 of exact.
K_TOL = dict(HALF_TOL, f32=(1e-5, 3e-5))
for dt in FLOATS:
    mm("linear_3d_wt/" + dt, T(dt, rnd((3, 17, 40))),
       T(dt, rnd((33, 40)), view=("transpose", 0, 1)), tol=K_TOL.get(dt))
mm("linear_padded_rows", T("f32", rnd((3, 17, 44)), view=("slice", 2, 0, 40, 1)),
   T("f32", rnd((33, 40)), view=("transpose", 0, 1)), tol=K_TOL["f32"])
mm("linear_x_transposed_items", T("f64", rnd((3, 40, 17)), view=("transpose", 1, 2)),
   T("f64", rnd((40, 33))))
mm("linear_4d_partial_bcast", T("f32", rnd((2, 3, 9, 21))), T("f32", rnd((2, 1, 21, 17))),
   tol=K_TOL["f32"])
mm("linear_4d_bcast_outer", T("f32", rnd((2, 3, 9, 21))), T("f32", rnd((3, 21, 17))),
   tol=K_TOL["f32"])


# ---- issue 14's composed reductions (appended last, as above): std, any / all, and sums and
# means over several dims ----
def r_std(a, dim=None, keepdim=False, correction=1):
    return np.sqrt(r_var(a, dim, keepdim, correction))


def r_any(a, dim=None, keepdim=False):
    return np.any(a != 0, axis=_axis(a, dim), keepdims=_keep(a, dim, keepdim))


def r_all(a, dim=None, keepdim=False):
    return np.all(a != 0, axis=_axis(a, dim), keepdims=_keep(a, dim, keepdim))


def r_sum_dims(a, dims, keepdim=False):
    return np.sum(a, axis=tuple(dims) if dims else None, keepdims=bool(keepdim))


def r_mean_dims(a, dims, keepdim=False):
    return np.mean(a, axis=tuple(dims) if dims else None, keepdims=bool(keepdim))


REFS.update(std=r_std, any=r_any, all=r_all)
for dt in FLOATS:
    red("std", T(dt, rnd((3, 4))), "whole/" + dt, tol=HALF_TOL.get(dt))
red("std", T("f32", rnd((4, 5))), "dim1_corr0", dim=1, correction=0)
red("std", T("f64", rnd((2, 3, 4))), "dim0_keep/f64", dim=0, keepdim=True)
red("std", T("f32", rnd((5, 4)), view=("transpose", 0, 1)), "view/transpose_dim1", dim=1)
for op in ("any", "all"):
    for dt in ("f32", "f64", "i64", "bool", "f16"):
        vals = rnd((3, 4)) * (rnd((3, 4)) > 0)  # about half zeros
        red(op, T(dt, vals != 0 if dt == "bool" else vals), "whole/" + dt)
        red(op, T(dt, vals != 0 if dt == "bool" else vals), "dim1/" + dt, dim=1)
    red(op, T("f32", np.ones((2, 3))), "ones_keep", dim=0, keepdim=True)
    red(op, T("f32", [0.0, np.nan]), "nan")
    red(op, T("f32", np.zeros((0, 3))), "empty/whole")
    red(op, T("i32", rndi((4, 3), 0, 2)), "view/transpose_dim0", dim=0)
_add("sum_dims", [T("f32", rnd((2, 3, 4)))], "02", r_sum_dims, params={"dims": [0, 2]})
_add("sum_dims", [T("f64", rnd((2, 3, 4)))], "neg_keep", r_sum_dims,
     params={"dims": [-1, 1], "keepdim": True})
_add("sum_dims", [T("f32", rnd((2, 3, 4)), view=("permute", [2, 0, 1]))], "view_permute",
     r_sum_dims, params={"dims": [1, 2]})
_add("sum_dims", [T("i64", rndi((2, 3, 4), -5, 5))], "i64_all", r_sum_dims,
     params={"dims": [0, 1, 2]}, out="i64")
_add("sum_dims", [T("f32", rnd((2, 3)))], "repeat", params={"dims": [1, -1]},
     error="EM_ERR_ARG")
_add("sum_dims", [T("f32", rnd((2, 3)))], "out_of_range", params={"dims": [2]},
     error="EM_ERR_ARG")
for dt in FLOATS:
    _add("mean_dims", [T(dt, rnd((4, 3, 5)))], "02/" + dt, r_mean_dims, params={"dims": [0, 2]},
         tol=HALF_TOL.get(dt))
_add("mean_dims", [T("f32", rnd((16, 3, 4, 4)))], "bn_stats_keep", r_mean_dims,
     params={"dims": [0, 2, 3], "keepdim": True})


# ---- cumprod / cummax / cummin (appended: the cases above keep their random numbers) ----

def r_cumprod(a, dim=0):
    return np.cumprod(a, axis=_axis(a, dim)).reshape(a.shape)


def _cum_ext(a, dim, is_max):
    """torch.cummax / cummin: an element >= (<=) the running value, or NaN, takes over."""
    if a.ndim == 0:
        return a.copy(), np.zeros((), np.int64)
    x = np.moveaxis(a, dim, -1)
    v = np.empty_like(x)
    ix = np.zeros(x.shape, np.int64)
    for head in np.ndindex(x.shape[:-1]):
        m, mi = None, 0
        for j, e in enumerate(x[head]):
            if j == 0 or e != e or (e >= m if is_max else e <= m):
                m, mi = e, j
            v[head + (j,)] = m
            ix[head + (j,)] = mi
    return np.moveaxis(v, -1, dim), np.moveaxis(ix, -1, dim)


def r_cummax(a, dim=0, want=0):
    v, i = _cum_ext(a, dim, True)
    return (v, i) if want == 0 else v if want == 1 else i


def r_cummin(a, dim=0, want=0):
    v, i = _cum_ext(a, dim, False)
    return (v, i) if want == 0 else v if want == 1 else i


def _near1(shape):
    return 1.0 + 0.02 * rnd(shape, -1.0, 1.0)


for dt in FLOATS:
    _add("cumprod", [T(dt, rnd((3, 4), 0.5, 1.5))], "dim1/" + dt, r_cumprod,
         params={"dim": 1}, tol=HALF_TOL.get(dt))
    _add("cumprod", [T(dt, rnd((4, 3, 5), 0.5, 1.5), view=("permute", [2, 0, 1]))],
         "view/permute_dim1/" + dt, r_cumprod, params={"dim": 1}, tol=HALF_TOL.get(dt))
    _add("cumprod", [T(dt, rnd((6, 10)))], "dim0/" + dt, r_cumprod, params={"dim": 0},
         tol=HALF_TOL.get(dt))
for dt in ("i64", "i32", "u8"):
    _add("cumprod", [T(dt, rndi((3, 4), 0, 5))], "dim0/" + dt, r_cumprod, params={"dim": 0},
         out="i64")
_add("cumprod", [T("i64", rndi((2, 40), 1, 1000))], "wrap/i64", r_cumprod, params={"dim": 1})
_add("cumprod", [T("f32", rnd((2, 3, 4)))], "dim-2", r_cumprod, params={"dim": -2})
_add("cumprod", [T("f32", rnd((4, 9)), view=("transpose", 0, 1))], "view/transpose",
     r_cumprod, params={"dim": 1})
_add("cumprod", [T("f64", rnd((5, 2)), view=("flip", [0]))], "view/flip", r_cumprod,
     params={"dim": 0})
_add("cumprod", [T("f32", rnd((1, 12)), view=("expand", [5, 12]))], "view/expand_dim0",
     r_cumprod, params={"dim": 0})
_add("cumprod", [T("f32", rnd((10, 6)), view=("slice", 0, 1, 10, 3))], "view/slice_step",
     r_cumprod, params={"dim": 0})
_add("cumprod", [T("f32", _near1((3, 700)))], "long_rows/f32", r_cumprod, params={"dim": 1})
_add("cumprod", [T("f64", _near1((600, 20)))], "long_cols/f64", r_cumprod, params={"dim": 0})
_add("cumprod", [T("f32", [[2.0, 0.0, 3.0, 0.0, 4.0], [0.0, 1.5, -2.0, 0.5, 1.0]])], "zeros",
     r_cumprod, params={"dim": 1})
_add("cumprod", [T("f64", [[0.0, 1.5, 2.0], [3.0, 0.0, -1.0], [0.0, 2.0, 0.0],
                          [-1.5, 0.5, 0.0]])], "zeros_dim0", r_cumprod, params={"dim": 0})
_add("cumprod", [T("f32", [[[0.0, 0.0, 2.0, 1.5], [1.2, -0.7, 0.0, 2.0]],
                          [[0.9, 1.1, -1.3, 0.8], [0.0, 0.0, 0.0, 1.0]]])], "zeros_3d",
     r_cumprod, params={"dim": -1})
_add("cumprod", [T("f32", [[1.0, np.nan, 2.0], [np.inf, 0.0, 3.0]])], "nan_inf", r_cumprod,
     params={"dim": 1})
_add("cumprod", [T("f32", 3.0)], "0d", r_cumprod, params={"dim": 0})
_add("cumprod", [T("f32", 3.0)], "0d_dim-1", r_cumprod, params={"dim": -1})
_add("cumprod", [T("f32", np.zeros((0, 3)))], "empty", r_cumprod, params={"dim": 1})
_add("cumprod", [T("f32", np.zeros((2, 0)))], "empty_dim", r_cumprod, params={"dim": 1})
_add("cumprod", [T("bool", [True, False])], "bool", params={"dim": 0}, error="EM_ERR_DTYPE")
_add("cumprod", [T("f32", rnd((2, 2)))], "dim_out_of_range", params={"dim": 2},
     error="EM_ERR_ARG")

_TIES = [[1.0, 3.0, 3.0, 2.0, 3.0, 0.5, 5.0, 5.0], [4.0, 4.0, -1.0, 4.0, 7.0, 7.0, 2.0, 7.0]]
_NANS = [[1.0, np.nan, 5.0, np.nan, 0.0, 2.0], [np.inf, -np.inf, np.nan, 3.0, -np.inf, np.nan]]
for op, ref in (("cummax", r_cummax), ("cummin", r_cummin)):
    for dt in FLOATS:
        _add(op, [T(dt, rnd((3, 5)))], "dim1/" + dt, ref, params={"dim": 1},
             out=[dt, "i64"])
        _add(op, [T(dt, rnd((4, 3, 9)), view=("permute", [2, 0, 1]))],
             "view/permute_dim1/" + dt, ref, params={"dim": 1}, out=[dt, "i64"])
        _add(op, [T(dt, _TIES)], "ties/" + dt, ref, params={"dim": 1}, out=[dt, "i64"])
        _add(op, [T(dt, _NANS)], "nan/" + dt, ref, params={"dim": 1}, out=[dt, "i64"])
        _add(op, [T(dt, np.array(_NANS).T)], "nan_dim0/" + dt, ref, params={"dim": 0},
             out=[dt, "i64"])
    for dt in ("i64", "i32", "i16", "i8", "u8"):
        _add(op, [T(dt, rndi((4, 6), 0, 4))], "dim0/" + dt, ref, params={"dim": 0},
             out=[dt, "i64"])
    _add(op, [T("bool", [[False, True, False, True], [True, False, False, True]])], "bool", ref,
         params={"dim": 1}, out=["bool", "i64"])
    _add(op, [T("f32", rnd((12, 10)))], "dim0/f32_cols", ref, params={"dim": 0},
         out=["f32", "i64"])
    _add(op, [T("f32", rnd((2, 3, 4)))], "dim-1", ref, params={"dim": -1}, out=["f32", "i64"])
    _add(op, [T("f64", rnd((9, 4)), view=("transpose", 0, 1))], "view/transpose", ref,
         params={"dim": 1}, out=["f64", "i64"])
    _add(op, [T("f32", rnd((6, 10)), view=("flip", [0]))], "view/flip", ref,
         params={"dim": 0}, out=["f32", "i64"])
    _add(op, [T("f32", rnd((1, 12)), view=("expand", [5, 12]))], "view/expand_dim0", ref,
         params={"dim": 0}, out=["f32", "i64"])
    _add(op, [T("f64", rnd((10, 6)), view=("slice", 0, 1, 10, 3))], "view/slice_step", ref,
         params={"dim": 0}, out=["f64", "i64"])
    _add(op, [T("f32", rndi((3, 700), -20, 20).astype(np.float64))], "long_rows/f32", ref,
         params={"dim": 1}, out=["f32", "i64"])
    _add(op, [T("bf16", rnd((600, 20)))], "long_cols/bf16", ref, params={"dim": 0},
         out=["bf16", "i64"])
    _add(op, [T("f32", rnd((3, 5)))], "values_only", ref, params={"dim": 1, "want": 1},
         out=["f32"])
    _add(op, [T("f32", rnd((3, 5)))], "indices_only", ref, params={"dim": 1, "want": 2},
         out=["i64"])
    _add(op, [T("f32", 3.0)], "0d", ref, params={"dim": 0}, out=["f32", "i64"])
    _add(op, [T("f32", np.zeros((0, 3)))], "empty", ref, params={"dim": 1},
         out=["f32", "i64"])
    _add(op, [T("f32", rnd((2, 2)))], "dim_out_of_range", params={"dim": -3},
         error="EM_ERR_ARG")
