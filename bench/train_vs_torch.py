#!/usr/bin/env python3
"""One epoch of Fashion-MNIST training in ember (ember-train) and in PyTorch, side by side.

Usage: /usr/bin/python3 bench/train_vs_torch.py BUILD_DIR [--model mlp|cnn] [--optimizer adam|sgd]
           [--lr X] [--momentum M] [--batch 64] [--seeds 1,2,3] [--threads 1] [--data DIR]

For each seed it runs `BUILD_DIR/ember-train` and the same model in PyTorch (same data, batch,
optimizer, learning rate, number of threads; PyTorch's own initialization and shuffling), and
prints each run's test accuracy and epoch time, then the means and the ratio of epoch times
(PyTorch / ember: above 1 means ember is faster). The models: mlp 784-256-128-10 with ReLU;
cnn conv 8 (3x3, pad 1) - relu - maxpool 2 - conv 16 (3x3, pad 1) - relu - maxpool 2 - linear.
"""
import argparse
import gzip
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ember_ctypes  # noqa: E402  (bench/ember_ctypes.py)

DATA = "/usr/share/datasets/fashion-mnist"


def load_idx(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        raw = f.read()
    magic = int.from_bytes(raw[0:4], "big")
    ndim = magic & 0xFF
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def find(data, stem):
    for name in (stem + ".gz", stem):
        p = os.path.join(data, name)
        if os.path.exists(p):
            return p
    raise SystemExit("train_vs_torch: no %s in %s" % (stem, data))


def model_of(kind):
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                             nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(16 * 7 * 7, 10))


def torch_run(args, seed, xtr, ytr, xte, yte):
    torch.manual_seed(seed)
    model = model_of(args.model)
    if args.optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = nn.CrossEntropyLoss()
    perm = torch.randperm(xtr.shape[0])
    t0 = time.perf_counter()
    model.train()
    for i in range(0, xtr.shape[0], args.batch):
        idx = perm[i:i + args.batch]
        opt.zero_grad()
        loss = loss_fn(model(xtr[idx]), ytr[idx])
        loss.backward()
        opt.step()
    epoch = time.perf_counter() - t0
    model.eval()
    with torch.no_grad():
        acc = (model(xte).argmax(1) == yte).float().mean().item()
    return acc, epoch


def ember_run(args, seed):
    cmd = [os.path.join(args.build, "ember-train"), "--model", args.model, "--epochs", "1",
           "--batch", str(args.batch), "--lr", str(args.lr), "--optimizer", args.optimizer,
           "--seed", str(seed), "--data", args.data]
    if args.optimizer == "sgd":
        cmd += ["--momentum", str(args.momentum)]
    env = dict(os.environ, EMBER_NUM_THREADS=str(args.threads))
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    acc = float(re.search(r"accuracy=([0-9.]+)", out).group(1))
    epoch = float(re.search(r"epoch_s=([0-9.]+)", out).group(1))
    return acc, epoch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--model", default="mlp", choices=["mlp", "cnn"])
    ap.add_argument("--optimizer", default="adam", choices=["adam", "sgd"])
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data", default=DATA)
    args = ap.parse_args()
    if args.lr is None:
        args.lr = 1e-3 if args.optimizer == "adam" else 0.1
    ember_ctypes.torch_threads(torch, args.threads)
    xtr = torch.from_numpy(load_idx(find(args.data, "train-images-idx3-ubyte")).copy())
    ytr = torch.from_numpy(load_idx(find(args.data, "train-labels-idx1-ubyte")).astype(np.int64))
    xte = torch.from_numpy(load_idx(find(args.data, "t10k-images-idx3-ubyte")).copy())
    yte = torch.from_numpy(load_idx(find(args.data, "t10k-labels-idx1-ubyte")).astype(np.int64))
    xtr = (xtr.float() / 255.0).unsqueeze(1)
    xte = (xte.float() / 255.0).unsqueeze(1)
    print("%s, %s lr %g, batch %d, %d thread(s), 1 epoch of Fashion-MNIST; torch %s" %
          (args.model, args.optimizer, args.lr, args.batch, args.threads, torch.__version__))
    ea, et, ta, tt = [], [], [], []
    for seed in [int(s) for s in args.seeds.split(",")]:
        a, t = ember_run(args, seed)
        ea.append(a), et.append(t)
        a2, t2 = torch_run(args, seed, xtr, ytr, xte, yte)
        ta.append(a2), tt.append(t2)
        print("  seed %d: ember %.2f %% in %.2f s   torch %.2f %% in %.2f s" %
              (seed, 100 * a, t, 100 * a2, t2))
    print("  mean:   ember %.2f %% in %.2f s   torch %.2f %% in %.2f s   epoch time torch/ember %.2f"
          % (100 * statistics.mean(ea), statistics.mean(et), 100 * statistics.mean(ta),
             statistics.mean(tt), statistics.mean(tt) / statistics.mean(et)))


if __name__ == "__main__":
    sys.exit(main())
