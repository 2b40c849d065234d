"""Odd matmul shapes: BF16 GEMMs whose dimensions are 4095, not a multiple of 8 or 64.

Rows of 4095 bf16 values are not 16-byte aligned, so cuBLAS cannot use its fastest (TMA,
vectorised) kernels and tiles end ragged. good: the same work padded to 4096.
"""

from __future__ import annotations

from .base import Built, check_variant

CHAIN = 4


def build(variant: str) -> Built:
    check_variant(variant, ("bad", "good"))
    import torch

    torch.manual_seed(0)
    dim = 4095 if variant == "bad" else 4096
    a = torch.randn(dim, dim, device="cuda", dtype=torch.bfloat16)
    ws = [torch.randn(dim, dim, device="cuda", dtype=torch.bfloat16) / dim**0.5
          for _ in range(CHAIN)]

    def step() -> None:
        x = a
        for w in ws:
            x = x @ w

    return Built(step, params={"dim": dim, "chain": CHAIN, "dtype": "bf16"})
