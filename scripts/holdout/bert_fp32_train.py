"""Fine-tuning a BERT-base-shaped encoder the way an older tutorial does it: FP32 throughout
(PyTorch's default, TF32 off for matmuls), attention written out as softmax(QK^T / sqrt(d)) V,
and the default AdamW (its multi-tensor implementation)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from common import profile
from torch import nn

LAYERS, DIM, HEADS, SEQ, BATCH, VOCAB, CLASSES = 6, 768, 12, 256, 32, 30522, 2


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.o = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.ff1, self.ff2 = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, mask):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).split(DIM, dim=2)
        q, k, v = (z.view(b, t, HEADS, DIM // HEADS).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(DIM // HEADS) + mask
        attn = self.drop(scores.softmax(-1))
        y = (attn @ v).transpose(1, 2).reshape(b, t, DIM)
        x = self.ln1(x + self.drop(self.o(y)))
        return self.ln2(x + self.drop(self.ff2(F.gelu(self.ff1(x)))))


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, DIM), nn.Embedding(512, DIM)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.cls = nn.Linear(DIM, CLASSES)

    def forward(self, ids, mask):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        for layer in self.layers:
            x = layer(x, mask)
        return self.cls(x[:, 0])


def main() -> None:
    torch.manual_seed(0)
    model = Encoder().cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), device="cuda")
    mask = torch.zeros(BATCH, 1, 1, SEQ, device="cuda")
    y = torch.randint(0, CLASSES, (BATCH,), device="cuda")

    def step() -> None:
        loss = F.cross_entropy(model(ids, mask), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    profile("bert_fp32_train", step)


if __name__ == "__main__":
    main()
