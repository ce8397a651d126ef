#!/usr/bin/python3
"""gen_nn.py — golden values for tests/unit/test_nn.c, from PyTorch in float64.

Writes golden_nn.txt beside this file: one line per array, `name n v0 v1 ...` (row-major,
%.17g). Inputs and parameters are written too, so the C test sets them (em_tensor_assign)
rather than reproducing any random generator. Every layer case is: the input x, the
parameters, an upstream weight r; loss = sum(layer(x) * r); then y, dx and the parameters'
gradients.  Run: /usr/bin/python3 tests/nn/gen_nn.py
"""
import os
import torch

torch.manual_seed(1234)
D = torch.float64
out = []


def put(name, t):
    t = t.detach().reshape(-1).tolist()
    out.append(name + " " + str(len(t)) + " " + " ".join("%.17g" % v for v in t))


def rnd(*shape):
    return torch.rand(*shape, dtype=D) * 2 - 1


def layer_case(name, mod, xshape, params):
    x = rnd(*xshape).requires_grad_(True)
    put(name + ".x", x)
    for pn in params:
        p = getattr(mod, pn)
        with torch.no_grad():
            p.copy_(rnd(*p.shape))
        put(name + "." + pn, p)
    y = mod(x)
    r = rnd(*y.shape)
    put(name + ".r", r)
    (y * r).sum().backward()
    put(name + ".y", y)
    put(name + ".dx", x.grad)
    for pn in params:
        put(name + ".d" + pn, getattr(mod, pn).grad)


nn = torch.nn
layer_case("linear", nn.Linear(4, 5).double(), (3, 4), ["weight", "bias"])
layer_case("linear_nobias", nn.Linear(4, 5, bias=False).double(), (2, 3, 4), ["weight"])
layer_case("conv", nn.Conv2d(3, 4, 3, stride=2, padding=1).double(), (2, 3, 7, 7),
           ["weight", "bias"])
layer_case("pool", nn.MaxPool2d(2, 2).double(), (2, 3, 6, 6), [])
layer_case("flatten", nn.Flatten().double(), (2, 3, 2, 2), [])
layer_case("ln", nn.LayerNorm(6).double(), (4, 6), ["weight", "bias"])
layer_case("relu", nn.ReLU(), (3, 5), [])
layer_case("gelu", nn.GELU(), (3, 5), [])

# losses
logits = rnd(5, 4).requires_grad_(True)
target = torch.tensor([0, 3, 1, 2, 3])
put("ce.logits", logits)
put("ce.target", target.double())
loss = nn.functional.cross_entropy(logits, target)
loss.backward()
put("ce.loss", loss)
put("ce.dlogits", logits.grad)

pred = rnd(3, 4).requires_grad_(True)
tgt = rnd(3, 4)
put("mse.pred", pred)
put("mse.target", tgt)
loss = nn.functional.mse_loss(pred, tgt)
loss.backward()
put("mse.loss", loss)
put("mse.dpred", pred.grad)

# optimizers: a tiny model Linear(3, 4) -> ReLU -> Linear(4, 2), cross-entropy, 3 steps
ox = rnd(6, 3)
oy = torch.tensor([0, 1, 1, 0, 1, 0])
put("opt.x", ox)
put("opt.y", oy.double())
init = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).double()
with torch.no_grad():
    for p in init.parameters():
        p.copy_(rnd(*p.shape))
for n, p in init.named_parameters():
    put("opt.init." + n, p)

# clip_grad_norm on the initial gradients
m = __import__("copy").deepcopy(init)
nn.functional.cross_entropy(m(ox), oy).backward()
total = torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
put("clip.total", total)
put("clip.scale", torch.clamp(0.5 / (total + 1e-6), max=1.0))

cases = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01),
    "sgdplain": lambda ps: torch.optim.SGD(ps, lr=0.1),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.01, betas=(0.9, 0.999), eps=1e-8,
                                        weight_decay=0.01),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.01, betas=(0.9, 0.999), eps=1e-8,
                                          weight_decay=0.1),
}
for cname, mk in cases.items():
    m = __import__("copy").deepcopy(init)
    opt = mk(m.parameters())
    for step in range(3):
        opt.zero_grad()
        nn.functional.cross_entropy(m(ox), oy).backward()
        opt.step()
        for n, p in m.named_parameters():
            put("%s.%d.%s" % (cname, step, n), p)

# layers of the module interface (test_nn.c's test_more_layers), drawn after the optimizer
# cases so that those keep their numbers
layer_case("conv1d", nn.Conv1d(3, 4, 3, stride=2, padding=1).double(), (2, 3, 9),
           ["weight", "bias"])
layer_case("avgpool", nn.AvgPool2d(3, 2, padding=1).double(), (2, 3, 7, 7), [])
layer_case("adaptive", nn.AdaptiveAvgPool2d((2, 3)).double(), (2, 3, 5, 7), [])


class Residual(nn.Module):
    def __init__(self, body):
        super().__init__()
        self.body = body

    def forward(self, x):
        return x + self.body(x)


res = Residual(nn.Sequential(nn.Linear(4, 4), nn.GELU())).double()
x = rnd(3, 4).requires_grad_(True)
put("residual.x", x)
with torch.no_grad():
    res.body[0].weight.copy_(rnd(4, 4))
    res.body[0].bias.copy_(rnd(4))
put("residual.body.0.weight", res.body[0].weight)
put("residual.body.0.bias", res.body[0].bias)
y = res(x)
r = rnd(*y.shape)
put("residual.r", r)
(y * r).sum().backward()
put("residual.y", y)
put("residual.dx", x.grad)
put("residual.dbody.0.weight", res.body[0].weight.grad)
put("residual.dbody.0.bias", res.body[0].bias.grad)

emb = nn.Embedding(7, 3).double()
with torch.no_grad():
    emb.weight.copy_(rnd(7, 3))
idx = torch.tensor([[0, 6, 2], [2, 2, 5]])
put("emb.weight", emb.weight)
put("emb.idx", idx.double())
y = emb(idx)
r = rnd(*y.shape)
put("emb.r", r)
(y * r).sum().backward()
put("emb.y", y)
put("emb.dweight", emb.weight.grad)

# the losses of issue 14 (test_nn.c's test_losses_ex): the input, the targets, the loss and
# the input's gradient (of sum(loss * r) for reduction none)
F = nn.functional


def loss_case(name, f, x, *rest):
    x = x.clone().requires_grad_(True)
    put(name + ".x", x)
    loss = f(x)
    if loss.dim() > 0:
        r = rnd(*loss.shape)
        put(name + ".r", r)
        (loss * r).sum().backward()
    else:
        loss.backward()
    put(name + ".loss", loss)
    put(name + ".dx", x.grad)


ce_x = rnd(2, 4, 3, 2)
ce_t = torch.tensor([[[0, 3], [-100, 1], [2, 2]], [[1, -100], [3, 0], [0, 2]]])
ce_w = torch.rand(4, dtype=D) + 0.5
put("ce4.t", ce_t.double())
put("ce4.w", ce_w)
for red in ["mean", "sum", "none"]:
    loss_case("ce4." + red, lambda x: F.cross_entropy(x, ce_t, weight=ce_w, reduction=red,
                                                      label_smoothing=0.1), ce_x)
    loss_case("ce4plain." + red, lambda x: F.cross_entropy(x, ce_t, reduction=red), ce_x)
cp_x = rnd(3, 5)
cp_t = torch.softmax(rnd(3, 5) * 3, 1)
put("cep.t", cp_t)
loss_case("cep", lambda x: F.cross_entropy(x, cp_t, weight=ce_w.repeat(2)[:5],
                                           label_smoothing=0.2), cp_x)
put("cep.w", ce_w.repeat(2)[:5])
nl_t = torch.tensor([1, 2, 4])
put("nll.t", nl_t.double())
loss_case("nll", lambda x: F.nll_loss(x, nl_t, ignore_index=2), torch.log_softmax(rnd(3, 5), 1))
bx = rnd(3, 4) * 4
bt = torch.rand(3, 4, dtype=D)
bpw = torch.rand(4, dtype=D) + 0.5
put("bce.t", bt)
put("bce.pw", bpw)
loss_case("bce.mean", lambda x: F.binary_cross_entropy_with_logits(x, bt, pos_weight=bpw), bx)
loss_case("bce.none", lambda x: F.binary_cross_entropy_with_logits(x, bt, reduction="none"), bx)
rx = rnd(3, 4) * 2
rt = rnd(3, 4) * 2
put("reg.t", rt)
loss_case("l1", lambda x: F.l1_loss(x, rt), rx)
loss_case("sl1", lambda x: F.smooth_l1_loss(x, rt, beta=0.5, reduction="sum"), rx)
loss_case("huber", lambda x: F.huber_loss(x, rt, delta=0.7), rx)
loss_case("mse.none", lambda x: F.mse_loss(x, rt, reduction="none"), rx)

# normalization layers (test_nn.c's test_norm_layers): BatchNorm's running statistics after
# the training forward, and an eval forward of a second input with them
def bn_case(name, mod, xshape):
    layer_case(name, mod, xshape, ["weight", "bias"])
    put(name + ".rm", mod.running_mean)
    put(name + ".rv", mod.running_var)
    mod.eval()
    x2 = rnd(*xshape)
    put(name + ".x2", x2)
    put(name + ".y2", mod(x2))


bn_case("bn2", nn.BatchNorm2d(3, momentum=0.2).double(), (4, 3, 5, 5))
bn_case("bn1", nn.BatchNorm1d(4).double(), (6, 4))
bn_case("bn1l", nn.BatchNorm1d(4).double(), (3, 4, 5))
layer_case("gn", nn.GroupNorm(2, 6).double(), (3, 6, 4, 2), ["weight", "bias"])


class RMS(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n, dtype=D))
        self.eps = eps

    def forward(self, x):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + self.eps) * self.weight


layer_case("rms", RMS(5, 1e-6), (3, 2, 5), ["weight"])

# MultiheadAttention (self-attention, batch first), causal and with a key padding mask
def getp(mod, path):
    for part in path.split("."):
        mod = getattr(mod, part)
    return mod


MHA_P = ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]
for name, causal, pad in [("mha", False, False), ("mhac", True, True)]:
    mha = nn.MultiheadAttention(8, 2, batch_first=True).double()
    x = rnd(2, 5, 8).requires_grad_(True)
    put(name + ".x", x)
    for pn in MHA_P:
        p = getp(mha, pn)
        with torch.no_grad():
            p.copy_(rnd(*p.shape))
        put(name + "." + pn, p)
    am = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1) if causal else None
    kp = torch.tensor([[False] * 5, [False, False, False, True, True]]) if pad else None
    y = mha(x, x, x, attn_mask=am, key_padding_mask=kp, need_weights=False)[0]
    r = rnd(*y.shape)
    put(name + ".r", r)
    (y * r).sum().backward()
    put(name + ".y", y)
    put(name + ".dx", x.grad)
    for pn in MHA_P:
        put(name + ".d" + pn, getp(mha, pn).grad)

# parameter groups: layer 0 in group 0, layer 2 in group 1, each with its own lr and weight
# decay; 3 steps (test_nn.c's test_optimizer_groups)
gcases = {
    "gsgd": lambda g: torch.optim.SGD(g, lr=0.1, momentum=0.9),
    "gadamw": lambda g: torch.optim.AdamW(g, lr=0.01, betas=(0.9, 0.999), eps=1e-8),
}
for cname, mk in gcases.items():
    m = __import__("copy").deepcopy(init)
    opt = mk([{"params": m[0].parameters(), "lr": 0.1 if cname == "gsgd" else 0.01,
               "weight_decay": 0.01},
              {"params": m[2].parameters(), "lr": 0.03 if cname == "gsgd" else 0.002,
               "weight_decay": 0.2}])
    for step in range(3):
        opt.zero_grad()
        nn.functional.cross_entropy(m(ox), oy).backward()
        opt.step()
        for n, p in m.named_parameters():
            put("%s.%d.%s" % (cname, step, n), p)


# schedules: the lr of each step from torch's schedulers (base lr 0.1)
def sched(name, mk, n):
    p = torch.nn.Parameter(torch.zeros(1, dtype=D))
    o = torch.optim.SGD([p], lr=0.1)
    sc = mk(o)
    lrs = []
    for _ in range(n):
        lrs.append(o.param_groups[0]["lr"])
        o.step()
        sc.step()
    put("sched." + name, torch.tensor(lrs, dtype=D))


S = torch.optim.lr_scheduler
sched("linear", lambda o: S.LinearLR(o, start_factor=0.1, end_factor=1.0, total_iters=5), 9)
sched("cosine", lambda o: S.CosineAnnealingLR(o, T_max=10, eta_min=0.001), 13)
sched("onecycle", lambda o: S.OneCycleLR(o, max_lr=0.1, total_steps=20), 20)
sched("onecycle2", lambda o: S.OneCycleLR(o, max_lr=0.5, total_steps=17, pct_start=0.25,
                                           div_factor=10, final_div_factor=100), 17)

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden_nn.txt")
with open(path, "w") as f:
    f.write("# written by gen_nn.py (PyTorch %s, float64); do not edit\n" % torch.__version__)
    f.write("\n".join(out) + "\n")
print("wrote", path, len(out), "arrays")
