"""Conformance cases of the layout and indexing families: reshape, flatten, permute,
transpose, expand, slice, slice_assign, cat, stack, split, squeeze, squeeze_all, unsqueeze,
flip, repeat; gather, scatter_add, index_select, one_hot, sort, argsort, topk.

View ops are checked by the values of the view (the runner reads them back row-major).
References are NumPy's own indexing, broadcasting, tiling and stable sorting.
Slice bounds at or beyond +-2**52 stand for INT64_MAX / INT64_MIN (ops_layout.c maps them);
an absent start/stop is Python's None."""
import numpy as np

from common import FLOATS, T, case, rnd, rndb, rndi

CASES = []
_names = set()

OPEN = 2 ** 52
NAN = float("nan")


def add(op, inputs, ref=None, tag=None, **kw):
    """Appends a case; `tag` makes the name layout/<op>/<tag> (checked unique here)."""
    if tag is not None:
        name = "layout/%s/%s" % (op, tag)
        assert name not in _names, name
        _names.add(name)
        kw["name"] = name
    CASES.append(case(op, inputs, ref, **kw))


def err(op, inputs, status, tag, **params):
    add(op, inputs, error=status, tag=tag, params=params)


# ---- references -------------------------------------------------------------------------

def r_reshape(x, shape):
    return np.reshape(x, shape)


def r_flatten(x, start_dim=0, end_dim=-1):
    if x.ndim == 0:
        return x.reshape(1)
    s, e = start_dim % x.ndim, end_dim % x.ndim
    return x.reshape(x.shape[:s] + (int(np.prod(x.shape[s:e + 1])),) + x.shape[e + 1:])


def r_permute(x, perm):
    return np.transpose(x, perm)


def r_transpose(x, dim0=0, dim1=1):
    return x if x.ndim == 0 else np.swapaxes(x, dim0, dim1)


def r_expand(x, shape):
    lead = len(shape) - x.ndim
    full = [x.shape[i - lead] if s == -1 else s for i, s in enumerate(shape)]
    return np.broadcast_to(x, full)


def _sl(start, stop, step):
    return slice(start, stop, step)


def r_slice(x, dim=0, start=None, stop=None, step=None):
    idx = [slice(None)] * x.ndim
    idx[dim] = _sl(start, stop, step)
    return x[tuple(idx)]


def r_slice_assign(x, v, dim=0, start=None, stop=None, step=None):
    y = x.copy()
    idx = [slice(None)] * x.ndim
    idx[dim] = _sl(start, stop, step)
    y[tuple(idx)] = v
    return y


def r_cat(*xs, dim=0):
    return np.concatenate(xs, axis=dim)


def r_stack(*xs, dim=0):
    return np.stack(xs, axis=dim)


def r_split(x, size, dim=0):
    n = x.shape[dim]
    if n == 0:
        return (x,)
    return tuple(r_slice(x, dim, i, i + size) for i in range(0, n, size))


def r_squeeze(x, dim=0):
    return x if x.ndim == 0 else np.squeeze(x, axis=dim)


def r_squeeze_all(x):
    return np.squeeze(x)


def r_unsqueeze(x, dim=0):
    return np.expand_dims(x, dim)


def r_flip(x, dims):
    return x if x.ndim == 0 or not dims else np.flip(x, axis=tuple(dims))


def r_repeat(x, reps):
    return np.tile(x, reps)


def _trim(x, shape, dim):
    """x cut to `shape` in every dim but dim (index may be smaller than x there)."""
    dim %= x.ndim
    return x[tuple(slice(None) if k == dim else slice(0, s) for k, s in enumerate(shape))]


def r_gather(x, index, dim=0):
    if x.ndim == 0:
        return x.copy()
    return np.take_along_axis(_trim(x, index.shape, dim), index, axis=dim)


def r_scatter_add(x, index, src, dim=0):
    y = x.copy()
    if x.ndim == 0:
        return y + src if index.size else y
    for pos in np.ndindex(*index.shape):
        tgt = list(pos)
        tgt[dim] = index[pos]
        y[tuple(tgt)] += src[pos]
    return y


def r_index_select(x, index, dim=0):
    if x.ndim == 0:
        return x.copy()
    return np.take(x, index.reshape(-1), axis=dim)


def r_one_hot(index, num_classes, dtype):
    return index[..., None] == np.arange(num_classes)


def _order(x, descending):
    """Stable sort order of a 1-d array: NaN last ascending, first descending."""
    if x.dtype == np.bool_:
        x = x.astype(np.int64)
    if descending:
        if x.dtype.kind == "f":
            return np.lexsort((-x, ~np.isnan(x)))
        return np.argsort(-x, kind="stable")
    return np.argsort(x, kind="stable")


def r_sort_both(x, dim=-1, descending=False):
    if x.ndim == 0:
        return x.copy(), np.zeros((), np.int64)
    m = np.moveaxis(x, dim, -1)
    idx = np.zeros(m.shape, np.int64)
    for pos in np.ndindex(*m.shape[:-1]):
        idx[pos] = _order(m[pos], descending)
    vals = np.take_along_axis(m, idx, axis=-1)
    return np.moveaxis(vals, -1, dim), np.moveaxis(idx, -1, dim)


def r_sort(x, dim=-1, descending=False, want=0):
    v, i = r_sort_both(x, dim, descending)
    return (v, i) if want == 0 else v if want == 1 else i


def r_argsort(x, dim=-1, descending=False):
    return r_sort_both(x, dim, descending)[1]


def r_topk(x, k, dim=-1, largest=True, want=0):
    v, i = r_sort_both(x, dim, largest)
    if x.ndim > 0:
        v, i = r_slice(v, dim, 0, k), r_slice(i, dim, 0, k)
    return (v, i) if want == 0 else v if want == 1 else i


ALL = FLOATS + ("i64", "i32", "bool")


def vals(dt, shape):
    """Values for dtype dt: floats, small ints or bools."""
    if dt in FLOATS:
        return rnd(shape)
    if dt == "bool":
        return rndb(shape)
    return rndi(shape, -50, 50)


# ---- reshape / flatten --------------------------------------------------------------------
for dt, src, dst in [("f32", (2, 3, 4), [4, 6]), ("f64", (2, 3, 4), [-1, 4]),
                     ("f16", (6,), [2, 3]), ("bf16", (3, 4), [2, -1, 2]),
                     ("i64", (2, 6), [3, 4]), ("i32", (3, 4), [12]), ("bool", (2, 2), [4])]:
    add("reshape", [T(dt, vals(dt, src))], r_reshape, params={"shape": dst})
add("reshape", [T("f32", rnd(()))], r_reshape, params={"shape": [1, 1]}, tag="0d-to-11")
add("reshape", [T("f64", rnd((1,)))], r_reshape, params={"shape": []}, tag="1-to-0d")
add("reshape", [T("i64", rndi((1, 1)))], r_reshape, params={"shape": []}, tag="11-to-0d")
add("reshape", [T("f32", rnd(()))], r_reshape, params={"shape": [-1]}, tag="0d-infer")
add("reshape", [T("f32", rnd((0, 3)))], r_reshape, params={"shape": [3, 0]}, tag="empty")
add("reshape", [T("f32", rnd((0, 4)))], r_reshape, params={"shape": [-1, 2]}, tag="empty-infer")
add("reshape", [T("f32", rnd((3, 4)), view=("transpose", 0, 1))], r_reshape,
    params={"shape": [12]}, tag="transposed-copy")
add("reshape", [T("f64", rnd((3, 4)), view=("transpose", 0, 1))], r_reshape,
    params={"shape": [2, 6]}, tag="transposed-copy-2d")
add("reshape", [T("f32", rnd((2, 3, 4)), view=("permute", [0, 2, 1]))], r_reshape,
    params={"shape": [2, 12]}, tag="permuted-copy")
add("reshape", [T("i32", rndi((2, 3, 4)), view=("permute", [0, 2, 1]))], r_reshape,
    params={"shape": [6, 2, 2]}, tag="permuted-split-dims")
add("reshape", [T("f32", rnd((6, 4)), view=("slice", 0, 0, 6, 2))], r_reshape,
    params={"shape": [3, 2, 2]}, tag="sliced-view")
add("reshape", [T("f32", rnd((6, 4)), view=("slice", 1, 0, 4, 2))], r_reshape,
    params={"shape": [12]}, tag="sliced-cols-copy")
add("reshape", [T("f32", rnd((12,)), view=("flip", [0]))], r_reshape,
    params={"shape": [3, 4]}, tag="flipped")
add("reshape", [T("f32", rnd((1, 4)), view=("expand", [3, 4]))], r_reshape,
    params={"shape": [-1]}, tag="expanded-copy")
add("reshape", [T("f32", rnd((3, 1)), view=("expand", [3, 4]))], r_reshape,
    params={"shape": [3, 2, 2]}, tag="expanded-view")
err("reshape", [T("f32", rnd((2, 3)))], "EM_ERR_SHAPE", "numel-mismatch", shape=[4, 2])
err("reshape", [T("f32", rnd((2, 3)))], "EM_ERR_SHAPE", "infer-indivisible", shape=[-1, 4])
err("reshape", [T("f32", rnd((2, 3)))], "EM_ERR_ARG", "two-infer", shape=[-1, -1])
err("reshape", [T("f32", rnd((2, 3)))], "EM_ERR_ARG", "negative", shape=[-2, -3])
err("reshape", [T("f32", rnd((0, 3)))], "EM_ERR_SHAPE", "infer-zero", shape=[0, -1])
err("reshape", [T("f32", rnd((1,)))], "EM_ERR_SHAPE", "rank9", shape=[1] * 9)

add("flatten", [T("f32", rnd((2, 3, 4)))], r_flatten, tag="f32-all")
add("flatten", [T("i64", rndi((2, 3, 4, 2)))], r_flatten, params={"start_dim": 1, "end_dim": 2},
    tag="i64-middle")
add("flatten", [T("bf16", rnd((2, 3, 4)))], r_flatten, params={"start_dim": -2}, tag="bf16-tail")
add("flatten", [T("f64", rnd(()))], r_flatten, tag="f64-0d")
add("flatten", [T("f32", rnd((3, 4)), view=("transpose", 0, 1))], r_flatten, tag="transposed")
add("flatten", [T("f16", rnd((2, 0, 3)))], r_flatten, tag="f16-empty")
err("flatten", [T("f32", rnd((2, 3, 4)))], "EM_ERR_ARG", "start-after-end", start_dim=2,
    end_dim=1)

# ---- permute / transpose --------------------------------------------------------------------
for dt in ALL:
    add("permute", [T(dt, vals(dt, (2, 3, 4)))], r_permute, params={"perm": [2, 0, 1]})
add("permute", [T("f32", rnd((2, 3, 4)))], r_permute, params={"perm": [-1, 0, -2]},
    tag="negative-perm")
add("permute", [T("f64", rnd((2, 3, 4)), view=("transpose", 0, 2))], r_permute,
    params={"perm": [1, 2, 0]}, tag="of-transposed")
add("permute", [T("f32", rnd(()))], r_permute, params={"perm": []}, tag="0d")
err("permute", [T("f32", rnd((2, 3)))], "EM_ERR_ARG", "repeated", perm=[0, 0])
err("permute", [T("f32", rnd((2, 3)))], "EM_ERR_ARG", "short", perm=[0])
err("permute", [T("f32", rnd((2, 3)))], "EM_ERR_ARG", "out-of-range", perm=[0, 2])

for dt in ("f16", "i32", "bool"):
    add("transpose", [T(dt, vals(dt, (3, 4)))], r_transpose)
add("transpose", [T("bf16", rnd((2, 3, 4)))], r_transpose, params={"dim0": 0, "dim1": 2},
    tag="bf16-outer")
add("transpose", [T("f32", rnd((2, 3, 4)))], r_transpose, params={"dim0": -1, "dim1": -2},
    tag="f32-negative")
add("transpose", [T("f32", rnd((6, 4)), view=("slice", 0, 1, 6, 2))], r_transpose,
    tag="of-slice")
add("transpose", [T("f64", rnd(()))], r_transpose, params={"dim0": 0, "dim1": -1}, tag="0d")
err("transpose", [T("f32", rnd((2, 3)))], "EM_ERR_ARG", "dim-range", dim0=0, dim1=2)

# ---- expand ---------------------------------------------------------------------------------
add("expand", [T("f32", rnd((3, 1)))], r_expand, params={"shape": [3, 4]}, tag="f32-col")
add("expand", [T("f64", rnd((4,)))], r_expand, params={"shape": [2, 3, 4]}, tag="f64-lead")
add("expand", [T("i64", rndi((3, 1)))], r_expand, params={"shape": [2, -1, 5]}, tag="i64-keep")
add("expand", [T("bool", rndb((1, 3)))], r_expand, params={"shape": [2, 3]}, tag="bool")
add("expand", [T("bf16", rnd(()))], r_expand, params={"shape": [2, 3]}, tag="bf16-0d")
add("expand", [T("f16", rnd((1, 3)))], r_expand, params={"shape": [0, 3]}, tag="f16-to-empty")
add("expand", [T("f32", rnd((1, 3)), view=("transpose", 0, 1))], r_expand,
    params={"shape": [2, 3, 4]}, tag="of-transposed")
add("expand", [T("i32", rndi((2, 3)))], r_expand, params={"shape": [-1, -1]}, tag="i32-same")
err("expand", [T("f32", rnd((3, 2)))], "EM_ERR_SHAPE", "mismatch", shape=[3, 4])
err("expand", [T("f32", rnd((2, 3)))], "EM_ERR_SHAPE", "smaller-rank", shape=[3])
err("expand", [T("f32", rnd((3,)))], "EM_ERR_ARG", "infer-new-dim", shape=[-1, 3])

# ---- slice ----------------------------------------------------------------------------------
X10 = lambda dt: T(dt, vals(dt, (10,)))  # noqa: E731
add("slice", [X10("f32")], r_slice, params={"start": 2, "stop": 8, "step": 2}, tag="f32-step2")
add("slice", [X10("f64")], r_slice, params={"start": 8, "stop": 2, "step": -2}, tag="f64-neg")
add("slice", [X10("f16")], r_slice, params={"step": -1}, tag="f16-reverse")
add("slice", [X10("bf16")], r_slice, params={"start": -100, "stop": 100}, tag="bf16-clamp")
add("slice", [X10("i64")], r_slice, params={"start": -3}, tag="i64-negstart")
add("slice", [X10("i32")], r_slice, params={"start": 5, "stop": 2}, tag="i32-empty")
add("slice", [X10("bool")], r_slice, params={"start": 1, "stop": -1, "step": 3}, tag="bool-step3")
add("slice", [X10("f32")], r_slice, params={"start": -OPEN, "stop": OPEN, "step": 1},
    tag="int64-open-ends")
add("slice", [X10("f32")], r_slice, params={"start": OPEN, "stop": -OPEN, "step": -3},
    tag="int64-open-ends-neg")
add("slice", [X10("f32")], r_slice, params={"start": 3, "step": 2 ** 40}, tag="huge-step")
add("slice", [X10("f32")], r_slice, params={"start": -2, "stop": -8, "step": -2},
    tag="negative-bounds-neg-step")
add("slice", [T("f32", rnd((3, 5)))], r_slice, params={"dim": 1, "start": 0, "step": 3},
    tag="f32-dim1")
add("slice", [T("f32", rnd((3, 5)))], r_slice, params={"dim": -1, "start": 4, "stop": 0,
                                                       "step": -1}, tag="f32-dim-neg")
add("slice", [T("f64", rnd((4, 6)), view=("transpose", 0, 1))], r_slice,
    params={"dim": 1, "start": 1, "stop": 4, "step": 2}, tag="of-transposed")
add("slice", [T("f32", rnd((4, 6)), view=("flip", [1]))], r_slice,
    params={"dim": 1, "start": 1, "stop": 5, "step": 2}, tag="of-flipped")
add("slice", [T("i64", rndi((1, 6)), view=("expand", [3, 6]))], r_slice,
    params={"dim": 0, "start": 1}, tag="of-expanded")
add("slice", [T("f32", rnd((8, 3)), view=("slice", 0, 1, 8, 2))], r_slice,
    params={"dim": 0, "step": -2}, tag="of-slice")
add("slice", [T("f32", rnd((0, 3)))], r_slice, params={"dim": 0, "start": 0, "stop": 5},
    tag="empty-input")
err("slice", [X10("f32")], "EM_ERR_ARG", "step0", start=0, stop=5, step=0)
err("slice", [T("f32", rnd(()))], "EM_ERR_ARG", "0d", start=0, stop=1)
err("slice", [T("f32", rnd((2, 3)))], "EM_ERR_ARG", "dim-range", dim=2, start=0, stop=1)

# ---- slice_assign -----------------------------------------------------------------------------
add("slice_assign", [T("f32", rnd((4, 5))), T("f32", rnd((4, 3)))], r_slice_assign,
    params={"dim": 1, "start": 1, "stop": 4}, tag="f32-cols")
add("slice_assign", [T("f64", rnd((4, 5))), T("f64", rnd((5,)))], r_slice_assign,
    params={"dim": 0, "start": 0, "step": 2}, tag="f64-broadcast-row")
add("slice_assign", [T("f16", rnd((6,))), T("f16", rnd(()))], r_slice_assign,
    params={"start": 5, "stop": 0, "step": -2}, tag="f16-0d-value-neg-step")
add("slice_assign", [T("bf16", rnd((3, 4))), T("bf16", rnd((3, 1)))], r_slice_assign,
    params={"dim": 1, "start": -2}, tag="bf16-col-broadcast")
add("slice_assign", [T("i64", rndi((4, 5))), T("i64", rndi((2, 5)))], r_slice_assign,
    params={"dim": 0, "start": 1, "stop": 3}, tag="i64-rows")
add("slice_assign", [T("i32", rndi((5,))), T("i32", rndi((1,)))], r_slice_assign,
    params={"start": 2, "stop": 2}, tag="i32-empty-slice")
add("slice_assign", [T("bool", rndb((3, 3))), T("bool", rndb((3, 1)))], r_slice_assign,
    params={"dim": 1, "step": 2}, tag="bool")
add("slice_assign", [T("f32", rnd((5, 4)), view=("transpose", 0, 1)),
                     T("f32", rnd((3, 4)), view=("transpose", 0, 1))], r_slice_assign,
    params={"dim": 1, "start": 0, "stop": 3}, tag="strided-both")
add("slice_assign", [T("f32", rnd((4, 4))), T("f32", rnd((1, 4)), view=("expand", [2, 4]))],
    r_slice_assign, params={"dim": 0, "start": OPEN, "stop": -OPEN, "step": -3},
    tag="expanded-value-open-ends")
err("slice_assign", [T("f32", rnd((4, 5))), T("f64", rnd((4, 3)))], "EM_ERR_DTYPE", "dtype",
    dim=1, start=1, stop=4)
err("slice_assign", [T("f32", rnd((4, 5))), T("f32", rnd((4, 2)))], "EM_ERR_SHAPE", "shape",
    dim=1, start=1, stop=4)
err("slice_assign", [T("f32", rnd((4, 5))), T("f32", rnd((1,)))], "EM_ERR_ARG", "step0",
    dim=1, step=0)

# ---- cat / stack --------------------------------------------------------------------------
for dt in ("f32", "f16", "i32", "bool"):
    add("cat", [T(dt, vals(dt, (2, 3))), T(dt, vals(dt, (4, 3))), T(dt, vals(dt, (1, 3)))],
        r_cat, params={"dim": 0})
add("cat", [T("f64", rnd((2, 3))), T("f64", rnd((2, 1))), T("f64", rnd((2, 2)))], r_cat,
    params={"dim": -1}, tag="f64-last")
add("cat", [T("bf16", rnd((2, 3, 2))), T("bf16", rnd((2, 1, 2)))], r_cat, params={"dim": 1},
    tag="bf16-middle")
add("cat", [T("f32", rnd((2, 3))), T("f32", rnd((0, 3))), T("f32", rnd((1, 3)))], r_cat,
    params={"dim": 0}, tag="with-empty")
add("cat", [T("i64", rndi((0, 3))), T("i64", rndi((0, 3)))], r_cat, params={"dim": 0},
    tag="all-empty")
add("cat", [T("i64", rndi((2, 3)))], r_cat, params={"dim": 1}, tag="single")
add("cat", [T("f32", rnd((3, 2)), view=("transpose", 0, 1)),
            T("f32", rnd((2, 6)), view=("slice", 1, 0, 6, 2))], r_cat, params={"dim": 1},
    tag="strided")
add("cat", [T("f32", rnd((1, 3)), view=("expand", [2, 3])), T("f32", rnd((2, 3)),
                                                               view=("flip", [0, 1]))],
    r_cat, params={"dim": 0}, tag="expanded-flipped")
err("cat", [T("f32", rnd((2, 3))), T("f64", rnd((2, 3)))], "EM_ERR_DTYPE", "dtype", dim=0)
err("cat", [T("f32", rnd((2, 3))), T("f32", rnd((2, 4)))], "EM_ERR_SHAPE", "shape", dim=0)
err("cat", [T("f32", rnd((2, 3))), T("f32", rnd((3,)))], "EM_ERR_SHAPE", "rank", dim=0)
err("cat", [T("f32", rnd(())), T("f32", rnd(()))], "EM_ERR_SHAPE", "0d", dim=0)
err("cat", [T("f32", rnd((2, 3)))], "EM_ERR_ARG", "none", dim=0, n=0)
err("cat", [T("f32", rnd((2, 3)))], "EM_ERR_ARG", "dim-range", dim=2)

for dt, dim in [("f32", 0), ("i64", 2), ("bf16", -1), ("bool", 1)]:
    add("stack", [T(dt, vals(dt, (2, 3))), T(dt, vals(dt, (2, 3))), T(dt, vals(dt, (2, 3)))],
        r_stack, params={"dim": dim})
add("stack", [T("f64", rnd(())), T("f64", rnd(())), T("f64", rnd(()))], r_stack,
    params={"dim": 0}, tag="0d")
add("stack", [T("f32", rnd((0, 2))), T("f32", rnd((0, 2)))], r_stack, params={"dim": 1},
    tag="empty")
add("stack", [T("f16", rnd((3, 2)), view=("transpose", 0, 1)), T("f16", rnd((2, 3)))],
    r_stack, params={"dim": 1}, tag="strided")
err("stack", [T("f32", rnd((2, 3))), T("f32", rnd((3, 2)))], "EM_ERR_SHAPE", "shape", dim=0)
err("stack", [T("f32", rnd((2, 3))), T("i32", rndi((2, 3)))], "EM_ERR_DTYPE", "dtype", dim=0)
err("stack", [T("f32", rnd((2, 3))), T("f32", rnd((2, 3)))], "EM_ERR_ARG", "dim-range", dim=3)

# ---- split ----------------------------------------------------------------------------------
add("split", [T("f32", rnd((7, 3)))], r_split, params={"size": 3, "dim": 0}, tag="f32-rows")
add("split", [T("i64", rndi((2, 5)))], r_split, params={"size": 2, "dim": 1}, tag="i64-cols")
add("split", [T("bf16", rnd((2, 5)))], r_split, params={"size": 9, "dim": -1}, tag="bf16-one")
add("split", [T("f64", rnd((0, 4)))], r_split, params={"size": 2, "dim": 0}, tag="f64-empty")
add("split", [T("bool", rndb((4, 6)), view=("transpose", 0, 1))], r_split,
    params={"size": 4, "dim": 0}, tag="bool-transposed")
add("split", [T("f16", rnd((8,)), view=("flip", [0]))], r_split, params={"size": 3},
    tag="f16-flipped")
err("split", [T("f32", rnd((6,)))], "EM_ERR_ARG", "size0", size=0)
err("split", [T("f32", rnd((6,)))], "EM_ERR_ARG", "cap", size=2, cap=2)
err("split", [T("f32", rnd(()))], "EM_ERR_ARG", "0d", size=1)

# ---- squeeze / unsqueeze ------------------------------------------------------------------
add("squeeze", [T("f32", rnd((3, 1, 4)))], r_squeeze, params={"dim": 1}, tag="f32")
add("squeeze", [T("i32", rndi((3, 1, 4)))], r_squeeze, params={"dim": -2}, tag="i32-negative")
add("squeeze", [T("f64", rnd(()))], r_squeeze, params={"dim": 0}, tag="0d")
add("squeeze", [T("f32", rnd((1, 4, 3)), view=("permute", [1, 0, 2]))], r_squeeze,
    params={"dim": 1}, tag="of-permuted")
err("squeeze", [T("f32", rnd((3, 2)))], "EM_ERR_SHAPE", "not-one", dim=1)
err("squeeze", [T("f32", rnd((3, 1)))], "EM_ERR_ARG", "dim-range", dim=2)
add("squeeze_all", [T("bf16", rnd((1, 3, 1, 4, 1)))], r_squeeze_all, tag="bf16")
add("squeeze_all", [T("bool", rndb((1, 1)))], r_squeeze_all, tag="bool-to-0d")
add("squeeze_all", [T("i64", rndi(()))], r_squeeze_all, tag="i64-0d")
add("squeeze_all", [T("f32", rnd((0, 1)))], r_squeeze_all, tag="empty")
add("unsqueeze", [T("f32", rnd((3, 4)))], r_unsqueeze, params={"dim": 0}, tag="f32-front")
add("unsqueeze", [T("f16", rnd((3, 4)))], r_unsqueeze, params={"dim": 2}, tag="f16-back")
add("unsqueeze", [T("i64", rndi((3, 4)))], r_unsqueeze, params={"dim": -1}, tag="i64-neg1")
add("unsqueeze", [T("bool", rndb((3, 4)))], r_unsqueeze, params={"dim": -3}, tag="bool-neg3")
add("unsqueeze", [T("f64", rnd(()))], r_unsqueeze, params={"dim": 0}, tag="0d")
add("unsqueeze", [T("f64", rnd(()))], r_unsqueeze, params={"dim": -1}, tag="0d-neg")
add("unsqueeze", [T("f32", rnd((3, 4)), view=("transpose", 0, 1))], r_unsqueeze,
    params={"dim": 1}, tag="of-transposed")
err("unsqueeze", [T("f32", rnd((3,)))], "EM_ERR_ARG", "dim-range", dim=3)
err("unsqueeze", [T("f32", rnd((1,) * 8))], "EM_ERR_SHAPE", "rank9", dim=0)

# ---- flip ---------------------------------------------------------------------------------
for dt, dims in [("f32", [0]), ("f64", [0, 1]), ("f16", [-1]), ("bf16", [1]), ("i64", [0, 1]),
                 ("i32", [1]), ("bool", [0])]:
    add("flip", [T(dt, vals(dt, (3, 4)))], r_flip, params={"dims": dims})
add("flip", [T("f32", rnd((2, 3, 4)))], r_flip, params={"dims": [0, 2]}, tag="3d-outer")
add("flip", [T("f32", rnd(()))], r_flip, params={"dims": [0]}, tag="0d")
add("flip", [T("f32", rnd((3, 4)))], r_flip, params={"dims": []}, tag="no-dims")
add("flip", [T("f32", rnd((0, 4)))], r_flip, params={"dims": [0, 1]}, tag="empty")
add("flip", [T("f64", rnd((3, 4)), view=("transpose", 0, 1))], r_flip, params={"dims": [1]},
    tag="of-transposed")
add("flip", [T("i32", rndi((3, 4)), view=("flip", [0]))], r_flip, params={"dims": [0, 1]},
    tag="of-flipped")
add("flip", [T("f32", rnd((8, 3)), view=("slice", 0, 1, 8, 3))], r_flip, params={"dims": [0]},
    tag="of-slice")
err("flip", [T("f32", rnd((3, 4)))], "EM_ERR_ARG", "repeated", dims=[0, -2])
err("flip", [T("f32", rnd((3, 4)))], "EM_ERR_ARG", "dim-range", dims=[2])

# ---- repeat -------------------------------------------------------------------------------
add("repeat", [T("f32", rnd((2, 3)))], r_repeat, params={"reps": [2, 2]}, tag="f32")
add("repeat", [T("f64", rnd((2, 3)))], r_repeat, params={"reps": [2, 1, 3]}, tag="f64-more")
add("repeat", [T("bf16", rnd(()))], r_repeat, params={"reps": [3]}, tag="bf16-0d")
add("repeat", [T("i64", rndi((2, 3)))], r_repeat, params={"reps": [0, 2]}, tag="i64-zero")
add("repeat", [T("i32", rndi((2, 3)))], r_repeat, params={"reps": [1, 1]}, tag="i32-ones")
add("repeat", [T("bool", rndb((3,)))], r_repeat, params={"reps": [2, 2]}, tag="bool")
add("repeat", [T("f16", rnd((3, 2)), view=("transpose", 0, 1))], r_repeat,
    params={"reps": [3, 1, 2]}, tag="f16-transposed")
add("repeat", [T("f32", rnd((0, 2)))], r_repeat, params={"reps": [2, 2]}, tag="empty")
add("repeat", [T("f32", rnd(()))], r_repeat, params={"reps": []}, tag="0d-none")
err("repeat", [T("f32", rnd((2, 3)))], "EM_ERR_ARG", "fewer", reps=[2])
err("repeat", [T("f32", rnd((2, 3)))], "EM_ERR_ARG", "negative", reps=[2, -1])

# ---- gather -------------------------------------------------------------------------------
IDX32 = [[0, 3], [2, 2], [1, 0]]
for dt in ("f32", "f64", "f16", "bf16", "i64", "i32", "bool"):
    add("gather", [T(dt, vals(dt, (3, 4))), T("i64", IDX32)], r_gather, params={"dim": 1})
add("gather", [T("f32", rnd((3, 4))), T("i32", [[2, 0, 1, 1], [0, 0, 2, 1]])], r_gather,
    params={"dim": 0}, tag="dim0-i32")
add("gather", [T("f32", rnd((3, 5))), T("i64", [[4, 0], [1, 1]])], r_gather,
    params={"dim": -1}, tag="smaller-index")
add("gather", [T("f64", rnd(())), T("i64", 0)], r_gather, params={"dim": 0}, tag="0d")
add("gather", [T("f32", rnd((3, 4))), T("i64", np.zeros((3, 0), np.int64))], r_gather,
    params={"dim": 1}, tag="empty-index")
add("gather", [T("f32", rnd((4, 3)), view=("transpose", 0, 1)),
               T("i64", [[3, 0, 1, 2], [2, 2, 0, 0], [0, 1, 2, 3]], view=("flip", [1]))],
    r_gather, params={"dim": 1}, tag="strided")
add("gather", [T("bf16", rnd((3, 6, 4)), view=("permute", [1, 0, 2])),
               T("i64", [[[1], [0], [2]], [[2], [2], [0]]], view=("expand", [2, 3, 4]))],
    r_gather, params={"dim": 1}, tag="3d-expanded-index")
err("gather", [T("f32", rnd((3, 4))), T("i64", [[0, 4]])], "EM_ERR_ARG", "out-of-range", dim=1)
err("gather", [T("f32", rnd((3, 4))), T("i64", [[0, -1]])], "EM_ERR_ARG", "negative", dim=1)
err("gather", [T("f32", rnd((3, 4))), T("i64", [0, 1])], "EM_ERR_SHAPE", "rank", dim=1)
err("gather", [T("f32", rnd((3, 4))), T("i64", np.zeros((4, 1), np.int64))], "EM_ERR_SHAPE",
    "larger", dim=1)
err("gather", [T("f32", rnd((3, 4))), T("f32", [[0.0]])], "EM_ERR_DTYPE", "float-index", dim=1)

# ---- scatter_add ----------------------------------------------------------------------------
SIDX = [[0, 3, 0], [2, 2, 1], [1, 0, 3]]
for dt in ("f32", "f64", "f16", "bf16", "i64", "i32"):
    add("scatter_add", [T(dt, vals(dt, (3, 4))), T("i64", SIDX), T(dt, vals(dt, (3, 3)))],
        r_scatter_add, params={"dim": 1})
add("scatter_add", [T("f32", rnd((3, 4))), T("i32", [[2, 0, 2, 2], [2, 1, 0, 2]]),
                    T("f32", rnd((2, 4)))], r_scatter_add, params={"dim": 0}, tag="dim0-i32")
add("scatter_add", [T("f64", rnd((3, 5))), T("i64", [[4, 4], [0, 1]]), T("f64", rnd((3, 4)))],
    r_scatter_add, params={"dim": -1}, tag="smaller-index")
add("scatter_add", [T("f64", rnd(())), T("i64", 0), T("f64", rnd(()))], r_scatter_add,
    params={"dim": 0}, tag="0d")
add("scatter_add", [T("f32", rnd((2, 3))), T("i64", np.zeros((2, 0), np.int64)),
                    T("f32", rnd((2, 2)))], r_scatter_add, params={"dim": 1},
    tag="empty-index")
add("scatter_add", [T("f32", rnd((4, 3)), view=("transpose", 0, 1)), T("i64", SIDX),
                    T("f32", rnd((3, 6)), view=("slice", 1, 0, 6, 2))], r_scatter_add,
    params={"dim": 1}, tag="strided")
# embedding's backward: the index laid along dim 0 and expanded (stride 0) over the columns,
# repeats summed; and a 3-d scatter along the middle dim with a permuted out and f16 sums
for dt in ("f32", "bf16"):
    add("scatter_add", [T(dt, np.zeros((5, 7))), T("i64", [[3], [0], [3], [4], [3], [1]],
                                                   view=("expand", [6, 7])),
                        T(dt, vals(dt, (6, 7)))], r_scatter_add, params={"dim": 0},
        tag="expanded-index-" + dt)
add("scatter_add", [T("f16", vals("f16", (2, 5, 3)), view=("permute", [2, 0, 1])),
                    T("i32", [[[0, 1, 0, 4], [2, 2, 2, 0]], [[1, 1, 3, 0], [4, 0, 0, 1]],
                              [[0, 0, 0, 0], [3, 2, 1, 0]]]),
                    T("f16", vals("f16", (3, 2, 4)))], r_scatter_add, params={"dim": 2},
    tag="3d-permuted-f16")
err("scatter_add", [T("f32", rnd((3, 4))), T("i64", SIDX), T("f64", rnd((3, 3)))],
    "EM_ERR_DTYPE", "dtype", dim=1)
err("scatter_add", [T("bool", rndb((3, 4))), T("i64", SIDX), T("bool", rndb((3, 3)))],
    "EM_ERR_DTYPE", "bool", dim=1)
err("scatter_add", [T("f32", rnd((3, 4))), T("i64", [[4]]), T("f32", rnd((1, 1)))],
    "EM_ERR_ARG", "out-of-range", dim=1)
err("scatter_add", [T("f32", rnd((3, 4))), T("i64", SIDX), T("f32", rnd((3, 2)))],
    "EM_ERR_SHAPE", "small-src", dim=1)

# ---- index_select ---------------------------------------------------------------------------
for dt in ("f32", "f64", "f16", "bf16", "i64", "i32", "bool"):
    add("index_select", [T(dt, vals(dt, (4, 3))), T("i64", [3, 0, 0, 2])], r_index_select,
        params={"dim": 0})
add("index_select", [T("f32", rnd((2, 5))), T("i32", [4, 1])], r_index_select,
    params={"dim": -1}, tag="dim1-i32")
add("index_select", [T("f32", rnd((2, 5))), T("i64", 3)], r_index_select, params={"dim": 1},
    tag="0d-index")
add("index_select", [T("f64", rnd(())), T("i64", [0])], r_index_select, params={"dim": 0},
    tag="0d-x")
add("index_select", [T("f32", rnd((2, 5))), T("i64", np.zeros((0,), np.int64))],
    r_index_select, params={"dim": 1}, tag="empty-index")
add("index_select", [T("f32", rnd((5, 3)), view=("transpose", 0, 1)),
                     T("i64", [4, 9, 0, 9, 2], view=("slice", 0, 0, 5, 2))], r_index_select,
    params={"dim": 1}, tag="strided")
add("index_select", [T("f16", rnd((3, 7, 4)), view=("slice", 1, 0, 7, 2)),
                     T("i32", [3, 0, 3, 1, 2])], r_index_select, params={"dim": 1},
    tag="3d-sliced-f16")
err("index_select", [T("f32", rnd((4, 3))), T("i64", [[0, 1]])], "EM_ERR_SHAPE", "2d-index",
    dim=0)
err("index_select", [T("f32", rnd((4, 3))), T("i64", [4])], "EM_ERR_ARG", "out-of-range", dim=0)
err("index_select", [T("f32", rnd((4, 3))), T("f64", [0.0])], "EM_ERR_DTYPE", "float-index",
    dim=0)

# ---- one_hot --------------------------------------------------------------------------------
add("one_hot", [T("i64", [0, 2, 1, 2])], r_one_hot, params={"num_classes": 3, "dtype": "f32"},
    out_dtypes="f32", tag="i64-f32")
add("one_hot", [T("i32", [[0, 4], [3, 1]])], r_one_hot,
    params={"num_classes": 5, "dtype": "i64"}, out_dtypes="i64", tag="i32-i64")
add("one_hot", [T("i64", 1)], r_one_hot, params={"num_classes": 2, "dtype": "bf16"},
    out_dtypes="bf16", tag="0d")
add("one_hot", [T("i64", np.zeros((0,), np.int64))], r_one_hot,
    params={"num_classes": 3, "dtype": "f64"}, out_dtypes="f64", tag="empty")
add("one_hot", [T("i64", [1, 0, 2])], r_one_hot, params={"num_classes": 4, "dtype": "bool"},
    out_dtypes="bool", tag="bool")
add("one_hot", [T("i64", [[0, 1, 2], [2, 1, 0]], view=("transpose", 0, 1))], r_one_hot,
    params={"num_classes": 3, "dtype": "f16"}, out_dtypes="f16", tag="strided")
err("one_hot", [T("i64", [0, 3])], "EM_ERR_ARG", "out-of-range", num_classes=3, dtype="f32")
err("one_hot", [T("i64", [0, -1])], "EM_ERR_ARG", "negative", num_classes=3, dtype="f32")
err("one_hot", [T("f32", [0.0])], "EM_ERR_DTYPE", "float-index", num_classes=3, dtype="f32")

# ---- sort / argsort / topk --------------------------------------------------------------------
for dt in ALL:
    add("sort", [T(dt, vals(dt, (3, 5)))], r_sort, out_dtypes=[dt, "i64"])
add("sort", [T("f32", rnd((3, 5)))], r_sort, params={"descending": True},
    out_dtypes=["f32", "i64"], tag="f32-desc")
add("sort", [T("f64", rnd((4, 3)))], r_sort, params={"dim": 0}, out_dtypes=["f64", "i64"],
    tag="f64-dim0")
add("sort", [T("f32", [[NAN, 1.0, -2.0, NAN, 0.5], [3.0, NAN, float("inf"), -1.0, 3.0]])],
    r_sort, out_dtypes=["f32", "i64"], tag="nan-asc")
add("sort", [T("f16", [[NAN, 1.0, -2.0, NAN, 0.5], [3.0, NAN, float("-inf"), -1.0, 3.0]])],
    r_sort, params={"descending": True}, out_dtypes=["f16", "i64"], tag="nan-desc")
add("sort", [T("i64", [[3, 1, 3, 2, 1, 3], [0, 0, 0, 0, 0, 0]])], r_sort,
    out_dtypes=["i64", "i64"], tag="ties-asc")
add("sort", [T("i32", [[3, 1, 3, 2, 1, 3], [5, -5, 5, -5, 5, 5]])], r_sort,
    params={"descending": True}, out_dtypes=["i32", "i64"], tag="ties-desc")
add("sort", [T("bool", [1, 0, 1, 1, 0])], r_sort, params={"descending": True},
    out_dtypes=["bool", "i64"], tag="bool-desc")
add("sort", [T("f64", rnd(()))], r_sort, params={"dim": 0}, out_dtypes=["f64", "i64"],
    tag="0d")
add("sort", [T("f32", rnd((2, 0)))], r_sort, out_dtypes=["f32", "i64"], tag="empty")
add("sort", [T("f32", rnd((5, 3)), view=("transpose", 0, 1))], r_sort,
    params={"dim": 1, "descending": True}, out_dtypes=["f32", "i64"], tag="strided")
add("sort", [T("bf16", rnd((3, 4)), view=("flip", [0]))], r_sort, params={"dim": 0},
    out_dtypes=["bf16", "i64"], tag="flipped-dim0")
add("sort", [T("f32", rnd((3, 5)))], r_sort, params={"want": 1}, tag="values-only")
add("sort", [T("f32", rnd((3, 5)))], r_sort, params={"want": 2}, out_dtypes="i64",
    tag="indices-only")
err("sort", [T("f32", rnd((3, 5)))], "EM_ERR_ARG", "no-outputs", want=3)
err("sort", [T("f32", rnd((3, 5)))], "EM_ERR_ARG", "dim-range", dim=2)

add("argsort", [T("f32", rnd((3, 5)))], r_argsort, out_dtypes="i64", tag="f32")
add("argsort", [T("i64", [[2, 2, 1, 9], [0, -3, -3, 4]])], r_argsort,
    params={"descending": True, "dim": 1}, out_dtypes="i64", tag="i64-ties-desc")
add("argsort", [T("f64", [NAN, 0.0, NAN, -1.0])], r_argsort, out_dtypes="i64", tag="nan")
add("argsort", [T("bf16", rnd((3, 4)))], r_argsort, params={"dim": 0}, out_dtypes="i64",
    tag="bf16-dim0")
err("argsort", [T("f32", rnd((3,)))], "EM_ERR_ARG", "dim-range", dim=1)

add("topk", [T("f32", rnd((3, 6)))], r_topk, params={"k": 2}, out_dtypes=["f32", "i64"],
    tag="f32-largest")
add("topk", [T("f64", rnd((3, 6)))], r_topk, params={"k": 3, "largest": False},
    out_dtypes=["f64", "i64"], tag="f64-smallest")
add("topk", [T("i32", rndi((5, 3)))], r_topk, params={"k": 2, "dim": 0},
    out_dtypes=["i32", "i64"], tag="i32-dim0")
add("topk", [T("bf16", rnd((2, 4)))], r_topk, params={"k": 4}, out_dtypes=["bf16", "i64"],
    tag="bf16-all")
add("topk", [T("f32", rnd((2, 4)))], r_topk, params={"k": 0}, out_dtypes=["f32", "i64"],
    tag="k0")
add("topk", [T("f32", [1.0, NAN, 3.0, 2.0])], r_topk, params={"k": 2},
    out_dtypes=["f32", "i64"], tag="nan-largest")
add("topk", [T("f16", [1.0, NAN, 3.0, 2.0])], r_topk, params={"k": 2, "largest": False},
    out_dtypes=["f16", "i64"], tag="nan-smallest")
add("topk", [T("f64", rnd(()))], r_topk, params={"k": 1}, out_dtypes=["f64", "i64"], tag="0d")
add("topk", [T("f32", rnd((6, 3)), view=("transpose", 0, 1))], r_topk,
    params={"k": 3, "want": 1}, tag="strided-values")
add("topk", [T("i64", rndi((3, 6)))], r_topk, params={"k": 2, "want": 2}, out_dtypes="i64",
    tag="indices-only")
err("topk", [T("f32", rnd((3, 4)))], "EM_ERR_ARG", "k-large", k=5)
err("topk", [T("f32", rnd((3, 4)))], "EM_ERR_ARG", "k-negative", k=-1)

# attention heads split and merged (permute(0,2,1,3) of [B,T,H,D], read back contiguous), and
# NCHW <-> NHWC (a permute that moves the inner dim: the tiled transpose)
for dt in ("f32", "f64", "f16", "bf16", "i64", "bool"):
    add("permute", [T(dt, vals(dt, (2, 5, 3, 8)))], r_permute, params={"perm": [0, 2, 1, 3]},
        tag="%s-heads" % dt)
    add("permute", [T(dt, vals(dt, (2, 6, 5, 7)))], r_permute, params={"perm": [0, 2, 3, 1]},
        tag="%s-nchw-nhwc" % dt)
add("permute", [T("f32", rnd((3, 40, 37)))], r_permute, params={"perm": [0, 2, 1]},
    tag="f32-transpose-tiles")

# ---- tril / triu (issue 14; composed in the core from arange, a comparison and where) ----
for op, f in (("tril", np.tril), ("triu", np.triu)):
    for dt in ("f32", "f64", "f16", "bf16", "i64", "bool"):
        v = rnd((4, 5)) if dt not in ("i64", "bool") else rndi((4, 5), -9, 9)
        add(op, [T(dt, v != 0 if dt == "bool" else v)], lambda x, diagonal, f=f: f(x, diagonal),
            params={"diagonal": 0}, tag=dt)
    for k in (-2, 1, 7, -9):
        add(op, [T("f32", rnd((2, 3, 4)))], lambda x, diagonal, f=f: f(x, diagonal),
            params={"diagonal": k}, tag="batch-k%d" % k)
    add(op, [T("f32", rnd((5, 3)), view=("transpose", 0, 1))],
        lambda x, diagonal, f=f: f(x, diagonal), params={"diagonal": 0}, tag="view-transpose")
    add(op, [T("f32", rnd((4,)))], params={"diagonal": 0}, error="EM_ERR_SHAPE", tag="1d-err")
