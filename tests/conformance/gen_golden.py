#!/usr/bin/env python3
"""Generates golden.txt, the data of the conformance table, from cases/*.py with NumPy.

Usage: /usr/bin/python3 tests/conformance/gen_golden.py [--out FILE]

The C runner (runner.c) reads golden.txt, runs every case on `ref` and checks the outputs
against the ones NumPy computed here, then runs every case on every other device and checks
it against `ref`. golden.txt is committed; scripts/test.sh checks it is up to date (golden_compare.py).

The data must not depend on the machine that makes it. Two things in NumPy do:
- np.matmul goes through BLAS, whose kernel (and so the last bit of a float64 sum) depends on
  the CPU OpenBLAS detects and on OPENBLAS_CORETYPE: the cases use common.matmul, exactly
  rounded sums, instead;
- ufuncs (exp, log, sin, ...) have AVX2 / AVX-512 versions chosen at run time whose last bit
  differs from the portable one: this script re-runs itself with NPY_DISABLE_CPU_FEATURES
  naming every feature above NumPy's baseline (SSE3 on x86-64), so every machine runs the
  same code.
What remains is the C library's libm (exp, sin, ... of the baseline loops), which can differ
in the last bit between machines with and without FMA: golden_compare.py accepts that much.
"""
import argparse
import importlib
import os
import sys

import numpy as np

_REEXEC = "EMBER_GOLDEN_BASELINE"


def _baseline_numpy():
    """Re-executes this script with NumPy's run-time dispatched CPU features off (once)."""
    try:
        from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:  # a NumPy without run-time dispatch: nothing to turn off
        return
    on = [f for f in __cpu_dispatch__ if __cpu_features__.get(f)]
    if not on:
        return
    if os.environ.get(_REEXEC):
        raise SystemExit("gen_golden: NumPy still dispatches %s with NPY_DISABLE_CPU_FEATURES=%r"
                         % (" ".join(on), os.environ.get("NPY_DISABLE_CPU_FEATURES")))
    env = dict(os.environ, NPY_DISABLE_CPU_FEATURES=" ".join(on), **{_REEXEC: "1"})
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


_baseline_numpy()

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "cases"))

import common  # noqa: E402

FAMILIES = ["elementwise", "reduce", "layout", "nn", "norm", "quant"]
DTYPE_IDS = {"f32": 0, "f64": 1, "f16": 2, "bf16": 3, "i64": 4, "i32": 5, "i16": 6, "i8": 7,
             "u8": 8, "bool": 9}


def fmt_value(x, dt):
    if dt in common.FLOATS:
        f = float(x)
        if np.isnan(f):
            return "nan"
        if np.isinf(f):
            return "inf" if f > 0 else "-inf"
        return repr(f)
    if dt == "bool":
        return "1" if bool(x) else "0"
    return str(int(x))


def fmt_tensor(kind, dt, arr):
    arr = np.asarray(arr)
    dims = " ".join(str(d) for d in arr.shape)
    vals = " ".join(fmt_value(v, dt) for v in arr.reshape(-1))
    head = "%s %s %d" % (kind, dt, arr.ndim)
    if dims:
        head += " " + dims
    return head + " : " + vals


def fmt_param(key, v):
    if isinstance(v, str):
        vals = [str(DTYPE_IDS[v])]
    elif isinstance(v, (list, tuple)):
        vals = [fmt_value(x, "f64") if isinstance(x, float) else str(int(x)) for x in v]
    elif isinstance(v, (bool, np.bool_)):
        vals = ["1" if v else "0"]
    elif isinstance(v, (int, np.integer)):
        vals = [str(int(v))]
    else:
        vals = [fmt_value(v, "f64")]
    return "param %s %d %s" % (key, len(vals), " ".join(vals))


def fmt_view(v):
    kind = v[0]
    args = []
    for a in v[1:]:
        if isinstance(a, (list, tuple)):
            args.extend(a)
        else:
            args.append(a)
    return "view %s %d %s" % (kind, len(args),
                              " ".join("none" if a is None else str(int(a)) for a in args))


def default_name(c):
    parts = [c.op]
    parts.append(",".join(t.dtype for t in c.inputs) or "-")
    parts.append(",".join("x".join(str(d) for d in t.viewed().shape) or "0d" for t in c.inputs))
    if any(t.view for t in c.inputs):
        parts.append("view")
    if c.error:
        parts.append("err")
    return "/".join(parts)


def run_case(c):
    """Returns the list of (dtype, array) expected outputs."""
    arrays = [common.widen(t.viewed(), t.dtype) for t in c.inputs]
    with np.errstate(all="ignore"):
        res = c.ref(*arrays, **c.params)
    if not isinstance(res, (tuple, list)):
        res = [res]
    dts = c.out_dtypes
    if dts is None:
        dts = [c.inputs[0].dtype if c.inputs else c.params.get("dtype", "f32")] * len(res)
    elif isinstance(dts, str):
        dts = [dts] * len(res)
    outs = []
    for r, dt in zip(res, dts):
        r = np.asarray(r)
        if dt in common.INTS and r.dtype.kind == "f":
            r = np.trunc(r)
        with np.errstate(over="ignore", invalid="ignore"):
            outs.append((dt, common.to_dtype(r, dt)))
    return outs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "golden.txt"))
    args = ap.parse_args()
    lines = ["# golden data of the conformance table: generated by gen_golden.py from cases/*.py;",
             "# do not edit by hand."]
    names = {}
    total = 0
    for fam in FAMILIES:
        path = os.path.join(HERE, "cases", fam + ".py")
        if not os.path.exists(path):
            continue
        common.reseed(sum(map(ord, fam)))
        mod = importlib.import_module(fam)
        for c in mod.CASES:
            name = c.name or default_name(c)
            if not c.name:
                name = fam + "/" + name
            if name in names:
                if c.name:
                    raise SystemExit("duplicate case name: " + name)
                names[name] += 1
                name = "%s#%d" % (name, names[name])
            else:
                names[name] = 0
            out = ["case " + name, "op " + c.op]
            for k, v in c.params.items():
                if v is None:
                    continue
                out.append(fmt_param(k, v))
            for t in c.inputs:
                out.append(fmt_tensor("input", t.dtype, t.base))
                if t.view is not None:
                    out.append(fmt_view(t.view))
            if c.error:
                out.append("error " + c.error)
            else:
                for dt, arr in run_case(c):
                    out.append(fmt_tensor("output", dt, arr))
            if c.tol:
                out.append("tol %r %r" % (float(c.tol[0]), float(c.tol[1])))
            out.append("end")
            lines.extend(out)
            total += 1
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("gen_golden: %d cases -> %s" % (total, args.out))


if __name__ == "__main__":
    main()
