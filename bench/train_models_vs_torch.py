#!/usr/bin/env python3
"""ember-train --model resnet and --model transformer beside the same models in PyTorch.

Usage: /usr/bin/python3 bench/train_models_vs_torch.py BUILD_DIR [--models resnet,transformer]
           [--threads 1] [--runs 1] [--limit N] [--steps 100] [--text FILE] [--data DIR]

Each run trains one epoch in ember (BUILD_DIR/ember-train, EMBER_NUM_THREADS=threads) and then
the same model in PyTorch (torch.set_num_threads and its OpenBLAS's count through
ember_ctypes.torch_threads): same shapes, batch, optimizer, learning rate and schedule, number of
steps; each side with its own initialization and its own shuffling / window offsets. Runs
alternate ember, torch; the medians are printed with the ratio of epoch times (torch / ember:
above 1 means ember is faster).

resnet (Fashion-MNIST, batch 64, Adam 3e-3, one pass over the --limit first shuffled images, all
60000 by default): conv 16 + BatchNorm2d + ReLU + max pool, a residual block (two 3x3 convs
with BatchNorm2d), stride-2 conv to 32 + BatchNorm2d + ReLU, a residual block, adaptive average
pool, linear; the test accuracy on the 10000 test images.

transformer (a character GPT on --text, default GPL-3; context 64, d 64, 4 heads, 2 pre-LN
blocks with MLP 256, batch 32, AdamW 3e-3 (wd 0.01) with a 10% linear warmup and a cosine to
lr/10, grad norm clipped to 1, --steps steps an epoch): the mean training loss of the epoch and
the validation loss (of each 10 blocks of 1024 bytes, the 10th).
"""
import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ember_ctypes  # noqa: E402  (bench/ember_ctypes.py)
from train_vs_torch import DATA, find, load_idx  # noqa: E402

TEXT = "/usr/share/common-licenses/GPL-3"


# ---- the models (tools/ember-train.c's) ----
class Residual(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(ch, ch, 3, 1, 1, bias=False), nn.BatchNorm2d(ch),
                                  nn.ReLU(), nn.Conv2d(ch, ch, 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(ch))

    def forward(self, x):
        return x + self.body(x)


def resnet():
    return nn.Sequential(nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.MaxPool2d(2), Residual(16), nn.ReLU(),
                         nn.Conv2d(16, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
                         Residual(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(32, 10))


D, H, HID, LAYERS = 64, 4, 256, 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.attn = nn.MultiheadAttention(D, H, batch_first=True)
        self.ln2 = nn.LayerNorm(D)
        self.mlp = nn.Sequential(nn.Linear(D, HID), nn.GELU(), nn.Linear(HID, D))

    def forward(self, x):
        t = x.shape[1]
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, context):
        super().__init__()
        self.tok = nn.Embedding(vocab, D)
        self.pos = nn.Embedding(context, D)
        self.blocks = nn.Sequential(*[Block() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, vocab)

    def forward(self, x):
        return self.head(self.ln_f(self.blocks(self.tok(x) + self.pos(torch.arange(x.shape[1])))))


def gpt_lr(lr, k, total):
    warm = max(1, total // 10)
    if k < warm:
        return lr * (1.0 / warm + (1 - 1.0 / warm) * k / warm)
    if total - warm < 1:
        return lr
    return lr / 10 + (lr - lr / 10) * (1 + math.cos(math.pi * (k - warm) / (total - warm))) / 2


# ---- the runs ----
def ember(args, model, extra):
    cmd = [os.path.join(args.build, "ember-train"), "--model", model, "--epochs", "1",
           "--seed", str(args.seed)] + extra
    env = dict(os.environ, EMBER_NUM_THREADS=str(args.threads))
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    final = [ln for ln in out.splitlines() if ln.startswith("final: ")][-1]
    return {k: float(v) for k, v in re.findall(r"(\w+)=([-0-9.naif]+)", final)}


def torch_resnet(args, xtr, ytr, xte, yte):
    torch.manual_seed(args.seed)
    model = resnet()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    n = xtr.shape[0] if args.limit is None else min(args.limit, xtr.shape[0])
    perm = torch.randperm(xtr.shape[0])[:n]
    model.train()
    t0, total, steps = time.perf_counter(), 0.0, 0
    for i in range(0, n, 64):
        idx = perm[i:i + 64]
        loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        total, steps = total + loss.item(), steps + 1
    epoch = time.perf_counter() - t0
    model.eval()
    with torch.no_grad():
        acc = sum((model(xte[i:i + 1000]).argmax(1) == yte[i:i + 1000]).sum().item()
                  for i in range(0, xte.shape[0], 1000)) / xte.shape[0]
    return {"loss": total / steps, "accuracy": acc, "epoch_s": epoch}


def torch_transformer(args, text):
    T, B = 64, 32
    vocab = sorted(set(text))
    m = {b: i for i, b in enumerate(vocab)}
    tr = [m[b] for i, b in enumerate(text) if (i // 1024) % 10 != 9]
    va = [m[b] for i, b in enumerate(text) if (i // 1024) % 10 == 9]
    tr, va = torch.tensor(tr), torch.tensor(va)
    torch.manual_seed(args.seed)
    model = GPT(len(vocab), T)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    gen = np.random.default_rng(args.seed)
    model.train()
    t0, total = time.perf_counter(), 0.0
    for k in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = gpt_lr(3e-3, k, args.steps)
        off = torch.from_numpy(gen.integers(0, len(tr) - T, B))
        idx = off[:, None] + torch.arange(T + 1)[None, :]
        w = tr[idx]
        loss = F.cross_entropy(model(w[:, :T]).reshape(-1, len(vocab)), w[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        total += loss.item()
    epoch = time.perf_counter() - t0
    model.eval()
    nwin = (len(va) - 1) // T
    vsum = 0.0
    with torch.no_grad():
        for w0 in range(0, nwin, B):
            b = min(B, nwin - w0)
            idx = (torch.arange(b)[:, None] + w0) * T + torch.arange(T + 1)[None, :]
            w = va[idx]
            vsum += F.cross_entropy(model(w[:, :T]).reshape(-1, len(vocab)),
                                    w[:, 1:].reshape(-1)).item() * b
    return {"loss": total / args.steps, "val_loss": vsum / nwin, "epoch_s": epoch}


def report(name, keys, er, tr):
    def med(rs, k):
        return statistics.median(r[k] for r in rs)
    for i, (a, b) in enumerate(zip(er, tr)):
        print("  run %d: ember %s   torch %s" % (i + 1, "  ".join("%s %.4f" % (k, a[k]) for k in keys),
                                                 "  ".join("%s %.4f" % (k, b[k]) for k in keys)))
    print("%s median: ember %s   torch %s   epoch time torch/ember %.2f" %
          (name, "  ".join("%s %.4f" % (k, med(er, k)) for k in keys),
           "  ".join("%s %.4f" % (k, med(tr, k)) for k in keys),
           med(tr, "epoch_s") / med(er, "epoch_s")))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--models", default="resnet,transformer")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--limit", type=int, default=None, help="resnet: training images")
    ap.add_argument("--steps", type=int, default=100, help="transformer: steps an epoch")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--text", default=TEXT)
    ap.add_argument("--data", default=DATA)
    args = ap.parse_args()
    ember_ctypes.torch_threads(torch, args.threads)
    print("%d thread(s) each; torch %s" % (args.threads, torch.__version__))
    models = args.models.split(",")
    if "resnet" in models:
        xtr = torch.from_numpy(load_idx(find(args.data, "train-images-idx3-ubyte")).copy())
        ytr = torch.from_numpy(load_idx(find(args.data, "train-labels-idx1-ubyte")).astype(np.int64))
        xte = torch.from_numpy(load_idx(find(args.data, "t10k-images-idx3-ubyte")).copy())
        yte = torch.from_numpy(load_idx(find(args.data, "t10k-labels-idx1-ubyte")).astype(np.int64))
        xtr = (xtr.float() / 255.0).unsqueeze(1)
        xte = (xte.float() / 255.0).unsqueeze(1)
        extra = ["--data", args.data, "--batch", "64", "--optimizer", "adam", "--lr", "3e-3"]
        if args.limit is not None:
            extra += ["--limit", str(args.limit)]
        print("resnet: Fashion-MNIST, %s training images, batch 64, Adam 3e-3, 1 epoch" %
              (args.limit or 60000))
        er, tr = [], []
        for _ in range(args.runs):
            er.append(ember(args, "resnet", extra))
            tr.append(torch_resnet(args, xtr, ytr, xte, yte))
        report("resnet", ["loss", "accuracy", "epoch_s"], er, tr)
    if "transformer" in models:
        with open(args.text, "rb") as f:
            text = f.read()
        extra = ["--data", args.text, "--steps", str(args.steps)]
        print("transformer: %s (%d bytes), context 64, batch 32, AdamW 3e-3 warmup + cosine, "
              "%d steps" % (args.text, len(text), args.steps))
        er, tr = [], []
        for _ in range(args.runs):
            er.append(ember(args, "transformer", extra))
            tr.append(torch_transformer(args, text))
        report("transformer", ["loss", "val_loss", "epoch_s"], er, tr)


if __name__ == "__main__":
    sys.exit(main())
