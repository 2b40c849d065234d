"""A small GPT-style training step, naive and tuned: several problems at once.

naive: fp32 matmuls (TF32 off), attention materializing T x T scores, AdamW(foreach=False),
``loss.item()`` every step and a fresh pageable input batch copied each step.
tuned: bf16 autocast, ``scaled_dot_product_attention``, AdamW(fused=True), the loss kept on the
device, and input batches copied from pinned memory with ``non_blocking``.
"""

from __future__ import annotations

import math

from .base import Built, check_variant

VOCAB, D, HEADS, LAYERS, T, BATCH = 8192, 768, 12, 4, 512, 8


def _model(tuned: bool):  # type: ignore[no-untyped-def]
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(D, 3 * D)
            self.proj = nn.Linear(D, D)
            self.register_buffer("mask", torch.ones(T, T, dtype=torch.bool).triu(1), False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, _ = x.shape
            q, k, v = self.qkv(x).view(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
            if tuned:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                s = (q @ k.transpose(-2, -1)) / math.sqrt(D // HEADS)
                s = s.masked_fill(self.mask[:t, :t], float("-inf"))
                y = torch.softmax(s, dim=-1) @ v
            return self.proj(y.transpose(1, 2).reshape(b, t, D))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
            self.attn = Attention()
            self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(VOCAB, D)
            self.pos = nn.Parameter(torch.zeros(T, D))
            self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
            self.ln = nn.LayerNorm(D)
            self.head = nn.Linear(D, VOCAB, bias=False)

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            x = self.tok(idx) + self.pos[: idx.shape[1]]
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x))

    return GPT().to("cuda")


def build(variant: str) -> Built:
    check_variant(variant, ("bad", "good"))
    import contextlib

    import torch
    import torch.nn.functional as F

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    tuned = variant == "good"
    model = _model(tuned)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4,
                            **({"fused": True} if tuned else {"foreach": False}))
    gen = torch.Generator().manual_seed(0)
    # a few pinned host batches reused round-robin, standing in for a pinned loader's output
    pinned = [torch.randint(0, VOCAB, (BATCH, T + 1), generator=gen).pin_memory() for _ in range(4)]
    state = {"i": 0, "loss_sum": torch.zeros((), device="cuda"), "log": []}

    def step() -> None:
        if tuned:
            batch = pinned[state["i"] % len(pinned)].to("cuda", non_blocking=True)
        else:
            batch = torch.randint(0, VOCAB, (BATCH, T + 1), generator=gen).to("cuda")  # pageable
        state["i"] += 1
        x, y = batch[:, :-1], batch[:, 1:]
        ctx = torch.autocast("cuda", dtype=torch.bfloat16) if tuned else contextlib.nullcontext()
        with ctx:
            logits = model(x)
            loss = F.cross_entropy(logits.float().view(-1, VOCAB), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if tuned:
            state["loss_sum"] += loss.detach()
        else:
            state["log"].append(loss.item())

    return Built(step, params={"vocab": VOCAB, "d_model": D, "heads": HEADS, "layers": LAYERS,
                               "seq": T, "batch": BATCH, "tuned": tuned})
