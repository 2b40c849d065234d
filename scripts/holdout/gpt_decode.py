"""Greedy decoding with a GPT-2-small-sized model (bf16, SDPA, a KV cache grown with torch.cat),
batch 1, as a quick generation script is written: one token at a time, and ``.item()`` on each
new token to stop at the end-of-sequence token. A profiled step generates 32 tokens."""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from common import profile
from torch import nn

LAYERS, DIM, HEADS, VOCAB, PROMPT, NEW_TOKENS, EOS = 12, 768, 12, 50257, 32, 32, 50256


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.fc, self.out = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x, cache):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(DIM, dim=2)
        q, k, v = (z.view(b, t, HEADS, DIM // HEADS).transpose(1, 2) for z in (q, k, v))
        if cache is not None:
            k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, DIM))
        return x + self.out(F.gelu(self.fc(self.ln2(x)))), (k, v)


class GPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, DIM), nn.Embedding(1024, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f, self.head = nn.LayerNorm(DIM), nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, idx, pos, caches):
        x = self.wte(idx) + self.wpe(pos)
        new = []
        for block, cache in zip(self.blocks, caches, strict=True):
            x, c = block(x, cache)
            new.append(c)
        return self.head(self.ln_f(x[:, -1])), new


@torch.no_grad()
def generate(model, prompt):
    caches = [None] * LAYERS
    idx, pos = prompt, torch.arange(prompt.shape[1], device=prompt.device)[None]
    out = []
    for _ in range(NEW_TOKENS):
        logits, caches = model(idx, pos, caches)
        idx = logits.argmax(-1, keepdim=True)
        out.append(idx)
        # the host waits for every token (HOLDOUT_VARIANT=nosync: a check the fix would defer)
        if os.environ.get("HOLDOUT_VARIANT") != "nosync" and idx.item() == EOS:
            break
        pos = pos[:, -1:] + 1
    return torch.cat(out, 1)


def main() -> None:
    torch.manual_seed(0)
    model = GPT().cuda().to(torch.bfloat16).eval()
    prompt = torch.randint(0, EOS, (1, PROMPT), device="cuda")
    profile("gpt_decode", lambda: generate(model, prompt))


if __name__ == "__main__":
    main()
