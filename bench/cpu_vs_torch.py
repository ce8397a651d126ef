#!/usr/bin/env python3
"""ember's cpu backend against PyTorch on the same machine, threads and inputs, in one run.

Usage: /usr/bin/python3 bench/cpu_vs_torch.py BUILD_DIR [--threads N] [--rounds R]

BUILD_DIR is a build of ember with -DEMBER_WITH_CPU=ON (it holds libember.so and ember-bench).
ember is driven through its shared library with ctypes, so both libraries run in this one
process, interleaved round by round; each figure is a median. Cases (from issue 4):
softmax over the rows of [4096, 1024], sum over dim 1 of [4096, 4096], conv2d of
[64, 3, 56, 56] with 64 3x3 filters (padding 1); and the tiny-op latency of em_add
(`ember-bench cpu --tiny`) against PyTorch's C++ at::add (bench/tiny_add_torch.cpp, built
here against Debian's libtorch-dev).

PyTorch is timed twice for conv2d: "as it comes" (a fresh output each call, as a user's code
runs it) and its best round; on machines where first touching a fresh page is slow, the
first is the one users see. Ratios above 1 mean ember is faster.
"""
import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch


class ConvParams(ctypes.Structure):
    _fields_ = [("stride", ctypes.c_int64 * 2), ("padding", ctypes.c_int64 * 2),
                ("dilation", ctypes.c_int64 * 2), ("output_padding", ctypes.c_int64 * 2),
                ("groups", ctypes.c_int64)]


class Device(ctypes.Structure):
    _fields_ = [("backend", ctypes.c_int), ("index", ctypes.c_int), ("autodiff", ctypes.c_bool),
                ("checkpointing", ctypes.c_int)]


def load_ember(build):
    lib = ctypes.CDLL(os.path.join(build, "libember.so"))
    p = ctypes.c_void_p
    lib.em_device_parse.argtypes = [ctypes.c_char_p, ctypes.POINTER(Device)]
    lib.em_tensor_from_data.argtypes = [p, ctypes.c_int, ctypes.POINTER(ctypes.c_int64),
                                        ctypes.c_int, Device, ctypes.POINTER(p)]
    lib.em_softmax.argtypes = [p, ctypes.c_int, ctypes.POINTER(p)]
    lib.em_sum_dim.argtypes = [p, ctypes.c_int, ctypes.c_bool, ctypes.POINTER(p)]
    lib.em_conv2d.argtypes = [p, p, p, ctypes.POINTER(ConvParams), ctypes.POINTER(p)]
    lib.em_tensor_release.argtypes = [p]
    lib.em_last_error.restype = ctypes.c_char_p
    return lib


class Ember:
    def __init__(self, lib):
        self.lib = lib
        self.dev = Device()
        self.check(lib.em_device_parse(b"cpu", ctypes.byref(self.dev)))

    def check(self, status):
        if status != 0:
            raise RuntimeError("ember: " + self.lib.em_last_error().decode())

    def tensor(self, t):
        t = t.contiguous()
        shape = (ctypes.c_int64 * t.dim())(*t.shape)
        out = ctypes.c_void_p()
        self.check(self.lib.em_tensor_from_data(ctypes.c_void_p(t.data_ptr()), 0, shape, t.dim(),
                                                self.dev, ctypes.byref(out)))
        return out

    def run(self, fn, *args):
        out = ctypes.c_void_p()
        self.check(fn(*args, ctypes.byref(out)))
        self.lib.em_tensor_release(out)


def timed(fn, reps):
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def pair(a, b, rounds, reps):
    """Median seconds of a and b, interleaved (one warm-up each)."""
    a(), b()
    ta, tb = [], []
    for r in range(rounds):
        if r % 2:
            tb.append(timed(b, reps)); ta.append(timed(a, reps))
        else:
            ta.append(timed(a, reps)); tb.append(timed(b, reps))
    return statistics.median(ta), statistics.median(tb), min(tb)


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
    args = ap.parse_args()
    os.environ["EMBER_NUM_THREADS"] = str(args.threads)
    torch.set_num_threads(args.threads)
    em = Ember(load_ember(args.build))
    lib = em.lib
    torch.manual_seed(0)
    print("ember cpu vs PyTorch %s, %d thread(s), OPENBLAS_CORETYPE=%s; medians of %d rounds"
          % (torch.__version__, args.threads, os.environ.get("OPENBLAS_CORETYPE", "(unset)"),
             args.rounds))

    x = torch.rand(4096, 1024) * 2 - 1
    ex = em.tensor(x)
    te, tt, _ = pair(lambda: em.run(lib.em_softmax, ex, -1), lambda: torch.softmax(x, -1),
                     args.rounds, 5)
    print("  %-40s ember %9.3f ms   torch %9.3f ms   ratio %6.2f" %
          ("softmax rows [4096, 1024]", te * 1e3, tt * 1e3, tt / te))
    lib.em_tensor_release(ex)

    s = torch.rand(4096, 4096)
    es = em.tensor(s)
    te, tt, _ = pair(lambda: em.run(lib.em_sum_dim, es, 1, False), lambda: s.sum(1),
                     args.rounds, 5)
    print("  %-40s ember %9.3f ms   torch %9.3f ms   ratio %6.2f" %
          ("sum dim 1 [4096, 4096]", te * 1e3, tt * 1e3, tt / te))
    lib.em_tensor_release(es)

    xi = torch.rand(64, 3, 56, 56)
    w = torch.rand(64, 3, 3, 3)
    exi, ew = em.tensor(xi), em.tensor(w)
    p = ConvParams((1, 1), (1, 1), (1, 1), (0, 0), 1)
    te, tt, tbest = pair(lambda: em.run(lib.em_conv2d, exi, ew, None, ctypes.byref(p)),
                         lambda: torch.nn.functional.conv2d(xi, w, padding=1), args.rounds, 3)
    print("  %-40s ember %9.3f ms   torch %9.3f ms   ratio %6.2f   (torch's best round %.3f ms:"
          " ratio %.2f)" % ("conv2d 64x3x56x56, 64 3x3 pad 1", te * 1e3, tt * 1e3, tt / te,
                           tbest * 1e3, tbest / te))
    lib.em_tensor_release(exi)
    lib.em_tensor_release(ew)
    tiny(args.build)


if __name__ == "__main__":
    sys.exit(main())
