"""Training a small Llama-style model in eager PyTorch, the way model code is often written:
RMSNorm and rotary embeddings spelled out in tensor ops, a SwiGLU MLP, SDPA attention, bf16
autocast and fused AdamW."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from common import lm_train_step, profile
from torch import nn

LAYERS, DIM, HEADS, FFN, SEQ, BATCH, VOCAB = 8, 1024, 16, 2816, 1024, 8, 32000


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.n1, self.n2 = RMSNorm(DIM), RMSNorm(DIM)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(DIM, DIM, bias=False) for _ in range(4))
        self.w1, self.w3 = nn.Linear(DIM, FFN, bias=False), nn.Linear(DIM, FFN, bias=False)
        self.w2 = nn.Linear(FFN, DIM, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        h = self.n1(x)
        q, k, v = (w(h).view(b, t, HEADS, DIM // HEADS).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(y.transpose(1, 2).reshape(b, t, DIM))
        h = self.n2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm, self.head = RMSNorm(DIM), nn.Linear(DIM, VOCAB, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, DIM // HEADS, 2).float() / (DIM // HEADS)))
        freqs = torch.outer(torch.arange(SEQ).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, self.cos, self.sin)
        return self.head(self.norm(x))


def setup(compile_model: bool):
    torch.manual_seed(0)
    model = Llama().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), device="cuda")
    targets = torch.roll(ids, -1, dims=1)
    return lm_train_step(torch.compile(model) if compile_model else model, opt, ids, targets, VOCAB)


if __name__ == "__main__":
    profile("llama_eager_train", setup(compile_model=False))
