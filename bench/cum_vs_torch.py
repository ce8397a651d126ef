#!/usr/bin/env python3
"""ember's cpu cumprod / cummax / cummin against PyTorch, in one process, interleaved round by
round.

Usage: /usr/bin/python3 bench/cum_vs_torch.py BUILD_DIR [--threads 1,2] [--rounds R]
           [--clock wall|cpu]

BUILD_DIR holds libember.so (a build with the cpu backend). For each thread count a child
process loads both libraries (ctypes for ember) with EMBER_NUM_THREADS and torch's threads
(ember_ctypes.torch_threads) set to it, and times each case for both, interleaved; each
figure is a median. Cases: cumprod and cummax (values and indices) of [1024, 1024] f32 over
dim 1 (contiguous lines) and dim 0 (columns), and of a [1024, 1024] transposed view over
dim 1; cummin over dim 0 of [64, 128, 128]. The ref backend's time for the same call is
printed beside them (ref / ember). Ratios above 1 mean ember is faster. --clock cpu times the
process's CPU time instead of the wall clock (for one thread on a busy machine; with two it
sums both threads' work).
"""
import argparse
import ctypes
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ember_ctypes  # noqa: E402  (bench/ember_ctypes.py)
from ember_ctypes import P, PP  # noqa: E402


def load_ember(build):
    return ember_ctypes.load(build, (
        ("em_cumprod", [P, ctypes.c_int, PP]),
        ("em_cummax", [P, ctypes.c_int, PP, PP]),
        ("em_cummin", [P, ctypes.c_int, PP, PP]),
        ("em_transpose", [P, ctypes.c_int, ctypes.c_int, PP])))


def child(build, threads, rounds, clock):
    os.environ["EMBER_NUM_THREADS"] = str(threads)
    if clock == "cpu":
        import time
        ember_ctypes.CLOCK = time.process_time
    import torch
    ember_ctypes.torch_threads(torch, threads)
    em = ember_ctypes.Ember(load_ember(build))
    lib, tensor, call = em.lib, em.tensor, em.call

    def cumprod(x, d):
        return lambda: em.run(lib.em_cumprod, x, d)

    def cumext(fn, x, d):
        def go():
            v, i = ctypes.c_void_p(), ctypes.c_void_p()
            em.check(fn(x, d, ctypes.byref(v), ctypes.byref(i)))
            em.release(v, i)
        return go

    def show(name, a, b, c, reps):
        te, tt, _, _ = ember_ctypes.pair(a, b, rounds, reps)
        tr = ember_ctypes.timed(c, 1)
        print("  %-40s ember %8.3f ms   torch %8.3f ms   ratio %5.2f   ref/ember %6.1f" %
              (name, te * 1e3, tt * 1e3, tt / te, tr / te), flush=True)

    torch.manual_seed(0)
    print("%d thread(s), torch %s, medians of %d rounds" % (threads, torch.__version__, rounds))
    x = 1.0 + (torch.rand(1024, 1024) - 0.5) * 0.01
    ex, rx = tensor(x), tensor(x, "ref")
    et = call(lib.em_transpose, ex, 0, 1)
    rt = call(lib.em_transpose, rx, 0, 1)
    xt = x.t()
    for d in (1, 0):
        show("cumprod dim %d [1024, 1024] f32" % d, cumprod(ex, d),
             lambda d=d: torch.cumprod(x, d), cumprod(rx, d), 5)
        show("cummax dim %d [1024, 1024] f32" % d, cumext(lib.em_cummax, ex, d),
             lambda d=d: torch.cummax(x, d), cumext(lib.em_cummax, rx, d), 5)
    show("cumprod dim 1 of a transposed view", cumprod(et, 1), lambda: torch.cumprod(xt, 1),
         cumprod(rt, 1), 5)
    show("cummax dim 1 of a transposed view", cumext(lib.em_cummax, et, 1),
         lambda: torch.cummax(xt, 1), cumext(lib.em_cummax, rt, 1), 5)
    em.release(ex, rx, et, rt)
    y = torch.rand(64, 128, 128)
    ey, ry = tensor(y), tensor(y, "ref")
    show("cummin dim 0 [64, 128, 128] f32", cumext(lib.em_cummin, ey, 0),
         lambda: torch.cummin(y, 0), cumext(lib.em_cummin, ry, 0), 3)
    em.release(ey, ry)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--child", type=int, default=0)
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    args = ap.parse_args()
    if args.child:
        child(args.build, args.child, args.rounds, args.clock)
        return 0
    print("ember cpu cumprod / cummax / cummin vs PyTorch, OPENBLAS_CORETYPE=%s, %s clock, ratio "
          "= torch time / ember time" % (os.environ.get("OPENBLAS_CORETYPE", "(unset)"),
                                          args.clock))
    for t in args.threads.split(","):
        subprocess.run([sys.executable, os.path.abspath(__file__), args.build, "--child", t,
                        "--rounds", str(args.rounds), "--clock", args.clock], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
