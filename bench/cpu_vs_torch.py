#!/usr/bin/env python3
"""ember's cpu backend against PyTorch on the same machine, threads and inputs, in one run.

Usage: /usr/bin/python3 bench/cpu_vs_torch.py BUILD_DIR [--threads N] [--rounds R]

BUILD_DIR is a build of ember with -DEMBER_WITH_CPU=ON (it holds libember.so and ember-bench).
ember is driven through its shared library with ctypes, so both libraries run in this one
process, interleaved round by round; each figure is a median. Cases (from issue 4):
softmax over the rows of [4096, 1024], sum over dim 1 of [4096, 4096], conv2d of
[64, 3, 56, 56] with 64 3x3 filters (padding 1); and the tiny-op latency of em_add
(`ember-bench cpu --tiny`) against PyTorch's C++ at::add (bench/tiny_add_torch.cpp, built
here against Debian's libtorch-dev). From issue 13, the layouts of the models: masked_fill of
[8, 8, 256, 256] with a [256, 256] causal mask (broadcast), permute(0, 2, 1, 3) + contiguous of
[8, 256, 8, 64] and its inverse (attention heads split and merged), [32, 64, 28, 28] times and
plus [1, 64, 1, 1] (batch norm's scale and shift), and gelu of 16M floats.
--filter TEXT runs only the cases whose name contains TEXT; --clock cpu times CPU time (one
thread on a busy machine).

PyTorch is timed twice for conv2d: "as it comes" (a fresh output each call, as a user's code
runs it) and its best round; on machines where first touching a fresh page is slow, the
first is the one users see. Ratios above 1 mean ember is faster.
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ember_ctypes  # noqa: E402  (bench/ember_ctypes.py)
from ember_ctypes import P, PP, pair  # noqa: E402


class ConvParams(ctypes.Structure):
    _fields_ = [("stride", ctypes.c_int64 * 2), ("padding", ctypes.c_int64 * 2),
                ("dilation", ctypes.c_int64 * 2), ("output_padding", ctypes.c_int64 * 2),
                ("groups", ctypes.c_int64)]


def load_ember(build):
    return ember_ctypes.load(build, (
        ("em_softmax", [P, ctypes.c_int, PP]),
        ("em_sum_dim", [P, ctypes.c_int, ctypes.c_bool, PP]),
        ("em_conv2d", [P, P, P, ctypes.POINTER(ConvParams), PP]),
        ("em_masked_fill", [P, P, ctypes.c_double, PP]),
        ("em_permute", [P, ctypes.POINTER(ctypes.c_int), ctypes.c_int, PP]),
        ("em_contiguous", [P, PP]),
        ("em_mul", [P, P, PP]),
        ("em_add", [P, P, PP]),
        ("em_gelu", [P, PP])))


class Ember(ember_ctypes.Ember):
    def permute_contiguous(self, x, perm):
        p = ctypes.c_void_p()
        pa = (ctypes.c_int * len(perm))(*perm)
        self.check(self.lib.em_permute(x, pa, len(perm), ctypes.byref(p)))
        out = ctypes.c_void_p()
        st = self.lib.em_contiguous(p, ctypes.byref(out))
        self.lib.em_tensor_release(p)
        self.check(st)
        self.lib.em_tensor_release(out)


def tiny(build):
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "tiny_add_torch")
        try:
            subprocess.run(["g++", "-O2", "-std=c++17", os.path.join(here, "tiny_add_torch.cpp"),
                            "-o", exe, "-ltorch", "-ltorch_cpu", "-lc10"], check=True,
                           capture_output=True)
        except (OSError, subprocess.CalledProcessError) as e:
            print("  at::add: could not build bench/tiny_add_torch.cpp (libtorch-dev?):", e)
            return
        torch_ns = float(subprocess.run([exe], check=True, capture_output=True,
                                        text=True).stdout)
    out = subprocess.run([os.path.join(build, "ember-bench"), "cpu", "--tiny"], check=True,
                         capture_output=True, text=True).stdout
    ember_ns = float(out.split("on cpu:")[1].split("ns/op")[0])
    print("  %-40s ember %9.1f ns   torch %9.1f ns   ratio %6.2f" %
          ("tiny add (em_add vs at::add)", ember_ns, torch_ns, torch_ns / ember_ns))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--filter", default="")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: time this process's CPU time instead of the wall clock, for one "
                         "thread on a busy machine (time spent waiting for a core is not "
                         "counted; with more threads it adds up every thread's time)")
    args = ap.parse_args()
    if args.clock == "cpu":
        ember_ctypes.CLOCK = time.process_time
    os.environ["EMBER_NUM_THREADS"] = str(args.threads)
    ember_ctypes.torch_threads(torch, args.threads)
    em = Ember(load_ember(args.build))
    lib = em.lib
    torch.manual_seed(0)
    print("ember cpu vs PyTorch %s, %d thread(s), OPENBLAS_CORETYPE=%s; medians of %d rounds "
          "(%s clock)" % (torch.__version__, args.threads,
                          os.environ.get("OPENBLAS_CORETYPE", "(unset)"), args.rounds, args.clock))

    def want(name):
        return args.filter in name

    def show(name, te, tt):
        print("  %-40s ember %9.3f ms   torch %9.3f ms   ratio %6.2f" %
              (name, te * 1e3, tt * 1e3, tt / te))

    def versus(name, a, b, reps):
        """Medians and, less sensitive to a busy machine (interference only adds time), the
        ratio of the best rounds."""
        te, tt, be, bt = pair(a, b, args.rounds, reps)
        print("  %-40s ember %9.3f ms   torch %9.3f ms   ratio %6.2f   (best rounds %.3f / "
              "%.3f ms: ratio %.2f)" % (name, te * 1e3, tt * 1e3, tt / te, be * 1e3, bt * 1e3,
                                        bt / be))

    if want("softmax rows [4096, 1024]"):
        x = torch.rand(4096, 1024) * 2 - 1
        ex = em.tensor(x)
        te, tt, _, _ = pair(lambda: em.run(lib.em_softmax, ex, -1), lambda: torch.softmax(x, -1),
                            args.rounds, 5)
        show("softmax rows [4096, 1024]", te, tt)
        lib.em_tensor_release(ex)

    if want("sum dim 1 [4096, 4096]"):
        s = torch.rand(4096, 4096)
        es = em.tensor(s)
        te, tt, _, _ = pair(lambda: em.run(lib.em_sum_dim, es, 1, False), lambda: s.sum(1),
                            args.rounds, 5)
        show("sum dim 1 [4096, 4096]", te, tt)
        lib.em_tensor_release(es)

    if want("conv2d 64x3x56x56, 64 3x3 pad 1"):
        xi = torch.rand(64, 3, 56, 56)
        w = torch.rand(64, 3, 3, 3)
        exi, ew = em.tensor(xi), em.tensor(w)
        p = ConvParams((1, 1), (1, 1), (1, 1), (0, 0), 1)
        te, tt, _, tbest = pair(lambda: em.run(lib.em_conv2d, exi, ew, None, ctypes.byref(p)),
                                lambda: torch.nn.functional.conv2d(xi, w, padding=1),
                                args.rounds, 3)
        print("  %-40s ember %9.3f ms   torch %9.3f ms   ratio %6.2f   (torch's best round "
              "%.3f ms: ratio %.2f)" % ("conv2d 64x3x56x56, 64 3x3 pad 1", te * 1e3, tt * 1e3,
                                        tt / te, tbest * 1e3, tbest / te))
        lib.em_tensor_release(exi)
        lib.em_tensor_release(ew)

    # ---- the layouts of the models (issue 13) ----
    name = "masked_fill [8,8,256,256], [256,256] mask"
    if want(name):
        T = 256
        x = torch.rand(8, 8, T, T)
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        ex, em_mask = em.tensor(x), em.tensor(mask)
        versus(name, lambda: em.run(lib.em_masked_fill, ex, em_mask, float("-inf")),
               lambda: x.masked_fill(mask, float("-inf")), 3)
        lib.em_tensor_release(ex)
        lib.em_tensor_release(em_mask)

    for shape, perm, name in (
            ((8, 256, 8, 64), (0, 2, 1, 3), "permute(0,2,1,3)+contig [8,256,8,64]"),
            ((8, 8, 256, 64), (0, 2, 1, 3), "permute(0,2,1,3)+contig [8,8,256,64]"),
            ((32, 64, 28, 28), (0, 2, 3, 1), "permute(0,2,3,1)+contig [32,64,28,28]"),
            ((2048, 2048), (1, 0), "transpose+contig [2048,2048]")):
        if not want(name):
            continue
        x = torch.rand(*shape)
        ex = em.tensor(x)
        versus(name, lambda: em.permute_contiguous(ex, perm),
               lambda: x.permute(*perm).contiguous(), 5)
        lib.em_tensor_release(ex)

    for opname, efn, tfn in (("*", lib.em_mul, torch.mul), ("+", lib.em_add, torch.add)):
        name = "[32,64,28,28] %s [1,64,1,1]" % opname
        if not want(name):
            continue
        x = torch.rand(32, 64, 28, 28)
        c = torch.rand(1, 64, 1, 1)
        ex, ec = em.tensor(x), em.tensor(c)
        versus(name, lambda: em.run(efn, ex, ec), lambda: tfn(x, c), 5)
        lib.em_tensor_release(ex)
        lib.em_tensor_release(ec)

    name = "gelu 16M f32"
    if want(name):
        x = torch.rand(16 << 20) * 8 - 4
        ex = em.tensor(x)
        versus(name, lambda: em.run(lib.em_gelu, ex), lambda: torch.nn.functional.gelu(x), 2)
        lib.em_tensor_release(ex)

    if want("tiny add"):
        tiny(args.build)


if __name__ == "__main__":
    sys.exit(main())
