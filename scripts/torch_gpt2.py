#!/usr/bin/env python3
"""scripts/torch_gpt2.py: the PyTorch peer of tinyscale's GPT-2 124M benchmark (chapter 11).

Trains GPT-2 small on random tokens with the batch, optimizer and precision of
configs/gpt2-124m.toml (bf16 autocast over float32 master weights, fused AdamW, clipping at 1.0),
in eager mode or under torch.compile, and prints ONE JSON line: median tokens/s and step time over
the steps after the warm-up, and MFU. scripts/bench_gpu.sh puts it beside tinyscale's own run.
Easy to get wrong: the MFU columns are comparable only when both sides count the same FLOPs
against the same peak, so both are copied from tinyscale (lib/metrics/flops.cpp, peak.cpp), not
from PyTorch, nanoGPT or llm.c, which each count a little differently.

  python3 scripts/torch_gpt2.py --mode compile --batch-size 16 --seq-len 1024 --steps 50
"""
import argparse
import json
import math
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    sys.exit("torch_gpt2.py: expected PyTorch, found no `torch` module for " + sys.executable +
             "; run it with the Python that has PyTorch (PYTHON=... for scripts/bench_gpu.sh)")

# GPT-2's vocabulary and context, and the optimizer of configs/gpt2-124m.toml (AdamW as llm.c
# trains GPT-2 small: warm-up, then cosine decay to a tenth; betas (0.9, 0.95); clipping at 1.0).
VOCAB_SIZE, N_POSITIONS = 50257, 1024
LR, MIN_LR, LR_WARMUP_STEPS = 6e-4, 6e-5, 5
BETAS, EPS, WEIGHT_DECAY, GRAD_CLIP = (0.9, 0.95), 1e-8, 0.1, 1.0


# ---- The model: GPT-2 (pre-LayerNorm blocks, tanh-GELU, learned positions, tied embeddings) -----

class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)  # q, k and v in one product
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):  # x: [B, T, C]
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        # [B, T, C] -> [B, NH, T, HS]: every head attends on its own slice of the channels
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # flash attention on a GPU
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, eps=1e-5)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd, eps=1e-5)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))  # pre-LN: the residual stream itself is never normalised
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, n_positions, n_layer, n_head, n_embd):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(n_positions, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd, eps=1e-5)
        # GPT-2's init, as tinyscale's: normal(0, 0.02), residual projections / sqrt(2 n_layer)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, mean=0.0, std=std)

    def forward(self, inputs, targets):  # inputs, targets: [B, T] token ids
        T = inputs.shape[1]
        x = self.wte(inputs) + self.wpe(torch.arange(T, device=inputs.device))
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head: [B, T, V], no bias
        # The loss in float32 (as tinyscale's), whatever precision the logits were computed in.
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


# ---- FLOPs and peak, exactly as tinyscale counts them ---------------------------------------

def model_flops(vocab_size, n_layer, n_embd, seq_len):
    """tinyscale's model FLOPs per token, a copy of metrics::model_flops (lib/metrics/flops.cpp):
    PaLM's 6N + 12·l·C·s. N counts only parameters that enter a matmul: per layer c_attn [C, 3C],
    attn c_proj [C, C], mlp c_fc [C, 4C] and mlp c_proj [4C, C], plus the tied head [C, V] once;
    no biases, LayerNorms or position table. The attention term counts the full s x s matrix.
    Returns (N, training FLOPs per token)."""
    C = n_embd
    n = n_layer * (4 * C * C + 8 * C * C) + vocab_size * C
    attention_per_token = 4 * n_layer * C * seq_len  # forward QK^T and AV
    return n, 3 * (2 * n + attention_per_token)


# Dense bf16 tensor-core peaks in TF/s, the rows of lib/metrics/peak.cpp's table: (family,
# variant, TF/s). "sxm" means the name has no variant marker ("NVIDIA H100 80GB HBM3"); H100
# PCIe/NVL and GH200 are absent on purpose, so they read as unknown instead of borrowing a peak.
BF16_PEAK_TFLOPS = [("h100", "sxm", 989.4), ("h200", "sxm", 989.4), ("h200", "nvl", 835.5),
                    ("a100", "any", 312.0)]


def has_token(name, token):
    """True when `token` occurs in `name` not preceded by a letter or digit: "gh200" is not
    "h200"."""
    return any(i == 0 or not name[i - 1].isalnum()
               for i in range(len(name)) if name.startswith(token, i))


def bf16_peak_flops(device_name):
    """The dense bf16 peak FLOP/s of the GPU named `device_name` (as CUDA reports it), or None
    when the table has no row for it."""
    name = device_name.lower()
    nvl, pcie = "nvl" in name, "pcie" in name
    for family, variant, tflops in BF16_PEAK_TFLOPS:
        if not has_token(name, family):
            continue
        if (variant == "any" or (variant == "nvl" and nvl) or (variant == "pcie" and pcie)
                or (variant == "sxm" and not nvl and not pcie)):
            return tflops * 1e12
    return None


# ---- Training ---------------------------------------------------------------------------------

def learning_rate(step, steps):
    """tinyscale's schedule (lib/optim/schedule.cpp) at 0-based `step`: linear warm-up to LR, then
    cosine decay to MIN_LR over the remaining steps."""
    if step < LR_WARMUP_STEPS:
        return LR * (step + 1) / LR_WARMUP_STEPS
    progress = min(1.0, (step - LR_WARMUP_STEPS) / max(1, steps - LR_WARMUP_STEPS))
    return MIN_LR + 0.5 * (LR - MIN_LR) * (1.0 + math.cos(math.pi * progress))


def make_optimizer(model, device):
    # As tinyscale: weight decay on the matmul weights (the nn.Linear ones) only, not on biases,
    # LayerNorms or the (tied) token and position embeddings.
    decay = [m.weight for m in model.modules() if isinstance(m, nn.Linear)]
    decayed = {id(p) for p in decay}
    rest = [p for p in model.parameters() if id(p) not in decayed]
    groups = [{"params": decay, "weight_decay": WEIGHT_DECAY},
              {"params": rest, "weight_decay": 0.0}]
    fused = {"fused": True} if device == "cuda" else {}  # one kernel for all parameters
    return torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS, **fused)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="GPT-2 124M training throughput in PyTorch, the peer of tinyscale's "
                    "configs/gpt2-124m.toml; prints one JSON line on stdout.")
    p.add_argument("--mode", choices=["eager", "compile"], default="eager",
                   help="eager PyTorch, or the model under torch.compile (default: eager)")
    p.add_argument("--steps", type=int, default=50,
                   help="optimizer steps in all, the warm-up included (default: 50)")
    p.add_argument("--warmup-steps", type=int, default=10,
                   help="first steps left out of the statistics; they hold torch.compile's "
                        "compilation (default: 10)")
    p.add_argument("--batch-size", type=int, default=16, help="sequences per step (default: 16)")
    p.add_argument("--seq-len", type=int, default=1024, help="tokens per sequence (default: 1024)")
    p.add_argument("--peak-tflops", type=float, default=0.0,
                   help="device peak TF/s for MFU (default: tinyscale's bf16 table by device name)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cuda (the benchmark), or cpu to smoke-test this script with a small "
                        "model (--n-layer 2 --n-embd 64 --n-head 2); MFU is then null")
    p.add_argument("--n-layer", type=int, default=12, help="blocks (default: 12, GPT-2 small)")
    p.add_argument("--n-head", type=int, default=12, help="heads (default: 12)")
    p.add_argument("--n-embd", type=int, default=768, help="width C (default: 768)")
    p.add_argument("--seed", type=int, default=42, help="parameter init and tokens (default: 42)")
    args = p.parse_args(argv)
    if args.warmup_steps < 0 or args.steps <= args.warmup_steps:
        p.error(f"expected --steps > --warmup-steps >= 0, found --steps {args.steps} and "
                f"--warmup-steps {args.warmup_steps}; the statistics need at least one timed step")
    if min(args.batch_size, args.seq_len, args.n_layer, args.n_head, args.n_embd) < 1:
        p.error("expected --batch-size, --seq-len, --n-layer, --n-head and --n-embd >= 1")
    if args.n_embd % args.n_head != 0:
        p.error(f"expected --n-embd divisible by --n-head, found {args.n_embd} and {args.n_head}")
    if args.seq_len > N_POSITIONS:
        p.error(f"expected --seq-len <= n_positions = {N_POSITIONS}, found {args.seq_len}")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit(f"torch_gpt2.py: expected a CUDA GPU, found none (torch.cuda.is_available() "
                 f"is False; torch {torch.__version__}, built for CUDA {torch.version.cuda}); run "
                 f"it on a GPU machine, or smoke-test it with --device cpu --n-layer 2 --n-embd 64 "
                 f"--n-head 2")
    if not hasattr(F, "scaled_dot_product_attention"):
        sys.exit(f"torch_gpt2.py: expected PyTorch >= 2.0 (scaled_dot_product_attention), found "
                 f"{torch.__version__}")
    device, B, T = args.device, args.batch_size, args.seq_len
    torch.manual_seed(args.seed)
    model = GPT(VOCAB_SIZE, N_POSITIONS, args.n_layer, args.n_head, args.n_embd).to(device)
    optimizer = make_optimizer(model, device)
    params = sum(p.numel() for p in model.parameters())  # the tied matrix once, as tinyscale
    matmul_params, flops_per_token = model_flops(VOCAB_SIZE, args.n_layer, args.n_embd, T)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    assert matmul_params == linear + model.wte.weight.numel(), "FLOP count and model disagree"
    step_fn = torch.compile(model) if args.mode == "compile" else model

    def synchronize():
        if device == "cuda":
            torch.cuda.synchronize()

    tokens = torch.Generator().manual_seed(args.seed)
    seconds, loss = [], None
    for step in range(args.steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, args.steps)
        synchronize()
        start = time.perf_counter()
        # The batch is drawn on the host and copied over inside the timed step, as tinyscale's.
        batch = torch.randint(0, VOCAB_SIZE, (B, T + 1), generator=tokens).to(device)
        inputs, targets = batch[:, :-1], batch[:, 1:]
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = step_fn(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        optimizer.step()
        synchronize()  # a step has finished only when its kernels have
        seconds.append(time.perf_counter() - start)
        if step == 0 or (step + 1) % 10 == 0 or step + 1 == args.steps:
            print(f"[{args.mode}] step {step + 1}/{args.steps} | loss {loss.item():.4f} | "
                  f"{1e3 * seconds[-1]:.1f} ms", file=sys.stderr, flush=True)

    timed = seconds[args.warmup_steps:]
    tokens_per_s = statistics.median(B * T / s for s in timed)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    peak = args.peak_tflops * 1e12 if args.peak_tflops > 0 else (
        bf16_peak_flops(name) if device == "cuda" else None)
    print(json.dumps({
        "framework": "pytorch", "mode": args.mode,
        "tokens_per_s": tokens_per_s,
        "step_ms": 1e3 * statistics.median(timed),
        "mfu": flops_per_token * tokens_per_s / peak if peak else None,
        "flops_per_token": flops_per_token, "params": params, "matmul_params": matmul_params,
        "peak_flops": peak, "device": name, "torch": torch.__version__, "cuda": torch.version.cuda,
        "batch_size": B, "seq_len": T, "steps": args.steps, "warmup_steps": args.warmup_steps,
        "final_loss": loss.item()}), flush=True)


if __name__ == "__main__":
    main()
