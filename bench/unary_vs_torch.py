#!/usr/bin/env python3
"""ember's cpu unary kernels (src/backends/cpu/unary.c over vmath.h) against PyTorch and ref.

Usage: /usr/bin/python3 bench/unary_vs_torch.py BUILD_DIR [--threads N] [--rounds R] [--no-ref]

BUILD_DIR holds libember.so (a build with the cpu backend). ember runs through ctypes in this
process, interleaved round by round with PyTorch on the same f32 input; each figure is a
median of R rounds (and the ratio of the best rounds, which a loaded machine disturbs less). Shapes: 16M elements flat, and [8, 256, 3072] (a GPT MLP's [B, T, 4C]
activation). Ratios above 1 mean ember's cpu is faster. Inputs are N(0, 2^2) (log: |x|,
erf/gelu/tanh then cover their saturation as well as their middle). ref's time (the
reference backend) is measured on the flat shape with fewer repetitions.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ember_ctypes  # noqa: E402  (bench/ember_ctypes.py)
from ember_ctypes import P, PP, pair, timed  # noqa: E402


OPS = [("gelu", "em_gelu", lambda t: torch.nn.functional.gelu(t)),
       ("tanh", "em_tanh", torch.tanh),
       ("sigmoid", "em_sigmoid", torch.sigmoid),
       ("silu", "em_silu", torch.nn.functional.silu),
       ("exp", "em_exp", torch.exp),
       ("log", "em_log", torch.log),
       ("erf", "em_erf", torch.erf),
       ("log1p", "em_log1p", torch.log1p)]


class Ember(ember_ctypes.Ember):
    def __init__(self, build, device):
        super().__init__(ember_ctypes.load(build, [(fn, [P, PP]) for _, fn, _ in OPS]), device)
        self.device("ref")

    def op(self, name, x):
        fn = getattr(self.lib, name)
        return lambda: self.run(fn, x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--no-ref", action="store_true")
    args = ap.parse_args()
    os.environ["EMBER_NUM_THREADS"] = str(args.threads)
    ember_ctypes.torch_threads(torch, args.threads)
    em = Ember(args.build, "cpu")
    torch.manual_seed(0)
    print("ember cpu unary vs PyTorch %s, %d thread(s), EMBER_CPU_ISA=%s; medians of %d rounds"
          % (torch.__version__, args.threads, os.environ.get("EMBER_CPU_ISA", "(auto)"),
             args.rounds))
    worst = None
    for shape in ((16 * 1024 * 1024,), (8, 256, 3072)):
        base = torch.randn(*shape) * 2
        for name, fn, tfn in OPS:
            x = base.abs() if name == "log" else base
            ex = em.tensor(x, "cpu")
            te, tt, be, bt = pair(em.op(fn, ex), lambda: tfn(x), args.rounds, 3)
            line = ("  %-8s %-16s ember %8.3f ms  torch %8.3f ms  ratio %5.2f  (best rounds: "
                    "%5.2f)" % (name, "x".join(map(str, shape)), te * 1e3, tt * 1e3, tt / te,
                                bt / be))
            if not args.no_ref and len(shape) == 1:
                er = em.tensor(x, "ref")
                tr = timed(em.op(fn, er), 1)
                line += "   ref %8.1f ms (%.0fx)" % (tr * 1e3, tr / te)
                em.lib.em_tensor_release(er)
            print(line, flush=True)
            worst = tt / te if worst is None else min(worst, tt / te)
            em.lib.em_tensor_release(ex)
    print("  lowest ratio %.2f" % worst)


if __name__ == "__main__":
    sys.exit(main())
