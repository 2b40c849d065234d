"""Strided elementwise: a residual add whose second operand is a transposed view, before a GEMM.

bad: ``h = x + w.t()`` on 8192 x 8192 bf16 tensors, then ``h @ v``: the add's kernel walks
``x``'s layout, so each warp reads ``w`` down a column, one element from each of 32 rows, and
uses 2 bytes of every 32-byte sector it fetches. good: ``w`` transposed once, before the steps
(``w.t().contiguous()``); the same add then reads both operands in order. Only the layout of one
operand differs; the GEMM between adds keeps them from forming an elementwise chain.
"""

from __future__ import annotations

from .base import Built, check_variant

N = 8192
REPEATS = 4


def build(variant: str) -> Built:
    check_variant(variant, ("bad", "good"))
    import torch

    torch.manual_seed(0)
    x = torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(N, N, device="cuda", dtype=torch.bfloat16) / N**0.5
    other = w.t() if variant == "bad" else w.t().contiguous()

    def step() -> None:
        for _ in range(REPEATS):
            y = (x + other) @ v
        del y

    return Built(step, params={"n": N, "repeats": REPEATS, "dtype": "bfloat16",
                               "other_strides": list(other.stride())})
