#!/usr/bin/python3
"""ember's model benchmarks (bench/models, `ember-models`) against their PyTorch twins.

    /usr/bin/python3 bench/models_vs_torch.py [BUILD_DIR] [--models gpt,resnet,mlp]
        [--threads 1,2] [--blas detected,pinned] [--rounds 3] [--steps 10] [--warmup 3]
        [--markdown] [--profile]

The twins have the same shapes, ops and optimizers as bench/models/models.c, written as a
PyTorch user writes them (nn.Module, nn.Linear, nn.LayerNorm, F.gelu, explicit causal attention
with masked_fill, nn.BatchNorm2d, torch.optim.AdamW / SGD). A training step is forward + loss +
backward + optimizer step; an inference forward runs under torch.no_grad() in eval mode (ember:
on the plain device, without autodiff).

For each BLAS setting (`detected`: OPENBLAS_CORETYPE as the environment has it; `pinned`: set to
the CPU's real type, Zen / Haswell / SkylakeX / Cooperlake) and each thread count, one PyTorch
worker process is started with that environment (OpenBLAS reads the variable when it loads, so
it cannot be changed inside a process) with t threads for torch and its OpenBLAS
(`ember_ctypes.torch_threads`: `torch.set_num_threads` alone leaves OpenBLAS a thread a core); then, for --rounds
rounds, each model runs once in `ember-models` (a child with EMBER_NUM_THREADS=t and the same
OPENBLAS_CORETYPE) and once in the worker, alternating which goes first. Each run times --steps
steps after --warmup, and reports the median; the table shows the median over rounds and the
ratio ember / torch. Ratios above 0.8 (the issue's goal) are marked. The exit status is 0
(a benchmark, not a test) unless a child fails to run.

--profile instead prints, per model and mode, ember's per-op forward times (`ember-models
--profile`) and PyTorch's autograd profiler table (self CPU time by op), at the first thread
count and the detected BLAS.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ember_ctypes  # noqa: E402  (bench/ember_ctypes.py)


# ---------------------------------------------------------------------------------------------
# The PyTorch twins (imported only in worker processes)
# ---------------------------------------------------------------------------------------------

def torch_models():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Attention(nn.Module):
        def __init__(self, c, heads, ctx):
            super().__init__()
            self.c_attn = nn.Linear(c, 3 * c)
            self.c_proj = nn.Linear(c, c)
            self.n_head = heads
            self.register_buffer("mask", torch.triu(torch.ones(ctx, ctx, dtype=torch.bool), 1))

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(C, dim=2)
            H = self.n_head
            q = q.view(B, T, H, C // H).transpose(1, 2)
            k = k.view(B, T, H, C // H).transpose(1, 2)
            v = v.view(B, T, H, C // H).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
            att = att.masked_fill(self.mask[:T, :T], float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.c_proj(y)

    class MLPBlock(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.c_fc = nn.Linear(c, 4 * c)
            self.c_proj = nn.Linear(4 * c, c)

        def forward(self, x):
            return self.c_proj(F.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self, c, heads, ctx):
            super().__init__()
            self.ln_1 = nn.LayerNorm(c)
            self.attn = Attention(c, heads, ctx)
            self.ln_2 = nn.LayerNorm(c)
            self.mlp = MLPBlock(c)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self, vocab, ctx, c, heads, layers):
            super().__init__()
            self.wte = nn.Embedding(vocab, c)
            self.wpe = nn.Embedding(ctx, c)
            self.h = nn.ModuleList([Block(c, heads, ctx) for _ in range(layers)])
            self.ln_f = nn.LayerNorm(c)
            self.lm_head = nn.Linear(c, vocab, bias=False)
            for p in (self.wte.weight, self.wpe.weight):
                nn.init.normal_(p, std=0.02)

        def forward(self, idx):
            B, T = idx.size()
            pos = torch.arange(0, T, dtype=torch.long)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            return self.lm_head(self.ln_f(x)).view(B * T, -1)

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False),
                                                nn.BatchNorm2d(cout))

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            sc = x if self.downsample is None else self.downsample(x)
            return F.relu(out + sc)

    class ResNet(nn.Module):
        def __init__(self, width, classes):
            super().__init__()
            self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            blocks, cin = [], width
            for s in range(3):
                cout = width << s
                blocks.append(BasicBlock(cin, cout, 1 if s == 0 else 2))
                cin = cout
            self.layers = nn.Sequential(*blocks)
            self.fc = nn.Linear(cin, classes)

        def forward(self, x):
            x = F.relu(self.bn1(self.conv1(x)))
            x = self.layers(x)
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    def MLP(inp, hidden, layers, classes):
        mods, cin = [], inp
        for _ in range(layers):
            mods += [nn.Linear(cin, hidden), nn.GELU()]
            cin = hidden
        mods.append(nn.Linear(cin, classes))
        return nn.Sequential(*mods)

    return GPT, ResNet, MLP


# Sizes: bench/models/models.c's defaults.
GPT_CFG = dict(vocab=1024, ctx=128, embd=192, heads=6, layers=2, batch=8)
RES_CFG = dict(batch=16, size=32, width=16, classes=10)
MLP_CFG = dict(batch=128, inp=784, hidden=1024, layers=2, classes=10)


def torch_instance(model, training):
    """(module, x, y, optimizer or None)"""
    import torch
    GPT, ResNet, MLP = torch_models()
    torch.manual_seed(1)
    if model == "gpt":
        c = GPT_CFG
        m = GPT(c["vocab"], c["ctx"], c["embd"], c["heads"], c["layers"])
        x = torch.randint(0, c["vocab"], (c["batch"], c["ctx"]))
        y = torch.randint(0, c["vocab"], (c["batch"] * c["ctx"],))
        opt = torch.optim.AdamW(m.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    elif model == "resnet":
        c = RES_CFG
        m = ResNet(c["width"], c["classes"])
        x = torch.randn(c["batch"], 3, c["size"], c["size"])
        y = torch.randint(0, c["classes"], (c["batch"],))
        opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    else:
        c = MLP_CFG
        m = MLP(c["inp"], c["hidden"], c["layers"], c["classes"])
        x = torch.randn(c["batch"], c["inp"])
        y = torch.randint(0, c["classes"], (c["batch"],))
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.01)
    m.train(training)
    return m, x, y, (opt if training else None)


def torch_step(inst):
    import torch
    import torch.nn.functional as F
    m, x, y, opt = inst
    if opt is not None:
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    with torch.no_grad():
        return m(x).mean().item()


def torch_time(model, training, steps, warmup):
    inst = torch_instance(model, training)
    for _ in range(warmup):
        torch_step(inst)
    t = []
    for _ in range(steps):
        t0 = time.perf_counter()
        torch_step(inst)
        t.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(t)


def openblas_core():
    import ctypes
    for name in ("libopenblas.so.0", "libblas.so.3"):
        try:
            lib = ctypes.CDLL(name)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return lib.openblas_get_corename().decode()
        except (OSError, AttributeError):
            continue
    return "?"


def worker():
    """Reads JSON commands on stdin, answers one JSON line each."""
    import torch
    ember_ctypes.torch_threads(torch, int(os.environ.get("EMBER_NUM_THREADS", "1")))
    print(json.dumps({"ready": True, "core": openblas_core(),
                      "threads": torch.get_num_threads()}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        out = {}
        for mode in cmd["modes"]:
            out[mode] = torch_time(cmd["model"], mode == "train", cmd["steps"], cmd["warmup"])
        print(json.dumps(out), flush=True)


def torch_profile(model, training, steps):
    import torch
    inst = torch_instance(model, training)
    for _ in range(3):
        torch_step(inst)
    with torch.autograd.profiler.profile() as prof:
        for _ in range(steps):
            torch_step(inst)
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18)


# ---------------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------------

def real_core_type():
    """The OpenBLAS core name of this CPU's real type (what DYNAMIC_ARCH should pick)."""
    flags, vendor = set(), ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("vendor_id") and not vendor:
                    vendor = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    if vendor == "AuthenticAMD":
        return "Zen" if "avx2" in flags else "Barcelona"
    if "amx_tile" in flags or "avx512_bf16" in flags:
        return "Cooperlake"  # 0.3.21's SapphireRapids needs AMX; Cooperlake runs on both
    if "avx512f" in flags:
        return "SkylakeX"
    if "avx2" in flags:
        return "Haswell"
    return "Prescott"


def find_binary(build, name):
    for p in (os.path.join(build, "bench", "models", name), os.path.join(build, name)):
        if os.path.exists(p):
            return p
    sys.exit(f"models_vs_torch.py: no {name} under {build} (build the ember-models target)")


def run_ember(binary, model, modes, steps, warmup, env, extra=()):
    mode = modes[0] if len(modes) == 1 else "both"
    r = subprocess.run([binary, model, "--mode", mode, "--steps", str(steps), "--warmup",
                        str(warmup), *extra], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"models_vs_torch.py: ember-models {model} failed: {r.stderr.strip()}")
    out, prof = {}, []
    for line in r.stdout.splitlines():
        kv = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
        if line.startswith("result "):
            out[kv["mode"]] = float(kv["median_ms"])
        elif line.startswith("prof "):
            prof.append(kv)
    return out, prof


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build", nargs="?", default="build/release")
    ap.add_argument("--models", default="gpt,resnet,mlp")
    ap.add_argument("--modes", default="train,infer")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--blas", default="detected,pinned")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker()
    binary = find_binary(a.build, "ember-models")
    models = a.models.split(",")
    modes = a.modes.split(",")
    threads = [int(t) for t in a.threads.split(",")]
    real = real_core_type()
    detected_env = os.environ.get("OPENBLAS_CORETYPE")

    if a.profile:
        env = dict(os.environ, EMBER_NUM_THREADS=str(threads[0]))
        import torch
        ember_ctypes.torch_threads(torch, threads[0])
        for model in models:
            for mode in modes:
                _, prof = run_ember(binary, model, [mode], a.steps, a.warmup, env, ["--profile"])
                print(f"== ember {model} {mode}, {threads[0]} thread(s): per-op ms/step")
                for p in sorted(prof, key=lambda p: -float(p["ms_per_step"])):
                    print(f"  {p['op']:<28} calls {p['calls']:>4}  {float(p['ms_per_step']):8.3f}"
                          f" ms  {float(p['pct']):5.1f} %")
                print(f"== torch {model} {mode}, {threads[0]} thread(s): autograd profiler, "
                      f"{a.steps} steps")
                print(torch_profile(model, mode == "train", a.steps))
        return 0

    rows = []
    for blas in a.blas.split(","):
        core_env = detected_env if blas == "detected" else real
        for t in threads:
            env = dict(os.environ, EMBER_NUM_THREADS=str(t), OMP_NUM_THREADS=str(t))
            env.pop("OPENBLAS_CORETYPE", None)
            if core_env:
                env["OPENBLAS_CORETYPE"] = core_env
            w = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"],
                                 env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True)
            hello = json.loads(w.stdout.readline())
            label = f"{blas} ({core_env or 'unset'}; OpenBLAS core {hello['core']})"
            res = {(m, md): ([], []) for m in models for md in modes}
            for r in range(a.rounds):
                for m in models:
                    def ember():
                        out, _ = run_ember(binary, m, modes, a.steps, a.warmup, env)
                        for md in modes:
                            res[(m, md)][0].append(out[md])

                    def torch_():
                        w.stdin.write(json.dumps({"model": m, "modes": modes, "steps": a.steps,
                                                  "warmup": a.warmup}) + "\n")
                        w.stdin.flush()
                        out = json.loads(w.stdout.readline())
                        for md in modes:
                            res[(m, md)][1].append(out[md])

                    for f in ((ember, torch_) if r % 2 == 0 else (torch_, ember)):
                        f()
            w.stdin.close()
            w.wait()
            for m in models:
                for md in modes:
                    e, p = res[(m, md)]
                    rows.append((m, "train step" if md == "train" else "inference", t, label,
                                 statistics.median(e), statistics.median(p)))
                    print_row(rows[-1], a.markdown, header=len(rows) == 1)
    over = [r for r in rows if r[4] / r[5] > 0.8]
    print(f"\n{len(rows) - len(over)} of {len(rows)} rows at or below 0.8 (ember / torch); "
          f"CPU real type {real}")
    return 0


def print_row(r, markdown, header):
    m, mode, t, label, e, p = r
    ratio = e / p
    mark = "" if ratio <= 0.8 else " > 0.8"
    if markdown:
        if header:
            print("| model | mode | threads | BLAS env | ember ms | torch ms | ember/torch |")
            print("| --- | --- | --- | --- | --- | --- | --- |")
        print(f"| {m} | {mode} | {t} | {label} | {e:.2f} | {p:.2f} | {ratio:.2f}"
              f"{' (> 0.8)' if mark else ''} |", flush=True)
    else:
        if header:
            print(f"{'model':<7} {'mode':<11} {'thr':>3}  {'BLAS env':<44} {'ember ms':>9} "
                  f"{'torch ms':>9} {'ratio':>6}")
        print(f"{m:<7} {mode:<11} {t:>3}  {label:<44} {e:9.2f} {p:9.2f} {ratio:6.2f}{mark}",
              flush=True)


if __name__ == "__main__":
    sys.exit(main())
