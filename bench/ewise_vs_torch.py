#!/usr/bin/env python3
"""The elementwise half of issue 13's proof: ember's cpu backend against PyTorch on the layouts
of bench/models (the GPT's attention and MLP, the ResNet's batch norm), in one process.

Usage: /usr/bin/python3 bench/ewise_vs_torch.py BUILD_DIR [--threads N] [--rounds R]
           [--filter TEXT] [--clock wall|cpu] [--markdown]

BUILD_DIR holds libember.so (a build with the cpu backend). ember runs through ctypes beside
torch (bench/ember_ctypes.py: torch and its OpenBLAS pinned to the same thread count),
interleaved round by round, which goes first alternating; figures are medians of R rounds,
and the ratio of the best rounds beside it (a busy machine only adds time). Cases:
  - gelu (exact, erf form: torch.nn.functional.gelu's default) of [8, 128, 768] and
    [8, 256, 3072] (a GPT MLP's [B, T, 4C] activation), f32, f16 and bf16 (ember's f16/bf16 go
    through f32; where torch has no CPU kernel for a dtype the row says so);
  - masked_fill of the attention scores [8, 6, 128, 128] with a [128, 128] causal bool mask
    (broadcast over batch and heads) and -inf; where(mask, scores, other) of the same layout;
  - permute(0, 2, 1, 3) + contiguous of [8, 128, 6, 32] (heads split) and of [8, 6, 128, 32]
    (heads merged);
  - batch norm's [16, C, 32, 32] times / plus / minus [1, C, 1, 1], C = 16, 32, 64, and their
    backward's reduction to [1, C, 1, 1]: ember's autodiff (emi_ad_unbroadcast) sums the
    [16, C, 1024] view over its last dim, then over its first; torch's autograd sums over
    (0, 2, 3) (sum_to_size); and forward + backward of sum((x op c) * g) through autodiff
    (cpu+autodiff against autograd), x and c requiring grad.
Ratios above 1: ember faster. --clock cpu times the process's CPU time (steadier with one
thread on a busy machine; with two it adds both threads' time).
"""
import argparse
import ctypes
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ember_ctypes  # noqa: E402  (bench/ember_ctypes.py)
from ember_ctypes import P, PP  # noqa: E402

EM_F32, EM_F16, EM_BF16 = 0, 2, 3


def load(build):
    return ember_ctypes.load(build, (
        ("em_gelu", [P, PP]),
        ("em_cast", [P, ctypes.c_int, PP]),
        ("em_masked_fill", [P, P, ctypes.c_double, PP]),
        ("em_where", [P, P, P, PP]),
        ("em_permute", [P, ctypes.POINTER(ctypes.c_int), ctypes.c_int, PP]),
        ("em_contiguous", [P, PP]),
        ("em_reshape", [P, ember_ctypes.I64P, ctypes.c_int, PP]),
        ("em_sum_dim", [P, ctypes.c_int, ctypes.c_bool, PP]),
        ("em_mul", [P, P, PP]),
        ("em_add", [P, P, PP]),
        ("em_sub", [P, P, PP]),
        ("em_sum", [P, PP]),
        ("em_tensor_require_grad", [P]),
        ("em_backward", [P, PP]),
        ("em_grads_release", [P])))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--filter", default="")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    if args.clock == "cpu":
        ember_ctypes.CLOCK = time.process_time
    os.environ["EMBER_NUM_THREADS"] = str(args.threads)
    ember_ctypes.torch_threads(torch, args.threads)
    em = ember_ctypes.Ember(load(args.build))
    lib = em.lib
    torch.manual_seed(0)
    print("ember cpu vs PyTorch %s, %d thread(s), EMBER_CPU_ISA=%s; medians of %d rounds "
          "(%s clock)" % (torch.__version__, args.threads,
                          os.environ.get("EMBER_CPU_ISA", "(auto)"), args.rounds, args.clock))
    if args.markdown:
        print("| case | ember ms | torch ms | ratio | best-round ratio |")
        print("| --- | --- | --- | --- | --- |")
    ratios = []

    def versus(name, a, b, reps):
        if args.filter not in name:
            return
        ta, tb = ember_ctypes.rounds_of(a, b, args.rounds, reps)
        te, tt = statistics.median(ta), statistics.median(tb)
        be, bt = min(ta), min(tb)
        ratios.append((tt / te, name))
        if args.markdown:
            print("| %s | %.3f | %.3f | %.2f | %.2f |" % (name, te * 1e3, tt * 1e3, tt / te,
                                                        bt / be), flush=True)
        else:
            print("  %-44s ember %8.3f ms  torch %8.3f ms  ratio %5.2f  (best rounds %5.2f)"
                  % (name, te * 1e3, tt * 1e3, tt / te, bt / be), flush=True)

    def reps_for(numel):
        return max(1, min(50, int(4e7 // max(numel, 1))))

    # ---- gelu ----
    for shape in ((8, 128, 768), (8, 256, 3072)):
        x32 = torch.randn(*shape) * 2
        e32 = em.tensor(x32)
        for tdt, edt, dname in ((torch.float32, EM_F32, "f32"), (torch.float16, EM_F16, "f16"),
                                (torch.bfloat16, EM_BF16, "bf16")):
            name = "gelu %s %s" % (dname, "x".join(map(str, shape)))
            if args.filter not in name:
                continue
            xt = x32.to(tdt)
            try:
                torch.nn.functional.gelu(xt)
            except RuntimeError as e:
                print("  %-44s torch has no CPU kernel: %s" % (name, str(e).splitlines()[0]))
                continue
            ex = e32 if edt == EM_F32 else em.call(lib.em_cast, e32, edt)
            versus(name, lambda: em.run(lib.em_gelu, ex),
                   lambda: torch.nn.functional.gelu(xt), reps_for(xt.numel()))
            if ex is not e32:
                em.release(ex)
        em.release(e32)

    # ---- attention: masked_fill / where with a [T, T] mask ----
    B, H, T, D = 8, 6, 128, 32
    scores = torch.randn(B, H, T, T)
    other = torch.randn(B, H, T, T)
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    es, eo, emk = em.tensor(scores), em.tensor(other), em.tensor(mask)
    n = scores.numel()
    versus("masked_fill [8,6,128,128], [128,128] mask",
           lambda: em.run(lib.em_masked_fill, es, emk, float("-inf")),
           lambda: scores.masked_fill(mask, float("-inf")), reps_for(n))
    versus("where [128,128] mask, [8,6,128,128] x2",
           lambda: em.run(lib.em_where, emk, es, eo),
           lambda: torch.where(mask, scores, other), reps_for(n))
    em.release(es, eo, emk)

    # ---- attention: heads split and merged: the copy of the permuted view (made once on
    #      both sides: a view costs no work, and its ctypes call would be timed on ember's) ----
    perm = (ctypes.c_int * 4)(0, 2, 1, 3)
    for shape, what in (((B, T, H, D), "split"), ((B, H, T, D), "merge")):
        x = torch.randn(*shape)
        ex = em.tensor(x)
        ep = em.call(lib.em_permute, ex, perm, 4)
        xp = x.permute(0, 2, 1, 3)
        versus("permute(0,2,1,3)+contig %s [%s]" % (what, ",".join(map(str, shape))),
               lambda: em.run(lib.em_contiguous, ep), lambda: xp.contiguous(),
               reps_for(x.numel()))
        em.release(ep, ex)

    # ---- batch norm: [16, C, 32, 32] op [1, C, 1, 1] and the backward's reductions ----
    for C in (16, 32, 64):
        x = torch.randn(16, C, 32, 32)
        g = torch.randn(16, C, 32, 32)
        c = torch.randn(1, C, 1, 1)
        ex, eg, ec = em.tensor(x), em.tensor(g), em.tensor(c)
        n = x.numel()
        for opname, efn, tfn in (("*", lib.em_mul, torch.mul), ("+", lib.em_add, torch.add),
                                 ("-", lib.em_sub, torch.sub)):
            versus("[16,%d,32,32] %s [1,%d,1,1]" % (C, opname, C), lambda: em.run(efn, ex, ec),
                   lambda: tfn(x, c), reps_for(n))
        # the backward's reduction as emi_ad_unbroadcast runs it: [16, C, 1024] summed over
        # its last dim, then its first (two ember calls through ctypes against torch's one)
        r3 = em.call(lib.em_reshape, eg, em.shape((16, C, 1024)), 3)

        def unbroadcast():
            s1 = em.call(lib.em_sum_dim, r3, 2, True)
            em.run(lib.em_sum_dim, s1, 0, True)
            em.release(s1)

        versus("sum [16,%d,32,32] -> [1,%d,1,1]" % (C, C), unbroadcast,
               lambda: g.sum((0, 2, 3), keepdim=True), reps_for(n))
        em.release(r3)
        # forward and backward of batch norm's scale and shift through autodiff: loss =
        # sum((x op c) * g), x and c requiring grad (the backward: g * c or g for x,
        # unbroadcast(g * x) or unbroadcast(g) for c)
        ax, ac, ag = em.tensor(x, "cpu+autodiff"), em.tensor(c, "cpu+autodiff"), \
            em.tensor(g, "cpu+autodiff")
        em.check(lib.em_tensor_require_grad(ax))
        em.check(lib.em_tensor_require_grad(ac))
        xt, ct = x.clone().requires_grad_(True), c.clone().requires_grad_(True)
        for opname, efn, tfn in (("*", lib.em_mul, torch.mul), ("+", lib.em_add, torch.add)):
            def ember_step():
                y = em.call(efn, ax, ac)
                yg = em.call(lib.em_mul, y, ag)
                loss = em.call(lib.em_sum, yg)
                grads = ctypes.c_void_p()
                em.check(lib.em_backward(loss, ctypes.byref(grads)))
                lib.em_grads_release(grads)
                em.release(y, yg, loss)

            def torch_step():
                xt.grad = None
                ct.grad = None
                (tfn(xt, ct) * g).sum().backward()

            versus("fwd+bwd sum((x %s c) * g), C=%d" % (opname, C), ember_step, torch_step,
                   max(1, reps_for(n) // 4))
        em.release(ax, ac, ag)
        em.release(ex, eg, ec)

    if ratios:
        lo = min(ratios)
        print("  lowest ratio %.2f (%s)" % lo)


if __name__ == "__main__":
    sys.exit(main())
