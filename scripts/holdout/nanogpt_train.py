"""Training GPT-2 small (124M) as nanoGPT's train.py does: bf16 autocast, fused AdamW, SDPA,
1024 tokens x 8 a step, and GPT-2's vocabulary of 50257 tokens as it comes."""

from __future__ import annotations

import torch
from common import lm_train_step, profile
from gpt_decode import DIM, LAYERS, Block
from torch import nn

SEQ, BATCH = 1024, 8


class GPT(nn.Module):
    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.wte, self.wpe = nn.Embedding(vocab, DIM), nn.Embedding(SEQ, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f, self.head = nn.LayerNorm(DIM), nn.Linear(DIM, vocab, bias=False)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x, _ = block(x, None)
        return self.head(self.ln_f(x))


def setup(vocab: int):
    torch.manual_seed(0)
    model = GPT(vocab).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, fused=True)
    ids = torch.randint(0, 50257, (BATCH, SEQ + 1), device="cuda")
    return lm_train_step(model, opt, ids[:, :-1], ids[:, 1:], vocab)


if __name__ == "__main__":
    profile("nanogpt_train", setup(50257))
