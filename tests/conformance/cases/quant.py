"""Conformance cases of the quantized tensors (issue 17): em_quantize / em_quantize_as,
em_dequantize, em_tensor_from_quantized, em_quant_nbytes, em_tensor_to_data of a quantized
tensor or view, and em_matmul with quantized operands.

The reference is written from the text of include/ember/ember.h (the comment above
em_quant_kind) and include/ember/backend.h (the qmatmul slot), not from ember's C code:

- every scheme's scale (and zero point, minimum) from the data and the integers, in float32
  arithmetic as documented: one f32 division for a block's d (max|x| / 127, v / -8 or
  (max - min) / 15), the stored d and m (rounded to the scale dtype, np.float16 for f16)
  used from there on, x / d as x * (1 / d) in f32, np.rint (half to even). Where the text
  leaves a choice, "as ggml's Q4_0 / Q4_1" decides: x / d is 0 where d is 0 (a zero Q4_0
  block stores q = 8, real 0), and Q4_1's d comes from the block's own minimum (m rounded to
  the scale dtype is what q is measured from). The per-tensor scale and zero point:
  tensor_params;
- the bytes of the documented layout (block scales little-endian, Q4_0 packing: byte j holds
  element j in its low nibble and element j + 16 in its high one);
- the real values (dequantize) in f32;
- the quantized matmul of backend.h's qmatmul: f32 activations quantized row by row to q8
  blocks of 32 along K (the last one shorter), exact integer sums per block, each block's
  term scaled as documented; case (2) (blocks along N) is a @ real(b).

Ops (tests/conformance/ops_quant.c): quant_bytes (the bytes, exactly, as a u8 tensor; and for
per-tensor kinds the scheme's scale and zero point), quant_roundtrip (dequantize(quantize)),
quant_matmul (params "form": 0 x @ quantize(W)^T with W [N, K] quantized by rows, the linear
form; 1 x @ quantize(W) with W [K, N] blocked along N, backend.h's case (2); 2 quantize(A) @
quantize(B)^T, the int8 x int8 product; 3 quantize(W) @ x^T, a quantized left operand),
quant_layout (a view of a quantized tensor, dequantized; with "bytes" its contiguous bytes
too, with "axis" the block axis em_tensor_scheme reports), quant_from_bytes (bytes made here
read back with em_tensor_from_quantized and dequantized), quant_nbytes, and quant_op (an
elementwise op on a quantized tensor: an error row only).

Scheme params: "bits" (8 or 4), "kind" (em_quant_kind: 0 affine, 1 symmetric, 2 block,
3 block_min), "sdt" (the block scale dtype); "a_bits", "a_kind", "a_sdt" for form 2's left
operand; "plain" calls em_quantize (affine, range from the data) instead of em_quantize_as.

Bytes are compared exactly on every device: the layout is a storage format, and its
arithmetic (IEEE f32 division, reciprocal, product and round-half-even) has one result on a
device that rounds f32 division correctly, as the contract asks (an OpenCL kernel needs
-cl-fp32-correctly-rounded-divide-sqrt or the division done in f64). Real values are f32
products (an FMA may round a d * q + m once): the f32 tolerance. Matmul sums are in any order:
an absolute tolerance of 1e-6 (2e-6 for case (2)'s longer f32 sums) times the largest sum of
the terms' magnitudes of the case.
"""
import numpy as np

from common import T, case, matmul, rnd

CASES = []
_names = set()

AFFINE, SYMMETRIC, BLOCK, BLOCK_MIN = 0, 1, 2, 3
QB = 32
F32 = np.float32
NAN = float("nan")

# The schemes: name -> params. Q4_0 and Q4_1 are the block kinds of q4.
SCHEMES = {
    "affine8": {"bits": 8, "kind": AFFINE},
    "affine4": {"bits": 4, "kind": AFFINE},
    "sym8": {"bits": 8, "kind": SYMMETRIC},
    "q8_0": {"bits": 8, "kind": BLOCK, "sdt": "f32"},
    "q8_0h": {"bits": 8, "kind": BLOCK, "sdt": "f16"},
    "q4_0": {"bits": 4, "kind": BLOCK, "sdt": "f32"},
    "q4_0h": {"bits": 4, "kind": BLOCK, "sdt": "f16"},
    "q4_1": {"bits": 4, "kind": BLOCK_MIN, "sdt": "f32"},
    "q4_1h": {"bits": 4, "kind": BLOCK_MIN, "sdt": "f16"},
}
PER_TENSOR = ("affine8", "affine4", "sym8")
BLOCKS = ("q8_0", "q8_0h", "q4_0", "q4_0h", "q4_1", "q4_1h")


def add(op, inputs, tag, ref=None, **kw):
    name = "quant/%s/%s" % (op, tag)
    assert name not in _names, name
    _names.add(name)
    CASES.append(case(op, inputs, ref, name=name, **kw))


def err(op, inputs, status, tag, **params):
    add(op, inputs, tag, error=status, params=params)


# ---- the reference quantizer ------------------------------------------------------------

def f32(x):
    return np.asarray(x, dtype=F32)


def store(v, sdt):
    """A block scale or minimum as stored in the scale dtype, back as f32."""
    v = f32(v)
    return v.astype(np.float16).astype(F32) if sdt == "f16" else v


def recip(d):
    """1 / d in f32, 0 where d is 0: x / d is 0 there (Q4_0 then stores 8, as ggml does)."""
    d = f32(d)
    with np.errstate(divide="ignore"):
        r = np.where(d == 0, F32(0), F32(1) / np.where(d == 0, F32(1), d))
    return f32(r)


def qrange(bits, kind):
    if kind == SYMMETRIC:
        return -127, 127
    return (-128, 127) if bits == 8 else (-8, 7)


def tensor_params(x, bits, kind):
    """The per-tensor scale and zero point chosen from the data. ember.h gives the formulas
    but not their precision: the scale is the formula's value rounded once to f32 (computed in
    float64, exact for f32 data up to that rounding), and the zero point comes from the stored
    f32 scale in float64 too, as src/ops/quant.c computes them."""
    x = np.asarray(x, dtype=F32).astype(np.float64).reshape(-1)
    if kind == SYMMETRIC:
        return F32(np.max(np.abs(x)) / 127.0), 0
    qmin, qmax = qrange(bits, kind)
    lo, hi = min(np.min(x), 0.0), max(np.max(x), 0.0)
    scale = F32((hi - lo) / (qmax - qmin))
    zp = np.clip(np.rint(qmin - lo / np.float64(scale)), qmin, qmax)
    return scale, int(zp)


def quant_tensor(x, bits, kind, scale, zp):
    """The integers of a per-tensor scheme, x's shape."""
    qmin, qmax = qrange(bits, kind)
    q = np.rint(f32(x) * recip(scale)) + F32(zp)
    return np.clip(q, qmin, qmax).astype(np.int64)


def quant_blocks(x, bits, kind, sdt):
    """The blocks of x (last dim a multiple of 32) as (d, m, q), each [nblocks] / [nblocks, 32]
    in row-major block order; q holds the stored integers (Q4: 0..15)."""
    xb = f32(x).reshape(-1, QB)
    if kind == BLOCK and bits == 8:
        d = store(np.max(np.abs(xb), axis=1) / F32(127), sdt)
        m = np.zeros_like(d)
        q = np.clip(np.rint(xb * recip(d)[:, None]), -127, 127)
    elif kind == BLOCK:
        first = np.argmax(np.abs(xb), axis=1)  # the first value of largest magnitude
        v = xb[np.arange(len(xb)), first]
        d = store(v / F32(-8), sdt)
        m = np.zeros_like(d)
        q = np.clip(np.rint(xb * recip(d)[:, None]) + F32(8), 0, 15)
    else:
        mn = np.min(xb, axis=1)
        m = store(mn, sdt)
        d = store(f32(np.max(xb, axis=1) - mn) / F32(15), sdt)
        q = np.clip(np.rint(f32(xb - m[:, None]) * recip(d)[:, None]), 0, 15)
    return d, m, q.astype(np.int64)


def block_bytes(d, m, q, bits, kind, sdt):
    """The bytes of each block: [nblocks, block size] uint8."""
    sd = np.dtype("<f2" if sdt == "f16" else "<f4")
    rows = []
    for i in range(len(d)):
        b = np.asarray(d[i], dtype=sd).tobytes()
        if kind == BLOCK_MIN:
            b += np.asarray(m[i], dtype=sd).tobytes()
        if bits == 8:
            b += q[i].astype(np.int8).tobytes()
        else:
            b += (q[i][:16] | (q[i][16:] << 4)).astype(np.uint8).tobytes()
        rows.append(np.frombuffer(b, dtype=np.uint8))
    return np.array(rows, dtype=np.uint8).reshape(len(d), -1)


def block_real(d, m, q, bits, kind):
    """The real values of blocks, [nblocks, 32] f32."""
    qf = f32(q)
    if kind == BLOCK_MIN:
        return f32(f32(d[:, None] * qf) + m[:, None])
    if bits == 4:
        return f32(d[:, None] * f32(qf - F32(8)))
    return f32(d[:, None] * qf)


def quantize(x, bits=8, kind=AFFINE, sdt="f32"):
    """Everything about x quantized: a dict with the bytes, the real values (x's shape) and,
    per kind, scale / zp / q or the block arrays (blocks [..., K / 32, block bytes])."""
    x = f32(x)
    r = {"bits": bits, "kind": kind, "sdt": sdt}
    if kind in (AFFINE, SYMMETRIC):
        scale, zp = tensor_params(x, bits, kind)
        q = quant_tensor(x, bits, kind, scale, zp)
        r.update(scale=scale, zp=zp, q=q)
        r["real"] = f32(scale * f32(q - zp))
        r["bytes"] = q.astype(np.int8).view(np.uint8).reshape(-1)
        return r
    d, m, q = quant_blocks(x, bits, kind, sdt)
    bb = block_bytes(d, m, q, bits, kind, sdt)
    r.update(d=d, m=m, qb=q)
    r["real"] = block_real(d, m, q, bits, kind).reshape(x.shape)
    r["blocks"] = bb.reshape(x.shape[:-1] + (x.shape[-1] // QB, bb.shape[1]))
    r["bytes"] = bb.reshape(-1)
    return r


def scheme_of(params, prefix=""):
    return (int(params.get(prefix + "bits", 8)), int(params.get(prefix + "kind", AFFINE)),
            params.get(prefix + "sdt", "f32"))


# ---- the reference quantized matmul (backend.h's qmatmul, case 1) --------------------------

def quant_rows(a):
    """a [M, K] quantized row by row in q8 blocks of 32 along K, f32 scales: the list of
    (start, stop, d [M], q [M, n]) of the blocks (the last one shorter)."""
    a = f32(a)
    out = []
    for s in range(0, a.shape[1], QB):
        blk = a[:, s:s + QB]
        d = f32(np.max(np.abs(blk), axis=1) / F32(127))
        q = np.clip(np.rint(blk * recip(d)[:, None]), -127, 127)
        q = np.where((d == 0)[:, None], 0, q).astype(np.int64)
        out.append((s, min(s + QB, a.shape[1]), d, q))
    return out


def act_blocks(a, prefix, params):
    """The left operand's blocks: (start, stop, d [M], q [M, n], final scale): quantized
    dynamically when the operand is float (no prefix scheme), else with its own scheme."""
    if prefix is None:
        return [blk + (F32(1),) for blk in quant_rows(a)]
    bits, kind, sdt = scheme_of(params, prefix)
    r = quantize(a, bits, kind, sdt)
    M, K = a.shape
    if kind in (AFFINE, SYMMETRIC):
        assert r["zp"] == 0
        return [(s, min(s + QB, K), np.ones(M, dtype=F32), r["q"][:, s:s + QB], r["scale"])
                for s in range(0, K, QB)]
    d = r["d"].reshape(M, K // QB)
    q = r["qb"].reshape(M, K)
    return [(s, s + QB, d[:, s // QB], q[:, s:s + QB], F32(1)) for s in range(0, K, QB)]


def qmatmul(a, w, params, a_prefix=None):
    """a [M, K] @ quantize(w)^T with w [N, K] quantized by rows with params' scheme: the
    int8 product. Returns (out [M, N] float64, the largest sum of the terms' magnitudes)."""
    bits, kind, sdt = scheme_of(params)
    wq = quantize(w, bits, kind, sdt)
    N, K = w.shape
    M = a.shape[0]
    blocks = act_blocks(a, a_prefix, params)
    out = np.zeros((M, N))
    mag = np.zeros((M, N))
    for s, e, da, qa, sa_final in blocks:
        sa = qa.sum(axis=1)  # [M]
        da = da.astype(np.float64)
        if kind in (AFFINE, SYMMETRIC):
            qb = wq["q"][:, s:e]  # [N, n]
            S = qa @ qb.T  # exact int64
            t = da[:, None] * float(wq["scale"]) * (S - wq["zp"] * sa[:, None])
        else:
            j = s // QB
            db = wq["d"].reshape(N, K // QB)[:, j].astype(np.float64)
            mb = wq["m"].reshape(N, K // QB)[:, j].astype(np.float64)
            qb = wq["qb"].reshape(N, K)[:, s:e]
            S = qa @ qb.T
            if kind == BLOCK_MIN:
                t = da[:, None] * db[None, :] * S + da[:, None] * mb[None, :] * sa[:, None]
            elif bits == 4:
                t = da[:, None] * db[None, :] * (S - 8 * sa[:, None])
            else:
                t = da[:, None] * db[None, :] * S
        t = t * float(sa_final)
        out += t
        mag += np.abs(t)
    return out, float(np.max(mag)) if mag.size else 0.0


def mm_tol(mag, k=1e-6):
    return (1e-5, max(k * mag, 1e-30))


def x2(x):
    """x as [M, K] (1-d: one row) and the result's reshape."""
    x = np.asarray(x)
    return x.reshape(-1, x.shape[-1]), x.shape[:-1]


# ---- references of the ops ----------------------------------------------------------------

def r_bytes(x, **p):
    bits, kind, sdt = scheme_of(p)
    r = quantize(x, bits, kind, sdt)
    if kind in (AFFINE, SYMMETRIC):
        return r["bytes"], np.array([r["scale"]]), np.array([r["zp"]])
    return r["bytes"]


def r_roundtrip(x, **p):
    bits, kind, sdt = scheme_of(p)
    return quantize(x, bits, kind, sdt)["real"]


def r_nbytes(**p):
    bits, kind, sdt = scheme_of(p)
    n = int(np.prod(p["shape"]))
    if kind in (AFFINE, SYMMETRIC):
        return np.array([n])
    scale = 4 if sdt == "f32" else 2
    size = scale * (2 if kind == BLOCK_MIN else 1) + (32 if bits == 8 else 16)
    return np.array([n // QB * size])


def r_from_bytes(b, **p):
    """The real values of the bytes b, read by the documented layout (an independent reading
    of the same text: d, m and the nibbles unpacked from the bytes)."""
    bits, kind, sdt = scheme_of(p)
    raw = np.asarray(b, dtype=np.int64).astype(np.uint8)
    shape = tuple(p["shape"])
    if kind in (AFFINE, SYMMETRIC):
        q = raw.view(np.int8).astype(np.int64)  # q4 too: one int4 a byte, as int8
        return f32(F32(p["scale"]) * f32(q - p.get("zp", 0))).reshape(shape)
    sd = np.dtype("<f2" if sdt == "f16" else "<f4")
    ss = sd.itemsize
    nsc = 2 if kind == BLOCK_MIN else 1
    bb = ss * nsc + (32 if bits == 8 else 16)
    blocks = raw.reshape(-1, bb)
    d = blocks[:, :ss].copy().view(sd).astype(F32).reshape(-1)
    m = (blocks[:, ss:2 * ss].copy().view(sd).astype(F32).reshape(-1) if nsc == 2
         else np.zeros_like(d))
    body = blocks[:, ss * nsc:]
    if bits == 8:
        q = body.view(np.int8).astype(np.int64)
    else:
        q = np.concatenate([body & 15, body >> 4], axis=1).astype(np.int64)
    with np.errstate(invalid="ignore"):
        return block_real(d, m, q, bits, kind).reshape(shape)


# ---- views (quant_layout) ----

V_SLICE, V_TRANSPOSE, V_RESHAPE, V_UNSQUEEZE, V_SELECT, V_FLIP, V_EXPAND, V_PERMUTE = range(8)


def np_view(a, p, blocks=False):
    """The view of params p applied to a (x's shape), or to the block array of a block
    tensor (blocks=True: [..., K / 32, block bytes], the block axis last in x)."""
    v = p["view"]
    ax = lambda d: d % (a.ndim - (1 if blocks else 0))  # noqa: E731
    if v == V_SLICE:
        idx = [slice(None)] * a.ndim
        dim = ax(p["dim"])
        start, stop, step = p["start"], p["stop"], p.get("step", 1)
        if blocks and dim == a.ndim - 2:
            start, stop = start // QB, stop // QB
        idx[dim] = slice(start, stop, step)
        return a[tuple(idx)]
    if v == V_TRANSPOSE:
        return np.swapaxes(a, ax(p["dim0"]), ax(p["dim1"]))
    if v == V_RESHAPE:
        shape = list(p["shape"])
        if blocks:
            shape = shape[:-1] + [shape[-1] // QB, a.shape[-1]]
        return a.reshape(shape)
    if v == V_UNSQUEEZE:
        return np.expand_dims(a, p["dim"])
    if v == V_SELECT:
        idx = [slice(None)] * a.ndim
        idx[ax(p["dim"])] = p["index"]
        return a[tuple(idx)]
    if v == V_FLIP:
        return np.flip(a, axis=tuple(ax(d) for d in p["dims"]))
    if v == V_EXPAND:
        shape = list(p["shape"])
        if blocks:
            shape = shape[:-1] + [shape[-1] // QB, a.shape[-1]]
        return np.broadcast_to(a, shape)
    if v == V_PERMUTE:
        perm = list(p["perm"])
        if blocks:
            perm = perm + [a.ndim - 1]
        return np.transpose(a, perm)
    raise ValueError(v)


def r_layout(x, **p):
    bits, kind, sdt = scheme_of(p)
    r = quantize(x, bits, kind, sdt)
    outs = [np_view(r["real"], p)]
    if p.get("bytes"):
        if kind in (AFFINE, SYMMETRIC):
            qv = np_view(r["q"], p)
            outs.append(np.ascontiguousarray(qv).astype(np.int8).view(np.uint8).reshape(-1))
        else:
            outs.append(np.ascontiguousarray(np_view(r["blocks"], p, blocks=True)).reshape(-1))
    if p.get("axis"):
        outs.append(np.array([p["axis_want"]]))
    return tuple(outs) if len(outs) > 1 else outs[0]


# ---- data ---------------------------------------------------------------------------------

def special_blocks():
    """Blocks of 32 that the formulas treat apart: all zero (d = 0), a single nonzero (both
    signs), negative- and positive-dominant (Q4_0's sign rule: d = v / -8 takes v's sign),
    two values of the largest magnitude with opposite signs (the first one wins), ties of
    the rounding (x * (1 / d) exactly k + 0.5 for d = 1), and a constant block (Q4_1's
    d = 0 with m != 0)."""
    z = np.zeros(QB)
    one_pos = z.copy()
    one_pos[5] = 1.75
    one_neg = z.copy()
    one_neg[31] = -3.0
    neg_dom = np.linspace(-0.5, 0.6, QB)
    neg_dom[9] = -2.5
    pos_dom = np.linspace(-0.6, 0.4, QB)
    pos_dom[20] = 2.25
    both = np.linspace(-1.0, 1.0, QB)
    both[3], both[17] = -1.5, 1.5
    ties8 = np.array([127.0, -127.0] + [k + 0.5 for k in range(-15, 15)])
    ties4 = np.array([-8.0, 7.0] + [((k % 15) - 7) + 0.5 for k in range(30)])
    # Q4_1 with min -1, max 14: d = 1, m = -1, x - m a half for every tie
    ties41 = np.array([-1.0, 14.0] + [((k % 14) - 1) + 0.5 for k in range(30)])
    const = np.full(QB, 0.375)
    return {"zero": z, "one_pos": one_pos, "one_neg": one_neg, "neg_dom": neg_dom,
            "pos_dom": pos_dom, "both": both, "ties8": ties8, "ties4": ties4,
            "ties41": ties41, "const": const}


SPECIAL = special_blocks()


def blocks_of(*names):
    return np.stack([SPECIAL[n] for n in names])


# ---- the cases ----------------------------------------------------------------------------

def bytes_cases():
    for sn, sp in SCHEMES.items():
        per = sn in PER_TENSOR
        out = ["u8", "f32", "i32"] if per else "u8"
        shapes = [(5,), (3, 7), (2, 3, 4)] if per else [(32,), (3, 64), (2, 3, 64), (5, 96)]
        for shp in shapes:
            add("quant_bytes", [T("f32", rnd(shp))], "%s/%s" % (sn, "x".join(map(str, shp))),
                r_bytes, params=dict(sp), out_dtypes=out)
        # the special blocks, in one tensor: one block a row
        names = list(SPECIAL)
        data = blocks_of(*names)
        if per:
            for nm in ("ties8", "ties4", "one_neg", "pos_dom"):
                blk = SPECIAL[nm]
                add("quant_bytes", [T("f32", blk)], "%s/%s" % (sn, nm), r_bytes,
                    params=dict(sp), out_dtypes=out)
        else:
            add("quant_bytes", [T("f32", data)], "%s/special" % sn, r_bytes, params=dict(sp),
                out_dtypes=out)
        # a wide range of magnitudes in one tensor
        wide = rnd((4, 32)) * np.array([[1e-3], [1.0], [30.0], [1e3]])
        add("quant_bytes", [T("f32", wide)], "%s/wide" % sn, r_bytes, params=dict(sp),
            out_dtypes=out)
    # em_quantize: the per-tensor affine scheme from the range
    for bits in (8, 4):
        add("quant_bytes", [T("f32", rnd((4, 5)))], "plain%d" % bits, r_bytes,
            params={"bits": bits, "kind": AFFINE, "plain": True}, out_dtypes=["u8", "f32", "i32"])
    # positive-only and negative-only data: 0 is kept in the range (zero point at an end)
    for sign, tag in ((1.0, "pos"), (-1.0, "neg")):
        for bits in (8, 4):
            add("quant_bytes", [T("f32", sign * rnd((6,), 0.5, 3.0))], "affine%d/%s" % (bits, tag),
                r_bytes, params={"bits": bits, "kind": AFFINE}, out_dtypes=["u8", "f32", "i32"])
    # other float dtypes of the input: quantized from their values
    for dt in ("f64", "f16", "bf16"):
        for sn in ("sym8", "q8_0", "q4_1h"):
            add("quant_bytes", [T(dt, rnd((2, 64)))], "%s/%s" % (sn, dt), r_bytes,
                params=dict(SCHEMES[sn]), out_dtypes=["u8", "f32", "i32"] if sn in PER_TENSOR
                else "u8")
    # a non-contiguous input (a transposed view): quantized as the view's values
    for sn in ("q8_0", "q4_0", "affine8"):
        add("quant_bytes", [T("f32", rnd((64, 3)), view=("transpose", 0, 1))], "%s/view" % sn,
            r_bytes, params=dict(SCHEMES[sn]),
            out_dtypes=["u8", "f32", "i32"] if sn in PER_TENSOR else "u8")


def roundtrip_cases():
    for sn, sp in SCHEMES.items():
        per = sn in PER_TENSOR
        shapes = [(7,), (2, 3, 5)] if per else [(64,), (3, 96)]
        for shp in shapes:
            add("quant_roundtrip", [T("f32", rnd(shp))], "%s/%s" % (sn, "x".join(map(str, shp))),
                r_roundtrip, params=dict(sp), out_dtypes="f32")
        if not per:
            add("quant_roundtrip", [T("f32", blocks_of(*SPECIAL))], "%s/special" % sn,
                r_roundtrip, params=dict(sp), out_dtypes="f32")
        add("quant_roundtrip", [T("f16", rnd((2, 32)))], "%s/f16" % sn, r_roundtrip,
            params=dict(sp), out_dtypes="f32")
    add("quant_roundtrip", [T("f32", rnd((3, 4)))], "plain8", r_roundtrip,
        params={"bits": 8, "kind": AFFINE, "plain": True}, out_dtypes="f32")


def matmul_cases():
    """The linear form x @ W^T with W [N, K] quantized by rows, for every scheme; the
    quantized left operand; case (2); the int8 x int8 product."""
    ref0 = lambda x, w, **p: _mm0(x, w, p)  # noqa: E731
    for sn, sp in SCHEMES.items():
        for (m, n, k) in ((1, 5, 32), (3, 5, 64), (3, 5, 96)):
            x, w = rnd((m, k)), rnd((n, k))
            _, mag = qmatmul(f32(x), f32(w), sp)
            add("quant_matmul", [T("f32", x), T("f32", w)], "%s/%dx%dx%d" % (sn, m, n, k), ref0,
                params=dict(sp, form=0), out_dtypes="f32", tol=mm_tol(mag))
        # the special blocks in the weight (rows of W) and in the activations
        w = blocks_of(*SPECIAL)
        x = np.concatenate([rnd((3, QB)), blocks_of("zero", "one_neg", "ties8")[:, :]], axis=0)
        _, mag = qmatmul(f32(x), f32(w), sp)
        add("quant_matmul", [T("f32", x), T("f32", w)], "%s/special" % sn, ref0,
            params=dict(sp, form=0), out_dtypes="f32", tol=mm_tol(mag))
        # the quantized left operand: W @ x^T
        x, w = rnd((3, 64)), rnd((5, 64))
        _, mag = qmatmul(f32(x), f32(w), sp)
        add("quant_matmul", [T("f32", x), T("f32", w)], "%s/left" % sn,
            lambda x, w, **p: _mm0(x, w, p).T, params=dict(sp, form=3), out_dtypes="f32",
            tol=mm_tol(mag))
    # sizes past the small ones, for kernels that tile rows and columns (odd M and N)
    for sn, sp in SCHEMES.items():
        x, w = rnd((9, 160)), rnd((19, 160))
        _, mag = qmatmul(f32(x), f32(w), sp)
        add("quant_matmul", [T("f32", x), T("f32", w)], "%s/9x19x160" % sn, ref0,
            params=dict(sp, form=0), out_dtypes="f32", tol=mm_tol(mag))
    # per-tensor weights with K not a multiple of 32: the activations' last block is shorter
    for sn in PER_TENSOR:
        for k in (7, 40):
            x, w = rnd((3, k)), rnd((5, k))
            _, mag = qmatmul(f32(x), f32(w), SCHEMES[sn])
            add("quant_matmul", [T("f32", x), T("f32", w)], "%s/k%d" % (sn, k), ref0,
                params=dict(SCHEMES[sn], form=0), out_dtypes="f32", tol=mm_tol(mag))
    # other ranks of x: 1-d (one row, the added dim removed) and 3-d (batch dims)
    for sn in ("q8_0", "q4_1", "sym8"):
        x, w = rnd((64,)), rnd((5, 64))
        _, mag = qmatmul(f32(x).reshape(1, -1), f32(w), SCHEMES[sn])
        add("quant_matmul", [T("f32", x), T("f32", w)], "%s/x1d" % sn, ref0,
            params=dict(SCHEMES[sn], form=0), out_dtypes="f32", tol=mm_tol(mag))
        x = rnd((2, 3, 32))
        _, mag = qmatmul(f32(x).reshape(-1, 32), f32(w[:, :32]), SCHEMES[sn])
        add("quant_matmul", [T("f32", x), T("f32", w[:, :32])], "%s/x3d" % sn, ref0,
            params=dict(SCHEMES[sn], form=0), out_dtypes="f32", tol=mm_tol(mag))
    # a 1-d quantized weight (its blocks along the reduction): x @ w, the added dim removed
    for sn in ("q8_0", "q4_0h", "sym8"):
        x, w = rnd((3, 64)), rnd((64,))
        _, mag = qmatmul(f32(x), f32(w).reshape(1, -1), SCHEMES[sn])
        add("quant_matmul", [T("f32", x), T("f32", w)], "%s/w1d" % sn,
            lambda x, w, **p: qmatmul(f32(x), f32(w).reshape(1, -1), p)[0][:, 0],
            params=dict(SCHEMES[sn], form=0), out_dtypes="f32", tol=mm_tol(mag))
    # an f16 x: the result is f16 (the f32 product rounded once more)
    for sn in ("q8_0h", "q4_0"):
        x, w = rnd((3, 64)), rnd((5, 64))
        add("quant_matmul", [T("f16", x), T("f32", w)], "%s/f16" % sn, ref0,
            params=dict(SCHEMES[sn], form=0), out_dtypes="f16", tol=(4e-3, 1e-2))
    # case (2): W [K, N] blocked along N (the output dim): x @ real(W) in f32
    for sn in BLOCKS:
        for (m, k, n) in ((1, 5, 32), (3, 7, 64), (9, 40, 96)):
            x, w = rnd((m, k)), rnd((k, n))
            real = quantize(w, *scheme_of(SCHEMES[sn]))["real"].astype(np.float64)
            mag = float(np.max(matmul(np.abs(f32(x)), np.abs(real))))
            add("quant_matmul", [T("f32", x), T("f32", w)], "%s/case2/%dx%dx%d" % (sn, m, k, n),
                _mm_case2, params=dict(SCHEMES[sn], form=1), out_dtypes="f32",
                tol=mm_tol(mag, 2e-6))
    # int8 x int8: both operands quantized (q8 symmetric or q8 blocks along K; affine with
    # its zero point 0: data whose range is [-128, 127] * scale)
    pairs = [("sym8", "sym8"), ("sym8", "q8_0"), ("q8_0", "q8_0"), ("q8_0h", "q8_0"),
             ("q8_0", "sym8"), ("q8_0h", "q8_0h")]
    for an, bn in pairs:
        for (m, n, k) in ((3, 5, 64), (1, 5, 96), (9, 19, 160)):
            a, w = rnd((m, k)), rnd((n, k))
            pa = {"a_" + key: v for key, v in SCHEMES[an].items()}
            params = dict(SCHEMES[bn], form=2, **pa)
            _, mag = qmatmul(f32(a), f32(w), params, "a_")
            add("quant_matmul", [T("f32", a), T("f32", w)], "%s@%s/%dx%dx%d" % (an, bn, m, n, k),
                lambda a, w, **p: qmatmul(f32(a), f32(w), p, "a_")[0], params=params,
                out_dtypes="f32", tol=mm_tol(mag))
    for an, bn in (("sym8", "sym8"), ("q8_0", "q8_0h")):
        a, w = rnd((3, 64)), rnd((64,))
        pa = {"a_" + key: v for key, v in SCHEMES[an].items()}
        params = dict(SCHEMES[bn], form=2, **pa)
        _, mag = qmatmul(f32(a), f32(w).reshape(1, -1), params, "a_")
        add("quant_matmul", [T("f32", a), T("f32", w)], "%s@%s/w1d" % (an, bn),
            lambda a, w, **p: qmatmul(f32(a), f32(w).reshape(1, -1), p, "a_")[0][:, 0],
            params=params, out_dtypes="f32", tol=mm_tol(mag))
    zp0 = np.concatenate([[127.0, -128.0], rnd((62,), -100, 100)]) / 64
    a = np.stack([zp0, np.roll(zp0, 5), -np.roll(zp0, 9)[::-1] * 0.5])
    a[2, 0], a[2, 1] = 127.0 / 64, -128.0 / 64
    w = rnd((5, 64))
    params = dict(SCHEMES["q8_0"], form=2, a_bits=8, a_kind=AFFINE)
    _, mag = qmatmul(f32(a), f32(w), params, "a_")
    add("quant_matmul", [T("f32", a), T("f32", w)], "affine8zp0@q8_0",
        lambda a, w, **p: qmatmul(f32(a), f32(w), p, "a_")[0], params=params, out_dtypes="f32",
        tol=mm_tol(mag))


def _mm0(x, w, p):
    x2d, lead = x2(x)
    out, _ = qmatmul(f32(x2d), f32(w), p)
    return out.reshape(lead + (w.shape[0],))


def _mm_case2(x, w, **p):
    real = quantize(w, *scheme_of(p))["real"].astype(np.float64)
    return matmul(f32(x), real)  # exactly rounded sums (common.matmul: no BLAS)


def layout_cases():
    """Views of quantized tensors, dequantized; their bytes (the contiguous form of the view)
    where the block axis stays last; the block axis em_tensor_scheme reports."""
    views = [
        ("slice_cols", (3, 128), dict(view=V_SLICE, dim=1, start=32, stop=96), True),
        ("slice_rows", (5, 64), dict(view=V_SLICE, dim=0, start=1, stop=5, step=2), True),
        ("slice_rows_neg", (5, 64), dict(view=V_SLICE, dim=0, start=4, stop=0, step=-1), True),
        ("transpose01", (2, 3, 64), dict(view=V_TRANSPOSE, dim0=0, dim1=1), True),
        ("reshape_lead", (2, 3, 64), dict(view=V_RESHAPE, shape=[6, 64]), True),
        ("reshape_split", (6, 64), dict(view=V_RESHAPE, shape=[3, 2, 64]), True),
        ("reshape_merge", (4, 64), dict(view=V_RESHAPE, shape=[2, 128]), True),
        ("reshape_flat", (4, 64), dict(view=V_RESHAPE, shape=[256]), True),
        ("reshape_blocks", (4, 64), dict(view=V_RESHAPE, shape=[4, 2, 32]), True),
        ("unsqueeze0", (3, 64), dict(view=V_UNSQUEEZE, dim=0), True),
        ("unsqueeze1", (3, 64), dict(view=V_UNSQUEEZE, dim=1), True),
        ("select_row", (4, 64), dict(view=V_SELECT, dim=0, index=2), True),
        ("select_mid", (2, 3, 64), dict(view=V_SELECT, dim=1, index=1), True),
        ("flip_rows", (3, 64), dict(view=V_FLIP, dims=[0]), True),
        ("expand", (1, 64), dict(view=V_EXPAND, shape=[3, 64]), True),
        ("permute_lead", (2, 3, 2, 32), dict(view=V_PERMUTE, perm=[2, 0, 1, 3]), True),
        # the block axis moved: dequantized only, with the reported axis
        ("transpose_axis", (3, 64), dict(view=V_TRANSPOSE, dim0=0, dim1=1, axis_want=0), False),
        ("permute_axis", (2, 3, 64), dict(view=V_PERMUTE, perm=[2, 0, 1], axis_want=0), False),
        ("unsqueeze_end", (3, 64), dict(view=V_UNSQUEEZE, dim=2, axis_want=1), False),
    ]
    for sn in ("q8_0", "q4_0h", "q4_1", "sym8", "affine4"):
        per = sn in PER_TENSOR
        for tag, shp, vp, with_bytes in views:
            params = dict(SCHEMES[sn], **vp)
            outs = ["f32"]
            if with_bytes:
                params["bytes"] = True
                outs.append("u8")
            if "axis_want" in vp and not per:
                params["axis"] = True
                outs.append("i32")
            add("quant_layout", [T("f32", rnd(shp))], "%s/%s" % (sn, tag), r_layout,
                params=params, out_dtypes=outs)
    # views that would cut a block
    x = T("f32", rnd((3, 64)))
    for sn in ("q8_0", "q4_1h"):
        sp = SCHEMES[sn]
        err("quant_layout", [x], "EM_ERR_UNSUPPORTED", "%s/slice_cuts" % sn,
            view=V_SLICE, dim=1, start=0, stop=16, **sp)
        err("quant_layout", [x], "EM_ERR_UNSUPPORTED", "%s/slice_step" % sn,
            view=V_SLICE, dim=1, start=0, stop=64, step=2, **sp)
        err("quant_layout", [x], "EM_ERR_UNSUPPORTED", "%s/reshape_cuts" % sn,
            view=V_RESHAPE, shape=[3, 4, 16], **sp)
        err("quant_layout", [x], "EM_ERR_UNSUPPORTED", "%s/flip_axis" % sn,
            view=V_FLIP, dims=[1], **sp)


def from_bytes_cases():
    """Bytes made here, read with em_tensor_from_quantized and dequantized: the reading of the
    layout, apart from ember's quantizer (a NaN block scale is taken as given)."""
    for sn in BLOCKS:
        bits, kind, sdt = scheme_of(SCHEMES[sn])
        x = np.concatenate([rnd((2, 64)), blocks_of("neg_dom", "ties4")], axis=1)
        b = quantize(x, bits, kind, sdt)["bytes"]
        add("quant_from_bytes", [T("u8", b)], sn, r_from_bytes,
            params=dict(SCHEMES[sn], shape=list(x.shape)), out_dtypes="f32")
        # a NaN scale in the second block
        r = quantize(x[:1, :64], bits, kind, sdt)
        bb = r["bytes"].copy().reshape(2, -1)
        bb[1, :np.dtype("<f2" if sdt == "f16" else "<f4").itemsize] = (
            np.frombuffer(np.asarray(np.nan, dtype="<f2" if sdt == "f16" else "<f4").tobytes(),
                          dtype=np.uint8))
        add("quant_from_bytes", [T("u8", bb.reshape(-1))], sn + "/nan_scale", r_from_bytes,
            params=dict(SCHEMES[sn], shape=[64]), out_dtypes="f32")
    for sn, zp in (("affine8", -3), ("affine4", 2), ("sym8", 0)):
        if SCHEMES[sn]["bits"] == 8:
            q = np.array([-128, -127, -1, 0, 1, 2, 63, 64, 126, 127, -64, 5])
            if SCHEMES[sn]["kind"] == SYMMETRIC:
                q[0] = -126
        else:
            q = np.array([-8, -7, -1, 0, 1, 2, 3, 7, 6, -4, 5, -8])
        b = q.astype(np.int8).view(np.uint8)
        add("quant_from_bytes", [T("u8", b)], sn, r_from_bytes,
            params=dict(SCHEMES[sn], shape=[3, 4], scale=0.03125, zp=zp), out_dtypes="f32")
    # a size that is not the layout's
    err("quant_from_bytes", [T("u8", np.zeros(35))], "EM_ERR_ARG", "q8_0/short",
        shape=[32], **SCHEMES["q8_0"])
    err("quant_from_bytes", [T("u8", np.zeros(12))], "EM_ERR_ARG", "sym8/bad_scale",
        shape=[12], scale=-1.0, **SCHEMES["sym8"])


def nbytes_cases():
    for sn, sp in SCHEMES.items():
        shape = [3, 5] if sn in PER_TENSOR else [3, 64]
        add("quant_nbytes", [], sn, r_nbytes, params=dict(sp, shape=shape), out_dtypes="i64")
    err("quant_nbytes", [], "EM_ERR_SHAPE", "q8_0/not_multiple", shape=[3, 48],
        **SCHEMES["q8_0"])
    err("quant_nbytes", [], "EM_ERR_DTYPE", "q4_sym", shape=[4], bits=4, kind=SYMMETRIC)


def error_cases():
    x48 = T("f32", rnd((3, 48)))
    for sn in BLOCKS:
        err("quant_bytes", [x48], "EM_ERR_SHAPE", "%s/last_dim_48" % sn, **SCHEMES[sn])
    err("quant_bytes", [T("f32", 1.5)], "EM_ERR_SHAPE", "q8_0/0d", **SCHEMES["q8_0"])
    err("quant_bytes", [T("f32", rnd((4,)))], "EM_ERR_DTYPE", "q4_sym", bits=4, kind=SYMMETRIC)
    err("quant_bytes", [T("i32", np.arange(32))], "EM_ERR_DTYPE", "int_input",
        **SCHEMES["q8_0"])
    err("quant_bytes", [T("i32", np.arange(6))], "EM_ERR_DTYPE", "int_input_sym",
        **SCHEMES["sym8"])
    nan = rnd((2, 32))
    nan[1, 7] = NAN
    inf = rnd((2, 32))
    inf[0, 31] = float("inf")
    for sn in ("q8_0", "sym8", "q4_1h"):
        err("quant_bytes", [T("f32", nan)], "EM_ERR_ARG", "%s/nan" % sn, **SCHEMES[sn])
        err("quant_bytes", [T("f32", inf)], "EM_ERR_ARG", "%s/inf" % sn, **SCHEMES[sn])
    # an elementwise op on a quantized tensor
    x = T("f32", rnd((2, 32)))
    err("quant_op", [x], "EM_ERR_DTYPE", "exp/q8_0", what=0, **SCHEMES["q8_0"])
    err("quant_op", [x], "EM_ERR_DTYPE", "exp/sym8", what=0, **SCHEMES["sym8"])
    err("quant_op", [x], "EM_ERR_DTYPE", "add/q4_0", what=1, **SCHEMES["q4_0"])
    # matmul pairs that are not products: q4 @ q4, a zero point in an int8 product, a batched
    # quantized operand
    a, w = T("f32", rnd((3, 64))), T("f32", rnd((5, 64)))
    err("quant_matmul", [a, w], "EM_ERR_UNSUPPORTED", "q4_0@q4_0", form=2, a_bits=4,
        a_kind=BLOCK, **SCHEMES["q4_0"])
    err("quant_matmul", [a, w], "EM_ERR_UNSUPPORTED", "q4_1@q4_0", form=2, a_bits=4,
        a_kind=BLOCK_MIN, **SCHEMES["q4_0"])
    # ember.h: an int8 product needs both operands int8 (backend.h's q4 rows are for an f32 a)
    for bn in ("q4_0", "q4_1", "affine4"):
        err("quant_matmul", [a, w], "EM_ERR_UNSUPPORTED", "sym8@%s" % bn, form=2, a_bits=8,
            a_kind=SYMMETRIC, **SCHEMES[bn])
    err("quant_matmul", [a, w], "EM_ERR_UNSUPPORTED", "q4_0@sym8", form=2, a_bits=4,
        a_kind=BLOCK, **SCHEMES["sym8"])
    pos = T("f32", rnd((3, 64), 0.5, 2.0))  # an affine zero point of -128
    err("quant_matmul", [pos, w], "EM_ERR_UNSUPPORTED", "affine8zp@q8_0", form=2, a_bits=8,
        a_kind=AFFINE, **SCHEMES["q8_0"])
    err("quant_matmul", [T("f32", rnd((3, 5))), T("f32", rnd((2, 5, 64)))],
        "EM_ERR_UNSUPPORTED", "batched_q", form=1, **SCHEMES["q8_0"])


bytes_cases()
roundtrip_cases()
matmul_cases()
layout_cases()
from_bytes_cases()
nbytes_cases()
error_cases()
