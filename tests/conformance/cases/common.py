"""The vocabulary of the conformance table.

Each family module in this folder (elementwise.py, reduce.py, ...) defines CASES, a list made
with `case(...)`. gen_golden.py turns them into golden.txt, the data the C runner reads: the
inputs, the parameters and the outputs NumPy computed independently of ember.

    case("add", [T("f32", rnd((2, 3))), T("f32", rnd((3,)))], ref=lambda a, b: a + b)

- op: the name the C runner knows (tests/conformance/ops_*.c map names to ember calls).
- inputs: T(dtype, values, view=...). `values` is anything np.asarray takes. f16/bf16 values
  are rounded to that dtype first. `view` builds a non-contiguous input on the C side from the
  stored base: ("transpose", d0, d1), ("permute", [p...]), ("slice", dim, start, stop, step),
  ("expand", [shape...]), ("flip", [dims...]). The reference sees the viewed array.
- params: dict of ints, floats, bools or lists of ints, passed to the C wrapper by name.
- ref: a function of the (viewed) input arrays, as float64/int64/bool arrays, and of
  **params; returns one array or a tuple of arrays. Outputs are stored in `out_dtypes`
  (default: the first input's dtype for every output).
- error: instead of ref, the em_status name the call must fail with ("EM_ERR_SHAPE").
- tol: (rtol, atol) overriding the per-dtype default.
- name: a unique suffix; by default one is made from op, dtypes and shapes.
"""
import math

import numpy as np

FLOATS = ("f32", "f64", "f16", "bf16")
INTS = ("i64", "i32", "i16", "i8", "u8")

_NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": np.float32,
       "i64": np.int64, "i32": np.int32, "i16": np.int16, "i8": np.int8, "u8": np.uint8,
       "bool": np.bool_}


def round_bf16(x):
    """Rounds float values to bfloat16 (nearest even), returned as float32."""
    a = np.asarray(x, dtype=np.float32)
    shape = a.shape
    a = a.reshape(-1).copy()
    bits = a.view(np.uint32).astype(np.uint64)
    nan = np.isnan(a)
    bits = ((bits + np.uint64(0x7FFF) + ((bits >> np.uint64(16)) & np.uint64(1)))
            >> np.uint64(16)) << np.uint64(16)
    out = (bits & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.float32)
    out = np.where(nan, np.float32(np.nan), out)
    return out.reshape(shape)


def to_dtype(values, dt):
    """values as stored in dtype dt (returned in a numpy dtype that holds them exactly)."""
    a = np.asarray(values)
    if dt == "bf16":
        return round_bf16(a.astype(np.float64))
    if dt == "bool":
        return a.astype(np.bool_)
    return a.astype(_NP[dt])


def widen(a, dt):
    """The array the reference computes on: float64 for floats, int64 for ints, bool."""
    if dt in FLOATS:
        return np.asarray(a, dtype=np.float64)
    if dt == "bool":
        return np.asarray(a, dtype=np.bool_)
    return np.asarray(a, dtype=np.int64)


def matmul(a, b):
    """np.matmul's semantics (1-d operands, broadcast batch dims), computed without BLAS.

    Float sums are math.fsum of the float64 products: the correctly rounded sum, the same
    on every machine, where np.matmul's last bit depends on the BLAS kernel that OpenBLAS
    picks for the CPU (and on OPENBLAS_CORETYPE). Ints use np.matmul (no BLAS there)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind != "f" and b.dtype.kind != "f":
        return np.matmul(a, b)
    a1, b1 = a.ndim == 1, b.ndim == 1
    a2 = a.reshape(1, -1) if a1 else a
    b2 = b.reshape(-1, 1) if b1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ValueError("matmul: inner dims differ")
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    m, k, n = a2.shape[-2], a2.shape[-1], b2.shape[-1]
    A = np.broadcast_to(a2, batch + (m, k)).astype(np.float64)
    B = np.broadcast_to(b2, batch + (k, n)).astype(np.float64)
    out = np.zeros(batch + (m, n), dtype=np.float64)
    for idx in np.ndindex(*batch):
        for i in range(m):
            for j in range(n):
                out[idx + (i, j)] = math.fsum(A[idx + (i,)] * B[idx + (slice(None), j)])
    if a1:
        out = out[..., 0, :]
    if b1:
        out = out[..., 0]
    return out


class T:
    def __init__(self, dtype, values, view=None):
        assert dtype in _NP, dtype
        self.dtype = dtype
        self.base = to_dtype(values, dtype)
        self.view = view

    def viewed(self):
        a = self.base
        v = self.view
        if v is None:
            return a
        kind = v[0]
        if kind == "transpose":
            return np.swapaxes(a, v[1], v[2])
        if kind == "permute":
            return np.transpose(a, v[1])
        if kind == "slice":
            dim, start, stop, step = v[1], v[2], v[3], v[4]
            idx = [slice(None)] * a.ndim
            idx[dim] = slice(start, stop, step)
            return a[tuple(idx)]
        if kind == "expand":
            return np.broadcast_to(a, tuple(v[1]))
        if kind == "flip":
            return np.flip(a, axis=tuple(v[1]))
        raise ValueError("unknown view " + str(kind))


_rng = np.random.default_rng(20261130)


def rnd(shape, lo=-2.0, hi=2.0):
    """Deterministic uniform floats (the generator is seeded once per run of gen_golden)."""
    return _rng.uniform(lo, hi, size=shape)


def rndi(shape, lo=-5, hi=5):
    """Deterministic ints in [lo, hi)."""
    return _rng.integers(lo, hi, size=shape)


def rndb(shape):
    return _rng.integers(0, 2, size=shape).astype(bool)


def reseed(seed):
    global _rng
    _rng = np.random.default_rng(seed)


class Case:
    def __init__(self, op, inputs, ref=None, params=None, out_dtypes=None, error=None,
                 tol=None, name=None):
        self.op = op
        self.inputs = inputs
        self.ref = ref
        self.params = params or {}
        self.out_dtypes = out_dtypes
        self.error = error
        self.tol = tol
        self.name = name


def case(op, inputs, ref=None, **kw):
    return Case(op, inputs, ref, **kw)
