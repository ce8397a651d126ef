#!/usr/bin/env python3
"""The PyTorch baseline of `ember-bench checkpoint`: an MLP's training step with and without
torch.utils.checkpoint.checkpoint_sequential, its peak memory and time, and the two ratios
(checkpointed / plain), to set beside ember's BALANCED / DISABLED ratios.

Usage: /usr/bin/python3 bench/checkpoint_torch.py [--batch 4096] [--width 1024] [--layers 16]
           [--act relu|gelu] [--segments L/2] [--rounds 1] [--threads 1]
       /usr/bin/python3 bench/checkpoint_torch.py --model gpt|resnet|mlp [--regions 2]
           [--layers L] [--batch B] [--rounds 5] [--threads 1]

--model runs the PyTorch twin of `ember-bench checkpoint --model` (the GPT, ResNet or MLP of
bench/models_vs_torch.py, with its sizes; --layers sets the GPT's blocks or the MLP's layers,
--batch the batch):
a training step (forward, cross-entropy, backward, optimizer step) without checkpointing and
with torch.utils.checkpoint around every --regions blocks (transformer blocks, residual
blocks, Linear + GELU layers; use_reentrant=False, so that segments whose input needs no grad
work), peak memory as below, and the ratios.

The model is ember's: `layers` Linear(width, width) layers with a ReLU (or the exact GELU)
between them (none after the last), batch `batch`, float32, loss = sum of the output, every leaf (the input included)
requiring grad. A warm-up step of each variant, then `rounds` timed steps alternating which
runs first.

Memory. PyTorch's CPU allocator does not go through Python (tracemalloc sees nothing) and
torch.cuda is absent, so the peak is read from the kernel: writing 5 to /proc/self/clear_refs
resets the process's peak resident set (VmHWM) to its current size (VmRSS); the step's memory
is VmHWM after it minus VmRSS before it. For this to follow tensor lifetimes, glibc is told
(mallopt, before torch loads) to serve every block of 64 KiB or more with its own mmap and to
trim its heap, so that a freed tensor leaves the resident set at once instead of being kept for
reuse. What is left is noise of a few hundred KiB (the autograd graph's small objects, BLAS
buffers, Python), small beside the activations (batch * width * 4 bytes each).
"""
import argparse
import ctypes
import time

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def tune_malloc():
    """Large blocks are mmapped and returned at free; the heap is trimmed (see the docstring)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(M_MMAP_THRESHOLD, 64 * 1024)
        libc.mallopt(M_TRIM_THRESHOLD, 128 * 1024)
    except OSError:
        pass


tune_malloc()

import torch  # noqa: E402  (after mallopt, so that torch's own allocations follow it)
from torch.utils.checkpoint import checkpoint_sequential  # noqa: E402
import os
import sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ember_ctypes  # noqa: E402  (bench/ember_ctypes.py)


def status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError("no %s in /proc/self/status" % field)


def reset_peak():
    """Sets VmHWM to the current VmRSS; returns the current VmRSS in bytes."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return status_kib("VmRSS") * 1024


def make_model(layers, width, act):
    """The MLP as `layers` blocks (Linear + activation, the last a bare Linear), so that
    checkpoint_sequential's segments cut between layers. Same seed, same weights, every time."""
    torch.manual_seed(1)
    blocks = []
    for i in range(layers):
        lin = torch.nn.Linear(width, width)
        with torch.no_grad():
            lin.weight.normal_(0.0, (2.0 / width) ** 0.5)
            lin.bias.uniform_(-0.1, 0.1)
        a = torch.nn.GELU() if act == "gelu" else torch.nn.ReLU()
        blocks.append(torch.nn.Sequential(lin, a) if i + 1 < layers else lin)
    return torch.nn.Sequential(*blocks)


def step(model, x, segments):
    """One forward + sum + backward (checkpointed when segments > 0): (wall seconds, process
    CPU seconds, peak bytes, loss, grad of the first weight)."""
    model.zero_grad(set_to_none=True)
    x.grad = None
    before = reset_peak()
    t0, c0 = time.perf_counter(), time.process_time()
    if segments:
        out = checkpoint_sequential(model, segments, x, preserve_rng_state=False)
    else:
        out = model(x)
    loss = out.sum()
    del out
    loss.backward()
    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = status_kib("VmHWM") * 1024 - before
    first = model[0][0] if isinstance(model[0], torch.nn.Sequential) else model[0]
    return secs, cpu, peak, float(loss), first.weight.grad.clone()


def model_step(inst, regions):
    """One training step of a models_vs_torch twin, checkpointing every `regions` blocks
    (0: none): (wall seconds, peak bytes, loss)."""
    from torch.utils.checkpoint import checkpoint
    import torch.nn.functional as F
    m, x, y, opt = inst
    opt.zero_grad(set_to_none=True)
    before = reset_peak()
    t0 = time.perf_counter()

    def run(blocks, h):
        if not regions:
            for b in blocks:
                h = b(h)
            return h
        for i in range(0, len(blocks), regions):
            seg = torch.nn.Sequential(*blocks[i:i + regions])
            h = checkpoint(seg, h, use_reentrant=False)
        return h

    if hasattr(m, "h"):  # GPT
        B, T = x.size()
        pos = torch.arange(0, T, dtype=torch.long)
        h = run(list(m.h), m.wte(x) + m.wpe(pos))
        logits = m.lm_head(m.ln_f(h)).view(B * T, -1)
    elif hasattr(m, "layers"):  # ResNet
        h = F.relu(m.bn1(m.conv1(x)))
        h = run(list(m.layers), h)
        logits = m.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))
    else:  # MLP: Linear + GELU pairs, then the last Linear
        mods = list(m)
        pairs = [torch.nn.Sequential(mods[i], mods[i + 1]) for i in range(0, len(mods) - 1, 2)]
        logits = mods[-1](run(pairs, x))
    loss = F.cross_entropy(logits, y)
    del logits
    loss.backward()
    opt.step()
    secs = time.perf_counter() - t0
    return secs, status_kib("VmHWM") * 1024 - before, float(loss)


def main_models(a):
    import models_vs_torch as mvt
    if a.layers_set:
        mvt.GPT_CFG["layers"] = mvt.MLP_CFG["layers"] = a.layers
    if a.batch_set:
        mvt.GPT_CFG["batch"] = mvt.RES_CFG["batch"] = mvt.MLP_CFG["batch"] = a.batch
    ember_ctypes.torch_threads(torch, a.threads)
    insts = [mvt.torch_instance(a.model, True) for _ in range(2)]
    regions = (0, a.regions)
    for k in range(2):
        model_step(insts[k], regions[k])
    times, peaks, losses = ([], []), [0, 0], [0.0, 0.0]
    for r in range(a.rounds):
        for j in range(2):
            k = (r + j) % 2
            secs, peak, loss = model_step(insts[k], regions[k])
            times[k].append(secs)
            peaks[k] = max(peaks[k], peak)
            losses[k] = loss
    t = [median(v) for v in times]
    cfg = {"gpt": mvt.GPT_CFG, "resnet": mvt.RES_CFG, "mlp": mvt.MLP_CFG}[a.model]
    print("checkpoint_torch: %s %s, torch %s, %d thread(s), %d round(s) after a warm-up step"
          % (a.model, cfg, torch.__version__, a.threads, a.rounds))
    for k in range(2):
        label = "plain" if not k else "checkpoint every %d blocks" % a.regions
        print("  %-34s peak %9.2f MiB   time %8.2f ms   loss %.6g"
              % (label, mib(peaks[k]), 1e3 * t[k], losses[k]))
    print("  ratio regions / plain   peak %.3f   time %.3f"
          % (peaks[1] / peaks[0] if peaks[0] else float("nan"), t[1] / t[0] if t[0] else 0.0))


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def mib(b):
    return b / (1024.0 * 1024.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--act", choices=("relu", "gelu"), default="relu")
    ap.add_argument("--segments", type=int, default=0,
                    help="checkpoint_sequential segments (default layers/2: two layers each)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--model", choices=("gpt", "resnet", "mlp"))
    ap.add_argument("--regions", type=int, default=2)
    a = ap.parse_args()
    if a.model:
        import sys as _sys
        a.layers_set = "--layers" in _sys.argv
        a.batch_set = "--batch" in _sys.argv
        if a.rounds == 1:
            a.rounds = 5
        main_models(a)
        return
    segments = a.segments or max(1, a.layers // 2)
    ember_ctypes.torch_threads(torch, a.threads)
    start = time.perf_counter()
    model = make_model(a.layers, a.width, a.act)
    gen = torch.Generator().manual_seed(2)
    # reentrant checkpointing (the only kind checkpoint_sequential has in torch 1.13) gives the
    # parameters of a segment gradients only when the segment's input requires grad
    x = torch.randn(a.batch, a.width, generator=gen).requires_grad_(True)

    names = ("plain", "checkpointed")
    segs = (0, segments)
    for s in segs:  # warm-up
        step(model, x, s)
    times, cpus, peaks = ([], []), ([], []), [0, 0]
    losses, grads = [0.0, 0.0], [None, None]
    for r in range(a.rounds):
        for j in range(2):
            k = (r + j) % 2
            secs, cpu, peak, loss, g = step(model, x, segs[k])
            times[k].append(secs)
            cpus[k].append(cpu)
            peaks[k] = max(peaks[k], peak)
            losses[k], grads[k] = loss, g
    t = [median(v) for v in times]
    c = [median(v) for v in cpus]
    print("checkpoint_torch: MLP of %d layers (Linear, %s between), width %d, batch %d, f32, "
          "torch %s, %d thread(s)" % (a.layers, a.act, a.width, a.batch, torch.__version__,
                                      a.threads))
    print("  a warm-up step of each, then %d timed round(s) of forward + sum + backward" % a.rounds)
    print("  (memory: peak RSS during the step minus RSS before it; weights %.1f MiB, one "
          "activation %.1f MiB)" % (mib(a.layers * a.width * (a.width + 1) * 4),
                                   mib(a.batch * a.width * 4)))
    for k in range(2):
        label = names[k] + (" (checkpoint_sequential, %d segments)" % segments if k else "")
        print("  %-48s peak %10.1f MiB   time %9.3f s   cpu %9.3f s%s"
              % (label, mib(peaks[k]), t[k], c[k], " (medians)" if a.rounds > 1 else ""))
    print("  ratio checkpointed / plain   peak %.3f   time %.3f   cpu %.3f"
          % (peaks[1] / peaks[0] if peaks[0] else float("nan"), t[1] / t[0] if t[0] else 0.0,
             c[1] / c[0] if c[0] else 0.0))
    print("  check: loss %.6g vs %.6g, max |dW0 checkpointed - plain| = %g"
          % (losses[1], losses[0], float((grads[1] - grads[0]).abs().max())))
    print("  took %.1f s in all" % (time.perf_counter() - start))


if __name__ == "__main__":
    main()
