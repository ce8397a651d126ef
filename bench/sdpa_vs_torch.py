#!/usr/bin/env python3
"""ember's cpu scaled dot-product attention against PyTorch's composed attention, same machine,
threads and inputs, in one process.

Usage: /usr/bin/python3 bench/sdpa_vs_torch.py BUILD_DIR [--threads N] [--rounds R] [--composed]
                                                  [--cpu-time] [--causal]

BUILD_DIR holds libember.so (built with the cpu backend). torch 1.13 has no
scaled_dot_product_attention: the baseline is softmax(q @ k^T * scale) @ v as torch composes
it (its [T, T] scores whole). Cases q, k, v [8, 4, T, E] f32 (B = 8, H = 4), T = 128, 256,
512, E = 32, 64:
  - forward (em_scaled_dot_product_attention on cpu);
  - a training step: forward, loss = sum(out * g), backward to q, k and v (cpu+autodiff
    against torch's autograd).
Peak memory: the cpu device's peak bytes over one training step, from em_device_memory (the
allocator's count: tensors and kernel scratch), beside the size of one [B, H, T, T] f32 score
tensor. --composed sets EMBER_FUSED=0 first (ember then composes matmul, softmax, matmul as
before the sdpa kernel): run both to compare ember with itself. Before timing, ember's output
is checked against torch's. Ratios above 1 mean ember is faster; each figure is a median of
interleaved rounds.
"""
import argparse
import ctypes
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ember_ctypes  # noqa: E402  (bench/ember_ctypes.py)
from ember_ctypes import P, PP  # noqa: E402


class MemStats(ctypes.Structure):
    _fields_ = [("bytes_in_use", ctypes.c_size_t), ("peak_bytes", ctypes.c_size_t),
                ("bytes_cached", ctypes.c_size_t)]


def load_ember(build):
    return ember_ctypes.load(build, (
        ("em_scaled_dot_product_attention", [P, P, P, P, ctypes.c_double, ctypes.c_bool,
                                             ctypes.c_double, ctypes.c_uint64, PP]),
        ("em_mul", [P, P, PP]),
        ("em_sum", [P, PP]),
        ("em_tensor_to_data", [P, ctypes.c_void_p, ctypes.c_size_t]),
        ("em_tensor_require_grad", [P]),
        ("em_backward", [P, PP]),
        ("em_grads_release", [P]),
        ("em_device_memory", [ember_ctypes.Device, ctypes.POINTER(MemStats)]),
        ("em_device_memory_reset_peak", [ember_ctypes.Device])))


def show(name, te, tt):
    print("  %-40s ember %8.3f ms   torch %8.3f ms   ratio %5.2f" % (name, te * 1e3, tt * 1e3,
                                                                     tt / te))


def read(em, t, like):
    out = torch.empty_like(like)
    em.check(em.lib.em_tensor_to_data(t, ctypes.c_void_p(out.data_ptr()), out.numel() * 4))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--composed", action="store_true")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--cpu-time", action="store_true")
    ap.add_argument("--sizes", default="128,256,512")
    args = ap.parse_args()
    if args.cpu_time:
        ember_ctypes.CLOCK = time.process_time
    os.environ["EMBER_NUM_THREADS"] = str(args.threads)
    if args.composed:
        os.environ["EMBER_FUSED"] = "0"
    ember_ctypes.torch_threads(torch, args.threads)
    em = ember_ctypes.Ember(load_ember(args.build))
    lib = em.lib
    cpu, ad = em.device("cpu"), em.device("cpu+autodiff")
    torch.manual_seed(0)
    causal = args.causal
    print("ember cpu sdpa (%s) vs PyTorch %s composed softmax(q k^T s%s) v, %d thread(s); "
          "medians of %d rounds (%s time)"
          % ("composed: EMBER_FUSED=0" if args.composed else "fused kernel", torch.__version__,
             " + causal" if causal else "", args.threads, args.rounds,
             "cpu" if args.cpu_time else "wall"))
    B, H = 8, 4
    for T in (int(t) for t in args.sizes.split(",")):
        for E in (32, 64):
            q, k, v = (torch.randn(B, H, T, E) for _ in range(3))
            g = torch.randn(B, H, T, E)
            sc = 1.0 / math.sqrt(E)
            tril = torch.ones(T, T, dtype=torch.bool).tril() if causal else None

            def torch_attn(q, k, v):
                s = (q @ k.transpose(-2, -1)) * sc
                if causal:
                    s = s.masked_fill(~tril, float("-inf"))
                return torch.softmax(s, -1) @ v

            eq, ek, ev = (em.tensor(t) for t in (q, k, v))
            y = em.call(lib.em_scaled_dot_product_attention, eq, ek, ev, None, 0.0, causal, 0.0,
                        0)
            want = torch_attn(q, k, v)
            assert torch.allclose(read(em, y, want), want, rtol=1e-4, atol=1e-5), "differs"
            lib.em_tensor_release(y)
            reps = max(1, 2048 // T)
            te, tt = ember_ctypes.pair(
                lambda: em.run(lib.em_scaled_dot_product_attention, eq, ek, ev, None, 0.0,
                               causal, 0.0, 0),
                lambda: torch_attn(q, k, v), args.rounds, reps)[:2]
            tag = "[%d, %d, %d, %d]" % (B, H, T, E)
            show(tag + " forward", te, tt)

            aq, ak, av, ag = (em.tensor(t, ad) for t in (q, k, v, g))
            for t in (aq, ak, av):
                em.check(lib.em_tensor_require_grad(t))
            qt, kt, vt = (t.clone().requires_grad_(True) for t in (q, k, v))

            def ember_step():
                yy = em.call(lib.em_scaled_dot_product_attention, aq, ak, av, None, 0.0, causal,
                             0.0, 0)
                p = em.call(lib.em_mul, yy, ag)
                s = em.call(lib.em_sum, p)
                grads = ctypes.c_void_p()
                em.check(lib.em_backward(s, ctypes.byref(grads)))
                lib.em_grads_release(grads)
                em.release(s, p, yy)

            def torch_step():
                qt.grad = kt.grad = vt.grad = None
                (torch_attn(qt, kt, vt) * g).sum().backward()

            te, tt = ember_ctypes.pair(ember_step, torch_step, args.rounds, max(1, reps // 2))[:2]
            show(tag + " forward + backward", te, tt)
            ms = MemStats()
            em.check(lib.em_device_memory(cpu, ctypes.byref(ms)))
            base = ms.bytes_in_use
            em.check(lib.em_device_memory_reset_peak(cpu))
            ember_step()
            em.check(lib.em_device_memory(cpu, ctypes.byref(ms)))
            print("  %-40s peak %7.1f MiB over the %6.1f MiB live (one [B, H, T, T] f32: "
                  "%.1f MiB)" % (tag + " step memory", (ms.peak_bytes - base) / 2**20,
                                 base / 2**20, B * H * T * T * 4 / 2**20))
            em.release(eq, ek, ev, aq, ak, av, ag)


if __name__ == "__main__":
    sys.exit(main())
