#!/usr/bin/env python3
"""ember's cpu reductions against PyTorch, in one process, interleaved round by round.

Usage: /usr/bin/python3 bench/reduce_vs_torch.py BUILD_DIR [--threads 1,2] [--rounds R]

BUILD_DIR holds libember.so (a build with the cpu backend). For each thread count a child
process loads both libraries (ctypes for ember) with EMBER_NUM_THREADS and
torch.set_num_threads set to it, and times each case for both, interleaved; each figure is
a median. Cases: sum over dim 1 (rows) and dim 0 (columns) of [4096, 4096] f32; the mean
over dims (0, 2, 3) of [32, 64, 28, 28] as the autodiff layer reduces a batch-norm gradient
(one reshape to [32, 64, 784], a row reduction over dim 2, then dim 0) against
x.mean((0, 2, 3)); softmax of [8, 8, 256, 256] over the last dim; and cumsum over dim 1 of
[1024, 1024]. Ratios above 1 mean ember is faster.
"""
import argparse
import ctypes
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ember_ctypes  # noqa: E402  (bench/ember_ctypes.py)
from ember_ctypes import I64P, P, PP  # noqa: E402


def load_ember(build):
    return ember_ctypes.load(build, (
        ("em_softmax", [P, ctypes.c_int, PP]),
        ("em_cumsum", [P, ctypes.c_int, PP]),
        ("em_sum_dim", [P, ctypes.c_int, ctypes.c_bool, PP]),
        ("em_mean_dim", [P, ctypes.c_int, ctypes.c_bool, PP]),
        ("em_reshape", [P, I64P, ctypes.c_int, PP])))


def child(build, threads, rounds):
    os.environ["EMBER_NUM_THREADS"] = str(threads)
    import torch
    ember_ctypes.torch_threads(torch, threads)
    em = ember_ctypes.Ember(load_ember(build))
    lib, tensor, call, run = em.lib, em.tensor, em.call, em.run

    only = os.environ.get("REDUCE_BENCH_ONLY", "")

    def pair_(name, a, b, reps):
        if only and only not in name:
            return None
        te, tt, _, _ = ember_ctypes.pair(a, b, rounds, reps)
        show(name, te, tt)
        return te, tt

    def show(name, te, tt):
        print("  %-44s ember %8.3f ms   torch %8.3f ms   ratio %5.2f" %
              (name, te * 1e3, tt * 1e3, tt / te), flush=True)

    torch.manual_seed(0)
    print("%d thread(s), torch %s, medians of %d rounds" % (threads, torch.__version__, rounds))
    s = torch.rand(4096, 4096) * 2 - 1
    es = tensor(s)
    pair_("sum dim 1 [4096, 4096] f32", lambda: run(lib.em_sum_dim, es, 1, False),
          lambda: s.sum(1), 5)
    pair_("sum dim 0 [4096, 4096] f32", lambda: run(lib.em_sum_dim, es, 0, False),
          lambda: s.sum(0), 5)
    lib.em_tensor_release(es)

    g = torch.rand(32, 64, 28, 28) * 2 - 1
    eg = tensor(g)
    shp = (ctypes.c_int64 * 3)(32, 64, 28 * 28)

    def bn_mean():
        v = call(lib.em_reshape, eg, shp, 3)
        a = call(lib.em_mean_dim, v, 2, True)
        b = call(lib.em_mean_dim, a, 0, True)
        for t in (v, a, b):
            lib.em_tensor_release(t)

    pair_("mean dims (0,2,3) [32, 64, 28, 28] f32", bn_mean, lambda: g.mean((0, 2, 3)), 20)

    def bn_mean3():  # the former way: one pass per reduced dim
        a = call(lib.em_mean_dim, eg, 3, True)
        b = call(lib.em_mean_dim, a, 2, True)
        c = call(lib.em_mean_dim, b, 0, True)
        for t in (a, b, c):
            lib.em_tensor_release(t)

    pair_("  (as 3 passes: dims 3, 2, 0)", bn_mean3, lambda: g.mean((0, 2, 3)), 20)
    lib.em_tensor_release(eg)

    x = torch.rand(8, 8, 256, 256) * 8 - 4
    ex = tensor(x)
    pair_("softmax dim -1 [8, 8, 256, 256] f32", lambda: run(lib.em_softmax, ex, -1),
          lambda: torch.softmax(x, -1), 3)
    lib.em_tensor_release(ex)

    c = torch.rand(1024, 1024)
    ec = tensor(c)
    pair_("cumsum dim 1 [1024, 1024] f32", lambda: run(lib.em_cumsum, ec, 1),
          lambda: torch.cumsum(c, 1), 5)
    pair_("cumsum dim 0 [1024, 1024] f32", lambda: run(lib.em_cumsum, ec, 0),
          lambda: torch.cumsum(c, 0), 5)
    lib.em_tensor_release(ec)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--child", type=int, default=0)
    args = ap.parse_args()
    if args.child:
        child(args.build, args.child, args.rounds)
        return 0
    print("ember cpu reductions vs PyTorch, OPENBLAS_CORETYPE=%s, ratio = torch time / ember "
          "time" % os.environ.get("OPENBLAS_CORETYPE", "(unset)"))
    for t in args.threads.split(","):
        subprocess.run([sys.executable, os.path.abspath(__file__), args.build, "--child", t,
                        "--rounds", str(args.rounds)], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
