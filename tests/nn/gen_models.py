#!/usr/bin/python3
"""gen_models.py — PyTorch's losses for tests/unit/test_nn_models.c: a small transformer and a
small ResNet, each trained 20 steps from the same weights and the same batches as the C test.

Nothing random is shared: every parameter and every batch comes from an integer hash that
C and Python compute to the same bits (splitmix64 of FNV-1a of the parameter's name and the
element's index; the top 53 bits as a double in [-1, 1), then scaled and, for f32, rounded
once). Per parameter named `name` with shape S, element j, u = unit(name, j):
    rank >= 2:                      u / sqrt(prod(S[1:]))     (embeddings too)
    rank 1, name ends in "weight":  1 + 0.1 u                 (LayerNorm, BatchNorm)
    rank 1, otherwise:              0.1 u                     (biases)
Buffers keep torch's defaults (running_mean 0, running_var 1).

Writes golden_models.txt beside this file, one line per array, `name n v0 v1 ...` (%.17g):
  <model>.names      the FNV-1a hash (mod 2^32) of each parameter name, in torch's order
  <model>.numel      each parameter's element count
  <model>.<dt>.loss  the 20 training losses (before each step), dt f32 or f64
  <model>.<dt>.eval  the eval-mode loss on batch 20 after the 20 steps (no_grad)
  resnet.<dt>.running_mean  the first BatchNorm's running_mean after the steps
  momentum.onecycle(2)      OneCycleLR's momentum (SGD) / beta1 (Adam) at each step
Run: /usr/bin/python3 tests/nn/gen_models.py
"""
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

M64 = (1 << 64) - 1


def fnv1a(name):
    h = 0xcbf29ce484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001b3) & M64
    return h


def mix(z):
    z = (z + 0x9e3779b97f4a7c15) & M64
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
    return z ^ (z >> 31)


def unit(key, j):
    """[-1, 1): the top 53 bits of mix(key + j) (exact in doubles)."""
    return (mix((key + j) & M64) >> 11) * (2.0 ** -52) - 1.0


def init_value(name, shape, j):
    u = unit(fnv1a(name), j)
    if len(shape) >= 2:
        return u / math.sqrt(math.prod(shape[1:]))
    if name.endswith("weight"):
        return 1.0 + 0.1 * u
    return 0.1 * u


def set_params(model, dtype):
    for name, p in model.named_parameters():
        vals = [init_value(name, list(p.shape), j) for j in range(p.numel())]
        with torch.no_grad():
            p.copy_(torch.tensor(vals, dtype=torch.float64).to(dtype).reshape(p.shape))


# ---- the transformer: vocab 20, d 32, 4 heads, 2 pre-LN blocks (MLP 64), T 16, batch 4 ----
V, D, H, HID, T, B = 20, 32, 4, 64, 16, 4


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
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Embedding(T, D)
        self.blocks = nn.Sequential(Block(), Block())
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, V)

    def forward(self, x):
        h = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        return self.head(self.ln_f(self.blocks(h)))


def gpt_batch(step):
    """tokens of step's batch: row b is a sequence of T + 1; x its first T, y its last T."""
    seq = [[mix(step * 1000003 + b * 1009 + t) % V for t in range(T + 1)] for b in range(B)]
    x = torch.tensor([r[:T] for r in seq], dtype=torch.int64)
    y = torch.tensor([r[1:] for r in seq], dtype=torch.int64)
    return x, y


def gpt_loss(model, x, y):
    return F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))


# ---- the ResNet: 12x12 inputs, 8 then 16 channels, 10 classes, batch 8 ----
NB, HW, C1, C2 = 8, 12, 8, 16


class Residual(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(ch, ch, 3, 1, 1, bias=False), nn.BatchNorm2d(ch),
                                  nn.ReLU(), nn.Conv2d(ch, ch, 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(ch))

    def forward(self, x):
        return x + self.body(x)


def resnet():
    return nn.Sequential(nn.Conv2d(1, C1, 3, 1, 1, bias=False), nn.BatchNorm2d(C1), nn.ReLU(),
                         Residual(C1), nn.ReLU(),
                         nn.Conv2d(C1, C2, 3, 2, 1, bias=False), nn.BatchNorm2d(C2), nn.ReLU(),
                         Residual(C2), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(C2, 10))


def res_batch(step, dtype):
    key = mix(0x5e5 + step)
    vals = [unit(key, j) for j in range(NB * HW * HW)]
    x = torch.tensor(vals, dtype=torch.float64).to(dtype).reshape(NB, 1, HW, HW)
    y = torch.tensor([mix(step * 7919 + n) % 10 for n in range(NB)], dtype=torch.int64)
    return x, y


def res_loss(model, x, y):
    return F.cross_entropy(model(x), y)


STEPS = 20
out = []


def put(name, vals):
    vals = [float(v) for v in vals]
    out.append(name + " " + str(len(vals)) + " " + " ".join("%.17g" % v for v in vals))


def run(tag, model, make_opt, batch, loss_fn, dtype, extra=None):
    set_params(model, dtype)
    opt = make_opt(model.parameters())
    losses = []
    model.train()
    for step in range(STEPS):
        x, y = batch(step)
        loss = loss_fn(model, x, y)
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    dt = "f32" if dtype == torch.float32 else "f64"
    put(tag + "." + dt + ".loss", losses)
    model.eval()
    with torch.no_grad():
        x, y = batch(STEPS)
        put(tag + "." + dt + ".eval", [loss_fn(model, x, y).item()])
    if extra:
        extra(model, tag + "." + dt)


def names(tag, model):
    put(tag + ".names", [fnv1a(n) & 0xffffffff for n, _ in model.named_parameters()])
    put(tag + ".numel", [p.numel() for _, p in model.named_parameters()])


torch.manual_seed(0)
names("gpt", GPT())
names("resnet", resnet())
for dtype in (torch.float32, torch.float64):
    run("gpt", GPT().to(dtype),
        lambda ps: torch.optim.AdamW(ps, lr=1e-2, betas=(0.9, 0.999), eps=1e-8,
                                     weight_decay=0.01),
        gpt_batch, gpt_loss, dtype)
    run("resnet", resnet().to(dtype), lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
        lambda s, dt=dtype: res_batch(s, dt), res_loss, dtype,
        lambda m, p: put(p + ".running_mean", m[1].running_mean.tolist()))



# OneCycleLR's momentum cycling (em_momentum_one_cycle): SGD's momentum and Adam's beta1
def momenta(name, mk, key, n):
    p = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    o, sc = mk(p)
    vals = []
    for _ in range(n):
        g = o.param_groups[0]
        vals.append(g["momentum"] if key == "momentum" else g["betas"][0])
        o.step()
        sc.step()
    put("momentum." + name, vals)


S = torch.optim.lr_scheduler


def sgd_cycle(p):
    o = torch.optim.SGD([p], lr=0.1, momentum=0.9)
    return o, S.OneCycleLR(o, max_lr=0.1, total_steps=20)


def adam_cycle(p):
    o = torch.optim.Adam([p], lr=0.1)
    return o, S.OneCycleLR(o, max_lr=0.5, total_steps=17, pct_start=0.25, base_momentum=0.8,
                           max_momentum=0.9)


momenta("onecycle", sgd_cycle, "momentum", 20)
momenta("onecycle2", adam_cycle, "beta1", 17)

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden_models.txt")
with open(path, "w") as f:
    f.write("# written by gen_models.py (PyTorch %s); do not edit\n" % torch.__version__)
    f.write("\n".join(out) + "\n")
print("wrote", path)
