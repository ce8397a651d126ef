#!/usr/bin/env python3
"""ember's cpu kernels of issue 14's elementwise ops (src/backends/cpu/unary_more.h,
elementwise.c's atan2 / xor, clamp_tensor) against PyTorch, f32.

Usage: /usr/bin/python3 bench/elementwise14_vs_torch.py BUILD_DIR [--threads N] [--rounds R]
                                                         [--n ELEMENTS]

BUILD_DIR holds libember.so (a build with the cpu backend). ember runs through ctypes in this
process, interleaved round by round with PyTorch on the same input (bench/ember_ctypes.py);
each figure is a median of R rounds, and the ratio of the best rounds. Ratios above 1 mean
ember's cpu is faster. Inputs: N(0, 2^2) (|x| for log2/log10, U(-1, 1) for asin/acos).
"""
import argparse
import ctypes
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ember_ctypes  # noqa: E402
from ember_ctypes import P, PP, pair  # noqa: E402

D = ctypes.c_double
DP = ctypes.POINTER(ctypes.c_double)

UNARY = [("softplus", lambda t: torch.nn.functional.softplus(t)),
         ("tan", torch.tan), ("asin", torch.asin), ("acos", torch.acos), ("atan", torch.atan),
         ("sinh", torch.sinh), ("cosh", torch.cosh), ("expm1", torch.expm1),
         ("log2", torch.log2), ("log10", torch.log10), ("isnan", torch.isnan),
         ("isinf", torch.isinf), ("isfinite", torch.isfinite),
         ("nan_to_num", torch.nan_to_num)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--n", type=int, default=4 * 1024 * 1024)
    args = ap.parse_args()
    os.environ["EMBER_NUM_THREADS"] = str(args.threads)
    ember_ctypes.torch_threads(torch, args.threads)
    types = [("em_" + n, [P, PP]) for n, _ in UNARY if n not in ("softplus", "nan_to_num")]
    types += [("em_softplus", [P, D, D, PP]), ("em_nan_to_num", [P, D, DP, DP, PP]),
              ("em_atan2", [P, P, PP]), ("em_logical_xor", [P, P, PP]),
              ("em_clamp_tensor", [P, P, P, PP])]
    em = ember_ctypes.Ember(ember_ctypes.load(args.build, types), "cpu")
    lib = em.lib
    torch.manual_seed(0)
    print("ember cpu vs PyTorch %s, f32, %d elements, %d thread(s), EMBER_CPU_ISA=%s; medians "
          "of %d rounds" % (torch.__version__, args.n, args.threads,
                            os.environ.get("EMBER_CPU_ISA", "(auto)"), args.rounds))
    base = torch.randn(args.n) * 2
    unit = torch.rand(args.n) * 2 - 1
    rows = []

    def row(name, ember_fn, torch_fn):
        te, tt, be, bt = pair(ember_fn, torch_fn, args.rounds, 3)
        rows.append(tt / te)
        print("  %-12s ember %8.3f ms  torch %8.3f ms  ratio %5.2f  (best rounds: %5.2f)"
              % (name, te * 1e3, tt * 1e3, tt / te, bt / be), flush=True)

    for name, tfn in UNARY:
        x = base.abs() if name in ("log2", "log10") else unit if name in ("asin", "acos") else base
        ex = em.tensor(x)
        fn = getattr(lib, "em_" + name)
        if name == "softplus":
            row(name, lambda: em.run(fn, ex, 1.0, 20.0), lambda: tfn(x))
        elif name == "nan_to_num":
            row(name, lambda: em.run(fn, ex, 0.0, None, None), lambda: tfn(x))
        else:
            row(name, lambda: em.run(fn, ex), lambda: tfn(x))
        em.release(ex)
    y = torch.randn(args.n) * 2
    ex, ey = em.tensor(base), em.tensor(y)
    row("atan2", lambda: em.run(lib.em_atan2, ex, ey), lambda: torch.atan2(base, y))
    bx, by = base > 0, y > 0
    ebx, eby = em.tensor(bx), em.tensor(by)
    row("logical_xor", lambda: em.run(lib.em_logical_xor, ebx, eby),
        lambda: torch.logical_xor(bx, by))
    lo, hi = -y.abs(), y.abs()
    elo, ehi = em.tensor(lo), em.tensor(hi)
    row("clamp_tensor", lambda: em.run(lib.em_clamp_tensor, ex, elo, ehi),
        lambda: torch.clamp(base, min=lo, max=hi))
    em.release(ex, ey, ebx, eby, elo, ehi)
    print("  lowest ratio %.2f" % min(rows))


if __name__ == "__main__":
    sys.exit(main())
