#!/usr/bin/env python3
"""Generates golden_grads.txt: losses and gradients of composite functions, from PyTorch.

Usage: /usr/bin/python3 tests/autodiff/gen_grads.py [--out FILE]

Each composite is a small model built from ops that ember has, with the same semantics, in
float64. Its inputs come from a seeded generator; torch.autograd gives the gradient of the
loss with respect to every float input. test_composite_grads.c builds the same composites
with ember's public API on every device wrapped for autodiff (both checkpointing strategies)
and compares. The C builders mirror the functions below one for one: change both together.

Format (one record per composite; '#' starts a comment line):
    composite NAME
    input NAME DTYPE RANK DIM... : VALUE...      (row-major; DTYPE f64 or i64)
    loss VALUE
    grad NAME : VALUE...                        (one per f64 input, the input's shape)
    end
"""
import argparse
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 20240611


class Case:
    """Inputs of one composite, drawn from one seeded generator."""

    def __init__(self, name, seed):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.inputs = []  # (name, tensor)

    def f64(self, name, *shape, scale=1.0):
        t = torch.tensor(self.rng.standard_normal(shape) * scale, dtype=torch.float64,
                         requires_grad=True)
        self.inputs.append((name, t))
        return t

    def i64(self, name, values):
        t = torch.tensor(values, dtype=torch.int64)
        self.inputs.append((name, t))
        return t

    def randint(self, name, hi, *shape):
        return self.i64(name, self.rng.integers(0, hi, size=shape))


def linear(x, w, b):
    """x @ w^T + b, as ember builds it: matmul with a transposed weight, broadcast add."""
    return x @ w.transpose(0, 1) + b


# ---- the composites (each returns the 0-d loss) ----

def mlp_relu(c):
    x = c.f64("x", 8, 6)
    w1, b1 = c.f64("w1", 16, 6, scale=0.5), c.f64("b1", 16)
    w2, b2 = c.f64("w2", 5, 16, scale=0.5), c.f64("b2", 5)
    t = c.randint("target", 5, 8)
    return F.cross_entropy(linear(F.relu(linear(x, w1, b1)), w2, b2), t)


def mlp_gelu_ln(c):
    x = c.f64("x", 8, 6)
    w1, b1 = c.f64("w1", 16, 6, scale=0.5), c.f64("b1", 16)
    g, beta = c.f64("ln_w", 16), c.f64("ln_b", 16)
    w2, b2 = c.f64("w2", 5, 16, scale=0.5), c.f64("b2", 5)
    t = c.randint("target", 5, 8)
    h = F.gelu(F.layer_norm(linear(x, w1, b1), (16,), g, beta, 1e-5))
    return F.cross_entropy(linear(h, w2, b2), t)


def convnet(c):
    x = c.f64("x", 2, 3, 9, 9)
    w1, b1 = c.f64("w1", 4, 3, 3, 3, scale=0.5), c.f64("b1", 4)
    w2, b2 = c.f64("w2", 6, 2, 3, 3, scale=0.5), c.f64("b2", 6)
    w3, b3 = c.f64("w3", 3, 24, scale=0.5), c.f64("b3", 3)
    t = c.randint("target", 3, 2)
    h = F.relu(F.conv2d(x, w1, b1, stride=2, padding=1))          # [2,4,5,5]
    h = F.max_pool2d(h, kernel_size=2, stride=1)                  # [2,4,4,4]
    h = F.conv2d(h, w2, b2, padding=1, groups=2)                  # [2,6,4,4]
    h = F.avg_pool2d(h, kernel_size=2)                            # [2,6,2,2]
    h = torch.flatten(h, 1)                                       # [2,24]
    return F.cross_entropy(linear(h, w3, b3), t)


def attention(c):
    q, k, v = c.f64("q", 2, 4, 8), c.f64("k", 2, 4, 8), c.f64("v", 2, 4, 8)
    w = c.f64("w", 2, 4, 8)
    s = (q @ k.transpose(-2, -1)) / math.sqrt(8.0)
    return torch.sum((torch.softmax(s, -1) @ v) * w)


def layer_norm(c):
    x = c.f64("x", 3, 4, 5, scale=2.0)
    g, b = c.f64("weight", 4, 5), c.f64("bias", 4, 5)
    w = c.f64("w", 3, 4, 5)
    return torch.sum(F.layer_norm(x, (4, 5), g, b, 1e-5) * w)


def broadcast(c):
    x, y, z = c.f64("x", 2, 1, 3, scale=0.5), c.f64("y", 4, 1, scale=0.5), c.f64("z", 3, scale=0.5)
    return torch.mean(torch.sum(torch.exp(x * y + z), 1))


def residual(c):
    x = c.f64("x", 5, 6)
    w1, w2 = c.f64("w1", 6, 7, scale=0.5), c.f64("w2", 7, 6, scale=0.5)
    out = x + F.relu(x @ w1) @ w2
    return torch.mean(out * out)


def logsumexp(c):
    x = c.f64("x", 4, 7, scale=2.0)
    w = c.f64("w", 4, 7)
    a = torch.sum(F.log_softmax(x, 1) * w)
    return a + torch.logsumexp(torch.logsumexp(x, 0).reshape(-1), 0)


def conv_transpose(c):
    x = c.f64("x", 2, 3, 4, 4)
    w, b = c.f64("w", 3, 4, 3, 3, scale=0.5), c.f64("b", 4)
    h = F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1)  # [2,4,8,8]
    return torch.mean(torch.tanh(h))


def embedding(c):
    wt = c.f64("weight", 10, 4)
    idx = c.i64("idx", [[1, 3, 3, 7, 0], [9, 1, 1, 1, 4], [2, 3, 5, 7, 3]])
    w, b = c.f64("w", 2, 4), c.f64("b", 2)
    y = c.f64("y", 3, 2)
    p = linear(torch.mean(F.embedding(idx, wt), 1), w, b)          # [3,2]
    return F.mse_loss(p, y)


def gather_scatter(c):
    x = c.f64("x", 4, 6)
    sel = c.i64("sel", [2, 0, 2])
    gidx = c.i64("gidx", [[0, 5, 5, 2], [1, 1, 3, 0], [4, 2, 5, 5]])
    base = c.f64("base", 3, 6)
    sidx = c.i64("sidx", [[1, 1, 0, 5], [2, 4, 4, 4], [0, 3, 3, 1]])
    s = torch.index_select(x, 0, sel)                              # [3,6]
    g = torch.gather(s, 1, gidx)                                   # [3,4]
    out = torch.scatter_add(base, 1, sidx, g * g)                  # [3,6]
    return torch.sum(out * out)


def slice_cat(c):
    x = c.f64("x", 4, 6)
    y = torch.cat([x[:, ::2], x[:, 1::2]], 1)                      # [4,6]
    v = torch.var(y, 1, unbiased=True)                             # [4]
    m = torch.max(y, 0).values                                     # [6]
    return torch.sum(v) + torch.sum(m * m) + torch.max(y) + torch.var(y, unbiased=False)


COMPOSITES = [mlp_relu, mlp_gelu_ln, convnet, attention, layer_norm, broadcast, residual,
              logsumexp, conv_transpose, embedding, gather_scatter, slice_cat]


def fmt(t):
    return " ".join(repr(float(v)) if t.dtype == torch.float64 else str(int(v))
                    for v in t.detach().reshape(-1).tolist())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(HERE, "golden_grads.txt"))
    args = ap.parse_args()
    lines = ["# golden losses and gradients of composite functions: generated by gen_grads.py",
             "# with PyTorch %s (float64); do not edit by hand." % torch.__version__]
    for k, fn in enumerate(COMPOSITES):
        c = Case(fn.__name__, SEED + k)
        loss = fn(c)
        floats = [(n, t) for n, t in c.inputs if t.dtype == torch.float64]
        grads = torch.autograd.grad(loss, [t for _, t in floats])
        lines.append("composite " + c.name)
        for n, t in c.inputs:
            dt = "f64" if t.dtype == torch.float64 else "i64"
            dims = " ".join(str(d) for d in t.shape)
            lines.append("input %s %s %d%s : %s" % (n, dt, t.dim(), " " + dims if dims else "",
                                                    fmt(t)))
        lines.append("loss " + repr(float(loss)))
        for (n, _), g in zip(floats, grads):
            lines.append("grad %s : %s" % (n, fmt(g)))
        lines.append("end")
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %d composites to %s" % (len(COMPOSITES), args.out))


if __name__ == "__main__":
    main()
