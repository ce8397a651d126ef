#!/usr/bin/env python3
"""Compares a committed golden file with a freshly generated one, within a stated tolerance.

Usage: golden_compare.py COMMITTED FRESH [--exact]

Used by scripts/test.sh for tests/conformance/golden.txt (gen_golden.py) and
tests/autodiff/golden_grads.txt (gen_grads.py). The files must have the same lines with the
same words, except that two floating-point numbers may differ by a tiny amount, because the
last bit of exp, sin, a BLAS sum ... depends on the machine and its libraries (the C
library's libm with or without FMA; PyTorch's AVX2 / AVX-512 kernels and OpenBLAS's kernel
for gen_grads.py). Two numbers a (committed) and b (fresh) are the same when

    a == b (nan == nan, inf == inf), or
    they are at most 4 units in the last place apart in the dtype of their line
    (f64 unless the line names f32, f16 or bf16), or
    |a - b| <= 4 * eps(dtype) * M, where M is the largest magnitude on that line
    (a value summed from larger ones, near zero, carries the error of its terms).

Case names, ops, dtypes, shapes, parameters, integers, bools and error statuses must match
exactly. A case added, removed or changed in cases/*.py changes words or values far beyond
that and makes the file stale. With --exact the files must be byte-identical (what
scripts/test.sh checks of two runs of gen_golden.py on one machine under different
OPENBLAS_CORETYPE settings). Exit status 0 when they match, 1 when not (the first
differences are printed), 2 on a usage error.
"""
import math
import struct
import sys

ULPS = 4
# dtype: (bits of the integer that orders its values, epsilon)
DTYPES = {"f64": (64, 2.0 ** -52), "f32": (32, 2.0 ** -23), "f16": (16, 2.0 ** -10),
          "bf16": (16, 2.0 ** -7)}


def parse_float(word):
    if word in ("nan", "inf", "-inf"):
        return float(word)
    try:
        return float(word)
    except ValueError:
        return None


def ordered(x, dt):
    """An integer that counts representable values of dtype dt (adjacent values differ by 1).
    f16 and bf16 values are written as float32 numbers: count in float32, then drop the bits
    the narrow type does not have."""
    if dt == "f64":
        (i,) = struct.unpack("<q", struct.pack("<d", x))
        return i if i >= 0 else -(i & 0x7FFFFFFFFFFFFFFF)
    (i,) = struct.unpack("<i", struct.pack("<f", x))
    i = i if i >= 0 else -(i & 0x7FFFFFFF)
    return i >> {"f32": 0, "f16": 13, "bf16": 16}[dt]


def is_int(word):
    return word.lstrip("-").isdigit()


def line_dtype(words):
    for w in words[:3]:
        if w in DTYPES:
            return w
    return "f64"


def same_number(a, b, dt, scale):
    if a == b or (math.isnan(a) and math.isnan(b)):
        return True
    if math.isnan(a) or math.isnan(b) or math.isinf(a) or math.isinf(b):
        return False
    if abs(ordered(a, dt) - ordered(b, dt)) <= ULPS:
        return True
    return abs(a - b) <= ULPS * DTYPES[dt][1] * scale


def compare_lines(la, lb):
    """None when the lines match, else a short reason."""
    if la == lb:
        return None
    wa, wb = la.split(), lb.split()
    if len(wa) != len(wb):
        return "different number of words"
    if ":" in wa:
        head = wa.index(":") + 1
    elif wa and wa[0] == "loss":
        head = 1
    else:
        head = len(wa)
    if wa[:head] != wb[:head]:
        return "different words"
    dt = line_dtype(wa)
    va = [parse_float(w) for w in wa[head:]]
    vb = [parse_float(w) for w in wb[head:]]
    if any(v is None for v in va + vb):
        return "different words"
    for x, y in zip(wa[head:], wb[head:]):
        if x != y and (is_int(x) or is_int(y)):
            return "integer values differ"  # ints and bools are exact; floats have . e nan inf
    finite = [abs(v) for v in va + vb if not (math.isnan(v) or math.isinf(v))]
    scale = max(finite) if finite else 0.0
    for k, (x, y) in enumerate(zip(va, vb)):
        if not same_number(x, y, dt, scale):
            return "value %d: %r vs %r (%s)" % (k, x, y, dt)
    return None


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    exact = "--exact" in argv
    if len(args) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    with open(args[0]) as f:
        a = f.read()
    with open(args[1]) as f:
        b = f.read()
    if a == b:
        print("golden_compare: %s: identical" % args[0])
        return 0
    if exact:
        print("golden_compare: %s and %s are not identical" % tuple(args))
        return 1
    la, lb = a.splitlines(), b.splitlines()
    if len(la) != len(lb):
        print("golden_compare: %s: %d lines, fresh data has %d" % (args[0], len(la), len(lb)))
        return 1
    bad, near = 0, 0
    case = ""
    for n, (x, y) in enumerate(zip(la, lb), 1):
        if x.startswith("case ") or x.startswith("composite "):
            case = x
        if x == y:
            continue
        why = compare_lines(x, y)
        if why is None:
            near += 1
            continue
        bad += 1
        if bad <= 10:
            print("golden_compare: %s line %d (%s): %s" % (args[0], n, case, why))
    if bad:
        print("golden_compare: %s: %d lines differ beyond the tolerance" % (args[0], bad))
        return 1
    print("golden_compare: %s: matches (%d lines within %d ulp / %d eps of their largest value)"
          % (args[0], near, ULPS, ULPS))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
