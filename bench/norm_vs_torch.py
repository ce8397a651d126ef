#!/usr/bin/env python3
"""ember's cpu batch_norm against PyTorch, same machine, threads and inputs, in one process.

Usage: /usr/bin/python3 bench/norm_vs_torch.py BUILD_DIR [--threads N] [--rounds R] [--cpu-time]

BUILD_DIR holds libember.so (built with the cpu backend). ember is driven through ctypes, so
both libraries run in this one process, interleaved round by round; each figure is a median.
Cases, x [16, C, 32, 32] f32 with C = 16, 32, 64, weight, bias and running statistics:
  - forward, training (batch statistics, running statistics updated) and eval;
  - a training step: forward, loss = sum(y * g), backward to x, weight and bias (cpu+autodiff
    against torch's autograd); "backward" is the step's time less the training forward's, on
    each side (the loss's mul and sum are in both).
--cpu-time measures the process's CPU time instead of wall time (steadier on a loaded machine;
with several threads it counts every thread's time, spinning included). Before timing, ember's output and running statistics are checked against torch's. Ratios above
1 mean ember is faster.
"""
import argparse
import ctypes
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ember_ctypes  # noqa: E402  (bench/ember_ctypes.py)
from ember_ctypes import P, PP  # noqa: E402


def load_ember(build):
    return ember_ctypes.load(build, (
        ("em_batch_norm", [P, P, P, P, P, ctypes.c_bool, ctypes.c_double, ctypes.c_double, PP]),
        ("em_mul", [P, P, PP]),
        ("em_sum", [P, PP]),
        ("em_tensor_to_data", [P, ctypes.c_void_p, ctypes.c_size_t]),
        ("em_tensor_require_grad", [P]),
        ("em_backward", [P, PP]),
        ("em_grads_release", [P])))


def show(name, te, tt):
    print("  %-44s ember %8.3f ms   torch %8.3f ms   ratio %5.2f" % (name, te * 1e3, tt * 1e3,
                                                                     tt / te))


def read(em, t, like):
    out = torch.empty_like(like)
    em.check(em.lib.em_tensor_to_data(t, ctypes.c_void_p(out.data_ptr()), out.numel() * 4))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--cpu-time", action="store_true")
    args = ap.parse_args()
    if args.cpu_time:
        ember_ctypes.CLOCK = time.process_time
    os.environ["EMBER_NUM_THREADS"] = str(args.threads)
    ember_ctypes.torch_threads(torch, args.threads)
    em = ember_ctypes.Ember(load_ember(args.build))
    lib = em.lib
    ad = em.device("cpu+autodiff")
    torch.manual_seed(0)
    print("ember cpu batch_norm vs PyTorch %s, %d thread(s); medians of %d rounds (%s time)"
          % (torch.__version__, args.threads, args.rounds, "cpu" if args.cpu_time else "wall"))
    for C in (16, 32, 64):
        x = torch.randn(16, C, 32, 32) * 2 + 0.5
        w, b = torch.randn(C), torch.randn(C)
        rm, rv = torch.zeros(C), torch.ones(C)
        g = torch.randn_like(x)
        ex, ew, eb, erm, erv = (em.tensor(t) for t in (x, w, b, rm, rv))
        # the same result first (output and running statistics after one training call)
        y = em.call(lib.em_batch_norm, ex, erm, erv, ew, eb, True, 0.1, 1e-5)
        want = F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.1, eps=1e-5)
        assert torch.allclose(read(em, y, x), want, rtol=1e-5, atol=1e-5), "output differs"
        assert torch.allclose(read(em, erm, rm), rm, rtol=1e-5, atol=1e-6), "running_mean"
        assert torch.allclose(read(em, erv, rv), rv, rtol=1e-5, atol=1e-6), "running_var"
        lib.em_tensor_release(y)
        reps = 20
        te, tt = ember_ctypes.pair(
            lambda: em.run(lib.em_batch_norm, ex, erm, erv, ew, eb, True, 0.1, 1e-5),
            lambda: F.batch_norm(x, rm, rv, w, b, training=True), args.rounds, reps)[:2]
        show("[16, %d, 32, 32] forward, training" % C, te, tt)
        fe, ft = te, tt
        te, tt = ember_ctypes.pair(
            lambda: em.run(lib.em_batch_norm, ex, erm, erv, ew, eb, False, 0.1, 1e-5),
            lambda: F.batch_norm(x, rm, rv, w, b, training=False), args.rounds, reps)[:2]
        show("[16, %d, 32, 32] forward, eval" % C, te, tt)

        # a training step on cpu+autodiff / torch autograd
        ax, aw, ab, ag = (em.tensor(t, ad) for t in (x, w, b, g))
        for t in (ax, aw, ab):
            em.check(lib.em_tensor_require_grad(t))
        xt, wt, bt = (t.clone().requires_grad_(True) for t in (x, w, b))

        def ember_step():
            yy = em.call(lib.em_batch_norm, ax, erm, erv, aw, ab, True, 0.1, 1e-5)
            p = em.call(lib.em_mul, yy, ag)
            s = em.call(lib.em_sum, p)
            grads = ctypes.c_void_p()
            em.check(lib.em_backward(s, ctypes.byref(grads)))
            lib.em_grads_release(grads)
            em.release(s, p, yy)

        def torch_step():
            xt.grad = wt.grad = bt.grad = None
            (F.batch_norm(xt, rm, rv, wt, bt, training=True) * g).sum().backward()

        te, tt = ember_ctypes.pair(ember_step, torch_step, args.rounds, reps)[:2]
        show("[16, %d, 32, 32] training step (fwd + loss + bwd)" % C, te, tt)
        show("[16, %d, 32, 32]   backward (step - forward)" % C, te - fe, tt - ft)
        em.release(ex, ew, eb, erm, erv, ax, aw, ab, ag)


if __name__ == "__main__":
    sys.exit(main())
