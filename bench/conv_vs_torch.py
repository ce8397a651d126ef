#!/usr/bin/python3
"""The convolutions of the ResNet of bench/models (ember-models resnet) one shape at a time:
ember's cpu kernels against PyTorch's in one process, interleaved.

    /usr/bin/python3 bench/conv_vs_torch.py BUILD_DIR [--threads 1] [--rounds 5] [--reps 0]
        [--filter TEXT] [--batch 16] [--clock wall|cpu]

For each conv of the model (batch 16, 32x32 input, widths 16/32/64; see SHAPES) three kernels:
  fwd    conv2d(x, w)                 torch.nn.functional.conv2d
  dgrad  the input gradient given gy  ember: conv_transpose2d(gy, w); torch:
                                      aten.convolution_backward(..., [True, False, False])
  wgrad  the weight gradient          ember: conv2d_weight_grad(x, gy); torch: the same with
                                      [False, True, False]
ember's kernels are called through the cpu backend's table (bench/conv_shim.c, built here
against BUILD_DIR's libember.so). Each line: ember's and torch's median ms and the ratio
ember / torch (below 1: ember faster), the same for the best rounds, and at the end the sums over the model's convs (one of
each shape a step: the model has one BasicBlock a stage). Thread counts: EMBER_NUM_THREADS and
torch_threads (bench/ember_ctypes.py) both set to --threads.
"""
import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# name, C, O, H (= W), kernel, stride, padding (the ResNet's convs, in the order they run)
SHAPES = [
    ("stem 3->16 32x32 3x3", 3, 16, 32, 3, 1, 1),
    ("s1 16->16 32x32 3x3", 16, 16, 32, 3, 1, 1),
    ("s2 16->32 32x32 3x3 /2", 16, 32, 32, 3, 2, 1),
    ("s2 32->32 16x16 3x3", 32, 32, 16, 3, 1, 1),
    ("s2 sc 16->32 1x1 /2", 16, 32, 32, 1, 2, 0),
    ("s3 32->64 16x16 3x3 /2", 32, 64, 16, 3, 2, 1),
    ("s3 64->64 8x8 3x3", 64, 64, 8, 3, 1, 1),
    ("s3 sc 32->64 1x1 /2", 32, 64, 16, 1, 2, 0),
]
# convs of each shape in one step of the model (stage 1's 3x3 runs twice)
COUNT = {"s1 16->16 32x32 3x3": 2, "s2 32->32 16x16 3x3": 1, "s3 64->64 8x8 3x3": 1}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=0, help="calls a round (0: about 20 ms)")
    ap.add_argument("--filter", default="")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="cpu: the process's CPU time (one thread on a busy machine)")
    args = ap.parse_args()
    os.environ["EMBER_NUM_THREADS"] = str(args.threads)

    import torch
    import ember_ctypes
    if args.clock == "cpu":
        import time
        ember_ctypes.CLOCK = time.process_time
    lib = ember_ctypes.load(args.build)
    ember_ctypes.torch_threads(torch, args.threads)
    tmp = tempfile.mkdtemp()
    so = os.path.join(tmp, "conv_shim.so")
    build = os.path.abspath(args.build)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-I", os.path.join(HERE, "..", "include"),
                    os.path.join(HERE, "conv_shim.c"), "-o", so, "-L", build, "-lember",
                    "-Wl,-rpath," + build], check=True)
    shim = ctypes.CDLL(so)
    I64 = ctypes.POINTER(ctypes.c_int64)
    F = ctypes.POINTER(ctypes.c_float)
    shim.shim_conv.argtypes = [ctypes.c_int, ctypes.c_char_p, F, I64, F, I64, F, I64, I64,
                               I64, I64, ctypes.c_int64]
    del lib

    def ptr(t):
        return ctypes.cast(t.data_ptr(), F)

    def shp(t):
        return (ctypes.c_int64 * 4)(*t.shape)

    def two(v):
        return (ctypes.c_int64 * 2)(v, v)

    torch.manual_seed(0)
    N = args.batch
    total = {"fwd": [0.0, 0.0], "dgrad": [0.0, 0.0], "wgrad": [0.0, 0.0]}
    best = {"fwd": [0.0, 0.0], "dgrad": [0.0, 0.0], "wgrad": [0.0, 0.0]}
    print("conv kernels, batch %d, %d thread(s), ms (median of %d rounds), ratio ember/torch"
          % (N, args.threads, args.rounds))
    print("%-26s %-6s %9s %9s %7s %9s %9s %7s %9s" % ("shape", "kernel", "ember", "torch",
                                                      "ratio", "best e", "best t", "ratio",
                                                      "max err"))
    for name, C, O, H, k, s, p in SHAPES:
        if args.filter not in name:
            continue
        x = torch.randn(N, C, H, H)
        w = torch.randn(O, C, k, k) / (C * k * k) ** 0.5
        y = torch.nn.functional.conv2d(x, w, stride=s, padding=p)
        gy = torch.randn_like(y)
        st, pd, dl = two(s), two(p), two(1)
        out = {"fwd": torch.empty_like(y), "dgrad": torch.empty_like(x),
               "wgrad": torch.empty_like(w)}
        ops = {"fwd": (0, x, w), "dgrad": (2, gy, w), "wgrad": (1, x, gy)}

        def em(kind):
            op, a, b = ops[kind]
            o = out[kind]
            oa, aa, ba = shp(o), shp(a), shp(b)
            po, pa, pb = ptr(o), ptr(a), ptr(b)

            def f():
                if shim.shim_conv(op, b"cpu", po, oa, pa, aa, pb, ba, st, pd, dl, 1) != 0:
                    raise RuntimeError("ember conv failed")
            return f

        def th(kind):
            if kind == "fwd":
                return lambda: torch.nn.functional.conv2d(x, w, stride=s, padding=p)
            mask = [kind == "dgrad", kind == "wgrad", False]
            return lambda: torch.ops.aten.convolution_backward(
                gy, x, w, None, [s, s], [p, p], [1, 1], False, [0, 0], 1, mask)

        for kind in ("fwd", "dgrad", "wgrad"):
            fe, ft = em(kind), th(kind)
            fe()
            r = ft()
            ref = r if kind == "fwd" else r[0] if kind == "dgrad" else r[1]
            err = ((out[kind] - ref).abs().max() / ref.abs().max().clamp(min=1e-30)).item()
            reps = args.reps
            if reps <= 0:
                t = ember_ctypes.timed(ft, 3)
                reps = max(1, int(0.02 / max(t, 1e-6)))
            te, tt, be, bt = ember_ctypes.pair(fe, ft, args.rounds, reps)
            c = COUNT.get(name, 1)
            total[kind][0] += c * te
            total[kind][1] += c * tt
            best[kind][0] += c * be
            best[kind][1] += c * bt
            print("%-26s %-6s %9.3f %9.3f %7.2f %9.3f %9.3f %7.2f %9.1e"
                  % (name, kind, te * 1e3, tt * 1e3, te / tt, be * 1e3, bt * 1e3, be / bt, err))
        sys.stdout.flush()
    for label, tab in (("medians", total), ("best rounds", best)):
        print("per step of the model (each shape times its count), %s:" % label)
        se = st_ = 0.0
        for kind in ("fwd", "dgrad", "wgrad"):
            e, t = tab[kind]
            se += e
            st_ += t
            if t > 0:
                print("  %-6s ember %8.3f ms  torch %8.3f ms  ratio %.2f"
                      % (kind, e * 1e3, t * 1e3, e / t))
        if st_ > 0:
            print("  all    ember %8.3f ms  torch %8.3f ms  ratio %.2f"
                  % (se * 1e3, st_ * 1e3, se / st_))


if __name__ == "__main__":
    main()
