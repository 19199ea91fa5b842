#!/usr/bin/python3
"""PyTorch reference for bench/vs_pytorch.sh: times full fp32 training steps.

Builds the same three models as bench/configs/{mlp,vit,gpt}.yaml (see
docs/benchmarks.md), feeds one fixed synthetic batch (torch.manual_seed(0)),
and times zero_grad + forward + loss + backward + AdamW step with
time.perf_counter. Prints one line:

  pytorch model=<m> threads=<n> median_ms=<x> params=<count>

Run with /usr/bin/python3 (Debian python3-torch 1.13). Set OMP_NUM_THREADS and
OPENBLAS_NUM_THREADS to the same N as --threads: torch.set_num_threads does not
reach the OpenBLAS pthread pool that Debian's torch calls for sgemm.
"""

import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


class Mlp(nn.Module):
    # [B, 784] -> 1024 -> GELU -> 1024 -> GELU -> 10
    def __init__(self, in_dim=784, hidden=(1024, 1024), num_classes=10):
        super().__init__()
        dims = [in_dim] + list(hidden)
        self.hidden = nn.ModuleList(
            nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.out = nn.Linear(dims[-1], num_classes)

    def forward(self, x):
        for layer in self.hidden:
            x = gelu_tanh(layer(x))
        return self.out(x)


class Attention(nn.Module):
    # qkv: one Linear(C, 3C) whose columns are q|k|v; head h uses columns
    # h*hs .. h*hs+hs-1 of each. Written out by hand (torch 1.13 has no fused
    # CPU scaled_dot_product_attention).
    def __init__(self, dim, heads, causal, seq_len):
        super().__init__()
        self.heads = heads
        self.causal = causal
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        if causal:
            mask = torch.triu(
                torch.ones(seq_len, seq_len, dtype=torch.bool), diagonal=1)
            self.register_buffer("mask", mask, persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        NH = self.heads
        hs = C // NH
        qkv = self.qkv(x).view(B, T, 3, NH, hs).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # [B, NH, T, hs]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)  # [B, NH, T, T]
        if self.causal:
            att = att.masked_fill(self.mask[:T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v  # [B, NH, T, hs]
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.proj(y)


class Block(nn.Module):
    # Pre-LN: x += Proj(Attn(LN1(x))); x += FC2(GELU_tanh(FC1(LN2(x))))
    def __init__(self, dim, heads, mlp_dim, causal, seq_len):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim, eps=1e-5)
        self.attn = Attention(dim, heads, causal, seq_len)
        self.ln2 = nn.LayerNorm(dim, eps=1e-5)
        self.fc1 = nn.Linear(dim, mlp_dim)
        self.fc2 = nn.Linear(mlp_dim, dim)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.fc2(gelu_tanh(self.fc1(self.ln2(x))))
        return x


class Vit(nn.Module):
    # Images [B, C, H, W]; patch embedding = Linear on flattened (c, py, px)
    # patches (== Conv2d(C, dim, patch, stride=patch)); class token prepended;
    # learned positional embedding; head on the class token.
    def __init__(self, image_size=32, channels=3, patch=4, dim=192, depth=6,
                 heads=3, mlp_dim=768, num_classes=10):
        super().__init__()
        self.patch = patch
        n_patches = (image_size // patch) ** 2
        self.patch_embed = nn.Linear(channels * patch * patch, dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, n_patches + 1, dim))
        self.blocks = nn.ModuleList(
            Block(dim, heads, mlp_dim, False, n_patches + 1)
            for _ in range(depth))
        self.ln_f = nn.LayerNorm(dim, eps=1e-5)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, img):
        B, C, H, W = img.shape
        p = self.patch
        # [B, C, H/p, p, W/p, p] -> [B, H/p, W/p, C, p, p] -> [B, N, C*p*p]
        x = img.view(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
        x = x.reshape(B, (H // p) * (W // p), C * p * p)
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(B, -1, -1), x], dim=1)
        x = x + self.pos_embed
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        return self.head(x[:, 0])


class Gpt(nn.Module):
    # Token + learned positional embedding, causal pre-LN blocks, final LN,
    # untied lm head without bias.
    def __init__(self, vocab=256, seq_len=256, dim=384, depth=6, heads=6,
                 mlp_dim=1536):
        super().__init__()
        self.tok_embed = nn.Embedding(vocab, dim)
        self.pos_embed = nn.Parameter(torch.zeros(seq_len, dim))
        self.blocks = nn.ModuleList(
            Block(dim, heads, mlp_dim, True, seq_len) for _ in range(depth))
        self.ln_f = nn.LayerNorm(dim, eps=1e-5)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        B, T = idx.shape
        x = self.tok_embed(idx) + self.pos_embed[:T]
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def init_weights(model, std=0.02):
    # Like ndtrain: normal(0, std) weights, embeddings, class token and
    # positional embeddings; zero biases; LayerNorm weight 1, bias 0 (the nn
    # default). Values barely change the timing but keep activations in a
    # normal range (no denormals, no saturation).
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, std)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
    for name, p in model.named_parameters(recurse=False):
        nn.init.normal_(p, 0.0, std)  # cls_token, pos_embed


def param_groups(model, weight_decay):
    # ndtrain decays Linear/Embedding weights only; biases, LayerNorm params,
    # the ViT class token and positional embeddings (ViT and GPT) get none.
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        is_norm = isinstance(
            model.get_submodule(name.rsplit(".", 1)[0]) if "." in name
            else model, nn.LayerNorm)
        if (name.endswith("bias") or is_norm or "cls_token" in name
                or "pos_embed" in name):
            no_decay.append(p)
        else:
            decay.append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def build(model_name):
    """Returns (model, inputs, targets, loss_fn)."""
    if model_name == "mlp":
        B = 256
        model = Mlp()
        x = torch.randn(B, 784)
        y = torch.randint(0, 10, (B,))
        return model, x, y, F.cross_entropy
    if model_name == "vit":
        B = 64
        model = Vit()
        x = torch.randn(B, 3, 32, 32)
        y = torch.randint(0, 10, (B,))
        return model, x, y, F.cross_entropy
    if model_name == "gpt":
        B, T, V = 8, 256, 256
        model = Gpt(vocab=V, seq_len=T)
        x = torch.randint(0, V, (B, T))
        y = torch.randint(0, V, (B, T))

        def loss_fn(logits, targets):
            return F.cross_entropy(logits.view(-1, V), targets.view(-1))
        return model, x, y, loss_fn
    raise ValueError(f"unknown model {model_name}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, choices=["mlp", "vit", "gpt"])
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--foreach", type=int, default=0, choices=[0, 1],
                    help="AdamW foreach implementation (torch 1.13 default 0)")
    args = ap.parse_args()
    if args.threads < 1 or args.iters < 1 or args.warmup < 0:
        ap.error("need --threads >= 1, --iters >= 1, --warmup >= 0")

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model, x, y, loss_fn = build(args.model)
    init_weights(model)
    model.train()
    opt = torch.optim.AdamW(
        param_groups(model, 0.01), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
        foreach=bool(args.foreach))
    n_params = sum(p.numel() for p in model.parameters())

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(args.warmup):
        step()
    times_ms = []
    for _ in range(args.iters):
        t0 = time.perf_counter()
        loss = step()
        times_ms.append((time.perf_counter() - t0) * 1e3)
    if not math.isfinite(loss.item()):
        raise SystemExit(f"pytorch_step: non-finite loss {loss.item()}")
    print(f"pytorch model={args.model} threads={args.threads} "
          f"median_ms={statistics.median(times_ms):.3f} params={n_params}",
          flush=True)


if __name__ == "__main__":
    main()
