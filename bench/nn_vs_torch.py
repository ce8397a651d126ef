#!/usr/bin/env python3
"""ember's cpu indexing and pooling kernels against PyTorch, same machine, threads and inputs,
in one process.

Usage: /usr/bin/python3 bench/nn_vs_torch.py BUILD_DIR [--threads N] [--rounds R]

BUILD_DIR holds libember.so (built with the cpu backend). ember is driven through ctypes, so
both libraries run in this one process, interleaved round by round; each figure is a median.
Cases (issue 13: a GPT's embedding, a ResNet's global average pool):
  - embedding lookup: em_index_select of a [50257, 768] f32 table with 8*256 i64 indices
    (what em_embedding runs) against torch.index_select, and em_embedding with [8, 256]
    indices against torch.nn.functional.embedding;
  - its backward: em_scatter_add of [2048, 768] rows into zeros [50257, 768] at the index
    expanded over the columns (what ember's autodiff runs) against torch.scatter_add with the
    same expanded index (out of place, as ember: a copy of the zeros, then the sums) and
    against torch's own embedding backward (aten.embedding_dense_backward: fresh zeros, then
    the sums);
  - adaptive_avg_pool2d of [32, 512, 7, 7] to 1x1, forward, and forward + backward of its sum
    through autodiff (cpu+autodiff against torch's autograd).
Ratios above 1 mean ember is faster.
"""
import argparse
import ctypes
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ember_ctypes  # noqa: E402  (bench/ember_ctypes.py)
from ember_ctypes import EM_F32, I64P, P, PP  # noqa: E402


def load_ember(build):
    return ember_ctypes.load(build, (
        ("em_zeros", [I64P, ctypes.c_int, ctypes.c_int, ember_ctypes.Device, PP]),
        ("em_expand", [P, I64P, ctypes.c_int, PP]),
        ("em_reshape", [P, I64P, ctypes.c_int, PP]),
        ("em_index_select", [P, ctypes.c_int, P, PP]),
        ("em_embedding", [P, P, PP]),
        ("em_scatter_add", [P, ctypes.c_int, P, P, PP]),
        ("em_adaptive_avg_pool2d", [P, ctypes.c_int64, ctypes.c_int64, PP]),
        ("em_sum", [P, PP]),
        ("em_tensor_require_grad", [P]),
        ("em_backward", [P, PP]),
        ("em_grads_release", [P])))


class Ember(ember_ctypes.Ember):
    def __init__(self, lib):
        super().__init__(lib)
        self.ad = self.device("cpu+autodiff")


def pair(a, b, rounds, reps):
    """Median seconds of a and b, interleaved (one warm-up each)."""
    return ember_ctypes.pair(a, b, rounds, reps)[:2]


def show(name, te, tt):
    print("  %-52s ember %9.3f ms   torch %9.3f ms   ratio %6.2f" % (name, te * 1e3, tt * 1e3,
                                                                       tt / te))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    os.environ["EMBER_NUM_THREADS"] = str(args.threads)
    ember_ctypes.torch_threads(torch, args.threads)
    em = Ember(load_ember(args.build))
    lib = em.lib
    torch.manual_seed(0)
    print("ember cpu vs PyTorch %s, %d thread(s); medians of %d rounds"
          % (torch.__version__, args.threads, args.rounds))

    # ---- embedding lookup and its backward ----
    V, D, B, T = 50257, 768, 8, 256
    N = B * T
    w = torch.randn(V, D)
    idx2 = torch.randint(0, V, (B, T))
    idx = idx2.reshape(-1).contiguous()
    ew, ei, ei2 = em.tensor(w), em.tensor(idx), em.tensor(idx2)
    # same result first
    out = em.call(lib.em_index_select, ew, 0, ei)
    got = torch.empty(N, D)
    lib.em_tensor_to_data.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    em.check(lib.em_tensor_to_data(out, ctypes.c_void_p(got.data_ptr()), got.numel() * 4))
    lib.em_tensor_release(out)
    assert torch.equal(got, torch.index_select(w, 0, idx)), "index_select differs from torch"
    te, tt = pair(lambda: em.run(lib.em_index_select, ew, 0, ei),
                  lambda: torch.index_select(w, 0, idx), args.rounds, 20)
    show("index_select [50257, 768] f32, 2048 i64 indices", te, tt)
    te, tt = pair(lambda: em.run(lib.em_embedding, ew, ei2),
                  lambda: torch.nn.functional.embedding(idx2, w), args.rounds, 20)
    show("embedding [50257, 768], idx [8, 256]", te, tt)

    g = torch.randn(N, D)
    eg = em.tensor(g)
    ez = em.call(lib.em_zeros, em.shape((V, D)), 2, EM_F32, em.dev)
    col = em.call(lib.em_reshape, ei, em.shape((N, 1)), 2)
    eie = em.call(lib.em_expand, col, em.shape((N, D)), 2)  # stride 0 over the columns
    iexp = idx.reshape(N, 1).expand(N, D)
    zeros = torch.zeros(V, D)
    out = em.call(lib.em_scatter_add, ez, 0, eie, eg)
    got = torch.empty(V, D)
    em.check(lib.em_tensor_to_data(out, ctypes.c_void_p(got.data_ptr()), got.numel() * 4))
    lib.em_tensor_release(out)
    want = torch.scatter_add(zeros, 0, iexp, g)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), "scatter_add differs from torch"
    te, tt = pair(lambda: em.run(lib.em_scatter_add, ez, 0, eie, eg),
                  lambda: torch.scatter_add(zeros, 0, iexp, g), args.rounds, 3)
    show("scatter_add into [50257, 768], idx expanded [2048, 768]", te, tt)
    te, tt = pair(lambda: em.run(lib.em_scatter_add, ez, 0, eie, eg),
                  lambda: torch.ops.aten.embedding_dense_backward(g, idx, V, -1, False),
                  args.rounds, 3)
    show("  the same vs torch's embedding_dense_backward", te, tt)
    for t in (ew, ei, ei2, eg, ez, col, eie):
        lib.em_tensor_release(t)

    # ---- ResNet's global average pool ----
    x = torch.randn(32, 512, 7, 7)
    ex = em.tensor(x)
    te, tt = pair(lambda: em.run(lib.em_adaptive_avg_pool2d, ex, 1, 1),
                  lambda: torch.nn.functional.adaptive_avg_pool2d(x, 1), args.rounds, 50)
    show("adaptive_avg_pool2d [32, 512, 7, 7] -> 1x1", te, tt)
    lib.em_tensor_release(ex)

    exa = em.tensor(x, em.ad)
    em.check(lib.em_tensor_require_grad(exa))
    xt = x.clone().requires_grad_(True)

    def ember_step():
        y = em.call(lib.em_adaptive_avg_pool2d, exa, 1, 1)
        s = em.call(lib.em_sum, y)
        grads = ctypes.c_void_p()
        em.check(lib.em_backward(s, ctypes.byref(grads)))
        lib.em_grads_release(grads)
        lib.em_tensor_release(s)
        lib.em_tensor_release(y)

    def torch_step():
        xt.grad = None
        torch.nn.functional.adaptive_avg_pool2d(xt, 1).sum().backward()

    te, tt = pair(ember_step, torch_step, args.rounds, 20)
    show("  forward + backward of its sum (autodiff)", te, tt)
    lib.em_tensor_release(exa)


if __name__ == "__main__":
    sys.exit(main())
